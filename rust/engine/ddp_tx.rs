// SPDX-License-Identifier: GPL-2.0

//! The DDP/RDMAP TX FPDU builder (RFC 5041 §5, RFC 5040 §4/§5, RFC 7306 §4-§6): splits one
//! RDMAP message into DDP segments of at most MULPDU octets of ULPDU (header plus payload)
//! and frames each one through [`MpaTx`] (markers, pad, CRC; RFC 5044 §4).
//!
//! The engine composes every header octet; payload octets go through
//! [`TxSink::payload`], which only the shell can reach (the engine never sees them).
//!
//! # State machine
//!
//! ```text
//!            start(msg)                 next_fpdu() (L=0)
//!   Idle ───────────────▶ InMessage ◀──────────────┐
//!    ▲                        │ └──────────────────┘
//!    └── next_fpdu() (L=1) ───┘      abort() → Idle
//! ```
//!
//! The shell calls [`DdpTx::start`] with a [`Message`], then [`DdpTx::next_fpdu`] until
//! [`DdpTx::is_done`]. Between two calls it may stop for as long as it likes (socket send
//! space exhausted, another QP's turn): the builder keeps the message's MSN, MO/TO and
//! octets sent. It never stops *inside* an FPDU: each [`DdpTx::next_fpdu`] writes one whole
//! FPDU, so the shell first compares [`DdpTx::next_fpdu_len`] (the exact on-wire length,
//! markers included) with the send space it has. Because FPDUs are whole, the stream is
//! always at an FPDU boundary between calls, so a TERMINATE can follow any FPDU
//! ([`DdpTx::abort`], then start the TERMINATE).
//!
//! Messages are not interleaved: one message is sent completely before the next starts
//! (RFC 5040 §5.5 ordering; Linux siw does the same).
//!
//! # Segmentation
//!
//! Each segment carries the message's whole header (DDP header, RDMAP header) and as much
//! payload as MULPDU allows: `min(remaining, MULPDU - header)` octets. MULPDU is read from
//! the [`MpaTx`] at every FPDU, so [`MpaTx::set_mulpdu`] after an EMSS change
//! (RFC 5044 §4.5) takes effect at the next segment. Untagged segments carry MO = octets
//! of the message sent before them; tagged segments carry TO = the message's TO plus those
//! octets. L is set on the last segment only. A zero-length message is one segment without
//! payload (RFC 5041 §5.2). Header-only messages (Read Request, Terminate, Immediate Data,
//! Atomic Request/Response) are one segment with L=1 and MO=0.
//!
//! # MSN
//!
//! The builder keeps one MSN counter per untagged queue (RFC 5041 §4.3; QN 0 Send and
//! Immediate Data, QN 1 Read and Atomic Requests, QN 2 Terminate, QN 3 Atomic Responses;
//! RFC 7306 §5.2), each starting at 1 and wrapping from 2^32-1 to 0. A message takes its
//! MSN at [`DdpTx::start`].

use super::mpa_tx::{MpaTx, TxError};
use super::startup::Negotiated;
use super::stream::TxSink;
use crate::wire::ddp::MSN_INITIAL;
use crate::wire::fpdu::MULPDU_MAX;
use crate::wire::mpa::{MpaErrorCode, RtrType};
use crate::wire::rdmap::{AtomicRequest, AtomicResponse, ImmediateData, Opcode, ReadRequest};
use crate::wire::terminate::{TermCause, Terminate};
use crate::wire::ulpdu::{Config, EmitError, RdmapHeader, UlpduHeader, MAX_HEADER_LEN};

/// Number of untagged queues the builder numbers (QN 0..=3, RFC 5040 §5, RFC 7306 §5.2).
pub const QUEUES: usize = 4;

/// Required alignment of an Atomic Request's Remote Tagged Offset (octets, RFC 7306
/// §5.2.1).
pub const ATOMIC_ALIGN: u64 = 8;

