// SPDX-License-Identifier: GPL-2.0

//! Connection management: the iw_cm provider operations over kernel TCP sockets, with MPA
//! startup (RFC 5044 §7.1, RFC 6581) run by the protocol core's [`Startup`] engine.
//!
//! Objects and owners:
//! - [`Listener`]: one listening socket per listening `iw_cm_id`; the id's
//!   `provider_data` owns it from `iw_create_listen` to `iw_destroy_listen`.
//! - [`Cep`] (connection endpoint): one TCP connection from the start of MPA startup to its
//!   hand-over to the QP's transport (or its failure). The socket's callback attachment,
//!   the work item while queued, and — on the passive side — its listener (until the MPA
//!   Request is reported; destroying the listener closes it) and then the new
//!   `iw_cm_id`'s `provider_data` (from CONNECT_REQUEST until accept or reject) each own a
//!   reference.
//!
//! Every listener, CEP and connection holds a [`Live`] token: module exit waits until all
//! of them are gone, since their socket callbacks and timers are module code.
//!
//! All protocol work runs in the CEP's work item (process context): socket callbacks only
//! queue it. Events to iw_cm follow its state machine: one CONNECT_REPLY per accepted
//! `iw_connect`, ESTABLISHED after a successful `iw_accept`, nothing else before that.
//!
//! A CEP that completes startup hands its socket to the QP's transport ([`Conn`]); one
//! that does not within `mpa_timeout_ms` (Request, Reply or draft Rtr frame) is closed.

use crate::conn::{Conn, MAX_IRD_ORD};
use crate::device::Device;
use crate::engine::ddp_tx::DdpTx;
use crate::engine::startup::{Action, Config, EnhancedConfig, Mode, Startup, Status};
use crate::engine::stream::TxSink;
use crate::sys::ibdev::{CepOps, IbDevice, ListenerOps};
use crate::sys::iwcm::{CmEvent, CmEventKind, CmId, ConnParam};
use crate::sys::pr_warn_ratelimited;
use crate::sys::socket::{tcp_state, SockAddr, SockEvent, SockEvents, SockRef, Socket};
use crate::sys::Live;
use crate::wire::mpa::RtrSet;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::impl_has_hr_timer;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, ArcBorrow, Mutex};
use kernel::time::hrtimer::{
    ArcHrTimerHandle, HasHrTimer, HrTimer, HrTimerCallback, HrTimerCallbackContext, HrTimerPointer,
    HrTimerRestart, RelativeMode,
};
use kernel::time::{Delta, Monotonic};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// Listen backlog ceiling (the consumer's backlog is clamped to it).
const MAX_BACKLOG: i32 = 128;

/// The MPA startup configuration from the module parameters.
fn startup_config(ird: u32, ord: u32) -> Config {
    let p = &crate::module_parameters::mpa_rev;
    let mode = if crate::module_parameters::mpa_draft_rtr.value() {
        Mode::DraftRtr { rtr: true }
    } else if p.value() == 1 {
        Mode::Basic
    } else {
        Mode::Enhanced(EnhancedConfig {
            ird: ird.min(0x3FFE) as u16,
            ord: ord.min(0x3FFE) as u16,
            p2p: crate::module_parameters::peer_to_peer.value(),
            rtr: rtr_types(),
        })
    };
    Config {
        mode,
        crc: crate::module_parameters::mpa_crc.value(),
        markers: crate::module_parameters::mpa_markers.value(),
        permissive_rev0: false,
    }
}

/// The RTR types of the `p2p_rtr` module parameter (RFC 6581 §9.2 flags B, C and D): a
/// mask of 1 = zero-length RDMA Write, 2 = zero-length RDMA Read, 4 = zero-length Send;
/// 0 means all three. The Responder takes a Send RTR without consuming a receive WQE (see
/// [`crate::conn`]).
fn rtr_types() -> RtrSet {
    let m = match crate::module_parameters::p2p_rtr.value() & 7 {
        0 => 7,
        m => m,
    };
    RtrSet {
        send: m & 4 != 0,
        write: m & 1 != 0,
        read: m & 2 != 0,
    }
}

