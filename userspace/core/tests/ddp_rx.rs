// SPDX-License-Identifier: GPL-2.0

//! The DDP/RDMAP RX decoder (engine::ddp_rx, engine::rx_decoder): placements and events for
//! every message type, every error path with its exact Layer/EType/ECode and TERMINATE echo
//! (RFC 5040 §4.8 Figures 9-10, RFC 5041 §7.2), and the receiver's
//! properties (resegmentation invariance, no placement outside an MR, one TERMINATE and nothing after).

#[path = "common/mpa_util.rs"]
mod mpa_util;

#[path = "common/ddp_util.rs"]
mod ddp_util;

use ddp_util::*;
use mpa_util::SliceRx;
use proptest::prelude::*;
use rsiw_core::engine::ddp_rx::{
    Access, DdpConfig, DdpRx, MessageDone, RxState, TaggedCheck, TaggedDone,
};
use rsiw_core::engine::mpa_rx::MpaRx;
use rsiw_core::engine::orq::{ReadSink, ORQ_CAPACITY};
use rsiw_core::engine::rx_decoder::Decoder;
use rsiw_core::engine::stream::{PlaceError, PlaceTarget};
use rsiw_core::wire::ddp::{DdpError, TaggedError, UntaggedError};
use rsiw_core::wire::mpa::MpaErrorCode;
use rsiw_core::wire::rdmap::{
    AtomicOp, AtomicRequest, AtomicResponse, ImmediateData, Opcode, OperationError,
    ProtectionError, RdmapError, ReadRequest,
};
use rsiw_core::wire::terminate::{Layer, TermCause, Terminate};
use rsiw_core::wire::ulpdu::{Config, RdmapHeader, UlpduHeader};

const IRD: u32 = 4;

fn rr(size: u32, src_stag: u32, src_to: u64) -> ReadRequest {
    ReadRequest {
        sink_stag: 0x5151,
        sink_to: 0x1000,
        size,
        src_stag,
        src_to,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn mem() -> MockMem {
    MockMem::sample()
}

/// Builds a stream, runs it in one chunk, and in 1-octet chunks, checks both agree.
fn go(b: &Builder, ird: u32, m: &mut MockMem) -> (Decoder, Outcome) {
    go_reads(b, ird, m, &[])
}

/// As [`go`], with Reads of Data Sinks `reads` outstanding (oldest first).
fn go_reads(b: &Builder, ird: u32, m: &mut MockMem, reads: &[ReadSink]) -> (Decoder, Outcome) {
    let data = b.bytes();
    let mut m1 = m.clone();
    let mut dec = decoder(Framing::PLAIN, b.cfg, ird);
    post_reads(&mut dec, m, reads);
    let o = run(&mut dec, m, &mut RecEvents::default(), &data, &[usize::MAX]);
    let mut d1 = decoder(Framing::PLAIN, b.cfg, ird);
    post_reads(&mut d1, &mut m1, reads);
    let o1 = run(&mut d1, &mut m1, &mut RecEvents::default(), &data, &[1]);
    assert_eq!(o, o1, "1-octet feeding differs");
    (dec, o)
}

/// A Read's Data Sink.
const fn sink(stag: u32, to: u64, len: u32) -> ReadSink {
    ReadSink { stag, to, len }
}

fn plain(cfg: Config) -> Builder {
    Builder::new(Framing::PLAIN, cfg)
}

fn cause_ddp(e: DdpError) -> TermCause {
    TermCause::ddp(e)
}

fn cause_rdmap(e: RdmapError) -> TermCause {
    TermCause::rdmap(e)
}

/// The one TERMINATE of `o`: cause, and M/D echo of FPDU `idx` of `b` (its ULPDU_Length and
/// DDP header octets) when `echo`.
fn assert_term(o: &Outcome, b: &Builder, idx: usize, cause: TermCause, echo: bool) -> Terminate {
    assert_eq!(o.terms.len(), 1, "exactly one TERMINATE: {o:?}");
    let t = o.terms[0];
    assert_eq!(t.cause, cause, "cause");
    let u = &b.fpdus[idx].1;
    if echo {
        assert_eq!(t.seg_len, Some(u.len() as u16), "M: DDP Segment Length");
        let hl = if u[0] & 0x80 != 0 { 14 } else { 18 };
        assert_eq!(
            t.ddp_header.map(|h| h.as_bytes().to_vec()),
            Some(u[..hl].to_vec()),
            "D: echoed DDP header"
        );
    } else {
        assert_eq!(t.seg_len, None);
        assert!(t.ddp_header.is_none());
    }
    if !(cause.layer == Layer::Rdma && cause.etype == 1) {
        assert!(t.rdma_header.is_none());
    }
    t
}

// ---------------------------------------------------------------------------------------
// Good paths.

#[test]
fn send_single_and_multi_segment() {
    let p = pattern(300, 1);
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, true), &p[..100]);
    b.push(&send(2, 0, false), &p[..120]);
    b.push(&send(2, 120, false), &p[120..200]);
    b.push(&send(2, 200, true), &p[200..]);
    let (dec, o) = go(&b, IRD, &mut mem());
    assert!(o.terms.is_empty());
    assert_eq!(
        o.placed,
        vec![
            (
                PlaceTarget::Untagged {
                    qn: 0,
                    msn: 1,
                    mo: 0
                },
                p[..100].to_vec()
            ),
            (
                PlaceTarget::Untagged {
                    qn: 0,
                    msn: 2,
                    mo: 0
                },
                p.clone()
            ),
        ]
    );
    let msg = |msn, len| {
        Ev::Msg(MessageDone {
            opcode: Opcode::Send,
            msn,
            len,
            inval_stag: None,
            solicited: false,
            imm: None,
        })
    };
    assert_eq!(o.events, vec![msg(1, 100), msg(2, 300)]);
    assert_eq!(dec.ddp().expected_msn(0), Some(3));
    assert_eq!(dec.state(), RxState::Active);
}

