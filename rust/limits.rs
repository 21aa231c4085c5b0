// SPDX-License-Identifier: GPL-2.0

//! Limits: the sizes rsiw grants (queue depths, SGEs, inline data, fast-registration pages,
//! IRD/ORD), which the device reports in `query_device`, and how many user contexts, PDs,
//! CQs, QPs, SRQs and MRs a device may hold at once (module parameters `max_ucontext`,
//! `max_pd`, `max_cq`, `max_qp`, `max_srq`, `max_mr`, read when an object is created).

use crate::abi::Sge;
use crate::logtag::Tag;
use crate::sys::bindings as b;
use crate::sys::ibdev::{DeviceOps, IbDevice};
use crate::sys::pr_err_ratelimited;
use core::sync::atomic::{AtomicU32, Ordering};

/// The largest CQ depth rsiw grants, in CQEs (a power of two, above the C siw's 3276800;
/// 128 MiB of ring).
pub(crate) const MAX_CQE: u32 = 1 << 22;

/// The deepest SQ or RQ rsiw grants, in WRs (a power of two, the C siw's 32768).
pub(crate) const MAX_QP_WR: u32 = 1 << 15;

/// The deepest SRQ rsiw grants, in WRs (a power of two, above the C siw's 327680).
pub(crate) const MAX_SRQ_WR: u32 = 1 << 19;

/// SGEs per work request (the siw ABI's fixed array).
pub(crate) const MAX_SGE: u32 = b::SIW_MAX_SGE;

/// The longest message, in octets (the port's `max_msg_sz`: 4 GiB - 1, what DDP's
/// 32-bit MO can address and a completion's 32-bit length can report).
pub(crate) const MAX_MSG_SZ: u32 = u32::MAX;

/// Inline data per send WQE, in octets: it occupies `sge[1..]` (`SIW_MAX_INLINE`).
pub(crate) const MAX_INLINE: u32 = (core::mem::size_of::<Sge>() as u32) * (MAX_SGE - 1);

/// The most pages a fast-registration MR can map.
pub(crate) const MAX_FRMR_PAGES: u32 = 256;

/// The most inbound and outbound RDMA Read Requests a connection allows (IRD and ORD
/// ceilings; the device advertises them as `max_qp_rd_atom`/`max_qp_init_rd_atom`): the
/// protocol core's ORQ holds this many Reads.
pub(crate) const MAX_IRD_ORD: u32 = crate::engine::orq::MAX_ORD;

/// The kinds of object a device counts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Object {
    /// User contexts (`alloc_ucontext`).
    Ucontext,
    /// Protection domains.
    Pd,
    /// Completion queues.
    Cq,
    /// Queue pairs.
    Qp,
    /// Shared receive queues.
    Srq,
    /// Memory regions.
    Mr,
}

const OBJECTS: usize = 6;

impl Object {
    /// The name a limit message uses, and the module parameter that sets the limit.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Self::Ucontext => ("user context", "max_ucontext"),
            Self::Pd => ("protection domain", "max_pd"),
            Self::Cq => ("CQ", "max_cq"),
            Self::Qp => ("QP", "max_qp"),
            Self::Srq => ("SRQ", "max_srq"),
            Self::Mr => ("MR", "max_mr"),
        }
    }

    /// The limit: the module parameter's current value.
    pub(crate) fn limit(self) -> u32 {
        use crate::module_parameters as p;
        match self {
            Self::Ucontext => p::max_ucontext.value(),
            Self::Pd => p::max_pd.value(),
            Self::Cq => p::max_cq.value(),
            Self::Qp => p::max_qp.value(),
            Self::Srq => p::max_srq.value(),
            Self::Mr => p::max_mr.value(),
        }
    }
}

/// The number of live objects of each kind on one device.
pub(crate) struct Counts([AtomicU32; OBJECTS]);

impl Counts {
    /// No objects.
    pub(crate) const fn new() -> Self {
        Self([const { AtomicU32::new(0) }; OBJECTS])
    }

    /// Takes one unit of `obj` for an object being created on `dev` (the device these
    /// counts belong to); the returned [`Slot`] gives it back on drop unless [`Slot::keep`]
    /// says the object exists.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if the device holds the limit's number of such objects already, with a
    /// rate-limited message naming the device and the module parameter.
    pub(crate) fn take<D: DeviceOps>(
        &self,
        obj: Object,
        dev: &IbDevice<D>,
    ) -> Result<Slot<'_>, kernel::error::Error> {
        let limit = obj.limit();
        let counter = &self.0[obj as usize];
        let taken = counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            let (name, param) = obj.names();
            pr_err_ratelimited!(
                "{}: {name} limit reached ({limit}); see module parameter {param}\n",
                Tag::new(dev, None, None)
            );
            return Err(kernel::error::code::ENOMEM);
        }
        Ok(Slot(Some(counter)))
    }

    /// Gives back the unit of a destroyed object of kind `obj`.
    pub(crate) fn give_back(&self, obj: Object) {
        self.0[obj as usize].fetch_sub(1, Ordering::AcqRel);
    }
}

/// A unit taken with [`Counts::take`], given back on drop unless kept.
pub(crate) struct Slot<'a>(Option<&'a AtomicU32>);

impl Slot<'_> {
    /// The object was created: the unit stays taken (its destroy gives it back).
    pub(crate) fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
