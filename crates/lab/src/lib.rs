//! The lab around the onesync store (workloads, meters, reports): the `onesync-lab`
//! command, as a library so that two binaries share it. `src/main.rs` is `onesync-lab`;
//! `src/bin/onesync-lab-hooked.rs` is the same command built with the feature `test-hooks`
//! (the store's sabotage, write log and invariant checks), which the explorer, the
//! tortures and the negative controls need ([`TEST_HOOKS_BUILD`]).
#![forbid(unsafe_code)]

mod commands;
mod hooks;
mod loopfs;
mod meters;
mod output;
mod progress;
mod schemes;
mod sim;
mod sqlite;
mod vm;
mod workloads;

use commands::{
    bench, explore, flash, mvbt, replication_torture, report, store_bench, torture, vfs_concurrency,
    vfs_kill_torture,
};

use std::process::ExitCode;

pub use hooks::{HAS_TEST_HOOKS, TEST_HOOKS_BUILD};

use clap::{Parser, Subcommand};

/// The store's copy-on-write mapping allocates and frees nodes on every commit, in every
/// process that follows it, and glibc's malloc and free were a visible share of the lab's
/// CPU with many writer processes (`perf record -a -- onesync-lab bench writers --processes
/// 16`). Transparent huge pages stay off: with them the cross-process write lock was held
/// longer per commit. `libonesync.so` keeps the allocator of the process that loads it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "onesync-lab",
    version,
    about = "The onesync lab: benchmarks, meters and crash torture for the onesync page store and its SQLite VFS"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run a workload on several commit schemes (stock journal modes, WAL, onesync) in one
    /// run, each on a fresh database: TPS, latency percentiles, write calls, bytes and
    /// fsyncs per transaction, and with --fs the block device's writes, KiB and flushes
    ///
    /// `bench` with no workload runs the headline: one-row inserts on delete, wal, onesync,
    /// wal-normal and onesync-normal in a temporary directory, in alternating rounds (5 of
    /// 2000 transactions per mode by default): one table of txn/s, ratio to
    /// wal (FULL) or wal-normal (NORMAL), bytes and flushes per commit, p99.9 latency
    ///
    /// `bench writers --workload own-rows|shared-pages|hot-rows` runs concurrent writers
    /// (threads or processes) instead: txn/s, retries and commit latency per mode
    ///
    /// `bench scale --sizes 100M,1G` measures databases of those sizes on wal and onesync:
    /// open time, updates/s, inserts/s, peak RSS, bytes per commit, reopen after a kill
    ///
    /// `bench replication [--s3]` measures what replicating every commit costs: onesync
    /// alone and replicating, WAL alone and with stock Litestream: txn/s, ratio, latency, lag,
    /// bytes uploaded per transaction
    Bench(bench::BenchCommand),
    /// Bank transfers under simulated power cuts (and real kills) on one commit scheme;
    /// checks integrity, conservation of money and every acknowledged transfer
    Torture(torture::TortureArgs),
    /// Run the standard comparison (insert on ten modes, dbbench on WAL and onesync at FULL
    /// and NORMAL and onesync at OFF) and write report.html (SVG charts) and report.md (tables
    /// per durability class: NORMAL and OFF compared with wal-normal) into --out
    ///
    /// `report --results DIR` writes the headline's stamped results files instead
    /// (headline-DATE.md, .json, .svg); `--update-readme README.md` rewrites the README's
    /// results table from the newest of them
    Report(report::ReportArgs),
    /// Measure the store's commit rate, flushes and bytes per commit (1 and 4 threads), a raw
    /// pwrite+fdatasync baseline and recovery time; with --fs also the device's view
    StoreBench(store_bench::StoreBenchArgs),
    /// Kill a child running bank transfers through SQLite with SIGKILL at random moments;
    /// after each kill check integrity, conservation of money and every reported commit
    VfsKillTorture(vfs_kill_torture::KillTortureArgs),
    /// Writer processes (FULL, NORMAL, concurrent=1, sync replication) replicating one
    /// database; SIGKILL of a random one (often the shipping one) at random moments, with
    /// --s3 outages of the S3 server, or --power-cuts of the store's device; after each: no
    /// gap or duplicate TXID, restore succeeds, is a consistent prefix (of the store, after a
    /// cut) and holds every commit reported shipped or acknowledged; at the end stock
    /// Litestream agrees
    ReplicationTorture(replication_torture::ReplicationTortureArgs),
    /// Transactions per second of one-row inserts through the onesync VFS from 1 thread and
    /// from N threads, checking each COMMIT is durable when it returns
    VfsConcurrency(vfs_concurrency::ConcurrencyArgs),
    /// The X-FTL paper's experiments on a simulated NAND SSD with SQLite on it (partsupp, gc,
    /// fio, restart, torture): simulated time, NAND programs, erases, GC runs per mode
    Flash(flash::FlashArgs),
    /// The LS-MVBT paper's experiments (insert, mixed, recovery, node-size, ablation) against
    /// stock WAL and TRUNCATE, and its power-cut and kill torture
    Mvbt(mvbt::MvbtArgs),
    /// Run commands in a qemu VM with Debian's kernel on F2FS or ext4 (software emulation; the
    /// guest's disk is an image file, and killing qemu is a real power cut)
    Vm(vm::VmArgs),
    /// The crash-point explorer: scenarios of 1-3 processes running SQLite transactions
    /// through the onesync VFS, one process stopped at its k-th write, flush, lock or rename
    /// call for every k (strace), with and without a power cut then; checks integrity, money,
    /// every acknowledged commit, and that readers never showed what a power cut removed
    Explore(explore::ExploreArgs),
    /// A process of an `explore` scenario (not for direct use)
    #[command(name = "__explore-worker", hide = true)]
    ExploreWorker(explore::worker::WorkerArgs),
    /// The child process of `mvbt torture --kills` (not for direct use)
    #[command(name = "__mvbt-child", hide = true)]
    MvbtChild(mvbt::MvbtChildArgs),
    /// Inside the VM: the functional tests of the onesync-f2fs backend (not for direct use)
    #[command(name = "__vm-selftest", hide = true)]
    VmSelftest(vm::guest::SelftestArgs),
    /// Inside the VM: the child of `__vm-selftest` that dies mid-transaction
    #[command(name = "__vm-selftest-child", hide = true)]
    VmSelftestChild(vm::guest::SelftestChildArgs),
    /// Inside the VM: the power-cut workload of `vm torture`
    #[command(name = "__vm-tpcb", hide = true)]
    VmTpcb(vm::guest::TpcbArgs),
    /// One process's writers of `bench writers --processes` (not for direct use)
    #[command(name = "__bench-writers-child", hide = true)]
    BenchWritersChild(bench::WritersChildArgs),
    /// One measurement of `bench scale`, in a process of its own (not for direct use)
    #[command(name = "__bench-scale-child", hide = true)]
    BenchScaleChild(bench::ScaleChildArgs),
    /// The child process of vfs-kill-torture (not for direct use)
    #[command(name = "__transfer-child", hide = true)]
    TransferChild(vfs_kill_torture::TransferChildArgs),
    /// A writer process of replication-torture (not for direct use)
    #[command(name = "__replica-writer", hide = true)]
    ReplicaWriter(replication_torture::WriterArgs),
}

