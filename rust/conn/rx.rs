// SPDX-License-Identifier: GPL-2.0

//! The receive half of a connection: the socket's data through the protocol core's
//! [`Decoder`], payload placed from the socket buffers straight into registered memory,
//! receives and Reads completed, Read Requests queued for the transmit half.

use super::{wc, Conn, Inner, Piece, Reason};
use crate::device::{Device, Stat};
use crate::engine::ddp_rx::{MemoryLookup, RxEvents, RxState};
use crate::engine::rx_shell::{
    Access, InvalidateCheck, MessageDone, TaggedCheck, TaggedDone, UntaggedCheck,
};
use crate::engine::stream::{PlaceError, PlaceTarget, RxStream};
use crate::mem::access_bits;
use crate::qp::wqe::SendWqe;
use crate::qp::Qp;
use crate::sys::bindings as b;
use crate::sys::ibdev::QpRef;
use crate::sys::kmem::crc32c_kva;
use crate::sys::obj::PdId;
use crate::sys::socket::SkbChunk;
use crate::wire::rdmap::{
    AtomicRequest, AtomicResponse, Opcode, OperationError, RdmapError, ReadRequest,
};
use crate::wire::terminate::{TermCause, Terminate};
use core::cell::{Cell, RefCell};
use kernel::prelude::*;

/// A receive WQE the message on QN 0 is being placed into.
pub(super) struct RxMsg {
    pub(super) id: u64,
    msn: u32,
    pieces: KVec<Piece>,
    total: u64,
}

impl Conn {
    /// Feeds everything the socket holds to the RX decoder.
    pub(super) fn receive(g: &mut Inner) {
        let Inner {
            qp: Some(qp),
            sock: Some(sock),
            rx,
            rx_msg,
            reads_out,
            responses,
            pd,
            rtr_read_out,
            rtr_send_in,
            ..
        } = g
        else {
            return;
        };
        let before = rx.mpa().fpdus();
        let ctx = RxCtx {
            qp,
            pd: *pd,
            msg: RefCell::new(rx_msg.take()),
            reads_out: RefCell::new(reads_out),
            responses: RefCell::new(responses),
            rtr_read: Cell::new(*rtr_read_out),
            rtr_send: Cell::new(*rtr_send_in),
            terminated: Cell::new(false),
        };
        let mut result = Ok(());
        let read = sock.read(false, |chunk| {
            let mut s = ChunkStream {
                chunk,
                pos: 0,
                ctx: &ctx,
            };
            let mut m = RxMem(&ctx);
            let mut e = RxEv(&ctx);
            if let Err(t) = rx.process(&mut s, &mut m, &mut e) {
                if result.is_ok() {
                    result = Err(t);
                }
            }
            chunk.len()
        });
        let peer_term = ctx.terminated.get() || rx.state() == RxState::PeerTerminated;
        *rtr_read_out = ctx.rtr_read.get();
        *rtr_send_in = ctx.rtr_send.get();
        *rx_msg = ctx.msg.into_inner();
        let fpdus = rx.mpa().fpdus().wrapping_sub(before);
        let dev = qp.device();
        dev.count(Stat::RxOctets, read.map_or(0, |n| n as u64));
        dev.count(Stat::RxFpdus, fpdus);
        if peer_term {
            dev.count(Stat::TerminateReceived, 1);
        }
        if fpdus != 0 {
            g.gate_closed = false;
            g.rtr_timer = None;
        }
        if let Err(t) = result {
            if crate::sys::ratelimit() {
                pr_warn!("connection: protocol error, sending TERMINATE ({:?})\n", t);
            }
            g.pending_term = Some(t);
            g.gate_closed = false;
        } else if peer_term {
            if crate::sys::ratelimit() {
                pr_warn!("connection: the peer sent TERMINATE\n");
            }
            Self::close_locked(g, Reason::Terminated);
        }
    }
}

/// What the RX side of one `receive()` shares between the stream, the memory lookup and
/// the event sink the decoder is given.
struct RxCtx<'a> {
    qp: &'a QpRef<Device>,
    pd: PdId,
    msg: RefCell<Option<RxMsg>>,
    reads_out: RefCell<&'a mut KVec<SendWqe>>,
    responses: RefCell<&'a mut KVec<ReadRequest>>,
    /// The zero-length Read RTR is outstanding (see `Inner::rtr_read_out`).
    rtr_read: Cell<bool>,
    /// The zero-length Send RTR is still expected (see `Inner::rtr_send_in`).
    rtr_send: Cell<bool>,
    terminated: Cell<bool>,
}