/// One RDMAP message to send. Lengths are payload octets (host order); the builder adds
/// the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Send (opcode 0x3), Send with SE (0x5), Send with Invalidate (0x4) or Send with SE
    /// and Invalidate (0x6) (RFC 5040 §4.6, §4.7, §5.3): untagged, QN 0.
    Send {
        /// Solicited Event requested (the SE variants).
        solicited: bool,
        /// STag the peer invalidates (the Invalidate variants; host order).
        invalidate: Option<u32>,
        /// Payload length (octets; 0 allowed).
        len: u32,
    },
    /// RDMA Write (opcode 0x0, RFC 5040 §4.3, §5.1): tagged to the Data Sink buffer.
    Write {
        /// Data Sink STag.
        stag: u32,
        /// Data Sink Tagged Offset of the first payload octet (octets).
        to: u64,
        /// Payload length (octets; 0 allowed).
        len: u32,
    },
    /// RDMA Read Request (opcode 0x1, RFC 5040 §4.4, §5.2): one untagged segment with the
    /// 28-octet Read Request header on QN 1.
    ReadRequest(ReadRequest),
    /// RDMA Read Response (opcode 0x2, RFC 5040 §4.5, §5.2): tagged to the Data Sink STag
    /// and TO the Read Request named.
    ReadResponse {
        /// Data Sink STag (from the Read Request).
        stag: u32,
        /// Data Sink Tagged Offset (octets, from the Read Request).
        to: u64,
        /// Payload length (octets): the Read Request's RDMARDSZ.
        len: u32,
    },
    /// Terminate (opcode 0x7, RFC 5040 §4.8, §5.4): one untagged segment on QN 2.
    Terminate(Terminate),
    /// Immediate Data (0x8) or Immediate Data with SE (0x9) (RFC 7306 §6): one untagged
    /// segment carrying exactly 8 octets on QN 0.
    ImmediateData {
        /// Solicited Event requested (opcode 0x9).
        solicited: bool,
        /// The 8 octets.
        data: ImmediateData,
    },
    /// Atomic Request (opcode 0xA, RFC 7306 §5.2.1): one untagged segment with the
    /// 52-octet header on QN 1 (sharing the MSN space of Read Requests).
    AtomicRequest(AtomicRequest),
    /// Atomic Response (opcode 0xB, RFC 7306 §5.2.2): one untagged segment with the
    /// 12-octet header on QN 3.
    AtomicResponse(AtomicResponse),
}

impl Message {
    /// The zero-length RTR message of type `t` (RFC 6581 §5), the peer-to-peer
    /// Initiator's first FPDU (a Read RTR's sink is in the ORQ already). Its STags are not
    /// looked at by the peer (RFC 5040 §5.1, §5.2.1; RFC 5041 §7).
    pub const fn rtr(t: RtrType) -> Self {
        match t {
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
        }
    }

    /// The RDMAP opcode this message is sent with.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Message::Send {
                solicited,
                invalidate,
                ..
            } => match (*solicited, invalidate.is_some()) {
                (false, false) => Opcode::Send,
                (false, true) => Opcode::SendInvalidate,
                (true, false) => Opcode::SendSe,
                (true, true) => Opcode::SendSeInvalidate,
            },
            Message::Write { .. } => Opcode::Write,
            Message::ReadRequest(_) => Opcode::ReadRequest,
            Message::ReadResponse { .. } => Opcode::ReadResponse,
            Message::Terminate(_) => Opcode::Terminate,
            Message::ImmediateData { solicited, .. } => {
                if *solicited {
                    Opcode::ImmediateDataSe
                } else {
                    Opcode::ImmediateData
                }
            }
            Message::AtomicRequest(_) => Opcode::AtomicRequest,
            Message::AtomicResponse(_) => Opcode::AtomicResponse,
        }
    }

    /// Payload octets the shell supplies through [`TxSink::payload`] (0 for header-only
    /// messages).
    pub const fn payload_len(&self) -> u32 {
        match self {
            Message::Send { len, .. }
            | Message::Write { len, .. }
            | Message::ReadResponse { len, .. } => *len,
            _ => 0,
        }
    }

    /// The RDMAP header after the DDP header.
    const fn rdmap_header(&self) -> RdmapHeader {
        match self {
            Message::ReadRequest(r) => RdmapHeader::ReadRequest(*r),
            Message::Terminate(t) => RdmapHeader::Terminate(*t),
            Message::ImmediateData { data, .. } => RdmapHeader::Immediate(*data),
            Message::AtomicRequest(a) => RdmapHeader::AtomicRequest(*a),
            Message::AtomicResponse(a) => RdmapHeader::AtomicResponse(*a),
            Message::Send { .. } | Message::Write { .. } | Message::ReadResponse { .. } => {
                RdmapHeader::None
            }
        }
    }
}

