// SPDX-License-Identifier: GPL-2.0

//! Work and completion rings in vmalloc memory: the siw user ABI's SQ, RQ, SRQ and CQ
//! arrays, shared with user space for user objects and private for kernel objects.
//!
//! # Trust model
//!
//! A user object's ring is mapped writable into the owning process, which may change any
//! octet at any time, from any thread, with or without atomics. rsiw therefore:
//! - never creates a Rust reference to ring memory: every access is an atomic load/store
//!   of one flags word or a single volatile copy of one element, through raw pointers;
//! - indexes only modulo the ring size it chose (a power of two), never with values read
//!   from the ring;
//! - owns a slot through its flags word: the producer writes the element, then stores the
//!   flags with release order; the consumer loads the flags with acquire order, copies the
//!   element once into a kernel value, validates that copy, and acts only on it. It
//!   releases the slot by storing zero flags (release);
//! - treats every value read from a user ring as arbitrary: the element types implement
//!   [`RingElem`], which guarantees every bit pattern is a valid value, and rsiw validates
//!   opcodes, counts and lengths before use. A lying user can only hurt itself.
//!
//! Memory shared with user space is outside Rust's memory model; volatile and atomic
//! accesses are the kernel's established way to touch it (`READ_ONCE`, `smp_load_acquire`).
//! Kernel rings use the same accessors so one code path serves both.

use crate::sys::bindings;
use crate::sys::mem::umap::MmapEntry;
use crate::sys::udata::UserResponse;
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::sync::atomic::{atomic_load, atomic_store, Acquire, Release};
use kernel::sync::barrier::{smp_mb, Full};

/// A zeroed vmalloc buffer, freed with `vfree` on drop.
///
/// # Invariants
///
/// `ptr` is a live vmalloc allocation of `len` octets (page-aligned, zeroed when created)
/// owned by this value.
pub(crate) struct VBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value; access goes through raw pointers
// with the synchronisation described in the module documentation.
unsafe impl Send for VBuf {}
// SAFETY: as above.
unsafe impl Sync for VBuf {}

impl VBuf {
    /// Allocates `len` zeroed octets that can be mapped to user space, charged to the
    /// caller's memory cgroup (`rsiw_vmalloc_user`), or, with `user == false`,
    /// kernel-only (`vzalloc`).
    ///
    /// # Errors
    ///
    /// `EINVAL` for `len == 0`; `ENOMEM`, also when the caller's memory cgroup has no
    /// room (its OOM killer is not invoked).
    fn new(len: usize, user: bool) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let len_c = len as kernel::ffi::c_ulong;
        // SAFETY: plain allocations; a null return means failure.
        let raw = unsafe {
            if user {
                bindings::rsiw_vmalloc_user(len_c)
            } else {
                bindings::rsiw_vzalloc(len_c)
            }
        };
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or(ENOMEM)?;
        // INVARIANT: a fresh, zeroed vmalloc allocation of `len` octets.
        Ok(Self { ptr, len })
    }

    /// The start of the buffer.
    pub(in crate::sys) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in octets.
    pub(in crate::sys) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for VBuf {
    fn drop(&mut self) {
        // SAFETY: a live vmalloc allocation owned by us (type invariant). Pages a process
        // still has mapped hold their own page references, so user mappings stay valid.
        unsafe { bindings::vfree(self.ptr.as_ptr().cast()) };
    }
}

/// An element type of a ring.
///
/// # Safety
///
/// The type is `repr(C)` plain data for which every bit pattern is a valid value (integers
/// and unions of integers and raw pointers only), and `flags_ptr` returns a pointer to an
/// aligned `i16` (`width == 2`) or `i8` (`width == 1`) field inside the element.
pub(crate) unsafe trait RingElem: Copy {
    /// Width in octets of the flags word.
    const FLAGS_WIDTH: usize;
    /// Returns a pointer to the flags field of the element at `slot`.
    fn flags_ptr(slot: *mut Self) -> *mut u8;
}

// SAFETY: `siw_sqe` is integers and unions of integers; `flags` is a `__u16` at an even
// offset (8).
unsafe impl RingElem for bindings::siw_sqe {
    const FLAGS_WIDTH: usize = 2;
    fn flags_ptr(slot: *mut Self) -> *mut u8 {
        // Computes an address only (no access): in bounds for a valid `slot`.
        slot.cast::<u8>()
            .wrapping_add(core::mem::offset_of!(bindings::siw_sqe, flags))
    }
}

// SAFETY: `siw_rqe` is integers only; `flags` is a `__u16` at offset 8.
unsafe impl RingElem for bindings::siw_rqe {
    const FLAGS_WIDTH: usize = 2;
    fn flags_ptr(slot: *mut Self) -> *mut u8 {
        slot.cast::<u8>()
            .wrapping_add(core::mem::offset_of!(bindings::siw_rqe, flags))
    }
}

