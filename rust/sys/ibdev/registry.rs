// SPDX-License-Identifier: GPL-2.0

//! The registry of rsiw's own devices, which module unload tears down.

use crate::sys::bindings;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;

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

    pub(super) fn add(raw: *mut bindings::ib_device) -> Result {
        let raw = RawDevice(NonNull::new(raw).ok_or(EINVAL)?);
        DEVICES.lock().push(raw, GFP_KERNEL)?;
        Ok(())
    }

    pub(super) fn remove(raw: *mut bindings::ib_device) {
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
        // A static is never dropped: free the vector's buffer here, or every module load
        // that created a device would leak it at unload.
        drop(core::mem::replace(&mut *DEVICES.lock(), KVec::new()));
        REGISTRY_LIVE.store(false, Ordering::Release);
    }
}
