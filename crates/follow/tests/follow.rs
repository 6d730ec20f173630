//! The follower on a directory replica written from a real SQLite database's history
//! (`ReplicaWriter`, one file per transaction): after every poll the store's `main` holds
//! exactly the source's bytes at the TXID its state names, at SQLite page sizes below, at
//! and above the store's; a follower dropped and reopened resumes with nothing applied
//! twice; retention's removed level-0 files are crossed with the merged file that covers
//! them; a gap waits (negative control: nothing is skipped) until a newer snapshot applies;
//! a replica behind the store, a store someone else wrote, a second follower, a store of
//! another replica or none are refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use onesync_follow::{Error, Follower, DATABASE_FILE};
use onesync_ltx::client::file::FileClient;
use onesync_ltx::client::ReplicaClient;
use onesync_ltx::compact::{compact_level, enforce_l0_retention};
use onesync_ltx::replica::ReplicaWriter;
use onesync_store::{Options, Store};
use rusqlite::Connection;

/// A source database (a plain file) shipped to a directory replica one transaction a file.
struct Source {
    dir: tempfile::TempDir,
    conn: Connection,
    page_size: u32,
    writer: ReplicaWriter,
    /// The database's bytes at each TXID (index = TXID).
    states: Vec<Vec<u8>>,
    clock: i64,
}

impl Source {
    fn new(page_size: u32) -> Source {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("src.db")).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size={page_size}; PRAGMA journal_mode=DELETE; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
        ))
        .unwrap();
        let db = std::fs::read(dir.path().join("src.db")).unwrap();
        let client: Arc<dyn ReplicaClient> = Arc::new(FileClient::new(dir.path().join("replica")));
        let clock = 1_700_000_000_000;
        let writer = ReplicaWriter::create(client, &db, clock).unwrap();
        Source {
            dir,
            conn,
            page_size,
            writer,
            states: vec![Vec::new(), db],
            clock,
        }
    }

    fn url(&self) -> String {
        format!("file://{}", self.dir.path().join("replica").display())
    }

    fn client(&self) -> FileClient {
        FileClient::new(self.dir.path().join("replica"))
    }

    fn store_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// One transaction on the source, shipped as the next TXID (its changed pages).
    fn work(&mut self, round: u64) {
        let sql = match round % 5 {
            0 => format!("INSERT INTO t(v) SELECT randomblob({}) FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3);", 200 + round * 97 % 3000),
            1 => "UPDATE t SET v = randomblob(50) WHERE k % 3 = 0;".to_owned(),
            2 => "DELETE FROM t WHERE k % 4 = 1;".to_owned(),
            3 => format!("INSERT INTO t(v) VALUES (randomblob({}));", 9000 + round),
            _ => "DELETE FROM t WHERE k > 2; VACUUM;".to_owned(),
        };
        self.conn.execute_batch(&sql).unwrap();
        let db = std::fs::read(self.dir.path().join("src.db")).unwrap();
        let old = self.states.last().unwrap();
        let ps = self.page_size as usize;
        let changed: Vec<(u32, &[u8])> = db
            .chunks(ps)
            .enumerate()
            .filter(|(i, page)| old.get(i * ps..(i + 1) * ps) != Some(*page))
            .map(|(i, page)| (i as u32 + 1, page))
            .collect();
        self.clock += 1000;
        self.writer
            .append((db.len() / ps) as u32, &changed, self.clock)
            .unwrap();
        self.states.push(db);
    }

    fn txid(&self) -> u64 {
        self.writer.txid()
    }
}

/// The bytes of the follower store's database, read in a store opened read-only.
fn main_bytes(path: &Path) -> Vec<u8> {
    let store = Store::open(
        path,
        &Options {
            read_only: true,
            ..Options::default()
        },
    )
    .unwrap();
    let snap = store.try_latest_snapshot().unwrap();
    let file = snap.file(DATABASE_FILE).expect("a main file");
    let size = snap.file_size(file).unwrap();
    let ps = snap.page_size();
    let mut out = Vec::new();
    let mut page = vec![0u8; ps as usize];
    for i in 0..size.div_ceil(ps) {
        snap.read_page(file, i, &mut page).unwrap();
        out.extend_from_slice(&page);
    }
    out.truncate(size as usize);
    drop(snap);
    store.close().unwrap();
    out
}

