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

/// The shortest MPA startup timeout (`mpa_timeout_ms` below it is raised to it).
pub(crate) const MIN_MPA_TIMEOUT_MS: u32 = 100;

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
    /// Starts `this`'s timer to fire in `mpa_timeout_ms` (at least
    /// [`MIN_MPA_TIMEOUT_MS`]). Module exit waits for `T` ([`crate::sys::Live`]), which
    /// holds the handle.
    pub(crate) fn start(this: Arc<T>) -> Self {
        let ms = crate::module_parameters::mpa_timeout_ms
            .value()
            .max(MIN_MPA_TIMEOUT_MS);
        Self {
            _handle: this.start(Delta::from_millis(i64::from(ms))),
        }
    }

    /// Starts `this`'s timer to fire in `ms` milliseconds (0: at once).
    pub(crate) fn after(this: Arc<T>, ms: u64) -> Self {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        Self {
            _handle: this.start(Delta::from_millis(ms)),
        }
    }
}
