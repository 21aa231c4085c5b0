// SPDX-License-Identifier: GPL-2.0

//! DDP segment headers (RFC 5041 §4) and the DDP error numbers (RFC 5041 §7.2).
//!
//! Offsets are relative to the start of the ULPDU (MPA has already removed ULPDU_Length):
//!
//! ```text
//! 0      DDP Control |T|L|Rsvd(4)|DV(2)|      T=0x80 L=0x40 DV=0x03
//! 1      RsvdULP[0:7] (RDMAP: |RV(2)|Rsv(2)|Opcode(4)|)
//! Tagged (T=1, 14 octets):
//! 2..5   STag
//! 6..13  TO (64 bits)
//! Untagged (T=0, 18 octets):
//! 2..5   RsvdULP[8:39] (RDMAP: Invalidate STag for Send with Invalidate, else 0)
//! 6..9   QN
//! 10..13 MSN (starts at 1, wraps 0xFFFFFFFF -> 0)
//! 14..17 MO
//! ```
//!
//! All multi-octet fields are in network order on the wire and in host order in the
//! representation structs. The DDP version (DV) is 1 for RFC 5041 and 0 for the RDMA
//! Consortium "DDP v1.0" draft; the version is chosen per connection (RFC 5044 Appendix C)
//! and passed to [`Header::parse`] and [`Header::emit_into`]. The 4 reserved bits are
//! written as zero and not checked on receive (RFC 5041 §4.1). DDP does not interpret the
//! RsvdULP octets; RDMAP (`wire::rdmap`) does.

/// Length of the control octets common to both headers: DDP Control and RsvdULP[0:7]
/// (octets).
pub const CTRL_LEN: usize = 2;
/// Length of the tagged buffer model header (octets, RFC 5041 §4.2).
pub const TAGGED_LEN: usize = 14;
/// Length of the untagged buffer model header (octets, RFC 5041 §4.3).
pub const UNTAGGED_LEN: usize = 18;
/// Length of the longer DDP header (octets).
pub const MAX_HEADER_LEN: usize = UNTAGGED_LEN;

/// T: tagged buffer model (DDP Control octet).
pub const FLAG_T: u8 = 0x80;
/// L: last segment of a DDP message (DDP Control octet).
pub const FLAG_L: u8 = 0x40;
/// The 4 reserved bits of the DDP Control octet: zero on transmit, ignored on receive.
pub const RSVD_MASK: u8 = 0x3C;
/// DV, the 2-bit DDP version (DDP Control octet).
pub const DV_MASK: u8 = 0x03;

/// Initial MSN of every untagged queue (RFC 5041 §4.3).
pub const MSN_INITIAL: u32 = 1;

mod field {
    pub(super) type Field = core::ops::Range<usize>;
    pub(super) const CTRL: usize = 0;
    pub(super) const RSVD_ULP: usize = 1;
    pub(super) const STAG: Field = 2..6;
    pub(super) const TO: Field = 6..14;
    pub(super) const RSVD_ULP_EXT: Field = 2..6;
    pub(super) const QN: Field = 6..10;
    pub(super) const MSN: Field = 10..14;
    pub(super) const MO: Field = 14..18;
}

/// Reads the network-order `u16` at `at`, or `None` if `buf` is too short.
pub(super) fn get_u16(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes(b.try_into().ok()?))
}

/// Reads the network-order `u32` at `at`, or `None` if `buf` is too short.
pub(super) fn get_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// Reads the network-order `u64` at `at`, or `None` if `buf` is too short.
pub(super) fn get_u64(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

/// Writes `bytes` at `at`; does nothing if `buf` is too short.
pub(super) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    let Some(end) = at.checked_add(bytes.len()) else {
        return;
    };
    if let Some(dst) = buf.get_mut(at..end) {
        dst.copy_from_slice(bytes);
    }
}

