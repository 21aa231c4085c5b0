// SPDX-License-Identifier: GPL-2.0

//! The transport of one established connection (RFC 5040, RFC 5041, RFC 5044 Full
//! Operation): SQ work requests and Read Responses out through the protocol core's
//! [`DdpTx`], received FPDUs through its [`Decoder`] straight into registered memory.
//!
//! # Owners and lifetime
//!
//! A [`Conn`] is created by the connection manager when MPA startup completed
//! ([`Conn::establish`]). Three places hold it: the socket's callback attachment, the
//! QP's connection slot (for doorbells and teardown), and its work item while queued. The
//! connection holds a counted reference to the QP ([`QpRef`]) and the `iw_cm_id`
//! ([`CmId`]) until it closes; closing (peer FIN or reset, a TERMINATE either way, a local
//! disconnect or QP destroy) drops both under the connection's mutex, so once
//! [`Conn::close`] returned nothing of the connection touches the QP again and the QP's
//! destroy can complete.
//!
//! # Execution
//!
//! Receiving runs in the socket's data-ready callback (`rx`): `tcp_read_sock()` feeds the
//! RX decoder, which places payload from the socket buffers straight into the target
//! pages (one copy, nothing staged) and completes receives and Reads there. It wakes the
//! transmit side only when that has new work (Read Requests, a completed Read the SQ head
//! waits for, TERMINATE).
//!
//! Transmitting (`tx`) runs in the connection's work item (process context, serialised
//! by the connection mutex): the write-space and state-change callbacks and kernel
//! consumers' `post_send` only queue it. A user QP's POST_SEND doorbell sends up to
//! [`DOORBELL_OCTETS`] of ULPDUs itself, in the consumer's syscall, when the connection is
//! idle (its mutex free), and queues the work item for the rest; that saves the work
//! item's wake-up on every short message. While RDMA Reads are outstanding the doorbell
//! only queues the work item (`Conn::doorbell` says why). One run of the work item first reads what the
//! callback has not (data that came with the MPA frames), then sends FPDUs until the SQ is
//! empty, the send buffer is full (the write-space callback queues the work again) or a
//! burst of [`TX_BURST`] FPDUs was sent (the work queues itself again, so one busy
//! connection does not starve others). A burst owns the socket lock throughout (`Conn::transmit`).
//!
//! # What is not here
//!
//! Atomics and Immediate Data (RFC 7306) are not negotiated.
//!
//! # The session
//!
//! What the two directions must agree on (the ORQ and IRQ, ORD and the read fence, the
//! peer-to-peer RTR exchange of RFC 6581 §5, TERMINATE-then-close) is the protocol core's
//! [`Session`], under the receive lock, its ORQ and IRQ allocated for the connection's
//! ORD and IRD ([`rx::ConnQueues`]): the receive half feeds it, the transmit half
//! polls it for the next message ([`Session::poll_transmit`]) and for lifecycle events
//! ([`Session::poll_event`]: the QP fails, the connection closes), and the connection's
//! timer serves its deadlines ([`Session::poll_timeout`]: the peer-to-peer Responder's wait
//! for the first FPDU, a TERMINATE the peer does not take).
//!
//! [`Session`]: crate::engine::session::Session
//! [`Session::poll_transmit`]: crate::engine::session::Session::poll_transmit
//! [`Session::poll_event`]: crate::engine::session::Session::poll_event
//! [`Session::poll_timeout`]: crate::engine::session::Session::poll_timeout

use crate::abi::{access, WcStatus};
use crate::device::{Device, Stat};
use crate::engine::ddp_rx::QpAccess;
use crate::engine::ddp_tx::DdpTx;
use crate::engine::session::{Close, Event, SessionConfig};
use crate::engine::startup::Negotiated;
use crate::limits::MAX_SGE;
use crate::logtag::{CauseText, KeptTag, Tag};
use crate::qp::Qp;
use crate::settings::Snapshot;
use crate::stag::MrRef;
use crate::sys::bhlock::{new_spinlock_bh, SpinLockBh};
use crate::sys::ibdev::{QpRef, ResAttrs};
use crate::sys::iwcm::{CmEvent, CmEventKind, CmId};
use crate::sys::mem::copy_pages::CopyPages;
use crate::sys::net::socket::{tcp_state, SockEvent, SockEvents, SockLock, SockRef, Socket};
use crate::sys::obj::{PdId, QpEvent};
use crate::sys::Live;
use crate::sys::{pr_dbg, pr_warn_ratelimited};
use crate::timer::Armed;
use crate::wire::mpa::MpaErrorCode;
use crate::wire::terminate::TermCause;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::alloc::Flags;
use kernel::impl_has_hr_timer;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, ArcBorrow, Mutex};
use kernel::time::hrtimer::{
    HrTimer, HrTimerCallback, HrTimerCallbackContext, HrTimerRestart, RelativeMode,
};
use kernel::time::Monotonic;
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};
use rx::{RxMsg, RxSide};
use tx::{JobKind, Payload};
use tx_fpdu::{FpduBufs, TxFpdu};

