#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`: rsiw against the C siw (built from the same kernel source) in one boot of
# Debian's own kernel, as ratios, with a null experiment (tests/guest/bench.py).
#
# The guest runs on one vCPU under QEMU's `-icount shift=0,sleep=off`: its clocks count
# the instructions it executes, so cycles and MB/s measure the CPU work of the providers
# and programs whatever the host's load. The C siw of this kernel has no module
# parameters; for the CRC rows this script builds a copy of it (build/siw-crc) whose
# `mpa_crc_required` constant is true, the one line that differs.
#
# A second boot on RSIW_BENCH_SMP_VCPUS vCPUs (default 2; 0 or 1 skips it), under the
# same clock, measures the event-mode latencies again with wake-ups across CPUs; its table
# goes under the first (tests/guest/bench.py, `cases`).
#
# Results: build/bench/bench.md (tables and conditions), bench.json (every run),
# throughput.png and latency.png. RSIW_BENCH_ROUNDS (default 2) and RSIW_BENCH_ONLY
# (a regular expression over the measures' names) shorten a run; RSIW_BENCH_MTU (default
# 1500) is the path MTU.
. "$(dirname "$0")/lib.sh"

"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
cache_lock
root=$("$RSIW_TOP/tests/root.sh")
tree=$("$RSIW_TOP/tests/kernel.sh" stock)
cache_unlock

crc="$RSIW_TOP/build/siw-crc"
log "bench: building the C siw with mpa_crc_required = true (build/siw-crc)"
rm -rf "$crc"
mkdir -p "$crc"
cp "$tree"/rsiw-siw/*.[ch] "$tree"/rsiw-siw/Makefile "$tree"/rsiw-siw/Kconfig "$crc"/
sed -i 's/^const bool mpa_crc_required;$/const bool mpa_crc_required = true;/' "$crc/siw_main.c"
grep -q '^const bool mpa_crc_required = true;$' "$crc/siw_main.c" ||
	die "siw_main.c has no 'const bool mpa_crc_required;' line to turn on"
run_logged "$crc/build.log" in_root "$root" make -C "$tree" M="$crc" CONFIG_RDMA_SIW=m modules ||
	die "building the C siw with CRC failed (build/siw-crc/build.log)"

rev=$(git -C "$RSIW_TOP" describe --always --dirty 2>/dev/null || cat "$RSIW_TOP/VERSION")
mkdir -p "$RSIW_TOP/build/bench"
rm -f "$RSIW_TOP/build/bench/bench.json" "$RSIW_TOP/build/bench/bench.md"
# Whether RSIW_BENCH_ONLY keeps a measure of a guest with $1 vCPUs.
measures() {
	[ -n "$(in_root "$root" env RSIW_BENCH_ONLY="${RSIW_BENCH_ONLY:-}" \
		python3 "$RSIW_TOP/tests/guest/bench.py" names "$1")" ]
}
if measures 1; then
	log "bench: rsiw vs siw on Debian's kernel, 1 vCPU, icount (about 28 minutes a round under TCG)"
	"$RSIW_TOP/tests/vm-run.sh" --kernel stock --cpus 1 --icount \
		--timeout "${RSIW_BENCH_TIMEOUT:-7200}" -- \
		env RSIW_BENCH_ROUNDS="${RSIW_BENCH_ROUNDS:-2}" RSIW_BENCH_ONLY="${RSIW_BENCH_ONLY:-}" \
		RSIW_BENCH_PROFILE="${RSIW_BENCH_PROFILE:-1}" \
		RSIW_BENCH_MTU="${RSIW_BENCH_MTU:-1500}" \
		RSIW_BENCH_OUT=build/bench RSIW_SIW_CRC_KO="$crc/siw.ko" RSIW_BENCH_REV="$rev" \
		RSIW_BENCH_CLOCK="icount (shift=0, sleep=off)" \
		python3 tests/guest/bench.py
fi
smp=${RSIW_BENCH_SMP_VCPUS:-2}
smpdir="$RSIW_TOP/build/bench/smp"
rm -rf "$smpdir"
if [ "$smp" -gt 1 ] && measures "$smp"; then
	log "bench: the event-mode latencies again on $smp vCPUs, icount (about a minute a round)"
	"$RSIW_TOP/tests/vm-run.sh" --kernel stock --cpus "$smp" --icount \
		--timeout "${RSIW_BENCH_TIMEOUT:-7200}" -- \
		env RSIW_BENCH_ROUNDS="${RSIW_BENCH_ROUNDS:-2}" RSIW_BENCH_ONLY="${RSIW_BENCH_ONLY:-}" \
		RSIW_BENCH_PROFILE=0 RSIW_BENCH_MTU="${RSIW_BENCH_MTU:-1500}" \
		RSIW_BENCH_OUT=build/bench/smp RSIW_BENCH_REV="$rev" \
		RSIW_BENCH_CLOCK="icount (shift=0, sleep=off)" \
		python3 tests/guest/bench.py
fi
[ -e "$RSIW_TOP/build/bench/bench.json" ] || [ -e "$smpdir/bench.json" ] ||
	die "RSIW_BENCH_ONLY='${RSIW_BENCH_ONLY:-}' keeps no measure (tests/guest/bench.py names N lists them)"
in_root "$root" python3 "$RSIW_TOP/tests/guest/bench.py" merge "$RSIW_TOP/build/bench" "$smpdir"
log "bench: drawing the plots"
in_root "$root" env MPLCONFIGDIR=/tmp python3 "$RSIW_TOP/tests/guest/bench.py" plot \
	"$RSIW_TOP/build/bench"
log "bench: results in build/bench/ (bench.md, bench.json, throughput.png, latency.png)"
