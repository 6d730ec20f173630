//! `onesync-lab explore`: the crash-point explorer (issue 14).
//!
//! Scenarios of one to three processes ([`scenario`]) run scripted SQLite transactions
//! (bank transfers) through the onesync VFS. One chosen process is stopped at its k-th
//! write, flush, lock, rename, link or unlink call, for every k (strace fault injection on
//! the real kernel: [`trace`]), and the contract is checked ([`check`]) after a process
//! crash at that instant and after power cuts at that instant ([`iolog`]: the store's
//! write log, `ONESYNC_IO_LOG`, replayed over the file as it was before the run, with the
//! writes not yet flushed lost, kept or torn).
//!
//! Concurrent writers (`onesync_concurrent`) hold write transactions open across each
//! other's steps (`begin` ... `commit`); the second COMMIT of an overlapping pair conflicts
//! (SQLITE_BUSY_SNAPSHOT) and its transfer runs again, with the same id.
//!
//! The store is opened through the explorer's own registration of the onesync VFS
//! (`onesync-explore`): the same code with small store options (a checkpoint every
//! [`CHECKPOINT_INTERVAL`] commits, a small file growing in small steps), so that a short
//! script crosses checkpoints, window changes and growth.

pub mod check;
mod crash_files;
pub mod iolog;
pub mod run;
pub mod scenario;
pub mod store;
pub mod trace;
pub mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use self::check::{Clause, Expect, Violation};
use self::crash_files::CrashFiles;
use self::iolog::{Fate, Log};
use self::run::{Outcome, Setup};
use self::scenario::{Backend, NegativeControl, Scenario, Sync};
pub use self::store::{
    aux_uri, explore_options, open_store, plain_aux_path, register_explore_vfs, CHECKPOINT_INTERVAL,
    INTERVAL_ENV, MAX_GROWTH_STEP_ENV, ROLLED_BACK_MARK, SPILL_MARK, SPILL_ROWS, WORKER_BUSY_TIMEOUT,
};
use crate::output::{self, Human};
use crate::progress::{phase_bar, phase_spinner};
use crate::workloads::bank;

/// Failing runs whose directories are kept for inspection.
const KEEP_FAILED_RUNS: usize = 10;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PowerCuts {
    /// Process crashes only
    None,
    /// At each crash point also: unflushed writes all lost, all kept, and two random
    /// lost/kept/torn draws
    Some,
    /// As `some`, plus every in-order prefix of the unflushed writes and eight random draws
    All,
}

#[derive(clap::Args, Debug)]
pub struct ExploreArgs {
    /// Scenarios to explore (comma-separated names, or all); --list shows them
    #[arg(long, value_name = "NAME|all", value_delimiter = ',', default_value = "all")]
    pub scenario: Vec<String>,

    /// Crash points per stopped process at most, spread evenly over its calls (0: every
    /// call)
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub budget: usize,

    /// Power cuts checked at each crash point
    #[arg(long, value_enum, default_value_t = PowerCuts::Some)]
    pub power_cuts: PowerCuts,

    /// Seed of the transfers and of the power cuts' draws [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Run the whole exploration this many times, with seeds S, S+1, ... (other transfers,
    /// other power-cut draws)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,

    /// Crash points run at once [default: the number of CPUs]
    #[arg(long, value_name = "J")]
    pub jobs: Option<usize>,

    /// Run a negative control instead (it must fail; exit status 0 only if it does)
    #[arg(long, value_enum, conflicts_with = "scenario")]
    pub negative_control: Option<NegativeControl>,

    /// After a power cut require every acknowledged transfer, also of processes with
    /// synchronous=NORMAL or OFF (whose commits are durable only once a flush covers them:
    /// by default only those are required). With NORMAL or OFF scenarios this must fail.
    #[arg(long)]
    pub strict_sync: bool,

    /// Work in a fresh subdirectory of D [default: the system's temporary directory]
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,

    /// Keep every run's directory (database, write log, strace output, workers' stderr)
    #[arg(long)]
    pub keep: bool,

    /// List the scenarios and exit
    #[arg(long)]
    pub list: bool,

