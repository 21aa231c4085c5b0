// SPDX-License-Identifier: GPL-2.0

//! The transmit half of a connection: the next message (Read Responses first, then the
//! SQ), its FPDUs built by the protocol core's [`DdpTx`] and handed to TCP, copied or
//! by page reference (`zcopy_tx`), and the completions once a message is queued.

use super::{Conn, Inner, Piece, Reason};
use crate::abi::{WcStatus, WrOpcode};
use crate::device::{Device, Stat};
use crate::engine::ddp_tx::{DdpTx, FpduInfo, Message};
use crate::engine::orq::ReadSink;
use crate::engine::rx_shell::{Access, TaggedCheck};
use crate::engine::session::{Admit, SessionState, SqHead, Transmit};
use crate::engine::stream::TxSink;
use crate::mem::{access_bits, MrRef};
use crate::qp::wqe::SendWqe;
use crate::qp::{Qp, MAX_INLINE, READ_FENCE, SIGNALLED, SOLICITED};
use crate::sys::bindings as b;
use crate::sys::ibdev::QpRef;
use crate::sys::kmem::{crc32c_kva, IoList, IoVecBuf, Kva};
use crate::sys::obj::PdId;
use crate::sys::socket::SockOps;
use crate::sys::{pr_err_ratelimited, pr_warn_ratelimited};
use crate::wire::mpa::RtrType;
use crate::wire::rdmap::{ProtectionError, RdmapError, ReadRequest};
use crate::wire::terminate::TermCause;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The payload of the message being sent.
pub(super) enum Payload {
    None,
    Inline {
        buf: [u8; MAX_INLINE as usize],
        len: usize,
        off: usize,
    },
    Pieces {
        list: KVec<Piece>,
        idx: usize,
        off: u32,
    },
}

/// What the message being sent completes.
pub(super) enum JobKind {
    /// A send WQE (Send variants, RDMA Write): completed once its last FPDU is queued.
    Sqe(SendWqe),
    /// An RDMA Read Request; its WQE entered the outstanding Reads before the Request
    /// was built (its Response can arrive as soon as the Request is queued).
    Read,
    /// A Read Response; it frees its IRD slot just before its last FPDU is queued (the
    /// peer may send its next Read Request as soon as that arrived).
    ReadResponse,
    /// Our TERMINATE: the session closes once it is queued.
    Terminate,
    /// The peer-to-peer model's zero-length RTR message (RFC 6581 §5), sent first.
    Rtr,
}

/// One FPDU being handed to TCP: engine octets in `bufs.own`, payload as memory ranges.
pub(super) struct Fpdu {
    bufs: FpduBufs,
    len: usize,
    sent: usize,
    last: bool,
    /// Payload pages go to TCP by reference (see [`Fpdu::zero_copy`]), not copied.
    zcopy: bool,
}

/// The buffers of one FPDU. A connection keeps those of the FPDU it sent last
/// ([`Inner::spare`]) for the next, so that building and sending an FPDU allocates
/// nothing once they have grown to the connection's usual FPDU shape.
pub(super) struct FpduBufs {
    /// Octets the TX builder wrote (header, inline payload, markers, pad, CRC).
    own: KVec<u8>,
    /// The FPDU in stream order: pieces of `own` and payload ranges.
    parts: KVec<Part>,
    /// Payload regions referenced by `parts` (kept alive until the FPDU is queued).
    hold: KVec<MrRef>,
    /// Storage of the gather list the copying send builds.
    iov: IoVecBuf,
}

impl FpduBufs {
    /// Empty buffers (they allocate on first use).
    pub(super) const fn new() -> Self {
        Self {
            own: KVec::new(),
            parts: KVec::new(),
            hold: KVec::new(),
            iov: IoVecBuf::new(),
        }
    }

    /// Empties the buffers, keeping their capacity; drops the region references.
    fn recycle(mut self) -> Self {
        self.own.clear();
        self.parts.clear();
        self.hold.clear();
        self
    }
}

