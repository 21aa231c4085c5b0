// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: the `struct ib_device` container and its operation table, registration,
//! and the registry of rsiw's own devices. The verbs a driver implements are the traits of
//! [`ops`]; the trampolines that call them live beside it, one file per core object
//! (`device.rs`, `cq.rs`, `qp.rs`, `srq.rs`, `mr.rs`; iw_cm's in `sys/iwcm.rs`).
//!
//! Lifetime of a device (the RDMA core's "dealloc_driver" flow):
//! 1. [`NewDevice::new`] allocates the container with `_ib_alloc_device`, initialises the
//!    Rust part in place and installs the operation table.
//! 2. [`NewDevice::register`] adds it to the [`Registry`] and calls `ib_register_device`.
//! 3. Unregistration (`rdma link del`, netdev removal, module unload) ends in the core
//!    calling `dealloc_driver`, where the Rust part is removed from the registry and
//!    dropped in place; the core frees the memory afterwards.

mod cq;
mod device;
mod mr;
pub(crate) mod ops;
mod qp;
mod registry;
mod srq;

pub(crate) use device::ib_mtu;
pub(crate) use ops::{
    CepOps, Completion, CqAttr, CqNotify, CqOps, DeviceAttr, DeviceOps, ListenerOps, MrOps,
    Objects, PortAttr, QpAttrs, QpCap, QpInit, QpModify, QpOps, QpState, ResAttrs, SrqAttr,
    SrqModify, SrqOps, WcSlot,
};
pub(crate) use registry::Registry;

/// The most sysfs attributes a device type can have ([`DeviceOps::ATTRS`]).
pub(crate) const MAX_ATTRS: usize = bindings::RSIW_MAX_ATTRS as usize;

use super::bindings;
use super::idtable::RawIdTable;
use super::iwcm::CmIdTable;
use super::net::netdev::{NetDev, NetDevRef};
use super::obj::{IbCq, IbMr, IbQp, IbSrq, IbUcontext};
use core::mem::{size_of, MaybeUninit};
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::sync::{new_spinlock, new_spinlock_irq, SpinLock, SpinLockIrq};
use kernel::types::Opaque;

/// An RDMA device: the core's `struct ib_device` followed by the driver's data `T`.
///
/// # Invariants
///
/// `base` was allocated by `_ib_alloc_device` with the size of `Self` and initialised by
/// the core; `data` is initialised; the memory stays valid while the core holds a
/// reference to the device, which it does for the whole time it calls device operations.
#[repr(C)]
pub(crate) struct IbDevice<T> {
    base: Opaque<bindings::ib_device>,
    /// The device's QPs by number (see `ibdev/qp.rs`).
    pub(super) qps: RawIdTable,
    /// The details of the `iw_cm_id`s the driver holds, by the id's address (see
    /// [`super::iwcm::CmIdDetails`]).
    pub(super) cm_ids: SpinLock<CmIdTable>,
    /// The sysfs attributes of [`DeviceOps::ATTRS`] (the core's `ops.device_group`).
    attrs: Opaque<bindings::rsiw_attr_group>,
    /// The numbers of the QPs whose receive queue the sweep looks at again
    /// ([`IbDevice::sweep_rq_later`]).
    sweep_qpns: SpinLockIrq<KVec<u32>>,
    /// The sweep's delayed run, cancelled in `dealloc_driver`.
    sweep: Opaque<bindings::rsiw_delayed>,
    data: T,
}

impl<T> core::ops::Deref for IbDevice<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T> IbDevice<T> {
    /// Returns the device behind a core pointer.
    ///
    /// # Safety
    ///
    /// `raw` is the `ib_device` of a live `IbDevice<T>` (its ops are `Self::OPS`), and
    /// stays live for `'a`.
    pub(super) unsafe fn from_raw<'a>(raw: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `base` is the first field of a `repr(C)` struct, so the container starts
        // at `raw`; the caller guarantees it is a live `IbDevice<T>`.
        unsafe { &*raw.cast::<Self>() }
    }
}

