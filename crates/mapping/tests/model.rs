//! Sequences of checkpoints with random deltas (inserts, overwrites, tombstones, overlays,
//! random versions, a file deleted on the way) against a `BTreeMap` model, with small merge
//! policies so that merges cascade. After each checkpoint: lookups of touched and untouched keys
//! and ranges over random bounds equal the model, versions included; so does the newest entry
//! the runs hold for a key, tombstones and their versions included (the model forgets its
//! tombstones when a checkpoint merges every run, as the merge does); the blocks of the live
//! stack and every block freed so far are exactly the blocks ever written, none in two places;
//! `check` passes. Freed blocks are overwritten with garbage and their slots reused at once, so
//! a stack that still named one would fail.

use std::collections::BTreeMap;
use std::sync::Arc;

use onesync_mapping::testing::SimSlots;
use onesync_mapping::{BlockRef, Cache, Key, Mapped, MergePolicy, Stack, Value, NO_SLOT};
use proptest::prelude::*;

/// The file a step may delete; from then on `keep` refuses its keys, and the model forgets
/// them (the store never looks a deleted file's pages up, nor writes them).
const DOOMED_FILE: u32 = 3;

#[derive(Clone, Debug)]
struct Put {
    slot: Option<u64>,
    crc: u32,
    /// (gap before the range, length, whether it is large)
    ranges: Vec<(u32, usize, bool)>,
}

#[derive(Clone, Debug)]
struct Step {
    /// Each changed key's new version, and its mapping (`None`: a tombstone).
    changes: BTreeMap<(u32, u64), (u64, Option<Put>)>,
    delete_file: bool,
    probes: Vec<(u32, u64)>,
    ranges: Vec<((u32, u64), (u32, u64))>,
}

fn key_strategy() -> impl Strategy<Value = (u32, u64)> {
    (0u32..5, 0u64..1500)
}

fn put_strategy() -> impl Strategy<Value = Put> {
    let range = (0u32..20, 1usize..12, prop::bool::weighted(0.05));
    (
        prop::option::weighted(0.9, any::<u64>().prop_map(|s| s % (1 << 40))),
        any::<u32>(),
        prop::collection::vec(range, 0..3),
    )
        .prop_map(|(slot, crc, ranges)| Put { slot, crc, ranges })
}

fn step_strategy() -> impl Strategy<Value = Step> {
    (
        prop::collection::btree_map(
            key_strategy(),
            (any::<u64>(), prop::option::weighted(0.8, put_strategy())),
            0..400,
        ),
        prop::bool::weighted(0.15),
        prop::collection::vec(key_strategy(), 30),
        prop::collection::vec((key_strategy(), key_strategy()), 4),
    )
        .prop_map(|(changes, delete_file, probes, ranges)| Step {
            changes,
            delete_file,
            probes,
            ranges,
        })
}

/// The mapping a `Put` stands for: its ranges laid out in order, those past the page left out.
fn mapped_of(put: &Put, seq: u64, slot_size: usize, seed: u64) -> Mapped {
    let mut overlay = Vec::new();
    let mut at = 0usize;
    for (i, &(gap, len, large)) in put.ranges.iter().enumerate() {
        // Ranges after the first need a gap: adjacent ranges are one range.
        let start = at + gap as usize + usize::from(i > 0 && gap == 0);
        let len = if large {
            slot_size.saturating_sub(start + 40).max(1)
        } else {
            len
        };
        if start + len > slot_size {
            break;
        }
        let bytes: Arc<[u8]> = (0..len).map(|b| (seed as usize + b) as u8).collect();
        overlay.push((start as u32, bytes));
        at = start + len;
    }
    Mapped::new(put.slot.unwrap_or(NO_SLOT), put.crc, seq, overlay)
}

fn key((file, page): (u32, u64)) -> Key {
    Key::new(file, page)
}

/// What the newest run holding `key` holds for it, tombstones included.
fn newest(stack: &Stack, key: Key, slots: &SimSlots, cache: &Cache) -> Option<Value> {
    stack
        .runs
        .iter()
        .find_map(|run| run.get(key, slots, cache).unwrap())
}

/// The mapping the model holds for `key`: none for a tombstone.
fn mapping(model: &BTreeMap<Key, Value>, key: Key) -> Option<&Mapped> {
    match model.get(&key) {
        Some(Value::Mapped(m)) => Some(m),
        _ => None,
    }
}