/// The command line of `onesync-lab` (and of `onesync-lab-hooked`): parse, dispatch, report.
pub fn main_entry() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Bench(command) => bench::run_command(command),
        Command::Report(args) => report::run(args),
        Command::Torture(args) => torture::run(args),
        Command::StoreBench(args) => store_bench::run(args).map(|()| ExitCode::SUCCESS),
        Command::VfsKillTorture(args) => vfs_kill_torture::run(args),
        Command::ReplicationTorture(args) => replication_torture::run(args),
        Command::VfsConcurrency(args) => vfs_concurrency::run(args),
        Command::Flash(args) => flash::run(args),
        Command::Mvbt(args) => mvbt::run(args),
        Command::Vm(args) => vm::run(args),
        Command::Explore(args) => explore::run(args),
        Command::ExploreWorker(args) => explore::worker::run(args).map(|()| ExitCode::SUCCESS),
        Command::MvbtChild(args) => mvbt::run_child(args).map(|()| ExitCode::SUCCESS),
        Command::VmSelftest(args) => vm::guest::selftest(args),
        Command::VmSelftestChild(args) => vm::guest::selftest_child(args).map(|()| ExitCode::SUCCESS),
        Command::VmTpcb(args) => vm::guest::tpcb(args).map(|()| ExitCode::SUCCESS),
        Command::BenchWritersChild(args) => bench::run_writers_child(args).map(|()| ExitCode::SUCCESS),
        Command::BenchScaleChild(args) => bench::run_scale_child(args).map(|()| ExitCode::SUCCESS),
        Command::TransferChild(args) => vfs_kill_torture::run_child(args).map(|()| ExitCode::SUCCESS),
        Command::ReplicaWriter(args) => replication_torture::run_writer(args).map(|()| ExitCode::SUCCESS),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("onesync-lab: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
