// SPDX-License-Identifier: GPL-2.0

//! Wire codec tests: DDP headers (RFC 5041 §4, §7.2) and the combined ULPDU header
//! (`wire::ulpdu`), with byte vectors from the RFC figures and the golden FPDUs.

use proptest::prelude::*;
use rsiw_core::wire::ddp::{self, DdpError, Header, Segment, TaggedError, UntaggedError, Version};
use rsiw_core::wire::rdmap::{
    self, AtomicOp, AtomicRequest, AtomicResponse, ImmediateData, Opcode, ReadRequest,
};
use rsiw_core::wire::terminate::{EchoedDdpHeader, Layer, TermCause, Terminate};
use rsiw_core::wire::ulpdu::{
    Config, EmitError, ParseError, Placement, RdmapHeader, UlpduHeader, MAX_HEADER_LEN,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> serde_json::Value {
    serde_json::from_str(include_str!("data/mpa_vectors.json")).unwrap()
}

fn emit(h: &UlpduHeader, cfg: Config) -> Vec<u8> {
    let mut buf = [0u8; MAX_HEADER_LEN];
    let n = h.emit_into(&mut buf, cfg).unwrap();
    assert_eq!(n, h.buffer_len());
    buf[..n].to_vec()
}

const ALL_CFGS: [Config; 3] = [Config::RFC, Config::RFC_7306, Config::RDMAC];

// ---------------------------------------------------------------------------------------
// DDP layer

#[test]
fn ddp_constants() {
    assert_eq!(ddp::TAGGED_LEN, 14);
    assert_eq!(ddp::UNTAGGED_LEN, 18);
    assert_eq!(ddp::CTRL_LEN, 2);
    assert_eq!(ddp::header_len(0x80), 14);
    assert_eq!(ddp::header_len(0x7F), 18);
    assert_eq!(Version::Rfc.dv(), 1);
    assert_eq!(Version::Rdmac.dv(), 0);
    assert_eq!(Version::from_dv(1), Some(Version::Rfc));
    assert_eq!(Version::from_dv(0), Some(Version::Rdmac));
    assert_eq!(Version::from_dv(2), None);
    assert_eq!(Version::from_dv(3), None);
    assert_eq!(ddp::MSN_INITIAL, 1);
}

#[test]
fn ddp_tagged_fields() {
    let b = hex("c1 40 12345678 0102030405060708");
    let h = Header::parse(&b, Version::Rfc).unwrap();
    assert_eq!(
        h,
        Header::Tagged(ddp::Tagged {
            last: true,
            rsvd_ulp: 0x40,
            stag: 0x1234_5678,
            to: 0x0102_0304_0506_0708,
        })
    );
    assert!(h.is_tagged() && h.last());
    assert_eq!(h.header_len(), 14);
    let s = Segment::new_checked(&b[..]).unwrap();
    assert!(s.tagged() && s.last());
    assert_eq!(s.dv(), 1);
    assert_eq!(s.stag(), 0x1234_5678);
    assert_eq!(s.to(), 0x0102_0304_0506_0708);
    assert!(s.payload().is_empty());
    let mut out = [0u8; 14];
    assert_eq!(h.emit_into(&mut out, Version::Rfc), Ok(14));
    assert_eq!(&out[..], &b[..]);
}

#[test]
fn ddp_untagged_fields() {
    let b = hex("01 44 a1a2a3a4 00000000 fffffffe 00000100 cafe");
    let h = Header::parse(&b, Version::Rfc).unwrap();
    assert_eq!(
        h,
        Header::Untagged(ddp::Untagged {
            last: false,
            rsvd_ulp: 0x44,
            rsvd_ulp_ext: 0xa1a2_a3a4,
            qn: 0,
            msn: 0xffff_fffe,
            mo: 0x100,
        })
    );
    let s = Segment::new_checked(&b[..]).unwrap();
    assert!(!s.tagged() && !s.last());
    assert_eq!(s.qn(), 0);
    assert_eq!(s.msn(), 0xffff_fffe);
    assert_eq!(s.mo(), 0x100);
    assert_eq!(s.rsvd_ulp_ext(), 0xa1a2_a3a4);
    assert_eq!(s.payload(), &[0xca, 0xfe]);
    assert_eq!(s.header().len(), 18);
}

#[test]
fn ddp_reserved_bits_ignored_and_emitted_zero() {
    // T=1 L=1 Rsvd=1111 DV=01.
    let b = hex("fd 40 00000001 0000000000000002");
    let h = Header::parse(&b, Version::Rfc).unwrap();
    let mut out = [0u8; 14];
    h.emit_into(&mut out, Version::Rfc).unwrap();
    assert_eq!(out[0], 0xc1);
}

#[test]
fn ddp_bad_dv() {
    for (ctrl, v, tagged, dv) in [
        (0xc0u8, Version::Rfc, true, 0u8),
        (0x40, Version::Rfc, false, 0),
        (0xc2, Version::Rfc, true, 2),
        (0x43, Version::Rfc, false, 3),
        (0xc1, Version::Rdmac, true, 1),
        (0x41, Version::Rdmac, false, 1),
    ] {
        let mut b = [0u8; 18];
        b[0] = ctrl;
        let e = Header::parse(&b, v).unwrap_err();
        assert_eq!(e, ddp::ParseError::Version { tagged, dv });
        let want = if tagged {
            DdpError::Tagged(TaggedError::InvalidVersion)
        } else {
            DdpError::Untagged(UntaggedError::InvalidVersion)
        };
        assert_eq!(e.ddp_error(), Some(want));
        // Lenient parse accepts and reports the DV.
        assert_eq!(Header::parse_any(&b).unwrap().1, dv);
    }
}

#[test]
fn ddp_truncated() {
    assert_eq!(
        Header::parse(&[], Version::Rfc),
        Err(ddp::ParseError::Truncated { need: 2 })
    );
    let t = hex("c1 40 12345678 0102030405060708");
    for k in 1..14 {
        assert_eq!(
            Header::parse(&t[..k], Version::Rfc),
            Err(ddp::ParseError::Truncated { need: 14 })
        );
    }
    let u = [0x41u8; 18];
    for k in 1..18 {
        assert_eq!(
            Header::parse(&u[..k], Version::Rfc),
            Err(ddp::ParseError::Truncated { need: 18 })
        );
    }
    assert_eq!(ddp::ParseError::Truncated { need: 2 }.ddp_error(), None);
    let mut small = [0u8; 17];
    let h = Header::parse(&u, Version::Rfc).unwrap();
    assert_eq!(
        h.emit_into(&mut small, Version::Rfc),
        Err(ddp::EmitError::BufferTooSmall)
    );
    // Unchecked views never panic on short buffers.
    let s = Segment::new_unchecked(&u[..3]);
    assert_eq!((s.qn(), s.msn(), s.mo(), s.stag(), s.to()), (0, 0, 0, 0, 0));
    assert!(s.payload().is_empty());
    assert_eq!(s.header().len(), 3);
}

#[test]
fn ddp_segment_setters() {
    let mut b = [0u8; 20];
    let mut s = Segment::new_unchecked(&mut b[..]);
    s.set_ctrl(false, true, Version::Rfc);
    s.set_rsvd_ulp(0x43);
    s.set_rsvd_ulp_ext(0x0102_0304);
    s.set_qn(0);
    s.set_msn(1);
    s.set_mo(0);
    s.payload_mut().copy_from_slice(&[0xaa, 0xbb]);
    assert_eq!(
        b.to_vec(),
        hex("41 43 01020304 00000000 00000001 00000000 aabb")
    );
    let mut t = [0u8; 14];
    let mut s = Segment::new_unchecked(&mut t[..]);
    s.set_ctrl(true, false, Version::Rdmac);
    s.set_stag(0xdead_beef);
    s.set_to(u64::MAX);
    assert_eq!(t.to_vec(), hex("80 00 deadbeef ffffffffffffffff"));
}

#[test]
fn ddp_error_codes_rfc5041_7_2() {
    let table: [(DdpError, u8, u8); 12] = [
        (DdpError::LocalCatastrophic, 0, 0x00),
        (DdpError::Tagged(TaggedError::InvalidStag), 1, 0x00),
        (DdpError::Tagged(TaggedError::BaseBounds), 1, 0x01),
        (DdpError::Tagged(TaggedError::StagNotAssociated), 1, 0x02),
        (DdpError::Tagged(TaggedError::ToWrap), 1, 0x03),
        (DdpError::Tagged(TaggedError::InvalidVersion), 1, 0x04),
        (DdpError::Untagged(UntaggedError::InvalidQn), 2, 0x01),
        (DdpError::Untagged(UntaggedError::NoBuffer), 2, 0x02),
        (DdpError::Untagged(UntaggedError::MsnRange), 2, 0x03),
        (DdpError::Untagged(UntaggedError::InvalidMo), 2, 0x04),
        (DdpError::Untagged(UntaggedError::TooLong), 2, 0x05),
        (DdpError::Untagged(UntaggedError::InvalidVersion), 2, 0x06),
    ];
    for (e, t, c) in table {
        assert_eq!((e.etype(), e.ecode()), (t, c), "{e:?}");
        assert_eq!(DdpError::from_codes(t, c), Some(e));
        let tc = TermCause::from(e);
        assert_eq!((tc.layer, tc.etype, tc.ecode), (Layer::Ddp, t, c));
    }
    assert_eq!(ddp::LAYER, 1);
    assert_eq!(DdpError::from_codes(1, 0x05), None);
    assert_eq!(DdpError::from_codes(2, 0x00), None);
    assert_eq!(DdpError::from_codes(2, 0x07), None);
    assert_eq!(DdpError::from_codes(3, 0x00), None);
    assert_eq!(DdpError::from_codes(0, 0x01), None);
}

// ---------------------------------------------------------------------------------------
// ULPDU header: known vectors

#[test]
fn first_two_octets_table() {
    // The first two ULPDU octets when L=1 (RFC 5041 §4, RFC 5040 §4: DV 1, RV 1).
    let cases = [
        (Opcode::Write, "c140"),
        (Opcode::ReadRequest, "4141"),
        (Opcode::ReadResponse, "c142"),
        (Opcode::Send, "4143"),
        (Opcode::SendInvalidate, "4144"),
        (Opcode::SendSe, "4145"),
        (Opcode::SendSeInvalidate, "4146"),
        (Opcode::Terminate, "4147"),
        (Opcode::ImmediateData, "4148"),
        (Opcode::ImmediateDataSe, "4149"),
        (Opcode::AtomicRequest, "414a"),
        (Opcode::AtomicResponse, "414b"),
    ];
    for (op, want) in cases {
        let h = sample(op, 1);
        assert_eq!(emit(&h, Config::RFC_7306)[..2], hex(want)[..], "{op:?}");
    }
    // RDMAC: DV 0 and RV 0 (seed Fig 5: `40 03`).
    assert_eq!(
        emit(&sample(Opcode::Send, 1), Config::RDMAC)[..2],
        [0x40, 0x03]
    );
    assert_eq!(
        emit(&sample(Opcode::Write, 1), Config::RDMAC)[..2],
        [0xc0, 0x00]
    );
}

/// A valid header of each opcode with MSN `msn` (fixed field values).
fn sample(op: Opcode, msn: u32) -> UlpduHeader {
    let rr = ReadRequest {
        sink_stag: 0x1122_3344,
        sink_to: 0x2000,
        size: 0x1000,
        src_stag: 0x5566_7788,
        src_to: 0xdead_beef,
    };
    match op {
        Opcode::Write | Opcode::ReadResponse => UlpduHeader::tagged(op, true, 0x1234_5678, 0x1000),
        Opcode::SendInvalidate | Opcode::SendSeInvalidate => {
            UlpduHeader::untagged(op, true, msn, 0, 0x0bad_cafe)
        }
        Opcode::Send | Opcode::SendSe => UlpduHeader::untagged(op, true, msn, 0, 0),
        Opcode::ReadRequest => UlpduHeader::header_only(op, msn, RdmapHeader::ReadRequest(rr)),
        Opcode::Terminate => UlpduHeader::header_only(
            op,
            msn,
            RdmapHeader::Terminate(Terminate::new(TermCause {
                layer: Layer::Llp,
                etype: 0,
                ecode: 2,
            })),
        ),
        Opcode::ImmediateData | Opcode::ImmediateDataSe => {
            UlpduHeader::header_only(op, msn, RdmapHeader::Immediate(ImmediateData(*b"IMMEDIAT")))
        }
        Opcode::AtomicRequest => UlpduHeader::header_only(
            op,
            msn,
            RdmapHeader::AtomicRequest(AtomicRequest {
                op: AtomicOp::CmpSwap,
                req_id: 7,
                stag: 0xabcd,
                to: 0x40,
                add_swap: 1,
                add_swap_mask: u64::MAX,
                compare: 0,
                compare_mask: u64::MAX,
            }),
        ),
        Opcode::AtomicResponse => UlpduHeader::header_only(
            op,
            msn,
            RdmapHeader::AtomicResponse(AtomicResponse {
                req_id: 7,
                orig_value: 42,
            }),
        ),
    }
}

#[test]
fn rfc5044_fig5_send_vector() {
    let v = vectors();
    for f in v["fpdu_vectors"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let fpdu = hex(f["fpdu_hex"].as_str().unwrap());
        // Leading marker when the FPDU starts at a marker position (stream offset 0).
        let start = if f["marker_stream_offset"].as_u64() == Some(0) {
            4
        } else {
            0
        };
        let len = usize::from(u16::from_be_bytes([fpdu[start], fpdu[start + 1]]));
        let mut ulpdu = fpdu[start + 2..].to_vec();
        let seed = name.starts_with("seed");
        let cfg = if seed { Config::RDMAC } else { Config::RFC };
        if f["marker_stream_offset"].as_u64() == Some(492) {
            // Marker at stream offset 0x200, i.e. ULPDU offset 18: strip it.
            ulpdu.drain(18..22);
        }
        ulpdu.truncate(len);
        let (h, hl) = UlpduHeader::parse(&ulpdu, cfg).unwrap();
        if name.contains("RDMA Write") {
            assert_eq!(
                h,
                UlpduHeader::tagged(Opcode::Write, true, 0x1234_5678, 0x1000)
            );
            assert_eq!(hl, 14);
            assert_eq!(&ulpdu[hl..], b"RDMA WRITE payload!");
        } else {
            let msn = if name.contains("Fig6") { 2 } else { 1 };
            assert_eq!(
                h,
                UlpduHeader::untagged(Opcode::Send, true, msn, 0, 0),
                "{name}"
            );
            assert_eq!(hl, 18);
            assert_eq!(ulpdu.len(), 42);
            assert!(ulpdu[hl..].iter().all(|&b| b == 0));
            // The other version rejects it at the DDP layer.
            let other = if seed { Config::RFC } else { Config::RDMAC };
            let e = UlpduHeader::parse(&ulpdu, other).unwrap_err();
            assert_eq!(
                e,
                ParseError::DdpVersion {
                    tagged: false,
                    dv: u8::from(!seed)
                }
            );
            assert_eq!(e.cause(), TermCause::ddp(DdpError::bad_version(false)));
        }
        assert_eq!(emit(&h, cfg), ulpdu[..hl].to_vec(), "{name}");
    }
}

#[test]
fn read_request_vector() {
    let b = hex("41 41 00000000 00000001 00000005 00000000
         11223344 0000000000002000 00001000 55667788 00000000deadbeef");
    let (h, n) = UlpduHeader::parse(&b, Config::RFC).unwrap();
    assert_eq!(n, 46);
    assert_eq!(h, {
        let mut s = sample(Opcode::ReadRequest, 5);
        s.placement = Placement::Untagged {
            qn: 1,
            msn: 5,
            mo: 0,
        };
        s
    });
    assert_eq!(emit(&h, Config::RFC), b);
}

#[test]
fn send_with_invalidate_vector() {
    let b = hex("41 46 0badcafe 00000000 00000009 00000000");
    let (h, n) = UlpduHeader::parse(&b, Config::RFC).unwrap();
    assert_eq!(n, 18);
    assert_eq!(h.opcode, Opcode::SendSeInvalidate);
    assert_eq!(h.inval_stag, 0x0bad_cafe);
    assert!(h.opcode.solicited());
    assert_eq!(emit(&h, Config::RFC), b);
    // The field is ignored for opcodes without an Invalidate STag.
    let b = hex("41 43 0badcafe 00000000 00000009 00000000");
    let (h, _) = UlpduHeader::parse(&b, Config::RFC).unwrap();
    assert_eq!(h.inval_stag, 0);
}

#[test]
fn terminate_ulpdu_vectors() {
    // tshark frame 11: TERM LLP/MPA/CRC error, ULPDU_Length 22.
    let b = hex("41 47 00000000 00000002 00000001 00000000 20 02 00 00");
    let (h, n) = UlpduHeader::parse(&b, Config::RFC).unwrap();
    assert_eq!(n, 22);
    assert_eq!(h, sample(Opcode::Terminate, 1));
    assert_eq!(emit(&h, Config::RFC), b);
    // tshark frame 12 shape: DDP/Tagged/Invalid STag, M and D, echoed Write header.
    let echoed = hex("c1 40 12345678 0000000000001013");
    let b = [
        hex("41 47 00000000 00000002 00000001 00000000 11 00 c0 00 0017"),
        echoed.clone(),
    ]
    .concat();
    let (h, n) = UlpduHeader::parse(&b, Config::RFC).unwrap();
    assert_eq!(n, b.len());
    let RdmapHeader::Terminate(t) = h.rdmap else {
        panic!("not a terminate")
    };
    assert_eq!(
        t.cause,
        TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag))
    );
    assert_eq!(t.seg_len, Some(0x17));
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &echoed[..]);
    assert_eq!(t.rdma_header, None);
    assert_eq!(emit(&h, Config::RFC), b);
}

