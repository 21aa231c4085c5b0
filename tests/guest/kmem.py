# SPDX-License-Identifier: GPL-2.0
"""Kernel memory in use, read in the guest the same way by the load test
(test_reliability.py) and the benchmark's memory per QP (bench.py)."""

import glob
import os
import re

THREAD_STACK = re.compile(r"\b(kernel_clone|copy_process|dup_task_struct|"
                          r"alloc_thread_stack_node)\+")
"""The callers /proc/vmallocinfo names for kernel thread stacks."""


def shrink_slab_caches():
    """Shrinks every slab cache (/sys/kernel/slab/*/shrink): SLUB counts all objects of
    a CPU's current and partial slabs as active, free or not, so without it objects
    freed earlier still count, and new ones do not until a slab fills."""
    for path in glob.glob("/sys/kernel/slab/*/shrink"):
        try:
            with open(path, "w") as f:
                f.write("1")
        except OSError:
            pass  # a cache destroyed meanwhile


def reclaimable(cache):
    """Whether slab cache `cache` is accounted reclaimable (`SLAB_RECLAIM_ACCOUNT`:
    dentries, inodes and the like, which the kernel frees under memory pressure)."""
    try:
        with open(f"/sys/kernel/slab/{cache}/reclaim_account") as f:
            return f.read().strip() == "1"
    except OSError:
        return False  # a cache destroyed meanwhile


def slab_kib(kmalloc_only=False, unreclaimable_only=False):
    """Slab objects in use (KiB): active objects times their size over the caches of
    /proc/slabinfo (free objects kept in slab pages do not count); with `kmalloc_only`,
    over the kmalloc caches alone (reclaimable ones left out); with `unreclaimable_only`,
    over the caches not accounted reclaimable (`reclaimable`). Call
    `shrink_slab_caches` first for exact counts."""
    octets = 0
    with open("/proc/slabinfo") as f:
        for line in f.read().splitlines()[2:]:
            fields = line.split()
            name = fields[0]
            if kmalloc_only and (not name.startswith("kmalloc-")
                                 or name.startswith("kmalloc-rcl-")):
                continue
            if unreclaimable_only and reclaimable(name):
                continue
            octets += int(fields[1]) * int(fields[3])  # active_objs * objsize
    return octets / 1024


def vmalloc_kib():
    """vmalloc in use (KiB): the pages of the areas in /proc/vmallocinfo other than
    thread stacks (how many idle workers the kernel's worker pools keep after a load,
    16 KiB each until they time out, is the scheduler's business)."""
    pages = 0
    with open("/proc/vmallocinfo") as f:
        for line in f:
            m = re.search(r"\bpages=(\d+)", line)
            if m and not THREAD_STACK.search(line):
                pages += int(m.group(1))
    return pages * (os.sysconf("SC_PAGE_SIZE") // 1024)
