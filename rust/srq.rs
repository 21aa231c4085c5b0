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

use crate::abi::{CreateSrqResp, Rqe};
use crate::device::Device;
use crate::limits::Object;
use crate::limits::MAX_SGE;
use crate::logtag::Tag;
use crate::sys::ibdev::{IbDevice, SrqAttr, SrqModify, SrqOps};
use crate::sys::mem::ring::{Ring, Tail};
use crate::sys::obj::IbSrq;
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::UserResponse;
use crate::sys::wr::{PostError, RecvWr, WrList};
use crate::wqe::build_rqe;
use crate::wqe::{decode_rqe, BadRqe, RecvWqe};
use kernel::prelude::*;
use kernel::sync::{new_spinlock_irq, SpinLockIrq};

use crate::limits::MAX_SRQ_WR;

use crate::abi::wqe_flags::VALID;

/// Positions and the limit arm, under the SRQ lock.
struct Posting {
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
    ring: Ring<Rqe>,
    #[pin]
    posting: SpinLockIrq<Posting>,
}

/// Logs `what` (rate-limited) for an SRQ of the device whose name `dev_name` writes (as
/// [`IbDevice::name_into`]) and returns `EINVAL`.
#[track_caller]
fn invalid(dev_name: impl FnOnce(&mut [u8]) -> usize, what: core::fmt::Arguments<'_>) -> Error {
    pr_err_ratelimited!("{} srq: {what}\n", Tag::with_name(dev_name, None));
    EINVAL
}

#[vtable]
impl SrqOps<Device> for Srq {
    /// `create_srq`: validates `attr` (1..=[`MAX_SRQ_WR`] WRs, at most [`MAX_SGE`] SGEs, a
    /// limit up to `max_wr`), allocates the ring (mapped for a user caller, who gets the
    /// siw `create_srq` response through `udata`). A non-zero limit arms the limit event.
    /// Returns the granted depth (the next power of two) and the SRQ data's initialiser.
    ///
    /// # Errors
    ///
    /// `EINVAL` for attributes beyond the limits;
    /// `ENOMEM` at the `max_srq` limit or without memory; `EFAULT` if the response cannot
    /// be copied. Each logs its cause (rate-limited).
    fn create(
        dev: &IbDevice<Device>,
        attr: &SrqAttr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Self, Error>)> {
        let a = *attr;
        if a.max_wr == 0 || a.max_wr > MAX_SRQ_WR {
            return Err(invalid(
                |b| dev.name_into(b),
                format_args!("max_wr {} outside 1..={MAX_SRQ_WR}", a.max_wr),
            ));
        }
        if a.max_sge > MAX_SGE {
            return Err(invalid(
                |b| dev.name_into(b),
                format_args!("max_sge {} above {MAX_SGE}", a.max_sge),
            ));
        }
        if a.limit > a.max_wr {
            return Err(invalid(
                |b| dev.name_into(b),
                format_args!("srq_limit {} above max_wr {}", a.limit, a.max_wr),
            ));
        }
        let slot = dev.counts.take(Object::Srq, dev)?;
        let n = a.max_wr.next_power_of_two();
        let user = udata.is_some();
        let ring = match udata {
            Some(u) => {
                let (ring, key) = Ring::new_user(u, n, Tail::None)?;
                u.write(&CreateSrqResp {
                    num_rqe: n,
                    pad: 0,
                    srq_key: key,
                })?;
                ring
            }
            None => Ring::new_kernel(n, Tail::None)?,
        };
        slot.keep();
        Ok((
            n,
            try_pin_init!(Self {
            user,
            max_sge: a.max_sge,
            ring,
            posting <- new_spinlock_irq!(
                Posting { put: 0, get: 0, limit: a.limit, armed: a.limit > 0 },
                "rsiw_srq"
            ),
        }? Error),
        ))
    }

    /// `destroy_srq` (the core guarantees no QP uses it any more): gives back the
    /// `max_srq` unit; the ring goes with the data.
    fn destroy(dev: &IbDevice<Device>, _srq: &IbSrq<Srq>) {
        dev.counts.give_back(Object::Srq);
    }

    /// `modify_srq`: a new limit (`IB_SRQ_LIMIT`) is set and arms the limit event (0
    /// disarms it).
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` for resizing (`IB_SRQ_MAX_WR`); `EINVAL` for a limit above the SRQ
    /// size. Each logs its cause (rate-limited).
    fn modify(srq: &IbSrq<Srq>, change: &SrqModify) -> Result {
        if change.max_wr.is_some() {
            pr_err_ratelimited!(
                "{} srq: resizing an SRQ is not supported\n",
                Tag::with_name(|b| srq.device_name_into(b), None)
            );
            return Err(EOPNOTSUPP);
        }
        if let Some(limit) = change.limit {
            let mut st = srq.posting.lock();
            if limit > srq.ring.size() {
                return Err(invalid(
                    |b| srq.device_name_into(b),
                    format_args!("srq_limit {limit} above the SRQ size {}", srq.ring.size()),
                ));
            }
            st.limit = limit;
            st.armed = limit > 0;
        }
        Ok(())
    }

    /// `query_srq`: the granted depth, the SGE limit and the current limit (the value last
    /// set, armed or not).
    fn query(srq: &IbSrq<Srq>) -> SrqAttr {
        let st = srq.posting.lock();
        SrqAttr {
            max_wr: srq.ring.size(),
            max_sge: srq.max_sge,
            limit: st.limit,
        }
    }

    /// `post_srq_recv` (kernel SRQs): copies the WRs into the SRQ in order.
    ///
    /// # Errors
    ///
    /// With the first WR not posted: `EINVAL` for user SRQs (they post through the mapped
    /// ring) and malformed WRs; `ENOMEM` if the SRQ is full.
    fn post<'a>(srq: &IbSrq<Srq>, wrs: WrList<'a, RecvWr>) -> Result<(), PostError<'a, RecvWr>> {
        if srq.user {
            let first = wrs.clone().next();
            return Err(PostError::at(
                invalid(
                    |b| srq.device_name_into(b),
                    format_args!("user SRQs post through the mapped ring"),
                ),
                first,
            ));
        }
        let mut st = srq.posting.lock();
        for wr in wrs {
            let rqe = build_rqe(wr, srq.max_sge).map_err(|e| {
                PostError::at(
                    invalid(
                        |b| srq.device_name_into(b),
                        format_args!("bad receive WR ({})", e.to_errno()),
                    ),
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
}

impl Srq {
    /// For the RX path ([`crate::qp::Qp::take_rqe`]): consumes the RQE at the head of the
    /// SRQ and returns a validated copy, or [`BadRqe`] for a malformed user RQE (consumed
    /// too; the RX path completes it in error); `None` if the SRQ is empty. If the limit is
    /// armed and fewer than `srq_limit` RQEs remain posted, reports
    /// `IB_EVENT_SRQ_LIMIT_REACHED` once (after dropping the SRQ lock) and disarms: the
    /// consumer re-arms with `modify_srq(IB_SRQ_LIMIT)`. Call it with no SRQ or CQ lock
    /// held.
    pub(crate) fn take_rqe(srq: &IbSrq<Srq>) -> Option<Result<RecvWqe, BadRqe>> {
        let (wqe, fire) = {
            let mut st = srq.posting.lock();
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
            srq.dispatch_limit_reached();
        }
        Some(wqe)
    }
}
