// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`struct ib_umem`) for user memory regions.
//!
//! The placement path (a later slice) writes into and reads from a region through the
//! umem's scatter table; this module keeps the umem alive for the region's lifetime and
//! releases it (unpinning the pages) when the last reference to the region goes.

use super::bindings;
use super::ibdev::{DeviceOps, IbDevice};
use core::ptr::NonNull;
use kernel::prelude::*;

/// A pinned range of user memory.
///
/// # Invariants
///
/// `ptr` is a umem returned by `ib_umem_get_va` and owned by this value (released on
/// drop). Its fields do not change while it exists.
pub(crate) struct UMem {
    ptr: NonNull<bindings::ib_umem>,
}

// SAFETY: the umem is immutable after creation; `ib_umem_release` may run on any thread in
// process context.
unsafe impl Send for UMem {}
// SAFETY: as above.
unsafe impl Sync for UMem {}

impl UMem {
    /// Pins `len` octets of the current process's memory at `addr` for `access`
    /// (`IB_ACCESS_*`; write access pins writable pages).
    ///
    /// # Errors
    ///
    /// The error of `ib_umem_get_va`: `EFAULT` for an unmapped range, `ENOMEM` beyond
    /// `RLIMIT_MEMLOCK`, `EINVAL` for overflowing ranges.
    pub(crate) fn get<T: DeviceOps>(dev: &IbDevice<T>, addr: u64, len: u64, access: i32) -> Result<Self> {
        let addr = usize::try_from(addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: the device is live; the call pins pages of the current process or
        // returns an `ERR_PTR`.
        let raw = unsafe { bindings::rsiw_umem_get_va(dev.as_raw(), addr as kernel::ffi::c_ulong, len, access) };
        let raw = kernel::error::from_err_ptr(raw)?;
        let ptr = NonNull::new(raw).ok_or(ENOMEM)?;
        // INVARIANT: a umem from `ib_umem_get_va`, now owned by us.
        Ok(Self { ptr })
    }

    /// The user virtual address of the first octet.
    pub(crate) fn address(&self) -> u64 {
        // SAFETY: the umem is live and immutable (type invariant).
        unsafe { (*self.ptr.as_ptr()).address as u64 }
    }

    /// The length in octets.
    pub(crate) fn length(&self) -> u64 {
        // SAFETY: as above.
        unsafe { (*self.ptr.as_ptr()).length as u64 }
    }
}

impl Drop for UMem {
    fn drop(&mut self) {
        // SAFETY: the umem is owned by us (type invariant) and not used after this.
        unsafe { bindings::ib_umem_release(self.ptr.as_ptr()) };
    }
}
