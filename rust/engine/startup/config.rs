// SPDX-License-Identifier: GPL-2.0

//! What an endpoint brings to MPA startup: its protocol mode, its RFC 6581 parameters and
//! its role.

use crate::wire::mpa::RtrSet;

/// Which startup protocol this endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// RFC 5044: Rev 1, no enhanced block. As Responder accepts Rev 1 only.
    Basic,
    /// RFC 6581: Initiator sends Rev 2 with the enhanced block; Responder accepts Rev 1 and
    /// Rev 2 and answers in kind (§10).
    Enhanced(EnhancedConfig),
    /// Seed-003 draft (2007): Rev 1; S means "Rtr frame". `rtr`: as Initiator, promise an
    /// Rtr frame (S=1 in the Request); as Responder, support it.
    DraftRtr {
        /// Use (Initiator) or support (Responder) the Rtr frame.
        rtr: bool,
    },
    /// RFC 5044 Appendix C, the RDMA Consortium's protocols: the Initiator sends a Rev 0
    /// Request with M and C set, whatever [`Config::crc`] and [`Config::markers`] say
    /// (Figure 14), and accepts only a Rev 0 Reply: DDP and RDMAP version 0, markers and
    /// CRC in both directions, the seed FPDUPTR (§C.2.4). The Responder is a permissive
    /// IETF RNIC of Rev 1: a Rev 0 Request gets a Rev 0 Reply with M and C set, a Rev 1
    /// Request a Rev 1 Reply as in [`Mode::Basic`], a Rev 2 Request is refused.
    Rdmac,
}

/// Local resources and wishes for RFC 6581 negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnhancedConfig {
    /// Local IRD: inbound RDMA Read Requests this endpoint can hold (14 bits;
    /// `0x3FFF` = leave IRD to the ULP, no automatic negotiation).
    pub ird: u16,
    /// Local ORD: outbound RDMA Reads wanted (14 bits; `0x3FFF` = no automatic negotiation).
    pub ord: u16,
    /// Initiator: request the peer-to-peer model (A=1). Ignored by a Responder, which
    /// mirrors the Request (§9.2).
    pub p2p: bool,
    /// Initiator: RTR types it can send. Responder: RTR types it accepts (must not be
    /// empty, §9.2).
    pub rtr: RtrSet,
}

/// Per-connection startup configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Protocol mode.
    pub mode: Mode,
    /// C bit: ask for CRCs (they are then on in both directions, §7.1.1).
    pub crc: bool,
    /// M bit: require markers in the FPDUs the peer sends.
    pub markers: bool,
    /// Offer and use FPDUs larger than one TCP segment: set L
    /// ([`crate::wire::mpa::FLAG_L`]) in the Request (with the echo probe) or an accepting
    /// Reply, and send FPDUs of up to [`crate::wire::fpdu::MULPDU_MAX`] octets of ULPDU when
    /// the peer offered them too.
    pub large_fpdu: bool,
    /// Accept Rev 0 (RDMAC) peers: DDP/RDMAP version 0, markers and CRC in both directions,
    /// seed FPDUPTR convention (RFC 5044 Appendix C "permissive IETF RNIC"). Implied by
    /// [`Mode::Rdmac`].
    pub permissive_rev0: bool,
}

/// The role in MPA startup (RFC 5044 §7.1: the Initiator sends the Request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the Request, receives the Reply.
    Initiator,
    /// Receives the Request, sends the Reply.
    Responder,
}
