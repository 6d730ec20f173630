//! The writer processes as `replication-torture` runs them, and the ledger of what they
//! reported: each commit (with its writer's kind, and for a sync writer whether the replica
//! acknowledged it), each refused COMMIT, the largest `shipped_seq`, lag and errors; and
//! from it what a restore must hold and must not hold ([`Expect`]).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::writer::WriterKind;

/// The extended result code the VFS's contract gives a refused sync COMMIT (its next
/// COMMIT after one that timed out, while the replica still lacks that one).
pub const REFUSAL_CODE: i32 = rusqlite::ffi::SQLITE_IOERR;

/// How long a writer may take to close (its shipper drains the lag first).
pub const CLOSE_LIMIT: Duration = Duration::from_secs(60);

/// A commit a writer reported (its COMMIT returned).
#[derive(Clone, Copy, Debug)]
pub struct Commit {
    pub seq: u64,
    pub w: u64,
    pub n: u64,
    pub kind: WriterKind,
    /// A sync writer's commit the replica acknowledged (`acked`); false for `unacked`.
    pub acked: bool,
}

/// A sync writer's COMMIT that failed.
#[derive(Clone, Copy, Debug)]
pub struct Refusal {
    pub w: u64,
    pub n: u64,
    /// SQLite's extended result code.
    pub code: i32,
    /// Reported before a power cut (or with none in the run): the contract's "nothing
    /// written" holds for it. A COMMIT failing after a cut fails on the dead device, and
    /// what it wrote before may survive.
    pub settled: bool,
}

/// What the writers reported, all of them over the run.
#[derive(Default)]
pub struct Ledger {
    pub commits: Vec<Commit>,
    pub refusals: Vec<Refusal>,
    pub max_seq: u64,
    pub max_shipped: u64,
    pub error_reports: u64,
    pub max_lag: u64,
    /// A power cut was made and its writers are not all collected yet: refusals reported
    /// from now on are not settled.
    pub cut: bool,
    /// Each sync writer's last commit: whether the replica acknowledged it.
    last_acked: HashMap<u64, bool>,
}

/// What a restore must hold, and must not.
pub struct Expect {
    /// Reported at or below a `shipped_seq` read before.
    pub shipped: Vec<(u64, u64)>,
    /// Acknowledged by a sync writer (COMMIT returned with the replica holding it).
    pub acked: Vec<(u64, u64)>,
    /// Refused COMMITs: nothing of them was written.
    pub refused: Vec<(u64, u64)>,
}

impl Expect {
    /// The first broken expectation of a state holding the `(w, n)` of `have`.
    pub fn broken_by(&self, have: &HashSet<(u64, u64)>) -> Option<String> {
        if let Some((w, n)) = self.shipped.iter().find(|c| !have.contains(c)) {
            return Some(format!("commit {w}.{n} was reported shipped but"));
        }
        if let Some((w, n)) = self.acked.iter().find(|c| !have.contains(c)) {
            return Some(format!(
                "commit {w}.{n} was acknowledged by a sync writer (its COMMIT returned with the \
                 replica holding it) but"
            ));
        }
        None
    }

    /// The first refused COMMIT found among `have`.
    pub fn refused_in(&self, have: &HashSet<(u64, u64)>) -> Option<(u64, u64)> {
        self.refused.iter().copied().find(|c| have.contains(c))
    }
}

impl Ledger {
    /// The commits at or below `shipped_bound`, every acknowledged one and every settled
    /// refusal.
    pub fn expect(&self, shipped_bound: u64) -> Expect {
        Expect {
            shipped: self
                .commits
                .iter()
                .filter(|c| c.seq <= shipped_bound)
                .map(|c| (c.w, c.n))
                .collect(),
            acked: self
                .commits
                .iter()
                .filter(|c| c.acked)
                .map(|c| (c.w, c.n))
                .collect(),
            refused: self
                .refusals
                .iter()
                .filter(|r| r.settled)
                .map(|r| (r.w, r.n))
                .collect(),
        }
    }

