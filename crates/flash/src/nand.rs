//! The NAND array: pages with a spare area, programmed in order within a block, erased a
//! block at a time, one operation at a time (single channel, single way), with a simulated
//! clock and injectable power cuts.
//!
//! The model refuses what real NAND forbids: programming a page that is not erased, programming
//! out of order inside a block, and programming a block whose erase was interrupted (its cells
//! are in an undefined state until erased again). A power cut during a program leaves a torn
//! page (it fails ECC when read); during an erase it leaves every page of the block either as it
//! was, torn, or erased, at random.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::Timing;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageKind {
    Data,
    Meta,
}

/// The spare-area contents the FTL writes with each page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Oob {
    pub kind: PageKind,
    pub lpn: u64,
    pub seq: u64,
    pub tx: u64,
    pub crc: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PState {
    Erased,
    Programmed(Oob),
    Torn,
}

pub(crate) enum NandRead {
    /// All ones, no spare-area contents.
    Erased,
    Data(Oob),
}

#[derive(Debug)]
pub(crate) enum NandError {
    PowerCut,
    /// Uncorrectable: a torn page.
    Ecc,
    /// The caller broke a NAND rule.
    Rule(String),
}

struct Block {
    /// Page data, allocated on the first program and freed by an erase.
    data: Option<Box<[u8]>>,
    pages: Box<[PState]>,
    /// Next page that may be programmed.
    wp: u32,
    /// An erase was interrupted: nothing may be programmed until the block is erased.
    undefined: bool,
    erases: u32,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct NandStats {
    pub reads: u64,
    pub meta_reads: u64,
    pub programs: u64,
    pub meta_programs: u64,
    pub erases: u64,
    pub meta_erases: u64,
    pub torn_programs: u64,
    pub interrupted_erases: u64,
    /// Time the array spent in operations (reads, programs, erases, torn ones included), µs.
    pub busy_us: f64,
}

pub(crate) struct Nand {
    page_size: usize,
    ppb: u32,
    meta_blocks: u32,
    blocks: Vec<Block>,
    read_us: f64,
    program_us: f64,
    erase_us: f64,
    /// Page + spare area over the NAND bus.
    xfer_us: f64,
    now_us: f64,
    /// When a scheduled cut struck (the array's clock), until the next power-on.
    cut_at_us: Option<f64>,
    powered: bool,
    /// The cut strikes during the operation when this reaches 1.
    cut_in: Option<u64>,
    rng: StdRng,
    pub stats: NandStats,
}

impl Nand {
    pub fn new(
        page_size: usize,
        oob_size: usize,
        ppb: u32,
        blocks: u32,
        meta_blocks: u32,
        t: &Timing,
    ) -> Nand {
        let blocks = (0..blocks)
            .map(|_| Block {
                data: None,
                pages: vec![PState::Erased; ppb as usize].into_boxed_slice(),
                wp: 0,
                undefined: false,
                erases: 0,
            })
            .collect();
        Nand {
            page_size,
            ppb,
            meta_blocks,
            blocks,
            read_us: t.read_us,
            program_us: t.program_us,
            erase_us: t.erase_us,
            xfer_us: (page_size + oob_size) as f64 / t.bus_mb_per_s,
            now_us: 0.0,
            cut_at_us: None,
            powered: true,
            cut_in: None,
            rng: StdRng::seed_from_u64(0),
            stats: NandStats::default(),
        }
    }

    pub fn now_us(&self) -> f64 {
        self.now_us
    }

    /// The array was idle until `us` (work the host hands over then starts no earlier).
    pub fn idle_until(&mut self, us: f64) {
        if us > self.now_us {
            self.now_us = us;
        }
    }

    /// Powers the array on again at `host_us`, the host's time when it lost the drive, or
    /// when a scheduled cut struck if that was later: work queued behind the host (a write
    /// cache's backlog) is lost with the power, in time. Its effect on the cells was applied
    /// when it was queued.
    pub fn power_on_after(&mut self, host_us: f64) {
        self.now_us = self.cut_at_us.take().map_or(host_us, |t| t.max(host_us));
        self.powered = true;
    }

    pub fn powered(&self) -> bool {
        self.powered
    }

    pub fn cut_now(&mut self) {
        self.powered = false;
        self.cut_in = None;
    }

    pub fn schedule_cut(&mut self, after_ops: u64, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
        if after_ops == 0 {
            self.cut_now();
        } else {
            self.cut_in = Some(after_ops);
        }
    }

    pub fn cancel_cut(&mut self) {
        self.cut_in = None;
    }

