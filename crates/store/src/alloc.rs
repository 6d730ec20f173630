//! Free-slot bookkeeping: free extents keyed by first slot, coalesced on release, so that a
//! checkpoint or a log can take a contiguous run.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct SlotAllocator {
    /// first slot -> length
    free: BTreeMap<u64, u64>,
    /// The same runs by length, then lowest first slot last: the longest run without a
    /// scan of every run (a fragmented store has thousands, and every commit asks for the
    /// longest: 4–5 µs of a lone writer's commit when it scanned them).
    by_length: BTreeSet<(u64, Reverse<u64>)>,
    capacity: u64,
    free_count: u64,
}

impl SlotAllocator {
    /// All of `0..capacity` free except `used`.
    pub fn new(capacity: u64, used: impl IntoIterator<Item = u64>) -> SlotAllocator {
        let mut used: Vec<u64> = used.into_iter().filter(|s| *s < capacity).collect();
        used.sort_unstable();
        used.dedup();
        let mut a = SlotAllocator {
            capacity,
            ..SlotAllocator::default()
        };
        let mut next = 0;
        for s in used.into_iter().chain(std::iter::once(capacity)) {
            if s > next {
                a.insert_run(next, s - next);
                a.free_count += s - next;
            }
            next = s + 1;
        }
        a
    }

    /// `0..capacity` with exactly the slots of `free` free (those below `capacity`).
    pub fn from_free(capacity: u64, free: &crate::free_set::FreeSet) -> SlotAllocator {
        let mut a = SlotAllocator {
            capacity,
            ..SlotAllocator::default()
        };
        for (first, n) in free.extents() {
            let n = n.min(capacity.saturating_sub(first));
            if n > 0 {
                a.insert_run(first, n);
                a.free_count += n;
            }
        }
        a
    }

