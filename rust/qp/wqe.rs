// SPDX-License-Identifier: GPL-2.0

//! How the TX and RX paths take WQEs from a QP's rings and complete them. Every WQE is
//! decoded from a copy of its slot ([`crate::wqe`]): user rings are untrusted memory.
//!
//! TX (send queue), in posting order:
//! 1. [`Qp::next_sqe`] returns a validated copy of the SQE at the head of the SQ (only in
//!    RTS), without consuming it unless the caller asks to release it at once (a WQE that
//!    goes on the wire whatever the session says: step 2's release, in the same hold of
//!    the SQ lock). A [`BadSqe`] (unknown opcode, too many SGEs, too much
//!    inline data) must be failed with [`Qp::fail_sqe`], then [`Qp::enter_error`].
//! 2. A WQE done at once (a local operation, a failed one) is released and reported with
//!    [`Qp::complete_sqe`] (into the send CQ if signalled, or in error). A WQE that goes
//!    on the wire (a Send, an RDMA Write, an RDMA READ waiting for its response) is
//!    released with [`Qp::release_sqe`] as soon as it starts, as in the C siw: libsiw
//!    rings the doorbell only for an SQE posted behind a free slot. The connection then
//!    holds it, reports it with [`Qp::complete_send`], and completes it with a flush
//!    error before the SQ is flushed when the QP fails (CQ order is SQ order).
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
use super::{Pos, Qp, VALID};
use crate::abi::{WcStatus, WrOpcode};
use crate::cq::{Cq, Cqe};
use crate::srq::Srq;
use crate::sys::obj::IbQp;
use crate::sys::pr_err_ratelimited;
use crate::wqe::{
    decode_rqe, decode_sqe, BadRqe, BadSqe, RecvWqe, SendDone, SendWqe, SqSlot, Stale,
};
use kernel::prelude::*;

impl Qp {
    /// Whether the SQ's head slot holds a posted SQE (its VALID flag, whatever the QP's
    /// state): work the TX path has not taken yet.
    pub(crate) fn sq_posted(qp: &IbQp<Qp>) -> bool {
        let pos = qp.sq_pos.lock();
        qp.sq.flags(pos.get) & VALID != 0
    }

    /// For the TX path: a validated copy of the SQE at the head of the SQ; `None` if the
    /// SQ is empty or the QP is not in RTS. The slot is read once; act only on the
    /// returned copy. If `take` accepts the copy, its slot is released in the same hold of
    /// the SQ lock, as [`Qp::release_sqe`] would, and the flag returned with it is `true`:
    /// the caller then owns the WQE and reports it with [`Qp::complete_send`]. Otherwise
    /// the SQE stays the head.
    pub(crate) fn next_sqe(
        qp: &IbQp<Qp>,
        take: impl FnOnce(&SendWqe) -> bool,
    ) -> Option<Result<(SendWqe, bool), BadSqe>> {
        let mut pos = qp.sq_pos.lock();
        let at = pos.get;
        if qp.state() != State::Rts || qp.sq.flags(at) & VALID == 0 {
            return None;
        }
        Some(
            decode_sqe(&qp.sq.read(at), !qp.user, SqSlot::at(at)).map(|w| {
                let taken = take(&w);
                if taken {
                    Self::release_head_locked(qp, &mut pos);
                }
                (w, taken)
            }),
        )
    }

    /// For the TX path: releases the SQ slot of a WQE from [`Qp::next_sqe`] without
    /// reporting a completion (the WQE moves on to the connection: a message being sent,
    /// an RDMA READ among the outstanding reads).
    ///
    /// # Errors
    ///
    /// [`Stale`] if a flush completed the WQE already (the slot is no longer the head).
    pub(crate) fn release_sqe(qp: &IbQp<Qp>, slot: SqSlot) -> Result<(), Stale> {
        let mut pos = qp.sq_pos.lock();
        if pos.get != slot.pos() || qp.sq.flags(slot.pos()) & VALID == 0 {
            return Err(Stale);
        }
        Self::release_head_locked(qp, &mut pos);
        Ok(())
    }

    /// Releases the SQ's head slot (`pos`, the SQ's positions, held locked) and moves the
    /// head on.
    fn release_head_locked(qp: &IbQp<Qp>, pos: &mut Pos) {
        // Fenced: the TX path looks at the next slot after this, and libsiw skips the
        // doorbell for a new SQE while this one still looks busy.
        qp.sq.set_flags_fenced(pos.get, 0);
        pos.get = pos.get.wrapping_add(1);
    }

    /// For the TX and RX paths: reports the completion of send WQE `wqe` (released from
    /// the SQ already) with `status` and `bytes` into the send CQ, if it is signalled or
    /// failed. On a CQ overflow the consumer gets `IB_EVENT_CQ_ERR`.
    pub(crate) fn complete_send(qp: &IbQp<Qp>, wqe: &SendDone, status: WcStatus, bytes: u32) {
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
        match Cq::push(qp.scq(), &c) {
            Ok(n) => n.deliver(qp.scq()),
            Err(o) => crate::cq::Notify::from(o).deliver(qp.scq()),
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
        Self::complete_send(qp, &wqe.done(), status, bytes);
        Ok(())
    }

    /// For the TX path: completes a malformed SQE with its reason's status
    /// ([`BadWqe::status`]) and releases it. The caller then moves the QP to ERROR
    /// ([`Qp::enter_error`] with `IB_EVENT_QP_REQ_ERR`).
    ///
    /// # Errors
    ///
    /// [`Stale`] if a flush completed it already.
    pub(crate) fn fail_sqe(qp: &IbQp<Qp>, bad: &BadSqe) -> Result<(), Stale> {
        Self::complete_sqe(qp, &bad.failed(), bad.reason.status(), 0)?;
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
        if let Some(srq) = qp.shared_rq() {
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
        match Cq::push(qp.rcq(), &c) {
            Ok(n) => n.deliver(qp.rcq()),
            Err(o) => crate::cq::Notify::from(o).deliver(qp.rcq()),
        }
    }
}
