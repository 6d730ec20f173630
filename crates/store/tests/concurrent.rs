//! Concurrent transactions against a serial oracle (issue 19): several transactions open at
//! once, interleaved at random, each reading pages through `read_page_noted` and writing
//! values computed from what it read; page 0 is a header whose counter every transaction
//! increments through a merger (as SQLite's change counter). The committed transactions,
//! replayed one at a time in commit order on a model, must have read exactly what they
//! read, and leave the store as the model. Negative control: with read validation switched
//! off (`Sabotage::NoReadValidation`) the oracle finds write skew or a lost update. Every
//! third transaction reads its pages without noting them and is fenced on its base
//! (`refuse_any_later_commit`, as the VFS commits a lone writer with a kept cache); with
//! the fence ignored (`Sabotage::FenceIgnored`) the oracle finds an anomaly too. And a
//! power cut at every I/O call of such a run (rebased commits among them) recovers to the
//! oracle's state after a prefix holding every acknowledged commit; its negative control
//! (`Sabotage::SkippedFlush`) loses acknowledged commits.

#[path = "support/sabotage.rs"]
mod sabotage;
use sabotage::with_sabotage;
use std::sync::Arc;

use onesync_store::sim::SimDisk;
use onesync_store::{Error, FileId, Options, PageMerger, Sabotage, Store, Transaction};
use rand::SeedableRng;

const PAGE: usize = 512;
/// Pages 1..=ACCOUNTS hold one u64 each; page 0 is the header.
const ACCOUNTS: u64 = 6;

fn options(sabotage: Option<Sabotage>) -> Options {
    let opts = Options {
        page_size: PAGE as u32,
        initial_capacity: 1 << 20,
        growth_step: 1 << 20,
        ..Options::default()
    };
    with_sabotage(opts, sabotage)
}

fn value_page(v: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    p[..8].copy_from_slice(&v.to_le_bytes());
    p
}

fn value_of(p: &[u8]) -> u64 {
    u64::from_le_bytes(p[..8].try_into().unwrap())
}

/// The header's merger: another commit may have moved the counter (bytes 0..8), nothing
/// else; the rebased page is ours with the counter one past theirs.
fn header_merger() -> PageMerger {
    Arc::new(|base: &[u8], latest: &[u8], mine: &[u8]| {
        if base[8..] != latest[8..] {
            return None;
        }
        let mut out = mine.to_vec();
        out[..8].copy_from_slice(&(value_of(latest) + 1).to_le_bytes());
        Some(out)
    })
}

/// A small deterministic generator (xorshift64*), so that a failing seed reruns alike.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One open transaction of the model run: what it will do and what it saw.
struct Running {
    txn: Transaction,
    id: u64,
    to_read: Vec<u64>,
    to_write: Vec<u64>,
    read: Vec<(u64, u64)>,
    written: Vec<(u64, u64)>,
    /// The header's counter when it read it (its commit's is rebased past later ones).
    header_seen: Option<u64>,
    /// Reads not noted; refused if anything committed after its base.
    fenced: bool,
}

/// A committed transaction, for the oracle.
struct Committed {
    id: u64,
    fenced: bool,
    read: Vec<(u64, u64)>,
    written: Vec<(u64, u64)>,
    header_seen: Option<u64>,
}

fn begin(store: &Store, file: FileId, id: u64, rng: &mut Rng) -> Running {
    let mut txn = store.begin();
    txn.merge_at_commit(file, 0, header_merger());
    // From the id, not the generator: the other transactions stay as they were.
    let fenced = id.is_multiple_of(3);
    if fenced {
        txn.refuse_any_later_commit();
    }
    let reads = 1 + rng.below(2);
    let to_read: Vec<u64> = (0..reads).map(|_| 1 + rng.below(ACCOUNTS)).collect();
    // Half write a page they read (read-modify-write: lost updates), half another one
    // (write skew).
    let target = if rng.below(2) == 0 {
        to_read[0]
    } else {
        1 + rng.below(ACCOUNTS)
    };
    Running {
        txn,
        id,
        to_read,
        to_write: vec![target],
        read: Vec::new(),
        written: Vec::new(),
        header_seen: None,
        fenced,
    }
}

/// One step of `r`: `Ok(true)` once it has nothing left to do but commit.
fn step(r: &mut Running, file: FileId) -> Result<bool, Error> {
    let mut buf = vec![0u8; PAGE];
    if let Some(page) = r.to_read.pop() {
        if r.fenced {
            r.txn.read_page(file, page, &mut buf)?;
        } else {
            r.txn.read_page_noted(file, page, &mut buf)?;
        }
        r.read.push((page, value_of(&buf)));
        return Ok(false);
    }
    if let Some(page) = r.to_write.pop() {
        // A value that depends on everything read, and on who wrote it.
        let v = r.read.iter().map(|(_, v)| v).sum::<u64>() * 3 + r.id;
        r.txn.write_page(file, page, &value_page(v))?;
        r.written.push((page, v));
        return Ok(false);
    }
    Ok(true)
}

