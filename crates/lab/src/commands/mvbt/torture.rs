//! `onesync-lab mvbt torture`: bank transfers on LS-MVBT under simulated power cuts (the engine
//! on `onesync_store::sim::SimDisk`, whose unflushed writes are lost, kept or torn at 512 B
//! at the cut) and real SIGKILLs (a child process transferring through the `mvbt` virtual
//! table in SQL).
//!
//! The table holds accounts (keys 0..ACCOUNTS, value = balance) and one ledger row per
//! transfer (key LEDGER_BASE + id, value = from, to, amount). After every cut or kill the
//! tree is reopened (recovery runs) and audited: the tree's own check, money conserved,
//! every balance equal to the initial one replayed through the ledger, every acknowledged
//! transfer present and no ledger row that was never started.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_mvbt::{Config, Sabotage, Tree};
use onesync_store::sim::SimDisk;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::params;
use serde::Serialize;

use crate::commands::vfs_kill_torture::{print_line, RunningChild, COMMITTED_PREFIX, READY_LINE};
use crate::output::{self, Human};
use crate::progress::phase_bar;
use crate::schemes::mvbt::open_with_mvbt;

/// Main database and tree file names in a run's directory (the experiments in `mod.rs` use
/// the same names).
pub(super) const MAIN_DB: &str = "main.db";
pub(super) const TREE_FILE: &str = "kv.mvbt";

