// SPDX-License-Identifier: GPL-2.0

//! The RDMAP session engine of one connection in Full Operation (RFC 5040 §5-§7, RFC 5041
//! §7, RFC 6581 §5): everything the two directions of a stream must agree on, in one
//! sans-IO state machine the host tests and the fuzzer drive exactly as the kernel does.
//!
//! It owns
//! - the RX decoder ([`Decoder`]: MPA deframing, DDP/RDMAP validation and placement
//!   decisions) with the ORQ, the outbound Reads whose Responses are outstanding, each
//!   with its Data Sink and fill cursor ([`super::orq`]);
//! - the IRQ, the peer's Read Requests still to answer ([`irq::Irq`]);
//! - the ORD limit and the read fence the SQ obeys ([`Session::admit`]);
//! - the peer-to-peer RTR exchange ([`RtrPhase`]);
//! - TERMINATE-then-close ([`SessionState`]).
//!
//! The shell keeps socket I/O, MR resolution and CQ posting. It drives the engine with
//! - inputs: [`Session::handle_rx`] (octets from TCP, placed through its [`RxStream`]
//!   after the engine validated each segment against its [`MemoryLookup`]),
//!   [`Session::admit`] (the SQ head a [`Transmit::SendQueue`] let it look at),
//!   [`Session::read_response_sent`], [`Session::terminate_sent`], [`Session::fail`] and
//!   [`Session::handle_timeout`];
//! - outputs: [`Session::poll_transmit`] (the next message to send), [`Session::poll_event`]
//!   (the QP fails, the connection closes), [`Session::poll_timeout`] (when to call
//!   [`Session::handle_timeout`]), and the completions [`SessionEvents`] receives while
//!   [`Session::handle_rx`] runs.
//!
//! Times are milliseconds of any monotonic clock the shell chooses (`now`).
//!
//! # The rules
//!
//! - A byte from the peer reaches memory only through a placement the decoder validated
//!   first: a Write into an STag granting remote write, a Read Response into exactly the
//!   sink of the oldest outstanding Read, a Send into a posted receive ([`Decoder`]).
//! - Read Responses are sent in the order of the Requests and before the SQ (RFC 5040 §5.5
//!   rules 19-20); at most IRD Requests are outstanding (the decoder refuses more, DDP
//!   1/2/0x03) and each frees its slot when its Response is sent.
//! - At most ORD Reads are outstanding, and a fenced work request waits for every
//!   outstanding Read (RFC 5040 §5.2; verbs' `IB_SEND_FENCE`).
//! - Peer-to-peer (RFC 6581 §5): the Initiator's first FPDU is the negotiated zero-length
//!   RTR message; the Responder sends nothing before the first FPDU arrived, and not later
//!   than the deadline (`timeout_ms`) or it terminates (MPA local catastrophic error, RFC
//!   6581 §9.3). The zero-length Read RTR's Response and a zero-length Send RTR complete
//!   nothing and consume no receive buffer.
//! - The first error either side finds is sent in one TERMINATE (RFC 5040 §7.1 rule 4);
//!   from then on nothing is placed, completed or sent but the TERMINATE, the QP fails at
//!   once ([`Event::Failed`]), and the connection closes when the TERMINATE is out or the
//!   deadline passed ([`Event::Closed`]): a peer that stops reading cannot hold it. A
//!   TERMINATE from the peer closes the connection without an answer (RFC 5040 §6.2.2).
//! - Atomics (RFC 7306) are not negotiated: their opcodes are refused by the decoder
//!   (RDMAP 0/2/0x06).

pub mod irq;

use super::ddp_rx::{DdpConfig, MemoryLookup, QpAccess, RxEvents, RxState};
use super::mpa_rx::RxConfig;
use super::orq::{Orq, PushError, ReadSink};
use super::ring::{Fixed, Slots, Store};
use super::rx_decoder::Decoder;
use super::rx_shell::{
    Access, InvalidateCheck, MessageDone, TaggedCheck, TaggedDone, UntaggedCheck,
};
use super::startup::{Negotiated, Role, SendGate};
use super::stream::RxStream;
use crate::wire::marker::FpduPtrBase;
use crate::wire::mpa::{MpaErrorCode, RtrType};
use crate::wire::rdmap::{
    AtomicRequest, AtomicResponse, Opcode, OperationError, RdmapError, ReadRequest,
};
use crate::wire::terminate::{TermCause, Terminate};
use crate::wire::ulpdu;
use core::cell::Cell;
use irq::Irq;

