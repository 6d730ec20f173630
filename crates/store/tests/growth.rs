//! A store starts small and grows in steps (issue 18): a store of two rows is at most
//! 1 MiB; growing never lets a commit's own write extend the file (its one flush would then
//! carry the file's new length, filesystem metadata); a power cut at any point of a growth
//! step loses no acknowledged commit; and a process that joins others grows the file by one
//! small step, not a share of their file. Each crash test has a negative control
//! (`Sabotage::LazyGrowth`: the new slots handed out unwritten) that must fail.

#[path = "support/sabotage.rs"]
mod sabotage;
use sabotage::with_sabotage;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use onesync_store::sim::SimDisk;
use onesync_store::{Options, Sabotage, Store};
use rand::rngs::StdRng;
use rand::SeedableRng;

const PS: usize = 512;
/// Pages of the one logical file the growth workload writes.
const PAGES: u64 = 600;
/// Commits of the growth workload.
const COMMITS: u64 = 320;

const MIB: u64 = 1 << 20;

/// Bytes a file takes on disk: its length and its allocated blocks, the larger.
fn on_disk(path: &Path) -> u64 {
    let meta = std::fs::metadata(path).unwrap();
    meta.len().max(meta.blocks() * 512)
}

/// A store of 512-byte pages that starts at 8 KiB and grows in steps of 8 KiB up to a
/// quarter of itself, so that the workload below grows it many times.
fn small_steps(sabotage: Option<Sabotage>) -> Options {
    let opts = Options {
        page_size: PS as u32,
        initial_capacity: 8 << 10,
        growth_step: 8 << 10,
        max_growth_step: 256 << 10,
        window_bytes: 4 << 10,
        checkpoint_interval: 40,
        ..Options::default()
    };
    with_sabotage(opts, sabotage)
}

/// The pages commit `seq` writes: a new one (so the store keeps needing room) and one
/// already written (so slots are superseded and, after checkpoints, reused).
fn pages_of(seq: u64) -> Vec<u64> {
    let new = (seq - 1) % PAGES;
    let old = (seq * 7) % (new + 1);
    if old == new {
        vec![new]
    } else {
        vec![new, old]
    }
}

fn content(seq: u64, page: u64) -> Vec<u8> {
    let mut data = vec![(seq as u8) ^ (page as u8); PS];
    data[..8].copy_from_slice(&seq.to_le_bytes());
    data[8..16].copy_from_slice(&page.to_le_bytes());
    data
}

/// What one run of the workload saw.
#[derive(Default)]
struct Run {
    /// The last commit acknowledged (returned durable).
    acknowledged: u64,
    /// The last commit given a sequence number (acknowledged or not).
    sequenced: u64,
    /// Per commit: the disk's I/O calls before and after it, and whether it grew the file.
    commits: Vec<(u64, u64, bool)>,
    /// Growth steps taken inside a commit's locks (the rest grew ahead, outside them).
    inside_locks: u64,
}

/// Create a store on `disk` and commit the workload until the disk fails.
fn run_workload(disk: &SimDisk, opts: &Options) -> Run {
    let mut run = Run::default();
    let Ok(store) = Store::create_with_io(disk.io(), opts) else {
        return run;
    };
    for seq in 1..=COMMITS {
        let before = store.stats();
        let calls = disk.calls();
        let mut t = store.begin();
        let written = (|| {
            let id = match t.file("data") {
                Some(id) => id,
                None => t.create_file("data")?,
            };
            for page in pages_of(seq) {
                t.write_page(id, page, &content(seq, page))?;
            }
            Ok::<_, onesync_store::Error>(())
        })();
        if written.is_err() {
            break;
        }
        match t.commit() {
            Ok(got) => {
                assert_eq!(got, seq, "the workload's commits are numbered from 1");
                run.acknowledged = seq;
                run.sequenced = seq;
            }
            Err(e) => {
                if let Some(got) = e.seq {
                    run.sequenced = got;
                }
                break;
            }
        }
        let after = store.stats();
        let grew = after.growths > before.growths;
        run.inside_locks += after.growths_holding_locks - before.growths_holding_locks;
        run.commits.push((calls, disk.calls(), grew));
    }
    run
}

