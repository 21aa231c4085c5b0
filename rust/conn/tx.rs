// SPDX-License-Identifier: GPL-2.0

//! The transmit half of a connection: the next message (Read Responses first, then the
//! SQ), its FPDUs built by the protocol core's [`DdpTx`] and handed to TCP ([`TxFpdu`]),
//! and the completions once a message is queued.

use super::tx_fpdu::{BuildError, FpduSink, SendMode, Source, TxFpdu, COPY_PAGES_MIN};
use super::{Conn, Inner, Reason, ResolvedSge, SgeList};
use crate::abi::{WcStatus, WrOpcode};
use crate::device::{Device, Stat};
use crate::engine::ddp_tx::{DdpTx, FpduInfo, Message};
use crate::engine::orq::ReadSink;
use crate::engine::rx_shell::Access;
use crate::engine::session::{Admit, SessionState, SqHead, Transmit};
use crate::logtag::Tag;
use crate::qp::{Qp, READ_FENCE, SOLICITED};
use crate::stag::access_bits;
use crate::sys::ibdev::QpRef;
use crate::sys::obj::{PdId, QpEvent};
use crate::sys::{pr_err_ratelimited, pr_warn_ratelimited};
use crate::wire::rdmap::{RdmapError, ReadRequest};
use crate::wire::terminate::{TermCause, Terminate};
use crate::wqe::{InlineData, SendDone, SendWqe};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The payload of the message being sent.
pub(super) enum Payload {
    None,
    /// Inline data, of which `off` octets were sent.
    Inline {
        data: InlineData,
        off: usize,
    },
    Pieces {
        list: SgeList,
        idx: usize,
        off: u32,
    },
}

impl Payload {
    /// Makes this payload an empty SGE list, in place (a job's payload is filled where it
    /// stays), and returns the list (always `Some`).
    fn set_pieces(&mut self) -> Option<&mut SgeList> {
        *self = Payload::Pieces {
            list: SgeList::new(),
            idx: 0,
            off: 0,
        };
        match self {
            Payload::Pieces { list, .. } => Some(list),
            _ => None,
        }
    }

    /// The payload's length in octets.
    fn total_len(&self) -> u32 {
        match self {
            Payload::None => 0,
            Payload::Inline { data, .. } => data.as_slice().len() as u32,
            Payload::Pieces { list, .. } => list.iter().fold(0u32, |a, p| a.saturating_add(p.len)),
        }
    }
}

/// What the message being sent completes.
pub(super) enum JobKind {
    /// A send WQE (Send variants, RDMA Write), released from the SQ when it started:
    /// completed once its last FPDU is queued.
    Sqe(SendDone),
    /// An RDMA Read Request; its WQE entered the outstanding Reads before the Request
    /// was built (its Response can arrive as soon as the Request is queued).
    Read,
    /// A Read Response from Data Source STag `src_stag`, read under a guard taken per
    /// FPDU ([`Source`]); it frees its IRD slot just before its last FPDU is queued (the
    /// peer may send its next Read Request as soon as that arrived).
    ReadResponse { src_stag: u32 },
    /// Our TERMINATE: the session closes once it is queued.
    Terminate,
    /// The peer-to-peer model's zero-length RTR message (RFC 6581 §5), sent first.
    Rtr,
}

/// The session's answer for the SQ head ([`Conn::admit_sqe`]).
enum HeadAdmit {
    /// Start it (an RDMA Read with its sink, which entered the ORQ, and whose WQE left
    /// the SQ for `reads_out`).
    Go(Option<ReadSink>),
    /// Not now: resumed when a Read Response completes an outstanding Read, or (the
    /// slot went stale) never.
    Wait,
    /// Complete it with this status; the QP fails.
    Fail(WcStatus),
}

