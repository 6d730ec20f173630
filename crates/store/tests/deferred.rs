//! Deferred durability (`PendingCommit::show`, SQLite's `synchronous=NORMAL`/`OFF`): a commit
//! shown once written, durable within the interval, on `Store::flush`, or lost to a power cut
//! only as part of a suffix, never torn and never with a gap.

use std::time::{Duration, Instant};

use onesync_store::sim::SimDisk;
use onesync_store::{Options, Store};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tempfile::TempDir;

fn options(interval: Duration) -> Options {
    Options {
        page_size: 512,
        initial_capacity: 1 << 20,
        growth_step: 1 << 20,
        deferred_flush_interval: interval,
        ..Options::default()
    }
}

/// Commits one page of `byte` to page `index` of "main" and shows it without waiting.
fn commit_shown(store: &Store, index: u64, byte: u8) -> u64 {
    let mut txn = store.begin();
    let main = match txn.file("main") {
        Some(id) => id,
        None => txn.create_file("main").unwrap(),
    };
    txn.write_page(main, index, &[byte; 512]).unwrap();
    let pending = txn.commit_without_waiting().unwrap();
    pending.show(true).unwrap();
    pending.seq()
}

fn read(store: &Store, index: u64) -> Option<u8> {
    let snapshot = store.snapshot();
    let main = snapshot.file("main")?;
    if snapshot.file_size(main).ok()? <= index * 512 {
        return None;
    }
    let mut buf = [0u8; 512];
    snapshot.read_page(main, index, &mut buf).ok()?;
    Some(buf[0])
}

#[test]
fn a_shown_commit_is_read_at_once_and_durable_on_flush() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &options(Duration::from_secs(3600))).unwrap();
    let syncs_before = disk.syncs();
    let seq = commit_shown(&store, 0, 7);
    assert_eq!(
        read(&store, 0),
        Some(7),
        "a new snapshot shows the commit at once"
    );
    assert!(store.durable_seq() < seq, "and it is not durable yet");
    assert_eq!(disk.syncs(), syncs_before, "no flush for a shown commit");
    assert_eq!(store.flush().unwrap(), seq);
    assert_eq!(store.durable_seq(), seq);
}

#[test]
fn the_background_flush_comes_within_the_interval() {
    let disk = SimDisk::new();
    let interval = Duration::from_millis(20);
    let store = Store::create_with_io(disk.io(), &options(interval)).unwrap();
    let seq = commit_shown(&store, 0, 1);
    let started = Instant::now();
    while store.durable_seq() < seq {
        assert!(started.elapsed() < Duration::from_secs(5), "never made durable");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Many commits inside one interval share its flush.
    let syncs_before = disk.syncs();
    let mut last = 0;
    for index in 0..50 {
        last = commit_shown(&store, index % 8, index as u8);
    }
    std::thread::sleep(interval * 10);
    assert_eq!(store.durable_seq(), last);
    let flushes = disk.syncs() - syncs_before;
    assert!((1..=10).contains(&flushes), "{flushes} flushes for 50 commits");
}

/// The negative control is the first half: without a flush, a cut can take shown commits
/// back. What survives is always a prefix: page i holds commit i's byte for every commit up
/// to some point and nothing after it.
#[test]
fn a_power_cut_keeps_a_prefix_of_shown_commits() {
    let mut lost_some = false;
    for seed in 0..40 {
        let disk = SimDisk::new();
        let store = Store::create_with_io(disk.io(), &options(Duration::from_secs(3600))).unwrap();
        let base = commit_shown(&store, 0, 100);
        store.flush().unwrap();
        let commits = 20u64;
        for index in 1..=commits {
            commit_shown(&store, index, index as u8);
        }
        // The power goes before the store is dropped (dropping flushes what was shown).
        disk.cut_after(0);
        drop(store);
        let survivor = disk.power_cut(&mut StdRng::seed_from_u64(seed));
        let store = Store::open_with_io(survivor.io(), &options(Duration::from_secs(3600))).unwrap();
        let last = store.last_seq();
        assert!(last >= base, "seed {seed}: the flushed commit was lost");
        let kept = last - base;
        for index in 1..=commits {
            let expected = (index <= kept).then_some(index as u8);
            assert_eq!(
                read(&store, index),
                expected,
                "seed {seed}: page {index} (kept {kept})"
            );
        }
        lost_some |= kept < commits;
    }
    assert!(
        lost_some,
        "no cut ever took back an unflushed commit: the test cannot fail"
    );
}

/// Waits up to five seconds for `store` to be durable up to `seq`.
fn durable_within_5s(store: &Store, seq: u64) -> bool {
    let started = Instant::now();
    while store.durable_seq() < seq {
        if started.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[test]
fn the_interval_can_change_while_open() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &options(Duration::from_secs(3600))).unwrap();
    assert_eq!(store.deferred_flush_interval(), Duration::from_secs(3600));
    let seq = commit_shown(&store, 0, 1);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        store.durable_seq() < seq,
        "an hour's interval flushed within 50 ms"
    );
    // Shortening it brings the flush already due forward.
    store.set_deferred_flush_interval(Duration::from_millis(5));
    assert_eq!(store.deferred_flush_interval(), Duration::from_millis(5));
    assert!(
        durable_within_5s(&store, seq),
        "the shortened interval never flushed"
    );
}

#[test]
fn enough_unflushed_bytes_flush_before_the_interval() {
    let disk = SimDisk::new();
    let opts = Options {
        deferred_flush_bytes: 8 * 512,
        ..options(Duration::from_secs(3600))
    };
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let first = commit_shown(&store, 0, 1);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        store.durable_seq() < first,
        "one small commit flushed: the bound cannot fail"
    );
    let mut last = first;
    for index in 1..20 {
        last = commit_shown(&store, index, index as u8);
    }
    assert!(
        durable_within_5s(&store, last - 8),
        "the byte bound never called a flush"
    );
}

#[test]
fn dropping_the_store_flushes_what_it_showed() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &options(Duration::from_secs(3600))).unwrap();
    let base = store.last_seq();
    let mut last = base;
    for index in 0..5 {
        last = commit_shown(&store, index, 9);
    }
    drop(store);
    let survivor = disk.power_cut(&mut StdRng::seed_from_u64(1));
    let store = Store::open_with_io(survivor.io(), &options(Duration::from_secs(3600))).unwrap();
    assert_eq!(store.last_seq(), last, "commits shown before the drop were lost");
}

/// Two opens of one file share it as two processes would (their locks are per open file
/// description): a commit one shows before it is durable, the other's readers show too.
#[test]
fn another_process_shows_a_commit_shown_before_it_was_durable() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("shared.onesync");
    let opts = options(Duration::from_secs(3600));
    Store::create(&path, &opts).unwrap().close().unwrap();
    let writer = Store::open(&path, &opts).unwrap();
    let reader = Store::open(&path, &opts).unwrap();
    let seq = commit_shown(&writer, 0, 42);
    assert!(writer.durable_seq() < seq);
    assert_eq!(read(&reader, 0), Some(42), "the other process does not show it");
    reader.close().unwrap();
    writer.close().unwrap();
}