#[test]
fn send_variants_flags_and_invalidate_stag() {
    let mut b = plain(Config::RFC);
    b.push(&UlpduHeader::untagged(Opcode::SendSe, true, 1, 0, 0), b"se");
    b.push(
        &UlpduHeader::untagged(Opcode::SendInvalidate, true, 2, 0, 0x300),
        b"inv",
    );
    b.push(
        &UlpduHeader::untagged(Opcode::SendSeInvalidate, true, 3, 0, 0x100),
        b"",
    );
    let mut m = mem();
    let (_, o) = go(&b, IRD, &mut m);
    assert!(o.terms.is_empty());
    let ev: Vec<_> = o
        .events
        .iter()
        .map(|e| match e {
            Ev::Msg(m) => (m.opcode, m.len, m.inval_stag, m.solicited),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        ev,
        vec![
            (Opcode::SendSe, 2, None, true),
            (Opcode::SendInvalidate, 3, Some(0x300), false),
            (Opcode::SendSeInvalidate, 0, Some(0x100), true),
        ]
    );
}

#[test]
fn zero_length_messages() {
    let mut b = plain(Config::RFC);
    // Zero-length Write and Read Response: STag/TO not checked (RFC 5041 §5.2).
    b.push(&write(0, 0xdead_beef, true), &[]);
    b.push(&rresp(0x9999, u64::MAX, true), &[]);
    // Zero-length Send consumes a buffer.
    b.push(&send(1, 0, true), &[]);
    // Zero-length Read Request: no source check (RFC 5040 §7.2 item 4).
    b.push(&rreq(1, rr(0, 0xbad, u64::MAX)), &[]);
    let mut m = mem();
    // The zero-length Read Response answers a zero-length Read (e.g. the RTR).
    let (_, o) = go_reads(&b, IRD, &mut m, &[sink(0x4242, 0, 0)]);
    assert!(o.terms.is_empty(), "{o:?}");
    assert!(o.placed.is_empty());
    assert_eq!(
        o.events,
        vec![
            Ev::Tagged(TaggedDone {
                opcode: Opcode::Write,
                stag: 0,
                len: 0
            }),
            Ev::Tagged(TaggedDone {
                opcode: Opcode::ReadResponse,
                stag: 0x4242,
                len: 0
            }),
            Ev::Msg(MessageDone {
                opcode: Opcode::Send,
                msn: 1,
                len: 0,
                inval_stag: None,
                solicited: false,
                imm: None
            }),
            Ev::Read(rr(0, 0xbad, u64::MAX)),
        ]
    );
    // Only the zero-length Send asked the shell (for a buffer).
    assert_eq!(m.asked, 1);
    assert!(m.approved.is_empty());
}

// ---------------------------------------------------------------------------------------
// Read Responses are bound to the oldest outstanding Read (RFC 5040 §5.2, §7.2): checked
// before an octet is placed.

/// A Read Response nobody asked for, aimed at a buffer that grants local write (as a DMA
/// MR does for all of kernel memory): nothing placed, RDMAP 0/2/0x06, with L=0 and L=1.
#[test]
fn unsolicited_read_response_places_nothing() {
    let unexpected = cause_rdmap(RdmapError::RemoteOperation(
        OperationError::UnexpectedOpcode,
    ));
    for last in [false, true] {
        let mut b = plain(Config::RFC);
        b.push(&rresp(0x200, 0x2000, last), &[0xAA; 64]);
        b.push(&write(0x100, 0x1000, true), &[9; 8]);
        let (dec, o) = go(&b, IRD, &mut mem());
        assert_term(&o, &b, 0, unexpected, true);
        assert!(o.placed.is_empty(), "L={last}: {o:?}");
        assert!(o.events.is_empty());
        assert_eq!(dec.state(), RxState::Terminated);
    }
    // Zero-length, L=1: no Read to complete either.
    let mut b = plain(Config::RFC);
    b.push(&rresp(0, 0, true), &[]);
    let (_, o) = go(&b, IRD, &mut mem());
    assert_term(&o, &b, 0, unexpected, true);
    assert!(o.events.is_empty());
}

/// Two outstanding Reads answered in order, in several segments each, place exactly into
/// their sinks and complete oldest first with the Read's size.
#[test]
fn read_responses_fill_their_reads_in_order() {
    let p = pattern(300, 3);
    let mut b = plain(Config::RFC);
    b.push(&rresp(0x200, 0x2100, false), &p[..100]);
    b.push(&rresp(0x200, 0x2100 + 100, true), &p[100..200]);
    b.push(&rresp(0x400, u64::MAX - 100, false), &p[200..250]);
    b.push(&rresp(0x400, u64::MAX - 50, true), &p[250..]);
    let reads = [sink(0x200, 0x2100, 200), sink(0x400, u64::MAX - 100, 100)];
    let (dec, o) = go_reads(&b, IRD, &mut mem(), &reads);
    assert!(o.terms.is_empty(), "{o:?}");
    assert_eq!(
        o.placed,
        vec![
            (
                PlaceTarget::Tagged {
                    stag: 0x200,
                    to: 0x2100,
                    access: Access::LocalWrite
                },
                p[..200].to_vec()
            ),
            (
                PlaceTarget::Tagged {
                    stag: 0x400,
                    to: u64::MAX - 100,
                    access: Access::LocalWrite
                },
                p[200..].to_vec()
            ),
        ]
    );
    assert_eq!(
        o.events,
        vec![
            Ev::Tagged(TaggedDone {
                opcode: Opcode::ReadResponse,
                stag: 0x200,
                len: 200
            }),
            Ev::Tagged(TaggedDone {
                opcode: Opcode::ReadResponse,
                stag: 0x400,
                len: 100
            }),
        ]
    );
    assert!(dec.ddp().orq().is_empty());
}

/// Every way a Read Response can miss its Read: the segment is refused before anything of
/// it is placed (what earlier segments of the same Read placed stays), with the DDP tagged
/// buffer error siw and RFC 5041 §7.2 give.
#[test]
fn read_response_mismatches_are_refused_before_placement() {
    let bad_stag = cause_ddp(DdpError::Tagged(TaggedError::InvalidStag));
    let bounds = cause_ddp(DdpError::Tagged(TaggedError::BaseBounds));
    // (segments after a good first one of 16 octets at 0x2000, cause)
    type Seg = (u32, u64, usize, bool);
    let cases: [(&str, Vec<Seg>, TermCause); 8] = [
        // The Read's sink is 0x200; 0x100 grants remote write, 0x400 local write too.
        ("other STag", vec![(0x100, 0x1010, 16, true)], bad_stag),
        ("other LW STag", vec![(0x400, 0x2010, 16, true)], bad_stag),
        ("TO behind", vec![(0x200, 0x2008, 16, true)], bounds),
        ("TO ahead", vec![(0x200, 0x2020, 16, true)], bounds),
        ("more octets", vec![(0x200, 0x2010, 17, true)], bounds),
        ("short last", vec![(0x200, 0x2010, 15, true)], bounds),
        ("empty last", vec![(0x200, 0x2010, 0, true)], bounds),
        (
            "more over two",
            vec![(0x200, 0x2010, 10, false), (0x200, 0x201A, 7, true)],
            bounds,
        ),
    ];
    let p = pattern(64, 9);
    for (what, segs, cause) in cases {
        let mut b = plain(Config::RFC);
        b.push(&rresp(0x200, 0x2000, false), &p[..16]);
        for &(stag, to, n, last) in &segs {
            b.push(&rresp(stag, to, last), &p[16..16 + n]);
        }
        let mut m = mem();
        m.mrs[3] = Mr::new(0x400, 0x2000, 0x1000, LW);
        let (_, o) = go_reads(&b, IRD, &mut m, &[sink(0x200, 0x2000, 32)]);
        let bad = b.fpdus.len() - 1;
        assert_term(&o, &b, bad, cause, true);
        let good: usize = b.fpdus[1..bad].iter().map(|(_, u)| u.len() - 14).sum();
        let placed: usize = o.placed.iter().map(|(_, d)| d.len()).sum();
        assert_eq!(placed, 16 + good, "{what}: {o:?}");
        assert!(o.events.is_empty(), "{what}");
    }
}

/// A Read Response may not run into the next Read: the first Read's sink is full after
/// its size, and its last segment must say so.
#[test]
fn read_response_cannot_spill_into_the_next_read() {
    let mut b = plain(Config::RFC);
    // L=0 on a segment that fills the first Read, then the next Read's octets.
    b.push(&rresp(0x200, 0x2000, false), &[1; 8]);
    b.push(&rresp(0x200, 0x2008, true), &[2; 8]);
    let reads = [sink(0x200, 0x2000, 8), sink(0x200, 0x2008, 8)];
    let (_, o) = go_reads(&b, IRD, &mut mem(), &reads);
    assert_term(
        &o,
        &b,
        1,
        cause_ddp(DdpError::Tagged(TaggedError::BaseBounds)),
        true,
    );
    assert_eq!(o.placed.len(), 1);
    assert!(o.events.is_empty());
}

/// The ORQ holds at most its capacity and refuses a sink whose range wraps.
#[test]
fn orq_capacity_and_wrap() {
    let mut dec = decoder(Framing::PLAIN, Config::RFC, IRD);
    for i in 0..ORQ_CAPACITY {
        dec.post_read(sink(0x200, 0x2000 + i as u64, 1)).unwrap();
    }
    assert!(dec.post_read(sink(0x200, 0x2000, 1)).is_err());
    let mut dec = decoder(Framing::PLAIN, Config::RFC, IRD);
    // The octet at 2^64 - 1 is the last a tagged access can reach (TO + length fits).
    assert!(dec.post_read(sink(0x200, u64::MAX, 1)).is_err());
    assert!(dec.post_read(sink(0x200, u64::MAX - 1, 1)).is_ok());
}

#[test]
fn zero_length_send_without_buffer_fails() {
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, true), &[]);
    let mut m = mem();
    m.posted = 0;
    let (_, o) = go(&b, IRD, &mut m);
    assert_term(
        &o,
        &b,
        0,
        cause_ddp(DdpError::Untagged(UntaggedError::NoBuffer)),
        true,
    );
}

