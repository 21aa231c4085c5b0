// SPDX-License-Identifier: GPL-2.0

//! Memory regions and STags.
//!
//! An STag (RFC 5040 §2.2) is a 24-bit index into the device's STag table, shifted left by
//! eight, ORed with an 8-bit key the consumer chooses (user space: `siw_ureq_reg_mr`'s
//! `stag_key`; kernel consumers: zero, later changed through fast registration). The lkey
//! and the rkey of an MR are both the STag. The table owns a reference to each region's
//! [`Mem`]; lookups ([`Device::lookup_stag`]) take another one, so a region a transfer is
//! using survives its deregistration until the transfer lets go.
//!
//! Kinds: DMA MRs (`get_dma_mr`) cover all kernel memory; user MRs pin user memory (the
//! umem is kept for the placement path); fast-registration MRs (`alloc_mr`, kernel only)
//! get a page list through `map_mr_sg` and become valid with a REG_MR work request, which
//! needs the transport slice (until then `post_send` refuses REG_MR and LOCAL_INV with
//! `EOPNOTSUPP`, and rsiw does not advertise `IB_DEVICE_MEM_MGT_EXTENSIONS`).

use crate::device::{take_slot, Device, SlotGuard};
use crate::sys::bindings as b;
use crate::sys::ibdev::IbDevice;
use crate::sys::udata::UserResponse;
use crate::sys::obj::{IbMr, PdId};
use crate::sys::umem::UMem;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_spinlock_irq, Arc, SpinLockIrq};

/// The largest STag index (24 bits); index 0 is never used.
const STAG_INDEX_MAX: u32 = 0x00ff_ffff;
/// The most pages a fast-registration MR can map.
pub(crate) const MAX_FRMR_PAGES: u32 = 256;

/// The access rights that exist on iWARP (`IWARP_ACCESS_MASK` of the C siw).
const ACCESS_MASK: i32 = (b::ib_access_flags_IB_ACCESS_LOCAL_WRITE
    | b::ib_access_flags_IB_ACCESS_REMOTE_WRITE
    | b::ib_access_flags_IB_ACCESS_REMOTE_READ) as i32;

/// A registered memory region, shared by its MR, the STag table and in-flight transfers.
#[pin_data]
pub(crate) struct Mem {
    stag: AtomicU32,
    pd: PdId,
    access: AtomicU32,
    va: AtomicU64,
    len: AtomicU64,
    valid: AtomicBool,
    /// The pinned user memory of a user MR.
    #[allow(dead_code, reason = "the placement path (next slice) reads through it")]
    umem: Option<UMem>,
    /// The page list of a fast-registration MR (capacity `max_pages`).
    #[pin]
    pages: SpinLockIrq<KVec<u64>>,
    max_pages: u32,
    page_size: AtomicU32,
}

/// The driver data of an MR: its region.
pub(crate) struct Mr {
    mem: Arc<Mem>,
}

/// Why an STag does not grant an access ([`Device::lookup_stag`]).
#[derive(Debug, PartialEq, Eq)]
#[allow(dead_code, reason = "the RX/TX paths (next slice) map these to TERMINATE errors")]
pub(crate) enum AccessError {
    /// No region has this STag (index or key mismatch), or it is invalidated.
    InvalidStag,
    /// The region belongs to another protection domain.
    PdMismatch,
    /// The region does not grant the requested rights.
    Rights,
    /// `[to, to + len)` is not inside the region (or overflows).
    Bounds,
}

/// A reference to a region that keeps it alive while a transfer uses it.
pub(crate) type MrRef = Arc<Mem>;

impl Device {
    /// Resolves `stag` for an access of `len` octets at tagged offset `to` with rights
    /// `access` (`IB_ACCESS_*`) from protection domain `pd`. The arithmetic is checked: a
    /// range that wraps is out of bounds.
    #[allow(dead_code, reason = "the RX/TX placement paths (next slice) are its users")]
    pub(crate) fn lookup_stag(&self, stag: u32, pd: PdId, access: u32, to: u64, len: u64) -> Result<MrRef, AccessError> {
        let mem = self.stags.get(stag >> 8).ok_or(AccessError::InvalidStag)?;
        if !mem.valid.load(Ordering::Acquire) || mem.stag.load(Ordering::Relaxed) != stag {
            return Err(AccessError::InvalidStag);
        }
        if mem.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if mem.access.load(Ordering::Relaxed) & access != access {
            return Err(AccessError::Rights);
        }
        let (va, mlen) = (mem.va.load(Ordering::Relaxed), mem.len.load(Ordering::Relaxed));
        let end = to.checked_add(len).ok_or(AccessError::Bounds)?;
        let mend = va.checked_add(mlen).unwrap_or(u64::MAX);
        if to < va || end > mend {
            return Err(AccessError::Bounds);
        }
        Ok(mem)
    }
}

#[track_caller]
fn fail(what: core::fmt::Arguments<'_>, e: Error) -> Error {
    if crate::sys::ratelimit() {
        pr_err!("{what}\n");
    }
    e
}

