// SPDX-License-Identifier: GPL-2.0

//! The transport of one established connection (RFC 5040, RFC 5041, RFC 5044 Full
//! Operation): SQ work requests and Read Responses out through the protocol core's
//! [`DdpTx`], received FPDUs through its [`Decoder`] straight into registered memory.
//!
//! # Owners and lifetime
//!
//! A [`Conn`] is created by the connection manager when MPA startup completed
//! ([`Conn::establish`]). Three places hold it: the socket's callback attachment, the
//! QP's connection slot (for doorbells and teardown), and its work item while queued. The
//! connection holds a counted reference to the QP ([`QpRef`]) and the `iw_cm_id`
//! ([`CmId`]) until it closes; closing (peer FIN or reset, a TERMINATE either way, a local
//! disconnect or QP destroy) drops both under the connection's mutex, so once
//! [`Conn::close`] returned nothing of the connection touches the QP again and the QP's
//! destroy can complete.
//!
//! # Execution
//!
//! Protocol work runs in the connection's work item (process context, serialised by
//! the connection mutex): socket callbacks and kernel consumers' `post_send` only queue
//! it. A user QP's POST_SEND doorbell sends up to [`DOORBELL_BURST`] FPDUs itself, in the
//! consumer's syscall, when the connection is idle (its mutex free), and queues the work
//! item for the rest; that saves the work item's wake-up on every message. One run
//! of the work item reads everything the socket holds through `tcp_read_sock()` into the RX decoder
//! (payload copied from the socket buffers into the target pages, nothing staged), then
//! sends FPDUs until the SQ is empty, the send buffer is full (the write-space callback
//! queues the work again) or a burst of [`TX_BURST`] FPDUs was sent (the work queues
//! itself again, so one busy connection does not starve others).
//!
//! # What is not here
//!
//! Atomics and Immediate Data (RFC 7306) are not negotiated.
//!
//! # Peer-to-peer RTR (RFC 6581 §5)
//!
//! The Initiator sends the negotiated zero-length RTR message (Write, Read or Send) before
//! anything else; the Responder holds its own FPDUs until the first FPDU arrived. A
//! zero-length Send RTR (MSN 1 on QN 0) is taken by the Responder without a receive WQE
//! and without a completion: it is a connection-setup message, not one for the ULP, whose
//! receive WQEs stay for its own Sends (MSN 2 on).

use crate::cm::Armed;
use crate::device::{Device, Stat};
use crate::engine::ddp_rx::{MemoryLookup, RxEvents, RxState};
use crate::engine::ddp_tx::{DdpTx, FpduInfo, Message};
use crate::engine::rx_decoder::Decoder;
use crate::engine::rx_shell::{
    Access, InvalidateCheck, MessageDone, TaggedCheck, TaggedDone, UntaggedCheck,
};
use crate::engine::startup::{Negotiated, Role, SendGate};
use crate::engine::stream::{PlaceError, PlaceTarget, RxStream, TxSink};
use crate::mem::{access_bits, MrRef};
use crate::qp::wqe::SendWqe;
use crate::qp::{Qp, MAX_INLINE, READ_FENCE, SIGNALLED, SOLICITED};
use crate::sys::bindings as b;
use crate::sys::ibdev::QpRef;
use crate::sys::iwcm::{CmEvent, CmEventKind, CmId};
use crate::sys::kmem::{crc32c_kva, IoList, Kva};
use crate::sys::obj::PdId;
use crate::sys::socket::{tcp_state, SkbChunk, SockEvent, SockEvents, SockOps, SockRef, Socket};
use crate::wire::mpa::{MpaErrorCode, RtrType};
use crate::wire::rdmap::{
    AtomicRequest, AtomicResponse, Opcode, OperationError, RdmapError, ReadRequest,
};
use crate::wire::terminate::{TermCause, Terminate};
use core::cell::{Cell, RefCell};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::impl_has_hr_timer;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, ArcBorrow, Mutex};
use kernel::time::hrtimer::{
    HrTimer, HrTimerCallback, HrTimerCallbackContext, HrTimerRestart, RelativeMode,
};
use kernel::time::Monotonic;
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// FPDUs one run of the work item sends before it yields (and queues itself again).
const TX_BURST: u32 = 64;

