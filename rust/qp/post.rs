// SPDX-License-Identifier: GPL-2.0

//! The posting verbs: kernel consumers' work requests become ring slots in the same
//! format user space writes (so the TX and RX paths see one kind of WQE), and the user
//! doorbell.

use super::state::State;
use super::{
    invalid, Pos, Qp, Who, INLINE, MAX_INLINE, MAX_SGE, READ_FENCE, SIGNALLED, SOLICITED, VALID,
};
use crate::abi::WrOpcode;
use crate::abi::{Sge, Sqe};
use crate::cq::{Cq, Cqe, Notify};
use crate::sys::mem::ring::{Ring, RingElem};
use crate::sys::obj::{IbCq, IbQp};
use crate::sys::wr::{KernelOpcode, PostError, RecvWr, SendFlags, SendWr, WrList};
use crate::sys::Pod;
use crate::wqe::{build_rqe, copy_sges};
use kernel::prelude::*;

/// Packs `data` (at most [`MAX_INLINE`] octets) into `sge[1..]` in memory order, as the
/// siw library does with `memcpy`.
pub(super) fn pack_inline(sges: &mut [Sge; MAX_SGE as usize], data: &[u8]) {
    let mut buf = [0u8; MAX_INLINE as usize];
    let n = data.len().min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    for (k, chunk) in buf.chunks_exact(16).enumerate() {
        let mut laddr = [0u8; 8];
        let mut length = [0u8; 4];
        let mut lkey = [0u8; 4];
        laddr.copy_from_slice(&chunk[0..8]);
        length.copy_from_slice(&chunk[8..12]);
        lkey.copy_from_slice(&chunk[12..16]);
        sges[k + 1] = Sge {
            laddr: u64::from_ne_bytes(laddr),
            length: u32::from_ne_bytes(length),
            lkey: u32::from_ne_bytes(lkey),
        };
    }
}

impl Qp {
    /// Builds an SQE from a kernel consumer's WR.
    ///
    /// # Errors
    ///
    /// `EINVAL` for more SGEs than granted, an RDMA READ with other than one SGE, inline
    /// data beyond [`MAX_INLINE`], messages beyond 4 GiB, immediate data and atomics (not on
    /// iWARP), a REG_MR without an MR or with a key that names another MR. LOCAL_INV and
    /// REG_MR become `SIW_OP_INVAL_STAG` / `SIW_OP_REG_MR` SQEs the transport executes in
    /// SQ order (the new STag in `rkey`, REG_MR's rights in `access`).
    fn build_sqe(&self, who: Who<'_>, wr: &SendWr) -> Result<Sqe> {
        let n = u32::try_from(wr.num_sge())
            .map_err(|_| invalid(who, format_args!("negative num_sge")))?;
        if n > self.caps.send_sge() {
            return Err(invalid(
                who,
                format_args!("{n} SGEs, at most {}", self.caps.send_sge()),
            ));
        }
        let mut sqe = Sqe::zeroed();
        sqe.id = wr.wr_id();
        let f = wr.send_flags();
        let mut flags = self.signal_fence_flags(f);
        let op = wr.opcode();
        let (opcode, may_inline) = match op {
            KernelOpcode::Send => (WrOpcode::Send, true),
            KernelOpcode::SendWithInv => {
                sqe.rkey = wr.invalidate_rkey();
                (WrOpcode::SendRemoteInv, true)
            }
            KernelOpcode::RdmaWrite => (WrOpcode::Write, true),
            KernelOpcode::RdmaRead | KernelOpcode::RdmaReadWithInv => {
                (read_opcode(who, op, n)?, false)
            }
            KernelOpcode::LocalInv => {
                sqe.rkey = wr.invalidate_rkey();
                sqe.flags = flags;
                sqe.opcode = WrOpcode::InvalStag.raw();
                return Ok(sqe);
            }
            KernelOpcode::RegMr => return reg_mr_sqe(who, wr, sqe, flags),
            KernelOpcode::Other(op) => {
                return Err(invalid(
                    who,
                    format_args!("opcode {op} is not supported on iWARP"),
                ))
            }
        };
        if f.solicited() && opcode != WrOpcode::Write {
            flags |= SOLICITED;
        }
        if let Some((raddr, rkey)) = wr.rdma() {
            sqe.__bindgen_anon_1.raddr = raddr;
            sqe.rkey = rkey;
        }
        let mut sges = [Sge::zeroed(); MAX_SGE as usize];
        if f.inline() && may_inline {
            let len = inline_sges(who, wr, &mut sges)?;
            sqe.num_sge = u8::from(len > 0);
            flags |= INLINE;
        } else {
            copy_sges(&mut sges, wr.sges())
                .ok_or_else(|| invalid(who, format_args!("message longer than 4 GiB")))?;
            sqe.num_sge = n as u8;
        }
        sqe.__bindgen_anon_2.sge = sges;
        sqe.opcode = opcode.raw();
        sqe.flags = flags;
        Ok(sqe)
    }

