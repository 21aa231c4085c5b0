// SPDX-License-Identifier: GPL-2.0

//! The MPA RX deframer (RFC 5044 §4, §6, §8): consumes a raw [`RxStream`] of FPDUs,
//! removes markers and checks their FPDUPTR, reads ULPDU_Length, hands the ULPDU to the DDP
//! layer through a marker-free view, then reads pad and CRC and checks the CRC.
//!
//! Positions: the deframer counts octets since the start of Full Operation in this
//! direction (the first octet after the peer's last startup frame), modulo 2^32; markers
//! sit at every multiple of 512 when the peer was asked for them.
//!
//! CRC: when CRCs are in use, every raw octet of an FPDU up to its CRC field (leading
//! marker, ULPDU_Length, ULPDU, markers inside it, pad, a marker right before the CRC
//! field) is consumed with `Some(&mut crc)`, so the shell's [`RxStream`] folds it; the
//! deframer needs no CRC implementation.
//!
//! Errors (RFC 5044 §8): a CRC mismatch is MPA error 2, a marker whose FPDUPTR disagrees
//! with the framing is MPA error 3 (reported once the CRC of that FPDU proved valid, as §8
//! defines it; at once when CRCs are off). Once any error is returned the deframer is
//! halted: it consumes nothing more and delivers no further FPDU ("MUST NOT pass or
//! deliver any additional FPDUs on that half connection"); it never closes anything, the
//! ULP does (send TERMINATE Layer 2 / EType 0 / the code, then close).

use super::stream::{PlaceError, PlaceTarget, RxStream};
use crate::wire::crc::{finish, CRC32C_SEED};
use crate::wire::fpdu::pad_len;
use crate::wire::marker::{fpduptr_for, until_marker, FpduPtrBase, Marker, MARKER_LEN};
use crate::wire::mpa::MpaErrorCode;

/// The DDP layer's side of the RX pipeline: consumes one ULPDU at a time.
///
/// Progress contract: [`UlpduReceiver::data`] MUST consume every octet its view offers
/// (`ulpdu.available()` octets), buffering a partial header internally when a header is
/// split across TCP segments or by a marker. The deframer offers a view only when at least
/// one octet is available and treats a call that returns `Ok` with octets left as
/// [`RxError::Stalled`], so it can never spin.
///
/// Octets reach the receiver before the FPDU's CRC has been checked. A receiver must not
/// make a message visible (completion, ULP delivery) before [`UlpduReceiver::end`] reports
/// `crc_ok == true` (RFC 5044 §6: "MUST first verify"), and must abandon what it placed
/// for an FPDU ended with `crc_ok == false`.
pub trait UlpduReceiver {
    /// Error the receiver reports (the DDP/RDMAP layer's TERMINATE description).
    type Error;
    /// A new FPDU begins; `len` is its ULPDU_Length (octets).
    fn begin(&mut self, len: u16) -> Result<(), Self::Error>;
    /// Consumes any number of octets (possibly none) from `ulpdu`, a marker-free view limited to the current ULPDU. Called again whenever more octets arrive, until the ULPDU is fully consumed.
    fn data<S: RxStream>(&mut self, ulpdu: &mut S) -> Result<(), Self::Error>;
    /// The FPDU ended: all `len` ULPDU octets consumed, pad and CRC read; `crc_ok` says whether the CRC matched (always true when CRC is not in use).
    fn end(&mut self, crc_ok: bool) -> Result<(), Self::Error>;
}

/// Per-direction deframing parameters, from the MPA negotiation (`engine::startup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxConfig {
    /// The peer inserts markers (we sent M=1).
    pub markers: bool,
    /// CRCs are in use (C=1 in either startup frame).
    pub crc: bool,
    /// FPDUPTR convention: RFC for Rev >= 1, seed for Rev 0 peers.
    pub fpduptr: FpduPtrBase,
}

