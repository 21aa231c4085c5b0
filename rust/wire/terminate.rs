// SPDX-License-Identifier: GPL-2.0

//! The TERMINATE header (RFC 5040 §4.8, Appendix A.6) and the error cause it carries.
//!
//! A TERMINATE is an untagged RDMAP message (opcode 7, QN 2, MO 0, L=1). After its 18-octet
//! DDP header comes, offsets relative to the end of that DDP header:
//!
//! ```text
//! 0      |Layer(4)|EType(4)|
//! 1      Error Code
//! 2      |M|D|R|Rsvd(5)|          M=0x80 D=0x40 R=0x20
//! 3      Rsvd
//! 4..5   DDP Segment Length       present if M or D; valid if M
//! ..     Terminated DDP Header    if D: 14 (T=1) or 18 (T=0) octets
//! ..     Terminated RDMA Header   if R: the 28-octet RDMA Read Request header
//! ```
//!
//! The DDP Segment Length and the Terminated DDP Header together are the offending FPDU's
//! ULPDU_Length field followed by its DDP header. Which parts to include depends on the
//! cause (RFC 5040 §4.8 Figure 10): see [`TermCause::includes_ddp_header`] and
//! [`TermCause::includes_rdma_header`].

use super::ddp::{self, get_u16, put, DdpError, TaggedError};
use super::mpa::MpaErrorCode;
use super::rdmap::{Opcode, RdmapError, ReadRequest};

/// Length of the Terminate Control word including its reserved bits (octets).
pub const CTRL_LEN: usize = 4;
/// Length of the DDP Segment Length field (octets).
pub const SEG_LEN_LEN: usize = 2;
/// Largest TERMINATE header after the DDP header: control, segment length, untagged DDP
/// header, Read Request header (octets).
pub const MAX_LEN: usize = CTRL_LEN + SEG_LEN_LEN + ddp::UNTAGGED_LEN + ReadRequest::LEN;

/// HdrCt M: DDP Segment Length valid (octet 2 of the header).
pub const FLAG_M: u8 = 0x80;
/// HdrCt D: Terminated DDP Header included.
pub const FLAG_D: u8 = 0x40;
/// HdrCt R: Terminated RDMA Header included.
pub const FLAG_R: u8 = 0x20;

/// The layer that detected the error (RFC 5040 §4.8 Figure 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// 0: RDMAP.
    Rdma = 0,
    /// 1: DDP.
    Ddp = 1,
    /// 2: the LLP, i.e. MPA.
    Llp = 2,
}

impl Layer {
    /// The 4-bit Layer value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The layer with value `code`; `None` for unassigned values.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Layer::Rdma),
            1 => Some(Layer::Ddp),
            2 => Some(Layer::Llp),
            _ => None,
        }
    }
}

/// Error Type of MPA errors (layer LLP; RFC 5044 §8).
pub const MPA_ETYPE: u8 = 0;

/// The cause a TERMINATE reports: Layer, Error Type (4 bits) and Error Code (8 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermCause {
    /// Layer that detected the error.
    pub layer: Layer,
    /// Error Type, 0..=15.
    pub etype: u8,
    /// Error Code.
    pub ecode: u8,
}

/// The typed error a [`TermCause`] names, see [`TermCause::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// An RDMAP error (layer 0).
    Rdmap(RdmapError),
    /// A DDP error (layer 1).
    Ddp(DdpError),
    /// An MPA error (layer 2, Error Type 0).
    Mpa(MpaErrorCode),
    /// A combination no specification assigns.
    Unknown,
}

const fn mpa_from_code(code: u8) -> Option<MpaErrorCode> {
    match code {
        1 => Some(MpaErrorCode::TcpClosed),
        2 => Some(MpaErrorCode::CrcMismatch),
        3 => Some(MpaErrorCode::MarkerMismatch),
        4 => Some(MpaErrorCode::InvalidStartup),
        5 => Some(MpaErrorCode::LocalCatastrophic),
        6 => Some(MpaErrorCode::InsufficientIrd),
        7 => Some(MpaErrorCode::NoMatchingRtr),
        _ => None,
    }
}

impl TermCause {
    /// The cause for an RDMAP error (layer 0).
    pub const fn rdmap(e: RdmapError) -> Self {
        TermCause {
            layer: Layer::Rdma,
            etype: e.etype(),
            ecode: e.ecode(),
        }
    }

