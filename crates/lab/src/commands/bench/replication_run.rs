//! One mode of `bench replication` in one round: a fresh database (and with `--fs`, a fresh
//! filesystem), replication started (onesync's shipper by the URI parameter, or a stock
//! Litestream process on a WAL database) and seen shipping, then one-row INSERT
//! transactions from one connection for the run's seconds, then a wait until the last
//! commit is in the replica, then replication stopped and the replica's files counted.
//!
//! Lag, for a sample of the commits (every [`SAMPLE_EVERY`]th and the last), from the moment
//! its COMMIT returned:
//! - onesync: until `PRAGMA onesync_replicate`'s `shipped_seq` (read every [`POLL`] by a
//!   second connection) reaches the commit's store sequence number (`PRAGMA
//!   onesync_commit`): the shipper sets it once the upload holding the commit is
//!   acknowledged;
//! - Litestream: until a level-0 file holding the commit's row appears in the replica
//!   (`replica_watch`, read every [`POLL`]), which is when its upload has landed.
//!
//! The second method also runs on onesync's replicas, as a check of the first.
//!
//! In the synchronous modes (`onesync_replicate_sync=1`) COMMIT returns only once the
//! replica holds the commit, so their lag is zero by construction; what the methods above
//! read there is the polls' delay. What is checked instead: for every sampled commit,
//! `PRAGMA onesync_commit`'s `replicated_seq` read right after COMMIT returned is at or past
//! the commit's seq ([`Acked`]; read in every onesync replicated mode alike).
//!
//! The `-sync-4t` modes run [`GROUP_THREADS`] connections at once (`concurrent=1`, so a
//! commit waiting for the replica holds no lock), one thread each, each inserting into its
//! own table: the commits waiting together share an upload, which `PRAGMA
//! onesync_replicate`'s `files` over the commits shows. Their rows are in several tables,
//! so the replica's files are not read for their lag.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rusqlite::Connection;
use serde_json::Value;

use super::litestream::{Litestream, Replica};
use super::replica_watch::Watcher;
use super::Place;
use crate::schemes::{apply_pragmas, Mode};
use crate::sqlite::{
    check_integrity, commit_point, in_transaction, is_busy, open_onesync_with, set_concurrent,
};
use crate::workloads::{payload, Params, Workload};

/// How often the replica and the shipper's status are read: the lag's resolution.
pub const POLL: Duration = Duration::from_millis(5);
/// One commit in this many is sampled for the lag (its sequence number costs a pragma).
pub const SAMPLE_EVERY: u64 = 8;
/// How long replication gets to start shipping, and to ship the last commit after the run.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a replicated mode ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Dir,
    S3,
}

/// Litestream's `sync-interval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    OneSecond,
    Minimum,
}

/// The smallest `sync-interval` Litestream v0.5.18 accepts: its configuration refuses only
/// a duration that is not above zero (`cmd/litestream/main.go`, `ErrInvalidSyncInterval`),
/// and Go's durations count nanoseconds.
pub const LITESTREAM_MIN_SYNC_INTERVAL: &str = "1ns";

impl Pace {
    pub fn sync_interval(self) -> &'static str {
        match self {
            Pace::OneSecond => "1s",
            Pace::Minimum => LITESTREAM_MIN_SYNC_INTERVAL,
        }
    }
}

/// When a replicated onesync COMMIT returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ship {
    /// Once durable here; the shipper uploads it within its interval.
    Async,
    /// Once the replica holds it too (`onesync_replicate_sync=1`).
    Sync,
    /// As `Sync`, from [`GROUP_THREADS`] connections at once.
    SyncGroup,
}

/// The connections of the `-sync-4t` modes.
pub const GROUP_THREADS: usize = 4;

/// A mode of `bench replication`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplMode {
    /// onesync at synchronous=FULL, not replicated: the onesync modes' baseline.
    Onesync,
    /// onesync at FULL, replicated (`onesync_replicate`), asynchronously or synchronously.
    OnesyncReplicated(Target, Ship),
    /// Stock SQLite's WAL at FULL: the Litestream modes' baseline.
    Wal,
    /// WAL at FULL with a `litestream replicate` process.
    WalLitestream(Pace, Target),
}