/// The DDP protocol version carried in DV (RFC 5041 §4.1; RFC 5044 Appendix C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// DV 0: RDMA Consortium "DDP v1.0" (peers that negotiated MPA Rev 0).
    Rdmac = 0,
    /// DV 1: RFC 5041.
    Rfc = 1,
}

impl Version {
    /// The 2-bit DV value.
    pub const fn dv(self) -> u8 {
        self as u8
    }

    /// The version with DV value `dv` (only the 2 low bits are looked at); `None` for the
    /// unassigned values 2 and 3.
    pub const fn from_dv(dv: u8) -> Option<Self> {
        match dv & DV_MASK {
            0 => Some(Version::Rdmac),
            1 => Some(Version::Rfc),
            _ => None,
        }
    }
}

/// Header length (octets) for a segment whose DDP Control octet is `ctrl`: 14 if T is set,
/// else 18.
pub const fn header_len(ctrl: u8) -> usize {
    if ctrl & FLAG_T != 0 {
        TAGGED_LEN
    } else {
        UNTAGGED_LEN
    }
}

/// Layer number of DDP in a TERMINATE (RFC 5040 §4.8 Figure 9).
pub const LAYER: u8 = 1;

/// Tagged Buffer Errors, Error Type 1 (RFC 5041 §7.2); the discriminant is the Error Code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaggedError {
    /// 0x00: invalid STag.
    InvalidStag = 0x00,
    /// 0x01: base or bounds violation (TO or TO + length outside the buffer).
    BaseBounds = 0x01,
    /// 0x02: STag not associated with the DDP Stream.
    StagNotAssociated = 0x02,
    /// 0x03: TO wrap (64-bit TO + length overflows).
    ToWrap = 0x03,
    /// 0x04: invalid DDP version.
    InvalidVersion = 0x04,
}

/// Untagged Buffer Errors, Error Type 2 (RFC 5041 §7.2); the discriminant is the Error
/// Code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UntaggedError {
    /// 0x01: invalid QN.
    InvalidQn = 0x01,
    /// 0x02: invalid MSN, no buffer available.
    NoBuffer = 0x02,
    /// 0x03: invalid MSN, MSN range is not valid.
    MsnRange = 0x03,
    /// 0x04: invalid MO.
    InvalidMo = 0x04,
    /// 0x05: DDP message too long for the available buffer.
    TooLong = 0x05,
    /// 0x06: invalid DDP version.
    InvalidVersion = 0x06,
}

/// A DDP error as reported in a TERMINATE with Layer 1 (RFC 5041 §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpError {
    /// Error Type 0: local catastrophic error (Error Code 0x00).
    LocalCatastrophic,
    /// Error Type 1: tagged buffer error.
    Tagged(TaggedError),
    /// Error Type 2: untagged buffer error.
    Untagged(UntaggedError),
}

impl DdpError {
    /// The invalid-DDP-version error for a tagged (1/0x04) or untagged (2/0x06) segment.
    pub const fn bad_version(tagged: bool) -> Self {
        if tagged {
            DdpError::Tagged(TaggedError::InvalidVersion)
        } else {
            DdpError::Untagged(UntaggedError::InvalidVersion)
        }
    }

    /// The 4-bit Error Type.
    pub const fn etype(self) -> u8 {
        match self {
            DdpError::LocalCatastrophic => 0,
            DdpError::Tagged(_) => 1,
            DdpError::Untagged(_) => 2,
        }
    }

    /// The 8-bit Error Code.
    pub const fn ecode(self) -> u8 {
        match self {
            DdpError::LocalCatastrophic => 0,
            DdpError::Tagged(e) => e as u8,
            DdpError::Untagged(e) => e as u8,
        }
    }

