// SPDX-License-Identifier: GPL-2.0

//! MPA TX framer and RX deframer: golden vectors, error paths, resegmentation, round trips.

#[path = "common/mpa_util.rs"]
mod mpa_util;

use mpa_util::{crc32c, hex, vectors, Ev, MockRx, SliceRx, VecTx};
use proptest::prelude::*;
use rsiw_core::engine::mpa_rx::{MpaRx, RxConfig, RxError, UlpduReceiver};
use rsiw_core::engine::mpa_tx::{MpaTx, TxConfig, TxError};
use rsiw_core::engine::stream::{PlaceError, RxStream};
use rsiw_core::wire::crc::CRC32C_RESIDUE;
use rsiw_core::wire::marker::FpduPtrBase;
use rsiw_core::wire::mpa::MpaErrorCode;

fn txc(markers: bool, crc: bool) -> TxConfig {
    TxConfig {
        markers,
        crc,
        fpduptr: FpduPtrBase::UlpduLength,
        mulpdu: 64768,
    }
}

fn rxc(markers: bool, crc: bool) -> RxConfig {
    RxConfig {
        markers,
        crc,
        fpduptr: FpduPtrBase::UlpduLength,
    }
}

/// The FPDU vectors: (offset, markers, wire bytes, ULPDU).
fn fpdu_vectors() -> Vec<(u32, bool, Vec<u8>, Vec<u8>)> {
    let v = vectors();
    v["fpdu_vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let wire = hex(f["fpdu_hex"].as_str().unwrap());
            let (off, markers) = match f["marker_stream_offset"].as_u64() {
                Some(o) => (o as u32, true),
                None => (0, false),
            };
            // Remove the marker(s) to get the marker-free FPDU, then the ULPDU.
            let mut plain = Vec::new();
            for (pos, &b) in (off..).zip(wire.iter()) {
                if !(markers && pos % 512 < 4) {
                    plain.push(b);
                }
            }
            let len = u16::from_be_bytes([plain[0], plain[1]]) as usize;
            (off, markers, wire, plain[2..2 + len].to_vec())
        })
        .collect()
}

#[test]
fn tx_reproduces_golden_fpdus() {
    let vs = fpdu_vectors();
    assert_eq!(vs.len(), 5);
    for (i, (off, markers, wire, ulpdu)) in vs.iter().enumerate() {
        // Header octets from the engine, the rest as payload from the shell.
        let split = ulpdu.len().min(18);
        let mut tx = MpaTx::at_stream_offset(txc(*markers, true), *off).unwrap();
        assert_eq!(tx.wire_len(ulpdu.len() as u16), wire.len());
        let mut sink = VecTx::with_payload(&ulpdu[split..]);
        let n = tx
            .send(&mut sink, &ulpdu[..split], ulpdu.len() - split)
            .unwrap();
        assert_eq!(&sink.out, wire, "vector {i}");
        assert_eq!(n, wire.len());
        assert_eq!(tx.stream_pos(), off + wire.len() as u32);
        assert_eq!(crc32c(wire), CRC32C_RESIDUE);
    }
}

#[test]
fn rfc_fig6_marker_splits_payload() {
    let (off, _, wire, ulpdu) = fpdu_vectors().remove(1);
    let mut tx = MpaTx::at_stream_offset(txc(true, true), off).unwrap();
    let mut sink = VecTx::with_payload(&ulpdu[18..]);
    tx.send(&mut sink, &ulpdu[..18], ulpdu.len() - 18).unwrap();
    assert_eq!(sink.out, wire);
    // Marker at 0x200 = 20 octets into the FPDU: after 2 length + 18 header octets, so the
    // payload is not split here; with a 10-octet header it is.
    assert_eq!(sink.payload_calls, vec![24]);
    let mut tx = MpaTx::at_stream_offset(txc(true, true), off).unwrap();
    let mut sink = VecTx::with_payload(&ulpdu[10..]);
    tx.send(&mut sink, &ulpdu[..10], ulpdu.len() - 10).unwrap();
    assert_eq!(sink.out, wire);
    assert_eq!(sink.payload_calls, vec![8, 24]);
}

