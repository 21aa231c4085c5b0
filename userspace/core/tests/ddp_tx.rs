// SPDX-License-Identifier: GPL-2.0

//! The DDP/RDMAP TX FPDU builder (`engine::ddp_tx`): segmentation, header fields, MSN/MO/TO
//! progression, MULPDU bounds, errors, and a round trip through an independent deframer
//! (`common/fpdu_util.rs`) and the wire parsers.

#[path = "common/mpa_util.rs"]
mod mpa_util;

#[path = "common/fpdu_util.rs"]
mod fpdu_util;

use fpdu_util::{deframe, RawFpdu};
use mpa_util::{Ev, MockRx, SliceRx, VecTx};
use proptest::prelude::*;
use rsiw_core::engine::ddp_tx::*;
use rsiw_core::engine::mpa_rx::{MpaRx, RxConfig};
use rsiw_core::engine::mpa_tx::{MpaTx, TxConfig};
use rsiw_core::engine::stream::TxSink;
use rsiw_core::wire::ddp::{self, DdpError, TaggedError};
use rsiw_core::wire::fpdu::{mulpdu, MULPDU_MAX};
use rsiw_core::wire::marker::FpduPtrBase;
use rsiw_core::wire::rdmap::*;
use rsiw_core::wire::terminate::{EchoedDdpHeader, TermCause, Terminate};
use rsiw_core::wire::ulpdu::{Config, EmitError, Placement, RdmapHeader, UlpduHeader};

const CFG: Config = Config::RFC_7306;

fn tx_cfg(markers: bool, crc: bool, mulpdu: u16) -> TxConfig {
    TxConfig {
        markers,
        crc,
        fpduptr: FpduPtrBase::UlpduLength,
        mulpdu,
    }
}

fn builder(markers: bool, crc: bool, mulpdu: u16) -> DdpTx {
    DdpTx::new(MpaTx::new(tx_cfg(markers, crc, mulpdu)), CFG)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends `msg` whole; returns the FPDU infos. `sink` supplies the payload.
fn send_all(tx: &mut DdpTx, sink: &mut VecTx, msg: Message) -> Vec<FpduInfo> {
    tx.start(msg).unwrap();
    let mut infos = Vec::new();
    while !tx.is_done() {
        let want = tx.next_fpdu_len().unwrap();
        let before = sink.out.len();
        let info = tx.next_fpdu(sink).unwrap();
        assert_eq!(info.wire_len, want, "next_fpdu_len predicts the FPDU");
        assert_eq!(sink.out.len() - before, info.wire_len);
        infos.push(info);
    }
    infos
}

fn read_req(size: u32) -> ReadRequest {
    ReadRequest {
        sink_stag: 0x1111_2222,
        sink_to: 0x1000,
        size,
        src_stag: 0x3333_4444,
        src_to: 0x8000_0000_0000_0000,
    }
}

fn atomic_req() -> AtomicRequest {
    AtomicRequest {
        op: AtomicOp::FetchAdd,
        req_id: 7,
        stag: 0xABCD_0001,
        to: 0x2000,
        add_swap: 5,
        add_swap_mask: 0,
        compare: 0,
        compare_mask: 0,
    }
}

fn term() -> Terminate {
    let h = ddp::Header::Tagged(ddp::Tagged {
        last: true,
        rsvd_ulp: 0x40,
        stag: 0xDEAD_BEEF,
        to: 0x10,
    });
    Terminate {
        cause: TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag)),
        seg_len: Some(40),
        ddp_header: Some(EchoedDdpHeader::from_header(&h, ddp::Version::Rfc)),
        rdma_header: None,
    }
}

/// Every message kind, its expected opcode, QN and payload.
fn all_kinds() -> Vec<(Message, Opcode)> {
    vec![
        (
            Message::Send {
                solicited: false,
                invalidate: None,
                len: 40,
            },
            Opcode::Send,
        ),
        (
            Message::Send {
                solicited: true,
                invalidate: None,
                len: 41,
            },
            Opcode::SendSe,
        ),
        (
            Message::Send {
                solicited: false,
                invalidate: Some(0x0102_0304),
                len: 42,
            },
            Opcode::SendInvalidate,
        ),
        (
            Message::Send {
                solicited: true,
                invalidate: Some(0x0506_0708),
                len: 43,
            },
            Opcode::SendSeInvalidate,
        ),
        (
            Message::Write {
                stag: 0x1234_5678,
                to: 0x1000,
                len: 33,
            },
            Opcode::Write,
        ),
        (Message::ReadRequest(read_req(4096)), Opcode::ReadRequest),
        (
            Message::ReadResponse {
                stag: 0x1111_2222,
                to: 0x1000,
                len: 17,
            },
            Opcode::ReadResponse,
        ),
        (Message::Terminate(term()), Opcode::Terminate),
        (
            Message::ImmediateData {
                solicited: false,
                data: ImmediateData(*b"imm-data"),
            },
            Opcode::ImmediateData,
        ),
        (
            Message::ImmediateData {
                solicited: true,
                data: ImmediateData(*b"IMM-DATA"),
            },
            Opcode::ImmediateDataSe,
        ),
        (Message::AtomicRequest(atomic_req()), Opcode::AtomicRequest),
        (
            Message::AtomicResponse(AtomicResponse {
                req_id: 7,
                orig_value: 0x0102_0304_0506_0708,
            }),
            Opcode::AtomicResponse,
        ),
    ]
}