/// Check a recovered store: at least every acknowledged commit, at most the sequenced ones,
/// and each page as the last commit up to there wrote it.
fn check_recovered(store: &Store, run: &Run) -> Result<(), String> {
    let last = store.last_seq();
    if last < run.acknowledged || last > run.sequenced {
        return Err(format!(
            "recovered to commit {last}: acknowledged {}, sequenced {}",
            run.acknowledged, run.sequenced
        ));
    }
    let snap = store.snapshot();
    let mut expected = std::collections::BTreeMap::new();
    for seq in 1..=last {
        for page in pages_of(seq) {
            expected.insert(page, seq);
        }
    }
    let Some(id) = snap.file("data") else {
        return if expected.is_empty() {
            Ok(())
        } else {
            Err(format!("recovered to commit {last} without the data file"))
        };
    };
    let mut buf = vec![0u8; PS];
    for (page, seq) in expected {
        snap.read_page(id, page, &mut buf)
            .map_err(|e| format!("reading page {page}: {e}"))?;
        if buf != content(seq, page) {
            return Err(format!(
                "after commit {last}: page {page} is not what commit {seq} wrote"
            ));
        }
    }
    Ok(())
}

/// Cut the power at every I/O call of every commit that grew the file (the zeros, the
/// flush of the new length, the commit's own writes and flush, the next call after), each
/// with several outcomes for the unflushed writes, and recover. Returns the failures and
/// the number of growth steps.
/// Power cuts at every I/O call of every commit that grew the store. Returns the failures,
/// the growth steps and how many of them were taken inside a commit's locks.
fn power_cuts_in_growth(sabotage: Option<Sabotage>) -> (Vec<String>, usize, u64) {
    let opts = small_steps(sabotage);
    let dry = run_workload(&SimDisk::new(), &opts);
    assert_eq!(dry.acknowledged, COMMITS, "the run without a cut completes");
    let growths: Vec<(u64, u64)> = dry
        .commits
        .iter()
        .filter(|(_, _, grew)| *grew)
        .map(|&(from, to, _)| (from, to))
        .collect();
    let mut failures = Vec::new();
    let mut cuts = 0;
    for &(from, to) in &growths {
        for cut in from..=to {
            for outcome in 0..4u64 {
                let disk = SimDisk::new();
                disk.cut_after(cut);
                let run = run_workload(&disk, &opts);
                let after = disk.power_cut(&mut StdRng::seed_from_u64(cut * 8 + outcome));
                let checked = Store::open_with_io(after.io(), &opts)
                    .map_err(|e| format!("reopening failed: {e}"))
                    .and_then(|store| check_recovered(&store, &run));
                if let Err(e) = checked {
                    failures.push(format!("cut at call {cut}, outcome {outcome}: {e}"));
                }
                cuts += 1;
            }
        }
    }
    eprintln!(
        "{} growth steps ({} inside a commit's locks), {cuts} power cuts in them, {} failed{}",
        growths.len(),
        dry.inside_locks,
        failures.len(),
        failures
            .first()
            .map(|f| format!("; first: {f}"))
            .unwrap_or_default()
    );
    (failures, growths.len(), dry.inside_locks)
}

#[test]
fn a_power_cut_at_any_point_of_a_growth_step_loses_no_acknowledged_commit() {
    let (failures, growths, inside) = power_cuts_in_growth(None);
    assert!(growths >= 12, "the workload grew the store only {growths} times");
    // Both kinds of step are cut: grown ahead, and inside a commit's locks (the first
    // commits, larger than the one before them, find no room yet).
    assert!(
        inside > 0 && inside < growths as u64,
        "{inside} of {growths} steps inside a commit's locks: one kind is not cut"
    );
    assert!(
        failures.is_empty(),
        "{} of the cuts in {growths} growth steps failed; first: {}",
        failures.len(),
        failures[0]
    );
}

/// The negative control: with the new slots handed out before anything is written there,
/// records name windows past the file's end and recovery drops acknowledged commits.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_lazy_growth_loses_commits_at_power_cuts() {
    let (failures, _, _) = power_cuts_in_growth(Some(Sabotage::LazyGrowth));
    assert!(
        !failures.is_empty(),
        "growth that hands out unwritten slots passed every power cut"
    );
}

