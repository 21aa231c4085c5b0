// SPDX-License-Identifier: GPL-2.0

//! Host tests of the RDMAP session engine (`engine::session`): the ORQ binding of Read
//! Responses, the IRQ and IRD, ORD and the read fence, the peer-to-peer RTR exchange in
//! both roles, TERMINATE-then-close with its deadline, the peer's TERMINATE, and a property
//! test plus corpus replay of the `session` fuzz check. Every run goes through the
//! harness of `common/session_util.rs`, which checks the placement invariant on each step.

#[path = "common/mpa_util.rs"]
mod mpa_util;

#[path = "common/ddp_util.rs"]
mod ddp_util;

#[path = "common/session_util.rs"]
mod session_util;

use ddp_util::{rreq, rresp, send, write, Builder, Framing};
use proptest::prelude::*;
use rsiw_core::engine::ddp_rx::QpAccess;
use rsiw_core::engine::orq::ReadSink;
use rsiw_core::engine::session::{Admit, Close, Event, RtrPhase, SessionState, SqHead, Transmit};
use rsiw_core::engine::startup::Role;
use rsiw_core::engine::stream::PlaceTarget;
use rsiw_core::wire::ddp::{DdpError, TaggedError, UntaggedError};
use rsiw_core::wire::mpa::{MpaErrorCode, RtrType};
use rsiw_core::wire::rdmap::{Opcode, OperationError, ProtectionError, RdmapError, ReadRequest};
use rsiw_core::wire::terminate::{TermCause, Terminate};
use rsiw_core::wire::ulpdu::{Config, RdmapHeader, UlpduHeader};
use session_util::*;

fn stream(f: impl FnOnce(&mut Builder)) -> Vec<u8> {
    let mut b = Builder::new(Framing::CRC, Config::RFC);
    f(&mut b);
    b.bytes()
}

/// A Read Request beyond IRD ended the session with DDP's MSN-range TERMINATE (RFC 5041
/// §7.1 check 5), and no Read Response went out.
fn assert_beyond_ird_unanswered(h: &Harness) {
    assert_terminated(
        h,
        TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)),
    );
    assert!(!h
        .transmits()
        .iter()
        .any(|t| matches!(t, Transmit::ReadResponse(_))));
}

fn harness(role: Role, rtr: Option<RtrType>, ird: u32, ord: u32) -> Harness {
    Harness::new(&negotiated(role, Framing::CRC, rtr), ird, ord)
}

const READ: SqHead = SqHead {
    fenced: false,
    read: Some(ReadSink {
        stag: 0x200,
        to: 0x2000,
        len: 0x20,
    }),
};

const SEND: SqHead = SqHead {
    fenced: false,
    read: None,
};

const TX: Op = Op::Transmit {
    terminate_sent: true,
};

/// Runs `ops`, then the same with every peer octet alone; both must agree.
fn both(role: Role, rtr: Option<RtrType>, ird: u32, ord: u32, ops: &[Op]) -> Harness {
    let mut a = harness(role, rtr, ird, ord);
    a.run(ops);
    let mut b = harness(role, rtr, ird, ord);
    b.run(&octet_by_octet(ops));
    assert_eq!(outcome(&a), outcome(&b), "1-octet feeding differs");
    a
}

fn placed(h: &Harness) -> Vec<(PlaceTarget, Vec<u8>)> {
    outcome(h).1
}

/// The session terminated with `cause`: Failed, the TERMINATE sent, Closed, in that order.
fn assert_terminated(h: &Harness, cause: TermCause) {
    let term = h.transmits().into_iter().find_map(|t| match t {
        Transmit::Terminate(t) => Some(t),
        _ => None,
    });
    assert_eq!(term.map(|t| t.cause), Some(cause), "{:?}", h.out());
    assert_eq!(
        h.events(),
        vec![
            Event::Failed(cause),
            Event::Closed(Close::Terminated(cause))
        ]
    );
    assert_eq!(
        h.session.state(),
        SessionState::Closed(Close::Terminated(cause))
    );
}

