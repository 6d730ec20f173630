//! The write transaction: before-images for rollback and savepoints, node allocation and
//! reference counts, commit (one batch, one flush), spill and rollback.

use crate::format::StampKind;
use crate::node::Node;
use crate::tree::{RootState, Savepoint, Tree, Txn};
use crate::types::{Error, Result, Version};
use std::collections::{BTreeSet, HashMap};

impl Tree {
    pub(crate) fn usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(Error::Io(std::io::Error::other(format!(
                "the tree must be reopened: an earlier write failed ({why})"
            )))),
            None => Ok(()),
        }
    }

    pub(crate) fn txn_version(&self) -> Result<Version> {
        self.usable()?;
        self.txn
            .as_ref()
            .map(|t| t.version)
            .ok_or_else(|| Error::Misuse("no write transaction is open (call begin first)".into()))
    }

    fn txn_mut(&mut self) -> &mut Txn {
        self.txn.as_mut().expect("a transaction is open")
    }

    fn root_state(&self) -> RootState {
        (self.root, self.root_level, self.root_since)
    }

    /// Run a write step; if it fails half way the in-memory tree may be inconsistent, so
    /// the tree refuses further work until reopened.
    pub(crate) fn guarded<T>(&mut self, step: impl FnOnce(&mut Tree) -> Result<T>) -> Result<T> {
        let result = step(self);
        if let Err(e) = &result {
            if !matches!(e, Error::Misuse(_) | Error::VersionGone { .. }) {
                self.poisoned = Some(e.to_string());
            }
        }
        result
    }

    pub(crate) fn txn_begin(&mut self) -> Result<()> {
        self.usable()?;
        if self.txn.is_some() {
            return Err(Error::Misuse(
                "a write transaction is already open (transactions do not nest)".into(),
            ));
        }
        if self.pending_revert.is_some() {
            self.guarded(|t| t.settle_revert())?;
        }
        self.txn = Some(Txn {
            version: self.latest + 1,
            dirty: BTreeSet::new(),
            spilled: BTreeSet::new(),
            pre: HashMap::new(),
            savepoints: Vec::new(),
            allocated: Vec::new(),
            pending_free: Vec::new(),
            ref_log: Vec::new(),
            root_before: self.root_state(),
            last_modified: None,
        });
        Ok(())
    }

    /// Record before-images of `id`, mark it dirty, and collect its garbage: the writer is
    /// about to modify it anyway (lazy GC never dirties a node just to collect it).
    pub(crate) fn touch(&mut self, id: u64) -> Result<()> {
        let image = self.node(id)?.clone();
        let txn = self.txn.as_mut().expect("a transaction is open");
        let was_dirty = txn.dirty.contains(&id);
        txn.pre.entry(id).or_insert_with(|| Some(image.clone()));
        if let Some(sp) = txn.savepoints.last_mut() {
            sp.images.entry(id).or_insert((Some(image), was_dirty));
        }
        txn.dirty.insert(id);
        txn.last_modified = Some(id);
        self.collect_garbage(id)
    }

    fn collect_garbage(&mut self, id: u64) -> Result<()> {
        let horizon = self.oldest_readable_version();
        let node = self.node_mut(id)?;
        if node.cells.iter().all(|c| c.ev > horizon) {
            return Ok(());
        }
        let leaf = node.leaf;
        let mut dropped_children = Vec::new();
        let before = node.cells.len();
        node.cells.retain(|c| {
            let keep = c.ev > horizon;
            if !keep && !leaf {
                dropped_children.push(c.child);
            }
            keep
        });
        self.counters.gc_cells += (before - node.cells.len()) as u64;
        for child in dropped_children {
            self.decref(child)?;
        }
        Ok(())
    }

    /// A new node of this transaction.
    pub(crate) fn alloc(&mut self, leaf: bool) -> Result<u64> {
        if self.free.is_empty() {
            self.grow()?;
        }
        let id = self.free.pop_first().expect("growth made free nodes");
        self.cache.insert(
            id,
            Node {
                leaf,
                cells: Vec::new(),
            },
        );
        let txn = self.txn_mut();
        txn.pre.entry(id).or_insert(None);
        if let Some(sp) = txn.savepoints.last_mut() {
            sp.images.entry(id).or_insert((None, false));
        }
        txn.allocated.push(id);
        txn.dirty.insert(id);
        Ok(id)
    }

    pub(crate) fn incref(&mut self, id: u64) {
        *self.refs.entry(id).or_insert(0) += 1;
        self.txn_mut().ref_log.push((id, 1));
    }

    /// Drop one reference; a node left without any is free after commit, and so are the
    /// nodes only it referenced.
    pub(crate) fn decref(&mut self, id: u64) -> Result<()> {
        let mut work = vec![id];
        while let Some(id) = work.pop() {
            let count = self.refs.get_mut(&id).ok_or_else(|| {
                Error::Corrupt(format!(
                    "internal error: dropping a reference to unreferenced node {id}"
                ))
            })?;
            *count -= 1;
            let gone = *count == 0;
            if gone {
                self.refs.remove(&id);
            }
            let txn = self.txn.as_mut().expect("a transaction is open");
            txn.ref_log.push((id, -1));
            if gone {
                txn.pending_free.push(id);
                let node = self.node(id)?;
                if !node.leaf {
                    work.extend(node.cells.iter().map(|c| c.child));
                }
            }
        }
        Ok(())
    }

    fn undo_refs(&mut self, to: usize) {
        let txn = self.txn.as_mut().expect("a transaction is open");
        for (id, delta) in txn.ref_log.drain(to..).rev() {
            let count = self.refs.entry(id).or_insert(0);
            *count = (*count as i64 - delta as i64) as u32;
            if *count == 0 {
                self.refs.remove(&id);
            }
        }
    }

    pub(crate) fn txn_savepoint(&mut self) -> Result<usize> {
        self.txn_version()?;
        let root = self.root_state();
        let txn = self.txn_mut();
        txn.savepoints.push(Savepoint {
            images: HashMap::new(),
            allocated: txn.allocated.len(),
            pending_free: txn.pending_free.len(),
            ref_log: txn.ref_log.len(),
            root,
        });
        Ok(txn.savepoints.len())
    }

    fn check_depth(&self, depth: usize) -> Result<()> {
        let open = self.txn.as_ref().map_or(0, |t| t.savepoints.len());
        if depth == 0 || depth > open {
            return Err(Error::Misuse(format!(
                "no savepoint at depth {depth} ({open} open)"
            )));
        }
        Ok(())
    }

    /// Put back what savepoint `sp` recorded and truncate the logs to where it began.
    fn restore_savepoint(&mut self, sp: Savepoint) {
        self.undo_refs(sp.ref_log);
        let txn = self.txn.as_mut().expect("a transaction is open");
        for (id, (image, was_dirty)) in sp.images {
            match image {
                Some(node) => {
                    self.cache.insert(id, node);
                    // A spilled node's disk image no longer matches: it must be rewritten.
                    if was_dirty || txn.spilled.contains(&id) {
                        txn.dirty.insert(id);
                    } else {
                        txn.dirty.remove(&id);
                    }
                }
                None => {
                    self.cache.remove(&id);
                    txn.dirty.remove(&id);
                }
            }
        }
        self.free.extend(txn.allocated.drain(sp.allocated..));
        txn.pending_free.truncate(sp.pending_free);
        (self.root, self.root_level, self.root_since) = sp.root;
    }

    pub(crate) fn txn_rollback_to(&mut self, depth: usize) -> Result<()> {
        self.txn_version()?;
        self.check_depth(depth)?;
        loop {
            let txn = self.txn_mut();
            let sp = txn.savepoints.pop().expect("depth checked");
            let last = txn.savepoints.len() + 1 == depth;
            let reopened = Savepoint {
                images: HashMap::new(),
                allocated: sp.allocated,
                pending_free: sp.pending_free,
                ref_log: sp.ref_log,
                root: sp.root,
            };
            self.restore_savepoint(sp);
            if last {
                self.txn_mut().savepoints.push(reopened);
                return Ok(());
            }
        }
    }

    pub(crate) fn txn_release(&mut self, depth: usize) -> Result<()> {
        self.txn_version()?;
        self.check_depth(depth)?;
        let txn = self.txn_mut();
        while txn.savepoints.len() >= depth {
            let sp = txn.savepoints.pop().expect("depth checked");
            if let Some(outer) = txn.savepoints.last_mut() {
                for (id, record) in sp.images {
                    outer.images.entry(id).or_insert(record);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn txn_commit(&mut self) -> Result<u64> {
        self.txn_version()?;
        self.guarded(|t| t.commit_inner())
    }

    fn commit_inner(&mut self) -> Result<u64> {
        let txn = self.txn.take().expect("a transaction is open");
        let v = txn.version;
        let pending: BTreeSet<u64> = txn.pending_free.iter().copied().collect();
        let root_changed = self.root_state() != txn.root_before;
        let mut batch: Vec<u64> = txn
            .dirty
            .iter()
            .copied()
            .filter(|id| !pending.contains(id))
            .collect();
        if batch.is_empty() && txn.spilled.is_empty() && !root_changed {
            return Ok(self.latest);
        }
        let header = root_changed || !self.config.metadata_embedding;
        if batch.is_empty() && !header {
            // Everything was spilled: the version still needs one image stamped Commit,
            // and metadata embedding puts it in the last modified node.
            let carrier = txn
                .last_modified
                .filter(|id| self.cache.contains_key(id) && !pending.contains(id))
                .unwrap_or(self.root);
            batch.push(carrier);
        }
        let stamp = Tree::stamp(v, StampKind::Commit, (batch.len() + header as usize) as u32);
        for &id in &batch {
            self.write_node(id, &stamp)?;
        }
        if header {
            self.write_header(&stamp)?;
        }
        self.sync()?;
        self.latest = v;
        for id in pending {
            self.cache.remove(&id);
            self.free.insert(id);
        }
        self.counters.commits += 1;
        Ok(v)
    }

    pub(crate) fn txn_rollback(&mut self) -> Result<()> {
        self.txn_version()?;
        self.guarded(|t| t.rollback_inner())
    }

    fn rollback_inner(&mut self) -> Result<()> {
        self.undo_refs(0);
        let txn = self.txn.take().expect("a transaction is open");
        let v = txn.version;
        // Before-images are the exact committed state (including cells the transaction's
        // lazy GC dropped); with no spill nothing reached the disk.
        for (id, image) in txn.pre {
            match image {
                Some(node) => {
                    self.cache.insert(id, node);
                }
                None => {
                    self.cache.remove(&id);
                }
            }
        }
        self.free.extend(txn.allocated.iter().copied());
        (self.root, self.root_level, self.root_since) = txn.root_before;
        // Spilled images hold uncommitted content of a version number the next
        // transaction reuses: overwrite them with the reverted images.
        let stamp = Tree::stamp(v, StampKind::Spill, 0);
        let allocated: BTreeSet<u64> = txn.allocated.iter().copied().collect();
        let mut wrote = false;
        for id in txn.spilled {
            if self.cache.contains_key(&id) && !allocated.contains(&id) {
                self.write_node(id, &stamp)?;
                wrote = true;
            }
        }
        if wrote {
            self.sync()?;
        }
        self.counters.rollbacks += 1;
        Ok(())
    }

    pub(crate) fn txn_spill(&mut self) -> Result<()> {
        self.txn_version()?;
        self.guarded(|t| t.spill_inner())
    }

    pub(crate) fn spill_inner(&mut self) -> Result<()> {
        let txn = self.txn.as_mut().expect("a transaction is open");
        let v = txn.version;
        let pending: BTreeSet<u64> = txn.pending_free.iter().copied().collect();
        let dirty: Vec<u64> = std::mem::take(&mut txn.dirty).into_iter().collect();
        let stamp = Tree::stamp(v, StampKind::Spill, 0);
        let mut wrote = false;
        for id in dirty {
            if pending.contains(&id) {
                // Unreachable once committed; stays dirty in case a savepoint revives it.
                self.txn_mut().dirty.insert(id);
                continue;
            }
            self.write_node(id, &stamp)?;
            self.txn_mut().spilled.insert(id);
            wrote = true;
        }
        if wrote {
            self.sync()?;
        }
        Ok(())
    }
}
