// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (RC only): send and receive rings with the siw user ABI, the verbs state
//! machine without connections, flushing, and the posting verbs.
//!
//! States follow the verbs (`IB_QPS_*`) and RFC 5040 §8 / the RDMAC verbs for iWARP:
//! RESET → INIT (RDMAC "Idle") → RTR → RTS, where entering RTS needs an established
//! iWARP connection (the connection manager, a later slice, does that). Work requests may
//! be posted in INIT and RTR (iWARP "Idle": posted, not processed). Any state → ERROR
//! flushes: every posted SQE and RQE completes with `SIW_WC_WR_FLUSH_ERR` in posting order,
//! signalled or not (the verbs always report a WR that completes in error), and its slot is
//! released. ERROR → RESET and INIT/RTR → RESET discard what is left without completions.
//!
//! Locking: `sq_pos` and `rq_pos` (in that order) guard the ring positions; the state
//! changes only with both held, so either lock gives a stable view. CQ locks nest inside.
//! Completion handlers run after all QP and CQ locks are dropped ([`Notify`]). `attrs`
//! (a mutex) serialises `modify_qp` and destroy.

use crate::cq::{Cq, Cqe, Notify};
use crate::device::{take_slot, Device, SlotGuard};
use crate::srq::Srq;
use crate::sys::bindings as b;
use crate::sys::ibdev::IbDevice;
use crate::sys::udata::UserResponse;
use crate::sys::obj::{CqRef, IbQp, PdId, SrqRef};
use crate::sys::ring::{sqe_raddr, sqe_sges, Ring};
use crate::sys::verbs::QpInit;
use crate::sys::wr::{PostError, RecvWr, SendWr, WrList};
use crate::sys::Pod;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, new_spinlock_irq, Mutex, SpinLockIrq};

/// The deepest SQ or RQ rsiw grants (a power of two).
pub(crate) const MAX_QP_WR: u32 = 1 << 14;
/// SGEs per work request (the siw ABI's fixed array).
pub(crate) const MAX_SGE: u32 = b::SIW_MAX_SGE;
/// Inline data per send WQE: it occupies `sge[1..]` (`SIW_MAX_INLINE`).
pub(crate) const MAX_INLINE: u32 = (core::mem::size_of::<b::siw_sge>() as u32) * (MAX_SGE - 1);

const VALID: u16 = b::siw_wqe_flags_SIW_WQE_VALID as u16;
const INLINE: u16 = b::siw_wqe_flags_SIW_WQE_INLINE as u16;
const SIGNALLED: u16 = b::siw_wqe_flags_SIW_WQE_SIGNALLED as u16;
const SOLICITED: u16 = b::siw_wqe_flags_SIW_WQE_SOLICITED as u16;
const READ_FENCE: u16 = b::siw_wqe_flags_SIW_WQE_READ_FENCE as u16;
const FLUSH: u16 = b::siw_wc_status_SIW_WC_WR_FLUSH_ERR as u16;
/// `IB_QP_ATTR_STANDARD_BITS` (`GENMASK(20, 0)`, which bindgen cannot evaluate).
const STANDARD_BITS: u32 = (1 << 21) - 1;

/// The QP states rsiw can be in (SQD/SQE, the iWARP Closing/Terminate states, come with
/// the transport).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum State {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Error = 4,
}

impl State {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            _ => Self::Error,
        }
    }

    fn to_ib(self) -> b::ib_qp_state {
        match self {
            Self::Reset => b::ib_qp_state_IB_QPS_RESET,
            Self::Init => b::ib_qp_state_IB_QPS_INIT,
            Self::Rtr => b::ib_qp_state_IB_QPS_RTR,
            Self::Rts => b::ib_qp_state_IB_QPS_RTS,
            Self::Error => b::ib_qp_state_IB_QPS_ERR,
        }
    }

    fn from_ib(qpn: u32, s: b::ib_qp_state) -> Result<Self> {
        Ok(match s {
            b::ib_qp_state_IB_QPS_RESET => Self::Reset,
            b::ib_qp_state_IB_QPS_INIT => Self::Init,
            b::ib_qp_state_IB_QPS_RTR => Self::Rtr,
            b::ib_qp_state_IB_QPS_RTS => Self::Rts,
            b::ib_qp_state_IB_QPS_ERR => Self::Error,
            _ => {
                if crate::sys::ratelimit() {
                    pr_err!("QP {qpn}: state {s} (SQD/SQE or unknown) cannot be requested on iWARP\n");
                }
                return Err(EINVAL);
            }
        })
    }
}

