//! The FTL: page mapping, X-L2P, greedy garbage collection, mapping persistence, recovery.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::config::{Layout, Sabotage, SsdConfig, GC_RESERVE};
use crate::counters::{Counters, Recovery};
use crate::error::FlashError;
use onesync_codec::{OnDisk, Writer};

use crate::meta::{self, Entries, Header, Kind, MetaPage};
use crate::nand::{Nand, NandError, NandRead, Oob, PageKind};
use crate::{Lpn, TxId};

const UNMAPPED: u32 = u32::MAX;

/// Who a valid physical page belongs to (the reverse map).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Invalid or never written.
    Free,
    /// The committed copy of a logical page (L2P points here).
    Host(u32),
    /// An active transaction's new copy (X-L2P points here).
    Tx(TxId, u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BState {
    Meta,
    Free,
    Open,
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Host,
    Gc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LogPos {
    block: u32,
    page: u32,
    seq: u64,
}

/// DRAM state of the metadata area.
#[derive(Clone, Debug)]
struct LogState {
    /// The open log block and its next page (`None`: open `next_block` on the next write).
    cur: Option<(u32, u32)>,
    next_block: u32,
    /// Where the log that follows the latest complete checkpoint starts.
    start: LogPos,
    /// Log pages written since that checkpoint.
    since_ckpt: u64,
    /// The next persist must write a checkpoint first (fresh drive, or after a restart).
    needs_ckpt: bool,
    /// Generation of the latest complete checkpoint (0: none).
    gen: u64,
    /// Highest generation on flash, incomplete checkpoints included.
    gen_seen: u64,
    /// Checkpoint region holding the latest complete checkpoint.
    region: Option<u32>,
    next_seq: u64,
}

impl LogState {
    fn fresh() -> LogState {
        LogState {
            cur: None,
            next_block: 0,
            start: LogPos {
                block: 0,
                page: 0,
                seq: 0,
            },
            since_ckpt: 0,
            needs_ckpt: true,
            gen: 0,
            gen_seen: 0,
            region: None,
            next_seq: 1,
        }
    }
}

/// A simulated NAND SSD with a page-mapping FTL and X-FTL. See the crate docs.
pub struct Ssd {
    cfg: SsdConfig,
    lay: Layout,
    nand: Nand,
    /// Host and GC counts (the NAND counts live in `nand.stats`).
    c: Counters,
    host_us: f64,
    /// L2P: logical page -> physical page of its committed copy.
    l2p: Vec<u32>,
    /// Reverse map, one entry per physical page.
    owner: Vec<Owner>,
    /// Valid pages per block.
    valid: Vec<u32>,
    state: Vec<BState>,
    /// The block is known to be erased (programming it needs no erase first).
    erased: Vec<bool>,
    /// Next page to program, per open data block.
    wp: Vec<u32>,
    free: VecDeque<u32>,
    open_host: Option<u32>,
    open_gc: Option<u32>,
    /// X-L2P: tx -> (lpn -> physical page of the new copy). Every entry is active; commit
    /// moves a transaction's entries into L2P, abort drops them.
    txs: BTreeMap<TxId, BTreeMap<u32, u32>>,
    /// Logical pages whose L2P entry changed since the mapping was last persisted.
    dirty: BTreeSet<u32>,
    log: LogState,
    next_data_seq: u64,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Ssd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ssd")
            .field("geometry", &self.cfg.geometry)
            .field("logical_pages", &self.lay.logical)
            .field("powered", &self.nand.powered())
            .field("now_us", &self.nand.now_us())
            .field("free_blocks", &self.free.len())
            .field("active_txs", &self.txs.len())
            .finish_non_exhaustive()
    }
}

impl From<NandError> for FlashError {
    fn from(e: NandError) -> Self {
        match e {
            NandError::PowerCut => FlashError::PowerLost,
            NandError::Ecc => FlashError::Internal("uncorrectable page".into()),
            NandError::Rule(s) => FlashError::Internal(format!("NAND rule broken: {s}")),
        }
    }
}

/// The CRC a data page's spare area holds: of its data, then lpn u32, seq u64, tx u64.
fn data_crc(data: &[u8], lpn: u32, seq: u64, tx: TxId) -> u32 {
    let mut tail = Writer::with_capacity(20);
    tail.u32(lpn).u64(seq).u64(tx);
    crc32c::crc32c_append(crc32c::crc32c(data), tail.as_bytes())
}

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
    /// A factory-fresh drive: every block erased, nothing mapped.
    pub fn new(cfg: SsdConfig) -> Result<Ssd, FlashError> {
        let lay = Layout::new(&cfg.geometry).map_err(|e| FlashError::BadConfig(e.to_string()))?;
        let t = &cfg.timing;
        let positive = [t.bus_mb_per_s, t.host_mb_per_s];
        let nonneg = [t.read_us, t.program_us, t.erase_us];
        if positive.iter().any(|v| !(v.is_finite() && *v > 0.0))
            || nonneg.iter().any(|v| !(v.is_finite() && *v >= 0.0))
        {
            return Err(FlashError::BadConfig(format!(
                "timing {t:?}: times must be >= 0 and rates > 0"
            )));
        }
        if cfg.checkpoint_every == 0 {
            return Err(FlashError::BadConfig(
                "checkpoint_every must be at least 1".into(),
            ));
        }
        let g = &cfg.geometry;
        let nand = Nand::new(
            g.page_size,
            g.oob_size,
            g.pages_per_block,
            g.blocks,
            lay.meta_blocks,
            t,
        );
        let mut ssd = Ssd::blank(cfg, lay, nand, Counters::default());
        ssd.erased.fill(true);
        for b in ssd.lay.meta_blocks..ssd.lay.blocks {
            ssd.free.push_back(b);
        }
        Ok(ssd)
    }

    /// Empty DRAM state around `nand`.
    fn blank(cfg: SsdConfig, lay: Layout, nand: Nand, c: Counters) -> Ssd {
        let total = lay.total_pages() as usize;
        let mut state = vec![BState::Free; lay.blocks as usize];
        state[..lay.meta_blocks as usize].fill(BState::Meta);
        Ssd {
            host_us: lay.ps as f64 / cfg.timing.host_mb_per_s,
            l2p: vec![UNMAPPED; lay.logical as usize],
            owner: vec![Owner::Free; total],
            valid: vec![0; lay.blocks as usize],
            state,
            erased: vec![false; lay.blocks as usize],
            wp: vec![0; lay.blocks as usize],
            free: VecDeque::new(),
            open_host: None,
            open_gc: None,
            txs: BTreeMap::new(),
            dirty: BTreeSet::new(),
            log: LogState::fresh(),
            next_data_seq: 1,
            scratch: vec![0; lay.ps],
            cfg,
            lay,
            nand,
            c,
        }
    }

    pub fn config(&self) -> &SsdConfig {
        &self.cfg
    }

    pub fn page_size(&self) -> usize {
        self.lay.ps
    }

    /// Host-visible capacity in pages.
    pub fn logical_pages(&self) -> u64 {
        self.lay.logical
    }

    pub fn counters(&self) -> Counters {
        let s = &self.nand.stats;
        Counters {
            nand_reads: s.reads,
            nand_meta_reads: s.meta_reads,
            nand_programs: s.programs,
            nand_meta_programs: s.meta_programs,
            nand_erases: s.erases,
            nand_meta_erases: s.meta_erases,
            torn_programs: s.torn_programs,
            interrupted_erases: s.interrupted_erases,
            ..self.c.clone()
        }
    }

    /// Simulated time in µs since the drive was created.
    pub fn now_us(&self) -> f64 {
        self.nand.now_us()
    }

    /// Erases so far, per physical block (metadata blocks first).
    pub fn block_erase_counts(&self) -> Vec<u32> {
        self.nand.erase_counts()
    }

    /// Number of transactions with at least one write that are neither committed nor aborted.
    pub fn active_txs(&self) -> usize {
        self.txs.len()
    }

    /// Free (erased or erasable) data blocks.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Logical pages currently mapped (committed state).
    pub fn mapped_pages(&self) -> u64 {
        self.l2p.iter().filter(|&&p| p != UNMAPPED).count() as u64
    }

    /// The power cut strikes during the `after_nand_ops`-th NAND operation from now (reads,
    /// programs and erases count; 0 cuts at once). `seed` drives what an interrupted erase
    /// leaves behind. An armed cut stays armed across [`Ssd::restart`], so it can strike
    /// during recovery.
    pub fn schedule_power_cut(&mut self, after_nand_ops: u64, seed: u64) {
        self.nand.schedule_cut(after_nand_ops, seed);
    }

    /// Disarms a scheduled cut that has not struck.
    pub fn cancel_power_cut(&mut self) {
        self.nand.cancel_cut();
    }

    /// NAND operations left before a scheduled cut strikes.
    pub fn pending_power_cut(&self) -> Option<u64> {
        self.nand.cut_pending()
    }

    /// Cuts the power between operations.
    pub fn power_cut_now(&mut self) {
        self.nand.cut_now();
    }

    pub fn is_powered(&self) -> bool {
        self.nand.powered()
    }

    fn on(&self) -> Result<(), FlashError> {
        if self.nand.powered() {
            Ok(())
        } else {
            Err(FlashError::PowerLost)
        }
    }

    fn check_lpn(&self, lpn: Lpn) -> Result<u32, FlashError> {
        if lpn < self.lay.logical {
            Ok(lpn as u32)
        } else {
            Err(FlashError::OutOfRange {
                lpn,
                logical_pages: self.lay.logical,
            })
        }
    }

    fn check_len(&self, len: usize) -> Result<(), FlashError> {
        if len == self.lay.ps {
            Ok(())
        } else {
            Err(FlashError::BadLength {
                expected: self.lay.ps,
                got: len,
            })
        }
    }

    fn check_tx(tx: TxId) -> Result<(), FlashError> {
        if tx == 0 {
            Err(FlashError::UnknownTx(0))
        } else {
            Ok(())
        }
    }

    // ---- host commands ----

    /// Reads the committed content of `lpn` (zeros if never written or trimmed).
    pub fn read(&mut self, lpn: Lpn, buf: &mut [u8]) -> Result<(), FlashError> {
        self.on()?;
        let l = self.check_lpn(lpn)?;
        self.check_len(buf.len())?;
        self.c.host_reads += 1;
        self.read_mapped(l, self.l2p[l as usize], None, buf)?;
        self.nand.advance(self.host_us);
        Ok(())
    }

    /// Writes a whole page out of place. Durable after the next successful `flush` or
    /// `commit`; see the crate docs.
    pub fn write(&mut self, lpn: Lpn, data: &[u8]) -> Result<(), FlashError> {
        self.on()?;
        let l = self.check_lpn(lpn)?;
        self.check_len(data.len())?;
        self.nand.advance(self.host_us);
        let ppn = self.program_data(l, 0, data)?;
        let old = std::mem::replace(&mut self.l2p[l as usize], ppn);
        self.set_owner(ppn, Owner::Host(l));
        self.invalidate(old, Owner::Host(l));
        self.dirty.insert(l);
        self.c.host_writes += 1;
        Ok(())
    }

    /// Unmaps `lpn` (it reads as zeros). Durable like a write.
    pub fn trim(&mut self, lpn: Lpn) -> Result<(), FlashError> {
        self.on()?;
        let l = self.check_lpn(lpn)?;
        self.c.host_trims += 1;
        let old = std::mem::replace(&mut self.l2p[l as usize], UNMAPPED);
        if old != UNMAPPED {
            self.invalidate(old, Owner::Host(l));
            self.dirty.insert(l);
        }
        Ok(())
    }

    /// Makes every earlier plain write and trim durable: persists the mapping changes (one
    /// log record, or a checkpoint). No NAND operation if nothing changed.
    pub fn flush(&mut self) -> Result<(), FlashError> {
        self.on()?;
        self.c.host_flushes += 1;
        self.persist(None, &[])
    }

    /// Reads `lpn` as transaction `tx` sees it: its own latest write, else the committed
    /// content.
    pub fn read_tx(&mut self, tx: TxId, lpn: Lpn, buf: &mut [u8]) -> Result<(), FlashError> {
        self.on()?;
        Self::check_tx(tx)?;
        let l = self.check_lpn(lpn)?;
        self.check_len(buf.len())?;
        self.c.host_reads += 1;
        let own = self.txs.get(&tx).and_then(|e| e.get(&l)).copied();
        match own {
            Some(ppn) => self.read_mapped(l, ppn, Some(tx), buf)?,
            None => self.read_mapped(l, self.l2p[l as usize], None, buf)?,
        }
        self.nand.advance(self.host_us);
        Ok(())
    }

    /// Writes `lpn` in transaction `tx` (started implicitly by its first write): the new copy
    /// goes out of place and into X-L2P; L2P and the old copy are left alone until commit.
    pub fn write_tx(&mut self, tx: TxId, lpn: Lpn, data: &[u8]) -> Result<(), FlashError> {
        self.on()?;
        Self::check_tx(tx)?;
        let l = self.check_lpn(lpn)?;
        self.check_len(data.len())?;
        self.nand.advance(self.host_us);
        let ppn = self.program_data(l, tx, data)?;
        let prev = self.txs.entry(tx).or_default().insert(l, ppn);
        self.set_owner(ppn, Owner::Tx(tx, l));
        if let Some(prev) = prev {
            self.invalidate(prev, Owner::Tx(tx, l));
        }
        if self.cfg.sabotage == Some(Sabotage::GcErasesActiveOldCopies) {
            let old = self.l2p[l as usize];
            self.invalidate(old, Owner::Host(l));
        }
        self.c.host_writes += 1;
        Ok(())
    }

    /// Commits `tx`: one atomic commit record (the transaction's X-L2P entries, plus any
    /// pending plain-write mapping changes) goes to the mapping log, then the entries are
    /// remapped into L2P. Durable and atomic on return; implies `flush`. An unknown or empty
    /// transaction is a plain flush.
    pub fn commit(&mut self, tx: TxId) -> Result<(), FlashError> {
        self.on()?;
        Self::check_tx(tx)?;
        self.c.tx_commits += 1;
        let entries: Vec<(u32, u32)> = match self.txs.get(&tx) {
            Some(e) => e.iter().map(|(&l, &p)| (l, p)).collect(),
            None => Vec::new(),
        };
        self.persist(Some(tx), &entries)?;
        self.txs.remove(&tx);
        for (l, ppn) in entries {
            let old = std::mem::replace(&mut self.l2p[l as usize], ppn);
            self.owner[ppn as usize] = Owner::Host(l);
            self.invalidate(old, Owner::Host(l));
        }
        Ok(())
    }

    /// Drops `tx`'s writes (their new copies become invalid). No NAND operation. Aborting
    /// a transaction the drive does not know (no writes, already finished) is a no-op.
    pub fn abort(&mut self, tx: TxId) -> Result<(), FlashError> {
        self.on()?;
        Self::check_tx(tx)?;
        if let Some(entries) = self.txs.remove(&tx) {
            for (l, ppn) in entries {
                self.invalidate(ppn, Owner::Tx(tx, l));
            }
            self.c.tx_aborts += 1;
        }
        Ok(())
    }

    // ---- pages ----

    fn read_mapped(
        &mut self,
        lpn: u32,
        ppn: u32,
        tx: Option<TxId>,
        buf: &mut [u8],
    ) -> Result<(), FlashError> {
        if ppn == UNMAPPED {
            buf.fill(0);
            return Ok(());
        }
        let corrupt = |detail: String| FlashError::Corrupt {
            lpn: lpn as Lpn,
            detail,
        };
        match self.nand.read(ppn, buf) {
            Ok(NandRead::Data(oob)) => {
                let ok = oob.kind == PageKind::Data
                    && oob.lpn == lpn as u64
                    && data_crc(buf, lpn, oob.seq, oob.tx) == oob.crc
                    && tx.is_none_or(|t| oob.tx == t);
                if ok {
                    Ok(())
                } else {
                    buf.fill(0);
                    Err(corrupt(format!(
                        "physical page {ppn} holds {:?} page {} of tx {} or fails its CRC",
                        oob.kind, oob.lpn, oob.tx
                    )))
                }
            }
            Ok(NandRead::Erased) => Err(corrupt(format!("mapped to physical page {ppn}, which is erased"))),
            Err(NandError::Ecc) => Err(corrupt(format!("physical page {ppn} is uncorrectable (torn)"))),
            Err(e) => Err(e.into()),
        }
    }

    fn program_data(&mut self, lpn: u32, tx: TxId, data: &[u8]) -> Result<u32, FlashError> {
        let ppn = self.alloc(Stream::Host)?;
        let seq = self.next_data_seq;
        self.next_data_seq += 1;
        let oob = Oob {
            kind: PageKind::Data,
            lpn: lpn as u64,
            seq,
            tx,
            crc: data_crc(data, lpn, seq, tx),
        };
        self.nand.program(ppn, data, oob)?;
        Ok(ppn)
    }

    fn set_owner(&mut self, ppn: u32, o: Owner) {
        self.owner[ppn as usize] = o;
        self.valid[self.lay.block_of(ppn) as usize] += 1;
    }

    /// Marks `ppn` invalid if it still belongs to `expect`.
    fn invalidate(&mut self, ppn: u32, expect: Owner) {
        if ppn != UNMAPPED && self.owner[ppn as usize] == expect {
            self.owner[ppn as usize] = Owner::Free;
            let b = self.lay.block_of(ppn) as usize;
            self.valid[b] = self.valid[b].saturating_sub(1);
        }
    }

    /// The next page of the host or GC write stream.
    fn alloc(&mut self, s: Stream) -> Result<u32, FlashError> {
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

    // ---- garbage collection ----

    /// Reclaims one block: the closed data block with the fewest valid pages. Its valid
    /// pages (committed copies and active transactions' new copies) move to the GC stream;
    /// the mapping is persisted before the erase, so no persistent state points into it.
    fn gc_one(&mut self) -> Result<(), FlashError> {
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

    fn relocate(&mut self, ppn: u32, o: Owner) -> Result<(), FlashError> {
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

    // ---- mapping persistence ----

    /// Persists the pending L2P changes and, for a commit, the transaction's entries, as one
    /// atomic log record (preceded by a checkpoint when one is due).
    fn persist(&mut self, tx: Option<TxId>, tx_entries: &[(u32, u32)]) -> Result<(), FlashError> {
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
    fn log_free_ahead(&self) -> u64 {
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
    fn write_checkpoint(&mut self) -> Result<(), FlashError> {
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
    fn log_slot(&mut self) -> Result<(u32, u32), FlashError> {
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
    fn write_record(&mut self, kind: Kind, tx: TxId, entries: &[(u32, u32)]) -> Result<(), FlashError> {
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

    // ---- power-on ----

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
            ..
        } = self;
        nand.power_on();
        let (t0, r0, m0) = (nand.now_us(), nand.stats.reads, nand.stats.meta_reads);
        let mut ssd = Ssd::blank(cfg, lay, nand, c);
        let mut rec = Recovery::default();
        let result = ssd.rebuild(&mut rec);
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
    fn read_meta(&mut self, ppn: u32, buf: &mut [u8]) -> Result<Option<MetaPage>, FlashError> {
        match self.nand.read(ppn, buf) {
            Ok(NandRead::Data(oob)) if oob.kind == PageKind::Meta => {
                Ok(MetaPage::from_bytes(&buf.len(), buf).ok())
            }
            Ok(_) | Err(NandError::Ecc) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn rebuild(&mut self, rec: &mut Recovery) -> Result<(), FlashError> {
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

    /// Checks the FTL's DRAM invariants (reverse map against L2P and X-L2P, valid counts,
    /// block states). A debugging aid for tests; O(physical pages).
    pub fn check_consistency(&self) -> Result<(), String> {
        let lay = &self.lay;
        let mut count = vec![0u32; lay.blocks as usize];
        for (ppn, o) in self.owner.iter().enumerate() {
            let ppn = ppn as u32;
            let ok = match *o {
                Owner::Free => continue,
                Owner::Host(l) => self.l2p.get(l as usize) == Some(&ppn),
                Owner::Tx(t, l) => self.txs.get(&t).and_then(|e| e.get(&l)) == Some(&ppn),
            };
            if !ok {
                return Err(format!(
                    "physical page {ppn} owned by {o:?}, which does not map it"
                ));
            }
            if !lay.is_data_ppn(ppn) {
                return Err(format!("metadata page {ppn} owned by {o:?}"));
            }
            count[lay.block_of(ppn) as usize] += 1;
        }
        for (l, &ppn) in self.l2p.iter().enumerate() {
            if ppn != UNMAPPED && self.owner.get(ppn as usize) != Some(&Owner::Host(l as u32)) {
                return Err(format!(
                    "lpn {l} maps to {ppn}, which is owned by {:?}",
                    self.owner.get(ppn as usize)
                ));
            }
        }
        for (t, e) in &self.txs {
            for (&l, &ppn) in e {
                if self.owner.get(ppn as usize) != Some(&Owner::Tx(*t, l)) {
                    return Err(format!(
                        "tx {t} lpn {l} maps to {ppn}, owned by {:?}",
                        self.owner.get(ppn as usize)
                    ));
                }
            }
        }
        if count != self.valid {
            return Err("valid-page counts disagree with the reverse map".into());
        }
        for &b in &self.free {
            if self.state[b as usize] != BState::Free || self.valid[b as usize] != 0 {
                return Err(format!(
                    "free block {b} is {:?} with {} valid pages",
                    self.state[b as usize], self.valid[b as usize]
                ));
            }
        }
        Ok(())
    }
}
