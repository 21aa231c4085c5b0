// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: the full RX decoder (engine::rx_decoder: MPA deframer + DDP/RDMAP receiver)
//! on arbitrary octets after Full Operation began, with arbitrary markers/CRC/version/
//! RFC 7306/IRD settings, outstanding Reads and segmentation, against the shared mock MR
//! table. Must never panic or over-read; every placement must lie inside a target the
//! local side granted (a remote-write MR for a Write, the sink of a posted Read for a Read
//! Response); at most one TERMINATE, and no placement or event after it (or after the
//! peer's TERMINATE); placements, events and result must not depend on the segmentation.

#![no_main]

#[path = "../../core/tests/common/mpa_util.rs"]
mod mpa_util;

#[path = "../../core/tests/common/ddp_util.rs"]
mod ddp_util;

use ddp_util::{decoder, post_reads, run, Framing, MockMem, RecEvents};
use libfuzzer_sys::fuzz_target;
use rsiw_core::engine::orq::ReadSink;
use rsiw_core::wire::ulpdu::Config;

fuzz_target!(|data: &[u8]| {
    let [sel, chunk, ird, rest @ ..] = data else {
        return;
    };
    let framing = Framing {
        markers: sel & 1 != 0,
        crc: sel & 2 != 0,
    };
    let cfg = if sel & 8 != 0 {
        Config::for_mpa_rev(0, sel & 4 != 0)
    } else {
        Config::for_mpa_rev(2, sel & 4 != 0)
    };
    let ird = u32::from(*ird & 7);
    let chunk = usize::from(*chunk).max(1);
    // Outstanding Reads (sel bits 4-5: how many of these, oldest first): into the
    // local-write MR 0x200, into the everything MR 0x400 near 2^64, and a zero-length one.
    let all_reads = [
        ReadSink {
            stag: 0x200,
            to: 0x2000,
            len: 0x800,
        },
        ReadSink {
            stag: 0x400,
            to: u64::MAX - 0x100,
            len: 0x80,
        },
        ReadSink {
            stag: 0,
            to: 0,
            len: 0,
        },
    ];
    let reads = &all_reads[..usize::from((sel >> 4) & 3)];

    let mut m1 = MockMem::sample();
    let mut e1 = RecEvents::default();
    let mut d1 = decoder(framing, cfg, ird);
    post_reads(&mut d1, &mut m1, reads);
    let a = run(&mut d1, &mut m1, &mut e1, rest, &[chunk, 1, chunk / 3 + 1]);

    let mut m2 = MockMem::sample();
    let mut e2 = RecEvents::default();
    let mut d2 = decoder(framing, cfg, ird);
    post_reads(&mut d2, &mut m2, reads);
    let b = run(&mut d2, &mut m2, &mut e2, rest, &[1]);

    assert!(a.terms.len() <= 1, "more than one TERMINATE");
    assert_eq!(a.consumed, rest.len());
    assert_eq!(a, b, "segmentation changed the outcome");
    assert_eq!(d1.state(), d2.state());
});