// SAFETY: `siw_cqe` is integers and unions of integers and a raw pointer (any bit pattern is
// a valid raw pointer; rsiw never dereferences one read from a ring); `flags` is a `__u8`.
unsafe impl RingElem for bindings::siw_cqe {
    const FLAGS_WIDTH: usize = 1;
    fn flags_ptr(slot: *mut Self) -> *mut u8 {
        slot.cast::<u8>()
            .wrapping_add(core::mem::offset_of!(bindings::siw_cqe, flags))
    }
}

/// Where a ring's memory lives.
enum Backing {
    /// Kernel-only memory, owned by the ring.
    Kernel(#[expect(dead_code, reason = "owns the memory; freed on drop")] VBuf),
    /// Memory owned by a user mmap entry; removed from the user context when dropped.
    User(#[expect(dead_code, reason = "keeps the entry (and memory) alive")] MmapEntry),
}

/// What follows the elements of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nothing (SQ, RQ, SRQ).
    None,
    /// The CQ's control word (`struct siw_cq_ctrl`: the arm state user space sets).
    CqCtrl,
}

/// A ring of `n` elements of type `E`, optionally followed by one 32-bit control word
/// (the CQ's `struct siw_cq_ctrl`).
///
/// # Invariants
///
/// `base` points to `n * size_of::<E>()` octets (plus a `siw_cq_ctrl` if `ctrl`) inside the
/// memory kept alive by `_backing`, page-aligned; `n` is a power of two.
pub(crate) struct Ring<E: RingElem> {
    base: NonNull<E>,
    n: u32,
    ctrl: bool,
    _backing: Backing,
    _e: PhantomData<E>,
}

// SAFETY: access to the memory is by atomics and volatile copies only (module docs); the
// backing is `Send`/`Sync`.
unsafe impl<E: RingElem> Send for Ring<E> {}
// SAFETY: as above.
unsafe impl<E: RingElem> Sync for Ring<E> {}

/// Returns the octet length of a ring of `n` elements (and a control word).
fn ring_len<E>(n: u32, tail: Tail) -> Result<usize> {
    let extra = if tail == Tail::CqCtrl {
        core::mem::size_of::<bindings::siw_cq_ctrl>()
    } else {
        0
    };
    (n as usize)
        .checked_mul(core::mem::size_of::<E>())
        .and_then(|l| l.checked_add(extra))
        .ok_or(EINVAL)
}

impl<E: RingElem> Ring<E> {
    /// Allocates a zeroed kernel-only ring of `n` elements (a power of two), followed by a
    /// `siw_cq_ctrl` word with [`Tail::CqCtrl`].
    ///
    /// # Errors
    ///
    /// `EINVAL` if `n` is not a power of two (or the size overflows); `ENOMEM`.
    pub(crate) fn new_kernel(n: u32, tail: Tail) -> Result<Self> {
        if !n.is_power_of_two() {
            return Err(EINVAL);
        }
        let ctrl = tail == Tail::CqCtrl;
        let buf = VBuf::new(ring_len::<E>(n, tail)?, false)?;
        let base = NonNull::new(buf.as_ptr().cast::<E>()).ok_or(ENOMEM)?;
        // INVARIANT: the buffer has the length computed above and is owned by `backing`.
        Ok(Self {
            base,
            n,
            ctrl,
            _backing: Backing::Kernel(buf),
            _e: PhantomData,
        })
    }

    /// Allocates a zeroed ring of `n` elements (a power of two, plus a `siw_cq_ctrl` word with
    /// [`Tail::CqCtrl`]) that the user context of `udata` can map; returns it and the mmap offset
    /// (the siw ABI's `*_key`). Dropping the ring removes the mapping offset; pages a process still
    /// maps stay valid until it unmaps them.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `n` is not a power of two or there is no user context; `ENOMEM`; the
    /// error of `rdma_user_mmap_entry_insert`.
    pub(crate) fn new_user(udata: &UserResponse<'_>, n: u32, tail: Tail) -> Result<(Self, u64)> {
        let ctrl = tail == Tail::CqCtrl;
        if !n.is_power_of_two() {
            return Err(EINVAL);
        }
        let buf = VBuf::new(ring_len::<E>(n, tail)?, true)?;
        let base = NonNull::new(buf.as_ptr().cast::<E>()).ok_or(ENOMEM)?;
        let (entry, key) = MmapEntry::insert(udata, buf)?;
        // INVARIANT: the entry owns the buffer (its address does not change when moved
        // into the entry) until the entry is removed, which `_backing` does on drop.
        Ok((
            Self {
                base,
                n,
                ctrl,
                _backing: Backing::User(entry),
                _e: PhantomData,
            },
            key,
        ))
    }

    /// The number of slots.
    pub(crate) fn size(&self) -> u32 {
        self.n
    }

    fn slot(&self, idx: u32) -> *mut E {
        // In bounds: the index is reduced modulo the power-of-two size.
        self.base
            .as_ptr()
            .wrapping_add((idx & (self.n - 1)) as usize)
    }

    /// Loads the flags of slot `idx` (modulo the size) with acquire order.
    pub(crate) fn flags(&self, idx: u32) -> u16 {
        let p = E::flags_ptr(self.slot(idx));
        // SAFETY: `p` is an aligned flags field inside the ring (type invariant, `RingElem`);
        // kernel accesses to it are atomic. User-space writers are outside the LKMM.
        unsafe {
            if E::FLAGS_WIDTH == 2 {
                atomic_load(p.cast::<i16>(), Acquire) as u16
            } else {
                u16::from(atomic_load(p.cast::<i8>(), Acquire) as u8)
            }
        }
    }

