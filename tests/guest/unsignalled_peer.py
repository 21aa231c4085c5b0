#!/usr/bin/env python3
"""A pyverbs/librdmacm peer pair for the rule that no octet of a WR's memory is read after
its completion: WRs posted *without* IBV_SEND_SIGNALED, whose buffers the consumer may
reuse once a later WR completed, and signalled ones.

    unsignalled_peer.py server ADDR PORT N SIZE
    unsignalled_peer.py client ADDR PORT N SIZE [signalled|reuse]

The server accepts one connection, posts N+1 receives (N for the client's Sends, one for
its final message) and advertises a buffer of N*SIZE octets (address and rkey) in a Send.
The client posts N unsignalled RDMA Writes into that buffer and N unsignalled Sends, each
from its own MR with its own pattern, then a signalled Send "done". The server checks,
after "done" arrived (RDMAP orders it after all of them), that every octet of the buffer
and of every receive is the pattern the client wrote, and reports the first mismatch.
It answers "good" or "bad!" in a last Send; the client waits for it, so that its buffers
stay registered and unchanged until the check is over. Both exit 0 only when everything
arrived intact. With `signalled`, the client posts every Write and Send with
IBV_SEND_SIGNALED, reaps each completion and at once overwrites the WR's buffer with
another pattern: a completion hands the buffer back to the consumer, so rsiw copies
those payloads (into its copy pages for FPDUs of 8 KiB or more), and the peer must still
see what the buffer held when the WR was posted. With `reuse`, the WRs are unsignalled
and the client overwrites every buffer as soon as the signalled "done" completed (which
completes the WRs before it): TCP may still hold their data, not yet sent or to be
retransmitted, and the peer must still see what the buffers held when they were posted.

Runs as a separate process (never in the pytest process: librdmacm keeps every device's
verbs context open for the life of a process, which would pin the module).
"""

import struct
import sys

import pyverbs.cm_enums as ce
from pyverbs import enums as e
from pyverbs.cmid import AddrInfo, CMID, ConnParam
from pyverbs.qp import QPCap, QPInitAttr


