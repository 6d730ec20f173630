//! The explorer's store and what its scripts and checks share: its own registration of the
//! onesync VFS with small store options, opening a store and its `aux` database, and the
//! marks of spilling and rolled-back transfers. Below the command (`mod.rs`), the scenarios,
//! the runs, the workers and the checks, which all name these.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use onesync_store::{Error as StoreError, Options, Store};
use rusqlite::{Connection, OpenFlags};

/// The explorer's registration of the onesync VFS.
pub const EXPLORE_VFS: &str = "onesync-explore";
/// Commits between checkpoints in the explorer's stores (the VFS's default is 1000).
pub const CHECKPOINT_INTERVAL: u64 = 3;
/// How long a worker's SQLite waits for a lock: steps run one at a time, so only a
/// process stopped at a crash point can hold one.
pub const WORKER_BUSY_TIMEOUT: Duration = Duration::from_millis(500);
/// Filler rows of a [`Cmd::Spill`](super::scenario::Cmd::Spill) transaction (about 120 KiB, far
/// more than its two cached pages).
pub const SPILL_ROWS: i64 = 300;
/// Marks the transfer id of a spilling transaction that is committed ...
pub const SPILL_MARK: &str = "-spill-";
/// ... and of one that is rolled back.
pub const ROLLED_BACK_MARK: &str = "-rolled-back-";
/// The explorer's store options: `base` (the VFS's) with a checkpoint every
/// [`CHECKPOINT_INTERVAL`] commits (or as [`INTERVAL_ENV`] says), a small file growing in
/// small steps, and small windows.
pub fn explore_options(base: &Options) -> Options {
    let interval = std::env::var(INTERVAL_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CHECKPOINT_INTERVAL);
    let max_growth_step = std::env::var(MAX_GROWTH_STEP_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(base.max_growth_step);
    Options {
        checkpoint_interval: interval,
        initial_capacity: 256 << 10,
        growth_step: 256 << 10,
        max_growth_step,
        window_bytes: 64 << 10,
        ..base.clone()
    }
}

/// Set by the explorer in its workers: the scenario's checkpoint interval.
pub const INTERVAL_ENV: &str = "ONESYNC_EXPLORE_CHECKPOINT_INTERVAL";

/// Set by the explorer in its workers where the scenario has one: the store's
/// `max_growth_step`.
pub const MAX_GROWTH_STEP_ENV: &str = "ONESYNC_EXPLORE_MAX_GROWTH_STEP";

/// Registers the explorer's VFS with the bundled SQLite (idempotent).
pub fn register_explore_vfs() -> Result<()> {
    let api = onesync_vfs::api_table_from_sys!(rusqlite::ffi);
    let opener: onesync_vfs::StoreOpener = Arc::new(|path: &Path, opts: &Options, create: bool| {
        let opts = explore_options(opts);
        match Store::open(path, &opts) {
            Err(StoreError::NotFound(_)) if create => Store::create(path, &opts),
            other => other,
        }
    });
    onesync_vfs::register_with(
        &api,
        onesync_vfs::RegisterOptions {
            name: EXPLORE_VFS.to_owned(),
            make_default: false,
            main_db: Box::new(onesync_vfs::StoreFactory::with_opener(api, opener)),
            memory_journals: true,
            files: None,
        },
    )
    .map_err(|e| anyhow!("registering the {EXPLORE_VFS} VFS: {e}"))?;
    Ok(())
}

/// Opens the store at `path` (creating it if `create`) through the explorer's VFS.
pub fn open_store(path: &Path, create: bool) -> Result<Connection> {
    register_explore_vfs()?;
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags_and_vfs(path, flags, EXPLORE_VFS)
        .with_context(|| format!("opening {}", path.display()))?;
    conn.busy_timeout(WORKER_BUSY_TIMEOUT)?;
    Ok(conn)
}

/// The URI of the store's second database `aux`.
pub fn aux_uri(path: &Path) -> String {
    format!("file:{}?vfs={EXPLORE_VFS}&db=aux", path.display())
}

/// The plain SQLite file a process attaches as `aux` beside the store at `path`.
pub fn plain_aux_path(path: &Path) -> PathBuf {
    path.with_file_name(PLAIN_AUX_NAME)
}

/// File name of the plain SQLite file of `attach-plain` scenarios.
pub const PLAIN_AUX_NAME: &str = "bank-aux.db";
