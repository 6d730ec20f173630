//! Behaviour of the public API on a real file and on the simulated disk.

use onesync_store::sim::SimDisk;
use onesync_store::{Error, Options, Store};

fn small() -> Options {
    Options {
        page_size: 512,
        initial_capacity: 1 << 20,
        log_capacity: 64 << 10,
        growth_step: 1 << 20,
        ..Options::default()
    }
}

fn page(byte: u8, size: usize) -> Vec<u8> {
    vec![byte; size]
}

#[test]
fn commits_survive_reopen_on_a_real_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.onesync");
    let store = Store::create(&path, &Options::default()).unwrap();
    let mut t = store.begin();
    let main = t.create_file("main").unwrap();
    let other = t.create_file("aux").unwrap();
    t.write_page(main, 0, &page(1, 4096)).unwrap();
    t.write_page(main, 2, &page(2, 4096)).unwrap();
    t.write_page(other, 0, &page(3, 4096)).unwrap();
    assert_eq!(t.commit().unwrap(), 1);
    drop(store);
    let store = Store::open(&path, &Options::default()).unwrap();
    assert_eq!(store.stats().recoveries, 1);
    let s = store.snapshot();
    let main = s.file("main").unwrap();
    assert_eq!(s.file_size(main).unwrap(), 3 * 4096);
    let mut buf = vec![0u8; 4096];
    s.read_page(main, 1, &mut buf).unwrap();
    assert_eq!(buf, page(0, 4096));
    s.read_page(main, 2, &mut buf).unwrap();
    assert_eq!(buf, page(2, 4096));
    s.read_page(s.file("aux").unwrap(), 0, &mut buf).unwrap();
    assert_eq!(buf, page(3, 4096));
    drop(s);
    store.close().unwrap();
    let store = Store::open(&path, &Options::default()).unwrap();
    assert_eq!(
        store.stats().recoveries,
        0,
        "a clean close leaves nothing to replay"
    );
}

#[test]
fn one_page_commit_is_one_write_and_one_flush() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &Options::default()).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    t.write_page(f, 0, &page(7, 4096)).unwrap();
    t.commit().unwrap();
    let before = store.stats();
    let syncs = disk.syncs();
    let mut t = store.begin();
    t.write_page(f, 0, &page(8, 4096)).unwrap();
    t.commit().unwrap();
    let after = store.stats();
    assert_eq!(disk.syncs() - syncs, 1);
    assert_eq!(after.flushes - before.flushes, 1);
    // The record's slot and the page, contiguous, in one call.
    assert_eq!(after.bytes_written - before.bytes_written, 2 * 4096);
    assert_eq!(after.write_calls - before.write_calls, 1);
}

#[test]
fn small_changes_ride_in_the_record() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &Options::default()).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    let mut p = page(7, 4096);
    t.write_page(f, 0, &p).unwrap();
    t.commit().unwrap();
    for counter in 0..50u32 {
        let before = store.stats().bytes_written;
        p[24..28].copy_from_slice(&counter.to_be_bytes());
        p[92..96].copy_from_slice(&counter.to_be_bytes());
        let mut t = store.begin();
        t.write_page(f, 0, &p).unwrap();
        t.commit().unwrap();
        // Only the record is written: its slot, whole (a partial block would make the
        // kernel read the rest of it first).
        assert_eq!(
            store.stats().bytes_written - before,
            4096,
            "only the record's slot is written"
        );
    }
    assert_eq!(store.stats().pages_embedded, 50);
    assert_eq!(store.stats().pages_written, 1);
    let reopened = Store::open_with_io(Box::new(disk.clone()), &Options::default());
    assert!(reopened.is_ok());
    let s = reopened.unwrap().snapshot();
    let mut buf = vec![0u8; 4096];
    s.read_page(f, 0, &mut buf).unwrap();
    assert_eq!(buf, p);
}

