# SPDX-License-Identifier: GPL-2.0
"""Who owns rsiw's kernel sockets when their consumers go away.

- A listener that is destroyed closes the connections it accepted that still wait for
  their MPA Request (no consumer knows them): the peer sees the close at once, not after
  `mpa_timeout_ms`, and no CONNECT_REQUEST reaches an id that is going away.
"""
import signal
import socket
import subprocess

import pytest

from conftest import load_rsiw, sh, unload_rsiw, wait_for

DEV = "rsiw0"
ADDR = "10.91.0.1"
PORT = 7510
# Long enough that a connection closed by its startup timer cannot pass for one closed by
# its listener.
MPA_TIMEOUT_MS = 120000
T_CLOSE = 30


@pytest.fixture
def long_mpa_timeout():
    """rsiw loaded with a long MPA startup timeout; unloaded afterwards."""
    unload_rsiw()
    load_rsiw(f"mpa_timeout_ms={MPA_TIMEOUT_MS}")
    yield
    unload_rsiw()


def accept_queue(port, ns=None):
    """Recv-Q of the listener on `port`: connections TCP accepted that the listener has
    not taken yet (None if nothing listens)."""
    pre = f"ip netns exec {ns} " if ns else ""
    out = sh(f"{pre}ss -Hltn 'sport = :{port}'").stdout.split()
    return int(out[1]) if len(out) > 1 else None


def closed_by_peer(s):
    """Whether `s` sees EOF or a reset within its timeout."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_destroyed_listener_closes_connections_awaiting_their_request(long_mpa_timeout, dummy):
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh("modprobe rdma_ucm")
    server = subprocess.Popen(["rping", "-s", "-a", ADDR, "-p", str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: accept_queue(PORT) is not None, 30, "rping's listener")
        s = socket.create_connection((ADDR, PORT), timeout=T_CLOSE)
        # rsiw took the connection from TCP's accept queue: a CEP waits for its Request.
        wait_for(lambda: accept_queue(PORT) == 0, 30, "rsiw to accept the connection")
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    # Killing rping destroys its listening id (iw_destroy_listen).
    assert closed_by_peer(s), \
        f"the connection stayed open {T_CLOSE} s after its listener was destroyed"
    s.close()
    sh(f"rdma link del {DEV}")