    /// [`Ledger::expect`] at the largest `shipped_seq` reported.
    pub fn expect_now(&self) -> Expect {
        self.expect(self.max_shipped)
    }

    pub fn acked(&self) -> u64 {
        self.commits.iter().filter(|c| c.acked).count() as u64
    }

    pub fn unacked(&self) -> u64 {
        self.commits
            .iter()
            .filter(|c| c.kind == WriterKind::Sync && !c.acked)
            .count() as u64
    }

    /// COMMITs refused before any cut.
    pub fn settled_refusals(&self) -> u64 {
        self.refusals.iter().filter(|r| r.settled).count() as u64
    }

    /// The extended codes COMMITs refused before any cut failed with, each once, in order.
    pub fn refusal_codes(&self) -> Vec<i32> {
        let mut codes: Vec<i32> = self
            .refusals
            .iter()
            .filter(|r| r.settled)
            .map(|r| r.code)
            .collect();
        codes.sort_unstable();
        codes.dedup();
        codes
    }

    /// Every COMMIT refused before any cut failed with the contract's code (after a cut a
    /// COMMIT fails on the dead device, with whatever code that gives).
    pub fn check_refusal_codes(&self) -> Result<()> {
        if let Some(r) = self.refusals.iter().find(|r| r.settled && r.code != REFUSAL_CODE) {
            bail!(
                "a sync writer's COMMIT of {}.{} failed with extended code {}, not SQLITE_IOERR \
                 ({REFUSAL_CODE}) as the contract says",
                r.w,
                r.n,
                r.code
            );
        }
        Ok(())
    }

    fn take(&mut self, kind: WriterKind, line: &str) -> Result<bool> {
        let words: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> Result<u64> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| anyhow!("a writer printed {line:?}"))
        };
        match words[0] {
            "ready" => return Ok(true),
            word @ ("committed" | "acked" | "unacked") => {
                let (w, n, seq) = (num(1)?, num(2)?, num(3)?);
                if (word == "committed") == (kind == WriterKind::Sync) {
                    bail!("a {} writer printed {line:?}", kind.name());
                }
                self.commits.push(Commit {
                    seq,
                    w,
                    n,
                    kind,
                    acked: word == "acked",
                });
                if kind == WriterKind::Sync {
                    self.last_acked.insert(w, word == "acked");
                }
                self.max_seq = self.max_seq.max(seq);
            }
            "refused" => {
                let code = words
                    .get(3)
                    .and_then(|c| c.parse().ok())
                    .ok_or_else(|| anyhow!("a writer printed {line:?}"))?;
                let (w, n) = (num(1)?, num(2)?);
                // The contract refuses a COMMIT only while an earlier one that returned past
                // its timeout is still not in the replica.
                if !self.cut && self.last_acked.get(&w) != Some(&false) {
                    bail!(
                        "a sync writer's COMMIT of {w}.{n} was refused, but its last COMMIT had not \
                         returned unacknowledged past the timeout"
                    );
                }
                self.refusals.push(Refusal {
                    w,
                    n,
                    code,
                    settled: !self.cut,
                });
            }
            "status" => {
                self.max_shipped = self.max_shipped.max(num(2)?);
                self.max_lag = self.max_lag.max(num(4)?);
                self.error_reports += num(5)?;
                return Ok(num(1)? == 1);
            }
            _ => bail!("a writer printed {line:?}"),
        }
        Ok(false)
    }

    /// Drops the commits of NORMAL writers `survived` says a power cut took back (only
    /// those may go); returns how many.
    pub fn forget_lost(&mut self, survived: impl Fn(u64, u64) -> bool) -> u64 {
        let before = self.commits.len();
        self.commits
            .retain(|c| c.kind.durable_at_return() || survived(c.w, c.n));
        (before - self.commits.len()) as u64
    }
}

