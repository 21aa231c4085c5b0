#!/usr/bin/env python3
"""One end of test_reliability.py's MR deregistration test: a pyverbs consumer that
deregisters a memory region while RDMA Writes and Reads that use it are in flight.

    mr_dereg_peer.py server ADDR PORT local|remote
    mr_dereg_peer.py client ADDR PORT local|remote SRC

The server accepts one connection on ADDR:PORT (the client connects to it from SRC), registers a region of LEN octets with
remote read and write access and sends its address and rkey. The client then sends a
Send ("go") and posts N RDMA Writes of LEN octets into the server's region and N RDMA
Reads of LEN octets from it, all from and into a local region of its own, all signalled.
With `remote` the server deregisters its region as soon as the go Send arrives, while
the Writes and Reads stream in; with `local` the client deregisters its own region right
after posting. The client waits for every completion (a missing one keeps it waiting:
the test's deadline catches that) and prints one JSON line with their statuses; the
server waits for the connection's end (its receive flushed) and prints the go Send's
status. Both exit 0 once they have done so, whatever the statuses.
"""

import json
import struct
import sys

import pyverbs.cm_enums as ce
from pyverbs import enums as e
from pyverbs.cmid import AddrInfo, CMID, ConnParam
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QPCap, QPInitAttr

N = 16
LEN = 512 * 1024
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def main():
    role, addr, port, mode = sys.argv[1:5]
    cap = QPCap(max_send_wr=2 * N + 2, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap)
    param = ConnParam(resources=N, depth=N)
    if role == "server":
        ai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP,
                      flags=ce.RAI_PASSIVE)
        listener = CMID(creator=ai, qp_init_attr=init)
        listener.listen()
        print("ready", flush=True)
        cid = listener.get_request()
        region = MR(cid.pd, LEN, ACCESS)
        keys = cid.reg_msgs(16)
        keys.write(struct.pack("<QI", region.buf, region.rkey), 12)
        go = cid.reg_msgs(16)
        end = cid.reg_msgs(16)
        cid.post_recv(go)
        cid.post_recv(end)
        cid.accept(param)
        cid.post_send(keys)
        cid.get_send_comp()
        wc = cid.get_recv_comp()
        if mode == "remote":
            region.close()
        # The client's disconnect (or a TERMINATE) flushes the second receive.
        last = cid.get_recv_comp()
        print(json.dumps({"go": wc.status, "end": last.status}), flush=True)
        for obj in (region, keys, go, end, cid, listener):
            obj.close()
        return
    ai = AddrInfo(src=sys.argv[5], dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
    cid = CMID(creator=ai, qp_init_attr=init)
    keys = cid.reg_msgs(16)
    cid.post_recv(keys)
    cid.connect(param)
    cid.get_recv_comp()
    raddr, rkey = struct.unpack("<QI", keys.read(12, 0))
    local = MR(cid.pd, LEN, ACCESS)
    go = cid.reg_msgs(16)
    cid.post_send(go)
    for _ in range(N):
        cid.post_write(local, LEN, raddr, rkey, e.IBV_SEND_SIGNALED)
        cid.post_read(local, LEN, raddr, rkey, e.IBV_SEND_SIGNALED)
    if mode == "local":
        local.close()
    statuses = [cid.get_send_comp().status for _ in range(2 * N + 1)]
    print(json.dumps({"statuses": statuses}), flush=True)
    try:
        cid.disconnect()
    except PyverbsError:
        pass  # the connection may have ended already
    for obj in (local, keys, go, cid):
        obj.close()


if __name__ == "__main__":
    main()
