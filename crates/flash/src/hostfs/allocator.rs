//! The block allocator: which data blocks are in use, chunked allocation next to a file's
//! last extent, and blocks freed by operations not yet committed.

use super::layout::{Extents, MAX_EXTENTS};
use super::{FlashFs, FsError, FsResult};
use crate::Lpn;

/// Largest allocation chunk when a file grows, in blocks.
const MAX_ALLOC_CHUNK: u64 = 256;

impl FlashFs {
    pub(super) fn block_bitmap_blocks(&self) -> impl Iterator<Item = Lpn> {
        self.layout.block_bitmap_start..self.layout.block_bitmap_start + self.layout.block_bitmap_blocks
    }

    pub(super) fn set_used(&mut self, lpn: Lpn, used: bool) {
        if let Some(slot) = lpn
            .checked_sub(self.layout.data_start)
            .and_then(|i| self.used_blocks.get_mut(i as usize))
        {
            *slot = used;
        }
    }

    /// Blocks in use: every file's extents and blocks freed by uncommitted operations.
    pub(super) fn rebuild_used(&mut self) {
        self.used_blocks.fill(false);
        let mut taken: Vec<Lpn> = self
            .inodes
            .iter()
            .flatten()
            .flat_map(|s| expand(&s.inode.extents).collect::<Vec<_>>())
            .collect();
        taken.extend(self.freed_uncommitted.iter().flat_map(|&(s, l, _)| s..s + l));
        for lpn in taken {
            self.set_used(lpn, true);
        }
    }

    /// Allocates blocks so that file block `last` exists.
    pub(super) fn ensure_allocated(&mut self, ino: u32, last: u64) -> FsResult<()> {
        let have = self.file(ino)?.inode.extents.blocks();
        if last < have {
            return Ok(());
        }
        let need = last + 1 - have;
        let chunk = need.max(have.clamp(self.cfg.min_alloc_blocks, MAX_ALLOC_CHUNK));
        let mut goal = self.file(ino)?.inode.extents.end();
        let mut got = 0;
        let mut new_extents = Vec::new();
        while got < chunk {
            let want = chunk - got;
            let (start, len) = match self.find_free(goal, want) {
                Some(run) => run,
                None if got >= need => break,
                None => {
                    // Undo this call's allocation before failing.
                    for &(s, l) in &new_extents {
                        for lpn in s..s + l {
                            self.set_used(lpn, false);
                        }
                    }
                    return Err(FsError::NoSpace(format!(
                        "no free block for {need} more block(s)"
                    )));
                }
            };
            for lpn in start..start + len {
                self.set_used(lpn, true);
            }
            new_extents.push((start, len));
            got += len;
            goal = Some(start + len);
        }
        let state = self.file_mut(ino)?;
        let mut extents = state.inode.extents.clone();
        for &(s, l) in &new_extents {
            extents.push(s, l);
        }
        if extents.0.len() > MAX_EXTENTS {
            for &(s, l) in &new_extents {
                for lpn in s..s + l {
                    self.set_used(lpn, false);
                }
            }
            return Err(FsError::NoSpace(format!(
                "file too fragmented (over {MAX_EXTENTS} extents)"
            )));
        }
        let state = self.file_mut(ino)?;
        state.inode.extents = extents;
        state.needs_commit = true;
        let mut meta = vec![self.layout.inode_block(ino), self.layout.group_desc];
        meta.extend(self.block_bitmap_blocks());
        self.dirty_meta(&meta);
        Ok(())
    }

    /// A free run of up to `want` blocks: at `goal` if free there, else the first free run
    /// from the allocation cursor.
    pub(super) fn find_free(&mut self, goal: Option<Lpn>, want: u64) -> Option<(Lpn, u64)> {
        let n = self.used_blocks.len() as u64;
        let run_at = |used: &[bool], i: u64| {
            let mut len = 0;
            while i + len < n && len < want && !used[(i + len) as usize] {
                len += 1;
            }
            len
        };
        if let Some(g) = goal.and_then(|g| g.checked_sub(self.layout.data_start)) {
            if g < n && !self.used_blocks[g as usize] {
                let len = run_at(&self.used_blocks, g);
                return Some((g + self.layout.data_start, len));
            }
        }
        for k in 0..n {
            let i = (self.alloc_cursor + k) % n;
            if !self.used_blocks[i as usize] {
                let len = run_at(&self.used_blocks, i);
                self.alloc_cursor = (i + len) % n;
                return Some((i + self.layout.data_start, len));
            }
        }
        None
    }
}

pub(super) fn expand(extents: &Extents) -> impl Iterator<Item = Lpn> + '_ {
    extents.0.iter().flat_map(|&(s, l)| s..s + l)
}