#[test]
fn rx_decodes_golden_fpdus_any_chunking() {
    for (off, markers, wire, ulpdu) in fpdu_vectors() {
        for chunk in [1, 2, 3, 5, 7, wire.len()] {
            let mut rx = MpaRx::at_stream_offset(rxc(markers, true), off).unwrap();
            let mut m = MockRx::default();
            for c in wire.chunks(chunk) {
                let mut s = SliceRx::new(c);
                rx.process(&mut s, &mut m).unwrap();
                assert_eq!(s.available(), 0);
            }
            assert_eq!(
                m.events,
                vec![
                    Ev::Begin(ulpdu.len() as u16),
                    Ev::Data(ulpdu.clone()),
                    Ev::End(true)
                ]
            );
            assert!(rx.at_fpdu_boundary());
            assert_eq!(rx.fpdus(), 1);
            assert_eq!(rx.stream_pos(), off + wire.len() as u32);
        }
    }
}

#[test]
fn tx_rejects_ulpdu_above_mulpdu() {
    let mut tx = MpaTx::new(TxConfig {
        mulpdu: 1442,
        ..txc(true, true)
    });
    let mut sink = VecTx::with_payload(&[0u8; 2000]);
    assert_eq!(
        tx.send(&mut sink, &[0u8; 14], 1429),
        Err(TxError::TooLong {
            len: 1443,
            mulpdu: 1442
        })
    );
    assert!(sink.out.is_empty());
    assert_eq!(tx.stream_pos(), 0);
    assert!(tx.send(&mut sink, &[0u8; 14], 1428).is_ok());
    tx.set_mulpdu(65535);
    assert_eq!(
        tx.send(&mut sink, &[], 64769),
        Err(TxError::TooLong {
            len: 64769,
            mulpdu: 64768
        })
    );
    let mut sink = VecTx::default();
    assert_eq!(
        tx.send_framed(&mut sink, &mut [0u8; 1], 0),
        Err(TxError::TooLong {
            len: 0,
            mulpdu: 64768
        })
    );
    assert!(sink.out.is_empty());
    assert!(MpaTx::at_stream_offset(txc(true, true), 2).is_none());
    assert!(MpaRx::at_stream_offset(rxc(true, true), 6).is_none());
}

#[test]
fn crc_off_sends_zero_trailer_and_accepts_anything() {
    let mut tx = MpaTx::new(txc(false, false));
    let mut sink = VecTx::with_payload(b"abc");
    tx.send(&mut sink, b"", 3).unwrap();
    assert_eq!(sink.out, vec![0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 0]);
    let mut wire = sink.out.clone();
    wire[8..12].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let mut rx = MpaRx::new(rxc(false, false));
    let mut m = MockRx::default();
    rx.process(&mut SliceRx::new(&wire), &mut m).unwrap();
    assert_eq!(m.ulpdus(), vec![b"abc".to_vec()]);
}

fn build_stream(markers: bool, crc: bool, ulpdus: &[Vec<u8>], off: u32) -> Vec<u8> {
    let mut tx = MpaTx::at_stream_offset(txc(markers, crc), off).unwrap();
    let mut out = Vec::new();
    for u in ulpdus {
        let h = u.len().min(18);
        let mut sink = VecTx::with_payload(&u[h..]);
        tx.send(&mut sink, &u[..h], u.len() - h).unwrap();
        out.extend_from_slice(&sink.out);
    }
    out
}