    /// Stores `flags` into slot `idx` (modulo the size) with release order: everything
    /// written to the slot before is visible to whoever sees these flags.
    pub(crate) fn set_flags(&self, idx: u32, flags: u16) {
        let p = E::flags_ptr(self.slot(idx));
        // SAFETY: as in `flags`.
        unsafe {
            if E::FLAGS_WIDTH == 2 {
                atomic_store(p.cast::<i16>(), flags as i16, Release);
            } else {
                atomic_store(p.cast::<i8>(), flags as u8 as i8, Release);
            }
        }
    }

    /// [`Ring::set_flags`], then a full barrier (`smp_mb()`): the store is ordered before
    /// every later load of the caller. A user ring needs this where the user library
    /// stores and then loads in the opposite order and each side acts only if it sees the
    /// other's store (the store-buffering pattern): the SQ (the kernel releases slot `i`
    /// and looks at slot `i + 1`; libsiw fills slot `i + 1` and rings the doorbell only
    /// if slot `i` is free) and the CQ (the kernel publishes a CQE and reads the arm;
    /// the consumer arms and polls). Release and acquire alone let both sides miss.
    pub(crate) fn set_flags_fenced(&self, idx: u32, flags: u16) {
        self.set_flags(idx, flags);
        smp_mb(Full);
    }

    /// Copies slot `idx` (modulo the size) once into a kernel value. For a user ring the
    /// value is arbitrary and must be validated before use.
    pub(crate) fn read(&self, idx: u32) -> E {
        // SAFETY: the slot is inside the ring and aligned; every bit pattern is a valid `E`
        // (`RingElem`); a volatile copy is not torn into repeated reads of the same field.
        unsafe { core::ptr::read_volatile(self.slot(idx)) }
    }

    /// Writes `elem` into slot `idx` (modulo the size). The caller owns the slot (its
    /// flags are zero) and publishes it afterwards with [`Ring::set_flags`]; `elem`'s own
    /// flags field should be zero so the slot stays unowned until then.
    pub(crate) fn write(&self, idx: u32, elem: &E) {
        // SAFETY: the slot is inside the ring and aligned; no Rust reference to it exists.
        unsafe { core::ptr::write_volatile(self.slot(idx), *elem) };
    }

    fn ctrl_ptr(&self) -> Option<*mut u32> {
        // The control word follows the last element (`ring_len`).
        self.ctrl.then(|| {
            self.base
                .as_ptr()
                .wrapping_add(self.n as usize)
                .cast::<u32>()
        })
    }

    /// Loads the control word (`siw_cq_ctrl::flags`) with acquire order; zero without one.
    pub(crate) fn ctrl_load(&self) -> u32 {
        match self.ctrl_ptr() {
            // SAFETY: inside the ring and 4-aligned (elements are 8-aligned); kernel
            // accesses are atomic.
            Some(p) => unsafe { atomic_load(p, Acquire) },
            None => 0,
        }
    }

    /// Stores the control word with release order (no-op without one).
    pub(crate) fn ctrl_store(&self, v: u32) {
        if let Some(p) = self.ctrl_ptr() {
            // SAFETY: as in `ctrl_load`.
            unsafe { atomic_store(p, v, Release) };
        }
    }
}

/// Reads the remote address of an SQE (union with `base_mr`; both are 64-bit integers).
pub(crate) fn sqe_raddr(sqe: &bindings::siw_sqe) -> u64 {
    // SAFETY: both union members are `__aligned_u64`: every value is valid for either.
    unsafe { sqe.__bindgen_anon_1.raddr }
}

/// Reads the SGE array of an SQE (union with the 64-bit `access`; plain integers).
pub(crate) fn sqe_sges(
    sqe: &bindings::siw_sqe,
) -> [bindings::siw_sge; bindings::SIW_MAX_SGE as usize] {
    // SAFETY: the union's members are plain integers; every bit pattern is a valid SGE
    // array (the octets beyond `access` were zero-initialised or written as SGEs).
    unsafe { sqe.__bindgen_anon_2.sge }
}

/// Reads the QP pointer of a kernel CQE (union with the 64-bit `qp_id`). Only meaningful
/// for CQEs rsiw wrote into a kernel CQ: the core dereferences it (`ib_wc.qp`), so it must
/// never be read from a ring user space can write.
pub(crate) fn cqe_qp(cqe: &bindings::siw_cqe) -> *mut bindings::ib_qp {
    // SAFETY: every bit pattern is a valid raw pointer.
    unsafe { cqe.__bindgen_anon_2.base_qp }
}

/// Reads the invalidated STag of a CQE (union with the 64-bit `imm_data`).
pub(crate) fn cqe_inval_stag(cqe: &bindings::siw_cqe) -> u32 {
    // SAFETY: plain integers.
    unsafe { cqe.__bindgen_anon_1.inval_stag }
}
