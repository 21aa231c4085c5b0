// SPDX-License-Identifier: GPL-2.0

//! Host harness for the RDMAP session engine (`engine::session`) and the `session` fuzz
//! target: a shell that drives a [`Session`] the way the kernel's connection does (octets
//! from the peer, SQ heads, transmit polling, timeouts, local failures), in a script of
//! operations, and checks on every step that
//! - every octet placed lies inside a target the local side granted: a Write inside an MR
//!   granting remote write (an approved check covering it), a Read Response inside the
//!   sink of a Read the session admitted and has not completed, a Send inside a posted
//!   receive buffer;
//! - Read completions come in admission order, each for the Read's sink and size, never
//!   for the Read RTR;
//! - nothing is placed, completed or sent after the session stopped (our TERMINATE due or
//!   the peer's received), but our one TERMINATE; the lifecycle events come once each,
//!   Failed before Closed;
//! - the peer-to-peer Initiator sends the RTR before anything else, and the Responder
//!   sends nothing before the first FPDU arrived;
//! - at most IRD Read Requests wait for their Response (with IRD 0, the peer-to-peer
//!   Responder answers the Read RTR and nothing else), at most ORD Reads are outstanding,
//!   and a fenced work request is admitted only with no Read outstanding;
//! - a QP's access flags limit what the memory grants: no Write is placed while the QP
//!   admits none, and no Read Request of non-zero size accepted while it admits no Reads
//!   is answered.
//!
//! Needs `mpa_util` and `ddp_util` declared next to it at the crate root.

#![allow(dead_code, unreachable_pub)]

use crate::ddp_util::{check_placement, Framing, MockMem};
use crate::mpa_util::SliceRx;
use rsiw_core::engine::ddp_rx::{Access, MessageDone, QpAccess, TaggedDone};
use rsiw_core::engine::orq::{Orq, OrqEntry, ReadSink};
use rsiw_core::engine::ring::Store;
use rsiw_core::engine::session::irq::{self, Irq};
use rsiw_core::engine::session::{
    Admit, Close, Event, Session, SessionConfig, SessionEvents, SessionState, SqHead, Transmit,
};
use rsiw_core::engine::startup::{Negotiated, PrivateData, Role, SendGate};
use rsiw_core::engine::stream::PlaceTarget;
use rsiw_core::wire::marker::FpduPtrBase;
use rsiw_core::wire::mpa::RtrType;
use rsiw_core::wire::rdmap::{RdmapError, ReadRequest};
use rsiw_core::wire::terminate::TermCause;
use std::collections::VecDeque;

/// The timeout the harness configures (ms).
pub const TIMEOUT_MS: u64 = 1000;

/// A negotiated connection for the tests: MPA Rev 2 with `framing`, `role`, and if `rtr`
/// the peer-to-peer model with that RTR type.
pub fn negotiated(role: Role, framing: Framing, rtr: Option<RtrType>) -> Negotiated {
    Negotiated {
        role,
        rev: 2,
        crc: framing.crc,
        markers_tx: framing.markers,
        markers_rx: framing.markers,
        large_fpdu_tx: false,
        fpduptr: FpduPtrBase::UlpduLength,
        ird_ord: None,
        p2p: rtr.is_some(),
        rtr,
        draft_rtr_frame: false,
        send_gate: match (role, rtr) {
            (Role::Initiator, Some(t)) => SendGate::RtrFirst(t),
            (Role::Initiator, None) => SendGate::Free,
            (Role::Responder, _) => SendGate::AfterFirstRxFpdu,
        },
        private_data: PrivateData::EMPTY,
    }
}

/// What the session told the harness, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Recv(MessageDone),
    ReadDone(TaggedDone),
    Invalidate(u32),
    Tx(Transmit),
    Admit(SqHead, Admit),
    Event(Event),
}

/// The recording [`SessionEvents`] of the harness.
#[derive(Debug, Default)]
struct Rec {
    out: Vec<Out>,
    /// Reject the n-th completion (0-based) with this cause.
    reject: Option<(usize, TermCause)>,
    calls: usize,
}

impl Rec {
    fn fallible(&mut self, o: Out) -> Result<(), TermCause> {
        self.out.push(o);
        let n = self.calls;
        self.calls += 1;
        match self.reject {
            Some((k, c)) if k == n => Err(c),
            _ => Ok(()),
        }
    }
}

