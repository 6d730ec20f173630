//! Byte-exact agreement with superfly/ltx (the Go implementation Litestream uses), built
//! from the Go module proxy: its `ltx verify`/`dump` accept the files we write, its
//! encoder writes the same bytes as ours for the same header and pages (databases of three
//! page sizes, snapshots and transactions), and we decode what it writes. Without Go or the
//! proxy it prints SKIP, and fails when `CI` is set.

mod common;

use common::{build_db, changed, ltx_command, ltx_helper, run, skip_or_fail};
use onesync_ltx::replica::ReplicaWriter;
use onesync_ltx::{database_checksum, LtxFile};
use std::process::Command;

#[test]
fn superfly_ltx_and_we_write_the_same_bytes() {
    let (ltx, helper) = match (ltx_command(), ltx_helper()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return skip_or_fail("superfly_ltx_and_we_write_the_same_bytes", &e),
    };
    let dir = tempfile::tempdir().unwrap();
    for (page_size, rows) in [(512u32, 500usize), (4096, 3000), (65536, 2000)] {
        let db_path = dir.path().join(format!("src-{page_size}.db"));
        let conn = build_db(&db_path, rows, page_size);
        let db = std::fs::read(&db_path).unwrap();
        let ts = 1_765_000_000_000i64 + i64::from(page_size);

        // Their encoder, our decoder, then our encoder: the same bytes.
        let theirs = dir.path().join(format!("theirs-{page_size}.ltx"));
        run(Command::new(&helper)
            .arg("encode-db")
            .arg(&db_path)
            .arg(&theirs)
            .arg(ts.to_string()));
        let their_bytes = std::fs::read(&theirs).unwrap();
        let decoded = LtxFile::decode_bytes(&their_bytes).unwrap();
        assert_eq!(decoded.post_apply_checksum, database_checksum(&db, page_size));
        assert_eq!(
            decoded
                .pages
                .iter()
                .flat_map(|p| p.data.clone())
                .collect::<Vec<_>>(),
            db
        );
        let ours = LtxFile::snapshot(&db, page_size, 1, ts).unwrap().encode_bytes();
        assert!(
            ours == their_bytes,
            "page size {page_size}: our snapshot differs from superfly/ltx's ({} vs {} bytes)",
            ours.len(),
            their_bytes.len()
        );

        // A replica we write: a snapshot and transactions, each verified by `ltx verify`,
        // listed by `ltx dump`, and re-encoded by their encoder to our very bytes.
        let replica = dir.path().join(format!("replica-{page_size}"));
        let client = std::sync::Arc::new(onesync_ltx::client::file::FileClient::new(&replica));
        let mut w = ReplicaWriter::create(client.clone(), &db, ts).unwrap();
        let mut before = db;
        for round in 0..3 {
            conn.execute_batch(&format!(
                "UPDATE t SET n = n + 1 WHERE id % 13 = {round}; INSERT INTO t(name, n, b) SELECT name || '!', n, b FROM t WHERE id % 101 = {round}; DELETE FROM t WHERE id % 211 = {round};"
            ))
            .unwrap();
            let after = std::fs::read(&db_path).unwrap();
            let pages = changed(&before, &after, page_size as usize);
            let refs: Vec<(u32, &[u8])> = pages.iter().map(|(n, d)| (*n, d.as_slice())).collect();
            w.append((after.len() / page_size as usize) as u32, &refs, ts + round + 1)
                .unwrap();
            before = after;
        }
        use onesync_ltx::client::ReplicaClient;
        let mut files = client.list(9).unwrap();
        files.extend(client.list(0).unwrap());
        assert_eq!(files.len(), 4);
        for info in &files {
            let f = FileView {
                path: client.file_path(info.level, info.min_txid, info.max_txid),
                min_txid: info.min_txid,
            };
            let out = run(Command::new(&ltx).arg("verify").arg(&f.path));
            assert!(out.contains("ok"), "{out}");
            let dumped = run(Command::new(&ltx).arg("dump").arg(&f.path));
            assert!(
                dumped.contains(&format!("Min TXID:  {:016x}", f.min_txid)),
                "{dumped}"
            );
            let again = dir.path().join("again.ltx");
            let said = run(Command::new(&helper).arg("reencode").arg(&f.path).arg(&again));
            let ours = std::fs::read(&f.path).unwrap();
            assert!(
                std::fs::read(&again).unwrap() == ours,
                "{}: superfly/ltx re-encodes it differently",
                f.path.display()
            );
            println!(
                "page size {page_size}: {} ({} bytes): ltx verify ok; {}",
                f.path.file_name().unwrap().to_string_lossy(),
                ours.len(),
                said.trim()
            );
        }
    }
}

/// A replica file's path and first TXID.
struct FileView {
    path: std::path::PathBuf,
    min_txid: u64,
}
