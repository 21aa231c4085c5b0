# SPDX-License-Identifier: GPL-2.0
"""rsiw's verbs objects through the stock rdma-core siw provider and pyverbs: CQs, QPs,
SRQs and MRs, their limits, the mapped ring ABI (flush completions polled in user space),
completion events, and the QP state machine without connections."""
import ctypes
import errno
import mmap
import os
import re
import struct

import pytest

from conftest import dmesg_mark, dmesg_since, load_rsiw, sh, unload_rsiw
from ring_scribbler import rings
from uverbs_events import device_fds, event_fds, next_event, readable

from pyverbs import enums as e
from pyverbs.cq import CQ, CompChannel
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

DEV = "rsiw0"
# The limits rsiw advertises (rust/cq.rs, rust/qp.rs, rust/srq.rs, module parameters).
MAX_CQE = 1 << 22
MAX_QP_WR = 1 << 15
MAX_SRQ_WR = 1 << 19
MAX_SGE = 6
MAX_INLINE = 80
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@pytest.fixture
def ctx(rsiw, dummy):
    sh(f"rdma link add {DEV} type rsiw netdev {dummy}")
    with Context(name=DEV) as c:
        yield c


def errno_of(excinfo):
    return excinfo.value.error_code


def dmesg_tail(n=20):
    return sh(f"dmesg | tail -n {n}").stdout


def make_qp(pd, cq, srq=None, send_wr=16, recv_wr=16, sig_all=0, send_sge=1, recv_sge=1, inline=0):
    cap = QPCap(max_send_wr=send_wr, max_recv_wr=recv_wr, max_send_sge=send_sge,
                max_recv_sge=recv_sge, max_inline_data=inline)
    attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=cap, sq_sig_all=sig_all)
    return QP(pd, attr)


def modify(qp, state, mask=0):
    attr = QPAttr()
    attr.qp_state = state
    if state == e.IBV_QPS_INIT:
        attr.qp_access_flags = ACCESS
        mask |= e.IBV_QP_ACCESS_FLAGS
    qp.modify(attr, e.IBV_QP_STATE | mask)


def poll_all(cq, want, tries=50):
    """Polls until `want` completions arrived (or nothing more comes); returns them."""
    wcs = []
    for _ in range(tries):
        n, got = cq.poll(num_entries=max(want - len(wcs), 1))
        wcs.extend(got[:n])
        if len(wcs) >= want:
            # Anything extra would be a bug: look once more.
            n, got = cq.poll(num_entries=4)
            wcs.extend(got[:n])
            break
    return wcs


def async_event(ctx, fd, timeout=10):
    kind = next_event(ctx, fd, timeout)
    assert kind is not None, "no asynchronous event"
    return kind


def test_query_device_reports_limits(ctx):
    a = ctx.query_device()
    # At least the C siw's (drivers/infiniband/sw/siw/siw.h).
    assert a.max_qp == 102400 and a.max_cq == 102400 and a.max_srq == 102400
    assert a.max_mr == 1024000 and a.max_pd == 102400
    assert a.max_cqe == MAX_CQE and a.max_qp_wr == MAX_QP_WR and a.max_srq_wr == MAX_SRQ_WR
    assert a.max_sge == MAX_SGE and a.max_srq_sge == MAX_SGE and a.max_sge_rd == 1
    # REG_MR and LOCAL_INV work requests (kernel ULPs: NVMe-oF, see test_nvmeof.py).
    assert a.device_cap_flags & e.IBV_DEVICE_MEM_MGT_EXTENSIONS
    assert a.max_qp_rd_atom == 128 and a.max_qp_init_rd_atom == 128


def test_objects_create_destroy_and_show_in_restrack(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 5)
    assert cq.cqe == 8  # rounded up to a power of two
    srq = SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=10, max_sge=2)))
    qp = make_qp(pd, cq)
    qp2 = make_qp(pd, cq, srq=srq)
    mr = MR(pd, 4096, ACCESS)
    assert qp.qp_num != qp2.qp_num and qp.qp_num > 0

    # A QP gets a port only from modify_qp(IB_QP_PORT): until then restrack shows
    # "link DEV/-" and a port filter ("link DEV/1") would hide it.
    qps = sh("rdma resource show qp").stdout
    assert re.search(rf"link {DEV}/\S+ lqpn {qp.qp_num}\b.*type RC", qps), qps
    assert re.search(rf"link {DEV}/\S+ lqpn {qp2.qp_num}\b", qps), qps
    cqs = sh(f"rdma resource show cq dev {DEV}").stdout
    assert re.search(r"cqe 8\b", cqs), cqs
    mrs = sh(f"rdma resource show mr dev {DEV}").stdout
    assert re.search(r"mrn \d+.*mrlen 4096\b", mrs), mrs
    srqs = sh(f"rdma resource show srq dev {DEV}", check=False).stdout
    if srqs:
        assert re.search(r"srqn \d+", srqs), srqs

    for obj in (qp, qp2, srq, mr, cq, pd):
        obj.close()
    assert f"link {DEV}/" not in sh("rdma resource show qp").stdout
    assert "cqe" not in sh(f"rdma resource show cq dev {DEV}").stdout
    assert "mrn" not in sh(f"rdma resource show mr dev {DEV}").stdout


