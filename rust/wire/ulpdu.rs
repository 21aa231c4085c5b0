// SPDX-License-Identifier: GPL-2.0

//! The ULPDU header: DDP segment header, RDMAP control field and the opcode's RDMAP header
//! in one parse/emit step (RFC 5041 §4, RFC 5040 §4, RFC 7306 §4-§6).
//!
//! A ULPDU is what MPA delivers after removing ULPDU_Length, markers, pad and CRC. Its
//! header is the DDP header (14 octets tagged, 18 untagged), followed for some opcodes by
//! an RDMAP header (Read Request 28, Immediate Data 8, Atomic Request 52, Atomic Response
//! 12, Terminate 4..52); the rest is ULP payload. The longest header is
//! [`MAX_HEADER_LEN`] = 70 octets.
//!
//! [`UlpduHeader::parse`] validates in the order the layers see the octets (RFC 5041 §7.1,
//! RFC 5040 §7.2): DV (octet 0), then RV and opcode (octet 1), then the T bit against the
//! opcode, then QN, then L/MO of header-only messages, then the RDMAP header. A streaming
//! receiver may call it with as many octets as it has: [`ParseError::Truncated`] says how
//! many to wait for, and every other error is reported as soon as the octets that prove it
//! are there. [`ParseError::cause`] names the TERMINATE to send.
//!
//! Semantic checks that need connection state (STag validity and bounds, MSN window, MO
//! against the posted buffer, message lengths) belong to the engines.

use super::ddp::{self, Untagged};
use super::rdmap::{
    self, AtomicRequest, AtomicResponse, CtrlError, ImmediateData, Opcode, OperationError,
    RdmapError, ReadRequest,
};
use super::terminate::{self, TermCause, Terminate};

/// Longest ULPDU header: untagged DDP header and the longest RDMAP header (Atomic Request,
/// or a full Terminate header), in octets.
pub const MAX_HEADER_LEN: usize = ddp::UNTAGGED_LEN + AtomicRequest::LEN;

/// The per-connection wire versions and extensions (RFC 5044 Appendix C: DDP and RDMAP
/// versions follow the negotiated MPA revision, identical in both directions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// DDP version (DV).
    pub ddp: ddp::Version,
    /// RDMAP version (RV).
    pub rdmap: rdmap::Version,
    /// Accept and send the RFC 7306 opcodes (Immediate Data, Atomics); needs RV 1.
    pub rfc7306: bool,
}

impl Config {
    /// RFC 5041/5040 versions (DV 1, RV 1), without RFC 7306.
    pub const RFC: Config = Config {
        ddp: ddp::Version::Rfc,
        rdmap: rdmap::Version::Rfc,
        rfc7306: false,
    };
    /// RFC versions with the RFC 7306 extensions.
    pub const RFC_7306: Config = Config {
        ddp: ddp::Version::Rfc,
        rdmap: rdmap::Version::Rfc,
        rfc7306: true,
    };
    /// RDMA Consortium versions (DV 0, RV 0), for MPA Rev 0 peers.
    pub const RDMAC: Config = Config {
        ddp: ddp::Version::Rdmac,
        rdmap: rdmap::Version::Rdmac,
        rfc7306: false,
    };

    /// The versions for a connection that negotiated MPA revision `mpa_rev`: RDMAC for Rev
    /// 0, RFC otherwise; `rfc7306` is honoured only with the RFC versions.
    pub const fn for_mpa_rev(mpa_rev: u8, rfc7306: bool) -> Config {
        if mpa_rev == 0 {
            Config::RDMAC
        } else {
            Config {
                rfc7306,
                ..Config::RFC
            }
        }
    }

    /// Whether `opcode` may be used on this connection.
    pub const fn allows(&self, opcode: Opcode) -> bool {
        !opcode.is_rfc7306() || (self.rfc7306 && matches!(self.rdmap, rdmap::Version::Rfc))
    }
}

/// Where a segment's payload goes: the DDP buffer model fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Tagged buffer (T=1).
    Tagged {
        /// STag of the Data Sink buffer.
        stag: u32,
        /// TO (octets).
        to: u64,
    },
    /// Untagged buffer (T=0).
    Untagged {
        /// QN.
        qn: u32,
        /// MSN.
        msn: u32,
        /// MO (octets).
        mo: u32,
    },
}

