//! The crate's error: contents the format does not allow, a replica that does not
//! restore, I/O (decoding itself fails with `onesync_codec::DecodeError`).

use onesync_codec::DecodeError;

/// What goes wrong outside decoding: contents the format does not allow, a replica that
/// does not restore, I/O.
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
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

/// Attaches what was being done to an I/O error.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
