// SPDX-License-Identifier: GPL-2.0

//! Work queue elements: the kernel copies the TX and RX paths act on, and the codec that
//! makes them from ring slots ([`decode_sqe`], [`decode_rqe`]) and from kernel consumers'
//! receive WRs ([`build_rqe`]).
//!
//! A WQE is read from its ring once, into a kernel copy that is validated before anything
//! acts on it: user rings are untrusted memory.

use crate::abi::wqe_flags::{INLINE, SIGNALLED, VALID};
use crate::abi::{Rqe, Sge, Sqe, WcStatus, WrOpcode};
use crate::limits::{MAX_INLINE, MAX_MSG_SZ, MAX_SGE};
use crate::sys::bindings as b;
use crate::sys::mem::ring::{sqe_raddr, sqe_sges};
use crate::sys::wr::RecvWr;
use crate::sys::Pod;
use kernel::prelude::*;

/// The SQ position of a send WQE the TX path holds; it names the slot to release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SqSlot(u32);

impl SqSlot {
    /// The slot at free-running SQ position `pos` (the QP reading it, and KUnit tests).
    pub(crate) fn at(pos: u32) -> Self {
        Self(pos)
    }

    /// The free-running SQ position.
    pub(crate) fn pos(self) -> u32 {
        self.0
    }
}

/// A send WQE: a validated kernel copy of one SQ slot.
#[derive(Clone, Copy)]
pub(crate) struct SendWqe {
    /// The slot it was read from.
    pub(crate) slot: SqSlot,
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// Write, Read, ReadLocalInv, Send, SendRemoteInv; for kernel QPs also InvalStag and
    /// RegMr.
    pub(crate) opcode: WrOpcode,
    /// `SIW_WQE_*` flags (SIGNALLED, SOLICITED, INLINE, READ_FENCE).
    pub(crate) flags: u16,
    /// The remote STag (RDMA WRITE/READ) or the STag to invalidate (SEND_REMOTE_INV).
    pub(crate) rkey: u32,
    /// The remote tagged offset (RDMA WRITE/READ).
    pub(crate) raddr: u64,
    /// Without INLINE: `num_sge` (at most [`MAX_SGE`]) local SGEs.
    num_sge: u8,
    sge: [Sge; MAX_SGE as usize],
}

/// Inline payload of a send WQE.
pub(crate) struct InlineData {
    buf: [u8; MAX_INLINE as usize],
    len: usize,
}

impl InlineData {
    /// The payload octets.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl SendWqe {
    /// The `IB_ACCESS_*` rights of a REG_MR WQE (the ABI's `access`, which shares its
    /// octets with the first SGE); meaningless for other opcodes.
    pub(crate) fn access(&self) -> i32 {
        self.sge[0].laddr as u32 as i32
    }

    /// The tagged offset and length (octets) a REG_MR WQE registers its MR as: the MR's
    /// `iova` (in `raddr`) and `length` (beside `access` in the first SGE) when the
    /// consumer posted it; meaningless for other opcodes.
    pub(crate) fn reg_range(&self) -> (u64, u64) {
        (self.raddr, u64::from(self.sge[0].length))
    }

    /// The local SGEs (empty for inline WQEs).
    pub(crate) fn sges(&self) -> &[Sge] {
        if self.flags & INLINE != 0 {
            &[]
        } else {
            &self.sge[..usize::from(self.num_sge)]
        }
    }

    /// What completing this WQE needs of it ([`SendDone`]).
    pub(crate) fn done(&self) -> SendDone {
        let local_inval = match (self.opcode, self.sges()) {
            (WrOpcode::ReadLocalInv, [sge]) => Some(sge.lkey),
            _ => None,
        };
        SendDone {
            id: self.id,
            opcode: self.opcode,
            flags: self.flags,
            local_inval,
        }
    }

