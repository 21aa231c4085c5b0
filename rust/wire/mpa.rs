// SPDX-License-Identifier: GPL-2.0

//! MPA startup frames: Request, Reply (RFC 5044 §7.1.1), the RFC 6581 §9 enhanced
//! connection establishment block, and the seed-003 draft "MPA ID Rtr Frame".
//!
//! ```text
//! 0..15  Key "MPA ID Req Frame" / "MPA ID Rep Frame" (/ draft: "MPA ID RtR Frame")
//! 16     |M|C|R|S|L|P|Res(2)|
//! 17     Rev
//! 18..19 PD_Length (network order, <= 512)
//! 20..   Private Data; with RFC 6581 S=1 it starts with |A|B|IRD(14)|C|D|ORD(14)|
//! ```
//!
//! The meaning of the S bit depends on the protocol [`Variant`]: RFC 6581 (S=1 and Rev >= 2:
//! Private Data starts with the enhanced block; with Rev < 2 it is a reserved bit of RFC 5044
//! and ignored) or the 2007 seed-003 draft (S=1: an Rtr frame follows, Rev unchanged). The
//! draft mode must be selected explicitly.
//!
//! L is the first of RFC 5044's four reserved bits, which the C siw reserves for the same
//! purpose (`MPA_RR_FLAG_GSO_EXP`): the sender accepts FPDUs that span several TCP
//! segments, up to [`crate::wire::fpdu::MULPDU_MAX`] octets of ULPDU. A peer that follows
//! RFC 5044 sends 0 there and ignores it on receive, so it never sees such FPDUs. P, the
//! second reserved bit, is an echo probe: an Initiator that sets L sets P too, and a
//! Responder never sends P. The C siw builds its Reply from the Request's flags, so a Reply
//! with P set is an echo, and its L is no offer.
//!
//! This module also holds the MPA error codes (RFC 5044 §8, RFC 6581 §8), which the engines
//! report.

/// Length of the key field (octets).
pub const KEY_LEN: usize = 16;
/// Length of the fixed part of a startup frame: key, flags, Rev, PD_Length (octets).
pub const HEADER_LEN: usize = 20;
/// Largest Private Data a startup frame may carry (octets, RFC 5044 §7.1.1), including the
/// RFC 6581 enhanced block.
pub const PD_MAX: usize = 512;
/// Largest startup frame (octets).
pub const FRAME_MAX: usize = HEADER_LEN + PD_MAX;
/// Length of the RFC 6581 §9 enhanced connection establishment block (octets).
pub const ENHANCED_LEN: usize = 4;

/// "MPA ID Req Frame" (RFC 5044 §7.1.1).
pub const KEY_REQ: [u8; KEY_LEN] = *b"MPA ID Req Frame";
/// "MPA ID Rep Frame" (RFC 5044 §7.1.1).
pub const KEY_REP: [u8; KEY_LEN] = *b"MPA ID Rep Frame";
/// The seed-003 draft's Rtr key exactly as its hex listing gives it
/// (`4D 50 41 20 49 44 20 52 74 52 20 46 72 61 6D 65`, "MPA ID RtR Frame"). rsiw sends
/// this one.
pub const KEY_RTR: [u8; KEY_LEN] = *b"MPA ID RtR Frame";
/// The seed-003 draft's Rtr key as its prose spells it ("MPA ID Rtr Frame"); accepted on
/// receive because the draft is inconsistent between prose and hex.
pub const KEY_RTR_ASCII: [u8; KEY_LEN] = *b"MPA ID Rtr Frame";

/// M: markers required in the FPDUs the peer sends (RFC 5044 §7.1.1).
pub const FLAG_M: u8 = 0x80;
/// C: CRC wanted; 1 in either frame turns CRCs on in both directions.
pub const FLAG_C: u8 = 0x40;
/// R: connection rejected (Reply only).
pub const FLAG_R: u8 = 0x20;
/// S: RFC 6581 enhanced block present (Rev >= 2) or seed-003 "Rtr frame" (draft mode).
pub const FLAG_S: u8 = 0x10;
/// L (the first reserved bit of RFC 5044, `MPA_RR_FLAG_GSO_EXP` in the C siw): the sender
/// accepts FPDUs larger than one TCP segment, up to a ULPDU of
/// [`crate::wire::fpdu::MULPDU_MAX`] octets.
pub const FLAG_L: u8 = 0x08;
/// P (the second reserved bit of RFC 5044): set in a Request beside [`FLAG_L`], never in a
/// Reply; a Reply that carries it copied the Request's flags (the C siw does), so its L
/// is no offer.
pub const FLAG_P: u8 = 0x04;

