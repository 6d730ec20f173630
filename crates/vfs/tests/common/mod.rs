//! Shared by the tests that run programs: the `libonesync.so` of the workspace
//! build, program probes, and syscall counting with `strace`.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// target/<profile>/libonesync.so, one directory above the test binary: the loadable
/// extension, which the workspace build makes (crates/extension re-exports this crate's
/// entry points), not this crate's own build.
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let lib = dir.join("libonesync.so");
    assert!(
        lib.exists(),
        "{} not built: build the workspace first (`cargo build --release` for --release tests)",
        lib.display()
    );
    lib
}

/// Whether `program arg` runs and succeeds.
pub fn have(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `script` in the system `sqlite3` CLI (on `:memory:`); asserts that it succeeded with
/// nothing on stderr and returns its stdout.
pub fn sqlite3_script(script: &str) -> String {
    let out = Command::new("sqlite3")
        .arg(":memory:")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// `t(k, v)` of a plain SQLite file, by key, and its `PRAGMA integrity_check` (the
/// replication tests' table, read from a restored replica).
pub fn plain_table_t(path: &Path) -> (Vec<(i64, String)>, String) {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows = conn
        .prepare("SELECT k, v FROM t ORDER BY k")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    (rows, check)
}

/// The growth steps of a new store during a measured run of single-insert transactions
/// (`growths` flushes, `zeros` bytes) stay logarithmic and bounded: a store grows by a
/// quarter of itself at a time, to about what the commits between two checkpoints (1,000)
/// take, a few MiB, whatever the number of transactions. A step per commit, or a step as
/// large as the 64 MiB the store used to be, fails.
pub fn assert_growth_bounded(label: &str, growths: u64, zeros: u64) {
    assert!(
        growths <= 16 && zeros <= 12 << 20,
        "{label}: the store grew {growths} times by {zeros} bytes in all, want <= 16 steps \
         and <= 12 MiB"
    );
}

/// `ONESYNC_BIG_TESTS=1`: the full-size runs.
pub fn big_tests() -> bool {
    std::env::var("ONESYNC_BIG_TESTS").is_ok_and(|v| v == "1")
}

/// Transactions per measured run: 1,000, or 10,000 with ONESYNC_BIG_TESTS=1.
pub fn transactions() -> u64 {
    if big_tests() {
        10_000
    } else {
        1_000
    }
}

/// Printed by the measured program (a `write` to stdout) just before and just
/// after the part that is measured.
pub const BEGIN_MARK: &str = "ONESYNC_MEASURE_BEGIN";
pub const END_MARK: &str = "ONESYNC_MEASURE_END";

/// The syscalls that make data durable.
pub const FSYNC_FAMILY: &[&str] = &["fsync", "fdatasync", "sync_file_range", "syncfs", "msync"];
/// The syscalls that write file data.
pub const WRITE_FAMILY: &[&str] = &["write", "pwrite64", "writev", "pwritev", "pwritev2"];
/// The syscalls that read file data at an offset (the store's reads; not the CLI's stdin).
pub const PREAD_FAMILY: &[&str] = &["pread64", "preadv", "preadv2"];
/// The syscalls that look a file up or stat it (SQLite's look for a hot journal or WAL).
pub const STAT_FAMILY: &[&str] = &[
    "stat",
    "lstat",
    "newfstatat",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
];

/// Calls and bytes of traced syscalls in one stretch of a trace.
#[derive(Clone, Debug, Default)]
pub struct Syscalls {
    pub calls: BTreeMap<String, u64>,
    /// Sum of the return values of the write family (bytes written).
    pub bytes_written: u64,
    /// Write calls whose data, as far as the trace shows it (40 bytes), is all zeros: a
    /// growth step's preallocation. A commit's write begins with its record's header, or
    /// with a page of SQLite's, which begins with its type byte (these tests write b-tree
    /// pages and page 1 only).
    pub zero_writes: u64,
}

impl Syscalls {
    pub fn fsyncs(&self) -> u64 {
        self.of(FSYNC_FAMILY)
    }

    pub fn writes(&self) -> u64 {
        self.of(WRITE_FAMILY)
    }

    pub fn preads(&self) -> u64 {
        self.of(PREAD_FAMILY)
    }

    pub fn stats(&self) -> u64 {
        self.of(STAT_FAMILY)
    }

    fn of(&self, family: &[&str]) -> u64 {
        family
            .iter()
            .map(|s| self.calls.get(*s).copied().unwrap_or(0))
            .sum()
    }

    fn add(&mut self, name: &str, ret: Option<i64>, line: &str) {
        *self.calls.entry(name.to_owned()).or_default() += 1;
        if WRITE_FAMILY.contains(&name) {
            self.bytes_written += ret.filter(|&r| r > 0).unwrap_or(0) as u64;
            let data = line.split_once(", \"").map_or("", |(_, d)| d);
            if data.starts_with(&"\\0".repeat(40)) {
                self.zero_writes += 1;
            }
        }
    }
}

/// What one traced run measured: between the markers, and in all.
#[derive(Debug)]
pub struct Traced {
    pub output: Output,
    pub window: Syscalls,
    pub total: Syscalls,
}

/// Runs `cmd` (stdin from `stdin`) under `strace -f` tracing the fsync, write,
/// pread and stat families, and counts calls and written bytes, both between the
/// [`BEGIN_MARK`] and [`END_MARK`] lines the program writes and overall.
pub fn strace(cmd: Command, stdin: Option<&Path>, trace_file: &Path) -> Traced {
    let syscalls: Vec<&str> = [FSYNC_FAMILY, WRITE_FAMILY, PREAD_FAMILY, STAT_FAMILY].concat();
    let mut st = Command::new("strace");
    st.arg("-f")
        .arg("-qq")
        .args(["-s", "40"])
        .arg("-o")
        .arg(trace_file)
        .arg("-e")
        .arg(format!("trace={}", syscalls.join(",")))
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => st.env(k, v),
            None => st.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        st.current_dir(dir);
    }
    st.stdin(match stdin {
        Some(p) => Stdio::from(std::fs::File::open(p).unwrap()),
        None => Stdio::null(),
    });
    let output = st.output().expect("run strace");
    let text = std::fs::read_to_string(trace_file).expect("read the strace output");
    let (window, total) = parse_trace(&text);
    Traced {
        output,
        window,
        total,
    }
}

/// Parses `strace -f -o` output: `PID name(args) = ret`, with calls that
/// were interrupted by another thread's split into `<unfinished ...>` and
/// `<... name resumed>`.
fn parse_trace(text: &str) -> (Syscalls, Syscalls) {
    let mut window = Syscalls::default();
    let mut total = Syscalls::default();
    let mut pending: HashMap<&str, String> = HashMap::new();
    let mut state = 0; // 0 before the begin mark, 1 inside, 2 after the end mark
    for line in text.lines() {
        let (pid, rest) = line.split_once(' ').unwrap_or(("", line));
        let rest = rest.trim_start();
        let full = if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            pending.insert(pid, head.to_owned());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let (name, after) = tail.split_once(" resumed>").unwrap_or((tail, ""));
            let head = pending.remove(pid).unwrap_or_else(|| format!("{name}("));
            format!("{head}{after}")
        } else {
            rest.to_owned()
        };
        if full.starts_with("+++") || full.starts_with("---") {
            continue;
        }
        let Some((name, _)) = full.split_once('(') else {
            continue;
        };
        if full.contains(BEGIN_MARK) {
            state = 1;
            continue;
        }
        if full.contains(END_MARK) {
            state = 2;
            continue;
        }
        let ret = full
            .rsplit_once(") = ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|r| r.parse::<i64>().ok());
        total.add(name, ret, &full);
        if state == 1 {
            window.add(name, ret, &full);
        }
    }
    assert!(state == 2, "the trace lacks the {BEGIN_MARK}/{END_MARK} writes");
    (window, total)
}

/// One line of figures per run, and a table of calls like `strace -c`'s.
pub fn report(label: &str, n: u64, seconds: f64, s: &Syscalls) -> String {
    let mut out = format!(
        "{label}: {n} txns in {seconds:.2} s ({:.0} txn/s under strace): {:.3} fsync-family calls/txn, \
         {:.2} write calls/txn, {:.0} bytes ({:.2} KiB) written/txn\n",
        n as f64 / seconds,
        s.fsyncs() as f64 / n as f64,
        s.writes() as f64 / n as f64,
        s.bytes_written as f64 / n as f64,
        s.bytes_written as f64 / n as f64 / 1024.0,
    );
    for (name, calls) in &s.calls {
        out.push_str(&format!("    {name:<16} {calls:>8} calls\n"));
    }
    out
}

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// On a table `t(a INTEGER UNIQUE, b)` holding rows 1 and 2: a ROLLBACK, nested savepoints
/// rolled back in part, a statement rolled back by a constraint, and a transaction that
/// spills pages to the database file before its ROLLBACK. Leaves rows 1, 2 and 10.
pub fn exercise_rollbacks(conn: &rusqlite::Connection) {
    conn.execute_batch("BEGIN; INSERT INTO t VALUES (3, 'z'); ROLLBACK;")
        .unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM t"), 2);
    conn.execute_batch(
        "SAVEPOINT a; INSERT INTO t VALUES (10, 'a'); SAVEPOINT b; INSERT INTO t VALUES (11, 'b');
         ROLLBACK TO b; RELEASE a;",
    )
    .unwrap();
    assert_eq!(count(conn, "SELECT sum(a) FROM t WHERE a >= 10"), 10);
    let err = conn
        .execute_batch("INSERT INTO t VALUES (20, 'p'), (21, 'q'), (1, 'dup'), (22, 'r')")
        .unwrap_err();
    assert!(err.to_string().contains("UNIQUE"), "{err}");
    assert_eq!(
        count(conn, "SELECT count(*) FROM t WHERE a >= 20"),
        0,
        "statement rolled back"
    );
    // Spill many pages inside a transaction, then roll it back.
    conn.execute_batch(
        "PRAGMA cache_size = 10; BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO t SELECT i, randomblob(500) FROM n; ROLLBACK;",
    )
    .unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM t"), 3);
}

/// Whether the stock `sqlite3` CLI is on PATH (saying so when it is not: the caller skips).
pub fn have_sqlite3_cli() -> bool {
    let ok = have("sqlite3", &["--version"]);
    if !ok {
        eprintln!("SKIPPED: no sqlite3 CLI on PATH (apt-get install sqlite3)");
    }
    ok
}

/// The CLI lines that load `libonesync.so` and open the store `db` through it.
pub fn cli_open_store(db: &Path) -> String {
    format!(
        ".load {}\n.open 'file:{}?vfs=onesync'\n",
        cdylib().with_extension("").display(),
        db.display()
    )
}

/// A `sqlite3` CLI on `:memory:`, its stdin and stdout piped (stderr piped when
/// `capture_stderr`, else inherited).
pub fn spawn_sqlite3_cli(capture_stderr: bool) -> std::process::Child {
    Command::new("sqlite3")
        .arg(":memory:")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if capture_stderr {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .spawn()
        .expect("running sqlite3")
}