/// Checks a requested state transition (verbs modify-QP table restricted to iWARP).
fn check_transition(qpn: u32, cur: State, new: State) -> Result {
    use State::*;
    match (cur, new) {
        (_, Error) | (Reset, Init) | (Init, Init) | (Init, Rtr) | (Rtr, Rtr) | (Rts, Rts) => Ok(()),
        (Reset, Reset) | (Init, Reset) | (Rtr, Reset) | (Error, Reset) => Ok(()),
        (_, Rts) => {
            if crate::sys::ratelimit() {
                pr_err!("QP {qpn}: RTS needs an established iWARP connection (rdma_cm connect/accept)\n");
            }
            Err(EINVAL)
        }
        _ => {
            if crate::sys::ratelimit() {
                pr_err!("QP {qpn}: transition {cur:?} -> {new:?} is not allowed\n");
            }
            Err(EINVAL)
        }
    }
}

/// Free-running producer and consumer positions of a ring.
struct Pos {
    put: u32,
    get: u32,
}

/// Attributes set by `modify_qp`.
struct Attrs {
    access: i32,
}

/// The sizes granted at creation.
#[derive(Clone, Copy)]
struct Caps {
    send_sge: u32,
    recv_sge: u32,
    inline: u32,
}

/// The driver data of a QP.
#[pin_data]
pub(crate) struct Qp {
    user: bool,
    #[allow(dead_code, reason = "the placement path (next slice) checks STags against it")]
    pd: PdId,
    sig_all: bool,
    caps: Caps,
    sq: Ring<b::siw_sqe>,
    rq: Option<Ring<b::siw_rqe>>,
    srq: Option<SrqRef<Srq>>,
    scq: CqRef<Cq>,
    rcq: CqRef<Cq>,
    #[pin]
    sq_pos: SpinLockIrq<Pos>,
    #[pin]
    rq_pos: SpinLockIrq<Pos>,
    state: AtomicU8,
    #[pin]
    attrs: Mutex<Attrs>,
    destroying: AtomicBool,
}

#[track_caller]
fn invalid(qpn: u32, what: core::fmt::Arguments<'_>) -> Error {
    if crate::sys::ratelimit() {
        pr_err!("QP {qpn}: {what}\n");
    }
    EINVAL
}

/// Builds a receive WQE from a kernel consumer's WR (QPs and SRQs), at most `max_sge` SGEs.
pub(crate) fn build_rqe(wr: &RecvWr, max_sge: u32) -> Result<b::siw_rqe> {
    let n = u32::try_from(wr.num_sge()).map_err(|_| EINVAL)?;
    if n > max_sge {
        return Err(EINVAL);
    }
    let mut rqe = b::siw_rqe::zeroed();
    rqe.id = wr.wr_id();
    rqe.num_sge = n as u8;
    let mut total = 0u32;
    for (d, s) in rqe.sge.iter_mut().zip(wr.sges()) {
        total = total.checked_add(s.length).ok_or(EINVAL)?;
        *d = b::siw_sge { laddr: s.addr, length: s.length, lkey: s.lkey };
    }
    Ok(rqe)
}

/// Packs `data` (at most `MAX_INLINE` octets) into `sge[1..]` in memory order.
fn pack_inline(sges: &mut [b::siw_sge; MAX_SGE as usize], data: &[u8]) {
    let mut buf = [0u8; MAX_INLINE as usize];
    buf[..data.len()].copy_from_slice(data);
    for (k, chunk) in buf.chunks_exact(16).enumerate() {
        let w = |r: core::ops::Range<usize>| -> [u8; 8] {
            let mut a = [0u8; 8];
            a[..r.len()].copy_from_slice(&chunk[r]);
            a
        };
        let l = w(8..12);
        let k4 = w(12..16);
        sges[k + 1] = b::siw_sge {
            laddr: u64::from_ne_bytes(w(0..8)),
            length: u32::from_ne_bytes([l[0], l[1], l[2], l[3]]),
            lkey: u32::from_ne_bytes([k4[0], k4[1], k4[2], k4[3]]),
        };
    }
}

/// A send WQE as the TX path sees it: a validated kernel copy of one SQ slot.
#[allow(dead_code, reason = "read by the TX path (next slice)")]
pub(crate) struct SendWqe {
    pub(crate) id: u64,
    pub(crate) opcode: u8,
    pub(crate) flags: u16,
    pub(crate) num_sge: u8,
    pub(crate) rkey: u32,
    pub(crate) raddr: u64,
    pub(crate) sge: [b::siw_sge; MAX_SGE as usize],
}

/// Why an SQE was refused.
#[derive(Debug)]
#[allow(dead_code, reason = "reported by the TX path (next slice)")]
pub(crate) enum BadWqe {
    /// Unknown or unsupported opcode (or a kernel-only one from user space).
    Opcode(u8),
    /// More than `SIW_MAX_SGE` SGEs.
    NumSge(u8),
    /// Inline data longer than `SIW_MAX_INLINE`.
    Inline(u32),
}