#[test]
fn every_kind_one_segment_header_fields() {
    for crc in [false, true] {
        for markers in [false, true] {
            let mut tx = builder(markers, crc, 1454);
            let mut sink = VecTx::with_payload(&pattern(300, 9));
            let mut expect = Vec::new();
            for (msg, op) in all_kinds() {
                assert_eq!(msg.opcode(), op);
                let infos = send_all(&mut tx, &mut sink, msg);
                assert_eq!(infos.len(), 1, "{op:?} fits one segment");
                assert!(infos[0].last);
                assert_eq!(infos[0].payload_len, msg.payload_len());
                expect.push((msg, op));
            }
            let fpdus = deframe(&sink.out, 0, markers, crc, FpduPtrBase::UlpduLength);
            assert_eq!(fpdus.len(), expect.len());
            let mut payload_at = 0;
            let mut msn = [1u32; 4];
            for (f, (msg, op)) in fpdus.iter().zip(&expect) {
                let (h, payload) = f.parse(CFG);
                assert_eq!(h.opcode, *op);
                assert!(h.last);
                let plen = msg.payload_len() as usize;
                assert_eq!(payload, &sink.payload[payload_at..payload_at + plen]);
                payload_at += plen;
                match (h.placement, msg) {
                    (Placement::Tagged { stag, to }, Message::Write { stag: s, to: t, .. })
                    | (
                        Placement::Tagged { stag, to },
                        Message::ReadResponse { stag: s, to: t, .. },
                    ) => assert_eq!((stag, to), (*s, *t)),
                    (Placement::Untagged { qn, msn: m, mo }, _) => {
                        assert_eq!(Some(qn), op.queue());
                        assert_eq!(m, msn[qn as usize], "{op:?} MSN");
                        msn[qn as usize] += 1;
                        assert_eq!(mo, 0);
                    }
                    other => panic!("unexpected placement {other:?}"),
                }
                match msg {
                    Message::Send { invalidate, .. } => {
                        assert_eq!(h.inval_stag, invalidate.unwrap_or(0));
                        assert_eq!(h.rdmap, RdmapHeader::None);
                    }
                    Message::ReadRequest(r) => assert_eq!(h.rdmap, RdmapHeader::ReadRequest(*r)),
                    Message::Terminate(t) => assert_eq!(h.rdmap, RdmapHeader::Terminate(*t)),
                    Message::ImmediateData { data, .. } => {
                        assert_eq!(h.rdmap, RdmapHeader::Immediate(*data))
                    }
                    Message::AtomicRequest(a) => {
                        assert_eq!(h.rdmap, RdmapHeader::AtomicRequest(*a))
                    }
                    Message::AtomicResponse(a) => {
                        assert_eq!(h.rdmap, RdmapHeader::AtomicResponse(*a))
                    }
                    Message::Write { .. } | Message::ReadResponse { .. } => {
                        assert_eq!(h.rdmap, RdmapHeader::None)
                    }
                }
            }
            // QN 1 is shared by Read and Atomic Requests (RFC 7306 §5.2.1).
            assert_eq!(msn, [7, 3, 2, 2]);
            assert_eq!(tx.next_msn(0), Some(7));
            assert_eq!(tx.next_msn(1), Some(3));
            assert_eq!(tx.next_msn(2), Some(2));
            assert_eq!(tx.next_msn(3), Some(2));
            assert_eq!(tx.next_msn(4), None);
            assert_eq!(tx.fpdus(), 12);
            assert_eq!(tx.octets(), sink.out.len() as u64);
        }
    }
}