impl<T: DeviceOps> IbDevice<T> {
    /// The operation table shared by all devices of type `T`. `owner` is set per device.
    const OPS: bindings::ib_device_ops = {
        // SAFETY: `ib_device_ops` is a C struct of integers and nullable function and data
        // pointers, for all of which all-zeroes is a valid value (absent operation).
        let mut ops: bindings::ib_device_ops = unsafe { MaybeUninit::zeroed().assume_init() };
        ops.driver_id = bindings::rdma_driver_id_RDMA_DRIVER_SIW;
        ops.uverbs_abi_ver = bindings::SIW_ABI_VERSION;
        ops.query_device = Some(Self::query_device_c);
        ops.query_port = Some(Self::query_port_c);
        ops.query_gid = Some(Self::query_gid_c);
        ops.get_port_immutable = Some(Self::port_immutable_c);
        ops.alloc_ucontext = Some(Self::alloc_ucontext_c);
        ops.dealloc_ucontext = Some(Self::dealloc_ucontext_c);
        ops.alloc_pd = Some(Self::alloc_pd_c);
        ops.dealloc_pd = Some(Self::dealloc_pd_c);
        ops.dealloc_driver = Some(Self::dealloc_driver_c);
        ops.alloc_hw_port_stats = Some(Self::alloc_hw_port_stats_c);
        ops.get_hw_stats = Some(Self::get_hw_stats_c);
        // iw_cm calls these without checking for NULL.
        ops.iw_connect = Some(Self::iw_connect_c);
        ops.iw_accept = Some(Self::iw_accept_c);
        ops.iw_reject = Some(Self::iw_reject_c);
        ops.iw_create_listen = Some(Self::iw_create_listen_c);
        ops.iw_destroy_listen = Some(Self::iw_destroy_listen_c);
        ops.iw_get_qp = Some(Self::iw_get_qp_c);
        ops.iw_add_ref = Some(Self::iw_add_ref_c);
        ops.iw_rem_ref = Some(Self::iw_rem_ref_c);
        ops.mmap = Some(super::mem::umap::mmap_c);
        ops.mmap_free = Some(super::mem::umap::mmap_free_c);
        // Present, so the core may take a device away from its user contexts (see
        // `disassociate_ucontext_c`).
        ops.disassociate_ucontext = Some(Self::disassociate_ucontext_c);
        ops.create_cq = Some(Self::create_cq_c);
        ops.pre_destroy_cq = Some(Self::pre_destroy_cq_c);
        ops.destroy_cq = Some(Self::destroy_cq_c);
        ops.poll_cq = Some(Self::poll_cq_c);
        ops.req_notify_cq = Some(Self::req_notify_cq_c);
        ops.create_qp = Some(Self::create_qp_c);
        ops.destroy_qp = Some(Self::destroy_qp_c);
        ops.modify_qp = Some(Self::modify_qp_c);
        if <T::Qp as QpOps<T>>::HAS_QUERY {
            ops.query_qp = Some(Self::query_qp_c);
        }
        if <T::Qp as QpOps<T>>::HAS_RES_ATTRS {
            ops.fill_res_qp_entry = Some(Self::fill_res_qp_entry_c);
        }
        if !T::CM_ID_ATTRS.is_empty() {
            ops.fill_res_cm_id_entry = Some(Self::fill_res_cm_id_entry_c);
        }
        ops.post_send = Some(Self::post_send_c);
        ops.post_recv = Some(Self::post_recv_c);
        ops.create_srq = Some(Self::create_srq_c);
        ops.destroy_srq = Some(Self::destroy_srq_c);
        if <T::Srq as SrqOps<T>>::HAS_MODIFY {
            ops.modify_srq = Some(Self::modify_srq_c);
        }
        if <T::Srq as SrqOps<T>>::HAS_QUERY {
            ops.query_srq = Some(Self::query_srq_c);
        }
        ops.post_srq_recv = Some(Self::post_srq_recv_c);
        ops.get_dma_mr = Some(Self::get_dma_mr_c);
        ops.reg_user_mr = Some(Self::reg_user_mr_c);
        if <T::Mr as MrOps<T>>::HAS_ALLOC_FAST {
            ops.alloc_mr = Some(Self::alloc_mr_c);
        }
        // The three steps of `map_mr_sg` come together.
        if <T::Mr as MrOps<T>>::HAS_MAP_BEGIN {
            ops.map_mr_sg = Some(Self::map_mr_sg_c);
        }
        ops.dereg_mr = Some(Self::dereg_mr_c);
        ops.size_ib_ucontext = size_of::<IbUcontext>();
        ops.size_ib_pd = size_of::<bindings::ib_pd>();
        // The core allocates these with kzalloc (8-octet alignment), see `new` asserts.
        ops.size_ib_cq = size_of::<IbCq<T::Cq>>();
        ops.size_ib_qp = size_of::<IbQp<T::Qp>>();
        ops.size_ib_srq = size_of::<IbSrq<T::Srq>>();
        ops
    };

