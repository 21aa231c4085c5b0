#!/usr/bin/env python3
"""The rsiw end of test_hostile.py: a pyverbs consumer that makes N connections one after
the other, as Responder (`listen`: accepts them on ADDR:PORT) or as Initiator (`connect`:
connects to the hostile peer listening on ADDR:PORT), and reports, for each, what the
peer's FPDUs did to its memory.

    hostile_target.py listen|connect ADDR PORT N [read|read0|flood|wipe|norecv|bigread|takeback]
    hostile_target.py listen ADDR PORT N sqorder|longsge|narrow|recvback

Per connection it registers, on the connection's PD, one region of three pages filled with
FILL (local write only), and over its middle page two MRs: one with remote write access,
one with remote read access only (and local write, as a Read's sink needs). On a PD of its
own (not the connection's) it registers one more page with remote read and write access,
an STag the peer must not reach. It posts one receive of 64 octets, prints one JSON line
with the middle page's address, the two rkeys, the region's lkey and the other PD's page
(`faddr`, `fkey`), and accepts (or connects). With `read` it then posts one RDMA Read of
READ_LEN octets from the peer (STag READ_STAG, TO 0) into the start of the middle page
through the remote-read MR, and waits for its completion; `read0` is `read` on a
connection whose ORD is 0 (rdma_cm's initiator depth), where the Read must fail. With
`flood` it then posts FLOOD_SENDS Sends of FLOOD_LEN octets each (more than TCP buffers
for a peer that does not read) and does not wait for them. `wipe` (on a QP of WIPE_SENDS
send WQEs) posts WIPE_SENDS signalled Sends of WIPE_LEN octets of FLOOD_FILL, all from one
MR, more than TCP buffers for a peer that does not read, and reaps their
completions: at the first that is not a success (a flush: the buffer is the consumer's
again, as a kernel consumer frees it) it overwrites the whole MR with WIPED at once; the
report then has the Sends' statuses in order (`sends`). With `bigread` it also
registers BIG_LEN octets holding BIG_PATTERN repeated, with remote read access (`baddr`,
`bkey` in the first line), for the peer to read, and deregisters it before the
connection's QP is destroyed. `takeback` is `bigread` over memory of its own (an anonymous
mapping): once the receive completed it deregisters the MR, overwrites the memory with
TAKEN_BACK (the process's to reuse now) and then reports; it posts a second receive and,
after the report, waits for that to complete (the peer's second Send, or a flush once the
connection ended) before it disconnects. With `norecv` it posts no receive and, instead of
a receive's completion, waits up to 60 s for the first asynchronous event. Otherwise it
then waits for the receive to complete (a Send from the peer, or a flush once the
connection ended) and prints one JSON line: the receive's status, length and first octets,
the Read's status and length, every run of the three pages that is no longer FILL (offset
and octets, hex), the same of the other PD's page, and the asynchronous events the device
context reported (after a flushed receive it waits up to 10 s for the first). The whole
region is checked, so a byte placed beyond the MR's page, before or after it, shows.

`sqorder` (Responder only) is a consumer of its own QP (SQ_DEPTH send WQEs, its own PD
and CQ): it prints {"depth": SQ_DEPTH}, accepts, posts an RDMA Write of BIG_LEN octets
(WR ID 0; more than TCP buffers for a peer that does not read), then Sends of 64 octets
(WR IDs 1, 2, ...) until SQ_DEPTH of them were taken or 30 s passed (a full SQ refuses a
post with ENOMEM), moves the QP to ERROR and prints {"sends": how many were taken, "wcs":
[[WR ID, status, opcode], ...]} of the send CQ.

`longsge` (Responder only) is a QP of its own like `sqorder`'s with two SGEs per send WQE:
on its PD it registers a FILL region of three pages with a remote-write and a remote-read
MR over the middle one, prints {"depth": SQ_DEPTH, "addr", "wkey", "rkey"} (as the keys
above), accepts, posts one signalled Send whose two SGEs over one 64-octet MR claim 2 GiB
each (4 GiB in all, one octet beyond the longest message) and prints {"wcs": [[WR ID,
status, opcode], ...], "state": the QP's state, "events": the asynchronous events,
waiting up to 10 s for the first} once the send CQ has a completion or 30 s passed. It
then waits for a line on its standard input and prints {"changes": the runs of the
region that are no longer FILL}.

`narrow` (Responder only) is a QP of its own like `longsge`'s, with the same region and
MRs, and prints {"addr", "wkey", "rkey"}. Once connected it waits for a line on its
standard input, then for the region to change (the peer's first Write, up to 30 s), then
narrows the QP's access flags to LOCAL_WRITE (`modify_qp` in RTS with
IBV_QP_ACCESS_FLAGS only) and prints {"access": the QP's access flags as `query_qp`
reports them before and after, "changes": the runs that are no longer FILL}. After one
more line on its standard input it prints {"changes", "state": the QP's state}.

`recvback` (Responder only) registers two pages of an anonymous mapping of its own,
filled with FILL, with local write access on the connection's PD, posts one receive of
both pages through that MR, prints {"recv": 2 pages}, and accepts. After a line on its
standard input it waits for the first octet of the mapping to change (the first
segment of the peer's Send placed, up to 30 s), deregisters the MR (`ibv_dereg_mr`
returned: the memory is the process's again), overwrites the mapping with TAKEN_BACK and
prints {"dereg": true, "first": the first 16 octets before the overwrite, hex}. After one
more line it prints {"changes": the runs of the mapping that are no longer TAKEN_BACK,
"status": the receive's completion status}.

Runs as a separate process (never in the pytest process: librdmacm keeps every device's
verbs context open for the life of a process, which would pin the module).
"""

