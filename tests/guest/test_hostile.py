# SPDX-License-Identifier: GPL-2.0
"""A hostile iWARP peer against rsiw: a raw TCP peer in this process speaks MPA revision 2
with an rsiw consumer (hostile_target.py, pyverbs) as Initiator to its listener or as
Responder to its connect (the FPDU classes, Read Responses and their controls run in both
roles), then sends FPDUs that RFC 5040/5041 forbid. For each, rsiw must answer with exactly one TERMINATE carrying
the RFC's layer, etype and ecode (RFC 5040 §7.2, RFC 5041 §7.2; the table in
Documentation/rsiw.rst, *Security*), close the connection, flush the consumer's receive, and place
nothing: the target checks three whole pages around its MR, so a byte written before or
after the MR, or into it without the access right, fails the test. A well-formed Write
and Send on a connection of their own show that the peer's framing is right, so that
every TERMINATE below is one for the fault it was sent.

A TERMINATE does not wait for the peer (RFC 5040 §7.1): with the target's Sends filling
TCP toward a peer that does not read, a forbidden Write still puts the QP in ERROR at
once (its receive flushed, QP_ACCESS_ERR), and the connection closes within
mpa_timeout_ms whether or not the TERMINATE could be queued.

Read Responses (RFC 5040 §5.2, §7.2): with no Read outstanding, aimed at MRs that grant
local write (as a kernel consumer's DMA MR does for all of kernel memory), with L=0 and
L=1, they are unexpected (RDMAP 0/2/0x06). With the target's RDMA Read outstanding, a
Response with another STag, another TO, more or fewer octets than the Read is refused
before an octet is placed (DDP 1/1/0x00 or 0x01), and the Read is flushed; the exact
Response completes it. A Read Response rsiw sends stops where the target deregistered
its Data Source (TERMINATE 0/1/0x00): nothing the memory held after that reaches the peer.

The classes each get one connection per case: Writes and Read Requests outside an MR,
without its right, with a TO that wraps, an unknown STag or another PD's STag (the target
registers a page on a PD of its own and checks it too); untagged Sends on a queue that does
not exist, with an MSN or MO out of order, longer than the receive, with Invalidate of an
unknown or foreign STag; DDP and RDMAP versions, unassigned and not negotiated opcodes,
tagged/untagged mismatches, a ULPDU shorter than its header; Read Requests beyond IRD; a
TERMINATE in the middle of a message (closed without an answer); malformed MPA Requests
(closed, never reported to the consumer); markers whose FPDUPTR is wrong, with rsiw asking
for markers (LLP 2/0/0x03); a peer-to-peer RTR of another type than agreed (taken as it
comes).

After the test the usual fixtures check dmesg (no oops, KASAN, lockdep) and kmemleak,
and `rmmod rsiw` must succeed.
"""
import fcntl
import json
import os
import queue
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import threading

import crcmod.predefined
import pytest

from conftest import (SOAK, dmesg_mark, dmesg_since, load_rsiw, port_counters, recv_exact, sh,
                      unload_rsiw, wait_for)

DEV = "rsiw0"
ADDR = "10.91.0.1"
PORT = 7490
PAGE = os.sysconf("SC_PAGE_SIZE")
TARGET = os.path.join(os.path.dirname(__file__), "hostile_target.py")
# Where the hostile peer listens when rsiw is the Initiator.
PEER_PORT = PORT + 1
T_IO = 60
# How long the target may take to report a connection's end (rsiw's MPA and
# TERMINATE timeouts are well within it).
T_REPORT = 3 * T_IO

IBV_WC_SUCCESS = 0
IBV_WC_WR_FLUSH_ERR = 5
# enum ibv_wc_opcode
IBV_WC_SEND = 0
IBV_WC_RDMA_WRITE = 1
# enum ibv_event_type: a memory protection error the peer caused is a local access
# violation (QP_ACCESS_ERR), any other TERMINATE a fatal QP error.
IBV_EVENT_QP_FATAL = 1
IBV_EVENT_QP_ACCESS_ERR = 3
IBV_EVENT_SQ_DRAINED = 5

# TERMINATE header flags (RFC 5040 §4.8): the offending DDP segment length and header
# (M, D) and the offending RDMAP header (R) are included.
HDR_M, HDR_D, HDR_R = 0x80, 0x40, 0x20


def fpdu(ulpdu):
    """An FPDU without markers: ULPDU_Length (2 octets, network order), the ULPDU, pad to
    4 octets, and a CRC field of zero (no CRC negotiated: RFC 5044 §4.1 lets the receiver
    ignore it)."""
    body = struct.pack(">H", len(ulpdu)) + ulpdu
    return body + bytes((-len(body)) % 4) + bytes(4)


def write(stag, to, data):
    """RDMA Write, one segment: tagged DDP header (T=1, L=1, DV=1), RDMAP RV=1 opcode 0."""
    return fpdu(bytes([0xC1, 0x40]) + struct.pack(">IQ", stag, to) + data)


def send(data, msn=1):
    """Send, one segment: untagged DDP header on QN 0."""
    return fpdu(bytes([0x41, 0x43]) + struct.pack(">IIII", 0, 0, msn, 0) + data)


def read_response(stag, to, data, last=True):
    """RDMA Read Response, one segment: tagged DDP header (T=1, L as given, DV=1), RDMAP
    RV=1 opcode 2."""
    return fpdu(bytes([0xC1 if last else 0x81, 0x42]) + struct.pack(">IQ", stag, to) + data)


def tagged(op, stag, to, data, last=True, dv=1, rv=1):
    """Any tagged segment: DDP control (T=1, L, DV) and RDMAP control (RV, opcode)."""
    return fpdu(bytes([0x80 | (0x40 if last else 0) | dv, (rv << 6) | op])
                + struct.pack(">IQ", stag, to) + data)


def untagged(op, qn, msn, mo, data=b"", last=True, dv=1, rv=1, inval=0):
    """Any untagged segment: DDP control (T=0, L, DV), RDMAP control (RV, opcode), the
    Invalidate STag (RsvdULP), QN, MSN and MO."""
    return fpdu(bytes([(0x40 if last else 0) | dv, (rv << 6) | op])
                + struct.pack(">IIII", inval, qn, msn, mo) + data)


def send_inv(stag, data, msn=1):
    """Send with Invalidate of `stag`, one segment (RDMAP opcode 4)."""
    return untagged(4, 0, msn, 0, data, inval=stag)


def terminate(layer=0, etype=0, ecode=0):
    """A TERMINATE of the peer's (QN 2, MSN 1), without echoed headers."""
    return untagged(7, 2, 1, 0, bytes([layer << 4 | etype, ecode, 0, 0]))


def fpdus(data):
    """Splits `data` (FPDUs without markers) into [(RDMAP opcode, FPDU octets)]; fails on
    a truncated last FPDU."""
    out = []
    while data:
        ulen = int.from_bytes(data[:2], "big")
        total = 2 + ulen + (-(2 + ulen)) % 4 + 4
        assert len(data) >= total, f"truncated FPDU: {data.hex()}"
        out.append((data[3] & 0x0F, data[:total]))
        data = data[total:]
    return out


def read_request(src_stag, src_to, size, msn=1):
    """RDMA Read Request on QN 1 (its sink STag and TO are the Initiator's own)."""
    return fpdu(bytes([0x41, 0x41]) + struct.pack(">IIII", 0, 1, msn, 0)
                + struct.pack(">IQIIQ", 0x1234, 0, size, src_stag, src_to))


def mpa_request(crc=False):
    """MPA Request, revision 2, S=1, no markers, C as asked; private data: the RFC 6581
    IRD/ORD block (IRD 1, ORD 1, not peer-to-peer)."""
    pd = struct.pack(">HH", 1, 1)
    flags = 0x10 | (0x40 if crc else 0)
    return b"MPA ID Req Frame" + bytes([flags, 2]) + struct.pack(">H", len(pd)) + pd


CRC32C = crcmod.predefined.mkCrcFun("crc-32c")


def with_crc(f, corrupt=False):
    """The FPDU `f` with its CRC field set (RFC 5044 §4.4: CRC32c over everything before
    the field, sent least significant octet first), flipped in its lowest bit if
    `corrupt`."""
    crc = CRC32C(f[:-4]) ^ (1 if corrupt else 0)
    return f[:-4] + crc.to_bytes(4, "little")


def mpa_frame(key=b"MPA ID Req Frame", flags=0x10, rev=2, pd=struct.pack(">HH", 1, 1),
              pd_len=None):
    """Any MPA startup frame: key, flags octet (M C R S), revision, PD_Length (default:
    the private data's length) and private data."""
    n = len(pd) if pd_len is None else pd_len
    return key + bytes([flags, rev]) + struct.pack(">H", n) + pd


def recv_all(s):
    """Everything until the peer closes (FIN or reset); fails if it has not closed within
    T_IO seconds."""
    data = bytearray()
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        except TimeoutError:
            raise AssertionError(f"rsiw did not close within {T_IO} s; sent {data.hex()}")
        if not chunk:
            break
        data += chunk
    return bytes(data)