/// Enhanced block flag A (first 16-bit word): peer-to-peer connection model.
pub const ENH_A: u16 = 0x8000;
/// Enhanced block flag B (first word): zero-length Send (FULPDU) RTR.
pub const ENH_B: u16 = 0x4000;
/// Enhanced block flag C (second word): zero-length RDMA Write RTR.
pub const ENH_C: u16 = 0x8000;
/// Enhanced block flag D (second word): zero-length RDMA Read RTR.
pub const ENH_D: u16 = 0x4000;
/// Mask of the 14-bit IRD and ORD values.
pub const IRD_ORD_MASK: u16 = 0x3FFF;
/// IRD/ORD value meaning "no automatic negotiation" (RFC 6581 §9.1).
pub const IRD_ORD_NO_NEGOTIATION: u16 = 0x3FFF;

mod field {
    pub(super) type Field = core::ops::Range<usize>;
    pub(super) const KEY: Field = 0..16;
    pub(super) const FLAGS: usize = 16;
    pub(super) const REV: usize = 17;
    pub(super) const PD_LENGTH: Field = 18..20;
}

/// MPA error codes (RFC 5044 §8, RFC 6581 §8), reported in a TERMINATE as Layer 2 (LLP),
/// Error Type 0 (MPA), Error Code = the discriminant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpaErrorCode {
    /// 1: TCP connection closed, terminated or lost.
    TcpClosed = 1,
    /// 2: received CRC does not match the calculated value.
    CrcMismatch = 2,
    /// 3: a marker and the ULPDU_Length fields disagree on the start of an FPDU.
    MarkerMismatch = 3,
    /// 4: invalid MPA Request or Reply frame; close the connection immediately.
    InvalidStartup = 4,
    /// 5: local catastrophic error (RFC 6581).
    LocalCatastrophic = 5,
    /// 6: insufficient IRD resources (RFC 6581 §9.1).
    InsufficientIrd = 6,
    /// 7: no matching RTR option (RFC 6581 §9.2).
    NoMatchingRtr = 7,
}

impl MpaErrorCode {
    /// The code's value on the wire (TERMINATE Error Code octet).
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// Which specification gives the S bit its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// RFC 5044 as updated by RFC 6581: S=1 with Rev >= 2 means the Private Data begins with
    /// the enhanced block; S with Rev < 2 is a reserved bit, ignored on receive.
    Rfc,
    /// The 2007 seed-003 proposal: S=1 in a Request promises an "MPA ID Rtr Frame" after an
    /// accepting Reply with S=1; Rev stays 1; there is no enhanced block. The Rtr key is
    /// only recognised in this variant.
    DraftRtr,
}

/// The kind of startup frame, from its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// MPA Request frame, sent by the Initiator.
    Request,
    /// MPA Reply frame, sent by the Responder.
    Reply,
    /// Seed-003 draft Rtr frame, sent by the Initiator after an accepting Reply with S=1.
    Rtr,
}

impl FrameKind {
    /// The key this kind is sent with.
    pub const fn key(self) -> &'static [u8; KEY_LEN] {
        match self {
            FrameKind::Request => &KEY_REQ,
            FrameKind::Reply => &KEY_REP,
            FrameKind::Rtr => &KEY_RTR,
        }
    }

    /// Recognises a key; the Rtr keys only in [`Variant::DraftRtr`].
    pub fn from_key(key: &[u8], variant: Variant) -> Option<Self> {
        if key == KEY_REQ {
            Some(FrameKind::Request)
        } else if key == KEY_REP {
            Some(FrameKind::Reply)
        } else if variant == Variant::DraftRtr && (key == KEY_RTR || key == KEY_RTR_ASCII) {
            Some(FrameKind::Rtr)
        } else {
            None
        }
    }
}

/// Why a startup frame could not be parsed. Every one of these is MPA error 4
/// ([`MpaErrorCode::InvalidStartup`]): close the TCP connection (RFC 5044 §7.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer than [`HEADER_LEN`] octets, or fewer Private Data octets than PD_Length says.
    Truncated,
    /// The key is none of the known keys (RFC 5044 §7.1.2 rule 5).
    BadKey,
    /// PD_Length exceeds 512 octets (the value received).
    PdTooLong(u16),
    /// S=1 with Rev >= 2 but PD_Length < 4, so the enhanced block is missing (RFC 6581 §6).
    EnhancedTooShort(u16),
}

