//! `onesync-lab vfs-kill-torture`: a child process runs bank transfers through SQLite and is
//! killed with SIGKILL at random moments; after each kill the parent opens the database and
//! checks that `integrity_check` is ok, money is conserved, every balance agrees with the
//! ledger, and every transfer the child reported committed (printed after COMMIT returned) is
//! in the ledger.
//!
//! The child is this binary in a hidden mode (`onesync-lab __transfer-child DB`), so it runs the
//! same onesync VFS, statically registered in rusqlite's bundled SQLite.
//!
//! What SIGKILL can and cannot show. A killed process loses only what it held in its own
//! memory: everything it passed to `write` is in the kernel's page cache and reaches the file
//! whatever happens to the process. So SIGKILL tests the VFS's and the store's in-process
//! state (a commit acknowledged before its record was written, a half-written commit the next
//! open must skip, locks and recovery after an abrupt exit), but not the ordering of writes
//! against flushes. In particular stock SQLite with `journal_mode=OFF` and `synchronous=OFF`
//! loses nothing to SIGKILL alone, because each transaction's pages are all written (to the
//! page cache) before COMMIT returns, and a kill in the middle of those writes is rare.
//! Losing data in that mode takes a power cut, which drops the page cache; that is a
//! different torture (a simulated disk that forgets unflushed writes). The negative control
//! here is therefore a child whose *transfers* are not atomic (`--child
//! plain-split-transfers`: debit, credit and ledger row in three autocommit transactions on
//! the default VFS); a kill between them breaks conservation and the harness must say so.
//!
//! With `--concurrent` every child connection is opened with `concurrent=1` (the onesync
//! children only): the processes' write transactions run at once, a COMMIT that conflicts
//! fails with SQLITE_BUSY_SNAPSHOT, and the child runs the same transfer (same id) again; it
//! prints `retried ID SNAPSHOT BUSY` before `committed ID` when a transfer needed reruns.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::commands::torture::deferred::Ack;
use crate::output::{self, Human};
use crate::progress::{log_every, phase_bar};
use crate::schemes::{DeferredFlush, Mode, Scheme, Storage};
use crate::sqlite::{open_plain, retry_while_busy, BUSY_RETRY_PAUSE};
use crate::workloads::bank;

/// The child's line after its setup transaction committed.
pub const READY_LINE: &str = "ready";
/// Prefix of the child's line after a transfer's COMMIT returned: `committed ID`, and for a
/// deferred child (onesync at NORMAL or OFF) `committed ID SEQ DURABLE_SEQ` from `PRAGMA
/// onesync_commit` right after.
pub const COMMITTED_PREFIX: &str = "committed ";
/// Prefix of a concurrent child's line before `committed ID` when the transfer ran more
/// than once: `retried ID SNAPSHOT BUSY`, its attempts refused with SQLITE_BUSY_SNAPSHOT and
/// with another busy code.
pub const RETRIED_PREFIX: &str = "retried ";
/// At synchronous=OFF a child runs `PRAGMA onesync_flush` after one transfer in this many
/// (nothing else makes its commits durable between checkpoints).
pub const OFF_FLUSH_ONE_IN: u32 = 10;
/// A child not killed by then stops by itself (it should never get there).
const CHILD_MAX_RUNTIME: Duration = Duration::from_secs(120);

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChildKind {
    /// Each transfer is one transaction through the onesync VFS (the store): must survive
    Onesync,
    /// onesync at synchronous=NORMAL (COMMIT returns before the flush): must survive a kill
    OnesyncNormal,
    /// onesync at synchronous=OFF, with PRAGMA onesync_flush now and then: must survive a kill
    OnesyncOff,
    /// Negative control, must FAIL: the default VFS with each transfer split into three
    /// autocommit transactions (debit; credit; ledger row)
    PlainSplitTransfers,
    /// Stock SQLite, rollback journal (journal_mode=DELETE), through the lab's counting shim
    Delete,
    /// Stock SQLite, journal_mode=TRUNCATE
    Truncate,
    /// Stock SQLite, journal_mode=PERSIST
    Persist,
    /// Stock SQLite, journal_mode=WAL
    Wal,
    /// Stock SQLite, journal_mode=MEMORY (not crash-safe; SIGKILL alone rarely shows it)
    Memory,
    /// Stock SQLite, journal_mode=OFF (not crash-safe; SIGKILL alone rarely shows it)
    Off,
    /// The onesync-f2fs VFS (F2FS atomic writes; needs F2FS)
    Maw,
    /// The bundled SQLite's batch atomic writes (atomic on F2FS only)
    BatchAtomic,
}