#[test]
fn crc_mismatch_is_error_2_and_sticky() {
    let ulpdus = vec![vec![1u8; 30], vec![2u8; 40]];
    let wire = build_stream(true, true, &ulpdus, 0);
    let first = 4 + 2 + 30 + 4; // marker, length, ULPDU, (no pad), CRC
    for flip in 0..wire.len() {
        let mut bad = wire.clone();
        bad[flip] ^= 0x10;
        let mut rx = MpaRx::new(rxc(true, true));
        let mut m = MockRx::default();
        let r = rx.process(&mut SliceRx::new(&bad), &mut m);
        // Flipping a length may make the FPDU long enough to swallow the rest (then the
        // deframer waits for more octets), or short enough to misframe.
        if flip == 4 || flip == 5 || flip == first || flip == first + 1 {
            match r {
                Ok(()) => assert!(!rx.at_fpdu_boundary()),
                Err(RxError::Mpa(c)) => assert_eq!(c, MpaErrorCode::CrcMismatch),
                Err(e) => panic!("flip {flip}: {e:?}"),
            }
            continue;
        }
        let err = r.unwrap_err();
        // Also a flipped leading-marker FPDUPTR: the CRC is bad, so error 2 (not 3).
        assert_eq!(err, RxError::Mpa(MpaErrorCode::CrcMismatch), "flip {flip}");
        assert!(rx.is_halted());
        assert_eq!(
            rx.process(&mut SliceRx::new(&wire), &mut m),
            Err(RxError::Halted)
        );
        if flip == 2 || flip == 3 {
            // The bad leading marker suppressed delivery of the whole FPDU.
            assert!(m.events.is_empty(), "flip {flip}");
        } else {
            // A CRC error ends the FPDU with crc_ok = false after its octets were delivered.
            assert_eq!(m.events.last(), Some(&Ev::End(false)), "flip {flip}");
        }
    }
}

#[test]
fn marker_mismatch_is_error_3() {
    // One 1000-octet ULPDU: markers at 0 (leading, 0) and 512 (FPDUPTR 508).
    let wire = build_stream(true, true, &[vec![7u8; 1000]], 0);
    assert_eq!(&wire[512..516], &[0, 0, 0x01, 0xFC]);
    // Wrong FPDUPTR, CRC recomputed so it is valid: error 3 after the CRC check.
    let mut bad = wire.clone();
    bad[515] = 0xF8;
    let len = bad.len();
    let c = crc32c(&bad[..len - 4]);
    bad[len - 4..].copy_from_slice(&c.to_le_bytes());
    let mut rx = MpaRx::new(rxc(true, true));
    let mut m = MockRx::default();
    assert_eq!(
        rx.process(&mut SliceRx::new(&bad), &mut m),
        Err(RxError::Mpa(MpaErrorCode::MarkerMismatch))
    );
    // Delivery stopped at the bad marker: 506 ULPDU octets before it.
    assert_eq!(
        m.events,
        vec![Ev::Begin(1000), Ev::Data(vec![7u8; 506]), Ev::End(false)]
    );
    // Same corruption with the stale CRC: error 2 wins (§8: 3 only when the CRC is valid).
    let mut bad2 = wire.clone();
    bad2[515] = 0xF8;
    let mut rx = MpaRx::new(rxc(true, true));
    assert_eq!(
        rx.process(&mut SliceRx::new(&bad2), &mut MockRx::default()),
        Err(RxError::Mpa(MpaErrorCode::CrcMismatch))
    );
    // Low 2 bits of FPDUPTR are treated as 0 (fix the CRC so only the bits differ).
    let mut ok = wire.clone();
    ok[515] = 0xFF;
    let c = crc32c(&ok[..len - 4]);
    ok[len - 4..].copy_from_slice(&c.to_le_bytes());
    let mut m = MockRx::default();
    MpaRx::new(rxc(true, true))
        .process(&mut SliceRx::new(&ok), &mut m)
        .unwrap();
    assert_eq!(m.ulpdus(), vec![vec![7u8; 1000]]);
    // Without CRC a mismatch is reported at once, with nothing after the marker consumed.
    let wire = build_stream(true, false, &[vec![7u8; 1000]], 0);
    let mut bad = wire.clone();
    bad[514] = 0x11;
    let mut rx = MpaRx::new(rxc(true, false));
    let mut s = SliceRx::new(&bad);
    let mut m = MockRx::default();
    assert_eq!(
        rx.process(&mut s, &mut m),
        Err(RxError::Mpa(MpaErrorCode::MarkerMismatch))
    );
    assert_eq!(s.pos, 516);
    assert_eq!(m.events, vec![Ev::Begin(1000), Ev::Data(vec![7u8; 506])]);
    // A leading marker must be 0.
    let mut bad = wire.clone();
    bad[3] = 4;
    let mut rx = MpaRx::new(rxc(true, false));
    assert_eq!(
        rx.process(&mut SliceRx::new(&bad), &mut MockRx::default()),
        Err(RxError::Mpa(MpaErrorCode::MarkerMismatch))
    );
}

