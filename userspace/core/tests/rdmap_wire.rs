// SPDX-License-Identifier: GPL-2.0

//! Wire codec tests: RDMAP control field, opcodes and headers (RFC 5040 §4, RFC 7306),
//! RDMAP error codes (RFC 5040 §4.8 Figure 9) and the TERMINATE header (RFC 5040 §4.8).

use proptest::prelude::*;
use rsiw_core::wire::ddp::{self, DdpError, TaggedError, UntaggedError};
use rsiw_core::wire::mpa::MpaErrorCode;
use rsiw_core::wire::rdmap::{
    self, AtomicOp, AtomicRequest, AtomicResponse, Ctrl, CtrlError, ImmediateData, Opcode,
    OperationError, ProtectionError, RdmapError, ReadRequest, Version,
};
use rsiw_core::wire::terminate::{
    self, Cause, EchoedDdpHeader, Layer, TermCause, Terminate, MAX_LEN,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Control field and opcode table

#[test]
fn opcode_table_rfc5040_fig4_rfc7306_fig2() {
    // (opcode, code, tagged, QN, invalidate STag, payload, header length, SE)
    let table = [
        (Opcode::Write, 0x0, true, None, false, true, 0, false),
        (
            Opcode::ReadRequest,
            0x1,
            false,
            Some(1),
            false,
            false,
            28,
            false,
        ),
        (Opcode::ReadResponse, 0x2, true, None, false, true, 0, false),
        (Opcode::Send, 0x3, false, Some(0), false, true, 0, false),
        (
            Opcode::SendInvalidate,
            0x4,
            false,
            Some(0),
            true,
            true,
            0,
            false,
        ),
        (Opcode::SendSe, 0x5, false, Some(0), false, true, 0, true),
        (
            Opcode::SendSeInvalidate,
            0x6,
            false,
            Some(0),
            true,
            true,
            0,
            true,
        ),
        (
            Opcode::Terminate,
            0x7,
            false,
            Some(2),
            false,
            false,
            4,
            false,
        ),
        (
            Opcode::ImmediateData,
            0x8,
            false,
            Some(0),
            false,
            false,
            8,
            false,
        ),
        (
            Opcode::ImmediateDataSe,
            0x9,
            false,
            Some(0),
            false,
            false,
            8,
            true,
        ),
        (
            Opcode::AtomicRequest,
            0xA,
            false,
            Some(1),
            false,
            false,
            52,
            false,
        ),
        (
            Opcode::AtomicResponse,
            0xB,
            false,
            Some(3),
            false,
            false,
            12,
            false,
        ),
    ];
    assert_eq!(table.len(), Opcode::ALL.len());
    for (i, (op, code, tagged, qn, inval, payload, hlen, se)) in table.into_iter().enumerate() {
        assert_eq!(Opcode::ALL[i], op);
        assert_eq!(op.code(), code);
        assert_eq!(Opcode::from_code(code), Some(op));
        assert_eq!(op.is_tagged(), tagged, "{op:?}");
        assert_eq!(op.queue(), qn, "{op:?}");
        assert_eq!(op.has_invalidate_stag(), inval, "{op:?}");
        assert_eq!(op.carries_payload(), payload, "{op:?}");
        assert_eq!(op.single_segment(), !payload, "{op:?}");
        assert_eq!(op.header_len(), hlen, "{op:?}");
        assert_eq!(op.solicited(), se, "{op:?}");
        assert_eq!(op.is_rfc7306(), code >= 8, "{op:?}");
    }
    for code in 0xC..=0xF {
        assert_eq!(Opcode::from_code(code), None);
    }
    assert_eq!(
        (
            rdmap::QN_SEND,
            rdmap::QN_READ_REQUEST,
            rdmap::QN_TERMINATE,
            rdmap::QN_ATOMIC_RESPONSE
        ),
        (0, 1, 2, 3)
    );
}

#[test]
fn ctrl_parse_and_emit() {
    assert_eq!(Version::Rfc.rv(), 1);
    assert_eq!(Version::from_rv(0), Some(Version::Rdmac));
    assert_eq!(Version::from_rv(1), Some(Version::Rfc));
    assert_eq!(Version::from_rv(2), None);
    for op in Opcode::ALL {
        for (v, ext) in [
            (Version::Rfc, true),
            (Version::Rfc, false),
            (Version::Rdmac, true),
        ] {
            let c = Ctrl {
                version: v,
                opcode: op,
            };
            let octet = c.to_octet();
            assert_eq!(octet & rdmap::RSV_MASK, 0);
            assert_eq!(octet >> 6, v.rv());
            let r = Ctrl::parse(octet, v, ext);
            if op.is_rfc7306() && !(ext && v == Version::Rfc) {
                assert_eq!(r, Err(CtrlError::Opcode(op.code())));
            } else {
                assert_eq!(r, Ok(c));
                // Reserved bits ignored.
                assert_eq!(Ctrl::parse(octet | rdmap::RSV_MASK, v, ext), Ok(c));
            }
        }
    }
    assert_eq!(
        Ctrl::parse(0x03, Version::Rfc, false),
        Err(CtrlError::Version(0))
    );
    assert_eq!(
        Ctrl::parse(0xC3, Version::Rfc, false),
        Err(CtrlError::Version(3))
    );
    assert_eq!(
        Ctrl::parse(0x4C, Version::Rfc, true),
        Err(CtrlError::Opcode(0xC))
    );
    assert_eq!(
        CtrlError::Version(0).rdmap_error(),
        RdmapError::RemoteOperation(OperationError::InvalidVersion)
    );
    assert_eq!(
        CtrlError::Opcode(0xF).rdmap_error(),
        RdmapError::RemoteOperation(OperationError::UnexpectedOpcode)
    );
}

// ---------------------------------------------------------------------------------------
// RDMAP headers

#[test]
fn read_request_fields() {
    let b = hex("11223344 0102030405060708 0000ffff 55667788 f0e0d0c0b0a09080");
    let rr = ReadRequest::parse(&b).unwrap();
    assert_eq!(
        rr,
        ReadRequest {
            sink_stag: 0x1122_3344,
            sink_to: 0x0102_0304_0506_0708,
            size: 0xffff,
            src_stag: 0x5566_7788,
            src_to: 0xf0e0_d0c0_b0a0_9080,
        }
    );
    assert_eq!(rr.to_bytes().to_vec(), b);
    for k in 0..28 {
        assert_eq!(
            ReadRequest::parse(&b[..k]),
            Err(rdmap::ParseError::Truncated { need: 28 })
        );
    }
    let mut small = [0u8; 27];
    assert_eq!(
        rr.emit_into(&mut small),
        Err(rdmap::EmitError::BufferTooSmall)
    );
}

#[test]
fn atomic_headers() {
    assert_eq!(AtomicRequest::LEN, 52);
    assert_eq!(AtomicResponse::LEN, 12);
    assert_eq!(ImmediateData::LEN, 8);
    assert_eq!(AtomicOp::from_code(0), Some(AtomicOp::FetchAdd));
    assert_eq!(AtomicOp::from_code(1), None);
    assert_eq!(AtomicOp::from_code(2), Some(AtomicOp::CmpSwap));
    assert_eq!(AtomicOp::CmpSwap.code(), 2);
    let a = AtomicRequest {
        op: AtomicOp::FetchAdd,
        req_id: 0x0102_0304,
        stag: 0x0506_0708,
        to: 0x1111_2222_3333_4448,
        add_swap: 5,
        add_swap_mask: 0,
        compare: 0,
        compare_mask: u64::MAX,
    };
    let b = a.to_bytes();
    assert_eq!(
        b.to_vec(),
        hex(
            "00000000 01020304 05060708 1111222233334448 0000000000000005
             0000000000000000 0000000000000000 ffffffffffffffff"
        )
    );
    assert_eq!(AtomicRequest::parse(&b), Ok(a));
    assert_eq!(
        AtomicRequest::parse(&b[..51]),
        Err(rdmap::ParseError::Truncated { need: 52 })
    );
    let r = AtomicResponse {
        req_id: 9,
        orig_value: 0x8000_0000_0000_0001,
    };
    assert_eq!(r.to_bytes().to_vec(), hex("00000009 8000000000000001"));
    assert_eq!(AtomicResponse::parse(&r.to_bytes()), Ok(r));
    assert_eq!(
        AtomicResponse::parse(&[0; 11]),
        Err(rdmap::ParseError::Truncated { need: 12 })
    );
    assert_eq!(
        ImmediateData::parse(&[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        Ok(ImmediateData([1, 2, 3, 4, 5, 6, 7, 8]))
    );
    assert_eq!(
        ImmediateData::parse(&[0; 7]),
        Err(rdmap::ParseError::Truncated { need: 8 })
    );
    let mut small = [0u8; 7];
    assert_eq!(
        ImmediateData([0; 8]).emit_into(&mut small),
        Err(rdmap::EmitError::BufferTooSmall)
    );
}

#[test]
fn rdmap_error_codes_rfc5040_fig9() {
    let table = [
        (RdmapError::LocalCatastrophic, 0, 0x00),
        (
            RdmapError::RemoteProtection(ProtectionError::InvalidStag),
            1,
            0x00,
        ),
        (
            RdmapError::RemoteProtection(ProtectionError::BaseBounds),
            1,
            0x01,
        ),
        (
            RdmapError::RemoteProtection(ProtectionError::AccessRights),
            1,
            0x02,
        ),
        (
            RdmapError::RemoteProtection(ProtectionError::StagNotAssociated),
            1,
            0x03,
        ),
        (
            RdmapError::RemoteProtection(ProtectionError::ToWrap),
            1,
            0x04,
        ),
        (
            RdmapError::RemoteProtection(ProtectionError::CannotInvalidate),
            1,
            0x09,
        ),
        (
            RdmapError::RemoteProtection(ProtectionError::Unspecified),
            1,
            0xFF,
        ),
        (
            RdmapError::RemoteOperation(OperationError::InvalidVersion),
            2,
            0x05,
        ),
        (
            RdmapError::RemoteOperation(OperationError::UnexpectedOpcode),
            2,
            0x06,
        ),
        (
            RdmapError::RemoteOperation(OperationError::CatastrophicStream),
            2,
            0x07,
        ),
        (
            RdmapError::RemoteOperation(OperationError::CatastrophicGlobal),
            2,
            0x08,
        ),
        (
            RdmapError::RemoteOperation(OperationError::CannotInvalidate),
            2,
            0x09,
        ),
        (
            RdmapError::RemoteOperation(OperationError::Unspecified),
            2,
            0xFF,
        ),
    ];
    for (e, t, c) in table {
        assert_eq!((e.etype(), e.ecode()), (t, c), "{e:?}");
        assert_eq!(RdmapError::from_codes(t, c), Some(e));
        let tc = TermCause::from(e);
        assert_eq!((tc.layer, tc.etype, tc.ecode), (Layer::Rdma, t, c));
        assert_eq!(tc.decode(), Cause::Rdmap(e));
    }
    assert_eq!(rdmap::LAYER, 0);
    // Local catastrophic: any code is acceptable.
    assert_eq!(
        RdmapError::from_codes(0, 0x42),
        Some(RdmapError::LocalCatastrophic)
    );
    assert_eq!(RdmapError::from_codes(1, 0x05), None);
    assert_eq!(RdmapError::from_codes(2, 0x00), None);
    assert_eq!(RdmapError::from_codes(3, 0x00), None);
}

// ---------------------------------------------------------------------------------------
// TERMINATE

#[test]
fn term_cause_helpers() {
    for (e, code) in [
        (MpaErrorCode::TcpClosed, 1),
        (MpaErrorCode::CrcMismatch, 2),
        (MpaErrorCode::MarkerMismatch, 3),
        (MpaErrorCode::InvalidStartup, 4),
        (MpaErrorCode::LocalCatastrophic, 5),
        (MpaErrorCode::InsufficientIrd, 6),
        (MpaErrorCode::NoMatchingRtr, 7),
    ] {
        let c = TermCause::from(e);
        assert_eq!((c.layer, c.etype, c.ecode), (Layer::Llp, 0, code));
        assert_eq!(c.decode(), Cause::Mpa(e));
        assert!(!c.includes_ddp_header());
        assert!(!c.includes_rdma_header(Opcode::ReadRequest));
    }
    let d = TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange));
    assert_eq!(
        d.decode(),
        Cause::Ddp(DdpError::Untagged(UntaggedError::MsnRange))
    );
    assert!(d.includes_ddp_header());
    assert!(!d.includes_rdma_header(Opcode::ReadRequest));
    assert!(!TermCause::ddp(DdpError::LocalCatastrophic).includes_ddp_header());
    let lc = TermCause::rdmap(RdmapError::LocalCatastrophic);
    assert!(!lc.includes_ddp_header());
    let prot = TermCause::rdmap(RdmapError::RemoteProtection(ProtectionError::BaseBounds));
    assert!(prot.includes_ddp_header());
    assert!(prot.includes_rdma_header(Opcode::ReadRequest));
    assert!(!prot.includes_rdma_header(Opcode::SendInvalidate));
    let op = TermCause::rdmap(RdmapError::RemoteOperation(
        OperationError::UnexpectedOpcode,
    ));
    assert!(op.includes_ddp_header());
    assert!(!op.includes_rdma_header(Opcode::ReadRequest));
    for (layer, etype, ecode) in [
        (Layer::Llp, 1, 1),
        (Layer::Llp, 0, 0),
        (Layer::Llp, 0, 8),
        (Layer::Ddp, 3, 0),
        (Layer::Rdma, 4, 0),
    ] {
        let c = TermCause {
            layer,
            etype,
            ecode,
        };
        assert_eq!(c.decode(), Cause::Unknown, "{c:?}");
    }
    assert_eq!(Layer::from_code(3), None);
    assert_eq!(Layer::Llp.code(), 2);
}

#[test]
fn term_cause_protection_errors() {
    // Memory protection: every tagged buffer error but the DDP version, every RDMAP
    // remote protection error (RFC 5041 §7.2, RFC 5040 §7.2).
    for e in [
        TaggedError::InvalidStag,
        TaggedError::BaseBounds,
        TaggedError::StagNotAssociated,
        TaggedError::ToWrap,
    ] {
        assert!(
            TermCause::ddp(DdpError::Tagged(e)).is_protection_error(),
            "{e:?}"
        );
    }
    for e in [
        ProtectionError::InvalidStag,
        ProtectionError::BaseBounds,
        ProtectionError::AccessRights,
        ProtectionError::StagNotAssociated,
        ProtectionError::ToWrap,
        ProtectionError::CannotInvalidate,
        ProtectionError::Unspecified,
    ] {
        let c = TermCause::rdmap(RdmapError::RemoteProtection(e));
        assert!(c.is_protection_error(), "{e:?}");
    }
    // Everything else is fatal, not an access error.
    let others = [
        TermCause::ddp(DdpError::Tagged(TaggedError::InvalidVersion)),
        TermCause::ddp(DdpError::LocalCatastrophic),
        TermCause::ddp(DdpError::Untagged(UntaggedError::NoBuffer)),
        TermCause::ddp(DdpError::Untagged(UntaggedError::TooLong)),
        TermCause::rdmap(RdmapError::LocalCatastrophic),
        TermCause::rdmap(RdmapError::RemoteOperation(OperationError::InvalidVersion)),
        TermCause::rdmap(RdmapError::RemoteOperation(
            OperationError::UnexpectedOpcode,
        )),
        TermCause::mpa(MpaErrorCode::CrcMismatch),
        TermCause::mpa(MpaErrorCode::NoMatchingRtr),
    ];
    for c in others {
        assert!(!c.is_protection_error(), "{c:?}");
    }
}

#[test]
fn terminate_llp_crc_vector() {
    let t = Terminate::new(MpaErrorCode::CrcMismatch.into());
    let mut buf = [0u8; MAX_LEN];
    assert_eq!(t.emit_into(&mut buf), Ok(4));
    assert_eq!(&buf[..4], &hex("20020000")[..]);
    assert_eq!(Terminate::parse(&buf[..4]), Ok((t, 4)));
    // Trailing (e.g. RFC 7306 §8.1 "zeroed") octets are ignored.
    assert_eq!(Terminate::parse(&buf), Ok((t, 4)));
    assert_eq!(MAX_LEN, 52);
}

#[test]
fn terminate_read_request_protection_vector() {
    // Remote protection error (invalid source STag) on a Read Request: M, D, R set and
    // the whole offending ULPDU header echoed (RFC 5040 §7.2).
    let rr_hdr = hex("11223344 0000000000002000 00001000 55667788 00000000deadbeef");
    let ddp_hdr = hex("41 41 00000000 00000001 00000005 00000000");
    let ulpdu = [ddp_hdr.clone(), rr_hdr.clone()].concat();
    let rr = ReadRequest::parse(&rr_hdr).unwrap();
    let cause = TermCause::rdmap(RdmapError::RemoteProtection(ProtectionError::InvalidStag));
    let t = Terminate::for_segment(cause, 46, &ulpdu, Some(rr));
    assert_eq!(t.seg_len, Some(46));
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &ddp_hdr[..]);
    assert_eq!(t.rdma_header, Some(rr));
    let mut buf = [0u8; MAX_LEN];
    let n = t.emit_into(&mut buf).unwrap();
    assert_eq!(n, 52);
    let want = [hex("01 00 e0 00 002e"), ddp_hdr, rr_hdr].concat();
    assert_eq!(&buf[..n], &want[..]);
    assert_eq!(Terminate::parse(&want), Ok((t, 52)));
    let (h, dv) = t.ddp_header.unwrap().header().unwrap();
    assert_eq!(dv, 1);
    assert!(!h.is_tagged());
}