/// Where the peer-to-peer RTR exchange (RFC 6581 §5) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrPhase {
    /// No RTR exchange is pending (none was negotiated, or it is over).
    Done,
    /// Initiator: this zero-length RTR message is the first FPDU to send.
    ToSend(RtrType),
    /// Initiator: the zero-length Read RTR was sent; the Read Response to it (the oldest
    /// ORQ entry) completes nothing.
    ReadOutstanding,
    /// Responder: nothing is sent until the first FPDU arrived, at the latest at
    /// `deadline`. `send_rtr`: a zero-length Send RTR was negotiated and has not arrived;
    /// the first Send (MSN 1) if empty is taken as it, without a receive buffer.
    Awaiting {
        /// When the Responder gives up waiting (ms).
        deadline: u64,
        /// The Send RTR is still expected.
        send_rtr: bool,
    },
}

/// Why the connection closed ([`Event::Closed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// The peer sent a TERMINATE (`Some` with its decoded header, `None` if it did not
    /// decode); none is sent in answer (RFC 5040 §6.2.2).
    PeerTerminated(Option<Terminate>),
    /// Our TERMINATE with this cause was handed to the transport.
    Terminated(TermCause),
    /// Our TERMINATE with this cause could not be sent before the deadline.
    TerminateTimedOut(TermCause),
}

impl Close {
    /// The cause of the TERMINATE this side sent or tried to send, if any.
    pub const fn local_cause(&self) -> Option<TermCause> {
        match self {
            Close::Terminated(c) | Close::TerminateTimedOut(c) => Some(*c),
            Close::PeerTerminated(_) => None,
        }
    }
}

/// The session's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Full Operation.
    Active,
    /// An error was found (here, by the decoder, or reported by the shell): this TERMINATE
    /// is the next message [`Session::poll_transmit`] returns; the connection closes at
    /// `deadline` (ms) if it could not be sent by then.
    TerminateDue {
        /// The TERMINATE to send.
        term: Terminate,
        /// Close without it after this time (ms).
        deadline: u64,
    },
    /// The TERMINATE was handed to the shell ([`Transmit::Terminate`]); the connection
    /// closes when the shell reports it queued ([`Session::terminate_sent`]) or at
    /// `deadline` (ms).
    Terminating {
        /// The TERMINATE's cause.
        cause: TermCause,
        /// Close without it after this time (ms).
        deadline: u64,
    },
    /// The connection is over.
    Closed(Close),
}

/// What the shell learns from [`Session::poll_event`], each once, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A TERMINATE of ours is due (`cause`): the QP enters ERROR now and its work requests
    /// complete with a flush error (RFC 5040 §7.1); the connection stays until
    /// [`Event::Closed`].
    Failed(TermCause),
    /// The connection is over: close the socket and report it to the consumer.
    Closed(Close),
}

/// What the session would send next ([`Session::next`]), with what taking it needs.
#[derive(Clone, Copy)]
enum Next {
    /// Nothing may be sent now.
    Nothing,
    /// Our TERMINATE, due until the deadline (ms).
    Terminate(Terminate, u64),
    /// The RTR of this type (RFC 6581 §9.2).
    Rtr(RtrType),
    /// A Read Response if the IRQ holds a Request, else the SQ head.
    Queues,
}

/// The next message to send ([`Session::poll_transmit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmit {
    /// Our TERMINATE: send it (abandoning any message in progress), then call
    /// [`Session::terminate_sent`].
    Terminate(Terminate),
    /// The zero-length RTR message of the peer-to-peer Initiator (a Read RTR is in the
    /// ORQ already).
    Rtr(RtrType),
    /// A Read Response to this Request (its Data Source was validated when it arrived; the
    /// shell resolves it again and calls [`Session::fail`] if it is gone). Call
    /// [`Session::read_response_sent`] before its last octet can reach the peer.
    ReadResponse(ReadRequest),
    /// Nothing of the session's own is due: look at the SQ head and ask
    /// [`Session::admit`] if [`SqHead::needs_admit`] says so.
    SendQueue,
}