/// What a model run on a disk did.
struct ModelRun {
    /// Committed (acknowledged durable), in commit order.
    committed: Vec<Committed>,
    /// Refused for a conflict.
    refused: u64,
    /// A commit that failed with a sequence number (the disk died under it): it may or may
    /// not survive.
    in_doubt: Option<Committed>,
    /// The disk's I/O calls once the initial state was committed.
    setup_calls: u64,
}

/// Runs `steps` interleaved steps of up to `width` transactions at once on `disk`, until
/// the steps end or the disk fails; returns what happened and the file's id.
fn run_on(
    disk: &SimDisk,
    seed: u64,
    sabotage: Option<Sabotage>,
    width: usize,
    steps: usize,
) -> (ModelRun, FileId) {
    let mut out = ModelRun {
        committed: Vec::new(),
        refused: 0,
        in_doubt: None,
        setup_calls: 0,
    };
    let store = Store::create_with_io(disk.io(), &options(sabotage)).unwrap();
    let mut t = store.begin();
    let file = t.create_file("main").unwrap();
    t.write_page(file, 0, &value_page(0)).unwrap();
    for page in 1..=ACCOUNTS {
        t.write_page(file, page, &value_page(page * 100)).unwrap();
    }
    t.commit().unwrap();
    out.setup_calls = disk.calls();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut open: Vec<Option<Running>> = (0..width).map(|_| None).collect();
    for step_index in 0..steps as u64 {
        let slot = rng.below(width as u64) as usize;
        let Some(r) = open[slot].as_mut() else {
            // Ids are unique: one transaction begins per step at most.
            open[slot] = Some(begin(&store, file, step_index + 1, &mut rng));
            continue;
        };
        // Every transaction reads the header first, as SQLite reads page 1.
        if r.header_seen.is_none() {
            let mut buf = vec![0u8; PAGE];
            if r.txn.read_page_noted(file, 0, &mut buf).is_err() {
                break; // the disk is gone
            }
            let counter = value_of(&buf);
            r.header_seen = Some(counter);
            r.txn.write_page(file, 0, &value_page(counter + 1)).unwrap();
        }
        match step(r, file) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => break,
        }
        let r = open[slot].take().unwrap();
        let done = Committed {
            id: r.id,
            fenced: r.fenced,
            read: r.read,
            written: r.written,
            header_seen: r.header_seen,
        };
        match r.txn.commit() {
            Ok(_) => out.committed.push(done),
            Err(e) if matches!(e.error, Error::Conflict(_)) => out.refused += 1,
            Err(e) => {
                assert!(disk.is_powered_off(), "seed {seed}: commit failed: {e:?}");
                if e.seq.is_some() {
                    out.in_doubt = Some(done);
                }
                break;
            }
        }
    }
    (out, file)
}

/// `run_on` a fresh disk that does not fail; also returns the store.
fn run(
    seed: u64,
    sabotage: Option<Sabotage>,
    width: usize,
    steps: usize,
) -> (Vec<Committed>, u64, Store, FileId) {
    let disk = SimDisk::new();
    let (out, file) = run_on(&disk, seed, sabotage, width, steps);
    let store = Store::open_with_io(disk.io(), &options(sabotage)).unwrap();
    (out.committed, out.refused, store, file)
}

/// Replays `committed` serially on the model; `Err` names the first transaction that read
/// something a serial execution at its place would not have shown it, or a final state
/// that differs.
fn check_serial(committed: &[Committed], store: &Store, file: FileId) -> Result<(), String> {
    let mut model: Vec<u64> = (0..=ACCOUNTS).map(|p| p * 100).collect();
    model[0] = 0;
    for c in committed {
        for &(page, v) in &c.read {
            if model[page as usize] != v {
                return Err(format!(
                    "transaction {} read {v} on page {page}, but serially it would read {}",
                    c.id, model[page as usize]
                ));
            }
        }
        for &(page, v) in &c.written {
            model[page as usize] = v;
        }
        model[0] += 1;
    }
    let snap = store.snapshot();
    let mut buf = vec![0u8; PAGE];
    for (page, &want) in model.iter().enumerate() {
        snap.read_page(file, page as u64, &mut buf)
            .map_err(|e| format!("reading page {page}: {e}"))?;
        if value_of(&buf) != want {
            return Err(format!("page {page} holds {}, serially {want}", value_of(&buf)));
        }
    }
    Ok(())
}

