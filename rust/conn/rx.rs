// SPDX-License-Identifier: GPL-2.0

//! The receive half of a connection: the socket's data through the protocol core's
//! [`Session`], payload placed from the socket buffers straight into registered memory
//! where the session's decoder validated it, receives and Reads completed.
//!
//! It runs in the socket's data-ready callback ([`Conn::receive`] with [`SockLock::Held`]): in
//! softirq, or in the process context of whoever releases the socket lock (TCP then processes its
//! backlog), and from the work item (which locks the socket) for data that arrived before the
//! callback was attached. Its state, [`RxSide`], sits under a spinlock held with softirqs off
//! ([`crate::sys::bhlock::SpinLockBh`]: interrupts stay on while payload is copied under it),
//! taken per socket buffer chunk: never held across a call into the socket layer by the transmit
//! half, which takes it briefly for what the two share. Nothing here sleeps or allocates with
//! `GFP_KERNEL`.

use super::{Conn, ResolvedSge, SgeList};
use crate::abi::{access, WcStatus};
use crate::device::{Device, Stat};
use crate::engine::ddp_rx::MemoryLookup;
use crate::engine::orq::{Orq, OrqEntry};
use crate::engine::ring::Store;
use crate::engine::rx_shell::{
    Access, InvalidateCheck, MessageDone, TaggedCheck, TaggedDone, UntaggedCheck,
};
use crate::engine::session::irq::{self, Irq};
use crate::engine::session::{Close, Session, SessionEvents, SessionState};
use crate::engine::stream::{PlaceError, PlaceTarget, RxStream};
use crate::logtag::{CauseText, KeptTag};
use crate::qp::Qp;
use crate::stag::{access_bits, InUse, MrRef};
use crate::sys::ibdev::QpRef;
use crate::sys::net::socket::{SkbChunk, SockLock, SockOps};
use crate::sys::obj::PdId;
use crate::sys::pr_warn_ratelimited;
use crate::wire::rdmap::{RdmapError, ReadRequest};
use crate::wire::terminate::TermCause;
use crate::wqe::SendDone;
use core::cell::RefCell;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// The slots of one of the session's request queues, allocated for the connection's
/// depth.
pub(crate) struct QueueSlots<T>(KVec<T>);

impl<T: Clone> QueueSlots<T> {
    /// `n` slots holding `fill`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    fn new(fill: T, n: usize) -> Result<Self> {
        Ok(Self(KVec::from_elem(fill, n, GFP_KERNEL)?))
    }
}

impl<T> AsRef<[T]> for QueueSlots<T> {
    fn as_ref(&self) -> &[T] {
        &self.0
    }
}

impl<T> AsMut<[T]> for QueueSlots<T> {
    fn as_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T> core::fmt::Debug for QueueSlots<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} slots", self.0.len())
    }
}

/// The storage of a connection's session queues: an ORQ of ORD + 1 and an IRQ of IRD + 1
/// slots (one each for a zero-length Read RTR, RFC 6581 §5), allocated when the
/// connection is.
#[derive(Debug)]
pub(crate) struct ConnQueues;

impl Store for ConnQueues {
    type Orq = QueueSlots<OrqEntry>;
    type Irq = QueueSlots<ReadRequest>;
}

/// An idle session whose queues serve inbound and outbound Read depths `ird` and `ord`
/// ([`Session::start`] starts it).
///
/// # Errors
///
/// `ENOMEM`.
pub(super) fn idle_session(ird: u32, ord: u32) -> Result<Session<ConnQueues>> {
    let slots = |depth: u32| {
        usize::try_from(depth)
            .map_err(|_| EINVAL)?
            .checked_add(1)
            .ok_or(EINVAL)
    };
    Ok(Session::idle(
        Orq::with_slots(QueueSlots::new(OrqEntry::EMPTY, slots(ord)?)?),
        Irq::with_slots(QueueSlots::new(irq::EMPTY_SLOT, slots(ird)?)?),
    ))
}

/// A receive WQE the message on QN 0 is being placed into.
pub(super) struct RxMsg {
    pub(super) id: u64,
    msn: u32,
    pieces: SgeList,
    total: u64,
}

/// The receive half's state (see the module documentation), and what it shares with the
/// transmit half.
pub(super) struct RxSide {
    /// The QP placed into and completed on; `None` once the connection closed (data that
    /// still arrives is dropped).
    pub(super) qp: Option<QpRef<Device>>,
    pub(super) pd: PdId,
    /// The RDMAP session: the transmit half polls it for what to send next.
    pub(super) session: Session<ConnQueues>,
    pub(super) msg: Option<RxMsg>,
    /// What completing the ULP's RDMA Reads the session admitted needs (their ORQ
    /// entries hold their sinks, in the same order), oldest first. Capacity for ORD
    /// entries is reserved.
    pub(super) reads_out: KVec<SendDone>,
}