#[test]
fn seed_fpduptr_convention() {
    // Seed: FPDUPTR counts from the leading marker, so the marker at 512 carries 512.
    let cfg = TxConfig {
        fpduptr: FpduPtrBase::FpduStart,
        ..txc(true, true)
    };
    let mut tx = MpaTx::new(cfg);
    let mut sink = VecTx::with_payload(&[3u8; 1000]);
    tx.send(&mut sink, &[], 1000).unwrap();
    assert_eq!(&sink.out[512..516], &[0, 0, 0x02, 0x00]);
    let seed_rx = RxConfig {
        fpduptr: FpduPtrBase::FpduStart,
        ..rxc(true, true)
    };
    let mut m = MockRx::default();
    MpaRx::new(seed_rx)
        .process(&mut SliceRx::new(&sink.out), &mut m)
        .unwrap();
    assert_eq!(m.ulpdus(), vec![vec![3u8; 1000]]);
    // An RFC receiver sees a mismatch (the CRC is valid): error 3.
    let r =
        MpaRx::new(rxc(true, true)).process(&mut SliceRx::new(&sink.out), &mut MockRx::default());
    assert_eq!(r, Err(RxError::Mpa(MpaErrorCode::MarkerMismatch)));
    // Without a leading marker both conventions agree (seed Fig 6 vector).
    let (off, _, wire, ulpdu) = fpdu_vectors().remove(3);
    let mut m = MockRx::default();
    MpaRx::at_stream_offset(seed_rx, off)
        .unwrap()
        .process(&mut SliceRx::new(&wire), &mut m)
        .unwrap();
    assert_eq!(m.ulpdus(), vec![ulpdu]);
}

#[test]
fn receiver_errors_and_stall() {
    let wire = build_stream(false, true, &[vec![1u8; 10], vec![2u8; 20]], 0);
    let mut m = MockRx {
        fail_begin_len: Some(20),
        ..Default::default()
    };
    let mut rx = MpaRx::new(rxc(false, true));
    let mut s = SliceRx::new(&wire);
    assert_eq!(
        rx.process(&mut s, &mut m),
        Err(RxError::Receiver("begin refused"))
    );
    assert_eq!(m.ulpdus(), vec![vec![1u8; 10]]);
    assert_eq!(rx.process(&mut s, &mut m), Err(RxError::Halted));
    let mut m = MockRx {
        max_take: Some(3),
        ..Default::default()
    };
    let mut rx = MpaRx::new(rxc(false, true));
    assert_eq!(
        rx.process(&mut SliceRx::new(&wire), &mut m),
        Err(RxError::Stalled)
    );
    assert_eq!(m.data_calls, 1);
}

