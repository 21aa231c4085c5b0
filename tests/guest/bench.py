# SPDX-License-Identifier: GPL-2.0
"""`make bench` in the guest: rsiw against the C siw in one boot, as ratios.

Both providers run the same perftest programs through rdma_cm (`-R`) on the same topology:
one device on a dummy netdev, client and server connecting to its address (loopback
through the kernel's TCP stack). Each measurement alternates rsiw and siw runs
(`RSIW_BENCH_REPEAT` pairs, default 5 from tests/bench.sh) and compares the medians:

- bandwidth (MB/s, perftest's BW average) of ib_write_bw, ib_read_bw and ib_send_bw at
  4 KiB, 64 KiB and 1 MiB messages: ratio rsiw/siw, above 1 is better;
- latency of ib_write_lat and ib_send_lat at 2 octets in CPU cycles (`-C`; perftest's usec
  are unusable under TCG): ratio rsiw/siw, below 1 is better;
- kernel memory: growth of Slab + VmallocUsed (KiB) while 8 connections of ib_write_bw
  (`-q 8`) are open, and the module's core size: ratio rsiw/siw, below 1 is better.

Absolute numbers under QEMU's TCG mean little; the ratios compare the two providers under
the same emulation. Results go to stdout and, as JSON, to $RSIW_BENCH_OUT if set.
RSIW_BENCH_ONLY=REGEX runs only the measures whose name matches (`make bench
RSIW_BENCH_ONLY=lat` for the two latencies), for a quick look at one of them.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

RSIW_KO = os.environ.get("RSIW_KO", "")
SIW_KO = os.environ.get("RSIW_SIW_KO", "")
REPEAT = int(os.environ.get("RSIW_BENCH_REPEAT", "3"))
NET, ADDR = "rsbench0", "10.95.0.1"
T_RUN = 120


class RunFailed(Exception):
    """A perftest run that timed out or failed: recorded for its provider, not fatal."""

_port = [19000]


def sh(cmd, check=True):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=T_RUN)
    if check and p.returncode != 0:
        sys.exit(f"bench: command failed ({p.returncode}): {cmd}\n{p.stdout}{p.stderr}")
    return p.stdout


def load(mod):
    """Loads `mod` (rsiw or siw) and creates its device `bench0` on the dummy netdev."""
    if mod == "rsiw":
        sh(f"insmod {RSIW_KO}")
    elif SIW_KO:
        sh(f"insmod {SIW_KO}")
    else:
        sh("modprobe siw")
    sh(f"rdma link add bench0 type {mod} netdev {NET}")


def unload(mod):
    sh("rdma link del bench0")
    sh(f"rmmod {mod}")


def kernel_kib():
    """Slab + VmallocUsed from /proc/meminfo (KiB)."""
    m = dict(re.findall(r"^(\w+):\s+(\d+)", open("/proc/meminfo").read(), flags=re.M))
    return int(m["Slab"]) + int(m["VmallocUsed"])


def listening(p):
    """Whether perftest's server accepts connections on port `p`: an rdma_cm listener
    (the wildcard address: one child per device, bench0's included) and the provider's
    TCP socket behind it, which the rdma_cm creates after showing its id in LISTEN."""
    return (re.search(rf"link bench0/\S+ .*state LISTEN .*src-addr \S+:{p}\b",
                      sh("rdma res show cm_id", check=False)) is not None
            and sh(f"ss -Hltn 'sport = :{p}'", check=False).strip() != "")


def perftest(tool, args, sample=None):
    """Runs a perftest server and client on bench0; returns (client output, the value of
    `sample()` taken once both are connected, or None)."""
    _port[0] += 1
    p = _port[0]
    common = [tool, "-R", "-F", "-d", "bench0", "-p", str(p)] + args
    srv = subprocess.Popen(common, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not listening(p):
            if srv.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"bench: {tool} server did not listen on port {p}")
            time.sleep(0.2)
        cli = subprocess.Popen(common + [ADDR], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
        taken = None
        if sample:
            # Connected: the client's CM ID shows a peer address.
            deadline = time.monotonic() + 60
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
            raise RunFailed(f"{tool} {' '.join(args)} timed out after {T_RUN} s")
        if cli.returncode != 0:
            raise RunFailed(f"{tool} {' '.join(args)} exited {cli.returncode}: "
                            + " | ".join(out.strip().splitlines()[-3:]))
        srv.wait(timeout=60)
        return out, taken
    finally:
        for pr in (srv,):
            if pr.poll() is None:
                os.killpg(pr.pid, signal.SIGKILL)
                pr.wait()


def result_row(out):
    """The first data row of perftest's result table, as fields."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*#bytes\s+#iterations", line):
            for row in lines[i + 1:]:
                f = row.split()
                if len(f) >= 4 and f[0].isdigit() and f[1].isdigit():
                    return line.split(), f
    raise RunFailed("no result row in: " + " | ".join(out.strip().splitlines()[-3:]))


def bw(tool, size):
    iters = 200 if size <= 65536 else 40
    _, row = result_row(perftest(tool, ["-s", str(size), "-n", str(iters)])[0])
    return float(row[3])  # BW average [MB/sec]


def lat(tool):
    head, row = result_row(perftest(tool, ["-s", "2", "-n", "500", "-C"])[0])
    # Columns: #bytes #iterations t_min[cycles] t_max t_typical t_avg ...
    return float(row[head.index("t_typical[cycles]")] if "t_typical[cycles]" in head
                 else row[4])


def mem():
    base = kernel_kib()
    _, peak = perftest("ib_write_bw", ["-s", "65536", "-n", "2000", "-q", "8"],
                       sample=kernel_kib)
    return float(max(peak - base, 0)) if peak is not None else float("nan")


def coresize(mod):
    return float(open(f"/sys/module/{mod}/coresize").read())


CASES = ([(f"{t} {s // 1024} KiB MB/s", "higher", lambda t=t, s=s: bw(t, s))
          for t in ("ib_write_bw", "ib_read_bw", "ib_send_bw")
          for s in (4096, 65536, 1 << 20)]
         + [(f"{t} 2 B cycles", "lower", lambda t=t: lat(t))
            for t in ("ib_write_lat", "ib_send_lat")]
         + [("kernel KiB, 8 QPs open", "lower", mem)])
if os.environ.get("RSIW_BENCH_ONLY"):
    CASES = [c for c in CASES if re.search(os.environ["RSIW_BENCH_ONLY"], c[0])]


def main():
    if not RSIW_KO:
        sys.exit("bench: RSIW_KO is not set (run through tests/bench.sh)")
    sh("modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm", check=False)
    sh(f"ip link add {NET} type dummy && ip addr add {ADDR}/24 dev {NET} && "
       f"ip link set {NET} up")
    results = {name: {"rsiw": [], "siw": [], "better": better} for name, better, _ in CASES}
    results["module core size (octets)"] = {"rsiw": [], "siw": [], "better": "lower"}
    for r in range(REPEAT):
        for mod in ("rsiw", "siw"):
            load(mod)
            if r == 0:
                results["module core size (octets)"][mod].append(coresize(mod))
            for name, _, fn in CASES:
                try:
                    v = fn()
                except RunFailed as e:
                    results[name][mod + " failed"] = results[name].get(mod + " failed", 0) + 1
                    print(f"[bench] pass {r + 1}/{REPEAT} {mod:4} {name}: FAILED ({e})",
                          flush=True)
                    continue
                results[name][mod].append(v)
                print(f"[bench] pass {r + 1}/{REPEAT} {mod:4} {name}: {v:.1f}", flush=True)
            unload(mod)
    sh(f"ip link del {NET}", check=False)

    print("\n== rsiw vs siw (median of %d runs each; Debian's kernel under QEMU)" % REPEAT)
    print("(runs that failed or timed out are left out of the median and counted)")
    print(f"{'measure':34} {'rsiw':>12} {'siw':>12} {'rsiw/siw':>9}  better  failed")
    out = {}
    nan = float("nan")
    for name, r in results.items():
        a = statistics.median(r["rsiw"]) if r["rsiw"] else nan
        b = statistics.median(r["siw"]) if r["siw"] else nan
        ratio = a / b if b else nan
        fails = {m: r.get(m + " failed", 0) for m in ("rsiw", "siw")}
        out[name] = {"rsiw": a, "siw": b, "ratio": ratio, "better": r["better"],
                     "runs": {"rsiw": r["rsiw"], "siw": r["siw"]}, "failed": fails}
        failed = ", ".join(f"{m} {n}" for m, n in fails.items() if n) or "-"
        print(f"{name:34} {a:12.1f} {b:12.1f} {ratio:9.2f}  {r['better']:6}  {failed}")
    if os.environ.get("RSIW_BENCH_OUT"):
        with open(os.environ["RSIW_BENCH_OUT"], "w") as f:
            json.dump({"kernel": os.uname().release, "repeat": REPEAT, "results": out}, f,
                      indent=1)


if __name__ == "__main__":
    main()
