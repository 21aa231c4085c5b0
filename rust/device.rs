// SPDX-License-Identifier: GPL-2.0

//! rsiw devices: `rdma link add`, netdev events, and the device and port verbs.
//!
//! One rsiw device serves one network device (port 1). Its GID is the netdev's MAC
//! address, its node GUID the EUI-64 derived from it; the port state follows the netdev.

use crate::cq::{Cq, MAX_CQE};
use crate::mem::{Mem, Mr, MAX_FRMR_PAGES};
use crate::qp::{Qp, MAX_QP_WR, MAX_SGE};
use crate::srq::{Srq, MAX_SRQ_WR};
use crate::sys::bindings as b;
use crate::sys::ibdev::{stat_desc, DeviceOps, IbDevice, NewDevice};
use crate::sys::idtable::ArcTable;
use crate::sys::iwcm::{CmId, ConnParam};
use crate::sys::kmem::KernelConsumer;
use crate::sys::link::LinkHandler;
use crate::sys::netdev::{NetDev, NetdevEvent, NetdevEvents};
use crate::sys::obj::{IbCq, IbMr, IbQp, IbSrq, PdId};
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::UserResponse;
use crate::sys::verbs::QpInit;
use crate::sys::wr::{PostError, RecvWr, SendWr, WrList};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::str::BStr;
use kernel::sync::Arc;

/// Vendor ID reported by `query_device`: ASCII "rsw".
const VENDOR_ID: u32 = 0x0072_7377;

/// Node description shown by `ibv_devinfo -v` and sysfs `node_desc`.
const NODE_DESC: &[u8] = b"rsiw Rust soft-iWARP";

/// The per-device data of an rsiw device.
#[pin_data]
pub(crate) struct Device {
    /// The netdev's MAC address in the low 48 bits (updated on NETDEV_CHANGEADDR).
    mac: AtomicU64,
    /// Open user contexts, limited by the `max_ucontext` module parameter.
    ucontexts: AtomicU32,
    /// Protection domains, limited by the `max_pd` module parameter.
    pds: AtomicU32,
    /// Completion queues (module parameter `max_cq`).
    pub(crate) cqs: AtomicU32,
    /// Queue pairs (module parameter `max_qp`).
    pub(crate) qps_count: AtomicU32,
    /// Shared receive queues (module parameter `max_srq`).
    pub(crate) srqs: AtomicU32,
    /// Memory regions (module parameter `max_mr`).
    pub(crate) mrs: AtomicU32,
    /// Regions by STag index.
    #[pin]
    pub(crate) stags: ArcTable<Mem>,
    /// Port counters, indexed by [`Stat`].
    stats: [AtomicU64; STAT_COUNT],
}

/// The port counters of a device (`rdma statistic show link rsiw0/1`, sysfs
/// `ports/1/hw_counters/`), summed over all its connections since the device was added.
#[derive(Clone, Copy)]
pub(crate) enum Stat {
    /// FPDUs queued on the sockets (RFC 5044 §4), TERMINATE included.
    TxFpdus,
    /// Octets of those FPDUs: MPA header, ULPDU, pad, markers and CRC.
    TxOctets,
    /// ULPDU payload octets handed to TCP by page reference instead of copied
    /// (module parameter `zcopy_tx`).
    TxSplicedOctets,
    /// Complete FPDUs received (CRC checked where negotiated).
    RxFpdus,
    /// Octets read from the sockets after MPA startup.
    RxOctets,
    /// TERMINATE messages sent (RFC 5040 §5.2).
    TerminateSent,
    /// TERMINATE messages received.
    TerminateReceived,
}

const STAT_COUNT: usize = 7;

// One name per counter.
const _: () = assert!(<Device as DeviceOps>::HW_STATS.len() == STAT_COUNT);