/// The opcode-specific RDMAP header after the DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmapHeader {
    /// No RDMAP header (Write, Read Response, Send variants).
    None,
    /// RDMA Read Request header.
    ReadRequest(ReadRequest),
    /// Terminate header.
    Terminate(Terminate),
    /// Immediate Data (RFC 7306).
    Immediate(ImmediateData),
    /// Atomic Request header (RFC 7306).
    AtomicRequest(AtomicRequest),
    /// Atomic Response header (RFC 7306).
    AtomicResponse(AtomicResponse),
}

impl RdmapHeader {
    /// Octets the header occupies on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            RdmapHeader::None => 0,
            RdmapHeader::ReadRequest(_) => ReadRequest::LEN,
            RdmapHeader::Terminate(t) => t.buffer_len(),
            RdmapHeader::Immediate(_) => ImmediateData::LEN,
            RdmapHeader::AtomicRequest(_) => AtomicRequest::LEN,
            RdmapHeader::AtomicResponse(_) => AtomicResponse::LEN,
        }
    }

    /// Whether this header is the one `opcode` uses.
    pub const fn matches(&self, opcode: Opcode) -> bool {
        matches!(
            (self, opcode),
            (RdmapHeader::ReadRequest(_), Opcode::ReadRequest)
                | (RdmapHeader::Terminate(_), Opcode::Terminate)
                | (
                    RdmapHeader::Immediate(_),
                    Opcode::ImmediateData | Opcode::ImmediateDataSe
                )
                | (RdmapHeader::AtomicRequest(_), Opcode::AtomicRequest)
                | (RdmapHeader::AtomicResponse(_), Opcode::AtomicResponse)
                | (
                    RdmapHeader::None,
                    Opcode::Write
                        | Opcode::ReadResponse
                        | Opcode::Send
                        | Opcode::SendInvalidate
                        | Opcode::SendSe
                        | Opcode::SendSeInvalidate
                )
        )
    }
}

/// A decoded ULPDU header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UlpduHeader {
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// DDP L: last segment of the message.
    pub last: bool,
    /// Tagged (STag, TO) or untagged (QN, MSN, MO) placement fields; the model matches the
    /// opcode.
    pub placement: Placement,
    /// Invalidate STag (RsvdULP[8:39]) for Send with Invalidate and Send with SE and
    /// Invalidate; 0 for every other opcode (sent as zero, ignored on receive).
    pub inval_stag: u32,
    /// The opcode's RDMAP header.
    pub rdmap: RdmapHeader,
}

/// Why a ULPDU header was rejected. [`ParseError::cause`] gives the TERMINATE cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer than `need` octets: a streaming receiver waits for them; for a whole ULPDU the
    /// segment is too short for its headers.
    Truncated {
        /// Octets needed from the start of the ULPDU.
        need: usize,
    },
    /// DV differs from the connection's DDP version.
    DdpVersion {
        /// T bit of the segment.
        tagged: bool,
        /// DV received.
        dv: u8,
    },
    /// RV differs from the connection's RDMAP version (the RV received).
    RdmapVersion(u8),
    /// Opcode unassigned or not enabled on the connection (the opcode received).
    Opcode(u8),
    /// The T bit does not match the opcode (Write or Read Response untagged, or any
    /// other opcode tagged).
    TaggedMismatch(Opcode),
    /// QN differs from the opcode's queue.
    InvalidQn {
        /// The opcode.
        opcode: Opcode,
        /// QN received.
        qn: u32,
    },
    /// L=0 on a header-only message ([`Opcode::single_segment`]).
    NotLast(Opcode),
    /// MO != 0 on a header-only message.
    InvalidMo {
        /// The opcode.
        opcode: Opcode,
        /// MO received.
        mo: u32,
    },
    /// Atomic Request with an unsupported AOpCode (the value received).
    AtomicOpcode(u8),
    /// Terminate header with an unassigned Layer (the value received).
    TerminateLayer(u8),
    /// A header-only message (Read Request, Immediate Data, Atomics) with octets after its
    /// header: see [`UlpduHeader::check_segment_len`].
    Payload {
        /// The opcode.
        opcode: Opcode,
        /// ULPDU length received (octets).
        len: usize,
    },
}

