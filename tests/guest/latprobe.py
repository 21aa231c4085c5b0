# SPDX-License-Identifier: GPL-2.0
"""`make bench-lat` in the guest: 8-octet latencies of one provider, one run each.

For latency work on the data path: under tests/bench.sh's guest (one vCPU,
`-icount shift=0,sleep=off`) `ib_send_lat` and `ib_read_lat -e -C -s 8` of one build
repeat to the cycle from run to run and boot to boot (the null experiments of the
8-octet cells in `make bench` lie within 0.1 %), so one run of each tells whether a
change moved them. It is not a comparison: `make bench` makes that, with siw in the same
boot and the null experiment. RSIW_LAT_MODS (default rsiw; `rsiw,siw` for both) names the
providers, RSIW_LAT_CRC=1 adds the runs with CRC32c. The topology is `make bench`'s
(tests/guest/bench.py): one device on a dummy netdev, path MTU 1500.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ADDR, NET, lat, load, sh, unload  # noqa: E402


def main():
    mods = (os.environ.get("RSIW_LAT_MODS") or "rsiw").split(",")
    crcs = (False, True) if os.environ.get("RSIW_LAT_CRC") == "1" else (False,)
    sh("modprobe -a ib_core ib_uverbs iw_cm rdma_cm rdma_ucm", check=False)
    lo_mtu = open("/sys/class/net/lo/mtu").read().strip()
    sh("ip link set lo mtu 1500")
    sh(f"ip link add {NET} type dummy && ip link set {NET} mtu 1500 && "
       f"ip addr add {ADDR}/24 dev {NET} && ip link set {NET} up")
    try:
        for mod in mods:
            for crc in crcs:
                load(mod, crc)
                try:
                    for tool in ("ib_send_lat", "ib_read_lat"):
                        tag = " CRC" if crc else ""
                        print(f"[bench-lat] {mod} {tool} 8 B{tag}: {lat(tool, 8):.0f} cycles",
                              flush=True)
                finally:
                    unload(mod)
    finally:
        sh(f"ip link del {NET}", check=False)
        sh(f"ip link set lo mtu {lo_mtu}", check=False)


if __name__ == "__main__":
    main()
