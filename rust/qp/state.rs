// SPDX-License-Identifier: GPL-2.0

//! The QP state machine and flushing.
//!
//! States follow the verbs (`IB_QPS_*`) and RFC 5040 §8 / the RDMAC verbs for iWARP:
//! RESET → INIT (RDMAC "Idle") → RTR → RTS. A QP is created in INIT, as an RNIC's QP starts
//! in Idle (rdma-core's tests expect `IBV_QPS_INIT` of a new QP on an `IBV_NODE_RNIC`
//! device, and the C siw reports it). Consumers move a QP with `modify_qp`, except
//! into RTS: that needs an established iWARP connection, so only the connection manager
//! enters it ([`Qp::enter_rts`]); `modify_qp` to RTS is accepted only from RTS. Work
//! requests may be posted in INIT and RTR (iWARP "Idle": posted, not processed).
//!
//! Any state → ERROR (`modify_qp`, [`Qp::enter_error`], destroy) flushes: every posted
//! SQE and RQE completes with `SIW_WC_WR_FLUSH_ERR` in posting order, signalled or not (the
//! verbs always report a WR that completes in error), and its slot is released. A QP with
//! an SRQ leaves the SRQ's WQEs alone and reports `IB_EVENT_QP_LAST_WQE_REACHED`.
//! ERROR → RESET and INIT/RTR → RESET discard what is left without completions.
//!
//! A user QP's RQ takes WQEs with no doorbell (the siw user ABI's `post_recv` only writes
//! the mapped ring), so a receive posted after the flush would otherwise complete only at
//! destroy: a consumer that posts its next receive from its completion handler (rping
//! does) and then waits for that receive's flush would wait for good. While such a QP
//! stays in ERROR, the device's sweep ([`Qp::sweep_late_rqes`], every 100 ms) flushes what was
//! posted since.
//!
//! Every transition is checked and made with both position locks held, so the connection
//! manager and the data paths (which do not take the `attrs` mutex) cannot interleave with
//! `modify_qp` into a state the table does not allow.

use super::{invalid, Pos, Qp, Who, VALID};

/// The most WQEs one hold of a ring's position lock flushes (interrupts are off while it
/// is held); [`Qp::flush_rest_sq`] and [`Qp::flush_rest_rq`] take the rest a batch at a
/// time. A user's full SQ of 32,768 SQEs is flushed in 128 holds.
pub(super) const FLUSH_BATCH: u32 = 256;
use crate::abi::{access, Rqe, Sqe};
use crate::abi::{WcStatus, WrOpcode};
use crate::conn::Conn;
use crate::cq::{Cq, Cqe, Notify};
use crate::logtag::Tag;
use crate::sys::ibdev::{QpModify, QpState};
use crate::sys::mem::ring::{Ring, RingElem};
use crate::sys::obj::{IbCq, IbQp, QpEvent};
use crate::sys::pr_err_ratelimited;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// The QP states rsiw can be in (SQD/SQE, the iWARP Closing/Terminate states, come with
/// the transport).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum State {
    /// `IB_QPS_RESET`: nothing may be posted.
    Reset = 0,
    /// `IB_QPS_INIT` (iWARP Idle): WRs are queued, not processed.
    Init = 1,
    /// `IB_QPS_RTR` (iWARP Idle as well).
    Rtr = 2,
    /// `IB_QPS_RTS`: connected, the TX and RX paths process WRs.
    Rts = 3,
    /// `IB_QPS_ERR`: everything posted is flushed.
    Error = 4,
}

impl State {
    /// Decodes the stored state (anything unknown reads as ERROR).
    pub(super) fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            _ => Self::Error,
        }
    }

    /// The verbs state.
    pub(super) fn to_verbs(self) -> QpState {
        match self {
            Self::Reset => QpState::Reset,
            Self::Init => QpState::Init,
            Self::Rtr => QpState::Rtr,
            Self::Rts => QpState::Rts,
            Self::Error => QpState::Error,
        }
    }

    /// The rsiw state for a requested verbs state of the QP `who` names.
    ///
    /// # Errors
    ///
    /// `EINVAL` (with a rate-limited message) for SQD and SQE.
    fn from_verbs(who: Who<'_>, s: QpState) -> Result<Self> {
        Ok(match s {
            QpState::Reset => Self::Reset,
            QpState::Init => Self::Init,
            QpState::Rtr => Self::Rtr,
            QpState::Rts => Self::Rts,
            QpState::Error => Self::Error,
            QpState::Sqd | QpState::Sqe => {
                return Err(invalid(
                    who,
                    format_args!("state {s:?} cannot be requested on iWARP"),
                ));
            }
        })
    }
}

