//! `onesync-lab bench WORKLOAD --mode M1,M2,...`: one workload run on every commit scheme in the
//! same run, each on a fresh database (and with `--fs`, a fresh filesystem), with the same
//! meters: transactions per second, commit latency percentiles, and per transaction the
//! write calls, bytes written and fsync-family calls, plus with `--fs` the block device's
//! write requests, KiB and flushes.
//!
//! What differs between the schemes (how a connection is opened, where the write counters
//! come from) is the scheme's (`schemes/`); what a transaction does is the workload's
//! (`workloads/`).
//!
//! `onesync-lab bench writers --workload ...` (concurrent writers, [`writers`]), `bench scale
//! --sizes ...` (a database as it grows, [`scale`]) and `bench replication` (what replicating
//! every commit costs, [`replication`]) are subcommands beside the positional workload, and
//! `bench` with none of them runs the headline comparison ([`headline`]): [`BenchCommand`] is
//! one of the five.

pub mod headline;
mod litestream;
pub mod measure;
mod replica_watch;
pub mod replication;
mod replication_run;
pub mod scale;
mod scale_child;
mod scale_data;
mod writer_group;
pub mod writers;

pub use scale_child::{run_child as run_scale_child, ScaleChildArgs};
pub use writer_group::{run_child as run_writers_child, WritersChildArgs};

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::output::{self, Human};

pub use measure::{measure, ratio, run, BenchArgs, ModeResult, PerTxn, Place};

/// `onesync-lab bench`: `bench WORKLOAD [OPTIONS]` (one workload, [`BenchArgs`]), `bench writers
/// --workload W [OPTIONS]` (concurrent writers, [`writers::WritersArgs`]), `bench scale
/// [OPTIONS]` (database sizes, [`scale::ScaleArgs`]), or `bench` alone (the headline,
/// [`HeadlineArgs`]). Written by hand because the positional WORKLOAD is
/// optional and decides which (clap's derive cannot leave a flattened struct out when its
/// arguments are missing).
#[derive(Debug)]
pub enum BenchCommand {
    Workload(BenchArgs),
    Writers(writers::WritersArgs),
    Scale(scale::ScaleArgs),
    Replication(replication::ReplicationArgs),
    Headline(HeadlineArgs),
}

/// `bench` with no workload: the headline comparison ([`headline`]).
#[derive(Debug, Clone)]
pub struct HeadlineArgs {
    pub rounds: u64,
    pub txns: u64,
    pub dir: Option<PathBuf>,
    pub json: Option<PathBuf>,
}

/// The one option of the headline that a workload run does not take.
#[derive(clap::Args, Debug)]
struct RoundsArg {
    /// Without a WORKLOAD: rounds of the headline; every round runs every mode once, and
    /// each figure is the median of the rounds, with a 95% interval from 2 rounds on
    /// [default: 3]
    #[arg(long, value_name = "N", conflicts_with = "workload",
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: Option<u64>,
}

/// The arguments `bench` with no workload takes; any other is an error there.
const HEADLINE_ARGUMENTS: [&str; 4] = ["rounds", "txns", "dir", "json"];

/// "--mode", or the id of an argument without a long name.
fn arg_name(arg: &clap::Arg) -> String {
    arg.get_long()
        .map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"))
}

impl HeadlineArgs {
    fn from_matches(matches: &clap::ArgMatches) -> Result<HeadlineArgs, clap::Error> {
        use clap::parser::ValueSource;
        use clap::Args;
        let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        // The workload run's arguments, listed by building them once: a new one is covered.
        let workload_arguments = BenchArgs::augment_args(clap::Command::new("bench"));
        if let Some(other) = workload_arguments.get_arguments().find(|arg| {
            let id = arg.get_id().as_str();
            given(id) && !HEADLINE_ARGUMENTS.contains(&id)
        }) {
            let other = arg_name(other);
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "the argument '{other}' needs a WORKLOAD: `bench` without one runs the \
                     headline comparison, which takes only --rounds, --txns, --dir and --json\n"
                ),
            ));
        }
        Ok(HeadlineArgs {
            rounds: matches
                .get_one::<u64>("rounds")
                .copied()
                .unwrap_or(headline::DEFAULT_ROUNDS),
            // Not bench's default for a workload: the headline's own.
            txns: matches
                .get_one::<u64>("txns")
                .copied()
                .filter(|_| given("txns"))
                .unwrap_or(headline::DEFAULT_TXNS),
            dir: matches.get_one::<PathBuf>("dir").cloned(),
            json: matches.get_one::<PathBuf>("json").cloned(),
        })
    }
}

#[derive(clap::Subcommand, Debug)]
enum BenchSubcommand {
    /// Concurrent writers on one database (threads or processes, one connection each):
    /// txn/s, retries, commit latency; hot-rows checks the counters against the commits
    Writers(writers::WritersArgs),
    /// How onesync behaves as a database grows (--sizes 100M,1G), against WAL at FULL: open
    /// time, updates/s, inserts/s, peak RSS, bytes per commit, recovery after a kill
    Scale(scale::ScaleArgs),
    /// What replicating every commit costs (issue 43): onesync alone and replicating
    /// (directory, S3 with --s3) against WAL alone and with stock Litestream: txn/s, ratio,
    /// commit latency, replication lag, bytes uploaded per transaction
    Replication(replication::ReplicationArgs),
}

impl clap::FromArgMatches for BenchCommand {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut matches.clone())
    }

    fn from_arg_matches_mut(matches: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        use clap::Subcommand;
        if matches
            .subcommand_name()
            .is_some_and(BenchSubcommand::has_subcommand)
        {
            Ok(match BenchSubcommand::from_arg_matches_mut(matches)? {
                BenchSubcommand::Writers(args) => BenchCommand::Writers(args),
                BenchSubcommand::Scale(args) => BenchCommand::Scale(args),
                BenchSubcommand::Replication(args) => BenchCommand::Replication(args),
            })
        } else if matches.contains_id("workload") {
            BenchArgs::from_arg_matches_mut(matches).map(BenchCommand::Workload)
        } else {
            HeadlineArgs::from_matches(matches).map(BenchCommand::Headline)
        }
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for BenchCommand {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        use clap::Subcommand;
        let cmd = RoundsArg::augment_args(BenchArgs::augment_args(cmd));
        BenchSubcommand::augment_subcommands(cmd.mut_arg("workload", |a| a.required(false)))
            .args_conflicts_with_subcommands(true)
            .subcommand_negates_reqs(true)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Runs `onesync-lab bench ...`.
pub fn run_command(command: &BenchCommand) -> Result<ExitCode> {
    match command {
        BenchCommand::Workload(args) => run(args),
        BenchCommand::Writers(args) => writers::run(args),
        BenchCommand::Scale(args) => scale::run(args),
        BenchCommand::Replication(args) => replication::run(args),
        BenchCommand::Headline(args) => run_headline(args),
    }
}

/// Runs `onesync-lab bench` with no workload: the headline table, or its JSON.
fn run_headline(args: &HeadlineArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    let measured = headline::measure(args.rounds, args.txns, args.dir.as_deref())?;
    output::emit(
        args.json.as_deref(),
        &measured,
        &headline::table(&measured),
        Human::Stdout,
    )?;
    Ok(ExitCode::SUCCESS)
}