const ACCOUNTS: i64 = 50;
const INITIAL_BALANCE: i64 = 1000;
const LEDGER_BASE: i64 = 1 << 40;
/// Most I/O calls a database gets before its power cut.
const MAX_CALLS_BEFORE_CUT: u64 = 300;
/// Cuts on one simulated disk before starting over (the image is copied at every cut).
const CUTS_PER_DISK: u64 = 200;
/// A child not killed by then stops by itself.
const CHILD_MAX_RUNTIME: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct MvbtTortureArgs {
    /// Simulated power cuts (the engine on a simulated disk)
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub power_cuts: u64,

    /// Real SIGKILLs of a child process transferring through the SQL virtual table
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub kills: u64,

    /// Negative controls (must fail): recovery skips reverting end versions (power cuts), and
    /// the child runs each transfer as three separate autocommit statements (kills)
    #[arg(long)]
    pub sabotage: bool,

    /// Seed [default: random, printed]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Kills: work in a fresh subdirectory of D [default: the system's temporary directory]
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,

    /// Write the summary as JSON to FILE, or to stdout with "-"
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct MvbtChildArgs {
    /// The directory holding main.db and its mvbt table
    pub dir: PathBuf,
    /// Number of this child among the kills: makes its transfer ids unique
    #[arg(long, default_value_t = 0)]
    pub run: u64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The negative control: debit, credit and ledger row as three transactions
    #[arg(long)]
    pub split_commits: bool,
}

#[derive(Serialize, Default, Debug)]
struct Summary {
    seed: u64,
    sabotage: bool,
    power_cuts: u64,
    power_cut_transfers_acknowledged: u64,
    cuts_during_recovery: u64,
    power_cut_failures: u64,
    first_power_cut_failure: Option<String>,
    kills: u64,
    kill_transfers_acknowledged: u64,
    kill_failures: u64,
    first_kill_failure: Option<String>,
    seconds: f64,
}

pub fn run(args: &MvbtTortureArgs) -> Result<ExitCode> {
    output::check_json_path(args.json.as_deref())?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut summary = Summary {
        seed,
        sabotage: args.sabotage,
        ..Summary::default()
    };
    eprintln!(
        "mvbt torture: {} power cuts, {} kills, seed {seed}{}",
        args.power_cuts,
        args.kills,
        if args.sabotage {
            ", SABOTAGED (negative controls)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    power_cuts(args, seed, &mut summary)?;
    if args.kills > 0 {
        kills(args, seed, &mut summary)?;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    let failed = summary.power_cut_failures + summary.kill_failures > 0;
    let mut text = format!(
        "mvbt torture (seed {seed}{}): {} power cuts ({} during recovery), {} transfers acknowledged, {} failure(s); \
         {} kills, {} transfers acknowledged, {} failure(s); {:.1} s",
        if args.sabotage { ", sabotaged" } else { "" },
        summary.power_cuts,
        summary.cuts_during_recovery,
        summary.power_cut_transfers_acknowledged,
        summary.power_cut_failures,
        summary.kills,
        summary.kill_transfers_acknowledged,
        summary.kill_failures,
        summary.seconds
    );
    for failure in [&summary.first_power_cut_failure, &summary.first_kill_failure]
        .into_iter()
        .flatten()
    {
        text += &format!("\nfirst failure: {failure}");
    }
    output::emit(args.json.as_deref(), &summary, &text, Human::Stdout)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A variant and node size for one simulated disk: every preset, small nodes for many splits.
fn random_config(rng: &mut SmallRng, sabotage: bool) -> Config {
    let mut config = match rng.random_range(0..4) {
        0 => Config::mvbt(),
        1 => Config::mvbt_embedding(),
        2 => Config::mvbt_lazy_split(),
        _ => Config::ls_mvbt(),
    };
    config.node_size = [512, 1024, 4096][rng.random_range(0..3)];
    config.keep_versions = rng.random_range(0..3);
    config.sabotage = sabotage.then_some(Sabotage::SkipRevertEndVersions);
    config
}

fn balance_bytes(balance: i64) -> [u8; 8] {
    balance.to_le_bytes()
}

fn balance_of(bytes: &[u8]) -> Result<i64> {
    let raw: [u8; 8] = bytes
        .try_into()
        .map_err(|_| anyhow!("a balance of {} bytes, not 8", bytes.len()))?;
    Ok(i64::from_le_bytes(raw))
}

/// A ledger row: (from, to, amount).
fn ledger_bytes(from: i64, to: i64, amount: i64) -> Vec<u8> {
    [from, to, amount].iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn ledger_of(bytes: &[u8]) -> Result<(i64, i64, i64)> {
    if bytes.len() != 24 {
        bail!("a ledger row of {} bytes, not 24", bytes.len());
    }
    let field = |i: usize| balance_of(&bytes[i * 8..i * 8 + 8]);
    Ok((field(0)?, field(1)?, field(2)?))
}

/// One transfer as one transaction on the engine.
fn transfer(tree: &mut Tree, id: i64, rng: &mut SmallRng) -> onesync_mvbt::Result<()> {
    let from = rng.random_range(0..ACCOUNTS);
    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
    let amount = rng.random_range(1..=100);
    tree.begin()?;
    let step = (|| {
        let from_balance = tree
            .get(from)?
            .map(|b| balance_of(&b).unwrap_or(i64::MIN))
            .unwrap_or(0);
        let to_balance = tree
            .get(to)?
            .map(|b| balance_of(&b).unwrap_or(i64::MIN))
            .unwrap_or(0);
        tree.put(from, &balance_bytes(from_balance - amount))?;
        tree.put(to, &balance_bytes(to_balance + amount))?;
        tree.put(LEDGER_BASE + id, &ledger_bytes(from, to, amount))?;
        // Now and then a savepoint rolled back inside the transfer, which must vanish.
        if rng.random_bool(0.1) {
            let depth = tree.savepoint()?;
            tree.put(LEDGER_BASE - 1, b"rolled back")?;
            tree.rollback_to(depth)?;
            tree.release(depth)?;
        }
        tree.commit().map(|_| ())
    })();
    if step.is_err() && tree.in_transaction() {
        let _ = tree.rollback();
    }
    step
}

fn fund(tree: &mut Tree) -> onesync_mvbt::Result<()> {
    tree.begin()?;
    for account in 0..ACCOUNTS {
        tree.put(account, &balance_bytes(INITIAL_BALANCE))?;
    }
    tree.commit().map(|_| ())
}

/// What an audit read back: each account's balance, and each transfer of the ledger as
/// (id, from, to, amount).
#[derive(Default)]
struct Bank {
    balances: Vec<(i64, i64)>,
    transfers: Vec<(i64, i64, i64, i64)>,
}

impl Bank {
    /// Checks every account is there, money is conserved, every balance is the initial one
    /// replayed through the ledger and every acknowledged transfer is present; returns the
    /// transfers present.
    fn check(&self, acknowledged: &BTreeSet<i64>) -> Result<BTreeSet<i64>> {
        if self.balances.len() != ACCOUNTS as usize {
            bail!("{} of {ACCOUNTS} accounts present", self.balances.len());
        }
        let total: i64 = self.balances.iter().map(|(_, b)| b).sum();
        if total != ACCOUNTS * INITIAL_BALANCE {
            bail!(
                "money not conserved: {total} instead of {}",
                ACCOUNTS * INITIAL_BALANCE
            );
        }
        let mut replayed = vec![INITIAL_BALANCE; ACCOUNTS as usize];
        for &(_, from, to, amount) in &self.transfers {
            replayed[from as usize] -= amount;
            replayed[to as usize] += amount;
        }
        for &(account, balance) in &self.balances {
            if replayed[account as usize] != balance {
                bail!(
                    "account {account} holds {balance} but its ledger says {}",
                    replayed[account as usize]
                );
            }
        }
        let present: BTreeSet<i64> = self.transfers.iter().map(|t| t.0).collect();
        if let Some(lost) = acknowledged.difference(&present).next() {
            bail!("acknowledged transfer {lost} is missing");
        }
        Ok(present)
    }
}

/// Audits a reopened tree. `acknowledged` are transfers whose commit returned; `in_flight`
/// the one whose commit was cut (present or not). Returns whether `in_flight` is present.
fn audit_tree(tree: &mut Tree, acknowledged: &BTreeSet<i64>, in_flight: Option<i64>) -> Result<bool> {
    tree.check()
        .map_err(|e| anyhow!("the tree's check failed: {e}"))?;
    let mut bank = Bank::default();
    for (key, value) in tree.range(Bound::Unbounded, Bound::Unbounded, None, usize::MAX)? {
        if (0..ACCOUNTS).contains(&key) {
            bank.balances.push((key, balance_of(&value)?));
        } else if key >= LEDGER_BASE {
            let (from, to, amount) = ledger_of(&value)?;
            bank.transfers.push((key - LEDGER_BASE, from, to, amount));
        } else {
            bail!("an unexpected key {key} (a rolled-back savepoint's row?)");
        }
    }
    let present = bank.check(acknowledged)?;
    if let Some(stranger) = present
        .iter()
        .find(|id| !acknowledged.contains(id) && Some(**id) != in_flight)
    {
        bail!("transfer {stranger} is present but was never committed");
    }
    Ok(in_flight.is_some_and(|id| present.contains(&id)))
}

/// Power cuts on the engine over a simulated disk.
fn power_cuts(args: &MvbtTortureArgs, seed: u64, summary: &mut Summary) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let bar = phase_bar("cuts", args.power_cuts);
    let mut cut = 0;
    while cut < args.power_cuts {
        let config = random_config(&mut rng, args.sabotage);
        let mut disk = SimDisk::new();
        let mut tree = Tree::create_on(disk.io(), config.clone())?;
        fund(&mut tree)?;
        let mut acknowledged = BTreeSet::new();
        let mut next_id = 0;
        for _ in 0..CUTS_PER_DISK.min(args.power_cuts - cut) {
            cut += 1;
            summary.power_cuts = cut;
            bar.inc(1);
            disk.cut_after(rng.random_range(0..MAX_CALLS_BEFORE_CUT));
            let in_flight = loop {
                let id = next_id;
                next_id += 1;
                match transfer(&mut tree, id, &mut rng) {
                    Ok(()) => {
                        acknowledged.insert(id);
                        summary.power_cut_transfers_acknowledged += 1;
                    }
                    Err(_) if disk.is_powered_off() => break id,
                    Err(e) => bail!("transfer {id} failed with the power on: {e}"),
                }
            };
            drop(tree);
            let outcome =
                reopen_after_cut(&disk, &config, &mut rng, summary).and_then(|(survivor, mut reopened)| {
                    if audit_tree(&mut reopened, &acknowledged, Some(in_flight))? {
                        acknowledged.insert(in_flight);
                    }
                    Ok((survivor, reopened))
                });
            match outcome {
                Ok((survivor, reopened)) => {
                    disk = survivor;
                    tree = reopened;
                }
                Err(error) => {
                    summary.power_cut_failures += 1;
                    summary.first_power_cut_failure.get_or_insert_with(|| {
                        format!(
                            "cut {cut} ({:?} split, embedding {}, {}-byte nodes): {error:#}",
                            config.split, config.metadata_embedding, config.node_size
                        )
                    });
                    // Start a fresh disk: this one's history is no longer trustworthy.
                    break;
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Cuts the power on `disk` and reopens what survived; one time in five the reopening
/// itself is cut at a random call (or right after it) and then reopened again.
fn reopen_after_cut(
    disk: &SimDisk,
    config: &Config,
    rng: &mut SmallRng,
    summary: &mut Summary,
) -> Result<(SimDisk, Tree)> {
    let mut survivor = disk.power_cut(rng);
    if rng.random_bool(0.2) {
        survivor.cut_after(rng.random_range(0..MAX_CALLS_BEFORE_CUT));
        match Tree::open_on(survivor.io(), config.clone()) {
            // Reopened before the cut struck: cut right after the recovery instead.
            Ok(tree) => {
                drop(tree);
                survivor = survivor.power_cut(rng);
            }
            Err(_) if survivor.is_powered_off() => {
                summary.cuts_during_recovery += 1;
                survivor = survivor.power_cut(rng);
            }
            Err(e) => return Err(anyhow!("reopening failed with the power on: {e}")),
        }
    }
    let tree = Tree::open_on(survivor.io(), config.clone())
        .map_err(|e| anyhow!("reopening after the cut failed: {e}"))?;
    Ok((survivor, tree))
}

/// The SQL side: a child transfers through the `mvbt` virtual table and is SIGKILLed.
fn kills(args: &MvbtTortureArgs, seed: u64, summary: &mut Summary) -> Result<()> {
    let work = output::work_dir("onesync-mvbt-kill-", None, args.dir.as_deref())?;
    let exe = std::env::current_exe().context("finding the onesync binary to run as the child")?;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b69_6c6c);
    {
        let conn = open_with_mvbt(&work.path().join(MAIN_DB))?;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE kv USING mvbt(file='{}')",
            work.path().join(TREE_FILE).display()
        ))?;
        conn.execute_batch("BEGIN")?;
        for account in 0..ACCOUNTS {
            conn.execute(
                "INSERT INTO kv(key, value) VALUES (?1, ?2)",
                params![account, INITIAL_BALANCE],
            )?;
        }
        conn.execute_batch("COMMIT")?;
    }
    let mut acknowledged = BTreeSet::new();
    let bar = phase_bar("kills", args.kills);
    for run in 1..=args.kills {
        let mut command = Command::new(&exe);
        command.arg("__mvbt-child").arg(work.path()).args([
            "--run",
            &run.to_string(),
            "--seed",
            &rng.random::<u64>().to_string(),
        ]);
        if args.sabotage {
            command.arg("--split-commits");
        }
        let child = RunningChild::start(command)?;
        std::thread::sleep(Duration::from_millis(rng.random_range(5..=120)));
        let outcome = child.kill_and_read().and_then(|lines| {
            for id in &lines.committed {
                acknowledged.insert(
                    id.parse::<i64>()
                        .with_context(|| format!("child printed id {id:?}"))?,
                );
            }
            summary.kill_transfers_acknowledged += lines.committed.len() as u64;
            let present = audit_sql(work.path(), &acknowledged)?;
            let unreported: Vec<_> = present.difference(&acknowledged).collect();
            if unreported.len() > 1 {
                bail!("transfers {unreported:?} are present but at most one was in flight");
            }
            // The transfer whose COMMIT the kill cut is durable now: it must stay.
            acknowledged.extend(present);
            Ok(())
        });
        summary.kills = run;
        bar.inc(1);
        if let Err(error) = outcome {
            summary.kill_failures += 1;
            summary.first_kill_failure = Some(format!("kill {run}: {error:#}"));
            let kept = work.keep();
            eprintln!("mvbt torture: the killed database is kept in {}", kept.display());
            break;
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Audits the table through SQL after a kill; returns the transfers present.
fn audit_sql(dir: &Path, acknowledged: &BTreeSet<i64>) -> Result<BTreeSet<i64>> {
    let conn = open_with_mvbt(&dir.join(MAIN_DB))?;
    let mut bank = Bank::default();
    let mut stmt = conn.prepare("SELECT key, value FROM kv ORDER BY key")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let key: i64 = row.get(0)?;
        if (0..ACCOUNTS).contains(&key) {
            bank.balances.push((key, row.get(1)?));
            continue;
        }
        let text: String = row.get(1)?;
        let parts: Vec<i64> = text
            .split(',')
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .with_context(|| format!("ledger row {key}: {text:?}"))?;
        let [from, to, amount] = parts[..] else {
            bail!("ledger row {key}: {text:?}");
        };
        bank.transfers.push((key - LEDGER_BASE, from, to, amount));
    }
    bank.check(acknowledged)
}

/// The child: transfers through SQL, printing `committed ID` after each COMMIT returns.
pub fn run_child(args: &MvbtChildArgs) -> Result<()> {
    let conn = open_with_mvbt(&args.dir.join(MAIN_DB))?;
    print_line(READY_LINE)?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let started = Instant::now();
    for n in 0.. {
        if started.elapsed() > CHILD_MAX_RUNTIME {
            break;
        }
        let id = args.run as i64 * 1_000_000 + n;
        let from = rng.random_range(0..ACCOUNTS);
        let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
        let amount = rng.random_range(1..=100);
        if !args.split_commits {
            conn.execute_batch("BEGIN")?;
        }
        conn.execute(
            "UPDATE kv SET value = value - ?2 WHERE key = ?1",
            params![from, amount],
        )?;
        conn.execute(
            "UPDATE kv SET value = value + ?2 WHERE key = ?1",
            params![to, amount],
        )?;
        conn.execute(
            "INSERT INTO kv(key, value) VALUES (?1, ?2)",
            params![LEDGER_BASE + id, format!("{from},{to},{amount}")],
        )?;
        if !args.split_commits {
            conn.execute_batch("COMMIT")?;
        }
        print_line(&format!("{COMMITTED_PREFIX}{id}"))?;
    }
    Ok(())
}
