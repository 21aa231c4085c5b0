// SPDX-License-Identifier: GPL-2.0

//! Completion queues with the siw user ring ABI.
//!
//! A CQ is a ring of `struct siw_cqe` followed by a `struct siw_cq_ctrl` word. rsiw is the
//! only producer: [`Cq::push`] writes a CQE's body into the slot at `put`, then stores its
//! flags (`SIW_WQE_VALID`) with release order. The consumer is user space (user CQs: it
//! polls the mapped ring and clears the flags) or [`Cq::poll`] (kernel CQs). A slot whose
//! flags are still valid when rsiw wants to reuse it means the consumer fell behind: the
//! CQ overflows, the consumer gets `IB_EVENT_CQ_ERR` and the completion is lost.
//!
//! Arming: the consumer writes `SIW_NOTIFY_*` flags into the control word (user space with
//! atomic stores, kernel consumers through `req_notify_cq`). A push that matches the arm
//! (any completion for `NEXT_COMPLETION`, solicited ones for `SOLICITED`) disarms the CQ
//! and asks the caller to run the completion handler once it holds no locks.

use crate::device::{take_slot, Device};
use crate::sys::bindings as b;
use crate::sys::ibdev::IbDevice;
use crate::sys::udata::UserResponse;
use crate::sys::obj::IbCq;
use crate::sys::ring::{cqe_inval_stag, cqe_qp, Ring};
use crate::sys::Pod;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{new_spinlock_irq, SpinLockIrq};

/// The largest CQ depth rsiw grants (a power of two; 8 MiB of ring).
pub(crate) const MAX_CQE: u32 = 1 << 18;

const VALID: u16 = b::siw_wqe_flags_SIW_WQE_VALID as u16;
const REM_INVAL: u16 = b::siw_wqe_flags_SIW_WQE_REM_INVAL as u16;

/// Producer and (kernel) consumer positions; free-running, reduced modulo the ring size.
struct Positions {
    put: u32,
    get: u32,
}

/// The driver data of a CQ.
#[pin_data]
pub(crate) struct Cq {
    ring: Ring<b::siw_cqe>,
    #[pin]
    pos: SpinLockIrq<Positions>,
    user: bool,
}

/// One completion to report.
pub(crate) struct Cqe {
    /// The work request's `wr_id`.
    pub(crate) id: u64,
    /// `SIW_OP_*` of the work request.
    pub(crate) opcode: u8,
    /// `SIW_WC_*`.
    pub(crate) status: u16,
    /// Octets transferred.
    pub(crate) bytes: u32,
    /// The QP number (user CQs) ...
    pub(crate) qpn: u32,
    /// ... and the QP (kernel CQs).
    pub(crate) qp: *mut b::ib_qp,
    /// The work request was solicited (a `SOLICITED` arm fires).
    pub(crate) solicited: bool,
    /// The STag a received Send with Invalidate invalidated (kernel CQs), or zero.
    pub(crate) inval_stag: u32,
}

/// A completion handler call that is due; deliver it with no QP or CQ lock held.
#[must_use = "the consumer's completion handler must be called"]
pub(crate) struct Notify(bool);

impl Notify {
    /// Nothing to deliver.
    pub(crate) const NONE: Self = Self(false);

    /// Merges two pending notifications of the same CQ.
    pub(crate) fn or(self, other: Self) -> Self {
        Self(self.0 || other.0)
    }

    /// Calls `cq`'s completion handler if a notification is due.
    pub(crate) fn deliver(self, cq: &IbCq<Cq>) {
        if self.0 {
            cq.call_comp_handler();
        }
    }
}

/// The reason a completion could not be queued.
#[derive(Debug)]
pub(crate) struct Overflow;

