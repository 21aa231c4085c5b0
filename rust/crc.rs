// SPDX-License-Identifier: GPL-2.0

//! KUnit suite `rsiw_crc32c`: the kernel's `crc32c()` library function, which the data path
//! folds into the MPA CRC (RFC 5044 §6) through [`crate::sys::crc32c`], checked against the
//! RFC 3720 Appendix B.4 vectors, the CRC32c check value and residue, and RFC 5044 Figure 5.

#[kernel::prelude::kunit_tests(rsiw_crc32c)]
mod tests {
    use crate::wire::crc::{finish, CRC32C_RESIDUE, CRC32C_SEED};

    fn crc(data: &[u8]) -> u32 {
        finish(crate::sys::crc32c(CRC32C_SEED, data))
    }

    #[test]
    fn rfc3720_vectors() {
        let mut inc = [0u8; 32];
        let mut dec = [0u8; 32];
        for i in 0..32u8 {
            inc[usize::from(i)] = i;
            dec[usize::from(i)] = 31 - i;
        }
        assert_eq!(crc(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc(&[0xffu8; 32]), 0x62a8_ab43);
        assert_eq!(crc(&inc), 0x46dd_794e);
        assert_eq!(crc(&dec), 0x113f_db5c);
        assert_eq!(crc(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn fpdu_residue() {
        // RFC 5044 Figure 5: leading marker, Send (MSN 1, 24 zero octets), CRC on the wire.
        let mut fpdu = [0u8; 52];
        fpdu[4..8].copy_from_slice(&[0x00, 0x2a, 0x41, 0x43]);
        fpdu[19] = 0x01;
        fpdu[48..52].copy_from_slice(&[0x52, 0x23, 0x99, 0x83]);
        assert_eq!(
            crc(&fpdu[..48]),
            u32::from_le_bytes([0x52, 0x23, 0x99, 0x83])
        );
        // Residue over the whole FPDU including its CRC field.
        assert_eq!(crc(&fpdu), CRC32C_RESIDUE);
    }
}