    /// Write the summary as one JSON object to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

/// One broken promise at one crash point.
#[derive(Serialize, Debug, Clone)]
struct Failure {
    scenario: String,
    /// The stopped process.
    process: char,
    /// Crash point k of `calls` (0: the run without a stop, ended as the scenario says).
    k: usize,
    calls: usize,
    /// The call, and which call of its syscall it is (strace's when=).
    call: String,
    syscall: String,
    nth: u32,
    /// "process crash", or what the power cut did.
    crash: String,
    clause: &'static str,
    detail: String,
}

#[derive(Serialize, Debug, Default, Clone)]
struct ScenarioSummary {
    name: String,
    about: String,
    processes: String,
    stopped: String,
    /// Database calls of the stopped processes in their recordings.
    calls: usize,
    /// Runs with nothing stopped (one per stopped process and round), checked too.
    runs_without_stop: usize,
    crash_points: usize,
    /// Crash runs that ended before the call came (the run went differently).
    not_reached: usize,
    /// Crash runs stopped at a call other than the recording's at that number.
    drifted: usize,
    power_cut_images: usize,
    /// Runs in which readers waited for the stopped process (locking_mode=EXCLUSIVE).
    readers_blocked: usize,
    /// Concurrent writers' COMMITs refused with SQLITE_BUSY_SNAPSHOT (the transfer ran
    /// again), over all runs; and those that failed with another busy code.
    busy_snapshot: usize,
    busy_other: usize,
    failures: usize,
    failing_points: usize,
    /// Clauses broken, with how often.
    clauses: BTreeMap<String, usize>,
}

#[derive(Serialize, Debug, Default)]
struct Summary {
    seed: u64,
    power_cuts: Option<PowerCuts>,
    budget: usize,
    jobs: usize,
    strace: String,
    negative_control: Option<NegativeControl>,
    scenarios: Vec<ScenarioSummary>,
    failures: Vec<Failure>,
    crash_points: usize,
    power_cut_images: usize,
    failure_count: usize,
    seconds: f64,
}

/// A scenario ready to run: its database as set up, and the recording of each process
/// to stop.
struct Prepared {
    scenario: Scenario,
    image: Vec<u8>,
    plain_aux_image: Option<Vec<u8>>,
    /// Per stopped process: its database calls in the recording.
    calls: Vec<(usize, Vec<trace::Call>)>,
}

/// One crash point to run.
struct Point {
    scenario: usize,
    victim: usize,
    k: usize,
    calls: usize,
    call: trace::Call,
}

struct Shared<'a> {
    args: &'a ExploreArgs,
    power: PowerCuts,
    /// This round's seed.
    seed: u64,
    round: u64,
    exe: PathBuf,
    work: PathBuf,
    prepared: Vec<Prepared>,
    summary: Mutex<Summary>,
    kept: Mutex<Vec<PathBuf>>,
}

