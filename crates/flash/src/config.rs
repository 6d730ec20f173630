//! Drive geometry, NAND timing and FTL settings, and the layout derived from them.

use serde::{Deserialize, Serialize};

use crate::meta::{CKPT_ENTRY, HDR, LOG_ENTRY};

/// The physical shape of the drive. Defaults: Samsung K9LCG08U1M, the MLC part on the
/// OpenSSD Jasmine board used by the X-FTL paper (8 KiB pages, 436-byte spare area, 128 pages
/// per block).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Geometry {
    /// Bytes of data per page.
    pub page_size: usize,
    /// Bytes of spare area (OOB) per page; the FTL keeps (kind, lpn, sequence, tx, CRC) there.
    pub oob_size: usize,
    pub pages_per_block: u32,
    /// Physical blocks, metadata blocks included.
    pub blocks: u32,
    /// Fraction of the data blocks (physical blocks minus `meta_blocks`) hidden from the host:
    /// `logical_pages = floor((blocks - meta_blocks) * pages_per_block * (1 - over_provisioning))`.
    pub over_provisioning: f64,
    /// Blocks reserved for FTL metadata: two checkpoint regions and the mapping log
    /// (see the crate docs). [`Geometry::required_meta_blocks`] gives the smallest workable
    /// number.
    pub meta_blocks: u32,
}

impl Geometry {
    /// The paper's part with `blocks` blocks and 7% over-provisioning.
    pub fn k9lcg08u1m(blocks: u32) -> Geometry {
        let mut g = Geometry {
            page_size: 8192,
            oob_size: 436,
            pages_per_block: 128,
            blocks,
            over_provisioning: 0.07,
            meta_blocks: 4,
        };
        g.meta_blocks = g.required_meta_blocks().unwrap_or(4).max(4);
        g
    }

    pub fn block_bytes(&self) -> u64 {
        self.page_size as u64 * self.pages_per_block as u64
    }

    pub fn physical_bytes(&self) -> u64 {
        self.block_bytes() * self.blocks as u64
    }

    /// The smallest `meta_blocks` that holds the two checkpoint regions and a mapping log
    /// for this geometry (the other fields as they are; only the metadata constraints are
    /// checked), or `None` if no number fits.
    pub fn required_meta_blocks(&self) -> Option<u32> {
        (3..self.blocks).find(|&m| {
            let g = Geometry {
                meta_blocks: m,
                ..self.clone()
            };
            !matches!(Layout::new(&g), Err(LayoutError::Meta(_)))
        })
    }
}

/// NAND, interface and host-command timing. Defaults: Samsung's MLC parts of the paper's era,
/// from the K9GAG08U0M datasheet: tR 60 µs (max), tPROG 800 µs (typ), tBERS 1.5 ms (typ),
/// 8-bit bus at a 25 ns cycle (40 MB/s); host link SATA2 (300 MB/s); a DRAM write cache and a
/// per-command host cost (below). [`Timing::nand_only`] is the clock without the last two.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Cell array to page register (tR), µs.
    pub read_us: f64,
    /// Page register to cells (tPROG), µs.
    pub program_us: f64,
    /// Block erase (tBERS), µs.
    pub erase_us: f64,
    /// NAND bus, MB/s (10^6 bytes per second); page and spare area cross it on every read and
    /// program.
    pub bus_mb_per_s: f64,
    /// Host interface, MB/s; one page crosses it per host read or write.
    pub host_mb_per_s: f64,
    /// Host CPU per drive command (block layer, driver, completion interrupt), µs: charged
    /// to the host's clock for every read, write, trim, flush, commit and abort.
    #[serde(default)]
    pub command_us: f64,
    /// The drive's DRAM write cache, bytes (0: write-through). A host write completes once
    /// its page has crossed the link into the cache; its NAND program runs in the background,
    /// in order, and the host waits only when the cache is full, when it reads, and at
    /// `flush`/`commit`, which return once the cache has drained and the mapping is persisted.
    /// Time only: what a power cut keeps is unchanged (see the crate docs).
    #[serde(default)]
    pub write_cache_bytes: u64,
}

