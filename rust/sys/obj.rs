// SPDX-License-Identifier: GPL-2.0

//! Containers for the RDMA core's objects: the core's struct (`ib_cq`, `ib_qp`, `ib_srq`,
//! `ib_mr`, `ib_ucontext`) first, rsiw's data after it, in one allocation.
//!
//! CQs, QPs, SRQs and user contexts are allocated (zeroed) by the core with the size rsiw
//! sets in `ib_device_ops::size_ib_*`; rsiw initialises its part in place in the create
//! trampoline (`alloc_ucontext`) and drops it in place in the destroy trampoline
//! (`dealloc_ucontext`), and the core frees the memory. MRs are
//! allocated by rsiw itself (see `ibdev/mr.rs`) because the core's MR verbs return the object.

use super::bindings;
use super::ibdev::Objects;
use core::mem::MaybeUninit;
use core::ptr::{addr_of, addr_of_mut};
use kernel::prelude::*;
use kernel::sync::Refcount;
use kernel::types::Opaque;

/// A core object `C` followed by driver data `T`.
///
/// # Invariants
///
/// `base` is a live core object of type `C` whose `device` is an `IbDevice<D>` of rsiw
/// (for the `D` the object was created through), and `data` is initialised, from the end of
/// the create trampoline until the destroy trampoline; the core calls no verb on the object
/// outside that window. Shared references to an `Obj` are only created inside it.
#[repr(C)]
pub(crate) struct Obj<C, T> {
    base: Opaque<C>,
    data: T,
}

impl<C, T> core::ops::Deref for Obj<C, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<C, T> Obj<C, T> {
    /// Returns the object behind a core pointer.
    ///
    /// # Safety
    ///
    /// `raw` is the base of a live `Obj<C, T>` (type invariant window) that stays live for
    /// `'a`.
    pub(super) unsafe fn from_raw<'a>(raw: *mut C) -> &'a Self {
        // SAFETY: `base` is the first field of a `repr(C)` struct, so the container starts at
        // `raw`; the caller guarantees it is live and initialised.
        unsafe { &*raw.cast::<Self>() }
    }

    /// Returns the core object's raw pointer.
    pub(crate) fn as_raw(&self) -> *mut C {
        self.base.get()
    }

    /// Initialises `data` of the core-allocated container at `raw` with `init`.
    ///
    /// # Safety
    ///
    /// `raw` is the base of a core allocation of at least `size_of::<Self>()` octets,
    /// aligned for `Self`, whose `data` is uninitialised and not accessed by anyone else.
    pub(super) unsafe fn init_data<E>(raw: *mut C, init: impl PinInit<T, E>) -> Result<(), E> {
        let this = raw.cast::<Self>();
        // SAFETY: the slot lies inside the allocation and is pinned (the core never moves
        // its objects); on error `init` leaves it uninitialised.
        unsafe { init.__init(core::ptr::addr_of_mut!((*this).data)) }
    }

    /// Drops `data` in place.
    ///
    /// # Safety
    ///
    /// `raw` is the base of a container whose `data` is initialised, and nothing uses the
    /// data afterwards.
    pub(super) unsafe fn drop_data(raw: *mut C) {
        let this = raw.cast::<Self>();
        // SAFETY: guaranteed by the caller.
        unsafe { core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).data)) };
    }
}

/// A completion queue: `struct ib_cq`, the work item that runs the consumer's completion
/// handler on the CPU of the CQ's completion vector, that CPU, and the driver's CQ data.
///
/// Completion vector `v` is CPU `v` (the device offers one vector per possible CPU id). A
/// due handler call runs at once if the completing context is on that CPU, or if the CPU
/// is offline (or not a CPU at all); otherwise `comp` runs it there, on rsiw's work queue.
///
/// # Invariants
///
/// As for [`Obj`]; in addition `comp` is an initialised work item whose function is
/// [`IbCq::comp_work_c`] for this `T` from the start of the data's window until the
/// destroy trampoline, which cancels it (and waits for a running call) before it drops
/// `data`; nothing queues it after that. `cpu` does not change within the window.
#[repr(C)]
pub(crate) struct IbCq<T> {
    base: Opaque<bindings::ib_cq>,
    comp: Opaque<bindings::work_struct>,
    cpu: u32,
    data: T,
}

