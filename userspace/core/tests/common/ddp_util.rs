// SPDX-License-Identifier: GPL-2.0

//! Host helpers for the DDP/RDMAP RX tests and the `ddp_rx` fuzz target: a mock
//! [`MemoryLookup`] with an MR table and a receive queue, a recording [`RxEvents`], an FPDU
//! stream builder on top of the wire emitters and [`MpaTx`], and a runner that feeds a
//! [`Decoder`] in arbitrary chunks and checks every placement against the MR table.
//!
//! Needs `mpa_util` declared next to it at the crate root.

#![allow(dead_code, unreachable_pub)]

use crate::mpa_util::{SliceRx, VecTx};
use rsiw_core::engine::ddp_rx::{
    Access, InvalidateCheck, MemoryLookup, MessageDone, RxEvents, TaggedCheck, TaggedDone,
    UntaggedCheck,
};
use rsiw_core::engine::mpa_rx::RxConfig;
use rsiw_core::engine::mpa_tx::{MpaTx, TxConfig};
use rsiw_core::engine::orq::ReadSink;
use rsiw_core::engine::rx_decoder::Decoder;
use rsiw_core::engine::stream::PlaceTarget;
use rsiw_core::wire::marker::FpduPtrBase;
use rsiw_core::wire::rdmap::{AtomicRequest, AtomicResponse, Opcode, ReadRequest};
use rsiw_core::wire::terminate::{TermCause, Terminate};
use rsiw_core::wire::ulpdu::{Config, RdmapHeader, UlpduHeader, MAX_HEADER_LEN};

/// Access bits for [`Mr::rights`].
pub const RW: u8 = 1; // remote write
pub const LW: u8 = 2; // local write
pub const RR: u8 = 4; // remote read
pub const RA: u8 = 8; // remote atomic
pub const ALL: u8 = RW | LW | RR | RA;

pub const fn bit(a: Access) -> u8 {
    match a {
        Access::RemoteWrite => RW,
        Access::LocalWrite => LW,
        Access::RemoteRead => RR,
        Access::RemoteAtomic => RA,
    }
}

/// One registered memory region of the mock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    pub stag: u32,
    pub base: u64,
    pub len: u64,
    pub rights: u8,
    /// Associated with this stream (same PD / bound to this QP).
    pub assoc: bool,
    /// Still valid (not invalidated).
    pub valid: bool,
    /// May be invalidated by a Send with Invalidate.
    pub remote_inval: bool,
}

impl Mr {
    pub const fn new(stag: u32, base: u64, len: u64, rights: u8) -> Self {
        Mr {
            stag,
            base,
            len,
            rights,
            assoc: true,
            valid: true,
            remote_inval: true,
        }
    }

    /// Whether `[to, to + len)` lies inside the region.
    pub fn contains(&self, to: u64, len: u64) -> bool {
        let end = match to.checked_add(len) {
            Some(e) => e,
            None => return false,
        };
        let mr_end = self.base.saturating_add(self.len);
        to >= self.base && end <= mr_end
    }
}

/// The mock shell memory: an MR table and a QN 0 receive queue of `posted` buffers of
/// `cap` octets each for the MSNs `first_msn ..` (wrapping).
#[derive(Debug, Clone)]
pub struct MockMem {
    pub mrs: Vec<Mr>,
    pub first_msn: u32,
    pub posted: u32,
    pub cap: u32,
    /// Every tagged check the mock approved: (stag, to, len, access).
    pub approved: Vec<(u32, u64, u32, Access)>,
    /// Every check asked, approved or not.
    pub asked: usize,
    /// The Data Sinks of the Reads posted to the decoder ([`post_reads`]): the only
    /// places a Read Response may write.
    pub sinks: Vec<ReadSink>,
}

impl Default for MockMem {
    fn default() -> Self {
        MockMem {
            mrs: Vec::new(),
            first_msn: 1,
            posted: 1000,
            cap: 1 << 20,
            approved: Vec::new(),
            asked: 0,
            sinks: Vec::new(),
        }
    }
}

impl MockMem {
    pub fn with_mrs(mrs: &[Mr]) -> Self {
        MockMem {
            mrs: mrs.to_vec(),
            ..Default::default()
        }
    }

