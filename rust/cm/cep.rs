// SPDX-License-Identifier: GPL-2.0

//! Connection endpoints: MPA startup on one TCP connection, active (`iw_connect`) or
//! passive (accepted by a [`Listener`]), until the connection is handed to the QP's
//! transport ([`Conn`]) or closed.

use super::{detail, IdState, Listener, TermSink};
use crate::conn::{Conn, Terms};
use crate::device::{Device, Stat, Stats};
use crate::engine::ddp_tx::DdpTx;
use crate::engine::startup::{Action, Startup, Status};
use crate::limits::MAX_IRD_ORD;
use crate::logtag::Tag;
use crate::settings::Snapshot;
use crate::sys::ibdev::{CepOps, IbDevice};
use crate::sys::iwcm::{CmEvent, CmEventKind, CmId, ConnParam};
use crate::sys::net::socket::{
    tcp_state, SockAddr, SockEvent, SockEvents, SockLock, SockRef, Socket,
};
use crate::sys::Live;
use crate::sys::{pr_dbg, pr_warn_ratelimited};
use crate::timer::Armed;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::impl_has_hr_timer;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, ArcBorrow, Mutex};
use kernel::time::hrtimer::{
    HrTimer, HrTimerCallback, HrTimerCallbackContext, HrTimerRestart, RelativeMode,
};
use kernel::time::Monotonic;
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// Where a CEP is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CepState {
    /// Active: MPA Request sent (or being sent), waiting for the Reply.
    AwaitReply,
    /// Passive: waiting for the peer's MPA Request.
    AwaitRequest,
    /// Passive: CONNECT_REQUEST reported, waiting for the consumer's accept or reject.
    AwaitAccept,
    /// Passive, seed draft mode: accepted (Reply with S=1 sent), waiting for the
    /// Initiator's Rtr frame before the transport starts and ESTABLISHED is reported.
    AwaitRtr,
    /// Startup done; the connection belongs to the transport (or is being handed over).
    Established,
    /// Failed, rejected or closed; the socket is gone.
    Closed,
}

/// The mutable part of a CEP.
struct Inner {
    state: CepState,
    sock: Option<Socket>,
    startup: Option<KBox<Startup>>,
    /// Active: the connecting id. Passive: the new id once accepted.
    id: Option<CmId<Device>>,
    /// Passive: the listener, until CONNECT_REQUEST is reported.
    listener: Option<Arc<Listener>>,
    /// The socket's local and peer addresses.
    addrs: Option<(SockAddr, SockAddr)>,
    /// Active: the consumer's QP number, IRD and ORD from `iw_connect`.
    qpn: u32,
    ird: u32,
    ord: u32,
    /// The running MPA startup timer (AwaitRequest, AwaitReply); dropping it cancels it.
    timer: Option<Armed<Cep>>,
    /// The device's counters.
    stats: Arc<Stats>,
    /// The device's settings when the CEP started.
    settings: Snapshot,
}

impl Inner {
    /// Shows the CEP's state, QP and Read depths in the details of the id it holds
    /// (`rdma resource show cm_id -dd`).
    fn publish(&self) {
        let Some(d) = self.id.as_ref().and_then(|id| id.details()) else {
            return;
        };
        let state = match self.state {
            CepState::AwaitReply => IdState::AwaitReply,
            CepState::AwaitRtr => IdState::AwaitRtr,
            CepState::Established => IdState::Established,
            CepState::Closed => IdState::Closed,
            // The id is the listener's until the consumer accepts.
            CepState::AwaitRequest | CepState::AwaitAccept => return,
        };
        d.set(detail::STATE, state as u32);
        d.set(detail::QPN, self.qpn);
        d.set(detail::IRD, self.ird);
        d.set(detail::ORD, self.ord);
    }