def test_cq_on_every_completion_vector(ctx):
    # One vector per possible CPU, as the C siw: libraries spread their CQs over them.
    n = ctx.num_comp_vectors
    with open("/sys/devices/system/cpu/possible") as f:
        possible = f.read().strip()  # "0-1", "0"
    assert n == int(re.split("[-,]", possible)[-1]) + 1, (n, possible)
    cqs = [CQ(ctx, 16, None, None, v) for v in range(n)]
    for cq in cqs:
        cq.close()
    with pytest.raises(PyverbsRDMAError) as ei:
        CQ(ctx, 16, None, None, n)
    assert errno_of(ei) == errno.EINVAL


def test_cq_size_limits(ctx):
    with pytest.raises(PyverbsRDMAError) as ei:
        CQ(ctx, MAX_CQE + 1)
    assert errno_of(ei) == errno.EINVAL
    assert f"{DEV}: create_cq: {MAX_CQE + 1} CQEs requested" in dmesg_tail()
    # libsiw refuses a depth of 0 itself (EINVAL), before the kernel is asked.
    with pytest.raises(PyverbsRDMAError) as ei:
        CQ(ctx, 0)
    assert errno_of(ei) == errno.EINVAL
    cq = CQ(ctx, MAX_CQE)
    assert cq.cqe == MAX_CQE
    cq.close()


# The child of test_ring_memory_is_charged_to_the_callers_memory_cgroup: joins the cgroup
# argv[1], then on device argv[2] creates a CQ of argv[3] CQEs, reports how much the
# cgroup's memory grew, and tries a CQ of argv[4] CQEs; prints the outcome as JSON.
RING_CGROUP_CHILD = r"""
import json, os, sys
cg, dev, small_n, big_n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(cg + "/cgroup.procs", "w") as f:
    f.write(str(os.getpid()))
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pyverbs_error import PyverbsRDMAError
def current():
    with open(cg + "/memory.current") as f:
        return int(f.read())
out = {}
with Context(name=dev) as ctx:
    before = current()
    small = CQ(ctx, small_n)
    out["charged"] = current() - before
    try:
        CQ(ctx, big_n).close()
        out["big"] = "created"
    except PyverbsRDMAError as ex:
        out["big"] = abs(ex.error_code)
    small.close()
print(json.dumps(out), flush=True)
"""


def test_ring_memory_is_charged_to_the_callers_memory_cgroup(ctx, tmp_path):
    """User ring memory is charged to the memory cgroup of the process that creates it
    (as io_uring's rings are): in a cgroup with memory.max of 64 MiB, a CQ of 2^19 CQEs
    (16 MiB of ring) raises the cgroup's usage by at least its ring, and a CQ of 2^22
    CQEs (128 MiB) fails with ENOMEM; the process is not OOM-killed."""
    import json
    import subprocess

    root = "/sys/fs/cgroup"
    if not os.path.exists(root + "/cgroup.controllers"):
        sh(f"mount -t cgroup2 none {root}")
    with open(root + "/cgroup.controllers") as f:
        if "memory" not in f.read().split():
            # The debug kernel is built without CONFIG_MEMCG; Debian's has it.
            pytest.skip("this kernel has no memory cgroup controller")
    sh(f"echo +memory > {root}/cgroup.subtree_control")
    cg = f"{root}/rsiw-ring-{os.getpid()}"
    os.mkdir(cg)
    try:
        with open(cg + "/memory.max", "w") as f:
            f.write(str(64 << 20))
        if os.path.exists(cg + "/memory.swap.max"):
            with open(cg + "/memory.swap.max", "w") as f:
                f.write("0")
        p = subprocess.run(["python3", "-c", RING_CGROUP_CHILD, cg, DEV, str(1 << 19),
                            str(MAX_CQE)], capture_output=True, text=True, timeout=300)
        with open(cg + "/memory.events") as f:
            events = dict(line.split() for line in f)
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:], events)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert out["big"] == errno.ENOMEM, out
        assert out["charged"] >= (1 << 19) * 32, out
        assert events["oom_kill"] == "0", events
    finally:
        os.rmdir(cg)