#[test]
fn header_bytes_match_the_rfc_layout() {
    // A Write of a 33-octet ULPDU, STag 0x12345678, TO 0x1000.
    let mut tx = builder(false, true, 1454);
    let mut sink = VecTx::with_payload(&[0xAB; 19]);
    send_all(
        &mut tx,
        &mut sink,
        Message::Write {
            stag: 0x1234_5678,
            to: 0x1000,
            len: 19,
        },
    );
    assert_eq!(
        &sink.out[..16],
        &[0, 33, 0xC1, 0x40, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0x10, 0]
    );
    assert_eq!(sink.out.len(), 2 + 33 + 1 + 4);
    // A Send on QN 0, MSN 1, MO 0, L=1: control octets 0x41 0x43 (RFC 5044 Fig 5).
    let mut tx = builder(false, true, 1454);
    let mut sink = VecTx::with_payload(&[0; 24]);
    send_all(
        &mut tx,
        &mut sink,
        Message::Send {
            solicited: false,
            invalidate: None,
            len: 24,
        },
    );
    assert_eq!(
        &sink.out[..20],
        &[0, 42, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    );
}

fn segments(len: u32, header: u32, mulpdu: u32) -> usize {
    (len.div_ceil(mulpdu - header)).max(1) as usize
}

#[test]
fn segment_counts_mo_and_to_progression() {
    for markers in [false, true] {
        for emss in [140u32, 536, 1460, 9000] {
            let m = mulpdu(emss, markers);
            for len in [1u32, 100, 1000, 1436, 1437, 5000, 20000] {
                let mut tx = builder(markers, true, m);
                let mut sink = VecTx::with_payload(&pattern(len as usize * 4, 1));
                let send = Message::Send {
                    solicited: false,
                    invalidate: None,
                    len,
                };
                let write = Message::Write {
                    stag: 7,
                    to: 0xFFFF_FFFF_0000,
                    len,
                };
                let rresp = Message::ReadResponse {
                    stag: 9,
                    to: 3,
                    len,
                };
                let i1 = send_all(&mut tx, &mut sink, send);
                let i2 = send_all(&mut tx, &mut sink, write);
                let i3 = send_all(&mut tx, &mut sink, rresp);
                let i4 = send_all(&mut tx, &mut sink, send);
                assert_eq!(i1.len(), segments(len, 18, u32::from(m)));
                assert_eq!(i2.len(), segments(len, 14, u32::from(m)));
                assert_eq!(i3.len(), i2.len());
                assert_eq!(i4.len(), i1.len());
                for i in [&i1, &i2, &i3, &i4] {
                    for (k, f) in i.iter().enumerate() {
                        assert_eq!(f.last, k + 1 == i.len());
                        assert!(f.ulpdu_len <= m);
                        assert!(f.wire_len <= emss as usize, "FPDU fits the EMSS");
                        if k + 1 < i.len() {
                            assert_eq!(f.ulpdu_len, m, "non-last segments are full");
                        }
                    }
                }
                let fpdus = deframe(&sink.out, 0, markers, true, FpduPtrBase::UlpduLength);
                let mut it = fpdus.iter();
                let mut payload = Vec::new();
                for (n, msn) in [(i1.len(), 1), (i2.len(), 0), (i3.len(), 0), (i4.len(), 2)] {
                    let mut off = 0u64;
                    for k in 0..n {
                        let (h, p) = it.next().unwrap().parse(CFG);
                        assert_eq!(h.last, k + 1 == n);
                        match h.placement {
                            Placement::Untagged { qn, msn: m, mo } => {
                                assert_eq!((qn, m, u64::from(mo)), (0, msn, off));
                            }
                            Placement::Tagged { stag, to } => {
                                let base = if stag == 7 { 0xFFFF_FFFF_0000 } else { 3 };
                                assert_eq!(to, base + off);
                            }
                        }
                        off += p.len() as u64;
                        payload.extend_from_slice(p);
                    }
                    assert_eq!(off, u64::from(len));
                }
                assert!(it.next().is_none());
                assert_eq!(payload, &sink.payload[..payload.len()]);
            }
        }
    }
}

#[test]
fn zero_length_messages_are_one_empty_segment() {
    let mut tx = builder(true, true, 1442);
    let mut sink = VecTx::default();
    for msg in [
        Message::Send {
            solicited: false,
            invalidate: None,
            len: 0,
        },
        Message::Send {
            solicited: true,
            invalidate: Some(5),
            len: 0,
        },
        Message::Write {
            stag: 0,
            to: u64::MAX,
            len: 0,
        },
        Message::ReadResponse {
            stag: 0,
            to: 0,
            len: 0,
        },
        Message::ReadRequest(ReadRequest {
            size: 0,
            ..read_req(0)
        }),
    ] {
        let i = send_all(&mut tx, &mut sink, msg);
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].payload_len, 0);
        assert!(i[0].last);
    }
    assert!(sink.payload_calls.is_empty());
    let fpdus = deframe(&sink.out, 0, true, true, FpduPtrBase::UlpduLength);
    let lens: Vec<usize> = fpdus.iter().map(|f| f.ulpdu.len()).collect();
    assert_eq!(lens, [18, 18, 14, 14, 46]);
    for f in &fpdus {
        let (h, p) = f.parse(CFG);
        assert!(h.last && p.is_empty());
    }
    // The zero-length Write at TO 2^64-1: no range, no wrap.
    assert_eq!(
        fpdus[2].parse(CFG).0.placement,
        Placement::Tagged {
            stag: 0,
            to: u64::MAX
        }
    );
}