impl ParseError {
    /// The TERMINATE cause for this error (RFC 5041 §7.2, RFC 5040 §4.8 Figure 9):
    ///
    /// - `DdpVersion`: DDP 1/0x04 (tagged) or 2/0x06 (untagged);
    /// - `RdmapVersion`: RDMAP 0/2/0x05;
    /// - `Opcode`, `TaggedMismatch`, `NotLast`, `AtomicOpcode`, `Payload`: RDMAP 0/2/0x06
    ///   (Unexpected OpCode);
    /// - `InvalidQn`: DDP 1/2/0x01; `InvalidMo`: DDP 1/2/0x04;
    /// - `Truncated` (a whole ULPDU shorter than its headers) and `TerminateLayer`: RDMAP
    ///   0/2/0xFF (Unspecified): no RFC assigns a code. (Linux siw sends LLP 2/0/0x03 for
    ///   a too-short ULPDU.) An incoming TERMINATE is never answered, so the latter only
    ///   serves local reporting.
    pub const fn cause(&self) -> TermCause {
        match self {
            ParseError::DdpVersion { tagged, .. } => {
                TermCause::ddp(ddp::DdpError::bad_version(*tagged))
            }
            ParseError::RdmapVersion(_) => {
                TermCause::rdmap(RdmapError::RemoteOperation(OperationError::InvalidVersion))
            }
            ParseError::Opcode(_)
            | ParseError::TaggedMismatch(_)
            | ParseError::NotLast(_)
            | ParseError::AtomicOpcode(_)
            | ParseError::Payload { .. } => TermCause::rdmap(RdmapError::RemoteOperation(
                OperationError::UnexpectedOpcode,
            )),
            ParseError::InvalidQn { .. } => {
                TermCause::ddp(ddp::DdpError::Untagged(ddp::UntaggedError::InvalidQn))
            }
            ParseError::InvalidMo { .. } => {
                TermCause::ddp(ddp::DdpError::Untagged(ddp::UntaggedError::InvalidMo))
            }
            ParseError::Truncated { .. } | ParseError::TerminateLayer(_) => {
                TermCause::rdmap(RdmapError::RemoteOperation(OperationError::Unspecified))
            }
        }
    }
}

/// Why a ULPDU header could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer is shorter than [`UlpduHeader::buffer_len`].
    BufferTooSmall,
    /// The opcode is not enabled by the [`Config`].
    Opcode(Opcode),
    /// The header would not parse back: placement model, QN, RDMAP header, L or MO do not
    /// fit the opcode, or a non-zero Invalidate STag on an opcode without one.
    Inconsistent,
    /// The Terminate's Error Type does not fit in 4 bits.
    EtypeRange,
}

fn shift(e: ParseError, by: usize) -> ParseError {
    match e {
        ParseError::Truncated { need } => ParseError::Truncated {
            need: need.saturating_add(by),
        },
        other => other,
    }
}

impl UlpduHeader {
    /// A tagged header (Write, Read Response) without RDMAP header.
    pub const fn tagged(opcode: Opcode, last: bool, stag: u32, to: u64) -> Self {
        UlpduHeader {
            opcode,
            last,
            placement: Placement::Tagged { stag, to },
            inval_stag: 0,
            rdmap: RdmapHeader::None,
        }
    }

    /// An untagged header without RDMAP header (Send variants) on the opcode's queue;
    /// `inval_stag` is used only by the Invalidate variants (pass 0 otherwise).
    pub const fn untagged(opcode: Opcode, last: bool, msn: u32, mo: u32, inval_stag: u32) -> Self {
        let qn = match opcode.queue() {
            Some(q) => q,
            None => 0,
        };
        UlpduHeader {
            opcode,
            last,
            placement: Placement::Untagged { qn, msn, mo },
            inval_stag,
            rdmap: RdmapHeader::None,
        }
    }