impl Conn {
    /// Sends up to `budget` FPDUs; returns whether it stopped at that limit with a message
    /// started and not sent in full (the caller queues the work item to go on).
    ///
    /// The socket is owned ([`Socket::own`](crate::sys::net::socket::Socket::own)) for
    /// the whole burst: TCP takes the FPDUs without a socket lock round trip each, and
    /// the ACKs (and received FPDUs) that arrive meanwhile wait in the socket's backlog.
    /// It is processed, all at once, where the send buffer fills (the lock is released
    /// and taken again, and the FPDU tried once more) and when the burst ends: TCP then
    /// sends what was queued in large packets, where per-ACK processing would send a
    /// segment or two per ACK. A burst is bounded by `budget` and the send buffer.
    pub(super) fn transmit(this: &Arc<Conn>, g: &mut Inner, budget: u32) -> bool {
        if let Some(s) = g.sock.as_mut() {
            s.own();
        }
        let more = Self::transmit_burst(this, g, budget);
        // Closing inside the burst released the socket already.
        if let Some(s) = g.sock.as_mut() {
            s.disown();
        }
        if g.tx.job.is_none() && g.tx.fpdu.is_none() {
            // Nothing to send for now: an idle connection holds no copy pages (TCP keeps
            // those it still reads).
            g.tx.copy.release();
        }
        more
    }

