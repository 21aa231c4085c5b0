// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager interface (`include/rdma/iw_cm.h`): the `iw_cm_id` a
//! provider holds, the events it reports, and the connection parameters it receives.
//!
//! iw_cm's event contract is enforced here, at the one place rsiw reports events
//! ([`CmId::event`], [`Phase::after`]): a connection that never reached ESTABLISHED ends
//! with a CONNECT_REPLY carrying an error (active side), never with CLOSE; DISCONNECT and
//! CLOSE come only after ESTABLISHED, CLOSE exactly once. iw_cm `BUG()`s on a CLOSE for an
//! id in any other state (`cm_close_handler`) and on a second CONNECT_REPLY
//! (`cm_conn_rep_handler`); an event that breaks the contract is not reported, and rsiw
//! warns (a bug of its own).

use super::bindings as b;
use super::ibdev::{errno, CepOps, DeviceOps, IbDevice, ListenerOps, Objects};
use super::net::socket::SockAddr;
use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use kernel::prelude::*;
use kernel::rbtree::{RBTree, RBTreeNode};
use kernel::sync::Arc;
use kernel::types::ForeignOwnable;

/// The events a provider reports on an `iw_cm_id` (`enum iw_cm_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CmEventKind {
    /// A peer's MPA Request arrived on a listener (passive side).
    ConnectRequest,
    /// The answer to our connect: status 0 (established), `-ECONNREFUSED` (rejected),
    /// `-ECONNRESET`/`-ETIMEDOUT`/... (failed).
    ConnectReply,
    /// The passive side's accept completed: the connection is established.
    Established,
    /// The peer closed its side (orderly shutdown began).
    Disconnect,
    /// The connection is gone; the last event of an established connection.
    Close,
}

impl CmEventKind {
    fn to_c(self) -> b::iw_cm_event_type {
        match self {
            Self::ConnectRequest => b::iw_cm_event_type_IW_CM_EVENT_CONNECT_REQUEST,
            Self::ConnectReply => b::iw_cm_event_type_IW_CM_EVENT_CONNECT_REPLY,
            Self::Established => b::iw_cm_event_type_IW_CM_EVENT_ESTABLISHED,
            Self::Disconnect => b::iw_cm_event_type_IW_CM_EVENT_DISCONNECT,
            Self::Close => b::iw_cm_event_type_IW_CM_EVENT_CLOSE,
        }
    }
}

/// What a provider operation made of an id: the first [`Phase`] of its events.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CmRole {
    /// `iw_create_listen`: reports CONNECT_REQUESTs.
    Listen,
    /// `iw_connect`: reports one CONNECT_REPLY, then (if it was 0) DISCONNECT and CLOSE.
    Connect,
    /// `iw_accept`: reports ESTABLISHED, then DISCONNECT and CLOSE.
    Accept,
}

/// Where an id is in iw_cm's event contract (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Phase {
    /// A listening id.
    Listening = 0,
    /// `iw_connect` returned 0: CONNECT_REPLY is owed.
    Connecting = 1,
    /// `iw_accept` was called: ESTABLISHED is owed.
    Accepting = 2,
    /// The connection is established: DISCONNECT or CLOSE may follow.
    Established = 3,
    /// DISCONNECT was reported: CLOSE is owed.
    Closing = 4,
    /// The last event was reported.
    Done = 5,
}

impl Phase {
    const fn of(role: CmRole) -> Self {
        match role {
            CmRole::Listen => Phase::Listening,
            CmRole::Connect => Phase::Connecting,
            CmRole::Accept => Phase::Accepting,
        }
    }

    const fn from_u8(v: u8) -> Self {
        match v {
            0 => Phase::Listening,
            1 => Phase::Connecting,
            2 => Phase::Accepting,
            3 => Phase::Established,
            4 => Phase::Closing,
            _ => Phase::Done,
        }
    }

