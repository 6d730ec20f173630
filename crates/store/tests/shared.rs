//! Several handles on one store file, as several processes have it: each `Store::open` is
//! its own open file description, so its locks and its copy of the mapping are its own,
//! exactly as in another process. Random interleavings of commits, conflicting
//! transactions, long-lived snapshots, checkpoints, closes and reopens are checked against
//! a model; every handle must see every commit, old snapshots must keep reading what they
//! saw (while others reuse slots), and a final open alone must recover the model.

#[path = "support/sabotage.rs"]
mod sabotage;
use sabotage::with_sabotage;
use std::collections::BTreeMap;

use onesync_store::{Error, Options, Sabotage, Snapshot, Store, Transaction};
use proptest::prelude::*;

const PS: usize = 512;
const PAGES: u64 = 12;

fn opts() -> Options {
    Options {
        page_size: PS as u32,
        initial_capacity: 64 << 10,
        growth_step: 32 << 10,
        // The first process (64 KiB of slots) checkpoints to reuse slots before it grows;
        // one that joined grows its own few slots in small steps.
        max_growth_step: 64 << 10,
        log_capacity: 16 << 10,
        window_bytes: 8 << 10,
        checkpoint_interval: 7,
        ..Options::default()
    }
}

/// Page number -> fill byte of the page (0: never written).
type Model = BTreeMap<u64, u8>;

fn read_all(snap: &Snapshot) -> Model {
    let mut seen = Model::new();
    let Some(id) = snap.file("data") else {
        return seen;
    };
    let mut page = vec![0u8; PS];
    for n in 0..PAGES {
        snap.read_page(id, n, &mut page).unwrap();
        assert!(page.iter().all(|b| *b == page[0]), "page {n} is torn");
        if page[0] != 0 {
            seen.insert(n, page[0]);
        }
    }
    seen
}

