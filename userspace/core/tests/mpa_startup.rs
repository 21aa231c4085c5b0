// SPDX-License-Identifier: GPL-2.0

//! MPA startup negotiation (RFC 5044 §7.1, RFC 6581 §9, seed-003 draft, App. C Rev 0).

#[path = "common/mpa_util.rs"]
mod mpa_util;

use mpa_util::{hex, SliceRx};
use proptest::prelude::*;
use rsiw_core::engine::startup::*;
use rsiw_core::wire::marker::FpduPtrBase;
use rsiw_core::wire::mpa::*;

const BASIC: Config = Config {
    mode: Mode::Basic,
    crc: false,
    markers: false,
    large_fpdu: false,
    permissive_rev0: false,
};

fn enh(ird: u16, ord: u16, p2p: bool, rtr: RtrSet) -> Config {
    Config {
        mode: Mode::Enhanced(EnhancedConfig { ird, ord, p2p, rtr }),
        ..BASIC
    }
}

fn draft(rtr: bool) -> Config {
    Config {
        mode: Mode::DraftRtr { rtr },
        ..BASIC
    }
}

/// Moves all pending octets from `from` into `to`, `chunk` octets per feed; returns what
/// `to` did not consume.
fn pump(from: &mut Startup, to: &mut Startup, chunk: usize) -> Result<Vec<u8>, StartupError> {
    let bytes = from.tx_pending().to_vec();
    from.tx_advance(bytes.len());
    let mut used = 0;
    for c in bytes.chunks(chunk.max(1)) {
        let n = to.feed(c)?;
        used += n;
        if n < c.len() {
            break;
        }
    }
    Ok(bytes[used..].to_vec())
}

