# SPDX-License-Identifier: GPL-2.0
"""Fixtures for rsiw's in-guest tests (run as root inside the VM by tests/vm-run.sh).

Every test is checked afterwards for kernel problems: new dmesg lines with BUG:,
WARNING:, KASAN, Oops, lockdep reports, or kmemleak leaks whose backtrace names rsiw.

One lockdep report is known and not rsiw's (KNOWN_UPSTREAM): it is shown as a pytest
warning instead. Lockdep turns itself off after its first report, so the test that can
trigger it (NVMe-oF) runs last.
"""
import json
import os
import re
import subprocess
import time
import warnings

import pytest

RSIW_KO = os.environ.get("RSIW_KO", "")
SIW_KO = os.environ.get("RSIW_SIW_KO", "")
SOAK = os.environ.get("RSIW_SOAK", "") == "1"
"""`make soak` (tests/soak.sh): tests run their long forms (more cycles, pings, faults)."""

BAD_DMESG = re.compile(
    r"BUG:|WARNING:|KASAN|Oops|general protection|possible recursive locking|"
    r"circular locking dependency|inconsistent lock state|suspicious RCU usage|"
    r"sleeping function called from invalid context|list_add corruption|"
    r"list_del corruption|refcount_t:|UBSAN|kernel BUG"
)
# A user-space program's fault, logged by the kernel's show_signal() as "traps: comm[pid]
# general protection fault ... in lib.so"; the test sees the program's exit status. A
# kernel GPF is an Oops and still matches BAD_DMESG.
USER_TRAP = re.compile(r"^\[[\s\d.]+\] traps: \S+\[\d+\] ")
KMEMLEAK = "/sys/kernel/debug/kmemleak"
KUNIT_FILTER = "/sys/module/kunit/parameters/filter_glob"
KUNIT_NONE = "rsiw-no-suite"
"""A KUnit suite glob that matches no suite: module loads run none (test_kunit.py asks)."""

# Lockdep reports of upstream code that rsiw's tests can trigger, by the locks they name;
# a report matches only if it names every lock listed and no rsiw code.
KNOWN_UPSTREAM = {
    # nvmet-rdma: a command that arrived before the target's queue saw ESTABLISHED is run
    # from the rdma_cm handler (nvmet_rdma_queue_established(), under the connection id's
    # handler_mutex) and takes nvmet_config_sem; removing the port takes nvmet_config_sem
    # and then the listening id's handler_mutex in rdma_destroy_id(). Two different
    # rdma_cm ids share the lock class, hence the report; any transport can win that race
    # (RFC 5044 lets the Initiator send as soon as the Reply arrived).
    "nvmet-rdma: nvmet_config_sem vs rdma_cm handler_mutex":
        ("nvmet_config_sem", "&id_priv->handler_mutex"),
}
LOCKDEP_START = re.compile(r"WARNING: possible circular locking dependency detected")


def known_upstream(lines):
    """Splits kernel log lines into (lines to check, names of known upstream reports): a
    lockdep report runs from its WARNING line to the end of its stack backtrace."""
    keep, known, i = [], [], 0
    while i < len(lines):
        if not LOCKDEP_START.search(lines[i]):
            keep.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and "</TASK>" not in lines[j]:
            j += 1
        block = lines[i:j + 1]
        text = "\n".join(block)
        name = next((n for n, locks in KNOWN_UPSTREAM.items()
                     if all(lk in text for lk in locks) and "rsiw" not in text), None)
        if name:
            known.append(name)
        else:
            keep.extend(block)
        i = j + 1
    return keep, known


LEG = os.environ.get("RSIW_LEG", "")
"""`make check` (tests/check.sh) splits the suite into two legs that run side by side, each
test in exactly one: `debug`, on the debug kernel (KASAN, lockdep, kmemleak: 4-6 times
slower under TCG), and `stock`, on Debian's kernel. Unset: every collected test runs."""