impl ReplMode {
    /// Every mode, in the table's order: each baseline before the modes compared with it.
    pub fn all(s3: bool) -> Vec<ReplMode> {
        let mut modes = vec![ReplMode::Onesync];
        for target in [Target::Dir, Target::S3] {
            if target == Target::Dir || s3 {
                for ship in [Ship::Async, Ship::Sync, Ship::SyncGroup] {
                    modes.push(ReplMode::OnesyncReplicated(target, ship));
                }
            }
        }
        modes.push(ReplMode::Wal);
        for target in [Target::Dir, Target::S3] {
            if target == Target::Dir || s3 {
                for pace in [Pace::OneSecond, Pace::Minimum] {
                    modes.push(ReplMode::WalLitestream(pace, target));
                }
            }
        }
        modes
    }

    pub fn name(self) -> String {
        let target = |t: Target| match t {
            Target::Dir => "",
            Target::S3 => "-s3",
        };
        match self {
            ReplMode::Onesync => "onesync".to_owned(),
            ReplMode::OnesyncReplicated(t, ship) => format!(
                "onesync+{}{}",
                match t {
                    Target::Dir => "dir",
                    Target::S3 => "s3",
                },
                match ship {
                    Ship::Async => "",
                    Ship::Sync => "-sync",
                    Ship::SyncGroup => "-sync-4t",
                }
            ),
            ReplMode::Wal => "wal".to_owned(),
            ReplMode::WalLitestream(Pace::OneSecond, t) => format!("wal+litestream-1s{}", target(t)),
            ReplMode::WalLitestream(Pace::Minimum, t) => format!("wal+litestream-min{}", target(t)),
        }
    }

    /// The mode its ratios are taken against.
    pub fn baseline(self) -> ReplMode {
        match self {
            ReplMode::Onesync | ReplMode::OnesyncReplicated(..) => ReplMode::Onesync,
            ReplMode::Wal | ReplMode::WalLitestream(..) => ReplMode::Wal,
        }
    }

    /// Whether COMMIT waits for the replica (`onesync_replicate_sync=1`).
    pub fn is_sync(self) -> bool {
        matches!(self, ReplMode::OnesyncReplicated(_, Ship::Sync | Ship::SyncGroup))
    }

    /// The writing connections: [`GROUP_THREADS`] in the `-sync-4t` modes, else one.
    pub fn threads(self) -> usize {
        match self {
            ReplMode::OnesyncReplicated(_, Ship::SyncGroup) => GROUP_THREADS,
            _ => 1,
        }
    }

    pub fn target(self) -> Option<Target> {
        match self {
            ReplMode::OnesyncReplicated(t, _) | ReplMode::WalLitestream(_, t) => Some(t),
            ReplMode::Onesync | ReplMode::Wal => None,
        }
    }

    /// The lab's scheme the database is opened with (its pragmas: synchronous=FULL, WAL).
    fn scheme_mode(self) -> Mode {
        match self {
            ReplMode::Onesync | ReplMode::OnesyncReplicated(..) => Mode::Onesync,
            ReplMode::Wal | ReplMode::WalLitestream(..) => Mode::Wal,
        }
    }
}

/// What one run needs besides its mode.
pub struct RunSetup<'a> {
    pub seconds: f64,
    /// `onesync_replicate_interval_ms`.
    pub interval_ms: u64,
    pub place: &'a Place,
    pub litestream: Option<&'a Path>,
    pub s3: Option<&'a onesync_ltx::testing::S3Server>,
    /// Names the run's S3 prefix (unique in the run).
    pub label: String,
}

/// The lags of the sampled commits, and how many never shipped within the wait.
#[derive(Debug, Clone, Default)]
pub struct Lags {
    pub lags: Vec<Duration>,
    pub unshipped: u64,
}

/// Of the sampled commits with a sequence number, how many the replica held when COMMIT
/// returned (`replicated_seq` read right after it at or past the commit's seq).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Acked {
    pub sampled: u64,
    pub acked: u64,
}

