//! Runs and stacks, one behaviour at a time: building, lookups, iteration, block lists, the
//! merge policy, and what a checkpoint refuses.

mod support;

use onesync_mapping::testing::SimSlots;
use onesync_mapping::{
    BlockIo, BlockSink, Cache, Error, Key, Mapped, MergePolicy, RunBuilder, Stack, Value, NO_SLOT,
};
use support::{build_run, bulk_stack, mapped, value_of};

fn keys(n: u64) -> Vec<Key> {
    (0..n)
        .map(|i| Key::new((i % 3) as u32, i / 3 * 2))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[test]
fn a_run_returns_every_entry_by_key_and_in_order_at_every_slot_size() {
    for (slot_size, n) in [(512, 40_000), (4096, 3_000), (65536, 5_000)] {
        let slots = SimSlots::new(slot_size);
        let keys = keys(n);
        let run = build_run(&slots, &keys);
        let cache = Cache::new(1 << 20);
        assert_eq!(run.entries, n);
        assert_eq!((run.first, run.last), (keys[0], keys[keys.len() - 1]));
        for &key in keys.iter().step_by(7) {
            assert_eq!(
                run.get(key, &slots, &cache).unwrap(),
                Some(Value::Mapped(value_of(key, 0)))
            );
            // Odd pages are between the keys.
            assert_eq!(
                run.get(Key::new(key.file, key.page + 1), &slots, &cache).unwrap(),
                None
            );
        }
        let all: Vec<Key> = run
            .iter_from(Key::MIN, &slots, Some(&cache))
            .map(|e| e.unwrap().0)
            .collect();
        assert_eq!(all, keys, "slot size {slot_size}");
        for start in [0, 1, keys.len() / 2, keys.len() - 1] {
            let from = Key::new(keys[start].file, keys[start].page.saturating_sub(1));
            let first = run.iter_from(from, &slots, None).next().unwrap().unwrap();
            let expected = keys.iter().find(|k| **k >= from).unwrap();
            assert_eq!(first.0, *expected);
        }
        let (from, to) = (keys[100], keys[2000.min(keys.len() - 1)]);
        let ranged: Vec<Key> = run
            .iter_range(from, to, &slots, None)
            .map(|e| e.unwrap().0)
            .collect();
        assert_eq!(
            ranged,
            keys.iter()
                .copied()
                .filter(|k| *k >= from && *k < to)
                .collect::<Vec<_>>()
        );
        let blocks = run.blocks(&slots, Some(&cache)).unwrap();
        assert_eq!(blocks[0], run.root, "the root comes first");
        assert_eq!(blocks.iter().map(|b| u64::from(b.slots)).sum::<u64>(), run.slots);
        assert_eq!(
            slots.placed().len(),
            blocks.len(),
            "every block written is in the run"
        );
        let report = Stack { runs: vec![run] }.check(&slots).unwrap();
        assert_eq!(
            (report.entries, report.slots, report.blocks),
            (n, run.slots, blocks.len() as u64)
        );
    }
}

#[test]
fn a_large_run_is_three_levels_and_a_lookup_reads_one_block_per_level() {
    let slots = SimSlots::new(512);
    let run = build_run(&slots, &keys(2_000));
    assert_eq!(
        run.height, 3,
        "2,000 entries in one-slot blocks of 512 bytes: at most 12 per leaf (40 bytes each), 17 children per inner block"
    );
    let cache = Cache::new(0);
    let before = slots.reads();
    run.get(Key::new(1, 1_000), &slots, &cache).unwrap();
    assert_eq!(slots.reads() - before, 3);
}

#[test]
fn pushing_a_key_that_does_not_increase_is_an_error_naming_both_keys() {
    let slots = SimSlots::new(512);
    let mut sink = slots.sink();
    let mut builder = RunBuilder::new(512);
    builder
        .push(Key::new(1, 5), Value::Dropped { seq: 1 }, &mut sink)
        .unwrap();
    for key in [Key::new(1, 5), Key::new(1, 4), Key::new(0, 9)] {
        let err = builder
            .push(key, Value::Dropped { seq: 2 }, &mut sink)
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, Error::Corrupt(_)));
        assert!(
            message.contains(&key.to_string()) && message.contains("(file 1, page 5)"),
            "{message}"
        );
    }
}