    /// Returns the raw `ib_device` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.base.get()
    }

    /// Copies the device's name ("rsiw0") into `buf`, cut to fit; returns its length in
    /// octets.
    pub(crate) fn name_into(&self, buf: &mut [u8]) -> usize {
        // SAFETY: the device is live (invariant).
        unsafe { raw_name_into(self.as_raw(), buf) }
    }

    /// Returns the netdev bound to port 1, with a reference, or `None` if it is gone.
    pub(crate) fn netdev(&self) -> Option<NetDevRef> {
        // SAFETY: the device is live; the core returns a held netdev or null, and the
        // reference is transferred to the `NetDevRef`.
        unsafe { NetDevRef::from_owned(bindings::ib_device_get_netdev(self.as_raw(), 1)) }
    }

    /// Returns the IB speed and width equivalent of the Ethernet link speed of `port`
    /// (`ib_get_eth_speed()`).
    ///
    /// # Errors
    ///
    /// The error of `ib_get_eth_speed` (`EINVAL` for a bad port, `ENODEV` without netdev).
    pub(crate) fn eth_speed(&self, port: u32, speed: &mut u16, width: &mut u8) -> Result {
        // SAFETY: the device is live; `speed` and `width` are valid for writes.
        super::to_result(unsafe { bindings::ib_get_eth_speed(self.as_raw(), port, speed, width) })
    }

    /// Dispatches the port state of `ndev` (active/down) to the device's event handlers.
    pub(crate) fn dispatch_port_state(&self, ndev: &NetDev) {
        // SAFETY: the device is live (type invariant) and `ndev` is a live netdev.
        unsafe { bindings::ib_dispatch_port_state_event(self.as_raw(), ndev.as_ptr()) };
    }

    /// Reports that the GID of port 1 changed (`IB_EVENT_GID_CHANGE`).
    pub(crate) fn dispatch_gid_change(&self) {
        self.dispatch_port_event(bindings::ib_event_type_IB_EVENT_GID_CHANGE);
    }

    /// Dispatches an asynchronous port event (`IB_EVENT_*`) for port 1.
    fn dispatch_port_event(&self, event: bindings::ib_event_type) {
        // SAFETY: all-zeroes is a valid `ib_event` (null device, port 0).
        let mut ev: bindings::ib_event = unsafe { MaybeUninit::zeroed().assume_init() };
        ev.device = self.as_raw();
        ev.event = event;
        ev.element.port_num = 1;
        // SAFETY: `ev` is a valid event for a live device; the core copies what it needs.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }

    /// Queues the device's unregistration (safe from notifier context).
    pub(crate) fn unregister_queued(&self) {
        // SAFETY: the device is live and registered or being registered; the core takes
        // its own reference for the queued work.
        unsafe { bindings::ib_unregister_device_queued(self.as_raw()) };
    }
}

/// Maps a verb's result to the C convention: 0 or a negative errno.
pub(super) fn errno(r: Result) -> kernel::ffi::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// A device allocated and initialised, not yet registered. Dropping it frees the device.
///
/// # Invariants
///
/// `ptr` is an `IbDevice<T>` from `_ib_alloc_device` with initialised data and
/// `IbDevice::<T>::OPS` installed, owned by this value (not registered).
pub(crate) struct NewDevice<T: DeviceOps> {
    ptr: NonNull<IbDevice<T>>,
}