#[derive(Debug, Clone)]
enum Step {
    /// Handle writes pages (fill byte from a counter) and commits.
    Commit {
        handle: usize,
        pages: Vec<u64>,
    },
    /// Handle begins writing pages, another handle commits over one of them, then the
    /// first commits: it must get a conflict and change nothing.
    Race {
        first: usize,
        second: usize,
        page: u64,
    },
    /// Handle keeps a snapshot (checked at the end and when dropped).
    Hold {
        handle: usize,
    },
    Release,
    Checkpoint {
        handle: usize,
    },
    Reopen {
        handle: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let h = 0..3usize;
    prop_oneof![
        6 => (h.clone(), proptest::collection::vec(0..PAGES, 1..4))
            .prop_map(|(handle, pages)| Step::Commit { handle, pages }),
        1 => (h.clone(), h.clone(), 0..PAGES).prop_map(|(first, second, page)| Step::Race { first, second, page }),
        1 => h.clone().prop_map(|handle| Step::Hold { handle }),
        1 => Just(Step::Release),
        1 => h.clone().prop_map(|handle| Step::Checkpoint { handle }),
        1 => h.prop_map(|handle| Step::Reopen { handle }),
    ]
}

/// A new store with an empty logical file "data" of `PAGES` pages.
fn create_with_data_file(path: &std::path::Path) -> Store {
    let store = Store::create(path, &opts()).unwrap();
    let mut t = store.begin();
    let f = t.create_file("data").unwrap();
    t.set_file_size(f, PAGES * PS as u64).unwrap();
    t.commit().unwrap();
    store
}

/// Two handles on a new store with the data file, as two processes have it (the directory
/// goes with the first).
fn two_handles() -> (tempfile::TempDir, Store, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.onesync");
    let a = create_with_data_file(&path);
    let b = Store::open(&path, &opts()).unwrap();
    (dir, a, b)
}

/// A transaction of `store` that writes `page` of the data file full of `byte`.
fn write_page_of(store: &Store, page: u64, byte: u8) -> Transaction {
    let mut t = store.begin();
    let f = t.file("data").unwrap();
    t.write_page(f, page, &[byte; PS]).unwrap();
    t
}

fn run(steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.onesync");
    let first = create_with_data_file(&path);
    let mut handles: Vec<Option<Store>> = vec![
        Some(first),
        Some(Store::open(&path, &opts()).unwrap()),
        Some(Store::open(&path, &opts()).unwrap()),
    ];
    let mut model = Model::new();
    let mut held: Vec<(Snapshot, Model)> = Vec::new();
    let mut fill = 0u8;
    let mut next_fill = || {
        fill = fill % 250 + 1;
        fill
    };
    let write = |store: &Store, pages: &[u64], byte: u8| {
        let mut t = store.begin();
        let f = t.file("data").unwrap();
        for &p in pages {
            t.write_page(f, p, &[byte; PS]).unwrap();
        }
        t
    };
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Commit { handle, pages } => {
                let store = handles[*handle].as_ref().unwrap();
                let byte = next_fill();
                write(store, pages, byte).commit().unwrap();
                for &p in pages {
                    model.insert(p, byte);
                }
            }
            Step::Race { first, second, page } => {
                let a = handles[*first].as_ref().unwrap();
                let b = handles[*second].as_ref().unwrap();
                let (byte_a, byte_b) = (next_fill(), next_fill());
                let loser = write(a, &[*page], byte_a);
                write(b, &[*page], byte_b).commit().unwrap();
                model.insert(*page, byte_b);
                match loser.commit() {
                    Err(e) if matches!(e.error, Error::Conflict(_)) => {}
                    other => panic!("step {i}: expected a conflict, got {:?}", other.map(|_| ())),
                }
            }
            Step::Hold { handle } => {
                let snap = handles[*handle].as_ref().unwrap().try_snapshot().unwrap();
                assert_eq!(read_all(&snap), model, "step {i}: a new snapshot");
                held.push((snap, model.clone()));
            }
            Step::Release => {
                if let Some((snap, then)) = held.pop() {
                    assert_eq!(read_all(&snap), then, "step {i}: a held snapshot changed");
                }
            }
            Step::Checkpoint { handle } => handles[*handle].as_ref().unwrap().checkpoint().unwrap(),
            Step::Reopen { handle } => {
                // Held snapshots are checked and dropped first (the simple way to drop the
                // closing handle's).
                if let Some(store) = handles[*handle].take() {
                    let keep: Vec<_> = std::mem::take(&mut held);
                    for (snap, then) in keep {
                        assert_eq!(read_all(&snap), then, "step {i}: a held snapshot changed");
                    }
                    store.close().unwrap();
                }
                handles[*handle] = Some(Store::open(&path, &opts()).unwrap());
            }
        }
        for (h, store) in handles.iter().enumerate() {
            let snap = store.as_ref().unwrap().try_snapshot().unwrap();
            assert_eq!(read_all(&snap), model, "step {i} ({s:?}): handle {h} sees");
        }
    }
    for (snap, then) in held.drain(..) {
        assert_eq!(read_all(&snap), then, "a held snapshot changed");
    }
    for store in handles.into_iter().flatten() {
        store.close().unwrap();
    }
    assert!(
        !onesync_store_shm_exists(&path),
        "the last close removes the side file"
    );
    let alone = Store::open(&path, &opts()).unwrap();
    assert_eq!(read_all(&alone.snapshot()), model, "after everyone closed");
}

