//! Errors of the `mvbt` module: an SQLite result code and the message that
//! goes to `zErrMsg`.

use onesync_vfs::ffi::{
    SQLITE_BUSY, SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CORRUPT, SQLITE_ERROR, SQLITE_INTERNAL, SQLITE_IOERR,
    SQLITE_MISMATCH,
};

pub(crate) use crate::sys::vtab::VtabError;

/// The `mvbt` module's own errors (the type is the one the `sqlite3_module` shims report).
impl VtabError {
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(SQLITE_INTERNAL, message)
    }
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(SQLITE_BUSY, message)
    }
    pub fn mismatch(message: impl Into<String>) -> Self {
        Self::new(SQLITE_MISMATCH, message)
    }
    pub fn duplicate_key(table: &str, key: i64) -> Self {
        // SQLite's own wording for a rowid/primary key clash, plus the key.
        Self::new(
            SQLITE_CONSTRAINT_PRIMARYKEY,
            format!("UNIQUE constraint failed: {table}.key (key {key} exists)"),
        )
    }

    /// Busy → SQLITE_BUSY, Corrupt → SQLITE_CORRUPT, Io → SQLITE_IOERR,
    /// Misuse and VersionGone → SQLITE_ERROR; the engine's message with an
    /// "mvbt: " prefix.
    pub fn from_engine(e: onesync_mvbt::Error) -> Self {
        use onesync_mvbt::Error;
        let code = match &e {
            Error::Io(_) => SQLITE_IOERR,
            Error::Corrupt(_) => SQLITE_CORRUPT,
            Error::Busy(_) => SQLITE_BUSY,
            Error::Misuse(_) | Error::VersionGone { .. } => SQLITE_ERROR,
        };
        Self::new(code, format!("mvbt: {e}"))
    }

    /// Inserts `what` after the "mvbt: " prefix.
    pub fn context(mut self, what: &str) -> Self {
        let rest = self.message.strip_prefix("mvbt: ").unwrap_or(&self.message);
        self.message = format!("mvbt: {what}: {rest}");
        self
    }
}

impl From<onesync_mvbt::Error> for VtabError {
    fn from(e: onesync_mvbt::Error) -> Self {
        Self::from_engine(e)
    }
}
