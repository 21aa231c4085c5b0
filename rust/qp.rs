// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (RC only): send and receive rings with the siw user ABI.
//!
//! The concepts live in submodules:
//! - this file: the QP object, its creation, destruction and query;
//! - [`state`]: the verbs state machine, flushing, and the setters of the connection
//!   manager;
//! - [`post`]: the posting verbs of kernel consumers and the user doorbell;
//! - [`wqe`]: validated kernel copies of ring slots and the interface of the TX and RX
//!   paths (take the next WQE, complete it into a CQ).
//!
//! Locking: `sq_pos` and `rq_pos` (in that order) guard the ring positions; the state
//! changes only with both held, so either lock gives a stable view. CQ and SRQ locks nest
//! inside. Completion handlers and asynchronous events run after all QP, SRQ and CQ locks
//! are dropped ([`crate::cq::Notify`]). `attrs` (a mutex) serialises `modify_qp` and
//! destroy. `conn` (a spinlock that disables interrupts, innermost) holds the connection
//! of a connected QP: kernel consumers post from any context, softirq completion handlers
//! included, and every post looks at it. A reference taken out of the slot is dropped
//! after the slot's lock. The connection's own mutex is never taken with a QP lock held.

mod post;
pub(crate) mod state;
mod tests;
pub(crate) mod wqe;

use crate::abi::{CreateQpResp, Rqe, Sqe};
use crate::conn::Conn;
use crate::cq::Cq;
use crate::device::Device;
use crate::limits::Object;
use crate::logtag::Tag;
use crate::srq::Srq;
use crate::sys::ibdev::{IbDevice, QpAttrs, QpCap, QpInit, QpModify, QpOps, ResAttrs};
use crate::sys::mem::ring::{Ring, Tail};
use crate::sys::obj::{IbCq, IbQp, IbSrq, PdId};
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::UserResponse;
use crate::sys::wr::{PostError, RecvWr, SendWr, WrList};
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, new_spinlock_irq, Arc, Mutex, SpinLockIrq};
use state::State;

use crate::limits::{MAX_INLINE, MAX_QP_WR, MAX_SGE};

pub(crate) use crate::abi::wqe_flags::{INLINE, READ_FENCE, SIGNALLED, SOLICITED, VALID};

/// Free-running producer and consumer positions of a ring.
struct Pos {
    put: u32,
    get: u32,
}

/// Attributes set by `modify_qp`.
struct Attrs {
    access: u32,
}

/// The sizes granted at creation.
#[derive(Clone, Copy)]
struct Caps {
    send_sge: u8,
    recv_sge: u8,
    inline: u8,
}

// The granted sizes fit the fields ([`check_caps`] bounds them; `MAX_SGE < MAX_INLINE`).
const _: () = assert!(MAX_INLINE <= u8::MAX as u32);

impl Caps {
    /// The sizes `cap` asks for, which [`check_caps`] accepted.
    fn of(cap: &QpCap) -> Result<Self> {
        let narrow = |v: u32| u8::try_from(v).map_err(|_| EINVAL);
        Ok(Self {
            send_sge: narrow(cap.max_send_sge)?,
            recv_sge: narrow(cap.max_recv_sge)?,
            inline: narrow(cap.max_inline_data)?,
        })
    }

    /// SGEs per send WQE.
    fn send_sge(self) -> u32 {
        self.send_sge.into()
    }

    /// SGEs per receive WQE.
    fn recv_sge(self) -> u32 {
        self.recv_sge.into()
    }

    /// Octets of inline data per send WQE.
    fn inline(self) -> u32 {
        self.inline.into()
    }
}

