# SPDX-License-Identifier: GPL-2.0
"""SMB Direct (SMB3 over RDMA, MS-SMBD) through rsiw0: ksmbd serves a tmpfs share with its
RDMA listener on the iWARP port (5445), the kernel's cifs client mounts it with the `rdma`
option over rsiw0 (loopback through the kernel's TCP stack), fio writes and verifies data
through the mount, and afterwards the mount, ksmbd, the SMB modules, the device and rsiw
all go away cleanly. It runs with MPA revision 1 and 2 (rsiw0's `mpa_rev`).

SMB Direct drives rsiw the way Windows-interop storage users run it: credits over Sends
with immediate data-less messages, and for large reads and writes fast-registration MRs
the server reads from or writes into with RDMA Read and RDMA Write, then a Send with
Invalidate. Debian builds ksmbd and cifs without SMB Direct; tests/smbdirect.sh builds
them from the same kernel source with it (RSIW_SMBD_DIR, stock kernel only), and the
tests skip without them.
"""
import json
import os

import pytest

from conftest import fio_verify_files, load_rdma_core, load_rsiw, module_loaded, \
    port_counters, sh, unload_rsiw, wait_for

SMBD = os.environ.get("RSIW_SMBD_DIR", "")
NET, ADDR = "rssmb0", "10.98.0.1"
# Under /tmp: the rest of the guest's root file system is read-only.
BASE = "/tmp/rsiw-smb"
SHARE, MNT = f"{BASE}/share", f"{BASE}/mnt"
CONF, PWDDB = f"{BASE}/ksmbd.conf", f"{BASE}/ksmbdpwd.db"
USER, PASSWORD = "rsiw", "rsiw-smb-direct"
MODULES = ("smbdirect", "ksmbd", "cifs")
T_IO = 900

pytestmark = pytest.mark.skipif(
    not SMBD or not all(os.path.exists(f"{SMBD}/{m}.ko") for m in MODULES),
    reason="no SMB Direct modules for this kernel (tests/smbdirect.sh builds them for "
           "Debian's kernel: the stock leg runs this)")


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def load_smb_modules():
    """Loads smbdirect.ko, ksmbd.ko and cifs.ko of RSIW_SMBD_DIR (Debian's ksmbd and cifs
    must not be loaded: they lack SMB Direct), with the modules they need first."""
    for m in ("cifs", "ksmbd", "smbdirect"):
        if module_loaded(m):
            sh(f"rmmod {m}", timeout=180)
    for m in MODULES:
        deps = sh(f"modinfo -F depends {SMBD}/{m}.ko").stdout.strip()
        for d in deps.split(","):
            if d and d not in MODULES:
                sh(f"modprobe {d}")
        sh(f"insmod {SMBD}/{m}.ko")


def unload_smb_modules():
    for m in ("cifs", "ksmbd", "smbdirect"):
        if module_loaded(m):
            sh(f"rmmod {m}", check=False, timeout=180)
    left = [m for m in MODULES if module_loaded(m)]
    assert not left, f"still loaded: {left}"


def start_ksmbd():
    """Writes a ksmbd configuration with one writable share on a tmpfs, served on NET
    only, adds USER and starts ksmbd.mountd; waits until the kernel server listens on
    TCP 445 and its SMB Direct listener exists on rsiw0 (the iWARP port 5445)."""
    sh(f"mkdir -p {SHARE} {MNT} && mount -t tmpfs -o size=256m tmpfs {SHARE}")
    with open(CONF, "w") as f:
        f.write("[global]\n"
                "\tbind interfaces only = yes\n"
                f"\tinterfaces = {NET}\n"
                "[share]\n"
                f"\tpath = {SHARE}\n"
                "\tread only = no\n"
                "\tforce user = root\n"
                "\tforce group = root\n")
    sh(f"rm -f {PWDDB} && ksmbd.adduser -C {CONF} -P {PWDDB} -a {USER} -p {PASSWORD}")
    p = sh(f"ksmbd.mountd -C {CONF} -P {PWDDB}", check=False)
    if p.returncode != 0:
        raise AssertionError(f"ksmbd.mountd failed ({p.returncode}): {p.stdout}{p.stderr}")

    def listening():
        return ":5445 " in sh("ss -Hltn", check=False).stdout

    try:
        wait_for(listening, timeout=120, what="rsiw0's listener for SMB Direct (5445)")
    except AssertionError:
        raise AssertionError("no SMB Direct listener:\n"
                             + sh("ss -Hltn; dmesg | tail -30", check=False).stdout) from None