/// Validates one SQE copy. `kernel` allows the kernel-only opcodes.
#[allow(dead_code, reason = "the TX path (next slice) is its user")]
pub(crate) fn decode_sqe(raw: &b::siw_sqe, kernel: bool) -> Result<SendWqe, BadWqe> {
    let op = u32::from(raw.opcode);
    let ok = matches!(
        op,
        b::siw_opcode_SIW_OP_WRITE
            | b::siw_opcode_SIW_OP_READ
            | b::siw_opcode_SIW_OP_READ_LOCAL_INV
            | b::siw_opcode_SIW_OP_SEND
            | b::siw_opcode_SIW_OP_SEND_REMOTE_INV
    ) || (kernel && matches!(op, b::siw_opcode_SIW_OP_INVAL_STAG | b::siw_opcode_SIW_OP_REG_MR));
    if !ok {
        return Err(BadWqe::Opcode(raw.opcode));
    }
    let sge = sqe_sges(raw);
    if raw.flags & INLINE != 0 {
        if sge[0].length > MAX_INLINE {
            return Err(BadWqe::Inline(sge[0].length));
        }
    } else if u32::from(raw.num_sge) > MAX_SGE {
        return Err(BadWqe::NumSge(raw.num_sge));
    }
    Ok(SendWqe {
        id: raw.id,
        opcode: raw.opcode,
        flags: raw.flags,
        num_sge: raw.num_sge,
        rkey: raw.rkey,
        raddr: sqe_raddr(raw),
        sge,
    })
}

/// The opcode to report for a flushed SQE: its own if it indexes the user library's
/// completion opcode table (`SIW_NUM_OPCODES` entries), `SIW_OP_SEND` for garbage a user
/// wrote (the library would index past its table).
fn flush_opcode(op: u8) -> u8 {
    if u32::from(op) < b::siw_opcode_SIW_NUM_OPCODES {
        op
    } else {
        b::siw_opcode_SIW_OP_SEND as u8
    }
}

impl Qp {
    fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    fn flush_cqe(qp: &IbQp<Qp>, id: u64, opcode: u8) -> Cqe {
        // Error completions fire a solicited-only arm too (verbs: "solicited or in error").
        Cqe { id, opcode, status: FLUSH, bytes: 0, qpn: qp.qpn(), qp: qp.as_raw(), solicited: true, inval_stag: 0 }
    }

    /// Completes every valid SQE from `get` with a flush error (at most one pass over the
    /// ring: a user writing new SQEs meanwhile cannot keep us here).
    fn flush_sq_locked(qp: &IbQp<Qp>, pos: &mut Pos) -> Notify {
        let mut notify = Notify::NONE;
        for _ in 0..qp.sq.size() {
            let idx = pos.get;
            if qp.sq.flags(idx) & VALID == 0 {
                break;
            }
            let sqe = qp.sq.read(idx);
            match Cq::push(&qp.scq, &Self::flush_cqe(qp, sqe.id, flush_opcode(sqe.opcode))) {
                Ok(n) => notify = notify.or(n),
                Err(_) => break,
            }
            qp.sq.set_flags(idx, 0);
            pos.get = idx.wrapping_add(1);
        }
        notify
    }

    fn flush_rq_locked(qp: &IbQp<Qp>, ring: &Ring<b::siw_rqe>, pos: &mut Pos) -> Notify {
        let mut notify = Notify::NONE;
        for _ in 0..ring.size() {
            let idx = pos.get;
            if ring.flags(idx) & VALID == 0 {
                break;
            }
            let rqe = ring.read(idx);
            let op = b::siw_opcode_SIW_OP_RECEIVE as u8;
            match Cq::push(&qp.rcq, &Self::flush_cqe(qp, rqe.id, op)) {
                Ok(n) => notify = notify.or(n),
                Err(_) => break,
            }
            ring.set_flags(idx, 0);
            pos.get = idx.wrapping_add(1);
        }
        notify
    }

    /// Releases every valid slot from `get` without completions (→ RESET).
    fn discard<E: crate::sys::ring::RingElem>(ring: &Ring<E>, pos: &mut Pos) {
        for _ in 0..ring.size() {
            if ring.flags(pos.get) & VALID == 0 {
                break;
            }
            ring.set_flags(pos.get, 0);
            pos.get = pos.get.wrapping_add(1);
        }
    }

