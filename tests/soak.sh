#!/usr/bin/env bash
# `make soak`: the long forms of the tests, with RSIW_SOAK=1.
#   - on the debug kernel (KASAN, lockdep, kmemleak): minutes of netem-impaired traffic
#     (1000 verified pings and perftest runs of 50 x 64 KiB and 10 x 1 MiB a tool for
#     each of the twelve cases), 40 rounds of failing allocations, every kill and removal
#     case of tests/guest/test_reliability.py, 120 s of scribbling on mapped rings per victim,
#     2,000 rdma_cm connection cycles (kmemleak sees a leak of one connection as well as of
#     10,000, which take about 40 minutes there) and 500 connections held at once, the resets and
#     the zero-window Read Response of test_hostile.py, 40 module load/unload cycles;
#   - on Debian's stock kernel: rping -C 1000 and perftest at 2 B ... 1 MiB, loopback, and
#     the 10,000 connection cycles again, there with their slab and vmalloc figures
#     checked against the baseline (KASAN's quarantine blurs them on the debug kernel).
# The parts run in six guests side by side (below). Prints a pass/fail table; the
# guests' logs, whole consoles (*-console.log) and JUnit XML are in build/soak/.
. "$(dirname "$0")/lib.sh"

"$RSIW_TOP/tests/build-module.sh" debug >/dev/null
"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
out="$RSIW_TOP/build/soak"
rm -rf "$out"
mkdir -p "$out"
# Six guests side by side, each test in one of them: the reliability file on two debug
# guests (its connection cycles and failing allocations, the rest; kmemleak scans after
# each), the impaired links, resets, zero windows and load/unload cycles on three more,
# and the stock kernel's cases.
# On two cores the guests are CPU-bound (load average 8, no idle time), so they share the
# CPU rather than multiply it; what the split buys is the cases' waits (netem delays, TCP
# recovery, the CM's timers) overlapping the other guests' work, and parts that end
# (and keep their results) independently.
# The captured output of every case goes into the JUnit XML (the memory figures below).
pytest_argv=(python3 -m pytest -v -p no:cacheprovider --durations=20 -o junit_logging=system-out)
log "soak: six guests side by side (hours under TCG); their logs: $out/*.log, a heartbeat each minute"
guests=()
pids=()
# guest NAME [VAR=VALUE...] PYTEST-ARGS...: starts guest NAME on the kernel its name begins
# with (debug-..., stock), running pytest with RSIW_SOAK=1 and the given environment;
# its log, whole console and JUnit XML are $out/NAME.log, NAME-console.log, junit-NAME.xml.
guest() {
	local name=$1 envs=()
	shift
	while [[ $1 =~ ^[A-Z0-9_]+= ]]; do
		envs+=("$1")
		shift
	done
	run_logged "$out/$name.log" env RSIW_CONSOLE_KEEP="$out/$name-console.log" \
		"$RSIW_TOP/tests/vm-run.sh" --kernel "${name%%-*}" \
		--timeout "${RSIW_SOAK_TIMEOUT:-21600}" -- \
		env RSIW_SOAK=1 "${envs[@]}" "${pytest_argv[@]}" \
		--junitxml="build/soak/junit-$name.xml" "$@" &
	pids+=($!)
	guests+=("$name")
}
guest debug-reliability tests/guest/test_reliability.py \
	-k "not (connection_cycles or allocation)"
# The connection cycles took 70 of the reliability guest's 159 minutes: a guest of their
# own, followed there by the failing allocations as in one guest (the sweep's lockdep report
# of two runs came after the cycles; a guest without them has not shown it).
guest debug-cycles RSIW_CYCLES=2000 tests/guest/test_reliability.py \
	-k "connection_cycles or allocation"
# The impaired links are the longest part (a netem case took 13-20 min beside four other
# guests, 3.5-4 min alone): three guests share them.
n=0
for part in "loss" "jitter or reorder" "duplicate or mtu576 or reset_in_the_middle or zero_window or load_unload"; do
	guest "debug-link$n" tests/guest/test_transport.py tests/guest/test_hostile.py \
		tests/guest/test_device.py \
		-k "(impaired_link or reset_in_the_middle or zero_window or load_unload) and ($part)"
	n=$((n + 1))
done
guest stock RSIW_RPING_COUNT=1000 RSIW_BW_SIZES=2,4096,65536,1048576 \
	tests/guest/test_transport.py tests/guest/test_reliability.py \
	-k "rping_loopback or perftest_loopback or connection_cycles"
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || rc=$?
done
xmls=()
for g in "${guests[@]}"; do
	log "soak: $out/$g.log, its summary:"
	sed -n '/short test summary\|slowest .* durations/,$p' "$out/$g.log" | tail -n 60
	xmls+=("$out/junit-$g.xml")
done
python3 - "${xmls[@]}" <<'PY' || rc=1
import os
import sys
import xml.etree.ElementTree as ET
# The kernel is the first word of the guest's name (junit-debug-cycles.xml: debug).
parts = [(os.path.basename(p)[len("junit-"):].split("-")[0].removesuffix(".xml"), p)
         for p in sys.argv[1:]]
cases = [(kernel, c) for kernel, path in parts
         if os.path.exists(path) for c in ET.parse(path).getroot().iter("testcase")]
# A guest that wrote no XML (it crashed or timed out) counts as a failed case.
rows = [(f"{kernel}: {os.path.basename(path)} (no results)", 0.0, "ERROR")
        for kernel, path in parts if not os.path.exists(path)]
figures = []
for kernel, c in cases:
    verdict = "pass"
    for kind in ("failure", "error", "skipped"):
        if c.find(kind) is not None:
            verdict = {"failure": "FAIL", "error": "ERROR", "skipped": "skip"}[kind]
    rows.append((f"{kernel}: " + c.get("classname", "").split(".")[-1] + "::" + c.get("name"),
                 float(c.get("time", 0)), verdict))
    if "connection_cycles" in c.get("name", ""):
        out = c.findtext("system-out") or ""
        figures += [f"{kernel}: {line.strip()}" for line in out.splitlines()
                    if "KiB" in line]
w = max(len(r[0]) for r in rows)
print(f"{'case':<{w}}  {'seconds':>8}  verdict")
for name, t, v in rows:
    print(f"{name:<{w}}  {t:8.1f}  {v}")
bad = [r for r in rows if r[2] in ("FAIL", "ERROR")]
if figures:
    print("memory of the connection cycles (kmalloc and vmalloc, KiB):")
    print("\n".join(figures))
print(f"soak: {len(rows) - len(bad)} of {len(rows)} cases passed or skipped, {len(bad)} failed")
sys.exit(1 if bad else 0)
PY
[ "$rc" = 0 ] || die "soak: failed (see above)"
log "soak: all passed"
