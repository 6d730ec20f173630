//! Read replicas end to end (issue 43, item 5), with real processes: `sqlite3` CLI writers
//! (FULL and NORMAL) loading `libonesync.so` replicate a source store through the VFS
//! (`onesync_replicate`), a follower process (`onesync restore URL OUT --store --follow`)
//! follows the replica into another store, killed (SIGKILL) twice mid-run and restarted,
//! and a reader process (`file:OUT?vfs=onesync&mode=ro`) reads `t` and `log` in one read
//! transaction over and over:
//! - every read is a consistent prefix of the writers' history (its `log` replayed gives
//!   its `t`), and never goes backwards (each read's log extends the previous one's);
//! - once the writers stop, the reader sees the source's final state within a bound;
//! - every run of the follower applies files contiguously, and a restarted one resumes at
//!   or past the last TXID the killed one reported, with the next file right after it:
//!   none applied twice, none skipped.
//!
//! Negative controls: the checks refuse a history with a read going backwards, a run log
//! with a duplicate or a skipped file, and a database with one of the replica's files
//! skipped. For a directory replica and for S3 (a local Versity gateway; SKIP without Go
//! unless CI is set). Skips, saying so, without the sqlite3 CLI.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use onesync_ltx::client::ReplicaClient;
use onesync_ltx::restore::{restore, Target};
use onesync_ltx::testing::{self, S3Server};
use onesync_ltx::LtxFile;

const WRITERS: u64 = 2;
const TXNS: u64 = 150;
const KEYS: u64 = 40;
/// How long after the writers stop the reader must see their final state.
const CATCH_UP: Duration = Duration::from_secs(30);

type Env = Vec<(&'static str, String)>;

fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().parent().unwrap().join("libonesync.so");
    assert!(
        lib.exists(),
        "{} not built: `cargo build --release --workspace` first",
        lib.display()
    );
    lib
}

fn have_sqlite3() -> bool {
    let ok = Command::new("sqlite3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
    }
    ok
}

fn sqlite3(env: &Env) -> Child {
    Command::new("sqlite3")
        .arg(":memory:")
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running sqlite3")
}

fn open_line(db: &Path, query: &str) -> String {
    format!(
        ".load {}\n.open 'file:{}?vfs=onesync{query}'\n",
        cdylib().with_extension("").display(),
        db.display()
    )
}

/// The writers: each a CLI process of `TXNS` transactions, one `log` row each.
fn spawn_writers(db: &Path, url: &str, env: &Env) -> Vec<Child> {
    let replicate = format!(
        "&onesync_replicate={}&onesync_replicate_interval_ms=100",
        url.replace('%', "%25").replace('?', "%3F").replace('&', "%26")
    );
    let mut setup = sqlite3(env);
    writeln!(
        setup.stdin.take().unwrap(),
        ".bail on\n{}CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\nCREATE TABLE log(seq INTEGER PRIMARY KEY, proc INTEGER, n INTEGER);",
        open_line(db, &replicate)
    )
    .unwrap();
    let out = setup.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (0..WRITERS)
        .map(|p| {
            let sync = if p == 0 { "FULL" } else { "NORMAL" };
            let mut script = format!(".bail on\n{}PRAGMA busy_timeout=20000;\nPRAGMA synchronous={sync};\n", open_line(db, &replicate));
            for n in 0..TXNS {
                let (put, del) = ((p * 7 + n * 13) % KEYS, (p * 11 + n * 5) % KEYS);
                script.push_str(&format!(
                    "BEGIN;\nINSERT INTO log(proc, n) VALUES ({p}, {n});\nINSERT OR REPLACE INTO t(k, v) VALUES ({put}, 'p{p}n{n}:' || hex(randomblob({})));\nDELETE FROM t WHERE k = {del};\nCOMMIT;\n",
                    (n * 37) % 300
                ));
                if n % 5 == 0 {
                    script.push_str(".shell sleep 0.2\n");
                }
            }
            let mut child = sqlite3(env);
            let mut stdin = child.stdin.take().unwrap();
            std::thread::spawn(move || stdin.write_all(script.as_bytes()));
            child
        })
        .collect()
}

/// One consistent read: `t` as (k, value up to its `:`) and `log` as (proc, n).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct View {
    t: BTreeMap<u64, String>,
    log: Vec<(u64, u64)>,
}