    /// A single-segment message (L=1, MO=0) carrying only RDMAP header `rdmap` with
    /// `opcode` on its queue and MSN `msn`: Read Request, Terminate, Immediate Data,
    /// Atomic Request/Response.
    pub const fn header_only(opcode: Opcode, msn: u32, rdmap: RdmapHeader) -> Self {
        let mut h = Self::untagged(opcode, true, msn, 0, 0);
        h.rdmap = rdmap;
        h
    }

    /// Length of the DDP header (14 or 18 octets).
    pub const fn ddp_header_len(&self) -> usize {
        match self.placement {
            Placement::Tagged { .. } => ddp::TAGGED_LEN,
            Placement::Untagged { .. } => ddp::UNTAGGED_LEN,
        }
    }

    /// Octets [`UlpduHeader::emit_into`] writes: DDP header plus RDMAP header.
    pub fn buffer_len(&self) -> usize {
        self.ddp_header_len() + self.rdmap.buffer_len()
    }

    /// The DDP-layer view of this header, with the RDMAP control octet in RsvdULP.
    pub const fn ddp_header(&self, version: rdmap::Version) -> ddp::Header {
        let rsvd_ulp = rdmap::Ctrl {
            version,
            opcode: self.opcode,
        }
        .to_octet();
        match self.placement {
            Placement::Tagged { stag, to } => ddp::Header::Tagged(ddp::Tagged {
                last: self.last,
                rsvd_ulp,
                stag,
                to,
            }),
            Placement::Untagged { qn, msn, mo } => ddp::Header::Untagged(Untagged {
                last: self.last,
                rsvd_ulp,
                rsvd_ulp_ext: self.inval_stag,
                qn,
                msn,
                mo,
            }),
        }
    }

    /// The length in octets of the ULPDU header that starts with `start` (at least its
    /// first [`ddp::CTRL_LEN`] octets), as far as they tell: the DDP header and the
    /// opcode's RDMAP header, of which a Terminate's first [`terminate::CTRL_LEN`] octets
    /// (its flags tell the rest). A streaming receiver collects that many octets before
    /// it calls [`UlpduHeader::parse`] instead of calling it on every prefix. `None` if
    /// `start` is shorter or names no opcode `cfg` allows; [`UlpduHeader::parse`] then
    /// says what is wrong. Nothing else is checked.
    pub fn header_len_hint(start: &[u8], cfg: Config) -> Option<usize> {
        let (c0, c1) = (*start.first()?, *start.get(1)?);
        let opcode = rdmap::Ctrl::parse(c1, cfg.rdmap, cfg.rfc7306).ok()?.opcode;
        let rdmap = match opcode {
            Opcode::ReadRequest => ReadRequest::LEN,
            Opcode::ImmediateData | Opcode::ImmediateDataSe => ImmediateData::LEN,
            Opcode::AtomicRequest => AtomicRequest::LEN,
            Opcode::AtomicResponse => AtomicResponse::LEN,
            Opcode::Terminate => terminate::CTRL_LEN,
            Opcode::Write
            | Opcode::ReadResponse
            | Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate => 0,
        };
        Some(ddp::header_len(c0) + rdmap)
    }

