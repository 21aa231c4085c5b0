// SPDX-License-Identifier: GPL-2.0

//! Work requests of kernel consumers (`struct ib_send_wr`, `struct ib_recv_wr`) as safe
//! views for the duration of a post call.
//!
//! The RDMA core's contract for `post_send`/`post_recv`/`post_srq_recv`: the list and
//! every scatter/gather list it references are valid and unchanged for the whole call.
//! For devices using virtual DMA (`INFINIBAND_VIRT_DMA`, like rsiw), the addresses of a
//! kernel consumer's SGEs are kernel virtual addresses.

use super::bindings;
use core::marker::PhantomData;
use kernel::prelude::*;

/// A send work request of a kernel consumer.
#[repr(transparent)]
pub(crate) struct SendWr(bindings::ib_send_wr);

/// The opcode of a kernel consumer's send WR (`enum ib_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelOpcode {
    /// `IB_WR_SEND`.
    Send,
    /// `IB_WR_SEND_WITH_INV`: Send with Invalidate of the peer's STag.
    SendWithInv,
    /// `IB_WR_RDMA_WRITE`.
    RdmaWrite,
    /// `IB_WR_RDMA_READ`.
    RdmaRead,
    /// `IB_WR_RDMA_READ_WITH_INV`: RDMA Read, then invalidate the local sink STag.
    RdmaReadWithInv,
    /// `IB_WR_LOCAL_INV`.
    LocalInv,
    /// `IB_WR_REG_MR`: fast registration.
    RegMr,
    /// Any other opcode (atomics, immediate data, ...), by its value.
    Other(u32),
}

impl KernelOpcode {
    fn from_raw(op: bindings::ib_wr_opcode) -> Self {
        match op {
            bindings::ib_wr_opcode_IB_WR_SEND => Self::Send,
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV => Self::SendWithInv,
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE => Self::RdmaWrite,
            bindings::ib_wr_opcode_IB_WR_RDMA_READ => Self::RdmaRead,
            bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV => Self::RdmaReadWithInv,
            bindings::ib_wr_opcode_IB_WR_LOCAL_INV => Self::LocalInv,
            bindings::ib_wr_opcode_IB_WR_REG_MR => Self::RegMr,
            other => Self::Other(other),
        }
    }
}

/// The send flags of a kernel consumer's send WR (`IB_SEND_*`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendFlags(u32);

impl SendFlags {
    fn has(self, flag: bindings::ib_send_flags) -> bool {
        self.0 & flag as u32 != 0
    }

    /// `IB_SEND_SIGNALED`: the WR completes with a CQE.
    pub(crate) fn signaled(self) -> bool {
        self.has(bindings::ib_send_flags_IB_SEND_SIGNALED)
    }

    /// `IB_SEND_SOLICITED`: the peer's consumer is to be woken.
    pub(crate) fn solicited(self) -> bool {
        self.has(bindings::ib_send_flags_IB_SEND_SOLICITED)
    }

    /// `IB_SEND_INLINE`: the data is copied at post time.
    pub(crate) fn inline(self) -> bool {
        self.has(bindings::ib_send_flags_IB_SEND_INLINE)
    }

    /// `IB_SEND_FENCE`: wait for earlier RDMA Reads.
    pub(crate) fn fence(self) -> bool {
        self.has(bindings::ib_send_flags_IB_SEND_FENCE)
    }
}

/// A receive work request of a kernel consumer.
#[repr(transparent)]
pub(crate) struct RecvWr(bindings::ib_recv_wr);

/// Returns the SGEs at `list` (`n` entries) as a slice; empty for a null list or `n <= 0`.
///
/// # Safety
///
/// If non-null, `list` points to `n` valid SGEs that stay unchanged for `'a`.
unsafe fn sges<'a>(list: *mut bindings::ib_sge, n: i32) -> &'a [bindings::ib_sge] {
    match usize::try_from(n) {
        // SAFETY: guaranteed by the caller.
        Ok(n) if n > 0 && !list.is_null() => unsafe { core::slice::from_raw_parts(list, n) },
        _ => &[],
    }
}

