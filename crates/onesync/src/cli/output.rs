//! What the command prints on stdout, written so that a reader that stops early
//! (`onesync info x.db | head -1`) ends the program quietly instead of panicking as
//! `println!` would (Rust ignores SIGPIPE, so the write fails with EPIPE instead).

use std::io::{ErrorKind, Write};

use anyhow::{Context, Result};

/// The exit status of a program killed by SIGPIPE as the shell reports it (128 + 13): what
/// `cat` or `sqlite3` give in the same pipe.
const BROKEN_PIPE_STATUS: i32 = 141;

/// Prints `text` and a newline on stdout. If the reader has gone, ends the program now
/// (nothing after a print is work a caller waits for: every command prints after its files
/// are final).
pub fn line(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    match written {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(BROKEN_PIPE_STATUS),
        other => other.context("writing to stdout"),
    }
}

/// `line(&format!(...))`.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::line(&format!($($arg)*))
    };
}
pub(crate) use say;