mod rx;
mod tx;
mod tx_fpdu;

/// FPDUs one run of the work item sends before it yields (and queues itself again).
const TX_BURST: u32 = 64;

/// The most FPDUs a user QP's POST_SEND doorbell sends in the consumer's syscall before it
/// leaves the rest to the work item.
const DOORBELL_BURST: u32 = 16;

/// The ULPDU octets a doorbell sends at most, in whole FPDUs (at least one, at most
/// [`DOORBELL_BURST`]): with large FPDUs (up to 64768 octets) two, with FPDUs of one TCP
/// segment of a 1500-octet MTU 16.
///
/// A short message goes out before the syscall returns, which spares the work item's
/// wake-up; the rest of a long one is left to the work item, whose worker runs at high
/// priority where the consumer's thread has its own. On a CPU the consumer's thread shares
/// with other threads (perftest's server busy-polls its CQ throughout a bandwidth test), a
/// transfer sent from that thread gets that thread's share of the CPU only: 1 MiB
/// `ib_write_bw` on one vCPU moves 133 MB/s with 16 large FPDUs sent here, 258 with two.
/// One (32 KiB) would split a 64 KiB Write between doorbell and work item, whose order
/// then varies from run to run (120 or 185-224 MB/s).
const DOORBELL_OCTETS: u32 = 64 * 1024;

/// The most copy pages a connection holds (4 MiB with 4 KiB pages, the largest send
/// buffer TCP gives a socket by default): more copied payload in TCP's buffers than that
/// is copied by TCP itself.
const COPY_PAGES_MAX: usize = 1024;

/// The smallest effective MSS (octets) MULPDU is derived from: RFC 5044 §4.5's MULPDU floor
/// of 128 octets plus the FPDU overhead with markers.
const MIN_EMSS: u32 = 140;

/// "on" or "off", for the kernel log.
const fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Why a connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The peer closed its side (FIN): DISCONNECT, then CLOSE.
    PeerClosed,
    /// The TCP connection failed (reset, error).
    Reset,
    /// A protocol error: a TERMINATE was sent, or the peer sent one (the QP reports
    /// `IB_EVENT_QP_FATAL`).
    Terminated,
    /// A TERMINATE for a memory protection error the peer caused was sent
    /// ([`TermCause::is_protection_error`]; the QP reports `IB_EVENT_QP_ACCESS_ERR`).
    AccessError,
    /// The consumer disconnected or destroyed the QP.
    Local,
}

impl Reason {
    /// The reason in words, for the kernel log.
    fn words(self) -> &'static str {
        match self {
            Reason::PeerClosed => "the peer closed it",
            Reason::Reset => "the TCP connection failed or was reset",
            Reason::Terminated => "a TERMINATE was sent or received",
            Reason::AccessError => "a TERMINATE for a protection error was sent",
            Reason::Local => "the consumer disconnected or destroyed the QP",
        }
    }

    /// The asynchronous event the QP reports when the connection ends for this reason.
    fn event(self) -> Option<QpEvent> {
        match self {
            Reason::Terminated | Reason::Reset => Some(QpEvent::Fatal),
            Reason::AccessError => Some(QpEvent::AccessErr),
            Reason::PeerClosed | Reason::Local => None,
        }
    }

    /// The reason a TERMINATE with `cause` gives.
    fn of_terminate(cause: &TermCause) -> Self {
        if cause.is_protection_error() {
            Reason::AccessError
        } else {
            Reason::Terminated
        }
    }
}

/// The session's parameters for the Read depths `ird` and `ord`: capped at
/// [`crate::limits::MAX_IRD_ORD`], with the TERMINATE and RTR timeout of the device's
/// `mpa_timeout_ms` in `settings`.
fn session_config(ird: u32, ord: u32, settings: &Snapshot) -> SessionConfig {
    SessionConfig {
        ird,
        ord,
        timeout_ms: settings.timeout_ms(),
    }
    .capped()
}

/// A local SGE resolved to its memory region.
struct ResolvedSge {
    mr: MrRef,
    /// The STag (lkey) the SGE named, for checking the region again before each access.
    stag: u32,
    to: u64,
    len: u32,
}

/// The resolved SGEs of one message: the first inline (a message has one SGE most
/// often; it then allocates nothing), the others in a vector allocated for the second.
/// Small, so that it moves without a block copy.
struct SgeList {
    first: Option<ResolvedSge>,
    rest: Option<KVec<ResolvedSge>>,
}

impl SgeList {
    /// An empty list.
    const fn new() -> Self {
        Self {
            first: None,
            rest: None,
        }
    }

    /// Appends `sge`; a second or later SGE is stored with allocation flags `flags`.
    ///
    /// # Errors
    ///
    /// `ENOSPC` when [`MAX_SGE`] SGEs are in the list already, `ENOMEM`.
    fn push(&mut self, sge: ResolvedSge, flags: Flags) -> Result {
        if self.first.is_none() {
            self.first = Some(sge);
            return Ok(());
        }
        let rest = self.rest.get_or_insert_with(KVec::new);
        if rest.len() + 1 >= MAX_SGE as usize {
            return Err(ENOSPC);
        }
        rest.push(sge, flags)?;
        Ok(())
    }