/// Run the workload; return the flushes that made a longer file durable, the growth
/// steps, and the file's length before and after.
fn length_flushes(sabotage: Option<Sabotage>) -> (u64, u64, u64, u64) {
    let disk = SimDisk::new();
    let opts = small_steps(sabotage);
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let first_len = disk.image().len() as u64;
    let before = disk.syncs_of_new_length();
    let mut acknowledged = 0;
    for seq in 1..=COMMITS {
        let mut t = store.begin();
        let id = match t.file("data") {
            Some(id) => id,
            None => t.create_file("data").unwrap(),
        };
        for page in pages_of(seq) {
            t.write_page(id, page, &content(seq, page)).unwrap();
        }
        acknowledged = t.commit().unwrap();
    }
    assert_eq!(acknowledged, COMMITS);
    let growths = store.stats().growths;
    eprintln!(
        "{growths} growth steps from {first_len} to {} bytes; {} flushes carried a new length",
        disk.image().len(),
        disk.syncs_of_new_length() - before
    );
    (
        disk.syncs_of_new_length() - before,
        growths,
        first_len,
        disk.image().len() as u64,
    )
}

/// Only a growth step's own flush carries a new length: no commit's write extends the
/// file. And the steps are geometric: growing from 8 KiB to the workload's size takes a
/// few steps of at least a quarter of the file each, not one per commit.
#[test]
fn only_growth_steps_flush_a_new_file_length() {
    let (length_flushes, growths, first_len, last_len) = length_flushes(None);
    assert_eq!(
        length_flushes, growths,
        "{length_flushes} flushes carried a new length, but the store grew {growths} times"
    );
    // Each step adds at least a quarter of the slots: n steps reach first * 1.25^n.
    let most_steps = ((last_len as f64 / first_len as f64).ln() / 1.25f64.ln()).ceil() as u64 + 1;
    assert!(
        (12..=most_steps).contains(&growths),
        "{growths} steps from {first_len} to {last_len} bytes (at most {most_steps})"
    );
}

/// The negative control: with commits extending the file themselves, their flushes carry
/// the new lengths.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_lazy_growth_makes_commits_flush_new_lengths() {
    let (length_flushes, growths, _, _) = length_flushes(Some(Sabotage::LazyGrowth));
    assert!(
        length_flushes > growths,
        "{length_flushes} flushes carried a new length for {growths} growth steps"
    );
}

/// Commit `rows` small changes to page 0 and 1 of "main", as SQLite inserting rows does.
fn commit_rows(store: &Store, rows: u8) {
    for row in 0..rows {
        let mut t = store.begin();
        let id = match t.file("main") {
            Some(id) => id,
            None => t.create_file("main").unwrap(),
        };
        let mut page = vec![0u8; store.page_size()];
        page[100 + row as usize] = row + 1;
        t.write_page(id, (row % 2) as u64, &page).unwrap();
        t.commit().unwrap();
    }
}

/// A new store of 4 KiB pages and otherwise default options, in a directory of its own.
fn default_store(name: &str) -> (tempfile::TempDir, std::path::PathBuf, Options, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let opts = Options {
        page_size: 4096,
        ..Options::default()
    };
    let store = Store::create(&path, &opts).unwrap();
    (dir, path, opts, store)
}

/// With the default options, a store holding two rows takes at most 1 MiB on disk, and
/// still does after closing and reopening (a checkpoint).
#[test]
fn a_store_of_two_rows_takes_at_most_a_mebibyte() {
    let (_dir, path, opts, store) = default_store("two-rows.onesync");
    commit_rows(&store, 2);
    assert!(on_disk(&path) <= MIB, "{} bytes on disk", on_disk(&path));
    store.close().unwrap();
    let store = Store::open(&path, &opts).unwrap();
    commit_rows(&store, 2);
    store.close().unwrap();
    assert!(
        on_disk(&path) <= MIB,
        "{} bytes on disk after reopening",
        on_disk(&path)
    );
}

/// A second process that joins and writes grows the store by one small step: it owns no
/// free slot of the first one's, and grows by a share of what it grew itself, not of the
/// whole file.
#[test]
fn a_joining_process_grows_the_store_by_one_small_step() {
    let (_dir, path, opts, first) = default_store("joined.onesync");
    // Make the file larger than a few steps, so that a quarter of it is more than a step.
    for round in 0..8u8 {
        let mut t = first.begin();
        let id = match t.file("bulk") {
            Some(id) => id,
            None => t.create_file("bulk").unwrap(),
        };
        for page in 0..128u64 {
            t.write_page(id, u64::from(round) * 128 + page, &[round + 1; 4096])
                .unwrap();
        }
        t.commit().unwrap();
    }
    commit_rows(&first, 2);
    let before = std::fs::metadata(&path).unwrap().len();
    assert!(before > 4 * opts.growth_step, "{before} bytes");
    let second = Store::open(&path, &opts).unwrap();
    commit_rows(&second, 20);
    let grown = std::fs::metadata(&path).unwrap().len() - before;
    assert!(
        grown <= opts.growth_step,
        "the joining process grew the store by {grown} bytes"
    );
    // None when the chain's window still had room for its commits.
    assert!(second.stats().growths <= 1, "{:?}", second.stats());
    drop(second);
    first.close().unwrap();
}