enum Decide<'a> {
    Accept(&'a [u8]),
    Reject(&'a [u8]),
}

fn run(ic: Config, ipd: &[u8], rc: Config, d: Decide<'_>, chunk: usize) -> (Startup, Startup) {
    let mut i = Startup::initiator(ic, ipd).unwrap();
    let mut r = Startup::responder(rc).unwrap();
    assert_eq!(i.status(), Status::AwaitingReply);
    assert_eq!(r.status(), Status::AwaitingRequest);
    let _ = pump(&mut i, &mut r, chunk);
    if r.status() != Status::RequestReceived {
        return (i, r);
    }
    match d {
        Decide::Accept(pd) => r.accept(pd).unwrap(),
        Decide::Reject(pd) => r.reject(pd).unwrap(),
    }
    let _ = pump(&mut r, &mut i, chunk);
    let _ = pump(&mut i, &mut r, chunk); // draft Rtr frame, if any
    (i, r)
}

#[test]
fn basic_exchange_with_private_data() {
    for chunk in [1, 3, 7, 1000] {
        let (i, r) = run(
            BASIC,
            b"hello responder",
            BASIC,
            Decide::Accept(b"hi"),
            chunk,
        );
        assert_eq!(i.status(), Status::Established);
        assert_eq!(r.status(), Status::Established);
        let (ni, nr) = (i.negotiated().unwrap(), r.negotiated().unwrap());
        assert_eq!(ni.private_data.as_slice(), b"hi");
        assert_eq!(nr.private_data.as_slice(), b"hello responder");
        assert_eq!(
            (ni.rev, nr.rev, ni.crc, ni.markers_tx, ni.markers_rx),
            (1, 1, false, false, false)
        );
        assert_eq!(ni.send_gate, SendGate::Free);
        assert_eq!(nr.send_gate, SendGate::AfterFirstRxFpdu);
        assert_eq!(ni.ddp_version(), 1);
        assert_eq!(ni.fpduptr, FpduPtrBase::UlpduLength);
        assert_eq!(ni.ird_ord, None);
        assert!(i.tx_pending().is_empty() && r.tx_pending().is_empty());
    }
}

#[test]
fn request_bytes_are_exact() {
    let i = Startup::initiator(
        Config {
            crc: true,
            markers: true,
            ..BASIC
        },
        b"ab",
    )
    .unwrap();
    let mut want = KEY_REQ.to_vec();
    want.extend_from_slice(&[0xC0, 1, 0, 2, b'a', b'b']);
    assert_eq!(i.tx_pending(), &want[..]);
    let i = Startup::initiator(
        enh(
            16,
            16,
            true,
            RtrSet {
                send: false,
                write: true,
                read: true,
            },
        ),
        b"",
    )
    .unwrap();
    // S, Rev 2, PD_Length 4, then A | IRD 16, C | D | ORD 16 (the RFC 6581 §9 layout).
    assert_eq!(&i.tx_pending()[16..], &hex("100200048010c010")[..]);
}

#[test]
fn crc_either_side_turns_it_on() {
    for (a, b) in [(false, false), (true, false), (false, true), (true, true)] {
        let (i, r) = run(
            Config { crc: a, ..BASIC },
            b"",
            Config { crc: b, ..BASIC },
            Decide::Accept(b""),
            5,
        );
        assert_eq!(i.negotiated().unwrap().crc, a || b);
        assert_eq!(r.negotiated().unwrap().crc, a || b);
        assert_eq!(i.negotiated().unwrap().tx_config(1000).crc, a || b);
        assert_eq!(r.negotiated().unwrap().rx_config().crc, a || b);
    }
}

#[test]
fn markers_follow_the_receivers_m_bit() {
    let (i, r) = run(
        Config {
            markers: true,
            ..BASIC
        },
        b"",
        BASIC,
        Decide::Accept(b""),
        4,
    );
    let (ni, nr) = (i.negotiated().unwrap(), r.negotiated().unwrap());
    // M in the Request: markers required from the Responder.
    assert!(nr.markers_tx && !nr.markers_rx && ni.markers_rx && !ni.markers_tx);
    let (i, r) = run(
        BASIC,
        b"",
        Config {
            markers: true,
            ..BASIC
        },
        Decide::Accept(b""),
        4,
    );
    let (ni, nr) = (i.negotiated().unwrap(), r.negotiated().unwrap());
    assert!(ni.markers_tx && !ni.markers_rx && nr.markers_rx && !nr.markers_tx);
    assert!(ni.tx_config(100).markers && nr.rx_config().markers);
}

#[test]
fn reject_with_private_data() {
    let (i, r) = run(BASIC, b"please", BASIC, Decide::Reject(b"go away"), 2);
    assert_eq!(r.status(), Status::Rejected);
    assert_eq!(i.status(), Status::Rejected);
    assert!(i.negotiated().is_none());
    let p = i.peer().unwrap();
    assert!(p.reject);
    assert_eq!(p.private_data.as_slice(), b"go away");
    // An enhanced reject carries the Responder's IRD/ORD for the ULP (RFC 6581 §9.1).
    let ic = enh(2, 8, true, RtrSet::ALL);
    let rc = enh(4, 6, false, RtrSet::only(RtrType::Read));
    let (i, _) = run(ic, b"", rc, Decide::Reject(b""), 9);
    assert_eq!(i.status(), Status::Rejected);
    let e = i.peer().unwrap().enhanced.unwrap();
    assert_eq!((e.ird, e.ord, e.p2p), (4, 6, true));
}

#[test]
fn enhanced_p2p_negotiation() {
    // Initiator offers all; Responder supports Write|Read: Write chosen.
    let ic = enh(8, 4, true, RtrSet::ALL);
    let rc = enh(
        16,
        2,
        false,
        RtrSet {
            send: false,
            write: true,
            read: true,
        },
    );
    let (i, r) = run(ic, b"ulp", rc, Decide::Accept(b"ok"), 3);
    assert_eq!(i.status(), Status::Established);
    let (ni, nr) = (i.negotiated().unwrap(), r.negotiated().unwrap());
    assert_eq!((ni.rev, nr.rev), (2, 2));
    assert!(ni.p2p && nr.p2p);
    assert_eq!(ni.rtr, Some(RtrType::Write));
    assert_eq!(nr.rtr, Some(RtrType::Write));
    assert_eq!(ni.send_gate, SendGate::RtrFirst(RtrType::Write));
    assert_eq!(nr.send_gate, SendGate::AfterFirstRxFpdu);
    // Responder: IRD = min(16, initiator ORD 4) = 4; ORD = min(2, initiator IRD 8) = 2.
    assert_eq!(
        nr.ird_ord,
        Some(IrdOrd {
            ird: 4,
            ord: 2,
            peer_ird: 8,
            peer_ord: 4
        })
    );
    // Initiator: ORD <= responder IRD, IRD >= responder ORD.
    assert_eq!(
        ni.ird_ord,
        Some(IrdOrd {
            ird: 8,
            ord: 4,
            peer_ird: 4,
            peer_ord: 2
        })
    );
    // Private Data excludes the enhanced block.
    assert_eq!(ni.private_data.as_slice(), b"ok");
    assert_eq!(nr.private_data.as_slice(), b"ulp");
    // The Reply advertises only the chosen type.
    let e = i.peer().unwrap().enhanced.unwrap();
    assert_eq!(e.rtr, RtrSet::only(RtrType::Write));
}

#[test]
fn read_rtr_raises_responder_ird_to_one() {
    let ic = enh(4, 0, true, RtrSet::only(RtrType::Read));
    let rc = enh(4, 4, false, RtrSet::ALL);
    let (i, r) = run(ic, b"", rc, Decide::Accept(b""), 64);
    assert_eq!(r.negotiated().unwrap().ird_ord.unwrap().ird, 1);
    assert_eq!(i.negotiated().unwrap().rtr, Some(RtrType::Read));
}

#[test]
fn no_auto_negotiation_value() {
    let ic = enh(0x3FFF, 0x3FFF, false, RtrSet::NONE);
    let rc = enh(7, 9, false, RtrSet::ALL);
    let (i, r) = run(ic, b"", rc, Decide::Accept(b""), 64);
    let nr = r.negotiated().unwrap().ird_ord.unwrap();
    assert_eq!((nr.ird, nr.ord), (7, 9)); // local values unchanged
    let e = i.peer().unwrap().enhanced.unwrap();
    assert_eq!((e.ird, e.ord), (0x3FFF, 0x3FFF)); // echoed in the Reply
    let ni = i.negotiated().unwrap().ird_ord.unwrap();
    assert_eq!((ni.ird, ni.ord), (0x3FFF, 0x3FFF));
    assert!(!i.negotiated().unwrap().p2p);
}

#[test]
fn no_matching_rtr_terminates_with_7() {
    let ic = enh(4, 4, true, RtrSet::only(RtrType::Send));
    let rc = enh(4, 4, false, RtrSet::only(RtrType::Write));
    let (i, r) = run(ic, b"", rc, Decide::Accept(b""), 1);
    // Responder advertises what it supports.
    assert_eq!(
        i.peer().unwrap().enhanced.unwrap().rtr,
        RtrSet::only(RtrType::Write)
    );
    assert_eq!(r.negotiated().unwrap().rtr, None);
    match i.status() {
        Status::Failed(e) => {
            assert_eq!(e.code, MpaErrorCode::NoMatchingRtr);
            assert_eq!(e.code.code(), 7);
            assert_eq!(e.action, Action::Terminate);
        }
        s => panic!("{s:?}"),
    }
    // The TERMINATE is framed with the negotiated parameters.
    assert!(i.negotiated().is_some());
}

fn reply_bytes(flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = KEY_REP.to_vec();
    v.extend_from_slice(&[flags, rev]);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

fn request_bytes(flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = reply_bytes(flags, rev, pd);
    v[..16].copy_from_slice(&KEY_REQ);
    v
}

fn failed(s: &Startup) -> StartupError {
    match s.status() {
        Status::Failed(e) => e,
        st => panic!("not failed: {st:?}"),
    }
}

#[test]
fn insufficient_ird_terminates_with_6() {
    let mut i = Startup::initiator(enh(4, 4, false, RtrSet::NONE), b"").unwrap();
    // Responder ORD 10 > our IRD 4.
    let rep = reply_bytes(
        FLAG_S,
        2,
        &Enhanced {
            p2p: false,
            rtr: RtrSet::NONE,
            ird: 4,
            ord: 10,
        }
        .to_bytes(),
    );
    let e = i.feed(&rep).unwrap_err();
    assert_eq!(e.code, MpaErrorCode::InsufficientIrd);
    assert_eq!(e.action, Action::Terminate);
    assert_eq!(
        e.reason,
        Reason::InsufficientIrd {
            responder_ord: 10,
            local_ird: 4
        }
    );
    assert!(i.negotiated().is_some());
    // Sticky.
    assert_eq!(i.feed(b"x"), Err(e));
}

#[test]
fn responder_that_drops_p2p_gets_7() {
    // Reply without A to a P2P request.
    let mut i = Startup::initiator(enh(4, 4, true, RtrSet::ALL), b"").unwrap();
    let rep = reply_bytes(
        FLAG_S,
        2,
        &Enhanced {
            p2p: false,
            rtr: RtrSet::NONE,
            ird: 4,
            ord: 4,
        }
        .to_bytes(),
    );
    assert_eq!(i.feed(&rep).unwrap_err().code, MpaErrorCode::NoMatchingRtr);
    // An unenhanced (Rev 1) Reply: fine without P2P, 7 with it.
    let mut i = Startup::initiator(enh(4, 4, false, RtrSet::NONE), b"").unwrap();
    i.feed(&reply_bytes(0, 1, b"")).unwrap();
    assert_eq!(i.status(), Status::Established);
    assert_eq!(i.negotiated().unwrap().rev, 1);
    assert_eq!(i.negotiated().unwrap().ird_ord, None);
    let mut i = Startup::initiator(enh(4, 4, true, RtrSet::ALL), b"").unwrap();
    let e = i.feed(&reply_bytes(0, 1, b"")).unwrap_err();
    assert_eq!(
        (e.code, e.action),
        (MpaErrorCode::NoMatchingRtr, Action::Terminate)
    );
}

#[test]
fn invalid_frames_close_with_4() {
    let close4 = |e: StartupError| {
        assert_eq!(e.code, MpaErrorCode::InvalidStartup);
        assert_eq!(e.code.code(), 4);
        assert_eq!(e.action, Action::Close);
        e.reason
    };
    // Bad key at the Responder.
    let mut r = Startup::responder(BASIC).unwrap();
    let mut req = request_bytes(0, 1, b"");
    req[3] = b'X';
    assert_eq!(
        close4(r.feed(&req).unwrap_err()),
        Reason::Parse(ParseError::BadKey)
    );
    // PD_Length > 512, detected from the header alone.
    let mut r = Startup::responder(BASIC).unwrap();
    let mut req = request_bytes(0, 1, b"");
    req[18..20].copy_from_slice(&513u16.to_be_bytes());
    assert_eq!(
        close4(r.feed(&req).unwrap_err()),
        Reason::Parse(ParseError::PdTooLong(513))
    );
    // Rev: 3 never, 2 not at a Basic Responder, 0 unless permissive.
    for (cfg, rev) in [
        (enh(1, 1, false, RtrSet::ALL), 3u8),
        (BASIC, 2),
        (BASIC, 0),
        (draft(true), 2),
    ] {
        let mut r = Startup::responder(cfg).unwrap();
        assert_eq!(
            close4(r.feed(&request_bytes(0, rev, b"")).unwrap_err()),
            Reason::RevUnsupported(rev)
        );
    }
    // A Reply with a higher Rev than the Request.
    let mut i = Startup::initiator(BASIC, b"").unwrap();
    assert_eq!(
        close4(i.feed(&reply_bytes(0, 2, b"")).unwrap_err()),
        Reason::RevUnsupported(2)
    );
    // S=1, Rev 2, PD_Length < 4.
    let mut r = Startup::responder(enh(1, 1, false, RtrSet::ALL)).unwrap();
    assert_eq!(
        close4(r.feed(&request_bytes(FLAG_S, 2, b"ab")).unwrap_err()),
        Reason::Parse(ParseError::EnhancedTooShort(2))
    );
    // Initiator/Initiator: a Request where a Reply belongs, and vice versa.
    let mut i = Startup::initiator(BASIC, b"").unwrap();
    assert_eq!(
        close4(i.feed(&request_bytes(0, 1, b"")).unwrap_err()),
        Reason::UnexpectedFrame(FrameKind::Request)
    );
    let mut r = Startup::responder(BASIC).unwrap();
    assert_eq!(
        close4(r.feed(&reply_bytes(0, 1, b"")).unwrap_err()),
        Reason::UnexpectedFrame(FrameKind::Reply)
    );
    // Octets after the Request before the Reply was sent.
    let mut r = Startup::responder(BASIC).unwrap();
    let mut req = request_bytes(0, 1, b"pd");
    req.push(0);
    assert_eq!(close4(r.feed(&req).unwrap_err()), Reason::UnexpectedData);
    assert_eq!(r.accept(b""), Err(ApiError::WrongState));
    // The same through an RxStream.
    let mut r = Startup::responder(BASIC).unwrap();
    assert_eq!(
        close4(r.receive(&mut SliceRx::new(&req)).unwrap_err()),
        Reason::UnexpectedData
    );
    // Draft Reply with S although the Request did not ask for an Rtr frame.
    let mut i = Startup::initiator(draft(false), b"").unwrap();
    assert_eq!(
        close4(i.feed(&reply_bytes(FLAG_S, 1, b"")).unwrap_err()),
        Reason::RtrNotRequested
    );
}

#[test]
fn peer_close_during_startup() {
    let mut r = Startup::responder(BASIC).unwrap();
    let e = r.peer_closed();
    assert_eq!(
        (e.code, e.reason),
        (MpaErrorCode::TcpClosed, Reason::PeerClosed)
    );
    assert_eq!(failed(&r), e);
    // PD_Length announces more than arrives, then FIN: invalid frame (4).
    let mut r = Startup::responder(BASIC).unwrap();
    let req = request_bytes(0, 1, b"0123456789");
    assert_eq!(r.feed(&req[..25]), Ok(25));
    let e = r.peer_closed();
    assert_eq!(
        (e.code, e.action, e.reason),
        (
            MpaErrorCode::InvalidStartup,
            Action::Close,
            Reason::Truncated
        )
    );
    // After Established a close is not startup's business.
    let (mut i, _) = run(BASIC, b"", BASIC, Decide::Accept(b""), 64);
    assert_eq!(i.peer_closed().code, MpaErrorCode::TcpClosed);
    assert_eq!(i.status(), Status::Established);
}

#[test]
fn octets_after_the_frame_are_left_for_the_deframer() {
    let mut i = Startup::initiator(BASIC, b"").unwrap();
    let mut rep = reply_bytes(0, 1, b"xy");
    rep.extend_from_slice(&[0, 4, 1, 2, 3, 4]);
    assert_eq!(i.feed(&rep), Ok(22));
    assert_eq!(i.status(), Status::Established);
    assert_eq!(i.feed(&rep[22..]), Ok(0));
    let mut i = Startup::initiator(BASIC, b"").unwrap();
    let mut s = SliceRx::new(&rep);
    i.receive(&mut s).unwrap();
    assert_eq!(s.pos, 22);
}

#[test]
fn rev0_permissive_app_c() {
    let perm = Config {
        permissive_rev0: true,
        ..BASIC
    };
    // Rev 0 Request at a permissive Responder: Rev 0 Reply with M and C, markers and CRC
    // both ways, seed FPDUPTR, DDP version 0.
    let mut r = Startup::responder(perm).unwrap();
    r.feed(&request_bytes(FLAG_M | FLAG_C, 0, b"")).unwrap();
    r.accept(b"").unwrap();
    assert_eq!(&r.tx_pending()[16..20], &[FLAG_M | FLAG_C, 0, 0, 0]);
    let n = r.negotiated().unwrap();
    assert_eq!(
        (n.rev, n.crc, n.markers_tx, n.markers_rx, n.fpduptr),
        (0, true, true, true, FpduPtrBase::FpduStart)
    );
    assert_eq!(n.ddp_version(), 0);
    // Rev 0 Reply at a permissive Initiator (its Request said Rev 1).
    let mut i = Startup::initiator(perm, b"").unwrap();
    i.feed(&reply_bytes(FLAG_M | FLAG_C, 0, b"")).unwrap();
    let n = i.negotiated().unwrap();
    assert_eq!(
        (n.rev, n.crc, n.markers_tx, n.markers_rx),
        (0, true, true, true)
    );
    // Not permissive: close.
    let mut i = Startup::initiator(BASIC, b"").unwrap();
    assert_eq!(
        i.feed(&reply_bytes(FLAG_M | FLAG_C, 0, b""))
            .unwrap_err()
            .reason,
        Reason::RevUnsupported(0)
    );
}

const RDMAC: Config = Config {
    mode: Mode::Rdmac,
    ..BASIC
};

/// The RDMAC mode (Appendix C): whatever the local C and M wishes, the Initiator's Request
/// is Rev 0 with M and C and no L/P; two RDMAC endpoints run version 0 with markers and
/// CRC both ways and the seed FPDUPTR.
#[test]
fn rdmac_pair_runs_rev0() {
    let i = Startup::initiator(
        Config {
            large_fpdu: true,
            ..RDMAC
        },
        b"pd",
    )
    .unwrap();
    let req = i.tx_pending();
    assert_eq!(&req[..16], b"MPA ID Req Frame");
    assert_eq!(&req[16..20], &[FLAG_M | FLAG_C, 0, 0, 2]);
    for chunk in [1, 5, 1000] {
        let (i, r) = run(RDMAC, b"hi", RDMAC, Decide::Accept(b"yo"), chunk);
        assert_eq!(
            (i.status(), r.status()),
            (Status::Established, Status::Established)
        );
        for n in [i.negotiated().unwrap(), r.negotiated().unwrap()] {
            assert_eq!(
                (n.rev, n.crc, n.markers_tx, n.markers_rx, n.fpduptr),
                (0, true, true, true, FpduPtrBase::FpduStart)
            );
            assert_eq!(n.ddp_version(), 0);
            assert!(!n.large_fpdu_tx && n.ird_ord.is_none() && !n.p2p);
        }
        assert_eq!(i.negotiated().unwrap().private_data.as_slice(), b"yo");
        assert_eq!(r.negotiated().unwrap().private_data.as_slice(), b"hi");
    }
}

/// An RDMAC Initiator with a permissive IETF Responder gets version 0 (Figure 16); with a
/// non-permissive one (Rev 1 or Rev 2 only) the Responder closes on the Rev 0 Request
/// (Figure 15), and a Rev 1 Reply, which such a Responder may send before it closes
/// (§C.2.1), makes the Initiator close too.
#[test]
fn rdmac_initiator_with_ietf_responders() {
    let perm = Config {
        permissive_rev0: true,
        ..BASIC
    };
    let (i, r) = run(RDMAC, b"", perm, Decide::Accept(b""), 3);
    assert_eq!(
        (i.status(), r.status()),
        (Status::Established, Status::Established)
    );
    assert_eq!(
        (i.negotiated().unwrap().rev, r.negotiated().unwrap().rev),
        (0, 0)
    );
    for rc in [BASIC, enh(4, 4, false, RtrSet::ALL), draft(true)] {
        let (i, r) = run(RDMAC, b"", rc, Decide::Accept(b""), 7);
        assert!(
            matches!(r.status(), Status::Failed(e) if e.reason == Reason::RevUnsupported(0)
                && e.action == Action::Close),
            "{rc:?}: {:?}",
            r.status()
        );
        assert_eq!(i.status(), Status::AwaitingReply);
        assert!(r.tx_pending().is_empty());
    }
    let mut i = Startup::initiator(RDMAC, b"").unwrap();
    assert_eq!(
        i.feed(&reply_bytes(FLAG_M | FLAG_C, 1, b""))
            .unwrap_err()
            .reason,
        Reason::RevUnsupported(1)
    );
    assert!(i.negotiated().is_none());
    // A reject in Rev 0 is a reject.
    let mut i = Startup::initiator(RDMAC, b"").unwrap();
    i.feed(&reply_bytes(FLAG_R | FLAG_M | FLAG_C, 0, b"no"))
        .unwrap();
    assert_eq!(i.status(), Status::Rejected);
}

/// The RDMAC Responder serves IETF Initiators of Rev 1 as Rev 1 (its markers and CRC
/// wishes apply) and refuses Rev 2.
#[test]
fn rdmac_responder_with_ietf_initiators() {
    let rc = Config {
        markers: true,
        ..RDMAC
    };
    let (i, r) = run(BASIC, b"", rc, Decide::Accept(b""), 4);
    assert_eq!(
        (i.status(), r.status()),
        (Status::Established, Status::Established)
    );
    let n = r.negotiated().unwrap();
    assert_eq!(
        (n.rev, n.crc, n.markers_rx, n.markers_tx),
        (1, false, true, false)
    );
    assert_eq!(n.ddp_version(), 1);
    let (_, r) = run(
        enh(4, 4, false, RtrSet::ALL),
        b"",
        rc,
        Decide::Accept(b""),
        4,
    );
    assert!(
        matches!(r.status(), Status::Failed(e) if e.reason == Reason::RevUnsupported(2)),
        "{:?}",
        r.status()
    );
}

#[test]
fn enhanced_responder_answers_in_kind() {
    // Rev 1 Request at an enhanced Responder: Rev 1 Reply without S (RFC 6581 §10).
    let rc = enh(4, 4, false, RtrSet::ALL);
    let (i, r) = run(BASIC, b"", rc, Decide::Accept(b""), 8);
    assert_eq!(i.status(), Status::Established);
    let p = i.peer().unwrap();
    assert_eq!((p.rev, p.enhanced), (1, None));
    assert_eq!(r.negotiated().unwrap().ird_ord, None);
    // S=1 with Rev 1 is a reserved bit in RFC mode: ignored.
    let mut r = Startup::responder(rc).unwrap();
    r.feed(&request_bytes(FLAG_S, 1, b"abcd")).unwrap();
    assert_eq!(r.peer().unwrap().enhanced, None);
    assert_eq!(r.peer().unwrap().private_data.as_slice(), b"abcd");
    assert_eq!(
        Startup::responder(enh(1, 1, false, RtrSet::NONE)).unwrap_err(),
        ApiError::BadConfig
    );
}

#[test]
fn draft_rtr_frame_mode() {
    for chunk in [1, 5, 100] {
        let (mut i, mut r) = (
            Startup::initiator(draft(true), b"x").unwrap(),
            Startup::responder(draft(true)).unwrap(),
        );
        // Request: S=1, Rev 1.
        assert_eq!(&i.tx_pending()[16..18], &[FLAG_S, 1]);
        pump(&mut i, &mut r, chunk).unwrap();
        assert!(r.peer().unwrap().rtr_flag);
        r.accept(b"").unwrap();
        assert_eq!(r.status(), Status::AwaitingRtr);
        assert_eq!(&r.tx_pending()[16..18], &[FLAG_S, 1]);
        pump(&mut r, &mut i, chunk).unwrap();
        assert_eq!(i.status(), Status::Established);
        // The Initiator queued the Rtr frame: draft key, S=0, Rev 1, no Private Data.
        let mut want = KEY_RTR.to_vec();
        want.extend_from_slice(&[0, 1, 0, 0]);
        assert_eq!(i.tx_pending(), &want[..]);
        pump(&mut i, &mut r, chunk).unwrap();
        assert_eq!(r.status(), Status::Established);
        let (ni, nr) = (i.negotiated().unwrap(), r.negotiated().unwrap());
        assert!(ni.draft_rtr_frame && nr.draft_rtr_frame && ni.p2p && nr.p2p);
        assert_eq!((ni.rev, nr.rev), (1, 1));
        // After the Rtr frame the Responder may send first.
        assert_eq!(nr.send_gate, SendGate::Free);
        assert_eq!(ni.rtr, None);
    }
    // A Responder without Rtr support answers S=0, the Initiator sends no Rtr frame.
    let (i, r) = run(draft(true), b"", draft(false), Decide::Accept(b""), 3);
    assert_eq!(r.status(), Status::Established);
    assert!(i.tx_pending().is_empty());
    assert!(!i.negotiated().unwrap().draft_rtr_frame);
    assert_eq!(
        r.negotiated().unwrap().send_gate,
        SendGate::AfterFirstRxFpdu
    );
    // The Rtr frame with the prose key is accepted too; anything else closes.
    let mut r = Startup::responder(draft(true)).unwrap();
    r.feed(&request_bytes(FLAG_S, 1, b"")).unwrap();
    r.accept(b"").unwrap();
    let mut rtr = request_bytes(0, 1, b"");
    rtr[..16].copy_from_slice(&KEY_RTR_ASCII);
    r.feed(&rtr).unwrap();
    assert_eq!(r.status(), Status::Established);
    let mut r = Startup::responder(draft(true)).unwrap();
    r.feed(&request_bytes(FLAG_S, 1, b"")).unwrap();
    r.accept(b"").unwrap();
    assert_eq!(
        r.feed(&request_bytes(0, 1, b"")).unwrap_err().reason,
        Reason::UnexpectedFrame(FrameKind::Request)
    );
}

#[test]
fn api_misuse() {
    assert_eq!(
        Startup::initiator(BASIC, &[0; 513]).unwrap_err(),
        ApiError::PdTooLong
    );
    assert!(Startup::initiator(BASIC, &[0; 512]).is_ok());
    assert_eq!(
        Startup::initiator(enh(1, 1, false, RtrSet::NONE), &[0; 509]).unwrap_err(),
        ApiError::PdTooLong
    );
    let mut r = Startup::responder(BASIC).unwrap();
    assert_eq!(r.accept(b""), Err(ApiError::WrongState));
    r.feed(&request_bytes(0, 1, b"")).unwrap();
    assert_eq!(r.accept(&[0; 513]), Err(ApiError::PdTooLong));
    assert_eq!(r.status(), Status::RequestReceived);
    r.accept(&[0; 512]).unwrap();
    assert_eq!(r.tx_pending().len(), 532);
    r.tx_advance(100);
    assert_eq!(r.tx_pending().len(), 432);
    r.tx_advance(1000);
    assert!(r.tx_pending().is_empty());
    assert_eq!(r.reject(b""), Err(ApiError::WrongState));
}

fn arb_cfg() -> impl Strategy<Value = Config> {
    let rtr = (any::<bool>(), any::<bool>(), any::<bool>())
        .prop_map(|(send, write, read)| RtrSet { send, write, read });
    let mode = prop_oneof![
        Just(Mode::Basic),
        (
            prop_oneof![0u16..20, Just(0x3FFF)],
            prop_oneof![0u16..20, Just(0x3FFF)],
            any::<bool>(),
            rtr
        )
            .prop_map(|(ird, ord, p2p, rtr)| Mode::Enhanced(EnhancedConfig {
                ird,
                ord,
                p2p,
                rtr
            })),
        any::<bool>().prop_map(|rtr| Mode::DraftRtr { rtr }),
        Just(Mode::Rdmac),
    ];
    (
        mode,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(mode, crc, markers, large_fpdu, permissive_rev0)| Config {
            mode,
            crc,
            markers,
            large_fpdu,
            permissive_rev0,
        })
}

proptest! {
    /// Any pair of configurations: the outcome is independent of segmentation, and when
    /// both sides reach Full Operation their views agree (RFC 5044 §7.1.1, RFC 6581 §9.1).
    #[test]
    fn negotiation_is_consistent(ic in arb_cfg(), rc in arb_cfg(), ipd in proptest::collection::vec(any::<u8>(), 0..40), chunk in 1usize..30, accept in any::<bool>()) {
        let rc = match rc.mode {
            Mode::Enhanced(e) if e.rtr.is_empty() => Config { mode: Mode::Enhanced(EnhancedConfig { rtr: RtrSet::ALL, ..e }), ..rc },
            _ => rc,
        };
        let d = || if accept { Decide::Accept(b"reply") } else { Decide::Reject(b"no") };
        let (i1, r1) = run(ic, &ipd, rc, d(), chunk);
        let (i2, r2) = run(ic, &ipd, rc, d(), 1);
        prop_assert_eq!(i1.status(), i2.status());
        prop_assert_eq!(r1.status(), r2.status());
        prop_assert_eq!(i1.negotiated(), i2.negotiated());
        prop_assert_eq!(r1.negotiated(), r2.negotiated());
        if let (Some(ni), Some(nr)) = (i1.negotiated(), r1.negotiated()) {
            prop_assert_eq!(ni.crc, nr.crc);
            prop_assert_eq!(ni.crc, ic.crc || rc.crc || ni.rev == 0);
            prop_assert_eq!(ni.markers_tx, nr.markers_rx);
            prop_assert_eq!(ni.markers_rx, nr.markers_tx);
            prop_assert_eq!(ni.rev, nr.rev);
            // An RDMAC Initiator runs version 0 or nothing (Appendix C, Figure 15).
            if ic.mode == Mode::Rdmac {
                prop_assert_eq!(ni.rev, 0);
            }
            prop_assert_eq!(ni.rtr, nr.rtr);
            // Large FPDUs flow only where both offered them, and symmetrically.
            let large = ic.large_fpdu && rc.large_fpdu && ni.rev != 0;
            if i1.status() == Status::Established {
                prop_assert_eq!(ni.large_fpdu_tx, large);
                prop_assert_eq!(nr.large_fpdu_tx, large);
            }
            prop_assert!(!ni.large_fpdu_tx || large);
            prop_assert_eq!(ni.private_data.as_slice(), b"reply");
            prop_assert_eq!(nr.private_data.as_slice(), &ipd[..]);
            if let (Some(a), Some(b)) = (ni.ird_ord, nr.ird_ord) {
                if a.ord != 0x3FFF && b.ird != 0x3FFF && i1.status() == Status::Established {
                    prop_assert!(a.ord <= b.ird || b.ird == 0x3FFF);
                }
                if b.ord != 0x3FFF && a.ird != 0x3FFF {
                    prop_assert!(b.ord <= a.ird);
                }
            }
            if i1.status() == Status::Established && ni.p2p && !ni.draft_rtr_frame {
                prop_assert_eq!(ni.send_gate, SendGate::RtrFirst(ni.rtr.unwrap()));
            }
        }
        if !accept && r1.status() == Status::Rejected {
            prop_assert_eq!(i1.status(), Status::Rejected);
        }
    }

    /// Arbitrary octets never panic either role, in any mode.
    #[test]
    fn startup_never_panics(cfg in arb_cfg(), data in proptest::collection::vec(any::<u8>(), 0..700), chunk in 1usize..50, prefix in any::<bool>()) {
        let mut input = Vec::new();
        if prefix {
            input.extend_from_slice(&KEY_REQ);
        }
        input.extend_from_slice(&data);
        let mut engines = vec![Startup::initiator(cfg, b"").unwrap()];
        engines.extend(Startup::responder(cfg).ok());
        for mut s in engines {
            for c in input.chunks(chunk) {
                if s.feed(c).is_err() { break; }
            }
            if s.status() == Status::RequestReceived {
                let _ = s.accept(b"");
            }
            let _ = s.peer_closed();
        }
    }
}

/// Found by the `mpa_startup` fuzz target: a draft Responder that already accepted (and
/// computed a negotiation) must not report one after closing on a bad Rtr frame.
#[test]
fn draft_bad_rtr_clears_negotiated() {
    let mut r = Startup::responder(draft(true)).unwrap();
    r.feed(&request_bytes(FLAG_S, 1, b"")).unwrap();
    r.accept(b"").unwrap();
    assert_eq!(r.status(), Status::AwaitingRtr);
    let mut bad = request_bytes(0, 1, b"");
    bad[..16].copy_from_slice(b"MPA IDtR Frame..");
    let e = r.feed(&bad).unwrap_err();
    assert_eq!(
        (e.code, e.action),
        (MpaErrorCode::InvalidStartup, Action::Close)
    );
    assert!(r.negotiated().is_none());
    // A FIN while waiting for the Rtr frame: also no Full Operation.
    let mut r = Startup::responder(draft(true)).unwrap();
    r.feed(&request_bytes(FLAG_S, 1, b"")).unwrap();
    r.accept(b"").unwrap();
    assert_eq!(r.peer_closed().code, MpaErrorCode::TcpClosed);
    assert!(r.negotiated().is_none());
}

/// Large FPDUs (flag L): every accepting frame of an endpoint that offers them sets L, and a
/// side sends them only when both frames set it, in every startup mode.
#[test]
fn large_fpdus_need_both_offers() {
    let modes = [
        BASIC,
        enh(4, 4, false, RtrSet::ALL),
        enh(4, 4, true, RtrSet::ALL),
        draft(true),
    ];
    for base in modes {
        for (il, rl) in [(false, false), (true, false), (false, true), (true, true)] {
            let ic = Config {
                large_fpdu: il,
                ..base
            };
            let rc = Config {
                large_fpdu: rl,
                ..base
            };
            let mut i = Startup::initiator(ic, b"").unwrap();
            let probe = if il { FLAG_L | FLAG_P } else { 0 };
            assert_eq!(i.tx_pending()[16] & (FLAG_L | FLAG_P), probe);
            let mut r = Startup::responder(rc).unwrap();
            let _ = pump(&mut i, &mut r, 1000);
            r.accept(b"").unwrap();
            assert_eq!(r.tx_pending()[16] & FLAG_L != 0, rl, "{base:?}");
            assert_eq!(r.tx_pending()[16] & FLAG_P, 0, "a Reply never sets P");
            let _ = pump(&mut r, &mut i, 1000);
            let _ = pump(&mut i, &mut r, 1000);
            assert_eq!(i.status(), Status::Established, "{base:?}");
            assert_eq!(r.status(), Status::Established, "{base:?}");
            let both = il && rl;
            assert_eq!(i.negotiated().unwrap().large_fpdu_tx, both, "{base:?}");
            assert_eq!(r.negotiated().unwrap().large_fpdu_tx, both, "{base:?}");
            assert_eq!(i.peer().unwrap().large_fpdu, rl);
            assert_eq!(r.peer().unwrap().large_fpdu, il);
        }
    }
}

/// A reject never offers large FPDUs, and a Rev 0 peer never gets them (nor an L bit).
#[test]
fn large_fpdus_not_with_reject_or_rev0() {
    let lc = Config {
        large_fpdu: true,
        ..BASIC
    };
    let (_, r) = run(lc, b"", lc, Decide::Reject(b"no"), 1000);
    assert_eq!(r.status(), Status::Rejected);
    let mut r = Startup::responder(lc).unwrap();
    r.feed(&request_bytes(FLAG_L, 1, b"")).unwrap();
    r.reject(b"").unwrap();
    assert_eq!(r.tx_pending()[16] & FLAG_L, 0);

    let perm = Config {
        permissive_rev0: true,
        ..lc
    };
    let mut r = Startup::responder(perm).unwrap();
    r.feed(&request_bytes(FLAG_M | FLAG_C | FLAG_L, 0, b""))
        .unwrap();
    r.accept(b"").unwrap();
    assert_eq!(r.tx_pending()[16], FLAG_M | FLAG_C);
    assert!(!r.negotiated().unwrap().large_fpdu_tx);
    let mut i = Startup::initiator(perm, b"").unwrap();
    i.feed(&reply_bytes(FLAG_M | FLAG_C | FLAG_L, 0, b""))
        .unwrap();
    assert!(!i.negotiated().unwrap().large_fpdu_tx);
}

/// MULPDU follows the negotiation: one segment's worth without L, 64768 octets with it
/// (RFC 5044 §4.5 bounds only the segment-sized case).
#[test]
fn large_fpdu_mulpdu() {
    let mut i = Startup::initiator(
        Config {
            large_fpdu: true,
            ..BASIC
        },
        b"",
    )
    .unwrap();
    i.feed(&reply_bytes(FLAG_L, 1, b"")).unwrap();
    let n = *i.negotiated().unwrap();
    assert!(n.large_fpdu_tx);
    assert_eq!(n.tx_mulpdu(1460), 64768);
    let small = Negotiated {
        large_fpdu_tx: false,
        ..n
    };
    assert_eq!(small.tx_mulpdu(1460), 1454);
    let marked = Negotiated {
        markers_tx: true,
        ..small
    };
    assert_eq!(marked.tx_mulpdu(1460), 1442);
}

/// The C siw answers with a copy of the Request's flags: its Reply carries L and the echo
/// probe P, and is no offer of large FPDUs. A Reply with L alone is one.
#[test]
fn echoed_large_fpdu_flag_is_no_offer() {
    let lc = Config {
        large_fpdu: true,
        ..BASIC
    };
    for (flags, large) in [
        (FLAG_L | FLAG_P, false),
        (FLAG_L | FLAG_P | FLAG_C, false),
        (FLAG_P, false),
        (FLAG_L, true),
        (0, false),
    ] {
        let mut i = Startup::initiator(lc, b"").unwrap();
        i.feed(&reply_bytes(flags, 1, b"")).unwrap();
        assert_eq!(i.status(), Status::Established);
        assert_eq!(i.peer().unwrap().large_fpdu, large, "flags {flags:#x}");
        assert_eq!(
            i.negotiated().unwrap().large_fpdu_tx,
            large,
            "flags {flags:#x}"
        );
    }
    // P in a Request means nothing to the Responder.
    let mut r = Startup::responder(lc).unwrap();
    r.feed(&request_bytes(FLAG_L | FLAG_P, 1, b"")).unwrap();
    r.accept(b"").unwrap();
    assert!(r.negotiated().unwrap().large_fpdu_tx);
}