# The RFC 6581 IRD/ORD block of the target's MPA frames: IRD 1, ORD 1.
IRD_ORD_1_1 = bytes.fromhex("00010001")


def connect(target, crc=False, ird_ord=IRD_ORD_1_1):
    """MPA startup as Initiator, asking for CRC if `crc`, checking that rsiw's Reply
    carries the IRD/ORD block `ird_ord`; returns (socket, the target's keys: middle page
    address `addr`, write rkey `wkey`, read rkey `rkey`, the region's lkey `lkey`, the
    other PD's page `faddr` and its `fkey`; see hostile_target.py)."""
    s = socket.create_connection((ADDR, PORT), timeout=T_IO)
    s.sendall(mpa_request(crc))
    keys = target()
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame", rep.hex()
    assert rep[16] & 0x20 == 0, f"rsiw rejected the MPA Request: {rep.hex()}"
    # M=0: rsiw asks for no markers. C states rsiw's preference (RFC 5044 §7.1.2): CRC
    # is in use if either frame has C=1, so it must be 0 only when the peer did not ask.
    assert rep[16] & (0x80 if crc else 0xC0) == 0, f"rsiw's M and C: {rep.hex()}"
    pd = recv_exact(s, int.from_bytes(rep[18:20], "big"))
    # Revision 2 with the RFC 6581 IRD/ORD block (S=1).
    assert (rep[17], rep[16] & 0x10, pd) == (2, 0x10, ird_ord), (rep.hex(), pd.hex())
    return s, keys


def mpa_reply(crc=False):
    """MPA Reply, revision 2, S=1, no markers, C as asked; private data: the RFC 6581
    IRD/ORD block (IRD 1, ORD 1, not peer-to-peer)."""
    return mpa_frame(key=b"MPA ID Rep Frame", flags=0x10 | (0x40 if crc else 0))


@pytest.fixture
def peer():
    """The hostile peer's listening socket for rsiw as Initiator (on PEER_PORT)."""
    ls = socket.create_server((ADDR, PEER_PORT))
    ls.settimeout(T_IO)
    yield ls
    ls.close()


def accept(ls, target, crc=False, ird_ord=None):
    """MPA startup as Responder to rsiw's connect: takes rsiw's MPA Request (revision 2,
    S=1, no markers, no CRC: rsiw's defaults; with the IRD/ORD block `ird_ord` if given),
    answers with mpa_reply(crc) (C=1: CRC is in use, RFC 5044 §7.1); returns (socket,
    the target's keys, as connect() does)."""
    keys = target()
    s, _ = ls.accept()
    s.settimeout(T_IO)
    req = recv_exact(s, 20)
    assert req[:16] == b"MPA ID Req Frame", req.hex()
    assert (req[16] & 0xD0, req[17]) == (0x10, 2), f"rsiw's MPA Request: {req.hex()}"
    pd = recv_exact(s, int.from_bytes(req[18:20], "big"))
    assert ird_ord is None or pd == ird_ord, f"rsiw's IRD/ORD block: {pd.hex()}"
    s.sendall(mpa_reply(crc))
    return s, keys


# The two ends rsiw plays: Responder (the peer connects) and Initiator (rsiw connects).
ROLES = ["listen", "connect"]


def open_conn(role, report, ls, crc=False, ird_ord=None):
    """A connection to the target in `role` (see ROLES), MPA startup done, with CRC if
    `crc`; rsiw's MPA frame must carry the IRD/ORD block `ird_ord` (as Responder, IRD 1
    and ORD 1 when None)."""
    if role == "listen":
        return connect(report, crc, ird_ord or IRD_ORD_1_1)
    return accept(ls, report, crc, ird_ord)


def terminate_of(data):
    """(layer, etype, ecode, header flags) of the one TERMINATE FPDU `data` must be."""
    assert len(data) >= 24, f"no TERMINATE from rsiw: {data.hex()}"
    ulen = int.from_bytes(data[:2], "big")
    total = 2 + ulen + (-(2 + ulen)) % 4 + 4
    assert data[2] == 0x41 and data[3] == 0x47, f"not a TERMINATE (RDMAP opcode 7): {data.hex()}"
    qn, msn, mo = struct.unpack(">III", data[8:20])
    assert (qn, msn, mo) == (2, 1, 0), f"TERMINATE on QN {qn} MSN {msn} MO {mo}: {data.hex()}"
    assert len(data) == total, f"rsiw sent more than one TERMINATE FPDU: {data.hex()}"
    return data[20] >> 4, data[20] & 0x0F, data[21], data[22] & 0xE0