impl Conn {
    /// Feeds what the socket holds to the session, chunk by chunk, each under the receive
    /// lock. [`SockLock::Held`]: called from the socket's data-ready callback (the socket is
    /// locked by the receive path); with [`SockLock::Take`] it is locked here, which may
    /// sleep. Returns whether the transmit half has new work (see [`Session::handle_rx`]).
    pub(super) fn receive(&self, sock: &SockOps, lock: SockLock) -> bool {
        let mut wake = false;
        let now = self.now_ms();
        let _ = sock.read(lock, |chunk| {
            self.rx_octets
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            let mut r = self.rx.lock();
            wake |= r.process(chunk, now, &self.tag);
            self.reads_outstanding
                .store(!r.reads_out.is_empty(), Ordering::Relaxed);
            chunk.len()
        });
        wake
    }
}

impl RxSide {
    /// Processes one chunk of the stream at time `now` (ms; all of it: after an error the
    /// session discards input); returns whether the transmit half has new work. `tag`
    /// starts the connection's kernel messages.
    fn process(&mut self, chunk: &SkbChunk<'_>, now: u64, tag: &KeptTag) -> bool {
        let RxSide {
            qp: Some(qp),
            pd,
            session,
            msg,
            reads_out,
        } = self
        else {
            return false;
        };
        let before = session.decoder().mpa().fpdus();
        let wake = {
            let ctx = RxCtx {
                qp,
                pd: *pd,
                msg: RefCell::new(msg),
                reads_out: RefCell::new(&mut *reads_out),
            };
            let mut s = ChunkStream::new(chunk, &ctx);
            session.handle_rx(&mut s, &mut RxMem(&ctx), &mut RxEv(&ctx), now)
        };
        let fpdus = session.decoder().mpa().fpdus().wrapping_sub(before);
        let dev = qp.device();
        dev.count(Stat::RxOctets, chunk.len() as u64);
        dev.count(Stat::RxFpdus, fpdus);
        if let (true, SessionState::Closed(Close::PeerTerminated(t))) = (wake, session.state()) {
            match t {
                Some(t) => {
                    pr_warn_ratelimited!(
                        "{tag}: the peer sent TERMINATE: {}\n",
                        CauseText(t.cause)
                    );
                    dev.count_terminate(t.cause.layer, false);
                }
                None => {
                    pr_warn_ratelimited!("{tag}: the peer sent a TERMINATE that does not decode\n");
                    dev.count(Stat::TerminateReceived, 1);
                }
            }
        }
        wake
    }
}

/// What the RX side of one chunk's processing shares between the stream, the memory lookup and
/// the event sink the decoder is given.
struct RxCtx<'a> {
    qp: &'a QpRef<Device>,
    pd: PdId,
    msg: RefCell<&'a mut Option<RxMsg>>,
    reads_out: RefCell<&'a mut KVec<SendDone>>,
}

impl RxCtx<'_> {
    /// Copies `len` octets at `pos` of `chunk` into the pieces from offset `at` on; a
    /// piece is a region, the tagged offset it starts at, its length in octets, and, for
    /// a receive WQE's SGE, the STag it named: such a piece is checked again (valid, same
    /// key, PD `pd`, local write, bounds) under an [`InUse`] guard held while its octets
    /// are copied, so that an invalidation or deregistration of a receive buffer that
    /// returned is never followed by a write into it. A piece without a STag is guarded by
    /// the caller.
    ///
    /// # Errors
    ///
    /// [`PlaceError::Failed`] if a piece fails its check or cannot be written, or the
    /// pieces are shorter than `at + len`.
    fn place_pieces<'p>(
        chunk: &SkbChunk<'_>,
        mut pos: usize,
        pieces: impl Iterator<Item = (&'p MrRef, u64, u32, Option<u32>)>,
        pd: PdId,
        mut at: u64,
        mut len: usize,
        mut crc: Option<&mut u32>,
    ) -> Result<(), PlaceError> {
        for (mr, to, plen, stag) in pieces {
            if len == 0 {
                break;
            }
            let plen = u64::from(plen);
            if at >= plen {
                at -= plen;
                continue;
            }
            let _guard = match stag {
                Some(stag) => {
                    let n = (plen - at).min(len as u64);
                    Some(
                        InUse::take(mr, stag, pd, access::LOCAL_WRITE, to + at, n)
                            .map_err(|_| PlaceError::Failed)?,
                    )
                }
                None => None,
            };
            while at < plen && len > 0 {
                let seg = mr.resolve(to + at).ok_or(PlaceError::Failed)?;
                let n = seg.len().min(plen - at).min(len as u64);
                let dst = seg.prefix(n);
                chunk
                    .copy_to_kva(pos, &dst)
                    .map_err(|_| PlaceError::Failed)?;
                // Over the octets received, not over `dst`: the region's owner, or another
                // connection placing into it, may write there at any time.
                if let Some(c) = crc.as_deref_mut() {
                    *c = chunk
                        .crc32c(pos, n as usize, *c)
                        .map_err(|_| PlaceError::Failed)?;
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
            Err(PlaceError::Failed)
        }
    }
}

/// Octets of a chunk [`ChunkStream`] copies at once for the decoder's small reads: the
/// MPA, DDP and RDMAP headers of an FPDU, and its pad and CRC with the next FPDU's
/// headers, come out of the socket buffer in one copy, not one per field.
const WINDOW: usize = 64;

/// The decoder's view of one socket buffer chunk.
struct ChunkStream<'a, 'c, 'x> {
    chunk: &'a SkbChunk<'c>,
    pos: usize,
    ctx: &'a RxCtx<'x>,
    /// A copy of `win_len` octets of the chunk from `win_at`.
    win: [u8; WINDOW],
    win_at: usize,
    win_len: usize,
}

