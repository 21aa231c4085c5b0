// SPDX-License-Identifier: GPL-2.0

//! Kernel-mapped ranges of registered memory, as the transport moves payload through them:
//! gathered into socket sends ([`IoList`]), filled from socket buffers
//! ([`crate::sys::net::socket::SkbChunk::copy_to_kva`]), copied out when small
//! ([`extend_from_kva`]) and folded into CRC32c ([`crc32c_kva`]).
//!
//! Payload memory is never seen as a Rust slice: user space may change it at any time
//! (RFC 5040 leaves the content of a buffer under transfer undefined), so it is only ever
//! handed to C copy routines by address.

use crate::sys::bindings as b;
use kernel::prelude::*;

/// A kernel virtual address range of registered memory.
///
/// # Invariants
///
/// `[kva, kva + len)` is mapped kernel memory, valid for reads and writes for as long as
/// the memory region it was resolved from ([`crate::stag::Mem`]) is alive; its holder
/// keeps a reference to that region while it uses the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kva {
    kva: u64,
    len: u64,
}

impl Kva {
    /// The range of `len` octets at `kva`.
    ///
    /// # Safety
    ///
    /// `[kva, kva + len)` is mapped kernel memory that stays valid while the memory region
    /// it belongs to is alive (pinned user pages in the linear map, a kernel consumer's DMA
    /// MR or fast-registered pages under rsiw's virtual DMA).
    pub(in crate::sys) unsafe fn new(kva: u64, len: u64) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { kva, len }
    }

    /// The kernel virtual address of the first octet.
    pub(crate) fn addr(&self) -> u64 {
        self.kva
    }

    /// The length (octets).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The first `n` octets (at most the whole range).
    pub(crate) fn prefix(&self, n: u64) -> Self {
        // INVARIANT: a sub-range of a valid range.
        Self {
            kva: self.kva,
            len: n.min(self.len),
        }
    }

    /// The range of `self` followed by `next`, if `next` starts where `self` ends; both
    /// must stay valid while the joined range is used, as each did.
    pub(crate) fn join(&self, next: &Kva) -> Option<Self> {
        if self.kva.checked_add(self.len)? != next.kva {
            return None;
        }
        // INVARIANT: every octet lies in one of two valid ranges, whose holders the caller
        // keeps.
        Some(Self {
            kva: self.kva,
            len: self.len.checked_add(next.len)?,
        })
    }

    /// The range without its first `n` octets (empty if `n` is at least the length).
    pub(crate) fn skip(&self, n: u64) -> Self {
        let n = n.min(self.len);
        // INVARIANT: a sub-range of a valid range.
        Self {
            kva: self.kva + n,
            len: self.len - n,
        }
    }
}

/// The mark of a memory region a kernel consumer created (`get_dma_mr` or `alloc_mr` on a
/// kernel PD; user space reaches neither verb). Such a region's addresses are the
/// consumer's DMA addresses, and rsiw uses virtual DMA (`ib_uses_virt_dma()`: the core's
/// `ib_dma_map_*` return kernel virtual addresses), so they are kernel virtual addresses
/// of memory the consumer keeps mapped while it has work requests or STags on it out: the
/// contract every kernel consumer of the RDMA core keeps. A DMA MR with remote rights
/// (`IB_PD_UNSAFE_GLOBAL_RKEY`) extends that trust to its peer, as the consumer chose.
///
/// # Invariants
///
/// Created only by [`crate::sys::verbs`]'s `get_dma_mr` and `alloc_mr` entry points, for a PD
/// without a user object.
pub(crate) struct KernelConsumer(());

impl KernelConsumer {
    /// The mark of the region `get_dma_mr` or `alloc_mr` is creating.
    ///
    /// # Safety
    ///
    /// The region is created on a PD without a user object (`uobject` null), and the mark
    /// goes to that region alone.
    pub(in crate::sys) unsafe fn new() -> Self {
        // INVARIANT: guaranteed by the caller.
        Self(())
    }

    /// The range of `len` octets at kernel virtual address `kva` of the consumer's region.
    pub(crate) fn range(&self, kva: u64, len: u64) -> Kva {
        // SAFETY: an address of a kernel consumer's region is mapped kernel memory while
        // the region is used (type invariant).
        unsafe { Kva::new(kva, len) }
    }
}

/// Folds the octets of `range` into the running CRC32c value `crc` (kernel `crc32c()`).
pub(crate) fn crc32c_kva(crc: u32, range: &Kva) -> u32 {
    let Ok(len) = usize::try_from(range.len) else {
        return crc;
    };
    // SAFETY: the range is mapped kernel memory (type invariant); crc32c only reads it.
    unsafe { b::crc32c(crc, range.kva as usize as *const c_void, len) }
}

/// Appends `src` to `v` in one block copy (`KVec::extend_from_slice` copies element by
/// element).
///
/// # Errors
///
/// `ENOMEM`; `v` is unchanged then.
pub(crate) fn extend_bytes(v: &mut KVec<u8>, src: &[u8]) -> Result {
    v.reserve(src.len(), GFP_KERNEL)?;
    let dst = v.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    // SAFETY: `reserve` made room for `src.len()` octets at `dst`; `src` is not `v`'s buffer.
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    // SAFETY: the `src.len()` octets after the length were initialised just above.
    unsafe { v.inc_len(src.len()) };
    Ok(())
}

