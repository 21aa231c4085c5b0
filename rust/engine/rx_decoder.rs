// SPDX-License-Identifier: GPL-2.0

//! The RX FPDU decoder of one connection: the MPA deframer ([`MpaRx`], RFC 5044 §4-§8)
//! feeding the DDP/RDMAP receiver ([`DdpRx`], RFC 5041, RFC 5040, RFC 7306), behind one
//! call.
//!
//! The shell calls [`Decoder::process`] whenever octets arrive, with its [`RxStream`] over
//! the TCP receive queue, its [`MemoryLookup`] and its [`RxEvents`]. Any segmentation of the
//! stream gives the same placements, events and result. The first error, whichever layer
//! finds it, is returned once as the [`Terminate`] to send; afterwards, and after the peer's
//! own TERMINATE, the decoder consumes and discards everything without placing or reporting
//! anything (RFC 5044 §8, RFC 5041 §7.1, RFC 5040 §7).

use super::ddp_rx::{DdpConfig, DdpRx, MemoryLookup, QpAccess, RxEvents, RxState, Stop};
use super::mpa_rx::{MpaRx, RxConfig, RxError};
use super::orq::{Orq, PushError, ReadSink};
use super::ring::{Fixed, Store};
use super::startup::Negotiated;
use super::stream::RxStream;
use crate::wire::rdmap::RdmapError;
use crate::wire::terminate::{TermCause, Terminate};
use crate::wire::ulpdu;

/// The RX decoder for one direction of one connection, its ORQ in the slots of `S`
/// ([`Store`]).
#[derive(Debug)]
pub struct Decoder<S: Store = Fixed> {
    mpa: MpaRx,
    ddp: DdpRx<S>,
}

impl Decoder {
    /// A decoder at the start of Full Operation, with deframing parameters `mpa` and DDP
    /// parameters `ddp`, and an ORQ of [`super::orq::ORQ_CAPACITY`] slots in place
    /// (inline: see [`Orq::new`]).
    #[inline]
    pub const fn new(mpa: RxConfig, ddp: DdpConfig) -> Self {
        Self::with_orq(mpa, ddp, Orq::new())
    }

    /// A decoder for a connection that completed MPA negotiation `n`: markers, CRC and
    /// FPDUPTR convention from it, DDP/RDMAP versions from its MPA revision
    /// ([`ulpdu::Config::for_mpa_rev`]: version 0 for Rev 0, 1 otherwise), RFC 7306
    /// opcodes if `rfc7306` (RFC versions only), and inbound request depth `ird`; its ORQ
    /// in place (inline: see [`Orq::new`]).
    #[inline]
    pub const fn for_negotiated(n: &Negotiated, rfc7306: bool, ird: u32) -> Self {
        Self::new(
            n.rx_config(),
            DdpConfig {
                wire: ulpdu::Config::for_mpa_rev(n.rev, rfc7306),
                ird,
            },
        )
    }
}

impl<S: Store> Decoder<S> {
    /// A decoder at the start of Full Operation, with deframing parameters `mpa` and DDP
    /// parameters `ddp`, whose outbound Reads go into `orq`.
    pub const fn with_orq(mpa: RxConfig, ddp: DdpConfig, orq: Orq<S::Orq>) -> Self {
        Decoder {
            mpa: MpaRx::new(mpa),
            ddp: DdpRx::with_orq(ddp, orq),
        }
    }

    /// Starts the decoder over in place with deframing parameters `mpa` and DDP parameters
    /// `ddp`, as [`Decoder::with_orq`] would build it with the ORQ it has (emptied).
    pub fn restart(&mut self, mpa: RxConfig, ddp: DdpConfig) {
        self.mpa = MpaRx::new(mpa);
        self.ddp.restart(ddp);
    }

    /// A decoder from a deframer and a receiver set up separately (for example resumed at
    /// a stream offset, [`MpaRx::at_stream_offset`], or with [`DdpRx::set_expected_msn`]).
    pub const fn from_parts(mpa: MpaRx, ddp: DdpRx<S>) -> Self {
        Decoder { mpa, ddp }
    }

