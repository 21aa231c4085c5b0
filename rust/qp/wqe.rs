// SPDX-License-Identifier: GPL-2.0

//! Work queue elements as the TX and RX paths see them, and how they take and complete
//! them.
//!
//! A WQE is read from its ring once, into a kernel copy that is validated before anything
//! acts on it ([`decode_sqe`], [`decode_rqe`]): user rings are untrusted memory.
//!
//! TX (send queue), in posting order:
//! 1. [`Qp::next_sqe`] returns a validated copy of the SQE at the head of the SQ (only in
//!    RTS), without consuming it. A [`BadSqe`] (unknown opcode, too many SGEs, too much
//!    inline data) must be failed with [`Qp::fail_sqe`], then [`Qp::enter_error`].
//! 2. When the WQE is done, [`Qp::complete_sqe`] releases its slot and reports the
//!    completion into the send CQ (if signalled, or in error). A WQE that completes later
//!    (an RDMA READ waiting for its response) is released with [`Qp::release_sqe`] and
//!    reported with [`Qp::complete_send`].
//! 3. If the QP was flushed meanwhile (ERROR), the WQE was completed by the flush: the
//!    release reports [`Stale`] and the TX path drops the WQE.
//!
//! RX (receive queue or SRQ): [`Qp::take_rqe`] consumes the next RQE (only in RTS) and
//! hands the RX path a validated copy; the RX path owns it from then on and must complete
//! it with [`Qp::complete_recv`], also when the QP enters ERROR meanwhile (with
//! [`WcStatus::WrFlushErr`]).
//!
//! The completion functions call the consumer's completion handler and CQ events: call
//! them with no QP, SRQ or CQ lock held (softirq context is fine).

use super::state::State;
use super::{Qp, INLINE, SIGNALLED, VALID};
use crate::abi::{Rqe, Sge, Sqe};
use crate::abi::{WcStatus, WrOpcode};
use crate::cq::{Cq, Cqe};
use crate::limits::{MAX_INLINE, MAX_SGE};
use crate::srq::Srq;
use crate::sys::mem::ring::{sqe_raddr, sqe_sges};
use crate::sys::obj::IbQp;
use crate::sys::pr_err_ratelimited;
use kernel::prelude::*;

/// The SQ position of a send WQE the TX path holds; it names the slot to release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SqSlot(u32);

