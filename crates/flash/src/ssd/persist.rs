//! Mapping persistence: the L2P changes as CRC'd log records in the mapping log, and full
//! checkpoints of L2P in two alternating regions (the page format is `crate::meta`).

use onesync_codec::OnDisk;

use super::{LogPos, Ssd};
use crate::config::Sabotage;
use crate::error::FlashError;
use crate::ids::TxId;
use crate::meta::{self, Entries, Header, Kind, MetaPage};
use crate::nand::{Oob, PageKind};

fn meta_oob(page: &[u8], h: &Header) -> Oob {
    Oob {
        kind: PageKind::Meta,
        lpn: u64::MAX,
        seq: h.seq,
        tx: h.tx,
        crc: meta::stored_crc(page),
    }
}

impl Ssd {
    /// Persists the pending L2P changes and, for a commit, the transaction's entries, as one
    /// atomic log record (preceded by a checkpoint when one is due).
    pub(super) fn persist(&mut self, tx: Option<TxId>, tx_entries: &[(u32, u32)]) -> Result<(), FlashError> {
        if self.dirty.is_empty() && tx_entries.is_empty() {
            return Ok(());
        }
        let lay = &self.lay;
        let mut ckpt = self.log.needs_ckpt
            || lay.log_pages_for(self.dirty.len()) >= lay.ckpt_pages
            || self.log.since_ckpt >= self.cfg.checkpoint_every as u64;
        if !ckpt && self.log_free_ahead() < lay.log_pages_for(self.dirty.len() + tx_entries.len()) as u64 {
            ckpt = true;
        }
        if ckpt {
            self.write_checkpoint()?;
        }
        let mut entries: Vec<(u32, u32)> = self.dirty.iter().map(|&l| (l, self.l2p[l as usize])).collect();
        entries.extend_from_slice(tx_entries);
        if !entries.is_empty() {
            if self.log_free_ahead() < self.lay.log_pages_for(entries.len()) as u64 {
                return Err(FlashError::Internal(
                    "the mapping log cannot hold a record after a checkpoint".into(),
                ));
            }
            let (kind, txid) = match tx {
                Some(t) if !tx_entries.is_empty() => (Kind::Commit, t),
                _ => (Kind::Delta, 0),
            };
            if kind == Kind::Commit && self.cfg.sabotage == Some(Sabotage::CommitNotAtomic) {
                let per = self.lay.log_entries;
                for chunk in entries.chunks(per) {
                    self.write_record(kind, txid, chunk)?;
                }
            } else {
                self.write_record(kind, txid, &entries)?;
            }
        }
        self.dirty.clear();
        Ok(())
    }

    /// Log pages that can be written before the log would have to erase a block holding
    /// part of the log since the latest checkpoint.
    pub(super) fn log_free_ahead(&self) -> u64 {
        let (ppb, lb) = (self.lay.ppb as u64, self.lay.log_blocks as u64);
        match self.log.cur {
            None => lb * ppb,
            Some((b, p)) => {
                let used = (b as u64 + lb - self.log.start.block as u64) % lb + 1;
                (ppb - p as u64) + (lb - used) * ppb
            }
        }
    }

