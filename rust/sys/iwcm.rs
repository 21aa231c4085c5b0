// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager interface (`include/rdma/iw_cm.h`): the `iw_cm_id` a
//! provider holds, the events it reports, and the connection parameters it receives.

use super::bindings as b;
use super::ibdev::DeviceOps;
use super::socket::SockAddr;
use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;
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

/// A reference to an `iw_cm_id` of a device of type `T`, taken with its `add_ref` and
/// dropped with `rem_ref`.
///
/// # Invariants
///
/// `ptr` is a valid `iw_cm_id` of a `T` device; this object owns one reference on it.
/// The `provider_data` of ids created from its CONNECT_REQUEST events holds an
/// `Arc<T::Cep>` (see [`CmId::connect_request`]).
pub(crate) struct CmId<T: DeviceOps> {
    ptr: NonNull<b::iw_cm_id>,
    _p: PhantomData<fn() -> T>,
}

// SAFETY: the iw_cm_id is reference counted by iw_cm; `event_handler`, `add_ref` and
// `rem_ref` may be called from any context and thread.
unsafe impl<T: DeviceOps> Send for CmId<T> {}
// SAFETY: as above; `&CmId` only reads fields that are constant while a provider holds
// the id, or calls the thread-safe event handler.
unsafe impl<T: DeviceOps> Sync for CmId<T> {}

impl<T: DeviceOps> CmId<T> {
    /// Takes a reference on `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is a valid `iw_cm_id` handed to a provider operation that is running.
    pub(super) unsafe fn from_raw(ptr: *mut b::iw_cm_id) -> Self {
        // SAFETY: valid per the caller; `add_ref` is always set by iw_cm.
        unsafe {
            if let Some(add_ref) = (*ptr).add_ref {
                add_ref(ptr);
            }
        }
        // SAFETY: a valid pointer is not null.
        let ptr = unsafe { NonNull::new_unchecked(ptr) };
        // INVARIANT: a reference was just taken; `ptr` is valid.
        Self {
            ptr,
            _p: PhantomData,
        }
    }

    /// The id's local address, as the consumer named it (`local_addr`).
    #[expect(dead_code, reason = "used by the transport (data-path slice)")]
    pub(crate) fn local_addr(&self) -> SockAddr {
        // SAFETY: valid id (invariant); the addresses are set before the provider is called
        // and not changed while it holds the id.
        SockAddr::from_storage(unsafe { &(*self.ptr.as_ptr()).local_addr })
    }

    /// The address to bind or listen on (`m_local_addr`: after port mapping).
    pub(crate) fn mapped_local_addr(&self) -> SockAddr {
        // SAFETY: as for `local_addr`.
        SockAddr::from_storage(unsafe { &(*self.ptr.as_ptr()).m_local_addr })
    }

    /// The address to connect to (`m_remote_addr`: after port mapping).
    pub(crate) fn mapped_remote_addr(&self) -> SockAddr {
        // SAFETY: as for `local_addr`.
        SockAddr::from_storage(unsafe { &(*self.ptr.as_ptr()).m_remote_addr })
    }

    /// Whether an IPv6 listener must not accept IPv4 (`afonly`).
    pub(crate) fn afonly(&self) -> bool {
        // SAFETY: as for `local_addr`.
        unsafe { b::rsiw_iw_cm_id_afonly(self.ptr.as_ptr()) }
    }

    /// A counted reference to QP `qpn` of the id's device (the QP a connect or accept
    /// names), or `None` if there is no such QP.
    pub(crate) fn qp_ref(&self, qpn: u32) -> Option<super::ibdev::QpRef<T>> {
        // SAFETY: the valid id (invariant) is bound to a live `T` device (iw_cm passes a
        // provider only ids on its devices), which stays live while the id holds it.
        let dev = unsafe { super::ibdev::IbDevice::<T>::from_raw((*self.ptr.as_ptr()).device) };
        dev.qp_ref(qpn)
    }

    /// Reports `ev` (not a CONNECT_REQUEST: see [`Self::connect_request`]) to iw_cm.
    /// Returns iw_cm's answer (0, or `-ENOMEM` when the event could not be queued).
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
        let mut e: b::iw_cm_event = super::Pod::zeroed();
        e.event = ev.kind.to_c();
        e.status = ev.status;
        if let Some((l, r)) = ev.addrs {
            e.local_addr = *l.storage();
            e.remote_addr = *r.storage();
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

impl<T: DeviceOps> Drop for CmId<T> {
    fn drop(&mut self) {
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
