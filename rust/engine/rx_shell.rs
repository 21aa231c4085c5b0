// SPDX-License-Identifier: GPL-2.0

//! What the RX engine ([`super::ddp_rx`]) asks of the shell and tells it: the
//! [`MemoryLookup`] questions it asks before placing (STag validity, bounds and rights of
//! tagged buffers; posted untagged buffers; remote invalidation), the refusals the shell may
//! answer with and the TERMINATE cause each maps to (RFC 5041 §7.2, RFC 5040 §4.8 Figure
//! 9), and the completions and requests it delivers through [`RxEvents`].
//!
//! The engine decides whether to place; the shell answers questions and copies octets.

use crate::wire::ddp::{DdpError, TaggedError, UntaggedError};
use crate::wire::rdmap::{
    AtomicRequest, AtomicResponse, ImmediateData, Opcode, ProtectionError, RdmapError, ReadRequest,
};
use crate::wire::terminate::{TermCause, Terminate};

/// The access right a tagged operation needs on the STag it names (RFC 5040 §5, RFC 5042
/// §5; RFC 7306 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Remote write: the Data Sink buffer of an incoming RDMA Write.
    RemoteWrite,
    /// Local write: the Data Sink buffer of an RDMA Read Response, i.e. the sink STag this
    /// side named in its own Read Request.
    LocalWrite,
    /// Remote read: the Data Source buffer of an incoming RDMA Read Request.
    RemoteRead,
    /// Remote atomic: the buffer of an incoming Atomic Request (RFC 7306).
    RemoteAtomic,
}

/// Why the shell refused a tagged access ([`MemoryLookup::check_tagged`]).
///
/// The engine maps it to the TERMINATE cause of the layer that reports it:
/// [`TaggedCheck::ddp_cause`] for placement into a tagged buffer (RDMA Write, Read
/// Response: RFC 5041 §7.1 makes the DDP layer validate STag, bounds and wrap, and RFC
/// 5040 §7.2 item 1 leaves "all DDP Segment fields" to it), [`TaggedCheck::rdmap_cause`]
/// for the Data Source of a Read Request and the target of an Atomic Request (RFC 5040 §7.2
/// items 4a-4e, RFC 7306 §8.2: RDMAP validates them, Remote Protection Errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaggedCheck {
    /// The STag names no valid (registered, not invalidated) buffer.
    InvalidStag,
    /// The STag is valid but not associated with this stream (other PD or QP).
    NotAssociated,
    /// `[TO, TO + len)` is not inside the buffer.
    BaseBounds,
    /// The buffer does not grant the requested [`Access`].
    AccessRights,
}

impl TaggedCheck {
    /// The DDP Tagged Buffer Error (Layer 1, Error Type 1, RFC 5041 §7.2) for a refused
    /// placement: Invalid STag 0x00, Base or bounds 0x01, STag not associated 0x02.
    /// [`TaggedCheck::AccessRights`] maps to Invalid STag 0x00: DDP has no access-rights
    /// code, and an STag whose buffer does not allow Placement fails RFC 5041 §7.1 tagged
    /// check 2, whose only code is 0x00 (Linux siw does the same).
    pub const fn ddp_cause(self) -> TermCause {
        let e = match self {
            TaggedCheck::InvalidStag | TaggedCheck::AccessRights => TaggedError::InvalidStag,
            TaggedCheck::NotAssociated => TaggedError::StagNotAssociated,
            TaggedCheck::BaseBounds => TaggedError::BaseBounds,
        };
        TermCause::ddp(DdpError::Tagged(e))
    }

    /// The RDMAP Remote Protection Error (Layer 0, Error Type 1, RFC 5040 §4.8 Figure 9) for
    /// a refused Data Source or atomic target: Invalid STag 0x00, Base or bounds 0x01,
    /// Access rights 0x02, STag not associated 0x03.
    pub const fn rdmap_cause(self) -> TermCause {
        let e = match self {
            TaggedCheck::InvalidStag => ProtectionError::InvalidStag,
            TaggedCheck::NotAssociated => ProtectionError::StagNotAssociated,
            TaggedCheck::BaseBounds => ProtectionError::BaseBounds,
            TaggedCheck::AccessRights => ProtectionError::AccessRights,
        };
        TermCause::rdmap(RdmapError::RemoteProtection(e))
    }
}

