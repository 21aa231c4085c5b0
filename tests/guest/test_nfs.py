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
import os
import subprocess

import pytest

from conftest import fio_verify_files, load_rdma_core, load_rsiw, load_siw, module_loaded, \
    port_counters, sh, unload_rsiw, wait_for

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


def start_nfsd(clients):
    """Starts nfsd (NFSv4 only, short lease and grace) on TCP 2049 and RDMA 20049 in the
    initial namespace, exporting a tmpfs to `clients`; returns the helper processes."""
    sh("modprobe -a nfsd rpcrdma nfsv4")
    if not mounted(NFSD):
        sh(f"mount -t nfsd nfsd {NFSD}")
    sh(f"mkdir -p {EXPORT} {MNT} && mount -t tmpfs -o size=256m tmpfs {EXPORT}")
    procs = []
    # rpcbind and mountd answer the kernel's export cache upcalls (NFSv4 needs them too).
    sh("rpcbind -w || rpcbind", check=False)
    # fsid=0: the export is NFSv4's root (the guest's own root file system, virtiofs, can
    # not be the pseudo root above it); the client mounts ADDR:/.
    sh(f"exportfs -o rw,no_root_squash,insecure,fsid=0 {clients}:{EXPORT}")
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
    return procs


def stop_nfsd(procs):
    """Unmounts the client, stops nfsd and its helpers, unloads the NFS and RPC/RDMA
    modules."""
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