#[test]
fn terminate_for_segment_policy() {
    let write = hex("c1 40 12345678 0000000000001013 aabbcc");
    // DDP error: M and D, no R even if a Read Request is offered.
    let cause = TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag));
    let rr = ReadRequest::parse(&[0; 28]).unwrap();
    let t = Terminate::for_segment(cause, 0x17, &write, Some(rr));
    assert_eq!(t.seg_len, Some(0x17));
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &write[..14]);
    assert_eq!(t.rdma_header, None);
    // Header not available (ULPDU too short): no M, no D.
    let t = Terminate::for_segment(cause, 5, &write[..5], None);
    assert_eq!((t.seg_len, t.ddp_header), (None, None));
    // MPA error: nothing echoed.
    let t = Terminate::for_segment(MpaErrorCode::MarkerMismatch.into(), 0x17, &write, None);
    assert_eq!(t, Terminate::new(MpaErrorCode::MarkerMismatch.into()));
    // A bad-DV header is echoed as received.
    let bad = hex("c3 40 12345678 0000000000001013");
    let t = Terminate::for_segment(TermCause::ddp(DdpError::bad_version(true)), 14, &bad, None);
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &bad[..]);
    assert_eq!(t.ddp_header.unwrap().header().unwrap().1, 3);
}