/// Whether the verbs modify-QP table, restricted to iWARP, allows `cur -> new` (RTS only
/// from RTS: the connection manager enters it).
pub(super) fn transition_allowed(cur: State, new: State) -> bool {
    use State::*;
    matches!(
        (cur, new),
        (_, Error)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rtr)
            | (Rts, Rts)
            | (Reset, Reset)
            | (Init, Reset)
            | (Rtr, Reset)
            | (Error, Reset)
    )
}

/// Whether a graceful disconnect (SQD, iw_cm's `iw_cm_disconnect()`) of a QP in `state`
/// with no connection attached has nothing left to do: in ERROR the connection is gone;
/// in RTS it is closing, since RTS is entered only with a connection attached, which
/// detaches itself from the QP before moving it to ERROR (a disconnect racing the peer's
/// close falls between the two). In any other state the QP was never connected.
pub(super) fn closed_or_closing(state: State) -> bool {
    matches!(state, State::Error | State::Rts)
}

/// Checks a transition `modify_qp` asks for of the QP `who` names (see
/// [`transition_allowed`]).
///
/// # Errors
///
/// `EINVAL` with a rate-limited message naming the transition.
pub(super) fn check_transition(who: Who<'_>, cur: State, new: State) -> Result {
    if transition_allowed(cur, new) {
        Ok(())
    } else if new == State::Rts {
        Err(invalid(
            who,
            format_args!("RTS needs an established iWARP connection (rdma_cm connect/accept)"),
        ))
    } else {
        Err(invalid(
            who,
            format_args!("transition {cur:?} -> {new:?} is not allowed"),
        ))
    }
}

impl Qp {
    /// The current state.
    pub(crate) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    /// The completion of a flushed WQE `id` with `opcode`.
    pub(super) fn flush_cqe(qp: &IbQp<Qp>, id: u64, opcode: WrOpcode) -> Cqe {
        // Error completions fire a solicited-only arm too (verbs: "solicited or in error").
        Cqe {
            id,
            opcode,
            status: WcStatus::WrFlushErr,
            bytes: 0,
            qpn: qp.qpn(),
            qp: qp.as_raw(),
            solicited: true,
            inval_stag: 0,
        }
    }

    /// Completes up to [`FLUSH_BATCH`] valid SQEs from `get` with a flush error (a user
    /// writing new SQEs meanwhile cannot keep us here). Stops early if the send CQ
    /// overflows (a later flush continues). Returns the notification due and whether a
    /// valid SQE is left after a full batch ([`Qp::flush_rest_sq`] takes it on).
    pub(super) fn flush_sq_locked(qp: &IbQp<Qp>, pos: &mut Pos) -> (Notify, bool) {
        Self::flush_ring(qp, &qp.sq, qp.scq(), pos, |sqe: &Sqe| {
            (sqe.id, crate::wqe::flush_opcode(sqe.opcode))
        })
    }

    /// As [`Qp::flush_sq_locked`], for the QP's own RQ into the receive CQ.
    pub(super) fn flush_rq_locked(
        qp: &IbQp<Qp>,
        ring: &Ring<Rqe>,
        pos: &mut Pos,
    ) -> (Notify, bool) {
        Self::flush_ring(qp, ring, qp.rcq(), pos, |rqe: &Rqe| {
            (rqe.id, WrOpcode::Receive)
        })
    }

    /// Completes up to [`FLUSH_BATCH`] valid WQEs of `ring` from `get` into `cq` with a
    /// flush error, its ID and opcode as `what` reads them from the WQE, stopping early if
    /// `cq` overflows. Returns the notification due and whether the batch ended with a
    /// valid WQE left.
    fn flush_ring<E: RingElem>(
        qp: &IbQp<Qp>,
        ring: &Ring<E>,
        cq: &IbCq<Cq>,
        pos: &mut Pos,
        what: impl Fn(&E) -> (u64, WrOpcode),
    ) -> (Notify, bool) {
        let mut notify = Notify::NONE;
        for _ in 0..ring.size().min(FLUSH_BATCH) {
            let idx = pos.get;
            if ring.flags(idx) & VALID == 0 {
                return (notify, false);
            }
            let (id, opcode) = what(&ring.read(idx));
            match Cq::push(cq, &Self::flush_cqe(qp, id, opcode)) {
                Ok(n) => notify = notify.or(n),
                Err(o) => return (notify.or(o.into()), false),
            }
            ring.set_flags(idx, 0);
            pos.get = idx.wrapping_add(1);
        }
        (notify, ring.flags(pos.get) & VALID != 0)
    }