#[test]
fn rfc7306_vectors() {
    let b = hex("41 4a 00000000 00000001 00000003 00000000
         00000002 00000007 0000abcd 0000000000000040
         0000000000000001 ffffffffffffffff 0000000000000000 ffffffffffffffff");
    let (h, n) = UlpduHeader::parse(&b, Config::RFC_7306).unwrap();
    assert_eq!(n, 70);
    let mut want = sample(Opcode::AtomicRequest, 3);
    want.placement = Placement::Untagged {
        qn: 1,
        msn: 3,
        mo: 0,
    };
    assert_eq!(h, want);
    assert_eq!(emit(&h, Config::RFC_7306), b);

    let b = hex("41 4b 00000000 00000003 00000004 00000000 00000007 000000000000002a");
    let (h, n) = UlpduHeader::parse(&b, Config::RFC_7306).unwrap();
    assert_eq!(n, 30);
    assert_eq!(h, sample(Opcode::AtomicResponse, 4));
    assert_eq!(emit(&h, Config::RFC_7306), b);

    let b = hex("41 49 00000000 00000000 00000004 00000000 494d4d4544494154");
    let (h, n) = UlpduHeader::parse(&b, Config::RFC_7306).unwrap();
    assert_eq!(n, 26);
    assert_eq!(h, sample(Opcode::ImmediateDataSe, 4));
    assert_eq!(emit(&h, Config::RFC_7306), b);
}

// ---------------------------------------------------------------------------------------
// ULPDU header: error paths

fn err(b: &[u8], cfg: Config) -> ParseError {
    UlpduHeader::parse(b, cfg).unwrap_err()
}

fn unexpected_opcode() -> TermCause {
    TermCause::rdmap(rdmap::RdmapError::RemoteOperation(
        rdmap::OperationError::UnexpectedOpcode,
    ))
}

#[test]
fn bad_dv_is_reported_from_the_first_octet() {
    assert_eq!(
        err(&[0xc0], Config::RFC),
        ParseError::DdpVersion {
            tagged: true,
            dv: 0
        }
    );
    assert_eq!(
        err(&[0x42], Config::RFC),
        ParseError::DdpVersion {
            tagged: false,
            dv: 2
        }
    );
    assert_eq!(
        err(&[0xc1], Config::RDMAC).cause(),
        TermCause::ddp(DdpError::Tagged(TaggedError::InvalidVersion))
    );
    assert_eq!(
        err(&[0x41], Config::RDMAC).cause(),
        TermCause::ddp(DdpError::Untagged(UntaggedError::InvalidVersion))
    );
}

#[test]
fn bad_rv() {
    // A repeated MPA Request in Full Operation parses as ctrl `41 20` (RV 0).
    let e = err(&hex("4120"), Config::RFC);
    assert_eq!(e, ParseError::RdmapVersion(0));
    assert_eq!(
        e.cause(),
        TermCause::rdmap(rdmap::RdmapError::RemoteOperation(
            rdmap::OperationError::InvalidVersion
        ))
    );
    assert_eq!((e.cause().etype, e.cause().ecode), (2, 0x05));
    assert_eq!(err(&hex("4183"), Config::RFC), ParseError::RdmapVersion(2));
    assert_eq!(
        err(&hex("40c3"), Config::RDMAC),
        ParseError::RdmapVersion(3)
    );
    assert_eq!(
        err(&hex("4043"), Config::RDMAC),
        ParseError::RdmapVersion(1)
    );
}

#[test]
fn reserved_and_disabled_opcodes() {
    for op in 0xCu8..=0xF {
        for cfg in ALL_CFGS {
            let ctrl = (cfg.rdmap.rv() << 6) | op;
            let b = [0x40 | cfg.ddp.dv(), ctrl];
            let e = err(&b, cfg);
            assert_eq!(e, ParseError::Opcode(op));
            assert_eq!(e.cause(), unexpected_opcode());
        }
    }
    for op in 0x8u8..=0xB {
        assert_eq!(err(&[0x41, 0x40 | op], Config::RFC), ParseError::Opcode(op));
        assert_eq!(err(&[0x40, op], Config::RDMAC), ParseError::Opcode(op));
        // RFC 7306 requires RV 1: not even with the flag on an RDMAC connection.
        let cfg = Config {
            rfc7306: true,
            ..Config::RDMAC
        };
        assert_eq!(err(&[0x40, op], cfg), ParseError::Opcode(op));
    }
    assert_eq!(Config::for_mpa_rev(0, true), Config::RDMAC);
    assert_eq!(Config::for_mpa_rev(1, false), Config::RFC);
    assert_eq!(Config::for_mpa_rev(2, true), Config::RFC_7306);
}

#[test]
fn rsv_bits_of_rdmap_ctrl_are_ignored() {
    let b = hex("41 73 00000000 00000000 00000001 00000000");
    let (h, _) = UlpduHeader::parse(&b, Config::RFC).unwrap();
    assert_eq!(h.opcode, Opcode::Send);
    assert_eq!(emit(&h, Config::RFC)[1], 0x43);
}

#[test]
fn t_bit_must_match_opcode() {
    for op in Opcode::ALL {
        let cfg = Config::RFC_7306;
        let wrong_t = if op.is_tagged() { 0x41 } else { 0xc1 };
        let e = err(&[wrong_t, 0x40 | op.code()], cfg);
        assert_eq!(e, ParseError::TaggedMismatch(op));
        assert_eq!(e.cause(), unexpected_opcode());
    }
}

#[test]
fn qn_must_match_opcode() {
    for op in Opcode::ALL.into_iter().filter(|o| !o.is_tagged()) {
        let good = emit(&sample(op, 1), Config::RFC_7306);
        for qn in [0u32, 1, 2, 3, 4, 0xffff_ffff] {
            let mut b = good.clone();
            b[6..10].copy_from_slice(&qn.to_be_bytes());
            let r = UlpduHeader::parse(&b, Config::RFC_7306);
            if Some(qn) == op.queue() {
                assert!(r.is_ok(), "{op:?} qn {qn}");
            } else {
                let e = r.unwrap_err();
                assert_eq!(e, ParseError::InvalidQn { opcode: op, qn });
                assert_eq!(
                    e.cause(),
                    TermCause::ddp(DdpError::Untagged(UntaggedError::InvalidQn))
                );
            }
        }
    }
}

#[test]
fn header_only_messages_need_l1_and_mo0() {
    for op in Opcode::ALL {
        let good = emit(&sample(op, 1), Config::RFC_7306);
        let mut b = good.clone();
        b[0] &= !ddp::FLAG_L;
        let r = UlpduHeader::parse(&b, Config::RFC_7306);
        if op.single_segment() {
            let e = r.unwrap_err();
            assert_eq!(e, ParseError::NotLast(op));
            assert_eq!(e.cause(), unexpected_opcode());
            let mut b = good.clone();
            b[17] = 4;
            let e = err(&b, Config::RFC_7306);
            assert_eq!(e, ParseError::InvalidMo { opcode: op, mo: 4 });
            assert_eq!(
                e.cause(),
                TermCause::ddp(DdpError::Untagged(UntaggedError::InvalidMo))
            );
        } else {
            let (h, _) = r.unwrap();
            assert!(!h.last);
        }
    }
}

#[test]
fn truncated_at_every_length() {
    for cfg in [Config::RFC_7306, Config::RDMAC] {
        for op in Opcode::ALL.into_iter().filter(|o| cfg.allows(*o)) {
            let full = emit(&sample(op, 1), cfg);
            assert_eq!(err(&[], cfg), ParseError::Truncated { need: 2 });
            for k in 1..full.len() {
                match err(&full[..k], cfg) {
                    ParseError::Truncated { need } => {
                        assert!(need > k && need <= full.len(), "{op:?} {k} {need}")
                    }
                    e => panic!("{op:?} at {k}: {e:?}"),
                }
            }
            let cause = ParseError::Truncated { need: 1 }.cause();
            assert_eq!(
                (cause.layer, cause.etype, cause.ecode),
                (Layer::Rdma, 2, 0xFF)
            );
        }
    }
}

#[test]
fn atomic_opcode_and_terminate_layer_errors() {
    let mut b = emit(&sample(Opcode::AtomicRequest, 1), Config::RFC_7306);
    for aop in [1u8, 3, 0xF] {
        b[21] = aop;
        let e = err(&b, Config::RFC_7306);
        assert_eq!(e, ParseError::AtomicOpcode(aop));
        assert_eq!(e.cause(), unexpected_opcode());
    }
    // Reserved bits before AOpCode are ignored.
    b[18..21].copy_from_slice(&[0xff, 0xff, 0xff]);
    b[21] = 0xf0;
    let (h, _) = UlpduHeader::parse(&b, Config::RFC_7306).unwrap();
    let RdmapHeader::AtomicRequest(a) = h.rdmap else {
        panic!()
    };
    assert_eq!(a.op, AtomicOp::FetchAdd);

    let mut b = emit(&sample(Opcode::Terminate, 1), Config::RFC);
    b[18] = 0x30;
    assert_eq!(err(&b, Config::RFC), ParseError::TerminateLayer(3));
}

#[test]
fn segment_length_checks() {
    for op in Opcode::ALL {
        let h = sample(op, 1);
        let n = h.buffer_len();
        assert_eq!(h.check_segment_len(n), Ok(()), "{op:?}");
        assert_eq!(
            h.check_segment_len(n - 1),
            Err(ParseError::Truncated { need: n })
        );
        let more = h.check_segment_len(n + 1);
        if op.carries_payload() || op == Opcode::Terminate {
            assert_eq!(more, Ok(()), "{op:?}");
        } else {
            let e = more.unwrap_err();
            assert_eq!(
                e,
                ParseError::Payload {
                    opcode: op,
                    len: n + 1
                }
            );
            assert_eq!(e.cause(), unexpected_opcode());
        }
    }
    // Immediate Data: exactly 8 octets after the DDP header.
    assert_eq!(
        sample(Opcode::ImmediateData, 1).check_segment_len(18 + 8),
        Ok(())
    );
}

#[test]
fn emit_errors() {
    let cfg = Config::RFC_7306;
    let mut small = [0u8; 17];
    assert_eq!(
        sample(Opcode::Send, 1).emit_into(&mut small, cfg),
        Err(EmitError::BufferTooSmall)
    );
    let mut small = [0u8; 45];
    assert_eq!(
        sample(Opcode::ReadRequest, 1).emit_into(&mut small, cfg),
        Err(EmitError::BufferTooSmall)
    );
    let mut buf = [0u8; MAX_HEADER_LEN];
    assert_eq!(
        sample(Opcode::AtomicRequest, 1).emit_into(&mut buf, Config::RFC),
        Err(EmitError::Opcode(Opcode::AtomicRequest))
    );
    let bad = [
        // Write untagged.
        UlpduHeader::untagged(Opcode::Write, true, 1, 0, 0),
        // Send tagged.
        UlpduHeader::tagged(Opcode::Send, true, 1, 0),
        // Send on QN 1.
        UlpduHeader {
            placement: Placement::Untagged {
                qn: 1,
                msn: 1,
                mo: 0,
            },
            ..sample(Opcode::Send, 1)
        },
        // Invalidate STag on a plain Send.
        UlpduHeader::untagged(Opcode::Send, true, 1, 0, 5),
        // Read Request without its header.
        UlpduHeader::untagged(Opcode::ReadRequest, true, 1, 0, 0),
        // Read Request with L=0.
        UlpduHeader {
            last: false,
            ..sample(Opcode::ReadRequest, 1)
        },
        // Immediate Data with MO != 0.
        UlpduHeader {
            placement: Placement::Untagged {
                qn: 0,
                msn: 1,
                mo: 8,
            },
            ..sample(Opcode::ImmediateData, 1)
        },
        // Write carrying a Read Request header.
        UlpduHeader {
            rdmap: sample(Opcode::ReadRequest, 1).rdmap,
            ..sample(Opcode::Write, 1)
        },
    ];
    for h in bad {
        assert_eq!(
            h.emit_into(&mut buf, cfg),
            Err(EmitError::Inconsistent),
            "{h:?}"
        );
    }
    let t = UlpduHeader::header_only(
        Opcode::Terminate,
        1,
        RdmapHeader::Terminate(Terminate::new(TermCause {
            layer: Layer::Rdma,
            etype: 16,
            ecode: 0,
        })),
    );
    assert_eq!(t.emit_into(&mut buf, cfg), Err(EmitError::EtypeRange));
}

#[test]
fn ddp_header_view_of_ulpdu_header() {
    let h = sample(Opcode::SendInvalidate, 9);
    let d = h.ddp_header(rdmap::Version::Rfc);
    assert_eq!(
        d,
        Header::Untagged(ddp::Untagged {
            last: true,
            rsvd_ulp: 0x44,
            rsvd_ulp_ext: 0x0bad_cafe,
            qn: 0,
            msn: 9,
            mo: 0,
        })
    );
    assert_eq!(h.ddp_header_len(), 18);
    assert_eq!(
        EchoedDdpHeader::from_header(&d, Version::Rfc).as_bytes(),
        &emit(&h, Config::RFC)[..18]
    );
}

// ---------------------------------------------------------------------------------------
// Property tests

fn arb_version() -> impl Strategy<Value = Version> {
    prop_oneof![Just(Version::Rfc), Just(Version::Rdmac)]
}

fn arb_ddp_header() -> impl Strategy<Value = Header> {
    prop_oneof![
        (any::<bool>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(
            |(last, rsvd_ulp, stag, to)| Header::Tagged(ddp::Tagged {
                last,
                rsvd_ulp,
                stag,
                to
            })
        ),
        (
            any::<bool>(),
            any::<u8>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(last, rsvd_ulp, rsvd_ulp_ext, qn, msn, mo)| {
                Header::Untagged(ddp::Untagged {
                    last,
                    rsvd_ulp,
                    rsvd_ulp_ext,
                    qn,
                    msn,
                    mo,
                })
            }),
    ]
}

fn arb_cfg() -> impl Strategy<Value = Config> {
    prop_oneof![
        Just(Config::RFC),
        Just(Config::RFC_7306),
        Just(Config::RDMAC)
    ]
}

fn arb_read_request() -> impl Strategy<Value = ReadRequest> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(sink_stag, sink_to, size, src_stag, src_to)| ReadRequest {
            sink_stag,
            sink_to,
            size,
            src_stag,
            src_to,
        })
}

