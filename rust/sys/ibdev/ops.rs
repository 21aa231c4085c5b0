// SPDX-License-Identifier: GPL-2.0

//! The verbs a driver implements, one trait per RDMA core object: [`DeviceOps`] for the
//! device, its port, user contexts and PDs; [`CqOps`], [`QpOps`], [`SrqOps`] and
//! [`MrOps`] for the objects, implemented by the driver data of each; [`ListenerOps`] and
//! [`CepOps`] for iw_cm. The trampolines (`cq.rs`, `qp.rs`, ... beside this file) turn the
//! core's pointers into the references these take and map results to errnos.
//!
//! Errors are returned to the caller (uverbs, a kernel ULP, iw_cm) as negative errnos.
//!
//! Verbs the RDMA core treats as optional are optional here too (`#[vtable]`): a driver
//! that leaves one out gets no trampoline in the ops table, and the core answers
//! `EOPNOTSUPP` for it.

use super::IbDevice;
use crate::sys::bindings;
use crate::sys::iwcm::{CmId, ConnParam};
use crate::sys::mem::kmem::KernelConsumer;
use crate::sys::obj::{IbCq, IbMr, IbQp, IbSrq, PdId};
use crate::sys::udata::UserResponse;
use crate::sys::wr::{PostError, RecvWr, SendWr, WrList};
use kernel::error::VTABLE_DEFAULT_ERROR;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The driver data types of a device type's objects, each implementing its object's verbs.
/// Kept apart from [`DeviceOps`] so that the device's own code need not name the object
/// types: the driver binds them where it puts the device and its objects together.
pub(crate) trait Objects: Sized + Send + Sync {
    /// The driver data of a completion queue.
    type Cq: CqOps<Self>;
    /// The driver data of a queue pair.
    type Qp: QpOps<Self>;
    /// The driver data of a shared receive queue.
    type Srq: SrqOps<Self>;
    /// The driver data of a memory region.
    type Mr: MrOps<Self>;
    /// The driver data of a listening `iw_cm_id`.
    type Listener: ListenerOps<Self>;
    /// The driver data of a connection endpoint reported with CONNECT_REQUEST.
    type Cep: CepOps<Self>;
    /// The names of the driver details of an `iw_cm_id` the driver holds
    /// ([`crate::sys::iwcm::CmIdDetails`], at most
    /// [`crate::sys::iwcm::MAX_CM_ID_ATTRS`]): `rdma resource show cm_id -dd` lists them
    /// after the core's own fields. The first is the id's state, shown by its name in
    /// [`Objects::CM_ID_STATES`].
    const CM_ID_ATTRS: &'static [&'static CStr];
    /// The names of the values of the first of [`Objects::CM_ID_ATTRS`].
    const CM_ID_STATES: &'static [&'static CStr];
}

/// The device-level verbs.
pub(crate) trait DeviceOps: Objects {
    /// `query_device`: the device's identity and limits.
    fn query_device(dev: &IbDevice<Self>) -> DeviceAttr;
    /// `query_port` for port 1 (the only one): the state of the port.
    fn query_port(dev: &IbDevice<Self>) -> Result<PortAttr>;
    /// `query_gid` for port 1: returns GID `index` (16 octets, network order).
    fn query_gid(dev: &IbDevice<Self>, index: i32) -> Result<[u8; 16]>;
    /// `alloc_ucontext`: a user process opened the device; `resp` receives the
    /// provider-specific response.
    fn alloc_ucontext(dev: &IbDevice<Self>, resp: &mut UserResponse<'_>) -> Result;
    /// `dealloc_ucontext`: the user context is gone.
    fn dealloc_ucontext(dev: &IbDevice<Self>);
    /// `alloc_pd`: a protection domain is being created.
    fn alloc_pd(dev: &IbDevice<Self>) -> Result;
    /// `dealloc_pd`: a protection domain is being destroyed.
    fn dealloc_pd(dev: &IbDevice<Self>);

    /// The port counters (`alloc_hw_port_stats`): shown by `rdma statistic show link` and
    /// under `ports/<port>/hw_counters/` in sysfs, in the order [`Self::hw_stats`] fills
    /// them. Entries are made with [`super::stat_desc`].
    const HW_STATS: &'static [bindings::rdma_stat_desc];
    /// `get_hw_stats`: writes the current value of each counter of [`Self::HW_STATS`] on
    /// port 1 into `values`, in the same order (`values` may be shorter).
    fn hw_stats(dev: &IbDevice<Self>, values: &mut [u64]);

    /// The device's settings: one read-write file (mode 0644) per name in its sysfs
    /// directory, `/sys/class/infiniband/<dev>/<name>`, at most
    /// [`super::MAX_ATTRS`] of them.
    const ATTRS: &'static [&'static CStr];
    /// A read of the file of setting `index` of [`Self::ATTRS`]: its value, which the file
    /// shows in decimal followed by a newline.
    fn show_attr(dev: &IbDevice<Self>, index: usize) -> u32;
    /// A write of `text` (the octets written, a trailing newline included) to the file of
    /// setting `index` of [`Self::ATTRS`].
    ///
    /// # Errors
    ///
    /// The errno the writer gets, typically `EINVAL` for a value the setting does not take.
    fn store_attr(dev: &IbDevice<Self>, index: usize, text: &[u8]) -> Result;
}

