// SPDX-License-Identifier: GPL-2.0

//! A complete iWARP exchange produced by the real engines (MPA startup in both roles, the
//! DDP/RDMAP TX builder for every RDMAP opcode, a TERMINATE), written as Ethernet/IPv4/TCP
//! into a pcap file for tshark (`tests/pcap-check.sh`), on three connections:
//!
//! 1. MPA Rev 1, CRC and markers in both directions; one FPDU split over two segments.
//! 2. MPA Rev 2 (RFC 6581) with CRC, IRD/ORD and peer-to-peer: a zero-length RTR first.
//! 3. MPA Rev 2 client-server without CRC.
//!
//! Beside `iwarp_exchange.pcap` the test writes what tshark must show: `*.tsv` files whose
//! first line is `#filter <display filter>`, second `#fields <field> ...`, then one row per
//! matching frame in `tshark -T fields` format. The values come from the messages the test
//! asked for, not from parsing the output. Without tshark the test checks what it can:
//! TCP/IP checksums (an independent one's-complement sum), sequence numbers, segment
//! sizes, and every FPDU through the independent deframer (markers, CRC32c, headers).
//!
//! Output directory: `$RSIW_PCAP_OUT`, or `target/pcap` of the workspace.

#[path = "common/mpa_util.rs"]
mod mpa_util;

#[path = "common/fpdu_util.rs"]
mod fpdu_util;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use etherparse::PacketBuilder;
use fpdu_util::deframe;
use mpa_util::VecTx;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use rsiw_core::engine::ddp_tx::{DdpTx, Message, Started};
use rsiw_core::engine::startup::{self, EnhancedConfig, Mode, Negotiated, Startup, Status};
use rsiw_core::wire::ddp::{self, DdpError, TaggedError, UntaggedError};
use rsiw_core::wire::fpdu::mulpdu;
use rsiw_core::wire::mpa::{RtrSet, RtrType};
use rsiw_core::wire::rdmap::{
    AtomicOp, AtomicRequest, AtomicResponse, ImmediateData, Opcode, ProtectionError, RdmapError,
    ReadRequest,
};
use rsiw_core::wire::terminate::{EchoedDdpHeader, Layer, TermCause, Terminate};
use rsiw_core::wire::ulpdu::{Config, RdmapHeader, UlpduHeader};

/// Effective MSS of every connection (octets): the usual Ethernet value.
const EMSS: u32 = 1460;
/// The Responder's (server's) port.
const SERVER_PORT: u16 = 34567;

const MPA_FIELDS: &[&str] = &[
    "frame.number",
    "tcp.stream",
    "iwarp_mpa.key.req",
    "iwarp_mpa.key.rep",
    "iwarp_mpa.marker_flag",
    "iwarp_mpa.crc_flag",
    "iwarp_mpa.rej_flag",
    "iwarp_mpa.res",
    "iwarp_mpa.rev",
    "iwarp_mpa.pdlength",
    "iwarp_mpa.privatedata",
];

const FPDU_FIELDS: &[&str] = &[
    "frame.number",
    "tcp.stream",
    "iwarp_mpa.ulpdulength",
    "iwarp_mpa.crc_check",
    "iwarp_mpa.crc",
    "iwarp_mpa.marker_fpduptr",
    "iwarp_ddp.tagged_flag",
    "iwarp_ddp.last_flag",
    "iwarp_ddp.dv",
    "iwarp_rdma.version",
    "iwarp_rdma.opcode",
    "iwarp_ddp.stag",
    "iwarp_ddp.tagged_offset",
    "iwarp_ddp.qn",
    "iwarp_ddp.msn",
    "iwarp_ddp.mo",
    "iwarp_rdma.inval_stag",
    "iwarp_rdma.sinkstag",
    "iwarp_rdma.sinkto",
    "iwarp_rdma.rdmardsz",
    "iwarp_rdma.srcstag",
    "iwarp_rdma.srcto",
    "iwarp_rdma.term_layer",
    "iwarp_rdma.term_etype_rdma",
    "iwarp_rdma.term_etype_ddp",
    "iwarp_rdma.term_etype_llp",
    "iwarp_rdma.term_etype",
    "iwarp_rdma.term_errcode_rdma",
    "iwarp_rdma.term_errcode_ddp_tagged",
    "iwarp_rdma.term_errcode_ddp_untagged",
    "iwarp_rdma.term_errcode_llp",
    "iwarp_rdma.term_errcode",
    "iwarp_rdma.term_hdrct_m",
    "iwarp_rdma.hdrct_d",
    "iwarp_rdma.hdrct_r",
    "iwarp_rdma.term_ddp_seg_len",
    "iwarp_rdma.term_ddp_h",
    "iwarp_rdma.term_rdma_h",
    "iwarp_rdma.atomic.opcode",
    "iwarp_rdma.atomic.request_identifier",
    "iwarp_rdma.atomic.remote_stag",
    "iwarp_rdma.atomic.remote_tagged_offset",
    "iwarp_rdma.atomic.add_data",
    "iwarp_rdma.atomic.swap_data",
    "iwarp_rdma.atomic.compare_data",
    "iwarp_rdma.atomic.original_request_identifier",
    "iwarp_rdma.atomic.original_remote_data_value",
];

