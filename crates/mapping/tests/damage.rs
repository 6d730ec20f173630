//! Damage on disk: a flipped byte in a block, damage that comes with matching CRCs (so that it
//! reaches the field checks), and stale refs to freed blocks. Each gives `Error::Corrupt`:
//! never a wrong value, never a panic; `check` reports it.

mod support;

use onesync_codec::OnDisk;
use onesync_mapping::format::{Inner, Leaf};
use onesync_mapping::testing::SimSlots;
use onesync_mapping::{BlockRef, Cache, Error, Key, Stack, Value};
use support::{bulk_stack, merge_all_and_free, value_of};

const SLOT: usize = 512;

fn keys() -> Vec<Key> {
    (0..150).map(|i| Key::new(1, i)).collect()
}

/// The keys of a leaf, read from its bytes.
fn leaf_keys(slots: &SimSlots, leaf: BlockRef) -> Vec<Key> {
    let leaf = Leaf::from_bytes(&SLOT, &slots.block_bytes(leaf)).unwrap();
    leaf.entries.iter().map(|(k, _)| *k).collect()
}

fn is_corrupt<T: std::fmt::Debug>(result: Result<T, Error>) -> bool {
    matches!(result, Err(Error::Corrupt(_)))
}

#[test]
fn a_flipped_byte_in_a_leaf_makes_its_keys_corrupt_and_leaves_other_leaves_readable() {
    let slots = SimSlots::new(SLOT);
    let stack = bulk_stack(&slots, &keys());
    let run = stack.runs[0];
    assert_eq!(run.height, 2);
    let blocks = run.blocks(&slots, None).unwrap();
    let (leaf, other) = (blocks[4], blocks[9]);
    let in_leaf = leaf_keys(&slots, leaf);
    let elsewhere = leaf_keys(&slots, other)[3];
    let probes = [in_leaf[0], in_leaf[in_leaf.len() / 2], in_leaf[in_leaf.len() - 1]];
    let len = leaf.slots as usize * SLOT;
    for offset in (0..64).chain((64..len).step_by(29)) {
        slots.damage(leaf.slot, offset, 0x5a);
        let cache = Cache::new(1 << 20);
        for key in probes {
            assert!(is_corrupt(stack.get(key, &slots, &cache)), "byte {offset}, {key}");
        }
        assert_eq!(
            stack.get(elsewhere, &slots, &cache).unwrap(),
            Some(value_of(elsewhere, 0))
        );
        let ranged: Result<Vec<_>, Error> = stack.range(Key::MIN, Key::MAX, &slots, None).collect();
        assert!(is_corrupt(ranged), "a range over the leaf, byte {offset}");
        let err = stack.check(&slots).unwrap_err();
        assert!(err.to_string().contains(&format!("slot {}", leaf.slot)), "{err}");
        slots.damage(leaf.slot, offset, 0x5a);
    }
    stack.check(&slots).unwrap();
}

#[test]
fn a_flipped_byte_in_the_root_makes_every_lookup_corrupt() {
    let slots = SimSlots::new(SLOT);
    let stack = bulk_stack(&slots, &keys());
    let root = stack.runs[0].root;
    for offset in [0, 4, 6, 17, 40, 300, 511] {
        slots.damage(root.slot, offset, 0x01);
        let cache = Cache::new(1 << 20);
        assert!(
            is_corrupt(stack.get(Key::new(1, 7), &slots, &cache)),
            "byte {offset}"
        );
        assert!(is_corrupt(stack.check(&slots)));
        slots.damage(root.slot, offset, 0x01);
    }
}

/// A change to a block's bytes.
type Edit = dyn Fn(&mut Vec<u8>);