fn arb_cause() -> impl Strategy<Value = TermCause> {
    (
        prop_oneof![Just(Layer::Rdma), Just(Layer::Ddp), Just(Layer::Llp)],
        0u8..16,
        any::<u8>(),
    )
        .prop_map(|(layer, etype, ecode)| TermCause {
            layer,
            etype,
            ecode,
        })
}

fn arb_terminate() -> impl Strategy<Value = Terminate> {
    (
        arb_cause(),
        proptest::option::of(any::<u16>()),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 18)),
        proptest::option::of(arb_read_request()),
    )
        .prop_map(|(cause, seg_len, ddp, rdma_header)| Terminate {
            cause,
            seg_len,
            ddp_header: ddp.and_then(|b| {
                let len = ddp::header_len(b[0]);
                EchoedDdpHeader::from_bytes(&b[..len])
            }),
            rdma_header,
        })
}

fn arb_rdmap_header(op: Opcode) -> BoxedStrategy<RdmapHeader> {
    match op {
        Opcode::ReadRequest => arb_read_request()
            .prop_map(RdmapHeader::ReadRequest)
            .boxed(),
        Opcode::Terminate => arb_terminate().prop_map(RdmapHeader::Terminate).boxed(),
        Opcode::ImmediateData | Opcode::ImmediateDataSe => any::<[u8; 8]>()
            .prop_map(|d| RdmapHeader::Immediate(ImmediateData(d)))
            .boxed(),
        Opcode::AtomicRequest => (
            prop_oneof![Just(AtomicOp::FetchAdd), Just(AtomicOp::CmpSwap)],
            any::<(u32, u32, u64)>(),
            any::<(u64, u64, u64, u64)>(),
        )
            .prop_map(|(op, (req_id, stag, to), (a, am, c, cm))| {
                RdmapHeader::AtomicRequest(AtomicRequest {
                    op,
                    req_id,
                    stag,
                    to,
                    add_swap: a,
                    add_swap_mask: am,
                    compare: c,
                    compare_mask: cm,
                })
            })
            .boxed(),
        Opcode::AtomicResponse => any::<(u32, u64)>()
            .prop_map(|(req_id, orig_value)| {
                RdmapHeader::AtomicResponse(AtomicResponse { req_id, orig_value })
            })
            .boxed(),
        _ => Just(RdmapHeader::None).boxed(),
    }
}

