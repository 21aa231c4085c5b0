#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`: rsiw against the C siw (built from the same kernel source) in one boot of
# Debian's own kernel, as ratios (tests/guest/bench.py). The table goes to stdout, the
# numbers as JSON to build/bench.json.
. "$(dirname "$0")/lib.sh"

"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
mkdir -p "$RSIW_TOP/build"
log "bench: rsiw vs siw on Debian's kernel (about 15 minutes under TCG)"
"$RSIW_TOP/tests/vm-run.sh" --kernel stock --timeout "${RSIW_BENCH_TIMEOUT:-3600}" -- \
	env RSIW_BENCH_REPEAT="${RSIW_BENCH_REPEAT:-5}" RSIW_BENCH_ONLY="${RSIW_BENCH_ONLY:-}" \
	RSIW_BENCH_OUT=build/bench.json \
	python3 tests/guest/bench.py
log "bench: results in build/bench.json"
