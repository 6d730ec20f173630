//! The shipper against a store holding a real SQLite database: after every batch the
//! replica restores (latest and at every TXID) to the database's exact bytes at that point;
//! a position saved behind the replica (a crash between an upload and its save) resumes
//! with no gap; a replaced store starts a new generation whose TXIDs continue the old
//! ones; a change of page size does too. Negative control: a position saved *ahead* of
//! what the replica holds (saved before its upload) loses changes, and the check sees it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use onesync_ltx::client::file::FileClient;
use onesync_ltx::client::ReplicaClient;
use onesync_ltx::compact::CompactionPolicy;
use onesync_ltx::restore::{restore, Target};
use onesync_ltx::testing;
use onesync_replica::position::{self, Position};
use onesync_replica::{Config, Shipper};
use onesync_store::{Options, Store};

const STORE_PAGE: usize = 4096;

/// A SQLite database file beside a store whose logical file `main` mirrors it.
struct Fixture {
    dir: tempfile::TempDir,
    db: rusqlite::Connection,
    store: Store,
    /// The database's bytes after each TXID the test saw shipped.
    states: Vec<(u64, Vec<u8>)>,
    /// What the store's `main` holds.
    mirrored: Vec<u8>,
}

impl Fixture {
    fn new(page_size: u32) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let db = rusqlite::Connection::open(dir.path().join("plain.db")).unwrap();
        db.execute_batch(&format!(
            "PRAGMA page_size={page_size}; PRAGMA journal_mode=DELETE; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
        ))
        .unwrap();
        let store = Store::create(dir.path().join("s.onesync"), &store_options()).unwrap();
        let mut f = Fixture {
            dir,
            db,
            store,
            states: Vec::new(),
            mirrored: Vec::new(),
        };
        f.mirror();
        f
    }

    fn store_path(&self) -> PathBuf {
        self.dir.path().join("s.onesync")
    }

    fn replica(&self) -> PathBuf {
        self.dir.path().join("replica")
    }

    fn client(&self) -> FileClient {
        FileClient::new(self.replica())
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("plain.db")).unwrap()
    }

    /// Copies what changed of the plain database into the store, as one commit.
    fn mirror(&mut self) {
        let bytes = self.bytes();
        let mut txn = self.store.begin();
        let file = txn
            .file("main")
            .unwrap_or_else(|| txn.create_file("main").unwrap());
        let mut page = vec![0u8; STORE_PAGE];
        for (i, chunk) in bytes.chunks(STORE_PAGE).enumerate() {
            if self.mirrored.chunks(STORE_PAGE).nth(i) == Some(chunk) {
                continue;
            }
            page.fill(0);
            page[..chunk.len()].copy_from_slice(chunk);
            txn.write_page(file, i as u64, &page).unwrap();
        }
        txn.set_file_size(file, bytes.len() as u64).unwrap();
        txn.commit().unwrap();
        self.mirrored = bytes;
    }

    fn work(&mut self, round: u64) {
        let tx = self.db.transaction().unwrap();
        for i in 0..20 {
            let k = (round * 7 + i * 13) % 150;
            tx.execute(
                "INSERT OR REPLACE INTO t(k, v) VALUES (?1, randomblob(300 + ?2 % 900))",
                rusqlite::params![k as i64, (round + i) as i64],
            )
            .unwrap();
        }
        tx.execute("DELETE FROM t WHERE k % 11 = ?1", [(round % 11) as i64])
            .unwrap();
        tx.commit().unwrap();
        self.mirror();
    }

    fn shipper(&self) -> Shipper {
        self.shipper_with(Config {
            interval: Duration::from_secs(3600),
            ..Config::new(&format!("file://{}", self.replica().display()))
        })
    }

    fn shipper_with(&self, config: Config) -> Shipper {
        Shipper::start(
            self.store.clone(),
            &self.store_path(),
            "main",
            config,
            Arc::new(|_: &str| {}),
        )
        .unwrap()
    }

    /// Ships now and notes the state shipped.
    fn ship(&mut self, shipper: &Shipper) {
        assert!(shipper.ship_now().unwrap(), "this process ships");
        let status = shipper.status();
        assert_eq!(status.last_error, None);
        let bytes = self.bytes();
        match self.states.last() {
            Some((txid, _)) if *txid == status.txid => {}
            _ => self.states.push((status.txid, bytes)),
        }
    }

    /// Every TXID noted restores to its bytes; the TXIDs are contiguous from 1.
    fn check(&self) {
        let client = self.client();
        for (txid, bytes) in &self.states {
            let restored = restore(&client, Target::Txid(*txid)).unwrap();
            assert!(restored.db == *bytes, "TXID {txid} restores to other bytes");
        }
        let latest = restore(&client, Target::Latest).unwrap();
        assert!(
            latest.db == self.states.last().unwrap().1,
            "the latest restore differs"
        );
        let mut txids: Vec<u64> = client.list(0).unwrap().iter().map(|f| f.max_txid).collect();
        txids.sort();
        for pair in txids.windows(2) {
            assert_eq!(
                pair[1],
                pair[0] + 1,
                "level 0 has a gap or a duplicate: {txids:?}"
            );
        }
    }
}

