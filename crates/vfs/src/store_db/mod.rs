//! The store backend: a main database file opened with `vfs=onesync` is a
//! logical file inside a onesync store (see README.md, "Store backend").
//!
//! * Path `P` is the store file; the database is its logical file `main`, or
//!   the one named by the URI parameter `db=` (`file:P?vfs=onesync&db=aux`).
//!   Which files are stores and which stay plain SQLite files is decided in
//!   `main_file.rs`.
//! * Every database of one store in this process shares one [`Store`] handle
//!   from a registry keyed by the file's identity (device and inode), so that
//!   two names of one file (hard links) share it too.
//! * SQLite's lock levels are kept per logical file in that registry. A
//!   reader (SHARED) reads one store snapshot; a writer (RESERVED and up)
//!   writes into one store transaction per *connection*, shared by all the
//!   databases of that connection in the same store, so that a transaction
//!   over `main` and an attached `aux` commits as one store commit.
//! * The commit is sequenced at `xSync` (one database), at
//!   `SQLITE_FCNTL_COMMIT_ATOMIC_WRITE`, or at `SQLITE_FCNTL_COMMIT_PHASETWO`
//!   (several databases, `synchronous=OFF`). At `synchronous=FULL` and `EXTRA`
//!   it is durable before SQLite returns from COMMIT: waited for at PHASETWO,
//!   or, when SQLite is known to unlock right after (locking_mode NORMAL) and
//!   someone may want the lock, after the lock is released, so the next writer
//!   runs during the flush. At `NORMAL` and `OFF` it is shown to readers once
//!   written and made durable later (the store's deferred flush).
//!
//! The files, each importing only those above it (`crates/lab/tests/layout.rs` checks):
//! `registry.rs` the per-process open stores, their sharing and the store factory's data;
//! `connections.rs` which handles belong to which SQLite connection, its locking mode and
//! synchronous level; `handle.rs` one handle's state (`StoreDb`: its state table, checked by
//! `assert_state`); `replication.rs` the shippers of replicated databases
//! (`onesync_replicate`) and synchronous replication's waits; `durability.rs` the durability hand-off (its table: when COMMIT returns
//! against the flush); `locking.rs` SQLite's lock levels over the store; `commit.rs` sequencing
//! and making a connection's store transaction durable; `relocate.rs` renumbering the pages
//! a concurrent transaction appended so that two that grew the file both commit;
//! `concurrent.rs` concurrent write transactions (`concurrent=1`) and their validation at
//! COMMIT; `stats.rs` `PRAGMA onesync_stats`; `pragmas.rs` the pragmas this VFS answers or
//! notes; `file.rs` the main database file's methods (`DbBackend`); `refusals.rs` why an
//! open was refused, told to the application; `main_file.rs` whether a main database is a
//! store or a plain file; `factory.rs` the `MainDbFactory`: main files and journals.

mod commit;
mod concurrent;
mod connections;
mod durability;
mod factory;
mod file;
mod handle;
mod locking;
mod main_file;
mod pragmas;
mod refusals;
mod registry;
mod relocate;
mod replication;
mod stats;

pub(crate) use locking::sleep_until_lock_released;
pub(crate) use main_file::refuse_main_db;
pub(crate) use refusals::{note_hook_registered, open_refusal};
#[cfg(feature = "test-hooks")]
pub use registry::ReplicaConfigHook;
pub use registry::{StoreFactory, StoreOpener, DEFAULT_LOGICAL_DB, STORE_PAGE_SIZE};
pub use stats::store_stats_json;