/// What reached the replica.
#[derive(Debug, Clone, Default)]
pub struct Uploaded {
    /// Every LTX file that appeared under the replica's root during and after the run, at
    /// any level, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// (level, files, bytes).
    pub by_level: Vec<(u32, u64, u64)>,
    /// onesync: `PRAGMA onesync_replicate`'s own count of the bytes this process uploaded
    /// (snapshots included, compactions not).
    pub pragma_bytes: Option<u64>,
    /// onesync: its count of the files uploaded during the timed run (one per upload).
    pub pragma_files: Option<u64>,
    pub last_error: Option<String>,
}

/// One run's measurements.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub commits: u64,
    pub seconds: f64,
    pub latencies: Vec<Duration>,
    /// The mode's lag (see the module's comment); `None` unreplicated.
    pub lags: Option<Lags>,
    /// The lag by the replica's files, for onesync's replicated modes (a check of `lags`).
    pub file_lags: Option<Lags>,
    pub uploaded: Option<Uploaded>,
    /// onesync's replicated modes: the sampled commits in the replica at COMMIT's return.
    pub acked: Option<Acked>,
    /// The filesystem the database was on, when the lab knows it by name.
    pub fs: Option<&'static str>,
}

/// A sampled commit: its row, its store sequence number and how far the replica held the
/// database right after COMMIT returned (onesync), when COMMIT returned.
struct Sample {
    rowid: i64,
    seq: Option<u64>,
    replicated: Option<u64>,
    at: Instant,
}

/// What the observer thread has seen.
struct Observed {
    watcher: Watcher,
    /// (when read, `shipped_seq`), each time it rose.
    shipped: Vec<(Instant, u64)>,
    status: Option<Value>,
}

/// `?`, `&` and `%` of a replica URL escaped for a SQLite URI's query.
fn uri_escape(url: &str) -> String {
    url.replace('%', "%25").replace('?', "%3F").replace('&', "%26")
}

fn replicate_status(conn: &Connection) -> Result<Value> {
    let json: String = conn
        .query_row("PRAGMA onesync_replicate", [], |r| r.get(0))
        .context("PRAGMA onesync_replicate")?;
    serde_json::from_str(&json).with_context(|| format!("parsing PRAGMA onesync_replicate: {json}"))
}

/// Each sample's lag: until the first observation at or past its key.
fn lags_by<K: Ord + Copy>(samples: impl Iterator<Item = (K, Instant)>, seen: &[(Instant, K)]) -> Lags {
    let mut out = Lags::default();
    for (key, at) in samples {
        let first = seen.partition_point(|&(_, k)| k < key);
        match seen.get(first) {
            // Seen before our clock read after COMMIT: no measurable lag.
            Some(&(t, _)) => out.lags.push(t.saturating_duration_since(at)),
            None => out.unshipped += 1,
        }
    }
    out
}