fn onesync_store_shm_exists(path: &std::path::Path) -> bool {
    onesync_store::layout::side_file(path).unwrap().exists()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("ONESYNC_SHARED_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]
    #[test]
    fn handles_sharing_a_store_agree_with_the_model(steps in proptest::collection::vec(step(), 1..80)) {
        run(&steps);
    }
}

/// One handle (`sabotage` is its) idles while another commits 500 times and checkpoints
/// every few, reusing the slots of the commits it last saw. Returns both, what the
/// commits wrote, and what the idle one then reads.
fn idle_through_many_checkpoints() -> (tempfile::TempDir, Store, Store, Model, Result<Model, Error>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.onesync");
    let busy = create_with_data_file(&path);
    let idle = Store::open(&path, &opts()).unwrap();
    assert!(idle.try_snapshot().unwrap().file("data").is_some());
    let mut model = Model::new();
    for round in 0..500u64 {
        let byte = (round % 250 + 1) as u8;
        let page = round % PAGES;
        write_page_of(&busy, page, byte).commit().unwrap();
        model.insert(page, byte);
    }
    assert!(busy.stats().checkpoints >= 50, "{:?}", busy.stats());
    let seen = idle.try_snapshot().map(|snap| read_all(&snap));
    (dir, busy, idle, model, seen)
}

/// The idle handle must load the newest checkpoint, not read reused slots (nor follow
/// records that are gone), and can write on top.
#[test]
fn an_idle_handle_catches_up_after_many_checkpoints() {
    let (_dir, busy, idle, mut model, seen) = idle_through_many_checkpoints();
    assert_eq!(seen.unwrap(), model);
    write_page_of(&idle, 0, 251).commit().unwrap();
    model.insert(0, 251);
    assert_eq!(read_all(&busy.try_snapshot().unwrap()), model);
}

/// A process a few commits behind another's checkpoint takes the state its manifest names
/// (format version 2: the header and the manifest, not the mapping, nor the records up to
/// it), and sees every commit.
#[test]
fn a_follower_behind_a_checkpoint_takes_the_state_its_manifest_names() {
    let (_dir, a, b) = two_handles();
    let mut model = read_all(&b.try_snapshot().unwrap());
    let before = b.stats();
    for (page, byte) in [(0, 7u8), (3, 8), (0, 9)] {
        write_page_of(&a, page, byte).commit().unwrap();
        model.insert(page, byte);
    }
    a.checkpoint().unwrap();
    assert!(a.stats().checkpoints > before.checkpoints, "{:?}", a.stats());
    assert_eq!(read_all(&b.try_snapshot().unwrap()), model);
    assert_eq!(
        b.stats().records_followed - before.records_followed,
        0,
        "{:?}",
        b.stats()
    );
    // And on top of the state it followed to, it commits in the checkpoint's generation.
    write_page_of(&b, 1, 10).commit().unwrap();
    model.insert(1, 10);
    assert_eq!(read_all(&a.try_snapshot().unwrap()), model);
}

/// Group commit across processes: a flush of one process covers the commits another
/// process wrote before that flush began, and only those.
#[test]
fn one_process_flush_covers_what_another_wrote_before_it() {
    let (_dir, a, b) = two_handles();
    // B's commit is written, not yet durable; A's commit comes after it and flushes.
    let b_pending = write_page_of(&b, 0, 1).commit_without_waiting().unwrap();
    let (a_before, b_before) = (a.stats(), b.stats());
    write_page_of(&a, 1, 2).commit().unwrap();
    assert_eq!(a.stats().flushes, a_before.flushes + 1, "{:?}", a.stats());
    b_pending.wait().unwrap();
    let b_after = b.stats();
    assert_eq!(
        b_after.flushes, b_before.flushes,
        "B flushed although A's flush covered it: {b_after:?}"
    );
    assert_eq!(
        b_after.flushes_by_others,
        b_before.flushes_by_others + 1,
        "{b_after:?}"
    );
    // Written after A's last flush: B flushes itself.
    let b_pending = write_page_of(&b, 2, 3).commit_without_waiting().unwrap();
    b_pending.wait().unwrap();
    assert_eq!(b.stats().flushes, b_after.flushes + 1, "{:?}", b.stats());
    assert_eq!(
        b.stats().flushes_by_others,
        b_after.flushes_by_others,
        "{:?}",
        b.stats()
    );
}

/// What another handle reads of page 3 after a commit of this one whose page is not in
/// the file yet (its writer is still writing it, or died first): the store file holds the
/// record but the page's slot holds zeros, and the side file's written word is below the
/// commit, as it is until the writer's writes return. `sabotage` is the reader's.
fn read_past_a_record_whose_page_is_unwritten(sabotage: Option<Sabotage>) -> Result<Model, Error> {
    const FILL: u8 = 0x5a;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unwritten.onesync");
    let writer = create_with_data_file(&path);
    let reader = Store::open(&path, &with_sabotage(opts(), sabotage)).unwrap();
    assert!(read_all(&reader.try_snapshot().unwrap()).is_empty());
    let mut t = writer.begin();
    let f = t.file("data").unwrap();
    t.write_page(f, 3, &[FILL; PS]).unwrap();
    t.commit().unwrap();
    // Take the page back out of its slot: the only run of a whole page of FILL.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .chunks_exact(PS)
        .position(|slot| slot.iter().all(|b| *b == FILL))
        .expect("the committed page in the store file")
        * PS;
    bytes[at..at + PS].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    // And the written word (offset 32 of the side file) back to before the commit.
    let side = std::fs::OpenOptions::new()
        .write(true)
        .open(onesync_store::layout::side_file(&path).unwrap())
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&side, &0u64.to_le_bytes(), 32).unwrap();
    let snap = reader.try_snapshot()?;
    let id = snap.file("data").unwrap();
    // Page 3 first, so that a read error comes back as one (`read_all` panics on it).
    let mut page = vec![0u8; PS];
    snap.read_page(id, 3, &mut page)?;
    Ok(read_all(&snap))
}

