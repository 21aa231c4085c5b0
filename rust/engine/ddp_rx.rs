// SPDX-License-Identifier: GPL-2.0

//! The DDP/RDMAP half of the RX FPDU decoder (RFC 5041 §5-§7, RFC 5040 §5-§7, RFC 7306
//! §5-§8): a [`UlpduReceiver`] that validates each ULPDU the MPA deframer
//! ([`super::mpa_rx::MpaRx`]) hands it, decides where its payload lands, and reports
//! completed messages.
//!
//! Per ULPDU the receiver
//! 1. buffers only the header octets (at most [`MAX_HEADER_LEN`], in the struct) across any
//!    segmentation and parses them with [`UlpduHeader::parse`] (DV, RV, opcode, T bit, QN,
//!    L/MO of header-only messages, RDMAP header), then checks the ULPDU length against the
//!    header ([`UlpduHeader::check_segment_len`]);
//! 2. validates the segment against the stream state and the shell's memory
//!    ([`MemoryLookup`]) before anything is placed (RFC 5041 §7.1, RFC 5040 §7.2; see
//!    [`DdpRx`] for the order and the codes);
//! 3. places the payload through [`RxStream::place`] as it arrives, TO or MO advancing;
//! 4. when the deframer reports the FPDU's CRC good, updates the stream state and emits the
//!    completions ([`RxEvents`]).
//!
//! # Errors and the TERMINATE
//!
//! A segment that fails validation places nothing (its remaining octets are skipped). The
//! error is reported from [`UlpduReceiver::end`] with `crc_ok == true` only, as a
//! [`Stop::Terminate`] describing the one TERMINATE to send (RFC 5040 §7.1 rule 4: the
//! first error), with the offending segment's ULPDU_Length and DDP header echoed per
//! RFC 5040 §4.8 Figure 10 ([`Terminate::for_segment`]). When the CRC is bad the MPA layer
//! reports MPA error 2 itself ([`super::mpa_rx::RxError::Mpa`]) and this receiver stays
//! silent, so an error is never reported twice and a corrupted header is never blamed on
//! the peer's DDP layer. After a [`Stop`] the receiver is no longer active: it places
//! nothing and reports nothing more, whatever arrives (RFC 5041 §7.1: "DDP MUST silently
//! drop any subsequent incoming DDP Segments").
//!
//! # Placement before the CRC check
//!
//! Payload is placed cut-through, before the FPDU's CRC has been checked, because the
//! protocol core has no buffer to stage a ULPDU in (and data is copied only once). Every
//! placement is validated against the header of the segment that carries it, so a
//! corrupted header can only steer octets into memory the peer may write anyway. Nothing
//! becomes visible before the CRC is known good: completions and requests are emitted from
//! `end(true)` only, and an FPDU with a bad CRC ends the stream. RFC 5044 §6 ("MUST first
//! verify the FPDU before passing the ULPDU to DDP") is met literally by a shell that checks
//! the CRC of a whole FPDU in its receive queue before feeding it; the engine allows both.

use super::mpa_rx::UlpduReceiver;
use super::orq::{Orq, PushError, ReadSink};
use super::ring::{Fixed, Store};
pub use super::rx_shell::{
    Access, InvalidateCheck, MemoryLookup, MessageDone, RxEvents, TaggedCheck, TaggedDone,
    UntaggedCheck,
};
use super::stream::{PlaceError, PlaceTarget, RxStream};
use crate::wire::ddp::{self, DdpError, TaggedError, UntaggedError};
use crate::wire::rdmap::{self, Opcode, OperationError, ProtectionError, RdmapError};
use crate::wire::terminate::{TermCause, Terminate};
use crate::wire::ulpdu::{self, ParseError, Placement, RdmapHeader, UlpduHeader, MAX_HEADER_LEN};

/// Per-connection receive parameters of the DDP/RDMAP layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpConfig {
    /// Versions and extensions; [`ulpdu::Config::for_mpa_rev`] of the negotiated MPA
    /// revision.
    pub wire: ulpdu::Config,
    /// Inbound RDMA Read Request (and Atomic Request) queue depth, IRD: the number of
    /// requests on QN 1 that may be outstanding (RFC 5040 §6.1, RFC 7306 §5.2).
    pub ird: u32,
}

/// The remote operations the QP admits, whatever its memory grants: the QP's access
/// flags (`IB_ACCESS_REMOTE_WRITE`, `_READ`, `_ATOMIC`), checked before the STag of an
/// RDMA Write, a Read Request or an Atomic Request is looked at. The memory's own rights
/// are checked after ([`MemoryLookup::check_tagged`]); both must grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAccess {
    /// RDMA Writes may be placed (tagged segments other than Read Responses).
    pub write: bool,
    /// Read Requests may be answered.
    pub read: bool,
    /// Atomic Requests may be executed (RFC 7306).
    pub atomic: bool,
}

