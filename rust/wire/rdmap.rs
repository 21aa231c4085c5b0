// SPDX-License-Identifier: GPL-2.0

//! RDMAP control field, opcodes, per-opcode headers and error codes (RFC 5040 §4, §7.4
//! Figure 9; RFC 7306 §4-§6).
//!
//! The RDMAP control field is the DDP RsvdULP[0:7] octet (ULPDU offset 1):
//!
//! ```text
//! |RV(2)|Rsv(2)|Opcode(4)|   RV=0xC0 (1 = RFC 5040, 0 = RDMA Consortium), Opcode=0x0F
//! ```
//!
//! | Op | Message | T | QN | Header after the DDP header (octets) |
//! |---|---|---|---|---|
//! | 0 | RDMA Write | 1 | - | - |
//! | 1 | RDMA Read Request | 0 | 1 | [`ReadRequest`] (28) |
//! | 2 | RDMA Read Response | 1 | - | - |
//! | 3 | Send | 0 | 0 | - |
//! | 4 | Send with Invalidate | 0 | 0 | - (Invalidate STag in RsvdULP[8:39]) |
//! | 5 | Send with SE | 0 | 0 | - |
//! | 6 | Send with SE and Invalidate | 0 | 0 | - (Invalidate STag) |
//! | 7 | Terminate | 0 | 2 | Terminate header (`wire::terminate`, 4..52) |
//! | 8 | Immediate Data (RFC 7306) | 0 | 0 | [`ImmediateData`] (8) |
//! | 9 | Immediate Data with SE (RFC 7306) | 0 | 0 | [`ImmediateData`] (8) |
//! | A | Atomic Request (RFC 7306) | 0 | 1 | [`AtomicRequest`] (52) |
//! | B | Atomic Response (RFC 7306) | 0 | 3 | [`AtomicResponse`] (12) |
//! | C-F | unassigned (F: experimental, RFC 6580) | | | |
//!
//! Multi-octet fields are in network order on the wire and host order in the structs.
//! `wire::ulpdu` combines DDP and RDMAP headers into one parse/emit step.

use super::ddp::{get_u32, get_u64, put};

/// Layer number of RDMAP in a TERMINATE (RFC 5040 §4.8 Figure 9).
pub const LAYER: u8 = 0;

/// RV: the 2-bit RDMAP version field of the control octet.
pub const RV_MASK: u8 = 0xC0;
/// The 2 reserved bits of the control octet: zero on transmit, ignored on receive.
pub const RSV_MASK: u8 = 0x30;
/// The 4-bit opcode field of the control octet.
pub const OPCODE_MASK: u8 = 0x0F;

/// QN of the Send queue: Send variants and Immediate Data (RFC 5040 §4.1, RFC 7306 §10.2).
pub const QN_SEND: u32 = 0;
/// QN of the RDMA Read Request queue: Read Requests and Atomic Requests.
pub const QN_READ_REQUEST: u32 = 1;
/// QN of the Terminate queue.
pub const QN_TERMINATE: u32 = 2;
/// QN of the Atomic Response queue (RFC 7306 §5.2).
pub const QN_ATOMIC_RESPONSE: u32 = 3;

/// The RDMAP protocol version carried in RV (RFC 5040 §4.1; RFC 5044 Appendix C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// RV 0: RDMA Consortium RDMAP (peers that negotiated MPA Rev 0). RFC 7306 opcodes do
    /// not exist in this version.
    Rdmac = 0,
    /// RV 1: RFC 5040 (and RFC 7306, which requires RV 1).
    Rfc = 1,
}

impl Version {
    /// The 2-bit RV value.
    pub const fn rv(self) -> u8 {
        self as u8
    }

    /// The version with RV value `rv` (2 low bits); `None` for 2 and 3.
    pub const fn from_rv(rv: u8) -> Option<Self> {
        match rv & 3 {
            0 => Some(Version::Rdmac),
            1 => Some(Version::Rfc),
            _ => None,
        }
    }
}

/// An RDMAP opcode (RFC 5040 §4.1 Figure 4, RFC 7306 §4.1 Figure 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// 0x0: RDMA Write.
    Write = 0x0,
    /// 0x1: RDMA Read Request.
    ReadRequest = 0x1,
    /// 0x2: RDMA Read Response.
    ReadResponse = 0x2,
    /// 0x3: Send.
    Send = 0x3,
    /// 0x4: Send with Invalidate.
    SendInvalidate = 0x4,
    /// 0x5: Send with Solicited Event.
    SendSe = 0x5,
    /// 0x6: Send with Solicited Event and Invalidate.
    SendSeInvalidate = 0x6,
    /// 0x7: Terminate.
    Terminate = 0x7,
    /// 0x8: Immediate Data (RFC 7306 §6).
    ImmediateData = 0x8,
    /// 0x9: Immediate Data with Solicited Event (RFC 7306 §6).
    ImmediateDataSe = 0x9,
    /// 0xA: Atomic Request (RFC 7306 §5.2.1).
    AtomicRequest = 0xA,
    /// 0xB: Atomic Response (RFC 7306 §5.2.2).
    AtomicResponse = 0xB,
}