pub fn run(args: &ExploreArgs) -> Result<ExitCode> {
    // The store's write log (`ONESYNC_IO_LOG`) and sabotage are test hooks.
    crate::hooks::needs_test_hooks("explore")?;
    if args.list {
        for s in scenario::all() {
            println!("{:<20} {}", s.name, s.about);
        }
        println!(
            "negative controls (--negative-control): journal-off, checkpoint-publication, \
             unvalidated-snapshot, lazy-growth, lazy-growth-large, relocated-pointer-missed, \
             stalled-retry-unflushed"
        );
        return Ok(ExitCode::SUCCESS);
    }
    output::check_json_path(args.json.as_deref())?;
    let strace = trace::available()?;
    let scenarios = select(args)?;
    let rounds = args.rounds;
    let seed = args.seed.unwrap_or_else(rand::random);
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let work = output::work_dir("onesync-explore-", None, args.dir.as_deref())?;
    let exe = std::env::current_exe().context("finding the onesync binary to run as the workers")?;
    let power = if scenarios.iter().all(|s| s.backend() == Backend::Onesync) {
        args.power_cuts
    } else {
        // Stock SQLite does not write through the store's I/O layer: no write log.
        PowerCuts::None
    };
    eprintln!(
        "explore: {} scenario(s), {rounds} round(s), budget {} per stopped process, power cuts {}, seed {seed}, {jobs} job(s), {strace}, in {}",
        scenarios.len(),
        if args.budget == 0 { "every call".to_owned() } else { args.budget.to_string() },
        run::value(power),
        work.path().display()
    );
    let started = Instant::now();
    let mut shared = Shared {
        args,
        power,
        seed,
        round: 0,
        exe,
        work: work.path().to_owned(),
        prepared: Vec::new(),
        summary: Mutex::new(Summary {
            seed,
            power_cuts: Some(power),
            budget: args.budget,
            jobs,
            strace,
            negative_control: args.negative_control,
            ..Summary::default()
        }),
        kept: Mutex::new(Vec::new()),
    };

    for round in 0..args.rounds {
        shared.seed = seed.wrapping_add(round);
        shared.round = round;
        shared.prepared.clear();
        if let Err(e) = explore_round(&mut shared, &scenarios, jobs) {
            let kept = work.keep();
            return Err(e.context(format!("(work directory kept: {})", kept.display())));
        }
    }

    let mut summary = std::mem::take(&mut *lock(&shared.summary));
    summary.seconds = started.elapsed().as_secs_f64();
    summary.crash_points = summary.scenarios.iter().map(|s| s.crash_points).sum();
    summary.power_cut_images = summary.scenarios.iter().map(|s| s.power_cut_images).sum();
    summary.failure_count = summary.failures.len();
    let text = report(&summary);
    let kept = std::mem::take(&mut *lock(&shared.kept));
    if kept.is_empty() {
        drop(work);
    } else {
        let at = work.keep();
        eprintln!("explore: runs kept in {}", at.display());
    }
    output::emit(args.json.as_deref(), &summary, &text, Human::Stdout)?;
    let failed = summary.failure_count > 0;
    Ok(match args.negative_control {
        Some(control) if !failed => {
            eprintln!(
                "explore: the negative control {} did NOT fail: the explorer cannot see what it must",
                run::value(control)
            );
            ExitCode::FAILURE
        }
        Some(_) => ExitCode::SUCCESS,
        None if failed => ExitCode::FAILURE,
        None => ExitCode::SUCCESS,
    })
}

/// One round: set up and record each scenario (one run per process to stop, each checked
/// too), then every crash point, `jobs` at a time.
fn explore_round(shared: &mut Shared<'_>, scenarios: &[Scenario], jobs: usize) -> Result<()> {
    let rounds = shared.args.rounds;
    let round = shared.round + 1;
    let spinner = phase_spinner("recording", "setting up and recording the scenarios");
    for (n, s) in scenarios.iter().enumerate() {
        let prepared = prepare(shared, n, s.clone())?;
        shared.prepared.push(prepared);
    }
    spinner.finish_and_clear();
    let shared = &*shared;
    let points = plan(shared);
    let bar = phase_bar("crash pts", points.len() as u64);
    if rounds > 1 {
        bar.set_message(format!("round {round}/{rounds}"));
    }
    let queue = Mutex::new(points.into_iter());
    let error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let next = lock(&queue).next();
                let Some(point) = next else { break };
                if let Err(e) = crash_point(shared, &point) {
                    lock(&error).get_or_insert(e);
                    break;
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let first = lock(&error).take();
    first.map_or(Ok(()), Err)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn select(args: &ExploreArgs) -> Result<Vec<Scenario>> {
    if let Some(control) = args.negative_control {
        return Ok(vec![scenario::negative_control(control)]);
    }
    let all = scenario::all();
    if args.scenario.iter().any(|s| s == "all") {
        return Ok(all);
    }
    args.scenario
        .iter()
        .map(|name| {
            all.iter().find(|s| s.name == name).cloned().ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|s| s.name).collect();
                anyhow!("no scenario {name:?}; there are: {}, all", names.join(", "))
            })
        })
        .collect()
}