    /// Enters `new` (with both position locks) and flushes or discards as it requires.
    fn enter(qp: &IbQp<Qp>, new: State) {
        let (ns, nr) = {
            let mut sq = qp.sq_pos.lock();
            let mut rq = qp.rq_pos.lock();
            qp.state.store(new as u8, Ordering::Release);
            match new {
                State::Error => {
                    let ns = Self::flush_sq_locked(qp, &mut sq);
                    let nr = match &qp.rq {
                        Some(ring) => Self::flush_rq_locked(qp, ring, &mut rq),
                        None => Notify::NONE,
                    };
                    (ns, nr)
                }
                State::Reset => {
                    Self::discard(&qp.sq, &mut sq);
                    if let Some(ring) = &qp.rq {
                        Self::discard(ring, &mut rq);
                    }
                    (Notify::NONE, Notify::NONE)
                }
                _ => (Notify::NONE, Notify::NONE),
            }
        };
        ns.deliver(&qp.scq);
        nr.deliver(&qp.rcq);
    }

    /// `create_qp`.
    pub(crate) fn create(
        dev: &IbDevice<Device>,
        init: QpInit<'_, Device>,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<impl PinInit<Self, Error>> {
        let QpInit { attr, qpn, pd, send_cq, recv_cq, srq } = init;
        let user = udata.is_some();
        if attr.create_flags != 0 {
            if crate::sys::ratelimit() {
                pr_err!("create_qp: create_flags {:#x} are not supported\n", attr.create_flags);
            }
            return Err(EOPNOTSUPP);
        }
        if attr.qp_type != b::ib_qp_type_IB_QPT_RC {
            if crate::sys::ratelimit() {
                pr_err!("create_qp: QP type {} is not supported; iWARP has RC QPs only\n", attr.qp_type);
            }
            return Err(EOPNOTSUPP);
        }
        let cap = attr.cap;
        if cap.max_send_wr == 0 || cap.max_send_wr > MAX_QP_WR {
            return Err(invalid(qpn, format_args!("max_send_wr {} outside 1..={MAX_QP_WR}", cap.max_send_wr)));
        }
        if srq.is_none() && cap.max_recv_wr > MAX_QP_WR {
            return Err(invalid(qpn, format_args!("max_recv_wr {} above {MAX_QP_WR}", cap.max_recv_wr)));
        }
        if srq.is_none() && user && cap.max_recv_wr == 0 {
            return Err(invalid(qpn, format_args!("a user QP without SRQ needs max_recv_wr >= 1")));
        }
        if cap.max_send_sge > MAX_SGE || cap.max_recv_sge > MAX_SGE {
            return Err(invalid(
                qpn,
                format_args!("max_send_sge {} / max_recv_sge {} above {MAX_SGE}", cap.max_send_sge, cap.max_recv_sge),
            ));
        }
        if cap.max_inline_data > MAX_INLINE {
            return Err(invalid(qpn, format_args!("max_inline_data {} above {MAX_INLINE}", cap.max_inline_data)));
        }
        let sig_all = match attr.sq_sig_type {
            b::ib_sig_type_IB_SIGNAL_ALL_WR => true,
            b::ib_sig_type_IB_SIGNAL_REQ_WR => false,
            t => return Err(invalid(qpn, format_args!("sq_sig_type {t} unknown"))),
        };
        let limit = crate::module_parameters::max_qp.value();
        if !take_slot(&dev.qps_count, limit) {
            if crate::sys::ratelimit() {
                pr_err!("create_qp: QP limit reached ({limit}); see module parameter max_qp\n");
            }
            return Err(ENOMEM);
        }
        let slot = SlotGuard::new(&dev.qps_count);
        let num_sqe = cap.max_send_wr.next_power_of_two();
        let num_rqe = if srq.is_some() || cap.max_recv_wr == 0 { 0 } else { cap.max_recv_wr.next_power_of_two() };
        let (sq, rq) = match udata {
            Some(u) => {
                let (sq, sq_key) = Ring::new_user(u, num_sqe, false)?;
                let (rq, rq_key) = if num_rqe > 0 {
                    let (r, k) = Ring::new_user(u, num_rqe, false)?;
                    (Some(r), k)
                } else {
                    // Not mapped (SRQ): the siw library does not map an RQ then, and it
                    // rejects SIW_INVAL_UOBJ_KEY even for QPs with an SRQ.
                    (None, 0)
                };
                let resp = b::siw_uresp_create_qp { qp_id: qpn, num_sqe, num_rqe, pad: 0, sq_key, rq_key };
                u.write(&resp)?;
                (sq, rq)
            }
            None => {
                let sq = Ring::new_kernel(num_sqe, false)?;
                let rq = if num_rqe > 0 { Some(Ring::new_kernel(num_rqe, false)?) } else { None };
                (sq, rq)
            }
        };
        attr.cap.max_send_wr = num_sqe;
        attr.cap.max_recv_wr = num_rqe;
        let caps = Caps { send_sge: cap.max_send_sge, recv_sge: cap.max_recv_sge, inline: cap.max_inline_data };
        slot.keep();
        Ok(try_pin_init!(Self {
            user,
            pd,
            sig_all,
            caps,
            sq,
            rq,
            srq,
            scq: send_cq,
            rcq: recv_cq,
            sq_pos <- new_spinlock_irq!(Pos { put: 0, get: 0 }, "rsiw_qp_sq"),
            rq_pos <- new_spinlock_irq!(Pos { put: 0, get: 0 }, "rsiw_qp_rq"),
            state: AtomicU8::new(State::Reset as u8),
            attrs <- new_mutex!(Attrs { access: 0 }, "rsiw_qp_attrs"),
            destroying: AtomicBool::new(false),
        }? Error))
    }