    /// The cause for a DDP error (layer 1).
    pub const fn ddp(e: DdpError) -> Self {
        TermCause {
            layer: Layer::Ddp,
            etype: e.etype(),
            ecode: e.ecode(),
        }
    }

    /// The cause for an MPA error (layer 2, Error Type 0, RFC 5044 §8 / RFC 6581 §8).
    pub const fn mpa(e: MpaErrorCode) -> Self {
        TermCause {
            layer: Layer::Llp,
            etype: MPA_ETYPE,
            ecode: e.code(),
        }
    }

    /// The typed error this cause names.
    pub const fn decode(&self) -> Cause {
        let d = match self.layer {
            Layer::Rdma => match RdmapError::from_codes(self.etype, self.ecode) {
                Some(e) => Some(Cause::Rdmap(e)),
                None => None,
            },
            Layer::Ddp => match DdpError::from_codes(self.etype, self.ecode) {
                Some(e) => Some(Cause::Ddp(e)),
                None => None,
            },
            Layer::Llp if self.etype == MPA_ETYPE => match mpa_from_code(self.ecode) {
                Some(e) => Some(Cause::Mpa(e)),
                None => None,
            },
            Layer::Llp => None,
        };
        match d {
            Some(c) => c,
            None => Cause::Unknown,
        }
    }

    /// Whether the cause is a memory protection error: a tagged buffer error other than
    /// the DDP version (invalid STag, base or bounds, STag not associated, TO wrap; RFC
    /// 5041 §7.2, Error Type 1) or an RDMAP remote protection error (RFC 5040 §7.2, Error
    /// Type 1). The verbs consumer learns of these as a local access violation
    /// (`IB_EVENT_QP_ACCESS_ERR`), of every other cause as a fatal QP error.
    pub const fn is_protection_error(&self) -> bool {
        match self.layer {
            Layer::Rdma => self.etype == 1,
            Layer::Ddp => self.etype == 1 && self.ecode <= TaggedError::ToWrap as u8,
            Layer::Llp => false,
        }
    }

    /// Whether the TERMINATE should carry the DDP Segment Length and the Terminated DDP
    /// Header (M and D) for this cause, when the offending header is available (RFC 5040
    /// Figure 10): yes for DDP errors and RDMAP remote protection/operation errors, no for
    /// local catastrophic and LLP errors.
    pub const fn includes_ddp_header(&self) -> bool {
        match self.layer {
            Layer::Rdma => self.etype == 1 || self.etype == 2,
            Layer::Ddp => self.etype != 0,
            Layer::Llp => false,
        }
    }

    /// Whether the TERMINATE should carry the Terminated RDMA Header (R) for this cause
    /// caused by a message with `opcode` (RFC 5040 Figure 10): only RDMAP remote protection
    /// errors on an RDMA Read Request, the only message with an RDMA header to echo.
    pub const fn includes_rdma_header(&self, opcode: Opcode) -> bool {
        matches!(self.layer, Layer::Rdma)
            && self.etype == 1
            && matches!(opcode, Opcode::ReadRequest)
    }
}

impl TermCause {
    /// The cause in words: the layer's name, the Error Type's name, the Error Code's
    /// meaning and the section that assigns them (RFC 5040 §7, RFC 5041 §7.2, RFC 5044 §8
    /// with RFC 6581 §8). Unassigned values read "unassigned".
    pub const fn words(&self) -> CauseWords {
        let (layer, etype, code, section) = match self.decode() {
            Cause::Rdmap(e) => ("RDMAP", rdmap_type(e), rdmap_code(e), "RFC 5040 §7"),
            Cause::Ddp(e) => ("DDP", ddp_type(e), ddp_code(e), "RFC 5041 §7.2"),
            Cause::Mpa(e) => ("MPA", "LLP error", mpa_code(e), "RFC 5044 §8, RFC 6581 §8"),
            Cause::Unknown => (
                match self.layer {
                    Layer::Rdma => "RDMAP",
                    Layer::Ddp => "DDP",
                    Layer::Llp => "MPA",
                },
                "unassigned",
                "unassigned",
                "no RFC assigns it",
            ),
        };
        CauseWords {
            layer,
            etype,
            code,
            section,
        }
    }
}

