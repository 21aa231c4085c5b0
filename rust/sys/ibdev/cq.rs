// SPDX-License-Identifier: GPL-2.0

//! Trampolines of the CQ verbs. CQ containers are allocated by the core (size in
//! `IbDevice::<T>::OPS`); the driver data is initialised in `create_cq_c` and dropped in
//! `destroy_cq_c`, after the completion handler call queued for the vector's CPU, if any,
//! was cancelled.

use super::{CqAttr, CqNotify, CqOps, DeviceOps, IbDevice, WcSlot};
use crate::sys::bindings;
use crate::sys::obj::IbCq;
use crate::sys::udata::user;
use kernel::ffi::c_int;

impl<T: DeviceOps> IbDevice<T> {
    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn create_cq_c(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        // SAFETY: the core passes a zeroed CQ of `size_ib_cq` octets of a live rsiw
        // device, valid attributes and a null (kernel) or valid bundle.
        let (dev, attr, mut udata) = unsafe {
            (
                Self::from_raw((*cq).device),
                &*attr,
                user(bindings::rsiw_bundle_udata(attrs)),
            )
        };
        // The core checks a user caller's `comp_vector` against the device's vectors; a
        // vector that names no online CPU has the handler called where completions happen.
        let vector = attr.comp_vector;
        let attr = CqAttr {
            cqe: attr.cqe,
            flags: attr.flags,
        };
        let (depth, init) = match T::Cq::create(dev, &attr, udata.as_mut()) {
            Ok(r) => r,
            Err(e) => return e.to_errno(),
        };
        // SAFETY: the driver part of the core's CQ allocation is uninitialised and ours.
        if let Err(e) = unsafe { IbCq::<T::Cq>::init_rest(cq, vector, init) } {
            return e.to_errno();
        }
        // SAFETY: the data is initialised now.
        unsafe { IbCq::<T::Cq>::from_raw(cq) }.set_depth(depth);
        0
    }

    /// `pre_destroy_cq` (`ib_free_cq` only, before it stops the core's own polling):
    /// cancels a completion handler call still queued for the vector's CPU, which could
    /// otherwise schedule the core's poller after it was stopped.
    ///
    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn pre_destroy_cq_c(cq: *mut bindings::ib_cq) -> c_int {
        // SAFETY: the core frees a live CQ of this device that no QP uses any more, from
        // process context.
        unsafe { IbCq::<T::Cq>::cancel_comp(cq) };
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn destroy_cq_c(
        cq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: the core destroys a live CQ of this device that no QP uses any more.
        let (dev, obj) = unsafe { (Self::from_raw((*cq).device), IbCq::<T::Cq>::from_raw(cq)) };
        T::Cq::destroy(dev, obj);
        // No verb runs on the CQ any more and no QP uses it, so nothing queues its completion
        // work again; `destroy_cq` runs in process context.
        // SAFETY: as above; the core frees the memory after `drop_rest` cancelled the work.
        unsafe { IbCq::<T::Cq>::drop_rest(cq) };
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn poll_cq_c(
        cq: *mut bindings::ib_cq,
        num: c_int,
        wc: *mut bindings::ib_wc,
    ) -> c_int {
        let n = usize::try_from(num).unwrap_or(0);
        if n == 0 || wc.is_null() {
            return 0;
        }
        // SAFETY: a live CQ; the consumer passes room for `num` work completions, which
        // `WcSlot` views transparently.
        let (obj, wcs) = unsafe {
            (
                IbCq::<T::Cq>::from_raw(cq),
                core::slice::from_raw_parts_mut(wc.cast::<WcSlot>(), n),
            )
        };
        // At most `num` completions, a `c_int`.
        T::Cq::poll(obj, wcs) as c_int
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn req_notify_cq_c(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> c_int {
        let notify = if flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED
        {
            CqNotify::Solicited
        } else {
            CqNotify::NextComp
        };
        let report_missed = flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
        // SAFETY: a live CQ.
        let obj = unsafe { IbCq::<T::Cq>::from_raw(cq) };
        match T::Cq::req_notify(obj, notify, report_missed) {
            Ok(n) => n,
            Err(e) => e.to_errno(),
        }
    }
}
