// SPDX-License-Identifier: GPL-2.0

//! Timers of the connection objects: the MPA startup timeout of a CEP ([`crate::cm`]) and
//! the deadlines of a connection ([`crate::conn`]: the peer-to-peer RTR wait, a TERMINATE
//! the peer does not take).
//!
//! An object with an `HrTimer` field arms it through [`Armed`], whose handle it keeps
//! while the timer may fire; the timer's callback only records the expiry and queues the
//! object's work item, which acts on it.

use kernel::sync::Arc;
use kernel::time::hrtimer::{
    ArcHrTimerHandle, HasHrTimer, HrTimerCallback, HrTimerPointer, RelativeMode,
};
use kernel::time::{Delta, Monotonic};

/// An armed timer of a CEP (MPA startup) or a connection (peer-to-peer RTR, TERMINATE
/// deadline): dropping it cancels the timer (waiting for a running callback) and releases
/// the reference to `T` the timer holds. Holders keep a reference of their own, so that is
/// never the last; callbacks take no lock, so it may be dropped under the holder's lock.
pub(crate) struct Armed<T: HasHrTimer<T>> {
    _handle: ArcHrTimerHandle<T>,
}

impl<T> Armed<T>
where
    T: HasHrTimer<T, TimerMode = RelativeMode<Monotonic>> + Send + Sync + 'static,
    T: for<'a> HrTimerCallback<Pointer<'a> = Arc<T>>,
{
    /// Starts `this`'s timer to fire in `ms` milliseconds (0: at once).
    pub(crate) fn after(this: Arc<T>, ms: u64) -> Self {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        Self {
            _handle: this.start(Delta::from_millis(ms)),
        }
    }
}
