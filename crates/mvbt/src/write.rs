//! Writes at the transaction's version: insert, update, delete, and what an overflowing
//! node does — the reserved buffer, sibling redistribution, lazy split (Algorithm 1) or
//! the classic MVBT split.

use crate::format::{INFINITY, SLOT_HEADER};
use crate::node::Cell;
use crate::{Error, Key, Result, SplitPolicy, Tree, SPILL_LIMIT_NODES};

enum Fit {
    Fits,
    /// Over the normal limit but within the reserved buffer of a lazy node.
    Reserve,
    Overflows,
}

#[derive(Clone, Copy)]
enum Side {
    Left,
    Right,
}

impl Tree {
    fn capacity(&self) -> usize {
        self.node_size - SLOT_HEADER
    }

    fn uses_reserve(&self) -> bool {
        self.config.split == SplitPolicy::Lazy && self.config.reserved_cells > 0
    }

    /// Bytes a node keeps free for the reserved buffer: room for `reserved_cells` more
    /// cells as large as its largest.
    fn reserve_bytes(&self, id: u64) -> Result<usize> {
        if !self.uses_reserve() {
            return Ok(0);
        }
        let n = self.node(id)?;
        let largest = n.cells.iter().map(|c| n.cell_size(c)).max().unwrap_or(0);
        Ok(self.config.reserved_cells * largest)
    }

    fn fit(&self, id: u64) -> Result<Fit> {
        let n = self.node(id)?;
        let used = n.used();
        if used + self.reserve_bytes(id)? <= self.capacity() {
            return Ok(Fit::Fits);
        }
        // A lazy node (dead cells this transaction cannot collect yet) may use its reserve.
        if self.uses_reserve() && used <= self.capacity() && n.cells.iter().any(|c| c.ev != INFINITY) {
            return Ok(Fit::Reserve);
        }
        Ok(Fit::Overflows)
    }

    fn maybe_auto_spill(&mut self) -> Result<()> {
        if self
            .txn
            .as_ref()
            .is_some_and(|t| t.dirty.len() > SPILL_LIMIT_NODES)
        {
            self.spill_inner()?;
        }
        Ok(())
    }

    pub(crate) fn txn_put(&mut self, key: Key, value: &[u8]) -> Result<bool> {
        let v = self.txn_version()?;
        if value.len() > self.max_value_len() {
            return Err(Error::Misuse(format!(
                "a {}-byte value is too large: with {}-byte nodes values may have at most {} bytes (four cells per node)",
                value.len(),
                self.node_size,
                self.max_value_len()
            )));
        }
        self.guarded(|t| {
            let path = t.descend(key, v)?;
            let leaf = *path.last().expect("non-empty path");
            t.touch(leaf)?;
            let node = t.node_mut(leaf)?;
            let fresh = Cell {
                key,
                sv: v,
                ev: INFINITY,
                child: 0,
                value: value.to_vec(),
            };
            let existed = match node.find_alive(key, v) {
                Some(i) if node.cells[i].sv == v => {
                    node.cells[i].value = value.to_vec();
                    true
                }
                Some(i) => {
                    node.cells[i].ev = v;
                    node.cells.insert(i + 1, fresh);
                    true
                }
                None => {
                    node.insert_sorted(fresh);
                    false
                }
            };
            t.fix_overflow(&path)?;
            t.maybe_auto_spill()?;
            Ok(existed)
        })
    }

    pub(crate) fn txn_delete(&mut self, key: Key) -> Result<bool> {
        let v = self.txn_version()?;
        self.guarded(|t| {
            let path = t.descend(key, v)?;
            let leaf = *path.last().expect("non-empty path");
            if t.node(leaf)?.find_alive(key, v).is_none() {
                return Ok(false);
            }
            t.touch(leaf)?;
            let node = t.node_mut(leaf)?;
            let i = node
                .find_alive(key, v)
                .expect("garbage collection keeps live cells");
            if node.cells[i].sv == v {
                node.cells.remove(i);
            } else {
                node.cells[i].ev = v;
            }
            t.maybe_auto_spill()?;
            Ok(true)
        })
    }

    /// Resolve overflows from the leaf of `path` upwards.
    fn fix_overflow(&mut self, path: &[u64]) -> Result<()> {
        for level in (0..path.len()).rev() {
            let id = path[level];
            match self.fit(id)? {
                Fit::Fits => return Ok(()),
                Fit::Reserve => {
                    self.counters.reserve_absorbed += 1;
                    return Ok(());
                }
                Fit::Overflows => {}
            }
            let parent = level.checked_sub(1).map(|l| path[l]);
            match parent {
                Some(p) if self.config.sibling_redistribution && self.redistribute(id, p)? => {
                    self.counters.redistributions += 1;
                }
                _ => self.split(id, parent)?,
            }
        }
        Ok(())
    }

