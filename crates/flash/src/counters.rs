//! What the drive did: host commands, NAND operations, garbage collection.

use serde::{Deserialize, Serialize};

/// Cumulative counts since the drive was created (they survive [`crate::Ssd::restart`], as
/// does the clock). Take a snapshot before a run and use [`Counters::since`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Pages read by the host (`read` and `read_tx`).
    pub host_reads: u64,
    /// Pages written by the host, plain and transactional.
    pub host_writes: u64,
    pub host_trims: u64,
    /// `flush` calls.
    pub host_flushes: u64,
    /// `commit` calls (an empty or unknown transaction included).
    pub tx_commits: u64,
    /// `abort` calls that dropped a transaction.
    pub tx_aborts: u64,
    /// Every NAND page read: host reads, GC copies, recovery.
    pub nand_reads: u64,
    /// Every NAND page program: host data, GC copies, metadata.
    pub nand_programs: u64,
    /// Programs into the metadata area (mapping log and checkpoints).
    pub nand_meta_programs: u64,
    /// Every block erase, metadata blocks included.
    pub nand_erases: u64,
    /// Erases of metadata blocks.
    pub nand_meta_erases: u64,
    /// NAND reads of the metadata area.
    pub nand_meta_reads: u64,
    /// Full mapping checkpoints written.
    pub checkpoints: u64,
    /// Mapping-log records written (flushes, commits and GC that had something to persist).
    pub log_records: u64,
    /// Garbage-collection victims reclaimed.
    pub gc_runs: u64,
    /// Valid pages copied by garbage collection.
    pub gc_pages_copied: u64,
    /// Sum over GC runs of the victim's valid pages / pages per block (mean = this / gc_runs).
    pub gc_valid_ratio_sum: f64,
    /// Programs and erases a power cut interrupted.
    pub torn_programs: u64,
    pub interrupted_erases: u64,
    /// Where the host's time went (µs; [`Counters::host_elapsed_us`] is their sum, the
    /// advance of [`crate::Ssd::now_us`]). Host software: per-command CPU and what the host
    /// charged with [`crate::Ssd::host_compute`] (system calls, the filesystem).
    #[serde(default)]
    pub host_cpu_us: f64,
    /// Pages crossing the host link.
    #[serde(default)]
    pub link_us: f64,
    /// Waiting in `flush` and `commit` for the write cache to drain and the mapping to be
    /// persisted.
    #[serde(default)]
    pub flush_wait_us: f64,
    /// Waiting for the drive otherwise: reads, writes with a full cache (or write-through),
    /// recovery.
    #[serde(default)]
    pub io_wait_us: f64,
    /// Time the NAND array was busy (reads, programs, erases), whether the host waited for it
    /// or not.
    #[serde(default)]
    pub nand_busy_us: f64,
}

impl Counters {
    /// Write amplification: NAND programs (data, GC copies and metadata) per host page
    /// written; 0 when the host wrote nothing.
    pub fn waf(&self) -> f64 {
        if self.host_writes == 0 {
            0.0
        } else {
            self.nand_programs as f64 / self.host_writes as f64
        }
    }

    /// The host's elapsed time: software, link transfers and waits for the drive.
    pub fn host_elapsed_us(&self) -> f64 {
        self.host_cpu_us + self.link_us + self.flush_wait_us + self.io_wait_us
    }

    /// Mean valid-page ratio of GC victims (0 without GC).
    pub fn gc_mean_valid_ratio(&self) -> f64 {
        if self.gc_runs == 0 {
            0.0
        } else {
            self.gc_valid_ratio_sum / self.gc_runs as f64
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            host_reads: self.host_reads.saturating_sub(earlier.host_reads),
            host_writes: self.host_writes.saturating_sub(earlier.host_writes),
            host_trims: self.host_trims.saturating_sub(earlier.host_trims),
            host_flushes: self.host_flushes.saturating_sub(earlier.host_flushes),
            tx_commits: self.tx_commits.saturating_sub(earlier.tx_commits),
            tx_aborts: self.tx_aborts.saturating_sub(earlier.tx_aborts),
            nand_reads: self.nand_reads.saturating_sub(earlier.nand_reads),
            nand_programs: self.nand_programs.saturating_sub(earlier.nand_programs),
            nand_meta_programs: self.nand_meta_programs.saturating_sub(earlier.nand_meta_programs),
            nand_erases: self.nand_erases.saturating_sub(earlier.nand_erases),
            nand_meta_erases: self.nand_meta_erases.saturating_sub(earlier.nand_meta_erases),
            nand_meta_reads: self.nand_meta_reads.saturating_sub(earlier.nand_meta_reads),
            checkpoints: self.checkpoints.saturating_sub(earlier.checkpoints),
            log_records: self.log_records.saturating_sub(earlier.log_records),
            gc_runs: self.gc_runs.saturating_sub(earlier.gc_runs),
            gc_pages_copied: self.gc_pages_copied.saturating_sub(earlier.gc_pages_copied),
            gc_valid_ratio_sum: self.gc_valid_ratio_sum - earlier.gc_valid_ratio_sum,
            torn_programs: self.torn_programs.saturating_sub(earlier.torn_programs),
            interrupted_erases: self.interrupted_erases.saturating_sub(earlier.interrupted_erases),
            host_cpu_us: self.host_cpu_us - earlier.host_cpu_us,
            link_us: self.link_us - earlier.link_us,
            flush_wait_us: self.flush_wait_us - earlier.flush_wait_us,
            io_wait_us: self.io_wait_us - earlier.io_wait_us,
            nand_busy_us: self.nand_busy_us - earlier.nand_busy_us,
        }
    }
}

/// What a [`crate::Ssd::restart`] cost and found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    /// Simulated time the rebuild took (the clock advanced by this much).
    pub sim_us: f64,
    /// NAND pages read.
    pub pages_read: u64,
    /// Of which in the metadata area (recovery reads nothing else).
    pub meta_pages_read: u64,
    /// Of which in the data area (always 0; reported so tests and reports can show it).
    pub data_pages_read: u64,
    /// Generation of the checkpoint recovery started from (0: none, an empty drive).
    pub checkpoint_generation: u64,
    /// The newest checkpoint was incomplete (torn by the cut) and an older one was used.
    pub fell_back: bool,
    /// Mapping-log pages replayed after the checkpoint.
    pub log_pages: u64,
    /// Complete log records applied (flush deltas, commits).
    pub records_applied: u64,
    /// Of which transaction commits.
    pub commits_applied: u64,
    /// Logical pages mapped after recovery.
    pub mapped_pages: u64,
    /// A power cut struck during recovery: the returned drive is off again (restart it).
    pub interrupted: bool,
}
