//! A hostile environment: a full disk, read-only files and mounts, missing paths, locks
//! held by others, failed flushes. Each gives a typed, specific error, never a panic, and
//! loses nothing that was committed.

#[path = "support/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;
#[path = "support/open_recover.rs"]
mod harness;

use fixtures::*;
use onesync_store::sim::SimDisk;
use onesync_store::{Error, Options, Store};
use std::os::unix::fs::PermissionsExt;

// ---------------------------------------------------------------------------------------
// Full disk
// ---------------------------------------------------------------------------------------

/// A store that fills its medium: the medium's capacity is its size at creation.
fn full_disk_store(opts: &Options) -> (SimDisk, Store, Fixture, Error) {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), opts).unwrap();
    disk.set_capacity(Some(disk.image().len() as u64));
    let mut fx = Fixture::new(PS);
    fx.write(&store, "main", &[0]);
    // One new page per commit until a page finds no slot and the file cannot grow.
    for page in 1..10_000u64 {
        let mut t = store.begin();
        let id = t.file("main").unwrap();
        let data = pattern(50_000 + page, PS);
        match t.write_page(id, page, &data) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(disk.image().len() as u64, disk.durable_image().len() as u64);
                return (disk, store, fx, e);
            }
        }
        match t.commit() {
            Ok(_) => {
                let pages = fx.model.get_mut("main").unwrap();
                pages.push(data);
                assert_eq!(pages.len() as u64, page + 1);
            }
            Err(e) => return (disk, store, fx, e.error),
        }
    }
    panic!("the disk never filled up");
}

#[test]
fn a_full_disk_gives_no_space_and_loses_nothing() {
    let opts = Options {
        initial_capacity: 0,
        growth_step: 0,
        // A small commit window, so the medium fills after fewer commits.
        window_bytes: 16 << 10,
        ..small()
    };
    let (disk, store, mut fx, err) = full_disk_store(&opts);
    assert!(matches!(err, Error::NoSpace), "{err:?}");
    assert!(err.to_string().contains("committed data is intact"));
    assert!(
        fx.model["main"].len() > 3,
        "some pages fit before the disk filled"
    );
    assert_holds(&store, &fx.model);
    // Another page: NoSpace again (not sequenced), and nothing changes.
    let mut t = store.begin();
    let id = t.file("main").unwrap();
    t.create_file("another").unwrap();
    t.write_page(id, 500, &pattern(1, PS)).unwrap();
    let e = t.commit().unwrap_err();
    assert!(matches!(e.error, Error::NoSpace), "{e:?}");
    assert_eq!(e.seq, None);
    assert_holds(&store, &fx.model);
    // Reopen: all of it is there.
    drop(store);
    let reopened = Store::open_with_io(Box::new(disk.clone()), &opts).unwrap();
    assert_holds(&reopened, &fx.model);
    // With room again, it grows and commits.
    disk.set_capacity(None);
    fx.write(&reopened, "main", &[600]);
    fx.tweak(&reopened, "main", 1);
    drop(reopened);
    assert_holds(&Store::open_with_io(Box::new(disk), &opts).unwrap(), &fx.model);
}

/// Regression: once the medium was full, no commit fitted at all, not a 4-byte change
/// carried in its record, not a deletion (the one commit that would free space), though
/// free slots remained: the forced checkpoint needed one contiguous run for its blob, and
/// the free slots were single holes between live pages. The store was wedged until the
/// medium had room.
#[test]
fn a_full_disk_still_takes_commits_that_need_no_new_page_slot() {
    let opts = Options {
        initial_capacity: 0,
        growth_step: 0,
        // A small commit window, so the medium fills after fewer commits.
        window_bytes: 16 << 10,
        ..small()
    };
    let (_disk, store, fx, err) = full_disk_store(&opts);
    assert!(matches!(err, Error::NoSpace), "{err:?}");
    let id = store.snapshot().file("main").unwrap();
    let free = store.stats().slots_free;
    let mut small_change = fx.model["main"][1].clone();
    small_change[9] ^= 0x5a;
    let mut t = store.begin();
    t.write_page(id, 1, &small_change).unwrap();
    let overlay = t.commit().map_err(|e| e.error);
    let mut t = store.begin();
    t.delete_file(id).unwrap();
    let deletion = t.commit().map_err(|e| e.error);
    assert!(
        overlay.is_ok() && deletion.is_ok(),
        "with {free} free slots: a 4-byte change gave {overlay:?}, a deletion gave {deletion:?}"
    );
}

