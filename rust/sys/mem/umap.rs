// SPDX-License-Identifier: GPL-2.0

//! User mappings of rings: `rdma_user_mmap_entry`s that own vmalloc buffers, the entry
//! that reserves a user context's low page offsets, and the device's `mmap`/`mmap_free`
//! operations.
//!
//! Ownership: an entry (and with it the buffer) is allocated by [`MmapEntry::insert`] and
//! registered with the user context; the RDMA core hands out its offset (the siw ABI's
//! `*_key`) and holds references while an `mmap` call uses it. Dropping the [`MmapEntry`]
//! removes it from the context (no new mappings); the core calls `mmap_free` when its last
//! reference goes, and only then is the buffer freed. Pages a process still has mapped hold
//! their own page references, so freeing the vmalloc area never leaves a dangling user
//! mapping.
//!
//! The offsets: each user context holds a [`CtxMaps`] from `alloc_ucontext` to
//! `dealloc_ucontext`, an entry without buffer over page offsets 0 to [`FIRST_PGOFF`] - 1,
//! and rings get offsets from [`FIRST_PGOFF`] on. The core keeps a context's entries in an
//! XArray (`ib_ucontext::mmap_xa`), one slot per page. An insertion that has to create a
//! node and a child node below it, and fails to allocate the child, leaves the first node
//! behind, empty; nothing erases it, and at close the core finds the XArray not empty
//! (`WARN_ON(!xa_empty(&ucontext->mmap_xa))` in `ufile_destroy_ucontext`) and leaks the
//! node. A context's first ring at [`FIRST_PGOFF`] would need just that (a top node and
//! a leaf). The reserving entry is inserted page by page from offset 0 instead: the tree
//! grows from its first leaf, a new top node holds the nodes before it, and the core
//! undoes a failed insertion by erasing its pages, which frees every node it emptied. It
//! leaves the top node and the leaf over [`FIRST_PGOFF`] in place, so a ring's insertion
//! creates at most one node until the rings reach page offset 4,096 (16 MiB of rings
//! with 4 KiB pages), like any driver's that hands out offsets with
//! `rdma_user_mmap_entry_insert`.

use crate::sys::bindings;
use crate::sys::logtag::Tag;
use crate::sys::mem::ring::VBuf;
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::UserResponse;
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::types::Opaque;

/// The lowest page offset handed out as a mapping's key: the one after
/// `SIW_INVAL_UOBJ_KEY`.
///
/// The siw library takes a key equal to `SIW_INVAL_UOBJ_KEY` (0x90000) for "no mapping"
/// and fails the verb (`ibv_create_cq` returns NULL after the kernel created the CQ), so
/// no ring may ever get that key. Counting from 0, the core would hand it to the 145th
/// ring of a user context (4 KiB pages): 37 connections of `ucmatose` in one process.
/// Keys above it are fine; the library only compares with it.
const FIRST_PGOFF: u32 = (bindings::SIW_INVAL_UOBJ_KEY >> kernel::page::PAGE_SHIFT) + 1;

/// The driver's mmap entry: the core's entry first, then the buffer it maps (none for the
/// entry that reserves offsets, [`CtxMaps`]).
#[repr(C)]
struct Entry {
    base: Opaque<bindings::rdma_user_mmap_entry>,
    buf: Option<VBuf>,
}

/// An inserted mmap entry; removed from its user context on drop.
///
/// # Invariants
///
/// `entry` is a `KBox<Entry>`-allocated entry inserted into a user context with
/// `rdma_user_mmap_entry_insert_range`, whose initial reference this value owns (not yet
/// removed). While it is held the entry, and so its buffer, stay allocated.
pub(crate) struct MmapEntry {
    entry: NonNull<Entry>,
}

// SAFETY: the entry is only touched by the RDMA core under its own locking and by `drop`.
unsafe impl Send for MmapEntry {}
// SAFETY: no `&self` method accesses the entry.
unsafe impl Sync for MmapEntry {}

impl MmapEntry {
    /// Makes `buf` mappable by the user context of the verb `udata` belongs to; returns the
    /// entry and its mmap offset (octets), at least [`FIRST_PGOFF`] pages.
    ///
    /// # Errors
    ///
    /// `EINVAL` without a user context, `ENOMEM`, or the error of
    /// `rdma_user_mmap_entry_insert_range`.
    pub(in crate::sys) fn insert(udata: &UserResponse<'_>, buf: VBuf) -> Result<(Self, u64)> {
        let uctx = udata.ucontext().ok_or(EINVAL)?;
        let len = buf.len();
        // SAFETY: `uctx` is the live context of the running verb.
        unsafe { Self::insert_entry(uctx, Some(buf), len, FIRST_PGOFF, u32::MAX) }
    }