/// The SQ head as [`Session::admit`] needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqHead {
    /// The work request carries the read fence (`IB_SEND_FENCE`): it waits until no Read
    /// is outstanding.
    pub fenced: bool,
    /// An RDMA Read and the Data Sink its Request names.
    pub read: Option<ReadSink>,
}

impl SqHead {
    /// Whether [`Session::admit`] has anything to decide for this head. A work request
    /// that is neither fenced nor an RDMA Read may be sent whenever
    /// [`Session::poll_transmit`] offers the SQ ([`Transmit::SendQueue`], which it does
    /// only while the session is active): `admit` would answer [`Admit::Go`] and change
    /// nothing, so the shell may send it without asking.
    pub const fn needs_admit(&self) -> bool {
        self.fenced || self.read.is_some()
    }
}

/// The answer of [`Session::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send it now; a Read is in the ORQ already (its Response may arrive as soon as the
    /// Request is queued).
    Go,
    /// Not now: the read fence or ORD holds it until a Read completes (the shell is woken
    /// by [`Session::handle_rx`]).
    Wait,
    /// Never: the Read cannot be sent on this connection (ORD 0, or its sink range wraps
    /// 64 bits); complete it in error.
    Refuse,
}

/// Completions the session delivers while [`Session::handle_rx`] runs, in stream order,
/// each once the FPDU carrying it passed its CRC check.
///
/// A method that returns an error rejects the message after delivery (RFC 5040 §7.1
/// rules 2-3); the session sends the cause in its TERMINATE.
pub trait SessionEvents {
    /// A message of the ULP on QN 0 completed into the receive buffer
    /// [`MemoryLookup::check_untagged`] took for it (never the Send RTR).
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn recv_done(&mut self, msg: &MessageDone) -> Result<(), TermCause>;

    /// The oldest outstanding Read of the ULP completed (never the Read RTR): `done.stag`
    /// is its sink STag, `done.len` the octets placed (its size).
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn read_done(&mut self, done: &TaggedDone) -> Result<(), TermCause>;

    /// The peer invalidated `stag` with a Send with Invalidate that completed (accepted
    /// before by [`MemoryLookup::check_invalidate`]); called before
    /// [`SessionEvents::recv_done`] of that message.
    fn invalidate(&mut self, stag: u32);
}

/// Per-connection parameters of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// Inbound Read depth (IRD): Read Requests the peer may have outstanding.
    pub ird: u32,
    /// Outbound Read depth (ORD): Reads this side may have outstanding.
    pub ord: u32,
    /// How long (ms) the peer-to-peer Responder waits for the first FPDU, and a pending
    /// TERMINATE for the transport.
    pub timeout_ms: u64,
}

impl SessionConfig {
    /// The configuration with IRD and ORD capped at [`super::orq::MAX_ORD`], as the session
    /// uses it.
    pub const fn capped(self) -> Self {
        let max = super::orq::MAX_ORD;
        SessionConfig {
            ird: if self.ird < max { self.ird } else { max },
            ord: if self.ord < max { self.ord } else { max },
            timeout_ms: self.timeout_ms,
        }
    }
}

/// The lifecycle events [`Session::poll_event`] reported so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reported {
    Nothing,
    Failed,
    Closed,
}

/// The RDMAP session of one connection (see the module documentation), its ORQ and IRQ
/// in the slots of `S` ([`Store`]).
#[derive(Debug)]
pub struct Session<S: Store = Fixed> {
    cfg: SessionConfig,
    dec: Decoder<S>,
    irq: Irq<S::Irq>,
    rtr: RtrPhase,
    state: SessionState,
    /// How far [`Session::poll_event`] has reported the state.
    reported: Reported,
    /// [`Session::admit`] held the SQ head for an outstanding Read (ORD or the read
    /// fence): the next Read completion wakes the transmit side.
    head_waits: bool,
}