/// Kernel block-I/O CPU per request on the interrupt-driven (asynchronous) completion path:
/// 6.3 µs for a 4 KiB request (Yang, Minturn, Hady, "When Poll Is Better than Interrupt",
/// FAST 2012, Linux 2.6.33 on a 2.93 GHz Xeon; the paper's host is a 2.8 GHz Core i7-860).
pub const BLOCK_REQUEST_US: f64 = 6.3;

/// The OpenSSD Jasmine board's write buffer, a lower bound: its Greedy FTL gives 7/8 of the
/// DRAM left after its tables to SATA write buffers (`ftl_greedy/ftl.h`, `NUM_WR_BUFFERS`;
/// `DRAM_SIZE` 65,075,200 B in `include/jasmine.h`, OpenSSD 1.1.0). With the page map of a
/// 128 GB drive (16 MiB) that is over 40 MiB; 32 MiB holds for any capacity up to that.
pub const JASMINE_WRITE_CACHE_BYTES: u64 = 32 << 20;

impl Default for Timing {
    fn default() -> Self {
        Timing {
            read_us: 60.0,
            program_us: 800.0,
            erase_us: 1500.0,
            bus_mb_per_s: 40.0,
            host_mb_per_s: 300.0,
            command_us: BLOCK_REQUEST_US,
            write_cache_bytes: JASMINE_WRITE_CACHE_BYTES,
        }
    }
}

impl Timing {
    /// The NAND-only clock: no write cache (every write waits for its program), no host
    /// cost per command; only NAND operations and link transfers take time.
    pub fn nand_only() -> Timing {
        Timing {
            command_us: 0.0,
            write_cache_bytes: 0,
            ..Timing::default()
        }
    }
}

/// Deliberate FTL bugs, for negative controls: tests that must fail when one is switched on.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sabotage {
    /// At a transactional write the old (committed) copy of the page is counted invalid at
    /// once, so garbage collection may erase it while the transaction is still active:
    /// an abort or a power cut then leaves the page pointing at erased or reused flash.
    GcErasesActiveOldCopies,
    /// Commit writes the transaction's entries as separate one-page records (each applied on
    /// its own at recovery), so a power cut in the middle of a multi-page commit keeps part of
    /// the transaction.
    CommitNotAtomic,
}

/// Everything [`crate::Ssd::new`] needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SsdConfig {
    pub geometry: Geometry,
    pub timing: Timing,
    pub sabotage: Option<Sabotage>,
    /// A full mapping checkpoint is written once this many mapping-log pages have been
    /// written since the last one (default 32). Recovery reads at most about this many log
    /// pages plus one checkpoint; each checkpoint costs its pages plus one erase.
    pub checkpoint_every: u32,
    /// `flush` writes a full mapping checkpoint instead of a log record of the changes, as the
    /// OpenSSD Jasmine Greedy FTL's FLUSH CACHE does (`ftl_flush`: the whole page map and the
    /// block metadata, `ftl_greedy/ftl.c`, OpenSSD 1.1.0). Off by default; commits are not
    /// affected (X-FTL's commit writes only its X-L2P entries).
    #[serde(default)]
    pub flush_checkpoints: bool,
}

impl SsdConfig {
    /// The paper's NAND part and timing with `mib` MiB of physical flash (metadata and
    /// over-provisioning included; one block is 1 MiB, so `blocks = mib`).
    pub fn with_capacity_mib(mib: u64) -> SsdConfig {
        let block = 8192u64 * 128;
        let blocks = ((mib << 20).div_ceil(block)).clamp(8, u32::MAX as u64 / 256) as u32;
        SsdConfig {
            geometry: Geometry::k9lcg08u1m(blocks),
            timing: Timing::default(),
            sabotage: None,
            checkpoint_every: 32,
            flush_checkpoints: false,
        }
    }

