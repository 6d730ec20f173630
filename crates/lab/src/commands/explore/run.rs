//! One run of a scenario: its processes started, its script played step by step, the chosen
//! process traced (a recording) or stopped at one call (a crash point).
//!
//! At a crash point the chosen process stops before its call. The processes that only
//! read then run their next reads (what a reader could show at that instant); that is the
//! power cut's instant: the write log's length then is the cut. Then the stopped process
//! is killed (a process crash) and the others play the rest of the script, and end as
//! the scenario says (killed, or closing).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::scenario::{Backend, Cmd, End, Name, Replica, Role, Scenario};
use super::trace;

/// A step of a process that is not stopped takes longer than this only if it hangs.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// A reader's read while the chosen process is stopped: readers never wait for writers,
/// but with locking_mode=EXCLUSIVE they do, so this is not a failure.
const FROZEN_READ_TIMEOUT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(1);

/// File names inside a run's directory.
pub fn store_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Onesync => "bank.onesync",
        Backend::StockJournalOff => "bank.db",
    }
}
pub const LINK_NAME: &str = "bank-link.onesync";
pub const IO_LOG: &str = "io.log";
pub const STRACE_LOG: &str = "strace.log";

/// How a run went.
#[derive(Debug, Default)]
pub struct Outcome {
    /// `ack` lines: transfers whose COMMIT returned.
    pub acks: Vec<String>,
    /// `saw` lines: ledger rows readers showed.
    pub saws: Vec<String>,
    /// Reads that saw money not conserved.
    pub torn: Vec<String>,
    /// Steps that failed, processes that died by themselves.
    pub errors: Vec<String>,
    pub hang: Option<String>,
    /// The chosen process reached the crash point.
    pub stopped: bool,
    /// The call it was stopped at, as strace showed it.
    pub stopped_at: Option<String>,
    /// Reads that waited for the stopped process (locking_mode=EXCLUSIVE).
    pub readers_blocked: bool,
    /// COMMITs of concurrent writers refused with SQLITE_BUSY_SNAPSHOT (their transfers
    /// ran again) ...
    pub busy_snapshot: usize,
    /// ... and failed with another busy code.
    pub busy_other: usize,
    /// The write log's length at the power cut's instant (the end for a run not stopped).
    pub cut: u64,
    /// The recording: strace's output (recording runs only).
    pub recording: Option<String>,
}

/// What a scenario's runs share.
pub struct Setup<'a> {
    pub scenario: &'a Scenario,
    /// The database file after the bank was set up.
    pub image: &'a [u8],
    /// The attached plain file after its bank was set up (`attach-plain` scenarios).
    pub plain_aux_image: Option<&'a [u8]>,
    pub exe: &'a Path,
    pub seed: u64,
}

enum Msg {
    Line(usize, String),
    Eof(usize),
}

enum Step {
    Done,
    Stopped,
    Died,
    TimedOut,
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: Option<i32>,
    alive: bool,
    /// Killed by the explorer (its end is no error).
    killed: bool,
    /// Its connection is open (as far as the steps done say).
    open: bool,
    eof: bool,
}

struct Run<'a> {
    setup: &'a Setup<'a>,
    dir: &'a Path,
    victim: usize,
    watch: bool,
    workers: Vec<Worker>,
    rx: Receiver<Msg>,
    out: Outcome,
    strace_seen: u64,
    /// Every worker's output has ended.
    disconnected: bool,
}