/// The one TERMINATE MPA startup may send ([`Cep::send_startup_terminate`]), framed into
/// a fixed buffer: 22 octets of ULPDU, its length field, a leading marker and the CRC
/// field make 32.
struct TermSink {
    buf: [u8; TermSink::LEN],
    len: usize,
    /// The FPDU did not fit (it is not sent then).
    overflow: bool,
}

impl TermSink {
    const LEN: usize = 64;
}

impl TxSink for TermSink {
    fn bytes(&mut self, data: &[u8], crc: Option<&mut u32>) {
        if let Some(c) = crc {
            *c = crate::sys::crc32c(*c, data);
        }
        match self.buf.get_mut(self.len..self.len + data.len()) {
            Some(dst) => {
                dst.copy_from_slice(data);
                self.len += data.len();
            }
            None => self.overflow = true,
        }
    }

    fn payload(&mut self, len: usize, _crc: Option<&mut u32>) {
        // A TERMINATE without echoed headers carries no payload.
        self.overflow |= len != 0;
    }
}

/// The shortest MPA startup timeout (`mpa_timeout_ms` below it is raised to it).
pub(crate) const MIN_MPA_TIMEOUT_MS: u32 = 100;

/// An armed timer of a CEP (MPA startup) or a connection (peer-to-peer RTR, TERMINATE
/// deadline): dropping it cancels the timer (waiting for a running callback) and releases
/// the reference to `T` the timer holds. Holders keep a reference of their own, so that is
/// never the last; callbacks take no lock, so it may be dropped under the holder's lock.
pub(crate) struct Armed<T: HasHrTimer<T>> {
    _handle: ArcHrTimerHandle<T>,
}

impl<T> Armed<T>
where
    T: HasHrTimer<T, TimerMode = RelativeMode<Monotonic>> + Send + Sync + 'static,
    T: for<'a> HrTimerCallback<Pointer<'a> = Arc<T>>,
{
    /// Starts `this`'s timer to fire in `mpa_timeout_ms` (at least
    /// [`MIN_MPA_TIMEOUT_MS`]). Module exit waits for `T` ([`crate::sys::Live`]), which
    /// holds the handle.
    pub(crate) fn start(this: Arc<T>) -> Self {
        let ms = crate::module_parameters::mpa_timeout_ms
            .value()
            .max(MIN_MPA_TIMEOUT_MS);
        Self {
            _handle: this.start(Delta::from_millis(i64::from(ms))),
        }
    }

    /// Starts `this`'s timer to fire in `ms` milliseconds (0: at once).
    pub(crate) fn after(this: Arc<T>, ms: u64) -> Self {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        Self {
            _handle: this.start(Delta::from_millis(ms)),
        }
    }
}

/// A listening endpoint.
#[pin_data]
pub(crate) struct Listener {
    id: CmId<Device>,
    #[pin]
    sock: Mutex<Option<Socket>>,
    /// The connections it accepted that wait for their MPA Request: no consumer knows
    /// them yet, so the listener owns them and closes them when it is destroyed.
    #[pin]
    pending: Mutex<Pending>,
    #[pin]
    work: Work<Listener>,
    _live: Live,
}

/// The CEPs a listener owns (see [`Listener::pending`]).
struct Pending {
    /// Set by [`Listener::destroy`]: no more CEPs are adopted.
    closed: bool,
    ceps: KVec<Arc<Cep>>,
}

impl_has_work! {
    impl HasWork<Self> for Listener { self.work }
}