impl ChildKind {
    /// Its name on the command line.
    pub fn arg(self) -> String {
        self.to_possible_value()
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The commit scheme of the same name this child runs each transfer on (none for the
    /// split-transfer control, which runs on the default VFS).
    fn scheme(self) -> Option<&'static dyn Scheme> {
        Mode::by_name(&self.arg()).map(Mode::scheme)
    }

    pub fn database_name(self) -> &'static str {
        match self.scheme().map(|scheme| scheme.storage()) {
            Some(Storage::Store) => "bank.onesync",
            Some(Storage::PlainFile) => "bank-stock.db",
            None => "bank-plain.db",
        }
    }

    /// What makes this child's commits durable later if they are shown first (onesync at
    /// NORMAL or OFF), with `synchronous` instead of the scheme's own level if given.
    pub fn deferred_flush(self, synchronous: Option<Synchronous>) -> Option<DeferredFlush> {
        let scheme = self.scheme()?;
        match synchronous {
            _ if scheme.storage() != Storage::Store => None,
            None => scheme.deferred_flush(),
            Some(Synchronous::Normal) => Some(DeferredFlush::Background),
            Some(Synchronous::Off) => Some(DeferredFlush::OnDemand),
            Some(Synchronous::Full | Synchronous::Extra) => None,
        }
    }

    /// The child that runs `mode`.
    pub fn for_mode(mode: Mode) -> ChildKind {
        let child = mode.scheme().kill_child();
        ChildKind::from_str(child, false)
            .unwrap_or_else(|_| unreachable!("scheme {} names an unknown child {child}", mode.name()))
    }

    /// [`ChildKind::open_with`], its write transactions concurrent if `concurrent`
    /// (concurrent writers; a onesync store only).
    pub fn open_for_child(
        self,
        path: &Path,
        synchronous: Option<Synchronous>,
        concurrent: bool,
    ) -> Result<Connection> {
        if concurrent {
            self.concurrent_scheme()?;
        }
        let conn = self.open_with(path, synchronous)?;
        if concurrent {
            crate::sqlite::set_concurrent(&conn)?;
        }
        Ok(conn)
    }

    /// The scheme of a child that can run `--concurrent`: a onesync store's.
    pub fn concurrent_scheme(self) -> Result<&'static dyn Scheme> {
        self.scheme()
            .filter(|scheme| scheme.storage() == Storage::Store)
            .ok_or_else(|| {
                anyhow!(
                    "--concurrent needs a onesync child (onesync, onesync-normal, onesync-off), not {}",
                    self.arg()
                )
            })
    }

    /// [`ChildKind::open`], with `synchronous` instead of the scheme's own level if given.
    pub fn open_with(self, path: &Path, synchronous: Option<Synchronous>) -> Result<Connection> {
        let conn = self.open(path)?;
        if let Some(level) = synchronous {
            level.apply(&conn)?;
        }
        Ok(conn)
    }

    fn open(self, path: &Path) -> Result<Connection> {
        // synchronous=FULL comes with the scheme's pragmas.
        if let Some(scheme) = self.scheme() {
            return scheme.open(path);
        }
        let conn = open_plain(path, OpenFlags::default())?;
        conn.execute_batch("PRAGMA synchronous = FULL")?;
        Ok(conn)
    }
}

