//! Typed errors. Every failure the store can meet maps to one variant with a message a user
//! can act on; none of them panics.

use std::io;
use std::path::PathBuf;

/// Errors returned by the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed; `during` says what the store was doing.
    #[error("I/O error while {during}: {source}")]
    Io {
        during: &'static str,
        #[source]
        source: io::Error,
    },
    /// The file does not begin with a onesync store header.
    #[error("not a onesync store: {0}")]
    NotAStore(String),
    /// The file was written by a newer onesync with a format this build cannot read.
    #[error("store format version {found} is newer than this build supports (version {supported}); upgrade onesync")]
    UnsupportedVersion { found: u32, supported: u32 },
    /// The file is shorter than its metadata says it must be.
    #[error("store file is truncated: {0}")]
    Truncated(String),
    /// A read of the store file failed while following the chain of commits; nothing was
    /// changed. The commits before that point can be copied into a new store.
    #[error(
        "I/O error while {during} at byte {offset} of the store file: {source}; nothing was changed. \
             `onesync salvage STORE NEW` copies every commit before that point into a new store"
    )]
    ReadFailed {
        during: &'static str,
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// Checksums or structure do not add up; nothing was changed.
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    /// The disk is full. The transaction was not committed; committed data is intact.
    #[error("no space left on the device for the store; the transaction was not committed and committed data is intact")]
    NoSpace,
    /// A write was attempted on a store opened read-only.
    #[error("the store is open read-only")]
    ReadOnly,
    /// The file cannot be opened for writing.
    #[error("cannot open {path} for writing ({source}); open it with Options::read_only to read it")]
    NotWritable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another process holds the store open in a way that excludes this open: read-only
    /// opens cannot share with read-write ones.
    #[error("store {0} is in use by another process (a read-only open and a read-write open cannot share a store)")]
    Locked(PathBuf),
    /// `Store::create` on a path that exists.
    #[error("{0} already exists; use Store::open")]
    AlreadyExists(PathBuf),
    /// `Store::open` on a path that does not exist.
    #[error("{0} does not exist; use Store::create")]
    NotFound(PathBuf),
    /// Another transaction committed a change to something this transaction also changed.
    #[error("write conflict: {0} was changed by a transaction that committed after this one began")]
    Conflict(String),
    /// The caller passed something the store cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A logical file named in a call does not exist in the transaction's view.
    #[error("no logical file with id {0}")]
    NoSuchFile(u32),
    /// `create_file` with a name already in use.
    #[error("a logical file named {0:?} already exists")]
    FileExists(String),
    /// A write or flush failed earlier; the store refuses further commits until reopened,
    /// because it can no longer tell what reached the disk.
    #[error("the store stopped accepting commits after an I/O failure ({0}); reopen it to recover")]
    Poisoned(String),
}

impl Error {
    pub(crate) fn io(during: &'static str, source: io::Error) -> Error {
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return Error::NoSpace;
        }
        Error::Io { during, source }
    }
}

/// The store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed `commit()`: the error and, if the transaction had already been given its place in
/// the commit log, that sequence number. Such a transaction may or may not survive a crash;
/// one without a sequence number never will.
#[derive(Debug, thiserror::Error)]
#[error("commit failed: {error}")]
pub struct CommitError {
    pub seq: Option<u64>,
    #[source]
    pub error: Error,
}

impl From<CommitError> for Error {
    fn from(e: CommitError) -> Error {
        e.error
    }
}

/// Bytes that do not decode as the structure they should be: corruption, with the
/// decoder's account of what and where.
impl From<onesync_codec::DecodeError> for Error {
    fn from(e: onesync_codec::DecodeError) -> Error {
        Error::Corrupt(e.to_string())
    }
}
