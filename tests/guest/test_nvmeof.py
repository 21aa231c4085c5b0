# SPDX-License-Identifier: GPL-2.0
"""Kernel consumer smoke test: NVMe over Fabrics (RDMA) through rsiw0.

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
