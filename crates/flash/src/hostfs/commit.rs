//! Making changes durable: the commit timer, X-FTL transaction commits, what every commit
//! releases, and the metadata blocks a commit writes (rendered from the in-memory state).

use onesync_codec::{OnDisk, Writer};

use super::layout::{bitmap_block, directory_block, group_descriptor_block, InodeSlot};
use super::{FlashFs, FsResult, Journaling};
use crate::{Lpn, TxId};

impl FlashFs {
    pub(super) fn tx_of(&mut self, ino: u32) -> FsResult<TxId> {
        let next = self.next_tx;
        let state = self.file_mut(ino)?;
        let tx = *state.tx.get_or_insert(next);
        if tx == next {
            self.next_tx += 1;
        }
        Ok(tx)
    }

    pub(super) fn dirty_meta(&mut self, lpns: &[Lpn]) {
        if self.meta_dirty.is_empty() {
            self.running_since_us = Some(self.ssd.now_us());
        }
        self.meta_dirty.extend(lpns.iter().copied());
    }

    /// jbd2's commit timer.
    pub(super) fn commit_if_due(&mut self) -> FsResult<()> {
        let Some(since) = self.running_since_us else {
            return Ok(());
        };
        if self.ssd.now_us() - since < self.cfg.commit_interval_us || self.meta_dirty.is_empty() {
            return Ok(());
        }
        match self.cfg.journaling {
            Journaling::XFtl => self.commit_meta_tx(),
            _ => {
                self.write_back_all()?;
                self.journal_commit(Vec::new())
            }
        }
    }

    /// X-FTL: writes the metadata blocks `meta` under `tx` and commits it.
    pub(super) fn commit_with_meta(&mut self, tx: TxId, meta: &[Lpn]) -> FsResult<()> {
        for &lpn in meta {
            let block = self.meta_block(lpn);
            self.ssd.write_tx(tx, lpn, &block)?;
            self.counters.meta_blocks_written += 1;
        }
        self.ssd.commit(tx)?;
        self.counters.tx_commits += 1;
        self.counters.flushes += 1;
        Ok(())
    }

    /// X-FTL: commits the metadata changes not yet committed with a file.
    pub(super) fn commit_meta_tx(&mut self) -> FsResult<()> {
        if self.meta_dirty.is_empty() {
            return self.flush();
        }
        let tx = self.next_tx;
        self.next_tx += 1;
        let meta: Vec<Lpn> = std::mem::take(&mut self.meta_dirty).into_iter().collect();
        self.commit_with_meta(tx, &meta)?;
        self.after_commit(None)
    }

    pub(super) fn flush(&mut self) -> FsResult<()> {
        self.ssd.flush()?;
        self.counters.flushes += 1;
        Ok(())
    }

    /// After the running transaction committed: freed blocks become reusable (and are
    /// discarded if so mounted).
    pub(super) fn after_commit(&mut self, committed_file: Option<u32>) -> FsResult<()> {
        self.running_since_us = None;
        if self.cfg.journaling != Journaling::XFtl {
            for state in self.inodes.iter_mut().flatten() {
                state.needs_commit = false;
            }
        }
        // Under X-FTL a truncation is durable only with its file's commit; everything else
        // (journal commits, unlinks) with any commit.
        let (released, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.freed_uncommitted)
            .into_iter()
            .partition(|&(_, _, owner)| {
                self.cfg.journaling != Journaling::XFtl || owner.is_none() || owner == committed_file
            });
        self.freed_uncommitted = kept;
        for (start, len, _) in released {
            for lpn in start..start + len {
                self.set_used(lpn, false);
                self.pending_home.remove(&lpn);
                if self.cfg.discard {
                    self.ssd.trim(lpn)?;
                }
            }
        }
        Ok(())
    }

    /// The current content of a metadata block.
    pub(super) fn meta_block(&self, lpn: Lpn) -> Vec<u8> {
        let bs = self.layout.block_size;
        let l = &self.layout;
        if lpn >= l.inode_start && lpn < l.inode_start + l.inode_blocks {
            let first = ((lpn - l.inode_start) as usize) * l.inodes_per_block();
            let mut w = Writer::with_capacity(bs);
            for i in 0..l.inodes_per_block() {
                // X-FTL: a file's changes become durable only with its own commit, so other
                // files' inodes go in as last committed (a file never committed does not
                // exist yet).
                let inode = match self.inodes.get(first + i) {
                    Some(Some(state)) if self.cfg.journaling == Journaling::XFtl => state.committed.as_ref(),
                    Some(Some(state)) => Some(&state.inode),
                    _ => None,
                };
                match inode {
                    Some(inode) => InodeSlot::Used(inode.clone()).encode(&(), &mut w),
                    None => InodeSlot::Free.encode(&(), &mut w),
                }
            }
            w.pad_to(bs);
            return w.into_bytes();
        }
        if lpn == l.inode_bitmap {
            let used = self.inodes.iter().enumerate().filter(|(_, s)| s.is_some());
            bitmap_block(bs, used.map(|(i, _)| i))
        } else if lpn == l.directory {
            let mut names: Vec<(&String, &u32)> = self.names.iter().collect();
            names.sort();
            directory_block(bs, names.into_iter().map(|(name, &ino)| (ino, name.as_str())))
        } else if lpn == l.group_desc {
            let free_blocks = self.used_blocks.iter().filter(|u| !**u).count() as u64;
            let free_inodes = self.inodes.iter().filter(|s| s.is_none()).count() as u64;
            group_descriptor_block(bs, free_blocks, free_inodes)
        } else if lpn >= l.block_bitmap_start && lpn < l.block_bitmap_start + l.block_bitmap_blocks {
            let first = (lpn - l.block_bitmap_start) as usize * bs * 8;
            let used = self.used_blocks.iter().enumerate().skip(first).take(bs * 8 - 32);
            bitmap_block(bs, used.filter(|(_, u)| **u).map(|(i, _)| i - first))
        } else {
            bitmap_block(bs, std::iter::empty())
        }
    }
}