/// Why [`DdpTx::start`] refused a message. Nothing was sent and no MSN was consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartError {
    /// A message is still in progress ([`DdpTx::is_done`] is false).
    Busy,
    /// The opcode is not enabled on this connection: RFC 7306 opcodes without the
    /// extensions, or on an RDMAC (Rev 0) connection.
    Opcode(Opcode),
    /// A tagged range would pass the end of the 64-bit TO space: `to + len` (octets) does
    /// not fit in 64 bits. The receiver would report DDP 1/1/0x03 "TO wrap" (RFC 5041
    /// §7.2); the builder refuses instead of wrapping. For a Read Request either the
    /// sink or the source range.
    ToWrap {
        /// The offending TO (octets).
        to: u64,
        /// The length (octets).
        len: u32,
    },
    /// An Atomic Request's Remote Tagged Offset is not a multiple of [`ATOMIC_ALIGN`]
    /// (RFC 7306 §5.2.1).
    Misaligned {
        /// The offending TO (octets).
        to: u64,
    },
    /// The header cannot be emitted (e.g. a Terminate Error Type above 15).
    Header(EmitError),
}

/// Why [`DdpTx::next_fpdu`] (or [`DdpTx::next_fpdu_len`]) wrote nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextError {
    /// No message in progress.
    Idle,
    /// MULPDU (octets) leaves no room for the message's header plus at least one payload
    /// octet (or for the header alone, for a message without payload). Raise MULPDU with
    /// [`MpaTx::set_mulpdu`] (RFC 5044 §4.5 never goes below 128, which always fits) or
    /// [`DdpTx::abort`].
    MulpduTooSmall {
        /// Header length of the message (octets).
        header: usize,
        /// MULPDU in force (octets).
        mulpdu: u16,
    },
    /// The MPA framer refused the FPDU (cannot happen after the checks above; reported
    /// rather than assumed).
    Mpa(TxError),
    /// The header could not be emitted (cannot happen after [`DdpTx::start`] validated
    /// it; reported rather than assumed).
    Header(EmitError),
}

/// What [`DdpTx::start`] assigned to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The RDMAP opcode.
    pub opcode: Opcode,
    /// QN and MSN of an untagged message (`None` for Write and Read Response).
    pub queue: Option<(u32, u32)>,
}

/// One FPDU written by [`DdpTx::next_fpdu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduInfo {
    /// ULPDU_Length: header plus payload (octets).
    pub ulpdu_len: u16,
    /// Payload octets taken from the sink in this FPDU.
    pub payload_len: u32,
    /// Octets written to the sink (ULPDU_Length field, ULPDU, pad, CRC, markers).
    pub wire_len: usize,
    /// DDP L: this was the message's last segment; the builder is idle again.
    pub last: bool,
}

/// The message in progress.
#[derive(Debug, Clone, Copy)]
struct Current {
    msg: Message,
    /// MSN of an untagged message (unused for tagged ones).
    msn: u32,
    /// Payload octets already sent (MO of the next segment).
    sent: u32,
    /// Header length (octets), constant over the message.
    header_len: usize,
}

/// The TX FPDU builder for one direction of one connection: owns the direction's
/// [`MpaTx`] framer and the per-queue MSN counters.
#[derive(Debug, Clone)]
pub struct DdpTx {
    mpa: MpaTx,
    cfg: Config,
    next_msn: [u32; QUEUES],
    cur: Option<Current>,
    fpdus: u64,
    octets: u64,
}

impl DdpTx {
    /// A builder framing through `mpa`, with the DDP/RDMAP versions and extensions `cfg`
    /// (see [`Config::for_mpa_rev`]). Every MSN counter starts at 1 (RFC 5041 §4.3).
    pub const fn new(mpa: MpaTx, cfg: Config) -> Self {
        DdpTx {
            mpa,
            cfg,
            next_msn: [MSN_INITIAL; QUEUES],
            cur: None,
            fpdus: 0,
            octets: 0,
        }
    }

    /// A builder for a connection that completed MPA startup with `n`: markers, CRC and
    /// FPDUPTR convention from the negotiation, MULPDU from [`Negotiated::tx_mulpdu`] for
    /// `emss` (the effective MSS, octets; RFC 5044 §4.5, with or without marker overhead as
    /// negotiated, or the largest ULPDU when large FPDUs were negotiated), DDP/RDMAP
    /// versions from the MPA revision (RFC 5044 Appendix C), and the RFC 7306 opcodes if
    /// `rfc7306` (ignored on Rev 0 connections).
    pub fn for_connection(n: &Negotiated, emss: u32, rfc7306: bool) -> Self {
        let mpa = MpaTx::new(n.tx_config(n.tx_mulpdu(emss)));
        Self::new(mpa, Config::for_mpa_rev(n.rev, rfc7306))
    }