/// One expected `tshark -T fields` row: values by field name, the rest empty.
#[derive(Debug, Default, Clone)]
struct Row(Vec<(&'static str, String)>);

impl Row {
    fn set(&mut self, field: &'static str, value: impl Into<String>) -> &mut Self {
        self.0.push((field, value.into()));
        self
    }
    fn render(&self, fields: &[&str]) -> String {
        for (f, _) in &self.0 {
            assert!(fields.contains(f), "unknown field {f}");
        }
        fields
            .iter()
            .map(|f| {
                self.0
                    .iter()
                    .find(|(g, _)| g == f)
                    .map_or(String::new(), |(_, v)| v.clone())
            })
            .collect::<Vec<_>>()
            .join("\t")
    }
}

fn h8(v: u8) -> String {
    format!("0x{v:02x}")
}
fn h32(v: u32) -> String {
    format!("0x{v:08x}")
}
fn h64(v: u64) -> String {
    format!("0x{v:016x}")
}
fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}
fn flag(b: bool) -> String {
    if b { "True" } else { "False" }.to_string()
}

/// The pcap being built: Ethernet frames with their timestamps.
#[derive(Default)]
struct Capture {
    frames: Vec<Vec<u8>>,
    mpa_rows: Vec<Row>,
    fpdu_rows: Vec<Row>,
}

/// Internet checksum (RFC 1071) over `parts`, as the folded one's-complement sum.
fn inet_sum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    let mut carry: Option<u8> = None;
    for p in parts {
        for &b in p.iter() {
            match carry.take() {
                Some(hi) => sum += u32::from(u16::from_be_bytes([hi, b])),
                None => carry = Some(b),
            }
        }
    }
    if let Some(hi) = carry {
        sum += u32::from(u16::from_be_bytes([hi, 0]));
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// Checks an Ethernet/IPv4/TCP frame's checksums independently of etherparse; returns the
/// TCP payload.
fn check_frame(frame: &[u8]) -> &[u8] {
    assert_eq!(&frame[12..14], &[0x08, 0x00], "IPv4 ethertype");
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0F) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    assert_eq!(inet_sum(&[&ip[..ihl]]), 0xFFFF, "IPv4 header checksum");
    assert_eq!(ip[9], 6, "TCP");
    let tcp = &ip[ihl..total];
    let len = (tcp.len() as u16).to_be_bytes();
    let pseudo = [&ip[12..20], &[0, 6], &len[..]].concat();
    assert_eq!(inet_sum(&[&pseudo, tcp]), 0xFFFF, "TCP checksum");
    let doff = usize::from(tcp[12] >> 4) * 4;
    &tcp[doff..]
}

#[derive(Clone, Copy)]
struct Flags {
    syn: bool,
    fin: bool,
}

const DATA: Flags = Flags {
    syn: false,
    fin: false,
};

/// One TCP connection between the Initiator (index 0) and the Responder (index 1).
struct Conn {
    stream: u32,
    macs: [[u8; 6]; 2],
    ips: [[u8; 4]; 2],
    ports: [u16; 2],
    /// Next sequence number of each side.
    seq: [u32; 2],
    started: bool,
    /// Full Operation octets each side sent (for the independent deframer).
    fo: [Vec<u8>; 2],
}

impl Conn {
    fn new(stream: u32) -> Self {
        Conn {
            stream,
            macs: [[0x02, 0, 0, 0, 0, 0x01], [0x02, 0, 0, 0, 0, 0x02]],
            ips: [[192, 168, 7, 1], [192, 168, 7, 2]],
            ports: [40001 + stream as u16, SERVER_PORT],
            seq: [
                0x1000_0000 * (stream + 1),
                0x8000_0000 + 0x0100_0000 * stream,
            ],
            started: false,
            fo: [Vec::new(), Vec::new()],
        }
    }

    /// Appends one TCP segment from side `from`; returns its frame number.
    fn segment(&mut self, cap: &mut Capture, from: usize, f: Flags, payload: &[u8]) -> usize {
        assert!(payload.len() <= EMSS as usize, "segment fits the EMSS");
        let to = 1 - from;
        let mut b = PacketBuilder::ethernet2(self.macs[from], self.macs[to])
            .ipv4(self.ips[from], self.ips[to], 64)
            .tcp(self.ports[from], self.ports[to], self.seq[from], 65535);
        if self.started || from == 1 {
            b = b.ack(self.seq[to]);
        }
        if f.syn {
            b = b.syn();
        }
        if f.fin {
            b = b.fin();
        }
        if !payload.is_empty() {
            b = b.psh();
        }
        let mut frame = Vec::with_capacity(b.size(payload.len()));
        b.write(&mut frame, payload).unwrap();
        assert_eq!(check_frame(&frame), payload);
        self.seq[from] = self.seq[from]
            .wrapping_add(payload.len() as u32)
            .wrapping_add(u32::from(f.syn) + u32::from(f.fin));
        if from == 0 {
            self.started = true;
        }
        cap.frames.push(frame);
        cap.frames.len()
    }

    fn handshake(&mut self, cap: &mut Capture) {
        let syn = Flags {
            syn: true,
            fin: false,
        };
        self.segment(cap, 0, syn, &[]);
        self.segment(cap, 1, syn, &[]);
        self.segment(cap, 0, DATA, &[]);
    }

    fn close(&mut self, cap: &mut Capture) {
        let fin = Flags {
            syn: false,
            fin: true,
        };
        self.segment(cap, 0, fin, &[]);
        self.segment(cap, 1, fin, &[]);
        self.segment(cap, 0, DATA, &[]);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ 0x5A)
        .collect()
}

/// One side's TX state: the builder and its payload source.
struct Side {
    tx: DdpTx,
    cfg: Config,
    crc: bool,
}

/// How the TX of a message is to be put on the wire.
#[derive(Clone, Copy, PartialEq)]
enum Seg {
    /// Each FPDU in its own segment.
    Whole,
    /// The first FPDU split over two segments after this many octets.
    SplitFirst(usize),
}

/// Sends `msg` from side `from` with `payload`, one FPDU per segment; records the
/// expected rows. Returns the assignment and, per FPDU, the ULPDU header sent.
fn send(
    cap: &mut Capture,
    conn: &mut Conn,
    sides: &mut [Side; 2],
    from: usize,
    msg: Message,
    seg: Seg,
) -> (Started, Vec<(u16, UlpduHeader)>) {
    let payload = pattern(msg.payload_len() as usize, cap.frames.len() as u8);
    let side = &mut sides[from];
    let started = side.tx.start(msg).unwrap();
    let mut sink = VecTx::with_payload(&payload);
    let mut headers = Vec::new();
    let mut first = true;
    let mut off: u32 = 0;
    while !side.tx.is_done() {
        let before = sink.out.len();
        let pos = side.tx.mpa().stream_pos();
        let mcfg = *side.tx.mpa().config();
        let want = side.tx.next_fpdu_len().unwrap();
        let info = side.tx.next_fpdu(&mut sink).unwrap();
        assert_eq!(info.wire_len, want);
        assert!(info.wire_len <= EMSS as usize);
        let octets = sink.out[before..].to_vec();
        conn.fo[from].extend_from_slice(&octets);
        let frame = match (seg, first) {
            (Seg::SplitFirst(at), true) => {
                conn.segment(cap, from, DATA, &octets[..at]);
                conn.segment(cap, from, DATA, &octets[at..])
            }
            _ => conn.segment(cap, from, DATA, &octets),
        };
        first = false;
        // The header the message asked for, segment by segment (not parsed back).
        let h = expected_header(&msg, started, off, info.last);
        off += info.payload_len;
        let mut row = Row::default();
        row.set("frame.number", frame.to_string())
            .set("tcp.stream", conn.stream.to_string())
            .set("iwarp_mpa.ulpdulength", info.ulpdu_len.to_string());
        fill_header(&mut row, &h, side.cfg);
        let raw = deframe(&octets, pos, mcfg.markers, mcfg.crc, mcfg.fpduptr);
        assert_eq!(raw.len(), 1);
        if !raw[0].markers.is_empty() {
            let m: Vec<String> = raw[0].markers.iter().map(u16::to_string).collect();
            row.set("iwarp_mpa.marker_fpduptr", m.join(","));
        }
        // CRC field as tshark shows it: the wire's 4 octets read big-endian.
        let crc_wire = u32::from_be_bytes(octets[octets.len() - 4..].try_into().unwrap());
        if side.crc {
            row.set("iwarp_mpa.crc_check", h32(crc_wire));
        } else {
            assert_eq!(crc_wire, 0);
            row.set("iwarp_mpa.crc", h32(crc_wire));
        }
        cap.fpdu_rows.push(row);
        headers.push((info.ulpdu_len, h));
    }
    assert_eq!(off, msg.payload_len());
    (started, headers)
}

fn expected_header(msg: &Message, started: Started, off: u32, last: bool) -> UlpduHeader {
    let msn = started.queue.map_or(0, |(_, m)| m);
    match *msg {
        Message::Write { stag, to, .. } | Message::ReadResponse { stag, to, .. } => {
            UlpduHeader::tagged(msg.opcode(), last, stag, to + u64::from(off))
        }
        Message::Send { invalidate, .. } => {
            UlpduHeader::untagged(msg.opcode(), last, msn, off, invalidate.unwrap_or(0))
        }
        Message::ReadRequest(r) => {
            UlpduHeader::header_only(msg.opcode(), msn, RdmapHeader::ReadRequest(r))
        }
        Message::Terminate(t) => {
            UlpduHeader::header_only(msg.opcode(), msn, RdmapHeader::Terminate(t))
        }
        Message::ImmediateData { data, .. } => {
            UlpduHeader::header_only(msg.opcode(), msn, RdmapHeader::Immediate(data))
        }
        Message::AtomicRequest(a) => {
            UlpduHeader::header_only(msg.opcode(), msn, RdmapHeader::AtomicRequest(a))
        }
        Message::AtomicResponse(a) => {
            UlpduHeader::header_only(msg.opcode(), msn, RdmapHeader::AtomicResponse(a))
        }
    }
}

fn fill_header(row: &mut Row, h: &UlpduHeader, cfg: Config) {
    use rsiw_core::wire::ulpdu::Placement;
    row.set("iwarp_ddp.tagged_flag", flag(h.opcode.is_tagged()))
        .set("iwarp_ddp.last_flag", flag(h.last))
        .set("iwarp_ddp.dv", cfg.ddp.dv().to_string())
        .set("iwarp_rdma.version", cfg.rdmap.rv().to_string())
        .set("iwarp_rdma.opcode", h8(h.opcode.code()));
    match h.placement {
        Placement::Tagged { stag, to } => {
            row.set("iwarp_ddp.stag", h32(stag))
                .set("iwarp_ddp.tagged_offset", h64(to));
        }
        Placement::Untagged { qn, msn, mo } => {
            row.set("iwarp_ddp.qn", qn.to_string())
                .set("iwarp_ddp.msn", msn.to_string())
                .set("iwarp_ddp.mo", mo.to_string());
        }
    }
    if h.opcode.has_invalidate_stag() {
        row.set("iwarp_rdma.inval_stag", h.inval_stag.to_string());
    }
    match h.rdmap {
        RdmapHeader::None | RdmapHeader::Immediate(_) => {}
        RdmapHeader::ReadRequest(r) => {
            row.set("iwarp_rdma.sinkstag", h32(r.sink_stag))
                .set("iwarp_rdma.sinkto", h64(r.sink_to))
                .set("iwarp_rdma.rdmardsz", r.size.to_string())
                .set("iwarp_rdma.srcstag", h32(r.src_stag))
                .set("iwarp_rdma.srcto", h64(r.src_to));
        }
        RdmapHeader::Terminate(t) => {
            // tshark files Error Type and Error Code under per-layer fields.
            let (etype, ecode) = match (t.cause.layer, t.cause.etype) {
                (Layer::Rdma, _) => ("iwarp_rdma.term_etype_rdma", "iwarp_rdma.term_errcode_rdma"),
                (Layer::Ddp, 1) => (
                    "iwarp_rdma.term_etype_ddp",
                    "iwarp_rdma.term_errcode_ddp_tagged",
                ),
                (Layer::Ddp, 2) => (
                    "iwarp_rdma.term_etype_ddp",
                    "iwarp_rdma.term_errcode_ddp_untagged",
                ),
                (Layer::Ddp, _) => ("iwarp_rdma.term_etype_ddp", "iwarp_rdma.term_errcode"),
                (Layer::Llp, _) => ("iwarp_rdma.term_etype_llp", "iwarp_rdma.term_errcode_llp"),
            };
            row.set("iwarp_rdma.term_layer", h8(t.cause.layer.code()))
                .set(etype, h8(t.cause.etype))
                .set(ecode, h8(t.cause.ecode))
                .set("iwarp_rdma.term_hdrct_m", flag(t.seg_len.is_some()))
                .set("iwarp_rdma.hdrct_d", flag(t.ddp_header.is_some()))
                .set("iwarp_rdma.hdrct_r", flag(t.rdma_header.is_some()));
            if t.seg_len.is_some() || t.ddp_header.is_some() {
                row.set(
                    "iwarp_rdma.term_ddp_seg_len",
                    hex(&t.seg_len.unwrap_or(0).to_be_bytes()),
                );
            }
            // RFC 5040 §4.8: the Terminated DDP Header is 14 octets for a tagged and 18 for
            // an untagged segment (its T bit). tshark (4.4) instead takes 14 octets when the
            // TERMINATE's Error Type is 1 (whatever the layer) and 18 otherwise, so an
            // RDMAP Remote Protection error (0/1/x) echoing an untagged Read Request header
            // is split 4 octets early. Model tshark's split here; `run` checks that our
            // own parser (wire::terminate, RFC rule) reads the header back correctly.
            let mut echoed = Vec::new();
            if let Some(d) = &t.ddp_header {
                echoed.extend_from_slice(d.as_bytes());
            }
            if let Some(r) = &t.rdma_header {
                echoed.extend_from_slice(&r.to_bytes());
            }
            let mut at = 0;
            if t.ddp_header.is_some() {
                at = if t.cause.etype == 1 { 14 } else { 18 };
                row.set("iwarp_rdma.term_ddp_h", hex(&echoed[..at]));
            }
            if t.rdma_header.is_some() {
                row.set(
                    "iwarp_rdma.term_rdma_h",
                    hex(&echoed[at..at + ReadRequest::LEN]),
                );
            }
        }
        RdmapHeader::AtomicRequest(a) => {
            // tshark names the first operand "Add Data" for FetchAdd and "Swap Data" for
            // CmpSwap; Compare Data is shown for both (RFC 7306 §5.2.1: unused by FetchAdd).
            row.set("iwarp_rdma.atomic.opcode", a.op.code().to_string())
                .set("iwarp_rdma.atomic.request_identifier", a.req_id.to_string())
                .set("iwarp_rdma.atomic.remote_stag", a.stag.to_string())
                .set("iwarp_rdma.atomic.remote_tagged_offset", a.to.to_string())
                .set("iwarp_rdma.atomic.compare_data", a.compare.to_string());
            let operand = match a.op {
                AtomicOp::FetchAdd => "iwarp_rdma.atomic.add_data",
                AtomicOp::CmpSwap => "iwarp_rdma.atomic.swap_data",
            };
            row.set(operand, a.add_swap.to_string());
        }
        RdmapHeader::AtomicResponse(a) => {
            row.set(
                "iwarp_rdma.atomic.original_request_identifier",
                a.req_id.to_string(),
            )
            .set(
                "iwarp_rdma.atomic.original_remote_data_value",
                a.orig_value.to_string(),
            );
        }
    }
}

/// One connection's scenario.
struct Scenario {
    name: &'static str,
    init: startup::Config,
    resp: startup::Config,
    pd_req: &'static [u8],
    pd_rep: &'static [u8],
    split: bool,
    terminate: fn(&Ctx) -> Terminate,
}

/// What a TERMINATE may refer to: headers sent earlier on the connection.
struct Ctx {
    write_first: (u16, UlpduHeader),
    read_request: (u16, UlpduHeader, ReadRequest),
    send_first: (u16, UlpduHeader),
}

fn echo(h: &UlpduHeader) -> EchoedDdpHeader {
    EchoedDdpHeader::from_header(
        &h.ddp_header(rsiw_core::wire::rdmap::Version::Rfc),
        ddp::Version::Rfc,
    )
}

fn mpa_row(conn: &Conn, frame: usize, req: bool, flags: u8, rev: u8, pd: &[u8]) -> Row {
    let mut r = Row::default();
    let key = if req {
        b"MPA ID Req Frame"
    } else {
        b"MPA ID Rep Frame"
    };
    r.set("frame.number", frame.to_string())
        .set("tcp.stream", conn.stream.to_string())
        .set(
            if req {
                "iwarp_mpa.key.req"
            } else {
                "iwarp_mpa.key.rep"
            },
            hex(key),
        )
        .set("iwarp_mpa.marker_flag", flag(flags & 0x80 != 0))
        .set("iwarp_mpa.crc_flag", flag(flags & 0x40 != 0))
        .set("iwarp_mpa.rej_flag", flag(flags & 0x20 != 0))
        .set("iwarp_mpa.res", h8(flags & 0x1F))
        .set("iwarp_mpa.rev", rev.to_string())
        .set("iwarp_mpa.pdlength", pd.len().to_string());
    if !pd.is_empty() {
        r.set("iwarp_mpa.privatedata", hex(pd));
    }
    r
}

fn run(cap: &mut Capture, stream: u32, sc: &Scenario) -> [Negotiated; 2] {
    let mut conn = Conn::new(stream);
    conn.handshake(cap);

    // MPA startup, each frame in its own segment.
    let mut i = Startup::initiator(sc.init, sc.pd_req).unwrap();
    let mut r = Startup::responder(sc.resp).unwrap();
    let req = i.tx_pending().to_vec();
    i.tx_advance(req.len());
    let f = conn.segment(cap, 0, DATA, &req);
    cap.mpa_rows
        .push(mpa_row(&conn, f, true, req[16], req[17], &req[20..]));
    assert_eq!(r.feed(&req).unwrap(), req.len());
    assert_eq!(r.status(), Status::RequestReceived, "{}", sc.name);
    r.accept(sc.pd_rep).unwrap();
    let rep = r.tx_pending().to_vec();
    r.tx_advance(rep.len());
    let f = conn.segment(cap, 1, DATA, &rep);
    cap.mpa_rows
        .push(mpa_row(&conn, f, false, rep[16], rep[17], &rep[20..]));
    assert_eq!(i.feed(&rep).unwrap(), rep.len());
    assert_eq!(i.status(), Status::Established, "{}", sc.name);
    assert_eq!(r.status(), Status::Established, "{}", sc.name);
    let (ni, nr) = (*i.negotiated().unwrap(), *r.negotiated().unwrap());
    assert_eq!(ni.rev, nr.rev);
    assert_eq!(ni.crc, nr.crc);

    let mk = |n: &Negotiated| Side {
        tx: DdpTx::for_connection(n, EMSS, true),
        cfg: Config::for_mpa_rev(n.rev, true),
        crc: n.crc,
    };
    let mut sides = [mk(&ni), mk(&nr)];
    for s in &sides {
        assert_eq!(
            s.tx.mpa().config().mulpdu,
            mulpdu(EMSS, s.tx.mpa().config().markers)
        );
    }

    // RFC 6581 §5: the peer-to-peer Initiator's first FPDU is the zero-length RTR.
    if ni.p2p {
        let rtr = Message::rtr(ni.rtr.expect("an RTR type matched"));
        send(cap, &mut conn, &mut sides, 0, rtr, Seg::Whole);
    }

    let base = 0x1000 * (u64::from(stream) + 1);
    let split = if sc.split {
        Seg::SplitFirst(700)
    } else {
        Seg::Whole
    };
    let mut send_first = None;
    for (k, (solicited, invalidate)) in [
        (false, None),
        (true, None),
        (false, Some(0x5100_0001)),
        (true, Some(0x5100_0002)),
    ]
    .into_iter()
    .enumerate()
    {
        let msg = Message::Send {
            solicited,
            invalidate,
            len: 40 + k as u32 * 700,
        };
        let (_, h) = send(cap, &mut conn, &mut sides, 0, msg, Seg::Whole);
        send_first.get_or_insert(h[0]);
    }
    let write = Message::Write {
        stag: 0x1000_0001,
        to: base,
        len: 3000,
    };
    let (_, wh) = send(cap, &mut conn, &mut sides, 0, write, split);
    let rr = ReadRequest {
        sink_stag: 0x2000_0002,
        sink_to: 0x2_0000 + base,
        size: 2000,
        src_stag: 0x3000_0003,
        src_to: 0xFFFF_0000_0000 + base,
    };
    let (_, rh) = send(
        cap,
        &mut conn,
        &mut sides,
        0,
        Message::ReadRequest(rr),
        Seg::Whole,
    );
    // The Responder answers; RFC 5040 §5.2: tagged to the sink buffer.
    send(
        cap,
        &mut conn,
        &mut sides,
        1,
        Message::ReadResponse {
            stag: rr.sink_stag,
            to: rr.sink_to,
            len: rr.size,
        },
        Seg::Whole,
    );
    for solicited in [false, true] {
        let data = ImmediateData(*if solicited { b"imm+SE.." } else { b"imm-data" });
        send(
            cap,
            &mut conn,
            &mut sides,
            0,
            Message::ImmediateData { solicited, data },
            Seg::Whole,
        );
    }
    for (id, op) in [(1, AtomicOp::FetchAdd), (2, AtomicOp::CmpSwap)] {
        let a = AtomicRequest {
            op,
            req_id: id,
            stag: 0x4000_0004,
            to: 0x8000 + base,
            add_swap: 0x11 * u64::from(id),
            add_swap_mask: u64::MAX,
            compare: 0x22 * u64::from(id),
            compare_mask: u64::MAX,
        };
        send(
            cap,
            &mut conn,
            &mut sides,
            0,
            Message::AtomicRequest(a),
            Seg::Whole,
        );
        let resp = AtomicResponse {
            req_id: id,
            orig_value: 0x0123_4567_89AB_CDEF ^ u64::from(id),
        };
        send(
            cap,
            &mut conn,
            &mut sides,
            1,
            Message::AtomicResponse(resp),
            Seg::Whole,
        );
    }
    send(
        cap,
        &mut conn,
        &mut sides,
        1,
        Message::Send {
            solicited: false,
            invalidate: None,
            len: 100,
        },
        Seg::Whole,
    );
    // The Responder ends the stream with a TERMINATE (RFC 5040 §5.4, §7.1).
    let ctx = Ctx {
        write_first: wh[0],
        read_request: (rh[0].0, rh[0].1, rr),
        send_first: send_first.unwrap(),
    };
    let t = (sc.terminate)(&ctx);
    let (st, _) = send(
        cap,
        &mut conn,
        &mut sides,
        1,
        Message::Terminate(t),
        Seg::Whole,
    );
    assert_eq!(st.queue, Some((2, 1)));
    conn.close(cap);

    // Without tshark: every FPDU of both directions through the independent deframer.
    for (side, n) in [(0, &ni), (1, &nr)] {
        let fpdus = deframe(&conn.fo[side], 0, n.markers_tx, n.crc, n.fpduptr);
        let cfg = Config::for_mpa_rev(n.rev, true);
        for f in &fpdus {
            f.parse(cfg);
            assert!(f.wire_len <= EMSS as usize);
        }
        if n.markers_tx {
            assert!(fpdus.iter().any(|f| f.markers.len() > 1));
        }
        if side == 1 {
            // Our parser reads the TERMINATE back as sent (RFC 5040 §4.8 lengths).
            let (h, _) = fpdus.last().unwrap().parse(cfg);
            assert_eq!(h.rdmap, RdmapHeader::Terminate(t));
        }
    }
    [ni, nr]
}

fn out_dir() -> PathBuf {
    match std::env::var_os("RSIW_PCAP_OUT") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/pcap"),
    }
}

