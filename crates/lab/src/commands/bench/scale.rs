//! `onesync-lab bench scale --sizes 100M,1G [--updates N] [--dir D] [--rounds N] [--json
//! FILE|-]`: how onesync behaves as a database grows, against stock SQLite's WAL at
//! synchronous=FULL on the same data.
//!
//! Per size, a plain database of 1000-byte rows and its store copy are built once and kept
//! in a cache directory (`scale_data`). Per mode (wal, onesync) a fresh working copy is made
//! and measured by a child process of its own (`scale_child`): the open to the first query's
//! row, one-row updates and inserts each its own transaction, the peak RSS, bytes written per
//! update commit, and the time and bytes of one checkpoint forced right after the updates (the
//! same number of commits from a fresh open at every size: issue 42's "a checkpoint
//! proportional to what changed"); the child then dies by SIGKILL without closing, and a
//! second child's open and first query time the recovery. With `--rounds N` the modes take turns in each
//! round and each figure is the median of the rounds.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;

use super::headline::median;
use super::scale_child::{ChildReport, ChildRun};
use super::scale_data::{
    cache_dir, ensure, file_len, gib, leftover_work_dirs, working_copy, Cached, Size, WORK_DIR_PREFIX,
};
use super::writers::round_order;
use crate::commands::report::results::{stamp_lines, write_files};
use crate::commands::report::stamp::Stamp;
use crate::meters::per;
use crate::output::{self, Human};
use crate::progress::phase_spinner;
use crate::schemes::Mode;

/// `--updates` by default: issue 42's "a checkpoint after the same 1,000 commits".
const DEFAULT_UPDATES: u64 = 1000;

/// The modes compared, the first the ratios' base.
const MODES: [Mode; 2] = [Mode::Wal, Mode::Onesync];

#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Database sizes, each a whole number of MiB or GiB (M or G: 100M, 1G, 10G); a size the
    /// disk has no room for is skipped
    #[arg(long, value_name = "SIZES", value_delimiter = ',', default_value = "100M,1G")]
    pub sizes: Vec<Size>,

    /// One-row updates per mode, each its own transaction, then as many one-row inserts; the
    /// checkpoint measured right after the updates covers these commits
    #[arg(long, value_name = "N", default_value_t = DEFAULT_UPDATES,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub updates: u64,

    /// The cache directory: the databases built for each size are kept here and reused by
    /// later runs, and the working copies made here [default: /var/tmp/onesync-scale]
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,

    /// Run each mode this many times per size, the modes taking turns; every figure is the
    /// median of the rounds
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=50))]
    pub rounds: u64,

    /// Seed of the rows chosen
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Write {"results":[...],"skipped":[...]} (one result per size and mode) to FILE, or to
    /// stdout with "-" (then nothing else goes to stdout)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,

    /// Also write the results, stamped with the command, commit, date and machine, to
    /// DIR/scale-DATE.md (the table) and DIR/scale-DATE.json (e.g. docs/results)
    #[arg(long, value_name = "DIR")]
    pub results: Option<PathBuf>,
}

/// One mode at one size: each figure the median of the rounds.
#[derive(Serialize, Debug, Clone)]
pub struct ScaleResult {
    pub size: String,
    pub size_bytes: u64,
    /// Rows of table t as built (the measurements add `updates` more).
    pub rows: u64,
    pub mode: &'static str,
    /// The cached database the mode's working copies were made of (the plain file for wal,
    /// the store for onesync), bytes.
    pub file_bytes: u64,
    pub updates: u64,
    pub rounds: u64,
    /// A fresh process's open to its first query's row.
    pub open_ms: f64,
    pub updates_per_s: f64,
    /// updates/s and inserts/s over wal's at the same size (the median of the rounds' ratios).
    pub ratio: f64,
    pub inserts_per_s: f64,
    pub inserts_ratio: f64,
    pub peak_rss_mib: f64,
    /// Bytes written per update commit, checkpoints included.
    pub bytes_per_update_commit: f64,
    /// The store's checkpoints during the updates (`None` for wal).
    pub checkpoints: Option<f64>,
    /// The checkpoint forced right after the updates: its time and the bytes it wrote
    /// (`scale_child::force_checkpoint`), and for a store the commits it covered (`None` for
    /// wal, or when the store checkpointed by itself during the updates in some round).
    pub checkpoint_ms: f64,
    pub checkpoint_kib: f64,
    pub checkpoint_commits: Option<f64>,
    /// The store's checkpoints in it: 2 when a compacting one followed, giving the file's
    /// free end back (its moved pages are in `checkpoint_kib`); wal 1.
    pub checkpoint_count: f64,
    /// A fresh process's open to its first query's row after the measuring process died by
    /// SIGKILL without closing.
    pub reopen_after_kill_ms: f64,
    pub rounds_updates_per_s: Vec<f64>,
    pub rounds_ratio: Vec<f64>,
}

