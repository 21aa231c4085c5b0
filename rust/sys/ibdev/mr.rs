// SPDX-License-Identifier: GPL-2.0

//! Trampolines of the MR verbs. The core's MR verbs return the object, so rsiw allocates
//! MR containers itself (`new_mr`, a `KBox`) and frees them in `dereg_mr_c`.

use super::{errno, DeviceOps, IbDevice, MrOps};
use crate::sys::bindings;
use crate::sys::logtag::Tag;
use crate::sys::mem::kmem::KernelConsumer;
use crate::sys::obj::{IbMr, Obj, PdId};
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::user;
use core::mem::MaybeUninit;
use kernel::ffi::c_int;
use kernel::prelude::*;

impl<T: DeviceOps> IbDevice<T> {
    /// Allocates an MR container, then runs the MR constructor `create`, moves its data in
    /// and sets the keys to its STag; returns the MR, or the error as an `ERR_PTR`. The
    /// container comes first so that a registered region is never dropped unregistered.
    fn new_mr(create: impl FnOnce() -> Result<(u32, T::Mr)>) -> *mut bindings::ib_mr {
        let boxed = match KBox::<IbMr<T::Mr>>::new_uninit(GFP_KERNEL | __GFP_ZERO) {
            Ok(b) => b,
            Err(_) => return ENOMEM.to_ptr(),
        };
        let (stag, data) = match create() {
            Ok(r) => r,
            Err(e) => return e.to_ptr(),
        };
        let raw = KBox::into_raw(boxed).cast::<bindings::ib_mr>();
        // SAFETY: the allocation is zeroed (a valid empty `ib_mr`), sized and aligned for
        // `IbMr<T::Mr>`, and exclusively ours; moving a value in cannot fail.
        let Ok(()) = unsafe { IbMr::<T::Mr>::init_data(raw, data) };
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
        Self::new_mr(|| T::Mr::get_dma(dev, PdId::of(pd), access, kc))
    }

    /// # Safety
    ///
    /// As for `create_cq_c`.
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
        let pd = PdId::of(pd);
        Self::new_mr(|| T::Mr::reg_user(dev, pd, start, len, iova, access, &mut udata))
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
        if ty != bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            pr_err_ratelimited!(
                "{}: alloc_mr: MR type {ty} is not supported\n",
                Tag::with_name(|b| dev.name_into(b), None)
            );
            return EOPNOTSUPP.to_ptr();
        }
        // SAFETY: a kernel PD (checked above); the mark goes to the region created here.
        let kc = unsafe { KernelConsumer::new() };
        Self::new_mr(|| T::Mr::alloc_fast(dev, PdId::of(pd), max_num_sg, kc))
    }

    /// # Safety
    ///
    /// Called by `ib_sg_to_pages` from `map_mr_sg_c` for an MR of this type.
    unsafe extern "C" fn set_page_c(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
        // SAFETY: `map_mr_sg_c` passes its live MR.
        let obj = unsafe { IbMr::<T::Mr>::from_raw(mr) };
        errno(T::Mr::set_page(obj, addr))
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
        if let Err(e) = T::Mr::map_begin(obj) {
            return e.to_errno();
        }
        // SAFETY: a DMA-mapped scatterlist of `nents` entries from the consumer;
        // `ib_sg_to_pages` sets `iova`/`length` and calls `set_page_c` with this MR.
        let n = unsafe { bindings::ib_sg_to_pages(mr, sg, nents, offset, Some(Self::set_page_c)) };
        if n > 0 {
            // SAFETY: the MR is live; `ib_sg_to_pages` just set these fields and the
            // consumer does not change them concurrently.
            let (iova, len, page) = unsafe { ((*mr).iova, (*mr).length, (*mr).page_size) };
            T::Mr::map_end(obj, iova, len, page);
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
        T::Mr::dereg(dev, obj);
        // SAFETY: no verb runs on the MR any more; it was allocated by `new_mr`.
        unsafe {
            Obj::<bindings::ib_mr, T::Mr>::drop_data(mr);
            drop(KBox::from_raw(mr.cast::<MaybeUninit<IbMr<T::Mr>>>()));
        }
        0
    }
}
