# SPDX-License-Identifier: GPL-2.0
"""NFS over RDMA through rsiw0: the kernel's nfsd with an RDMA listener (port 20049,
`/proc/fs/nfsd/portlist`) exports a tmpfs, the kernel's NFS client mounts it with
`proto=rdma` over rsiw0 (loopback through the kernel's TCP stack), fio writes and verifies
data through the mount, and afterwards the mount, nfsd, rpcrdma, the device and rsiw all go
away cleanly.

This drives rsiw with the third kernel consumer users run (after NVMe-oF and the verbs
of user space): rpcrdma's server side (svcrdma: RDMA Read of the client's write chunks,
RDMA Write of reply chunks, Send with Invalidate) and client side (xprtrdma: fast
registration MRs, Local Invalidate). Debian's kernel has nfsd and rpcrdma; the debug
kernel has neither, so there the tests skip (`make check` runs them on the stock leg).
"""
import json
import os
import subprocess
import time

import pytest

from conftest import load_rdma_core, load_rsiw, module_loaded, port_counters, sh, unload_rsiw, \
    wait_for

NET, ADDR = "rsnfs0", "10.97.0.1"
# Under /tmp: the rest of the guest's root file system is read-only.
EXPORT, MNT = "/tmp/rsiw-nfs/export", "/tmp/rsiw-nfs/mnt"
NFSD = "/proc/fs/nfsd"
T_IO = 900

pytestmark = pytest.mark.skipif(
    subprocess.run(["modinfo", "nfsd"], capture_output=True).returncode != 0
    or subprocess.run(["modinfo", "rpcrdma"], capture_output=True).returncode != 0,
    reason="this kernel has no nfsd or rpcrdma (Debian's has both: the stock leg runs this)")


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


@pytest.fixture
def nfs_over_rsiw():
    """rsiw0 on a dummy netdev; nfsd (NFSv4 only, short lease and grace) listening on TCP
    2049 and on RDMA 20049, exporting a tmpfs; torn down afterwards, rsiw unloaded."""
    load_rdma_core()
    unload_rsiw()
    load_rsiw()
    sh(f"ip link add {NET} type dummy && ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    sh(f"rdma link add rsiw0 type rsiw netdev {NET}")
    sh("modprobe -a nfsd rpcrdma nfsv4")
    if not mounted(NFSD):
        sh(f"mount -t nfsd nfsd {NFSD}")
    sh(f"mkdir -p {EXPORT} {MNT} && mount -t tmpfs -o size=256m tmpfs {EXPORT}")
    procs = []
    # rpcbind and mountd answer the kernel's export cache upcalls (NFSv4 needs them too).
    sh("rpcbind -w || rpcbind", check=False)
    # fsid=0: the export is NFSv4's root (the guest's own root file system, virtiofs, can
    # not be the pseudo root above it); the client mounts ADDR:/.
    sh(f"exportfs -o rw,no_root_squash,insecure,fsid=0 {ADDR}/24:{EXPORT}")
    procs.append(subprocess.Popen(["rpc.mountd", "-F", "-N", "2", "-N", "3"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    # NFSv4 only, with the shortest lease and grace period (so that the first OPEN does
    # not wait out a 90 s grace period), listening on TCP 2049 and RDMA 20049.
    p = sh("rpc.nfsd --no-nfs-version 3 --rdma=20049 --lease-time 10 --grace-time 10 4",
           check=False)
    if p.returncode != 0:
        raise AssertionError(f"rpc.nfsd failed ({p.returncode}): {p.stdout}{p.stderr}\n"
                             + sh("dmesg | tail -30", check=False).stdout)
    ports = open(f"{NFSD}/portlist").read()
    assert "rdma 20049" in ports, ports
    yield
    if mounted(MNT):
        sh(f"umount {MNT}", check=False, timeout=300)
    sh("rpc.nfsd 0", check=False, timeout=300)
    sh("exportfs -ua", check=False)
    for p in procs:
        p.terminate()
        p.wait(timeout=30)
    sh("pkill -x rpcbind", check=False)
    sh(f"umount {EXPORT}", check=False)
    sh(f"umount {NFSD}", check=False)
    for m in ("nfsv4", "nfs", "nfsd", "rpcrdma"):
        if module_loaded(m):
            sh(f"rmmod {m}", check=False, timeout=180)
    assert not module_loaded("rpcrdma"), "rpcrdma still loaded"
    sh("rdma link del rsiw0", timeout=180)
    sh(f"ip link del {NET}", check=False)
    unload_rsiw()
    assert not module_loaded("rsiw"), "rsiw still loaded after rmmod"


def test_nfs_over_rdma_fio_verify(nfs_over_rsiw):
    """The NFS client mounts the export with proto=rdma through rsiw0; fio writes 4 KiB ..
    128 KiB blocks with O_DIRECT (each one an RPC over RDMA) with CRC32c verification
    headers and reads them back: no error, every block verifies, the mount's transport is
    RDMA, and the octets went through rsiw0 (its port counters)."""
    before = port_counters("rsiw0")
    sh(f"mount -t nfs -o vers=4.2,proto=rdma,port=20049 {ADDR}:/ {MNT}", timeout=300)
    opts = next(line.split()[3] for line in open("/proc/mounts") if line.split()[1] == MNT)
    assert "proto=rdma" in opts, opts
    fio = (f"fio --name=rsiw-nfs --directory={MNT} --direct=1 --ioengine=psync "
           "--rw=randwrite --bsrange=4k-128k --size=8M --verify=crc32c --do_verify=1 "
           "--verify_fatal=1 --verify_state_save=0 --randrepeat=0 --output-format=json")
    t0 = time.monotonic()
    p = sh(fio, check=False, timeout=T_IO)
    assert p.returncode == 0, f"fio failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
    read_kb, write_kb = job["read"]["io_kbytes"], job["write"]["io_kbytes"]
    print(f"fio on NFS/RDMA: wrote {write_kb} KiB, verified {read_kb} KiB in "
          f"{time.monotonic() - t0:.0f} s")
    assert job["error"] == 0, p.stdout
    assert write_kb >= 8 * 1024 and read_kb >= 8 * 1024, p.stdout
    # The data is in the server's tmpfs, written through the mount.
    files = [f for f in os.listdir(EXPORT) if f.startswith("rsiw-nfs")]
    assert files and os.path.getsize(os.path.join(EXPORT, files[0])) >= 8 << 20, files
    after = port_counters("rsiw0")
    moved = after["rx_octets"] - before["rx_octets"]
    # Both ends are rsiw0: the 8 MiB went out and came back at least once each way.
    assert moved >= 16 << 20, (before, after)
    sh(f"umount {MNT}", timeout=300)
    wait_for(lambda: not mounted(MNT), timeout=60, what=f"{MNT} unmounted")
