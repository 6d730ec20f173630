//! Helpers the test files share: values, runs and stacks over a simulated slot space.
#![allow(dead_code)] // each test file uses some

use std::sync::Arc;

use onesync_mapping::testing::SimSlots;
use onesync_mapping::{CheckpointOutcome, Key, Mapped, MergePolicy, RunBuilder, RunRef, Stack, Value};

pub fn mapped(slot: u64, crc: u32, seq: u64, overlay: &[(u32, &[u8])]) -> Mapped {
    Mapped::new(
        slot,
        crc,
        seq,
        overlay.iter().map(|(o, b)| (*o, Arc::from(*b))).collect(),
    )
}

/// The value the tests give key `key` in generation `generation`: a slot and a version that
/// tell both apart, a CRC that tells generations apart, and on every third page a small overlay.
pub fn value_of(key: Key, generation: u64) -> Mapped {
    let slot = key.page * 1000 + u64::from(key.file) * 7 + generation;
    let seq = (generation << 40) + (u64::from(key.file) << 32) + key.page;
    if key.page.is_multiple_of(3) {
        mapped(slot, generation as u32, seq, &[(4, &[generation as u8, 1, 2])])
    } else {
        mapped(slot, generation as u32, seq, &[])
    }
}

/// One run of `keys` (sorted), each mapped to `value_of(key, 0)`.
pub fn build_run(slots: &SimSlots, keys: &[Key]) -> RunRef {
    let mut sink = slots.sink();
    let mut builder = RunBuilder::new(onesync_mapping::BlockIo::slot_size(slots));
    for &key in keys {
        builder
            .push(key, Value::Mapped(value_of(key, 0)), &mut sink)
            .unwrap();
    }
    builder.finish(&mut sink).unwrap().unwrap()
}

/// A stack of one run holding `keys`, written by one checkpoint onto an empty stack.
pub fn bulk_stack(slots: &SimSlots, keys: &[Key]) -> Stack {
    let delta = keys.iter().map(|&k| (k, Value::Mapped(value_of(k, 0)))).collect();
    let out = Stack::default()
        .checkpoint(delta, &|_| true, MergePolicy::DEFAULT, slots, &mut slots.sink())
        .unwrap();
    out.stack
}

/// A checkpoint of `delta` that merges every run of `stack`, the blocks it replaced freed at
/// once (overwritten, so that a stale read of one fails its CRC).
pub fn merge_all_and_free(stack: &Stack, delta: Vec<(Key, Value)>, slots: &SimSlots) -> CheckpointOutcome {
    let all = MergePolicy {
        ratio: 1,
        max_runs: 1,
    };
    let out = stack
        .checkpoint(delta, &|_| true, all, slots, &mut slots.sink())
        .unwrap();
    for block in &out.freed {
        slots.free(*block);
    }
    out
}
