//! The S3 replica against a real S3 server (Versity's gateway, built and started by
//! `onesync_ltx::testing`): the client's round trip and layout, stock Litestream v0.5.18
//! restoring what we wrote (latest, every `-txid`, `-timestamp`s), the same after our
//! compaction and retention (our restore agreeing with Litestream's on every target), an
//! unreachable endpoint failing in bounded time, and an outage (writes fail, then succeed).
//! Without Go or its module proxy each test prints SKIP, and fails when `CI` is set.

mod common;

use common::{history_to, integrity, litestream_command, skip_or_fail, Clock, Timeline};
use onesync_ltx::client::s3::{rfc3339_nano, S3Client, S3Options};
use onesync_ltx::client::{FileInfo, ReplicaClient};
use onesync_ltx::compact::{compact, CompactionPolicy};
use onesync_ltx::replica::{now_ms, ReplicaWriter};
use onesync_ltx::restore::{restore, Target};
use onesync_ltx::testing::S3Server;
use onesync_ltx::{Error, LtxFile};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn server(test: &str) -> Option<S3Server> {
    match S3Server::start(&common::go_bin()) {
        Ok(s) => Some(s),
        Err(e) => {
            skip_or_fail(test, &e);
            None
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `litestream restore -o OUT [ARGS] URL`, the server's credentials in the environment and
/// no `AWS_CA_BUNDLE` (the AWS Go SDK refuses to start with it).
fn litestream_restore(litestream: &Path, s3: &S3Server, url: &str, out: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(litestream);
    cmd.arg("restore").args(args).arg("-o").arg(out).arg(url);
    cmd.env_remove("AWS_CA_BUNDLE");
    for (k, v) in s3.env() {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn small_file(min: u64, max: u64, timestamp: i64) -> LtxFile {
    let db = {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        common::build_db(&path, 20, 4096);
        std::fs::read(&path).unwrap()
    };
    let snapshot = LtxFile::snapshot(&db, 4096, max, timestamp).unwrap();
    if min == 1 {
        return snapshot;
    }
    let mut header = snapshot.header;
    header.min_txid = min;
    header.flags = onesync_ltx::format::HEADER_FLAG_NO_CHECKSUM;
    LtxFile::new(header, snapshot.pages, 0).unwrap()
}

#[test]
fn the_s3_client_round_trips_in_litestreams_layout() {
    let Some(s3) = server("the_s3_client_round_trips_in_litestreams_layout") else {
        return;
    };
    let bucket_dir = s3.create_bucket("bkt");
    let client = s3.client("bkt", "db/one").unwrap();
    assert!(client.list(0).unwrap().is_empty(), "a new replica is empty");
    assert_eq!(
        client.url(),
        format!("s3://bkt/db/one?endpoint={}", s3.endpoint())
    );
    assert!(!client.url().contains(onesync_ltx::testing::SECRET_ACCESS_KEY));

    let stamp = 1_765_000_000_123i64;
    let before = now_ms();
    let files = [
        (9, small_file(1, 1, stamp)),
        (0, small_file(3, 3, stamp + 2000)),
        (0, small_file(2, 2, stamp + 1000)),
        (1, small_file(2, 3, stamp + 2000)),
    ];
    let mut written = Vec::new();
    for (level, f) in &files {
        let info = client.write(*level, f).unwrap();
        assert_eq!(info.size, f.encode_bytes().len() as u64);
        assert_eq!(info.timestamp_ms, f.header.timestamp);
        written.push(info);
    }
    // Litestream's keys: PREFIX/<level %04x>/<min>-<max>.ltx.
    for key in [
        "db/one/0009/0000000000000001-0000000000000001.ltx",
        "db/one/0000/0000000000000002-0000000000000002.ltx",
        "db/one/0000/0000000000000003-0000000000000003.ltx",
        "db/one/0001/0000000000000002-0000000000000003.ltx",
    ] {
        assert!(
            bucket_dir.join(key).is_file(),
            "{key} is not where Litestream reads it"
        );
    }
    let l0 = client.list(0).unwrap();
    assert_eq!(
        l0.iter().map(|f| (f.min_txid, f.max_txid)).collect::<Vec<_>>(),
        [(2, 2), (3, 3)],
        "sorted by TXID"
    );
    // Listed without metadata: LastModified, the upload time (as Litestream lists).
    assert!(l0.iter().all(|f| f.timestamp_ms >= before - 2000), "{l0:?}");
    // With it: the header's timestamp, from x-amz-meta-litestream-timestamp.
    let exact = client.list_with_header_timestamps(0).unwrap();
    assert_eq!(
        exact.iter().map(|f| f.timestamp_ms).collect::<Vec<_>>(),
        [stamp + 1000, stamp + 2000]
    );
    assert_eq!(rfc3339_nano(stamp), "2025-12-06T05:46:40.123Z");
    assert_eq!(rfc3339_nano(stamp - 123), "2025-12-06T05:46:40Z");
    assert_eq!(rfc3339_nano(stamp - 23), "2025-12-06T05:46:40.1Z");
    for ((_, f), info) in files.iter().zip(&written) {
        assert!(
            client.read(info).unwrap() == f.encode_bytes(),
            "{info}: bytes differ"
        );
    }
    client.delete(&written[1..3]).unwrap();
    client.delete(&written[1..3]).unwrap(); // already gone: not an error
    assert!(client.list(0).unwrap().is_empty());
    let err = client.read(&written[1]).unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    assert_eq!(client.list(9).unwrap().len(), 1, "other levels untouched");
    // Another prefix is another replica.
    assert!(s3.client("bkt", "db/two").unwrap().list(9).unwrap().is_empty());

    // Negative control: wrong credentials are refused.
    let wrong = S3Client::with_options(S3Options {
        secret_access_key: Some("not-the-secret".into()),
        ..s3.client("bkt", "db/one").unwrap().options().clone()
    })
    .unwrap();
    let err = wrong.list(9).unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    println!("wrong credentials: {err}");
}

#[test]
fn the_url_is_read_as_litestream_reads_it() {
    let o = S3Options::from_url("s3://bkt/a//b/../c/?endpoint=127.0.0.1:9000&region=eu-west-3").unwrap();
    assert_eq!((o.bucket.as_str(), o.prefix.as_str()), ("bkt", "a/c"));
    assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(o.region, "eu-west-3");
    assert!(o.force_path_style, "a custom endpoint means path style");
    let o = S3Options::from_url("s3://bkt/p?endpoint=s3.example.net&force-path-style=false").unwrap();
    assert_eq!(o.endpoint.as_deref(), Some("https://s3.example.net"));
    assert!(!o.force_path_style);
    let o = S3Options::from_url("s3://bkt.localhost:9000/p").unwrap();
    assert_eq!(
        (o.bucket.as_str(), o.endpoint.as_deref()),
        ("bkt", Some("http://localhost:9000"))
    );
    let o = S3Options::from_url("s3://bkt.s3.ap-south-1.amazonaws.com/p").unwrap();
    assert_eq!(
        (o.bucket.as_str(), o.region.as_str(), o.endpoint.as_deref()),
        ("bkt", "ap-south-1", None)
    );
    for bad in [
        "s3://bkt",
        "s3://bkt/",
        "s3://bkt/p?skip-verify=maybe",
        "s3://bkt/p?timeout=0",
        "gs://bkt/p",
    ] {
        assert!(S3Options::from_url(bad).is_err(), "{bad} accepted");
    }
    assert!(onesync_ltx::client::open("ftp://x/y").is_err());
    assert!(onesync_ltx::client::open("file://relative/dir").is_err());
    assert!(onesync_ltx::client::open("file:///abs/dir")
        .unwrap()
        .url()
        .ends_with("/abs/dir"));
}

/// `history_to` the S3 replica `bkt/PREFIX`, `after_each` run after each TXID.
fn s3_history(
    s3: &S3Server,
    prefix: &str,
    dir: &Path,
    after_each: &mut dyn FnMut(u64),
) -> (Arc<S3Client>, Timeline) {
    let client = Arc::new(s3.client("bkt", prefix).unwrap());
    let t = history_to(client.clone(), dir, 1500, Clock::Real, after_each);
    (client, t)
}

#[test]
fn stock_litestream_restores_our_s3_replica() {
    let test = "stock_litestream_restores_our_s3_replica";
    let litestream = match litestream_command() {
        Ok(b) => b,
        Err(e) => return skip_or_fail(test, &e),
    };
    let Some(s3) = server(test) else { return };
    s3.create_bucket("bkt");
    let dir = tempfile::tempdir().unwrap();
    let (client, t) = s3_history(&s3, "app", dir.path(), &mut |_| {});
    let url = s3.url("bkt", "app");
    let last = t.images.len() as u64;
    let check = |out: &Path, txid: u64, how: &str| {
        assert_eq!(integrity(out), "ok", "{how}");
        assert_eq!(common::dump_file(out), t.rows[txid as usize - 1], "{how}: rows");
        assert!(
            std::fs::read(out).unwrap() == t.images[txid as usize - 1],
            "{how}: bytes"
        );
    };
    let mut runs = 0;
    let mut restore_with = |args: &[&str], name: &str| {
        runs += 1;
        let out = dir.path().join(format!("{name}-{runs}.db"));
        let got = litestream_restore(&litestream, &s3, &url, &out, args);
        (got, out)
    };
    let (got, out) = restore_with(&[], "latest");
    assert!(got.status.success(), "{}", text(&got));
    check(&out, last, "latest");
    for txid in 1..=last {
        let (got, out) = restore_with(&["-txid", &format!("{txid:016x}")], "txid");
        assert!(got.status.success(), "-txid {txid}: {}", text(&got));
        check(&out, txid, &format!("-txid {txid}"));
        let ours = restore(client.as_ref(), Target::Txid(txid)).unwrap();
        assert!(
            ours.db == t.images[txid as usize - 1],
            "our restore at TXID {txid}"
        );
    }
    // -timestamp reads the header timestamps from the metadata: a point between two
    // commits restores the earlier one. (Litestream refuses a time outside the
    // LastModified range, so the last commit is not a target.)
    for txid in [2u64, t.mid_snapshot, last - 2] {
        let ms = t.timestamps[txid as usize - 1] + 600;
        let at = rfc3339_nano(ms);
        let (got, out) = restore_with(&["-timestamp", &at], "ts");
        assert!(got.status.success(), "-timestamp {at}: {}", text(&got));
        check(&out, txid, &format!("-timestamp {at}"));
        let ours = restore(client.as_ref(), Target::Timestamp(ms)).unwrap();
        assert_eq!(ours.txid, txid, "our restore at {at}");
    }
    println!("stock litestream restored latest, {last} TXIDs and 3 timestamps from {url}");

    // Negative control: a missing transaction makes the latest restore fail.
    let gone = client.list(0).unwrap()[3].clone();
    let bytes = client.read(&gone).unwrap();
    client.delete(std::slice::from_ref(&gone)).unwrap();
    let (got, _) = restore_with(&[], "gap");
    assert!(
        !got.status.success(),
        "a replica with a gap restored: {}",
        text(&got)
    );
    assert!(restore(client.as_ref(), Target::Latest).is_err());
    client.write(0, &LtxFile::decode_bytes(&bytes).unwrap()).unwrap();
    let (got, out) = restore_with(&[], "back");
    assert!(got.status.success(), "{}", text(&got));
    check(&out, last, "latest once the file is back");
}

/// Every target: ours and stock Litestream's restores agree (both fail, or both give the
/// same bytes, which are the source's at the TXID restored).
fn restores_agree(
    litestream: &Path,
    s3: &S3Server,
    client: &dyn ReplicaClient,
    t: &Timeline,
    dir: &Path,
    tag: &str,
) -> Vec<(String, Option<u64>)> {
    let url = s3.url("bkt", "compacted");
    let last = t.images.len() as u64;
    let mut targets: Vec<(String, Target, Vec<String>)> = vec![("latest".into(), Target::Latest, vec![])];
    for txid in 1..=last {
        targets.push((
            format!("txid {txid}"),
            Target::Txid(txid),
            vec!["-txid".into(), format!("{txid:016x}")],
        ));
    }
    // Within the LastModified range, which Litestream requires of a -timestamp.
    for txid in 2..last - 1 {
        let ms = t.timestamps[txid as usize - 1] + 600;
        targets.push((
            format!("timestamp after TXID {txid}"),
            Target::Timestamp(ms),
            vec!["-timestamp".into(), rfc3339_nano(ms)],
        ));
    }
    let mut outcomes = Vec::new();
    for (i, (name, target, args)) in targets.iter().enumerate() {
        let out = dir.join(format!("{tag}-{i}.db"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let theirs = litestream_restore(litestream, s3, &url, &out, &args);
        let ours = restore(client, *target);
        match &ours {
            Ok(r) => {
                assert!(
                    theirs.status.success(),
                    "{tag} {name}: ours restored TXID {}, Litestream failed: {}",
                    r.txid,
                    text(&theirs)
                );
                assert!(
                    std::fs::read(&out).unwrap() == r.db,
                    "{tag} {name}: Litestream's bytes differ from ours"
                );
                assert!(
                    r.db == t.images[r.txid as usize - 1],
                    "{tag} {name}: not the source at TXID {}",
                    r.txid
                );
                assert_eq!(integrity(&out), "ok");
            }
            Err(e) => assert!(
                !theirs.status.success(),
                "{tag} {name}: Litestream restored, ours failed: {e}"
            ),
        }
        outcomes.push((name.clone(), ours.ok().map(|r| r.txid)));
    }
    outcomes
}

fn levels(client: &dyn ReplicaClient) -> Vec<(u32, u64, u64)> {
    (0..=9u32)
        .flat_map(|l| client.list(l).unwrap())
        .map(|f: FileInfo| (f.level, f.min_txid, f.max_txid))
        .collect()
}

#[test]
fn stock_litestream_restores_after_our_compaction_and_retention() {
    let test = "stock_litestream_restores_after_our_compaction_and_retention";
    let litestream = match litestream_command() {
        Ok(b) => b,
        Err(e) => return skip_or_fail(test, &e),
    };
    let Some(s3) = server(test) else { return };
    s3.create_bucket("bkt");
    let dir = tempfile::tempdir().unwrap();
    let compactor = s3.client("bkt", "compacted").unwrap();
    let policy = CompactionPolicy::default();
    // S3 lists LastModified (the real time of each upload); a clock 2 hours further
    // ahead at each round puts every level's interval window (up to level 3's hour) and
    // level-0 retention past every file, so each round compacts every level.
    let mut rounds = Vec::new();
    let (client, t) = s3_history(&s3, "compacted", dir.path(), &mut |txid| {
        if txid % 2 == 1 {
            let ahead = 2 * 60 * 60_000 * (rounds.len() as i64 + 1);
            let report = compact(&compactor, &policy, now_ms() + ahead).unwrap();
            rounds.push((txid, report));
        }
    });
    let files = levels(client.as_ref());
    println!("after compaction: {files:?}");
    let merged: Vec<_> = rounds
        .iter()
        .flat_map(|(_, r)| r.written.iter().map(|f| (f.level, f.min_txid, f.max_txid)))
        .collect();
    assert!(
        merged.contains(&(1, 2, 3)) && merged.contains(&(3, 6, 7)),
        "{merged:?}"
    );
    assert!(
        !files.contains(&(0, 2, 2)) && !files.contains(&(0, 5, 5)),
        "level-0 retention ran: {files:?}"
    );
    assert!(
        files.contains(&(0, 7, 7)),
        "the newest level-0 file compacted stays: {files:?}"
    );
    let l3 = client.read(&client.list(3).unwrap()[0]).unwrap();
    let l3 = LtxFile::decode_bytes(&l3).unwrap();
    assert!(
        l3.header.no_checksum(),
        "merged files are flagged no-checksum as Litestream's are"
    );

    let outcomes = restores_agree(&litestream, &s3, client.as_ref(), &t, dir.path(), "compacted");
    println!("after compaction: {outcomes:?}");
    let got = |name: &str| outcomes.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(got("latest"), Some(t.images.len() as u64));
    for txid in [1, 3, 4, 5, 7, 8] {
        assert_eq!(got(&format!("txid {txid}")), Some(txid), "TXID {txid}");
    }
    assert_eq!(
        got("txid 2"),
        None,
        "TXID 2 was only in a level-0 file retention deleted"
    );
    assert_eq!(got("timestamp after TXID 5"), Some(5));

    // Past the 24 h retention, snapshot retention drops the first snapshot; the replica still restores.
    let report = compact(&compactor, &policy, now_ms() + 31 * 60 * 60_000).unwrap();
    assert!(
        report.deleted.iter().any(|f| (f.level, f.max_txid) == (9, 1)),
        "{report:?}"
    );
    let outcomes = restores_agree(&litestream, &s3, client.as_ref(), &t, dir.path(), "retained");
    println!("after snapshot retention: {outcomes:?}");
    assert_eq!(outcomes[0].1, Some(t.images.len() as u64));
    assert!(
        outcomes.iter().any(|(n, o)| n == "txid 1" && o.is_none()),
        "the first snapshot is gone"
    );

    // Negative control: without the merged files covering TXID 5 the latest restore fails
    // for both.
    let covering: Vec<FileInfo> = (1..=3)
        .flat_map(|l| client.list(l).unwrap())
        .filter(|f| f.min_txid <= 5 && f.max_txid >= 5)
        .collect();
    client.delete(&covering).unwrap();
    let out = dir.path().join("gap.db");
    let theirs = litestream_restore(&litestream, &s3, &s3.url("bkt", "compacted"), &out, &[]);
    assert!(!theirs.status.success(), "{}", text(&theirs));
    assert!(restore(client.as_ref(), Target::Latest).is_err());
}

#[test]
fn an_unreachable_endpoint_fails_in_bounded_time() {
    let refused = format!(
        "s3://bkt/p?endpoint=http://127.0.0.1:{}",
        onesync_ltx::testing::free_port()
    );
    let blackhole = "s3://bkt/p?endpoint=http://10.255.255.1:9".to_string();
    for url in [refused, blackhole] {
        // Credentials given, so that only the endpoint is in the way.
        let client = S3Client::with_options(S3Options {
            access_key_id: Some("AKIAUNREACHABLE".into()),
            secret_access_key: Some("secret".into()),
            ..S3Options::from_url(&url).unwrap()
        })
        .unwrap();
        let start = Instant::now();
        let err = client.list(0).unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err, Error::Storage { .. }), "{err}");
        assert!(took < Duration::from_secs(12), "{url}: {took:?}");
        let err = client.write(0, &small_file(2, 2, 1)).unwrap_err();
        assert!(matches!(err, Error::Storage { .. }), "{err}");
        println!("{url}: error within {took:?}: {err}");
    }
}

#[test]
fn writes_fail_while_the_server_is_down_and_succeed_after() {
    let Some(mut s3) = server("writes_fail_while_the_server_is_down_and_succeed_after") else {
        return;
    };
    s3.create_bucket("bkt");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("src.db");
    let conn = common::build_db(&path, 200, 4096);
    let client: Arc<dyn ReplicaClient> = Arc::new(s3.client("bkt", "outage").unwrap());
    let mut before = std::fs::read(&path).unwrap();
    let mut w = ReplicaWriter::create(client.clone(), &before, now_ms()).unwrap();
    let step = |w: &mut ReplicaWriter, sql: &str, before: &mut Vec<u8>| {
        conn.execute_batch(sql).unwrap();
        let after = std::fs::read(&path).unwrap();
        let pages = common::changed(before, &after, 4096);
        let refs: Vec<(u32, &[u8])> = pages.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        let n = (after.len() / 4096) as u32;
        let first = w.append(n, &refs, now_ms());
        (first, n, pages, after)
    };
    let (ok, ..) = step(&mut w, "UPDATE t SET n = n + 1", &mut before);
    assert_eq!(ok.unwrap(), 2);
    before = std::fs::read(&path).unwrap();

    s3.stop();
    let (failed, n, pages, after) = step(
        &mut w,
        "INSERT INTO t(name) VALUES ('during the outage')",
        &mut before,
    );
    let err = failed.unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    assert_eq!(w.txid(), 2, "a failed write leaves the writer where it was");
    assert!(client.list(0).is_err(), "listing fails too");
    println!("while down: {err}");

    s3.start_again().unwrap();
    let refs: Vec<(u32, &[u8])> = pages.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    assert_eq!(
        w.append(n, &refs, now_ms()).unwrap(),
        3,
        "the same transaction, retried"
    );
    let restored = restore(client.as_ref(), Target::Latest).unwrap();
    assert_eq!(restored.txid, 3);
    assert!(restored.db == after, "the restore is the source after the outage");
}