/// Sets up the scenario's database, records each process to stop, and checks those runs
/// (crash point 0: no stop; the end as the scenario says, then power cuts at the end).
fn prepare(shared: &Shared<'_>, n: usize, scenario: Scenario) -> Result<Prepared> {
    let base = shared.work.join(scenario_dir(shared, n, scenario.name));
    let setup_dir = base.join("setup");
    std::fs::create_dir_all(&setup_dir)?;
    let path = setup_dir.join(run::store_name(scenario.backend()));
    set_up(&scenario, &path).with_context(|| format!("setting up scenario {}", scenario.name))?;
    let image = std::fs::read(&path)?;
    let plain_aux_image = match scenario.uses_plain_aux() {
        true => Some(std::fs::read(plain_aux_path(&path))?),
        false => None,
    };
    std::fs::remove_dir_all(&setup_dir)?;
    let mut summary = ScenarioSummary {
        name: scenario.name.to_owned(),
        about: scenario.about.to_owned(),
        processes: scenario.procs.iter().map(|p| p.name).collect(),
        stopped: scenario.victims.iter().map(|&v| scenario.procs[v].name).collect(),
        ..ScenarioSummary::default()
    };
    let mut prepared = Prepared {
        scenario,
        image,
        plain_aux_image,
        calls: Vec::new(),
    };
    let mut failures = Vec::new();
    for &victim in &prepared.scenario.victims.clone() {
        let dir = base.join(format!("{}-record", prepared.scenario.procs[victim].name));
        let setup = Setup {
            scenario: &prepared.scenario,
            image: &prepared.image,
            plain_aux_image: prepared.plain_aux_image.as_deref(),
            exe: &shared.exe,
            seed: shared.seed,
        };
        let outcome = run::run(&setup, victim, None, &dir)?;
        let calls = trace::recorded_calls(outcome.recording.as_deref().unwrap_or(""), &dir);
        if calls.is_empty() {
            bail!(
                "scenario {}: the recording of {} shows no database call",
                prepared.scenario.name,
                prepared.scenario.procs[victim].name
            );
        }
        summary.calls += calls.len();
        summary.runs_without_stop += 1;
        summary.busy_snapshot += outcome.busy_snapshot;
        summary.busy_other += outcome.busy_other;
        let (mut found, images) = check_run(shared, &prepared, &outcome, &dir, 0);
        if prepared.scenario.overlaps() && outcome.busy_snapshot == 0 {
            found.push((
                "no crash".to_owned(),
                Violation {
                    clause: Clause::NoConflict,
                    detail: "the concurrent writers' overlapping transfers all committed: no \
                             COMMIT was refused with SQLITE_BUSY_SNAPSHOT"
                        .to_owned(),
                },
            ));
        }
        summary.power_cut_images += images;
        let what = trace::Call {
            syscall: String::new(),
            nth: 0,
            what: "no stop: the whole script".to_owned(),
        };
        let point = Point {
            scenario: n,
            victim,
            k: 0,
            calls: calls.len(),
            call: what,
        };
        record(&prepared, &point, &found, &mut summary, &mut failures);
        finish_dir(shared, &dir, !found.is_empty());
        prepared.calls.push((victim, calls));
    }
    let mut s = lock(&shared.summary);
    match s.scenarios.iter_mut().find(|s| s.name == summary.name) {
        // A later round: the same scenario again.
        Some(earlier) => {
            earlier.calls += summary.calls;
            earlier.runs_without_stop += summary.runs_without_stop;
            earlier.power_cut_images += summary.power_cut_images;
            earlier.busy_snapshot += summary.busy_snapshot;
            earlier.busy_other += summary.busy_other;
            earlier.failures += summary.failures;
            earlier.failing_points += summary.failing_points;
            for (clause, n) in summary.clauses {
                *earlier.clauses.entry(clause).or_default() += n;
            }
        }
        None => s.scenarios.push(summary),
    }
    s.failures.extend(failures);
    Ok(prepared)
}

fn scenario_dir(shared: &Shared<'_>, n: usize, name: &str) -> String {
    format!("r{}-{n:02}-{name}", shared.round + 1)
}

/// A funded bank in a fresh database (and in `aux` too when a process attaches it).
fn set_up(scenario: &Scenario, path: &Path) -> Result<()> {
    match scenario.backend() {
        Backend::Onesync => {
            let conn = open_store(path, true)?;
            bank::set_up(&conn)?;
            if scenario.uses_plain_aux() {
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
                let aux = crate::sqlite::open_plain(&plain_aux_path(path), flags)?;
                bank::set_up(&aux)?;
            } else if scenario.uses_attach() {
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
                let aux = Connection::open_with_flags(aux_uri(path), flags)?;
                bank::set_up(&aux)?;
            }
        }
        Backend::StockJournalOff => {
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
            let conn = crate::sqlite::open_plain(path, flags)?;
            conn.execute_batch("PRAGMA journal_mode = OFF")?;
            bank::set_up(&conn)?;
        }
    }
    Ok(())
}