fn write_tsv(path: &std::path::Path, filter: &str, fields: &[&str], rows: &[Row]) {
    let mut s = format!("#filter {filter}\n#fields {}\n", fields.join(" "));
    for r in rows {
        s.push_str(&r.render(fields));
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn scenarios() -> Vec<Scenario> {
    let basic = startup::Config {
        mode: Mode::Basic,
        crc: true,
        markers: true,
        large_fpdu: false,
        permissive_rev0: false,
    };
    let enh = |ird, ord, p2p, rtr, crc| startup::Config {
        mode: Mode::Enhanced(EnhancedConfig { ird, ord, p2p, rtr }),
        crc,
        markers: false,
        large_fpdu: false,
        permissive_rev0: false,
    };
    let rtr = RtrSet {
        send: false,
        write: true,
        read: false,
    };
    vec![
        Scenario {
            name: "rev1 markers crc",
            init: basic,
            resp: basic,
            pd_req: b"rsiw rev1 request",
            pd_rep: b"rsiw rev1 reply",
            split: true,
            // DDP 1/1/0x00 invalid STag on the Write's first segment, M and D.
            terminate: |c| Terminate {
                cause: TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag)),
                seg_len: Some(c.write_first.0),
                ddp_header: Some(echo(&c.write_first.1)),
                rdma_header: None,
            },
        },
        Scenario {
            name: "rev2 crc p2p",
            init: enh(16, 16, true, rtr, true),
            resp: enh(16, 16, true, RtrSet::ALL, false),
            pd_req: b"rsiw rev2 p2p",
            pd_rep: b"ok",
            split: false,
            // RDMAP 0/1/0x00 invalid source STag on the Read Request: M, D and R.
            terminate: |c| Terminate {
                cause: TermCause::rdmap(RdmapError::RemoteProtection(ProtectionError::InvalidStag)),
                seg_len: Some(c.read_request.0),
                ddp_header: Some(echo(&c.read_request.1)),
                rdma_header: Some(c.read_request.2),
            },
        },
        Scenario {
            name: "rev2 no crc",
            init: enh(8, 4, false, RtrSet::NONE, false),
            resp: enh(8, 8, false, RtrSet::ALL, false),
            pd_req: b"",
            pd_rep: b"",
            split: false,
            // DDP 1/2/0x03 MSN range on a Send, M and D.
            terminate: |c| Terminate {
                cause: TermCause::ddp(DdpError::Untagged(UntaggedError::MsnRange)),
                seg_len: Some(c.send_first.0),
                ddp_header: Some(echo(&c.send_first.1)),
                rdma_header: None,
            },
        },
    ]
}