    /// The SGE at `idx`, if the list has that many.
    fn get(&self, idx: usize) -> Option<&ResolvedSge> {
        match idx.checked_sub(1) {
            None => self.first.as_ref(),
            Some(i) => self.rest.as_ref()?.get(i),
        }
    }

    /// The SGEs, in order.
    fn iter(&self) -> impl Iterator<Item = &ResolvedSge> {
        Iterator::chain(self.first.iter(), self.rest.iter().flat_map(|r| r.iter()))
    }
}

/// The transmit half's message state: the FPDU builder, the message being sent and its
/// FPDU's buffers. In an allocation of its own, made with the connection, so that the
/// connection's own fits a 1 KiB object (see the size check below [`Inner`]).
struct TxState {
    ddp: DdpTx,
    job: Option<(JobKind, Payload)>,
    /// The FPDU being handed to TCP, collected in `bufs`.
    fpdu: Option<TxFpdu>,
    /// The buffers of the FPDU being sent, empty between FPDUs.
    bufs: FpduBufs,
    /// Pages the payload of large copied FPDUs goes through (`tx_fpdu`); held only while
    /// the connection has something to send, and never released while `fpdu` refers to
    /// them.
    copy: CopyPages,
    /// The session's next deadline ([`Session::poll_timeout`]) as the current transmit
    /// burst found it, in the receive lock's hold in which the session had nothing more to
    /// send (or offered the SQ, and the SQ had nothing to start); `None` if the burst did
    /// not get there. [`Conn::arm_timer`] takes it in place of another round trip of that
    /// lock.
    idle_due: Option<Option<u64>>,
}

/// The mutable state of a connection.
struct Inner {
    qp: Option<QpRef<Device>>,
    sock: Option<Socket>,
    id: Option<CmId<Device>>,
    pd: PdId,
    tx: KBox<TxState>,
    /// The session deadline the timer is armed for (ms of [`Conn::now_ms`]), and the
    /// armed timer.
    timer: Option<(u64, Armed<Conn>)>,
    /// Nothing that arrived before the data-ready callback was attached is left unread
    /// (none did, or the work item read it); from then on the callback reads everything.
    drained: bool,
    closed: bool,
}

// A connection's allocation (the `Arc`'s count and the `Conn`) fits a 1 KiB kmalloc
// object, and its `TxState` a 512-octet one: with the QP's own object (`ib_qp` and
// `crate::qp::Qp`, 512 octets) they hold less per QP than the C siw's single 2 KiB object
// with its connection endpoint and CM work elements (`make bench`, kernel memory per QP).
// The transmit half's `TxState` and the log tag's text are allocated apart for this.
// Checked where locks carry no debugging state, which adds to every lock's size.
#[cfg(not(any(CONFIG_DEBUG_LOCK_ALLOC, CONFIG_DEBUG_SPINLOCK, CONFIG_DEBUG_MUTEXES)))]
const _: () =
    assert!(core::mem::size_of::<Conn>() <= 1024 - 8 && core::mem::size_of::<TxState>() <= 512);

/// An established connection (see the module documentation).
#[pin_data]
pub(crate) struct Conn {
    /// What the connection's kernel messages start with (device, QP, peer).
    tag: KeptTag,
    /// Inbound Read depth (IRD) of the connection.
    ird: u32,
    /// Outbound Read depth (ORD) of the connection.
    ord: u32,
    /// FPDUs a POST_SEND doorbell sends at most ([`DOORBELL_OCTETS`]), 1 to
    /// [`DOORBELL_BURST`].
    doorbell_fpdus: u8,
    /// What MPA startup negotiated.
    framing: Framing,
    /// Octets of the FPDUs queued on the socket (RFC 5044 §4: header, ULPDU, pad,
    /// markers, CRC).
    tx_octets: AtomicU64,
    /// FPDUs queued on the socket.
    tx_fpdus: AtomicU64,
    /// Octets read from the socket in Full Operation.
    rx_octets: AtomicU64,
    #[pin]
    inner: Mutex<Inner>,
    /// The receive half (`rx`), taken by the socket's data-ready callback.
    #[pin]
    rx: SpinLockBh<RxSide>,
    #[pin]
    work: Work<Conn>,
    /// Serves the session's deadline ([`Inner::timer`]).
    #[pin]
    timer: HrTimer<Conn>,
    /// Set when the timer fires; [`Conn::arm_timer`] then arms it again even for the same
    /// deadline, which the lagging session clock may not have reached.
    timer_fired: AtomicBool,
    /// Whether [`RxSide::reads_out`] holds a Read, as of the last release of the receive
    /// lock that changed it: the doorbell's test without a lock round trip.
    reads_outstanding: AtomicBool,
    /// [`crate::sys::jiffies_ms`] when the connection was made: the session clock's zero
    /// ([`Conn::now_ms`]).
    epoch: u64,
    _live: Live,
}

