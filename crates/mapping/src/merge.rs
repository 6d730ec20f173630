//! The k-way merge of sorted streams of entries, newest first: for a key several streams
//! hold, the entry of the lowest-numbered stream wins and the others are skipped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::types::{ends_at_first_error, Error, Key, Value};

/// Merges `sources` (each strictly increasing by key; index 0 the newest). Pulls one entry
/// ahead from each source. After an error it ends.
pub(crate) struct Merge<S> {
    sources: Vec<S>,
    heads: Vec<Option<Value>>,
    /// The key at the head of each source that has one, smallest first; for equal keys the
    /// newest source first.
    order: BinaryHeap<Reverse<(Key, usize)>>,
    started: bool,
    done: bool,
}

impl<S: Iterator<Item = Result<(Key, Value), Error>>> Merge<S> {
    pub(crate) fn new(sources: Vec<S>) -> Merge<S> {
        Merge {
            heads: sources.iter().map(|_| None).collect(),
            order: BinaryHeap::with_capacity(sources.len()),
            sources,
            started: false,
            done: false,
        }
    }

    /// The sources, for what they recorded while they were read.
    pub(crate) fn into_sources(self) -> Vec<S> {
        self.sources
    }

    /// Takes source `i`'s next entry as its head.
    fn pull(&mut self, i: usize) -> Result<(), Error> {
        if let Some((key, value)) = self.sources[i].next().transpose()? {
            self.heads[i] = Some(value);
            self.order.push(Reverse((key, i)));
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<Option<(Key, Value)>, Error> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                self.pull(i)?;
            }
        }
        let Some(Reverse((key, newest))) = self.order.pop() else {
            return Ok(None);
        };
        let value = self.heads[newest].take();
        // Older sources' entries for the same key are shadowed.
        while let Some(&Reverse((next, older))) = self.order.peek() {
            if next != key {
                break;
            }
            self.order.pop();
            self.heads[older] = None;
            self.pull(older)?;
        }
        self.pull(newest)?;
        Ok(value.map(|value| (key, value)))
    }
}

impl<S: Iterator<Item = Result<(Key, Value), Error>>> Iterator for Merge<S> {
    type Item = Result<(Key, Value), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.advance();
        ends_at_first_error(&mut self.done, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Mapped;

    fn stream(entries: &[(u64, u64)]) -> std::vec::IntoIter<Result<(Key, Value), Error>> {
        entries
            .iter()
            .map(|&(page, slot)| {
                Ok((
                    Key::new(0, page),
                    Value::Mapped(Mapped::new(slot, 0, slot + 1, vec![])),
                ))
            })
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn slots(merge: Merge<std::vec::IntoIter<Result<(Key, Value), Error>>>) -> Vec<(u64, u64)> {
        merge
            .map(|e| match e.unwrap() {
                (key, Value::Mapped(m)) => (key.page, m.slot),
                (key, Value::Dropped { .. }) => (key.page, u64::MAX),
            })
            .collect()
    }

    #[test]
    fn the_newest_source_wins_each_key_and_every_key_comes_once_in_order() {
        let newest = stream(&[(2, 20), (5, 50)]);
        let middle = stream(&[(1, 11), (2, 21), (9, 91)]);
        let oldest = stream(&[(1, 12), (2, 22), (5, 52), (7, 72)]);
        let merged = slots(Merge::new(vec![newest, middle, oldest]));
        assert_eq!(merged, [(1, 11), (2, 20), (5, 50), (7, 72), (9, 91)]);
    }

    #[test]
    fn an_error_from_a_source_ends_the_merge() {
        let failing = vec![
            Ok((Key::new(0, 1), Value::Dropped { seq: 1 })),
            Err(Error::Corrupt("bad".into())),
            Ok((Key::new(0, 3), Value::Dropped { seq: 3 })),
        ];
        let mut merge = Merge::new(vec![failing.into_iter(), stream(&[(2, 2)])]);
        assert!(matches!(merge.next(), Some(Err(Error::Corrupt(_)))));
        assert!(merge.next().is_none());
    }
}