    /// The deframer.
    pub const fn mpa(&self) -> &MpaRx {
        &self.mpa
    }

    /// The DDP/RDMAP receiver.
    pub const fn ddp(&self) -> &DdpRx<S> {
        &self.ddp
    }

    /// The receiving direction's state.
    pub const fn state(&self) -> RxState {
        self.ddp.state()
    }

    /// Whether the stream sits between FPDUs; a FIN elsewhere is MPA error 1 (the shell
    /// reports it, RFC 5044 §8).
    pub const fn at_fpdu_boundary(&self) -> bool {
        self.mpa.at_fpdu_boundary()
    }

    /// See [`DdpRx::post_read`].
    ///
    /// # Errors
    ///
    /// As [`DdpRx::post_read`].
    pub fn post_read(&mut self, sink: ReadSink) -> Result<(), PushError> {
        self.ddp.post_read(sink)
    }

    /// See [`DdpRx::set_qp_access`].
    pub fn set_qp_access(&mut self, access: QpAccess) {
        self.ddp.set_qp_access(access);
    }

    /// See [`DdpRx::withdraw_read`].
    pub fn withdraw_read(&mut self, sink: ReadSink) -> bool {
        self.ddp.withdraw_read(sink)
    }

    /// Stops the decoder for an error found outside it (see [`DdpRx::fail`]): from then
    /// on it discards everything.
    pub fn fail(&mut self) {
        self.ddp.fail();
    }

    /// See [`DdpRx::set_ird`].
    pub fn set_ird(&mut self, ird: u32) {
        self.ddp.set_ird(ird);
    }

    /// See [`DdpRx::open_rtr_slot`].
    pub fn open_rtr_slot(&mut self) {
        self.ddp.open_rtr_slot();
    }

    /// See [`DdpRx::release_ird`].
    pub fn release_ird(&mut self) {
        self.ddp.release_ird();
    }

    /// Consumes every octet `stream` offers: deframes FPDUs, validates and places their
    /// payload through `stream`, consulting `mem`, and reports completions to `events`.
    ///
    /// # Errors
    ///
    /// The TERMINATE to send for the first error (returned once; RFC 5040 §7.1 rule 4):
    /// an MPA error (CRC 2/0/0x02, marker 2/0/0x03, no DDP header echoed, RFC 5040 Figure
    /// 10), a DDP or RDMAP error (see [`DdpRx`]), or a cause [`RxEvents`] returned. A
    /// TERMINATE from the peer is not an error here: it is reported through
    /// [`RxEvents::terminate_received`] and [`Decoder::state`] becomes
    /// [`RxState::PeerTerminated`].
    pub fn process<R: RxStream, M: MemoryLookup, E: RxEvents>(
        &mut self,
        stream: &mut R,
        mem: &mut M,
        events: &mut E,
    ) -> Result<(), Terminate> {
        if self.ddp.state() != RxState::Active {
            discard(stream);
            return Ok(());
        }
        let r = {
            let mut rx = self.ddp.bind(mem, events);
            self.mpa.process(stream, &mut rx)
        };
        let out = match r {
            Ok(()) => return Ok(()),
            Err(RxError::Receiver(Stop::Terminate(t))) => Err(t),
            Err(RxError::Receiver(Stop::PeerTerminated)) | Err(RxError::Halted) => Ok(()),
            Err(RxError::Mpa(code)) => Err(Terminate::new(TermCause::mpa(code))),
            Err(RxError::Stalled) => Err(Terminate::new(TermCause::rdmap(
                RdmapError::LocalCatastrophic,
            ))),
        };
        self.ddp.fail();
        discard(stream);
        out
    }
}

fn discard<S: RxStream>(stream: &mut S) {
    let n = stream.available();
    if n > 0 {
        stream.skip(n, None);
    }
}