#[test]
fn read_response_completes_the_admitted_read_only() {
    let data = stream(|b| {
        b.push(&rresp(0x200, 0x2000, false), &[1; 0x10]);
        b.push(&rresp(0x200, 0x2010, true), &[2; 0x10]);
    });
    let h = both(
        Role::Initiator,
        None,
        0,
        4,
        &[Op::Post(READ), TX, Op::Rx(data)],
    );
    assert_eq!(h.session.state(), SessionState::Active);
    assert!(h.out().iter().any(|o| matches!(
        o,
        Out::ReadDone(d) if d.stag == 0x200 && d.len == 0x20
    )));
    assert_eq!(placed(&h).len(), 1);
}

/// A Read whose work request the shell withdrew after admitting it (its SQ slot went
/// stale before the Request went out) leaves no ORQ entry: it takes no ORD slot, and the
/// next Read Response is checked against the next Read's sink, not the withdrawn one's.
#[test]
fn a_withdrawn_read_leaves_no_orq_entry() {
    const READ2: SqHead = SqHead {
        fenced: false,
        read: Some(ReadSink {
            stag: 0x200,
            to: 0x2400,
            len: 0x10,
        }),
    };
    let good = stream(|b| {
        b.push(&rresp(0x200, 0x2400, true), &[5; 0x10]);
    });
    let h = both(
        Role::Initiator,
        None,
        0,
        1,
        &[Op::PostWithdrawn(READ), Op::Post(READ2), TX, Op::Rx(good)],
    );
    assert_eq!(h.session.state(), SessionState::Active);
    assert_eq!(h.session.reads_outstanding(), 0);
    assert!(h.out().iter().any(|o| matches!(
        o,
        Out::ReadDone(d) if d.stag == 0x200 && d.len == 0x10
    )));
    // The withdrawn Read's sink takes no Response.
    let stale = stream(|b| {
        b.push(&rresp(0x200, 0x2000, true), &[6; 0x20]);
    });
    let h = both(
        Role::Initiator,
        None,
        0,
        1,
        &[
            Op::PostWithdrawn(READ),
            Op::Post(READ2),
            TX,
            Op::Rx(stale),
            TX,
        ],
    );
    assert!(placed(&h).is_empty());
    assert_terminated(
        &h,
        TermCause::ddp(DdpError::Tagged(TaggedError::BaseBounds)),
    );
}

#[test]
fn unsolicited_read_response_terminates_and_places_nothing() {
    for last in [false, true] {
        let data = stream(|b| {
            b.push(&rresp(0x200, 0x2000, last), &[7; 0x10]);
        });
        let h = both(Role::Initiator, None, 0, 4, &[Op::Rx(data), TX]);
        assert!(placed(&h).is_empty());
        assert_terminated(
            &h,
            TermCause::rdmap(RdmapError::RemoteOperation(
                OperationError::UnexpectedOpcode,
            )),
        );
    }
}

#[test]
fn read_response_mismatches_terminate_before_placement() {
    let bounds = TermCause::ddp(DdpError::Tagged(TaggedError::BaseBounds));
    let stag = TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag));
    let cases: [(UlpduHeader, usize, TermCause); 4] = [
        // Another STag (even one granting local write).
        (rresp(0x400, u64::MAX - 0x100, true), 0x20, stag),
        // Another TO.
        (rresp(0x200, 0x2008, true), 0x20, bounds),
        // More octets than the Read.
        (rresp(0x200, 0x2000, true), 0x30, bounds),
        // Fewer: the last segment leaves the Read short.
        (rresp(0x200, 0x2000, true), 0x10, bounds),
    ];
    for (hdr, n, cause) in cases {
        let data = stream(|b| {
            b.push(&hdr, &vec![9; n]);
        });
        let h = both(
            Role::Initiator,
            None,
            0,
            4,
            &[Op::Post(READ), TX, Op::Rx(data), TX],
        );
        assert!(placed(&h).is_empty(), "{hdr:?}");
        assert_terminated(&h, cause);
        assert!(!h.out().iter().any(|o| matches!(o, Out::ReadDone(_))));
    }
}