    /// The inline payload (`sge[0].length` octets at `sge[1..]`), or `None` for a WQE
    /// with SGEs.
    pub(crate) fn inline_data(&self) -> Option<InlineData> {
        if self.flags & INLINE == 0 {
            return None;
        }
        let mut buf = [0u8; MAX_INLINE as usize];
        for (chunk, s) in buf.chunks_exact_mut(16).zip(&self.sge[1..]) {
            chunk[0..8].copy_from_slice(&s.laddr.to_ne_bytes());
            chunk[8..12].copy_from_slice(&s.length.to_ne_bytes());
            chunk[12..16].copy_from_slice(&s.lkey.to_ne_bytes());
        }
        // Bounded by `decode_sqe`.
        let len = (self.sge[0].length as usize).min(buf.len());
        Some(InlineData { buf, len })
    }
}

/// What completing a send WQE needs of it once its message started: the part of a
/// [`SendWqe`] a connection holds while the message is sent, or while an RDMA Read's
/// Response is outstanding.
#[derive(Clone, Copy)]
pub(crate) struct SendDone {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// The WQE's opcode, reported in its CQE.
    pub(crate) opcode: WrOpcode,
    /// `SIW_WQE_*` flags (SIGNALLED decides whether a success is reported).
    pub(crate) flags: u16,
    /// For an RDMA Read with Local Invalidate whose sink is one SGE: that SGE's STag,
    /// invalidated once the Read completed.
    pub(crate) local_inval: Option<u32>,
}

impl SendDone {
    /// Whether a successful completion is reported.
    pub(crate) fn signalled(&self) -> bool {
        self.flags & SIGNALLED != 0
    }
}

/// Why an SQE was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadWqe {
    /// Unknown or unsupported opcode (or a kernel-only one from user space).
    Opcode(u8),
    /// More than `SIW_MAX_SGE` SGEs.
    NumSge(u8),
    /// Inline data longer than `SIW_MAX_INLINE`.
    Inline(u32),
    /// SGEs whose lengths sum beyond `MAX_MSG_SZ` (the sum, in octets).
    Length(u64),
}

impl BadWqe {
    /// The status a WQE failed for this completes with: [`WcStatus::LocLenErr`] for a
    /// length beyond the longest message, [`WcStatus::LocQpOpErr`] otherwise.
    pub(crate) fn status(&self) -> WcStatus {
        match self {
            BadWqe::Length(_) => WcStatus::LocLenErr,
            _ => WcStatus::LocQpOpErr,
        }
    }
}

/// A malformed SQE at the head of the SQ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BadSqe {
    /// The slot it was read from.
    pub(crate) slot: SqSlot,
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// The opcode to report (see [`flush_opcode`]).
    pub(crate) opcode: WrOpcode,
    /// What is wrong with it.
    pub(crate) reason: BadWqe,
}

impl BadSqe {
    /// The send WQE to complete it with: its slot, ID and opcode, signalled (a WR that
    /// fails always completes), without SGEs.
    pub(crate) fn failed(&self) -> SendWqe {
        SendWqe {
            slot: self.slot,
            id: self.id,
            opcode: self.opcode,
            flags: SIGNALLED,
            rkey: 0,
            raddr: 0,
            num_sge: 0,
            sge: [Sge {
                laddr: 0,
                length: 0,
                lkey: 0,
            }; MAX_SGE as usize],
        }
    }
}

/// A receive WQE: a validated kernel copy of one RQ or SRQ slot.
#[derive(Clone, Copy)]
pub(crate) struct RecvWqe {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    num_sge: u8,
    sge: [Sge; MAX_SGE as usize],
}

impl RecvWqe {
    /// The buffers to place the message into (at most [`MAX_SGE`]).
    pub(crate) fn sges(&self) -> &[Sge] {
        &self.sge[..usize::from(self.num_sge)]
    }
}

/// A malformed RQE (more than `SIW_MAX_SGE` SGEs); it was consumed and must be completed
/// in error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BadRqe {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// The SGE count the consumer wrote.
    pub(crate) num_sge: u8,
}

/// The WQE was completed by a flush (the QP entered ERROR) before the data path finished
/// it: nothing was reported, the data path drops it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stale;