impl Device {
    /// Adds `n` to counter `s` (relaxed: the counters order nothing).
    pub(crate) fn count(&self, s: Stat, n: u64) {
        self.stats[s as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// A unit taken from a device counter with [`take_slot`], given back on drop unless kept.
pub(crate) struct SlotGuard<'a>(Option<&'a AtomicU32>);

impl<'a> SlotGuard<'a> {
    /// Guards one unit of `counter`.
    pub(crate) fn new(counter: &'a AtomicU32) -> Self {
        Self(Some(counter))
    }

    /// The object was created: the unit stays taken (its destroy gives it back).
    pub(crate) fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn mac_to_u64(mac: [u8; 6]) -> u64 {
    let mut b8 = [0u8; 8];
    b8[2..].copy_from_slice(&mac);
    u64::from_be_bytes(b8)
}

fn u64_to_mac(v: u64) -> [u8; 6] {
    let b8 = v.to_be_bytes();
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&b8[2..]);
    mac
}

/// Returns the modified EUI-64 for an EUI-48 MAC (RFC 4291 Appendix A), in network order.
fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// Returns the IB MTU enum value for an MTU in octets (`ib_mtu_int_to_enum()`).
pub(crate) fn ib_mtu(mtu: u32) -> b::ib_mtu {
    match mtu {
        4096.. => b::ib_mtu_IB_MTU_4096,
        2048..=4095 => b::ib_mtu_IB_MTU_2048,
        1024..=2047 => b::ib_mtu_IB_MTU_1024,
        512..=1023 => b::ib_mtu_IB_MTU_512,
        _ => b::ib_mtu_IB_MTU_256,
    }
}

/// Takes one unit of `counter` if it is below `limit`.
pub(crate) fn take_slot(counter: &AtomicU32, limit: u32) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

impl DeviceOps for Device {
    fn query_device(dev: &IbDevice<Self>, attr: &mut b::ib_device_attr) -> Result {
        let mac = u64_to_mac(dev.mac.load(Ordering::Relaxed));
        attr.vendor_id = VENDOR_ID;
        attr.vendor_part_id = 0;
        attr.sys_image_guid = u64::from_ne_bytes(eui64(mac));
        attr.max_mr_size = u64::MAX;
        attr.page_size_cap = kernel::page::PAGE_SIZE as u64;
        attr.max_pd = crate::module_parameters::max_pd.value();
        attr.max_qp = crate::module_parameters::max_qp.value();
        attr.max_qp_wr = MAX_QP_WR;
        attr.max_send_sge = MAX_SGE;
        attr.max_recv_sge = MAX_SGE;
        // An iWARP Read Request names one sink (RFC 5040 §4.4).
        attr.max_sge_rd = 1;
        attr.max_cq = crate::module_parameters::max_cq.value();
        attr.max_cqe = MAX_CQE;
        attr.max_mr = crate::module_parameters::max_mr.value();
        attr.max_fast_reg_page_list_len = MAX_FRMR_PAGES;
        attr.max_srq = crate::module_parameters::max_srq.value();
        attr.max_srq_wr = MAX_SRQ_WR;
        attr.max_srq_sge = MAX_SGE;
        // IRD and ORD ceilings per QP (RFC 6581 §9.1 negotiates within them).
        attr.max_qp_rd_atom = crate::conn::MAX_IRD_ORD;
        attr.max_qp_init_rd_atom = crate::conn::MAX_IRD_ORD;
        attr.max_res_rd_atom = crate::conn::MAX_IRD_ORD * crate::module_parameters::max_qp.value();
        attr.atomic_cap = b::ib_atomic_cap_IB_ATOMIC_NONE;
        // REG_MR and LOCAL_INV work requests on kernel QPs, fast-registration MRs.
        attr.device_cap_flags = b::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
        // `rdma link del` may remove rsiw devices.
        attr.kernel_cap_flags = u64::from(b::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG);
        Ok(())
    }

    fn query_port(dev: &IbDevice<Self>, port: u32, attr: &mut b::ib_port_attr) -> Result {
        if port != 1 {
            return Err(EINVAL);
        }
        let ndev = dev.netdev().ok_or(ENODEV)?;
        let (mut speed, mut width) = (0u16, 0u8);
        dev.eth_speed(port, &mut speed, &mut width)?;
        attr.active_speed = speed;
        attr.active_width = width;
        attr.gid_tbl_len = 1;

        attr.max_msg_sz = u32::MAX;
        // A max_mtu of 0 means the netdev sets no limit (dummy, for example).
        attr.max_mtu = match ndev.max_mtu() {
            0 => b::ib_mtu_IB_MTU_4096,
            m => ib_mtu(m),
        };
        attr.active_mtu = ib_mtu(ndev.mtu());
        let active = ndev.is_active();
        attr.state = if active {
            b::ib_port_state_IB_PORT_ACTIVE
        } else {
            b::ib_port_state_IB_PORT_DOWN
        };
        attr.phys_state = if active {
            b::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8
        } else {
            b::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8
        };
        attr.port_cap_flags = b::ib_port_capability_mask_bits_IB_PORT_CM_SUP
            | b::ib_port_capability_mask_bits_IB_PORT_DEVICE_MGMT_SUP;
        Ok(())
    }

    fn query_gid(dev: &IbDevice<Self>, port: u32, index: i32) -> Result<[u8; 16]> {
        if port != 1 || index != 0 {
            return Err(EINVAL);
        }
        let mut gid = [0u8; 16];
        gid[..6].copy_from_slice(&u64_to_mac(dev.mac.load(Ordering::Relaxed)));
        Ok(gid)
    }

    fn port_immutable(_dev: &IbDevice<Self>, port: u32, imm: &mut b::ib_port_immutable) -> Result {
        if port != 1 {
            return Err(EINVAL);
        }
        imm.gid_tbl_len = 1;

        imm.core_cap_flags = b::RDMA_CORE_PORT_IWARP;
        Ok(())
    }

    fn alloc_ucontext(dev: &IbDevice<Self>, resp: &mut UserResponse<'_>) -> Result {
        let limit = crate::module_parameters::max_ucontext.value();
        if !take_slot(&dev.ucontexts, limit) {
            pr_err_ratelimited!(
                "user context limit reached ({limit}); see module parameter max_ucontext\n"
            );
            return Err(ENOMEM);
        }
        let r = resp.write(&b::siw_uresp_alloc_ctx { dev_id: 0, pad: 0 });
        if r.is_err() {
            dev.ucontexts.fetch_sub(1, Ordering::AcqRel);
        }
        r
    }

    fn dealloc_ucontext(dev: &IbDevice<Self>) {
        dev.ucontexts.fetch_sub(1, Ordering::AcqRel);
    }

    fn alloc_pd(dev: &IbDevice<Self>) -> Result {
        let limit = crate::module_parameters::max_pd.value();
        if !take_slot(&dev.pds, limit) {
            pr_err_ratelimited!(
                "protection domain limit reached ({limit}); see module parameter max_pd\n"
            );
            return Err(ENOMEM);
        }
        Ok(())
    }

    fn dealloc_pd(dev: &IbDevice<Self>) {
        dev.pds.fetch_sub(1, Ordering::AcqRel);
    }

    fn dealloc(_dev: &IbDevice<Self>) {}

    // In the order of `Stat`.
    const HW_STATS: &'static [b::rdma_stat_desc] = &[
        stat_desc(c"tx_fpdus"),
        stat_desc(c"tx_octets"),
        stat_desc(c"tx_spliced_octets"),
        stat_desc(c"rx_fpdus"),
        stat_desc(c"rx_octets"),
        stat_desc(c"terminate_sent"),
        stat_desc(c"terminate_received"),
    ];

    fn hw_stats(dev: &IbDevice<Self>, _port: u32, values: &mut [u64]) {
        for (v, c) in values.iter_mut().zip(dev.stats.iter()) {
            *v = c.load(Ordering::Relaxed);
        }
    }

    type Cq = Cq;
    type Qp = Qp;
    type Srq = Srq;
    type Mr = Mr;

    fn create_cq(
        dev: &IbDevice<Self>,
        attr: &b::ib_cq_init_attr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<(u32, impl PinInit<Cq, Error>)> {
        Cq::create(dev, attr, udata)
    }

    fn destroy_cq(dev: &IbDevice<Self>, cq: &IbCq<Cq>) {
        Cq::destroy(dev, cq);
    }

    fn poll_cq(cq: &IbCq<Cq>, wc: &mut [b::ib_wc]) -> usize {
        Cq::poll(cq, wc)
    }

    fn req_notify_cq(cq: &IbCq<Cq>, flags: u32) -> Result<i32> {
        Cq::req_notify(cq, flags)
    }

    fn create_qp(
        dev: &IbDevice<Self>,
        init: QpInit<'_, Self>,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<impl PinInit<Qp, Error>> {
        Qp::create(dev, init, udata)
    }

    fn destroy_qp(dev: &IbDevice<Self>, qp: &IbQp<Qp>) {
        Qp::destroy(dev, qp);
    }

    fn modify_qp(_dev: &IbDevice<Self>, qp: &IbQp<Qp>, attr: &b::ib_qp_attr, mask: u32) -> Result {
        Qp::modify(qp, attr, mask)
    }

    fn query_qp(
        dev: &IbDevice<Self>,
        qp: &IbQp<Qp>,
        attr: &mut b::ib_qp_attr,
        init: &mut b::ib_qp_init_attr,
    ) -> Result {
        Qp::query(dev, qp, attr, init);
        Ok(())
    }

    fn post_send<'a>(qp: &IbQp<Qp>, wrs: WrList<'a, SendWr>) -> Result<(), PostError<'a, SendWr>> {
        Qp::post_send(qp, wrs)
    }