/// Rewrites a leaf with `edit` applied to its bytes and reseals it: its parent's (the root's)
/// child CRC and the run ref's root CRC are made to match, so only the field checks can
/// notice. Returns the stack naming the resealed blocks.
fn resealed(slots: &SimSlots, stack: &Stack, leaf_index: usize, edit: &Edit) -> Stack {
    let mut run = stack.runs[0];
    let mut root = Inner::from_bytes(&SLOT, &slots.block_bytes(run.root)).unwrap();
    let child = &mut root.children[leaf_index];
    let mut bytes = slots.block_bytes(child.block);
    edit(&mut bytes);
    child.block.crc = crc32c::crc32c(&bytes);
    write_over(slots, child.block.slot, &bytes);
    let root_bytes = root.to_bytes(&SLOT);
    run.root.crc = crc32c::crc32c(&root_bytes);
    write_over(slots, run.root.slot, &root_bytes);
    Stack { runs: vec![run] }
}

fn write_over(slots: &SimSlots, slot: u64, bytes: &[u8]) {
    let old = slots.block_bytes(BlockRef {
        slot,
        slots: (bytes.len() / SLOT) as u32,
        crc: 0,
    });
    for (i, (a, b)) in old.iter().zip(bytes).enumerate() {
        if a != b {
            slots.damage(slot, i, a ^ b);
        }
    }
}

#[test]
fn damage_with_matching_crcs_is_caught_by_the_field_checks() {
    let edits: [(&str, &Edit); 6] = [
        ("keys out of order", &|b| {
            b[20..28].copy_from_slice(&u64::MAX.to_le_bytes())
        }),
        ("level", &|b| b[4] = 1),
        ("count past the entries", &|b| b[6] = 0xff),
        ("a heap offset", &|b| b[16 + 36] ^= 1),
        ("a byte past what the block uses", &|b| *b.last_mut().unwrap() = 1),
        ("a tombstone kind", &|b| b[16 + 32] = 7),
    ];
    for (what, edit) in edits {
        let slots = SimSlots::new(SLOT);
        let stack = bulk_stack(&slots, &keys());
        let leaf = stack.runs[0].blocks(&slots, None).unwrap()[3];
        let probe = leaf_keys(&slots, leaf)[5];
        let damaged = resealed(&slots, &stack, 2, edit);
        let cache = Cache::new(1 << 20);
        let found = damaged.get(probe, &slots, &cache);
        assert!(is_corrupt(found), "{what}: {probe}");
        assert!(is_corrupt(damaged.check(&slots)), "{what}");
    }
}

#[test]
fn a_parent_naming_the_wrong_first_key_for_its_child_is_corrupt() {
    let slots = SimSlots::new(SLOT);
    let stack = bulk_stack(&slots, &keys());
    let mut run = stack.runs[0];
    let mut root = Inner::from_bytes(&SLOT, &slots.block_bytes(run.root)).unwrap();
    let probe = root.children[4].first;
    // Still between its neighbours, so the block itself is valid.
    root.children[4].first = Key::new(probe.file, probe.page - 1);
    let bytes = root.to_bytes(&SLOT);
    run.root.crc = crc32c::crc32c(&bytes);
    write_over(&slots, run.root.slot, &bytes);
    let damaged = Stack { runs: vec![run] };
    let cache = Cache::new(1 << 20);
    assert!(is_corrupt(damaged.get(probe, &slots, &cache)));
    let err = damaged.check(&slots).unwrap_err();
    assert!(err.to_string().contains("parent names"), "{err}");
}

#[test]
fn a_stale_stack_reading_freed_blocks_gets_corrupt_not_what_was_written_there_since() {
    let slots = SimSlots::new(SLOT);
    let old = bulk_stack(&slots, &keys());
    let delta = (0..3000)
        .step_by(2)
        .map(|p| (Key::new(1, p), Value::Dropped { seq: 10 + p }))
        .collect();
    let out = merge_all_and_free(&old, delta, &slots);
    assert_eq!(out.merged_runs, 1);
    // New blocks reuse the freed slots.
    let again = (0..3000)
        .step_by(3)
        .map(|p| (Key::new(2, p), Value::Dropped { seq: 20 + p }))
        .collect();
    merge_all_and_free(&out.stack, again, &slots);
    let cache = Cache::new(1 << 20);
    for page in [0, 1, 75, 149] {
        assert!(
            is_corrupt(old.get(Key::new(1, page), &slots, &cache)),
            "page {page}"
        );
    }
    assert!(is_corrupt(old.check(&slots)));
}
