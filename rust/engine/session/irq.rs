// SPDX-License-Identifier: GPL-2.0

//! The inbound Read queue (IRQ): the RDMA Read Requests the peer sent that this side has
//! not answered yet, oldest first (RFC 5040 §5.2, §6.1, §6.4).
//!
//! Read Responses go out in the order of their Requests (RFC 5040 §5.5 rule 19). The RX
//! decoder admits at most IRD Requests at a time ([`super::super::ddp_rx::DdpRx`]
//! counts them until the shell released each one's Response), so a ring of
//! [`IRQ_CAPACITY`] entries never overflows; the engine does not allocate.

use crate::wire::rdmap::ReadRequest;

use super::super::orq::MAX_ORD;

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
    ring: [ReadRequest; IRQ_CAPACITY],
    head: usize,
    len: usize,
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
            ring: [ReadRequest {
                sink_stag: 0,
                sink_to: 0,
                size: 0,
                src_stag: 0,
                src_to: 0,
            }; IRQ_CAPACITY],
            head: 0,
            len: 0,
        }
    }

    /// Requests waiting for their Response.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether no Request waits.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a validated Read Request.
    ///
    /// # Errors
    ///
    /// [`IrqFull`] if [`IRQ_CAPACITY`] Requests wait already.
    pub fn push(&mut self, req: ReadRequest) -> Result<(), IrqFull> {
        if self.len >= IRQ_CAPACITY {
            return Err(IrqFull);
        }
        let i = (self.head + self.len) % IRQ_CAPACITY;
        let slot = self.ring.get_mut(i).ok_or(IrqFull)?;
        *slot = req;
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the oldest Request.
    pub fn pop(&mut self) -> Option<ReadRequest> {
        if self.len == 0 {
            return None;
        }
        let r = *self.ring.get(self.head)?;
        self.head = (self.head + 1) % IRQ_CAPACITY;
        self.len -= 1;
        Some(r)
    }

    /// Drops every waiting Request (the connection ended).
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}
