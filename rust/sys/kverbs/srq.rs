// SPDX-License-Identifier: GPL-2.0

//! Kernel shared receive queues: creation with a limit, posting, re-arming the limit and
//! queries.

use super::wr::{post_recv_list, PostFail, RecvReq};
use super::{from_err_ptr, Events, KPd};
use crate::sys::ibdev::DeviceOps;
use crate::sys::obj::IbSrq;
use crate::sys::{bindings, to_result, Pod};
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::ib_srq_init_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_srq_attr {}

/// A kernel SRQ whose events are recorded in a `'static` [`Events`].
///
/// # Invariants
///
/// `raw` is an SRQ of a PD of a `KDevice<T>`, owned by this value.
pub(crate) struct KSrq<'p, T: DeviceOps> {
    raw: NonNull<bindings::ib_srq>,
    _p: PhantomData<&'p KPd<'p, T>>,
}

impl<'p, T: DeviceOps> KSrq<'p, T> {
    /// Creates a basic SRQ of `max_wr` WRs with `max_sge` SGEs and limit `limit`.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_srq`.
    pub(crate) fn new(
        pd: &'p KPd<'p, T>,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        events: &'static Events,
    ) -> Result<Self> {
        let mut init = bindings::ib_srq_init_attr::zeroed();
        init.event_handler = Some(Events::event_c);
        init.srq_context = events.as_ctx();
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        init.attr.srq_limit = limit;
        init.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        // SAFETY: a live PD; valid attributes; no user object or data (kernel SRQ).
        let raw = from_err_ptr(unsafe {
            bindings::ib_create_srq_user(
                pd.as_raw(),
                &mut init,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        })?;
        Ok(Self {
            raw,
            _p: PhantomData,
        })
    }

    /// `ib_post_srq_recv`.
    ///
    /// # Errors
    ///
    /// The provider's error and the index of the first request not posted.
    pub(crate) fn post_recv(&self, reqs: &[RecvReq<'_>]) -> Result<(), PostFail> {
        let srq = self.raw.as_ptr();
        post_recv_list(reqs, |head, bad| {
            // SAFETY: a live SRQ; the list and its SGEs are valid for the call.
            unsafe {
                match (*(*srq).device).ops.post_srq_recv {
                    Some(f) => f(srq, head, bad),
                    None => EOPNOTSUPP.to_errno(),
                }
            }
        })
    }

    /// `ib_modify_srq(IB_SRQ_LIMIT)`.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn set_limit(&self, limit: u32) -> Result {
        let mut attr = bindings::ib_srq_attr::zeroed();
        attr.srq_limit = limit;
        // SAFETY: a live SRQ and valid attributes.
        to_result(unsafe {
            bindings::ib_modify_srq(
                self.raw.as_ptr(),
                &mut attr,
                bindings::ib_srq_attr_mask_IB_SRQ_LIMIT,
            )
        })
    }

    /// `ib_query_srq`: `(max_wr, max_sge, srq_limit)`.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn query(&self) -> Result<(u32, u32, u32)> {
        let mut attr = bindings::ib_srq_attr::zeroed();
        // SAFETY: a live SRQ and a valid output buffer.
        to_result(unsafe { bindings::ib_query_srq(self.raw.as_ptr(), &mut attr) })?;
        Ok((attr.max_wr, attr.max_sge, attr.srq_limit))
    }

    /// rsiw's view of the SRQ.
    pub(crate) fn driver(&self) -> &IbSrq<T::Srq> {
        // SAFETY: the SRQ belongs to an `IbDevice<T>` (type invariant) and lives while
        // `self` is borrowed.
        unsafe { IbSrq::<T::Srq>::from_raw(self.raw.as_ptr()) }
    }

    /// The core's pointer, live while `self` is borrowed.
    pub(super) fn as_raw(&self) -> *mut bindings::ib_srq {
        self.raw.as_ptr()
    }
}

impl<T: DeviceOps> Drop for KSrq<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); QPs using it borrow it and are gone.
        unsafe { bindings::ib_destroy_srq_user(self.raw.as_ptr(), core::ptr::null_mut()) };
    }
}