    /// The phase after reporting `kind` with `status` in this phase, or `None` if iw_cm's
    /// contract forbids that event here.
    pub(crate) const fn after(self, kind: CmEventKind, status: i32) -> Option<Self> {
        match (self, kind) {
            (Phase::Listening, CmEventKind::ConnectRequest) => Some(Phase::Listening),
            (Phase::Connecting, CmEventKind::ConnectReply) => Some(if status == 0 {
                Phase::Established
            } else {
                Phase::Done
            }),
            (Phase::Accepting, CmEventKind::Established) => Some(Phase::Established),
            (Phase::Established, CmEventKind::Disconnect) => Some(Phase::Closing),
            (Phase::Established | Phase::Closing, CmEventKind::Close) => Some(Phase::Done),
            _ => None,
        }
    }
}

/// An event for [`CmId::event`].
pub(crate) struct CmEvent<'a> {
    /// What happened.
    pub(crate) kind: CmEventKind,
    /// 0 or a negative errno (see [`CmEventKind`]).
    pub(crate) status: i32,
    /// The connection's local and remote addresses, if known.
    pub(crate) addrs: Option<(SockAddr, SockAddr)>,
    /// The peer's private data (at most 255 octets reach the consumer; the core copies).
    pub(crate) private_data: &'a [u8],
    /// The peer's IRD and ORD (RFC 6581), clamped to 255.
    pub(crate) ird: u32,
    /// See `ird`.
    pub(crate) ord: u32,
}

impl CmEvent<'_> {
    /// An event without addresses, private data or IRD/ORD (DISCONNECT, CLOSE).
    pub(crate) fn simple(kind: CmEventKind, status: i32) -> Self {
        CmEvent {
            kind,
            status,
            addrs: None,
            private_data: &[],
            ird: 0,
            ord: 0,
        }
    }
}

/// The most driver details an `iw_cm_id` shows ([`Objects::CM_ID_ATTRS`]).
pub(crate) const MAX_CM_ID_ATTRS: usize = 12;

/// The driver details of an `iw_cm_id` the driver holds, as `rdma resource show cm_id
/// -dd` shows them: one 32-bit value per name of [`Objects::CM_ID_ATTRS`] (the first, the
/// state, shown by its name in [`Objects::CM_ID_STATES`]). The holder sets them as the
/// connection moves on; a value never set is not shown. The netlink reader reads them
/// without a lock: each value is current, the set of them need not be one snapshot.
pub(crate) struct CmIdDetails {
    vals: [AtomicU32; MAX_CM_ID_ATTRS],
}

impl CmIdDetails {
    /// A value not set.
    const UNSET: u32 = u32::MAX;

    fn new() -> Self {
        Self {
            vals: [const { AtomicU32::new(Self::UNSET) }; MAX_CM_ID_ATTRS],
        }
    }