/// A [`TermCause`] in words, see [`TermCause::words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CauseWords {
    /// The layer that detected the error: "RDMAP", "DDP" or "MPA".
    pub layer: &'static str,
    /// The Error Type's name, e.g. "tagged buffer error".
    pub etype: &'static str,
    /// The Error Code's meaning, e.g. "invalid STag".
    pub code: &'static str,
    /// The specification section that assigns the values.
    pub section: &'static str,
}

/// "layer 1 (DDP), type 1 (tagged buffer error), code 0x00 (invalid STag), RFC 5041 §7.2":
/// the numbers as on the wire, each with its meaning.
impl core::fmt::Display for TermCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let w = self.words();
        write!(
            f,
            "layer {} ({}), type {} ({}), code {:#04x} ({}), {}",
            self.layer.code(),
            w.layer,
            self.etype,
            w.etype,
            self.ecode,
            w.code,
            w.section
        )
    }
}

const fn rdmap_type(e: RdmapError) -> &'static str {
    match e {
        RdmapError::LocalCatastrophic => "local catastrophic error",
        RdmapError::RemoteProtection(_) => "remote protection error",
        RdmapError::RemoteOperation(_) => "remote operation error",
    }
}

const fn rdmap_code(e: RdmapError) -> &'static str {
    use super::rdmap::{OperationError as O, ProtectionError as P};
    match e {
        RdmapError::LocalCatastrophic => "local catastrophic",
        RdmapError::RemoteProtection(p) => match p {
            P::InvalidStag => "invalid STag",
            P::BaseBounds => "base or bounds violation",
            P::AccessRights => "access rights violation",
            P::StagNotAssociated => "STag not associated with the RDMAP Stream",
            P::ToWrap => "TO wrap",
            P::CannotInvalidate => "STag cannot be invalidated",
            P::Unspecified => "unspecified",
        },
        RdmapError::RemoteOperation(o) => match o {
            O::InvalidVersion => "invalid RDMAP version",
            O::UnexpectedOpcode => "unexpected opcode",
            O::CatastrophicStream => "catastrophic error, localized to the RDMAP Stream",
            O::CatastrophicGlobal => "catastrophic error, global",
            O::CannotInvalidate => "STag cannot be invalidated",
            O::Unspecified => "unspecified",
        },
    }
}

const fn ddp_type(e: DdpError) -> &'static str {
    match e {
        DdpError::LocalCatastrophic => "local catastrophic error",
        DdpError::Tagged(_) => "tagged buffer error",
        DdpError::Untagged(_) => "untagged buffer error",
    }
}

const fn ddp_code(e: DdpError) -> &'static str {
    use super::ddp::UntaggedError as U;
    match e {
        DdpError::LocalCatastrophic => "local catastrophic",
        DdpError::Tagged(t) => match t {
            TaggedError::InvalidStag => "invalid STag",
            TaggedError::BaseBounds => "base or bounds violation",
            TaggedError::StagNotAssociated => "STag not associated with the DDP Stream",
            TaggedError::ToWrap => "TO wrap",
            TaggedError::InvalidVersion => "invalid DDP version",
        },
        DdpError::Untagged(u) => match u {
            U::InvalidQn => "invalid QN",
            U::NoBuffer => "invalid MSN, no buffer available",
            U::MsnRange => "invalid MSN, MSN range is not valid",
            U::InvalidMo => "invalid MO",
            U::TooLong => "DDP message too long for the available buffer",
            U::InvalidVersion => "invalid DDP version",
        },
    }
}

const fn mpa_code(e: MpaErrorCode) -> &'static str {
    match e {
        MpaErrorCode::TcpClosed => "TCP connection closed, terminated or lost",
        MpaErrorCode::CrcMismatch => "received CRC does not match the calculated value",
        MpaErrorCode::MarkerMismatch => "marker and ULPDU_Length disagree",
        MpaErrorCode::InvalidStartup => "invalid MPA Request or Reply frame",
        MpaErrorCode::LocalCatastrophic => "local catastrophic",
        MpaErrorCode::InsufficientIrd => "insufficient IRD resources",
        MpaErrorCode::NoMatchingRtr => "no matching RTR option",
    }
}