#[test]
fn terminate_flag_combinations_and_truncation() {
    // D without M: the length field is present but not valid.
    let echoed = hex("41 43 00000000 00000000 00000001 00000000");
    let b = [hex("12 03 40 00 abcd"), echoed.clone()].concat();
    let (t, n) = Terminate::parse(&b).unwrap();
    assert_eq!(n, 24);
    assert_eq!(t.seg_len, None);
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &echoed[..]);
    assert_eq!(
        t.cause,
        TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange))
    );
    let mut buf = [0u8; MAX_LEN];
    assert_eq!(t.emit_into(&mut buf), Ok(24));
    assert_eq!(&buf[4..6], &[0, 0]);
    // M without D.
    let b = hex("10 00 80 1f 0042");
    let (t, n) = Terminate::parse(&b).unwrap();
    assert_eq!((t.seg_len, t.ddp_header, n), (Some(0x42), None, 6));
    // R alone.
    let b = [hex("01 00 20 00"), vec![0x11; 28]].concat();
    let (t, n) = Terminate::parse(&b).unwrap();
    assert_eq!(n, 32);
    assert_eq!(t.rdma_header.unwrap().sink_stag, 0x1111_1111);
    assert_eq!((t.seg_len, t.ddp_header), (None, None));

    // Truncation: every prefix of a full M+D+R header asks for more.
    let full = [hex("01 00 e0 00 002e"), echoed, vec![0; 28]].concat();
    assert_eq!(Terminate::parse(&full).unwrap().1, 52);
    for k in 0..full.len() {
        match Terminate::parse(&full[..k]) {
            Err(terminate::ParseError::Truncated { need }) => {
                assert!(need > k && need <= full.len(), "{k} {need}")
            }
            r => panic!("{k}: {r:?}"),
        }
    }
    // A tagged echoed header is 14 octets.
    let b = [
        hex("10 00 c0 00 0017"),
        hex("c1 40 12345678 0000000000001013"),
    ]
    .concat();
    assert_eq!(Terminate::parse(&b).unwrap().1, 20);
    assert_eq!(
        Terminate::parse(&b[..19]),
        Err(terminate::ParseError::Truncated { need: 20 })
    );
    // Unassigned layer.
    assert_eq!(
        Terminate::parse(&hex("f0 00 00 00")),
        Err(terminate::ParseError::Layer(0xF))
    );
    // Emit errors.
    let t = Terminate::parse(&full).unwrap().0;
    let mut small = [0u8; 51];
    assert_eq!(
        t.emit_into(&mut small),
        Err(terminate::EmitError::BufferTooSmall)
    );
    let bad = Terminate::new(TermCause {
        layer: Layer::Ddp,
        etype: 0x10,
        ecode: 0,
    });
    assert_eq!(
        bad.emit_into(&mut buf),
        Err(terminate::EmitError::EtypeRange)
    );
}