/// A process that joins others owns no free slot, so its first commit needs a step: it is
/// grown before that commit queues for the write lock, not inside it, where every other
/// process would wait for its zeros and flush (`bench writers --processes 16`: 6.0 steps
/// inside the locks per 1,000 commits against 1.3, p99.9 49 ms against 21).
#[test]
fn a_joining_process_grows_before_its_first_commit_takes_the_locks() {
    let (_dir, path, opts, first) = default_store("joined.onesync");
    commit_rows(&first, 2);
    let second = Store::open(&path, &opts).unwrap();
    let mut t = second.begin();
    let id = t.file("main").unwrap();
    t.write_page(id, 2, &[7u8; 4096]).unwrap();
    t.commit().unwrap();
    let stats = second.stats();
    assert_eq!(stats.growths, 1, "{stats:?}");
    assert_eq!(
        stats.growths_holding_locks, 0,
        "the joining process grew inside its first commit's locks"
    );
    drop(second);
    first.close().unwrap();
}

/// A growth step whose flush fails (EIO) while another commit is written but not yet
/// flushed: Linux may have dropped that commit's pages and will not report it again, so
/// the store must refuse to call it durable. Returns whether the commit that needed the
/// step succeeded, whether the pending commit was acknowledged, and whether a power cut
/// then lost it.
fn failed_growth_flush(sabotage: Option<Sabotage>) -> (bool, bool, bool) {
    let disk = SimDisk::new();
    let opts = small_steps(sabotage);
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let mut t = store.begin();
    let id = t.create_file("data").unwrap();
    t.write_page(id, 0, &content(1, 0)).unwrap();
    let pending = t.commit_without_waiting().unwrap();
    // Far more pages than the free slots: the store must grow, and that flush fails.
    let mut big = store.begin();
    disk.fail_syncs(1);
    let grew = (|| {
        for page in 1..=64 {
            big.write_page(id, page, &content(2, page))?;
        }
        big.commit().map_err(|e| e.error)
    })();
    let acknowledged = pending.wait().is_ok();
    drop(store);
    let after = disk.power_cut(&mut StdRng::seed_from_u64(1));
    let store = Store::open_with_io(after.io(), &opts).unwrap();
    (grew.is_ok(), acknowledged, store.last_seq() < 1)
}

#[test]
fn a_failed_growth_flush_acknowledges_no_unflushed_commit() {
    let (grew, acknowledged, lost) = failed_growth_flush(None);
    // The step is grown before the commit queues for the locks; the poisoned store
    // refuses the commit after it.
    assert!(!grew, "the commit that needed a growth step succeeded");
    assert!(
        !(acknowledged && lost),
        "a commit acknowledged after a failed growth flush was lost at a power cut"
    );
    assert!(!acknowledged, "the store was not poisoned by the failed flush");
}

/// The negative control: with the failed growth flush not poisoning the store, the pending
/// commit is acknowledged and a power cut loses it.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_an_ignored_growth_flush_failure_loses_an_acknowledged_commit() {
    let (_, acknowledged, lost) = failed_growth_flush(Some(Sabotage::GrowthFlushFailureIgnored));
    assert_eq!((acknowledged, lost), (true, true));
}

/// Commits stay one write in a small store whose free room is holes between live pages:
/// a commit's next window must fit a commit like it, or the chain moves on. The workload:
/// 1,024 pages written once, checkpointed, then 10,000 one-page updates at random pages,
/// from the default 256 KiB start (the figure in the README's "Growth" paragraph).
#[test]
fn commits_in_a_small_fragmented_store_stay_one_write() {
    let disk = SimDisk::new();
    let opts = Options {
        page_size: 4096,
        ..Options::default()
    };
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let mut t = store.begin();
    let file = t.create_file("f").unwrap();
    for page in 0..1024 {
        t.write_page(file, page, &[0x5a; 4096]).unwrap();
    }
    t.commit().unwrap();
    store.checkpoint().unwrap();
    let before = store.stats();
    let mut rng = StdRng::seed_from_u64(12345);
    const UPDATES: u64 = 10_000;
    for update in 0..UPDATES {
        let mut page = vec![0u8; 4096];
        // Every byte differs from the last version: a whole page, never an overlay.
        for (i, word) in page.chunks_mut(8).enumerate() {
            word.copy_from_slice(&(update * 1000 + i as u64).to_le_bytes());
        }
        let mut t = store.begin();
        t.write_page(file, rand::Rng::random_range(&mut rng, 0..1024), &page)
            .unwrap();
        t.commit().unwrap();
    }
    let after = store.stats();
    let per_commit = (after.write_calls - before.write_calls) as f64 / UPDATES as f64;
    println!(
        "{per_commit:.3} write calls per commit; {} growth steps, {} checkpoints, {} slots",
        after.growths - before.growths,
        after.checkpoints - before.checkpoints,
        after.slots_total
    );
    assert!(per_commit <= 1.01, "{per_commit:.3} write calls per commit");
}

