// SPDX-License-Identifier: GPL-2.0

//! The siw user ABI's vocabulary as Rust types (`include/uapi/rdma/siw-abi.h`): work request
//! opcodes, WQE flags and completion statuses, and what the RDMA core calls them
//! (`ib_wc_opcode`, `ib_wc_status`). User space's rdma-core siw provider reads and writes
//! these values in the rings it shares with rsiw; kernel consumers see the RDMA core's.

use crate::sys::bindings as b;

/// A work request opcode (`enum siw_opcode`): what an SQE asks for, or what a CQE reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum WrOpcode {
    /// RDMA Write.
    Write = b::siw_opcode_SIW_OP_WRITE as u8,
    /// RDMA Read.
    Read = b::siw_opcode_SIW_OP_READ as u8,
    /// RDMA Read, then invalidate the local sink STag.
    ReadLocalInv = b::siw_opcode_SIW_OP_READ_LOCAL_INV as u8,
    /// Send.
    Send = b::siw_opcode_SIW_OP_SEND as u8,
    /// Send with immediate data.
    SendWithImm = b::siw_opcode_SIW_OP_SEND_WITH_IMM as u8,
    /// Send with Invalidate of the peer's STag `rkey`.
    SendRemoteInv = b::siw_opcode_SIW_OP_SEND_REMOTE_INV as u8,
    /// Atomic Fetch and Add.
    FetchAndAdd = b::siw_opcode_SIW_OP_FETCH_AND_ADD as u8,
    /// Atomic Compare and Swap.
    CompAndSwap = b::siw_opcode_SIW_OP_COMP_AND_SWAP as u8,
    /// A receive (RQE and its CQE).
    Receive = b::siw_opcode_SIW_OP_RECEIVE as u8,
    /// Read Response (provider internal).
    ReadResponse = b::siw_opcode_SIW_OP_READ_RESPONSE as u8,
    /// Local invalidate (kernel consumers only).
    InvalStag = b::siw_opcode_SIW_OP_INVAL_STAG as u8,
    /// Fast registration (kernel consumers only).
    RegMr = b::siw_opcode_SIW_OP_REG_MR as u8,
}

impl WrOpcode {
    /// Every opcode, in ABI order (`SIW_NUM_OPCODES` of them).
    const ALL: [Self; 12] = [
        Self::Write,
        Self::Read,
        Self::ReadLocalInv,
        Self::Send,
        Self::SendWithImm,
        Self::SendRemoteInv,
        Self::FetchAndAdd,
        Self::CompAndSwap,
        Self::Receive,
        Self::ReadResponse,
        Self::InvalStag,
        Self::RegMr,
    ];

    /// The opcode of the ABI value `op`, or `None` for a value the ABI does not define.
    pub(crate) fn from_raw(op: u8) -> Option<Self> {
        // Decoded for every SQE: an index, not a search (ALL is in ABI order; the check
        // keeps a misordered table from answering wrong).
        Self::ALL
            .get(usize::from(op))
            .copied()
            .filter(|o| o.raw() == op)
    }

    /// The ABI value (the `opcode` octet of an SQE or CQE).
    pub(crate) const fn raw(self) -> u8 {
        self as u8
    }

    /// RDMA Read, with or without local invalidation.
    pub(crate) const fn is_read(self) -> bool {
        matches!(self, Self::Read | Self::ReadLocalInv)
    }

    /// The RDMA core's name for a completion of this opcode (`ib_wc_opcode`).
    pub(crate) const fn wc_opcode(self) -> b::ib_wc_opcode {
        match self {
            Self::Write => b::ib_wc_opcode_IB_WC_RDMA_WRITE,
            Self::Read | Self::ReadLocalInv => b::ib_wc_opcode_IB_WC_RDMA_READ,
            Self::CompAndSwap => b::ib_wc_opcode_IB_WC_COMP_SWAP,
            Self::FetchAndAdd => b::ib_wc_opcode_IB_WC_FETCH_ADD,
            Self::InvalStag => b::ib_wc_opcode_IB_WC_LOCAL_INV,
            Self::RegMr => b::ib_wc_opcode_IB_WC_REG_MR,
            Self::Receive => b::ib_wc_opcode_IB_WC_RECV,
            Self::Send | Self::SendWithImm | Self::SendRemoteInv | Self::ReadResponse => {
                b::ib_wc_opcode_IB_WC_SEND
            }
        }
    }
}

