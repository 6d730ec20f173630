//! Free-slot bookkeeping: free extents keyed by first slot, coalesced on release, so that a
//! checkpoint or a log can take a contiguous run.

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub struct SlotAllocator {
    /// first slot -> length
    free: BTreeMap<u64, u64>,
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
                a.free.insert(next, s - next);
                a.free_count += s - next;
            }
            next = s + 1;
        }
        a
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

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn free_count(&self) -> u64 {
        self.free_count
    }

    /// Take `n` contiguous slots, first fit; `None` if no run is long enough.
    pub fn take_run(&mut self, n: u64) -> Option<u64> {
        let (&start, &len) = self.free.iter().find(|(_, len)| **len >= n)?;
        self.free.remove(&start);
        if len > n {
            self.free.insert(start + n, len - n);
        }
        self.free_count -= n;
        Some(start)
    }

    /// Length of the longest free run.
    pub fn largest_run(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Take up to `max` slots from the start of the longest free run.
    pub fn take_largest(&mut self, max: u64) -> Option<(u64, u64)> {
        let (&start, &len) = self
            .free
            .iter()
            .max_by_key(|(start, len)| (**len, std::cmp::Reverse(**start)))?;
        let n = len.min(max);
        self.free.remove(&start);
        if len > n {
            self.free.insert(start + n, len - n);
        }
        self.free_count -= n;
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
                self.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(slot + n)) {
            self.free.remove(&(slot + n));
            len += next_len;
        }
        self.free.insert(start, len);
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
