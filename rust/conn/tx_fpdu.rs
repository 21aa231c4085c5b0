// SPDX-License-Identifier: GPL-2.0

//! One outgoing FPDU: what the protocol core's TX builder writes for it collected in its
//! buffers ([`FpduSink`]: the octets the builder made, the payload as memory ranges or,
//! when small, copied next to them), and handed to TCP ([`TxFpdu`]).
//!
//! # No memory read after its work request completed
//!
//! TCP never holds a reference to a consumer's memory: a payload is copied before its WR
//! can complete, either by TCP when it queues the FPDU (`sendmsg` without
//! `MSG_SPLICE_PAGES`) or into the connection's copy pages, which TCP then takes by
//! reference. TCP reads a page it took by reference again whenever it retransmits it,
//! after the WR completed (or the later signalled WR that implies it): a consumer's page
//! would then put what the consumer wrote since, or freed memory, on the wire. An FPDU
//! TCP took in part when its WR must complete early (the QP failed, RFC 5040 §7.1)
//! first copies what TCP has not taken ([`TxFpdu::detach`]).
//!
//! The payload of a large FPDU ([`COPY_PAGES_MIN`]) goes into the copy pages, when the
//! pages TCP let go of leave room: one copy, and no page TCP allocates and zeroes for it.
//! Otherwise TCP copies it (a Read Response's from the FPDU's own octets).
//!
//! A Read Response's payload is copied into the FPDU's own octets or the copy pages under
//! an [`InUse`] guard of its Data Source, taken per FPDU after checking the STag again
//! ([`Source`]): the Data Source is the peer's choice, and the consumer may take it back
//! (invalidate or deregister it) while a Response streams out of it, so no octet may be
//! read from it after that returned, even by TCP later. The guard lives for the copy
//! only, with softirqs off: an invalidation spins until the guards of its region are
//! gone, and the receive path of any connection may invalidate from softirq on this CPU.

use super::tx::Payload;
use crate::engine::rx_shell::{Access, TaggedCheck};
use crate::engine::stream::TxSink;
use crate::stag::{access_bits, InUse, MrRef};
use crate::sys::bhlock::BhOff;
use crate::sys::mem::copy_pages::CopyPages;
use crate::sys::mem::kmem::{crc32c_kva, extend_bytes, extend_from_kva, IoList, IoVecBuf, Kva};
use crate::sys::net::socket::Socket;
use crate::sys::obj::PdId;
use kernel::prelude::*;
use kernel::sync::Arc;

/// One FPDU being handed to TCP, collected in the connection's [`FpduBufs`]: how long it
/// is and how much of it TCP took.
pub(super) struct TxFpdu {
    len: usize,
    sent: usize,
    last: bool,
    /// How TCP takes the payload.
    mode: SendMode,
}

/// How an FPDU's payload goes to TCP.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SendMode {
    /// Copied by TCP (from the FPDU's own octets or from registered memory).
    Copied,
    /// Copied into the connection's copy pages, which TCP takes by reference.
    CopyPages,
}

/// The buffers of one FPDU. A connection keeps one set ([`super::Inner::bufs`]), emptied
/// in place after each FPDU, so that building and sending an FPDU allocates nothing once
/// they have grown to the connection's usual FPDU shape.
pub(super) struct FpduBufs {
    /// Octets the TX builder wrote (header, inline payload, markers, pad, CRC) and small
    /// payload copied from registered memory.
    own: KVec<u8>,
    /// The FPDU in stream order: pieces of `own` and payload ranges.
    parts: KVec<Part>,
    /// Payload regions referenced by `parts` (kept alive until the FPDU is queued).
    hold: KVec<MrRef>,
    /// Storage of the gather list the copying send builds (`None` before its first use
    /// and while a send uses it).
    iov: Option<IoVecBuf>,
}

impl FpduBufs {
    /// Empty buffers (they allocate on first use).
    pub(super) const fn new() -> Self {
        Self {
            own: KVec::new(),
            parts: KVec::new(),
            hold: KVec::new(),
            iov: None,
        }
    }

    /// Appends `data` to the FPDU's own octets.
    fn push_own(&mut self, data: &[u8]) -> Result {
        let off = self.own.len();
        extend_bytes(&mut self.own, data)?;
        self.own_part(off, data.len())
    }

