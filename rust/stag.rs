// SPDX-License-Identifier: GPL-2.0

//! Registered memory regions and the STag table that names them.
//!
//! An STag (RFC 5040 §2.2) is a 24-bit index into the device's STag table, shifted left by
//! eight, ORed with an 8-bit key the consumer chooses (user space: `siw_ureq_reg_mr`'s
//! `stag_key`; kernel consumers: zero, later changed through fast registration). The lkey
//! and the rkey of an MR are both the STag. The table owns a reference to each region's
//! [`Mem`]; lookups ([`StagTable::lookup`]) take another one, so a region a transfer is
//! using survives its deregistration until the transfer lets go.
//!
//! The data paths resolve a tagged offset to kernel memory with [`Mem::resolve`]; the TX
//! path executes REG_MR and LOCAL_INV work requests, and the RX path Send with
//! Invalidate, with [`StagTable::fast_register`] and [`StagTable::invalidate`].
//!
//! # Accesses against invalidation
//!
//! A kernel consumer unmaps and frees a fast-registration MR's pages as soon as its
//! LOCAL_INV completed, a received Send with Invalidate of it completed, or
//! `ib_dereg_mr` returned; a user process reuses a buffer once `ibv_dereg_mr` returned.
//! The reference a transfer holds keeps the [`Mem`], not the consumer's claim to those
//! pages. So the accesses a peer drives are made under an [`InUse`] guard, announced
//! before the STag's checks: the RX path places tagged payload under one
//! ([`StagTable::lookup_to_place`]), the TX path reads each FPDU of a Read Response
//! under one ([`InUse::take`]). [`StagTable::invalidate`] and [`StagTable::deregister`]
//! clear `valid`, then wait until no guard of the region is left: an access that passed
//! its checks has ended when they return, and one that starts later fails them (the
//! guard count and the `valid` flag are sequentially consistent, so one side always sees
//! the other). An access is one segment's payload, at most 64768 octets, copied from one
//! socket buffer or into one FPDU's own buffer, so the wait is short and may spin in any
//! context: the side holding a guard has softirqs off (a softirq that invalidates cannot
//! interrupt it on its CPU), takes no lock an invalidation holds, and waits for nothing.

use crate::abi::access;
use crate::engine::rx_shell::{Access, InvalidateCheck, TaggedCheck};
use crate::sys::idtable::ArcTable;
use crate::sys::mem::kmem::{KernelConsumer, Kva};
use crate::sys::mem::umem::UMem;
use crate::sys::obj::PdId;
use core::ops::Deref;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_spinlock_irq, Arc, SpinLockIrq};

/// The largest STag index (24 bits); index 0 is never used.
const STAG_INDEX_MAX: u32 = 0x00ff_ffff;

/// The access rights that exist on iWARP (`IWARP_ACCESS_MASK` of the C siw).
const ACCESS_MASK: i32 = (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ) as i32;

/// A registered memory region, shared by its MR, the STag table and in-flight transfers.
#[pin_data]
pub(crate) struct Mem {
    stag: AtomicU32,
    pd: PdId,
    access: AtomicU32,
    /// The tagged offset of the first octet (for a fast-registration MR: the consumer's
    /// `iova` when it posted REG_MR).
    va: AtomicU64,
    len: AtomicU64,
    valid: AtomicBool,
    /// A fast-registration MR's mapping (`map_mr_sg`): its length in octets, and the
    /// offset of its first octet in the first page of the page list.
    mapped_len: AtomicU64,
    first_off: AtomicU64,
    /// A DMA MR: the tagged offset is the kernel virtual address.
    dma: bool,
    /// The mark of a kernel consumer's region (a DMA or fast-registration MR): its
    /// addresses are kernel virtual addresses.
    kernel: Option<KernelConsumer>,
    /// The pinned user memory of a user MR.
    umem: Option<UMem>,
    /// The page list of a fast-registration MR (capacity `max_pages`).
    #[pin]
    pages: SpinLockIrq<KVec<u64>>,
    max_pages: u32,
    page_size: AtomicU32,
    /// Accesses to the region in progress (live [`InUse`] guards).
    in_use: AtomicU32,
}

