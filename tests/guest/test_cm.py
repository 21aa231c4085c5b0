# SPDX-License-Identifier: GPL-2.0
"""rsiw's connection manager through librdmacm (pyverbs, synchronous CMIDs): MPA startup
over kernel TCP, CONNECT_REQUEST with the peer's private data, reject with private data.
The RDMA transport does not exist yet, so an accepted connection must fail cleanly with
EOPNOTSUPP rather than pretend to work."""
import errno
import subprocess
import sys
import textwrap

import pytest

from conftest import sh

from pyverbs import cm_enums as ce
from pyverbs.cmid import AddrInfo, CMID, ConnParam
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPCap, QPInitAttr

DEV = "rsiw0"
ADDR = "10.91.0.1"

SERVER = textwrap.dedent("""
    import sys
    from pyverbs import cm_enums as ce
    from pyverbs.cmid import AddrInfo, CMID, ConnParam
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QPCap, QPInitAttr
    addr, port, action = sys.argv[1], sys.argv[2], sys.argv[3]
    ai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    listen = CMID(creator=ai, qp_init_attr=QPInitAttr(cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    listen.listen()
    print("listening", flush=True)
    req = listen.get_request()
    if action == "reject":
        req.reject(private_data=b"rsiw says no")
        print("rejected", flush=True)
    else:
        try:
            req.create_qp(QPInitAttr(cap=QPCap(max_send_wr=4, max_recv_wr=4)))
            req.accept(ConnParam(resources=0, depth=0))
            print("accepted", flush=True)
        except PyverbsRDMAError as e:
            print(f"accept-errno {e.error_code}", flush=True)
    """)


@pytest.fixture
def cm_dev(rsiw, dummy):
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh("modprobe rdma_ucm")
    yield DEV


def server(port, action):
    p = subprocess.Popen([sys.executable, "-c", SERVER, ADDR, str(port), action],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout.readline().strip() == "listening"
    return p


def connect(port, private_data=b""):
    ai = AddrInfo(src=ADDR, dst=ADDR, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    # rsiw advertises no RDMA Read resources until the transport exists
    # (max_qp_rd_atom = 0), so librdmacm refuses anything but 0/0.
    param = ConnParam(resources=0, depth=0)
    if private_data:
        param.set_private_data(private_data)
    try:
        cmid.connect(param)
    finally:
        cmid.close()


def test_reject_reaches_the_client(cm_dev):
    srv = server(7471, "reject")
    with pytest.raises(PyverbsRDMAError) as ei:
        connect(7471, b"hello from rsiw")
    out, _ = srv.communicate(timeout=60)
    assert "rejected" in out, out
    assert ei.value.error_code == errno.ECONNREFUSED


def test_accept_fails_cleanly_without_a_transport(cm_dev):
    srv = server(7472, "accept")
    with pytest.raises(PyverbsRDMAError):
        connect(7472)
    out, _ = srv.communicate(timeout=60)
    assert f"accept-errno {errno.EOPNOTSUPP}" in out, out


def test_connect_to_nobody_is_refused(cm_dev):
    with pytest.raises(PyverbsRDMAError) as ei:
        connect(7473)
    assert ei.value.error_code in (errno.ECONNREFUSED, errno.ECONNRESET), ei.value


def test_listen_and_close_repeatedly(cm_dev):
    for i in range(20):
        ai = AddrInfo(src=ADDR, src_service=str(7480), port_space=ce.RDMA_PS_TCP,
                      flags=ce.RAI_PASSIVE)
        cmid = CMID(creator=ai)
        cmid.listen()
        cmid.close()