/// A record past the side file's written word is followed only once its pages are in the
/// file: the reader goes on seeing the state before it.
#[test]
fn a_record_whose_pages_are_unwritten_is_not_followed() {
    assert_eq!(
        read_past_a_record_whose_page_is_unwritten(None).unwrap(),
        Model::new()
    );
}

/// Negative control: trusting every record found (`catch-up-trusts-unwritten`), the reader
/// maps page 3 to a slot that does not hold it.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn a_reader_trusting_unwritten_records_reads_a_page_that_is_not_there() {
    let read = read_past_a_record_whose_page_is_unwritten(Some(Sabotage::CatchUpTrustsUnwritten));
    assert!(
        !matches!(&read, Ok(model) if model.is_empty()),
        "the sabotaged reader saw the state before the commit: {read:?}"
    );
}

/// One byte's OFD lock on `file` (`libc::F_WRLCK`, `F_RDLCK` or `F_UNLCK`), waiting for it.
fn ofd_lock(file: &std::fs::File, kind: i32, at: i64) {
    let fl = libc::flock {
        l_type: kind as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: at,
        l_len: 1,
        l_pid: 0,
    };
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_OFD_SETLKW(&fl)).unwrap();
}

/// A process whose commit a flush of another process was announced to cover, when that
/// flusher lets `FLUSH` go without flushing (it died, or its flush failed, right after
/// announcing): here the test is that flusher, holding `FLUSH` through its own open file
/// description and writing the announcement into the side file. Returns how many flushes
/// the waiting process made for its commit, and its waits for an announced flush.
/// `sabotage` is the waiter's.
fn flushes_after_an_announced_flush_that_never_ran(sabotage: Option<Sabotage>) -> (u64, u64) {
    use onesync_store::layout::{side_file, FLUSH_LOCK, SIDE_FILE_FLUSH_COVERS};
    use std::os::unix::fs::FileExt;
    const HELD: std::time::Duration = std::time::Duration::from_millis(150);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("announced.onesync");
    let _first = create_with_data_file(&path);
    let waiter = Store::open(&path, &with_sabotage(opts(), sabotage)).unwrap();
    let flusher = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    ofd_lock(&flusher, libc::F_WRLCK, FLUSH_LOCK);
    let mut t = waiter.begin();
    let f = t.file("data").unwrap();
    t.write_page(f, 0, &[7; PS]).unwrap();
    let pending = t.commit_without_waiting().unwrap();
    let side = std::fs::OpenOptions::new()
        .write(true)
        .open(side_file(&path).unwrap())
        .unwrap();
    side.write_all_at(&pending.seq().to_le_bytes(), SIDE_FILE_FLUSH_COVERS)
        .unwrap();
    let before = waiter.stats();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| pending.wait());
        std::thread::sleep(HELD);
        ofd_lock(&flusher, libc::F_UNLCK, FLUSH_LOCK);
        waiting.join().unwrap().unwrap();
    });
    let after = waiter.stats();
    (
        after.flushes - before.flushes,
        after.announced_flush_waits - before.announced_flush_waits,
    )
}