/// The identity and limits of a device, as `query_device` reports them. Every rsiw
/// device also reports: no atomics (`IB_ATOMIC_NONE`), the memory management extensions
/// (fast registration and local invalidation work requests), one SGE per RDMA Read sink
/// (RFC 5040 §4.4), page-sized pages, MRs of any size, and that `rdma link del` may
/// remove it.
pub(crate) struct DeviceAttr {
    /// The vendor ID.
    pub(crate) vendor_id: u32,
    /// The system image GUID (8 octets, network order).
    pub(crate) sys_image_guid: [u8; 8],
    /// The most PDs, QPs, CQs, MRs and SRQs the device holds at once.
    pub(crate) max_pd: u32,
    /// See `max_pd`.
    pub(crate) max_qp: u32,
    /// See `max_pd`.
    pub(crate) max_cq: u32,
    /// See `max_pd`.
    pub(crate) max_mr: u32,
    /// See `max_pd`.
    pub(crate) max_srq: u32,
    /// The deepest SQ or RQ, in WRs.
    pub(crate) max_qp_wr: u32,
    /// SGEs per WR (send, receive and SRQ WRs).
    pub(crate) max_sge: u32,
    /// The deepest CQ, in CQEs.
    pub(crate) max_cqe: u32,
    /// The deepest SRQ, in WRs.
    pub(crate) max_srq_wr: u32,
    /// Pages of a fast-registration MR.
    pub(crate) max_fast_reg_pages: u32,
    /// The IRD and ORD ceiling of a QP.
    pub(crate) max_ird_ord: u32,
}

/// The state of the port, as `query_port` reports it.
pub(crate) struct PortAttr {
    /// Whether the netdev is up with carrier (`IB_PORT_ACTIVE`, physical state LinkUp).
    pub(crate) active: bool,
    /// The largest MTU the netdev accepts, in octets (0: no limit).
    pub(crate) max_mtu: u32,
    /// The netdev's current MTU, in octets.
    pub(crate) mtu: u32,
    /// The longest message, in octets (`max_msg_sz`).
    pub(crate) max_msg_sz: u32,
}

/// The consumer's request of `create_cq`.
pub(crate) struct CqAttr {
    /// The number of CQEs asked for.
    pub(crate) cqe: u32,
    /// `IB_UVERBS_CQ_FLAGS_*` creation flags.
    pub(crate) flags: u32,
}