/// FPDUs a user QP's POST_SEND doorbell sends in the consumer's syscall before it leaves
/// the rest to the work item.
const DOORBELL_BURST: u32 = 16;

/// The most inbound and outbound RDMA Read Requests a connection allows (IRD and ORD
/// ceilings; the device advertises them as `max_qp_rd_atom`/`max_qp_init_rd_atom`).
pub(crate) const MAX_IRD_ORD: u32 = 32;

/// Why a connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The peer closed its side (FIN): DISCONNECT, then CLOSE.
    PeerClosed,
    /// The TCP connection failed (reset, error).
    Reset,
    /// A protocol error: a TERMINATE was sent, or the peer sent one.
    Terminated,
    /// The consumer disconnected or destroyed the QP.
    Local,
}

/// A local SGE resolved to its memory region.
struct Piece {
    mr: MrRef,
    to: u64,
    len: u32,
}

/// The payload of the message being sent.
enum Payload {
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
enum JobKind {
    /// A send WQE (Send variants, RDMA Write): completed once its last FPDU is queued.
    Sqe(SendWqe),
    /// An RDMA Read Request: the WQE moves to the outstanding reads after its FPDU.
    Read(SendWqe),
    /// A Read Response: frees an IRD slot once its last FPDU is queued.
    ReadResponse,
    /// A TERMINATE: the connection closes once it is queued.
    Terminate,
    /// The peer-to-peer model's zero-length RTR message (RFC 6581 §5), sent first.
    Rtr,
}

/// One FPDU being handed to TCP: engine octets in `own`, payload as memory ranges.
struct Fpdu {
    own: KVec<u8>,
    parts: KVec<Part>,
    len: usize,
    sent: usize,
    last: bool,
    /// Payload pages go to TCP by reference (see [`Fpdu::zero_copy`]), not copied.
    zcopy: bool,
    /// Payload regions referenced by `parts` (kept alive until the FPDU is queued).
    _hold: KVec<MrRef>,
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
        for p in self.parts.iter() {
            let plen = match p {
                Part::Own { len, .. } => *len,
                Part::Mem(k) => usize::try_from(k.len()).map_err(|_| EINVAL)?,
            };
            let end = start + plen;
            while self.sent < end {
                let skip = self.sent - start;
                let more = !self.last || end < self.len;
                let r = match p {
                    Part::Own { off, .. } => sock.send(&[&self.own[off + skip..off + plen]], more),
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

/// A receive WQE the message on QN 0 is being placed into.
struct RxMsg {
    id: u64,
    msn: u32,
    pieces: KVec<Piece>,
    total: u64,
}

/// The mutable state of a connection.
struct Inner {
    qp: Option<QpRef<Device>>,
    sock: Option<Socket>,
    id: Option<CmId<Device>>,
    pd: PdId,
    tx: DdpTx,
    rx: Decoder,
    /// Nothing may be sent before the first FPDU arrived. RFC 5044 §7.1.2 rule 4 asks
    /// this of a Responder without RTR, but ULPs whose server speaks first (perftest's
    /// latency tests) then deadlock, and the Initiator's in-order stream processing makes
    /// the hold-off unnecessary; like the C siw, rsiw's Responder sends at once (see
    /// `Documentation/rsiw.rst`). In the peer-to-peer model (RFC 6581 §5) the Responder
    /// does hold back until the Initiator's RTR message arrived.
    gate_closed: bool,
    /// Responder in the peer-to-peer model: armed while the gate is closed; if the RTR
    /// has not arrived within `mpa_timeout_ms`, the connection ends with a TERMINATE.
    rtr_timer: Option<Armed<Conn>>,
    /// Initiator in the peer-to-peer model: the RTR message still to send, before
    /// anything else.
    rtr_pending: Option<RtrType>,
    /// Initiator: the zero-length Read RTR is outstanding (its Read Response is the first
    /// to arrive and completes nothing).
    rtr_read_out: bool,
    /// Responder: a zero-length Send RTR was negotiated and has not arrived yet.
    rtr_send_in: bool,
    ord: u32,
    job: Option<(JobKind, Payload)>,
    fpdu: Option<Fpdu>,
    reads_out: KVec<SendWqe>,
    responses: KVec<ReadRequest>,
    rx_msg: Option<RxMsg>,
    pending_term: Option<Terminate>,
    closed: bool,
}

/// An established connection (see the module documentation).
#[pin_data]
pub(crate) struct Conn {
    /// Inbound Read depth (IRD) of the connection.
    ird: u32,
    /// Outbound Read depth (ORD) of the connection.
    ord: u32,
    #[pin]
    inner: Mutex<Inner>,
    #[pin]
    work: Work<Conn>,
    /// The peer-to-peer RTR timer ([`Inner::rtr_timer`]).
    #[pin]
    timer: HrTimer<Conn>,
    /// Set by the RTR timer when it fired.
    rtr_expired: AtomicBool,
}

impl_has_work! {
    impl HasWork<Self> for Conn { self.work }
}

impl_has_hr_timer! {
    impl HasHrTimer<Self> for Conn {
        mode: RelativeMode<Monotonic>, field: self.timer
    }
}

impl HrTimerCallback for Conn {
    type Pointer<'a> = Arc<Self>;

    fn run(this: ArcBorrow<'_, Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        this.rtr_expired.store(true, Ordering::Release);
        let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
        HrTimerRestart::NoRestart
    }
}

/// `SIW_WC_*` as the 16-bit status of a CQE.
fn wc(status: u32) -> u16 {
    status as u16
}

impl Conn {
    /// Starts the transport on `sock` after MPA negotiation `n`: the QP enters RTS, the
    /// socket's callbacks move to the connection, and the QP's doorbells reach it. `ird`
    /// and `ord` are the negotiated (or, for MPA revision 1, the consumer's) inbound and
    /// outbound Read depths, capped at [`MAX_IRD_ORD`]. On success the connection takes
    /// `id` (for its DISCONNECT and CLOSE events) after `report` announced the connection
    /// on it (CONNECT_REPLY or ESTABLISHED); on failure `id` is left to the caller.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the QP is not in INIT/RTR or is being destroyed; `ENOMEM`.
    pub(crate) fn establish(
        qp: QpRef<Device>,
        mut sock: Socket,
        id: &mut Option<CmId<Device>>,
        n: &Negotiated,
        ird: u32,
        ord: u32,
        report: impl FnOnce(&CmId<Device>),
    ) -> Result<Arc<Self>> {
        let emss = sock.mss().max(140);
        let pd = qp.qp().pd();
        let ird = ird.min(MAX_IRD_ORD);
        let ord = ord.min(MAX_IRD_ORD);
        let (ird_v, ord_v) = (ird, ord);
        let tx = DdpTx::for_connection(n, emss, false);
        let responder = n.role == Role::Responder;
        // A zero-length Read RTR needs one inbound Read slot (RFC 6581 §9.1).
        let rx_ird = if responder && n.rtr == Some(RtrType::Read) {
            ird.max(1)
        } else {
            ird
        };
        let rx = Decoder::for_negotiated(n, false, rx_ird);
        let gate_closed = responder && n.p2p && n.send_gate == SendGate::AfterFirstRxFpdu;
        let rtr_pending = match n.send_gate {
            SendGate::RtrFirst(t) => Some(t),
            _ => None,
        };
        let conn = Arc::pin_init(
            pin_init!(Self {
                ird: ird_v,
                ord: ord_v,
                inner <- new_mutex!(Inner {
                    qp: None,
                    sock: None,
                    id: None,
                    pd,
                    tx,
                    rx,
                    gate_closed,
                    rtr_timer: None,
                    rtr_pending,
                    rtr_read_out: false,
                    rtr_send_in: responder && n.p2p && n.rtr == Some(RtrType::Send),
                    ord: ord_v,
                    job: None,
                    fpdu: None,
                    reads_out: KVec::new(),
                    responses: KVec::new(),
                    rx_msg: None,
                    pending_term: None,
                    closed: false,
                }),
                work <- new_work!("rsiw_conn"),
                timer <- HrTimer::new(),
                rtr_expired: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        {
            let mut g = conn.inner.lock();
            g.reads_out.reserve(ord as usize, GFP_KERNEL)?;
            g.responses.reserve(rx_ird as usize, GFP_KERNEL)?;
            Qp::attach_conn(qp.qp(), conn.clone())?;
            if let Err(e) = Qp::enter_rts(qp.qp()) {
                Qp::detach_conn(qp.qp());
                return Err(e);
            }
            sock.detach();
            if let Err(e) = sock.attach(conn.clone(), None) {
                Qp::detach_conn(qp.qp());
                Qp::enter_error(qp.qp(), None);
                return Err(e);
            }
            let id = id.take().ok_or(EINVAL)?;
            report(&id);
            g.sock = Some(sock);
            g.qp = Some(qp);
            g.id = Some(id);
            if g.gate_closed {
                g.rtr_timer = Some(Armed::start(conn.clone()));
            }
        }
        // Data may have arrived with or right after the MPA frames.
        conn.kick();
        Ok(conn)
    }

    /// The connection's IRD and ORD (RDMA Read depths, inbound and outbound).
    pub(crate) fn ird_ord(&self) -> (u32, u32) {
        (self.ird, self.ord)
    }

    /// Queues the work item (kernel consumers' `post_send`, socket events).
    pub(crate) fn kick(self: &Arc<Self>) {
        let _ = crate::sys::queue().enqueue(self.clone());
    }

    /// The POST_SEND doorbell of a user QP, in the consumer's syscall (process context,
    /// no lock held): if nothing else is working on the connection, sends up to
    /// [`DOORBELL_BURST`] FPDUs of the SQ here and queues the work item only if more is
    /// left. Otherwise (the work item or another doorbell holds the connection) it queues
    /// the work item, which then runs after the current holder and sees the new SQEs.
    pub(crate) fn doorbell(self: &Arc<Self>) {
        let Some(mut g) = self.inner.try_lock() else {
            self.kick();
            return;
        };
        if g.closed {
            return;
        }
        if Self::transmit(&mut g, DOORBELL_BURST) {
            self.kick();
        }
    }

    /// Closes the connection from the consumer's side (disconnect or QP destroy):
    /// the socket is shut down and released, the QP enters ERROR (flushing its WQEs),
    /// iw_cm gets CLOSE, and the QP and `iw_cm_id` references are dropped before this
    /// returns.
    pub(crate) fn close(&self) {
        let mut g = self.inner.lock();
        Self::close_locked(&mut g, Reason::Local);
    }

    fn close_locked(g: &mut Inner, why: Reason) {
        if g.closed {
            return;
        }
        g.closed = true;
        // Releases the timer's reference to the connection.
        g.rtr_timer = None;
        if let Some(s) = g.sock.as_ref() {
            s.shutdown();
        }
        // Dropping the socket detaches it: no callback runs after this.
        g.sock = None;
        let qp = g.qp.take();
        if let Some(qp) = &qp {
            Qp::detach_conn(qp.qp());
            let ev = match why {
                Reason::Terminated | Reason::Reset => Some(b::ib_event_type_IB_EVENT_QP_FATAL),
                Reason::PeerClosed | Reason::Local => None,
            };
            // Work requests still held here complete with a flush error.
            Self::flush_held(g, qp);
            Qp::enter_error(qp.qp(), ev);
        }
        if let Some(id) = g.id.take() {
            if why == Reason::PeerClosed {
                let _ = id.event(&CmEvent::simple(CmEventKind::Disconnect, 0));
            }
            let status = match why {
                Reason::Reset => -(b::ECONNRESET as i32),
                _ => 0,
            };
            let _ = id.event(&CmEvent::simple(CmEventKind::Close, status));
        }
        g.job = None;
        g.fpdu = None;
        g.rx_msg = None;
        drop(qp);
    }

    /// Completes the WQEs the connection holds outside the SQ with a flush error: the
    /// outstanding RDMA Reads and the receive WQE being placed into.
    fn flush_held(g: &mut Inner, qp: &QpRef<Device>) {
        let flush = wc(b::siw_wc_status_SIW_WC_WR_FLUSH_ERR);
        for w in g.reads_out.drain_all() {
            Qp::complete_send(qp.qp(), &w, flush, 0);
        }
        if let Some(m) = g.rx_msg.take() {
            Qp::complete_recv(qp.qp(), m.id, flush, 0, None, false);
        }
        if let Some((JobKind::Sqe(w) | JobKind::Read(w), _)) = g.job.take() {
            let _ = Qp::complete_sqe(qp.qp(), &w, flush, 0);
        }
    }

    fn run_locked(this: &Arc<Self>, g: &mut Inner) {
        if g.closed {
            return;
        }
        Self::receive(g);
        if g.closed {
            return;
        }
        if g.rtr_timer.is_some() && this.rtr_expired.load(Ordering::Acquire) {
            g.rtr_timer = None;
            if g.gate_closed {
                // RFC 6581 sets no deadline; a peer that never sends its RTR would hold
                // the QP forever. Local catastrophic error (RFC 6581 §9.3), as WIRE.md
                // recommends, then close.
                if crate::sys::ratelimit() {
                    pr_warn!("connection: no peer-to-peer RTR within mpa_timeout_ms, sending TERMINATE\n");
                }
                g.gate_closed = false;
                g.pending_term = Some(Terminate::new(TermCause::mpa(
                    MpaErrorCode::LocalCatastrophic,
                )));
            }
        }
        if Self::transmit(g, TX_BURST) {
            this.kick();
        }
        if g.closed {
            return;
        }
        // `receive` consumed everything queued, so a FIN seen now follows all data.
        match g.sock.as_ref().map(|s| s.state()) {
            Some(tcp_state::ESTABLISHED) | None => {}
            Some(tcp_state::CLOSE_WAIT) => {
                // The peer sent FIN; everything before it was processed above.
                if !g.rx.at_fpdu_boundary() && crate::sys::ratelimit() {
                    pr_warn!("connection: peer closed inside an FPDU\n");
                }
                Self::close_locked(g, Reason::PeerClosed);
            }
            Some(_) => Self::close_locked(g, Reason::Reset),
        }
    }

    /// Feeds everything the socket holds to the RX decoder.
    fn receive(g: &mut Inner) {
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

    /// Sends up to `budget` FPDUs; returns whether it stopped only because of that limit.
    fn transmit(g: &mut Inner, mut budget: u32) -> bool {
        loop {
            if g.closed {
                return false;
            }
            if g.fpdu.is_some() {
                match Self::push_fpdu(g) {
                    Ok(true) => {}
                    Ok(false) => return false,
                    Err(_) => {
                        Self::close_locked(g, Reason::Reset);
                        return false;
                    }
                }
                continue;
            }
            if budget == 0 {
                return true;
            }
            if let Some(t) = g.pending_term.take() {
                g.tx.abort();
                if let Some(qp) = g.qp.as_ref() {
                    if let Some((JobKind::Sqe(w) | JobKind::Read(w), _)) = g.job.take() {
                        let _ = Qp::complete_sqe(
                            qp.qp(),
                            &w,
                            wc(b::siw_wc_status_SIW_WC_GENERAL_ERR),
                            0,
                        );
                    }
                }
                g.job = None;
                if g.tx.start(Message::Terminate(t)).is_err() {
                    Self::close_locked(g, Reason::Terminated);
                    return false;
                }
                g.job = Some((JobKind::Terminate, Payload::None));
            }
            if g.job.is_none() {
                if !Self::next_job(g) {
                    return false;
                }
                if g.job.is_none() {
                    // A local operation (LOCAL_INV, REG_MR) completed.
                    budget -= 1;
                    continue;
                }
            }
            budget -= 1;
            if let Err(e) = Self::build_fpdu(g) {
                if crate::sys::ratelimit() {
                    pr_err!("connection: cannot build an FPDU ({e:?})\n");
                }
                Self::close_locked(g, Reason::Reset);
                return false;
            }
        }
    }

    /// Sends what is left of the current FPDU; `Ok(true)` once it is all queued.
    fn push_fpdu(g: &mut Inner) -> Result<bool> {
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
            let mut io = IoList::with_capacity(f.parts.len())?;
            for p in f.parts.iter() {
                match p {
                    Part::Own { off, len } => io.push_bytes(&f.own[*off..*off + *len])?,
                    Part::Mem(k) => io.push_kva(*k)?,
                }
            }
            let more = !f.last;
            while f.sent < f.len {
                match io.send(sock, f.sent, more) {
                    Ok(0) => return Ok(false),
                    Ok(n) => f.sent += n,
                    Err(e) if e == EAGAIN => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
        }
        let (last, wire_len) = (f.last, f.len);
        g.fpdu = None;
        if let Some(qp) = g.qp.as_ref() {
            let dev = qp.device();
            dev.count(Stat::TxFpdus, 1);
            dev.count(Stat::TxOctets, wire_len as u64);
        }
        if last {
            Self::finish_job(g);
        }
        Ok(true)
    }

    /// The last FPDU of the current message is queued: complete what it completes.
    fn finish_job(g: &mut Inner) {
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
                let _ = Qp::complete_sqe(qp.qp(), &w, wc(b::siw_wc_status_SIW_WC_SUCCESS), len);
            }
            JobKind::Read(w) => {
                if Qp::release_sqe(qp.qp(), w.slot).is_ok() {
                    // Capacity for `ord` entries was reserved, and `next_job` starts a
                    // Read only below `ord`.
                    let _ = g.reads_out.push(w, GFP_ATOMIC);
                }
            }
            JobKind::ReadResponse => g.rx.release_ird(),
            JobKind::Terminate => {
                qp.device().count(Stat::TerminateSent, 1);
                Self::close_locked(g, Reason::Terminated)
            }
            JobKind::Rtr => {}
        }
    }

    /// Starts the next message: a queued Read Response first (RFC 5040 §5.5: responses
    /// are not held back by the SQ), then the SQ head. Returns `false` if there is nothing
    /// to send now.
    fn next_job(g: &mut Inner) -> bool {
        if g.gate_closed {
            return false;
        }
        if let Some(t) = g.rtr_pending.take() {
            // RFC 6581 §5: the Initiator's first FPDU is the zero-length RTR message. Its
            // STags are not looked at by the peer (RFC 5040 §5.1, §5.2.1; RFC 5041 §7).
            let msg = match t {
                RtrType::Write => Message::Write {
                    stag: 0,
                    to: 0,
                    len: 0,
                },
                RtrType::Read => {
                    g.rtr_read_out = true;
                    Message::ReadRequest(ReadRequest {
                        sink_stag: 0,
                        sink_to: 0,
                        size: 0,
                        src_stag: 0,
                        src_to: 0,
                    })
                }
                RtrType::Send => Message::Send {
                    solicited: false,
                    invalidate: None,
                    len: 0,
                },
            };
            if g.tx.start(msg).is_err() {
                g.pending_term = Some(Terminate::new(TermCause::rdmap(
                    RdmapError::LocalCatastrophic,
                )));
                return true;
            }
            g.job = Some((JobKind::Rtr, Payload::None));
            return true;
        }
        let Some(qp) = g.qp.as_ref() else {
            return false;
        };
        if !g.responses.is_empty() {
            let req = g.responses.remove(0).unwrap_or(ReadRequest {
                sink_stag: 0,
                sink_to: 0,
                size: 0,
                src_stag: 0,
                src_to: 0,
            });
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
                        // Checked when the request arrived; the region went away since.
                        g.pending_term = Some(Terminate::new(TermCause::rdmap(
                            RdmapError::RemoteProtection(
                                crate::wire::rdmap::ProtectionError::InvalidStag,
                            ),
                        )));
                        return true;
                    }
                }
            };
            let msg = Message::ReadResponse {
                stag: req.sink_stag,
                to: req.sink_to,
                len: req.size,
            };
            if g.tx.start(msg).is_err() {
                g.pending_term = Some(Terminate::new(TermCause::rdmap(
                    RdmapError::LocalCatastrophic,
                )));
                return true;
            }
            g.job = Some((JobKind::ReadResponse, payload));
            return true;
        }
        let w = match Qp::next_sqe(qp.qp()) {
            None => return false,
            Some(Ok(w)) => w,
            Some(Err(bad)) => {
                let _ = Qp::fail_sqe(qp.qp(), &bad);
                Qp::enter_error(qp.qp(), Some(b::ib_event_type_IB_EVENT_QP_REQ_ERR));
                return false;
            }
        };
        let op = u32::from(w.opcode);
        let is_read = op == b::siw_opcode_SIW_OP_READ || op == b::siw_opcode_SIW_OP_READ_LOCAL_INV;
        if is_read && g.ord == 0 {
            // No outbound Read may ever be outstanding: fail the WR instead of stalling.
            if crate::sys::ratelimit() {
                pr_warn!("QP {}: RDMA Read posted with ORD 0\n", qp.qp().qpn());
            }
            let _ = Qp::complete_sqe(qp.qp(), &w, wc(b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR), 0);
            Qp::enter_error(qp.qp(), None);
            return false;
        }
        if (w.flags & READ_FENCE != 0 && !g.reads_out.is_empty())
            || (is_read && g.reads_out.len() as u32 + u32::from(g.rtr_read_out) >= g.ord)
        {
            // Resumed when a Read Response completes an outstanding Read.
            return false;
        }
        if op == b::siw_opcode_SIW_OP_INVAL_STAG || op == b::siw_opcode_SIW_OP_REG_MR {
            // Local operations: executed in SQ order, nothing goes on the wire.
            return Self::local_op(g.pd, qp, &w);
        }
        let started = Self::start_sqe(&mut g.tx, g.pd, qp, &w, is_read);
        match started {
            Ok(job) => {
                g.job = Some(job);
                true
            }
            Err(status) => {
                let Some(qp) = g.qp.as_ref() else {
                    return false;
                };
                let _ = Qp::complete_sqe(qp.qp(), &w, wc(status), 0);
                Qp::enter_error(qp.qp(), None);
                false
            }
        }
    }

    /// Executes a LOCAL_INV (`SIW_OP_INVAL_STAG`) or REG_MR SQE of a kernel QP and
    /// completes it. A failure completes it with `SIW_WC_LOC_PROT_ERR` (LOCAL_INV: no
    /// such STag, another PD, a DMA MR; REG_MR: no page list, still valid, another PD)
    /// and moves the QP to ERROR. Returns whether the TX path can go on.
    fn local_op(pd: PdId, qp: &QpRef<Device>, w: &SendWqe) -> bool {
        let dev = qp.device();
        let r = if u32::from(w.opcode) == b::siw_opcode_SIW_OP_INVAL_STAG {
            dev.invalidate_stag(w.rkey, pd).map_err(|e| {
                if crate::sys::ratelimit() {
                    pr_warn!(
                        "QP {}: LOCAL_INV of STag {:#x} failed ({e:?})\n",
                        qp.qp().qpn(),
                        w.rkey
                    );
                }
            })
        } else {
            dev.fast_register(w.rkey, pd, w.access()).map_err(|e| {
                if crate::sys::ratelimit() {
                    pr_warn!(
                        "QP {}: REG_MR of STag {:#x} failed ({e:?})\n",
                        qp.qp().qpn(),
                        w.rkey
                    );
                }
            })
        };
        let status = if r.is_ok() {
            b::siw_wc_status_SIW_WC_SUCCESS
        } else {
            b::siw_wc_status_SIW_WC_LOC_PROT_ERR
        };
        if Qp::complete_sqe(qp.qp(), w, wc(status), 0).is_err() {
            return false;
        }
        if r.is_err() {
            Qp::enter_error(qp.qp(), None);
            return false;
        }
        true
    }

    /// Starts the message for SQE `w`; on failure returns the `SIW_WC_*` status.
    fn start_sqe(
        tx: &mut DdpTx,
        pd: PdId,
        qp: &QpRef<Device>,
        w: &SendWqe,
        is_read: bool,
    ) -> Result<(JobKind, Payload), u32> {
        let op = u32::from(w.opcode);
        if is_read {
            // The Data Sink is a single local STag (RFC 5040 §4.4).
            let [sge] = w.sges() else {
                return Err(b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR);
            };
            let need = access_bits(Access::LocalWrite);
            if sge.length > 0 {
                qp.device()
                    .lookup_stag(sge.lkey, pd, need, sge.laddr, u64::from(sge.length))
                    .map_err(|_| b::siw_wc_status_SIW_WC_LOC_PROT_ERR)?;
            }
            let req = ReadRequest {
                sink_stag: sge.lkey,
                sink_to: sge.laddr,
                size: sge.length,
                src_stag: w.rkey,
                src_to: w.raddr,
            };
            tx.start(Message::ReadRequest(req))
                .map_err(|_| b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR)?;
            return Ok((JobKind::Read(*w), Payload::None));
        }
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
                    .map_err(|_| b::siw_wc_status_SIW_WC_GENERAL_ERR)?;
                for s in w.sges() {
                    if s.length == 0 {
                        continue;
                    }
                    let mr = qp
                        .device()
                        .lookup_stag(s.lkey, pd, 0, s.laddr, u64::from(s.length))
                        .map_err(|_| b::siw_wc_status_SIW_WC_LOC_PROT_ERR)?;
                    list.push(
                        Piece {
                            mr,
                            to: s.laddr,
                            len: s.length,
                        },
                        GFP_KERNEL,
                    )
                    .map_err(|_| b::siw_wc_status_SIW_WC_GENERAL_ERR)?;
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
        let msg = if op == b::siw_opcode_SIW_OP_WRITE {
            Message::Write {
                stag: w.rkey,
                to: w.raddr,
                len,
            }
        } else if op == b::siw_opcode_SIW_OP_SEND || op == b::siw_opcode_SIW_OP_SEND_REMOTE_INV {
            Message::Send {
                solicited: w.flags & SOLICITED != 0,
                invalidate: (op == b::siw_opcode_SIW_OP_SEND_REMOTE_INV).then_some(w.rkey),
                len,
            }
        } else {
            return Err(b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR);
        };
        tx.start(msg)
            .map_err(|_| b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR)?;
        Ok((JobKind::Sqe(*w), payload))
    }

    /// Builds the next FPDU of the current message into `g.fpdu`.
    fn build_fpdu(g: &mut Inner) -> Result {
        let Some((kind, payload)) = g.job.as_mut() else {
            return Err(EINVAL);
        };
        let zcopy = Fpdu::zero_copy(kind, payload);
        let cap = g.tx.next_fpdu_len().map_err(|_| EINVAL)?;
        let mut sink = FpduSink {
            own: KVec::with_capacity(128.min(cap), GFP_KERNEL)?,
            parts: KVec::new(),
            hold: KVec::new(),
            payload,
            err: None,
        };
        let info: FpduInfo = g.tx.next_fpdu(&mut sink).map_err(|_| EINVAL)?;
        if let Some(e) = sink.err {
            return Err(e);
        }
        let FpduSink {
            own, parts, hold, ..
        } = sink;
        g.fpdu = Some(Fpdu {
            own,
            parts,
            len: info.wire_len,
            sent: 0,
            last: info.last,
            zcopy,
            _hold: hold,
        });
        Ok(())
    }
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
    own: KVec<u8>,
    parts: KVec<Part>,
    hold: KVec<MrRef>,
    payload: &'a mut Payload,
    err: Option<Error>,
}

impl FpduSink<'_> {
    fn push_own(&mut self, data: &[u8]) -> Result {
        let off = self.own.len();
        self.own.extend_from_slice(data, GFP_KERNEL)?;
        if let Some(Part::Own { len, .. }) = self.parts.last_mut() {
            *len += data.len();
            return Ok(());
        }
        self.parts.push(
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
                    let seg = p.mr.range(p.to + u64::from(*off)).ok_or(EFAULT)?;
                    let left = u64::from(p.len - *off);
                    let n = seg.len().min(left).min(len as u64);
                    let piece = seg.prefix(n);
                    if let Some(c) = crc.as_deref_mut() {
                        *c = crc32c_kva(*c, &piece);
                    }
                    self.parts.push(Part::Mem(piece), GFP_KERNEL)?;
                    if self.hold.last().is_none_or(|h| !Arc::ptr_eq(h, &p.mr)) {
                        self.hold.push(p.mr.clone(), GFP_KERNEL)?;
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

impl SockEvents for Conn {
    fn event(this: ArcBorrow<'_, Self>, _sock: SockRef<'_>, _ev: SockEvent) {
        let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
    }
}

impl WorkItem for Conn {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let mut g = this.inner.lock();
        Self::run_locked(&this, &mut g);
    }
}
