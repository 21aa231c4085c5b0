// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: the RDMAP session engine (engine::session) driven by a script of peer
//! octets, SQ heads, transmit polls, timeouts and local failures, in either role, with or
//! without the peer-to-peer RTR exchange (layout in `fuzz/README.md`). Checked on every
//! run (`session_util::Harness`): every placed octet lies inside a target the local side
//! granted (a remote-write MR for a Write, the sink of an admitted, outstanding Read for a
//! Read Response, a posted receive for a Send); Read completions in order and exact;
//! nothing placed, completed or sent after the session stopped but one TERMINATE; RTR
//! first, Responder gated; IRD, ORD and the read fence kept; a withdrawn Read leaves no
//! ORQ entry; the QP's access flags refuse what they do not grant; the same outcome when
//! every peer octet arrives alone.

#![no_main]

#[path = "../../core/tests/common/mpa_util.rs"]
mod mpa_util;

#[path = "../../core/tests/common/ddp_util.rs"]
mod ddp_util;

#[path = "../../core/tests/common/session_util.rs"]
mod session_util;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    session_util::session_case(data);
});