def pattern(tag, size):
    """SIZE octets that differ between tags and along the buffer (period 251)."""
    period = bytes((tag * 37 + k) % 256 for k in range(251))
    return (period * (size // 251 + 1))[:size]


def init_attr(n):
    cap = QPCap(max_send_wr=2 * n + 4, max_recv_wr=n + 4, max_send_sge=1, max_recv_sge=1)
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap, sq_sig_all=0)


def expect(kind, wc, opcode=None):
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        sys.exit(f"{kind}: bad completion {wc and wc.status}")
    if opcode is not None and wc.opcode != opcode:
        sys.exit(f"{kind}: completion opcode {wc.opcode}, want {opcode}")
    return wc


def mismatch(what, got, want):
    if got == want:
        return None
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"{what}: octet {i} is {a:#x}, want {b:#x}"
    return None if len(got) == len(want) else f"{what}: {len(got)} octets, want {len(want)}"


def server(addr, port, n, size):
    ai = AddrInfo(src=addr, src_service=str(port), port_space=ce.RDMA_PS_TCP,
                  flags=ce.RAI_PASSIVE)
    listener = CMID(creator=ai, qp_init_attr=init_attr(n))
    listener.listen()
    cid = listener.get_request()
    sink = cid.reg_write(n * size)
    sink.write(bytes(n * size), n * size)
    recvs = [cid.reg_msgs(size) for _ in range(n)]
    done = cid.reg_msgs(64)
    for mr in recvs:
        cid.post_recv(mr)
    cid.post_recv(done)
    cid.accept(ConnParam())
    ad = cid.reg_msgs(16)
    ad.write(struct.pack("<QI4x", sink.buf, sink.rkey), 16)
    cid.post_send(ad, e.IBV_SEND_SIGNALED)
    expect("advertisement send", cid.get_send_comp())
    errs = []
    for i, mr in enumerate(recvs):
        wc = expect(f"receive {i}", cid.get_recv_comp(), e.IBV_WC_RECV)
        if wc.byte_len != size:
            errs.append(f"receive {i}: {wc.byte_len} octets, want {size}")
        errs.append(mismatch(f"Send {i}", mr.read(size, 0), pattern(1000 + i, size)))
    expect("done receive", cid.get_recv_comp(), e.IBV_WC_RECV)
    if done.read(4, 0) != b"done":
        errs.append(f"last message is {done.read(4, 0)!r}, want b'done'")
    data = sink.read(n * size, 0)
    for i in range(n):
        errs.append(mismatch(f"Write {i}", data[i * size:(i + 1) * size], pattern(i, size)))
    errs = [x for x in errs if x]
    # Tell the client the result, so that it stays connected until the check is done.
    verdict = cid.reg_msgs(16)
    verdict.write(b"bad!" if errs else b"good", 4)
    cid.post_send(verdict, e.IBV_SEND_SIGNALED, 4)
    expect("verdict send", cid.get_send_comp(), e.IBV_WC_SEND)
    if errs:
        sys.exit("\n".join(errs))
    print(f"server: {n} Writes and {n} Sends of {size} octets verified")


def client(addr, port, n, size, signalled=False, reuse=False):
    ai = AddrInfo(dst=addr, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
    cid = CMID(creator=ai, qp_init_attr=init_attr(n))
    ad = cid.reg_msgs(16)
    cid.post_recv(ad)
    verdict = cid.reg_msgs(16)
    cid.post_recv(verdict)
    writes = [cid.reg_msgs(size) for _ in range(n)]
    sends = [cid.reg_msgs(size) for _ in range(n)]
    for i, mr in enumerate(writes):
        mr.write(pattern(i, size), size)
    for i, mr in enumerate(sends):
        mr.write(pattern(1000 + i, size), size)
    done = cid.reg_msgs(64)
    done.write(b"done", 4)
    cid.connect(ConnParam())
    expect("advertisement", cid.get_recv_comp(), e.IBV_WC_RECV)
    raddr, rkey = struct.unpack("<QI4x", ad.read(16, 0))
    flags = e.IBV_SEND_SIGNALED if signalled else 0
    for i, mr in enumerate(writes):
        cid.post_write(mr, size, raddr + i * size, rkey, flags)
        if signalled:
            expect(f"Write {i}", cid.get_send_comp(), e.IBV_WC_RDMA_WRITE)
            mr.write(pattern(200 + i, size), size)
    for i, mr in enumerate(sends):
        cid.post_send(mr, flags)
        if signalled:
            expect(f"Send {i}", cid.get_send_comp(), e.IBV_WC_SEND)
            mr.write(pattern(2000 + i, size), size)
    cid.post_send(done, e.IBV_SEND_SIGNALED, 4)
    # Unsignalled, one completion: the last Send's; the WRs before it completed too.
    expect("done send", cid.get_send_comp(), e.IBV_WC_SEND)
    if reuse:
        for i, mr in enumerate(writes):
            mr.write(pattern(200 + i, size), size)
        for i, mr in enumerate(sends):
            mr.write(pattern(2000 + i, size), size)
    kind = "signalled" if signalled else "unsignalled"
    print(f"client: {n} {kind} Writes and {n} Sends of {size} octets posted")
    expect("verdict", cid.get_recv_comp(), e.IBV_WC_RECV)
    if verdict.read(4, 0) != b"good":
        sys.exit(f"server found the data damaged ({verdict.read(4, 0)!r})")
    print("client: server verified the data")


if __name__ == "__main__":
    role, a, p, cnt, sz = sys.argv[1:6]
    if role == "server":
        server(a, int(p), int(cnt), int(sz))
    else:
        client(a, int(p), int(cnt), int(sz), sys.argv[6:7] == ["signalled"],
               sys.argv[6:7] == ["reuse"])