/// Plays `setup`'s scenario once in `dir` (fresh), with process `victim` traced: recorded
/// when `inject` is `None`, else stopped at call `inject.1` of syscall `inject.0`.
pub fn run(setup: &Setup<'_>, victim: usize, inject: Option<(&str, u32)>, dir: &Path) -> Result<Outcome> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let scenario = setup.scenario;
    let store = dir.join(store_name(scenario.backend()));
    std::fs::write(&store, setup.image).with_context(|| format!("writing {}", store.display()))?;
    if let Some(aux) = setup.plain_aux_image {
        std::fs::write(super::plain_aux_path(&store), aux).context("writing the plain file")?;
    }
    if scenario.uses_link() {
        std::fs::hard_link(&store, dir.join(LINK_NAME)).context("linking the second name")?;
    }
    let (tx, rx) = mpsc::channel();
    let mut run = Run {
        setup,
        dir,
        victim,
        watch: inject.is_some(),
        workers: Vec::new(),
        rx,
        out: Outcome::default(),
        strace_seen: 0,
        disconnected: false,
    };
    for i in 0..scenario.procs.len() {
        let traced = (i == victim).then_some(inject);
        match spawn(setup, dir, i, traced, tx.clone()) {
            Ok(w) => run.workers.push(w),
            Err(e) => {
                run.kill_all();
                return Err(e);
            }
        }
    }
    drop(tx);
    let played = run.play();
    run.kill_all();
    run.drain();
    played?;
    if !run.out.stopped {
        run.out.cut = run.log_len();
    }
    if inject.is_none() {
        run.out.recording =
            Some(std::fs::read_to_string(dir.join(STRACE_LOG)).context("reading the recording")?);
    } else if run.out.stopped {
        let text = std::fs::read_to_string(dir.join(STRACE_LOG)).unwrap_or_default();
        run.out.stopped_at = trace::injected_call(&text, dir);
    }
    Ok(run.out)
}

fn spawn(
    setup: &Setup<'_>,
    dir: &Path,
    i: usize,
    traced: Option<Option<(&str, u32)>>,
    tx: Sender<Msg>,
) -> Result<Worker> {
    let scenario = setup.scenario;
    let p = &scenario.procs[i];
    let db: PathBuf = match p.path {
        Name::Main => dir.join(store_name(p.backend)),
        Name::HardLink => dir.join(LINK_NAME),
    };
    let mut command = match traced {
        Some(inject) => {
            let mut c = trace::command(&dir.join(STRACE_LOG), inject);
            c.arg(setup.exe);
            c
        }
        None => Command::new(setup.exe),
    };
    command
        .arg("__explore-worker")
        .arg("--db")
        .arg(&db)
        .args(["--name", &p.name.to_string()])
        .args(["--backend", &value(p.backend)])
        .args(["--locking", &value(p.locking)])
        .args(["--sync", &value(p.sync)])
        .args(["--seed", &setup.seed.to_string()]);
    if p.attach {
        command.arg("--attach");
    }
    if p.plain_aux {
        command.arg("--plain-aux");
    }
    if p.concurrent {
        command.arg("--concurrent");
    }
    if p.replica != Replica::Off {
        command.args(["--replicate", &super::replica_url(dir)]);
    }
    if p.replica == Replica::Sync {
        command.arg("--replicate-sync");
    }
    // The explorer runs only with the test hooks (`explore::run` refuses otherwise).
    #[cfg(feature = "test-hooks")]
    match p.backend {
        Backend::Onesync => command.env(onesync_store::io::IO_LOG_ENV, dir.join(IO_LOG)),
        Backend::StockJournalOff => command.env_remove(onesync_store::io::IO_LOG_ENV),
    };
    command.env(super::INTERVAL_ENV, scenario.checkpoint_interval.to_string());
    match scenario.max_growth_step {
        Some(bytes) => command.env(super::MAX_GROWTH_STEP_ENV, bytes.to_string()),
        None => command.env_remove(super::MAX_GROWTH_STEP_ENV),
    };
    #[cfg(feature = "test-hooks")]
    {
        command
            .env_remove(onesync_store::Sabotage::ENV)
            .env_remove(onesync_replica::Sabotage::ENV);
        match scenario.sabotage {
            Some(s) if onesync_replica::Sabotage::from_name(s).is_some() => {
                command.env(onesync_replica::Sabotage::ENV, s)
            }
            Some(s) => command.env(onesync_store::Sabotage::ENV, s),
            None => &mut command,
        };
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = scenario.sabotage;
    let stderr = File::create(dir.join(format!("{}.stderr", p.name)))?;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {:?}", command.get_program()))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let stdin = child.stdin.take();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        // A line without its newline was cut by a kill: not a report.
        while reader.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
            if tx.send(Msg::Line(i, line.trim_end().to_owned())).is_err() {
                return;
            }
            line.clear();
        }
        let _ = tx.send(Msg::Eof(i));
    });
    Ok(Worker {
        child,
        stdin,
        pid: None,
        alive: true,
        killed: false,
        open: false,
        eof: false,
    })
}

/// A clap value's command-line spelling.
pub fn value<T: clap::ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_owned())
        .unwrap_or_default()
}

