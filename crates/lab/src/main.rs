//! `onesync`: the lab around the onesync store (workloads, meters, reports).

mod loopfs;
mod meter;
mod progress;
mod store_bench;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "onesync",
    version,
    about = "The onesync lab: benchmarks and meters for the onesync page store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure the store's commit rate, flushes and bytes per commit (1 and 4 threads), a raw
    /// pwrite+fdatasync baseline and recovery time; with --fs also the device's view
    StoreBench(store_bench::StoreBenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::StoreBench(args) => store_bench::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("onesync: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