    fn transmit_burst(this: &Arc<Conn>, g: &mut Inner, mut budget: u32) -> bool {
        g.tx.idle_due = None;
        if g.tx.fpdu.is_some() || g.tx.job.is_some() {
            // Otherwise `next_job` acts on the session's events first.
            Self::sync_session(this, g);
        }
        // Whether the send buffer was found full since the last FPDU was queued.
        let mut full = false;
        loop {
            if g.closed {
                return false;
            }
            if g.tx.fpdu.is_some() {
                match Self::push_fpdu(this, g) {
                    Ok(true) => full = false,
                    Ok(false) if !full => {
                        // Processing the backlog's ACKs may free the send buffer.
                        full = true;
                        if let Some(s) = g.sock.as_mut() {
                            s.disown();
                            s.own();
                        }
                    }
                    Ok(false) => return false,
                    Err(_) => {
                        Self::close_locked(this, g, Reason::Reset);
                        return false;
                    }
                }
                continue;
            }
            if g.tx.job.is_some() && this.terminate_due() {
                // RFC 5040 §7.1: the TERMINATE goes before the rest of the message. The
                // session reports the due TERMINATE (`Event::Failed`) before anything
                // else, so `sync_session` fails the QP here, which abandons the message
                // and flushes its WQE; `next_job` then starts the TERMINATE.
                Self::sync_session(this, g);
                g.tx.job = None;
                g.tx.ddp.abort();
            }
            if g.tx.job.is_none() {
                if !Self::next_job(this, g) {
                    return false;
                }
                if g.tx.job.is_none() {
                    // A local operation (LOCAL_INV, REG_MR) completed, or a local error
                    // made the TERMINATE due (its event is acted on here).
                    Self::sync_session(this, g);
                    if g.closed {
                        return false;
                    }
                    budget = budget.saturating_sub(1);
                    continue;
                }
            }
            if budget == 0 {
                // The budget is spent with a message started: the next run (the work
                // item) sends the rest. Nothing started means nothing to queue it for.
                return true;
            }
            budget -= 1;
            match Self::build_fpdu(this, g) {
                Ok(()) => {}
                Err(BuildError::Source(c)) => {
                    // The Data Source was taken back while its Response streamed out: RFC
                    // 5040 §7.2's Remote Protection Error for it, instead of the rest.
                    pr_warn_ratelimited!(
                        "{}: Read Response cut short: its Data Source failed its checks ({c:?})\n",
                        this.tag
                    );
                    g.tx.job = None;
                    g.tx.ddp.abort();
                    this.fail_session(c.rdmap_cause());
                }
                Err(BuildError::Local(e)) => {
                    pr_err_ratelimited!("{}: cannot build an FPDU ({e:?})\n", this.tag);
                    Self::close_locked(this, g, Reason::Reset);
                    return false;
                }
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
        let t = &mut *g.tx;
        let (Some(sock), Some(f)) = (g.sock.as_mut(), t.fpdu.as_mut()) else {
            return Err(ENOTCONN);
        };
        if !f.push(&mut t.bufs, sock)? {
            return Ok(false);
        }
        let (last, wire_len) = (f.last(), f.wire_len());
        g.tx.fpdu = None;
        g.tx.bufs.clear();
        this.tx_fpdus.fetch_add(1, Ordering::Relaxed);
        this.tx_octets.fetch_add(wire_len as u64, Ordering::Relaxed);
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
        // Looked at and dropped in place: a job is over a hundred octets, and moving it
        // out is a block copy per message.
        let Some((kind, payload)) = g.tx.job.as_ref() else {
            return;
        };
        let terminate = matches!(kind, JobKind::Terminate);
        if let (JobKind::Sqe(w), Some(qp)) = (kind, g.qp.as_ref()) {
            Qp::complete_send(qp.qp(), w, WcStatus::Success, payload.total_len());
        }
        g.tx.job = None;
        let Some(qp) = g.qp.as_ref() else { return };
        if terminate {
            let cause = {
                let mut rx = this.rx.lock();
                rx.session.terminate_sent();
                match rx.session.state() {
                    SessionState::Closed(c) => c.local_cause(),
                    _ => None,
                }
            };
            match cause {
                Some(c) => qp.device().count_terminate(c.layer, true),
                None => qp.device().count(Stat::TerminateSent, 1),
            }
            Self::sync_session(this, g);
        }
    }

    /// Acts on the session's events ([`Conn::sync_session`]), then starts the next message
    /// the session asks for ([`Transmit`]: our TERMINATE, the RTR, a Read Response, or
    /// the SQ head if the session admits it). Without events the session is asked in the
    /// same hold of the receive lock. Returns `false` if there is nothing to send now or
    /// the connection closed.
    fn next_job(this: &Conn, g: &mut Inner) -> bool {
        let now = this.now_ms();
        let (t, due) = loop {
            if g.closed {
                return false;
            }
            let mut rx = this.rx.lock();
            if let Some(ev) = rx.session.poll_event() {
                drop(rx);
                Self::session_event(this, g, ev);
                continue;
            }
            let t = rx.session.poll_transmit(now);
            let due = rx.session.poll_timeout();
            match t {
                Some(t) => break (t, due),
                None => {
                    g.tx.idle_due = Some(due);
                    return false;
                }
            }
        };
        match t {
            Transmit::Terminate(t) => Self::start_terminate(this, g, t),
            Transmit::Rtr(t) => {
                Self::start_message(this, g, Message::rtr(t), JobKind::Rtr, Payload::None)
            }
            Transmit::ReadResponse(req) => Self::start_read_response(this, g, req),
            Transmit::SendQueue => {
                if Self::next_sqe(this, g) {
                    return true;
                }
                // Nothing started, and nothing on that path changes the session: the
                // deadline read with the offer is still its next one.
                g.tx.idle_due = Some(due);
                false
            }
        }
    }

    /// Starts our TERMINATE `t`, abandoning the message in progress.
    fn start_terminate(this: &Conn, g: &mut Inner, t: Terminate) -> bool {
        g.tx.ddp.abort();
        if g.tx.ddp.start(Message::Terminate(t)).is_err() {
            // Not reached (a TERMINATE always fits); close without it.
            this.rx.lock().session.terminate_sent();
            return true;
        }
        g.tx.job = Some((JobKind::Terminate, Payload::None));
        true
    }

    /// Starts the Read Response to `req`, its payload resolved again from the Data
    /// Source (a region gone since the Request arrived makes the TERMINATE due).
    /// Returns `false` if the QP is gone.
    fn start_read_response(this: &Conn, g: &mut Inner, req: ReadRequest) -> bool {
        let Some(qp) = g.qp.as_ref() else {
            return false;
        };
        let mr = if req.size == 0 {
            None
        } else {
            match qp.device().stags.lookup(
                req.src_stag,
                g.pd,
                access_bits(Access::RemoteRead),
                req.src_to,
                u64::from(req.size),
            ) {
                Ok(mr) => Some(mr),
                Err(e) => {
                    // Checked when the Request arrived; the region went away since.
                    this.fail_session(e.rdmap_cause());
                    return true;
                }
            }
        };
        let resp = Message::ReadResponse {
            stag: req.sink_stag,
            to: req.sink_to,
            len: req.size,
        };
        let kind = JobKind::ReadResponse {
            src_stag: req.src_stag,
        };
        let started = Self::start_message(this, g, resp, kind, Payload::None);
        // The payload goes into the job in place.
        if let (Some(mr), Some((JobKind::ReadResponse { .. }, p))) = (mr, g.tx.job.as_mut()) {
            if let Some(list) = p.set_pieces() {
                // The list is empty: never fails.
                let _ = list.push(
                    ResolvedSge {
                        mr,
                        stag: req.src_stag,
                        to: req.src_to,
                        len: req.size,
                    },
                    GFP_KERNEL,
                );
            }
        }
        started
    }

    /// Starts `msg` as the job `kind` with `payload`; a message the TX builder refuses
    /// makes the TERMINATE due.
    fn start_message(
        this: &Conn,
        g: &mut Inner,
        msg: Message,
        kind: JobKind,
        payload: Payload,
    ) -> bool {
        if g.tx.ddp.start(msg).is_err() {
            this.fail_session(TermCause::rdmap(RdmapError::LocalCatastrophic));
            return true;
        }
        g.tx.job = Some((kind, payload));
        true
    }

    /// Executes a LOCAL_INV ([`WrOpcode::InvalStag`]) or REG_MR SQE of a kernel QP and
    /// completes it. A failure completes it with [`WcStatus::LocProtErr`] (LOCAL_INV: no
    /// such STag, another PD, a DMA MR; REG_MR: no page list, still valid, another PD)
    /// and fails the QP ([`Conn::fail_local`]). Returns whether the TX path can go on (it
    /// can after a failure: with the TERMINATE).
    fn local_op(&self, pd: PdId, qp: &QpRef<Device>, w: &SendWqe) -> bool {
        let dev = qp.device();
        let r = if w.opcode == WrOpcode::InvalStag {
            dev.stags.invalidate(w.rkey, pd).map_err(|e| {
                pr_warn_ratelimited!(
                    "{}: LOCAL_INV of STag {:#x} failed ({e:?})\n",
                    Tag::new(dev, Some(qp.qp().qpn()), None),
                    w.rkey
                );
            })
        } else {
            let (iova, len) = w.reg_range();
            dev.stags
                .fast_register(w.rkey, pd, w.access(), iova, len)
                .map_err(|e| {
                    pr_warn_ratelimited!(
                        "{}: REG_MR of STag {:#x} failed ({e:?})\n",
                        Tag::new(dev, Some(qp.qp().qpn()), None),
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
            self.fail_local(qp, None);
        }
        true
    }

    /// A local error (a malformed SQE, a failed local operation, a WQE that cannot be
    /// started) puts the QP in ERROR, reporting `event`: the session's TERMINATE, RDMAP
    /// local catastrophic error (RFC 5040 §7.2), becomes due first, under the receive
    /// lock, so that from then on nothing the peer sends is placed or answered (a QP
    /// outside RTS serves no peer), and the connection closes once it is sent.
    fn fail_local(&self, qp: &QpRef<Device>, event: Option<QpEvent>) {
        self.fail_session(TermCause::rdmap(RdmapError::LocalCatastrophic));
        Qp::enter_error(qp.qp(), event);
    }

    /// Starts the SQ head if the session admits it (RFC 5040 §5.2 ORD and the read
    /// fence): an RDMA Read's sink enters the session's ORQ and its WQE `reads_out` before
    /// the Request can reach the peer; other WQEs are sent or, for LOCAL_INV and REG_MR,
    /// executed. Returns `false` if nothing was started; `true` also after a local error
    /// failed the QP ([`Conn::fail_local`]), whose TERMINATE goes next.
    fn next_sqe(this: &Conn, g: &mut Inner) -> bool {
        let Some(qp) = g.qp.as_ref() else {
            return false;
        };
        // A taken SQE is released already: a Send or Write the session has nothing to
        // decide about.
        let (w, taken) = match take_sqe(qp) {
            Taken::Sqe(w, taken) => (w, taken),
            Taken::Empty => return false,
            Taken::Malformed => {
                this.fail_local(qp, Some(QpEvent::ReqErr));
                return true;
            }
        };
        let read = if taken {
            None
        } else {
            match this.admit_sqe(g.pd, qp, &w) {
                HeadAdmit::Go(read) => read,
                HeadAdmit::Wait => return false,
                HeadAdmit::Fail(status) => return this.complete_and_fail(qp, &w, false, status),
            }
        };
        if matches!(w.opcode, WrOpcode::InvalStag | WrOpcode::RegMr) {
            // Local operations: executed in SQ order, nothing goes on the wire.
            return this.local_op(g.pd, qp, &w);
        }
        if let Some(sink) = read {
            let req = ReadRequest {
                sink_stag: sink.stag,
                sink_to: sink.to,
                size: sink.len,
                src_stag: w.rkey,
                src_to: w.raddr,
            };
            if g.tx.ddp.start(Message::ReadRequest(req)).is_err() {
                // Not reached (a Read Request always fits); the sink is in the ORQ.
                this.fail_session(TermCause::rdmap(RdmapError::LocalCatastrophic));
                return true;
            }
            g.tx.job = Some((JobKind::Read, Payload::None));
            return true;
        }
        let t = &mut *g.tx;
        match Self::start_sqe(&mut t.ddp, &mut t.job, g.pd, qp, &w) {
            Ok(()) => {
                // The slot is free for a new SQE now, as in the C siw: libsiw rings the
                // doorbell only for an SQE posted behind a free slot. The connection
                // holds the WQE until its last FPDU is queued and flushes it before the
                // SQ's when the QP fails (`Conn::flush_held`).
                if !taken && Qp::release_sqe(qp.qp(), w.slot).is_err() {
                    // A flush completed it already: the QP is in ERROR.
                    g.tx.job = None;
                    g.tx.ddp.abort();
                    return false;
                }
                true
            }
            Err(status) => {
                g.tx.job = None;
                this.complete_and_fail(qp, &w, taken, status)
            }
        }
    }

    /// Completes SQE `w` with `status` (releasing its slot, unless `released` from the SQ
    /// already) and fails the QP ([`Conn::fail_local`]). Returns `true`: the TX path goes
    /// on, with the TERMINATE.
    fn complete_and_fail(
        &self,
        qp: &QpRef<Device>,
        w: &SendWqe,
        released: bool,
        status: WcStatus,
    ) -> bool {
        if released {
            Qp::complete_send(qp.qp(), &w.done(), status, 0);
        } else {
            let _ = Qp::complete_sqe(qp.qp(), w, status, 0);
        }
        self.fail_local(qp, None);
        true
    }

    /// Asks the session to admit SQE `w`, the SQ head, where it has anything to decide
    /// ([`SqHead::needs_admit`]). A Read's sink is checked first: every ORQ entry has its
    /// Request sent.
    fn admit_sqe(&self, pd: PdId, qp: &QpRef<Device>, w: &SendWqe) -> HeadAdmit {
        let read = if w.opcode.is_read() {
            match read_sink(pd, qp, w) {
                Ok(s) => Some(s),
                Err(status) => return HeadAdmit::Fail(status),
            }
        } else {
            None
        };
        let head = sq_head(w, read);
        if !head.needs_admit() {
            // Admitted by the session's offer of the SQ in `next_job`: no receive lock.
            return HeadAdmit::Go(None);
        }
        let mut rx = self.rx.lock();
        let admit = rx.session.admit(&head);
        if let (Admit::Go, Some(sink)) = (admit, read) {
            // The Read's WQE leaves the SQ for `reads_out` in the same hold of the receive
            // lock as its sink entered the ORQ, so that the two stay in step for every
            // Read Response. A slot gone stale since it was read (a flush completed it,
            // or its owner cleared its VALID flag) takes its ORQ entry back: no Request
            // goes out for it.
            if Qp::release_sqe(qp.qp(), w.slot).is_err() {
                if !rx.session.withdraw_read(sink) {
                    // Not reached: nothing reached the session since it admitted the Read.
                    drop(rx);
                    self.fail_session(TermCause::rdmap(RdmapError::LocalCatastrophic));
                }
                return HeadAdmit::Wait;
            }
            // Within the capacity reserved for ORD entries (the session admits no more).
            let _ = rx.reads_out.push(w.done(), GFP_ATOMIC);
            self.reads_outstanding.store(true, Ordering::Relaxed);
            return HeadAdmit::Go(read);
        }
        drop(rx);
        match admit {
            Admit::Wait => HeadAdmit::Wait,
            Admit::Refuse => {
                pr_warn_ratelimited!(
                    "{}: RDMA Read refused (ORD is 0, or its sink range wraps)\n",
                    self.tag
                );
                HeadAdmit::Fail(WcStatus::LocQpOpErr)
            }
            Admit::Go => HeadAdmit::Go(read),
        }
    }

    /// Starts the message for SQE `w` (a Send variant or an RDMA Write) as the job in
    /// `job` (empty), built in place; on failure returns the status to complete it with
    /// (`job` then holds a partial job to drop).
    fn start_sqe(
        tx: &mut DdpTx,
        job: &mut Option<(JobKind, Payload)>,
        pd: PdId,
        qp: &QpRef<Device>,
        w: &SendWqe,
    ) -> Result<(), WcStatus> {
        let (_, payload) = job.insert((JobKind::Sqe(w.done()), Payload::None));
        match w.inline_data() {
            Some(data) => *payload = Payload::Inline { data, off: 0 },
            None => {
                if let Some(list) = payload.set_pieces() {
                    local_pieces(list, pd, qp, w)?;
                }
            }
        }
        tx.start(sqe_message(w, payload.total_len())?)
            .map(|_| ())
            .map_err(|_| WcStatus::LocQpOpErr)
    }

    /// Builds the next FPDU of the current message into `g.tx.fpdu`. A Read Response's
    /// payload is read only after its Data Source passed its checks again, under a guard
    /// (`crate::conn::tx_fpdu`).
    ///
    /// # Errors
    ///
    /// [`BuildError::Source`] if the Data Source failed its checks (the caller makes the
    /// session's TERMINATE due), [`BuildError::Local`] otherwise.
    fn build_fpdu(this: &Conn, g: &mut Inner) -> Result<(), BuildError> {
        let pd = g.pd;
        let t = &mut *g.tx;
        let Some((kind, payload)) = t.job.as_mut() else {
            return Err(BuildError::Local(EINVAL));
        };
        let source = match kind {
            JobKind::ReadResponse { src_stag } => Some(Source {
                stag: *src_stag,
                pd,
            }),
            _ => None,
        };
        let cap = t
            .ddp
            .next_fpdu_len()
            .map_err(|_| BuildError::Local(EINVAL))?;
        t.bufs.clear();
        // Copied payload of a large FPDU goes through the copy pages, if they have room
        // (`crate::conn::tx_fpdu`); otherwise TCP copies it.
        let paged = cap >= COPY_PAGES_MIN
            && matches!(payload, Payload::Pieces { .. })
            && t.copy.reserve(cap).unwrap_or(false);
        let mode = if paged {
            SendMode::CopyPages
        } else {
            SendMode::Copied
        };
        let pages = paged.then_some(&mut t.copy);
        let mut sink = FpduSink::new(&mut t.bufs, payload, 128.min(cap), source, pages)
            .map_err(BuildError::Local)?;
        let built = t.ddp.next_fpdu(&mut sink);
        let r = sink.finish();
        let info: FpduInfo = match (built, r) {
            (Ok(info), Ok(paged)) => {
                if paged != 0 {
                    if let Some(qp) = g.qp.as_ref() {
                        qp.device().count(Stat::TxCopyPageOctets, paged as u64);
                    }
                }
                info
            }
            (_, Err(e)) => {
                t.bufs.clear();
                return Err(e);
            }
            (Err(_), Ok(_)) => {
                t.bufs.clear();
                return Err(BuildError::Local(EINVAL));
            }
        };
        if info.last && matches!(g.tx.job, Some((JobKind::ReadResponse { .. }, _))) {
            // Before the last octet can reach the peer (see `JobKind::ReadResponse`).
            this.rx.lock().session.read_response_sent();
        }
        g.tx.fpdu = Some(TxFpdu::new(info.wire_len, info.last, mode));
        Ok(())
    }
}

/// The message of SQE `w` (a Send variant or an RDMA Write) with `len` octets of payload;
/// for another opcode the status to complete it with.
fn sqe_message(w: &SendWqe, len: u32) -> Result<Message, WcStatus> {
    match w.opcode {
        WrOpcode::Write => Ok(Message::Write {
            stag: w.rkey,
            to: w.raddr,
            len,
        }),
        WrOpcode::Send | WrOpcode::SendRemoteInv => Ok(Message::Send {
            solicited: w.flags & SOLICITED != 0,
            invalidate: (w.opcode == WrOpcode::SendRemoteInv).then_some(w.rkey),
            len,
        }),
        _ => Err(WcStatus::LocQpOpErr),
    }
}

/// What [`take_sqe`] found at the SQ head.
enum Taken {
    /// A well-formed SQE, released from the SQ already if `true`.
    Sqe(SendWqe, bool),
    /// Nothing posted.
    Empty,
    /// A malformed SQE, completed with an error; the caller fails the QP
    /// (`IB_EVENT_QP_REQ_ERR`).
    Malformed,
}

/// Takes the SQ head of `qp`, released at once (`true`) if it is a Send or an RDMA Write
/// without the read fence: one the session admits whenever it offers the SQ
/// ([`SqHead::needs_admit`]). A malformed one completes with an error
/// ([`Taken::Malformed`]).
fn take_sqe(qp: &QpRef<Device>) -> Taken {
    let plain = |w: &SendWqe| {
        matches!(
            w.opcode,
            WrOpcode::Send | WrOpcode::SendRemoteInv | WrOpcode::Write
        ) && !sq_head(w, None).needs_admit()
    };
    match Qp::next_sqe(qp.qp(), plain) {
        None => Taken::Empty,
        Some(Ok((w, taken))) => Taken::Sqe(w, taken),
        Some(Err(bad)) => {
            let _ = Qp::fail_sqe(qp.qp(), &bad);
            Taken::Malformed
        }
    }
}

/// What the session decides SQ head `w` by: its read fence, and `read`, the sink of an
/// RDMA Read.
fn sq_head(w: &SendWqe, read: Option<ReadSink>) -> SqHead {
    SqHead {
        fenced: w.flags & READ_FENCE != 0,
        read,
    }
}

/// Resolves the local SGEs of SQE `w` with payload to their memory regions into `list`
/// (empty); otherwise returns the status to complete it with.
fn local_pieces(
    list: &mut SgeList,
    pd: PdId,
    qp: &QpRef<Device>,
    w: &SendWqe,
) -> Result<(), WcStatus> {
    for s in w.sges() {
        if s.length == 0 {
            continue;
        }
        let mr = qp
            .device()
            .stags
            .lookup(s.lkey, pd, 0, s.laddr, u64::from(s.length))
            .map_err(|_| WcStatus::LocProtErr)?;
        // A send WQE has at most `MAX_SGE` SGEs (`decode_sqe`, kernel WRs alike).
        list.push(
            ResolvedSge {
                mr,
                stag: s.lkey,
                to: s.laddr,
                len: s.length,
            },
            GFP_KERNEL,
        )
        .map_err(|_| WcStatus::GeneralErr)?;
    }
    Ok(())
}

/// The Data Sink of RDMA Read SQE `w`: a single local SGE (RFC 5040 §4.4) granting local
/// write over its range; otherwise the status to complete it with.
fn read_sink(pd: PdId, qp: &QpRef<Device>, w: &SendWqe) -> Result<ReadSink, WcStatus> {
    let [sge] = w.sges() else {
        return Err(WcStatus::LocQpOpErr);
    };
    if sge.length > 0 {
        qp.device()
            .stags
            .lookup(
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
