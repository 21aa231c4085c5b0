// SPDX-License-Identifier: GPL-2.0

//! Trampolines of the SRQ verbs. SRQ containers are allocated by the core; the driver data
//! is initialised in `create_srq_c` and dropped in `destroy_srq_c`.

use super::{errno, DeviceOps, IbDevice, SrqAttr, SrqModify, SrqOps};
use crate::sys::bindings;
use crate::sys::logtag::Tag;
use crate::sys::obj::IbSrq;
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::user;
use crate::sys::wr::{post_result, RecvWr, WrList};
use kernel::ffi::c_int;
use kernel::prelude::*;

impl<T: DeviceOps> IbDevice<T> {
    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn create_srq_c(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: the core passes a zeroed SRQ of `size_ib_srq` octets of a live device.
        let (dev, init, mut udata) =
            unsafe { (Self::from_raw((*srq).device), &mut *attr, user(udata)) };
        if init.srq_type != bindings::ib_srq_type_IB_SRQT_BASIC {
            pr_err_ratelimited!(
                "{}: create_srq: SRQ type {} is not supported (basic SRQs only)\n",
                Tag::with_name(|b| dev.name_into(b), None),
                init.srq_type
            );
            return EOPNOTSUPP.to_errno();
        }
        let attr = SrqAttr {
            max_wr: init.attr.max_wr,
            max_sge: init.attr.max_sge,
            limit: init.attr.srq_limit,
        };
        let (depth, data) = match T::Srq::create(dev, &attr, udata.as_mut()) {
            Ok(r) => r,
            Err(e) => return e.to_errno(),
        };
        init.attr.max_wr = depth;
        // SAFETY: the data part is uninitialised and ours.
        errno(unsafe { IbSrq::<T::Srq>::init_data(srq, data) })
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn destroy_srq_c(
        srq: *mut bindings::ib_srq,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: a live SRQ no QP uses any more (the core keeps use counts).
        let (dev, obj) = unsafe {
            (
                Self::from_raw((*srq).device),
                IbSrq::<T::Srq>::from_raw(srq),
            )
        };
        T::Srq::destroy(dev, obj);
        // SAFETY: no verb runs on it any more.
        unsafe { IbSrq::<T::Srq>::drop_data(srq) };
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn modify_srq_c(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
        mask: bindings::ib_srq_attr_mask,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: a live SRQ and valid attributes.
        let (obj, attr) = unsafe { (IbSrq::<T::Srq>::from_raw(srq), &*attr) };
        let change = SrqModify {
            max_wr: (mask & bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR != 0).then_some(attr.max_wr),
            limit: (mask & bindings::ib_srq_attr_mask_IB_SRQ_LIMIT != 0).then_some(attr.srq_limit),
        };
        errno(T::Srq::modify(obj, &change))
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn query_srq_c(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
    ) -> c_int {
        // SAFETY: a live SRQ and an exclusively borrowed output buffer.
        let (obj, attr) = unsafe { (IbSrq::<T::Srq>::from_raw(srq), &mut *attr) };
        let a = T::Srq::query(obj);
        attr.max_wr = a.max_wr;
        attr.max_sge = a.max_sge;
        attr.srq_limit = a.limit;
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn post_srq_recv_c(
        srq: *mut bindings::ib_srq,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: as in `post_send_c`.
        let (obj, list) = unsafe {
            (
                IbSrq::<T::Srq>::from_raw(srq),
                WrList::<RecvWr>::new(wr.cast()),
            )
        };
        // SAFETY: `bad` is the core's out-pointer of this call; `RecvWr` is the
        // transparent view of its type.
        unsafe { post_result(T::Srq::post(obj, list), bad) }
    }
}