#[test]
fn a_commit_whose_checkpoint_finds_no_space_fails_with_no_space_and_nothing_is_lost() {
    // Checkpoint before every commit: once every slot is taken, a commit that needs no slot
    // itself still needs one for its checkpoint.
    let opts = Options {
        initial_capacity: 0,
        log_capacity: 4096,
        growth_step: 0,
        checkpoint_interval: 1,
        window_bytes: 16 << 10,
        ..small()
    };
    let (disk, store, mut fx, err) = full_disk_store(&opts);
    assert!(matches!(err, Error::NoSpace), "{err:?}");
    let id = store.snapshot().file("main").unwrap();
    let mut data = fx.model["main"][0].clone();
    data[7] ^= 0xff;
    let mut t = store.begin();
    t.write_page(id, 0, &data).unwrap();
    match t.commit() {
        Err(e) => {
            assert!(matches!(e.error, Error::NoSpace), "{e:?}");
            assert_eq!(e.seq, None, "a commit refused for space was never sequenced");
        }
        Ok(_) => fx.model.get_mut("main").unwrap()[0] = data.clone(),
    }
    assert_holds(&store, &fx.model);
    drop(store);
    assert_holds(
        &Store::open_with_io(Box::new(disk.clone()), &opts).unwrap(),
        &fx.model,
    );
    disk.set_capacity(None);
    let store = Store::open_with_io(Box::new(disk.clone()), &opts).unwrap();
    fx.tweak(&store, "main", 0);
    fx.write(&store, "main", &[1]);
    drop(store);
    assert_holds(&Store::open_with_io(Box::new(disk), &opts).unwrap(), &fx.model);
}

/// A 2 MiB tmpfs mounted in a temporary directory; unmounted on drop.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount() -> Option<TinyFs> {
        if !is_root() {
            eprintln!("note: not root; skipping the real full-filesystem test (it mounts a 2 MiB tmpfs)");
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("note: cannot mount a tmpfs here; skipping the real full-filesystem test");
            return None;
        }
        Some(TinyFs { dir })
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_real_full_filesystem_gives_no_space_and_loses_nothing() {
    let Some(fs) = TinyFs::mount() else { return };
    let opts = Options {
        page_size: 4096,
        initial_capacity: 256 << 10,
        log_capacity: 64 << 10,
        growth_step: 256 << 10,
        ..Options::default()
    };
    // A store bigger than the filesystem cannot be created, and leaves no file behind.
    let too_big = fs.dir.path().join("big.onesync");
    let r = Store::create(
        &too_big,
        &Options {
            initial_capacity: 4 << 20,
            ..opts.clone()
        },
    );
    assert!(matches!(r, Err(Error::NoSpace)), "{:?}", r.err());
    assert!(!too_big.exists(), "a failed create left a file behind");

    let path = fs.dir.path().join("s.onesync");
    let store = Store::create(&path, &opts).unwrap();
    let mut fx = Fixture::new(4096);
    fx.write(&store, "main", &[0]);
    let mut failure = None;
    for page in 1..2000u64 {
        let mut t = store.begin();
        let id = t.file("main").unwrap();
        let data = pattern(70_000 + page, 4096);
        if let Err(e) = t.write_page(id, page, &data) {
            failure = Some(e);
            break;
        }
        match t.commit() {
            Ok(_) => fx.model.get_mut("main").unwrap().push(data),
            Err(e) => {
                failure = Some(e.error);
                break;
            }
        }
    }
    let err = failure.expect("a 2 MiB filesystem filled up");
    assert!(matches!(err, Error::NoSpace), "{err:?}");
    assert!(fx.model["main"].len() > 10);
    assert_holds(&store, &fx.model);
    drop(store);
    let store = Store::open(&path, &opts).unwrap();
    assert_holds(&store, &fx.model);
    drop(store);
}