impl<T: DeviceOps> NewDevice<T> {
    /// Allocates a device in network namespace `net` and initialises its data with `init`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `init`.
    pub(crate) fn new<E>(ndev: &NetDev, init: impl PinInit<T, E>) -> Result<Self>
    where
        Error: From<E>,
    {
        const {
            assert!(core::mem::align_of::<IbDevice<T>>() <= 8);
            assert!(core::mem::align_of::<IbCq<T::Cq>>() <= 8);
            assert!(core::mem::align_of::<IbQp<T::Qp>>() <= 8);
            assert!(core::mem::align_of::<IbSrq<T::Srq>>() <= 8);
            assert!(core::mem::align_of::<IbMr<T::Mr>>() <= 8);
        };
        // SAFETY: the size covers the `ib_device` at offset 0; kzalloc alignment (8)
        // suffices for `IbDevice<T>` (asserted above).
        let raw = unsafe { bindings::_ib_alloc_device(size_of::<IbDevice<T>>(), ndev.net()) };
        let raw = NonNull::new(raw).ok_or(ENOMEM)?;
        let this = raw.cast::<IbDevice<T>>();
        // The sweep's argument is the device, which cancels it in `dealloc_driver`.
        // SAFETY: the fields lie inside the allocation, aligned and pinned; infallible inits.
        unsafe {
            let qps = core::ptr::addr_of_mut!((*this.as_ptr()).qps);
            let Ok(()) = RawIdTable::new(1).__init(qps);
            let cm_ids = core::ptr::addr_of_mut!((*this.as_ptr()).cm_ids);
            let Ok(()) = new_spinlock!(CmIdTable::new(), "rsiw_cm_ids").__init(cm_ids);
            let qpns = core::ptr::addr_of_mut!((*this.as_ptr()).sweep_qpns);
            let Ok(()) = new_spinlock_irq!(KVec::new(), "rsiw_rq_sweep").__init(qpns);
            bindings::rsiw_delayed_init(
                Opaque::cast_into(core::ptr::addr_of!((*this.as_ptr()).sweep)),
                Some(IbDevice::<T>::sweep_c),
                this.as_ptr().cast(),
            );
        }
        // SAFETY: `data` lies inside the allocation, is properly aligned and pinned (the
        // device never moves); on error `init` leaves it uninitialised.
        let slot = unsafe { core::ptr::addr_of_mut!((*this.as_ptr()).data) };
        // SAFETY: see above.
        if let Err(e) = unsafe { init.__init(slot) } {
            // The sweep was never queued; no ops are installed, so no `dealloc_driver` runs.
            // SAFETY: `qps`, `cm_ids` and `sweep_qpns` are initialised and unused.
            unsafe {
                core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this.as_ptr()).qps));
                core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this.as_ptr()).cm_ids));
                core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this.as_ptr()).sweep_qpns));
                bindings::ib_dealloc_device(raw.as_ptr());
            }
            return Err(Error::from(e));
        }
        // SAFETY: the device is exclusively ours; `OPS` is a promoted `'static` constant.
        unsafe {
            bindings::ib_set_device_ops(raw.as_ptr(), Self::ops());
            (*raw.as_ptr()).ops.owner = super::this_module();
            // The siw user ABI's SQ doorbell is the legacy POST_SEND write command with an
            // empty list, which the core enables only for drivers that ask for it.
            // POLL_CQ stays off: a user CQE's QP field is user memory, and the core would
            // dereference it as `ib_wc.qp` (`test_kernel_poll_of_a_user_cq_is_refused`).
            (*raw.as_ptr()).uverbs_cmd_mask |=
                1u64 << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND;
        }
        // INVARIANT: allocated, data initialised, ops installed, not registered.
        let mut dev = Self { ptr: this };
        dev.install_attrs()?;
        Ok(dev)
    }

    /// Makes [`DeviceOps::ATTRS`] the device's sysfs attributes.
    ///
    /// # Errors
    ///
    /// `ENOSPC` for more than [`MAX_ATTRS`] attributes.
    fn install_attrs(&mut self) -> Result {
        const { assert!(T::ATTRS.len() <= MAX_ATTRS) };
        // SAFETY: the unregistered device is exclusively ours (type invariant); `attrs`
        // lies in it and lives until the core frees the device.
        unsafe {
            let g = (*self.ptr.as_ptr()).attrs.get();
            bindings::rsiw_attr_group_init(self.raw(), g);
            for name in T::ATTRS {
                // The names are `'static`.
                super::to_result(bindings::rsiw_attr_group_add(
                    g,
                    name.as_char_ptr(),
                    Some(IbDevice::<T>::show_attr_c),
                    Some(IbDevice::<T>::store_attr_c),
                ))?;
            }
        }
        Ok(())
    }

    fn ops() -> &'static bindings::ib_device_ops {
        &IbDevice::<T>::OPS
    }

    fn raw(&self) -> *mut bindings::ib_device {
        self.ptr.as_ptr().cast()
    }

    /// Sets the node type (`RDMA_NODE_*`), the port count (1), the number of completion
    /// vectors, the node GUID (8 octets, network order) and the node description.
    pub(crate) fn set_identity(&mut self, guid: [u8; 8], desc: &[u8], comp_vectors: i32) {
        // SAFETY: the unregistered device is exclusively ours (type invariant).
        let dev = unsafe { &mut *self.raw() };
        dev.node_type = bindings::RDMA_NODE_RNIC as u8;
        dev.phys_port_cnt = 1;
        dev.num_comp_vectors = comp_vectors;
        dev.node_guid = u64::from_ne_bytes(guid);
        let n = desc.len().min(dev.node_desc.len() - 1);
        for (d, s) in dev.node_desc.iter_mut().zip(desc[..n].iter()) {
            *d = *s;
        }
    }

    /// Binds port 1 to `ndev` (`ib_device_set_netdev`) and names it for iw_cm
    /// (`iw_ifname`, `IW_F_NO_PORT_MAP`).
    ///
    /// # Errors
    ///
    /// The error of `ib_device_set_netdev`.
    pub(crate) fn set_netdev(&mut self, ndev: &NetDev) -> Result {
        {
            // SAFETY: the unregistered device is exclusively ours (type invariant).
            let dev = unsafe { &mut *self.raw() };
            // iw_cm's port mapper names the interface; rsiw, like siw, uses real ports.
            let name = ndev.name();
            let n = name.len().min(dev.iw_ifname.len() - 1);
            for (d, s) in dev.iw_ifname.iter_mut().zip(name[..n].iter()) {
                *d = *s as kernel::ffi::c_char;
            }
            dev.iw_driver_flags = bindings::iw_flags_IW_F_NO_PORT_MAP;
        }
        // SAFETY: the device and `ndev` are live; the core takes its own netdev reference.
        super::to_result(unsafe { bindings::ib_device_set_netdev(self.raw(), ndev.as_ptr(), 1) })
    }

    /// Registers the device as `name` with the RDMA core; from here on the core owns it.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `ib_register_device` (for example a name already in use);
    /// the device is freed.
    pub(crate) fn register(self, name: &CStr) -> Result {
        let raw = self.raw();
        Registry::add(raw)?;
        core::mem::forget(self);
        // SAFETY: `raw` is an allocated, unregistered device owned by us (type invariant
        // of the forgotten `NewDevice`); `name` is NUL-terminated.
        let ret = unsafe {
            bindings::rsiw_mark_name_assigned_by_user(raw);
            bindings::ib_register_device(raw, name.as_char_ptr(), core::ptr::null_mut())
        };
        if ret != 0 {
            // SAFETY: after a failed registration the caller frees the device; this runs
            // `dealloc_driver`, which removes it from the registry.
            unsafe { bindings::ib_dealloc_device(raw) };
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }
}