impl_has_work! {
    impl HasWork<Self> for Conn { self.work }
}

impl_has_hr_timer! {
    impl HasHrTimer<Self> for Conn {
        mode: RelativeMode<Monotonic>, field: self.timer
    }
}

impl HrTimerCallback for Conn {
    type Pointer<'a> = Arc<Self>;

    fn run(this: ArcBorrow<'_, Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        // The work item hands the session the time (`Session::handle_timeout`).
        this.timer_fired.store(true, Ordering::Relaxed);
        let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
        HrTimerRestart::NoRestart
    }
}

/// What MPA startup negotiated for a connection (RFC 5044 §7.1, RFC 6581), as its
/// messages and `rdma resource show qp -d` report it.
#[derive(Clone, Copy)]
struct Framing {
    /// MPA revision.
    rev: u8,
    /// CRC32c in both directions.
    crc: bool,
    /// Markers in the FPDUs this side sends, and in those it receives.
    markers_tx: bool,
    markers_rx: bool,
    /// The RFC 6581 peer-to-peer model.
    p2p: bool,
    /// FPDUs beyond one TCP segment towards the peer.
    large_fpdu: bool,
    /// The TCP MSS when Full Operation started, in octets.
    mss: u32,
    /// The largest ULPDU this side sends, in octets.
    mulpdu: u32,
}

/// What a connection starts with ([`Conn::establish`]).
#[derive(Clone, Copy)]
pub(crate) struct Terms<'a> {
    /// The MPA negotiation's outcome.
    pub(crate) n: &'a Negotiated,
    /// The device's settings when the connection started.
    pub(crate) settings: Snapshot,
    /// The negotiated (or, for MPA revision 1, the consumer's) inbound Read depth, capped
    /// at [`crate::limits::MAX_IRD_ORD`].
    pub(crate) ird: u32,
    /// The outbound Read depth, likewise.
    pub(crate) ord: u32,
}

impl Conn {
    /// Starts the transport on `sock` on the `terms` MPA startup reached: the QP enters
    /// RTS, the socket's callbacks move to the connection, and the QP's doorbells reach it.
    /// On success the connection takes `id` (for its DISCONNECT and CLOSE events) after
    /// `report` announced the connection on it (CONNECT_REPLY or ESTABLISHED); on failure
    /// `id` is left to the caller.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the QP is not in INIT/RTR or is being destroyed; `ENOMEM`.
    pub(crate) fn establish(
        qp: QpRef<Device>,
        sock: Socket,
        id: &mut Option<CmId<Device>>,
        terms: &Terms<'_>,
        report: impl FnOnce(&CmId<Device>),
    ) -> Result<Arc<Self>> {
        let Terms {
            n,
            settings,
            ird,
            ord,
        } = *terms;
        let cfg = session_config(ird, ord, &settings);
        let tag = Tag::new(
            qp.device(),
            Some(qp.qp().qpn()),
            sock.peer_addr().ok().as_ref(),
        );
        let mss = sock.mss();
        let conn = Self::new(&qp, n, mss, cfg, &tag)?;
        conn.rx.lock().session.start(n, cfg, conn.now_ms());
        let idle = Self::take_over(&conn, qp, sock, id, report)?;
        let f = &conn.framing;
        pr_dbg!(
            "{}: established: MPA revision {}, CRC {}, markers {} (sent) {} (received), \
             peer-to-peer {}, MSS {}, MULPDU {} (large FPDUs {}), IRD {}, ORD {}",
            conn.tag,
            f.rev,
            on_off(f.crc),
            on_off(f.markers_tx),
            on_off(f.markers_rx),
            on_off(f.p2p),
            f.mss,
            f.mulpdu,
            on_off(f.large_fpdu),
            conn.ird,
            conn.ord
        );
        if !idle {
            conn.kick();
        }
        Ok(conn)
    }