#[derive(clap::Args, Debug)]
pub struct KillTortureArgs {
    /// Kills to perform (each on a fresh child process, same database)
    #[arg(long, value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub kills: u64,

    /// Seed of the kill delays and transfers [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Work in a fresh subdirectory of D (removed afterwards unless a check failed)
    /// [default: a fresh temporary directory]
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,

    /// What the child runs
    #[arg(long, value_enum, default_value_t = ChildKind::Onesync)]
    pub child: ChildKind,

    /// Threads in the child, each with its own connection
    #[arg(long, value_name = "T", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,

    /// Child processes running at once on the same database, each killed at its own random
    /// moment (so some die while others go on)
    #[arg(long, value_name = "P", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=16))]
    pub processes: u64,

    /// Open every child connection with concurrent=1 (concurrent writers; onesync children
    /// only): a transfer whose COMMIT fails with SQLITE_BUSY_SNAPSHOT runs again, same id
    #[arg(long)]
    pub concurrent: bool,

    /// Shortest time between starting a child and killing it
    #[arg(long, value_name = "MS", default_value_t = 1)]
    pub min_delay_ms: u64,

    /// Longest time between starting a child and killing it
    #[arg(long, value_name = "MS", default_value_t = 80)]
    pub max_delay_ms: u64,

    /// Write the summary as one JSON object to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,

    /// Print the report on stderr (when another command owns stdout)
    #[arg(skip)]
    pub report_to_stderr: bool,
}

#[derive(clap::Args, Debug)]
pub struct TransferChildArgs {
    /// The database
    pub db: PathBuf,
    #[arg(long, value_enum, default_value_t = ChildKind::Onesync)]
    pub child: ChildKind,
    #[arg(long, default_value_t = 1)]
    pub threads: u64,
    /// Number of this child among the kills: makes its transfer ids unique
    #[arg(long, default_value_t = 0)]
    pub run: u64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Overrides the scheme's PRAGMA synchronous
    #[arg(long, value_enum)]
    pub synchronous: Option<Synchronous>,
    /// Open the connections with concurrent=1 (see `vfs-kill-torture --concurrent`)
    #[arg(long)]
    pub concurrent: bool,
}

/// A level of `PRAGMA synchronous`, to run a scheme with another than its own.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    Off,
    Normal,
    Full,
    /// FULL, and in journal_mode=DELETE the directory is synced after the journal is
    /// deleted (the commit point)
    Extra,
}

impl Synchronous {
    pub fn name(self) -> &'static str {
        match self {
            Synchronous::Off => "off",
            Synchronous::Normal => "normal",
            Synchronous::Full => "full",
            Synchronous::Extra => "extra",
        }
    }

    /// Sets it on `conn` (after the scheme's own pragmas, which it overrides).
    pub fn apply(self, conn: &Connection) -> Result<()> {
        conn.execute_batch(&format!("PRAGMA synchronous={}", self.name()))
            .with_context(|| format!("PRAGMA synchronous={}", self.name()))
    }
}

#[derive(Serialize, Debug, Default)]
struct Summary {
    child: Option<ChildKind>,
    seed: u64,
    threads: u64,
    processes: u64,
    concurrent: bool,
    kills_requested: u64,
    kills_done: u64,
    /// Killed before it reported its setup committed (during start-up, open, recovery).
    kills_before_ready: u64,
    /// Killed while running transfers.
    kills_during_transfers: u64,
    transfers_reported: u64,
    /// Concurrent children: reported transfers that ran more than once, and their attempts
    /// refused with SQLITE_BUSY_SNAPSHOT (a conflict) or another busy code.
    transfers_retried: u64,
    busy_snapshot_retries: u64,
    busy_retries: u64,
    ledger_rows: u64,
    failures: u64,
    first_failure: Option<String>,
    seconds: f64,
}

