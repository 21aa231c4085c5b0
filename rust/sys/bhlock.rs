// SPDX-License-Identifier: GPL-2.0

//! A spinlock held with softirqs off (`spin_lock_bh()`), for state that a socket's receive
//! path shares with process context: TCP runs the data-ready callback in softirq, or in the
//! process context of whoever releases the socket lock, and nothing in hard interrupt
//! context takes such a lock. Unlike an interrupt-disabling lock it leaves interrupts on
//! while payload is copied under it.

use crate::sys::bindings;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use kernel::prelude::*;
use kernel::sync::{SpinLock, SpinLockGuard};

/// Softirqs are off on this CPU while a `BhOff` lives (and so is preemption): a softirq
/// that waits for what its holder does cannot run under it on this CPU.
///
/// # Invariants
///
/// Created by one `local_bh_disable()`, which its drop balances on the same CPU (the raw
/// pointer marker keeps it from moving to another thread).
pub(crate) struct BhOff(PhantomData<*mut ()>);

impl BhOff {
    /// Disables softirqs on this CPU until the value is dropped. Process or softirq
    /// context only (rsiw runs nothing in hard interrupt context); nothing may sleep
    /// while it lives.
    pub(crate) fn new() -> Self {
        // SAFETY: any context but hard interrupt context may disable softirqs; rsiw's
        // code runs in process or softirq context only.
        unsafe { bindings::rsiw_local_bh_disable() };
        // INVARIANT: one disable, balanced in `drop`.
        Self(PhantomData)
    }
}

impl Drop for BhOff {
    fn drop(&mut self) {
        // SAFETY: balances the disable of `new` on the same CPU (type invariant).
        unsafe { bindings::rsiw_local_bh_enable() };
    }
}

/// A [`SpinLock`] whose guard keeps softirqs off on the CPU holding it.
#[pin_data]
pub(crate) struct SpinLockBh<T> {
    #[pin]
    inner: SpinLock<T>,
}

impl<T> SpinLockBh<T> {
    /// The lock around `inner`, an initialiser from `kernel::new_spinlock!` (use
    /// [`new_spinlock_bh!`], which gives each call site its lock class).
    pub(crate) fn new_with(inner: impl PinInit<SpinLock<T>>) -> impl PinInit<Self> {
        pin_init!(Self { inner <- inner })
    }

    /// Disables softirqs on this CPU, then takes the lock; the guard undoes both, in the
    /// reverse order. Must not be called in hard interrupt context or with interrupts off.
    pub(crate) fn lock(&self) -> SpinLockBhGuard<'_, T> {
        let bh = BhOff::new();
        SpinLockBhGuard {
            guard: self.inner.lock(),
            _bh: bh,
        }
    }
}

/// The guard of a [`SpinLockBh`]. Its fields drop in order: the lock is released first,
/// then softirqs are enabled again (which may run the pending ones).
pub(crate) struct SpinLockBhGuard<'a, T> {
    guard: SpinLockGuard<'a, T>,
    _bh: BhOff,
}

impl<T> Deref for SpinLockBhGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T: Unpin> DerefMut for SpinLockBhGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Creates a [`SpinLockBh`] initialiser with the given value and a lock class of its own
/// (as `kernel::new_spinlock!` does).
macro_rules! new_spinlock_bh {
    ($inner:expr $(, $name:literal)? $(,)?) => {
        $crate::sys::bhlock::SpinLockBh::new_with(kernel::new_spinlock!($inner $(, $name)?))
    };
}
pub(crate) use new_spinlock_bh;
