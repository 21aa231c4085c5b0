// SPDX-License-Identifier: GPL-2.0

//! KUnit suite `rsiw_verbs`: the pure parts of the QP code (WQE validation, the state
//! table, inline packing). The suite `rsiw_kverbs` (`crate::kverbs_test`) drives whole
//! objects through the RDMA core.

#[kernel::prelude::kunit_tests(rsiw_verbs)]
mod suite {
    use crate::abi::WrOpcode;
    use crate::abi::{Rqe, Sge, Sqe};
    use crate::limits::{MAX_INLINE, MAX_SGE};
    use crate::qp::post::pack_inline;
    use crate::qp::state::{closed_or_closing, transition_allowed, State};
    use crate::qp::{INLINE, SIGNALLED, VALID};
    use crate::sys::bindings as b;
    use crate::sys::Pod;
    use crate::wqe::{decode_rqe, decode_sqe, flush_opcode, BadWqe, SqSlot};

    fn sqe(op: u32, flags: u16, num_sge: u8, len0: u32) -> Sqe {
        let mut s = Sqe::zeroed();
        s.opcode = op as u8;
        s.flags = flags | VALID;
        s.num_sge = num_sge;
        let mut g = [Sge::zeroed(); MAX_SGE as usize];
        g[0].length = len0;
        s.__bindgen_anon_2.sge = g;
        s
    }

    fn reason(r: Result<crate::wqe::SendWqe, crate::wqe::BadSqe>) -> Option<BadWqe> {
        r.err().map(|b| b.reason)
    }

    #[test]
    fn hostile_user_sqes_are_refused() {
        let at = SqSlot::at(7);
        // What user space may post.
        for op in [
            b::siw_opcode_SIW_OP_WRITE,
            b::siw_opcode_SIW_OP_READ,
            b::siw_opcode_SIW_OP_SEND,
            b::siw_opcode_SIW_OP_SEND_REMOTE_INV,
        ] {
            assert!(decode_sqe(&sqe(op, 0, 1, 8), false, at).is_ok());
        }
        // Kernel-only, unsupported (atomics, immediate data) and garbage opcodes.
        for op in [
            b::siw_opcode_SIW_OP_INVAL_STAG,
            b::siw_opcode_SIW_OP_REG_MR,
            b::siw_opcode_SIW_OP_FETCH_AND_ADD,
            b::siw_opcode_SIW_OP_SEND_WITH_IMM,
            b::siw_opcode_SIW_OP_RECEIVE,
            b::siw_opcode_SIW_OP_READ_RESPONSE,
            200,
        ] {
            assert!(matches!(
                reason(decode_sqe(&sqe(op, 0, 1, 8), false, at)),
                Some(BadWqe::Opcode(_))
            ));
        }
        assert!(decode_sqe(&sqe(b::siw_opcode_SIW_OP_REG_MR, 0, 0, 0), true, at).is_ok());
        // The refusal names the WQE and an opcode the user library can index.
        let bad = decode_sqe(&sqe(200, 0, 1, 8), false, at).err();
        assert_eq!(bad.map(|b| (b.slot, b.opcode)), Some((at, WrOpcode::Send)));
        // Too many SGEs, too much inline data; the limits themselves are fine.
        let send = b::siw_opcode_SIW_OP_SEND;
        assert_eq!(
            reason(decode_sqe(&sqe(send, 0, 7, 8), false, at)),
            Some(BadWqe::NumSge(7))
        );
        assert_eq!(
            reason(decode_sqe(&sqe(send, 0, 255, 8), false, at)),
            Some(BadWqe::NumSge(255))
        );
        let ok = decode_sqe(&sqe(send, 0, 6, 8), false, at).ok();
        assert_eq!(ok.map(|w| w.sges().len()), Some(6));
        assert_eq!(
            reason(decode_sqe(&sqe(send, INLINE, 1, MAX_INLINE + 1), false, at)),
            Some(BadWqe::Inline(81))
        );
        // SGEs beyond the longest message (4 GiB - 1 octets); up to it, and SGEs past
        // num_sge, are fine.
        let mut long = sqe(send, 0, 2, 0);
        let mut g = [Sge::zeroed(); MAX_SGE as usize];
        g[0].length = u32::MAX / 2 + 1;
        g[1].length = u32::MAX / 2 + 1;
        long.__bindgen_anon_2.sge = g;
        assert_eq!(
            reason(decode_sqe(&long, false, at)),
            Some(BadWqe::Length(u64::from(u32::MAX) + 1))
        );
        g[1].length = u32::MAX / 2;
        g[2].length = u32::MAX;
        long.__bindgen_anon_2.sge = g;
        assert!(decode_sqe(&long, false, at).is_ok());
        // Inline WQEs keep the caller's SGE count (the siw library writes it): ignored.
        let ok = decode_sqe(&sqe(send, INLINE, 9, MAX_INLINE), false, at).ok();
        assert_eq!(
            ok.map(|w| (w.sges().len(), w.inline_data().map(|d| d.as_slice().len()))),
            Some((0, Some(80)))
        );
    }