impl<'a, 'c, 'x> ChunkStream<'a, 'c, 'x> {
    fn new(chunk: &'a SkbChunk<'c>, ctx: &'a RxCtx<'x>) -> Self {
        Self {
            chunk,
            pos: 0,
            ctx,
            win: [0; WINDOW],
            win_at: 0,
            win_len: 0,
        }
    }

    /// Copies `dst.len()` octets at the current position into `dst`, through the window
    /// when they fit in it.
    fn copy_out(&mut self, dst: &mut [u8]) -> Result {
        let (pos, n) = (self.pos, dst.len());
        if n > WINDOW {
            return self.chunk.copy_to(pos, dst);
        }
        if pos < self.win_at || pos + n > self.win_at + self.win_len {
            let len = self.chunk.len().saturating_sub(pos).min(WINDOW);
            if len < n {
                return Err(EFAULT);
            }
            self.chunk.copy_to(pos, &mut self.win[..len])?;
            self.win_at = pos;
            self.win_len = len;
        }
        let from = pos - self.win_at;
        dst.copy_from_slice(&self.win[from..from + n]);
        Ok(())
    }
}

impl RxStream for ChunkStream<'_, '_, '_> {
    fn available(&self) -> usize {
        self.chunk.len() - self.pos
    }

    fn take(&mut self, dst: &mut [u8], crc: Option<&mut u32>) {
        // The decoder never asks for more than `available()`.
        if self.copy_out(dst).is_err() {
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
            PlaceTarget::Tagged { stag, to, access } => {
                // Resolved again with the right the engine validated: an MR deregistered,
                // invalidated or re-registered with fewer rights since is not written, and
                // the engine terminates with the check's tagged buffer error. The guard
                // holds off an invalidation until the copy is done (`crate::stag`).
                let mr = self
                    .ctx
                    .qp
                    .device()
                    .stags
                    .lookup_to_place(stag, self.ctx.pd, access_bits(access), to, len as u64)
                    .map_err(PlaceError::Tagged)?;
                let plen = u32::try_from(len).map_err(|_| PlaceError::Failed)?;
                RxCtx::place_pieces(
                    self.chunk,
                    pos,
                    core::iter::once((mr.region(), to, plen, None)),
                    self.ctx.pd,
                    0,
                    len,
                    crc,
                )
            }
            PlaceTarget::Untagged { msn, mo, .. } => {
                let msg = self.ctx.msg.try_borrow().map_err(|_| PlaceError::Failed)?;
                match msg.as_ref() {
                    Some(m) if m.msn == msn => RxCtx::place_pieces(
                        self.chunk,
                        pos,
                        m.pieces.iter().map(|p| (&p.mr, p.to, p.len, Some(p.stag))),
                        self.ctx.pd,
                        u64::from(mo),
                        len,
                        crc,
                    ),
                    _ => Err(PlaceError::Failed),
                }
            }
        }
    }

    fn peek(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.available()).min(WINDOW);
        let Some(d) = dst.get_mut(..n) else {
            return 0;
        };
        if self.copy_out(d).is_ok() {
            n
        } else {
            0
        }
    }

    fn skip(&mut self, len: usize, crc: Option<&mut u32>) {
        if let Some(c) = crc {
            // The decoder never skips more than `available()`.
            if let Ok(v) = self.chunk.crc32c(self.pos, len, *c) {
                *c = v;
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
        self.0
            .qp
            .device()
            .stags
            .lookup(stag, self.0.pd, access_bits(access), to, u64::from(len))
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
                Qp::complete_recv(self.0.qp.qp(), old.id, WcStatus::GeneralErr, 0, None, false);
            }
            self.0.take_rqe(msn, &mut cur)?;
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
        self.0.qp.device().stags.check_invalidate(stag, self.0.pd)
    }
}

