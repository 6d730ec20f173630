//! Reads at a version: point lookups, ranges and counts through the entries alive then.

use crate::node::Cell;
use crate::{Error, Key, Result, Tree, Version};
use std::ops::Bound;

/// Deeper than any tree this format can hold: a cycle in a damaged file.
pub(crate) const MAX_DEPTH: usize = 64;

fn below_low(key: Key, low: Bound<Key>) -> bool {
    match low {
        Bound::Included(l) => key < l,
        Bound::Excluded(l) => key <= l,
        Bound::Unbounded => false,
    }
}

fn above_high(key: Key, high: Bound<Key>) -> bool {
    match high {
        Bound::Included(h) => key > h,
        Bound::Excluded(h) => key >= h,
        Bound::Unbounded => false,
    }
}

impl Tree {
    /// The path from the root to the leaf that holds `key` at version `at`.
    pub(crate) fn descend(&self, key: Key, at: Version) -> Result<Vec<u64>> {
        let mut path = vec![self.root];
        loop {
            let id = *path.last().expect("path starts at the root");
            let node = self.node(id)?;
            if node.leaf {
                return Ok(path);
            }
            let i = node
                .route(key, at)
                .ok_or_else(|| Error::Corrupt(format!("node {id} has no entry alive at version {at}")))?;
            path.push(node.cells[i].child);
            if path.len() > MAX_DEPTH {
                return Err(Error::Corrupt(
                    "the tree is deeper than any valid tree (a cycle?)".into(),
                ));
            }
        }
    }

    pub(crate) fn read_get(&self, key: Key, at: Version) -> Result<Option<Vec<u8>>> {
        self.usable()?;
        let path = self.descend(key, at)?;
        let leaf = self.node(*path.last().expect("non-empty path"))?;
        Ok(leaf.find_alive(key, at).map(|i| leaf.cells[i].value.clone()))
    }

    /// Visit the leaf cells alive at `at` with keys in [low, high], ascending, until `f`
    /// returns false. Each node is visited within the key range its parent gives it.
    pub(crate) fn visit(
        &self,
        low: Bound<Key>,
        high: Bound<Key>,
        at: Version,
        f: &mut dyn FnMut(&Cell) -> bool,
    ) -> Result<()> {
        self.visit_node(self.root, Key::MIN, None, low, high, at, 0, f)
            .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    fn visit_node(
        &self,
        id: u64,
        node_low: Key,
        node_high: Option<Key>,
        low: Bound<Key>,
        high: Bound<Key>,
        at: Version,
        depth: usize,
        f: &mut dyn FnMut(&Cell) -> bool,
    ) -> Result<bool> {
        if depth > MAX_DEPTH {
            return Err(Error::Corrupt(
                "the tree is deeper than any valid tree (a cycle?)".into(),
            ));
        }
        let node = self.node(id)?;
        if node.leaf {
            for c in node.cells.iter().filter(|c| c.alive_at(at)) {
                if c.key < node_low || node_high.is_some_and(|h| c.key >= h) || below_low(c.key, low) {
                    continue;
                }
                if above_high(c.key, high) {
                    return Ok(false);
                }
                if !f(c) {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let alive: Vec<&Cell> = node.cells.iter().filter(|c| c.alive_at(at)).collect();
        for (i, entry) in alive.iter().enumerate() {
            let child_high = alive.get(i + 1).map(|n| n.key).or(node_high);
            if child_high.is_some_and(|h| below_low(h.saturating_sub(1), low) || h <= node_low) {
                continue;
            }
            if above_high(entry.key, high) && entry.key > node_low {
                return Ok(false);
            }
            let child_low = entry.key.max(node_low);
            if !self.visit_node(entry.child, child_low, child_high, low, high, at, depth + 1, f)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub(crate) fn read_range(
        &self,
        low: Bound<Key>,
        high: Bound<Key>,
        at: Version,
        limit: usize,
    ) -> Result<Vec<(Key, Vec<u8>)>> {
        self.usable()?;
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.visit(low, high, at, &mut |c| {
            out.push((c.key, c.value.clone()));
            out.len() < limit
        })?;
        Ok(out)
    }

    pub(crate) fn read_count(&self, at: Version) -> Result<u64> {
        self.usable()?;
        let mut n = 0u64;
        self.visit(Bound::Unbounded, Bound::Unbounded, at, &mut |_| {
            n += 1;
            true
        })?;
        Ok(n)
    }
}