fn store_options() -> Options {
    Options {
        page_size: STORE_PAGE as u32,
        // Checkpoints between batches, so that some batches read the whole mapping.
        checkpoint_interval: 3,
        ..Options::default()
    }
}

#[test]
fn every_batch_restores_to_the_database_it_shipped_at_every_page_size() {
    for page_size in [1024u32, 4096, 16384] {
        let mut f = Fixture::new(page_size);
        let shipper = f.shipper();
        for round in 0..25 {
            f.work(round);
            if round % 3 != 1 {
                f.ship(&shipper);
            }
        }
        f.db.execute_batch("DELETE FROM t WHERE k > 20; VACUUM;").unwrap();
        f.mirror();
        f.ship(&shipper);
        drop(shipper);
        f.check();
        assert!(f.states.len() > 15, "{} states", f.states.len());
    }
}

#[test]
fn a_position_saved_behind_the_replica_resumes_with_no_gap() {
    let mut f = Fixture::new(4096);
    let pos_path = position::path_for(&f.store_path(), "main");
    let shipper = f.shipper();
    let mut behind = None;
    for round in 0..12 {
        f.work(round);
        f.ship(&shipper);
        if round == 4 {
            behind = Some(std::fs::read(&pos_path).unwrap());
        }
    }
    drop(shipper);
    // As after a crash before the last saves: the position is old, the replica is not.
    std::fs::write(&pos_path, behind.unwrap()).unwrap();
    let shipper = f.shipper();
    for round in 12..20 {
        f.work(round);
        f.ship(&shipper);
    }
    drop(shipper);
    f.check();
    assert_eq!(f.shipper_snapshots(), 1, "resumed without a new snapshot");
}

impl Fixture {
    fn shipper_snapshots(&self) -> usize {
        self.client().list(9).unwrap().len()
    }
}

#[test]
fn negative_control_a_position_saved_ahead_of_the_replica_loses_changes() {
    let mut f = Fixture::new(4096);
    let pos_path = position::path_for(&f.store_path(), "main");
    let shipper = f.shipper();
    for round in 0..5 {
        f.work(round);
        f.ship(&shipper);
    }
    drop(shipper);
    // Saved before an upload that never happened: it claims commits the replica lacks.
    f.work(5);
    let mut ahead = Position::load(&pos_path).unwrap();
    ahead.seq = f.store.durable_seq();
    ahead.save(&pos_path).unwrap();
    // A small change after it: one leaf (work(5) changed many).
    f.db.execute("UPDATE t SET v = x'00' WHERE k = (SELECT max(k) FROM t)", [])
        .unwrap();
    f.mirror();
    let shipper = f.shipper();
    f.ship(&shipper);
    drop(shipper);
    assert_eq!(
        f.shipper_snapshots(),
        1,
        "resumed from the position, no new generation"
    );
    // Lost changes show as a restore that fails (a page missing) or other bytes.
    if let Ok(latest) = restore(&f.client(), Target::Latest) {
        assert!(latest.db != f.bytes(), "the check must see the changes lost");
    }
}