    /// Parses and validates the ULPDU header at the start of `buf` (a ULPDU, or as much of
    /// one as has arrived) for a connection with `cfg`; returns the header and its length
    /// in octets (the ULP payload starts there). Reserved bits are ignored, as is the
    /// Invalidate STag field of opcodes that have none.
    ///
    /// # Errors
    ///
    /// [`ParseError`], in wire order (see the module documentation).
    pub fn parse(buf: &[u8], cfg: Config) -> Result<(Self, usize), ParseError> {
        let trunc = |need| ParseError::Truncated { need };
        let ctrl = *buf.first().ok_or(trunc(ddp::CTRL_LEN))?;
        let tagged = ctrl & ddp::FLAG_T != 0;
        let dv = ctrl & ddp::DV_MASK;
        if dv != cfg.ddp.dv() {
            return Err(ParseError::DdpVersion { tagged, dv });
        }
        let octet = *buf.get(1).ok_or(trunc(ddp::CTRL_LEN))?;
        let opcode = match rdmap::Ctrl::parse(octet, cfg.rdmap, cfg.rfc7306) {
            Ok(c) => c.opcode,
            Err(CtrlError::Version(rv)) => return Err(ParseError::RdmapVersion(rv)),
            Err(CtrlError::Opcode(op)) => return Err(ParseError::Opcode(op)),
        };
        if tagged != opcode.is_tagged() {
            return Err(ParseError::TaggedMismatch(opcode));
        }
        let ddp_hdr = ddp::Header::parse(buf, cfg.ddp).map_err(|e| match e {
            ddp::ParseError::Truncated { need } => trunc(need),
            ddp::ParseError::Version { tagged, dv } => ParseError::DdpVersion { tagged, dv },
        })?;
        let hl = ddp_hdr.header_len();
        let (placement, inval_stag, last) = match ddp_hdr {
            ddp::Header::Tagged(t) => (
                Placement::Tagged {
                    stag: t.stag,
                    to: t.to,
                },
                0,
                t.last,
            ),
            ddp::Header::Untagged(u) => {
                if Some(u.qn) != opcode.queue() {
                    return Err(ParseError::InvalidQn { opcode, qn: u.qn });
                }
                if opcode.single_segment() {
                    if !u.last {
                        return Err(ParseError::NotLast(opcode));
                    }
                    if u.mo != 0 {
                        return Err(ParseError::InvalidMo { opcode, mo: u.mo });
                    }
                }
                let inval = if opcode.has_invalidate_stag() {
                    u.rsvd_ulp_ext
                } else {
                    0
                };
                (
                    Placement::Untagged {
                        qn: u.qn,
                        msn: u.msn,
                        mo: u.mo,
                    },
                    inval,
                    u.last,
                )
            }
        };
        let rest = buf.get(hl..).unwrap_or(&[]);
        let rmap = |e: rdmap::ParseError| match e {
            rdmap::ParseError::Truncated { need } => shift(trunc(need), hl),
            rdmap::ParseError::AtomicOpcode(c) => ParseError::AtomicOpcode(c),
        };
        let (rdmap, rlen) = match opcode {
            Opcode::ReadRequest => (
                RdmapHeader::ReadRequest(ReadRequest::parse(rest).map_err(rmap)?),
                ReadRequest::LEN,
            ),
            Opcode::ImmediateData | Opcode::ImmediateDataSe => (
                RdmapHeader::Immediate(ImmediateData::parse(rest).map_err(rmap)?),
                ImmediateData::LEN,
            ),
            Opcode::AtomicRequest => (
                RdmapHeader::AtomicRequest(AtomicRequest::parse(rest).map_err(rmap)?),
                AtomicRequest::LEN,
            ),
            Opcode::AtomicResponse => (
                RdmapHeader::AtomicResponse(AtomicResponse::parse(rest).map_err(rmap)?),
                AtomicResponse::LEN,
            ),
            Opcode::Terminate => {
                let (t, n) = Terminate::parse(rest).map_err(|e| match e {
                    terminate::ParseError::Truncated { need } => shift(trunc(need), hl),
                    terminate::ParseError::Layer(l) => ParseError::TerminateLayer(l),
                })?;
                (RdmapHeader::Terminate(t), n)
            }
            Opcode::Write
            | Opcode::ReadResponse
            | Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate => (RdmapHeader::None, 0),
        };
        let h = UlpduHeader {
            opcode,
            last,
            placement,
            inval_stag,
            rdmap,
        };
        Ok((h, hl + rlen))
    }

