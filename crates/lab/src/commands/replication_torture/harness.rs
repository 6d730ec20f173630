//! What both kinds of `replication-torture` run share: the arguments, the summary, the
//! replica (a directory, or a local S3 server) and the end of a run ([`finish`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_device::Preset;
use onesync_ltx::client::ReplicaClient;
use onesync_ltx::testing::{self, S3Server};
use serde::Serialize;

use super::ledger::Ledger;
use super::replica_check::{read_tables, ReplicaChecker};
use super::writer::{open_replicated, replicate_status, WriterKind, SYNC_TIMEOUT_MS};
use crate::commands::kernel_torture::CutTotals;
use crate::loopfs::FsKind;

/// How long the lag may take to drain after a restart of the S3 server, or at the end.
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegativeControl {
    /// Every writer ships, as if it held the replication lease: must fail
    ReplicationLeaseIgnored,
    /// The saved position names the store's durable commit at the save, past what the
    /// upload shipped: must fail
    PositionSavedAhead,
    /// The shipper ships the latest written state, commits a power cut can take back among
    /// it (with --power-cuts): must fail
    ShipsUndurable,
    /// A sync writer's wait for the replica returns before the upload: must fail
    SyncAckBeforeUpload,
}

impl ReplicationTortureArgs {
    /// The shortest and longest delay (`--min-delay-ms`, `--max-delay-ms`): between kills,
    /// or from the writers' start to a cut.
    pub fn delays(&self) -> Result<(u64, u64)> {
        let (min, max) = if self.power_cuts.is_some() {
            (100, 1000)
        } else {
            (10, 300)
        };
        let (min, max) = (self.min_delay_ms.unwrap_or(min), self.max_delay_ms.unwrap_or(max));
        if min > max {
            bail!("--min-delay-ms ({min}) is larger than --max-delay-ms ({max})");
        }
        Ok((min, max))
    }
}

impl NegativeControl {
    pub fn name(self) -> &'static str {
        match self {
            NegativeControl::ReplicationLeaseIgnored => "replication-lease-ignored",
            NegativeControl::PositionSavedAhead => "position-saved-ahead",
            NegativeControl::ShipsUndurable => "ships-undurable",
            NegativeControl::SyncAckBeforeUpload => "sync-ack-before-upload",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ReplicationTortureArgs {
    /// Kills to perform (each of one writer; a new one takes its place)
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub kills: u64,

    /// Power cuts instead of kills: the store on a real filesystem on an emulated device
    /// (--fs, --emulate; needs root, FUSE and loop devices), its power cut at a random moment
    /// between --min-delay-ms and --max-delay-ms after the writers start
    #[arg(long, value_name = "N", conflicts_with = "kills",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub power_cuts: Option<u64>,

    /// With --power-cuts: simulate the cuts instead, from the store's write log (every
    /// writer killed at once; the writes not yet flushed lost, kept or torn;
    /// onesync-lab-hooked only, no root needed)
    #[arg(long, requires = "power_cuts")]
    pub simulated: bool,

    /// With --power-cuts: the filesystem the store lives on
    #[arg(long, value_enum, default_value_t = FsKind::Ext4)]
    pub fs: FsKind,

    /// With --power-cuts: the emulated device under it
    #[arg(long, value_enum, value_name = "PRESET", default_value_t = Preset::Nvme)]
    pub emulate: Preset,

    /// Writer processes at once (their kinds in turn from --kinds)
    #[arg(long, value_name = "P", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(2..=12))]
    pub writers: u64,

    /// The writers' kinds, given in turn
    #[arg(long, value_enum, value_name = "KIND,...", value_delimiter = ',',
          default_values_t = WriterKind::ALL)]
    pub kinds: Vec<WriterKind>,

    /// A sync writer's onesync_replicate_sync_timeout_ms
    #[arg(long, value_name = "MS", default_value_t = SYNC_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sync_timeout_ms: u64,

    /// The NORMAL writers' onesync_sync_interval_ms: how long their commits may wait for a
    /// flush (the store's default is 20 ms; a FULL commit of any writer flushes them sooner)
    #[arg(long, value_name = "MS")]
    pub sync_interval_ms: Option<u64>,

    /// Replicate to a local S3 server (versitygw, built with Go) instead of a directory,
    /// and (with --kills) stop and restart it now and then
    #[arg(long)]
    pub s3: bool,

    /// With --s3: before a kill, stop the server with a chance of one in this many (it stays
    /// down for 1 to 4 kills)
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub outage_one_in: u32,

    /// Check the replica after every this many kills
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub check_every: u64,