/// A commit covered by an announced flush waits for it, and when that flush never ran
/// (nothing says its commits are durable), flushes them itself before it returns.
#[test]
fn an_announced_flush_that_never_ran_leaves_the_waiter_to_flush() {
    let (flushes, waits) = flushes_after_an_announced_flush_that_never_ran(None);
    assert_eq!(waits, 1, "the waiter did not wait for the announced flush");
    assert_eq!(
        flushes, 1,
        "the commit was acknowledged without a flush of its own"
    );
}

/// Negative control: trusting the announcement (`announced-flush-trusted`), the commit is
/// acknowledged durable with no flush at all after it was written.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn a_waiter_trusting_an_announced_flush_acknowledges_an_unflushed_commit() {
    let (flushes, _) = flushes_after_an_announced_flush_that_never_ran(Some(Sabotage::AnnouncedFlushTrusted));
    assert_eq!(flushes, 0, "the sabotaged waiter flushed after all");
}

/// Another process follows three commits made before any was shown, the second of them
/// kept as its operations only (`Kept::Ops`); the writer then shows the second
/// (`synchronous=NORMAL`). Returns what the follower's readers are shown before and after.
/// `sabotage` is the follower's.
fn shown_after_following_a_run(sabotage: Option<Sabotage>) -> (Model, Model) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.onesync");
    let writer = create_with_data_file(&path);
    let follower = Store::open(&path, &with_sabotage(opts(), sabotage)).unwrap();
    let pending: Vec<_> = (0..3u8)
        .map(|n| {
            let mut t = writer.begin();
            let f = t.file("data").unwrap();
            t.write_page(f, u64::from(n), &[n + 1; PS]).unwrap();
            t.commit_without_waiting().unwrap()
        })
        .collect();
    let before = read_all(&follower.snapshot());
    pending[1].show(false).unwrap();
    let after = read_all(&follower.snapshot());
    for p in pending {
        p.wait().unwrap();
    }
    (before, after)
}

/// A commit another process showed is shown to this process's readers exactly: the one
/// before it built on with its kept operations, the one after it not.
#[test]
fn a_commit_shown_by_another_process_is_shown_exactly_from_kept_operations() {
    let (before, after) = shown_after_following_a_run(None);
    assert_eq!(before, Model::new(), "a commit was shown before anything said so");
    assert_eq!(after, Model::from([(0, 1), (1, 2)]));
}

/// Negative control: showing the state kept before the operations
/// (`kept-operations-unapplied`), the shown commit is missing.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn a_follower_leaving_out_kept_operations_misses_a_shown_commit() {
    let (_, after) = shown_after_following_a_run(Some(Sabotage::KeptOperationsUnapplied));
    assert_ne!(
        after,
        Model::from([(0, 1), (1, 2)]),
        "the sabotaged follower showed the commit"
    );
}

/// One page patched by several commits (a counter rewritten in place each time, and a new
/// range further on), as SQLite patches page 1 and interior pages: every byte must reach a
/// process following the commits and a recovery alone. Returns the pages each saw, and the
/// pages written. `sabotage` is the writer's.
fn patched_page_as_followed_and_recovered(sabotage: Option<Sabotage>) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("patched.onesync");
    let first = create_with_data_file(&path);
    drop(first);
    let writer = Store::open(&path, &with_sabotage(opts(), sabotage)).unwrap();
    let follower = Store::open(&path, &opts()).unwrap();
    let mut page = vec![9u8; PS];
    let mut t = writer.begin();
    let f = t.file("data").unwrap();
    t.write_page(f, 0, &page).unwrap();
    t.commit().unwrap();
    for n in 1..=4u8 {
        page[24..28].copy_from_slice(&[n; 4]);
        page[100 + 40 * n as usize] = n;
        let mut t = writer.begin();
        t.write_page(f, 0, &page).unwrap();
        t.commit().unwrap();
    }
    let read = |store: &Store| {
        let snap = store.snapshot();
        let mut got = vec![0u8; PS];
        snap.read_page(snap.file("data").unwrap(), 0, &mut got).unwrap();
        got
    };
    let followed = read(&follower);
    drop(follower);
    // Gone without a close (no checkpoint): the next open, alone, recovers from the chain.
    drop(writer);
    let recovered = read(&Store::open(&path, &opts()).unwrap());
    (followed, recovered, page)
}