/// A reference to a region that keeps it alive while a transfer uses it.
pub(crate) type MrRef = Arc<Mem>;

/// An access the peer drives to a region in progress (a tagged placement, or the read of
/// one Read Response FPDU's payload): while it lives, an invalidation or deregistration
/// of the region does not return (see the module documentation). Dereferences to the
/// region.
///
/// # Invariants
///
/// The guard counts once in its region's `in_use`, from its creation to its drop.
pub(crate) struct InUse(MrRef);

impl InUse {
    /// Announces an access to `mem`, before its checks.
    fn announce(mem: MrRef) -> Self {
        // Sequentially consistent with the `valid` flag: pairs with the store of `false`
        // in `StagTable::revoke` or `StagTable::deregister` and the load of `in_use` in
        // `Mem::wait_unused` (store buffering: either the checks see the region invalid,
        // or the invalidation sees this guard).
        mem.in_use.fetch_add(1, Ordering::SeqCst);
        // INVARIANT: counted above, uncounted in `drop`.
        Self(mem)
    }

    /// Checks `stag` again on region `mem` (which a lookup of it returned) for an access
    /// of `len` octets at tagged offset `to` needing the `IB_ACCESS_*` rights `access`
    /// from a QP of protection domain `pd`, and returns the access's guard. Any context.
    ///
    /// # Errors
    ///
    /// As [`StagTable::lookup`]: the region was invalidated, deregistered or registered
    /// again with another key, rights or bounds since.
    pub(crate) fn take(
        mem: &MrRef,
        stag: u32,
        pd: PdId,
        access: u32,
        to: u64,
        len: u64,
    ) -> Result<Self, TaggedCheck> {
        let guard = Self::announce(mem.clone());
        StagTable::check(&guard, stag, pd, access, to, len)?;
        Ok(guard)
    }
}

impl InUse {
    /// The region the access is to (a counted reference).
    pub(crate) fn region(&self) -> &MrRef {
        &self.0
    }
}

impl Deref for InUse {
    type Target = Mem;

    fn deref(&self) -> &Mem {
        &self.0
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        // Release: the access's reads and writes happen before an invalidation that sees
        // the count drop returns.
        self.0.in_use.fetch_sub(1, Ordering::Release);
    }
}

/// A region whose STag was just made invalid: [`Revoked::wait`] returns once no
/// access to it is in progress.
#[must_use = "an invalidation is complete only after `wait`"]
pub(crate) struct Revoked(MrRef);

impl Revoked {
    /// Whether accesses to the region are still in progress.
    #[cfg_attr(
        not(CONFIG_KUNIT = "y"),
        expect(dead_code, reason = "only the KUnit suite looks before waiting")
    )]
    pub(crate) fn in_use(&self) -> bool {
        self.0.in_use()
    }

    /// Waits until no access to the region is in progress; after it, none starts.
    pub(crate) fn wait(self) {
        self.0.wait_unused();
    }
}

/// The `IB_ACCESS_*` rights an access of the RX engine needs (atomics are not granted on
/// iWARP MRs: [`Access::RemoteAtomic`] always fails the rights check).
pub(crate) fn access_bits(a: Access) -> u32 {
    match a {
        Access::RemoteWrite => access::REMOTE_WRITE,
        Access::LocalWrite => access::LOCAL_WRITE,
        Access::RemoteRead => access::REMOTE_READ,
        Access::RemoteAtomic => access::REMOTE_ATOMIC,
    }
}

impl Mem {
    /// The STag (index and current key).
    pub(crate) fn stag(&self) -> u32 {
        self.stag.load(Ordering::Acquire)
    }

