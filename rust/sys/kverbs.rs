// SPDX-License-Identifier: GPL-2.0

//! rsiw as a kernel consumer of its own devices, through the RDMA core's kernel verbs
//! (`ib_alloc_pd`, `ib_create_qp`, `ib_post_send`, `ib_poll_cq`, ...): safe owners of
//! kernel PDs, CQs, QPs, SRQs and MRs for the KUnit suite `rsiw_kverbs`, which checks what
//! a kernel ULP (NVMe-oF, NFS/RDMA, iSER) sees.
//!
//! Every object borrows what it was created from (a QP its PD and CQs, a PD its device), so
//! the borrow checker enforces the core's destruction order; dropping an object destroys
//! it. All objects of a [`KDevice<T>`] belong to an rsiw device of type `T`, which lets
//! [`KQp::driver`] and [`KSrq::driver`] hand out rsiw's own view of them.

use super::bindings;
use super::ibdev::{DeviceOps, IbDevice};
use super::netdev::{NetDev, NetDevRef};
use super::obj::{IbQp, IbSrq, PdId};
use super::Pod;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::ib_qp_init_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_qp_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_srq_init_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_srq_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_cq_init_attr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_rdma_wr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_recv_wr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_send_wr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_cqe {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_sge {}
// SAFETY: as above.
unsafe impl Pod for bindings::scatterlist {}

/// The module name the core records as the creator of kernel objects.
const CALLER: &CStr = c"rsiw";

/// Turns an `ERR_PTR`-or-object return value into a non-null pointer.
fn from_err_ptr<T>(p: *mut T) -> Result<NonNull<T>> {
    let p = kernel::error::from_err_ptr(p)?;
    NonNull::new(p).ok_or(ENOMEM)
}

/// Returns the network device `name` of the initial network namespace, with a reference.
pub(crate) fn netdev_by_name(name: &CStr) -> Option<NetDevRef> {
    // SAFETY: `init_net` lives as long as the kernel; `dev_get_by_name` returns a held
    // device or null, and the reference is transferred to the `NetDevRef`.
    unsafe {
        let p = bindings::dev_get_by_name(&raw mut bindings::init_net, name.as_char_ptr());
        NetDevRef::from_owned(p)
    }
}

/// The `wr_id` of a work completion.
pub(crate) fn wc_wr_id(wc: &bindings::ib_wc) -> u64 {
    // SAFETY: both union members (`wr_id`, `wr_cqe`) are 64 bits of plain data.
    unsafe { wc.__bindgen_anon_1.wr_id }
}

/// The invalidated rkey of a work completion (meaningful with `IB_WC_WITH_INVALIDATE`).
pub(crate) fn wc_invalidate_rkey(wc: &bindings::ib_wc) -> u32 {
    // SAFETY: both union members (`imm_data`, `invalidate_rkey`) are 32-bit integers.
    unsafe { wc.ex.invalidate_rkey }
}

/// A reference to a registered rsiw device of type `T`.
///
/// # Invariants
///
/// `raw` is an `IbDevice<T>` of rsiw on which this value holds a reference
/// (`ib_device_get_by_netdev`), so it stays allocated and registered or unregistering.
pub(crate) struct KDevice<T: DeviceOps> {
    raw: NonNull<bindings::ib_device>,
    _t: PhantomData<T>,
}

impl<T: DeviceOps> KDevice<T> {
    /// The rsiw device bound to `ndev`, or `None` if there is none (or it is the C siw's).
    pub(crate) fn of_netdev(ndev: &NetDev) -> Option<Self> {
        // SAFETY: `ndev` is live; the lookup returns a referenced device or null.
        let raw = NonNull::new(unsafe {
            bindings::ib_device_get_by_netdev(
                ndev.as_ptr(),
                bindings::rdma_driver_id_RDMA_DRIVER_SIW,
            )
        })?;
        // SAFETY: the device is live and referenced; `ops` is a plain copy we may read.
        if unsafe { (*raw.as_ptr()).ops.owner } != super::this_module() {
            // SAFETY: balances the lookup.
            unsafe { bindings::ib_device_put(raw.as_ptr()) };
            return None;
        }
        // INVARIANT: rsiw creates devices only through `NewDevice<T>` with its one device
        // type, so an rsiw-owned device is an `IbDevice<T>`; the lookup's reference is ours.
        Some(Self {
            raw,
            _t: PhantomData,
        })
    }

    /// rsiw's view of the device.
    pub(crate) fn driver(&self) -> &IbDevice<T> {
        // SAFETY: a live `IbDevice<T>` (type invariant) for as long as `self` is borrowed.
        unsafe { IbDevice::<T>::from_raw(self.raw.as_ptr()) }
    }

    /// Unregisters the device (synchronously; it is freed when the last reference goes).
    pub(crate) fn unregister(self) {
        let raw = self.raw.as_ptr();
        core::mem::forget(self);
        // SAFETY: the reference of the forgotten value is handed to the call, which drops
        // it after unregistering.
        unsafe { bindings::ib_unregister_device_and_put(raw) };
    }

    fn as_raw(&self) -> *mut bindings::ib_device {
        self.raw.as_ptr()
    }
}

impl<T: DeviceOps> Drop for KDevice<T> {
    fn drop(&mut self) {
        // SAFETY: balances the reference of the lookup (type invariant).
        unsafe { bindings::ib_device_put(self.raw.as_ptr()) };
    }
}

/// Asynchronous events and completion handler calls received by a kernel object.
pub(crate) struct Events {
    count: AtomicU32,
    last: AtomicU32,
}

impl Events {
    /// What [`Events::last`] reports after a completion handler call.
    pub(crate) const COMPLETION: u32 = u32::MAX - 1;

    /// No event yet.
    pub(crate) const fn new() -> Self {
        Self {
            count: AtomicU32::new(0),
            last: AtomicU32::new(u32::MAX),
        }
    }

    /// How many events (or completion handler calls) arrived.
    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// The type of the last event (`IB_EVENT_*`), `u32::MAX` if none.
    pub(crate) fn last(&self) -> u32 {
        self.last.load(Ordering::Acquire)
    }

    fn record(&self, what: u32) {
        self.last.store(what, Ordering::Release);
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn as_ctx(&'static self) -> *mut c_void {
        core::ptr::from_ref(self).cast_mut().cast()
    }

    /// # Safety
    ///
    /// Called by the RDMA core with a valid event and the context from `as_ctx`.
    unsafe extern "C" fn event_c(ev: *mut bindings::ib_event, ctx: *mut c_void) {
        // SAFETY: `ctx` is a `&'static Events` (`as_ctx`); `ev` is valid for the call.
        unsafe { (*ctx.cast::<Events>()).record((*ev).event) };
    }

    /// # Safety
    ///
    /// Called by the RDMA core with the context from `as_ctx`.
    unsafe extern "C" fn comp_c(_cq: *mut bindings::ib_cq, ctx: *mut c_void) {
        // SAFETY: `ctx` is a `&'static Events` (`as_ctx`).
        unsafe { (*ctx.cast::<Events>()).record(Events::COMPLETION) };
    }
}

/// A kernel protection domain (`ib_alloc_pd`, without `IB_PD_UNSAFE_GLOBAL_RKEY`).
///
/// # Invariants
///
/// `raw` is a PD of the borrowed device, owned by this value.
pub(crate) struct KPd<'d, T: DeviceOps> {
    raw: NonNull<bindings::ib_pd>,
    _d: PhantomData<&'d KDevice<T>>,
}

impl<'d, T: DeviceOps> KPd<'d, T> {
    /// Allocates a PD (the core also gets its DMA MR for `local_dma_lkey`).
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_pd`.
    pub(crate) fn new(dev: &'d KDevice<T>) -> Result<Self> {
        // SAFETY: a live device; the core returns a PD or an `ERR_PTR`.
        let raw = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(dev.as_raw(), 0, CALLER.as_char_ptr())
        })?;
        Ok(Self {
            raw,
            _d: PhantomData,
        })
    }

    /// The lkey of the PD's DMA MR (all kernel memory, local write).
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: a live PD; the field is set at allocation.
        unsafe { (*self.raw.as_ptr()).local_dma_lkey }
    }

    /// The PD's identity as rsiw's objects record it.
    pub(crate) fn id(&self) -> PdId {
        PdId::of(self.raw.as_ptr())
    }
}

impl<T: DeviceOps> Drop for KPd<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); objects created from it borrow it and are gone.
        let ret = unsafe { bindings::ib_dealloc_pd_user(self.raw.as_ptr(), core::ptr::null_mut()) };
        if ret != 0 {
            pr_err!("kverbs: ib_dealloc_pd failed ({ret})\n");
        }
    }
}

/// A kernel completion queue.
///
/// # Invariants
///
/// `raw` is a CQ of the borrowed device owned by this value; `direct` says whether it came
/// from `ib_alloc_cq` (`IB_POLL_DIRECT` or `IB_POLL_SOFTIRQ`, freed with `ib_free_cq`) or
/// from `ib_create_cq` with the handlers of a `'static` [`Events`].
pub(crate) struct KCq<'d, T: DeviceOps> {
    raw: NonNull<bindings::ib_cq>,
    direct: bool,
    _d: PhantomData<&'d KDevice<T>>,
}

impl<'d, T: DeviceOps> KCq<'d, T> {
    /// Creates a CQ of `cqe` entries whose completion handler calls and events are
    /// recorded in `events`.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_cq`.
    pub(crate) fn new(dev: &'d KDevice<T>, cqe: u32, events: &'static Events) -> Result<Self> {
        let mut attr = bindings::ib_cq_init_attr::zeroed();
        attr.cqe = cqe;
        // SAFETY: a live device, valid attributes; the handlers and their context are
        // `'static`.
        let raw = from_err_ptr(unsafe {
            bindings::__ib_create_cq(
                dev.as_raw(),
                Some(Events::comp_c),
                Some(Events::event_c),
                events.as_ctx(),
                &attr,
                CALLER.as_char_ptr(),
            )
        })?;
        Ok(Self {
            raw,
            direct: false,
            _d: PhantomData,
        })
    }

    /// Allocates a CQ of `cqe` entries polled directly by its consumer (`IB_POLL_DIRECT`,
    /// as `ib_drain_qp` can use; the core warns if the provider calls its handler).
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_cq`.
    pub(crate) fn new_direct(dev: &'d KDevice<T>, cqe: i32) -> Result<Self> {
        Self::alloc(dev, cqe, bindings::ib_poll_context_IB_POLL_DIRECT)
    }

    /// Allocates a CQ of `cqe` entries that the core polls in softirq (`IB_POLL_SOFTIRQ`,
    /// as nvme-rdma, iSER and RDS do): each completion's `wr_cqe->done` runs there.
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_cq`.
    pub(crate) fn new_softirq(dev: &'d KDevice<T>, cqe: i32) -> Result<Self> {
        Self::alloc(dev, cqe, bindings::ib_poll_context_IB_POLL_SOFTIRQ)
    }

    fn alloc(dev: &'d KDevice<T>, cqe: i32, poll: bindings::ib_poll_context) -> Result<Self> {
        // SAFETY: a live device; the core returns a CQ or an `ERR_PTR`.
        let raw = from_err_ptr(unsafe {
            bindings::__ib_alloc_cq(
                dev.as_raw(),
                core::ptr::null_mut(),
                cqe,
                0,
                poll,
                CALLER.as_char_ptr(),
            )
        })?;
        Ok(Self {
            raw,
            direct: true,
            _d: PhantomData,
        })
    }

    /// The CQ depth the provider granted.
    pub(crate) fn depth(&self) -> i32 {
        // SAFETY: a live CQ; `cqe` is set at creation.
        unsafe { (*self.raw.as_ptr()).cqe }
    }

    /// `ib_poll_cq`: fills up to `wc.len()` work completions; returns how many.
    pub(crate) fn poll(&self, wc: &mut [bindings::ib_wc]) -> i32 {
        let cq = self.raw.as_ptr();
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: a live CQ whose device implements `poll_cq`; `wc` has room for `n`.
        unsafe {
            match (*(*cq).device).ops.poll_cq {
                Some(f) => f(cq, n, wc.as_mut_ptr()),
                None => EOPNOTSUPP.to_errno(),
            }
        }
    }

    /// `ib_req_notify_cq` with `IB_CQ_*` flags.
    pub(crate) fn req_notify(&self, flags: u32) -> i32 {
        let cq = self.raw.as_ptr();
        // SAFETY: a live CQ whose device implements `req_notify_cq`.
        unsafe {
            match (*(*cq).device).ops.req_notify_cq {
                Some(f) => f(cq, flags),
                None => EOPNOTSUPP.to_errno(),
            }
        }
    }
}

impl<T: DeviceOps> Drop for KCq<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); QPs using it borrow it and are gone.
        unsafe {
            if self.direct {
                bindings::ib_free_cq(self.raw.as_ptr());
            } else {
                bindings::ib_destroy_cq_user(self.raw.as_ptr(), core::ptr::null_mut());
            }
        }
    }
}

