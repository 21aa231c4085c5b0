# SPDX-License-Identifier: GPL-2.0
"""rsiw's connection manager through librdmacm (pyverbs, synchronous CMIDs): MPA startup
over kernel TCP, CONNECT_REQUEST with the peer's private data, reject with private data,
accept (the QP enters RTS on both sides) and disconnect from both sides at once."""
import errno
import os
import re
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import (dmesg_mark, dmesg_since, load_rsiw, port_counters, recv_exact, sh,
                      unload_rsiw, wait_for)

DEV = "rsiw0"
ADDR = "10.91.0.1"

SERVER = textwrap.dedent("""
    import sys
    import time
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
            req.accept(ConnParam(resources=4, depth=4))
            print("accepted", flush=True)
            if action == "hold":
                time.sleep(float(sys.argv[4]))
            req.disconnect()
        except PyverbsRDMAError as e:
            print(f"accept-errno {e.error_code}", flush=True)
    # librdmacm acknowledges the listener's CONNECT_REQUEST event when the new id is
    # destroyed, and destroying the listener waits for that acknowledgement: close the
    # new id first (interpreter shutdown would pick an arbitrary order and hang).
    req.close()
    listen.close()
    print("closed", flush=True)
    """)


@pytest.fixture
def cm_dev(rsiw, dummy):
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh("modprobe rdma_ucm")
    yield DEV