    /// Allocates the connection of `qp` with the Read depths of `cfg`: the transmit half
    /// frames as negotiated in `n` for a TCP MSS of `mss`, the receive half holds its own
    /// QP reference and room for `cfg.ord` outstanding Reads. Its session is still idle,
    /// and neither the QP nor the socket knows the connection yet.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the QP is gone from the device's table; `ENOMEM`.
    fn new(
        qp: &QpRef<Device>,
        n: &Negotiated,
        mss: u32,
        cfg: SessionConfig,
        tag: &Tag,
    ) -> Result<Arc<Self>> {
        let tag = KeptTag::new(tag)?;
        let emss = mss.max(MIN_EMSS);
        let framing = Framing {
            rev: n.rev,
            crc: n.crc,
            markers_tx: n.markers_tx,
            markers_rx: n.markers_rx,
            p2p: n.p2p,
            large_fpdu: n.large_fpdu_tx,
            mss,
            mulpdu: n.tx_mulpdu(emss).into(),
        };
        let pd = qp.qp().pd();
        let (ird, ord) = (cfg.ird, cfg.ord);
        let tx = KBox::new(
            TxState {
                ddp: DdpTx::for_connection(n, emss, false),
                job: None,
                fpdu: None,
                bufs: FpduBufs::new(),
                copy: CopyPages::new(COPY_PAGES_MAX),
                idle_due: None,
            },
            GFP_KERNEL,
        )?;
        let reads_out = KVec::with_capacity(ord as usize, GFP_KERNEL)?;
        let session = rx::idle_session(ird, ord)?;
        // The receive half's own reference, dropped when the connection closes.
        let rx_qp = qp.device().qp_ref(qp.qp().qpn()).ok_or(EINVAL)?;
        let conn = Arc::pin_init(
            pin_init!(Self {
                tag,
                ird,
                ord,
                // At most `DOORBELL_BURST` (16): fits.
                doorbell_fpdus: DOORBELL_OCTETS
                    .div_ceil(framing.mulpdu.max(1))
                    .clamp(1, DOORBELL_BURST) as u8,
                framing,
                tx_octets: AtomicU64::new(0),
                tx_fpdus: AtomicU64::new(0),
                rx_octets: AtomicU64::new(0),
                inner <- new_mutex!(Inner {
                    qp: None,
                    sock: None,
                    id: None,
                    pd,
                    tx,
                    timer: None,
                    drained: false,
                    closed: false,
                }),
                rx <- new_spinlock_bh!(RxSide {
                    qp: Some(rx_qp),
                    pd,
                    // Started by `establish`.
                    session,
                    msg: None,
                    reads_out,
                }, "rsiw_conn_rx"),
                work <- new_work!("rsiw_conn"),
                timer <- HrTimer::new(),
                timer_fired: AtomicBool::new(false),
                reads_outstanding: AtomicBool::new(false),
                epoch: crate::sys::jiffies_ms(),
                _live: Live::new(),
            }),
            GFP_KERNEL,
        )?;
        Ok(conn)
    }

    /// Hands `qp` and `sock` to the connection, under its mutex: the QP takes it as its
    /// connection and enters RTS, the socket's callbacks move to it, `report` announces
    /// it on `id`, which the connection then keeps, and the timer is armed for the
    /// session's first deadline.
    ///
    /// Returns whether the connection is idle: nothing arrived before the callbacks moved
    /// here (the receive queue is empty and TCP still ESTABLISHED: whatever arrives from
    /// now on reaches the data-ready or state-change callback), the session has no
    /// message of its own to send (the peer-to-peer RTR) and the SQ holds nothing posted
    /// before the QP entered RTS (what is posted from now on rings for the connection).
    /// Otherwise the work item must run once: the caller queues it.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the QP is not in INIT/RTR, is being destroyed or has a connection
    /// already; `ENOMEM`.
    fn take_over(
        this: &Arc<Self>,
        qp: QpRef<Device>,
        mut sock: Socket,
        id: &mut Option<CmId<Device>>,
        report: impl FnOnce(&CmId<Device>),
    ) -> Result<bool> {
        let mut g = this.inner.lock();
        Qp::attach_conn(qp.qp(), this.clone())?;
        if let Err(e) = Qp::enter_rts(qp.qp()) {
            Qp::detach_conn(qp.qp());
            return Err(e);
        }
        // Before the socket's callbacks move here: the first FPDU meets the QP's rights.
        Qp::grant_connected_access(qp.qp(), this);
        sock.detach();
        if let Err(e) = sock.attach(this.clone(), None) {
            Qp::detach_conn(qp.qp());
            Qp::enter_error(qp.qp(), None);
            return Err(e);
        }
        let id = id.take().ok_or(EINVAL)?;
        report(&id);
        // Checked after the callbacks and the QP's doorbell moved here: data or a FIN that
        // comes later calls them, a post later rings.
        let idle = !sock.rx_queued()
            && sock.state() == tcp_state::ESTABLISHED
            && !this.rx.lock().session.transmit_pending()
            && !Qp::sq_posted(qp.qp());
        g.drained = idle;
        g.sock = Some(sock);
        g.qp = Some(qp);
        g.id = Some(id);
        Self::arm_timer(this, &mut g);
        Ok(idle)
    }

    /// The connection's IRD and ORD (RDMA Read depths, inbound and outbound).
    pub(crate) fn ird_ord(&self) -> (u32, u32) {
        (self.ird, self.ord)
    }