impl Session {
    /// A session that is not started, with an ORQ and IRQ of
    /// [`super::orq::ORQ_CAPACITY`] and [`irq::IRQ_CAPACITY`] slots in place: it decodes
    /// nothing ([`Session::start`] starts it).
    pub const IDLE: Session = Session::idle(Orq::new(), Irq::new());

    /// The session of a connection that completed MPA negotiation `n` at time `now` (ms),
    /// with inbound and outbound Read depths `cfg.ird` and `cfg.ord` (see
    /// [`Session::start`]), its queues in place (inline: see [`Orq::new`]).
    #[inline]
    pub fn new(n: &Negotiated, cfg: SessionConfig, now: u64) -> Self {
        let mut s = Self::IDLE;
        s.start(n, cfg, now);
        s
    }
}

impl<S: Store> Session<S> {
    /// A session that is not started, whose outbound Reads go into `orq` and the peer's
    /// Read Requests into `irq`: it decodes nothing ([`Session::start`] starts it).
    pub const fn idle(orq: Orq<S::Orq>, irq: Irq<S::Irq>) -> Self {
        Session {
            cfg: SessionConfig {
                ird: 0,
                ord: 0,
                timeout_ms: 0,
            },
            dec: Decoder::with_orq(
                RxConfig {
                    markers: false,
                    crc: false,
                    fpduptr: FpduPtrBase::UlpduLength,
                },
                DdpConfig {
                    wire: ulpdu::Config::RFC,
                    ird: 0,
                },
                orq,
            ),
            irq,
            rtr: RtrPhase::Done,
            state: SessionState::Closed(Close::PeerTerminated(None)),
            reported: Reported::Closed,
            head_waits: false,
        }
    }

    /// Starts this session in place for a connection that completed MPA negotiation `n`
    /// at time `now` (ms), whatever it held before; its queues are emptied. IRD and ORD
    /// are `cfg.ird` and `cfg.ord` capped at [`super::orq::MAX_ORD`]
    /// ([`SessionConfig::capped`]) and at the queues' capacities less the slot each keeps
    /// for a zero-length Read RTR (RFC 6581 §5, §9.1): an ORQ of `ord + 1` and an IRQ of
    /// `ird + 1` slots serve depths `ord` and `ird` in full.
    pub fn start(&mut self, n: &Negotiated, cfg: SessionConfig, now: u64) {
        let cfg = cfg.capped();
        let room = |cap: usize| u32::try_from(cap.saturating_sub(1)).unwrap_or(u32::MAX);
        let cfg = SessionConfig {
            ird: cfg.ird.min(room(self.irq.capacity())),
            ord: cfg.ord.min(room(self.dec.ddp().orq().capacity())),
            timeout_ms: cfg.timeout_ms,
        };
        let responder = n.role == Role::Responder;
        self.rtr = match n.send_gate {
            SendGate::RtrFirst(t) => RtrPhase::ToSend(t),
            SendGate::AfterFirstRxFpdu if responder && n.p2p => RtrPhase::Awaiting {
                deadline: now.saturating_add(cfg.timeout_ms),
                send_rtr: n.rtr == Some(RtrType::Send),
            },
            _ => RtrPhase::Done,
        };
        self.cfg = cfg;
        self.dec.restart(
            n.rx_config(),
            DdpConfig {
                wire: ulpdu::Config::for_mpa_rev(n.rev, false),
                ird: cfg.ird,
            },
        );
        if responder && n.rtr == Some(RtrType::Read) && cfg.ird == 0 {
            // A zero-length Read RTR needs one inbound Read slot (RFC 6581 §9.1): with IRD
            // 0, one beyond it, for the first FPDU only (`handle_rx` closes it after the
            // batch that holds it, where it is taken already). A Read of any other length
            // may not use it. With IRD 1 or more the RTR takes one of IRD's slots.
            self.dec.open_rtr_slot();
        }
        self.irq.clear();
        self.state = SessionState::Active;
        self.reported = Reported::Nothing;
        self.head_waits = false;
    }

