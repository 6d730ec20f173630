//! Recent pages: a transaction rewriting a page a commit of this process just wrote finds
//! its content in memory instead of reading it back (SQLite rewrites page 1 and the last
//! leaf in every transaction), and never takes a content another process has since
//! replaced for the page's current one.

use onesync_store::sim::SimDisk;
use onesync_store::{Options, Store};

const PAGE: usize = 512;

fn options() -> Options {
    Options {
        page_size: PAGE as u32,
        initial_capacity: 1 << 20,
        growth_step: 1 << 20,
        ..Options::default()
    }
}

/// Commits `data` to page 0 of "main" and waits until it is durable.
fn commit(store: &Store, data: &[u8]) {
    let mut txn = store.begin();
    let main = match txn.file("main") {
        Some(id) => id,
        None => txn.create_file("main").unwrap(),
    };
    txn.write_page(main, 0, data).unwrap();
    txn.commit().unwrap();
}

fn read(store: &Store) -> Vec<u8> {
    let snapshot = store.snapshot();
    let mut buf = vec![0u8; PAGE];
    snapshot
        .read_page(snapshot.file("main").unwrap(), 0, &mut buf)
        .unwrap();
    buf
}

#[test]
fn rewriting_a_page_just_committed_reads_nothing_back() {
    let disk = SimDisk::new();
    let store = Store::create_with_io(disk.io(), &options()).unwrap();
    let mut page = vec![7u8; PAGE];
    commit(&store, &page);
    // A commit of a page created in the same transaction is not kept (its file was
    // renumbered); this one, of an existing file, is.
    commit(&store, &page.iter().map(|b| b + 1).collect::<Vec<_>>());
    page.iter_mut().for_each(|b| *b += 1);
    let reads = |d: &SimDisk| d.calls() - d.writes() - d.syncs();
    let before = reads(&disk);
    for round in 0..10u8 {
        // A small change: carried in the record, found by diffing against the old content.
        page[round as usize] = round;
        commit(&store, &page);
    }
    assert_eq!(reads(&disk) - before, 0, "rewrites read their page back");
    assert_eq!(read(&store), page);
}

/// Two opens of one file share it as two processes would. A's recent content of the page
/// must not serve A's next rewrite once B has changed the page.
#[test]
fn another_process_rewriting_the_page_is_never_undone() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("shared.onesync");
    Store::create(&path, &options()).unwrap().close().unwrap();
    let a = Store::open(&path, &options()).unwrap();
    let b = Store::open(&path, &options()).unwrap();
    let mut page = vec![1u8; PAGE];
    commit(&a, &page);
    commit(&a, &page.iter().map(|x| x + 1).collect::<Vec<_>>());
    page = vec![2u8; PAGE];
    // B changes one byte, A then another: A's diff must start from B's page.
    page[100] = 0xbb;
    commit(&b, &page);
    page[200] = 0xaa;
    commit(&a, &page);
    assert_eq!(read(&a), page);
    assert_eq!(read(&b), page);
    b.close().unwrap();
    a.close().unwrap();
    let reopened = Store::open(&path, &options()).unwrap();
    assert_eq!(read(&reopened), page, "after reopening");
}