/// Why a startup frame could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer is shorter than [`Repr::buffer_len`].
    BufferTooSmall,
    /// Private Data (including the enhanced block) would exceed 512 octets.
    PdTooLong,
    /// An enhanced block requires Rev >= 2 (RFC 6581 §6).
    EnhancedNeedsRev2,
    /// The draft Rtr flag and the RFC 6581 enhanced block both use S; only one can be set.
    ConflictingS,
}

/// A zero-copy view of a startup frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length; accessors may then return short data but
    /// never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps a buffer that holds at least the fixed header and the PD_Length octets of
    /// Private Data it announces.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if the buffer is shorter.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the header and the announced Private Data.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.pd_length()) {
            Err(ParseError::Truncated)
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

    /// The 16 key octets (empty if the buffer is shorter).
    pub fn key(&self) -> &[u8] {
        self.buffer.as_ref().get(field::KEY).unwrap_or(&[])
    }

    /// The flags octet (M, C, R, S and the reserved bits).
    pub fn flags(&self) -> u8 {
        self.octet(field::FLAGS)
    }

    /// M bit.
    pub fn m(&self) -> bool {
        self.flags() & FLAG_M != 0
    }

    /// C bit.
    pub fn c(&self) -> bool {
        self.flags() & FLAG_C != 0
    }

    /// R bit.
    pub fn r(&self) -> bool {
        self.flags() & FLAG_R != 0
    }

    /// S bit.
    pub fn s(&self) -> bool {
        self.flags() & FLAG_S != 0
    }

    /// L bit ([`FLAG_L`]).
    pub fn l(&self) -> bool {
        self.flags() & FLAG_L != 0
    }

    /// P bit ([`FLAG_P`]).
    pub fn p(&self) -> bool {
        self.flags() & FLAG_P != 0
    }

    /// Rev field.
    pub fn rev(&self) -> u8 {
        self.octet(field::REV)
    }

    /// PD_Length field (octets, host order).
    pub fn pd_length(&self) -> u16 {
        u16::from_be_bytes([
            self.octet(field::PD_LENGTH.start),
            self.octet(field::PD_LENGTH.end - 1),
        ])
    }

    /// The Private Data octets (as many of the announced ones as the buffer holds).
    pub fn private_data(&self) -> &[u8] {
        let buf = self.buffer.as_ref();
        let end = HEADER_LEN
            .saturating_add(usize::from(self.pd_length()))
            .min(buf.len());
        buf.get(HEADER_LEN..end).unwrap_or(&[])
    }
}

impl<'a> Frame<&'a [u8]> {
    /// The Private Data octets with the lifetime of the underlying buffer.
    pub fn into_pd(self) -> &'a [u8] {
        let end = HEADER_LEN
            .saturating_add(usize::from(self.pd_length()))
            .min(self.buffer.len());
        self.buffer.get(HEADER_LEN..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    fn set_octet(&mut self, index: usize, value: u8) {
        if let Some(o) = self.buffer.as_mut().get_mut(index) {
            *o = value;
        }
    }

    /// Sets the key (ignored if the buffer is shorter than the key).
    pub fn set_key(&mut self, key: &[u8; KEY_LEN]) {
        if let Some(k) = self.buffer.as_mut().get_mut(field::KEY) {
            k.copy_from_slice(key);
        }
    }

    /// Sets the flags octet.
    pub fn set_flags(&mut self, flags: u8) {
        self.set_octet(field::FLAGS, flags);
    }

    /// Sets Rev.
    pub fn set_rev(&mut self, rev: u8) {
        self.set_octet(field::REV, rev);
    }

    /// Sets PD_Length (octets; written in network order).
    pub fn set_pd_length(&mut self, len: u16) {
        let [hi, lo] = len.to_be_bytes();
        self.set_octet(field::PD_LENGTH.start, hi);
        self.set_octet(field::PD_LENGTH.end - 1, lo);
    }

    /// The writable Private Data area (as much of the buffer after the header as PD_Length
    /// covers).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN.saturating_add(usize::from(self.pd_length()));
        let buf = self.buffer.as_mut();
        let end = end.min(buf.len());
        buf.get_mut(HEADER_LEN..end).unwrap_or(&mut [])
    }
}

/// A set of RTR indication types (RFC 6581 §9.2 flags B, C, D).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtrSet {
    /// B: zero-length Send.
    pub send: bool,
    /// C: zero-length RDMA Write.
    pub write: bool,
    /// D: zero-length RDMA Read.
    pub read: bool,
}

