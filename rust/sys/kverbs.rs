// SPDX-License-Identifier: GPL-2.0

//! rsiw as a kernel consumer of its own devices, through the RDMA core's kernel verbs
//! (`ib_alloc_pd`, `ib_create_qp`, `ib_post_send`, `ib_poll_cq`, ...): safe owners of
//! kernel PDs, CQs, QPs, SRQs and MRs for the KUnit suite `rsiw_kverbs`, which checks what
//! a kernel ULP (NVMe-oF, NFS/RDMA, iSER) sees.
//!
//! Every object borrows what it was created from (a QP its PD and CQs, a PD its device), so
//! the borrow checker enforces the core's destruction order; dropping an object destroys
//! it. All objects of a [`KDevice<T>`] belong to an rsiw device of type `T`, which lets
//! [`KQp::driver`] and [`KSrq::driver`] hand out rsiw's own view of them.
//!
//! The objects live in submodules:
//! - this file: the device reference, event recording and work completion accessors;
//! - [`pd`]: protection domains ([`KPd`]);
//! - [`cq`]: completion queues ([`KCq`]);
//! - [`wr`]: work requests and the linked lists the posting verbs take;
//! - [`qp`]: queue pairs ([`KQp`]) and their capabilities;
//! - [`srq`]: shared receive queues ([`KSrq`]);
//! - [`mr`]: fast-registration memory regions ([`KMr`]);
//! - [`chain`]: Sends posted from completion handlers ([`SoftirqChain`]).

mod chain;
mod cq;
mod mr;
mod pd;
mod qp;
mod srq;
mod wr;

pub(crate) use chain::SoftirqChain;
pub(crate) use cq::KCq;
pub(crate) use mr::KMr;
pub(crate) use pd::KPd;
pub(crate) use qp::{Caps, KQp};
pub(crate) use srq::KSrq;
pub(crate) use wr::{PostFail, RecvReq, SendReq, Sge};

use super::bindings;
use super::ibdev::{DeviceOps, IbDevice};
use super::net::netdev::{NetDev, NetDevRef};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::ffi::c_void;
use kernel::prelude::*;

/// The module name the core records as the creator of kernel objects.
const CALLER: &CStr = c"rsiw";

/// Turns an `ERR_PTR`-or-object return value into a non-null pointer.
fn from_err_ptr<T>(p: *mut T) -> Result<NonNull<T>> {
    let p = kernel::error::from_err_ptr(p)?;
    NonNull::new(p).ok_or(ENOMEM)
}

/// Returns the network device `name` of the initial network namespace, with a reference.
pub(crate) fn netdev_by_name(name: &CStr) -> Option<NetDevRef> {
    // SAFETY: `init_net` lives as long as the kernel; `dev_get_by_name` returns a held
    // device or null, and the reference is transferred to the `NetDevRef`.
    unsafe {
        let p = bindings::dev_get_by_name(&raw mut bindings::init_net, name.as_char_ptr());
        NetDevRef::from_owned(p)
    }
}

/// The `wr_id` of a work completion.
pub(crate) fn wc_wr_id(wc: &bindings::ib_wc) -> u64 {
    // SAFETY: both union members (`wr_id`, `wr_cqe`) are 64 bits of plain data.
    unsafe { wc.__bindgen_anon_1.wr_id }
}

/// The invalidated rkey of a work completion (meaningful with `IB_WC_WITH_INVALIDATE`).
pub(crate) fn wc_invalidate_rkey(wc: &bindings::ib_wc) -> u32 {
    // SAFETY: both union members (`imm_data`, `invalidate_rkey`) are 32-bit integers.
    unsafe { wc.ex.invalidate_rkey }
}

/// A reference to a registered rsiw device of type `T`.
///
/// # Invariants
///
/// `raw` is an `IbDevice<T>` of rsiw on which this value holds a reference
/// (`ib_device_get_by_netdev`), so it stays allocated and registered or unregistering.
pub(crate) struct KDevice<T: DeviceOps> {
    raw: NonNull<bindings::ib_device>,
    _t: PhantomData<T>,
}

