# SPDX-License-Identifier: GPL-2.0
"""`make bench` in the guest: rsiw against the C siw in one boot, as ratios.

Both providers run the same programs through rdma_cm on the same topology: one device on a
dummy netdev, client and server connecting to its address. Such traffic runs over the
loopback device `lo`, so the path MTU is lo's: the bench sets lo and the dummy netdev to
$RSIW_BENCH_MTU (default 1500, Ethernet's; lo's own 65536 would let every FPDU fill a
64 KiB segment, as no link between two hosts does) and restores lo afterwards.
tests/bench.sh boots the guest with one vCPU under `-icount shift=0,sleep=off`, where the
guest's clocks count executed instructions: a cycle or a MB/s measures the instructions the
kernel and the programs ran, not the host's load. A second boot with two vCPUs under the
same clock measures the event-mode latencies again (see `cases`), where wake-ups cross
CPUs; `bench.py merge` puts its table under the first.

The order of the runs is the experiment. For each CRC setting, each round loads the
providers in the order siw, rsiw, siw, rsiw (slots "a" and "b" of each), and every slot
runs every measure of that setting. A measure's cell gives the median of each provider's
runs, their spread ((max - min) / median) and the ratio rsiw/siw; the *null experiment*
compares each provider's "a" runs with its "b" runs. A ratio counts only where both null
ratios lie within +-5 %: the method then resolves a difference of that size.

Measures (`better` says which direction wins):
- bandwidth in MB/s (perftest's BW average, 2^20 octets per MB) of ib_write_bw,
  ib_read_bw and ib_send_bw at 4 KiB, 64 KiB and 1 MiB; read and send sleep on CQ events
  (`-e`), ib_write_bw has no event mode and polls;
- latency in cycles (perftest's t_typical, `-C`) of ib_send_lat and ib_read_lat (`-e`) and
  ib_write_lat (polling: on one vCPU the peer runs when the poller's time slice ends) at
  8 octets and 4 KiB;
- with CRC32c on (rsiw `mpa_crc=1`; the C siw of this kernel has no parameter, so
  tests/bench.sh builds a copy with `mpa_crc_required` set): the bandwidths at 64 KiB and
  1 MiB and the 8-octet send and read latencies;
- connection setup: rdma_cm connections per CPU second (`ucmatose -c 20 -C 0`: 20
  connections in one process, established and torn down, over the CPU time every task
  ran meanwhile; see `conn_rate`);
- CPU cost: milliseconds of kernel CPU time (all tasks' run time from /proc/schedstat,
  less the perftest processes' user time) per GiB moved by `ib_send_bw -e` at 1 MiB,
  without the programs' start, setup and exit (see `cpu_per_gib`);
- kernel memory per QP: growth of the allocated slab objects (/proc/slabinfo, every
  cache shrunk first) and of vmalloc other than thread stacks (KiB) while 16
  ib_write_bw connections run at 1 Mb/s, divided by their 32 QPs; the same with
  ib_read_bw, whose QPs have Read queues of the largest depth (see `mem_per_qp`);
- the TCP ceiling: single-stream iperf3 on the same address, in the same unit as perftest.

Profiles: after the measures, each provider runs PROFILES once more under
`perf record -a -e cpu-clock` (the guest's clock counts instructions under icount, so the
samples attribute instructions, not host time); profile.md lists, per workload and
provider, the CPU time sampled on all CPUs (the same work, so the totals compare like the
cycles do), its share by object and the top symbols. RSIW_BENCH_PROFILE=0 skips them.

Outputs in $RSIW_BENCH_OUT (a directory): bench.md (the table and the conditions),
bench.json (every raw run), profile.md and the perf reports (profile-*.txt);
`bench.py plot DIR`, which tests/bench.sh runs on the host afterwards, draws throughput.png
and latency.png from DIR/bench.json (hollow markers and hatched bars: cells whose null
experiment failed); `bench.py names N` lists the measures of a guest with N vCPUs that
RSIW_BENCH_ONLY keeps. RSIW_BENCH_ROUNDS sets the rounds
(default 2), RSIW_BENCH_ONLY=REGEX keeps the measures whose name matches, RSIW_BENCH_MTU
sets the path MTU (octets).
"""
import contextlib
import datetime
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

from kmem import shrink_slab_caches, slab_kib, vmalloc_kib

RSIW_KO = os.environ.get("RSIW_KO", "")
SIW_KO = os.environ.get("RSIW_SIW_KO", "")
SIW_CRC_KO = os.environ.get("RSIW_SIW_CRC_KO", "")
NET, ADDR = "rsbench0", "10.95.0.1"
T_RUN = 600
NULL_BAND = 0.05


