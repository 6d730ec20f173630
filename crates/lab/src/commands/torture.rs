//! `onesync torture --mode M --power-cuts N [--kills N]`: bank transfers (TPC-B-like, money
//! conserved) under simulated power cuts, and real SIGKILLs.
//!
//! A power cut stops the disk after a random number of I/O calls; every write since the
//! last flush is then lost, kept, or torn at 512-byte sector boundaries, each independently
//! and in a random order (`onesync_store::sim::SimDisk`'s model, one function for both:
//! `sim::apply_unflushed_write`). The database is reopened from what survived
//! and checked: `integrity_check` ok, money conserved, every balance agreeing with the
//! ledger, and every transfer whose COMMIT returned present.
//!
//! * Schemes on a plain SQLite file run over [`SimFs`] (`sim/power_cut_files.rs`), a
//!   simulated disk of files served through this project's VFS, with
//!   `locking_mode=EXCLUSIVE` (one connection; WAL then keeps its index in memory). File
//!   creation and deletion are durable at once: the simulation is about data blocks, as
//!   SQLite's own assumptions are (with `synchronous=FULL` it does not sync the directory
//!   after deleting a journal).
//! * A scheme on a onesync store runs the onesync VFS over a store on a `SimDisk`.
//! * Kills are `vfs-kill-torture` with the mode's child.
//!
//! With `--fs` and `--emulate` the cuts are real instead (`kernel_torture.rs`): transfer
//! processes on a real filesystem on an emulated device whose power is cut.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{anyhow, Context, Result};
use onesync_store::sim::SimDisk;
use onesync_store::{Options, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::commands::kernel_torture;
use crate::commands::vfs_kill_torture::{self, ChildKind, KillTortureArgs, Synchronous};
use crate::loopfs::{EmulateArgs, FsKind};
use crate::output::{self, Human};
use crate::progress::phase_bar;
use crate::schemes::{apply_pragmas, Mode, Scheme, Storage};
use crate::sim::power_cut_files::SimFs;
use crate::workloads::bank;

/// VFS names of the two simulations.
const SIM_FILES_VFS: &str = "onesync-sim-files";
const SIM_STORE_VFS: &str = "onesync-sim-store";
/// Largest number of I/O calls a run gets before its cut (about a few dozen transfers).
const MAX_CALLS_BEFORE_CUT: u64 = 400;
/// Cuts on one database before starting over on a fresh one (every cut copies the medium's
/// image, so a database that grew over thousands of cuts would make each cut slower).
const CUTS_PER_DATABASE: u64 = 250;

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

    /// With --fs: the longest time from starting the processes to a random-moment cut
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub max_delay_ms: u64,

    /// With --fs: the image's size [default: ext4 64, xfs 300, btrfs 128]
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
}

#[derive(Serialize, Default, Debug)]
struct Summary {
    mode: String,
    seed: u64,
    power_cuts: u64,
    transfers_acknowledged: u64,
    power_cut_failures: u64,
    first_power_cut_failure: Option<String>,
    kills: u64,
    kill_failures: u64,
}