    /// Inserts a new entry for `buf` of `len` octets into `uctx` at the lowest free page
    /// offset from `min_pgoff` to `max_pgoff` (where the entry starts); returns it and its
    /// offset (octets).
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `rdma_user_mmap_entry_insert_range` (`ENOMEM` too when no
    /// offset in the range is free).
    ///
    /// # Safety
    ///
    /// `uctx` is a live user context of an rsiw device that stays live until the entry is
    /// dropped.
    unsafe fn insert_entry(
        uctx: *mut bindings::ib_ucontext,
        buf: Option<VBuf>,
        len: usize,
        min_pgoff: u32,
        max_pgoff: u32,
    ) -> Result<(Self, u64)> {
        let boxed = KBox::new(
            Entry {
                base: Opaque::zeroed(),
                buf,
            },
            GFP_KERNEL,
        )?;
        let raw = KBox::into_raw(boxed);
        // SAFETY: `raw` is a valid, exclusively owned, zeroed entry; `uctx` is live (the
        // caller).
        let ret = unsafe {
            bindings::rdma_user_mmap_entry_insert_range(
                uctx,
                (*raw).base.get(),
                len,
                min_pgoff,
                max_pgoff,
            )
        };
        if ret != 0 {
            // SAFETY: the insertion failed, so the core holds no reference: still ours.
            drop(unsafe { KBox::from_raw(raw) });
            return Err(Error::from_errno(ret));
        }
        // SAFETY: the entry is inserted and live; the offset is fixed at insertion.
        let key = unsafe { bindings::rsiw_mmap_get_offset((*raw).base.get()) };
        // INVARIANT: inserted, the initial reference is ours. `KBox::into_raw` is non-null.
        let entry = NonNull::new(raw).ok_or(ENOMEM)?;
        Ok((Self { entry }, key))
    }
}

/// The driver part of a user context: the entry without buffer that holds page offsets 0
/// to [`FIRST_PGOFF`] - 1 while the context lives (module docs: it keeps the failed
/// insertion of a ring from leaving an empty XArray node behind).
pub(in crate::sys) struct CtxMaps {
    _low: MmapEntry,
}

impl CtxMaps {
    /// Reserves page offsets 0 to [`FIRST_PGOFF`] - 1 of `uctx` (`alloc_ucontext`).
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `rdma_user_mmap_entry_insert_range`.
    ///
    /// # Safety
    ///
    /// `uctx` is a live user context of an rsiw device, with no entry yet, that stays live
    /// until the returned value is dropped (by `dealloc_ucontext` at the latest).
    pub(in crate::sys) unsafe fn new(uctx: *mut bindings::ib_ucontext) -> Result<Self> {
        let len = (FIRST_PGOFF as usize) << kernel::page::PAGE_SHIFT;
        // SAFETY: guaranteed by the caller. The range starts at 0 and ends there: a
        // context with no entry has it free.
        let (low, _) = unsafe { MmapEntry::insert_entry(uctx, None, len, 0, 0)? };
        Ok(Self { _low: low })
    }
}

impl Drop for MmapEntry {
    fn drop(&mut self) {
        // SAFETY: the entry is inserted and our reference not yet dropped (type invariant);
        // this drops it, and the core calls `mmap_free` when no `mmap` call holds one.
        unsafe { bindings::rdma_user_mmap_entry_remove((*self.entry.as_ptr()).base.get()) };
    }
}

/// `ib_device_ops::mmap`: maps the ring whose entry matches the VMA's offset.
///
/// # Safety
///
/// Called only by the RDMA core with a live user context of an rsiw device and the VMA
/// being set up.
pub(in crate::sys) unsafe extern "C" fn mmap_c(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> kernel::ffi::c_int {
    let refuse = || {
        // SAFETY: the core passes a live user context of a live device.
        let dev = unsafe { (*uctx).device };
        let name = |b: &mut [u8]| {
            // SAFETY: `dev` is live (above).
            unsafe { crate::sys::ibdev::raw_name_into(dev, b) }
        };
        pr_err_ratelimited!(
            "{}: mmap: no ring at this offset and length\n",
            Tag::with_name(name, None)
        );
        EINVAL.to_errno()
    };
    // SAFETY: the core passes a live context and VMA; the lookup checks the offset and
    // the length against the entry and returns it with a reference, or null.
    let base = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if base.is_null() {
        return refuse();
    }
    // SAFETY: rsiw's entries are `Entry`s (`MmapEntry::insert_entry`), `base` first; the
    // reference keeps the entry and its buffer alive.
    let entry = unsafe { &*base.cast::<Entry>() };
    let ret = match &entry.buf {
        Some(buf) => {
            let (kaddr, len) = (buf.as_ptr().cast(), buf.len() as kernel::ffi::c_ulong);
            // The core holds the mmap lock for writing; the helper refuses a VMA longer
            // than the area. SAFETY: a live, page-aligned vmalloc area of `len` octets
            // (`VBuf`), kept alive by the entry reference.
            unsafe { bindings::rsiw_remap_vmalloc(vma, kaddr, len) }
        }
        // The offsets below the first ring's (`CtxMaps`).
        None => refuse(),
    };
    // SAFETY: balances `rdma_user_mmap_entry_get`.
    unsafe { bindings::rdma_user_mmap_entry_put(base) };
    ret
}

/// `ib_device_ops::mmap_free`: the core dropped its last reference to an entry.
///
/// # Safety
///
/// Called only by the RDMA core, once per entry, after the entry was removed and no
/// reference remains.
pub(in crate::sys) unsafe extern "C" fn mmap_free_c(base: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: rsiw's entries are `KBox<Entry>` allocations with `base` first; the core
    // guarantees nobody uses the entry any more.
    drop(unsafe { KBox::from_raw(base.cast::<Entry>()) });
}