impl Mr {
    /// Creates a region, enters it into the STag table under a fresh index with `key`,
    /// and returns its STag and the MR data.
    #[allow(clippy::too_many_arguments)]
    fn register(
        dev: &IbDevice<Device>,
        pd: PdId,
        key: u8,
        access: i32,
        va: u64,
        len: u64,
        valid: bool,
        umem: Option<UMem>,
        max_pages: u32,
    ) -> Result<(u32, Mr)> {
        let limit = crate::module_parameters::max_mr.value();
        if !take_slot(&dev.mrs, limit) {
            return Err(fail(format_args!("MR limit reached ({limit}); see module parameter max_mr"), ENOMEM));
        }
        let slot = SlotGuard::new(&dev.mrs);
        let mut pages = KVec::new();
        pages.reserve(max_pages as usize, GFP_KERNEL)?;
        let idx = dev.stags.reserve(1, STAG_INDEX_MAX)?;
        let stag = (idx << 8) | u32::from(key);
        let mem = Arc::pin_init(
            pin_init!(Mem {
                stag: AtomicU32::new(stag),
                pd,
                access: AtomicU32::new((access & ACCESS_MASK) as u32),
                va: AtomicU64::new(va),
                len: AtomicU64::new(len),
                valid: AtomicBool::new(valid),
                umem,
                pages <- new_spinlock_irq!(pages, "rsiw_mr_pages"),
                max_pages,
                page_size: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        );
        let mem = match mem {
            Ok(m) => m,
            Err(e) => {
                dev.stags.remove(idx);
                return Err(e);
            }
        };
        if let Err(e) = dev.stags.publish(idx, mem.clone()) {
            dev.stags.remove(idx);
            return Err(e);
        }
        slot.keep();
        Ok((stag, Mr { mem }))
    }

    /// `get_dma_mr`: all kernel memory, for kernel consumers.
    pub(crate) fn dma(dev: &IbDevice<Device>, pd: PdId, access: i32) -> Result<(u32, Mr)> {
        Self::register(dev, pd, 0, access, 0, u64::MAX, true, None, 0)
    }

    /// `reg_user_mr`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn user(
        dev: &IbDevice<Device>,
        pd: PdId,
        start: u64,
        len: u64,
        iova: u64,
        access: i32,
        udata: &mut UserResponse<'_>,
    ) -> Result<(u32, Mr)> {
        if len == 0 {
            return Err(fail(format_args!("reg_mr: zero length"), EINVAL));
        }
        if access & b::ib_access_flags_IB_ACCESS_ON_DEMAND as i32 != 0 {
            return Err(fail(format_args!("reg_mr: on-demand paging is not supported"), EOPNOTSUPP));
        }
        if iova.checked_add(len).is_none() {
            return Err(fail(format_args!("reg_mr: iova {iova:#x} + length {len} overflows"), EINVAL));
        }
        let req: b::siw_ureq_reg_mr = udata.read()?;
        let umem = UMem::get(dev, start, len, access)
            .map_err(|e| fail(format_args!("reg_mr: pinning {len} octets at {start:#x} failed ({})", e.to_errno()), e))?;
        if umem.address() != start || umem.length() != len {
            return Err(EINVAL);
        }
        let (stag, mr) = Self::register(dev, pd, req.stag_key, access, iova, len, true, Some(umem), 0)?;
        if let Err(e) = udata.write(&b::siw_uresp_reg_mr { stag, pad: 0 }) {
            Self::deregister(dev, &mr);
            return Err(e);
        }
        Ok((stag, mr))
    }

    /// `alloc_mr`: a fast-registration MR (invalid until a REG_MR work request).
    pub(crate) fn frmr(dev: &IbDevice<Device>, pd: PdId, ty: b::ib_mr_type, max_num_sg: u32) -> Result<(u32, Mr)> {
        if ty != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
            return Err(fail(format_args!("alloc_mr: MR type {ty} is not supported"), EOPNOTSUPP));
        }
        if max_num_sg == 0 || max_num_sg > MAX_FRMR_PAGES {
            return Err(fail(format_args!("alloc_mr: max_num_sg {max_num_sg} outside 1..={MAX_FRMR_PAGES}"), EINVAL));
        }
        Self::register(dev, pd, 0, 0, 0, 0, false, None, max_num_sg)
    }

    /// `map_mr_sg`, start: forget the previous mapping.
    pub(crate) fn map_begin(mr: &IbMr<Mr>) -> Result {
        if mr.mem.max_pages == 0 {
            return Err(fail(format_args!("map_mr_sg: not a fast-registration MR"), EINVAL));
        }
        mr.mem.pages.lock().clear();
        Ok(())
    }

    /// `map_mr_sg`, per page.
    pub(crate) fn set_page(mr: &IbMr<Mr>, addr: u64) -> Result {
        let mut pages = mr.mem.pages.lock();
        if pages.len() >= mr.mem.max_pages as usize {
            return Err(ENOMEM);
        }
        // Capacity was reserved at allocation: this does not allocate.
        pages.push(addr, GFP_ATOMIC).map_err(|_| ENOMEM)
    }

    /// `map_mr_sg`, end: the region the REG_MR work request will make valid.
    pub(crate) fn map_end(mr: &IbMr<Mr>, iova: u64, len: u64, page_size: u32) {
        mr.mem.va.store(iova, Ordering::Relaxed);
        mr.mem.len.store(len, Ordering::Relaxed);
        mr.mem.page_size.store(page_size, Ordering::Relaxed);
    }

    fn deregister(dev: &IbDevice<Device>, mr: &Mr) {
        mr.mem.valid.store(false, Ordering::Release);
        // Drops the table's reference; transfers holding one finish with theirs.
        dev.stags.remove(mr.mem.stag.load(Ordering::Relaxed) >> 8);
        dev.mrs.fetch_sub(1, Ordering::AcqRel);
    }

    /// `dereg_mr`.
    pub(crate) fn dereg(dev: &IbDevice<Device>, mr: &IbMr<Mr>) {
        Self::deregister(dev, mr);
    }
}