    /// Flushes the SQ of a QP in ERROR a batch per hold of its position lock (interrupts
    /// are enabled between batches), delivering each batch's notification with no lock
    /// held, until it is empty, the send CQ overflows, the QP leaves ERROR (a RESET
    /// discards the rest) or one pass over the ring is done (a user writing new SQEs
    /// meanwhile cannot keep us here; its next doorbell goes on). Any context; no QP, SRQ
    /// or CQ lock held.
    pub(super) fn flush_rest_sq(qp: &IbQp<Qp>) {
        for _ in 0..qp.sq.size().div_ceil(FLUSH_BATCH) {
            let (notify, more) = {
                let mut pos = qp.sq_pos.lock();
                if qp.state() != State::Error {
                    return;
                }
                Self::flush_sq_locked(qp, &mut pos)
            };
            notify.deliver(qp.scq());
            if !more {
                return;
            }
        }
    }

    /// As [`Qp::flush_rest_sq`], for the QP's own RQ. Returns whether the QP was in
    /// ERROR.
    pub(super) fn flush_rest_rq(qp: &IbQp<Qp>) -> bool {
        let Some(ring) = &qp.rq else {
            return qp.state() == State::Error;
        };
        for _ in 0..ring.size().div_ceil(FLUSH_BATCH) {
            let (notify, more) = {
                let mut pos = qp.rq_pos.lock();
                if qp.state() != State::Error {
                    return false;
                }
                Self::flush_rq_locked(qp, ring, &mut pos)
            };
            notify.deliver(qp.rcq());
            if !more {
                return true;
            }
        }
        // One pass done; the next sweep goes on.
        true
    }

    /// Releases every valid slot from `get` without completions (→ RESET).
    fn discard<E: RingElem>(ring: &Ring<E>, pos: &mut Pos) {
        for _ in 0..ring.size() {
            if ring.flags(pos.get) & VALID == 0 {
                break;
            }
            ring.set_flags(pos.get, 0);
            pos.get = pos.get.wrapping_add(1);
        }
    }

    /// Enters `new` if `allowed` accepts the current state, with both position locks held,
    /// and flushes or discards as `new` requires; then delivers the completion
    /// notifications (no lock held). Returns the previous state and whether send WQEs
    /// were flushed.
    ///
    /// # Errors
    ///
    /// The error of `allowed`; the state is unchanged.
    fn enter_checked(
        qp: &IbQp<Qp>,
        new: State,
        allowed: impl FnOnce(State) -> Result,
    ) -> Result<(State, bool)> {
        let (prev, ns, nr, sq_flushed, more_s, more_r) = {
            let mut sq = qp.sq_pos.lock();
            let mut rq = qp.rq_pos.lock();
            let prev = qp.state();
            allowed(prev)?;
            qp.state.store(new as u8, Ordering::Release);
            let none = || (Notify::NONE, false);
            let ((ns, more_s), (nr, more_r), sq_flushed) = match new {
                State::Error => {
                    // A first batch with the state change; `flush_rest_*` below flush
                    // the rest, a batch per lock hold.
                    let get = sq.get;
                    let s = Self::flush_sq_locked(qp, &mut sq);
                    let r = match &qp.rq {
                        Some(ring) => Self::flush_rq_locked(qp, ring, &mut rq),
                        None => none(),
                    };
                    (s, r, sq.get != get)
                }
                State::Reset => {
                    Self::discard(&qp.sq, &mut sq);
                    if let Some(ring) = &qp.rq {
                        Self::discard(ring, &mut rq);
                    }
                    (none(), none(), false)
                }
                _ => (none(), none(), false),
            };
            (prev, ns, nr, sq_flushed, more_s, more_r)
        };
        ns.deliver(qp.scq());
        nr.deliver(qp.rcq());
        if more_s {
            Self::flush_rest_sq(qp);
        }
        if more_r {
            Self::flush_rest_rq(qp);
        }
        Ok((prev, sq_flushed))
    }