    fn post_recv<'a>(qp: &IbQp<Qp>, wrs: WrList<'a, RecvWr>) -> Result<(), PostError<'a, RecvWr>> {
        Qp::post_recv(qp, wrs)
    }

    fn create_srq(
        dev: &IbDevice<Self>,
        attr: &mut b::ib_srq_init_attr,
        udata: Option<&mut UserResponse<'_>>,
    ) -> Result<impl PinInit<Srq, Error>> {
        Srq::create(dev, attr, udata)
    }

    fn destroy_srq(dev: &IbDevice<Self>, srq: &IbSrq<Srq>) {
        Srq::destroy(dev, srq);
    }

    fn modify_srq(srq: &IbSrq<Srq>, attr: &b::ib_srq_attr, mask: u32) -> Result {
        Srq::modify(srq, attr, mask)
    }

    fn query_srq(srq: &IbSrq<Srq>, attr: &mut b::ib_srq_attr) {
        Srq::query(srq, attr);
    }

    fn post_srq_recv<'a>(
        srq: &IbSrq<Srq>,
        wrs: WrList<'a, RecvWr>,
    ) -> Result<(), PostError<'a, RecvWr>> {
        Srq::post(srq, wrs)
    }

    fn get_dma_mr(
        dev: &IbDevice<Self>,
        pd: PdId,
        access: i32,
        kc: KernelConsumer,
    ) -> Result<(u32, impl PinInit<Mr, Error>)> {
        Mr::dma(dev, pd, access, kc).map(|(stag, mr)| (stag, Ok::<Mr, Error>(mr)))
    }

    fn reg_user_mr(
        dev: &IbDevice<Self>,
        pd: PdId,
        start: u64,
        len: u64,
        iova: u64,
        access: i32,
        udata: &mut UserResponse<'_>,
    ) -> Result<(u32, impl PinInit<Mr, Error>)> {
        Mr::user(dev, pd, start, len, iova, access, udata)
            .map(|(stag, mr)| (stag, Ok::<Mr, Error>(mr)))
    }

    fn alloc_mr(
        dev: &IbDevice<Self>,
        pd: PdId,
        ty: b::ib_mr_type,
        max_num_sg: u32,
        kc: KernelConsumer,
    ) -> Result<(u32, impl PinInit<Mr, Error>)> {
        Mr::frmr(dev, pd, ty, max_num_sg, kc).map(|(stag, mr)| (stag, Ok::<Mr, Error>(mr)))
    }

    fn mr_map_begin(mr: &IbMr<Mr>) -> Result {
        Mr::map_begin(mr)
    }

    fn mr_set_page(mr: &IbMr<Mr>, addr: u64) -> Result {
        Mr::set_page(mr, addr)
    }

    fn mr_map_end(mr: &IbMr<Mr>, iova: u64, len: u64, page_size: u32) {
        Mr::map_end(mr, iova, len, page_size);
    }

    fn dereg_mr(dev: &IbDevice<Self>, mr: &IbMr<Mr>) {
        Mr::dereg(dev, mr);
    }

    type Listener = crate::cm::Listener;
    type Cep = crate::cm::Cep;

    fn iw_create_listen(
        dev: &IbDevice<Self>,
        id: CmId<Self>,
        backlog: i32,
    ) -> Result<Arc<Self::Listener>> {
        crate::cm::Listener::create(dev, id, backlog)
    }

    fn iw_destroy_listen(_dev: &IbDevice<Self>, l: Arc<Self::Listener>) {
        l.destroy();
    }

    fn iw_connect(dev: &IbDevice<Self>, id: CmId<Self>, param: ConnParam) -> Result {
        crate::cm::Cep::connect(dev, id, param)
    }

    fn iw_accept(
        _dev: &IbDevice<Self>,
        cep: Arc<Self::Cep>,
        id: CmId<Self>,
        param: ConnParam,
    ) -> Result {
        crate::cm::Cep::accept(cep, id, param)
    }

    fn iw_reject(_dev: &IbDevice<Self>, cep: Arc<Self::Cep>, pdata: &[u8]) -> Result {
        crate::cm::Cep::reject(cep, pdata)
    }
}