    /// The MR table the tests and the fuzz target share: 0x100 remote write, 0x200 local
    /// write, 0x300 remote read and atomic, 0x400 everything at the top of the 64-bit TO
    /// space, 0x500 everything but not associated with the stream.
    pub fn sample() -> Self {
        let mut foreign = Mr::new(0x500, 0x5000, 0x1000, ALL);
        foreign.assoc = false;
        MockMem::with_mrs(&[
            Mr::new(0x100, 0x1000, 0x10000, RW),
            Mr::new(0x200, 0x2000, 0x1000, LW),
            Mr::new(0x300, 0x3000, 0x1000, RR | RA),
            Mr::new(0x400, u64::MAX - 0xFFF, 0x1000, ALL),
            foreign,
        ])
    }

    fn find(&self, stag: u32) -> Option<&Mr> {
        self.mrs.iter().find(|m| m.stag == stag)
    }
}

impl MemoryLookup for MockMem {
    fn check_tagged(
        &mut self,
        stag: u32,
        to: u64,
        len: u32,
        access: Access,
    ) -> Result<(), TaggedCheck> {
        self.asked += 1;
        assert!(len > 0, "zero-length tagged access must not be checked");
        assert!(
            to.checked_add(u64::from(len)).is_some(),
            "engine must catch TO wrap"
        );
        let mr = *self.find(stag).ok_or(TaggedCheck::InvalidStag)?;
        if !mr.valid {
            return Err(TaggedCheck::InvalidStag);
        }
        if !mr.assoc {
            return Err(TaggedCheck::NotAssociated);
        }
        if mr.rights & bit(access) == 0 {
            return Err(TaggedCheck::AccessRights);
        }
        if !mr.contains(to, u64::from(len)) {
            return Err(TaggedCheck::BaseBounds);
        }
        self.approved.push((stag, to, len, access));
        Ok(())
    }

    fn check_untagged(
        &mut self,
        qn: u32,
        msn: u32,
        mo: u32,
        len: u32,
    ) -> Result<(), UntaggedCheck> {
        self.asked += 1;
        assert_eq!(qn, 0, "only QN 0 has posted buffers");
        if msn.wrapping_sub(self.first_msn) >= self.posted {
            return Err(UntaggedCheck::NoBuffer);
        }
        if mo > self.cap {
            return Err(UntaggedCheck::InvalidMo);
        }
        if u64::from(mo) + u64::from(len) > u64::from(self.cap) {
            return Err(UntaggedCheck::TooLong);
        }
        Ok(())
    }

    fn check_invalidate(&mut self, stag: u32) -> Result<(), InvalidateCheck> {
        self.asked += 1;
        let mr = *self.find(stag).ok_or(InvalidateCheck::InvalidStag)?;
        if !mr.valid {
            return Err(InvalidateCheck::InvalidStag);
        }
        if !mr.assoc {
            return Err(InvalidateCheck::NotAssociated);
        }
        if !mr.remote_inval {
            return Err(InvalidateCheck::CannotInvalidate);
        }
        Ok(())
    }
}

/// An event the decoder emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Msg(MessageDone),
    Tagged(TaggedDone),
    Read(ReadRequest),
    AtomicReq(AtomicRequest),
    AtomicResp(AtomicResponse),
    PeerTerm(Option<Terminate>),
}

/// A recording [`RxEvents`]; `reject` makes the n-th fallible event (0-based) fail.
#[derive(Debug, Default, Clone)]
pub struct RecEvents {
    pub evs: Vec<Ev>,
    pub reject: Option<(usize, TermCause)>,
    pub calls: usize,
}

impl RecEvents {
    fn push(&mut self, e: Ev) -> Result<(), TermCause> {
        self.evs.push(e);
        let n = self.calls;
        self.calls += 1;
        match self.reject {
            Some((k, c)) if k == n => Err(c),
            _ => Ok(()),
        }
    }
}

impl RxEvents for RecEvents {
    fn message_done(&mut self, m: &MessageDone) -> Result<(), TermCause> {
        self.push(Ev::Msg(*m))
    }
    fn tagged_done(&mut self, t: &TaggedDone) -> Result<(), TermCause> {
        self.push(Ev::Tagged(*t))
    }
    fn read_request(&mut self, r: &ReadRequest) -> Result<(), TermCause> {
        self.push(Ev::Read(*r))
    }
    fn atomic_request(&mut self, a: &AtomicRequest) -> Result<(), TermCause> {
        self.push(Ev::AtomicReq(*a))
    }
    fn atomic_response(&mut self, a: &AtomicResponse) -> Result<(), TermCause> {
        self.push(Ev::AtomicResp(*a))
    }
    fn terminate_received(&mut self, t: Option<&Terminate>) {
        self.evs.push(Ev::PeerTerm(t.copied()));
    }
}