fn run_steps(slot_size: usize, policy: MergePolicy, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let slots = SimSlots::new(slot_size);
    let cache = Cache::new(32 << 10);
    let mut stack = Stack::default();
    // The newest entry of each key the stack holds one for, tombstones included.
    let mut model: BTreeMap<Key, Value> = BTreeMap::new();
    let mut freed_all: Vec<BlockRef> = Vec::new();
    let mut deleted = false;
    for (n, step) in steps.iter().enumerate() {
        if step.delete_file {
            deleted = true;
            model.retain(|k, _| k.file != DOOMED_FILE);
        }
        let forgotten = |k: &Key| deleted && k.file == DOOMED_FILE;
        let delta: Vec<(Key, Value)> = step
            .changes
            .iter()
            .map(|(&k, (seq, put))| {
                let value = match put {
                    Some(put) => Value::Mapped(mapped_of(put, *seq, slot_size, n as u64)),
                    None => Value::Dropped { seq: *seq },
                };
                (key(k), value)
            })
            .filter(|(k, _)| !forgotten(k))
            .collect();
        for (k, value) in &delta {
            model.insert(*k, value.clone());
        }
        let keep = |k: Key| !(deleted && k.file == DOOMED_FILE);
        let runs_before = stack.runs.len();
        let out = stack
            .checkpoint(delta, &keep, policy, &slots, &mut slots.sink())
            .map_err(|e| TestCaseError::fail(format!("step {n}: {e}")))?;
        if out.merged_runs == runs_before {
            // A merge into the oldest run (or onto nothing) drops every tombstone.
            model.retain(|_, v| matches!(v, Value::Mapped(_)));
        }
        for block in &out.freed {
            slots.free(*block);
        }
        freed_all.extend(&out.freed);
        stack = out.stack;

        // The stack stays as short as the policy allows.
        prop_assert!(
            stack.runs.len() <= policy.max_runs.max(1),
            "{} runs",
            stack.runs.len()
        );
        // A new run holds nothing of a deleted file.
        if deleted && out.written_slots > 0 {
            let doomed = Key::new(DOOMED_FILE, 0)..Key::new(DOOMED_FILE + 1, 0);
            let left = stack.runs[0]
                .iter_range(doomed.start, doomed.end, &slots, None)
                .count();
            prop_assert_eq!(left, 0, "keep let a deleted file's entries into the new run");
        }
        // Every placement is live or freed, exactly once. Counted, not collected as a set: a
        // freed slot reused for identical bytes is the same ref placed twice.
        let mut live: Vec<BlockRef> = Vec::new();
        for run in &stack.runs {
            live.extend(run.blocks(&slots, Some(&cache)).unwrap());
        }
        let count = |blocks: &mut dyn Iterator<Item = &BlockRef>| {
            let mut counts: BTreeMap<(u64, u32, u32), usize> = BTreeMap::new();
            for b in blocks {
                *counts.entry((b.slot, b.slots, b.crc)).or_default() += 1;
            }
            counts
        };
        let mut accounted = count(&mut live.iter().chain(&freed_all));
        accounted.retain(|_, n| *n > 0);
        prop_assert_eq!(accounted, count(&mut slots.placed().iter()));
        let live_slots: u64 = live.iter().map(|b| u64::from(b.slots)).sum();
        prop_assert_eq!(live_slots, slots.slots_in_use());

        let report = stack
            .check(&slots)
            .map_err(|e| TestCaseError::fail(format!("step {n}: {e}")))?;
        prop_assert_eq!(report.entries, stack.entries());
        prop_assert_eq!((report.runs, report.slots), (stack.runs.len(), live_slots));

        // Lookups of what changed and of keys picked at random.
        let touched = step.changes.keys().chain(&step.probes).map(|&k| key(k));
        for k in touched.filter(|k| !forgotten(k)) {
            let found = stack.get(k, &slots, &cache).unwrap();
            prop_assert_eq!(found.as_ref(), mapping(&model, k), "step {}: {}", n, k);
            let raw = newest(&stack, k, &slots, &cache);
            prop_assert_eq!(
                raw.as_ref(),
                model.get(&k),
                "step {}: the newest entry of {}",
                n,
                k
            );
        }
        for &(a, b) in &step.ranges {
            let (from, to) = (key(a).min(key(b)), key(a).max(key(b)));
            let got: Vec<(Key, Mapped)> = stack
                .range(from, to, &slots, Some(&cache))
                .map(|e| e.unwrap())
                .filter(|(k, _)| !forgotten(k))
                .collect();
            let expected: Vec<(Key, Mapped)> = model
                .range(from..to)
                .filter_map(|(k, v)| match v {
                    Value::Mapped(m) => Some((*k, m.clone())),
                    Value::Dropped { .. } => None,
                })
                .collect();
            prop_assert_eq!(got, expected, "step {}: range {}..{}", n, from, to);
        }
    }
    let bound = cache.stats().bytes;
    prop_assert!(bound <= 32 << 10, "the cache holds {bound} bytes");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn checkpoints_keep_the_stack_equal_to_a_model_and_every_block_accounted_for(
        slot_size in prop_oneof![Just(512usize), Just(4096)],
        ratio in 0u64..4,
        max_runs in 1usize..5,
        steps in prop::collection::vec(step_strategy(), 1..9),
    ) {
        run_steps(slot_size, MergePolicy { ratio, max_runs }, steps)?;
    }
}
