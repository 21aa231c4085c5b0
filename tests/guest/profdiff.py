# SPDX-License-Identifier: GPL-2.0
"""`make bench-profile` in the guest: where rsiw spends more than siw per iteration.

tests/bench.sh's guest (one vCPU, `-icount shift=0,sleep=off`: the clock counts executed
instructions) runs one workload per provider under `perf record -a -e cpu-clock -c
RSIW_PROF_PERIOD` (default 5000 ns, so one sample per 5000 instructions): a perftest
latency test (RSIW_PROF_TOOL, default ib_send_lat; ib_read_lat and the others, at 8
octets, in event mode where the tool has one; ib_write_lat polls, and its iterations then
mostly count the pollers' spinning and the scheduler's switches between them), run for
RSIW_PROF_ITERS iterations (default 20000) and for a fifth of them, or with RSIW_PROF_TOOL
`ucmatose` `make bench`'s connection setup (`ucmatose -c 20 -C 0`, 20 connections set up
and torn down in one process, repeated for RSIW_PROF_ITERS connections, default 100). A
symbol's samples times the period over the iterations is the instructions per iteration
it took (a Send or Read each way, or one connection, and what the kernel, uverbs,
librdmacm, libsiw and the programs did for it). For a perftest the shorter run's samples
are subtracted first, and with them the programs' start, setup and exit: at 2000
ib_write_lat iterations those had been more than half of the kernel's share. What is
left of the user-space objects (perftest, libc, the vDSO, libsiw) is small and can come
out negative: perftest's start (its clock calibration) varies from run to run by more
than their share of the extra iterations. Read the kernel's figures.

Samples fall where interrupts are enabled again: instructions run with interrupts off show
at the symbol that re-enables them (`_raw_spin_unlock_irqrestore`,
`_raw_spin_unlock_irq_enable`), not where they ran. perf's own sampling adds about 15 % to
the latency of both providers.

Outputs in $RSIW_BENCH_OUT (a directory): profdiff-TOOL.md (totals by object, each
provider's own functions, the largest differences per symbol) and
profdiff-TOOL-rsiw-symoff.txt (rsiw's samples by symbol and offset), which
tests/bench-profile.sh maps to source lines with addr2line on the host, and
profdiff-TOOL-symbols.tsv (every symbol's instructions per iteration, both providers, the
largest excess of rsiw's first).
"""
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (RunFailed, client_server, events, load, perftest, result_row,  # noqa: E402
                   topology, ucmatose, unload)