@pytest.mark.parametrize(
    "kwargs, what",
    [
        (dict(send_wr=MAX_QP_WR + 1), "max_send_wr"),
        (dict(send_wr=0), "max_send_wr"),
        (dict(recv_wr=MAX_QP_WR + 1), "max_recv_wr"),
        (dict(send_sge=MAX_SGE + 1), "max_send_sge"),
        (dict(recv_sge=MAX_SGE + 1), "max_recv_sge"),
        (dict(inline=MAX_INLINE + 1), "max_inline_data"),
        (dict(recv_wr=0), "max_recv_wr >= 1"),
    ],
)
def test_qp_caps_beyond_limits_fail(ctx, kwargs, what):
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    with pytest.raises(PyverbsRDMAError) as ei:
        make_qp(pd, cq, **kwargs)
    assert errno_of(ei) == errno.EINVAL
    # The message names the device and the QP number the core gave the refused QP.
    assert re.search(rf"{DEV} qp \d+: .*{re.escape(what)}", dmesg_tail()), dmesg_tail()
    # The largest legal QP works.
    qp = make_qp(pd, cq, send_wr=MAX_QP_WR, recv_wr=MAX_QP_WR, send_sge=MAX_SGE,
                 recv_sge=MAX_SGE, inline=MAX_INLINE)
    qp.close()


def test_non_rc_qp_is_refused(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    attr = QPInitAttr(qp_type=e.IBV_QPT_UC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4))
    with pytest.raises(PyverbsRDMAError) as ei:
        QP(pd, attr)
    assert errno_of(ei) == errno.EOPNOTSUPP
    assert "RC QPs only" in dmesg_tail()


def test_qp_query_reports_granted_caps(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = make_qp(pd, cq, send_wr=5, recv_wr=9, send_sge=2, recv_sge=3)
    attr, init = qp.query(e.IBV_QP_STATE | e.IBV_QP_CAP)
    # An RNIC's QP starts in INIT (iWARP Idle), which rdma-core's test_query_rc_qp expects.
    assert attr.qp_state == e.IBV_QPS_INIT
    assert attr.cap.max_send_wr == 8 and attr.cap.max_recv_wr == 16
    assert attr.cap.max_send_sge == 2 and attr.cap.max_recv_sge == 3
    modify(qp, e.IBV_QPS_RESET)
    attr, init = qp.query(e.IBV_QP_STATE)
    assert attr.qp_state == e.IBV_QPS_RESET
    modify(qp, e.IBV_QPS_INIT)
    attr, init = qp.query(e.IBV_QP_STATE)
    assert attr.qp_state == e.IBV_QPS_INIT
    assert attr.qp_access_flags == ACCESS


def test_more_than_144_rings_in_one_context(ctx):
    """The siw library takes a ring key equal to SIW_INVAL_UOBJ_KEY (0x90000) for "no
    mapping" and fails the verb; counting page offsets from 0 the core would hand that key
    to the 145th ring of a context. rsiw never gives it out: 160 CQs (one ring each) in one
    context are all created and polled."""
    cqs = [CQ(ctx, 4) for _ in range(160)]
    assert all(cq.poll()[0] == 0 for cq in cqs)
    for cq in cqs:
        cq.close()


def test_mmap_below_the_first_ring_key_is_refused(ctx):
    """Page offsets 0 to 144 of a user context hold an entry without memory, so that a
    failed ring insertion leaves the core's XArray clean (rust/sys/mem/umap.rs): mapping
    them fails with EINVAL and a logged cause (all 145 pages at once: the core finds the
    entry and rsiw refuses it; one page: the core finds none). The first ring's, at page
    145, maps."""
    cq = CQ(ctx, 4)
    fds, page = device_fds(), mmap.PAGESIZE
    assert len(fds) == 1, fds
    fd = fds[0]
    for pgoff, pages in ((0, 145), (144, 1)):
        with pytest.raises(OSError) as ei:
            mmap.mmap(fd, pages * page, mmap.MAP_SHARED, mmap.PROT_READ,
                      offset=pgoff * page)
        assert ei.value.errno == errno.EINVAL
    assert "mmap: no ring at this offset and length" in dmesg_tail()
    ring = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ, offset=145 * page)
    ring.close()
    cq.close()


def test_reg_mr_keys_distinct_and_dereg(ctx):
    pd = PD(ctx)
    mrs = [MR(pd, 4096 * (i + 1), ACCESS) for i in range(8)]
    keys = [m.lkey for m in mrs]
    assert len(set(keys)) == len(keys), keys
    assert all(m.lkey == m.rkey for m in mrs)
    assert all(k >> 8 != 0 for k in keys)
    for m in mrs:
        m.close()
    again = MR(pd, 4096, ACCESS)
    assert again.lkey == again.rkey
    again.close()


def test_reg_mr_of_bad_address_fails(ctx):
    pd = PD(ctx)
    with pytest.raises(PyverbsRDMAError) as ei:
        MR(pd, 8192, ACCESS, address=0x10000)
    assert errno_of(ei) == errno.EFAULT
    assert "pinning 8192 octets" in dmesg_tail()