#[test]
fn write_and_read_response_place_with_advancing_to() {
    let p = pattern(3000, 7);
    let mut b = plain(Config::RFC);
    b.push(&write(0x100, 0x1000, false), &p[..1000]);
    b.push(&write(0x100, 0x1000 + 1000, true), &p[1000..]);
    b.push(&rresp(0x200, 0x2000, true), &p[..16]);
    let (_, o) = go_reads(&b, IRD, &mut mem(), &[sink(0x200, 0x2000, 16)]);
    assert!(o.terms.is_empty());
    assert_eq!(
        o.placed,
        vec![
            (
                PlaceTarget::Tagged {
                    stag: 0x100,
                    to: 0x1000,
                    access: Access::RemoteWrite
                },
                p.clone()
            ),
            (
                PlaceTarget::Tagged {
                    stag: 0x200,
                    to: 0x2000,
                    access: Access::LocalWrite
                },
                p[..16].to_vec()
            ),
        ]
    );
    assert_eq!(
        o.events,
        vec![
            Ev::Tagged(TaggedDone {
                opcode: Opcode::Write,
                stag: 0x100,
                len: 3000
            }),
            Ev::Tagged(TaggedDone {
                opcode: Opcode::ReadResponse,
                stag: 0x200,
                len: 16
            }),
        ]
    );
}

#[test]
fn header_split_in_one_octet_chunks_with_markers_and_crc() {
    let p = pattern(1500, 3);
    for framing in [
        Framing::PLAIN,
        Framing::CRC,
        Framing {
            markers: true,
            crc: true,
        },
    ] {
        let mut b = Builder::new(framing, Config::RFC);
        for i in 0..4u32 {
            b.push(&send(i + 1, 0, true), &p[..(i as usize * 300 + 17)]);
            b.push(&write(0x100, 0x1000 + u64::from(i) * 2000, true), &p);
        }
        let data = b.bytes();
        let (_, big) = run_once(framing, Config::RFC, IRD, &mut mem(), &data);
        let mut d = decoder(framing, Config::RFC, IRD);
        let small = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &[1]);
        assert!(big.terms.is_empty());
        assert_eq!(big.events.len(), 8);
        assert_eq!(big, small);
    }
}

#[test]
fn to_near_2_pow_64() {
    // MR 0x400 is [2^64 - 0x1000, 2^64 - 1): its last octet, 2^64 - 1, cannot be written
    // since TO + len would be 2^64.
    let base = u64::MAX - 0xFFF;
    let mut b = plain(Config::RFC);
    b.push(&write(0x400, base, true), &pattern(0xFFF, 0));
    let (_, o) = go(&b, IRD, &mut mem());
    assert!(o.terms.is_empty(), "{o:?}");
    assert_eq!(
        o.placed[0].0,
        PlaceTarget::Tagged {
            stag: 0x400,
            to: base,
            access: Access::RemoteWrite
        }
    );

    // TO + len == 2^64: the 64-bit sum wraps (RFC 5041 §7.1 tagged check 5).
    let mut b = plain(Config::RFC);
    b.push(&write(0x400, u64::MAX - 9, true), &[0; 10]);
    let mut m = mem();
    let (_, o) = go(&b, IRD, &mut m);
    assert_term(
        &o,
        &b,
        0,
        cause_ddp(DdpError::Tagged(TaggedError::ToWrap)),
        true,
    );
    assert!(o.placed.is_empty());
    assert_eq!(m.asked, 0, "wrap is caught before asking the shell");

    // Same for a Read Request's source: RDMAP 0/1/0x04 with R echo.
    let mut b = plain(Config::RFC);
    let r = rr(16, 0x400, u64::MAX - 8);
    b.push(&rreq(1, r), &[]);
    let (_, o) = go(&b, IRD, &mut mem());
    let t = assert_term(
        &o,
        &b,
        0,
        cause_rdmap(RdmapError::RemoteProtection(ProtectionError::ToWrap)),
        true,
    );
    assert_eq!(t.rdma_header, Some(r));
}

#[test]
fn msn_wraps_from_ffffffff_to_0() {
    let mut b = plain(Config::RFC);
    b.push(&send(u32::MAX, 0, false), b"ab");
    b.push(&send(u32::MAX, 2, true), b"cd");
    b.push(&send(0, 0, true), b"ef");
    b.push(&send(1, 0, true), b"gh");
    let data = b.bytes();
    for chunk in [usize::MAX, 1, 3] {
        let mut ddp = DdpRx::new(DdpConfig {
            wire: Config::RFC,
            ird: IRD,
        });
        assert!(ddp.set_expected_msn(0, u32::MAX));
        assert!(!ddp.set_expected_msn(4, 0));
        let mut dec = Decoder::from_parts(MpaRx::new(Framing::PLAIN.rx()), ddp);
        let mut m = mem();
        m.first_msn = u32::MAX;
        let mut ev = RecEvents::default();
        let o = run(&mut dec, &mut m, &mut ev, &data, &[chunk]);
        assert!(o.terms.is_empty(), "{o:?}");
        let msns: Vec<_> = o
            .events
            .iter()
            .map(|e| match e {
                Ev::Msg(m) => (m.msn, m.len),
                _ => panic!(),
            })
            .collect();
        assert_eq!(msns, vec![(u32::MAX, 4), (0, 2), (1, 2)]);
        assert_eq!(dec.ddp().expected_msn(0), Some(2));
    }
}

#[test]
fn maximum_length_segments() {
    // MULPDU 64768 through the TX framer, markers on.
    let framing = Framing {
        markers: true,
        crc: true,
    };
    let p = pattern(64768 - 14, 9);
    let mut b = Builder::new(framing, Config::RFC);
    b.push(&write(0x100, 0x1000, true), &p);
    let data = b.bytes();
    let (_, o) = run_once(framing, Config::RFC, IRD, &mut mem(), &data);
    assert!(o.terms.is_empty());
    assert_eq!(
        o.placed,
        vec![(
            PlaceTarget::Tagged {
                stag: 0x100,
                to: 0x1000,
                access: Access::RemoteWrite
            },
            p
        )]
    );

    // ULPDU_Length 65535 is accepted on receive (MULPDU limits the sender only,
    // RFC 5044 §4.5).
    let p = pattern(65535 - 18, 5);
    let mut u = [0u8; 18];
    send(1, 0, true).emit_into(&mut u, Config::RFC).unwrap();
    let mut ulpdu = u.to_vec();
    ulpdu.extend_from_slice(&p);
    let data = fpdu_plain(&ulpdu, true);
    for sizes in [vec![usize::MAX], vec![1], vec![1000, 7]] {
        let mut d = decoder(Framing::CRC, Config::RFC, IRD);
        let o = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &sizes);
        assert!(o.terms.is_empty());
        assert_eq!(
            o.placed,
            vec![(
                PlaceTarget::Untagged {
                    qn: 0,
                    msn: 1,
                    mo: 0
                },
                p.clone()
            )]
        );
        assert!(matches!(
            o.events[..],
            [Ev::Msg(MessageDone { len: 65517, .. })]
        ));
    }
}

