// SPDX-License-Identifier: GPL-2.0

//! rsiw devices: `rdma link add`, netdev events, and the device and port verbs.
//!
//! One rsiw device serves one network device (port 1). Its GID is the netdev's MAC
//! address, its node GUID the EUI-64 derived from it; the port state follows the netdev.

use crate::abi::AllocCtxResp;
use crate::limits::{
    Counts, Object, MAX_CQE, MAX_FRMR_PAGES, MAX_IRD_ORD, MAX_MSG_SZ, MAX_QP_WR, MAX_SGE,
    MAX_SRQ_WR,
};
use crate::logtag::Tag;
use crate::settings::{self, ParseError, Settings};
use crate::stag::StagTable;
use crate::sys::bindings as b;
use crate::sys::ibdev::{stat_desc, DeviceAttr, DeviceOps, IbDevice, NewDevice, PortAttr};
use crate::sys::net::link::LinkHandler;
use crate::sys::net::netdev::{NetDev, NetdevEvent, NetdevEvents};
use crate::sys::udata::UserResponse;
use crate::sys::{pr_err_ratelimited, pr_warn_ratelimited};
use crate::wire::terminate::Layer;
use core::sync::atomic::{AtomicU64, Ordering};
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
    /// The live objects of each kind, within the `max_*` module parameters.
    pub(crate) counts: Counts,
    /// The regions of the device's MRs, by STag.
    #[pin]
    pub(crate) stags: StagTable,
    /// Port counters.
    stats: Arc<Stats>,
    /// The protocol settings, each a file in the device's sysfs directory.
    pub(crate) settings: Settings,
}

/// The port counters of a device (`rdma statistic show link rsiw0/1`, sysfs
/// `ports/1/hw_counters/`), summed over all its connections since the device was added.
#[derive(Clone, Copy)]
pub(crate) enum Stat {
    /// FPDUs queued on the sockets (RFC 5044 §4), TERMINATE included.
    TxFpdus,
    /// Octets of those FPDUs: MPA header, ULPDU, pad, markers and CRC.
    TxOctets,
    /// ULPDU payload octets copied into the connection's copy pages, which TCP takes by
    /// reference (payload in FPDUs of 8 KiB or more).
    TxCopyPageOctets,
    /// Complete FPDUs received (CRC checked where negotiated).
    RxFpdus,
    /// Octets read from the sockets after MPA startup.
    RxOctets,
    /// TERMINATE messages sent after MPA startup (RFC 5040 §5.2), all layers.
    TerminateSent,
    /// TERMINATE messages received, all layers.
    TerminateReceived,
    /// TERMINATEs sent for an RDMAP error (layer 0, RFC 5040 §7).
    TerminateSentRdmap,
    /// TERMINATEs sent for a DDP error (layer 1, RFC 5041 §7.2).
    TerminateSentDdp,
    /// TERMINATEs sent for an MPA error (layer 2, RFC 5044 §8).
    TerminateSentMpa,
    /// TERMINATEs received with layer 0 (RDMAP).
    TerminateReceivedRdmap,
    /// TERMINATEs received with layer 1 (DDP).
    TerminateReceivedDdp,
    /// TERMINATEs received with layer 2 (MPA).
    TerminateReceivedMpa,
    /// Connections ended for an FPDU whose CRC did not match (RFC 5044 §8, MPA error 2).
    CrcErrors,
    /// Connections the consumers asked for (`iw_connect`): TCP connects started.
    ConnectAttempts,
    /// TCP connections the listeners accepted (each then waits for its MPA Request).
    IncomingConnections,
    /// MPA Replies with the Rejected bit sent (a consumer refused the connection).
    MpaRejectsSent,
    /// MPA Replies with the Rejected bit received (the peer refused our connect).
    MpaRejectsReceived,
    /// MPA startups that ran out of `mpa_timeout_ms` (no Request, Reply or Rtr frame).
    MpaTimeouts,
}

const STAT_COUNT: usize = 19;

/// A device's port counters, indexed by [`Stat`]. Connection endpoints hold their own
/// reference (`Arc`): a connection attempt can end a little after its device is gone.
pub(crate) struct Stats([AtomicU64; STAT_COUNT]);