impl<T: DeviceOps> Drop for NewDevice<T> {
    fn drop(&mut self) {
        // SAFETY: the device is allocated, initialised and not registered (type
        // invariant); `ib_dealloc_device` runs `dealloc_driver` and frees it.
        unsafe { bindings::ib_dealloc_device(self.raw()) };
    }
}

/// A port counter descriptor for [`DeviceOps::HW_STATS`]: the counter's name as `rdma
/// statistic` and sysfs show it.
pub(crate) const fn stat_desc(name: &'static CStr) -> bindings::rdma_stat_desc {
    bindings::rdma_stat_desc {
        name: kernel::str::as_char_ptr_in_const_context(name),
        flags: 0,
        priv_: core::ptr::null(),
    }
}

/// Looks up the RDMA device bound to `ndev` and, if it is one of rsiw's (type `T`), runs
/// `f` on it while holding a reference. Returns whether any soft-iWARP device (rsiw's or
/// the C siw's, which share the driver id) is bound to `ndev`.
pub(crate) fn with_device_of<T: DeviceOps>(ndev: &NetDev, f: impl FnOnce(&IbDevice<T>)) -> bool {
    // SAFETY: `ndev` is live; the lookup returns a referenced device or null.
    let raw = unsafe {
        bindings::ib_device_get_by_netdev(ndev.as_ptr(), bindings::rdma_driver_id_RDMA_DRIVER_SIW)
    };
    if raw.is_null() {
        return false;
    }
    // SAFETY: `raw` is a live, referenced device; its `ops` is a plain copy we may read.
    let ours = unsafe { (*raw).ops.owner } == super::this_module();
    if ours {
        // SAFETY: rsiw creates devices only through `NewDevice<T>` (one device type), so
        // `owner` identifies an `IbDevice<T>`; the lookup's reference keeps it live.
        f(unsafe { IbDevice::<T>::from_raw(raw) });
    }
    // SAFETY: balances `ib_device_get_by_netdev`.
    unsafe { bindings::ib_device_put(raw) };
    true
}

