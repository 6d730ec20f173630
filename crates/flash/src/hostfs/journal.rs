//! The jbd2-like journal: committing a transaction (descriptor, logged blocks, PREFLUSH,
//! commit block, flush), checkpointing logged blocks home, and replay at mount.

use std::collections::BTreeMap;

use onesync_codec::OnDisk;

use super::layout::{CommitBlock, Descriptor, JournalSuperblock};
use super::state::JournalState;
use super::{FlashFs, FsError, FsResult};
use crate::Lpn;

impl FlashFs {
    /// Commits the running transaction's metadata plus `data` blocks through the journal.
    pub(super) fn journal_commit(&mut self, data: Vec<(Lpn, Box<[u8]>)>) -> FsResult<()> {
        let meta: Vec<Lpn> = std::mem::take(&mut self.meta_dirty).into_iter().collect();
        let mut blocks: Vec<(Lpn, Box<[u8]>)> = meta
            .into_iter()
            .map(|lpn| (lpn, self.meta_block(lpn).into_boxed_slice()))
            .collect();
        blocks.extend(data);
        if blocks.is_empty() {
            return self.flush();
        }
        let log_len = self.layout.log_len();
        let per_txn = (((self.layout.block_size - 32) / 8) as u64).min(log_len / 2 - 2) as usize;
        let chunks: Vec<Vec<(Lpn, Box<[u8]>)>> = blocks.chunks(per_txn).map(|c| c.to_vec()).collect();
        for chunk in chunks {
            self.ssd.host_compute(self.cfg.host.journal_handoff_us);
            let need = chunk.len() as u64 + 2;
            let wrap_waste = if self.journal.head + need > log_len {
                log_len - self.journal.head
            } else {
                0
            };
            if self.journal.used + wrap_waste + need > log_len {
                self.checkpoint()?;
            }
            if self.journal.head + need > log_len {
                self.journal.used += log_len - self.journal.head;
                self.journal.head = 0;
            }
            let seq = self.journal.next_seq;
            let bs = self.layout.block_size;
            let desc = Descriptor {
                seq,
                homes: chunk.iter().map(|(lpn, _)| *lpn).collect(),
            }
            .to_bytes(&bs);
            let data_crc = chunk
                .iter()
                .fold(0u32, |crc, (_, block)| crc32c::crc32c_append(crc, block));
            let mut pos = self.journal.head;
            self.ssd.write(self.layout.log_block(pos), &desc)?;
            pos += 1;
            for (_, block) in &chunk {
                self.ssd.write(self.layout.log_block(pos), block)?;
                pos += 1;
            }
            // PREFLUSH: the logged blocks (and ordered data) before the commit block.
            self.flush()?;
            let commit = CommitBlock { seq, data_crc }.to_bytes(&bs);
            self.ssd.write(self.layout.log_block(pos), &commit)?;
            // FUA on a drive without it: a flush.
            self.flush()?;
            self.counters.journal_blocks_written += need;
            self.counters.journal_commits += 1;
            self.journal.head = (pos + 1) % log_len;
            self.journal.used += need;
            self.journal.next_seq += 1;
            for (lpn, block) in chunk {
                self.pending_home.insert(lpn, block);
            }
        }
        self.after_commit(None)?;
        if self.journal.used > log_len / 2 {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Writes logged blocks home and empties the journal.
    pub(super) fn checkpoint(&mut self) -> FsResult<()> {
        let pending = std::mem::take(&mut self.pending_home);
        if !pending.is_empty() {
            for (lpn, block) in &pending {
                self.ssd.write(*lpn, block)?;
                if *lpn >= self.layout.data_start {
                    self.counters.data_blocks_written += 1;
                } else {
                    self.counters.meta_blocks_written += 1;
                }
            }
            self.flush()?;
        }
        self.write_journal_superblock(self.journal.head, self.journal.next_seq)?;
        self.flush()?;
        self.journal.used = 0;
        self.counters.checkpoints += 1;
        Ok(())
    }

    pub(super) fn write_journal_superblock(&mut self, tail: u64, seq: u64) -> FsResult<()> {
        let b = JournalSuperblock { tail, seq }.to_bytes(&self.layout.block_size);
        self.ssd.write(self.layout.journal_start, &b)?;
        self.counters.journal_blocks_written += 1;
        Ok(())
    }

    /// Mount: applies every complete journal transaction after the tail, then empties the
    /// journal. Returns how many were applied.
    pub(super) fn replay_journal(&mut self) -> FsResult<u64> {
        let bs = self.layout.block_size;
        let mut block = vec![0u8; bs];
        self.ssd.read(self.layout.journal_start, &mut block)?;
        let superblock = JournalSuperblock::from_bytes(&bs, &block)
            .map_err(|_| FsError::Corrupt("the journal superblock is damaged".into()))?;
        let log_len = self.layout.log_len();
        let (mut pos, mut seq) = (superblock.tail, superblock.seq);
        if pos >= log_len {
            return Err(FsError::Corrupt("the journal tail is out of range".into()));
        }
        let mut replay: BTreeMap<Lpn, Box<[u8]>> = BTreeMap::new();
        let mut applied = 0;
        let mut scanned = 0;
        let mut torn_at = None;
        loop {
            if scanned > log_len {
                break;
            }
            // The writer wraps to the start of the log when a transaction does not fit.
            let found = match self.read_descriptor(pos, seq, &mut block)? {
                Some(desc) => Some((pos, desc)),
                None if pos != 0 => self.read_descriptor(0, seq, &mut block)?.map(|desc| (0, desc)),
                None => None,
            };
            let Some((found_at, descriptor)) = found else {
                break;
            };
            if found_at == 0 && pos != 0 {
                scanned += log_len - pos;
            }
            pos = found_at;
            let homes = descriptor.homes;
            let count = homes.len() as u64;
            if count == 0 || pos + count + 2 > log_len {
                torn_at = Some(pos);
                break;
            }
            let mut logged = Vec::with_capacity(count as usize);
            let mut data_crc = 0u32;
            for i in 0..count {
                let mut b = vec![0u8; bs].into_boxed_slice();
                self.ssd.read(self.layout.log_block(pos + 1 + i), &mut b)?;
                data_crc = crc32c::crc32c_append(data_crc, &b);
                logged.push(b);
            }
            self.ssd
                .read(self.layout.log_block(pos + 1 + count), &mut block)?;
            let complete = CommitBlock::from_bytes(&bs, &block) == Ok(CommitBlock { seq, data_crc });
            if !complete {
                torn_at = Some(pos);
                break;
            }
            for (home, b) in homes.into_iter().zip(logged) {
                if home < self.layout.total_blocks && home != 0 {
                    replay.insert(home, b);
                }
            }
            applied += 1;
            pos += count + 2;
            scanned += count + 2;
            seq += 1;
            if pos >= log_len {
                pos = 0;
            }
        }
        for (lpn, b) in &replay {
            self.ssd.write(*lpn, b)?;
        }
        if !replay.is_empty() {
            self.flush()?;
        }
        self.journal = JournalState {
            head: pos,
            next_seq: seq,
            used: 0,
        };
        // A torn transaction's descriptor must not be found again: the next transaction
        // with its sequence number may be written elsewhere (after a wrap), and a later
        // replay would stop at the torn one.
        if let Some(torn) = torn_at {
            self.ssd.write(self.layout.log_block(torn), &vec![0u8; bs])?;
        }
        if applied > 0 || torn_at.is_some() {
            self.write_journal_superblock(pos, seq)?;
            self.flush()?;
        }
        Ok(applied)
    }

    /// Reads the log block at `pos`: the descriptor of transaction `seq`, if it is one.
    pub(super) fn read_descriptor(
        &mut self,
        pos: u64,
        seq: u64,
        block: &mut [u8],
    ) -> FsResult<Option<Descriptor>> {
        self.ssd.read(self.layout.log_block(pos), block)?;
        let descriptor = Descriptor::from_bytes(&block.len(), block).ok();
        Ok(descriptor.filter(|d| d.seq == seq))
    }
}