    /// `destroy_qp`: flushes into the CQs (which outlive the QP), without events.
    pub(crate) fn destroy(dev: &IbDevice<Device>, qp: &IbQp<Qp>) {
        qp.destroying.store(true, Ordering::Release);
        {
            let _attrs = qp.attrs.lock();
            Self::enter(qp, State::Error);
        }
        dev.qps_count.fetch_sub(1, Ordering::AcqRel);
    }

    /// `modify_qp`.
    pub(crate) fn modify(qp: &IbQp<Qp>, attr: &b::ib_qp_attr, mask: u32) -> Result {
        let qpn = qp.qpn();
        if mask & !STANDARD_BITS != 0 {
            if crate::sys::ratelimit() {
                pr_err!("QP {qpn}: modify_qp attribute mask {mask:#x} has unsupported bits\n");
            }
            return Err(EOPNOTSUPP);
        }
        let mut attrs = qp.attrs.lock();
        let cur = qp.state();
        if mask & b::ib_qp_attr_mask_IB_QP_CUR_STATE != 0 && attr.cur_qp_state != cur.to_ib() {
            return Err(invalid(qpn, format_args!("cur_qp_state {} but the QP is {cur:?}", attr.cur_qp_state)));
        }
        let new = if mask & b::ib_qp_attr_mask_IB_QP_STATE != 0 { State::from_ib(qpn, attr.qp_state)? } else { cur };
        check_transition(qpn, cur, new)?;
        if mask & b::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS != 0 {
            attrs.access = attr.qp_access_flags;
        }
        if mask & b::ib_qp_attr_mask_IB_QP_STATE != 0 {
            Self::enter(qp, new);
            if new == State::Error && cur != State::Error && qp.srq.is_some() && !qp.destroying.load(Ordering::Acquire) {
                // The SRQ keeps its WQEs; tell the consumer this QP will take no more.
                qp.dispatch_event(b::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED);
            }
        }
        Ok(())
    }

    /// `query_qp`.
    pub(crate) fn query(dev: &IbDevice<Device>, qp: &IbQp<Qp>, attr: &mut b::ib_qp_attr, init: &mut b::ib_qp_init_attr) {
        let access = qp.attrs.lock().access;
        let state = qp.state().to_ib();
        attr.qp_state = state;
        attr.cur_qp_state = state;
        attr.cap.max_send_wr = qp.sq.size();
        attr.cap.max_recv_wr = qp.rq.as_ref().map_or(0, |r| r.size());
        attr.cap.max_send_sge = qp.caps.send_sge;
        attr.cap.max_recv_sge = qp.caps.recv_sge;
        attr.cap.max_inline_data = qp.caps.inline;
        attr.qp_access_flags = access;
        if let Some(ndev) = dev.netdev() {
            attr.path_mtu = crate::device::ib_mtu(ndev.mtu());
        }
        // No RDMA READ yet: no outbound or inbound read credits.
        attr.max_rd_atomic = 0;
        attr.max_dest_rd_atomic = 0;
        init.cap = attr.cap;
        init.sq_sig_type = if qp.sig_all { b::ib_sig_type_IB_SIGNAL_ALL_WR } else { b::ib_sig_type_IB_SIGNAL_REQ_WR };
    }