    /// The configuration in use (IRD and ORD capped).
    pub const fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// The RX decoder (its deframer's FPDU count, whether it sits between FPDUs, the ORQ).
    pub const fn decoder(&self) -> &Decoder<S> {
        &self.dec
    }

    /// The session's lifecycle state.
    pub const fn state(&self) -> SessionState {
        self.state
    }

    /// Where the RTR exchange stands.
    pub const fn rtr(&self) -> RtrPhase {
        self.rtr
    }

    /// The peer's Read Requests still to answer.
    pub const fn irq(&self) -> &Irq<S::Irq> {
        &self.irq
    }

    /// Outbound Reads (the Read RTR included) whose Responses are outstanding.
    pub const fn reads_outstanding(&self) -> usize {
        self.dec.ddp().orq().len()
    }

    /// Consumes every octet `stream` offers at time `now` (ms): the decoder validates each
    /// segment against `mem` before its payload is placed through `stream`, and the
    /// completions go to `events`. A protocol error makes the TERMINATE due; a TERMINATE
    /// from the peer closes the session. Octets that arrive after either are discarded.
    ///
    /// Returns whether the transmit side has new work: a Read Request to answer, a Read
    /// completed while [`Session::admit`] held the SQ head for it (ORD or the read fence),
    /// the Responder's gate opened, or the state changed. A Read completing while nothing
    /// waits for it wakes nothing.
    pub fn handle_rx<R: RxStream, M: MemoryLookup, E: SessionEvents>(
        &mut self,
        stream: &mut R,
        mem: &mut M,
        events: &mut E,
        now: u64,
    ) -> bool {
        if self.state != SessionState::Active {
            let n = stream.available();
            if n > 0 {
                stream.skip(n, None);
            }
            return false;
        }
        let fpdus = self.dec.mpa().fpdus();
        let (irq, orq) = (self.irq.len(), self.reads_outstanding());
        let mut peer_term = None;
        // Both the memory side and the event side move the RTR phase forward.
        let rtr = Cell::new(self.rtr);
        let r = self.dec.process(
            stream,
            &mut SessionMem {
                inner: mem,
                rtr: &rtr,
            },
            &mut SessionRx {
                inner: events,
                rtr: &rtr,
                irq: &mut self.irq,
                peer_term: &mut peer_term,
            },
        );
        self.rtr = rtr.get();
        let mut wake = self.irq.len() > irq;
        if self.head_waits && self.reads_outstanding() < orq {
            self.head_waits = false;
            wake = true;
        }
        if self.dec.mpa().fpdus() != fpdus {
            if let RtrPhase::Awaiting { .. } = self.rtr {
                self.rtr = RtrPhase::Done;
                wake = true;
            }
            // The Read RTR's slot (`start`) served the first FPDU; a Request in the same
            // batch behind the RTR found it taken already.
            if self.dec.ddp().rtr_slot_open() {
                self.dec.set_ird(self.cfg.ird);
            }
        }
        match r {
            Err(t) => {
                self.terminate(t, now);
                wake = true;
            }
            Ok(()) => {
                if let Some(t) = peer_term {
                    self.close(Close::PeerTerminated(t));
                    wake = true;
                } else if self.dec.state() == RxState::PeerTerminated {
                    self.close(Close::PeerTerminated(None));
                    wake = true;
                }
            }
        }
        wake
    }

    /// What [`Session::poll_transmit`] takes next, decided without taking it: the order is
    /// the TERMINATE, the RTR, then the queues (Read Responses before the SQ).
    fn next(&self) -> Next {
        match self.state {
            SessionState::TerminateDue { term, deadline } => Next::Terminate(term, deadline),
            SessionState::Terminating { .. } | SessionState::Closed(_) => Next::Nothing,
            SessionState::Active => match self.rtr {
                RtrPhase::Awaiting { .. } => Next::Nothing,
                RtrPhase::ToSend(t) => Next::Rtr(t),
                RtrPhase::ReadOutstanding | RtrPhase::Done => Next::Queues,
            },
        }
    }