fn poll(f: &mut Follower) -> onesync_follow::Poll {
    f.poll(&mut |_| {}).unwrap()
}

fn assert_at(src: &Source, path: &Path, f: &Follower, txid: u64) {
    assert_eq!(f.state().unwrap().txid, txid);
    assert!(
        main_bytes(path) == src.states[txid as usize],
        "the store's database differs from the source's at TXID {txid:x}"
    );
    assert_eq!(onesync_follow::read_state(path).unwrap().as_ref(), f.state());
}

#[test]
fn every_file_applied_gives_the_source_at_its_txid_at_three_page_sizes() {
    for page_size in [512, 4096, 65536] {
        let mut src = Source::new(page_size);
        src.work(0);
        let path = src.store_path("follower.onesync");
        let mut f = Follower::open(&path, &src.url()).unwrap();
        assert!(f.state().is_none());
        let p = poll(&mut f);
        assert_eq!(p.applied, 1, "the first restore");
        assert_at(&src, &path, &f, 2);
        for round in 1..12 {
            src.work(round);
            let mut steps = Vec::new();
            let p = f
                .poll(&mut |a| steps.push((a.file.min_txid, a.file.max_txid)))
                .unwrap();
            assert_eq!(p.applied, 1, "page size {page_size}, round {round}");
            assert_eq!(steps, [(src.txid(), src.txid())], "one level-0 file");
            assert_at(&src, &path, &f, src.txid());
        }
        // Several files at once: each its own step, in order.
        for round in 12..15 {
            src.work(round);
        }
        let mut steps = Vec::new();
        f.poll(&mut |a| steps.push(a.state.txid)).unwrap();
        assert_eq!(steps, [src.txid() - 2, src.txid() - 1, src.txid()]);
        assert_at(&src, &path, &f, src.txid());
        assert_eq!(poll(&mut f).applied, 0, "caught up");
        f.close().unwrap();
    }
}

#[test]
fn a_reopened_follower_resumes_after_its_last_commit() {
    let mut src = Source::new(1024);
    let path = src.store_path("follower.onesync");
    let mut f = Follower::open(&path, &src.url()).unwrap();
    poll(&mut f);
    for round in 0..4 {
        src.work(round);
    }
    poll(&mut f);
    // Dropped without closing, as a killed process leaves it.
    drop(f);
    for round in 4..7 {
        src.work(round);
    }
    let mut f = Follower::open(&path, &src.url()).unwrap();
    assert_eq!(f.state().unwrap().txid, 5);
    let mut steps = Vec::new();
    f.poll(&mut |a| steps.push((a.file.min_txid, a.state.txid)))
        .unwrap();
    assert_eq!(
        steps,
        [(6, 6), (7, 7), (8, 8)],
        "resumed after 5: nothing twice, nothing skipped"
    );
    assert_at(&src, &path, &f, 8);
    assert_eq!(f.state().unwrap().files_applied, 1 + 4 + 3);
}