@pytest.fixture
def nfs_over_rsiw():
    """rsiw0 on a dummy netdev; nfsd (NFSv4 only, short lease and grace) listening on TCP
    2049 and on RDMA 20049, exporting a tmpfs; torn down afterwards, rsiw unloaded."""
    load_rdma_core()
    unload_rsiw()
    load_rsiw()
    sh(f"ip link add {NET} type dummy && ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    sh(f"rdma link add rsiw0 type rsiw netdev {NET}")
    procs = start_nfsd(f"{ADDR}/24")
    yield
    stop_nfsd(procs)
    sh("rdma link del rsiw0", timeout=180)
    sh(f"ip link del {NET}", check=False)
    unload_rsiw()
    assert not module_loaded("rsiw"), "rsiw still loaded after rmmod"


def mount_and_verify(addr, label, enter=""):
    """Mounts ADDR:/ with proto=rdma on MNT (the mount command prefixed with `enter`), runs
    fio there (4 KiB .. 128 KiB O_DIRECT blocks, each an RPC over RDMA, with CRC32c
    verification headers, read back) and checks: the transport is RDMA, no error, every
    block verifies, the data is in the server's tmpfs. Returns rsiw0's port counters
    (before, after); the caller unmounts."""
    before = port_counters("rsiw0")
    sh(f"{enter}mount -t nfs -o vers=4.2,proto=rdma,port=20049 {addr}:/ {MNT}", timeout=300)
    opts = next(line.split()[3] for line in open("/proc/mounts") if line.split()[1] == MNT)
    assert "proto=rdma" in opts, opts
    fio_verify_files(MNT, "rsiw-nfs", "4k-128k", 8, f"NFS/RDMA ({label})", T_IO)
    files = [f for f in os.listdir(EXPORT) if f.startswith("rsiw-nfs")]
    assert files and os.path.getsize(os.path.join(EXPORT, files[0])) >= 8 << 20, files
    return before, port_counters("rsiw0")


def unmount():
    sh(f"umount {MNT}", timeout=300)
    wait_for(lambda: not mounted(MNT), timeout=60, what=f"{MNT} unmounted")


def test_nfs_over_rdma_fio_verify(nfs_over_rsiw):
    """The NFS client mounts the export with proto=rdma through rsiw0 and fio verifies
    data through it (mount_and_verify); the octets went through rsiw0 (its port
    counters)."""
    before, after = mount_and_verify(ADDR, "rsiw to rsiw")
    moved = after["rx_octets"] - before["rx_octets"]
    # Both ends are rsiw0: the 8 MiB went out and came back at least once each way.
    assert moved >= 16 << 20, (before, after)
    unmount()

NS = "rsnfsA"
INIT_END = ("rsnfs0", "10.97.1.1")   # the veth end in the initial namespace
NS_END = ("rsnfs1", "10.97.1.2")     # the end in namespace NS


def ns_sh(cmd, **kw):
    """Runs `cmd` in namespace NS with nfsd's file system mounted (ip netns exec gives it
    a mount namespace of its own, where /proc/fs/nfsd shows NS's nfsd)."""
    return sh(f"ip netns exec {NS} sh -c 'mount -t nfsd nfsd {NFSD} && {cmd}'", **kw)


def start_nfsd_in_ns(clients):
    """As start_nfsd, in namespace NS (the export's tmpfs is mounted here, before NS's
    mount namespaces copy the tree)."""
    sh("modprobe -a nfsd rpcrdma nfsv4")
    sh(f"mkdir -p {EXPORT} {MNT} && mount -t tmpfs -o size=256m tmpfs {EXPORT}")
    sh(f"ip netns exec {NS} rpcbind -w", check=False)
    ns_sh(f"exportfs -o rw,no_root_squash,insecure,fsid=0 {clients}:{EXPORT}")
    procs = [subprocess.Popen(["ip", "netns", "exec", NS, "sh", "-c",
                               f"mount -t nfsd nfsd {NFSD} && exec rpc.mountd -F -N 2 -N 3"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    p = ns_sh("rpc.nfsd --no-nfs-version 3 --rdma=20049 --lease-time 10 --grace-time 10 4 "
              f"&& cat {NFSD}/portlist", check=False)
    if p.returncode != 0 or "rdma 20049" not in p.stdout:
        raise AssertionError(f"rpc.nfsd in {NS} failed ({p.returncode}): {p.stdout}{p.stderr}\n"
                             + sh("dmesg | tail -30", check=False).stdout)
    return procs


def stop_nfsd_in_ns(procs):
    """As stop_nfsd, for start_nfsd_in_ns."""
    if mounted(MNT):
        sh(f"umount {MNT}", check=False, timeout=300)
    ns_sh("rpc.nfsd 0; exportfs -ua", check=False, timeout=300)
    for p in procs:
        p.terminate()
        p.wait(timeout=30)
    sh("pkill -x rpcbind", check=False)
    sh(f"umount {EXPORT}", check=False)
    for m in ("nfsv4", "nfs", "nfsd", "rpcrdma"):
        if module_loaded(m):
            sh(f"rmmod {m}", check=False, timeout=180)
    assert not module_loaded("rpcrdma"), "rpcrdma still loaded"


@pytest.fixture(params=["siw", "rsiw"], ids=["siw_server", "rsiw_server"])
def nfs_with_siw(request):
    """rsiw against the C siw across a veth link, each as NFS server (request.param) and
    as client. The C siw works only in the initial namespace, so siw0 is on the end
    there and rsiw0 on the end in namespace NS; nfsd runs in the server's namespace.
    Yields (server's driver, the server's address, the namespace to mount from: None for
    the initial one). Torn down afterwards, rsiw and siw unloaded."""
    server = request.param
    load_rdma_core()
    unload_rsiw()
    load_rsiw()
    load_siw()
    sh(f"ip netns add {NS}")
    sh(f"ip link add {INIT_END[0]} type veth peer name {NS_END[0]}")
    sh(f"ip link set {NS_END[0]} netns {NS}")
    sh(f"ip addr add {INIT_END[1]}/24 dev {INIT_END[0]} && ip link set {INIT_END[0]} up")
    sh(f"ip -n {NS} addr add {NS_END[1]}/24 dev {NS_END[0]} "
       f"&& ip -n {NS} link set {NS_END[0]} up && ip -n {NS} link set lo up")
    sh(f"rdma link add siw0 type siw netdev {INIT_END[0]}")
    sh(f"ip netns exec {NS} rdma link add rsiw0 type rsiw netdev {NS_END[0]}")
    sh(f"ip netns exec {NS} ping -c 1 -W 10 {INIT_END[1]}", timeout=60)
    if server == "siw":
        procs = start_nfsd(f"{NS_END[1]}/24")
        yield server, INIT_END[1], NS
        stop_nfsd(procs)
    else:
        procs = start_nfsd_in_ns(f"{INIT_END[1]}/24")
        yield server, NS_END[1], None
        stop_nfsd_in_ns(procs)
    for dev in ("rsiw0", "siw0"):
        sh(f"rdma link del {dev}", check=False, timeout=180)
    sh(f"ip netns del {NS}", check=False)
    sh(f"ip link del {INIT_END[0]}", check=False)
    unload_rsiw()
    assert not module_loaded("rsiw"), "rsiw still loaded after rmmod"
    sh("rmmod siw", check=False, timeout=180)


def test_nfs_with_siw(nfs_with_siw):
    """NFS over RDMA between rsiw and the C siw, each as server and as client, across a
    veth link: the client mounts with proto=rdma; fio writes 4 KiB .. 128 KiB blocks with
    CRC32c verification headers and reads them back: no error, every block verifies, the
    data is in the server's tmpfs, and the octets went through rsiw0 both ways."""
    server, addr, client_ns = nfs_with_siw
    # nsenter keeps the mount namespace (ip netns exec makes a new one): the mount is
    # visible here, its RPC transport lives in the client's namespace.
    enter = f"nsenter --net=/run/netns/{client_ns} " if client_ns else ""
    before, after = mount_and_verify(addr, f"{server} server", enter)
    tx = after["tx_octets"] - before["tx_octets"]
    rx = after["rx_octets"] - before["rx_octets"]
    assert tx >= 8 << 20 and rx >= 8 << 20, (before, after)
    unmount()