impl SqSlot {
    /// The slot at free-running position `pos` (KUnit tests).
    #[cfg(CONFIG_KUNIT = "y")]
    pub(crate) fn test(pos: u32) -> Self {
        Self(pos)
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
    /// Whether a successful completion is reported.
    pub(crate) fn signalled(&self) -> bool {
        self.flags & SIGNALLED != 0
    }

    /// The `IB_ACCESS_*` rights of a REG_MR WQE (the ABI's `access`, which shares its
    /// octets with the first SGE); meaningless for other opcodes.
    pub(crate) fn access(&self) -> i32 {
        self.sge[0].laddr as u32 as i32
    }

    /// The local SGEs (empty for inline WQEs).
    pub(crate) fn sges(&self) -> &[Sge] {
        if self.flags & INLINE != 0 {
            &[]
        } else {
            &self.sge[..usize::from(self.num_sge)]
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

/// Why an SQE was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadWqe {
    /// Unknown or unsupported opcode (or a kernel-only one from user space).
    Opcode(u8),
    /// More than `SIW_MAX_SGE` SGEs.
    NumSge(u8),
    /// Inline data longer than `SIW_MAX_INLINE`.
    Inline(u32),
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
/// [`BadSqe`] naming the first problem.
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

impl Qp {
    /// For the TX path: a validated copy of the SQE at the head of the SQ, without
    /// consuming it; `None` if the SQ is empty or the QP is not in RTS. The slot is read
    /// once; act only on the returned copy.
    pub(crate) fn next_sqe(qp: &IbQp<Qp>) -> Option<Result<SendWqe, BadSqe>> {
        let pos = qp.sq_pos.lock();
        if qp.state() != State::Rts || qp.sq.flags(pos.get) & VALID == 0 {
            return None;
        }
        Some(decode_sqe(&qp.sq.read(pos.get), !qp.user, SqSlot(pos.get)))
    }

    /// For the TX path: releases the SQ slot of a WQE from [`Qp::next_sqe`] without
    /// reporting a completion (the WQE moves on, e.g. an RDMA READ to the outstanding
    /// reads, or it is unsignalled and done).
    ///
    /// # Errors
    ///
    /// [`Stale`] if a flush completed the WQE already (the slot is no longer the head).
    pub(crate) fn release_sqe(qp: &IbQp<Qp>, slot: SqSlot) -> Result<(), Stale> {
        let mut pos = qp.sq_pos.lock();
        if pos.get != slot.0 || qp.sq.flags(slot.0) & VALID == 0 {
            return Err(Stale);
        }
        // Fenced: the TX path looks at the next slot after this, and libsiw skips the
        // doorbell for a new SQE while this one still looks busy.
        qp.sq.set_flags_fenced(slot.0, 0);
        pos.get = slot.0.wrapping_add(1);
        Ok(())
    }

    /// For the TX and RX paths: reports the completion of send WQE `wqe` (released from
    /// the SQ already) with `status` and `bytes` into the send CQ, if it is signalled or
    /// failed. On a CQ overflow the consumer gets `IB_EVENT_CQ_ERR`.
    pub(crate) fn complete_send(qp: &IbQp<Qp>, wqe: &SendWqe, status: WcStatus, bytes: u32) {
        let ok = status == WcStatus::Success;
        if ok && !wqe.signalled() {
            return;
        }
        let c = Cqe {
            id: wqe.id,
            opcode: wqe.opcode,
            status,
            bytes,
            qpn: qp.qpn(),
            qp: qp.as_raw(),
            solicited: !ok,
            inval_stag: 0,
        };
        match Cq::push(&qp.scq, &c) {
            Ok(n) => n.deliver(&qp.scq),
            Err(o) => crate::cq::Notify::from(o).deliver(&qp.scq),
        }
    }

    /// For the TX path: [`Qp::release_sqe`], then [`Qp::complete_send`].
    ///
    /// # Errors
    ///
    /// [`Stale`] (nothing reported) if a flush completed the WQE already.
    pub(crate) fn complete_sqe(
        qp: &IbQp<Qp>,
        wqe: &SendWqe,
        status: WcStatus,
        bytes: u32,
    ) -> Result<(), Stale> {
        Self::release_sqe(qp, wqe.slot)?;
        Self::complete_send(qp, wqe, status, bytes);
        Ok(())
    }

    /// For the TX path: completes a malformed SQE with [`WcStatus::LocQpOpErr`] (and
    /// releases it). The caller then moves the QP to ERROR ([`Qp::enter_error`] with
    /// `IB_EVENT_QP_REQ_ERR`).
    ///
    /// # Errors
    ///
    /// [`Stale`] if a flush completed it already.
    pub(crate) fn fail_sqe(qp: &IbQp<Qp>, bad: &BadSqe) -> Result<(), Stale> {
        let wqe = SendWqe {
            slot: bad.slot,
            id: bad.id,
            opcode: bad.opcode,
            flags: SIGNALLED,
            rkey: 0,
            raddr: 0,
            num_sge: 0,
            sge: [Sge {
                laddr: 0,
                length: 0,
                lkey: 0,
            }; MAX_SGE as usize],
        };
        Self::complete_sqe(qp, &wqe, WcStatus::LocQpOpErr, 0)?;
        pr_err_ratelimited!(
            "QP {}: malformed send WQE {} ({:?})\n",
            qp.qpn(),
            bad.id,
            bad.reason
        );
        Ok(())
    }

    /// For the RX path: consumes the next receive WQE of the QP's RQ or, for a QP with an
    /// SRQ, of the SRQ (which may report `IB_EVENT_SRQ_LIMIT_REACHED`); `None` if there is
    /// none or the QP is not in RTS. The RX path owns the WQE from here on.
    pub(crate) fn take_rqe(qp: &IbQp<Qp>) -> Option<Result<RecvWqe, BadRqe>> {
        if let Some(srq) = &qp.srq {
            if qp.state() != State::Rts {
                return None;
            }
            return Srq::take_rqe(srq);
        }
        let ring = qp.rq.as_ref()?;
        let mut pos = qp.rq_pos.lock();
        let idx = pos.get;
        if qp.state() != State::Rts || ring.flags(idx) & VALID == 0 {
            return None;
        }
        let wqe = decode_rqe(&ring.read(idx));
        ring.set_flags(idx, 0);
        pos.get = idx.wrapping_add(1);
        Some(wqe)
    }

    /// For the RX path: reports the completion of receive WQE `id` (from
    /// [`Qp::take_rqe`]) with `status` and the `bytes` placed into the receive
    /// CQ. `inval_stag` is the STag a Send with Invalidate invalidated (reported to kernel
    /// consumers); `solicited` marks a Send with Solicited Event (fires solicited-only
    /// arms; failed completions always do).
    pub(crate) fn complete_recv(
        qp: &IbQp<Qp>,
        id: u64,
        status: WcStatus,
        bytes: u32,
        inval_stag: Option<u32>,
        solicited: bool,
    ) {
        let ok = status == WcStatus::Success;
        let c = Cqe {
            id,
            opcode: WrOpcode::Receive,
            status,
            bytes,
            qpn: qp.qpn(),
            qp: qp.as_raw(),
            solicited: solicited || !ok,
            inval_stag: inval_stag.unwrap_or(0),
        };
        match Cq::push(&qp.rcq, &c) {
            Ok(n) => n.deliver(&qp.rcq),
            Err(o) => crate::cq::Notify::from(o).deliver(&qp.rcq),
        }
    }
}
