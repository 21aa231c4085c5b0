# SPDX-License-Identifier: GPL-2.0
"""Kernel consumer tests: NVMe over Fabrics (RDMA) through rsiw0, and a hostile peer
against its kernel QPs, their DMA MRs and their fast-registration MRs (both roles).

An nvmet-rdma target exports a memory-backed null_blk namespace on rsiw0's address; nvme-rdma in the
same guest connects to it through rsiw0 (loopback through the kernel's TCP stack), and fio
writes and verifies data on the resulting block device. This drives the kernel ULP paths
rsiw serves besides user space: fast-registration MRs (REG_MR work requests, map_mr_sg),
RDMA Read with Local Invalidate on the target (the rdma_rw API on iWARP), Send with
Invalidate and LOCAL_INV on the host, and kernel QPs progressed by the connection worker.

RSIW_TRANSPORT_SELFTEST=siw runs the same steps over the C siw (to check the test itself).
"""
import glob
import json
import os
import re
import socket
import struct
import subprocess
import time

import pytest

from conftest import load_rdma_core, module_loaded, sh, wait_for
from test_cm import BAD_REPLIES
from test_hostile import (CASES, bad_requests_errors, fpdus, mpa_frame, read_request, read_response,
                          recv_all, recv_exact, send, send_inv, terminate, terminate_of,
                          untagged, with_crc, write)

STANDIN = os.environ.get("RSIW_TRANSPORT_SELFTEST", "") == "siw"
SIW_KO = os.environ.get("RSIW_SIW_KO", "")
RSIW_KO = os.environ.get("RSIW_KO", "")
MOD = "siw" if STANDIN else "rsiw"
NET, ADDR = "rsnvm0", "10.95.0.1"
NQN = "nqn.2026-11.org.rsiw:smoke"
PORT = "4420"
CFG = "/sys/kernel/config/nvmet"
BDEV = "/dev/nullb0"
T_IO = 900  # fio under TCG with KASAN: small but not quick


def rmmod(name):
    if module_loaded(name):
        sh(f"rmmod {name}", timeout=180)
        assert not module_loaded(name), f"{name} still loaded after rmmod"


def names_nqn(dev):
    """Whether sysfs device directory `dev` has a `subsysnqn` that is NQN."""
    try:
        with open(f"{dev}/subsysnqn") as f:
            return f.read().strip() == NQN
    except OSError:
        return False


def nvme_block_devices():
    """The block devices of namespaces of subsystem NQN: /sys/block/nvmeXnY whose device
    (the controller, or with native multipath the subsystem head) names NQN. Multipath's
    per-path nvmeXcYnZ devices are hidden (no /dev node) and not returned."""
    return [os.path.basename(b) for b in glob.glob("/sys/block/nvme*n*")
            if re.fullmatch(r"nvme\d+n\d+", os.path.basename(b)) and names_nqn(f"{b}/device")]


def controllers():
    """The NVMe controllers connected to subsystem NQN."""
    return [c for c in glob.glob("/sys/class/nvme/nvme*") if names_nqn(c)]