    /// Builds an SQE from a kernel consumer's WR. LOCAL_INV and REG_MR need the transport
    /// slice (`EOPNOTSUPP`); iWARP has no immediate data or atomics (`EINVAL`).
    fn build_sqe(&self, qpn: u32, wr: &SendWr) -> Result<b::siw_sqe> {
        let n = u32::try_from(wr.num_sge()).map_err(|_| EINVAL)?;
        if n > self.caps.send_sge {
            return Err(invalid(qpn, format_args!("{n} SGEs, at most {}", self.caps.send_sge)));
        }
        let mut sqe = b::siw_sqe::zeroed();
        sqe.id = wr.wr_id();
        let f = wr.send_flags();
        let mut flags = 0u16;
        if f & b::ib_send_flags_IB_SEND_SIGNALED as u32 != 0 || self.sig_all {
            flags |= SIGNALLED;
        }
        if f & b::ib_send_flags_IB_SEND_FENCE as u32 != 0 {
            flags |= READ_FENCE;
        }
        let op = wr.opcode();
        let (opcode, may_inline) = match op {
            b::ib_wr_opcode_IB_WR_SEND => (b::siw_opcode_SIW_OP_SEND, true),
            b::ib_wr_opcode_IB_WR_SEND_WITH_INV => {
                sqe.rkey = wr.invalidate_rkey();
                (b::siw_opcode_SIW_OP_SEND_REMOTE_INV, true)
            }
            b::ib_wr_opcode_IB_WR_RDMA_WRITE => (b::siw_opcode_SIW_OP_WRITE, true),
            b::ib_wr_opcode_IB_WR_RDMA_READ | b::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV => {
                // An iWARP Read Request carries one sink STag (RFC 5040 §4.4).
                if n != 1 {
                    return Err(invalid(qpn, format_args!("RDMA READ with {n} SGEs; iWARP needs exactly 1")));
                }
                if op == b::ib_wr_opcode_IB_WR_RDMA_READ {
                    (b::siw_opcode_SIW_OP_READ, false)
                } else {
                    (b::siw_opcode_SIW_OP_READ_LOCAL_INV, false)
                }
            }
            b::ib_wr_opcode_IB_WR_LOCAL_INV | b::ib_wr_opcode_IB_WR_REG_MR => {
                if crate::sys::ratelimit() {
                    pr_err!("QP {qpn}: LOCAL_INV/REG_MR work requests are not supported yet\n");
                }
                return Err(EOPNOTSUPP);
            }
            _ => return Err(invalid(qpn, format_args!("opcode {op} is not supported on iWARP"))),
        };
        if f & b::ib_send_flags_IB_SEND_SOLICITED as u32 != 0 && opcode != b::siw_opcode_SIW_OP_WRITE {
            flags |= SOLICITED;
        }
        if let Some((raddr, rkey)) = wr.rdma() {
            sqe.__bindgen_anon_1.raddr = raddr;
            sqe.rkey = rkey;
        }
        let mut sges = [b::siw_sge::zeroed(); MAX_SGE as usize];
        if f & b::ib_send_flags_IB_SEND_INLINE as u32 != 0 && may_inline {
            let mut data = [0u8; MAX_INLINE as usize];
            let len = wr
                .copy_inline(&mut data)
                .map_err(|e| invalid(qpn, format_args!("inline data above {MAX_INLINE} octets ({})", e.to_errno())))?;
            pack_inline(&mut sges, &data[..len]);
            sges[0] = b::siw_sge { laddr: 0, length: len as u32, lkey: 0 };
            sqe.num_sge = u8::from(len > 0);
            flags |= INLINE;
        } else {
            let mut total = 0u32;
            for (d, s) in sges.iter_mut().zip(wr.sges()) {
                total = total
                    .checked_add(s.length)
                    .ok_or_else(|| invalid(qpn, format_args!("message longer than 4 GiB")))?;
                *d = b::siw_sge { laddr: s.addr, length: s.length, lkey: s.lkey };
            }
            sqe.num_sge = n as u8;
        }
        sqe.__bindgen_anon_2.sge = sges;
        sqe.opcode = opcode as u8;
        sqe.flags = flags;
        Ok(sqe)
    }