TOOL = os.environ.get("RSIW_PROF_TOOL", "ib_send_lat")
CONNECT = TOOL == "ucmatose"
"""Whether the workload is connection setup (an iteration is one connection)."""
CONNECTIONS = 20
"""Connections per ucmatose run (`make bench`'s); RSIW_PROF_ITERS is rounded down to a
multiple of it."""
ITERS = int(os.environ.get("RSIW_PROF_ITERS", "100" if CONNECT else "20000"))
if CONNECT:
    ITERS = max(ITERS // CONNECTIONS, 1) * CONNECTIONS
BASE = 0 if CONNECT else max(ITERS // 5, 1)
"""Iterations of the shorter perftest run whose samples are subtracted (see `record`)."""
PERIOD = int(os.environ.get("RSIW_PROF_PERIOD", "5000"))
OUT = os.environ.get("RSIW_BENCH_OUT", "build/bench")
OWN = {"siw": r"^siw_", "rsiw": r"4rsiw|^rsiw_"}
"""A provider's own functions: siw's C names, rsiw's mangled Rust paths and its C shim."""
ATTEMPTS = 3
"""Runs of one recording before the profile fails: the C siw's `ib_send_lat -e` client
sometimes exits 255 without output, and a rerun passes. Each failure is printed."""


def attempts(run, what):
    """`run()`'s result, called up to ATTEMPTS times while it raises RunFailed (`what`
    names it in the message printed for each failure)."""
    for i in range(1, ATTEMPTS + 1):
        try:
            return run()
        except RunFailed as e:
            print(f"profdiff: {what} failed (attempt {i} of {ATTEMPTS}): {e}", file=sys.stderr,
                  flush=True)
            if i == ATTEMPTS:
                raise


def difference(long, short):
    """The samples of `long` less those of `short` ({key: samples} each), keys of either;
    a key's difference may be negative (sampling noise)."""
    return collections.Counter({k: long.get(k, 0) - short.get(k, 0)
                                for k in set(long) | set(short)})


def record(mod):
    """Runs TOOL with `mod` loaded under perf; returns (perftest's typical latency in
    cycles, or None for ucmatose, {(symbol, object): samples}, Counter of rsiw's
    'symbol+offset' samples). A perftest's samples are those of an ITERS run less those
    of a BASE run: what its ITERS - BASE more iterations took, without its start, setup
    and exit."""
    data = f"/tmp/profdiff-{mod}.data"
    wrap = ["perf", "record", "-q", "-a", "-e", "cpu-clock", "-c", str(PERIOD), "-o", data,
            "--"]
    load(mod)
    try:
        if not CONNECT:
            runs = []
            for n in (BASE, ITERS):
                out = attempts(lambda n=n: perftest(TOOL, ["-s", "8", "-n", str(n), "-C"]
                                                    + events(TOOL), wrap=wrap)[0],
                               f"{TOOL} on {mod}")
                runs.append(report(data, out, mod))
            (_, s0, o0), (typical, s1, o1) = runs
            return typical, difference(s1, s0), difference(o1, o0)
        # Rounds of CONNECTIONS: more at once fail to create their CQs (ENOMEM) with siw.
        syms, offs = collections.Counter(), collections.Counter()
        for _ in range(ITERS // CONNECTIONS):
            # client_server fails unless the client exits 0.
            out = attempts(lambda: client_server(*ucmatose(CONNECTIONS), wrap=wrap)[0],
                           f"ucmatose on {mod}")
            _, s, o = report(data, out, mod)
            syms.update(s)
            offs.update(o)
        return None, syms, offs
    finally:
        unload(mod)


def report(data, out, mod):
    """[`record`]'s result from perf's `data` and perftest's output `out`. The module must
    still be loaded: perf resolves its symbols from /proc/kallsyms."""
    typical = None
    if not CONNECT:
        head, row = result_row(out)
        typical = float(row[head.index("t_typical[cycles]")] if "t_typical[cycles]" in head
                        else row[4])
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                          "--sort", "sym,dso", "-F", "sample,sym,dso", "--percent-limit",
                          "0"], capture_output=True, text=True, check=True).stdout
    syms = collections.Counter()
    for line in rep.splitlines():
        m = re.match(r"\s+(\d+)\s+\[[^\]]+\]\s+(.+?)\s{2,}(\S+)\s*$", line)
        if m:
            syms[(m.group(2).strip(), m.group(3))] += int(m.group(1))
    offs = collections.Counter()
    if mod == "rsiw":
        scr = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,symoff",
                              "--no-demangle"], capture_output=True, text=True,
                             check=True).stdout
        # Lines of "IP SYMBOL+0xOFFSET"; the IP (where the module was loaded) is dropped.
        offs.update(s.split()[-1] for s in scr.splitlines() if re.search(OWN["rsiw"], s))
    os.unlink(data)
    return typical, syms, offs


def per_iter(samples):
    return samples * PERIOD / (ITERS - BASE)