#[test]
fn concurrent_transactions_are_serializable_in_commit_order() {
    let (mut commits, mut fenced, mut refusals) = (0, 0, 0);
    for seed in 0..300 {
        let (committed, refused, store, file) = run(seed, None, 4, 300);
        if let Err(e) = check_serial(&committed, &store, file) {
            panic!("seed {seed}: {e}");
        }
        commits += committed.len();
        fenced += committed.iter().filter(|c| c.fenced).count();
        refusals += refused;
    }
    println!("{commits} committed ({fenced} of them fenced), {refusals} refused for a conflict");
    // Both outcomes happen, fenced transactions commit too, or the test shows nothing.
    assert!(
        commits > 1000 && refusals > 100 && fenced > 100,
        "{commits} committed ({fenced} fenced), {refusals} refused"
    );
}

/// How many of 300 seeds' runs the oracle finds wrong with `sabotage`.
#[cfg(feature = "test-hooks")]
fn seeds_with_an_anomaly(sabotage: Sabotage) -> usize {
    (0..300)
        .filter(|&seed| {
            let (committed, _, store, file) = run(seed, Some(sabotage), 4, 300);
            check_serial(&committed, &store, file).is_err()
        })
        .count()
}

#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_without_read_validation_the_oracle_finds_an_anomaly() {
    let failing = seeds_with_an_anomaly(Sabotage::NoReadValidation);
    assert!(failing > 0, "no seed showed an anomaly without read validation");
    println!("{failing} of 300 seeds found an anomaly");
}

#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_with_the_fence_ignored_the_oracle_finds_an_anomaly() {
    let failing = seeds_with_an_anomaly(Sabotage::FenceIgnored);
    assert!(failing > 0, "no seed showed an anomaly with the fence ignored");
    println!("{failing} of 300 seeds found an anomaly");
}

/// How the second transaction of a write skew accounts for the pages it read.
#[derive(Clone, Copy)]
enum SecondReads {
    /// Each noted (`read_page_noted`), as every test but the fence's does.
    Noted,
    /// None noted, `refuse_any_later_commit` instead (as the VFS does for a kept SQLite
    /// cache planned on its snapshot).
    Fenced,
    /// None noted and no fence: the fence test's control, which must commit the skew.
    Unnoted,
}

/// Write skew, spelled out: each transaction reads both pages and writes the other's.
/// Snapshot isolation would commit both; here the second is refused.
fn write_skew(sabotage: Option<Sabotage>, second: SecondReads) -> Result<u64, Error> {
    let store = Store::create_with_io(SimDisk::new().io(), &options(sabotage)).unwrap();
    let mut t = store.begin();
    let file = t.create_file("main").unwrap();
    t.write_page(file, 1, &value_page(1)).unwrap();
    t.write_page(file, 2, &value_page(1)).unwrap();
    t.commit().unwrap();
    let mut buf = vec![0u8; PAGE];
    let mut a = store.begin();
    let mut b = store.begin();
    for page in [1, 2] {
        a.read_page_noted(file, page, &mut buf).unwrap();
        match second {
            SecondReads::Noted => b.read_page_noted(file, page, &mut buf).unwrap(),
            SecondReads::Fenced | SecondReads::Unnoted => b.read_page(file, page, &mut buf).unwrap(),
        }
    }
    if matches!(second, SecondReads::Fenced) {
        b.refuse_any_later_commit();
    }
    // "At least one of the two must stay 1": each sees both at 1 and zeroes one.
    a.write_page(file, 1, &value_page(0)).unwrap();
    b.write_page(file, 2, &value_page(0)).unwrap();
    a.commit().unwrap();
    b.commit().map_err(|e| e.error)
}

#[test]
fn write_skew_is_refused() {
    assert!(matches!(
        write_skew(None, SecondReads::Noted),
        Err(Error::Conflict(_))
    ));
}

#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_without_read_validation_write_skew_commits() {
    assert!(write_skew(Some(Sabotage::NoReadValidation), SecondReads::Noted).is_ok());
}

#[test]
fn a_transaction_fenced_on_its_base_is_refused_after_any_later_commit() {
    match write_skew(None, SecondReads::Fenced) {
        Err(Error::Conflict(why)) => assert!(why.contains("came after"), "{why}"),
        other => panic!("the fenced transaction was not refused: {other:?}"),
    }
    assert!(
        write_skew(None, SecondReads::Unnoted).is_ok(),
        "control: unfenced and unnoted, the skew commits"
    );
    // Alone, a fenced transaction commits.
    let store = Store::create_with_io(SimDisk::new().io(), &options(None)).unwrap();
    let mut t = store.begin();
    let file = t.create_file("main").unwrap();
    t.refuse_any_later_commit();
    t.write_page(file, 0, &value_page(3)).unwrap();
    t.commit().unwrap();
}