class RunFailed(Exception):
    """A run that timed out or failed: recorded for its provider, not fatal."""

_port = [19000]


def sh(cmd, check=True):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=T_RUN)
    if check and p.returncode != 0:
        sys.exit(f"bench: command failed ({p.returncode}): {cmd}\n{p.stdout}{p.stderr}")
    return p.stdout


@contextlib.contextmanager
def topology(mtu=1500):
    """Loads the RDMA core's modules and, for the `with` block, sets up the topology the
    perftest measures run on: lo and the dummy netdev NET (address ADDR) at path MTU
    `mtu` (octets). Afterwards NET is gone and lo has its MTU back."""
    sh("modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm", check=False)
    lo_mtu = open("/sys/class/net/lo/mtu").read().strip()
    sh(f"ip link set lo mtu {mtu}")
    sh(f"ip link add {NET} type dummy && ip link set {NET} mtu {mtu} && "
       f"ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    try:
        yield
    finally:
        sh(f"ip link del {NET}", check=False)
        sh(f"ip link set lo mtu {lo_mtu}", check=False)


def load(mod, crc=False):
    """Loads `mod` (rsiw or siw), with MPA CRC32c asked for if `crc`, and creates its
    device `bench0` on the dummy netdev."""
    if mod == "rsiw":
        sh(f"insmod {RSIW_KO}" + (" mpa_crc=1" if crc else ""))
    elif crc:
        if not SIW_CRC_KO:
            sys.exit("bench: RSIW_SIW_CRC_KO is not set (the C siw asking for CRC)")
        sh(f"insmod {SIW_CRC_KO}")
    elif SIW_KO:
        sh(f"insmod {SIW_KO}")
    else:
        sh("modprobe siw")
    sh(f"rdma link add bench0 type {mod} netdev {NET}")


def unload(mod):
    sh("rdma link del bench0")
    sh(f"rmmod {mod}")


def kernel_kib():
    """Kernel memory in use that the kernel cannot reclaim (KiB): the slab objects
    allocated over every cache not accounted reclaimable (kmem.py), plus vmalloc other
    than thread stacks, every cache shrunk first: without it the slab share moves in
    whole slabs, unrelated to the work measured. Reclaimable caches (dentries, inodes)
    hold nothing of a QP's; the /proc entries of processes that exited stay in them until
    pruned, which happened between the two samples of one run in four and moved that
    run's figure by 3 KiB per QP."""
    shrink_slab_caches()
    return slab_kib(unreclaimable_only=True) + vmalloc_kib()


def run_seconds():
    """CPU time all tasks ran, summed over the CPUs (s), from /proc/schedstat (the
    scheduler's clock, which counts instructions under icount); idle time is not in it,
    and the time is in nanoseconds, not the ticks of /proc/stat."""
    ns = 0
    with open("/proc/schedstat") as f:
        for line in f:
            if line.startswith("cpu"):
                ns += int(line.split()[7])  # time tasks ran on this CPU (ns)
    return ns / 1e9


def listening(p):
    """Whether a server accepts connections on port `p`: an rdma_cm listener (the wildcard
    address: one child per device, bench0's included) and the provider's TCP socket behind
    it, which the rdma_cm creates after showing its id in LISTEN."""
    return (re.search(rf"link bench0/\S+ .*state LISTEN .*src-addr \S+:{p}\b",
                      sh("rdma res show cm_id", check=False)) is not None
            and sh(f"ss -Hltn 'sport = :{p}'", check=False).strip() != "")


def client_server(server, client, sample=None, ready=listening, wrap=()):
    """Starts `server` (argv; its port is the last element of `ready`'s argument), waits
    until `ready(port)`, runs `client` (behind the argv prefix `wrap`) to its end and
    returns (its output, the value of `sample()` taken once the client is connected or
    None, the client's run time in seconds)."""
    _port[0] += 1
    p = _port[0]
    server = [a.replace("{port}", str(p)) for a in server]
    client = list(wrap) + [a.replace("{port}", str(p)) for a in client]
    srv = subprocess.Popen(server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready(p):
            if srv.poll() is not None or time.monotonic() > deadline:
                raise RunFailed(f"{server[0]} server did not listen on port {p}")
            time.sleep(0.2)
        t0 = time.monotonic()
        cli = subprocess.Popen(client, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
        taken = None
        if sample:
            # Connected: the client's CM ID shows a peer address.
            deadline = time.monotonic() + 120
            while cli.poll() is None and time.monotonic() < deadline:
                if re.search(rf"dst-addr {re.escape(ADDR)}:{p}\b",
                             sh("rdma res show cm_id", check=False)):
                    time.sleep(1)
                    taken = sample()
                    break
                time.sleep(0.2)
        try:
            out, _ = cli.communicate(timeout=T_RUN)
        except subprocess.TimeoutExpired:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
            raise RunFailed(f"{' '.join(client)} timed out after {T_RUN} s")
        if cli.returncode != 0:
            raise RunFailed(f"{' '.join(client)} exited {cli.returncode}: "
                            + " | ".join(out.strip().splitlines()[-3:]))
        return out, taken, time.monotonic() - t0
    finally:
        if srv.poll() is None:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()


def perftest(tool, args, sample=None, wrap=()):
    """Runs a perftest server and client on bench0 (rdma_cm, `-R`), the client behind the
    argv prefix `wrap`; returns (the client's output, `sample()` taken once connected or
    None)."""
    common = perftest_argv(tool, args)
    return client_server(common, common + [ADDR], sample, wrap=wrap)[:2]


def perftest_argv(tool, args):
    """The argv of `tool`'s server on bench0 through rdma_cm with `args`; the client's
    adds ADDR. "{port}" stands for the port `client_server` picks."""
    return [tool, "-R", "-F", "-d", "bench0", "-p", "{port}"] + args


def result_row(out):
    """The first data row of perftest's result table, with its header, as fields."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*#bytes\s+#iterations", line):
            for row in lines[i + 1:]:
                f = row.split()
                if len(f) >= 4 and f[0].isdigit() and f[1].isdigit():
                    return line.split(), f
    raise RunFailed("no result row in: " + " | ".join(out.strip().splitlines()[-3:]))


def events(tool):
    """perftest's event mode (`-e`) where the tool has one."""
    return [] if tool in ("ib_write_bw", "ib_write_lat") else ["-e"]


def bw_iters(size):
    # ib_send_bw -e did not finish at 1 MiB with 40 iterations, with either provider;
    # with 200 it does. With 2,000 messages of 4 KiB (0.6 s of siw's polling
    # ib_write_bw) siw's null of that cell failed (1.067, runs of 13.7-15.6 MB/s); with
    # 10,000 it held in two trials (1.005, 0.967).
    return 10000 if size <= 4096 else 400 if size <= 65536 else 200


def send_credit_depth(tool, iters):
    """The receive depth (`-r`) that keeps perftest's Send credits from deadlocking an
    `ib_send_bw -e` run of `iters` messages.

    On an iWARP device perftest's Send tests use credits: the server RDMA-Writes its count
    of polled receives into the client every third of the receive depth (default 512),
    and the client posts no Send more than the receive depth ahead of that count. The
    Write completes nothing at the client, so in event mode a client held by the credits
    sleeps until a Send completion wakes it. Once every signalled Send it posted has
    completed, none does: the run hangs. That happens whenever the server's polling
    falls about a receive depth behind the Sends, which nothing else prevents: the
    provider places Sends into the posted receives without the server process, and a
    Send completes once TCP has queued it (in the C siw too). On two vCPUs without
    icount, one run in four or eight of rsiw's 4 KiB `ib_send_bw -e -n 10000` hung with
    the client exactly 512 Sends past a credit (2026-12-07). With the depth at `iters`
    (perftest lowers any larger one to it), the client is held only at its last Send,
    and only if the server has not polled a third of the messages by then (its first
    credit)."""
    return ["-r", str(iters)] if tool == "ib_send_bw" and events(tool) else []


def bw(tool, size, wrap=()):
    """Bandwidth of `tool` at `size` octets (MB/s, 2^20 octets per MB)."""
    n = bw_iters(size)
    _, row = result_row(perftest(tool, ["-s", str(size), "-n", str(n)] + events(tool)
                                 + send_credit_depth(tool, n), wrap=wrap)[0])
    return float(row[3])  # BW average [MB/sec]


def lat(tool, size=2, wrap=()):
    """Typical latency of `tool` at `size` octets (cycles)."""
    head, row = result_row(perftest(tool, ["-s", str(size), "-n", "1000", "-C"]
                                    + events(tool), wrap=wrap)[0])
    # Columns: #bytes #iterations t_min[cycles] t_max t_typical t_avg ...
    return float(row[head.index("t_typical[cycles]")] if "t_typical[cycles]" in head
                 else row[4])


CPU_ITERS = (200, 600)
"""The two run lengths (messages of 1 MiB) `cpu_per_gib` takes the difference of: at
least 200 each, as `bw_iters` says for `ib_send_bw -e` at 1 MiB. Counting user time
too (see `cpu_per_gib`), rsiw's figure moved by a third from one measure to the next
with runs of 200 and 400 and by a tenth with 200 and 600 (2026-12-06); without it, its
four measures of one benchmark spread 9.5 %, one of them low."""


def cpu_per_gib():
    """Kernel CPU milliseconds per GiB that `ib_send_bw -e` moves at 1 MiB: the CPU time
    all tasks ran (`run_seconds`, nanoseconds of the instruction-counted clock; Debian's
    kernel has no IRQ time accounting, so softirq work counts for the task it
    interrupted), less the user time of the two perftest processes, over a run of
    CPU_ITERS[1] messages, less that over a run of CPU_ITERS[0], per GiB of the
    difference.

    The window of a run opens when the server listens and closes once the client exited
    and the server was stopped, so the harness's polling for the listener is outside it,
    and the difference takes out what every run spends once: the programs' start (their
    libraries, read over virtiofs), memory registration, connection setup and exit. Both
    programs sleep on CQ events (`-e`), so the CPU is idle whenever neither has work: the
    figure is what moving the data cost, not the inverse of the throughput it is with a
    poller on one vCPU. User time is left out because most of it is not per message:
    each perftest process calibrates its cycle counter before its report by spinning on
    `gettimeofday()` for about 200 ms of clock time, and how much CPU that takes depends
    on whether the two processes' spins overlap (rsiw, 2026-12-06: 0.56-0.69 s a run,
    while the kernel's share of a 600-message run was 1.17-1.25 s). libsiw's per-message
    work in user space (posting to the mapped SQ, reading the mapped CQ) is the same
    library for both providers."""
    size = 1 << 20
    cpu = []
    for n in CPU_ITERS:
        common = perftest_argv("ib_send_bw", ["-s", str(size), "-n", str(n), "-e"])
        out, seconds, user = cpu_run(common, common + [ADDR])
        result_row(out)  # a run without its result fails
        cpu.append(seconds - user)
    return (cpu[1] - cpu[0]) * 1000 / (size * (CPU_ITERS[1] - CPU_ITERS[0]) / (1 << 30))


def cpu_run(server, client):
    """Runs `server` and `client` as `client_server` does; returns (the client's output,
    the CPU time all tasks ran (s, `run_seconds`) from the moment the server listens until
    `client_server` returns, the user time of the server and client (s, their whole
    lives: the server's start before the window too, which is the same in every run))."""
    start = [0.0, 0.0]

    def ready(p):
        if not listening(p):
            return False
        start[:] = [run_seconds(), children_user_seconds()]
        return True
    out, _, _ = client_server(server, client, ready=ready)
    return out, run_seconds() - start[0], children_user_seconds() - start[1]


def children_user_seconds():
    """User time (s) of this process's waited-for children. The kernel splits a task's
    run time into user and system time in proportion to the ticks it sampled in each,
    so the split is good to a few ticks (4 ms each) a process."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime


_warm = set()
"""The tools `mem_per_qp` made its discarded first run of."""


def mem_per_qp(tool="ib_write_bw"):
    """Kernel memory (KiB) per QP while `tool` (ib_write_bw or ib_read_bw) runs 16
    connections (32 QPs, both sides) for 4 s, sampled once all 32 are in RTS. perftest's
    own rate limit holds the transfers to 1 Mb/s, so the figure is what the QPs and their
    connections hold, not data in flight (which grows with the provider's speed).
    ib_write_bw's connections negotiate small Read depths; ib_read_bw's the device's
    largest (perftest's `-o` default, 128 with either provider), which size each
    connection's inbound and outbound Read queues.

    The first run of a boot also fills the caches of perftest's files (dentries, inodes),
    which are not the provider's and stay: that run is made once a tool and discarded."""
    q = 16
    args = ["-s", "4096", "-D", "4", "-q", str(q), "--rate_limit=1", "--rate_units=M",
            "--rate_limit_type=SW"]

    def all_connected():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(re.findall(r"\bstate RTS\b", sh("rdma res show qp", check=False))) >= 2 * q:
                return kernel_kib()
            time.sleep(0.1)
        return None

    if tool not in _warm:
        perftest(tool, args)
        _warm.add(tool)
    base = kernel_kib()
    _, peak = perftest(tool, args, sample=all_connected)
    if peak is None:
        raise RunFailed(f"{tool} -q {q}: its {2 * q} QPs were not seen in RTS")
    return max(peak - base, 0) / (2 * q)


def conn_rate():
    """rdma_cm connections per CPU second: `ucmatose -c 20 -C 0` (20 connections set up
    in one process, established and torn down) over the CPU time all tasks ran
    (`run_seconds`) from the moment the server listens until the client exits.

    Not over the client's wall time: under icount the guest's clock jumps over idle
    periods, and how long those are depends on the host's latency in serving virtiofs
    (ucmatose loads its libraries from it), which spread 20 connections of siw from 36 to
    324 ms in one boot while their CPU time stayed within 1 %. No Sends (`-C 0`): ucmatose
    busy-polls for their completions, and on one vCPU that measures the scheduler."""
    n = 20
    return n / cpu_run(*ucmatose(n))[1]


def ucmatose(n):
    """(server, client) argvs of `ucmatose` setting up and tearing down `n` connections
    on ADDR without Sends (`-C 0`), for `client_server`."""
    args = ["-p", "{port}", "-c", str(n), "-C", "0"]
    return ["ucmatose", "-b", ADDR] + args, ["ucmatose", "-s", ADDR] + args


def tcp_ceiling():
    """Single-stream iperf3 throughput on ADDR (MB/s, 2^20 octets per MB)."""
    out, _, _ = client_server(["iperf3", "-s", "-1", "-B", ADDR, "-p", "{port}"],
                           ["iperf3", "-c", ADDR, "-p", "{port}", "-t", "2", "-J"],
                           ready=lambda p: sh(f"ss -Hltn 'sport = :{p}'", check=False) != "")
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8 / (1 << 20)


PROFILES = [("ib_write_bw 1 MiB", lambda w: bw("ib_write_bw", 1 << 20, w)),
            ("ib_read_bw 64 KiB", lambda w: bw("ib_read_bw", 65536, w)),
            ("ib_send_bw 64 KiB", lambda w: bw("ib_send_bw", 65536, w)),
            ("ib_send_lat 8 B", lambda w: lat("ib_send_lat", 8, w)),
            ("ib_read_lat 8 B", lambda w: lat("ib_read_lat", 8, w))]
"""(workload, fn(wrap)) that `profile` records: fn runs its client behind `wrap`."""


def profile(outdir, mod, name, fn):
    """Runs `fn` with its client under `perf record -a` sampling cpu-clock (every CPU, so
    the server and the kernel too, for the client's lifetime); writes the report by symbol
    to outdir/profile-MOD-WORKLOAD.txt and returns (CPU milliseconds sampled on all CPUs,
    [(percent, symbol, module)] of the top symbols, [(percent, module)] of the top
    objects)."""
    base = os.path.join(outdir, f"profile-{mod}-{re.sub(r'[^a-z0-9]+', '-', name.lower())}")
    data = f"/tmp/{os.path.basename(base)}.data"
    fn(["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", "2000", "-o", data, "--"])
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                          "--sort", "sym,dso", "--percent-limit", "0.3"],
                         capture_output=True, text=True, timeout=T_RUN)
    with open(base + ".txt", "w") as f:
        f.write(rep.stdout + rep.stderr)
    by_dso = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                             "--sort", "dso", "--percent-limit", "1"],
                            capture_output=True, text=True, timeout=T_RUN).stdout
    os.unlink(data)
    # cpu-clock counts nanoseconds of the (instruction-counted) clock on all CPUs.
    total = re.search(r"# Event count \(approx\.\): (\d+)", rep.stdout)
    n = int(total.group(1)) / 1e6 if total else None
    top = []
    for line in rep.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[kH.]\]\s+(\S+)\s+(\S+)", line)
        if m:
            top.append((float(m.group(1)), m.group(2), m.group(3)))
    dsos = re.findall(r"^\s*([\d.]+)%\s+(\S+)", by_dso, flags=re.M)
    return n, top[:12], [(float(p), d) for p, d in dsos[:6]]