    /// A small drive for tests: the given shape, the fewest metadata blocks that work, and
    /// over-provisioning that leaves five spare blocks (so garbage collection runs often but
    /// always finds a victim). Paper timing.
    pub fn small(page_size: usize, pages_per_block: u32, blocks: u32) -> SsdConfig {
        let mut g = Geometry {
            page_size,
            oob_size: 436,
            pages_per_block,
            blocks,
            over_provisioning: 0.5,
            meta_blocks: 4,
        };
        for m in 3..blocks.saturating_sub(6) {
            let data_pages = (blocks - m) as f64 * pages_per_block as f64;
            let logical = (blocks - m - 5) as f64 * pages_per_block as f64;
            g.meta_blocks = m;
            g.over_provisioning = 1.0 - (logical + 0.5) / data_pages;
            if Layout::new(&g).is_ok() {
                break;
            }
        }
        SsdConfig {
            geometry: g,
            timing: Timing::default(),
            sabotage: None,
            checkpoint_every: 32,
            flush_checkpoints: false,
        }
    }
}

impl Default for SsdConfig {
    /// 128 MiB of physical flash.
    fn default() -> Self {
        SsdConfig::with_capacity_mib(128)
    }
}

/// Blocks that must stay free so garbage collection always has somewhere to copy to.
pub(crate) const GC_RESERVE: usize = 2;

#[derive(Debug)]
pub(crate) enum LayoutError {
    Meta(String),
    Other(String),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::Meta(s) | LayoutError::Other(s) => f.write_str(s),
        }
    }
}

/// Sizes derived from a [`Geometry`]. Block numbers: `[0, K)` checkpoint region 0, `[K, 2K)`
/// checkpoint region 1, `[2K, 2K + log_blocks)` the mapping log, then the data blocks.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub ps: usize,
    pub ppb: u32,
    pub blocks: u32,
    /// Blocks per checkpoint region (K).
    pub ckpt_blocks: u32,
    pub log_blocks: u32,
    pub meta_blocks: u32,
    pub logical: u64,
    /// Mapping entries per log page.
    pub log_entries: usize,
    /// L2P entries per checkpoint page.
    pub ckpt_entries: usize,
    /// Pages per checkpoint (C).
    pub ckpt_pages: u32,
}

impl Layout {
    pub fn new(g: &Geometry) -> Result<Layout, LayoutError> {
        let other = |s: String| Err(LayoutError::Other(s));
        if !(128..=1 << 20).contains(&g.page_size) {
            return other(format!("page_size {} is outside 128..=1048576", g.page_size));
        }
        if g.oob_size < 32 {
            return other(format!(
                "oob_size {} is under the 32 bytes the FTL keeps there",
                g.oob_size
            ));
        }
        if !(2..=1 << 16).contains(&g.pages_per_block) {
            return other(format!(
                "pages_per_block {} is outside 2..=65536",
                g.pages_per_block
            ));
        }
        if g.blocks as u64 * g.pages_per_block as u64 >= u32::MAX as u64 {
            return other("more than 2^32 - 1 physical pages".into());
        }
        if !(g.over_provisioning.is_finite() && (0.0..0.95).contains(&g.over_provisioning)) {
            return other(format!(
                "over_provisioning {} is outside [0, 0.95)",
                g.over_provisioning
            ));
        }
        if g.meta_blocks < 3 || g.meta_blocks + 6 > g.blocks {
            return other(format!(
                "{} blocks with {} metadata blocks: need at least 3 metadata and 6 data blocks",
                g.blocks, g.meta_blocks
            ));
        }
        let ppb = g.pages_per_block;
        let data_blocks = g.blocks - g.meta_blocks;
        let data_pages = data_blocks as u64 * ppb as u64;
        let logical = (data_pages as f64 * (1.0 - g.over_provisioning)).floor() as u64;
        let spare = data_pages - logical.min(data_pages);
        if logical == 0 || spare < 4 * ppb as u64 {
            return other(format!(
                "{logical} logical of {data_pages} data pages leaves {spare} spare pages; garbage \
                 collection needs at least 4 blocks ({}): raise over_provisioning",
                4 * ppb
            ));
        }
        let log_entries = (g.page_size - HDR) / LOG_ENTRY;
        let ckpt_entries = (g.page_size - HDR) / CKPT_ENTRY;
        let ckpt_pages = logical.div_ceil(ckpt_entries as u64) as u32;
        let ckpt_blocks = ckpt_pages.div_ceil(ppb);
        // The largest log record: a delta smaller than a checkpoint plus a transaction that
        // wrote every logical page.
        let max_record = ckpt_pages - 1 + logical.div_ceil(log_entries as u64) as u32;
        if g.meta_blocks < 2 * ckpt_blocks + 2 {
            return Err(LayoutError::Meta(format!(
                "{} metadata blocks cannot hold two {ckpt_blocks}-block checkpoint regions and a \
                 2-block log",
                g.meta_blocks
            )));
        }
        let log_blocks = g.meta_blocks - 2 * ckpt_blocks;
        if (log_blocks as u64 - 1) * (ppb as u64) < max_record as u64 {
            return Err(LayoutError::Meta(format!(
                "a {log_blocks}-block mapping log cannot hold the largest record ({max_record} pages) \
                 after a checkpoint: add metadata blocks"
            )));
        }
        Ok(Layout {
            ps: g.page_size,
            ppb,
            blocks: g.blocks,
            ckpt_blocks,
            log_blocks,
            meta_blocks: g.meta_blocks,
            logical,
            log_entries,
            ckpt_entries,
            ckpt_pages,
        })
    }

