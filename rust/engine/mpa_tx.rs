// SPDX-License-Identifier: GPL-2.0

//! The MPA TX framer (RFC 5044 §4): turns one ULPDU at a time into an FPDU on a
//! [`TxSink`], inserting markers at every 512-octet stream position when the peer requires
//! them, then pad and the CRC trailer.
//!
//! CRC: the sink folds every octet it is given with `Some(crc)` (engine-composed octets
//! and payload alike) into the running CRC32c, so the framer needs no CRC implementation of
//! its own; it only starts the running value at [`CRC32C_SEED`] and finishes it. With CRCs
//! off the trailer is sent as four zero octets ("may contain any value", §4.1).
//!
//! Stream position: octets this framer has written since the start of Full Operation in this
//! direction (after the last startup frame this side sent), modulo 2^32. It must be a
//! multiple of 4, which it stays since every FPDU is.

use super::stream::TxSink;
use crate::wire::crc::{finish, CRC32C_SEED};
use crate::wire::fpdu::{fpdu_wire_len, pad_len, MULPDU_MAX};
use crate::wire::marker::{fpduptr_for, marker_bytes, until_marker, FpduPtrBase};

/// Per-direction framing parameters, from the MPA negotiation (`engine::startup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxConfig {
    /// Insert markers (the peer's M bit, RFC 5044 §7.1.1).
    pub markers: bool,
    /// Compute the CRC (C bit in either startup frame).
    pub crc: bool,
    /// FPDUPTR convention: RFC for Rev >= 1, seed for Rev 0 peers.
    pub fpduptr: FpduPtrBase,
    /// Largest ULPDU accepted (octets), see `wire::fpdu::mulpdu`.
    pub mulpdu: u16,
}

/// Errors from [`MpaTx::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxError {
    /// The ULPDU (header plus payload, octets) exceeds MULPDU. Nothing was written.
    TooLong {
        /// ULPDU length requested (octets).
        len: usize,
        /// The configured MULPDU (octets).
        mulpdu: u16,
    },
}

/// The TX framer for one direction of one connection.
#[derive(Debug, Clone)]
pub struct MpaTx {
    cfg: TxConfig,
    pos: u32,
}

struct Writer<'a, K: TxSink> {
    sink: &'a mut K,
    crc: Option<u32>,
    markers: bool,
    base: FpduPtrBase,
    pos: u32,
    fpdu_start: u32,
    length_pos: u32,
    written: usize,
}

impl<K: TxSink> Writer<'_, K> {
    fn advance(&mut self, n: usize) {
        // n <= 65535 + 3.
        self.pos = self.pos.wrapping_add(n as u32);
        self.written = self.written.saturating_add(n);
    }

    /// Emits the marker due at the current position, if any. `leading`: no octet of this
    /// FPDU was written yet, so the marker leads it and carries 0.
    fn marker_if_due(&mut self, leading: bool) {
        if !self.markers || until_marker(self.pos) != 0 {
            return;
        }
        let ptr = if leading {
            self.fpdu_start = self.pos;
            0
        } else {
            fpduptr_for(self.base, self.pos, self.fpdu_start, self.length_pos)
        };
        self.sink.bytes(&marker_bytes(ptr), self.crc.as_mut());
        self.advance(4);
    }

    /// Room before the next marker (octets), or unlimited without markers.
    fn room(&self) -> usize {
        if self.markers {
            until_marker(self.pos) as usize
        } else {
            usize::MAX
        }
    }

    fn bytes(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            self.marker_if_due(false);
            let n = data.len().min(self.room());
            let (now, rest) = data.split_at(n);
            self.sink.bytes(now, self.crc.as_mut());
            self.advance(n);
            data = rest;
        }
    }

    fn payload(&mut self, mut len: usize) {
        while len > 0 {
            self.marker_if_due(false);
            let n = len.min(self.room());
            self.sink.payload(n, self.crc.as_mut());
            self.advance(n);
            len -= n;
        }
    }
}

impl MpaTx {
    /// A framer at the start of Full Operation (stream position 0).
    pub const fn new(cfg: TxConfig) -> Self {
        MpaTx { cfg, pos: 0 }
    }

    /// A framer whose direction already carried `pos` octets of Full Operation. Returns
    /// `None` unless `pos` is a multiple of 4 (FPDUs always are).
    pub const fn at_stream_offset(cfg: TxConfig, pos: u32) -> Option<Self> {
        if pos % 4 != 0 {
            None
        } else {
            Some(MpaTx { cfg, pos })
        }
    }

    /// The configuration in use.
    pub const fn config(&self) -> &TxConfig {
        &self.cfg
    }

    /// Changes MULPDU (octets), e.g. after an EMSS change (RFC 5044 §4.5).
    pub fn set_mulpdu(&mut self, mulpdu: u16) {
        self.cfg.mulpdu = mulpdu;
    }