    /// The protection domain.
    #[cfg_attr(
        not(CONFIG_KUNIT = "y"),
        expect(dead_code, reason = "only the KUnit suite asks an MR for its PD")
    )]
    pub(crate) fn pd(&self) -> PdId {
        self.pd
    }

    /// The granted `IB_ACCESS_*` rights (local write, remote write, remote read).
    pub(crate) fn access(&self) -> u32 {
        self.access.load(Ordering::Acquire)
    }

    /// The tagged offset of the first octet and the length: the region is
    /// `[va, va + len)` (a DMA MR: all of kernel memory).
    pub(crate) fn bounds(&self) -> (u64, u64) {
        (
            self.va.load(Ordering::Acquire),
            self.len.load(Ordering::Acquire),
        )
    }

    /// Whether the STag is valid (registered, fast-registered and not invalidated).
    pub(crate) fn is_valid(&self) -> bool {
        // Sequentially consistent for `InUse` (the module documentation); as cheap as
        // an acquire load where rsiw runs.
        self.valid.load(Ordering::SeqCst)
    }

    /// Whether accesses to the region are in progress.
    fn in_use(&self) -> bool {
        self.in_use.load(Ordering::SeqCst) != 0
    }

    /// Waits (spinning: accesses are short and wait for nothing) until no access to the
    /// region is in progress.
    fn wait_unused(&self) {
        while self.in_use() {
            core::hint::spin_loop();
        }
        // Pairs with the guards' release: their writes are done.
        core::sync::atomic::fence(Ordering::Acquire);
    }

    /// Whether this is a fast-registration MR's region.
    pub(crate) fn is_fast(&self) -> bool {
        self.max_pages > 0
    }

    /// `map_mr_sg`, start: forgets the page list of a fast-registration region.
    pub(crate) fn clear_pages(&self) {
        self.pages.lock().clear();
    }

    /// `map_mr_sg`, per page: appends page address `addr`.
    ///
    /// # Errors
    ///
    /// `ENOMEM` beyond the region's `max_num_sg` pages.
    pub(crate) fn push_page(&self, addr: u64) -> Result {
        let mut pages = self.pages.lock();
        if pages.len() >= self.max_pages as usize {
            return Err(ENOMEM);
        }
        // Capacity was reserved at registration: this does not allocate.
        pages.push(addr, GFP_ATOMIC).map_err(|_| ENOMEM)
    }

    /// `map_mr_sg`, end: the page list covers `len` octets at DMA address `iova` in pages
    /// of `page_size` octets; the region a REG_MR work request will make valid.
    pub(crate) fn set_mapping(&self, iova: u64, len: u64, page_size: u32) {
        self.va.store(iova, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.mapped_len.store(len, Ordering::Relaxed);
        let off = if page_size.is_power_of_two() {
            iova & (u64::from(page_size) - 1)
        } else {
            0
        };
        self.first_off.store(off, Ordering::Relaxed);
        self.page_size.store(page_size, Ordering::Relaxed);
    }

    /// Where tagged offset `to` (inside the bounds, see [`StagTable::lookup`]) lies in
    /// kernel memory: a DMA MR's offsets are kernel virtual addresses, a user MR's pages
    /// are pinned and in the kernel's linear map, a fast-registration MR's pages are the
    /// consumer's kernel addresses (rsiw uses virtual DMA, so DMA addresses are kernel
    /// virtual addresses). Returns the range of octets contiguous in kernel memory from
    /// there to the end of the region or of its page, at least 1 octet; `None` outside the
    /// bounds. A transfer walks a range by resolving `to`, copying at most the range's
    /// length, and resolving the next offset, holding `self` (an [`MrRef`]) meanwhile.
    pub(crate) fn resolve(&self, to: u64) -> Option<Kva> {
        let (va, len) = self.bounds();
        let off = to.checked_sub(va).filter(|&o| o < len)?;
        if let Some(umem) = &self.umem {
            return umem.range_at(off.checked_add(umem.page_offset())?, len - off);
        }
        let kc = self.kernel.as_ref()?;
        if self.dma {
            return Some(kc.range(to, len - off));
        }
        let ps = u64::from(self.page_size.load(Ordering::Acquire));
        if !ps.is_power_of_two() {
            return None;
        }
        // The first octet lies `first_off` into the first page of the list (the mapping's
        // DMA address; `va` is whatever tagged offset REG_MR gave it).
        let at = off.checked_add(self.first_off.load(Ordering::Acquire))?;
        // `ps` is a power of two: shift and mask, no division.
        let page = *self
            .pages
            .lock()
            .get(usize::try_from(at >> ps.trailing_zeros()).ok()?)?;
        let within = at & (ps - 1);
        Some(kc.range(page.checked_add(within)?, (ps - within).min(len - off)))
    }
}