impl RtrSet {
    /// The empty set.
    pub const NONE: RtrSet = RtrSet {
        send: false,
        write: false,
        read: false,
    };
    /// All three types.
    pub const ALL: RtrSet = RtrSet {
        send: true,
        write: true,
        read: true,
    };

    /// Whether no type is in the set.
    pub const fn is_empty(self) -> bool {
        !(self.send || self.write || self.read)
    }

    /// The types in both sets.
    pub const fn intersect(self, other: RtrSet) -> RtrSet {
        RtrSet {
            send: self.send && other.send,
            write: self.write && other.write,
            read: self.read && other.read,
        }
    }

    /// Whether `t` is in the set.
    pub const fn contains(self, t: RtrType) -> bool {
        match t {
            RtrType::Send => self.send,
            RtrType::Write => self.write,
            RtrType::Read => self.read,
        }
    }

    /// The set holding only `t`.
    pub const fn only(t: RtrType) -> RtrSet {
        RtrSet {
            send: matches!(t, RtrType::Send),
            write: matches!(t, RtrType::Write),
            read: matches!(t, RtrType::Read),
        }
    }

    /// The first member in rsiw's preference order: Write, then Read, then Send (zero-length
    /// Write needs neither a posted receive nor an IRD slot; Linux siw prefers it too).
    pub const fn preferred(self) -> Option<RtrType> {
        if self.write {
            Some(RtrType::Write)
        } else if self.read {
            Some(RtrType::Read)
        } else if self.send {
            Some(RtrType::Send)
        } else {
            None
        }
    }
}

/// A zero-length RDMA operation used as the RTR indication (RFC 6581 §5, §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrType {
    /// Zero-length Send (flag B).
    Send,
    /// Zero-length RDMA Write (flag C).
    Write,
    /// Zero-length RDMA Read (flag D).
    Read,
}

/// The RFC 6581 §9 enhanced connection establishment block: the first 4 Private Data
/// octets when S=1 and Rev >= 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enhanced {
    /// A: peer-to-peer connection model.
    pub p2p: bool,
    /// B/C/D: RTR types requested (Request) or supported (Reply). Ignored on receive when
    /// `p2p` is false (RFC 6581 §9.2); [`Enhanced::parse`] clears them then.
    pub rtr: RtrSet,
    /// IRD, 14 bits; [`IRD_ORD_NO_NEGOTIATION`] = no automatic negotiation.
    pub ird: u16,
    /// ORD, 14 bits; [`IRD_ORD_NO_NEGOTIATION`] = no automatic negotiation.
    pub ord: u16,
}

impl Enhanced {
    /// Parses the 4-octet block (network order). Returns `None` if `data` is shorter than 4.
    /// B/C/D are cleared when A is 0 (RFC 6581 §9.2: "MUST be ignored").
    pub fn parse(data: &[u8]) -> Option<Self> {
        let w = data.get(..ENHANCED_LEN)?;
        let hi = u16::from_be_bytes([w[0], w[1]]);
        let lo = u16::from_be_bytes([w[2], w[3]]);
        let p2p = hi & ENH_A != 0;
        let rtr = if p2p {
            RtrSet {
                send: hi & ENH_B != 0,
                write: lo & ENH_C != 0,
                read: lo & ENH_D != 0,
            }
        } else {
            RtrSet::NONE
        };
        Some(Enhanced {
            p2p,
            rtr,
            ird: hi & IRD_ORD_MASK,
            ord: lo & IRD_ORD_MASK,
        })
    }

    /// The block's 4 octets (network order). IRD and ORD are masked to 14 bits; B/C/D are
    /// sent only with A set.
    pub fn to_bytes(&self) -> [u8; ENHANCED_LEN] {
        let mut hi = self.ird & IRD_ORD_MASK;
        let mut lo = self.ord & IRD_ORD_MASK;
        if self.p2p {
            hi |= ENH_A;
            if self.rtr.send {
                hi |= ENH_B;
            }
            if self.rtr.write {
                lo |= ENH_C;
            }
            if self.rtr.read {
                lo |= ENH_D;
            }
        }
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        [a, b, c, d]
    }
}

