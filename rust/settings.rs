// SPDX-License-Identifier: GPL-2.0

//! Per-device protocol settings: the MPA startup choices (RFC 5044 §7.1, RFC 6581), the
//! startup and TERMINATE timeout and zero-copy transmission of one rsiw device.
//!
//! `rdma link add` copies the module parameters of the same names into the new device.
//! From then on each setting is a read-write file in the device's sysfs directory,
//! `/sys/class/infiniband/<dev>/<name>`, shown and written in decimal (0 or 1 for the
//! on/off ones, which also take `y`/`n`). A connection copies its device's settings when
//! it starts (`iw_connect`, or a TCP connection accepted by a listener), so a change
//! applies to the connections that start after it and never to one half-way through
//! setup.

use crate::engine::startup::{Config, EnhancedConfig, Mode};
use crate::wire::mpa::RtrSet;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;

/// The shortest `mpa_timeout_ms`, in milliseconds (a module parameter below it is raised
/// to it).
pub(crate) const MIN_MPA_TIMEOUT_MS: u32 = 100;

/// The settings, in the order of their sysfs files ([`NAMES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum Setting {
    /// MPA revision to request: 0 (RDMA Consortium, RFC 5044 Appendix C), 1 (RFC 5044) or
    /// 2 (RFC 6581).
    MpaRev,
    /// Ask for MPA CRC32c (0/1).
    MpaCrc,
    /// Ask the peer to send MPA markers (0/1).
    MpaMarkers,
    /// Request the RFC 6581 peer-to-peer model (0/1).
    PeerToPeer,
    /// The RTR types offered and accepted: a mask of 1 = zero-length RDMA Write, 2 =
    /// zero-length RDMA Read, 4 = zero-length Send; 0 means all three.
    P2pRtr,
    /// Use the 2007 seed draft's Rtr frame (0/1).
    MpaDraftRtr,
    /// Offer and use FPDUs larger than one TCP segment (0/1).
    MpaLargeFpdu,
    /// Milliseconds to wait for the peer's MPA frame, a TERMINATE's delivery or the RTR.
    MpaTimeoutMs,
}

const COUNT: usize = 8;

const ALL: [Setting; COUNT] = [
    Setting::MpaRev,
    Setting::MpaCrc,
    Setting::MpaMarkers,
    Setting::PeerToPeer,
    Setting::P2pRtr,
    Setting::MpaDraftRtr,
    Setting::MpaLargeFpdu,
    Setting::MpaTimeoutMs,
];

/// The names of the sysfs files, indexed like [`Setting`]; each is also the name of the
/// module parameter that gives a new device its value.
pub(crate) const NAMES: &[&CStr] = &[
    c"mpa_rev",
    c"mpa_crc",
    c"mpa_markers",
    c"peer_to_peer",
    c"p2p_rtr",
    c"mpa_draft_rtr",
    c"mpa_large_fpdu",
    c"mpa_timeout_ms",
];

const _: () = assert!(NAMES.len() == COUNT);

/// What a setting accepts.
#[derive(Clone, Copy)]
enum Kind {
    /// 0 or 1.
    Flag,
    /// A number in `min..=max`.
    Range(u32, u32),
}

impl Setting {
    fn kind(self) -> Kind {
        match self {
            Self::MpaRev => Kind::Range(0, 2),
            Self::P2pRtr => Kind::Range(0, 7),
            Self::MpaTimeoutMs => Kind::Range(MIN_MPA_TIMEOUT_MS, u32::MAX),
            _ => Kind::Flag,
        }
    }

    /// The value of the module parameter of the same name, brought into range.
    fn module_parameter(self) -> u32 {
        use crate::module_parameters as p;
        match self {
            // Any other value has always meant revision 2.
            Self::MpaRev => match p::mpa_rev.value() {
                r @ (0 | 1) => r,
                _ => 2,
            },
            Self::MpaCrc => p::mpa_crc.value().into(),
            Self::MpaMarkers => p::mpa_markers.value().into(),
            Self::PeerToPeer => p::peer_to_peer.value().into(),
            Self::P2pRtr => p::p2p_rtr.value() & 7,
            Self::MpaDraftRtr => p::mpa_draft_rtr.value().into(),
            Self::MpaLargeFpdu => p::mpa_large_fpdu.value().into(),
            Self::MpaTimeoutMs => p::mpa_timeout_ms.value().max(MIN_MPA_TIMEOUT_MS),
        }
    }
}

/// Why a value written to a setting's file was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// The index names no setting.
    NoSuchSetting,
    /// An on/off setting got something other than `0`, `1`, `y`, `n`, `Y` or `N`.
    NotAFlag,
    /// Not a decimal number that fits in 32 bits.
    NotANumber,
    /// A number outside `min..=max`.
    OutOfRange { min: u32, max: u32 },
}