/// Why [`MpaRx::process`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxError<E> {
    /// An MPA error: [`MpaErrorCode::CrcMismatch`] (2) or [`MpaErrorCode::MarkerMismatch`]
    /// (3). Send TERMINATE 2/0/code without DDP header (RFC 5040 Figure 10).
    Mpa(MpaErrorCode),
    /// The receiver failed; its error describes the TERMINATE to send.
    Receiver(E),
    /// The receiver returned from `data` without consuming every offered octet (a
    /// contract violation; treat as a local catastrophic error).
    Stalled,
    /// An earlier call already returned an error; nothing was consumed.
    Halted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading ULPDU_Length; `got` octets so far.
    Length { got: u8 },
    /// Delivering the ULPDU; `remaining` octets left.
    Ulpdu { remaining: u16 },
    /// Reading pad; `remaining` octets left.
    Pad { remaining: u8 },
    /// Reading the CRC field; `got` octets so far.
    Crc { got: u8 },
}

/// The RX deframer for one direction of one connection.
#[derive(Debug, Clone)]
pub struct MpaRx {
    cfg: RxConfig,
    state: State,
    /// Stream position of the next octet.
    pos: u32,
    /// Running CRC of the current FPDU.
    crc: u32,
    /// ULPDU_Length / CRC field octets read so far.
    field: [u8; 4],
    marker: [u8; MARKER_LEN],
    marker_got: u8,
    /// Some octet of the current FPDU (marker or length) was consumed.
    started: bool,
    fpdu_start: u32,
    length_pos: u32,
    ulpdu_len: u16,
    /// `begin` was called for the current FPDU.
    begun: bool,
    /// A marker of the current FPDU disagreed with the framing (CRC still pending).
    marker_fault: bool,
    halted: bool,
    fpdus: u64,
}

/// The marker-free view of the current ULPDU handed to [`UlpduReceiver::data`].
struct UlpduView<'a, S: RxStream> {
    raw: &'a mut S,
    crc: Option<&'a mut u32>,
    limit: usize,
    consumed: usize,
}

impl<S: RxStream> UlpduView<'_, S> {
    fn left(&self) -> usize {
        self.limit
            .saturating_sub(self.consumed)
            .min(self.raw.available())
    }
}

/// The view folds consumed octets into the MPA layer's CRC; the receiver's own `crc`
/// argument is not used (pass `None`). Requests beyond [`RxStream::available`] are cut to
/// what is available (for `take`, the tail of `dst` is left untouched), so the view never
/// reads past the ULPDU or into a marker.
impl<S: RxStream> RxStream for UlpduView<'_, S> {
    fn available(&self) -> usize {
        self.left()
    }

    fn take(&mut self, dst: &mut [u8], _crc: Option<&mut u32>) {
        let n = dst.len().min(self.left());
        if let Some(d) = dst.get_mut(..n) {
            self.raw.take(d, self.crc.as_deref_mut());
            self.consumed += n;
        }
    }

    fn place(
        &mut self,
        target: &PlaceTarget,
        len: usize,
        _crc: Option<&mut u32>,
    ) -> Result<(), PlaceError> {
        let n = len.min(self.left());
        self.consumed += n;
        self.raw.place(target, n, self.crc.as_deref_mut())
    }

    fn skip(&mut self, len: usize, _crc: Option<&mut u32>) {
        let n = len.min(self.left());
        self.consumed += n;
        self.raw.skip(n, self.crc.as_deref_mut());
    }

    fn peek(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.left());
        match dst.get_mut(..n) {
            Some(d) => self.raw.peek(d),
            None => 0,
        }
    }
}

impl MpaRx {
    /// A deframer at the start of Full Operation (stream position 0).
    pub const fn new(cfg: RxConfig) -> Self {
        MpaRx {
            cfg,
            state: State::Length { got: 0 },
            pos: 0,
            crc: CRC32C_SEED,
            field: [0; 4],
            marker: [0; MARKER_LEN],
            marker_got: 0,
            started: false,
            fpdu_start: 0,
            length_pos: 0,
            ulpdu_len: 0,
            begun: false,
            marker_fault: false,
            halted: false,
            fpdus: 0,
        }
    }

    /// A deframer whose direction already carried `pos` octets of Full Operation, at an
    /// FPDU boundary. Returns `None` unless `pos` is a multiple of 4.
    pub const fn at_stream_offset(cfg: RxConfig, pos: u32) -> Option<Self> {
        if pos % 4 != 0 {
            return None;
        }
        let mut rx = Self::new(cfg);
        rx.pos = pos;
        Some(rx)
    }

