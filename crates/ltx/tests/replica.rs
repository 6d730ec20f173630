//! The file-replica layout Litestream v0.5.18 reads, written from a real database's history
//! (tests/common, `history`), and rebuilt by our `restore`: at every TXID the database's
//! exact bytes, and the rows; damage and gaps refused.

mod common;

use onesync_ltx::client::file::FileClient;
use onesync_ltx::client::{file_name, parse_file_name, ReplicaClient};
use onesync_ltx::replica::ReplicaWriter;
use onesync_ltx::restore::{restore, restore_plan, restore_to_file, Target};
use onesync_ltx::{database_checksum, Error};
use std::sync::Arc;

#[test]
fn the_layout_is_litestreams() {
    let h = common::history(500);
    let names = |level| -> Vec<String> {
        h.client
            .list(level)
            .unwrap()
            .iter()
            .map(|f| format!("ltx/{level}/{}", f.name()))
            .collect()
    };
    assert_eq!(
        names(9),
        [
            "ltx/9/0000000000000001-0000000000000001.ltx",
            "ltx/9/0000000000000001-0000000000000004.ltx"
        ]
    );
    assert_eq!(names(0).len(), 7);
    assert_eq!(names(0)[0], "ltx/0/0000000000000002-0000000000000002.ltx");
    let top: Vec<_> = std::fs::read_dir(&h.replica)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(top, ["ltx"], "nothing but ltx/ at the top");
    let mtime = std::fs::metadata(h.replica.join("ltx/0/0000000000000003-0000000000000003.ltx"))
        .unwrap()
        .modified()
        .unwrap();
    let ms = mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(ms, h.timestamps[2], "a file's time is its header's timestamp");
    let listed = h.client.list(0).unwrap();
    assert_eq!(
        listed[1].timestamp_ms, h.timestamps[2],
        "and the listing gives it"
    );
    assert_eq!(
        listed[1].size,
        std::fs::metadata(h.client.file_path(0, 3, 3)).unwrap().len()
    );
    assert_eq!(file_name(1, 0x2a), "0000000000000001-000000000000002a.ltx");
    assert_eq!(
        parse_file_name("0000000000000001-000000000000002a.ltx"),
        Some((1, 0x2a))
    );
    assert_eq!(parse_file_name("0000000000000001-000000000000002A.ltx"), None);
    assert_eq!(parse_file_name("1-2.ltx"), None);
}

#[test]
fn restore_rebuilds_every_txid_byte_for_byte() {
    let h = common::history(2000);
    for txid in 1..=h.images.len() as u64 {
        let r = restore(&*h.client, Target::Txid(txid)).unwrap();
        assert_eq!(r.txid, txid);
        assert!(
            r.db == h.images[txid as usize - 1],
            "TXID {txid}: the bytes differ"
        );
        assert_eq!(r.checksum, database_checksum(&r.db, 4096));
        let plan: Vec<(u32, u64, u64)> = restore_plan(&*h.client, Target::Txid(txid))
            .unwrap()
            .iter()
            .map(|f| (f.level, f.min_txid, f.max_txid))
            .collect();
        let start = if txid >= h.mid_snapshot { h.mid_snapshot } else { 1 };
        assert_eq!(
            plan[0],
            (9, 1, start),
            "TXID {txid}: the newest snapshot at or before it"
        );
        assert_eq!(plan.len() as u64, 1 + txid - start);
    }
    let latest = restore(&*h.client, Target::Latest).unwrap();
    assert_eq!(latest.txid, h.images.len() as u64);
    let out = h.dir.path().join("out.db");
    restore_to_file(&*h.client, Target::Latest, &out).unwrap();
    assert_eq!(common::integrity(&out), "ok");
    assert_eq!(common::dump_file(&out), *h.rows.last().unwrap());
    assert!(
        restore_to_file(&*h.client, Target::Latest, &out).is_err(),
        "an existing output is refused"
    );
}

#[test]
fn restore_refuses_damage_and_gaps() {
    let h = common::history(300);
    let victim = h.client.file_path(0, 6, 6);
    let good = std::fs::read(&victim).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x10;
    std::fs::write(&victim, &bad).unwrap();
    let err = restore(&*h.client, Target::Latest).unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err}");
    assert!(
        err.to_string().contains("0000000000000006-0000000000000006.ltx"),
        "{err}"
    );
    // Before the damaged file, the restore still works.
    assert_eq!(restore(&*h.client, Target::Txid(5)).unwrap().db, h.images[4]);

    // A file that does not continue the database (TXID 6 of another history).
    let other = common::history(301);
    std::fs::copy(other.client.file_path(0, 6, 6), &victim).unwrap();
    let err = restore(&*h.client, Target::Latest).unwrap_err();
    assert!(
        err.to_string().contains("does not continue the database"),
        "{err}"
    );

    // A gap.
    std::fs::remove_file(&victim).unwrap();
    let err = restore(&*h.client, Target::Latest).unwrap_err();
    assert!(err.to_string().contains("non-contiguous"), "{err}");
    let err = restore(&*h.client, Target::Txid(7)).unwrap_err();
    assert!(err.to_string().contains("not available"), "{err}");
    std::fs::write(&victim, &good).unwrap();
    assert_eq!(
        restore(&*h.client, Target::Latest).unwrap().db,
        *h.images.last().unwrap()
    );
}

#[test]
fn the_writer_refuses_a_growth_without_its_pages_and_a_wrong_snapshot() {
    let h = common::history(50);
    let dir = tempfile::tempdir().unwrap();
    let mut w = ReplicaWriter::create(Arc::new(FileClient::new(dir.path())), &h.images[0], 1).unwrap();
    let n = (h.images[0].len() / 4096) as u32;
    let err = w.append(n + 2, &[(n + 1, &[0u8; 4096][..])], 2).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("page {} is not in the transaction", n + 2)),
        "{err}"
    );
    assert_eq!(w.txid(), 1, "nothing written");
    let err = w.snapshot(&h.images[3], 3).unwrap_err();
    assert!(err.to_string().contains("not the replica's"), "{err}");
    assert!(ReplicaWriter::create(Arc::new(FileClient::new(dir.path())), b"not a database", 1).is_err());
}