    fn split(&mut self, id: u64, parent: Option<u64>) -> Result<()> {
        let v = self.txn_version()?;
        self.counters.splits += 1;
        if self.config.split == SplitPolicy::Lazy {
            let n = self.node(id)?;
            let live: Vec<&Cell> = n.cells.iter().filter(|c| c.alive_at(v)).collect();
            if live.len() >= 2 {
                let median = live[(live.len() - 1) / 2].key;
                // Moved cells stay behind dead, except those this version wrote itself.
                let freed: usize = live
                    .iter()
                    .filter(|c| c.key > median && c.sv == v)
                    .map(|c| n.cell_size(c))
                    .sum();
                if n.used() - freed <= self.capacity() {
                    self.counters.lazy_splits += 1;
                    return self.lazy_split(id, parent, median);
                }
            }
        }
        self.classic_split(id, parent)
    }

    /// Algorithm 1: one new node takes the live cells above the median as copies born at
    /// `v`; the overflowed node keeps them dead (it becomes the "lazy node").
    fn lazy_split(&mut self, id: u64, parent: Option<u64>, median: Key) -> Result<()> {
        let v = self.txn_version()?;
        self.touch(id)?;
        let leaf = self.node(id)?.leaf;
        let sibling = self.alloc(leaf)?;
        let node = self.node_mut(id)?;
        let (moved, dropped_children) = node.end_at(v, |c| c.key > median);
        let low = moved[0].key;
        let children: Vec<u64> = moved.iter().map(|c| c.child).collect();
        self.node_mut(sibling)?.cells = moved;
        if !leaf {
            for c in children {
                self.incref(c);
            }
            for c in dropped_children {
                self.decref(c)?;
            }
        }
        self.replace_in_parent(parent, id, vec![(Key::MIN, id), (low, sibling)])
    }

    /// Becker et al.: the node dies at `v` (its live cells end there) and its live cells
    /// are copied into one new node, or two when one would be too full.
    fn classic_split(&mut self, id: u64, parent: Option<u64>) -> Result<()> {
        let v = self.txn_version()?;
        self.touch(id)?;
        let cap = self.capacity();
        let node = self.node_mut(id)?;
        let leaf = node.leaf;
        let (copies, dropped_children) = node.end_at(v, |_| true);
        let size = |c: &Cell| c.size_in(leaf);
        let total: usize = copies.iter().map(size).sum();
        let mut groups = vec![copies];
        if total > cap * 3 / 4 && groups[0].len() >= 2 {
            let mut acc = 0;
            let first = &groups[0];
            let mut cut = first.len() - 1;
            for (i, c) in first.iter().enumerate() {
                acc += size(c);
                if acc * 2 >= total {
                    cut = (i + 1).clamp(1, first.len() - 1);
                    break;
                }
            }
            let upper = groups[0].split_off(cut);
            groups.push(upper);
        }
        let mut replacements = Vec::new();
        for group in groups {
            let new = self.alloc(leaf)?;
            let low = group.first().map_or(Key::MIN, |c| c.key);
            if !leaf {
                for c in &group {
                    self.incref(c.child);
                }
            }
            self.node_mut(new)?.cells = group;
            replacements.push((low, new));
        }
        if !leaf {
            for c in dropped_children {
                self.decref(c)?;
            }
        }
        self.replace_in_parent(parent, id, replacements)
    }

    /// The parent's entry for `old` (alive at `v`) ends at `v` and `replacements` start at
    /// `v`; the first replacement takes the old entry's key. At the root a new root is
    /// made, with a dead entry for the old root while older versions still need it.
    fn replace_in_parent(
        &mut self,
        parent: Option<u64>,
        old: u64,
        replacements: Vec<(Key, u64)>,
    ) -> Result<()> {
        let v = self.txn_version()?;
        let Some(p) = parent else {
            // Versions before v still read through the old root, unless it held nothing
            // then (a leaf whose every cell this version wrote).
            let old_needed = self.node(old)?.cells.iter().any(|c| c.sv < v) || !self.node(old)?.leaf;
            if replacements.len() == 1 && !old_needed {
                let new = replacements[0].1;
                self.incref(new);
                self.decref(old)?;
                self.root = new;
                self.root_since = v;
                return Ok(());
            }
            let root = self.alloc(false)?;
            // The old root serves every version before v (each root's dead entry covers
            // its predecessor's), so its entry spans [0, v).
            let mut cells = vec![Cell::entry(Key::MIN, 0, v, old)];
            self.incref(old);
            for (i, &(key, child)) in replacements.iter().enumerate() {
                let key = if i == 0 { Key::MIN } else { key };
                cells.push(Cell::entry(key, v, INFINITY, child));
                self.incref(child);
            }
            self.node_mut(root)?.cells = cells;
            self.incref(root);
            self.decref(old)?;
            self.root = root;
            self.root_level += 1;
            self.root_since = v;
            return Ok(());
        };
        self.touch(p)?;
        let node = self.node_mut(p)?;
        let i = node.live_entry_of(old, v).ok_or_else(|| no_live_entry(p, old))?;
        let entry_key = node.cells[i].key;
        let drop_old = node.cells[i].sv == v;
        if drop_old {
            node.cells.remove(i);
        } else {
            node.cells[i].ev = v;
        }
        for (j, &(key, child)) in replacements.iter().enumerate() {
            let key = if j == 0 { entry_key } else { key };
            node.insert_sorted(Cell::entry(key, v, INFINITY, child));
        }
        for &(_, child) in &replacements {
            self.incref(child);
        }
        if drop_old {
            self.decref(old)?;
        }
        Ok(())
    }