    /// Appends `range` to the FPDU's own octets (a copy), folding the copy into `crc`.
    fn push_copy(&mut self, range: &Kva, crc: Option<&mut u32>) -> Result {
        let off = self.own.len();
        let copy = extend_from_kva(&mut self.own, range)?;
        if let Some(c) = crc {
            *c = crate::sys::crc32c(*c, copy);
        }
        let n = copy.len();
        self.own_part(off, n)
    }

    /// Adds `own[off..off + n]`, just appended, to the FPDU: the last part grows if it is
    /// of the own octets too.
    fn own_part(&mut self, off: usize, n: usize) -> Result {
        if let Some(Part::Own { len, .. }) = self.parts.last_mut() {
            *len += n;
            return Ok(());
        }
        self.parts.push(Part::Own { off, len: n }, GFP_KERNEL)?;
        Ok(())
    }

    /// Empties the buffers, keeping their capacity; drops the region references.
    pub(super) fn clear(&mut self) {
        self.own.clear();
        self.parts.clear();
        self.hold.clear();
    }

    /// Appends `len` octets of `mr` from tagged offset `to`, read from `source`, to the
    /// FPDU's own octets, or copied into `pages` if given (room made for them by
    /// [`CopyPages::reserve`]), folding them into `crc`: under a guard of the region,
    /// taken after `source`'s checks passed for the whole range, with softirqs off (the
    /// module documentation). Room is made first, so nothing allocates under the guard.
    ///
    /// # Errors
    ///
    /// [`BuildError::Source`] if the checks failed; [`BuildError::Local`] for `ENOMEM`, or
    /// a range that does not resolve (`EFAULT`).
    fn push_guarded(
        &mut self,
        source: &Source,
        mr: &MrRef,
        to: u64,
        len: u64,
        mut crc: Option<&mut u32>,
        mut pages: Option<&mut CopyPages>,
    ) -> Result<(), BuildError> {
        let n = usize::try_from(len).map_err(|_| BuildError::Local(EINVAL))?;
        if pages.is_none() {
            self.own
                .reserve(n, GFP_KERNEL)
                .map_err(|e| BuildError::Local(e.into()))?;
        }
        self.parts
            .reserve(paged_parts(n), GFP_KERNEL)
            .map_err(|e| BuildError::Local(e.into()))?;
        let _bh = BhOff::new();
        let access = access_bits(Access::RemoteRead);
        let _guard =
            InUse::take(mr, source.stag, source.pd, access, to, len).map_err(BuildError::Source)?;
        let mut done = 0u64;
        while done < len {
            let seg = mr.resolve(to + done).ok_or(BuildError::Local(EFAULT))?;
            let piece = seg.prefix(len - done);
            // Within the room made above: no allocation.
            match pages.as_deref_mut() {
                Some(p) => self.push_paged(p, &piece, crc.as_deref_mut()),
                None => self.push_copy(&piece, crc.as_deref_mut()),
            }
            .map_err(BuildError::Local)?;
            done += piece.len();
        }
        Ok(())
    }

    /// Copies `range` into `pages` (room made by [`CopyPages::reserve`]) and appends the
    /// copy to the FPDU, folding it into `crc`. The parts it adds need no allocation if
    /// room for [`paged_parts`] of the FPDU's copy-page octets was made.
    ///
    /// # Errors
    ///
    /// `ENOSPC` if the pages or the parts have too little room.
    fn push_paged(
        &mut self,
        pages: &mut CopyPages,
        range: &Kva,
        mut crc: Option<&mut u32>,
    ) -> Result {
        let parts = &mut self.parts;
        let mut full = false;
        pages.copy(range, |k| {
            if let Some(c) = crc.as_deref_mut() {
                *c = crc32c_kva(*c, &k);
            }
            // A piece that goes on where the last one ended joins it: the pieces of one
            // FPDU then number no more than the pages they lie in.
            if let Some(Part::Mem(last)) = parts.last_mut() {
                if let Some(joined) = last.join(&k) {
                    *last = joined;
                    return;
                }
            }
            if parts.push_within_capacity(Part::Mem(k)).is_err() {
                full = true;
            }
        })?;
        if full {
            return Err(ENOSPC);
        }
        Ok(())
    }
}

enum Part {
    Own { off: usize, len: usize },
    Mem(Kva),
}

impl TxFpdu {
    /// An FPDU of `len` octets on the wire, nothing of it sent yet; `last` if it ends its
    /// message; `mode` says how TCP takes its payload.
    pub(super) fn new(len: usize, last: bool, mode: SendMode) -> Self {
        Self {
            len,
            sent: 0,
            last,
            mode,
        }
    }