def test_modify_to_rts_without_connection_fails(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = make_qp(pd, cq)
    modify(qp, e.IBV_QPS_RESET)
    with pytest.raises(PyverbsRDMAError) as ei:
        modify(qp, e.IBV_QPS_RTR)  # RESET -> RTR skips INIT
    assert errno_of(ei) == errno.EINVAL
    modify(qp, e.IBV_QPS_INIT)
    # SQD and SQE are not states a consumer can request on iWARP.
    with pytest.raises(PyverbsRDMAError) as ei:
        modify(qp, e.IBV_QPS_SQE)
    assert errno_of(ei) == errno.EINVAL
    assert f"{DEV} qp {qp.qp_num}: state " in dmesg_tail()
    assert "cannot be requested on iWARP" in dmesg_tail()
    modify(qp, e.IBV_QPS_RTR)
    with pytest.raises(PyverbsRDMAError) as ei:
        modify(qp, e.IBV_QPS_RTS)
    assert errno_of(ei) == errno.EINVAL
    assert "RTS needs an established iWARP connection" in dmesg_tail()
    attr, _ = qp.query(e.IBV_QP_STATE)
    assert attr.qp_state == e.IBV_QPS_RTR
    # ERROR is reachable from anywhere, RESET from ERROR, and the QP is usable again.
    modify(qp, e.IBV_QPS_ERR)
    modify(qp, e.IBV_QPS_RESET)
    modify(qp, e.IBV_QPS_INIT)


def test_rq_flush_through_mapped_rings(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    mr = MR(pd, 4096, ACCESS)
    qp = make_qp(pd, cq, recv_wr=16)
    modify(qp, e.IBV_QPS_INIT)
    ids = [1000 + i for i in range(7)]
    for i in ids:
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 512, mr.lkey)]))
    assert cq.poll()[0] == 0  # nothing completes before the flush
    (afd,) = event_fds()
    modify(qp, e.IBV_QPS_ERR)
    wcs = poll_all(cq, len(ids))
    assert [w.wr_id for w in wcs] == ids
    assert all(w.status == e.IBV_WC_WR_FLUSH_ERR for w in wcs)
    assert all(w.opcode == e.IBV_WC_RECV for w in wcs)
    assert all(w.qp_num == qp.qp_num for w in wcs)
    # No send WQE was flushed: no SQ_DRAINED (nor any other event).
    assert not readable(afd, 1), f"unexpected asynchronous event {async_event(ctx, afd)}"
    # The RQ slots were released: the ring takes new WQEs, and the sweep (or destroy,
    # whichever comes first) flushes them.
    for i in range(16):
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    qp.close()
    assert len(poll_all(cq, 16)) == 16


def comp_channel(ctx):
    """A completion channel of `ctx` and the descriptor of its event file."""
    before = event_fds()
    ch = CompChannel(ctx)
    (fd,) = set(event_fds()) - set(before)
    return ch, fd


SWEEP_S = 0.1
"""Seconds between two looks of the device's sweep at a user RQ in ERROR
(`SWEEP_MS` in rust/sys/ibdev.rs)."""


def test_receives_posted_in_error_are_flushed(ctx):
    """The siw user ABI's post_recv only writes the mapped RQ (no doorbell), so the kernel
    learns of a receive posted to a QP in ERROR only by looking: the device's sweep does,
    every SWEEP_S seconds while the QP stays in ERROR, and flushes it with a completion
    event on an armed CQ. This is rping's pattern: it posts its next receive from its
    completion handler, and once the connection is gone it waits for that receive's flush
    before it exits. Twice, for the sweep goes on; after RESET nothing is flushed."""
    pd = PD(ctx)
    ch, chfd = comp_channel(ctx)
    cq = CQ(ctx, 64, None, ch, 0)
    mr = MR(pd, 4096, ACCESS)
    qp = make_qp(pd, cq, recv_wr=16)
    modify(qp, e.IBV_QPS_INIT)
    modify(qp, e.IBV_QPS_ERR)
    assert cq.poll()[0] == 0
    for batch in range(2):
        cq.req_notify()
        ids = [100 * batch + i for i in range(3)]
        for i in ids:
            qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
        # Generous: a loaded debug guest runs the work late, never not at all.
        assert readable(chfd, 30), f"batch {batch}: no flush of receives posted in ERROR"
        ch.get_cq_event(cq)
        cq.ack_events(1)
        wcs = poll_all(cq, len(ids))
        assert [w.wr_id for w in wcs] == ids, [w.wr_id for w in wcs]
        assert all(w.status == e.IBV_WC_WR_FLUSH_ERR for w in wcs)
    # In RESET the QP is no longer swept: a receive posted there waits (as in INIT).
    modify(qp, e.IBV_QPS_RESET)
    modify(qp, e.IBV_QPS_INIT)
    qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    cq.req_notify()
    assert not readable(chfd, 20 * SWEEP_S), "a receive flushed outside ERROR"
    assert cq.poll()[0] == 0
    qp.close()
    assert [w.wr_id for w in poll_all(cq, 1)] == [7]
    cq.close()
    ch.close()