/// The bytes every patch changed, and only a commit's changed ranges, reach a follower and
/// recovery.
#[test]
fn a_page_patched_over_several_commits_is_followed_and_recovered_whole() {
    let (followed, recovered, written) = patched_page_as_followed_and_recovered(None);
    assert_eq!(
        followed, written,
        "the follower's page differs from the one written"
    );
    assert_eq!(
        recovered, written,
        "the recovered page differs from the one written"
    );
}

/// Negative control: leaving out ranges by offset alone (`patch-ranges-by-offset`), the
/// counter rewritten in place stays old for the follower and for recovery.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn patches_compared_by_offset_lose_bytes_rewritten_in_place() {
    let (followed, recovered, written) =
        patched_page_as_followed_and_recovered(Some(Sabotage::PatchRangesByOffset));
    assert_ne!(followed, written, "the sabotaged follower read every byte");
    assert_ne!(recovered, written, "the sabotaged recovery read every byte");
}

/// A commit whose conflict is already among the commits its process follows before it
/// queues for the write lock is refused there (counted in `early_conflicts`), exactly as
/// the lock's holder would refuse it; one that does not conflict goes through.
#[test]
fn a_commit_that_already_conflicts_is_refused_before_queueing_for_the_lock() {
    let (_dir, a, b) = two_handles();
    // A follows one commit of B: from then on it follows before queueing.
    write_page_of(&b, 5, 9).commit().unwrap();
    drop(a.try_snapshot().unwrap());
    let before = a.stats();
    assert!(before.records_followed > 0, "{before:?}");
    let loser = write_page_of(&a, 0, 1);
    write_page_of(&b, 0, 2).commit().unwrap();
    match loser.commit() {
        Err(e) if matches!(e.error, Error::Conflict(_)) => {}
        other => panic!("expected a conflict, got {:?}", other.map(|_| ())),
    }
    let after = a.stats();
    assert_eq!(after.early_conflicts, before.early_conflicts + 1, "{after:?}");
    assert_eq!(after.conflicts, before.conflicts + 1, "{after:?}");
    // Another page than B's: no conflict, early or late.
    let other = write_page_of(&a, 1, 3);
    write_page_of(&b, 2, 4).commit().unwrap();
    other.commit().unwrap();
    assert_eq!(a.stats().conflicts, after.conflicts, "{:?}", a.stats());
    let seen = read_all(&b.try_snapshot().unwrap());
    assert_eq!(seen.get(&0), Some(&2));
    assert_eq!(seen.get(&1), Some(&3));
    assert_eq!(seen.get(&2), Some(&4));
}

/// `Store::snapshot_known` (what the VFS reads under the SHARED lock SQLite keeps right
/// after its COMMIT) shows this process's own commit and does not look for other
/// processes' later ones; `Store::snapshot` does.
#[test]
fn a_known_snapshot_has_its_own_commit_and_looks_for_no_other() {
    let (_dir, a, b) = two_handles();
    write_page_of(&a, 0, 1).commit().unwrap();
    write_page_of(&b, 1, 2).commit().unwrap();
    let followed = a.stats().records_followed;
    let known = read_all(&a.snapshot_known());
    assert_eq!(known.get(&0), Some(&1), "{known:?}");
    assert_eq!(known.get(&1), None, "{known:?}");
    assert_eq!(a.stats().records_followed, followed, "{:?}", a.stats());
    let latest = read_all(&a.snapshot());
    assert_eq!(latest.get(&1), Some(&2), "{latest:?}");
}