#[test]
fn snapshots_see_one_state_and_conflicts_are_caught() {
    let store = Store::create_with_io(SimDisk::new().io(), &small()).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    t.write_page(f, 0, &page(1, 512)).unwrap();
    t.commit().unwrap();
    let old = store.snapshot();
    let mut a = store.begin();
    let mut b = store.begin();
    a.write_page(f, 0, &page(2, 512)).unwrap();
    b.write_page(f, 0, &page(3, 512)).unwrap();
    a.commit().unwrap();
    let err = b.commit().unwrap_err();
    assert!(matches!(err.error, Error::Conflict(_)), "{err}");
    assert_eq!(err.seq, None);
    let mut buf = vec![0u8; 512];
    old.read_page(f, 0, &mut buf).unwrap();
    assert_eq!(buf, page(1, 512));
    store.snapshot().read_page(f, 0, &mut buf).unwrap();
    assert_eq!(buf, page(2, 512));
}

#[test]
fn truncate_then_extend_reads_zeros() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &small()).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    for n in 0..4 {
        t.write_page(f, n, &page(9, 512)).unwrap();
    }
    t.commit().unwrap();
    let mut t = store.begin();
    t.set_file_size(f, 512).unwrap();
    t.set_file_size(f, 4 * 512).unwrap();
    t.commit().unwrap();
    let reopened = Store::open_with_io(Box::new(disk.clone()), &small()).unwrap();
    let mut buf = vec![1u8; 512];
    reopened.snapshot().read_page(f, 3, &mut buf).unwrap();
    assert_eq!(buf, page(0, 512));
    reopened.snapshot().read_page(f, 0, &mut buf).unwrap();
    assert_eq!(buf, page(9, 512));
}

#[test]
fn many_commits_checkpoint_and_reuse_slots() {
    let disk = SimDisk::new();
    let opts = Options {
        checkpoint_interval: 50,
        ..small()
    };
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    t.commit().unwrap();
    for i in 0..3000u32 {
        let mut t = store.begin();
        t.write_page(f, (i % 7) as u64, &page((i % 251) as u8, 512))
            .unwrap();
        t.commit().unwrap();
    }
    let st = store.stats();
    assert!(st.checkpoints >= 50, "{st:?}");
    assert_eq!(
        st.bytes_preallocated, 0,
        "slots are reused, the file never grows: {st:?}"
    );
    let reopened = Store::open_with_io(Box::new(disk.clone()), &opts).unwrap();
    let mut buf = vec![0u8; 512];
    reopened
        .snapshot()
        .read_page(f, (2999 % 7) as u64, &mut buf)
        .unwrap();
    assert_eq!(buf, page((2999 % 251) as u8, 512));
}

#[test]
fn small_windows_make_commits_jump_and_still_recover() {
    let disk = SimDisk::new();
    let opts = Options {
        window_bytes: 2 * 512,
        checkpoint_interval: 7,
        ..small()
    };
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    t.commit().unwrap();
    for i in 0..200u32 {
        let mut t = store.begin();
        // Every tenth commit maps 200 pages: its record spans more slots than the
        // window the commit before it left, so it jumps.
        let pages = if i % 10 == 0 { 200 } else { (i % 5) as u64 };
        for p in 0..pages {
            t.write_page(f, p, &page((i + p as u32) as u8, 512)).unwrap();
        }
        t.commit().unwrap();
    }
    let st = store.stats();
    assert!(st.jumps > 0, "{st:?}");
    assert!(
        st.write_calls > st.commit_records,
        "some pages went out of line: {st:?}"
    );
    drop(store);
    let reopened = Store::open_with_io(Box::new(disk), &opts).unwrap();
    let mut buf = vec![0u8; 512];
    reopened.snapshot().read_page(f, 3, &mut buf).unwrap();
    assert_eq!(buf, page((199 + 3) as u8, 512));
    reopened.snapshot().read_page(f, 39, &mut buf).unwrap();
    assert_eq!(buf, page((190 + 39) as u8, 512));
}