/// The QP's access flags limit what the memory grants (MR 0x100 grants remote write,
/// 0x300 remote read): with them narrowed, the peer's Write is refused as an Invalid STag
/// (DDP 1/1/0x00) and its Read Request as an access rights violation (RDMAP 0/1/0x02),
/// nothing placed or answered. Zero-length ones are not checked, and a Write the QP
/// admitted before the change is placed.
#[test]
fn qp_access_flags_refuse_writes_and_reads_the_memory_grants() {
    let no_write = QpAccess {
        write: false,
        ..QpAccess::ALL
    };
    let no_read = QpAccess {
        read: false,
        ..QpAccess::ALL
    };
    let w = |to| {
        stream(|b| {
            b.push(&write(0x100, to, true), &[3; 0x10]);
        })
    };
    let h = both(
        Role::Responder,
        None,
        2,
        0,
        &[
            Op::Rx(w(0x1000)),
            Op::SetAccess(no_write),
            Op::Rx(w(0x1010)),
            TX,
        ],
    );
    assert_eq!(placed(&h).len(), 1, "only the Write before the change");
    assert_terminated(
        &h,
        TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag)),
    );

    let a = read_request(0x77, 8, 0x300, 0x3000);
    let zero = read_request(0x78, 0, 0x300, 0x3000);
    for (access, cause) in [
        (no_read, ProtectionError::AccessRights),
        (QpAccess::NONE, ProtectionError::AccessRights),
    ] {
        let data = stream(|b| {
            b.push(&rreq(1, zero), &[]);
            b.push(&write(0x100, 0x1000, true), &[]);
            b.push(&rreq(2, a), &[]);
        });
        let h = both(
            Role::Responder,
            None,
            2,
            0,
            &[Op::SetAccess(access), Op::Rx(data), TX],
        );
        assert!(placed(&h).is_empty());
        assert_eq!(
            h.transmits()
                .iter()
                .filter(|t| matches!(t, Transmit::ReadResponse(r) if r.size != 0))
                .count(),
            0
        );
        assert_terminated(&h, TermCause::rdmap(RdmapError::RemoteProtection(cause)));
    }
}

#[test]
fn read_requests_are_answered_in_order_within_ird() {
    let a = read_request(0x77, 8, 0x300, 0x3000);
    let b2 = read_request(0x78, 0, 0x300, 0x3000);
    let data = stream(|b| {
        b.push(&rreq(1, a), &[]);
        b.push(&rreq(2, b2), &[]);
    });
    let h = both(Role::Responder, None, 2, 0, &[Op::Rx(data), TX]);
    let t = h.transmits();
    assert_eq!(
        &t[..2],
        &[Transmit::ReadResponse(a), Transmit::ReadResponse(b2)]
    );
    assert_eq!(h.session.state(), SessionState::Active);

    // A third Request while two are unanswered exceeds IRD 2.
    let data = stream(|b| {
        b.push(&rreq(1, a), &[]);
        b.push(&rreq(2, a), &[]);
        b.push(&rreq(3, a), &[]);
    });
    let h = both(Role::Responder, None, 2, 0, &[Op::Rx(data), TX]);
    assert_beyond_ird_unanswered(&h);
}

