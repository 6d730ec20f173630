//! What the Go-backed tests share: finding Go, building superfly/ltx's `ltx` command, a
//! small program over superfly/ltx's library (`ltxhelper`), and stock Litestream, each
//! cached in `$CARGO_TARGET_DIR/go-bin`; the SKIP-or-fail convention; SQLite fixtures.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[allow(unused_imports)]
pub use onesync_ltx::testing::{skip_or_fail, LITESTREAM_VERSION};

/// superfly/ltx's newest tag (the mirror's newest stored commit is 4 commits past it: a
/// docs change, `encode-db`, and two fixes that do not touch what these tests write).
pub const LTX_VERSION: &str = "v0.5.2";

/// Where built Go programs are cached: `$CARGO_TARGET_DIR/go-bin`.
pub fn go_bin() -> PathBuf {
    onesync_ltx::testing::go_bin_dir(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

fn go_build(args: &[&str], dir: &Path) -> Result<(), String> {
    onesync_ltx::testing::go_build(&go_bin(), args, dir)
}

fn show(what: &str, out: &Output) -> String {
    onesync_ltx::testing::show(what, out)
}

/// superfly/ltx's `ltx` command at [`LTX_VERSION`], built once.
pub fn ltx_command() -> Result<PathBuf, String> {
    let bin = go_bin().join("ltx");
    let stamp = go_bin().join("ltx.version");
    if bin.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(LTX_VERSION) {
        return Ok(bin);
    }
    go_build(
        &[
            "install",
            &format!("github.com/superfly/ltx/cmd/ltx@{LTX_VERSION}"),
        ],
        &std::env::temp_dir(),
    )?;
    std::fs::write(&stamp, LTX_VERSION).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// Stock Litestream at [`LITESTREAM_VERSION`], built once and kept.
pub fn litestream_command() -> Result<PathBuf, String> {
    onesync_ltx::testing::litestream_command(&go_bin())
}

/// A program over superfly/ltx's library (the encoder and decoder Litestream uses):
///
/// - `encode-db DB OUT TIMESTAMP`: DB's snapshot at TXID 1, as `ltx encode-db` writes it but
///   with a given timestamp (so that ours can be compared byte for byte);
/// - `reencode IN OUT`: decodes IN with `ltx.Decoder` (every check) and encodes its header,
///   pages and post-apply checksum again with `ltx.Encoder`.
const HELPER_GO: &str = r#"package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/superfly/ltx"
)

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func main() {
	switch os.Args[1] {
	case "encode-db":
		db, err := os.ReadFile(os.Args[2])
		check(err)
		ts, err := strconv.ParseInt(os.Args[4], 10, 64)
		check(err)
		pageSize := uint32(db[16])<<8 | uint32(db[17])
		if pageSize == 1 {
			pageSize = 65536
		}
		commit := uint32(len(db)) / pageSize
		var out bytes.Buffer
		enc, err := ltx.NewEncoder(&out)
		check(err)
		check(enc.EncodeHeader(ltx.Header{Version: ltx.Version, PageSize: pageSize, Commit: commit, MinTXID: 1, MaxTXID: 1, Timestamp: ts}))
		var sum ltx.Checksum
		for pgno := uint32(1); pgno <= commit; pgno++ {
			if pgno == ltx.LockPgno(pageSize) {
				continue
			}
			page := db[(pgno-1)*pageSize : pgno*pageSize]
			check(enc.EncodePage(ltx.PageHeader{Pgno: pgno}, page))
			sum = ltx.ChecksumFlag | (sum ^ ltx.ChecksumPage(pgno, page))
		}
		enc.SetPostApplyChecksum(sum)
		check(enc.Close())
		check(os.WriteFile(os.Args[3], out.Bytes(), 0o644))
	case "reencode":
		in, err := os.Open(os.Args[2])
		check(err)
		dec := ltx.NewDecoder(in)
		check(dec.DecodeHeader())
		hdr := dec.Header()
		var out bytes.Buffer
		enc, err := ltx.NewEncoder(&out)
		check(err)
		check(enc.EncodeHeader(hdr))
		data := make([]byte, hdr.PageSize)
		n := 0
		for {
			var ph ltx.PageHeader
			err := dec.DecodePage(&ph, data)
			if err == io.EOF {
				break
			}
			check(err)
			ph.Flags = 0
			check(enc.EncodePage(ph, data))
			n++
		}
		check(dec.Close())
		enc.SetPostApplyChecksum(dec.Trailer().PostApplyChecksum)
		check(enc.Close())
		check(os.WriteFile(os.Args[3], out.Bytes(), 0o644))
		fmt.Printf("decoded %d pages, file checksum %s\n", n, dec.Trailer().FileChecksum)
	default:
		check(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}
"#;

/// [`HELPER_GO`] built against superfly/ltx [`LTX_VERSION`], once per change of its source.
pub fn ltx_helper() -> Result<PathBuf, String> {
    let bin = go_bin().join("ltxhelper");
    let src = go_bin().join("ltxhelper-src");
    let main = src.join("main.go");
    if bin.is_file() && std::fs::read_to_string(&main).ok().as_deref() == Some(HELPER_GO) {
        return Ok(bin);
    }
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    let go_mod = format!("module ltxhelper\n\ngo 1.21\n\nrequire github.com/superfly/ltx {LTX_VERSION}\n");
    std::fs::write(src.join("go.mod"), go_mod).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(src.join("go.sum"));
    std::fs::write(&main, "").map_err(|e| e.to_string())?;
    std::fs::write(src.join("main.go.tmp"), HELPER_GO).map_err(|e| e.to_string())?;
    std::fs::rename(src.join("main.go.tmp"), &main).map_err(|e| e.to_string())?;
    let out_arg = bin.display().to_string();
    if let Err(e) = go_build(&["build", "-o", &out_arg, "."], &src) {
        let _ = std::fs::remove_file(&main);
        return Err(e);
    }
    Ok(bin)
}

/// Runs a program; panics with its output when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.env_remove("AWS_CA_BUNDLE").output().expect("run");
    let text = show(&format!("{cmd:?}"), &out);
    assert!(out.status.success(), "{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every row of every table, in a stable order (the table name, then the row as text).
pub fn dump(conn: &rusqlite::Connection) -> Vec<String> {
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    tables.sort();
    let mut rows = Vec::new();
    for t in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{t}\" ORDER BY rowid"))
            .unwrap();
        let n = stmt.column_count();
        let mut q = stmt.query([]).unwrap();
        while let Some(row) = q.next().unwrap() {
            let cols: Vec<String> = (0..n).map(|i| format!("{:?}", row.get_ref(i).unwrap())).collect();
            rows.push(format!("{t}: {}", cols.join(", ")));
        }
    }
    rows
}

/// The rows of a database file.
pub fn dump_file(path: &Path) -> Vec<String> {
    dump(&rusqlite::Connection::open(path).unwrap())
}

/// `PRAGMA integrity_check` of a database file.
pub fn integrity(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// A plain database (rollback journal) of `rows` rows with some text and a blob.
pub fn build_db(path: &Path, rows: usize, page_size: u32) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA page_size = {page_size}; PRAGMA journal_mode = DELETE;
         CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, n INTEGER, b BLOB);
         CREATE INDEX t_name ON t(name);"
    ))
    .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for i in 0..rows {
        tx.execute(
            "INSERT INTO t(name, n, b) VALUES (?1, ?2, randomblob(?3))",
            rusqlite::params![
                format!("row {i} {}", "x".repeat(i % 37)),
                (i * 7919) as i64,
                (i % 50) as i64
            ],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    conn
}

/// A replica written from a real database's history: a snapshot at TXID 1, then a
/// transaction per change (inserts, updates, deletes, a growth, a VACUUM that shrinks the
/// file), a second snapshot at TXID `mid_snapshot`; the database's bytes and rows at each
/// TXID, and each file's timestamp.
pub struct History {
    pub dir: tempfile::TempDir,
    pub replica: PathBuf,
    pub client: std::sync::Arc<onesync_ltx::client::file::FileClient>,
    /// Index `txid - 1`.
    pub images: Vec<Vec<u8>>,
    pub rows: Vec<Vec<String>>,
    pub timestamps: Vec<i64>,
    pub mid_snapshot: u64,
}

/// RFC 3339 (UTC, seconds) of milliseconds since the epoch, as `-timestamp` takes it.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The pages a change made (page number, new bytes), between two images of a database.
pub fn changed(before: &[u8], after: &[u8], ps: usize) -> Vec<(u32, Vec<u8>)> {
    after
        .chunks(ps)
        .enumerate()
        .filter(|(i, p)| before.get(i * ps..(i + 1) * ps) != Some(*p))
        .map(|(i, p)| (i as u32 + 1, p.to_vec()))
        .collect()
}

/// [`history_to`] a file replica in a new temporary directory.
pub fn history(rows: usize) -> History {
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    let client = std::sync::Arc::new(onesync_ltx::client::file::FileClient::new(&replica));
    let Timeline {
        images,
        rows,
        timestamps,
        mid_snapshot,
    } = history_to(
        client.clone(),
        dir.path(),
        rows,
        Clock::Fixed(1_765_000_000_000),
        &mut |_| {},
    );
    History {
        dir,
        replica,
        client,
        images,
        rows,
        timestamps,
        mid_snapshot,
    }
}

/// The database history [`History`] describes, written through `client` (the source
/// database in `dir`), timestamped by `clock`: the images, rows and timestamps
/// at each TXID, and the TXID of the second snapshot.
pub fn history_to(
    client: std::sync::Arc<dyn onesync_ltx::client::ReplicaClient>,
    dir: &Path,
    rows: usize,
    clock: Clock,
    after_each: &mut dyn FnMut(u64),
) -> Timeline {
    use onesync_ltx::replica::ReplicaWriter;
    let db_path = dir.join("src.db");
    let conn = build_db(&db_path, rows, 4096);
    let changes = [
        "INSERT INTO t(name, n, b) SELECT 'copy ' || name, n * 2, b FROM t WHERE id % 5 = 0",
        "UPDATE t SET name = upper(name), n = -n WHERE id % 3 = 0",
        "DELETE FROM t WHERE id % 4 = 1",
        "CREATE TABLE u(k TEXT PRIMARY KEY, v BLOB); INSERT INTO u SELECT 'k' || id, zeroblob(300) FROM t WHERE id % 2 = 0",
        "DELETE FROM t WHERE id % 2 = 0; DROP TABLE u",
        "VACUUM",
        "INSERT INTO t(name, n, b) VALUES ('last', 42, x'00ff')",
    ];
    let mut images = vec![std::fs::read(&db_path).unwrap()];
    let mut dumps = vec![dump(&conn)];
    let stamp = |i: i64| match clock {
        Clock::Fixed(base) => base + i * 10_000,
        Clock::Real => {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_millis(1200));
            }
            onesync_ltx::replica::now_ms()
        }
    };
    let base = stamp(0);
    let mut timestamps = vec![base];
    let mut w = ReplicaWriter::create(client, &images[0], base).unwrap();
    let mid_snapshot = 4;
    for (i, sql) in changes.iter().enumerate() {
        conn.execute_batch(sql).unwrap();
        let after = std::fs::read(&db_path).unwrap();
        let pages = changed(images.last().unwrap(), &after, 4096);
        let refs: Vec<(u32, &[u8])> = pages.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        let ts = stamp(i as i64 + 1);
        let txid = w.append((after.len() / 4096) as u32, &refs, ts).unwrap();
        assert_eq!(txid, i as u64 + 2);
        if txid == mid_snapshot {
            w.snapshot(&after, ts).unwrap();
        }
        after_each(txid);
        images.push(after);
        dumps.push(dump(&conn));
        timestamps.push(ts);
    }
    Timeline {
        images,
        rows: dumps,
        timestamps,
        mid_snapshot,
    }
}

/// How [`history_to`] stamps its files.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// 10 s apart from this time (ms since the epoch).
    Fixed(i64),
    /// The time of each commit, 1.2 s apart (S3's `LastModified` then matches the
    /// headers' timestamps within a second, as Litestream's `-timestamp` bounds need).
    Real,
}

/// What [`history_to`] wrote: the database at each TXID (index `txid - 1`).
pub struct Timeline {
    pub images: Vec<Vec<u8>>,
    pub rows: Vec<Vec<String>>,
    pub timestamps: Vec<i64>,
    pub mid_snapshot: u64,
}