#[test]
fn read_requests_and_ird() {
    let mut b = plain(Config::RFC);
    for i in 0..3 {
        b.push(&rreq(i + 1, rr(64, 0x300, 0x3000 + u64::from(i))), &[]);
    }
    let data = b.bytes();
    let mut m = mem();
    let mut dec = decoder(Framing::PLAIN, Config::RFC, 2);
    let mut ev = RecEvents::default();
    // Two fit in IRD 2.
    let split = b.fpdus[2].0;
    let o = run(&mut dec, &mut m, &mut ev, &data[..split], &[usize::MAX]);
    assert!(o.terms.is_empty());
    assert_eq!(o.events.len(), 2);
    assert_eq!(dec.ddp().ird_outstanding(), 2);
    // One response sent: the third fits.
    dec.release_ird();
    let o = run(&mut dec, &mut m, &mut ev, &data[split..], &[usize::MAX]);
    assert!(o.terms.is_empty());
    assert_eq!(o.events[2], Ev::Read(rr(64, 0x300, 0x3002)));
    assert_eq!(
        m.approved.last(),
        Some(&(
            0x300,
            0x3002,
            64,
            rsiw_core::engine::ddp_rx::Access::RemoteRead
        ))
    );

    // Without the release, the third exceeds IRD: DDP 1/2/0x03 (MSN past the last QN 1
    // buffer), with the DDP header echoed and no RDMA header (not a protection error).
    let (_, o) = go(&b, 2, &mut mem());
    assert_term(
        &o,
        &b,
        2,
        cause_ddp(DdpError::Untagged(UntaggedError::MsnRange)),
        true,
    );
    assert_eq!(o.events.len(), 2);
}

#[test]
fn read_request_source_errors_are_rdmap_with_r_echo() {
    let cases: [(u32, u64, u32, ProtectionError); 4] = [
        (0x777, 0x3000, 8, ProtectionError::InvalidStag),
        (0x300, 0x2FFF, 8, ProtectionError::BaseBounds),
        (0x300, 0x3FF8, 9, ProtectionError::BaseBounds),
        (0x100, 0x1000, 8, ProtectionError::AccessRights),
    ];
    for (stag, to, size, e) in cases {
        let mut b = plain(Config::RFC);
        let r = rr(size, stag, to);
        b.push(&rreq(1, r), &[]);
        let (_, o) = go(&b, IRD, &mut mem());
        let t = assert_term(
            &o,
            &b,
            0,
            cause_rdmap(RdmapError::RemoteProtection(e)),
            true,
        );
        assert_eq!(t.rdma_header, Some(r), "R: Terminated RDMA Header");
        assert!(o.events.is_empty());
        // The encoded TERMINATE: HdrCt M|D|R, ULPDU_Length, DDP header, Read Request header
        // (RFC 5040 §4.8 Figure 10).
        let mut out = [0u8; 64];
        let n = t.emit_into(&mut out).unwrap();
        let u = &b.fpdus[0].1;
        assert_eq!(n, 4 + 2 + 18 + 28);
        assert_eq!(out[0], 0x01);
        assert_eq!(out[1], e as u8);
        assert_eq!(out[2], 0xE0);
        assert_eq!(&out[4..6], &(u.len() as u16).to_be_bytes());
        assert_eq!(&out[6..24], &u[..18]);
        assert_eq!(&out[24..52], &r.to_bytes());
    }
    // Not associated with this stream: 0/1/0x03.
    let mut m = mem();
    m.mrs[2].assoc = false;
    let mut b = plain(Config::RFC);
    b.push(&rreq(1, rr(8, 0x300, 0x3000)), &[]);
    let (_, o) = go(&b, IRD, &mut m);
    assert_term(
        &o,
        &b,
        0,
        cause_rdmap(RdmapError::RemoteProtection(
            ProtectionError::StagNotAssociated,
        )),
        true,
    );
}

#[test]
fn tagged_placement_errors_are_ddp() {
    // (stag, to, len, opcode, DDP tagged error)
    let mut foreign = mem();
    foreign.mrs[0].assoc = false;
    let mut invalidated = mem();
    invalidated.mrs[0].valid = false;
    let cases = [
        (mem(), write(0x999, 0x1000, true), TaggedError::InvalidStag),
        (
            invalidated,
            write(0x100, 0x1000, true),
            TaggedError::InvalidStag,
        ),
        (
            foreign,
            write(0x100, 0x1000, true),
            TaggedError::StagNotAssociated,
        ),
        (mem(), write(0x100, 0xFFF, true), TaggedError::BaseBounds),
        (
            mem(),
            write(0x100, 0x1000 + 0x10000 - 4, true),
            TaggedError::BaseBounds,
        ),
        // No remote write on a local-write MR: DDP has no access code, 0x00 (siw too).
        (mem(), write(0x200, 0x2000, true), TaggedError::InvalidStag),
        // Read Response into an MR without local write (the Read named it as its sink).
        (mem(), rresp(0x100, 0x1000, true), TaggedError::InvalidStag),
    ];
    for (mut m, h, e) in cases {
        let mut b = plain(Config::RFC);
        b.push(&h, &[1, 2, 3, 4, 5, 6, 7, 8]);
        // A good Write after the bad one is not placed either.
        b.push(&write(0x100, 0x1000, true), &[9; 8]);
        let (dec, o) = go_reads(&b, IRD, &mut m, &[sink(0x100, 0x1000, 8)]);
        assert_term(&o, &b, 0, cause_ddp(DdpError::Tagged(e)), true);
        assert!(o.placed.is_empty(), "{h:?}");
        assert!(o.events.is_empty());
        assert_eq!(dec.state(), RxState::Terminated);
        assert_eq!(o.consumed, b.bytes().len());
    }
}

#[test]
fn untagged_errors() {
    // MSN of the first Send not 1: 1/2/0x03.
    let mut b = plain(Config::RFC);
    b.push(&send(2, 0, true), b"x");
    let (_, o) = go(&b, IRD, &mut mem());
    assert_term(
        &o,
        &b,
        0,
        cause_ddp(DdpError::Untagged(UntaggedError::MsnRange)),
        true,
    );

    // Duplicate MSN.
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, true), b"x");
    b.push(&send(1, 0, true), b"y");
    let (_, o) = go(&b, IRD, &mut mem());
    assert_term(
        &o,
        &b,
        1,
        cause_ddp(DdpError::Untagged(UntaggedError::MsnRange)),
        true,
    );
    assert_eq!(o.events.len(), 1);

    // Interleaving: message 2 starts before message 1 ended.
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, false), b"x");
    b.push(&send(2, 0, true), b"y");
    let (_, o) = go(&b, IRD, &mut mem());
    assert_term(
        &o,
        &b,
        1,
        cause_ddp(DdpError::Untagged(UntaggedError::MsnRange)),
        true,
    );

    // MO gap and MO overlap: 1/2/0x04.
    for mo in [5, 3, 0] {
        let mut b = plain(Config::RFC);
        b.push(&send(1, 0, false), b"abcd");
        b.push(&send(1, mo, true), b"efgh");
        let (_, o) = go(&b, IRD, &mut mem());
        assert_term(
            &o,
            &b,
            1,
            cause_ddp(DdpError::Untagged(UntaggedError::InvalidMo)),
            true,
        );
        assert_eq!(o.placed.len(), 1, "the first segment was placed");
    }

    // First segment with MO != 0.
    let mut b = plain(Config::RFC);
    b.push(&send(1, 8, true), b"x");
    let (_, o) = go(&b, IRD, &mut mem());
    assert_term(
        &o,
        &b,
        0,
        cause_ddp(DdpError::Untagged(UntaggedError::InvalidMo)),
        true,
    );

    // Shell answers: no buffer 0x02, MO beyond buffer 0x04, too long 0x05.
    let mut m = mem();
    m.posted = 1;
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, true), b"x");
    b.push(&send(2, 0, true), b"y");
    let (_, o) = go(&b, IRD, &mut m);
    assert_term(
        &o,
        &b,
        1,
        cause_ddp(DdpError::Untagged(UntaggedError::NoBuffer)),
        true,
    );

    let mut m = mem();
    m.cap = 10;
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, false), &[0; 10]);
    b.push(&send(1, 10, true), &[0; 1]);
    let (_, o) = go(&b, IRD, &mut m);
    assert_term(
        &o,
        &b,
        1,
        cause_ddp(DdpError::Untagged(UntaggedError::TooLong)),
        true,
    );
    assert_eq!(o.placed.len(), 1);
}

