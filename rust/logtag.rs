// SPDX-License-Identifier: GPL-2.0

//! Who a kernel message is about ([`Tag`], [`KeptTag`]: see `sys/logtag.rs`), and the text
//! of a TERMINATE cause in it ([`CauseText`]).

pub(crate) use crate::sys::logtag::{KeptTag, Tag};
use crate::wire::terminate::TermCause;
use core::fmt;

/// A TERMINATE cause for a kernel message: its numbers and their meaning (see
/// [`TermCause`]'s `Display`).
pub(crate) struct CauseText(pub(crate) TermCause);

impl kernel::fmt::Display for CauseText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