impl Listener {
    /// `iw_create_listen`: listens on the id's (mapped) local address; a wildcard address
    /// serves only this device's netdev.
    pub(crate) fn create(
        dev: &IbDevice<Device>,
        id: CmId<Device>,
        backlog: i32,
    ) -> Result<Arc<Self>> {
        let ndev = dev.netdev().ok_or(ENODEV)?;
        let addr = id.mapped_local_addr();
        let mut sock = Socket::tcp(ndev.net(), addr.family())?;
        if addr.is_wildcard() {
            sock.bind_to_netdev(ndev.ifindex());
        }
        sock.set_v6only(id.afonly());
        sock.bind(&addr).inspect_err(|e| {
            pr_warn_ratelimited!("listen: bind failed ({e:?})\n");
        })?;
        let l = Arc::pin_init(
            pin_init!(Self {
                id,
                sock <- new_mutex!(None),
                pending <- new_mutex!(Pending {
                    closed: false,
                    ceps: KVec::new(),
                }),
                work <- new_work!("rsiw_listener"),
                _live: Live::new(),
            }),
            GFP_KERNEL,
        )?;
        sock.attach(l.clone(), None)?;
        sock.listen(backlog.clamp(1, MAX_BACKLOG))?;
        *l.sock.lock() = Some(sock);
        Ok(l)
    }

    /// `iw_destroy_listen`: closes the listening socket and every connection it accepted
    /// whose MPA Request has not been reported (no CONNECT_REQUEST reaches an id that is
    /// going away; their sockets and callbacks are gone before this returns).
    pub(crate) fn destroy(&self) {
        // Dropping the socket detaches it (no more events) and releases it; the accept
        // loop holds the same lock, so no CEP is adopted after this.
        drop(self.sock.lock().take());
        let ceps = {
            let mut p = self.pending.lock();
            p.closed = true;
            core::mem::take(&mut p.ceps)
        };
        for cep in ceps.iter() {
            Cep::close_pending(cep);
        }
    }

    /// Takes `cep`, just accepted, into the pending CEPs. Returns `false` (taking
    /// nothing) once the listener is destroyed, or without memory.
    fn adopt(&self, cep: &Arc<Cep>) -> bool {
        let mut p = self.pending.lock();
        !p.closed && p.ceps.push(cep.clone(), GFP_KERNEL).is_ok()
    }

    /// `cep` left the pending CEPs (its Request was reported, or it closed).
    fn forget(&self, cep: &Arc<Cep>) {
        let mut p = self.pending.lock();
        if let Some(i) = p.ceps.iter().position(|c| Arc::ptr_eq(c, cep)) {
            let gone = p.ceps.remove(i).ok();
            drop(p);
            drop(gone);
        }
    }

    fn accept_all(this: &Arc<Self>) {
        let guard = this.sock.lock();
        let Some(sock) = guard.as_ref() else { return };
        loop {
            match sock.accept() {
                Ok(Some(child)) => {
                    if let Err(e) = Cep::passive(this.clone(), child, sock) {
                        pr_warn_ratelimited!("listen: dropping a connection ({e:?})\n");
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    pr_warn_ratelimited!("listen: accept failed ({e:?})\n");
                    break;
                }
            }
        }
    }
}

impl SockEvents for Listener {
    fn event(this: ArcBorrow<'_, Self>, _sock: SockRef<'_>, ev: SockEvent) {
        if ev == SockEvent::DataReady {
            let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
        }
    }
}

impl WorkItem for Listener {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        Self::accept_all(&this);
    }
}

/// Where a CEP is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
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
    state: State,
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
        let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
        HrTimerRestart::NoRestart
    }
}