def profiles(outdir):
    """Records PROFILES for both providers; writes profile.md."""
    lines = ["Profiles: `perf record -a -e cpu-clock -F 2000` over each client's run "
             "(instruction-counted clock), top symbols per workload and provider. Samples "
             "fall where interrupts are enabled again, so time spent with interrupts off "
             "shows at the symbol that re-enables them.", ""]
    for name, fn in PROFILES:
        lines += [f"## {name}", ""]
        for mod in ("siw", "rsiw"):
            load(mod)
            try:
                n, top, dsos = profile(outdir, mod, name, fn)
            except (RunFailed, subprocess.TimeoutExpired) as e:
                lines += [f"{mod}: FAILED ({e})", ""]
                continue
            finally:
                unload(mod)
            lines += [f"{mod}: {n:.0f} CPU ms sampled; by object: "
                      + ", ".join(f"{d} {p:.0f} %" for p, d in dsos),
                      "", "| % | symbol | module |", "|---:|---|---|"]
            lines += [f"| {p:.1f} | `{sym}` | {dso} |" for p, sym, dso in top]
            lines.append("")
        print(f"[bench] profiled {name}", flush=True)
    with open(os.path.join(outdir, "profile.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def size_name(s):
    return f"{s} B" if s < 1024 else f"{s // 1024} KiB" if s < 1 << 20 else f"{s >> 20} MiB"


BW_TOOLS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
LAT_TOOLS = ("ib_send_lat", "ib_read_lat", "ib_write_lat")


SMP_LAT_SIZES = (8, 4096)
"""Message sizes (octets) of the latency cells of a guest with more than one vCPU."""


def one_vcpu_cases():
    """The measures of the one-vCPU guest (see `cases`)."""
    out = []
    for crc in (False, True):
        tag = " CRC" if crc else ""
        for t in BW_TOOLS:
            for s in ((4096, 65536, 1 << 20) if not crc else (65536, 1 << 20)):
                out.append((f"{t} {size_name(s)}{tag}", "MB/s", "higher", crc, (t, s),
                            lambda t=t, s=s: bw(t, s)))
        for t in LAT_TOOLS if not crc else LAT_TOOLS[:2]:
            for s in ((8, 4096) if not crc else (8,)):
                out.append((f"{t} {size_name(s)}{tag}", "cycles", "lower", crc, (t, s),
                            lambda t=t, s=s: lat(t, s)))
    out += [("rdma_cm connections per CPU second", "1/s", "higher", False, None, conn_rate),
            ("kernel CPU per GiB, ib_send_bw 1 MiB", "ms", "lower", False, None, cpu_per_gib),
            ("kernel memory per QP", "KiB", "lower", False, None, mem_per_qp),
            ("kernel memory per QP, ib_read_bw (ORD/IRD 128)", "KiB", "lower", False, None,
             lambda: mem_per_qp("ib_read_bw")),
            ("TCP ceiling (iperf3, 1 stream)", "MB/s", "higher", False, None, tcp_ceiling)]
    return out


def cases(vcpus=1):
    """(name, unit, better, crc, plot key or None, fn) of every measure of a guest with
    `vcpus` vCPUs. With one, all of them; with more, only the event-mode latencies of
    ib_send_lat and ib_read_lat at SMP_LAT_SIZES, named with the vCPU count: client and
    server then sleep and wake across CPUs, where an interrupt to another CPU, a work
    item or a thread on another CPU costs what one CPU hides. (icount runs the vCPUs
    round-robin on one host thread and counts the instructions of all of them, so a
    sleeping benchmark stays a count of instructions; a polling one would measure the
    round-robin's time slices.)"""
    if vcpus > 1:
        out = [(f"{t} {size_name(s)}, {vcpus} vCPUs", "cycles", "lower", False, None,
                lambda t=t, s=s: lat(t, s))
               for t in LAT_TOOLS[:2] for s in SMP_LAT_SIZES]
    else:
        out = one_vcpu_cases()
    only = os.environ.get("RSIW_BENCH_ONLY")
    return [c for c in out if not only or re.search(only, c[0])]


def spread(v):
    return (max(v) - min(v)) / statistics.median(v) if v and statistics.median(v) else None


def summarise(name, unit, better, crc, runs):
    """A cell: medians, spreads, the ratio and the null ratios of `runs`
    ({provider: {slot: [values]}})."""
    cell = {"unit": unit, "better": better, "crc": crc, "runs": runs}
    for m in ("rsiw", "siw"):
        allv = runs[m]["a"] + runs[m]["b"]
        cell[m] = statistics.median(allv) if allv else None
        cell[m + " spread"] = spread(allv)
        a, b = runs[m]["a"], runs[m]["b"]
        cell["null " + m] = (statistics.median(a) / statistics.median(b)
                             if a and b and statistics.median(b) else None)
    cell["ratio"] = cell["rsiw"] / cell["siw"] if cell["rsiw"] and cell["siw"] else None
    nulls = [cell["null rsiw"], cell["null siw"]]
    cell["counts"] = (cell["ratio"] is not None
                      and all(n is not None and abs(n - 1) <= NULL_BAND for n in nulls))
    return cell


def fmt(v, digits=2):
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if abs(v) < 100 else f"{v:.0f}"


def pct(v):
    return "-" if v is None else f"{v * 100:.1f} %"


def conditions_line(cond):
    """The sentence stating a boot's conditions `cond` above its table."""
    return (f"rsiw vs siw, {cond['date']}: {cond['kernel']}, {cond['vcpus']} vCPU"
            f"{'s' if cond['vcpus'] != 1 else ''}, {cond['clock']}, MTU {cond['mtu']}, "
            f"{cond['rounds']} rounds (each provider {2 * cond['rounds']} runs a cell), "
            f"rsiw {cond['rsiw']}.")


def markdown(cells, cond, more=()):
    """The table of `cells` under the conditions `cond`, then one table for each
    (cells, conditions) of `more` (the boots with more vCPUs)."""
    tables = [(c, k) for c, k in [(cells, cond), *more] if c] or [(cells, cond)]
    lines = []
    for cells_n, cond_n in tables:
        lines += [conditions_line(cond_n), ""] + table_rows(cells_n) + [""]
    lines += ["A ratio counts where both null ratios (a provider's slot-a runs over its "
              "slot-b runs) lie within 1 +- %.2f." % NULL_BAND,
              "The TCP ceiling does not depend on the provider: its two columns are the "
              "runs made with each loaded."]
    return "\n".join(lines) + "\n"


def table_rows(cells):
    """The Markdown table (header and one row a cell) of `cells`."""
    lines = ["| measure | unit | rsiw (spread) | siw (spread) | rsiw/siw | better "
             "| null siw | null rsiw | counts |",
             "|---|---|---:|---:|---:|---|---:|---:|---|"]
    for name, c in cells.items():
        lines.append(
            f"| {name} | {c['unit']} | {fmt(c['rsiw'])} ({pct(c['rsiw spread'])}) "
            f"| {fmt(c['siw'])} ({pct(c['siw spread'])}) | {fmt(c['ratio'])} | {c['better']} "
            f"| {fmt(c['null siw'], 3)} | {fmt(c['null rsiw'], 3)} "
            f"| {'yes' if c['counts'] else '**no**'} |")
    return lines


def merge(outdir, smpdir):
    """Adds the cells of the boot with more vCPUs (`smpdir`/bench.json, if that boot
    measured any) to `outdir`/bench.json, under the key "smp" with their conditions, and
    writes `outdir`/bench.md with both tables. Either boot may have been left out
    (RSIW_BENCH_ONLY kept none of its measures); at least one wrote its bench.json."""
    def load_json(path):
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)
    data = load_json(os.path.join(outdir, "bench.json"))
    smp = load_json(os.path.join(smpdir, "bench.json"))
    if data is None:
        data = {"conditions": smp["conditions"], "cells": {}}
    data.pop("smp", None)
    more = []
    if smp and smp["cells"]:
        data["smp"] = smp
        more = [(smp["cells"], smp["conditions"])]
    with open(os.path.join(outdir, "bench.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(outdir, "bench.md"), "w") as f:
        f.write(markdown(data["cells"], data["conditions"], more))


def plots(outdir):
    """Draws throughput.png and latency.png in `outdir` from its bench.json."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(os.path.join(outdir, "bench.json")) as f:
        data = json.load(f)
    cond, cells = data["conditions"], data["cells"]
    title = (f"{cond['kernel']}, {cond['vcpus']} vCPU unless named, {cond['clock']}, "
             f"MTU {cond['mtu']}, {cond['date']}")
    colours = {"rsiw": "tab:orange", "siw": "tab:blue"}
    ceiling = cells.get("TCP ceiling (iperf3, 1 stream)", {})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, tool in zip(axes, BW_TOOLS):
        for crc, style in ((False, "-"), (True, "--")):
            for m in ("rsiw", "siw"):
                pts = sorted((c["plot"][1], c[m], c["counts"]) for c in cells.values()
                             if c.get("plot") and c["plot"][0] == tool and c["crc"] == crc
                             and c[m] is not None)
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colours[m],
                        label=f"{m}{' CRC' if crc else ''}")
                for x, y, counts in pts:
                    ax.plot([x], [y], "o", color=colours[m],
                            markerfacecolor=colours[m] if counts else "none")
        if ceiling.get("siw") or ceiling.get("rsiw"):
            ax.axhline(ceiling.get("siw") or ceiling.get("rsiw"), color="grey",
                       linestyle=":", label="TCP (iperf3)")
        ax.set_xscale("log", base=2)
        ax.set_title(tool)
        ax.set_xlabel("message size (octets)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("MB/s (2^20 octets)")
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=8)
    fig.suptitle("throughput vs message size (hollow: null experiment failed): " + title,
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "throughput.png"), dpi=90)
    plt.close(fig)

    # The boot with more vCPUs has latency cells only; their names say so.
    cells = {**cells, **data.get("smp", {}).get("cells", {})}
    names = [n for n, c in cells.items() if c["unit"] == "cycles"]
    if names:
        fig, ax = plt.subplots(figsize=(12, 4.5))
        xs = range(len(names))
        for off, m in ((-0.2, "rsiw"), (0.2, "siw")):
            ax.bar([x + off for x in xs], [(cells[n][m] or 0) / 1000 for n in names], 0.4,
                   color=colours[m], label=m,
                   hatch=["" if cells[n]["counts"] else "//" for n in names])
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("typical latency (kcycles)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title("latency (hatched: null experiment failed): " + title, fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "latency.png"), dpi=90)
        plt.close(fig)


def main():
    if not RSIW_KO:
        sys.exit("bench: RSIW_KO is not set (run through tests/bench.sh)")
    rounds = int(os.environ.get("RSIW_BENCH_ROUNDS", "2"))
    outdir = os.environ.get("RSIW_BENCH_OUT", "build/bench")
    os.makedirs(outdir, exist_ok=True)
    sh("modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm", check=False)
    path_mtu = int(os.environ.get("RSIW_BENCH_MTU") or 1500)
    lo_mtu = open("/sys/class/net/lo/mtu").read().strip()
    sh(f"ip link set lo mtu {path_mtu}")
    sh(f"ip link add {NET} type dummy && ip link set {NET} mtu {path_mtu} && "
       f"ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    vcpus = os.cpu_count() or 1
    todo = cases(vcpus)
    runs = {c[0]: {m: {"a": [], "b": []} for m in ("rsiw", "siw")} for c in todo}
    failed = {c[0]: {"rsiw": 0, "siw": 0} for c in todo}
    for crc in (False, True):
        these = [c for c in todo if c[3] == crc]
        if not these:
            continue
        for r in range(rounds):
            for slot in ("a", "b"):
                for mod in ("siw", "rsiw"):
                    load(mod, crc)
                    try:
                        for name, unit, _, _, _, fn in these:
                            try:
                                v = fn()
                            except (RunFailed, subprocess.TimeoutExpired) as e:
                                failed[name][mod] += 1
                                print(f"[bench] round {r + 1}/{rounds} {mod}/{slot} {name}: "
                                      f"FAILED ({e})", flush=True)
                                continue
                            runs[name][mod][slot].append(v)
                            print(f"[bench] round {r + 1}/{rounds} {mod}/{slot} {name}: "
                                  f"{v:.1f} {unit}", flush=True)
                    finally:
                        unload(mod)
    if os.environ.get("RSIW_BENCH_PROFILE", "1") != "0" and vcpus == 1:
        profiles(outdir)
    mtu = int(open("/sys/class/net/lo/mtu").read())  # what the runs had, as set above
    sh(f"ip link del {NET}", check=False)
    sh(f"ip link set lo mtu {lo_mtu}", check=False)

    cond = {"date": datetime.date.today().isoformat(), "kernel": os.uname().release,
            "vcpus": vcpus, "mtu": mtu, "rounds": rounds,
            "clock": os.environ.get("RSIW_BENCH_CLOCK", "wall clock"),
            "rsiw": os.environ.get("RSIW_BENCH_REV", "?")}
    cells = {}
    for name, unit, better, crc, plot, _ in todo:
        cells[name] = summarise(name, unit, better, crc, runs[name])
        cells[name]["plot"] = plot
        cells[name]["failed"] = failed[name]
    table = markdown(cells, cond)
    print("\n" + table)
    with open(os.path.join(outdir, "bench.md"), "w") as f:
        f.write(table)
    with open(os.path.join(outdir, "bench.json"), "w") as f:
        json.dump({"conditions": cond, "cells": cells}, f, indent=1)
    print(f"bench: {outdir}/bench.md, bench.json")


if __name__ == "__main__":
    if sys.argv[1:2] == ["plot"]:
        plots(sys.argv[2])
    elif sys.argv[1:2] == ["merge"]:
        merge(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["names"]:
        print("\n".join(c[0] for c in cases(int(sys.argv[2]))))
    else:
        main()