/// The crash points: for each stopped process, `budget` of its calls spread evenly (all
/// with budget 0), first and last included.
fn plan(shared: &Shared<'_>) -> Vec<Point> {
    let mut points = Vec::new();
    for (n, p) in shared.prepared.iter().enumerate() {
        for (victim, calls) in &p.calls {
            let picks: Vec<usize> = if shared.args.budget == 0 || shared.args.budget >= calls.len() {
                (0..calls.len()).collect()
            } else if shared.args.budget == 1 {
                vec![shared.seed as usize % calls.len()]
            } else {
                let b = shared.args.budget;
                let mut v: Vec<usize> = (0..b).map(|i| i * (calls.len() - 1) / (b - 1)).collect();
                v.dedup();
                v
            };
            for i in picks {
                points.push(Point {
                    scenario: n,
                    victim: *victim,
                    k: i + 1,
                    calls: calls.len(),
                    call: calls[i].clone(),
                });
            }
        }
    }
    points
}

fn crash_point(shared: &Shared<'_>, point: &Point) -> Result<()> {
    let prepared = &shared.prepared[point.scenario];
    let scenario = &prepared.scenario;
    let name = scenario.procs[point.victim].name;
    let dir = shared
        .work
        .join(scenario_dir(shared, point.scenario, scenario.name))
        .join(format!("{name}-{:04}", point.k));
    let setup = Setup {
        scenario,
        image: &prepared.image,
        plain_aux_image: prepared.plain_aux_image.as_deref(),
        exe: &shared.exe,
        seed: shared.seed,
    };
    let outcome = run::run(
        &setup,
        point.victim,
        Some((&point.call.syscall, point.call.nth)),
        &dir,
    )
    .with_context(|| format!("scenario {} crash point {name}/{}", scenario.name, point.k))?;
    let (found, images) = if outcome.stopped {
        check_run(shared, prepared, &outcome, &dir, point.k as u64)
    } else {
        (Vec::new(), 0)
    };
    let mut failures = Vec::new();
    {
        let mut summary = lock(&shared.summary);
        let Some(s) = summary.scenarios.iter_mut().find(|s| s.name == scenario.name) else {
            bail!("no summary for {}", scenario.name);
        };
        s.crash_points += 1;
        s.power_cut_images += images;
        s.not_reached += usize::from(!outcome.stopped);
        s.readers_blocked += usize::from(outcome.readers_blocked);
        s.busy_snapshot += outcome.busy_snapshot;
        s.busy_other += outcome.busy_other;
        if outcome.stopped && outcome.stopped_at.as_deref() != Some(point.call.what.as_str()) {
            s.drifted += 1;
        }
        record(prepared, point, &found, s, &mut failures);
        summary.failures.extend(failures);
    }
    finish_dir(shared, &dir, !found.is_empty());
    Ok(())
}

/// Adds what `found` broke to the scenario's summary and the failure list.
fn record(
    prepared: &Prepared,
    point: &Point,
    found: &[(String, Violation)],
    summary: &mut ScenarioSummary,
    failures: &mut Vec<Failure>,
) {
    summary.failures += found.len();
    summary.failing_points += usize::from(!found.is_empty());
    for (crash, v) in found {
        *summary.clauses.entry(v.clause.name().to_owned()).or_default() += 1;
        failures.push(Failure {
            scenario: prepared.scenario.name.to_owned(),
            process: prepared.scenario.procs[point.victim].name,
            k: point.k,
            calls: point.calls,
            call: point.call.what.clone(),
            syscall: point.call.syscall.clone(),
            nth: point.call.nth,
            crash: crash.clone(),
            clause: v.clause.name(),
            detail: v.detail.clone(),
        });
    }
}