    /// Whether [`Session::poll_transmit`] would now return a message of the session's own
    /// (our TERMINATE, the RTR or a Read Response) rather than `None` or
    /// [`Transmit::SendQueue`]: when no work request is posted, the shell's transmit path
    /// has nothing to do unless this is `true`.
    pub fn transmit_pending(&self) -> bool {
        match self.next() {
            Next::Nothing => false,
            Next::Terminate(..) | Next::Rtr(_) => true,
            Next::Queues => !self.irq.is_empty(),
        }
    }

    /// The next message to send at time `now` (ms), or `None` if nothing may be sent now
    /// (closed, a TERMINATE out, or the Responder still waits for the first FPDU). See
    /// [`Transmit`] for what the shell does with each; the order is the TERMINATE, the
    /// RTR, Read Responses, then the SQ.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Transmit> {
        match self.next() {
            Next::Nothing => None,
            Next::Terminate(term, deadline) => {
                self.state = SessionState::Terminating {
                    cause: term.cause,
                    deadline,
                };
                Some(Transmit::Terminate(term))
            }
            Next::Rtr(t) => {
                if t == RtrType::Read {
                    // Before the Request can reach the peer: its zero-length Response is
                    // the first the ORQ accepts.
                    if self.dec.post_read(ReadSink::default()).is_err() {
                        // Not reached: the ORQ is empty before the RTR.
                        self.fail(TermCause::rdmap(RdmapError::LocalCatastrophic), now);
                        return self.poll_transmit(now);
                    }
                    self.rtr = RtrPhase::ReadOutstanding;
                } else {
                    self.rtr = RtrPhase::Done;
                }
                Some(Transmit::Rtr(t))
            }
            Next::Queues => Some(
                self.irq
                    .pop()
                    .map_or(Transmit::SendQueue, Transmit::ReadResponse),
            ),
        }
    }

    /// Whether the SQ head `wr` may be sent now (after [`Transmit::SendQueue`]). A fenced
    /// work request waits until no Read is outstanding; a Read waits while ORD Reads are;
    /// an admitted Read's sink enters the ORQ, so only it can take the Response.
    pub fn admit(&mut self, wr: &SqHead) -> Admit {
        if self.state != SessionState::Active {
            return Admit::Wait;
        }
        let out = self.reads_outstanding();
        if wr.fenced && out != 0 {
            self.head_waits = true;
            return Admit::Wait;
        }
        let Some(sink) = wr.read else {
            return Admit::Go;
        };
        if self.cfg.ord == 0 {
            return Admit::Refuse;
        }
        if out >= self.cfg.ord as usize {
            self.head_waits = true;
            return Admit::Wait;
        }
        match self.dec.post_read(sink) {
            Ok(()) => Admit::Go,
            Err(PushError::Wraps) => Admit::Refuse,
            // ord <= MAX_ORD < ORQ_CAPACITY: not reached.
            Err(PushError::Full) => {
                self.head_waits = true;
                Admit::Wait
            }
        }
    }

    /// Sets the remote operations the QP admits from the next segment on: its access
    /// flags, which the memory's rights cannot widen ([`super::ddp_rx::DdpRx::set_qp_access`];
    /// [`QpAccess::ALL`] until set, kept across [`Session::start`]).
    pub fn set_qp_access(&mut self, access: QpAccess) {
        self.dec.set_qp_access(access);
    }

    /// Takes back the RDMA Read [`Session::admit`] let in last, with sink `sink`, whose
    /// Request the shell will not send after all (its work request was withdrawn from
    /// the SQ before it started): its ORQ entry goes, so that the next Read Response is
    /// checked against the sink of a Read whose Request went out (RFC 5040 §5.2). Call it
    /// before anything else reaches the session. Returns whether the entry was removed
    /// (`false`: the newest entry is not that Read; nothing changes).
    pub fn withdraw_read(&mut self, sink: ReadSink) -> bool {
        self.dec.withdraw_read(sink)
    }

    /// The shell is about to queue the last octet of the Read Response it got from
    /// [`Transmit::ReadResponse`]: the Request's IRD slot is free again.
    pub fn read_response_sent(&mut self) {
        self.dec.release_ird();
    }

    /// The shell queued the TERMINATE of [`Transmit::Terminate`]: the session closes.
    pub fn terminate_sent(&mut self) {
        if let SessionState::Terminating { cause, .. } = self.state {
            self.close(Close::Terminated(cause));
        }
    }

    /// A local error the shell found at time `now` (ms) (a Read Response's source gone, a
    /// message that cannot be built): the first error makes its TERMINATE due; later ones
    /// are ignored (RFC 5040 §7.1 rule 4).
    pub fn fail(&mut self, cause: TermCause, now: u64) {
        self.terminate(Terminate::new(cause), now);
    }

    /// Time `now` (ms) reached or passed [`Session::poll_timeout`]: the peer-to-peer
    /// Responder that saw no FPDU terminates (MPA local catastrophic error, RFC 6581 §9.3),
    /// and a TERMINATE not sent by its deadline is given up (the session closes).
    pub fn handle_timeout(&mut self, now: u64) {
        match self.state {
            SessionState::TerminateDue { term, deadline } if now >= deadline => {
                self.close(Close::TerminateTimedOut(term.cause));
            }
            SessionState::Terminating { cause, deadline } if now >= deadline => {
                self.close(Close::TerminateTimedOut(cause));
            }
            SessionState::Active => {
                if let RtrPhase::Awaiting { deadline, .. } = self.rtr {
                    if now >= deadline {
                        self.rtr = RtrPhase::Done;
                        let t = Terminate::new(TermCause::mpa(MpaErrorCode::LocalCatastrophic));
                        self.terminate(t, now);
                    }
                }
            }
            _ => {}
        }
    }

    /// When (ms) [`Session::handle_timeout`] has something to do, if ever.
    pub const fn poll_timeout(&self) -> Option<u64> {
        match self.state {
            SessionState::TerminateDue { deadline, .. }
            | SessionState::Terminating { deadline, .. } => Some(deadline),
            SessionState::Active => match self.rtr {
                RtrPhase::Awaiting { deadline, .. } => Some(deadline),
                _ => None,
            },
            SessionState::Closed(_) => None,
        }
    }

    /// The next lifecycle event not yet reported (see [`Event`]).
    pub fn poll_event(&mut self) -> Option<Event> {
        match self.state {
            SessionState::Active => None,
            SessionState::TerminateDue { term, .. } if self.reported < Reported::Failed => {
                self.reported = Reported::Failed;
                Some(Event::Failed(term.cause))
            }
            SessionState::Terminating { cause, .. } if self.reported < Reported::Failed => {
                self.reported = Reported::Failed;
                Some(Event::Failed(cause))
            }
            SessionState::Closed(c) if self.reported < Reported::Closed => {
                if self.reported < Reported::Failed {
                    if let Some(cause) = c.local_cause() {
                        self.reported = Reported::Failed;
                        return Some(Event::Failed(cause));
                    }
                }
                self.reported = Reported::Closed;
                Some(Event::Closed(c))
            }
            _ => None,
        }
    }

    fn terminate(&mut self, term: Terminate, now: u64) {
        if self.state != SessionState::Active {
            return;
        }
        self.dec_fail();
        self.irq.clear();
        self.state = SessionState::TerminateDue {
            term,
            deadline: now.saturating_add(self.cfg.timeout_ms),
        };
    }

    fn close(&mut self, c: Close) {
        if matches!(self.state, SessionState::Closed(_)) {
            return;
        }
        self.dec_fail();
        self.irq.clear();
        self.state = SessionState::Closed(c);
    }

    /// Stops the decoder: nothing is placed or reported any more.
    fn dec_fail(&mut self) {
        self.dec.fail();
    }
}

