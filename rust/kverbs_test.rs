// SPDX-License-Identifier: GPL-2.0

//! KUnit suite `rsiw_kverbs`: rsiw's verbs as a kernel consumer sees them, through the
//! RDMA core (`ib_alloc_pd`, `ib_create_qp`, `ib_post_send`, `ib_poll_cq`, `ib_drain_qp`,
//! `ib_alloc_mr`, `ib_map_mr_sg`, ...), and the interfaces the connection uses inside rsiw:
//! the connection manager's state setters, the TX and RX paths' WQE functions and the
//! STag lookup. Each test creates an rsiw device on the loopback netdev and removes it.
//!
//! A failed KUnit assertion ends the test thread without running destructors, which would
//! leave the device (and the module) pinned; so the flows check with [`check!`], which
//! returns early and lets every object be destroyed, and each test asserts once at the end.

#[kernel::prelude::kunit_tests(rsiw_kverbs)]
mod suite {
    use crate::abi::{WcStatus, WrOpcode};
    use crate::device::{Device, Link};
    use crate::engine::rx_shell::{Access, InvalidateCheck, TaggedCheck};
    use crate::limits::MAX_FRMR_PAGES;
    use crate::qp::Qp;
    use crate::srq::Srq;
    use crate::stag::{access_bits, InUse, MrRef};
    use crate::sys::bindings as b;
    use crate::sys::kverbs::{
        cpu_online, flush_comp_calls, netdev_by_name, wc_invalidate_rkey, wc_wr_id, Caps, Events,
        KCq, KDevice, KMr, KPd, KQp, KSrq, PostFail, RecvReq, SendReq, Sge, SoftirqChain,
    };
    use crate::sys::net::link::LinkHandler;
    use crate::sys::obj::QpEvent;
    use crate::sys::Pod;
    use crate::wqe::{BadSqe, BadWqe, Stale};
    use kernel::prelude::*;

    /// A failed check: where, and what was expected.
    struct Fail {
        line: u32,
        what: &'static str,
    }

    /// The outcome of a flow or of one of its steps.
    type Checked<T = ()> = core::result::Result<T, Fail>;

    /// Returns from the flow with a [`Fail`] unless `cond` holds.
    macro_rules! check {
        ($cond:expr) => {
            if !$cond {
                return Err(Fail {
                    line: line!(),
                    what: stringify!($cond),
                });
            }
        };
    }

    /// Unwraps an `Ok`/`Some`, or returns from the flow with a [`Fail`].
    macro_rules! req {
        ($e:expr) => {
            match $e.ok() {
                Some(v) => v,
                None => {
                    return Err(Fail {
                        line: line!(),
                        what: stringify!($e),
                    })
                }
            }
        };
    }

    /// The SQE of a `Qp::next_sqe` that returned one, whether it was taken or not.
    macro_rules! sqe {
        ($e:expr) => {
            match $e {
                Some(Ok((w, _))) => w,
                _ => {
                    return Err(Fail {
                        line: line!(),
                        what: stringify!($e),
                    })
                }
            }
        };
    }

    /// Unwraps a `Some(Ok(_))` (an RQE from the RX interface).
    macro_rules! wqe {
        ($e:expr) => {
            match $e {
                Some(Ok(w)) => w,
                _ => {
                    return Err(Fail {
                        line: line!(),
                        what: stringify!($e),
                    })
                }
            }
        };
    }

    const NAME: &CStr = c"rsiw_kunit";
    const SUCCESS: WcStatus = WcStatus::Success;
    const RESET: b::ib_qp_state = b::ib_qp_state_IB_QPS_RESET;
    const INIT: b::ib_qp_state = b::ib_qp_state_IB_QPS_INIT;
    const RTS: b::ib_qp_state = b::ib_qp_state_IB_QPS_RTS;
    const ERR: b::ib_qp_state = b::ib_qp_state_IB_QPS_ERR;
    const SIGNALED: u32 = b::ib_send_flags_IB_SEND_SIGNALED as u32;
    const LOCAL_WRITE: u32 = b::ib_access_flags_IB_ACCESS_LOCAL_WRITE;

    static CQ_EV: Events = Events::new();
    static QP_EV: Events = Events::new();
    static SRQ_CQ_EV: Events = Events::new();
    static SRQ_EV: Events = Events::new();
    static SRQ_QP_EV: Events = Events::new();
    static VECTOR_EV: Events = Events::new();

    /// Creates an rsiw device on `lo`, runs `f` on it and removes the device.
    fn with_device(f: impl FnOnce(&KDevice<Device>) -> Checked) -> Checked {
        let lo = req!(netdev_by_name(c"lo").ok_or(()));
        let made = <Link as LinkHandler>::newlink(NAME, &lo);
        check!(made.is_ok());
        let dev = req!(KDevice::<Device>::of_netdev(&lo).ok_or(()));
        let r = f(&dev);
        dev.unregister();
        r
    }

    /// Runs `flow` on a fresh device; logs where it failed.
    fn run(flow: fn(&KDevice<Device>) -> Checked) -> bool {
        match with_device(flow) {
            Ok(()) => true,
            Err(f) => {
                pr_err!("rsiw_kverbs: check failed at line {}: {}\n", f.line, f.what);
                false
            }
        }
    }

    fn errno_at(r: core::result::Result<(), PostFail>) -> Option<(i32, usize)> {
        r.err().map(|(e, i)| (e.to_errno(), i))
    }