/// Appends the octets of `range` to `v` (kernel `memcpy()`) and returns them as `v` now
/// holds them. What user space writes to the memory meanwhile may or may not be seen, as
/// RFC 5040 allows for a buffer under transfer.
///
/// # Errors
///
/// `ENOMEM` (or `EINVAL` for a range longer than the address space); `v` is unchanged then.
pub(crate) fn extend_from_kva<'a>(v: &'a mut KVec<u8>, range: &Kva) -> Result<&'a [u8]> {
    let n = usize::try_from(range.len).map_err(|_| EINVAL)?;
    let off = v.len();
    v.reserve(n, GFP_KERNEL)?;
    let dst = v.spare_capacity_mut().as_mut_ptr().cast();
    let src = range.kva as usize as *const c_void;
    // SAFETY: `src` is `n` octets of mapped memory (type invariant); `dst` has room for `n`
    // in rsiw's own buffer, never registered memory, so the two do not overlap.
    unsafe { b::rsiw_copy_kva(dst, src, n) };
    // SAFETY: the `n` octets after the length were initialised just above.
    unsafe { v.inc_len(n) };
    Ok(&v[off..])
}

use kernel::ffi::c_void;

/// The storage of an [`IoList`], kept between sends so that building one allocates
/// nothing once the storage has grown to the usual number of entries.
///
/// # Invariants
///
/// `0` holds no entries (its capacity only): no pointer is kept between uses.
pub(crate) struct IoVecBuf(KVec<b::kvec>);

// SAFETY: an `IoVecBuf` holds no entries (invariant), so no pointer moves with it.
unsafe impl Send for IoVecBuf {}

impl IoVecBuf {
    /// Empty storage (allocates on first use).
    pub(crate) const fn new() -> Self {
        // INVARIANT: no entries.
        Self(KVec::new())
    }
}

/// A gather list for one socket send: octets owned by the caller (headers, CRC) and
/// ranges of registered memory, in stream order.
///
/// # Invariants
///
/// Every entry of `vec` describes memory that is valid for reads while the list is used:
/// either a slice borrowed for `'a` or a [`Kva`] whose region the caller keeps alive.
pub(crate) struct IoList<'a> {
    vec: KVec<b::kvec>,
    len: usize,
    _p: core::marker::PhantomData<&'a [u8]>,
}

impl<'a> IoList<'a> {
    /// An empty list with room for at least `n` entries, in `buf`'s storage.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(buf: IoVecBuf, n: usize) -> Result<Self> {
        let mut vec = buf.0;
        vec.reserve(n, GFP_KERNEL)?;
        // INVARIANT: no entries yet.
        Ok(Self {
            vec,
            len: 0,
            _p: core::marker::PhantomData,
        })
    }

    /// Gives the storage back for the next list.
    pub(crate) fn into_buf(mut self) -> IoVecBuf {
        self.vec.clear();
        // INVARIANT: cleared.
        IoVecBuf(self.vec)
    }

    /// Appends `data`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn push_bytes(&mut self, data: &'a [u8]) -> Result {
        if data.is_empty() {
            return Ok(());
        }
        self.vec.push(
            b::kvec {
                iov_base: data.as_ptr().cast_mut().cast(),
                iov_len: data.len(),
            },
            GFP_KERNEL,
        )?;
        self.len += data.len();
        Ok(())
    }

    /// Appends a range of registered memory.
    ///
    /// # Errors
    ///
    /// `ENOMEM`; `EINVAL` for a range longer than the address space.
    pub(crate) fn push_kva(&mut self, range: Kva) -> Result {
        let n = usize::try_from(range.len).map_err(|_| EINVAL)?;
        if n == 0 {
            return Ok(());
        }
        self.vec.push(
            b::kvec {
                iov_base: range.kva as usize as *mut c_void,
                iov_len: n,
            },
            GFP_KERNEL,
        )?;
        self.len += n;
        Ok(())
    }

    /// Sends the list from octet `from` on, without waiting; returns how many octets TCP
    /// took (fewer than offered when the send buffer filled). `more`: more data follows.
    ///
    /// # Errors
    ///
    /// `EAGAIN` when nothing could be queued, `EPIPE`/`ECONNRESET` after close.
    pub(crate) fn send(
        &mut self,
        sock: &mut crate::sys::net::socket::Socket,
        from: usize,
        more: bool,
    ) -> Result<usize> {
        let mut skip = from;
        let mut first = 0;
        while first < self.vec.len() && skip >= self.vec[first].iov_len {
            skip -= self.vec[first].iov_len;
            first += 1;
        }
        if first == self.vec.len() {
            return Ok(0);
        }
        // Start inside the first entry (skip < its length), then restore it.
        let saved = self.vec[first];
        self.vec[first].iov_base = saved.iov_base.wrapping_byte_add(skip);
        self.vec[first].iov_len -= skip;
        let r = sock.send_kvecs(&mut self.vec[first..], self.len - from, more);
        self.vec[first] = saved;
        r
    }
}