/// A Send segment header (QN 0): `msn`, `mo` (octets), L = `last`.
pub fn send(msn: u32, mo: u32, last: bool) -> UlpduHeader {
    UlpduHeader::untagged(Opcode::Send, last, msn, mo, 0)
}

/// An RDMA Write segment header to `stag` at `to`, L = `last`.
pub fn write(stag: u32, to: u64, last: bool) -> UlpduHeader {
    UlpduHeader::tagged(Opcode::Write, last, stag, to)
}

/// An RDMA Read Response segment header to `stag` at `to`, L = `last`.
pub fn rresp(stag: u32, to: u64, last: bool) -> UlpduHeader {
    UlpduHeader::tagged(Opcode::ReadResponse, last, stag, to)
}

/// An RDMA Read Request header (QN 1, `msn`) carrying `rr`.
pub fn rreq(msn: u32, rr: ReadRequest) -> UlpduHeader {
    UlpduHeader::header_only(Opcode::ReadRequest, msn, RdmapHeader::ReadRequest(rr))
}

/// Framing options of a test stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    pub markers: bool,
    pub crc: bool,
}

impl Framing {
    pub const PLAIN: Framing = Framing {
        markers: false,
        crc: false,
    };
    pub const CRC: Framing = Framing {
        markers: false,
        crc: true,
    };
    pub const fn rx(self) -> RxConfig {
        RxConfig {
            markers: self.markers,
            crc: self.crc,
            fpduptr: FpduPtrBase::UlpduLength,
        }
    }
    pub const fn tx(self) -> TxConfig {
        TxConfig {
            markers: self.markers,
            crc: self.crc,
            fpduptr: FpduPtrBase::UlpduLength,
            mulpdu: 64768,
        }
    }
}

/// Builds a stream of FPDUs with the wire emitters and [`MpaTx`].
pub struct Builder {
    pub tx: MpaTx,
    pub sink: VecTx,
    pub cfg: Config,
    /// For every FPDU: (offset of its first octet, the ULPDU octets).
    pub fpdus: Vec<(usize, Vec<u8>)>,
}

impl Builder {
    pub fn new(framing: Framing, cfg: Config) -> Self {
        Builder {
            tx: MpaTx::new(framing.tx()),
            sink: VecTx::default(),
            cfg,
            fpdus: Vec::new(),
        }
    }

    /// Appends one FPDU with ULPDU `header` ‖ `payload`.
    pub fn push(&mut self, h: &UlpduHeader, payload: &[u8]) -> &mut Self {
        let mut buf = [0u8; MAX_HEADER_LEN];
        let n = h.emit_into(&mut buf, self.cfg).expect("emit header");
        self.raw_parts(&buf[..n], payload)
    }

    /// Appends one FPDU whose ULPDU is `ulpdu`, whatever it holds.
    pub fn raw(&mut self, ulpdu: &[u8]) -> &mut Self {
        self.raw_parts(ulpdu, &[])
    }

    fn raw_parts(&mut self, head: &[u8], payload: &[u8]) -> &mut Self {
        let off = self.sink.out.len();
        self.sink.payload.extend_from_slice(payload);
        self.tx
            .send(&mut self.sink, head, payload.len())
            .expect("send FPDU");
        let mut u = head.to_vec();
        u.extend_from_slice(payload);
        self.fpdus.push((off, u));
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.sink.out.clone()
    }
}

/// One FPDU without markers, built by hand (for ULPDU_Length values MpaTx refuses, up to
/// 65535 octets).
pub fn fpdu_plain(ulpdu: &[u8], crc: bool) -> Vec<u8> {
    let len = u16::try_from(ulpdu.len()).unwrap();
    let mut v = len.to_be_bytes().to_vec();
    v.extend_from_slice(ulpdu);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    let c = if crc { crate::mpa_util::crc32c(&v) } else { 0 };
    v.extend_from_slice(&c.to_le_bytes());
    v
}