    pub fn cut_pending(&self) -> Option<u64> {
        self.cut_in
    }

    pub fn erase_counts(&self) -> Vec<u32> {
        self.blocks.iter().map(|b| b.erases).collect()
    }

    /// Starts an operation: `Ok(true)` if the power cut strikes during it.
    fn begin(&mut self) -> Result<bool, NandError> {
        if !self.powered {
            return Err(NandError::PowerCut);
        }
        match self.cut_in {
            Some(n) if n <= 1 => {
                self.cut_in = None;
                Ok(true)
            }
            Some(n) => {
                self.cut_in = Some(n - 1);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    fn strike(&mut self, op_us: f64) -> NandError {
        let done = op_us * self.rng.random_range(0.05..0.95);
        self.now_us += done;
        self.stats.busy_us += done;
        self.cut_at_us = Some(self.now_us);
        self.powered = false;
        NandError::PowerCut
    }

    fn locate(&self, ppn: u32) -> Result<(usize, usize), NandError> {
        let (b, p) = ((ppn / self.ppb) as usize, (ppn % self.ppb) as usize);
        if b >= self.blocks.len() {
            return Err(NandError::Rule(format!("page {ppn} is beyond the array")));
        }
        Ok((b, p))
    }

    pub fn read(&mut self, ppn: u32, buf: &mut [u8]) -> Result<NandRead, NandError> {
        let (b, p) = self.locate(ppn)?;
        if buf.len() != self.page_size {
            return Err(NandError::Rule(format!("read into {} bytes", buf.len())));
        }
        let strike = self.begin()?;
        self.stats.reads += 1;
        if (b as u32) < self.meta_blocks {
            self.stats.meta_reads += 1;
        }
        let op_us = self.read_us + self.xfer_us;
        if strike {
            return Err(self.strike(op_us));
        }
        self.now_us += op_us;
        self.stats.busy_us += op_us;
        let block = &self.blocks[b];
        match block.pages[p] {
            PState::Erased => {
                buf.fill(0xff);
                Ok(NandRead::Erased)
            }
            PState::Torn => Err(NandError::Ecc),
            PState::Programmed(oob) => {
                let data = block
                    .data
                    .as_ref()
                    .ok_or_else(|| NandError::Rule("programmed page without data".into()))?;
                buf.copy_from_slice(&data[p * self.page_size..(p + 1) * self.page_size]);
                Ok(NandRead::Data(oob))
            }
        }
    }

    pub fn program(&mut self, ppn: u32, data: &[u8], oob: Oob) -> Result<(), NandError> {
        let (b, p) = self.locate(ppn)?;
        if data.len() != self.page_size {
            return Err(NandError::Rule(format!("program of {} bytes", data.len())));
        }
        {
            let block = &self.blocks[b];
            if block.undefined {
                return Err(NandError::Rule(format!(
                    "program of page {ppn}: block {b} is undefined (interrupted erase); erase it first"
                )));
            }
            if block.pages[p] != PState::Erased {
                return Err(NandError::Rule(format!(
                    "program of page {ppn}, which is not erased"
                )));
            }
            if p as u32 != block.wp {
                return Err(NandError::Rule(format!(
                    "program of page {p} of block {b} out of order (next is {})",
                    block.wp
                )));
            }
        }
        let strike = self.begin()?;
        self.stats.programs += 1;
        if (b as u32) < self.meta_blocks {
            self.stats.meta_programs += 1;
        }
        let (ps, ppb) = (self.page_size, self.ppb as usize);
        let block = &mut self.blocks[b];
        let cells = block
            .data
            .get_or_insert_with(|| vec![0xffu8; ps * ppb].into_boxed_slice());
        block.wp = p as u32 + 1;
        if strike {
            cells[p * ps..(p + 1) * ps].fill(0);
            block.pages[p] = PState::Torn;
            self.stats.torn_programs += 1;
            let op_us = self.xfer_us + self.program_us;
            return Err(self.strike(op_us));
        }
        cells[p * ps..(p + 1) * ps].copy_from_slice(data);
        block.pages[p] = PState::Programmed(oob);
        self.now_us += self.xfer_us + self.program_us;
        self.stats.busy_us += self.xfer_us + self.program_us;
        Ok(())
    }

    pub fn erase(&mut self, b: u32) -> Result<(), NandError> {
        if b as usize >= self.blocks.len() {
            return Err(NandError::Rule(format!("erase of block {b}, beyond the array")));
        }
        let strike = self.begin()?;
        self.stats.erases += 1;
        if b < self.meta_blocks {
            self.stats.meta_erases += 1;
        }
        if strike {
            self.stats.interrupted_erases += 1;
            let mut states = Vec::with_capacity(self.ppb as usize);
            for _ in 0..self.ppb {
                states.push(self.rng.random_range(0..3u8));
            }
            let block = &mut self.blocks[b as usize];
            for (page, r) in block.pages.iter_mut().zip(states) {
                *page = match (r, *page) {
                    (0, old) => old,
                    (1, _) => PState::Torn,
                    _ => PState::Erased,
                };
            }
            block.undefined = true;
            block.wp = self.ppb;
            block.erases += 1;
            let op_us = self.erase_us;
            return Err(self.strike(op_us));
        }
        let block = &mut self.blocks[b as usize];
        block.pages.fill(PState::Erased);
        block.data = None;
        block.wp = 0;
        block.undefined = false;
        block.erases += 1;
        self.now_us += self.erase_us;
        self.stats.busy_us += self.erase_us;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nand() -> Nand {
        Nand::new(128, 64, 4, 4, 1, &Timing::default())
    }

    fn oob() -> Oob {
        Oob {
            kind: PageKind::Data,
            lpn: 1,
            seq: 1,
            tx: 0,
            crc: 0,
        }
    }

    #[test]
    fn enforces_nand_rules() {
        let mut n = nand();
        let page = vec![7u8; 128];
        // Out of order.
        assert!(matches!(n.program(1, &page, oob()), Err(NandError::Rule(_))));
        n.program(0, &page, oob()).unwrap();
        // Not erased.
        assert!(matches!(n.program(0, &page, oob()), Err(NandError::Rule(_))));
        n.program(1, &page, oob()).unwrap();
        let mut buf = vec![0u8; 128];
        assert!(matches!(n.read(1, &mut buf), Ok(NandRead::Data(_))));
        assert_eq!(buf, page);
        assert!(matches!(n.read(2, &mut buf), Ok(NandRead::Erased)));
        assert!(buf.iter().all(|&b| b == 0xff));
        n.erase(0).unwrap();
        assert!(matches!(n.read(0, &mut buf), Ok(NandRead::Erased)));
        n.program(0, &page, oob()).unwrap();
        // Wrong length, beyond the array.
        assert!(matches!(
            n.program(5, &page[..10], oob()),
            Err(NandError::Rule(_))
        ));
        assert!(matches!(n.read(99, &mut buf), Err(NandError::Rule(_))));
        assert_eq!(n.erase_counts(), vec![1, 0, 0, 0]);
    }

    #[test]
    fn power_cut_tears_a_program_and_leaves_an_erase_undefined() {
        let mut n = nand();
        let page = vec![7u8; 128];
        n.schedule_cut(2, 1);
        n.program(4, &page, oob()).unwrap();
        assert!(matches!(n.program(5, &page, oob()), Err(NandError::PowerCut)));
        assert!(!n.powered());
        let mut buf = vec![0u8; 128];
        assert!(matches!(n.read(4, &mut buf), Err(NandError::PowerCut)));
        n.power_on_after(n.now_us());
        assert!(matches!(n.read(5, &mut buf), Err(NandError::Ecc)));
        assert!(matches!(n.read(4, &mut buf), Ok(NandRead::Data(_))));
        // The next page after a torn one may be programmed.
        n.program(6, &page, oob()).unwrap();
        n.schedule_cut(1, 2);
        assert!(matches!(n.erase(1), Err(NandError::PowerCut)));
        n.power_on_after(n.now_us());
        // Undefined until erased.
        assert!(matches!(n.program(7, &page, oob()), Err(NandError::Rule(_))));
        n.erase(1).unwrap();
        n.program(4, &page, oob()).unwrap();
        assert_eq!(n.stats.torn_programs, 1);
        assert_eq!(n.stats.interrupted_erases, 1);
    }

    #[test]
    fn clock_counts_every_operation() {
        let mut n = nand();
        let t = Timing::default();
        let xfer = (128 + 64) as f64 / t.bus_mb_per_s;
        let page = vec![1u8; 128];
        n.program(4, &page, oob()).unwrap();
        assert!((n.now_us() - (xfer + t.program_us)).abs() < 1e-9);
        let mut buf = vec![0u8; 128];
        n.read(4, &mut buf).unwrap();
        n.erase(1).unwrap();
        let want = 2.0 * xfer + t.program_us + t.read_us + t.erase_us;
        assert!((n.now_us() - want).abs() < 1e-9);
    }
}