/// Why the shell refused an untagged placement ([`MemoryLookup::check_untagged`]); each is
/// a DDP Untagged Buffer Error (Layer 1, Error Type 2, RFC 5041 §7.1 checks 2-4, §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UntaggedCheck {
    /// No buffer posted for this QN and MSN (0x02).
    NoBuffer,
    /// MO outside the posted buffer (0x04).
    InvalidMo,
    /// MO plus the segment's payload length exceeds the posted buffer (0x05).
    TooLong,
}

impl UntaggedCheck {
    /// The TERMINATE cause: DDP 1/2/0x02, 0x04 or 0x05.
    pub const fn cause(self) -> TermCause {
        let e = match self {
            UntaggedCheck::NoBuffer => UntaggedError::NoBuffer,
            UntaggedCheck::InvalidMo => UntaggedError::InvalidMo,
            UntaggedCheck::TooLong => UntaggedError::TooLong,
        };
        TermCause::ddp(DdpError::Untagged(e))
    }
}

/// Why the shell refused the Invalidate STag of a Send with Invalidate
/// ([`MemoryLookup::check_invalidate`]); RDMAP Remote Protection Errors (RFC 5040 §7.2 items
/// 4-5, §4.8 Figure 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidateCheck {
    /// The STag is not valid (0/1/0x00).
    InvalidStag,
    /// The STag is not associated with this stream (0/1/0x03).
    NotAssociated,
    /// The STag may not be invalidated remotely, e.g. a memory window bound elsewhere or an
    /// MR not registered for remote invalidation (0/1/0x09).
    CannotInvalidate,
}

impl InvalidateCheck {
    /// The TERMINATE cause: RDMAP 0/1/0x00, 0x03 or 0x09.
    pub const fn cause(self) -> TermCause {
        let e = match self {
            InvalidateCheck::InvalidStag => ProtectionError::InvalidStag,
            InvalidateCheck::NotAssociated => ProtectionError::StagNotAssociated,
            InvalidateCheck::CannotInvalidate => ProtectionError::CannotInvalidate,
        };
        TermCause::rdmap(RdmapError::RemoteProtection(e))
    }
}

/// The shell's memory and receive queues, as the RX engine asks about them. The engine
/// decides whether to place; the shell answers questions and, later, copies.
pub trait MemoryLookup {
    /// Whether `len` octets (`len > 0`) at tagged offset `to` of `stag` may be accessed with
    /// `access`: the STag is valid, associated with this stream (PD/QP), grants `access`,
    /// and `[to, to + len)` lies inside its buffer. The engine has already checked that
    /// `to + len` does not wrap 64 bits.
    ///
    /// # Errors
    ///
    /// [`TaggedCheck`] naming the first check that failed.
    fn check_tagged(
        &mut self,
        stag: u32,
        to: u64,
        len: u32,
        access: Access,
    ) -> Result<(), TaggedCheck>;

    /// Whether the next `len` octets (possibly 0) of the message `msn` on queue `qn` may be
    /// placed at message offset `mo` (octets): a buffer is posted for it and `[mo, mo +
    /// len)` fits. Asked for every segment on QN 0 (Send variants and Immediate Data, which
    /// consumes a buffer without placing into it). The engine has already checked that
    /// `msn` is the expected MSN, `mo` the expected MO, and that `mo + len` fits 32 bits.
    ///
    /// # Errors
    ///
    /// [`UntaggedCheck`].
    fn check_untagged(&mut self, qn: u32, msn: u32, mo: u32, len: u32)
        -> Result<(), UntaggedCheck>;

