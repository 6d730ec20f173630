//! The shipper: a thread per replicated database per process. Every `interval` it tries to
//! take the database's replication lease; the process holding it ships, the others wait
//! (and take over when it exits or dies: the lease is a lock the kernel lets go). With the
//! test hooks, `Config::deterministic` runs no thread: ticks only where a caller asks.
//!
//! A tick, in order (each step's crash analysis beside it):
//! 1. Take the latest snapshot readers are shown, made **durable** first if it is not
//!    (`Store::try_durable_snapshot`: commits made at synchronous=NORMAL or OFF are shown
//!    before their flush): a commit a power cut could still take back is never shipped,
//!    the replica never runs ahead of the store.
//! 2. Without a position in memory (first tick, after a takeover or an error): list the
//!    replica for its newest TXID and read the saved position (`position.rs`). If the save
//!    continues this store's history on this replica, ship from its commit under the next
//!    TXID; else start a new history (a *generation*): every page as the next TXID at
//!    level 0, then a snapshot at level 9. A crash between the two leaves the level-0 file,
//!    which restores the same state.
//! 3. Ship the SQLite pages holding a store page newer than the position's commit, read
//!    at the snapshot, as the next TXID at level 0 (nothing changed: nothing shipped). The
//!    upload is atomic (`ReplicaClient::write`); a failed or uncertain one drops the
//!    position, so the next tick lists the replica again: a file that did land is then
//!    continued (its TXID is the newest), one that did not is written again. Never a gap,
//!    never the same TXID with two contents a restore could both see.
//! 4. Save the position (no flush: an older one is still a lower bound, `position.rs`).
//! 5. Every `snapshot_interval`, a snapshot of the same state at level 9.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use onesync_ltx::client::ReplicaClient;
use onesync_ltx::compact::{compact, CompactionPolicy};
use onesync_ltx::replica::now_ms;
use onesync_store::Store;

use crate::error::Error;
use crate::pages::Database;
use crate::position::{self, Position, StoreIdentity};

/// Whether the defect `which` of `crate::sabotage` is put back in `inner` (negative controls):
/// never without the feature `test-hooks`, where neither the field nor the type exists.
macro_rules! sabotaged {
    ($inner:expr, $which:ident) => {{
        #[cfg(feature = "test-hooks")]
        let on = $inner.sabotage == Some(crate::sabotage::Sabotage::$which);
        #[cfg(not(feature = "test-hooks"))]
        let on = false;
        on
    }};
}

/// Level of the files each shipped batch goes to, and of snapshots (Litestream's).
const LEVEL_BATCH: u32 = 0;
const LEVEL_SNAPSHOT: u32 = 9;
/// How long a close waits for the replica to hold this process's commits.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// While uploads fail, how often the failure is logged again.
const LOG_REPEAT: Duration = Duration::from_secs(60);
/// How far ahead of the clock a deterministic shipper's compaction judges the files
/// (`Config::deterministic`): past every interval and retention Litestream has.
#[cfg(feature = "test-hooks")]
const DETERMINISTIC_CLOCK_AHEAD_MS: i64 = 365 * 24 * 3600 * 1000;

/// How a database is replicated.
#[derive(Debug, Clone)]
pub struct Config {
    /// `file:///dir` or `s3://bucket/prefix?...` (`onesync_ltx::client::open`).
    pub url: String,
    /// How long a commit waits at most, while the replica is up, before its batch ships.
    pub interval: Duration,
    /// How often a full snapshot is written (Litestream's default: a day).
    pub snapshot_interval: Duration,
    /// Compaction into levels 1 and up, and retention (Litestream's defaults), run by the
    /// shipping process after a tick once `compaction_check` has passed.
    pub compaction: CompactionPolicy,
    pub compaction_check: Duration,
    /// Test hooks only (`onesync-lab explore`): no thread. A tick runs only where a caller
    /// asks for one (`wait_shipped`, `ship_now`, the close), a wait that this process
    /// cannot end itself (another holds the lease) fails at once instead of looking again,
    /// and compaction judges every file as if a year had passed since it was written (each
    /// tick merges what level 0 has new, retention deletes all it may). So a process makes
    /// the same calls in every run of the same steps, whatever the clock says.
    #[cfg(feature = "test-hooks")]
    pub deterministic: bool,
}

