#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-profile`: instructions per iteration of an 8-octet latency workload, or per
# connection of `make bench`'s connection setup, rsiw against the C siw, per symbol and per
# rsiw source line (tests/guest/profdiff.py), in one boot of Debian's kernel on one vCPU
# under `-icount shift=0,sleep=off` like `make bench`. RSIW_PROF_TOOL (default
# ib_send_lat; ib_read_lat, ucmatose), RSIW_PROF_ITERS (default 20000, for ucmatose 100)
# and RSIW_PROF_PERIOD (ns of the instruction-counted clock per sample, default 5000)
# shape it. Result: build/bench/profdiff-TOOL.md. About 2 minutes here.
. "$(dirname "$0")/lib.sh"

ko=$("$RSIW_TOP/tests/build-module.sh" stock)
cache_lock
root=$("$RSIW_TOP/tests/root.sh")
"$RSIW_TOP/tests/kernel.sh" stock >/dev/null
cache_unlock

tool=${RSIW_PROF_TOOL:-ib_send_lat}
mkdir -p "$RSIW_TOP/build/bench"
log "bench-profile: $tool under perf, siw then rsiw (1 vCPU, icount)"
prof=(RSIW_PROF_TOOL="$tool" RSIW_PROF_PERIOD="${RSIW_PROF_PERIOD:-5000}")
if [ -n "${RSIW_PROF_ITERS:-}" ]; then
	prof+=(RSIW_PROF_ITERS="$RSIW_PROF_ITERS")
fi
"$RSIW_TOP/tests/vm-run.sh" --kernel stock --cpus 1 --icount \
	--timeout "${RSIW_BENCH_TIMEOUT:-1800}" -- \
	env "${prof[@]}" RSIW_BENCH_OUT=build/bench python3 tests/guest/profdiff.py
log "bench-profile: mapping rsiw's samples to source lines (addr2line)"
in_root "$root" env "${prof[@]}" \
	python3 "$RSIW_TOP/tests/guest/profdiff.py" lines "$RSIW_TOP/build/bench" "$ko"
log "bench-profile: build/bench/profdiff-$tool.md"
