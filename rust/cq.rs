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

use crate::abi::{notify, CreateCqResp, RingCqe};
use crate::abi::{WcStatus, WrOpcode};
use crate::device::Device;
use crate::limits::Object;
use crate::logtag::Tag;
use crate::sys::bindings as b;
use crate::sys::ibdev::{Completion, CqAttr, CqNotify, CqOps, IbDevice, WcSlot};
use crate::sys::mem::ring::{cqe_inval_stag, cqe_qp, Ring, Tail};
use crate::sys::obj::IbCq;
use crate::sys::udata::UserResponse;
use crate::sys::Pod;
use crate::sys::{pr_err_ratelimited, pr_warn_ratelimited};
use kernel::prelude::*;
use kernel::sync::{new_spinlock_irq, SpinLockIrq};

use crate::limits::MAX_CQE;

use crate::abi::wqe_flags::{REM_INVAL, VALID};

/// Producer and (kernel) consumer positions; free-running, reduced modulo the ring size.
struct Positions {
    put: u32,
    get: u32,
}

/// The driver data of a CQ.
#[pin_data]
pub(crate) struct Cq {
    ring: Ring<RingCqe>,
    #[pin]
    pos: SpinLockIrq<Positions>,
    user: bool,
}

/// One completion to report.
pub(crate) struct Cqe {
    /// The work request's `wr_id`.
    pub(crate) id: u64,
    /// The work request's opcode.
    pub(crate) opcode: WrOpcode,
    /// How it completed.
    pub(crate) status: WcStatus,
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

/// Completion handler calls and CQ events that are due; deliver them with no QP, SRQ or
/// CQ lock held ([`Notify::deliver`]).
#[must_use = "the consumer's completion handler must be called"]
pub(crate) struct Notify {
    /// The consumer's completion handler is due (the CQ was armed for this completion).
    comp: bool,
    /// The CQ overflowed: `IB_EVENT_CQ_ERR` is due.
    overflow: bool,
}

impl Notify {
    /// Nothing to deliver.
    pub(crate) const NONE: Self = Self {
        comp: false,
        overflow: false,
    };

    /// Merges two pending notifications of the same CQ.
    pub(crate) fn or(self, other: Self) -> Self {
        Self {
            comp: self.comp || other.comp,
            overflow: self.overflow || other.overflow,
        }
    }

