#!/usr/bin/env bash
# `make check`: every test rsiw has.
#   1. host: rustfmt, clippy and cargo test of the shared protocol core (userspace/)
#   2. build root and debug kernel (cached), rsiw.ko with CLIPPY=1 and warnings as errors,
#      for the debug kernel and for Debian's stock kernel (its objtool sees other code)
#   3. guest: the pytest suite in tests/guest/, in two legs that run side by side, each
#      test in one of them (tests/guest/conftest.py, DEBUG_LEG): on the debug kernel
#      (KASAN, lockdep, kmemleak) the attack suites, the teardown and lifetime cases, the
#      KUnit suites, fault injection, the connection manager's timers and each kind of
#      transfer once; on Debian's stock kernel, where tests run 4-6 times faster, the rest:
#      the other role and parameter variants, the whole revision x CRC x role matrix
#      against siw, the netem-impaired link, peers killed, link flaps and netdevs or the
#      namespace going away (`make soak` runs those on the debug kernel), NVMe-oF, NFS
#      over RDMA and SMB Direct with fio (ksmbd and cifs built with it from the same source, tests/smbdirect.sh; the
#      debug kernel has no nfsd), rdma-core's own pyverbs suite on rsiw and on siw, P2P
#      RTR against siw (its lockdep reports are the C siw's), the connection-cycle load
#      test with its slab and vmalloc figures (KASAN's quarantine blurs them)
#   4. the DKMS install path in the build root, then its module loaded in Debian's kernel
# The long forms (rping -C 1000 and perftest at 2 B ... 1 MiB on Debian's kernel, minutes of
# netem, fault-injection sweeps) run in `make soak` (tests/soak.sh).
. "$(dirname "$0")/lib.sh"

log "check: host tests"
"$RSIW_TOP/tests/host-test.sh"

log "check: build root, kernels and module (cached after the first run)"
"$RSIW_TOP/tests/build-module.sh" debug >/dev/null
"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
"$RSIW_TOP/tests/pcap-check.sh"

log "check: guest tests, the debug leg here and the stock leg beside it (its output follows)"
pytest_argv=(python3 -m pytest -v -p no:cacheprovider --durations=10 tests/guest)
mkdir -p "$RSIW_TOP/build"
stock_log="$RSIW_TOP/build/check-stock.log"
# run_logged prints a heartbeat with the stock log's last line every minute.
run_logged "$stock_log" "$RSIW_TOP/tests/vm-run.sh" --kernel stock \
	--timeout "${RSIW_STOCK_TIMEOUT:-4200}" -- \
	env RSIW_LEG=stock RSIW_INTEROP_FULL=1 "${pytest_argv[@]}" &
stock_pid=$!
debug_rc=0
"$RSIW_TOP/tests/vm-run.sh" --kernel debug --timeout "${RSIW_GUEST_TIMEOUT:-4200}" -- \
	env RSIW_LEG=debug "${pytest_argv[@]}" || debug_rc=$?
log "check: debug leg done (exit $debug_rc), waiting for the stock leg"
stock_rc=0
wait "$stock_pid" || stock_rc=$?
log "check: the stock leg (exit $stock_rc), $stock_log:"
cat "$stock_log"
[ "$debug_rc" -eq 0 ] || die "guest tests on the debug kernel failed (exit $debug_rc)"
[ "$stock_rc" -eq 0 ] || die "guest tests on the stock kernel failed (exit $stock_rc)"
log "check: the DKMS install path on Debian's kernel (tests/dkms-test.sh)"
"$RSIW_TOP/tests/dkms-test.sh"
log "check: all passed"