    fn send(id: u64, opcode: b::ib_wr_opcode, flags: u32, sges: &[Sge]) -> SendReq<'_> {
        SendReq {
            id,
            opcode,
            flags,
            sges,
            rdma: (0, 0),
        }
    }

    fn recv(id: u64, sges: &[Sge]) -> RecvReq<'_> {
        RecvReq { id, sges }
    }

    fn sge(addr: u64, len: u32, lkey: u32) -> Sge {
        Sge { addr, len, lkey }
    }

    /// Polls one completion and returns `(wr_id, status, opcode, byte_len)`.
    fn poll_one(cq: &KCq<'_, Device>) -> Option<(u64, b::ib_wc_status, b::ib_wc_opcode, u32)> {
        let mut wc = [b::ib_wc::zeroed(); 1];
        (cq.poll(&mut wc) == 1)
            .then(|| (wc_wr_id(&wc[0]), wc[0].status, wc[0].opcode, wc[0].byte_len))
    }

    /// The payload of [`qp_flow`]'s inline RDMA WRITE.
    const INLINE_DATA: &[u8] = b"inline payload";

    /// The objects and SGEs that the steps of [`qp_flow`] share.
    struct QpRig<'a> {
        pd: &'a KPd<'a, Device>,
        cq: &'a KCq<'a, Device>,
        qp: &'a KQp<'a, Device>,
        /// The address of the flow's 4096-octet buffer.
        base: u64,
        /// The PD's DMA lkey.
        lkey: u32,
        /// 64 octets at `base`.
        one: [Sge; 1],
        /// 64 octets at `base`, then 64 at `base + 64`.
        two: [Sge; 2],
        /// [`INLINE_DATA`].
        inline: [Sge; 1],
    }

    impl<'a> QpRig<'a> {
        /// The steps' view of `qp` of `pd`, with both queues on `cq`, and SGEs into `buf`.
        fn new(
            pd: &'a KPd<'a, Device>,
            cq: &'a KCq<'a, Device>,
            qp: &'a KQp<'a, Device>,
            buf: &[u8],
        ) -> Self {
            let base = buf.as_ptr() as u64;
            let lkey = pd.local_dma_lkey();
            let one = [sge(base, 64, lkey)];
            let two = [one[0], sge(base + 64, 64, lkey)];
            let data = INLINE_DATA;
            let inline = [sge(data.as_ptr() as u64, data.len() as u32, 0)];
            Self {
                pd,
                cq,
                qp,
                base,
                lkey,
                one,
                two,
                inline,
            }
        }
    }

    /// Kernel QP verbs, the CM's RTS and ERROR setters, and the TX/RX WQE interface.
    fn qp_flow(dev: &KDevice<Device>) -> Checked {
        let pd = req!(KPd::new(dev));
        let cq = req!(KCq::new(dev, 32, &CQ_EV));
        check!(cq.depth() == 32);
        let caps = Caps {
            send_wr: 4,
            recv_wr: 3,
            send_sge: 2,
            recv_sge: 2,
            inline: 64,
        };
        let rc = b::ib_qp_type_IB_QPT_RC;
        let qp = req!(KQp::new(&pd, &cq, &cq, None, rc, caps, &QP_EV));
        check!(qp.qpn() != 0);
        // An RNIC's QP starts in INIT (iWARP Idle).
        check!(req!(qp.query()) == (INIT, 4, 4));
        let buf = req!(KVec::from_elem(0u8, 4096, GFP_KERNEL));
        let t = QpRig::new(&pd, &cq, &qp, &buf);
        qp_post_before_rts(&t)?;
        qp_enter_rts(&t)?;
        qp_tx_complete_and_release(&t)?;
        qp_tx_malformed_wqe(&t)?;
        qp_rx_with_invalidate(&t)?;
        let calls = qp_completion_notification(&t)?;
        qp_fatal_error(&t, calls)?;
        qp_error_and_reset(&t)
    }

    /// Posting in RESET and INIT: the queue limits, SGE limits and unsupported opcodes.
    fn qp_post_before_rts(t: &QpRig<'_>) -> Checked {
        let (qp, one, two) = (t.qp, &t.one, &t.two);
        // Nothing may be posted in RESET.
        req!(qp.set_state(RESET));
        check!(errno_at(qp.post_recv(&[recv(1, one)])) == Some((EINVAL.to_errno(), 0)));
        req!(qp.set_state(INIT));
        // The RQ has 4 slots (3 rounded up).
        req!(qp.post_recv(&[recv(10, two), recv(11, one), recv(12, one), recv(15, one)]));
        check!(errno_at(qp.post_recv(&[recv(16, one)])) == Some((ENOMEM.to_errno(), 0)));
        let mut write = send(
            22,
            b::ib_wr_opcode_IB_WR_RDMA_WRITE,
            SIGNALED | b::ib_send_flags_IB_SEND_INLINE as u32,
            &t.inline,
        );
        write.rdma = (0x1000, 0x4242);
        req!(qp.post_send(&[
            send(20, b::ib_wr_opcode_IB_WR_SEND, SIGNALED, one),
            send(21, b::ib_wr_opcode_IB_WR_SEND, 0, two),
            write,
        ]));
        // Too many SGEs; a LOCAL_INV fills the SQ; atomics do not exist on iWARP; full.
        let three = [one[0], one[0], one[0]];
        check!(
            errno_at(qp.post_send(&[send(30, b::ib_wr_opcode_IB_WR_SEND, 0, &three)]))
                == Some((EINVAL.to_errno(), 0))
        );
        let mut inv = send(23, b::ib_wr_opcode_IB_WR_LOCAL_INV, 0, &[]);
        inv.rdma = (0, 0x1234_5678);
        let r = qp.post_send(&[inv, send(31, b::ib_wr_opcode_IB_WR_SEND, 0, one)]);
        check!(errno_at(r) == Some((ENOMEM.to_errno(), 1)));
        let atomic = send(32, b::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP, 0, one);
        check!(errno_at(qp.post_send(&[atomic])) == Some((EINVAL.to_errno(), 0)));
        check!(
            errno_at(qp.post_send(&[send(33, b::ib_wr_opcode_IB_WR_SEND, 0, one)]))
                == Some((ENOMEM.to_errno(), 0))
        );
        check!(poll_one(t.cq).is_none());
        Ok(())
    }

    /// Posted WRs are not processed until the connection manager enters RTS, which only it
    /// may do; afterwards the QP stays in RTS.
    fn qp_enter_rts(t: &QpRig<'_>) -> Checked {
        let qp = t.qp;
        let q = qp.driver();
        check!(q.pd() == t.pd.id());
        check!(Qp::next_sqe(q, |_| false).is_none() && Qp::take_rqe(q).is_none());
        check!(qp.set_state(RTS).is_err());
        req!(Qp::enter_rts(q));
        check!(req!(qp.query()).0 == RTS);
        req!(qp.set_state(RTS));
        check!(qp.set_state(INIT).is_err() && qp.set_state(RESET).is_err());
        check!(Qp::enter_rts(q).is_err());
        Ok(())
    }

    /// TX: peek, complete (signalled: a CQE), complete again (stale); an unsignalled Send;
    /// an inline RDMA WRITE released first and completed in error later.
    fn qp_tx_complete_and_release(t: &QpRig<'_>) -> Checked {
        let (q, cq) = (t.qp.driver(), t.cq);
        let w = sqe!(Qp::next_sqe(q, |_| false));
        check!(w.id == 20 && w.opcode == WrOpcode::Send && w.done().signalled());
        check!(w.sges().len() == 1 && w.sges()[0].laddr == t.base && w.sges()[0].lkey == t.lkey);
        check!(w.inline_data().is_none());
        check!(sqe!(Qp::next_sqe(q, |_| false)).id == 20);
        req!(Qp::complete_sqe(q, &w, SUCCESS, 64).map_err(|_| ()));
        check!(Qp::complete_sqe(q, &w, SUCCESS, 64) == Err(Stale));
        check!(
            poll_one(cq)
                == Some((
                    20,
                    b::ib_wc_status_IB_WC_SUCCESS,
                    b::ib_wc_opcode_IB_WC_SEND,
                    64
                ))
        );
        // Unsignalled: no CQE.
        let w = sqe!(Qp::next_sqe(q, |_| false));
        check!(w.id == 21 && !w.done().signalled() && w.sges().len() == 2);
        req!(Qp::complete_sqe(q, &w, SUCCESS, 128).map_err(|_| ()));
        check!(poll_one(cq).is_none());
        // Inline RDMA WRITE, released first and completed in error later: declined by
        // `take` it stays the head; accepted, it is released with the copy.
        let w = sqe!(Qp::next_sqe(q, |w| w.opcode != WrOpcode::Write));
        check!(w.id == 22 && w.opcode == WrOpcode::Write && w.raddr == 0x1000 && w.rkey == 0x4242);
        check!(
            w.sges().is_empty()
                && w.inline_data().map(|d| d.as_slice() == INLINE_DATA) == Some(true)
        );
        check!(matches!(
            Qp::next_sqe(q, |w| w.opcode == WrOpcode::Write),
            Some(Ok((ref w, true))) if w.id == 22
        ));
        check!(Qp::release_sqe(q, w.slot) == Err(Stale));
        Qp::complete_send(q, &w.done(), WcStatus::LocProtErr, 0);
        check!(
            poll_one(cq)
                == Some((
                    22,
                    b::ib_wc_status_IB_WC_LOC_PROT_ERR,
                    b::ib_wc_opcode_IB_WC_RDMA_WRITE,
                    0
                ))
        );
        Ok(())
    }

    /// A WQE the TX path finds malformed completes with LOC_QP_OP_ERR.
    fn qp_tx_malformed_wqe(t: &QpRig<'_>) -> Checked {
        let q = t.qp.driver();
        let w = sqe!(Qp::next_sqe(q, |_| false));
        check!(w.id == 23 && w.opcode == WrOpcode::InvalStag && w.rkey == 0x1234_5678);
        let bad = BadSqe {
            slot: w.slot,
            id: w.id,
            opcode: w.opcode,
            reason: BadWqe::Opcode(w.opcode.raw()),
        };
        req!(Qp::fail_sqe(q, &bad).map_err(|_| ()));
        check!(Qp::fail_sqe(q, &bad) == Err(Stale));
        let op_err = b::ib_wc_status_IB_WC_LOC_QP_OP_ERR;
        check!(poll_one(t.cq) == Some((23, op_err, b::ib_wc_opcode_IB_WC_LOCAL_INV, 0)));
        check!(Qp::next_sqe(q, |_| false).is_none());
        Ok(())
    }

    /// RX: take, complete with an invalidated STag.
    fn qp_rx_with_invalidate(t: &QpRig<'_>) -> Checked {
        let q = t.qp.driver();
        let r = wqe!(Qp::take_rqe(q));
        check!(r.id == 10 && r.sges().len() == 2 && r.sges()[1].laddr == t.base + 64);
        Qp::complete_recv(q, r.id, SUCCESS, 77, Some(0xabcd_0011), false);
        let mut wc = [b::ib_wc::zeroed(); 4];
        check!(t.cq.poll(&mut wc) == 1);
        check!(
            wc_wr_id(&wc[0]) == 10
                && wc[0].opcode == b::ib_wc_opcode_IB_WC_RECV
                && wc[0].byte_len == 77
        );
        check!(
            wc[0].qp == t.qp.as_ptr()
                && wc[0].wc_flags & b::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0
        );
        check!(wc_invalidate_rkey(&wc[0]) == 0xabcd_0011);
        Ok(())
    }

    /// Completion notification: one-shot arms, solicited-only arms, missed events. The
    /// CQ is on vector 0, so a handler call may run from CPU 0's work item: each count is
    /// read after [`flush_comp_calls`]. Returns the completion handler calls counted
    /// before the first arm.
    fn qp_completion_notification(t: &QpRig<'_>) -> Checked<u32> {
        let (q, cq) = (t.qp.driver(), t.cq);
        check!(cq.req_notify(b::ib_cq_notify_flags_IB_CQ_NEXT_COMP) == 0);
        let calls = CQ_EV.count();
        let r = wqe!(Qp::take_rqe(q));
        Qp::complete_recv(q, r.id, SUCCESS, 1, None, false);
        flush_comp_calls();
        check!(CQ_EV.count() == calls + 1 && CQ_EV.last() == Events::COMPLETION);
        let flags = b::ib_cq_notify_flags_IB_CQ_SOLICITED
            | b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS;
        check!(cq.req_notify(flags) == 1);
        let r = wqe!(Qp::take_rqe(q));
        Qp::complete_recv(q, r.id, SUCCESS, 0, None, false);
        flush_comp_calls();
        check!(CQ_EV.count() == calls + 1);
        let r = wqe!(Qp::take_rqe(q));
        check!(r.id == 15);
        Qp::complete_recv(q, r.id, SUCCESS, 5, None, true);
        flush_comp_calls();
        check!(CQ_EV.count() == calls + 2);
        let mut wc = [b::ib_wc::zeroed(); 4];
        check!(
            cq.poll(&mut wc) == 3
                && wc_wr_id(&wc[0]) == 11
                && wc_wr_id(&wc[1]) == 12
                && wc_wr_id(&wc[2]) == 15
        );
        check!(
            cq.req_notify(
                b::ib_cq_notify_flags_IB_CQ_NEXT_COMP
                    | b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS
            ) == 0
        );
        Ok(calls)
    }

    /// A fatal error (CM, data path): its event, a flush of the rest (the CQ armed since
    /// `calls` handler calls fires once), and, as a send WQE was flushed, SQ_DRAINED after
    /// the error's event; a second error changes nothing.
    fn qp_fatal_error(t: &QpRig<'_>, calls: u32) -> Checked {
        let (qp, cq, one) = (t.qp, t.cq, &t.one);
        let q = qp.driver();
        req!(qp.post_send(&[send(17, b::ib_wr_opcode_IB_WR_SEND, 0, one)]));
        req!(qp.post_recv(&[recv(16, one)]));
        let events = QP_EV.count();
        Qp::enter_error(q, Some(QpEvent::Fatal));
        check!(QP_EV.count() == events + 2 && QP_EV.last() == b::ib_event_type_IB_EVENT_SQ_DRAINED);
        flush_comp_calls();
        check!(CQ_EV.count() == calls + 3);
        let flush = b::ib_wc_status_IB_WC_WR_FLUSH_ERR;
        check!(poll_one(cq) == Some((17, flush, b::ib_wc_opcode_IB_WC_SEND, 0)));
        check!(poll_one(cq) == Some((16, flush, b::ib_wc_opcode_IB_WC_RECV, 0)));
        check!(Qp::next_sqe(q, |_| false).is_none() && Qp::take_rqe(q).is_none());
        check!(req!(qp.query()).0 == ERR);
        Qp::enter_error(q, Some(QpEvent::Fatal));
        check!(QP_EV.count() == events + 2);
        Ok(())
    }

    /// In ERROR, posting completes at once (what ib_drain_qp relies on); ERROR -> RESET ->
    /// INIT makes the QP usable again.
    fn qp_error_and_reset(t: &QpRig<'_>) -> Checked {
        let (qp, cq, one) = (t.qp, t.cq, &t.one);
        let flush = b::ib_wc_status_IB_WC_WR_FLUSH_ERR;
        req!(qp.post_send(&[send(40, b::ib_wr_opcode_IB_WR_SEND, 0, one)]));
        req!(qp.post_recv(&[recv(41, one)]));
        check!(poll_one(cq) == Some((40, flush, b::ib_wc_opcode_IB_WC_SEND, 0)));
        check!(poll_one(cq) == Some((41, flush, b::ib_wc_opcode_IB_WC_RECV, 0)));
        req!(qp.set_state(RESET));
        req!(qp.set_state(INIT));
        check!(req!(qp.query()).0 == INIT);
        Ok(())
    }

    /// Kernel SRQs: query, limits, the limit event through the RX interface, and an SRQ
    /// QP's error (LAST_WQE_REACHED, the SRQ keeps its WQEs).
    fn srq_flow(dev: &KDevice<Device>) -> Checked {
        let pd = req!(KPd::new(dev));
        let cq = req!(KCq::new(dev, 16, &SRQ_CQ_EV));
        let srq = req!(KSrq::new(&pd, 6, 1, 0, &SRQ_EV));
        let buf = req!(KVec::from_elem(0u8, 256, GFP_KERNEL));
        let one = [sge(buf.as_ptr() as u64, 256, pd.local_dma_lkey())];
        srq_query_limit_and_post(&srq, &one)?;
        let caps = Caps {
            send_wr: 2,
            recv_wr: 0,
            send_sge: 1,
            recv_sge: 1,
            inline: 0,
        };
        let rc = b::ib_qp_type_IB_QPT_RC;
        let qp = req!(KQp::new(&pd, &cq, &cq, Some(&srq), rc, caps, &SRQ_QP_EV));
        check!(errno_at(qp.post_recv(&[recv(1, &one)])) == Some((EINVAL.to_errno(), 0)));
        req!(qp.set_state(INIT));
        let q = qp.driver();
        check!(Qp::take_rqe(q).is_none());
        req!(Qp::enter_rts(q));
        srq_limit_event(&srq, &qp, &cq)?;
        srq_qp_error(&srq, &qp, &cq, &one)
    }

    /// The granted size (6 WRs round up to 8), the limit's bound, and posting five WRs of
    /// one SGE (`one`) but none of two.
    fn srq_query_limit_and_post(srq: &KSrq<'_, Device>, one: &[Sge; 1]) -> Checked {
        check!(req!(srq.query()) == (8, 1, 0));
        check!(srq.set_limit(9).is_err());
        req!(srq.set_limit(3));
        check!(req!(srq.query()) == (8, 1, 3));
        let two = [one[0], one[0]];
        check!(errno_at(srq.post_recv(&[recv(99, &two)])) == Some((EINVAL.to_errno(), 0)));
        req!(srq.post_recv(&[
            recv(100, one),
            recv(101, one),
            recv(102, one),
            recv(103, one),
            recv(104, one)
        ]));
        Ok(())
    }

    /// The QP takes the SRQ's WQEs in order; falling below the limit reports the limit
    /// event once, until `set_limit` re-arms it.
    fn srq_limit_event(
        srq: &KSrq<'_, Device>,
        qp: &KQp<'_, Device>,
        cq: &KCq<'_, Device>,
    ) -> Checked {
        let q = qp.driver();
        let events = SRQ_EV.count();
        for id in 100..102 {
            let r = wqe!(Qp::take_rqe(q));
            check!(r.id == id && r.sges().len() == 1);
            Qp::complete_recv(q, r.id, SUCCESS, 10, None, false);
        }
        // Two left, below the limit of three: the event, once.
        check!(SRQ_EV.count() == events);
        check!(wqe!(Qp::take_rqe(q)).id == 102);
        check!(
            SRQ_EV.count() == events + 1
                && SRQ_EV.last() == b::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED
        );
        check!(wqe!(Qp::take_rqe(q)).id == 103);
        check!(SRQ_EV.count() == events + 1);
        // Re-armed: the next consumption below the limit reports again.
        req!(srq.set_limit(3));
        check!(wqe!(Qp::take_rqe(q)).id == 104);
        check!(SRQ_EV.count() == events + 2);
        check!(Qp::take_rqe(q).is_none());
        let mut wc = [b::ib_wc::zeroed(); 4];
        check!(cq.poll(&mut wc) == 2);
        Ok(())
    }

    /// An SRQ QP entering ERROR leaves the SRQ's WQEs to its other QPs.
    fn srq_qp_error(
        srq: &KSrq<'_, Device>,
        qp: &KQp<'_, Device>,
        cq: &KCq<'_, Device>,
        one: &[Sge; 1],
    ) -> Checked {
        req!(srq.post_recv(&[recv(105, one)]));
        let qp_events = SRQ_QP_EV.count();
        req!(qp.set_state(ERR));
        check!(
            SRQ_QP_EV.count() == qp_events + 1
                && SRQ_QP_EV.last() == b::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED
        );
        let mut wc = [b::ib_wc::zeroed(); 4];
        check!(cq.poll(&mut wc) == 0);
        check!(
            Srq::take_rqe(srq.driver())
                .and_then(|r| r.ok())
                .map(|r| r.id)
                == Some(105)
        );
        Ok(())
    }

    /// The device, PDs and buffer that the steps of [`mr_flow`] share.
    struct MrRig<'a> {
        dev: &'a KDevice<Device>,
        /// The PD of the MRs.
        pd: &'a KPd<'a, Device>,
        /// Another PD of the same device.
        pd2: &'a KPd<'a, Device>,
        /// Three pages of kmalloc memory.
        buf: &'a [u8],
        /// The address of `buf`.
        base: u64,
    }

    /// The DMA MR of a kernel PD, fast-registration MRs, and the STag lookup,
    /// resolution, fast registration and invalidation of the data paths.
    fn mr_flow(dev: &KDevice<Device>) -> Checked {
        let pd = req!(KPd::new(dev));
        let pd2 = req!(KPd::new(dev));
        let buf = req!(KVec::from_elem(0u8, 3 * 4096, GFP_KERNEL));
        let t = MrRig {
            dev,
            pd: &pd,
            pd2: &pd2,
            buf: &buf,
            base: buf.as_ptr() as u64,
        };
        dma_mr_lookup(&t)?;
        global_rkey(&t)?;
        fast_registration(&t)
    }

    /// A PD allocated with `IB_PD_UNSAFE_GLOBAL_RKEY`: the core's DMA MR for it grants
    /// remote read and write over all kernel memory under the PD's global rkey, to that PD
    /// only, and is gone with the PD.
    fn global_rkey(t: &MrRig<'_>) -> Checked {
        let (d, base) = (t.dev.driver(), t.base);
        check!(t.pd.global_rkey() == 0);
        let pd = req!(KPd::with_global_rkey(t.dev));
        let rkey = pd.global_rkey();
        check!(rkey != 0);
        let remote = access_bits(Access::RemoteWrite) | access_bits(Access::RemoteRead);
        let m = req!(d.stags.lookup(rkey, pd.id(), remote, base, 100));
        check!(m.resolve(base).map(|k| k.addr()) == Some(base));
        check!(
            d.stags.lookup(rkey, t.pd.id(), 0, base, 1).err() == Some(TaggedCheck::NotAssociated)
        );
        check!(d.stags.invalidate(rkey, pd.id()) == Err(InvalidateCheck::CannotInvalidate));
        drop(m);
        drop(pd);
        check!(d.stags.lookup(rkey, t.pd.id(), 0, base, 1).err() == Some(TaggedCheck::InvalidStag));
        Ok(())
    }

    /// The PD's DMA MR: all kernel memory, local write, not invalidatable.
    fn dma_mr_lookup(t: &MrRig<'_>) -> Checked {
        let (d, pd, pd2, base) = (t.dev.driver(), t.pd, t.pd2, t.base);
        let dma = pd.local_dma_lkey();
        let m = req!(d.stags.lookup(dma, pd.id(), LOCAL_WRITE, base, 100));
        let r = m.resolve(base);
        check!(r.map(|k| (k.addr(), k.len())) == Some((base, u64::MAX - base)));
        check!(d.stags.lookup(dma, pd2.id(), 0, base, 1).err() == Some(TaggedCheck::NotAssociated));
        let remote_write = access_bits(Access::RemoteWrite);
        check!(
            d.stags.lookup(dma, pd.id(), remote_write, base, 1).err()
                == Some(TaggedCheck::AccessRights)
        );
        // Without IB_PD_UNSAFE_GLOBAL_RKEY the core asks for no remote rights: the wire
        // reaches the DMA MR only as the sink of a Read the consumer posted.
        check!(
            d.stags
                .lookup(dma, pd.id(), access_bits(Access::RemoteRead), base, 1)
                .err()
                == Some(TaggedCheck::AccessRights)
        );
        check!(
            d.stags.lookup(dma ^ 1, pd.id(), 0, base, 1).err() == Some(TaggedCheck::InvalidStag)
        );
        check!(d.stags.lookup(dma, pd.id(), 0, u64::MAX, 2).err() == Some(TaggedCheck::BaseBounds));
        check!(d.stags.invalidate(dma, pd.id()) == Err(InvalidateCheck::CannotInvalidate));
        Ok(())
    }

    /// Fast registration: invalid until REG_MR (executed by the TX path), then looked up,
    /// resolved, invalidated, re-registered, and gone with the MR.
    fn fast_registration(t: &MrRig<'_>) -> Checked {
        let (d, pd, base) = (t.dev.driver(), t.pd, t.base);
        check!(KMr::new(pd, MAX_FRMR_PAGES + 1).is_err());
        let mr = req!(KMr::new(pd, 4));
        let (stag, _, _) = mr.key_and_range();
        check!(stag >> 8 != 0 && stag & 0xff == 0);
        check!(d.stags.lookup(stag, pd.id(), 0, 0, 1).err() == Some(TaggedCheck::InvalidStag));
        check!(d.stags.fast_register(stag, pd.id(), 0, 0, 1) == Err(EINVAL));
        check!(mr.map(&t.buf[100..100 + 8192]) == 1);
        let (_, iova, len) = mr.key_and_range();
        check!(iova == base + 100 && len == 8192);
        let key = (stag & !0xff) | 0x5a;
        let m = frmr_register(t, stag, key, iova)?;
        frmr_resolution(t, &m, iova)?;
        frmr_invalidate(t, &m, stag, key, iova)?;
        // Re-mapped and re-registered under another key; deregistration removes the STag.
        check!(mr.map(&t.buf[0..4096]) == 1);
        let again = (stag & !0xff) | 0x77;
        req!(d
            .stags
            .fast_register(again, pd.id(), LOCAL_WRITE as i32, base, 4096));
        req!(d.stags.lookup(again, pd.id(), LOCAL_WRITE, base, 4096));
        frmr_moved_iova(t, again)?;
        req!(d.stags.invalidate(again, pd.id()));
        req!(d
            .stags
            .fast_register(again, pd.id(), LOCAL_WRITE as i32, base, 4096));
        frmr_placement_against_invalidation(t, again, base)?;
        drop(mr);
        check!(d.stags.lookup(again, pd.id(), 0, base, 1).err() == Some(TaggedCheck::InvalidStag));
        Ok(())
    }

    /// REG_MR of the MR `stag`, mapped at `iova`, under `key` with local and remote write:
    /// only once and only from its PD; the lookup of `key` checks rights and bounds.
    /// Returns the reference of a successful lookup.
    fn frmr_register(t: &MrRig<'_>, stag: u32, key: u32, iova: u64) -> Checked<MrRef> {
        let (d, pd, pd2) = (t.dev.driver(), t.pd, t.pd2);
        let remote_write = access_bits(Access::RemoteWrite);
        let rights = (LOCAL_WRITE | remote_write) as i32;
        check!(d.stags.fast_register(key, pd2.id(), rights, iova, 8192) == Err(EACCES));
        // Not beyond the mapping, not wrapping 2^64.
        check!(d.stags.fast_register(key, pd.id(), rights, iova, 8193) == Err(EINVAL));
        check!(
            d.stags
                .fast_register(key, pd.id(), rights, u64::MAX - 100, 8192)
                == Err(EINVAL)
        );
        req!(d.stags.fast_register(key, pd.id(), rights, iova, 8192));
        check!(d.stags.fast_register(key, pd.id(), rights, iova, 8192) == Err(EINVAL));
        check!(d.stags.lookup(stag, pd.id(), 0, iova, 1).err() == Some(TaggedCheck::InvalidStag));
        let m = req!(d.stags.lookup(key, pd.id(), remote_write, iova, 8192));
        check!(m.stag() == key && m.pd() == pd.id() && m.bounds() == (iova, 8192) && m.is_valid());
        check!(m.access() == LOCAL_WRITE | remote_write);
        let remote_read = access_bits(Access::RemoteRead);
        check!(
            d.stags.lookup(key, pd.id(), remote_read, iova, 1).err()
                == Some(TaggedCheck::AccessRights)
        );
        check!(
            d.stags.lookup(key, pd.id(), 0, iova + 8191, 2).err() == Some(TaggedCheck::BaseBounds)
        );
        check!(d.stags.lookup(key, pd.id(), 0, iova - 1, 1).err() == Some(TaggedCheck::BaseBounds));
        Ok(m)
    }

    /// A consumer may give the MR another iova between `map_mr_sg` and REG_MR (xprtrdma
    /// puts the RPC's XID in its upper 32 bits): the STag `stag` (valid, mapped at the
    /// start of `t.buf` for 4096 octets) registered again at such an iova is looked up at
    /// the new offsets only, and they resolve to the same pages.
    fn frmr_moved_iova(t: &MrRig<'_>, stag: u32) -> Checked {
        let (d, pd, base) = (t.dev.driver(), t.pd, t.base);
        req!(d.stags.invalidate(stag, pd.id()));
        let moved = (base & 0xffff_ffff) | (0x1234_5678u64 << 32);
        req!(d
            .stags
            .fast_register(stag, pd.id(), LOCAL_WRITE as i32, moved, 4096));
        let m = req!(d.stags.lookup(stag, pd.id(), LOCAL_WRITE, moved, 4096));
        check!(m.bounds() == (moved, 4096));
        for off in [0, 1, 4095] {
            check!(m.resolve(moved + off).map(|k| k.addr()) == Some(base + off));
        }
        if moved != base {
            check!(
                d.stags.lookup(stag, pd.id(), 0, base, 1).err() == Some(TaggedCheck::BaseBounds)
            );
        }
        Ok(())
    }

    /// Resolution follows the page list: contiguous up to each page end.
    fn frmr_resolution(t: &MrRig<'_>, m: &MrRef, iova: u64) -> Checked {
        let seg = |off: u64| {
            let kva = t.base + 100 + off;
            (kva, (4096 - kva % 4096).min(8192 - off))
        };
        for off in [0, 1, 3995, 3996, 5000, 8191] {
            check!(m.resolve(iova + off).map(|k| (k.addr(), k.len())) == Some(seg(off)));
        }
        check!(m.resolve(iova + 8192).is_none() && m.resolve(iova - 1).is_none());
        Ok(())
    }

    /// Invalidation (LOCAL_INV, Send with Invalidate) of `key`; the held reference `m`
    /// sees it.
    fn frmr_invalidate(t: &MrRig<'_>, m: &MrRef, stag: u32, key: u32, iova: u64) -> Checked {
        let (d, pd, pd2) = (t.dev.driver(), t.pd, t.pd2);
        check!(d.stags.invalidate(key, pd2.id()) == Err(InvalidateCheck::NotAssociated));
        check!(d.stags.invalidate(stag, pd.id()) == Err(InvalidateCheck::InvalidStag));
        req!(d.stags.invalidate(key, pd.id()));
        check!(d.stags.invalidate(key, pd.id()) == Err(InvalidateCheck::InvalidStag));
        check!(d.stags.lookup(key, pd.id(), 0, iova, 1).err() == Some(TaggedCheck::InvalidStag));
        check!(!m.is_valid());
        Ok(())
    }

    /// An access in progress holds off the invalidation of its region (`crate::stag`,
    /// accesses against invalidation): `stag`, valid with local write at `iova`, revoked
    /// while a placement guard lives, takes no new placement and no new read
    /// (`InUse::take`), but still has one access in progress until the guard goes.
    fn frmr_placement_against_invalidation(t: &MrRig<'_>, stag: u32, iova: u64) -> Checked {
        let (d, pd) = (t.dev.driver(), t.pd);
        let placing = req!(d
            .stags
            .lookup_to_place(stag, pd.id(), LOCAL_WRITE, iova, 16));
        check!(placing.resolve(iova).map(|k| k.addr()) == Some(t.base));
        let placing_mr = req!(d.stags.lookup(stag, pd.id(), 0, iova, 16));
        // A read guard taken on the region's reference, as the TX path takes one per
        // Read Response FPDU: while valid, it checks and holds off the revocation too.
        let reading = req!(InUse::take(&placing_mr, stag, pd.id(), 0, iova, 16));
        check!(
            InUse::take(&placing_mr, stag ^ 1, pd.id(), 0, iova, 16).err()
                == Some(TaggedCheck::InvalidStag)
        );
        check!(
            InUse::take(&placing_mr, stag, pd.id(), 0, iova, 1 << 40).err()
                == Some(TaggedCheck::BaseBounds)
        );
        let revoked = req!(d.stags.revoke(stag, pd.id()));
        check!(revoked.in_use());
        check!(
            d.stags
                .lookup_to_place(stag, pd.id(), LOCAL_WRITE, iova, 16)
                .err()
                == Some(TaggedCheck::InvalidStag)
        );
        check!(
            InUse::take(&placing_mr, stag, pd.id(), 0, iova, 16).err()
                == Some(TaggedCheck::InvalidStag)
        );
        check!(d.stags.revoke(stag, pd.id()).err() == Some(InvalidateCheck::InvalidStag));
        check!(revoked.in_use());
        drop(placing);
        check!(revoked.in_use());
        drop(reading);
        check!(!revoked.in_use());
        revoked.wait();
        Ok(())
    }

    /// A QP of four send and four receive WRs, one SGE each, no inline data.
    const SMALL_CAPS: Caps = Caps {
        send_wr: 4,
        recv_wr: 4,
        send_sge: 1,
        recv_sge: 1,
        inline: 0,
    };

    /// Limits of kernel QPs, and `ib_drain_qp` on a directly polled CQ.
    fn drain_flow(dev: &KDevice<Device>) -> Checked {
        let pd = req!(KPd::new(dev));
        let cq = req!(KCq::new_direct(dev, 16));
        let caps = SMALL_CAPS;
        let rc = b::ib_qp_type_IB_QPT_RC;
        check!(KQp::new(&pd, &cq, &cq, None, b::ib_qp_type_IB_QPT_UD, caps, &QP_EV).is_err());
        check!(KQp::new(&pd, &cq, &cq, None, rc, Caps { send_wr: 0, ..caps }, &QP_EV).is_err());
        check!(KQp::new(
            &pd,
            &cq,
            &cq,
            None,
            rc,
            Caps {
                send_sge: 7,
                ..caps
            },
            &QP_EV
        )
        .is_err());
        check!(KQp::new(&pd, &cq, &cq, None, rc, Caps { inline: 81, ..caps }, &QP_EV).is_err());
        let qp = req!(KQp::new(&pd, &cq, &cq, None, rc, caps, &QP_EV));
        let buf = req!(KVec::from_elem(0u8, 64, GFP_KERNEL));
        let one = [sge(buf.as_ptr() as u64, 64, pd.local_dma_lkey())];
        req!(qp.set_state(INIT));
        req!(qp.post_recv(&[recv(1, &one), recv(2, &one)]));
        req!(qp.post_send(&[send(3, b::ib_wr_opcode_IB_WR_SEND, 0, &one)]));
        req!(qp.set_state(ERR));
        // SQ first, then RQ, each in posting order; unsignalled WRs report their flush.
        let mut wc = [b::ib_wc::zeroed(); 4];
        check!(cq.poll(&mut wc) == 3);
        check!(wc_wr_id(&wc[0]) == 3 && wc_wr_id(&wc[1]) == 1 && wc_wr_id(&wc[2]) == 2);
        check!(wc
            .iter()
            .take(3)
            .all(|w| w.status == b::ib_wc_status_IB_WC_WR_FLUSH_ERR));
        // The CQ is empty: ib_drain_qp's own WRs are the only completions it processes.
        qp.drain();
        check!(cq.poll(&mut wc) == 0);
        Ok(())
    }

    /// A flush the full CQ stopped leaves WQEs in a ring: a WR posted in ERROR then
    /// completes only after them (one batch of them is flushed first, in the post's own
    /// hold of the ring's lock) or, if they cannot go yet, is refused with `ENOMEM`, never
    /// accepted and stranded (`ib_drain_*` would wait for it for good).
    fn post_in_error_behind_a_stopped_flush(dev: &KDevice<Device>) -> Checked {
        let pd = req!(KPd::new(dev));
        let cq = req!(KCq::new_direct(dev, 4));
        check!(cq.depth() == 4);
        let rc = b::ib_qp_type_IB_QPT_RC;
        let qp = req!(KQp::new(&pd, &cq, &cq, None, rc, SMALL_CAPS, &QP_EV));
        let buf = req!(KVec::from_elem(0u8, 64, GFP_KERNEL));
        let one = [sge(buf.as_ptr() as u64, 64, pd.local_dma_lkey())];
        req!(qp.set_state(INIT));
        req!(qp.post_recv(&[recv(1, &one), recv(2, &one)]));
        let op = b::ib_wr_opcode_IB_WR_SEND;
        for id in 10..14 {
            req!(qp.post_send(&[send(id, op, 0, &one)]));
        }
        // The four SQEs fill the CQ; the two RQEs stay in the RQ.
        req!(qp.set_state(ERR));
        check!(errno_at(qp.post_recv(&[recv(3, &one)])) == Some((ENOMEM.to_errno(), 0)));
        let mut wc = [b::ib_wc::zeroed(); 4];
        check!(cq.poll(&mut wc) == 4);
        check!((0..4).all(|i| wc_wr_id(&wc[i]) == 10 + i as u64));
        // Room again: the post flushes what was left, then completes its own WR.
        req!(qp.post_recv(&[recv(3, &one)]));
        check!(cq.poll(&mut wc) == 3);
        check!(wc_wr_id(&wc[0]) == 1 && wc_wr_id(&wc[1]) == 2 && wc_wr_id(&wc[2]) == 3);
        check!(wc
            .iter()
            .take(3)
            .all(|w| w.status == b::ib_wc_status_IB_WC_WR_FLUSH_ERR));
        // An empty SQ: a Send posted in ERROR completes at once.
        req!(qp.post_send(&[send(20, op, 0, &one)]));
        check!(cq.poll(&mut wc) == 1 && wc_wr_id(&wc[0]) == 20);
        qp.drain();
        check!(cq.poll(&mut wc) == 0);
        Ok(())
    }

    /// Verbs may be called from any context: a ULP polling its CQ in softirq
    /// (`IB_POLL_SOFTIRQ`: nvme-rdma's LOCAL_INV, iSER, RDS) posts from the completion
    /// handler. A QP in ERROR completes each Send at once with a flush, so a chain of
    /// Sends runs `post_send` from the CQ's softirq poller over and over, while the test
    /// takes the same QP locks from process context with softirqs enabled (`query_qp`,
    /// the first post). On the debug kernel lockdep reports any lock taken both ways
    /// without disabling softirqs (the test fixture fails on its report), and a real
    /// self-deadlock would stall the chain.
    fn softirq_post_flow(dev: &KDevice<Device>) -> Checked {
        const SENDS: u32 = 64;
        let pd = req!(KPd::new(dev));
        // Declared before the CQ: freed after it, once its softirq poller has stopped.
        let chain = req!(SoftirqChain::new(SENDS));
        let cq = req!(KCq::new_softirq(dev, 16));
        let caps = SMALL_CAPS;
        let rc = b::ib_qp_type_IB_QPT_RC;
        let qp = req!(KQp::new(&pd, &cq, &cq, None, rc, caps, &QP_EV));
        req!(qp.set_state(INIT));
        req!(qp.set_state(ERR));
        let _ = req!(qp.query());
        req!(chain.start(&qp));
        // A condition with a generous deadline (softirqs run at once on an idle machine).
        let mut waited_ms = 0;
        while chain.completed() < SENDS && waited_ms < 60_000 {
            let _ = req!(qp.query());
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(10));
            waited_ms += 10;
        }
        check!(chain.completed() == SENDS);
        check!(chain.failed() == 0);
        // Every completion handler ran in softirq, so every Send after the first was posted
        // there.
        check!(chain.in_softirq() == SENDS);
        Ok(())
    }

    /// Completion vectors: the handler of a CQ on vector `v` runs on CPU `v`, whichever CPU
    /// completes the work request, for every online CPU's vector (up to 64). The QP is in
    /// ERROR, so each signalled Send completes (flushed) in `post_send`, on the CPU of this
    /// thread, which is another vector's CPU for all but one vector (two or more CPUs).
    fn comp_vector_flow(dev: &KDevice<Device>) -> Checked {
        let pd = req!(KPd::new(dev));
        let buf = req!(KVec::from_elem(0u8, 64, GFP_KERNEL));
        let one = [sge(buf.as_ptr() as u64, 64, pd.local_dma_lkey())];
        let rc = b::ib_qp_type_IB_QPT_RC;
        let next = b::ib_cq_notify_flags_IB_CQ_NEXT_COMP;
        let mut vectors = 0;
        for v in 0..kernel::cpu::nr_cpu_ids().min(64) {
            if !cpu_online(v) {
                continue;
            }
            let cq = req!(KCq::on_vector(dev, 4, &VECTOR_EV, v));
            let qp = req!(KQp::new(&pd, &cq, &cq, None, rc, SMALL_CAPS, &QP_EV));
            req!(qp.set_state(INIT));
            req!(qp.set_state(ERR));
            check!(cq.req_notify(next) == 0);
            let calls = VECTOR_EV.count();
            req!(qp.post_send(&[send(
                u64::from(v),
                b::ib_wr_opcode_IB_WR_SEND,
                SIGNALED,
                &one
            )]));
            flush_comp_calls();
            check!(VECTOR_EV.count() == calls + 1 && VECTOR_EV.last() == Events::COMPLETION);
            check!(VECTOR_EV.cpu() == v);
            let flush = b::ib_wc_status_IB_WC_WR_FLUSH_ERR;
            check!(poll_one(&cq) == Some((u64::from(v), flush, b::ib_wc_opcode_IB_WC_SEND, 0)));
            // Unarmed: a second completion calls no handler, on no CPU.
            req!(qp.post_send(&[send(99, b::ib_wr_opcode_IB_WR_SEND, SIGNALED, &one)]));
            flush_comp_calls();
            check!(VECTOR_EV.count() == calls + 1);
            check!(poll_one(&cq).is_some());
            vectors += 1;
        }
        check!(vectors >= 1);
        Ok(())
    }

    #[test]
    fn kernel_qp_verbs_and_data_path_interface() {
        assert!(run(qp_flow));
    }

    #[test]
    fn kernel_srq_and_limit_event() {
        assert!(run(srq_flow));
    }

    #[test]
    fn memory_regions_and_stag_lookup() {
        assert!(run(mr_flow));
    }

    #[test]
    fn kernel_qp_limits_and_drain() {
        assert!(run(drain_flow));
    }

    #[test]
    fn post_in_error_behind_a_flush_the_full_cq_stopped() {
        assert!(run(post_in_error_behind_a_stopped_flush));
    }

    #[test]
    fn post_send_from_softirq_completion_handler() {
        assert!(run(softirq_post_flow));
    }

    #[test]
    fn completion_handler_runs_on_the_vectors_cpu() {
        assert!(run(comp_vector_flow));
    }
}
