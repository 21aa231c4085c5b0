// SPDX-License-Identifier: GPL-2.0

//! Kernel queue pairs: creation with requested capabilities, state changes and queries,
//! posting, and `ib_drain_qp`.

use super::wr::{post_recv_list, post_send_list, PostFail, RecvReq, SendReq};
use super::{from_err_ptr, Events, KCq, KPd, KSrq, CALLER};
use crate::sys::ibdev::DeviceOps;
use crate::sys::obj::IbQp;
use crate::sys::{bindings, to_result, Pod};
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::ffi::c_int;
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::ib_qp_init_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_qp_attr {}

/// QP capabilities requested at creation.
#[derive(Clone, Copy)]
pub(crate) struct Caps {
    /// SQ depth.
    pub(crate) send_wr: u32,
    /// RQ depth.
    pub(crate) recv_wr: u32,
    /// SGEs per send WR.
    pub(crate) send_sge: u32,
    /// SGEs per receive WR.
    pub(crate) recv_sge: u32,
    /// Inline octets.
    pub(crate) inline: u32,
}

/// A kernel QP whose events are recorded in a `'static` [`Events`].
///
/// # Invariants
///
/// `raw` is a QP of a PD of a `KDevice<T>`, owned by this value; its PD, CQs and SRQ
/// outlive it (borrowed for `'a`).
pub(crate) struct KQp<'a, T: DeviceOps> {
    raw: NonNull<bindings::ib_qp>,
    _a: PhantomData<&'a KPd<'a, T>>,
}

impl<'a, T: DeviceOps> KQp<'a, T> {
    /// Creates a QP of type `qp_type` (`IB_QPT_*`) with `caps`, signalling requested WRs
    /// only.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_qp`.
    pub(crate) fn new(
        pd: &'a KPd<'a, T>,
        scq: &'a KCq<'a, T>,
        rcq: &'a KCq<'a, T>,
        srq: Option<&'a KSrq<'a, T>>,
        qp_type: bindings::ib_qp_type,
        caps: Caps,
        events: &'static Events,
    ) -> Result<Self> {
        let mut init = bindings::ib_qp_init_attr::zeroed();
        init.event_handler = Some(Events::event_c);
        init.qp_context = events.as_ctx();
        init.send_cq = scq.as_raw();
        init.recv_cq = rcq.as_raw();
        init.srq = srq.map_or(core::ptr::null_mut(), |s| s.as_raw());
        init.cap.max_send_wr = caps.send_wr;
        init.cap.max_recv_wr = caps.recv_wr;
        init.cap.max_send_sge = caps.send_sge;
        init.cap.max_recv_sge = caps.recv_sge;
        init.cap.max_inline_data = caps.inline;
        init.sq_sig_type = bindings::ib_sig_type_IB_SIGNAL_REQ_WR;
        init.qp_type = qp_type;
        // SAFETY: a live PD and CQs (and SRQ) of the same device; valid attributes.
        let raw = from_err_ptr(unsafe {
            bindings::ib_create_qp_kernel(pd.as_raw(), &mut init, CALLER.as_char_ptr())
        })?;
        Ok(Self {
            raw,
            _a: PhantomData,
        })
    }

    /// The QP number.
    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: a live QP; `qp_num` is set at creation.
        unsafe { (*self.raw.as_ptr()).qp_num }
    }

    /// The core's pointer (as work completions report it).
    pub(crate) fn as_ptr(&self) -> *mut bindings::ib_qp {
        self.raw.as_ptr()
    }

    /// `ib_modify_qp(IB_QP_STATE)` to `state` (`IB_QPS_*`).
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn set_state(&self, state: bindings::ib_qp_state) -> Result {
        let mut attr = bindings::ib_qp_attr::zeroed();
        attr.qp_state = state;
        // SAFETY: a live QP and valid attributes.
        to_result(unsafe {
            bindings::ib_modify_qp(
                self.raw.as_ptr(),
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as c_int,
            )
        })
    }

    /// `ib_query_qp`: the state and the granted `(max_send_wr, max_recv_wr)`.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn query(&self) -> Result<(bindings::ib_qp_state, u32, u32)> {
        let mut attr = bindings::ib_qp_attr::zeroed();
        let mut init = bindings::ib_qp_init_attr::zeroed();
        let mask =
            (bindings::ib_qp_attr_mask_IB_QP_STATE | bindings::ib_qp_attr_mask_IB_QP_CAP) as c_int;
        // SAFETY: a live QP and valid output buffers.
        to_result(unsafe { bindings::ib_query_qp(self.raw.as_ptr(), &mut attr, mask, &mut init) })?;
        Ok((attr.qp_state, init.cap.max_send_wr, init.cap.max_recv_wr))
    }

    /// `ib_post_send`.
    ///
    /// # Errors
    ///
    /// The provider's error and the index of the first request not posted.
    pub(crate) fn post_send(&self, reqs: &[SendReq<'_>]) -> Result<(), PostFail> {
        let qp = self.raw.as_ptr();
        post_send_list(reqs, |head, bad| {
            // SAFETY: a live QP; the list and its SGEs are valid and unchanged for the call.
            unsafe {
                match (*(*qp).device).ops.post_send {
                    Some(f) => f(qp, head, bad),
                    None => EOPNOTSUPP.to_errno(),
                }
            }
        })
    }

    /// `ib_post_recv`.
    ///
    /// # Errors
    ///
    /// The provider's error and the index of the first request not posted.
    pub(crate) fn post_recv(&self, reqs: &[RecvReq<'_>]) -> Result<(), PostFail> {
        let qp = self.raw.as_ptr();
        post_recv_list(reqs, |head, bad| {
            // SAFETY: a live QP; the list and its SGEs are valid for the call.
            unsafe {
                match (*(*qp).device).ops.post_recv {
                    Some(f) => f(qp, head, bad),
                    None => EOPNOTSUPP.to_errno(),
                }
            }
        })
    }

    /// `ib_drain_qp`: moves the QP to ERROR and waits until everything posted completed.
    /// The CQs must come from [`KCq::new_direct`] and hold no other completions.
    pub(crate) fn drain(&self) {
        // SAFETY: a live QP; the caller guarantees the CQ requirements of `ib_drain_qp`.
        unsafe { bindings::ib_drain_qp(self.raw.as_ptr()) };
    }

    /// rsiw's view of the QP.
    pub(crate) fn driver(&self) -> &IbQp<T::Qp> {
        // SAFETY: the QP belongs to an `IbDevice<T>` (type invariant) and lives while
        // `self` is borrowed.
        unsafe { IbQp::<T::Qp>::from_raw(self.raw.as_ptr()) }
    }
}

impl<T: DeviceOps> Drop for KQp<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant).
        unsafe { bindings::ib_destroy_qp_user(self.raw.as_ptr(), core::ptr::null_mut()) };
    }
}