#[test]
fn an_overlay_a_leaf_cannot_hold_is_refused() {
    let slots = SimSlots::new(512);
    let mut sink = slots.sink();
    let mut builder = RunBuilder::new(512);
    let bad: [&[(u32, &[u8])]; 4] = [
        &[(510, b"abc")],         // past the page
        &[(0, b"ab"), (2, b"c")], // adjacent
        &[(5, b"ab"), (0, b"c")], // unsorted
        &[(0, b"")],              // empty
    ];
    for (page, overlay) in bad.iter().enumerate() {
        let value = Value::Mapped(mapped(1, 2, 3, overlay));
        let err = builder
            .push(Key::new(0, page as u64), value, &mut sink)
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{err}");
    }
    let many: Vec<(u32, std::sync::Arc<[u8]>)> = (0..256)
        .map(|i| (i * 2, std::sync::Arc::from(&b"x"[..])))
        .collect();
    let err = builder.push(
        Key::new(1, 0),
        Value::Mapped(Mapped::new(1, 2, 3, many)),
        &mut sink,
    );
    assert!(err.is_err(), "256 ranges do not fit a range count byte");
}

#[test]
fn finishing_an_empty_builder_gives_no_run_and_writes_nothing() {
    let slots = SimSlots::new(4096);
    assert_eq!(RunBuilder::new(4096).finish(&mut slots.sink()).unwrap(), None);
    assert!(slots.placed().is_empty());
}

#[test]
fn an_entry_too_large_for_a_block_gets_a_leaf_of_its_own_as_long_as_it_needs() {
    let slots = SimSlots::new(4096);
    let mut sink = slots.sink();
    let mut builder = RunBuilder::new(4096);
    let big = vec![7u8; 4090];
    let large = mapped(NO_SLOT, 0, u64::MAX, &[(0, &big[..2]), (6, &big)]);
    for page in 0..300 {
        let value = if page == 150 {
            large.clone()
        } else {
            value_of(Key::new(0, page), 0)
        };
        builder
            .push(Key::new(0, page), Value::Mapped(value), &mut sink)
            .unwrap();
    }
    let run = builder.finish(&mut sink).unwrap().unwrap();
    let blocks = run.blocks(&slots, None).unwrap();
    assert!(blocks.iter().any(|b| b.slots == 2), "{blocks:?}");
    let cache = Cache::new(1 << 20);
    assert_eq!(
        run.get(Key::new(0, 150), &slots, &cache).unwrap(),
        Some(Value::Mapped(large))
    );
    assert_eq!(
        run.get(Key::new(0, 151), &slots, &cache).unwrap(),
        Some(Value::Mapped(value_of(Key::new(0, 151), 0)))
    );
    Stack { runs: vec![run] }.check(&slots).unwrap();
}

#[test]
fn a_lookup_reads_nothing_from_runs_whose_keys_exclude_it() {
    let slots = SimSlots::new(512);
    let low = build_run(&slots, &[Key::new(1, 0), Key::new(1, 10)]);
    let high = build_run(&slots, &[Key::new(5, 0), Key::new(5, 10)]);
    let stack = Stack {
        runs: vec![high, low],
    };
    let cache = Cache::new(0);
    let before = slots.reads();
    assert_eq!(stack.get(Key::new(3, 0), &slots, &cache).unwrap(), None);
    assert_eq!(stack.get(Key::new(9, 0), &slots, &cache).unwrap(), None);
    assert_eq!(slots.reads(), before);
    assert_eq!(
        stack.get(Key::new(1, 10), &slots, &cache).unwrap(),
        Some(value_of(Key::new(1, 10), 0))
    );
    assert_eq!(
        slots.reads(),
        before + 1,
        "one leaf, in the one run that covers the key"
    );
}