/// A parsed startup frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Request, Reply or (draft) Rtr.
    pub kind: FrameKind,
    /// M: markers required from the peer.
    pub markers: bool,
    /// C: CRC wanted.
    pub crc: bool,
    /// R: rejected (meaningful in a Reply).
    pub reject: bool,
    /// Rev.
    pub rev: u8,
    /// RFC 6581 enhanced block ([`Variant::Rfc`], S=1, Rev >= 2).
    pub enhanced: Option<Enhanced>,
    /// Seed-003 S bit ([`Variant::DraftRtr`] only): Rtr frame promised (Request) or awaited
    /// (Reply).
    pub rtr_flag: bool,
    /// L ([`FLAG_L`]): the sender accepts FPDUs that span TCP segments.
    pub large_fpdu: bool,
    /// P ([`FLAG_P`]): the echo probe.
    pub echo_probe: bool,
    /// The ULP's Private Data: after the enhanced block when there is one.
    pub private_data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses and validates a frame (RFC 5044 §7.1.1; RFC 6581 §6 for `Variant::Rfc`).
    /// Reserved bits other than [`FLAG_L`] and [`FLAG_P`] are ignored. Octets after the
    /// Private Data are not looked at.
    ///
    /// # Errors
    ///
    /// [`ParseError`]; each is MPA error 4.
    pub fn parse(buf: &'a [u8], variant: Variant) -> Result<Self, ParseError> {
        if buf.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let frame = Frame::new_unchecked(buf);
        let kind = FrameKind::from_key(frame.key(), variant).ok_or(ParseError::BadKey)?;
        let pd_len = frame.pd_length();
        if usize::from(pd_len) > PD_MAX {
            return Err(ParseError::PdTooLong(pd_len));
        }
        frame.check_len()?;
        let pd = frame.clone().into_pd();
        let rev = frame.rev();
        let mut repr = Repr {
            kind,
            markers: frame.m(),
            crc: frame.c(),
            reject: frame.r(),
            rev,
            enhanced: None,
            rtr_flag: false,
            large_fpdu: frame.l(),
            echo_probe: frame.p(),
            private_data: pd,
        };
        match variant {
            Variant::Rfc if frame.s() && rev >= 2 => {
                let enh = Enhanced::parse(pd).ok_or(ParseError::EnhancedTooShort(pd_len))?;
                repr.enhanced = Some(enh);
                repr.private_data = pd.get(ENHANCED_LEN..).unwrap_or(&[]);
            }
            Variant::Rfc => {}
            Variant::DraftRtr => repr.rtr_flag = frame.s(),
        }
        Ok(repr)
    }

    /// Octets [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let enh = if self.enhanced.is_some() {
            ENHANCED_LEN
        } else {
            0
        };
        HEADER_LEN + enh + self.private_data.len()
    }

    /// Writes the frame into the start of `buf`; returns the octets written.
    ///
    /// # Errors
    ///
    /// [`EmitError`] if the Private Data is too long, the buffer too small, or the
    /// combination of fields cannot be expressed.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let len = self.buffer_len();
        let pd_len = len - HEADER_LEN;
        if pd_len > PD_MAX {
            return Err(EmitError::PdTooLong);
        }
        if self.enhanced.is_some() && self.rev < 2 {
            return Err(EmitError::EnhancedNeedsRev2);
        }
        if self.enhanced.is_some() && self.rtr_flag {
            return Err(EmitError::ConflictingS);
        }
        let out = buf.get_mut(..len).ok_or(EmitError::BufferTooSmall)?;
        let mut frame = Frame::new_unchecked(out);
        frame.set_key(self.kind.key());
        let mut flags = 0;
        if self.markers {
            flags |= FLAG_M;
        }
        if self.crc {
            flags |= FLAG_C;
        }
        if self.reject {
            flags |= FLAG_R;
        }
        if self.enhanced.is_some() || self.rtr_flag {
            flags |= FLAG_S;
        }
        if self.large_fpdu {
            flags |= FLAG_L;
        }
        if self.echo_probe {
            flags |= FLAG_P;
        }
        frame.set_flags(flags);
        frame.set_rev(self.rev);
        // pd_len <= 512 was checked above.
        frame.set_pd_length(u16::try_from(pd_len).unwrap_or(0));
        let pd = frame.private_data_mut();
        let ulp = match self.enhanced {
            Some(e) => {
                let (head, rest) = pd
                    .split_at_mut_checked(ENHANCED_LEN)
                    .ok_or(EmitError::BufferTooSmall)?;
                head.copy_from_slice(&e.to_bytes());
                rest
            }
            None => pd,
        };
        // `ulp` is exactly `private_data.len()` long by construction of `len`.
        let dst = ulp
            .get_mut(..self.private_data.len())
            .ok_or(EmitError::BufferTooSmall)?;
        dst.copy_from_slice(self.private_data);
        Ok(len)
    }
}
