// SPDX-License-Identifier: GPL-2.0

//! Network devices: a borrowed `struct net_device` and the netdevice notifier.

use crate::sys::bindings;
use core::marker::PhantomData;
use kernel::prelude::*;
use kernel::types::Opaque;

/// A `struct net_device` borrowed from the networking core.
///
/// # Invariants
///
/// `self.0` is a live `struct net_device`: every `&NetDev` is created from a pointer the
/// caller keeps valid (by a reference it holds, or by the core holding one) for the
/// lifetime of the borrow.
#[repr(transparent)]
pub(crate) struct NetDev(Opaque<bindings::net_device>);

/// Link-layer type of a network device (`ARPHRD_*`).
pub(crate) type LinkType = u16;

impl NetDev {
    /// Borrows the `net_device` at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` points to a live `net_device` that stays live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::net_device) -> &'a NetDev {
        // SAFETY: `NetDev` is a transparent wrapper of `net_device`; the caller guarantees
        // the pointee is live for `'a`.
        unsafe { &*ptr.cast::<NetDev>() }
    }

    /// Returns the raw pointer for C calls.
    pub(crate) fn as_ptr(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// Returns the interface index.
    pub(crate) fn ifindex(&self) -> i32 {
        // SAFETY: by the type invariant the device is live; `ifindex` is set at
        // registration and not changed while the device is registered.
        unsafe { (*self.as_ptr()).ifindex }
    }

    /// Returns the interface name (up to `IFNAMSIZ` octets, without the NUL).
    pub(crate) fn name(&self) -> &[u8] {
        // SAFETY: by the type invariant the device is live; `name` is a NUL-terminated
        // array inside it.
        let name = unsafe { &(*self.as_ptr()).name };
        let len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        // SAFETY: `name` is an array of `c_char` (`u8` in the kernel) of at least `len`
        // elements, valid for the lifetime of `self`.
        unsafe { core::slice::from_raw_parts(name.as_ptr().cast::<u8>(), len) }
    }

    /// Returns the link-layer type (`ARPHRD_*`).
    pub(crate) fn link_type(&self) -> LinkType {
        // SAFETY: by the type invariant the device is live.
        unsafe { bindings::rsiw_netdev_type(self.as_ptr()) }
    }

    /// Whether rsiw can serve this link type: Ethernet, IEEE 802, loopback, and the
    /// layer-3 devices without a link-layer header (`ARPHRD_NONE`: WireGuard, tun), the
    /// types the C siw accepts. iWARP runs over TCP, so only IP reachability matters.
    pub(crate) fn carries_iwarp(&self) -> bool {
        matches!(
            u32::from(self.link_type()),
            bindings::ARPHRD_ETHER
                | bindings::ARPHRD_IEEE802
                | bindings::ARPHRD_LOOPBACK
                | bindings::ARPHRD_NONE
        )
    }

    /// Returns the current MTU in octets.
    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: by the type invariant the device is live.
        unsafe { bindings::rsiw_netdev_mtu(self.as_ptr()) }
    }

    /// Returns the largest MTU the device supports, in octets.
    pub(crate) fn max_mtu(&self) -> u32 {
        // SAFETY: by the type invariant the device is live.
        unsafe { bindings::rsiw_netdev_max_mtu(self.as_ptr()) }
    }

    /// Returns the Ethernet (EUI-48) address, or `None` if the device has none.
    pub(crate) fn mac(&self) -> Option<[u8; 6]> {
        // SAFETY: by the type invariant the device is live.
        let len = unsafe { bindings::rsiw_netdev_addr_len(self.as_ptr()) };
        if len as usize != bindings::ETH_ALEN as usize {
            return None;
        }
        // SAFETY: by the type invariant the device is live.
        let addr = unsafe { bindings::rsiw_netdev_addr(self.as_ptr()) };
        if addr.is_null() {
            return None;
        }
        let mut mac = [0u8; 6];
        // SAFETY: `addr` points to `addr_len` (== 6) readable octets inside the device.
        mac.copy_from_slice(unsafe { core::slice::from_raw_parts(addr, 6) });
        Some(mac)
    }

    /// Returns whether the device is up and has carrier (`ib_get_curr_port_state()`).
    pub(crate) fn is_active(&self) -> bool {
        // SAFETY: by the type invariant the device is live.
        let state = unsafe { bindings::rsiw_netdev_port_state(self.as_ptr()) };
        state == bindings::ib_port_state_IB_PORT_ACTIVE as i32
    }

    /// Returns the network namespace the device lives in.
    pub(crate) fn net(&self) -> *mut bindings::net {
        // SAFETY: by the type invariant the device is live.
        unsafe { bindings::rsiw_dev_net(self.as_ptr()) }
    }
}

/// A counted reference to a network device, released on drop.
///
/// # Invariants
///
/// `ptr` is a live `net_device` on which this value holds one reference (`dev_hold`).
pub(crate) struct NetDevRef {
    ptr: core::ptr::NonNull<bindings::net_device>,
}