def server(port, action, hold_s=0):
    p = subprocess.Popen([sys.executable, "-c", SERVER, ADDR, str(port), action, str(hold_s)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout.readline().strip() == "listening"
    return p


CLIENT = textwrap.dedent("""
    import sys
    from pyverbs import cm_enums as ce
    from pyverbs.cmid import AddrInfo, CMID, ConnParam
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QPCap, QPInitAttr
    addr, port, pdata = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    src_port = sys.argv[4] if len(sys.argv) > 4 else None
    ai = AddrInfo(src=addr, src_service=src_port, dst=addr, dst_service=port,
                  port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    param = ConnParam(resources=4, depth=4)
    if pdata:
        param.set_private_data(pdata)
    try:
        cmid.connect(param)
        print("connected", flush=True)
        cmid.disconnect()
    except PyverbsRDMAError as e:
        print(f"connect-errno {e.error_code}", flush=True)
    cmid.close()
    """)


def connect(port, private_data=b"", src_port=None):
    """Connects from a separate process (librdmacm keeps every device's verbs context open
    for the life of a process, which would keep rsiw from unloading), from local port
    `src_port` if given (else one rdma_cm picks), and returns its output line:
    `connected` or `connect-errno N`."""
    args = [sys.executable, "-c", CLIENT, ADDR, str(port), private_data.decode()]
    if src_port is not None:
        args.append(str(src_port))
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


def test_reject_reaches_the_client(cm_dev):
    srv = server(7471, "reject")
    res = connect(7471, b"hello from rsiw")
    out, _ = srv.communicate(timeout=60)
    assert "rejected" in out and "closed" in out, out
    assert res == f"connect-errno {errno.ECONNREFUSED}"
    # Both ends are rsiw0: one connect, one incoming connection, one reject each way.
    c = port_counters(DEV)
    assert (c["connect_attempts"], c["incoming_connections"], c["mpa_rejects_sent"],
            c["mpa_rejects_received"], c["mpa_timeouts"]) == (1, 1, 1, 1, 0), c


REJECTED_CLIENT = textwrap.dedent("""
    import sys
    from pyverbs import cm_enums as ce
    from pyverbs import enums as e
    from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
    from pyverbs.qp import QPCap, QPInitAttr
    addr, port = sys.argv[1], sys.argv[2]
    ch = CMEventChannel()
    cmid = CMID(creator=ch)

    def event(want):
        ev = CMEvent(ch)
        got, pd = ev.event_type, ev.private_data
        ev.ack_cm_event()
        assert got == want, f"event {got}, not {want}"
        return pd

    cmid.resolve_addr(AddrInfo(src=addr, dst=addr, dst_service=port,
                               port_space=ce.RDMA_PS_TCP))
    event(ce.RDMA_CM_EVENT_ADDR_RESOLVED)
    cmid.resolve_route()
    event(ce.RDMA_CM_EVENT_ROUTE_RESOLVED)
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    cmid.connect(ConnParam(resources=1, depth=1))
    print("rejected", event(ce.RDMA_CM_EVENT_REJECTED).hex(), flush=True)
    cmid.close()
    ch.close()
    """)


@pytest.mark.parametrize("role", ["responder", "initiator"])
def test_reject_carries_private_data(cm_dev, role):
    """A reject's private data reaches the other side's consumer (RFC 5044 §7.1.2: an
    MPA Reply with R set carries the rejecting ULP's private data; RFC 6581 §9.1: after
    the IRD/ORD block in an enhanced frame). As Responder, rsiw's Reply to a raw enhanced
    MPA Request is a rejecting enhanced Rev 2 Reply whose private data is the IRD/ORD
    block and the consumer's octets; as Initiator, the consumer's REJECTED event carries
    the raw Responder's octets without the block."""
    if role == "responder":
        srv = server(7530, "reject")
        with socket.create_connection((ADDR, 7530), timeout=60) as s:
            s.sendall(mpa_frame(key=b"MPA ID Req Frame"))
            rep = recv_exact(s, 20)
            pd = recv_exact(s, int.from_bytes(rep[18:20], "big"))
        out, _ = srv.communicate(timeout=60)
        assert "rejected" in out and "closed" in out, out
        assert (rep[:16], rep[16] & 0x30, rep[17]) == (b"MPA ID Rep Frame", 0x30, 2), rep.hex()
        assert pd[4:] == b"rsiw says no", pd
        return

    def reject(conn):
        conn.sendall(mpa_frame(flags=0x30, pd=struct.pack(">HH", 1, 1) + b"peer says no"))
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass  # rsiw may close or reset
        conn.close()

    t, errs = raw_responder(7531, reject)
    p = subprocess.run([sys.executable, "-c", REJECTED_CLIENT, ADDR, "7531"],
                       capture_output=True, text=True, timeout=120)
    t.join(timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not errs, errs
    assert p.stdout.split() == ["rejected", b"peer says no".hex()], p.stdout + p.stderr
    c = port_counters(DEV)
    assert (c["connect_attempts"], c["mpa_rejects_received"]) == (1, 1), c


def test_accept_and_disconnect(cm_dev):
    srv = server(7472, "accept")
    res = connect(7472, b"hello from rsiw")
    out, _ = srv.communicate(timeout=60)
    assert "accepted" in out and "closed" in out, out
    assert res == "connected", res


DYNDBG = "/proc/dynamic_debug/control"


def test_dynamic_debug_traces_connection_setup(cm_dev):
    """With dynamic debug on for rsiw (`module rsiw +p`), a connection's setup and
    teardown are logged on both sides, each line naming the device and the peer: the TCP
    connect, the incoming connection, the MPA Request, the negotiated parameters, the
    close and why. Off again, a connection logs none of it. (Debian's kernel has
    CONFIG_DYNAMIC_DEBUG; the debug kernel does not, and skips this.)"""
    if not os.path.exists(DYNDBG):
        pytest.skip("no CONFIG_DYNAMIC_DEBUG in this kernel")
    want = [r"rsiw: rsiw0 qp \d+ 10\.91\.0\.1:7476: TCP connected from 10\.91\.0\.1:\d+",
            r"rsiw: rsiw0 10\.91\.0\.1:\d+: incoming TCP connection to 10\.91\.0\.1:7476",
            r"rsiw: rsiw0 10\.91\.0\.1:\d+: MPA Request received \(\d+ octets of private",
            r"rsiw: rsiw0 qp \d+ 10\.91\.0\.1:\S+: established: MPA revision 2, CRC off",
            r"rsiw: rsiw0 qp \d+ 10\.91\.0\.1:\S+: connection closed: "]
    sh(f"echo 'module rsiw +p' > {DYNDBG}")
    try:
        mark = dmesg_mark()
        srv = server(7476, "accept")
        res = connect(7476, b"hello from rsiw")
        out, _ = srv.communicate(timeout=60)
        assert res == "connected" and "closed" in out, (res, out)
        log = []

        def traced():
            log[:] = dmesg_since(mark)
            return all(any(re.search(w, line) for line in log) for w in want)

        try:
            wait_for(traced, timeout=30, what="the connection's debug lines")
        except AssertionError:
            raise AssertionError("want lines matching:\n" + "\n".join(want)
                                 + "\nkernel log:\n" + "\n".join(log)) from None
        established = [line for line in log if "established:" in line]
        assert len(established) == 2, established  # one per side
    finally:
        sh(f"echo 'module rsiw -p' > {DYNDBG}")
    mark = dmesg_mark()
    srv = server(7477, "accept")
    assert connect(7477) == "connected"
    srv.communicate(timeout=60)
    quiet = [line for line in dmesg_since(mark) if "established:" in line]
    assert not quiet, quiet


def test_consumer_killed_while_connected(cm_dev):
    """The accepting process is killed while connected: closing its rdma_cm file destroys
    the id, and iw_cm moves the connected QP to ERROR, which closes the connection from
    the QP's side. This once deadlocked rsiw on the QP's connection slot (a soft lockup of
    the dying process). The process must die promptly and the client see the end."""
    srv = server(7477, "hold", 120)
    script = textwrap.dedent("""
        import sys
        import time
        from pyverbs import cm_enums as ce
        from pyverbs.cmid import AddrInfo, CMID, ConnParam
        from pyverbs.pyverbs_error import PyverbsError
        from pyverbs.qp import QPCap, QPInitAttr
        ai = AddrInfo(src=sys.argv[1], dst=sys.argv[1], dst_service="7477",
                      port_space=ce.RDMA_PS_TCP)
        cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(cap=QPCap(max_send_wr=4,
                                                                  max_recv_wr=4)))
        cmid.connect(ConnParam(resources=4, depth=4))
        print("connected", flush=True)
        time.sleep(float(sys.argv[2]))
        try:
            cmid.disconnect()
        except PyverbsError:
            pass
        cmid.close()
        print("closed", flush=True)
        """)
    cli = subprocess.Popen([sys.executable, "-c", script, ADDR, "10"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    assert cli.stdout.readline().strip() == "connected"
    assert srv.stdout.readline().strip() == "accepted"
    srv.kill()
    try:
        srv.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the killed server did not die within 60 s")
    out, _ = cli.communicate(timeout=120)
    assert cli.returncode == 0 and "closed" in out, out


def test_connect_from_a_port_held_by_tcp(cm_dev):
    """rdma_cm gives an Initiator its local port from its own port space, which knows
    nothing of TCP's, and rsiw binds its TCP socket to that port (as the C siw does). A
    port that a TCP connection of the host holds on the same address fails the connect
    at once with EADDRINUSE and a message naming the port, with nothing sent; the device
    connects from another port right after."""
    lsock = socket.create_server((ADDR, 0))
    held = socket.create_connection(lsock.getsockname())
    accepted, _ = lsock.accept()
    port = held.getsockname()[1]
    try:
        srv = server(7486, "accept")
        mark = dmesg_mark()
        assert connect(7486, src_port=port) == f"connect-errno {errno.EADDRINUSE}"
        assert any(f"bind to {ADDR}:{port} failed (EADDRINUSE)" in l
                   for l in dmesg_since(mark)), dmesg_since(mark)
        assert port_counters(DEV)["connect_attempts"] == 0
        assert connect(7486) == "connected"
        out, _ = srv.communicate(timeout=60)
        assert "accepted" in out and "closed" in out, out
    finally:
        for s in (accepted, held, lsock):
            s.close()


def test_connect_to_nobody_is_refused(cm_dev):
    res = connect(7473)
    assert res in (f"connect-errno {errno.ECONNREFUSED}", f"connect-errno {errno.ECONNRESET}"), res


def test_listen_and_close_repeatedly(cm_dev):
    script = textwrap.dedent("""
        import sys
        from pyverbs import cm_enums as ce
        from pyverbs.cmid import AddrInfo, CMID
        for i in range(20):
            ai = AddrInfo(src=sys.argv[1], src_service="7480", port_space=ce.RDMA_PS_TCP,
                          flags=ce.RAI_PASSIVE)
            cmid = CMID(creator=ai)
            cmid.listen()
            cmid.close()
        print("listened 20 times", flush=True)
        """)
    p = subprocess.run([sys.executable, "-c", script, ADDR], capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.strip() == "listened 20 times", p.stdout + p.stderr


MPA_TIMEOUT_MS = 2000


def cm_dev_with(dummy, params):
    """rsiw reloaded with module parameters `params` and rsiw0 on `dummy` (a generator for
    fixtures: yields the device's name, removes both afterwards)."""
    unload_rsiw()
    load_rsiw(params)
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    sh("modprobe rdma_ucm")
    yield DEV
    sh(f"rdma link del {DEV}", check=False)
    unload_rsiw()


@pytest.fixture(params=["parameter", "sysfs"])
def cm_dev_timeout(dummy, request):
    """rsiw0 with a 2 s MPA startup timeout: the module parameter `mpa_timeout_ms`, or the
    device's own setting written after `rdma link add` (the parameter left at 10 s)."""
    if request.param == "parameter":
        yield from cm_dev_with(dummy, f"mpa_timeout_ms={MPA_TIMEOUT_MS}")
        return
    for dev in cm_dev_with(dummy, ""):
        with open(f"/sys/class/infiniband/{dev}/mpa_timeout_ms", "w") as f:
            f.write(str(MPA_TIMEOUT_MS))
        yield dev


def test_silent_initiator_times_out_at_the_listener(cm_dev_timeout):
    """A TCP client that connects to an rsiw listener and never sends its MPA Request is
    closed after mpa_timeout_ms; the listener is unaffected and accepts a real client."""
    srv = server(7474, "accept")
    mark = dmesg_mark()
    s = socket.create_connection((ADDR, 7474), timeout=60)
    t0 = time.monotonic()
    try:
        data = s.recv(100)
    except ConnectionResetError:
        data = b""
    elapsed = time.monotonic() - t0
    s.close()
    assert data == b"", f"rsiw sent {data!r} before any MPA Request"
    assert MPA_TIMEOUT_MS / 1000 * 0.9 <= elapsed < 30, f"closed after {elapsed:.1f} s"
    res = connect(7474)
    out, _ = srv.communicate(timeout=60)
    assert res == "connected" and "accepted" in out, (res, out)
    c = port_counters(DEV)
    assert (c["mpa_timeouts"], c["incoming_connections"], c["connect_attempts"]) == (1, 2, 1), c
    assert any(f"{DEV} " in l and "no MPA Request within mpa_timeout_ms" in l
               for l in dmesg_since(mark)), dmesg_since(mark)


def test_silent_responder_times_out_at_the_initiator(cm_dev_timeout):
    """A TCP server that accepts rsiw's connection, takes the MPA Request and never
    replies: after mpa_timeout_ms the consumer's connect fails with ETIMEDOUT."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, 7475))
    ls.listen(1)
    mark = dmesg_mark()
    t0 = time.monotonic()
    res = connect(7475)
    elapsed = time.monotonic() - t0
    ls.settimeout(10)
    conn, _ = ls.accept()
    conn.settimeout(10)
    got = conn.recv(100)
    conn.close()
    ls.close()
    assert got.startswith(b"MPA ID Req Frame"), got
    assert res == f"connect-errno {errno.ETIMEDOUT}", res
    assert MPA_TIMEOUT_MS / 1000 * 0.9 <= elapsed < 60, f"failed after {elapsed:.1f} s"
    c = port_counters(DEV)
    assert (c["mpa_timeouts"], c["connect_attempts"], c["incoming_connections"]) == (1, 1, 0), c
    assert any(f"{DEV} " in l and "no MPA Reply within mpa_timeout_ms" in l
               for l in dmesg_since(mark)), dmesg_since(mark)


def test_p2p_responder_without_rtr_terminates(cm_dev_timeout):
    """A raw Initiator asks for the peer-to-peer model with a zero-length Write RTR
    (RFC 6581 §9.2) and never sends the RTR: the rsiw Responder, which may send nothing
    before it, ends the connection after mpa_timeout_ms with a TERMINATE (layer 2 LLP,
    etype 0, MPA error 5 local catastrophic) and closes; the consumer still holds it."""
    hold_s = 12
    srv = server(7476, "hold", hold_s)
    s = socket.create_connection((ADDR, 7476), timeout=60)
    # Rev 2, S=1; PD: A (P2P) | IRD 1, C (zero-length Write RTR) | ORD 1.
    pd = struct.pack(">HH", 0x8000 | 1, 0x8000 | 1)
    s.sendall(b"MPA ID Req Frame" + bytes([0x10, 2]) + struct.pack(">H", len(pd)) + pd)
    t0 = time.monotonic()
    data = b""
    while True:
        try:
            chunk = s.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    elapsed = time.monotonic() - t0
    s.close()
    out, _ = srv.communicate(timeout=60)
    assert "accepted" in out, out
    assert data[:16] == b"MPA ID Rep Frame" and data[16] & 0x20 == 0, data
    pdl = int.from_bytes(data[18:20], "big")
    rep_pd = data[20:20 + pdl]
    assert len(rep_pd) >= 4 and rep_pd[0] & 0x80 and rep_pd[2] & 0x80, \
        f"Reply does not confirm P2P with a Write RTR: {rep_pd.hex()}"
    fpdu = data[20 + pdl:]
    assert len(fpdu) >= 22, f"no TERMINATE after the Reply: {fpdu.hex()}"
    assert fpdu[3] & 0x0F == 7 and int.from_bytes(fpdu[8:12], "big") == 2, \
        f"not a TERMINATE on QN 2: {fpdu.hex()}"
    assert (fpdu[20] >> 4, fpdu[20] & 0x0F, fpdu[21]) == (2, 0, 5), \
        f"TERMINATE is not LLP/0/5: {fpdu[20:22].hex()}"
    assert MPA_TIMEOUT_MS / 1000 * 0.9 <= elapsed < hold_s - 2, f"ended after {elapsed:.1f} s"


def raw_responder(port, behave):
    """A TCP server thread on `port` that accepts one connection, reads rsiw's MPA
    Request and then runs `behave(conn)`; returns (thread, list of failures)."""
    import threading
    errs = []
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ADDR, port))
    ls.listen(1)
    ls.settimeout(60)

    def serve():
        try:
            conn, _ = ls.accept()
            conn.settimeout(60)
            got = conn.recv(100)
            if not got.startswith(b"MPA ID Req Frame"):
                errs.append(f"not an MPA Request: {got!r}")
            behave(conn)
        except Exception as e:  # reported by the test
            errs.append(repr(e))
        finally:
            ls.close()

    t = threading.Thread(target=serve)
    t.start()
    return t, errs


def connect_fails_early(port, behave):
    """Connects to a `raw_responder(port, behave)`; asserts that the connect failed by
    what the Responder did, not by the startup timer (ETIMEDOUT). Returns the client's
    line."""
    t, errs = raw_responder(port, behave)
    res = connect(port)
    t.join(timeout=60)
    assert not errs, errs
    assert res.startswith("connect-errno ") and res != f"connect-errno {errno.ETIMEDOUT}", res
    return res


def mpa_reply():
    """An accepting MPA Reply, Rev 2 with the RFC 6581 block (IRD 1, ORD 1)."""
    pd = struct.pack(">HH", 1, 1)
    return b"MPA ID Rep Frame" + bytes([0x10, 2]) + struct.pack(">H", len(pd)) + pd


def test_slow_responder_times_out_once(cm_dev_timeout):
    """A Responder that sends its MPA Reply one octet every 0.4 s, slower than
    mpa_timeout_ms allows: the consumer's connect fails with ETIMEDOUT once, and the
    octets that still arrive after it report nothing more (iw_cm's contract: one
    CONNECT_REPLY; rsiw warns, which fails the test, on any event it would break)."""
    def dribble(conn):
        for b in mpa_reply():
            try:
                conn.sendall(bytes([b]))
            except OSError:
                return  # rsiw closed the connection after its timeout
            time.sleep(0.4)
        conn.close()

    t, errs = raw_responder(7477, dribble)
    t0 = time.monotonic()
    res = connect(7477)
    elapsed = time.monotonic() - t0
    t.join(timeout=60)
    assert not errs, errs
    assert res == f"connect-errno {errno.ETIMEDOUT}", res
    assert MPA_TIMEOUT_MS / 1000 * 0.9 <= elapsed < 30, f"failed after {elapsed:.1f} s"


def test_responder_reset_during_startup(cm_dev_timeout):
    """A Responder that resets the connection after reading the MPA Request: the
    consumer's connect fails by the reset, not the startup timer (a CONNECT_REPLY with
    an error, never a CLOSE)."""
    def reset(conn):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    connect_fails_early(7478, reset)


def test_half_reply_then_close(cm_dev_timeout):
    """A Responder that sends half of its MPA Reply and then closes (FIN): the connect
    fails with one CONNECT_REPLY before the startup timer, and nothing follows it."""
    def half(conn):
        conn.sendall(mpa_reply()[:10])
        conn.close()

    t, errs = raw_responder(7479, half)
    res = connect(7479)
    t.join(timeout=60)
    assert not errs, errs
    assert res.startswith("connect-errno "), res


REPLY_AND_FIN_ROUNDS = 4


def test_reply_and_fin_at_once_establish(cm_dev):
    """A Responder whose MPA Reply is followed at once by its FIN (a peer with nothing to
    say, or one that sends and half-closes): the Reply came before the FIN, so every
    connect succeeds, and the connection then ends. In alternate rounds the Reply goes
    out after rsiw's Request arrived and without waiting for it, so the FIN lands at
    different points of rsiw's handling of the Reply. The narrowest of them, the Reply
    and the FIN reaching the socket's backlog together while rsiw's work item reads the
    socket, this test cannot hit at will: `Cep::receive` (rust/cm/cep.rs) takes the TCP
    state before its read for it, so a FIN seen there follows only data it read."""
    import threading
    port = 7520
    ls = socket.create_server((ADDR, port))
    ls.settimeout(60)
    errs = []

    def serve():
        try:
            for i in range(REPLY_AND_FIN_ROUNDS):
                conn, _ = ls.accept()
                with conn:
                    conn.settimeout(60)
                    if i % 2:
                        conn.sendall(mpa_reply())
                        conn.shutdown(socket.SHUT_WR)
                    got = conn.recv(100)
                    if not got.startswith(b"MPA ID Req Frame"):
                        errs.append(f"round {i}: not an MPA Request: {got!r}")
                    if i % 2 == 0:
                        conn.sendall(mpa_reply())
                        conn.shutdown(socket.SHUT_WR)
                    # Until rsiw closes too (how it closes is not this test's matter).
                    try:
                        while conn.recv(4096):
                            pass
                    except OSError:
                        pass
        except Exception as e:  # reported by the test
            errs.append(repr(e))

    t = threading.Thread(target=serve)
    t.start()
    try:
        results = [connect(port) for _ in range(REPLY_AND_FIN_ROUNDS)]
    finally:
        t.join(timeout=120)
        ls.close()
    assert not errs, errs
    # The client's own disconnect comes after the peer's FIN has closed the connection,
    # or while it closes: it succeeds too (librdmacm moves the QP to SQD first; a QP
    # whose connection is closing has nothing left to do), so the client prints nothing
    # after "connected".
    failed = [(i, r) for i, r in enumerate(results) if r != "connected"]
    assert not failed, f"connects or disconnects that failed (round, client's lines): {failed}"
    c = port_counters(DEV)
    assert (c["connect_attempts"], c["mpa_timeouts"]) == (REPLY_AND_FIN_ROUNDS, 0), c


def mpa_frame(key=b"MPA ID Rep Frame", flags=0x10, rev=2, pd=struct.pack(">HH", 1, 1),
              pd_len=None):
    """Any MPA startup frame: key, flags (M C R S), revision, PD_Length (default: the
    private data's length) and private data."""
    n = len(pd) if pd_len is None else pd_len
    return key + bytes([flags, rev]) + struct.pack(">H", n) + pd


# (name, the Responder's bytes after rsiw's MPA Request): Replies RFC 5044 §7.1.2 and
# RFC 6581 §9 call improperly formatted, or that reject.
BAD_REPLIES = [
    ("bad_key", mpa_frame(key=b"MPA ID Rep Fram\x00")),
    ("request_key", mpa_frame(key=b"MPA ID Req Frame")),
    ("octets_before_the_reply", b"\x00" * 4 + mpa_frame()),
    ("rev_3", mpa_frame(rev=3)),
    ("pd_length_513", mpa_frame(pd=struct.pack(">HH", 1, 1) + bytes(509))),
    ("pd_length_beyond_the_frame", mpa_frame(pd_len=100, pd=bytes(10))),
    ("pd_shorter_than_the_ird_ord_block", mpa_frame(pd=b"\x00\x01")),
    ("truncated_header", mpa_frame()[:9]),
    ("reject", mpa_frame(flags=0x30)),
]


def test_bad_mpa_replies_fail_the_connect_once(cm_dev_timeout):
    """A Responder that answers rsiw's MPA Request with a malformed or rejecting Reply
    (then FIN), one connection per case: the consumer's connect fails with an error other
    than the startup timer's ETIMEDOUT, and reports nothing more (iw_cm's contract: one
    CONNECT_REPLY; rsiw warns, which fails the test, on any event that would break it). A
    rejecting Reply is ECONNREFUSED."""
    errs = []
    for i, (name, frame) in enumerate(BAD_REPLIES):
        def answer(conn, frame=frame):
            try:
                conn.sendall(frame)
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(4096):
                    pass
            except OSError:
                pass  # rsiw may close (or reset, leaving octets unread) at any point
            conn.close()

        port = 7480 + i
        t, terrs = raw_responder(port, answer)
        res = connect(port)
        t.join(timeout=60)
        want = f"connect-errno {errno.ECONNREFUSED}" if name == "reject" else None
        if (terrs or not res.startswith("connect-errno ")
                or res == f"connect-errno {errno.ETIMEDOUT}" or (want and res != want)):
            errs.append(f"{name}: {res} {terrs}")
    assert not errs, "\n".join(errs)


@pytest.fixture
def cm_dev_p2p_write(dummy):
    """rsiw0 with the peer-to-peer model on (`peer_to_peer=1`) offering only the
    zero-length Write RTR (`p2p_rtr=1`), and a 2 s MPA startup timeout."""
    yield from cm_dev_with(dummy, f"peer_to_peer=1 p2p_rtr=1 mpa_timeout_ms={MPA_TIMEOUT_MS}")


def test_reply_with_no_matching_rtr_terminates(cm_dev_p2p_write):
    """rsiw as peer-to-peer Initiator offers a zero-length Write RTR only; the Responder's
    Reply accepts with the Read RTR instead (RFC 6581 §9.2: a Responder with no match
    still names one of its own). rsiw sends, instead of its RTR, a TERMINATE (layer 2
    LLP, etype 0, MPA error 7: no matching RTR, §9.3), closes, and the consumer's connect
    fails by it, not by the startup timer."""
    got = {}

    def no_match(conn):
        # PD: A (P2P) | IRD 1, D (zero-length Read RTR) | ORD 1.
        conn.sendall(mpa_frame(pd=struct.pack(">HH", 0x8000 | 1, 0x4000 | 1)))
        data = b""
        while True:
            try:
                chunk = conn.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        got["data"] = data
        conn.close()

    connect_fails_early(7495, no_match)
    fpdu = got.get("data", b"")
    assert len(fpdu) >= 24, f"no TERMINATE after the Reply: {fpdu.hex()}"
    assert fpdu[3] & 0x0F == 7 and int.from_bytes(fpdu[8:12], "big") == 2, \
        f"not a TERMINATE on QN 2: {fpdu.hex()}"
    assert (fpdu[20] >> 4, fpdu[20] & 0x0F, fpdu[21]) == (2, 0, 7), \
        f"TERMINATE is not LLP/0/7: {fpdu[20:22].hex()}"
    ulen = int.from_bytes(fpdu[:2], "big")
    assert len(fpdu) == 2 + ulen + (-(2 + ulen)) % 4 + 4, f"more than the TERMINATE: {fpdu.hex()}"


VICTIM = textwrap.dedent("""
    import sys
    from pyverbs import enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    ctx = Context(name=sys.argv[1])
    pd = PD(ctx)
    cq = CQ(ctx, 8)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_INIT
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
    print(qp.qp_num, flush=True)
    sys.stdin.readline()
    print("state", qp.query(e.IBV_QP_STATE)[0].qp_state, flush=True)
    for obj in (qp, cq, pd, ctx):
        obj.close()
    print("destroyed", flush=True)
    """)

THIEF = textwrap.dedent("""
    import sys
    from pyverbs import cm_enums as ce
    from pyverbs.cmid import AddrInfo, CMID, ConnParam
    from pyverbs.pyverbs_error import PyverbsRDMAError
    addr, port, role, qpn = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    param = ConnParam(resources=1, depth=1, qp_num=qpn)
    if role == "connect":
        cid = CMID(creator=AddrInfo(src=addr, dst=addr, dst_service=port,
                                    port_space=ce.RDMA_PS_TCP))
        try:
            cid.connect(param)
            print("connected", flush=True)
        except PyverbsRDMAError as ex:
            print(f"connect-errno {ex.error_code}", flush=True)
        cid.close()
    else:
        ls = CMID(creator=AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP,
                                   flags=ce.RAI_PASSIVE))
        ls.listen()
        print("listening", flush=True)
        req = ls.get_request()
        try:
            req.accept(param)
            print("accepted", flush=True)
        except PyverbsRDMAError as ex:
            print(f"accept-errno {ex.error_code}", flush=True)
        req.close()
        ls.close()
    """)


@pytest.mark.parametrize("role", ["connect", "accept"])
def test_another_process_cannot_take_a_qp(cm_dev, role):
    """A user QP serves only the process that created it: another process's rdma_connect
    or rdma_accept naming its QP number (librdmacm passes any number to iw_cm) fails with
    EINVAL and a message naming the cause, and the owner's QP stays in INIT, unconnected,
    and is destroyed at once (Documentation/rsiw.rst, *Security*)."""
    port = 7540 if role == "connect" else 7541
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, DEV], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        qpn = int(victim.stdout.readline())
        mark = dmesg_mark()
        if role == "connect":
            srv = server(port, "accept")
            p = subprocess.run([sys.executable, "-c", THIEF, ADDR, str(port), role, str(qpn)],
                               capture_output=True, text=True, timeout=120)
            srv.kill()
            srv.wait()
        else:
            thief = subprocess.Popen([sys.executable, "-c", THIEF, ADDR, str(port), role,
                                      str(qpn)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
            assert thief.stdout.readline().strip() == "listening"
            res = connect(port)
            out, _ = thief.communicate(timeout=120)
            p = subprocess.CompletedProcess(thief.args, thief.returncode, out, "")
            assert res != "connected", res
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.strip() == f"{role}-errno {errno.EINVAL}", p.stdout + p.stderr
        log = "\n".join(dmesg_since(mark))
        assert re.search(rf"QP {qpn} belongs to another process", log), log
        out, _ = victim.communicate("check\n", timeout=60)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    # IBV_QPS_INIT: untouched by the other process's attempt.
    assert out.split() == ["state", "1", "destroyed"], out