/// Merges adjacent placements into one (same target, contiguous offsets).
pub fn merge(placed: &[(PlaceTarget, Vec<u8>)]) -> Vec<(PlaceTarget, Vec<u8>)> {
    let mut out: Vec<(PlaceTarget, Vec<u8>)> = Vec::new();
    for (t, d) in placed {
        if let Some((pt, pd)) = out.last_mut() {
            let n = pd.len() as u64;
            let contiguous = match (*pt, *t) {
                (
                    PlaceTarget::Tagged {
                        stag: a,
                        to: ta,
                        access: xa,
                    },
                    PlaceTarget::Tagged {
                        stag: b,
                        to: tb,
                        access: xb,
                    },
                ) => a == b && xa == xb && ta.checked_add(n) == Some(tb),
                (
                    PlaceTarget::Untagged {
                        qn: qa,
                        msn: ma,
                        mo: oa,
                    },
                    PlaceTarget::Untagged {
                        qn: qb,
                        msn: mb,
                        mo: ob,
                    },
                ) => qa == qb && ma == mb && u64::from(oa) + n == u64::from(ob),
                _ => false,
            };
            if contiguous {
                pd.extend_from_slice(d);
                continue;
            }
        }
        out.push((*t, d.clone()));
    }
    out
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Placements, merged.
    pub placed: Vec<(PlaceTarget, Vec<u8>)>,
    pub events: Vec<Ev>,
    /// Every TERMINATE `process` returned.
    pub terms: Vec<Terminate>,
    /// Octets consumed.
    pub consumed: usize,
}

/// Feeds `data` to `dec` in chunks of the sizes `sizes` cycles through (0 counts as 1),
/// every other chunk from a stream that cannot look ahead ([`RxStream::peek`]), and
/// checks the invariants every run must keep:
/// - every octet offered is consumed;
/// - no placement in a call after the one that returned a TERMINATE (or after the peer's);
/// - every tagged placement lies inside an MR of `mem` with an approved check covering it.
pub fn run(
    dec: &mut Decoder,
    mem: &mut MockMem,
    ev: &mut RecEvents,
    data: &[u8],
    sizes: &[usize],
) -> Outcome {
    let mut placed = Vec::new();
    let mut terms = Vec::new();
    let mut consumed = 0;
    let mut pos = 0;
    let mut i = 0;
    let mut stopped = false;
    while pos < data.len() {
        let n = sizes
            .get(i % sizes.len().max(1))
            .copied()
            .unwrap_or(1)
            .max(1);
        i += 1;
        let end = (pos + n).min(data.len());
        let mut s = SliceRx::new(&data[pos..end]);
        s.peek = i % 2 == 1;
        let r = dec.process(&mut s, mem, ev);
        assert_eq!(s.pos, end - pos, "decoder left octets unconsumed");
        consumed += s.pos;
        if stopped {
            assert!(s.placed.is_empty(), "placement after the stream stopped");
            assert!(r.is_ok(), "second TERMINATE");
        }
        for (t, d) in &s.placed {
            check_placement(mem, t, d.len());
        }
        placed.extend(s.placed);
        if let Err(t) = r {
            terms.push(t);
        }
        if dec.state() != rsiw_core::engine::ddp_rx::RxState::Active {
            stopped = true;
        }
        pos = end;
    }
    Outcome {
        placed: merge(&placed),
        events: ev.evs.clone(),
        terms,
        consumed,
    }
}

