// SPDX-License-Identifier: GPL-2.0

//! Kernel completion queues: created with the handlers of an [`Events`], or allocated for
//! direct or softirq polling, and polled and armed through the provider's verbs.

use super::{from_err_ptr, Events, KDevice, CALLER};
use crate::sys::bindings;
use crate::sys::ibdev::DeviceOps;
use crate::sys::Pod;
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::ffi::c_int;
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::ib_cq_init_attr {}

/// A kernel completion queue.
///
/// # Invariants
///
/// `raw` is a CQ of the borrowed device owned by this value; `direct` says whether it came
/// from `ib_alloc_cq` (`IB_POLL_DIRECT` or `IB_POLL_SOFTIRQ`, freed with `ib_free_cq`) or
/// from `ib_create_cq` with the handlers of a `'static` [`Events`].
pub(crate) struct KCq<'d, T: DeviceOps> {
    raw: NonNull<bindings::ib_cq>,
    direct: bool,
    _d: PhantomData<&'d KDevice<T>>,
}

impl<'d, T: DeviceOps> KCq<'d, T> {
    /// Creates a CQ of `cqe` entries whose completion handler calls and events are
    /// recorded in `events`.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_cq`.
    pub(crate) fn new(dev: &'d KDevice<T>, cqe: u32, events: &'static Events) -> Result<Self> {
        Self::on_vector(dev, cqe, events, 0)
    }

    /// Creates a CQ of `cqe` entries on completion vector `vector` whose completion
    /// handler calls and events are recorded in `events`.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_cq`.
    pub(crate) fn on_vector(
        dev: &'d KDevice<T>,
        cqe: u32,
        events: &'static Events,
        vector: u32,
    ) -> Result<Self> {
        let mut attr = bindings::ib_cq_init_attr::zeroed();
        attr.cqe = cqe;
        attr.comp_vector = vector;
        // SAFETY: a live device, valid attributes; the handlers and their context are
        // `'static`.
        let raw = from_err_ptr(unsafe {
            bindings::__ib_create_cq(
                dev.as_raw(),
                Some(Events::comp_c),
                Some(Events::event_c),
                events.as_ctx(),
                &attr,
                CALLER.as_char_ptr(),
            )
        })?;
        Ok(Self {
            raw,
            direct: false,
            _d: PhantomData,
        })
    }

    /// Allocates a CQ of `cqe` entries polled directly by its consumer (`IB_POLL_DIRECT`,
    /// as `ib_drain_qp` can use; the core warns if the provider calls its handler).
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_cq`.
    pub(crate) fn new_direct(dev: &'d KDevice<T>, cqe: i32) -> Result<Self> {
        Self::alloc(dev, cqe, bindings::ib_poll_context_IB_POLL_DIRECT)
    }

    /// Allocates a CQ of `cqe` entries that the core polls in softirq (`IB_POLL_SOFTIRQ`,
    /// as nvme-rdma, iSER and RDS do): each completion's `wr_cqe->done` runs there.
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_cq`.
    pub(crate) fn new_softirq(dev: &'d KDevice<T>, cqe: i32) -> Result<Self> {
        Self::alloc(dev, cqe, bindings::ib_poll_context_IB_POLL_SOFTIRQ)
    }

    fn alloc(dev: &'d KDevice<T>, cqe: i32, poll: bindings::ib_poll_context) -> Result<Self> {
        // SAFETY: a live device; the core returns a CQ or an `ERR_PTR`.
        let raw = from_err_ptr(unsafe {
            bindings::__ib_alloc_cq(
                dev.as_raw(),
                core::ptr::null_mut(),
                cqe,
                0,
                poll,
                CALLER.as_char_ptr(),
            )
        })?;
        Ok(Self {
            raw,
            direct: true,
            _d: PhantomData,
        })
    }

    /// The CQ depth the provider granted.
    pub(crate) fn depth(&self) -> i32 {
        // SAFETY: a live CQ; `cqe` is set at creation.
        unsafe { (*self.raw.as_ptr()).cqe }
    }

    /// `ib_poll_cq`: fills up to `wc.len()` work completions; returns how many.
    pub(crate) fn poll(&self, wc: &mut [bindings::ib_wc]) -> i32 {
        let cq = self.raw.as_ptr();
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: a live CQ whose device implements `poll_cq`; `wc` has room for `n`.
        unsafe {
            match (*(*cq).device).ops.poll_cq {
                Some(f) => f(cq, n, wc.as_mut_ptr()),
                None => EOPNOTSUPP.to_errno(),
            }
        }
    }

    /// `ib_req_notify_cq` with `IB_CQ_*` flags.
    pub(crate) fn req_notify(&self, flags: u32) -> i32 {
        let cq = self.raw.as_ptr();
        // SAFETY: a live CQ whose device implements `req_notify_cq`.
        unsafe {
            match (*(*cq).device).ops.req_notify_cq {
                Some(f) => f(cq, flags),
                None => EOPNOTSUPP.to_errno(),
            }
        }
    }

    /// The core's pointer, live while `self` is borrowed.
    pub(super) fn as_raw(&self) -> *mut bindings::ib_cq {
        self.raw.as_ptr()
    }
}

impl<T: DeviceOps> Drop for KCq<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); QPs using it borrow it and are gone.
        unsafe {
            if self.direct {
                bindings::ib_free_cq(self.raw.as_ptr());
            } else {
                bindings::ib_destroy_cq_user(self.raw.as_ptr(), core::ptr::null_mut());
            }
        }
    }
}
