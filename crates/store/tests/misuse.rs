//! API misuse: invalid options and misused calls give specific errors and change nothing.

#[path = "support/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;
#[path = "support/open_recover.rs"]
mod harness;

use fixtures::*;
use onesync_store::sim::SimDisk;
use onesync_store::{Error, FileId, Options, Store};

// ---------------------------------------------------------------------------------------
// API misuse
// ---------------------------------------------------------------------------------------

#[track_caller]
fn assert_invalid<T>(r: Result<T, Error>) {
    match r {
        Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty()),
        Err(e) => panic!("expected InvalidArgument, got {e:?}"),
        Ok(_) => panic!("expected InvalidArgument, got Ok"),
    }
}

#[test]
fn invalid_options_at_create() {
    let dir = tempfile::tempdir().unwrap();
    for page_size in [0u32, 1, 256, 511, 1000, 4095, 4097, 131_072, u32::MAX] {
        let path = path_in(&dir, &format!("ps-{page_size}"));
        assert_invalid(Store::create(&path, &Options { page_size, ..small() }));
        assert!(!path.exists(), "a refused create left {} behind", path.display());
        assert_invalid(Store::create_with_io(
            SimDisk::new().io(),
            &Options { page_size, ..small() },
        ));
    }
    let path = path_in(&dir, "read-only");
    assert_invalid(Store::create(
        &path,
        &Options {
            read_only: true,
            ..small()
        },
    ));
    assert!(!path.exists());
    // Every valid page size works.
    for shift in 9..=16 {
        let opts = Options {
            page_size: 1 << shift,
            initial_capacity: 0,
            ..small()
        };
        Store::create_with_io(SimDisk::new().io(), &opts).unwrap();
    }
    // A medium that is not empty.
    assert_invalid(Store::create_with_io(
        SimDisk::from_image(vec![1, 2, 3]).io(),
        &small(),
    ));
}

#[test]
fn misused_calls_give_specific_errors_and_change_nothing() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &small()).unwrap();
    let mut fx = Fixture::new(PS);
    fx.populate(&store);
    let main = store.snapshot().file("main").unwrap();
    let aux = store.snapshot().file("aux").unwrap();

    // Wrong buffer sizes.
    let snap = store.snapshot();
    for len in [0, 1, PS - 1, PS + 1, 2 * PS] {
        let mut buf = vec![0u8; len];
        assert_invalid(snap.read_page(main, 0, &mut buf));
        let mut t = store.begin();
        assert_invalid(t.read_page(main, 0, &mut buf));
        assert_invalid(t.write_page(main, 0, &vec![7u8; len]));
        t.commit().unwrap();
    }

    // Names.
    let mut t = store.begin();
    assert_invalid(t.create_file(""));
    assert_invalid(t.create_file("nul\0inside"));
    assert_invalid(t.create_file(&"n".repeat(1025)));
    t.create_file(&"n".repeat(1024)).unwrap();
    match t.create_file("main") {
        Err(Error::FileExists(name)) => assert_eq!(name, "main"),
        other => panic!("expected FileExists, got {other:?}"),
    }
    let fresh = t.create_file("fresh").unwrap();
    assert!(matches!(t.create_file("fresh"), Err(Error::FileExists(_))));
    t.delete_file(fresh).unwrap();
    t.abort();

    // Files that do not exist, or no longer do.
    let mut t = store.begin();
    let bogus = FileId(9999);
    let mut buf = vec![0u8; PS];
    assert!(matches!(
        t.write_page(bogus, 0, &buf),
        Err(Error::NoSuchFile(9999))
    ));
    assert!(matches!(
        t.read_page(bogus, 0, &mut buf),
        Err(Error::NoSuchFile(9999))
    ));
    assert!(matches!(t.set_file_size(bogus, 0), Err(Error::NoSuchFile(9999))));
    assert!(matches!(t.delete_file(bogus), Err(Error::NoSuchFile(9999))));
    assert!(matches!(t.file_size(bogus), Err(Error::NoSuchFile(9999))));
    assert!(matches!(snap.file_size(bogus), Err(Error::NoSuchFile(9999))));
    assert!(matches!(
        snap.read_page(bogus, 0, &mut buf),
        Err(Error::NoSuchFile(9999))
    ));
    // Deleted in this transaction.
    t.delete_file(aux).unwrap();
    assert!(matches!(t.write_page(aux, 0, &buf), Err(Error::NoSuchFile(_))));
    assert!(matches!(t.read_page(aux, 0, &mut buf), Err(Error::NoSuchFile(_))));
    assert!(matches!(
        t.set_file_size(aux, PS as u64),
        Err(Error::NoSuchFile(_))
    ));
    assert!(matches!(t.delete_file(aux), Err(Error::NoSuchFile(_))));
    // A size no page index can reach.
    assert_invalid(t.set_file_size(main, u64::MAX));
    assert_invalid(t.set_file_size(main, (u32::MAX as u64 + 1) * PS as u64 + 1));
    t.abort();
    // Deleted by an earlier commit; the old snapshot still reads it.
    fx.delete(&store, "aux");
    let mut t = store.begin();
    assert!(matches!(
        t.write_page(aux, 0, &vec![1u8; PS]),
        Err(Error::NoSuchFile(_))
    ));
    assert!(matches!(t.delete_file(aux), Err(Error::NoSuchFile(_))));
    assert!(matches!(t.create_file("main"), Err(Error::FileExists(_))));
    t.abort();
    snap.read_page(aux, 0, &mut buf).unwrap();
    drop(snap);
    // Creating a name another transaction committed meanwhile: Conflict at commit.
    let mut a = store.begin();
    let mut b = store.begin();
    a.create_file("race").unwrap();
    b.create_file("race").unwrap();
    a.commit().unwrap();
    fx.model.insert("race".into(), Vec::new());
    let e = b.commit().unwrap_err();
    assert!(matches!(e.error, Error::Conflict(_)), "{e:?}");

    assert_holds(&store, &fx.model);
    drop(store);
    assert_holds(&Store::open_with_io(Box::new(disk), &small()).unwrap(), &fx.model);
}

/// Regression: `write_page` computed `(page + 1) * page_size` unchecked, so a page index
/// near `u64::MAX` panicked in debug builds ("attempt to add with overflow") and in release
/// builds wrapped past the size check and dropped the write, returning Ok.
#[test]
fn write_page_with_a_huge_page_index_is_invalid_not_a_panic() {
    let store = Store::create_with_io(SimDisk::new().io(), &small()).unwrap();
    let mut t = store.begin();
    let f = t.create_file("main").unwrap();
    for page in [u64::MAX, u64::MAX / PS as u64, 1 << 60] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.write_page(f, page, &vec![1u8; PS])
        }));
        match r {
            Ok(r) => assert_invalid(r),
            Err(_) => panic!("write_page(page {page}) panicked"),
        }
    }
}