#[test]
fn to_overflow_is_refused_not_wrapped() {
    let mut tx = builder(false, true, 1454);
    let w = |to, len| Message::Write { stag: 1, to, len };
    assert_eq!(
        tx.start(w(u64::MAX - 10, 11)),
        Err(StartError::ToWrap {
            to: u64::MAX - 10,
            len: 11
        })
    );
    assert_eq!(
        tx.start(Message::ReadResponse {
            stag: 1,
            to: u64::MAX,
            len: 1
        }),
        Err(StartError::ToWrap {
            to: u64::MAX,
            len: 1
        })
    );
    let rr = ReadRequest {
        src_to: u64::MAX - 4095,
        ..read_req(4096)
    };
    assert_eq!(
        tx.start(Message::ReadRequest(rr)),
        Err(StartError::ToWrap {
            to: u64::MAX - 4095,
            len: 4096
        })
    );
    let rr = ReadRequest {
        sink_to: u64::MAX,
        ..read_req(1)
    };
    assert!(matches!(
        tx.start(Message::ReadRequest(rr)),
        Err(StartError::ToWrap { .. })
    ));
    // Refusal consumed nothing: the next Read Request still gets MSN 1.
    assert!(tx.is_done());
    assert_eq!(tx.next_msn(1), Some(1));
    // The largest range that fits: the last segment ends at 2^64 - 1.
    let len = 3000;
    let mut sink = VecTx::with_payload(&pattern(len as usize, 3));
    let i = send_all(&mut tx, &mut sink, w(u64::MAX - u64::from(len), len));
    assert_eq!(i.len(), 3);
    let f = deframe(&sink.out, 0, false, true, FpduPtrBase::UlpduLength);
    let (h, p) = f[2].parse(CFG);
    match h.placement {
        Placement::Tagged { to, .. } => assert_eq!(to + p.len() as u64, u64::MAX),
        _ => panic!(),
    }
}

#[test]
fn msn_counters_start_at_one_and_wrap() {
    let mut tx = builder(false, false, 1454);
    let mut sink = VecTx::with_payload(&[0; 10]);
    assert!(tx.set_next_msn(0, u32::MAX));
    assert!(!tx.set_next_msn(4, 1));
    let send = Message::Send {
        solicited: false,
        invalidate: None,
        len: 1,
    };
    let s1 = tx.start(send).unwrap();
    assert_eq!(s1.queue, Some((0, u32::MAX)));
    send_all_started(&mut tx, &mut sink);
    let s2 = tx.start(send).unwrap();
    assert_eq!(s2.queue, Some((0, 0)));
    send_all_started(&mut tx, &mut sink);
    let s3 = tx.start(send).unwrap();
    assert_eq!(s3.queue, Some((0, 1)));
    send_all_started(&mut tx, &mut sink);
    // Tagged messages take no MSN.
    let s = tx
        .start(Message::Write {
            stag: 1,
            to: 0,
            len: 0,
        })
        .unwrap();
    assert_eq!(s.queue, None);
    assert_eq!(s.opcode, Opcode::Write);
    send_all_started(&mut tx, &mut sink);
    let t = tx.start(Message::Terminate(term())).unwrap();
    assert_eq!(t.queue, Some((2, 1)));
    let msns: Vec<u32> = deframe(&sink.out, 0, false, false, FpduPtrBase::UlpduLength)
        .iter()
        .filter_map(|f| match f.parse(CFG).0.placement {
            Placement::Untagged { msn, .. } => Some(msn),
            _ => None,
        })
        .collect();
    assert_eq!(msns, [u32::MAX, 0, 1]);
}

fn send_all_started(tx: &mut DdpTx, sink: &mut VecTx) {
    while !tx.is_done() {
        tx.next_fpdu(sink).unwrap();
    }
}

