#!/usr/bin/env python3
"""Hostile user space for test_reliability.py: writes garbage into the siw rings (SQ, RQ,
SRQ, CQ and the CQ's arm word) that running RDMA programs have mapped from their uverbs
device, while those programs post real work and ring the doorbell.

    ring_scribbler.py SECONDS SEED PID...

The rings are the writable shared mappings of /dev/infiniband/uverbs* in
/proc/PID/maps; the writes go through /proc/PID/mem, so the program's own memory changes
under it exactly as if one of its threads wrote it. Each write is one of:
- an SQE-sized element (`struct siw_sqe`, 120 octets) at an SQE boundary with the VALID
  flag and random other flags, opcodes (valid and not), num_sge up to 255, STags and
  lengths (inline lengths beyond 80 octets among them);
- an RQE-sized element (`struct siw_rqe`, 112 octets) the same way;
- a CQE-sized element (`struct siw_cqe`, 32 octets) with or without VALID;
- the VALID flag of an element toggled (read, then written back changed: not atomic
  against the program or the kernel, on purpose);
- a 32-bit word at an 8-octet boundary (the CQ's arm word lives at one) set to arm
  states and garbage;
- up to 64 random octets anywhere.
Element sizes are from include/uapi/rdma/siw-abi.h. The kind of each mapping is not
known, so every kind of write goes to every mapping.

Writes go at about 500 per second for SECONDS, with the random choices seeded by SEED.
Random writes may miss the slots the kernel reads next, so the run ends with a sweep: every
SQE-sized slot of every mapping gets a VALID SQE with a bad opcode, which the kernel meets
at the program's next doorbell and the program at its next post. Prints one JSON line:
writes per PID and the mappings found. Exits 0 once the time is up; a PID that went away
is dropped.
"""

import json
import os
import random
import struct
import sys
import time

SQE, RQE, CQE = 120, 112, 32
VALID, INLINE, SIGNALLED, SOLICITED, READ_FENCE, REM_INVAL = 1, 2, 4, 8, 16, 32
LENGTHS = (0, 1, 80, 81, 4096, 1 << 31, 0xFFFFFFFF)


def rings(pid):
    """The writable shared uverbs mappings of `pid`: [(start, end)]."""
    found = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/dev/infiniband/uverbs") \
                    and fields[1].startswith("rw") and fields[1][3] == "s":
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                found.append((lo, hi))
    return found


def sges(r, n=6):
    return b"".join(struct.pack("<QII", r.getrandbits(64),
                                r.choice(LENGTHS + (r.getrandbits(32),)), r.getrandbits(32))
                    for _ in range(n))


def sqe(r):
    flags = VALID | r.choice((0, INLINE, SIGNALLED, SOLICITED | READ_FENCE, REM_INVAL,
                              r.getrandbits(16)))
    num_sge = r.choice((0, 1, 6, 7, 255, r.getrandbits(8)))
    opcode = r.choice(tuple(range(16)) + (0xFF, r.getrandbits(8)))
    return SQE, struct.pack("<QHBBIQ", r.getrandbits(64), flags, num_sge, opcode,
                            r.getrandbits(32), r.getrandbits(64)) + sges(r)


def rqe(r):
    flags = VALID | r.choice((0, r.getrandbits(16)))
    num_sge = r.choice((0, 1, 6, 7, 255, r.getrandbits(8)))
    return RQE, struct.pack("<QHBBI", r.getrandbits(64), flags, num_sge, r.getrandbits(8),
                            r.getrandbits(32)) + sges(r)


def cqe(r):
    return CQE, struct.pack("<QBBHIQQ", r.getrandbits(64), r.choice((0, VALID, 0xFF)),
                            r.getrandbits(8), r.getrandbits(16), r.getrandbits(32),
                            r.getrandbits(64), r.getrandbits(64))


def main():
    seconds, seed = float(sys.argv[1]), int(sys.argv[2])
    pids = [int(p) for p in sys.argv[3:]]
    r = random.Random(seed)
    mems, maps, writes = {}, {}, {}
    for pid in pids:
        maps[pid] = rings(pid)
        mems[pid] = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        writes[pid] = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and mems:
        pid = r.choice(list(mems))
        if not maps[pid]:
            maps[pid] = rings(pid)
            if not maps[pid]:
                time.sleep(0.01)
                continue
        lo, hi = r.choice(maps[pid])
        size = hi - lo
        kind = r.randrange(6)
        if kind < 3:
            stride, data = (sqe, rqe, cqe)[kind](r)
            at = lo + r.randrange(max(size // stride, 1)) * stride
        elif kind == 3:
            stride = r.choice((SQE, RQE, CQE))
            at = lo + r.randrange(max(size // stride, 1)) * stride + 8
            data = None
        elif kind == 4:
            at = lo + r.randrange(size // 8) * 8
            data = struct.pack("<I", r.choice((0, 1, 2, 3, 4, 7, 0xFFFFFFFF, r.getrandbits(32))))
        else:
            data = os.urandom(r.randint(1, 64))
            at = lo + r.randrange(size - len(data) + 1)
        try:
            if data is None:
                old = os.pread(mems[pid], 2, at)
                if len(old) < 2:
                    raise OSError("the process's memory is gone")
                data = struct.pack("<H", struct.unpack("<H", old)[0] ^ VALID)
            if at + len(data) > hi:
                continue
            if os.pwrite(mems[pid], data, at) < len(data):
                raise OSError("the process's memory is gone")
            writes[pid] += 1
        except OSError:
            # The process is gone (or unmapped its rings while dying).
            os.close(mems.pop(pid))
            continue
        if writes[pid] % 16 == 0:
            time.sleep(0.03)
    bad = struct.pack("<QHBBIQ", 0, VALID | SIGNALLED, 1, 0xFF, 0, 0) + sges(r, 6)
    for pid in list(mems):
        for lo, hi in maps[pid]:
            try:
                for at in range(lo, hi - SQE + 1, SQE):
                    if os.pwrite(mems[pid], bad, at) < SQE:
                        raise OSError("the process's memory is gone")
                    writes[pid] += 1
            except OSError:
                os.close(mems.pop(pid))
                break
    print(json.dumps({"writes": writes, "maps": {p: len(m) for p, m in maps.items()}}),
          flush=True)


if __name__ == "__main__":
    main()