def poll_n(cq, n, deadline_s=300):
    """Polls `cq` until `n` completions arrived or `deadline_s` passed; returns them."""
    import time

    wcs, end = [], time.monotonic() + deadline_s
    while len(wcs) < n and time.monotonic() < end:
        got_n, got = cq.poll(num_entries=min(n - len(wcs), 4096))
        wcs.extend(got[:got_n])
        if got_n == 0:
            time.sleep(0.01)
    return wcs


LOCKUP_REPORTS = re.compile(
    r"soft lockup|hard LOCKUP|rcu: INFO|self-detected stall|blocked for more than|"
    r"WARNING:|BUG:|irq event stamp")


def test_full_queues_flush_in_order_across_batches(ctx):
    """A QP flushes at most FLUSH_BATCH (256) WQEs per hold of a ring's lock, which keeps
    interrupts off (rust/qp/state.rs), and takes the rest in further holds. Two QPs with
    full SQs and RQs (MAX_QP_WR each) enter ERROR: every WQE completes with a flush error
    in posting order, none twice. Then the whole RQ is posted again in ERROR, which only
    the device's sweep sees (no doorbell): it flushes all of it, in order. No lockup, RCU
    stall, hung task or warning is reported."""
    mark = dmesg_mark()
    pd = PD(ctx)
    mr = MR(pd, 4096, ACCESS)
    n = MAX_QP_WR
    cqs, qps = [], []
    for _ in range(2):
        cq = CQ(ctx, 2 * n + 16)
        qp = make_qp(pd, cq, send_wr=n, recv_wr=n)
        modify(qp, e.IBV_QPS_INIT)
        for i in range(n):
            qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
            qp.post_send(SendWR(wr_id=n + i, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(mr.buf, 64, mr.lkey)]))
        cqs.append(cq)
        qps.append(qp)
    for qp in qps:
        modify(qp, e.IBV_QPS_ERR)
    for qp, cq in zip(qps, cqs):
        wcs = poll_n(cq, 2 * n)
        assert len(wcs) == 2 * n, (qp.qp_num, len(wcs))
        assert all(w.status == e.IBV_WC_WR_FLUSH_ERR for w in wcs)
        assert [w.wr_id for w in wcs if w.opcode == e.IBV_WC_RECV] == list(range(n))
        assert [w.wr_id for w in wcs if w.opcode != e.IBV_WC_RECV] == list(range(n, 2 * n))
        assert cq.poll()[0] == 0, "a WQE flushed twice"
    qp, cq = qps[0], cqs[0]
    for i in range(n):
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    wcs = poll_n(cq, n)
    assert [w.wr_id for w in wcs] == list(range(n)), len(wcs)
    for obj in qps + cqs + [mr, pd]:
        obj.close()
    reports = [l for l in dmesg_since(mark) if LOCKUP_REPORTS.search(l)]
    assert not reports, reports


def test_a_thousand_qps_in_error_are_swept(ctx):
    """The device's sweep keeps a list of the user QPs in ERROR whose RQ it looks at, each
    QP once (a flag of the QP's says whether it is listed; the list is taken and put back
    whole under its IRQ-off lock, not searched there). 1,000 QPs enter ERROR, half of them
    twice (through RESET and INIT, before or while the sweep looks at them): no QP is
    lost from the list, so a receive each posts afterwards is flushed, each once."""
    mark = dmesg_mark()
    pd = PD(ctx)
    mr = MR(pd, 4096, ACCESS)
    n = 1000
    cq = CQ(ctx, 2 * n)
    qps = [make_qp(pd, cq, send_wr=1, recv_wr=4) for _ in range(n)]
    for qp in qps:
        modify(qp, e.IBV_QPS_INIT)
        modify(qp, e.IBV_QPS_ERR)
    for qp in qps[::2]:
        modify(qp, e.IBV_QPS_RESET)
        modify(qp, e.IBV_QPS_INIT)
        modify(qp, e.IBV_QPS_ERR)
    for i, qp in enumerate(qps):
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    wcs = poll_n(cq, n)
    assert sorted(w.wr_id for w in wcs) == list(range(n)), len(wcs)
    assert all(w.status == e.IBV_WC_WR_FLUSH_ERR for w in wcs)
    import time

    time.sleep(5 * SWEEP_S)  # further sweeps run meanwhile; they must flush nothing more
    assert cq.poll()[0] == 0, "a receive flushed twice"
    for obj in qps + [cq, mr, pd]:
        obj.close()
    reports = [l for l in dmesg_since(mark) if LOCKUP_REPORTS.search(l)]
    assert not reports, reports