impl QpAccess {
    /// Every remote operation: the QP does not narrow what the memory grants.
    pub const ALL: Self = QpAccess {
        write: true,
        read: true,
        atomic: true,
    };

    /// No remote operation.
    pub const NONE: Self = QpAccess {
        write: false,
        read: false,
        atomic: false,
    };

    /// Whether the QP admits a remote operation that needs `access` on its memory
    /// ([`Access::LocalWrite`], a Read Response into this side's own sink, always).
    pub const fn admits(self, access: Access) -> bool {
        match access {
            Access::RemoteWrite => self.write,
            Access::RemoteRead => self.read,
            Access::RemoteAtomic => self.atomic,
            Access::LocalWrite => true,
        }
    }
}

/// Why the receiver stopped the deframer; [`UlpduReceiver::Error`] of [`DdpReceiver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A local or peer-caused error: send this TERMINATE, then close (RFC 5040 §7).
    Terminate(Terminate),
    /// The peer sent a TERMINATE (reported through [`RxEvents::terminate_received`]); do
    /// not answer it.
    PeerTerminated,
}

/// Lifecycle of the receiving direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxState {
    /// Decoding.
    Active,
    /// An error was detected here and reported once (a TERMINATE to send).
    Terminated,
    /// The peer's TERMINATE arrived.
    PeerTerminated,
}

/// Where the current segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Collecting header octets until [`UlpduHeader::parse`] decides.
    Header,
    /// Header rejected; collecting the rest of the DDP header for the TERMINATE echo.
    Echo,
    /// Header accepted; placing payload.
    Payload,
    /// Discarding the rest of the ULPDU.
    Skip,
}

/// Expected position on one untagged queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Queue {
    /// MSN of the message in progress, or of the next one.
    msn: u32,
    /// Octets of the message in progress received so far (its next MO).
    mo: u32,
}

/// Number of untagged queues RDMAP uses (QN 0-3, RFC 7306 §10.2).
const QUEUES: usize = 4;

/// What the current segment turned out to be, once decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Still collecting the header.
    Open,
    /// Accepted, with this payload length (octets); the header is [`DdpRx::parsed`].
    Accepted(u16),
    /// Rejected with this cause.
    Fault(TermCause),
    /// Carries opcode 7 (with our DV and RV) but did not decode.
    BadTerminate,
}

