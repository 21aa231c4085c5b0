// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: the `struct ib_device` container, its operation table and trampolines,
//! registration, and the registry of rsiw's own devices.
//!
//! Lifetime of a device (the RDMA core's "dealloc_driver" flow):
//! 1. [`NewDevice::new`] allocates the container with `_ib_alloc_device`, initialises the
//!    Rust part in place and installs the operation table.
//! 2. [`NewDevice::register`] adds it to the [`Registry`] and calls `ib_register_device`.
//! 3. Unregistration (`rdma link del`, netdev removal, module unload) ends in the core
//!    calling `dealloc_driver`, where the Rust part is removed from the registry and
//!    dropped in place; the core frees the memory afterwards.

use super::bindings;
use super::idtable::RawIdTable;
use super::iwcm::{copy_pdata, set_provider_data, take_provider_data, CmId, CmRole, ConnParam};
use super::netdev::{NetDev, NetDevRef};
use super::obj::{IbCq, IbMr, IbQp, IbSrq, PdId};
use super::udata::UserResponse;
use super::verbs::QpInit;
use super::wr::{PostError, RecvWr, SendWr, WrList};
use core::mem::{size_of, MaybeUninit};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::{ForeignOwnable, Opaque};

/// The verbs a device type implements; called by the trampolines with safe references.
///
/// Each method documents the `ib_device_ops` member it implements; errors are returned to
/// the caller (uverbs, a kernel ULP) as negative errnos.
pub(crate) trait DeviceOps: Sized + Send + Sync {
    /// `query_device`: fills the device attributes.
    fn query_device(dev: &IbDevice<Self>, attr: &mut bindings::ib_device_attr) -> Result;
    /// `query_port`: fills the attributes of `port` (1-based). `attr` arrives zeroed.
    fn query_port(dev: &IbDevice<Self>, port: u32, attr: &mut bindings::ib_port_attr) -> Result;
    /// `query_gid`: returns GID `index` of `port` (16 octets, network order).
    fn query_gid(dev: &IbDevice<Self>, port: u32, index: i32) -> Result<[u8; 16]>;
    /// `get_port_immutable`: fills the immutable port attributes.
    fn port_immutable(
        dev: &IbDevice<Self>,
        port: u32,
        imm: &mut bindings::ib_port_immutable,
    ) -> Result;
    /// `alloc_ucontext`: a user process opened the device; `resp` receives the
    /// provider-specific response.
    fn alloc_ucontext(dev: &IbDevice<Self>, resp: &mut UserResponse<'_>) -> Result;
    /// `dealloc_ucontext`: the user context is gone.
    fn dealloc_ucontext(dev: &IbDevice<Self>);
    /// `alloc_pd`: a protection domain is being created.
    fn alloc_pd(dev: &IbDevice<Self>) -> Result;
    /// `dealloc_pd`: a protection domain is being destroyed.
    fn dealloc_pd(dev: &IbDevice<Self>);
    /// Called once when the device is being freed, before the Rust part is dropped.
    fn dealloc(dev: &IbDevice<Self>);

    /// The port counters (`alloc_hw_port_stats`): shown by `rdma statistic show link` and
    /// under `ports/<port>/hw_counters/` in sysfs, in the order [`Self::hw_stats`] fills
    /// them. Entries are made with [`stat_desc`].
    const HW_STATS: &'static [bindings::rdma_stat_desc];
    /// `get_hw_stats`: writes the current value of each counter of [`Self::HW_STATS`] on
    /// `port` (1-based) into `values`, in the same order (`values` may be shorter).
    fn hw_stats(dev: &IbDevice<Self>, port: u32, values: &mut [u64]);

    /// The driver data of a completion queue.
    type Cq: Send + Sync;
    /// The driver data of a queue pair.
    type Qp: Send + Sync;
    /// The driver data of a shared receive queue.
    type Srq: Send + Sync;
    /// The driver data of a memory region.
    type Mr: Send + Sync;

    /// `create_cq`: validates `attr`, allocates what the CQ needs, answers a user caller
    /// through `udata` and returns the CQ depth and the initialiser of the CQ data.
    fn create_cq(
        dev: &IbDevice<Self>,
        attr: &bindings::ib_cq_init_attr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Self::Cq, Error>)>;
    /// `destroy_cq`: called before the CQ data is dropped (no QP uses the CQ any more).
    fn destroy_cq(dev: &IbDevice<Self>, cq: &IbCq<Self::Cq>);
    /// `poll_cq` (kernel consumers): fills up to `wc.len()` work completions; returns how
    /// many.
    fn poll_cq(cq: &IbCq<Self::Cq>, wc: &mut [bindings::ib_wc]) -> usize;
    /// `req_notify_cq`: arms the CQ (`IB_CQ_*` flags); with `IB_CQ_REPORT_MISSED_EVENTS`
    /// returns a positive number if completions are already waiting.
    fn req_notify_cq(cq: &IbCq<Self::Cq>, flags: u32) -> Result<i32>;

    /// `create_qp`: validates, allocates and answers a user caller; returns the QP data's
    /// initialiser. The QP number is assigned already; the QP becomes visible to
    /// `iw_get_qp` after the data is initialised.
    fn create_qp(
        dev: &IbDevice<Self>,
        init: QpInit<'_, Self>,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<impl PinInit<Self::Qp, Error>>;
    /// `destroy_qp`: called first; afterwards the QP leaves the QP-number table, destroy
    /// waits for all `iw_add_ref` references to go, then the data is dropped.
    fn destroy_qp(dev: &IbDevice<Self>, qp: &IbQp<Self::Qp>);
    /// `modify_qp` with `IB_QP_*` attribute mask `mask`.
    fn modify_qp(
        dev: &IbDevice<Self>,
        qp: &IbQp<Self::Qp>,
        attr: &bindings::ib_qp_attr,
        mask: u32,
    ) -> Result;
    /// `query_qp`: fills `attr` and the capabilities in `init` (type, CQs and SRQ are
    /// filled by the caller).
    fn query_qp(
        dev: &IbDevice<Self>,
        qp: &IbQp<Self::Qp>,
        attr: &mut bindings::ib_qp_attr,
        init: &mut bindings::ib_qp_init_attr,
    ) -> Result;
    /// `post_send` (for a user QP: the doorbell, with an empty list).
    fn post_send<'a>(
        qp: &IbQp<Self::Qp>,
        wrs: WrList<'a, SendWr>,
    ) -> Result<(), PostError<'a, SendWr>>;
    /// `post_recv`.
    fn post_recv<'a>(
        qp: &IbQp<Self::Qp>,
        wrs: WrList<'a, RecvWr>,
    ) -> Result<(), PostError<'a, RecvWr>>;

