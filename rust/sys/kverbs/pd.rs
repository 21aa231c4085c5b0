// SPDX-License-Identifier: GPL-2.0

//! Kernel protection domains: the object every other kernel object of a device is created
//! in, with the DMA MR the core allocates for it.

use super::{from_err_ptr, KDevice, CALLER};
use crate::sys::bindings;
use crate::sys::ibdev::DeviceOps;
use crate::sys::obj::PdId;
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;

/// A kernel protection domain (`ib_alloc_pd`, with or without `IB_PD_UNSAFE_GLOBAL_RKEY`).
///
/// # Invariants
///
/// `raw` is a PD of the borrowed device, owned by this value.
pub(crate) struct KPd<'d, T: DeviceOps> {
    raw: NonNull<bindings::ib_pd>,
    _d: PhantomData<&'d KDevice<T>>,
}

impl<'d, T: DeviceOps> KPd<'d, T> {
    /// Allocates a PD (the core also gets its DMA MR for `local_dma_lkey`).
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_pd`.
    pub(crate) fn new(dev: &'d KDevice<T>) -> Result<Self> {
        Self::alloc(dev, 0)
    }

    /// Allocates a PD with `IB_PD_UNSAFE_GLOBAL_RKEY`: the core's DMA MR for it then grants
    /// remote read and write over all kernel memory, under [`Self::global_rkey`].
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_pd`.
    pub(crate) fn with_global_rkey(dev: &'d KDevice<T>) -> Result<Self> {
        Self::alloc(dev, bindings::ib_pd_flags_IB_PD_UNSAFE_GLOBAL_RKEY)
    }

    fn alloc(dev: &'d KDevice<T>, flags: bindings::ib_pd_flags) -> Result<Self> {
        // SAFETY: a live device; the core returns a PD or an `ERR_PTR`.
        let raw = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(dev.as_raw(), flags, CALLER.as_char_ptr())
        })?;
        // INVARIANT: the PD the core allocated on `dev`, owned from here.
        Ok(Self {
            raw,
            _d: PhantomData,
        })
    }

    /// The rkey of the PD's DMA MR with remote rights, 0 without `IB_PD_UNSAFE_GLOBAL_RKEY`.
    pub(crate) fn global_rkey(&self) -> u32 {
        // SAFETY: a live PD; the field is set at allocation.
        unsafe { (*self.raw.as_ptr()).unsafe_global_rkey }
    }

    /// The lkey of the PD's DMA MR (all kernel memory, local write).
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: a live PD; the field is set at allocation.
        unsafe { (*self.raw.as_ptr()).local_dma_lkey }
    }

    /// The PD's identity as rsiw's objects record it.
    pub(crate) fn id(&self) -> PdId {
        PdId::of(self.raw.as_ptr())
    }

    /// The core's pointer, live while `self` is borrowed.
    pub(super) fn as_raw(&self) -> *mut bindings::ib_pd {
        self.raw.as_ptr()
    }
}

impl<T: DeviceOps> Drop for KPd<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); objects created from it borrow it and are gone.
        let ret = unsafe { bindings::ib_dealloc_pd_user(self.raw.as_ptr(), core::ptr::null_mut()) };
        if ret != 0 {
            pr_err!("kverbs: ib_dealloc_pd failed ({ret})\n");
        }
    }
}
