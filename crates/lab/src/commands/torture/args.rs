//! `torture`'s arguments and negative controls: below `mod.rs` (the simulated cuts and
//! kills) and `kernel_torture.rs` (cuts through the real kernel), which both take them.

use std::path::PathBuf;

use onesync_store::Sabotage;

use crate::commands::vfs_kill_torture::Synchronous;
use crate::loopfs::{EmulateArgs, FsKind};
use crate::schemes::Mode;

#[derive(clap::Args, Debug)]
pub struct TortureArgs {
    /// The commit scheme to torture
    #[arg(long, value_enum)]
    pub mode: Mode,

    /// Simulated power cuts
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub power_cuts: u64,

    /// Real SIGKILLs of a child process running transfers (0: none)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub kills: u64,

    /// Seed [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Write the summary as JSON to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,

    /// Cut power through the real kernel instead of a simulation: make this filesystem on an
    /// emulated device (--emulate), run transfer processes on it and cut the device's power
    /// (needs root, /dev/fuse and loop devices)
    #[arg(long, value_enum, value_name = "FS")]
    pub fs: Option<FsKind>,

    #[command(flatten)]
    pub emulate: EmulateArgs,

    /// With --fs: transfer processes running at each cut
    #[arg(long, value_name = "P", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=16))]
    pub processes: u64,

    /// With --fs: open every child connection with concurrent=1 (concurrent writers, a
    /// onesync mode only): the processes' write transactions run at once and share flushes
    #[arg(long, requires = "fs")]
    pub concurrent: bool,

    /// With --fs: the longest time from starting the processes to a random-moment cut
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub max_delay_ms: u64,

    /// With --fs: the image's size [default: 512]
    #[arg(long, value_name = "MIB", requires = "fs")]
    pub fs_size_mib: Option<u64>,

    /// With --fs: run the mode with this PRAGMA synchronous instead of its own (e.g. extra:
    /// journal_mode=DELETE then also syncs the directory after deleting its journal)
    #[arg(long, value_enum, value_name = "LEVEL", requires = "fs")]
    pub synchronous: Option<Synchronous>,

    /// With --fs btrfs: make the database's directory NOCOW (chattr +C), so that its files are
    /// overwritten in place as on ext4 and xfs instead of copied on write
    #[arg(long, requires = "fs")]
    pub nodatacow: bool,

    /// With --fs: cuts on one database before starting over on a fresh one (in the same
    /// filesystem), so that the ledger does not fill a small image
    #[arg(long, value_name = "N", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub cuts_per_database: u64,

    /// Run a negative control instead: it must fail (exit status non-zero). Applies to the
    /// power cuts of a onesync mode (kills cannot see it: the page cache survives a kill)
    #[arg(long, value_enum, value_name = "CONTROL")]
    pub negative_control: Option<NegativeControl>,

    /// onesync-normal: the loss window allowed beyond the store's flush interval (one flush,
    /// near-instant in the simulation, and the flusher thread's wake-up on a busy machine)
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub loss_window_slack_ms: u64,
}

/// A defect put back on purpose, which the torture must catch.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegativeControl {
    /// The store's flushes skip the device flush yet count their commits durable
    /// (`Sabotage::SkippedFlush`): commits reported durable are lost at a power cut
    SkippedFlush,
    /// A process flushing for every process reads how far they have written only after its
    /// flush (`Sabotage::FlushCoverageReadLate`): commits written during that flush are
    /// acknowledged unflushed (needs several processes)
    FlushCoverageReadLate,
}

impl NegativeControl {
    pub fn name(self) -> &'static str {
        match self {
            NegativeControl::SkippedFlush => "skipped-flush",
            NegativeControl::FlushCoverageReadLate => "flush-coverage-read-late",
        }
    }

    pub fn sabotage(self) -> Sabotage {
        match self {
            NegativeControl::SkippedFlush => Sabotage::SkippedFlush,
            NegativeControl::FlushCoverageReadLate => Sabotage::FlushCoverageReadLate,
        }
    }
}
