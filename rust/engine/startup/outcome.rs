// SPDX-License-Identifier: GPL-2.0

//! What MPA startup ends with: the status, the error and what to do about it, the peer's
//! frame and the negotiated parameters of Full Operation.

use super::super::mpa_rx::RxConfig;
use super::super::mpa_tx::TxConfig;
use super::Role;
use crate::wire::fpdu::{mulpdu, MULPDU_MAX};
use crate::wire::marker::FpduPtrBase;
use crate::wire::mpa::{Enhanced, FrameKind, MpaErrorCode, ParseError, RtrType, PD_MAX};

/// What the shell does with the connection after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Close the TCP connection now (RFC 5044 §8 code 4, or code 1).
    Close,
    /// Send TERMINATE (Layer 2, EType 0, the code) as the first FPDU using
    /// [`Startup::negotiated`], then close (RFC 6581 §9).
    Terminate,
}

/// The detailed cause of a [`StartupError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The frame did not parse.
    Parse(ParseError),
    /// A frame of the wrong kind arrived (e.g. a Request at the Initiator: an
    /// Initiator/Initiator startup, §7.1.2 rule 8).
    UnexpectedFrame(FrameKind),
    /// The peer's Rev cannot interoperate (the value received).
    RevUnsupported(u8),
    /// The draft Reply set S although the Request did not promise an Rtr frame.
    RtrNotRequested,
    /// Octets arrived while no frame was expected (e.g. after the Request, before the
    /// Reply was sent).
    UnexpectedData,
    /// The peer closed in the middle of a startup frame (PD_Length not matched).
    Truncated,
    /// The peer closed before sending a frame.
    PeerClosed,
    /// The Responder's ORD exceeds this Initiator's IRD (RFC 6581 §9.1).
    InsufficientIrd {
        /// Responder ORD received.
        responder_ord: u16,
        /// Local IRD.
        local_ird: u16,
    },
    /// No RTR type both sides support, or the Responder refused the peer-to-peer model.
    NoMatchingRtr,
}

/// A startup failure: the MPA error code, what to do, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupError {
    /// MPA error code (RFC 5044 §8, RFC 6581 §8).
    pub code: MpaErrorCode,
    /// Close now, or TERMINATE then close.
    pub action: Action,
    /// Detail.
    pub reason: Reason,
}

impl StartupError {
    pub(super) const fn close(reason: Reason) -> Self {
        StartupError {
            code: MpaErrorCode::InvalidStartup,
            action: Action::Close,
            reason,
        }
    }
}

/// Misuse of the API (not a protocol event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiError {
    /// The call does not fit the current [`Status`].
    WrongState,
    /// Private Data exceeds 512 octets (508 with the enhanced block).
    PdTooLong,
    /// The configuration cannot be used (e.g. an enhanced Responder with no RTR type).
    BadConfig,
}

/// Where the engine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Initiator: waiting for the Reply.
    AwaitingReply,
    /// Responder: waiting for the Request.
    AwaitingRequest,
    /// Responder: a valid Request arrived; the ULP inspects [`Startup::peer`] and calls
    /// [`Startup::accept`] or [`Startup::reject`].
    RequestReceived,
    /// Draft Responder: accepting Reply with S=1 sent, waiting for the Rtr frame.
    AwaitingRtr,
    /// Full Operation may begin; see [`Startup::negotiated`]. Send [`Startup::tx_pending`]
    /// first (the Reply, or the draft Rtr frame): this direction's Full Operation stream,
    /// and so its marker phase, starts right after it.
    Established,
    /// Connection rejected (R=1 sent or received): exit MPA, TCP stays open.
    Rejected,
    /// Failed; see the error's [`Action`].
    Failed(StartupError),
}

/// Private Data in a fixed buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    buf: [u8; PD_MAX],
    len: u16,
}

impl PrivateData {
    /// No Private Data.
    pub const EMPTY: PrivateData = PrivateData {
        buf: [0; PD_MAX],
        len: 0,
    };

    pub(super) fn from_slice(data: &[u8]) -> Self {
        let mut pd = Self::EMPTY;
        let n = data.len().min(PD_MAX);
        if let (Some(dst), Some(src)) = (pd.buf.get_mut(..n), data.get(..n)) {
            dst.copy_from_slice(src);
        }
        // n <= 512.
        pd.len = n as u16;
        pd
    }

    /// The Private Data octets.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Length (octets).
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there is none.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl core::fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PrivateData")
            .field("len", &self.len)
            .finish()
    }
}