impl<T> core::ops::Deref for IbCq<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T> IbCq<T> {
    /// Returns the CQ behind a core pointer.
    ///
    /// # Safety
    ///
    /// As for [`Obj::from_raw`].
    pub(super) unsafe fn from_raw<'a>(raw: *mut bindings::ib_cq) -> &'a Self {
        // SAFETY: `base` is the first field of a `repr(C)` struct, so the container starts at
        // `raw`; the caller guarantees it is live and initialised.
        unsafe { &*raw.cast::<Self>() }
    }

    /// Returns the core object's raw pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_cq {
        self.base.get()
    }

    /// Initialises everything but `base` at `raw`: the completion work item, the CPU of
    /// completion vector `vector` and `data` with `init`.
    ///
    /// # Safety
    ///
    /// As for [`Obj::init_data`].
    pub(super) unsafe fn init_rest<E>(
        raw: *mut bindings::ib_cq,
        vector: u32,
        init: impl PinInit<T, E>,
    ) -> Result<(), E> {
        let this = raw.cast::<Self>();
        // The slots lie inside the allocation, are pinned (the core never moves its objects)
        // and exclusively ours; on error nothing was queued and `init` leaves `data`
        // uninitialised, which the core frees as plain memory.
        // SAFETY: as above.
        unsafe {
            bindings::rsiw_work_init(
                Opaque::cast_into(addr_of!((*this).comp)),
                Some(Self::comp_work_c),
            );
            addr_of_mut!((*this).cpu).write(vector);
            init.__init(addr_of_mut!((*this).data))
        }
    }

    /// Cancels a queued completion handler call and waits for one that is running.
    ///
    /// # Safety
    ///
    /// Called from process context by the destroy path of a live CQ (`pre_destroy_cq`,
    /// `destroy_cq`): no QP uses the CQ any more, so nothing queues the work again.
    pub(super) unsafe fn cancel_comp(raw: *mut bindings::ib_cq) {
        let this = raw.cast::<Self>();
        // SAFETY: `comp` is an initialised work item (type invariant); the caller may sleep.
        unsafe { bindings::rsiw_cancel_work_sync(Opaque::cast_into(addr_of!((*this).comp))) };
    }

    /// Cancels the completion work (see [`IbCq::cancel_comp`]) and drops `data` in place.
    ///
    /// # Safety
    ///
    /// As for [`IbCq::cancel_comp`] and [`Obj::drop_data`].
    pub(super) unsafe fn drop_rest(raw: *mut bindings::ib_cq) {
        let this = raw.cast::<Self>();
        // SAFETY: guaranteed by the caller; after the cancel no work item refers to the CQ,
        // so the core may free it once the destroy trampoline returns.
        unsafe {
            Self::cancel_comp(raw);
            core::ptr::drop_in_place(addr_of_mut!((*this).data));
        }
    }

    /// Copies the name of the CQ's device ("rsiw0") into `buf`, cut to fit; returns its
    /// length in octets.
    pub(crate) fn device_name_into(&self, buf: &mut [u8]) -> usize {
        // SAFETY: the CQ is live (type invariant), and so is the device it belongs to: the
        // core destroys a device's objects before the device.
        unsafe { super::ibdev::raw_name_into((*self.as_raw()).device, buf) }
    }

    /// The work function of `comp`: calls the consumer's handler with softirqs disabled,
    /// as in the interrupt context it expects (`IB_POLL_SOFTIRQ`'s `irq_poll_sched` raises
    /// the softirq, which runs at once when they are enabled again).
    ///
    /// # Safety
    ///
    /// Called by the work queue with the `comp` of a live `IbCq<T>`.
    unsafe extern "C" fn comp_work_c(work: *mut bindings::work_struct) {
        // SAFETY: `work` is the `comp` field of an `IbCq<T>` (`repr(C)`); the CQ is live
        // while its work runs, since destroy cancels the work (and waits for it) first.
        let this = unsafe {
            &*work
                .cast::<u8>()
                .sub(core::mem::offset_of!(Self, comp))
                .cast::<Self>()
        };
        // SAFETY: a work function runs in process context with softirqs enabled; the
        // enable balances the disable.
        unsafe { bindings::rsiw_local_bh_disable() };
        this.run_comp_handler();
        // SAFETY: as above.
        unsafe { bindings::rsiw_local_bh_enable() };
    }

    /// Calls the consumer's completion handler (`ib_cq::comp_handler`) here and now, if it
    /// has one.
    ///
    /// Must not be called with a lock held that the consumer's handler may take (see
    /// [`IbCq::call_comp_handler`]).
    pub(crate) fn run_comp_handler(&self) {
        let cq = self.as_raw();
        // SAFETY: the CQ is live (type invariant); the core set `comp_handler` and
        // `cq_context` before calling `create_cq` and does not change them afterwards.
        unsafe {
            if let Some(handler) = (*cq).comp_handler {
                handler(cq, (*cq).cq_context);
            }
        }
    }
}