DEBUG_LEG = re.compile("|".join([
    # Only the debug kernel has them: KUnit, fault injection.
    r"^test_kunit\.py::",
    r"^test_reliability\.py::test_(tcp_allocation_failures|failing_allocations"
    r"|failed_ring_offsets)",
    # Untrusted input, where KASAN sees an access outside an object: the hostile peer's
    # attacks with rsiw as Responder (the Initiator role, the controls and the log text run
    # on Debian's kernel; CRC is checked before anything is placed), both roles for Read
    # Responses; attacks on the NVMe-oF kernel QPs; scribbled user rings.
    r"^test_hostile\.py::test_(hostile_fpdus|send_without|terminate_mid_message"
    r"|read_requests_beyond|wrong_marker|reset_in_the_middle|zero_window)\w*\[listen\]$",
    r"^test_hostile\.py::test_bad_read_responses_are_refused_before_placement",
    r"^test_hostile\.py::test_(bad_mpa_requests|terminate_does_not_wait|mismatched_rtr)",
    r"^test_nvmeof\.py::test_(hostile_peer_against_nvmet|hostile_tagged_against_nvme_host)",
    r"^test_reliability\.py::test_scribbled_rings",
    # Object lifetimes under teardown, where KASAN sees a use after free and kmemleak a
    # leak: listeners, namespaces and floods; the module and MRs going away during
    # transfers; devices; NVMe-oF port teardown. (Peers killed, link flaps, the namespace,
    # a link and the netdevs going away run on Debian's kernel here and on the debug
    # kernel in `make soak`, which runs the whole reliability file there.)
    r"^test_lifetime\.py::",
    r"^test_reliability\.py::test_rmmod_during",
    r"^test_reliability\.py::test_mr_deregistered_with_transfers_in_flight\[",
    r"^test_device\.py::test_(load_unload_repeatedly|link_add_del_20_times"
    r"|rmmod_with_devices_present)",
    r"^test_nvmeof\.py::test_nvme_rdma_port_cycles\[rmdir\]",
    # The connection manager's timers and teardown during startup, once (the sysfs
    # variants, the silent peers and the other cases run on Debian's kernel).
    r"^test_cm\.py::test_(slow_responder|responder_reset)\w*\[parameter\]$",
    r"^test_cm\.py::test_consumer_killed_while_connected",
    # The data path once per kind: CRC, zero copy, Reads, markers, large FPDUs. (The
    # impaired links run on Debian's kernel here, on the debug kernel in `make soak`.)
    r"^test_transport\.py::test_rping_loopback\[crc\]",
    r"^test_transport\.py::test_buffers_reused_after_completion_loopback\[crc1\]",
    r"^test_transport\.py::test_perftest_loopback\[ib_read_bw\]",
    r"^test_transport\.py::test_pcap_loopback\[crc1-markers\]",
    r"^test_transport\.py::test_large_fpdus_two_ns\[large\]",
    # User rings and objects of the verbs: flushes, overflow, destroy with work posted.
    r"^test_verbs\.py::test_(objects_create_destroy|more_than_144_rings|rq_flush|sq_flush"
    r"|receives_posted_in_error|cq_overflow|destroy_with_outstanding)",
]))
"""The tests of the `debug` leg, by node ID without the directory; the rest run in `stock`."""

BOTH_LEGS = re.compile("|".join([
    # Load: kmemleak checks it on the debug kernel, the kmalloc and vmalloc figures are
    # asserted on Debian's (KASAN's quarantine blurs them on the debug kernel).
    r"^test_reliability\.py::test_connection_cycles_and_many_qps_return_memory$",
]))
"""The tests that run in both legs, by node ID without the directory."""


def legs_of(nodeid):
    """The legs (`debug`, `stock`) that run the test with node ID `nodeid`."""
    name = nodeid.rsplit("/", 1)[-1]
    if BOTH_LEGS.search(name):
        return ("debug", "stock")
    return ("debug",) if DEBUG_LEG.search(name) else ("stock",)


def pytest_runtest_logreport(report):
    """With RSIW_SOAK=1, prints a failed or erroring phase of a test at once, not only in
    the summary at the end of the run: an hours-long soak that is stopped early (or runs
    out of time) still shows why a case failed."""
    if SOAK and report.failed and _terminal:
        _terminal.write_line(f"\n--- {report.nodeid} failed in {report.when}:\n"
                             f"{report.longreprtext}\n")


_terminal = None
"""pytest's terminal reporter, for pytest_runtest_logreport."""


def pytest_sessionstart(session):
    # At pytest_configure the terminal reporter is not registered yet.
    global _terminal
    _terminal = session.config.pluginmanager.get_plugin("terminalreporter")


RUN_LAST = ("test_nfs.py", "test_nvmeof.py")
"""Files whose tests run after all others, in this order. The NVMe-oF tests come last:
they can trigger a known upstream lockdep report (KNOWN_UPSTREAM), after which lockdep is
off for the rest of the boot. Before them NFS: once nfsd in a namespace of its own has
served an NFS/RDMA mount (`test_nfs_with_siw[rsiw_server]`), that namespace outlives its
processes, sockets, rdma_cm IDs and sunrpc transports for the rest of the boot (also with
rsiw unloaded; nfsd over TCP, or nfsd without a mount, leaves none), and while another
namespace exists the RDMA core refuses exclusive namespace mode, which
`test_device_moved_to_another_namespace` needs."""