impl Opcode {
    /// Every opcode, in numeric order.
    pub const ALL: [Opcode; 12] = [
        Opcode::Write,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::SendSe,
        Opcode::SendSeInvalidate,
        Opcode::Terminate,
        Opcode::ImmediateData,
        Opcode::ImmediateDataSe,
        Opcode::AtomicRequest,
        Opcode::AtomicResponse,
    ];

    /// The 4-bit opcode value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The opcode with value `code` (4 low bits); `None` for the unassigned 0xC-0xF.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code & OPCODE_MASK {
            0x0 => Some(Opcode::Write),
            0x1 => Some(Opcode::ReadRequest),
            0x2 => Some(Opcode::ReadResponse),
            0x3 => Some(Opcode::Send),
            0x4 => Some(Opcode::SendInvalidate),
            0x5 => Some(Opcode::SendSe),
            0x6 => Some(Opcode::SendSeInvalidate),
            0x7 => Some(Opcode::Terminate),
            0x8 => Some(Opcode::ImmediateData),
            0x9 => Some(Opcode::ImmediateDataSe),
            0xA => Some(Opcode::AtomicRequest),
            0xB => Some(Opcode::AtomicResponse),
            _ => None,
        }
    }

    /// Whether the opcode is defined by RFC 7306 (0x8-0xB) and so needs RV 1 and the
    /// extensions enabled on the connection.
    pub const fn is_rfc7306(self) -> bool {
        self.code() >= 0x8
    }

    /// The DDP T flag the message uses: tagged for RDMA Write and Read Response.
    pub const fn is_tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// The QN an untagged message uses; `None` for tagged messages.
    pub const fn queue(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate
            | Opcode::ImmediateData
            | Opcode::ImmediateDataSe => Some(QN_SEND),
            Opcode::ReadRequest | Opcode::AtomicRequest => Some(QN_READ_REQUEST),
            Opcode::Terminate => Some(QN_TERMINATE),
            Opcode::AtomicResponse => Some(QN_ATOMIC_RESPONSE),
        }
    }

    /// Whether RsvdULP[8:39] carries an Invalidate STag (Send with Invalidate, Send with SE
    /// and Invalidate). For every other untagged opcode it is sent as zero and ignored.
    pub const fn has_invalidate_stag(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// Whether the message asks for a Solicited Event.
    pub const fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe | Opcode::SendSeInvalidate | Opcode::ImmediateDataSe
        )
    }

    /// Whether the message may carry ULP payload after its headers (RFC 5040 §4.2
    /// Figure 5, RFC 7306 §4.2 Figure 3).
    pub const fn carries_payload(self) -> bool {
        matches!(
            self,
            Opcode::Write
                | Opcode::ReadResponse
                | Opcode::Send
                | Opcode::SendInvalidate
                | Opcode::SendSe
                | Opcode::SendSeInvalidate
        )
    }

    /// Whether the message consists of its RDMAP header only and must therefore be one DDP
    /// segment with L=1 and MO=0: Read Request, Terminate, Immediate Data, Atomic
    /// Request/Response. (The RFCs do not say this in one sentence; a header must be whole
    /// in the segment that carries it, and these messages have nothing else.)
    pub const fn single_segment(self) -> bool {
        !self.carries_payload()
    }

    /// Length of the fixed RDMAP header after the DDP header (octets): 28 for Read Request,
    /// 8 for Immediate Data, 52 for Atomic Request, 12 for Atomic Response, 4 for Terminate
    /// (its Terminate Control word; the rest is variable, see `wire::terminate`), else 0.
    pub const fn header_len(self) -> usize {
        match self {
            Opcode::ReadRequest => ReadRequest::LEN,
            Opcode::Terminate => 4,
            Opcode::ImmediateData | Opcode::ImmediateDataSe => ImmediateData::LEN,
            Opcode::AtomicRequest => AtomicRequest::LEN,
            Opcode::AtomicResponse => AtomicResponse::LEN,
            _ => 0,
        }
    }
}

/// The RDMAP control field (RFC 5040 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctrl {
    /// RV.
    pub version: Version,
    /// Opcode.
    pub opcode: Opcode,
}