    /// The SQE flags the send flags `f` give WRs of every opcode: [`SIGNALLED`] (always
    /// on a QP that signals all WRs) and [`READ_FENCE`].
    fn signal_fence_flags(&self, f: SendFlags) -> u16 {
        let mut flags = 0u16;
        if f.signaled() || self.sig_all {
            flags |= SIGNALLED;
        }
        if f.fence() {
            flags |= READ_FENCE;
        }
        flags
    }

    /// `post_send`. Kernel QPs: copies the WRs into the SQ in order (queued in INIT, RTR
    /// and RTS; completed at once with a flush error in ERROR, which `ib_drain_sq` relies
    /// on). User QPs: the doorbell (an empty list); in ERROR it flushes what the user
    /// posted since.
    ///
    /// # Errors
    ///
    /// With the first WR not posted: `EINVAL` in RESET, for a malformed WR (see
    /// [`Qp::build_sqe`]) or for WRs on a user QP;
    /// `ENOMEM` if the SQ is full, or, in ERROR, the send CQ is, or the SQ still holds
    /// WQEs after one batch of their flush.
    pub(super) fn post_send_list<'a>(
        qp: &IbQp<Qp>,
        wrs: WrList<'a, SendWr>,
    ) -> Result<(), PostError<'a, SendWr>> {
        if qp.user {
            return Self::user_doorbell(qp, wrs);
        }
        let who = Who::Qp(qp);
        let (notify, res) = {
            let mut pos = qp.sq_pos.lock();
            let state = qp.state();
            post_each(wrs, |wr| {
                let sqe = match state {
                    State::Reset => Err(invalid(who, format_args!("post_send in RESET"))),
                    _ => qp.build_sqe(who, wr),
                };
                match sqe {
                    Err(e) => (Notify::NONE, Err(e)),
                    Ok(sqe) if state == State::Error => {
                        // Completed at once, after what the SQ still holds (a flush in
                        // progress, or one the full send CQ stopped): one batch of that
                        // first, in this hold; if the SQ is still not empty, the WR is
                        // refused as a full SQ refuses it.
                        let (n, busy) =
                            flush_first(&qp.sq, &mut pos, |p| Self::flush_sq_locked(qp, p));
                        if busy {
                            return (n, Err(ENOMEM));
                        }
                        let opcode = crate::wqe::flush_opcode(sqe.opcode);
                        let (m, r) =
                            complete_flushed(qp.scq(), &Self::flush_cqe(qp, sqe.id, opcode));
                        (n.or(m), r)
                    }
                    Ok(sqe) => {
                        let slot = Sqe { flags: 0, ..sqe };
                        let r = publish(&qp.sq, &mut pos, &slot, sqe.flags | VALID);
                        (Notify::NONE, r)
                    }
                }
            })
        };
        notify.deliver(qp.scq());
        if let Some(c) = Self::conn(qp) {
            c.kick();
        }
        res
    }

    /// `post_send` of a user QP: the doorbell, with an empty WR list. In ERROR it flushes
    /// what the user posted since; in RTS the connection's TX path takes the new SQEs (the
    /// first ones in this syscall); in INIT and RTR they wait for it.
    fn user_doorbell<'a>(
        qp: &IbQp<Qp>,
        wrs: WrList<'a, SendWr>,
    ) -> Result<(), PostError<'a, SendWr>> {
        let who = Who::Qp(qp);
        if !wrs.is_empty() {
            return Err(PostError::at(
                invalid(who, format_args!("user QPs post through the mapped SQ")),
                None,
            ));
        }
        match qp.state() {
            State::Reset => Err(PostError::at(
                invalid(who, format_args!("post_send in RESET")),
                None,
            )),
            State::Error => {
                Self::flush_rest_sq(qp);
                Ok(())
            }
            _ => {
                if let Some(c) = Self::conn(qp) {
                    c.doorbell();
                }
                Ok(())
            }
        }
    }

    /// `post_recv` (kernel QPs with their own RQ): copies the WRs into the RQ in order
    /// (queued in INIT, RTR and RTS; completed at once with a flush error in ERROR).
    ///
    /// # Errors
    ///
    /// With the first WR not posted: `EINVAL` for user QPs (they post through the mapped
    /// RQ), QPs with an SRQ or without RQ, RESET, and malformed WRs; `ENOMEM` if the RQ
    /// is full, or, in ERROR, the receive CQ is, or the RQ still holds WQEs after one
    /// batch of their flush.
    pub(super) fn post_recv_list<'a>(
        qp: &IbQp<Qp>,
        wrs: WrList<'a, RecvWr>,
    ) -> Result<(), PostError<'a, RecvWr>> {
        let who = Who::Qp(qp);
        let first = wrs.clone().next();
        if qp.user {
            return Err(PostError::at(
                invalid(who, format_args!("user QPs post through the mapped RQ")),
                first,
            ));
        }
        let Some(ring) = &qp.rq else {
            return Err(PostError::at(
                invalid(
                    who,
                    format_args!("post_recv on a QP with an SRQ or without RQ"),
                ),
                first,
            ));
        };
        let (notify, res) = {
            let mut pos = qp.rq_pos.lock();
            let state = qp.state();
            post_each(wrs, |wr| {
                let rqe = match state {
                    State::Reset => Err(invalid(who, format_args!("post_recv in RESET"))),
                    _ => build_rqe(wr, qp.caps.recv_sge()).map_err(|e| {
                        invalid(who, format_args!("bad receive WR ({})", e.to_errno()))
                    }),
                };
                match rqe {
                    Err(e) => (Notify::NONE, Err(e)),
                    // As in `post_send_list`.
                    Ok(rqe) if state == State::Error => {
                        let (n, busy) =
                            flush_first(ring, &mut pos, |p| Self::flush_rq_locked(qp, ring, p));
                        if busy {
                            return (n, Err(ENOMEM));
                        }
                        let cqe = Self::flush_cqe(qp, rqe.id, WrOpcode::Receive);
                        let (m, r) = complete_flushed(qp.rcq(), &cqe);
                        (n.or(m), r)
                    }
                    Ok(rqe) => (Notify::NONE, publish(ring, &mut pos, &rqe, VALID)),
                }
            })
        };
        notify.deliver(qp.rcq());
        res
    }
}

