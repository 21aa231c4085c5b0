// SPDX-License-Identifier: GPL-2.0

//! The network stack: kernel TCP sockets and their socket buffers ([`socket`]), network
//! devices and their events ([`netdev`]), and the `rdma link` type ([`link`]).

pub(crate) mod link;
pub(crate) mod netdev;
pub(crate) mod socket;