    /// Sibling redistribution: move edge cells of `id` into a neighbour with room, if that
    /// makes `id` fit. Moving only frees cells this version wrote (older ones stay behind
    /// dead for older versions), so it mostly helps when the new cell is at an edge.
    fn redistribute(&mut self, id: u64, parent: u64) -> Result<bool> {
        let v = self.txn_version()?;
        let p = self.node(parent)?;
        let alive: Vec<(Key, u64)> = p
            .cells
            .iter()
            .filter(|c| c.alive_at(v))
            .map(|c| (c.key, c.child))
            .collect();
        let Some(pos) = alive.iter().position(|&(_, c)| c == id) else {
            return Ok(false);
        };
        let mut candidates = Vec::new();
        if pos > 0 {
            candidates.push((Side::Left, alive[pos - 1].1));
        }
        if pos + 1 < alive.len() {
            candidates.push((Side::Right, alive[pos + 1].1));
        }
        let cap = self.capacity();
        for (side, sibling) in candidates {
            let n = self.node(id)?;
            let s = self.node(sibling)?;
            let live: Vec<&Cell> = n.cells.iter().filter(|c| c.alive_at(v)).collect();
            let (n_used, s_used) = (n.used(), s.used());
            let (n_reserve, s_reserve) = (self.reserve_bytes(id)?, self.reserve_bytes(sibling)?);
            let mut freed = 0;
            let mut added = 0;
            for k in 1..live.len() {
                let c = match side {
                    Side::Left => live[k - 1],
                    Side::Right => live[live.len() - k],
                };
                if c.sv == v {
                    freed += n.cell_size(c);
                }
                added += n.cell_size(c);
                if s_used + added + s_reserve > cap {
                    break;
                }
                if n_used - freed + n_reserve <= cap {
                    let moved: Vec<Key> = match side {
                        Side::Left => live[..k].iter().map(|c| c.key).collect(),
                        Side::Right => live[live.len() - k..].iter().map(|c| c.key).collect(),
                    };
                    self.move_to_sibling(id, sibling, parent, side, &moved)?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn move_to_sibling(
        &mut self,
        id: u64,
        sibling: u64,
        parent: u64,
        side: Side,
        keys: &[Key],
    ) -> Result<()> {
        let v = self.txn_version()?;
        self.touch(id)?;
        self.touch(sibling)?;
        self.touch(parent)?;
        let node = self.node_mut(id)?;
        let leaf = node.leaf;
        let (moved, dropped_children) = node.end_at(v, |c| keys.contains(&c.key));
        let first_left = node.cells.iter().find(|c| c.alive_at(v)).map(|c| c.key);
        let moved_low = moved[0].key;
        let children: Vec<u64> = moved.iter().map(|c| c.child).collect();
        let s = self.node_mut(sibling)?;
        s.cells.extend(moved);
        s.sort();
        if !leaf {
            for c in children {
                self.incref(c);
            }
            for c in dropped_children {
                self.decref(c)?;
            }
        }
        // The router of whichever node's low end moved changes.
        let (rekeyed, new_key) = match side {
            Side::Left => (id, first_left.expect("redistribution keeps a live cell")),
            Side::Right => (sibling, moved_low),
        };
        let p = self.node_mut(parent)?;
        let i = p
            .live_entry_of(rekeyed, v)
            .ok_or_else(|| no_live_entry(parent, rekeyed))?;
        if p.cells[i].sv == v {
            p.cells[i].key = new_key;
            p.sort();
        } else {
            p.cells[i].ev = v;
            p.insert_sorted(Cell::entry(new_key, v, INFINITY, rekeyed));
            self.incref(rekeyed);
        }
        Ok(())
    }
}

fn no_live_entry(parent: u64, child: u64) -> Error {
    Error::Corrupt(format!(
        "internal error: node {parent} has no live entry for its child {child}"
    ))
}
