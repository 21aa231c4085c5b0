// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues with the siw user ring ABI, and the SRQ limit event.
//!
//! An SRQ is a ring of `struct siw_rqe`. User space posts by writing an RQE and storing its
//! flags (`SIW_WQE_VALID`) atomically; kernel consumers post through `post_srq_recv`. The
//! RX path consumes RQEs with [`Srq::take_rqe`], which also checks the
//! armed limit: when fewer RQEs than the limit remain posted, the consumer gets
//! `IB_EVENT_SRQ_LIMIT_REACHED` once and must re-arm with `modify_srq(IB_SRQ_LIMIT)`.
//!
//! A QP using an SRQ that enters ERROR does not flush the SRQ's RQEs: they belong to the
//! SRQ and stay available to its other QPs (the QP reports `IB_EVENT_QP_LAST_WQE_REACHED`).

use crate::device::{take_slot, Device, SlotGuard};
use crate::qp::wqe::{decode_rqe, BadRqe, RecvWqe};
use crate::qp::{build_rqe, MAX_SGE};
use crate::sys::bindings as b;
use crate::sys::ibdev::IbDevice;
use crate::sys::obj::IbSrq;
use crate::sys::pr_err_ratelimited;
use crate::sys::ring::Ring;
use crate::sys::udata::UserResponse;
use crate::sys::wr::{PostError, RecvWr, WrList};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{new_spinlock_irq, SpinLockIrq};

/// The deepest SRQ rsiw grants (a power of two).
pub(crate) const MAX_SRQ_WR: u32 = 1 << 16;

use crate::abi::wqe_flags::VALID;

/// Positions and the limit arm, under the SRQ lock.
struct State {
    put: u32,
    get: u32,
    limit: u32,
    armed: bool,
}

/// The driver data of an SRQ.
#[pin_data]
pub(crate) struct Srq {
    user: bool,
    max_sge: u32,
    ring: Ring<b::siw_rqe>,
    #[pin]
    state: SpinLockIrq<State>,
}

#[track_caller]
fn invalid(what: core::fmt::Arguments<'_>) -> Error {
    pr_err_ratelimited!("SRQ: {what}\n");
    EINVAL
}

impl Srq {
    /// `create_srq`: validates `init` (basic SRQ, 1..=[`MAX_SRQ_WR`] WRs, at most
    /// [`MAX_SGE`] SGEs, `srq_limit <= max_wr`), allocates the ring (mapped for a user
    /// caller, who gets the siw `create_srq` response through `udata`) and writes the
    /// granted depth back into `init.attr.max_wr`. A non-zero `srq_limit` arms the limit
    /// event. Returns the SRQ data's initialiser.
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` for other SRQ types; `EINVAL` for attributes beyond the limits;
    /// `ENOMEM` at the `max_srq` limit or without memory; `EFAULT` if the response cannot
    /// be copied. Each logs its cause (rate-limited).
    pub(crate) fn create(
        dev: &IbDevice<Device>,
        init: &mut b::ib_srq_init_attr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<impl PinInit<Self, Error>> {
        if init.srq_type != b::ib_srq_type_IB_SRQT_BASIC {
            pr_err_ratelimited!(
                "create_srq: SRQ type {} is not supported (basic SRQs only)\n",
                init.srq_type
            );
            return Err(EOPNOTSUPP);
        }
        let a = init.attr;
        if a.max_wr == 0 || a.max_wr > MAX_SRQ_WR {
            return Err(invalid(format_args!(
                "max_wr {} outside 1..={MAX_SRQ_WR}",
                a.max_wr
            )));
        }
        if a.max_sge > MAX_SGE {
            return Err(invalid(format_args!(
                "max_sge {} above {MAX_SGE}",
                a.max_sge
            )));
        }
        if a.srq_limit > a.max_wr {
            return Err(invalid(format_args!(
                "srq_limit {} above max_wr {}",
                a.srq_limit, a.max_wr
            )));
        }
        let limit = crate::module_parameters::max_srq.value();
        if !take_slot(&dev.srqs, limit) {
            pr_err_ratelimited!(
                "create_srq: SRQ limit reached ({limit}); see module parameter max_srq\n"
            );
            return Err(ENOMEM);
        }
        let slot = SlotGuard::new(&dev.srqs);
        let n = a.max_wr.next_power_of_two();
        let user = udata.is_some();
        let ring = match udata {
            Some(u) => {
                let (ring, key) = Ring::new_user(u, n, false)?;
                u.write(&b::siw_uresp_create_srq {
                    num_rqe: n,
                    pad: 0,
                    srq_key: key,
                })?;
                ring
            }
            None => Ring::new_kernel(n, false)?,
        };
        init.attr.max_wr = n;
        slot.keep();
        Ok(try_pin_init!(Self {
            user,
            max_sge: a.max_sge,
            ring,
            state <- new_spinlock_irq!(
                State { put: 0, get: 0, limit: a.srq_limit, armed: a.srq_limit > 0 },
                "rsiw_srq"
            ),
        }? Error))
    }

    /// `destroy_srq` (the core guarantees no QP uses it any more): gives back the
    /// `max_srq` unit; the ring goes with the data.
    pub(crate) fn destroy(dev: &IbDevice<Device>, _srq: &IbSrq<Srq>) {
        dev.srqs.fetch_sub(1, Ordering::AcqRel);
    }

    /// `modify_srq` with `IB_SRQ_*` mask `mask`: `IB_SRQ_LIMIT` sets the limit to
    /// `attr.srq_limit` and arms the limit event (0 disarms it).
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` for resizing (`IB_SRQ_MAX_WR`); `EINVAL` for a limit above the SRQ
    /// size. Each logs its cause (rate-limited).
    pub(crate) fn modify(srq: &IbSrq<Srq>, attr: &b::ib_srq_attr, mask: u32) -> Result {
        if mask & b::ib_srq_attr_mask_IB_SRQ_MAX_WR != 0 {
            pr_err_ratelimited!("modify_srq: resizing an SRQ is not supported\n");
            return Err(EOPNOTSUPP);
        }
        if mask & b::ib_srq_attr_mask_IB_SRQ_LIMIT != 0 {
            let mut st = srq.state.lock();
            if attr.srq_limit > srq.ring.size() {
                return Err(invalid(format_args!(
                    "srq_limit {} above the SRQ size {}",
                    attr.srq_limit,
                    srq.ring.size()
                )));
            }
            st.limit = attr.srq_limit;
            st.armed = attr.srq_limit > 0;
        }
        Ok(())
    }

