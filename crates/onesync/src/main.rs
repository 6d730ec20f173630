//! `onesync`: the user's command. Converts between plain SQLite files and onesync stores,
//! checks a store, tells what a file is, and salvages a damaged store (see README.md).
#![forbid(unsafe_code)]

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "onesync",
    version,
    about = "Convert between plain SQLite files and onesync stores, check a store, tell what a file is",
    long_about = "Convert between plain SQLite files and onesync stores, check a store, tell what a file is.\n\n\
        A onesync store is a SQLite database in a failure-atomic page store (one write and one\n\
        flush per commit); programs open it through the onesync VFS (file:PATH?vfs=onesync).\n\
        No command overwrites a file; import, export and salvage check what they wrote and\n\
        remove it if the check fails."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Copy a plain SQLite database into a new store (VACUUM INTO; integrity-checked)
    Import {
        /// Plain SQLite database to read (not changed)
        src: PathBuf,
        /// Store to create; must not exist
        dst: PathBuf,
    },
    /// Copy a store's database into a new plain SQLite file (backup API; integrity-checked)
    Export {
        /// onesync store to read (not changed)
        src: PathBuf,
        /// Plain SQLite file to create; must not exist
        dst: PathBuf,
    },
    /// Integrity-check a store and show its counters (exit status 1 if the check fails)
    Check {
        /// onesync store (opened read-only)
        store: PathBuf,
    },
    /// Tell what a file is (store, plain SQLite or other), its page size and tables
    Info {
        /// Any file (opened read-only)
        file: PathBuf,
    },
    /// Rebuild a database from a replica (onesync_replicate's, or Litestream's: file:///DIR
    /// or s3://BUCKET/PREFIX) as a plain SQLite file, or with --store a new store
    Restore {
        /// The replica's URL
        url: String,
        /// File to create; must not exist
        out: PathBuf,
        /// The state after this TXID (hexadecimal, as in the replica's file names)
        #[arg(long)]
        txid: Option<String>,
        /// The state as of this time (RFC 3339: YYYY-MM-DDTHH:MM:SSZ)
        #[arg(long)]
        timestamp: Option<String>,
        /// Write a onesync store rather than a plain SQLite file
        #[arg(long)]
        store: bool,
    },
    /// Copy what a damaged store still holds (its commits up to the first read error) into a
    /// new store
    Salvage {
        /// The damaged store (opened read-only, not changed)
        store: PathBuf,
        /// Store to create; must not exist
        new: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Import { src, dst } => cli::convert::import(src, dst),
        Command::Export { src, dst } => cli::convert::export(src, dst),
        Command::Check { store } => cli::inspect::check(store),
        Command::Info { file } => cli::inspect::info(file),
        Command::Salvage { store, new } => cli::convert::salvage(store, new),
        Command::Restore {
            url,
            out,
            txid,
            timestamp,
            store,
        } => cli::restore::target(txid.as_deref(), timestamp.as_deref())
            .and_then(|target| cli::restore::restore(url, out, target, *store)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line, whatever the causes said.
            let message = format!("{error:#}").replace('\n', " ");
            eprintln!("onesync: error: {message}");
            ExitCode::FAILURE
        }
    }
}