/// A completion status (`enum siw_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum WcStatus {
    /// The work request completed.
    Success = b::siw_wc_status_SIW_WC_SUCCESS as u8,
    /// A local length error (e.g. a receive too short for the message).
    LocLenErr = b::siw_wc_status_SIW_WC_LOC_LEN_ERR as u8,
    /// A local protection error (an SGE the local STag table refused).
    LocProtErr = b::siw_wc_status_SIW_WC_LOC_PROT_ERR as u8,
    /// A malformed work request.
    LocQpOpErr = b::siw_wc_status_SIW_WC_LOC_QP_OP_ERR as u8,
    /// Flushed: the QP entered ERROR first.
    WrFlushErr = b::siw_wc_status_SIW_WC_WR_FLUSH_ERR as u8,
    /// A bad response from the peer.
    BadRespErr = b::siw_wc_status_SIW_WC_BAD_RESP_ERR as u8,
    /// A local access error.
    LocAccessErr = b::siw_wc_status_SIW_WC_LOC_ACCESS_ERR as u8,
    /// The peer refused the access.
    RemAccessErr = b::siw_wc_status_SIW_WC_REM_ACCESS_ERR as u8,
    /// The peer refused the request as invalid.
    RemInvReqErr = b::siw_wc_status_SIW_WC_REM_INV_REQ_ERR as u8,
    /// Any other error.
    GeneralErr = b::siw_wc_status_SIW_WC_GENERAL_ERR as u8,
}

impl WcStatus {
    /// Every status, in ABI order (`SIW_NUM_WC_STATUS` of them).
    const ALL: [Self; 10] = [
        Self::Success,
        Self::LocLenErr,
        Self::LocProtErr,
        Self::LocQpOpErr,
        Self::WrFlushErr,
        Self::BadRespErr,
        Self::LocAccessErr,
        Self::RemAccessErr,
        Self::RemInvReqErr,
        Self::GeneralErr,
    ];

    /// The status of the ABI value `st`, or `None` for a value the ABI does not define.
    pub(crate) fn from_raw(st: u16) -> Option<Self> {
        // Decoded for every kernel CQE polled: an index, as for `WrOpcode::from_raw`.
        Self::ALL
            .get(usize::from(st))
            .copied()
            .filter(|s| s.raw() == st)
    }

    /// The ABI value (the 16-bit `status` field of a CQE).
    pub(crate) const fn raw(self) -> u16 {
        self as u16
    }

    /// The RDMA core's name for this status (`ib_wc_status`).
    pub(crate) const fn ib(self) -> b::ib_wc_status {
        match self {
            Self::Success => b::ib_wc_status_IB_WC_SUCCESS,
            Self::LocLenErr => b::ib_wc_status_IB_WC_LOC_LEN_ERR,
            Self::LocProtErr => b::ib_wc_status_IB_WC_LOC_PROT_ERR,
            Self::LocQpOpErr => b::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
            Self::WrFlushErr => b::ib_wc_status_IB_WC_WR_FLUSH_ERR,
            Self::BadRespErr => b::ib_wc_status_IB_WC_BAD_RESP_ERR,
            Self::LocAccessErr => b::ib_wc_status_IB_WC_LOC_ACCESS_ERR,
            Self::RemAccessErr => b::ib_wc_status_IB_WC_REM_ACCESS_ERR,
            Self::RemInvReqErr => b::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
            Self::GeneralErr => b::ib_wc_status_IB_WC_GENERAL_ERR,
        }
    }
}

/// WQE and CQE flags (`enum siw_wqe_flags`), as the 16-bit `flags` field of an SQE, RQE
/// or CQE holds them.
pub(crate) mod wqe_flags {
    use crate::sys::bindings as b;