impl SessionEvents for Rec {
    fn recv_done(&mut self, msg: &MessageDone) -> Result<(), TermCause> {
        self.fallible(Out::Recv(*msg))
    }
    fn read_done(&mut self, done: &TaggedDone) -> Result<(), TermCause> {
        self.fallible(Out::ReadDone(*done))
    }
    fn invalidate(&mut self, stag: u32) {
        self.out.push(Out::Invalidate(stag));
    }
}

/// One operation of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Octets from the peer.
    Rx(Vec<u8>),
    /// A work request reaches the SQ head.
    Post(SqHead),
    /// A work request reaches the SQ head and, once admitted, turns out withdrawn (its
    /// slot went stale, as a user may clear it): the shell does not start it, and takes
    /// an admitted Read back ([`Session::withdraw_read`]).
    PostWithdrawn(SqHead),
    /// Poll the transmit side until it has nothing of its own; `terminate_sent`: report a
    /// TERMINATE queued (otherwise the transport is stuck).
    Transmit { terminate_sent: bool },
    /// Time advances by this many ms; timeouts are handled.
    Advance(u64),
    /// The shell fails the session with this cause.
    Fail(TermCause),
    /// The consumer changes the QP's access flags.
    SetAccess(QpAccess),
}

/// Queue storage allocated for the depths of one connection, as the kernel's shell
/// allocates it: `ord + 1` ORQ and `ird + 1` IRQ slots.
#[derive(Debug)]
pub struct Sized;

impl Store for Sized {
    type Orq = Vec<OrqEntry>;
    type Irq = Vec<ReadRequest>;
}

/// The harness shell (see the module documentation).
pub struct Harness {
    pub session: Session<Sized>,
    pub mem: MockMem,
    rec: Rec,
    pub now: u64,
    /// Reads admitted and not completed, oldest first (the Read RTR included, len 0).
    outstanding: VecDeque<ReadSink>,
    /// Octets Read Responses placed into the oldest outstanding Read's sink so far.
    sink_at: u64,
    /// The SQ head waiting for admission, and whether it is withdrawn once admitted.
    sq: VecDeque<(SqHead, bool)>,
    role: Role,
    rtr: Option<RtrType>,
    /// Something was transmitted.
    sent_any: bool,
    /// The peer-to-peer Responder saw an FPDU.
    fpdu_seen: bool,
    stopped: bool,
    failed: bool,
    closed: bool,
    terminate_out: bool,
    /// The Read RTR's Response arrived.
    rtr_done: bool,
    /// The session held the SQ head (`Admit::Wait`) and has not woken the shell since.
    head_waiting: bool,
    /// What the last `handle_rx` returned (whether the shell's transmit side was woken).
    pub last_wake: bool,
    /// Every placement, in order.
    pub placed: Vec<(PlaceTarget, Vec<u8>)>,
    /// For each Read Request in the IRQ, oldest first: whether it was accepted while the
    /// QP admitted no Reads.
    irq_unread: VecDeque<bool>,
}

impl Harness {
    pub fn new(n: &Negotiated, ird: u32, ord: u32) -> Self {
        let cfg = SessionConfig {
            ird,
            ord,
            timeout_ms: TIMEOUT_MS,
        };
        let depth = cfg.capped();
        let mut session = Session::idle(
            Orq::with_slots(vec![OrqEntry::EMPTY; depth.ord as usize + 1]),
            Irq::with_slots(vec![irq::EMPTY_SLOT; depth.ird as usize + 1]),
        );
        session.start(n, cfg, 0);
        Harness {
            session,
            mem: MockMem::sample(),
            rec: Rec::default(),
            now: 0,
            outstanding: VecDeque::new(),
            sink_at: 0,
            sq: VecDeque::new(),
            role: n.role,
            rtr: n.rtr,
            sent_any: false,
            fpdu_seen: false,
            stopped: false,
            failed: false,
            closed: false,
            terminate_out: false,
            rtr_done: false,
            head_waiting: false,
            last_wake: false,
            placed: Vec::new(),
            irq_unread: VecDeque::new(),
        }
    }

    /// Rejects the `n`-th completion (0-based) delivered to the shell with `cause`.
    pub fn reject(&mut self, n: usize, cause: TermCause) {
        self.rec.reject = Some((n, cause));
    }