/// The DDP/RDMAP receive state of one connection. Drive it through
/// [`DdpRx::bind`] (a [`UlpduReceiver`] for [`super::mpa_rx::MpaRx::process`]) or through
/// [`super::rx_decoder::Decoder`].
///
/// Validation order per segment (RFC 5041 §7.1, RFC 5040 §7.2, RFC 7306 §8.2), first
/// failure wins:
///
/// 1. wire format ([`UlpduHeader::parse`], [`UlpduHeader::check_segment_len`]): DV (DDP
///    1/1/0x04 or 1/2/0x06), RV (RDMAP 0/2/0x05), opcode and T bit (0/2/0x06), QN (DDP
///    1/2/0x01), L/MO of header-only messages, ULPDU length (see [`ParseError::cause`]);
/// 2. Read Response, every segment: bound to the oldest outstanding Read of the ORQ
///    ([`Orq::check_segment`]: unsolicited 0/2/0x06; STag other than the Read's sink
///    1/1/0x00; TO not the sink's next octet, more octets than the Read has left, or a
///    last segment that leaves it short 1/1/0x01); the shell enters each Read with
///    [`DdpRx::post_read`] before its Request is sent;
/// 3. tagged (Write, Read Response), non-zero payload only (RFC 5041 §5.2: zero-length
///    tagged segments are not checked): TO + length wraps 64 bits (DDP 1/1/0x03), a Write
///    the QP does not admit ([`DdpRx::set_qp_access`]: DDP 1/1/0x00), then
///    [`MemoryLookup::check_tagged`] with [`Access::RemoteWrite`] or
///    [`Access::LocalWrite`] ([`TaggedCheck::ddp_cause`]);
/// 4. untagged, except Terminate: MSN equals the queue's expected MSN (DDP 1/2/0x03), MO
///    equals the octets received of the message so far (DDP 1/2/0x04), MO + length fits 32
///    bits (DDP 1/2/0x05); then per queue:
///    - QN 0: [`MemoryLookup::check_untagged`] ([`UntaggedCheck::cause`]); on the last
///      segment of a Send with Invalidate, [`MemoryLookup::check_invalidate`]
///      ([`InvalidateCheck::cause`]);
///    - QN 1: fewer than IRD requests outstanding (DDP 1/2/0x03); Read Request with a
///      non-zero size: source TO + size wraps (RDMAP 0/1/0x04), a Read the QP does not
///      admit (RDMAP 0/1/0x02), then [`MemoryLookup::check_tagged`] with [`Access::RemoteRead`]
///      ([`TaggedCheck::rdmap_cause`], echoing the Read Request header); Atomic Request: TO
///      not 8-aligned (RDMAP 0/2/0x07), TO + 8 wraps (0/1/0x04), then
///      [`Access::RemoteAtomic`];
///    - QN 2 (Terminate): nothing; QN 3 (Atomic Response): nothing here, the shell matches
///      it in [`RxEvents::atomic_response`].
///
/// RFC 5041 §7.1 lists the MSN range check after the buffer checks; over an in-order LLP the
/// legal range is the single expected MSN, and a segment outside it has no associated
/// buffer, so the engine checks it first and reports the more specific 0x03.
///
/// The ORQ's slots are those of `S` ([`Store`]).
#[derive(Debug)]
pub struct DdpRx<S: Store = Fixed> {
    cfg: DdpConfig,
    state: RxState,
    // The current segment.
    phase: Phase,
    ulpdu_len: u16,
    hdr: [u8; MAX_HEADER_LEN],
    got: usize,
    need: usize,
    verdict: Verdict,
    /// The parsed header, also when validation rejected it (for the R echo); `Some`
    /// whenever `verdict` is [`Verdict::Accepted`].
    parsed: Option<UlpduHeader>,
    placed: u16,
    // The stream.
    queues: [Queue; QUEUES],
    /// Payload octets of the RDMA Write message in progress.
    write_len: u64,
    /// Outbound Reads whose Responses are outstanding.
    orq: Orq<S::Orq>,
    ird_used: u32,
    /// One inbound Read Request more than IRD may be outstanding, if it is of zero
    /// length: the peer-to-peer Read RTR's slot (RFC 6581 §5, §9.1), open until
    /// [`DdpRx::set_ird`].
    rtr_slot: bool,
    /// The remote operations the QP admits ([`DdpRx::set_qp_access`]).
    qp_access: QpAccess,
}

/// [`DdpRx`] bound to the shell's memory and event sink for one
/// [`super::mpa_rx::MpaRx::process`] call.
pub struct DdpReceiver<'a, M: MemoryLookup, E: RxEvents, S: Store = Fixed> {
    rx: &'a mut DdpRx<S>,
    mem: &'a mut M,
    events: &'a mut E,
}

/// Octets of a segment's header collected before anything is decided, where the stream
/// cannot show the first two ([`DdpRx::peek_header_len`]): the shortest ULPDU header, a
/// tagged DDP header. Their first two tell the whole header's length
/// ([`UlpduHeader::header_len_hint`]), so that most headers are parsed once. A shorter
/// ULPDU is decided when it ends.
const FIRST_TAKE: usize = ddp::TAGGED_LEN;

/// The right a tagged segment of `op` needs on its STag: local write for a Read
/// Response (the sink this side named in its Read Request), remote write for an RDMA
/// Write (RFC 5040 §5.1, §5.2).
const fn tagged_access(op: Opcode) -> Access {
    match op {
        Opcode::ReadResponse => Access::LocalWrite,
        _ => Access::RemoteWrite,
    }
}

impl DdpRx {
    /// A receiver at the start of Full Operation, with an ORQ of
    /// [`super::orq::ORQ_CAPACITY`] slots in place (see [`DdpRx::with_orq`]; inline: see
    /// [`Orq::new`]).
    #[inline]
    pub const fn new(cfg: DdpConfig) -> Self {
        Self::with_orq(cfg, Orq::new())
    }
}

impl<S: Store> DdpRx<S> {
    /// A receiver at the start of Full Operation: every queue expects MSN 1 (RFC 5041
    /// §5.1), no inbound request is outstanding, and outbound Reads go into `orq`.
    pub const fn with_orq(cfg: DdpConfig, orq: Orq<S::Orq>) -> Self {
        DdpRx {
            cfg,
            state: RxState::Active,
            phase: Phase::Skip,
            ulpdu_len: 0,
            hdr: [0; MAX_HEADER_LEN],
            got: 0,
            need: FIRST_TAKE,
            verdict: Verdict::Open,
            parsed: None,
            placed: 0,
            queues: [Queue {
                msn: ddp::MSN_INITIAL,
                mo: 0,
            }; QUEUES],
            write_len: 0,
            orq,
            ird_used: 0,
            rtr_slot: false,
            qp_access: QpAccess::ALL,
        }
    }

