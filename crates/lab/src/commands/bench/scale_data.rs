//! The databases `bench scale` measures: a `--sizes` value ([`Size`]), the plain SQLite
//! database of that size and its onesync store copy, built once and kept in a cache directory
//! (a second run reuses them), and the working copies each measurement runs on (a WAL copy of
//! the plain database, a copy of the store), so that every run starts from the same bytes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use rusqlite::OpenFlags;

use crate::loopfs::free_bytes;
use crate::progress::{phase_bar, phase_spinner};
use crate::sqlite::{file_uri, in_transaction, open_onesync, open_plain};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Bytes a 1000-byte row takes in the database: four to a 4 KiB page.
const ROW_BYTES: u64 = 1024;
/// Bytes of random data per row (`randomblob`).
pub const ROW_PAYLOAD: u64 = 1000;
/// Rows per transaction while building either database (about 50 MiB): a large
/// transaction, and a step of the progress bar.
const BUILD_BATCH: u64 = 50_000;
/// A store's file over the plain database's, as room to ask for before building one (a
/// store keeps free slots and grows in steps of a quarter of its size).
const STORE_OVER_PLAIN: f64 = 1.3;
/// Room kept free besides the databases (the rows a run inserts, the WAL, the filesystem).
const SPARE_BYTES: u64 = 256 * MIB;

/// A database size of `--sizes`: a whole number of MiB or GiB ("100M", "1G").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    amount: u64,
    unit: Unit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    M,
    G,
}

impl Size {
    pub fn bytes(self) -> u64 {
        self.amount
            * match self.unit {
                Unit::M => MIB,
                Unit::G => GIB,
            }
    }

    /// Rows of 1000 bytes that make a database of about this size.
    pub fn rows(self) -> u64 {
        self.bytes() / ROW_BYTES
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.unit {
            Unit::M => "M",
            Unit::G => "G",
        };
        write!(f, "{}{unit}", self.amount)
    }
}

impl FromStr for Size {
    type Err = String;

    fn from_str(text: &str) -> Result<Size, String> {
        let explain = || {
            format!(
                "{text:?} is not a size: give a whole number followed by M (MiB) or G (GiB), e.g. 100M or 1G"
            )
        };
        let text = text.trim();
        let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, suffix) = text.split_at(digits);
        let unit = match suffix {
            "M" | "m" => Unit::M,
            "G" | "g" => Unit::G,
            _ => return Err(explain()),
        };
        let amount: u64 = number.parse().map_err(|_| explain())?;
        // At least a thousand rows, and no more than a disk holds.
        let most = match unit {
            Unit::M => 1024 * 1024,
            Unit::G => 1024,
        };
        if !(1..=most).contains(&amount) {
            return Err(format!("{text}: a size must be from 1M to 1024G"));
        }
        Ok(Size { amount, unit })
    }
}

/// The cache directory: `--dir`, else /var/tmp/onesync-scale (kept across reboots), else
/// onesync-scale in the system's temporary directory; made if missing.
pub fn cache_dir(dir: Option<&Path>) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_owned(),
        None if Path::new("/var/tmp").is_dir() => PathBuf::from("/var/tmp/onesync-scale"),
        None => std::env::temp_dir().join("onesync-scale"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("making the cache directory {}", dir.display()))?;
    Ok(dir)
}

/// The prefix of a measurement's work directory in the cache directory (its working copy).
pub const WORK_DIR_PREFIX: &str = "run-";

/// Work directories in `dir` that a run left: a run killed before it removed its own.
pub fn leftover_work_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut left = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(WORK_DIR_PREFIX));
        if ours && path.is_dir() {
            left.push(path);
        }
    }
    left.sort();
    Ok(left)
}

/// The cached databases of one size.
pub struct Cached {
    pub plain: PathBuf,
    pub store: PathBuf,
}

impl Cached {
    pub fn in_dir(dir: &Path, size: Size) -> Cached {
        Cached {
            plain: dir.join(format!("plain-{size}.db")),
            // Named by the store's format version: a store of an older one would be
            // measured as that format until its first checkpoint migrated it.
            store: dir.join(format!("store-{size}-v{}.onesync", onesync_store::FORMAT_VERSION)),
        }
    }