/// A `mode=ro` reader process of the follower's store.
struct Reader {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Reader {
    fn start(store: &Path) -> Reader {
        let mut child = sqlite3(&Vec::new());
        let mut stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        write!(
            stdin,
            "{}.mode list\n.separator |\n",
            open_line(store, "&mode=ro")
        )
        .unwrap();
        Reader { child, stdin, stdout }
    }

    /// `t` and `log` in one read transaction (`None`: the tables are not there yet).
    fn read(&mut self) -> Option<View> {
        writeln!(
            self.stdin,
            "BEGIN;\nSELECT 'T', k, substr(v, 1, instr(v, ':') - 1) FROM t;\nSELECT 'L', proc, n FROM log ORDER BY seq;\nCOMMIT;\nSELECT 'END';"
        )
        .unwrap();
        let mut view = View::default();
        let mut whole = true;
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the reader exited");
            let f: Vec<&str> = line.trim_end().split('|').collect();
            match f[..] {
                ["END"] => break,
                ["T", k, v] => {
                    view.t.insert(k.parse().unwrap(), v.to_owned());
                }
                ["L", p, n] => view.log.push((p.parse().unwrap(), n.parse().unwrap())),
                _ => whole = false,
            }
        }
        whole.then_some(view)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `log` replayed gives `t` (values up to their `:`): `Err` if `view` is not a state
/// the writers' transactions reach in commit order.
fn consistent(view: &View) -> Result<(), String> {
    let mut expect = BTreeMap::new();
    let mut last_n: BTreeMap<u64, u64> = BTreeMap::new();
    for &(p, n) in &view.log {
        if last_n.insert(p, n).is_some_and(|prev| prev >= n) {
            return Err(format!("process {p} out of order at {n}"));
        }
        let (put, del) = ((p * 7 + n * 13) % KEYS, (p * 11 + n * 5) % KEYS);
        expect.insert(put, format!("p{p}n{n}"));
        expect.remove(&del);
    }
    if expect != view.t {
        return Err(format!("t is not what its log of {} gives", view.log.len()));
    }
    Ok(())
}

/// `Err` if `next` goes back from `prev` (its log does not extend `prev`'s).
fn not_backwards(prev: &View, next: &View) -> Result<(), String> {
    if next.log.len() < prev.log.len() || next.log[..prev.log.len()] != prev.log[..] {
        return Err(format!(
            "a read went back from {} to {} transactions",
            prev.log.len(),
            next.log.len()
        ));
    }
    Ok(())
}

/// Checks the follower runs' stdout: each run's steps contiguous from where it started, and
/// each restart at or past the last TXID the run before it reported, with its first file
/// right after. Returns the steps.
fn check_runs(runs: &[String]) -> Result<usize, String> {
    let mut reported = 0u64;
    let mut steps = 0;
    for (i, run) in runs.iter().enumerate() {
        let mut at: Option<u64> = None;
        for line in run.lines() {
            let hex = |s: &str| u64::from_str_radix(&s[..16], 16).map_err(|e| format!("{line}: {e}"));
            if let Some(rest) = line.strip_prefix("resuming at TXID ") {
                let txid = hex(rest)?;
                if txid < reported {
                    return Err(format!(
                        "run {i} resumed at {txid:x}, before {reported:x} reported applied"
                    ));
                }
                at = Some(txid);
            } else if let Some(rest) = line.strip_prefix("applied TXID ") {
                let txid = hex(rest)?;
                // `(level L MIN-MAX.ltx, ...` or `(restored from N files, ...`.
                let min = rest
                    .split(' ')
                    .nth(3)
                    .and_then(|name| u64::from_str_radix(name.get(..16)?, 16).ok());
                let snapshot = rest.contains("(level 9 ");
                match (at, min) {
                    // A snapshot (after a gap) needs only to go further.
                    (Some(a), Some(_)) if snapshot && txid <= a => {
                        return Err(format!("run {i}: snapshot {txid:x} not past {a:x}"));
                    }
                    (Some(a), Some(min)) if !snapshot && min != a + 1 => {
                        return Err(format!("run {i}: after {a:x} applied a file from {min:x}"));
                    }
                    _ => {}
                }
                at = Some(txid);
                reported = reported.max(txid);
                steps += 1;
            }
        }
    }
    Ok(steps)
}

/// The follower process, its output appended to `log`.
fn spawn_follower(url: &str, out: &Path, log: &Path, env: &Env) -> Child {
    let stdout = std::fs::File::create(log).unwrap();
    let stderr = std::fs::File::create(log.with_extension("err")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_onesync"))
        .args(["restore", url])
        .arg(out)
        .args(["--store", "--follow", "--interval-ms", "50"])
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// The source's final `t` and `log`, read through the VFS.
fn source_view(db: &Path) -> View {
    let mut child = sqlite3(&Vec::new());
    let mut stdin = child.stdin.take().unwrap();
    write!(stdin, "{}.mode list\n.separator |\n", open_line(db, "")).unwrap();
    let mut reader = Reader {
        stdin,
        stdout: BufReader::new(child.stdout.take().unwrap()),
        child,
    };
    reader.read().unwrap()
}

/// The whole run against one replica.
fn follow_while_writing(dir: &Path, url: &str, client: &dyn ReplicaClient, env: &Env) {
    let (db, out) = (dir.join("source.onesync"), dir.join("follower.onesync"));
    let mut writers = spawn_writers(&db, url, env);
    let logs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("follower-{i}.log"))).collect();
    let mut follower = spawn_follower(url, &out, &logs[0], env);
    let started = Instant::now();
    while !std::fs::read_to_string(&logs[0])
        .unwrap()
        .contains("applied TXID")
    {
        assert!(
            started.elapsed() < CATCH_UP,
            "the follower never restored: {:?}",
            std::fs::read_to_string(logs[0].with_extension("err"))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut reader = Reader::start(&out);
    let (mut prev, mut reads, mut run) = (View::default(), 0, 0);
    let mut writers_done: Option<(Instant, View)> = None;
    loop {
        if let Some(view) = reader.read() {
            consistent(&view).unwrap_or_else(|e| panic!("read {reads}: {e}"));
            not_backwards(&prev, &view).unwrap_or_else(|e| panic!("read {reads}: {e}"));
            prev = view;
            reads += 1;
        }
        // Killed twice while the writers write, each time restarted at once.
        let elapsed = started.elapsed();
        if run < 2 && elapsed > Duration::from_millis(1500 + 1700 * run as u64) {
            follower.kill().unwrap();
            follower.wait().unwrap();
            run += 1;
            follower = spawn_follower(url, &out, &logs[run], env);
        }
        if writers_done.is_none() && writers.iter_mut().all(|w| w.try_wait().unwrap().is_some()) {
            for (p, w) in writers.drain(..).enumerate() {
                let o = w.wait_with_output().unwrap();
                assert!(
                    o.status.success(),
                    "writer {p}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            writers_done = Some((Instant::now(), source_view(&db)));
        }
        if let Some((at, last)) = &writers_done {
            if prev == *last {
                break;
            }
            assert!(
                at.elapsed() < CATCH_UP,
                "{CATCH_UP:?} after the writers stopped the reader sees {} of {} transactions",
                prev.log.len(),
                last.log.len()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(run, 2, "the follower was killed twice while the writers wrote");
    assert_eq!(prev.log.len() as u64, WRITERS * TXNS);
    follower.kill().unwrap();
    follower.wait().unwrap();
    let runs: Vec<String> = logs.iter().map(|l| std::fs::read_to_string(l).unwrap()).collect();
    let steps = check_runs(&runs).unwrap_or_else(|e| panic!("{e}\n{runs:#?}"));
    assert!(
        runs[1].starts_with("resuming at TXID ") && runs[2].starts_with("resuming at TXID "),
        "{runs:#?}"
    );
    let state = onesync_follow::read_state(&out).unwrap().unwrap();
    let newest = onesync_ltx::restore::max_txid(client).unwrap().unwrap().max_txid;
    assert_eq!(state.txid, newest, "the store holds the replica's newest TXID");
    assert!(reads > 20 && steps > 10, "{reads} reads, {steps} steps");
    eprintln!(
        "{reads} consistent reads, {steps} steps reported, {} files applied",
        state.files_applied
    );
    negative_control_a_skipped_file_is_seen(client);
}

/// Negative control of the consistency check: the database with any one level-0 file
/// skipped (the one before it restored, then the one after it applied) is refused for
/// some file of the replica.
fn negative_control_a_skipped_file_is_seen(client: &dyn ReplicaClient) {
    let files = client.list(0).unwrap();
    let found = files.windows(2).skip(1).any(|w| {
        let before = restore(client, Target::Txid(w[0].min_txid - 1)).unwrap();
        let next = LtxFile::decode_bytes(&client.read(&w[1]).unwrap()).unwrap();
        let ps = next.header.page_size as usize;
        let mut db = before.db;
        db.resize(next.header.commit as usize * ps, 0);
        for p in &next.pages {
            db[(p.pgno as usize - 1) * ps..p.pgno as usize * ps].copy_from_slice(&p.data);
        }
        let path = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(path.path(), &db).unwrap();
        let conn = rusqlite::Connection::open(path.path()).unwrap();
        match plain_view(&conn) {
            Ok(view) => consistent(&view).is_err(),
            Err(_) => true,
        }
    });
    assert!(
        found,
        "skipping a file never showed: the consistency check sees nothing"
    );
}

/// `t` and `log` of a plain SQLite database.
fn plain_view(conn: &rusqlite::Connection) -> rusqlite::Result<View> {
    let mut t = BTreeMap::new();
    let mut stmt = conn.prepare("SELECT k, substr(v, 1, instr(v, ':') - 1) FROM t")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        t.insert(r.get::<_, i64>(0)? as u64, r.get(1)?);
    }
    let mut log = Vec::new();
    let mut stmt = conn.prepare("SELECT proc, n FROM log ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        log.push((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64));
    }
    Ok(View { t, log })
}

#[test]
fn the_checks_refuse_a_read_going_back_and_a_duplicate_or_skipped_file() {
    let view = |n: u64| View {
        t: BTreeMap::new(),
        log: (0..n).map(|i| (0, i)).collect(),
    };
    assert!(not_backwards(&view(3), &view(4)).is_ok());
    assert!(not_backwards(&view(4), &view(3)).is_err());
    let line = |min: u64, max: u64| {
        format!("applied TXID {max:016x} (level 0 {min:016x}-{max:016x}.ltx, 2 pages), lag 5 ms\n")
    };
    let first = format!("following x into y\napplied TXID 0000000000000003 (restored from 2 files, up to level 0 0000000000000003-0000000000000003.ltx), lag 5 ms\n{}{}", line(4, 4), line(5, 6));
    assert_eq!(check_runs(std::slice::from_ref(&first)), Ok(3));
    let resumed = |at: u64, next: u64| {
        format!(
            "resuming at TXID {at:016x}: following x into y\n{}",
            line(next, next)
        )
    };
    assert!(check_runs(&[first.clone(), resumed(6, 7)]).is_ok());
    assert!(
        check_runs(&[first.clone(), resumed(7, 8)]).is_ok(),
        "killed between commit and report"
    );
    assert!(
        check_runs(&[first.clone(), resumed(5, 6)]).is_err(),
        "TXID 6 applied twice"
    );
    assert!(
        check_runs(&[first.clone(), resumed(6, 8)]).is_err(),
        "TXID 7 skipped"
    );
    assert!(
        check_runs(&[format!("{first}{}", line(8, 8))]).is_err(),
        "TXID 7 skipped"
    );
}

#[test]
fn a_follower_of_a_directory_replica_shows_readers_a_consistent_prefix() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    let url = format!("file://{}", replica.display());
    follow_while_writing(
        dir.path(),
        &url,
        &onesync_ltx::client::file::FileClient::new(&replica),
        &Vec::new(),
    );
}

#[test]
fn a_follower_of_an_s3_replica_shows_readers_a_consistent_prefix() {
    if !have_sqlite3() {
        return;
    }
    let go_bin = testing::go_bin_dir(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let server = match S3Server::start(&go_bin) {
        Ok(s) => s,
        Err(why) => return testing::skip_or_fail("follow (S3)", &why),
    };
    server.create_bucket("bkt");
    let dir = tempfile::tempdir().unwrap();
    let client = server.client("bkt", "app").unwrap();
    follow_while_writing(dir.path(), &server.url("bkt", "app"), &client, &server.env());
}

#[test]
fn restore_follow_refuses_bad_input_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("replica").display());
    let out = dir.path().join("out.onesync");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_onesync"))
            .args(["restore", &url])
            .arg(&out)
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["--follow"]);
    assert_eq!(o.status.code(), Some(2), "--follow needs --store");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--store"));
    let o = run(&["--store", "--follow", "--txid", "5"]);
    assert_eq!(o.status.code(), Some(2), "--follow follows the latest");
    let o = run(&["--store", "--follow", "--interval-ms", "5"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("onesync: error: --interval-ms 5: give 10 to"));
    std::fs::write(&out, b"SQLite format 3\0 and more").unwrap();
    let o = run(&["--store", "--follow"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is a plain SQLite database; onesync restore --follow needs a onesync store"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
}