    /// Whether the peer may invalidate `stag` with a Send with Invalidate. Asked once per
    /// message, on its last segment; the shell invalidates when the message completes
    /// ([`RxEvents::message_done`]).
    ///
    /// # Errors
    ///
    /// [`InvalidateCheck`].
    fn check_invalidate(&mut self, stag: u32) -> Result<(), InvalidateCheck>;
}

/// A completed message on QN 0 (Send variants, Immediate Data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageDone {
    /// The opcode (Send, Send with Invalidate, Send with SE, Send with SE and Invalidate,
    /// Immediate Data, Immediate Data with SE).
    pub opcode: Opcode,
    /// The message's MSN.
    pub msn: u32,
    /// Octets placed into the posted buffer (0 for Immediate Data).
    pub len: u32,
    /// The STag to invalidate (Send with Invalidate variants), already accepted by
    /// [`MemoryLookup::check_invalidate`].
    pub inval_stag: Option<u32>,
    /// The message asks for a Solicited Event.
    pub solicited: bool,
    /// The 8 octets of an Immediate Data message (RFC 7306 §6.3).
    pub imm: Option<ImmediateData>,
}

/// A completed tagged message (the segment with L=1 arrived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedDone {
    /// [`Opcode::Write`] or [`Opcode::ReadResponse`].
    pub opcode: Opcode,
    /// Write: STag of the last segment. Read Response: the Data Sink STag of the Read it
    /// completes (the oldest outstanding one, [`super::orq::Orq`]).
    pub stag: u32,
    /// Payload octets placed by this message's segments (Write: the Write segments since
    /// the previous Write completed; Read Response: the Read's size, which the Response
    /// filled exactly).
    pub len: u64,
}

/// Completions and requests the RX engine delivers, each once the FPDU carrying it has
/// passed its CRC check (RFC 5040 §5.5 ordering: in stream order).
///
/// The fallible methods let the shell reject a delivered message (RFC 5040 §7.1 rules 2-3:
/// errors detected after DDP delivered the message), for example a Read Response for which
/// no Read is outstanding, an Atomic Response with an unknown request identifier, or a
/// completion queue overflow; the engine then sends the returned cause in a TERMINATE that
/// echoes the message's last segment.
pub trait RxEvents {
    /// A QN 0 message completed.
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn message_done(&mut self, msg: &MessageDone) -> Result<(), TermCause>;

    /// An RDMA Write or Read Response completed (its L=1 segment was placed). A Read
    /// Response completes the oldest outstanding outbound Read, which the engine has
    /// removed from its ORQ (RFC 5040 §5.5 rule 19).
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn tagged_done(&mut self, done: &TaggedDone) -> Result<(), TermCause>;

    /// A valid RDMA Read Request arrived (Data Source already checked unless zero-length,
    /// RFC 5040 §7.2); the shell queues its Read Response and calls
    /// [`super::ddp_rx::DdpRx::release_ird`] once the response is sent.
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn read_request(&mut self, req: &ReadRequest) -> Result<(), TermCause>;

    /// A valid Atomic Request arrived (target STag, 8-octet range and alignment checked,
    /// RFC 7306 §8.2); the shell performs it, sends the Atomic Response and calls
    /// [`super::ddp_rx::DdpRx::release_ird`].
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn atomic_request(&mut self, req: &AtomicRequest) -> Result<(), TermCause>;

    /// An Atomic Response arrived (RFC 7306 §5.2.2); the shell matches it to its request.
    ///
    /// # Errors
    ///
    /// The cause to terminate with.
    fn atomic_response(&mut self, resp: &AtomicResponse) -> Result<(), TermCause>;

    /// The peer terminated the stream: `Some` with the decoded TERMINATE header, `None` if
    /// the message carried opcode 7 but its headers did not decode. The shell completes all
    /// work in error and closes; no TERMINATE is sent in answer (RFC 5040 §6.2.2).
    fn terminate_received(&mut self, term: Option<&Terminate>);
}
