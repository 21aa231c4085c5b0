// SPDX-License-Identifier: GPL-2.0

//! MPA startup negotiation for the Initiator and the Responder (RFC 5044 §7.1, RFC 6581
//! §5–§10, optionally the seed-003 draft "Rtr frame" mode, RFC 5044 Appendix C for Rev 0
//! peers).
//!
//! Sans-IO: the shell feeds received octets with [`Startup::feed`] (a slice) or
//! [`Startup::receive`] (an [`RxStream`]); any segmentation gives the same result. The
//! engine consumes only the octets of startup frames, so whatever follows (the first FPDUs)
//! stays for the RX deframer. Frames to send are read with [`Startup::tx_pending`] and
//! acknowledged with [`Startup::tx_advance`]. [`Startup::status`] says what to do next.
//!
//! Outcomes:
//! - [`Status::Established`]: enter Full Operation with [`Startup::negotiated`]. The
//!   markers of each direction start at the first octet after that direction's last startup
//!   frame. See [`SendGate`] for who may send the first FPDU.
//! - [`Status::Rejected`]: an R=1 Reply was sent or received; exit MPA and leave TCP open
//!   (RFC 5044 §7.1.2 rules 2, 3).
//! - [`Status::Failed`] with [`Action::Close`]: close TCP now (MPA error 4, invalid frame,
//!   or 1, peer closed).
//! - [`Status::Failed`] with [`Action::Terminate`]: the Initiator could not accept the
//!   RFC 6581 negotiation (error 6 or 7). Enter Full Operation with
//!   [`Startup::negotiated`], send TERMINATE Layer 2 / EType 0 / code as the first FPDU
//!   (instead of the RTR), then close (RFC 6581 §9.1, §9.2).
//!
//! Large FPDUs: with [`Config::large_fpdu`] the Request and an accepting Reply set L
//! ([`crate::wire::mpa::FLAG_L`]), the Request also the echo probe P
//! ([`crate::wire::mpa::FLAG_P`]). This side sends FPDUs beyond one TCP segment only when
//! the peer's frame set L too and is no echo of the Request (a Reply without P)
//! ([`Negotiated::large_fpdu_tx`]), never to a Rev 0 peer.
//!
//! Memory: a [`Startup`] holds fixed buffers of about 2.6 KiB; keep it in the connection
//! object, not on a kernel stack.

use super::stream::RxStream;
use crate::wire::marker::FpduPtrBase;
use crate::wire::mpa::{
    Enhanced, FrameKind, MpaErrorCode, ParseError, Repr, RtrSet, RtrType, Variant, ENHANCED_LEN,
    FRAME_MAX, HEADER_LEN, IRD_ORD_NO_NEGOTIATION, KEY_LEN, PD_MAX,
};

mod config;
mod outcome;

pub use config::{Config, EnhancedConfig, Mode, Role};
pub use outcome::{
    Action, ApiError, IrdOrd, Negotiated, PeerFrame, PrivateData, Reason, SendGate, StartupError,
    Status,
};

const TX_MAX: usize = FRAME_MAX + HEADER_LEN;

/// The MPA startup state machine for one connection.
#[derive(Clone)]
pub struct Startup {
    cfg: Config,
    role: Role,
    status: Status,
    rx: [u8; FRAME_MAX],
    rx_len: usize,
    tx: [u8; TX_MAX],
    tx_start: usize,
    tx_end: usize,
    /// Initiator: what our Request said.
    sent_rev: u8,
    peer: Option<PeerFrame>,
    negotiated: Option<Negotiated>,
}

impl core::fmt::Debug for Startup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Startup")
            .field("role", &self.role)
            .field("status", &self.status)
            .field("rx_len", &self.rx_len)
            .field("tx_pending", &(self.tx_end - self.tx_start))
            .finish()
    }
}

const fn min_ird_ord(a: u16, b: u16) -> u16 {
    if a < b {
        a
    } else {
        b
    }
}