#[test]
fn invalidate_errors_are_rdmap_protection() {
    let mut m = mem();
    m.mrs[1].remote_inval = false;
    m.mrs[2].assoc = false;
    let cases = [
        (0x999, ProtectionError::InvalidStag),
        (0x300, ProtectionError::StagNotAssociated),
        (0x200, ProtectionError::CannotInvalidate),
    ];
    for (stag, e) in cases {
        let mut b = plain(Config::RFC);
        // Checked on the last segment only.
        b.push(
            &UlpduHeader::untagged(Opcode::SendInvalidate, false, 1, 0, 0x999),
            b"ab",
        );
        b.push(
            &UlpduHeader::untagged(Opcode::SendInvalidate, true, 1, 2, stag),
            b"cd",
        );
        let (_, o) = go(&b, IRD, &mut m.clone());
        let t = assert_term(
            &o,
            &b,
            1,
            cause_rdmap(RdmapError::RemoteProtection(e)),
            true,
        );
        assert!(
            t.rdma_header.is_none(),
            "only a Read Request has an RDMA header"
        );
        assert_eq!(o.placed.len(), 1);
        assert!(o.events.is_empty());
    }
}

#[test]
fn wire_format_errors() {
    let good = {
        let mut u = [0u8; 18];
        send(1, 0, true).emit_into(&mut u, Config::RFC).unwrap();
        u
    };
    let mut w = [0u8; 14];
    write(0x100, 0x1000, true)
        .emit_into(&mut w, Config::RFC)
        .unwrap();
    let op = |e| cause_rdmap(RdmapError::RemoteOperation(e));
    let mut cases: Vec<(Vec<u8>, TermCause, bool)> = Vec::new();
    // DV 2 untagged / tagged: 1/2/0x06, 1/1/0x04.
    let mut u = good.to_vec();
    u[0] = (u[0] & !3) | 2;
    cases.push((
        u,
        cause_ddp(DdpError::Untagged(UntaggedError::InvalidVersion)),
        true,
    ));
    let mut u = w.to_vec();
    u[0] &= !3;
    u.extend_from_slice(&[0; 4]);
    cases.push((
        u,
        cause_ddp(DdpError::Tagged(TaggedError::InvalidVersion)),
        true,
    ));
    // RV 0 on an RFC connection (a repeated MPA Request looks like this): 0/2/0x05.
    let mut u = good.to_vec();
    u[1] &= 0x3F;
    cases.push((u, op(OperationError::InvalidVersion), true));
    // Unassigned opcode, RFC 7306 opcode not enabled, T/opcode mismatch: 0/2/0x06.
    for code in [0x0C, 0x08] {
        let mut u = good.to_vec();
        u[1] = (u[1] & 0xF0) | code;
        cases.push((u, op(OperationError::UnexpectedOpcode), true));
    }
    let mut u = good.to_vec();
    u[0] |= 0x80;
    cases.push((u, op(OperationError::UnexpectedOpcode), true));
    // Send on QN 1: 1/2/0x01.
    let mut u = good.to_vec();
    u[9] = 1;
    cases.push((
        u,
        cause_ddp(DdpError::Untagged(UntaggedError::InvalidQn)),
        true,
    ));
    // Read Request with payload: 0/2/0x06.
    let mut rq = [0u8; 46];
    rreq(1, rr(8, 0x300, 0x3000))
        .emit_into(&mut rq, Config::RFC)
        .unwrap();
    let mut u = rq.to_vec();
    u.push(0);
    cases.push((u, op(OperationError::UnexpectedOpcode), true));
    // Read Request with L=0: 0/2/0x06; with MO != 0: 1/2/0x04.
    let mut u = rq.to_vec();
    u[0] &= !0x40;
    cases.push((u, op(OperationError::UnexpectedOpcode), true));
    let mut u = rq.to_vec();
    u[17] = 4;
    cases.push((
        u,
        cause_ddp(DdpError::Untagged(UntaggedError::InvalidMo)),
        true,
    ));
    // Too short for its headers: 0/2/0xFF, DDP header echoed when whole.
    cases.push((rq[..30].to_vec(), op(OperationError::Unspecified), true));
    cases.push((good[..10].to_vec(), op(OperationError::Unspecified), false));
    cases.push((w[..13].to_vec(), op(OperationError::Unspecified), false));
    cases.push((vec![good[0]], op(OperationError::Unspecified), false));
    cases.push((vec![], op(OperationError::Unspecified), false));
    for (i, (u, cause, echo)) in cases.iter().enumerate() {
        for framing in [Framing::PLAIN, Framing::CRC] {
            let mut b = Builder::new(framing, Config::RFC);
            b.raw(u);
            b.push(&send(1, 0, true), b"after");
            let data = b.bytes();
            let (_, o) = run_once(framing, Config::RFC, IRD, &mut mem(), &data);
            let mut d = decoder(framing, Config::RFC, IRD);
            let o1 = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &[1]);
            assert_eq!(o, o1, "case {i}");
            assert!(o.placed.is_empty(), "case {i}");
            assert!(o.events.is_empty(), "case {i}");
            assert_eq!(o.terms.len(), 1, "case {i}: {o:?}");
            assert_eq!(o.terms[0].cause, *cause, "case {i}");
            if *echo {
                let hl = if u[0] & 0x80 != 0 { 14 } else { 18 };
                assert_eq!(o.terms[0].seg_len, Some(u.len() as u16), "case {i}");
                assert_eq!(
                    o.terms[0].ddp_header.unwrap().as_bytes(),
                    &u[..hl],
                    "case {i}"
                );
            } else {
                assert!(o.terms[0].ddp_header.is_none(), "case {i}");
            }
        }
    }
}

#[test]
fn crc_error_wins_over_ddp_error_and_is_reported_once() {
    // A header error inside an FPDU with a bad CRC: only MPA 2/0/0x02, no DDP header.
    let mut b = Builder::new(Framing::CRC, Config::RFC);
    b.push(&write(0x999, 0x1000, true), &[1; 8]);
    let mut data = b.bytes();
    let last = data.len() - 1;
    data[last] ^= 1;
    for sizes in [vec![usize::MAX], vec![1], vec![3, 5]] {
        let mut d = decoder(Framing::CRC, Config::RFC, IRD);
        let o = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &sizes);
        assert_term(&o, &b, 0, TermCause::mpa(MpaErrorCode::CrcMismatch), false);
        assert!(o.placed.is_empty());
    }
    // A good Write with a bad CRC: placed cut-through, but never completed.
    let mut b = Builder::new(Framing::CRC, Config::RFC);
    b.push(&write(0x100, 0x1000, true), &[1; 8]);
    b.push(&send(1, 0, true), b"z");
    let mut data = b.bytes();
    data[20] ^= 0x10;
    let (dec, o) = run_once(Framing::CRC, Config::RFC, IRD, &mut mem(), &data);
    assert_term(&o, &b, 0, TermCause::mpa(MpaErrorCode::CrcMismatch), false);
    assert!(o.events.is_empty());
    assert_eq!(o.placed.len(), 1);
    assert_eq!(dec.state(), RxState::Terminated);
    assert_eq!(o.consumed, data.len());
}

#[test]
fn marker_error_is_mpa_3() {
    let framing = Framing {
        markers: true,
        crc: false,
    };
    let mut b = Builder::new(framing, Config::RFC);
    b.push(&write(0x100, 0x1000, true), &pattern(1000, 1));
    let mut data = b.bytes();
    // The marker at stream offset 512 (FPDUPTR 508).
    data[515] ^= 4;
    let (_, o) = run_once(framing, Config::RFC, IRD, &mut mem(), &data);
    assert_term(
        &o,
        &b,
        0,
        TermCause::mpa(MpaErrorCode::MarkerMismatch),
        false,
    );
    assert!(o.events.is_empty());
}