    /// Stream position of the next octet (octets since Full Operation, modulo 2^32).
    pub const fn stream_pos(&self) -> u32 {
        self.pos
    }

    /// On-wire length (octets, markers included) the next FPDU will have if it carries a
    /// ULPDU of `ulpdu_len` octets.
    pub fn wire_len(&self, ulpdu_len: u16) -> usize {
        fpdu_wire_len(self.cfg.markers, self.pos, ulpdu_len)
    }

    /// Writes one FPDU carrying the ULPDU `framed[2..]` (its header) ‖ (`payload_len`
    /// payload octets, which the sink supplies), as [`MpaTx::send`] does. `framed[..2]` is
    /// room for ULPDU_Length, which this fills in (network order): when no marker falls
    /// inside the FPDU (markers off, or the next 512-octet position lies beyond it), length
    /// and header then reach the sink in one [`TxSink::bytes`] call. Returns the octets
    /// written.
    ///
    /// # Errors
    ///
    /// [`TxError::TooLong`] if the ULPDU exceeds MULPDU (or 64768) or `framed` is shorter
    /// than 2 octets (`len` 0 then). Nothing was written.
    pub fn send_framed<K: TxSink>(
        &mut self,
        sink: &mut K,
        framed: &mut [u8],
        payload_len: usize,
    ) -> Result<usize, TxError> {
        let limit = self.cfg.mulpdu.min(MULPDU_MAX);
        let Some((len_field, header)) = framed.split_first_chunk_mut::<2>() else {
            return Err(TxError::TooLong {
                len: 0,
                mulpdu: limit,
            });
        };
        let len = header.len().saturating_add(payload_len);
        let ulpdu_len = match u16::try_from(len) {
            Ok(l) if l <= limit => l,
            _ => return Err(TxError::TooLong { len, mulpdu: limit }),
        };
        let wire_len = fpdu_wire_len(self.cfg.markers, self.pos, ulpdu_len);
        if self.cfg.markers && wire_len != fpdu_wire_len(false, self.pos, ulpdu_len) {
            return self.send(sink, header, payload_len);
        }
        *len_field = ulpdu_len.to_be_bytes();
        let mut crc = self.cfg.crc.then_some(CRC32C_SEED);
        sink.bytes(framed, crc.as_mut());
        if payload_len > 0 {
            sink.payload(payload_len, crc.as_mut());
        }
        let pad = [0u8; 3];
        let pad = pad.get(..pad_len(len)).unwrap_or(&[]);
        if !pad.is_empty() {
            sink.bytes(pad, crc.as_mut());
        }
        let trailer = crc.map_or([0; 4], |running| finish(running).to_le_bytes());
        sink.bytes(&trailer, None);
        // wire_len <= 2 + 64768 + 3 + 4 + markers.
        self.pos = self.pos.wrapping_add(wire_len as u32);
        Ok(wire_len)
    }

    /// Writes one FPDU carrying the ULPDU `header` ‖ (`payload_len` payload octets, which the
    /// sink supplies). Markers are inserted wherever the stream reaches a 512-octet position,
    /// also inside `header` or the payload (splitting the payload into several
    /// [`TxSink::payload`] calls). Returns the octets written.
    ///
    /// # Errors
    ///
    /// [`TxError::TooLong`] if `header.len() + payload_len` exceeds MULPDU (or 64768).
    pub fn send<K: TxSink>(
        &mut self,
        sink: &mut K,
        header: &[u8],
        payload_len: usize,
    ) -> Result<usize, TxError> {
        let len = header.len().saturating_add(payload_len);
        let limit = self.cfg.mulpdu.min(MULPDU_MAX);
        let ulpdu_len = match u16::try_from(len) {
            Ok(l) if l <= limit => l,
            _ => return Err(TxError::TooLong { len, mulpdu: limit }),
        };
        let mut w = Writer {
            sink,
            crc: if self.cfg.crc {
                Some(CRC32C_SEED)
            } else {
                None
            },
            markers: self.cfg.markers,
            base: self.cfg.fpduptr,
            pos: self.pos,
            fpdu_start: self.pos,
            length_pos: self.pos,
            written: 0,
        };
        w.marker_if_due(true);
        w.length_pos = w.pos;
        w.bytes(&ulpdu_len.to_be_bytes());
        w.bytes(header);
        w.payload(payload_len);
        let pad = [0u8; 3];
        w.bytes(pad.get(..pad_len(len)).unwrap_or(&[]));
        // A marker right before the CRC field belongs to this FPDU and is covered.
        w.marker_if_due(false);
        let trailer = match w.crc {
            Some(running) => finish(running).to_le_bytes(),
            None => [0; 4],
        };
        // The CRC field is 4-aligned, so no marker can fall inside it.
        w.sink.bytes(&trailer, None);
        w.advance(trailer.len());
        self.pos = w.pos;
        Ok(w.written)
    }
}