/// Milliseconds between two runs of the receive-queue sweep.
const SWEEP_MS: u32 = 100;

impl<T: Objects> IbDevice<T> {
    /// Has [`QpOps::sweep_rq`] look at QP `qpn` every `SWEEP_MS` milliseconds (100) until
    /// it answers `false` or the QP is gone. For user QPs in ERROR: the siw user ABI has
    /// no receive doorbell, so a receive WQE a consumer posts after the flush is seen only
    /// by looking. The caller lists a QP at most once at a time (the sweep does not look
    /// for duplicates), so the list holds at most one entry per QP. Any context. Returns
    /// `false` if the QP could not be listed (no memory, GFP_ATOMIC).
    pub(crate) fn sweep_rq_later(&self, qpn: u32) -> bool {
        if self.sweep_qpns.lock().push(qpn, GFP_ATOMIC).is_err() {
            return false;
        }
        // SAFETY: `sweep` was initialised with this device, which outlives it.
        unsafe { bindings::rsiw_delayed_queue(self.sweep.get(), SWEEP_MS) };
        true
    }

    /// The sweep's run (process context, rsiw's workqueue): each listed QP that still
    /// exists gets [`QpOps::sweep_rq`]; those it keeps stay listed, and the sweep runs
    /// again while any is. A QP the sweep cannot keep listed (no memory to merge the
    /// lists) is told so ([`QpOps::sweep_unlisted`]).
    ///
    /// # Safety
    ///
    /// `arg` is a live `IbDevice<T>` (it cancels the sweep before it is freed).
    unsafe extern "C" fn sweep_c(arg: *mut kernel::ffi::c_void) {
        // SAFETY: guaranteed by the caller.
        let dev = unsafe { &*arg.cast::<Self>() };
        // Every hold of the list's lock (interrupts off) is O(1) but for the callers'
        // pushes: the list is taken and put back whole, and merged with interrupts on.
        let mut qpns = core::mem::take(&mut *dev.sweep_qpns.lock());
        qpns.retain(|qpn| {
            let keep = dev.qp_ref(*qpn).is_some_and(|r| T::Qp::sweep_rq(r.qp()));
            // Up to a ring's pass for each of up to `max_qp` QPs: others run between two.
            // SAFETY: process context (a work item), no lock held.
            unsafe { bindings::rsiw_cond_resched() };
            keep
        });
        let again = loop {
            let mut listed = dev.sweep_qpns.lock();
            if listed.is_empty() {
                *listed = qpns;
                break !listed.is_empty();
            }
            // QPs listed while this ran: merged with the kept ones outside the lock.
            let newly = core::mem::take(&mut *listed);
            drop(listed);
            for qpn in newly {
                if qpns.push(qpn, GFP_KERNEL).is_err() {
                    if let Some(r) = dev.qp_ref(qpn) {
                        T::Qp::sweep_unlisted(r.qp());
                    }
                }
            }
        };
        if again {
            // SAFETY: as in `sweep_rq_later`.
            unsafe { bindings::rsiw_delayed_queue(dev.sweep.get(), SWEEP_MS) };
        }
    }