    /// Writes the whole L2P into the checkpoint region that does not hold the latest complete
    /// checkpoint (erasing it first), naming where the log continues.
    pub(super) fn write_checkpoint(&mut self) -> Result<(), FlashError> {
        let (ppb, lb) = (self.lay.ppb, self.lay.log_blocks);
        let region = match self.log.region {
            Some(r) => 1 - r,
            None => 0,
        };
        for k in 0..self.lay.ckpt_blocks {
            let b = self.lay.ckpt_block(region, k);
            if !self.erased[b as usize] {
                self.nand.erase(b)?;
                self.erased[b as usize] = true;
            }
        }
        let (log_block, log_page) = match self.log.cur {
            Some((b, p)) if p < ppb => (b, p),
            Some((b, _)) => ((b + 1) % lb, 0),
            None => (self.log.next_block, 0),
        };
        let gen = self.log.gen_seen + 1;
        self.log.gen_seen = gen;
        let npages = self.lay.ckpt_pages;
        let log_seq = self.log.next_seq + npages as u64;
        let per = self.lay.ckpt_entries;
        let mut result: Result<(), FlashError> = Ok(());
        for i in 0..npages {
            let first = i as usize * per;
            let n = per.min(self.l2p.len() - first);
            let h = Header {
                kind: Kind::Checkpoint,
                idx: i,
                npages,
                log_block,
                log_page,
                seq: self.log.next_seq,
                gen,
                tx: 0,
                aux: log_seq,
                data_seq: self.next_data_seq,
            };
            let entries = Entries::Checkpoint(self.l2p[first..first + n].to_vec());
            let page = MetaPage { header: h, entries }.to_bytes(&self.lay.ps);
            let ppn = self.lay.ckpt_ppn(region, i);
            self.erased[self.lay.block_of(ppn) as usize] = false;
            self.log.next_seq += 1;
            if let Err(e) = self.nand.program(ppn, &page, meta_oob(&page, &h)) {
                result = Err(e.into());
                break;
            }
        }
        result?;
        self.log.gen = gen;
        self.log.region = Some(region);
        self.log.start = LogPos {
            block: log_block,
            page: log_page,
            seq: log_seq,
        };
        self.log.since_ckpt = 0;
        self.log.needs_ckpt = false;
        if !matches!(self.log.cur, Some((_, p)) if p < ppb) {
            self.log.cur = None;
            self.log.next_block = log_block;
        }
        self.dirty.clear();
        self.c.checkpoints += 1;
        Ok(())
    }

    /// The next log page, opening (erasing) the next log block if the current one is full.
    pub(super) fn log_slot(&mut self) -> Result<(u32, u32), FlashError> {
        let (ppb, lb) = (self.lay.ppb, self.lay.log_blocks);
        if let Some((b, p)) = self.log.cur {
            if p < ppb {
                return Ok((b, p));
            }
        }
        let nb = match self.log.cur {
            Some((b, _)) => (b + 1) % lb,
            None => self.log.next_block,
        };
        if self.log.since_ckpt > 0 && nb == self.log.start.block {
            return Err(FlashError::Internal(
                "mapping log overrun: it would erase its own start".into(),
            ));
        }
        let blk = self.lay.log_block(nb);
        if !self.erased[blk as usize] {
            self.nand.erase(blk)?;
            self.erased[blk as usize] = true;
        }
        self.log.cur = Some((nb, 0));
        self.log.next_block = (nb + 1) % lb;
        Ok((nb, 0))
    }

    /// Appends one record (`npages` pages, the last one the final marker) to the log.
    pub(super) fn write_record(
        &mut self,
        kind: Kind,
        tx: TxId,
        entries: &[(u32, u32)],
    ) -> Result<(), FlashError> {
        let npages = self.lay.log_pages_for(entries.len());
        let record_seq = self.log.next_seq;
        let per = self.lay.log_entries;
        let mut result: Result<(), FlashError> = Ok(());
        for (i, chunk) in entries.chunks(per).enumerate() {
            let (b, p) = match self.log_slot() {
                Ok(bp) => bp,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let h = Header {
                kind,
                idx: i as u32,
                npages,
                log_block: b,
                log_page: p,
                seq: self.log.next_seq,
                gen: self.log.gen,
                tx,
                aux: record_seq,
                data_seq: self.next_data_seq,
            };
            let page = MetaPage {
                header: h,
                entries: Entries::Log(chunk.to_vec()),
            }
            .to_bytes(&self.lay.ps);
            let blk = self.lay.log_block(b);
            self.erased[blk as usize] = false;
            self.log.cur = Some((b, p + 1));
            self.log.next_seq += 1;
            self.log.since_ckpt += 1;
            if let Err(e) = self
                .nand
                .program(self.lay.log_ppn(b, p), &page, meta_oob(&page, &h))
            {
                result = Err(e.into());
                break;
            }
        }
        result?;
        self.c.log_records += 1;
        Ok(())
    }
}
