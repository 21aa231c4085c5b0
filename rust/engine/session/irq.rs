// SPDX-License-Identifier: GPL-2.0

//! The inbound Read queue (IRQ): the RDMA Read Requests the peer sent that this side has
//! not answered yet, oldest first (RFC 5040 §5.2, §6.1, §6.4).
//!
//! Read Responses go out in the order of their Requests (RFC 5040 §5.5 rule 19). The RX
//! decoder admits at most IRD Requests at a time ([`super::super::ddp_rx::DdpRx`]
//! counts them until the shell released each one's Response), so a ring of
//! [`IRQ_CAPACITY`] entries never overflows; the engine does not allocate.

use super::super::orq::MAX_ORD;
use super::super::ring::Ring;
use crate::wire::rdmap::ReadRequest;

/// Entries of the ring: the largest IRD a connection uses ([`MAX_ORD`], the device's
/// `max_qp_rd_atom`) plus the zero-length Read RTR of RFC 6581 §9.1.
pub const IRQ_CAPACITY: usize = MAX_ORD as usize + 1;

/// The ring is full (the decoder's IRD check makes this unreachable with IRD <=
/// [`MAX_ORD`] + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqFull;

/// The inbound Read queue.
#[derive(Debug, Clone)]
pub struct Irq {
    ring: Ring<ReadRequest, IRQ_CAPACITY>,
}

impl Default for Irq {
    fn default() -> Self {
        Self::new()
    }
}

impl Irq {
    /// An empty queue.
    pub const fn new() -> Self {
        Irq {
            ring: Ring::new(ReadRequest {
                sink_stag: 0,
                sink_to: 0,
                size: 0,
                src_stag: 0,
                src_to: 0,
            }),
        }
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
    /// [`IrqFull`] if [`IRQ_CAPACITY`] Requests wait already.
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
