//! The crate's error: contents the format does not allow, a replica that does not
//! restore, a replica URL that cannot be used, storage and I/O failures (decoding itself
//! fails with `onesync_codec::DecodeError`).

use onesync_codec::DecodeError;

/// What goes wrong outside decoding: contents the format does not allow, a replica that
/// does not restore, a bad replica URL, storage and I/O.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Contents superfly/ltx's encoder would refuse.
    #[error("invalid LTX contents: {0}")]
    Invalid(String),
    /// A file of the replica does not decode.
    #[error("{path}: {source}")]
    Decode { path: String, source: DecodeError },
    /// The replica cannot give the requested database.
    #[error("cannot restore: {0}")]
    Restore(String),
    /// A replica URL or option this crate cannot use.
    #[error("replica URL: {0}")]
    Config(String),
    /// The object store failed or could not be reached (after the client's bounded retries).
    #[error("{context}: {message}")]
    Storage { context: String, message: String },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

/// Attaches what was being done to an I/O error.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