    /// Writes the connection's details for `rdma resource show qp -d` to `out`: MPA
    /// revision (`mpa_rev`), CRC (`mpa_crc`), markers sent and received
    /// (`mpa_markers_tx`, `mpa_markers_rx`), peer-to-peer model (`p2p`), large FPDUs
    /// towards the peer (`large_fpdu`), TCP MSS and MULPDU in octets (`mss`, `mulpdu`),
    /// IRD and ORD (`ird`, `ord`), and the FPDUs and octets sent and received
    /// (`tx_fpdus`, `tx_octets`, `rx_fpdus`, `rx_octets`).
    ///
    /// # Errors
    ///
    /// `EMSGSIZE` when the message is full.
    pub(crate) fn res_attrs(&self, out: &mut ResAttrs<'_>) -> Result {
        let f = &self.framing;
        out.u32(c"mpa_rev", f.rev.into())?;
        out.u32(c"mpa_crc", f.crc.into())?;
        out.u32(c"mpa_markers_tx", f.markers_tx.into())?;
        out.u32(c"mpa_markers_rx", f.markers_rx.into())?;
        out.u32(c"p2p", f.p2p.into())?;
        out.u32(c"large_fpdu", f.large_fpdu.into())?;
        out.u32(c"mss", f.mss)?;
        out.u32(c"mulpdu", f.mulpdu)?;
        out.u32(c"ird", self.ird)?;
        out.u32(c"ord", self.ord)?;
        let rx_fpdus = self.rx.lock().session.decoder().mpa().fpdus();
        out.u64(c"tx_fpdus", self.tx_fpdus.load(Ordering::Relaxed))?;
        out.u64(c"tx_octets", self.tx_octets.load(Ordering::Relaxed))?;
        out.u64(c"rx_fpdus", rx_fpdus)?;
        out.u64(c"rx_octets", self.rx_octets.load(Ordering::Relaxed))
    }

    /// The session's clock: milliseconds since the connection was established, from the
    /// jiffies clock, which costs a load where `ktime_get()` reads the clocksource (it is
    /// read for every received chunk and sent message). It may lag by up to a jiffy.
    pub(crate) fn now_ms(&self) -> u64 {
        crate::sys::jiffies_ms().wrapping_sub(self.epoch)
    }

    /// Arms the timer for the session's next deadline, if it changed or the timer fired (a
    /// timer armed for an earlier deadline is cancelled).
    fn arm_timer(this: &Arc<Self>, g: &mut Inner) {
        let due = match g.tx.idle_due.take() {
            Some(due) => due,
            None => this.rx.lock().session.poll_timeout(),
        };
        // Read before swapped: the timer rarely fires, and the swap is a locked operation.
        let fired = this.timer_fired.load(Ordering::Relaxed)
            && this.timer_fired.swap(false, Ordering::Relaxed);
        if !fired && g.timer.as_ref().map(|(d, _)| *d) == due {
            return;
        }
        // Cancels the old timer (waiting for a running callback, which takes no lock).
        g.timer = None;
        if let Some(d) = due {
            // One jiffy more, so that `now_ms()`, which lags the timer's clock by up to a
            // jiffy, has reached `d` when the timer fires and the work item runs.
            let ms = d.saturating_sub(this.now_ms()) + crate::sys::jiffy_ms();
            g.timer = Some((d, Armed::after(this.clone(), ms)));
        }
    }

    /// Queues the work item (kernel consumers' `post_send`, socket events).
    pub(crate) fn kick(self: &Arc<Self>) {
        let _ = crate::sys::queue().enqueue(self.clone());
    }

    /// The POST_SEND doorbell of a user QP, in the consumer's syscall (process context,
    /// no lock held): if nothing else is working on the connection, sends up to
    /// [`DOORBELL_OCTETS`] of the SQ's ULPDUs here and queues the work item only if more is
    /// left. Otherwise (the work item or another doorbell holds the connection) it queues
    /// the work item, which then runs after the current holder and sees the new SQEs.
    ///
    /// With RDMA Reads outstanding it only queues the work item: their Read Responses may
    /// be streaming in, and a burst sent here owns the socket in the consumer's thread, so
    /// that thread, at normal priority, places the Read Responses that arrived meanwhile
    /// from the socket's backlog. On one CPU with the Responder (a loopback or a guest's
    /// two namespaces), the Responder's work item preempts it there and adds to that
    /// backlog, which TCP counts against the receive window until it is empty: the window
    /// closes and the Reads slow down (1 MiB `ib_read_bw`: 250-490 MB/s from run to run,
    /// 480-530 with the work item sending).
    pub(crate) fn doorbell(self: &Arc<Self>) {
        if self.reads_outstanding.load(Ordering::Relaxed) {
            self.kick();
            return;
        }
        let Some(mut g) = self.inner.try_lock() else {
            self.kick();
            return;
        };
        if g.closed {
            return;
        }
        if Self::transmit(self, &mut g, self.doorbell_fpdus.into()) {
            self.kick();
        }
        if !g.closed {
            // A local error may have made a TERMINATE due, with its deadline.
            Self::arm_timer(self, &mut g);
        }
    }

