//! The FTL: page mapping and X-L2P behind the host commands. Block allocation and garbage
//! collection are in `gc.rs`, mapping persistence (log records, checkpoints) in
//! `persist.rs`, power-on recovery in `recovery.rs`.

mod gc;
mod persist;
mod recovery;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use onesync_codec::Writer;

use crate::config::{Layout, Sabotage, SsdConfig};
use crate::counters::Counters;
use crate::error::FlashError;
use crate::ids::{Lpn, TxId};
use crate::nand::{Nand, NandError, NandRead, Oob, PageKind};

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

/// A simulated NAND SSD with a page-mapping FTL and X-FTL. See the crate docs.
pub struct Ssd {
    cfg: SsdConfig,
    lay: Layout,
    nand: Nand,
    /// Host and GC counts and the host's time (the NAND counts live in `nand.stats`).
    c: Counters,
    /// One page over the host link, µs.
    host_us: f64,
    /// The host's clock ([`Ssd::now_us`]). The NAND array works on its own clock, ahead of
    /// this one while cached writes are being programmed.
    host_now: f64,
    /// NAND-clock completion times of cached writes not yet known to be programmed.
    cached: VecDeque<f64>,
    /// Write-cache capacity in pages (0: write-through).
    cache_pages: usize,
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
            .field("now_us", &self.host_now)
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

impl Ssd {
    /// A factory-fresh drive: every block erased, nothing mapped.
    pub fn new(cfg: SsdConfig) -> Result<Ssd, FlashError> {
        let lay = Layout::new(&cfg.geometry).map_err(|e| FlashError::BadConfig(e.to_string()))?;
        let t = &cfg.timing;
        let positive = [t.bus_mb_per_s, t.host_mb_per_s];
        let nonneg = [t.read_us, t.program_us, t.erase_us, t.command_us];
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
            host_now: nand.now_us(),
            cached: VecDeque::new(),
            cache_pages: usize::try_from(cfg.timing.write_cache_bytes / lay.ps as u64).unwrap_or(usize::MAX),
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
            nand_busy_us: s.busy_us,
            ..self.c.clone()
        }
    }

    /// The host's simulated time in µs since the drive was created: host software, link
    /// transfers and waits for the drive (see [`Counters::host_elapsed_us`]). With a write
    /// cache the NAND array may still be busy with cached writes; `flush` waits for them.
    pub fn now_us(&self) -> f64 {
        self.host_now
    }

    /// The NAND array's clock: when its last queued operation ends.
    pub fn nand_now_us(&self) -> f64 {
        self.nand.now_us()
    }

    /// Host CPU time spent between drive commands (system calls, the filesystem): the host's
    /// clock advances while the drive goes on programming cached writes. Negative or
    /// non-finite amounts are ignored.
    pub fn host_compute(&mut self, us: f64) {
        if us.is_finite() && us > 0.0 {
            self.host_now += us;
            self.c.host_cpu_us += us;
        }
    }

    /// A host command starts: the host's per-command CPU.
    fn command(&mut self) {
        self.host_compute(self.cfg.timing.command_us);
    }

    /// One page crosses the host link.
    fn link(&mut self) {
        self.host_now += self.host_us;
        self.c.link_us += self.host_us;
    }

    /// NAND work for the host starts no earlier than the host hands it over.
    fn hand_over(&mut self) {
        self.nand.idle_until(self.host_now);
    }

    /// The host waits until the NAND array is idle (every cached write programmed).
    fn wait_drive(&mut self, flush: bool) {
        let wait = self.nand.now_us() - self.host_now;
        if wait > 0.0 {
            self.host_now += wait;
            if flush {
                self.c.flush_wait_us += wait;
            } else {
                self.c.io_wait_us += wait;
            }
        }
        self.cached.clear();
    }

    /// After a read: if it read the array (queued behind the cached programs, one channel),
    /// the host waits for it; then the page crosses the link.
    fn read_done(&mut self, nand_reads_before: u64) {
        if self.nand.stats.reads != nand_reads_before {
            self.wait_drive(false);
        }
        self.link();
    }