/// The verbs of a completion queue, implemented by its driver data.
pub(crate) trait CqOps<D: Objects>: Sized + Send + Sync {
    /// `create_cq`: validates `attr`, allocates what the CQ needs, answers a user caller
    /// through `udata` and returns the CQ depth (CQEs) and the initialiser of the CQ data.
    fn create(
        dev: &IbDevice<D>,
        attr: &CqAttr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Self, Error>)>;
    /// `destroy_cq`: called before the CQ data is dropped (no QP uses the CQ any more).
    fn destroy(dev: &IbDevice<D>, cq: &IbCq<Self>);
    /// `poll_cq` (kernel consumers): fills up to `wc.len()` work completions; returns how
    /// many.
    fn poll(cq: &IbCq<Self>, wc: &mut [WcSlot]) -> usize;
    /// `req_notify_cq`: arms the CQ as `notify` says; with `report_missed` returns a
    /// positive number if completions are already waiting.
    fn req_notify(cq: &IbCq<Self>, notify: CqNotify, report_missed: bool) -> Result<i32>;
}

/// A kernel consumer's work completion (`struct ib_wc`) as `poll_cq` reports it.
pub(crate) struct Completion {
    /// The consumer's `wr_id`.
    pub(crate) wr_id: u64,
    /// How the work request completed.
    pub(crate) status: bindings::ib_wc_status,
    /// What the work request was.
    pub(crate) opcode: bindings::ib_wc_opcode,
    /// Octets transferred (received, for a receive).
    pub(crate) byte_len: u32,
    /// The QP of the work request.
    pub(crate) qp: *mut bindings::ib_qp,
    /// The local STag a received Send with Invalidate invalidated.
    pub(crate) invalidated: Option<u32>,
}

/// One slot of the consumer's `poll_cq` array (`struct ib_wc`).
#[repr(transparent)]
pub(crate) struct WcSlot(bindings::ib_wc);

impl WcSlot {
    /// Writes completion `c` into the slot (the fields it does not name read as zero).
    pub(crate) fn fill(&mut self, c: &Completion) {
        let mut w = <bindings::ib_wc as crate::sys::Pod>::zeroed();
        w.__bindgen_anon_1.wr_id = c.wr_id;
        w.status = c.status;
        w.opcode = c.opcode;
        w.byte_len = c.byte_len;
        w.qp = c.qp;
        if let Some(stag) = c.invalidated {
            w.ex.invalidate_rkey = stag;
            w.wc_flags = bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32;
        }
        self.0 = w;
    }
}

/// What `req_notify_cq` arms a CQ for (`IB_CQ_SOLICITED`, `IB_CQ_NEXT_COMP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CqNotify {
    /// The next solicited (or failed) completion.
    Solicited,
    /// The next completion.
    NextComp,
}

/// What `create_qp` of an RC QP gets besides the user data (the trampoline refuses other
/// QP types and create flags).
pub(crate) struct QpInit {
    /// The queue sizes the consumer asks for.
    pub(crate) cap: QpCap,
    /// Whether every send WR completes signalled (`IB_SIGNAL_ALL_WR`).
    pub(crate) sig_all: bool,
    /// The QP number already assigned (`ib_qp::qp_num`).
    pub(crate) qpn: u32,
    /// The QP's protection domain.
    pub(crate) pd: PdId,
    /// Whether the QP takes its receive WQEs from an SRQ. The CQs and the SRQ are the QP's
    /// ([`IbQp::send_cq`], [`IbQp::recv_cq`], [`IbQp::srq`]).
    pub(crate) srq: bool,
}

/// A verbs QP state (`enum ib_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpState {
    /// `IB_QPS_RESET`.
    Reset,
    /// `IB_QPS_INIT` (iWARP Idle).
    Init,
    /// `IB_QPS_RTR` (iWARP Idle as well).
    Rtr,
    /// `IB_QPS_RTS`.
    Rts,
    /// `IB_QPS_SQD` (iWARP Closing).
    Sqd,
    /// `IB_QPS_SQE` (iWARP Terminate).
    Sqe,
    /// `IB_QPS_ERR`.
    Error,
}

impl QpState {
    const ALL: [(Self, bindings::ib_qp_state); 7] = [
        (Self::Reset, bindings::ib_qp_state_IB_QPS_RESET),
        (Self::Init, bindings::ib_qp_state_IB_QPS_INIT),
        (Self::Rtr, bindings::ib_qp_state_IB_QPS_RTR),
        (Self::Rts, bindings::ib_qp_state_IB_QPS_RTS),
        (Self::Sqd, bindings::ib_qp_state_IB_QPS_SQD),
        (Self::Sqe, bindings::ib_qp_state_IB_QPS_SQE),
        (Self::Error, bindings::ib_qp_state_IB_QPS_ERR),
    ];