/// Runs `mode` once.
pub fn run(mode: ReplMode, setup: &RunSetup, progress: &dyn Fn(String)) -> Result<RunOutcome> {
    // Declared first so it is unmounted after the work directory is gone.
    let loop_fs = setup.place.loop_fs()?;
    let work = setup.place.work_dir("onesync-repl-", loop_fs.as_ref())?;
    // The replica, Litestream's configuration and log: off the measured filesystem.
    let aux = tempfile::Builder::new()
        .prefix("onesync-repl-replica-")
        .tempdir()
        .context("making the replica's directory")?;
    let replica_dir = aux.path().join("replica");
    let prefix = format!("{}-{}", setup.label, std::process::id());
    let replica = match mode.target() {
        Some(Target::S3) => Some(Replica::S3 {
            server: setup.s3.ok_or_else(|| anyhow!("{}: no S3 server", mode.name()))?,
            prefix: &prefix,
        }),
        Some(Target::Dir) => Some(Replica::Dir(&replica_dir)),
        None => None,
    };
    let scheme = mode.scheme_mode().scheme();
    let db = work.path().join(scheme.database_file("bench"));
    let onesync_replicated = matches!(mode, ReplMode::OnesyncReplicated(..));
    let parameters = match (&replica, onesync_replicated) {
        (Some(r), true) => format!(
            "onesync_replicate={}&onesync_replicate_interval_ms={}{}",
            uri_escape(&r.url()),
            setup.interval_ms,
            if mode.is_sync() {
                "&onesync_replicate_sync=1"
            } else {
                ""
            }
        ),
        _ => String::new(),
    };
    let open = || -> Result<Connection> {
        if onesync_replicated {
            let conn = open_onesync_with(&db, true, &parameters)?;
            apply_pragmas(&conn, scheme.pragmas())?;
            Ok(conn)
        } else {
            scheme.open(&db)
        }
    };
    let conn = open()?;
    let workload = Workload::Insert.transactions(Params {
        pages: 1,
        searches_per_write: 0.0,
        table: 0,
    });
    let mut rng = SmallRng::seed_from_u64(1);
    in_transaction(&conn, || -> Result<()> {
        workload.set_up(&conn, 0, &mut rng)?;
        for i in 1..mode.threads() {
            conn.execute_batch(&format!(
                "CREATE TABLE {}(id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
                group_table(i)
            ))?;
        }
        Ok(())
    })?;
    let mut group = (1..mode.threads())
        .map(|_| {
            let conn = open()?;
            set_concurrent(&conn)?;
            Ok(conn)
        })
        .collect::<Result<Vec<_>>>()?;
    let single = group.is_empty();
    if !single {
        set_concurrent(&conn)?;
    }
    let mut litestream = match (mode, &replica) {
        (ReplMode::WalLitestream(pace, _), Some(r)) => {
            let bin = setup
                .litestream
                .ok_or_else(|| anyhow!("{}: no litestream", mode.name()))?;
            Some(Litestream::start(bin, aux.path(), &db, r, pace.sync_interval())?)
        }
        _ => None,
    };
    let sampler = if onesync_replicated { Some(open()?) } else { None };
    let observed = Mutex::new(Observed {
        watcher: Watcher::new(&replica.as_ref().map_or(replica_dir.clone(), Replica::root)),
        shipped: Vec::new(),
        status: None,
    });
    let stop = AtomicBool::new(false);
    let replicated = replica.is_some();
    let lock = || observed.lock().unwrap_or_else(|e| e.into_inner());

    let mut files_before = None;
    let (samples, latencies, seconds) = std::thread::scope(|scope| -> Result<_> {
        // The sampler connection moves into the thread (a connection is not shared between
        // threads) and closes there, before the writer's.
        let (stop, lock) = (&stop, &lock);
        let observer = scope.spawn(move || -> Result<()> {
            while replicated && !stop.load(Ordering::Relaxed) {
                let status = sampler.as_ref().map(replicate_status).transpose()?;
                let mut seen = lock();
                seen.watcher.poll();
                if let Some(status) = status {
                    let shipped = status["shipped_seq"].as_u64().unwrap_or(0);
                    if seen.shipped.last().is_none_or(|&(_, s)| s < shipped) {
                        seen.shipped.push((Instant::now(), shipped));
                    }
                    seen.status = Some(status);
                }
                drop(seen);
                std::thread::sleep(POLL);
            }
            Ok(())
        });
        let outcome = (|| -> Result<_> {
            if replicated {
                progress(format!("{}: waiting for the first upload", mode.name()));
                wait_until(START_TIMEOUT, &mut litestream, || {
                    let seen = lock();
                    seen.watcher.any_file() && (!onesync_replicated || !seen.shipped.is_empty())
                })
                .context("replication did not start shipping")?;
            }
            // What setup and earlier modes left dirty is written back now, not during the run.
            nix::unistd::sync();
            files_before = lock().status.as_ref().and_then(|s| s["files"].as_u64());
            progress(format!("{}: {} s of one-row inserts", mode.name(), setup.seconds));
            let timed = if single {
                measure(&conn, setup.seconds, onesync_replicated, |n| {
                    workload.run(&conn, n, &mut rng)
                })?
            } else {
                measure_group(&conn, std::mem::take(&mut group), setup.seconds)?
            };
            if replicated {
                let last = timed.0.last().ok_or_else(|| anyhow!("no commit in the run"))?;
                // Several tables' rowids say nothing of each other: the group's by seq only.
                let rowid = single.then_some(last.rowid);
                let seq = timed.0.iter().filter_map(|s| s.seq).max();
                progress(format!("{}: waiting for the last commit to ship", mode.name()));
                // Late shipping shows as lag; a timeout leaves the rest unshipped.
                let _ = wait_until(CATCH_UP_TIMEOUT, &mut litestream, || {
                    let seen = lock();
                    let by_seq = seq.is_none_or(|s| seen.shipped.last().is_some_and(|&(_, x)| x >= s));
                    by_seq && rowid.is_none_or(|rowid| seen.watcher.max_rowid().is_some_and(|r| r >= rowid))
                });
            }
            Ok(timed)
        })();
        stop.store(true, Ordering::Relaxed);
        observer
            .join()
            .map_err(|_| anyhow!("the replication observer panicked"))??;
        outcome
    })?;
    let commits = latencies.len() as u64;
    check_integrity(&conn)?;
    let Observed {
        mut watcher,
        shipped,
        status,
    } = observed.into_inner().unwrap_or_else(|e| e.into_inner());
    // Stopping ships once more (the shipper at the store's close, Litestream at SIGTERM):
    // counted too, as what replicating this run uploaded.
    drop(conn);
    if let Some(litestream) = litestream.take() {
        litestream.stop()?;
    }
    let acked = onesync_replicated.then(|| {
        let mut acked = Acked::default();
        for s in &samples {
            if let Some(seq) = s.seq {
                acked.sampled += 1;
                acked.acked += u64::from(s.replicated.is_some_and(|r| r >= seq));
            }
        }
        acked
    });
    let (lags, file_lags, uploaded) = if replicated {
        watcher.poll();
        let by_rowid = lags_by(samples.iter().map(|s| (s.rowid, s.at)), watcher.rowid_times());
        let (files, bytes) = watcher.totals();
        let uploaded = Uploaded {
            files,
            bytes,
            by_level: watcher
                .by_level()
                .into_iter()
                .map(|(level, (f, b))| (level, f, b))
                .collect(),
            pragma_bytes: status.as_ref().and_then(|s| s["bytes"].as_u64()),
            pragma_files: status
                .as_ref()
                .and_then(|s| s["files"].as_u64())
                .map(|after| after.saturating_sub(files_before.unwrap_or(0))),
            last_error: status
                .as_ref()
                .and_then(|s| s["last_error"].as_str().map(str::to_owned)),
        };
        if onesync_replicated {
            let by_seq = lags_by(samples.iter().filter_map(|s| Some((s.seq?, s.at))), &shipped);
            let by_rowid = single.then_some(by_rowid);
            (Some(by_seq), by_rowid, Some(uploaded))
        } else {
            (Some(by_rowid), None, Some(uploaded))
        }
    } else {
        (None, None, None)
    };
    Ok(RunOutcome {
        commits,
        seconds,
        latencies,
        lags,
        file_lags,
        uploaded,
        acked,
        fs: match &loop_fs {
            Some(l) => Some(l.kind().name()),
            None => crate::loopfs::fs_name_of(work.path()),
        },
    })
}

