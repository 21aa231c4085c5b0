// SPDX-License-Identifier: GPL-2.0

//! Who a kernel message is about: the device, the QP and the peer, as in
//! `rsiw0 qp 17 10.0.0.2:4791: the peer sent TERMINATE ...`.
//!
//! A tag is formatted once, when a connection (or a connection attempt) starts, and
//! printed in front of each of its messages, so that a message can be matched with
//! `rdma res show qp` and `ss -tn` without a debugger. It lives here, on the ground floor,
//! because the trampolines tag their own messages; the driver's `logtag` adds the text of
//! TERMINATE causes.

use super::ibdev::{DeviceOps, IbDevice};
use super::net::socket::SockAddr;
use core::fmt::{self, Write};
use kernel::prelude::*;

/// Room for a device name (at most 63 octets), a QP number and an IPv6 address with scope
/// and port.
const CAP: usize = 144;

/// The text in front of a connection's kernel messages (see the module documentation).
pub(crate) struct Tag {
    buf: [u8; CAP],
    len: usize,
}

impl Tag {
    /// The tag for device `dev`, QP `qpn` (if there is one yet) and the peer's address
    /// `peer` (if known): "rsiw0 qp 17 10.0.0.2:4791", "rsiw0 10.0.0.2:4791", "rsiw0".
    pub(crate) fn new<T: DeviceOps>(
        dev: &IbDevice<T>,
        qpn: Option<u32>,
        peer: Option<&SockAddr>,
    ) -> Self {
        let mut t = Self::with_name(|b| dev.name_into(b), qpn);
        t.add(None, peer);
        t
    }

    /// The tag of an object of a device, given the device's name through `name` (which
    /// writes it into the buffer it gets and returns its length in octets, as
    /// [`IbDevice::name_into`]) and the QP number, if any: "rsiw0 qp 17", "rsiw0".
    pub(crate) fn with_name(name: impl FnOnce(&mut [u8]) -> usize, qpn: Option<u32>) -> Self {
        let mut t = Tag {
            buf: [0; CAP],
            len: 0,
        };
        t.len = name(&mut t.buf[..64]);
        t.add(qpn, None);
        t
    }

    /// The tag of a connection attempt whose device is not known (yet): "rsiw
    /// 10.0.0.2:4791".
    pub(crate) fn without_device(qpn: Option<u32>, peer: Option<&SockAddr>) -> Self {
        let mut t = Tag {
            buf: [0; CAP],
            len: 0,
        };
        let _ = t.write_str("rsiw");
        t.add(qpn, peer);
        t
    }

    fn add(&mut self, qpn: Option<u32>, peer: Option<&SockAddr>) {
        // Writes past the capacity are cut off (`write_str` keeps what fits).
        if let Some(q) = qpn {
            let _ = write!(self, " qp {q}");
        }
        if let Some(p) = peer {
            let _ = write!(self, " {p}");
        }
    }
}

impl Write for Tag {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = CAP - self.len;
        // Cut at a character boundary so that the tag stays UTF-8.
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(core::str::from_utf8(&self.buf[..self.len]).unwrap_or("rsiw"))
    }
}

impl kernel::fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A [`Tag`]'s text kept by an object that lives as long as a connection, in an
/// allocation of the text's length: a [`Tag`] holds room for the longest text (152
/// octets) wherever it is.
pub(crate) struct KeptTag(KVec<u8>);

impl KeptTag {
    /// Keeps the text of `tag`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(tag: &Tag) -> Result<Self> {
        let mut text = KVec::with_capacity(tag.len, GFP_KERNEL)?;
        text.extend_from_slice(&tag.buf[..tag.len], GFP_KERNEL)?;
        Ok(Self(text))
    }
}

impl fmt::Display for KeptTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Copied from a `Tag`, whose text is UTF-8.
        f.write_str(core::str::from_utf8(&self.0).unwrap_or("rsiw"))
    }
}

impl kernel::fmt::Display for KeptTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
