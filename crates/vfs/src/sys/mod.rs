//! Everything that faces C: the one place in this crate with `unsafe`.
//!
//! SQLite calls in through the tables built here (`sqlite3_vfs`, `sqlite3_io_methods`, the
//! extension entry points), and this crate calls SQLite and the
//! underlying VFS only through the pointers held here. Each shim turns raw arguments into
//! safe values, runs the safe code behind it under [`guard::guard`] (no panic unwinds into
//! C), and turns the answer back into a result code. The rest of the crate implements safe
//! trait [`traits::DbBackend`], one per open file. Every `unsafe` block here says why it is sound in a `// SAFETY:` line.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod entry;
pub mod ffi;
pub mod file;
pub mod file_control;
pub mod guard;
pub mod handles;
pub mod open_request;
pub mod os;
pub mod passthrough;
pub mod refusal_hook;
pub mod registration;
pub mod shared_map;
pub mod traits;
pub mod vfs;