    /// Enforces the QP's access flags `flags` (`enum ib_access_flags`) on what the peer
    /// sends from its next segment on: RDMA Writes need `REMOTE_WRITE`, Read Requests
    /// `REMOTE_READ`, whatever the memory grants ([`Session::set_qp_access`]).
    ///
    /// [`Session::set_qp_access`]: crate::engine::session::Session::set_qp_access
    pub(crate) fn set_qp_access(&self, flags: u32) {
        let has = |f: u32| flags & f != 0;
        let access = QpAccess {
            write: has(access::REMOTE_WRITE),
            read: has(access::REMOTE_READ),
            atomic: has(access::REMOTE_ATOMIC),
        };
        self.rx.lock().session.set_qp_access(access);
    }

    /// Closes the connection from the consumer's side (disconnect or QP destroy):
    /// the socket is shut down and released, the QP enters ERROR (flushing its WQEs),
    /// iw_cm gets CLOSE, and the QP and `iw_cm_id` references are dropped before this
    /// returns.
    pub(crate) fn close(&self) {
        let mut g = self.inner.lock();
        Self::close_locked(self, &mut g, Reason::Local);
    }

    fn close_locked(this: &Conn, g: &mut Inner, why: Reason) {
        if g.closed {
            return;
        }
        g.closed = true;
        pr_dbg!("{}: connection closed: {}", this.tag, why.words());
        // Releases the timer's reference to the connection.
        g.timer = None;
        if let Some(mut s) = g.sock.take() {
            // Detached first: the shutdown's own state change would queue the work item
            // only to find the connection closed. No callback runs after this.
            s.detach();
            s.shutdown();
        }
        // Nothing more goes to the socket: the FPDU in flight lets go of the memory it
        // refers to before the WRs complete (`Conn::flush_held`).
        g.tx.fpdu = None;
        g.tx.bufs.clear();
        // The receive half lets go of the QP and of the work requests it holds.
        let (rx_qp, reads, msg) = {
            let mut r = this.rx.lock();
            this.reads_outstanding.store(false, Ordering::Relaxed);
            (r.qp.take(), core::mem::take(&mut r.reads_out), r.msg.take())
        };
        let qp = g.qp.take();
        if let Some(qp) = &qp {
            Qp::detach_conn(qp.qp());
            // Work requests still held here complete with a flush error.
            Self::flush_held(g, qp, reads, msg);
            Qp::enter_error(qp.qp(), why.event());
        }
        if let Some(id) = g.id.take() {
            if why == Reason::PeerClosed {
                let _ = id.event(&CmEvent::simple(CmEventKind::Disconnect, 0));
            }
            let status = match why {
                Reason::Reset => ECONNRESET.to_errno(),
                _ => 0,
            };
            let _ = id.event(&CmEvent::simple(CmEventKind::Close, status));
        }
        g.tx.job = None;
        g.tx.copy.release();
        drop(qp);
        drop(rx_qp);
    }

    /// A TERMINATE of ours is due (RFC 5040 §7.1): the QP enters ERROR now, reporting
    /// `why`'s event, the message being sent is abandoned, and the work requests the
    /// connection holds complete with a flush error, so that a peer that stops reading
    /// cannot keep them unflushed. The connection itself stays until the session closes
    /// (the TERMINATE queued, or its deadline passed).
    fn fail_qp(this: &Conn, g: &mut Inner, why: Reason) {
        // The TERMINATE itself may be the message in progress already (the receive half
        // made it due after this side last looked): it goes on.
        if g.tx.job.is_some() && !matches!(g.tx.job, Some((JobKind::Terminate, _))) {
            g.tx.ddp.abort();
        }
        // The FPDU TCP took in part is finished from a copy of its own, so that the WR it
        // came from can complete now and the TERMINATE still follow it; without the
        // memory for that copy, the connection closes here (no TERMINATE can follow an
        // FPDU cut short). One TCP took nothing of is dropped (unless it is our
        // TERMINATE's).
        let terminating = matches!(g.tx.job, Some((JobKind::Terminate, _)));
        let t = &mut *g.tx;
        if t.fpdu
            .as_ref()
            .is_some_and(|f| f.untouched() && !terminating)
        {
            t.fpdu = None;
            t.bufs.clear();
        }
        if let Some(f) = t.fpdu.as_mut() {
            if let Err(e) = f.detach(&mut t.bufs) {
                pr_warn_ratelimited!(
                    "{}: closing without TERMINATE: cannot keep the FPDU in flight ({e:?})\n",
                    this.tag
                );
                Self::close_locked(this, g, why);
                return;
            }
        }
        let Some(qp) = g.qp.take() else { return };
        let (reads, msg) = {
            let mut r = this.rx.lock();
            this.reads_outstanding.store(false, Ordering::Relaxed);
            (core::mem::take(&mut r.reads_out), r.msg.take())
        };
        Self::flush_held(g, &qp, reads, msg);
        Qp::enter_error(qp.qp(), why.event());
        g.qp = Some(qp);
    }