    /// Starts the receiver over in place with `cfg`, as [`DdpRx::with_orq`] would build it
    /// with the ORQ it has (emptied); the QP's access ([`DdpRx::set_qp_access`]), a
    /// property of the QP rather than of the stream, is kept.
    pub fn restart(&mut self, cfg: DdpConfig) {
        self.cfg = cfg;
        self.state = RxState::Active;
        self.phase = Phase::Skip;
        self.ulpdu_len = 0;
        self.hdr = [0; MAX_HEADER_LEN];
        self.got = 0;
        self.need = FIRST_TAKE;
        self.verdict = Verdict::Open;
        self.parsed = None;
        self.placed = 0;
        self.queues = [Queue {
            msn: ddp::MSN_INITIAL,
            mo: 0,
        }; QUEUES];
        self.write_len = 0;
        self.orq.clear();
        self.ird_used = 0;
        self.rtr_slot = false;
    }

    /// Sets the remote operations the QP admits from the next segment on (the QP's access
    /// flags; [`QpAccess::ALL`] until set). A segment of a Write, a Read Request or an
    /// Atomic Request with payload (or a non-zero size) that the QP does not admit is
    /// refused as if its STag did not grant the right: DDP Invalid STag (1/1/0x00) for a
    /// Write segment, RDMAP Access Rights (0/1/0x02) for a request (RFC 5041 §7.1, RFC
    /// 5040 §7.2 item 4). Zero-length ones are not checked, as for the memory's rights.
    pub fn set_qp_access(&mut self, access: QpAccess) {
        self.qp_access = access;
    }

    /// The remote operations the QP admits.
    pub const fn qp_access(&self) -> QpAccess {
        self.qp_access
    }

    /// The configuration in use.
    pub const fn config(&self) -> &DdpConfig {
        &self.cfg
    }

    /// The receiving direction's state.
    pub const fn state(&self) -> RxState {
        self.state
    }

    /// Inbound requests on QN 1 (Read and Atomic Requests) delivered and not yet released
    /// with [`DdpRx::release_ird`].
    pub const fn ird_outstanding(&self) -> u32 {
        self.ird_used
    }

    /// The MSN expected next on queue `qn` (the message in progress or the next one);
    /// `None` for a QN RDMAP does not use.
    pub fn expected_msn(&self, qn: u32) -> Option<u32> {
        let i = usize::try_from(qn).ok()?;
        self.queues.get(i).map(|q| q.msn)
    }

    /// Sets the MSN queue `qn` expects next, for a stream resumed between messages (for
    /// example a connection handed over mid-stream; tests use it to cross the 2^32 wrap).
    /// Returns `false`, changing nothing, for a QN RDMAP does not use or while a message is
    /// in progress on it.
    pub fn set_expected_msn(&mut self, qn: u32, msn: u32) -> bool {
        match usize::try_from(qn)
            .ok()
            .and_then(|i| self.queues.get_mut(i))
        {
            Some(q) if q.mo == 0 => {
                q.msn = msn;
                true
            }
            _ => false,
        }
    }

    /// Enters an outbound RDMA Read whose Request names Data Sink `sink` into the ORQ.
    /// The shell calls it before the Request can reach the peer (the zero-length Read RTR
    /// of RFC 6581 §5 included): only the oldest entry's sink can receive Read Response
    /// payload, in order and exactly ([`Orq::check_segment`]).
    ///
    /// # Errors
    ///
    /// [`PushError`]: the ORQ is full, or the sink's range wraps 64 bits.
    pub fn post_read(&mut self, sink: ReadSink) -> Result<(), PushError> {
        self.orq.push(sink)
    }

    /// Takes back the Read [`DdpRx::post_read`] entered last, whose Request did not go
    /// out, if its sink is `sink` and nothing of a Response was accepted for it
    /// ([`Orq::withdraw`]). Returns whether it was removed.
    pub fn withdraw_read(&mut self, sink: ReadSink) -> bool {
        self.orq.withdraw(sink)
    }

    /// The outbound Reads whose Responses are outstanding.
    pub const fn orq(&self) -> &Orq<S::Orq> {
        &self.orq
    }

    /// Sets the inbound request depth to `ird` from now on, and closes the RTR slot
    /// ([`DdpRx::open_rtr_slot`]); requests delivered already keep their slots until
    /// released.
    pub fn set_ird(&mut self, ird: u32) {
        self.cfg.ird = ird;
        self.rtr_slot = false;
    }