/// A chain of signalled zero-length Sends on one QP, each posted by the completion handler
/// of the one before (`wr_cqe->done`), as nvme-rdma posts LOCAL_INV from its completions.
/// With the QP's send CQ from [`KCq::new_softirq`] every post after the first runs in
/// softirq, so lockdep sees each lock `post_send` takes in softirq as well as in process
/// context.
///
/// # Invariants
///
/// `cqe` is the first field (`repr(C)`), so a `wr_cqe` pointing at it points at the chain;
/// the chain is boxed and not moved while a Send it posted may complete (the owner keeps it
/// until the CQ is freed, which waits for the softirq poller).
#[repr(C)]
pub(crate) struct SoftirqChain {
    cqe: bindings::ib_cqe,
    qp: AtomicPtr<bindings::ib_qp>,
    left: AtomicU32,
    completed: AtomicU32,
    in_softirq: AtomicU32,
    failed: AtomicU32,
}

impl SoftirqChain {
    /// A chain that will post `len` Sends in all, not started.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(len: u32) -> Result<KBox<Self>> {
        let mut cqe = bindings::ib_cqe::zeroed();
        cqe.done = Some(Self::done_c);
        Ok(KBox::new(
            Self {
                cqe,
                qp: AtomicPtr::new(core::ptr::null_mut()),
                left: AtomicU32::new(len),
                completed: AtomicU32::new(0),
                in_softirq: AtomicU32::new(0),
                failed: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// Posts the first Send on `qp` from the caller's context.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn start<T: DeviceOps>(&self, qp: &KQp<'_, T>) -> Result {
        self.qp.store(qp.as_ptr(), Ordering::Release);
        self.post()
    }

    /// Completions handled so far.
    pub(crate) fn completed(&self) -> u32 {
        self.completed.load(Ordering::Acquire)
    }

    /// Completions whose handler ran in softirq.
    pub(crate) fn in_softirq(&self) -> u32 {
        self.in_softirq.load(Ordering::Acquire)
    }

    /// Posts that the provider refused.
    pub(crate) fn failed(&self) -> u32 {
        self.failed.load(Ordering::Acquire)
    }

    fn post(&self) -> Result {
        let qp = self.qp.load(Ordering::Acquire);
        if qp.is_null() || self.left.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        self.left.fetch_sub(1, Ordering::AcqRel);
        let mut wr = bindings::ib_send_wr::zeroed();
        wr.__bindgen_anon_1.wr_cqe = core::ptr::from_ref(&self.cqe).cast_mut();
        wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: `qp` is the live QP `start` was given (its owner destroys it before the
        // chain); `wr` is valid for the call.
        let ret = unsafe {
            match (*(*qp).device).ops.post_send {
                Some(f) => f(qp, &wr, &mut bad),
                None => EOPNOTSUPP.to_errno(),
            }
        };
        super::to_result(ret)
    }

    /// # Safety
    ///
    /// Called by the RDMA core's CQ poller with a completion of a Send this chain posted.
    unsafe extern "C" fn done_c(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: the completion's `wr_cqe` is the chain's `cqe`, its first field (type
        // invariant), and the chain outlives the CQ's poller.
        let this = unsafe { &*(*wc).__bindgen_anon_1.wr_cqe.cast::<SoftirqChain>() };
        // SAFETY: no requirements.
        if unsafe { bindings::rsiw_in_serving_softirq() } {
            this.in_softirq.fetch_add(1, Ordering::AcqRel);
        }
        this.completed.fetch_add(1, Ordering::AcqRel);
        if this.post().is_err() {
            this.failed.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// One scatter/gather element: `len` octets at kernel virtual address `addr`, `lkey`.
#[derive(Clone, Copy)]
pub(crate) struct Sge {
    /// Kernel virtual address (rsiw uses virtual DMA).
    pub(crate) addr: u64,
    /// Length in octets.
    pub(crate) len: u32,
    /// Local key.
    pub(crate) lkey: u32,
}

/// A send work request.
pub(crate) struct SendReq<'a> {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// `IB_WR_*`.
    pub(crate) opcode: bindings::ib_wr_opcode,
    /// `IB_SEND_*`.
    pub(crate) flags: u32,
    /// The local buffers.
    pub(crate) sges: &'a [Sge],
    /// Remote address and key (RDMA WRITE/READ); the key is the STag to invalidate for
    /// LOCAL_INV and SEND_WITH_INV.
    pub(crate) rdma: (u64, u32),
}

/// A receive work request.
pub(crate) struct RecvReq<'a> {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// The buffers.
    pub(crate) sges: &'a [Sge],
}

/// A failed post: the error and the index of the first request not posted.
pub(crate) type PostFail = (Error, usize);

/// Builds the core's SGE array for all requests, in order.
fn sge_array<'a>(lists: impl Iterator<Item = &'a [Sge]>) -> Result<KVec<bindings::ib_sge>> {
    let mut v = KVec::new();
    for l in lists {
        for s in l {
            v.push(
                bindings::ib_sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                },
                GFP_KERNEL,
            )?;
        }
    }
    Ok(v)
}

/// Returns the index of `bad` in `list` (`list.len()` if absent).
fn index_of<W>(list: &[W], bad: *const W) -> usize {
    list.iter()
        .position(|w| core::ptr::eq(w, bad))
        .unwrap_or(list.len())
}

/// Builds a linked list of receive WRs in `wrs` over `sges` and posts it with `post`.
fn post_recv_list(
    reqs: &[RecvReq<'_>],
    post: impl FnOnce(*const bindings::ib_recv_wr, *mut *const bindings::ib_recv_wr) -> c_int,
) -> Result<(), PostFail> {
    let mut sges = sge_array(reqs.iter().map(|r| r.sges)).map_err(|e| (e, 0))?;
    let mut wrs = KVec::with_capacity(reqs.len(), GFP_KERNEL).map_err(|e| (e.into(), 0))?;
    let mut at = 0;
    for r in reqs {
        let mut wr = bindings::ib_recv_wr::zeroed();
        wr.__bindgen_anon_1.wr_id = r.id;
        wr.num_sge = r.sges.len() as c_int;
        // In bounds: `sges` holds every request's SGEs in order.
        wr.sg_list = sges.as_mut_ptr().wrapping_add(at);
        at += r.sges.len();
        wrs.push(wr, GFP_KERNEL).map_err(|e| (e.into(), 0))?;
    }
    // Linked after all pushes: the vector no longer moves.
    let base = wrs.as_mut_ptr();
    for i in 1..wrs.len() {
        wrs[i - 1].next = base.wrapping_add(i);
    }
    let mut bad: *const bindings::ib_recv_wr = core::ptr::null();
    let head = if wrs.is_empty() {
        core::ptr::null()
    } else {
        wrs.as_ptr()
    };
    match post(head, &mut bad) {
        0 => Ok(()),
        e => Err((Error::from_errno(e), index_of(&wrs, bad))),
    }
}

/// A kernel SRQ whose events are recorded in a `'static` [`Events`].
///
/// # Invariants
///
/// `raw` is an SRQ of a PD of a `KDevice<T>`, owned by this value.
pub(crate) struct KSrq<'p, T: DeviceOps> {
    raw: NonNull<bindings::ib_srq>,
    _p: PhantomData<&'p KPd<'p, T>>,
}

impl<'p, T: DeviceOps> KSrq<'p, T> {
    /// Creates a basic SRQ of `max_wr` WRs with `max_sge` SGEs and limit `limit`.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_srq`.
    pub(crate) fn new(
        pd: &'p KPd<'p, T>,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        events: &'static Events,
    ) -> Result<Self> {
        let mut init = bindings::ib_srq_init_attr::zeroed();
        init.event_handler = Some(Events::event_c);
        init.srq_context = events.as_ctx();
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        init.attr.srq_limit = limit;
        init.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        // SAFETY: a live PD; valid attributes; no user object or data (kernel SRQ).
        let raw = from_err_ptr(unsafe {
            bindings::ib_create_srq_user(
                pd.raw.as_ptr(),
                &mut init,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        })?;
        Ok(Self {
            raw,
            _p: PhantomData,
        })
    }

    /// `ib_post_srq_recv`.
    ///
    /// # Errors
    ///
    /// The provider's error and the index of the first request not posted.
    pub(crate) fn post_recv(&self, reqs: &[RecvReq<'_>]) -> Result<(), PostFail> {
        let srq = self.raw.as_ptr();
        post_recv_list(reqs, |head, bad| {
            // SAFETY: a live SRQ; the list and its SGEs are valid for the call.
            unsafe {
                match (*(*srq).device).ops.post_srq_recv {
                    Some(f) => f(srq, head, bad),
                    None => EOPNOTSUPP.to_errno(),
                }
            }
        })
    }

    /// `ib_modify_srq(IB_SRQ_LIMIT)`.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn set_limit(&self, limit: u32) -> Result {
        let mut attr = bindings::ib_srq_attr::zeroed();
        attr.srq_limit = limit;
        // SAFETY: a live SRQ and valid attributes.
        super::to_result(unsafe {
            bindings::ib_modify_srq(
                self.raw.as_ptr(),
                &mut attr,
                bindings::ib_srq_attr_mask_IB_SRQ_LIMIT,
            )
        })
    }

    /// `ib_query_srq`: `(max_wr, max_sge, srq_limit)`.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn query(&self) -> Result<(u32, u32, u32)> {
        let mut attr = bindings::ib_srq_attr::zeroed();
        // SAFETY: a live SRQ and a valid output buffer.
        super::to_result(unsafe { bindings::ib_query_srq(self.raw.as_ptr(), &mut attr) })?;
        Ok((attr.max_wr, attr.max_sge, attr.srq_limit))
    }

    /// rsiw's view of the SRQ.
    pub(crate) fn driver(&self) -> &IbSrq<T::Srq> {
        // SAFETY: the SRQ belongs to an `IbDevice<T>` (type invariant) and lives while
        // `self` is borrowed.
        unsafe { IbSrq::<T::Srq>::from_raw(self.raw.as_ptr()) }
    }
}

impl<T: DeviceOps> Drop for KSrq<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); QPs using it borrow it and are gone.
        unsafe { bindings::ib_destroy_srq_user(self.raw.as_ptr(), core::ptr::null_mut()) };
    }
}