@pytest.fixture
def nvmet_over_rdma():
    """rsiw0 on a dummy netdev, an nvmet-rdma port on its address exporting a 1 GiB
    memory-backed null_blk device; all of it (and the modules) removed afterwards.
    (Not a file on the guest's /tmp: that is an overlayfs whose inodes report a block size
    of 1 octet, and nvmet then exports an LBA size nvme refuses.)"""
    load_rdma_core()
    if STANDIN:
        if not module_loaded("siw"):
            sh(f"insmod {SIW_KO}" if SIW_KO else "modprobe siw")
    else:
        assert RSIW_KO, "RSIW_KO is not set (run the tests through tests/vm-run.sh)"
        rmmod("rsiw")
        sh(f"insmod {RSIW_KO}")
    sh(f"ip link add {NET} type dummy && ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    sh(f"rdma link add rsiw0 type {MOD} netdev {NET}")
    sh("modprobe -a nvmet nvmet-rdma nvme-rdma")
    if not os.path.isdir(CFG):
        sh("mount -t configfs none /sys/kernel/config", check=False)
    rmmod("null_blk")
    sh("modprobe null_blk nr_devices=1 memory_backed=1 gb=1 bs=4096")
    wait_for(lambda: os.path.exists(BDEV), timeout=30, what=BDEV)
    sub = f"{CFG}/subsystems/{NQN}"
    port = f"{CFG}/ports/1"
    sh(f"mkdir {sub} && echo 1 > {sub}/attr_allow_any_host")
    sh(f"mkdir {sub}/namespaces/1 && echo -n {BDEV} > {sub}/namespaces/1/device_path")
    sh(f"echo 1 > {sub}/namespaces/1/enable")
    sh(f"mkdir {port}")
    for k, v in (("trtype", "rdma"), ("adrfam", "ipv4"), ("traddr", ADDR), ("trsvcid", PORT)):
        sh(f"echo -n {v} > {port}/addr_{k}")
    sh(f"ln -s {sub} {port}/subsystems/{NQN}")
    yield
    for ctrl in controllers():
        sh(f"echo 1 > {ctrl}/delete_controller", check=False, timeout=180)
    sh(f"rm -f {port}/subsystems/{NQN}", check=False)
    sh(f"rmdir {port}", check=False)
    sh(f"echo 0 > {sub}/namespaces/1/enable", check=False)
    sh(f"rmdir {sub}/namespaces/1 && rmdir {sub}", check=False)
    for m in ("nvme_rdma", "nvmet_rdma", "null_blk"):
        rmmod(m)
    sh("rdma link del rsiw0", check=False, timeout=180)
    sh(f"ip link del {NET}", check=False)
    assert "link rsiw0/" not in sh("rdma link show", check=False).stdout
    rmmod(MOD)


def nvme_connect(extra=""):
    """Connects nvme-rdma to the target (fabrics options `extra` added); returns the
    namespace's block device path once it exists."""
    opts = f"transport=rdma,traddr={ADDR},trsvcid={PORT},nqn={NQN}{extra}"
    sh(f"echo {opts} > /dev/nvme-fabrics", timeout=300)
    wait_for(lambda: nvme_block_devices(), timeout=60, what="the NVMe namespace block device")
    dev = "/dev/" + sorted(nvme_block_devices())[0]
    try:
        wait_for(lambda: os.path.exists(dev), timeout=120, what=dev)
    except AssertionError:
        diag = sh("ls -l /dev/nvme* /sys/class/nvme/*/ /sys/block; dmesg | grep -i -E 'nvme|rsiw' | tail -40",
                  check=False).stdout
        raise AssertionError(f"{dev} did not appear:\n{diag}")
    return dev


def fio_verify_argv(dev, size="8M"):
    return ["fio", "--name=rsiw-verify", f"--filename={dev}", "--direct=1",
            "--ioengine=libaio", "--iodepth=8", "--rw=randwrite", "--bsrange=4k-128k",
            f"--size={size}", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
            "--verify_state_save=0", "--randrepeat=0", "--output-format=json"]


def check_fio(dev, rc, out, err, t0, size_kb):
    """Checks a fio_verify_argv run: it exited 0, wrote and verified `size_kb` KiB."""
    assert rc == 0, f"fio failed ({rc}):\n{out}\n{err}"
    job = json.loads(out[out.index("{"):])["jobs"][0]
    read_kb, write_kb = job["read"]["io_kbytes"], job["write"]["io_kbytes"]
    print(f"fio on {dev}: wrote {write_kb} KiB, verified {read_kb} KiB in {time.monotonic() - t0:.0f} s")
    assert job["error"] == 0, out
    assert write_kb >= size_kb, out
    assert read_kb >= size_kb, out


def test_nvme_rdma_fio_verify(nvmet_over_rdma):
    """nvme-rdma connects to nvmet-rdma through rsiw0; fio writes 4 KiB .. 128 KiB blocks
    with CRC32c verification headers and reads them back; the I/O completes without
    error and every block verifies."""
    dev = nvme_connect()
    t0 = time.monotonic()
    p = sh(" ".join(fio_verify_argv(dev)), check=False, timeout=T_IO)
    check_fio(dev, p.returncode, p.stdout, p.stderr, t0, 8 * 1024)
    # Data written through the fabric landed in the target's device.
    with open(BDEV, "rb") as f:
        assert f.read(1 << 20).strip(b"\0"), f"no data reached the target's {BDEV}"


def writes_in_flight(dev):
    with open(f"/sys/block/{os.path.basename(dev)}/inflight") as f:
        return int(f.read().split()[1])


def ctrl_state(ctrl):
    with open(f"{ctrl}/state") as f:
        return f.read().strip()


def test_nvme_rdma_fio_4_queues_reset(nvmet_over_rdma):
    """nvme-rdma with 4 I/O queues (2 default, 1 write, 1 poll: the guest has 2 vCPUs,
    which cap the default queues) through rsiw0; while fio writes and verifies, the host
    resets the controller twice (every queue's QP is torn down and connected again): each
    time the controller goes live again, and fio completes with every block verified."""
    dev = nvme_connect(",nr_io_queues=2,nr_write_queues=1,nr_poll_queues=1")
    (ctrl,) = controllers()
    with open(f"{ctrl}/queue_count") as f:
        queues = int(f.read())
    assert queues == 5, f"{queues - 1} I/O queues (and the admin queue), want 4"
    qps = sh("rdma resource show qp", check=False).stdout
    print(qps)
    t0 = time.monotonic()
    fio = subprocess.Popen(fio_verify_argv(dev, "16M"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        for n in range(2):
            # Reset once fio has I/O in flight (its write phase) or when it is done.
            wait_for(lambda: fio.poll() is not None or writes_in_flight(dev) > 0,
                     timeout=120, what="fio's writes in flight")
            sh(f"echo 1 > {ctrl}/reset_controller", check=False, timeout=180)
            wait_for(lambda: ctrl_state(ctrl) == "live", timeout=180,
                     what=f"{ctrl} live again after reset {n + 1}")
            print(f"reset {n + 1}: live again after {time.monotonic() - t0:.0f} s "
                  f"(fio {'running' if fio.poll() is None else 'done'})")
        out, err = fio.communicate(timeout=T_IO)
    finally:
        if fio.poll() is None:
            fio.kill()
            fio.wait()
    check_fio(dev, fio.returncode, out, err, t0, 16 * 1024)
    assert ctrl_state(ctrl) == "live"
    print(sh("dmesg | grep -E 'nvme nvme[0-9]+:' | tail -20", check=False).stdout)



PORT_CYCLES = 8


def set_up_port(port):
    """Creates nvmet port `port` on rsiw0's address and links the subsystem to it."""
    sh(f"mkdir -p {port}")
    for k, v in (("trtype", "rdma"), ("adrfam", "ipv4"), ("traddr", ADDR), ("trsvcid", PORT)):
        sh(f"echo -n {v} > {port}/addr_{k}")
    sh(f"ln -s {CFG}/subsystems/{NQN} {port}/subsystems/{NQN}", timeout=180)


@pytest.mark.parametrize("how", ["unlink", "rmdir"])
def test_nvme_rdma_port_cycles(nvmet_over_rdma, how):
    """While fio writes and verifies through the host, the target's port is torn down
    and set up again PORT_CYCLES times: the subsystem unlinked from the port and linked
    again (`unlink`), or the port removed and created again (`rmdir`). Either way
    nvmet-rdma destroys its listener and disconnects every queue, then listens again on
    the same address and port. The host keeps reconnecting (reconnect_delay 1 s, no loss
    timeout): each time its controller leaves live and comes back, and fio completes
    with every block verified."""
    port = f"{CFG}/ports/1"
    dev = nvme_connect(",reconnect_delay=1,ctrl_loss_tmo=-1")
    (ctrl,) = controllers()
    t0 = time.monotonic()
    fio = subprocess.Popen(fio_verify_argv(dev, "32M"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        for n in range(PORT_CYCLES):
            wait_for(lambda: fio.poll() is not None or writes_in_flight(dev) > 0,
                     timeout=120, what="fio's writes in flight")
            sh(f"rm -f {port}/subsystems/{NQN}", timeout=180)
            if how == "rmdir":
                sh(f"rmdir {port}", timeout=180)
            wait_for(lambda: ctrl_state(ctrl) != "live", timeout=180,
                     what=f"{ctrl} to leave live after teardown {n + 1}")
            if how == "rmdir":
                set_up_port(port)
            else:
                sh(f"ln -s {CFG}/subsystems/{NQN} {port}/subsystems/{NQN}", timeout=180)
            try:
                wait_for(lambda: ctrl_state(ctrl) == "live", timeout=180,
                         what=f"{ctrl} live again after setup {n + 1}")
            except AssertionError:
                raise AssertionError(
                    f"cycle {n + 1}: {ctrl} stayed {ctrl_state(ctrl)}\n"
                    + sh("rdma res show cm_id; rdma -dd res show cm_id; ss -tan; "
                         "dmesg | grep -E 'nvme|rsiw' | tail -40", check=False).stdout) from None
            print(f"cycle {n + 1}: live again after {time.monotonic() - t0:.0f} s "
                  f"(fio {'running' if fio.poll() is None else 'done'})")
        out, err = fio.communicate(timeout=T_IO)
    finally:
        if fio.poll() is None:
            fio.kill()
            fio.wait()
    check_fio(dev, fio.returncode, out, err, t0, 32 * 1024)


# A hostile iWARP peer against a kernel consumer: nvmet-rdma as Responder (the peer
# connects to its port) and nvme-rdma as Initiator (it connects to the peer). Their QPs
# live on a kernel PD whose DMA MR (`local_dma_lkey`, read from `rdma res show pd`) spans
# all of kernel memory with TO = kernel virtual address. No consumer asked for
# IB_PD_UNSAFE_GLOBAL_RKEY, so the DMA MR grants no remote access: Writes, Read Requests,
# Read Responses and Send with Invalidate aimed at it must end in the RFC's TERMINATE with
# nothing placed. The other FPDU classes of test_hostile.py that need no STag of the
# consumer's (untagged buffers, versions, opcodes, framing, CRC, a TERMINATE mid-message)
# run against the same kernel QPs; the Read Response classes run against the RDMA Read
# nvmet-rdma issues for a Connect command's data; the tagged classes (bounds, wrap, other
# key, other PD, invalidated) meet the MR nvme-rdma registers for its Connect command's
# data, with the peer as the host's NVMe target; malformed MPA Requests and Replies meet
# nvmet's listener and the host's connect. KASAN and the kernel_clean fixture watch the
# kernel (`make check` runs them on the debug kernel).
PEER_PORT = 4421
# A kernel direct-map address; rsiw must refuse it before it is ever resolved.
KVA = 0xFFFF888000100000

# test_hostile.CASES whose verdict does not depend on an MR of the consumer's: they run
# against the kernel QPs with the DMA STag and KVA wherever a header names an STag and TO
# (the version and opcode checks come before the STag's). nvmet's admin queue receives
# 64 octets (a command), the host's 16 (a completion): a 65-octet Send is too long for
# both.
STAG_FREE = (
    "write_unknown_stag", "send_inv_unknown_stag", "send_invalid_qn",
    "send_msn_out_of_window", "send_mo_not_reached", "send_longer_than_the_receive",
    "write_ddp_version_2", "send_ddp_version_2", "write_rdmap_version_2",
    "opcode_unassigned", "immediate_data_not_negotiated", "write_untagged", "send_tagged",
    "ulpdu_shorter_than_the_header", "mpa_request_again",
)


def kernel_cases():
    """[(name, FPDU builder given the kernel PD's DMA STag, the TERMINATE (layer, etype,
    ecode) rsiw must send or None for a close without one, whether the peer negotiates
    CRC)] for a kernel consumer's QP."""

    def keys(key):
        return {"wkey": key, "rkey": key, "lkey": key, "fkey": key, "addr": KVA, "faddr": KVA}

    cases = [
        ("write_dma_mr", lambda k: write(k, KVA, b"\xEE" * 16), (1, 1, 0x00), False),
        ("read_request_dma_mr", lambda k: read_request(k, KVA, 16), (0, 1, 0x02), False),
        ("read_response_dma_mr", lambda k: read_response(k, KVA, b"\xEE" * 16), (0, 2, 0x06),
         False),
        ("read_response_dma_mr_not_last",
         lambda k: read_response(k, KVA, b"\xEE" * 16, last=False), (0, 2, 0x06), False),
        ("send_inv_dma_mr", lambda k: send_inv(k, b"\xEE" * 16), (0, 1, 0x09), False),
    ]
    cases += [(name, lambda k, b=build: b(keys(k)), want, False)
              for name, build, want, _ in CASES if name in STAG_FREE]
    cases += [
        # CRC negotiated (the peer's C=1): a wrong CRC is an LLP error (RFC 5040 Figure
        # 10) and wins over the DMA MR's protection error of the same FPDU.
        ("crc_bad_send", lambda k: with_crc(send(b"\xEE" * 16), corrupt=True), (2, 0, 0x02),
         True),
        ("crc_bad_write_dma_mr",
         lambda k: with_crc(write(k, KVA, b"\xEE" * 16), corrupt=True), (2, 0, 0x02), True),
        # The first segment of a Send, then a TERMINATE: closed without an answer.
        ("terminate_mid_message",
         lambda k: untagged(3, 0, 1, 0, b"\xEE" * 16, last=False) + terminate(), None, False),
    ]
    assert len(cases) == 5 + len(STAG_FREE) + 3, [c[0] for c in cases]
    return cases


def kernel_dma_lkeys():
    """The `local_dma_lkey` of every kernel PD on rsiw0 (`rdma res show pd`)."""
    out = sh("rdma -j -d res show pd").stdout
    keys = []
    for e in json.loads(out or "[]"):
        k = e.get("local_dma_lkey")
        if e.get("ifname") == "rsiw0" and k is not None and "pid" not in e:
            # iproute2 prints it in hex, without 0x.
            keys.append(int(k, 16) if isinstance(k, str) else int(k))
    return keys


def nvme_mpa_private_data(reply):
    """RFC 6581 IRD/ORD block (IRD 1, ORD 1) and the nvme-rdma CM private data: for a
    Request `struct nvme_rdma_cm_req` (format 1.0, admin queue 0, host receive queue 32,
    send queue size 31), for a Reply `struct nvme_rdma_cm_rep` (format 1.0, 32 entries)."""
    block = struct.pack(">HH", 1, 1)
    if reply:
        return block + struct.pack("<HH28x", 0, 32)
    return block + struct.pack("<HHHHH22x", 0, 0, 32, 31, 0xFFFF)


def nvmet_conn(crc=False):
    """A connection to nvmet's port with MPA startup done (revision 2, nvme-rdma's private
    data, C=1 if `crc`: CRC in use, RFC 5044 §7.1); returns the socket."""
    s = socket.create_connection((ADDR, int(PORT)), timeout=60)
    s.sendall(mpa_frame(flags=0x50 if crc else 0x10, pd=nvme_mpa_private_data(False)))
    rep = recv_exact(s, 20)
    assert rep[:16] == b"MPA ID Rep Frame" and not rep[16] & 0x20, rep.hex()
    recv_exact(s, int.from_bytes(rep[18:20], "big"))
    return s


def sole_terminate_errors(name, data, want):
    """What is wrong with `data`, all rsiw sent nvmet's peer in case `name`: it must be one
    TERMINATE of `want` (layer, etype, ecode), or nothing if `want` is None."""
    if want is None:
        return [f"{name}: rsiw answered the peer's TERMINATE with {data.hex()}"] if data else []
    try:
        got = terminate_of(data)[:3]
    except AssertionError as e:
        return [f"{name}: {e}"]
    return [f"{name}: TERMINATE {got}, want {want}"] if got != want else []


def last_terminate_errors(name, data, want, before):
    """What is wrong with `data`, all the nvme host's rsiw sent the peer in case `name`:
    the host's own FPDUs (RDMAP opcodes in `before`), then one TERMINATE of `want`
    (layer, etype, ecode) last; no TERMINATE at all if `want` is None."""
    frames = fpdus(data)
    ops = [op for op, _ in frames]
    if want is None:
        return [f"{name}: rsiw answered the peer's TERMINATE: FPDUs {ops}"] if 7 in ops else []
    if not ops or ops[-1] != 7 or ops.count(7) != 1 or set(ops[:-1]) - set(before):
        return [f"{name}: not one TERMINATE last after {sorted(before)}, FPDUs {ops}"]
    t = frames[-1][1]
    got = (t[20] >> 4, t[20] & 0x0F, t[21])
    return [f"{name}: TERMINATE {got}, want {want}"] if got != want else []


def test_hostile_peer_against_nvmet(nvmet_over_rdma):
    """rsiw under nvmet-rdma (Responder), every class of kernel_cases() on a connection of
    its own: one TERMINATE with the RFC's layer/etype/ecode (or, after the peer's
    TERMINATE, nothing), then the connection closes and nvmet frees the queue. nvmet
    accepts with IRD 0 (hosts never read from a target), so its Read Request is past IRD
    (DDP 1/2/0x03) before its source is looked at."""
    errs = []
    for name, build, want, crc in kernel_cases():
        if name == "read_request_dma_mr":
            want = (1, 2, 0x03)
        s = nvmet_conn(crc)
        try:
            keys = kernel_dma_lkeys()
            assert keys, "no kernel PD on rsiw0 after nvmet accepted"
            s.sendall(build(keys[-1]))
            data = recv_all(s)
        finally:
            s.close()
        errs += sole_terminate_errors(name, data, want)
        # nvmet frees the queue (and, with the last one, its PD) asynchronously.
        wait_for(lambda: not kernel_dma_lkeys(), timeout=60, what="nvmet's PD to go")
    assert not errs, "\n".join(errs)


# The peer's buffer for the Connect command's data, as its keyed SGL names it.
CONNECT_STAG, CONNECT_TO = 0x5EC0DE01, 0x10000
HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:7273-6977-0000-0000-000000000001"


def nvme_connect_capsule(cid):
    """The NVMe-oF Connect command for the admin queue (`struct nvmf_connect_command`, 64
    octets, little endian) with command identifier `cid`: PSDT 01b (SGL), its 1024 octets
    of data a keyed SGL data block (type 0x40: address, no invalidate) at CONNECT_STAG /
    CONNECT_TO, which nvmet-rdma fetches with an RDMA Read; record format 0, queue 0, SQ
    size 31, no keep-alive."""
    sgl = (struct.pack("<Q", CONNECT_TO) + (1024).to_bytes(3, "little")
           + struct.pack("<I", CONNECT_STAG) + b"\x40")
    return (struct.pack("<BBHB19x", 0x7F, 0x40, cid, 0x01) + sgl
            + struct.pack("<HHHBxI12x", 0, 0, 31, 0, 0))


def nvme_connect_data():
    """`struct nvmf_connect_data` (1024 octets): a host ID, controller ID 0xFFFF (any),
    the subsystem's NQN and the host's."""
    return (bytes(range(1, 17)) + struct.pack("<H238x", 0xFFFF)
            + NQN.encode().ljust(256, b"\0") + HOSTNQN.encode().ljust(256, b"\0") + bytes(256))


def nvmet_read_request(s, cid):
    """Sends the Connect command (a Send on QN 0, MSN 1) and takes nvmet's RDMA Read
    Request for its data; returns its (sink STag, sink TO, size) after checking that it
    reads all of the peer's buffer."""
    s.sendall(send(nvme_connect_capsule(cid)))
    req = recv_exact(s, 2 + 46 + 4)
    assert req[2:4] == b"\x41\x41", f"not a Read Request: {req.hex()}"
    sink_stag, sink_to, size, src_stag, src_to = struct.unpack(">IQIIQ", req[20:48])
    assert (size, src_stag, src_to) == (1024, CONNECT_STAG, CONNECT_TO), req.hex()
    return sink_stag, sink_to, size


# (name, the bad Response for the Read's sink STag, TO and size (with the DMA STag `k`),
# TERMINATE): each refused before an octet is placed, as for a user QP.
NVMET_READ_CASES = [
    ("read_response_dma_mr_outstanding",
     lambda k, st, to, n: read_response(k, to, nvme_connect_data()), (1, 1, 0x00)),
    ("read_response_unknown_stag",
     lambda k, st, to, n: read_response(0xABCDE00 | (st & 0xFF), to, nvme_connect_data()),
     (1, 1, 0x00)),
    ("read_response_other_to",
     lambda k, st, to, n: read_response(st, to + 8, nvme_connect_data()), (1, 1, 0x01)),
    ("read_response_too_long",
     lambda k, st, to, n: read_response(st, to, nvme_connect_data() + bytes(8)),
     (1, 1, 0x01)),
    ("read_response_too_short",
     lambda k, st, to, n: read_response(st, to, nvme_connect_data()[:n - 8]), (1, 1, 0x01)),
    ("read_response_empty_last", lambda k, st, to, n: read_response(st, to, b""),
     (1, 1, 0x01)),
]


def test_hostile_read_responses_against_nvmet(nvmet_over_rdma):
    """The peer plays an NVMe host whose Connect command's data nvmet-rdma must fetch with
    an RDMA Read (rsiw's ORQ on a kernel QP, the sink a fast-registration MR). The control:
    the exact Response completes the Read and nvmet answers with a successful completion.
    Then each bad Response (at the DMA STag, an unknown STag, another TO, too long, too
    short, empty) on a connection of its own: one TERMINATE with the DDP tagged buffer
    error, the connection closes, nvmet frees the queue."""
    s = nvmet_conn()
    try:
        stag, to, size = nvmet_read_request(s, 1)
        s.sendall(read_response(stag, to, nvme_connect_data()))
        # Kept open until the answer is in: a FIN from the peer ends the connection,
        # and what nvmet posts after rsiw took it in is flushed, never sent.
        frames = fpdus(recv_fpdu(s))
    finally:
        s.close()
    # The completion (`struct nvme_completion`, 16 octets) in a Send (opcode 3).
    assert [op for op, _ in frames] == [3], frames
    cid, status = struct.unpack("<HH", frames[0][1][32:36])
    assert (cid, status >> 1) == (1, 0), f"Connect failed: {frames[0][1].hex()}"
    wait_for(lambda: not kernel_dma_lkeys(), timeout=60, what="nvmet's PD to go")
    errs = []
    for name, build, want in NVMET_READ_CASES:
        s = nvmet_conn()
        try:
            stag, to, size = nvmet_read_request(s, 2)
            keys = kernel_dma_lkeys()
            s.sendall(build(keys[-1], stag, to, size))
            data = recv_all(s)
        finally:
            s.close()
        errs += sole_terminate_errors(name, data, want)
        wait_for(lambda: not kernel_dma_lkeys(), timeout=60, what="nvmet's PD to go")
    assert not errs, "\n".join(errs)


def test_bad_mpa_requests_against_nvmet(nvmet_over_rdma):
    """test_hostile's malformed MPA Requests, each on a TCP connection of its own to
    nvmet's port: rsiw closes it (an MPA Reply, if any, rejects: R=1) before nvmet sees a
    connection; then a well-formed Request is accepted."""
    errs = bad_requests_errors(ADDR, int(PORT))
    nvmet_conn().close()
    wait_for(lambda: not kernel_dma_lkeys(), timeout=60, what="nvmet's PD to go")
    assert not errs, "\n".join(errs)


class NvmeHost:
    """nvme-rdma connecting to the hostile peer on PEER_PORT (a shell writing the options
    to /dev/nvme-fabrics); `rc()` waits for the connect's exit status."""

    def __init__(self):
        self.p = subprocess.Popen(
            ["sh", "-c", f"echo transport=rdma,traddr={ADDR},trsvcid={PEER_PORT},"
             f"nqn={NQN} > /dev/nvme-fabrics"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def rc(self):
        return self.p.wait(timeout=300)


# nvme_core's timeout (seconds) for admin commands, the Connect command among them.
ADMIN_TIMEOUT = "/sys/module/nvme_core/parameters/admin_timeout"


@pytest.fixture
def hostile_listener(nvmet_over_rdma):
    """The hostile peer's listening socket on PEER_PORT, with nvme_core's admin_timeout
    lowered to 1 s: the host learns that its Connect command failed only by that timeout
    (a QP error while connecting starts no recovery in nvme-rdma). The peer sends its
    FPDUs right behind the Reply or the host's Connect command, well within it. Afterwards
    no kernel PD may remain."""
    ls = socket.create_server((ADDR, PEER_PORT))
    with open(ADMIN_TIMEOUT) as f:
        admin_timeout = f.read().strip()
    sh(f"echo 1 > {ADMIN_TIMEOUT}")
    yield ls
    ls.close()
    sh(f"echo {admin_timeout} > {ADMIN_TIMEOUT}", check=False)
    wait_for(lambda: not kernel_dma_lkeys(), timeout=120, what="the host's PD to go")


def take_mpa_request(ls, host):
    """Accepts the TCP connection of `host` (an NvmeHost) and reads its MPA Request;
    returns (the socket, the host). A host that exits before it connected (nvme-rdma
    gives address and route resolution 3 s each, which a loaded debug guest can miss) is
    started again, twice at most; its output is printed."""
    for attempt in range(3):
        deadline = time.monotonic() + 120
        ls.settimeout(1)
        while True:
            try:
                s, _ = ls.accept()
                break
            except TimeoutError:
                if host.p.poll() is not None or time.monotonic() > deadline:
                    s = None
                    break
        if s is not None:
            break
        out = host.p.stdout.read() if host.p.poll() is not None else "(still running)"
        print(f"nvme-rdma host attempt {attempt + 1} did not connect: {out.strip()}")
        host.p.kill()
        host.p.wait()
        host = NvmeHost()
    else:
        raise AssertionError("the NVMe host did not connect to the peer in 3 attempts")
    s.settimeout(60)
    req = recv_exact(s, 20)
    assert req[:16] == b"MPA ID Req Frame", req.hex()
    recv_exact(s, int.from_bytes(req[18:20], "big"))
    return s, host


def test_hostile_peer_against_nvme_host(hostile_listener):
    """rsiw under nvme-rdma (Initiator): for every class of kernel_cases() the host
    connects to the hostile peer, which answers its MPA Request (C=1 where the case
    negotiates CRC) and, once the host's Connect command arrived, sends the class's FPDU:
    one TERMINATE (or, after the peer's TERMINATE, none), the connection closes, and the
    host's connect fails instead of hanging (by its admin timeout)."""
    errs = []
    for name, build, want, crc in kernel_cases():
        host = NvmeHost()
        try:
            s, host = take_mpa_request(hostile_listener, host)
            # The host made its PD before it connected.
            keys = kernel_dma_lkeys()
            assert keys, "no kernel PD on rsiw0 while the host connects"
            s.sendall(mpa_frame(key=b"MPA ID Rep Frame", flags=0x50 if crc else 0x10,
                                pd=nvme_mpa_private_data(True)))
            # nvme-rdma posts its receives when the connection is established and then
            # sends its Connect command: a Send from the peer before that could find no
            # receive (1/2/0x02) instead of the fault it carries.
            host_connect_command(s)
            s.sendall(build(keys[-1]))
            data = recv_all(s)
            s.close()
        finally:
            rc = host.rc()
        errs += last_terminate_errors(name, data, want, set())
        if rc == 0:
            errs.append(f"{name}: the host's connect succeeded")
        wait_for(lambda: not kernel_dma_lkeys(), timeout=120, what="the host's PD to go")
    assert not errs, "\n".join(errs)


def test_bad_mpa_replies_fail_the_nvme_host_connect(hostile_listener):
    """test_cm's malformed and rejecting MPA Replies, and a peer that never answers, each
    on a connection of its own: rsiw closes the connection (the silent peer's after
    mpa_timeout_ms) and the host's connect fails."""
    errs = []
    for name, frame in BAD_REPLIES + [("silent", b"")]:
        host = NvmeHost()
        try:
            s, host = take_mpa_request(hostile_listener, host)
            try:
                if frame:
                    s.sendall(frame)
                    s.shutdown(socket.SHUT_WR)
                while s.recv(4096):
                    pass
            except TimeoutError:
                errs.append(f"{name}: rsiw did not close the connection within 60 s")
            except OSError:
                pass  # rsiw may close (or reset, leaving octets unread) at any point
            finally:
                s.close()
        finally:
            rc = host.rc()
        if rc == 0:
            errs.append(f"{name}: the host's connect succeeded")
        wait_for(lambda: not kernel_dma_lkeys(), timeout=120, what="the host's PD to go")
    assert not errs, "\n".join(errs)


def recv_fpdu(s):
    """The next FPDU (no markers) from `s`, whole."""
    head = recv_exact(s, 2)
    ulen = int.from_bytes(head, "big")
    return head + recv_exact(s, ulen + (-(2 + ulen)) % 4 + 4)


def host_connect_command(s):
    """Takes the host's Connect command (a Send on QN 0 carrying the 64-octet capsule) and
    returns (command identifier, the keyed SGL's STag, address and length): the
    fast-registration MR nvme-rdma made for the 1024 octets of connect data, which the
    target is to read."""
    f = recv_fpdu(s)
    assert f[3] & 0x0F in (3, 5), f"not a Send: {f.hex()}"
    capsule = f[20:84]
    assert capsule[0] == 0x7F and capsule[4] == 0x01, f"not a Connect command: {capsule.hex()}"
    cid = int.from_bytes(capsule[2:4], "little")
    addr = int.from_bytes(capsule[24:32], "little")
    length = int.from_bytes(capsule[32:35], "little")
    key = int.from_bytes(capsule[35:39], "little")
    assert capsule[39] >> 4 == 0x4, f"not a keyed SGL data block: {capsule.hex()}"
    return cid, key, addr, length


def nvme_completion(cid):
    """A successful `struct nvme_completion` for command `cid` (controller ID 1)."""
    return struct.pack("<QHHHH", 1, 0, 0, cid, 0)


# (name, FPDUs given the host MR's (STag, address, length) and another PD's (STag, TO),
# TERMINATE): the tagged classes against the MR nvme-rdma registered (local write, remote
# read and write) for its Connect command's data. The other PD's STag is the sink of the
# RDMA Read nvmet-rdma has outstanding on a connection of the peer's.
HOST_MR_CASES = [
    ("write_past_the_end", lambda m, o: write(m[0], m[1] + m[2] - 8, b"\xEE" * 16),
     (1, 1, 0x01)),
    ("write_before_the_start", lambda m, o: write(m[0], m[1] - 8, b"\xEE" * 16), (1, 1, 0x01)),
    ("write_to_wraps", lambda m, o: write(m[0], (1 << 64) - 8, b"\xEE" * 16), (1, 1, 0x03)),
    ("write_other_key", lambda m, o: write(m[0] ^ 0x01, m[1], b"\xEE" * 16), (1, 1, 0x00)),
    ("read_past_the_end", lambda m, o: read_request(m[0], m[1] + m[2] - 8, 16), (0, 1, 0x01)),
    ("read_request_to_wraps", lambda m, o: read_request(m[0], (1 << 64) - 8, 16),
     (0, 1, 0x04)),
    ("write_other_pd", lambda m, o: write(o[0], o[1], b"\xEE" * 16), (1, 1, 0x02)),
    ("read_request_other_pd", lambda m, o: read_request(o[0], o[1], 16), (0, 1, 0x03)),
    # More Read Requests at once than any IRD rsiw grants (at most 128): those within IRD
    # may be answered, then DDP invalid MSN on QN 1.
    ("read_requests_beyond_ird",
     lambda m, o: b"".join(read_request(m[0], m[1], 16, msn=i) for i in range(1, 141)),
     (1, 2, 0x03)),
    # The target invalidates the MR with the Connect command's completion (Send with
    # Invalidate, as nvmet-rdma does), then writes to it.
    ("write_invalidated",
     lambda m, o: send_inv(m[0], nvme_completion(m[3])) + write(m[0], m[1], b"\xEE" * 16),
     (1, 1, 0x00)),
]


def test_hostile_tagged_against_nvme_host(hostile_listener):
    """The peer plays the NVMe target for nvme-rdma (rsiw as Initiator). The control: the
    peer reads the Connect command's data from the host's MR with an RDMA Read and gets
    it (the subsystem's NQN at offset 256). Then, on a connection each, Writes and Read
    Requests outside that MR, with a TO that wraps, another key, another PD's STag
    (nvmet's Read sink), more Read Requests than IRD, and the MR after the peer
    invalidated it: one TERMINATE each with
    the RFC's layer/etype/ecode, the connection closes, the host's connect fails."""
    host = NvmeHost()
    try:
        s, host = take_mpa_request(hostile_listener, host)
        s.sendall(mpa_frame(key=b"MPA ID Rep Frame", pd=nvme_mpa_private_data(True)))
        cid, key, addr, length = host_connect_command(s)
        assert length == 1024, length
        s.sendall(read_request(key, addr, length))
        f = recv_fpdu(s)
        s.close()
    finally:
        host.rc()
    assert f[2:4] == b"\xC1\x42", f"not a one-segment Read Response: {f.hex()}"
    data = f[16:16 + int.from_bytes(f[:2], "big") - 14]
    assert data[256:256 + len(NQN)] == NQN.encode(), data.hex()
    wait_for(lambda: not kernel_dma_lkeys(), timeout=120, what="the host's PD to go")

    errs = []
    for name, build, want in HOST_MR_CASES:
        other = nvmet_conn()
        try:
            o_stag, o_to, _ = nvmet_read_request(other, 1)
            host = NvmeHost()
            try:
                s, host = take_mpa_request(hostile_listener, host)
                s.sendall(mpa_frame(key=b"MPA ID Rep Frame", pd=nvme_mpa_private_data(True)))
                cid, key, addr, length = host_connect_command(s)
                s.sendall(build((key, addr, length, cid), (o_stag, o_to)))
                data = recv_all(s)
                s.close()
            finally:
                rc = host.rc()
        finally:
            other.close()
        # Before it: Read Responses to Reads within IRD (at most 128), and the host's next
        # command (a Send) once its Connect completed.
        errs += last_terminate_errors(name, data, want, {2, 3, 5})
        if fpdus(data) and [op for op, _ in fpdus(data)].count(2) > 128:
            errs.append(f"{name}: more Read Responses than any IRD")
        if rc == 0:
            errs.append(f"{name}: the host's connect succeeded")
        wait_for(lambda: not kernel_dma_lkeys(), timeout=120, what="the PDs to go")
    assert not errs, "\n".join(errs)
