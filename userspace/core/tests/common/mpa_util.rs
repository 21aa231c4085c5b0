// SPDX-License-Identifier: GPL-2.0

//! Host helpers for the MPA tests and fuzz targets: a CRC32c implementation backed by the
//! `crc32c` crate, a slice-backed [`RxStream`], a `Vec`-backed [`TxSink`], a recording
//! [`UlpduReceiver`], hex and the golden vectors.

#![allow(dead_code, unreachable_pub)]

use rsiw_core::engine::mpa_rx::UlpduReceiver;
use rsiw_core::engine::stream::{PlaceError, PlaceTarget, RxStream, TxSink};
use rsiw_core::wire::crc::Crc32c;

/// CRC32c from the `crc32c` crate, adapted to the Linux running-value convention.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostCrc;

impl Crc32c for HostCrc {
    fn update(&self, crc: u32, data: &[u8]) -> u32 {
        !crc32c::crc32c_append(!crc, data)
    }
}

fn fold(crc: Option<&mut u32>, data: &[u8]) {
    if let Some(c) = crc {
        *c = HostCrc.update(*c, data);
    }
}

/// An [`RxStream`] over a byte slice; placed payload is recorded.
#[derive(Debug)]
pub struct SliceRx<'a> {
    pub data: &'a [u8],
    pub pos: usize,
    pub placed: Vec<(PlaceTarget, Vec<u8>)>,
    /// When set, every placement is recorded and then refused with this error.
    pub fail_place: Option<PlaceError>,
    /// Whether [`RxStream::peek`] shows octets (a stream that cannot look ahead returns 0).
    pub peek: bool,
}

impl<'a> SliceRx<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        SliceRx {
            data,
            pos: 0,
            placed: Vec::new(),
            fail_place: None,
            peek: true,
        }
    }
    fn next(&mut self, len: usize) -> &'a [u8] {
        assert!(
            len <= self.available(),
            "consumer asked for more than available"
        );
        let s = &self.data[self.pos..self.pos + len];
        self.pos += len;
        s
    }
}

impl RxStream for SliceRx<'_> {
    fn available(&self) -> usize {
        self.data.len() - self.pos
    }
    fn take(&mut self, dst: &mut [u8], crc: Option<&mut u32>) {
        let s = self.next(dst.len());
        dst.copy_from_slice(s);
        fold(crc, s);
    }
    fn place(
        &mut self,
        target: &PlaceTarget,
        len: usize,
        crc: Option<&mut u32>,
    ) -> Result<(), PlaceError> {
        let s = self.next(len);
        fold(crc, s);
        self.placed.push((*target, s.to_vec()));
        match self.fail_place {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
    fn skip(&mut self, len: usize, crc: Option<&mut u32>) {
        let s = self.next(len);
        fold(crc, s);
    }
    fn peek(&mut self, dst: &mut [u8]) -> usize {
        if !self.peek {
            return 0;
        }
        let n = dst.len().min(self.available());
        dst[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        n
    }
}

/// A [`TxSink`] collecting octets; payload octets come from `payload` in order.
#[derive(Debug, Default)]
pub struct VecTx {
    pub out: Vec<u8>,
    pub payload: Vec<u8>,
    pub payload_pos: usize,
    /// Length of every `payload` call, to see markers splitting payload.
    pub payload_calls: Vec<usize>,
}

impl VecTx {
    pub fn with_payload(payload: &[u8]) -> Self {
        VecTx {
            payload: payload.to_vec(),
            ..Default::default()
        }
    }
}

impl TxSink for VecTx {
    fn bytes(&mut self, data: &[u8], crc: Option<&mut u32>) {
        self.out.extend_from_slice(data);
        fold(crc, data);
    }
    fn payload(&mut self, len: usize, crc: Option<&mut u32>) {
        let s = &self.payload[self.payload_pos..self.payload_pos + len];
        self.payload_pos += len;
        self.out.extend_from_slice(s);
        fold(crc, s);
        self.payload_calls.push(len);
    }
}

/// What a [`MockRx`] saw, with adjacent data merged so that chunking does not matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Begin(u16),
    Data(Vec<u8>),
    End(bool),
}

/// A recording [`UlpduReceiver`]; consumes everything offered.
#[derive(Debug, Default)]
pub struct MockRx {
    pub events: Vec<Ev>,
    /// Fail `begin` for this ULPDU_Length.
    pub fail_begin_len: Option<u16>,
    /// Consume at most this many octets per `data` call (to provoke `Stalled`).
    pub max_take: Option<usize>,
    pub data_calls: usize,
}

impl MockRx {
    /// The completed ULPDUs (Begin..End(true)).
    pub fn ulpdus(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut cur = Vec::new();
        for e in &self.events {
            match e {
                Ev::Begin(_) => cur.clear(),
                Ev::Data(d) => cur.extend_from_slice(d),
                Ev::End(true) => out.push(std::mem::take(&mut cur)),
                Ev::End(false) => cur.clear(),
            }
        }
        out
    }
}

impl UlpduReceiver for MockRx {
    type Error = &'static str;
    fn begin(&mut self, len: u16) -> Result<(), Self::Error> {
        if self.fail_begin_len == Some(len) {
            return Err("begin refused");
        }
        self.events.push(Ev::Begin(len));
        Ok(())
    }
    fn data<S: RxStream>(&mut self, ulpdu: &mut S) -> Result<(), Self::Error> {
        self.data_calls += 1;
        let mut n = ulpdu.available();
        assert!(n > 0, "data() called with nothing available");
        if let Some(m) = self.max_take {
            n = n.min(m);
        }
        let mut buf = vec![0u8; n];
        ulpdu.take(&mut buf, None);
        match self.events.last_mut() {
            Some(Ev::Data(d)) => d.extend_from_slice(&buf),
            _ => self.events.push(Ev::Data(buf)),
        }
        Ok(())
    }
    fn end(&mut self, crc_ok: bool) -> Result<(), Self::Error> {
        self.events.push(Ev::End(crc_ok));
        Ok(())
    }
}

pub fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0);
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The golden vectors (`tests/data/mpa_vectors.json`).
pub fn vectors() -> serde_json::Value {
    let text = include_str!("../data/mpa_vectors.json");
    serde_json::from_str(text).unwrap()
}

/// CRC32c of `data` (finished value).
pub fn crc32c(data: &[u8]) -> u32 {
    rsiw_core::wire::crc::finish(HostCrc.update(HostCrc::SEED, data))
}
