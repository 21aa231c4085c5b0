// SPDX-License-Identifier: GPL-2.0

//! The inbound Read queue (IRQ): the RDMA Read Requests the peer sent that this side has
//! not answered yet, oldest first (RFC 5040 §5.2, §6.1, §6.4).
//!
//! Read Responses go out in the order of their Requests (RFC 5040 §5.5 rule 19). The RX
//! decoder admits at most IRD Requests at a time ([`super::super::ddp_rx::DdpRx`]
//! counts them until the shell released each one's Response), and the session runs with
//! an IRD below the ring's capacity, so the ring never overflows. Its slots come from the
//! shell ([`super::super::ring::Store`]); the engine does not allocate.

use super::super::orq::MAX_ORD;
use super::super::ring::{Ring, Slots};
use crate::wire::rdmap::ReadRequest;

/// Slots a connection of the largest IRD needs ([`MAX_ORD`], the device's
/// `max_qp_rd_atom`), plus one for the zero-length Read RTR of RFC 6581 §9.1.
pub const IRQ_CAPACITY: usize = MAX_ORD as usize + 1;

/// The ring is full (the decoder's IRD check makes this unreachable: the session's IRD,
/// the Read RTR's slot included, never exceeds the ring's capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqFull;

/// The inbound Read queue, in the slots of `S` (by default [`IRQ_CAPACITY`] of them, in
/// place).
#[derive(Debug, Clone)]
pub struct Irq<S: Slots<ReadRequest> = [ReadRequest; IRQ_CAPACITY]> {
    ring: Ring<ReadRequest, S>,
}

impl Default for Irq {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}

/// An unused slot.
pub const EMPTY_SLOT: ReadRequest = ReadRequest {
    sink_stag: 0,
    sink_to: 0,
    size: 0,
    src_stag: 0,
    src_to: 0,
};

impl Irq {
    /// An empty queue of [`IRQ_CAPACITY`] slots (inline: see [`super::super::orq::Orq::new`]).
    #[inline]
    pub const fn new() -> Self {
        Self::with_slots([EMPTY_SLOT; IRQ_CAPACITY])
    }
}

impl<S: Slots<ReadRequest>> Irq<S> {
    /// An empty queue in `slots`, which hold at most that many Requests.
    pub const fn with_slots(slots: S) -> Self {
        Irq {
            ring: Ring::with_slots(slots),
        }
    }

    /// The most Requests the queue holds.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Requests waiting for their Response.
    pub const fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether no Request waits.
    pub const fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Appends a validated Read Request.
    ///
    /// # Errors
    ///
    /// [`IrqFull`] if every slot holds a waiting Request.
    pub fn push(&mut self, req: ReadRequest) -> Result<(), IrqFull> {
        self.ring.push(req).map_err(|_| IrqFull)
    }

    /// Removes and returns the oldest Request.
    pub fn pop(&mut self) -> Option<ReadRequest> {
        self.ring.pop()
    }

    /// Drops every waiting Request (the connection ended).
    pub fn clear(&mut self) {
        self.ring.clear();
    }
}
