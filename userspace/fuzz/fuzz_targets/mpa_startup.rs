// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: MPA startup (RFC 5044 §7.1, RFC 6581, seed-003 draft) in either role and
//! any mode, fed arbitrary octets in arbitrary chunks. Must never panic; checks that the
//! engine never consumes more than offered, that its outcome is independent of the
//! chunking, and that every state is self-consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rsiw_core::engine::startup::{
    Action, Config, EnhancedConfig, Mode, Reason, Role, Startup, Status,
};
use rsiw_core::wire::mpa::RtrSet;

fn config(sel: u8, ird: u8, ord: u8, large_fpdu: bool) -> Config {
    let rtr = RtrSet {
        send: sel & 0x01 != 0,
        write: sel & 0x02 != 0,
        read: sel & 0x04 != 0,
    };
    let mode = match (sel >> 3) & 3 {
        0 => Mode::Basic,
        1 => Mode::DraftRtr {
            rtr: sel & 0x01 != 0,
        },
        3 => Mode::Rdmac,
        _ => Mode::Enhanced(EnhancedConfig {
            ird: if ird == 0xFF { 0x3FFF } else { u16::from(ird) },
            ord: if ord == 0xFF { 0x3FFF } else { u16::from(ord) },
            p2p: sel & 0x08 != 0,
            rtr: if rtr.is_empty() { RtrSet::ALL } else { rtr },
        }),
    };
    Config {
        mode,
        crc: sel & 0x20 != 0,
        markers: sel & 0x40 != 0,
        large_fpdu,
        permissive_rev0: sel & 0x80 != 0,
    }
}

fn drive(s: &mut Startup, data: &[u8], chunk: usize, accept: bool) -> usize {
    let mut used = 0;
    for c in data.chunks(chunk) {
        match s.feed(c) {
            Ok(n) => {
                assert!(n <= c.len());
                used += n;
                if s.status() == Status::RequestReceived {
                    let r = if accept {
                        s.accept(b"pd")
                    } else {
                        s.reject(b"no")
                    };
                    r.unwrap();
                }
                if n < c.len() {
                    break;
                }
            }
            Err(e) => {
                assert_eq!(s.status(), Status::Failed(e));
                assert_eq!(e.action == Action::Terminate, s.negotiated().is_some());
                break;
            }
        }
    }
    used
}

fuzz_target!(|data: &[u8]| {
    let [sel, ird, ord, chunk, flags, rest @ ..] = data else {
        return;
    };
    let cfg = config(*sel, *ird, *ord, flags & 4 != 0);
    let chunk = usize::from(*chunk).max(1);
    let accept = flags & 1 != 0;
    let mut engines = Vec::new();
    if flags & 2 != 0 {
        if let Ok(s) = Startup::responder(cfg) {
            engines.push(s);
        }
    } else {
        engines.push(Startup::initiator(cfg, b"fuzz").unwrap());
    }
    for s in engines {
        let mut a = s.clone();
        let mut b = s;
        let used_a = drive(&mut a, rest, chunk, accept);
        let used_b = drive(&mut b, rest, 1, accept);
        // Octets after the Request and before the ULP accepted are a protocol violation
        // (an improperly formatted startup: close, RFC 5044 §7.1.2); whether they arrived "before" depends on where the
        // chunk ended, so that outcome alone is timing dependent.
        let early = |s: &Startup| matches!(s.status(), Status::Failed(e) if e.reason == Reason::UnexpectedData);
        if early(&a) || early(&b) {
            continue;
        }
        assert_eq!(a.status(), b.status());
        if !matches!(a.status(), Status::Failed(_)) {
            // (A failing call reports no count; the connection is being torn down anyway.)
            assert_eq!(used_a, used_b);
        }
        assert_eq!(a.negotiated(), b.negotiated());
        if a.status() == Status::Established {
            assert!(a.negotiated().is_some());
        }
        // Large FPDUs go only to a peer that offered them, when this side offered them
        // too, and never to a Rev 0 peer.
        if let Some(n) = a.negotiated() {
            if n.large_fpdu_tx {
                assert!(cfg.large_fpdu && n.rev != 0);
                assert!(a.peer().is_some_and(|p| p.large_fpdu));
            }
            // Version 0 means markers and CRC both ways; an RDMAC Initiator gets nothing
            // else (Appendix C).
            if n.rev == 0 {
                assert!(n.crc && n.markers_tx && n.markers_rx && n.ddp_version() == 0);
            }
            if cfg.mode == Mode::Rdmac && a.role() == Role::Initiator {
                assert_eq!(n.rev, 0);
            }
        }
        let _ = a.peer_closed();
    }
});