/// The STag table of a device: its regions by STag index (an STag is a 24-bit index and an
/// 8-bit key, RFC 5040 §2.1). Lookups take the table's lock, which disables interrupts, so
/// any context may resolve or invalidate an STag.
#[pin_data]
pub(crate) struct StagTable {
    #[pin]
    regions: ArcTable<Mem>,
}

impl StagTable {
    /// An empty table whose indices start at a random point, like the C siw's.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            regions <- ArcTable::new(crate::sys::random_u32() & STAG_INDEX_MAX),
        })
    }

    /// Creates a region of `kind` in `pd` with rights `access` covering `[va, va + len)`
    /// and enters it under a fresh index with `key`. Returns its STag and a reference.
    ///
    /// # Errors
    ///
    /// `ENOMEM`; `ENOSPC` if the table is full.
    pub(crate) fn register(
        &self,
        pd: PdId,
        key: u8,
        access: i32,
        (va, len): (u64, u64),
        kind: Kind,
    ) -> Result<(u32, MrRef)> {
        let (dma, valid, umem, kernel, max_pages) = match kind {
            Kind::Dma(kc) => (true, true, None, Some(kc), 0),
            Kind::User(u) => (false, true, Some(u), None, 0),
            Kind::Fast(n, kc) => (false, false, None, Some(kc), n),
        };
        let mut pages = KVec::new();
        pages.reserve(max_pages as usize, GFP_KERNEL)?;
        let idx = self.regions.reserve(1, STAG_INDEX_MAX)?;
        let stag = (idx << 8) | u32::from(key);
        let mem = Arc::pin_init(
            pin_init!(Mem {
                stag: AtomicU32::new(stag),
                pd,
                access: AtomicU32::new((access & ACCESS_MASK) as u32),
                va: AtomicU64::new(va),
                len: AtomicU64::new(len),
                mapped_len: AtomicU64::new(0),
                first_off: AtomicU64::new(0),
                valid: AtomicBool::new(valid),
                dma,
                kernel,
                umem,
                pages <- new_spinlock_irq!(pages, "rsiw_mr_pages"),
                max_pages,
                page_size: AtomicU32::new(0),
                in_use: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        );
        let mem = match mem {
            Ok(m) => m,
            Err(e) => {
                self.regions.remove(idx);
                return Err(e);
            }
        };
        if let Err(e) = self.regions.publish(idx, mem.clone()) {
            self.regions.remove(idx);
            return Err(e);
        }
        Ok((stag, mem))
    }

    /// Invalidates `mem` and removes it from the table: the table's reference goes,
    /// transfers holding one finish with theirs. Returns once no access to it is in
    /// progress (the module documentation).
    pub(crate) fn deregister(&self, mem: &Mem) {
        mem.valid.store(false, Ordering::SeqCst);
        self.regions.remove(mem.stag.load(Ordering::Relaxed) >> 8);
        mem.wait_unused();
    }

    /// Whether the peer may invalidate `stag` with a Send with Invalidate on a stream of
    /// PD `pd` (RFC 5040 §7.2): the checks of [`StagTable::invalidate`], without
    /// invalidating. Only a fast-registration MR can be invalidated: a user MR could never
    /// be made valid again, so a peer could otherwise disable any buffer of the PD that it
    /// can guess the STag of, advertised or not (rsiw's STags are sequential).
    ///
    /// # Errors
    ///
    /// [`InvalidateCheck`] naming the failed check.
    pub(crate) fn check_invalidate(&self, stag: u32, pd: PdId) -> Result<(), InvalidateCheck> {
        let mem = self
            .regions
            .get(stag >> 8)
            .ok_or(InvalidateCheck::InvalidStag)?;
        if mem.stag() != stag || !mem.is_valid() {
            return Err(InvalidateCheck::InvalidStag);
        }
        if mem.pd != pd {
            return Err(InvalidateCheck::NotAssociated);
        }
        if !mem.is_fast() {
            return Err(InvalidateCheck::CannotInvalidate);
        }
        Ok(())
    }

    /// Resolves `stag` for an access of `len` octets at tagged offset `to` needing the
    /// `IB_ACCESS_*` rights `access` (0 for a local read; [`access_bits`] for the RX
    /// engine's accesses) from a QP of protection domain `pd`. Any context (the table
    /// lock disables interrupts). The arithmetic is checked: a range that wraps is out of
    /// bounds.
    ///
    /// Returns a reference that keeps the region alive while the transfer uses it; resolve
    /// offsets to memory with [`Mem::resolve`].
    ///
    /// # Errors
    ///
    /// The RX engine's [`TaggedCheck`], first failing check first: `InvalidStag` (no such
    /// index, another key, or invalidated), `NotAssociated` (another PD), `AccessRights`,
    /// `BaseBounds`.
    pub(crate) fn lookup(
        &self,
        stag: u32,
        pd: PdId,
        access: u32,
        to: u64,
        len: u64,
    ) -> Result<MrRef, TaggedCheck> {
        let mem = self.region(stag)?;
        Self::check(&mem, stag, pd, access, to, len)?;
        Ok(mem)
    }

    /// [`StagTable::lookup`] for placing received payload: the region under an [`InUse`]
    /// guard, which an invalidation or deregistration waits for. Hold it only while
    /// copying one segment's payload.
    ///
    /// # Errors
    ///
    /// As [`StagTable::lookup`].
    pub(crate) fn lookup_to_place(
        &self,
        stag: u32,
        pd: PdId,
        access: u32,
        to: u64,
        len: u64,
    ) -> Result<InUse, TaggedCheck> {
        let guard = InUse::announce(self.region(stag)?);
        Self::check(&guard, stag, pd, access, to, len)?;
        Ok(guard)
    }

    /// The region of `stag`'s index, whatever its key and state.
    fn region(&self, stag: u32) -> Result<MrRef, TaggedCheck> {
        self.regions.get(stag >> 8).ok_or(TaggedCheck::InvalidStag)
    }

    /// The checks of [`StagTable::lookup`] on region `mem`.
    fn check(
        mem: &Mem,
        stag: u32,
        pd: PdId,
        access: u32,
        to: u64,
        len: u64,
    ) -> Result<(), TaggedCheck> {
        if !mem.is_valid() || mem.stag() != stag {
            return Err(TaggedCheck::InvalidStag);
        }
        if mem.pd != pd {
            return Err(TaggedCheck::NotAssociated);
        }
        if mem.access() & access != access {
            return Err(TaggedCheck::AccessRights);
        }
        let (va, mlen) = mem.bounds();
        let end = to.checked_add(len).ok_or(TaggedCheck::BaseBounds)?;
        let mend = va.checked_add(mlen).unwrap_or(u64::MAX);
        if to < va || end > mend {
            return Err(TaggedCheck::BaseBounds);
        }
        Ok(())
    }

    /// Invalidates `stag` for a LOCAL_INV work request or a received Send with Invalidate
    /// on a QP of protection domain `pd`. Any context. Returns once no access to the
    /// region is in progress (the module documentation).
    ///
    /// # Errors
    ///
    /// [`InvalidateCheck`]: `InvalidStag` (no such STag or already invalid),
    /// `NotAssociated` (another PD), `CannotInvalidate` (not a fast-registration MR: a
    /// DMA or user MR).
    pub(crate) fn invalidate(&self, stag: u32, pd: PdId) -> Result<(), InvalidateCheck> {
        self.revoke(stag, pd)?.wait();
        Ok(())
    }

    /// The first half of [`StagTable::invalidate`]: makes `stag` invalid, so that no
    /// access to it starts; the caller waits for those in progress with
    /// [`Revoked::wait`].
    ///
    /// # Errors
    ///
    /// As [`StagTable::invalidate`].
    pub(crate) fn revoke(&self, stag: u32, pd: PdId) -> Result<Revoked, InvalidateCheck> {
        let mem = self
            .regions
            .get(stag >> 8)
            .ok_or(InvalidateCheck::InvalidStag)?;
        if mem.stag() != stag {
            return Err(InvalidateCheck::InvalidStag);
        }
        if mem.pd != pd {
            return Err(InvalidateCheck::NotAssociated);
        }
        if !mem.is_fast() {
            return Err(InvalidateCheck::CannotInvalidate);
        }
        // Sequentially consistent: see `InUse::announce`.
        if !mem.valid.swap(false, Ordering::SeqCst) {
            return Err(InvalidateCheck::InvalidStag);
        }
        Ok(Revoked(mem))
    }

    /// Executes a REG_MR work request on a QP of protection domain `pd`: the
    /// fast-registration MR whose index `stag` names (its page list set by `map_mr_sg`)
    /// takes `stag`'s key and the rights `access` (`IB_ACCESS_*`, masked to what iWARP
    /// has) and becomes valid as `len` octets at tagged offset `iova`: the MR's `iova` and
    /// `length` when the consumer posted the request, which it may have changed after
    /// `map_mr_sg` (NFS over RDMA puts the RPC's XID in the upper 32 bits of `iova`). The
    /// pages stay those of the mapping. Any context.
    ///
    /// # Errors
    ///
    /// `EINVAL` for no such MR, not a fast-registration MR, no page list mapped, an MR
    /// that is still valid, or `len` beyond the mapping or `iova + len` beyond 2^64;
    /// `EACCES` for another PD.
    pub(crate) fn fast_register(
        &self,
        stag: u32,
        pd: PdId,
        access: i32,
        iova: u64,
        len: u64,
    ) -> Result {
        let mem = self.regions.get(stag >> 8).ok_or(EINVAL)?;
        if mem.max_pages == 0 || mem.pages.lock().is_empty() {
            return Err(EINVAL);
        }
        if mem.pd != pd {
            return Err(EACCES);
        }
        if mem.is_valid() {
            return Err(EINVAL);
        }
        if len > mem.mapped_len.load(Ordering::Acquire) || iova.checked_add(len).is_none() {
            return Err(EINVAL);
        }
        mem.va.store(iova, Ordering::Release);
        mem.len.store(len, Ordering::Release);
        mem.access
            .store((access & ACCESS_MASK) as u32, Ordering::Release);
        mem.stag.store(stag, Ordering::Release);
        mem.valid.store(true, Ordering::Release);
        Ok(())
    }
}

/// What a region is.
pub(crate) enum Kind {
    /// All kernel memory (`get_dma_mr`).
    Dma(KernelConsumer),
    /// Pinned user memory (`reg_user_mr`).
    User(UMem),
    /// A fast-registration MR for up to this many pages (`alloc_mr`).
    Fast(u32, KernelConsumer),
}