/// Growth steps, those grown inside a commit's locks, and checkpoints, over 2,000 commits of
/// three new pages and one rewritten (the record and four slots), after the first.
fn growth_of_a_growing_store(opts: &Options) -> (u64, u64, u64) {
    let store = Store::create_with_io(SimDisk::new().io(), opts).unwrap();
    let mut t = store.begin();
    let file = t.create_file("f").unwrap();
    t.write_page(file, 0, &[1u8; PS]).unwrap();
    t.commit().unwrap();
    let mut next = 1;
    let mut before = store.stats();
    for seq in 0..2_000u64 {
        let mut t = store.begin();
        for _ in 0..3 {
            t.write_page(file, next, &content(seq, next)).unwrap();
            next += 1;
        }
        t.write_page(file, seq % next, &content(seq, 0)).unwrap();
        t.commit().unwrap();
        if seq == 0 {
            // Ahead means for a commit like the last: the first of its size may grow inside.
            before = store.stats();
        }
    }
    let after = store.stats();
    (
        after.growths - before.growths,
        after.growths_holding_locks - before.growths_holding_locks,
        after.checkpoints - before.checkpoints,
    )
}

/// Runs `growth_of_a_growing_store` and checks that it grew the store often, and never
/// inside a commit's locks. Returns its checkpoints.
fn grows_ahead_only(opts: &Options) -> u64 {
    let (steps, inside, checkpoints) = growth_of_a_growing_store(opts);
    println!("{steps} growth steps, {inside} of them inside a commit's locks; {checkpoints} checkpoints");
    assert!(steps >= 10, "the workload grew the store only {steps} times");
    assert_eq!(
        inside, 0,
        "{inside} of {steps} growth steps inside a commit's locks"
    );
    checkpoints
}

/// A store grows ahead of need, after a commit and outside its locks, so that no commit
/// waits inside them for a step's zeros and flush while every other one waits for it.
/// Ahead means in time for the next commit's window, which sequencing asks to be one slot
/// longer than a commit (the next commit may be larger: `grow_ahead_due` asks twice that).
/// Growing ahead only once the longest free run was shorter than the commit itself, this
/// test grows 20 of 26 steps inside the locks: the longest run was often exactly the
/// commit's length. One writer, checkpoints leaving short free runs behind.
#[test]
fn a_store_grows_ahead_of_its_commits_not_inside_them() {
    let opts = Options {
        checkpoint_interval: 25,
        // Steps of a quarter of the file throughout (no checkpoint first, see
        // `Options::max_growth_step`).
        max_growth_step: 64 << 20,
        ..small_steps(None)
    };
    grows_ahead_only(&opts);
}

/// A file of `max_growth_step` or more checkpoints before it grows only where that frees a
/// quarter of a step: a store that mostly adds pages supersedes few slots, and each such
/// checkpoint wrote the whole mapping inside a commit's locks, took a run for it by growing
/// there, and freed a few scattered slots. It grows ahead instead, like a smaller one.
/// (Checkpointing before every step, and growing only inside the locks, this test counts
/// 96 of 101 steps inside the locks and 263 checkpoints, 80 of them due; now 0 and 82.)
#[test]
fn a_large_store_that_mostly_adds_pages_grows_ahead_without_checkpointing_first() {
    let opts = Options {
        checkpoint_interval: 25,
        // Large from 128 slots on: steps of 128 slots, checkpoints first where they pay.
        max_growth_step: 64 << 10,
        ..small_steps(None)
    };
    let checkpoints = grows_ahead_only(&opts);
    let due = 2_000 / opts.checkpoint_interval;
    assert!(
        checkpoints <= due + due / 10,
        "{checkpoints} checkpoints, {due} due by checkpoint_interval"
    );
}