/// A shared receive queue: `struct ib_srq` followed by the driver's SRQ data.
pub(crate) type IbSrq<T> = Obj<bindings::ib_srq, T>;
/// A memory region: `struct ib_mr` followed by the driver's MR data.
pub(crate) type IbMr<T> = Obj<bindings::ib_mr, T>;
/// A user context: `struct ib_ucontext` followed by its [`UctxData`].
pub(in crate::sys) type IbUcontext = Obj<bindings::ib_ucontext, UctxData>;

/// What rsiw keeps with a user context: the entry that reserves its low mmap offsets
/// (`mem::umap`), and the process that opened it, the owner of its QPs
/// ([`IbQp::serves_caller`]).
pub(in crate::sys) struct UctxData {
    /// Held for its drop (`dealloc_ucontext`), never read.
    pub(in crate::sys) _maps: super::mem::umap::CtxMaps,
    pub(in crate::sys) owner: Owner,
}

impl IbUcontext {
    /// Whether the calling task belongs to the process that opened the context.
    fn owner_is_current(&self) -> bool {
        self.owner.is_current()
    }
}

/// `device_name_into` for the core objects that carry their `ib_device` in `device`.
macro_rules! device_name_into {
    ($($core:ty),*) => {$(
        impl<T> Obj<$core, T> {
            /// Copies the name of the object's device ("rsiw0") into `buf`, cut to fit;
            /// returns its length in octets.
            pub(crate) fn device_name_into(&self, buf: &mut [u8]) -> usize {
                // SAFETY: the object is live (type invariant), and so is the device it
                // belongs to: the core destroys a device's objects before the device.
                unsafe { super::ibdev::raw_name_into((*self.as_raw()).device, buf) }
            }
        }
    )*};
}
device_name_into!(bindings::ib_srq, bindings::ib_mr);

/// The affiliated asynchronous events of a QP rsiw reports (`enum ib_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpEvent {
    /// `IB_EVENT_QP_FATAL`: the connection failed (TERMINATE, reset).
    Fatal,
    /// `IB_EVENT_QP_REQ_ERR`: the consumer posted a malformed work request.
    ReqErr,
    /// `IB_EVENT_QP_ACCESS_ERR`: the peer violated an access right.
    AccessErr,
    /// `IB_EVENT_SQ_DRAINED`: the SQ was flushed.
    SqDrained,
    /// `IB_EVENT_QP_LAST_WQE_REACHED`: a QP with an SRQ left the SRQ for good.
    LastWqeReached,
}

impl QpEvent {
    fn to_raw(self) -> bindings::ib_event_type {
        match self {
            Self::Fatal => bindings::ib_event_type_IB_EVENT_QP_FATAL,
            Self::ReqErr => bindings::ib_event_type_IB_EVENT_QP_REQ_ERR,
            Self::AccessErr => bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
            Self::SqDrained => bindings::ib_event_type_IB_EVENT_SQ_DRAINED,
            Self::LastWqeReached => bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
        }
    }
}

