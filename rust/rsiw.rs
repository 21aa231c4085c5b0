// SPDX-License-Identifier: GPL-2.0

//! rsiw: a software iWARP RDMA provider (RFC 5040, RFC 5041, RFC 5044, RFC 6581).
//!
//! The crate root only declares modules and the kernel module itself; see
//! `Documentation/rsiw.rst` for the administrator's guide.
//!
//! `unsafe` code lives in [`sys`] only: the compiler refuses it anywhere else.

#![deny(unsafe_code)]

use kernel::prelude::*;

pub mod engine;
pub mod wire;

mod abi;
mod cm;
mod conn;
mod cq;
mod crc;
mod device;
#[cfg(CONFIG_KUNIT = "y")]
mod kverbs_test;
mod limits;
mod logtag;
mod mem;
mod qp;
mod settings;
mod srq;
mod stag;
#[expect(unsafe_code, reason = "the FFI layer, the one module allowed it")]
mod sys;
mod timer;
mod wqe;

/// What an rsiw device's objects are: the driver data each core object carries, which
/// implements that object's verbs (the device's own verbs are in [`device`]).
impl sys::ibdev::Objects for device::Device {
    type Cq = cq::Cq;
    type Qp = qp::Qp;
    type Srq = srq::Srq;
    type Mr = mem::Mr;
    type Listener = cm::Listener;
    type Cep = cm::Cep;
    const CM_ID_ATTRS: &'static [&'static CStr] = cm::CM_ID_ATTRS;
    const CM_ID_STATES: &'static [&'static CStr] = cm::CM_ID_STATES;
}

module! {
    type: Rsiw,
    name: "rsiw",
    authors: ["The rsiw developers"],
    description: "Software iWARP RDMA provider in Rust (siw user ABI)",
    license: "GPL",
    alias: ["rdma-link-rsiw"],
    params: {
        max_ucontext: u32 {
            default: 102400,
            description: "Maximum number of user contexts (open device files) per rsiw device",
        },
        max_pd: u32 {
            default: 102400,
            description: "Maximum number of protection domains per rsiw device",
        },
        max_cq: u32 {
            default: 102400,
            description: "Maximum number of completion queues per rsiw device",
        },
        max_qp: u32 {
            default: 102400,
            description: "Maximum number of queue pairs per rsiw device",
        },
        max_srq: u32 {
            default: 102400,
            description: "Maximum number of shared receive queues per rsiw device",
        },
        mpa_rev: u32 {
            default: 2,
            description: "MPA revision to request: 0 (RDMA Consortium protocols, RFC 5044 Appendix C: version 0 DDP/RDMAP, markers and CRC), 1 (RFC 5044) or 2 (RFC 6581, enhanced IRD/ORD and RTR); the start value of each new device's sysfs setting of this name",
        },
        mpa_crc: bool {
            default: false,
            description: "Ask for MPA CRC32c on every connection (used when either side asks); the start value of each new device's sysfs setting of this name",
        },
        mpa_markers: bool {
            default: false,
            description: "Ask the peer to send MPA markers (markers are always accepted when asked for); the start value of each new device's sysfs setting of this name",
        },
        peer_to_peer: bool {
            default: false,
            description: "Request the RFC 6581 peer-to-peer model (an RTR message before the first ULP message); the start value of each new device's sysfs setting of this name",
        },
        mpa_draft_rtr: bool {
            default: false,
            description: "Use the 2007 seed draft's Rtr frame: MPA Rev 1 where S means 'Rtr frame follows'; the Initiator sends an MPA ID Rtr Frame after the Reply (overrides mpa_rev and peer_to_peer); the start value of each new device's sysfs setting of this name",
        },
        mpa_large_fpdu: bool {
            default: true,
            description: "Offer FPDUs larger than one TCP segment (MPA flag 0x08, the C siw's GSO_EXP) and send them, up to 64768 octets of ULPDU, when the peer offers them too; the start value of each new device's sysfs setting of this name",
        },
        mpa_timeout_ms: u32 {
            default: 10000,
            description: "Milliseconds to wait for the peer's MPA Request (passive side) or Reply (active side) before closing the connection (at least 100); the start value of each new device's sysfs setting of this name",
        },
        p2p_rtr: u32 {
            default: 7,
            description: "RTR messages offered (Initiator) and accepted (Responder) in the peer-to-peer model: mask of 1 = zero-length RDMA Write, 2 = zero-length RDMA Read, 4 = zero-length Send (0 means 7); the start value of each new device's sysfs setting of this name",
        },
        max_mr: u32 {
            default: 1024000,
            description: "Maximum number of memory regions per rsiw device",
        },
    },
}

/// The loaded module: the device registry, the `rsiw` link type and the netdev notifier.
///
/// Fields drop in declaration order: first no new links, then no netdev events, then all
/// remaining devices are unregistered.
struct Rsiw {
    _link: sys::net::link::LinkRegistration<device::Link>,
    _notifier: sys::net::netdev::NotifierRegistration<device::Link>,
    _registry: sys::ibdev::Registry,
    /// Waits for listeners, connection endpoints and connections that outlived their
    /// devices (their socket callbacks and timers are module code).
    _live: sys::LiveObjects,
    /// Dropped last (fields drop in order): drains the work of the devices removed above.
    _wq: sys::WorkQueue,
}

impl kernel::Module for Rsiw {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let wq = sys::WorkQueue::new()?;
        let registry = sys::ibdev::Registry::new()?;
        let notifier = sys::net::netdev::NotifierRegistration::new()?;
        let link = sys::net::link::LinkRegistration::new()?;
        pr_info!("loaded: link type 'rsiw' (rdma link add NAME type rsiw netdev DEV)\n");
        Ok(Rsiw {
            _link: link,
            _notifier: notifier,
            _registry: registry,
            _live: sys::LiveObjects,
            _wq: wq,
        })
    }
}

impl Drop for Rsiw {
    fn drop(&mut self) {
        pr_info!("unloading: removing {} device(s)\n", self._registry.count());
    }
}