/// The peer's startup frame as the ULP sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerFrame {
    /// M: the peer requires markers from us.
    pub markers: bool,
    /// C: the peer asks for CRCs.
    pub crc: bool,
    /// R: the peer rejected (Reply only).
    pub reject: bool,
    /// Rev.
    pub rev: u8,
    /// The RFC 6581 block, passed to the ULP as §9.1 requires (also for a reject).
    pub enhanced: Option<Enhanced>,
    /// Draft S bit.
    pub rtr_flag: bool,
    /// L: the peer accepts FPDUs that span TCP segments (false for a Reply that returned
    /// the echo probe, whose L is a copy of ours).
    pub large_fpdu: bool,
    /// The ULP's Private Data (after any enhanced block).
    pub private_data: PrivateData,
}

/// Who may send the first FPDU (RFC 5044 §7.1.2 rule 4, RFC 6581 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendGate {
    /// Send FPDUs at will.
    Free,
    /// Responder: send nothing (no FPDU, no marker) before one FPDU was received and
    /// validated.
    AfterFirstRxFpdu,
    /// Initiator in the peer-to-peer model: the first FPDU must be this zero-length RTR
    /// operation; nothing may precede it.
    RtrFirst(RtrType),
}

/// IRD and ORD after RFC 6581 §9.1 negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrdOrd {
    /// Local IRD to configure (`0x3FFF` if the ULP manages it).
    pub ird: u16,
    /// Local ORD to configure (`0x3FFF` if the ULP manages it).
    pub ord: u16,
    /// The peer's IRD as received (for the ULP).
    pub peer_ird: u16,
    /// The peer's ORD as received (for the ULP).
    pub peer_ord: u16,
}

/// The result of a successful (or TERMINATE-bound) negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Our role.
    pub role: Role,
    /// MPA revision in use: 0 (RDMAC), 1, or 2.
    pub rev: u8,
    /// CRCs generated and checked, both directions.
    pub crc: bool,
    /// We insert markers in what we send (the peer's M).
    pub markers_tx: bool,
    /// The peer inserts markers in what it sends (our M).
    pub markers_rx: bool,
    /// We may send FPDUs larger than one TCP segment: both frames set L
    /// ([`crate::wire::mpa::FLAG_L`]), the Reply is no echo of the Request, and the peer
    /// is not Rev 0.
    pub large_fpdu_tx: bool,
    /// FPDUPTR convention (seed for Rev 0).
    pub fpduptr: FpduPtrBase,
    /// RFC 6581 IRD/ORD, when both sides used the enhanced block.
    pub ird_ord: Option<IrdOrd>,
    /// Peer-to-peer model negotiated (RFC 6581 A, or the draft Rtr frame).
    pub p2p: bool,
    /// RFC 6581 RTR type: the one the Initiator sends first. `None` without P2P, in draft
    /// mode, or when no type matched (then the Initiator terminates with error 7).
    pub rtr: Option<RtrType>,
    /// Draft mode: an Rtr frame was (Initiator) or will have been (Responder) exchanged.
    pub draft_rtr_frame: bool,
    /// Who may send first.
    pub send_gate: SendGate,
    /// The peer's ULP Private Data.
    pub private_data: PrivateData,
}

impl Negotiated {
    /// DDP and RDMAP version for this connection: 0 with a Rev 0 peer, else 1 (RFC 5044
    /// Appendix C; never mixed).
    pub const fn ddp_version(&self) -> u8 {
        if self.rev == 0 {
            0
        } else {
            1
        }
    }

    /// MULPDU (octets) for this connection's TX: [`MULPDU_MAX`] when
    /// [`Negotiated::large_fpdu_tx`], else the largest ULPDU whose FPDU fits one segment of
    /// `emss` octets (RFC 5044 §4.5).
    pub fn tx_mulpdu(&self, emss: u32) -> u16 {
        if self.large_fpdu_tx {
            MULPDU_MAX
        } else {
            mulpdu(emss, self.markers_tx)
        }
    }

    /// TX framer parameters for this connection.
    pub const fn tx_config(&self, mulpdu: u16) -> TxConfig {
        TxConfig {
            markers: self.markers_tx,
            crc: self.crc,
            fpduptr: self.fpduptr,
            mulpdu,
        }
    }

    /// RX deframer parameters for this connection.
    pub const fn rx_config(&self) -> RxConfig {
        RxConfig {
            markers: self.markers_rx,
            crc: self.crc,
            fpduptr: self.fpduptr,
        }
    }
}
