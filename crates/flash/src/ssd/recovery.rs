//! Power-on recovery: the newest complete checkpoint, then the mapping log after it, then
//! the DRAM tables rebuilt from L2P. Reads only the metadata area.

use onesync_codec::OnDisk;

use super::{BState, LogPos, LogState, Owner, Ssd, UNMAPPED};
use crate::counters::Recovery;
use crate::error::FlashError;
use crate::meta::{Entries, Header, Kind, MetaPage};
use crate::nand::{NandError, NandRead, PageKind};

impl Ssd {
    /// Powers the drive on again after a cut (or cuts it first if it is on): DRAM state is
    /// gone; the mapping is rebuilt from the metadata area only (no data page is read).
    /// If a scheduled cut strikes during recovery, the returned drive is off again and
    /// `Recovery::interrupted` is set: call `restart` again.
    pub fn restart(self) -> Result<(Ssd, Recovery), FlashError> {
        let Ssd {
            cfg,
            lay,
            mut nand,
            c,
            host_now,
            ..
        } = self;
        nand.power_on_after(host_now);
        let (t0, r0, m0) = (nand.now_us(), nand.stats.reads, nand.stats.meta_reads);
        let mut ssd = Ssd::blank(cfg, lay, nand, c);
        // The host's clock carries on; it waits from when it lost the drive (or the cut
        // struck) until the rebuild is done.
        ssd.host_now = host_now;
        let mut rec = Recovery::default();
        let result = ssd.rebuild(&mut rec);
        ssd.wait_drive(false);
        rec.sim_us = ssd.nand.now_us() - t0;
        rec.pages_read = ssd.nand.stats.reads - r0;
        rec.meta_pages_read = ssd.nand.stats.meta_reads - m0;
        rec.data_pages_read = rec.pages_read - rec.meta_pages_read;
        match result {
            Ok(()) => Ok((ssd, rec)),
            Err(FlashError::PowerLost) => {
                rec.interrupted = true;
                Ok((ssd, rec))
            }
            Err(e) => Err(e),
        }
    }