/// Parses `text`, one line as written to a sysfs file (a trailing newline is allowed), as
/// the value of the setting with index `index` of [`NAMES`].
///
/// # Errors
///
/// See [`ParseError`].
fn parse(index: usize, text: &[u8]) -> Result<u32, ParseError> {
    let s = ALL.get(index).ok_or(ParseError::NoSuchSetting)?;
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    match s.kind() {
        Kind::Flag => match text {
            b"1" | b"y" | b"Y" => Ok(1),
            b"0" | b"n" | b"N" => Ok(0),
            _ => Err(ParseError::NotAFlag),
        },
        Kind::Range(min, max) => {
            if text.is_empty() || text.len() > 10 || !text.iter().all(u8::is_ascii_digit) {
                return Err(ParseError::NotANumber);
            }
            let v = text.iter().try_fold(0u32, |v, d| {
                v.checked_mul(10)?.checked_add(u32::from(d - b'0'))
            });
            let v = v.ok_or(ParseError::NotANumber)?;
            if (min..=max).contains(&v) {
                Ok(v)
            } else {
                Err(ParseError::OutOfRange { min, max })
            }
        }
    }
}

/// The settings of one device. Each value is read and written on its own (relaxed
/// atomics): a connection that starts while a setting changes gets the old or the new
/// value of it.
pub(crate) struct Settings {
    values: [AtomicU32; COUNT],
}

impl Settings {
    /// The module parameters' current values, for a device being added.
    pub(crate) fn from_module_parameters() -> Self {
        Self {
            values: ALL.map(|s| AtomicU32::new(s.module_parameter())),
        }
    }

    fn get(&self, s: Setting) -> u32 {
        self.values[s as usize].load(Ordering::Relaxed)
    }

    /// Returns the value of the setting with index `index` of [`NAMES`] (0 for none).
    pub(crate) fn show(&self, index: usize) -> u32 {
        self.values
            .get(index)
            .map_or(0, |v| v.load(Ordering::Relaxed))
    }

    /// Sets the setting with index `index` of [`NAMES`] to `text` (as written to its
    /// file; see [`parse`]); connections that start afterwards use it.
    ///
    /// # Errors
    ///
    /// The value is not one the setting takes; the setting keeps its value.
    pub(crate) fn store(&self, index: usize, text: &[u8]) -> Result<(), ParseError> {
        let v = parse(index, text)?;
        self.values[index].store(v, Ordering::Relaxed);
        Ok(())
    }

    /// The values a connection starting now uses.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let flag = |s| self.get(s) != 0;
        Snapshot {
            mpa_rev: self.get(Setting::MpaRev),
            crc: flag(Setting::MpaCrc),
            markers: flag(Setting::MpaMarkers),
            p2p: flag(Setting::PeerToPeer),
            p2p_rtr: self.get(Setting::P2pRtr),
            draft_rtr: flag(Setting::MpaDraftRtr),
            large_fpdu: flag(Setting::MpaLargeFpdu),
            timeout_ms: self.get(Setting::MpaTimeoutMs),
        }
    }
}

/// A device's settings as one connection uses them, copied when it starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    mpa_rev: u32,
    crc: bool,
    markers: bool,
    p2p: bool,
    p2p_rtr: u32,
    draft_rtr: bool,
    large_fpdu: bool,
    timeout_ms: u32,
}

impl Snapshot {
    /// The MPA startup configuration for the Read depths `ird` and `ord` (the Responder
    /// passes the largest, 0x3FFE, and learns the consumer's at accept). Revision 0 is the
    /// engine's [`Mode::Rdmac`]: only then are Rev 0 peers accepted.
    pub(crate) fn startup_config(&self, ird: u32, ord: u32) -> Config {
        let mode = if self.draft_rtr {
            Mode::DraftRtr { rtr: true }
        } else if self.mpa_rev == 0 {
            Mode::Rdmac
        } else if self.mpa_rev == 1 {
            Mode::Basic
        } else {
            Mode::Enhanced(EnhancedConfig {
                ird: ird.min(0x3FFE) as u16,
                ord: ord.min(0x3FFE) as u16,
                p2p: self.p2p,
                rtr: self.rtr_types(),
            })
        };
        Config {
            mode,
            crc: self.crc,
            markers: self.markers,
            large_fpdu: self.large_fpdu,
            permissive_rev0: self.mpa_rev == 0,
        }
    }

    /// The RTR types of `p2p_rtr` (RFC 6581 §9.2 flags B, C and D). The Responder takes a
    /// Send RTR without consuming a receive WQE (see [`crate::conn`]).
    fn rtr_types(&self) -> RtrSet {
        // The setting is kept within 0..=7.
        let m = match self.p2p_rtr {
            0 => 7,
            m => m,
        };
        RtrSet {
            send: m & 4 != 0,
            write: m & 1 != 0,
            read: m & 2 != 0,
        }
    }

    /// The MPA startup timeout, also the TERMINATE and RTR deadline, in milliseconds (at
    /// least [`MIN_MPA_TIMEOUT_MS`]: both the module parameter's copy and a written value
    /// are kept in range).
    pub(crate) fn timeout_ms(&self) -> u64 {
        u64::from(self.timeout_ms)
    }
}