    pub fn total_pages(&self) -> u64 {
        self.blocks as u64 * self.ppb as u64
    }

    /// Physical page `i` (0-based) of checkpoint region `r`.
    pub fn ckpt_ppn(&self, region: u32, i: u32) -> u32 {
        (region * self.ckpt_blocks + i / self.ppb) * self.ppb + i % self.ppb
    }

    pub fn ckpt_block(&self, region: u32, k: u32) -> u32 {
        region * self.ckpt_blocks + k
    }

    /// Physical block of log block `b` (0-based within the log).
    pub fn log_block(&self, b: u32) -> u32 {
        2 * self.ckpt_blocks + b
    }

    pub fn log_ppn(&self, b: u32, page: u32) -> u32 {
        self.log_block(b) * self.ppb + page
    }

    /// Log pages needed for `entries` mapping entries.
    pub fn log_pages_for(&self, entries: usize) -> u32 {
        entries.div_ceil(self.log_entries) as u32
    }

    pub fn block_of(&self, ppn: u32) -> u32 {
        ppn / self.ppb
    }

    pub fn is_data_ppn(&self, ppn: u32) -> bool {
        ppn / self.ppb >= self.meta_blocks && (ppn as u64) < self.total_pages()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_make_a_valid_layout() {
        let cfg = SsdConfig::default();
        assert_eq!(cfg.geometry.blocks, 128);
        let l = Layout::new(&cfg.geometry).unwrap();
        assert_eq!(l.meta_blocks, 4);
        assert_eq!(l.ckpt_blocks, 1);
        assert_eq!(l.log_blocks, 2);
        let cfg = SsdConfig::with_capacity_mib(4096);
        let l = Layout::new(&cfg.geometry).unwrap();
        assert!(l.ckpt_pages > 100);
        for (ps, ppb, blocks) in [(256, 16, 16), (128, 8, 64), (512, 4, 40), (8192, 16, 96)] {
            let cfg = SsdConfig::small(ps, ppb, blocks);
            let l = Layout::new(&cfg.geometry).unwrap_or_else(|e| panic!("{ps}/{ppb}/{blocks}: {e}"));
            assert_eq!(
                (l.blocks - l.meta_blocks) as u64 * ppb as u64 - l.logical,
                5 * ppb as u64
            );
        }
    }

    #[test]
    fn bad_geometry_is_refused() {
        let mut g = SsdConfig::default().geometry;
        g.over_provisioning = 0.0;
        assert!(Layout::new(&g).is_err());
        let mut g = SsdConfig::default().geometry;
        g.meta_blocks = 2;
        assert!(Layout::new(&g).is_err());
        let mut g = SsdConfig::default().geometry;
        g.page_size = 64;
        assert!(Layout::new(&g).is_err());
    }
}