    /// `create_srq`: validates, allocates and answers a user caller.
    fn create_srq(
        dev: &IbDevice<Self>,
        attr: &mut bindings::ib_srq_init_attr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<impl PinInit<Self::Srq, Error>>;
    /// `destroy_srq`: called before the data is dropped.
    fn destroy_srq(dev: &IbDevice<Self>, srq: &IbSrq<Self::Srq>);
    /// `modify_srq` with `IB_SRQ_*` mask `mask`.
    fn modify_srq(srq: &IbSrq<Self::Srq>, attr: &bindings::ib_srq_attr, mask: u32) -> Result;
    /// `query_srq`.
    fn query_srq(srq: &IbSrq<Self::Srq>, attr: &mut bindings::ib_srq_attr);
    /// `post_srq_recv`.
    fn post_srq_recv<'a>(
        srq: &IbSrq<Self::Srq>,
        wrs: WrList<'a, RecvWr>,
    ) -> Result<(), PostError<'a, RecvWr>>;

    /// `get_dma_mr`: returns the STag (lkey = rkey) and the MR data's initialiser. `kc`
    /// marks the region as a kernel consumer's.
    fn get_dma_mr(
        dev: &IbDevice<Self>,
        pd: PdId,
        access: i32,
        kc: super::kmem::KernelConsumer,
    ) -> Result<(u32, impl PinInit<Self::Mr, Error>)>;
    /// `reg_user_mr`: registers `len` octets of user memory at `start`, addressed by peers
    /// as `iova`.
    #[allow(clippy::too_many_arguments)]
    fn reg_user_mr(
        dev: &IbDevice<Self>,
        pd: PdId,
        start: u64,
        len: u64,
        iova: u64,
        access: i32,
        udata: &mut UserResponse<'_>,
    ) -> Result<(u32, impl PinInit<Self::Mr, Error>)>;
    /// `alloc_mr`: a fast-registration MR for up to `max_num_sg` pages. `kc` marks the
    /// region as a kernel consumer's.
    fn alloc_mr(
        dev: &IbDevice<Self>,
        pd: PdId,
        ty: bindings::ib_mr_type,
        max_num_sg: u32,
        kc: super::kmem::KernelConsumer,
    ) -> Result<(u32, impl PinInit<Self::Mr, Error>)>;
    /// `map_mr_sg`, step 1: forget the previous page list.
    fn mr_map_begin(mr: &IbMr<Self::Mr>) -> Result;
    /// `map_mr_sg`, step 2 (per page, from `ib_sg_to_pages`): append page address `addr`.
    fn mr_set_page(mr: &IbMr<Self::Mr>, addr: u64) -> Result;
    /// `map_mr_sg`, step 3: the mapping covers `len` octets at `iova` in pages of
    /// `page_size` octets.
    fn mr_map_end(mr: &IbMr<Self::Mr>, iova: u64, len: u64, page_size: u32);
    /// `dereg_mr`: called before the MR data is dropped and the MR freed.
    fn dereg_mr(dev: &IbDevice<Self>, mr: &IbMr<Self::Mr>);