    /// (first slot, count) of each free run, ascending.
    pub fn free_runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&first, &n)| (first, n))
    }

    /// `0..capacity` with nothing free (a process joining a shared store owns no slot).
    pub fn none_free(capacity: u64) -> SlotAllocator {
        SlotAllocator {
            capacity,
            ..SlotAllocator::default()
        }
    }

    /// The file is `capacity` slots long now; the slots added beyond ours are not ours.
    pub fn extend_used(&mut self, capacity: u64) {
        self.capacity = self.capacity.max(capacity);
    }

    /// The free slots at the end of `0..capacity`: the first of the run that ends there
    /// (`capacity` itself when the last slot is in use).
    pub fn free_tail_start(&self) -> u64 {
        match self.free.iter().next_back() {
            Some((&start, &len)) if start + len == self.capacity => start,
            _ => self.capacity,
        }
    }

    /// The file was cut to `capacity` slots: forget the free slots past it. Every slot
    /// cut must be free (`free_tail_start` at most `capacity`); returns how many were cut.
    pub fn shrink_to(&mut self, capacity: u64) -> u64 {
        if capacity >= self.capacity || self.free_tail_start() > capacity {
            return 0;
        }
        let start = self.free_tail_start();
        let cut = self.capacity - capacity;
        self.remove_run(start);
        if capacity > start {
            self.insert_run(start, capacity - start);
        }
        self.free_count -= cut;
        self.capacity = capacity;
        cut
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn free_count(&self) -> u64 {
        self.free_count
    }

    fn insert_run(&mut self, start: u64, len: u64) {
        self.free.insert(start, len);
        self.by_length.insert((len, Reverse(start)));
    }

    fn remove_run(&mut self, start: u64) -> Option<u64> {
        let len = self.free.remove(&start)?;
        self.by_length.remove(&(len, Reverse(start)));
        Some(len)
    }

    /// Take the first `n` slots of the run at `start` (of `len` slots).
    fn take_from(&mut self, start: u64, len: u64, n: u64) {
        self.remove_run(start);
        if len > n {
            self.insert_run(start + n, len - n);
        }
        self.free_count -= n;
    }

    /// Take `n` contiguous slots, first fit; `None` if no run is long enough.
    pub fn take_run(&mut self, n: u64) -> Option<u64> {
        if self.largest_run() < n {
            return None;
        }
        let (&start, &len) = self.free.iter().find(|(_, len)| **len >= n)?;
        self.take_from(start, len, n);
        Some(start)
    }

    /// Length of the longest free run.
    pub fn largest_run(&self) -> u64 {
        self.by_length.last().map_or(0, |&(len, _)| len)
    }

    /// Take up to `max` slots from the start of the longest free run (the first of them).
    pub fn take_largest(&mut self, max: u64) -> Option<(u64, u64)> {
        let &(len, Reverse(start)) = self.by_length.last()?;
        let n = len.min(max);
        self.take_from(start, len, n);
        Some((start, n))
    }

    /// Return slots. Releasing a slot that is already free (a bug, or a damaged store that
    /// recovery did not catch) must not corrupt the free map: such slots are skipped.
    pub fn release(&mut self, slot: u64, n: u64) {
        debug_assert!(slot + n <= self.capacity);
        if self.overlaps_free(slot, n) {
            debug_assert!(false, "slots {slot}..{} released twice", slot + n);
            for s in slot..slot + n {
                if !self.is_free(s) {
                    self.release_free_run(s, 1);
                }
            }
            return;
        }
        self.release_free_run(slot, n);
    }

    fn overlaps_free(&self, slot: u64, n: u64) -> bool {
        self.free
            .range(..slot + n)
            .next_back()
            .is_some_and(|(s, l)| s + l > slot)
    }

    fn release_free_run(&mut self, slot: u64, n: u64) {
        let mut start = slot;
        let mut len = n;
        if let Some((&prev, &prev_len)) = self.free.range(..slot).next_back() {
            if prev + prev_len == slot {
                self.remove_run(prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(next_len) = self.remove_run(slot + n) {
            len += next_len;
        }
        self.insert_run(start, len);
        self.free_count += n;
    }

    /// Whether any of `slot..slot + n` is free.
    pub fn any_free(&self, slot: u64, n: u64) -> bool {
        n > 0 && self.overlaps_free(slot, n)
    }

    pub fn is_free(&self, slot: u64) -> bool {
        self.free
            .range(..=slot)
            .next_back()
            .is_some_and(|(s, l)| slot < s + l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The allocator against a set of free slots: the same answers, and its index of runs
    /// by length agrees with its runs.
    fn check_against(a: &SlotAllocator, model: &BTreeSet<u64>) {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &s in model {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == s => *len += 1,
                _ => runs.push((s, 1)),
            }
        }
        let free: Vec<(u64, u64)> = a.free.iter().map(|(&s, &l)| (s, l)).collect();
        assert_eq!(free, runs);
        let by_length: BTreeSet<(u64, Reverse<u64>)> = runs.iter().map(|&(s, l)| (l, Reverse(s))).collect();
        assert_eq!(a.by_length, by_length);
        assert_eq!(a.free_count(), model.len() as u64);
        assert_eq!(a.largest_run(), runs.iter().map(|r| r.1).max().unwrap_or(0));
    }

    #[test]
    fn shrinking_cuts_only_the_free_tail() {
        let mut a = SlotAllocator::new(10, [2, 5]);
        assert_eq!(a.free_tail_start(), 6);
        assert_eq!(a.shrink_to(5), 0, "slot 5 is in use");
        assert_eq!(a.shrink_to(8), 2);
        assert_eq!((a.capacity(), a.free_count(), a.largest_run()), (8, 6, 2));
        let model: BTreeSet<u64> = [0, 1, 3, 4, 6, 7].into_iter().collect();
        check_against(&a, &model);
        assert_eq!(a.shrink_to(6), 2);
        assert_eq!(a.free_tail_start(), 6);
        let model: BTreeSet<u64> = [0, 1, 3, 4].into_iter().collect();
        check_against(&a, &model);
    }

    proptest! {
        #[test]
        fn takes_and_releases_agree_with_a_set_of_free_slots(
            ops in proptest::collection::vec((0u8..3, 1u64..6, 0u64..64), 1..200)
        ) {
            let mut a = SlotAllocator::new(64, []);
            let mut model: BTreeSet<u64> = (0..64).collect();
            for (kind, n, at) in ops {
                match kind {
                    0 => {
                        let first_fit = (0..64).find(|&s| (s..s + n).all(|x| model.contains(&x)));
                        prop_assert_eq!(a.take_run(n), first_fit);
                        if let Some(s) = first_fit {
                            for x in s..s + n { model.remove(&x); }
                        }
                    }
                    1 => {
                        let longest = a.largest_run();
                        if let Some((s, got)) = a.take_largest(n) {
                            prop_assert_eq!(got, longest.min(n));
                            for x in s..s + got { prop_assert!(model.remove(&x)); }
                        } else {
                            prop_assert!(model.is_empty());
                        }
                    }
                    _ => {
                        let n = n.min(64 - at);
                        if (at..at + n).all(|x| !model.contains(&x)) {
                            a.release(at, n);
                            model.extend(at..at + n);
                        }
                    }
                }
                check_against(&a, &model);
            }
        }
    }

    #[test]
    fn runs_split_and_coalesce() {
        let mut a = SlotAllocator::new(10, [3, 4]);
        assert_eq!(a.free_count(), 8);
        assert_eq!(a.take_run(4), Some(5));
        assert_eq!(a.take_run(1), Some(0));
        assert_eq!(a.take_run(3), None);
        a.release(3, 2);
        assert_eq!(a.take_run(4), Some(1));
        a.release(1, 4);
        a.release(0, 1);
        a.release(5, 4);
        assert_eq!(a.take_run(9), Some(0));
        // Growth: the new slots count in the capacity first, free once flushed.
        // (Slot 9 stayed free: only the two new ones are released.)
        a.extend_used(12);
        assert_eq!(a.take_run(3), None);
        a.release(10, 2);
        assert_eq!(a.take_run(3), Some(9));
        assert_eq!(a.free_count(), 0);
    }
}