/// The driver data of a QP. After the core's `ib_qp` in an [`IbQp`], it makes a 512-octet
/// object with Debian's kernel configuration, the size of a `kmalloc-512` slab object: the
/// CQs and the SRQ are not copied here but read from the `ib_qp` ([`IbQp::scq`]), and the
/// granted sizes take an octet each. `make bench`'s kernel memory per QP shows a change.
#[pin_data]
pub(crate) struct Qp {
    user: bool,
    pd: PdId,
    sig_all: bool,
    caps: Caps,
    sq: Ring<Sqe>,
    /// The RQ, unless the QP takes its receive WQEs from an SRQ ([`IbQp::srq`]).
    rq: Option<Ring<Rqe>>,
    #[pin]
    sq_pos: SpinLockIrq<Pos>,
    #[pin]
    rq_pos: SpinLockIrq<Pos>,
    state: AtomicU8,
    #[pin]
    attrs: Mutex<Attrs>,
    destroying: AtomicBool,
    /// Whether the device's RQ sweep lists the QP ([`Qp::sweep_late_rqes`]): set by the
    /// one who lists it, so that it is listed once at most.
    sweep_listed: AtomicBool,
    /// The connection while the QP is connected (set by the CM, cleared when it closes).
    #[pin]
    conn: SpinLockIrq<Option<Arc<Conn>>>,
}

impl IbQp<Qp> {
    /// The CQ of the QP's send completions.
    pub(crate) fn scq(&self) -> &IbCq<Cq> {
        self.send_cq::<Device>()
    }

    /// The CQ of the QP's receive completions.
    pub(crate) fn rcq(&self) -> &IbCq<Cq> {
        self.recv_cq::<Device>()
    }

    /// The SRQ the QP takes its receive WQEs from, if any.
    pub(crate) fn shared_rq(&self) -> Option<&IbSrq<Srq>> {
        self.srq::<Device>()
    }
}

/// The QP a verb's error message is about, named by its device and number ("rsiw0 qp
/// 17", as `rdma res show qp` lists it).
#[derive(Clone, Copy)]
enum Who<'a> {
    /// A QP that exists.
    Qp(&'a IbQp<Qp>),
    /// A QP being created: its device and number.
    Creating(&'a IbDevice<Device>, u32),
}

impl Who<'_> {
    fn tag(self) -> Tag {
        match self {
            Who::Qp(qp) => Tag::with_name(|b| qp.device_name_into(b), Some(qp.qpn())),
            Who::Creating(dev, qpn) => Tag::new(dev, Some(qpn), None),
        }
    }
}

/// Logs `what` (rate-limited) for the QP `who` names and returns `EINVAL`.
#[track_caller]
fn invalid(who: Who<'_>, what: core::fmt::Arguments<'_>) -> Error {
    pr_err_ratelimited!("{}: {what}\n", who.tag());
    EINVAL
}

/// The SQ and, without SRQ, the RQ of a QP.
type Rings = (Ring<Sqe>, Option<Ring<Rqe>>);

/// Checks the capabilities `cap` asked for the QP `who` names against [`MAX_QP_WR`], [`MAX_SGE`]
/// and [`MAX_INLINE`]. The RQ depth counts only without SRQ (`srq` false); a user QP
/// (`user`) without SRQ needs an RQ.
///
/// # Errors
///
/// `EINVAL` for caps beyond the limits or a user QP without RQ and SRQ.
fn check_caps(who: Who<'_>, cap: &QpCap, srq: bool, user: bool) -> Result {
    if cap.max_send_wr == 0 || cap.max_send_wr > MAX_QP_WR {
        return Err(invalid(
            who,
            format_args!("max_send_wr {} outside 1..={MAX_QP_WR}", cap.max_send_wr),
        ));
    }
    if !srq && cap.max_recv_wr > MAX_QP_WR {
        return Err(invalid(
            who,
            format_args!("max_recv_wr {} above {MAX_QP_WR}", cap.max_recv_wr),
        ));
    }
    if !srq && user && cap.max_recv_wr == 0 {
        return Err(invalid(
            who,
            format_args!("a user QP without SRQ needs max_recv_wr >= 1"),
        ));
    }
    if cap.max_send_sge > MAX_SGE || cap.max_recv_sge > MAX_SGE {
        return Err(invalid(
            who,
            format_args!(
                "max_send_sge {} / max_recv_sge {} above {MAX_SGE}",
                cap.max_send_sge, cap.max_recv_sge
            ),
        ));
    }
    if cap.max_inline_data > MAX_INLINE {
        return Err(invalid(
            who,
            format_args!("max_inline_data {} above {MAX_INLINE}", cap.max_inline_data),
        ));
    }
    Ok(())
}