    /// Everything the session told the shell so far.
    pub fn out(&self) -> &[Out] {
        &self.rec.out
    }

    /// The transmits, in order.
    pub fn transmits(&self) -> Vec<Transmit> {
        self.rec
            .out
            .iter()
            .filter_map(|o| match o {
                Out::Tx(t) => Some(*t),
                _ => None,
            })
            .collect()
    }

    /// The lifecycle events, in order.
    pub fn events(&self) -> Vec<Event> {
        self.rec
            .out
            .iter()
            .filter_map(|o| match o {
                Out::Event(e) => Some(*e),
                _ => None,
            })
            .collect()
    }

    /// Runs `ops`; panics on the first broken invariant.
    pub fn run(&mut self, ops: &[Op]) {
        for op in ops {
            self.step(op);
        }
    }

    pub fn step(&mut self, op: &Op) {
        match op {
            Op::Rx(data) => self.rx(data),
            Op::Post(h) => self.sq.push_back((*h, false)),
            Op::PostWithdrawn(h) => self.sq.push_back((*h, true)),
            Op::Transmit { terminate_sent } => self.transmit(*terminate_sent),
            Op::Advance(ms) => {
                self.now = self.now.saturating_add(*ms);
                if self.session.poll_timeout().is_some_and(|t| t <= self.now) {
                    self.session.handle_timeout(self.now);
                }
            }
            Op::Fail(c) => self.session.fail(*c, self.now),
            Op::SetAccess(a) => self.session.set_qp_access(*a),
        }
        self.events_and_invariants();
    }

    fn rx(&mut self, data: &[u8]) {
        let active = self.session.state() == SessionState::Active;
        let before = self.rec.out.len();
        let fpdus = self.session.decoder().mpa().fpdus();
        // The sinks a Read Response may fill in this call.
        let sinks: Vec<ReadSink> = self.outstanding.iter().copied().collect();
        self.mem.sinks = sinks.clone();
        let access = self.session.decoder().ddp().qp_access();
        let irq_before = self.session.irq().len();
        let mut s = SliceRx::new(data);
        let wake = self
            .session
            .handle_rx(&mut s, &mut self.mem, &mut self.rec, self.now);
        assert_eq!(s.pos, data.len(), "session left octets unconsumed");
        if !active {
            assert!(s.placed.is_empty(), "placement after the session stopped");
            assert_eq!(
                self.rec.out.len(),
                before,
                "completion after the session stopped"
            );
        }
        if self.session.decoder().mpa().fpdus() != fpdus {
            self.fpdu_seen = true;
        }
        // Read Responses fill the sinks of the outstanding Reads one after the other,
        // oldest first, each from its start without a gap (RFC 5040 §5.2, §7.2):
        // `(k, at)` follows the sink being filled through this call's placements.
        let (mut k, mut at) = (0, self.sink_at);
        for (t, d) in &s.placed {
            check_placement(&self.mem, t, d.len());
            if let PlaceTarget::Tagged {
                stag,
                to,
                access: Access::LocalWrite,
            } = *t
            {
                while sinks.get(k).is_some_and(|s| at == u64::from(s.len)) {
                    (k, at) = (k + 1, 0);
                }
                let s = sinks.get(k).unwrap_or_else(|| {
                    panic!("Read Response placement {t:?} with every sink full")
                });
                assert!(
                    stag == s.stag
                        && s.to.checked_add(at) == Some(to)
                        && at + d.len() as u64 <= u64::from(s.len),
                    "Read Response placement {t:?} +{} is not the next octets of the oldest \
                     open sink {s:?} (+{at} placed)",
                    d.len()
                );
                at += d.len() as u64;
            }
            match *t {
                PlaceTarget::Tagged { access: a, .. } => {
                    assert!(
                        matches!(a, Access::RemoteWrite | Access::LocalWrite),
                        "tagged placement needing {a:?}"
                    );
                    assert!(
                        a != Access::RemoteWrite || access.write,
                        "a Write placed into a QP admitting {access:?}"
                    );
                }
                PlaceTarget::Untagged { qn, msn, mo } => {
                    assert_eq!(qn, 0, "untagged placement on QN {qn}");
                    assert!(
                        msn.wrapping_sub(self.mem.first_msn) < self.mem.posted,
                        "placement into MSN {msn} without a posted receive"
                    );
                    assert!(
                        u64::from(mo) + d.len() as u64 <= u64::from(self.mem.cap),
                        "placement beyond the posted receive"
                    );
                }
            }
            self.placed.push((*t, d.clone()));
        }
        // Requests are only added here (the transmit side takes them); a stop clears them.
        let irq_after = self.session.irq().len();
        for _ in irq_before..irq_after {
            self.irq_unread.push_back(!access.read);
        }
        // Read completions, in admission order; the RTR's completes silently.
        let done: Vec<TaggedDone> = self.rec.out[before..]
            .iter()
            .filter_map(|o| match o {
                Out::ReadDone(d) => Some(*d),
                _ => None,
            })
            .collect();
        let completed = self.outstanding.len() - self.session.reads_outstanding();
        if completed > 0 && self.head_waiting {
            // The shell sends nothing until woken: a missed wake-up stalls the SQ.
            assert!(
                wake,
                "a Read completed while the SQ head waited, without a wake-up"
            );
        }
        if completed > 0 && wake {
            self.head_waiting = false;
        }
        self.last_wake = wake;
        // Placements went only to the sinks of Reads this call completed and the oldest
        // one left.
        assert!(
            k <= completed,
            "Read Response placed into sink {k} with {completed} Reads completed before it"
        );
        self.sink_at = if k == completed { at } else { 0 };
        let mut ulp = done.iter();
        for _ in 0..completed {
            let r = self.outstanding.pop_front().expect("a completed Read");
            if r == ReadSink::default() && self.rtr == Some(RtrType::Read) && !self.rtr_done {
                self.rtr_done = true;
                continue;
            }
            let d = ulp.next().expect("a ULP Read completed without read_done");
            assert_eq!(d.stag, r.stag, "Read completed with another sink");
            assert_eq!(d.len, u64::from(r.len), "Read completed with another size");
        }
        assert!(ulp.next().is_none(), "read_done without a completed Read");
    }