    /// The configuration in use.
    pub const fn config(&self) -> &RxConfig {
        &self.cfg
    }

    /// Stream position of the next octet (octets since Full Operation, modulo 2^32).
    pub const fn stream_pos(&self) -> u32 {
        self.pos
    }

    /// Whether the deframer sits between FPDUs (nothing of a next FPDU consumed). A FIN
    /// anywhere else truncated an FPDU; either way the shell reports MPA error 1.
    pub const fn at_fpdu_boundary(&self) -> bool {
        !self.started
    }

    /// Whether an error was returned; the deframer then consumes nothing more.
    pub const fn is_halted(&self) -> bool {
        self.halted
    }

    /// Number of FPDUs completed with a good (or unchecked) CRC.
    pub const fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// Consumes octets from `raw` until it is empty or an error occurs, feeding ULPDUs to
    /// `rx`. Any segmentation of the stream gives the same calls to `rx` (up to how `data`
    /// calls split the octets) and the same result.
    ///
    /// # Errors
    ///
    /// [`RxError`]; after the first error every call returns [`RxError::Halted`].
    pub fn process<S: RxStream, R: UlpduReceiver>(
        &mut self,
        raw: &mut S,
        rx: &mut R,
    ) -> Result<(), RxError<R::Error>> {
        if self.halted {
            return Err(RxError::Halted);
        }
        let r = self.run(raw, rx);
        if r.is_err() {
            self.halted = true;
        }
        r
    }

    fn advance(&mut self, n: usize) {
        // n is bounded by a 16-bit ULPDU_Length or a 512-octet marker interval.
        self.pos = self.pos.wrapping_add(n as u32);
    }

    /// Octets that can be read before the next marker (unlimited without markers).
    fn room(&self) -> usize {
        if self.cfg.markers {
            until_marker(self.pos) as usize
        } else {
            usize::MAX
        }
    }

    fn crc_mut(&mut self) -> Option<&mut u32> {
        if self.cfg.crc {
            Some(&mut self.crc)
        } else {
            None
        }
    }

    fn reset_fpdu(&mut self) {
        self.state = State::Length { got: 0 };
        self.crc = CRC32C_SEED;
        self.started = false;
        self.begun = false;
        self.marker_fault = false;
    }

    fn run<S: RxStream, R: UlpduReceiver>(
        &mut self,
        raw: &mut S,
        rx: &mut R,
    ) -> Result<(), RxError<R::Error>> {
        loop {
            // Transitions that need no input.
            match self.state {
                State::Ulpdu { remaining: 0 } => {
                    // pad_len < 4.
                    let pad = pad_len(usize::from(self.ulpdu_len)) as u8;
                    self.state = State::Pad { remaining: pad };
                    continue;
                }
                State::Pad { remaining: 0 } => {
                    self.state = State::Crc { got: 0 };
                    continue;
                }
                _ => {}
            }
            let avail = raw.available();
            if avail == 0 {
                return Ok(());
            }
            if self.cfg.markers && self.pos % 512 < MARKER_LEN as u32 {
                self.read_marker(raw, avail)?;
                continue;
            }
            let chunk = avail.min(self.room());
            match self.state {
                State::Length { got } => {
                    if got == 0 {
                        if !self.started {
                            self.fpdu_start = self.pos;
                            self.started = true;
                        }
                        self.length_pos = self.pos;
                    }
                    let got = usize::from(got);
                    let n = chunk.min(2 - got);
                    let mut tmp = [0u8; 2];
                    let dst = tmp.get_mut(..n).unwrap_or(&mut []);
                    raw.take(dst, self.crc_mut());
                    if let Some(f) = self.field.get_mut(got..got + n) {
                        f.copy_from_slice(dst);
                    }
                    self.advance(n);
                    let got = got + n;
                    if got < 2 {
                        self.state = State::Length { got: 1 };
                        continue;
                    }
                    self.ulpdu_len = u16::from_be_bytes([self.field[0], self.field[1]]);
                    self.state = State::Ulpdu {
                        remaining: self.ulpdu_len,
                    };
                    if !self.marker_fault {
                        self.begun = true;
                        rx.begin(self.ulpdu_len).map_err(RxError::Receiver)?;
                    }
                }
                State::Ulpdu { remaining } => {
                    let n = chunk.min(usize::from(remaining));
                    if self.marker_fault {
                        // Deliver nothing more of this FPDU; keep folding the CRC so that
                        // §8's "CRC valid" condition can be decided.
                        raw.skip(n, self.crc_mut());
                    } else {
                        let crc = if self.cfg.crc {
                            Some(&mut self.crc)
                        } else {
                            None
                        };
                        let mut view = UlpduView {
                            raw: &mut *raw,
                            crc,
                            limit: n,
                            consumed: 0,
                        };
                        rx.data(&mut view).map_err(RxError::Receiver)?;
                        if view.consumed < n {
                            return Err(RxError::Stalled);
                        }
                    }
                    self.advance(n);
                    // n <= remaining.
                    self.state = State::Ulpdu {
                        remaining: remaining - n as u16,
                    };
                }
                State::Pad { remaining } => {
                    let n = chunk.min(usize::from(remaining));
                    let mut tmp = [0u8; 3];
                    let dst = tmp.get_mut(..n).unwrap_or(&mut []);
                    raw.take(dst, self.crc_mut());
                    self.advance(n);
                    self.state = State::Pad {
                        remaining: remaining - n as u8,
                    };
                }
                State::Crc { got } => {
                    let got = usize::from(got);
                    let n = chunk.min(4 - got);
                    if let Some(f) = self.field.get_mut(got..got + n) {
                        raw.take(f, None);
                    }
                    self.advance(n);
                    let got = got + n;
                    if got < 4 {
                        self.state = State::Crc { got: got as u8 };
                        continue;
                    }
                    self.finish_fpdu(rx)?;
                }
            }
        }
    }