    /// Completes the WQEs the connection holds outside the SQ with a flush error: the
    /// outstanding RDMA Reads, the receive WQE being placed into and the send WQE being
    /// sent (any other message in progress is dropped, but our TERMINATE).
    ///
    /// The FPDU in flight (`g.tx.fpdu`) must refer to no memory of these WQEs any more
    /// (dropped, or [`TxFpdu::detach`]ed): nothing is read from a WR's memory after its
    /// completion (`conn/tx_fpdu.rs`).
    fn flush_held(
        g: &mut Inner,
        qp: &QpRef<Device>,
        mut reads: KVec<crate::wqe::SendDone>,
        msg: Option<RxMsg>,
    ) {
        let flush = WcStatus::WrFlushErr;
        for w in reads.drain_all() {
            Qp::complete_send(qp.qp(), &w, flush, 0);
        }
        if let Some(m) = msg {
            Qp::complete_recv(qp.qp(), m.id, flush, 0, None, false);
        }
        match g.tx.job.take() {
            // Released from the SQ when it started.
            Some((JobKind::Sqe(w), _)) => Qp::complete_send(qp.qp(), &w, flush, 0),
            // Our TERMINATE is still to be sent.
            Some(job @ (JobKind::Terminate, _)) => g.tx.job = Some(job),
            _ => {}
        }
    }

    /// Acts on the session's lifecycle events: the QP fails when our TERMINATE is due,
    /// and the connection closes when the session did.
    fn sync_session(this: &Conn, g: &mut Inner) {
        while !g.closed {
            let Some(ev) = this.rx.lock().session.poll_event() else {
                return;
            };
            Self::session_event(this, g, ev);
        }
    }

    /// Acts on the session's event `ev` (see [`Conn::sync_session`]).
    fn session_event(this: &Conn, g: &mut Inner, ev: Event) {
        match ev {
            Event::Failed(cause) => {
                // Once per connection, whoever found the error (the receive path, the
                // transmit path, a timer).
                pr_warn_ratelimited!("{}: sending TERMINATE: {}\n", this.tag, CauseText(cause));
                if cause == TermCause::mpa(MpaErrorCode::CrcMismatch) {
                    if let Some(qp) = g.qp.as_ref() {
                        qp.device().count(Stat::CrcErrors, 1);
                    }
                }
                Self::fail_qp(this, g, Reason::of_terminate(&cause))
            }
            Event::Closed(c) => {
                let why = match c {
                    Close::PeerTerminated(_) => Reason::Terminated,
                    Close::Terminated(cause) => Reason::of_terminate(&cause),
                    Close::TerminateTimedOut(cause) => {
                        pr_warn_ratelimited!(
                            "{}: TERMINATE not sent within mpa_timeout_ms, closing\n",
                            this.tag
                        );
                        Reason::of_terminate(&cause)
                    }
                };
                Self::close_locked(this, g, why);
            }
        }
    }

    fn run_locked(this: &Arc<Self>, g: &mut Inner) {
        if g.closed {
            return;
        }
        // What the data-ready callback has not read: data that came with the MPA frames,
        // before the callback was attached (first run), and, before a FIN is acted on
        // below, anything still queued. Other runs leave the socket to the callback.
        if let Some(sock) = g.sock.as_ref() {
            if !g.drained || sock.state() != tcp_state::ESTABLISHED {
                this.receive(sock, SockLock::Take);
            }
            g.drained = true;
        }
        let now = this.now_ms();
        {
            let mut r = this.rx.lock();
            if r.session.poll_timeout().is_some_and(|d| d <= now) {
                if r.session.state() == crate::engine::session::SessionState::Active
                    && crate::sys::ratelimit()
                {
                    pr_warn!(
                        "{}: no peer-to-peer RTR within mpa_timeout_ms, sending TERMINATE\n",
                        this.tag
                    );
                }
                r.session.handle_timeout(now);
            }
        }
        if Self::transmit(this, g, TX_BURST) {
            this.kick();
        }
        if g.closed {
            return;
        }
        Self::arm_timer(this, g);
        // `receive` consumed everything queued, so a FIN seen now follows all data.
        match g.sock.as_ref().map(|s| s.state()) {
            Some(tcp_state::ESTABLISHED) | None => {}
            Some(tcp_state::CLOSE_WAIT) => {
                // The peer sent FIN; everything before it was processed above.
                if !this.rx.lock().session.decoder().at_fpdu_boundary() && crate::sys::ratelimit() {
                    pr_warn!(
                        "{}: the peer closed the connection inside an FPDU\n",
                        this.tag
                    );
                }
                Self::close_locked(this, g, Reason::PeerClosed);
            }
            Some(_) => Self::close_locked(this, g, Reason::Reset),
        }
    }
}

impl SockEvents for Conn {
    fn event(this: ArcBorrow<'_, Self>, sock: SockRef<'_>, ev: SockEvent) {
        // Data is placed right here, in the receive path; the work item runs only when
        // the transmit half has something to do or the socket's state changed.
        if ev == SockEvent::DataReady && !this.receive(&sock, SockLock::Held) {
            return;
        }
        let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
    }
}

impl WorkItem for Conn {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let mut g = this.inner.lock();
        Self::run_locked(&this, &mut g);
    }
}