impl NetDevRef {
    /// Takes ownership of a reference the caller obtained (for example from
    /// `ib_device_get_netdev`); returns `None` for a null pointer.
    ///
    /// # Safety
    ///
    /// A non-null `ptr` is a live `net_device` with a reference owned by the caller, which
    /// is transferred to the returned value.
    pub(crate) unsafe fn from_owned(ptr: *mut bindings::net_device) -> Option<Self> {
        // INVARIANT: the caller transfers a reference on a live device.
        core::ptr::NonNull::new(ptr).map(|ptr| Self { ptr })
    }
}

impl core::ops::Deref for NetDevRef {
    type Target = NetDev;

    fn deref(&self) -> &NetDev {
        // SAFETY: the held reference keeps the device live while `self` exists.
        unsafe { NetDev::from_raw(self.ptr.as_ptr()) }
    }
}

impl Drop for NetDevRef {
    fn drop(&mut self) {
        // SAFETY: releases the reference owned by `self` (type invariant).
        unsafe { bindings::rsiw_dev_put(self.ptr.as_ptr()) };
    }
}

/// The events of the netdevice notifier chain (`NETDEV_*`) a device follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetdevEvent {
    /// `NETDEV_UP`, `NETDEV_DOWN` or `NETDEV_CHANGE`: the link state may have changed.
    LinkChange,
    /// `NETDEV_CHANGEADDR`: a new MAC address.
    AddressChange,
    /// `NETDEV_UNREGISTER`: the netdev is going away.
    Unregister,
}

impl NetdevEvent {
    /// The event of the notifier value `ev`, or `None` for the events devices ignore.
    fn from_raw(ev: kernel::ffi::c_ulong) -> Option<Self> {
        let ev = u32::try_from(ev).ok()?;
        match ev {
            bindings::netdev_cmd_NETDEV_UP
            | bindings::netdev_cmd_NETDEV_DOWN
            | bindings::netdev_cmd_NETDEV_CHANGE => Some(Self::LinkChange),
            bindings::netdev_cmd_NETDEV_CHANGEADDR => Some(Self::AddressChange),
            bindings::netdev_cmd_NETDEV_UNREGISTER => Some(Self::Unregister),
            _ => None,
        }
    }
}

/// Receiver of netdevice notifier events.
pub(crate) trait NetdevEvents {
    /// Called (under RTNL) for every event of interest on every network device.
    fn event(ndev: &NetDev, event: NetdevEvent);
}

/// A registered netdevice notifier; unregistered on drop.
///
/// # Invariants
///
/// `nb` is registered with `register_netdevice_notifier` and stays at a fixed address
/// (boxed) until `drop` unregisters it.
pub(crate) struct NotifierRegistration<T: NetdevEvents> {
    nb: KBox<Opaque<bindings::notifier_block>>,
    _t: PhantomData<T>,
}

// SAFETY: the registration only holds the notifier block, which the notifier chain
// accesses under its own lock; dropping it from any thread is fine.
unsafe impl<T: NetdevEvents> Send for NotifierRegistration<T> {}
// SAFETY: no `&self` method touches the notifier block.
unsafe impl<T: NetdevEvents> Sync for NotifierRegistration<T> {}

impl<T: NetdevEvents> NotifierRegistration<T> {
    /// Registers `T` on the netdevice notifier chain.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the error of `register_netdevice_notifier`.
    pub(crate) fn new() -> Result<Self> {
        let nb = KBox::new(Opaque::<bindings::notifier_block>::zeroed(), GFP_KERNEL)?;
        // SAFETY: `nb` is a valid, exclusively owned, zeroed notifier block.
        unsafe { (*nb.get()).notifier_call = Some(Self::call) };
        // SAFETY: `nb` is boxed, so its address is stable until `drop` unregisters it.
        crate::sys::to_result(unsafe { bindings::register_netdevice_notifier(nb.get()) })?;
        // INVARIANT: registered above, and boxed.
        Ok(Self {
            nb,
            _t: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called only by the netdevice notifier chain with a `netdev_notifier_info`.
    unsafe extern "C" fn call(
        _nb: *mut bindings::notifier_block,
        event: kernel::ffi::c_ulong,
        ptr: *mut kernel::ffi::c_void,
    ) -> kernel::ffi::c_int {
        // SAFETY: the netdevice notifier chain passes a `netdev_notifier_info`.
        let ndev = unsafe { bindings::rsiw_notifier_info_to_dev(ptr) };
        if let (false, Some(event)) = (ndev.is_null(), NetdevEvent::from_raw(event)) {
            // SAFETY: the notifier chain holds the device for the duration of the call.
            T::event(unsafe { NetDev::from_raw(ndev) }, event);
        }
        bindings::NOTIFY_DONE as kernel::ffi::c_int
    }
}

impl<T: NetdevEvents> Drop for NotifierRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: by the type invariant `nb` is registered.
        unsafe { bindings::unregister_netdevice_notifier(self.nb.get()) };
    }
}