    /// Sets detail `i` (an index into [`Objects::CM_ID_ATTRS`]) to `v`; `u32::MAX` unsets
    /// it. An index out of range is ignored.
    pub(crate) fn set(&self, i: usize, v: u32) {
        if let Some(a) = self.vals.get(i) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// Writes the set details named by `attrs` to `out`, the first as the name in
    /// `states` of its value.
    fn write(
        &self,
        attrs: &[&'static CStr],
        states: &[&'static CStr],
        out: &mut super::ibdev::ResAttrs<'_>,
    ) -> Result {
        for (i, (name, v)) in attrs.iter().zip(&self.vals).enumerate() {
            let v = v.load(Ordering::Relaxed);
            if v == Self::UNSET {
                continue;
            }
            match states.get(v as usize) {
                Some(state) if i == 0 => out.str(name, state)?,
                _ => out.u32(name, v)?,
            }
        }
        Ok(())
    }
}

/// A device's table of the driver details of the `iw_cm_id`s it holds, by the id's
/// address (see [`cm_id_key`]).
///
/// A red-black tree: one node (of 40 octets) per id. Live ids lie far apart, and an
/// `xarray` keyed by their addresses needed nodes of 576 octets of its own for most ids.
pub(crate) type CmIdTable = RBTree<usize, Arc<CmIdDetails>>;

/// The key of the `iw_cm_id` at `id` in a device's [`CmIdTable`]: its address, unique
/// among live ids.
fn cm_id_key(id: *const b::iw_cm_id) -> usize {
    id as usize
}

/// A reference to an `iw_cm_id` of a device of type `T`, taken with its `add_ref` and
/// dropped with `rem_ref`, with the id's driver details ([`CmIdDetails`]), which the
/// device's `cm_ids` table lists under the id's address while this reference exists.
///
/// # Invariants
///
/// `ptr` is a valid `iw_cm_id` of a `T` device; this object owns one reference on it.
/// The `provider_data` of ids created from its CONNECT_REQUEST events holds an
/// `Arc<T::Cep>` (see [`CmId::connect_request`]).
pub(crate) struct CmId<T: Objects> {
    ptr: NonNull<b::iw_cm_id>,
    /// The id's [`Phase`] (its events come from one owner at a time, serialised by it).
    phase: AtomicU8,
    /// The id's details; `None` if they could not be allocated (the id then shows none).
    details: Option<Arc<CmIdDetails>>,
    _p: PhantomData<fn() -> T>,
}

// SAFETY: the iw_cm_id is reference counted by iw_cm; `event_handler`, `add_ref` and
// `rem_ref` may be called from any context and thread.
unsafe impl<T: Objects> Send for CmId<T> {}
// SAFETY: as above; `&CmId` only reads fields that are constant while a provider holds
// the id, or calls the thread-safe event handler.
unsafe impl<T: Objects> Sync for CmId<T> {}

impl<T: Objects> CmId<T> {
    /// Takes a reference on `ptr`, handed to the provider operation of `role`.
    ///
    /// # Safety
    ///
    /// `ptr` is a valid `iw_cm_id` handed to a provider operation that is running.
    pub(super) unsafe fn from_raw(ptr: *mut b::iw_cm_id, role: CmRole) -> Self {
        // SAFETY: valid per the caller; `add_ref` is always set by iw_cm.
        unsafe {
            if let Some(add_ref) = (*ptr).add_ref {
                add_ref(ptr);
            }
        }
        // SAFETY: a valid pointer is not null.
        let ptr = unsafe { NonNull::new_unchecked(ptr) };
        // INVARIANT: a reference was just taken; `ptr` is valid.
        let mut this = Self {
            ptr,
            phase: AtomicU8::new(Phase::of(role) as u8),
            details: Arc::new(CmIdDetails::new(), GFP_KERNEL).ok(),
            _p: PhantomData,
        };
        let node = this
            .details
            .clone()
            .and_then(|d| RBTreeNode::new(this.key(), d, GFP_KERNEL).ok());
        match node {
            Some(node) => {
                let key = this.key();
                let unused = this.with_device(|dev| {
                    let mut g = dev.cm_ids.lock();
                    // Another reference to the same id keeps its own entry.
                    if g.get(&key).is_some() {
                        Some(node)
                    } else {
                        g.insert(node)
                    }
                });
                drop(unused);
            }
            None => this.details = None,
        }
        this
    }

    /// The key of the id in its device's `cm_ids` table ([`cm_id_key`]).
    fn key(&self) -> usize {
        cm_id_key(self.ptr.as_ptr())
    }

    /// The id's driver details, if it has them (see [`CmIdDetails`]).
    pub(crate) fn details(&self) -> Option<&CmIdDetails> {
        self.details.as_deref()
    }

    /// Where the id is in iw_cm's event contract.
    pub(crate) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// The address to bind or listen on (`m_local_addr`: after port mapping).
    pub(crate) fn mapped_local_addr(&self) -> SockAddr {
        // SAFETY: valid id (invariant); the addresses are set before the provider is called
        // and not changed while it holds the id.
        SockAddr::from_storage(unsafe { &(*self.ptr.as_ptr()).m_local_addr })
    }

    /// The address to connect to (`m_remote_addr`: after port mapping).
    pub(crate) fn mapped_remote_addr(&self) -> SockAddr {
        // SAFETY: as for `mapped_local_addr`.
        SockAddr::from_storage(unsafe { &(*self.ptr.as_ptr()).m_remote_addr })
    }

    /// Whether an IPv6 listener must not accept IPv4 (`afonly`).
    pub(crate) fn afonly(&self) -> bool {
        // SAFETY: as for `mapped_local_addr`.
        unsafe { b::rsiw_iw_cm_id_afonly(self.ptr.as_ptr()) }
    }

    /// The type of service (the IPv4 TOS octet, the IPv6 traffic class) the consumer set
    /// on the id (`rdma_set_option(RDMA_OPTION_ID_TOS)`), or `None`.
    pub(crate) fn tos(&self) -> Option<u8> {
        // SAFETY: as for `mapped_local_addr`.
        let tos = unsafe { b::rsiw_iw_cm_id_tos(self.ptr.as_ptr()) };
        u8::try_from(tos).ok()
    }

    /// A counted reference to QP `qpn` of the id's device (the QP a connect or accept
    /// names), or `None` if there is no such QP.
    pub(crate) fn qp_ref(&self, qpn: u32) -> Option<super::ibdev::QpRef<T>> {
        // SAFETY: the valid id (invariant) is bound to a live `T` device (iw_cm passes a
        // provider only ids on its devices), which stays live while the id holds it.
        let dev = unsafe { super::ibdev::IbDevice::<T>::from_raw((*self.ptr.as_ptr()).device) };
        dev.qp_ref(qpn)
    }

    /// Calls `f` with the id's device.
    pub(crate) fn with_device<R>(&self, f: impl FnOnce(&super::ibdev::IbDevice<T>) -> R) -> R {
        // SAFETY: as for `qp_ref`.
        let dev = unsafe { super::ibdev::IbDevice::<T>::from_raw((*self.ptr.as_ptr()).device) };
        f(dev)
    }

    /// Reports `ev` (not a CONNECT_REQUEST: see [`Self::connect_request`]) to iw_cm.
    /// Returns iw_cm's answer (0, or `-ENOMEM` when the event could not be queued), or
    /// `-EINVAL` without reporting it if iw_cm's contract forbids the event in the id's
    /// [`Phase`] (rsiw warns: a bug of its own).
    pub(crate) fn event(&self, ev: &CmEvent<'_>) -> i32 {
        self.raw_event(ev, core::ptr::null_mut())
    }

    /// Reports a CONNECT_REQUEST on this listening id; iw_cm creates a new id whose
    /// `provider_data` owns `cep` until the consumer's accept or reject hands it back.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if iw_cm could not queue the event (`cep` is dropped).
    pub(crate) fn connect_request(&self, ev: &CmEvent<'_>, cep: Arc<T::Cep>) -> Result {
        let data = cep.into_foreign();
        let ret = self.raw_event(ev, data);
        if ret < 0 {
            // SAFETY: iw_cm did not take the event, so `data` is still ours.
            drop(unsafe { <Arc<T::Cep> as ForeignOwnable>::from_foreign(data) });
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    fn raw_event(&self, ev: &CmEvent<'_>, provider_data: *mut c_void) -> i32 {
        let phase = self.phase();
        let Some(next) = phase.after(ev.kind, ev.status) else {
            pr_err!(
                "iw_cm event {:?} (status {}) refused in phase {:?}\n",
                ev.kind,
                ev.status,
                phase
            );
            kernel::warn_on!(true);
            return -(b::EINVAL as i32);
        };
        self.phase.store(next as u8, Ordering::Release);
        let mut e: b::iw_cm_event = super::Pod::zeroed();
        e.event = ev.kind.to_c();
        e.status = ev.status;
        if let Some((l, r)) = ev.addrs {
            e.local_addr = l.storage();
            e.remote_addr = r.storage();
        }
        let len = ev.private_data.len().min(255);
        e.private_data = ev.private_data.as_ptr().cast_mut().cast();
        e.private_data_len = len as u8;
        e.provider_data = provider_data;
        e.ird = ev.ird.min(255) as u8;
        e.ord = ev.ord.min(255) as u8;
        let id = self.ptr.as_ptr();
        // SAFETY: valid id; iw_cm sets `event_handler` before calling any provider op; it
        // copies the private data before returning.
        unsafe {
            match (*id).event_handler {
                Some(h) => h(id, &mut e),
                None => -(b::EINVAL as i32),
            }
        }
    }
}

impl<T: Objects> Drop for CmId<T> {
    fn drop(&mut self) {
        if let Some(d) = self.details.take() {
            let key = self.key();
            self.with_device(|dev| {
                let mut g = dev.cm_ids.lock();
                let node = if g.get(&key).is_some_and(|e| Arc::ptr_eq(e, &d)) {
                    g.remove_node(&key)
                } else {
                    None
                };
                drop(g);
                drop(node);
            });
        }
        let id = self.ptr.as_ptr();
        // SAFETY: we own one reference (invariant); `rem_ref` drops it.
        unsafe {
            if let Some(rem_ref) = (*id).rem_ref {
                rem_ref(id);
            }
        }
    }
}

/// Takes the value stored in `id->provider_data` and clears it.
///
/// # Safety
///
/// `id` is a valid `iw_cm_id` of a running provider operation.
pub(super) unsafe fn take_provider_data(id: *mut b::iw_cm_id) -> *mut c_void {
    // SAFETY: valid per the caller; iw_cm serialises the provider ops on one id.
    unsafe { core::mem::replace(&mut (*id).provider_data, core::ptr::null_mut()) }
}

/// Stores `data` in `id->provider_data`.
///
/// # Safety
///
/// As for [`take_provider_data`].
pub(super) unsafe fn set_provider_data(id: *mut b::iw_cm_id, data: *mut c_void) {
    // SAFETY: valid per the caller.
    unsafe { (*id).provider_data = data };
}

/// The consumer's connection parameters (`struct iw_cm_conn_param`), copied.
pub(crate) struct ConnParam {
    /// Private data to send (at most 255 octets through iw_cm).
    pub(crate) private_data: KVec<u8>,
    /// Outbound RDMA Read Requests wanted.
    pub(crate) ord: u32,
    /// Inbound RDMA Read Requests the QP can serve.
    pub(crate) ird: u32,
    /// The QP to connect.
    pub(crate) qpn: u32,
}

impl ConnParam {
    /// Copies `*p`.
    ///
    /// # Safety
    ///
    /// `p` is a valid `iw_cm_conn_param` whose `private_data` holds `private_data_len`
    /// octets (or is null with length 0).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(super) unsafe fn from_raw(p: *const b::iw_cm_conn_param) -> Result<Self> {
        // SAFETY: valid per the caller.
        let p = unsafe { &*p };
        Ok(Self {
            // SAFETY: per the caller.
            private_data: unsafe { copy_pdata(p.private_data, usize::from(p.private_data_len)) }?,
            ord: p.ord,
            ird: p.ird,
            qpn: p.qpn,
        })
    }
}

/// Copies `len` octets at `p` (null when `len` is 0).
///
/// # Safety
///
/// `p` is valid for `len` octets of reads, or `len` is 0.
///
/// # Errors
///
/// `ENOMEM`.
pub(super) unsafe fn copy_pdata(p: *const c_void, len: usize) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(len, GFP_KERNEL)?;
    if len > 0 && !p.is_null() {
        // SAFETY: per the caller.
        let data = unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) };
        v.extend_from_slice(data, GFP_KERNEL)?;
    }
    Ok(v)
}

#[cfg(CONFIG_KUNIT = "y")]
#[kernel::prelude::kunit_tests(rsiw_iwcm)]
mod tests {
    use super::{CmEventKind as K, CmRole, Phase};