enum Part {
    Own { off: usize, len: usize },
    Mem(Kva),
}

impl Fpdu {
    /// Whether the payload of the message `kind` sends goes to TCP by page reference
    /// (module parameter `zcopy_tx`): TCP then reads the memory when it (re)transmits, not
    /// when rsiw queues it. Allowed, as in the C siw, where no completion tells the
    /// consumer that the buffer is free again when the last octet is queued: a Read
    /// Response (the peer's Read completes only once the data arrived) and an unsignalled
    /// Send or Write, and only for payloads of at least a page (a smaller one costs less
    /// to copy than to splice). Signalled WRs and inline data are always copied.
    fn zero_copy(kind: &JobKind, payload: &Payload) -> bool {
        if !crate::module_parameters::zcopy_tx.value() {
            return false;
        }
        let Payload::Pieces { list, .. } = payload else {
            return false;
        };
        let eligible = match kind {
            JobKind::ReadResponse => true,
            JobKind::Sqe(w) => w.flags & SIGNALLED == 0,
            _ => false,
        };
        let total = list.iter().fold(0u64, |a, p| a + u64::from(p.len));
        eligible && total >= kernel::page::PAGE_SIZE as u64
    }

    /// Sends what is left of the FPDU part by part: the engine's octets (header, pad, CRC)
    /// copied, payload ranges spliced ([`SockOps::send_kva`]); adds the octets TCP took by
    /// reference to `spliced`. Returns `Ok(true)` once all of it is queued, `Ok(false)`
    /// when the send buffer is full.
    fn push_spliced(&mut self, sock: &SockOps, spliced: &mut usize) -> Result<bool> {
        let mut start = 0usize;
        for p in self.bufs.parts.iter() {
            let plen = match p {
                Part::Own { len, .. } => *len,
                Part::Mem(k) => usize::try_from(k.len()).map_err(|_| EINVAL)?,
            };
            let end = start + plen;
            while self.sent < end {
                let skip = self.sent - start;
                let more = !self.last || end < self.len;
                let r = match p {
                    Part::Own { off, .. } => {
                        sock.send(&[&self.bufs.own[off + skip..off + plen]], more)
                    }
                    Part::Mem(k) => sock.send_kva(&k.skip(skip as u64), more).map(|(n, z)| {
                        *spliced += z;
                        n
                    }),
                };
                match r {
                    Ok(0) => return Ok(false),
                    Ok(n) => self.sent += n,
                    Err(e) if e == EAGAIN => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            start = end;
        }
        Ok(self.sent >= self.len)
    }
}

impl Conn {
    /// Sends up to `budget` FPDUs; returns whether it stopped only because of that limit.
    pub(super) fn transmit(this: &Arc<Conn>, g: &mut Inner, mut budget: u32) -> bool {
        Self::sync_session(this, g);
        loop {
            if g.closed {
                return false;
            }
            if g.fpdu.is_some() {
                match Self::push_fpdu(this, g) {
                    Ok(true) => {}
                    Ok(false) => return false,
                    Err(_) => {
                        Self::close_locked(this, g, Reason::Reset);
                        return false;
                    }
                }
                continue;
            }
            if budget == 0 {
                return true;
            }
            if g.job.is_some() && this.terminate_due() {
                // RFC 5040 §7.1: the TERMINATE goes before the rest of the message.
                Self::sync_session(this, g);
                if let Some((JobKind::Sqe(w), _)) = g.job.take() {
                    if let Some(qp) = g.qp.as_ref() {
                        let _ = Qp::complete_sqe(qp.qp(), &w, WcStatus::GeneralErr, 0);
                    }
                }
                g.job = None;
                g.tx.abort();
            }
            if g.job.is_none() {
                if !Self::next_job(this, g) {
                    return false;
                }
                Self::sync_session(this, g);
                if g.closed {
                    return false;
                }
                if g.job.is_none() {
                    // A local operation (LOCAL_INV, REG_MR) completed, or a local error
                    // made the TERMINATE due.
                    budget -= 1;
                    continue;
                }
            }
            budget -= 1;
            if let Err(e) = Self::build_fpdu(this, g) {
                pr_err_ratelimited!("connection: cannot build an FPDU ({e:?})\n");
                Self::close_locked(this, g, Reason::Reset);
                return false;
            }
        }
    }

    /// Whether the session has a TERMINATE due that the message in progress must yield to.
    fn terminate_due(&self) -> bool {
        matches!(
            self.rx.lock().session.state(),
            SessionState::TerminateDue { .. }
        )
    }

    /// A local error at the transmit side: the session's TERMINATE becomes due.
    fn fail_session(&self, cause: TermCause) {
        let now = self.now_ms();
        self.rx.lock().session.fail(cause, now);
    }

    /// Sends what is left of the current FPDU; `Ok(true)` once it is all queued.
    fn push_fpdu(this: &Conn, g: &mut Inner) -> Result<bool> {
        let (Some(sock), Some(f)) = (g.sock.as_ref(), g.fpdu.as_mut()) else {
            return Err(ENOTCONN);
        };
        if f.zcopy {
            let mut spliced = 0;
            let r = f.push_spliced(sock, &mut spliced);
            if spliced != 0 {
                if let Some(qp) = g.qp.as_ref() {
                    qp.device().count(Stat::TxSplicedOctets, spliced as u64);
                }
            }
            if !r? {
                return Ok(false);
            }
        } else {
            let iov = core::mem::replace(&mut f.bufs.iov, IoVecBuf::new());
            let mut io = IoList::new(iov, f.bufs.parts.len())?;
            let mut r = Ok(true);
            for p in f.bufs.parts.iter() {
                r = match p {
                    Part::Own { off, len } => io.push_bytes(&f.bufs.own[*off..*off + *len]),
                    Part::Mem(k) => io.push_kva(*k),
                }
                .map(|()| true);
                if r.is_err() {
                    break;
                }
            }
            let more = !f.last;
            while r == Ok(true) && f.sent < f.len {
                r = match io.send(sock, f.sent, more) {
                    Ok(0) => Ok(false),
                    Ok(n) => {
                        f.sent += n;
                        Ok(true)
                    }
                    Err(e) if e == EAGAIN => Ok(false),
                    Err(e) => Err(e),
                };
            }
            f.bufs.iov = io.into_buf();
            if !r? {
                return Ok(false);
            }
        }
        let (last, wire_len) = (f.last, f.len);
        if let Some(f) = g.fpdu.take() {
            g.spare = f.bufs.recycle();
        }
        if let Some(qp) = g.qp.as_ref() {
            let dev = qp.device();
            dev.count(Stat::TxFpdus, 1);
            dev.count(Stat::TxOctets, wire_len as u64);
        }
        if last {
            Self::finish_job(this, g);
        }
        Ok(true)
    }

    /// The last FPDU of the current message is queued: complete what it completes.
    fn finish_job(this: &Conn, g: &mut Inner) {
        let Some((kind, _)) = g.job.take() else {
            return;
        };
        let Some(qp) = g.qp.as_ref() else { return };
        match kind {
            JobKind::Sqe(w) => {
                let len = w.sges().iter().fold(0u32, |a, s| a.wrapping_add(s.length));
                let len = if w.sges().is_empty() {
                    w.inline_data().map_or(0, |d| d.as_slice().len() as u32)
                } else {
                    len
                };
                let _ = Qp::complete_sqe(qp.qp(), &w, WcStatus::Success, len);
            }
            JobKind::Read | JobKind::ReadResponse | JobKind::Rtr => {}
            JobKind::Terminate => {
                qp.device().count(Stat::TerminateSent, 1);
                this.rx.lock().session.terminate_sent();
                Self::sync_session(this, g);
            }
        }
    }

    /// Starts the next message the session asks for ([`Transmit`]: our TERMINATE, the
    /// RTR, a Read Response, or the SQ head if the session admits it). Returns `false` if
    /// there is nothing to send now.
    fn next_job(this: &Conn, g: &mut Inner) -> bool {
        let now = this.now_ms();
        let Some(t) = this.rx.lock().session.poll_transmit(now) else {
            return false;
        };
        let (msg, job) = match t {
            Transmit::Terminate(t) => {
                g.tx.abort();
                if g.tx.start(Message::Terminate(t)).is_err() {
                    // Not reached (a TERMINATE always fits); close without it.
                    this.rx.lock().session.terminate_sent();
                    return true;
                }
                g.job = Some((JobKind::Terminate, Payload::None));
                return true;
            }
            Transmit::Rtr(t) => {
                // RFC 6581 §5: the Initiator's first FPDU is the zero-length RTR message
                // (a Read RTR's sink is in the ORQ already). Its STags are not looked at
                // by the peer (RFC 5040 §5.1, §5.2.1; RFC 5041 §7).
                let rtr = match t {
                    RtrType::Write => Message::Write {
                        stag: 0,
                        to: 0,
                        len: 0,
                    },
                    RtrType::Read => Message::ReadRequest(ReadRequest {
                        sink_stag: 0,
                        sink_to: 0,
                        size: 0,
                        src_stag: 0,
                        src_to: 0,
                    }),
                    RtrType::Send => Message::Send {
                        solicited: false,
                        invalidate: None,
                        len: 0,
                    },
                };
                (rtr, (JobKind::Rtr, Payload::None))
            }
            Transmit::ReadResponse(req) => {
                let Some(qp) = g.qp.as_ref() else {
                    return false;
                };
                let payload = if req.size == 0 {
                    Payload::None
                } else {
                    match resolve_range(
                        qp,
                        g.pd,
                        req.src_stag,
                        req.src_to,
                        req.size,
                        access_bits(Access::RemoteRead),
                    ) {
                        Ok(p) => p,
                        Err(_) => {
                            // Checked when the Request arrived; the region went away since.
                            this.fail_session(TermCause::rdmap(RdmapError::RemoteProtection(
                                ProtectionError::InvalidStag,
                            )));
                            return true;
                        }
                    }
                };
                let resp = Message::ReadResponse {
                    stag: req.sink_stag,
                    to: req.sink_to,
                    len: req.size,
                };
                (resp, (JobKind::ReadResponse, payload))
            }
            Transmit::SendQueue => return Self::next_sqe(this, g),
        };
        if g.tx.start(msg).is_err() {
            this.fail_session(TermCause::rdmap(RdmapError::LocalCatastrophic));
            return true;
        }
        g.job = Some(job);
        true
    }

    /// Executes a LOCAL_INV ([`WrOpcode::InvalStag`]) or REG_MR SQE of a kernel QP and
    /// completes it. A failure completes it with [`WcStatus::LocProtErr`] (LOCAL_INV: no
    /// such STag, another PD, a DMA MR; REG_MR: no page list, still valid, another PD)
    /// and moves the QP to ERROR. Returns whether the TX path can go on.
    fn local_op(pd: PdId, qp: &QpRef<Device>, w: &SendWqe) -> bool {
        let dev = qp.device();
        let r = if w.opcode == WrOpcode::InvalStag {
            dev.invalidate_stag(w.rkey, pd).map_err(|e| {
                pr_warn_ratelimited!(
                    "QP {}: LOCAL_INV of STag {:#x} failed ({e:?})\n",
                    qp.qp().qpn(),
                    w.rkey
                );
            })
        } else {
            dev.fast_register(w.rkey, pd, w.access()).map_err(|e| {
                pr_warn_ratelimited!(
                    "QP {}: REG_MR of STag {:#x} failed ({e:?})\n",
                    qp.qp().qpn(),
                    w.rkey
                );
            })
        };
        let status = if r.is_ok() {
            WcStatus::Success
        } else {
            WcStatus::LocProtErr
        };
        if Qp::complete_sqe(qp.qp(), w, status, 0).is_err() {
            return false;
        }
        if r.is_err() {
            Qp::enter_error(qp.qp(), None);
            return false;
        }
        true
    }

    /// Starts the SQ head if the session admits it (RFC 5040 §5.2 ORD and the read
    /// fence): an RDMA Read's sink enters the session's ORQ and its WQE `reads_out` before
    /// the Request can reach the peer; other WQEs are sent or, for LOCAL_INV and REG_MR,
    /// executed. Returns `false` if nothing was started.
    fn next_sqe(this: &Conn, g: &mut Inner) -> bool {
        let Some(qp) = g.qp.as_ref() else {
            return false;
        };
        let w = match Qp::next_sqe(qp.qp()) {
            None => return false,
            Some(Ok(w)) => w,
            Some(Err(bad)) => {
                let _ = Qp::fail_sqe(qp.qp(), &bad);
                Qp::enter_error(qp.qp(), Some(b::ib_event_type_IB_EVENT_QP_REQ_ERR));
                return false;
            }
        };
        let is_read = w.opcode.is_read();
        let fail = |status: WcStatus| {
            let _ = Qp::complete_sqe(qp.qp(), &w, status, 0);
            Qp::enter_error(qp.qp(), None);
            false
        };
        // A Read's sink is checked before the session admits it: every ORQ entry has its
        // Request sent.
        let read = if is_read {
            match read_sink(g.pd, qp, &w) {
                Ok(s) => Some(s),
                Err(status) => return fail(status),
            }
        } else {
            None
        };
        let head = SqHead {
            fenced: w.flags & READ_FENCE != 0,
            read,
        };
        let admit = this.rx.lock().session.admit(&head);
        match admit {
            // Resumed when a Read Response completes an outstanding Read.
            Admit::Wait => return false,
            Admit::Refuse => {
                pr_warn_ratelimited!(
                    "QP {}: RDMA Read refused (ORD is 0, or its sink range wraps)\n",
                    qp.qp().qpn()
                );
                return fail(WcStatus::LocQpOpErr);
            }
            Admit::Go => {}
        }
        if matches!(w.opcode, WrOpcode::InvalStag | WrOpcode::RegMr) {
            // Local operations: executed in SQ order, nothing goes on the wire.
            return Self::local_op(g.pd, qp, &w);
        }
        if let Some(sink) = read {
            let req = ReadRequest {
                sink_stag: sink.stag,
                sink_to: sink.to,
                size: sink.len,
                src_stag: w.rkey,
                src_to: w.raddr,
            };
            if g.tx.start(Message::ReadRequest(req)).is_err() {
                // Not reached (a Read Request always fits); the sink is in the ORQ.
                this.fail_session(TermCause::rdmap(RdmapError::LocalCatastrophic));
                return true;
            }
            if Qp::release_sqe(qp.qp(), w.slot).is_err() {
                // A flush completed it already: the QP is in ERROR.
                g.tx.abort();
                return false;
            }
            // Within the capacity reserved for ORD entries (the session admits no more).
            let _ = this.rx.lock().reads_out.push(w, GFP_ATOMIC);
            g.job = Some((JobKind::Read, Payload::None));
            return true;
        }
        match Self::start_sqe(&mut g.tx, g.pd, qp, &w) {
            Ok(job) => {
                g.job = Some(job);
                true
            }
            Err(status) => fail(status),
        }
    }

    /// Starts the message for SQE `w` (a Send variant or an RDMA Write); on failure
    /// returns the status to complete it with.
    fn start_sqe(
        tx: &mut DdpTx,
        pd: PdId,
        qp: &QpRef<Device>,
        w: &SendWqe,
    ) -> Result<(JobKind, Payload), WcStatus> {
        let payload = match w.inline_data() {
            Some(d) => {
                let mut buf = [0u8; MAX_INLINE as usize];
                let s = d.as_slice();
                buf[..s.len()].copy_from_slice(s);
                Payload::Inline {
                    buf,
                    len: s.len(),
                    off: 0,
                }
            }
            None => {
                let mut list = KVec::with_capacity(w.sges().len(), GFP_KERNEL)
                    .map_err(|_| WcStatus::GeneralErr)?;
                for s in w.sges() {
                    if s.length == 0 {
                        continue;
                    }
                    let mr = qp
                        .device()
                        .lookup_stag(s.lkey, pd, 0, s.laddr, u64::from(s.length))
                        .map_err(|_| WcStatus::LocProtErr)?;
                    list.push(
                        Piece {
                            mr,
                            to: s.laddr,
                            len: s.length,
                        },
                        GFP_KERNEL,
                    )
                    .map_err(|_| WcStatus::GeneralErr)?;
                }
                Payload::Pieces {
                    list,
                    idx: 0,
                    off: 0,
                }
            }
        };
        let len = match &payload {
            Payload::None => 0,
            Payload::Inline { len, .. } => *len as u32,
            Payload::Pieces { list, .. } => list.iter().fold(0u32, |a, p| a.saturating_add(p.len)),
        };
        let msg = match w.opcode {
            WrOpcode::Write => Message::Write {
                stag: w.rkey,
                to: w.raddr,
                len,
            },
            WrOpcode::Send | WrOpcode::SendRemoteInv => Message::Send {
                solicited: w.flags & SOLICITED != 0,
                invalidate: (w.opcode == WrOpcode::SendRemoteInv).then_some(w.rkey),
                len,
            },
            _ => return Err(WcStatus::LocQpOpErr),
        };
        tx.start(msg).map_err(|_| WcStatus::LocQpOpErr)?;
        Ok((JobKind::Sqe(*w), payload))
    }

    /// Builds the next FPDU of the current message into `g.fpdu`.
    fn build_fpdu(this: &Conn, g: &mut Inner) -> Result {
        let Some((kind, payload)) = g.job.as_mut() else {
            return Err(EINVAL);
        };
        let zcopy = Fpdu::zero_copy(kind, payload);
        let cap = g.tx.next_fpdu_len().map_err(|_| EINVAL)?;
        let mut bufs = core::mem::replace(&mut g.spare, FpduBufs::new());
        bufs.own.reserve(128.min(cap), GFP_KERNEL)?;
        let mut sink = FpduSink {
            bufs,
            payload,
            err: None,
        };
        let info: FpduInfo = g.tx.next_fpdu(&mut sink).map_err(|_| EINVAL)?;
        if let Some(e) = sink.err {
            return Err(e);
        }
        let bufs = sink.bufs;
        if info.last && matches!(g.job, Some((JobKind::ReadResponse, _))) {
            // Before the last octet can reach the peer (see `JobKind::ReadResponse`).
            this.rx.lock().session.read_response_sent();
        }
        g.fpdu = Some(Fpdu {
            bufs,
            len: info.wire_len,
            sent: 0,
            last: info.last,
            zcopy,
        });
        Ok(())
    }
}

/// The Data Sink of RDMA Read SQE `w`: a single local SGE (RFC 5040 §4.4) granting local
/// write over its range; otherwise the status to complete it with.
fn read_sink(pd: PdId, qp: &QpRef<Device>, w: &SendWqe) -> Result<ReadSink, WcStatus> {
    let [sge] = w.sges() else {
        return Err(WcStatus::LocQpOpErr);
    };
    if sge.length > 0 {
        qp.device()
            .lookup_stag(
                sge.lkey,
                pd,
                access_bits(Access::LocalWrite),
                sge.laddr,
                u64::from(sge.length),
            )
            .map_err(|_| WcStatus::LocProtErr)?;
    }
    Ok(ReadSink {
        stag: sge.lkey,
        to: sge.laddr,
        len: sge.length,
    })
}

/// Resolves `len` octets at `to` of `stag` for a Read Response's payload.
fn resolve_range(
    qp: &QpRef<Device>,
    pd: PdId,
    stag: u32,
    to: u64,
    len: u32,
    access: u32,
) -> Result<Payload, TaggedCheck> {
    let mr = qp
        .device()
        .lookup_stag(stag, pd, access, to, u64::from(len))?;
    let mut list = KVec::new();
    list.push(Piece { mr, to, len }, GFP_KERNEL)
        .map_err(|_| TaggedCheck::InvalidStag)?;
    Ok(Payload::Pieces {
        list,
        idx: 0,
        off: 0,
    })
}

/// Collects one FPDU as the TX builder writes it.
struct FpduSink<'a> {
    bufs: FpduBufs,
    payload: &'a mut Payload,
    err: Option<Error>,
}

impl FpduSink<'_> {
    fn push_own(&mut self, data: &[u8]) -> Result {
        let off = self.bufs.own.len();
        self.bufs.own.extend_from_slice(data, GFP_KERNEL)?;
        if let Some(Part::Own { len, .. }) = self.bufs.parts.last_mut() {
            *len += data.len();
            return Ok(());
        }
        self.bufs.parts.push(
            Part::Own {
                off,
                len: data.len(),
            },
            GFP_KERNEL,
        )?;
        Ok(())
    }

