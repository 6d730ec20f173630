//! Block allocation (two write streams, host and GC) and greedy garbage collection.

use super::{BState, Owner, Ssd, Stream};
use crate::config::GC_RESERVE;
use crate::error::FlashError;
use crate::nand::{NandError, NandRead};

impl Ssd {
    /// The next page of the host or GC write stream.
    pub(super) fn alloc(&mut self, s: Stream) -> Result<u32, FlashError> {
        let ppb = self.lay.ppb;
        let slot = match s {
            Stream::Host => self.open_host,
            Stream::Gc => self.open_gc,
        };
        if let Some(b) = slot {
            let wp = self.wp[b as usize];
            if wp < ppb {
                self.wp[b as usize] = wp + 1;
                return Ok(b * ppb + wp);
            }
            self.state[b as usize] = BState::Closed;
            match s {
                Stream::Host => self.open_host = None,
                Stream::Gc => self.open_gc = None,
            }
        }
        if s == Stream::Host {
            while self.free.len() < GC_RESERVE {
                self.gc_one()?;
            }
        }
        let b = self.free.pop_front().ok_or(FlashError::NoSpace)?;
        if !self.erased[b as usize] {
            if let Err(e) = self.nand.erase(b) {
                self.free.push_front(b);
                return Err(e.into());
            }
        }
        self.erased[b as usize] = false;
        self.state[b as usize] = BState::Open;
        self.wp[b as usize] = 1;
        match s {
            Stream::Host => self.open_host = Some(b),
            Stream::Gc => self.open_gc = Some(b),
        }
        Ok(b * ppb)
    }

    /// Reclaims one block: the closed data block with the fewest valid pages. Its valid
    /// pages (committed copies and active transactions' new copies) move to the GC stream;
    /// the mapping is persisted before the erase, so no persistent state points into it.
    pub(super) fn gc_one(&mut self) -> Result<(), FlashError> {
        let ppb = self.lay.ppb;
        let victim = (self.lay.meta_blocks..self.lay.blocks)
            .filter(|&b| self.state[b as usize] == BState::Closed && self.valid[b as usize] < ppb)
            .min_by_key(|&b| self.valid[b as usize])
            .ok_or(FlashError::NoSpace)?;
        let v = self.valid[victim as usize];
        self.c.gc_runs += 1;
        self.c.gc_valid_ratio_sum += v as f64 / ppb as f64;
        for p in 0..ppb {
            let ppn = victim * ppb + p;
            let o = self.owner[ppn as usize];
            if o != Owner::Free {
                self.relocate(ppn, o)?;
            }
        }
        if self.valid[victim as usize] != 0 {
            return Err(FlashError::Internal(format!(
                "GC victim {victim} still counts valid pages"
            )));
        }
        if !self.dirty.is_empty() {
            self.persist(None, &[])?;
        }
        self.nand.erase(victim)?;
        self.erased[victim as usize] = true;
        self.state[victim as usize] = BState::Free;
        self.free.push_back(victim);
        Ok(())
    }

    pub(super) fn relocate(&mut self, ppn: u32, o: Owner) -> Result<(), FlashError> {
        let mut buf = std::mem::take(&mut self.scratch);
        let read = self.nand.read(ppn, &mut buf);
        let result = match read {
            Ok(NandRead::Data(oob)) => match self.alloc(Stream::Gc) {
                Ok(dst) => self
                    .nand
                    .program(dst, &buf, oob)
                    .map(|()| dst)
                    .map_err(FlashError::from),
                Err(e) => Err(e),
            },
            Ok(NandRead::Erased) | Err(NandError::Ecc) => Err(FlashError::Internal(format!(
                "GC: valid physical page {ppn} ({o:?}) cannot be read"
            ))),
            Err(e) => Err(e.into()),
        };
        self.scratch = buf;
        let dst = result?;
        self.c.gc_pages_copied += 1;
        self.owner[ppn as usize] = Owner::Free;
        let vb = self.lay.block_of(ppn) as usize;
        self.valid[vb] = self.valid[vb].saturating_sub(1);
        self.set_owner(dst, o);
        match o {
            Owner::Host(l) => {
                if self.l2p[l as usize] != ppn {
                    return Err(FlashError::Internal(format!(
                        "GC: page {ppn} owned by lpn {l} but L2P disagrees"
                    )));
                }
                self.l2p[l as usize] = dst;
                self.dirty.insert(l);
            }
            Owner::Tx(t, l) => {
                let entry = self.txs.get_mut(&t).and_then(|e| e.get_mut(&l));
                match entry {
                    Some(p) if *p == ppn => *p = dst,
                    _ => {
                        return Err(FlashError::Internal(format!(
                            "GC: page {ppn} owned by tx {t} but X-L2P disagrees"
                        )))
                    }
                }
            }
            Owner::Free => {}
        }
        Ok(())
    }
}