#[test]
fn zero_length_ulpdu_and_place() {
    struct Placer(Vec<u8>);
    impl UlpduReceiver for Placer {
        type Error = ();
        fn begin(&mut self, _len: u16) -> Result<(), ()> {
            Ok(())
        }
        fn data<S: RxStream>(&mut self, u: &mut S) -> Result<(), ()> {
            let n = u.available();
            let t = rsiw_core::engine::stream::PlaceTarget::Tagged {
                stag: 1,
                to: 0,
                access: rsiw_core::engine::rx_shell::Access::RemoteWrite,
            };
            u.place(&t, n, None).map_err(|_| ())
        }
        fn end(&mut self, ok: bool) -> Result<(), ()> {
            self.0.push(ok as u8);
            Ok(())
        }
    }
    let wire = build_stream(true, true, &[vec![], vec![9u8; 600], vec![]], 0);
    let mut p = Placer(Vec::new());
    let mut s = SliceRx::new(&wire);
    MpaRx::new(rxc(true, true)).process(&mut s, &mut p).unwrap();
    assert_eq!(p.0, vec![1, 1, 1]);
    let placed: Vec<u8> = s.placed.iter().flat_map(|(_, d)| d.clone()).collect();
    assert_eq!(placed, vec![9u8; 600]);
    // A failing placement surfaces as the receiver's error.
    let mut s = SliceRx::new(&wire);
    s.fail_place = Some(PlaceError::Failed);
    assert_eq!(
        MpaRx::new(rxc(true, true)).process(&mut s, &mut Placer(Vec::new())),
        Err(RxError::Receiver(()))
    );
}

fn arb_ulpdus() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(any::<u8>(), 0..1600),
        ],
        1..8,
    )
}