pub fn run(args: &KillTortureArgs) -> Result<ExitCode> {
    Ok(if passes(args)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the torture (printing its report); whether every check passed.
pub fn passes(args: &KillTortureArgs) -> Result<bool> {
    if args.min_delay_ms > args.max_delay_ms {
        bail!(
            "--min-delay-ms ({}) is larger than --max-delay-ms ({})",
            args.min_delay_ms,
            args.max_delay_ms
        );
    }
    if args.concurrent {
        args.child.concurrent_scheme()?;
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let work = output::work_dir("onesync-kill-", None, args.dir.as_deref())?;
    let db = work.path().join(args.child.database_name());
    let exe = std::env::current_exe().context("finding the onesync binary to run as the child")?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut summary = Summary {
        child: Some(args.child),
        seed,
        threads: args.threads,
        processes: args.processes,
        concurrent: args.concurrent,
        kills_requested: args.kills,
        ..Summary::default()
    };
    eprintln!(
        "vfs-kill-torture: {} kills of {} {} child process(es) ({} thread(s) each{}), seed {seed}, in {}",
        args.kills,
        args.processes,
        args.child.arg(),
        args.threads,
        if args.concurrent { ", concurrent=1" } else { "" },
        work.path().display()
    );
    let started = Instant::now();
    // The database is created and funded before the first child: a kill while the store file
    // is being created leaves a file that no longer opens (a store bug, see the ignored test
    // `killed_while_creating_the_store_leaves_an_openable_or_absent_file`), which would end
    // every run at its first short delay instead of testing transfers.
    {
        let conn = args.child.open(&db)?;
        retry_while_busy(BUSY_RETRY_PAUSE, || bank::set_up(&conn))
            .context("creating and funding the bank")?;
    }
    let mut setup_reported = true;
    let mut reported: Vec<String> = Vec::new();
    let bar = phase_bar("kills", args.kills);
    let log_every = log_every(args.kills);
    for run in 1..=args.kills {
        let delays: Vec<Duration> = (0..args.processes)
            .map(|_| Duration::from_millis(rng.random_range(args.min_delay_ms..=args.max_delay_ms)))
            .collect();
        let delay = delays.iter().max().copied().unwrap_or_default();
        let outcome = kill_round(&exe, &db, args, run, &mut rng, &delays).and_then(|lines| {
            setup_reported |= lines.ready;
            if lines.ready || !lines.committed.is_empty() {
                summary.kills_during_transfers += 1;
            } else {
                summary.kills_before_ready += 1;
            }
            summary.transfers_reported += lines.committed.len() as u64;
            summary.transfers_retried += lines.transfers_retried;
            summary.busy_snapshot_retries += lines.busy_snapshot_retries;
            summary.busy_retries += lines.busy_retries;
            reported.extend(lines.committed);
            let conn = args.child.open(&db)?;
            let audit = bank::audit(&conn, setup_reported, &reported)?;
            summary.ledger_rows = audit.ledger_rows;
            Ok(())
        });
        summary.kills_done = run;
        bar.inc(1);
        if log_every.is_some_and(|every| run % every == 0) {
            eprintln!(
                "vfs-kill-torture: {run} of {} kills, {} transfers reported committed, {:.0} s",
                args.kills,
                summary.transfers_reported,
                started.elapsed().as_secs_f64()
            );
        }
        if let Err(error) = outcome {
            summary.failures += 1;
            summary.first_failure = Some(format!("kill {run} (after {delay:?}): {error:#}"));
            break;
        }
    }
    bar.finish_and_clear();
    summary.seconds = started.elapsed().as_secs_f64();

    let kept = summary.failures > 0;
    let retried = if args.concurrent {
        format!(
            " ({} of them rerun: {} attempts refused with SQLITE_BUSY_SNAPSHOT, {} with \
             another busy code)",
            summary.transfers_retried, summary.busy_snapshot_retries, summary.busy_retries
        )
    } else {
        String::new()
    };
    let report = format!(
        "vfs-kill-torture ({} child{}, {} process(es) of {} thread(s), seed {seed}): {} of {} \
         kills, {} before the child was ready, {} during transfers; {} transfers reported \
         committed{retried}, {} ledger rows; {} failure(s) in {:.1} s",
        args.child.arg(),
        if args.concurrent { ", concurrent=1" } else { "" },
        args.processes,
        args.threads,
        summary.kills_done,
        summary.kills_requested,
        summary.kills_before_ready,
        summary.kills_during_transfers,
        summary.transfers_reported,
        summary.ledger_rows,
        summary.failures,
        summary.seconds
    );
    let human = if args.report_to_stderr {
        Human::Stderr
    } else {
        Human::Stdout
    };
    output::emit(args.json.as_deref(), &summary, &report, human)?;
    if let Some(failure) = &summary.first_failure {
        let kept_at = work.keep();
        eprintln!("vfs-kill-torture: FAILED at {failure}");
        eprintln!("vfs-kill-torture: the database is kept in {}", kept_at.display());
    }
    Ok(!kept)
}

/// What one killed child printed.
#[derive(Default)]
pub struct ChildLines {
    pub ready: bool,
    pub committed: Vec<String>,
    /// A deferred child's acknowledged transfers with their seq (when its line arrived).
    pub acks: Vec<Ack>,
    /// The largest `durable_seq` a deferred child reported.
    pub durable_seen: u64,
    /// A concurrent child's `retried` lines: the transfers, and their attempts refused with
    /// SQLITE_BUSY_SNAPSHOT and with another busy code.
    pub transfers_retried: u64,
    pub busy_snapshot_retries: u64,
    pub busy_retries: u64,
}

/// Start one child per entry of `delays` on the same database, kill each after its delay
/// (the others go on meanwhile), and gather what they all reported.
fn kill_round(
    exe: &Path,
    db: &Path,
    args: &KillTortureArgs,
    run: u64,
    rng: &mut SmallRng,
    delays: &[Duration],
) -> Result<ChildLines> {
    let started = Instant::now();
    let mut children = Vec::new();
    for (k, delay) in delays.iter().enumerate() {
        // Transfer ids carry the run number: one per child process.
        let child_run = run * 64 + k as u64;
        children.push((
            *delay,
            RunningChild::spawn(exe, db, args, child_run, rng.random())?,
        ));
    }
    children.sort_by_key(|(delay, _)| *delay);
    let mut all = ChildLines::default();
    let mut first_error = None;
    for (delay, child) in children {
        thread::sleep(delay.saturating_sub(started.elapsed()));
        match child.kill_and_read() {
            Ok(lines) => {
                all.ready |= lines.ready;
                all.committed.extend(lines.committed);
                all.transfers_retried += lines.transfers_retried;
                all.busy_snapshot_retries += lines.busy_snapshot_retries;
                all.busy_retries += lines.busy_retries;
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(all),
    }
}

/// A child process running transfers, with threads collecting its output.
pub struct RunningChild {
    child: std::process::Child,
    /// Each whole line with the moment it arrived.
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    stdout_reader: thread::JoinHandle<()>,
    stderr_reader: thread::JoinHandle<String>,
}

impl RunningChild {
    fn spawn(exe: &Path, db: &Path, args: &KillTortureArgs, run: u64, seed: u64) -> Result<RunningChild> {
        let mut command = Command::new(exe);
        command
            .arg("__transfer-child")
            .arg(db)
            .args(["--child", &args.child.arg()])
            .args(["--threads", &args.threads.to_string()])
            .args(["--run", &run.to_string(), "--seed", &seed.to_string()]);
        if args.concurrent {
            command.arg("--concurrent");
        }
        RunningChild::start(command)
    }

    /// Starts `command` (a child that prints `ready` and `committed ID` lines) with its
    /// output collected.
    pub fn start(mut command: Command) -> Result<RunningChild> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {:?}", command.get_program()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("child has no stdout"))?;
        let mut stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("child has no stderr"))?;
        let lines = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
        let stdout_reader = {
            let lines = lines.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut line = String::new();
                // A line without its newline was cut by the kill: not a report.
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
                    lines
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), line.trim_end().to_owned()));
                    line.clear();
                }
            })
        };
        let stderr_reader = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(RunningChild {
            child,
            lines,
            stdout_reader,
            stderr_reader,
        })
    }

    /// Whether the child has ended (by itself: nothing here kills it).
    pub fn has_exited(&mut self) -> Result<bool> {
        Ok(self.child.try_wait()?.is_some())
    }

    /// SIGKILLs the child if it is still running, and returns what it printed and, if it
    /// had ended by itself, how and what it said on stderr (after a power cut a child ends
    /// by itself on an I/O error, which is not a failure).
    pub fn stop_and_read(self) -> Result<(ChildLines, Option<String>)> {
        let ended = self.end()?;
        let early = ended
            .exited_early
            .map(|status| format!("{status}; its stderr: {}", ended.stderr_text.trim()));
        Ok((ended.lines, early))
    }

    /// SIGKILLs the child (an error if it had already ended) and returns what it printed.
    pub fn kill_and_read(self) -> Result<ChildLines> {
        let ended = self.end()?;
        let stderr_text = ended.stderr_text.trim();
        if let Some(early) = ended.exited_early {
            bail!("the child exited by itself ({early}) before the kill; its stderr: {stderr_text}");
        }
        ended.kill_result.context("sending SIGKILL to the child")?;
        if !killed_by_sigkill(&ended.status) {
            bail!(
                "the child ended with {}, not by SIGKILL; its stderr: {stderr_text}",
                ended.status
            );
        }
        Ok(ended.lines)
    }

    /// SIGKILLs the child unless it has already ended, waits for it and its output.
    fn end(self) -> Result<EndedChild> {
        let RunningChild {
            mut child,
            lines,
            stdout_reader,
            stderr_reader,
        } = self;
        let exited_early = child.try_wait()?;
        // It may end between the check and the kill: then the kill finds nothing to kill.
        let kill_result = match exited_early {
            None => child.kill(),
            Some(_) => Ok(()),
        };
        let status = child.wait()?;
        let _ = stdout_reader.join();
        let stderr_text = stderr_reader.join().unwrap_or_default();
        Ok(EndedChild {
            exited_early,
            kill_result,
            status,
            stderr_text,
            lines: parse_child_lines(&lines)?,
        })
    }
}