/// Why an RDMAP control field was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlError {
    /// RV differs from the connection's version (the RV received): RDMAP error 0/2/0x05.
    Version(u8),
    /// Unassigned opcode, or an RFC 7306 opcode where the extensions are off or RV is 0
    /// (the opcode received): RDMAP error 0/2/0x06.
    Opcode(u8),
}

impl CtrlError {
    /// The RDMAP error to report (RFC 5040 §7.4).
    pub const fn rdmap_error(self) -> RdmapError {
        match self {
            CtrlError::Version(_) => RdmapError::RemoteOperation(OperationError::InvalidVersion),
            CtrlError::Opcode(_) => RdmapError::RemoteOperation(OperationError::UnexpectedOpcode),
        }
    }
}

impl Ctrl {
    /// Parses the control octet, checking RV against `version` first, then the opcode;
    /// RFC 7306 opcodes are accepted only with `rfc7306` and RV 1. Reserved bits are
    /// ignored.
    ///
    /// # Errors
    ///
    /// [`CtrlError`].
    pub const fn parse(octet: u8, version: Version, rfc7306: bool) -> Result<Self, CtrlError> {
        let rv = octet >> 6;
        if rv != version.rv() {
            return Err(CtrlError::Version(rv));
        }
        let code = octet & OPCODE_MASK;
        match Opcode::from_code(code) {
            Some(op) if op.is_rfc7306() && !(rfc7306 && matches!(version, Version::Rfc)) => {
                Err(CtrlError::Opcode(code))
            }
            Some(opcode) => Ok(Ctrl { version, opcode }),
            None => Err(CtrlError::Opcode(code)),
        }
    }

    /// The control octet (reserved bits zero).
    pub const fn to_octet(self) -> u8 {
        (self.version.rv() << 6) | self.opcode.code()
    }
}

/// Why an RDMAP header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer holds fewer than `need` octets.
    Truncated {
        /// Octets needed.
        need: usize,
    },
    /// Atomic Request with an AOpCode rsiw does not implement (the value received):
    /// reported as RDMAP 0/2/0x06 (RFC 7306 §5.2.1 rule 4 requires an error but names no
    /// code).
    AtomicOpcode(u8),
}

/// Why an RDMAP header could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer is shorter than the header.
    BufferTooSmall,
}

fn out<const N: usize>(buf: &mut [u8], bytes: &[u8; N]) -> Result<usize, EmitError> {
    let dst = buf.get_mut(..N).ok_or(EmitError::BufferTooSmall)?;
    dst.copy_from_slice(bytes);
    Ok(N)
}

/// The RDMA Read Request header (RFC 5040 §4.4), 28 octets after the untagged DDP header.
/// Also the Terminated RDMA Header of a TERMINATE (RFC 5040 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// Data Sink STag: where the Read Response places the data.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset (octets).
    pub sink_to: u64,
    /// RDMA Read Message Size (RDMARDSZ, octets; 0 allowed).
    pub size: u32,
    /// Data Source STag: the buffer read from.
    pub src_stag: u32,
    /// Data Source Tagged Offset (octets).
    pub src_to: u64,
}

impl ReadRequest {
    /// Header length (octets).
    pub const LEN: usize = 28;

    /// Parses the header at the start of `buf`; octets after it are ignored.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `buf` is shorter than 28 octets.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        let t = ParseError::Truncated { need: Self::LEN };
        Ok(ReadRequest {
            sink_stag: get_u32(buf, 0).ok_or(t)?,
            sink_to: get_u64(buf, 4).ok_or(t)?,
            size: get_u32(buf, 12).ok_or(t)?,
            src_stag: get_u32(buf, 16).ok_or(t)?,
            src_to: get_u64(buf, 20).ok_or(t)?,
        })
    }

    /// The 28 header octets (network order).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        put(&mut b, 0, &self.sink_stag.to_be_bytes());
        put(&mut b, 4, &self.sink_to.to_be_bytes());
        put(&mut b, 12, &self.size.to_be_bytes());
        put(&mut b, 16, &self.src_stag.to_be_bytes());
        put(&mut b, 20, &self.src_to.to_be_bytes());
        b
    }

    /// Writes the header into the start of `buf`; returns 28.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`].
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        out(buf, &self.to_bytes())
    }
}

/// The Immediate Data header (RFC 7306 §6.2): 8 opaque octets delivered to the ULP as they
/// were sent (no byte order applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmediateData(pub [u8; 8]);

impl ImmediateData {
    /// Header length (octets); the whole message is exactly this long (RFC 7306 §6.3).
    pub const LEN: usize = 8;