#[test]
fn a_checkpoint_with_an_unsorted_or_repeated_delta_writes_nothing() {
    let slots = SimSlots::new(512);
    for delta in [
        vec![
            (Key::new(0, 2), Value::Dropped { seq: 1 }),
            (Key::new(0, 1), Value::Dropped { seq: 1 }),
        ],
        vec![
            (Key::new(0, 2), Value::Dropped { seq: 1 }),
            (Key::new(0, 2), Value::Dropped { seq: 2 }),
        ],
    ] {
        let err = Stack::default()
            .checkpoint(delta, &|_| true, MergePolicy::DEFAULT, &slots, &mut slots.sink())
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{err}");
    }
    assert!(slots.placed().is_empty());
}

#[test]
fn an_empty_delta_leaves_the_stack_as_it_was() {
    let slots = SimSlots::new(512);
    let stack = bulk_stack(&slots, &keys(500));
    let placed = slots.placed().len();
    let out = stack
        .checkpoint(
            Vec::new(),
            &|_| false,
            MergePolicy {
                ratio: 1,
                max_runs: 1,
            },
            &slots,
            &mut slots.sink(),
        )
        .unwrap();
    assert_eq!(out.stack, stack);
    assert_eq!((out.freed.len(), out.written_slots, out.merged_runs), (0, 0, 0));
    assert_eq!(slots.placed().len(), placed);
}

#[test]
fn the_merge_policy_takes_runs_not_much_larger_than_what_it_writes_and_bounds_the_run_count() {
    let slots = SimSlots::new(512);
    let sized = |n: u64| {
        let mut run = build_run(&slots, &[Key::new(0, 0)]);
        run.entries = n;
        run
    };
    let policy = MergePolicy {
        ratio: 4,
        max_runs: 3,
    };
    // 10 * 4 reaches 40, then 50 * 4 does not reach 1000.
    assert_eq!(policy.runs_to_merge(10, &[sized(40), sized(1000)]), 1);
    assert_eq!(policy.runs_to_merge(10, &[sized(41), sized(1000)]), 0);
    // Three runs and a new one would be four: the newest is merged whatever its size.
    assert_eq!(
        policy.runs_to_merge(1, &[sized(100), sized(1000), sized(10_000)]),
        1
    );
    assert_eq!(policy.runs_to_merge(1, &[]), 0);
    assert_eq!(
        MergePolicy::DEFAULT,
        MergePolicy {
            ratio: 8,
            max_runs: 10
        }
    );
}

#[test]
fn tombstones_are_dropped_only_by_a_merge_into_the_oldest_run() {
    let slots = SimSlots::new(512);
    let cache = Cache::new(1 << 20);
    let base = bulk_stack(&slots, &keys(3000));
    let gone = Key::new(0, 0);
    let small = MergePolicy {
        ratio: 1,
        max_runs: 10,
    };
    let out = base
        .checkpoint(
            vec![(gone, Value::Dropped { seq: 77 })],
            &|_| true,
            small,
            &slots,
            &mut slots.sink(),
        )
        .unwrap();
    assert_eq!((out.merged_runs, out.stack.runs.len()), (0, 2));
    assert_eq!(
        out.stack.runs[0].entries, 1,
        "the tombstone is kept over the older run"
    );
    assert_eq!(out.stack.get(gone, &slots, &cache).unwrap(), None);
    assert_eq!(
        out.stack.runs[0].get(gone, &slots, &cache).unwrap(),
        Some(Value::Dropped { seq: 77 }),
        "the tombstone keeps the version of the commit that dropped the page"
    );
    let all = MergePolicy {
        ratio: 1,
        max_runs: 1,
    };
    let delta = vec![(Key::new(0, 2), Value::Mapped(value_of(Key::new(0, 2), 9)))];
    let merged = out
        .stack
        .checkpoint(delta, &|_| true, all, &slots, &mut slots.sink())
        .unwrap();
    assert_eq!((merged.merged_runs, merged.stack.runs.len()), (2, 1));
    assert_eq!(
        merged.stack.entries(),
        2999,
        "the tombstone and the entry it hid are gone"
    );
    assert_eq!(merged.stack.get(gone, &slots, &cache).unwrap(), None);
    assert_eq!(
        merged.stack.get(Key::new(0, 2), &slots, &cache).unwrap(),
        Some(value_of(Key::new(0, 2), 9))
    );
    merged.stack.check(&slots).unwrap();
}