#[test]
fn api_errors() {
    let mut tx = builder(false, true, 1454);
    let mut sink = VecTx::with_payload(&[0; 4000]);
    assert_eq!(tx.next_fpdu(&mut sink), Err(NextError::Idle));
    assert_eq!(tx.next_fpdu_len(), Err(NextError::Idle));
    assert_eq!(tx.remaining(), 0);
    let big = Message::Send {
        solicited: false,
        invalidate: None,
        len: 4000,
    };
    tx.start(big).unwrap();
    assert_eq!(tx.start(big), Err(StartError::Busy));
    tx.next_fpdu(&mut sink).unwrap();
    assert_eq!(tx.remaining(), 4000 - 1436);
    tx.abort();
    assert!(tx.is_done());
    assert_eq!(tx.next_msn(0), Some(2), "an aborted message keeps its MSN");
    // Without RFC 7306, its opcodes are refused; RDMAC connections never have them.
    for cfg in [Config::RFC, Config::RDMAC, Config::for_mpa_rev(0, true)] {
        let mut tx = DdpTx::new(MpaTx::new(tx_cfg(false, true, 1454)), cfg);
        for (msg, op) in all_kinds() {
            let r = tx.start(msg);
            if op.is_rfc7306() {
                assert_eq!(r, Err(StartError::Opcode(op)));
            } else {
                assert!(r.is_ok(), "{op:?}");
                tx.abort();
            }
        }
    }
    // Atomic Request TO must be 8-aligned (RFC 7306 §5.2.1).
    let mut tx = builder(false, true, 1454);
    let a = AtomicRequest {
        to: 0x2004,
        ..atomic_req()
    };
    assert_eq!(
        tx.start(Message::AtomicRequest(a)),
        Err(StartError::Misaligned { to: 0x2004 })
    );
    // A Terminate whose EType does not fit 4 bits.
    let mut t = Terminate::new(TermCause::ddp(DdpError::LocalCatastrophic));
    t.cause.etype = 0x10;
    assert_eq!(
        tx.start(Message::Terminate(t)),
        Err(StartError::Header(EmitError::EtypeRange))
    );
    assert_eq!(tx.next_msn(1), Some(1));
    assert_eq!(tx.next_msn(2), Some(1));
}

#[test]
fn mulpdu_too_small_and_changes_mid_message() {
    let mut tx = builder(false, true, 16);
    let mut sink = VecTx::with_payload(&pattern(3000, 0));
    let send = |len| Message::Send {
        solicited: false,
        invalidate: None,
        len,
    };
    tx.start(send(5)).unwrap();
    let e = NextError::MulpduTooSmall {
        header: 18,
        mulpdu: 16,
    };
    assert_eq!(tx.next_fpdu_len(), Err(e));
    assert_eq!(tx.next_fpdu(&mut sink), Err(e));
    tx.mpa_mut().set_mulpdu(18);
    assert_eq!(
        tx.next_fpdu(&mut sink),
        Err(NextError::MulpduTooSmall {
            header: 18,
            mulpdu: 18
        })
    );
    assert!(sink.out.is_empty(), "errors write nothing");
    tx.abort();
    // A zero-length Send fits exactly.
    send_all(&mut tx, &mut sink, send(0));
    // MULPDU changes take effect at the next segment.
    tx.mpa_mut().set_mulpdu(1018);
    tx.start(send(3000)).unwrap();
    assert_eq!(tx.next_fpdu(&mut sink).unwrap().payload_len, 1000);
    tx.mpa_mut().set_mulpdu(518);
    assert_eq!(tx.next_fpdu(&mut sink).unwrap().payload_len, 500);
    tx.mpa_mut().set_mulpdu(u16::MAX);
    let f = tx.next_fpdu(&mut sink).unwrap();
    assert_eq!((f.payload_len, f.last), (1500, true));
    let fpdus = deframe(&sink.out, 0, false, true, FpduPtrBase::UlpduLength);
    let mos: Vec<u32> = fpdus[1..]
        .iter()
        .map(|f| match f.parse(CFG).0.placement {
            Placement::Untagged { mo, .. } => mo,
            _ => panic!(),
        })
        .collect();
    assert_eq!(mos, [0, 1000, 1500]);
}

#[test]
fn rdmac_connection_uses_version_zero_and_seed_fpduptr() {
    let cfg = TxConfig {
        fpduptr: FpduPtrBase::FpduStart,
        ..tx_cfg(true, true, mulpdu(1460, true))
    };
    let mut tx = DdpTx::new(MpaTx::new(cfg), Config::for_mpa_rev(0, false));
    let mut sink = VecTx::with_payload(&pattern(3000, 5));
    send_all(
        &mut tx,
        &mut sink,
        Message::Write {
            stag: 2,
            to: 0,
            len: 3000,
        },
    );
    let fpdus = deframe(&sink.out, 0, true, true, FpduPtrBase::FpduStart);
    assert_eq!(fpdus.len(), 3);
    assert_eq!(fpdus[0].markers, [0, 512, 1024]);
    for f in &fpdus {
        assert_eq!(f.ulpdu[0] & ddp::DV_MASK, 0, "DV 0");
        assert_eq!(f.ulpdu[1] & RV_MASK, 0, "RV 0");
        f.parse(Config::RDMAC);
    }
}