    fn transmit(&mut self, terminate_sent: bool) {
        for _ in 0..200 {
            let pending = self.session.transmit_pending();
            let t = self.session.poll_transmit(self.now);
            assert_eq!(
                pending,
                !matches!(t, None | Some(Transmit::SendQueue)),
                "transmit_pending() said {pending} before {t:?}"
            );
            let Some(t) = t else {
                return;
            };
            self.rec.out.push(Out::Tx(t));
            assert!(!self.terminate_out, "{t:?} after our TERMINATE");
            match t {
                Transmit::Terminate(_) => {
                    self.terminate_out = true;
                    assert!(self.failed, "TERMINATE sent before the QP failed");
                    if terminate_sent {
                        self.session.terminate_sent();
                    }
                    return;
                }
                Transmit::Rtr(r) => {
                    assert!(!self.sent_any, "RTR after another message");
                    assert_eq!(self.role, Role::Initiator);
                    assert_eq!(Some(r), self.rtr, "RTR of another type");
                    if r == RtrType::Read {
                        self.outstanding.push_back(ReadSink::default());
                    }
                }
                Transmit::ReadResponse(r) => {
                    let unread = self
                        .irq_unread
                        .pop_front()
                        .expect("a Response for no Request");
                    assert!(
                        !unread || r.size == 0,
                        "answered a Read of {} octets accepted while the QP admitted no Reads",
                        r.size
                    );
                    self.check_may_send();
                    self.session.read_response_sent();
                }
                Transmit::SendQueue => {
                    let Some((h, withdrawn)) = self.sq.front().copied() else {
                        return;
                    };
                    let a = self.session.admit(&h);
                    if !h.needs_admit() {
                        // The shell sends such a head without asking (`SqHead::needs_admit`).
                        assert_eq!(a, Admit::Go, "a head that needs no admission was held");
                    }
                    self.rec.out.push(Out::Admit(h, a));
                    self.head_waiting = a == Admit::Wait;
                    match a {
                        Admit::Wait => return,
                        Admit::Refuse => {
                            self.sq.pop_front();
                        }
                        Admit::Go => {
                            self.check_may_send();
                            if h.fenced {
                                assert!(self.outstanding.is_empty(), "fenced WR with Reads out");
                            }
                            if withdrawn {
                                // Not sent after all; an admitted Read is taken back
                                // before anything else reaches the session.
                                if let Some(s) = h.read {
                                    assert!(
                                        self.session.withdraw_read(s),
                                        "the Read just admitted could not be withdrawn"
                                    );
                                }
                                self.sq.pop_front();
                                continue;
                            }
                            if let Some(s) = h.read {
                                self.outstanding.push_back(s);
                                assert!(
                                    self.outstanding.len()
                                        <= self.session.config().ord as usize + 1,
                                    "more Reads outstanding than ORD"
                                );
                            }
                            self.sq.pop_front();
                        }
                    }
                }
            }
            self.sent_any = true;
        }
    }

