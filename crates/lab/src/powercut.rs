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
//! * Stock modes run SQLite over [`SimFs`], a simulated disk of files served through this
//!   project's VFS (`RegisterOptions::files`), with `locking_mode=EXCLUSIVE` (one
//!   connection; WAL then keeps its index in memory). File creation and deletion are durable
//!   at once: the simulation is about data blocks, as SQLite's own assumptions are (with
//!   `synchronous=FULL` it does not sync the directory after deleting a journal).
//! * `onesync` runs the onesync VFS over a store on a `SimDisk`.
//! * Kills are `vfs-kill-torture` with the mode's child.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{anyhow, Context, Result};
use onesync::ffi::{SQLITE_IOERR, SQLITE_IOERR_DELETE_NOENT, SQLITE_IOERR_SHORT_READ, SQLITE_OPEN_CREATE};
use onesync::{DbBackend, FileSystem, IoResult};
use onesync_store::sim::{apply_unflushed_write, SimDisk};
use onesync_store::{Options, Store};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::bank;
use crate::bench::Mode;
use crate::kill_torture::{self, ChildKind, KillTortureArgs};
use crate::output::{self, Human};
use crate::progress::phase_bar;

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
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut summary = Summary {
        mode: format!("{:?}", args.mode).to_lowercase(),
        seed,
        ..Summary::default()
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let sim = Sim::new(args.mode)?;
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
        if !kill_torture::passes(&kill_args)? {
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

/// The simulated medium of one torture run.
enum Sim {
    Files { fs: Arc<SimFs>, mode: Mode },
    Store { disk: Arc<Mutex<SimDisk>>, vfs: String },
}

/// The path databases are known by inside the simulations (never touched on disk).
fn sim_path(mode: Mode) -> PathBuf {
    let name = if mode == Mode::Onesync {
        "bank.onesync"
    } else {
        "bank.db"
    };
    std::env::temp_dir().join("onesync-sim").join(name)
}

impl Sim {
    fn new(mode: Mode) -> Result<Sim> {
        let api = onesync::api_table_from_sys!(rusqlite::ffi);
        if mode == Mode::Onesync {
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
            return Ok(Sim::Store { disk, vfs });
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
        Ok(Sim::Files { fs, mode })
    }

    fn open(&self) -> Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        match self {
            Sim::Files { fs, mode } => {
                let vfs = format!("{SIM_FILES_VFS}-{}", fs_id(fs));
                let conn = Connection::open_with_flags_and_vfs(sim_path(*mode), flags, vfs.as_str())?;
                conn.execute_batch("PRAGMA locking_mode=EXCLUSIVE")?;
                for pragma in mode.pragma_list() {
                    let mut stmt = conn.prepare(pragma)?;
                    let mut rows = stmt.query([])?;
                    while rows.next()?.is_some() {}
                }
                Ok(conn)
            }
            Sim::Store { vfs, .. } => {
                let conn = Connection::open_with_flags_and_vfs(sim_path(Mode::Onesync), flags, vfs.as_str())?;
                conn.execute_batch("PRAGMA synchronous=FULL")?;
                Ok(conn)
            }
        }
    }

    /// An empty medium (the next open creates the database again).
    fn start_over(&self) {
        match self {
            Sim::Files { fs, .. } => lock(&fs.state).files.clear(),
            Sim::Store { disk, .. } => *lock(disk) = SimDisk::new(),
        }
    }

    fn arm(&self, calls: u64) {
        match self {
            Sim::Files { fs, .. } => fs.cut_after(calls),
            Sim::Store { disk, .. } => lock(disk).cut_after(calls),
        }
    }

    fn cut(&self, rng: &mut SmallRng) {
        match self {
            Sim::Files { fs, .. } => fs.power_cut(rng),
            Sim::Store { disk, .. } => {
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

/// A pending change of one file since its last flush.
#[derive(Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    Truncate { len: u64 },
}

#[derive(Default, Clone)]
struct SimFile {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power cut for sure (as of the last flush).
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Default)]
struct SimState {
    files: HashMap<Vec<u8>, SimFile>,
    calls: u64,
    cut_at: Option<u64>,
    off: bool,
}

/// Files on a simulated disk that can lose power (see the module comment).
#[derive(Default)]
pub struct SimFs {
    state: Arc<Mutex<SimState>>,
}

/// Counts one I/O call; fails once the power is off.
fn call(state: &Mutex<SimState>) -> IoResult<MutexGuard<'_, SimState>> {
    let mut s = lock(state);
    s.calls += 1;
    if s.cut_at.is_some_and(|at| s.calls >= at) {
        s.off = true;
    }
    if s.off {
        return Err(SQLITE_IOERR);
    }
    Ok(s)
}

impl SimFs {
    fn cut_after(&self, calls: u64) {
        let mut s = lock(&self.state);
        s.cut_at = Some(s.calls + calls);
    }

    /// Power off and back on: each pending write is lost, kept or torn at sector boundaries
    /// exactly as the store's `SimDisk` does it ([`apply_unflushed_write`]), the writes
    /// since a file's last flush reaching it in a random order; each pending truncation is
    /// lost or kept, in its place among them.
    fn power_cut(&self, rng: &mut SmallRng) {
        let mut s = lock(&self.state);
        for file in s.files.values_mut() {
            let mut image = file.durable.clone();
            for change in writes_shuffled(&file.pending, rng) {
                match change {
                    Pending::Truncate { len } => {
                        if rng.random_bool(0.5) {
                            image.resize(*len as usize, 0);
                        }
                    }
                    Pending::Write { offset, data } => apply_unflushed_write(&mut image, *offset, data, rng),
                }
            }
            file.current = image.clone();
            file.durable = image;
            file.pending.clear();
        }
        s.cut_at = None;
        s.off = false;
    }
}

/// `pending` with its writes in a random order among the places writes held (a truncation
/// stays where it was: the file's size is metadata, not a data block in flight).
fn writes_shuffled<'a>(pending: &'a [Pending], rng: &mut SmallRng) -> Vec<&'a Pending> {
    let mut order: Vec<&Pending> = pending.iter().collect();
    let places: Vec<usize> = (0..order.len())
        .filter(|&i| matches!(order[i], Pending::Write { .. }))
        .collect();
    let mut writes: Vec<&Pending> = places.iter().map(|&i| order[i]).collect();
    writes.shuffle(rng);
    for (&place, write) in places.iter().zip(writes) {
        order[place] = write;
    }
    order
}

fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset as usize..end].copy_from_slice(data);
}

