// SPDX-License-Identifier: GPL-2.0

//! Tables from small integer IDs (QP numbers, STag indices) to objects: an `xarray` with
//! cyclic ID allocation whose lock disables interrupts, so lookups may come from softirq
//! context (the RX path) while process context allocates and removes.
//!
//! The kernel crate's `XArray` stores at caller-chosen indices only (no `xa_alloc_cyclic`)
//! and takes the plain `xa_lock`; this thin wrapper adds what rsiw needs.

use super::bindings;
use core::marker::PhantomData;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::Opaque;

/// An ID-allocating `xarray` of untyped pointers.
///
/// # Invariants
///
/// `xa` is initialised with `XA_FLAGS_ALLOC | XA_FLAGS_LOCK_IRQ`. `next` is the cyclic
/// allocation cursor, only accessed under the xarray's lock (by `xa_alloc_cyclic_irq`).
#[pin_data(PinnedDrop)]
pub(crate) struct RawIdTable {
    #[pin]
    xa: Opaque<bindings::xarray>,
    next: Opaque<u32>,
}

// SAFETY: the xarray serialises all access with its lock.
unsafe impl Send for RawIdTable {}
// SAFETY: as above.
unsafe impl Sync for RawIdTable {}

impl RawIdTable {
    /// An empty table whose allocation cursor starts at `first`.
    pub(crate) fn new(first: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `xa` is valid for writes and pinned.
            xa <- Opaque::ffi_init(|xa| unsafe { bindings::rsiw_xa_init_alloc(xa) }),
            next: Opaque::new(first),
        })
    }

    /// Reserves a free ID in `min..=max`, cyclically after the last one handed out, and
    /// returns it. The slot holds no object (lookups see nothing) until
    /// [`RawIdTable::publish`].
    ///
    /// # Errors
    ///
    /// `ENOSPC` if every ID in the range is taken; `ENOMEM`.
    pub(crate) fn reserve(&self, min: u32, max: u32) -> Result<u32> {
        let mut id = 0u32;
        // SAFETY: `xa` is initialised (type invariant); `next` is only accessed under the
        // xarray lock, which `xa_alloc_cyclic_irq` takes.
        let ret = unsafe {
            bindings::rsiw_xa_reserve_cyclic(self.xa.get(), &mut id, min, max, self.next.get())
        };
        match ret {
            0 => Ok(id),
            e if e == EBUSY.to_errno() => Err(ENOSPC),
            e => Err(Error::from_errno(e)),
        }
    }

    /// Makes `ptr` the object of the reserved `id`.
    ///
    /// # Errors
    ///
    /// The error of `xa_store` (`ENOMEM`; not expected for a reserved slot).
    ///
    /// # Safety
    ///
    /// `ptr` is valid for what the table's users do with it until [`RawIdTable::remove`]
    /// returns it.
    pub(crate) unsafe fn publish(&self, id: u32, ptr: *mut kernel::ffi::c_void) -> Result {
        // SAFETY: `xa` is initialised; storing into a reserved slot does not allocate.
        super::to_result(unsafe { bindings::rsiw_xa_store(self.xa.get(), id as usize, ptr) })
    }

    /// Frees `id` and returns the object stored there (null if only reserved). After this
    /// returns no [`RawIdTable::with`] call sees the object any more.
    pub(crate) fn remove(&self, id: u32) -> *mut kernel::ffi::c_void {
        // SAFETY: `xa` is initialised.
        unsafe { bindings::rsiw_xa_erase(self.xa.get(), id as usize) }
    }

    /// Runs `f` on the object of `id`, if any, under the table lock (interrupts disabled):
    /// `f` must not sleep, and the object cannot be removed while it runs.
    pub(crate) fn with<R>(
        &self,
        id: u32,
        f: impl FnOnce(*mut kernel::ffi::c_void) -> R,
    ) -> Option<R> {
        // SAFETY: `xa` is initialised.
        let flags = unsafe { bindings::rsiw_xa_lock(self.xa.get()) };
        // SAFETY: `xa` is initialised and locked; `xa_load` returns null for free and
        // reserved slots.
        let p = unsafe { bindings::xa_load(self.xa.get(), id as usize) };
        let r = (!p.is_null()).then(|| f(p));
        // SAFETY: balances `rsiw_xa_lock`.
        unsafe { bindings::rsiw_xa_unlock(self.xa.get(), flags) };
        r
    }

    /// Returns whether no ID is allocated.
    pub(crate) fn is_empty(&self) -> bool {
        // SAFETY: `xa` is initialised.
        unsafe { bindings::rsiw_xa_empty(self.xa.get()) }
    }
}

#[pinned_drop]
impl PinnedDrop for RawIdTable {
    fn drop(self: Pin<&mut Self>) {
        if !self.is_empty() && super::ratelimit() {
            pr_warn!("ID table destroyed with entries left\n");
        }
        // SAFETY: `xa` is initialised and nobody uses it any more.
        unsafe { bindings::xa_destroy(self.xa.get()) };
    }
}

/// An ID table that owns a reference (`Arc`) to each object.
#[pin_data]
pub(crate) struct ArcTable<T: Send + Sync> {
    #[pin]
    raw: RawIdTable,
    _t: PhantomData<Arc<T>>,
}

impl<T: Send + Sync> ArcTable<T> {
    /// An empty table whose allocation cursor starts at `first`.
    pub(crate) fn new(first: u32) -> impl PinInit<Self> {
        pin_init!(Self { raw <- RawIdTable::new(first), _t: PhantomData })
    }

    /// See [`RawIdTable::reserve`].
    pub(crate) fn reserve(&self, min: u32, max: u32) -> Result<u32> {
        self.raw.reserve(min, max)
    }

    /// Stores `obj` at the reserved `id`.
    ///
    /// # Errors
    ///
    /// As [`RawIdTable::publish`]; the reference is dropped.
    pub(crate) fn publish(&self, id: u32, obj: Arc<T>) -> Result {
        let p = Arc::into_raw(obj).cast_mut();
        // SAFETY: the table owns the reference until `remove`/`release` turns it back
        // into an `Arc`.
        let r = unsafe { self.raw.publish(id, p.cast()) };
        if r.is_err() {
            // SAFETY: not stored, so the reference from `into_raw` is still ours.
            drop(unsafe { Arc::from_raw(p) });
        }
        r
    }

    /// Frees `id`; returns the reference the table held, if the slot was published.
    pub(crate) fn remove(&self, id: u32) -> Option<Arc<T>> {
        let p = self.raw.remove(id);
        // SAFETY: published pointers come from `Arc::into_raw` (`publish`); the erase
        // transferred the table's reference to us.
        (!p.is_null()).then(|| unsafe { Arc::from_raw(p.cast::<T>()) })
    }

    /// Returns a new reference to the object at `id`.
    pub(crate) fn get(&self, id: u32) -> Option<Arc<T>> {
        self.raw.with(id, |p| {
            // SAFETY: `p` came from `Arc::into_raw` and the table's reference cannot go
            // away while the lock is held.
            let b = unsafe { ArcBorrow::<T>::from_raw(p.cast::<T>()) };
            Arc::from(b)
        })
    }
}