/// The `rsiw` link type and netdev event handler.
pub(crate) struct Link;

impl LinkHandler for Link {
    const TYPE: &'static CStr = c"rsiw";

    fn newlink(name: &CStr, ndev: &NetDev) -> Result {
        let ifname = BStr::from_bytes(ndev.name());
        let ty = u32::from(ndev.link_type());
        if ty != b::ARPHRD_ETHER && ty != b::ARPHRD_IEEE802 && ty != b::ARPHRD_LOOPBACK {
            pr_err_ratelimited!(
                "{name}: netdev {ifname} has link type {ty}, rsiw needs Ethernet\n"
            );
            return Err(EINVAL);
        }
        let taken = crate::sys::ibdev::with_device_of::<Device>(ndev, |_| ());
        if taken {
            pr_err_ratelimited!(
                "{name}: netdev {ifname} already has a soft-iWARP device (rsiw or siw)\n"
            );
            return Err(EEXIST);
        }
        let mac = ndev.mac().unwrap_or([0; 6]);
        let mut dev = NewDevice::new(
            ndev,
            pin_init!(Device {
                mac: AtomicU64::new(mac_to_u64(mac)),
                ucontexts: AtomicU32::new(0),
                pds: AtomicU32::new(0),
                cqs: AtomicU32::new(0),
                qps_count: AtomicU32::new(0),
                srqs: AtomicU32::new(0),
                mrs: AtomicU32::new(0),
                // Start STag indices at a random point, like the C siw.
                stags <- ArcTable::new(crate::sys::random_u32() & 0x00ff_ffff),
                stats: [const { AtomicU64::new(0) }; STAT_COUNT],
            }),
        )?;
        dev.set_identity(eui64(mac), NODE_DESC, 1);
        dev.set_netdev(ndev)?;
        dev.register(name).inspect_err(|e| {
            pr_err_ratelimited!(
                "{name}: registration on {ifname} failed ({})\n",
                e.to_errno()
            );
        })?;
        pr_info!(
            "{name}: created on netdev {ifname} (ifindex {})\n",
            ndev.ifindex()
        );
        Ok(())
    }
}

impl NetdevEvents for Link {
    fn event(ndev: &NetDev, event: NetdevEvent) {
        crate::sys::ibdev::with_device_of::<Device>(ndev, |dev| match event {
            e if e == u64::from(b::netdev_cmd_NETDEV_UP)
                || e == u64::from(b::netdev_cmd_NETDEV_DOWN)
                || e == u64::from(b::netdev_cmd_NETDEV_CHANGE) =>
            {
                dev.dispatch_port_state(ndev);
            }
            e if e == u64::from(b::netdev_cmd_NETDEV_CHANGEADDR) => {
                if let Some(mac) = ndev.mac() {
                    dev.mac.store(mac_to_u64(mac), Ordering::Relaxed);
                }
                dev.dispatch_port_event(b::ib_event_type_IB_EVENT_GID_CHANGE);
            }
            e if e == u64::from(b::netdev_cmd_NETDEV_UNREGISTER) => dev.unregister_queued(),
            _ => {}
        });
    }
}