#[test]
fn place_error_is_local_catastrophic() {
    let mut b = plain(Config::RFC);
    b.push(&write(0x100, 0x1000, true), &[1; 8]);
    b.push(&write(0x100, 0x1000, true), &[2; 8]);
    let data = b.bytes();
    let mut dec = decoder(Framing::PLAIN, Config::RFC, IRD);
    let mut s = SliceRx::new(&data);
    s.fail_place = Some(PlaceError::Failed);
    let t = dec
        .process(&mut s, &mut mem(), &mut RecEvents::default())
        .unwrap_err();
    assert_eq!(t.cause, cause_ddp(DdpError::LocalCatastrophic));
    // Figure 10: no header for a local catastrophic error.
    assert!(t.ddp_header.is_none() && t.seg_len.is_none());
    assert_eq!(s.placed.len(), 1);
    assert_eq!(s.pos, data.len());
}

/// A tagged buffer that stops passing its check between a segment's header and its
/// payload (the MR deregistered, invalidated or re-registered while the FPDU arrives): the
/// TERMINATE names the tagged buffer error the header would have got (RFC 5041 §7.2, with
/// the DDP header, RFC 5040 Figure 10), for an RDMA Write and for a Read Response alike,
/// nothing completes, and the rest of the stream is not acted on.
#[test]
fn tagged_buffer_gone_during_its_payload_is_a_tagged_error() {
    let checks = [
        (TaggedCheck::InvalidStag, TaggedError::InvalidStag),
        (TaggedCheck::AccessRights, TaggedError::InvalidStag),
        (TaggedCheck::BaseBounds, TaggedError::BaseBounds),
        (TaggedCheck::NotAssociated, TaggedError::StagNotAssociated),
    ];
    for (check, ecode) in checks {
        for read in [false, true] {
            let mut m = mem();
            let mut b = plain(Config::RFC);
            if read {
                b.push(&rresp(0x200, 0x2100, true), &[1; 8]);
            } else {
                b.push(&write(0x100, 0x1000, true), &[1; 8]);
            }
            b.push(&write(0x100, 0x1000, true), &[2; 8]);
            let data = b.bytes();
            let mut dec = decoder(Framing::PLAIN, Config::RFC, IRD);
            if read {
                post_reads(&mut dec, &mut m, &[sink(0x200, 0x2100, 8)]);
            }
            let mut s = SliceRx::new(&data);
            s.fail_place = Some(PlaceError::Tagged(check));
            let mut ev = RecEvents::default();
            let t = dec.process(&mut s, &mut m, &mut ev).unwrap_err();
            assert_eq!(
                t.cause,
                cause_ddp(DdpError::Tagged(ecode)),
                "{check:?} read={read}"
            );
            assert!(t.ddp_header.is_some(), "{check:?} read={read}");
            assert!(ev.evs.is_empty(), "{:?}", ev.evs);
            assert_eq!(s.placed.len(), 1);
        }
    }
}

#[test]
fn event_rejection_terminates_with_echo() {
    let mut b = plain(Config::RFC);
    b.push(&rresp(0x200, 0x2000, false), &[1; 4]);
    b.push(&rresp(0x200, 0x2004, true), &[2; 4]);
    b.push(&send(1, 0, true), b"after");
    let data = b.bytes();
    let cause = cause_rdmap(RdmapError::RemoteOperation(
        OperationError::UnexpectedOpcode,
    ));
    let mut dec = decoder(Framing::PLAIN, Config::RFC, IRD);
    let mut m = mem();
    post_reads(&mut dec, &mut m, &[sink(0x200, 0x2000, 8)]);
    let mut ev = RecEvents {
        reject: Some((0, cause)),
        ..Default::default()
    };
    let o = run(&mut dec, &mut m, &mut ev, &data, &[usize::MAX]);
    assert_term(&o, &b, 1, cause, true);
    assert_eq!(o.events.len(), 1);
    assert_eq!(o.placed.len(), 1);
}

#[test]
fn terminate_received() {
    let cause = cause_ddp(DdpError::Tagged(TaggedError::BaseBounds));
    let mut echoed = [0u8; 14];
    write(0x100, 0x1000, true)
        .emit_into(&mut echoed, Config::RFC)
        .unwrap();
    let term = Terminate::for_segment(cause, 22, &echoed, None);
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, true), b"before");
    b.push(
        &UlpduHeader::header_only(Opcode::Terminate, 1, RdmapHeader::Terminate(term)),
        &[],
    );
    b.push(&write(0x100, 0x1000, true), &[1; 8]);
    b.push(&send(2, 0, true), b"after");
    let (dec, o) = go(&b, IRD, &mut mem());
    assert!(o.terms.is_empty(), "a TERMINATE is never answered");
    assert_eq!(o.events.len(), 2);
    assert_eq!(o.events[1], Ev::PeerTerm(Some(term)));
    assert_eq!(o.placed.len(), 1);
    assert_eq!(dec.state(), RxState::PeerTerminated);

    // A Terminate whose MSN and MO are bogus is still the peer's TERMINATE... and one whose
    // headers do not decode is reported as undecodable; neither is answered.
    let mut good = vec![0u8; 18 + 4];
    UlpduHeader::header_only(
        Opcode::Terminate,
        77,
        RdmapHeader::Terminate(Terminate::new(cause)),
    )
    .emit_into(&mut good, Config::RFC)
    .unwrap();
    let mut bad_layer = good.clone();
    bad_layer[18] = 0x70;
    let mut bad_mo = good.clone();
    bad_mo[17] = 1;
    let mut truncated = good.clone();
    truncated[20] = 0xE0; // M|D|R announced, nothing there
    for (u, decoded) in [
        (good.clone(), true),
        (bad_layer, false),
        (bad_mo, false),
        (truncated, false),
    ] {
        let mut b = plain(Config::RFC);
        b.raw(&u);
        b.push(&write(0x100, 0x1000, true), &[1; 8]);
        let (_, o) = go(&b, IRD, &mut mem());
        assert!(o.terms.is_empty());
        assert!(o.placed.is_empty());
        let expect = if decoded {
            Some(Terminate::new(cause))
        } else {
            None
        };
        assert_eq!(o.events, vec![Ev::PeerTerm(expect)]);
    }
}

#[test]
fn nothing_after_the_first_error() {
    let mut b = plain(Config::RFC);
    b.push(&send(5, 0, true), b"bad msn");
    let first = b.bytes();
    let mut b2 = plain(Config::RFC);
    b2.push(&write(0x100, 0x1000, true), &[1; 8]);
    let mut dec = decoder(Framing::PLAIN, Config::RFC, IRD);
    let mut m = mem();
    let mut ev = RecEvents::default();
    let mut s = SliceRx::new(&first);
    assert!(dec.process(&mut s, &mut m, &mut ev).is_err());
    for _ in 0..3 {
        let second = b2.bytes();
        let mut s = SliceRx::new(&second);
        assert_eq!(dec.process(&mut s, &mut m, &mut ev), Ok(()));
        assert!(s.placed.is_empty());
        assert_eq!(s.pos, second.len(), "discarded");
    }
    assert!(ev.evs.is_empty());
}

