//! `xFileControl`, decoded once: backends match on [`FileControl`] instead of reading
//! SQLite's raw arguments.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::marker::PhantomData;

use super::api::ApiTable;
use super::ffi::{
    SQLITE_FCNTL_BEGIN_ATOMIC_WRITE, SQLITE_FCNTL_COMMIT_ATOMIC_WRITE, SQLITE_FCNTL_COMMIT_PHASETWO,
    SQLITE_FCNTL_HAS_MOVED, SQLITE_FCNTL_LAST_ERRNO, SQLITE_FCNTL_LOCKSTATE, SQLITE_FCNTL_PDB,
    SQLITE_FCNTL_PRAGMA, SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE, SQLITE_FCNTL_SYNC, SQLITE_FCNTL_TEMPFILENAME,
};
use super::handles::Connection;

/// The file controls this crate's backends act on; everything else is [`FileControl::Other`].
#[derive(Debug)]
pub enum FileControl<'a> {
    /// `SQLITE_FCNTL_PRAGMA`: a `PRAGMA` offered to the file before SQLite runs it.
    Pragma(Pragma<'a>),
    /// `SQLITE_FCNTL_PDB`: the connection the file belongs to (`None`: SQLite passed none).
    Pdb(Option<Connection>),
    /// `SQLITE_FCNTL_SYNC` with a super-journal's name: this database's phase one of a
    /// commit over several databases.
    Sync { super_journal: &'a [u8] },
    /// `SQLITE_FCNTL_COMMIT_PHASETWO`: the transaction has committed in every database.
    CommitPhaseTwo,
    /// `SQLITE_FCNTL_BEGIN_ATOMIC_WRITE`.
    BeginAtomic,
    /// `SQLITE_FCNTL_COMMIT_ATOMIC_WRITE`.
    CommitAtomic,
    /// `SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE`.
    RollbackAtomic,
    /// `SQLITE_FCNTL_HAS_MOVED`: answer with [`FileControlCall::answer`] (1: moved).
    HasMoved,
    /// `SQLITE_FCNTL_LOCKSTATE`: answer with [`FileControlCall::answer`] (the lock level,
    /// 0 unlocked to 4 exclusive).
    LockState,
    /// `SQLITE_FCNTL_LAST_ERRNO`: answer with [`FileControlCall::answer`].
    LastErrno,
    /// `SQLITE_FCNTL_TEMPFILENAME`: answer with [`FileControlCall::answer_text`].
    TempFilename,
    /// Any other op (size hints, busy handler, mmap size, ...), or one of the above without
    /// its argument.
    Other(c_int),
}

/// A `SQLITE_FCNTL_PRAGMA` call: the pragma's name and value (lowercased), and where its
/// answer goes. Return `SQLITE_NOTFOUND` to let SQLite run the pragma itself, `SQLITE_OK`
/// after [`Pragma::reply`] with its result row, or `SQLITE_ERROR` after a reply with the
/// error message.
#[derive(Debug)]
pub struct Pragma<'a> {
    pub name: Option<String>,
    pub value: Option<String>,
    slot: *mut *mut c_char,
    /// SQLite's own copy of the value (null without one).
    value_text: *mut c_char,
    /// The slot is SQLite's only for the call.
    _call: PhantomData<&'a mut ()>,
}

impl Pragma<'_> {
    /// Answers with `text` (the pragma's result row, or with `SQLITE_ERROR` its message).
    pub fn reply(&self, api: &ApiTable, text: &str) {
        // SAFETY: slot [0] of SQLite's `char*[3]` is its out-pointer for the answer, live for
        // this call; SQLite frees what is put there with sqlite3_free, so it comes from
        // sqlite3_malloc (the API table's routine).
        unsafe { *self.slot = api.sqlite_string(text) };
    }

    /// For `PRAGMA journal_mode=VALUE`, the journal mode SQLite would switch to: the first of
    /// its modes that VALUE is a prefix of, as SQLite matches (`w` is `wal`; `wal2`, matching
    /// none, is a query). `None` for a query or any other pragma.
    pub fn journal_mode_change(&self) -> Option<&'static str> {
        const IN_SQLITES_ORDER: [&str; 6] = ["delete", "persist", "off", "truncate", "memory", "wal"];
        let value = self
            .value
            .as_deref()
            .filter(|_| self.name.as_deref() == Some("journal_mode"))?;
        IN_SQLITES_ORDER.into_iter().find(|mode| mode.starts_with(value))
    }

    /// Turns the pragma's value, for SQLite, into a name no journal mode has, so that SQLite,
    /// once this call returns `SQLITE_NOTFOUND`, runs the pragma as a query and answers the
    /// journal mode in effect: stock SQLite's own answer to a mode change it cannot make.
    /// SQLite reads the value from the array it passed (`aFcntl[2]` is the parser's
    /// `zRight`, in every SQLite since FCNTL_PRAGMA exists); the semantics tests check it.
    pub fn make_sqlite_run_it_as_a_query(&self) {
        if self.value_text.is_null() {
            return;
        }
        // SAFETY: `value_text` is SQLite's NUL-terminated copy of the pragma's value
        // (`sqlite3NameFromToken`, owned by the parser and writable), live for this call;
        // writing '?' and then NUL within its length leaves a NUL-terminated string "?".
        unsafe {
            if *self.value_text != 0 {
                if *self.value_text.add(1) != 0 {
                    *self.value_text.add(1) = 0;
                }
                *self.value_text = b'?' as c_char;
            }
        }
    }
}