impl Cep {
    fn new(
        state: State,
        id: Option<CmId<Device>>,
        listener: Option<Arc<Listener>>,
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
                }),
                work <- new_work!("rsiw_cep"),
                timer <- HrTimer::new(),
                timed_out: AtomicBool::new(false),
                _live: Live::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// A connection accepted by `listener`: waits for the peer's MPA Request.
    fn passive(listener: Arc<Listener>, mut sock: Socket, lsock: &Socket) -> Result {
        let startup = KBox::new(
            Startup::responder(startup_config(0x3FFE, 0x3FFE)).map_err(|_| EINVAL)?,
            GFP_KERNEL,
        )?;
        let addrs = (sock.local_addr()?, sock.peer_addr()?);
        let cep = Self::new(State::AwaitRequest, None, Some(listener.clone()))?;
        if !listener.adopt(&cep) {
            return Err(ECONNABORTED);
        }
        if let Err(e) = sock.attach(cep.clone(), Some(lsock)) {
            listener.forget(&cep);
            return Err(e);
        }
        {
            let mut g = cep.inner.lock();
            g.sock = Some(sock);
            g.startup = Some(startup);
            g.addrs = Some(addrs);
            Self::arm_timer(&cep, &mut g);
        }
        // Data may have arrived before the attachment.
        let _ = crate::sys::queue().enqueue(cep);
        Ok(())
    }

    /// `iw_connect`: connects TCP (waiting), sends the MPA Request with the consumer's
    /// private data; the Reply is handled by the work item, which reports CONNECT_REPLY.
    pub(crate) fn connect(dev: &IbDevice<Device>, id: CmId<Device>, param: ConnParam) -> Result {
        Self::do_connect(dev, id, param).inspect_err(|e| {
            pr_warn_ratelimited!("connect: failed ({e:?})\n");
        })
    }

    fn do_connect(dev: &IbDevice<Device>, id: CmId<Device>, param: ConnParam) -> Result {
        let ndev = dev.netdev().ok_or(ENODEV)?;
        let ird = param.ird.min(MAX_IRD_ORD);
        let ord = param.ord.min(MAX_IRD_ORD);
        let cfg = startup_config(ird, ord);
        let startup = Startup::initiator(cfg, &param.private_data).map_err(|e| {
            pr_warn_ratelimited!("connect: MPA Request refused ({e:?})\n");
            EINVAL
        })?;
        let startup = KBox::new(startup, GFP_KERNEL)?;
        let remote = id.mapped_remote_addr();
        let mut sock = Socket::tcp(ndev.net(), remote.family())?;
        let local = id.mapped_local_addr();
        sock.bind(&local).inspect_err(|e| {
            pr_warn_ratelimited!("connect: bind failed ({e:?})\n");
        })?;
        sock.connect(&remote).inspect_err(|e| {
            pr_warn_ratelimited!("connect: TCP connect failed ({e:?})\n");
        })?;
        let addrs = (sock.local_addr()?, sock.peer_addr()?);
        let cep = Self::new(State::AwaitReply, Some(id), None)?;
        sock.attach(cep.clone(), None)?;
        {
            let mut g = cep.inner.lock();
            g.sock = Some(sock);
            g.startup = Some(startup);
            g.addrs = Some(addrs);
            g.qpn = param.qpn;
            g.ird = ird;
            g.ord = ord;
            Self::arm_timer(&cep, &mut g);
            if let Err(e) = Self::flush_tx(&mut g) {
                // iw_connect fails: no event is owed on the id, so the CEP lets go of it
                // before its timer could report a CONNECT_REPLY.
                g.id = None;
                Self::close_locked(&cep, &mut g);
                return Err(e);
            }
        }
        let _ = crate::sys::queue().enqueue(cep);
        Ok(())
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
    pub(crate) fn accept(this: Arc<Self>, id: CmId<Device>, param: ConnParam) -> Result {
        let mut g = this.inner.lock();
        if g.state != State::AwaitAccept {
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

    fn do_accept(this: &Arc<Self>, g: &mut Inner, id: CmId<Device>, param: &ConnParam) -> Result {
        if id.qp_ref(param.qpn).is_none() {
            pr_warn_ratelimited!("accept: no QP {}\n", param.qpn);
            return Err(EINVAL);
        }
        let ird = param.ird.min(MAX_IRD_ORD);
        let ord = param.ord.min(MAX_IRD_ORD);
        let st = g.startup.as_mut().ok_or(EINVAL)?;
        st.set_local_ird_ord(ird as u16, ord as u16);
        st.accept(&param.private_data).map_err(|e| {
            pr_warn_ratelimited!("accept: MPA Reply refused ({e:?})\n");
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
                g.state = State::AwaitRtr;
                Self::arm_timer(this, g);
                let _ = crate::sys::queue().enqueue(this.clone());
                Ok(())
            }
            other => {
                pr_warn_ratelimited!("accept: MPA startup did not complete ({other:?})\n");
                Err(EINVAL)
            }
        }
    }

    /// Passive side, MPA startup complete (after the Reply, or the draft Rtr frame): the
    /// transport takes the connection on the accepting QP and iw_cm gets ESTABLISHED.
    fn passive_established(g: &mut Inner) -> Result {
        let st = g.startup.as_ref().ok_or(EINVAL)?;
        let n = *st.negotiated().ok_or(EINVAL)?;
        let (ird, ord) = (g.ird, g.ord);
        let qp =
            g.id.as_ref()
                .and_then(|id| id.qp_ref(g.qpn))
                .ok_or(EINVAL)?;
        let (ird, ord) = n
            .ird_ord
            .map_or((ird, ord), |x| (u32::from(x.ird), u32::from(x.ord)));
        let sock = g.sock.take().ok_or(ENOTCONN)?;
        let addrs = g.addrs;
        g.startup = None;
        g.state = State::Established;
        g.timer = None;
        Conn::establish(qp, sock, &mut g.id, &n, ird, ord, |id| {
            let ev = CmEvent {
                kind: CmEventKind::Established,
                status: 0,
                addrs,
                private_data: &[],
                ird,
                ord,
            };
            let _ = id.event(&ev);
        })?;
        Ok(())
    }

    /// `iw_reject`: sends an MPA Reply with R=1 and the consumer's private data, then closes.
    pub(crate) fn reject(this: Arc<Self>, pdata: &[u8]) -> Result {
        let mut g = this.inner.lock();
        if g.state == State::AwaitRtr {
            // The consumer destroyed its id while the Rtr frame was awaited (iw_cm then
            // rejects): the Reply is out already, the connection just closes.
            g.id = None;
            Self::close_locked(&this, &mut g);
            return Ok(());
        }
        if g.state != State::AwaitAccept {
            return Err(EINVAL);
        }
        let r = match g.startup.as_mut() {
            Some(st) => st.reject(pdata).map_err(|_| EINVAL),
            None => Err(EINVAL),
        };
        let r = r.and_then(|()| Self::flush_tx(&mut g));
        Self::close_locked(&this, &mut g);
        r
    }

    /// Sends what the startup engine has pending (the socket buffer takes a whole startup
    /// frame: at most 532 octets).
    fn flush_tx(g: &mut Inner) -> Result {
        let (Some(sock), Some(st)) = (g.sock.as_ref(), g.startup.as_mut()) else {
            return Err(ENOTCONN);
        };
        while !st.tx_pending().is_empty() {
            let n = sock.send(&[st.tx_pending()], false)?;
            st.tx_advance(n);
        }
        Ok(())
    }

    /// Feeds what the socket holds to the startup engine; returns its status.
    fn receive(g: &mut Inner) -> Status {
        let (Some(sock), Some(st)) = (g.sock.as_ref(), g.startup.as_mut()) else {
            return Status::Rejected;
        };
        let mut buf = [0u8; 128];
        let _ = sock.read(false, |chunk| {
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
        let peer_gone = matches!(sock.state(), tcp_state::CLOSE | tcp_state::CLOSE_WAIT);
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
        let st = g.startup.as_ref().ok_or(EINVAL)?;
        let n = *st.negotiated().ok_or(EINVAL)?;
        let pd = n.private_data;
        let id = g.id.as_ref().ok_or(EINVAL)?;
        let qp = id.qp_ref(g.qpn).ok_or(EINVAL)?;
        let (ird, ord) = n
            .ird_ord
            .map_or((g.ird, g.ord), |x| (u32::from(x.ird), u32::from(x.ord)));
        let sock = g.sock.take().ok_or(ENOTCONN)?;
        let addrs = g.addrs;
        g.startup = None;
        g.state = State::Established;
        g.timer = None;
        Conn::establish(qp, sock, &mut g.id, &n, ird, ord, |id| {
            let ev = CmEvent {
                kind: CmEventKind::ConnectReply,
                status: 0,
                addrs,
                private_data: pd.as_slice(),
                ird,
                ord,
            };
            let _ = id.event(&ev);
        })?;
        Ok(())
    }

    /// The Initiator cannot accept the Reply's peer-to-peer negotiation (no matching RTR,
    /// insufficient IRD: the startup engine failed with [`Action::Terminate`]): sends,
    /// instead of the RTR, the TERMINATE (LLP, MPA error) framed as negotiated, without
    /// waiting (RFC 6581 §9.2, §9.3). The caller closes the connection next; the TERMINATE
    /// is best-effort.
    fn send_startup_terminate(g: &mut Inner) {
        let (Some(sock), Some(st)) = (g.sock.as_ref(), g.startup.as_ref()) else {
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

    /// Starts the MPA startup timer (`mpa_timeout_ms`, at least [`MIN_MPA_TIMEOUT_MS`])
    /// for the state just entered: the peer's Request or Reply must arrive in time.
    fn arm_timer(this: &Arc<Self>, g: &mut Inner) {
        // Always armed: a half-open connection must end before the module can unload
        // (its socket callbacks are module code).
        g.timer = Some(Armed::start(this.clone()));
    }

    /// Its listener is being destroyed: closes the CEP, silently, if it still waits for
    /// the MPA Request (no consumer knows it).
    fn close_pending(this: &Arc<Self>) {
        let mut g = this.inner.lock();
        if g.state == State::AwaitRequest {
            Self::close_locked(this, &mut g);
        }
    }

    fn close_locked(this: &Arc<Self>, g: &mut Inner) {
        // Cancels the timer (its callback takes no lock); the caller holds a reference,
        // so this is not the CEP's last.
        g.timer = None;
        g.state = State::Closed;
        if let Some(s) = g.sock.as_ref() {
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
        match g.state {
            State::AwaitRequest => {
                pr_warn_ratelimited!("listen: no MPA Request within mpa_timeout_ms, closing\n");
                Self::close_locked(this, g);
                true
            }
            State::AwaitReply => {
                pr_warn_ratelimited!("connect: no MPA Reply within mpa_timeout_ms\n");
                let addrs = g.addrs;
                Self::close_locked(this, g);
                if let Some(id) = g.id.take() {
                    let code = ETIMEDOUT.to_errno();
                    let ev = CmEvent {
                        kind: CmEventKind::ConnectReply,
                        status: code,
                        addrs,
                        private_data: &[],
                        ird: 0,
                        ord: 0,
                    };
                    let _ = id.event(&ev);
                }
                true
            }
            State::AwaitRtr => {
                pr_warn_ratelimited!("accept: no Rtr frame within mpa_timeout_ms\n");
                Self::fail_accepted(this, g);
                true
            }
            // Answered in time; the timer raced with its cancellation.
            _ => false,
        }
    }

    fn run_locked(this: &Arc<Self>, g: &mut Inner) {
        if Self::timed_out(this, g) {
            return;
        }
        match g.state {
            State::AwaitRequest => match Self::receive(g) {
                Status::RequestReceived => {
                    let Some(l) = g.listener.take() else {
                        return Self::close_locked(this, g);
                    };
                    // From here the new iw_cm_id owns the CEP (or it closes).
                    l.forget(this);
                    let Some(peer) = g.startup.as_ref().and_then(|s| s.peer().copied()) else {
                        return Self::close_locked(this, g);
                    };
                    // MPA revision 1 carries no IRD/ORD (RFC 6581 §1): the device limits
                    // are reported, so a consumer accepting with its defaults can still
                    // issue RDMA Reads; the ULP agrees the real limits out of band.
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
                    g.state = State::AwaitAccept;
                    g.timer = None;
                    if l.id.connect_request(&ev, this.clone()).is_err() {
                        Self::close_locked(this, g);
                    }
                }
                Status::AwaitingRequest => {}
                other => {
                    pr_warn_ratelimited!("MPA startup (responder) ended: {other:?}\n");
                    Self::close_locked(this, g)
                }
            },
            State::AwaitReply => {
                let status = Self::receive(g);
                let (code, pd): (i32, KVec<u8>) = match status {
                    Status::AwaitingReply => return,
                    Status::Established => match Self::connected(g) {
                        Ok(()) => return,
                        Err(e) => {
                            pr_warn_ratelimited!("connect: cannot start the transport ({e:?})\n");
                            (e.to_errno(), KVec::new())
                        }
                    },
                    Status::Rejected => {
                        let pd = g
                            .startup
                            .as_ref()
                            .and_then(|s| s.peer())
                            .map(|p| p.private_data.as_slice())
                            .unwrap_or(&[]);
                        let mut v = KVec::new();
                        let _ = v.extend_from_slice(pd, GFP_KERNEL);
                        (ECONNREFUSED.to_errno(), v)
                    }
                    other => {
                        pr_warn_ratelimited!("MPA startup (initiator) ended: {other:?}\n");
                        Self::send_startup_terminate(g);
                        (ECONNRESET.to_errno(), KVec::new())
                    }
                };
                let addrs = g.addrs;
                Self::close_locked(this, g);
                if let Some(id) = g.id.take() {
                    let ev = CmEvent {
                        kind: CmEventKind::ConnectReply,
                        status: code,
                        addrs,
                        private_data: &pd,
                        ird: 0,
                        ord: 0,
                    };
                    let _ = id.event(&ev);
                }
            }
            State::AwaitRtr => match Self::receive(g) {
                Status::AwaitingRtr => {}
                Status::Established => {
                    if let Err(e) = Self::passive_established(g) {
                        pr_warn_ratelimited!("accept: cannot start the transport ({e:?})\n");
                        Self::fail_accepted(this, g);
                    }
                }
                other => {
                    pr_warn_ratelimited!(
                        "MPA startup (responder) ended waiting for the Rtr frame: {other:?}\n"
                    );
                    Self::fail_accepted(this, g);
                }
            },
            State::AwaitAccept => {
                if matches!(
                    g.sock.as_ref().map(|s| s.state()),
                    Some(tcp_state::CLOSE | tcp_state::CLOSE_WAIT)
                ) {
                    // The peer left before the consumer answered; accept or reject will
                    // fail with EINVAL on the closed CEP.
                    Self::close_locked(this, g);
                }
            }
            State::Established | State::Closed => {}
        }
    }
}

impl SockEvents for Cep {
    fn event(this: ArcBorrow<'_, Self>, _sock: SockRef<'_>, ev: SockEvent) {
        if ev != SockEvent::WriteSpace {
            let _ = crate::sys::queue().enqueue(Arc::<Self>::from(this));
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

impl ListenerOps<Device> for Listener {
    fn create(dev: &IbDevice<Device>, id: CmId<Device>, backlog: i32) -> Result<Arc<Self>> {
        Listener::create(dev, id, backlog)
    }

    fn destroy(&self) {
        Listener::destroy(self);
    }
}

impl CepOps<Device> for Cep {
    fn connect(dev: &IbDevice<Device>, id: CmId<Device>, param: ConnParam) -> Result {
        Cep::connect(dev, id, param)
    }

    fn accept(cep: Arc<Self>, id: CmId<Device>, param: ConnParam) -> Result {
        Cep::accept(cep, id, param)
    }

    fn reject(cep: Arc<Self>, pdata: &[u8]) -> Result {
        Cep::reject(cep, pdata)
    }
}
