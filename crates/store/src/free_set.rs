//! A set of slots as sorted, disjoint, non-adjacent extents: the free slots a version-2
//! manifest persists (`format/manifest.rs`), kept up to date across a checkpoint interval
//! by adding what the commits since freed and removing what the new checkpoint names,
//! instead of scanning the mapping.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeSet {
    /// first slot -> end (exclusive); runs never touch.
    runs: BTreeMap<u64, u64>,
}

impl FreeSet {
    /// From extents (first, count) in any order, overlapping or not.
    pub fn from_extents(extents: &[(u64, u64)]) -> FreeSet {
        let mut set = FreeSet::default();
        for &(first, n) in extents {
            set.add(first, first.saturating_add(n));
        }
        set
    }

    /// `[0, total)` without `used` (slots in any order, duplicates allowed).
    pub fn complement(total: u64, used: impl IntoIterator<Item = u64>) -> FreeSet {
        let mut used: Vec<u64> = used.into_iter().filter(|s| *s < total).collect();
        used.sort_unstable();
        used.dedup();
        let mut set = FreeSet::default();
        let mut next = 0;
        for s in used.into_iter().chain(std::iter::once(total)) {
            if s > next {
                set.runs.insert(next, s);
            }
            next = s + 1;
        }
        set
    }

    /// Adds `[start, end)`.
    pub fn add(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // Runs that overlap or touch `[start, end]` join it.
        if let Some((&s, &e)) = self.runs.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.runs.remove(&s);
            }
        }
        let joined: Vec<(u64, u64)> = self.runs.range(start..=end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in joined {
            end = end.max(e);
            self.runs.remove(&s);
        }
        self.runs.insert(start, end);
    }

    /// Removes `[start, end)`.
    pub fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut touched: Vec<(u64, u64)> = Vec::new();
        if let Some((&s, &e)) = self.runs.range(..start).next_back() {
            if e > start {
                touched.push((s, e));
            }
        }
        touched.extend(self.runs.range(start..end).map(|(&s, &e)| (s, e)));
        for (s, e) in touched {
            self.runs.remove(&s);
            if s < start {
                self.runs.insert(s, start);
            }
            if e > end {
                self.runs.insert(end, e);
            }
        }
    }

    /// Keeps only slots below `total`.
    pub fn clip(&mut self, total: u64) {
        self.remove(total, u64::MAX);
    }

    pub fn contains(&self, slot: u64) -> bool {
        self.runs
            .range(..=slot)
            .next_back()
            .is_some_and(|(_, &e)| slot < e)
    }

    /// Whether any slot of `start..end` is in the set.
    pub fn any_of(&self, start: u64, end: u64) -> bool {
        start < end && (self.contains(start) || self.runs.range(start..end).next().is_some())
    }

    /// Whether every slot of `start..end` is in the set.
    pub fn all_of(&self, start: u64, end: u64) -> bool {
        start >= end
            || self
                .runs
                .range(..=start)
                .next_back()
                .is_some_and(|(_, &e)| end <= e)
    }

    /// (first, count) of each run, ascending.
    pub fn extents(&self) -> Vec<(u64, u64)> {
        self.runs.iter().map(|(&s, &e)| (s, e - s)).collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|(&s, &e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    proptest::proptest! {
        /// Adding and removing ranges gives the slots a plain set gives, as sorted,
        /// disjoint, non-adjacent extents.
        #[test]
        fn matches_a_set_of_slots(ops in proptest::collection::vec((proptest::bool::ANY, 0u64..200, 0u64..30), 1..60)) {
            let mut set = FreeSet::default();
            let mut model = BTreeSet::new();
            for (add, start, len) in ops {
                if add {
                    set.add(start, start + len);
                    model.extend(start..start + len);
                } else {
                    set.remove(start, start + len);
                    for s in start..start + len {
                        model.remove(&s);
                    }
                }
            }
            let flat: BTreeSet<u64> = set.extents().iter().flat_map(|&(s, n)| s..s + n).collect();
            proptest::prop_assert_eq!(&flat, &model);
            for pair in set.extents().windows(2) {
                proptest::prop_assert!(pair[0].0 + pair[0].1 < pair[1].0);
            }
            for s in 0..240 {
                proptest::prop_assert_eq!(set.contains(s), model.contains(&s));
                for e in s..(s + 12).min(240) {
                    proptest::prop_assert_eq!(set.any_of(s, e), (s..e).any(|x| model.contains(&x)));
                    proptest::prop_assert_eq!(set.all_of(s, e), (s..e).all(|x| model.contains(&x)));
                }
            }
            proptest::prop_assert_eq!(FreeSet::complement(240, model.iter().copied()).len(), 240 - model.len() as u64);
        }
    }
}