#[test]
fn echoed_header_from_bytes() {
    assert_eq!(EchoedDdpHeader::from_bytes(&[]), None);
    assert_eq!(EchoedDdpHeader::from_bytes(&[0x41; 17]), None);
    assert_eq!(EchoedDdpHeader::from_bytes(&[0xc1; 13]), None);
    assert_eq!(
        EchoedDdpHeader::from_bytes(&[0xc1; 20])
            .unwrap()
            .as_bytes()
            .len(),
        ddp::TAGGED_LEN
    );
    assert_eq!(
        EchoedDdpHeader::from_bytes(&[0x41; 20])
            .unwrap()
            .as_bytes()
            .len(),
        ddp::UNTAGGED_LEN
    );
}

// ---------------------------------------------------------------------------------------
// Property tests

fn arb_read_request() -> impl Strategy<Value = ReadRequest> {
    any::<(u32, u64, u32, u32, u64)>().prop_map(|(sink_stag, sink_to, size, src_stag, src_to)| {
        ReadRequest {
            sink_stag,
            sink_to,
            size,
            src_stag,
            src_to,
        }
    })
}

proptest! {
    #[test]
    fn read_request_roundtrip(rr in arb_read_request()) {
        let mut buf = [0u8; 40];
        prop_assert_eq!(rr.emit_into(&mut buf), Ok(28));
        prop_assert_eq!(ReadRequest::parse(&buf), Ok(rr));
    }

    #[test]
    fn atomic_request_roundtrip(
        op in prop_oneof![Just(AtomicOp::FetchAdd), Just(AtomicOp::CmpSwap)],
        w in any::<(u32, u32, u64)>(),
        d in any::<(u64, u64, u64, u64)>(),
    ) {
        let a = AtomicRequest {
            op,
            req_id: w.0,
            stag: w.1,
            to: w.2,
            add_swap: d.0,
            add_swap_mask: d.1,
            compare: d.2,
            compare_mask: d.3,
        };
        let mut buf = [0u8; 52];
        prop_assert_eq!(a.emit_into(&mut buf), Ok(52));
        prop_assert_eq!(AtomicRequest::parse(&buf), Ok(a));
    }

    #[test]
    fn atomic_response_and_immediate_roundtrip(id in any::<u32>(), v in any::<u64>(), d in any::<[u8; 8]>()) {
        let r = AtomicResponse { req_id: id, orig_value: v };
        let mut buf = [0u8; 12];
        prop_assert_eq!(r.emit_into(&mut buf), Ok(12));
        prop_assert_eq!(AtomicResponse::parse(&buf), Ok(r));
        let i = ImmediateData(d);
        prop_assert_eq!(i.emit_into(&mut buf), Ok(8));
        prop_assert_eq!(ImmediateData::parse(&buf), Ok(i));
    }

    #[test]
    fn ctrl_roundtrip(code in 0u8..12, rfc in any::<bool>(), rsv in 0u8..4) {
        let version = if rfc { Version::Rfc } else { Version::Rdmac };
        let opcode = Opcode::from_code(code).unwrap();
        let c = Ctrl { version, opcode };
        let parsed = Ctrl::parse(c.to_octet() | (rsv << 4), version, true);
        if opcode.is_rfc7306() && !rfc {
            prop_assert_eq!(parsed, Err(CtrlError::Opcode(code)));
        } else {
            prop_assert_eq!(parsed, Ok(c));
        }
    }

    #[test]
    fn terminate_roundtrip(
        layer in 0u8..3,
        etype in 0u8..16,
        ecode in any::<u8>(),
        seg_len in proptest::option::of(any::<u16>()),
        ddp in proptest::option::of(any::<[u8; 18]>()),
        rr in proptest::option::of(arb_read_request()),
    ) {
        let t = Terminate {
            cause: TermCause { layer: Layer::from_code(layer).unwrap(), etype, ecode },
            seg_len,
            ddp_header: ddp.and_then(|b| EchoedDdpHeader::from_bytes(&b)),
            rdma_header: rr,
        };
        let mut buf = [0u8; MAX_LEN + 4];
        let n = t.emit_into(&mut buf).unwrap();
        prop_assert_eq!(n, t.buffer_len());
        prop_assert!(n <= MAX_LEN);
        prop_assert_eq!(Terminate::parse(&buf[..n]), Ok((t, n)));
        prop_assert_eq!(Terminate::parse(&buf), Ok((t, n)));
    }

    #[test]
    fn term_cause_decode_roundtrip(etype in 0u8..16, ecode in any::<u8>()) {
        if let Some(e) = DdpError::from_codes(etype, ecode) {
            prop_assert_eq!(TermCause::ddp(e), TermCause { layer: Layer::Ddp, etype, ecode });
        }
        if let Some(e) = RdmapError::from_codes(etype, ecode) {
            if etype != 0 {
                prop_assert_eq!(TermCause::rdmap(e), TermCause { layer: Layer::Rdma, etype, ecode });
            }
        }
    }
}

