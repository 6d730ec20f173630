//! What a checkpoint writes per page changed, and what a lookup reads, on a mapping of
//! 200,000 pages changed 1,000 at a time.

mod support;

use onesync_mapping::testing::SimSlots;
use onesync_mapping::{Cache, Key, MergePolicy, Value};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use support::{bulk_stack, value_of};

const SLOT: usize = 4096;
const PAGES: u64 = 200_000;
const PER_CHECKPOINT: usize = 1_000;
const CHECKPOINTS: u64 = 40;
/// The fixed part of a leaf entry, in bytes (`src/format.rs`).
const ENTRY_FIXED: u64 = 40;

/// A stack of 200,000 entries (one run, from one bulk checkpoint), then 40 checkpoints of
/// 1,000 random distinct pages each, with `MergePolicy::DEFAULT` (ratio 8).
///
/// The bound: the policy takes a run into a merge only when what is being written, times
/// `ratio`, reaches it, so run sizes grow by about `ratio` from one to the next, and between a
/// delta of d = 1,000 and the N = 200,000 of the base there are ⌈log_ratio(N / d)⌉ =
/// ⌈log_8 200⌉ = 3 levels. A run at one level takes in what is written above it about `ratio`
/// times before it is large enough to stay put, each time rewritten whole, so an entry is
/// written at most about `ratio` times per level: `ratio × levels` entry writes of 40 bytes
/// (the fixed part, `ENTRY_FIXED`; leaves are full to within one entry, and these overlays add
/// 9 bytes to a third of the entries, inside the margin of "at most"). That is 8 × 3 × 40 = 960
/// bytes, or 0.2344 slots of 4 KiB, per page changed; a copy-on-write B-tree writes at least
/// one 4 KiB leaf (one slot) for it. Asserted: the slots written by the 40 checkpoints, per
/// entry they updated, stay below 0.2344.
///
/// A lookup afterwards, with nothing cached, reads at most one root-to-leaf path per run whose
/// keys cover it: the sum of the runs' heights (runs + height when every run but the tallest
/// is one leaf; a run of two levels adds its root). With the runs' inner blocks cached, it
/// reads at most one leaf per run.
#[test]
fn checkpoints_write_a_small_fraction_of_a_block_per_page_changed() {
    let slots = SimSlots::new(SLOT);
    let keys: Vec<Key> = (0..PAGES).map(|p| Key::new(1, p)).collect();
    let mut stack = bulk_stack(&slots, &keys);
    let mut rng = StdRng::seed_from_u64(0x6f6e_6573);
    let (mut written, mut updated, mut merges) = (0u64, 0u64, 0usize);
    // The generation each page was last written in.
    let mut latest = vec![0u64; PAGES as usize];
    for generation in 1..=CHECKPOINTS {
        let mut pages: Vec<u64> = sample(&mut rng, PAGES as usize, PER_CHECKPOINT)
            .into_iter()
            .map(|p| p as u64)
            .collect();
        pages.sort_unstable();
        for &p in &pages {
            latest[p as usize] = generation;
        }
        let delta: Vec<(Key, Value)> = pages
            .iter()
            .map(|&p| {
                (
                    Key::new(1, p),
                    Value::Mapped(value_of(Key::new(1, p), generation)),
                )
            })
            .collect();
        updated += delta.len() as u64;
        let out = stack
            .checkpoint(delta, &|_| true, MergePolicy::DEFAULT, &slots, &mut slots.sink())
            .unwrap();
        for block in &out.freed {
            slots.free(*block);
        }
        written += out.written_slots;
        merges += out.merged_runs;
        stack = out.stack;
    }
    let per_update = written as f64 / updated as f64;
    let bound = (MergePolicy::DEFAULT.ratio * 3 * ENTRY_FIXED) as f64 / SLOT as f64;
    println!(
        "{CHECKPOINTS} checkpoints of {PER_CHECKPOINT} updates over {PAGES} entries: {written} slots \
         written ({per_update:.4} slots, {:.0} bytes, per update; bound {bound:.4}); {merges} runs merged; \
         final runs (entries, height): {:?}",
        per_update * SLOT as f64,
        stack
            .runs
            .iter()
            .map(|r| (r.entries, r.height))
            .collect::<Vec<_>>()
    );
    assert!(per_update < bound, "{per_update:.4} slots written per update");

    let path_per_run: u64 = stack.runs.iter().map(|r| u64::from(r.height)).sum();
    let cold = Cache::new(0);
    let warm = Cache::new(8 << 20);
    for run in &stack.runs {
        run.blocks(&slots, Some(&warm)).unwrap(); // reads every inner block through the cache
    }
    let (mut worst_cold, mut worst_warm) = (0, 0);
    for _ in 0..200 {
        let key = Key::new(1, rng.random_range(0..PAGES));
        let before = slots.reads();
        let found = stack.get(key, &slots, &cold).unwrap();
        assert_eq!(found, Some(value_of(key, latest[key.page as usize])));
        worst_cold = worst_cold.max(slots.reads() - before);
        let before = slots.reads();
        stack.get(key, &slots, &warm).unwrap();
        worst_warm = worst_warm.max(slots.reads() - before);
    }
    println!(
        "a lookup reads at most {worst_cold} blocks cold (the runs' heights sum to {path_per_run}), \
         {worst_warm} with inner blocks cached ({} runs)",
        stack.runs.len()
    );
    assert!(
        worst_cold <= path_per_run,
        "{worst_cold} blocks read for one lookup"
    );
    assert!(
        worst_warm <= stack.runs.len() as u64,
        "{worst_warm} blocks read with inner blocks cached"
    );
}