/// A transfer child after [`RunningChild::end`].
struct EndedChild {
    /// How it ended, if it had ended by itself before the kill.
    exited_early: Option<std::process::ExitStatus>,
    kill_result: std::io::Result<()>,
    status: std::process::ExitStatus,
    stderr_text: String,
    lines: ChildLines,
}

fn parse_child_lines(lines: &Mutex<Vec<(Instant, String)>>) -> Result<ChildLines> {
    let lines = std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
    let mut parsed = ChildLines::default();
    for (at, line) in lines {
        let unexpected = || anyhow!("the child printed an unexpected line: {line:?}");
        if line == READY_LINE {
            parsed.ready = true;
        } else if let Some(rest) = line.strip_prefix(COMMITTED_PREFIX) {
            let mut words = rest.split(' ');
            let id = words.next().filter(|id| !id.is_empty()).ok_or_else(unexpected)?;
            let numbers: Vec<u64> = words
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|_| unexpected())?;
            match numbers[..] {
                [] => {}
                [seq, durable_seq] => {
                    parsed.acks.push(Ack {
                        id: id.to_owned(),
                        seq: Some(seq),
                        at,
                    });
                    parsed.durable_seen = parsed.durable_seen.max(durable_seq);
                }
                _ => return Err(unexpected()),
            }
            parsed.committed.push(id.to_owned());
        } else if let Some(rest) = line.strip_prefix(RETRIED_PREFIX) {
            let numbers: Vec<u64> = rest
                .split(' ')
                .skip(1)
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|_| unexpected())?;
            let [snapshot, busy] = numbers[..] else {
                return Err(unexpected());
            };
            parsed.transfers_retried += 1;
            parsed.busy_snapshot_retries += snapshot;
            parsed.busy_retries += busy;
        } else {
            return Err(unexpected());
        }
    }
    Ok(parsed)
}

