// SPDX-License-Identifier: GPL-2.0

//! Wire codecs for MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and RDMAP (RFC 5040, RFC 7306).
//!
//! Pure functions of bytes: no kernel calls, no allocation, no `unsafe`. The same files are
//! compiled into `rsiw.ko` and into the host crate `userspace/core`.

pub mod crc;
pub mod ddp;
pub mod fpdu;
pub mod marker;
pub mod mpa;
pub mod rdmap;
pub mod terminate;
pub mod ulpdu;
