// SPDX-License-Identifier: GPL-2.0

//! The outbound Read queue (ORQ): the RDMA Reads this side sent whose Read Responses have
//! not all arrived, oldest first, each with the Data Sink it named and how much of it the
//! peer has filled (RFC 5040 §5.2, §6.4, §7.2).
//!
//! A Read Response may write only into the sink of the oldest outstanding Read, in order:
//! RFC 5040 §5.5 rule 19 makes Read Responses arrive in the order of their Requests, and
//! §5.2 says the Data Sink STag and TO of the Response are those of the Request. The ORQ
//! is what lets the receiver hold the peer to that before a single octet is placed
//! ([`Orq::check_segment`]); without it, a Read Response is a remote write into any
//! locally writable buffer.
//!
//! The queue is a ring over slots the shell provides ([`super::ring::Store`]): the engine
//! does not allocate. Its capacity is the number of slots, at most [`ORQ_CAPACITY`] as
//! a connection uses it.

use super::ring::{Ring, Slots};
use crate::wire::ddp::{DdpError, TaggedError};
use crate::wire::rdmap::{OperationError, RdmapError};
use crate::wire::terminate::TermCause;

/// The largest outbound Read depth (ORD) the engine tracks (RDMA Read Requests in flight
/// per connection). Shells advertise no larger ORD.
pub const MAX_ORD: u32 = 128;

/// [`MAX_ORD`] plus one slot for the zero-length Read RTR of RFC 6581 §5, which is
/// outstanding before any ULP Read.
pub const ORQ_CAPACITY: usize = MAX_ORD as usize + 1;

/// The Data Sink an outbound RDMA Read Request named (RFC 5040 §4.4), in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadSink {
    /// Data Sink STag.
    pub stag: u32,
    /// Data Sink Tagged Offset of the first octet (octets).
    pub to: u64,
    /// RDMA Read Message Size (octets).
    pub len: u32,
}

/// One slot of the ORQ: an outstanding Read's sink and the octets of its Response
/// accepted so far. Shells allocate slots ([`OrqEntry::EMPTY`]) and see no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrqEntry {
    sink: ReadSink,
    got: u32,
}

impl OrqEntry {
    /// An unused slot.
    pub const EMPTY: Self = OrqEntry {
        sink: ReadSink {
            stag: 0,
            to: 0,
            len: 0,
        },
        got: 0,
    };
}

/// Why [`Orq::push`] refused a Read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// As many Reads are outstanding as the queue has slots.
    Full,
    /// `to + len` of the sink overflows 64 bits.
    Wraps,
}

/// A Read whose Response completed ([`Orq::complete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDone {
    /// The sink the Read named.
    pub sink: ReadSink,
    /// Octets the Response placed into it (equal to `sink.len`: a short Response is an
    /// error, [`Orq::check_segment`]).
    pub len: u32,
}

/// The outbound Read queue of one connection (see the module documentation), in the
/// slots of `S` (by default [`ORQ_CAPACITY`] of them, in place).
#[derive(Debug, Clone)]
pub struct Orq<S: Slots<OrqEntry> = [OrqEntry; ORQ_CAPACITY]> {
    ring: Ring<OrqEntry, S>,
}

impl Default for Orq {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}

impl Orq {
    /// An empty queue of [`ORQ_CAPACITY`] slots. (Inline, like every constructor of the
    /// in-place storage: a kernel build, which allocates its queues, then emits no code
    /// for it, whose frame would hold the whole queue.)
    #[inline]
    pub const fn new() -> Self {
        Self::with_slots([OrqEntry::EMPTY; ORQ_CAPACITY])
    }
}

impl<S: Slots<OrqEntry>> Orq<S> {
    /// An empty queue in `slots`, which hold at most that many Reads.
    pub const fn with_slots(slots: S) -> Self {
        Orq {
            ring: Ring::with_slots(slots),
        }
    }