    /// The state of the core's value `raw`, or `None` for a value it does not define.
    pub(super) fn from_raw(raw: bindings::ib_qp_state) -> Option<Self> {
        Self::ALL.iter().find(|(_, r)| *r == raw).map(|(s, _)| *s)
    }

    /// The core's value of the state.
    pub(super) fn to_raw(self) -> bindings::ib_qp_state {
        Self::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map_or(bindings::ib_qp_state_IB_QPS_ERR, |(_, r)| *r)
    }
}

/// A change `modify_qp` asks for: each `Some` is a bit of the consumer's `IB_QP_*` mask.
/// The other standard attributes (path, timeouts, retries) have no meaning on iWARP and
/// are not passed on.
pub(crate) struct QpModify {
    /// `IB_QP_STATE`: the state to enter.
    pub(crate) state: Option<QpState>,
    /// `IB_QP_CUR_STATE`: the state the consumer believes the QP is in.
    pub(crate) cur_state: Option<QpState>,
    /// `IB_QP_ACCESS_FLAGS`: the `IB_ACCESS_*` rights of remote peers on the QP.
    pub(crate) access: Option<u32>,
}

/// The queue sizes of a QP (`struct ib_qp_cap`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpCap {
    /// SQ depth in WRs.
    pub(crate) max_send_wr: u32,
    /// RQ depth in WRs (0 with an SRQ).
    pub(crate) max_recv_wr: u32,
    /// SGEs per send WR.
    pub(crate) max_send_sge: u32,
    /// SGEs per receive WR.
    pub(crate) max_recv_sge: u32,
    /// Inline data per send WR, in octets.
    pub(crate) max_inline_data: u32,
}

/// What `query_qp` reports.
pub(crate) struct QpAttrs {
    /// The current state.
    pub(crate) state: QpState,
    /// The granted queue sizes.
    pub(crate) cap: QpCap,
    /// Whether every send WR completes signalled (`IB_SIGNAL_ALL_WR`).
    pub(crate) sig_all: bool,
    /// The `IB_ACCESS_*` rights last set.
    pub(crate) access: u32,
    /// The MTU of the netdev, in octets (`None` without netdev).
    pub(crate) mtu: Option<u32>,
    /// The inbound RDMA Read depth (IRD) of the connection (0 unconnected).
    pub(crate) ird: u8,
    /// The outbound RDMA Read depth (ORD) of the connection (0 unconnected).
    pub(crate) ord: u8,
}

/// The verbs of a queue pair, implemented by its driver data.
#[vtable]
pub(crate) trait QpOps<D: Objects>: Sized + Send + Sync {
    /// `create_qp`: validates, allocates and answers a user caller; returns the granted
    /// queue sizes and the QP data's initialiser. The QP number is assigned already; the
    /// QP becomes visible to `iw_get_qp` after the data is initialised.
    fn create(
        dev: &IbDevice<D>,
        init: QpInit,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(QpCap, impl PinInit<Self, Error>)>;
    /// `destroy_qp`: called first; afterwards the QP leaves the QP-number table, destroy
    /// waits for all `iw_add_ref` references to go, then the data is dropped.
    fn destroy(dev: &IbDevice<D>, qp: &IbQp<Self>);
    /// The receive-queue sweep ([`IbDevice::sweep_rq_later`]) looks at the QP, from
    /// process context, while the QP exists; returns whether it should look again.
    fn sweep_rq(qp: &IbQp<Self>) -> bool;
    /// The sweep dropped the QP from its list without asking [`QpOps::sweep_rq`] (no
    /// memory): it must be listed again to be looked at.
    fn sweep_unlisted(qp: &IbQp<Self>);
    /// `modify_qp` (the trampoline refuses mask bits beyond the standard attributes).
    fn modify(qp: &IbQp<Self>, change: &QpModify) -> Result;
    /// `query_qp` (optional).
    fn query(_dev: &IbDevice<D>, _qp: &IbQp<Self>) -> QpAttrs {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `post_send` (for a user QP: the doorbell, with an empty list).
    fn post_send<'a>(qp: &IbQp<Self>, wrs: WrList<'a, SendWr>)
        -> Result<(), PostError<'a, SendWr>>;
    /// `post_recv`.
    fn post_recv<'a>(qp: &IbQp<Self>, wrs: WrList<'a, RecvWr>)
        -> Result<(), PostError<'a, RecvWr>>;
    /// `fill_res_qp_entry` (optional): the driver's details of the QP for `rdma resource
    /// show qp -d`, written to `out`.
    ///
    /// # Errors
    ///
    /// The error of a write to `out` (the netlink message is full).
    fn res_attrs(_qp: &IbQp<Self>, _out: &mut ResAttrs<'_>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
}

/// Driver attributes of a resource being reported over netlink (`rdma resource show ...
/// -d` lists them by name after the core's own).
///
/// # Invariants
///
/// `msg` is the core's netlink message under construction, exclusively ours for `'a`.
pub(crate) struct ResAttrs<'a> {
    msg: *mut bindings::sk_buff,
    _msg: core::marker::PhantomData<&'a mut bindings::sk_buff>,
}