    /// The writers' onesync_replicate_interval_ms
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub interval_ms: u64,

    /// Shortest and longest time between two kills [default: 10 and 300]; with
    /// --power-cuts, from the writers' start to the cut [default: 100 and 1000]
    #[arg(long, value_name = "MS")]
    pub min_delay_ms: Option<u64>,
    #[arg(long, value_name = "MS")]
    pub max_delay_ms: Option<u64>,

    /// Seed of the victims, delays, outages and cuts [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Work in a fresh subdirectory of D (removed afterwards unless a check failed; with
    /// --power-cuts the store is on the emulated device's filesystem and D holds the rest)
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,

    /// Where the Go programs (stock Litestream, versitygw) are built and kept [default:
    /// `go-bin` beside the directory of this binary, i.e. $CARGO_TARGET_DIR/go-bin]
    #[arg(long, value_name = "D")]
    pub go_bin: Option<PathBuf>,

    /// Run a negative control instead: it must fail (onesync-lab-hooked only)
    #[arg(long, value_enum)]
    pub negative_control: Option<NegativeControl>,

    /// Write the summary as one JSON object to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug, Default)]
pub struct Summary {
    pub seed: u64,
    pub replica: &'static str,
    pub negative_control: Option<&'static str>,
    pub writers: u64,
    pub kinds: Vec<&'static str>,
    pub kills_requested: u64,
    pub kills: u64,
    /// Kills of the writer that last said it was shipping.
    pub shipper_kills: u64,
    /// Kills of a writer before it said `ready` (opening, taking over).
    pub kills_before_ready: u64,
    pub writers_started: u64,
    /// Commits reported (COMMIT returned), of every kind (a sync writer's acknowledged or
    /// not), less those of NORMAL writers a power cut took back.
    pub commits: u64,
    /// Sync writers' commits: acknowledged by the replica, returned past the timeout
    /// without it, and COMMITs refused (with the extended codes seen; not those failing on
    /// a device whose power is cut).
    pub sync_acked: u64,
    pub sync_unacked: u64,
    pub sync_refused: u64,
    pub sync_refusal_codes: Vec<i32>,
    pub restores_checked: u64,
    /// Listings and restores done again after failing once (`replica_check.rs`).
    pub checks_retried: u64,
    pub newest_txid: u64,
    /// Files in the replica at the end, and files hashed over the run.
    pub files: u64,
    pub files_hashed: u64,
    pub outages: u64,
    /// Outages during which a writer reported `last_error` set.
    pub outages_error_reported: u64,
    pub commits_during_outages: u64,
    /// COMMITs of sync writers refused during outages.
    pub refusals_during_outages: u64,
    pub max_lag_commits: u64,
    pub max_catch_up_ms: u64,
    pub stock_litestream: String,
    /// With --power-cuts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cuts: Option<CutSummary>,
    pub failures: u64,
    pub first_failure: Option<String>,
    pub seconds: f64,
}

impl Summary {
    /// The sync writers' figures from `ledger`.
    pub fn count_sync(&mut self, ledger: &Ledger) {
        self.sync_acked = ledger.acked();
        self.sync_unacked = ledger.unacked();
        self.sync_refused = ledger.settled_refusals();
        self.sync_refusal_codes = ledger.refusal_codes();
    }
}

/// The power cuts' figures.
#[derive(Serialize, Debug, Default)]
pub struct CutSummary {
    /// "kernel" (an emulated device's power) or "write-log" (simulated).
    pub via: &'static str,
    /// Where the store lived.
    pub medium: String,
    pub power_cuts_requested: u64,
    pub power_cuts: u64,
    /// Cuts made as soon as the replica's newest TXID grew (after the delay), and those
    /// whose wait for an upload ran out (then made at its end).
    pub cuts_after_upload: u64,
    pub upload_waits_timed_out: u64,
    /// Checked in the recovered store after the cuts: commits whose COMMIT had returned
    /// durable (FULL, concurrent, sync), all of them each time.
    pub durable_commits_checked: u64,
    /// Required in the restores after the cuts: commits reported at or below a
    /// `shipped_seq`, and commits sync writers had acknowledged (at the last cut).
    pub shipped_commits_checked: u64,
    pub sync_acks_checked: u64,
    /// NORMAL writers' commits the cuts took back (never in the replica).
    pub normal_commits_lost: u64,
    /// The largest number of log rows the replica's restore lacked of the recovered store.
    pub max_replica_behind_rows: u64,
    pub writers_ended_by_io_error: u64,
    pub fsck_complaints: u64,
    pub lazy_unmounts: u64,
    /// kernel: what the cuts did to the device's cached writes; write-log: to the writes
    /// not yet flushed (`cached` counts them).
    pub cached_writes: CutTotals,
    /// write-log: the position file after a cut kept, put back as it was at the round's
    /// start, removed, or left empty (it is saved without a flush of its own).
    pub position_fates: [u64; 4],
    pub seconds_per_cut: f64,
}

/// Where the replica is, and its server with `--s3`.
pub struct Replica {
    pub url: String,
    pub client: Box<dyn ReplicaClient>,
    pub server: Option<S3Server>,
    pub env: Vec<(&'static str, String)>,
}

impl Replica {
    pub fn open(args: &ReplicationTortureArgs, work: &Path, go_bin: &Path) -> Result<Replica> {
        if !args.s3 {
            let dir = work.join("replica");
            let url = format!("file://{}", dir.display());
            return Ok(Replica {
                client: onesync_ltx::client::open(&url)?,
                url,
                server: None,
                env: Vec::new(),
            });
        }
        let server = S3Server::start(go_bin).map_err(|e| anyhow!("--s3 needs versitygw: {e}"))?;
        server.create_bucket("bkt");
        Ok(Replica {
            url: server.url("bkt", "app"),
            client: Box::new(server.client("bkt", "app")?),
            env: server.env(),
            server: Some(server),
        })
    }
}

/// The end: every writer closed; a last connection waits for the lag to drain; the replica
/// against the store, and stock Litestream against ours.
pub fn finish(
    db: &Path,
    scratch: &Path,
    replica: &Replica,
    ledger: &Ledger,
    checker: &mut ReplicaChecker,
    go_bin: &Path,
    summary: &mut Summary,
) -> Result<()> {
    let conn = open_replicated(db, &replica.url, 20, WriterKind::Full, SYNC_TIMEOUT_MS, None)?;
    let began = Instant::now();
    loop {
        let status = replicate_status(&conn)?;
        if status.shipping && status.lag_commits == 0 && status.last_error.is_none() {
            break;
        }
        if began.elapsed() > CATCH_UP_LIMIT {
            bail!("at the end, the lag did not drain within {CATCH_UP_LIMIT:?}: {status:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let (store_t, store_log) = read_tables(&conn).context("the store at the end")?;
    drop(conn);
    let in_store: HashSet<(u64, u64)> = store_log.iter().map(|&(_, w, n)| (w, n)).collect();
    if let Some(c) = ledger.commits.iter().find(|c| !in_store.contains(&(c.w, c.n))) {
        bail!(
            "commit {}.{} (seq {}) was reported committed by a {} writer but the store lacks it",
            c.w,
            c.n,
            c.seq,
            c.kind.name()
        );
    }
    let expect = ledger.expect(u64::MAX);
    if let Some((w, n)) = expect.refused_in(&in_store) {
        bail!("a sync writer's COMMIT of {w}.{n} was refused (nothing written) but the store holds it");
    }
    summary.files = checker
        .check_files(replica.client.as_ref())
        .context("the replica at the end")? as u64;
    let last = checker
        .check_restore(replica.client.as_ref(), scratch, &expect)
        .context("the last restore")?;
    if last.log != store_log || last.t != store_t {
        bail!(
            "the last restore (TXID {}, {} log rows) differs from the store ({} log rows)",
            last.txid,
            last.log.len(),
            store_log.len()
        );
    }
    checker.check_prefixes(&store_log)?;
    checker.recheck_contents(replica.client.as_ref())?;
    summary.restores_checked = checker.restores;
    summary.checks_retried = checker.retried;
    summary.newest_txid = checker.newest_txid;
    summary.files_hashed = checker.files_hashed;
    summary.stock_litestream = match testing::litestream_command(go_bin) {
        Err(why) => format!("not run ({why})"),
        Ok(litestream) => {
            let out = scratch.with_extension("stock.db");
            let run = Command::new(litestream)
                .args(["restore", "-o"])
                .arg(&out)
                .arg(&replica.url)
                .envs(replica.env.iter().map(|(k, v)| (*k, v)))
                .env_remove("AWS_CA_BUNDLE")
                .output()
                .context("running litestream restore")?;
            if !run.status.success() {
                bail!("{}", testing::show("stock litestream restore", &run));
            }
            if std::fs::read(&out)? != last.bytes {
                bail!("stock litestream restore differs from ours at TXID {}", last.txid);
            }
            "equal to ours".to_owned()
        }
    };
    Ok(())
}
