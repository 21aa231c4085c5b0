#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# rsiw moving data: run in the guest (tests/demo.sh) as root with RSIW_KO set.
# Creates rsiw0 on a dummy netdev, runs a verified rping against itself (loopback through
# the kernel's TCP stack), then ib_write_bw and ib_read_bw through rdma_cm for a couple of
# sizes, printing their bandwidth tables, and cleans up (link removed, rsiw unloaded).
#
# RSIW_TRANSPORT_SELFTEST=siw uses the C siw in place of rsiw (rsiw0 is then a siw
# device): it exists to check this script against a transport that already works.
set -euo pipefail

standin=${RSIW_TRANSPORT_SELFTEST:-}
mod=rsiw
[ "$standin" = siw ] && mod=siw
dev=rsiw0 net=rsdemo0 addr=10.94.0.1
sizes=${RSIW_DEMO_SIZES:-4096 1048576}
iters=${RSIW_DEMO_ITERS:-20}
limit=300   # seconds per program: a hang ends the demo instead of stalling it

pids=()
tmp=$(mktemp)
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -f "$tmp"
	rdma link del "$dev" 2>/dev/null || true
	ip link del "$net" 2>/dev/null || true
	if [ -d "/sys/module/$mod" ]; then
		rmmod "$mod" || echo "== rmmod $mod failed" >&2
	fi
}
trap cleanup EXIT

# wait_listen PORT: until a server listens on $addr:PORT (rdma_cm), at most 60 s.
wait_listen() {
	local i
	for i in $(seq 200); do
		rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr [0-9.]*:$1\b" && return 0
		sleep 0.3
	done
	echo "== no listener on $addr:$1" >&2
	return 1
}

# pair PORT SERVER-ARGV... -- CLIENT-ARGV...: server in the background, then the client;
# both must exit 0. The client's output is shown, the server's only on failure.
pair() {
	local port=$1 srv=() cli=() out rc=0
	shift
	while [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	out=$(mktemp)
	timeout -k 5 "$limit" "${srv[@]}" >"$out" 2>&1 &
	pids+=($!)
	wait_listen "$port"
	timeout -k 5 "$limit" "${cli[@]}" || rc=$?
	wait "${pids[-1]}" || { echo "== server failed ($?):"; cat "$out"; rc=1; }
	rm -f "$out"
	return "$rc"
}

echo "== kernel $(uname -r); transport: $mod"
modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm
if [ "$mod" = rsiw ]; then
	[ -n "${RSIW_KO:-}" ] || { echo "RSIW_KO is not set" >&2; exit 1; }
	insmod "$RSIW_KO"
elif [ -n "${RSIW_SIW_KO:-}" ]; then
	insmod "$RSIW_SIW_KO"
else
	modprobe siw
fi
ip link add "$net" type dummy
ip addr add "$addr/24" dev "$net"
ip link set "$net" up
echo "== rdma link add $dev type $mod netdev $net"
rdma link add "$dev" type "$mod" netdev "$net"
rdma link show "$dev/1"

echo "== rping: 10 verified pings, $dev to itself"
pair 18400 rping -s -a "$addr" -p 18400 -C 10 -V -- \
	rping -c -a "$addr" -p 18400 -C 10 -v -V

port=18410
for tool in ib_write_bw ib_read_bw; do
	for size in $sizes; do
		echo "== $tool -R -s $size -n $iters"
		pair "$port" "$tool" -R -F -d "$dev" -p "$port" -s "$size" -n "$iters" -- \
			"$tool" -R -F -d "$dev" -p "$port" -s "$size" -n "$iters" "$addr" >"$tmp" ||
			{ cat "$tmp"; exit 1; }
		sed -n '/#bytes/,$p' "$tmp"
		port=$((port + 1))
	done
done

trap - EXIT
cleanup
[ ! -d "/sys/module/$mod" ] || { echo "== $mod still loaded" >&2; exit 1; }
echo "== done: $dev removed, $mod unloaded"
