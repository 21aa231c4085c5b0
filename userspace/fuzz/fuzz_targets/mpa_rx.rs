// SPDX-License-Identifier: GPL-2.0

//! Fuzz target: the MPA RX deframer (RFC 5044 §4, §8) on arbitrary octets with arbitrary
//! marker/CRC settings and segmentation. Must never panic or over-read; the events seen by
//! the receiver and the result must not depend on the segmentation; after an error nothing
//! more is consumed.

#![no_main]

#[path = "../../core/tests/common/mpa_util.rs"]
mod mpa_util;

use libfuzzer_sys::fuzz_target;
use mpa_util::{MockRx, SliceRx};
use rsiw_core::engine::mpa_rx::{MpaRx, RxConfig, RxError};
use rsiw_core::engine::stream::RxStream;
use rsiw_core::wire::marker::FpduPtrBase;

fn run(
    cfg: RxConfig,
    off: u32,
    data: &[u8],
    chunk: usize,
) -> (Vec<mpa_util::Ev>, Option<RxError<&'static str>>, usize) {
    let mut rx = MpaRx::at_stream_offset(cfg, off).unwrap();
    let mut m = MockRx::default();
    let mut used = 0;
    for c in data.chunks(chunk) {
        let mut s = SliceRx::new(c);
        let r = rx.process(&mut s, &mut m);
        used += s.pos;
        if let Err(e) = r {
            // Halted: a second call consumes nothing.
            let mut again = SliceRx::new(c);
            assert_eq!(rx.process(&mut again, &mut m), Err(RxError::Halted));
            assert_eq!(again.available(), c.len());
            return (m.events, Some(e), used);
        }
        assert_eq!(s.available(), 0);
    }
    (m.events, None, used)
}

fuzz_target!(|data: &[u8]| {
    let [sel, phase, chunk, rest @ ..] = data else {
        return;
    };
    let cfg = RxConfig {
        markers: sel & 1 != 0,
        crc: sel & 2 != 0,
        fpduptr: if sel & 4 != 0 {
            FpduPtrBase::FpduStart
        } else {
            FpduPtrBase::UlpduLength
        },
    };
    let off = u32::from(*phase) * 4;
    let a = run(cfg, off, rest, usize::from(*chunk).max(1));
    let b = run(cfg, off, rest, 1);
    assert_eq!(a, b);
});