#[test]
fn for_connection_follows_the_negotiation() {
    use rsiw_core::engine::startup::{self, Mode, Startup, Status};
    let cfg = startup::Config {
        mode: Mode::Basic,
        crc: true,
        markers: true,
        large_fpdu: false,
        permissive_rev0: false,
    };
    let mut i = Startup::initiator(cfg, b"").unwrap();
    let mut r = Startup::responder(cfg).unwrap();
    let req = i.tx_pending().to_vec();
    i.tx_advance(req.len());
    r.feed(&req).unwrap();
    r.accept(b"").unwrap();
    let rep = r.tx_pending().to_vec();
    r.tx_advance(rep.len());
    i.feed(&rep).unwrap();
    assert_eq!(i.status(), Status::Established);
    let n = i.negotiated().unwrap();
    let tx = DdpTx::for_connection(n, 1460, true);
    assert_eq!(tx.mpa().config().mulpdu, 1442);
    assert!(tx.mpa().config().markers && tx.mpa().config().crc);
    assert_eq!(*tx.config(), Config::RFC_7306);
}

/// Counts octets without copying: for the MULPDU sweep.
#[derive(Default)]
struct CountTx(usize);

impl TxSink for CountTx {
    fn bytes(&mut self, data: &[u8], _crc: Option<&mut u32>) {
        self.0 += data.len();
    }
    fn payload(&mut self, len: usize, _crc: Option<&mut u32>) {
        self.0 += len;
    }
}

