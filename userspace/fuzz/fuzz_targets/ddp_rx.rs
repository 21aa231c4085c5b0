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

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ddp_util::ddp_rx_case(data);
});