/// The opcode of an RDMA READ WR (`op`, with `n` SGEs).
///
/// # Errors
///
/// `EINVAL` unless it has exactly one SGE: an iWARP Read Request carries one sink STag
/// (RFC 5040 §4.4).
fn read_opcode(who: Who<'_>, op: KernelOpcode, n: u32) -> Result<WrOpcode> {
    if n != 1 {
        return Err(invalid(
            who,
            format_args!("RDMA READ with {n} SGEs; iWARP needs exactly 1"),
        ));
    }
    if op == KernelOpcode::RdmaRead {
        Ok(WrOpcode::Read)
    } else {
        Ok(WrOpcode::ReadLocalInv)
    }
}

/// Completes `sqe` (with its ID and `flags`) as the SQE of REG_MR WR `wr`: the new STag in
/// `rkey`, the rights in `access` (the union with the SGEs).
///
/// # Errors
///
/// `EINVAL` for a REG_MR without an MR or with a key that names another MR.
fn reg_mr_sqe(who: Who<'_>, wr: &SendWr, mut sqe: Sqe, flags: u16) -> Result<Sqe> {
    let (lkey, key, access, iova, length) = wr
        .reg()
        .ok_or_else(|| invalid(who, format_args!("REG_MR without an MR")))?;
    if lkey >> 8 != key >> 8 {
        return Err(invalid(
            who,
            format_args!("REG_MR key {key:#x} does not name MR {lkey:#x}"),
        ));
    }
    let length = u32::try_from(length).map_err(|_| {
        invalid(
            who,
            format_args!("REG_MR of {length} octets (4 GiB or more)"),
        )
    })?;
    sqe.rkey = key;
    // The WQE carries the MR's iova and length as of now (see `SendWqe::reg_range`): the
    // tagged offset in `raddr`, the length beside `access` in the first SGE.
    sqe.__bindgen_anon_1.raddr = iova;
    let mut sges = [Sge::zeroed(); MAX_SGE as usize];
    sges[0].laddr = u64::from(access as u32);
    sges[0].length = length;
    sqe.__bindgen_anon_2.sge = sges;
    sqe.flags = flags;
    sqe.opcode = WrOpcode::RegMr.raw();
    Ok(sqe)
}