/// Validates one SQE copy read from `slot`. `kernel` allows the kernel-only opcodes.
///
/// # Errors
///
/// [`BadSqe`] naming the first problem: an opcode user space may not post, more than
/// `SIW_MAX_SGE` SGEs, inline data beyond `SIW_MAX_INLINE`, or SGEs whose lengths sum
/// beyond `MAX_MSG_SZ` octets.
pub(crate) fn decode_sqe(raw: &Sqe, kernel: bool, slot: SqSlot) -> Result<SendWqe, BadSqe> {
    let bad = |reason| BadSqe {
        slot,
        id: raw.id,
        opcode: flush_opcode(raw.opcode),
        reason,
    };
    let opcode = match WrOpcode::from_raw(raw.opcode) {
        Some(
            op @ (WrOpcode::Write
            | WrOpcode::Read
            | WrOpcode::ReadLocalInv
            | WrOpcode::Send
            | WrOpcode::SendRemoteInv),
        ) => op,
        Some(op @ (WrOpcode::InvalStag | WrOpcode::RegMr)) if kernel => op,
        _ => return Err(bad(BadWqe::Opcode(raw.opcode))),
    };
    let sge = sqe_sges(raw);
    // The siw library writes the caller's SGE count even for inline WQEs: only the
    // length counts then.
    if raw.flags & INLINE != 0 {
        if sge[0].length > MAX_INLINE {
            return Err(bad(BadWqe::Inline(sge[0].length)));
        }
    } else if u32::from(raw.num_sge) > MAX_SGE {
        return Err(bad(BadWqe::NumSge(raw.num_sge)));
    } else {
        let total: u64 = sge
            .iter()
            .take(usize::from(raw.num_sge))
            .map(|s| u64::from(s.length))
            .sum();
        if total > u64::from(MAX_MSG_SZ) {
            return Err(bad(BadWqe::Length(total)));
        }
    }
    Ok(SendWqe {
        slot,
        id: raw.id,
        opcode,
        flags: raw.flags & !VALID,
        num_sge: raw.num_sge.min(MAX_SGE as u8),
        rkey: raw.rkey,
        raddr: sqe_raddr(raw),
        sge,
    })
}

/// Validates one RQE copy (`num_sge <= SIW_MAX_SGE`; the opcode field is ignored, as the
/// ABI says).
///
/// # Errors
///
/// [`BadRqe`] for too many SGEs.
pub(crate) fn decode_rqe(raw: &Rqe) -> Result<RecvWqe, BadRqe> {
    if u32::from(raw.num_sge) > MAX_SGE {
        return Err(BadRqe {
            id: raw.id,
            num_sge: raw.num_sge,
        });
    }
    Ok(RecvWqe {
        id: raw.id,
        num_sge: raw.num_sge,
        sge: raw.sge,
    })
}

/// The opcode to report for a failed or flushed SQE: its own if the ABI defines it (the
/// user library indexes its completion opcode table with it), Send for garbage a user
/// wrote (the library would index past its table).
pub(crate) fn flush_opcode(op: u8) -> WrOpcode {
    WrOpcode::from_raw(op).unwrap_or(WrOpcode::Send)
}

/// Builds a receive WQE from a kernel consumer's WR (QPs and SRQs) with at most `max_sge`
/// SGEs. The flags stay zero: the caller publishes the slot.
///
/// # Errors
///
/// `EINVAL` for a negative or too large SGE count, or SGE lengths summing beyond 4 GiB.
pub(crate) fn build_rqe(wr: &RecvWr, max_sge: u32) -> Result<Rqe> {
    let n = u32::try_from(wr.num_sge()).map_err(|_| EINVAL)?;
    if n > max_sge {
        return Err(EINVAL);
    }
    let mut rqe = Rqe::zeroed();
    rqe.id = wr.wr_id();
    rqe.num_sge = n as u8;
    copy_sges(&mut rqe.sge, wr.sges()).ok_or(EINVAL)?;
    Ok(rqe)
}

/// Copies the SGEs of a kernel WR into the SGE array of a ring slot (as far as it
/// reaches). Returns `None` if their lengths sum beyond 4 GiB.
pub(crate) fn copy_sges(dst: &mut [Sge], src: &[b::ib_sge]) -> Option<()> {
    let mut total = 0u32;
    for (d, s) in dst.iter_mut().zip(src) {
        total = total.checked_add(s.length)?;
        *d = Sge {
            laddr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Some(())
}