impl Config {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1000);
    pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(24 * 3600);
    /// A tenth of Litestream's shortest compaction interval (level 1: 30 s).
    pub const DEFAULT_COMPACTION_CHECK: Duration = Duration::from_secs(3);

    pub fn new(url: &str) -> Config {
        Config {
            url: url.to_owned(),
            interval: Config::DEFAULT_INTERVAL,
            snapshot_interval: Config::DEFAULT_SNAPSHOT_INTERVAL,
            compaction: CompactionPolicy::default(),
            compaction_check: Config::DEFAULT_COMPACTION_CHECK,
            #[cfg(feature = "test-hooks")]
            deterministic: false,
        }
    }
}

/// Where replication stands, as this process sees it (`PRAGMA onesync_replicate`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub url: String,
    /// This process holds the lease and ships; else another process does (or none yet).
    pub shipping: bool,
    /// The newest TXID shipped (by whichever process), 0 before the first.
    pub txid: u64,
    /// A commit of the store that TXID holds (every commit up to it is in the replica).
    pub shipped_seq: u64,
    /// Commits of the store durable here and not yet known shipped.
    pub lag_commits: u64,
    /// How long the oldest of them may have waited: since the state last shipped was taken
    /// (in another process: since it last saved its position; 0 when nothing waits).
    pub lag_ms: u64,
    /// The last tick's error, until a tick succeeds.
    pub last_error: Option<String>,
    /// Files and bytes this process uploaded, snapshots among them (compactions not).
    pub files: u64,
    pub bytes: u64,
    pub snapshots: u64,
    /// Files this process merged into higher levels, and deleted by retention.
    pub compacted: u64,
    pub deleted: u64,
}

/// Called with a message for the application's log (the VFS: `sqlite3_log`).
pub type Logger = Arc<dyn Fn(&str) + Send + Sync>;

/// What a tick works on, under one lock (ticks never overlap).
#[derive(Default)]
struct Shipping {
    leased: bool,
    position: Option<Position>,
    last_snapshot_ms: i64,
    last_compaction: Option<Instant>,
    failing_since: Option<Instant>,
    last_logged: Option<Instant>,
}

struct Inner {
    store: Store,
    store_path: PathBuf,
    logical: String,
    lease_key: u64,
    position_path: PathBuf,
    config: Config,
    client: Box<dyn ReplicaClient>,
    log: Logger,
    shipping: Mutex<Shipping>,
    status: Mutex<Status>,
    /// When the state last shipped was taken: apart from `shipping`, which a tick holds
    /// through its upload, so that `status` never waits for one.
    shipped_at: Mutex<Option<Instant>>,
    stopping: Mutex<bool>,
    wake: Condvar,
    /// A defect put back for a negative control (feature `test-hooks` only).
    #[cfg(feature = "test-hooks")]
    sabotage: Option<crate::sabotage::Sabotage>,
}