    /// What this CEP's kernel messages start with: the device (once an id is known), the
    /// QP (once a consumer named one) and the peer ("rsiw0 qp 17 10.0.0.2:4791").
    fn tag(&self) -> Tag {
        let qpn = (self.qpn != 0).then_some(self.qpn);
        let peer = self.addrs.as_ref().map(|a| &a.1);
        match self.id.as_ref().or(self.listener.as_ref().map(|l| &l.id)) {
            Some(id) => id.with_device(|d| Tag::new(d, qpn, peer)),
            None => Tag::without_device(qpn, peer),
        }
    }
}

/// A connection endpoint (see the module documentation).
#[pin_data]
pub(crate) struct Cep {
    #[pin]
    inner: Mutex<Inner>,
    #[pin]
    work: Work<Cep>,
    #[pin]
    timer: HrTimer<Cep>,
    /// Set by the startup timer (interrupt context); the work item acts on it.
    timed_out: AtomicBool,
    /// Set when the listener, at its limit of pending connections, let go of this one
    /// ([`Listener::adopt`]); the work item closes it if it still waits for its Request.
    evicted: AtomicBool,
    _live: Live,
}

impl_has_work! {
    impl HasWork<Self> for Cep { self.work }
}

impl_has_hr_timer! {
    impl HasHrTimer<Self> for Cep {
        mode: RelativeMode<Monotonic>, field: self.timer
    }
}

impl HrTimerCallback for Cep {
    type Pointer<'a> = Arc<Self>;

    fn run(this: ArcBorrow<'_, Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        this.timed_out.store(true, Ordering::Release);
        let _ = crate::sys::cm_queue().enqueue(Arc::<Self>::from(this));
        HrTimerRestart::NoRestart
    }
}

