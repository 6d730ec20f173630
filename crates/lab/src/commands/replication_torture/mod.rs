//! `onesync-lab replication-torture`: issue 43's faults. Writer processes (`writer.rs`: FULL,
//! NORMAL, `concurrent=1` and sync — `onesync_replicate_sync=1` with a timeout — each
//! replicating the same database to one replica, a directory or with `--s3` a local S3
//! server) commit one-row transactions; one at a random moment is killed with SIGKILL — the
//! shipping one (the one whose `PRAGMA onesync_replicate` says `shipping`) half the time —
//! and a new writer of its kind takes its place. After each kill (`--check-every`) the
//! replica is checked (`replica_check.rs`): no gap and no duplicate TXID in any level,
//! onesync's restore succeeds, is a consistent prefix, holds every commit a writer reported
//! at or below a `shipped_seq` read before and every commit a sync writer reported
//! acknowledged (whatever its seq), and no COMMIT a sync writer reported refused.
//!
//! With `--s3` the server is also stopped now and then for a few kills (`--outage-one-in`),
//! then started again: commits go on, the writers report the lag growing and `last_error`
//! set, a sync writer's COMMIT returns unacknowledged past its timeout and the next ones are
//! refused with `SQLITE_IOERR` (the VFS's contract; any other code fails the run); after the
//! restart the shipping catches up (the torture waits for a `shipped_seq` past every commit
//! made before the restart) and the replica is checked again.
//!
//! `--power-cuts N` cuts the store's power instead (`power_cuts.rs`: through the kernel on
//! an emulated device, or simulated from the store's write log with `--simulated`).
//!
//! At the end the writers close, a last connection waits for the lag to drain, and the last
//! restore must equal the store (every `log` row and `t`), every commit reported (a sync
//! writer's unacknowledged ones too: the contract keeps them here) must be in the store and
//! no refused one, every restore must have been a prefix of the store's log, every file
//! still there must hold the bytes it held when first seen, and stock `litestream restore`
//! must give the same bytes as ours (`harness.rs`).
//!
//! Negative controls (`--negative-control`, `onesync-lab-hooked` only): onesync-replica's
//! sabotage (`ONESYNC_REPLICA_SABOTAGE`) in the writers: `replication-lease-ignored` (every
//! writer ships), `position-saved-ahead`, `sync-ack-before-upload` (a sync COMMIT returns before
//! the upload) and, with `--power-cuts`, `ships-undurable` (the shipper ships commits not
//! yet durable); each must fail.

pub mod harness;
pub mod ledger;
pub mod power_cuts;
pub mod replica_check;
pub mod writer;

use std::path::Path;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::output::{self, Human};
use crate::progress::{log_every, phase_bar};
use harness::{finish, Replica, Summary, CATCH_UP_LIMIT};
use ledger::{Ledger, Run, RunningWriter};
use replica_check::ReplicaChecker;

pub use harness::{NegativeControl, ReplicationTortureArgs};
pub use writer::{run as run_writer, WriterArgs};

/// How long an outage lasts at least (besides its 1 to 4 kills): long enough for an upload
/// to fail (the S3 client gives up on an unreachable server within a few seconds).
const OUTAGE_MS: std::ops::RangeInclusive<u64> = 1500..=4000;

/// An S3 outage under way.
struct Outage {
    kills_left: u32,
    at_least: Duration,
    stopped: Instant,
    commits_before: u64,
    refusals_before: u64,
    errors_before: u64,
}

pub fn run(args: &ReplicationTortureArgs) -> Result<ExitCode> {
    args.delays()?;
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
        kinds: args.kinds.iter().map(|k| k.name()).collect(),
        kills_requested: if args.power_cuts.is_some() { 0 } else { args.kills },
        ..Summary::default()
    };
    let fault = match args.power_cuts {
        Some(n) if args.simulated => format!("{n} simulated power cuts"),
        Some(n) => format!("{n} power cuts ({} on {})", args.fs, args.emulate.name()),
        None => format!("{} kills", args.kills),
    };
    let kinds: Vec<&str> = args.kinds.iter().map(|k| k.name()).collect();
    eprintln!(
        "replication-torture: {fault} of {} writers ({} in turn) replicating to {}{}, seed {seed}, in {}",
        args.writers,
        kinds.join(", "),
        replica.url,
        args.negative_control
            .map(|c| format!(" with the negative control {}", c.name()))
            .unwrap_or_default(),
        work.path().display()
    );
    let run = Run {
        exe,
        db: work.path().join("app.onesync"),
        url: replica.url.clone(),
        interval_ms: args.interval_ms,
        sync_timeout_ms: args.sync_timeout_ms,
        sync_interval_ms: args.sync_interval_ms,
        seed,
        env: replica.env.clone(),
        sabotage: args.negative_control.map(NegativeControl::name),
        kinds: args.kinds.clone(),
    };
    let started = Instant::now();
    let outcome = if args.power_cuts.is_some() {
        power_cuts::torture(args, run, work.path(), &replica, &go_bin, &mut summary)
    } else {
        torture(args, &run, work.path(), &mut replica, seed, &go_bin, &mut summary)
    };
    summary.seconds = started.elapsed().as_secs_f64();
    if let Err(error) = outcome {
        summary.failures += 1;
        summary.first_failure = Some(format!("{error:#}"));
    }
    output::emit(args.json.as_deref(), &summary, &report(&summary), Human::Stdout)?;
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

