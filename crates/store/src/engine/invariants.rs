//! The checks of the engine's invariants (numbered in `engine/mod.rs`), run in debug builds
//! (and release builds with the feature `invariants`) each time the `meta` lock is
//! released, and the `writer` lock after a claim changes.

use super::shared::{FlushState, Kept, Meta, Shared, WriterClaims};
use crate::free_set::FreeSet;
use std::sync::TryLockError;

/// Waiting slots looked up in the allocator per check, newest first: enough to catch a slot
/// freed early, cheap enough for every unlock.
const SLOTS_CHECKED: usize = 256;

/// Whether this build checks the invariants: debug builds, and release builds with the
/// feature `invariants` (the lab's hooked build, for the explorer and the tortures).
pub(super) const CHECKED: bool = cfg!(any(debug_assertions, feature = "invariants"));

impl Shared {
    /// Panics naming the invariant if one is broken (where [`CHECKED`]; a no-op otherwise).
    /// The `flush` lock is looked at only if it is free: it may be held by this thread.
    pub(super) fn debug_assert_invariants(&self, meta: &Meta) {
        if !CHECKED || std::thread::panicking() {
            return;
        }
        let flush = match self.flush.try_lock() {
            Ok(f) => Some(f),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Err(broken) = check(meta, flush.as_deref(), self.sharing.is_none()) {
            panic!("engine {broken}");
        }
    }

    /// Invariant 1 on its own, for sections that hold only the `flush` lock.
    pub(super) fn debug_assert_flush_invariants(f: &FlushState) {
        if CHECKED {
            if let Err(broken) = check_flush(f) {
                panic!("engine {broken}");
            }
        }
    }

    pub(super) fn debug_assert_writer_invariants(w: &WriterClaims) {
        if !CHECKED {
            return;
        }
        assert_eq!(
            w.held,
            w.claims > 0,
            "engine invariant 9: the write lock is held exactly while claims are out ({} claims)",
            w.claims
        );
        assert!(
            w.held || !w.catch_up_due,
            "engine invariant 9: a catch-up is due only while the write lock is held"
        );
    }
}

/// Invariant 13 for a manifest about to be written: `free` (below `total`) holds none of
/// `named` (first slot, count) nor the chain's window, and every slot `meta`'s allocator
/// holds free below `total`. Panics naming it if broken (where [`CHECKED`]).
pub(super) fn debug_assert_manifest_free(
    meta: &Meta,
    free: &FreeSet,
    total: u64,
    named: impl IntoIterator<Item = (u64, u64)>,
) {
    if !CHECKED {
        return;
    }
    let window = (meta.head, meta.window_end - meta.head);
    if let Some((first, n)) = named
        .into_iter()
        .chain([window])
        .find(|&(first, n)| free.any_of(first, first + n))
    {
        panic!(
            "engine invariant 13: the manifest calls free slots {first}..{} it names",
            first + n
        );
    }
    if let Some((first, n)) = meta
        .alloc
        .free_runs()
        .map(|(first, n)| (first, n.min(total.saturating_sub(first))))
        .find(|&(first, n)| !free.all_of(first, first + n))
    {
        panic!(
            "engine invariant 13: slots {first}..{} are free in the allocator but not in the manifest",
            first + n
        );
    }
}

fn check_flush(f: &FlushState) -> Result<(), String> {
    if !(f.durable <= f.written_upto && f.written_upto <= f.sequenced) {
        return Err(format!(
            "invariant 1: durable {} <= written {} <= sequenced {}",
            f.durable, f.written_upto, f.sequenced
        ));
    }
    if let Some(&stray) = f
        .written_ahead
        .iter()
        .find(|&&s| s <= f.written_upto || s > f.sequenced)
    {
        return Err(format!(
            "invariant 1: commit {stray} is written ahead, outside {}..={}",
            f.written_upto + 1,
            f.sequenced
        ));
    }
    Ok(())
}

/// Every numbered invariant that can be checked from memory; `flush` when it could be read.
fn check(meta: &Meta, flush: Option<&FlushState>, unshared: bool) -> Result<(), String> {
    let (readable, visible, latest) = (meta.readable.seq, meta.visible.seq, meta.state.seq);
    if !(readable <= visible && visible <= latest) {
        return Err(format!(
            "invariant 2: readable {readable} <= visible {visible} <= state {latest}"
        ));
    }
    if let Some(f) = flush {
        check_flush(f)?;
        if f.sequenced > latest {
            return Err(format!(
                "invariant 1: sequenced {} <= state {latest}",
                f.sequenced
            ));
        }
        if unshared && readable > f.durable.max(meta.shown_written_upto) {
            return Err(format!(
                "invariant 4: readers are shown commit {readable}, durable only up to {} and shown undurable only up to {}",
                f.durable, meta.shown_written_upto
            ));
        }
    }
    fn outside<'a>(mut keys: impl Iterator<Item = &'a u64>, low: u64, high: u64) -> Option<u64> {
        keys.find(|&&k| k <= low || k > high).copied()
    }
    if let Some(seq) = outside(meta.unpublished.keys(), visible, latest) {
        return Err(format!(
            "invariant 3: unpublished state {seq} outside {}..={latest}",
            visible + 1
        ));
    }
    if let Some(seq) = outside(meta.not_durable.keys(), readable, visible) {
        return Err(format!(
            "invariant 3: not-durable state {seq} outside {}..={visible}",
            readable + 1
        ));
    }
    // A state kept as operations is built on the one kept just before it.
    let mut before = readable;
    for (&seq, kept) in &meta.not_durable {
        if matches!(kept, Kept::Ops(_)) && seq != before + 1 {
            return Err(format!(
                "invariant 3: not-durable commit {seq} is kept as operations, but the state before it is not kept ({before} is)"
            ));
        }
        before = seq;
    }
    let covered = meta.header.checkpoint.seq;
    if let Some(&(at, slot)) = meta.awaiting_readers.iter().find(|(at, _)| *at > covered) {
        return Err(format!(
            "invariant 6: slot {slot}, superseded at {at}, awaits readers before a checkpoint covers it ({covered})"
        ));
    }
    let waiting = meta.awaiting_checkpoint.iter().rev().take(SLOTS_CHECKED);
    let waiting = waiting
        .chain(meta.awaiting_readers.iter().rev().take(SLOTS_CHECKED))
        .chain(meta.moved_awaiting_readers.iter().rev().take(SLOTS_CHECKED));
    if let Some((at, slot)) = waiting.clone().find(|(_, slot)| meta.alloc.is_free(*slot)) {
        return Err(format!(
            "invariant 6: slot {slot}, superseded at {at}, is free while it waits"
        ));
    }
    if meta.head >= meta.window_end || meta.alloc.any_free(meta.head, meta.window_end - meta.head) {
        return Err(format!(
            "invariant 7: the chain's window {}..{} is not reserved",
            meta.head, meta.window_end
        ));
    }
    if let Some((first, n)) = meta
        .header
        .checkpoint
        .extents()
        .iter()
        .find(|(first, n)| meta.alloc.any_free(*first, *n))
    {
        return Err(format!(
            "invariant 7: the checkpoint's slots {first}..{} are free",
            first + n
        ));
    }
    if covered > latest {
        return Err(format!(
            "invariant 7: the header's checkpoint covers commit {covered}, past the state {latest}"
        ));
    }
    let base = meta.state.base.seq;
    if base < covered.min(latest) || base > latest {
        return Err(format!(
            "invariant 12: the state {latest} lies over the base of commit {base}, the header's checkpoint covers {covered}"
        ));
    }
    if let Some((seq, count)) = meta
        .snapshots
        .iter()
        .find(|(seq, count)| **count == 0 || **seq > latest)
    {
        return Err(format!(
            "invariant 10: {count} snapshots of commit {seq} (state {latest})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::sim::SimDisk;
    use crate::state::State;
    use crate::{Options, Store};
    use std::sync::Arc;

    fn store() -> Store {
        let opts = Options {
            page_size: 512,
            initial_capacity: 64 << 10,
            ..Options::default()
        };
        let store = Store::create_with_io(SimDisk::new().io(), &opts).unwrap();
        let mut t = store.begin();
        let file = t.create_file("f").unwrap();
        t.write_page(file, 0, &[7u8; 512]).unwrap();
        t.commit().unwrap();
        store
    }

    #[test]
    fn a_sound_engine_passes() {
        let store = store();
        let shared = &store.shared;
        shared.debug_assert_invariants(&shared.meta());
    }

    #[test]
    #[cfg_attr(
        any(debug_assertions, feature = "invariants"),
        should_panic(expected = "invariant 2")
    )]
    fn showing_readers_more_than_writers_fires_invariant_2() {
        let store = store();
        let mut meta = store.shared.meta();
        let mut ahead = (*meta.visible).clone();
        ahead.seq += 1;
        meta.readable = Arc::new(ahead);
        // Releasing the lock checks.
    }

    #[test]
    #[cfg_attr(
        any(debug_assertions, feature = "invariants"),
        should_panic(expected = "invariant 6")
    )]
    fn freeing_a_waiting_slot_fires_invariant_6() {
        let store = store();
        let mut meta = store.shared.meta();
        let (_, slot) = *meta
            .awaiting_checkpoint
            .last()
            .expect("the commit superseded its record's slot");
        meta.alloc.release(slot, 1);
    }

    #[test]
    #[cfg_attr(
        any(debug_assertions, feature = "invariants"),
        should_panic(expected = "invariant 4")
    )]
    fn showing_readers_a_commit_not_durable_fires_invariant_4() {
        let store = store();
        let mut meta = store.shared.meta();
        let next = State {
            seq: meta.state.seq + 1,
            ..(*meta.state).clone()
        };
        let next = Arc::new(next);
        meta.state = next.clone();
        meta.visible = next.clone();
        meta.readable = next;
    }
}
