# SPDX-License-Identifier: GPL-2.0
"""`make bench-lat` in the guest: 8-octet latencies of one provider, one run each.

For latency work on the data path: under tests/bench.sh's guest (one vCPU,
`-icount shift=0,sleep=off`) `ib_send_lat` and `ib_read_lat -e -C -s 8` of one build
repeat within a few tens of cycles (under 0.1 %) from run to run and boot to boot (so do
the null experiments of the 8-octet cells in `make bench`), so one run of each tells
whether a change moved them by more than that; with two vCPUs (RSIW_LAT_VCPUS=2 to
tests/bench-lat.sh) they repeat as closely. It is not a comparison: `make bench` makes
that, with siw in the same boot and the null experiment. RSIW_LAT_MODS (default rsiw;
`rsiw,siw` for both) names the providers, RSIW_LAT_CRC=1 adds the runs with CRC32c. The
topology is `make bench`'s (tests/guest/bench.py): one device on a dummy netdev, path
MTU 1500.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import lat, load, topology, unload  # noqa: E402


def main():
    mods = (os.environ.get("RSIW_LAT_MODS") or "rsiw").split(",")
    crcs = (False, True) if os.environ.get("RSIW_LAT_CRC") == "1" else (False,)
    with topology():
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


if __name__ == "__main__":
    main()