fn wc_opcode(op: u8) -> b::ib_wc_opcode {
    match u32::from(op) {
        b::siw_opcode_SIW_OP_WRITE => b::ib_wc_opcode_IB_WC_RDMA_WRITE,
        b::siw_opcode_SIW_OP_READ | b::siw_opcode_SIW_OP_READ_LOCAL_INV => b::ib_wc_opcode_IB_WC_RDMA_READ,
        b::siw_opcode_SIW_OP_COMP_AND_SWAP => b::ib_wc_opcode_IB_WC_COMP_SWAP,
        b::siw_opcode_SIW_OP_FETCH_AND_ADD => b::ib_wc_opcode_IB_WC_FETCH_ADD,
        b::siw_opcode_SIW_OP_INVAL_STAG => b::ib_wc_opcode_IB_WC_LOCAL_INV,
        b::siw_opcode_SIW_OP_REG_MR => b::ib_wc_opcode_IB_WC_REG_MR,
        b::siw_opcode_SIW_OP_RECEIVE => b::ib_wc_opcode_IB_WC_RECV,
        _ => b::ib_wc_opcode_IB_WC_SEND,
    }
}

fn wc_status(st: u16) -> b::ib_wc_status {
    match u32::from(st) {
        b::siw_wc_status_SIW_WC_SUCCESS => b::ib_wc_status_IB_WC_SUCCESS,
        b::siw_wc_status_SIW_WC_LOC_LEN_ERR => b::ib_wc_status_IB_WC_LOC_LEN_ERR,
        b::siw_wc_status_SIW_WC_LOC_PROT_ERR => b::ib_wc_status_IB_WC_LOC_PROT_ERR,
        b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR => b::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
        b::siw_wc_status_SIW_WC_WR_FLUSH_ERR => b::ib_wc_status_IB_WC_WR_FLUSH_ERR,
        b::siw_wc_status_SIW_WC_BAD_RESP_ERR => b::ib_wc_status_IB_WC_BAD_RESP_ERR,
        b::siw_wc_status_SIW_WC_LOC_ACCESS_ERR => b::ib_wc_status_IB_WC_LOC_ACCESS_ERR,
        b::siw_wc_status_SIW_WC_REM_ACCESS_ERR => b::ib_wc_status_IB_WC_REM_ACCESS_ERR,
        b::siw_wc_status_SIW_WC_REM_INV_REQ_ERR => b::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
        _ => b::ib_wc_status_IB_WC_GENERAL_ERR,
    }
}

impl Cq {
    /// `create_cq`.
    pub(crate) fn create(
        dev: &IbDevice<Device>,
        attr: &b::ib_cq_init_attr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Self, Error>)> {
        if attr.flags != 0 {
            if crate::sys::ratelimit() {
                pr_err!("create_cq: flags {:#x} are not supported\n", attr.flags);
            }
            return Err(EOPNOTSUPP);
        }
        if attr.cqe == 0 || attr.cqe > MAX_CQE {
            if crate::sys::ratelimit() {
                pr_err!("create_cq: {} CQEs requested, the limit is 1..={MAX_CQE}\n", attr.cqe);
            }
            return Err(EINVAL);
        }
        let limit = crate::module_parameters::max_cq.value();
        if !take_slot(&dev.cqs, limit) {
            if crate::sys::ratelimit() {
                pr_err!("create_cq: CQ limit reached ({limit}); see module parameter max_cq\n");
            }
            return Err(ENOMEM);
        }
        let slot = crate::device::SlotGuard::new(&dev.cqs);
        let n = attr.cqe.next_power_of_two();
        let user = udata.is_some();
        let ring = match udata {
            Some(u) => {
                let (ring, key) = Ring::new_user(u, n, true)?;
                // The CQ id only labels the CQ in user-space diagnostics.
                let resp = b::siw_uresp_create_cq { cq_id: crate::sys::random_u32(), num_cqe: n, cq_key: key };
                u.write(&resp)?;
                ring
            }
            None => Ring::new_kernel(n, true)?,
        };
        slot.keep();
        Ok((
            n,
            try_pin_init!(Self {
                ring,
                pos <- new_spinlock_irq!(Positions { put: 0, get: 0 }, "rsiw_cq"),
                user,
            }? Error),
        ))
    }

    /// `destroy_cq`.
    pub(crate) fn destroy(dev: &IbDevice<Device>, _cq: &IbCq<Cq>) {
        dev.cqs.fetch_sub(1, Ordering::AcqRel);
    }