fn arb_ulpdu(cfg: Config) -> impl Strategy<Value = UlpduHeader> {
    let ops: Vec<Opcode> = Opcode::ALL.into_iter().filter(|o| cfg.allows(*o)).collect();
    proptest::sample::select(ops).prop_flat_map(|op| {
        (
            any::<bool>(),
            any::<(u32, u64, u32, u32, u32)>(),
            arb_rdmap_header(op),
        )
            .prop_map(move |(last, (stag, to, msn, mo, inval), rdmap)| {
                let mut h = if op.is_tagged() {
                    UlpduHeader::tagged(op, last, stag, to)
                } else if op.single_segment() {
                    UlpduHeader::header_only(op, msn, rdmap)
                } else {
                    let inval = if op.has_invalidate_stag() { inval } else { 0 };
                    UlpduHeader::untagged(op, last, msn, mo, inval)
                };
                h.rdmap = rdmap;
                h
            })
    })
}

fn arb_cfg_and_ulpdu() -> impl Strategy<Value = (Config, UlpduHeader)> {
    arb_cfg().prop_flat_map(|cfg| (Just(cfg), arb_ulpdu(cfg)))
}

proptest! {
    #[test]
    fn ddp_roundtrip(h in arb_ddp_header(), v in arb_version()) {
        let mut buf = [0u8; 18];
        let n = h.emit_into(&mut buf, v).unwrap();
        prop_assert_eq!(n, h.header_len());
        prop_assert_eq!(Header::parse(&buf[..n], v), Ok(h));
        prop_assert_eq!(Header::parse_any(&buf[..n]), Ok((h, v.dv())));
        prop_assert_eq!(buf[0] & ddp::RSVD_MASK, 0);
    }

    #[test]
    fn ulpdu_roundtrip((cfg, h) in arb_cfg_and_ulpdu()) {
        let b = emit(&h, cfg);
        prop_assert_eq!(UlpduHeader::parse(&b, cfg), Ok((h, b.len())));
        // The first two octets name the header's length (a Terminate's: at least its
        // fixed part), never more than it has.
        let hint = UlpduHeader::header_len_hint(&b[..2], cfg).unwrap();
        if h.opcode == Opcode::Terminate {
            prop_assert!(hint <= b.len());
        } else {
            prop_assert_eq!(hint, b.len());
        }
        // A validated header emits the same octets without the validation.
        let mut unchecked = [0u8; MAX_HEADER_LEN];
        let n = h.emit_validated_into(&mut unchecked, cfg).unwrap();
        prop_assert_eq!(&unchecked[..n], &b[..]);
        // Trailing payload does not change the header.
        let mut more = b.clone();
        more.extend_from_slice(&[0xA5; 9]);
        prop_assert_eq!(UlpduHeader::parse(&more, cfg), Ok((h, b.len())));
        // Every proper prefix asks for more octets, never more than the header.
        for k in 0..b.len() {
            match UlpduHeader::parse(&b[..k], cfg) {
                Err(ParseError::Truncated { need }) => {
                    prop_assert!(need > k && need <= b.len());
                }
                other => prop_assert!(false, "prefix {} gave {:?}", k, other),
            }
        }
    }

    #[test]
    fn ulpdu_parse_never_panics_and_is_canonical(
        b in proptest::collection::vec(any::<u8>(), 0..96),
        cfg in arb_cfg(),
    ) {
        if let Ok((h, n)) = UlpduHeader::parse(&b, cfg) {
            prop_assert!(n <= b.len() && n <= MAX_HEADER_LEN);
            let again = emit(&h, cfg);
            prop_assert_eq!(again.len(), n);
            prop_assert_eq!(UlpduHeader::parse(&again, cfg), Ok((h, n)));
        }
        let _ = Header::parse_any(&b);
        let _ = Terminate::parse(&b);
    }

    #[test]
    fn wrong_version_is_rejected((cfg, h) in arb_cfg_and_ulpdu()) {
        let mut b = emit(&h, cfg);
        let other = if cfg.ddp == Version::Rfc { Config::RDMAC } else { Config::RFC };
        prop_assert_eq!(
            UlpduHeader::parse(&b, other),
            Err(ParseError::DdpVersion { tagged: h.opcode.is_tagged(), dv: cfg.ddp.dv() })
        );
        // Same DV, other RV.
        b[1] ^= 0x40;
        prop_assert!(matches!(
            UlpduHeader::parse(&b, cfg),
            Err(ParseError::RdmapVersion(_))
        ));
    }
}