    /// Bytes a run of `size` still needs free in the cache's filesystem: what is not built
    /// yet, a working copy of the larger database, and spare room. `None` when there is room.
    pub fn missing_room(&self, dir: &Path, size: Size) -> Result<Option<(u64, u64)>> {
        let plain = file_len(&self.plain).unwrap_or(0);
        let store = file_len(&self.store).unwrap_or(0);
        let plain_expected = plain.max(size.bytes());
        let store_expected = store.max((size.bytes() as f64 * STORE_OVER_PLAIN) as u64);
        let to_build = (plain_expected - plain) + (store_expected - store);
        let need = to_build + plain_expected.max(store_expected) + SPARE_BYTES;
        let free = free_bytes(dir)?;
        Ok((free < need).then_some((need, free)))
    }
}

/// A file's length, if it exists.
pub fn file_len(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// "12.3 GiB".
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB as f64)
}

/// `path` with `.building` appended: built there, renamed into place when complete, so a
/// half-built database (an interrupted run) is never taken for a cached one.
fn building(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".building");
    PathBuf::from(name)
}

/// Builds the plain database of `size` unless it is cached, then its store copy unless that
/// is cached; returns the number of rows (ids 1..=rows).
pub fn ensure(cached: &Cached, size: Size) -> Result<u64> {
    if cached.plain.is_file() {
        eprintln!("bench scale: {size}: reusing {}", cached.plain.display());
    } else {
        // A store copied from an earlier plain database would not hold these rows.
        remove_if_present(&cached.store)?;
        build_plain(&cached.plain, size)?;
    }
    let rows = max_id(&cached.plain)?;
    if cached.store.is_file() {
        eprintln!("bench scale: {size}: reusing {}", cached.store.display());
    } else {
        build_store(&cached.plain, &cached.store, size, rows)?;
    }
    Ok(rows)
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// The largest id of table t (its rows, as built).
fn max_id(plain: &Path) -> Result<u64> {
    let conn = open_plain(plain, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let max: Option<i64> = conn
        .query_row("SELECT max(id) FROM t", [], |r| r.get(0))
        .with_context(|| format!("reading the rows of {}", plain.display()))?;
    match max {
        Some(n) if n > 0 => Ok(n as u64),
        _ => bail!(
            "{} has no rows in table t: remove it and run again",
            plain.display()
        ),
    }
}

/// The plain database: table t of 1000-byte random rows, inserted in large transactions with
/// neither journal nor syncs (a failed build is thrown away, not recovered).
fn build_plain(path: &Path, size: Size) -> Result<()> {
    let rows = size.rows();
    eprintln!(
        "bench scale: {size}: building {} ({rows} rows of {ROW_PAYLOAD} bytes)",
        path.display()
    );
    let temp = building(path);
    remove_if_present(&temp)?;
    {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = open_plain(&temp, flags)?;
        conn.execute_batch(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);",
        )
        .with_context(|| format!("setting up {}", temp.display()))?;
        let mut insert = conn.prepare(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1)
             INSERT INTO t(v) SELECT randomblob(1000) FROM n",
        )?;
        let bar = phase_bar("build", rows);
        let mut done = 0;
        while done < rows {
            let batch = BUILD_BATCH.min(rows - done);
            conn.execute_batch("BEGIN")?;
            insert
                .execute([batch as i64])
                .with_context(|| format!("inserting rows into {}", temp.display()))?;
            conn.execute_batch("COMMIT")?;
            done += batch;
            bar.inc(batch);
        }
        bar.finish_and_clear();
    }
    std::fs::rename(&temp, path).with_context(|| format!("renaming {} into place", temp.display()))
}