impl Cep {
    fn new(
        state: CepState,
        id: Option<CmId<Device>>,
        listener: Option<Arc<Listener>>,
        stats: Arc<Stats>,
        settings: Snapshot,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                inner <- new_mutex!(Inner {
                    state,
                    sock: None,
                    startup: None,
                    id,
                    listener,
                    addrs: None,
                    qpn: 0,
                    ird: 0,
                    ord: 0,
                    timer: None,
                    stats,
                    settings,
                }),
                work <- new_work!("rsiw_cep"),
                timer <- HrTimer::new(),
                timed_out: AtomicBool::new(false),
                evicted: AtomicBool::new(false),
                _live: Live::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// A connection accepted by `listener`: waits for the peer's MPA Request.
    pub(super) fn passive(listener: Arc<Listener>, mut sock: Socket, lsock: &Socket) -> Result {
        let (stats, settings) = listener
            .id
            .with_device(|d| (d.stats(), d.settings.snapshot()));
        let startup = KBox::new(
            Startup::responder(settings.startup_config(0x3FFE, 0x3FFE)).map_err(|_| EINVAL)?,
            GFP_KERNEL,
        )?;
        let addrs = (sock.local_addr()?, sock.peer_addr()?);
        stats.count(Stat::IncomingConnections, 1);
        pr_dbg!(
            "{}: incoming TCP connection to {}, waiting for its MPA Request",
            listener
                .id
                .with_device(|d| Tag::new(d, None, Some(&addrs.1))),
            addrs.0
        );
        let cep = Self::new(
            CepState::AwaitRequest,
            None,
            Some(listener.clone()),
            stats,
            settings,
        )?;
        if !listener.adopt(&cep) {
            return Err(ECONNABORTED);
        }
        {
            // Attached under the CEP's lock: the work item that the socket's first event
            // queues (the peer may send its MPA Request at once) waits until the CEP holds
            // the socket and its startup engine, instead of finding neither and closing.
            let mut g = cep.inner.lock();
            if let Err(e) = sock.attach(cep.clone(), Some(lsock)) {
                drop(g);
                listener.forget(&cep);
                return Err(e);
            }
            g.sock = Some(sock);
            g.startup = Some(startup);
            g.addrs = Some(addrs);
            Self::arm_timer(&cep, &mut g);
        }
        // Data may have arrived before the attachment.
        let _ = crate::sys::cm_queue().enqueue(cep);
        Ok(())
    }

    fn do_connect(dev: &IbDevice<Device>, id: CmId<Device>, param: ConnParam) -> Result {
        let ndev = dev.netdev().ok_or(ENODEV)?;
        let ird = param.ird.min(MAX_IRD_ORD);
        let ord = param.ord.min(MAX_IRD_ORD);
        let settings = dev.settings.snapshot();
        let cfg = settings.startup_config(ird, ord);
        let startup = Startup::initiator(cfg, &param.private_data).map_err(|e| {
            pr_warn_ratelimited!(
                "{}: connect: cannot build the MPA Request ({e:?})\n",
                Tag::new(dev, Some(param.qpn), Some(&id.mapped_remote_addr()))
            );
            EINVAL
        })?;
        let startup = KBox::new(startup, GFP_KERNEL)?;
        let remote = id.mapped_remote_addr();
        let tag = || Tag::new(dev, Some(param.qpn), Some(&remote));
        let mut sock = Socket::tcp(ndev.net(), remote.family())?;
        if let Some(tos) = id.tos() {
            sock.set_tos(tos)?;
        }
        let local = id.mapped_local_addr();
        sock.bind(&local).inspect_err(|e| {
            pr_warn_ratelimited!("{}: connect: bind to {local} failed ({e:?})\n", tag());
        })?;
        dev.count(Stat::ConnectAttempts, 1);
        sock.connect(&remote).inspect_err(|e| {
            pr_warn_ratelimited!("{}: connect: TCP connect failed ({e:?})\n", tag());
        })?;
        let addrs = (sock.local_addr()?, sock.peer_addr()?);
        pr_dbg!(
            "{}: TCP connected from {}, sending the MPA Request",
            tag(),
            addrs.0
        );
        let cep = Self::new(CepState::AwaitReply, Some(id), None, dev.stats(), settings)?;
        {
            // Attached under the CEP's lock, as in `passive`: an early event of the socket
            // (data or a reset from the peer) finds the CEP set up.
            let mut g = cep.inner.lock();
            if let Err(e) = sock.attach(cep.clone(), None) {
                // No event is owed on the id: iw_connect fails.
                g.id = None;
                return Err(e);
            }
            g.sock = Some(sock);
            g.startup = Some(startup);
            g.addrs = Some(addrs);
            g.qpn = param.qpn;
            g.ird = ird;
            g.ord = ord;
            g.publish();
            Self::arm_timer(&cep, &mut g);
            if let Err(e) = Self::flush_tx(&mut g) {
                // iw_connect fails: no event is owed on the id, so the CEP lets go of it
                // before its timer could report a CONNECT_REPLY.
                g.id = None;
                Self::close_locked(&cep, &mut g);
                return Err(e);
            }
        }
        let _ = crate::sys::cm_queue().enqueue(cep);
        Ok(())
    }

    fn do_accept(this: &Arc<Self>, g: &mut Inner, id: CmId<Device>, param: &ConnParam) -> Result {
        let tag = |g: &Inner| id.with_device(|d| Tag::new(d, None, g.addrs.as_ref().map(|a| &a.1)));
        if id.qp_ref(param.qpn).is_none() {
            pr_warn_ratelimited!("{}: accept: no QP {}\n", tag(g), param.qpn);
            return Err(EINVAL);
        }
        let ird = param.ird.min(MAX_IRD_ORD);
        let ord = param.ord.min(MAX_IRD_ORD);
        let st = g.startup.as_mut().ok_or(EINVAL)?;
        st.set_local_ird_ord(ird as u16, ord as u16);
        st.accept(&param.private_data).map_err(|e| {
            pr_warn_ratelimited!("{}: accept: cannot build the MPA Reply ({e:?})\n", tag(g));
            EINVAL
        })?;
        Self::flush_tx(g).map_err(|_| ECONNRESET)?;
        g.id = Some(id);
        g.qpn = param.qpn;
        g.ird = ird;
        g.ord = ord;
        let st = g.startup.as_ref().ok_or(EINVAL)?;
        match st.status() {
            Status::Established => Self::passive_established(g),
            Status::AwaitingRtr => {
                // Seed draft: the transport starts once the Rtr frame arrived (the work
                // item); it may be in the socket already.
                g.state = CepState::AwaitRtr;
                g.publish();
                Self::arm_timer(this, g);
                let _ = crate::sys::cm_queue().enqueue(this.clone());
                Ok(())
            }
            other => {
                pr_warn_ratelimited!(
                    "{}: accept: MPA startup did not complete ({other:?})\n",
                    g.tag()
                );
                Err(EINVAL)
            }
        }
    }

    /// Passive side, MPA startup complete (after the Reply, or the draft Rtr frame): the
    /// transport takes the connection on the accepting QP and iw_cm gets ESTABLISHED.
    fn passive_established(g: &mut Inner) -> Result {
        Self::hand_over(g, CmEventKind::Established)
    }

    /// MPA startup complete: the transport takes the connection on the consumer's QP, with
    /// the IRD and ORD the peers agreed (RFC 6581 §9.1) or else the consumer's, and iw_cm
    /// gets `kind`: ESTABLISHED on the passive side, CONNECT_REPLY with status 0 and the
    /// peer's private data on the active side.
    fn hand_over(g: &mut Inner, kind: CmEventKind) -> Result {
        let st = g.startup.as_ref().ok_or(EINVAL)?;
        let n = *st.negotiated().ok_or(EINVAL)?;
        let qp =
            g.id.as_ref()
                .and_then(|id| id.qp_ref(g.qpn))
                .ok_or(EINVAL)?;
        let (ird, ord) = n
            .ird_ord
            .map_or((g.ird, g.ord), |x| (u32::from(x.ird), u32::from(x.ord)));
        let sock = g.sock.take().ok_or(ENOTCONN)?;
        let addrs = g.addrs;
        g.startup = None;
        g.state = CepState::Established;
        g.timer = None;
        g.publish();
        if let Some(d) = g.id.as_ref().and_then(|id| id.details()) {
            d.set(detail::MPA_REV, n.rev.into());
            d.set(detail::MPA_CRC, n.crc.into());
            d.set(detail::MPA_MARKERS_TX, n.markers_tx.into());
            d.set(detail::MPA_MARKERS_RX, n.markers_rx.into());
            d.set(detail::P2P, n.p2p.into());
            // As the connection's session uses them.
            d.set(detail::IRD, ird.min(MAX_IRD_ORD));
            d.set(detail::ORD, ord.min(MAX_IRD_ORD));
        }
        // The passive consumer's own private data went out in the Reply.
        let private_data = match kind {
            CmEventKind::ConnectReply => n.private_data.as_slice(),
            _ => &[],
        };
        let terms = Terms {
            n: &n,
            settings: g.settings,
            ird,
            ord,
        };
        Conn::establish(qp, sock, &mut g.id, &terms, |id| {
            let ev = CmEvent {
                kind,
                status: 0,
                addrs,
                private_data,
                ird,
                ord,
            };
            let _ = id.event(&ev);
        })?;
        Ok(())
    }

    /// Sends what the startup engine has pending (the socket buffer takes a whole startup
    /// frame: at most 532 octets).
    fn flush_tx(g: &mut Inner) -> Result {
        let (Some(sock), Some(st)) = (g.sock.as_mut(), g.startup.as_mut()) else {
            return Err(ENOTCONN);
        };
        while !st.tx_pending().is_empty() {
            let n = sock.send(&[st.tx_pending()], false)?;
            st.tx_advance(n);
        }
        Ok(())
    }

    /// Feeds what the socket holds to the startup engine; returns its status. The peer
    /// counts as gone (startup fails unless it ended) only if its FIN or reset came before
    /// the read began: everything it sent before that is then in the receive queue.
    fn receive(g: &mut Inner) -> Status {
        let (Some(sock), Some(st)) = (g.sock.as_ref(), g.startup.as_mut()) else {
            return Status::Rejected;
        };
        // Sampled before the read: a frame and FIN that arrive while it holds the socket
        // lock wait in the socket's backlog, and its release queues both at once, so a
        // state seen afterwards may follow data this read never saw (the data-ready
        // event queues the work item again for it).
        let peer_gone = matches!(sock.state(), tcp_state::CLOSE | tcp_state::CLOSE_WAIT);
        let mut buf = [0u8; 128];
        let _ = sock.read(SockLock::Take, |chunk| {
            let mut used = 0;
            while used < chunk.len() {
                let n = (chunk.len() - used).min(buf.len());
                if chunk.copy_to(used, &mut buf[..n]).is_err() {
                    break;
                }
                match st.feed(&buf[..n]) {
                    Ok(k) => {
                        used += k;
                        if k < n {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            used
        });
        if peer_gone
            && !matches!(
                st.status(),
                Status::Established | Status::Rejected | Status::Failed(_)
            )
        {
            let _ = st.peer_closed();
        }
        st.status()
    }

    /// Active side, MPA Reply accepted: the transport takes the connection and the
    /// consumer gets CONNECT_REPLY with status 0 and the peer's private data.
    fn connected(g: &mut Inner) -> Result {
        // Seed draft mode: the engine queued the Rtr frame behind the Reply it accepted.
        Self::flush_tx(g)?;
        Self::hand_over(g, CmEventKind::ConnectReply)
    }

    /// The Initiator cannot accept the Reply's peer-to-peer negotiation (no matching RTR,
    /// insufficient IRD: the startup engine failed with [`Action::Terminate`]): sends,
    /// instead of the RTR, the TERMINATE (LLP, MPA error) framed as negotiated, without
    /// waiting (RFC 6581 §9.2, §9.3). The caller closes the connection next; the TERMINATE
    /// is best-effort.
    fn send_startup_terminate(g: &mut Inner) {
        let (Some(sock), Some(st)) = (g.sock.as_mut(), g.startup.as_ref()) else {
            return;
        };
        let (Status::Failed(e), Some(n)) = (st.status(), st.negotiated()) else {
            return;
        };
        if e.action != Action::Terminate {
            return;
        }
        let mut sink = TermSink {
            buf: [0; TermSink::LEN],
            len: 0,
            overflow: false,
        };
        let framed = DdpTx::startup_terminate(n, sock.mss().max(140), e.code, &mut sink);
        if let (Ok(_), false, Some(fpdu)) = (framed, sink.overflow, sink.buf.get(..sink.len)) {
            let _ = sock.send(&[fpdu], false);
        }
    }

    /// Starts the MPA startup timer (the device's `mpa_timeout_ms`) for the state just
    /// entered: the peer's Request or Reply must arrive in time.
    fn arm_timer(this: &Arc<Self>, g: &mut Inner) {
        // Always armed: a half-open connection must end before the module can unload
        // (its socket callbacks are module code).
        g.timer = Some(Armed::after(this.clone(), g.settings.timeout_ms()));
    }

    /// Its listener let go of it to make room for a newer connection: the work item
    /// closes it, silently, if it still waits for the MPA Request.
    pub(super) fn evict(this: Arc<Self>) {
        this.evicted.store(true, Ordering::Release);
        let _ = crate::sys::cm_queue().enqueue(this);
    }

    /// Its listener is being destroyed: closes the CEP, silently, if it still waits for
    /// the MPA Request (no consumer knows it).
    pub(super) fn close_pending(this: &Arc<Self>) {
        let mut g = this.inner.lock();
        if g.state == CepState::AwaitRequest {
            Self::close_locked(this, &mut g);
        }
    }

    fn close_locked(this: &Arc<Self>, g: &mut Inner) {
        // Cancels the timer (its callback takes no lock); the caller holds a reference,
        // so this is not the CEP's last.
        g.timer = None;
        g.state = CepState::Closed;
        g.publish();
        if let Some(s) = g.sock.as_mut() {
            s.shutdown();
        }
        g.sock = None;
        g.startup = None;
        if let Some(l) = g.listener.take() {
            l.forget(this);
        }
    }

    /// An accepted connection failed before it was established (draft mode: no valid Rtr
    /// frame): iw_cm's id waits for ESTABLISHED (a CLOSE before it is not allowed), so it
    /// gets ESTABLISHED and then CLOSE with `-ECONNRESET`; the QP never entered RTS.
    fn fail_accepted(this: &Arc<Self>, g: &mut Inner) {
        let addrs = g.addrs;
        Self::close_locked(this, g);
        if let Some(id) = g.id.take() {
            let est = CmEvent {
                kind: CmEventKind::Established,
                status: 0,
                addrs,
                private_data: &[],
                ird: 0,
                ord: 0,
            };
            let _ = id.event(&est);
            let _ = id.event(&CmEvent::simple(CmEventKind::Close, ECONNRESET.to_errno()));
        }
    }

    /// The MPA startup timer fired: a passive CEP without the peer's Request closes
    /// silently (no consumer knows it yet), an active one reports CONNECT_REPLY with
    /// `-ETIMEDOUT`. Returns whether the CEP closed.
    fn timed_out(this: &Arc<Self>, g: &mut Inner) -> bool {
        if !this.timed_out.swap(false, Ordering::AcqRel) {
            return false;
        }
        if matches!(
            g.state,
            CepState::AwaitRequest | CepState::AwaitReply | CepState::AwaitRtr
        ) {
            g.stats.count(Stat::MpaTimeouts, 1);
        }
        match g.state {
            CepState::AwaitRequest => {
                pr_warn_ratelimited!(
                    "{}: no MPA Request within mpa_timeout_ms, closing\n",
                    g.tag()
                );
                Self::close_locked(this, g);
                true
            }
            CepState::AwaitReply => {
                pr_warn_ratelimited!("{}: no MPA Reply within mpa_timeout_ms\n", g.tag());
                Self::fail_connect(this, g, ETIMEDOUT.to_errno(), &[]);
                true
            }
            CepState::AwaitRtr => {
                pr_warn_ratelimited!("{}: no Rtr frame within mpa_timeout_ms\n", g.tag());
                Self::fail_accepted(this, g);
                true
            }
            // Answered in time; the timer raced with its cancellation.
            _ => false,
        }
    }

    /// The work item, under the CEP's lock: acts on an expired startup timer, or else
    /// takes the step of MPA startup the CEP's state waits for.
    fn run_locked(this: &Arc<Self>, g: &mut Inner) {
        if Self::timed_out(this, g) {
            return;
        }
        if this.evicted.swap(false, Ordering::AcqRel) && g.state == CepState::AwaitRequest {
            return Self::close_locked(this, g);
        }
        match g.state {
            CepState::AwaitRequest => Self::await_request(this, g),
            CepState::AwaitReply => Self::await_reply(this, g),
            CepState::AwaitRtr => Self::await_rtr(this, g),
            CepState::AwaitAccept => Self::close_if_peer_left(this, g),
            CepState::Established | CepState::Closed => {}
        }
    }

    /// Passive, waiting for the peer's MPA Request: reports it once it is complete;
    /// closes the CEP if startup ended otherwise.
    fn await_request(this: &Arc<Self>, g: &mut Inner) {
        match Self::receive(g) {
            Status::RequestReceived => Self::report_request(this, g),
            Status::AwaitingRequest => {}
            other => {
                pr_warn_ratelimited!("{}: MPA startup (responder) ended: {other:?}\n", g.tag());
                Self::close_locked(this, g)
            }
        }
    }

    /// The peer's MPA Request arrived: the CEP leaves its listener's pending CEPs, is
    /// reported to the listening id with CONNECT_REQUEST (whose new id then owns it) and
    /// waits for the consumer's accept or reject.
    fn report_request(this: &Arc<Self>, g: &mut Inner) {
        let Some(l) = g.listener.take() else {
            return Self::close_locked(this, g);
        };
        // From here the new iw_cm_id owns the CEP (or it closes). A CEP its listener
        // let go of (evicted, or the listener is being destroyed) is not reported.
        if !l.forget(this) {
            return Self::close_locked(this, g);
        }
        let Some(peer) = g.startup.as_ref().and_then(|s| s.peer().copied()) else {
            return Self::close_locked(this, g);
        };
        // MPA revision 1 carries no IRD/ORD (RFC 6581 §1): the device limits are
        // reported, so a consumer accepting with its defaults can still issue RDMA Reads;
        // the ULP agrees the real limits out of band.
        let (ird, ord) = peer.enhanced.map_or((MAX_IRD_ORD, MAX_IRD_ORD), |e| {
            (u32::from(e.ird), u32::from(e.ord))
        });
        let ev = CmEvent {
            kind: CmEventKind::ConnectRequest,
            status: 0,
            addrs: g.addrs,
            private_data: peer.private_data.as_slice(),
            ird,
            ord,
        };
        g.state = CepState::AwaitAccept;
        g.timer = None;
        pr_dbg!(
            "{}: MPA Request received ({} octets of private data), reported to the listener",
            l.id.with_device(|d| Tag::new(d, None, g.addrs.as_ref().map(|a| &a.1))),
            peer.private_data.as_slice().len()
        );
        if l.id.connect_request(&ev, this.clone()).is_err() {
            Self::close_locked(this, g);
        }
    }

    /// Active, waiting for the MPA Reply: an accepted Reply hands the connection to the
    /// transport (which reports CONNECT_REPLY); a rejection, any other end of startup or
    /// a transport that cannot start fails the connect.
    fn await_reply(this: &Arc<Self>, g: &mut Inner) {
        let (code, pd): (i32, KVec<u8>) = match Self::receive(g) {
            Status::AwaitingReply => return,
            Status::Established => match Self::connected(g) {
                Ok(()) => return,
                Err(e) => {
                    pr_warn_ratelimited!(
                        "{}: connect: cannot start the transport ({e:?})\n",
                        g.tag()
                    );
                    (e.to_errno(), KVec::new())
                }
            },
            Status::Rejected => {
                g.stats.count(Stat::MpaRejectsReceived, 1);
                pr_dbg!(
                    "{}: the peer rejected the connection (MPA Reply with R)",
                    g.tag()
                );
                (ECONNREFUSED.to_errno(), Self::peer_private_data(g))
            }
            other => {
                pr_warn_ratelimited!("{}: MPA startup (initiator) ended: {other:?}\n", g.tag());
                Self::send_startup_terminate(g);
                (ECONNRESET.to_errno(), KVec::new())
            }
        };
        Self::fail_connect(this, g, code, &pd);
    }

    /// A copy of the private data of the peer's last MPA frame: empty if there is none,
    /// or without memory.
    fn peer_private_data(g: &Inner) -> KVec<u8> {
        let pd = g
            .startup
            .as_ref()
            .and_then(|s| s.peer())
            .map(|p| p.private_data.as_slice())
            .unwrap_or(&[]);
        let mut v = KVec::new();
        let _ = v.extend_from_slice(pd, GFP_KERNEL);
        v
    }

    /// The active connect failed: closes the CEP and reports CONNECT_REPLY with `code` (a
    /// negative errno) and `pd` (the peer's private data, if it rejected).
    fn fail_connect(this: &Arc<Self>, g: &mut Inner, code: i32, pd: &[u8]) {
        let addrs = g.addrs;
        Self::close_locked(this, g);
        if let Some(id) = g.id.take() {
            let ev = CmEvent {
                kind: CmEventKind::ConnectReply,
                status: code,
                addrs,
                private_data: pd,
                ird: 0,
                ord: 0,
            };
            let _ = id.event(&ev);
        }
    }

    /// Passive, seed draft mode, accepted: the Initiator's Rtr frame starts the transport
    /// (which reports ESTABLISHED); anything else fails the accepted connection.
    fn await_rtr(this: &Arc<Self>, g: &mut Inner) {
        match Self::receive(g) {
            Status::AwaitingRtr => {}
            Status::Established => {
                if let Err(e) = Self::passive_established(g) {
                    pr_warn_ratelimited!(
                        "{}: accept: cannot start the transport ({e:?})\n",
                        g.tag()
                    );
                    Self::fail_accepted(this, g);
                }
            }
            other => {
                pr_warn_ratelimited!(
                    "{}: MPA startup (responder) ended waiting for the Rtr frame: {other:?}\n",
                    g.tag()
                );
                Self::fail_accepted(this, g);
            }
        }
    }

    /// Passive, waiting for the consumer's accept or reject: closes the CEP if the peer
    /// left meanwhile.
    fn close_if_peer_left(this: &Arc<Self>, g: &mut Inner) {
        if matches!(
            g.sock.as_ref().map(|s| s.state()),
            Some(tcp_state::CLOSE | tcp_state::CLOSE_WAIT)
        ) {
            // The peer left before the consumer answered; accept or reject will fail
            // with EINVAL on the closed CEP.
            Self::close_locked(this, g);
        }
    }
}

impl CepOps<Device> for Cep {
    /// `iw_connect`: connects TCP (waiting), sends the MPA Request with the consumer's
    /// private data; the Reply is handled by the work item, which reports CONNECT_REPLY.
    fn connect(dev: &IbDevice<Device>, id: CmId<Device>, param: ConnParam) -> Result {
        let (qpn, remote) = (param.qpn, id.mapped_remote_addr());
        Self::do_connect(dev, id, param).inspect_err(|e| {
            pr_warn_ratelimited!(
                "{}: connect failed ({e:?})\n",
                Tag::new(dev, Some(qpn), Some(&remote))
            );
        })
    }

    /// `iw_accept`: sends the MPA Reply with the consumer's private data and IRD/ORD
    /// (RFC 5044 §7.1.2, RFC 6581 §9.1), hands the connection to the transport on the
    /// consumer's QP (which enters RTS) and reports ESTABLISHED.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the CEP is not waiting for an answer (the peer left) or the QP does not
    /// exist or is not in INIT/RTR; `ECONNRESET` if the Reply cannot be sent. The
    /// connection is closed on error.
    fn accept(this: Arc<Self>, id: CmId<Device>, param: ConnParam) -> Result {
        let mut g = this.inner.lock();
        if g.state != CepState::AwaitAccept {
            return Err(EINVAL);
        }
        let r = Self::do_accept(&this, &mut g, id, &param);
        if r.is_err() {
            // iw_cm expects no event after a failed accept.
            g.id = None;
            Self::close_locked(&this, &mut g);
        }
        r
    }

    /// `iw_reject`: sends an MPA Reply with R=1 and the consumer's private data, then closes.
    fn reject(this: Arc<Self>, pdata: &[u8]) -> Result {
        let mut g = this.inner.lock();
        if g.state == CepState::AwaitRtr {
            // The consumer destroyed its id while the Rtr frame was awaited (iw_cm then
            // rejects): the Reply is out already, the connection just closes.
            g.id = None;
            Self::close_locked(&this, &mut g);
            return Ok(());
        }
        if g.state != CepState::AwaitAccept {
            return Err(EINVAL);
        }
        let r = match g.startup.as_mut() {
            Some(st) => st.reject(pdata).map_err(|_| EINVAL),
            None => Err(EINVAL),
        };
        let r = r.and_then(|()| Self::flush_tx(&mut g));
        if r.is_ok() {
            g.stats.count(Stat::MpaRejectsSent, 1);
            pr_dbg!(
                "{}: rejected by the consumer (MPA Reply with R sent)",
                g.tag()
            );
        }
        Self::close_locked(&this, &mut g);
        r
    }
}

impl SockEvents for Cep {
    fn event(this: ArcBorrow<'_, Self>, _sock: SockRef<'_>, ev: SockEvent) {
        if ev != SockEvent::WriteSpace {
            let _ = crate::sys::cm_queue().enqueue(Arc::<Self>::from(this));
        }
    }
}

impl WorkItem for Cep {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let mut g = this.inner.lock();
        Self::run_locked(&this, &mut g);
    }
}