#[test]
fn rfc7306_immediate_and_atomics() {
    let cfg = Config::RFC_7306;
    let a = AtomicRequest {
        op: AtomicOp::FetchAdd,
        req_id: 7,
        stag: 0x300,
        to: 0x3008,
        add_swap: 1,
        add_swap_mask: 0,
        compare: 0,
        compare_mask: 0,
    };
    let resp = AtomicResponse {
        req_id: 9,
        orig_value: 42,
    };
    let imm = ImmediateData(*b"12345678");
    let mut b = plain(cfg);
    b.push(
        &UlpduHeader::header_only(Opcode::ImmediateDataSe, 1, RdmapHeader::Immediate(imm)),
        &[],
    );
    b.push(
        &UlpduHeader::header_only(Opcode::AtomicRequest, 1, RdmapHeader::AtomicRequest(a)),
        &[],
    );
    b.push(&rreq(2, rr(8, 0x300, 0x3000)), &[]);
    b.push(
        &UlpduHeader::header_only(Opcode::AtomicResponse, 1, RdmapHeader::AtomicResponse(resp)),
        &[],
    );
    let mut m = mem();
    let (dec, o) = go(&b, IRD, &mut m);
    assert!(o.terms.is_empty(), "{o:?}");
    assert_eq!(
        o.events,
        vec![
            Ev::Msg(MessageDone {
                opcode: Opcode::ImmediateDataSe,
                msn: 1,
                len: 0,
                inval_stag: None,
                solicited: true,
                imm: Some(imm)
            }),
            Ev::AtomicReq(a),
            Ev::Read(rr(8, 0x300, 0x3000)),
            Ev::AtomicResp(resp),
        ]
    );
    assert_eq!(
        dec.ddp().ird_outstanding(),
        2,
        "atomics share IRD with reads"
    );

    // Misaligned atomic TO: 0/2/0x07 (RFC 7306 §8.2); no access right: 0/1/0x02.
    for (to, stag, cause) in [
        (
            0x3004,
            0x300,
            cause_rdmap(RdmapError::RemoteOperation(
                OperationError::CatastrophicStream,
            )),
        ),
        (
            0x1000,
            0x100,
            cause_rdmap(RdmapError::RemoteProtection(ProtectionError::AccessRights)),
        ),
    ] {
        let mut b = plain(cfg);
        b.push(
            &UlpduHeader::header_only(
                Opcode::AtomicRequest,
                1,
                RdmapHeader::AtomicRequest(AtomicRequest { to, stag, ..a }),
            ),
            &[],
        );
        let (_, o) = go(&b, IRD, &mut mem());
        let t = assert_term(&o, &b, 0, cause, true);
        assert!(t.rdma_header.is_none());
    }

    // Immediate Data without a posted buffer: 1/2/0x02.
    let mut m = mem();
    m.posted = 0;
    let mut b = plain(cfg);
    b.push(
        &UlpduHeader::header_only(Opcode::ImmediateData, 1, RdmapHeader::Immediate(imm)),
        &[],
    );
    let (_, o) = go(&b, IRD, &mut m);
    assert_term(
        &o,
        &b,
        0,
        cause_ddp(DdpError::Untagged(UntaggedError::NoBuffer)),
        true,
    );
}

#[test]
fn rdmac_versions_for_mpa_rev_0() {
    let cfg = Config::for_mpa_rev(0, true);
    assert_eq!(cfg, Config::RDMAC);
    let mut b = plain(cfg);
    b.push(&send(1, 0, true), b"v0");
    let (_, o) = go(&b, IRD, &mut mem());
    assert!(o.terms.is_empty());
    assert_eq!(o.events.len(), 1);
    // An RFC-version segment on an RDMAC connection: bad DV.
    let mut b = plain(Config::RFC);
    b.push(&send(1, 0, true), b"v1");
    let (_, o) = run_once(Framing::PLAIN, cfg, IRD, &mut mem(), &b.bytes());
    assert_term(
        &o,
        &b,
        0,
        cause_ddp(DdpError::Untagged(UntaggedError::InvalidVersion)),
        true,
    );
}

// ---------------------------------------------------------------------------------------
// Properties.

/// One operation of a generated stream.
#[derive(Debug, Clone)]
enum Op {
    /// A Send of this many octets in segments of at most `seg` octets.
    Send(usize, usize),
    /// An RDMA Write of `len` octets at MR 0x100 offset `off`, segments of at most `seg`.
    Write(u64, usize, usize),
    ReadReq(u32),
    /// Arbitrary octets as a whole ULPDU (mostly invalid).
    Junk(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..1500, 1usize..700).prop_map(|(n, s)| Op::Send(n, s)),
        4 => (0u64..0x8000, 0usize..1500, 1usize..700).prop_map(|(o, n, s)| Op::Write(o, n, s)),
        1 => (0u32..64).prop_map(Op::ReadReq),
        1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Op::Junk),
    ]
}

