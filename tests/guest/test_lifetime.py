# SPDX-License-Identifier: GPL-2.0
"""Who owns rsiw's kernel sockets when their consumers go away.

- A listener that is destroyed closes the connections it accepted that still wait for
  their MPA Request (no consumer knows them): the peer sees the close at once, not after
  `mpa_timeout_ms`, and no CONNECT_REQUEST reaches an id that is going away.
- rsiw's kernel sockets hold their network namespace: deleting a namespace with an rsiw
  device, a listener, a connection waiting for its MPA Request and a live connection in
  it, and killing every process there, frees the namespace only after rsiw closed its
  sockets (KASAN on the debug kernel reports any use after free); the device goes with
  the namespace's netdev, and `rmmod rsiw` succeeds after.
- A connect flood (connections that never send an MPA Request) holds at most
  MAX_PENDING connections per listener, the oldest closed first, while a legitimate
  Initiator is still served; mpa_timeout_ms reaps silent and trickling peers.
"""
import signal
import socket
import subprocess
import time

import pytest

from conftest import dmesg_mark, dmesg_since, load_rsiw, rdma_links, sh, unload_rsiw, wait_for
from test_reliability import fault_injection, function_text  # noqa: F401 (a fixture)

DEV = "rsiw0"
ADDR = "10.91.0.1"
PORT = 7510
# The flood connects from its own address. rdma_cm picks an Initiator's local port in
# its own port space, which knows nothing of TCP's: had the flood's sockets, on
# ephemeral ports of ADDR, held the port rdma_cm picked for the rping client, its bind
# (rsiw's as siw's) would fail with EADDRINUSE (test_cm's
# test_connect_from_a_port_held_by_tcp).
FLOOD_SRC = "10.91.0.2"
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