    /// Initiator: the RTR went first; Responder: the first FPDU arrived.
    fn check_may_send(&self) {
        match (self.role, self.rtr) {
            (Role::Initiator, Some(_)) => assert!(self.sent_any, "sent before the RTR"),
            (Role::Responder, Some(_)) => {
                assert!(self.fpdu_seen, "Responder sent before the first FPDU")
            }
            _ => {}
        }
    }

    fn events_and_invariants(&mut self) {
        while let Some(e) = self.session.poll_event() {
            self.rec.out.push(Out::Event(e));
            match e {
                Event::Failed(_) => {
                    assert!(!self.failed && !self.closed, "Failed twice or after Closed");
                    self.failed = true;
                }
                Event::Closed(c) => {
                    assert!(!self.closed, "Closed twice");
                    if c.local_cause().is_some() {
                        assert!(self.failed, "closed on our TERMINATE without Failed");
                    }
                    if let Close::Terminated(_) = c {
                        assert!(self.terminate_out, "Terminated before the TERMINATE went");
                    }
                    self.closed = true;
                }
            }
        }
        if self.session.state() != SessionState::Active {
            self.stopped = true;
            assert_eq!(self.session.irq().len(), 0, "Read Requests kept after stop");
            self.irq_unread.clear();
        }
        assert_eq!(
            self.irq_unread.len(),
            self.session.irq().len(),
            "the IRQ changed outside receive and transmit"
        );
        // IRD, and one more slot for the Read RTR only while it is the only Request the
        // peer-to-peer Responder has seen (RFC 6581 §5): IRD 0 answers that one alone, and
        // only if it reads nothing.
        let answered: Vec<_> = self
            .rec
            .out
            .iter()
            .filter_map(|o| match o {
                Out::Tx(Transmit::ReadResponse(r)) => Some(*r),
                _ => None,
            })
            .collect();
        let waiting = self.session.irq().len();
        let ird = self.session.config().ird as usize;
        if self.role == Role::Responder && self.rtr == Some(RtrType::Read) && ird == 0 {
            assert!(
                answered.len() + waiting <= 1,
                "IRD 0: a Read Request besides the Read RTR admitted"
            );
            assert!(
                answered.iter().all(|r| r.size == 0),
                "IRD 0: the Read RTR's slot answered a Read of non-zero length"
            );
        } else {
            assert!(waiting <= ird, "more Read Requests waiting than IRD");
        }
    }
}

/// Sinks the fuzz scripts name: inside the local-write MR 0x200, at the top of the 64-bit
/// TO space in MR 0x400, zero-length, in the remote-write-only MR 0x100 (a Read whose
/// Response then fails the local-write check), and wrapping 64 bits (refused).
pub const SINKS: [ReadSink; 5] = [
    ReadSink {
        stag: 0x200,
        to: 0x2000,
        len: 0x800,
    },
    ReadSink {
        stag: 0x400,
        to: u64::MAX - 0x100,
        len: 0x80,
    },
    ReadSink {
        stag: 0x200,
        to: 0x2800,
        len: 0,
    },
    ReadSink {
        stag: 0x100,
        to: 0x1000,
        len: 0x40,
    },
    ReadSink {
        stag: 0x200,
        to: u64::MAX,
        len: 0x10,
    },
];

