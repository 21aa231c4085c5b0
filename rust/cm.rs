// SPDX-License-Identifier: GPL-2.0

//! Connection management: the iw_cm provider operations over kernel TCP sockets, with MPA
//! startup (RFC 5044 §7.1, RFC 6581) run by the protocol core's [`Startup`] engine.
//!
//! Objects and owners:
//! - [`Listener`]: one listening socket per listening `iw_cm_id`; the id's
//!   `provider_data` owns it from `iw_create_listen` to `iw_destroy_listen`.
//! - [`Cep`] (connection endpoint): one TCP connection from the start of MPA startup to its
//!   hand-over to the QP's transport (or its failure). The socket's callback attachment,
//!   the work item while queued, and — on the passive side — its listener (until the MPA
//!   Request is reported; destroying the listener closes it) and then the new
//!   `iw_cm_id`'s `provider_data` (from CONNECT_REQUEST until accept or reject) each own a
//!   reference.
//!
//! Every listener, CEP and connection holds a [`Live`] token: module exit waits until all
//! of them are gone, since their socket callbacks and timers are module code.
//!
//! All protocol work runs in the CEP's work item (process context): socket callbacks only
//! queue it. Events to iw_cm follow its state machine: one CONNECT_REPLY per accepted
//! `iw_connect`, ESTABLISHED after a successful `iw_accept`, nothing else before that.
//!
//! A CEP that completes startup hands its socket to the QP's transport ([`Conn`]); one
//! that does not within its device's `mpa_timeout_ms` (Request, Reply or draft Rtr frame)
//! is closed. A CEP uses its device's settings as they were when it started
//! ([`crate::settings`]).
//!
//! [`Startup`]: crate::engine::startup::Startup
//! [`Live`]: crate::sys::Live
//! [`Conn`]: crate::conn::Conn

use crate::engine::stream::TxSink;
use kernel::prelude::*;

mod cep;
mod listener;

pub(crate) use cep::Cep;
pub(crate) use listener::Listener;

/// What `rdma resource show cm_id -dd` shows of an `iw_cm_id` rsiw holds, by the index
/// of [`CM_ID_ATTRS`]: its listener's or CEP's state, the QP, and once MPA startup is
/// done what it negotiated (RFC 5044 §7.1, RFC 6581 §9.1).
pub(crate) mod detail {
    /// The state, by its name in [`super::CM_ID_STATES`].
    pub(crate) const STATE: usize = 0;
    /// The QP number the consumer connects or accepts with.
    pub(crate) const QPN: usize = 1;
    /// The MPA revision in use (0, 1 or 2).
    pub(crate) const MPA_REV: usize = 2;
    /// CRC in use: 1 or 0.
    pub(crate) const MPA_CRC: usize = 3;
    /// Markers sent: 1 or 0.
    pub(crate) const MPA_MARKERS_TX: usize = 4;
    /// Markers received: 1 or 0.
    pub(crate) const MPA_MARKERS_RX: usize = 5;
    /// The peer-to-peer model (RFC 6581) in use: 1 or 0.
    pub(crate) const P2P: usize = 6;
    /// Inbound Read depth: asked for, then negotiated.
    pub(crate) const IRD: usize = 7;
    /// Outbound Read depth: asked for, then negotiated.
    pub(crate) const ORD: usize = 8;
    /// A listener's backlog.
    pub(crate) const BACKLOG: usize = 9;
}

/// The names of the details, by the indices of [`detail`].
pub(crate) const CM_ID_ATTRS: &[&CStr] = &[
    c"state",
    c"qpn",
    c"mpa_rev",
    c"mpa_crc",
    c"mpa_markers_tx",
    c"mpa_markers_rx",
    c"p2p",
    c"ird",
    c"ord",
    c"backlog",
];

/// The states [`detail::STATE`] names, by their value ([`IdState`]).
pub(crate) const CM_ID_STATES: &[&CStr] = &[
    c"listening",
    c"await_mpa_reply",
    c"await_mpa_rtr",
    c"established",
    c"closed",
];

/// The values of [`detail::STATE`] (indices of [`CM_ID_STATES`]).
#[derive(Clone, Copy)]
pub(crate) enum IdState {
    /// A listener.
    Listening = 0,
    /// Active: the MPA Request is out, the Reply awaited.
    AwaitReply = 1,
    /// Passive, seed draft mode: accepted, the Initiator's Rtr frame awaited.
    AwaitRtr = 2,
    /// Startup done: the connection belongs to the QP's transport.
    Established = 3,
    /// Failed, rejected or closed.
    Closed = 4,
}

/// The one TERMINATE MPA startup may send ([`Cep::send_startup_terminate`]), framed into
/// a fixed buffer: 22 octets of ULPDU, its length field, a leading marker and the CRC
/// field make 32.
struct TermSink {
    buf: [u8; TermSink::LEN],
    len: usize,
    /// The FPDU did not fit (it is not sent then).
    overflow: bool,
}

impl TermSink {
    const LEN: usize = 64;
}

impl TxSink for TermSink {
    fn bytes(&mut self, data: &[u8], crc: Option<&mut u32>) {
        if let Some(c) = crc {
            *c = crate::sys::crc32c(*c, data);
        }
        match self.buf.get_mut(self.len..self.len + data.len()) {
            Some(dst) => {
                dst.copy_from_slice(data);
                self.len += data.len();
            }
            None => self.overflow = true,
        }
    }

    fn payload(&mut self, len: usize, _crc: Option<&mut u32>) {
        // A TERMINATE without echoed headers carries no payload.
        self.overflow |= len != 0;
    }
}
