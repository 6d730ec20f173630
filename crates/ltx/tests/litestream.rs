//! Stock Litestream v0.5.18 (built from the Go module proxy, cached) restores the replicas
//! we write: `litestream restore -o OUT file:///DIR`, latest, at every `-txid` and at
//! `-timestamp`s, gives a plain database whose `PRAGMA integrity_check` is ok, whose rows
//! equal the source's at that point, and whose bytes are the source file's. Negative
//! controls: a damaged file and a missing one make it fail. Without Go or the proxy it
//! prints SKIP, and fails when `CI` is set.

mod common;

use common::{history, integrity, litestream_command, rfc3339, skip_or_fail};
use std::path::Path;
use std::process::{Command, Output};

fn restore(litestream: &Path, replica: &Path, out: &Path, args: &[&str]) -> Output {
    Command::new(litestream)
        .arg("restore")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(format!("file://{}", replica.display()))
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn stock_litestream_restores_our_replica() {
    let litestream = match litestream_command() {
        Ok(b) => b,
        Err(e) => return skip_or_fail("stock_litestream_restores_our_replica", &e),
    };
    assert_eq!(rfc3339(1_765_000_000_000), "2025-12-06T05:46:40Z");
    let h = history(3000);
    let last = h.images.len() as u64;
    let check = |out: &Path, txid: u64, how: &str| {
        assert_eq!(integrity(out), "ok", "{how}");
        assert_eq!(common::dump_file(out), h.rows[txid as usize - 1], "{how}: rows");
        assert!(
            std::fs::read(out).unwrap() == h.images[txid as usize - 1],
            "{how}: bytes"
        );
        println!(
            "{how}: integrity_check ok, {} rows, the source's bytes at TXID {txid}",
            h.rows[txid as usize - 1].len()
        );
    };

    let out = h.dir.path().join("latest.db");
    let got = restore(&litestream, &h.replica, &out, &[]);
    assert!(got.status.success(), "{}", text(&got));
    check(&out, last, "litestream restore (latest)");

    for txid in 1..=last {
        let out = h.dir.path().join(format!("txid-{txid}.db"));
        let got = restore(&litestream, &h.replica, &out, &["-txid", &format!("{txid:016x}")]);
        assert!(got.status.success(), "-txid {txid}: {}", text(&got));
        check(&out, txid, &format!("litestream restore -txid {txid:016x}"));
    }

    // Files carry their header's timestamp as their time; a point between two commits
    // restores the earlier one.
    for txid in [2u64, h.mid_snapshot, last - 1] {
        let at = rfc3339(h.timestamps[txid as usize - 1] + 5_000);
        let out = h.dir.path().join(format!("ts-{txid}.db"));
        let got = restore(&litestream, &h.replica, &out, &["-timestamp", &at]);
        assert!(got.status.success(), "-timestamp {at}: {}", text(&got));
        check(&out, txid, &format!("litestream restore -timestamp {at}"));
    }

    // Negative controls: a flipped byte, then a missing transaction.
    let victim = h.client.file_path(0, 6, 6);
    let good = std::fs::read(&victim).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x10;
    std::fs::write(&victim, &bad).unwrap();
    let out = h.dir.path().join("damaged.db");
    let got = restore(&litestream, &h.replica, &out, &[]);
    assert!(!got.status.success(), "a damaged file restored: {}", text(&got));
    println!(
        "negative control, byte {at} of TXID 6 flipped: {}",
        text(&got).trim()
    );
    std::fs::remove_file(&victim).unwrap();
    let got = restore(&litestream, &h.replica, &out, &[]);
    assert!(
        !got.status.success(),
        "a replica with a gap restored: {}",
        text(&got)
    );
    println!("negative control, TXID 6 missing: {}", text(&got).trim());
    std::fs::write(&victim, &good).unwrap();
    let got = restore(&litestream, &h.replica, &out, &[]);
    assert!(got.status.success(), "{}", text(&got));
    check(&out, last, "litestream restore once TXID 6 is back");
}
