// SPDX-License-Identifier: GPL-2.0

//! Byte-stream interfaces between the protocol engines and whoever moves the bytes.
//!
//! RX: the shell implements [`RxStream`] over the TCP receive queue (socket buffers in the
//! kernel, slices on the host). The MPA layer consumes the raw stream: it removes markers,
//! reads ULPDU_Length, pad and CRC, and offers the DDP layer a view of one ULPDU at a time
//! through the same trait (markers removed, bounded by the ULPDU, CRC folded in by the MPA
//! layer). The DDP layer decides where payload lands ([`PlaceTarget`]); the shell copies it.
//!
//! TX: the engines describe an FPDU as a sequence of header octets and payload ranges and
//! hand it to a [`TxSink`]; payload octets never pass through the engine.

use super::rx_shell::{Access, TaggedCheck};

/// Where received payload octets land. Decided by the DDP engine after validation
/// (RFC 5041 §7.1), executed by the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceTarget {
    /// Tagged placement: the memory region named by `stag`, at tagged offset `to` (octets).
    Tagged {
        /// Steering Tag of the target buffer (host order).
        stag: u32,
        /// Tagged Offset of the first octet placed (octets, host order).
        to: u64,
        /// The right the placement needs, as validated: [`Access::RemoteWrite`] for an
        /// RDMA Write, [`Access::LocalWrite`] for a Read Response into its Read's sink. The
        /// shell resolves the STag again with this right when it copies, so a region
        /// whose rights shrank (or that was invalidated) since the header was validated
        /// is not written.
        access: Access,
    },
    /// Untagged placement: the buffer posted on queue `qn` for message `msn`, at message
    /// offset `mo` (octets).
    Untagged {
        /// Queue Number (RFC 5040 §5: 0 Send, 1 Read Request, 2 Terminate, 3 Atomic Response).
        qn: u32,
        /// Message Sequence Number of the message being placed.
        msn: u32,
        /// Message Offset of the first octet placed (octets).
        mo: u32,
    },
}

/// Why the shell could not complete a placement the engine had already validated.
///
/// A segment's payload can arrive over many calls of [`RxStream::place`] after its header
/// was checked, and the shell resolves a tagged buffer again on each call, so the buffer
/// can change in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceError {
    /// The tagged buffer no longer passes the check the header passed (deregistered,
    /// invalidated, or re-registered with fewer rights or a smaller range since): the
    /// engine answers with the DDP tagged buffer error for it (RFC 5041 §7.2,
    /// [`TaggedCheck::ddp_cause`]), as it would have for the header.
    Tagged(TaggedCheck),
    /// Anything else (the target pages or the receive buffer went away): the engine answers
    /// with a DDP local catastrophic error (RFC 5041 §7.2).
    Failed,
}

/// A byte stream the RX engines consume from.
///
/// Every consuming method takes `crc`: when it is `Some`, the implementation folds the
/// consumed octets, in stream order, into that running CRC32c value (see
/// [`crate::wire::crc::Crc32c`]). Callers never ask for more than [`RxStream::available`]
/// octets.
pub trait RxStream {
    /// Number of octets that can be consumed now.
    fn available(&self) -> usize;

    /// Consumes `dst.len()` octets into `dst` (headers, markers, pad, CRC trailer).
    fn take(&mut self, dst: &mut [u8], crc: Option<&mut u32>);

    /// Consumes `len` octets and writes them to `target` (payload).
    ///
    /// # Errors
    ///
    /// [`PlaceError`] if the shell cannot write the octets; they are consumed regardless.
    fn place(
        &mut self,
        target: &PlaceTarget,
        len: usize,
        crc: Option<&mut u32>,
    ) -> Result<(), PlaceError>;

    /// Consumes `len` octets and discards them.
    fn skip(&mut self, len: usize, crc: Option<&mut u32>);

    /// Copies the next octets into `dst` without consuming them, as many as are available
    /// up to `dst.len()`, and returns how many. A stream that cannot look ahead returns 0
    /// (this default): the engines then learn the octets by consuming them.
    fn peek(&mut self, dst: &mut [u8]) -> usize {
        let _ = dst;
        0
    }
}

/// A sink for transmitted FPDU octets.
///
/// The engines call it in stream order: [`TxSink::bytes`] for octets the engine composed
/// (markers, ULPDU_Length, DDP/RDMAP headers, pad, CRC trailer) and [`TxSink::payload`] for
/// the next octets of the current message's payload, which only the shell can reach.
/// As with [`RxStream`], a `Some(crc)` asks the sink to fold the octets into the running
/// CRC32c value.
pub trait TxSink {
    /// Appends octets composed by the engine.
    fn bytes(&mut self, data: &[u8], crc: Option<&mut u32>);

    /// Appends the next `len` octets of the current message's payload.
    fn payload(&mut self, len: usize, crc: Option<&mut u32>);
}
