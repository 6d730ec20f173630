//! What registering a VFS or an entry point returns: [`Registered`] or a
//! [`RegisterError`]. Below `api.rs` and `vfs.rs`, which both return them.

use std::ffi::c_int;
use std::fmt;

/// Outcome of a successful registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    /// A new VFS was registered.
    New,
    /// That SQLite already had a VFS of this name; nothing was changed.
    AlreadyRegistered,
}

/// Why registration failed: a SQLite result code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterError {
    pub code: c_int,
    pub message: String,
}

impl RegisterError {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "onesync vfs: {} (SQLite code {})", self.message, self.code)
    }
}

impl std::error::Error for RegisterError {}