/// RFC 5044 §4.5: for every EMSS 140..=65535, with markers on and off and at
/// several marker phases, every FPDU carries at most MULPDU octets of ULPDU and occupies at
/// most EMSS octets on the wire.
#[test]
fn mulpdu_bound_for_every_emss() {
    for markers in [false, true] {
        let phases: &[u32] = if markers { &[0, 4, 256, 508] } else { &[0] };
        for emss in 140u32..=65535 {
            let m = mulpdu(emss, markers);
            assert!((128..=MULPDU_MAX).contains(&m));
            for &phase in phases {
                let mpa = MpaTx::at_stream_offset(tx_cfg(markers, false, m), phase).unwrap();
                let mut tx = DdpTx::new(mpa, CFG);
                // Two full segments and a short one.
                let len = 2 * (u32::from(m) - 14) + 1;
                tx.start(Message::Write {
                    stag: 1,
                    to: 0,
                    len,
                })
                .unwrap();
                let mut n = 0;
                while !tx.is_done() {
                    let mut c = CountTx::default();
                    let want = tx.next_fpdu_len().unwrap();
                    let f = tx.next_fpdu(&mut c).unwrap();
                    assert!(f.ulpdu_len <= m, "EMSS {emss}: ULPDU {} > {m}", f.ulpdu_len);
                    assert!(
                        f.wire_len <= emss as usize,
                        "EMSS {emss} markers {markers} phase {phase}: FPDU {}",
                        f.wire_len
                    );
                    assert_eq!((c.0, want), (f.wire_len, f.wire_len));
                    n += 1;
                }
                assert_eq!(n, 3);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Send(bool, Option<u32>),
    Write(u32, u64),
    ReadResponse(u32, u64),
    ReadRequest,
    Immediate(bool),
    AtomicRequest,
    AtomicResponse,
    Terminate,
}

fn arb_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        (any::<bool>(), proptest::option::of(any::<u32>())).prop_map(|(s, i)| Kind::Send(s, i)),
        (any::<u32>(), any::<u64>()).prop_map(|(s, t)| Kind::Write(s, t >> 1)),
        (any::<u32>(), any::<u64>()).prop_map(|(s, t)| Kind::ReadResponse(s, t >> 1)),
        Just(Kind::ReadRequest),
        any::<bool>().prop_map(Kind::Immediate),
        Just(Kind::AtomicRequest),
        Just(Kind::AtomicResponse),
        Just(Kind::Terminate),
    ]
}

fn to_msg(k: &Kind, len: u32) -> Message {
    match *k {
        Kind::Send(solicited, invalidate) => Message::Send {
            solicited,
            invalidate,
            len,
        },
        Kind::Write(stag, to) => Message::Write { stag, to, len },
        Kind::ReadResponse(stag, to) => Message::ReadResponse { stag, to, len },
        Kind::ReadRequest => Message::ReadRequest(read_req(len)),
        Kind::Immediate(solicited) => Message::ImmediateData {
            solicited,
            data: ImmediateData(len.to_be_bytes().repeat(2).try_into().unwrap()),
        },
        Kind::AtomicRequest => Message::AtomicRequest(atomic_req()),
        Kind::AtomicResponse => Message::AtomicResponse(AtomicResponse {
            req_id: len,
            orig_value: u64::from(len),
        }),
        Kind::Terminate => Message::Terminate(term()),
    }
}

/// Reassembles what the deframer found into messages: (header of the first segment,
/// payload) and checks every per-segment invariant on the way.
fn reassemble(fpdus: &[RawFpdu], mulpdu: u16) -> Vec<(UlpduHeader, Vec<u8>)> {
    let mut out: Vec<(UlpduHeader, Vec<u8>)> = Vec::new();
    let mut open = false;
    for f in fpdus {
        assert!(f.ulpdu.len() <= usize::from(mulpdu));
        let (h, p) = f.parse(CFG);
        if open {
            let (first, data) = out.last_mut().unwrap();
            assert_eq!(h.opcode, first.opcode);
            assert_eq!(h.inval_stag, first.inval_stag);
            match (h.placement, first.placement) {
                (Placement::Tagged { stag, to }, Placement::Tagged { stag: s0, to: t0 }) => {
                    assert_eq!(stag, s0);
                    assert_eq!(to, t0 + data.len() as u64);
                }
                (
                    Placement::Untagged { qn, msn, mo },
                    Placement::Untagged {
                        qn: q0, msn: m0, ..
                    },
                ) => {
                    assert_eq!((qn, msn, mo as usize), (q0, m0, data.len()));
                }
                _ => panic!("placement model changed inside a message"),
            }
            data.extend_from_slice(p);
        } else {
            if let Placement::Untagged { mo, .. } = h.placement {
                assert_eq!(mo, 0);
            }
            out.push((h, p.to_vec()));
        }
        open = !h.last;
    }
    assert!(!open, "the last message is complete");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Round trip: any sequence of messages, any EMSS, markers, CRC and starting stream
    /// position decodes back (independent deframer, `wire::fpdu`, `wire::ulpdu`, CRC32c
    /// from the `crc32c` crate) into the same messages, MSNs and payload; the engine's RX
    /// deframer (`engine::mpa_rx`) agrees.
    #[test]
    fn round_trip(
        msgs in proptest::collection::vec((arb_kind(), 0u32..5000), 1..8),
        emss in 140u32..4000,
        markers in any::<bool>(),
        crc in any::<bool>(),
        pos0 in (0u32..1024).prop_map(|p| p * 4),
    ) {
        let m = mulpdu(emss, markers);
        let mpa = MpaTx::at_stream_offset(tx_cfg(markers, crc, m), pos0).unwrap();
        let mut tx = DdpTx::new(mpa, CFG);
        let total: u32 = msgs.iter().map(|(_, l)| l).sum();
        let mut sink = VecTx::with_payload(&pattern(total as usize, 77));
        let mut sent = Vec::new();
        for (k, len) in &msgs {
            let msg = to_msg(k, *len);
            let started = tx.start(msg).unwrap();
            // Stop and resume between FPDUs at random: state lives in the builder.
            while !tx.is_done() {
                let want = tx.next_fpdu_len().unwrap();
                let f = tx.next_fpdu(&mut sink).unwrap();
                prop_assert_eq!(f.wire_len, want);
                prop_assert!(f.wire_len <= emss as usize);
            }
            sent.push((msg, started));
        }
        let payload_total: usize = sent.iter().map(|(m, _)| m.payload_len() as usize).sum();
        prop_assert_eq!(sink.payload_pos, payload_total);
        let fpdus = deframe(&sink.out, pos0, markers, crc, FpduPtrBase::UlpduLength);
        // Differential: the engine's own RX deframer sees the same ULPDUs, all with good CRCs.
        let rx_cfg = RxConfig { markers, crc, fpduptr: FpduPtrBase::UlpduLength };
        let mut rx = MpaRx::at_stream_offset(rx_cfg, pos0).unwrap();
        let mut mock = MockRx::default();
        rx.process(&mut SliceRx::new(&sink.out), &mut mock).unwrap();
        prop_assert!(!mock.events.contains(&Ev::End(false)));
        let ulpdus: Vec<Vec<u8>> = fpdus.iter().map(|f| f.ulpdu.clone()).collect();
        prop_assert_eq!(mock.ulpdus(), ulpdus);
        let got = reassemble(&fpdus, m);
        prop_assert_eq!(got.len(), sent.len());
        let mut at = 0;
        for ((h, data), (msg, started)) in got.iter().zip(&sent) {
            prop_assert_eq!(h.opcode, started.opcode);
            if let (Placement::Untagged { qn, msn, .. }, Some(q)) = (h.placement, started.queue) {
                prop_assert_eq!((qn, msn), q);
            }
            let plen = msg.payload_len() as usize;
            prop_assert_eq!(&data[..], &sink.payload[at..at + plen]);
            at += plen;
        }
    }
}

/// The TERMINATE an Initiator sends instead of its RTR when the Reply names no RTR type it
/// offered (RFC 6581 §9.2, §9.3): LLP / 0 / 7 without headers on QN 2 MSN 1, framed as
/// the Reply negotiated: with the leading marker when the Responder asked for markers
/// (M in the Reply) and the CRC when either side asked for it (C).
#[test]
fn startup_terminate_is_the_first_fpdu_with_the_negotiated_framing() {
    use rsiw_core::engine::startup::{Config, EnhancedConfig, Mode, Startup};
    use rsiw_core::wire::mpa::{Enhanced, MpaErrorCode, RtrSet, FLAG_C, FLAG_M, FLAG_S, KEY_REP};

    let write_only = RtrSet {
        send: false,
        write: true,
        read: false,
    };
    let read_only = RtrSet {
        send: false,
        write: false,
        read: true,
    };
    for flags in [0, FLAG_C, FLAG_M, FLAG_M | FLAG_C] {
        let cfg = Config {
            mode: Mode::Enhanced(EnhancedConfig {
                ird: 1,
                ord: 1,
                p2p: true,
                rtr: write_only,
            }),
            crc: false,
            markers: false,
            large_fpdu: false,
            permissive_rev0: false,
        };
        let mut i = Startup::initiator(cfg, b"").unwrap();
        let pd = Enhanced {
            p2p: true,
            rtr: read_only,
            ird: 1,
            ord: 1,
        }
        .to_bytes();
        let mut rep = KEY_REP.to_vec();
        rep.extend_from_slice(&[FLAG_S | flags, 2, 0, pd.len() as u8]);
        rep.extend_from_slice(&pd);
        let e = i.feed(&rep).unwrap_err();
        assert_eq!(e.code, MpaErrorCode::NoMatchingRtr);
        let n = i
            .negotiated()
            .expect("a TERMINATE needs the negotiated framing");

        let mut sink = VecTx::default();
        let info = DdpTx::startup_terminate(n, 1460, e.code, &mut sink).unwrap();
        let mut want = Vec::new();
        if flags & FLAG_M != 0 {
            want.extend_from_slice(&[0; 4]);
        }
        want.extend_from_slice(&[0x00, 22, 0x41, 0x47]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0]);
        want.extend_from_slice(&[0x20, 0x07, 0, 0]);
        let crc = if flags & FLAG_C != 0 {
            mpa_util::crc32c(&want)
        } else {
            0
        };
        want.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(sink.out, want, "Reply flags {flags:#04x}");
        assert_eq!((info.wire_len, info.last), (want.len(), true));
    }
}