@pytest.fixture
def target(rsiw, dummy):
    """rsiw0 on the dummy netdev and hostile_target.py on it for `n` connections, as
    Responder (listening on PORT) or, with `role="connect"`, as Initiator (connecting to
    the hostile peer on PEER_PORT); yields a function returning the target's next JSON
    line (the MR keys of a connection about to be made, or its report once it ended)."""
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh("modprobe rdma_ucm")
    procs = []

    def spawn(role, n, mode):
        port = PORT if role == "listen" else PEER_PORT
        p = subprocess.Popen([sys.executable, TARGET, role, ADDR, str(port), str(n), *mode],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        # A reader thread per target, so that every wait for a line has a deadline
        # (select() on the pipe would miss lines the text wrapper has read ahead).
        p.lines = queue.Queue()

        def pump():
            for line in p.stdout:
                p.lines.put(line)
            p.lines.put(None)
        p.reader = threading.Thread(target=pump, daemon=True)
        p.reader.start()
        procs.append(p)
        line = next_line(p, T_IO).strip()
        assert line == "ready", line + rest(p)
        return p

    def next_line(p, timeout):
        try:
            line = p.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the target within {timeout} s") from None
        return "" if line is None else line

    def rest(p):
        # What the target wrote after the line in hand, once it exited.
        p.reader.join(timeout=T_IO)
        out = []
        while not p.lines.empty():
            line = p.lines.get()
            if line is not None:
                out.append(line)
        return "".join(out)

    def start(n, *mode, role="listen"):
        # As Initiator, one process per connection: in hostile_target.py a second
        # rdma_create_ep() in one process fails with ENOENT, after a good first
        # connection as after a TERMINATE, and with the C siw as with rsiw (a plain
        # connect/disconnect loop in one process works on both): librdmacm's or
        # pyverbs' matter, not the provider's.
        cur = {"p": None if role == "connect" else spawn(role, n, mode), "lines": 0}

        def report(timeout=T_REPORT):
            if role == "connect" and cur["lines"] % 2 == 0:
                cur["p"] = spawn(role, 1, mode)
            p = cur["p"]
            cur["lines"] += 1
            line = next_line(p, timeout)
            if not line.startswith("{"):
                # Let it finish writing its traceback first.
                try:
                    p.wait(timeout=T_IO)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                raise AssertionError("target failed: " + line + rest(p))
            return json.loads(line)

        def tell(line):
            # A line for a target that waits for one (`longsge`).
            cur["p"].stdin.write(line + "\n")
            cur["p"].stdin.flush()
        report.tell = tell
        return report

    yield start
    for p in procs:
        try:
            rc = p.wait(timeout=T_IO)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        assert rc == 0, f"target exited {rc}: {rest(p)}"
    sh(f"rdma link del {DEV}", check=False)


# (name, FPDU builder, expected TERMINATE (layer, etype, ecode), header flags):
# RFC 5041 §7.2 (layer 1 DDP, etype 1 tagged buffer) and RFC 5040 §7.2 (layer 0 RDMAP,
# etype 1 remote protection, etype 2 remote operation).
CASES = [
    # The last 8 octets of the MR and 8 beyond it: base or bounds violation.
    ("write_past_the_end", lambda k: write(k["wkey"], k["addr"] + PAGE - 8, b"\xEE" * 16),
     (1, 1, 0x01), HDR_M | HDR_D),
    # 8 octets before the MR and 8 inside it.
    ("write_before_the_start", lambda k: write(k["wkey"], k["addr"] - 8, b"\xEE" * 16),
     (1, 1, 0x01), HDR_M | HDR_D),
    # TO + length wraps 64 bits.
    ("write_to_wraps", lambda k: write(k["wkey"], (1 << 64) - 8, b"\xEE" * 16),
     (1, 1, 0x03), HDR_M | HDR_D),
    # An MR without remote write access: DDP has no access-rights code, Invalid STag.
    ("write_without_the_right", lambda k: write(k["rkey"], k["addr"] + 64, b"\xEE" * 16),
     (1, 1, 0x00), HDR_M | HDR_D),
    # An STag nobody registered (index 0xABCDE, the write MR's key).
    ("write_unknown_stag",
     lambda k: write(0xABCDE00 | (k["wkey"] & 0xFF), k["addr"], b"\xEE" * 16),
     (1, 1, 0x00), HDR_M | HDR_D),
    # A Read Request reaching past the end of the readable MR: RDMAP remote protection,
    # base or bounds, with the Read Request header echoed (R).
    ("read_past_the_end", lambda k: read_request(k["rkey"], k["addr"] + PAGE - 8, 16),
     (0, 1, 0x01), HDR_M | HDR_D | HDR_R),
    # Read Responses nobody asked for, into MRs that grant local write (the read MR also
    # remote read, the region local write only): RDMAP unexpected opcode (RFC 5040 §7.2),
    # with L=1 and with L=0 (no later segment is needed to refuse it).
    ("read_response_unsolicited",
     lambda k: read_response(k["rkey"], k["addr"] + 64, b"\xEE" * 16),
     (0, 2, 0x06), HDR_M | HDR_D),
    ("read_response_unsolicited_not_last",
     lambda k: read_response(k["rkey"], k["addr"] + 64, b"\xEE" * 16, last=False),
     (0, 2, 0x06), HDR_M | HDR_D),
    ("read_response_unsolicited_local_only",
     lambda k: read_response(k["lkey"], k["addr"] - 64, b"\xEE" * 16),
     (0, 2, 0x06), HDR_M | HDR_D),
    # The MPA Request again in Full Operation: parsed as an FPDU of ULPDU_Length 0x4D50
    # whose RDMAP version is 0 (control octets `41 20`): invalid RDMAP version. rsiw gives a
    # segment's verdict at the end of its FPDU, so the rest of the FPDU (19800 octets in
    # all) follows.
    ("mpa_request_again", lambda k: mpa_request().ljust(19800, b"\0"), (0, 2, 0x05),
     HDR_M | HDR_D),
    # STags of another PD of the target's (RFC 5041 §7.2 / RFC 5040 §7.2: not associated
    # with this stream): a Write, a Read Request, a Send with Invalidate.
    ("write_other_pd", lambda k: write(k["fkey"], k["faddr"] + 64, b"\xEE" * 16),
     (1, 1, 0x02), HDR_M | HDR_D),
    ("read_request_other_pd", lambda k: read_request(k["fkey"], k["faddr"], 16),
     (0, 1, 0x03), HDR_M | HDR_D | HDR_R),
    ("send_inv_other_pd", lambda k: send_inv(k["fkey"], b"\xEE" * 16),
     (0, 1, 0x03), HDR_M | HDR_D),
    # Send with Invalidate of the target's own user MRs, an advertised one and one it
    # never advertised: only fast-registration MRs can be invalidated (a user MR could
    # never be made valid again), so RDMAP cannot invalidate.
    ("send_inv_user_mr", lambda k: send_inv(k["wkey"], b"\xEE" * 16), (0, 1, 0x09),
     HDR_M | HDR_D),
    ("send_inv_user_mr_not_advertised", lambda k: send_inv(k["lkey"], b"\xEE" * 16),
     (0, 1, 0x09), HDR_M | HDR_D),
    # Send with Invalidate of an STag nobody registered: RDMAP invalid STag.
    ("send_inv_unknown_stag", lambda k: send_inv(0xABCDE00 | (k["wkey"] & 0xFF), b"\xEE"),
     (0, 1, 0x00), HDR_M | HDR_D),
    # A Read Request without the right (the write MR grants no remote read).
    ("read_request_without_the_right", lambda k: read_request(k["wkey"], k["addr"], 16),
     (0, 1, 0x02), HDR_M | HDR_D | HDR_R),
    # A Read Request whose source TO + size wraps 64 bits.
    ("read_request_to_wraps", lambda k: read_request(k["rkey"], (1 << 64) - 8, 16),
     (0, 1, 0x04), HDR_M | HDR_D | HDR_R),
    # Untagged buffer model (RFC 5041 §7.1 checks 4-7, §7.2): a queue that does not
    # exist, an MSN beyond the posted receive, an MO the message has not reached, and a
    # Send longer than the 64-octet receive.
    ("send_invalid_qn", lambda k: untagged(3, 7, 1, 0, b"\xEE" * 16), (1, 2, 0x01),
     HDR_M | HDR_D),
    ("send_msn_out_of_window", lambda k: untagged(3, 0, 5, 0, b"\xEE" * 16), (1, 2, 0x03),
     HDR_M | HDR_D),
    ("send_mo_not_reached", lambda k: untagged(3, 0, 1, 8, b"\xEE" * 16), (1, 2, 0x04),
     HDR_M | HDR_D),
    ("send_longer_than_the_receive", lambda k: send(b"\xEE" * 65), (1, 2, 0x05),
     HDR_M | HDR_D),
    # Versions (RFC 5041 §7.2, RFC 5040 §7.2): DDP version 2, tagged and untagged; RDMAP
    # version 2.
    ("write_ddp_version_2", lambda k: tagged(0, k["wkey"], k["addr"], b"\xEE" * 16, dv=2),
     (1, 1, 0x04), HDR_M | HDR_D),
    ("send_ddp_version_2", lambda k: untagged(3, 0, 1, 0, b"\xEE" * 16, dv=2),
     (1, 2, 0x06), HDR_M | HDR_D),
    ("write_rdmap_version_2", lambda k: tagged(0, k["wkey"], k["addr"], b"\xEE" * 16, rv=2),
     (0, 2, 0x05), HDR_M | HDR_D),
    # Opcodes (RFC 5040 §7.2 unexpected opcode): unassigned (0xC), RFC 7306 Immediate
    # Data not negotiated, a Write on an untagged buffer, a Send on a tagged one.
    ("opcode_unassigned", lambda k: untagged(0xC, 0, 1, 0, b"\xEE" * 8), (0, 2, 0x06),
     HDR_M | HDR_D),
    ("immediate_data_not_negotiated", lambda k: untagged(8, 0, 1, 0, b"\xEE" * 8),
     (0, 2, 0x06), HDR_M | HDR_D),
    ("write_untagged", lambda k: untagged(0, 0, 1, 0, b"\xEE" * 16), (0, 2, 0x06),
     HDR_M | HDR_D),
    ("send_tagged", lambda k: tagged(3, k["wkey"], k["addr"], b"\xEE" * 16), (0, 2, 0x06),
     HDR_M | HDR_D),
    # ULPDU_Length shorter than the tagged header (6 of 14 octets): no RFC code; rsiw
    # reports an unspecified remote operation error (siw: 2/0/03), without the DDP
    # header, which it does not have whole (RFC 5040 Figure 10: "if possible").
    ("ulpdu_shorter_than_the_header", lambda k: fpdu(bytes([0xC1, 0x40, 0, 0, 0, 1])),
     (0, 2, 0xFF), 0),
]


@pytest.mark.parametrize("role", ROLES)
def test_wellformed_write_and_send_are_placed(target, peer, role):
    """The control, with rsiw as Responder and as Initiator: a Write inside the MR and a
    Send are placed and completed, and rsiw sends nothing back (no TERMINATE) before it
    closes after the peer's FIN."""
    report = target(1, role=role)
    s, keys = open_conn(role, report, peer)
    s.sendall(write(keys["wkey"], keys["addr"] + 100, bytes(range(1, 17))) + send(b"done"))
    s.shutdown(socket.SHUT_WR)
    back = recv_all(s)
    s.close()
    r = report()
    assert back == b"", f"rsiw answered a well-formed stream with {back.hex()}"
    assert (r["status"], r["len"], r["recv"]) == (IBV_WC_SUCCESS, 4, b"done".hex()), r
    assert r["changes"] == [[PAGE + 100, bytes(range(1, 17)).hex()]], r
    assert r["events"] == [], r


def expected_event(layer, etype, ecode):
    """The asynchronous event the consumer gets when rsiw sent this TERMINATE: RDMAP
    remote protection (0/1/*) and DDP tagged buffer errors other than the DDP version
    (1/1/0..3) are access errors, everything else fatal."""
    if (layer, etype) == (0, 1) or ((layer, etype) == (1, 1) and ecode <= 3):
        return IBV_EVENT_QP_ACCESS_ERR
    return IBV_EVENT_QP_FATAL


def verdict(name, data, r, want, flags, read=False, recv=True):
    """What is wrong with one hostile case: `data` is what rsiw sent before it closed, `r`
    the target's report. Wanted: one TERMINATE of `want` (layer, etype, ecode) with header
    flags `flags`, the receive (if `recv`: one was posted) and the Read (if `read`)
    flushed, one asynchronous event for that TERMINATE, and no octet changed in the region
    or the other PD's page."""
    try:
        layer, etype, ecode, hdr = terminate_of(data)
    except AssertionError as e:
        return [f"{name}: {e}"]
    errs = []
    if (layer, etype, ecode, hdr) != (*want, flags):
        errs.append(f"{name}: TERMINATE {layer}/{etype}/{ecode:#04x} flags {hdr:#04x}, want "
                    f"{want[0]}/{want[1]}/{want[2]:#04x} flags {flags:#04x}")
    want_flushed = (IBV_WC_WR_FLUSH_ERR if read else None,
                    IBV_WC_WR_FLUSH_ERR if recv else None)
    if (r["read_status"], r["status"]) != want_flushed:
        errs.append(f"{name}: Read completed with {r['read_status']}, receive with "
                    f"{r['status']}; want them flushed")
    if r["changes"] or r["foreign"]:
        errs.append(f"{name}: memory changed: {r['changes']} {r['foreign']}")
    if r["events"] != [expected_event(*want)]:
        errs.append(f"{name}: asynchronous events {r['events']}, want "
                    f"[{expected_event(*want)}]")
    return errs


@pytest.mark.parametrize("role", ROLES)
def test_hostile_fpdus_are_terminated_and_place_nothing(target, peer, role):
    """Each forbidden FPDU, on a connection of its own, with rsiw as Responder and as
    Initiator: one TERMINATE with the RFC's layer/etype/ecode and header flags, then the
    connection closes, the consumer's receive is flushed, the QP reports one asynchronous
    event (QP_ACCESS_ERR for a protection error, QP_FATAL otherwise), and no octet of the
    three pages around the MR or of the other PD's page changed."""
    report = target(len(CASES), role=role)
    errs = []
    for name, build, want, flags in CASES:
        s, keys = open_conn(role, report, peer)
        s.sendall(build(keys))
        try:
            data = recv_all(s)
        finally:
            s.close()
        errs += verdict(name, data, report(), want, flags)
    assert not errs, "\n".join(errs)


@pytest.mark.parametrize("role", ROLES)
def test_crc_errors_terminate_and_deliver_nothing(target, peer, role):
    """With CRC negotiated (the peer asks, C=1, RFC 5044 §7.1), rsiw as Responder and as
    Initiator: a Write with a good CRC
    is placed (the control); a Send whose CRC is wrong is not delivered (its receive is
    flushed), and a Write outside the MR whose CRC is wrong is not placed: one TERMINATE,
    LLP MPA CRC error (2/0/0x02) without headers (RFC 5040 Figure 10) — the CRC error
    wins over the DDP error of the same FPDU — then the connection closes."""
    cases = [
        ("crc_bad_send", lambda k: with_crc(send(b"\xEE" * 16), corrupt=True)),
        ("crc_bad_write_before_the_start",
         lambda k: with_crc(write(k["wkey"], k["addr"] - 8, b"\xEE" * 16), corrupt=True)),
    ]
    report = target(1 + len(cases), role=role)
    s, keys = open_conn(role, report, peer, crc=True)
    good = bytes(range(1, 17))
    s.sendall(with_crc(write(keys["wkey"], keys["addr"] + 100, good)) + with_crc(send(b"done")))
    s.shutdown(socket.SHUT_WR)
    back = recv_all(s)
    s.close()
    r = report()
    assert back == b"", f"rsiw answered well-formed FPDUs with CRC with {back.hex()}"
    assert (r["status"], r["recv"]) == (IBV_WC_SUCCESS, b"done".hex()), r
    assert r["changes"] == [[PAGE + 100, good.hex()]], r
    errs = []
    for name, build in cases:
        s, keys = open_conn(role, report, peer, crc=True)
        s.sendall(build(keys))
        try:
            data = recv_all(s)
        finally:
            s.close()
        errs += verdict(name, data, report(), (2, 0, 0x02), 0)
    assert not errs, "\n".join(errs)
    c = port_counters(DEV)
    assert (c["crc_errors"], c["terminate_sent_mpa"], c["terminate_sent"]) == (2, 2, 2), c


@pytest.mark.parametrize("role", ROLES)
def test_send_without_a_posted_receive(target, peer, role):
    """A Send to a QP that posted no receive (RFC 5041 §7.1 check 6, §7.2), rsiw as
    Responder and as Initiator: one TERMINATE, DDP untagged buffer, invalid MSN - no
    buffer (1/2/0x02), then the connection closes and the QP reports QP_FATAL."""
    report = target(1, "norecv", role=role)
    mark = dmesg_mark()
    s, keys = open_conn(role, report, peer)
    s.sendall(send(b"\xEE" * 16))
    try:
        data = recv_all(s)
    finally:
        s.close()
    errs = verdict("send_without_receive", data, report(), (1, 2, 0x02), HDR_M | HDR_D,
                   recv=False)
    assert not errs, "\n".join(errs)
    # The troubleshooting section's message for this case.
    log = dmesg_since(mark)
    assert any("sending TERMINATE" in l and "invalid MSN, no buffer available" in l
               for l in log), "\n".join(log)


@pytest.mark.parametrize("role", ROLES)
def test_terminate_mid_message_closes_without_an_answer(target, peer, role):
    """The peer sends the first segment of a Send (L=0) and then a TERMINATE (RFC 5040
    §5.3, §7.1), rsiw as Responder and as Initiator: rsiw answers nothing (a TERMINATE is
    never answered with one), closes, flushes the receive, reports QP_FATAL once, and
    placed nothing in the region."""
    report = target(1, role=role)
    s, keys = open_conn(role, report, peer)
    s.sendall(untagged(3, 0, 1, 0, b"\xEE" * 16, last=False) + terminate(0, 0, 0))
    try:
        data = recv_all(s)
    finally:
        s.close()
    r = report()
    assert data == b"", f"rsiw answered the peer's TERMINATE with {data.hex()}"
    assert r["status"] == IBV_WC_WR_FLUSH_ERR, r
    assert (r["changes"], r["foreign"]) == ([], []), r
    assert r["events"] == [IBV_EVENT_QP_FATAL], r


def test_terminates_are_logged_in_words(target, peer):
    """A TERMINATE rsiw sends and one it receives are each logged with the device, the QP
    and the peer's address and port ("rsiw0 qp 3 10.91.0.1:41234: ...") and the cause in
    words: layer, Error Type and Error Code with their meanings and the RFC section, as
    Documentation/rsiw.rst's troubleshooting section lists them; no Rust Debug dump."""
    report = target(2)
    mark = dmesg_mark()
    lines = []
    for build in (lambda k: write(0xABCDE00 | (k["wkey"] & 0xFF), k["addr"], b"\xEE" * 16),
                  lambda k: terminate(0, 2, 0x06)):
        s, keys = open_conn("listen", report, peer)
        who = "%s:%d" % s.getsockname()[:2]
        s.sendall(build(keys))
        try:
            recv_all(s)
        finally:
            s.close()
        report()
        lines.append(rf"{DEV} qp \d+ {re.escape(who)}: ")
    want = [
        lines[0] + re.escape("sending TERMINATE: layer 1 (DDP), type 1 (tagged buffer error), "
                             "code 0x00 (invalid STag), RFC 5041 §7.2"),
        lines[1] + re.escape("the peer sent TERMINATE: layer 0 (RDMAP), type 2 (remote "
                             "operation error), code 0x06 (unexpected opcode), RFC 5040 §7"),
    ]
    log = []

    def logged():
        log[:] = [line for line in dmesg_since(mark) if "rsiw" in line]
        return all(any(re.search(w, line) for line in log) for w in want)

    try:
        wait_for(logged, timeout=30, what="the TERMINATE messages")
    except AssertionError:
        raise AssertionError("want lines matching:\n" + "\n".join(want) + "\nkernel log:\n"
                             + "\n".join(log)) from None
    assert not [line for line in log if "Some(" in line or "TermCause {" in line], log
    c = port_counters(DEV)
    assert (c["terminate_sent"], c["terminate_sent_ddp"], c["terminate_received"],
            c["terminate_received_rdmap"], c["incoming_connections"]) == (1, 1, 1, 1, 2), c


@pytest.mark.parametrize("role", ROLES)
def test_read_requests_beyond_ird(target, peer, role):
    """The target granted IRD 1 (as Responder and as Initiator). The peer sends eight Read
    Requests at once, without waiting for a Response: rsiw answers at most the ones within
    IRD and then sends one TERMINATE, DDP invalid MSN (the MSN of QN 1 is past the buffers
    IRD provides, RFC 5041 §7.1 check 5, RFC 5040 §6.5), closes, and changes nothing."""
    report = target(1, role=role)
    s, keys = open_conn(role, report, peer)
    s.sendall(write(0, 0, b"") + b"".join(read_request(keys["rkey"], keys["addr"], 16, msn=m)
                                          for m in range(1, 9)))
    try:
        data = recv_all(s)
    finally:
        s.close()
    r = report()
    frames = fpdus(data)
    ops = [op for op, _ in frames]
    assert ops and ops[-1] == 7 and set(ops[:-1]) <= {2}, f"FPDUs sent: {ops}"
    # The Responses are for Reads within IRD (1): one Read of 16 octets, one segment.
    assert len(ops) - 1 <= 1, f"{len(ops) - 1} Read Responses for IRD 1"
    term = frames[-1][1]
    got = (term[20] >> 4, term[20] & 0x0F, term[21], term[22] & 0xE0)
    assert got == (1, 2, 0x03, HDR_M | HDR_D), f"TERMINATE {got}: {term.hex()}"
    assert r["status"] == IBV_WC_WR_FLUSH_ERR, r
    assert (r["changes"], r["foreign"]) == ([], []), r
    assert r["events"] == [IBV_EVENT_QP_FATAL], r


# (name, the Initiator's bytes, whether it closes its side after them): MPA Requests
# RFC 5044 §7.1 / RFC 6581 §9 call improperly formatted.
BAD_REQUESTS = [
    ("bad_key", mpa_frame(key=b"MPA ID Req Fram\x00"), False),
    ("reply_key", mpa_frame(key=b"MPA ID Rep Frame"), False),
    ("rev_3", mpa_frame(rev=3), False),
    ("rev_255", mpa_frame(rev=255), False),
    ("pd_length_513", mpa_frame(pd=struct.pack(">HH", 1, 1) + bytes(509)), False),
    ("pd_length_65535", mpa_frame(pd_len=0xFFFF, pd=bytes(64)), True),
    ("pd_shorter_than_the_ird_ord_block", mpa_frame(pd=b"\x00\x01"), False),
    ("truncated_header", mpa_frame()[:11], True),
    ("truncated_private_data", mpa_frame(pd_len=100, pd=bytes(10)), True),
]


def bad_requests_errors(addr, port):
    """Sends each of BAD_REQUESTS on a TCP connection of its own to rsiw's listener on
    `addr`:`port`; returns what went wrong: rsiw must close each (an MPA Reply, if any,
    rejecting: R=1) within T_IO seconds."""
    errs = []
    for name, frame, fin in BAD_REQUESTS:
        s = socket.create_connection((addr, port), timeout=T_IO)
        try:
            try:
                s.sendall(frame)
                if fin:
                    s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # rsiw closed (with a reset: octets it did not read) before us
            data = recv_all(s)
        except AssertionError as e:
            errs.append(f"{name}: {e}")
            continue
        finally:
            s.close()
        if data and not (data[:16] == b"MPA ID Rep Frame" and len(data) >= 20
                         and data[16] & 0x20):
            errs.append(f"{name}: rsiw answered with {data.hex()}, not a rejecting Reply")
    return errs


def test_bad_mpa_requests_are_closed_and_reach_no_consumer(target):
    """Each malformed MPA Request on a TCP connection of its own: rsiw closes it (an
    MPA Reply, if any, rejects: R=1), and the consumer listening never sees it. Then a
    well-formed connection is the first the consumer gets, and its Send arrives."""
    report = target(1)
    errs = bad_requests_errors(ADDR, PORT)
    s, keys = connect(report)
    s.sendall(send(b"good"))
    s.shutdown(socket.SHUT_WR)
    recv_all(s)
    s.close()
    r = report()
    assert (r["status"], r["recv"]) == (IBV_WC_SUCCESS, b"good".hex()), r
    assert not errs, "\n".join(errs)


READ_LEN = 64
READ_STAG = 0x1234
READ_DATA = bytes(range(0x80, 0x80 + READ_LEN))
# The Read Request rsiw sends: ULPDU_Length 46 (untagged DDP header and the 28-octet
# RDMAP Read Request header), no pad, CRC field.
READ_REQUEST_FPDU = 2 + 46 + 4


def take_read_request(s):
    """Sends a zero-length Write first (the first FPDU of an RFC 5044 §7 Initiator; rsiw
    as Responder does not wait for it outside the peer-to-peer model), then reads the
    target's Read Request; returns its (sink STag, sink TO, size) after checking its
    source."""
    s.sendall(write(0, 0, b""))
    req = recv_exact(s, READ_REQUEST_FPDU)
    assert req[2:4] == b"\x41\x41", f"not a Read Request: {req.hex()}"
    qn, msn, mo = struct.unpack(">III", req[8:20])
    sink_stag, sink_to, size, src_stag, src_to = struct.unpack(">IQIIQ", req[20:48])
    assert (qn, msn, mo, size, src_stag, src_to) == (1, 1, 0, READ_LEN, READ_STAG, 0), req.hex()
    return sink_stag, sink_to, size


@pytest.mark.parametrize("role", ROLES)
def test_read_response_completes_the_read(target, peer, role):
    """The control, with rsiw as Responder and as Initiator: the Response the Read asked
    for, in two segments, lands in the sink and completes the Read with its size; a Send
    then completes the receive, and nothing else of the three pages changed."""
    report = target(1, "read", role=role)
    s, keys = open_conn(role, report, peer)
    stag, to, size = take_read_request(s)
    half = size // 2
    s.sendall(read_response(stag, to, READ_DATA[:half], last=False)
              + read_response(stag, to + half, READ_DATA[half:]) + send(b"done"))
    s.shutdown(socket.SHUT_WR)
    back = recv_all(s)
    s.close()
    r = report()
    assert back == b"", f"rsiw answered a well-formed Response with {back.hex()}"
    assert (r["read_status"], r["read_len"]) == (IBV_WC_SUCCESS, READ_LEN), r
    assert (r["status"], r["recv"]) == (IBV_WC_SUCCESS, b"done".hex()), r
    assert r["changes"] == [[PAGE, READ_DATA.hex()]], r


# (name, the bad Response for the Read's sink STag, TO and size, TERMINATE): every one is
# refused before an octet is placed, a DDP tagged buffer error (RFC 5041 §7.2, as siw).
READ_CASES = [
    # Into the write MR, which grants remote write, at the sink's TO.
    ("read_response_other_stag", lambda k, st, to, n: read_response(k["wkey"], to, READ_DATA),
     (1, 1, 0x00)),
    ("read_response_other_to", lambda k, st, to, n: read_response(st, to + 8, READ_DATA),
     (1, 1, 0x01)),
    ("read_response_too_long",
     lambda k, st, to, n: read_response(st, to, READ_DATA + b"\xEE" * 8), (1, 1, 0x01)),
    ("read_response_too_short", lambda k, st, to, n: read_response(st, to, READ_DATA[:56]),
     (1, 1, 0x01)),
    ("read_response_empty_last", lambda k, st, to, n: read_response(st, to, b""),
     (1, 1, 0x01)),
]


@pytest.mark.parametrize("role", ROLES)
def test_bad_read_responses_are_refused_before_placement(target, peer, role):
    """Each bad Response to the target's outstanding Read, on a connection of its own,
    with rsiw as Responder and as Initiator: one TERMINATE with the DDP tagged buffer
    error, the Read and the receive flushed, one QP_ACCESS_ERR event, and no octet of the
    three pages changed."""
    report = target(len(READ_CASES), "read", role=role)
    errs = []
    for name, build, want in READ_CASES:
        s, keys = open_conn(role, report, peer)
        try:
            stag, to, size = take_read_request(s)
            s.sendall(build(keys, stag, to, size))
            data = recv_all(s)
        finally:
            s.close()
        errs += verdict(name, data, report(), want, HDR_M | HDR_D, read=True)
    assert not errs, "\n".join(errs)


def wait_queued(s, what):
    """Waits up to T_IO seconds until at least 2048 octets from rsiw stand unread in the
    receive queue of socket `s` (FIONREAD): with a small receive buffer, its window is
    then closed."""
    queued, deadline = 0, T_IO
    while deadline > 0:
        queued = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        if queued >= 2048:
            return
        select.select([], [], [], 0.1)
        deadline -= 0.1
    raise AssertionError(f"{what} did not reach the peer ({queued} octets queued)")


def connect_small_window(report, mss=None):
    """Connects to the target (Responder) from a socket whose receive buffer is 4096
    octets, fixed, so that the window closes after a few pages the peer leaves unread, and
    completes MPA startup; returns (socket, the target's first line). With `mss`, the
    socket advertises that MSS (octets), so that rsiw's FPDUs fit segments of that size
    (over `lo` they would otherwise be 64 KiB)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if mss:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    s.settimeout(T_IO)
    s.connect((ADDR, PORT))
    s.sendall(mpa_request())
    first = report()
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame", rep.hex()
    recv_exact(s, int.from_bytes(rep[18:20], "big"))
    return s, first


def test_terminate_does_not_wait_for_a_peer_that_stops_reading(target):
    """The peer lets the target's 4 MiB of Sends fill its receive window and rsiw's send
    buffer, then sends a Write without the right and reads nothing: the target's receive
    is flushed and QP_ACCESS_ERR reported while the peer still reads nothing, and once
    the peer reads, rsiw has closed the connection (TERMINATE best-effort)."""
    report = target(1, "flood")
    s, keys = connect_small_window(report)
    # rsiw's Sends stand in the peer's receive queue, which it then leaves unread.
    wait_queued(s, "rsiw's Sends")
    s.sendall(write(keys["rkey"], keys["addr"] + 64, b"\xEE" * 16))
    r = report(timeout=T_IO)
    assert r["status"] == IBV_WC_WR_FLUSH_ERR, r
    # Sends still in the SQ (if TCP did not take them all) are flushed too: SQ_DRAINED
    # then follows the error's event.
    assert r["events"] in ([IBV_EVENT_QP_ACCESS_ERR],
                           [IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_SQ_DRAINED]), r
    assert r["changes"] == [], r
    # Now read: rsiw closes within its deadline (mpa_timeout_ms, 10 s by default).
    recv_all(s)
    s.close()


# hostile_target.py's `wipe`: the Sends' octets, and what it writes over them at the
# first flush completion.
FLOOD_FILL, WIPED = 0x33, 0xC5


def test_no_octet_of_a_flushed_send_is_read_after_its_completion(target):
    """The TERMINATE becomes due while an FPDU of the target's Sends is queued in part (the
    peer's window shut, then a Write without the right): the Send it belongs to is flushed
    at once, and the target overwrites the Sends' buffer at that completion (as a kernel
    consumer frees it). The peer then reads again: what rsiw sends after that is the rest of
    the FPDU as it was built, then the TERMINATE (RFC 5040 §7.1). No octet the target wrote
    after the flush may reach the peer (Documentation/rsiw.rst, *Security*), and the stream
    must stay whole FPDUs, ending in the TERMINATE. The FPDUs fit a 1400-octet MSS: their
    payload goes to TCP from the Sends' buffer (a large FPDU's would go through rsiw's
    copy pages)."""
    report = target(1, "wipe")
    s, keys = connect_small_window(report, mss=1400)
    wait_queued(s, "rsiw's Sends")
    s.sendall(write(keys["rkey"], keys["addr"] + 64, b"\xEE" * 16))
    r = report(timeout=T_IO)
    assert r["status"] == IBV_WC_WR_FLUSH_ERR, r
    # Some Sends did not fit into TCP: the QP's failure flushed them (the first flush is
    # the Send in progress).
    assert IBV_WC_WR_FLUSH_ERR in r["sends"], r
    data = recv_all(s)
    s.close()
    print(f"{len(data)} octets after MPA startup; Sends flushed: "
          f"{r['sends'].count(IBV_WC_WR_FLUSH_ERR)} of {len(r['sends'])}")
    wiped = data.find(bytes([WIPED]) * 8)
    assert wiped < 0, (f"octets written after the flush completion reached the peer, at "
                       f"{wiped} of {len(data)}: {data[max(0, wiped - 32):wiped + 32].hex()}")
    frames = fpdus(data)
    assert frames and frames[-1][0] == 7, \
        f"the stream does not end in a TERMINATE: {[op for op, _ in frames[-4:]]}"
    assert terminate_of(frames[-1][1])[:3] == (1, 1, 0x00), frames[-1][1].hex()
    assert any(bytes([FLOOD_FILL]) * 64 in f for _, f in frames[:-1]), "no Send reached the peer"


def test_sqe_on_the_wire_frees_its_slot_and_flushes_first(target):
    """A send WQE leaves the SQ when its message starts, as in the C siw: while an RDMA
    Write waits for a peer that stops reading, the SQ takes as many new WQEs as it has
    slots (libsiw rings the doorbell only for a WQE posted behind a free slot). When the
    consumer then moves the QP to ERROR, the Write, held by the connection, is flushed
    before the WQEs behind it: completions keep posting order."""
    report = target(1, "sqorder")
    s, first = connect_small_window(report)
    depth = first["depth"]
    wait_queued(s, "rsiw's RDMA Write")
    r = report(timeout=T_IO)
    assert r["sends"] == depth, f"the SQ took {r['sends']} WQEs of {depth} behind the Write"
    want = [[0, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_WRITE]]
    want += [[i, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND] for i in range(1, depth + 1)]
    assert r["wcs"] == want, r
    s.close()


IBV_WC_LOC_LEN_ERR = 1
IBV_WC_LOC_QP_OP_ERR = 2
IBV_QPS_ERR = 6
IBV_EVENT_QP_REQ_ERR = 2


def test_send_longer_than_a_message_fails_locally(target):
    """A user send WQE whose SGEs sum beyond the longest message (the port's max_msg_sz,
    4 GiB - 1 octets: two SGEs of 2 GiB over a 64-octet MR, which libsiw writes into the
    SQ unchecked) completes with a local length error, the QP enters ERROR, and nothing
    of it reaches the peer: the SQE is refused when it is read from the ring, before any
    of its memory is resolved. The consumer gets one QP_REQ_ERR event. A QP failed by a
    local error serves the peer no more: rsiw sends a TERMINATE (RDMAP local catastrophic
    error, RFC 5040 §7.2) and closes, and a Write and a Read Request the peer sends after
    the failure place nothing and get no Read Response."""
    report = target(1, "longsge")
    s = socket.create_connection((ADDR, PORT), timeout=T_IO)
    s.sendall(mpa_request())
    keys = report()
    assert keys["depth"] == 8, keys
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame", rep.hex()
    recv_exact(s, int.from_bytes(rep[18:20], "big"))
    r = report(timeout=T_IO)
    assert r == {"wcs": [[7, IBV_WC_LOC_LEN_ERR, IBV_WC_SEND]], "state": IBV_QPS_ERR,
                 "events": [IBV_EVENT_QP_REQ_ERR]}, r
    try:
        s.sendall(write(keys["wkey"], keys["addr"] + 64, b"\xEE" * 16)
                  + read_request(keys["rkey"], keys["addr"], 64))
    except OSError:
        pass  # rsiw may have closed already
    # The TERMINATE (under 100 octets), then the close; none of the Send's FPDUs, of up
    # to MULPDU octets each, and no Read Response.
    s.settimeout(T_IO)
    got = recv_all(s)
    s.close()
    assert len(got) < 100, f"rsiw sent {len(got)} octets after the refused WQE: {got[:64].hex()}"
    assert terminate_of(got)[:3] == (0, 0, 0x00), got.hex()
    report.tell("check")
    assert report(timeout=T_IO) == {"changes": []}


IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ = 1, 2, 4


@pytest.mark.parametrize("op", ["write", "read_request"])
def test_qp_access_flags_narrowed_refuse_the_peer(target, op):
    """The QP's access flags limit what its MRs grant. A QP connected through the RDMA
    CM has REMOTE_WRITE | REMOTE_READ (as iw_cm gives every iWARP QP; this one was in INIT
    with LOCAL_WRITE only), and the peer's first Write lands. Once the consumer narrows
    the flags to LOCAL_WRITE (`modify_qp` in RTS), the peer's next Write into the same MR
    gets a TERMINATE with DDP invalid STag (1/1/0x00, RFC 5041 §7.1: no placement
    allowed; DDP has no access-rights code) and its Read Request one with RDMAP access
    rights (0/1/0x02, RFC 5040 §7.2); nothing is placed, no Read Response is sent, and the
    connection closes with the QP in ERROR."""
    report = target(1, "narrow")
    s = socket.create_connection((ADDR, PORT), timeout=T_IO)
    s.sendall(mpa_request())
    keys = report()
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame", rep.hex()
    recv_exact(s, int.from_bytes(rep[18:20], "big"))
    s.sendall(write(keys["wkey"], keys["addr"], b"\x11" * 16))
    report.tell("written")
    r = report(timeout=T_IO)
    granted = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
    assert r["access"] == [granted, IBV_ACCESS_LOCAL_WRITE], r
    first = [[PAGE, "11" * 16]]
    assert r["changes"] == first, r
    refused, cause = {
        "write": (write(keys["wkey"], keys["addr"] + 64, b"\xEE" * 16), (1, 1, 0x00)),
        "read_request": (read_request(keys["rkey"], keys["addr"], 64), (0, 1, 0x02)),
    }[op]
    s.sendall(refused)
    s.settimeout(T_IO)
    got = recv_all(s)
    s.close()
    # The TERMINATE alone (under 100 octets): no Read Response of 64 octets.
    assert len(got) < 100, f"rsiw sent {len(got)} octets: {got[:64].hex()}"
    assert terminate_of(got)[:3] == cause, got.hex()
    report.tell("check")
    assert report(timeout=T_IO) == {"changes": first, "state": IBV_QPS_ERR}


def test_no_octet_of_a_send_lands_after_its_receive_mr_was_deregistered(target):
    """A receive buffer whose MR is deregistered while a Send is being placed into it (the
    consumer's own doing, but the memory is the process's again once `ibv_dereg_mr`
    returned, as a kernel consumer's fast-registration MR is once its invalidation
    returned): the segments after the deregistration place nothing. Each segment's
    receive SGE is checked again under the guard deregistration waits for, so the next
    segment fails its check: rsiw sends a TERMINATE (DDP local catastrophic, 1/0/0) and
    closes, and the receive completes with a flush error."""
    report = target(1, "recvback")
    s = socket.create_connection((ADDR, PORT), timeout=T_IO)
    s.sendall(mpa_request())
    assert report() == {"recv": 2 * PAGE}
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame", rep.hex()
    recv_exact(s, int.from_bytes(rep[18:20], "big"))
    s.sendall(untagged(3, 0, 1, 0, b"\x11" * 1024, last=False))  # Send, not last
    report.tell("sent")
    r = report(timeout=T_IO)
    assert r == {"dereg": True, "first": "11" * 16}, r
    try:
        s.sendall(untagged(3, 0, 1, 1024, b"\x22" * 1024, last=True))
    except OSError:
        pass
    s.settimeout(T_IO)
    got = recv_all(s)
    s.close()
    assert terminate_of(got)[:3] == (1, 0, 0x00), got.hex()
    report.tell("check")
    assert report(timeout=T_IO) == {"changes": [], "status": IBV_WC_WR_FLUSH_ERR}


@pytest.mark.parametrize("role", ROLES)
def test_read_with_ord_0_fails_locally(target, peer, role):
    """An RDMA Read posted on a connection whose ORD is 0 (rdma_cm's initiator depth 0,
    sent as ORD 0 in the RFC 6581 IRD/ORD block of rsiw's MPA frame), with rsiw as
    Responder and as Initiator: the Read completes with LOC_QP_OP_ERR, the QP enters
    ERROR (the receive is flushed) without an asynchronous event, no octet of the region
    changes, and no Read Request reaches the peer."""
    report = target(1, "read0", role=role)
    s, _ = open_conn(role, report, peer, ird_ord=bytes.fromhex("00010000"))  # IRD 1, ORD 0
    r = report(timeout=T_IO)
    data = recv_all(s)
    s.close()
    assert (r["read_status"], r["status"]) == (IBV_WC_LOC_QP_OP_ERR, IBV_WC_WR_FLUSH_ERR), r
    assert (r["changes"], r["foreign"], r["events"]) == ([], [], []), r
    ops = [op for op, _ in fpdus(data)]
    assert all(op == 7 for op in ops), f"rsiw sent RDMAP opcodes {ops}: {data.hex()}"


def with_markers(frames, bad_at=None):
    """The FPDUs `frames` (as fpdu() builds them) as they go on a stream with markers (RFC
    5044 §4.3), starting at the first octet of Full Operation: a marker at every 512th
    octet of the stream, its FPDUPTR the octets from the ULPDU_Length field of the FPDU
    it is in to the marker, 0 for a marker that leads an FPDU. The marker at stream
    offset `bad_at` points 4 octets too far."""
    out = b""
    for f in frames:
        length_at = None
        i = 0
        while i < len(f):
            if len(out) % 512 == 0:
                ptr = 0 if length_at is None else len(out) - length_at
                out += struct.pack(">HH", 0, ptr + (4 if len(out) == bad_at else 0))
            if length_at is None:
                length_at = len(out)
            n = min(len(f) - i, 512 - len(out) % 512)
            out += f[i:i + n]
            i += n
    return out


@pytest.fixture
def markers_asked():
    """rsiw loaded with mpa_markers=1 (it asks the peer for markers: M=1 in its Reply or
    Request); to be named before `target`, whose `rsiw` then finds it loaded."""
    unload_rsiw()
    load_rsiw("mpa_markers=1")
    yield
    unload_rsiw()


def open_marker_conn(role, report, ls):
    """A connection to the target in `role` with rsiw asking for markers (M=1) and the
    peer not (M=0): the peer's FPDUs carry markers, rsiw's do not. Returns (socket, the
    target's keys)."""
    if role == "listen":
        s = socket.create_connection((ADDR, PORT), timeout=T_IO)
        s.sendall(mpa_request())
        keys = report()
        rep = recv_exact(s, 20)
        assert rep[:16] == b"MPA ID Rep Frame" and rep[16] & 0xA0 == 0x80, rep.hex()
        recv_exact(s, int.from_bytes(rep[18:20], "big"))
        return s, keys
    keys = report()
    s, _ = ls.accept()
    s.settimeout(T_IO)
    req = recv_exact(s, 20)
    assert req[:16] == b"MPA ID Req Frame" and req[16] & 0x80, req.hex()
    recv_exact(s, int.from_bytes(req[18:20], "big"))
    s.sendall(mpa_reply())
    return s, keys


@pytest.mark.parametrize("role", ROLES)
def test_wrong_marker_pointers_terminate(markers_asked, target, peer, role):
    """rsiw asks for markers (RFC 5044 §4.3), as Responder and as Initiator. The control:
    a 1000-octet Write (a marker inside it) and a Send, markers right, are placed and
    completed. A marker leading a Send that points 4 octets off, and a marker inside the
    Write that does: one TERMINATE, LLP marker and ULPDU pointer mismatch (2/0/0x03)
    without headers, then the connection closes, the receive is flushed and QP_FATAL
    reported. Without CRC placement is cut through, so the Write's octets before its bad
    marker may have been placed, inside the MR that granted them; nothing else changed."""
    report = target(3, role=role)
    data = b"\x11" * 1000
    s, keys = open_marker_conn(role, report, peer)
    s.sendall(with_markers([write(keys["wkey"], keys["addr"] + 100, data), send(b"done")]))
    s.shutdown(socket.SHUT_WR)
    back = recv_all(s)
    s.close()
    r = report()
    assert back == b"", f"rsiw answered FPDUs with good markers with {back.hex()}"
    assert (r["status"], r["recv"]) == (IBV_WC_SUCCESS, b"done".hex()), r
    assert r["changes"] == [[PAGE + 100, data.hex()]], r

    errs = []
    s, keys = open_marker_conn(role, report, peer)
    s.sendall(with_markers([send(b"\xEE" * 16)], bad_at=0))
    try:
        back = recv_all(s)
    finally:
        s.close()
    errs += verdict("marker_leading_wrong", back, report(), (2, 0, 0x03), 0)

    s, keys = open_marker_conn(role, report, peer)
    s.sendall(with_markers([write(keys["wkey"], keys["addr"] + 100, data)], bad_at=512))
    try:
        back = recv_all(s)
    finally:
        s.close()
    r = report()
    placed = [c for c in r["changes"]
              if not (PAGE + 100 <= c[0] and c[0] + len(c[1]) // 2 <= PAGE + 1100
                      and set(bytes.fromhex(c[1])) == {0x11})]
    errs += verdict("marker_inside_wrong", back, dict(r, changes=placed), (2, 0, 0x03), 0)
    assert not errs, "\n".join(errs)


def test_mismatched_rtr_is_taken_as_it_comes(target):
    """The peer asks for the peer-to-peer model with a zero-length Send RTR only (RFC 6581
    §9.2) and rsiw, as Responder, confirms it; the peer then sends a zero-length Write as
    its RTR, then a Send. RFC 6581 does not say what a Responder does with an RTR of
    another type; rsiw (as siw) takes it as it comes: the Write RTR opens the Responder's
    send gate without consuming a receive, the Send completes the receive, and rsiw
    sends nothing back."""
    report = target(1)
    s = socket.create_connection((ADDR, PORT), timeout=T_IO)
    # PD: A (P2P) | B (zero-length Send RTR) | IRD 1, ORD 1.
    s.sendall(mpa_frame(pd=struct.pack(">HH", 0x8000 | 0x4000 | 1, 1)))
    keys = report()
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame" and not rep[16] & 0x20, rep.hex()
    pd = recv_exact(s, int.from_bytes(rep[18:20], "big"))
    assert pd[0] & 0xC0 == 0xC0, f"Reply does not confirm P2P with a Send RTR: {pd.hex()}"
    s.sendall(write(0, 0, b"") + send(b"done"))
    s.shutdown(socket.SHUT_WR)
    back = recv_all(s)
    s.close()
    r = report()
    assert back == b"", f"rsiw answered the mismatched RTR with {back.hex()}"
    assert (r["status"], r["recv"]) == (IBV_WC_SUCCESS, b"done".hex()), r
    assert (r["changes"], r["foreign"], r["events"]) == ([], [], []), (keys, r)


def reset(s):
    """Closes `s` with a TCP reset (SO_LINGER with a zero timeout) instead of a FIN."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def changes_within(changes, start, data):
    """Failure messages for runs of changed octets that are not a part of `data` placed
    at offset `start` of the target's region."""
    bad = []
    for off, octets in changes:
        got = bytes.fromhex(octets)
        if off < start or off + len(got) > start + len(data) or \
                data[off - start:off - start + len(got)] != got:
            bad.append(f"octets changed at {off}: {octets}")
    return bad


@pytest.mark.parametrize("role", ROLES)
def test_reset_in_the_middle_of_an_fpdu(target, peer, role):
    """The peer sends the first half of a Write FPDU into the write MR and resets the
    connection, with rsiw as Responder and as Initiator: the consumer's receive is
    flushed within T_IO, the QP reports QP_FATAL, and nothing but (a prefix of) that
    Write's own payload, inside the MR, changed."""
    report = target(1, role=role)
    s, keys = open_conn(role, report, peer)
    payload = bytes(range(256)) * 4
    f = write(keys["wkey"], keys["addr"] + 64, payload)
    s.sendall(f[:len(f) // 2])
    reset(s)
    r = report(timeout=T_IO)
    assert (r["status"], r["events"]) == (IBV_WC_WR_FLUSH_ERR, [IBV_EVENT_QP_FATAL]), r
    bad = changes_within(r["changes"], PAGE + 64, payload)
    assert not bad and r["foreign"] == [], (bad, r)


@pytest.mark.parametrize("role", ROLES)
def test_reset_in_the_middle_of_a_read_response(target, peer, role):
    """The peer answers the target's RDMA Read with the first half of the Read Response
    FPDU and resets the connection, with rsiw as Responder and as Initiator: the Read
    completes with an error (never success) and the receive is flushed within T_IO, and
    nothing but a prefix of the Response's payload, in the Read's sink, changed."""
    report = target(1, "read", role=role)
    s, keys = open_conn(role, report, peer)
    stag, to, size = take_read_request(s)
    f = read_response(stag, to, READ_DATA)
    s.sendall(f[:len(f) // 2])
    reset(s)
    r = report(timeout=T_IO)
    assert r["read_status"] not in (None, IBV_WC_SUCCESS), r
    assert r["status"] == IBV_WC_WR_FLUSH_ERR, r
    bad = changes_within(r["changes"], PAGE, READ_DATA)
    assert not bad and r["foreign"] == [], (bad, r)


BIG_LEN = 8 << 20
BIG_PATTERN = bytes(range(251))
"""The size and content of the region hostile_target.py registers for `bigread`."""


def read_responses(data):
    """The payload of the complete Read Response FPDUs that start `data`, checked to be
    Read Responses to a Read of sink STag 0x1234 at TO 0 (read_request()), in order, and
    the complete FPDUs after the first that is not one; an incomplete last FPDU (the
    stream was cut) is left out."""
    payload, to, after, pos = [], 0, [], 0
    view = memoryview(data)
    while len(data) - pos >= 2:
        ulen = int.from_bytes(view[pos:pos + 2], "big")
        total = 2 + ulen + (-(2 + ulen)) % 4 + 4
        if len(data) - pos < total:
            break
        f, pos = view[pos:pos + total], pos + total
        if after or f[3] & 0x0F != 2:
            after.append(bytes(f))
            continue
        stag, fto = struct.unpack(">IQ", f[4:16])
        assert (stag, fto) == (0x1234, to), f"Read Response at STag {stag:#x} TO {fto}, " \
            f"want TO {to}"
        payload.append(f[16:2 + ulen])
        to += ulen - 14
    return b"".join(payload), after


def first_difference(a, b):
    """The first offset at which the octet strings `a` and `b` (of one length) differ, or
    None. (A failed `assert a == b` on megabytes has pytest diff them for minutes.)"""
    if a == b:
        return None
    step = 4096
    i = next(i for i in range(0, len(a), step) if a[i:i + step] != b[i:i + step])
    return next((j for j in range(i, min(i + step, len(a))) if a[j] != b[j]), i)


def stall_a_big_read(target, peer, role, mode):
    """A connection to the target in `mode` (bigread or takeback) and `role`, whose peer
    asks for an RDMA Read of the whole big region through a receive buffer of 4096
    octets, fixed, and reads nothing until the Read Response stands in it (the window is
    then closed); then the peer's Send completes the target's receive, and the target
    reports. Returns the socket, its receive buffer made large again (the rest comes at
    once), and the report."""
    report = target(1, mode, role=role)
    s, keys = open_conn(role, report, peer)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(read_request(keys["bkey"], keys["baddr"], BIG_LEN))
    wait_queued(s, "the Read Response")
    s.sendall(send(b"done"))
    r = report(timeout=T_IO)
    assert (r["status"], r["recv"]) == (IBV_WC_SUCCESS, b"done".hex()), r
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return s, r


@pytest.mark.parametrize("role", ROLES if SOAK else ROLES[:1])
def test_zero_window_during_a_read_response(target, peer, role):
    """The peer asks for an 8 MiB RDMA Read of the target's memory and reads nothing, with
    rsiw as Responder and as Initiator: the Read Response fills the peer's receive window
    and rsiw's send buffer and stalls. rsiw's receive side goes on (the peer's Send
    completes the target's receive), and the target deregisters the region the stalled
    Response reads from, disconnects and tears down (the fixture checks it exits 0 within
    T_IO). What the peer then reads is Read Response FPDUs carrying the region's octets
    in order, up to the close: a stalled stream is cut, never corrupted, and KASAN sees
    no access to the unpinned pages. `make check` runs rsiw as Responder, `make soak`
    both roles."""
    s, r = stall_a_big_read(target, peer, role, "bigread")
    assert r["changes"] == [] and r["foreign"] == [], r
    data = recv_all(s)
    s.close()
    got, after = read_responses(data)
    want = (BIG_PATTERN * (BIG_LEN // len(BIG_PATTERN) + 1))[:len(got)]
    print(f"the peer read {len(data)} octets, {len(got)} of them Response payload")
    at = first_difference(got, want)
    assert at is None, f"the Read Response's payload is not the region's octets in order " \
        f"(from offset {at})"
    # The region may be gone before the close: then a TERMINATE (RDMAP remote
    # protection, invalid STag) ends the Response (test_read_response_stops_...).
    for f in after:
        assert terminate_of(f)[:3] == (0, 1, 0x00), f"after the Read Response: {f[:32].hex()}"


@pytest.mark.parametrize("role", ROLES if SOAK else ROLES[:1])
def test_read_response_stops_where_its_source_is_taken_back(target, peer, role):
    """The peer asks for an 8 MiB RDMA Read of the target's memory and stalls the Read
    Response with a closed window, as above; the target then deregisters the MR, writes
    TAKEN_BACK over the memory (it is the process's again) and keeps the connection. When
    the peer reads again, the Response stops where rsiw had copied it before the
    deregistration returned: no octet read from the memory after that reaches the peer
    (with TCP taking the Response's pages by reference, or the region read after one
    lookup, the rest of the 8 MiB came, TAKEN_BACK). One TERMINATE follows, RDMAP
    remote protection, invalid STag (RFC 5040 §7.2), and the connection closes. The
    path's MSS is loopback's, so the Response's FPDUs are large and their payload goes
    through rsiw's copy pages, which TCP holds by reference: they must hold the octets
    copied under the guard, never the memory after it was taken back. `make check` runs
    rsiw as Responder, `make soak` both roles."""
    s, _ = stall_a_big_read(target, peer, role, "takeback")
    # Read until the Response is whole, something else follows it, its payload stops
    # being the MR's, or rsiw closes; FPDUs are counted as they come (8 MiB of them).
    data, pos, payload, after, closed = bytearray(), 0, 0, 0, False
    longest = 0
    want = (BIG_PATTERN * (BIG_LEN // len(BIG_PATTERN) + 1))[:BIG_LEN]
    intact = True
    while not closed and not after and payload < BIG_LEN and intact:
        try:
            chunk = s.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            raise AssertionError(f"nothing from rsiw for {T_IO} s after {len(data)} octets")
        closed = not chunk
        data += chunk
        while len(data) - pos >= 2:
            ulen = int.from_bytes(data[pos:pos + 2], "big")
            total = 2 + ulen + (-(2 + ulen)) % 4 + 4
            if len(data) - pos < total:
                break
            if data[pos + 3] & 0x0F != 2:
                after += 1
                break
            n = ulen - 14
            longest = max(longest, n)
            intact = intact and data[pos + 16:pos + 16 + n] == want[payload:payload + n]
            payload, pos = payload + n, pos + total
    if not closed:
        # The target's second receive: it disconnects once that completed.
        try:
            s.sendall(send(b"end", msn=2))
            s.settimeout(T_IO)
            data += recv_all(s)
        except OSError:
            pass  # rsiw closed (or reset) meanwhile
    s.close()
    got, after = read_responses(bytes(data))
    want = want[:len(got)]
    print(f"the peer read {len(data)} octets, {len(got)} of them Response payload")
    taken = got.count(b"\xEE" * 64)
    at = first_difference(got, want)
    assert at is None, f"the Read Response's payload is not the MR's octets in order " \
        f"({len(got)} octets, from offset {at}; {taken} runs of 64 TAKEN_BACK octets)"
    assert len(got) < BIG_LEN, "the whole Response came from the deregistered memory"
    # FPDUs of 8 KiB or more go through the copy pages (rust/conn/tx_fpdu.rs).
    assert longest >= 8192, f"no Read Response FPDU of 8 KiB or more (longest payload {longest})"
    assert len(after) == 1, f"{len(after)} FPDUs after the Read Response: " \
        f"{[f[:24].hex() for f in after]}"
    # Found at the Responder's side, after the Request: no header to echo.
    assert terminate_of(after[0]) == (0, 1, 0x00, 0), after[0][:32].hex()