/// What every writer of a run is started with.
pub struct Run {
    pub exe: PathBuf,
    pub db: PathBuf,
    pub url: String,
    pub interval_ms: u64,
    pub sync_timeout_ms: u64,
    /// The NORMAL writers' flush interval, if not the store's.
    pub sync_interval_ms: Option<u64>,
    pub seed: u64,
    pub env: Vec<(&'static str, String)>,
    /// `ONESYNC_REPLICA_SABOTAGE`, for a negative control.
    pub sabotage: Option<&'static str>,
    /// The writers' kinds, in turn.
    pub kinds: Vec<WriterKind>,
}

impl Run {
    /// The kind of the `i`-th writer of a round.
    pub fn kind_of(&self, i: u64) -> WriterKind {
        self.kinds
            .get(i as usize % self.kinds.len().max(1))
            .copied()
            .unwrap_or(WriterKind::Full)
    }
}

/// A writer process with threads collecting its lines.
pub struct RunningWriter {
    pub kind: WriterKind,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    stderr: Option<JoinHandle<String>>,
    pub ready: bool,
    pub shipping: bool,
}

impl RunningWriter {
    /// Starts writer `number`; with `group`, in that process group (0: a new one, led by
    /// this writer).
    pub fn start(run: &Run, number: u64, kind: WriterKind, group: Option<i32>) -> Result<RunningWriter> {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(&run.exe);
        command
            .arg("__replica-writer")
            .arg(&run.db)
            .args(["--url", &run.url, "--kind", kind.name()])
            .args(["--writer", &number.to_string()])
            .args(["--interval-ms", &run.interval_ms.to_string()])
            .args(["--sync-timeout-ms", &run.sync_timeout_ms.to_string()])
            .args(["--seed", &number.wrapping_mul(run.seed | 1).to_string()])
            .args(
                run.sync_interval_ms
                    .map(|ms| ["--sync-interval-ms".to_owned(), ms.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .envs(run.env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(sabotage) = run.sabotage {
            command.env("ONESYNC_REPLICA_SABOTAGE", sabotage);
        }
        if let Some(group) = group {
            command.process_group(group);
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Takes the lines printed since the last call into `ledger`.
    pub fn drain(&mut self, ledger: &mut Ledger) -> Result<()> {
        let lines = std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()));
        for line in lines {
            let said = ledger.take(self.kind, &line)?;
            match line.split(' ').next() {
                Some("ready") => self.ready = true,
                Some("status") => self.shipping = said,
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether it has ended (by itself: nobody else stops it).
    pub fn has_ended(&mut self) -> Result<bool> {
        Ok(self.child.try_wait()?.is_some())
    }

    /// Its exit and stderr, once it has ended by itself (for the failure's message).
    pub fn ending(mut self, ledger: &mut Ledger) -> String {
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        let stderr = self.join_readers();
        let _ = self.drain(ledger);
        format!(
            "a {} writer ended by itself ({status}): {}",
            self.kind.name(),
            stderr.trim()
        )
    }

    /// SIGKILLs it (an error if it had ended by itself) and takes its last lines.
    pub fn kill(mut self, ledger: &mut Ledger) -> Result<()> {
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

    /// After a power cut: SIGKILLs it if it still runs and takes its last lines. Whether it
    /// had ended by itself (failing on the dead device).
    pub fn stop_after_cut(mut self, ledger: &mut Ledger) -> Result<bool> {
        let early = self.child.try_wait()?.is_some();
        if !early {
            // Already gone (between the look and the kill) is fine too.
            let _ = self.child.kill();
        }
        self.child.wait()?;
        self.join_readers();
        self.drain(ledger)?;
        Ok(early)
    }

    /// Waits for the threads reading its output (it has ended); returns its stderr.
    fn join_readers(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.stderr.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }

    /// Asks it to close (its stdin closed) and waits for a clean exit.
    pub fn close(mut self, ledger: &mut Ledger) -> Result<()> {
        drop(self.stdin.take());
        let deadline = Instant::now() + CLOSE_LIMIT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!(
                    "a {} writer did not close within {CLOSE_LIMIT:?}",
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