    #[test]
    fn completion_record_keeps_what_completing_needs() {
        let at = SqSlot::at(3);
        let with_keys = |op, flags, n: u8| {
            let mut s = sqe(op, flags, n, 64);
            s.id = 0xfeed;
            let mut g = [Sge::zeroed(); MAX_SGE as usize];
            for (i, e) in g.iter_mut().enumerate().take(usize::from(n)) {
                e.length = 64;
                e.lkey = 0x100 + i as u32;
            }
            s.__bindgen_anon_2.sge = g;
            decode_sqe(&s, true, at).ok().map(|w| w.done())
        };
        // An RDMA Read with Local Invalidate names its one sink SGE's STag.
        let d = with_keys(b::siw_opcode_SIW_OP_READ_LOCAL_INV, SIGNALLED, 1);
        assert_eq!(
            d.map(|d| (d.id, d.opcode, d.signalled(), d.local_inval)),
            Some((0xfeed, WrOpcode::ReadLocalInv, true, Some(0x100)))
        );
        // Nothing to invalidate with two sink SGEs, or for a plain Read or a Send.
        let none = |op, n| with_keys(op, 0, n).map(|d| (d.signalled(), d.local_inval));
        assert_eq!(
            none(b::siw_opcode_SIW_OP_READ_LOCAL_INV, 2),
            Some((false, None))
        );
        assert_eq!(none(b::siw_opcode_SIW_OP_READ, 1), Some((false, None)));
        assert_eq!(none(b::siw_opcode_SIW_OP_SEND, 1), Some((false, None)));
    }

    #[test]
    fn hostile_rqes_are_refused() {
        let mut r = Rqe::zeroed();
        r.id = 42;
        r.num_sge = MAX_SGE as u8;
        assert_eq!(
            decode_rqe(&r).ok().map(|w| (w.id, w.sges().len())),
            Some((42, 6))
        );
        r.num_sge = 7;
        assert_eq!(
            decode_rqe(&r).err().map(|b| (b.id, b.num_sge)),
            Some((42, 7))
        );
    }

    #[test]
    fn flushed_garbage_opcodes_stay_in_the_abi_table() {
        let same = |op: u32| flush_opcode(op as u8).raw() == op as u8;
        assert!(same(b::siw_opcode_SIW_OP_WRITE));
        assert!(same(b::siw_opcode_SIW_OP_RECEIVE));
        assert!(same(b::siw_opcode_SIW_OP_READ_RESPONSE));
        assert!(same(b::siw_opcode_SIW_OP_REG_MR));
        let send = WrOpcode::Send;
        assert_eq!(flush_opcode(b::siw_opcode_SIW_NUM_OPCODES as u8), send);
        assert_eq!(flush_opcode(99), send);
        assert_eq!(flush_opcode(255), send);
    }

    #[test]
    fn state_transitions() {
        use State::*;
        let ok = [
            (Reset, Init),
            (Init, Init),
            (Init, Rtr),
            (Rtr, Rtr),
            (Reset, Error),
            (Init, Error),
            (Rtr, Error),
            (Error, Error),
            (Error, Reset),
            (Init, Reset),
            (Reset, Reset),
            (Rts, Rts),
            (Rts, Error),
        ];
        for (a, z) in ok {
            assert!(transition_allowed(a, z));
        }
        let bad = [
            (Reset, Rtr),
            (Reset, Rts),
            (Init, Rts),
            (Rtr, Rts),
            (Rtr, Init),
            (Error, Init),
            (Error, Rts),
            (Rts, Reset),
            (Rts, Init),
        ];
        for (a, z) in bad {
            assert!(!transition_allowed(a, z));
        }
    }

    #[test]
    fn graceful_disconnect_without_a_connection() {
        use State::*;
        // Closed, or closing: the connection detached itself and the QP is about to
        // enter ERROR (a disconnect that raced the peer's close).
        assert!(closed_or_closing(Error));
        assert!(closed_or_closing(Rts));
        // Never connected: the disconnect is refused.
        for s in [Reset, Init, Rtr] {
            assert!(!closed_or_closing(s));
        }
    }

    #[test]
    fn inline_data_lands_in_sge_1_onwards() {
        let data: [u8; MAX_INLINE as usize] = core::array::from_fn(|i| i as u8 ^ 0x5a);
        let mut sges = [Sge::zeroed(); MAX_SGE as usize];
        pack_inline(&mut sges, &data);
        let mut back = [0u8; MAX_INLINE as usize];
        for (k, s) in sges[1..].iter().enumerate() {
            back[k * 16..k * 16 + 8].copy_from_slice(&s.laddr.to_ne_bytes());
            back[k * 16 + 8..k * 16 + 12].copy_from_slice(&s.length.to_ne_bytes());
            back[k * 16 + 12..k * 16 + 16].copy_from_slice(&s.lkey.to_ne_bytes());
        }
        assert_eq!(back, data);
        // And the TX path's view of it: `inline_data` unpacks what `pack_inline` packed.
        let mut raw = sqe(b::siw_opcode_SIW_OP_SEND, INLINE, 1, 13);
        pack_inline(&mut sges, &data[..13]);
        sges[0].length = 13;
        raw.__bindgen_anon_2.sge = sges;
        let wqe = decode_sqe(&raw, false, SqSlot::at(0)).ok();
        let got = wqe.and_then(|w| w.inline_data());
        assert_eq!(got.as_ref().map(|d| d.as_slice()), Some(&data[..13]));
    }
}