    /// `post_send`: kernel QPs copy the WRs into the SQ (or complete them with a flush
    /// error in ERROR state); for user QPs it is the doorbell (an empty list).
    pub(crate) fn post_send<'a>(qp: &IbQp<Qp>, wrs: WrList<'a, SendWr>) -> Result<(), PostError<'a, SendWr>> {
        let qpn = qp.qpn();
        if qp.user {
            if !wrs.is_empty() {
                return Err(PostError::at(invalid(qpn, format_args!("user QPs post through the mapped SQ")), None));
            }
            return match qp.state() {
                State::Reset => Err(PostError::at(invalid(qpn, format_args!("post_send in RESET")), None)),
                State::Error => {
                    // Flush what the user posted since the QP entered ERROR.
                    let n = Self::flush_sq_locked(qp, &mut qp.sq_pos.lock());
                    n.deliver(&qp.scq);
                    Ok(())
                }
                // The transmit path (next slice) takes SQEs in RTS; in INIT/RTR they wait.
                _ => Ok(()),
            };
        }
        let mut notify = Notify::NONE;
        let mut res = Ok(());
        {
            let mut pos = qp.sq_pos.lock();
            let state = qp.state();
            for wr in wrs {
                if state == State::Reset {
                    res = Err(PostError::at(invalid(qpn, format_args!("post_send in RESET")), Some(wr)));
                    break;
                }
                let sqe = match qp.build_sqe(qpn, wr) {
                    Ok(s) => s,
                    Err(e) => {
                        res = Err(PostError::at(e, Some(wr)));
                        break;
                    }
                };
                if state == State::Error {
                    match Cq::push(&qp.scq, &Self::flush_cqe(qp, sqe.id, sqe.opcode)) {
                        Ok(n) => notify = notify.or(n),
                        Err(_) => {
                            res = Err(PostError::at(ENOMEM, Some(wr)));
                            break;
                        }
                    }
                    continue;
                }
                let idx = pos.put;
                if qp.sq.flags(idx) != 0 {
                    res = Err(PostError::at(ENOMEM, Some(wr)));
                    break;
                }
                let flags = sqe.flags | VALID;
                qp.sq.write(idx, &b::siw_sqe { flags: 0, ..sqe });
                qp.sq.set_flags(idx, flags);
                pos.put = idx.wrapping_add(1);
            }
        }
        notify.deliver(&qp.scq);
        res
    }

    /// `post_recv` (kernel QPs with their own RQ).
    pub(crate) fn post_recv<'a>(qp: &IbQp<Qp>, wrs: WrList<'a, RecvWr>) -> Result<(), PostError<'a, RecvWr>> {
        let qpn = qp.qpn();
        let first = |e| Err(PostError::at(e, wrs_first(&wrs)));
        if qp.user {
            return first(invalid(qpn, format_args!("user QPs post through the mapped RQ")));
        }
        let Some(ring) = &qp.rq else {
            return first(invalid(qpn, format_args!("post_recv on a QP with an SRQ or without RQ")));
        };
        let mut notify = Notify::NONE;
        let mut res = Ok(());
        {
            let mut pos = qp.rq_pos.lock();
            let state = qp.state();
            for wr in wrs {
                if state == State::Reset {
                    res = Err(PostError::at(invalid(qpn, format_args!("post_recv in RESET")), Some(wr)));
                    break;
                }
                let rqe = match build_rqe(wr, qp.caps.recv_sge) {
                    Ok(r) => r,
                    Err(e) => {
                        res = Err(PostError::at(invalid(qpn, format_args!("bad receive WR ({})", e.to_errno())), Some(wr)));
                        break;
                    }
                };
                if state == State::Error {
                    let op = b::siw_opcode_SIW_OP_RECEIVE as u8;
                    match Cq::push(&qp.rcq, &Self::flush_cqe(qp, rqe.id, op)) {
                        Ok(n) => notify = notify.or(n),
                        Err(_) => {
                            res = Err(PostError::at(ENOMEM, Some(wr)));
                            break;
                        }
                    }
                    continue;
                }
                let idx = pos.put;
                if ring.flags(idx) != 0 {
                    res = Err(PostError::at(ENOMEM, Some(wr)));
                    break;
                }
                ring.write(idx, &rqe);
                ring.set_flags(idx, VALID);
                pos.put = idx.wrapping_add(1);
            }
        }
        notify.deliver(&qp.rcq);
        res
    }

    /// For the TX path (next slice): returns a validated copy of the SQE at the head of
    /// the SQ without consuming it, `None` if the SQ is empty. The slot is read once; the
    /// TX path acts only on the returned copy and releases the slot when it completes the
    /// WQE. A user SQE that fails validation must complete with `SIW_WC_LOC_QP_OP_ERR`
    /// and move the QP to ERROR.
    #[allow(dead_code, reason = "the TX path (next slice) is its user")]
    pub(crate) fn next_sqe(qp: &IbQp<Qp>) -> Option<Result<SendWqe, BadWqe>> {
        let pos = qp.sq_pos.lock();
        if qp.sq.flags(pos.get) & VALID == 0 {
            return None;
        }
        Some(decode_sqe(&qp.sq.read(pos.get), !qp.user))
    }
}

fn wrs_first<'a>(wrs: &WrList<'a, RecvWr>) -> Option<&'a RecvWr> {
    wrs.clone().next()
}

#[kernel::prelude::kunit_tests(rsiw_verbs)]
mod tests {
    use super::*;

    fn sqe(op: u32, flags: u16, num_sge: u8, len0: u32) -> b::siw_sqe {
        let mut s = b::siw_sqe::zeroed();
        s.opcode = op as u8;
        s.flags = flags | VALID;
        s.num_sge = num_sge;
        let mut g = [b::siw_sge::zeroed(); MAX_SGE as usize];
        g[0].length = len0;
        s.__bindgen_anon_2.sge = g;
        s
    }

