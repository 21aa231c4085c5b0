// SPDX-License-Identifier: GPL-2.0

//! Sans-IO protocol machines: MPA startup, the RX FPDU decoder with its outbound Read
//! queue, the TX FPDU builder, and the RDMAP session of a connection that ties them
//! together ([`session`]).
//!
//! The engines are fed bytes (through [`stream::RxStream`]) and emit bytes and placement
//! decisions (through [`stream::TxSink`] and [`stream::PlaceTarget`]); the kernel shell, or
//! the host test harness, moves the bytes. No kernel calls, no allocation, no `unsafe`.

pub mod ddp_rx;
pub mod ddp_tx;
pub mod mpa_rx;
pub mod mpa_tx;
pub mod orq;
pub mod ring;
pub mod rx_decoder;
pub mod rx_shell;
pub mod session;
pub mod startup;
pub mod stream;