/// Waits until `done`, checking that Litestream (if any) still runs.
fn wait_until(timeout: Duration, litestream: &mut Option<Litestream>, done: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return Ok(());
        }
        if let Some(l) = litestream.as_mut() {
            l.check_running()?;
        }
        if Instant::now() > deadline {
            bail!("not within {} s", timeout.as_secs());
        }
        std::thread::sleep(POLL);
    }
}

/// What a timed run gives: its samples, every commit's latency, its length in seconds.
type Timed = (Vec<Sample>, Vec<Duration>, f64);

/// The timed run on one connection: `transaction(n)` for `seconds`; every commit's latency,
/// a sample of them (with their sequence numbers when `seqs`) and the run's length.
fn measure(
    conn: &Connection,
    seconds: f64,
    seqs: bool,
    mut transaction: impl FnMut(u64) -> Result<()>,
) -> Result<Timed> {
    let length = Duration::from_secs_f64(seconds);
    let mut samples = Vec::new();
    let mut latencies = Vec::new();
    let started = Instant::now();
    let mut n = 0u64;
    loop {
        let begun = Instant::now();
        transaction(n).with_context(|| format!("transaction {n}"))?;
        let at = Instant::now();
        latencies.push(at - begun);
        let last = at - started >= length;
        if n.is_multiple_of(SAMPLE_EVERY) || last {
            let point = if seqs { Some(commit_point(conn)?) } else { None };
            samples.push(Sample {
                rowid: conn.last_insert_rowid(),
                seq: point.and_then(|p| p.seq),
                replicated: point.and_then(|p| p.replicated_seq),
                at,
            });
        }
        n += 1;
        if last {
            return Ok((samples, latencies, (at - started).as_secs_f64()));
        }
    }
}

