//! Watching a Litestream replica from outside while a run ships to it: every LTX file that
//! appears under its root (any level: transactions, snapshots, compactions), when it was
//! first seen and its size, and for the level-0 files (each shipped batch lands there
//! first, in onesync's replicas and in Litestream's) the largest rowid of a table b-tree
//! leaf page they hold. The workload appends rows with growing rowids to one table, so a
//! level-0 file holding rowid R holds that row: a commit is in the replica once a file
//! with its rowid (or a later one) has appeared. Read the same way for both layouts:
//! `<root>/ltx/<level>/<min>-<max>.ltx` (a directory replica) and
//! `<bucket dir>/<prefix>/<level %04x>/<min>-<max>.ltx` (an S3 bucket served by versitygw's
//! POSIX backend, whose objects are files).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use onesync_ltx::client::parse_file_name;
use onesync_ltx::format::LtxFile;

/// One file seen in the replica.
#[derive(Debug, Clone, Copy)]
struct Seen {
    level: u32,
    size: u64,
    /// For level 0: decoded whole (a file still being written fails to decode and is read
    /// again at the next poll).
    decoded: bool,
}

/// What has been seen of one replica so far.
pub struct Watcher {
    root: PathBuf,
    files: BTreeMap<PathBuf, Seen>,
    /// (when first seen, the largest rowid in any level-0 file seen by then), one entry per
    /// poll that raised it: non-decreasing in both.
    rowids: Vec<(Instant, i64)>,
}

impl Watcher {
    pub fn new(root: &Path) -> Watcher {
        Watcher {
            root: root.to_owned(),
            files: BTreeMap::new(),
            rowids: Vec::new(),
        }
    }

    /// Reads the replica once: new files, sizes, the rowids of new level-0 files.
    pub fn poll(&mut self) {
        let now = Instant::now();
        let mut found = Vec::new();
        ltx_files(&self.root, &mut found);
        // In TXID order within a level, so a file's rowids are credited when it appears.
        found.sort();
        let mut best = self.rowids.last().map(|&(_, r)| r);
        for (path, level, size) in found {
            let seen = self.files.entry(path.clone()).or_insert(Seen {
                level,
                size,
                decoded: false,
            });
            seen.size = seen.size.max(size);
            if level != 0 || seen.decoded {
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let Ok(file) = LtxFile::decode_bytes(&bytes) else {
                continue;
            };
            seen.decoded = true;
            let top = file.pages.iter().filter_map(|p| max_rowid(p.pgno, &p.data)).max();
            if top > best {
                best = top;
            }
        }
        if let Some(best) = best {
            if self.rowids.last().is_none_or(|&(_, r)| r < best) {
                self.rowids.push((now, best));
            }
        }
    }

    /// Whether any LTX file has appeared (the replicator is up and has shipped).
    pub fn any_file(&self) -> bool {
        !self.files.is_empty()
    }

    /// The largest rowid in the level-0 files seen so far.
    pub fn max_rowid(&self) -> Option<i64> {
        self.rowids.last().map(|&(_, r)| r)
    }

    /// When each rowid level was first seen (see [`Watcher::rowids`]).
    pub fn rowid_times(&self) -> &[(Instant, i64)] {
        &self.rowids
    }

    /// LTX files seen, and their bytes (each at the largest size seen).
    pub fn totals(&self) -> (u64, u64) {
        let bytes = self.files.values().map(|s| s.size).sum();
        (self.files.len() as u64, bytes)
    }

    /// Files and bytes per level.
    pub fn by_level(&self) -> BTreeMap<u32, (u64, u64)> {
        let mut levels = BTreeMap::new();
        for s in self.files.values() {
            let entry = levels.entry(s.level).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += s.size;
        }
        levels
    }
}

/// Every `<level dir>/<min>-<max>.ltx` below `dir`: (path, level, size). The level directory
/// is named in decimal (directory replicas) or as four hex digits (S3); both read as hex,
/// since levels run from 0 to 9.
fn ltx_files(dir: &Path, out: &mut Vec<(PathBuf, u32, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            ltx_files(&path, out);
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if parse_file_name(name).is_none() {
            continue;
        }
        let level = dir
            .file_name()
            .and_then(|d| d.to_str())
            .and_then(|d| u32::from_str_radix(d, 16).ok());
        if let (Some(level), Ok(meta)) = (level, entry.metadata()) {
            out.push((path, level, meta.len()));
        }
    }
}

/// The largest rowid on a SQLite table b-tree leaf page (type 13), `None` for any other
/// page. Page 1 starts after the 100-byte database header.
pub fn max_rowid(pgno: u32, page: &[u8]) -> Option<i64> {
    let header = if pgno == 1 { 100 } else { 0 };
    if *page.get(header)? != 13 {
        return None;
    }
    let u16_at = |at: usize| -> Option<usize> {
        let bytes = page.get(at..at + 2)?;
        Some(usize::from(u16::from_be_bytes([bytes[0], bytes[1]])))
    };
    let cells = u16_at(header + 3)?;
    let mut max = None;
    for i in 0..cells {
        let cell = u16_at(header + 8 + 2 * i)?;
        // A table leaf cell: the payload's size, then the rowid, both varints.
        let (_, used) = varint(page.get(cell..)?)?;
        let (rowid, _) = varint(page.get(cell + used..)?)?;
        max = max.max(Some(rowid as i64));
    }
    max
}

/// A SQLite varint: its value and its length (1 to 9 bytes; the ninth gives all 8 bits).
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        if i == 8 {
            return Some(((value << 8) | u64::from(b), 9));
        }
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_as_sqlite_writes_them() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81]), None);
    }

    /// The largest rowid of a real table leaf, read from a database SQLite wrote.
    #[test]
    fn the_largest_rowid_of_a_leaf_page_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA page_size=4096; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
             INSERT INTO t VALUES (7, x'00'), (300, x'01'), (70000, x'02');",
        )
        .unwrap();
        drop(conn);
        let bytes = std::fs::read(&path).unwrap();
        let pages: Vec<Option<i64>> = bytes
            .chunks(4096)
            .enumerate()
            .map(|(i, p)| max_rowid(i as u32 + 1, p))
            .collect();
        // Page 1 is sqlite_schema's leaf (one row), page 2 is t's.
        assert_eq!(pages, [Some(1), Some(70000)]);
    }
}
