//! A Litestream 0.5 *file replica* (v0.5.18's `file.ReplicaClient`): the directory
//! `litestream restore -o OUT file:///DIR` reads.
//!
//! The layout is `DIR/ltx/<level>/<minTXID>-<maxTXID>.ltx` (level in decimal). Each file is
//! written to `NAME.tmp`, flushed, renamed, and its directory flushed; then its
//! modification time is set to the header's timestamp, as Litestream does: Litestream reads
//! a file's `CreatedAt` from its modification time, for `-timestamp` restores and retention
//! alike.

use super::api::{check_level, file_name, parse_file_name, sort_files, FileInfo, ReplicaClient};
use crate::error::{io, Error};
use crate::format::LtxFile;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// A replica in a local directory.
#[derive(Debug, Clone)]
pub struct FileClient {
    root: PathBuf,
}

impl FileClient {
    /// The replica in `root` (created on the first write).
    pub fn new(root: impl Into<PathBuf>) -> FileClient {
        FileClient { root: root.into() }
    }

    /// The replica's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `DIR/ltx/<level>`.
    pub fn level_dir(&self, level: u32) -> PathBuf {
        self.root.join("ltx").join(level.to_string())
    }

    /// `DIR/ltx/<level>/<min>-<max>.ltx`.
    pub fn file_path(&self, level: u32, min_txid: u64, max_txid: u64) -> PathBuf {
        self.level_dir(level).join(file_name(min_txid, max_txid))
    }
}

fn mtime_ms(meta: &fs::Metadata) -> i64 {
    match meta.modified() {
        Ok(t) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_millis() as i64,
            Err(e) => -(e.duration().as_millis() as i64),
        },
        Err(_) => 0,
    }
}

impl ReplicaClient for FileClient {
    fn url(&self) -> String {
        format!("file://{}", self.root.display())
    }

    fn list(&self, level: u32) -> Result<Vec<FileInfo>, Error> {
        check_level(level)?;
        let dir = self.level_dir(level);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(format!("list {}", dir.display()))(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(format!("list {}", dir.display())))?;
            let name = entry.file_name();
            let Some((min_txid, max_txid)) = name.to_str().and_then(parse_file_name) else {
                continue;
            };
            let meta = match entry.metadata() {
                Ok(m) => m,
                // Deleted between the listing and now (retention running beside us).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(format!("stat {}", entry.path().display()))(e)),
            };
            out.push(FileInfo {
                level,
                min_txid,
                max_txid,
                size: meta.len(),
                timestamp_ms: mtime_ms(&meta),
            });
        }
        sort_files(&mut out);
        Ok(out)
    }

    fn read(&self, file: &FileInfo) -> Result<Vec<u8>, Error> {
        let path = self.file_path(file.level, file.min_txid, file.max_txid);
        fs::read(&path).map_err(io(format!("read {}", path.display())))
    }

    fn write(&self, level: u32, file: &LtxFile) -> Result<FileInfo, Error> {
        check_level(level)?;
        let h = &file.header;
        let path = self.file_path(level, h.min_txid, h.max_txid);
        let dir = self.level_dir(level);
        fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        let tmp = path.with_extension("ltx.tmp");
        let bytes = file.encode_bytes();
        let written = (|| {
            let f = fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut &f, &bytes)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io(format!("write {}", tmp.display()))(e));
        }
        fs::rename(&tmp, &path).map_err(io(format!("rename to {}", path.display())))?;
        fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("flush {}", dir.display())))?;
        let when = if h.timestamp >= 0 {
            UNIX_EPOCH + Duration::from_millis(h.timestamp as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(h.timestamp.unsigned_abs())
        };
        fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_times(fs::FileTimes::new().set_accessed(when).set_modified(when)))
            .map_err(io(format!("set the time of {}", path.display())))?;
        Ok(FileInfo {
            level,
            min_txid: h.min_txid,
            max_txid: h.max_txid,
            size: bytes.len() as u64,
            timestamp_ms: h.timestamp,
        })
    }

    fn delete(&self, files: &[FileInfo]) -> Result<(), Error> {
        for f in files {
            let path = self.file_path(f.level, f.min_txid, f.max_txid);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(format!("delete {}", path.display()))(e)),
            }
        }
        Ok(())
    }
}