/// A TERMINATE cause in words names the layer, type and code with their RFC meanings, the
/// numbers as on the wire.
#[test]
fn terminate_cause_in_words() {
    let c = TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag));
    assert_eq!(
        c.to_string(),
        "layer 1 (DDP), type 1 (tagged buffer error), code 0x00 (invalid STag), RFC 5041 §7.2"
    );
    let c = TermCause::rdmap(RdmapError::RemoteProtection(ProtectionError::AccessRights));
    assert_eq!(
        c.to_string(),
        "layer 0 (RDMAP), type 1 (remote protection error), code 0x02 (access rights \
         violation), RFC 5040 §7"
    );
    let c = TermCause::mpa(MpaErrorCode::CrcMismatch);
    assert_eq!(
        c.to_string(),
        "layer 2 (MPA), type 0 (LLP error), code 0x02 (received CRC does not match the \
         calculated value), RFC 5044 §8, RFC 6581 §8"
    );
    let c = TermCause {
        layer: Layer::Ddp,
        etype: 2,
        ecode: 0x77,
    };
    assert_eq!(
        c.to_string(),
        "layer 1 (DDP), type 2 (unassigned), code 0x77 (unassigned), no RFC assigns it"
    );
}

proptest! {
    /// Every cause a TERMINATE can carry has words, and exactly the assigned ones have a
    /// meaning: the words never claim a meaning the decoder does not know.
    #[test]
    fn terminate_cause_words_match_decode(layer in 0u8..3, etype in 0u8..16, ecode: u8) {
        let c = TermCause {
            layer: Layer::from_code(layer).unwrap(),
            etype,
            ecode,
        };
        let w = c.words();
        prop_assert_eq!(w.code == "unassigned", c.decode() == Cause::Unknown);
        prop_assert_eq!(w.layer, ["RDMAP", "DDP", "MPA"][layer as usize]);
        let head = format!("layer {} ({})", layer, w.layer);
        prop_assert!(c.to_string().starts_with(&head));
    }
}