    /// Checks the length of the whole ULPDU (`ulpdu_len` octets, the FPDU's ULPDU_Length)
    /// against this header: it must hold the header, and header-only messages other than
    /// Terminate must carry nothing after it (RFC 5040 §4.2 Figure 5: no ULP payload in a
    /// Read Request; RFC 7306 §6.3: Immediate Data is exactly 8 octets). Octets after a
    /// Terminate header are tolerated (RFC 7306 §8.1 "zeroed" headers).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `ulpdu_len` is shorter than the header,
    /// [`ParseError::Payload`] if a header-only message is longer.
    pub fn check_segment_len(&self, ulpdu_len: usize) -> Result<(), ParseError> {
        let need = self.buffer_len();
        if ulpdu_len < need {
            Err(ParseError::Truncated { need })
        } else if ulpdu_len > need
            && !self.opcode.carries_payload()
            && !matches!(self.opcode, Opcode::Terminate)
        {
            Err(ParseError::Payload {
                opcode: self.opcode,
                len: ulpdu_len,
            })
        } else {
            Ok(())
        }
    }

    /// Checks that the header would parse back unchanged on a connection with `cfg`, so
    /// that [`UlpduHeader::emit_into`] into a buffer of [`UlpduHeader::buffer_len`] octets
    /// succeeds.
    ///
    /// # Errors
    ///
    /// [`EmitError::Opcode`], [`EmitError::Inconsistent`] or [`EmitError::EtypeRange`].
    pub fn validate(&self, cfg: Config) -> Result<(), EmitError> {
        if !cfg.allows(self.opcode) {
            return Err(EmitError::Opcode(self.opcode));
        }
        if let RdmapHeader::Terminate(t) = &self.rdmap {
            if t.cause.etype > 0x0F {
                return Err(EmitError::EtypeRange);
            }
        }
        let ok_placement = match self.placement {
            Placement::Tagged { .. } => self.opcode.is_tagged(),
            Placement::Untagged { qn, mo, .. } => {
                Some(qn) == self.opcode.queue()
                    && (!self.opcode.single_segment() || (self.last && mo == 0))
            }
        };
        let ok_inval = self.inval_stag == 0 || self.opcode.has_invalidate_stag();
        if ok_placement && ok_inval && self.rdmap.matches(self.opcode) {
            Ok(())
        } else {
            Err(EmitError::Inconsistent)
        }
    }

    /// Writes the DDP header and the RDMAP header into the start of `buf` for a connection
    /// with `cfg`; returns the octets written ([`UlpduHeader::buffer_len`]). The ULP
    /// payload, if any, goes right after.
    ///
    /// # Errors
    ///
    /// [`EmitError`]; nothing useful is written then.
    pub fn emit_into(&self, buf: &mut [u8], cfg: Config) -> Result<usize, EmitError> {
        self.validate(cfg)?;
        self.emit_validated_into(buf, cfg)
    }

    /// [`UlpduHeader::emit_into`] without [`UlpduHeader::validate`], for a header built
    /// from one that passed it on this connection by changing only its L bit, TO, MSN or
    /// MO (a builder's later segments): what is written then parses back unchanged.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`], or [`EmitError::EtypeRange`] for a Terminate
    /// header with an etype over 4 bits; nothing useful is written then.
    pub fn emit_validated_into(&self, buf: &mut [u8], cfg: Config) -> Result<usize, EmitError> {
        let len = self.buffer_len();
        let out = buf.get_mut(..len).ok_or(EmitError::BufferTooSmall)?;
        let hl = self
            .ddp_header(cfg.rdmap)
            .emit_into(out, cfg.ddp)
            .map_err(|_| EmitError::BufferTooSmall)?;
        let rest = out.get_mut(hl..).ok_or(EmitError::BufferTooSmall)?;
        let small = |_| EmitError::BufferTooSmall;
        match &self.rdmap {
            RdmapHeader::None => 0,
            RdmapHeader::ReadRequest(r) => r.emit_into(rest).map_err(small)?,
            RdmapHeader::Immediate(i) => i.emit_into(rest).map_err(small)?,
            RdmapHeader::AtomicRequest(a) => a.emit_into(rest).map_err(small)?,
            RdmapHeader::AtomicResponse(a) => a.emit_into(rest).map_err(small)?,
            RdmapHeader::Terminate(t) => t.emit_into(rest).map_err(|e| match e {
                terminate::EmitError::BufferTooSmall => EmitError::BufferTooSmall,
                terminate::EmitError::EtypeRange => EmitError::EtypeRange,
            })?,
        };
        Ok(len)
    }
}
