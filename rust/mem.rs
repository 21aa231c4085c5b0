// SPDX-License-Identifier: GPL-2.0

//! Memory regions: the MR verbs. Each MR's region and its STag live in the device's STag
//! table ([`crate::stag`]).
//!
//! Kinds: DMA MRs (`get_dma_mr`) cover all kernel memory; user MRs pin user memory;
//! fast-registration MRs (`alloc_mr`, kernel only) get a page list through `map_mr_sg`
//! and become valid with a REG_MR work request. rsiw advertises
//! `IB_DEVICE_MEM_MGT_EXTENSIONS`.

use crate::abi::{access, RegMrReq, RegMrResp};
use crate::device::Device;
use crate::limits::{Object, MAX_FRMR_PAGES};
use crate::logtag::Tag;
use crate::stag::{Kind, MrRef};
use crate::sys::ibdev::{IbDevice, MrOps};
use crate::sys::mem::kmem::KernelConsumer;
use crate::sys::mem::umem::UMem;
use crate::sys::obj::{IbMr, PdId};
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::UserResponse;
use kernel::prelude::*;

/// The driver data of an MR: its region.
pub(crate) struct Mr {
    mem: MrRef,
}

/// Logs `what` (rate-limited) for the device whose name `dev_name` writes (as
/// [`IbDevice::name_into`]) and returns `e`.
#[track_caller]
fn fail(
    dev_name: impl FnOnce(&mut [u8]) -> usize,
    what: core::fmt::Arguments<'_>,
    e: Error,
) -> Error {
    pr_err_ratelimited!("{}: {what}\n", Tag::with_name(dev_name, None));
    e
}

impl Mr {
    /// Creates a region of `kind` in `pd` with rights `access` covering `[va, va + len)`,
    /// enters it into the device's STag table under a fresh index with `key`, and returns
    /// its STag and the MR data.
    ///
    /// # Errors
    ///
    /// `ENOMEM` at the `max_mr` limit (logged) or without memory; `ENOSPC` if the STag
    /// table is full.
    fn register(
        dev: &IbDevice<Device>,
        pd: PdId,
        key: u8,
        access: i32,
        range: (u64, u64),
        kind: Kind,
    ) -> Result<(u32, Mr)> {
        let slot = dev.counts.take(Object::Mr, dev)?;
        let (stag, mem) = dev.stags.register(pd, key, access, range, kind)?;
        slot.keep();
        Ok((stag, Mr { mem }))
    }

    fn deregister(dev: &IbDevice<Device>, mr: &Mr) {
        dev.stags.deregister(&mr.mem);
        dev.counts.give_back(Object::Mr);
    }
}

#[vtable]
impl MrOps<Device> for Mr {
    /// `get_dma_mr`: a region of all kernel memory with rights `access` in `pd`, for
    /// kernel consumers (the core asks for one per kernel PD: its `local_dma_lkey`).
    /// Returns its STag (key 0) and the MR data.
    ///
    /// # Errors
    ///
    /// As [`Mr::register`].
    fn get_dma(
        dev: &IbDevice<Device>,
        pd: PdId,
        access: i32,
        kc: KernelConsumer,
    ) -> Result<(u32, Mr)> {
        Self::register(dev, pd, 0, access, (0, u64::MAX), Kind::Dma(kc))
    }