#[test]
fn ird_0_admits_the_read_rtr_and_no_read_after_it() {
    // IRD 0 with the zero-length Read RTR (RFC 6581 §5): the RTR takes the one inbound
    // Read slot the Responder keeps for it, and only it. Once it is answered, a Read
    // Request exceeds IRD 0.
    let rtr = read_request(0x77, 0, 0, 0);
    let real = read_request(0x77, 8, 0x300, 0x3000);
    let first = stream(|b| {
        b.push(&rreq(1, rtr), &[]);
    });
    let second = stream(|b| {
        b.push(&rreq(2, real), &[]);
    });
    let responses = |h: &Harness| -> Vec<ReadRequest> {
        h.transmits()
            .into_iter()
            .filter_map(|t| match t {
                Transmit::ReadResponse(r) => Some(r),
                _ => None,
            })
            .collect()
    };
    let mut h = harness(Role::Responder, Some(RtrType::Read), 0, 1);
    h.run(&[Op::Rx(first), TX]);
    assert_eq!(responses(&h), vec![rtr]);
    assert_eq!(h.session.state(), SessionState::Active);
    h.run(&[Op::Rx(second), TX]);
    assert_terminated(
        &h,
        TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)),
    );
    assert_eq!(responses(&h), vec![rtr]);

    // Both in one batch: the second exceeds the RTR's slot already.
    let both_at_once = stream(|b| {
        b.push(&rreq(1, rtr), &[]);
        b.push(&rreq(2, real), &[]);
    });
    let mut h = harness(Role::Responder, Some(RtrType::Read), 0, 1);
    h.run(&[Op::Rx(both_at_once), TX]);
    assert_terminated(
        &h,
        TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)),
    );
    assert!(!responses(&h).contains(&real));

    // IRD 1 with the Read RTR: the RTR answered, one Read at a time is within IRD.
    let mut h = harness(Role::Responder, Some(RtrType::Read), 1, 1);
    let first = stream(|b| {
        b.push(&rreq(1, rtr), &[]);
    });
    let second = stream(|b| {
        b.push(&rreq(2, real), &[]);
    });
    h.run(&[Op::Rx(first), TX, Op::Rx(second), TX]);
    assert_eq!(responses(&h), vec![rtr, real]);
    assert_eq!(h.session.state(), SessionState::Active);
}

#[test]
fn ird_0_keeps_the_read_rtr_slot_for_a_zero_length_read_only() {
    // IRD 0 with the Read RTR: the one slot beyond IRD is the zero-length RTR's (RFC 6581
    // §5). A first Read Request of non-zero length exceeds IRD 0, as it would without the
    // RTR: refused before anything is read or answered (RFC 5041 §7.1 check 5).
    let real = read_request(0x77, 8, 0x300, 0x3000);
    let data = stream(|b| {
        b.push(&rreq(1, real), &[]);
    });
    let h = both(
        Role::Responder,
        Some(RtrType::Read),
        0,
        1,
        &[Op::Rx(data), TX],
    );
    assert_beyond_ird_unanswered(&h);
}

#[test]
fn ird_1_with_the_read_rtr_admits_no_second_read_in_the_same_batch() {
    // IRD 1 with the Read RTR: the RTR takes IRD's one slot; a second zero-length Read
    // in the same batch exceeds IRD (no slot beyond it with IRD 1 or more).
    let rtr = read_request(0x77, 0, 0, 0);
    let data = stream(|b| {
        b.push(&rreq(1, rtr), &[]);
        b.push(&rreq(2, rtr), &[]);
    });
    let h = both(
        Role::Responder,
        Some(RtrType::Read),
        1,
        1,
        &[Op::Rx(data), TX],
    );
    assert_terminated(
        &h,
        TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)),
    );
}

