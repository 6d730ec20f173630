//! The page cache: file blocks read or written since the mount, which of them are dirty, and
//! writing them back (home, into the file's drive transaction, or through the journal).

use std::ops::RangeInclusive;

use super::{FlashFs, FsError, FsResult, Journaling};
use crate::Lpn;

impl FlashFs {
    /// Brings a file block into the cache (zeros if never written).
    pub(super) fn load_block(&mut self, ino: u32, fblock: u64) -> FsResult<()> {
        if self.cache.contains_key(&(ino, fblock)) {
            return Ok(());
        }
        let bs = self.layout.block_size;
        let mut data = vec![0u8; bs].into_boxed_slice();
        let state = self.file(ino)?;
        let size = state.inode.size;
        if state.initialized.contains(&fblock) {
            if let Some(lpn) = state.inode.extents.lpn_of(fblock) {
                if let Some(pending) = self.pending_home.get(&lpn) {
                    data.copy_from_slice(pending);
                } else {
                    self.ssd.read(lpn, &mut data)?;
                }
            }
        }
        // As Linux's readpage does: bytes past the end of the file read as zeros, whatever
        // the block holds there (data of an extension that a crash kept from committing), so
        // that growing the file later shows zeros and writes them.
        let block_start = fblock * bs as u64;
        if size < block_start + bs as u64 {
            data[size.saturating_sub(block_start) as usize..].fill(0);
        }
        self.cache.insert((ino, fblock), data);
        Ok(())
    }

    /// The cached block, marked dirty (a zero block if it was not cached).
    pub(super) fn dirty_block(&mut self, ino: u32, fblock: u64) -> &mut Box<[u8]> {
        self.dirty.insert((ino, fblock));
        let size = self.layout.block_size;
        self.cache
            .entry((ino, fblock))
            .or_insert_with(|| vec![0u8; size].into_boxed_slice())
    }

    pub(super) fn drop_cached(&mut self, ino: u32, from_block: u64) {
        let keys: Vec<(u32, u64)> = self
            .cache
            .range(file_blocks(ino, from_block))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.cache.remove(&key);
            self.dirty.remove(&key);
        }
    }

    /// Takes the file's dirty blocks out of the dirty state: (file block, home lpn, content).
    pub(super) fn take_dirty(&mut self, ino: u32) -> FsResult<Vec<DirtyBlock>> {
        let keys: Vec<(u32, u64)> = self.dirty.range(file_blocks(ino, 0)).copied().collect();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let fblock = key.1;
            let lpn = self.file(ino)?.inode.extents.lpn_of(fblock).ok_or_else(|| {
                FsError::Corrupt(format!("cached block {fblock} of inode {ino} has no home"))
            })?;
            self.dirty.remove(&key);
            out.push(DirtyBlock {
                fblock,
                lpn,
                data: self.cache[&key].clone(),
            });
        }
        Ok(out)
    }

    /// Writes the file's dirty blocks to the drive: home (ordered), into its transaction
    /// (X-FTL), or through a journal commit (data journaling).
    pub(super) fn write_back_file(&mut self, ino: u32) -> FsResult<()> {
        let blocks = self.take_dirty(ino)?;
        if blocks.is_empty() {
            return Ok(());
        }
        match self.cfg.journaling {
            Journaling::Ordered => {
                for DirtyBlock { lpn, data, .. } in blocks {
                    self.ssd.write(lpn, &data)?;
                    self.counters.data_blocks_written += 1;
                }
            }
            Journaling::XFtl => {
                let tx = self.tx_of(ino)?;
                for DirtyBlock { fblock, lpn, data } in blocks {
                    self.ssd.write_tx(tx, lpn, &data)?;
                    self.counters.data_blocks_written += 1;
                    self.file_mut(ino)?.tx_written.insert(fblock);
                }
            }
            Journaling::Data => self.journal_commit(homes(blocks))?,
        }
        Ok(())
    }

    pub(super) fn write_back_all(&mut self) -> FsResult<()> {
        let inos: Vec<u32> = self.names.values().copied().collect();
        for ino in inos {
            self.write_back_file(ino)?;
        }
        Ok(())
    }
}

/// Cache keys of file `ino` from block `from`.
pub(super) fn file_blocks(ino: u32, from: u64) -> RangeInclusive<(u32, u64)> {
    (ino, from)..=(ino, u64::MAX)
}

/// A file block taken out of the dirty state to be written.
pub(super) struct DirtyBlock {
    fblock: u64,
    /// Its home on the drive.
    lpn: Lpn,
    data: Box<[u8]>,
}

/// Dirty blocks as (home, content), for the journal.
pub(super) fn homes(blocks: Vec<DirtyBlock>) -> Vec<(Lpn, Box<[u8]>)> {
    blocks.into_iter().map(|b| (b.lpn, b.data)).collect()
}
