// SPDX-License-Identifier: GPL-2.0

//! FPDU framing (RFC 5044 §4.1, §4.4, §4.5): ULPDU_Length, pad, CRC trailer, MULPDU.
//!
//! ```text
//! 0..1         ULPDU_Length (network order, octets of ULPDU)
//! 2..2+L       ULPDU
//! ..           PAD (0..3 zero octets, so that the FPDU is a multiple of 4)
//! last 4       CRC32c, least significant octet first
//! ```
//!
//! Markers are not shown: [`Fpdu`] views a marker-free FPDU. The engines
//! (`engine::mpa_rx`, `engine::mpa_tx`) interleave markers with the stream.

use super::crc::{finish, Crc32c};
use super::marker::{markers_in_fpdu, MARKER_INTERVAL, MARKER_LEN};

/// Length of the ULPDU_Length field (octets).
pub const LENGTH_LEN: usize = 2;
/// Length of the CRC trailer (octets).
pub const CRC_LEN: usize = 4;
/// Fixed FPDU overhead: ULPDU_Length and CRC (octets).
pub const OVERHEAD: usize = LENGTH_LEN + CRC_LEN;
/// MULPDU floor (octets, RFC 5044 §4.5: never below 128).
pub const MULPDU_MIN: u16 = 128;
/// MULPDU ceiling (octets): the largest ULPDU DDP may post (RFC 5041 §5.1 with a 16-bit
/// ULPDU_Length and 512-octet marker spacing).
pub const MULPDU_MAX: u16 = 64768;

/// Pad octets after a ULPDU of `ulpdu_len` octets: `(4 - (2 + len) % 4) % 4`.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// Marker-free FPDU length for a ULPDU of `ulpdu_len` octets (length, ULPDU, pad, CRC).
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// On-wire FPDU length including the markers that fall inside it when it starts at stream
/// position `pos` (octets since Full Operation started, see `wire::marker`).
pub fn fpdu_wire_len(markers: bool, pos: u32, ulpdu_len: u16) -> usize {
    let content = fpdu_len(usize::from(ulpdu_len));
    // content <= 2 + 65535 + 3 + 4, fits u32.
    let n = markers_in_fpdu(markers, pos, u32::try_from(content).unwrap_or(u32::MAX));
    content + (n as usize) * MARKER_LEN
}

/// MULPDU: the largest ULPDU that fits one segment of `emss` octets (RFC 5044 §4.5):
/// `EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)` with markers,
/// `EMSS - (6 + EMSS mod 4)` without, clamped to [`MULPDU_MIN`]..=[`MULPDU_MAX`].
pub fn mulpdu(emss: u32, markers: bool) -> u16 {
    let marker_room = if markers {
        4 * emss.div_ceil(MARKER_INTERVAL)
    } else {
        0
    };
    let overhead = 6 + marker_room + emss % 4;
    let m = emss.saturating_sub(overhead);
    let m = m.clamp(u32::from(MULPDU_MIN), u32::from(MULPDU_MAX));
    u16::try_from(m).unwrap_or(MULPDU_MAX)
}

/// Why an FPDU buffer could not be viewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpduError {
    /// The buffer is shorter than the FPDU its ULPDU_Length announces.
    Truncated,
}

/// A zero-copy view of one marker-free FPDU at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Fpdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Fpdu<T> {
    /// Wraps a buffer holding at least one whole FPDU (octets after it are ignored).
    ///
    /// # Errors
    ///
    /// [`FpduError::Truncated`] if the buffer is shorter than the FPDU.
    pub fn new_checked(buffer: T) -> Result<Self, FpduError> {
        let f = Fpdu { buffer };
        let buf = f.buffer.as_ref();
        if buf.len() < LENGTH_LEN || buf.len() < fpdu_len(usize::from(f.ulpdu_length())) {
            return Err(FpduError::Truncated);
        }
        Ok(f)
    }

    /// ULPDU_Length (octets, host order).
    pub fn ulpdu_length(&self) -> u16 {
        match self.buffer.as_ref().get(..LENGTH_LEN) {
            Some([a, b]) => u16::from_be_bytes([*a, *b]),
            _ => 0,
        }
    }

    /// The ULPDU octets.
    pub fn ulpdu(&self) -> &[u8] {
        let end = LENGTH_LEN + usize::from(self.ulpdu_length());
        self.buffer.as_ref().get(LENGTH_LEN..end).unwrap_or(&[])
    }

    /// Length of the whole FPDU (octets).
    pub fn len(&self) -> usize {
        fpdu_len(usize::from(self.ulpdu_length()))
    }

    /// Always false: an FPDU has at least its length and CRC fields.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The CRC field as a host-order value (read least significant octet first).
    pub fn crc(&self) -> u32 {
        let end = self.len();
        match self.buffer.as_ref().get(end - CRC_LEN..end) {
            Some([a, b, c, d]) => u32::from_le_bytes([*a, *b, *c, *d]),
            _ => 0,
        }
    }

    /// Whether the CRC field matches the CRC32c over the FPDU up to its pad.
    pub fn check_crc<C: Crc32c>(&self, crc: &C) -> bool {
        let end = self.len() - CRC_LEN;
        match self.buffer.as_ref().get(..end) {
            Some(covered) => finish(crc.update(C::SEED, covered)) == self.crc(),
            None => false,
        }
    }
}

/// Writes a marker-free FPDU carrying `ulpdu` into the start of `buf`, with the CRC computed
/// by `crc` (or 0 when `crc` is `None`: CRCs not in use); returns the octets written.
///
/// # Errors
///
/// [`FpduError::Truncated`] if `buf` is too short or `ulpdu` longer than 65535 octets.
pub fn emit<C: Crc32c>(buf: &mut [u8], ulpdu: &[u8], crc: Option<&C>) -> Result<usize, FpduError> {
    let len = u16::try_from(ulpdu.len()).map_err(|_| FpduError::Truncated)?;
    let total = fpdu_len(ulpdu.len());
    let out = buf.get_mut(..total).ok_or(FpduError::Truncated)?;
    let (body, trailer) = out.split_at_mut(total - CRC_LEN);
    let (head, rest) = body.split_at_mut(LENGTH_LEN);
    head.copy_from_slice(&len.to_be_bytes());
    let (data, pad) = rest.split_at_mut(ulpdu.len());
    data.copy_from_slice(ulpdu);
    pad.fill(0);
    let value = match crc {
        Some(c) => finish(c.update(C::SEED, body)),
        None => 0,
    };
    trailer.copy_from_slice(&value.to_le_bytes());
    Ok(total)
}