    /// Frames on `sink` the TERMINATE an Initiator sends instead of its RTR when it cannot
    /// accept the peer-to-peer negotiation (MPA startup ended in `Status::Failed` with
    /// `Action::Terminate`, RFC 6581 §9.2, §9.3): Layer 2 LLP, Error Type 0, MPA error
    /// `code`, no header echoed (RFC 5040 Figure 10), QN 2 MSN 1, as the first FPDU of Full
    /// Operation with the framing `n` negotiated (markers, CRC, versions). `emss` is the
    /// effective MSS (octets) as for [`DdpTx::for_connection`]. Returns what
    /// [`DdpTx::next_fpdu`] returns for it.
    ///
    /// # Errors
    ///
    /// [`NextError`]; nothing was written then (a 22-octet ULPDU fits any MULPDU an EMSS
    /// of at least 128 octets gives).
    pub fn startup_terminate<K: TxSink>(
        n: &Negotiated,
        emss: u32,
        code: MpaErrorCode,
        sink: &mut K,
    ) -> Result<FpduInfo, NextError> {
        let mut tx = Self::for_connection(n, emss, false);
        let t = Terminate::new(TermCause::mpa(code));
        tx.start(Message::Terminate(t)).map_err(|e| match e {
            StartError::Header(h) => NextError::Header(h),
            _ => NextError::Idle,
        })?;
        tx.next_fpdu(sink)
    }

    /// The MPA framer (stream position, configuration).
    pub const fn mpa(&self) -> &MpaTx {
        &self.mpa
    }

    /// The MPA framer, e.g. for [`MpaTx::set_mulpdu`] after an EMSS change; the new MULPDU
    /// applies from the next FPDU on.
    pub fn mpa_mut(&mut self) -> &mut MpaTx {
        &mut self.mpa
    }

    /// The DDP/RDMAP configuration in use.
    pub const fn config(&self) -> &Config {
        &self.cfg
    }

    /// The MSN the next message on queue `qn` will carry; `None` for `qn` > 3.
    pub fn next_msn(&self, qn: u32) -> Option<u32> {
        self.next_msn.get(usize::try_from(qn).ok()?).copied()
    }

    /// Sets the MSN the next message on queue `qn` will carry (for tests and for a shell
    /// that restores a stream); returns false, changing nothing, for `qn` > 3.
    pub fn set_next_msn(&mut self, qn: u32, msn: u32) -> bool {
        match usize::try_from(qn)
            .ok()
            .and_then(|q| self.next_msn.get_mut(q))
        {
            Some(slot) => {
                *slot = msn;
                true
            }
            None => false,
        }
    }

    /// Whether no message is in progress (a new one may [`DdpTx::start`]).
    pub const fn is_done(&self) -> bool {
        self.cur.is_none()
    }

    /// Payload octets of the current message not yet sent (0 when idle).
    pub fn remaining(&self) -> u32 {
        self.cur
            .as_ref()
            .map_or(0, |c| c.msg.payload_len().saturating_sub(c.sent))
    }

    /// FPDUs written so far.
    pub const fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// Octets written so far (markers, headers, payload, pad, CRC).
    pub const fn octets(&self) -> u64 {
        self.octets
    }

    /// Starts `msg`: validates it for this connection and assigns its MSN (untagged
    /// messages). Nothing is written until [`DdpTx::next_fpdu`].
    ///
    /// # Errors
    ///
    /// [`StartError`]; the builder is unchanged then.
    pub fn start(&mut self, msg: Message) -> Result<Started, StartError> {
        if self.cur.is_some() {
            return Err(StartError::Busy);
        }
        let opcode = msg.opcode();
        if !self.cfg.allows(opcode) {
            return Err(StartError::Opcode(opcode));
        }
        match msg {
            Message::Write { to, len, .. } | Message::ReadResponse { to, len, .. } => {
                check_range(to, len)?;
            }
            Message::ReadRequest(r) => {
                check_range(r.sink_to, r.size)?;
                check_range(r.src_to, r.size)?;
            }
            Message::AtomicRequest(a) if a.to % ATOMIC_ALIGN != 0 => {
                return Err(StartError::Misaligned { to: a.to });
            }
            _ => {}
        }
        let qn = opcode.queue();
        let msn = qn.and_then(|q| self.next_msn(q)).unwrap_or_default();
        // Built in place: a message is about a hundred octets.
        let cur = self.cur.insert(Current {
            msg,
            msn,
            sent: 0,
            header_len: 0,
        });
        let header = header_for(cur, true);
        if let Err(e) = header.validate(self.cfg) {
            self.cur = None;
            return Err(StartError::Header(e));
        }
        cur.header_len = header.buffer_len();
        if let Some(q) = qn {
            self.set_next_msn(q, msn.wrapping_add(1));
        }
        Ok(Started {
            opcode,
            queue: qn.map(|q| (q, msn)),
        })
    }