impl From<RdmapError> for TermCause {
    fn from(e: RdmapError) -> Self {
        TermCause::rdmap(e)
    }
}

impl From<DdpError> for TermCause {
    fn from(e: DdpError) -> Self {
        TermCause::ddp(e)
    }
}

impl From<MpaErrorCode> for TermCause {
    fn from(e: MpaErrorCode) -> Self {
        TermCause::mpa(e)
    }
}

/// A copy of the offending segment's DDP header, as carried in a TERMINATE (14 or 18
/// octets, by its T bit). Kept as raw octets: the header may be the one that was rejected
/// (bad DV, say), so it is echoed exactly as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoedDdpHeader {
    bytes: [u8; ddp::MAX_HEADER_LEN],
    len: usize,
}

impl EchoedDdpHeader {
    /// Takes the DDP header at the start of `seg` (the offending ULPDU); its length comes
    /// from the T bit of `seg[0]`. Returns `None` if `seg` is shorter than that header.
    pub fn from_bytes(seg: &[u8]) -> Option<Self> {
        let len = ddp::header_len(*seg.first()?);
        let src = seg.get(..len)?;
        let mut bytes = [0; ddp::MAX_HEADER_LEN];
        bytes.get_mut(..len)?.copy_from_slice(src);
        Some(EchoedDdpHeader { bytes, len })
    }

    /// The echo of header `h` as it would be sent with DDP version `version`.
    pub fn from_header(h: &ddp::Header, version: ddp::Version) -> Self {
        let mut bytes = [0; ddp::MAX_HEADER_LEN];
        let len = h.emit_into(&mut bytes, version).unwrap_or(0);
        EchoedDdpHeader { bytes, len }
    }

    /// The header octets (14 or 18).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    /// The header decoded whatever its DV; returns the header and its DV.
    ///
    /// # Errors
    ///
    /// Never in practice (the length matches the T bit by construction).
    pub fn header(&self) -> Result<(ddp::Header, u8), ddp::ParseError> {
        ddp::Header::parse_any(self.as_bytes())
    }
}

/// A TERMINATE header (the part after the DDP header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminate {
    /// The error.
    pub cause: TermCause,
    /// M: the DDP Segment Length, i.e. the offending FPDU's ULPDU_Length (octets). `None`
    /// with `ddp_header` present means the field is sent (as zero) but not valid.
    pub seg_len: Option<u16>,
    /// D: the offending segment's DDP header.
    pub ddp_header: Option<EchoedDdpHeader>,
    /// R: the RDMA Read Request header of the offending (or partly served) Read Request.
    pub rdma_header: Option<ReadRequest>,
}

/// Why a TERMINATE header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer holds fewer than `need` octets (the flags announce more than is there).
    Truncated {
        /// Octets needed, counted from the start of the TERMINATE header.
        need: usize,
    },
    /// Layer value 3..15 (the value received).
    Layer(u8),
}

/// Why a TERMINATE header could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer is shorter than [`Terminate::buffer_len`].
    BufferTooSmall,
    /// The Error Type does not fit in 4 bits.
    EtypeRange,
}

impl Terminate {
    /// A TERMINATE carrying only `cause` (M, D, R clear): local catastrophic and LLP errors.
    pub const fn new(cause: TermCause) -> Self {
        Terminate {
            cause,
            seg_len: None,
            ddp_header: None,
            rdma_header: None,
        }
    }

    /// The TERMINATE for `cause` triggered by the segment whose ULPDU_Length is `ulpdu_len`
    /// and whose ULPDU starts with `ulpdu` (at least its DDP header, if available), applying
    /// RFC 5040 Figure 10: sets M and D when the cause calls for it and the header is whole
    /// in `ulpdu`, and R with `read_request` when the cause is a remote protection error on
    /// a Read Request.
    pub fn for_segment(
        cause: TermCause,
        ulpdu_len: u16,
        ulpdu: &[u8],
        read_request: Option<ReadRequest>,
    ) -> Self {
        let mut t = Terminate::new(cause);
        if cause.includes_ddp_header() {
            if let Some(h) = EchoedDdpHeader::from_bytes(ulpdu) {
                t.seg_len = Some(ulpdu_len);
                t.ddp_header = Some(h);
            }
        }
        if cause.includes_rdma_header(Opcode::ReadRequest) {
            t.rdma_header = read_request;
        }
        t
    }