impl ResAttrs<'_> {
    /// Wraps the core's message.
    ///
    /// # Safety
    ///
    /// `msg` is the message the core passed to a `fill_res_*_entry` operation, which
    /// this value must not outlive.
    pub(in crate::sys) unsafe fn new(msg: *mut bindings::sk_buff) -> Self {
        // INVARIANT: the caller passes the core's message for the call's duration.
        Self {
            msg,
            _msg: core::marker::PhantomData,
        }
    }

    /// Adds the attribute `name` with the 32-bit value `v`.
    ///
    /// # Errors
    ///
    /// `EMSGSIZE` when the message is full.
    pub(crate) fn u32(&mut self, name: &'static CStr, v: u32) -> Result {
        // SAFETY: `msg` is the core's message (invariant); `name` is NUL-terminated.
        crate::sys::to_result(unsafe {
            bindings::rdma_nl_put_driver_u32(self.msg, name.as_char_ptr(), v)
        })
    }

    /// Adds the attribute `name` with the 64-bit value `v`.
    ///
    /// # Errors
    ///
    /// `EMSGSIZE` when the message is full.
    pub(crate) fn u64(&mut self, name: &'static CStr, v: u64) -> Result {
        // SAFETY: as in `u32`.
        crate::sys::to_result(unsafe {
            bindings::rdma_nl_put_driver_u64(self.msg, name.as_char_ptr(), v)
        })
    }

    /// Adds the attribute `name` with the string `v`.
    ///
    /// # Errors
    ///
    /// `EMSGSIZE` when the message is full.
    pub(crate) fn str(&mut self, name: &'static CStr, v: &'static CStr) -> Result {
        // SAFETY: as in `u32`; `v` is NUL-terminated too.
        crate::sys::to_result(unsafe {
            bindings::rdma_nl_put_driver_string(self.msg, name.as_char_ptr(), v.as_char_ptr())
        })
    }
}

/// The limits of a shared receive queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SrqAttr {
    /// The depth in receive WRs.
    pub(crate) max_wr: u32,
    /// The SGEs per receive WR.
    pub(crate) max_sge: u32,
    /// The limit event's threshold in posted WRs (0: disarmed).
    pub(crate) limit: u32,
}

/// A change of `modify_srq`: each field set is a bit of the consumer's `IB_SRQ_*` mask.
pub(crate) struct SrqModify {
    /// `IB_SRQ_MAX_WR`: resize to this depth.
    pub(crate) max_wr: Option<u32>,
    /// `IB_SRQ_LIMIT`: set (and arm) the limit.
    pub(crate) limit: Option<u32>,
}