fn feed_chunked(
    rx: &mut MpaRx,
    wire: &[u8],
    cuts: &[usize],
    m: &mut MockRx,
) -> Result<(), RxError<&'static str>> {
    let mut pos = 0;
    let mut i = 0;
    while pos < wire.len() {
        let n = cuts
            .get(i)
            .copied()
            .unwrap_or(wire.len())
            .max(1)
            .min(wire.len() - pos);
        i += 1;
        let mut s = SliceRx::new(&wire[pos..pos + n]);
        rx.process(&mut s, m)?;
        assert_eq!(s.available(), 0);
        pos += n;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// TX -> RX round trip over random markers/CRC, stream offsets and chunkings; every FPDU
    /// has the CRC residue; 1-octet feeding gives the same events as one feed.
    #[test]
    fn tx_rx_round_trip(
        ulpdus in arb_ulpdus(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        phase in 0u32..128,
        high in any::<bool>(),
        cuts in proptest::collection::vec(1usize..700, 0..40),
    ) {
        // Offsets near 2^32 exercise wrapping positions.
        let off = if high { 0u32.wrapping_sub(4096) + phase * 4 } else { phase * 4 };
        let mut tx = MpaTx::at_stream_offset(txc(markers, crc), off).unwrap();
        let mut wire = Vec::new();
        for u in &ulpdus {
            let h = u.len().min(14);
            let expect_len = tx.wire_len(u.len() as u16);
            let mut sink = VecTx::with_payload(&u[h..]);
            let n = tx.send(&mut sink, &u[..h], u.len() - h).unwrap();
            prop_assert_eq!(n, sink.out.len());
            prop_assert_eq!(n, expect_len);
            prop_assert_eq!(n % 4, 0);
            if crc {
                prop_assert_eq!(crc32c(&sink.out), CRC32C_RESIDUE);
            }
            wire.extend_from_slice(&sink.out);
        }
        let mut whole = MockRx::default();
        let mut rx = MpaRx::at_stream_offset(rxc(markers, crc), off).unwrap();
        rx.process(&mut SliceRx::new(&wire), &mut whole).unwrap();
        prop_assert_eq!(whole.ulpdus(), ulpdus.clone());
        prop_assert_eq!(rx.stream_pos(), tx.stream_pos());

        let mut chunked = MockRx::default();
        let mut rx = MpaRx::at_stream_offset(rxc(markers, crc), off).unwrap();
        feed_chunked(&mut rx, &wire, &cuts, &mut chunked).unwrap();
        prop_assert_eq!(&chunked.events, &whole.events);

        let mut ones = MockRx::default();
        let mut rx = MpaRx::at_stream_offset(rxc(markers, crc), off).unwrap();
        feed_chunked(&mut rx, &wire, &vec![1; wire.len()], &mut ones).unwrap();
        prop_assert_eq!(&ones.events, &whole.events);
    }

    /// `send_framed` (length and header handed over in one buffer) writes the same octets,
    /// in the same payload pieces, and moves the stream position as `send` does, markers
    /// inside the FPDU or not; a ULPDU above MULPDU is refused alike, writing nothing.
    #[test]
    fn send_framed_matches_send(
        ulpdus in arb_ulpdus(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        phase in 0u32..128,
        high in any::<bool>(),
        mulpdu in 16u16..2000,
    ) {
        let off = if high { 0u32.wrapping_sub(4096) + phase * 4 } else { phase * 4 };
        let cfg = TxConfig { mulpdu, ..txc(markers, crc) };
        let mut a = MpaTx::at_stream_offset(cfg, off).unwrap();
        let mut b = MpaTx::at_stream_offset(cfg, off).unwrap();
        for u in &ulpdus {
            let h = u.len().min(14);
            let mut sa = VecTx::with_payload(&u[h..]);
            let ra = a.send(&mut sa, &u[..h], u.len() - h);
            let mut framed = vec![0xa5u8; 2];
            framed.extend_from_slice(&u[..h]);
            let mut sb = VecTx::with_payload(&u[h..]);
            let rb = b.send_framed(&mut sb, &mut framed, u.len() - h);
            prop_assert_eq!(ra, rb);
            prop_assert_eq!(&sa.out, &sb.out);
            prop_assert_eq!(&sa.payload_calls, &sb.payload_calls);
            prop_assert_eq!(a.stream_pos(), b.stream_pos());
            if rb.is_err() {
                prop_assert!(sb.out.is_empty());
            }
        }
    }

    /// Any single bit flip in a CRC-protected stream is detected (error 2 or, when the flip
    /// hits a length or marker, 2 or 3), resegmentation notwithstanding, and nothing after
    /// the damaged FPDU is delivered.
    #[test]
    fn bit_flips_are_detected(ulpdus in arb_ulpdus(), markers in any::<bool>(), bit in any::<proptest::sample::Index>(), cuts in proptest::collection::vec(1usize..300, 0..20)) {
        let wire = build_stream(markers, true, &ulpdus, 0);
        let mut bad = wire.clone();
        let b = bit.index(wire.len() * 8);
        bad[b / 8] ^= 1 << (b % 8);
        let mut rx = MpaRx::new(rxc(markers, true));
        let mut m = MockRx::default();
        let r = feed_chunked(&mut rx, &bad, &cuts, &mut m);
        let complete = m.ulpdus();
        prop_assert!(complete.len() <= ulpdus.len());
        prop_assert_eq!(&complete[..], &ulpdus[..complete.len()]);
        match r {
            Err(RxError::Mpa(c)) => prop_assert!(c == MpaErrorCode::CrcMismatch || c == MpaErrorCode::MarkerMismatch),
            // A flipped length can leave the stream mid-FPDU; FIN then is error 1.
            Ok(()) => prop_assert!(!rx.at_fpdu_boundary() && complete.len() < ulpdus.len()),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
    }

    /// The deframer never panics and never over-reads on arbitrary input.
    #[test]
    fn rx_never_panics(data in proptest::collection::vec(any::<u8>(), 0..3000), markers in any::<bool>(), crc in any::<bool>(), cuts in proptest::collection::vec(1usize..100, 0..40)) {
        let mut rx = MpaRx::new(rxc(markers, crc));
        let mut m = MockRx::default();
        let _ = feed_chunked(&mut rx, &data, &cuts, &mut m);
    }
}