    /// The driver data of a listening `iw_cm_id`.
    type Listener: Send + Sync + 'static;
    /// The driver data of a connection endpoint reported with CONNECT_REQUEST.
    type Cep: Send + Sync + 'static;
    /// `iw_create_listen`: listens on `id`'s mapped local address.
    fn iw_create_listen(
        dev: &IbDevice<Self>,
        id: CmId<Self>,
        backlog: i32,
    ) -> Result<Arc<Self::Listener>>;
    /// `iw_destroy_listen`: stops listening.
    fn iw_destroy_listen(dev: &IbDevice<Self>, l: Arc<Self::Listener>);
    /// `iw_connect`: connects `id` with `param` (active side).
    fn iw_connect(dev: &IbDevice<Self>, id: CmId<Self>, param: ConnParam) -> Result;
    /// `iw_accept`: accepts the connection of `cep` on the new `id`.
    fn iw_accept(
        dev: &IbDevice<Self>,
        cep: Arc<Self::Cep>,
        id: CmId<Self>,
        param: ConnParam,
    ) -> Result;
    /// `iw_reject`: rejects the connection of `cep` with private data `pdata`.
    fn iw_reject(dev: &IbDevice<Self>, cep: Arc<Self::Cep>, pdata: &[u8]) -> Result;
}

/// An RDMA device: the core's `struct ib_device` followed by the driver's data `T`.
///
/// # Invariants
///
/// `base` was allocated by `_ib_alloc_device` with the size of `Self` and initialised by
/// the core; `data` is initialised; the memory stays valid while the core holds a
/// reference to the device, which it does for the whole time it calls device operations.
#[repr(C)]
pub(crate) struct IbDevice<T> {
    base: Opaque<bindings::ib_device>,
    /// The device's QPs by number (see `verbs.rs`).
    pub(super) qps: RawIdTable,
    data: T,
}

impl<T> core::ops::Deref for IbDevice<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T: DeviceOps> IbDevice<T> {
    /// The operation table shared by all devices of type `T`. `owner` is set per device.
    const OPS: bindings::ib_device_ops = {
        // SAFETY: `ib_device_ops` is a C struct of integers and nullable function and data
        // pointers, for all of which all-zeroes is a valid value (absent operation).
        let mut ops: bindings::ib_device_ops = unsafe { MaybeUninit::zeroed().assume_init() };
        ops.driver_id = bindings::rdma_driver_id_RDMA_DRIVER_SIW;
        ops.uverbs_abi_ver = bindings::SIW_ABI_VERSION;
        ops.query_device = Some(Self::query_device_c);
        ops.query_port = Some(Self::query_port_c);
        ops.query_gid = Some(Self::query_gid_c);
        ops.get_port_immutable = Some(Self::port_immutable_c);
        ops.alloc_ucontext = Some(Self::alloc_ucontext_c);
        ops.dealloc_ucontext = Some(Self::dealloc_ucontext_c);
        ops.alloc_pd = Some(Self::alloc_pd_c);
        ops.dealloc_pd = Some(Self::dealloc_pd_c);
        ops.dealloc_driver = Some(Self::dealloc_driver_c);
        ops.alloc_hw_port_stats = Some(Self::alloc_hw_port_stats_c);
        ops.get_hw_stats = Some(Self::get_hw_stats_c);
        // iw_cm calls these without checking for NULL.
        ops.iw_connect = Some(Self::iw_connect_c);
        ops.iw_accept = Some(Self::iw_accept_c);
        ops.iw_reject = Some(Self::iw_reject_c);
        ops.iw_create_listen = Some(Self::iw_create_listen_c);
        ops.iw_destroy_listen = Some(Self::iw_destroy_listen_c);
        ops.iw_get_qp = Some(Self::iw_get_qp_c);
        ops.iw_add_ref = Some(Self::iw_add_ref_c);
        ops.iw_rem_ref = Some(Self::iw_rem_ref_c);
        ops.mmap = Some(super::umap::mmap_c);
        ops.mmap_free = Some(super::umap::mmap_free_c);
        ops.create_cq = Some(Self::create_cq_c);
        ops.destroy_cq = Some(Self::destroy_cq_c);
        ops.poll_cq = Some(Self::poll_cq_c);
        ops.req_notify_cq = Some(Self::req_notify_cq_c);
        ops.create_qp = Some(Self::create_qp_c);
        ops.destroy_qp = Some(Self::destroy_qp_c);
        ops.modify_qp = Some(Self::modify_qp_c);
        ops.query_qp = Some(Self::query_qp_c);
        ops.post_send = Some(Self::post_send_c);
        ops.post_recv = Some(Self::post_recv_c);
        ops.create_srq = Some(Self::create_srq_c);
        ops.destroy_srq = Some(Self::destroy_srq_c);
        ops.modify_srq = Some(Self::modify_srq_c);
        ops.query_srq = Some(Self::query_srq_c);
        ops.post_srq_recv = Some(Self::post_srq_recv_c);
        ops.get_dma_mr = Some(Self::get_dma_mr_c);
        ops.reg_user_mr = Some(Self::reg_user_mr_c);
        ops.alloc_mr = Some(Self::alloc_mr_c);
        ops.map_mr_sg = Some(Self::map_mr_sg_c);
        ops.dereg_mr = Some(Self::dereg_mr_c);
        ops.size_ib_ucontext = size_of::<bindings::ib_ucontext>();
        ops.size_ib_pd = size_of::<bindings::ib_pd>();
        // The core allocates these with kzalloc (8-octet alignment), see `new` asserts.
        ops.size_ib_cq = size_of::<IbCq<T::Cq>>();
        ops.size_ib_qp = size_of::<IbQp<T::Qp>>();
        ops.size_ib_srq = size_of::<IbSrq<T::Srq>>();
        ops
    };