def test_sq_flush_and_doorbell_in_error(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    mr = MR(pd, 4096, ACCESS)
    qp = make_qp(pd, cq, send_wr=8, sig_all=0)
    modify(qp, e.IBV_QPS_INIT)
    # Posting in INIT (iWARP Idle) is accepted: the WQEs wait for RTS.
    for i, flags in enumerate([e.IBV_SEND_SIGNALED, 0, e.IBV_SEND_SIGNALED]):
        qp.post_send(SendWR(wr_id=50 + i, opcode=e.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(mr.buf, 100, mr.lkey)], send_flags=flags))
    assert cq.poll()[0] == 0
    (afd,) = event_fds()
    modify(qp, e.IBV_QPS_ERR)
    wcs = poll_all(cq, 3)
    # A WR that completes in error always reports, signalled or not (verbs).
    assert [w.wr_id for w in wcs] == [50, 51, 52]
    assert all(w.status == e.IBV_WC_WR_FLUSH_ERR and w.opcode == e.IBV_WC_SEND for w in wcs)
    # Send WQEs were flushed: the send queue is drained (as the C siw reports it).
    assert async_event(ctx, afd) == e.IBV_EVENT_SQ_DRAINED
    # In ERROR the doorbell flushes new SQEs right away.
    qp.post_send(SendWR(wr_id=77, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(mr.buf, 8, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED))
    wcs = poll_all(cq, 1)
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [
        (77, e.IBV_WC_WR_FLUSH_ERR, e.IBV_WC_RDMA_WRITE)
    ]


def test_doorbell_in_reset_fails(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    mr = MR(pd, 4096, ACCESS)
    qp = make_qp(pd, cq)
    modify(qp, e.IBV_QPS_RESET)
    # The siw library returns the doorbell write's -1 (errno is not kept by pyverbs):
    # the kernel's reason is in the log.
    with pytest.raises(PyverbsRDMAError):
        qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))
    assert f"{DEV} qp {qp.qp_num}: post_send in RESET" in dmesg_tail()


def test_srq_qp_error_keeps_srq_wqes_and_reports_last_wqe(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    mr = MR(pd, 4096, ACCESS)
    srq = SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=8, max_sge=1)))
    for i in range(5):
        srq.post_recv(RecvWR(wr_id=300 + i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    qp = make_qp(pd, cq, srq=srq, send_wr=4)
    modify(qp, e.IBV_QPS_INIT)
    qp.post_send(SendWR(wr_id=9, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED))
    (afd,) = event_fds()
    modify(qp, e.IBV_QPS_ERR)
    wcs = poll_all(cq, 1)
    # Only the SQ flushes: the SRQ's WQEs stay for its other QPs.
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [(9, e.IBV_WC_WR_FLUSH_ERR, e.IBV_WC_SEND)]
    assert async_event(ctx, afd) == e.IBV_EVENT_SQ_DRAINED
    assert async_event(ctx, afd) == e.IBV_EVENT_QP_LAST_WQE_REACHED
    qp.close()
    assert cq.poll()[0] == 0


def test_srq_limits_modify_query(ctx):
    pd = PD(ctx)
    with pytest.raises(PyverbsRDMAError) as ei:
        SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=MAX_SRQ_WR + 1, max_sge=1)))
    assert errno_of(ei) == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as ei:
        SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=8, max_sge=MAX_SGE + 1)))
    assert errno_of(ei) == errno.EINVAL
    # The siw library has no query_srq (ibv_query_srq fails with EOPNOTSUPP in user
    # space); the KUnit suite rsiw_kverbs queries kernel SRQs. max_wr 12 becomes 16:
    srq = SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=12, max_sge=2)))
    srq.modify(SrqAttr(srq_limit=5), e.IBV_SRQ_LIMIT)
    srq.modify(SrqAttr(srq_limit=16), e.IBV_SRQ_LIMIT)
    with pytest.raises(PyverbsRDMAError) as ei:
        srq.modify(SrqAttr(srq_limit=17), e.IBV_SRQ_LIMIT)
    assert errno_of(ei) == errno.EINVAL
    assert f"{DEV} srq: srq_limit 17 above the SRQ size 16" in dmesg_tail()
    with pytest.raises(PyverbsRDMAError) as ei:
        srq.modify(SrqAttr(max_wr=32), e.IBV_SRQ_MAX_WR)
    assert errno_of(ei) == errno.EOPNOTSUPP