    /// Before a write: forget programs that have finished; with a full cache, wait for the
    /// oldest.
    fn make_room(&mut self) {
        while self.cached.front().is_some_and(|&t| t <= self.host_now) {
            self.cached.pop_front();
        }
        while self.cache_pages > 0 && self.cached.len() >= self.cache_pages {
            if let Some(t) = self.cached.pop_front() {
                if t > self.host_now {
                    self.c.io_wait_us += t - self.host_now;
                    self.host_now = t;
                }
            }
        }
    }

    /// After a write's program was queued: it stays in the cache, or (write-through) the host
    /// waits for it.
    fn written(&mut self) {
        if self.cache_pages == 0 {
            self.wait_drive(false);
        } else {
            self.cached.push_back(self.nand.now_us());
        }
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
        self.command();
        self.hand_over();
        let nand_reads = self.nand.stats.reads;
        self.read_mapped(l, self.l2p[l as usize], None, buf)?;
        self.read_done(nand_reads);
        Ok(())
    }

    /// Writes a whole page out of place. Durable after the next successful `flush` or
    /// `commit`; see the crate docs.
    pub fn write(&mut self, lpn: Lpn, data: &[u8]) -> Result<(), FlashError> {
        self.on()?;
        let l = self.check_lpn(lpn)?;
        self.check_len(data.len())?;
        self.command();
        self.link();
        self.make_room();
        self.hand_over();
        let ppn = self.program_data(l, 0, data)?;
        let old = std::mem::replace(&mut self.l2p[l as usize], ppn);
        self.set_owner(ppn, Owner::Host(l));
        self.invalidate(old, Owner::Host(l));
        self.dirty.insert(l);
        self.c.host_writes += 1;
        self.written();
        Ok(())
    }

    /// Unmaps `lpn` (it reads as zeros). Durable like a write.
    pub fn trim(&mut self, lpn: Lpn) -> Result<(), FlashError> {
        self.on()?;
        let l = self.check_lpn(lpn)?;
        self.c.host_trims += 1;
        self.command();
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
        self.command();
        self.hand_over();
        let result = if self.cfg.flush_checkpoints {
            self.write_checkpoint()
        } else {
            self.persist(None, &[])
        };
        self.wait_drive(true);
        result
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
        self.command();
        self.hand_over();
        let nand_reads = self.nand.stats.reads;
        match own {
            Some(ppn) => self.read_mapped(l, ppn, Some(tx), buf)?,
            None => self.read_mapped(l, self.l2p[l as usize], None, buf)?,
        }
        self.read_done(nand_reads);
        Ok(())
    }

    /// Writes `lpn` in transaction `tx` (started implicitly by its first write): the new copy
    /// goes out of place and into X-L2P; L2P and the old copy are left alone until commit.
    pub fn write_tx(&mut self, tx: TxId, lpn: Lpn, data: &[u8]) -> Result<(), FlashError> {
        self.on()?;
        Self::check_tx(tx)?;
        let l = self.check_lpn(lpn)?;
        self.check_len(data.len())?;
        self.command();
        self.link();
        self.make_room();
        self.hand_over();
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
        self.written();
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
        self.command();
        self.hand_over();
        let persisted = self.persist(Some(tx), &entries);
        self.wait_drive(true);
        persisted?;
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
        self.command();
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

// The mapping log's position and state (`persist.rs` writes it, `recovery.rs` reads it back).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LogPos {
    pub(super) block: u32,
    pub(super) page: u32,
    pub(super) seq: u64,
}

/// DRAM state of the metadata area.
#[derive(Clone, Debug)]
pub(super) struct LogState {
    /// The open log block and its next page (`None`: open `next_block` on the next write).
    pub(super) cur: Option<(u32, u32)>,
    pub(super) next_block: u32,
    /// Where the log that follows the latest complete checkpoint starts.
    pub(super) start: LogPos,
    /// Log pages written since that checkpoint.
    pub(super) since_ckpt: u64,
    /// The next persist must write a checkpoint first (fresh drive, or after a restart).
    pub(super) needs_ckpt: bool,
    /// Generation of the latest complete checkpoint (0: none).
    pub(super) gen: u64,
    /// Highest generation on flash, incomplete checkpoints included.
    pub(super) gen_seen: u64,
    /// Checkpoint region holding the latest complete checkpoint.
    pub(super) region: Option<u32>,
    pub(super) next_seq: u64,
}

impl LogState {
    pub(super) fn fresh() -> LogState {
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