#[test]
fn retention_is_crossed_with_the_merged_file_and_a_gap_waits_for_a_snapshot() {
    let mut src = Source::new(4096);
    let path = src.store_path("follower.onesync");
    let mut f = Follower::open(&path, &src.url()).unwrap();
    poll(&mut f);
    assert_at(&src, &path, &f, 1);
    for round in 0..6 {
        src.work(round);
    }
    // Level 1 merges TXIDs 2-7; retention then removes the level-0 files it covers (but the
    // newest).
    let client = src.client();
    let merged = compact_level(&client, 1, 1000, src.clock + 10_000)
        .unwrap()
        .unwrap();
    assert_eq!((merged.min_txid, merged.max_txid), (2, 7));
    let deleted = enforce_l0_retention(&client, 1, src.clock + 10_000).unwrap();
    assert_eq!(deleted.len(), 5);
    let mut steps = Vec::new();
    f.poll(&mut |a| steps.push((a.file.level, a.file.min_txid, a.state.txid)))
        .unwrap();
    assert_eq!(steps, [(1, 2, 7)], "the merged file");
    assert_at(&src, &path, &f, 7);

    // A gap: TXID 9's file is gone and no snapshot is newer. Nothing is skipped.
    for round in 6..9 {
        src.work(round);
    }
    std::fs::remove_file(client.file_path(0, 9, 9)).unwrap();
    let mut steps = Vec::new();
    let p = f.poll(&mut |a| steps.push(a.state.txid)).unwrap();
    assert_eq!(steps, [8], "up to the gap");
    assert!(
        p.stalled
            .as_deref()
            .unwrap()
            .contains("no file continues TXID 0000000000000008"),
        "{p:?}"
    );
    assert_eq!(poll(&mut f).applied, 0);
    assert_at(&src, &path, &f, 8);
    // A snapshot beyond the gap: applied whole, then level 0 continues it.
    src.writer
        .snapshot(src.states.last().unwrap(), src.clock)
        .unwrap();
    src.work(10);
    let mut steps = Vec::new();
    f.poll(&mut |a| steps.push((a.file.level, a.whole, a.state.txid)))
        .unwrap();
    assert_eq!(steps, [(9, true, 10), (0, false, 11)]);
    assert_at(&src, &path, &f, 11);
}

#[test]
fn what_does_not_continue_the_store_is_refused() {
    let mut src = Source::new(4096);
    src.work(0);
    let path = src.store_path("follower.onesync");
    let mut f = Follower::open(&path, &src.url()).unwrap();
    poll(&mut f);

    // A second follower of the same store.
    match Follower::open(&path, &src.url()) {
        Err(Error::Usage(m)) => assert!(m.contains("another process follows"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    // Another replica's URL, and a store that follows nothing.
    let other = Source::new(4096);
    f.close().unwrap();
    match Follower::open(&path, &other.url()) {
        Err(Error::Usage(m)) => assert!(m.contains("follows file://"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    let plain = src.store_path("plain.onesync");
    let store = Store::create(&plain, &Options::default()).unwrap();
    let mut txn = store.begin();
    txn.create_file("main").unwrap();
    txn.commit().unwrap();
    store.close().unwrap();
    match Follower::open(&plain, &src.url()) {
        Err(Error::Usage(m)) => assert!(m.contains("follows no replica"), "{m}"),
        other => panic!("{:?}", other.err()),
    }

    // Someone else writes the follower's database.
    let mut f = Follower::open(&path, &src.url()).unwrap();
    let store = Store::open(&path, &Options::default()).unwrap();
    let mut txn = store.begin();
    let main = txn.file("main").unwrap();
    txn.write_page(main, 0, &[7u8; 4096]).unwrap();
    txn.commit().unwrap();
    store.close().unwrap();
    match f.poll(&mut |_| {}) {
        Err(Error::Diverged(m)) => assert!(m.contains("another writer"), "{m}"),
        other => panic!("{other:?}"),
    }
    drop(f);

    // A replica replaced by one behind the store.
    let path2 = src.store_path("follower2.onesync");
    let mut f = Follower::open(&path2, &src.url()).unwrap();
    poll(&mut f);
    let replica = src.dir.path().join("replica");
    std::fs::remove_dir_all(&replica).unwrap();
    std::fs::create_dir(&replica).unwrap();
    let db = src.states[1].clone();
    ReplicaWriter::create(Arc::new(FileClient::new(&replica)), &db, 0).unwrap();
    match f.poll(&mut |_| {}) {
        Err(e @ Error::Diverged(_)) => {
            assert!(e.to_string().contains("behind the 0000000000000002"), "{e}");
            assert!(!e.is_transient());
        }
        other => panic!("{other:?}"),
    }
    // An unreachable replica is only transient.
    let mut f = Follower::open(&src.store_path("f3.onesync"), "file:///nonexistent/replica/dir").unwrap();
    let p = poll(&mut f);
    assert!(p.stalled.unwrap().contains("no LTX files yet"));
}
