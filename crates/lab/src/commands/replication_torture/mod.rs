//! `onesync-lab replication-torture`: issue 43's faults. Writer processes (`writer.rs`: FULL,
//! NORMAL and `concurrent=1`, each replicating the same database to one replica, a
//! directory or with `--s3` a local S3 server) commit one-row transactions; one at a random
//! moment is killed with SIGKILL — the shipping one (the one whose `PRAGMA
//! onesync_replicate` says `shipping`) half the time — and a new writer of its kind takes its
//! place. After each kill (`--check-every`) the replica is checked (`replica_check.rs`): no
//! gap and no duplicate TXID in any level, onesync's restore succeeds, is a consistent prefix
//! and holds every commit a writer reported at or below a `shipped_seq` read before.
//!
//! With `--s3` the server is also stopped now and then for a few kills (`--outage-one-in`),
//! then started again: commits go on, the writers report the lag growing and `last_error`
//! set; after the restart the shipping catches up (the torture waits for a `shipped_seq`
//! past every commit made before the restart) and the replica is checked again.
//!
//! At the end the writers close, a last connection waits for the lag to drain, and the last
//! restore must equal the store (every `log` row and `t`), every restore must have been a
//! prefix of the store's log, every file still there must hold the bytes it held when
//! first seen, and stock `litestream restore` must give the same bytes as ours.
//!
//! Negative controls (`--negative-control`, `onesync-lab-hooked` only): onesync-replica's
//! sabotage (`ONESYNC_REPLICA_SABOTAGE`) in the writers: `replication-lease-ignored` (every
//! writer ships) and `position-saved-ahead`; each must fail.

pub mod replica_check;
pub mod writer;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_ltx::client::ReplicaClient;
use onesync_ltx::testing::{self, S3Server};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::output::{self, Human};
use crate::progress::{log_every, phase_bar};
use replica_check::{read_tables, ReplicaChecker};
use writer::{open_replicated, replicate_status, WriterKind};

pub use writer::{run as run_writer, WriterArgs};

/// How long the lag may take to drain after a restart of the S3 server, or at the end.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegativeControl {
    /// Every writer ships, as if it held the replication lease: must fail
    ReplicationLeaseIgnored,
    /// The saved position names the store's durable commit at the save, past what the
    /// upload shipped: must fail
    PositionSavedAhead,
}