/// Ships one logical file of a store while it lives.
pub struct Shipper {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain bookkeeping, consistent after every step.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lease key of a logical file: FNV-1a of its name.
fn lease_key(logical: &str) -> u64 {
    logical.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Shipper {
    /// Starts shipping `logical` of `store` (opened read-write from `store_path`) to
    /// `config.url`. A URL that does not parse fails here; an unreachable replica does not
    /// (it is retried, and reported by `status`).
    pub fn start(
        store: Store,
        store_path: &Path,
        logical: &str,
        config: Config,
        log: Logger,
    ) -> Result<Shipper, Error> {
        let client = onesync_ltx::client::open(&config.url)?;
        let inner = Arc::new(Inner {
            store,
            store_path: store_path.to_owned(),
            logical: logical.to_owned(),
            lease_key: lease_key(logical),
            position_path: position::path_for(store_path, logical),
            status: Mutex::new(Status {
                url: client.url(),
                ..Status::default()
            }),
            config,
            client,
            log,
            shipping: Mutex::new(Shipping::default()),
            shipped_at: Mutex::new(None),
            stopping: Mutex::new(false),
            wake: Condvar::new(),
            #[cfg(feature = "test-hooks")]
            sabotage: crate::sabotage::Sabotage::from_env(),
        });
        if inner.deterministic() {
            return Ok(Shipper { inner, thread: None });
        }
        let worker = inner.clone();
        let thread = std::thread::Builder::new()
            .name("onesync-replica".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::Local(format!("starting the replication thread: {e}")))?;
        Ok(Shipper {
            inner,
            thread: Some(thread),
        })
    }

    /// Where replication stands.
    pub fn status(&self) -> Status {
        self.inner.status()
    }

    /// Runs a tick now (besides the thread's): ships what is durable, if this process holds
    /// or can take the lease. Returns whether it does.
    pub fn ship_now(&self) -> Result<bool, Error> {
        self.inner.tick_and_report()
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Synchronous replication: returns once the replica holds commit `seq` (durable in the
    /// store already). In the shipping process it ships now, and waiters share uploads as
    /// committers share flushes: one tick ships every commit durable by then, and a waiter
    /// whose commit it covered returns without one. In another process it waits for the
    /// shipper's saved position, which moves at that process's interval. An upload that
    /// fails is tried again every `interval` until `deadline` (none: until it succeeds).
    pub fn wait_shipped(&self, seq: u64, deadline: Option<Instant>) -> Result<(), Error> {
        if sabotaged!(self.inner, SyncAckBeforeUpload) {
            return Ok(());
        }
        self.wait(seq, deadline)
    }

    /// [`Shipper::wait_shipped`] itself (the close's wait too).
    fn wait(&self, seq: u64, deadline: Option<Instant>) -> Result<(), Error> {
        let retry = self.inner.config.interval.min(Duration::from_millis(100));
        loop {
            if self.inner.status().shipped_seq >= seq {
                return Ok(());
            }
            let outcome = self.inner.tick_and_report();
            if self.inner.status().shipped_seq >= seq {
                return Ok(());
            }
            // Deterministic (test hooks): nothing ships meanwhile but this process's ticks.
            let expired = deadline.is_some_and(|d| Instant::now() >= d) || self.inner.deterministic();
            match outcome {
                Err(e) if expired => return Err(e),
                _ if expired => {
                    return Err(Error::NotShipped(format!(
                        "commit {seq} is not in the replica yet (it holds up to {})",
                        self.inner.status().shipped_seq
                    )))
                }
                // Shipped, but not yet this commit (it is not in the durable state this
                // process sees yet): look again shortly.
                Ok(true) => std::thread::sleep(Duration::from_millis(1)),
                // Another process ships, at its interval.
                Ok(false) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => std::thread::sleep(retry),
            }
        }
    }
}

impl Drop for Shipper {
    /// Stops the thread. While the replica is up, first waits (at most `CLOSE_WAIT`) until
    /// it holds every commit durable here: shipped by this process, or by the one holding
    /// the lease (which may be closing too, its last batch taken before these commits: then
    /// the lease comes free and this process ships them). So a clean close leaves the
    /// replica current. Then lets the lease go.
    fn drop(&mut self) {
        *lock(&self.inner.stopping) = true;
        self.inner.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let healthy = lock(&self.inner.status).last_error.is_none();
        if healthy {
            let durable = self.inner.store.durable_seq();
            let _ = self.wait(durable, Some(Instant::now() + CLOSE_WAIT));
        }
        let mut shipping = lock(&self.inner.shipping);
        if shipping.leased {
            self.inner.store.unlock_replication(self.inner.lease_key);
            shipping.leased = false;
        }
    }
}

impl Inner {
    fn run(&self) {
        loop {
            let _ = self.tick_and_report();
            {
                let stopping = lock(&self.stopping);
                let (stopping, _) = self
                    .wake
                    .wait_timeout_while(stopping, self.config.interval, |s| !*s)
                    .unwrap_or_else(|e| e.into_inner());
                if *stopping {
                    return;
                }
            }
        }
    }

    fn status(&self) -> Status {
        let mut status = lock(&self.status).clone();
        let durable = self.store.durable_seq();
        if !status.shipping || status.shipped_seq == 0 {
            // Another process ships, or this one has not listed the replica yet (it may be
            // unreachable): the saved position says how far shipping got.
            if let Some(saved) = Position::load(&self.position_path) {
                status.txid = saved.txid;
                status.shipped_seq = saved.seq;
            }
        }
        status.lag_commits = durable.saturating_sub(status.shipped_seq);
        status.lag_ms = if status.lag_commits == 0 {
            0
        } else if status.shipping {
            lock(&self.shipped_at).map_or(0, |t| t.elapsed().as_millis() as u64)
        } else {
            // The shipping process saves its position after each upload.
            position::saved_age(&self.position_path).map_or(0, |age| age.as_millis() as u64)
        };
        status
    }

    fn tick_and_report(&self) -> Result<bool, Error> {
        let mut shipping = lock(&self.shipping);
        let result = self.tick(&mut shipping);
        let mut status = lock(&self.status);
        status.shipping = shipping.leased;
        if let Some(p) = &shipping.position {
            status.txid = p.txid;
            status.shipped_seq = p.seq;
        }
        match &result {
            Ok(_) => {
                if let Some(since) = shipping.failing_since.take() {
                    (self.log)(&format!(
                        "onesync: replication of {} to {} recovered after {} s",
                        self.logical,
                        status.url,
                        since.elapsed().as_secs()
                    ));
                }
                shipping.last_logged = None;
                status.last_error = None;
            }
            Err(e) => {
                // Whether the upload landed is unknown: list the replica again next time.
                shipping.position = None;
                let now = Instant::now();
                shipping.failing_since.get_or_insert(now);
                if shipping
                    .last_logged
                    .is_none_or(|t| now.duration_since(t) >= LOG_REPEAT)
                {
                    shipping.last_logged = Some(now);
                    (self.log)(&format!(
                        "onesync: replication of {} to {} is failing (commits go on and ship once it \
                         recovers): {e}",
                        self.logical, status.url
                    ));
                }
                status.last_error = Some(e.to_string());
            }
        }
        result
    }

    /// One tick (the module's steps). Returns whether this process ships.
    fn tick(&self, sh: &mut Shipping) -> Result<bool, Error> {
        if !sh.leased {
            if !self.store.try_lock_replication(self.lease_key)? && !sabotaged!(self, ReplicationLeaseIgnored)
            {
                return Ok(false);
            }
            sh.leased = true;
            sh.position = None;
        }
        // A commit a power cut could still take back never ships (step 1).
        let snap = if sabotaged!(self, ShipsUndurable) {
            self.store.try_latest_snapshot()?
        } else {
            self.store.try_durable_snapshot()?
        };
        let taken_at = Instant::now();
        let timestamp = now_ms();
        let Some(file) = snap.file(&self.logical) else {
            return Ok(true);
        };
        let Some(db) = Database::read(&snap, file)? else {
            return Ok(true);
        };
        let mut position = match sh.position.take() {
            Some(p) if p.page_size == db.page_size => p,
            Some(p) => self.new_generation(sh, &db, p.txid + 1, timestamp)?,
            None => self.establish(sh, &db, timestamp)?,
        };
        if snap.seq() > position.seq {
            let changed = snap.changed_since(file, position.seq)?;
            let pgnos = db.pages_holding(&changed.pages);
            if !pgnos.is_empty() {
                let txid = position.txid + 1;
                self.upload(LEVEL_BATCH, &db.ltx(&pgnos, txid, txid, timestamp)?, false)?;
                position.txid = txid;
            }
            position.seq = snap.seq();
            if !pgnos.is_empty() {
                self.save(&position);
            }
        }
        *lock(&self.shipped_at) = Some(taken_at);
        if timestamp - sh.last_snapshot_ms >= self.config.snapshot_interval.as_millis() as i64 {
            let all = db.all_pages();
            self.upload(LEVEL_SNAPSHOT, &db.ltx(&all, 1, position.txid, timestamp)?, true)?;
            sh.last_snapshot_ms = timestamp;
        }
        sh.position = Some(position);
        if sh
            .last_compaction
            .is_none_or(|t| t.elapsed() >= self.config.compaction_check)
        {
            // After the batch, so a slow compaction never delays one; a failure leaves the
            // replica restorable (a merged file is written before what it covers goes).
            sh.last_compaction = Some(Instant::now());
            let report = compact(
                self.client.as_ref(),
                &self.config.compaction,
                self.compaction_now(),
            )
            .map_err(|e| Error::Compaction(e.to_string()))?;
            let mut status = lock(&self.status);
            status.compacted += report.written.len() as u64;
            status.deleted += report.deleted.len() as u64;
        }
        Ok(true)
    }

    /// The position to ship from after taking the lease: the saved one if it continues this
    /// store's history on this replica, else a new generation.
    fn establish(&self, sh: &mut Shipping, db: &Database, timestamp: i64) -> Result<Position, Error> {
        let newest = onesync_ltx::restore::max_txid(self.client.as_ref())?;
        let identity = StoreIdentity::of(&self.store_path)?;
        let url = self.client.url();
        let Some(newest) = newest else {
            return self.new_generation(sh, db, 1, timestamp);
        };
        match Position::load(&self.position_path) {
            Some(saved)
                if saved.url == url
                    && saved.store == identity
                    && saved.page_size == db.page_size
                    && saved.seq <= db.snap.seq()
                    && saved.txid <= newest.max_txid =>
            {
                // Snapshots: the replica's newest tells when the last was written.
                sh.last_snapshot_ms = self
                    .client
                    .list(LEVEL_SNAPSHOT)?
                    .last()
                    .map_or(0, |f| f.timestamp_ms);
                let txid = if sabotaged!(self, TxidFromPosition) {
                    saved.txid
                } else {
                    newest.max_txid
                };
                Ok(Position { txid, ..saved })
            }
            _ => self.new_generation(sh, db, newest.max_txid + 1, timestamp),
        }
    }

    /// Starts a history at `txid`: every page as that TXID at level 0 (unless it is the
    /// first), so that the level-0 files stay a valid history across the change, then a
    /// snapshot at level 9.
    fn new_generation(
        &self,
        sh: &mut Shipping,
        db: &Database,
        txid: u64,
        timestamp: i64,
    ) -> Result<Position, Error> {
        let all = db.all_pages();
        if txid > 1 {
            self.upload(LEVEL_BATCH, &db.ltx(&all, txid, txid, timestamp)?, false)?;
        }
        self.upload(LEVEL_SNAPSHOT, &db.ltx(&all, 1, txid, timestamp)?, true)?;
        sh.last_snapshot_ms = timestamp;
        let position = Position {
            url: self.client.url(),
            store: StoreIdentity::of(&self.store_path)?,
            page_size: db.page_size,
            txid,
            seq: db.snap.seq(),
        };
        self.save(&position);
        Ok(position)
    }

    /// `Config::deterministic` (test hooks only).
    #[cfg(feature = "test-hooks")]
    fn deterministic(&self) -> bool {
        self.config.deterministic
    }
    #[cfg(not(feature = "test-hooks"))]
    fn deterministic(&self) -> bool {
        false
    }

    /// The time compaction judges the replica's files by.
    fn compaction_now(&self) -> i64 {
        #[cfg(feature = "test-hooks")]
        if self.deterministic() {
            return now_ms() + DETERMINISTIC_CLOCK_AHEAD_MS;
        }
        now_ms()
    }

    fn upload(&self, level: u32, file: &onesync_ltx::LtxFile, snapshot: bool) -> Result<(), Error> {
        let info = self.client.write(level, file)?;
        let mut status = lock(&self.status);
        status.files += 1;
        status.bytes += info.size;
        status.snapshots += u64::from(snapshot);
        Ok(())
    }

    /// Saves the position; a failure only costs pages shipped again later (`position.rs`).
    fn save(&self, position: &Position) {
        let ahead;
        let position = if sabotaged!(self, PositionSavedAhead) {
            ahead = Position {
                seq: self.store.durable_seq(),
                ..position.clone()
            };
            &ahead
        } else {
            position
        };
        if let Err(e) = position.save(&self.position_path) {
            (self.log)(&format!("onesync: {e}"));
        }
    }
}