    #[test]
    fn hostile_user_sqes_are_refused() {
        // What user space may post.
        for op in [
            b::siw_opcode_SIW_OP_WRITE,
            b::siw_opcode_SIW_OP_READ,
            b::siw_opcode_SIW_OP_SEND,
            b::siw_opcode_SIW_OP_SEND_REMOTE_INV,
        ] {
            assert!(decode_sqe(&sqe(op, 0, 1, 8), false).is_ok());
        }
        // Kernel-only, unsupported (atomics, immediate data) and garbage opcodes.
        for op in [
            b::siw_opcode_SIW_OP_INVAL_STAG,
            b::siw_opcode_SIW_OP_REG_MR,
            b::siw_opcode_SIW_OP_FETCH_AND_ADD,
            b::siw_opcode_SIW_OP_SEND_WITH_IMM,
            b::siw_opcode_SIW_OP_RECEIVE,
            b::siw_opcode_SIW_OP_READ_RESPONSE,
            200,
        ] {
            assert!(matches!(decode_sqe(&sqe(op, 0, 1, 8), false), Err(BadWqe::Opcode(_))));
        }
        assert!(decode_sqe(&sqe(b::siw_opcode_SIW_OP_REG_MR, 0, 0, 0), true).is_ok());
        // Too many SGEs, too much inline data; the limits themselves are fine.
        let send = b::siw_opcode_SIW_OP_SEND;
        assert!(matches!(decode_sqe(&sqe(send, 0, 7, 8), false), Err(BadWqe::NumSge(7))));
        assert!(matches!(decode_sqe(&sqe(send, 0, 255, 8), false), Err(BadWqe::NumSge(255))));
        assert!(decode_sqe(&sqe(send, 0, 6, 8), false).is_ok());
        assert!(matches!(
            decode_sqe(&sqe(send, INLINE, 1, MAX_INLINE + 1), false),
            Err(BadWqe::Inline(81))
        ));
        assert!(decode_sqe(&sqe(send, INLINE, 1, MAX_INLINE), false).is_ok());
    }

    #[test]
    fn flushed_garbage_opcodes_stay_in_the_abi_table() {
        assert_eq!(flush_opcode(b::siw_opcode_SIW_OP_WRITE as u8), b::siw_opcode_SIW_OP_WRITE as u8);
        assert_eq!(flush_opcode(b::siw_opcode_SIW_OP_RECEIVE as u8), b::siw_opcode_SIW_OP_RECEIVE as u8);
        assert_eq!(flush_opcode(b::siw_opcode_SIW_OP_READ_RESPONSE as u8), b::siw_opcode_SIW_OP_READ_RESPONSE as u8);
        assert_eq!(flush_opcode(b::siw_opcode_SIW_OP_REG_MR as u8), b::siw_opcode_SIW_OP_REG_MR as u8);
        assert_eq!(flush_opcode(b::siw_opcode_SIW_NUM_OPCODES as u8), b::siw_opcode_SIW_OP_SEND as u8);
        assert_eq!(flush_opcode(99), b::siw_opcode_SIW_OP_SEND as u8);
        assert_eq!(flush_opcode(255), b::siw_opcode_SIW_OP_SEND as u8);
    }

    #[test]
    fn state_transitions() {
        use State::*;
        let ok = [
            (Reset, Init), (Init, Init), (Init, Rtr), (Rtr, Rtr), (Reset, Error), (Init, Error),
            (Rtr, Error), (Error, Error), (Error, Reset), (Init, Reset), (Reset, Reset),
        ];
        for (a, z) in ok {
            assert!(check_transition(0, a, z).is_ok());
        }
        let bad = [(Reset, Rtr), (Reset, Rts), (Init, Rts), (Rtr, Rts), (Rtr, Init), (Error, Init), (Error, Rts)];
        for (a, z) in bad {
            assert!(check_transition(0, a, z).is_err());
        }
    }

    #[test]
    fn inline_data_lands_in_sge_1_onwards() {
        let data: [u8; MAX_INLINE as usize] = core::array::from_fn(|i| i as u8 ^ 0x5a);
        let mut sges = [b::siw_sge::zeroed(); MAX_SGE as usize];
        pack_inline(&mut sges, &data);
        let mut back = [0u8; MAX_INLINE as usize];
        for (k, s) in sges[1..].iter().enumerate() {
            back[k * 16..k * 16 + 8].copy_from_slice(&s.laddr.to_ne_bytes());
            back[k * 16 + 8..k * 16 + 12].copy_from_slice(&s.length.to_ne_bytes());
            back[k * 16 + 12..k * 16 + 16].copy_from_slice(&s.lkey.to_ne_bytes());
        }
        assert_eq!(back, data);
    }
}
