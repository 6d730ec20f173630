//! No panic may unwind into SQLite: every `extern "C"` function of this crate
//! runs its body through [`guard`].

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `on_panic` (an error code SQLite
/// understands, or a null/neutral value for callbacks without one).
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    // AssertUnwindSafe: after a caught panic the only shared state that could
    // be half-updated sits behind `Mutex`es, whose poisoning every user maps
    // to an I/O error, so no broken invariant is observed silently.
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}
