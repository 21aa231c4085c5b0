#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench-lat`: the 8-octet ib_send_lat and ib_read_lat latencies of rsiw's current
# build, one run each, in `make bench`'s guest (Debian's kernel, one vCPU, icount), for
# the edit-build-measure loop of data path work (tests/guest/latprobe.py says why one run
# tells). About a minute here. RSIW_LAT_MODS=rsiw,siw adds siw, RSIW_LAT_CRC=1 the runs
# with CRC32c, RSIW_LAT_VCPUS=2 boots two vCPUs (the wake-ups then cross CPUs, as in
# `make bench`'s second table).
. "$(dirname "$0")/lib.sh"

"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
vcpus=${RSIW_LAT_VCPUS:-1}
log "bench-lat: 8-octet latencies, one run each ($vcpus vCPU(s), icount)"
"$RSIW_TOP/tests/vm-run.sh" --kernel stock --cpus "$vcpus" --icount \
	--timeout "${RSIW_BENCH_TIMEOUT:-1200}" -- \
	env RSIW_LAT_MODS="${RSIW_LAT_MODS:-rsiw}" RSIW_LAT_CRC="${RSIW_LAT_CRC:-0}" \
	python3 tests/guest/latprobe.py