    /// The error with Error Type `etype` and Error Code `ecode`; `None` for unassigned
    /// values (including Error Type 3, reserved for the LLP).
    pub const fn from_codes(etype: u8, ecode: u8) -> Option<Self> {
        let t = match (etype, ecode) {
            (0, 0) => return Some(DdpError::LocalCatastrophic),
            (1, 0x00) => TaggedError::InvalidStag,
            (1, 0x01) => TaggedError::BaseBounds,
            (1, 0x02) => TaggedError::StagNotAssociated,
            (1, 0x03) => TaggedError::ToWrap,
            (1, 0x04) => TaggedError::InvalidVersion,
            (2, _) => {
                let u = match ecode {
                    0x01 => UntaggedError::InvalidQn,
                    0x02 => UntaggedError::NoBuffer,
                    0x03 => UntaggedError::MsnRange,
                    0x04 => UntaggedError::InvalidMo,
                    0x05 => UntaggedError::TooLong,
                    0x06 => UntaggedError::InvalidVersion,
                    _ => return None,
                };
                return Some(DdpError::Untagged(u));
            }
            _ => return None,
        };
        Some(DdpError::Tagged(t))
    }
}

/// Why a DDP header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer holds fewer than `need` octets, the header length its T bit selects (2 if
    /// even the control octets are missing).
    Truncated {
        /// Octets needed.
        need: usize,
    },
    /// DV differs from the connection's version: DDP error 1/0x04 (tagged) or 2/0x06
    /// (untagged), see [`ParseError::ddp_error`].
    Version {
        /// T bit of the offending segment.
        tagged: bool,
        /// DV received.
        dv: u8,
    },
}

impl ParseError {
    /// The DDP error to report for this parse error; `None` for
    /// [`ParseError::Truncated`], for which RFC 5041 has no code (the caller decides whether
    /// to wait for more octets or to reject a short ULPDU).
    pub const fn ddp_error(self) -> Option<DdpError> {
        match self {
            ParseError::Truncated { .. } => None,
            ParseError::Version { tagged, .. } => Some(DdpError::bad_version(tagged)),
        }
    }
}

/// Why a DDP header could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer is shorter than the header (14 or 18 octets).
    BufferTooSmall,
}

