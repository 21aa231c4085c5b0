// SPDX-License-Identifier: GPL-2.0

//! CRC32c as used by MPA (RFC 5044 §6, RFC 3720 §12.1 / Appendix B.4).
//!
//! The protocol core never computes a CRC itself: it asks an implementation of [`Crc32c`].
//! `rsiw.ko` implements it with the kernel's `crc32c()` library function, the host crate
//! with an established crc32c crate.

/// The CRC32c residue: the CRC32c over an FPDU including its own (little-endian) CRC field
/// (RFC 5044 §6, RFC 3385).
pub const CRC32C_RESIDUE: u32 = 0x4867_4BC7;

/// The initial running value (all ones), the same as [`Crc32c::SEED`], for code that lets
/// a stream or sink fold octets and holds no [`Crc32c`] implementation itself.
pub const CRC32C_SEED: u32 = 0xFFFF_FFFF;

/// An implementation of the CRC32c update function (Castagnoli polynomial, reflected
/// 0x82F63B78).
///
/// The running value follows the convention of the Linux `crc32c()` function: callers start
/// with [`Crc32c::SEED`] (`0xFFFF_FFFF`), feed octets with [`Crc32c::update`], and obtain the
/// CRC value to put on the wire with [`finish`] (the final bitwise complement). The wire
/// carries the finished value least significant octet first (RFC 5044 §4.1 Figure 2).
pub trait Crc32c {
    /// Initial running value (all ones).
    const SEED: u32 = CRC32C_SEED;

    /// Folds `data` into the running value `crc` and returns the new running value.
    fn update(&self, crc: u32, data: &[u8]) -> u32;
}

/// Turns a running value into the CRC32c of all octets fed so far.
#[inline]
pub const fn finish(running: u32) -> u32 {
    !running
}