#[test]
fn exchange_pcap_for_tshark() {
    let mut cap = Capture::default();
    let mut negotiated = Vec::new();
    for (k, sc) in scenarios().iter().enumerate() {
        negotiated.push(run(&mut cap, k as u32, sc));
    }
    // What the scenarios were meant to negotiate.
    let [a, b, c] = [&negotiated[0], &negotiated[1], &negotiated[2]];
    assert_eq!(
        (a[0].rev, a[0].crc, a[0].markers_tx, a[1].markers_tx),
        (1, true, true, true)
    );
    assert_eq!((b[0].rev, b[0].crc, b[0].p2p), (2, true, true));
    assert_eq!(b[0].rtr, Some(RtrType::Write));
    assert!(b[0].ird_ord.is_some());
    assert_eq!((c[0].rev, c[0].crc, c[0].p2p), (2, false, false));
    // Every RDMAP opcode is on the wire, on every connection.
    for stream in 0..3 {
        for op in Opcode::ALL {
            let want = h8(op.code());
            assert!(
                cap.fpdu_rows
                    .iter()
                    .any(|r| r.0.contains(&("tcp.stream", stream.to_string()))
                        && r.0.contains(&("iwarp_rdma.opcode", want.clone()))),
                "stream {stream} lacks {op:?}"
            );
        }
    }

    let dir = out_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("iwarp_exchange.pcap");
    let file = std::fs::File::create(&pcap).unwrap();
    let mut w = PcapWriter::new(file).unwrap();
    for (k, f) in cap.frames.iter().enumerate() {
        let ts = Duration::from_micros(1_700_000_000_000_000 + 1000 * k as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
    drop(w);
    write_tsv(
        &dir.join("iwarp_exchange.mpa.tsv"),
        "iwarp_mpa.key.req || iwarp_mpa.key.rep",
        MPA_FIELDS,
        &cap.mpa_rows,
    );
    write_tsv(
        &dir.join("iwarp_exchange.fpdu.tsv"),
        "iwarp_mpa.fpdu",
        FPDU_FIELDS,
        &cap.fpdu_rows,
    );
    println!(
        "wrote {} ({} frames, {} MPA frames, {} FPDUs)",
        pcap.display(),
        cap.frames.len(),
        cap.mpa_rows.len(),
        cap.fpdu_rows.len()
    );
}
