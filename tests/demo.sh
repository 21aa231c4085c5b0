#!/usr/bin/env bash
# `make demo`: on Debian's own trixie-backports kernel (unmodified), load rsiw, create
# rsiw0 on the guest's network device and show it with the stock rdma-core tools, then
# move data through it (tests/guest/transport_demo.sh: verified rping, ib_write_bw and
# ib_read_bw through rdma_cm).
. "$(dirname "$0")/lib.sh"

"$RSIW_TOP/tests/vm-run.sh" --kernel stock --timeout 1500 -- bash -c '
set -e
echo "== kernel: $(uname -r) ($(cat /proc/version | cut -d" " -f1-3))"
modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm
insmod "$RSIW_KO"
echo "== modinfo rsiw"
modinfo "$RSIW_KO" | grep -E "^(description|alias|parm|vermagic):"
ip link add demo0 type dummy
ip addr add 10.93.0.1/24 dev demo0
ip link set demo0 up
echo "== rdma link add rsiw0 type rsiw netdev demo0"
rdma link add rsiw0 type rsiw netdev demo0
rdma link show
echo "== ibv_devices"
ibv_devices
echo "== ibv_devinfo -v -d rsiw0"
ibv_devinfo -v -d rsiw0
rdma link del rsiw0
rmmod rsiw
bash tests/guest/transport_demo.sh
echo "== dmesg (rsiw)"
dmesg | grep -i rsiw
'
