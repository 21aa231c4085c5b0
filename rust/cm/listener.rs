// SPDX-License-Identifier: GPL-2.0

//! Listening endpoints: one listening socket per listening `iw_cm_id`, whose work item
//! accepts the TCP connections and hands each to a passive [`Cep`] that waits for the
//! peer's MPA Request.

use super::{detail, Cep, IdState};
use crate::device::Device;
use crate::logtag::Tag;
use crate::sys::ibdev::{IbDevice, ListenerOps};
use crate::sys::iwcm::CmId;
use crate::sys::net::socket::{SockEvent, SockEvents, SockRef, Socket};
use crate::sys::pr_warn_ratelimited;
use crate::sys::Live;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, ArcBorrow, Mutex};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// Listen backlog ceiling (the consumer's backlog is clamped to it).
const MAX_BACKLOG: i32 = 128;

/// The most connections a listener holds while they wait for their MPA Request. A peer
/// that opens connections and sends nothing would otherwise pin a CEP and a socket per
/// connection until `mpa_timeout_ms`; at the limit the oldest is closed to make room, so
/// a flood cannot keep a legitimate Initiator, which sends its Request at once, out.
pub(super) const MAX_PENDING: usize = 512;

/// A listening endpoint.
#[pin_data]
pub(crate) struct Listener {
    pub(super) id: CmId<Device>,
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

impl ListenerOps<Device> for Listener {
    /// `iw_create_listen`: listens on the id's (mapped) local address; a wildcard address
    /// serves only this device's netdev.
    fn create(dev: &IbDevice<Device>, id: CmId<Device>, backlog: i32) -> Result<Arc<Self>> {
        let ndev = dev.netdev().ok_or(ENODEV)?;
        let addr = id.mapped_local_addr();
        let mut sock = Socket::tcp(ndev.net(), addr.family())?;
        if addr.is_wildcard() {
            sock.bind_to_netdev(ndev.ifindex());
        }
        sock.set_v6only(id.afonly());
        if let Some(tos) = id.tos() {
            sock.set_tos(tos)?;
        }
        sock.bind(&addr).inspect_err(|e| {
            pr_warn_ratelimited!(
                "{}: listen on {addr}: bind failed ({e:?})\n",
                Tag::new(dev, None, None)
            );
        })?;
        if let Some(d) = id.details() {
            d.set(detail::STATE, IdState::Listening as u32);
            d.set(detail::BACKLOG, u32::try_from(backlog).unwrap_or(0));
        }
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
    fn destroy(&self) {
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
}

impl Listener {
    /// Takes `cep`, just accepted, into the pending CEPs; with [`MAX_PENDING`] of them
    /// already, the oldest leaves them and is closed ([`Cep::evict`]). Returns `false`
    /// (taking nothing) once the listener is destroyed, or without memory.
    pub(super) fn adopt(&self, cep: &Arc<Cep>) -> bool {
        let mut p = self.pending.lock();
        if p.closed {
            return false;
        }
        let oldest = if p.ceps.len() >= MAX_PENDING {
            p.ceps.remove(0).ok()
        } else {
            None
        };
        let taken = p.ceps.push(cep.clone(), GFP_KERNEL).is_ok();
        drop(p);
        if let Some(old) = oldest {
            pr_warn_ratelimited!(
                "{}: {MAX_PENDING} connections to {} wait for their MPA Request; closing the oldest\n",
                self.id.with_device(|d| Tag::new(d, None, None)),
                self.id.mapped_local_addr()
            );
            Cep::evict(old);
        }
        taken
    }

    /// `cep` leaves the pending CEPs (its Request is to be reported, or it closed).
    /// Returns whether it was one of them: an evicted CEP, or one whose listener is being
    /// destroyed, no longer is, and must not be reported.
    pub(super) fn forget(&self, cep: &Arc<Cep>) -> bool {
        let mut p = self.pending.lock();
        match p.ceps.iter().position(|c| Arc::ptr_eq(c, cep)) {
            Some(i) => {
                let gone = p.ceps.remove(i).ok();
                drop(p);
                drop(gone);
                true
            }
            None => false,
        }
    }

    fn accept_all(this: &Arc<Self>) {
        let guard = this.sock.lock();
        let Some(sock) = guard.as_ref() else { return };
        loop {
            match sock.accept() {
                Ok(Some(child)) => {
                    let peer = child.peer_addr().ok();
                    if let Err(e) = Cep::passive(this.clone(), child, sock) {
                        pr_warn_ratelimited!(
                            "{}: dropping an incoming connection to {} ({e:?})\n",
                            this.id.with_device(|d| Tag::new(d, None, peer.as_ref())),
                            this.id.mapped_local_addr()
                        );
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    pr_warn_ratelimited!(
                        "{}: listen on {}: accept failed ({e:?})\n",
                        this.id.with_device(|d| Tag::new(d, None, None)),
                        this.id.mapped_local_addr()
                    );
                    break;
                }
            }
        }
    }
}

impl SockEvents for Listener {
    fn event(this: ArcBorrow<'_, Self>, _sock: SockRef<'_>, ev: SockEvent) {
        if ev == SockEvent::DataReady {
            let _ = crate::sys::cm_queue().enqueue(Arc::<Self>::from(this));
        }
    }
}

impl WorkItem for Listener {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        Self::accept_all(&this);
    }
}