impl RxCtx<'_> {
    /// Copies `len` octets at `pos` of `chunk` into the pieces from offset `at` on.
    fn place_pieces(
        chunk: &SkbChunk<'_>,
        mut pos: usize,
        pieces: &[Piece],
        mut at: u64,
        mut len: usize,
        mut crc: Option<&mut u32>,
    ) -> Result<(), PlaceError> {
        for p in pieces {
            if len == 0 {
                break;
            }
            let plen = u64::from(p.len);
            if at >= plen {
                at -= plen;
                continue;
            }
            while at < plen && len > 0 {
                let seg = p.mr.range(p.to + at).ok_or(PlaceError)?;
                let n = seg.len().min(plen - at).min(len as u64);
                let dst = seg.prefix(n);
                chunk.copy_to_kva(pos, &dst).map_err(|_| PlaceError)?;
                if let Some(c) = crc.as_deref_mut() {
                    *c = crc32c_kva(*c, &dst);
                }
                pos += n as usize;
                len -= n as usize;
                at += n;
            }
            at = 0;
        }
        if len == 0 {
            Ok(())
        } else {
            Err(PlaceError)
        }
    }
}

/// The decoder's view of one socket buffer chunk.
struct ChunkStream<'a, 'c, 'x> {
    chunk: &'a SkbChunk<'c>,
    pos: usize,
    ctx: &'a RxCtx<'x>,
}

impl RxStream for ChunkStream<'_, '_, '_> {
    fn available(&self) -> usize {
        self.chunk.len() - self.pos
    }

    fn take(&mut self, dst: &mut [u8], crc: Option<&mut u32>) {
        // The decoder never asks for more than `available()`.
        if self.chunk.copy_to(self.pos, dst).is_err() {
            dst.fill(0);
        }
        if let Some(c) = crc {
            *c = crate::sys::crc32c(*c, dst);
        }
        self.pos += dst.len();
    }

    fn place(
        &mut self,
        target: &PlaceTarget,
        len: usize,
        crc: Option<&mut u32>,
    ) -> Result<(), PlaceError> {
        let pos = self.pos;
        self.pos += len;
        match *target {
            PlaceTarget::Tagged { stag, to } => {
                let mr = self
                    .ctx
                    .qp
                    .device()
                    .lookup_stag(stag, self.ctx.pd, 0, to, len as u64)
                    .map_err(|_| PlaceError)?;
                let piece = [Piece {
                    mr,
                    to,
                    len: u32::try_from(len).map_err(|_| PlaceError)?,
                }];
                RxCtx::place_pieces(self.chunk, pos, &piece, 0, len, crc)
            }
            PlaceTarget::Untagged { msn, mo, .. } => {
                let msg = self.ctx.msg.try_borrow().map_err(|_| PlaceError)?;
                match msg.as_ref() {
                    Some(m) if m.msn == msn => {
                        RxCtx::place_pieces(self.chunk, pos, &m.pieces, u64::from(mo), len, crc)
                    }
                    _ => Err(PlaceError),
                }
            }
        }
    }

    fn skip(&mut self, len: usize, crc: Option<&mut u32>) {
        if let Some(c) = crc {
            let mut buf = [0u8; 64];
            let mut done = 0;
            while done < len {
                let n = (len - done).min(buf.len());
                if self.chunk.copy_to(self.pos + done, &mut buf[..n]).is_err() {
                    break;
                }
                *c = crate::sys::crc32c(*c, &buf[..n]);
                done += n;
            }
        }
        self.pos += len;
    }
}

/// The decoder's questions about memory and receive buffers.
struct RxMem<'a, 'x>(&'a RxCtx<'x>);

impl MemoryLookup for RxMem<'_, '_> {
    fn check_tagged(
        &mut self,
        stag: u32,
        to: u64,
        len: u32,
        access: Access,
    ) -> Result<(), TaggedCheck> {
        // A tagged first FPDU: whatever the Initiator sent, it was not the Send RTR.
        self.0.rtr_send.set(false);
        self.0
            .qp
            .device()
            .lookup_stag(stag, self.0.pd, access_bits(access), to, u64::from(len))
            .map(|_| ())
    }