    /// Reports an overflow of `cq` (`IB_EVENT_CQ_ERR`, with a rate-limited message) and
    /// calls its completion handler, as due: a kernel CQ's on the CPU of its completion
    /// vector ([`IbCq::call_comp_handler`]), a user CQ's at once.
    pub(crate) fn deliver(self, cq: &IbCq<Cq>) {
        if self.overflow {
            pr_warn_ratelimited!(
                "{}: CQ overflow: the consumer did not reap completions in time\n",
                Tag::with_name(|b| cq.device_name_into(b), None)
            );
            cq.dispatch_error();
        }
        if self.comp {
            let this: &Cq = cq;
            if this.user {
                // The RDMA core's handler for user CQs (`ib_uverbs_comp_handler`) queues
                // an event and wakes its reader, which any CPU may do: a hop to the
                // vector's CPU would add a work item and a context switch to every event.
                cq.run_comp_handler();
            } else {
                cq.call_comp_handler();
            }
        }
    }
}

/// The CQ was full: the completion was not queued. Turn it into a [`Notify`] to report it
/// to the consumer.
#[derive(Debug)]
pub(crate) struct Overflow;

impl From<Overflow> for Notify {
    fn from(_: Overflow) -> Self {
        Self {
            comp: false,
            overflow: true,
        }
    }
}

impl CqOps<Device> for Cq {
    /// `create_cq`: validates `attr` (no flags, 1..=[`MAX_CQE`] entries), allocates the ring
    /// of the next power of two entries plus the control word (mapped for a user caller,
    /// who gets the siw `create_cq` response through `udata`). Returns the granted depth
    /// and the CQ data's initialiser.
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` for flags; `EINVAL` for a depth beyond the limits; `ENOMEM` at the
    /// `max_cq` limit or without memory; `EFAULT` if the response cannot be copied. Each
    /// logs its cause (rate-limited).
    fn create(
        dev: &IbDevice<Device>,
        attr: &CqAttr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Self, Error>)> {
        if attr.flags != 0 {
            pr_err_ratelimited!(
                "{}: create_cq: flags {:#x} are not supported\n",
                Tag::new(dev, None, None),
                attr.flags
            );
            return Err(EOPNOTSUPP);
        }
        if attr.cqe == 0 || attr.cqe > MAX_CQE {
            pr_err_ratelimited!(
                "{}: create_cq: {} CQEs requested, the limit is 1..={MAX_CQE}\n",
                Tag::new(dev, None, None),
                attr.cqe
            );
            return Err(EINVAL);
        }
        let slot = dev.counts.take(Object::Cq, dev)?;
        let n = attr.cqe.next_power_of_two();
        let user = udata.is_some();
        let ring = match udata {
            Some(u) => {
                let (ring, key) = Ring::new_user(u, n, Tail::CqCtrl)?;
                // The CQ id only labels the CQ in user-space diagnostics.
                let resp = CreateCqResp {
                    cq_id: crate::sys::random_u32(),
                    num_cqe: n,
                    cq_key: key,
                };
                u.write(&resp)?;
                ring
            }
            None => Ring::new_kernel(n, Tail::CqCtrl)?,
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

    /// `destroy_cq` (the core guarantees no QP uses it any more): gives back the `max_cq`
    /// unit; the ring goes with the data.
    fn destroy(dev: &IbDevice<Device>, _cq: &IbCq<Cq>) {
        dev.counts.give_back(Object::Cq);
    }

    /// `poll_cq` of a kernel CQ: copies up to `wcs.len()` valid CQEs, oldest first, into
    /// `wcs` as `ib_wc`s (status, opcode, length, QP, invalidated STag) and releases
    /// their slots. Returns how many it filled. User CQs never get here: the core leaves
    /// uverbs' `POLL_CQ` command off for rsiw (`IbDevice::new`), so a CQE user space can
    /// write never becomes the `ib_wc.qp` the core dereferences.
    fn poll(cq: &IbCq<Cq>, wcs: &mut [WcSlot]) -> usize {
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
            // A kernel CQ's entries are rsiw's own, so every value is one the ABI defines.
            wc.fill(&Completion {
                wr_id: cqe.id,
                status: WcStatus::from_raw(cqe.status)
                    .unwrap_or(WcStatus::GeneralErr)
                    .ib(),
                opcode: WrOpcode::from_raw(cqe.opcode)
                    .unwrap_or(WrOpcode::Send)
                    .wc_opcode(),
                byte_len: cqe.bytes,
                qp: cqe_qp(&cqe),
                invalidated: (flags & REM_INVAL != 0).then(|| cqe_inval_stag(&cqe)),
            });
            this.ring.set_flags(idx, 0);
            pos.get = idx.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// `req_notify_cq` for kernel consumers (user space arms through the mapped control
    /// word itself): `IB_CQ_SOLICITED` arms for the next solicited or failed completion,
    /// `IB_CQ_NEXT_COMP` for the next one; the arm is one-shot. Returns 1 with
    /// `IB_CQ_REPORT_MISSED_EVENTS` if completions are waiting already (poll again), else
    /// 0. Never fails.
    fn req_notify(cq: &IbCq<Cq>, notify: CqNotify, report_missed: bool) -> Result<i32> {
        let this: &Cq = cq;
        let arm = match notify {
            CqNotify::Solicited => notify::SOLICITED,
            CqNotify::NextComp => notify::SOLICITED | notify::NEXT_COMPLETION,
        };
        // The producer reads the arm under the position lock: taking it orders this arm
        // against a concurrent push (no lost wake-up between arming and checking).
        let pos = this.pos.lock();
        this.ring.ctrl_store(arm);
        if report_missed && this.ring.flags(pos.get) & VALID != 0 {
            return Ok(1);
        }
        Ok(0)
    }
}

impl Cq {
    /// Queues completion `c` into the next slot and, if the CQ is armed for it, disarms
    /// it. Any context; may be called with QP or SRQ locks held (the CQ lock nests inside
    /// them).
    ///
    /// Returns the [`Notify`] to deliver once no lock is held.
    ///
    /// # Errors
    ///
    /// [`Overflow`] if the slot is still owned by the consumer (the completion is lost;
    /// deliver `Notify::from(Overflow)` to report it).
    pub(crate) fn push(cq: &IbCq<Cq>, c: &Cqe) -> Result<Notify, Overflow> {
        let this: &Cq = cq;
        let mut pos = this.pos.lock();
        let idx = pos.put;
        if this.ring.flags(idx) & VALID != 0 {
            return Err(Overflow);
        }
        let mut cqe = RingCqe::zeroed();
        cqe.id = c.id;
        cqe.opcode = c.opcode.raw();
        cqe.status = c.status.raw();
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
        // Fenced: a user consumer arms (a store) and then polls (a load); the arm read
        // below must not pass this CQE's publication, or both could miss the other.
        this.ring.set_flags_fenced(idx, flags);
        pos.put = idx.wrapping_add(1);

        let arm = this.ring.ctrl_load();
        let fire =
            arm & notify::NEXT_COMPLETION != 0 || (arm & notify::SOLICITED != 0 && c.solicited);
        if fire {
            // One-shot: the consumer re-arms for the next notification.
            this.ring.ctrl_store(notify::NOT);
        }
        Ok(Notify {
            comp: fire,
            overflow: false,
        })
    }
}