import ctypes
import errno
import json
import mmap
import sys
import time

import pyverbs.cm_enums as ce
from pyverbs import enums as e
from pyverbs.cmid import AddrInfo, CMID, ConnParam
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR
from uverbs_events import event_fds, next_event

PAGE = mmap.PAGESIZE
FILL = 0x5A
READ_LEN = 64
READ_STAG = 0x1234
FLOOD_SENDS = 4
FLOOD_LEN = 1 << 20
# `wipe`: Sends of WIPE_LEN octets of FLOOD_FILL, the MR overwritten with WIPED at the
# first flush completion. A Send of one FPDU shorter than a segment: TCP's buffer then
# fills in the middle of an FPDU (FPDUs of a segment each would fill it at their ends).
WIPE_SENDS = 256
WIPE_LEN = 1000
FLOOD_FILL = 0x33
WIPED = 0xC5
BIG_LEN = 8 << 20
BIG_PATTERN = bytes(range(251))
# What `takeback` writes into its memory after deregistering the MR over it.
TAKEN_BACK = 0xEE
SQ_DEPTH = 8


def changed_runs(data):
    """[[offset, hex octets]] of the runs of `data` that are not FILL."""
    runs, start = [], None
    for i, v in enumerate(data + bytes([FILL])):
        if v != FILL and start is None:
            start = i
        elif v == FILL and start is not None:
            runs.append([start, data[start:i].hex()])
            start = None
    return runs


def async_events(ctx, wait):
    """The event types of the asynchronous events `ctx` has, each acknowledged (destroying
    the QP waits for that): waits up to `wait` seconds for the first, 1 s for others.
    The context's event file is the process's first (librdmacm opens the only device's
    context before any completion channel)."""
    fd, kinds = event_fds()[0], []
    while (kind := next_event(ctx, fd, 1 if kinds else wait)) is not None:
        kinds.append(kind)
    return kinds