/// The store copy of the plain database: its rows copied in order through the onesync VFS,
/// the plain file attached read-only, in transactions of [`BUILD_BATCH`] rows, then closed
/// cleanly (a checkpointed store, no chain to replay at open). Not SQLite's backup API: its
/// one transaction held about the whole database in this process's memory, which a 10G
/// store cannot ask of most machines.
fn build_store(plain: &Path, path: &Path, size: Size, rows: u64) -> Result<()> {
    eprintln!(
        "bench scale: {size}: copying {} into the store {}",
        plain.display(),
        path.display()
    );
    let temp = building(path);
    remove_if_present(&temp)?;
    {
        let store = open_onesync(&temp, true)?;
        // SQLite's own VFS for the plain file: an ATTACH without one opens it through the
        // main database's, onesync's.
        let uri = format!("{}?mode=ro&vfs=unix", file_uri(plain)?);
        store
            .execute("ATTACH ?1 AS plain", [&uri])
            .with_context(|| format!("attaching {uri}"))?;
        store.execute_batch("CREATE TABLE main.t(id INTEGER PRIMARY KEY, v BLOB)")?;
        let mut copy =
            store.prepare("INSERT INTO main.t SELECT id, v FROM plain.t WHERE id > ?1 AND id <= ?2")?;
        let bar = phase_bar("store", rows);
        let mut done = 0;
        while done < rows {
            let batch = BUILD_BATCH.min(rows - done);
            in_transaction(&store, || copy.execute([done as i64, (done + batch) as i64])).with_context(
                || {
                    format!(
                        "copying rows {done}.. of {} into {}",
                        plain.display(),
                        temp.display()
                    )
                },
            )?;
            done += batch;
            bar.inc(batch);
        }
        bar.finish_and_clear();
        drop(copy);
        store.execute_batch("DETACH plain")?;
        let copied: Option<i64> = store.query_row("SELECT max(id) FROM t", [], |r| r.get(0))?;
        if copied != Some(rows as i64) {
            bail!(
                "the store {} holds rows up to {copied:?}, not {rows}",
                temp.display()
            );
        }
        let spinner = phase_spinner("store", "closing (checkpoint)");
        store
            .close()
            .map_err(|(_, e)| anyhow!(e))
            .with_context(|| format!("closing {}", temp.display()))?;
        spinner.finish_and_clear();
    }
    std::fs::rename(&temp, path).with_context(|| format!("renaming {} into place", temp.display()))
}

/// A working copy of `size`'s database for `mode` in `work`: the store copied, or the plain
/// database copied and switched to WAL. Synced, so that the measured commits' flushes do not
/// write back the copy.
pub fn working_copy(cached: &Cached, work: &Path, size: Size, wal: bool) -> Result<PathBuf> {
    let (source, copy) = if wal {
        (&cached.plain, work.join(format!("wal-{size}.db")))
    } else {
        (&cached.store, work.join(format!("onesync-{size}.onesync")))
    };
    let spinner = phase_spinner("copy", "a working copy");
    std::fs::copy(source, &copy)
        .with_context(|| format!("copying {} to {}", source.display(), copy.display()))?;
    if wal {
        let conn = open_plain(&copy, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .with_context(|| format!("switching {} to WAL", copy.display()))?;
        if mode != "wal" {
            bail!("{} answered journal_mode {mode:?}, not wal", copy.display());
        }
    }
    nix::unistd::sync();
    spinner.finish_and_clear();
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_mib_and_gib() {
        assert_eq!("100M".parse::<Size>().map(Size::bytes), Ok(100 * MIB));
        assert_eq!("1G".parse::<Size>().map(Size::bytes), Ok(GIB));
        assert_eq!("10g".parse::<Size>().map(|s| s.to_string()), Ok("10G".to_owned()));
        assert_eq!("20M".parse::<Size>().map(Size::rows), Ok(20 * 1024));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in [
            "12X",
            "",
            "M",
            "1.5G",
            "-1G",
            "0M",
            "2048G",
            "99999999999999999999G",
            "1 G",
        ] {
            let refused = bad.parse::<Size>();
            assert!(refused.is_err(), "{bad:?} parsed as {refused:?}");
        }
        let said = "12X".parse::<Size>().unwrap_err();
        assert!(said.contains("M (MiB) or G (GiB)"), "{said}");
    }
}
