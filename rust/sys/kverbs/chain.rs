// SPDX-License-Identifier: GPL-2.0

//! Sends posted from completion handlers, as a ULP whose CQ the core polls in softirq
//! posts its next work request from `wr_cqe->done`.

use super::KQp;
use crate::sys::ibdev::DeviceOps;
use crate::sys::{bindings, to_result, Pod};
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use kernel::ffi::c_int;
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::ib_cqe {}

/// A chain of signalled zero-length Sends on one QP, each posted by the completion handler
/// of the one before (`wr_cqe->done`), as nvme-rdma posts LOCAL_INV from its completions.
/// With the QP's send CQ from [`KCq::new_softirq`](super::KCq::new_softirq) every post
/// after the first runs in softirq, so lockdep sees each lock `post_send` takes in softirq
/// as well as in process context.
///
/// # Invariants
///
/// `cqe` is the first field (`repr(C)`), so a `wr_cqe` pointing at it points at the chain;
/// the chain is boxed and not moved while a Send it posted may complete (the owner keeps it
/// until the CQ is freed, which waits for the softirq poller).
#[repr(C)]
pub(crate) struct SoftirqChain {
    cqe: bindings::ib_cqe,
    qp: AtomicPtr<bindings::ib_qp>,
    left: AtomicU32,
    completed: AtomicU32,
    in_softirq: AtomicU32,
    failed: AtomicU32,
}

impl SoftirqChain {
    /// A chain that will post `len` Sends in all, not started.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(len: u32) -> Result<KBox<Self>> {
        let mut cqe = bindings::ib_cqe::zeroed();
        cqe.done = Some(Self::done_c);
        Ok(KBox::new(
            Self {
                cqe,
                qp: AtomicPtr::new(core::ptr::null_mut()),
                left: AtomicU32::new(len),
                completed: AtomicU32::new(0),
                in_softirq: AtomicU32::new(0),
                failed: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// Posts the first Send on `qp` from the caller's context.
    ///
    /// # Errors
    ///
    /// The provider's error.
    pub(crate) fn start<T: DeviceOps>(&self, qp: &KQp<'_, T>) -> Result {
        self.qp.store(qp.as_ptr(), Ordering::Release);
        self.post()
    }

    /// Completions handled so far.
    pub(crate) fn completed(&self) -> u32 {
        self.completed.load(Ordering::Acquire)
    }

    /// Completions whose handler ran in softirq.
    pub(crate) fn in_softirq(&self) -> u32 {
        self.in_softirq.load(Ordering::Acquire)
    }

    /// Posts that the provider refused.
    pub(crate) fn failed(&self) -> u32 {
        self.failed.load(Ordering::Acquire)
    }

    /// Posts the next Send of the chain, if started and any are left.
    fn post(&self) -> Result {
        let qp = self.qp.load(Ordering::Acquire);
        if qp.is_null() || self.left.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        self.left.fetch_sub(1, Ordering::AcqRel);
        let mut wr = bindings::ib_send_wr::zeroed();
        wr.__bindgen_anon_1.wr_cqe = core::ptr::from_ref(&self.cqe).cast_mut();
        wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: `qp` is the live QP `start` was given (its owner destroys it before the
        // chain); `wr` is valid for the call.
        let ret = unsafe {
            match (*(*qp).device).ops.post_send {
                Some(f) => f(qp, &wr, &mut bad),
                None => EOPNOTSUPP.to_errno(),
            }
        };
        to_result(ret)
    }

    /// # Safety
    ///
    /// Called by the RDMA core's CQ poller with a completion of a Send this chain posted.
    unsafe extern "C" fn done_c(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: the completion's `wr_cqe` is the chain's `cqe`, its first field (type
        // invariant), and the chain outlives the CQ's poller.
        let this = unsafe { &*(*wc).__bindgen_anon_1.wr_cqe.cast::<SoftirqChain>() };
        // SAFETY: no requirements.
        if unsafe { bindings::rsiw_in_serving_softirq() } {
            this.in_softirq.fetch_add(1, Ordering::AcqRel);
        }
        this.completed.fetch_add(1, Ordering::AcqRel);
        if this.post().is_err() {
            this.failed.fetch_add(1, Ordering::AcqRel);
        }
    }
}