#[test]
fn a_replaced_store_or_page_size_starts_a_generation_that_continues_the_txids() {
    let mut f = Fixture::new(4096);
    let shipper = f.shipper();
    for round in 0..6 {
        f.work(round);
        f.ship(&shipper);
    }
    drop(shipper);
    // Another store file at the same path (a restore, a copy): its history is not the
    // replica's.
    let path = f.store_path();
    let other = f.dir.path().join("other.onesync");
    Store::create(&other, &store_options()).unwrap().close().unwrap();
    std::fs::rename(&other, &path).unwrap();
    let old = std::mem::replace(&mut f.store, Store::open(&path, &store_options()).unwrap());
    old.close().unwrap();
    f.mirrored.clear();
    f.work(6);
    let shipper = f.shipper();
    f.ship(&shipper);
    assert_eq!(f.shipper_snapshots(), 2, "a new generation's snapshot");
    for round in 7..10 {
        f.work(round);
        f.ship(&shipper);
    }
    // A new page size (VACUUM rewrites every page): another generation.
    f.db.execute_batch("PRAGMA page_size=8192; VACUUM;").unwrap();
    f.mirror();
    f.ship(&shipper);
    f.work(10);
    f.ship(&shipper);
    drop(shipper);
    assert_eq!(f.shipper_snapshots(), 3);
    f.check();
}

#[test]
fn compaction_and_retention_keep_the_replica_restorable_by_us_and_stock_litestream() {
    let mut f = Fixture::new(4096);
    let shipper = f.shipper_with(Config {
        interval: Duration::from_secs(3600),
        compaction: CompactionPolicy {
            level_intervals_ms: vec![60, 250],
            // Litestream's rule: 0 keeps level 0 whole; 1 ms drops what level 1 covers.
            l0_retention_ms: 1,
            snapshot_retention_ms: 24 * 3600 * 1000,
        },
        compaction_check: Duration::ZERO,
        ..Config::new(&format!("file://{}", f.replica().display()))
    });
    for round in 0..40 {
        f.work(round);
        f.ship(&shipper);
        std::thread::sleep(Duration::from_millis(15));
    }
    let status = shipper.status();
    drop(shipper);
    assert!(status.compacted >= 5 && status.deleted >= 5, "{status:?}");
    let client = f.client();
    assert!(!client.list(1).unwrap().is_empty() && !client.list(2).unwrap().is_empty());
    // Every TXID still restorable gives its state; the newest does.
    let mut restorable = 0;
    for (txid, bytes) in &f.states {
        if let Ok(r) = restore(&client, Target::Txid(*txid)) {
            assert!(r.db == *bytes, "TXID {txid}");
            restorable += 1;
        }
    }
    assert!(restorable >= 3, "{restorable}");
    let latest = restore(&client, Target::Latest).unwrap();
    assert!(latest.db == f.states.last().unwrap().1);
    let go_bin = testing::go_bin_dir(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let litestream = match testing::litestream_command(&go_bin) {
        Ok(l) => l,
        Err(why) => return testing::skip_or_fail("compaction (stock restore)", &why),
    };
    let out = f.dir.path().join("stock.db");
    let run = std::process::Command::new(litestream)
        .args(["restore", "-o"])
        .arg(&out)
        .arg(format!("file://{}", f.replica().display()))
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        testing::show("litestream restore", &run)
    );
    assert!(std::fs::read(&out).unwrap() == f.states.last().unwrap().1);
}