/// Decodes a fuzz input into a negotiation, IRD/ORD and a script (layout in
/// `fuzz/README.md`): `[sel, depths, op...]`; `sel` bits 0-1 markers/CRC, bits 2-3 role and
/// p2p (0 Initiator, 1 Responder, 2 p2p Initiator, 3 p2p Responder), bits 4-5 RTR type;
/// `depths` IRD low nibble, ORD high nibble (each mod 9). Each op is one octet `k` (low 3
/// bits the kind) and its arguments.
pub fn decode(data: &[u8]) -> Option<(Negotiated, u32, u32, Vec<Op>)> {
    let [sel, depths, rest @ ..] = data else {
        return None;
    };
    let framing = Framing {
        markers: sel & 1 != 0,
        crc: sel & 2 != 0,
    };
    let role = if sel & 4 == 0 {
        Role::Initiator
    } else {
        Role::Responder
    };
    let rtr = (sel & 8 != 0).then(|| match (sel >> 4) & 3 {
        0 => RtrType::Read,
        1 => RtrType::Write,
        _ => RtrType::Send,
    });
    let n = negotiated(role, framing, rtr);
    let ird = u32::from(depths & 0xF) % 9;
    let ord = u32::from(depths >> 4) % 9;
    let mut ops = Vec::new();
    let mut i = 0;
    while let Some(&k) = rest.get(i) {
        i += 1;
        let arg = rest.get(i).copied().unwrap_or(0);
        match k & 7 {
            0 | 1 => {
                // Octets from the peer: `arg` + 1 of them (k bit 3: and 256 more).
                i = (i + 1).min(rest.len());
                let n = usize::from(arg) + 1 + if k & 8 != 0 { 256 } else { 0 };
                let end = (i + n).min(rest.len());
                ops.push(Op::Rx(rest[i..end].to_vec()));
                i = end;
            }
            2 => {
                i += 1;
                let h = SqHead {
                    fenced: arg & 0x80 != 0,
                    read: (arg & 0x40 != 0).then(|| SINKS[usize::from(arg & 7) % SINKS.len()]),
                };
                ops.push(if arg & 0x20 != 0 {
                    Op::PostWithdrawn(h)
                } else {
                    Op::Post(h)
                });
            }
            3 | 4 => ops.push(Op::Transmit {
                terminate_sent: k & 8 == 0,
            }),
            5 => {
                i += 1;
                ops.push(Op::Advance(u64::from(arg) * 10));
            }
            6 => ops.push(Op::Fail(TermCause::rdmap(RdmapError::LocalCatastrophic))),
            _ => {
                i += 1;
                ops.push(if arg & 0x80 != 0 {
                    Op::SetAccess(QpAccess {
                        write: arg & 1 != 0,
                        read: arg & 2 != 0,
                        atomic: arg & 4 != 0,
                    })
                } else {
                    Op::Post(SqHead {
                        fenced: false,
                        read: None,
                    })
                });
            }
        }
    }
    Some((n, ird, ord, ops))
}

/// Every `Rx` of `ops` split into single octets.
pub fn octet_by_octet(ops: &[Op]) -> Vec<Op> {
    ops.iter()
        .flat_map(|op| match op {
            Op::Rx(d) => d.iter().map(|b| Op::Rx(vec![*b])).collect::<Vec<_>>(),
            o => vec![o.clone()],
        })
        .collect()
}

/// The outputs, the merged placements and the final state of a run.
pub type Outcome = (Vec<Out>, Vec<(PlaceTarget, Vec<u8>)>, SessionState);

/// What a run leaves, for comparing segmentations: the outputs, the placements merged,
/// and the final state.
pub fn outcome(h: &Harness) -> Outcome {
    (
        h.out().to_vec(),
        crate::ddp_util::merge(&h.placed),
        h.session.state(),
    )
}

/// One case of the `session` fuzz target: the script `data` encodes, run as it is and
/// with every peer octet fed alone; panics unless every invariant of [`Harness`] holds in
/// both and both give the same outcome.
pub fn session_case(data: &[u8]) {
    let Some((n, ird, ord, ops)) = decode(data) else {
        return;
    };
    let mut a = Harness::new(&n, ird, ord);
    a.run(&ops);
    let mut b = Harness::new(&n, ird, ord);
    b.run(&octet_by_octet(&ops));
    assert_eq!(outcome(&a), outcome(&b), "segmentation changed the outcome");
}

/// The Read Request a test peer sends.
pub const fn read_request(sink_stag: u32, size: u32, src_stag: u32, src_to: u64) -> ReadRequest {
    ReadRequest {
        sink_stag,
        sink_to: 0x9000,
        size,
        src_stag,
        src_to,
    }
}