fn report(summary: &Summary) -> String {
    let faults = match &summary.power_cuts {
        None => format!(
            "{} of {} kills ({} of the shipping writer, {} before ready)",
            summary.kills, summary.kills_requested, summary.shipper_kills, summary.kills_before_ready
        ),
        Some(c) => format!(
            "{} of {} power cuts via {} ({} right after an upload, {} waits for one timed out; {}; at the last, {} durable commits checked in the recovered \
             store, {} shipped and {} acknowledged ones in the restore; {} NORMAL commits taken back, \
             the replica up to {} log rows behind; {} writers ended by I/O errors, {} checker \
             complaints, cached writes {} ({} lost, {} kept, {} torn), position file kept/older/\
             gone/empty {:?}; {:.2} s per cut)",
            c.power_cuts,
            c.power_cuts_requested,
            c.via,
            c.cuts_after_upload,
            c.upload_waits_timed_out,
            c.medium,
            c.durable_commits_checked,
            c.shipped_commits_checked,
            c.sync_acks_checked,
            c.normal_commits_lost,
            c.max_replica_behind_rows,
            c.writers_ended_by_io_error,
            c.fsck_complaints,
            c.cached_writes.cached,
            c.cached_writes.lost,
            c.cached_writes.kept,
            c.cached_writes.torn,
            c.position_fates,
            c.seconds_per_cut
        ),
    };
    format!(
        "replication-torture ({} replica{}, {} writers: {}, seed {}): {faults}, {} writers started, \
         {} commits reported (sync writers: {} acknowledged, {} unacknowledged past the timeout, \
         {} COMMITs refused, codes {:?}); {} restores checked ({} listings or restores done \
         again), newest TXID {}, {} files at the end ({} hashed); {} S3 outage(s) ({} with \
         last_error reported, {} commits and {} refusals during them, lag up to {} commits, \
         caught up within {} ms); stock litestream restore: {}; {} failure(s) in {:.1} s",
        summary.replica,
        summary
            .negative_control
            .map(|c| format!(", negative control {c}"))
            .unwrap_or_default(),
        summary.writers,
        summary.kinds.join(" "),
        summary.seed,
        summary.writers_started,
        summary.commits,
        summary.sync_acked,
        summary.sync_unacked,
        summary.sync_refused,
        summary.sync_refusal_codes,
        summary.restores_checked,
        summary.checks_retried,
        summary.newest_txid,
        summary.files,
        summary.files_hashed,
        summary.outages,
        summary.outages_error_reported,
        summary.commits_during_outages,
        summary.refusals_during_outages,
        summary.max_lag_commits,
        summary.max_catch_up_ms,
        summary.stock_litestream,
        summary.failures,
        summary.seconds
    )
}

/// The kills and checks, then the end.
fn torture(
    args: &ReplicationTortureArgs,
    run: &Run,
    work: &Path,
    replica: &mut Replica,
    seed: u64,
    go_bin: &Path,
    summary: &mut Summary,
) -> Result<()> {
    let scratch = work.join("restored.db");
    {
        let conn = crate::sqlite::open_onesync(&run.db, true)?;
        conn.execute_batch(writer::SCHEMA)?;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ledger = Ledger::default();
    let mut checker = ReplicaChecker::default();
    let mut next_writer = 0u64;
    let mut start = |kind, summary: &mut Summary| {
        next_writer += 1;
        summary.writers_started += 1;
        RunningWriter::start(run, next_writer, kind, None)
    };
    let mut writers = Vec::new();
    for i in 0..args.writers {
        writers.push(start(run.kind_of(i), summary)?);
    }
    // With --s3: the outage under way.
    let mut outage: Option<Outage> = None;
    let bar = phase_bar("kills", args.kills);
    let log_every = log_every(args.kills);
    let started = Instant::now();
    let (min_delay, max_delay) = args.delays()?;
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
                    refusals_before: ledger.refusals.len() as u64,
                    errors_before: ledger.error_reports,
                });
            }
        }
        thread::sleep(Duration::from_millis(rng.random_range(min_delay..=max_delay)));
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
                summary.refusals_during_outages += ledger.refusals.len() as u64 - o.refusals_before;
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
        ledger
            .check_refusal_codes()
            .with_context(|| format!("by kill {kill}"))?;
        if outage.is_none() && kill.is_multiple_of(args.check_every.max(1)) {
            for w in writers.iter_mut() {
                w.drain(&mut ledger)?;
            }
            let expect = ledger.expect_now();
            checker
                .check_files(replica.client.as_ref())
                .and_then(|_| checker.check_restore(replica.client.as_ref(), &scratch, &expect))
                .with_context(|| format!("after kill {kill}"))?;
        }
        summary.commits = ledger.commits.len() as u64;
        summary.count_sync(&ledger);
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
    ledger.check_refusal_codes()?;
    summary.commits = ledger.commits.len() as u64;
    summary.count_sync(&ledger);
    finish(&run.db, &scratch, replica, &ledger, &mut checker, go_bin, summary)
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