impl<T: DeviceOps> KDevice<T> {
    /// The rsiw device bound to `ndev`, or `None` if there is none (or it is the C siw's).
    pub(crate) fn of_netdev(ndev: &NetDev) -> Option<Self> {
        // SAFETY: `ndev` is live; the lookup returns a referenced device or null.
        let raw = NonNull::new(unsafe {
            bindings::ib_device_get_by_netdev(
                ndev.as_ptr(),
                bindings::rdma_driver_id_RDMA_DRIVER_SIW,
            )
        })?;
        // SAFETY: the device is live and referenced; `ops` is a plain copy we may read.
        if unsafe { (*raw.as_ptr()).ops.owner } != super::this_module() {
            // SAFETY: balances the lookup.
            unsafe { bindings::ib_device_put(raw.as_ptr()) };
            return None;
        }
        // INVARIANT: rsiw creates devices only through `NewDevice<T>` with its one device
        // type, so an rsiw-owned device is an `IbDevice<T>`; the lookup's reference is ours.
        Some(Self {
            raw,
            _t: PhantomData,
        })
    }

    /// rsiw's view of the device.
    pub(crate) fn driver(&self) -> &IbDevice<T> {
        // SAFETY: a live `IbDevice<T>` (type invariant) for as long as `self` is borrowed.
        unsafe { IbDevice::<T>::from_raw(self.raw.as_ptr()) }
    }

    /// Unregisters the device (synchronously; it is freed when the last reference goes).
    pub(crate) fn unregister(self) {
        let raw = self.raw.as_ptr();
        core::mem::forget(self);
        // SAFETY: the reference of the forgotten value is handed to the call, which drops
        // it after unregistering.
        unsafe { bindings::ib_unregister_device_and_put(raw) };
    }

    /// The core's pointer, live while `self` is borrowed.
    fn as_raw(&self) -> *mut bindings::ib_device {
        self.raw.as_ptr()
    }
}

impl<T: DeviceOps> Drop for KDevice<T> {
    fn drop(&mut self) {
        // SAFETY: balances the reference of the lookup (type invariant).
        unsafe { bindings::ib_device_put(self.raw.as_ptr()) };
    }
}

/// Waits until every completion handler call queued for a vector's CPU so far has run.
pub(crate) fn flush_comp_calls() {
    // SAFETY: the work queue exists while the module is loaded; the caller may sleep.
    unsafe { bindings::rsiw_wq_flush() };
}

/// Whether `cpu` is an online CPU.
pub(crate) fn cpu_online(cpu: u32) -> bool {
    // SAFETY: `rsiw_cpu_online` takes any CPU number.
    unsafe { bindings::rsiw_cpu_online(cpu) }
}

/// Asynchronous events and completion handler calls received by a kernel object.
pub(crate) struct Events {
    count: AtomicU32,
    last: AtomicU32,
    cpu: AtomicU32,
}

impl Events {
    /// What [`Events::last`] reports after a completion handler call.
    pub(crate) const COMPLETION: u32 = u32::MAX - 1;

    /// No event yet.
    pub(crate) const fn new() -> Self {
        Self {
            count: AtomicU32::new(0),
            last: AtomicU32::new(u32::MAX),
            cpu: AtomicU32::new(u32::MAX),
        }
    }

    /// The CPU the last completion handler call ran on, `u32::MAX` if none.
    pub(crate) fn cpu(&self) -> u32 {
        self.cpu.load(Ordering::Acquire)
    }

    /// How many events (or completion handler calls) arrived.
    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// The type of the last event (`IB_EVENT_*`), `u32::MAX` if none.
    pub(crate) fn last(&self) -> u32 {
        self.last.load(Ordering::Acquire)
    }

    fn record(&self, what: u32) {
        self.last.store(what, Ordering::Release);
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// The context to register with [`Events::event_c`] and [`Events::comp_c`].
    fn as_ctx(&'static self) -> *mut c_void {
        core::ptr::from_ref(self).cast_mut().cast()
    }

    /// # Safety
    ///
    /// Called by the RDMA core with a valid event and the context from `as_ctx`.
    unsafe extern "C" fn event_c(ev: *mut bindings::ib_event, ctx: *mut c_void) {
        // SAFETY: `ctx` is a `&'static Events` (`as_ctx`); `ev` is valid for the call.
        unsafe { (*ctx.cast::<Events>()).record((*ev).event) };
    }

    /// # Safety
    ///
    /// Called by the RDMA core with the context from `as_ctx`.
    unsafe extern "C" fn comp_c(_cq: *mut bindings::ib_cq, ctx: *mut c_void) {
        // SAFETY: `ctx` is a `&'static Events` (`as_ctx`).
        let this = unsafe { &*ctx.cast::<Events>() };
        this.cpu
            .store(kernel::cpu::CpuId::current().as_u32(), Ordering::Release);
        this.record(Events::COMPLETION);
    }
}