    /// Lets one Read Request beyond IRD be outstanding if it is of zero length, until
    /// [`DdpRx::set_ird`]: the slot a Responder with IRD 0 keeps for the peer-to-peer
    /// model's zero-length Read RTR (RFC 6581 §5, §9.1), which the session closes after
    /// the first FPDU's batch. A Read Request of non-zero length, or an Atomic Request,
    /// beyond IRD is refused as any other (RFC 5041 §7.1 check 5).
    pub fn open_rtr_slot(&mut self) {
        self.rtr_slot = true;
    }

    /// Whether the RTR slot is open ([`DdpRx::open_rtr_slot`]).
    pub const fn rtr_slot_open(&self) -> bool {
        self.rtr_slot
    }

    /// The shell finished responding to one inbound request (sent the last segment of a
    /// Read Response, or an Atomic Response): frees one IRD slot. Extra calls are ignored.
    pub fn release_ird(&mut self) {
        self.ird_used = self.ird_used.saturating_sub(1);
    }

    /// Marks the direction terminated for an error found outside this receiver (an MPA
    /// error, a local failure); nothing is placed or reported afterwards.
    pub fn fail(&mut self) {
        if self.state == RxState::Active {
            self.state = RxState::Terminated;
        }
        self.phase = Phase::Skip;
    }