    /// Runs `events` from `role`'s first phase; returns the phase after each, `None` from
    /// the first refused event on.
    fn walk(role: CmRole, events: &[(K, i32)]) -> Option<Phase> {
        events
            .iter()
            .try_fold(Phase::of(role), |p, &(k, st)| p.after(k, st))
    }

    #[test]
    fn iw_cm_event_contract() {
        const ETIMEDOUT: i32 = -110;
        // Listener: CONNECT_REQUESTs only.
        assert_eq!(
            walk(
                CmRole::Listen,
                &[(K::ConnectRequest, 0), (K::ConnectRequest, 0)]
            ),
            Some(Phase::Listening)
        );
        for k in [K::ConnectReply, K::Established, K::Disconnect, K::Close] {
            assert_eq!(walk(CmRole::Listen, &[(k, 0)]), None);
        }
        // Active side: one CONNECT_REPLY; CLOSE only after a successful one, once.
        for k in [K::Close, K::Disconnect, K::Established, K::ConnectRequest] {
            assert_eq!(walk(CmRole::Connect, &[(k, 0)]), None);
        }
        let ok = [(K::ConnectReply, 0), (K::Disconnect, 0), (K::Close, 0)];
        assert_eq!(walk(CmRole::Connect, &ok), Some(Phase::Done));
        assert_eq!(walk(CmRole::Connect, &ok[..2]), Some(Phase::Closing));
        assert_eq!(
            walk(CmRole::Connect, &[(K::ConnectReply, 0), (K::Close, 0)]),
            Some(Phase::Done)
        );
        assert_eq!(
            walk(
                CmRole::Connect,
                &[(K::ConnectReply, 0), (K::ConnectReply, 0)]
            ),
            None
        );
        assert_eq!(
            walk(
                CmRole::Connect,
                &[(K::ConnectReply, 0), (K::Close, 0), (K::Close, 0)]
            ),
            None
        );
        // A failed connect ends with its CONNECT_REPLY: no CLOSE, no DISCONNECT.
        assert_eq!(
            walk(CmRole::Connect, &[(K::ConnectReply, ETIMEDOUT)]),
            Some(Phase::Done)
        );
        for k in [K::Close, K::Disconnect, K::ConnectReply] {
            assert_eq!(
                walk(CmRole::Connect, &[(K::ConnectReply, ETIMEDOUT), (k, 0)]),
                None
            );
        }
        // Passive side: ESTABLISHED once, then DISCONNECT and CLOSE.
        for k in [K::Close, K::Disconnect, K::ConnectReply, K::ConnectRequest] {
            assert_eq!(walk(CmRole::Accept, &[(k, 0)]), None);
        }
        assert_eq!(
            walk(
                CmRole::Accept,
                &[(K::Established, 0), (K::Disconnect, 0), (K::Close, 0)]
            ),
            Some(Phase::Done)
        );
        assert_eq!(
            walk(CmRole::Accept, &[(K::Established, 0), (K::Established, 0)]),
            None
        );
        assert_eq!(
            walk(
                CmRole::Accept,
                &[(K::Established, 0), (K::Close, 0), (K::Disconnect, 0)]
            ),
            None
        );
    }
}

impl<T: DeviceOps> IbDevice<T> {
    /// `fill_res_cm_id_entry`: the driver details of the `iw_cm_id` behind `id`, if the
    /// driver holds it ([`CmIdDetails`]).
    ///
    /// The core holds a reference on the `rdma_cm_id`, whose `iw_cm_id` it destroys only
    /// after that reference is gone; the `iw_cm_id`'s address only makes a key here, never
    /// dereferenced, and an id the driver holds is listed under it.
    ///
    /// # Safety
    ///
    /// Called only by the RDMA core's netlink code, through `IbDevice::<T>::OPS`, with the
    /// message under construction and a live `rdma_cm_id` on a device of this type.
    pub(super) unsafe extern "C" fn fill_res_cm_id_entry_c(
        msg: *mut b::sk_buff,
        id: *mut b::rdma_cm_id,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller; `rdma_iw_cm_id` reads the id's device and private part.
        let (dev, iw) = unsafe { (Self::from_raw((*id).device), b::rdma_iw_cm_id(id)) };
        if iw.is_null() {
            return 0;
        }
        let Some(details) = dev.cm_ids.lock().get(&cm_id_key(iw)).cloned() else {
            return 0;
        };
        // SAFETY: `msg` is the core's message for this call.
        let table = unsafe { b::rsiw_res_driver_begin(msg) };
        if table.is_null() {
            return EMSGSIZE.to_errno();
        }
        // SAFETY: as above; the attributes go into the table just opened.
        let mut out = unsafe { super::ibdev::ResAttrs::new(msg) };
        let r = details.write(T::CM_ID_ATTRS, T::CM_ID_STATES, &mut out);
        // SAFETY: `table` was opened on `msg` above and is closed once.
        unsafe { b::rsiw_res_driver_end(msg, table, r.is_ok()) };
        errno(r)
    }