/// Packs the inline data of WR `wr` into `sges` as the siw ABI has it (the length in
/// `sges[0]`, the data in `sges[1..]`). Returns the length.
///
/// # Errors
///
/// `EINVAL` for inline data beyond [`MAX_INLINE`] octets.
fn inline_sges(who: Who<'_>, wr: &SendWr, sges: &mut [Sge; MAX_SGE as usize]) -> Result<usize> {
    let mut data = [0u8; MAX_INLINE as usize];
    let len = wr.copy_inline(&mut data).map_err(|e| {
        invalid(
            who,
            format_args!("inline data above {MAX_INLINE} octets ({})", e.to_errno()),
        )
    })?;
    pack_inline(sges, &data[..len]);
    sges[0] = Sge {
        laddr: 0,
        length: len as u32,
        lkey: 0,
    };
    Ok(len)
}

/// Publishes `wqe` (its flags zero) in the slot at `pos.put` of `ring` with `flags`
/// (including [`VALID`]).
///
/// # Errors
///
/// `ENOMEM` if the ring is full (that slot is still taken).
fn publish<E: RingElem>(ring: &Ring<E>, pos: &mut Pos, wqe: &E, flags: u16) -> Result {
    let idx = pos.put;
    if ring.flags(idx) != 0 {
        return Err(ENOMEM);
    }
    ring.write(idx, wqe);
    ring.set_flags(idx, flags);
    pos.put = idx.wrapping_add(1);
    Ok(())
}

/// Before a WR posted in ERROR completes at once: flushes one batch of what `ring` (of
/// positions `pos`, held locked) still holds with `flush`, if anything. Returns the
/// notification due and whether the ring still holds a WQE (the WR must not complete
/// before it).
fn flush_first<E: RingElem>(
    ring: &Ring<E>,
    pos: &mut Pos,
    flush: impl FnOnce(&mut Pos) -> (Notify, bool),
) -> (Notify, bool) {
    if ring.flags(pos.get) & VALID == 0 {
        return (Notify::NONE, false);
    }
    let (n, _) = flush(pos);
    (n, ring.flags(pos.get) & VALID != 0)
}

/// Completes a WR posted in ERROR at once into `cq` (`cqe`, a flush error). Returns the
/// notification due, and `ENOMEM` if the CQ is full.
fn complete_flushed(cq: &IbCq<Cq>, cqe: &Cqe) -> (Notify, Result) {
    match Cq::push(cq, cqe) {
        Ok(n) => (n, Ok(())),
        Err(o) => (o.into(), Err(ENOMEM)),
    }
}

/// Posts `wrs` in order with `post`, which returns the notification it made due and
/// whether it posted the WR, until one is not posted: that is the bad WR. Returns the
/// notifications due (deliver them with no QP lock held) and the result.
fn post_each<'a, W>(
    wrs: impl Iterator<Item = &'a W>,
    mut post: impl FnMut(&'a W) -> (Notify, Result),
) -> (Notify, Result<(), PostError<'a, W>>) {
    let mut notify = Notify::NONE;
    for wr in wrs {
        let (n, r) = post(wr);
        notify = notify.or(n);
        if let Err(e) = r {
            return (notify, Err(PostError::at(e, Some(wr))));
        }
    }
    (notify, Ok(()))
}