/// Allocates the rings of user QP `qpn` (`num_rqe` zero: no RQ) for mapping, and writes
/// the siw `create_qp` response with their keys to `u`.
///
/// # Errors
///
/// `ENOMEM`; `EFAULT` if the response cannot be copied.
fn user_rings(u: &mut UserResponse<'_>, qpn: u32, num_sqe: u32, num_rqe: u32) -> Result<Rings> {
    let (sq, sq_key) = Ring::new_user(u, num_sqe, Tail::None)?;
    let (rq, rq_key) = if num_rqe > 0 {
        let (r, k) = Ring::new_user(u, num_rqe, Tail::None)?;
        (Some(r), k)
    } else {
        // Not mapped (SRQ): the siw library does not map an RQ then, and it rejects
        // SIW_INVAL_UOBJ_KEY even for QPs with an SRQ.
        (None, 0)
    };
    let resp = CreateQpResp {
        qp_id: qpn,
        num_sqe,
        num_rqe,
        pad: 0,
        sq_key,
        rq_key,
    };
    u.write(&resp)?;
    Ok((sq, rq))
}

/// Allocates the rings of a kernel QP (`num_rqe` zero: no RQ).
///
/// # Errors
///
/// `ENOMEM`.
fn kernel_rings(num_sqe: u32, num_rqe: u32) -> Result<Rings> {
    let sq = Ring::new_kernel(num_sqe, Tail::None)?;
    let rq = if num_rqe > 0 {
        Some(Ring::new_kernel(num_rqe, Tail::None)?)
    } else {
        None
    };
    Ok((sq, rq))
}

impl Qp {
    /// The protection domain the QP belongs to: STags used on it must belong to the same
    /// one ([`crate::stag::StagTable::lookup`]).
    pub(crate) fn pd(&self) -> PdId {
        self.pd
    }

    /// Makes `conn` the QP's connection (the CM, before the QP enters RTS).
    ///
    /// # Errors
    ///
    /// `EINVAL` if the QP is being destroyed or has a connection already.
    pub(crate) fn attach_conn(qp: &IbQp<Qp>, conn: Arc<Conn>) -> Result {
        let mut slot = qp.conn.lock();
        // Checked under the slot lock: destroy sets the flag before emptying the slot.
        if qp.destroying.load(Ordering::Acquire) || slot.is_some() {
            return Err(invalid(
                Who::Qp(qp),
                format_args!("QP is being destroyed or connected already"),
            ));
        }
        *slot = Some(conn);
        Ok(())
    }

    /// Forgets the QP's connection (the connection, when it closes).
    pub(crate) fn detach_conn(qp: &IbQp<Qp>) {
        // The guard ends with this statement: the connection is dropped after the lock.
        let conn = qp.conn.lock().take();
        drop(conn);
    }

    /// The QP's connection, if connected.
    pub(crate) fn conn(qp: &IbQp<Qp>) -> Option<Arc<Conn>> {
        qp.conn.lock().clone()
    }
}