/// Panics unless a tagged placement of `len` octets at `t` lies inside a target the local
/// side granted: for a Write ([`Access::RemoteWrite`]), a registered, valid, associated MR
/// with a remote-write check approved for a range covering it; for a Read Response
/// ([`Access::LocalWrite`]), the Data Sink of a Read posted to the decoder, with a
/// local-write check approved for a range covering it.
pub fn check_placement(mem: &MockMem, t: &PlaceTarget, len: usize) {
    if let PlaceTarget::Tagged { stag, to, access } = *t {
        let len = len as u64;
        let mr = mem
            .mrs
            .iter()
            .find(|m| m.stag == stag)
            .unwrap_or_else(|| panic!("placement into unregistered STag {stag:#x}"));
        assert!(mr.valid && mr.assoc, "placement into invalid/foreign STag");
        assert!(
            mr.contains(to, len),
            "placement outside MR: {t:?} +{len} vs {mr:?}"
        );
        assert!(
            matches!(access, Access::RemoteWrite | Access::LocalWrite),
            "placement needing {access:?}"
        );
        let approved = mem.approved.iter().any(|&(s, ato, alen, acc)| {
            s == stag
                && acc == access
                && to >= ato
                && to + len <= ato + u64::from(alen)
                && mr.rights & bit(acc) != 0
        });
        assert!(
            approved,
            "placement {t:?} +{len} not covered by an approved check"
        );
        if access == Access::LocalWrite {
            let in_sink = mem
                .sinks
                .iter()
                .any(|s| s.stag == stag && to >= s.to && to + len <= s.to + u64::from(s.len));
            assert!(
                in_sink,
                "Read Response placement {t:?} +{len} outside every posted Read's sink"
            );
        }
    }
}

/// Enters Reads with Data Sinks `sinks` into `dec`'s ORQ, oldest first, and records them
/// in `mem` for [`check_placement`].
pub fn post_reads(dec: &mut Decoder, mem: &mut MockMem, sinks: &[ReadSink]) {
    for s in sinks {
        dec.post_read(*s).expect("post read");
        mem.sinks.push(*s);
    }
}

/// Runs `data` through a fresh decoder in one chunk.
pub fn run_once(
    framing: Framing,
    cfg: Config,
    ird: u32,
    mem: &mut MockMem,
    data: &[u8],
) -> (Decoder, Outcome) {
    let mut dec = decoder(framing, cfg, ird);
    let mut ev = RecEvents::default();
    let o = run(&mut dec, mem, &mut ev, data, &[usize::MAX]);
    (dec, o)
}

pub fn decoder(framing: Framing, cfg: Config, ird: u32) -> Decoder {
    Decoder::new(
        framing.rx(),
        rsiw_core::engine::ddp_rx::DdpConfig { wire: cfg, ird },
    )
}

/// One case of the `ddp_rx` fuzz target (its input layout is in `fuzz/README.md`): the
/// decoder with the configuration, outstanding Reads and chunking the first three octets
/// select, over the rest, against [`MockMem::sample`]. Panics unless every invariant of
/// [`run`] holds, at most one TERMINATE is returned, every octet is consumed, and feeding
/// octet by octet gives the same outcome and state.
pub fn ddp_rx_case(data: &[u8]) {
    let [sel, chunk, ird, rest @ ..] = data else {
        return;
    };
    let framing = Framing {
        markers: sel & 1 != 0,
        crc: sel & 2 != 0,
    };
    let cfg = if sel & 8 != 0 {
        Config::for_mpa_rev(0, sel & 4 != 0)
    } else {
        Config::for_mpa_rev(2, sel & 4 != 0)
    };
    let ird = u32::from(*ird & 7);
    let chunk = usize::from(*chunk).max(1);
    // Outstanding Reads (sel bits 4-5: how many of these, oldest first): into the
    // local-write MR 0x200, into the everything MR 0x400 near 2^64, and a zero-length one.
    let all_reads = [
        ReadSink {
            stag: 0x200,
            to: 0x2000,
            len: 0x800,
        },
        ReadSink {
            stag: 0x400,
            to: u64::MAX - 0x100,
            len: 0x80,
        },
        ReadSink {
            stag: 0,
            to: 0,
            len: 0,
        },
    ];
    let reads = &all_reads[..usize::from((sel >> 4) & 3)];

    let mut m1 = MockMem::sample();
    let mut e1 = RecEvents::default();
    let mut d1 = decoder(framing, cfg, ird);
    post_reads(&mut d1, &mut m1, reads);
    let a = run(&mut d1, &mut m1, &mut e1, rest, &[chunk, 1, chunk / 3 + 1]);

    let mut m2 = MockMem::sample();
    let mut e2 = RecEvents::default();
    let mut d2 = decoder(framing, cfg, ird);
    post_reads(&mut d2, &mut m2, reads);
    let b = run(&mut d2, &mut m2, &mut e2, rest, &[1]);

    assert!(a.terms.len() <= 1, "more than one TERMINATE");
    assert_eq!(a.consumed, rest.len());
    assert_eq!(a, b, "segmentation changed the outcome");
    assert_eq!(d1.state(), d2.state());
}