    /// Binds the receiver to the shell's `mem` and `events` for one deframer run.
    pub fn bind<'a, M: MemoryLookup, E: RxEvents>(
        &'a mut self,
        mem: &'a mut M,
        events: &'a mut E,
    ) -> DdpReceiver<'a, M, E, S> {
        DdpReceiver {
            rx: self,
            mem,
            events,
        }
    }

    fn begin_segment(&mut self, len: u16) {
        self.ulpdu_len = len;
        self.got = 0;
        self.need = FIRST_TAKE;
        self.verdict = Verdict::Open;
        self.parsed = None;
        self.placed = 0;
        self.phase = if self.state == RxState::Active {
            Phase::Header
        } else {
            Phase::Skip
        };
    }

    fn header_bytes(&self) -> &[u8] {
        self.hdr.get(..self.got).unwrap_or(&[])
    }

    /// Where `s` can show the segment's first two octets without consuming them, sets
    /// `need` to the header length they name ([`UlpduHeader::header_len_hint`]), so that
    /// the header is collected in one take; otherwise `need` stays [`FIRST_TAKE`].
    fn peek_header_len<R: RxStream>(&mut self, s: &mut R) {
        let mut start = [0u8; ddp::CTRL_LEN];
        if s.peek(&mut start) != start.len() {
            return;
        }
        if let Some(n) = self.hinted_header_len(&start) {
            self.need = n;
        }
    }

    /// The header length the segment's first octets `start` name
    /// ([`UlpduHeader::header_len_hint`]), if the ULPDU is that long; otherwise `None`
    /// (the parse then says what is wrong).
    fn hinted_header_len(&self, start: &[u8]) -> Option<usize> {
        UlpduHeader::header_len_hint(start, self.cfg.wire)
            .filter(|&n| n <= usize::from(self.ulpdu_len))
    }

    /// Takes up to `want` header octets in total from `s`.
    fn take_header<R: RxStream>(&mut self, s: &mut R, want: usize) {
        let want = want.min(MAX_HEADER_LEN).min(usize::from(self.ulpdu_len));
        let n = want.saturating_sub(self.got).min(s.available());
        if let Some(dst) = self.hdr.get_mut(self.got..self.got + n) {
            s.take(dst, None);
            self.got += n;
        }
    }

    /// Rejects the segment with `cause`; keeps collecting the DDP header for the echo.
    fn fault(&mut self, cause: TermCause) {
        self.verdict = Verdict::Fault(cause);
        self.phase = Phase::Echo;
    }

    /// Whether the octets so far start a Terminate of our DDP and RDMAP versions.
    fn is_terminate(&self) -> bool {
        match self.header_bytes() {
            [c0, c1, ..] => {
                *c0 & ddp::DV_MASK == self.cfg.wire.ddp.dv()
                    && matches!(
                        rdmap::Ctrl::parse(*c1, self.cfg.wire.rdmap, self.cfg.wire.rfc7306),
                        Ok(rdmap::Ctrl {
                            opcode: Opcode::Terminate,
                            ..
                        })
                    )
            }
            _ => false,
        }
    }

    fn reject(&mut self, e: ParseError) {
        if self.is_terminate() {
            self.verdict = Verdict::BadTerminate;
            self.phase = Phase::Skip;
        } else {
            self.fault(e.cause());
        }
    }

    /// Parses the collected octets. `last`: no more octets of this ULPDU will come.
    fn decide<M: MemoryLookup>(&mut self, mem: &mut M, last: bool) {
        match UlpduHeader::parse(self.header_bytes(), self.cfg.wire) {
            Err(ParseError::Truncated { need })
                if !last
                    && need > self.got
                    && need <= MAX_HEADER_LEN
                    && need <= usize::from(self.ulpdu_len) =>
            {
                self.need = need;
            }
            Err(e) => self.reject(e),
            Ok((h, hl)) => {
                self.parsed = Some(h);
                if let Err(e) = h.check_segment_len(usize::from(self.ulpdu_len)) {
                    self.reject(e);
                    return;
                }
                // check_segment_len: hl <= ulpdu_len.
                let payload = match u16::try_from(hl) {
                    Ok(hl) => self.ulpdu_len.saturating_sub(hl),
                    Err(_) => 0,
                };
                match self.validate(mem, &h, payload) {
                    Ok(()) => {
                        self.verdict = Verdict::Accepted(payload);
                        self.phase = if payload > 0 && h.opcode.carries_payload() {
                            Phase::Payload
                        } else {
                            Phase::Skip
                        };
                    }
                    Err(cause) => self.fault(cause),
                }
            }
        }
    }

    /// Semantic checks of an accepted header, in the order documented on [`DdpRx`].
    fn validate<M: MemoryLookup>(
        &self,
        mem: &mut M,
        h: &UlpduHeader,
        payload: u16,
    ) -> Result<(), TermCause> {
        let len = u32::from(payload);
        match h.placement {
            Placement::Tagged { stag, to } => {
                if h.opcode == Opcode::ReadResponse {
                    self.orq.check_segment(stag, to, len, h.last)?;
                }
                if len == 0 {
                    return Ok(());
                }
                if to.checked_add(u64::from(len)).is_none() {
                    return Err(TermCause::ddp(DdpError::Tagged(TaggedError::ToWrap)));
                }
                let access = tagged_access(h.opcode);
                if !self.qp_access.admits(access) {
                    return Err(TaggedCheck::AccessRights.ddp_cause());
                }
                mem.check_tagged(stag, to, len, access)
                    .map_err(TaggedCheck::ddp_cause)
            }
            Placement::Untagged { qn, msn, mo } => {
                if h.opcode == Opcode::Terminate {
                    return Ok(());
                }
                let untagged = |e| TermCause::ddp(DdpError::Untagged(e));
                let q = usize::try_from(qn)
                    .ok()
                    .and_then(|i| self.queues.get(i))
                    .ok_or(untagged(UntaggedError::InvalidQn))?;
                if msn != q.msn {
                    return Err(untagged(UntaggedError::MsnRange));
                }
                if mo != q.mo {
                    return Err(untagged(UntaggedError::InvalidMo));
                }
                if mo.checked_add(len).is_none() {
                    return Err(untagged(UntaggedError::TooLong));
                }
                match &h.rdmap {
                    RdmapHeader::ReadRequest(rr) => {
                        self.check_ird(rr.size)?;
                        if rr.size == 0 {
                            // RFC 5040 §7.2 item 4: only non-zero-length reads are checked.
                            return Ok(());
                        }
                        self.check_source(mem, rr.src_stag, rr.src_to, rr.size, Access::RemoteRead)
                    }
                    RdmapHeader::AtomicRequest(a) => {
                        // Eight octets to read: never the RTR slot's.
                        self.check_ird(8)?;
                        if a.to % 8 != 0 {
                            return Err(TermCause::rdmap(RdmapError::RemoteOperation(
                                OperationError::CatastrophicStream,
                            )));
                        }
                        self.check_source(mem, a.stag, a.to, 8, Access::RemoteAtomic)
                    }
                    RdmapHeader::AtomicResponse(_) | RdmapHeader::Terminate(_) => Ok(()),
                    RdmapHeader::None | RdmapHeader::Immediate(_) => {
                        mem.check_untagged(qn, msn, mo, len)
                            .map_err(UntaggedCheck::cause)?;
                        if h.last && h.opcode.has_invalidate_stag() {
                            mem.check_invalidate(h.inval_stag)
                                .map_err(InvalidateCheck::cause)?;
                        }
                        Ok(())
                    }
                }
            }
        }
    }

    /// Whether a request for `size` octets may be outstanding now (IRD, or the RTR slot
    /// for a zero-length Read).
    fn check_ird(&self, size: u32) -> Result<(), TermCause> {
        let rtr = self.rtr_slot && size == 0 && self.ird_used == self.cfg.ird;
        if self.ird_used >= self.cfg.ird && !rtr {
            // More requests than the QN 1 buffers IRD provides: the MSN is past the last
            // available buffer (RFC 5041 §7.1 check 5).
            Err(TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)))
        } else {
            Ok(())
        }
    }

    /// RDMAP-layer check of a buffer the peer reads or updates (RFC 5040 §7.2 items 4a-4e),
    /// after the QP's own access ([`DdpRx::set_qp_access`]).
    fn check_source<M: MemoryLookup>(
        &self,
        mem: &mut M,
        stag: u32,
        to: u64,
        len: u32,
        access: Access,
    ) -> Result<(), TermCause> {
        if to.checked_add(u64::from(len)).is_none() {
            return Err(TermCause::rdmap(RdmapError::RemoteProtection(
                ProtectionError::ToWrap,
            )));
        }
        if !self.qp_access.admits(access) {
            return Err(TaggedCheck::AccessRights.rdmap_cause());
        }
        mem.check_tagged(stag, to, len, access)
            .map_err(TaggedCheck::rdmap_cause)
    }

    fn data<R: RxStream, M: MemoryLookup>(&mut self, s: &mut R, mem: &mut M) {
        loop {
            let avail = s.available();
            if avail == 0 {
                return;
            }
            match self.phase {
                Phase::Header => {
                    if self.got == 0 {
                        self.peek_header_len(s);
                    }
                    self.take_header(s, self.need);
                    if self.got < self.need.min(usize::from(self.ulpdu_len)) {
                        continue;
                    }
                    if self.got == FIRST_TAKE {
                        // Collect the whole header the opcode names before parsing it.
                        let hint = self.hinted_header_len(self.header_bytes());
                        if let Some(n) = hint.filter(|&n| n > self.got) {
                            self.need = n;
                            continue;
                        }
                    }
                    let last = self.got >= usize::from(self.ulpdu_len);
                    self.decide(mem, last);
                }
                Phase::Echo => {
                    let want = self.hdr.first().map_or(0, |c| ddp::header_len(*c));
                    self.take_header(s, want);
                    if self.got >= want.min(usize::from(self.ulpdu_len)) {
                        self.phase = Phase::Skip;
                    }
                }
                Phase::Payload => self.place(s),
                Phase::Skip => s.skip(avail, None),
            }
        }
    }

    fn place<R: RxStream>(&mut self, s: &mut R) {
        let (payload, placement, opcode) = match (self.verdict, &self.parsed) {
            (Verdict::Accepted(p), Some(h)) => (p, h.placement, h.opcode),
            _ => {
                self.phase = Phase::Skip;
                return;
            }
        };
        let left = payload.saturating_sub(self.placed);
        let n = usize::from(left).min(s.available());
        if n == 0 {
            self.phase = Phase::Skip;
            return;
        }
        // n <= left <= u16::MAX.
        let n16 = u16::try_from(n).unwrap_or(0);
        let off = self.placed;
        let target = match placement {
            // validate(): to + payload does not wrap, mo + payload fits 32 bits.
            Placement::Tagged { stag, to } => PlaceTarget::Tagged {
                stag,
                to: to.wrapping_add(u64::from(off)),
                access: tagged_access(opcode),
            },
            Placement::Untagged { qn, msn, mo } => PlaceTarget::Untagged {
                qn,
                msn,
                mo: mo.wrapping_add(u32::from(off)),
            },
        };
        let r = s.place(&target, n, None);
        self.placed = self.placed.saturating_add(n16);
        match r {
            Err(e) => {
                let cause = match e {
                    PlaceError::Tagged(check) => check.ddp_cause(),
                    PlaceError::Failed => TermCause::ddp(DdpError::LocalCatastrophic),
                };
                self.verdict = Verdict::Fault(cause);
                self.phase = Phase::Skip;
            }
            Ok(()) if self.placed >= payload => self.phase = Phase::Skip,
            Ok(()) => {}
        }
    }

    /// The TERMINATE for `cause` against the current segment (RFC 5040 Figure 10).
    fn terminate(&mut self, cause: TermCause) -> Stop {
        let rr = match self.parsed {
            Some(UlpduHeader {
                rdmap: RdmapHeader::ReadRequest(rr),
                ..
            }) => Some(rr),
            _ => None,
        };
        self.state = RxState::Terminated;
        self.phase = Phase::Skip;
        Stop::Terminate(Terminate::for_segment(
            cause,
            self.ulpdu_len,
            self.header_bytes(),
            rr,
        ))
    }

    fn end<M: MemoryLookup, E: RxEvents>(
        &mut self,
        mem: &mut M,
        events: &mut E,
        crc_ok: bool,
    ) -> Result<(), Stop> {
        if !crc_ok || self.state != RxState::Active {
            // The MPA layer reports the FPDU; abandon it.
            self.phase = Phase::Skip;
            return Ok(());
        }
        if self.verdict == Verdict::Open {
            self.decide(mem, true);
        }
        self.phase = Phase::Skip;
        match self.verdict {
            Verdict::Open => {
                let need = self.need;
                Err(self.terminate(ParseError::Truncated { need }.cause()))
            }
            Verdict::Fault(cause) => Err(self.terminate(cause)),
            Verdict::BadTerminate => {
                self.state = RxState::PeerTerminated;
                events.terminate_received(None);
                Err(Stop::PeerTerminated)
            }
            Verdict::Accepted(payload) => match self.deliver(events, payload) {
                Ok(()) => Ok(()),
                Err(Some(cause)) => Err(self.terminate(cause)),
                Err(None) => Err(Stop::PeerTerminated),
            },
        }
    }

    /// Applies the accepted segment (its header `parsed`, `payload` octets) to the stream
    /// state and emits its events. `Err(None)`: the peer terminated.
    fn deliver<E: RxEvents>(
        &mut self,
        events: &mut E,
        payload: u16,
    ) -> Result<(), Option<TermCause>> {
        // Borrowed in place, beside the fields it updates: the header is over a hundred
        // octets.
        let DdpRx {
            parsed,
            orq,
            write_len,
            state,
            queues,
            ird_used,
            ..
        } = self;
        // Not reached: `decide` set the header with the verdict.
        let h = parsed
            .as_ref()
            .ok_or(Some(TermCause::ddp(DdpError::LocalCatastrophic)))?;
        let len = u32::from(payload);
        match h.placement {
            Placement::Tagged { .. } if h.opcode == Opcode::ReadResponse => {
                // validate(): the segment fits the oldest outstanding Read.
                orq.advance(len);
                if !h.last {
                    return Ok(());
                }
                let read = orq
                    .complete()
                    .ok_or(Some(TermCause::ddp(DdpError::LocalCatastrophic)))?;
                let done = TaggedDone {
                    opcode: h.opcode,
                    stag: read.sink.stag,
                    len: u64::from(read.len),
                };
                events.tagged_done(&done).map_err(Some)
            }
            Placement::Tagged { stag, .. } => {
                let total = write_len.saturating_add(u64::from(len));
                if !h.last {
                    *write_len = total;
                    return Ok(());
                }
                *write_len = 0;
                let done = TaggedDone {
                    opcode: h.opcode,
                    stag,
                    len: total,
                };
                events.tagged_done(&done).map_err(Some)
            }
            Placement::Untagged { qn, msn, mo } => {
                if let RdmapHeader::Terminate(t) = &h.rdmap {
                    *state = RxState::PeerTerminated;
                    events.terminate_received(Some(t));
                    return Err(None);
                }
                let q = usize::try_from(qn)
                    .ok()
                    .and_then(|i| queues.get_mut(i))
                    .ok_or(Some(TermCause::ddp(DdpError::LocalCatastrophic)))?;
                // validate(): mo + len fits.
                let end = mo.saturating_add(len);
                if h.last {
                    q.msn = q.msn.wrapping_add(1);
                    q.mo = 0;
                } else {
                    q.mo = end;
                    return Ok(());
                }
                match &h.rdmap {
                    RdmapHeader::ReadRequest(rr) => {
                        *ird_used = ird_used.saturating_add(1);
                        events.read_request(rr).map_err(Some)
                    }
                    RdmapHeader::AtomicRequest(a) => {
                        *ird_used = ird_used.saturating_add(1);
                        events.atomic_request(a).map_err(Some)
                    }
                    RdmapHeader::AtomicResponse(a) => events.atomic_response(a).map_err(Some),
                    // Handled above.
                    RdmapHeader::Terminate(_) => Err(None),
                    RdmapHeader::None | RdmapHeader::Immediate(_) => {
                        let imm = match h.rdmap {
                            RdmapHeader::Immediate(i) => Some(i),
                            _ => None,
                        };
                        let done = MessageDone {
                            opcode: h.opcode,
                            msn,
                            len: end,
                            inval_stag: if h.opcode.has_invalidate_stag() {
                                Some(h.inval_stag)
                            } else {
                                None
                            },
                            solicited: h.opcode.solicited(),
                            imm,
                        };
                        events.message_done(&done).map_err(Some)
                    }
                }
            }
        }
    }
}

impl<M: MemoryLookup, E: RxEvents, S: Store> UlpduReceiver for DdpReceiver<'_, M, E, S> {
    type Error = Stop;

    fn begin(&mut self, len: u16) -> Result<(), Stop> {
        self.rx.begin_segment(len);
        Ok(())
    }

    fn data<R: RxStream>(&mut self, ulpdu: &mut R) -> Result<(), Stop> {
        self.rx.data(ulpdu, self.mem);
        Ok(())
    }

    fn end(&mut self, crc_ok: bool) -> Result<(), Stop> {
        self.rx.end(self.mem, self.events, crc_ok)
    }
}