/// A zero-copy view of a DDP segment (header and ULP payload) at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wraps a buffer without checking its length; accessors of missing fields return 0 and
    /// never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Segment { buffer }
    }

    /// Wraps a buffer that holds at least the whole header its T bit selects.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the buffer is shorter.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let s = Self::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Checks that the buffer holds the whole header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] with the octets needed if it does not.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let len = self.buffer.as_ref().len();
        let need = if len == 0 {
            CTRL_LEN
        } else {
            self.header_len()
        };
        if len < need {
            Err(ParseError::Truncated { need })
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn octet(&self, index: usize) -> u8 {
        self.buffer.as_ref().get(index).copied().unwrap_or(0)
    }

    /// The DDP Control octet (T, L, reserved bits, DV).
    pub fn ctrl(&self) -> u8 {
        self.octet(field::CTRL)
    }

    /// T: tagged buffer model.
    pub fn tagged(&self) -> bool {
        self.ctrl() & FLAG_T != 0
    }

    /// L: last segment of its DDP message.
    pub fn last(&self) -> bool {
        self.ctrl() & FLAG_L != 0
    }

    /// DV (2 bits).
    pub fn dv(&self) -> u8 {
        self.ctrl() & DV_MASK
    }

    /// RsvdULP[0:7], the octet RDMAP uses as its control field.
    pub fn rsvd_ulp(&self) -> u8 {
        self.octet(field::RSVD_ULP)
    }

    /// Header length selected by T (14 or 18 octets).
    pub fn header_len(&self) -> usize {
        header_len(self.ctrl())
    }

    fn u32_at(&self, f: core::ops::Range<usize>) -> u32 {
        get_u32(self.buffer.as_ref(), f.start).unwrap_or(0)
    }

    /// STag (tagged header; host order).
    pub fn stag(&self) -> u32 {
        self.u32_at(field::STAG)
    }

    /// TO (tagged header; octets, host order).
    pub fn to(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::TO.start).unwrap_or(0)
    }

    /// RsvdULP[8:39] (untagged header; host order).
    pub fn rsvd_ulp_ext(&self) -> u32 {
        self.u32_at(field::RSVD_ULP_EXT)
    }

    /// QN (untagged header; host order).
    pub fn qn(&self) -> u32 {
        self.u32_at(field::QN)
    }

    /// MSN (untagged header; host order).
    pub fn msn(&self) -> u32 {
        self.u32_at(field::MSN)
    }

    /// MO (untagged header; octets, host order).
    pub fn mo(&self) -> u32 {
        self.u32_at(field::MO)
    }

    /// The header octets (as many as the buffer holds).
    pub fn header(&self) -> &[u8] {
        let buf = self.buffer.as_ref();
        buf.get(..self.header_len().min(buf.len())).unwrap_or(&[])
    }

    /// The ULP payload after the header (empty if the buffer ends within the header).
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Segment<T> {
    /// Sets the DDP Control octet from T, L and the version; the reserved bits are zeroed.
    pub fn set_ctrl(&mut self, tagged: bool, last: bool, version: Version) {
        let mut c = version.dv();
        if tagged {
            c |= FLAG_T;
        }
        if last {
            c |= FLAG_L;
        }
        put(self.buffer.as_mut(), field::CTRL, &[c]);
    }

    /// Sets RsvdULP[0:7].
    pub fn set_rsvd_ulp(&mut self, v: u8) {
        put(self.buffer.as_mut(), field::RSVD_ULP, &[v]);
    }

    /// Sets the STag (written in network order).
    pub fn set_stag(&mut self, v: u32) {
        put(self.buffer.as_mut(), field::STAG.start, &v.to_be_bytes());
    }

    /// Sets the TO (octets; written in network order).
    pub fn set_to(&mut self, v: u64) {
        put(self.buffer.as_mut(), field::TO.start, &v.to_be_bytes());
    }

    /// Sets RsvdULP[8:39] (written in network order).
    pub fn set_rsvd_ulp_ext(&mut self, v: u32) {
        put(
            self.buffer.as_mut(),
            field::RSVD_ULP_EXT.start,
            &v.to_be_bytes(),
        );
    }

    /// Sets the QN (written in network order).
    pub fn set_qn(&mut self, v: u32) {
        put(self.buffer.as_mut(), field::QN.start, &v.to_be_bytes());
    }

    /// Sets the MSN (written in network order).
    pub fn set_msn(&mut self, v: u32) {
        put(self.buffer.as_mut(), field::MSN.start, &v.to_be_bytes());
    }

    /// Sets the MO (octets; written in network order).
    pub fn set_mo(&mut self, v: u32) {
        put(self.buffer.as_mut(), field::MO.start, &v.to_be_bytes());
    }

    /// The writable payload area after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        self.buffer.as_mut().get_mut(hl..).unwrap_or(&mut [])
    }
}

/// A tagged buffer model header (RFC 5041 §4.2), T=1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tagged {
    /// L: last segment of the DDP message.
    pub last: bool,
    /// RsvdULP (8 bits; the RDMAP control field).
    pub rsvd_ulp: u8,
    /// STag of the Data Sink's tagged buffer.
    pub stag: u32,
    /// TO: offset within the tagged buffer where this segment's payload goes (octets).
    pub to: u64,
}

/// An untagged buffer model header (RFC 5041 §4.3), T=0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Untagged {
    /// L: last segment of the DDP message.
    pub last: bool,
    /// RsvdULP[0:7] (the RDMAP control field).
    pub rsvd_ulp: u8,
    /// RsvdULP[8:39] (RDMAP: Invalidate STag or zero).
    pub rsvd_ulp_ext: u32,
    /// QN: the Data Sink's untagged buffer queue.
    pub qn: u32,
    /// MSN: message sequence number within the queue (modulo 2^32, first is 1).
    pub msn: u32,
    /// MO: offset of this segment's payload within the DDP message (octets).
    pub mo: u32,
}