    fn read_marker<S: RxStream, E>(&mut self, raw: &mut S, avail: usize) -> Result<(), RxError<E>> {
        let got = usize::from(self.marker_got);
        if got == 0 && !self.started {
            // A marker between FPDUs leads the next one (RFC 5044 §4.3).
            self.fpdu_start = self.pos;
            self.started = true;
            self.length_pos = self.pos;
        }
        let n = avail.min(MARKER_LEN - got);
        let crc = if self.cfg.crc {
            Some(&mut self.crc)
        } else {
            None
        };
        if let Some(dst) = self.marker.get_mut(got..got + n) {
            raw.take(dst, crc);
        }
        self.advance(n);
        let got = got + n;
        if got < MARKER_LEN {
            self.marker_got = got as u8;
            return Ok(());
        }
        self.marker_got = 0;
        let marker_pos = self.pos.wrapping_sub(MARKER_LEN as u32);
        let leading =
            self.fpdu_start == marker_pos && matches!(self.state, State::Length { got: 0 });
        let expected = if leading {
            0
        } else {
            fpduptr_for(
                self.cfg.fpduptr,
                marker_pos,
                self.fpdu_start,
                self.length_pos,
            )
        };
        let value = Marker::new_checked(&self.marker[..])
            .map(|m| m.fpduptr())
            .unwrap_or(0);
        if value != expected {
            if !self.cfg.crc {
                return Err(RxError::Mpa(MpaErrorCode::MarkerMismatch));
            }
            self.marker_fault = true;
        }
        Ok(())
    }

    fn finish_fpdu<R: UlpduReceiver>(&mut self, rx: &mut R) -> Result<(), RxError<R::Error>> {
        let received = u32::from_le_bytes(self.field);
        let crc_ok = !self.cfg.crc || finish(self.crc) == received;
        let fault = self.marker_fault;
        let begun = self.begun;
        self.reset_fpdu();
        if !crc_ok || fault {
            if begun {
                // Let the receiver abandon what it placed; the MPA error takes precedence.
                let _ = rx.end(false);
            }
            let code = if crc_ok {
                MpaErrorCode::MarkerMismatch
            } else {
                MpaErrorCode::CrcMismatch
            };
            return Err(RxError::Mpa(code));
        }
        self.fpdus = self.fpdus.wrapping_add(1);
        rx.end(true).map_err(RxError::Receiver)
    }
}
