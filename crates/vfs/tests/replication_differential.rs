//! Issue 43's differential test: `sqlite3` CLI processes (FULL, NORMAL, and `concurrent=1`)
//! run random transactions on one replicated database, to a directory replica and to a real
//! S3 server (Versity's gateway, built from the Go module proxy); then stock `litestream
//! restore` and onesync's restore rebuild plain SQLite files from the replica:
//! - the latest equals the store, table for table (every commit ships by the last close);
//! - at every TXID and at the level-0 files' timestamps, the two restores give the same
//!   bytes, and each is a *consistent prefix*: its `log` (one row per transaction, in commit
//!   order) replayed gives exactly its `t`, and no transaction appears that began after the
//!   timestamp asked for.
//!
//! Negative control: a replica with one level-0 file removed does not restore.
//! Skips, saying so, without the sqlite3 CLI; without Go it SKIPs, or fails when CI is set.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use onesync_ltx::client::file::FileClient;
use onesync_ltx::client::ReplicaClient;
use onesync_ltx::restore::{restore_to_file, Target};
use onesync_ltx::testing::{self, S3Server};

mod common;

const PROCESSES: u64 = 3;
const TXNS: u64 = 120;
const KEYS: u64 = 40;

fn go_bin() -> PathBuf {
    testing::go_bin_dir(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// `?` and `&` of a replica URL, escaped for a SQLite URI's query.
fn uri_escape(url: &str) -> String {
    url.replace('%', "%25").replace('?', "%3F").replace('&', "%26")
}

/// Runs the writers on `db`, each a CLI process with `env`, replicating to `url`.
fn run_writers(db: &Path, url: &str, env: &[(&'static str, String)]) {
    let open = |extra: &str| {
        format!(
            ".load {}\n.open 'file:{}?vfs=onesync&onesync_replicate={}&onesync_replicate_interval_ms=100{extra}'\n",
            common::cdylib().with_extension("").display(),
            db.display(),
            uri_escape(url)
        )
    };
    run_cli(
        &format!(
            "{}CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\nCREATE TABLE log(seq INTEGER PRIMARY KEY, proc INTEGER, n INTEGER, at INTEGER);\n",
            open("")
        ),
        env,
        true,
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            let (extra, sync) = match p {
                0 => ("", "FULL"),
                1 => ("", "NORMAL"),
                _ => ("&concurrent=1", "FULL"),
            };
            let mut script = open(extra);
            // A concurrent writer's COMMIT may be refused for a conflict (then it rolls back);
            // the others' never fail.
            let (bail, rollback) = if p < 2 { (".bail on\n", "") } else { ("", "ROLLBACK;\n") };
            script.insert_str(0, bail);
            script.push_str(&format!("PRAGMA busy_timeout=20000;\nPRAGMA synchronous={sync};\n"));
            for n in 0..TXNS {
                let (put, del) = ((p * 7 + n * 13) % KEYS, (p * 11 + n * 5) % KEYS);
                // A failed COMMIT (a concurrent writer's conflict) is rolled back whole: its
                // log row goes with it, so the replay check still holds.
                script.push_str(&format!(
                    "BEGIN;\nINSERT INTO log(proc, n, at) VALUES ({p}, {n}, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));\n\
                     INSERT OR REPLACE INTO t(k, v) VALUES ({put}, 'p{p}n{n}:' || hex(randomblob({}))); DELETE FROM t WHERE k = {del};\nCOMMIT;\n{rollback}",
                    (n * 37) % 300
                ));
                if n % 6 == 0 {
                    // Time passes (5 s in all), so batches ship between transactions.
                    script.push_str(".shell sleep 0.25\n");
                }
            }
            spawn_cli(&script, env)
        })
        .collect();
    for (p, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let unexpected: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                !(p == 2 && (l.contains("no transaction is active") || l.contains("database is locked")))
            })
            .collect();
        assert!(
            unexpected.is_empty() && (p == 2 || out.status.success()),
            "writer {p} failed: {stderr}"
        );
    }
}

fn spawn_cli(script: &str, env: &[(&'static str, String)]) -> std::process::Child {
    let mut child = Command::new("sqlite3")
        .arg(":memory:")
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running sqlite3");
    let mut stdin = child.stdin.take().unwrap();
    let script = script.to_owned();
    std::thread::spawn(move || stdin.write_all(script.as_bytes()));
    child
}

fn run_cli(script: &str, env: &[(&'static str, String)], quiet: bool) -> String {
    let out = spawn_cli(&format!(".bail on\n{script}"), env)
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && (!quiet || stderr.is_empty()), "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

type Rows = Vec<(i64, String)>;

/// `t`, and `log` as (proc, n, at) in commit order, of a plain SQLite file.
fn read_plain(path: &Path) -> (Rows, Vec<(u64, u64, i64)>) {
    let (t, check) = common::plain_table_t(path);
    assert_eq!(check, "ok", "{}", path.display());
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let log = conn
        .prepare("SELECT proc, n, at FROM log ORDER BY seq")
        .unwrap()
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64, r.get(2)?))
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (t, log)
}

/// The restored database is a state the writers' transactions reach in commit order:
/// replaying its log gives its `t` (values compared up to their `:`; random bytes follow).
fn assert_consistent_prefix(path: &Path, what: &str) -> usize {
    let (t, log) = read_plain(path);
    let mut expect: BTreeMap<u64, String> = BTreeMap::new();
    let mut last_n: BTreeMap<u64, u64> = BTreeMap::new();
    for &(p, n, _) in &log {
        assert!(
            last_n.insert(p, n).is_none_or(|prev| prev < n),
            "{what}: process {p} out of order"
        );
        let (put, del) = ((p * 7 + n * 13) % KEYS, (p * 11 + n * 5) % KEYS);
        expect.insert(put, format!("p{p}n{n}"));
        expect.remove(&del);
    }
    let got: BTreeMap<u64, String> = t
        .iter()
        .map(|(k, v)| (*k as u64, v.split(':').next().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(got, expect, "{what}: t is not what its log gives");
    log.len()
}

fn litestream_restore(
    litestream: &Path,
    url: &str,
    env: &[(&'static str, String)],
    args: &[&str],
    out: &Path,
) {
    let output = Command::new(litestream)
        .arg("restore")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(url)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "litestream restore {args:?}: {}",
        testing::show("restore", &output)
    );
}

fn rfc3339(ms: i64) -> String {
    onesync_ltx::client::s3::rfc3339_nano(ms)
}

/// The whole differential check on one replica.
fn check_replica(
    dir: &Path,
    db: &Path,
    url: &str,
    client: &dyn ReplicaClient,
    env: &[(&'static str, String)],
) {
    let litestream = match testing::litestream_command(&go_bin()) {
        Ok(l) => l,
        Err(why) => return testing::skip_or_fail("replication_differential", &why),
    };
    // The latest: equal to the store.
    let ours = dir.join("ours-latest.db");
    let stock = dir.join("stock-latest.db");
    restore_to_file(client, Target::Latest, &ours).unwrap();
    litestream_restore(&litestream, url, env, &[], &stock);
    assert!(
        std::fs::read(&ours).unwrap() == std::fs::read(&stock).unwrap(),
        "latest: stock and ours differ"
    );
    let total = assert_consistent_prefix(&ours, "latest");
    let store = run_cli(
        &format!(
            ".load {}\n.open 'file:{}?vfs=onesync'\nSELECT count(*) FROM log;\n",
            common::cdylib().with_extension("").display(),
            db.display()
        ),
        &[],
        true,
    );
    assert_eq!(
        store.trim(),
        total.to_string(),
        "the latest restore holds every commit"
    );
    // Every TXID (sampled) and the level-0 files' timestamps.
    let files = client.list_with_header_timestamps(0).unwrap();
    assert!(files.len() > 5, "batches: {}", files.len());
    for (i, f) in files.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        let (ours, stock) = (
            dir.join(format!("ours-{i}.db")),
            dir.join(format!("stock-{i}.db")),
        );
        restore_to_file(client, Target::Txid(f.max_txid), &ours).unwrap();
        litestream_restore(
            &litestream,
            url,
            env,
            &["-txid", &format!("{:016x}", f.max_txid)],
            &stock,
        );
        assert!(
            std::fs::read(&ours).unwrap() == std::fs::read(&stock).unwrap(),
            "TXID {:x}: stock and ours differ",
            f.max_txid
        );
        assert_consistent_prefix(&ours, &format!("TXID {:x}", f.max_txid));
    }
    // Times: each a level-0 file's. Litestream first checks the time against the replica's
    // span as S3 lists it (objects' LastModified, to the second), so times within the first
    // and the last second of the replica may be refused there: they are left out.
    let start = client.list(9).unwrap()[0].timestamp_ms + 1500;
    let end = files.last().unwrap().timestamp_ms - 1500;
    let later: Vec<_> = files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.timestamp_ms > start && f.timestamp_ms < end)
        .collect();
    let mut times = 0;
    for &(i, f) in later.iter().step_by(later.len().div_ceil(5).max(1)) {
        let at = dir.join(format!("stock-at-{i}.db"));
        litestream_restore(
            &litestream,
            url,
            env,
            &["-timestamp", &rfc3339(f.timestamp_ms)],
            &at,
        );
        assert_consistent_prefix(&at, &format!("timestamp of TXID {:x}", f.max_txid));
        let (_, log) = read_plain(&at);
        assert!(
            log.iter().all(|&(_, _, began)| began <= f.timestamp_ms),
            "a transaction after the time asked for"
        );
        // What our restore gives for that time, and the TXID itself: the same bytes.
        let ours = dir.join(format!("ours-at-{i}.db"));
        restore_to_file(client, Target::Timestamp(f.timestamp_ms), &ours).unwrap();
        assert!(
            std::fs::read(&ours).unwrap() == std::fs::read(&at).unwrap(),
            "time of TXID {:x}: stock and ours differ",
            f.max_txid
        );
        times += 1;
    }
    assert!(times >= 2, "{times} times checked");
}

#[test]
fn stock_litestream_restores_a_directory_replica_as_the_writers_left_it() {
    if !common::have_sqlite3_cli() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, replica) = (dir.path().join("app.onesync"), dir.path().join("replica"));
    let url = format!("file://{}", replica.display());
    run_writers(&db, &url, &[]);
    check_replica(dir.path(), &db, &url, &FileClient::new(&replica), &[]);
    // Negative control: a level-0 file gone, and the compacted files that cover it, the
    // replica does not restore past it.
    let client = FileClient::new(&replica);
    let files = client.list(0).unwrap();
    client
        .delete(&files[files.len() / 2..files.len() / 2 + 1])
        .unwrap();
    for level in 1..9 {
        client.delete(&client.list(level).unwrap()).unwrap();
    }
    assert!(restore_to_file(&client, Target::Latest, &dir.path().join("gap.db")).is_err());
}

#[test]
fn stock_litestream_restores_an_s3_replica_as_the_writers_left_it() {
    if !common::have_sqlite3_cli() {
        return;
    }
    let mut server = match S3Server::start(&go_bin()) {
        Ok(s) => s,
        Err(why) => return testing::skip_or_fail("replication_differential (S3)", &why),
    };
    server.create_bucket("bkt");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.onesync");
    let url = server.url("bkt", "app");
    let env = server.env();
    run_writers(&db, &url, &env);
    let client = server.client("bkt", "app").unwrap();
    check_replica(dir.path(), &db, &url, &client, &env);
    server.stop();
}