    /// Drops the message in progress, if any (e.g. the QP is going to error). Its MSN stays
    /// consumed. The stream is at an FPDU boundary, so a TERMINATE may be started next.
    pub fn abort(&mut self) {
        self.cur = None;
    }

    /// Header and payload octets of the next segment under the MULPDU in force.
    fn plan(&self) -> Result<(&Current, u32), NextError> {
        let cur = self.cur.as_ref().ok_or(NextError::Idle)?;
        let mulpdu = self.mpa.config().mulpdu.min(MULPDU_MAX);
        let remaining = cur.msg.payload_len().saturating_sub(cur.sent);
        let room = usize::from(mulpdu).saturating_sub(cur.header_len);
        let too_small = NextError::MulpduTooSmall {
            header: cur.header_len,
            mulpdu,
        };
        if cur.header_len > usize::from(mulpdu) || (remaining > 0 && room == 0) {
            return Err(too_small);
        }
        // room <= 64768.
        let chunk = remaining.min(u32::try_from(room).unwrap_or(u32::MAX));
        Ok((cur, chunk))
    }

    /// The on-wire length (octets, markers included) of the FPDU the next
    /// [`DdpTx::next_fpdu`] call will write: compare it with the socket's send space before
    /// calling.
    ///
    /// # Errors
    ///
    /// [`NextError::Idle`] or [`NextError::MulpduTooSmall`], as [`DdpTx::next_fpdu`] would.
    pub fn next_fpdu_len(&self) -> Result<usize, NextError> {
        let (cur, chunk) = self.plan()?;
        let ulpdu = cur.header_len.saturating_add(chunk as usize);
        let ulpdu = u16::try_from(ulpdu).unwrap_or(u16::MAX);
        Ok(self.mpa.wire_len(ulpdu))
    }

    /// Writes the next FPDU of the current message, whole, to `sink`: engine-composed
    /// octets through [`TxSink::bytes`], `payload_len` payload octets through
    /// [`TxSink::payload`] (possibly in several calls around markers). After the last
    /// segment (L=1) the builder is idle.
    ///
    /// # Errors
    ///
    /// [`NextError`]; nothing was written then.
    pub fn next_fpdu<K: TxSink>(&mut self, sink: &mut K) -> Result<FpduInfo, NextError> {
        let (cur, chunk) = self.plan()?;
        let sent_after = cur.sent.saturating_add(chunk);
        let last = sent_after >= cur.msg.payload_len();
        // ULPDU_Length, then the header (MPA fills in the length).
        let mut buf = [0u8; 2 + MAX_HEADER_LEN];
        // start() validated the first segment's header; the others differ from it only
        // in L, TO and MO.
        let n = header_for(cur, last)
            .emit_validated_into(buf.get_mut(2..).unwrap_or(&mut []), self.cfg)
            .map_err(NextError::Header)?;
        let framed = buf.get_mut(..2 + n).unwrap_or(&mut []);
        let wire_len = self
            .mpa
            .send_framed(sink, framed, chunk as usize)
            .map_err(NextError::Mpa)?;
        self.fpdus = self.fpdus.wrapping_add(1);
        self.octets = self.octets.wrapping_add(wire_len as u64);
        match self.cur.as_mut() {
            Some(c) if !last => c.sent = sent_after,
            _ => self.cur = None,
        }
        Ok(FpduInfo {
            // n + chunk <= MULPDU, checked by plan().
            ulpdu_len: u16::try_from(n.saturating_add(chunk as usize)).unwrap_or(u16::MAX),
            payload_len: chunk,
            wire_len,
            last,
        })
    }
}

/// `to + len` must fit in 64 bits.
fn check_range(to: u64, len: u32) -> Result<(), StartError> {
    match to.checked_add(u64::from(len)) {
        Some(_) => Ok(()),
        None => Err(StartError::ToWrap { to, len }),
    }
}

/// The ULPDU header of the segment of `cur` starting at `cur.sent`.
fn header_for(cur: &Current, last: bool) -> UlpduHeader {
    let opcode = cur.msg.opcode();
    match cur.msg {
        Message::Write { stag, to, .. } | Message::ReadResponse { stag, to, .. } => {
            // start() checked that to + len fits, and sent <= len.
            UlpduHeader::tagged(opcode, last, stag, to.wrapping_add(u64::from(cur.sent)))
        }
        Message::Send { invalidate, .. } => {
            let inval: u32 = invalidate.unwrap_or_default();
            UlpduHeader::untagged(opcode, last, cur.msn, cur.sent, inval)
        }
        _ => UlpduHeader::header_only(opcode, cur.msn, cur.msg.rdmap_header()),
    }
}