def pytest_collection_modifyitems(config, items):
    """Keeps the tests of the leg RSIW_LEG names (if any), and runs the files of RUN_LAST
    last."""
    if LEG:
        other = [it for it in items if LEG not in legs_of(it.nodeid)]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [it for it in items if LEG in legs_of(it.nodeid)]

    def rank(it):
        name = it.nodeid.rsplit("/", 1)[-1].split("::", 1)[0]
        return RUN_LAST.index(name) + 1 if name in RUN_LAST else 0
    items.sort(key=rank)


def sh(cmd, check=True, timeout=120):
    """Runs a shell command; returns CompletedProcess with text stdout/stderr."""
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(
            f"command failed ({p.returncode}): {cmd}\nstdout: {p.stdout}\nstderr: {p.stderr}"
        )
    return p


def dmesg_lines():
    return sh("dmesg").stdout.splitlines()


_marks = 0


def dmesg_mark():
    """Writes a unique marker line into the kernel log and returns it, for dmesg_since().

    Positions in `dmesg` output are no marker: once the log buffer wraps (every module load
    logs the KUnit results), old lines drop off the front and an offset points elsewhere.
    """
    global _marks
    _marks += 1
    mark = f"rsiw-test-mark {os.getpid()}.{_marks}.{time.monotonic_ns()}"
    with open("/dev/kmsg", "w") as f:
        f.write(mark + "\n")
    return mark


def dmesg_since(mark):
    """Returns the kernel log lines after `mark` (all lines if the mark wrapped away)."""
    lines = dmesg_lines()
    for i in range(len(lines) - 1, -1, -1):
        if mark in lines[i]:
            return lines[i + 1:]
    return lines


def module_loaded(name):
    return os.path.isdir(f"/sys/module/{name}") and os.path.exists(f"/sys/module/{name}/refcnt")


def load_rdma_core():
    """Loads the RDMA core modules (built in on the debug kernel, modules on Debian's)."""
    sh("modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm", check=False)


def load_rsiw(params=""):
    load_rdma_core()
    if module_loaded("rsiw"):
        return
    assert RSIW_KO, "RSIW_KO is not set (run the tests through tests/vm-run.sh)"
    sh(f"insmod {RSIW_KO} {params}")


def unload_rsiw():
    if module_loaded("rsiw"):
        sh("rmmod rsiw")


def load_siw():
    load_rdma_core()
    if module_loaded("siw"):
        return
    if SIW_KO:
        sh(f"insmod {SIW_KO}")
    else:
        sh("modprobe siw")


def rdma_links():
    """Returns {ibdev: netdev} from `rdma link show`."""
    out = sh("rdma link show").stdout
    links = {}
    for line in out.splitlines():
        m = re.match(r"link (\S+)/\d+ .*?(?:netdev (\S+))?\s*$", line)
        if m:
            links[m.group(1)] = m.group(2)
    return links


def fio_verify_files(directory, name, bsrange, size_mib, label, timeout):
    """Runs fio in `directory` (a mounted file system): random O_DIRECT writes of
    `size_mib` MiB in blocks of `bsrange` (fio's syntax) to file `name`, each with a
    CRC32c verification header, then reads them back and verifies them. Asserts that fio
    succeeded, moved all of it both ways and found no error; prints the amounts and time
    with `label`."""
    cmd = (f"fio --name={name} --directory={directory} --direct=1 --ioengine=psync "
           f"--rw=randwrite --bsrange={bsrange} --size={size_mib}M --verify=crc32c "
           "--do_verify=1 --verify_fatal=1 --verify_state_save=0 --randrepeat=0 "
           "--output-format=json")
    t0 = time.monotonic()
    p = sh(cmd, check=False, timeout=timeout)
    assert p.returncode == 0, f"fio failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
    read_kb, write_kb = job["read"]["io_kbytes"], job["write"]["io_kbytes"]
    print(f"fio on {label}: wrote {write_kb} KiB, verified {read_kb} KiB in "
          f"{time.monotonic() - t0:.0f} s")
    assert job["error"] == 0, p.stdout
    assert write_kb >= size_mib * 1024 and read_kb >= size_mib * 1024, p.stdout


def port_counters(dev):
    """The port counters of RDMA device `dev` port 1 (sysfs `hw_counters/`, what `rdma
    statistic show link DEV/1` shows), by name."""
    d = f"/sys/class/infiniband/{dev}/ports/1/hw_counters"
    out = {}
    for name in os.listdir(d):
        with open(os.path.join(d, name)) as f:
            out[name] = int(f.read())
    return out