def test_listener_destroyed_with_a_connection_it_could_not_accept(long_mpa_timeout, dummy,
                                                                  fault_injection):
    """A listener destroyed while TCP still holds a connection in its accept queue (rsiw's
    kernel_accept() of it failed: every allocation under it is made to fail), after a
    connection of the same boot closed locally. The kernel orphans the queued child under
    the child's socket spinlock and write-locks its callback lock, which rsiw's socket
    callbacks (the child inherited them) take too, from softirq and from process context:
    they must take it with softirqs off, or lockdep reports a SOFTIRQ-safe ->
    SOFTIRQ-unsafe lock order (the dmesg check after every test fails on it)."""
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh("modprobe rdma_ucm")
    # A connection closed locally (rping's client disconnects after its pings).
    server = subprocess.Popen(["rping", "-s", "-a", ADDR, "-p", str(PORT + 1), "-C", "3"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: accept_queue(PORT + 1) is not None, 30, "rping's listener")
        client = subprocess.run(["rping", "-c", "-a", ADDR, "-p", str(PORT + 1), "-C", "3"],
                                capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stdout + client.stderr
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    server = subprocess.Popen(["rping", "-s", "-a", ADDR, "-p", str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: accept_queue(PORT) is not None, 30, "rping's listener")
        fault_injection(100, -1, function_text("kernel_accept"))
        mark = dmesg_mark()
        s = socket.create_connection((ADDR, PORT), timeout=T_CLOSE)
        wait_for(lambda: any("accept failed" in line for line in dmesg_since(mark)), 30,
                 "rsiw's accept to fail")
        assert accept_queue(PORT) == 1, "the connection left TCP's accept queue"
    finally:
        fault_injection(0, 0)
        # Killing rping destroys its listening id, and the listener's socket with the
        # child still queued.
        server.send_signal(signal.SIGKILL)
        server.wait()
    assert closed_by_peer(s), f"the queued connection stayed open {T_CLOSE} s"
    s.close()
    log = dmesg_since(mark)
    assert not any("lock order" in line for line in log), "\n".join(log)
    sh(f"rdma link del {DEV}")


NS = "rsiwlife"
NS_ADDR = "10.93.0.1"


def test_namespace_deleted_under_a_listener_and_connections(long_mpa_timeout):
    sh(f"ip netns add {NS}")
    procs = []
    try:
        sh(f"ip -n {NS} link set lo up")
        sh(f"ip -n {NS} link add nsdum0 type dummy")
        sh(f"ip -n {NS} addr add {NS_ADDR}/24 dev nsdum0")
        sh(f"ip -n {NS} link set nsdum0 up")
        sh(f"ip netns exec {NS} rdma link add rsiwns0 type rsiw netdev nsdum0")
        sh("modprobe rdma_ucm")
        run = ["ip", "netns", "exec", NS]
        procs.append(subprocess.Popen(run + ["rping", "-s", "-a", NS_ADDR, "-p", str(PORT)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_for(lambda: accept_queue(PORT, NS) is not None, 30, "rping's listener")
        # A live connection: an rping client pinging for as long as it is allowed to.
        procs.append(subprocess.Popen(run + ["rping", "-c", "-a", NS_ADDR, "-p", str(PORT),
                                             "-C", "1000000", "-S", "64"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_for(lambda: len(sh(f"ip netns exec {NS} ss -Htn state established "
                                f"'( sport = :{PORT} or dport = :{PORT} )'").stdout
                             .splitlines()) >= 2, 60, "rping's connection")
        # A second rping server on another port and a silent TCP peer of it: its CEP
        # waits for the MPA Request (the first server serves one client only).
        procs.append(subprocess.Popen(run + ["rping", "-s", "-a", NS_ADDR, "-p",
                                             str(PORT + 1)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_for(lambda: accept_queue(PORT + 1, NS) is not None, 30, "the second listener")
        procs.append(subprocess.Popen(
            run + ["python3", "-c",
                   "import socket, time\n"
                   f"s = socket.create_connection(('{NS_ADDR}', {PORT + 1}))\n"
                   "time.sleep(3600)\n"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_for(lambda: accept_queue(PORT + 1, NS) == 0 and len(
            sh(f"ip netns exec {NS} ss -Htn state established "
               f"'( sport = :{PORT + 1} )'").stdout.splitlines()) == 1,
            30, "rsiw to accept the silent connection")
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        sh(f"ip netns del {NS}", check=False)
    # The namespace (and with it nsdum0, and so rsiwns0) goes once rsiw's sockets are
    # closed: the CEPs with their listeners, the connection with its QP.
    wait_for(lambda: "rsiwns0" not in rdma_links(), 120,
             "the rsiw device to go with its namespace's netdev")


MAX_PENDING = 512
"""rsiw's limit of connections a listener holds while they wait for their MPA Request
(`MAX_PENDING` in rust/cm/listener.rs)."""
FLOOD = MAX_PENDING + 88
REAP_MS = 3000


def established_at(port):
    """rsiw's (server-side) TCP connections on local port `port`."""
    return len(sh(f"ss -Htn state established '( sport = :{port} )'").stdout.splitlines())


def test_connect_flood_is_bounded_and_reaped(long_mpa_timeout, dummy):
    """A connect flood against an rping listener: FLOOD TCP connections that never send
    an MPA Request. rsiw holds at most MAX_PENDING of them, closing the oldest to make
    room (so the first FLOOD - MAX_PENDING see their connection closed, the rest do
    not), and a legitimate rping client is still accepted and verifies its pings. Then,
    with the device's mpa_timeout_ms at 3 s, silent connections and ones that send an
    octet a second are all closed by the startup timer."""
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh(f"ip addr add {FLOOD_SRC}/24 dev {dummy}")
    sh("modprobe rdma_ucm")
    server = subprocess.Popen(["rping", "-s", "-v", "-V", "-a", ADDR, "-p", str(PORT),
                               "-C", "5"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    socks = []
    try:
        wait_for(lambda: accept_queue(PORT) is not None, 30, "rping's listener")
        for _ in range(FLOOD):
            socks.append(socket.create_connection((ADDR, PORT), timeout=T_CLOSE,
                                                  source_address=(FLOOD_SRC, 0)))
        wait_for(lambda: accept_queue(PORT) == 0 and established_at(PORT) <= MAX_PENDING,
                 90, f"rsiw to take the flood and hold at most {MAX_PENDING}")
        for s in socks:
            s.settimeout(0.05)
        closed = [i for i, s in enumerate(socks) if closed_by_peer(s)]
        assert closed == list(range(FLOOD - MAX_PENDING)), \
            f"closed: {len(closed)} {closed[:10]}...{closed[-10:]}"
        assert established_at(PORT) == MAX_PENDING
        client = subprocess.run(["rping", "-c", "-v", "-V", "-a", ADDR, "-p", str(PORT),
                                 "-C", "5"], capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stdout + client.stderr
        assert client.stdout.count("ping data: ") == 5, client.stdout
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
        server.wait()
        for s in socks:
            s.close()
    wait_for(lambda: established_at(PORT) == 0, 60, "the flood's connections to close")

    # The startup timer reaps silent and trickling peers.
    with open(f"/sys/class/infiniband/{DEV}/mpa_timeout_ms", "w") as f:
        f.write(f"{REAP_MS}\n")
    server = subprocess.Popen(["rping", "-s", "-a", ADDR, "-p", str(PORT + 2)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    socks = []
    try:
        wait_for(lambda: accept_queue(PORT + 2) is not None, 30, "rping's listener")
        for _ in range(60):
            s = socket.create_connection((ADDR, PORT + 2), timeout=T_CLOSE)
            s.settimeout(0)
            socks.append(s)
        trickle = socks[:10]
        deadline = time.monotonic() + REAP_MS / 1000 + T_CLOSE
        open_ = set(range(len(socks)))
        while open_ and time.monotonic() < deadline:
            for i in list(open_):
                try:
                    if socks[i].recv(1) == b"":
                        open_.discard(i)
                        continue
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    open_.discard(i)
                    continue
                if socks[i] in trickle:
                    try:
                        socks[i].send(b"M")
                    except (BrokenPipeError, ConnectionResetError):
                        open_.discard(i)
            time.sleep(1)
        assert not open_, f"{len(open_)} connections outlived mpa_timeout_ms {REAP_MS}"
    finally:
        server.kill()
        server.wait()
        for s in socks:
            s.close()
    sh(f"rdma link del {DEV}")
