// SPDX-License-Identifier: GPL-2.0

//! A first-in first-out ring of a fixed number of `Copy` entries: the storage of the
//! engine's request queues (the ORQ, [`super::orq`], and the IRQ,
//! [`super::session::irq`]), which must not allocate.

/// A FIFO of at most `N` entries of `T`, oldest first.
///
/// # Invariants
///
/// `len <= N`, and `head < N` whenever `N > 0`; the entries are `slots[(head + i) % N]`
/// for `i < len`.
#[derive(Debug, Clone)]
pub struct Ring<T: Copy, const N: usize> {
    slots: [T; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Ring<T, N> {
    /// An empty ring whose unused slots hold `fill`.
    pub const fn new(fill: T) -> Self {
        Ring {
            slots: [fill; N],
            head: 0,
            len: 0,
        }
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
    /// `Err(v)` if `N` entries are queued already.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        if self.len >= N {
            return Err(v);
        }
        match self.slots.get_mut((self.head + self.len) % N) {
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
        self.slots.get(self.head)
    }

    /// The oldest entry, to update in place.
    pub fn front_mut(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        self.slots.get_mut(self.head)
    }

    /// Removes and returns the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.head = (self.head + 1) % N;
        self.len -= 1;
        Some(v)
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}