/// QP capabilities requested at creation.
#[derive(Clone, Copy)]
pub(crate) struct Caps {
    /// SQ depth.
    pub(crate) send_wr: u32,
    /// RQ depth.
    pub(crate) recv_wr: u32,
    /// SGEs per send WR.
    pub(crate) send_sge: u32,
    /// SGEs per receive WR.
    pub(crate) recv_sge: u32,
    /// Inline octets.
    pub(crate) inline: u32,
}

/// A kernel QP whose events are recorded in a `'static` [`Events`].
///
/// # Invariants
///
/// `raw` is a QP of a PD of a `KDevice<T>`, owned by this value; its PD, CQs and SRQ
/// outlive it (borrowed for `'a`).
pub(crate) struct KQp<'a, T: DeviceOps> {
    raw: NonNull<bindings::ib_qp>,
    _a: PhantomData<&'a KPd<'a, T>>,
}

impl<'a, T: DeviceOps> KQp<'a, T> {
    /// Creates a QP of type `qp_type` (`IB_QPT_*`) with `caps`, signalling requested WRs
    /// only.
    ///
    /// # Errors
    ///
    /// The error of `ib_create_qp`.
    pub(crate) fn new(
        pd: &'a KPd<'a, T>,
        scq: &'a KCq<'a, T>,
        rcq: &'a KCq<'a, T>,
        srq: Option<&'a KSrq<'a, T>>,
        qp_type: bindings::ib_qp_type,
        caps: Caps,
        events: &'static Events,
    ) -> Result<Self> {
        let mut init = bindings::ib_qp_init_attr::zeroed();
        init.event_handler = Some(Events::event_c);
        init.qp_context = events.as_ctx();
        init.send_cq = scq.raw.as_ptr();
        init.recv_cq = rcq.raw.as_ptr();
        init.srq = srq.map_or(core::ptr::null_mut(), |s| s.raw.as_ptr());
        init.cap.max_send_wr = caps.send_wr;
        init.cap.max_recv_wr = caps.recv_wr;
        init.cap.max_send_sge = caps.send_sge;
        init.cap.max_recv_sge = caps.recv_sge;
        init.cap.max_inline_data = caps.inline;
        init.sq_sig_type = bindings::ib_sig_type_IB_SIGNAL_REQ_WR;
        init.qp_type = qp_type;
        // SAFETY: a live PD and CQs (and SRQ) of the same device; valid attributes.
        let raw = from_err_ptr(unsafe {
            bindings::ib_create_qp_kernel(pd.raw.as_ptr(), &mut init, CALLER.as_char_ptr())
        })?;
        Ok(Self {
            raw,
            _a: PhantomData,
        })
    }