    /// The receive-queue sweep of a user QP that entered ERROR (module documentation):
    /// flushes the receive WQEs posted since the last flush, in posting order, and returns
    /// whether the QP is still one to sweep (in ERROR, not being destroyed). Process
    /// context, no QP, SRQ or CQ lock held.
    pub(super) fn sweep_late_rqes(qp: &IbQp<Qp>) -> bool {
        if !qp.user || qp.rq.is_none() {
            // Never listed: a QP that took the number of a listed one destroyed since.
            return false;
        }
        if !qp.destroying.load(Ordering::Acquire) && Self::flush_rest_rq(qp) {
            return true;
        }
        // Leaving the list: unlisted first, then the state looked at again under the RQ's
        // lock (which every transition holds), so that a QP that entered ERROR again
        // meanwhile is either listed again by `after_error` (which saw the flag clear) or
        // kept here, never neither and never both.
        qp.sweep_listed.store(false, Ordering::SeqCst);
        let in_error = {
            let _rq = qp.rq_pos.lock();
            qp.state() == State::Error
        };
        in_error
            && !qp.destroying.load(Ordering::Acquire)
            && !qp.sweep_listed.swap(true, Ordering::SeqCst)
    }

    /// The sweep dropped the QP from its list (no memory): a later entry into ERROR lists
    /// it again.
    pub(super) fn sweep_unlisted(qp: &IbQp<Qp>) {
        qp.sweep_listed.store(false, Ordering::SeqCst);
        let dev = qp.device::<crate::device::Device>();
        pr_err_ratelimited!(
            "{}: no memory to keep the QP listed for the receive sweep; receives posted in ERROR complete at destroy\n",
            Tag::with_name(|b| dev.name_into(b), Some(qp.qpn()))
        );
    }

    /// Lists a user QP with its own RQ that entered ERROR for the device's sweep, unless
    /// it is listed already.
    fn list_for_sweep(qp: &IbQp<Qp>) {
        if qp.sweep_listed.swap(true, Ordering::SeqCst) {
            return;
        }
        let dev = qp.device::<crate::device::Device>();
        if !dev.sweep_rq_later(qp.qpn()) {
            qp.sweep_listed.store(false, Ordering::SeqCst);
            pr_err_ratelimited!(
                "{}: no memory to list the QP for the receive sweep; receives posted in ERROR complete at destroy\n",
                Tag::with_name(|b| dev.name_into(b), Some(qp.qpn()))
            );
        }
    }

    /// Enters `new` unconditionally (destroy).
    pub(super) fn enter_any(qp: &IbQp<Qp>, new: State) {
        let _ = Self::enter_checked(qp, new, |_| Ok(()));
    }

    /// After entering ERROR from `prev`, not during destroy: if send WQEs were flushed
    /// (`sq_flushed`), the send queue is drained now, which the consumer hears as
    /// `IB_EVENT_SQ_DRAINED` (as from the C siw); a QP with an SRQ tells its consumer
    /// that it will take no more WQEs from the SRQ (whose WQEs it leaves alone).
    fn after_error(qp: &IbQp<Qp>, prev: State, sq_flushed: bool) {
        if prev == State::Error || qp.destroying.load(Ordering::Acquire) {
            return;
        }
        if qp.user && qp.rq.is_some() {
            Self::list_for_sweep(qp);
        }
        if sq_flushed {
            qp.dispatch_event(QpEvent::SqDrained);
        }
        if qp.shared_rq().is_some() {
            qp.dispatch_event(QpEvent::LastWqeReached);
        }
    }