@pytest.mark.parametrize("solicited_only", [False, True])
def test_completion_event_on_flush(ctx, solicited_only):
    pd = PD(ctx)
    ch, chfd = comp_channel(ctx)
    cq = CQ(ctx, 16, None, ch, 0)
    mr = MR(pd, 4096, ACCESS)
    qp = make_qp(pd, cq)
    modify(qp, e.IBV_QPS_INIT)
    qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    cq.req_notify(solicited_only)
    modify(qp, e.IBV_QPS_ERR)
    # Error completions fire solicited-only arms too.
    assert readable(chfd), "no completion event for the flush completion"
    ch.get_cq_event(cq)
    cq.ack_events(1)
    assert [w.wr_id for w in poll_all(cq, 1)] == [5]
    # One-shot: without re-arming, the next completion raises no event.
    qp.post_recv(RecvWR(wr_id=6, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    modify(qp, e.IBV_QPS_ERR)
    assert [w.wr_id for w in poll_all(cq, 1)] == [6]
    assert not readable(chfd, 1)
    qp.close()
    cq.close()


def online_cpus():
    with open("/sys/devices/system/cpu/online") as f:
        cpus = set()
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def test_completion_event_on_every_vector_from_another_cpu(ctx):
    # Pinned to one CPU, the flush completes there; a CQ on any vector still wakes its
    # channel (the CPU hop, or its absence, is test_user_cq_event_takes_no_work_item's).
    cpus = online_cpus()
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    try:
        pd = PD(ctx)
        mr = MR(pd, 4096, ACCESS)
        for v in cpus[:8]:
            ch, chfd = comp_channel(ctx)
            cq = CQ(ctx, 16, None, ch, v)
            qp = make_qp(pd, cq)
            modify(qp, e.IBV_QPS_INIT)
            qp.post_recv(RecvWR(wr_id=v, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
            cq.req_notify()
            modify(qp, e.IBV_QPS_ERR)
            assert readable(chfd), f"no completion event on vector {v}"
            ch.get_cq_event(cq)
            cq.ack_events(1)
            assert [w.wr_id for w in poll_all(cq, 1)] == [v]
            qp.close()
            cq.close()
            ch.close()
    finally:
        os.sched_setaffinity(0, old)


TRACEFS = "/sys/kernel/tracing"


def tracefs_write(path, value):
    with open(f"{TRACEFS}/{path}", "w") as f:
        f.write(value)


def test_user_cq_event_takes_no_work_item(ctx):
    # A user CQ's handler (uverbs' `ib_uverbs_comp_handler`) only queues an event and wakes
    # its reader: rsiw calls it on the completing CPU, where a kernel CQ's handler goes to
    # its vector's CPU through a work item (rust/cq.rs, `Notify::deliver`). Pinned to CPU 0
    # with the CQ on vector 1, the flush completion would take that hop; the work queue's
    # tracepoint must not see rsiw's completion work function queued.
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two online CPUs")
    # The name the tracepoint prints for the work function: a missing symbol would make
    # the check below pass for nothing.
    work_fn = "comp_work_c"
    with open("/proc/kallsyms") as f:
        syms = [l for l in f if work_fn in l and "[rsiw]" in l]
    assert syms, f"no rsiw symbol containing {work_fn} in /proc/kallsyms"
    if not os.path.isdir(f"{TRACEFS}/events"):
        sh(f"mount -t tracefs nodev {TRACEFS}")
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    tracefs_write("trace", "")
    tracefs_write("events/workqueue/workqueue_queue_work/enable", "1")
    tracefs_write("tracing_on", "1")
    try:
        pd = PD(ctx)
        mr = MR(pd, 4096, ACCESS)
        ch, chfd = comp_channel(ctx)
        cq = CQ(ctx, 16, None, ch, cpus[1])
        qp = make_qp(pd, cq)
        modify(qp, e.IBV_QPS_INIT)
        for i in range(8):
            qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
        cq.req_notify()
        modify(qp, e.IBV_QPS_ERR)
        assert readable(chfd), "no completion event for the flush completions"
        ch.get_cq_event(cq)
        cq.ack_events(1)
        assert [w.wr_id for w in poll_all(cq, 8)] == list(range(8))
        tracefs_write("tracing_on", "0")
        with open(f"{TRACEFS}/trace") as f:
            queued = [l for l in f if "workqueue_queue_work" in l]
        qp.close()
        cq.close()
        ch.close()
    finally:
        tracefs_write("tracing_on", "0")
        tracefs_write("events/workqueue/workqueue_queue_work/enable", "0")
        tracefs_write("trace", "")
        os.sched_setaffinity(0, old)
    hops = [l.strip() for l in queued if work_fn in l]
    assert not hops, f"the user CQ's event went through a work item: {hops[:3]}"


def test_cq_overflow_reports_cq_error(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 4)
    mr = MR(pd, 4096, ACCESS)
    qp = make_qp(pd, cq, recv_wr=16)
    modify(qp, e.IBV_QPS_INIT)
    for i in range(10):
        qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    (afd,) = event_fds()
    modify(qp, e.IBV_QPS_ERR)
    assert async_event(ctx, afd) == e.IBV_EVENT_CQ_ERR
    assert [w.wr_id for w in poll_all(cq, 4)] == [0, 1, 2, 3]
    # Entering ERROR again flushes what the full CQ could not take.
    modify(qp, e.IBV_QPS_ERR)
    assert [w.wr_id for w in poll_all(cq, 4)] == [4, 5, 6, 7]
    modify(qp, e.IBV_QPS_ERR)
    assert [w.wr_id for w in poll_all(cq, 2)] == [8, 9]


def test_destroy_with_outstanding_wrs(ctx):
    """Destroying QPs, CQs and SRQs with posted work frees everything (kmemleak and
    KASAN check it in the fixtures)."""
    pd = PD(ctx)
    mr = MR(pd, 4096, ACCESS)
    for _ in range(5):
        cq = CQ(ctx, 256)
        srq = SRQ(pd, SrqInitAttr(attr=SrqAttr(max_wr=32, max_sge=1)))
        qps = [make_qp(pd, cq, recv_wr=32, send_wr=32), make_qp(pd, cq, srq=srq, send_wr=32)]
        for qp in qps:
            modify(qp, e.IBV_QPS_INIT)
            for i in range(20):
                qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                                    sg=[SGE(mr.buf, 16, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED))
        for i in range(20):
            qps[0].post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 16, mr.lkey)]))
            srq.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 16, mr.lkey)]))
        for qp in qps:
            qp.close()
        srq.close()
        cq.close()