impl RxCtx<'_> {
    /// Takes the next receive WQE for message `msn` into `cur` (empty), its SGEs resolved
    /// for local write; `cur` stays empty on failure. Built in place: the message is not
    /// moved again until it completes.
    fn take_rqe(&self, msn: u32, cur: &mut Option<RxMsg>) -> Result<(), UntaggedCheck> {
        let qp = self.qp.qp();
        // A receive WQE that cannot take the message completes with `status`; the
        // message then has no buffer (the decoder's TERMINATE, RFC 5040 §7.1).
        let fail = |id: u64, status: WcStatus| {
            Qp::complete_recv(qp, id, status, 0, None, false);
            UntaggedCheck::NoBuffer
        };
        let w = match Qp::take_rqe(qp) {
            None => return Err(UntaggedCheck::NoBuffer),
            Some(Err(bad)) => return Err(fail(bad.id, WcStatus::LocQpOpErr)),
            Some(Ok(w)) => w,
        };
        let m = cur.insert(RxMsg {
            id: w.id,
            msn,
            pieces: SgeList::new(),
            total: 0,
        });
        let need = access_bits(Access::LocalWrite);
        for s in w.sges().iter().filter(|s| s.length != 0) {
            let piece = self
                .qp
                .device()
                .stags
                .lookup(s.lkey, self.pd, need, s.laddr, u64::from(s.length))
                .map(|mr| ResolvedSge {
                    mr,
                    stag: s.lkey,
                    to: s.laddr,
                    len: s.length,
                })
                .map_err(|_| WcStatus::LocProtErr)
                // A receive WQE has at most `MAX_SGE` SGEs (`decode_rqe`, `build_rqe`).
                .and_then(|p| {
                    m.pieces
                        .push(p, GFP_ATOMIC)
                        .map_err(|_| WcStatus::GeneralErr)
                });
            if let Err(status) = piece {
                *cur = None;
                return Err(fail(w.id, status));
            }
            m.total += u64::from(s.length);
        }
        Ok(())
    }
}

/// The session's completions.
struct RxEv<'a, 'x>(&'a RxCtx<'x>);

impl SessionEvents for RxEv<'_, '_> {
    fn recv_done(&mut self, msg: &MessageDone) -> Result<(), TermCause> {
        // Dropped in place (its region references released), not moved out.
        let id = self.0.msg.try_borrow_mut().ok().and_then(|mut m| {
            let id = m.as_ref()?.id;
            **m = None;
            Some(id)
        });
        let Some(id) = id else {
            return Err(TermCause::rdmap(RdmapError::LocalCatastrophic));
        };
        Qp::complete_recv(
            self.0.qp.qp(),
            id,
            WcStatus::Success,
            msg.len,
            msg.inval_stag,
            msg.solicited,
        );
        Ok(())
    }

    fn read_done(&mut self, done: &TaggedDone) -> Result<(), TermCause> {
        // The session completed the oldest outstanding Read of the ULP, whose WQE is the
        // oldest in `reads_out` (same Reads, same order).
        let mut reads = self
            .0
            .reads_out
            .try_borrow_mut()
            .map_err(|_| TermCause::rdmap(RdmapError::LocalCatastrophic))?;
        if reads.is_empty() {
            return Err(TermCause::rdmap(RdmapError::LocalCatastrophic));
        }
        let w = reads
            .remove(0)
            .map_err(|_| TermCause::rdmap(RdmapError::LocalCatastrophic))?;
        let qp = self.0.qp.qp();
        if let Some(stag) = w.local_inval {
            let _ = self.0.qp.device().stags.invalidate(stag, self.0.pd);
        }
        // The octets the Response placed: the Read's size (a short Response is refused).
        let len = u32::try_from(done.len).unwrap_or(u32::MAX);
        Qp::complete_send(qp, &w, WcStatus::Success, len);
        Ok(())
    }

    fn invalidate(&mut self, stag: u32) {
        // Accepted by `check_invalidate`; a concurrent local invalidation wins.
        let _ = self.0.qp.device().stags.invalidate(stag, self.0.pd);
    }
}