    fn take_payload(&mut self, mut len: usize, mut crc: Option<&mut u32>) -> Result {
        match self.payload {
            Payload::None => Err(EINVAL),
            Payload::Inline {
                buf,
                len: total,
                off,
            } => {
                let end = off.checked_add(len).filter(|e| e <= total).ok_or(EINVAL)?;
                let data = buf[*off..end].to_owned_array();
                *off = end;
                if let Some(c) = crc {
                    *c = crate::sys::crc32c(*c, &data.0[..data.1]);
                }
                self.push_own(&data.0[..data.1])
            }
            Payload::Pieces { list, idx, off } => {
                while len > 0 {
                    let p = list.get(*idx).ok_or(EINVAL)?;
                    let seg = p.mr.resolve(p.to + u64::from(*off)).ok_or(EFAULT)?;
                    let left = u64::from(p.len - *off);
                    let n = seg.len().min(left).min(len as u64);
                    let piece = seg.prefix(n);
                    if let Some(c) = crc.as_deref_mut() {
                        *c = crc32c_kva(*c, &piece);
                    }
                    self.bufs.parts.push(Part::Mem(piece), GFP_KERNEL)?;
                    if self.bufs.hold.last().is_none_or(|h| !Arc::ptr_eq(h, &p.mr)) {
                        self.bufs.hold.push(p.mr.clone(), GFP_KERNEL)?;
                    }
                    *off += n as u32;
                    len -= n as usize;
                    if *off == p.len {
                        *idx += 1;
                        *off = 0;
                    }
                }
                Ok(())
            }
        }
    }
}

/// A copy of up to [`MAX_INLINE`] octets (inline payload moves through the FPDU's own
/// buffer).
trait ToOwnedArray {
    fn to_owned_array(&self) -> ([u8; MAX_INLINE as usize], usize);
}

impl ToOwnedArray for [u8] {
    fn to_owned_array(&self) -> ([u8; MAX_INLINE as usize], usize) {
        let mut a = [0u8; MAX_INLINE as usize];
        let n = self.len().min(a.len());
        a[..n].copy_from_slice(&self[..n]);
        (a, n)
    }
}

impl TxSink for FpduSink<'_> {
    fn bytes(&mut self, data: &[u8], crc: Option<&mut u32>) {
        if let Some(c) = crc {
            *c = crate::sys::crc32c(*c, data);
        }
        if let Err(e) = self.push_own(data) {
            self.err.get_or_insert(e);
        }
    }

    fn payload(&mut self, len: usize, crc: Option<&mut u32>) {
        if let Err(e) = self.take_payload(len, crc) {
            self.err.get_or_insert(e);
        }
    }
}