impl FileSystem for SimFs {
    fn open(&self, name: Option<&[u8]>, flags: i32) -> IoResult<(Box<dyn DbBackend>, i32)> {
        let key = match name {
            Some(n) => n.to_vec(),
            // An anonymous temporary file: private, never part of a crash.
            None => format!("\0anonymous-{}", rand::random::<u64>()).into_bytes(),
        };
        let mut s = lock(&self.state);
        if !s.files.contains_key(&key) {
            if flags & SQLITE_OPEN_CREATE == 0 {
                return Err(onesync::ffi::SQLITE_CANTOPEN);
            }
            s.files.insert(key.clone(), SimFile::default());
        }
        drop(s);
        Ok((
            Box::new(SimHandle {
                state: self.state.clone(),
                key,
            }),
            flags,
        ))
    }

    fn delete(&self, name: &[u8], _sync_dir: bool) -> IoResult<()> {
        let mut s = call(&self.state)?;
        match s.files.remove(name) {
            Some(_) => Ok(()),
            None => Err(SQLITE_IOERR_DELETE_NOENT),
        }
    }

    fn exists(&self, name: &[u8]) -> IoResult<bool> {
        Ok(lock(&self.state).files.contains_key(name))
    }
}

struct SimHandle {
    state: Arc<Mutex<SimState>>,
    key: Vec<u8>,
}

impl SimHandle {
    fn with_file<T>(&self, f: impl FnOnce(&mut SimFile) -> IoResult<T>) -> IoResult<T> {
        let mut s = call(&self.state)?;
        let file = s.files.get_mut(&self.key).ok_or(SQLITE_IOERR)?;
        f(file)
    }
}

impl DbBackend for SimHandle {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> IoResult<()> {
        self.with_file(|file| {
            let start = (offset as usize).min(file.current.len());
            let end = (offset as usize + buf.len()).min(file.current.len());
            let n = end - start;
            buf[..n].copy_from_slice(&file.current[start..end]);
            if n < buf.len() {
                buf[n..].fill(0);
                return Err(SQLITE_IOERR_SHORT_READ);
            }
            Ok(())
        })
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> IoResult<()> {
        self.with_file(|file| {
            write_into(&mut file.current, offset, buf);
            file.pending.push(Pending::Write {
                offset,
                data: buf.to_vec(),
            });
            Ok(())
        })
    }

    fn truncate(&mut self, size: u64) -> IoResult<()> {
        self.with_file(|file| {
            file.current.resize(size as usize, 0);
            file.pending.push(Pending::Truncate { len: size });
            Ok(())
        })
    }

    fn sync(&mut self, _flags: i32) -> IoResult<()> {
        self.with_file(|file| {
            file.durable = file.current.clone();
            file.pending.clear();
            Ok(())
        })
    }

    fn size(&mut self) -> IoResult<u64> {
        self.with_file(|file| Ok(file.current.len() as u64))
    }

    // Locks: the trait's default grants every one, right for one connection
    // (locking_mode=EXCLUSIVE).

    fn sector_size(&mut self) -> i32 {
        512
    }
}
