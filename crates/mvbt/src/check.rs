//! `Tree::check`: structure, life spans and references over everything reachable, the
//! key partition at every readable version, and that clean nodes match their newest
//! valid image on disk.

use crate::format::{self, SlotImage, INFINITY, SLOT_HEADER};
use crate::node::Node;
use crate::read::MAX_DEPTH;
use crate::{Error, Key, Result, Tree, Version};
use std::collections::{BTreeSet, HashMap};

/// Versions checked at most (the newest ones).
const MAX_CHECKED_VERSIONS: u64 = 32;

fn bad(msg: String) -> Error {
    Error::Corrupt(format!("check failed: {msg}"))
}

impl Tree {
    pub(crate) fn check_tree(&mut self) -> Result<()> {
        self.usable()?;
        let current = self.current_read_version();
        let capacity = self.node_size - SLOT_HEADER;

        let mut refs: HashMap<u64, u32> = HashMap::from([(self.root, 1)]);
        let mut levels: HashMap<u64, u32> = HashMap::new();
        let mut stack = vec![(self.root, self.root_level)];
        while let Some((id, level)) = stack.pop() {
            if let Some(&seen) = levels.get(&id) {
                if seen != level {
                    return Err(bad(format!("node {id} is reached at levels {seen} and {level}")));
                }
                continue;
            }
            levels.insert(id, level);
            if self.free.contains(&id) {
                return Err(bad(format!("reachable node {id} is in the free set")));
            }
            let node = self.node(id)?;
            if node.leaf != (level == 0) {
                return Err(bad(format!("node {id} at level {level} has the wrong kind")));
            }
            if node.used() > capacity {
                return Err(bad(format!(
                    "node {id} holds {} bytes, more than {capacity}",
                    node.used()
                )));
            }
            for pair in node.cells.windows(2) {
                if (pair[0].key, pair[0].sv) >= (pair[1].key, pair[1].sv) {
                    return Err(bad(format!(
                        "node {id}: cells out of order at key {}",
                        pair[1].key
                    )));
                }
            }
            for c in &node.cells {
                if c.sv >= c.ev || c.sv > current || (c.ev != INFINITY && c.ev > current) {
                    return Err(bad(format!(
                        "node {id}: key {} has life span [{}, {}) at version {current}",
                        c.key, c.sv, c.ev
                    )));
                }
                if !node.leaf {
                    *refs.entry(c.child).or_insert(0) += 1;
                    stack.push((c.child, level.wrapping_sub(1)));
                }
            }
        }
        if refs != self.refs {
            let differs = refs
                .keys()
                .chain(self.refs.keys())
                .find(|id| refs.get(id) != self.refs.get(id))
                .copied();
            return Err(bad(format!(
                "reference counts differ from the tree, first at node {differs:?}: counted {:?}, kept {:?}",
                differs.and_then(|d| refs.get(&d)),
                differs.and_then(|d| self.refs.get(&d))
            )));
        }

        let oldest = self
            .oldest_readable_version()
            .max(self.latest.saturating_sub(MAX_CHECKED_VERSIONS));
        let mut versions: BTreeSet<Version> = (oldest..=self.latest).collect();
        versions.insert(current);
        for at in versions {
            let mut leaf_depth = None;
            self.check_version(self.root, Key::MIN, None, at, 0, &mut leaf_depth)?;
        }

        let dirty: BTreeSet<u64> = self.txn.as_ref().map(|t| t.dirty.clone()).unwrap_or_default();
        let size = self.io.size()?;
        for (&id, node) in &self.cache {
            if dirty.contains(&id) {
                continue;
            }
            let mut newest: Option<(Version, Node)> = None;
            for slot in 0..2 {
                let offset = self.slot_offset(id, slot);
                if offset + self.node_size as u64 > size {
                    continue;
                }
                let mut buf = vec![0u8; self.node_size];
                self.io.read_at(&mut buf, offset)?;
                if let SlotImage::Valid(v) = format::decode_slot(&buf, id) {
                    if newest.as_ref().is_none_or(|(s, _)| *s < v.stamp) {
                        newest = v.node.map(|n| (v.stamp, n));
                    }
                }
            }
            // Until the first write transaction, the reverted version's images are on disk
            // as the crash left them: the node must equal Algorithm 2 applied to them.
            if let (Some(pending), Some((stamp, disk))) = (&self.pending_revert, newest.as_mut()) {
                if *stamp == pending.version {
                    let revert_ends = self.config.sabotage != Some(crate::Sabotage::SkipRevertEndVersions);
                    crate::recovery::revert_version(disk, pending.version, revert_ends);
                }
            }
            match newest {
                Some((_, disk)) if &disk == node => {}
                Some((stamp, _)) => {
                    return Err(bad(format!(
                        "clean node {id} differs from its newest image on disk (v{stamp})"
                    )))
                }
                None => return Err(bad(format!("clean node {id} has no valid image on disk"))),
            }
        }
        Ok(())
    }

    fn check_version(
        &self,
        id: u64,
        low: Key,
        high: Option<Key>,
        at: Version,
        depth: usize,
        leaf_depth: &mut Option<usize>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(bad("the tree is too deep (a cycle?)".into()));
        }
        let node = self.node(id)?;
        let alive: Vec<_> = node.cells.iter().filter(|c| c.alive_at(at)).collect();
        for pair in alive.windows(2) {
            if pair[0].key >= pair[1].key {
                return Err(bad(format!(
                    "node {id}: two cells alive at v{at} for key {}",
                    pair[1].key
                )));
            }
        }
        for c in &alive {
            if c.key < low || high.is_some_and(|h| c.key >= h) {
                return Err(bad(format!(
                    "node {id}: key {} alive at v{at} lies outside its range [{low}, {high:?})",
                    c.key
                )));
            }
        }
        if node.leaf {
            match *leaf_depth {
                None => *leaf_depth = Some(depth),
                Some(d) if d != depth => {
                    return Err(bad(format!("leaves at depths {d} and {depth} at v{at}")));
                }
                Some(_) => {}
            }
            return Ok(());
        }
        match alive.first() {
            None => return Err(bad(format!("internal node {id} has no entry alive at v{at}"))),
            Some(first) if first.key != low => {
                return Err(bad(format!(
                    "internal node {id}: first entry alive at v{at} has key {} but its range starts at {low}",
                    first.key
                )));
            }
            Some(_) => {}
        }
        for (i, entry) in alive.iter().enumerate() {
            let child_high = alive.get(i + 1).map(|n| n.key).or(high);
            self.check_version(entry.child, entry.key, child_high, at, depth + 1, leaf_depth)?;
        }
        Ok(())
    }
}
