// SPDX-License-Identifier: GPL-2.0

//! Trampolines of the object verbs (CQ, QP, SRQ, MR): each turns the core's raw pointers
//! into typed references, calls one [`DeviceOps`] method and maps the result to an errno.
//!
//! Lifetimes: CQ, QP and SRQ containers are allocated by the core (sizes in
//! `IbDevice::<T>::OPS`); their driver data is initialised in the create trampoline and
//! dropped in the destroy trampoline. QPs are also entered into the device's QP-number
//! table (for `iw_get_qp`) and carry a reference count: destroy waits until every
//! `iw_add_ref` reference is gone before dropping the data. MRs are allocated
//! here in a `KBox` and freed in `dereg_mr`.

use super::bindings;
use super::ibdev::{errno, DeviceOps, IbDevice};
use super::kmem::KernelConsumer;
use super::obj::{CqRef, IbCq, IbMr, IbQp, IbSrq, Obj, PdId, SrqRef};
use super::udata::UserResponse;
use super::wr::{PostError, RecvWr, SendWr, WrList};
use crate::sys::pr_err_ratelimited;
use core::mem::MaybeUninit;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// The range of QP numbers (24 bits; 0 is never used).
const QPN_MIN: u32 = 1;
const QPN_MAX: u32 = 0x00ff_ffff;

/// What `create_qp` gets besides the raw attributes.
pub(crate) struct QpInit<'a, T: DeviceOps> {
    /// The consumer's attributes; `cap` is written back with the granted sizes.
    pub(crate) attr: &'a mut bindings::ib_qp_init_attr,
    /// The QP number already assigned (`ib_qp::qp_num`).
    pub(crate) qpn: u32,
    /// The QP's protection domain.
    pub(crate) pd: PdId,
    /// The send CQ.
    pub(crate) send_cq: CqRef<T::Cq>,
    /// The receive CQ.
    pub(crate) recv_cq: CqRef<T::Cq>,
    /// The SRQ, if the QP takes its receive WQEs from one.
    pub(crate) srq: Option<SrqRef<T::Srq>>,
}

/// Returns the optional user data of a verb.
///
/// # Safety
///
/// `udata` is null or the valid `ib_udata` of the running verb.
unsafe fn user<'a>(udata: *mut bindings::ib_udata) -> Option<UserResponse<'a>> {
    // SAFETY: guaranteed by the caller.
    (!udata.is_null()).then(|| unsafe { UserResponse::from_raw(udata) })
}

