//! Everything that faces C: the one place in this crate with `unsafe`.
//!
//! SQLite calls in through the `sqlite3_module` of [`vtab`] and the entry points of
//! [`entry`]; this crate calls SQLite only through the routines of an
//! [`ApiTable`](onesync_vfs::ApiTable) (the VFS crate's, filled from the loading SQLite or
//! the host's). Each shim runs its safe code under [`guard`] (no panic unwinds into C). Every
//! `unsafe` block here says why it is sound in a `// SAFETY:` line.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod entry;
pub mod vtab;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `on_panic` (an error code SQLite understands, or a
/// neutral value for callbacks without one).
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    // AssertUnwindSafe: after a caught panic the shared state that could be half-updated
    // (an open tree) sits behind a `Mutex`, whose poisoning the table reports as an error.
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}