#[vtable]
impl QpOps<Device> for Qp {
    /// `create_qp`: validates the consumer's attributes in `init` (RC only, caps within
    /// [`MAX_QP_WR`], [`MAX_SGE`], [`MAX_INLINE`]), allocates the SQ and, without SRQ, the
    /// RQ (mapped for a user caller, who gets the siw `create_qp` response through `udata`)
    /// and writes the granted depths back into `init.attr.cap`. Returns the QP data's
    /// initialiser; the QP starts in RESET.
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` for non-RC types and create flags; `EINVAL` for caps beyond the limits
    /// or a user QP without RQ and SRQ; `ENOMEM` at the `max_qp` limit or without memory;
    /// `EFAULT` if the response cannot be copied.
    fn create(
        dev: &IbDevice<Device>,
        init: QpInit,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(QpCap, impl PinInit<Self, Error>)> {
        let QpInit {
            cap,
            sig_all,
            qpn,
            pd,
            srq,
        } = init;
        let user = udata.is_some();
        check_caps(Who::Creating(dev, qpn), &cap, srq, user)?;
        let caps = Caps::of(&cap)?;
        let slot = dev.counts.take(Object::Qp, dev)?;
        let num_sqe = cap.max_send_wr.next_power_of_two();
        let num_rqe = if srq || cap.max_recv_wr == 0 {
            0
        } else {
            cap.max_recv_wr.next_power_of_two()
        };
        let (sq, rq) = match udata {
            Some(u) => user_rings(u, qpn, num_sqe, num_rqe)?,
            None => kernel_rings(num_sqe, num_rqe)?,
        };
        let granted = QpCap {
            max_send_wr: num_sqe,
            max_recv_wr: num_rqe,
            ..cap
        };
        slot.keep();
        Ok((
            granted,
            try_pin_init!(Self {
            user,
            pd,
            sig_all,
            caps,
            sq,
            rq,
            sq_pos <- new_spinlock_irq!(Pos { put: 0, get: 0 }, "rsiw_qp_sq"),
            rq_pos <- new_spinlock_irq!(Pos { put: 0, get: 0 }, "rsiw_qp_rq"),
            state: AtomicU8::new(State::Init as u8),
            attrs <- new_mutex!(Attrs { access: 0 }, "rsiw_qp_attrs"),
            destroying: AtomicBool::new(false),
            sweep_listed: AtomicBool::new(false),
            conn <- new_spinlock_irq!(None, "rsiw_qp_conn"),
        }? Error),
        ))
    }

    /// `destroy_qp`: flushes what is still posted into the CQs (which outlive the QP),
    /// without asynchronous events, and gives back the `max_qp` unit.
    fn destroy(dev: &IbDevice<Device>, qp: &IbQp<Qp>) {
        qp.destroying.store(true, Ordering::Release);
        // Closing drops the connection's QP reference, which destroy then waits for.
        let conn = qp.conn.lock().take();
        if let Some(c) = conn {
            c.close();
        }
        {
            let _attrs = qp.attrs.lock();
            Self::enter_any(qp, State::Error);
        }
        dev.counts.give_back(Object::Qp);
    }

    fn sweep_rq(qp: &IbQp<Qp>) -> bool {
        Self::sweep_late_rqes(qp)
    }

    fn sweep_unlisted(qp: &IbQp<Qp>) {
        Self::sweep_unlisted(qp);
    }

    /// `query_qp`: the state, the granted capabilities, the signalling type, the access
    /// flags, the netdev's MTU and the connection's IRD and ORD.
    fn query(dev: &IbDevice<Device>, qp: &IbQp<Qp>) -> QpAttrs {
        let access = qp.attrs.lock().access;
        // RDMA Read depths of the connection (none while not connected).
        let (ird, ord) = Self::conn(qp).map_or((0, 0), |c| c.ird_ord());
        QpAttrs {
            state: qp.state().to_verbs(),
            cap: QpCap {
                max_send_wr: qp.sq.size(),
                max_recv_wr: qp.rq.as_ref().map_or(0, |r| r.size()),
                max_send_sge: qp.caps.send_sge(),
                max_recv_sge: qp.caps.recv_sge(),
                max_inline_data: qp.caps.inline(),
            },
            sig_all: qp.sig_all,
            access,
            mtu: dev.netdev().map(|n| n.mtu()),
            ird: u8::try_from(ird).unwrap_or(u8::MAX),
            ord: u8::try_from(ord).unwrap_or(u8::MAX),
        }
    }

    fn modify(qp: &IbQp<Qp>, change: &QpModify) -> Result {
        Qp::modify_attrs(qp, change)
    }

    fn post_send<'a>(qp: &IbQp<Qp>, wrs: WrList<'a, SendWr>) -> Result<(), PostError<'a, SendWr>> {
        Qp::post_send_list(qp, wrs)
    }

    fn post_recv<'a>(qp: &IbQp<Qp>, wrs: WrList<'a, RecvWr>) -> Result<(), PostError<'a, RecvWr>> {
        Qp::post_recv_list(qp, wrs)
    }

    /// The connection's details ([`Conn::res_attrs`]); none while the QP has none.
    fn res_attrs(qp: &IbQp<Qp>, out: &mut ResAttrs<'_>) -> Result {
        match Self::conn(qp) {
            Some(c) => c.res_attrs(out),
            None => Ok(()),
        }
    }
}