    /// `modify_qp`: a new state (see the module documentation for the transitions), the
    /// state the consumer believes current (must match) and the access rights.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a state that cannot be requested, a transition the table refuses (RTS
    /// from anything but RTS) or a wrong current state. Every error logs its cause
    /// (rate-limited).
    pub(super) fn modify_attrs(qp: &IbQp<Qp>, change: &QpModify) -> Result {
        let who = Who::Qp(qp);
        if change.state == Some(QpState::Sqd) {
            // iw_cm's graceful disconnect (RFC 5040 §6.2.1: the stream closes, the QP
            // leaves RTS). A QP that is not connected has nothing to drain.
            return match Self::conn(qp) {
                Some(c) => {
                    c.close();
                    Ok(())
                }
                // Both sides disconnecting: the connection closed or is closing.
                None if closed_or_closing(qp.state()) => Ok(()),
                None => Err(invalid(
                    who,
                    format_args!("SQD requested but the QP is not connected"),
                )),
            };
        }
        let mut attrs = qp.attrs.lock();
        let cur = qp.state();
        if let Some(believed) = change.cur_state {
            if believed != cur.to_verbs() {
                return Err(invalid(
                    who,
                    format_args!("cur_qp_state {believed:?} but the QP is {cur:?}"),
                ));
            }
        }
        let new = match change.state {
            Some(s) => State::from_verbs(who, s)?,
            None => cur,
        };
        // Checked here for a clear error before anything changes, and again under the
        // position locks (the connection manager or a data path may move the QP meanwhile).
        check_transition(who, cur, new)?;
        if change.state.is_some() {
            if new == State::Error {
                // An abrupt disconnect (iw_cm) or the consumer's ERROR: the connection
                // closes first (its mutex is taken without QP locks held), completing
                // the WQEs it holds (the one being sent, the outstanding Reads) before
                // the SQ's are flushed, so that CQ order stays SQ order. The slot's
                // guard must end with this statement: closing detaches the connection
                // from the slot, and a guard living on in an `if let` scrutinee (edition
                // 2021) would deadlock it on its own spinlock.
                let conn = qp.conn.lock().take();
                if let Some(c) = conn {
                    drop(attrs);
                    c.close();
                    // The QP is in ERROR now, unless the connection had closed already.
                    let (prev, sq_flushed) = Self::enter_checked(qp, new, |_| Ok(()))?;
                    Self::after_error(qp, prev, sq_flushed);
                    return Ok(());
                }
            }
            let (prev, sq_flushed) =
                Self::enter_checked(qp, new, |now| check_transition(who, now, new))?;
            if new == State::Error {
                Self::after_error(qp, prev, sq_flushed);
            }
        }
        if let Some(access) = change.access {
            attrs.access = access;
            // A connected QP enforces them from the peer's next segment on.
            if let Some(c) = Self::conn(qp) {
                c.set_qp_access(access);
            }
        }
        Ok(())
    }

    /// For the connection manager, once the QP entered RTS on connection `c`: `c`
    /// enforces the QP's access flags. A QP whose flags grant neither remote write nor
    /// remote read gets what iw_cm gives every connected iWARP QP (`REMOTE_WRITE |
    /// REMOTE_READ`, `iw_cm_init_qp_attr`), which librdmacm's active side never applies
    /// (its QP reaches INIT, with access flags 0, before its iw_cm ID exists); flags that
    /// grant either are the consumer's choice and stay. Under the attributes' mutex, so
    /// that a concurrent `modify_qp` of the access flags is enforced either after this or
    /// not at all. May sleep.
    pub(crate) fn grant_connected_access(qp: &IbQp<Qp>, c: &Conn) {
        let mut attrs = qp.attrs.lock();
        // Atomics do not exist on iWARP: REMOTE_ATOMIC alone grants nothing.
        let remote = access::REMOTE_WRITE | access::REMOTE_READ;
        if attrs.access & remote == 0 {
            attrs.access |= access::REMOTE_WRITE | access::REMOTE_READ;
        }
        c.set_qp_access(attrs.access);
    }

    /// For the connection manager: the iWARP connection of the QP is established (MPA
    /// negotiation done), the QP enters RTS and the TX and RX paths may process its WQEs.
    /// Does not sleep.
    ///
    /// # Errors
    ///
    /// `EINVAL` (logged, rate-limited) unless the QP is in INIT or RTR (iWARP Idle): a
    /// QP the consumer reset or moved to ERROR meanwhile stays there.
    pub(crate) fn enter_rts(qp: &IbQp<Qp>) -> Result {
        let who = Who::Qp(qp);
        Self::enter_checked(qp, State::Rts, |now| match now {
            State::Init | State::Rtr => Ok(()),
            _ => Err(invalid(
                who,
                format_args!("connection established but the QP is {now:?}, not INIT/RTR"),
            )),
        })
        .map(|_| ())
    }

    /// For the connection manager and the data paths: a fatal error (connection lost,
    /// TERMINATE sent or received, a malformed user WQE) moves the QP to ERROR, which
    /// flushes it (see the module documentation). `event` (`IB_EVENT_QP_FATAL`,
    /// `IB_EVENT_QP_REQ_ERR`, `IB_EVENT_QP_ACCESS_ERR`) is reported to the consumer if the
    /// QP was not in ERROR yet. Any context; call it with no QP, SRQ or CQ lock held.
    pub(crate) fn enter_error(qp: &IbQp<Qp>, event: Option<QpEvent>) {
        let (prev, sq_flushed) = match Self::enter_checked(qp, State::Error, |_| Ok(())) {
            Ok(r) => r,
            // Not reached: every state may enter ERROR.
            Err(_) => return,
        };
        if prev != State::Error {
            if let Some(ev) = event {
                qp.dispatch_event(ev);
            }
        }
        Self::after_error(qp, prev, sq_flushed);
    }
}