impl NegativeControl {
    fn name(self) -> &'static str {
        match self {
            NegativeControl::ReplicationLeaseIgnored => "replication-lease-ignored",
            NegativeControl::PositionSavedAhead => "position-saved-ahead",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ReplicationTortureArgs {
    /// Kills to perform (each of one writer; a new one takes its place)
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub kills: u64,

    /// Writer processes at once (their kinds in turn: full, normal, concurrent)
    #[arg(long, value_name = "P", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(2..=12))]
    pub writers: u64,

    /// Replicate to a local S3 server (versitygw, built with Go) instead of a directory,
    /// and stop and restart it now and then
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

    /// Shortest and longest time between two kills
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub min_delay_ms: u64,
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub max_delay_ms: u64,

    /// Seed of the victims, delays and outages [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Work in a fresh subdirectory of D (removed afterwards unless a check failed)
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
struct Summary {
    seed: u64,
    replica: &'static str,
    negative_control: Option<&'static str>,
    writers: u64,
    kills_requested: u64,
    kills: u64,
    /// Kills of the writer that last said it was shipping.
    shipper_kills: u64,
    /// Kills of a writer before it said `ready` (opening, taking over).
    kills_before_ready: u64,
    writers_started: u64,
    commits: u64,
    restores_checked: u64,
    /// Listings and restores done again after failing once (`replica_check.rs`).
    checks_retried: u64,
    newest_txid: u64,
    /// Files in the replica at the end, and files hashed over the run.
    files: u64,
    files_hashed: u64,
    outages: u64,
    /// Outages during which a writer reported `last_error` set.
    outages_error_reported: u64,
    commits_during_outages: u64,
    max_lag_commits: u64,
    max_catch_up_ms: u64,
    stock_litestream: String,
    failures: u64,
    first_failure: Option<String>,
    seconds: f64,
}

/// What the writers reported, all of them over the run.
#[derive(Default)]
struct Ledger {
    /// (seq, w, n) of every `committed` line.
    commits: Vec<(u64, u64, u64)>,
    max_seq: u64,
    max_shipped: u64,
    error_reports: u64,
    max_lag: u64,
}

impl Ledger {
    /// The commits at or below `bound`.
    fn shipped(&self, bound: u64) -> Vec<(u64, u64)> {
        self.commits
            .iter()
            .filter(|c| c.0 <= bound)
            .map(|&(_, w, n)| (w, n))
            .collect()
    }
}

/// A writer process with a thread collecting its lines.
struct RunningWriter {
    kind: WriterKind,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    stderr: Option<JoinHandle<String>>,
    ready: bool,
    shipping: bool,
}

impl RunningWriter {
    fn start(
        exe: &Path,
        db: &Path,
        url: &str,
        number: u64,
        kind: WriterKind,
        run: &Run,
    ) -> Result<RunningWriter> {
        let mut command = Command::new(exe);
        command
            .arg("__replica-writer")
            .arg(db)
            .args(["--url", url, "--kind", kind.name()])
            .args(["--writer", &number.to_string()])
            .args(["--interval-ms", &run.interval_ms.to_string()])
            .args(["--seed", &number.wrapping_mul(run.seed | 1).to_string()])
            .envs(run.env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(control) = run.negative_control {
            command.env("ONESYNC_REPLICA_SABOTAGE", control.name());
        }
        let mut child = command.spawn().context("starting a writer")?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("a writer without stdout"))?;
        let mut stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("a writer without stderr"))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let lines = lines.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut line = String::new();
                // A line without its newline was cut by the kill: not a report.
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
                    lines
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(line.trim_end().to_owned());
                    line.clear();
                }
            })
        };
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(RunningWriter {
            kind,
            child,
            stdin,
            lines,
            reader: Some(reader),
            stderr: Some(stderr),
            ready: false,
            shipping: false,
        })
    }

    /// Takes the lines printed since the last call into `ledger`.
    fn drain(&mut self, ledger: &mut Ledger) -> Result<()> {
        let lines = std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()));
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            let num = |i: usize| -> Result<u64> {
                words
                    .get(i)
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(|| anyhow!("a writer printed {line:?}"))
            };
            match words[0] {
                "ready" => self.ready = true,
                "committed" => {
                    let (w, n, seq) = (num(1)?, num(2)?, num(3)?);
                    ledger.commits.push((seq, w, n));
                    ledger.max_seq = ledger.max_seq.max(seq);
                }
                "status" => {
                    self.shipping = num(1)? == 1;
                    ledger.max_shipped = ledger.max_shipped.max(num(2)?);
                    ledger.max_lag = ledger.max_lag.max(num(4)?);
                    ledger.error_reports += num(5)?;
                }
                _ => bail!("a writer printed {line:?}"),
            }
        }
        Ok(())
    }

    /// SIGKILLs it (an error if it had ended by itself) and takes its last lines.
    fn kill(mut self, ledger: &mut Ledger) -> Result<()> {
        let early = self.child.try_wait()?;
        if early.is_none() {
            self.child.kill().context("SIGKILL of a writer")?;
        }
        let status = self.child.wait()?;
        let stderr = self.join_readers();
        self.drain(ledger)?;
        if let Some(status) = early {
            bail!(
                "a {} writer ended by itself ({status}): {}",
                self.kind.name(),
                stderr.trim()
            );
        }
        use std::os::unix::process::ExitStatusExt;
        if status.signal() != Some(libc::SIGKILL) {
            bail!(
                "a {} writer ended with {status}, not by SIGKILL: {}",
                self.kind.name(),
                stderr.trim()
            );
        }
        Ok(())
    }

    /// Waits for the threads reading its output (it has ended); returns its stderr.
    fn join_readers(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.stderr.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }

    /// Asks it to close (its stdin closed) and waits for a clean exit.
    fn close(mut self, ledger: &mut Ledger) -> Result<()> {
        drop(self.stdin.take());
        let deadline = Instant::now() + CATCH_UP_LIMIT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!(
                    "a {} writer did not close within {CATCH_UP_LIMIT:?}",
                    self.kind.name()
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        let stderr = self.join_readers();
        self.drain(ledger)?;
        if !status.success() {
            bail!(
                "a {} writer failed ({status}): {}",
                self.kind.name(),
                stderr.trim()
            );
        }
        Ok(())
    }
}