/// A DDP segment header of either buffer model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// T=1.
    Tagged(Tagged),
    /// T=0.
    Untagged(Untagged),
}

impl Header {
    /// Parses the header at the start of `buf` (a ULPDU) and checks DV against `version`.
    /// The reserved bits are ignored; octets after the header are not looked at.
    ///
    /// # Errors
    ///
    /// [`ParseError::Version`] if DV differs (checked as soon as the first octet is there),
    /// [`ParseError::Truncated`] if `buf` is shorter than the header.
    pub fn parse(buf: &[u8], version: Version) -> Result<Self, ParseError> {
        let (h, dv) = Self::parse_any(buf)?;
        if dv != version.dv() {
            return Err(ParseError::Version {
                tagged: h.is_tagged(),
                dv,
            });
        }
        Ok(h)
    }

    /// Parses the header at the start of `buf` whatever its DV, which is returned alongside
    /// (for echoed headers in a TERMINATE, which may carry a bad DV).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if `buf` is shorter than the header.
    pub fn parse_any(buf: &[u8]) -> Result<(Self, u8), ParseError> {
        let Some(&ctrl) = buf.first() else {
            return Err(ParseError::Truncated { need: CTRL_LEN });
        };
        let s = Segment::new_unchecked(buf);
        s.check_len()?;
        let last = s.last();
        let h = if s.tagged() {
            Header::Tagged(Tagged {
                last,
                rsvd_ulp: s.rsvd_ulp(),
                stag: s.stag(),
                to: s.to(),
            })
        } else {
            Header::Untagged(Untagged {
                last,
                rsvd_ulp: s.rsvd_ulp(),
                rsvd_ulp_ext: s.rsvd_ulp_ext(),
                qn: s.qn(),
                msn: s.msn(),
                mo: s.mo(),
            })
        };
        Ok((h, ctrl & DV_MASK))
    }

    /// Whether this is a tagged header.
    pub const fn is_tagged(&self) -> bool {
        matches!(self, Header::Tagged(_))
    }

    /// L: last segment of the DDP message.
    pub const fn last(&self) -> bool {
        match self {
            Header::Tagged(t) => t.last,
            Header::Untagged(u) => u.last,
        }
    }

    /// RsvdULP[0:7] (the RDMAP control field).
    pub const fn rsvd_ulp(&self) -> u8 {
        match self {
            Header::Tagged(t) => t.rsvd_ulp,
            Header::Untagged(u) => u.rsvd_ulp,
        }
    }

    /// Header length (14 or 18 octets).
    pub const fn header_len(&self) -> usize {
        match self {
            Header::Tagged(_) => TAGGED_LEN,
            Header::Untagged(_) => UNTAGGED_LEN,
        }
    }

    /// Writes the header with DV = `version` into the start of `buf`; returns the octets
    /// written (14 or 18). Reserved bits are written as zero.
    ///
    /// # Errors
    ///
    /// [`EmitError::BufferTooSmall`] if `buf` is shorter than the header.
    pub fn emit_into(&self, buf: &mut [u8], version: Version) -> Result<usize, EmitError> {
        let len = self.header_len();
        let out = buf.get_mut(..len).ok_or(EmitError::BufferTooSmall)?;
        let mut s = Segment::new_unchecked(out);
        match self {
            Header::Tagged(t) => {
                s.set_ctrl(true, t.last, version);
                s.set_rsvd_ulp(t.rsvd_ulp);
                s.set_stag(t.stag);
                s.set_to(t.to);
            }
            Header::Untagged(u) => {
                s.set_ctrl(false, u.last, version);
                s.set_rsvd_ulp(u.rsvd_ulp);
                s.set_rsvd_ulp_ext(u.rsvd_ulp_ext);
                s.set_qn(u.qn);
                s.set_msn(u.msn);
                s.set_mo(u.mo);
            }
        }
        Ok(len)
    }
}