impl Startup {
    fn blank(cfg: Config, role: Role, status: Status) -> Self {
        Startup {
            cfg,
            role,
            status,
            rx: [0; FRAME_MAX],
            rx_len: 0,
            tx: [0; TX_MAX],
            tx_start: 0,
            tx_end: 0,
            sent_rev: 0,
            peer: None,
            negotiated: None,
        }
    }

    const fn variant(&self) -> Variant {
        match self.cfg.mode {
            Mode::DraftRtr { .. } => Variant::DraftRtr,
            _ => Variant::Rfc,
        }
    }

    /// Starts an Initiator: queues the Request carrying `private_data` (RFC 5044 §7.1.2
    /// rule 1).
    ///
    /// # Errors
    ///
    /// [`ApiError::PdTooLong`] if `private_data` exceeds 512 octets (508 in enhanced mode).
    pub fn initiator(cfg: Config, private_data: &[u8]) -> Result<Self, ApiError> {
        let mut s = Self::blank(cfg, Role::Initiator, Status::AwaitingReply);
        let (rev, enhanced, rtr_flag) = match cfg.mode {
            Mode::Basic => (1, None, false),
            Mode::Enhanced(e) => {
                let rtr = if e.p2p { e.rtr } else { RtrSet::NONE };
                (
                    2,
                    Some(Enhanced {
                        p2p: e.p2p,
                        rtr,
                        ird: e.ird,
                        ord: e.ord,
                    }),
                    false,
                )
            }
            Mode::DraftRtr { rtr } => (1, None, rtr),
            Mode::Rdmac => (0, None, false),
        };
        s.sent_rev = rev;
        // A Rev 0 Request asks for markers and CRC and has no L or P (Appendix C.2.4).
        let rev0 = rev == 0;
        let repr = Repr {
            kind: FrameKind::Request,
            markers: cfg.markers || rev0,
            crc: cfg.crc || rev0,
            reject: false,
            rev,
            enhanced,
            rtr_flag,
            large_fpdu: cfg.large_fpdu && !rev0,
            echo_probe: cfg.large_fpdu && !rev0,
            private_data,
        };
        s.queue(&repr)?;
        Ok(s)
    }

    /// Starts a Responder waiting for the Request.
    ///
    /// # Errors
    ///
    /// [`ApiError::BadConfig`] for an enhanced configuration without any RTR type.
    pub fn responder(cfg: Config) -> Result<Self, ApiError> {
        if let Mode::Enhanced(e) = cfg.mode {
            if e.rtr.is_empty() {
                return Err(ApiError::BadConfig);
            }
        }
        Ok(Self::blank(cfg, Role::Responder, Status::AwaitingRequest))
    }

    fn queue(&mut self, repr: &Repr<'_>) -> Result<(), ApiError> {
        if repr.buffer_len() > FRAME_MAX {
            return Err(ApiError::PdTooLong);
        }
        // Compact so that the frame fits behind what is still unsent.
        self.tx.copy_within(self.tx_start..self.tx_end, 0);
        self.tx_end -= self.tx_start;
        self.tx_start = 0;
        let room = self.tx.get_mut(self.tx_end..).unwrap_or(&mut []);
        let n = repr.emit(room).map_err(|_| ApiError::PdTooLong)?;
        self.tx_end += n;
        Ok(())
    }

    /// Our role.
    pub const fn role(&self) -> Role {
        self.role
    }

    /// Current status.
    pub const fn status(&self) -> Status {
        self.status
    }

    /// The peer's frame, once received (Request at the Responder, Reply at the Initiator).
    pub const fn peer(&self) -> Option<&PeerFrame> {
        self.peer.as_ref()
    }

    /// The negotiation result: set in [`Status::Established`], and in [`Status::Failed`]
    /// with [`Action::Terminate`] (to frame the TERMINATE).
    pub const fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Octets queued for sending (startup frames), in order.
    pub fn tx_pending(&self) -> &[u8] {
        self.tx.get(self.tx_start..self.tx_end).unwrap_or(&[])
    }

    /// Marks `n` octets of [`Startup::tx_pending`] as sent.
    pub fn tx_advance(&mut self, n: usize) {
        self.tx_start = self.tx_start.saturating_add(n).min(self.tx_end);
        if self.tx_start == self.tx_end {
            self.tx_start = 0;
            self.tx_end = 0;
        }
    }

