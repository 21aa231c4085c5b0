#!/usr/bin/env bash
# `make check`: every test rsiw has.
#   1. host: rustfmt, clippy and cargo test of the shared protocol core (userspace/)
#   2. build root and debug kernel (cached), rsiw.ko with CLIPPY=1 and warnings as errors,
#      for the debug kernel and for Debian's stock kernel (its objtool sees other code)
#   3. guest: the pytest suite in tests/guest/ on the debug kernel (KASAN, lockdep, kmemleak)
. "$(dirname "$0")/lib.sh"

log "check: host tests"
"$RSIW_TOP/tests/host-test.sh"

log "check: build root, kernels and module (cached after the first run)"
"$RSIW_TOP/tests/build-module.sh" debug >/dev/null
"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
"$RSIW_TOP/tests/pcap-check.sh"

log "check: guest tests on the debug kernel"
"$RSIW_TOP/tests/vm-run.sh" --kernel debug --timeout "${RSIW_GUEST_TIMEOUT:-4800}" -- \
	python3 -m pytest -v -p no:cacheprovider --durations=10 tests/guest
log "check: all passed"