    /// `query_srq`: fills the granted depth, the SGE limit and the current limit into
    /// `attr` (the limit is the value last set, armed or not).
    pub(crate) fn query(srq: &IbSrq<Srq>, attr: &mut b::ib_srq_attr) {
        let st = srq.state.lock();
        attr.max_wr = srq.ring.size();
        attr.max_sge = srq.max_sge;
        attr.srq_limit = st.limit;
    }

    /// `post_srq_recv` (kernel SRQs): copies the WRs into the SRQ in order.
    ///
    /// # Errors
    ///
    /// With the first WR not posted: `EINVAL` for user SRQs (they post through the mapped
    /// ring) and malformed WRs; `ENOMEM` if the SRQ is full.
    pub(crate) fn post<'a>(
        srq: &IbSrq<Srq>,
        wrs: WrList<'a, RecvWr>,
    ) -> Result<(), PostError<'a, RecvWr>> {
        if srq.user {
            let first = wrs.clone().next();
            return Err(PostError::at(
                invalid(format_args!("user SRQs post through the mapped ring")),
                first,
            ));
        }
        let mut st = srq.state.lock();
        for wr in wrs {
            let rqe = build_rqe(wr, srq.max_sge).map_err(|e| {
                PostError::at(
                    invalid(format_args!("bad receive WR ({})", e.to_errno())),
                    Some(wr),
                )
            })?;
            let idx = st.put;
            if srq.ring.flags(idx) != 0 {
                return Err(PostError::at(ENOMEM, Some(wr)));
            }
            srq.ring.write(idx, &rqe);
            srq.ring.set_flags(idx, VALID);
            st.put = idx.wrapping_add(1);
        }
        Ok(())
    }

    /// For the RX path ([`crate::qp::Qp::take_rqe`]): consumes the RQE at the head of the
    /// SRQ and returns a validated copy, or [`BadRqe`] for a malformed user RQE (consumed
    /// too; the RX path completes it in error); `None` if the SRQ is empty. If the limit is
    /// armed and fewer than `srq_limit` RQEs remain posted, reports
    /// `IB_EVENT_SRQ_LIMIT_REACHED` once (after dropping the SRQ lock) and disarms: the
    /// consumer re-arms with `modify_srq(IB_SRQ_LIMIT)`. Call it with no SRQ or CQ lock
    /// held.
    pub(crate) fn take_rqe(srq: &IbSrq<Srq>) -> Option<Result<RecvWqe, BadRqe>> {
        let (wqe, fire) = {
            let mut st = srq.state.lock();
            let idx = st.get;
            if srq.ring.flags(idx) & VALID == 0 {
                return None;
            }
            let wqe = decode_rqe(&srq.ring.read(idx));
            srq.ring.set_flags(idx, 0);
            st.get = idx.wrapping_add(1);
            // Posting fills slots in order, so fewer than `limit` remain iff the slot
            // `limit - 1` after the new head is empty: O(1), like the C siw (a user
            // posting out of order only misleads its own limit event).
            let fire = st.armed
                && st.limit > 0
                && srq.ring.flags(st.get.wrapping_add(st.limit - 1)) & VALID == 0;
            if fire {
                st.armed = false;
            }
            (wqe, fire)
        };
        if fire {
            srq.dispatch_event(b::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED);
        }
        Some(wqe)
    }
}