/// The shell's [`MemoryLookup`] seen through the RTR exchange: the Send RTR is taken
/// without a receive buffer, and a tagged segment means the first message is not it.
struct SessionMem<'a, M: MemoryLookup> {
    inner: &'a mut M,
    rtr: &'a Cell<RtrPhase>,
}

impl<M: MemoryLookup> SessionMem<'_, M> {
    fn send_rtr_expected(&self) -> bool {
        send_rtr_expected(self.rtr)
    }

    fn not_send_rtr(&mut self) {
        not_send_rtr(self.rtr);
    }
}

/// Whether the Responder still expects the zero-length Send RTR.
fn send_rtr_expected(rtr: &Cell<RtrPhase>) -> bool {
    matches!(rtr.get(), RtrPhase::Awaiting { send_rtr: true, .. })
}

/// The first message arrived and was not the Send RTR (or was): no later one is it.
fn not_send_rtr(rtr: &Cell<RtrPhase>) {
    if let RtrPhase::Awaiting { deadline, .. } = rtr.get() {
        rtr.set(RtrPhase::Awaiting {
            deadline,
            send_rtr: false,
        });
    }
}

impl<M: MemoryLookup> MemoryLookup for SessionMem<'_, M> {
    fn check_tagged(
        &mut self,
        stag: u32,
        to: u64,
        len: u32,
        access: Access,
    ) -> Result<(), TaggedCheck> {
        self.not_send_rtr();
        self.inner.check_tagged(stag, to, len, access)
    }

    fn check_untagged(
        &mut self,
        qn: u32,
        msn: u32,
        mo: u32,
        len: u32,
    ) -> Result<(), UntaggedCheck> {
        if qn == 0 && self.send_rtr_expected() {
            if is_send_rtr(msn, mo, len) {
                // Completed without a receive buffer (see `SessionRx::message_done`).
                return Ok(());
            }
            // The first message is not the negotiated RTR: it is the ULP's (RFC 6581 says
            // no more; like the C siw, rsiw takes it as it comes).
            self.not_send_rtr();
        }
        self.inner.check_untagged(qn, msn, mo, len)
    }

    fn check_invalidate(&mut self, stag: u32) -> Result<(), InvalidateCheck> {
        self.inner.check_invalidate(stag)
    }
}