    /// `reg_user_mr`: pins `len` octets of the caller's memory at `start` for `access` and
    /// registers them in `pd`, addressed by peers at tagged offsets `[iova, iova + len)`.
    /// The STag's key is the `stag_key` of the siw request in `udata`; the STag is also
    /// written to the siw response. Returns the STag and the MR data.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a zero length, a range that wraps or a short request; `EOPNOTSUPP` for
    /// on-demand paging; the pinning error (`EFAULT` for unmapped memory, `ENOMEM` beyond
    /// `RLIMIT_MEMLOCK`); as [`Mr::register`]; `EFAULT` if the response cannot be copied.
    /// Each logs its cause (rate-limited).
    fn reg_user(
        dev: &IbDevice<Device>,
        pd: PdId,
        start: u64,
        len: u64,
        iova: u64,
        access: i32,
        udata: &mut UserResponse<'_>,
    ) -> Result<(u32, Mr)> {
        if len == 0 {
            return Err(fail(
                |b| dev.name_into(b),
                format_args!("reg_mr: zero length"),
                EINVAL,
            ));
        }
        if access & access::ON_DEMAND as i32 != 0 {
            return Err(fail(
                |b| dev.name_into(b),
                format_args!("reg_mr: on-demand paging is not supported"),
                EOPNOTSUPP,
            ));
        }
        if iova.checked_add(len).is_none() {
            return Err(fail(
                |b| dev.name_into(b),
                format_args!("reg_mr: iova {iova:#x} + length {len} overflows"),
                EINVAL,
            ));
        }
        let req: RegMrReq = udata.read()?;
        let umem = UMem::get(dev, start, len, access).map_err(|e| {
            fail(
                |b| dev.name_into(b),
                format_args!(
                    "reg_mr: pinning {len} octets at {start:#x} failed ({})",
                    e.to_errno()
                ),
                e,
            )
        })?;
        if umem.address() != start || umem.length() != len {
            return Err(EINVAL);
        }
        let (stag, mr) =
            Self::register(dev, pd, req.stag_key, access, (iova, len), Kind::User(umem))?;
        if let Err(e) = udata.write(&RegMrResp { stag, pad: 0 }) {
            Self::deregister(dev, &mr);
            return Err(e);
        }
        Ok((stag, mr))
    }

    /// `alloc_mr`: a fast-registration MR in `pd` for up to `max_num_sg` pages, invalid
    /// until a REG_MR work request ([`StagTable::fast_register`]). Returns its STag (key 0)
    /// and the MR data.
    ///
    /// # Errors
    ///
    /// `EINVAL` for `max_num_sg` outside 1..=[`MAX_FRMR_PAGES`]; as [`Mr::register`].
    fn alloc_fast(
        dev: &IbDevice<Device>,
        pd: PdId,
        max_num_sg: u32,
        kc: KernelConsumer,
    ) -> Result<(u32, Mr)> {
        if max_num_sg == 0 || max_num_sg > MAX_FRMR_PAGES {
            return Err(fail(
                |b| dev.name_into(b),
                format_args!("alloc_mr: max_num_sg {max_num_sg} outside 1..={MAX_FRMR_PAGES}"),
                EINVAL,
            ));
        }
        Self::register(dev, pd, 0, 0, (0, 0), Kind::Fast(max_num_sg, kc))
    }

    /// `map_mr_sg`, start: forgets the previous page list.
    ///
    /// # Errors
    ///
    /// `EINVAL` (logged) for an MR that is not a fast-registration MR.
    fn map_begin(mr: &IbMr<Mr>) -> Result {
        if !mr.mem.is_fast() {
            return Err(fail(
                |b| mr.device_name_into(b),
                format_args!("map_mr_sg: not a fast-registration MR"),
                EINVAL,
            ));
        }
        mr.mem.clear_pages();
        Ok(())
    }

    /// `map_mr_sg`, per page (called by `ib_sg_to_pages`): appends page address `addr`.
    ///
    /// # Errors
    ///
    /// `ENOMEM` beyond the MR's `max_num_sg` pages (`ib_sg_to_pages` then stops and
    /// reports how many entries it mapped).
    fn set_page(mr: &IbMr<Mr>, addr: u64) -> Result {
        mr.mem.push_page(addr)
    }

    /// `map_mr_sg`, end: the page list covers `len` octets at DMA address `iova` in pages
    /// of `page_size` octets; the region a REG_MR work request will make valid.
    fn map_end(mr: &IbMr<Mr>, iova: u64, len: u64, page_size: u32) {
        mr.mem.set_mapping(iova, len, page_size);
    }

    /// `dereg_mr`: invalidates the STag, removes it from the table (transfers holding a
    /// reference finish with it) and gives back the `max_mr` unit.
    fn dereg(dev: &IbDevice<Device>, mr: &IbMr<Mr>) {
        Self::deregister(dev, mr);
    }
}