/// The table the `i`th connection of a group inserts into: the first the workload's own.
fn group_table(i: usize) -> String {
    if i == 0 {
        "item".to_owned()
    } else {
        format!("item_{i}")
    }
}

/// The timed run of a group: `conn` on this thread and each of `others` on its own (all
/// `concurrent=1`), from one moment, each inserting one row per transaction into its own
/// table, and running again a transaction refused as busy (a concurrent commit's conflict;
/// its latency runs from the first try). The connections' samples and latencies together;
/// the length the longest's.
fn measure_group(conn: &Connection, others: Vec<Connection>, seconds: f64) -> Result<Timed> {
    let start = Barrier::new(others.len() + 1);
    let start = &start;
    let one = move |i: usize, conn: &Connection| -> Result<Timed> {
        let mut rng = SmallRng::seed_from_u64(1 + i as u64);
        let insert = format!("INSERT INTO {}(v) VALUES (?1)", group_table(i));
        start.wait();
        measure(conn, seconds, true, |_| {
            let row = payload(&mut rng);
            let first = Instant::now();
            loop {
                let tried = (|| {
                    conn.prepare_cached("BEGIN")?.execute([])?;
                    conn.prepare_cached(&insert)?.execute([&row])?;
                    conn.prepare_cached("COMMIT")?.execute([])
                })();
                match tried {
                    Ok(_) => return Ok(()),
                    Err(e) if is_busy(&e) && first.elapsed() < CATCH_UP_TIMEOUT => {
                        if !conn.is_autocommit() {
                            conn.execute_batch("ROLLBACK")?;
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .with_context(|| format!("connection {i} of the group"))
    };
    let runs = std::thread::scope(|scope| {
        let threads: Vec<_> = others
            .into_iter()
            .enumerate()
            .map(|(i, other)| scope.spawn(move || one(i + 1, &other)))
            .collect();
        let mut runs = vec![one(0, conn)];
        for t in threads {
            runs.push(t.join().map_err(|_| anyhow!("a writer thread panicked"))?);
        }
        runs.into_iter().collect::<Result<Vec<Timed>>>()
    })?;
    let mut all: Timed = (Vec::new(), Vec::new(), 0.0);
    for (samples, latencies, seconds) in runs {
        all.0.extend(samples);
        all.1.extend(latencies);
        all.2 = all.2.max(seconds);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_lags_until_the_first_observation_that_covers_it() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let seen = [(ms(10), 3u64), (ms(25), 7)];
        let lags = lags_by(
            [(2, ms(1)), (3, ms(2)), (5, ms(20)), (8, ms(21))].into_iter(),
            &seen,
        );
        assert_eq!(
            lags.lags,
            [
                Duration::from_millis(9),
                Duration::from_millis(8),
                Duration::from_millis(5)
            ]
        );
        assert_eq!(lags.unshipped, 1);
    }

    #[test]
    fn every_baseline_comes_before_the_modes_compared_with_it() {
        let modes = ReplMode::all(true);
        assert_eq!(modes.len(), 12);
        for (i, m) in modes.iter().enumerate() {
            let base = modes.iter().position(|b| *b == m.baseline()).unwrap();
            assert!(base <= i, "{}", m.name());
        }
        let names: Vec<String> = ReplMode::all(false).iter().map(|m| m.name()).collect();
        assert_eq!(
            names,
            [
                "onesync",
                "onesync+dir",
                "onesync+dir-sync",
                "onesync+dir-sync-4t",
                "wal",
                "wal+litestream-1s",
                "wal+litestream-min"
            ]
        );
    }
}
