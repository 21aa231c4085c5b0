// SPDX-License-Identifier: GPL-2.0

//! `rdma link add NAME type rsiw netdev DEV`: the RDMA netlink link type.

use crate::sys::bindings;
use crate::sys::net::netdev::NetDev;
use core::marker::PhantomData;
use kernel::prelude::*;
use kernel::types::Opaque;

/// Handler of `rdma link add` for one link type.
pub(crate) trait LinkHandler {
    /// The link type users name in `rdma link add ... type TYPE` (also the module alias
    /// `rdma-link-TYPE`).
    const TYPE: &'static CStr;

    /// Creates and registers a device called `name` on `ndev`.
    ///
    /// # Errors
    ///
    /// A negative errno, returned to the `rdma` tool.
    fn newlink(name: &CStr, ndev: &NetDev) -> Result;
}

/// A registered `rdma_link_ops`; unregistered on drop.
///
/// # Invariants
///
/// `ops` is registered with `rdma_link_register` and stays at a fixed address (boxed)
/// until `drop` unregisters it. After `rdma_link_unregister` returns no `newlink` call is
/// running (the core holds its link-ops lock across `newlink`).
pub(crate) struct LinkRegistration<T: LinkHandler> {
    ops: KBox<Opaque<bindings::rdma_link_ops>>,
    _t: PhantomData<T>,
}

// SAFETY: the registration only holds the ops, which the RDMA core reads under its lock.
unsafe impl<T: LinkHandler> Send for LinkRegistration<T> {}
// SAFETY: no `&self` method touches the ops.
unsafe impl<T: LinkHandler> Sync for LinkRegistration<T> {}

impl<T: LinkHandler> LinkRegistration<T> {
    /// Registers the link type `T::TYPE`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Self> {
        let ops = KBox::new(Opaque::<bindings::rdma_link_ops>::zeroed(), GFP_KERNEL)?;
        // SAFETY: `ops` is a valid, exclusively owned, zeroed `rdma_link_ops`; `T::TYPE` is
        // a `'static` NUL-terminated string.
        unsafe {
            (*ops.get()).type_ = T::TYPE.as_char_ptr();
            (*ops.get()).newlink = Some(Self::newlink);
            bindings::rdma_link_register(ops.get());
        }
        // INVARIANT: registered above, and boxed.
        Ok(Self {
            ops,
            _t: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called only by the RDMA core as `rdma_link_ops::newlink`, with a NUL-terminated
    /// name and a live netdev.
    unsafe extern "C" fn newlink(
        name: *const kernel::ffi::c_char,
        ndev: *mut bindings::net_device,
    ) -> kernel::ffi::c_int {
        // SAFETY: the RDMA core passes the NUL-terminated device name from the netlink
        // request, valid for the duration of the call.
        let name = unsafe { CStr::from_char_ptr(name) };
        // SAFETY: the core holds a reference on `ndev` for the duration of the call.
        let ndev = unsafe { NetDev::from_raw(ndev) };
        match T::newlink(name, ndev) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }
}

impl<T: LinkHandler> Drop for LinkRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: by the type invariant `ops` is registered.
        unsafe { bindings::rdma_link_unregister(self.ops.get()) };
    }
}
