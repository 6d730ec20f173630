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
    let factory = onesync_vfs::StoreFactory::with_opener(api, opener);
    // Shipping on the committing thread only, compaction every tick (see
    // `deterministic_shipping`): the same calls in every run.
    #[cfg(feature = "test-hooks")]
    let factory = factory.with_replica_config(Arc::new(deterministic_shipping));
    onesync_vfs::register_with(
        &api,
        onesync_vfs::RegisterOptions {
            name: EXPLORE_VFS.to_owned(),
            make_default: false,
            main_db: Box::new(factory),
            memory_journals: true,
            files: None,
        },
    )
    .map_err(|e| anyhow!("registering the {EXPLORE_VFS} VFS: {e}"))?;
    Ok(())
}

/// The shippers the explorer's VFS starts (`onesync_replicate=URL`): no thread, so that a
/// process ships only where its script makes it (a COMMIT's synchronous wait, a close); a
/// compaction each tick, with one level judged by a clock far ahead (onesync-replica's
/// `Config::deterministic`): each tick merges what level 0 has new into level 1, and
/// retention deletes the level-0 files level 1 covers (the newest kept) and every snapshot
/// but the newest.
#[cfg(feature = "test-hooks")]
fn deterministic_shipping(config: &mut onesync_replica::Config) {
    config.deterministic = true;
    config.compaction_check = Duration::ZERO;
    config.compaction = onesync_ltx::compact::CompactionPolicy {
        level_intervals_ms: vec![30_000],
        ..Default::default()
    };
}

/// The replica directory in a run's directory (`file:///RUN/replica`), and its URL.
pub const REPLICA_DIR: &str = "replica";
pub fn replica_url(run_dir: &Path) -> String {
    format!("file://{}", run_dir.join(REPLICA_DIR).display())
}

/// Opens the store at `path` through the explorer's VFS, replicating to `url`
/// (synchronously: each COMMIT returns once the replica holds it, if `sync`).
pub fn open_replicated(path: &Path, url: &str, sync: bool) -> Result<Connection> {
    register_explore_vfs()?;
    let uri = format!(
        "file:{}?vfs={EXPLORE_VFS}&onesync_replicate={url}&onesync_replicate_sync={}",
        path.display(),
        u8::from(sync)
    );
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&uri, flags).with_context(|| format!("opening {uri}"))?;
    conn.busy_timeout(WORKER_BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Removes the side files (in /dev/shm or /tmp, named after device and inode) of the stores
/// in `dir`: processes killed while sharing a store leave them behind.
pub fn remove_side_files(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let prefix = format!("onesync-{:x}-{:x}-", meta.dev(), meta.ino());
        for side_dir in ["/dev/shm", "/tmp"] {
            let Ok(sides) = std::fs::read_dir(side_dir) else {
                continue;
            };
            for side in sides.flatten() {
                let name = side.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(&prefix) && name.ends_with(".shm") {
                    let _ = std::fs::remove_file(side.path());
                }
            }
        }
    }
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