    fn check_untagged(
        &mut self,
        qn: u32,
        msn: u32,
        mo: u32,
        len: u32,
    ) -> Result<(), UntaggedCheck> {
        if qn != 0 {
            return Err(UntaggedCheck::NoBuffer);
        }
        if self.0.rtr_send.get() {
            if self.0.is_send_rtr(msn, mo, len) {
                // Completed by `message_done` without a receive WQE.
                return Ok(());
            }
            // The first message is not the negotiated RTR: it is the ULP's (RFC 6581
            // does not say more; like the C siw, rsiw takes it as it comes).
            self.0.rtr_send.set(false);
        }
        // Never borrowed twice (the decoder calls one hook at a time); `try_borrow_mut`
        // keeps the panic path out of the RX path all the same.
        let mut cur = self
            .0
            .msg
            .try_borrow_mut()
            .map_err(|_| UntaggedCheck::NoBuffer)?;
        if cur.as_ref().is_none_or(|m| m.msn != msn) {
            if let Some(old) = cur.take() {
                // A message that never completed: the decoder moved on (not reached with
                // a well-formed stream, which completes each message before the next).
                Qp::complete_recv(
                    self.0.qp.qp(),
                    old.id,
                    wc(b::siw_wc_status_SIW_WC_GENERAL_ERR),
                    0,
                    None,
                    false,
                );
            }
            *cur = Some(self.0.take_rqe(msn)?);
        }
        let m = cur.as_ref().ok_or(UntaggedCheck::NoBuffer)?;
        let end = u64::from(mo) + u64::from(len);
        if u64::from(mo) > m.total {
            return Err(UntaggedCheck::InvalidMo);
        }
        if end > m.total {
            return Err(UntaggedCheck::TooLong);
        }
        Ok(())
    }

    fn check_invalidate(&mut self, stag: u32) -> Result<(), InvalidateCheck> {
        self.0.qp.device().check_invalidate(stag, self.0.pd)
    }
}

impl RxCtx<'_> {
    /// Whether an untagged segment (QN 0) at `msn`/`mo` of `len` octets is the zero-length
    /// Send RTR: the first Send (MSN 1, RFC 5041 §5.1), empty and in one segment.
    fn is_send_rtr(&self, msn: u32, mo: u32, len: u32) -> bool {
        msn == 1 && mo == 0 && len == 0
    }

    /// Takes the next receive WQE for message `msn` and resolves its SGEs for local write.
    fn take_rqe(&self, msn: u32) -> Result<RxMsg, UntaggedCheck> {
        let qp = self.qp.qp();
        let w = match Qp::take_rqe(qp) {
            None => return Err(UntaggedCheck::NoBuffer),
            Some(Err(bad)) => {
                Qp::complete_recv(
                    qp,
                    bad.id,
                    wc(b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR),
                    0,
                    None,
                    false,
                );
                return Err(UntaggedCheck::NoBuffer);
            }
            Some(Ok(w)) => w,
        };
        let mut pieces = KVec::new();
        let mut total = 0u64;
        let need = access_bits(Access::LocalWrite);
        for s in w.sges() {
            if s.length == 0 {
                continue;
            }
            let mr = match self.qp.device().lookup_stag(
                s.lkey,
                self.pd,
                need,
                s.laddr,
                u64::from(s.length),
            ) {
                Ok(mr) => mr,
                Err(_) => {
                    Qp::complete_recv(
                        qp,
                        w.id,
                        wc(b::siw_wc_status_SIW_WC_LOC_PROT_ERR),
                        0,
                        None,
                        false,
                    );
                    return Err(UntaggedCheck::NoBuffer);
                }
            };
            if pieces
                .push(
                    Piece {
                        mr,
                        to: s.laddr,
                        len: s.length,
                    },
                    GFP_ATOMIC,
                )
                .is_err()
            {
                Qp::complete_recv(
                    qp,
                    w.id,
                    wc(b::siw_wc_status_SIW_WC_GENERAL_ERR),
                    0,
                    None,
                    false,
                );
                return Err(UntaggedCheck::NoBuffer);
            }
            total += u64::from(s.length);
        }
        Ok(RxMsg {
            id: w.id,
            msn,
            pieces,
            total,
        })
    }
}