impl SendWr {
    /// The consumer's `wr_id`.
    pub(crate) fn wr_id(&self) -> u64 {
        // SAFETY: both union members are 64 bits of plain data (an integer or a pointer
        // the consumer stored); reading them as an integer is always valid.
        unsafe { self.0.__bindgen_anon_1.wr_id }
    }

    /// The opcode.
    pub(crate) fn opcode(&self) -> KernelOpcode {
        KernelOpcode::from_raw(self.0.opcode)
    }

    /// The send flags (`IB_SEND_*`).
    pub(crate) fn send_flags(&self) -> SendFlags {
        SendFlags(self.0.send_flags as u32)
    }

    /// The number of SGEs the consumer claims (may be negative or too large: validate).
    pub(crate) fn num_sge(&self) -> i32 {
        self.0.num_sge
    }

    /// The scatter/gather list.
    pub(crate) fn sges(&self) -> &[bindings::ib_sge] {
        // SAFETY: the core's post contract: `sg_list` holds `num_sge` valid SGEs.
        unsafe { sges(self.0.sg_list, self.0.num_sge) }
    }

    /// The key to invalidate (`ex.invalidate_rkey`) of `IB_WR_SEND_WITH_INV`.
    pub(crate) fn invalidate_rkey(&self) -> u32 {
        // SAFETY: 32 bits of plain data in either union member.
        unsafe { self.0.ex.invalidate_rkey }
    }

    /// The remote address and key of an RDMA WRITE/READ request (`struct ib_rdma_wr`),
    /// or `None` for other opcodes.
    pub(crate) fn rdma(&self) -> Option<(u64, u32)> {
        match self.0.opcode {
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE
            | bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
            | bindings::ib_wr_opcode_IB_WR_RDMA_READ
            | bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV => {
                let p = core::ptr::from_ref(&self.0).cast::<bindings::ib_rdma_wr>();
                // SAFETY: for these opcodes the consumer posts a `struct ib_rdma_wr` whose
                // first member is this `ib_send_wr` (`rdma_wr()` in C).
                let r = unsafe { &*p };
                Some((r.remote_addr, r.rkey))
            }
            _ => None,
        }
    }

    /// The fast-registration request of `IB_WR_REG_MR` (`struct ib_reg_wr`): the MR's
    /// current local STag (`mr->lkey`), the STag to register it under (`key`), the rights
    /// (`IB_ACCESS_*`), and the MR's `iova` and `length` as they are now (a consumer may
    /// change `iova` after `map_mr_sg`); `None` for other opcodes or without an MR.
    pub(crate) fn reg(&self) -> Option<(u32, u32, i32, u64, u64)> {
        if self.0.opcode != bindings::ib_wr_opcode_IB_WR_REG_MR {
            return None;
        }
        let p = core::ptr::from_ref(&self.0).cast::<bindings::ib_reg_wr>();
        // SAFETY: for `IB_WR_REG_MR` the consumer posts a `struct ib_reg_wr` whose first
        // member is this `ib_send_wr` (`reg_wr()` in C).
        let r = unsafe { &*p };
        // SAFETY: `r.mr` is null or the consumer's MR, alive while its WR is posted.
        let mr = unsafe { r.mr.as_ref()? };
        Some((mr.lkey, r.key, r.access, mr.iova, mr.length))
    }

    /// Copies the data of all SGEs (inline send) into `dst`; returns the octet count.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the data does not fit into `dst`.
    pub(crate) fn copy_inline(&self, dst: &mut [u8]) -> Result<usize> {
        let mut at = 0usize;
        for sge in self.sges() {
            let len = sge.length as usize;
            if len == 0 {
                continue;
            }
            let end = at
                .checked_add(len)
                .filter(|&e| e <= dst.len())
                .ok_or(EINVAL)?;
            let src = sge.addr as usize as *const u8;
            // SAFETY: virtual DMA: the SGE is `length` readable octets at a kernel address
            // (core post contract); `dst[at..end]` is ours, checked above, no overlap.
            unsafe { core::ptr::copy_nonoverlapping(src, dst[at..end].as_mut_ptr(), len) };
            at = end;
        }
        Ok(at)
    }
}

