# SPDX-License-Identifier: GPL-2.0
"""Kernel consumer tests: NVMe over Fabrics (RDMA) through rsiw0, and a hostile peer
against its kernel QPs and their DMA MRs (both roles).

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


def test_nvme_rdma_fio_verify(nvmet_over_rdma):
    """nvme-rdma connects to nvmet-rdma through rsiw0; fio writes 4 KiB .. 128 KiB blocks
    with CRC32c verification headers and reads them back; the I/O completes without
    error and every block verifies."""
    opts = f"transport=rdma,traddr={ADDR},trsvcid={PORT},nqn={NQN}"
    sh(f"echo {opts} > /dev/nvme-fabrics", timeout=300)
    wait_for(lambda: nvme_block_devices(), timeout=60, what="the NVMe namespace block device")
    dev = "/dev/" + sorted(nvme_block_devices())[0]
    try:
        wait_for(lambda: os.path.exists(dev), timeout=120, what=dev)
    except AssertionError:
        diag = sh("ls -l /dev/nvme* /sys/class/nvme/*/ /sys/block; dmesg | grep -i -E 'nvme|rsiw' | tail -40",
                  check=False).stdout
        raise AssertionError(f"{dev} did not appear:\n{diag}")
    fio = (
        f"fio --name=rsiw-verify --filename={dev} --direct=1 --ioengine=libaio --iodepth=8 "
        "--rw=randwrite --bsrange=4k-128k --size=8M --verify=crc32c --do_verify=1 "
        "--verify_fatal=1 --verify_state_save=0 --randrepeat=0 --output-format=json"
    )
    t0 = time.monotonic()
    p = sh(fio, check=False, timeout=T_IO)
    assert p.returncode == 0, f"fio failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
    read_kb, write_kb = job["read"]["io_kbytes"], job["write"]["io_kbytes"]
    print(f"fio on {dev}: wrote {write_kb} KiB, verified {read_kb} KiB in {time.monotonic() - t0:.0f} s")
    assert job["error"] == 0, p.stdout
    assert write_kb >= 8 * 1024, p.stdout
    assert read_kb >= 8 * 1024, p.stdout
    # Data written through the fabric landed in the target's device.
    with open(BDEV, "rb") as f:
        assert f.read(1 << 20).strip(b"\0"), f"no data reached the target's {BDEV}"


# A hostile iWARP peer against a kernel consumer: nvmet-rdma as Responder (the peer
# connects to its port) and nvme-rdma as Initiator (it connects to the peer). Their QPs
# live on a kernel PD whose DMA MR (`local_dma_lkey`, read from `rdma res show pd`) spans
# all of kernel memory with TO = kernel virtual address: the peer aims Writes, Read
# Requests, Read Responses and Send with Invalidate at it. Each must end in the RFC's
# TERMINATE with nothing placed (KASAN and the kernel_clean fixture watch the kernel); no
# consumer asked for IB_PD_UNSAFE_GLOBAL_RKEY, so the DMA MR grants no remote access.
PEER_PORT = 4421
# A kernel direct-map address; rsiw must refuse it before it is ever resolved.
KVA = 0xFFFF888000100000


def dma_mr_cases():
    from test_hostile import read_request, read_response, send_inv, write
    return [
        ("write_dma_mr", lambda k: write(k, KVA, b"\xEE" * 16), (1, 1, 0x00)),
        ("read_request_dma_mr", lambda k: read_request(k, KVA, 16), (0, 1, 0x02)),
        ("read_response_dma_mr", lambda k: read_response(k, KVA, b"\xEE" * 16), (0, 2, 0x06)),
        ("read_response_dma_mr_not_last",
         lambda k: read_response(k, KVA, b"\xEE" * 16, last=False), (0, 2, 0x06)),
        ("send_inv_dma_mr", lambda k: send_inv(k, b"\xEE" * 16), (0, 1, 0x09)),
    ]


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


def test_hostile_peer_against_nvmet(nvmet_over_rdma):
    """rsiw under nvmet-rdma (Responder): on a connection of its own each, a Write, a Read
    Request, an unsolicited Read Response (L=1 and L=0) and a Send with Invalidate aimed at
    nvmet's DMA MR: one TERMINATE with the RFC's layer/etype/ecode each, then the
    connection closes. nvmet accepts with IRD 0 (hosts never read from a target), so its
    Read Request is past IRD (DDP 1/2/0x03) before its source is looked at."""
    from test_hostile import mpa_frame, recv_all, recv_exact, terminate_of
    errs = []
    for name, build, want in dma_mr_cases():
        if name == "read_request_dma_mr":
            want = (1, 2, 0x03)
        s = socket.create_connection((ADDR, int(PORT)), timeout=60)
        try:
            s.sendall(mpa_frame(pd=nvme_mpa_private_data(False)))
            rep = recv_exact(s, 20)
            assert rep[:16] == b"MPA ID Rep Frame" and not rep[16] & 0x20, rep.hex()
            recv_exact(s, int.from_bytes(rep[18:20], "big"))
            keys = kernel_dma_lkeys()
            assert keys, "no kernel PD on rsiw0 after nvmet accepted"
            s.sendall(build(keys[-1]))
            data = recv_all(s)
        finally:
            s.close()
        try:
            got = terminate_of(data)[:3]
        except AssertionError as e:
            errs.append(f"{name}: {e}")
            continue
        if got != want:
            errs.append(f"{name}: TERMINATE {got}, want {want}")
        # nvmet frees the queue (and, with the last one, its PD) asynchronously.
        wait_for(lambda: not kernel_dma_lkeys(), timeout=60, what="nvmet's PD to go")
    assert not errs, "\n".join(errs)


def test_hostile_peer_against_nvme_host(nvmet_over_rdma):
    """rsiw under nvme-rdma (Initiator): the host connects to the hostile peer, which
    answers its MPA Request and then aims the same FPDUs at the host's DMA MR: one
    TERMINATE each, the connection closes, and the host's connect fails instead of
    hanging."""
    from test_hostile import fpdus, mpa_frame, recv_all, recv_exact
    errs = []
    ls = socket.create_server((ADDR, PEER_PORT))
    ls.settimeout(120)
    # The host learns that its Connect command failed only by its timeout (a QP error
    # while connecting starts no recovery in nvme-rdma): 5 s, not the default 60 s.
    timeout_param = "/sys/module/nvme_core/parameters/admin_timeout"
    with open(timeout_param) as f:
        admin_timeout = f.read().strip()
    sh(f"echo 5 > {timeout_param}")
    try:
        for name, build, want in dma_mr_cases():
            host = subprocess.Popen(
                ["sh", "-c", f"echo transport=rdma,traddr={ADDR},trsvcid={PEER_PORT},"
                 f"nqn={NQN} > /dev/nvme-fabrics"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                s, _ = ls.accept()
                s.settimeout(60)
                req = recv_exact(s, 20)
                assert req[:16] == b"MPA ID Req Frame", req.hex()
                recv_exact(s, int.from_bytes(req[18:20], "big"))
                s.sendall(mpa_frame(key=b"MPA ID Rep Frame", pd=nvme_mpa_private_data(True)))
                keys = []
                wait_for(lambda: keys.extend(kernel_dma_lkeys()) or keys, timeout=60,
                         what="the host's kernel PD")
                s.sendall(build(keys[-1]))
                data = recv_all(s)
                s.close()
            finally:
                rc = host.wait(timeout=300)
            frames = fpdus(data)
            ops = [op for op, _ in frames]
            if not ops or ops[-1] != 7:
                errs.append(f"{name}: no TERMINATE last, FPDUs {ops}")
                continue
            t = frames[-1][1]
            got = (t[20] >> 4, t[20] & 0x0F, t[21])
            if got != want:
                errs.append(f"{name}: TERMINATE {got}, want {want}")
            if rc == 0:
                errs.append(f"{name}: the host's connect succeeded")
            wait_for(lambda: not kernel_dma_lkeys(), timeout=120, what="the host's PD to go")
    finally:
        ls.close()
        sh(f"echo {admin_timeout} > {timeout_param}", check=False)
    assert not errs, "\n".join(errs)
