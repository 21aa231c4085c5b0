// SPDX-License-Identifier: GPL-2.0

//! The posting verbs: kernel consumers' work requests become ring slots in the same
//! format user space writes (so the TX and RX paths see one kind of WQE), and the user
//! doorbell.

use super::state::State;
use super::{invalid, Qp, INLINE, MAX_INLINE, MAX_SGE, READ_FENCE, SIGNALLED, SOLICITED, VALID};
use crate::abi::WrOpcode;
use crate::cq::{Cq, Notify};
use crate::sys::bindings as b;
use crate::sys::obj::IbQp;
use crate::sys::wr::{PostError, RecvWr, SendWr, WrList};
use crate::sys::Pod;
use kernel::prelude::*;

/// Builds a receive WQE from a kernel consumer's WR (QPs and SRQs) with at most `max_sge`
/// SGEs. The flags stay zero: the caller publishes the slot.
///
/// # Errors
///
/// `EINVAL` for a negative or too large SGE count, or SGE lengths summing beyond 4 GiB.
pub(crate) fn build_rqe(wr: &RecvWr, max_sge: u32) -> Result<b::siw_rqe> {
    let n = u32::try_from(wr.num_sge()).map_err(|_| EINVAL)?;
    if n > max_sge {
        return Err(EINVAL);
    }
    let mut rqe = b::siw_rqe::zeroed();
    rqe.id = wr.wr_id();
    rqe.num_sge = n as u8;
    let mut total = 0u32;
    for (d, s) in rqe.sge.iter_mut().zip(wr.sges()) {
        total = total.checked_add(s.length).ok_or(EINVAL)?;
        *d = b::siw_sge {
            laddr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok(rqe)
}

/// Packs `data` (at most [`MAX_INLINE`] octets) into `sge[1..]` in memory order, as the
/// siw library does with `memcpy`.
pub(super) fn pack_inline(sges: &mut [b::siw_sge; MAX_SGE as usize], data: &[u8]) {
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
        sges[k + 1] = b::siw_sge {
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
    fn build_sqe(&self, qpn: u32, wr: &SendWr) -> Result<b::siw_sqe> {
        let n = u32::try_from(wr.num_sge())
            .map_err(|_| invalid(qpn, format_args!("negative num_sge")))?;
        if n > self.caps.send_sge {
            return Err(invalid(
                qpn,
                format_args!("{n} SGEs, at most {}", self.caps.send_sge),
            ));
        }
        let mut sqe = b::siw_sqe::zeroed();
        sqe.id = wr.wr_id();
        let f = wr.send_flags();
        let mut flags = 0u16;
        if f & b::ib_send_flags_IB_SEND_SIGNALED as u32 != 0 || self.sig_all {
            flags |= SIGNALLED;
        }
        if f & b::ib_send_flags_IB_SEND_FENCE as u32 != 0 {
            flags |= READ_FENCE;
        }
        let op = wr.opcode();
        let (opcode, may_inline) = match op {
            b::ib_wr_opcode_IB_WR_SEND => (WrOpcode::Send, true),
            b::ib_wr_opcode_IB_WR_SEND_WITH_INV => {
                sqe.rkey = wr.invalidate_rkey();
                (WrOpcode::SendRemoteInv, true)
            }
            b::ib_wr_opcode_IB_WR_RDMA_WRITE => (WrOpcode::Write, true),
            b::ib_wr_opcode_IB_WR_RDMA_READ | b::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV => {
                // An iWARP Read Request carries one sink STag (RFC 5040 §4.4).
                if n != 1 {
                    return Err(invalid(
                        qpn,
                        format_args!("RDMA READ with {n} SGEs; iWARP needs exactly 1"),
                    ));
                }
                if op == b::ib_wr_opcode_IB_WR_RDMA_READ {
                    (WrOpcode::Read, false)
                } else {
                    (WrOpcode::ReadLocalInv, false)
                }
            }
            b::ib_wr_opcode_IB_WR_LOCAL_INV => {
                sqe.rkey = wr.invalidate_rkey();
                sqe.flags = flags;
                sqe.opcode = WrOpcode::InvalStag.raw();
                return Ok(sqe);
            }
            b::ib_wr_opcode_IB_WR_REG_MR => {
                let (lkey, key, access) = wr
                    .reg()
                    .ok_or_else(|| invalid(qpn, format_args!("REG_MR without an MR")))?;
                if lkey >> 8 != key >> 8 {
                    return Err(invalid(
                        qpn,
                        format_args!("REG_MR key {key:#x} does not name MR {lkey:#x}"),
                    ));
                }
                // The new STag in `rkey`, the rights in `access` (the union with the SGEs).
                sqe.rkey = key;
                sqe.__bindgen_anon_2.access = u64::from(access as u32);
                sqe.flags = flags;
                sqe.opcode = WrOpcode::RegMr.raw();
                return Ok(sqe);
            }
            _ => {
                return Err(invalid(
                    qpn,
                    format_args!("opcode {op} is not supported on iWARP"),
                ))
            }
        };
        if f & b::ib_send_flags_IB_SEND_SOLICITED as u32 != 0 && opcode != WrOpcode::Write {
            flags |= SOLICITED;
        }
        if let Some((raddr, rkey)) = wr.rdma() {
            sqe.__bindgen_anon_1.raddr = raddr;
            sqe.rkey = rkey;
        }
        let mut sges = [b::siw_sge::zeroed(); MAX_SGE as usize];
        if f & b::ib_send_flags_IB_SEND_INLINE as u32 != 0 && may_inline {
            let mut data = [0u8; MAX_INLINE as usize];
            let len = wr.copy_inline(&mut data).map_err(|e| {
                invalid(
                    qpn,
                    format_args!("inline data above {MAX_INLINE} octets ({})", e.to_errno()),
                )
            })?;
            pack_inline(&mut sges, &data[..len]);
            sges[0] = b::siw_sge {
                laddr: 0,
                length: len as u32,
                lkey: 0,
            };
            sqe.num_sge = u8::from(len > 0);
            flags |= INLINE;
        } else {
            let mut total = 0u32;
            for (d, s) in sges.iter_mut().zip(wr.sges()) {
                total = total
                    .checked_add(s.length)
                    .ok_or_else(|| invalid(qpn, format_args!("message longer than 4 GiB")))?;
                *d = b::siw_sge {
                    laddr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                };
            }
            sqe.num_sge = n as u8;
        }
        sqe.__bindgen_anon_2.sge = sges;
        sqe.opcode = opcode.raw();
        sqe.flags = flags;
        Ok(sqe)
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
    /// `ENOMEM` if the SQ (or, in ERROR, the CQ) is full.
    pub(crate) fn post_send<'a>(
        qp: &IbQp<Qp>,
        wrs: WrList<'a, SendWr>,
    ) -> Result<(), PostError<'a, SendWr>> {
        let qpn = qp.qpn();
        if qp.user {
            if !wrs.is_empty() {
                return Err(PostError::at(
                    invalid(qpn, format_args!("user QPs post through the mapped SQ")),
                    None,
                ));
            }
            return match qp.state() {
                State::Reset => Err(PostError::at(
                    invalid(qpn, format_args!("post_send in RESET")),
                    None,
                )),
                State::Error => {
                    let n = Self::flush_sq_locked(qp, &mut qp.sq_pos.lock());
                    n.deliver(&qp.scq);
                    Ok(())
                }
                // In RTS the connection's TX path takes the new SQEs (the first ones in
                // this syscall); in INIT and RTR they wait for it.
                _ => {
                    if let Some(c) = Self::conn(qp) {
                        c.doorbell();
                    }
                    Ok(())
                }
            };
        }
        let mut notify = Notify::NONE;
        let mut res = Ok(());
        {
            let mut pos = qp.sq_pos.lock();
            let state = qp.state();
            for wr in wrs {
                if state == State::Reset {
                    res = Err(PostError::at(
                        invalid(qpn, format_args!("post_send in RESET")),
                        Some(wr),
                    ));
                    break;
                }
                let sqe = match qp.build_sqe(qpn, wr) {
                    Ok(s) => s,
                    Err(e) => {
                        res = Err(PostError::at(e, Some(wr)));
                        break;
                    }
                };
                if state == State::Error {
                    // The SQ is empty in ERROR (entering it flushed), so this keeps order.
                    match Cq::push(
                        &qp.scq,
                        &Self::flush_cqe(qp, sqe.id, super::wqe::flush_opcode(sqe.opcode)),
                    ) {
                        Ok(n) => notify = notify.or(n),
                        Err(o) => {
                            notify = notify.or(o.into());
                            res = Err(PostError::at(ENOMEM, Some(wr)));
                            break;
                        }
                    }
                    continue;
                }
                let idx = pos.put;
                if qp.sq.flags(idx) != 0 {
                    res = Err(PostError::at(ENOMEM, Some(wr)));
                    break;
                }
                let flags = sqe.flags | VALID;
                qp.sq.write(idx, &b::siw_sqe { flags: 0, ..sqe });
                qp.sq.set_flags(idx, flags);
                pos.put = idx.wrapping_add(1);
            }
        }
        notify.deliver(&qp.scq);
        if let Some(c) = Self::conn(qp) {
            c.kick();
        }
        res
    }

    /// `post_recv` (kernel QPs with their own RQ): copies the WRs into the RQ in order
    /// (queued in INIT, RTR and RTS; completed at once with a flush error in ERROR).
    ///
    /// # Errors
    ///
    /// With the first WR not posted: `EINVAL` for user QPs (they post through the mapped
    /// RQ), QPs with an SRQ or without RQ, RESET, and malformed WRs; `ENOMEM` if the RQ
    /// (or, in ERROR, the CQ) is full.
    pub(crate) fn post_recv<'a>(
        qp: &IbQp<Qp>,
        wrs: WrList<'a, RecvWr>,
    ) -> Result<(), PostError<'a, RecvWr>> {
        let qpn = qp.qpn();
        let first = wrs.clone().next();
        if qp.user {
            return Err(PostError::at(
                invalid(qpn, format_args!("user QPs post through the mapped RQ")),
                first,
            ));
        }
        let Some(ring) = &qp.rq else {
            return Err(PostError::at(
                invalid(
                    qpn,
                    format_args!("post_recv on a QP with an SRQ or without RQ"),
                ),
                first,
            ));
        };
        let mut notify = Notify::NONE;
        let mut res = Ok(());
        {
            let mut pos = qp.rq_pos.lock();
            let state = qp.state();
            for wr in wrs {
                if state == State::Reset {
                    res = Err(PostError::at(
                        invalid(qpn, format_args!("post_recv in RESET")),
                        Some(wr),
                    ));
                    break;
                }
                let rqe = match build_rqe(wr, qp.caps.recv_sge) {
                    Ok(r) => r,
                    Err(e) => {
                        let e = invalid(qpn, format_args!("bad receive WR ({})", e.to_errno()));
                        res = Err(PostError::at(e, Some(wr)));
                        break;
                    }
                };
                if state == State::Error {
                    match Cq::push(&qp.rcq, &Self::flush_cqe(qp, rqe.id, WrOpcode::Receive)) {
                        Ok(n) => notify = notify.or(n),
                        Err(o) => {
                            notify = notify.or(o.into());
                            res = Err(PostError::at(ENOMEM, Some(wr)));
                            break;
                        }
                    }
                    continue;
                }
                let idx = pos.put;
                if ring.flags(idx) != 0 {
                    res = Err(PostError::at(ENOMEM, Some(wr)));
                    break;
                }
                ring.write(idx, &rqe);
                ring.set_flags(idx, VALID);
                pos.put = idx.wrapping_add(1);
            }
        }
        notify.deliver(&qp.rcq);
        res
    }
}