impl Stats {
    /// Adds `n` to counter `s` (relaxed: the counters order nothing).
    pub(crate) fn count(&self, s: Stat, n: u64) {
        self.0[s as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a TERMINATE of `layer`, sent (`sent`) or received, in the total and in its
    /// layer's counter.
    pub(crate) fn count_terminate(&self, layer: Layer, sent: bool) {
        let (all, by_layer) = match (sent, layer) {
            (true, Layer::Rdma) => (Stat::TerminateSent, Stat::TerminateSentRdmap),
            (true, Layer::Ddp) => (Stat::TerminateSent, Stat::TerminateSentDdp),
            (true, Layer::Llp) => (Stat::TerminateSent, Stat::TerminateSentMpa),
            (false, Layer::Rdma) => (Stat::TerminateReceived, Stat::TerminateReceivedRdmap),
            (false, Layer::Ddp) => (Stat::TerminateReceived, Stat::TerminateReceivedDdp),
            (false, Layer::Llp) => (Stat::TerminateReceived, Stat::TerminateReceivedMpa),
        };
        self.count(all, 1);
        self.count(by_layer, 1);
    }
}

// One name per counter.
const _: () = assert!(<Device as DeviceOps>::HW_STATS.len() == STAT_COUNT);

impl Device {
    /// Adds `n` to counter `s` (relaxed: the counters order nothing).
    pub(crate) fn count(&self, s: Stat, n: u64) {
        self.stats.count(s, n);
    }

    /// Counts a TERMINATE of `layer`, sent (`sent`) or received (see
    /// [`Stats::count_terminate`]).
    pub(crate) fn count_terminate(&self, layer: Layer, sent: bool) {
        self.stats.count_terminate(layer, sent);
    }

    /// The device's counters, for an endpoint that may outlive the device.
    pub(crate) fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
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

impl DeviceOps for Device {
    fn query_device(dev: &IbDevice<Self>) -> DeviceAttr {
        use crate::module_parameters as p;
        DeviceAttr {
            vendor_id: VENDOR_ID,
            sys_image_guid: eui64(u64_to_mac(dev.mac.load(Ordering::Relaxed))),
            max_pd: p::max_pd.value(),
            max_qp: p::max_qp.value(),
            max_cq: p::max_cq.value(),
            max_mr: p::max_mr.value(),
            max_srq: p::max_srq.value(),
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cqe: MAX_CQE,
            max_srq_wr: MAX_SRQ_WR,
            max_fast_reg_pages: MAX_FRMR_PAGES,
            // RFC 6581 §9.1 negotiates IRD and ORD within this.
            max_ird_ord: MAX_IRD_ORD,
        }
    }

    fn query_port(dev: &IbDevice<Self>) -> Result<PortAttr> {
        let ndev = dev.netdev().ok_or(ENODEV)?;
        Ok(PortAttr {
            active: ndev.is_active(),
            max_mtu: ndev.max_mtu(),
            mtu: ndev.mtu(),
            // Messages up to 4 GiB - 1 octets.
            max_msg_sz: MAX_MSG_SZ,
        })
    }

    fn query_gid(dev: &IbDevice<Self>, index: i32) -> Result<[u8; 16]> {
        if index != 0 {
            return Err(EINVAL);
        }
        let mut gid = [0u8; 16];
        gid[..6].copy_from_slice(&u64_to_mac(dev.mac.load(Ordering::Relaxed)));
        Ok(gid)
    }

    fn alloc_ucontext(dev: &IbDevice<Self>, resp: &mut UserResponse<'_>) -> Result {
        let slot = dev.counts.take(Object::Ucontext, dev)?;
        resp.write(&AllocCtxResp { dev_id: 0, pad: 0 })?;
        slot.keep();
        Ok(())
    }

    fn dealloc_ucontext(dev: &IbDevice<Self>) {
        dev.counts.give_back(Object::Ucontext);
    }

    fn alloc_pd(dev: &IbDevice<Self>) -> Result {
        dev.counts.take(Object::Pd, dev)?.keep();
        Ok(())
    }

    fn dealloc_pd(dev: &IbDevice<Self>) {
        dev.counts.give_back(Object::Pd);
    }

    // In the order of `Stat`.
    const HW_STATS: &'static [b::rdma_stat_desc] = &[
        stat_desc(c"tx_fpdus"),
        stat_desc(c"tx_octets"),
        stat_desc(c"tx_copy_page_octets"),
        stat_desc(c"rx_fpdus"),
        stat_desc(c"rx_octets"),
        stat_desc(c"terminate_sent"),
        stat_desc(c"terminate_received"),
        stat_desc(c"terminate_sent_rdmap"),
        stat_desc(c"terminate_sent_ddp"),
        stat_desc(c"terminate_sent_mpa"),
        stat_desc(c"terminate_received_rdmap"),
        stat_desc(c"terminate_received_ddp"),
        stat_desc(c"terminate_received_mpa"),
        stat_desc(c"crc_errors"),
        stat_desc(c"connect_attempts"),
        stat_desc(c"incoming_connections"),
        stat_desc(c"mpa_rejects_sent"),
        stat_desc(c"mpa_rejects_received"),
        stat_desc(c"mpa_timeouts"),
    ];

    fn hw_stats(dev: &IbDevice<Self>, values: &mut [u64]) {
        for (v, c) in values.iter_mut().zip(dev.stats.0.iter()) {
            *v = c.load(Ordering::Relaxed);
        }
    }

    const ATTRS: &'static [&'static CStr] = settings::NAMES;

    fn show_attr(dev: &IbDevice<Self>, index: usize) -> u32 {
        dev.settings.show(index)
    }

    fn store_attr(dev: &IbDevice<Self>, index: usize, text: &[u8]) -> Result {
        dev.settings.store(index, text).map_err(|e| {
            let name = settings::NAMES.get(index).copied().unwrap_or(c"?");
            let shown = BStr::from_bytes(text.strip_suffix(b"\n").unwrap_or(text));
            let tag = Tag::new(dev, None, None);
            match e {
                ParseError::OutOfRange { min, max } => pr_warn_ratelimited!(
                    "{tag}: {name}: '{shown}' is not in {min}..={max}; unchanged\n"
                ),
                ParseError::NotAFlag => pr_warn_ratelimited!(
                    "{tag}: {name}: '{shown}' is not 0 or 1 (or n or y); unchanged\n"
                ),
                ParseError::NotANumber => pr_warn_ratelimited!(
                    "{tag}: {name}: '{shown}' is not a decimal number; unchanged\n"
                ),
                ParseError::NoSuchSetting => {}
            }
            EINVAL
        })
    }
}

/// The `rsiw` link type and netdev event handler.
pub(crate) struct Link;

impl LinkHandler for Link {
    const TYPE: &'static CStr = c"rsiw";

