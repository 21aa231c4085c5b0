// SPDX-License-Identifier: GPL-2.0

//! A first-in first-out ring of `Copy` entries over storage the shell provides: the
//! storage of the engine's request queues (the ORQ, [`super::orq`], and the IRQ,
//! [`super::session::irq`]). The engine does not allocate; a shell sizes each ring to the
//! depth a connection negotiated ([`Store`]).

use super::orq::{OrqEntry, ORQ_CAPACITY};
use super::session::irq::IRQ_CAPACITY;
use crate::wire::rdmap::ReadRequest;
use core::marker::PhantomData;

/// Storage of a [`Ring`]: a slice of slots whose length is the ring's capacity.
pub trait Slots<T>: AsRef<[T]> + AsMut<[T]> {}

impl<T, S: AsRef<[T]> + AsMut<[T]>> Slots<T> for S {}

/// The storage of one connection's request queues, chosen by the shell: fixed arrays of
/// the largest depth ([`Fixed`]), or slices allocated for the depths a connection
/// negotiated.
pub trait Store {
    /// Slots of the ORQ ([`super::orq::Orq`]); their number is the ORQ's capacity.
    type Orq: Slots<OrqEntry> + core::fmt::Debug;
    /// Slots of the IRQ ([`super::session::irq::Irq`]); their number is the IRQ's
    /// capacity.
    type Irq: Slots<ReadRequest> + core::fmt::Debug;
}

/// Arrays of the largest depths, [`ORQ_CAPACITY`] and [`IRQ_CAPACITY`] entries: storage
/// without an allocation, for hosts.
#[derive(Debug, Clone, Copy)]
pub struct Fixed;

impl Store for Fixed {
    type Orq = [OrqEntry; ORQ_CAPACITY];
    type Irq = [ReadRequest; IRQ_CAPACITY];
}

/// A FIFO of entries of `T` in the slots of `S`, oldest first.
///
/// # Invariants
///
/// With `n` the number of slots: `len <= n`, and `head < n` whenever `n > 0`; the
/// entries are `slots[(head + i) % n]` for `i < len`.
#[derive(Debug, Clone)]
pub struct Ring<T: Copy, S: Slots<T>> {
    slots: S,
    head: usize,
    len: usize,
    _entries: PhantomData<T>,
}

impl<T: Copy, const N: usize> Ring<T, [T; N]> {
    /// An empty ring of `N` slots, which hold `fill` while unused.
    pub const fn new(fill: T) -> Self {
        Self::with_slots([fill; N])
    }
}

impl<T: Copy, S: Slots<T>> Ring<T, S> {
    /// An empty ring over `slots` (their contents are ignored).
    pub const fn with_slots(slots: S) -> Self {
        Ring {
            slots,
            head: 0,
            len: 0,
            _entries: PhantomData,
        }
    }

    /// The number of slots: the most entries the ring holds.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().len()
    }

    /// The number of entries.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the ring holds no entry.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `v` as the newest entry.
    ///
    /// # Errors
    ///
    /// `Err(v)` if every slot holds an entry already.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        let n = self.capacity();
        if self.len >= n {
            return Err(v);
        }
        match self.slots.as_mut().get_mut((self.head + self.len) % n) {
            Some(slot) => {
                *slot = v;
                self.len += 1;
                Ok(())
            }
            None => Err(v),
        }
    }

    /// The oldest entry.
    pub fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.slots.as_ref().get(self.head)
    }

    /// The oldest entry, to update in place.
    pub fn front_mut(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        self.slots.as_mut().get_mut(self.head)
    }

    /// Removes and returns the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        let v = *self.front()?;
        // `front` found an entry, so there is at least one slot.
        self.head = (self.head + 1) % self.capacity();
        self.len -= 1;
        Some(v)
    }

    /// The newest entry.
    pub fn back(&self) -> Option<&T> {
        let n = self.capacity();
        if self.len == 0 || n == 0 {
            return None;
        }
        self.slots.as_ref().get((self.head + self.len - 1) % n)
    }

    /// Removes and returns the newest entry (the one [`Ring::push`] added last).
    pub fn pop_back(&mut self) -> Option<T> {
        let v = *self.back()?;
        self.len -= 1;
        Some(v)
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}