// ---------------------------------------------------------------------------------------
// Permissions, paths, locks
// ---------------------------------------------------------------------------------------

#[test]
fn a_read_only_file_and_a_read_only_store() {
    let dir = tempfile::tempdir().unwrap();
    // Not closed: opening it must replay the log, without writing anything.
    let (path, fx) = store_file(&dir, false);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = std::fs::read(&path).unwrap();
    match Store::open(&path, &small()) {
        Err(Error::NotWritable { path: p, .. }) => assert_eq!(p, path),
        Ok(_) if is_root() => {
            eprintln!("note: running as root, which bypasses file permissions: a 0444 file opens read-write")
        }
        other => panic!("expected NotWritable, got {:?}", other.err()),
    }
    let ro = Options {
        read_only: true,
        ..small()
    };
    let store = Store::open(&path, &ro).unwrap();
    assert_holds(&store, &fx.model);
    let id = store.snapshot().file("main").unwrap();
    let mut t = store.begin();
    assert!(matches!(t.create_file("x"), Err(Error::ReadOnly)));
    assert!(matches!(
        t.write_page(id, 0, &pattern(1, PS)),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(t.set_file_size(id, 0), Err(Error::ReadOnly)));
    assert!(matches!(t.delete_file(id), Err(Error::ReadOnly)));
    // Reads in the transaction work; committing nothing is fine.
    let mut buf = vec![0u8; PS];
    t.read_page(id, 2, &mut buf).unwrap();
    assert_eq!(buf, fx.model["main"][2]);
    t.commit().unwrap();
    assert!(matches!(store.checkpoint(), Err(Error::ReadOnly)));
    // Two read-only opens may share the file.
    let second = Store::open(&path, &ro).unwrap();
    assert_holds(&second, &fx.model);
    drop(second);
    store.close().unwrap();
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a read-only open wrote to the file"
    );
}

#[test]
fn read_only_open_works_without_write_permission() {
    if is_root() {
        eprintln!("note: root bypasses file permissions; this only checks the read-only option");
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, fx) = store_file(&dir, true);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let store = Store::open(
        &path,
        &Options {
            read_only: true,
            ..small()
        },
    )
    .unwrap();
    assert_holds(&store, &fx.model);
}

#[test]
fn missing_and_existing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let missing = path_in(&dir, "nope.onesync");
    for read_only in [false, true] {
        match Store::open(&missing, &Options { read_only, ..small() }) {
            Err(Error::NotFound(p)) => assert_eq!(p, missing),
            other => panic!("expected NotFound, got {:?}", other.err()),
        }
        assert!(matches!(
            Store::open(
                path_in(&dir, "no/such/dir/s.onesync"),
                &Options { read_only, ..small() }
            ),
            Err(Error::NotFound(_))
        ));
    }
    assert!(!missing.exists(), "open must not create");

    // Create on an existing store, and on an existing other file: AlreadyExists, untouched.
    let (path, fx) = store_file(&dir, false);
    let other = path_in(&dir, "other.txt");
    std::fs::write(&other, b"precious").unwrap();
    for p in [&path, &other] {
        let before = std::fs::read(p).unwrap();
        match Store::create(p, &small()) {
            Err(Error::AlreadyExists(q)) => assert_eq!(&q, p),
            other => panic!("expected AlreadyExists, got {:?}", other.err()),
        }
        assert!(
            std::fs::read(p).unwrap() == before,
            "create changed an existing file"
        );
    }
    assert_holds(&open_real(&path).unwrap(), &fx.model);
}

#[test]
fn read_write_and_read_only_opens_share() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fx) = store_file(&dir, false);
    let ro = Options {
        read_only: true,
        ..small()
    };
    {
        // Read-write and read-only opens share the store (as processes would), in either
        // order of arrival.
        let store = open_real(&path).unwrap();
        let second = Store::open(&path, &small()).unwrap();
        let reader = Store::open(&path, &ro).unwrap();
        assert_holds(&store, &fx.model);
        assert_holds(&second, &fx.model);
        assert_holds(&reader, &fx.model);
    }
    {
        let _reader = Store::open(&path, &ro).unwrap();
        let _another_reader = Store::open(&path, &ro).unwrap();
        let writer = Store::open(&path, &small()).unwrap();
        assert_holds(&writer, &fx.model);
    }
    assert_holds(&open_real(&path).unwrap(), &fx.model);
}