pub fn run(args: &TortureArgs) -> Result<ExitCode> {
    if args.fs.is_some() {
        return kernel_torture::run(args);
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut summary = Summary {
        // The mode's Debug name lowercased (`walnormal`, not `wal-normal`), as the JSON has
        // always said.
        mode: format!("{:?}", args.mode).to_lowercase(),
        seed,
        ..Summary::default()
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let sim = Sim::new(args.mode.scheme())?;
    let bar = phase_bar("power cuts", args.power_cuts);
    for cut in 1..=args.power_cuts {
        if cut % CUTS_PER_DATABASE == 0 {
            sim.start_over();
        }
        match sim.one_cut(cut, &mut rng) {
            Ok(acked) => summary.transfers_acknowledged += acked,
            Err(e) => {
                summary.power_cut_failures += 1;
                summary.first_power_cut_failure = Some(format!("power cut {cut}: {e:#}"));
                break;
            }
        }
        summary.power_cuts = cut;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if args.kills > 0 {
        let kill_args = KillTortureArgs {
            kills: args.kills,
            seed: Some(seed),
            dir: None,
            child: ChildKind::for_mode(args.mode),
            threads: 1,
            processes: 1,
            min_delay_ms: 1,
            max_delay_ms: 80,
            json: None,
            report_to_stderr: true,
        };
        summary.kills = args.kills;
        if !vfs_kill_torture::passes(&kill_args)? {
            summary.kill_failures = 1;
        }
    }
    let failed = summary.power_cut_failures + summary.kill_failures > 0;
    let line = format!(
        "torture {} (seed {seed}): {} power cuts, {} transfers acknowledged before them, {} \
         failure(s){}; {} kills, {} failure(s)",
        summary.mode,
        summary.power_cuts,
        summary.transfers_acknowledged,
        summary.power_cut_failures,
        summary
            .first_power_cut_failure
            .as_deref()
            .map(|f| format!(" (first: {f})"))
            .unwrap_or_default(),
        summary.kills,
        summary.kill_failures,
    );
    output::emit(args.json.as_deref(), &summary, &line, Human::Stdout)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One torture run: a scheme on its simulated medium.
struct Sim {
    scheme: &'static dyn Scheme,
    medium: Medium,
}

/// The simulated medium of a scheme: files for a plain SQLite file, a disk for a store.
enum Medium {
    Files(Arc<SimFs>),
    Store { disk: Arc<Mutex<SimDisk>>, vfs: String },
}

impl Sim {
    fn new(scheme: &'static dyn Scheme) -> Result<Sim> {
        let api = onesync::api_table_from_sys!(rusqlite::ffi);
        if scheme.storage() == Storage::Store {
            let disk = Arc::new(Mutex::new(SimDisk::new()));
            let medium = disk.clone();
            let opener: onesync::StoreOpener = Arc::new(move |_path: &Path, opts: &Options, create: bool| {
                // A small medium: every power cut copies its image.
                let opts = &Options {
                    initial_capacity: 1 << 20,
                    growth_step: 1 << 20,
                    ..opts.clone()
                };
                let disk = lock(&medium);
                if disk.image().is_empty() && create {
                    Store::create_with_io(disk.io(), opts)
                } else {
                    Store::open_with_io(disk.io(), opts)
                }
            });
            // A VFS per simulated disk (a VFS lives for the rest of the process).
            let vfs = format!("{SIM_STORE_VFS}-{}", Arc::as_ptr(&disk) as usize);
            onesync::register_with(
                &api,
                onesync::RegisterOptions {
                    name: vfs.clone(),
                    make_default: false,
                    main_db: Box::new(onesync::StoreFactory::with_opener(api, opener)),
                    memory_journals: true,
                    files: None,
                },
            )
            .map_err(|e| anyhow!("registering the simulated-store VFS: {e}"))?;
            return Ok(Sim {
                scheme,
                medium: Medium::Store { disk, vfs },
            });
        }
        let fs = Arc::new(SimFs::default());
        onesync::register_with(
            &api,
            onesync::RegisterOptions {
                name: format!("{SIM_FILES_VFS}-{}", fs_id(&fs)),
                make_default: false,
                main_db: Box::new(onesync::PassThroughFactory),
                memory_journals: false,
                files: Some(fs.clone()),
            },
        )
        .map_err(|e| anyhow!("registering the simulated-files VFS: {e}"))?;
        Ok(Sim {
            scheme,
            medium: Medium::Files(fs),
        })
    }

    /// The path the database is known by inside the simulation (never touched on disk).
    fn path(&self) -> PathBuf {
        std::env::temp_dir()
            .join("onesync-sim")
            .join(self.scheme.database_file("bank"))
    }

    fn open(&self) -> Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match &self.medium {
            Medium::Files(fs) => {
                let vfs = format!("{SIM_FILES_VFS}-{}", fs_id(fs));
                let conn = Connection::open_with_flags_and_vfs(self.path(), flags, vfs.as_str())?;
                conn.execute_batch("PRAGMA locking_mode=EXCLUSIVE")?;
                conn
            }
            Medium::Store { vfs, .. } => {
                Connection::open_with_flags_and_vfs(self.path(), flags, vfs.as_str())?
            }
        };
        apply_pragmas(&conn, self.scheme.pragmas())?;
        Ok(conn)
    }

    /// An empty medium (the next open creates the database again).
    fn start_over(&self) {
        match &self.medium {
            Medium::Files(fs) => fs.clear(),
            Medium::Store { disk, .. } => *lock(disk) = SimDisk::new(),
        }
    }

    fn arm(&self, calls: u64) {
        match &self.medium {
            Medium::Files(fs) => fs.cut_after(calls),
            Medium::Store { disk, .. } => lock(disk).cut_after(calls),
        }
    }

    fn cut(&self, rng: &mut SmallRng) {
        match &self.medium {
            Medium::Files(fs) => fs.power_cut(rng),
            Medium::Store { disk, .. } => {
                let mut disk = lock(disk);
                let survived = disk.power_cut(rng);
                *disk = survived;
            }
        }
    }

    /// One run: transfers until the power goes, then reopen and check. Returns the number
    /// of transfers acknowledged in the run.
    fn one_cut(&self, cut: u64, rng: &mut SmallRng) -> Result<u64> {
        let mut acked = Vec::new();
        let calls = rng.random_range(1..=MAX_CALLS_BEFORE_CUT);
        {
            let conn = self.open().context("opening before the cut")?;
            bank::set_up(&conn).context("setting up the bank")?;
            self.arm(calls);
            for n in 0.. {
                let from = rng.random_range(1..=bank::ACCOUNTS);
                let to = (from + rng.random_range(1..bank::ACCOUNTS) - 1) % bank::ACCOUNTS + 1;
                let id = format!("{cut}.{n}");
                match bank::transfer_atomically(&conn, &id, from, to, rng.random_range(1..=100)) {
                    Ok(()) => acked.push(id),
                    Err(_) => break,
                }
            }
        }
        self.cut(rng);
        let conn = self.open().context("reopening after the cut")?;
        bank::audit(&conn, true, &acked)?;
        // Earlier runs' transfers are checked by conservation and the ledger; this run's
        // acknowledged ones by name.
        Ok(acked.len() as u64)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn fs_id(fs: &Arc<SimFs>) -> usize {
    Arc::as_ptr(fs) as usize
}