    /// `iw_connect`.
    ///
    /// # Safety
    ///
    /// Called only by iw_cm, through `IbDevice::<T>::OPS`, with a valid id of a live
    /// device of this type and valid parameters.
    pub(super) unsafe extern "C" fn iw_connect_c(
        id: *mut b::iw_cm_id,
        param: *mut b::iw_cm_conn_param,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let (dev, param) = unsafe { (Self::from_raw((*id).device), ConnParam::from_raw(param)) };
        let Ok(param) = param else {
            return ENOMEM.to_errno();
        };
        // SAFETY: a valid id of a running provider op.
        let id = unsafe { CmId::<T>::from_raw(id, CmRole::Connect) };
        errno(T::Cep::connect(dev, id, param))
    }

    /// `iw_accept`: the id's `provider_data` holds the CEP of its CONNECT_REQUEST.
    ///
    /// # Safety
    ///
    /// As for `iw_connect_c`; `provider_data` was set from a CONNECT_REQUEST of this
    /// driver (type invariant of `CmId`) and not taken yet.
    pub(super) unsafe extern "C" fn iw_accept_c(
        id: *mut b::iw_cm_id,
        param: *mut b::iw_cm_conn_param,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let (param, data) = unsafe { (ConnParam::from_raw(param), take_provider_data(id)) };
        if data.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: `data` came from `Arc::<T::Cep>::into_foreign` (see above), taken once.
        let cep = unsafe { <Arc<T::Cep> as ForeignOwnable>::from_foreign(data) };
        let Ok(param) = param else {
            return ENOMEM.to_errno();
        };
        // SAFETY: a valid id of a running provider op.
        let id = unsafe { CmId::<T>::from_raw(id, CmRole::Accept) };
        errno(T::Cep::accept(cep, id, param))
    }