/// A size there was no room for.
#[derive(Serialize, Debug, Clone)]
pub struct Skipped {
    pub size: String,
    pub reason: String,
}

#[derive(Serialize)]
struct Results<'a> {
    /// What ran, from which commit, when and where (with `--results`).
    #[serde(skip_serializing_if = "Option::is_none")]
    stamp: Option<&'a Stamp>,
    /// The cache directory.
    dir: &'a Path,
    results: &'a [ScaleResult],
    skipped: &'a [Skipped],
}

/// One mode's run: its measuring child's report and the reopen after the kill.
struct Run {
    child: ChildReport,
    reopen_ms: f64,
}

pub fn run(args: &ScaleArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    let dir = cache_dir(args.dir.as_deref())?;
    for left in leftover_work_dirs(&dir)? {
        eprintln!(
            "bench scale: {} is left from an interrupted run (or one still running): remove it \
             for its room",
            left.display()
        );
    }
    let stamp = Stamp::now(&dir);
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for &size in &args.sizes {
        let cached = Cached::in_dir(&dir, size);
        if let Some((need, free)) = cached.missing_room(&dir, size)? {
            let reason = format!(
                "it needs about {} free in {} (what is not built yet of the plain database and \
                 its store copy, and a working copy), and {} are free",
                gib(need),
                dir.display(),
                gib(free)
            );
            eprintln!("bench scale: skipping {size}: {reason}");
            skipped.push(Skipped {
                size: size.to_string(),
                reason,
            });
            continue;
        }
        let rows = ensure(&cached, size).with_context(|| format!("building the {size} databases"))?;
        results
            .extend(measure_size(args, &dir, &cached, size, rows).with_context(|| format!("size {size}"))?);
    }
    let table = table(args, &dir, &results, &skipped);
    output::emit(
        args.json.as_deref(),
        &Results {
            stamp: None,
            dir: &dir,
            results: &results,
            skipped: &skipped,
        },
        &table,
        Human::Stdout,
    )?;
    if let Some(out) = &args.results {
        let stamped = Results {
            stamp: Some(&stamp),
            dir: &dir,
            results: &results,
            skipped: &skipped,
        };
        for path in write_results(out, &stamped, &table, args.updates)? {
            eprintln!("bench scale: wrote {}", path.display());
        }
    }
    // Nothing measured is no answer.
    Ok(if results.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `scale-DATE.md` (the stamp and the table) and `scale-DATE.json` in `dir`.
/// (`scale-DATE-N-updates` when `--updates` is not the default, so that both stay.)
fn write_results(dir: &Path, results: &Results, table: &str, updates: u64) -> Result<Vec<PathBuf>> {
    let stamp = results.stamp.context("results to write carry their stamp")?;
    std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    let stem = if updates == DEFAULT_UPDATES {
        format!("scale-{}", stamp.date())
    } else {
        format!("scale-{}-{updates}-updates", stamp.date())
    };
    let md = format!(
        "# onesync at size: open, memory, throughput and checkpoints against WAL FULL\n\n\
         Generated by `onesync-lab bench scale --results`; do not edit (rerun it).\n\n{}\n\
         ```text\n{}```\n",
        stamp_lines(stamp),
        table
    );
    let files = [
        (format!("{stem}.md"), md),
        (
            format!("{stem}.json"),
            serde_json::to_string_pretty(results)? + "\n",
        ),
    ];
    write_files(dir, files)
}

/// Both modes at `size`, over the rounds.
fn measure_size(
    args: &ScaleArgs,
    dir: &Path,
    cached: &Cached,
    size: Size,
    rows: u64,
) -> Result<Vec<ScaleResult>> {
    let mut runs: Vec<Vec<Run>> = MODES.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        // The same rows for both modes of a round.
        let seed = args.seed.wrapping_add(round - 1);
        for i in round_order(MODES.len(), round) {
            let mode = MODES[i];
            let run = measure_mode(dir, cached, size, rows, mode, args.updates, seed)
                .with_context(|| format!("mode {} (round {round})", mode.name()))?;
            runs[i].push(run);
        }
    }
    let base = &runs[0];
    let results = MODES
        .iter()
        .zip(&runs)
        .map(|(&mode, runs)| {
            let figure = |f: &dyn Fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
            let rounds_updates_per_s: Vec<f64> = runs.iter().map(|r| r.child.updates_per_s).collect();
            let rounds_ratio: Vec<f64> = runs
                .iter()
                .zip(base)
                .map(|(r, b)| per(r.child.updates_per_s, b.child.updates_per_s))
                .collect();
            let inserts_ratios: Vec<f64> = runs
                .iter()
                .zip(base)
                .map(|(r, b)| per(r.child.inserts_per_s, b.child.inserts_per_s))
                .collect();
            let file = if mode == Mode::Wal {
                &cached.plain
            } else {
                &cached.store
            };
            ScaleResult {
                size: size.to_string(),
                size_bytes: size.bytes(),
                rows,
                mode: mode.name(),
                file_bytes: file_len(file).unwrap_or(0),
                updates: args.updates,
                rounds: args.rounds,
                open_ms: figure(&|r| r.child.open_ms),
                updates_per_s: median(&rounds_updates_per_s),
                ratio: median(&rounds_ratio),
                inserts_per_s: figure(&|r| r.child.inserts_per_s),
                inserts_ratio: median(&inserts_ratios),
                peak_rss_mib: figure(&|r| r.child.peak_rss_kib as f64 / 1024.0),
                bytes_per_update_commit: figure(&|r| {
                    per(r.child.update_bytes as f64, r.child.update_commits as f64)
                }),
                checkpoints: runs
                    .iter()
                    .all(|r| r.child.update_checkpoints.is_some())
                    .then(|| figure(&|r| r.child.update_checkpoints.unwrap_or(0) as f64)),
                checkpoint_ms: figure(&|r| r.child.checkpoint_ms),
                checkpoint_kib: figure(&|r| r.child.checkpoint_bytes as f64 / 1024.0),
                checkpoint_count: figure(&|r| r.child.checkpoint_count as f64),
                checkpoint_commits: runs
                    .iter()
                    .all(|r| r.child.checkpoint_commits.is_some())
                    .then(|| figure(&|r| r.child.checkpoint_commits.unwrap_or(0) as f64)),
                reopen_after_kill_ms: figure(&|r| r.reopen_ms),
                rounds_updates_per_s,
                rounds_ratio,
            }
        })
        .collect();
    Ok(results)
}

/// One mode on a fresh working copy: the measuring child (killed at its end), then the
/// reopening child.
fn measure_mode(
    dir: &Path,
    cached: &Cached,
    size: Size,
    rows: u64,
    mode: Mode,
    updates: u64,
    seed: u64,
) -> Result<Run> {
    let work = tempfile::Builder::new()
        .prefix(WORK_DIR_PREFIX)
        .tempdir_in(dir)
        .with_context(|| format!("making a work directory in {}", dir.display()))?;
    let copy = working_copy(cached, work.path(), size, mode == Mode::Wal)?;
    let spinner = phase_spinner(
        mode.name(),
        "open, updates, a checkpoint and inserts in a child process",
    );
    let mut child = ChildRun {
        db: &copy,
        mode,
        rows,
        updates,
        seed,
        kill: true,
    };
    let measured = child.run()?;
    spinner.set_message("reopening after the kill");
    child.updates = 0;
    child.kill = false;
    let reopened = child.run().context("reopening after the kill")?;
    spinner.finish_and_clear();
    Ok(Run {
        child: measured,
        reopen_ms: reopened.open_ms,
    })
}

/// "-" for a missing figure.
fn or_dash(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
}

pub fn table(args: &ScaleArgs, dir: &Path, results: &[ScaleResult], skipped: &[Skipped]) -> String {
    let rounds = if args.rounds > 1 {
        format!(", the median of {} rounds, the modes taking turns", args.rounds)
    } else {
        String::new()
    };
    let mut out = format!(
        "bench scale ({} one-row updates, a checkpoint, then as many inserts, per mode, each in a \
         fresh process on a fresh copy{rounds}; cache {}):\n",
        args.updates,
        dir.display()
    );
    let width = MODES.iter().map(|m| m.name().len()).max().unwrap_or(0);
    out.push_str(&format!(
        "{:>5}  {:<width$} {:>8} {:>10} {:>6} {:>10} {:>9} {:>13} {:>12} {:>11} {:>11} {:>13}\n",
        "size",
        "mode",
        "open ms",
        "updates/s",
        "ratio",
        "inserts/s",
        "peak RSS",
        "bytes/update",
        "checkpoints",
        "checkpoint",
        "checkpoint",
        "reopen after"
    ));
    out.push_str(&format!(
        "{:>5}  {:<width$} {:>8} {:>10} {:>6} {:>10} {:>9} {:>13} {:>12} {:>11} {:>11} {:>13}\n",
        "", "", "", "", "", "", "MiB", "commit", "", "ms", "KiB", "kill ms"
    ));
    for r in results {
        // A store's forced checkpoint, per checkpoint it made (a compacting one may follow);
        // wal's checkpoints run inside its commits, so its forced one finds little to do.
        let store = r.mode == Mode::Onesync.name();
        let per_checkpoint = store.then(|| r.checkpoint_kib / r.checkpoint_count.max(1.0));
        out.push_str(&format!(
            "{:>5}  {:<width$} {:>8.1} {:>10.0} {:>6.2} {:>10.0} {:>9.1} {:>13.0} {:>12} {:>11} {:>11} {:>13.1}\n",
            r.size,
            r.mode,
            r.open_ms,
            r.updates_per_s,
            r.ratio,
            r.inserts_per_s,
            r.peak_rss_mib,
            r.bytes_per_update_commit,
            or_dash(r.checkpoints, 0),
            or_dash(store.then_some(r.checkpoint_ms), 1),
            or_dash(per_checkpoint, 0),
            r.reopen_after_kill_ms,
        ));
    }
    out.push_str(concat!(
        "(open ms: a fresh process's open to its first query's row (SELECT v FROM t WHERE id = ?), ",
        "the files hot in the page cache\n",
        " ratio: updates/s over wal's at the same size; peak RSS: the process's VmHWM after the inserts\n",
        " bytes/update commit: bytes written per update commit, checkpoints included (onesync: the ",
        "store's counters; wal: the counting shim's, WAL frames and checkpoints into the database)\n",
        " checkpoints: the store's during the updates (wal's are not counted)\n",
        " checkpoint ms, KiB: onesync's checkpoint forced right after the updates, so after the ",
        "same commits from a fresh open at every size (PRAGMA onesync_checkpoint): ms its ",
        "checkpoint_micros, KiB its checkpoint_bytes (the mapping and both header copies; the ",
        "data pages were written at commit) per checkpoint it made (a compacting one may follow ",
        "to give the file's end back). It covers every update commit unless the store ",
        "checkpointed by itself (checkpoints). wal: its checkpoints copy pages back inside its ",
        "commits (every 1000 log pages), counted in bytes/update commit\n",
        " reopen after kill ms: the same open and query in a fresh process after the measuring one ",
        "died by SIGKILL without closing)\n",
    ));
    let mut sizes: Vec<&ScaleResult> = Vec::new();
    for r in results {
        if !sizes.iter().any(|s| s.size == r.size) {
            sizes.push(r);
        }
    }
    for s in sizes {
        let files: Vec<String> = results
            .iter()
            .filter(|r| r.size == s.size)
            .map(|r| format!("{} {:.1} MiB", r.mode, r.file_bytes as f64 / (1 << 20) as f64))
            .collect();
        out.push_str(&format!(
            "{}: {} rows of 1000 bytes; files: {}\n",
            s.size,
            s.rows,
            files.join(", ")
        ));
    }
    for r in results.iter().filter(|r| r.rounds > 1) {
        let rounds: Vec<String> = r
            .rounds_updates_per_s
            .iter()
            .zip(&r.rounds_ratio)
            .map(|(u, ratio)| format!("{u:.0} ({ratio:.2})"))
            .collect();
        out.push_str(&format!(
            "{} {}: updates/s (ratio) by round: {}\n",
            r.size,
            r.mode,
            rounds.join(", ")
        ));
    }
    for r in results {
        let store = r.mode == Mode::Onesync.name();
        if store && r.checkpoint_commits != Some(r.updates as f64) {
            let covered = r
                .checkpoint_commits
                .map_or("fewer (the store checkpointed by itself)".to_owned(), |c| {
                    format!("{c:.0}")
                });
            out.push_str(&format!(
                "{} {}: the forced checkpoint covered {covered} commits, not the {} updates\n",
                r.size, r.mode, r.updates
            ));
        }
        if store && r.checkpoint_count > 1.0 {
            out.push_str(&format!(
                "{} {}: the forced checkpoint was {:.0} (a compacting one followed to give the \
                 file's free end back; its KiB is per checkpoint)\n",
                r.size, r.mode, r.checkpoint_count
            ));
        }
    }
    for s in skipped {
        out.push_str(&format!("skipped {}: {}\n", s.size, s.reason));
    }
    out
}
