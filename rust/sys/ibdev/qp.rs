// SPDX-License-Identifier: GPL-2.0

//! Trampolines of the QP verbs, and iw_cm's QP lookups (`iw_get_qp`, `iw_add_ref`,
//! `iw_rem_ref`). QP containers are allocated by the core; the driver data is initialised
//! in `create_qp_c`, which also enters the QP into the device's QP-number table, and
//! dropped in `destroy_qp_c` once every `iw_add_ref` reference is gone.

use super::{errno, DeviceOps, IbDevice, QpCap, QpInit, QpModify, QpOps, QpState, ResAttrs};
use crate::sys::bindings;
use crate::sys::logtag::Tag;
use crate::sys::obj::{IbQp, PdId};
use crate::sys::udata::user;
use crate::sys::wr::{post_result, RecvWr, SendWr, WrList};
use crate::sys::{pr_err_ratelimited, pr_warn_ratelimited};
use kernel::ffi::c_int;
use kernel::prelude::*;

/// Checks that `attr` asks for a QP an iWARP device has: RC, without create flags. Returns
/// whether every send WR is signalled.
///
/// # Errors
///
/// `EOPNOTSUPP` for another QP type or create flags, `EINVAL` for an unknown
/// `sq_sig_type`; each logged (rate-limited) behind the device's tag, which `tag` makes
/// (only when there is something to log).
fn check_rc(tag: impl Fn() -> Tag, attr: &bindings::ib_qp_init_attr) -> Result<bool> {
    if attr.create_flags != 0 {
        pr_err_ratelimited!(
            "{}: create_qp: create_flags {:#x} are not supported\n",
            tag(),
            attr.create_flags
        );
        return Err(EOPNOTSUPP);
    }
    if attr.qp_type != bindings::ib_qp_type_IB_QPT_RC {
        pr_err_ratelimited!(
            "{}: create_qp: QP type {} is not supported; iWARP has RC QPs only\n",
            tag(),
            attr.qp_type
        );
        return Err(EOPNOTSUPP);
    }
    match attr.sq_sig_type {
        bindings::ib_sig_type_IB_SIGNAL_ALL_WR => Ok(true),
        bindings::ib_sig_type_IB_SIGNAL_REQ_WR => Ok(false),
        t => {
            pr_err_ratelimited!("{}: create_qp: sq_sig_type {t} unknown\n", tag());
            Err(EINVAL)
        }
    }
}

impl QpCap {
    /// The sizes of the core's `cap` (`max_rdma_ctxs` is the core's own business).
    fn from_raw(cap: &bindings::ib_qp_cap) -> Self {
        Self {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
        }
    }

    /// The core's `ib_qp_cap` of these sizes, with the core's own `max_rdma_ctxs` (the
    /// rdma_rw contexts it sizes MR pools by, which a provider passes on unchanged).
    fn to_raw(self, max_rdma_ctxs: u32) -> bindings::ib_qp_cap {
        bindings::ib_qp_cap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
            max_rdma_ctxs,
        }
    }
}

/// `IB_QP_ATTR_STANDARD_BITS` (`GENMASK(20, 0)`, which bindgen cannot evaluate).
const STANDARD_BITS: u32 = (1 << 21) - 1;

/// The range of QP numbers (24 bits; 0 is never used).
const QPN_MIN: u32 = 1;
const QPN_MAX: u32 = 0x00ff_ffff;

