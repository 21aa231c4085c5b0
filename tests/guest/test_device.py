# SPDX-License-Identifier: GPL-2.0
"""rsiw as an RDMA device: module load, `rdma link`, device and port attributes,
teardown paths, coexistence with the C siw, and bad input."""
import errno
import os
import re

import pytest

from conftest import (
    SOAK,
    del_link,
    dmesg_mark,
    dmesg_since,
    load_rsiw,
    load_siw,
    make_dummy,
    module_loaded,
    rdma_links,
    sh,
    unload_rsiw,
    wait_for,
)
from uverbs_events import event_fds, next_event, readable

from pyverbs import enums
from pyverbs.device import Context


def mac_of(netdev):
    with open(f"/sys/class/net/{netdev}/address") as f:
        return f.read().strip()


def eui64_guid(mac):
    """ibv_devinfo's node_guid format (xxxx:xxxx:xxxx:xxxx) of the EUI-64 of a MAC."""
    b = [int(x, 16) for x in mac.split(":")]
    e = [b[0] ^ 2, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    return ":".join(f"{e[i]:02x}{e[i + 1]:02x}" for i in range(0, 8, 2))


def gid0(dev):
    """GID 0 of port 1 as 32 hex digits (from the RDMA core's GID table in sysfs)."""
    with open(f"/sys/class/infiniband/{dev}/ports/1/gids/0") as f:
        return f.read().strip().replace(":", "")


def devinfo(dev, verbose=False):
    return sh(f"ibv_devinfo {'-v ' if verbose else ''}-d {dev}").stdout


def test_modinfo_lists_parameters_with_descriptions():
    """modinfo shows the link alias, the release in the file VERSION, and a description
    for every parameter."""
    out = sh(f"modinfo {os.environ['RSIW_KO']}").stdout
    assert re.search(r"^alias:\s+rdma-link-rsiw$", out, re.M), out
    with open("VERSION") as f:
        release = f.read().strip()
    assert re.search(rf"^version:\s+{re.escape(release)}$", out, re.M), out
    for param in ("max_ucontext", "max_pd", "max_cq", "max_qp", "max_srq", "max_mr"):
        m = re.search(rf"^parm:\s+{param}:(.+)$", out, re.M)
        assert m and len(m.group(1).strip()) > 20, f"{param} lacks a description:\n{out}"


def test_load_unload_repeatedly():
    """rsiw loads and unloads 8 times (40 in `make soak`), each time cleanly."""
    unload_rsiw()
    for _ in range(40 if SOAK else 8):
        load_rsiw()
        assert module_loaded("rsiw")
        unload_rsiw()
        assert not module_loaded("rsiw")


def test_link_add_creates_iwarp_device(rsiw, dummy):
    sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
    assert rdma_links().get("rsiw0") == dummy
    assert "rsiw0" in sh("ibv_devices").stdout

    info = devinfo("rsiw0")
    assert re.search(r"transport:\s+iWARP \(1\)", info), info
    assert re.search(r"state:\s+PORT_ACTIVE \(4\)", info), info
    assert re.search(r"link_layer:\s+Ethernet", info), info
    assert eui64_guid(mac_of(dummy)) in info, info

    with open("/sys/class/infiniband/rsiw0/node_type") as f:
        assert f.read().strip() == "4: RNIC"
    uverbs = [d for d in os.listdir("/sys/class/infiniband_verbs") if d.startswith("uverbs")]
    abi = []
    for d in uverbs:
        with open(f"/sys/class/infiniband_verbs/{d}/ibdev") as f:
            if f.read().strip() == "rsiw0":
                with open(f"/sys/class/infiniband_verbs/{d}/abi_version") as g:
                    abi.append(g.read().strip())
    assert abi == ["1"], abi
    # ibv_devinfo could open the device at all only through a user-space provider matching
    # its driver id: rdma-core's siw provider (RDMA_DRIVER_SIW), with ABI version 1 above.

    # GID 0 is the MAC address (ibv_devinfo does not list iWARP GIDs; sysfs does).
    mac = mac_of(dummy).replace(":", "")
    assert gid0("rsiw0") == mac + "0" * 20
    with open("/sys/class/infiniband/rsiw0/ports/1/gid_attrs/ndevs/0") as f:
        assert f.read().strip() == dummy

    verbose = devinfo("rsiw0", verbose=True)
    assert re.search(r"max_pd:\s+102400", verbose), verbose
    assert re.search(r"max_qp:\s+102400\b", verbose), verbose
    assert re.search(r"max_cqe:\s+4194304\b", verbose), verbose


def test_port_state_follows_netdev(rsiw, dummy):
    """The port follows its netdev, and a consumer hears of it: PORT_ERR when the
    netdev goes down, PORT_ACTIVE when it comes back (IB_EVENT_PORT_*)."""
    sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
    before = event_fds()
    # Opened here and closed before the test ends (the fixture then removes the link).
    with Context(name="rsiw0") as ctx:
        (afd,) = set(event_fds()) - set(before)
        sh(f"ip link set {dummy} down")
        assert next_event(ctx, afd) == enums.IBV_EVENT_PORT_ERR
        assert re.search(r"state:\s+PORT_DOWN", devinfo("rsiw0"))
        assert "state DOWN" in sh("rdma link show rsiw0/1").stdout
        sh(f"ip link set {dummy} up")
        assert next_event(ctx, afd) == enums.IBV_EVENT_PORT_ACTIVE
        assert re.search(r"state:\s+PORT_ACTIVE", devinfo("rsiw0"))
        assert not readable(afd, 1), "more than one event per change"


def test_gid_follows_mac_change(rsiw, dummy):
    sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
    sh(f"ip link set {dummy} address 02:11:22:33:44:55")
    wait_for(lambda: gid0("rsiw0") == "021122334455" + "0" * 20, what="GID 0 to follow the MAC")


def test_link_add_del_20_times(rsiw, dummy):
    for _ in range(20):
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        assert "rsiw0" in rdma_links()
        sh("rdma link del rsiw0")
        assert "rsiw0" not in rdma_links()


def test_netdev_unregister_removes_device(rsiw):
    sh("ip link add rsveth0 type veth peer name rsveth1")
    try:
        sh("ip link set rsveth0 up")
        sh("rdma link add rsiw1 type rsiw netdev rsveth0")
        assert rdma_links().get("rsiw1") == "rsveth0"
        sh("ip link del rsveth0")
        wait_for(lambda: "rsiw1" not in rdma_links(), what="rsiw1 to disappear")
    finally:
        del_link("rsveth0")


def test_rmmod_with_devices_present(dummy):
    load_rsiw()
    make_dummy("rsdum1")
    try:
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        sh("rdma link add rsiw1 type rsiw netdev rsdum1")
        unload_rsiw()
        links = rdma_links()
        assert "rsiw0" not in links and "rsiw1" not in links
    finally:
        del_link("rsdum1")


def test_coexists_with_c_siw(dummy):
    load_siw()
    load_rsiw()
    make_dummy("rsdum1", "10.91.1.1/24")
    try:
        sh("rdma link add siw0 type siw netdev rsdum1")
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        devs = sh("ibv_devices").stdout
        assert "siw0" in devs and "rsiw0" in devs
        assert "iWARP" in devinfo("siw0") and "iWARP" in devinfo("rsiw0")
        # A netdev that has a siw device gets no rsiw device (EEXIST).
        mark = dmesg_mark()
        r = sh("rdma link add rsiw1 type rsiw netdev rsdum1", check=False)
        assert r.returncode != 0 and "rsiw1" not in rdma_links(), r.stdout
        assert "File exists" in r.stderr, r.stderr
        log = "\n".join(dmesg_since(mark))
        assert "rsiw1: netdev rsdum1 already has a soft-iWARP device (rsiw or siw)" in log, log
        # Unloading rsiw removes only rsiw's devices, not the C siw's.
        unload_rsiw()
        links = rdma_links()
        assert "rsiw0" not in links and links.get("siw0") == "rsdum1", links
        sh("rdma link del siw0")
    finally:
        sh("rdma link del siw0", check=False)
        del_link("rsdum1")
        unload_rsiw()
        sh("rmmod siw", check=False)


def test_bad_link_add_requests_fail_cleanly(rsiw, dummy):
    # Missing netdev.
    assert sh("rdma link add rsiw9 type rsiw netdev nosuchdev0", check=False).returncode != 0
    sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
    mark = dmesg_mark()
    # The netdev already has an rsiw device.
    r = sh(f"rdma link add rsiw1 type rsiw netdev {dummy}", check=False)
    assert r.returncode != 0
    assert "rsiw1" not in rdma_links()
    new = "\n".join(dmesg_since(mark))
    assert re.search(rf"rsiw1: netdev {dummy} already has a soft-iWARP device", new), new
    # Duplicate device name on another netdev.
    make_dummy("rsdum1")
    try:
        r = sh("rdma link add rsiw0 type rsiw netdev rsdum1", check=False)
        assert r.returncode != 0
        assert rdma_links().get("rsiw0") == dummy
    finally:
        del_link("rsdum1")
    # The device still works after the failed attempts.
    assert "PORT_ACTIVE" in devinfo("rsiw0")


def test_layer3_netdevs_are_served(rsiw):
    """Netdevs without a link-layer header (ARPHRD_NONE: tun, WireGuard) are served, as
    by the C siw; having no MAC address, each device gets a random, unique GID."""
    names = ["rstun0", "rstun1"]
    sh("modprobe tun", check=False)  # built in on the debug kernel, a module on Debian's
    try:
        for i, name in enumerate(names):
            sh(f"ip tuntap add {name} mode tun")
            sh(f"rdma link add rsiw{2 + i} type rsiw netdev {name}")
        gids = [gid0(f"rsiw{2 + i}") for i in range(len(names))]
        assert all(g != "0" * 32 for g in gids) and gids[0] != gids[1], gids
        assert "iWARP" in devinfo("rsiw2")
    finally:
        for i, name in enumerate(names):
            sh(f"rdma link del rsiw{2 + i}", check=False)
            del_link(name)
    assert "rsiw2" not in rdma_links() and "rsiw3" not in rdma_links()


def test_loopback_netdev_is_served(rsiw):
    """lo (ARPHRD_LOOPBACK) gets an iWARP device, as with the C siw."""
    try:
        sh("rdma link add rsiw4 type rsiw netdev lo")
        assert rdma_links().get("rsiw4") == "lo"
        assert "iWARP" in devinfo("rsiw4")
    finally:
        sh("rdma link del rsiw4", check=False)
    assert "rsiw4" not in rdma_links()


def test_unsupported_link_type_is_refused(rsiw):
    """A link type rsiw cannot serve (a GRE tunnel, ARPHRD_IPGRE) is refused with a
    message naming the cause."""
    name = "rsgre0"
    sh("modprobe ip_gre", check=False)
    if sh(f"ip link add {name} type gre remote 10.1.1.1 local 10.1.1.2",
          check=False).returncode != 0:
        pytest.skip("this kernel has no GRE tunnels (Debian's has: the stock leg runs this)")
    try:
        r = sh(f"rdma link add rsiw2 type rsiw netdev {name}", check=False)
        assert r.returncode != 0
        assert "rsiw2" not in rdma_links()
        assert "not one rsiw serves" in sh("dmesg | tail -n 5").stdout
    finally:
        del_link(name)


def module_closure(ko):
    """The paths of `ko` and of every module file it needs; built-in dependencies have no
    file."""
    deps = sh(f"modinfo -F depends {ko}").stdout.strip()
    paths = [ko]
    for dep in filter(None, deps.split(",")):
        for line in sh(f"modprobe --show-depends {dep}").stdout.splitlines():
            words = line.split()
            if words[:1] == ["insmod"] and words[1] not in paths:
                paths.append(words[1])
    return paths


def test_link_add_autoloads_module(dummy):
    """`rdma link add ... type rsiw` loads rsiw through its rdma-link-rsiw alias.

    The kernel's module request runs the modprobe named in /proc/sys/kernel/modprobe; for
    this test that is a wrapper reading a private module tree (rsiw.ko and the modules it
    needs, indexed by depmod), so the system's /lib/modules is neither read in full nor
    covered: a mount over it stays busy while udevd holds its index open."""
    unload_rsiw()
    rel = os.uname().release
    root = "/tmp/rsiw-modroot"
    mods = f"{root}/lib/modules/{rel}"
    helper = "/proc/sys/kernel/modprobe"
    with open(helper) as f:
        system_modprobe = f.read().strip()
    sh(f"mkdir -p {root} && mount -t tmpfs tmpfs {root} && mkdir -p {mods}/extra")
    try:
        sh(f"cp {os.environ['RSIW_KO']} {mods}/extra/rsiw.ko")
        for dep in module_closure(f"{mods}/extra/rsiw.ko")[1:]:
            sh(f"cp --parents {dep} {root}/")
        sh(f"depmod -b {root} {rel}")
        assert "rdma-link-rsiw" in sh(f"cat {mods}/modules.alias").stdout
        with open(f"{root}/modprobe", "w") as f:
            f.write(f'#!/bin/sh\nexec {system_modprobe} -d {root} "$@"\n')
        os.chmod(f"{root}/modprobe", 0o755)
        with open(helper, "w") as f:
            f.write(f"{root}/modprobe")
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        assert module_loaded("rsiw")
        assert rdma_links().get("rsiw0") == dummy
    finally:
        with open(helper, "w") as f:
            f.write(system_modprobe)
        unload_rsiw()
        sh(f"umount -l {root}", check=False)


def test_parameters_are_not_in_sysfs(rsiw):
    """The module parameters are load-time only: Rust module parameters have no sysfs
    files; a device's settings are files in its own directory (test_settings_per_device,
    Documentation/rsiw.rst, *Module parameters*)."""
    assert os.path.isdir("/sys/module/rsiw")
    assert not os.path.exists("/sys/module/rsiw/parameters")


SETTINGS = {"mpa_rev": 2, "mpa_crc": 0, "mpa_markers": 0, "peer_to_peer": 0, "p2p_rtr": 7,
            "mpa_draft_rtr": 0, "mpa_large_fpdu": 1, "mpa_timeout_ms": 10000}
"""The per-device settings with the module's default parameters."""


def settings_of(dev):
    """{name: value} of the settings files in `dev`'s sysfs directory; checks their mode."""
    out = {}
    for name in SETTINGS:
        path = f"/sys/class/infiniband/{dev}/{name}"
        assert os.stat(path).st_mode & 0o777 == 0o644, path
        with open(path) as f:
            out[name] = int(f.read())
    return out


def write_setting(dev, name, text):
    with open(f"/sys/class/infiniband/{dev}/{name}", "w") as f:
        f.write(text)


def test_settings_per_device(dummy):
    """`rdma link add` gives each device the module parameters' values (brought into
    range) as files in its sysfs directory; a write changes that device only and reads
    back; a value a setting does not take fails with EINVAL and a message naming the
    device, the setting and the value, and changes nothing; a device added again starts
    from the module parameters."""
    unload_rsiw()
    load_rsiw("mpa_crc=1 mpa_timeout_ms=50 p2p_rtr=9")
    make_dummy("rsdum1", "10.91.1.1/24")
    try:
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        sh("rdma link add rsiw1 type rsiw netdev rsdum1")
        want = dict(SETTINGS, mpa_crc=1, mpa_timeout_ms=100, p2p_rtr=1)
        assert settings_of("rsiw0") == want
        assert settings_of("rsiw1") == want
        changes = {"mpa_rev": ("1\n", 1), "mpa_markers": ("y", 1), "mpa_crc": ("N\n", 0),
                   "peer_to_peer": ("1", 1), "p2p_rtr": ("0", 0), "mpa_draft_rtr": ("Y", 1),
                   "mpa_large_fpdu": ("0", 0), "mpa_timeout_ms": ("4294967295", 2**32 - 1)}
        for name, (text, _) in changes.items():
            write_setting("rsiw0", name, text)
        assert settings_of("rsiw0") == {k: v for k, (_, v) in changes.items()}
        assert settings_of("rsiw1") == want
        bad = [("mpa_rev", "3", "is not in 0..=2"), ("mpa_rev", "7", "is not in 0..=2"),
               ("mpa_rev", "\n", "is not a decimal number"),
               ("mpa_crc", "2", "is not 0 or 1"), ("mpa_crc", "yes", "is not 0 or 1"),
               ("p2p_rtr", "8", "is not in 0..=7"), ("p2p_rtr", "-1", "is not a decimal"),
               ("mpa_timeout_ms", "99", "is not in 100..=4294967295"),
               ("mpa_timeout_ms", "4294967296", "is not a decimal number"),
               ("mpa_timeout_ms", "1e3", "is not a decimal number"),
               ("mpa_large_fpdu", "on", "is not 0 or 1")]
        for name, text, cause in bad:
            mark = dmesg_mark()
            with pytest.raises(OSError) as e:
                write_setting("rsiw1", name, text)
            assert e.value.errno == errno.EINVAL, (name, text, e.value)
            log = dmesg_since(mark)
            assert any("rsiw1" in l and f"{name}: '{text.rstrip()}' {cause}" in l
                       for l in log), (name, text, log)
        assert settings_of("rsiw1") == want
        sh("rdma link del rsiw0")
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        assert settings_of("rsiw0") == want
    finally:
        for dev in ("rsiw0", "rsiw1"):
            sh(f"rdma link del {dev}", check=False)
        del_link("rsdum1")
        unload_rsiw()


def test_max_ucontext_is_enforced(dummy):
    unload_rsiw()
    load_rsiw("max_ucontext=0")
    try:
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        r = sh("ibv_devinfo -d rsiw0", check=False)
        assert r.returncode != 0, r.stdout
        out = sh("python3 -c \"from pyverbs.device import Context\n"
                 "from pyverbs.pyverbs_error import PyverbsRDMAError\n"
                 "try:\n    Context(name='rsiw0')\nexcept PyverbsRDMAError as e:\n"
                 "    print('refused', e.error_code)\"").stdout
        assert "refused 12" in out, out
        assert ("rsiw0: user context limit reached (0); see module parameter max_ucontext"
                in sh("dmesg | tail -n 20").stdout)
    finally:
        unload_rsiw()


_LIMIT_SCRIPT = """
import sys
from pyverbs import enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

obj = sys.argv[1]
ctx = Context(name="rsiw0")
pd = PD(ctx) if obj != "pd" else None
cq = CQ(ctx, 4) if obj == "qp" else None


def make():
    if obj == "pd":
        return PD(ctx)
    if obj == "cq":
        return CQ(ctx, 4)
    if obj == "mr":
        return MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    if obj == "srq":
        return SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=4, max_sge=1)))
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                             cap=QPCap(max_send_wr=4, max_recv_wr=4)))


held = [make(), make()]
try:
    make()
    print("third allocated")
except PyverbsRDMAError as err:
    print("refused", err.error_code)
for o in held:
    o.close()
held = [make(), make()]
print("reallocated", len(held))
"""


@pytest.mark.parametrize("obj, name", [("pd", "protection domain"), ("cq", "CQ"),
                                       ("qp", "QP"), ("srq", "SRQ"), ("mr", "MR")])
def test_object_limits_are_enforced(dummy, tmp_path, obj, name):
    """max_pd, max_cq, max_qp, max_srq and max_mr: one object beyond the limit fails with
    ENOMEM and a message naming the device and the parameter; destroying frees the
    units."""
    unload_rsiw()
    load_rsiw(f"max_{obj}=2")
    script = tmp_path / "limit.py"
    script.write_text(_LIMIT_SCRIPT)
    try:
        sh(f"rdma link add rsiw0 type rsiw netdev {dummy}")
        mark = dmesg_mark()
        out = sh(f"python3 {script} {obj}").stdout
        assert "refused 12" in out, out
        assert "reallocated 2" in out, out
        log = "\n".join(dmesg_since(mark))
        assert f"rsiw0: {name} limit reached (2); see module parameter max_{obj}" in log, log
    finally:
        unload_rsiw()
