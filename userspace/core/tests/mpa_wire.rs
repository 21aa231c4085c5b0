// SPDX-License-Identifier: GPL-2.0

//! Wire codec tests: CRC32c vectors, FPDU pad/CRC/MULPDU, markers, MPA startup frames.

#[path = "common/mpa_util.rs"]
mod mpa_util;

use mpa_util::{crc32c, hex, vectors, HostCrc};
use proptest::prelude::*;
use rsiw_core::wire::crc::CRC32C_RESIDUE;
use rsiw_core::wire::fpdu::{self, fpdu_wire_len, mulpdu, pad_len, Fpdu, FpduError};
use rsiw_core::wire::marker::{
    self, fpduptr_for, markers_in_fpdu, until_marker, FpduPtrBase, Marker,
};
use rsiw_core::wire::mpa::*;

#[test]
fn crc_vectors_match_rfc3720() {
    let v = vectors();
    let list = v["crc_vectors"].as_array().unwrap();
    assert_eq!(list.len(), 5);
    for c in list {
        let input = hex(c["input_hex"].as_str().unwrap());
        let want = u32::from_str_radix(
            c["crc32c_u32"].as_str().unwrap().trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert_eq!(crc32c(&input), want, "{}", c["name"]);
        assert_eq!(
            crc32c(&input).to_le_bytes().to_vec(),
            hex(c["wire_bytes_le"].as_str().unwrap())
        );
        let mut with_crc = input.clone();
        with_crc.extend_from_slice(&want.to_le_bytes());
        assert_eq!(crc32c(&with_crc), CRC32C_RESIDUE);
    }
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn pad_and_lengths() {
    assert_eq!(pad_len(0), 2);
    assert_eq!(pad_len(1), 1);
    assert_eq!(pad_len(2), 0);
    assert_eq!(pad_len(3), 3);
    assert_eq!(pad_len(42), 0);
    for l in 0..100 {
        assert_eq!(fpdu::fpdu_len(l) % 4, 0);
        assert!(fpdu::fpdu_len(l) - l - 6 < 4);
    }
}

#[test]
fn mulpdu_formulas() {
    assert_eq!(mulpdu(1460, true), 1442);
    assert_eq!(mulpdu(1460, false), 1454);
    assert_eq!(mulpdu(9000, false), 8994);
    assert_eq!(mulpdu(100, false), 128);
    assert_eq!(mulpdu(0, true), 128);
    assert_eq!(mulpdu(65535, false), 64768);
    assert_eq!(mulpdu(u32::MAX, true), 64768);
}

/// P6: for every EMSS 140..=65535 and every 4-aligned marker phase, an FPDU carrying MULPDU
/// octets fits the EMSS (markers included).
#[test]
fn mulpdu_fits_emss_for_every_phase() {
    for emss in 140u32..=65535 {
        for markers in [false, true] {
            let m = mulpdu(emss, markers);
            assert!((128..=64768).contains(&m));
            let phases: &[u32] = if markers { &PHASES } else { &[0] };
            for &phase in phases {
                let w = fpdu_wire_len(markers, phase, m);
                assert!(
                    w <= emss as usize,
                    "emss {emss} markers {markers} phase {phase}: {w}"
                );
            }
        }
    }
}

const PHASES: [u32; 128] = {
    let mut p = [0u32; 128];
    let mut i = 0;
    while i < 128 {
        p[i] = 4 * i as u32;
        i += 1;
    }
    p
};

#[test]
fn marker_math() {
    assert_eq!(until_marker(0), 0);
    assert_eq!(until_marker(492), 20);
    assert_eq!(until_marker(512), 0);
    assert_eq!(until_marker(u32::MAX - 3), 4);
    // tshark's 1214-octet FPDU: markers at 0, 512, 1024 carry 0, 508, 1020 (RFC).
    assert_eq!(fpduptr_for(FpduPtrBase::UlpduLength, 512, 0, 4), 508);
    assert_eq!(fpduptr_for(FpduPtrBase::UlpduLength, 1024, 0, 4), 1020);
    // Seed convention counts from the leading marker.
    assert_eq!(fpduptr_for(FpduPtrBase::FpduStart, 512, 0, 4), 512);
    // Fig 6: FPDU at 0x1EC, marker at 0x200.
    assert_eq!(
        fpduptr_for(FpduPtrBase::UlpduLength, 0x200, 0x1EC, 0x1EC),
        0x14
    );
    // Wrapping stream positions.
    assert_eq!(
        fpduptr_for(FpduPtrBase::UlpduLength, 0, u32::MAX - 19, u32::MAX - 19),
        20
    );
    assert_eq!(markers_in_fpdu(true, 0, 52 - 4), 1);
    assert_eq!(markers_in_fpdu(true, 492, 48), 1);
    assert_eq!(markers_in_fpdu(true, 4, 508), 0); // ends exactly at 512: next FPDU's
    assert_eq!(markers_in_fpdu(true, 4, 509), 1);
    assert_eq!(markers_in_fpdu(false, 0, 1000), 0);
    let m = Marker::new_checked(&[0xAB, 0xCD, 0x01, 0xFF][..]).unwrap();
    assert_eq!(m.reserved(), 0xABCD);
    assert_eq!(m.fpduptr_raw(), 0x01FF);
    assert_eq!(m.fpduptr(), 0x01FC);
    assert!(Marker::new_checked(&[0u8; 3][..]).is_err());
    assert_eq!(marker::marker_bytes(0x0203), [0, 0, 2, 0]);
}

proptest! {
    /// markers_in_fpdu agrees with a direct simulation of marker insertion.
    #[test]
    fn markers_in_fpdu_matches_simulation(phase in 0u32..128, content in 0u32..3000) {
        let mut pos = phase * 4;
        let mut left = content;
        let mut n = 0;
        while left > 0 {
            if pos % 512 == 0 { n += 1; pos += 4; }
            pos += 1;
            left -= 1;
        }
        prop_assert_eq!(markers_in_fpdu(true, phase * 4, content), n);
    }
}

#[test]
fn fpdu_view_and_emit_match_write_vector() {
    let v = vectors();
    let w = &v["fpdu_vectors"][4];
    assert!(w["marker_stream_offset"].is_null());
    let bytes = hex(w["fpdu_hex"].as_str().unwrap());
    let f = Fpdu::new_checked(&bytes[..]).unwrap();
    assert_eq!(f.ulpdu_length(), 0x21);
    assert_eq!(f.len(), bytes.len());
    assert!(f.check_crc(&HostCrc));
    assert_eq!(
        f.crc().to_le_bytes().to_vec(),
        hex(w["crc_wire"].as_str().unwrap())
    );
    let mut out = [0u8; 64];
    let n = fpdu::emit(&mut out, f.ulpdu(), Some(&HostCrc)).unwrap();
    assert_eq!(&out[..n], &bytes[..]);
    // Truncation and a corrupted CRC.
    assert_eq!(
        Fpdu::new_checked(&bytes[..bytes.len() - 1]).unwrap_err(),
        FpduError::Truncated
    );
    assert!(Fpdu::new_checked(&[0u8][..]).is_err());
    let mut bad = bytes.clone();
    bad[5] ^= 1;
    assert!(!Fpdu::new_checked(&bad[..]).unwrap().check_crc(&HostCrc));
    assert_eq!(
        fpdu::emit(&mut [0u8; 8], &[1, 2, 3], Some(&HostCrc)),
        Err(FpduError::Truncated)
    );
    let n = fpdu::emit::<HostCrc>(&mut out, &[9], None).unwrap();
    assert_eq!(&out[..n], &[0, 1, 9, 0, 0, 0, 0, 0]);
}

fn req_bytes(flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = KEY_REQ.to_vec();
    v.push(flags);
    v.push(rev);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

#[test]
fn keys_are_the_rfc_octets() {
    assert_eq!(KEY_REQ.to_vec(), hex("4d504120494420526571204672616d65"));
    assert_eq!(KEY_REP.to_vec(), hex("4d504120494420526570204672616d65"));
    assert_eq!(KEY_RTR.to_vec(), hex("4d504120494420527452204672616d65"));
}

#[test]
fn parse_request_basic() {
    let b = req_bytes(FLAG_M | FLAG_C | 0x0F, 1, b"hello");
    let r = Repr::parse(&b, Variant::Rfc).unwrap();
    assert_eq!(r.kind, FrameKind::Request);
    assert!(r.markers && r.crc && !r.reject);
    assert_eq!(r.rev, 1);
    assert_eq!(r.private_data, b"hello");
    assert_eq!(r.enhanced, None);
    // Reserved bits are ignored, trailing octets are not part of the frame.
    let mut more = b.clone();
    more.extend_from_slice(&[1, 2, 3]);
    assert_eq!(Repr::parse(&more, Variant::Rfc).unwrap(), r);
}

#[test]
fn parse_errors() {
    assert_eq!(
        Repr::parse(&[0u8; 19], Variant::Rfc),
        Err(ParseError::Truncated)
    );
    let mut b = req_bytes(0, 1, b"");
    b[7] = b'X';
    assert_eq!(Repr::parse(&b, Variant::Rfc), Err(ParseError::BadKey));
    let b = req_bytes(0, 1, b"abc");
    assert_eq!(
        Repr::parse(&b[..b.len() - 1], Variant::Rfc),
        Err(ParseError::Truncated)
    );
    let mut b = req_bytes(0, 1, &[0u8; 513]);
    assert_eq!(
        Repr::parse(&b, Variant::Rfc),
        Err(ParseError::PdTooLong(513))
    );
    b[18] = 0xFF;
    b[19] = 0xFF;
    assert_eq!(
        Repr::parse(&b, Variant::Rfc),
        Err(ParseError::PdTooLong(0xFFFF))
    );
    let b = req_bytes(0, 1, &[0u8; 512]);
    assert_eq!(
        Repr::parse(&b, Variant::Rfc).unwrap().private_data.len(),
        512
    );
    let b = req_bytes(FLAG_S, 2, &[0x80, 0]);
    assert_eq!(
        Repr::parse(&b, Variant::Rfc),
        Err(ParseError::EnhancedTooShort(2))
    );
    // The draft Rtr key is unknown in RFC mode.
    let mut b = req_bytes(0, 1, b"");
    b[..16].copy_from_slice(&KEY_RTR);
    assert_eq!(Repr::parse(&b, Variant::Rfc), Err(ParseError::BadKey));
    assert_eq!(
        Repr::parse(&b, Variant::DraftRtr).unwrap().kind,
        FrameKind::Rtr
    );
    b[..16].copy_from_slice(&KEY_RTR_ASCII);
    assert_eq!(
        Repr::parse(&b, Variant::DraftRtr).unwrap().kind,
        FrameKind::Rtr
    );
}

#[test]
fn enhanced_block_layout() {
    // RFC 6581 §9: PD 80 10 c0 10 = A, IRD 16, C, D, ORD 16.
    let b = req_bytes(FLAG_S, 2, &hex("8010c010cafe"));
    let r = Repr::parse(&b, Variant::Rfc).unwrap();
    let e = r.enhanced.unwrap();
    assert!(e.p2p);
    assert_eq!(
        e.rtr,
        RtrSet {
            send: false,
            write: true,
            read: true
        }
    );
    assert_eq!((e.ird, e.ord), (16, 16));
    assert_eq!(r.private_data, &[0xca, 0xfe]);
    // A=0: B/C/D ignored.
    let e = Enhanced::parse(&hex("7fffffff")).unwrap();
    assert!(!e.p2p);
    assert_eq!(e.rtr, RtrSet::NONE);
    assert_eq!((e.ird, e.ord), (0x3FFF, 0x3FFF));
    assert_eq!(
        Enhanced {
            p2p: true,
            rtr: RtrSet::ALL,
            ird: 0xFFFF,
            ord: 1
        }
        .to_bytes(),
        [0xFF, 0xFF, 0xC0, 0x01]
    );
    assert_eq!(
        Enhanced {
            p2p: false,
            rtr: RtrSet::ALL,
            ird: 2,
            ord: 1
        }
        .to_bytes(),
        [0, 2, 0, 1]
    );
    // S with Rev 1 is a reserved bit in RFC mode, the Rtr flag in draft mode.
    let b = req_bytes(FLAG_S, 1, &hex("8010c010"));
    let r = Repr::parse(&b, Variant::Rfc).unwrap();
    assert_eq!(
        (r.enhanced, r.rtr_flag, r.private_data.len()),
        (None, false, 4)
    );
    let r = Repr::parse(&b, Variant::DraftRtr).unwrap();
    assert_eq!(
        (r.enhanced, r.rtr_flag, r.private_data.len()),
        (None, true, 4)
    );
}

#[test]
fn emit_errors() {
    let pd = [0u8; 512];
    let mut buf = [0u8; 600];
    let mut r = Repr {
        kind: FrameKind::Reply,
        markers: false,
        crc: false,
        reject: true,
        rev: 2,
        enhanced: None,
        rtr_flag: false,
        large_fpdu: false,
        echo_probe: false,
        private_data: &pd[..512],
    };
    assert_eq!(r.emit(&mut buf), Ok(532));
    assert_eq!(r.emit(&mut buf[..531]), Err(EmitError::BufferTooSmall));
    r.enhanced = Some(Enhanced {
        p2p: false,
        rtr: RtrSet::NONE,
        ird: 1,
        ord: 1,
    });
    assert_eq!(r.emit(&mut buf), Err(EmitError::PdTooLong));
    r.private_data = &pd[..508];
    assert_eq!(r.emit(&mut buf), Ok(532));
    r.rev = 1;
    assert_eq!(r.emit(&mut buf), Err(EmitError::EnhancedNeedsRev2));
    r.rev = 2;
    r.rtr_flag = true;
    assert_eq!(r.emit(&mut buf), Err(EmitError::ConflictingS));
}

type ReprParts = (
    u8,
    bool,
    bool,
    bool,
    u8,
    Option<(bool, u8, u16, u16)>,
    bool,
    Vec<u8>,
    bool,
);

fn arb_repr_parts() -> impl Strategy<Value = ReprParts> {
    (
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u8>(),
        proptest::option::of((any::<bool>(), 0u8..8, 0u16..0x4000, 0u16..0x4000)),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..=508),
        any::<bool>(),
    )
}

proptest! {
    /// parse(emit(x)) == x for every expressible frame, in both variants.
    #[test]
    fn startup_frame_round_trip(parts in arb_repr_parts(), large_fpdu in any::<bool>(), echo_probe in any::<bool>()) {
        let (k, m, c, r, rev, enh, rtr, pd, draft) = parts;
        let variant = if draft { Variant::DraftRtr } else { Variant::Rfc };
        let kind = match k { 0 => FrameKind::Request, 1 => FrameKind::Reply, _ => FrameKind::Rtr };
        let kind = if kind == FrameKind::Rtr && !draft { FrameKind::Reply } else { kind };
        let (enhanced, rtr_flag, rev) = if draft {
            (None, rtr, rev)
        } else {
            let e = enh.map(|(p2p, f, ird, ord)| Enhanced {
                p2p,
                rtr: if p2p { RtrSet { send: f & 1 != 0, write: f & 2 != 0, read: f & 4 != 0 } } else { RtrSet::NONE },
                ird,
                ord,
            });
            (e, false, if e.is_some() { rev.max(2) } else { rev })
        };
        let repr = Repr { kind, markers: m, crc: c, reject: r, rev, enhanced, rtr_flag, large_fpdu, echo_probe, private_data: &pd };
        let mut buf = [0u8; FRAME_MAX];
        let n = repr.emit(&mut buf).unwrap();
        prop_assert_eq!(n, repr.buffer_len());
        let back = Repr::parse(&buf[..n], variant).unwrap();
        // In RFC mode S without Rev >= 2 is not emitted, so the reprs agree exactly.
        prop_assert_eq!(back, repr);
    }

    /// Parsing never panics on arbitrary octets.
    #[test]
    fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Repr::parse(&data, Variant::Rfc);
        let _ = Repr::parse(&data, Variant::DraftRtr);
        let f = Frame::new_unchecked(&data[..]);
        let _ = (f.key(), f.flags(), f.rev(), f.pd_length(), f.private_data());
        let _ = Fpdu::new_checked(&data[..]).map(|f| (f.ulpdu().len(), f.crc(), f.check_crc(&HostCrc)));
    }
}