/// Large FPDUs (MULPDU 64768, negotiated with flag L): a 1 MiB Write and Send and a Read
/// Response of an odd length are cut into full 64768-octet ULPDUs plus a last one, and
/// deframe back to the same placement and payload, with markers and CRC on and off.
#[test]
fn large_fpdus_round_trip() {
    let m = MULPDU_MAX;
    for (markers, crc) in [(false, false), (false, true), (true, true)] {
        let mut tx = builder(markers, crc, m);
        let len = 1u32 << 20;
        let mut sink = VecTx::with_payload(&pattern(3 * len as usize, 7));
        let write = Message::Write {
            stag: 7,
            to: 0x1000,
            len,
        };
        let send = Message::Send {
            solicited: false,
            invalidate: None,
            len,
        };
        let rresp = Message::ReadResponse {
            stag: 9,
            to: 0,
            len: len - 3,
        };
        let infos = [
            send_all(&mut tx, &mut sink, write),
            send_all(&mut tx, &mut sink, send),
            send_all(&mut tx, &mut sink, rresp),
        ];
        assert_eq!(infos[0].len(), segments(len, 14, u32::from(m)));
        assert_eq!(infos[1].len(), segments(len, 18, u32::from(m)));
        assert_eq!(infos[2].len(), segments(len - 3, 14, u32::from(m)));
        for i in &infos {
            for (k, f) in i.iter().enumerate() {
                assert!(f.ulpdu_len <= m);
                if k + 1 < i.len() {
                    assert_eq!(f.ulpdu_len, m, "non-last segments are full");
                }
            }
        }
        let fpdus = deframe(&sink.out, 0, markers, crc, FpduPtrBase::UlpduLength);
        assert_eq!(fpdus.len(), infos.iter().map(Vec::len).sum::<usize>());
        let mut payload = Vec::new();
        for f in &fpdus {
            payload.extend_from_slice(f.parse(CFG).1);
        }
        assert_eq!(payload.len(), 3 * len as usize - 3);
        assert_eq!(payload, &sink.payload[..payload.len()]);
    }
}