    /// Queues a completion. On success returns whether the completion handler is due
    /// (deliver it without locks held). On overflow reports `IB_EVENT_CQ_ERR`.
    pub(crate) fn push(cq: &IbCq<Cq>, c: &Cqe) -> Result<Notify, Overflow> {
        let this: &Cq = cq;
        let mut pos = this.pos.lock();
        let idx = pos.put;
        if this.ring.flags(idx) & VALID != 0 {
            drop(pos);
            if crate::sys::ratelimit() {
                pr_warn!("CQ overflow: the consumer did not reap completions in time\n");
            }
            cq.dispatch_event(b::ib_event_type_IB_EVENT_CQ_ERR);
            return Err(Overflow);
        }
        let mut cqe = b::siw_cqe::zeroed();
        cqe.id = c.id;
        cqe.opcode = c.opcode;
        cqe.status = c.status;
        cqe.bytes = c.bytes;
        let mut flags = VALID;
        if this.user {
            cqe.__bindgen_anon_2.qp_id = u64::from(c.qpn);
        } else {
            cqe.__bindgen_anon_2.base_qp = c.qp;
            if c.inval_stag != 0 {
                cqe.__bindgen_anon_1.inval_stag = c.inval_stag;
                flags |= REM_INVAL;
            }
        }
        this.ring.write(idx, &cqe);
        this.ring.set_flags(idx, flags);
        pos.put = idx.wrapping_add(1);

        let arm = this.ring.ctrl_load();
        let fire = arm & b::siw_notify_flags_SIW_NOTIFY_NEXT_COMPLETION != 0
            || (arm & b::siw_notify_flags_SIW_NOTIFY_SOLICITED != 0 && c.solicited);
        if fire {
            // One-shot: the consumer re-arms for the next notification.
            this.ring.ctrl_store(b::siw_notify_flags_SIW_NOTIFY_NOT);
        }
        Ok(Notify(fire))
    }

    /// `poll_cq` for kernel consumers: converts ring CQEs into `ib_wc`s.
    pub(crate) fn poll(cq: &IbCq<Cq>, wcs: &mut [b::ib_wc]) -> usize {
        let this: &Cq = cq;
        let mut pos = this.pos.lock();
        let mut n = 0;
        for wc in wcs.iter_mut() {
            let idx = pos.get;
            let flags = this.ring.flags(idx);
            if flags & VALID == 0 {
                break;
            }
            let cqe = this.ring.read(idx);
            let mut w = b::ib_wc::zeroed();
            w.__bindgen_anon_1.wr_id = cqe.id;
            w.status = wc_status(cqe.status);
            w.opcode = wc_opcode(cqe.opcode);
            w.byte_len = cqe.bytes;
            w.qp = cqe_qp(&cqe);
            if flags & REM_INVAL != 0 {
                w.ex.invalidate_rkey = cqe_inval_stag(&cqe);
                w.wc_flags = b::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32;
            }
            *wc = w;
            this.ring.set_flags(idx, 0);
            pos.get = idx.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// `req_notify_cq` for kernel consumers (user space arms through the mapped control
    /// word itself).
    pub(crate) fn req_notify(cq: &IbCq<Cq>, flags: u32) -> Result<i32> {
        let this: &Cq = cq;
        let arm = if flags & b::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == b::ib_cq_notify_flags_IB_CQ_SOLICITED
        {
            b::siw_notify_flags_SIW_NOTIFY_SOLICITED
        } else {
            b::siw_notify_flags_SIW_NOTIFY_SOLICITED | b::siw_notify_flags_SIW_NOTIFY_NEXT_COMPLETION
        };
        // The producer reads the arm under the position lock: taking it orders this arm
        // against a concurrent push (no lost wake-up between arming and checking).
        let pos = this.pos.lock();
        this.ring.ctrl_store(arm);
        if flags & b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0
            && this.ring.flags(pos.get) & VALID != 0
        {
            return Ok(1);
        }
        Ok(0)
    }
}