    /// Octets the engine wants to complete the current frame (0 when it expects none).
    fn wanted(&self) -> usize {
        match self.status {
            Status::AwaitingReply | Status::AwaitingRequest | Status::AwaitingRtr => {}
            _ => return 0,
        }
        if self.rx_len < HEADER_LEN {
            HEADER_LEN - self.rx_len
        } else {
            let pd = u16::from_be_bytes([self.rx[18], self.rx[19]]);
            (HEADER_LEN + usize::from(pd)).saturating_sub(self.rx_len)
        }
    }

    fn fail(&mut self, e: StartupError) -> Result<(), StartupError> {
        self.status = Status::Failed(e);
        if e.action == Action::Close {
            // E.g. a bad draft Rtr frame after the Reply: there is no Full Operation.
            self.negotiated = None;
        }
        Err(e)
    }

    /// Feeds received octets; returns how many were consumed. Octets after the last
    /// startup frame are not consumed: in [`Status::Established`] hand them to the RX
    /// deframer; in [`Status::Rejected`] they belong to the ULP.
    ///
    /// # Errors
    ///
    /// The [`StartupError`] that put the engine in [`Status::Failed`] (returned again on
    /// every later call).
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, StartupError> {
        let mut used = 0;
        loop {
            if let Status::Failed(e) = self.status {
                return Err(e);
            }
            let rest = data.get(used..).unwrap_or(&[]);
            if rest.is_empty() {
                return Ok(used);
            }
            if self.status == Status::RequestReceived {
                self.fail(StartupError::close(Reason::UnexpectedData))?;
            }
            let n = rest.len().min(self.wanted());
            if n == 0 {
                return Ok(used);
            }
            let (src, dst) = (rest.get(..n), self.rx.get_mut(self.rx_len..self.rx_len + n));
            if let (Some(src), Some(dst)) = (src, dst) {
                dst.copy_from_slice(src);
            }
            self.rx_len += n;
            used += n;
            self.input()?;
        }
    }

    /// Like [`Startup::feed`], consuming from an [`RxStream`] (only startup frame octets).
    ///
    /// # Errors
    ///
    /// As [`Startup::feed`].
    pub fn receive<S: RxStream>(&mut self, raw: &mut S) -> Result<(), StartupError> {
        loop {
            if let Status::Failed(e) = self.status {
                return Err(e);
            }
            let avail = raw.available();
            if avail == 0 {
                return Ok(());
            }
            if self.status == Status::RequestReceived {
                self.fail(StartupError::close(Reason::UnexpectedData))?;
            }
            let n = avail.min(self.wanted());
            if n == 0 {
                return Ok(());
            }
            if let Some(dst) = self.rx.get_mut(self.rx_len..self.rx_len + n) {
                raw.take(dst, None);
            }
            self.rx_len += n;
            self.input()?;
        }
    }

    /// The peer closed the connection (FIN/RST) during startup: MPA error 1, or 4 if it
    /// left a frame incomplete. Returns the error and enters [`Status::Failed`] unless
    /// startup already ended.
    pub fn peer_closed(&mut self) -> StartupError {
        if let Status::Failed(e) = self.status {
            return e;
        }
        let e = if self.wanted() > 0 && self.rx_len > 0 {
            StartupError::close(Reason::Truncated)
        } else {
            StartupError {
                code: MpaErrorCode::TcpClosed,
                action: Action::Close,
                reason: Reason::PeerClosed,
            }
        };
        if self.wanted() > 0 || self.status == Status::RequestReceived {
            let _ = self.fail(e);
        }
        e
    }