/// A long chain recovers the same from a real file, which recovery reads ahead on a thread
/// of its own (chunks ahead of the chain, dropped where it jumps; pages outside them read
/// alone), as from the simulated disk, read only when needed: every record replayed and
/// every page as written. The chain hops through the small runs the setup's records left
/// free, and some commits write several pages, some of them in free slots elsewhere.
#[test]
fn a_long_chain_recovers_the_same_read_ahead_on_a_thread() {
    const PAGES: u64 = 4096;
    let opts = Options {
        page_size: 4096,
        checkpoint_interval: 0,
        initial_capacity: (PAGES + 256) * 4096,
        max_growth_step: u64::MAX,
        ..Options::default()
    };
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &opts).unwrap();
    let mut t = store.begin();
    let main = t.create_file("main").unwrap();
    for chunk in 0..PAGES / 512 {
        for p in chunk * 512..(chunk + 1) * 512 {
            t.write_page(main, p, &page(p as u8, 4096)).unwrap();
        }
        t.commit().unwrap();
        t = store.begin();
    }
    drop(t);
    store.checkpoint().unwrap();
    let mut x = 7u64;
    let mut next = |bound: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % bound
    };
    let mut expected: Vec<u8> = (0..PAGES).map(|p| p as u8).collect();
    let before = store.stats().commit_records;
    let checkpoints = store.stats().checkpoints;
    for commit in 0..2000 {
        let mut t = store.begin();
        for _ in 0..1 + next(4) / 3 * next(6) {
            let p = next(PAGES);
            let byte = (commit % 251) as u8;
            t.write_page(main, p, &page(byte, 4096)).unwrap();
            expected[p as usize] = byte;
        }
        t.commit().unwrap();
    }
    assert_eq!(
        store.stats().checkpoints,
        checkpoints,
        "no checkpoint among the records"
    );
    // A commit that rewrites a page as it was writes no record.
    let records = store.stats().commit_records - before;
    assert!(records > 1900, "{records} records");
    drop(store);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.onesync");
    std::fs::write(&path, disk.image()).unwrap();
    let from_file = Store::open(&path, &opts).unwrap();
    let from_sim = Store::open_with_io(SimDisk::from_image(disk.image()).io(), &opts).unwrap();
    for store in [&from_file, &from_sim] {
        assert_eq!(store.stats().records_replayed, records);
        let snap = store.snapshot();
        let main = snap.file("main").unwrap();
        let mut buf = vec![0u8; 4096];
        for p in 0..PAGES {
            snap.read_page(main, p, &mut buf).unwrap();
            assert_eq!(buf, page(expected[p as usize], 4096), "page {p}");
        }
    }
}

#[test]
fn a_checkpoint_counts_its_bytes_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s.onesync"), &Options::default()).unwrap();
    let mut t = store.begin();
    let main = t.create_file("main").unwrap();
    for p in 0..100 {
        t.write_page(main, p, &page(p as u8, 4096)).unwrap();
    }
    t.commit().unwrap();
    let before = store.stats();
    store.checkpoint().unwrap();
    let after = store.stats();
    // One, and perhaps a compacting one to give the file's free end back.
    let checkpoints = after.checkpoints - before.checkpoints;
    assert!(checkpoints > 0, "{after:?}");
    // Each wrote a mapping and two header copies (1 KiB each); pages a compacting one moved
    // are written but not counted as the checkpoint's.
    let bytes = after.checkpoint_bytes - before.checkpoint_bytes;
    assert!(bytes >= checkpoints * 2 * 1024, "{after:?}");
    assert!(bytes <= after.bytes_written - before.bytes_written, "{after:?}");
    // Two flushes on a real file take time.
    assert!(after.checkpoint_micros > before.checkpoint_micros, "{after:?}");
}