def libibverbs():
    """libibverbs through ctypes, for the uverbs command pyverbs cannot send: POLL_CQ
    (libsiw polls a CQ's mapped ring itself and never asks the kernel)."""
    lib = ctypes.CDLL("libibverbs.so.1", use_errno=True)
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.ibv_get_device_list.restype = ctypes.POINTER(vp)
    lib.ibv_get_device_list.argtypes = [ctypes.POINTER(i)]
    lib.ibv_free_device_list.argtypes = [ctypes.POINTER(vp)]
    lib.ibv_get_device_name.restype = ctypes.c_char_p
    lib.ibv_get_device_name.argtypes = [vp]
    lib.ibv_open_device.restype = vp
    lib.ibv_open_device.argtypes = [vp]
    lib.ibv_close_device.argtypes = [vp]
    lib.ibv_create_cq.restype = vp
    lib.ibv_create_cq.argtypes = [vp, i, vp, vp, i]
    lib.ibv_destroy_cq.argtypes = [vp]
    lib.ibv_cmd_poll_cq.argtypes = [vp, i, vp]
    return lib


# struct siw_cqe (include/uapi/rdma/siw-abi.h): id, flags, opcode, status, bytes, the
# imm_data/inval_stag union and the qp_id/base_qp union; 32 octets.
SIW_CQE = struct.Struct("<QBBHIQQ")
IB_UVERBS_WC_SIZE = 48


@pytest.mark.parametrize("qp_field", [1, 0xFFFF_8880_DEAD_0000],
                         ids=["qp-number", "kernel-pointer"])
def test_kernel_poll_of_a_user_cq_is_refused(ctx, qp_field):
    """uverbs' POLL_CQ command on a user CQ fails with EOPNOTSUPP and reaps nothing. The
    ring is user memory: the CQE's QP field holds the QP number rsiw writes there (the
    first case) or any value user space writes (the second), and the core dereferences
    the `ib_wc.qp` a provider returns. The core keeps the command off unless a driver
    sets it in `uverbs_cmd_mask` (rsiw sets only POST_SEND, rust/sys/ibdev.rs); this
    fails if it is ever turned on."""
    lib = libibverbs()
    n = ctypes.c_int()
    devs = lib.ibv_get_device_list(ctypes.byref(n))
    assert devs, "ibv_get_device_list failed"
    try:
        dev = next(devs[k] for k in range(n.value)
                   if lib.ibv_get_device_name(devs[k]) == DEV.encode())
        vctx = lib.ibv_open_device(dev)
    finally:
        lib.ibv_free_device_list(devs)
    assert vctx, f"ibv_open_device({DEV}) failed: errno {ctypes.get_errno()}"
    try:
        before = set(rings(os.getpid()))
        cq = lib.ibv_create_cq(vctx, 4, None, None, 0)
        assert cq, f"ibv_create_cq failed: errno {ctypes.get_errno()}"
        try:
            (ring,) = set(rings(os.getpid())) - before
            cqe = SIW_CQE.pack(0x5157, 1, 0, 0, 0, 0, qp_field)  # flags: SIW_WQE_VALID
            ctypes.memmove(ring[0], cqe, len(cqe))
            wcs = ctypes.create_string_buffer(4 * IB_UVERBS_WC_SIZE)
            ctypes.set_errno(0)
            ret = lib.ibv_cmd_poll_cq(cq, 4, wcs)
            err = ctypes.get_errno() if ret == -1 else abs(ret)
            assert ret != 0 and err == errno.EOPNOTSUPP, \
                f"POLL_CQ on a user CQ returned {ret} (errno {ctypes.get_errno()})"
            # Nothing was reaped: the CQE is still there, valid, for the ring's consumer.
            assert ctypes.string_at(ring[0], len(cqe)) == cqe
        finally:
            assert lib.ibv_destroy_cq(cq) == 0
    finally:
        lib.ibv_close_device(vctx)