    /// Validates as soon as the header is complete, handles complete frames.
    fn input(&mut self) -> Result<(), StartupError> {
        if self.rx_len == HEADER_LEN {
            let key = self.rx.get(..KEY_LEN).unwrap_or(&[]);
            if FrameKind::from_key(key, self.variant()).is_none() {
                return self.fail(StartupError::close(Reason::Parse(ParseError::BadKey)));
            }
            let pd = u16::from_be_bytes([self.rx[18], self.rx[19]]);
            if usize::from(pd) > PD_MAX {
                return self.fail(StartupError::close(Reason::Parse(ParseError::PdTooLong(
                    pd,
                ))));
            }
        }
        if self.rx_len < HEADER_LEN || self.wanted() > 0 {
            return Ok(());
        }
        let len = self.rx_len;
        self.rx_len = 0;
        let frame = self.rx;
        let repr = match Repr::parse(frame.get(..len).unwrap_or(&[]), self.variant()) {
            Ok(r) => r,
            Err(e) => return self.fail(StartupError::close(Reason::Parse(e))),
        };
        let r = match self.status {
            Status::AwaitingRequest => self.on_request(&repr),
            Status::AwaitingReply => self.on_reply(&repr),
            Status::AwaitingRtr => self.on_rtr(&repr),
            _ => Ok(()),
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e),
        }
    }

    /// The peer's frame as the ULP sees it. L in a Reply that returns the echo probe is no
    /// offer (the Responder copied the Request's flags).
    fn peer_frame(repr: &Repr<'_>) -> PeerFrame {
        let echo = repr.kind == FrameKind::Reply && repr.echo_probe;
        PeerFrame {
            markers: repr.markers,
            crc: repr.crc,
            reject: repr.reject,
            rev: repr.rev,
            enhanced: repr.enhanced,
            rtr_flag: repr.rtr_flag,
            large_fpdu: repr.large_fpdu && !echo,
            private_data: PrivateData::from_slice(repr.private_data),
        }
    }

    /// Highest Rev this endpoint accepts from a peer.
    const fn max_rev(&self) -> u8 {
        match self.cfg.mode {
            Mode::Enhanced(_) => 2,
            _ => 1,
        }
    }

    fn check_rev(&self, rev: u8) -> Result<(), StartupError> {
        let ok = match rev {
            0 => self.cfg.permissive_rev0 || self.cfg.mode == Mode::Rdmac,
            r => r <= self.max_rev(),
        };
        if ok {
            Ok(())
        } else {
            Err(StartupError::close(Reason::RevUnsupported(rev)))
        }
    }

    fn on_request(&mut self, repr: &Repr<'_>) -> Result<(), StartupError> {
        if repr.kind != FrameKind::Request {
            return Err(StartupError::close(Reason::UnexpectedFrame(repr.kind)));
        }
        self.check_rev(repr.rev)?;
        self.peer = Some(Self::peer_frame(repr));
        self.status = Status::RequestReceived;
        Ok(())
    }

    fn base_negotiated(&self, peer: &PeerFrame) -> Negotiated {
        let rev0 = peer.rev == 0;
        let rev = if self.role == Role::Initiator {
            self.sent_rev.min(peer.rev)
        } else {
            peer.rev
        };
        Negotiated {
            role: self.role,
            rev,
            crc: rev0 || self.cfg.crc || peer.crc,
            markers_tx: rev0 || peer.markers,
            markers_rx: rev0 || self.cfg.markers,
            large_fpdu_tx: !rev0 && self.cfg.large_fpdu && peer.large_fpdu,
            fpduptr: if rev0 {
                FpduPtrBase::FpduStart
            } else {
                FpduPtrBase::UlpduLength
            },
            ird_ord: None,
            p2p: false,
            rtr: None,
            draft_rtr_frame: false,
            send_gate: match self.role {
                Role::Initiator => SendGate::Free,
                Role::Responder => SendGate::AfterFirstRxFpdu,
            },
            private_data: peer.private_data,
        }
    }

    /// Responder: sets the local IRD and ORD the Reply offers (RFC 6581 §9.1), for a ULP
    /// that learns them only when it accepts (iWARP CM: the accepting QP's resources).
    /// No effect in [`Mode::Basic`].
    pub fn set_local_ird_ord(&mut self, ird: u16, ord: u16) {
        if let Mode::Enhanced(e) = &mut self.cfg.mode {
            e.ird = ird;
            e.ord = ord;
        }
    }

    /// Responder: accepts the Request, queues the Reply carrying `private_data`, and
    /// completes the negotiation (RFC 5044 §7.1.2 rule 2; RFC 6581 §9 for an enhanced
    /// Request: IRD/ORD per §9.1, RTR choice per §9.2, preferring Write, Read, Send).
    ///
    /// # Errors
    ///
    /// [`ApiError::WrongState`] unless in [`Status::RequestReceived`];
    /// [`ApiError::PdTooLong`] if the Reply would carry more than 512 octets.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), ApiError> {
        let peer = match (self.status, self.peer) {
            (Status::RequestReceived, Some(p)) => p,
            _ => return Err(ApiError::WrongState),
        };
        let mut neg = self.base_negotiated(&peer);
        let mut reply_enh = None;
        if let (Some(req), Mode::Enhanced(local)) = (peer.enhanced, self.cfg.mode) {
            let mut rtr = None;
            let mut offer = RtrSet::NONE;
            if req.p2p {
                rtr = req.rtr.intersect(local.rtr).preferred();
                // Advertise the chosen type; with no match, advertise ours (§9.2).
                offer = match rtr {
                    Some(t) => RtrSet::only(t),
                    None => local.rtr,
                };
            }
            let no = IRD_ORD_NO_NEGOTIATION;
            let (ird, reply_ird) = if req.ord == no || local.ird == no {
                (local.ird, no)
            } else {
                // Enough for the Initiator's ORD (and 1 for a Read RTR), within our means.
                let need = if rtr == Some(RtrType::Read) && req.ord == 0 {
                    1
                } else {
                    req.ord
                };
                let v = min_ird_ord(local.ird, need);
                (v, v)
            };
            let (ord, reply_ord) = if req.ird == no || local.ord == no {
                (local.ord, no)
            } else {
                let v = min_ird_ord(local.ord, req.ird);
                (v, v)
            };
            neg.ird_ord = Some(IrdOrd {
                ird,
                ord,
                peer_ird: req.ird,
                peer_ord: req.ord,
            });
            neg.p2p = req.p2p;
            neg.rtr = rtr;
            reply_enh = Some(Enhanced {
                p2p: req.p2p,
                rtr: offer,
                ird: reply_ird,
                ord: reply_ord,
            });
        }
        let draft_rtr = matches!(self.cfg.mode, Mode::DraftRtr { rtr: true }) && peer.rtr_flag;
        if draft_rtr {
            neg.p2p = true;
            neg.draft_rtr_frame = true;
            neg.send_gate = SendGate::Free;
        }
        let repr = Repr {
            kind: FrameKind::Reply,
            markers: neg.markers_rx,
            crc: self.cfg.crc || peer.rev == 0,
            reject: false,
            rev: peer.rev,
            enhanced: reply_enh,
            rtr_flag: draft_rtr,
            large_fpdu: self.cfg.large_fpdu && peer.rev != 0,
            echo_probe: false,
            private_data,
        };
        self.queue(&repr)?;
        self.negotiated = Some(neg);
        self.status = if draft_rtr {
            Status::AwaitingRtr
        } else {
            Status::Established
        };
        Ok(())
    }

    /// Responder: rejects the Request with an R=1 Reply carrying `private_data`; MPA exits,
    /// TCP stays open (RFC 5044 §7.1.2 rule 2). An enhanced Request gets an enhanced
    /// Reply carrying the local IRD/ORD (RFC 6581 §9.1, e.g. the ORD the ULP requires).
    ///
    /// # Errors
    ///
    /// As [`Startup::accept`].
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), ApiError> {
        let peer = match (self.status, self.peer) {
            (Status::RequestReceived, Some(p)) => p,
            _ => return Err(ApiError::WrongState),
        };
        let enhanced = match (peer.enhanced, self.cfg.mode) {
            (Some(req), Mode::Enhanced(local)) => Some(Enhanced {
                p2p: req.p2p,
                rtr: if req.p2p { local.rtr } else { RtrSet::NONE },
                ird: local.ird,
                ord: local.ord,
            }),
            _ => None,
        };
        let repr = Repr {
            kind: FrameKind::Reply,
            markers: self.cfg.markers,
            crc: self.cfg.crc,
            reject: true,
            rev: peer.rev,
            enhanced,
            rtr_flag: false,
            large_fpdu: false,
            echo_probe: false,
            private_data,
        };
        self.queue(&repr)?;
        self.status = Status::Rejected;
        Ok(())
    }

    fn on_reply(&mut self, repr: &Repr<'_>) -> Result<(), StartupError> {
        if repr.kind != FrameKind::Reply {
            return Err(StartupError::close(Reason::UnexpectedFrame(repr.kind)));
        }
        self.check_rev(repr.rev)?;
        if repr.rev > self.sent_rev {
            return Err(StartupError::close(Reason::RevUnsupported(repr.rev)));
        }
        let requested_rtr = matches!(self.cfg.mode, Mode::DraftRtr { rtr: true });
        if repr.rtr_flag && !requested_rtr && !repr.reject {
            return Err(StartupError::close(Reason::RtrNotRequested));
        }
        let peer = Self::peer_frame(repr);
        self.peer = Some(peer);
        if repr.reject {
            self.status = Status::Rejected;
            return Ok(());
        }
        let mut neg = self.base_negotiated(&peer);
        let mut err = None;
        if let Mode::Enhanced(local) = self.cfg.mode {
            match peer.enhanced {
                Some(rep) if peer.rev != 0 => {
                    let no = IRD_ORD_NO_NEGOTIATION;
                    let ord = if rep.ird == no || local.ord == no {
                        local.ord
                    } else {
                        min_ird_ord(local.ord, rep.ird)
                    };
                    let ird = local.ird;
                    if rep.ord != no && local.ird != no && rep.ord > local.ird {
                        err = Some((
                            MpaErrorCode::InsufficientIrd,
                            Reason::InsufficientIrd {
                                responder_ord: rep.ord,
                                local_ird: local.ird,
                            },
                        ));
                    }
                    neg.ird_ord = Some(IrdOrd {
                        ird,
                        ord,
                        peer_ird: rep.ird,
                        peer_ord: rep.ord,
                    });
                    if local.p2p {
                        neg.p2p = true;
                        neg.rtr = if rep.p2p {
                            rep.rtr.intersect(local.rtr).preferred()
                        } else {
                            None
                        };
                        match neg.rtr {
                            Some(t) => neg.send_gate = SendGate::RtrFirst(t),
                            None if err.is_none() => {
                                err = Some((MpaErrorCode::NoMatchingRtr, Reason::NoMatchingRtr))
                            }
                            None => {}
                        }
                    }
                }
                // An unenhanced Reply (Rev 1 or Rev 0 peer): the ULP handles IRD/ORD; the
                // peer-to-peer model cannot be honoured.
                _ => {
                    if local.p2p {
                        err = Some((MpaErrorCode::NoMatchingRtr, Reason::NoMatchingRtr));
                    }
                }
            }
        }
        if repr.rtr_flag && requested_rtr {
            let rtr = Repr {
                kind: FrameKind::Rtr,
                markers: false,
                crc: neg.crc,
                reject: false,
                rev: self.sent_rev,
                enhanced: None,
                rtr_flag: false,
                large_fpdu: false,
                echo_probe: false,
                private_data: &[],
            };
            // An empty Rtr frame always fits behind the Request.
            let _ = self.queue(&rtr);
            neg.p2p = true;
            neg.draft_rtr_frame = true;
        }
        self.negotiated = Some(neg);
        match err {
            Some((code, reason)) => Err(StartupError {
                code,
                action: Action::Terminate,
                reason,
            }),
            None => {
                self.status = Status::Established;
                Ok(())
            }
        }
    }

    fn on_rtr(&mut self, repr: &Repr<'_>) -> Result<(), StartupError> {
        if repr.kind != FrameKind::Rtr {
            return Err(StartupError::close(Reason::UnexpectedFrame(repr.kind)));
        }
        // The draft defines no Private Data format for the Rtr frame; it is dropped.
        self.status = Status::Established;
        Ok(())
    }
}

/// Largest ULP Private Data an enhanced frame can carry (octets).
pub const ENHANCED_PD_MAX: usize = PD_MAX - ENHANCED_LEN;