/// One `xFileControl` call: the decoded control and SQLite's raw arguments, kept so that a
/// backend wrapping another file can pass the call on unchanged.
#[derive(Debug)]
pub struct FileControlCall<'a> {
    pub control: FileControl<'a>,
    op: c_int,
    arg: *mut c_void,
}

impl<'a> FileControlCall<'a> {
    /// Decodes SQLite's arguments.
    ///
    /// # Safety
    /// `op` and `arg` are what SQLite passed to `xFileControl`: `arg` valid as that op
    /// documents, for the duration of the call (`'a`).
    pub(crate) unsafe fn decode(op: c_int, arg: *mut c_void) -> Self {
        let control = match op {
            SQLITE_FCNTL_PDB => {
                // SAFETY: for SQLITE_FCNTL_PDB, `arg` is null or a `sqlite3**`.
                let db = unsafe { arg.cast::<*mut c_void>().as_ref() };
                FileControl::Pdb(db.map(|&db| Connection::new(db)))
            }
            SQLITE_FCNTL_PRAGMA if !arg.is_null() => {
                // SAFETY: for SQLITE_FCNTL_PRAGMA, `arg` is SQLite's `char*[3]`.
                FileControl::Pragma(unsafe { pragma(arg.cast()) })
            }
            SQLITE_FCNTL_SYNC if !arg.is_null() => {
                // SAFETY: for SQLITE_FCNTL_SYNC, a non-null `arg` is the super-journal's
                // NUL-terminated name, valid for the call.
                let name = unsafe { CStr::from_ptr(arg.cast::<c_char>()) };
                FileControl::Sync {
                    super_journal: name.to_bytes(),
                }
            }
            SQLITE_FCNTL_COMMIT_PHASETWO => FileControl::CommitPhaseTwo,
            SQLITE_FCNTL_BEGIN_ATOMIC_WRITE => FileControl::BeginAtomic,
            SQLITE_FCNTL_COMMIT_ATOMIC_WRITE => FileControl::CommitAtomic,
            SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE => FileControl::RollbackAtomic,
            SQLITE_FCNTL_HAS_MOVED if !arg.is_null() => FileControl::HasMoved,
            SQLITE_FCNTL_LOCKSTATE if !arg.is_null() => FileControl::LockState,
            SQLITE_FCNTL_TEMPFILENAME if !arg.is_null() => FileControl::TempFilename,
            SQLITE_FCNTL_LAST_ERRNO if !arg.is_null() => FileControl::LastErrno,
            _ => FileControl::Other(op),
        };
        Self { control, op, arg }
    }

    /// SQLite's op and argument, to forward to another VFS's file.
    /// Answers a control whose answer is an `int` (`HasMoved`, `LockState`, `LastErrno`);
    /// does nothing for another.
    pub fn answer(&self, value: c_int) {
        if matches!(
            self.control,
            FileControl::HasMoved | FileControl::LockState | FileControl::LastErrno
        ) {
            // SAFETY: for these controls SQLite passes a non-null `int*` (checked in
            // `decode`) that lives for the call.
            unsafe { *self.arg.cast::<c_int>() = value };
        }
    }

    /// Answers a control whose answer is a string SQLite frees (`TempFilename`), in
    /// SQLite's memory; does nothing for another.
    pub fn answer_text(&self, api: &ApiTable, text: &str) {
        if matches!(self.control, FileControl::TempFilename) {
            // SAFETY: for this control SQLite passes a non-null `char**` (checked in
            // `decode`) that lives for the call, and frees the string with sqlite3_free.
            unsafe { *self.arg.cast::<*mut c_char>() = api.sqlite_string(text) };
        }
    }

    pub(crate) fn raw(&self) -> (c_int, *mut c_void) {
        (self.op, self.arg)
    }
}

/// # Safety
/// `args` is SQLite's `char*[3]` for SQLITE_FCNTL_PRAGMA: [0] the result slot, [1] the
/// pragma's name, [2] its value or null.
unsafe fn pragma<'a>(args: *mut *mut c_char) -> Pragma<'a> {
    let text = |p: *mut c_char| {
        (!p.is_null()).then(|| {
            // SAFETY: per the contract, a NUL-terminated string (null was ruled out).
            let text = unsafe { CStr::from_ptr(p) };
            text.to_string_lossy().to_ascii_lowercase()
        })
    };
    // SAFETY: per the contract, the array has three entries.
    let (name, value) = unsafe { (*args.add(1), *args.add(2)) };
    Pragma {
        name: text(name),
        value: text(value),
        slot: args,
        value_text: value,
        _call: PhantomData,
    }
}