def stop_ksmbd():
    if mounted(MNT):
        sh(f"umount {MNT}", check=False, timeout=300)
    sh("ksmbd.control --shutdown", check=False, timeout=180)
    sh("pkill -x ksmbd.mountd", check=False)
    wait_for(lambda: sh("pgrep -x ksmbd.mountd", check=False).returncode != 0, timeout=60,
             what="ksmbd.mountd to exit")
    sh(f"umount {SHARE}", check=False)


@pytest.fixture
def smb_over_rsiw():
    """rsiw0 on a dummy netdev, the SMB Direct modules loaded, ksmbd serving a tmpfs;
    torn down afterwards, the modules and rsiw unloaded."""
    load_rdma_core()
    unload_rsiw()
    load_rsiw()
    sh(f"ip link add {NET} type dummy && ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    sh(f"rdma link add rsiw0 type rsiw netdev {NET}")
    load_smb_modules()
    try:
        start_ksmbd()
        yield
    finally:
        stop_ksmbd()
        unload_smb_modules()
        sh("rdma link del rsiw0", timeout=180)
        sh(f"ip link del {NET}", check=False)
        unload_rsiw()
    assert not module_loaded("rsiw"), "rsiw still loaded after rmmod"


def qp_mpa_revs():
    """The MPA revision of each of rsiw0's QPs in RTS (`rdma -dd res show qp`)."""
    out = sh("rdma -dd -j resource show qp link rsiw0/1", check=False, timeout=180).stdout
    return [q.get("drv_mpa_rev") for q in json.loads(out or "[]") if q.get("state") == "RTS"]


@pytest.mark.parametrize("rev", [1, 2])
def test_smb_direct_fio_verify(smb_over_rsiw, rev):
    """With rsiw0's MPA revision `rev`, cifs mounts the share with `rdma` (SMB Direct over
    rsiw0 on port 5445) and fio verifies data through it: 4 KiB .. 1 MiB O_DIRECT blocks
    (the large ones go by RDMA Read and Write into registered MRs), CRC32c verification
    headers, read back. The session's transport is SMB Direct, the QPs ran revision
    `rev`, the data is in the share, and the octets crossed rsiw0 (its port counters)."""
    with open("/sys/class/infiniband/rsiw0/mpa_rev", "w") as f:
        f.write(str(rev))
    before = port_counters("rsiw0")
    p = sh(f"mount -t cifs //{ADDR}/share {MNT} -o rdma,port=5445,vers=3.1.1,"
           f"username={USER},password={PASSWORD},cache=none", check=False, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"mount failed ({p.returncode}): {p.stdout}{p.stderr}\n"
                             + sh("dmesg | tail -40", check=False).stdout)
    try:
        debug = open("/proc/fs/cifs/DebugData").read()
        assert "SMBDirect" in debug or "RDMA" in debug, debug
        revs = qp_mpa_revs()
        assert revs and all(r == rev for r in revs), revs
        fio_verify_files(MNT, "rsiw-smb", "4k-1m", 16, f"SMB Direct (MPA revision {rev})",
                         T_IO)
        files = [f for f in os.listdir(SHARE) if f.startswith("rsiw-smb")]
        assert files and os.path.getsize(os.path.join(SHARE, files[0])) >= 16 << 20, files
        after = port_counters("rsiw0")
    finally:
        sh(f"umount {MNT}", timeout=300)
    wait_for(lambda: not mounted(MNT), timeout=60, what=f"{MNT} unmounted")
    # Both ends are rsiw0: the 16 MiB went out and came back at least once each way.
    moved = after["rx_octets"] - before["rx_octets"]
    assert moved >= 32 << 20, (before, after)
