// SPDX-License-Identifier: GPL-2.0

//! An independent FPDU deframer for TX tests: walks a transmitted byte stream, checks and
//! strips markers (RFC 5044 §4.3), checks the CRC with the `crc32c` crate, views each FPDU
//! with `wire::fpdu::Fpdu` and parses its ULPDU header with `wire::ulpdu`. Needs
//! `mpa_util` as a sibling module of the test crate.

#![allow(dead_code, unreachable_pub)]

use crate::mpa_util::{crc32c, HostCrc};
use rsiw_core::wire::fpdu::{fpdu_len, Fpdu, CRC_LEN};
use rsiw_core::wire::marker::{FpduPtrBase, MARKER_INTERVAL, MARKER_LEN};
use rsiw_core::wire::ulpdu::{Config, UlpduHeader};

/// One FPDU found in the stream.
#[derive(Debug, Clone)]
pub struct RawFpdu {
    /// Offset of its first octet (leading marker included) in the stream slice.
    pub start: usize,
    /// Octets it occupies on the wire, markers included.
    pub wire_len: usize,
    /// The ULPDU (markers removed).
    pub ulpdu: Vec<u8>,
    /// FPDUPTR of every marker inside it, leading marker first.
    pub markers: Vec<u16>,
    /// The CRC field as sent (host order).
    pub crc_field: u32,
    /// CRC32c over the covered octets (markers included), computed here.
    pub crc_computed: u32,
}

impl RawFpdu {
    /// The parsed ULPDU header and the payload after it.
    pub fn parse(&self, cfg: Config) -> (UlpduHeader, &[u8]) {
        let (h, n) = UlpduHeader::parse(&self.ulpdu, cfg).expect("ULPDU header parses");
        h.check_segment_len(self.ulpdu.len())
            .expect("segment length fits the header");
        (h, &self.ulpdu[n..])
    }
}

struct Reader<'a> {
    data: &'a [u8],
    i: usize,
    pos0: u32,
    markers: bool,
}

impl Reader<'_> {
    fn pos(&self) -> u32 {
        self.pos0.wrapping_add(self.i as u32)
    }
    /// Reads a marker if one is due at the current position.
    fn marker(&mut self) -> Option<(u32, [u8; 4])> {
        if !self.markers || self.pos() % MARKER_INTERVAL != 0 {
            return None;
        }
        let pos = self.pos();
        let m: [u8; 4] = self.data[self.i..self.i + MARKER_LEN].try_into().unwrap();
        self.i += MARKER_LEN;
        Some((pos, m))
    }
    fn octet(&mut self) -> u8 {
        let b = self.data[self.i];
        self.i += 1;
        b
    }
}

/// Deframes every FPDU in `data`, the octets a TX engine wrote starting at stream position
/// `pos0`. Panics on any framing error (bad marker, truncated FPDU); with `crc` checks
/// every CRC, without it requires the field to be zero.
pub fn deframe(
    data: &[u8],
    pos0: u32,
    markers: bool,
    crc: bool,
    base: FpduPtrBase,
) -> Vec<RawFpdu> {
    let mut r = Reader {
        data,
        i: 0,
        pos0,
        markers,
    };
    let mut out = Vec::new();
    while r.i < data.len() {
        let start = r.i;
        let start_pos = r.pos();
        let mut content = Vec::new();
        let mut covered = Vec::new();
        let mut fptrs = Vec::new();
        let mut length_pos = start_pos;
        let mut total = usize::MAX;
        while content.len() < total {
            if let Some((mpos, m)) = r.marker() {
                assert_eq!(&m[..2], &[0, 0], "marker RESERVED is zero");
                let ptr = u16::from_be_bytes([m[2], m[3]]);
                let want = if content.is_empty() {
                    0
                } else {
                    let from = match base {
                        FpduPtrBase::UlpduLength => length_pos,
                        FpduPtrBase::FpduStart => start_pos,
                    };
                    (mpos.wrapping_sub(from) & 0xFFFC) as u16
                };
                assert_eq!(ptr, want, "FPDUPTR of the marker at stream position {mpos}");
                fptrs.push(ptr);
                covered.extend_from_slice(&m);
                continue;
            }
            if content.is_empty() {
                length_pos = r.pos();
            }
            let b = r.octet();
            if content.len() < total - CRC_LEN.min(total) {
                covered.push(b);
            }
            content.push(b);
            if content.len() == 2 {
                total = fpdu_len(usize::from(u16::from_be_bytes([content[0], content[1]])));
            }
        }
        let f = Fpdu::new_checked(&content[..]).expect("whole FPDU");
        assert_eq!(f.len(), content.len());
        let pad_start = 2 + f.ulpdu().len();
        assert!(
            content[pad_start..content.len() - CRC_LEN]
                .iter()
                .all(|&b| b == 0),
            "pad is zero"
        );
        let crc_computed = crc32c(&covered);
        if crc {
            assert_eq!(f.crc(), crc_computed, "CRC of the FPDU at offset {start}");
            if fptrs.is_empty() {
                assert!(f.check_crc(&HostCrc));
            }
        } else {
            assert_eq!(f.crc(), 0, "CRC field is zero when CRCs are off");
        }
        out.push(RawFpdu {
            start,
            wire_len: r.i - start,
            ulpdu: f.ulpdu().to_vec(),
            markers: fptrs,
            crc_field: f.crc(),
            crc_computed,
        });
    }
    out
}
