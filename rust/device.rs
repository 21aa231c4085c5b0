// SPDX-License-Identifier: GPL-2.0

//! rsiw devices: `rdma link add`, netdev events, and the device and port verbs.
//!
//! One rsiw device serves one network device (port 1). Its GID is the netdev's MAC
//! address, its node GUID the EUI-64 derived from it; the port state follows the netdev.

use crate::abi::AllocCtxResp;
use crate::limits::{
    Counts, Object, MAX_CQE, MAX_FRMR_PAGES, MAX_IRD_ORD, MAX_QP_WR, MAX_SGE, MAX_SRQ_WR,
};
use crate::stag::StagTable;
use crate::sys::bindings as b;
use crate::sys::ibdev::{stat_desc, DeviceAttr, DeviceOps, IbDevice, NewDevice, PortAttr};
use crate::sys::net::link::LinkHandler;
use crate::sys::net::netdev::{NetDev, NetdevEvent, NetdevEvents};
use crate::sys::pr_err_ratelimited;
use crate::sys::udata::UserResponse;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::str::BStr;

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
        let slot = dev.counts.take(Object::Ucontext)?;
        resp.write(&AllocCtxResp { dev_id: 0, pad: 0 })?;
        slot.keep();
        Ok(())
    }

    fn dealloc_ucontext(dev: &IbDevice<Self>) {
        dev.counts.give_back(Object::Ucontext);
    }

    fn alloc_pd(dev: &IbDevice<Self>) -> Result {
        dev.counts.take(Object::Pd)?.keep();
        Ok(())
    }

    fn dealloc_pd(dev: &IbDevice<Self>) {
        dev.counts.give_back(Object::Pd);
    }

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

    fn hw_stats(dev: &IbDevice<Self>, values: &mut [u64]) {
        for (v, c) in values.iter_mut().zip(dev.stats.iter()) {
            *v = c.load(Ordering::Relaxed);
        }
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
        let mut dev = NewDevice::new(
            ndev,
            pin_init!(Device {
                mac: AtomicU64::new(mac_to_u64(mac)),
                counts: Counts::new(),
                stags <- StagTable::new(),
                stats: [const { AtomicU64::new(0) }; STAT_COUNT],
            }),
        )?;
        // One completion vector per possible CPU id, as the C siw offers: libraries spread
        // their CQs over the vectors. A CQ's vector places nothing: its completions are
        // reported in the context that completes the WQE.
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