    /// Parses the 8 octets at the start of `buf`.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `buf` is shorter than 8 octets.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        let b = buf
            .get(..Self::LEN)
            .and_then(|b| <[u8; Self::LEN]>::try_from(b).ok())
            .ok_or(ParseError::Truncated { need: Self::LEN })?;
        Ok(ImmediateData(b))
    }

    /// Writes the 8 octets into the start of `buf`; returns 8.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`].
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        out(buf, &self.0)
    }
}

/// Atomic Operation Code (RFC 7306 §5.2.1 Figure 5, §10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// 0x0: FetchAdd (masked).
    FetchAdd = 0x0,
    /// 0x2: CmpSwap (masked). (0x1 is reserved: the text still mentions a plain Swap.)
    CmpSwap = 0x2,
}

impl AtomicOp {
    /// The 4-bit AOpCode.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The operation with AOpCode `code`; `None` for reserved/unassigned values.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0x0 => Some(AtomicOp::FetchAdd),
            0x2 => Some(AtomicOp::CmpSwap),
            _ => None,
        }
    }
}

/// The Atomic Operation Request header (RFC 7306 §5.2.1 Figure 4), 52 octets after the
/// untagged DDP header (QN 1):
///
/// ```text
/// 0..3   Reserved(28 bits) | AOpCode(4)
/// 4..7   Request Identifier
/// 8..11  Remote STag
/// 12..19 Remote Tagged Offset (must be 8-octet aligned; checked by the engine)
/// 20..27 Add or Swap Data
/// 28..35 Add or Swap Mask
/// 36..43 Compare Data
/// 44..51 Compare Mask
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicRequest {
    /// AOpCode.
    pub op: AtomicOp,
    /// Request Identifier, echoed in the response.
    pub req_id: u32,
    /// Remote STag.
    pub stag: u32,
    /// Remote Tagged Offset (octets).
    pub to: u64,
    /// Add Data (FetchAdd) or Swap Data (CmpSwap).
    pub add_swap: u64,
    /// Add Mask or Swap Mask.
    pub add_swap_mask: u64,
    /// Compare Data (CmpSwap; sent as zero for FetchAdd).
    pub compare: u64,
    /// Compare Mask (CmpSwap; sent as all ones for FetchAdd).
    pub compare_mask: u64,
}

impl AtomicRequest {
    /// Header length (octets).
    pub const LEN: usize = 52;

    /// Parses the header at the start of `buf`. The 28 reserved bits are ignored.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `buf` is shorter than 52 octets;
    /// [`ParseError::AtomicOpcode`] for an AOpCode other than FetchAdd or CmpSwap.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        let t = ParseError::Truncated { need: Self::LEN };
        if buf.len() < Self::LEN {
            return Err(t);
        }
        let code = buf.get(3).copied().ok_or(t)? & 0x0F;
        Ok(AtomicRequest {
            op: AtomicOp::from_code(code).ok_or(ParseError::AtomicOpcode(code))?,
            req_id: get_u32(buf, 4).ok_or(t)?,
            stag: get_u32(buf, 8).ok_or(t)?,
            to: get_u64(buf, 12).ok_or(t)?,
            add_swap: get_u64(buf, 20).ok_or(t)?,
            add_swap_mask: get_u64(buf, 28).ok_or(t)?,
            compare: get_u64(buf, 36).ok_or(t)?,
            compare_mask: get_u64(buf, 44).ok_or(t)?,
        })
    }

    /// The 52 header octets (network order, reserved bits zero).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        put(&mut b, 3, &[self.op.code()]);
        put(&mut b, 4, &self.req_id.to_be_bytes());
        put(&mut b, 8, &self.stag.to_be_bytes());
        put(&mut b, 12, &self.to.to_be_bytes());
        put(&mut b, 20, &self.add_swap.to_be_bytes());
        put(&mut b, 28, &self.add_swap_mask.to_be_bytes());
        put(&mut b, 36, &self.compare.to_be_bytes());
        put(&mut b, 44, &self.compare_mask.to_be_bytes());
        b
    }

    /// Writes the header into the start of `buf`; returns 52.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`].
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        out(buf, &self.to_bytes())
    }
}

/// The Atomic Operation Response header (RFC 7306 §5.2.2 Figure 6), 12 octets after the
/// untagged DDP header (QN 3). RFC 7306 §4 calls it "32 bytes long", but Figure 6 and the
/// field list give 4 + 8 octets; rsiw follows the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicResponse {
    /// Original Request Identifier.
    pub req_id: u32,
    /// Original Remote Data Value (the 64-bit value read before the operation).
    pub orig_value: u64,
}