impl<T: DeviceOps> IbDevice<T> {
    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn create_qp_c(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        let (dev, attr, mut udata) =
            // SAFETY: the core passes a zeroed QP (`device`, `pd`, the CQs and SRQ set) of a
            // live rsiw device, valid attributes and null or valid user data.
            unsafe { (Self::from_raw((*qp).device), &mut *attr, user(udata)) };
        let tag = || Tag::with_name(|b| dev.name_into(b), None);
        let sig_all = match check_rc(tag, attr) {
            Ok(s) => s,
            Err(e) => return e.to_errno(),
        };
        // The QP's CQs and SRQ are where `IbQp::send_cq` and its siblings read them: the
        // core set them from `attr` before this call and keeps them until destroy.
        // SAFETY: the QP is the core's zeroed allocation with those fields set.
        let (send_cq, recv_cq, srq) = unsafe { ((*qp).send_cq, (*qp).recv_cq, (*qp).srq) };
        if send_cq.is_null() || recv_cq.is_null() {
            pr_err_ratelimited!(
                "{}: create_qp: a QP needs a send CQ and a receive CQ\n",
                tag()
            );
            return EINVAL.to_errno();
        }
        let qpn = match dev.qps.reserve(QPN_MIN, QPN_MAX) {
            Ok(n) => n,
            Err(e) => return e.to_errno(),
        };
        // SAFETY: the QP is ours until `create_qp` returns; the core reads `qp_num` after.
        let pd = unsafe {
            (*qp).qp_num = qpn;
            PdId::of((*qp).pd)
        };
        let init = QpInit {
            cap: QpCap::from_raw(&attr.cap),
            sig_all,
            qpn,
            pd,
            srq: !srq.is_null(),
        };
        let data = match T::Qp::create(dev, init, udata.as_mut()) {
            Ok((cap, d)) => {
                attr.cap = cap.to_raw(attr.cap.max_rdma_ctxs);
                d
            }
            Err(e) => {
                dev.qps.remove(qpn);
                return e.to_errno();
            }
        };
        // SAFETY: everything after `base` in the core's allocation is uninitialised, ours.
        if let Err(e) = unsafe { IbQp::<T::Qp>::init_rest(qp, data) } {
            dev.qps.remove(qpn);
            return e.to_errno();
        }
        // SAFETY: the QP stays valid until `destroy_qp_c` removes it from the table;
        // `iw_get_qp_c` only returns it to iw_cm, whose consumer owns the QP.
        if let Err(e) = unsafe { dev.qps.publish(qpn, qp.cast()) } {
            // SAFETY: initialised above and not published: nobody else uses it.
            unsafe { IbQp::<T::Qp>::drop_rest(qp) };
            dev.qps.remove(qpn);
            return e.to_errno();
        }
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn destroy_qp_c(
        qp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: the core destroys a live QP of this device.
        let (dev, obj) = unsafe { (Self::from_raw((*qp).device), IbQp::<T::Qp>::from_raw(qp)) };
        T::Qp::destroy(dev, obj);
        // No new references after this: lookups take theirs under the table lock.
        dev.qps.remove(obj.qpn());
        obj.put_ref();
        obj.wait_released();
        // SAFETY: no reference is left and the core calls no further verb on the QP.
        unsafe { IbQp::<T::Qp>::drop_rest(qp) };
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn modify_qp_c(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: c_int,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: a live QP and valid attributes.
        let (obj, attr) = unsafe { (IbQp::<T::Qp>::from_raw(qp), &*attr) };
        // The mask's bits are a `u32` set (`enum ib_qp_attr_mask`).
        let mask = mask as u32;
        if mask & !STANDARD_BITS != 0 {
            pr_err_ratelimited!(
                "QP {}: modify_qp attribute mask {mask:#x} has unsupported bits\n",
                obj.qpn()
            );
            return EOPNOTSUPP.to_errno();
        }
        let state = |bit: u32, raw: bindings::ib_qp_state| -> Result<Option<QpState>> {
            if mask & bit == 0 {
                return Ok(None);
            }
            QpState::from_raw(raw).map(Some).ok_or_else(|| {
                pr_err_ratelimited!("QP {}: modify_qp state {raw} unknown\n", obj.qpn());
                EINVAL
            })
        };
        let change = match (
            state(bindings::ib_qp_attr_mask_IB_QP_STATE, attr.qp_state),
            state(bindings::ib_qp_attr_mask_IB_QP_CUR_STATE, attr.cur_qp_state),
        ) {
            (Ok(state), Ok(cur_state)) => QpModify {
                state,
                cur_state,
                access: (mask & bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS != 0)
                    .then_some(attr.qp_access_flags as u32),
            },
            (Err(e), _) | (_, Err(e)) => return e.to_errno(),
        };
        errno(T::Qp::modify(obj, &change))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core's netlink code, through `IbDevice::<T>::OPS`, with the
    /// message under construction and a live QP of this device type.
    pub(super) unsafe extern "C" fn fill_res_qp_entry_c(
        msg: *mut bindings::sk_buff,
        qp: *mut bindings::ib_qp,
    ) -> c_int {
        // SAFETY: the core holds a reference to the live QP for the call.
        let obj = unsafe { IbQp::<T::Qp>::from_raw(qp) };
        // SAFETY: `msg` is the core's message for this call.
        let table = unsafe { bindings::rsiw_res_driver_begin(msg) };
        if table.is_null() {
            return EMSGSIZE.to_errno();
        }
        // SAFETY: as above; the attributes go into the table just opened.
        let mut out = unsafe { ResAttrs::new(msg) };
        let r = T::Qp::res_attrs(obj, &mut out);
        // SAFETY: `table` was opened on `msg` above and is closed once.
        unsafe { bindings::rsiw_res_driver_end(msg, table, r.is_ok()) };
        errno(r)
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn query_qp_c(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> c_int {
        if attr.is_null() || init.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: a live QP and exclusively borrowed output buffers.
        let (dev, obj, attr, init) = unsafe {
            (
                Self::from_raw((*qp).device),
                IbQp::<T::Qp>::from_raw(qp),
                &mut *attr,
                &mut *init,
            )
        };
        // SAFETY: the QP is live; the core set these at creation and never changes them.
        unsafe {
            init.qp_type = (*qp).qp_type;
            init.send_cq = (*qp).send_cq;
            init.recv_cq = (*qp).recv_cq;
            init.srq = (*qp).srq;
        }
        let a = T::Qp::query(dev, obj);
        let cap = a.cap.to_raw(attr.cap.max_rdma_ctxs);
        attr.qp_state = a.state.to_raw();
        attr.cur_qp_state = attr.qp_state;
        attr.cap = cap;
        attr.qp_access_flags = a.access as c_int;
        if let Some(mtu) = a.mtu {
            attr.path_mtu = super::ib_mtu(mtu);
        }
        attr.max_rd_atomic = a.ord;
        attr.max_dest_rd_atomic = a.ird;
        init.cap = cap;
        init.sq_sig_type = if a.sig_all {
            bindings::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            bindings::ib_sig_type_IB_SIGNAL_REQ_WR
        };
        0
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn post_send_c(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // SAFETY: a live QP; the list is valid for the call (core post contract).
        let (obj, list) = unsafe {
            (
                IbQp::<T::Qp>::from_raw(qp),
                WrList::<SendWr>::new(wr.cast()),
            )
        };
        // SAFETY: `bad` is the core's out-pointer of this call; `SendWr` is the
        // transparent view of its type.
        unsafe { post_result(T::Qp::post_send(obj, list), bad) }
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn post_recv_c(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: as in `post_send_c`.
        let (obj, list) = unsafe {
            (
                IbQp::<T::Qp>::from_raw(qp),
                WrList::<RecvWr>::new(wr.cast()),
            )
        };
        // SAFETY: `bad` is the core's out-pointer of this call; `RecvWr` is the
        // transparent view of its type.
        unsafe { post_result(T::Qp::post_recv(obj, list), bad) }
    }

    /// `iw_get_qp`: the QP with number `qpn`, or null if there is none or it is a user QP
    /// of another process than the caller's (the process that opened its user context). iw_cm calls it in `rdma_connect` and
    /// `rdma_accept`, in the caller's context, with the number the caller gave (librdmacm
    /// passes any): the owner check keeps a process from binding another's QP to its own
    /// connection (iw_cm then fails the call with `EINVAL`). A kernel consumer's QP has no
    /// owner to check. Like the C siw, this takes no reference: iw_cm calls it for a QP
    /// its consumer owns (so it cannot be destroyed meanwhile) and immediately takes its
    /// own with `iw_add_ref`.
    ///
    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn iw_get_qp_c(
        raw: *mut bindings::ib_device,
        qpn: c_int,
    ) -> *mut bindings::ib_qp {
        // SAFETY: a live device of this type.
        let dev = unsafe { Self::from_raw(raw) };
        let Ok(qpn) = u32::try_from(qpn) else {
            return core::ptr::null_mut();
        };
        let found = dev.qps.with(qpn, |p| {
            let qp = p.cast::<bindings::ib_qp>();
            // SAFETY: a published QP stays live while the table holds it (its lock is
            // held here).
            let serves = unsafe { IbQp::<T::Qp>::from_raw(qp) }.serves_caller();
            (qp, serves)
        });
        match found {
            Some((qp, true)) => qp,
            Some((_, false)) => {
                pr_warn_ratelimited!(
                    "{}: QP {qpn} belongs to another process: connect or accept refused\n",
                    Tag::with_name(|b| dev.name_into(b), None)
                );
                core::ptr::null_mut()
            }
            None => core::ptr::null_mut(),
        }
    }

    /// `iw_add_ref`: a reference that keeps `destroy_qp` from freeing the QP.
    ///
    /// # Safety
    ///
    /// As for `create_cq_c`; the QP is live (not yet destroyed) or the caller holds a
    /// reference.
    pub(super) unsafe extern "C" fn iw_add_ref_c(qp: *mut bindings::ib_qp) {
        // SAFETY: the QP is live (see above).
        unsafe { IbQp::<T::Qp>::from_raw(qp) }.get_ref();
    }

    /// `iw_rem_ref`: drops a reference from `iw_add_ref`.
    ///
    /// # Safety
    ///
    /// As for `create_cq_c`; balances an `iw_add_ref`.
    pub(super) unsafe extern "C" fn iw_rem_ref_c(qp: *mut bindings::ib_qp) {
        // SAFETY: the caller's reference keeps the QP live until `put_ref`.
        unsafe { IbQp::<T::Qp>::from_raw(qp) }.put_ref();
    }
}