#[test]
fn a_checkpoint_that_drops_everything_leaves_only_the_runs_it_did_not_merge() {
    let slots = SimSlots::new(512);
    let stack = bulk_stack(&slots, &keys(300));
    let delta = vec![(Key::new(7, 1), Value::Mapped(value_of(Key::new(7, 1), 1)))];
    let out = stack
        .checkpoint(
            delta,
            &|key| key.file != 7,
            MergePolicy {
                ratio: 0,
                max_runs: 10,
            },
            &slots,
            &mut slots.sink(),
        )
        .unwrap();
    assert_eq!(out.stack, stack);
    assert_eq!((out.written_slots, out.merged_runs), (0, 0));
}

#[test]
fn a_range_merges_the_runs_newest_first_and_hides_tombstones() {
    let slots = SimSlots::new(512);
    let cache = Cache::new(1 << 20);
    let stack = bulk_stack(&slots, &keys(600));
    let delta = vec![
        (Key::new(0, 2), Value::Dropped { seq: 5 }),
        (Key::new(0, 3), Value::Mapped(value_of(Key::new(0, 3), 5))),
        (Key::new(0, 4), Value::Mapped(value_of(Key::new(0, 4), 5))),
    ];
    let keep_all = MergePolicy {
        ratio: 0,
        max_runs: 10,
    };
    let out = stack
        .checkpoint(delta, &|_| true, keep_all, &slots, &mut slots.sink())
        .unwrap();
    assert_eq!(out.stack.runs.len(), 2);
    let got: Vec<(Key, Mapped)> = out
        .stack
        .range(Key::new(0, 0), Key::new(0, 7), &slots, Some(&cache))
        .map(Result::unwrap)
        .collect();
    let expected = vec![
        (Key::new(0, 0), value_of(Key::new(0, 0), 0)),
        (Key::new(0, 3), value_of(Key::new(0, 3), 5)),
        (Key::new(0, 4), value_of(Key::new(0, 4), 5)),
        (Key::new(0, 6), value_of(Key::new(0, 6), 0)),
    ];
    assert_eq!(got, expected);
    let none = out
        .stack
        .range(Key::new(0, 7), Key::new(0, 7), &slots, None)
        .count();
    assert_eq!(none, 0, "an empty range");
    assert_eq!(BlockIo::slot_size(&slots), 512);
}

/// The store's own error type, as a sink would return it.
#[derive(Debug, PartialEq)]
struct DiskFull;

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no space left")
    }
}

impl std::error::Error for DiskFull {}

/// A sink that places `room` blocks, then fails.
struct Cramped<'a> {
    inner: onesync_mapping::testing::SimSink<'a>,
    room: usize,
}

impl BlockSink for Cramped<'_> {
    fn slot_size(&self) -> usize {
        self.inner.slot_size()
    }
    fn place(&mut self, bytes: &[u8]) -> Result<u64, Error> {
        if self.room == 0 {
            return Err(Error::Sink(Box::new(DiskFull)));
        }
        self.room -= 1;
        self.inner.place(bytes)
    }
}

#[test]
fn a_sink_error_comes_back_as_the_stores_own_error_and_leaves_the_stack_as_it_was() {
    let slots = SimSlots::new(512);
    let stack = bulk_stack(&slots, &keys(3000));
    let delta = keys(3000)
        .into_iter()
        .map(|k| (k, Value::Mapped(value_of(k, 1))))
        .collect();
    let mut sink = Cramped {
        inner: slots.sink(),
        room: 5,
    };
    let all = MergePolicy {
        ratio: 1,
        max_runs: 1,
    };
    let err = stack
        .checkpoint(delta, &|_| true, all, &slots, &mut sink)
        .unwrap_err();
    assert_eq!(err.to_string(), "no space left", "transparent");
    let Error::Sink(inner) = err else {
        panic!("not a sink error")
    };
    assert_eq!(inner.downcast_ref::<DiskFull>(), Some(&DiskFull));
    let cache = Cache::new(1 << 20);
    assert_eq!(
        stack.get(Key::new(0, 0), &slots, &cache).unwrap(),
        Some(value_of(Key::new(0, 0), 0))
    );
    stack.check(&slots).unwrap();
}
