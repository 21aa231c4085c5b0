// SPDX-License-Identifier: GPL-2.0

//! Kernel fast-registration memory regions: allocation in a PD and mapping of a kernel
//! buffer into the MR's page list, ready for a REG_MR work request.

use super::{from_err_ptr, KPd};
use crate::sys::ibdev::DeviceOps;
use crate::sys::{bindings, Pod};
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::scatterlist {}

/// A kernel fast-registration MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`).
///
/// # Invariants
///
/// `raw` is an MR of a PD of a `KDevice<T>`, owned by this value.
pub(crate) struct KMr<'p, T: DeviceOps> {
    raw: NonNull<bindings::ib_mr>,
    _p: PhantomData<&'p KPd<'p, T>>,
}

impl<'p, T: DeviceOps> KMr<'p, T> {
    /// Allocates a fast-registration MR for up to `max_sg` pages.
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_mr`.
    pub(crate) fn new(pd: &'p KPd<'p, T>, max_sg: u32) -> Result<Self> {
        // SAFETY: a live PD; the core returns an MR or an `ERR_PTR`.
        let raw = from_err_ptr(unsafe {
            bindings::ib_alloc_mr(pd.as_raw(), bindings::ib_mr_type_IB_MR_TYPE_MEM_REG, max_sg)
        })?;
        Ok(Self {
            raw,
            _p: PhantomData,
        })
    }

    /// `ib_map_mr_sg` of `buf` (one scatterlist entry, kmalloc memory) in pages of
    /// `PAGE_SIZE`; returns how many entries were mapped (1) or a negative errno.
    pub(crate) fn map(&self, buf: &[u8]) -> i32 {
        let Ok(len) = u32::try_from(buf.len()) else {
            return EINVAL.to_errno();
        };
        let mut sg = bindings::scatterlist::zeroed();
        // SAFETY: `sg` is a single-entry table for `len` octets of linear-map `buf`, which
        // outlives the call; virtual DMA maps it to its kernel address, as the core would.
        unsafe {
            bindings::sg_init_one(&mut sg, buf.as_ptr().cast(), len);
            if bindings::ib_dma_virt_map_sg((*self.raw.as_ptr()).device, &mut sg, 1) != 1 {
                return EIO.to_errno();
            }
            bindings::ib_map_mr_sg(
                self.raw.as_ptr(),
                &mut sg,
                1,
                core::ptr::null_mut(),
                kernel::page::PAGE_SIZE as u32,
            )
        }
    }

    /// The lkey (= rkey) and the mapped `(iova, length)`.
    pub(crate) fn key_and_range(&self) -> (u32, u64, u64) {
        // SAFETY: a live MR; the fields are set at allocation and by `map`.
        unsafe {
            let m = self.raw.as_ptr();
            ((*m).lkey, (*m).iova, (*m).length)
        }
    }
}

impl<T: DeviceOps> Drop for KMr<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant).
        unsafe { bindings::ib_dereg_mr_user(self.raw.as_ptr(), core::ptr::null_mut()) };
    }
}