    /// `iw_reject`.
    ///
    /// # Safety
    ///
    /// As for `iw_accept_c`; `pdata` holds `len` octets.
    pub(super) unsafe extern "C" fn iw_reject_c(
        id: *mut b::iw_cm_id,
        pdata: *const kernel::ffi::c_void,
        len: u8,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let data = unsafe { take_provider_data(id) };
        if data.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: as in `iw_accept_c`.
        let cep = unsafe { <Arc<T::Cep> as ForeignOwnable>::from_foreign(data) };
        // SAFETY: per the caller.
        let Ok(pd) = (unsafe { copy_pdata(pdata, usize::from(len)) }) else {
            return ENOMEM.to_errno();
        };
        errno(T::Cep::reject(cep, &pd))
    }

    /// `iw_create_listen`: the listener is kept in the id's `provider_data`.
    ///
    /// # Safety
    ///
    /// As for `iw_connect_c`.
    pub(super) unsafe extern "C" fn iw_create_listen_c(
        id: *mut b::iw_cm_id,
        backlog: kernel::ffi::c_int,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let dev = unsafe { Self::from_raw((*id).device) };
        // SAFETY: a valid id of a running provider op.
        let cm_id = unsafe { CmId::<T>::from_raw(id, CmRole::Listen) };
        match T::Listener::create(dev, cm_id, backlog) {
            Ok(l) => {
                // SAFETY: a valid id; iw_cm keeps `provider_data` for the provider.
                unsafe { set_provider_data(id, l.into_foreign()) };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// `iw_destroy_listen`.
    ///
    /// # Safety
    ///
    /// As for `iw_connect_c`, on an id `iw_create_listen_c` succeeded for.
    pub(super) unsafe extern "C" fn iw_destroy_listen_c(
        id: *mut b::iw_cm_id,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let data = unsafe { take_provider_data(id) };
        if data.is_null() {
            return 0;
        }
        // SAFETY: set by `iw_create_listen_c` from `Arc::<T::Listener>::into_foreign`.
        let l = unsafe { <Arc<T::Listener> as ForeignOwnable>::from_foreign(data) };
        l.destroy();
        0
    }
}