    /// Whether TCP has taken none of the FPDU yet.
    pub(super) fn untouched(&self) -> bool {
        self.sent == 0
    }

    /// Whether the FPDU ends its message.
    pub(super) fn last(&self) -> bool {
        self.last
    }

    /// The FPDU's length on the wire (octets).
    pub(super) fn wire_len(&self) -> usize {
        self.len
    }

    /// Sends what is left of the FPDU, collected in `bufs`, as it was built for. Returns
    /// `Ok(true)` once all of it is queued, `Ok(false)` when the send buffer is full.
    pub(super) fn push(&mut self, bufs: &mut FpduBufs, sock: &mut Socket) -> Result<bool> {
        match self.mode {
            SendMode::CopyPages => self.push_paged(bufs, sock),
            SendMode::Copied => self.push_copied(bufs, sock),
        }
    }

    /// Makes the FPDU independent of the memory its payload came from: what TCP has not
    /// taken yet (octets `sent..len`) is copied into `bufs`'s own octets, and the FPDU is
    /// sent from there, copied. Called before the WR whose memory the FPDU may refer to
    /// completes while the FPDU is queued in part (the module documentation): the rest
    /// of the FPDU goes out as it was built, so that a TERMINATE can follow it (RFC 5040
    /// §7.1), and no octet is read from the WR's memory after its completion.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `EINVAL` for parts that do not add up to the FPDU; the FPDU must then be
    /// dropped, not sent.
    pub(super) fn detach(&mut self, bufs: &mut FpduBufs) -> Result {
        let rest = self.len.checked_sub(self.sent).ok_or(EINVAL)?;
        let part_len = |p: &Part| match p {
            Part::Own { len, .. } => Ok(*len),
            Part::Mem(k) => usize::try_from(k.len()).map_err(|_| EINVAL),
        };
        // The parts hold the FPDU's last octets (all of them, unless detached already).
        let mut total = 0usize;
        for p in bufs.parts.iter() {
            total = total.checked_add(part_len(p)?).ok_or(EINVAL)?;
        }
        let mut at = self.len.checked_sub(total).ok_or(EINVAL)?;
        let mut own = KVec::with_capacity(rest, GFP_KERNEL)?;
        for p in bufs.parts.iter() {
            let n = part_len(p)?;
            let (start, end) = (at, at + n);
            at = end;
            if end <= self.sent {
                continue;
            }
            let skip = self.sent.saturating_sub(start);
            match p {
                Part::Own { off, len } => {
                    let src = bufs.own.get(off + skip..off + len).ok_or(EINVAL)?;
                    extend_bytes(&mut own, src)?;
                }
                Part::Mem(k) => {
                    extend_from_kva(&mut own, &k.skip(skip as u64))?;
                }
            }
        }
        if at != self.len || own.len() != rest {
            return Err(EINVAL);
        }
        bufs.parts.clear();
        // Within the capacity of the cleared list (an FPDU has a part at least): no
        // allocation.
        bufs.parts
            .push(Part::Own { off: 0, len: rest }, GFP_KERNEL)?;
        bufs.own = own;
        bufs.hold.clear();
        self.mode = SendMode::Copied;
        Ok(())
    }