/// Builds an `ib_event` for `event`, the device of `dev` and the element set by `set`.
fn event(
    dev: *mut bindings::ib_device,
    event: bindings::ib_event_type,
    set: impl FnOnce(&mut bindings::ib_event),
) -> bindings::ib_event {
    // SAFETY: all-zeroes is a valid `ib_event` (null pointers, event 0).
    let mut ev: bindings::ib_event = unsafe { MaybeUninit::zeroed().assume_init() };
    ev.device = dev;
    ev.event = event;
    set(&mut ev);
    ev
}

impl<T> IbCq<T> {
    /// Has the consumer's completion handler (`ib_cq::comp_handler`) called on the CPU of
    /// the CQ's completion vector: at once if this context runs there (or that CPU is
    /// offline), else from the CQ's work item on that CPU. A call already queued covers
    /// this one (the handler is an edge notification: it polls all that is there).
    ///
    /// Must not be called with a lock held that the consumer's handler may take (it may
    /// poll the CQ, re-arm it or post work requests).
    pub(crate) fn call_comp_handler(&self) {
        // SAFETY: pairs with `rsiw_put_cpu` below; no sleeping in between (the handler is
        // one that interrupt context may run).
        let here = unsafe { bindings::rsiw_get_cpu() };
        // SAFETY: `rsiw_cpu_online` takes any CPU number.
        let online = unsafe { bindings::rsiw_cpu_online(self.cpu) };
        if here == self.cpu || !online {
            self.run_comp_handler();
        } else {
            // If the CPU goes offline meanwhile, the work queue runs the item elsewhere.
            // SAFETY: `comp` is initialised and the CQ live (type invariants); the work
            // queue exists while rsiw's objects do.
            unsafe { bindings::rsiw_queue_work_on(self.cpu, self.comp.get()) };
        }
        // SAFETY: balances `rsiw_get_cpu`.
        unsafe { bindings::rsiw_put_cpu() };
    }

    /// Reports a CQ overflow (`IB_EVENT_CQ_ERR`) to the consumer's handler.
    pub(crate) fn dispatch_error(&self) {
        let ev = bindings::ib_event_type_IB_EVENT_CQ_ERR;
        let cq = self.as_raw();
        // SAFETY: the CQ is live; `event_handler`/`cq_context` are set by the core before
        // `create_cq`. The handler copies what it needs from the event.
        unsafe {
            if let Some(handler) = (*cq).event_handler {
                let mut e = event((*cq).device, ev, |e| e.element.cq = cq);
                handler(&mut e, (*cq).cq_context);
            }
        }
    }

    /// Sets the CQ depth the core reports (`ib_cq::cqe`). Only during `create_cq`.
    pub(crate) fn set_depth(&self, depth: u32) {
        // SAFETY: the CQ is live; the core reads `cqe` only after `create_cq` returns, and
        // `create_cq` is the only caller (single-threaded for this object).
        unsafe { (*self.as_raw()).cqe = depth as i32 };
    }
}

impl<T> IbSrq<T> {
    /// Reports that fewer WRs than the limit remain posted (`IB_EVENT_SRQ_LIMIT_REACHED`).
    pub(crate) fn dispatch_limit_reached(&self) {
        let ev = bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED;
        let srq = self.as_raw();
        // SAFETY: the SRQ is live; the core sets the handler and context before
        // `create_srq`.
        unsafe {
            if let Some(handler) = (*srq).event_handler {
                let mut e = event((*srq).device, ev, |e| e.element.srq = srq);
                handler(&mut e, (*srq).srq_context);
            }
        }
    }
}

/// The process that created a user object: a counted reference to its thread group
/// (`struct pid`), so that a process ID given to another process later names no other
/// owner.
///
/// # Invariants
///
/// `pid` is a counted reference from `rsiw_owner_get()`, dropped once, by `drop`.
pub(in crate::sys) struct Owner {
    pid: core::ptr::NonNull<kernel::ffi::c_void>,
}

// SAFETY: a `struct pid` reference may be compared and dropped from any task and context.
unsafe impl Send for Owner {}
// SAFETY: comparing reads only the pointer.
unsafe impl Sync for Owner {}

