//! The block cache: bounded in bytes under many lookups from several threads, serving hits
//! without reads, and never serving a block whose slot has since held another.

mod support;

use std::sync::Arc;

use onesync_mapping::testing::SimSlots;
use onesync_mapping::{Cache, Key, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{bulk_stack, merge_all_and_free, value_of};

#[test]
fn the_cache_stays_within_its_byte_bound_under_many_lookups() {
    const BOUND: usize = 64 << 10;
    let slots = SimSlots::new(512);
    let keys: Vec<Key> = (0..50_000).map(|p| Key::new(2, p)).collect();
    let stack = bulk_stack(&slots, &keys);
    let blocks = stack.runs[0].blocks(&slots, None).unwrap().len();
    assert!(
        blocks * 512 > 10 * BOUND,
        "the run ({blocks} blocks) is much larger than the cache"
    );
    let cache = Arc::new(Cache::new(BOUND));
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (cache, stack, slots) = (cache.clone(), &stack, &slots);
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(thread);
                for i in 0..5_000 {
                    // Half the lookups in a small hot set, so that some hit.
                    let page = if i % 2 == 0 {
                        rng.random_range(0..2_000)
                    } else {
                        rng.random_range(0..50_000)
                    };
                    let key = Key::new(2, page);
                    assert_eq!(stack.get(key, slots, &cache).unwrap(), Some(value_of(key, 0)));
                    if i % 100 == 0 {
                        let bytes = cache.stats().bytes;
                        assert!(bytes <= BOUND as u64, "{bytes} bytes cached");
                    }
                }
            });
        }
    });
    let stats = cache.stats();
    println!("{stats:?}");
    assert!(
        stats.bytes <= BOUND as u64 && stats.blocks <= (BOUND / 512) as u64,
        "{stats:?}"
    );
    assert!(stats.hits > 0 && stats.misses > 0, "{stats:?}");
    let per_lookup = u64::from(stack.runs[0].height);
    assert_eq!(
        stats.hits + stats.misses,
        20_000 * per_lookup,
        "one block per level per lookup"
    );
}

#[test]
fn a_cached_block_is_served_without_a_read() {
    let slots = SimSlots::new(4096);
    let stack = bulk_stack(&slots, &(0..1000).map(|p| Key::new(0, p)).collect::<Vec<_>>());
    let cache = Cache::new(1 << 20);
    stack.get(Key::new(0, 500), &slots, &cache).unwrap();
    let (reads, stats) = (slots.reads(), cache.stats());
    assert_eq!((stats.misses, stats.hits, stats.blocks), (2, 0, 2));
    assert_eq!(stats.bytes, 2 * 4096);
    stack.get(Key::new(0, 501), &slots, &cache).unwrap();
    assert_eq!(slots.reads(), reads, "root and leaf were cached");
    assert_eq!(cache.stats().hits, 2);
}

#[test]
fn a_slot_freed_and_reused_is_never_served_from_the_cache() {
    let slots = SimSlots::new(512);
    let cache = Cache::new(1 << 20);
    let keys: Vec<Key> = (0..400).map(|p| Key::new(0, p)).collect();
    let old = bulk_stack(&slots, &keys);
    for &key in &keys {
        old.get(key, &slots, &cache).unwrap();
    }
    // Overwrite every key and merge: the old blocks are freed and their slots reused.
    let delta = keys.iter().map(|&k| (k, Value::Mapped(value_of(k, 1)))).collect();
    let out = merge_all_and_free(&old, delta, &slots);
    let delta = keys.iter().map(|&k| (k, Value::Mapped(value_of(k, 2)))).collect();
    let newest = merge_all_and_free(&out.stack, delta, &slots);
    let reused = newest.stack.runs[0].blocks(&slots, None).unwrap();
    assert!(
        reused.iter().any(|b| out.freed.iter().any(|f| f.slot == b.slot)),
        "no slot was reused"
    );
    for &key in &keys {
        assert_eq!(
            newest.stack.get(key, &slots, &cache).unwrap(),
            Some(value_of(key, 2))
        );
    }
}