fn build(framing: Framing, ops: &[Op]) -> Builder {
    let mut b = Builder::new(framing, Config::RFC);
    let mut msn = 1;
    let mut rmsn = 1;
    for o in ops {
        match o {
            Op::Send(n, seg) => {
                let p = pattern(*n, msn as u8);
                let mut mo = 0;
                loop {
                    let k = (*n - mo).min(*seg);
                    let last = mo + k == *n;
                    b.push(&send(msn, mo as u32, last), &p[mo..mo + k]);
                    mo += k;
                    if last {
                        break;
                    }
                }
                msn += 1;
            }
            Op::Write(off, n, seg) => {
                let p = pattern(*n, *off as u8);
                let mut done = 0;
                loop {
                    let k = (*n - done).min(*seg);
                    let last = done + k == *n;
                    b.push(
                        &write(0x100, 0x1000 + off + done as u64, last),
                        &p[done..done + k],
                    );
                    done += k;
                    if last {
                        break;
                    }
                }
            }
            Op::ReadReq(size) => {
                b.push(&rreq(rmsn, rr(*size, 0x300, 0x3000)), &[]);
                rmsn += 1;
            }
            Op::Junk(u) => {
                b.raw(u);
            }
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// P2: any chunking, including 1-octet, gives the same merged placements, events and
    /// TERMINATE, with or without markers and CRC, and with an optional bit flip.
    #[test]
    fn resegmentation_invariance(
        ops in proptest::collection::vec(op(), 1..8),
        markers: bool,
        crc: bool,
        sizes in proptest::collection::vec(1usize..600, 1..6),
        flip in proptest::option::of((any::<prop::sample::Index>(), 0u8..8)),
    ) {
        let framing = Framing { markers, crc };
        let b = build(framing, &ops);
        let mut data = b.bytes();
        if let Some((i, bit)) = flip {
            if !data.is_empty() {
                let i = i.index(data.len());
                data[i] ^= 1 << bit;
            }
        }
        let (_, whole) = run_once(framing, Config::RFC, IRD, &mut mem(), &data);
        let mut d = decoder(framing, Config::RFC, IRD);
        let chunked = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &sizes);
        let mut d = decoder(framing, Config::RFC, IRD);
        let ones = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &[1]);
        prop_assert_eq!(&whole, &chunked);
        prop_assert_eq!(&whole, &ones);
        prop_assert!(whole.terms.len() <= 1);
        prop_assert_eq!(whole.consumed, data.len());
        if flip.is_none() && !ops.iter().any(|o| matches!(o, Op::Junk(_) | Op::ReadReq(_))) {
            prop_assert!(whole.terms.is_empty());
        }
    }

    /// P4: for any (STag, TO, len), any MR table and any outstanding Reads, nothing lands
    /// outside a target the local side granted (checked on every place() call by `run`: a
    /// remote-write MR for a Write, a posted Read's sink for a Read Response), a refused
    /// segment places nothing, and the octets placed are exactly those of the segments an
    /// independent model of RFC 5041 §7.1 and RFC 5040 §5.2 accepts.
    #[test]
    fn no_placement_outside_mrs(
        mrs in proptest::collection::vec(
            (0u32..6, prop_oneof![Just(0u64), any::<u64>(), (u64::MAX - 5000)..=u64::MAX],
             0u64..5000, 0u8..16, any::<bool>(), any::<bool>()),
            0..5),
        reads in proptest::collection::vec(
            (0u32..6, prop_oneof![Just(0u64), 0u64..6000, (u64::MAX - 6000)..=u64::MAX],
             0u32..1200),
            0..4),
        segs in proptest::collection::vec(
            (0u8..3, 0u32..6, prop_oneof![any::<u64>(), 0u64..6000, (u64::MAX - 6000)..=u64::MAX],
             0usize..1200, any::<bool>()),
            1..8),
        sizes in proptest::collection::vec(1usize..300, 1..4),
    ) {
        let table: Vec<Mr> = mrs
            .iter()
            .map(|&(stag, base, len, rights, assoc, valid)| Mr {
                assoc,
                valid,
                ..Mr::new(stag, base, len, rights)
            })
            .collect();
        let sinks: Vec<ReadSink> = reads
            .iter()
            .map(|&(stag, to, len)| sink(stag, to, len))
            .filter(|s| s.to.checked_add(u64::from(s.len)).is_some())
            .collect();
        let granted = |stag: u32, to: u64, n: usize, acc: u8| {
            n == 0
                || table.iter().find(|m| m.stag == stag).is_some_and(|m| {
                    m.valid && m.assoc && m.rights & acc != 0 && m.contains(to, n as u64)
                })
        };
        // The model: kind 0 a Write, 1 a Read Response as generated, 2 a Read Response
        // that continues the oldest Read at its next octet.
        let mut orq: std::collections::VecDeque<(ReadSink, u64)> =
            sinks.iter().map(|s| (*s, 0)).collect();
        let mut b = plain(Config::RFC);
        let mut accepted = 0usize;
        let mut refused = false;
        for &(kind, stag, to, n, last) in &segs {
            let (stag, to) = match (kind, orq.front()) {
                (2, Some((s, got))) => (s.stag, s.to + got),
                _ => (stag, to),
            };
            let ok = if kind == 0 {
                granted(stag, to, n, RW)
            } else {
                match orq.front_mut() {
                    None => false,
                    Some((s, got)) => {
                        let left = u64::from(s.len) - *got;
                        let fits = n == 0
                            || (stag == s.stag && to == s.to + *got && n as u64 <= left);
                        let ok = fits && (!last || n as u64 == left) && granted(stag, to, n, LW);
                        if ok {
                            *got += n as u64;
                        }
                        ok
                    }
                }
            };
            if kind != 0 && ok && last {
                orq.pop_front();
            }
            let h = if kind == 0 { write(stag, to, last) } else { rresp(stag, to, last) };
            b.push(&h, &pattern(n, 1));
            if !refused && ok {
                accepted += n;
            }
            refused |= !ok;
        }
        let data = b.bytes();
        let mut m = MockMem::with_mrs(&table);
        let mut d = decoder(Framing::PLAIN, Config::RFC, IRD);
        post_reads(&mut d, &mut m, &sinks);
        let o = run(&mut d, &mut m, &mut RecEvents::default(), &data, &sizes);
        let placed: usize = o.placed.iter().map(|(_, d)| d.len()).sum();
        prop_assert_eq!(placed, accepted);
        prop_assert_eq!(o.terms.len(), usize::from(refused));
    }

    /// P5: arbitrary octets after a valid start never panic, produce at most one TERMINATE,
    /// and nothing is placed or reported after it.
    #[test]
    fn arbitrary_bytes_after_valid_start(
        ops in proptest::collection::vec(op(), 0..3),
        tail in proptest::collection::vec(any::<u8>(), 0..400),
        markers: bool,
        crc: bool,
        rfc7306: bool,
        sizes in proptest::collection::vec(1usize..64, 1..4),
    ) {
        let framing = Framing { markers, crc };
        let cfg = if rfc7306 { Config::RFC_7306 } else { Config::RFC };
        let mut data = build(framing, &ops).bytes();
        data.extend_from_slice(&tail);
        let mut d = decoder(framing, cfg, IRD);
        let mut ev = RecEvents::default();
        let o = run(&mut d, &mut mem(), &mut ev, &data, &sizes);
        prop_assert!(o.terms.len() <= 1);
        prop_assert_eq!(o.consumed, data.len());
        let mut d = decoder(framing, cfg, IRD);
        let ones = run(&mut d, &mut mem(), &mut RecEvents::default(), &data, &[1]);
        prop_assert_eq!(o, ones);
    }
}

/// A repeated MPA Request, as a hostile peer sends it (the VM's test_hostile.py): the MPA Request
/// again in Full Operation. It frames as an FPDU of ULPDU_Length 0x4D50 whose header (ctrl
/// `41 20`: RV 0) is complete in the 22 octets that follow. Nothing is placed or reported
/// while the FPDU is incomplete (with CRC its header cannot be believed before the CRC is
/// checked; without CRC the verdict is also given at the FPDU's end), and once the peer has
/// sent the rest of it the TERMINATE is RDMAP 0/2/0x05.
#[test]
fn mpa_request_in_full_operation_is_terminated() {
    let mut req = b"MPA ID Req Frame".to_vec();
    req.extend_from_slice(&[0x10, 2, 0, 4, 0, 1, 0, 1]);
    let (_, o) = run_once(Framing::PLAIN, Config::RFC, IRD, &mut mem(), &req);
    assert!(
        o.placed.is_empty() && o.events.is_empty() && o.terms.is_empty(),
        "{o:?}"
    );
    // 2 + 0x4D50 octets, pad to 4, CRC field: 19800 octets in all.
    req.resize(19800, 0);
    let (_, o) = run_once(Framing::PLAIN, Config::RFC, IRD, &mut mem(), &req);
    assert!(o.placed.is_empty() && o.events.is_empty(), "{o:?}");
    assert_eq!(o.terms.len(), 1, "{o:?}");
    assert_eq!(
        o.terms[0].cause,
        cause_rdmap(RdmapError::RemoteOperation(OperationError::InvalidVersion))
    );
}

/// The `ddp_rx` fuzz target's invariants (`ddp_util::ddp_rx_case`) over its stored corpus
/// (`userspace/fuzz/corpus/ddp_rx`): a smoke run of the fuzzer's check in every `cargo
/// test`, so a corpus entry that once found a bug keeps testing for it.
#[test]
fn fuzz_corpus_ddp_rx_replays_clean() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ddp_rx");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).expect("corpus file");
        ddp_rx_case(&data);
        // The same stream under every configuration and number of outstanding Reads.
        if let [_, rest @ ..] = data.as_slice() {
            for sel in 0..64u8 {
                let mut v = vec![sel];
                v.extend_from_slice(rest);
                ddp_rx_case(&v);
            }
        }
        n += 1;
    }
    assert!(n >= 8, "only {n} corpus entries in {}", dir.display());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The fuzz target's check on generated streams: a valid start (Sends, Writes, Read
    /// Requests and Read Responses for the outstanding Reads) with arbitrary octets after
    /// it, under any configuration the selector octet chooses.
    #[test]
    fn fuzz_case_on_generated_streams(
        sel: u8,
        chunk: u8,
        ird: u8,
        ops in proptest::collection::vec(op(), 0..4),
        rresp_segs in 0usize..3,
        tail in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let framing = Framing { markers: sel & 1 != 0, crc: sel & 2 != 0 };
        let mut b = build(framing, &ops);
        // Read Responses filling the first outstanding Read of ddp_rx_case (0x800 octets
        // into 0x200 at 0x2000) in `rresp_segs` segments, when the selector posted it.
        if let Some(seg) = 0x800usize.checked_div(rresp_segs) {
            let p = pattern(0x800, 5);
            let mut done = 0;
            while done < 0x800 {
                let n = seg.min(0x800 - done);
                let last = done + n == 0x800;
                b.push(&rresp(0x200, 0x2000 + done as u64, last), &p[done..done + n]);
                done += n;
            }
        }
        let mut data = vec![sel, chunk, ird];
        data.extend_from_slice(&b.bytes());
        data.extend_from_slice(&tail);
        ddp_rx_case(&data);
    }
}