    fn newlink(name: &CStr, ndev: &NetDev) -> Result {
        let ifname = BStr::from_bytes(ndev.name());
        if !ndev.carries_iwarp() {
            pr_err_ratelimited!(
                "{name}: netdev {ifname} has link type {}, not one rsiw serves \
                 (Ethernet, IEEE 802, loopback, none)\n",
                ndev.link_type()
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
        // A netdev without a MAC address (ARPHRD_NONE) still needs a unique GID and GUID.
        let mac = ndev.mac().unwrap_or_else(crate::sys::random_mac);
        let stats = Arc::new(Stats([const { AtomicU64::new(0) }; STAT_COUNT]), GFP_KERNEL)?;
        let mut dev = NewDevice::new(
            ndev,
            pin_init!(Device {
                mac: AtomicU64::new(mac_to_u64(mac)),
                counts: Counts::new(),
                stags <- StagTable::new(),
                stats,
                settings: Settings::from_module_parameters(),
            }),
        )?;
        // One completion vector per possible CPU id, as the C siw offers: libraries spread
        // their CQs over the vectors. Vector `v` is CPU `v`: a CQ's completion handler runs
        // there for kernel CQs (`IbCq::call_comp_handler`), as an RNIC's interrupt affinity
        // places it; user CQs signal their event queue at once (`Notify::deliver`).
        let vectors = i32::try_from(kernel::cpu::nr_cpu_ids()).unwrap_or(i32::MAX);
        dev.set_identity(eui64(mac), NODE_DESC, vectors);
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
            NetdevEvent::LinkChange => dev.dispatch_port_state(ndev),
            NetdevEvent::AddressChange => {
                if let Some(mac) = ndev.mac() {
                    dev.mac.store(mac_to_u64(mac), Ordering::Relaxed);
                }
                dev.dispatch_gid_change();
            }
            NetdevEvent::Unregister => dev.unregister_queued(),
        });
    }
}