    /// The slot holds a posted WQE (or a CQE the consumer has not reaped).
    pub(crate) const VALID: u16 = b::siw_wqe_flags_SIW_WQE_VALID as u16;
    /// The send WQE carries its data inline, in `sge[1..]`.
    pub(crate) const INLINE: u16 = b::siw_wqe_flags_SIW_WQE_INLINE as u16;
    /// A successful completion is reported.
    pub(crate) const SIGNALLED: u16 = b::siw_wqe_flags_SIW_WQE_SIGNALLED as u16;
    /// The message asks for a solicited event at the peer.
    pub(crate) const SOLICITED: u16 = b::siw_wqe_flags_SIW_WQE_SOLICITED as u16;
    /// Wait for outstanding RDMA Reads first.
    pub(crate) const READ_FENCE: u16 = b::siw_wqe_flags_SIW_WQE_READ_FENCE as u16;
    /// The CQE reports a Send with Invalidate (`inval_stag` names the STag).
    pub(crate) const REM_INVAL: u16 = b::siw_wqe_flags_SIW_WQE_REM_INVAL as u16;
}

/// A send queue element as the SQ ring holds it (`struct siw_sqe`). A user QP's ring is
/// written by user space: decode a copy ([`crate::wqe::decode_sqe`]), never the slot.
pub(crate) type Sqe = b::siw_sqe;

/// A receive queue element as the RQ and SRQ rings hold it (`struct siw_rqe`).
pub(crate) type Rqe = b::siw_rqe;

/// A completion queue element as the CQ ring holds it (`struct siw_cqe`).
pub(crate) type RingCqe = b::siw_cqe;

/// A scatter/gather element of a WQE (`struct siw_sge`): address, length in octets and
/// STag (lkey).
pub(crate) type Sge = b::siw_sge;

/// The response to `alloc_ucontext` (`struct siw_uresp_alloc_ctx`).
pub(crate) type AllocCtxResp = b::siw_uresp_alloc_ctx;

/// The response to `create_cq` (`struct siw_uresp_create_cq`): CQ id, depth, mmap key.
pub(crate) type CreateCqResp = b::siw_uresp_create_cq;

/// The response to `create_qp` (`struct siw_uresp_create_qp`): QP number, depths, keys.
pub(crate) type CreateQpResp = b::siw_uresp_create_qp;

/// The response to `create_srq` (`struct siw_uresp_create_srq`): depth, mmap key.
pub(crate) type CreateSrqResp = b::siw_uresp_create_srq;

/// The request of `reg_mr` (`struct siw_ureq_reg_mr`): the STag key user space chose.
pub(crate) type RegMrReq = b::siw_ureq_reg_mr;

/// The response to `reg_mr` (`struct siw_uresp_reg_mr`): the STag.
pub(crate) type RegMrResp = b::siw_uresp_reg_mr;

/// The arm states of a CQ's control word (`enum siw_notify_flags`), which user space
/// writes for user CQs.
pub(crate) mod notify {
    use super::b;

    /// Not armed.
    pub(crate) const NOT: u32 = b::siw_notify_flags_SIW_NOTIFY_NOT;
    /// Armed for the next solicited (or failed) completion.
    pub(crate) const SOLICITED: u32 = b::siw_notify_flags_SIW_NOTIFY_SOLICITED;
    /// Armed for the next completion.
    pub(crate) const NEXT_COMPLETION: u32 = b::siw_notify_flags_SIW_NOTIFY_NEXT_COMPLETION;
}

/// Memory access rights (`enum ib_access_flags`), as `reg_mr`, REG_MR work requests and
/// `modify_qp` carry them.
pub(crate) mod access {
    use super::b;

    /// The local side may write (receives, Read Response sinks).
    pub(crate) const LOCAL_WRITE: u32 = b::ib_access_flags_IB_ACCESS_LOCAL_WRITE;
    /// Peers may RDMA Write.
    pub(crate) const REMOTE_WRITE: u32 = b::ib_access_flags_IB_ACCESS_REMOTE_WRITE;
    /// Peers may RDMA Read.
    pub(crate) const REMOTE_READ: u32 = b::ib_access_flags_IB_ACCESS_REMOTE_READ;
    /// Peers may use atomics (never granted on iWARP MRs).
    pub(crate) const REMOTE_ATOMIC: u32 = b::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC;
    /// On-demand paging (not supported).
    pub(crate) const ON_DEMAND: u32 = b::ib_access_flags_IB_ACCESS_ON_DEMAND;
}