/// How long an outage lasts at least (besides its 1 to 4 kills): long enough for an upload
/// to fail (the S3 client gives up on an unreachable server within a few seconds).
const OUTAGE_MS: std::ops::RangeInclusive<u64> = 1500..=4000;

/// An S3 outage under way.
struct Outage {
    kills_left: u32,
    at_least: Duration,
    stopped: Instant,
    commits_before: u64,
    errors_before: u64,
}

/// What every writer of a run is started with.
struct Run {
    interval_ms: u64,
    seed: u64,
    env: Vec<(&'static str, String)>,
    negative_control: Option<NegativeControl>,
}

/// Where the replica is, and its server with `--s3`.
struct Replica {
    url: String,
    client: Box<dyn ReplicaClient>,
    server: Option<S3Server>,
    env: Vec<(&'static str, String)>,
}

impl Replica {
    fn open(args: &ReplicationTortureArgs, work: &Path, go_bin: &Path) -> Result<Replica> {
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

pub fn run(args: &ReplicationTortureArgs) -> Result<ExitCode> {
    if args.min_delay_ms > args.max_delay_ms {
        bail!(
            "--min-delay-ms ({}) is larger than --max-delay-ms ({})",
            args.min_delay_ms,
            args.max_delay_ms
        );
    }
    if args.negative_control.is_some() {
        crate::hooks::needs_test_hooks("replication-torture --negative-control")?;
    }
    output::check_json_path(args.json.as_deref())?;
    let exe = std::env::current_exe().context("finding this binary to run the writers")?;
    let go_bin = match &args.go_bin {
        Some(dir) => dir.clone(),
        None => exe
            .parent()
            .and_then(Path::parent)
            .map(|target| target.join("go-bin"))
            .ok_or_else(|| anyhow!("no directory above {}: give --go-bin", exe.display()))?,
    };
    let seed = args.seed.unwrap_or_else(rand::random);
    let work = output::work_dir("onesync-replication-", None, args.dir.as_deref())?;
    let mut replica = Replica::open(args, work.path(), &go_bin)?;
    // The last connection (`finish`) replicates from this process: its S3 client reads the
    // server's credentials from the environment, as the writers' do. No other thread of
    // this process reads the environment yet.
    for (key, value) in &replica.env {
        std::env::set_var(key, value);
    }
    let mut summary = Summary {
        seed,
        replica: if args.s3 { "s3" } else { "file" },
        negative_control: args.negative_control.map(NegativeControl::name),
        writers: args.writers,
        kills_requested: args.kills,
        ..Summary::default()
    };
    eprintln!(
        "replication-torture: {} kills of {} writers (full, normal, concurrent) replicating to {}{}, seed {seed}, in {}",
        args.kills,
        args.writers,
        replica.url,
        args.negative_control
            .map(|c| format!(" with the negative control {}", c.name()))
            .unwrap_or_default(),
        work.path().display()
    );
    let started = Instant::now();
    let outcome = torture(args, &exe, work.path(), &mut replica, seed, &go_bin, &mut summary);
    summary.seconds = started.elapsed().as_secs_f64();
    if let Err(error) = outcome {
        summary.failures += 1;
        summary.first_failure = Some(format!("{error:#}"));
    }
    let report = format!(
        "replication-torture ({} replica{}, {} writers, seed {seed}): {} of {} kills ({} of the \
         shipping writer, {} before ready), {} writers started, {} commits reported; {} restores \
         checked ({} listings or restores done again), newest TXID {}, {} files at the end ({} hashed); {} S3 outage(s) ({} with \
         last_error reported, {} commits during them, lag up to {} commits, caught up within {} \
         ms); stock litestream restore: {}; {} failure(s) in {:.1} s",
        summary.replica,
        summary.negative_control.map(|c| format!(", negative control {c}")).unwrap_or_default(),
        summary.writers,
        summary.kills,
        summary.kills_requested,
        summary.shipper_kills,
        summary.kills_before_ready,
        summary.writers_started,
        summary.commits,
        summary.restores_checked,
        summary.checks_retried,
        summary.newest_txid,
        summary.files,
        summary.files_hashed,
        summary.outages,
        summary.outages_error_reported,
        summary.commits_during_outages,
        summary.max_lag_commits,
        summary.max_catch_up_ms,
        summary.stock_litestream,
        summary.failures,
        summary.seconds
    );
    output::emit(args.json.as_deref(), &summary, &report, Human::Stdout)?;
    if let Some(failure) = &summary.first_failure {
        eprintln!("replication-torture: FAILED: {failure}");
        let kept = work.keep();
        eprintln!(
            "replication-torture: the store and the replica are kept in {}",
            kept.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The kills and checks, then the end.
fn torture(
    args: &ReplicationTortureArgs,
    exe: &Path,
    work: &Path,
    replica: &mut Replica,
    seed: u64,
    go_bin: &Path,
    summary: &mut Summary,
) -> Result<()> {
    let db = work.join("app.onesync");
    let scratch = work.join("restored.db");
    {
        let conn = crate::sqlite::open_onesync(&db, true)?;
        conn.execute_batch(writer::SCHEMA)?;
    }
    let run = Run {
        interval_ms: args.interval_ms,
        seed,
        env: replica.env.clone(),
        negative_control: args.negative_control,
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ledger = Ledger::default();
    let mut checker = ReplicaChecker::default();
    let mut next_writer = 0u64;
    let mut start = |kind: WriterKind, summary: &mut Summary| {
        next_writer += 1;
        summary.writers_started += 1;
        RunningWriter::start(exe, &db, &replica.url, next_writer, kind, &run)
    };
    let mut writers = Vec::new();
    for i in 0..args.writers {
        writers.push(start(WriterKind::ALL[i as usize % 3], summary)?);
    }
    // With --s3: the outage under way.
    let mut outage: Option<Outage> = None;
    let bar = phase_bar("kills", args.kills);
    let log_every = log_every(args.kills);
    let started = Instant::now();
    for kill in 1..=args.kills {
        if let Some(server) = replica.server.as_mut() {
            if outage.is_none() && rng.random_ratio(1, args.outage_one_in.max(1)) {
                server.stop();
                summary.outages += 1;
                outage = Some(Outage {
                    kills_left: rng.random_range(1..=4),
                    at_least: Duration::from_millis(rng.random_range(OUTAGE_MS)),
                    stopped: Instant::now(),
                    commits_before: ledger.commits.len() as u64,
                    errors_before: ledger.error_reports,
                });
            }
        }
        thread::sleep(Duration::from_millis(
            rng.random_range(args.min_delay_ms..=args.max_delay_ms),
        ));
        for w in writers.iter_mut() {
            w.drain(&mut ledger)?;
        }
        let shipping = writers.iter().position(|w| w.shipping);
        let victim = match shipping {
            Some(i) if rng.random_bool(0.5) => i,
            _ => rng.random_range(0..writers.len()),
        };
        let killed = writers.swap_remove(victim);
        let kind = killed.kind;
        summary.shipper_kills += u64::from(killed.shipping);
        summary.kills_before_ready += u64::from(!killed.ready);
        killed.kill(&mut ledger).with_context(|| format!("kill {kill}"))?;
        summary.kills = kill;
        writers.push(start(kind, summary)?);
        if let Some(o) = outage.as_mut() {
            o.kills_left -= 1;
            if o.kills_left == 0 {
                thread::sleep(o.at_least.saturating_sub(o.stopped.elapsed()));
                for w in writers.iter_mut() {
                    w.drain(&mut ledger)?;
                }
                summary.commits_during_outages += ledger.commits.len() as u64 - o.commits_before;
                summary.outages_error_reported += u64::from(ledger.error_reports > o.errors_before);
                outage = None;
                let server = replica.server.as_mut().ok_or_else(|| anyhow!("no server"))?;
                server
                    .start_again()
                    .map_err(|e| anyhow!("starting the S3 server again: {e}"))?;
                let waited = catch_up(&mut writers, &mut ledger)
                    .with_context(|| format!("after the outage ending at kill {kill}"))?;
                summary.max_catch_up_ms = summary.max_catch_up_ms.max(waited.as_millis() as u64);
            }
        }
        if outage.is_none() && kill.is_multiple_of(args.check_every.max(1)) {
            for w in writers.iter_mut() {
                w.drain(&mut ledger)?;
            }
            let shipped = ledger.shipped(ledger.max_shipped);
            checker
                .check_files(replica.client.as_ref())
                .and_then(|_| checker.check_restore(replica.client.as_ref(), &scratch, &shipped))
                .with_context(|| format!("after kill {kill}"))?;
        }
        summary.commits = ledger.commits.len() as u64;
        summary.restores_checked = checker.restores;
        summary.checks_retried = checker.retried;
        summary.newest_txid = checker.newest_txid;
        summary.max_lag_commits = ledger.max_lag;
        bar.inc(1);
        if log_every.is_some_and(|every| kill % every == 0) {
            eprintln!(
                "replication-torture: {kill} of {} kills, {} commits, {} restores checked, TXID {}, {:.0} s",
                args.kills,
                summary.commits,
                checker.restores,
                checker.newest_txid,
                started.elapsed().as_secs_f64()
            );
        }
    }
    bar.finish_and_clear();
    if let Some(server) = replica.server.as_mut() {
        server
            .start_again()
            .map_err(|e| anyhow!("starting the S3 server again: {e}"))?;
    }
    for w in writers {
        w.close(&mut ledger)?;
    }
    summary.commits = ledger.commits.len() as u64;
    finish(&db, &scratch, replica, &ledger, &mut checker, go_bin, summary)
}

/// After an outage: waits until a writer reports a `shipped_seq` past every commit reported
/// so far (the lag drained); returns how long that took.
fn catch_up(writers: &mut [RunningWriter], ledger: &mut Ledger) -> Result<Duration> {
    let began = Instant::now();
    for w in writers.iter_mut() {
        w.drain(ledger)?;
    }
    let target = ledger.max_seq;
    while ledger.max_shipped < target {
        if began.elapsed() > CATCH_UP_LIMIT {
            bail!(
                "the replica did not catch up within {CATCH_UP_LIMIT:?}: shipped_seq {} of {target}",
                ledger.max_shipped
            );
        }
        thread::sleep(Duration::from_millis(20));
        for w in writers.iter_mut() {
            w.drain(ledger)?;
        }
    }
    Ok(began.elapsed())
}

/// The end: every writer closed; a last connection waits for the lag to drain; the replica
/// against the store, and stock Litestream against ours.
fn finish(
    db: &Path,
    scratch: &Path,
    replica: &Replica,
    ledger: &Ledger,
    checker: &mut ReplicaChecker,
    go_bin: &Path,
    summary: &mut Summary,
) -> Result<()> {
    let conn = open_replicated(db, &replica.url, 20, WriterKind::Full)?;
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
    let in_store: std::collections::HashSet<(u64, u64)> = store_log.iter().map(|&(_, w, n)| (w, n)).collect();
    if let Some((seq, w, n)) = ledger
        .commits
        .iter()
        .find(|&&(_, w, n)| !in_store.contains(&(w, n)))
    {
        bail!("commit {w}.{n} (seq {seq}) was reported committed but the store lacks it");
    }
    summary.files = checker
        .check_files(replica.client.as_ref())
        .context("the replica at the end")? as u64;
    let all: Vec<(u64, u64)> = ledger.commits.iter().map(|&(_, w, n)| (w, n)).collect();
    let last = checker
        .check_restore(replica.client.as_ref(), scratch, &all)
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