impl Owner {
    /// The calling task's thread group, or `None` if the task is exiting.
    pub(in crate::sys) fn current() -> Option<Self> {
        // SAFETY: no preconditions; the result is a counted reference or null.
        let pid = unsafe { bindings::rsiw_owner_get() };
        // INVARIANT: a counted reference from `rsiw_owner_get()`.
        core::ptr::NonNull::new(pid).map(|pid| Self { pid })
    }

    /// Whether the calling task belongs to the owner's thread group.
    pub(in crate::sys) fn is_current(&self) -> bool {
        // SAFETY: `pid` is a live reference (invariant); only its address is compared.
        unsafe { bindings::rsiw_owner_is_current(self.pid.as_ptr()) }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: the counted reference of the invariant, dropped once.
        unsafe { bindings::rsiw_owner_put(self.pid.as_ptr()) };
    }
}

/// A queue pair: `struct ib_qp`, the reference count that `iw_add_ref`/`iw_rem_ref`
/// hold, and the driver's QP data.
///
/// # Invariants
///
/// As for [`Obj`]; in addition `refs` counts one reference for the QP's existence (dropped
/// by destroy) plus one per `iw_add_ref` not yet balanced, and the memory is not freed
/// before it reached zero ([`IbQp::wait_released`]). The QP's device is an `IbDevice<D>`
/// whose `D::Qp` is `T` (rsiw has one device type), so its CQs and SRQ are `IbCq<D::Cq>`
/// and `IbSrq<D::Srq>`.
#[repr(C)]
#[pin_data]
pub(crate) struct IbQp<T> {
    base: Opaque<bindings::ib_qp>,
    refs: Refcount,
    #[pin]
    data: T,
}

impl<T> core::ops::Deref for IbQp<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T> IbQp<T> {
    /// # Safety
    ///
    /// As for [`Obj::from_raw`].
    pub(super) unsafe fn from_raw<'a>(raw: *mut bindings::ib_qp) -> &'a Self {
        // SAFETY: `base` is the first field of a `repr(C)` struct; see the caller.
        unsafe { &*raw.cast::<Self>() }
    }