    /// The QP number.
    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: a live QP; `qp_num` is set at creation.
        unsafe { (*self.raw.as_ptr()).qp_num }
    }

    /// The core's pointer (as work completions report it).
    pub(crate) fn as_ptr(&self) -> *mut bindings::ib_qp {
        self.raw.as_ptr()
    }

    /// `ib_modify_qp(IB_QP_STATE)` to `state` (`IB_QPS_*`).
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn set_state(&self, state: bindings::ib_qp_state) -> Result {
        let mut attr = bindings::ib_qp_attr::zeroed();
        attr.qp_state = state;
        // SAFETY: a live QP and valid attributes.
        super::to_result(unsafe {
            bindings::ib_modify_qp(
                self.raw.as_ptr(),
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as c_int,
            )
        })
    }

    /// `ib_query_qp`: the state and the granted `(max_send_wr, max_recv_wr)`.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn query(&self) -> Result<(bindings::ib_qp_state, u32, u32)> {
        let mut attr = bindings::ib_qp_attr::zeroed();
        let mut init = bindings::ib_qp_init_attr::zeroed();
        let mask =
            (bindings::ib_qp_attr_mask_IB_QP_STATE | bindings::ib_qp_attr_mask_IB_QP_CAP) as c_int;
        // SAFETY: a live QP and valid output buffers.
        super::to_result(unsafe {
            bindings::ib_query_qp(self.raw.as_ptr(), &mut attr, mask, &mut init)
        })?;
        Ok((attr.qp_state, init.cap.max_send_wr, init.cap.max_recv_wr))
    }

    /// `ib_post_send`.
    ///
    /// # Errors
    ///
    /// The provider's error and the index of the first request not posted.
    pub(crate) fn post_send(&self, reqs: &[SendReq<'_>]) -> Result<(), PostFail> {
        let mut sges = sge_array(reqs.iter().map(|r| r.sges)).map_err(|e| (e, 0))?;
        let mut wrs = KVec::with_capacity(reqs.len(), GFP_KERNEL).map_err(|e| (e.into(), 0))?;
        let mut at = 0;
        for r in reqs {
            let mut w = bindings::ib_rdma_wr::zeroed();
            w.wr.__bindgen_anon_1.wr_id = r.id;
            w.wr.opcode = r.opcode;
            w.wr.send_flags = r.flags as c_int;
            w.wr.num_sge = r.sges.len() as c_int;
            // In bounds: `sges` holds every request's SGEs in order.
            w.wr.sg_list = sges.as_mut_ptr().wrapping_add(at);
            at += r.sges.len();
            (w.remote_addr, w.rkey) = r.rdma;
            if matches!(
                r.opcode,
                bindings::ib_wr_opcode_IB_WR_LOCAL_INV | bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV
            ) {
                w.wr.ex.invalidate_rkey = r.rdma.1;
            }
            wrs.push(w, GFP_KERNEL).map_err(|e| (e.into(), 0))?;
        }
        // Linked after all pushes: the vector no longer moves. `wr` is the first member of
        // `ib_rdma_wr`, so a pointer to one is a pointer to the other.
        let base = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            wrs[i - 1].wr.next = base.wrapping_add(i).cast::<bindings::ib_send_wr>();
        }
        let qp = self.raw.as_ptr();
        let head: *const bindings::ib_send_wr = if wrs.is_empty() {
            core::ptr::null()
        } else {
            wrs.as_ptr().cast()
        };
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: a live QP; the list and its SGEs are valid and unchanged for the call.
        let ret = unsafe {
            match (*(*qp).device).ops.post_send {
                Some(f) => f(qp, head, &mut bad),
                None => EOPNOTSUPP.to_errno(),
            }
        };
        match ret {
            0 => Ok(()),
            e => Err((Error::from_errno(e), index_of(&wrs, bad.cast()))),
        }
    }

    /// `ib_post_recv`.
    ///
    /// # Errors
    ///
    /// The provider's error and the index of the first request not posted.
    pub(crate) fn post_recv(&self, reqs: &[RecvReq<'_>]) -> Result<(), PostFail> {
        let qp = self.raw.as_ptr();
        post_recv_list(reqs, |head, bad| {
            // SAFETY: a live QP; the list and its SGEs are valid for the call.
            unsafe {
                match (*(*qp).device).ops.post_recv {
                    Some(f) => f(qp, head, bad),
                    None => EOPNOTSUPP.to_errno(),
                }
            }
        })
    }

    /// `ib_drain_qp`: moves the QP to ERROR and waits until everything posted completed.
    /// The CQs must come from [`KCq::new_direct`] and hold no other completions.
    pub(crate) fn drain(&self) {
        // SAFETY: a live QP; the caller guarantees the CQ requirements of `ib_drain_qp`.
        unsafe { bindings::ib_drain_qp(self.raw.as_ptr()) };
    }

    /// rsiw's view of the QP.
    pub(crate) fn driver(&self) -> &IbQp<T::Qp> {
        // SAFETY: the QP belongs to an `IbDevice<T>` (type invariant) and lives while
        // `self` is borrowed.
        unsafe { IbQp::<T::Qp>::from_raw(self.raw.as_ptr()) }
    }
}