impl AtomicResponse {
    /// Header length (octets).
    pub const LEN: usize = 12;

    /// Parses the header at the start of `buf`.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `buf` is shorter than 12 octets.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        let t = ParseError::Truncated { need: Self::LEN };
        Ok(AtomicResponse {
            req_id: get_u32(buf, 0).ok_or(t)?,
            orig_value: get_u64(buf, 4).ok_or(t)?,
        })
    }

    /// The 12 header octets (network order).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        put(&mut b, 0, &self.req_id.to_be_bytes());
        put(&mut b, 4, &self.orig_value.to_be_bytes());
        b
    }

    /// Writes the header into the start of `buf`; returns 12.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`].
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        out(buf, &self.to_bytes())
    }
}

/// Remote Protection Errors, Error Type 1 of layer RDMA (RFC 5040 §4.8 Figure 9); the
/// discriminant is the Error Code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtectionError {
    /// 0x00: invalid STag.
    InvalidStag = 0x00,
    /// 0x01: base or bounds violation.
    BaseBounds = 0x01,
    /// 0x02: access rights violation.
    AccessRights = 0x02,
    /// 0x03: STag not associated with the RDMAP Stream.
    StagNotAssociated = 0x03,
    /// 0x04: TO wrap.
    ToWrap = 0x04,
    /// 0x09: STag cannot be invalidated.
    CannotInvalidate = 0x09,
    /// 0xFF: unspecified error.
    Unspecified = 0xFF,
}

/// Remote Operation Errors, Error Type 2 of layer RDMA (RFC 5040 §4.8 Figure 9); the
/// discriminant is the Error Code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationError {
    /// 0x05: invalid RDMAP version.
    InvalidVersion = 0x05,
    /// 0x06: unexpected opcode.
    UnexpectedOpcode = 0x06,
    /// 0x07: catastrophic error, localized to the RDMAP Stream (also RFC 7306 §8.2:
    /// misaligned atomic TO).
    CatastrophicStream = 0x07,
    /// 0x08: catastrophic error, global.
    CatastrophicGlobal = 0x08,
    /// 0x09: STag cannot be invalidated.
    CannotInvalidate = 0x09,
    /// 0xFF: unspecified error.
    Unspecified = 0xFF,
}

/// An RDMAP error as reported in a TERMINATE with Layer 0 (RFC 5040 §4.8 Figure 9, §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmapError {
    /// Error Type 0: local catastrophic error (the Error Code is sent as 0; any value is
    /// acceptable on receive).
    LocalCatastrophic,
    /// Error Type 1: remote protection error.
    RemoteProtection(ProtectionError),
    /// Error Type 2: remote operation error.
    RemoteOperation(OperationError),
}

impl RdmapError {
    /// The 4-bit Error Type.
    pub const fn etype(self) -> u8 {
        match self {
            RdmapError::LocalCatastrophic => 0,
            RdmapError::RemoteProtection(_) => 1,
            RdmapError::RemoteOperation(_) => 2,
        }
    }

    /// The 8-bit Error Code.
    pub const fn ecode(self) -> u8 {
        match self {
            RdmapError::LocalCatastrophic => 0,
            RdmapError::RemoteProtection(e) => e as u8,
            RdmapError::RemoteOperation(e) => e as u8,
        }
    }

    /// The error with Error Type `etype` and Error Code `ecode`; any code with Error Type 0
    /// is local catastrophic. `None` for unassigned values.
    pub const fn from_codes(etype: u8, ecode: u8) -> Option<Self> {
        match etype {
            0 => Some(RdmapError::LocalCatastrophic),
            1 => {
                let e = match ecode {
                    0x00 => ProtectionError::InvalidStag,
                    0x01 => ProtectionError::BaseBounds,
                    0x02 => ProtectionError::AccessRights,
                    0x03 => ProtectionError::StagNotAssociated,
                    0x04 => ProtectionError::ToWrap,
                    0x09 => ProtectionError::CannotInvalidate,
                    0xFF => ProtectionError::Unspecified,
                    _ => return None,
                };
                Some(RdmapError::RemoteProtection(e))
            }
            2 => {
                let e = match ecode {
                    0x05 => OperationError::InvalidVersion,
                    0x06 => OperationError::UnexpectedOpcode,
                    0x07 => OperationError::CatastrophicStream,
                    0x08 => OperationError::CatastrophicGlobal,
                    0x09 => OperationError::CannotInvalidate,
                    0xFF => OperationError::Unspecified,
                    _ => return None,
                };
                Some(RdmapError::RemoteOperation(e))
            }
            _ => None,
        }
    }
}
