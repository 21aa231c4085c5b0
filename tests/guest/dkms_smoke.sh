#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# In the guest, after tests/dkms-test.sh installed rsiw through DKMS: the module modprobe
# finds is DKMS's (updates/dkms), of release $RSIW_VERSION and signed; it loads by name,
# serves rsiw0, and a verified rping runs over it; then everything is removed again.
set -euo pipefail
fail() { echo "dkms smoke: FAIL: $*" >&2; exit 1; }

path=$(modinfo -n rsiw) || fail "modprobe does not know rsiw"
case "$path" in */updates/dkms/*) ;; *) fail "rsiw comes from $path, not from DKMS" ;; esac
[ "$(modinfo -F version rsiw)" = "$RSIW_VERSION" ] || fail "version $(modinfo -F version rsiw)"
signer=$(modinfo -F signer rsiw)
[ -n "$signer" ] || fail "$path is not signed"

modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm
modprobe rsiw
ip link add dk0 type dummy
ip addr add 10.96.0.1/24 dev dk0
ip link set dk0 up
rdma link add rsiw0 type rsiw netdev dk0
timeout 120 rping -s -a 10.96.0.1 -p 7180 -C 20 -V >/tmp/rping-server.log 2>&1 &
server=$!
for _ in $(seq 300); do
	ss -Hltn 'sport = :7180' | grep -q . && break
	sleep 0.2
done
timeout 120 rping -c -a 10.96.0.1 -p 7180 -C 20 -V || { cat /tmp/rping-server.log; fail "rping client"; }
wait "$server" || { cat /tmp/rping-server.log; fail "rping server"; }
rdma link del rsiw0
ip link del dk0
rmmod rsiw
echo "dkms smoke: rsiw $RSIW_VERSION from $path (signer: $signer) loaded by modprobe; rping -C 20 -V passed"
