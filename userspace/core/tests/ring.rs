// SPDX-License-Identifier: GPL-2.0

//! `engine::ring::Ring` behaves as a `VecDeque` bounded by its number of slots under any
//! sequence of pushes, pops, front updates and clears, over arrays and over slices the
//! caller allocated (as the kernel's connections size theirs), empty ones included.

use proptest::prelude::*;
use rsiw_core::engine::ring::{Ring, Slots};
use std::collections::VecDeque;

const N: usize = 5;

proptest! {
    #[test]
    fn ring_is_a_bounded_fifo(ops in prop::collection::vec(0u8..5, 0..200)) {
        let ring: Ring<u32, [u32; N]> = Ring::new(0);
        prop_assert_eq!(ring.capacity(), N);
        check(ring, N, ops)?;
    }

    #[test]
    fn ring_over_allocated_slots_is_a_bounded_fifo(
        cap in 0usize..9,
        ops in prop::collection::vec(0u8..5, 0..200),
    ) {
        let ring: Ring<u32, Vec<u32>> = Ring::with_slots(vec![7; cap]);
        prop_assert_eq!(ring.capacity(), cap);
        check(ring, cap, ops)?;
    }
}

fn check<S: Slots<u32>>(
    mut ring: Ring<u32, S>,
    cap: usize,
    ops: Vec<u8>,
) -> Result<(), TestCaseError> {
    let mut model: VecDeque<u32> = VecDeque::new();
    for (i, op) in ops.into_iter().enumerate() {
        let v = i as u32 + 1;
        match op {
            0 => {
                let r = ring.push(v);
                if model.len() < cap {
                    prop_assert_eq!(r, Ok(()));
                    model.push_back(v);
                } else {
                    prop_assert_eq!(r, Err(v));
                }
            }
            1 => prop_assert_eq!(ring.pop(), model.pop_front()),
            2 => {
                if let Some(f) = ring.front_mut() {
                    *f += 1000;
                }
                if let Some(f) = model.front_mut() {
                    *f += 1000;
                }
            }
            3 => prop_assert_eq!(ring.pop_back(), model.pop_back()),
            _ => {
                if i % 7 == 0 {
                    ring.clear();
                    model.clear();
                }
            }
        }
        prop_assert_eq!(ring.len(), model.len());
        prop_assert_eq!(ring.is_empty(), model.is_empty());
        prop_assert_eq!(ring.front(), model.front());
        prop_assert_eq!(ring.back(), model.back());
    }
    Ok(())
}