    /// Returns the core object's raw pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_qp {
        self.base.get()
    }

    /// Initialises everything but `base` at `raw`.
    ///
    /// # Safety
    ///
    /// As for [`Obj::init_data`].
    pub(super) unsafe fn init_rest(
        raw: *mut bindings::ib_qp,
        init: impl PinInit<T, Error>,
    ) -> Result {
        let this = raw.cast::<Self>();
        // SAFETY: the slots lie inside the allocation, are pinned and exclusively ours.
        unsafe {
            core::ptr::addr_of_mut!((*this).refs).write(Refcount::new(1));
            init.__init(core::ptr::addr_of_mut!((*this).data))
        }
    }

    /// Drops the driver data in place.
    ///
    /// # Safety
    ///
    /// As for [`Obj::drop_data`].
    pub(super) unsafe fn drop_rest(raw: *mut bindings::ib_qp) {
        let this = raw.cast::<Self>();
        // SAFETY: guaranteed by the caller.
        unsafe { core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).data)) };
    }

    /// Whether the calling task may bind the QP to a connection (iw_cm's `iw_get_qp` in
    /// its `rdma_connect` or `rdma_accept`): a user QP only for a task of the process that
    /// opened its user context, a kernel consumer's QP (no `uobject`) for any caller.
    pub(crate) fn serves_caller(&self) -> bool {
        // SAFETY: the QP, its PD and, for a user QP, the PD's user object and rsiw context
        // are live: the core destroys a context's QPs before its PDs and the context.
        unsafe {
            if !bindings::rsiw_qp_is_user(self.as_raw()) {
                return true;
            }
            // A user QP without a context serves nobody.
            let uctx = bindings::rsiw_qp_ucontext(self.as_raw());
            !uctx.is_null() && IbUcontext::from_raw(uctx).owner_is_current()
        }
    }

    /// The CQ of the QP's send completions (`ib_qp::send_cq`). The core sets it before
    /// `create_qp` (which refuses a null one) and holds a use count on the CQ, refusing its
    /// destroy, until `destroy_qp` returned.
    pub(crate) fn send_cq<D: Objects<Qp = T>>(&self) -> &IbCq<D::Cq> {
        // SAFETY: a live CQ of the QP's device while the QP lives (see above, type invariant).
        unsafe { &*(*self.as_raw()).send_cq.cast::<IbCq<D::Cq>>() }
    }

    /// The QP's device (`ib_qp::device`), which outlives the QP.
    pub(crate) fn device<D: Objects<Qp = T>>(&self) -> &super::ibdev::IbDevice<D> {
        // SAFETY: the core sets `device` to the live rsiw device the QP was created on
        // (type invariant: its `D::Qp` is `T`).
        unsafe { super::ibdev::IbDevice::from_raw((*self.as_raw()).device) }
    }

    /// The CQ of the QP's receive completions (`ib_qp::recv_cq`).
    pub(crate) fn recv_cq<D: Objects<Qp = T>>(&self) -> &IbCq<D::Cq> {
        // SAFETY: as in `send_cq`, for `recv_cq`.
        unsafe { &*(*self.as_raw()).recv_cq.cast::<IbCq<D::Cq>>() }
    }

    /// The SRQ the QP takes its receive WQEs from (`ib_qp::srq`), if any.
    pub(crate) fn srq<D: Objects<Qp = T>>(&self) -> Option<&IbSrq<D::Srq>> {
        // SAFETY: as in `send_cq`, for `srq`, which may be null.
        unsafe { (*self.as_raw()).srq.cast::<IbSrq<D::Srq>>().as_ref() }
    }

    /// Copies the name of the QP's device into `buf`, cut to fit; returns its length in
    /// octets.
    pub(crate) fn device_name_into(&self, buf: &mut [u8]) -> usize {
        // SAFETY: the QP is live, and so is the device it belongs to (the core destroys a
        // device's objects before the device).
        unsafe { super::ibdev::raw_name_into((*self.as_raw()).device, buf) }
    }

    /// Returns the QP number (`ib_qp::qp_num`).
    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: the QP is live; `qp_num` is set before the data is initialised and never
        // changes afterwards.
        unsafe { (*self.as_raw()).qp_num }
    }

    /// Reports an affiliated asynchronous QP event to the consumer's handler.
    pub(crate) fn dispatch_event(&self, ev: QpEvent) {
        let ev = ev.to_raw();
        let qp = self.as_raw();
        // SAFETY: the QP is live; the core sets `event_handler`/`qp_context` before
        // `create_qp`.
        unsafe {
            if let Some(handler) = (*qp).event_handler {
                let mut e = event((*qp).device, ev, |e| e.element.qp = qp);
                handler(&mut e, (*qp).qp_context);
            }
        }
    }

    /// Takes a reference for `iw_add_ref`.
    pub(super) fn get_ref(&self) {
        self.refs.inc();
    }

    /// The `refcount_t` that `refs` wraps.
    fn refs_raw(&self) -> *mut bindings::refcount_t {
        // `Refcount` is a transparent wrapper of an `Opaque<refcount_t>`.
        core::ptr::from_ref(&self.refs)
            .cast_mut()
            .cast::<bindings::refcount_t>()
    }

    /// Drops a reference; the last one lets a waiting destroy proceed, which may free the
    /// QP at once.
    pub(super) fn put_ref(&self) {
        // SAFETY: `refs` is a live `refcount_t`; the helper touches the QP no more once
        // the count is zero (it only hashes the address to wake the destroy).
        unsafe { bindings::rsiw_refcount_put(self.refs_raw()) };
    }

    /// Waits (sleeping) until every reference is dropped; process context. After it the
    /// QP may be freed.
    pub(super) fn wait_released(&self) {
        // SAFETY: `refs` is a live `refcount_t`.
        unsafe { bindings::rsiw_refcount_wait_zero(self.refs_raw()) };
    }
}

/// The identity of a protection domain (for comparisons only; never dereferenced).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PdId(usize);

impl PdId {
    /// The identity of the PD at `pd` (only its address is kept).
    pub(super) fn of(pd: *mut bindings::ib_pd) -> Self {
        Self(pd as usize)
    }
}