#[test]
fn a_merger_rebases_the_header_and_refuses_what_it_cannot() {
    let store = Store::create_with_io(SimDisk::new().io(), &options(None)).unwrap();
    let mut t = store.begin();
    let file = t.create_file("main").unwrap();
    t.write_page(file, 0, &value_page(0)).unwrap();
    t.commit().unwrap();
    let bump = |t: &mut Transaction, extra: u8| {
        let mut buf = vec![0u8; PAGE];
        t.read_page_noted(file, 0, &mut buf).unwrap();
        let mut p = value_page(value_of(&buf) + 1);
        p[100] = extra;
        t.write_page(file, 0, &p).unwrap();
    };
    let mut a = store.begin();
    let mut b = store.begin();
    a.merge_at_commit(file, 0, header_merger());
    b.merge_at_commit(file, 0, header_merger());
    bump(&mut a, 0);
    bump(&mut b, 0);
    a.commit().unwrap();
    b.commit().unwrap();
    let mut buf = vec![0u8; PAGE];
    store.snapshot().read_page(file, 0, &mut buf).unwrap();
    assert_eq!(value_of(&buf), 2, "both increments count");
    // A change outside the counter is not the merger's to ignore.
    let mut a = store.begin();
    let mut b = store.begin();
    a.merge_at_commit(file, 0, header_merger());
    b.merge_at_commit(file, 0, header_merger());
    bump(&mut a, 7);
    bump(&mut b, 0);
    a.commit().unwrap();
    assert!(matches!(b.commit().map_err(|e| e.error), Err(Error::Conflict(_))));
}

/// Cuts the power at every I/O call of a model run (each with several outcomes for the
/// unflushed writes: lost, kept, torn), recovers, and checks the recovered store against
/// the serial oracle: every acknowledged commit is there, at most the one in doubt more,
/// and the state (rebased header counters included) is the model's after exactly those.
/// Returns the failures and the number of cuts.
fn power_cuts_in_model_runs(sabotage: Option<Sabotage>) -> (Vec<String>, u64) {
    const SEED: u64 = 7;
    let disk = SimDisk::new();
    let (dry, _) = run_on(&disk, SEED, sabotage, 3, 120);
    let total = disk.calls();
    // Commit i (from 0) finds the counter at i; one that read less had it rebased.
    let rebased = dry
        .committed
        .iter()
        .enumerate()
        .filter(|(i, c)| c.header_seen != Some(*i as u64))
        .count();
    assert!(
        dry.committed.len() > 10 && dry.refused > 0 && rebased > 0,
        "the run commits, conflicts and rebases: {} committed, {} refused, {rebased} rebased",
        dry.committed.len(),
        dry.refused
    );
    let mut failures = Vec::new();
    let mut cuts = 0;
    for cut in dry.setup_calls..=total {
        for outcome in 0..4u64 {
            let disk = SimDisk::new();
            disk.cut_after(cut);
            let (run, file) = run_on(&disk, SEED, sabotage, 3, 120);
            let after = disk.power_cut(&mut rand::rngs::StdRng::seed_from_u64(cut * 8 + outcome));
            cuts += 1;
            let checked = Store::open_with_io(after.io(), &options(sabotage))
                .map_err(|e| format!("reopening failed: {e}"))
                .and_then(|store| {
                    // Commit 1 made the initial state; each later one is a model commit.
                    let recovered = store.last_seq().saturating_sub(1) as usize;
                    let acknowledged = run.committed.len();
                    let mut candidates = run.committed;
                    candidates.extend(run.in_doubt);
                    if recovered < acknowledged || recovered > candidates.len() {
                        return Err(format!(
                            "recovered {recovered} commits: {acknowledged} acknowledged, {} sequenced",
                            candidates.len()
                        ));
                    }
                    check_serial(&candidates[..recovered], &store, file)
                });
            if let Err(e) = checked {
                failures.push(format!("cut at call {cut}, outcome {outcome}: {e}"));
            }
        }
    }
    eprintln!(
        "{} commits ({rebased} with a rebased header), {} refused; {cuts} power cuts over \
         calls {}..={total}, {} failed{}",
        dry.committed.len(),
        dry.refused,
        dry.setup_calls,
        failures.len(),
        failures
            .first()
            .map(|f| format!("; first: {f}"))
            .unwrap_or_default()
    );
    (failures, cuts)
}

#[test]
fn a_power_cut_at_any_io_call_of_concurrent_commits_keeps_them_serializable() {
    let (failures, cuts) = power_cuts_in_model_runs(None);
    assert!(cuts > 100, "{cuts} cuts");
    assert!(failures.is_empty(), "{failures:#?}");
}

#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_skipped_flushes_lose_acknowledged_concurrent_commits() {
    let (failures, _) = power_cuts_in_model_runs(Some(Sabotage::SkippedFlush));
    assert!(!failures.is_empty(), "no power cut lost an acknowledged commit");
}