    /// Reads a metadata page: the page if it is an intact metadata page.
    pub(super) fn read_meta(&mut self, ppn: u32, buf: &mut [u8]) -> Result<Option<MetaPage>, FlashError> {
        match self.nand.read(ppn, buf) {
            Ok(NandRead::Data(oob)) if oob.kind == PageKind::Meta => {
                Ok(MetaPage::from_bytes(&buf.len(), buf).ok())
            }
            Ok(_) | Err(NandError::Ecc) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn rebuild(&mut self, rec: &mut Recovery) -> Result<(), FlashError> {
        let lay = self.lay.clone();
        let bad = |s: String| FlashError::BadMetadata(s);
        let npages = lay.ckpt_pages;
        let mut buf = vec![0u8; lay.ps];
        let (mut max_seq, mut max_data_seq, mut gen_seen) = (0u64, 0u64, 0u64);
        // 1. The first page of each checkpoint region.
        let mut firsts: Vec<(MetaPage, u32)> = Vec::new();
        for r in 0..2 {
            if let Some(page) = self.read_meta(lay.ckpt_ppn(r, 0), &mut buf)? {
                let h = page.header;
                max_seq = max_seq.max(h.seq);
                max_data_seq = max_data_seq.max(h.data_seq);
                gen_seen = gen_seen.max(h.gen);
                if h.kind == Kind::Checkpoint && h.idx == 0 && h.npages == npages {
                    firsts.push((page, r));
                }
            }
        }
        firsts.sort_by_key(|(page, _)| std::cmp::Reverse(page.header.gen));
        // 2. The newest complete checkpoint.
        let mut chosen = None;
        for (page0, r) in firsts {
            let h0 = page0.header;
            let mut page0 = Some(page0);
            let mut complete = true;
            for i in 0..npages {
                let page = match page0.take() {
                    Some(page) => Some(page),
                    None => self.read_meta(lay.ckpt_ppn(r, i), &mut buf)?,
                };
                let first = i as usize * lay.ckpt_entries;
                let want = lay.ckpt_entries.min(lay.logical as usize - first);
                let Some(MetaPage {
                    header: h,
                    entries: Entries::Checkpoint(ppns),
                }) = page.filter(|page| {
                    let h = &page.header;
                    h.kind == Kind::Checkpoint
                        && h.gen == h0.gen
                        && h.idx == i
                        && h.npages == npages
                        && page.entries.len() == want
                })
                else {
                    complete = false;
                    break;
                };
                max_seq = max_seq.max(h.seq);
                max_data_seq = max_data_seq.max(h.data_seq);
                self.l2p[first..first + want].copy_from_slice(&ppns);
            }
            if complete {
                chosen = Some((h0, r));
                break;
            }
            rec.fell_back = true;
            self.l2p.fill(UNMAPPED);
        }
        // 3. The log after it: consecutive sequence numbers of the same generation; apply each
        // record whose final page is there.
        self.log = LogState::fresh();
        if let Some((h0, region)) = chosen {
            rec.checkpoint_generation = h0.gen;
            let (mut b, mut p, mut expect) = (h0.log_block, h0.log_page, h0.aux);
            if b >= lay.log_blocks || p >= lay.ppb {
                return Err(bad(format!("checkpoint {} names log position {b}/{p}", h0.gen)));
            }
            let mut pending: Vec<(u32, u32)> = Vec::new();
            let mut open: Option<Header> = None;
            let mut scanned = 0u64;
            while scanned < lay.log_blocks as u64 * lay.ppb as u64 {
                if p == lay.ppb {
                    b = (b + 1) % lay.log_blocks;
                    p = 0;
                }
                let Some(MetaPage {
                    header: h,
                    entries: Entries::Log(pairs),
                }) = self.read_meta(lay.log_ppn(b, p), &mut buf)?
                else {
                    break;
                };
                if h.seq != expect || h.gen != h0.gen || h.kind == Kind::Checkpoint {
                    break;
                }
                let continues = match open {
                    None => h.idx == 0 && h.aux == h.seq,
                    Some(o) => {
                        h.aux == o.aux && h.idx == o.idx + 1 && h.npages == o.npages && h.kind == o.kind
                    }
                };
                if !continues {
                    break;
                }
                scanned += 1;
                expect += 1;
                p += 1;
                max_seq = max_seq.max(h.seq);
                max_data_seq = max_data_seq.max(h.data_seq);
                for (l, ppn) in pairs {
                    if l as u64 >= lay.logical || (ppn != UNMAPPED && !lay.is_data_ppn(ppn)) {
                        return Err(bad(format!("log record {} maps lpn {l} to {ppn}", h.aux)));
                    }
                    pending.push((l, ppn));
                }
                if h.idx + 1 == h.npages {
                    for (l, ppn) in pending.drain(..) {
                        self.l2p[l as usize] = ppn;
                    }
                    rec.records_applied += 1;
                    if h.kind == Kind::Commit {
                        rec.commits_applied += 1;
                    }
                    open = None;
                } else {
                    open = Some(h);
                }
            }
            rec.log_pages = scanned;
            self.log = LogState {
                cur: None,
                next_block: (b + 1) % lay.log_blocks,
                start: LogPos {
                    block: h0.log_block,
                    page: h0.log_page,
                    seq: h0.aux,
                },
                since_ckpt: scanned,
                needs_ckpt: true,
                gen: h0.gen,
                gen_seen,
                region: Some(region),
                next_seq: 0,
            };
        }
        self.log.gen_seen = gen_seen;
        self.log.next_seq = max_seq + npages as u64 + 1;
        // 4. DRAM tables from L2P. Blocks holding no valid page are free but in an unknown
        // state (a cut may have left them half-programmed or half-erased): erased before reuse.
        for (l, &ppn) in self.l2p.iter().enumerate() {
            if ppn == UNMAPPED {
                continue;
            }
            if !lay.is_data_ppn(ppn) {
                return Err(bad(format!(
                    "lpn {l} maps to physical page {ppn}, outside the data area"
                )));
            }
            if self.owner[ppn as usize] != Owner::Free {
                return Err(bad(format!("two logical pages map to physical page {ppn}")));
            }
            self.owner[ppn as usize] = Owner::Host(l as u32);
            self.valid[lay.block_of(ppn) as usize] += 1;
            rec.mapped_pages += 1;
        }
        for b in lay.meta_blocks..lay.blocks {
            if self.valid[b as usize] > 0 {
                self.state[b as usize] = BState::Closed;
            } else {
                self.free.push_back(b);
            }
        }
        self.next_data_seq = max_data_seq + lay.total_pages() + 1;
        Ok(())
    }
}
