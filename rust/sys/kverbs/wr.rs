// SPDX-License-Identifier: GPL-2.0

//! Work requests as the posting verbs take them: the consumer's description ([`SendReq`],
//! [`RecvReq`] over [`Sge`]s) turned into the core's linked lists of `ib_send_wr` and
//! `ib_recv_wr`, with the index of the first request the provider did not post.

use crate::sys::bindings;
use crate::sys::Pod;
use kernel::ffi::c_int;
use kernel::prelude::*;

// SAFETY: integers, raw pointers, nullable function pointers and unions of those.
unsafe impl Pod for bindings::ib_rdma_wr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_recv_wr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_send_wr {}
// SAFETY: as above.
unsafe impl Pod for bindings::ib_sge {}

/// One scatter/gather element: `len` octets at kernel virtual address `addr`, `lkey`.
#[derive(Clone, Copy)]
pub(crate) struct Sge {
    /// Kernel virtual address (rsiw uses virtual DMA).
    pub(crate) addr: u64,
    /// Length in octets.
    pub(crate) len: u32,
    /// Local key.
    pub(crate) lkey: u32,
}

/// A send work request.
pub(crate) struct SendReq<'a> {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// `IB_WR_*`.
    pub(crate) opcode: bindings::ib_wr_opcode,
    /// `IB_SEND_*`.
    pub(crate) flags: u32,
    /// The local buffers.
    pub(crate) sges: &'a [Sge],
    /// Remote address and key (RDMA WRITE/READ); the key is the STag to invalidate for
    /// LOCAL_INV and SEND_WITH_INV.
    pub(crate) rdma: (u64, u32),
}

/// A receive work request.
pub(crate) struct RecvReq<'a> {
    /// The consumer's `wr_id`.
    pub(crate) id: u64,
    /// The buffers.
    pub(crate) sges: &'a [Sge],
}

/// A failed post: the error and the index of the first request not posted.
pub(crate) type PostFail = (Error, usize);

/// Builds the core's SGE array for all requests, in order.
fn sge_array<'a>(lists: impl Iterator<Item = &'a [Sge]>) -> Result<KVec<bindings::ib_sge>> {
    let mut v = KVec::new();
    for l in lists {
        for s in l {
            v.push(
                bindings::ib_sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                },
                GFP_KERNEL,
            )?;
        }
    }
    Ok(v)
}

/// Returns the index of `bad` in `list` (`list.len()` if absent).
fn index_of<W>(list: &[W], bad: *const W) -> usize {
    list.iter()
        .position(|w| core::ptr::eq(w, bad))
        .unwrap_or(list.len())
}

/// The core's send WR for `r`, whose SGEs start at `sg_list`.
fn rdma_wr(r: &SendReq<'_>, sg_list: *mut bindings::ib_sge) -> bindings::ib_rdma_wr {
    let mut w = bindings::ib_rdma_wr::zeroed();
    w.wr.__bindgen_anon_1.wr_id = r.id;
    w.wr.opcode = r.opcode;
    w.wr.send_flags = r.flags as c_int;
    w.wr.num_sge = r.sges.len() as c_int;
    w.wr.sg_list = sg_list;
    (w.remote_addr, w.rkey) = r.rdma;
    if matches!(
        r.opcode,
        bindings::ib_wr_opcode_IB_WR_LOCAL_INV | bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV
    ) {
        w.wr.ex.invalidate_rkey = r.rdma.1;
    }
    w
}

/// Builds a linked list of send WRs over the requests' SGEs and posts it with `post`.
pub(super) fn post_send_list(
    reqs: &[SendReq<'_>],
    post: impl FnOnce(*const bindings::ib_send_wr, *mut *const bindings::ib_send_wr) -> c_int,
) -> Result<(), PostFail> {
    let mut sges = sge_array(reqs.iter().map(|r| r.sges)).map_err(|e| (e, 0))?;
    let mut wrs = KVec::with_capacity(reqs.len(), GFP_KERNEL).map_err(|e| (e.into(), 0))?;
    let mut at = 0;
    for r in reqs {
        // In bounds: `sges` holds every request's SGEs in order.
        let w = rdma_wr(r, sges.as_mut_ptr().wrapping_add(at));
        at += r.sges.len();
        wrs.push(w, GFP_KERNEL).map_err(|e| (e.into(), 0))?;
    }
    // Linked after all pushes: the vector no longer moves. `wr` is the first member of
    // `ib_rdma_wr`, so a pointer to one is a pointer to the other.
    let base = wrs.as_mut_ptr();
    for i in 1..wrs.len() {
        wrs[i - 1].wr.next = base.wrapping_add(i).cast::<bindings::ib_send_wr>();
    }
    let head: *const bindings::ib_send_wr = if wrs.is_empty() {
        core::ptr::null()
    } else {
        wrs.as_ptr().cast()
    };
    let mut bad: *const bindings::ib_send_wr = core::ptr::null();
    match post(head, &mut bad) {
        0 => Ok(()),
        e => Err((Error::from_errno(e), index_of(&wrs, bad.cast()))),
    }
}

/// Builds a linked list of receive WRs over the requests' SGEs and posts it with `post`.
pub(super) fn post_recv_list(
    reqs: &[RecvReq<'_>],
    post: impl FnOnce(*const bindings::ib_recv_wr, *mut *const bindings::ib_recv_wr) -> c_int,
) -> Result<(), PostFail> {
    let mut sges = sge_array(reqs.iter().map(|r| r.sges)).map_err(|e| (e, 0))?;
    let mut wrs = KVec::with_capacity(reqs.len(), GFP_KERNEL).map_err(|e| (e.into(), 0))?;
    let mut at = 0;
    for r in reqs {
        let mut wr = bindings::ib_recv_wr::zeroed();
        wr.__bindgen_anon_1.wr_id = r.id;
        wr.num_sge = r.sges.len() as c_int;
        // In bounds: `sges` holds every request's SGEs in order.
        wr.sg_list = sges.as_mut_ptr().wrapping_add(at);
        at += r.sges.len();
        wrs.push(wr, GFP_KERNEL).map_err(|e| (e.into(), 0))?;
    }
    // Linked after all pushes: the vector no longer moves.
    let base = wrs.as_mut_ptr();
    for i in 1..wrs.len() {
        wrs[i - 1].next = base.wrapping_add(i);
    }
    let mut bad: *const bindings::ib_recv_wr = core::ptr::null();
    let head = if wrs.is_empty() {
        core::ptr::null()
    } else {
        wrs.as_ptr()
    };
    match post(head, &mut bad) {
        0 => Ok(()),
        e => Err((Error::from_errno(e), index_of(&wrs, bad))),
    }
}
