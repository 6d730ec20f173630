//! What every replica backend offers ([`ReplicaClient`]) and what it lists ([`FileInfo`]):
//! Litestream 0.5's replica client reduced to the calls a writer, a restore and compaction
//! need, synchronous.

use crate::error::Error;
use crate::format::LtxFile;

/// The level Litestream keeps full snapshots at.
pub const SNAPSHOT_LEVEL: u32 = 9;

/// A replica of LTX files, as Litestream 0.5 lays it out on one backend.
pub trait ReplicaClient: Send + Sync {
    /// The replica's URL for messages (never credentials).
    fn url(&self) -> String;
    /// The files of one level (0..=9), sorted by (min_txid, max_txid); empty if none. Each
    /// file's `timestamp_ms` is what Litestream reads as its `CreatedAt` when it lists
    /// without metadata (compaction and retention do): the file's modification time (the
    /// header's timestamp) for a directory, the object's `LastModified` for S3.
    fn list(&self, level: u32) -> Result<Vec<FileInfo>, Error>;
    /// [`list`](Self::list), but each file's `timestamp_ms` as Litestream reads it for a
    /// `-timestamp` restore: the header's timestamp where the backend keeps it apart (S3's
    /// `litestream-timestamp` metadata; the object's `LastModified` where it is missing).
    fn list_with_header_timestamps(&self, level: u32) -> Result<Vec<FileInfo>, Error> {
        self.list(level)
    }
    /// One file's bytes.
    fn read(&self, file: &FileInfo) -> Result<Vec<u8>, Error>;
    /// Stores `file` at `level` under its TXIDs' name, so that a reader sees all of it or
    /// none, durably once it returns; returns its FileInfo.
    fn write(&self, level: u32, file: &LtxFile) -> Result<FileInfo, Error>;
    /// Deletes files; a file already gone is not an error.
    fn delete(&self, files: &[FileInfo]) -> Result<(), Error>;
}

/// One LTX file of a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    pub level: u32,
    pub min_txid: u64,
    pub max_txid: u64,
    /// Bytes.
    pub size: u64,
    /// Milliseconds since the Unix epoch, as Litestream reads the file's `CreatedAt` (see
    /// [`ReplicaClient::list`]).
    pub timestamp_ms: i64,
}

impl FileInfo {
    /// `<min>-<max>.ltx`.
    pub fn name(&self) -> String {
        file_name(self.min_txid, self.max_txid)
    }
}

impl std::fmt::Display for FileInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "level {} {}", self.level, self.name())
    }
}

/// `<min>-<max>.ltx`, 16 lowercase hex digits each (superfly/ltx's `FormatFilename`).
pub fn file_name(min_txid: u64, max_txid: u64) -> String {
    format!("{min_txid:016x}-{max_txid:016x}.ltx")
}

/// The TXIDs of a name [`file_name`] makes; `None` for any other name (superfly/ltx's
/// `ParseFilename` accepts exactly these).
pub fn parse_file_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".ltx")?;
    let (a, b) = stem.split_once('-')?;
    let hex16 = |s: &str| {
        (s.len() == 16 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
    };
    Some((hex16(a)?, hex16(b)?))
}

/// Refuses a level Litestream does not have.
pub fn check_level(level: u32) -> Result<(), Error> {
    if level > SNAPSHOT_LEVEL {
        return Err(Error::Invalid(format!(
            "level {level} is not a Litestream level (0..=9)"
        )));
    }
    Ok(())
}

/// Sorts files as Litestream's iterators give them.
pub(crate) fn sort_files(files: &mut [FileInfo]) {
    files.sort_by_key(|f| (f.min_txid, f.max_txid));
}