    /// The most Reads the queue holds.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Number of outstanding Reads.
    pub const fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether no Read is outstanding.
    pub const fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Enters a Read whose Request names `sink`. Call it before the Request can reach the
    /// peer, so that its Response always finds the entry.
    ///
    /// # Errors
    ///
    /// [`PushError::Full`] with every slot taken; [`PushError::Wraps`]
    /// if `sink.to + sink.len` overflows 64 bits. Nothing is entered.
    pub fn push(&mut self, sink: ReadSink) -> Result<(), PushError> {
        if sink.to.checked_add(u64::from(sink.len)).is_none() {
            return Err(PushError::Wraps);
        }
        self.ring
            .push(OrqEntry { sink, got: 0 })
            .map_err(|_| PushError::Full)
    }

    fn front(&self) -> Option<&OrqEntry> {
        self.ring.front()
    }

    /// The sink of the oldest outstanding Read and the octets its Response filled so far.
    pub fn oldest(&self) -> Option<(ReadSink, u32)> {
        self.front().map(|e| (e.sink, e.got))
    }

    /// Checks one Read Response segment carrying `len` payload octets for sink STag `stag`
    /// at tagged offset `to`, `last` if its L bit is set, against the oldest outstanding
    /// Read, before anything of it is placed (RFC 5040 §5.2, §7.2; RFC 5041 §7.1):
    ///
    /// - no Read outstanding: RDMAP Remote Operation Error, Unexpected OpCode (0/2/0x06);
    /// - a segment with payload whose STag is not the sink STag: DDP Tagged Buffer Error,
    ///   Invalid STag (1/1/0x00);
    /// - a segment with payload whose TO is not the next octet of the sink, or that
    ///   carries more octets than the Read has left: Base or Bounds (1/1/0x01);
    /// - a last segment that leaves the Read short: Base or Bounds (1/1/0x01).
    ///
    /// A zero-length segment names no buffer, so its STag and TO are not looked at (RFC
    /// 5041 §5.2); it passes unless it is a last segment ending a Read short. Accepting a
    /// segment changes nothing: call [`Orq::advance`] once it has been delivered.
    ///
    /// # Errors
    ///
    /// The TERMINATE cause, as listed above.
    pub fn check_segment(&self, stag: u32, to: u64, len: u32, last: bool) -> Result<(), TermCause> {
        let e = self
            .front()
            .ok_or(TermCause::rdmap(RdmapError::RemoteOperation(
                OperationError::UnexpectedOpcode,
            )))?;
        let bounds = TermCause::ddp(DdpError::Tagged(TaggedError::BaseBounds));
        let left = e.sink.len.saturating_sub(e.got);
        if len > 0 {
            if stag != e.sink.stag {
                return Err(TermCause::ddp(DdpError::Tagged(TaggedError::InvalidStag)));
            }
            if Some(to) != e.sink.to.checked_add(u64::from(e.got)) || len > left {
                return Err(bounds);
            }
        }
        if last && len != left {
            return Err(bounds);
        }
        Ok(())
    }

    /// Records `len` more octets of the oldest Read's Response as delivered (a segment
    /// [`Orq::check_segment`] accepted).
    pub fn advance(&mut self, len: u32) {
        if let Some(e) = self.ring.front_mut() {
            e.got = e.got.saturating_add(len).min(e.sink.len);
        }
    }

    /// Removes the oldest Read, whose Response is complete, and returns it.
    pub fn complete(&mut self) -> Option<ReadDone> {
        let e = self.ring.pop()?;
        Some(ReadDone {
            sink: e.sink,
            len: e.got,
        })
    }

    /// Takes back the newest Read if its sink is `sink` and no octet of its Response was
    /// accepted: the shell entered it ([`Orq::push`]) and then found it could not send its
    /// Request (the work request was withdrawn before it started). Returns whether it
    /// was removed; otherwise nothing changes.
    pub fn withdraw(&mut self, sink: ReadSink) -> bool {
        match self.ring.back() {
            Some(e) if e.sink == sink && e.got == 0 => self.ring.pop_back().is_some(),
            _ => false,
        }
    }

    /// Forgets every outstanding Read (the stream ended).
    pub fn clear(&mut self) {
        self.ring.clear();
    }
}
