// SPDX-License-Identifier: GPL-2.0

//! Host build of rsiw's protocol core.
//!
//! The modules below are the very files `rsiw.ko` compiles (`rust/wire`, `rust/engine`),
//! included by path so that host tests, property tests and fuzzers exercise the kernel's code.
//! The lint set mirrors the kernel's Rust flags so that code passing here also passes there.

#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub, rust_2018_idioms)]
#![deny(
    clippy::all,
    clippy::as_underscore,
    clippy::cast_lossless,
    clippy::ignored_unit_patterns,
    clippy::mut_mut,
    clippy::needless_bitwise_bool,
    clippy::ptr_as_ptr,
    clippy::ptr_cast_constness,
    clippy::ref_as_ptr,
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment,
    clippy::unnecessary_safety_doc
)]
#![allow(clippy::needless_lifetimes)]

#[path = "../../../rust/wire/mod.rs"]
pub mod wire;

#[path = "../../../rust/engine/mod.rs"]
pub mod engine;