/// The verbs of a shared receive queue, implemented by its driver data.
#[vtable]
pub(crate) trait SrqOps<D: Objects>: Sized + Send + Sync {
    /// `create_srq` of a basic SRQ (the trampoline refuses the other types): validates
    /// `attr`, allocates and answers a user caller; returns the granted depth in WRs and
    /// the initialiser of the SRQ data.
    fn create(
        dev: &IbDevice<D>,
        attr: &SrqAttr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Self, Error>)>;
    /// `destroy_srq`: called before the data is dropped.
    fn destroy(dev: &IbDevice<D>, srq: &IbSrq<Self>);
    /// `modify_srq` (optional).
    fn modify(_srq: &IbSrq<Self>, _change: &SrqModify) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `query_srq` (optional).
    fn query(_srq: &IbSrq<Self>) -> SrqAttr {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `post_srq_recv`.
    fn post<'a>(srq: &IbSrq<Self>, wrs: WrList<'a, RecvWr>) -> Result<(), PostError<'a, RecvWr>>;
}

/// The verbs of a memory region, implemented by its driver data. Each constructor
/// returns the region's STag (lkey = rkey) with the data. Fast registration is optional:
/// a driver without it leaves out `alloc_fast` and the three `map_mr_sg` steps. The core
/// calls `get_dma_mr` and `reg_user_mr` unchecked, so those are required.
#[vtable]
pub(crate) trait MrOps<D: Objects>: Sized + Send + Sync {
    /// `get_dma_mr`: all kernel memory with rights `access` (`IB_ACCESS_*`); `kc` marks the
    /// region as a kernel consumer's.
    fn get_dma(dev: &IbDevice<D>, pd: PdId, access: i32, kc: KernelConsumer)
        -> Result<(u32, Self)>;
    /// `reg_user_mr`: registers `len` octets of user memory at `start`, addressed by peers
    /// as `iova`.
    fn reg_user(
        dev: &IbDevice<D>,
        pd: PdId,
        start: u64,
        len: u64,
        iova: u64,
        access: i32,
        udata: &mut UserResponse<'_>,
    ) -> Result<(u32, Self)>;
    /// `alloc_mr` (optional) of type `IB_MR_TYPE_MEM_REG` (the trampoline refuses the other types):
    /// a fast-registration MR for up to `max_num_sg` pages; `kc` marks the region as a
    /// kernel consumer's.
    fn alloc_fast(
        _dev: &IbDevice<D>,
        _pd: PdId,
        _max_num_sg: u32,
        _kc: KernelConsumer,
    ) -> Result<(u32, Self)> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `map_mr_sg` (optional), step 1: forget the previous page list.
    fn map_begin(_mr: &IbMr<Self>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `map_mr_sg`, step 2 (per page, from `ib_sg_to_pages`): append page address `addr`.
    fn set_page(_mr: &IbMr<Self>, _addr: u64) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `map_mr_sg`, step 3: the mapping covers `len` octets at `iova` in pages of
    /// `page_size` octets.
    fn map_end(_mr: &IbMr<Self>, _iova: u64, _len: u64, _page_size: u32) {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
    /// `dereg_mr`: called before the MR data is dropped and the MR freed.
    fn dereg(dev: &IbDevice<D>, mr: &IbMr<Self>);
}

/// The iw_cm verbs of a listening endpoint, implemented by its driver data.
pub(crate) trait ListenerOps<D: Objects>: Sized + Send + Sync + 'static {
    /// `iw_create_listen`: listens on `id`'s mapped local address.
    fn create(dev: &IbDevice<D>, id: CmId<D>, backlog: i32) -> Result<Arc<Self>>;
    /// `iw_destroy_listen`: stops listening.
    fn destroy(&self);
}

/// The iw_cm verbs of a connection endpoint, implemented by its driver data.
pub(crate) trait CepOps<D: Objects>: Sized + Send + Sync + 'static {
    /// `iw_connect`: connects `id` with `param` (active side).
    fn connect(dev: &IbDevice<D>, id: CmId<D>, param: ConnParam) -> Result;
    /// `iw_accept`: accepts the connection of `cep` on the new `id`.
    fn accept(cep: Arc<Self>, id: CmId<D>, param: ConnParam) -> Result;
    /// `iw_reject`: rejects the connection of `cep` with private data `pdata`.
    fn reject(cep: Arc<Self>, pdata: &[u8]) -> Result;
}