    /// Returns the device behind a core pointer.
    ///
    /// # Safety
    ///
    /// `raw` is the `ib_device` of a live `IbDevice<T>` (its ops are `Self::OPS`), and
    /// stays live for `'a`.
    pub(super) unsafe fn from_raw<'a>(raw: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `base` is the first field of a `repr(C)` struct, so the container starts
        // at `raw`; the caller guarantees it is a live `IbDevice<T>`.
        unsafe { &*raw.cast::<Self>() }
    }

    /// Returns the raw `ib_device` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.base.get()
    }

    /// Returns the netdev bound to port 1, with a reference, or `None` if it is gone.
    pub(crate) fn netdev(&self) -> Option<NetDevRef> {
        // SAFETY: the device is live; the core returns a held netdev or null, and the
        // reference is transferred to the `NetDevRef`.
        unsafe { NetDevRef::from_owned(bindings::ib_device_get_netdev(self.as_raw(), 1)) }
    }

    /// Returns the IB speed and width equivalent of the Ethernet link speed of `port`
    /// (`ib_get_eth_speed()`).
    ///
    /// # Errors
    ///
    /// The error of `ib_get_eth_speed` (`EINVAL` for a bad port, `ENODEV` without netdev).
    pub(crate) fn eth_speed(&self, port: u32, speed: &mut u16, width: &mut u8) -> Result {
        // SAFETY: the device is live; `speed` and `width` are valid for writes.
        super::to_result(unsafe { bindings::ib_get_eth_speed(self.as_raw(), port, speed, width) })
    }

    /// Dispatches the port state of `ndev` (active/down) to the device's event handlers.
    pub(crate) fn dispatch_port_state(&self, ndev: &NetDev) {
        // SAFETY: the device is live (type invariant) and `ndev` is a live netdev.
        unsafe { bindings::ib_dispatch_port_state_event(self.as_raw(), ndev.as_ptr()) };
    }

    /// Dispatches an asynchronous port event (`IB_EVENT_*`) for port 1.
    pub(crate) fn dispatch_port_event(&self, event: bindings::ib_event_type) {
        // SAFETY: all-zeroes is a valid `ib_event` (null device, port 0).
        let mut ev: bindings::ib_event = unsafe { MaybeUninit::zeroed().assume_init() };
        ev.device = self.as_raw();
        ev.event = event;
        ev.element.port_num = 1;
        // SAFETY: `ev` is a valid event for a live device; the core copies what it needs.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }

    /// Queues the device's unregistration (safe from notifier context).
    pub(crate) fn unregister_queued(&self) {
        // SAFETY: the device is live and registered or being registered; the core takes
        // its own reference for the queued work.
        unsafe { bindings::ib_unregister_device_queued(self.as_raw()) };
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn query_device_c(
        raw: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core calls device ops only on live devices of this type, with a
        // valid, exclusively borrowed attribute buffer.
        let (dev, attr) = unsafe { (Self::from_raw(raw), &mut *attr) };
        errno(T::query_device(dev, attr))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn alloc_hw_port_stats_c(
        _raw: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let Ok(n) = kernel::ffi::c_int::try_from(T::HW_STATS.len()) else {
            return core::ptr::null_mut();
        };
        // SAFETY: `HW_STATS` is `'static`, so the descriptors outlive the stats struct the
        // core frees with the port; their names are NUL-terminated (`stat_desc`).
        unsafe {
            bindings::rdma_alloc_hw_stats_struct(
                T::HW_STATS.as_ptr(),
                n,
                bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as kernel::ffi::c_ulong,
            )
        }
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type; `stats` is one that
    /// [`Self::alloc_hw_port_stats_c`] returned, which the core holds locked.
    unsafe extern "C" fn get_hw_stats_c(
        raw: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: kernel::ffi::c_int,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `query_device_c`.
        let dev = unsafe { Self::from_raw(raw) };
        // SAFETY: `stats` is valid and exclusively ours for this call (the core holds its
        // lock); it was allocated with `num_counters` values after the header.
        let values = unsafe {
            let n = usize::try_from((*stats).num_counters).unwrap_or(0);
            (*stats).value.as_mut_slice(n)
        };
        let n = values.len().min(T::HW_STATS.len());
        T::hw_stats(dev, port, &mut values[..n]);
        // `n` is at most `num_counters`, a `c_int`.
        n as kernel::ffi::c_int
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn query_port_c(
        raw: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `query_device_c`.
        let (dev, attr) = unsafe { (Self::from_raw(raw), &mut *attr) };
        // SAFETY: all-zeroes is a valid `ib_port_attr`.
        *attr = unsafe { MaybeUninit::zeroed().assume_init() };
        errno(T::query_port(dev, port, attr))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn query_gid_c(
        raw: *mut bindings::ib_device,
        port: u32,
        index: kernel::ffi::c_int,
        gid: *mut bindings::ib_gid,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `query_device_c`.
        let dev = unsafe { Self::from_raw(raw) };
        match T::query_gid(dev, port, index) {
            Ok(raw_gid) => {
                // SAFETY: `gid` is a valid, exclusively borrowed `union ib_gid` of 16
                // octets; writing its `raw` member is always valid.
                unsafe { (*gid).raw = raw_gid };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn port_immutable_c(
        raw: *mut bindings::ib_device,
        port: u32,
        imm: *mut bindings::ib_port_immutable,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `query_device_c`.
        let (dev, imm) = unsafe { (Self::from_raw(raw), &mut *imm) };
        errno(T::port_immutable(dev, port, imm))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn alloc_ucontext_c(
        uctx: *mut bindings::ib_ucontext,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core passes a ucontext it allocated for a live device of this type.
        let dev = unsafe { Self::from_raw((*uctx).device) };
        // SAFETY: the core passes the valid udata of this `alloc_ucontext` call.
        let mut resp = unsafe { UserResponse::from_raw(udata) };
        errno(T::alloc_ucontext(dev, &mut resp))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn dealloc_ucontext_c(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: as in `alloc_ucontext_c`.
        let dev = unsafe { Self::from_raw((*uctx).device) };
        T::dealloc_ucontext(dev);
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn alloc_pd_c(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core passes a PD it allocated for a live device of this type.
        let dev = unsafe { Self::from_raw((*pd).device) };
        errno(T::alloc_pd(dev))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn dealloc_pd_c(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `alloc_pd_c`.
        let dev = unsafe { Self::from_raw((*pd).device) };
        T::dealloc_pd(dev);
        0
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    unsafe extern "C" fn dealloc_driver_c(raw: *mut bindings::ib_device) {
        let this = raw.cast::<Self>();
        // SAFETY: the core calls `dealloc_driver` exactly once, on a device of this type
        // whose data was initialised before the ops were installed (`NewDevice::new`).
        T::dealloc(unsafe { &*this });
        Registry::remove(raw);
        // SAFETY: `data` and `qps` are initialised and nothing uses them after this point:
        // the core destroyed all objects, calls no further operations and frees the memory.
        unsafe {
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).data));
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).qps));
        }
    }

    /// `iw_connect`.
    ///
    /// # Safety
    ///
    /// Called only by iw_cm, through `IbDevice::<T>::OPS`, with a valid id of a live
    /// device of this type and valid parameters.
    unsafe extern "C" fn iw_connect_c(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let (dev, param) = unsafe { (Self::from_raw((*id).device), ConnParam::from_raw(param)) };
        let Ok(param) = param else {
            return ENOMEM.to_errno();
        };
        // SAFETY: a valid id of a running provider op.
        let id = unsafe { CmId::<T>::from_raw(id, CmRole::Connect) };
        errno(T::iw_connect(dev, id, param))
    }

    /// `iw_accept`: the id's `provider_data` holds the CEP of its CONNECT_REQUEST.
    ///
    /// # Safety
    ///
    /// As for `iw_connect_c`; `provider_data` was set from a CONNECT_REQUEST of this
    /// driver (type invariant of `CmId`) and not taken yet.
    unsafe extern "C" fn iw_accept_c(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let (dev, param, data) = unsafe {
            (
                Self::from_raw((*id).device),
                ConnParam::from_raw(param),
                take_provider_data(id),
            )
        };
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
        errno(T::iw_accept(dev, cep, id, param))
    }

    /// `iw_reject`.
    ///
    /// # Safety
    ///
    /// As for `iw_accept_c`; `pdata` holds `len` octets.
    unsafe extern "C" fn iw_reject_c(
        id: *mut bindings::iw_cm_id,
        pdata: *const kernel::ffi::c_void,
        len: u8,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let (dev, data) = unsafe { (Self::from_raw((*id).device), take_provider_data(id)) };
        if data.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: as in `iw_accept_c`.
        let cep = unsafe { <Arc<T::Cep> as ForeignOwnable>::from_foreign(data) };
        // SAFETY: per the caller.
        let Ok(pd) = (unsafe { copy_pdata(pdata, usize::from(len)) }) else {
            return ENOMEM.to_errno();
        };
        errno(T::iw_reject(dev, cep, &pd))
    }

    /// `iw_create_listen`: the listener is kept in the id's `provider_data`.
    ///
    /// # Safety
    ///
    /// As for `iw_connect_c`.
    unsafe extern "C" fn iw_create_listen_c(
        id: *mut bindings::iw_cm_id,
        backlog: kernel::ffi::c_int,
    ) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let dev = unsafe { Self::from_raw((*id).device) };
        // SAFETY: a valid id of a running provider op.
        let cm_id = unsafe { CmId::<T>::from_raw(id, CmRole::Listen) };
        match T::iw_create_listen(dev, cm_id, backlog) {
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
    unsafe extern "C" fn iw_destroy_listen_c(id: *mut bindings::iw_cm_id) -> kernel::ffi::c_int {
        // SAFETY: per the caller.
        let (dev, data) = unsafe { (Self::from_raw((*id).device), take_provider_data(id)) };
        if data.is_null() {
            return 0;
        }
        // SAFETY: set by `iw_create_listen_c` from `Arc::<T::Listener>::into_foreign`.
        let l = unsafe { <Arc<T::Listener> as ForeignOwnable>::from_foreign(data) };
        T::iw_destroy_listen(dev, l);
        0
    }
}

/// Maps a verb's result to the C convention: 0 or a negative errno.
pub(super) fn errno(r: Result) -> kernel::ffi::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// A device allocated and initialised, not yet registered. Dropping it frees the device.
///
/// # Invariants
///
/// `ptr` is an `IbDevice<T>` from `_ib_alloc_device` with initialised data and
/// `IbDevice::<T>::OPS` installed, owned by this value (not registered).
pub(crate) struct NewDevice<T: DeviceOps> {
    ptr: NonNull<IbDevice<T>>,
}

impl<T: DeviceOps> NewDevice<T> {
    /// Allocates a device in network namespace `net` and initialises its data with `init`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `init`.
    pub(crate) fn new<E>(ndev: &NetDev, init: impl PinInit<T, E>) -> Result<Self>
    where
        Error: From<E>,
    {
        const {
            assert!(core::mem::align_of::<IbDevice<T>>() <= 8);
            assert!(core::mem::align_of::<IbCq<T::Cq>>() <= 8);
            assert!(core::mem::align_of::<IbQp<T::Qp>>() <= 8);
            assert!(core::mem::align_of::<IbSrq<T::Srq>>() <= 8);
            assert!(core::mem::align_of::<IbMr<T::Mr>>() <= 8);
        };
        // SAFETY: the size covers the `ib_device` at offset 0; kzalloc alignment (8)
        // suffices for `IbDevice<T>` (asserted above).
        let raw = unsafe { bindings::_ib_alloc_device(size_of::<IbDevice<T>>(), ndev.net()) };
        let raw = NonNull::new(raw).ok_or(ENOMEM)?;
        let this = raw.cast::<IbDevice<T>>();
        // SAFETY: `qps` lies inside the allocation, aligned and pinned; its initialiser is
        // infallible.
        unsafe {
            let qps = core::ptr::addr_of_mut!((*this.as_ptr()).qps);
            let Ok(()) = RawIdTable::new(1).__init(qps);
        }
        // SAFETY: `data` lies inside the allocation, is properly aligned and pinned (the
        // device never moves); on error `init` leaves it uninitialised.
        let slot = unsafe { core::ptr::addr_of_mut!((*this.as_ptr()).data) };
        // SAFETY: see above.
        if let Err(e) = unsafe { init.__init(slot) } {
            // SAFETY: `qps` is initialised and unused; no ops are installed, so no
            // `dealloc_driver` runs on uninit data.
            unsafe {
                core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this.as_ptr()).qps));
                bindings::ib_dealloc_device(raw.as_ptr());
            }
            return Err(Error::from(e));
        }
        // SAFETY: the device is exclusively ours; `OPS` is a promoted `'static` constant.
        unsafe {
            bindings::ib_set_device_ops(raw.as_ptr(), Self::ops());
            (*raw.as_ptr()).ops.owner = super::this_module();
            // The siw user ABI's SQ doorbell is the legacy POST_SEND write command with an
            // empty list, which the core enables only for drivers that ask for it.
            (*raw.as_ptr()).uverbs_cmd_mask |=
                1u64 << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND;
        }
        // INVARIANT: allocated, data initialised, ops installed, not registered.
        Ok(Self { ptr: this })
    }

    fn ops() -> &'static bindings::ib_device_ops {
        &IbDevice::<T>::OPS
    }

    fn raw(&self) -> *mut bindings::ib_device {
        self.ptr.as_ptr().cast()
    }

    /// Sets the node type (`RDMA_NODE_*`), the port count (1), the number of completion
    /// vectors, the node GUID (8 octets, network order) and the node description.
    pub(crate) fn set_identity(&mut self, guid: [u8; 8], desc: &[u8], comp_vectors: i32) {
        // SAFETY: the unregistered device is exclusively ours (type invariant).
        let dev = unsafe { &mut *self.raw() };
        dev.node_type = bindings::RDMA_NODE_RNIC as u8;
        dev.phys_port_cnt = 1;
        dev.num_comp_vectors = comp_vectors;
        dev.node_guid = u64::from_ne_bytes(guid);
        let n = desc.len().min(dev.node_desc.len() - 1);
        for (d, s) in dev.node_desc.iter_mut().zip(desc[..n].iter()) {
            *d = *s;
        }
    }

    /// Binds port 1 to `ndev` (`ib_device_set_netdev`) and names it for iw_cm
    /// (`iw_ifname`, `IW_F_NO_PORT_MAP`).
    ///
    /// # Errors
    ///
    /// The error of `ib_device_set_netdev`.
    pub(crate) fn set_netdev(&mut self, ndev: &NetDev) -> Result {
        {
            // SAFETY: the unregistered device is exclusively ours (type invariant).
            let dev = unsafe { &mut *self.raw() };
            // iw_cm's port mapper names the interface; rsiw, like siw, uses real ports.
            let name = ndev.name();
            let n = name.len().min(dev.iw_ifname.len() - 1);
            for (d, s) in dev.iw_ifname.iter_mut().zip(name[..n].iter()) {
                *d = *s as kernel::ffi::c_char;
            }
            dev.iw_driver_flags = bindings::iw_flags_IW_F_NO_PORT_MAP;
        }
        // SAFETY: the device and `ndev` are live; the core takes its own netdev reference.
        super::to_result(unsafe { bindings::ib_device_set_netdev(self.raw(), ndev.as_ptr(), 1) })
    }

    /// Registers the device as `name` with the RDMA core; from here on the core owns it.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `ib_register_device` (for example a name already in use);
    /// the device is freed.
    pub(crate) fn register(self, name: &CStr) -> Result {
        let raw = self.raw();
        Registry::add(raw)?;
        core::mem::forget(self);
        // SAFETY: `raw` is an allocated, unregistered device owned by us (type invariant
        // of the forgotten `NewDevice`); `name` is NUL-terminated.
        let ret = unsafe {
            bindings::rsiw_mark_name_assigned_by_user(raw);
            bindings::ib_register_device(raw, name.as_char_ptr(), core::ptr::null_mut())
        };
        if ret != 0 {
            // SAFETY: after a failed registration the caller frees the device; this runs
            // `dealloc_driver`, which removes it from the registry.
            unsafe { bindings::ib_dealloc_device(raw) };
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }
}

impl<T: DeviceOps> Drop for NewDevice<T> {
    fn drop(&mut self) {
        // SAFETY: the device is allocated, initialised and not registered (type
        // invariant); `ib_dealloc_device` runs `dealloc_driver` and frees it.
        unsafe { bindings::ib_dealloc_device(self.raw()) };
    }
}

/// Looks up the RDMA device bound to `ndev` and, if it is one of rsiw's (type `T`), runs
/// `f` on it while holding a reference. Returns whether any soft-iWARP device (rsiw's or
/// the C siw's, which share the driver id) is bound to `ndev`.
/// A port counter descriptor for [`DeviceOps::HW_STATS`]: the counter's name as `rdma
/// statistic` and sysfs show it.
pub(crate) const fn stat_desc(name: &'static CStr) -> bindings::rdma_stat_desc {
    bindings::rdma_stat_desc {
        name: kernel::str::as_char_ptr_in_const_context(name),
        flags: 0,
        priv_: core::ptr::null(),
    }
}

pub(crate) fn with_device_of<T: DeviceOps>(ndev: &NetDev, f: impl FnOnce(&IbDevice<T>)) -> bool {
    // SAFETY: `ndev` is live; the lookup returns a referenced device or null.
    let raw = unsafe {
        bindings::ib_device_get_by_netdev(ndev.as_ptr(), bindings::rdma_driver_id_RDMA_DRIVER_SIW)
    };
    if raw.is_null() {
        return false;
    }
    // SAFETY: `raw` is a live, referenced device; its `ops` is a plain copy we may read.
    let ours = unsafe { (*raw).ops.owner } == super::this_module();
    if ours {
        // SAFETY: rsiw creates devices only through `NewDevice<T>` (one device type), so
        // `owner` identifies an `IbDevice<T>`; the lookup's reference keeps it live.
        f(unsafe { IbDevice::<T>::from_raw(raw) });
    }
    // SAFETY: balances `ib_device_get_by_netdev`.
    unsafe { bindings::ib_device_put(raw) };
    true
}

/// A raw device pointer in the registry.
#[derive(Clone, Copy, PartialEq, Eq)]
struct RawDevice(NonNull<bindings::ib_device>);

// SAFETY: the pointer is only dereferenced by the RDMA core or under the registry lock
// with a device reference held; it carries no thread affinity.
unsafe impl Send for RawDevice {}

kernel::sync::global_lock! {
    // SAFETY: initialised in `Registry::new` before any device exists.
    unsafe(uninit) static DEVICES: Mutex<KVec<RawDevice>> = KVec::new();
}

static REGISTRY_LIVE: AtomicBool = AtomicBool::new(false);

/// The set of rsiw's registered devices, for tearing them all down at module unload.
///
/// The C siw shares rsiw's driver id (the user ABI requires it), so
/// `ib_unregister_driver()` would also remove the C siw's devices: rsiw tracks its own.
///
/// # Invariants
///
/// At most one `Registry` exists, and `DEVICES` is initialised while it does. A device is
/// in `DEVICES` from just before `ib_register_device` until its `dealloc_driver`, so every
/// entry is a live allocation while the lock is held.
pub(crate) struct Registry(());

impl Registry {
    /// Creates the registry (once per module lifetime).
    ///
    /// # Errors
    ///
    /// `EBUSY` if it already exists.
    pub(crate) fn new() -> Result<Self> {
        if REGISTRY_LIVE.swap(true, Ordering::AcqRel) {
            return Err(EBUSY);
        }
        // SAFETY: called once (guarded above) before any device is created.
        unsafe { DEVICES.init() };
        // INVARIANT: the only registry; `DEVICES` initialised.
        Ok(Self(()))
    }

    fn add(raw: *mut bindings::ib_device) -> Result {
        let raw = RawDevice(NonNull::new(raw).ok_or(EINVAL)?);
        DEVICES.lock().push(raw, GFP_KERNEL)?;
        Ok(())
    }

    fn remove(raw: *mut bindings::ib_device) {
        let mut devices = DEVICES.lock();
        devices.retain(|d| d.0.as_ptr() != raw);
    }

    /// Returns the number of registered rsiw devices.
    pub(crate) fn count(&self) -> usize {
        DEVICES.lock().len()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        loop {
            let next = {
                let devices = DEVICES.lock();
                let Some(d) = devices.first().copied() else {
                    break;
                };
                // SAFETY: entries are live while the lock is held (type invariant); the
                // reference keeps the memory valid after the lock is dropped.
                unsafe {
                    bindings::get_device(core::ptr::addr_of_mut!(
                        (*d.0.as_ptr()).__bindgen_anon_1.dev
                    ))
                };
                d
            };
            // SAFETY: we hold a device reference; unregistration is synchronous and its
            // `dealloc_driver` removes the entry (or another path's already did).
            unsafe { bindings::ib_unregister_device(next.0.as_ptr()) };
            Self::remove(next.0.as_ptr());
            // SAFETY: balances `get_device` above.
            unsafe {
                bindings::put_device(core::ptr::addr_of_mut!(
                    (*next.0.as_ptr()).__bindgen_anon_1.dev
                ))
            };
        }
        REGISTRY_LIVE.store(false, Ordering::Release);
    }
}

impl<T: DeviceOps> IbDevice<T> {
    /// A counted reference to QP `qpn` of this device (for the transport of a connection),
    /// or `None` if no such QP exists. The QP's destroy waits until it is dropped.
    pub(crate) fn qp_ref(&self, qpn: u32) -> Option<QpRef<T>> {
        let qp = self.qps.with(qpn, |p| {
            // SAFETY: the table holds live QPs of this device; while its lock is held the
            // QP cannot be removed, so it is live when the reference is taken.
            let qp = unsafe { IbQp::<T::Qp>::from_raw(p.cast()) };
            qp.get_ref();
            NonNull::from(qp)
        })?;
        // INVARIANT: the reference was taken above; the device outlives its QPs.
        Some(QpRef {
            dev: NonNull::from(self),
            qp,
        })
    }
}

/// A counted reference to a QP (as `iw_add_ref` takes), together with its device.
///
/// # Invariants
///
/// `qp` is a live QP of `dev` on which this value holds one reference (`IbQp::get_ref`),
/// so its destroy cannot complete before the value is dropped; `dev` is live while any of
/// its QPs is.
pub(crate) struct QpRef<T: DeviceOps> {
    dev: NonNull<IbDevice<T>>,
    qp: NonNull<IbQp<T::Qp>>,
}

// SAFETY: a `QpRef` is a counted shared reference; the QP and device data are `Sync`.
unsafe impl<T: DeviceOps> Send for QpRef<T>
where
    T: Sync,
    T::Qp: Sync,
{
}
// SAFETY: as above.
unsafe impl<T: DeviceOps> Sync for QpRef<T>
where
    T: Sync,
    T::Qp: Sync,
{
}

impl<T: DeviceOps> QpRef<T> {
    /// The QP.
    pub(crate) fn qp(&self) -> &IbQp<T::Qp> {
        // SAFETY: live while the reference is held (type invariant).
        unsafe { self.qp.as_ref() }
    }

    /// The QP's device.
    pub(crate) fn device(&self) -> &IbDevice<T> {
        // SAFETY: live while its QP is (type invariant).
        unsafe { self.dev.as_ref() }
    }
}

impl<T: DeviceOps> Drop for QpRef<T> {
    fn drop(&mut self) {
        // Balances the reference taken by `qp_ref`; nothing touches the QP afterwards.
        self.qp().put_ref();
    }
}