fn killed_by_sigkill(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

/// The child: set up the bank, print `ready`, then run transfers on `threads` connections,
/// printing `committed ID` after each COMMIT returns, until killed.
pub fn run_child(args: &TransferChildArgs) -> Result<()> {
    let setup = args
        .child
        .open_for_child(&args.db, args.synchronous, args.concurrent)?;
    retry_while_busy(BUSY_RETRY_PAUSE, || bank::set_up(&setup)).context("setting up the bank")?;
    print_line(READY_LINE)?;
    let started = Instant::now();
    let workers: Vec<_> = (0..args.threads)
        .map(|thread_no| {
            let args_db = args.db.clone();
            let kind = args.child;
            let synchronous = args.synchronous;
            let concurrent = args.concurrent;
            let deferred = kind.deferred_flush(synchronous);
            let run = args.run;
            let seed = args.seed ^ thread_no.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            thread::spawn(move || -> Result<()> {
                let conn = kind.open_for_child(&args_db, synchronous, concurrent)?;
                let mut rng = SmallRng::seed_from_u64(seed);
                for n in 0.. {
                    if started.elapsed() > CHILD_MAX_RUNTIME {
                        break;
                    }
                    let id = format!("{run}.{thread_no}.{n}");
                    let (from, to, amount) = bank::random_transfer(&mut rng);
                    let retries = match kind {
                        // Each of its three statements retries on its own.
                        ChildKind::PlainSplitTransfers => {
                            bank::transfer_in_three_commits(&conn, &id, from, to, amount)
                                .map(|()| bank::Retries::default())
                        }
                        // A concurrent writer's COMMIT that conflicted (SQLITE_BUSY_SNAPSHOT)
                        // was rolled back: the same transfer runs again, as after SQLITE_BUSY.
                        _ if concurrent => bank::transfer_retrying(
                            &conn,
                            &id,
                            (from, to, amount),
                            u32::MAX,
                            BUSY_RETRY_PAUSE,
                        ),
                        // A failed attempt rolled back: the whole transfer may run again.
                        _ => retry_while_busy(BUSY_RETRY_PAUSE, || {
                            bank::transfer_atomically(&conn, &id, from, to, amount)
                        })
                        .map(|()| bank::Retries::default()),
                    }
                    .with_context(|| format!("transfer {id}"))?;
                    if retries.total() > 0 {
                        print_line(&format!(
                            "{RETRIED_PREFIX}{id} {} {}",
                            retries.busy_snapshot, retries.busy
                        ))?;
                    }
                    let Some(flush) = deferred else {
                        print_line(&format!("{COMMITTED_PREFIX}{id}"))?;
                        continue;
                    };
                    let point = crate::sqlite::commit_point(&conn)?;
                    let seq = point.seq.ok_or_else(|| {
                        anyhow!("PRAGMA onesync_commit names no commit after transfer {id}")
                    })?;
                    print_line(&format!("{COMMITTED_PREFIX}{id} {seq} {}", point.durable_seq))?;
                    // After the line: a flush that fails (a power cut) must not keep the
                    // transfer from being reported.
                    if flush == DeferredFlush::OnDemand && rng.random_ratio(1, OFF_FLUSH_ONE_IN) {
                        crate::sqlite::onesync_flush(&conn)?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker
            .join()
            .map_err(|_| anyhow!("a transfer thread panicked"))??;
    }
    Ok(())
}

/// One whole line to stdout, flushed, so the parent sees it even if the next instant is a kill.
pub fn print_line(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .context("writing to stdout (the parent has gone?)")
}