    /// Sends what is left of the FPDU part by part: the engine's octets (header, pad, CRC)
    /// copied, each run of copy-page ranges by reference in one call
    /// ([`Socket::send_kvas`]). Returns `Ok(true)` once all of it is queued, `Ok(false)`
    /// when the send buffer is full.
    fn push_paged(&mut self, bufs: &FpduBufs, sock: &mut Socket) -> Result<bool> {
        let parts = &bufs.parts[..];
        let mut start = 0usize;
        let mut i = 0;
        while let Some(p) = parts.get(i) {
            // Parts `i..j` are sent as one: an own part, or a run of payload ranges.
            let mut j = i + 1;
            let mut end = start;
            match p {
                Part::Own { len, .. } => end += *len,
                Part::Mem(_) => {
                    j = i;
                    while let Some(Part::Mem(k)) = parts.get(j) {
                        end += usize::try_from(k.len()).map_err(|_| EINVAL)?;
                        j += 1;
                    }
                }
            }
            while self.sent < end {
                let skip = self.sent - start;
                let more = !self.last || end < self.len;
                let r = match p {
                    Part::Own { off, len } => sock.send(&[&bufs.own[off + skip..off + len]], more),
                    Part::Mem(_) => {
                        let ranges = parts[i..j].iter().filter_map(|p| match p {
                            Part::Mem(k) => Some(k),
                            Part::Own { .. } => None,
                        });
                        sock.send_kvas(ranges, skip, more)
                    }
                };
                match r {
                    Ok(0) => return Ok(false),
                    Ok(n) => self.sent += n,
                    Err(e) if e == EAGAIN => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            start = end;
            i = j;
        }
        Ok(self.sent >= self.len)
    }

    /// Sends what is left of the FPDU as one gather list of its parts, all of them
    /// copied by TCP (as one buffer when it is all the FPDU's own octets). Returns
    /// `Ok(true)` once all of it is queued, `Ok(false)` when the send buffer is full.
    fn push_copied(&mut self, bufs: &mut FpduBufs, sock: &mut Socket) -> Result<bool> {
        let more = !self.last;
        if let [Part::Own { off, len }] = bufs.parts[..] {
            // All of it in the own octets (a small FPDU, or one detached): one buffer, no
            // gather list. The part holds the FPDU's last `len` octets.
            let start = self.len.checked_sub(len).ok_or(EINVAL)?;
            while self.sent < self.len {
                let from = self.sent.checked_sub(start).ok_or(EINVAL)?;
                let rest = bufs.own.get(off + from..off + len).ok_or(EINVAL)?;
                match sock.send(&[rest], more) {
                    Ok(0) => return Ok(false),
                    Ok(n) => self.sent += n,
                    Err(e) if e == EAGAIN => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            return Ok(true);
        }
        let iov = bufs.iov.take().unwrap_or_else(IoVecBuf::new);
        let mut io = IoList::new(iov, bufs.parts.len())?;
        let mut r = Ok(true);
        for p in bufs.parts.iter() {
            r = match p {
                Part::Own { off, len } => io.push_bytes(&bufs.own[*off..*off + *len]),
                Part::Mem(k) => io.push_kva(*k),
            }
            .map(|()| true);
            if r.is_err() {
                break;
            }
        }
        while r == Ok(true) && self.sent < self.len {
            r = match io.send(sock, self.sent, more) {
                Ok(0) => Ok(false),
                Ok(n) => {
                    self.sent += n;
                    Ok(true)
                }
                Err(e) if e == EAGAIN => Ok(false),
                Err(e) => Err(e),
            };
        }
        bufs.iov = Some(io.into_buf());
        r
    }
}

/// Payload of at most this many octets in one FPDU (octets) is copied into the FPDU's own
/// buffer, next to its header, rather than referenced: the FPDU then goes to TCP as one
/// buffer, which costs less than gathering a few octets from registered memory.
const COPY_MAX: usize = 64;

/// The shortest FPDU (octets on the wire) whose copied payload goes through the copy
/// pages. A shorter one goes to TCP in one copying `sendmsg` call, which costs less than
/// the three calls (header, pages, trailer) of a spliced FPDU; FPDUs of one TCP segment
/// are always shorter.
pub(super) const COPY_PAGES_MIN: usize = 8192;

/// The parts at most that `n` octets copied into copy pages add to an FPDU: one per page
/// they lie in ([`FpduBufs::push_paged`] joins the pieces of one page).
fn paged_parts(n: usize) -> usize {
    n / kernel::page::PAGE_SIZE + 2
}

/// Where a payload comes from when the peer chose it: a Read Response's Data Source,
/// read under a guard taken per FPDU after checking the STag again (the module
/// documentation).
#[derive(Clone, Copy)]
pub(super) struct Source {
    /// The Data Source STag of the Read Request.
    pub(super) stag: u32,
    /// The protection domain of the connection's QP.
    pub(super) pd: PdId,
}

/// Why an FPDU could not be built.
pub(super) enum BuildError {
    /// A local failure (`ENOMEM`, a range that does not resolve).
    Local(Error),
    /// The [`Source`] of the payload failed its check: invalidated, deregistered or
    /// registered again since the Read Request was accepted.
    Source(TaggedCheck),
}

/// Collects one FPDU as the TX builder writes it.
pub(super) struct FpduSink<'a> {
    bufs: &'a mut FpduBufs,
    payload: &'a mut Payload,
    source: Option<Source>,
    /// Where the payload is copied to, if it goes through copy pages.
    pages: Option<&'a mut CopyPages>,
    /// Payload octets copied into `pages`.
    paged: usize,
    err: Option<BuildError>,
}

impl<'a> FpduSink<'a> {
    /// Collects into `bufs` (empty, grown to hold `reserve` octets of its own at least) an
    /// FPDU whose payload comes from `payload`, checked and guarded per FPDU if the peer
    /// chose it (`source`), copied into `pages` if given (with room made for the whole
    /// payload: [`CopyPages::reserve`]), else copied or referenced as its size says.
    pub(super) fn new(
        bufs: &'a mut FpduBufs,
        payload: &'a mut Payload,
        reserve: usize,
        source: Option<Source>,
        pages: Option<&'a mut CopyPages>,
    ) -> Result<Self> {
        bufs.own.reserve(reserve, GFP_KERNEL)?;
        Ok(Self {
            bufs,
            payload,
            source,
            pages,
            paged: 0,
            err: None,
        })
    }

    /// The payload octets copied into copy pages, or the first error collecting the FPDU
    /// met.
    pub(super) fn finish(self) -> Result<usize, BuildError> {
        match self.err {
            Some(e) => Err(e),
            None => Ok(self.paged),
        }
    }

    fn take_payload(
        &mut self,
        mut len: usize,
        mut crc: Option<&mut u32>,
    ) -> Result<(), BuildError> {
        match self.payload {
            Payload::None => Err(BuildError::Local(EINVAL)),
            Payload::Inline { data, off } => {
                let end = off.checked_add(len).ok_or(BuildError::Local(EINVAL))?;
                let data = data
                    .as_slice()
                    .get(*off..end)
                    .ok_or(BuildError::Local(EINVAL))?;
                *off = end;
                if let Some(c) = crc {
                    *c = crate::sys::crc32c(*c, data);
                }
                self.bufs.push_own(data).map_err(BuildError::Local)
            }
            Payload::Pieces { list, idx, off } => {
                let copy = len <= COPY_MAX;
                while len > 0 {
                    let p = list.get(*idx).ok_or(BuildError::Local(EINVAL))?;
                    let at = p.to + u64::from(*off);
                    let left = u64::from(p.len - *off);
                    if let Some(src) = &self.source {
                        // The whole range this FPDU reads from the piece, at once.
                        let n = left.min(len as u64);
                        self.bufs.push_guarded(
                            src,
                            &p.mr,
                            at,
                            n,
                            crc.as_deref_mut(),
                            self.pages.as_deref_mut(),
                        )?;
                        if self.pages.is_some() {
                            self.paged += n as usize;
                        }
                        *off += n as u32;
                        len -= n as usize;
                        if *off == p.len {
                            *idx += 1;
                            *off = 0;
                        }
                        continue;
                    }
                    let seg = p.mr.resolve(at).ok_or(BuildError::Local(EFAULT))?;
                    let n = seg.len().min(left).min(len as u64);
                    let piece = seg.prefix(n);
                    if let Some(pages) = self.pages.as_deref_mut() {
                        self.bufs
                            .parts
                            .reserve(paged_parts(n as usize), GFP_KERNEL)
                            .map_err(|e| BuildError::Local(e.into()))?;
                        self.bufs
                            .push_paged(pages, &piece, crc.as_deref_mut())
                            .map_err(BuildError::Local)?;
                        self.paged += n as usize;
                    } else if copy {
                        self.bufs
                            .push_copy(&piece, crc.as_deref_mut())
                            .map_err(BuildError::Local)?;
                    } else {
                        if let Some(c) = crc.as_deref_mut() {
                            *c = crc32c_kva(*c, &piece);
                        }
                        self.bufs
                            .parts
                            .push(Part::Mem(piece), GFP_KERNEL)
                            .map_err(|e| BuildError::Local(e.into()))?;
                        if self.bufs.hold.last().is_none_or(|h| !Arc::ptr_eq(h, &p.mr)) {
                            self.bufs
                                .hold
                                .push(p.mr.clone(), GFP_KERNEL)
                                .map_err(|e| BuildError::Local(e.into()))?;
                        }
                    }
                    *off += n as u32;
                    len -= n as usize;
                    if *off == p.len {
                        *idx += 1;
                        *off = 0;
                    }
                }
                Ok(())
            }
        }
    }
}

impl TxSink for FpduSink<'_> {
    fn bytes(&mut self, data: &[u8], crc: Option<&mut u32>) {
        if let Some(c) = crc {
            *c = crate::sys::crc32c(*c, data);
        }
        if let Err(e) = self.bufs.push_own(data) {
            self.err.get_or_insert(BuildError::Local(e));
        }
    }

    fn payload(&mut self, len: usize, crc: Option<&mut u32>) {
        if let Err(e) = self.take_payload(len, crc) {
            self.err.get_or_insert(e);
        }
    }
}