impl<T: DeviceOps> IbDevice<T> {
    // ---- CQ -------------------------------------------------------------------------

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
        let (depth, init) = match T::create_cq(dev, attr, udata.as_mut()) {
            Ok(r) => r,
            Err(e) => return e.to_errno(),
        };
        // SAFETY: the data part of the core's CQ allocation is uninitialised and ours.
        if let Err(e) = unsafe { IbCq::<T::Cq>::init_data(cq, init) } {
            return e.to_errno();
        }
        // SAFETY: the data is initialised now.
        unsafe { IbCq::<T::Cq>::from_raw(cq) }.set_depth(depth);
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
        T::destroy_cq(dev, obj);
        // SAFETY: no verb runs on the CQ any more; the core frees the memory.
        unsafe { IbCq::<T::Cq>::drop_data(cq) };
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
        // SAFETY: a live CQ; the consumer passes room for `num` work completions.
        let (obj, wcs) = unsafe {
            (
                IbCq::<T::Cq>::from_raw(cq),
                core::slice::from_raw_parts_mut(wc, n),
            )
        };
        T::poll_cq(obj, wcs) as c_int
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn req_notify_cq_c(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> c_int {
        // SAFETY: a live CQ.
        let obj = unsafe { IbCq::<T::Cq>::from_raw(cq) };
        match T::req_notify_cq(obj, flags) {
            Ok(n) => n,
            Err(e) => e.to_errno(),
        }
    }

    // ---- QP -------------------------------------------------------------------------

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn create_qp_c(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        let (dev, attr, mut udata) =
            // SAFETY: the core passes a zeroed QP (`device`, `pd` set) of a live rsiw
            // device, valid attributes and null or valid user data.
            unsafe { (Self::from_raw((*qp).device), &mut *attr, user(udata)) };
        // SAFETY: the core holds use counts on the CQs and the SRQ of a QP until the QP is
        // destroyed; they belong to the same device, so they are `IbCq<T::Cq>`/`IbSrq`.
        let (send_cq, recv_cq, srq) = unsafe {
            (
                CqRef::new(attr.send_cq),
                CqRef::new(attr.recv_cq),
                SrqRef::new(attr.srq),
            )
        };
        let (Some(send_cq), Some(recv_cq)) = (send_cq, recv_cq) else {
            pr_err_ratelimited!("create_qp: a QP needs a send CQ and a receive CQ\n");
            return EINVAL.to_errno();
        };
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
            attr,
            qpn,
            pd,
            send_cq,
            recv_cq,
            srq,
        };
        let data = match T::create_qp(dev, init, udata.as_mut()) {
            Ok(d) => d,
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
        T::destroy_qp(dev, obj);
        // No new references after this: lookups take theirs under the table lock.
        dev.qps.remove(obj.qpn());
        obj.put_ref();
        obj.released.wait_for_completion();
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
        let (dev, obj, attr) = unsafe {
            (
                Self::from_raw((*qp).device),
                IbQp::<T::Qp>::from_raw(qp),
                &*attr,
            )
        };
        errno(T::modify_qp(dev, obj, attr, mask as u32))
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
        errno(T::query_qp(dev, obj, attr, init))
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
        match T::post_send(obj, list) {
            Ok(()) => 0,
            Err(PostError { error, bad: b }) => {
                if !bad.is_null() {
                    let p = b.map_or(core::ptr::null(), |w| core::ptr::from_ref(w).cast());
                    // SAFETY: `bad` is the core's valid out-pointer.
                    unsafe { *bad = p };
                }
                error.to_errno()
            }
        }
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
        match T::post_recv(obj, list) {
            Ok(()) => 0,
            Err(PostError { error, bad: b }) => {
                if !bad.is_null() {
                    let p = b.map_or(core::ptr::null(), |w| core::ptr::from_ref(w).cast());
                    // SAFETY: `bad` is the core's valid out-pointer.
                    unsafe { *bad = p };
                }
                error.to_errno()
            }
        }
    }

    /// `iw_get_qp`: the QP with number `qpn`, or null. Like the C siw, this takes no
    /// reference: iw_cm calls it for a QP its consumer owns (so it cannot be destroyed
    /// meanwhile) and immediately takes its own with `iw_add_ref`.
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
        dev.qps
            .with(qpn, |p| p.cast::<bindings::ib_qp>())
            .unwrap_or(core::ptr::null_mut())
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

    // ---- SRQ ------------------------------------------------------------------------

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn create_srq_c(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: the core passes a zeroed SRQ of `size_ib_srq` octets of a live device.
        let (dev, attr, mut udata) =
            unsafe { (Self::from_raw((*srq).device), &mut *attr, user(udata)) };
        let init = match T::create_srq(dev, attr, udata.as_mut()) {
            Ok(i) => i,
            Err(e) => return e.to_errno(),
        };
        // SAFETY: the data part is uninitialised and ours.
        errno(unsafe { IbSrq::<T::Srq>::init_data(srq, init) })
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
        T::destroy_srq(dev, obj);
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
        errno(T::modify_srq(obj, attr, mask))
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
        T::query_srq(obj, attr);
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
        match T::post_srq_recv(obj, list) {
            Ok(()) => 0,
            Err(PostError { error, bad: b }) => {
                if !bad.is_null() {
                    let p = b.map_or(core::ptr::null(), |w| core::ptr::from_ref(w).cast());
                    // SAFETY: `bad` is the core's valid out-pointer.
                    unsafe { *bad = p };
                }
                error.to_errno()
            }
        }
    }

    // ---- MR -------------------------------------------------------------------------

    /// Allocates an MR container, initialises its data and sets its keys to `stag`.
    fn new_mr(stag: u32, init: impl PinInit<T::Mr, Error>) -> *mut bindings::ib_mr {
        let boxed = match KBox::<IbMr<T::Mr>>::new_uninit(GFP_KERNEL | __GFP_ZERO) {
            Ok(b) => b,
            Err(_) => return ENOMEM.to_ptr(),
        };
        let raw = KBox::into_raw(boxed).cast::<bindings::ib_mr>();
        // SAFETY: the allocation is zeroed (a valid empty `ib_mr`), sized and aligned for
        // `IbMr<T::Mr>`, and exclusively ours.
        if let Err(e) = unsafe { IbMr::<T::Mr>::init_data(raw, init) } {
            // SAFETY: back to the uninitialised box we allocated.
            drop(unsafe { KBox::from_raw(raw.cast::<MaybeUninit<IbMr<T::Mr>>>()) });
            return e.to_ptr();
        }
        // SAFETY: ours until returned to the core, which reads the keys afterwards.
        unsafe {
            (*raw).lkey = stag;
            (*raw).rkey = stag;
        }
        raw
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn get_dma_mr_c(
        pd: *mut bindings::ib_pd,
        access: c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: a live PD of a live device of this type.
        let (dev, user_pd) = unsafe { (Self::from_raw((*pd).device), !(*pd).uobject.is_null()) };
        if user_pd {
            // User space has no verb that reaches here; the core never asks for it.
            return EINVAL.to_ptr();
        }
        // SAFETY: a kernel PD (checked above); the mark goes to the region created here.
        let kc = unsafe { KernelConsumer::new() };
        match T::get_dma_mr(dev, PdId::of(pd), access, kc) {
            Ok((stag, init)) => Self::new_mr(stag, init),
            Err(e) => e.to_ptr(),
        }
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe extern "C" fn reg_user_mr_c(
        pd: *mut bindings::ib_pd,
        start: u64,
        len: u64,
        iova: u64,
        access: c_int,
        dmah: *mut bindings::ib_dmah,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        if !dmah.is_null() {
            return EOPNOTSUPP.to_ptr();
        }
        // SAFETY: a live PD of a live device; null or valid user data.
        let (dev, udata) = unsafe { (Self::from_raw((*pd).device), user(udata)) };
        let Some(mut udata) = udata else {
            return EINVAL.to_ptr();
        };
        let r = match T::reg_user_mr(dev, PdId::of(pd), start, len, iova, access, &mut udata) {
            Ok((stag, init)) => Self::new_mr(stag, init),
            Err(e) => e.to_ptr(),
        };
        r
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn alloc_mr_c(
        pd: *mut bindings::ib_pd,
        ty: bindings::ib_mr_type,
        max_num_sg: u32,
    ) -> *mut bindings::ib_mr {
        // SAFETY: a live PD of a live device of this type.
        let (dev, user_pd) = unsafe { (Self::from_raw((*pd).device), !(*pd).uobject.is_null()) };
        if user_pd {
            // User space has no verb that reaches here; the core never asks for it.
            return EINVAL.to_ptr();
        }
        // SAFETY: a kernel PD (checked above); the mark goes to the region created here.
        let kc = unsafe { KernelConsumer::new() };
        match T::alloc_mr(dev, PdId::of(pd), ty, max_num_sg, kc) {
            Ok((stag, init)) => Self::new_mr(stag, init),
            Err(e) => e.to_ptr(),
        }
    }

    /// # Safety
    ///
    /// Called by `ib_sg_to_pages` from `map_mr_sg_c` for an MR of this type.
    unsafe extern "C" fn set_page_c(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
        // SAFETY: `map_mr_sg_c` passes its live MR.
        errno(T::mr_set_page(unsafe { IbMr::<T::Mr>::from_raw(mr) }, addr))
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn map_mr_sg_c(
        mr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        nents: c_int,
        offset: *mut kernel::ffi::c_uint,
    ) -> c_int {
        // SAFETY: a live MR of this device (allocated by `new_mr`).
        let obj = unsafe { IbMr::<T::Mr>::from_raw(mr) };
        if let Err(e) = T::mr_map_begin(obj) {
            return e.to_errno();
        }
        // SAFETY: a DMA-mapped scatterlist of `nents` entries from the consumer;
        // `ib_sg_to_pages` sets `iova`/`length` and calls `set_page_c` with this MR.
        let n = unsafe { bindings::ib_sg_to_pages(mr, sg, nents, offset, Some(Self::set_page_c)) };
        if n > 0 {
            // SAFETY: the MR is live; `ib_sg_to_pages` just set these fields and the
            // consumer does not change them concurrently.
            let (iova, len, page) = unsafe { ((*mr).iova, (*mr).length, (*mr).page_size) };
            T::mr_map_end(obj, iova, len, page);
        }
        n
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
    pub(super) unsafe extern "C" fn dereg_mr_c(
        mr: *mut bindings::ib_mr,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: a live MR of this device (from `new_mr`).
        let (dev, obj) = unsafe { (Self::from_raw((*mr).device), IbMr::<T::Mr>::from_raw(mr)) };
        T::dereg_mr(dev, obj);
        // SAFETY: no verb runs on the MR any more; it was allocated by `new_mr`.
        unsafe {
            Obj::<bindings::ib_mr, T::Mr>::drop_data(mr);
            drop(KBox::from_raw(mr.cast::<MaybeUninit<IbMr<T::Mr>>>()));
        }
        0
    }
}