// ---------------------------------------------------------------------------------------
// Failed flushes
// ---------------------------------------------------------------------------------------

#[test]
fn a_failed_flush_poisons_the_store_and_reopening_recovers_what_was_acknowledged() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &small()).unwrap();
    let mut fx = Fixture::new(PS);
    fx.populate(&store);
    let acknowledged = fx.model.clone();

    disk.fail_syncs(1);
    let id = store.snapshot().file("main").unwrap();
    let lost = pattern(123_456, PS);
    let mut t = store.begin();
    t.write_page(id, 1, &lost).unwrap();
    let e = t.commit().unwrap_err();
    assert!(e.seq.is_some(), "the failed commit had been sequenced: {e:?}");
    assert!(matches!(e.error, Error::Poisoned(_) | Error::Io { .. }), "{e:?}");
    assert!(
        e.error.to_string().contains("fdatasync") || e.error.to_string().contains("flush"),
        "{e}"
    );
    // Later commits are refused (the failed sync has not been retried), checkpoints too.
    let mut t = store.begin();
    t.write_page(id, 2, &pattern(5, PS)).unwrap();
    let e2 = t.commit().unwrap_err();
    assert!(matches!(e2.error, Error::Poisoned(_)), "{e2:?}");
    assert!(matches!(store.checkpoint(), Err(Error::Poisoned(_))));
    // Reads still work and never show the failed commit (it did not become durable).
    let snap = store.snapshot();
    let mut buf = vec![0u8; PS];
    snap.read_page(id, 0, &mut buf).unwrap();
    assert_eq!(buf, acknowledged["main"][0]);
    snap.read_page(id, 1, &mut buf).unwrap();
    assert_eq!(
        buf, acknowledged["main"][1],
        "a snapshot shows the commit whose flush failed"
    );
    drop(snap);
    assert!(matches!(store.clone().close(), Err(Error::Poisoned(_))));
    drop(store);

    // What is durable holds everything acknowledged, and the failed commit did not happen.
    assert_holds(&open_image(disk.durable_image()).unwrap(), &acknowledged);
    // Reopening on the same disk, whose page cache still shows the failed commit's writes
    // (Linux marks them clean after the error): recovery reads the device, so the failed
    // commit is not there.
    let store = Store::open_with_io(Box::new(disk.clone()), &small()).unwrap();
    let got = read_all(&store).unwrap();
    assert!(
        got == acknowledged,
        "recovery accepted a commit that never reached the disk"
    );
    let _ = lost;
    // The reopened store takes commits again.
    let mut fx2 = Fixture {
        model: got,
        ..Fixture::new(PS)
    };
    fx2.tag = 900_000;
    fx2.write(&store, "main", &[4]);
    drop(store);
    assert_holds(
        &Store::open_with_io(Box::new(disk), &small()).unwrap(),
        &fx2.model,
    );
}

#[test]
fn a_failed_flush_during_a_checkpoint_poisons_and_loses_nothing() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &small()).unwrap();
    let mut fx = Fixture::new(PS);
    fx.populate(&store);
    disk.fail_syncs(1);
    let e = store.checkpoint().unwrap_err();
    assert!(matches!(e, Error::Io { .. } | Error::Poisoned(_)), "{e:?}");
    let mut t = store.begin();
    let id = t.file("main").unwrap();
    t.write_page(id, 0, &pattern(1, PS)).unwrap();
    assert!(matches!(t.commit().unwrap_err().error, Error::Poisoned(_)));
    drop(store);
    assert_holds(&open_image(disk.durable_image()).unwrap(), &fx.model);
    assert_holds(&open_image(disk.image()).unwrap(), &fx.model);
    // A power cut now, with the unflushed checkpoint's writes lost, kept or torn.
    use rand::SeedableRng;
    for seed in 0..32 {
        let survivor = disk.power_cut(&mut rand::rngs::StdRng::seed_from_u64(seed));
        assert_holds(&open_image(survivor.image()).unwrap(), &fx.model);
    }
}
