// SPDX-License-Identifier: GPL-2.0

//! MPA markers (RFC 5044 §4.2, §4.3).
//!
//! ```text
//! 0..1  RESERVED (0 on transmit, ignored on receive but covered by the CRC)
//! 2..3  FPDUPTR  (network order; low 2 bits 0 on transmit, treated as 0 on receive)
//! ```
//!
//! When markers are in use for a direction, a marker occupies the 4 octets at every stream
//! position `p` with `p % 512 == 0`, where position 0 is the first octet of Full Operation in
//! that direction (the first octet after that direction's last startup frame, §4.3). The
//! stream positions here are the octet count since then, modulo 2^32; since 512 divides
//! 2^32, wrapping keeps the marker phase.
//!
//! FPDUPTR reference point (see [`FpduPtrBase`]): RFC 5044 counts back to the ULPDU_Length
//! field; the RDMAC-era seeds count back to the first octet of the FPDU, which is its
//! leading marker when it has one. A marker that falls exactly between two FPDUs belongs to
//! the following one and carries 0 under both conventions.

/// Distance between markers (octets of stream, markers included).
pub const MARKER_INTERVAL: u32 = 512;
/// Length of a marker (octets).
pub const MARKER_LEN: usize = 4;
/// The bits of FPDUPTR a receiver uses (the low 2 bits are treated as 0).
pub const FPDUPTR_MASK: u16 = 0xFFFC;

mod field {
    pub(super) type Field = core::ops::Range<usize>;
    pub(super) const RESERVED: Field = 0..2;
    pub(super) const FPDUPTR: Field = 2..4;
}

/// Where FPDUPTR counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpduPtrBase {
    /// RFC 5044 §4.3: from the first octet of the ULPDU_Length field.
    UlpduLength,
    /// Seeds (RDMAC MPA, used with Rev 0 peers, RFC 5044 Appendix C): from the first octet
    /// of the FPDU, i.e. its leading marker when it starts with one.
    FpduStart,
}

/// A zero-copy view of a marker.
#[derive(Debug, Clone)]
pub struct Marker<T: AsRef<[u8]>> {
    buffer: T,
}

/// The buffer is shorter than a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated;

impl<T: AsRef<[u8]>> Marker<T> {
    /// Wraps a buffer of at least [`MARKER_LEN`] octets.
    ///
    /// # Errors
    ///
    /// [`Truncated`] if the buffer is shorter.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        if buffer.as_ref().len() < MARKER_LEN {
            Err(Truncated)
        } else {
            Ok(Marker { buffer })
        }
    }

    fn word(&self, f: core::ops::Range<usize>) -> u16 {
        match self.buffer.as_ref().get(f) {
            Some([a, b]) => u16::from_be_bytes([*a, *b]),
            _ => 0,
        }
    }

    /// The RESERVED field as received (host order).
    pub fn reserved(&self) -> u16 {
        self.word(field::RESERVED)
    }

    /// FPDUPTR as received, low bits included (octets, host order).
    pub fn fpduptr_raw(&self) -> u16 {
        self.word(field::FPDUPTR)
    }

    /// FPDUPTR with the low 2 bits treated as zero, as a receiver must (RFC 5044 §4.3).
    pub fn fpduptr(&self) -> u16 {
        self.fpduptr_raw() & FPDUPTR_MASK
    }
}

/// The 4 octets of a marker carrying `fpduptr` (octets; low 2 bits cleared), RESERVED 0.
pub fn marker_bytes(fpduptr: u16) -> [u8; MARKER_LEN] {
    let [hi, lo] = (fpduptr & FPDUPTR_MASK).to_be_bytes();
    [0, 0, hi, lo]
}

/// Octets from stream position `pos` to the next marker position (0 if a marker starts at
/// `pos`).
pub const fn until_marker(pos: u32) -> u32 {
    (MARKER_INTERVAL - pos % MARKER_INTERVAL) % MARKER_INTERVAL
}

/// FPDUPTR for a marker at stream position `marker_pos` inside the FPDU whose first octet
/// (leading marker included) is at `fpdu_start` and whose ULPDU_Length field is at
/// `length_pos`. Distances are taken modulo 2^16, the field's width.
pub const fn fpduptr_for(
    base: FpduPtrBase,
    marker_pos: u32,
    fpdu_start: u32,
    length_pos: u32,
) -> u16 {
    let from = match base {
        FpduPtrBase::UlpduLength => length_pos,
        FpduPtrBase::FpduStart => fpdu_start,
    };
    (marker_pos.wrapping_sub(from) & 0xFFFF) as u16 & FPDUPTR_MASK
}

/// Number of markers inside an FPDU that starts at stream position `pos` and carries
/// `content` octets other than markers (ULPDU_Length, ULPDU, pad, CRC). A marker exactly at
/// `pos` counts (it leads this FPDU); one exactly after the last content octet does not (it
/// belongs to the next FPDU). Returns 0 when markers are not in use.
pub const fn markers_in_fpdu(markers: bool, pos: u32, content: u32) -> u32 {
    if !markers || content == 0 {
        return 0;
    }
    let first = until_marker(pos);
    // Marker k sits after `first + 508 * k` content octets and belongs to this FPDU iff
    // content octets remain after it.
    if first >= content {
        0
    } else {
        (content - first - 1) / (MARKER_INTERVAL - MARKER_LEN as u32) + 1
    }
}
