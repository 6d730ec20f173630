//! What a connection wrote, whatever its scheme: the counting shim's counters for a plain
//! file, the store's own counters (`PRAGMA onesync_stats`) for a onesync store (it does its
//! I/O itself; the few bytes per transaction it writes to its side file for other processes
//! are not included). And the block device under a run.

use std::path::Path;

use anyhow::{Context, Result};
use rusqlite::Connection;

use crate::loopfs::{DevCounters, LoopFs};
use crate::schemes::{Scheme, Storage};

/// Write calls, bytes written and sync calls, cumulative; for a store also the zeros its
/// growth steps wrote ahead (not in `bytes_written`).
#[derive(Clone, Copy, Default)]
pub struct IoCounters {
    pub write_calls: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    pub growth_zeros: Option<u64>,
}

impl IoCounters {
    /// The counters of `conn`, opened by `scheme`.
    pub fn sample(conn: &Connection, scheme: &dyn Scheme) -> Result<IoCounters> {
        match scheme.storage() {
            Storage::Store => {
                #[derive(serde::Deserialize)]
                struct Store {
                    write_calls: u64,
                    bytes_written: u64,
                    flushes: u64,
                    bytes_preallocated: u64,
                }
                let json: String = conn.query_row("PRAGMA onesync_stats", [], |r| r.get(0))?;
                let s: Store = serde_json::from_str(&json).context("parsing PRAGMA onesync_stats")?;
                Ok(IoCounters {
                    write_calls: s.write_calls,
                    bytes_written: s.bytes_written,
                    syncs: s.flushes,
                    growth_zeros: Some(s.bytes_preallocated),
                })
            }
            Storage::PlainFile => {
                let io = onesync_vfs::passthrough_io();
                Ok(IoCounters {
                    write_calls: io.write_calls,
                    bytes_written: io.bytes_written,
                    syncs: io.syncs,
                    growth_zeros: None,
                })
            }
        }
    }

    pub fn minus(self, before: IoCounters) -> IoCounters {
        IoCounters {
            write_calls: self.write_calls.saturating_sub(before.write_calls),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
            syncs: self.syncs.saturating_sub(before.syncs),
            growth_zeros: self
                .growth_zeros
                .map(|z| z.saturating_sub(before.growth_zeros.unwrap_or(0))),
        }
    }
}

/// How a store shared its work with other processes and threads over a run (`PRAGMA
/// onesync_stats`; `None` for a plain file): commit records written, flushes another
/// process's flush spared it, waits for a flush another process announced, commits refused
/// at commit (a concurrent writer plans them again; `early_conflicts` before it queued for
/// the write lock), catch-ups that followed other processes' commits and the records they
/// applied, flushes (all, and those of group commit with the time they took), growth (zeros
/// written ahead, and the growth steps and checkpoints behind the flushes that are not group
/// commit's), the time the cross-process write lock was waited for and held, and concurrent
/// commits rebased onto later commits (with their new pages moved or not). Per
/// process: a run of several processes adds theirs up.
#[derive(Clone, Copy, Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct StoreActivity {
    pub commit_records: u64,
    pub flushes_by_others: u64,
    pub announced_flush_waits: u64,
    pub conflicts: u64,
    pub catch_ups: u64,
    pub records_followed: u64,
    pub flushes: u64,
    pub group_commit_flushes: u64,
    pub flush_micros: u64,
    pub bytes_preallocated: u64,
    pub write_lock_waited_micros: u64,
    pub write_lock_held_micros: u64,
    pub early_conflicts: u64,
    pub growths: u64,
    pub growths_holding_locks: u64,
    pub checkpoints: u64,
    /// Concurrent commits rebased onto later commits, and of them those whose new pages
    /// moved (absent from an older `libonesync.so`).
    #[serde(default)]
    pub concurrent_rebased: u64,
    #[serde(default)]
    pub concurrent_relocated: u64,
}

impl StoreActivity {
    /// The counters of `conn`'s store, if `scheme` keeps its database in one.
    pub fn sample(conn: &Connection, scheme: &dyn Scheme) -> Result<Option<StoreActivity>> {
        if !matches!(scheme.storage(), Storage::Store) {
            return Ok(None);
        }
        StoreActivity::read(conn).map(Some)
    }

    /// `PRAGMA onesync_stats` on a connection opened through the onesync VFS.
    pub fn read(conn: &Connection) -> Result<StoreActivity> {
        let json: String = conn
            .query_row("PRAGMA onesync_stats", [], |row| row.get(0))
            .context("PRAGMA onesync_stats (is this connection on the onesync VFS?)")?;
        serde_json::from_str(&json).with_context(|| format!("parsing PRAGMA onesync_stats: {json}"))
    }

    /// Each counter less `before`'s (`self` is later), or plus `other`'s.
    pub fn combine(self, other: StoreActivity, sign: impl Fn(u64, u64) -> u64) -> StoreActivity {
        StoreActivity {
            commit_records: sign(self.commit_records, other.commit_records),
            flushes_by_others: sign(self.flushes_by_others, other.flushes_by_others),
            announced_flush_waits: sign(self.announced_flush_waits, other.announced_flush_waits),
            conflicts: sign(self.conflicts, other.conflicts),
            catch_ups: sign(self.catch_ups, other.catch_ups),
            records_followed: sign(self.records_followed, other.records_followed),
            flushes: sign(self.flushes, other.flushes),
            group_commit_flushes: sign(self.group_commit_flushes, other.group_commit_flushes),
            flush_micros: sign(self.flush_micros, other.flush_micros),
            bytes_preallocated: sign(self.bytes_preallocated, other.bytes_preallocated),
            write_lock_waited_micros: sign(self.write_lock_waited_micros, other.write_lock_waited_micros),
            write_lock_held_micros: sign(self.write_lock_held_micros, other.write_lock_held_micros),
            early_conflicts: sign(self.early_conflicts, other.early_conflicts),
            growths: sign(self.growths, other.growths),
            growths_holding_locks: sign(self.growths_holding_locks, other.growths_holding_locks),
            checkpoints: sign(self.checkpoints, other.checkpoints),
            concurrent_rebased: sign(self.concurrent_rebased, other.concurrent_rebased),
            concurrent_relocated: sign(self.concurrent_relocated, other.concurrent_relocated),
        }
    }
}

/// Where a run's block-device counters come from.
pub enum DeviceProbe<'a> {
    /// The loop device the lab made for the run.
    Loop(&'a LoopFs),
    /// A device named on the command line, holding the filesystem of `dir`.
    Named { device: &'a str, dir: &'a Path },
}

impl DeviceProbe<'_> {
    pub fn counters(&self) -> Result<DevCounters> {
        match self {
            DeviceProbe::Loop(l) => l.counters(),
            DeviceProbe::Named { device, dir } => crate::loopfs::synced_counters(device, dir),
        }
    }
}