def serve_one(cid, ctx, mode, go):
    """One connection on `cid` (device context `ctx`), established by `go(param)`."""
    region = MR(cid.pd, 3 * PAGE, e.IBV_ACCESS_LOCAL_WRITE)
    region.write(bytes([FILL]) * (3 * PAGE), 3 * PAGE)
    middle = region.buf + PAGE
    wr = MR(cid.pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, address=middle)
    ro = MR(cid.pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ, address=middle)
    other_pd = PD(ctx)
    foreign = MR(other_pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                 | e.IBV_ACCESS_REMOTE_READ)
    foreign.write(bytes([FILL]) * PAGE, PAGE)
    rcv = cid.reg_msgs(64)
    if mode != "norecv":
        cid.post_recv(rcv)
    keys = {"addr": middle, "wkey": wr.rkey, "rkey": ro.rkey, "lkey": region.lkey,
            "faddr": foreign.buf, "fkey": foreign.rkey}
    big = mem = rcv2 = None
    pattern = (BIG_PATTERN * (BIG_LEN // len(BIG_PATTERN) + 1))[:BIG_LEN]
    if mode == "bigread":
        big = MR(cid.pd, BIG_LEN, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
        big.write(pattern, BIG_LEN)
        keys.update(baddr=big.buf, bkey=big.rkey)
    if mode == "takeback":
        mem = mmap.mmap(-1, BIG_LEN)
        mem[:] = pattern
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        big = MR(cid.pd, BIG_LEN, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ,
                 address=addr)
        keys.update(baddr=addr, bkey=big.rkey)
        rcv2 = cid.reg_msgs(64)
        cid.post_recv(rcv2)
    print(json.dumps(keys), flush=True)
    go(ConnParam(resources=1, depth=0 if mode == "read0" else 1))
    read_wc = None
    flood = None
    if mode == "flood":
        flood = MR(cid.pd, FLOOD_LEN, e.IBV_ACCESS_LOCAL_WRITE)
        for i in range(FLOOD_SENDS):
            cid.post_send(flood, e.IBV_SEND_SIGNALED if i == FLOOD_SENDS - 1 else 0)
    sends = None
    if mode == "wipe":
        flood = MR(cid.pd, WIPE_LEN, e.IBV_ACCESS_LOCAL_WRITE)
        flood.write(bytes([FLOOD_FILL]) * WIPE_LEN, WIPE_LEN)
        for _ in range(WIPE_SENDS):
            cid.post_send(flood, e.IBV_SEND_SIGNALED, WIPE_LEN)
        sends = []
        for _ in range(WIPE_SENDS):
            sends.append(cid.get_send_comp().status)
            if sends[-1] != 0 and all(s == 0 for s in sends[:-1]):
                flood.write(bytes([WIPED]) * WIPE_LEN, WIPE_LEN)
    if mode in ("read", "read0"):
        cid.post_read(ro, READ_LEN, 0, READ_STAG, e.IBV_SEND_SIGNALED)
        read_wc = cid.get_send_comp()
    if mode == "norecv":
        # Nothing to complete: the connection's end shows as an asynchronous event.
        wc, events = None, async_events(ctx, 60)
    else:
        wc = cid.get_recv_comp()
        if mode == "takeback":
            big.close()
            big = None
            mem[:] = bytes([TAKEN_BACK]) * BIG_LEN
        events = async_events(ctx, 10 if wc.status != 0 else 0)
    report = {
        "read_status": read_wc.status if read_wc else None,
        "read_len": read_wc.byte_len if read_wc and read_wc.status == 0 else None,
        "status": wc.status if wc else None,
        "len": wc.byte_len if wc else None,
        "recv": rcv.read(min(wc.byte_len, 64), 0).hex() if wc and wc.status == 0 else "",
        "changes": changed_runs(region.read(3 * PAGE, 0)),
        "foreign": changed_runs(foreign.read(PAGE, 0)),
        "events": events,
        "sends": sends,
    }
    print(json.dumps(report), flush=True)
    if rcv2 is not None:
        cid.get_recv_comp()
    try:
        cid.disconnect()
    except PyverbsError:
        pass  # the connection may have ended already
    for obj in (ro, wr, region, rcv, rcv2, flood, big, foreign, other_pd, cid):
        if obj is not None:
            obj.close()


def own_qp(ctx, send_sge):
    """(PD, CQ, QP) of `sqorder` and `longsge`: an RC QP of SQ_DEPTH send WQEs of
    `send_sge` SGEs each on a PD and CQ of its own, in INIT with local write access."""
    pd = PD(ctx)
    cq = CQ(ctx, 4 * SQ_DEPTH)
    cap = QPCap(max_send_wr=SQ_DEPTH, max_recv_wr=1, max_send_sge=send_sge, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_INIT
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
    return pd, cq, qp


def serve_sqorder(cid, ctx, go):
    """The `sqorder` connection on `cid` (no QP of its own), established by `go(param)`."""
    pd, cq, qp = own_qp(ctx, 1)
    big = MR(pd, BIG_LEN, e.IBV_ACCESS_LOCAL_WRITE)
    small = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    print(json.dumps({"depth": SQ_DEPTH}), flush=True)
    go(ConnParam(resources=1, depth=1, qp_num=qp.qp_num))
    write = SendWR(wr_id=0, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                   sg=[SGE(big.buf, BIG_LEN, big.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    write.set_wr_rdma(0x1234, 0)
    qp.post_send(write)
    sends, deadline = 0, time.monotonic() + 30
    while sends < SQ_DEPTH and time.monotonic() < deadline:
        try:
            qp.post_send(SendWR(wr_id=sends + 1, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(small.buf, 64, small.lkey)],
                                send_flags=e.IBV_SEND_SIGNALED))
            sends += 1
        except PyverbsRDMAError as ex:
            if abs(ex.error_code) != errno.ENOMEM:  # libsiw returns -ENOMEM
                raise
            time.sleep(0.1)
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_ERR
    qp.modify(attr, e.IBV_QP_STATE)
    wcs, deadline = [], time.monotonic() + 30
    while len(wcs) < sends + 1 and time.monotonic() < deadline:
        n, got = cq.poll(num_entries=sends + 1 - len(wcs))
        wcs.extend([w.wr_id, w.status, w.opcode] for w in got[:n])
        if n == 0:
            time.sleep(0.01)
    print(json.dumps({"sends": sends, "wcs": wcs}), flush=True)
    try:
        cid.disconnect()
    except PyverbsError:
        pass  # the connection ended with the QP's ERROR
    for obj in (qp, small, big, cq, pd, cid):
        obj.close()


def serve_longsge(cid, ctx, go):
    """The `longsge` connection on `cid` (no QP of its own), established by `go(param)`."""
    pd, cq, qp = own_qp(ctx, 2)
    small = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    region = MR(pd, 3 * PAGE, e.IBV_ACCESS_LOCAL_WRITE)
    region.write(bytes([FILL]) * (3 * PAGE), 3 * PAGE)
    middle = region.buf + PAGE
    wr = MR(pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, address=middle)
    ro = MR(pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ, address=middle)
    print(json.dumps({"depth": SQ_DEPTH, "addr": middle, "wkey": wr.rkey, "rkey": ro.rkey}),
          flush=True)
    go(ConnParam(resources=1, depth=1, qp_num=qp.qp_num))
    half = 1 << 31
    qp.post_send(SendWR(wr_id=7, opcode=e.IBV_WR_SEND, num_sge=2,
                        sg=[SGE(small.buf, half, small.lkey), SGE(small.buf, half, small.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED))
    wcs, deadline = [], time.monotonic() + 30
    while not wcs and time.monotonic() < deadline:
        n, got = cq.poll(num_entries=4)
        wcs.extend([w.wr_id, w.status, w.opcode] for w in got[:n])
        if n == 0:
            time.sleep(0.01)
    state = qp.query(e.IBV_QP_STATE)[0].qp_state
    print(json.dumps({"wcs": wcs, "state": state, "events": async_events(ctx, 10)}),
          flush=True)
    sys.stdin.readline()
    print(json.dumps({"changes": changed_runs(region.read(3 * PAGE, 0))}), flush=True)
    try:
        cid.disconnect()
    except PyverbsError:
        pass  # the connection ended with the QP's ERROR
    for obj in (qp, ro, wr, region, small, cq, pd, cid):
        obj.close()


def serve_narrow(cid, ctx, go):
    """The `narrow` connection on `cid` (no QP of its own), established by `go(param)`."""
    pd, cq, qp = own_qp(ctx, 1)
    region = MR(pd, 3 * PAGE, e.IBV_ACCESS_LOCAL_WRITE)
    region.write(bytes([FILL]) * (3 * PAGE), 3 * PAGE)
    middle = region.buf + PAGE
    wr = MR(pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, address=middle)
    ro = MR(pd, PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ, address=middle)
    print(json.dumps({"addr": middle, "wkey": wr.rkey, "rkey": ro.rkey}), flush=True)
    go(ConnParam(resources=1, depth=1, qp_num=qp.qp_num))
    sys.stdin.readline()
    deadline = time.monotonic() + 30
    while not changed_runs(region.read(3 * PAGE, 0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    before = qp.query(e.IBV_QP_ACCESS_FLAGS)[0].qp_access_flags
    attr = QPAttr()
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    qp.modify(attr, e.IBV_QP_ACCESS_FLAGS)
    after = qp.query(e.IBV_QP_ACCESS_FLAGS)[0].qp_access_flags
    print(json.dumps({"access": [before, after],
                      "changes": changed_runs(region.read(3 * PAGE, 0))}), flush=True)
    sys.stdin.readline()
    state = qp.query(e.IBV_QP_STATE)[0].qp_state
    print(json.dumps({"changes": changed_runs(region.read(3 * PAGE, 0)), "state": state}),
          flush=True)
    try:
        cid.disconnect()
    except PyverbsError:
        pass  # the connection ended with the TERMINATE
    for obj in (qp, ro, wr, region, cq, pd, cid):
        obj.close()


def serve_recvback(cid, go):
    """The `recvback` connection on `cid`, established by `go(param)`."""
    n = 2 * PAGE
    mem = mmap.mmap(-1, n)
    mem[:] = bytes([FILL]) * n
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    mr = MR(cid.pd, n, e.IBV_ACCESS_LOCAL_WRITE, address=addr)
    cid.post_recv(mr, n)
    print(json.dumps({"recv": n}), flush=True)
    go(ConnParam(resources=1, depth=1))
    sys.stdin.readline()
    deadline = time.monotonic() + 30
    while mem[0] == FILL and time.monotonic() < deadline:
        time.sleep(0.01)
    first = bytes(mem[:16]).hex()
    mr.close()
    mem[:] = bytes([TAKEN_BACK]) * n
    print(json.dumps({"dereg": True, "first": first}), flush=True)
    sys.stdin.readline()
    wc = cid.get_recv_comp()
    runs, start = [], None
    for i, v in enumerate(bytes(mem) + bytes([TAKEN_BACK])):
        if v != TAKEN_BACK and start is None:
            start = i
        elif v == TAKEN_BACK and start is not None:
            runs.append([start, bytes(mem[start:i]).hex()])
            start = None
    print(json.dumps({"changes": runs, "status": wc.status}), flush=True)
    try:
        cid.disconnect()
    except PyverbsError:
        pass  # the connection ended with the TERMINATE
    cid.close()


def main():
    role, addr, port, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    mode = sys.argv[5] if len(sys.argv) > 5 else None
    cap = QPCap(max_send_wr=WIPE_SENDS if mode == "wipe" else 8, max_recv_wr=4,
                max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap)
    if role == "connect":
        print("ready", flush=True)
        for _ in range(n):
            ai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
            cid = CMID(creator=ai, qp_init_attr=init)
            serve_one(cid, cid.context, mode, cid.connect)
        return
    ai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    qp_of_its_own = mode in ("sqorder", "longsge", "narrow")
    listener = CMID(creator=ai, qp_init_attr=None if qp_of_its_own else init)
    listener.listen()
    print("ready", flush=True)
    for _ in range(n):
        cid = listener.get_request()
        # The passive side's context is the listener's (pyverbs sets it in get_request).
        if mode == "sqorder":
            serve_sqorder(cid, listener.context, cid.accept)
        elif mode == "longsge":
            serve_longsge(cid, listener.context, cid.accept)
        elif mode == "narrow":
            serve_narrow(cid, listener.context, cid.accept)
        elif mode == "recvback":
            serve_recvback(cid, cid.accept)
        else:
            serve_one(cid, listener.context, mode, cid.accept)
    listener.close()


if __name__ == "__main__":
    main()