impl Run<'_> {
    fn name(&self, i: usize) -> char {
        self.setup.scenario.procs[i].name
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(self.dir.join(IO_LOG)).map_or(0, |m| m.len())
    }

    fn play(&mut self) -> Result<()> {
        // Every worker says its pid first.
        let started = Instant::now();
        while self.workers.iter().any(|w| w.pid.is_none() && !w.eof) {
            if started.elapsed() > STEP_TIMEOUT {
                bail!("the workers did not start");
            }
            self.receive(None);
        }
        if let Some(i) = self.workers.iter().position(|w| w.pid.is_none()) {
            bail!("worker {} did not start: {}", self.name(i), self.stderr_of(i));
        }
        let script = &self.setup.scenario.script;
        let mut done = vec![false; script.len()];
        for n in 0..script.len() {
            if done[n] {
                continue;
            }
            done[n] = true;
            let (i, cmd) = script[n];
            if !self.workers[i].alive {
                continue;
            }
            let watch = self.watch && i == self.victim && !self.out.stopped;
            match self.step(i, &cmd.to_string(), STEP_TIMEOUT, watch) {
                Step::Done => match cmd {
                    Cmd::Open | Cmd::Reopen => self.workers[i].open = true,
                    Cmd::Close => self.workers[i].open = false,
                    _ => {}
                },
                Step::Stopped => self.at_crash_point(Some((n, &mut done))),
                Step::Died => self.died(i),
                Step::TimedOut => {
                    self.out.hang = Some(format!(
                        "{}: `{cmd}` did not finish in {STEP_TIMEOUT:?}",
                        self.name(i)
                    ));
                    return Ok(());
                }
            }
            if self.out.hang.is_some() {
                return Ok(());
            }
        }
        self.end();
        Ok(())
    }

    /// The stopped process stays stopped while readers read; then the power is cut (the
    /// log's length noted), and the stopped process is killed.
    /// `rest`: the step it stopped in and which steps are done (`None` at the end).
    fn at_crash_point(&mut self, rest: Option<(usize, &mut [bool])>) {
        self.out.stopped = true;
        let script = &self.setup.scenario.script;
        let mut waiting = None;
        let (after, done) = match rest {
            Some((n, done)) => (n + 1, done),
            None => (script.len(), &mut [][..]),
        };
        for (n, &(i, cmd)) in script.iter().enumerate().skip(after) {
            let p = &self.setup.scenario.procs[i];
            let w = &self.workers[i];
            if i == self.victim || p.role != Role::Reader || cmd != Cmd::Read || !w.alive || !w.open {
                continue;
            }
            done[n] = true;
            match self.step(i, "read", FROZEN_READ_TIMEOUT, false) {
                Step::Done | Step::Stopped => {}
                Step::Died => self.died(i),
                Step::TimedOut => {
                    self.out.readers_blocked = true;
                    waiting = Some(i);
                    break;
                }
            }
        }
        self.out.cut = self.log_len();
        if self.setup.scenario.replicated() {
            // The replica and the position as a power cut now would leave them.
            if let Err(e) = super::replica::keep_at_cut(self.dir) {
                self.out
                    .errors
                    .push(format!("keeping the replica at the crash point: {e:#}"));
            }
        }
        self.kill(self.victim);
        if let Some(i) = waiting {
            if let Step::TimedOut = self.wait_reply(i, STEP_TIMEOUT, false) {
                self.out.hang = Some(format!(
                    "{}: a read did not finish after the stopped process was killed",
                    self.name(i)
                ));
            }
        }
    }

    fn end(&mut self) {
        match self.setup.scenario.end {
            End::Kill => self.kill_all(),
            End::Close => {
                for i in 0..self.workers.len() {
                    if !self.workers[i].alive {
                        continue;
                    }
                    let watch = self.watch && i == self.victim && !self.out.stopped;
                    match self.step(i, "close", STEP_TIMEOUT, watch) {
                        // The crash point may be in the closing.
                        Step::Stopped => {
                            self.at_crash_point(None);
                            continue;
                        }
                        Step::TimedOut => {
                            self.out.hang = Some(format!("{}: close did not finish", self.name(i)));
                            continue;
                        }
                        Step::Done | Step::Died => {}
                    }
                    self.send(i, "quit");
                    let started = Instant::now();
                    loop {
                        match self.workers[i].child.try_wait() {
                            Ok(Some(_)) | Err(_) => break,
                            Ok(None) if started.elapsed() > STEP_TIMEOUT => {
                                self.out.hang = Some(format!("{}: did not exit", self.name(i)));
                                break;
                            }
                            Ok(None) => thread::sleep(POLL),
                        }
                    }
                    self.workers[i].alive = false;
                    self.workers[i].killed = true;
                }
            }
        }
    }

    fn send(&mut self, i: usize, line: &str) -> bool {
        let Some(stdin) = self.workers[i].stdin.as_mut() else {
            return false;
        };
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).is_ok()
    }

    fn step(&mut self, i: usize, line: &str, timeout: Duration, watch: bool) -> Step {
        if !self.send(i, line) {
            return Step::Died;
        }
        self.wait_reply(i, timeout, watch)
    }

    fn wait_reply(&mut self, i: usize, timeout: Duration, watch: bool) -> Step {
        let started = Instant::now();
        loop {
            if let Some(step) = self.receive(Some(i)) {
                return step;
            }
            if watch && self.stopped_now() {
                return Step::Stopped;
            }
            if started.elapsed() > timeout {
                return Step::TimedOut;
            }
        }
    }

    /// Takes in one message (or waits a moment); `Some` when it ends `waiting_for`'s step.
    fn receive(&mut self, waiting_for: Option<usize>) -> Option<Step> {
        let (j, line) = match self.rx.recv_timeout(POLL) {
            Ok(Msg::Line(j, line)) => (j, line),
            Ok(Msg::Eof(j)) => {
                self.workers[j].eof = true;
                return (waiting_for == Some(j)).then_some(Step::Died);
            }
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => {
                self.disconnected = true;
                return waiting_for.map(|_| Step::Died);
            }
        };
        let name = self.name(j);
        let (verb, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match verb {
            "pid" => self.workers[j].pid = rest.parse().ok(),
            "ack" => self.out.acks.push(rest.to_owned()),
            "saw" => self.out.saws.push(rest.to_owned()),
            "torn" => self.out.torn.push(format!("{name}: {rest}")),
            "retry" => match rest.rsplit_once(' ').map(|(_, code)| code.parse::<i32>()) {
                Some(Ok(rusqlite::ffi::SQLITE_BUSY_SNAPSHOT)) => self.out.busy_snapshot += 1,
                Some(Ok(_)) => self.out.busy_other += 1,
                _ => self.out.errors.push(format!("{name} printed {line:?}")),
            },
            "ok" => return (waiting_for == Some(j)).then_some(Step::Done),
            "err" => {
                self.out.errors.push(format!("{name}: {rest}"));
                return (waiting_for == Some(j)).then_some(Step::Done);
            }
            _ => self.out.errors.push(format!("{name} printed {line:?}")),
        }
        None
    }

    /// Whether strace has stopped the chosen process (its line marked `(INJECTED)`).
    fn stopped_now(&mut self) -> bool {
        let path = self.dir.join(STRACE_LOG);
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        if len == self.strace_seen {
            return false;
        }
        self.strace_seen = len;
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains("(INJECTED)"))
    }

    fn died(&mut self, i: usize) {
        if !self.workers[i].killed {
            self.workers[i].alive = false;
            let why = self.stderr_of(i);
            self.out
                .errors
                .push(format!("{} exited by itself: {why}", self.name(i)));
        }
    }

    fn stderr_of(&self, i: usize) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{}.stderr", self.name(i)))).unwrap_or_default();
        let text = text.trim();
        if text.is_empty() {
            "(nothing on stderr)".to_owned()
        } else {
            text.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
        }
    }

    /// SIGKILL worker `i` (the worker itself: strace then exits).
    fn kill(&mut self, i: usize) {
        let w = &mut self.workers[i];
        if !w.alive {
            return;
        }
        w.killed = true;
        w.alive = false;
        match w.pid {
            Some(pid) => {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            None => {
                let _ = w.child.kill();
            }
        }
        let _ = w.child.wait();
    }

    fn kill_all(&mut self) {
        for i in 0..self.workers.len() {
            self.kill(i);
            // Reaps strace too, or a worker already gone.
            let _ = self.workers[i].child.kill();
            let _ = self.workers[i].child.wait();
        }
    }

    /// Takes in what the workers printed before they ended.
    fn drain(&mut self) {
        let started = Instant::now();
        while !self.disconnected && self.workers.iter().any(|w| !w.eof) && started.elapsed() < STEP_TIMEOUT {
            self.receive(None);
        }
    }
}
