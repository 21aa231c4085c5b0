// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`struct ib_umem`) for user memory regions.
//!
//! The data paths write into and read from a region through the umem's scatter table
//! ([`UMem::range_at`]: a binary search of the table's entries, indexed once when the
//! memory is pinned); this module keeps the umem alive for the region's lifetime and
//! releases it (unpinning the pages) when the last reference to the region goes. That can
//! be in the receive path (softirq), while releasing may sleep, so the release runs on
//! rsiw's workqueue.

use crate::sys::bindings;
use crate::sys::ibdev::{DeviceOps, IbDevice};
use core::ptr::NonNull;
use kernel::prelude::*;

/// A pinned range of user memory.
///
/// # Invariants
///
/// `ptr` is a umem returned by `ib_umem_get_va` for an rsiw device and owned by this value;
/// `release` was prepared for it by `rsiw_umem_release_prepare` and is used once, on drop,
/// to release it from the workqueue. Its fields and its DMA-mapped scatter table do not
/// change while it exists. rsiw devices use virtual DMA (no `dma_device`), so the table's
/// DMA addresses are the kernel virtual addresses of the pinned pages
/// (`ib_dma_virt_map_sg()`). `extents` is empty or holds the table's DMA-mapped entries
/// in order, each at the sum of the lengths before it.
pub(crate) struct UMem {
    ptr: NonNull<bindings::ib_umem>,
    release: NonNull<bindings::rsiw_umem_release>,
    extents: KVVec<Extent>,
}

/// One DMA-mapped entry of a umem's scatter table: `len` octets at kernel virtual address
/// `kva`, from octet `off` of the pinned pages (counted from the start of the first page).
#[derive(Clone, Copy)]
struct Extent {
    off: u64,
    kva: u64,
    len: u64,
}

// SAFETY: the umem is immutable after creation; its release is queued from any thread and
// runs on the workqueue.
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
    pub(crate) fn get<T: DeviceOps>(
        dev: &IbDevice<T>,
        addr: u64,
        len: u64,
        access: i32,
    ) -> Result<Self> {
        let addr = usize::try_from(addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: the device is live; the call pins pages of the current process or
        // returns an `ERR_PTR`.
        let raw = unsafe {
            bindings::rsiw_umem_get_va(dev.as_raw(), addr as kernel::ffi::c_ulong, len, access)
        };
        let raw = kernel::error::from_err_ptr(raw)?;
        let ptr = NonNull::new(raw).ok_or(ENOMEM)?;
        // SAFETY: `ptr` is a live umem of a live device.
        let release = unsafe { bindings::rsiw_umem_release_prepare(ptr.as_ptr()) };
        let Some(release) = NonNull::new(release) else {
            // SAFETY: the umem is ours and not used after this.
            unsafe { bindings::ib_umem_release(ptr.as_ptr()) };
            return Err(ENOMEM);
        };
        // INVARIANT: a umem from `ib_umem_get_va`, now owned by us, with its release; no
        // extents yet. Dropped on error, it releases the umem.
        let mut this = Self {
            ptr,
            release,
            extents: KVVec::new(),
        };
        this.extents = this.index()?;
        Ok(this)
    }

    /// The scatter table's DMA-mapped entries, in order (walked once, here, rather than
    /// for every lookup of the data paths).
    ///
    /// # Errors
    ///
    /// `ENOMEM`; `EINVAL` if the table is shorter than `nents` or longer than `u64`.
    fn index(&self) -> Result<KVVec<Extent>> {
        // SAFETY: the umem is live and immutable (type invariant); `ib_umem_get` built its
        // scatter table from whole pages and DMA-mapped `nents` entries of it.
        let (mut sg, n) = unsafe {
            let t = &(*self.ptr.as_ptr()).sgt_append.sgt;
            (t.sgl, t.nents)
        };
        let mut extents = KVVec::with_capacity(n as usize, GFP_KERNEL)?;
        let mut off = 0u64;
        for _ in 0..n {
            if sg.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: `sg` is one of the `nents` mapped entries of the live table.
            let (kva, len) = unsafe {
                (
                    bindings::rsiw_sg_dma_address(sg),
                    u64::from(bindings::rsiw_sg_dma_len(sg)),
                )
            };
            extents.push(Extent { off, kva, len }, GFP_KERNEL)?;
            off = off.checked_add(len).ok_or(EINVAL)?;
            // SAFETY: as above; `sg_next` follows chained tables and returns null at the end.
            sg = unsafe { bindings::rsiw_sg_next(sg) };
        }
        Ok(extents)
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

    /// The offset of the first octet in its page (`ib_umem_offset()`).
    pub(crate) fn page_offset(&self) -> u64 {
        self.address() & (kernel::page::PAGE_SIZE as u64 - 1)
    }

    /// Returns the kernel virtual address of octet `off` of the pinned pages, counted from
    /// the start of the first page (so octet `k` of the range is at
    /// `off = page_offset() + k`), and how many octets are contiguous from there; `None`
    /// beyond the last page.
    fn segment_at(&self, off: u64) -> Option<(u64, u64)> {
        let i = self.extents.partition_point(|e| e.off + e.len <= off);
        let e = self.extents.get(i)?;
        let rel = off.checked_sub(e.off)?;
        if rel >= e.len {
            return None;
        }
        Some((e.kva.checked_add(rel)?, e.len - rel))
    }

    /// [`UMem::segment_at`] as a range the transport copies to and from: at most `max`
    /// octets at octet `off` of the pinned pages (counted as there).
    pub(crate) fn range_at(&self, off: u64, max: u64) -> Option<crate::sys::mem::kmem::Kva> {
        let (kva, n) = self.segment_at(off)?;
        // SAFETY: the pages are pinned and in the kernel's linear map while the umem lives
        // (type invariant); the range's holder keeps the region, hence the umem, alive.
        Some(unsafe { crate::sys::mem::kmem::Kva::new(kva, n.min(max)) })
    }
}

impl Drop for UMem {
    fn drop(&mut self) {
        // SAFETY: the umem is owned by us and `release` prepared for it (type invariant);
        // neither is used after this. Any context: this only queues the release.
        unsafe { bindings::rsiw_umem_release_async(self.release.as_ptr()) };
    }
}