    /// Octets [`Terminate::emit_into`] writes.
    pub fn buffer_len(&self) -> usize {
        let mut len = CTRL_LEN;
        if self.seg_len.is_some() || self.ddp_header.is_some() {
            len += SEG_LEN_LEN;
        }
        if let Some(h) = &self.ddp_header {
            len += h.as_bytes().len();
        }
        if self.rdma_header.is_some() {
            len += ReadRequest::LEN;
        }
        len
    }

    /// Parses a TERMINATE header at the start of `buf` (the octets after the DDP header);
    /// returns it and the octets it occupies. Reserved bits are ignored, and so are octets
    /// after the announced parts (RFC 7306 §8.1 has peers send "zeroed" headers with D/R
    /// clear, which may be present or not).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the flags announce more than `buf` holds;
    /// [`ParseError::Layer`] for an unassigned layer.
    pub fn parse(buf: &[u8]) -> Result<(Self, usize), ParseError> {
        let ctrl = buf
            .get(..CTRL_LEN)
            .ok_or(ParseError::Truncated { need: CTRL_LEN })?;
        let (b0, ecode, hdrct) = match ctrl {
            [a, b, c, _] => (*a, *b, *c),
            _ => return Err(ParseError::Truncated { need: CTRL_LEN }),
        };
        let layer = Layer::from_code(b0 >> 4).ok_or(ParseError::Layer(b0 >> 4))?;
        let cause = TermCause {
            layer,
            etype: b0 & 0x0F,
            ecode,
        };
        let (m, d, r) = (
            hdrct & FLAG_M != 0,
            hdrct & FLAG_D != 0,
            hdrct & FLAG_R != 0,
        );
        let mut pos = CTRL_LEN;
        let mut t = Terminate::new(cause);
        if m || d {
            let need = pos + SEG_LEN_LEN;
            let v = get_u16(buf, pos).ok_or(ParseError::Truncated { need })?;
            if m {
                t.seg_len = Some(v);
            }
            pos = need;
        }
        if d {
            let rest = buf.get(pos..).unwrap_or(&[]);
            let need = pos + rest.first().map_or(ddp::CTRL_LEN, |c| ddp::header_len(*c));
            let h = EchoedDdpHeader::from_bytes(rest).ok_or(ParseError::Truncated { need })?;
            pos = need;
            t.ddp_header = Some(h);
        }
        if r {
            let rest = buf.get(pos..).unwrap_or(&[]);
            let rr = ReadRequest::parse(rest).map_err(|_| ParseError::Truncated {
                need: pos + ReadRequest::LEN,
            })?;
            pos += ReadRequest::LEN;
            t.rdma_header = Some(rr);
        }
        Ok((t, pos))
    }

    /// Writes the TERMINATE header into the start of `buf`; returns the octets written. The
    /// DDP Segment Length field is present when M or D is set and written as zero when only
    /// D is.
    ///
    /// # Errors
    ///
    /// [`EmitError`].
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        if self.cause.etype > 0x0F {
            return Err(EmitError::EtypeRange);
        }
        let len = self.buffer_len();
        let out = buf.get_mut(..len).ok_or(EmitError::BufferTooSmall)?;
        let mut hdrct = 0;
        if self.seg_len.is_some() {
            hdrct |= FLAG_M;
        }
        if self.ddp_header.is_some() {
            hdrct |= FLAG_D;
        }
        if self.rdma_header.is_some() {
            hdrct |= FLAG_R;
        }
        let b0 = (self.cause.layer.code() << 4) | self.cause.etype;
        put(out, 0, &[b0, self.cause.ecode, hdrct, 0]);
        let mut pos = CTRL_LEN;
        if self.seg_len.is_some() || self.ddp_header.is_some() {
            put(out, pos, &self.seg_len.unwrap_or(0).to_be_bytes());
            pos += SEG_LEN_LEN;
        }
        if let Some(h) = &self.ddp_header {
            put(out, pos, h.as_bytes());
            pos += h.as_bytes().len();
        }
        if let Some(rr) = &self.rdma_header {
            put(out, pos, &rr.to_bytes());
        }
        Ok(len)
    }
}