#[test]
fn depths_reach_max_ord_in_storage_sized_for_them() {
    use rsiw_core::engine::orq::{Orq, OrqEntry, MAX_ORD};
    use rsiw_core::engine::session::irq::{self, Irq};
    use rsiw_core::engine::session::{Session, SessionConfig};

    let n = negotiated(Role::Responder, Framing::CRC, None);
    let cfg = SessionConfig {
        ird: 1000,
        ord: 1000,
        timeout_ms: TIMEOUT_MS,
    };
    // Depths beyond MAX_ORD are capped, in place and in allocated storage alike.
    assert_eq!(Session::new(&n, cfg, 0).config().ird, MAX_ORD);
    assert_eq!(Session::new(&n, cfg, 0).config().ord, MAX_ORD);
    // Storage smaller than the depths caps them, keeping one slot for a Read RTR.
    let mut s: Session<Sized> = Session::idle(
        Orq::with_slots(vec![OrqEntry::EMPTY; 3]),
        Irq::with_slots(vec![irq::EMPTY_SLOT; 2]),
    );
    s.start(&n, cfg, 0);
    assert_eq!((s.config().ird, s.config().ord), (1, 2));

    // IRD MAX_ORD: that many Read Requests are answered in order; one more exceeds it.
    let reqs: Vec<_> = (0..=MAX_ORD)
        .map(|i| read_request(0x77, i, 0x300, 0x3000))
        .collect();
    let within = stream(|b| {
        for (msn, r) in (1..).zip(&reqs[..MAX_ORD as usize]) {
            b.push(&rreq(msn, *r), &[]);
        }
    });
    let mut h = harness(Role::Responder, None, MAX_ORD, 0);
    h.run(&[Op::Rx(within), TX]);
    let answered: Vec<_> = h
        .transmits()
        .into_iter()
        .filter_map(|t| match t {
            Transmit::ReadResponse(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(answered, reqs[..MAX_ORD as usize]);
    assert_eq!(h.session.state(), SessionState::Active);
    let over = stream(|b| {
        for (msn, r) in (1..).zip(&reqs) {
            b.push(&rreq(msn, *r), &[]);
        }
    });
    let mut h = harness(Role::Responder, None, MAX_ORD, 0);
    h.run(&[Op::Rx(over), TX]);
    assert_terminated(
        &h,
        TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)),
    );

    // ORD MAX_ORD: that many Reads go out before the SQ waits.
    let mut h = harness(Role::Initiator, None, 0, MAX_ORD);
    let posts: Vec<_> = (0..=MAX_ORD).map(|_| Op::Post(READ)).collect();
    h.run(&posts);
    h.run(&[TX]);
    assert_eq!(h.session.reads_outstanding(), MAX_ORD as usize);
}

#[test]
fn ord_and_the_read_fence_hold_the_sq() {
    let fenced = SqHead {
        fenced: true,
        read: None,
    };
    let mut h = harness(Role::Initiator, None, 0, 1);
    h.run(&[Op::Post(READ), Op::Post(READ), TX]);
    assert_eq!(h.session.reads_outstanding(), 1, "ORD 1");
    let resp = stream(|b| {
        b.push(&rresp(0x200, 0x2000, true), &[1; 0x20]);
    });
    h.run(&[Op::Rx(resp.clone()), TX]);
    assert_eq!(h.session.reads_outstanding(), 1, "the second Read went");
    h.run(&[Op::Post(fenced), TX]);
    assert_eq!(h.out().last(), Some(&Out::Admit(fenced, Admit::Wait)));
    h.run(&[Op::Rx(resp), TX]);
    assert_eq!(h.out().last(), Some(&Out::Tx(Transmit::SendQueue)));
    assert!(h.out().contains(&Out::Admit(fenced, Admit::Go)));

    // ORD 0 and a sink range that wraps are refused outright.
    let mut h = harness(Role::Initiator, None, 0, 0);
    h.run(&[Op::Post(READ), TX]);
    assert!(h.out().contains(&Out::Admit(READ, Admit::Refuse)));
    let wraps = SqHead {
        fenced: false,
        read: Some(SINKS[4]),
    };
    let mut h = harness(Role::Initiator, None, 0, 4);
    h.run(&[Op::Post(wraps), TX]);
    assert!(h.out().contains(&Out::Admit(wraps, Admit::Refuse)));
}

#[test]
fn a_completed_read_wakes_the_transmit_side_only_for_a_waiting_sq_head() {
    let resp = stream(|b| {
        b.push(&rresp(0x200, 0x2000, true), &[1; 0x20]);
    });
    // Nothing waits for the Read: its Response completes it without a wake-up.
    let mut h = harness(Role::Initiator, None, 0, 2);
    h.run(&[Op::Post(READ), TX, Op::Post(SEND), TX]);
    h.run(&[Op::Rx(resp.clone())]);
    assert_eq!(h.session.reads_outstanding(), 0);
    assert!(!h.last_wake, "woken for a Read nothing waited for");

    // ORD 1 holds the second Read; the first one's Response wakes the shell once.
    let mut h = harness(Role::Initiator, None, 0, 1);
    h.run(&[Op::Post(READ), Op::Post(READ), TX]);
    assert_eq!(h.out().last(), Some(&Out::Admit(READ, Admit::Wait)));
    h.run(&[Op::Rx(resp.clone())]);
    assert!(h.last_wake, "the waiting Read not woken");
    h.run(&[TX, Op::Rx(resp.clone())]);
    assert!(!h.last_wake, "woken again with nothing waiting");

    // The read fence holds a Send; the Response wakes the shell.
    let fenced = SqHead {
        fenced: true,
        read: None,
    };
    let mut h = harness(Role::Initiator, None, 0, 4);
    h.run(&[Op::Post(READ), Op::Post(fenced), TX]);
    assert_eq!(h.out().last(), Some(&Out::Admit(fenced, Admit::Wait)));
    h.run(&[Op::Rx(resp)]);
    assert!(h.last_wake, "the fenced Send not woken");
}

#[test]
fn initiator_sends_the_rtr_first_and_the_read_rtr_completes_nothing() {
    for t in [RtrType::Read, RtrType::Write, RtrType::Send] {
        let mut h = harness(Role::Initiator, Some(t), 0, 2);
        h.run(&[Op::Post(SEND), TX]);
        assert_eq!(h.transmits()[0], Transmit::Rtr(t));
        assert_eq!(
            h.session.rtr(),
            if t == RtrType::Read {
                RtrPhase::ReadOutstanding
            } else {
                RtrPhase::Done
            }
        );
    }
    // The zero-length Read Response answers the RTR; a second one is unsolicited.
    let zero = stream(|b| {
        b.push(&rresp(0, 0, true), &[]);
    });
    let mut h = harness(Role::Initiator, Some(RtrType::Read), 0, 2);
    h.run(&[TX, Op::Rx(zero.clone())]);
    assert_eq!(h.session.rtr(), RtrPhase::Done);
    assert!(!h.out().iter().any(|o| matches!(o, Out::ReadDone(_))));
    h.run(&[Op::Rx(zero), TX]);
    assert_terminated(
        &h,
        TermCause::rdmap(RdmapError::RemoteOperation(
            OperationError::UnexpectedOpcode,
        )),
    );
}

#[test]
fn responder_waits_for_the_first_fpdu_or_terminates() {
    // Nothing goes out before the first FPDU, Read Responses included.
    let mut h = harness(Role::Responder, Some(RtrType::Write), 1, 1);
    h.run(&[Op::Post(SEND), TX]);
    assert!(h.transmits().is_empty());
    let rtr = stream(|b| {
        b.push(&write(0, 0, true), &[]);
    });
    h.run(&[Op::Rx(rtr), TX]);
    assert_eq!(h.session.rtr(), RtrPhase::Done);
    assert!(h.out().contains(&Out::Admit(SEND, Admit::Go)));

    // A silent Initiator: at the deadline, MPA local catastrophic error, then close.
    let mut h = harness(Role::Responder, Some(RtrType::Send), 1, 1);
    h.run(&[Op::Advance(TIMEOUT_MS - 1), TX]);
    assert_eq!(h.session.state(), SessionState::Active);
    h.run(&[Op::Advance(1), TX]);
    assert_terminated(&h, TermCause::mpa(MpaErrorCode::LocalCatastrophic));
}

#[test]
fn send_rtr_takes_no_receive_and_a_mismatched_rtr_is_taken_as_it_comes() {
    let data = stream(|b| {
        b.push(&send(1, 0, true), &[]);
        b.push(&send(2, 0, true), b"ulp");
    });
    let h = both(Role::Responder, Some(RtrType::Send), 1, 1, &[Op::Rx(data)]);
    let recv: Vec<_> = h
        .out()
        .iter()
        .filter_map(|o| match o {
            Out::Recv(m) => Some(m.msn),
            _ => None,
        })
        .collect();
    assert_eq!(recv, vec![2], "the Send RTR completes no receive");

    // The Initiator sent a Write RTR although Send was negotiated: the gate opens, and
    // the ULP's first Send (MSN 1, empty) is the ULP's, not an RTR.
    let data = stream(|b| {
        b.push(&write(0, 0, true), &[]);
        b.push(&send(1, 0, true), &[]);
    });
    let h = both(
        Role::Responder,
        Some(RtrType::Send),
        1,
        1,
        &[Op::Rx(data), TX],
    );
    assert_eq!(h.session.state(), SessionState::Active);
    assert!(h
        .out()
        .iter()
        .any(|o| matches!(o, Out::Recv(m) if m.msn == 1)));
}

#[test]
fn peer_terminate_mid_message_closes_without_an_answer() {
    let term = Terminate::new(TermCause::rdmap(RdmapError::LocalCatastrophic));
    let data = stream(|b| {
        b.push(&send(1, 0, false), b"half");
        b.push(
            &UlpduHeader::header_only(Opcode::Terminate, 1, RdmapHeader::Terminate(term)),
            &[],
        );
        b.push(&write(0x100, 0x1000, true), &[1; 8]);
    });
    let h = both(
        Role::Initiator,
        None,
        1,
        1,
        &[Op::Post(SEND), Op::Rx(data), TX],
    );
    assert_eq!(
        h.events(),
        vec![Event::Closed(Close::PeerTerminated(Some(term)))]
    );
    assert!(
        h.transmits().is_empty(),
        "nothing sent after the peer's TERMINATE"
    );
    assert_eq!(placed(&h).len(), 1, "only the half Send before it");
}

#[test]
fn a_terminate_that_cannot_be_sent_closes_at_the_deadline() {
    let cause = TermCause::rdmap(RdmapError::LocalCatastrophic);
    let mut h = harness(Role::Initiator, None, 1, 1);
    h.run(&[
        Op::Fail(cause),
        Op::Transmit {
            terminate_sent: false,
        },
        Op::Advance(TIMEOUT_MS - 1),
    ]);
    assert_eq!(h.events(), vec![Event::Failed(cause)], "QP fails at once");
    h.run(&[Op::Advance(1), TX]);
    assert_eq!(
        h.session.state(),
        SessionState::Closed(Close::TerminateTimedOut(cause))
    );
    // A second error is not a second TERMINATE.
    h.run(&[Op::Fail(TermCause::mpa(MpaErrorCode::CrcMismatch)), TX]);
    assert_eq!(h.transmits().len(), 1);
}

#[test]
fn a_rejected_completion_terminates() {
    let cause = TermCause::rdmap(RdmapError::LocalCatastrophic);
    let data = stream(|b| {
        b.push(&send(1, 0, true), b"one");
        b.push(&send(2, 0, true), b"two");
    });
    let mut h = harness(Role::Initiator, None, 1, 1);
    h.reject(0, cause);
    h.run(&[Op::Rx(data), TX]);
    assert_eq!(
        h.out().iter().filter(|o| matches!(o, Out::Recv(_))).count(),
        1
    );
    assert_terminated(&h, cause);
}

/// An `Rx` operation of a fuzz script carrying `d` (1 to 512 octets).
fn rx_op(d: &[u8]) -> Vec<u8> {
    let mut v = if d.len() <= 256 {
        vec![0x00, (d.len() - 1) as u8]
    } else {
        vec![0x08, (d.len() - 257) as u8]
    };
    v.extend_from_slice(d);
    v
}

/// Peer messages the scripts carry.
fn valid_streams() -> Vec<Vec<u8>> {
    vec![
        stream(|b| {
            b.push(&rresp(0x400, u64::MAX - 0x100, false), &[1; 0x40]);
            b.push(&rresp(0x400, u64::MAX - 0xC0, true), &[2; 0x40]);
        }),
        stream(|b| {
            b.push(&rreq(1, read_request(0x77, 8, 0x300, 0x3000)), &[]);
        }),
        stream(|b| {
            b.push(&send(1, 0, true), &[]);
        }),
        stream(|b| {
            b.push(&write(0x100, 0x1000, true), &[3; 40]);
        }),
        stream(|b| {
            b.push(&rresp(0, 0, true), &[]);
        }),
        stream(|b| {
            b.push(&rresp(0x200, 0x2000, true), &[4; 0x40]);
        }),
    ]
}

/// Scripts for the property test: a negotiation and depths, then valid and random
/// operations mixed.
fn script() -> impl Strategy<Value = Vec<u8>> {
    let valid = prop::sample::select(valid_streams());
    let op = prop_oneof![
        valid.prop_map(|d| rx_op(&d)),
        prop::collection::vec(any::<u8>(), 1..24),
        Just(vec![0x02, 0x41]),
        Just(vec![0x02, 0x40]),
        Just(vec![0x02, 0xC0]),
        Just(vec![0x03]),
        Just(vec![0x0B]),
        Just(vec![0x05, 0x80]),
        Just(vec![0x06]),
    ];
    (any::<u8>(), any::<u8>(), prop::collection::vec(op, 0..12)).prop_map(|(s, d, ops)| {
        let mut v = vec![(s & !1) | 2, d];
        for o in ops {
            v.extend(o);
        }
        v
    })
}

/// Writes the seed inputs of the `session` fuzz corpus (run by hand:
/// `cargo test --test session -- --ignored write_session_seeds`).
#[test]
#[ignore]
fn write_session_seeds() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/session");
    std::fs::create_dir_all(dir).unwrap();
    let v = valid_streams();
    // (sel, depths, ops): CRC framing; roles and RTR types; IRD 2, ORD 2.
    let seeds: Vec<(&str, u8, Vec<Vec<u8>>)> = vec![
        (
            "read-exact",
            0x02,
            vec![vec![0x02, 0x41], vec![0x03], rx_op(&v[0])],
        ),
        ("read-unsolicited", 0x02, vec![rx_op(&v[0]), vec![0x03]]),
        (
            "read-wrong-sink",
            0x02,
            vec![vec![0x02, 0x40], vec![0x03], rx_op(&v[0]), vec![0x03]],
        ),
        ("irq", 0x06, vec![rx_op(&v[1]), vec![0x03]]),
        (
            "p2p-read-rtr",
            0x0A,
            vec![
                vec![0x03],
                rx_op(&v[4]),
                vec![0x02, 0x41],
                vec![0x03],
                rx_op(&v[0]),
            ],
        ),
        (
            "p2p-send-rtr",
            0x2E,
            vec![rx_op(&v[2]), vec![0x07, 0], vec![0x03]],
        ),
        (
            "p2p-silent",
            0x1E,
            vec![vec![0x03], vec![0x05, 0x64], vec![0x0B], vec![0x05, 0x64]],
        ),
        (
            "write-fence",
            0x02,
            vec![
                vec![0x02, 0x41],
                vec![0x02, 0xC0],
                vec![0x03],
                rx_op(&v[3]),
                rx_op(&v[0]),
                vec![0x03],
            ],
        ),
    ];
    for (name, sel, ops) in seeds {
        let mut d = vec![sel, 0x22];
        for o in ops {
            d.extend(o);
        }
        session_case(&d);
        std::fs::write(format!("{dir}/seed-{name}"), d).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn session_invariants_hold_on_generated_scripts(data in script()) {
        session_case(&data);
    }
}

/// Every input of the stored `session` fuzz corpus keeps the invariants.
#[test]
fn fuzz_corpus_session_replays_clean() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/session");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("session corpus") {
        let data = std::fs::read(e.expect("entry").path()).expect("read");
        session_case(&data);
        n += 1;
    }
    assert!(n > 0, "empty corpus");
}