def wait_for(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def recv_exact(s, n):
    """`n` octets from socket `s`; fails if the stream ends first."""
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, f"connection closed after {len(buf)} of {n} octets: {buf.hex()}"
        buf += chunk
    return buf


def make_dummy(name, addr=None):
    sh(f"ip link add {name} type dummy")
    if addr:
        sh(f"ip addr add {addr} dev {name}")
    sh(f"ip link set {name} up")


def del_link(name):
    sh(f"ip link del {name}", check=False)


def kmemleak_report():
    if not os.path.exists(KMEMLEAK):
        return ""
    sh(f"echo scan > {KMEMLEAK}", check=False, timeout=300)
    with open(KMEMLEAK) as f:
        return f.read()


def kunit_filter(glob):
    """Sets which KUnit suites a module load runs (`kunit.filter_glob`, e.g. `rsiw_*`), on a
    kernel with KUnit (the debug kernel); elsewhere does nothing."""
    if os.path.exists(KUNIT_FILTER):
        with open(KUNIT_FILTER, "w") as f:
            f.write(glob)


def rsiw_leaks(report):
    """Returns the kmemleak records whose backtrace names rsiw, or one of the kernel's
    helpers for Rust code (`rust_helper_*`): once rsiw is unloaded, its own frames show
    as bare addresses, and rsiw is the only Rust code these kernels run."""
    records = re.split(r"(?=^unreferenced object)", report, flags=re.M)
    return [r for r in records if r.startswith("unreferenced object")
            and ("rsiw" in r or "rust_helper_" in r)]


@pytest.fixture(scope="session", autouse=True)
def _session_checks():
    # dmesg_mark() writes to /dev/kmsg, which the kernel rate-limits by default.
    sh("echo on > /proc/sys/kernel/printk_devkmsg", check=False)
    # Forget leaks from boot (not rsiw's): only new ones count. The tests scan when they
    # want a report; kmemleak's own scan every 10 min would only take CPU time from them.
    if os.path.exists(KMEMLEAK):
        kmemleak_report()
        sh(f"echo clear > {KMEMLEAK}", check=False)
        sh(f"echo scan=off > {KMEMLEAK}", check=False)
    # rsiw's KUnit suites (debug kernel) would run at every module load, seconds each time
    # under TCG: only test_kunit.py runs them.
    kunit_filter(KUNIT_NONE)
    yield
    unload_rsiw()
    # kmemleak reports objects only once they are old enough (5 s).
    time.sleep(6)
    leaks = rsiw_leaks(kmemleak_report())
    assert not leaks, "kmemleak: leaks attributable to rsiw:\n" + "\n".join(leaks)


@pytest.fixture(autouse=True)
def kernel_clean(request):
    """Fails the test if it made the kernel report a problem (oops, KASAN, lockdep,
    warnings: dmesg after each test)."""
    mark = dmesg_mark()
    yield
    new, known = known_upstream(dmesg_since(mark))
    for name in known:
        warnings.warn(f"known upstream lockdep report ({name}); lockdep is now off")
    bad = [line for line in new if BAD_DMESG.search(line) and not USER_TRAP.search(line)]
    # The report itself (from its first line: a lockdep report runs to a hundred lines and
    # more), then the end of the log.
    first = new.index(bad[0]) if bad else 0
    assert not bad, ("kernel reported problems during the test:\n"
                     + "\n".join(new[first:first + 200]) + "\n...\n" + "\n".join(new[-40:]))


@pytest.fixture(scope="module", autouse=True)
def no_leaks():
    """Fails the last test of a module if the module's tests leaked rsiw objects: one
    kmemleak scan per test file (a scan of the debug kernel under TCG takes tens of
    seconds, too long to pay after every test), and one more at the end of the session."""
    yield
    leaks = rsiw_leaks(kmemleak_report())
    if leaks:
        sh(f"echo clear > {KMEMLEAK}", check=False)
    assert not leaks, "kmemleak: leaks attributable to rsiw:\n" + "\n".join(leaks)


@pytest.fixture
def rsiw():
    """rsiw loaded with default parameters; unloaded (devices removed) afterwards."""
    load_rsiw()
    yield
    unload_rsiw()


@pytest.fixture
def dummy():
    """A dummy netdev `rsdum0` with an IPv4 address, removed afterwards."""
    make_dummy("rsdum0", "10.91.0.1/24")
    yield "rsdum0"
    del_link("rsdum0")