impl<T: DeviceOps> Drop for KQp<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant).
        unsafe { bindings::ib_destroy_qp_user(self.raw.as_ptr(), core::ptr::null_mut()) };
    }
}

/// A kernel fast-registration MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`).
///
/// # Invariants
///
/// `raw` is an MR of a PD of a `KDevice<T>`, owned by this value.
pub(crate) struct KMr<'p, T: DeviceOps> {
    raw: NonNull<bindings::ib_mr>,
    _p: PhantomData<&'p KPd<'p, T>>,
}

impl<'p, T: DeviceOps> KMr<'p, T> {
    /// Allocates a fast-registration MR for up to `max_sg` pages.
    ///
    /// # Errors
    ///
    /// The error of `ib_alloc_mr`.
    pub(crate) fn new(pd: &'p KPd<'p, T>, max_sg: u32) -> Result<Self> {
        // SAFETY: a live PD; the core returns an MR or an `ERR_PTR`.
        let raw = from_err_ptr(unsafe {
            bindings::ib_alloc_mr(
                pd.raw.as_ptr(),
                bindings::ib_mr_type_IB_MR_TYPE_MEM_REG,
                max_sg,
            )
        })?;
        Ok(Self {
            raw,
            _p: PhantomData,
        })
    }

    /// `ib_map_mr_sg` of `buf` (one scatterlist entry, kmalloc memory) in pages of
    /// `PAGE_SIZE`; returns how many entries were mapped (1) or a negative errno.
    pub(crate) fn map(&self, buf: &[u8]) -> i32 {
        let Ok(len) = u32::try_from(buf.len()) else {
            return EINVAL.to_errno();
        };
        let mut sg = bindings::scatterlist::zeroed();
        // SAFETY: `sg` is a single-entry table for `len` octets of linear-map `buf`, which
        // outlives the call; virtual DMA maps it to its kernel address, as the core would.
        unsafe {
            bindings::sg_init_one(&mut sg, buf.as_ptr().cast(), len);
            if bindings::ib_dma_virt_map_sg((*self.raw.as_ptr()).device, &mut sg, 1) != 1 {
                return EIO.to_errno();
            }
            bindings::ib_map_mr_sg(
                self.raw.as_ptr(),
                &mut sg,
                1,
                core::ptr::null_mut(),
                kernel::page::PAGE_SIZE as u32,
            )
        }
    }

    /// The lkey (= rkey) and the mapped `(iova, length)`.
    pub(crate) fn key_and_range(&self) -> (u32, u64, u64) {
        // SAFETY: a live MR; the fields are set at allocation and by `map`.
        unsafe {
            let m = self.raw.as_ptr();
            ((*m).lkey, (*m).iova, (*m).length)
        }
    }
}

impl<T: DeviceOps> Drop for KMr<'_, T> {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant).
        unsafe { bindings::ib_dereg_mr_user(self.raw.as_ptr(), core::ptr::null_mut()) };
    }
}