impl RecvWr {
    /// The consumer's `wr_id`.
    pub(crate) fn wr_id(&self) -> u64 {
        // SAFETY: see `SendWr::wr_id`.
        unsafe { self.0.__bindgen_anon_1.wr_id }
    }

    /// The number of SGEs the consumer claims (validate).
    pub(crate) fn num_sge(&self) -> i32 {
        self.0.num_sge
    }

    /// The scatter/gather list.
    pub(crate) fn sges(&self) -> &[bindings::ib_sge] {
        // SAFETY: the core's post contract.
        unsafe { sges(self.0.sg_list, self.0.num_sge) }
    }
}

/// A linked list of work requests of type `W` (`SendWr` or `RecvWr`), valid for `'a`.
pub(crate) struct WrList<'a, W> {
    next: *const W,
    _p: PhantomData<&'a W>,
}

impl<W> Clone for WrList<'_, W> {
    fn clone(&self) -> Self {
        Self {
            next: self.next,
            _p: PhantomData,
        }
    }
}

impl<'a, W> WrList<'a, W> {
    /// # Safety
    ///
    /// `head` is null or the head of a list of valid, unchanging work requests for `'a`
    /// (the core's post contract).
    pub(super) unsafe fn new(head: *const W) -> Self {
        Self {
            next: head,
            _p: PhantomData,
        }
    }

    /// Returns whether the list is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.next.is_null()
    }
}

impl<'a> Iterator for WrList<'a, SendWr> {
    type Item = &'a SendWr;

    fn next(&mut self) -> Option<&'a SendWr> {
        // SAFETY: a non-null `next` is a valid work request for `'a` (`new`); `SendWr` is
        // a transparent wrapper of `ib_send_wr`.
        let wr = unsafe { self.next.as_ref()? };
        self.next = wr.0.next.cast::<SendWr>();
        Some(wr)
    }
}

impl<'a> Iterator for WrList<'a, RecvWr> {
    type Item = &'a RecvWr;

    fn next(&mut self) -> Option<&'a RecvWr> {
        // SAFETY: as above.
        let wr = unsafe { self.next.as_ref()? };
        self.next = wr.0.next.cast::<RecvWr>();
        Some(wr)
    }
}

/// A failed post: the error and the first work request that was not posted.
pub(crate) struct PostError<'a, W> {
    /// The errno returned to the consumer.
    pub(crate) error: Error,
    /// The first request not posted (`*bad_wr`); `None` for an empty list.
    pub(crate) bad: Option<&'a W>,
}

impl<'a, W> PostError<'a, W> {
    /// A failure at `bad`.
    pub(crate) fn at(error: Error, bad: Option<&'a W>) -> Self {
        Self { error, bad }
    }
}

/// Maps the result of a post to the C convention: 0, or a negative errno with `*bad` set
/// to the first request not posted (null for an empty list).
///
/// # Safety
///
/// `bad` is null or the core's valid out-pointer of the running post call; `W` is the
/// `repr(transparent)` view of `C`.
pub(super) unsafe fn post_result<W, C>(
    r: Result<(), PostError<'_, W>>,
    bad: *mut *const C,
) -> kernel::ffi::c_int {
    match r {
        Ok(()) => 0,
        Err(PostError { error, bad: first }) => {
            if !bad.is_null() {
                let p = first.map_or(core::ptr::null(), |w| core::ptr::from_ref(w).cast());
                // SAFETY: `bad` is the core's valid out-pointer (caller's guarantee).
                unsafe { *bad = p };
            }
            error.to_errno()
        }
    }
}