/// Removes a run's directory (and its side files), or keeps it if it failed (a few).
fn finish_dir(shared: &Shared<'_>, dir: &Path, failed: bool) {
    // Side files are in memory (/dev/shm) and stale once the run is over: never kept.
    remove_side_files(dir);
    if shared.args.keep {
        lock(&shared.kept).push(dir.to_owned());
        return;
    }
    // A negative control fails by design: nothing to inspect.
    if failed && shared.args.negative_control.is_none() {
        let mut kept = lock(&shared.kept);
        if kept.len() < KEEP_FAILED_RUNS {
            kept.push(dir.to_owned());
            return;
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The side files (in /dev/shm or /tmp, named after device and inode) of the stores in
/// `dir`: processes killed while sharing a store leave them behind.
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

/// Checks a run: what its processes reported, then power cuts at the crash point's
/// instant (the store rebuilt from the write log), then the files as the process crash
/// left them. Returns what broke (with the crash's kind) and the power-cut images checked.
fn check_run(
    shared: &Shared<'_>,
    prepared: &Prepared,
    outcome: &Outcome,
    dir: &Path,
    salt: u64,
) -> (Vec<(String, Violation)>, usize) {
    let scenario = &prepared.scenario;
    let mut found = Vec::new();
    let process = "process crash".to_owned();
    let run_level = outcome
        .hang
        .iter()
        .map(|h| (Clause::Hang, h))
        .chain(outcome.errors.iter().map(|e| (Clause::ProcessError, e)))
        .chain(outcome.torn.iter().map(|t| (Clause::ReadSnapshot, t)));
    for (clause, detail) in run_level {
        found.push((
            process.clone(),
            Violation {
                clause,
                detail: detail.clone(),
            },
        ));
    }
    let store = dir.join(run::store_name(scenario.backend()));
    // With a plain file attached, the checks recover journals that name the super-journal
    // by its path: each check starts from the files as the crash left them, in place.
    let crash_files = match scenario.uses_plain_aux().then(|| CrashFiles::take(dir)) {
        Some(Ok(files)) => Some(files),
        Some(Err(e)) => {
            found.push((
                process.clone(),
                Violation {
                    clause: Clause::Open,
                    detail: format!("keeping the crash point's files: {e:#}"),
                },
            ));
            return (found, 0);
        }
        None => None,
    };
    let mut images = 0;
    if shared.power != PowerCuts::None && scenario.backend() == Backend::Onesync {
        match power_cuts(shared, prepared, outcome, dir, &store, salt, crash_files.as_ref()) {
            Ok((f, n)) => {
                found.extend(f);
                images = n;
            }
            Err(e) => found.push((
                "power cut".to_owned(),
                Violation {
                    clause: Clause::Open,
                    detail: format!("rebuilding the power cut: {e:#}"),
                },
            )),
        }
    }
    let expect = Expect {
        acks: &outcome.acks,
        saws: &outcome.saws,
        attach: scenario.uses_attach(),
        plain_aux: scenario.uses_plain_aux(),
    };
    if let Some(files) = &crash_files {
        if let Err(e) = files.restore(dir) {
            found.push((
                process.clone(),
                Violation {
                    clause: Clause::Open,
                    detail: format!("restoring the crash point's files: {e:#}"),
                },
            ));
        }
    }
    if let Some(v) = check::check(&store, scenario.backend(), &expect) {
        found.push((process, v));
    }
    (found, images)
}

fn power_cuts(
    shared: &Shared<'_>,
    prepared: &Prepared,
    outcome: &Outcome,
    dir: &Path,
    store: &Path,
    salt: u64,
    crash_files: Option<&CrashFiles>,
) -> Result<(Vec<(String, Violation)>, usize)> {
    use std::os::unix::fs::MetadataExt;
    let scenario = &prepared.scenario;
    let meta = std::fs::metadata(store)?;
    let file = (meta.dev(), meta.ino());
    let log = Log::parse(std::fs::read(dir.join(run::IO_LOG)).unwrap_or_default())?;
    let cut = outcome.cut;
    let durable = log.durable_before(file, cut);
    let mut acks = Vec::new();
    let mut saws = Vec::new();
    for (pos, note) in log.notes_before(cut) {
        if let Some(id) = note.strip_prefix("ack ") {
            let relaxed = !shared.args.strict_sync
                && id
                    .chars()
                    .next()
                    .and_then(|c| scenario.proc_named(c))
                    .is_some_and(|p| p.sync != Sync::Full);
            if !relaxed || pos < durable {
                acks.push(id.to_owned());
            }
        } else if let Some(id) = note.strip_prefix("saw ") {
            saws.push(id.to_owned());
        }
    }
    let unflushed = log.unflushed(file, cut);
    let seed = shared.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(scenario.procs[0].name);
    let mut fates = match (shared.power, unflushed) {
        (PowerCuts::None, _) => vec![],
        (_, 0) => vec![Fate::AllKept],
        (PowerCuts::Some, _) => vec![
            Fate::AllLost,
            Fate::AllKept,
            Fate::Random(seed),
            Fate::Random(seed + 1),
        ],
        (PowerCuts::All, n) => {
            let mut f = vec![Fate::AllLost, Fate::AllKept];
            f.extend((1..n).map(Fate::Prefix));
            f.extend((0..8).map(|i| Fate::Random(seed + i)));
            f
        }
    };
    fates.dedup();
    let expect = Expect {
        acks: &acks,
        saws: &saws,
        attach: scenario.uses_attach(),
        plain_aux: scenario.uses_plain_aux(),
    };
    let mut found = Vec::new();
    let mut checked = 0;
    // The rebuilt store beside the other files as the crash left them (the plain file, the
    // journals, the super-journal: kept whole, a power cut's mildest outcome for them), at
    // the store's own path, which the store's journal is named after; else beside the store.
    let image_path = match crash_files {
        Some(_) => store.to_path_buf(),
        None => dir.join("bank-cut.onesync"),
    };
    for fate in &fates {
        checked += 1;
        if let Some(files) = crash_files {
            files.restore(dir)?;
        }
        let bytes = log.rebuild(&prepared.image, file, cut, *fate);
        std::fs::write(&image_path, bytes)?;
        let v = check::check(&image_path, scenario.backend(), &expect);
        remove_side_files(dir);
        if crash_files.is_none() {
            std::fs::remove_file(&image_path)?;
        }
        if let Some(v) = v {
            found.push((format!("power cut ({fate}; {unflushed} unflushed)"), v));
            // One broken image of a crash point says it; the rest would repeat it.
            break;
        }
    }
    Ok((found, checked))
}

fn report(summary: &Summary) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<20} {:>5} {:>4} {:>6} {:>7} {:>7} {:>6} {:>7} {:>8} {:>9}",
        "scenario", "procs", "stop", "calls", "points", "unreach", "drift", "images", "conflict", "failures"
    );
    for s in &summary.scenarios {
        let clauses: Vec<String> = s.clauses.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(
            t,
            "{:<20} {:>5} {:>4} {:>6} {:>7} {:>7} {:>6} {:>7} {:>8} {:>9}{}",
            s.name,
            s.processes,
            s.stopped,
            s.calls,
            s.crash_points,
            s.not_reached,
            s.drifted,
            s.power_cut_images,
            s.busy_snapshot,
            s.failures,
            if clauses.is_empty() {
                String::new()
            } else {
                format!("  ({})", clauses.join(", "))
            }
        );
    }
    // The first few failures of each scenario and clause; JSON has them all.
    let mut shown: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for f in &summary.failures {
        let n = shown.entry((&f.scenario, f.clause)).or_default();
        *n += 1;
        if *n > 3 {
            continue;
        }
        let at = if f.k == 0 {
            format!("{} not stopped (whole script)", f.process)
        } else {
            format!(
                "{} stopped at call {}/{} ({} #{}: {})",
                f.process, f.k, f.calls, f.syscall, f.nth, f.call
            )
        };
        let _ = writeln!(
            t,
            "FAIL {}: {at}; {}: {}: {}",
            f.scenario, f.crash, f.clause, f.detail
        );
    }
    let _ = write!(
        t,
        "total: {} scenario(s), {} crash points (+{} runs without a stop), {} power-cut images, {} failure(s), seed {}, {:.1} s",
        summary.scenarios.len(),
        summary.crash_points,
        summary.scenarios.iter().map(|s| s.runs_without_stop).sum::<usize>(),
        summary.power_cut_images,
        summary.failure_count,
        summary.seed,
        summary.seconds
    );
    if let Some(control) = summary.negative_control {
        let _ = write!(
            t,
            "\nnegative control {}: {}",
            run::value(control),
            if summary.failure_count > 0 {
                "failed, as it must"
            } else {
                "DID NOT FAIL"
            }
        );
    }
    t
}