/// Whether an untagged segment on QN 0 at `msn`/`mo` of `len` octets is the zero-length
/// Send RTR: the first Send (MSN 1, RFC 5041 §5.1), empty, in one segment.
const fn is_send_rtr(msn: u32, mo: u32, len: u32) -> bool {
    msn == 1 && mo == 0 && len == 0
}

/// The decoder's events seen by the session: RTR messages and Read Requests are the
/// session's; completions go on to the shell.
struct SessionRx<'a, E: SessionEvents, I: Slots<ReadRequest>> {
    inner: &'a mut E,
    rtr: &'a Cell<RtrPhase>,
    irq: &'a mut Irq<I>,
    peer_term: &'a mut Option<Option<Terminate>>,
}

impl<E: SessionEvents, I: Slots<ReadRequest>> SessionRx<'_, E, I> {
    fn not_send_rtr(&mut self) {
        not_send_rtr(self.rtr);
    }
}

impl<E: SessionEvents, I: Slots<ReadRequest>> RxEvents for SessionRx<'_, E, I> {
    fn message_done(&mut self, msg: &MessageDone) -> Result<(), TermCause> {
        let rtr =
            send_rtr_expected(self.rtr) && msg.imm.is_none() && is_send_rtr(msg.msn, 0, msg.len);
        self.not_send_rtr();
        if let Some(stag) = msg.inval_stag {
            self.inner.invalidate(stag);
        }
        if rtr {
            return Ok(());
        }
        self.inner.recv_done(msg)
    }

    fn tagged_done(&mut self, done: &TaggedDone) -> Result<(), TermCause> {
        self.not_send_rtr();
        if done.opcode != Opcode::ReadResponse {
            // A Write completes nothing at the Data Sink (RFC 5040 §5.1).
            return Ok(());
        }
        if self.rtr.get() == RtrPhase::ReadOutstanding {
            // The answer to the Read RTR, the first Read sent (RFC 6581 §5).
            self.rtr.set(RtrPhase::Done);
            return Ok(());
        }
        self.inner.read_done(done)
    }

    fn read_request(&mut self, req: &ReadRequest) -> Result<(), TermCause> {
        self.not_send_rtr();
        // The decoder admits at most IRD (< the IRQ's capacity, or 1 for the Read RTR)
        // unanswered Requests.
        self.irq
            .push(*req)
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

    fn terminate_received(&mut self, term: Option<&Terminate>) {
        *self.peer_term = Some(term.copied());
    }
}