    /// A counted reference to QP `qpn` of this device (for the transport of a connection),
    /// or `None` if no such QP exists. The QP's destroy waits until it is dropped.
    pub(crate) fn qp_ref(&self, qpn: u32) -> Option<QpRef<T>> {
        let qp = self.qps.with(qpn, |p| {
            // SAFETY: the table holds live QPs of this device; while its lock is held the
            // QP cannot be removed, so it is live when the reference is taken.
            let qp = unsafe { IbQp::<T::Qp>::from_raw(p.cast()) };
            qp.get_ref();
            NonNull::from(qp)
        })?;
        // INVARIANT: the reference was taken above; the device outlives its QPs.
        Some(QpRef {
            dev: NonNull::from(self),
            qp,
        })
    }
}

/// A counted reference to a QP (as `iw_add_ref` takes), together with its device.
///
/// # Invariants
///
/// `qp` is a live QP of `dev` on which this value holds one reference (`IbQp::get_ref`),
/// so its destroy cannot complete before the value is dropped; `dev` is live while any of
/// its QPs is.
pub(crate) struct QpRef<T: Objects> {
    dev: NonNull<IbDevice<T>>,
    qp: NonNull<IbQp<T::Qp>>,
}

// SAFETY: a `QpRef` is a counted shared reference; the QP and device data are `Sync`.
unsafe impl<T: Objects> Send for QpRef<T>
where
    T: Sync,
    T::Qp: Sync,
{
}
// SAFETY: as above.
unsafe impl<T: Objects> Sync for QpRef<T>
where
    T: Sync,
    T::Qp: Sync,
{
}

impl<T: Objects> QpRef<T> {
    /// The QP.
    pub(crate) fn qp(&self) -> &IbQp<T::Qp> {
        // SAFETY: live while the reference is held (type invariant).
        unsafe { self.qp.as_ref() }
    }

    /// The QP's device.
    pub(crate) fn device(&self) -> &IbDevice<T> {
        // SAFETY: live while its QP is (type invariant).
        unsafe { self.dev.as_ref() }
    }
}

impl<T: Objects> Drop for QpRef<T> {
    fn drop(&mut self) {
        // Balances the reference taken by `qp_ref`; nothing touches the QP afterwards.
        self.qp().put_ref();
    }
}

/// Copies the name of the device at `raw` ("rsiw0") into `buf`, cut to fit; returns its
/// length in octets.
///
/// # Safety
///
/// `raw` points to a live, registered `ib_device`.
pub(in crate::sys) unsafe fn raw_name_into(raw: *mut bindings::ib_device, buf: &mut [u8]) -> usize {
    let len = i32::try_from(buf.len()).unwrap_or(i32::MAX);
    if len == 0 {
        return 0;
    }
    // SAFETY: `raw` is live (the caller); `buf` is writable for `len` octets and the shim
    // writes at most that many, NUL included.
    let n = unsafe { bindings::rsiw_ibdev_name(raw, buf.as_mut_ptr().cast(), len) };
    usize::try_from(n).unwrap_or(0).min(buf.len())
}