def main():
    os.makedirs(OUT, exist_ok=True)
    with topology():
        res = {m: record(m) for m in ("siw", "rsiw")}
    s, r = res["siw"][1], res["rsiw"][1]
    what = "connection" if CONNECT else "iteration"
    lines = [f"# {TOOL}{'' if CONNECT else ' 8 B'}: instructions per {what}, rsiw against "
             "siw", "",
             f"`perf record -a -e cpu-clock -c {PERIOD}` over {ITERS} {what}s"
             + (f", less a run of {BASE}" if BASE else "")
             + " (`tests/guest/profdiff.py` says how to read it)."]
    if not CONNECT:
        lines[-1] += (f" Typical latency under perf: siw {res['siw'][0]:.0f} cycles, rsiw "
                      f"{res['rsiw'][0]:.0f} ({res['rsiw'][0] / res['siw'][0]:.2f}x).")
    lines += ["", "| object | siw | rsiw |", "|---|---:|---:|"]
    objs = collections.Counter()
    for d, m in ((s, "siw"), (r, "rsiw")):
        for (_, o), v in d.items():
            objs[(o, m)] += v
    for o in sorted({o for o, _ in objs}, key=lambda o: -objs[(o, "rsiw")])[:8]:
        lines.append(f"| {o} | {per_iter(objs[(o, 'siw')]):.0f} | "
                     f"{per_iter(objs[(o, 'rsiw')]):.0f} |")
    lines.append(f"| total | {per_iter(sum(s.values())):.0f} | "
                 f"{per_iter(sum(r.values())):.0f} |")
    for m, d in (("siw", s), ("rsiw", r)):
        own = {k: v for k, v in d.items() if re.search(OWN[m], k[0])}
        lines += ["", f"## {m}'s own functions: {per_iter(sum(own.values())):.0f} per "
                  f"{what}", "", "| instructions | symbol |", "|---:|---|"]
        lines += [f"| {per_iter(v):.0f} | `{k[0]}` |"
                  for k, v in sorted(own.items(), key=lambda x: -x[1])[:25]]
    lines += ["", "## Largest differences per symbol (rsiw - siw)", "",
              "| rsiw - siw | siw | rsiw | symbol | object |", "|---:|---:|---:|---|---|"]
    for k in sorted(set(s) | set(r), key=lambda k: -abs(r[k] - s[k]))[:50]:
        lines.append(f"| {per_iter(r[k] - s[k]):.0f} | {per_iter(s[k]):.0f} | "
                     f"{per_iter(r[k]):.0f} | `{k[0]}` | {k[1]} |")
    with open(os.path.join(OUT, f"profdiff-{TOOL}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(OUT, f"profdiff-{TOOL}-rsiw-symoff.txt"), "w") as f:
        f.writelines(f"{v} {k}\n" for k, v in res["rsiw"][2].most_common())
    with open(os.path.join(OUT, f"profdiff-{TOOL}-symbols.tsv"), "w") as f:
        f.write("rsiw-siw\tsiw\trsiw\tsymbol\tobject\n")
        f.writelines(f"{per_iter(r[k] - s[k]):.0f}\t{per_iter(s[k]):.0f}\t"
                     f"{per_iter(r[k]):.0f}\t{k[0]}\t{k[1]}\n"
                     for k in sorted(set(s) | set(r), key=lambda k: -(r[k] - s[k])))
    print(f"[profdiff] {TOOL}: siw {per_iter(sum(s.values())):.0f}, rsiw "
          f"{per_iter(sum(r.values())):.0f} instructions per {what}; "
          f"{OUT}/profdiff-{TOOL}.md", flush=True)


def source_lines(outdir, ko, top=40):
    """Host side (`profdiff.py lines DIR KO`): maps rsiw's samples by symbol and offset to
    the source lines of module `ko` (addr2line over its .text, inlined frames included)
    and appends two tables to DIR's profdiff-TOOL.md: instructions per iteration by the
    innermost line, and by every line on the inline chain (what a call site costs with
    what was inlined into it)."""
    text = subprocess.run(["readelf", "-SW", ko], capture_output=True, text=True,
                          check=True).stdout
    ndx = re.search(r"\[\s*(\d+)\]\s+\.text\s", text).group(1)
    base = {}
    for line in subprocess.run(["readelf", "-sW", ko], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[6] == ndx:
            base[f[7]] = int(f[1], 16)
    samples = []
    with open(os.path.join(outdir, f"profdiff-{TOOL}-rsiw-symoff.txt")) as f:
        for line in f:
            m = re.match(r"(\d+) (\S+)\+0x([0-9a-f]+)", line)
            if m and m.group(2) in base:
                samples.append((int(m.group(1)), base[m.group(2)] + int(m.group(3), 16)))
    chain = {}
    for a in sorted({a for _, a in samples}):
        o = subprocess.run(["addr2line", "-i", "-e", ko, "-j", ".text", hex(a)],
                           capture_output=True, text=True).stdout.splitlines()
        chain[a] = [re.sub(r" \(discriminator \d+\)", "",
                           re.sub(r".*/(rust|kernel|include)/", r"\1/", x)) for x in o if x]
    inner, incl = collections.Counter(), collections.Counter()
    for n, a in samples:
        inner[chain[a][0] if chain[a] else "?"] += n
        for x in set(chain[a]):
            incl[x] += n
    lines = []
    for title, c in (("innermost source line", inner),
                     ("source line on the inline chain (inclusive)", incl)):
        lines += ["", f"## rsiw by {title}", "", "| instructions | line |", "|---:|---|"]
        lines += [f"| {per_iter(v):.0f} | `{x}` |" for x, v in c.most_common(top)]
    with open(os.path.join(outdir, f"profdiff-{TOOL}.md"), "a") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["lines"]:
        source_lines(sys.argv[2], sys.argv[3])
    else:
        main()