/// The decoder's completions and requests.
struct RxEv<'a, 'x>(&'a RxCtx<'x>);

impl RxEvents for RxEv<'_, '_> {
    fn message_done(&mut self, msg: &MessageDone) -> Result<(), TermCause> {
        let qp = self.0.qp.qp();
        if self.0.rtr_send.get() {
            self.0.rtr_send.set(false);
            if self.0.is_send_rtr(msg.msn, 0, msg.len) {
                // The Send RTR (see `check_untagged`): nothing to complete. An Invalidate
                // variant was checked by `check_invalidate` and is honoured.
                if let Some(stag) = msg.inval_stag {
                    let _ = self.0.qp.device().invalidate_stag(stag, self.0.pd);
                }
                return Ok(());
            }
        }
        let Some(m) = self.0.msg.try_borrow_mut().ok().and_then(|mut m| m.take()) else {
            return Err(TermCause::rdmap(RdmapError::LocalCatastrophic));
        };
        if let Some(stag) = msg.inval_stag {
            // Accepted by `check_invalidate`; a concurrent local invalidation wins.
            let _ = self.0.qp.device().invalidate_stag(stag, self.0.pd);
        }
        Qp::complete_recv(
            qp,
            m.id,
            wc(b::siw_wc_status_SIW_WC_SUCCESS),
            msg.len,
            msg.inval_stag,
            msg.solicited,
        );
        Ok(())
    }

    fn tagged_done(&mut self, done: &TaggedDone) -> Result<(), TermCause> {
        if done.opcode != Opcode::ReadResponse {
            return Ok(());
        }
        if self.0.rtr_read.get() {
            // The answer to the RTR, sent before any ULP Read (RFC 6581 §5).
            self.0.rtr_read.set(false);
            return Ok(());
        }
        let mut reads = self
            .0
            .reads_out
            .try_borrow_mut()
            .map_err(|_| TermCause::rdmap(RdmapError::LocalCatastrophic))?;
        if reads.is_empty() {
            // A Read Response nobody asked for (RFC 5040 §7.2: unexpected opcode).
            return Err(TermCause::rdmap(RdmapError::RemoteOperation(
                OperationError::UnexpectedOpcode,
            )));
        }
        let w = reads
            .remove(0)
            .map_err(|_| TermCause::rdmap(RdmapError::LocalCatastrophic))?;
        let qp = self.0.qp.qp();
        if u32::from(w.opcode) == b::siw_opcode_SIW_OP_READ_LOCAL_INV {
            if let [sge] = w.sges() {
                let _ = self.0.qp.device().invalidate_stag(sge.lkey, self.0.pd);
            }
        }
        let len = w.sges().first().map_or(0, |s| s.length);
        Qp::complete_send(qp, &w, wc(b::siw_wc_status_SIW_WC_SUCCESS), len);
        Ok(())
    }

    fn read_request(&mut self, req: &ReadRequest) -> Result<(), TermCause> {
        self.0.rtr_send.set(false);
        // The decoder enforces IRD; capacity for IRD requests was reserved.
        self.0
            .responses
            .try_borrow_mut()
            .map_err(|_| TermCause::rdmap(RdmapError::LocalCatastrophic))?
            .push(*req, GFP_ATOMIC)
            .map_err(|_| TermCause::rdmap(RdmapError::LocalCatastrophic))
    }

    fn atomic_request(&mut self, _req: &AtomicRequest) -> Result<(), TermCause> {
        // Not reached: the decoder runs without RFC 7306 opcodes.
        Err(TermCause::rdmap(RdmapError::RemoteOperation(
            OperationError::UnexpectedOpcode,
        )))
    }

    fn atomic_response(&mut self, _resp: &AtomicResponse) -> Result<(), TermCause> {
        Err(TermCause::rdmap(RdmapError::RemoteOperation(
            OperationError::UnexpectedOpcode,
        )))
    }

    fn terminate_received(&mut self, _term: Option<&Terminate>) {
        self.0.terminated.set(true);
    }
}
