//! Why a database could not be opened, told to the application in `sqlite3_errmsg`.
//!
//! `xOpen` cannot carry a message: SQLite answers a failed one with "unable to open
//! database file" whatever the reason. So a main database file this VFS refuses is opened
//! anyway, as a handle whose every use fails with the refusal's code (reads before that
//! give zeros, as for a missing file), and the refusal is noted against its connection
//! (SQLITE_FCNTL_PDB). The extension's per-connection entry point
//! (`sqlite3_auto_extension`), which SQLite runs at the end of `sqlite3_open_v2`, then
//! fails the open with that code and the message: "automatic extension loading failed:
//! onesync: ...". Where no such entry point runs (an ATTACH, a host that registered only
//! the VFS), the first use fails with the same code, and `sqlite3_log` has the message. A
//! process where no per-connection entry point was ever registered (a host that registered
//! only the VFS) gets the refusals told at open as failed `xOpen`s instead, as before.
//!
//! When the refusal is told, as stock SQLite would give its code:
//! - [`When::AtOpen`]: what stock SQLite also refuses at open (a missing directory or a
//!   directory: `SQLITE_CANTOPEN`), and what has no stock counterpart (a plain SQLite
//!   database or a damaged store named with `vfs=onesync`).
//! - [`When::AtFirstUse`]: a file that is no database at all, which stock SQLite opens
//!   and refuses at the first query with `SQLITE_NOTADB`.
//!
//! The same entry point also names a store that was opened without this VFS (its
//! recognisable magic): stock SQLite would say only "file is not a database".

use std::ffi::c_int;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use onesync_store::layout::MAGIC;

use super::connections::has_main_database;
use super::registry::lock;
use crate::backend::Connection;
use crate::ffi::SQLITE_NOTADB;
use crate::sys::api::ApiTable;

/// When the application is told of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    /// `sqlite3_open_v2` fails (through the per-connection entry point).
    AtOpen,
    /// The first statement that reads the database fails, as stock SQLite's would.
    AtFirstUse,
}

/// Why a main database file cannot be used.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub(crate) code: c_int,
    pub(crate) message: String,
    pub(crate) when: When,
}

/// Whether a per-connection entry point that reports refusals was registered in this
/// process.
static HOOKED: AtomicBool = AtomicBool::new(false);

/// A per-connection entry point that calls [`open_refusal`] is registered.
pub(crate) fn note_hook_registered() {
    HOOKED.store(true, Ordering::Relaxed);
}

/// Whether a refusal made at `xOpen` can be told by the per-connection entry point (else
/// `xOpen` fails with its code).
pub(crate) fn told_at_open(refusal: &Refusal) -> bool {
    refusal.when == When::AtFirstUse || HOOKED.load(Ordering::Relaxed)
}

struct Noted {
    conn: usize,
    handle: u64,
    code: c_int,
    message: String,
}

/// Refusals to tell at open, by connection, until the entry point takes them or the
/// refused handle closes.
static NOTED: Mutex<Vec<Noted>> = Mutex::new(Vec::new());

/// The refused main database `handle` belongs to connection `conn`.
pub(crate) fn note(conn: usize, handle: u64, refusal: &Refusal) {
    if refusal.when == When::AtOpen {
        crate::rearm_refusal_hook();
        lock(&NOTED).push(Noted {
            conn,
            handle,
            code: refusal.code,
            message: refusal.message.clone(),
        });
    }
}

/// The refused handle `handle` closed.
pub(crate) fn forget(handle: u64) {
    lock(&NOTED).retain(|n| n.handle != handle);
}

/// Run as SQLite opens connection `db` (its per-connection entry point): the code and
/// message to fail the open with, if its main database was refused, or is a store opened
/// through another VFS.
pub(crate) fn open_refusal(api: &ApiTable, db: Connection) -> Option<(c_int, String)> {
    {
        let mut noted = lock(&NOTED);
        if let Some(i) = noted.iter().position(|n| n.conn == db.id()) {
            let n = noted.swap_remove(i);
            return Some((n.code, n.message));
        }
    }
    // Ours if this VFS has a handle as its main database (a store or a plain file it
    // passes through).
    if has_main_database(db.id()) {
        return None;
    }
    let path = api.main_db_filename(db)?;
    // A connection in shared-cache mode shares another connection's file, which may be a
    // store of this VFS (SQLite opens nothing, so this VFS never sees it): asked which VFS
    // its file is open with, SQLite answers this one.
    if api.main_db_vfs_is(db, c"onesync") == Some(true) {
        return None;
    }
    is_store_file(&path).then(|| (SQLITE_NOTADB, opened_without_vfs_message(&path)))
}

/// Whether `path` begins with the store magic.
fn is_store_file(path: &Path) -> bool {
    let mut head = [0u8; MAGIC.len()];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == MAGIC)
}

fn opened_without_vfs_message(path: &Path) -> String {
    format!(
        "onesync: {} is a onesync store, not a plain SQLite file: open it with the onesync VFS \
         (the URI file:{}?vfs=onesync, or vfs=\"onesync\" in the open call), or convert it: \
         onesync export {} PLAIN.db",
        path.display(),
        crate::names::uri_path(path),
        path.display()
    )
}
