//! The `mvbt` virtual table module: an SQLite table over an LS-MVBT tree
//! (`onesync-mvbt`), with as-of reads of committed versions.
//!
//! ```sql
//! CREATE VIRTUAL TABLE kv USING mvbt(file='kv.mvbt', keep_versions=100);
//! -- declared as: CREATE TABLE x(key INTEGER PRIMARY KEY, value BLOB, as_of HIDDEN)
//! SELECT value FROM kv WHERE key = 7 AND as_of = 3;
//! ```
//!
//! See the crate README ("The mvbt virtual table") for options, transactions
//! and limits. Everything here is reached from SQLite through [`MODULE`]'s
//! function pointers; SQLite is called back only through the
//! [`VtabRoutines`] of the [`ApiTable`] the module was registered with.

mod args;
mod error;
mod registry;
mod value;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use onesync_mvbt::{Key, Tree, Version};

pub use args::DEFAULT_KEEP_VERSIONS;
pub use registry::{mvbt_counters, mvbt_latest_version, mvbt_scan_stats, MvbtScanStats};

use crate::ffi::{
    sqlite3_context, sqlite3_index_constraint, sqlite3_index_constraint_usage, sqlite3_index_info,
    sqlite3_index_orderby, sqlite3_int64, sqlite3_module, sqlite3_value, sqlite3_vtab, sqlite3_vtab_cursor,
    SQLITE_BLOB, SQLITE_CONSTRAINT, SQLITE_ERROR, SQLITE_FLOAT, SQLITE_FULL, SQLITE_INDEX_CONSTRAINT_EQ,
    SQLITE_INDEX_CONSTRAINT_GE, SQLITE_INDEX_CONSTRAINT_GT, SQLITE_INDEX_CONSTRAINT_LE,
    SQLITE_INDEX_CONSTRAINT_LT, SQLITE_INDEX_SCAN_UNIQUE, SQLITE_INTEGER, SQLITE_INTERNAL,
    SQLITE_IOERR_DELETE, SQLITE_NOMEM, SQLITE_OK, SQLITE_REPLACE, SQLITE_TEXT, SQLITE_TRANSIENT,
    SQLITE_VTAB_CONSTRAINT_SUPPORT,
};
use crate::sys::api::{ApiTable, VtabConfigRoutine, VtabRoutines};
use crate::sys::guard::guard;
use crate::RegisterError;
use error::VtabError;
use registry::{SharedTree, TreeState, Writer};
use value::{decode, encode, key_of, key_range, version_of, KeyOp, KeyRange, SqlValue};

/// The name to use in `CREATE VIRTUAL TABLE ... USING mvbt(...)`.
pub const MVBT_MODULE_NAME: &str = "mvbt";

/// The schema every `mvbt` table declares. `key` is an ordinary column to
/// SQLite (a virtual table's INTEGER PRIMARY KEY is not a rowid alias), so the
/// rowid is reported equal to it.
const SCHEMA: &CStr = c"CREATE TABLE x(key INTEGER PRIMARY KEY, value BLOB, as_of HIDDEN)";
const COL_ROWID: c_int = -1;
const COL_KEY: c_int = 0;
const COL_VALUE: c_int = 1;
const COL_AS_OF: c_int = 2;

/// Rows a cursor fetches from the tree at a time.
const PAGE_ROWS: usize = 256;

/// `idxNum` bits: which constraints the plan hands to `xFilter` (`idxStr`
/// lists them, one letter per argument: `e` key =, `g` >, `G` >=, `l` <,
/// `L` <=, `v` as_of =).
pub const IDX_KEY_EQ: c_int = 1;
/// See [`IDX_KEY_EQ`]: a lower bound on the key.
pub const IDX_KEY_LOW: c_int = 2;
/// See [`IDX_KEY_EQ`]: an upper bound on the key.
pub const IDX_KEY_HIGH: c_int = 4;
/// See [`IDX_KEY_EQ`]: `as_of = V`.
pub const IDX_AS_OF: c_int = 8;

static MODULE: sqlite3_module = sqlite3_module {
    iVersion: 2,
    xCreate: Some(x_create),
    xConnect: Some(x_connect),
    xBestIndex: Some(x_best_index),
    xDisconnect: Some(x_disconnect),
    xDestroy: Some(x_destroy),
    xOpen: Some(x_open),
    xClose: Some(x_close),
    xFilter: Some(x_filter),
    xNext: Some(x_next),
    xEof: Some(x_eof),
    xColumn: Some(x_column),
    xRowid: Some(x_rowid),
    xUpdate: Some(x_update),
    xBegin: Some(x_begin),
    xSync: Some(x_sync),
    xCommit: Some(x_commit),
    xRollback: Some(x_rollback),
    xFindFunction: None,
    xRename: Some(x_rename),
    xSavepoint: Some(x_savepoint),
    xRelease: Some(x_release),
    xRollbackTo: Some(x_rollback_to),
    xShadowName: None,
};

/// Registers the `mvbt` module on connection `db` of the SQLite behind `api`.
///
/// # Safety
/// `db` must be an open `sqlite3*` of the SQLite whose routines `api` holds
/// (for rusqlite: `conn.handle().cast()` with `api_table_from_sys!(rusqlite::ffi)`),
/// used only as SQLite allows (e.g. not concurrently from another thread in
/// a non-serialized build).
pub unsafe fn register_mvbt_module(db: *mut c_void, api: &ApiTable) -> Result<(), RegisterError> {
    let Some(vt) = api.vtab() else {
        return Err(RegisterError {
            code: SQLITE_ERROR,
            message: "the SQLite routine table lacks the virtual table routines the mvbt module needs".into(),
        });
    };
    let aux = Box::into_raw(Box::new(*api));
    // SAFETY: `db` is a live connection of this SQLite (the contract); the
    // name is NUL-terminated; MODULE is 'static; SQLite owns `aux` from here
    // and frees it through `drop_module_aux` (also when registration fails).
    let rc =
        unsafe { (vt.create_module_v2)(db, c"mvbt".as_ptr(), &MODULE, aux.cast(), Some(drop_module_aux)) };
    if rc == SQLITE_OK {
        Ok(())
    } else {
        Err(RegisterError {
            code: rc,
            message: "sqlite3_create_module_v2(\"mvbt\") failed".into(),
        })
    }
}

unsafe extern "C" fn drop_module_aux(aux: *mut c_void) {
    guard((), || {
        // SAFETY: `aux` is the Box<ApiTable> leaked by `register_mvbt_module`,
        // handed back once by SQLite when the module goes away.
        drop(unsafe { Box::from_raw(aux.cast::<ApiTable>()) });
    });
}

/// Ids of table instances (one per connection and table), the owner tag of
/// a tree's write transaction.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// One connection's instance of one `mvbt` table. `base` first: SQLite sees
/// a `sqlite3_vtab*`.
#[repr(C)]
struct Table {
    base: sqlite3_vtab,
    api: ApiTable,
    vt: VtabRoutines,
    db: *mut c_void,
    id: u64,
    name: String,
    shared: Arc<SharedTree>,
    /// The file name is derived from the table name (no `file=`).
    file_named_after_table: bool,
}

/// A cursor; `base` first: SQLite sees a `sqlite3_vtab_cursor*`.
#[repr(C)]
struct Cursor {
    base: sqlite3_vtab_cursor,
    scan: Scan,
}

/// What a cursor is reading: a buffered page of rows and where the next page starts.
#[derive(Default)]
struct Scan {
    rows: Vec<(Key, Vec<u8>)>,
    pos: usize,
    /// Lower bound of the next page; None once the range is exhausted.
    next_low: Option<Bound<Key>>,
    high: Option<Bound<Key>>,
    /// The version read (None: the open transaction, own writes included).
    at: Option<Version>,
    /// The `as_of` column's value.
    shown_version: Version,
}

// ---------------------------------------------------------------- helpers

/// Replaces the table's error message (SQLite copies and frees it after the call).
///
/// # Safety
/// `p` is a live `Table` of this module and no reference to it is held.
pub(crate) unsafe fn set_error(p: *mut sqlite3_vtab, message: &str) {
    let table = p.cast::<Table>();
    // SAFETY: per the contract; only raw-pointer field accesses.
    unsafe {
        let old = (*table).base.zErrMsg;
        if !old.is_null() {
            ((*table).vt.free)(old.cast());
        }
        (*table).base.zErrMsg = (*table).api.sqlite_string(message);
    }
}

/// Runs `f` on the table behind `p` (guarded), turning an error into its
/// code and `zErrMsg`.
///
/// # Safety
/// `p` is a live `Table` of this module (SQLite passes back what `xCreate`/`xConnect` made).
pub(crate) unsafe fn with_table(
    p: *mut sqlite3_vtab,
    f: impl FnOnce(&Table) -> Result<c_int, VtabError>,
) -> c_int {
    guard(SQLITE_INTERNAL, || {
        let result = {
            // SAFETY: per the contract; `base` is the first field of the repr(C) Table.
            let table = unsafe { &*p.cast::<Table>() };
            f(table)
        };
        match result {
            Ok(rc) => rc,
            Err(e) => {
                // SAFETY: per the contract; the shared borrow above has ended.
                unsafe { set_error(p, &e.message) };
                e.code
            }
        }
    })
}

/// Like [`with_table`] for a cursor (errors go to its table's `zErrMsg`).
///
/// # Safety
/// `c` is a live `Cursor` of this module.
pub(crate) unsafe fn with_cursor(
    c: *mut sqlite3_vtab_cursor,
    f: impl FnOnce(&mut Scan, &Table) -> Result<c_int, VtabError>,
) -> c_int {
    guard(SQLITE_INTERNAL, || {
        // SAFETY: per the contract; `pVtab` is the cursor's table, set by SQLite.
        let p = unsafe { (*c).pVtab };
        let result = {
            // SAFETY: per the contract: distinct allocations, no other borrows.
            let (cursor, table) = unsafe { (&mut *c.cast::<Cursor>(), &*p.cast::<Table>()) };
            f(&mut cursor.scan, table)
        };
        match result {
            Ok(rc) => rc,
            Err(e) => {
                // SAFETY: the table is live; the borrows above have ended.
                unsafe { set_error(p, &e.message) };
                e.code
            }
        }
    })
}

/// Reads an `sqlite3_value` argument.
///
/// # Safety
/// `v` is a protected or unprotected value SQLite passed to the current call;
/// the result borrows its bytes and must not outlive that call.
pub(crate) unsafe fn read_value<'a>(vt: &VtabRoutines, v: *mut sqlite3_value) -> SqlValue<'a> {
    // SAFETY: (all calls) `v` is a live value of this SQLite (the contract).
    // For text and blobs the pointer is taken before the length, as SQLite
    // documents, and is valid for that many bytes until the value changes.
    unsafe {
        match (vt.value_type)(v) {
            SQLITE_INTEGER => SqlValue::Int((vt.value_int64)(v)),
            SQLITE_FLOAT => SqlValue::Real((vt.value_double)(v)),
            SQLITE_TEXT => {
                let p = (vt.value_text)(v);
                let n = usize::try_from((vt.value_bytes)(v)).unwrap_or(0);
                SqlValue::Text(if p.is_null() || n == 0 {
                    &[]
                } else {
                    std::slice::from_raw_parts(p, n)
                })
            }
            SQLITE_BLOB => {
                let p = (vt.value_blob)(v).cast::<u8>();
                let n = usize::try_from((vt.value_bytes)(v)).unwrap_or(0);
                SqlValue::Blob(if p.is_null() || n == 0 {
                    &[]
                } else {
                    std::slice::from_raw_parts(p, n)
                })
            }
            _ => SqlValue::Null,
        }
    }
}

/// Sets a function result.
///
/// # Safety
/// `ctx` is the context SQLite passed to the current `xColumn`.
pub(crate) unsafe fn set_result(vt: &VtabRoutines, ctx: *mut sqlite3_context, v: &SqlValue<'_>) -> c_int {
    let len = |b: &[u8]| c_int::try_from(b.len());
    // SAFETY: (all calls) `ctx` is live (the contract); byte pointers are valid
    // for `len` bytes and copied (SQLITE_TRANSIENT) before the call returns;
    // an empty slice's pointer is non-null, so empty text/blob stay non-NULL.
    unsafe {
        match v {
            SqlValue::Null => (vt.result_null)(ctx),
            SqlValue::Int(i) => (vt.result_int64)(ctx, *i),
            SqlValue::Real(r) => (vt.result_double)(ctx, *r),
            SqlValue::Text(t) => match len(t) {
                Ok(n) => (vt.result_text)(ctx, t.as_ptr().cast(), n, SQLITE_TRANSIENT),
                Err(_) => return crate::ffi::SQLITE_FULL,
            },
            SqlValue::Blob(b) => match len(b) {
                Ok(n) => (vt.result_blob)(ctx, b.as_ptr().cast(), n, SQLITE_TRANSIENT),
                Err(_) => return crate::ffi::SQLITE_FULL,
            },
        }
    }
    SQLITE_OK
}

// ---------------------------------------------------------------- create / connect

unsafe extern "C" fn x_create(
    db: *mut c_void,
    aux: *mut c_void,
    argc: c_int,
    argv: *const *const c_char,
    vtab: *mut *mut sqlite3_vtab,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: SQLite's xCreate arguments, forwarded.
    guard(SQLITE_INTERNAL, || unsafe {
        construct(db, aux, argc, argv, vtab, err, true)
    })
}

unsafe extern "C" fn x_connect(
    db: *mut c_void,
    aux: *mut c_void,
    argc: c_int,
    argv: *const *const c_char,
    vtab: *mut *mut sqlite3_vtab,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: SQLite's xConnect arguments, forwarded.
    guard(SQLITE_INTERNAL, || unsafe {
        construct(db, aux, argc, argv, vtab, err, false)
    })
}

/// `xCreate` (`create`: make the file if missing) and `xConnect`.
///
/// # Safety
/// The arguments of an `xCreate`/`xConnect` call of this module.
pub(crate) unsafe fn construct(
    db: *mut c_void,
    aux: *mut c_void,
    argc: c_int,
    argv: *const *const c_char,
    out: *mut *mut sqlite3_vtab,
    err: *mut *mut c_char,
    create: bool,
) -> c_int {
    // SAFETY: `aux` is the ApiTable given at registration, alive while the module is.
    let api = unsafe { *aux.cast::<ApiTable>() };
    let args: Vec<String> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            // SAFETY: SQLite passes `argc` NUL-terminated strings.
            unsafe { CStr::from_ptr(*argv.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    match build_table(db, &api, &args, create) {
        Ok(table) => {
            // SAFETY: `out` is SQLite's out-pointer for the new table.
            unsafe { *out = Box::into_raw(table).cast() };
            SQLITE_OK
        }
        Err(e) => {
            // SAFETY: `err` is SQLite's out-pointer for a sqlite3_malloc'ed message.
            if let Some(slot) = unsafe { err.as_mut() } {
                *slot = api.sqlite_string(&e.message);
            }
            e.code
        }
    }
}

fn build_table(
    db: *mut c_void,
    api: &ApiTable,
    args: &[String],
    create: bool,
) -> Result<Box<Table>, VtabError> {
    let vt = *api
        .vtab()
        .ok_or_else(|| VtabError::error("mvbt: virtual table routines missing"))?;
    let [_module, schema, name, options @ ..] = args else {
        return Err(VtabError::error("mvbt: SQLite passed too few arguments"));
    };
    let parsed = args::parse(options).map_err(VtabError::error)?;
    let db_file = vt.db_filename.and_then(|db_filename| {
        let schema = CString::new(schema.as_str()).ok()?;
        // SAFETY: `db` is the connection creating the table; the schema name is
        // NUL-terminated; the result is null or a string owned by SQLite.
        let p = unsafe { db_filename(db, schema.as_ptr()) };
        // SAFETY: see above.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    });
    let path = args::table_path(parsed.file.as_deref(), db_file.as_deref(), schema, name)
        .map_err(VtabError::error)?;
    let shared = registry::acquire(&path, &parsed.config, create)?;
    // SAFETY: called from within xCreate/xConnect of `db`, as SQLite requires.
    let rc = unsafe { (vt.declare_vtab)(db, SCHEMA.as_ptr()) };
    if rc != SQLITE_OK {
        registry::release(shared);
        return Err(VtabError::new(rc, "mvbt: sqlite3_declare_vtab failed"));
    }
    // Our xUpdate reports constraint violations before changing anything, so
    // SQLite may implement OR IGNORE / OR FAIL / OR ROLLBACK around it.
    match vt.vtab_config {
        // SAFETY: within xCreate/xConnect of `db`; this option takes one int.
        Some(VtabConfigRoutine::Variadic(f)) => unsafe { f(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1 as c_int) },
        // SAFETY: as above.
        Some(VtabConfigRoutine::OneInt(f)) => unsafe { f(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1) },
        None => SQLITE_OK,
    };
    Ok(Box::new(Table {
        base: sqlite3_vtab {
            pModule: std::ptr::null(),
            nRef: 0,
            zErrMsg: std::ptr::null_mut(),
        },
        api: *api,
        vt,
        db,
        id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
        name: name.clone(),
        shared,
        file_named_after_table: parsed.file.is_none(),
    }))
}

/// Frees a table: rolls back its open transaction (SQLite does that before
/// closing a connection anyway) and drops its zErrMsg.
///
/// # Safety
/// `p` is a live `Table` of this module, not used again.
pub(crate) unsafe fn take_table(p: *mut sqlite3_vtab) -> Box<Table> {
    // SAFETY: per the contract; the Box was leaked by `construct`.
    let table = unsafe { Box::from_raw(p.cast::<Table>()) };
    if !table.base.zErrMsg.is_null() {
        // SAFETY: the message came from sqlite3_malloc (api.sqlite_string).
        unsafe { (table.vt.free)(table.base.zErrMsg.cast()) };
    }
    if let Ok(mut st) = table.shared.lock() {
        if st.writer.as_ref().is_some_and(|w| w.owner == table.id) {
            if st.tree.in_transaction() {
                let _ = st.tree.rollback();
            }
            st.writer = None;
        }
    }
    table
}

unsafe extern "C" fn x_disconnect(p: *mut sqlite3_vtab) -> c_int {
    guard(SQLITE_INTERNAL, || {
        // SAFETY: SQLite hands back the table once, to be freed.
        let table = unsafe { take_table(p) };
        registry::release(table.shared);
        SQLITE_OK
    })
}

unsafe extern "C" fn x_destroy(p: *mut sqlite3_vtab) -> c_int {
    // Deleting first (an open file can be unlinked): if that fails, the table
    // stays and DROP TABLE reports why.
    // SAFETY: `p` is this module's table.
    let rc = unsafe {
        with_table(p, |t| match std::fs::remove_file(t.shared.file()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(VtabError::new(
                SQLITE_IOERR_DELETE,
                format!("mvbt: cannot delete {}: {e}", t.shared.file().display()),
            )),
            _ => Ok(SQLITE_OK),
        })
    };
    if rc != SQLITE_OK {
        return rc;
    }
    guard(SQLITE_INTERNAL, || {
        // SAFETY: SQLite hands back the table once, to be freed.
        let table = unsafe { take_table(p) };
        registry::forget(table.shared);
        SQLITE_OK
    })
}

unsafe extern "C" fn x_rename(p: *mut sqlite3_vtab, _new_name: *const c_char) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe {
        with_table(p, |t| {
            if t.file_named_after_table {
                Err(VtabError::error(format!(
                    "mvbt: cannot rename {}: its file {} is named after the table; \
                     create the table with file='...' to be able to rename it",
                    t.name,
                    t.shared.path.display()
                )))
            } else {
                Ok(SQLITE_OK)
            }
        })
    }
}

// ---------------------------------------------------------------- planning

/// One usable constraint the plan hands to xFilter.
fn plan_letter(c: &sqlite3_index_constraint) -> Option<u8> {
    let on_key = c.iColumn == COL_KEY || c.iColumn == COL_ROWID;
    match (on_key, c.iColumn == COL_AS_OF, c.op) {
        (true, _, SQLITE_INDEX_CONSTRAINT_EQ) => Some(b'e'),
        (true, _, SQLITE_INDEX_CONSTRAINT_GT) => Some(b'g'),
        (true, _, SQLITE_INDEX_CONSTRAINT_GE) => Some(b'G'),
        (true, _, SQLITE_INDEX_CONSTRAINT_LT) => Some(b'l'),
        (true, _, SQLITE_INDEX_CONSTRAINT_LE) => Some(b'L'),
        (_, true, SQLITE_INDEX_CONSTRAINT_EQ) => Some(b'v'),
        _ => None,
    }
}

unsafe extern "C" fn x_best_index(p: *mut sqlite3_vtab, info: *mut sqlite3_index_info) -> c_int {
    // SAFETY: `p` is this module's table; `info` is SQLite's planning record,
    // whose arrays hold nConstraint / nOrderBy entries.
    unsafe {
        with_table(p, |t| {
            let info = &mut *info;
            let n = usize::try_from(info.nConstraint).unwrap_or(0);
            let constraints: &[sqlite3_index_constraint] = if n == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(info.aConstraint, n)
            };
            let usage: &mut [sqlite3_index_constraint_usage] = if n == 0 {
                &mut []
            } else {
                std::slice::from_raw_parts_mut(info.aConstraintUsage, n)
            };
            let m = usize::try_from(info.nOrderBy).unwrap_or(0);
            let order_by: &[sqlite3_index_orderby] = if m == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(info.aOrderBy, m)
            };
            best_index(t, info, constraints, usage, order_by)
        })
    }
}

fn best_index(
    t: &Table,
    info: &mut sqlite3_index_info,
    constraints: &[sqlite3_index_constraint],
    usage: &mut [sqlite3_index_constraint_usage],
    order_by: &[sqlite3_index_orderby],
) -> Result<c_int, VtabError> {
    let mut letters = Vec::new();
    let mut idx_num = 0;
    let mut as_of_unusable = false;
    for (c, u) in constraints.iter().zip(usage.iter_mut()) {
        let Some(letter) = plan_letter(c) else { continue };
        if c.usable == 0 {
            as_of_unusable |= letter == b'v';
            continue;
        }
        // A second `as_of = ` is left for SQLite to check against the column.
        if letter == b'v' && idx_num & IDX_AS_OF != 0 {
            continue;
        }
        letters.push(letter);
        u.argvIndex = c_int::try_from(letters.len()).unwrap_or(c_int::MAX);
        u.omit = 1;
        idx_num |= match letter {
            b'e' => IDX_KEY_EQ,
            b'g' | b'G' => IDX_KEY_LOW,
            b'l' | b'L' => IDX_KEY_HIGH,
            _ => IDX_AS_OF,
        };
    }
    // Reading the latest version and filtering on the as_of column would be
    // wrong for any other version: such a plan is not an option.
    if as_of_unusable && idx_num & IDX_AS_OF == 0 {
        return Ok(SQLITE_CONSTRAINT);
    }
    let (cost, rows) = if idx_num & IDX_KEY_EQ != 0 {
        info.idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
        (10.0, 1)
    } else if idx_num & (IDX_KEY_LOW | IDX_KEY_HIGH) == IDX_KEY_LOW | IDX_KEY_HIGH {
        (2_000.0, 1_000)
    } else if idx_num & (IDX_KEY_LOW | IDX_KEY_HIGH) != 0 {
        (50_000.0, 25_000)
    } else {
        (100_000.0, 100_000)
    };
    info.estimatedCost = cost;
    info.estimatedRows = rows;
    info.idxNum = idx_num;
    if let [only] = order_by {
        if (only.iColumn == COL_KEY || only.iColumn == COL_ROWID) && only.desc == 0 {
            info.orderByConsumed = 1;
        }
    }
    if !letters.is_empty() {
        let s = t
            .api
            .sqlite_string(std::str::from_utf8(&letters).unwrap_or_default());
        if s.is_null() {
            return Err(VtabError::new(SQLITE_NOMEM, "mvbt: out of memory"));
        }
        info.idxStr = s;
        info.needToFreeIdxStr = 1;
    }
    Ok(SQLITE_OK)
}

// ---------------------------------------------------------------- cursors

unsafe extern "C" fn x_open(_p: *mut sqlite3_vtab, out: *mut *mut sqlite3_vtab_cursor) -> c_int {
    guard(SQLITE_INTERNAL, || {
        let cursor = Box::new(Cursor {
            base: sqlite3_vtab_cursor {
                pVtab: std::ptr::null_mut(),
            },
            scan: Scan::default(),
        });
        // SAFETY: `out` is SQLite's out-pointer; SQLite sets `pVtab`.
        unsafe { *out = Box::into_raw(cursor).cast() };
        SQLITE_OK
    })
}

unsafe extern "C" fn x_close(c: *mut sqlite3_vtab_cursor) -> c_int {
    guard(SQLITE_INTERNAL, || {
        // SAFETY: the cursor `x_open` leaked, handed back once.
        drop(unsafe { Box::from_raw(c.cast::<Cursor>()) });
        SQLITE_OK
    })
}

unsafe extern "C" fn x_filter(
    c: *mut sqlite3_vtab_cursor,
    idx_num: c_int,
    idx_str: *const c_char,
    argc: c_int,
    argv: *mut *mut sqlite3_value,
) -> c_int {
    // SAFETY: `c` is this module's cursor; `idx_str` is null or the string
    // x_best_index made; argv holds `argc` values valid during this call.
    unsafe {
        with_cursor(c, |scan, t| {
            let letters = if idx_str.is_null() {
                &[][..]
            } else {
                CStr::from_ptr(idx_str).to_bytes()
            };
            let n = usize::try_from(argc).unwrap_or(0);
            let values: Vec<SqlValue<'_>> = (0..n.min(letters.len()))
                .map(|i| read_value(&t.vt, *argv.add(i)))
                .collect();
            t.shared.filters.fetch_add(1, Ordering::Relaxed);
            t.shared.last_idx_num.store(i64::from(idx_num), Ordering::Relaxed);
            let mut range = KeyRange::ALL;
            let mut as_of = None;
            for (letter, v) in letters.iter().zip(&values) {
                let op = match letter {
                    b'e' => KeyOp::Eq,
                    b'g' => KeyOp::Gt,
                    b'G' => KeyOp::Ge,
                    b'l' => KeyOp::Lt,
                    b'L' => KeyOp::Le,
                    _ => {
                        as_of = Some(version_of(v)?);
                        continue;
                    }
                };
                range = range.intersect(key_range(op, v));
            }
            if as_of == Some(None) {
                range = KeyRange::EMPTY; // as_of = NULL
            }
            scan.start(t, range, as_of.flatten())?;
            Ok(SQLITE_OK)
        })
    }
}

impl Scan {
    fn start(&mut self, t: &Table, range: KeyRange, as_of: Option<Version>) -> Result<(), VtabError> {
        let mut st = t.shared.lock()?;
        let latest = st.tree.latest_version();
        let (at, shown) = match as_of {
            Some(v) if v > latest => {
                return Err(VtabError::error(format!(
                    "mvbt: version {v} of {} is not committed (latest committed version: {latest})",
                    t.name
                )))
            }
            Some(v) => (Some(v), v),
            None if t.writes_now(&st) => (None, latest + 1),
            // Pinned, so that paging stays within one version while other
            // connections commit.
            None => (Some(latest), latest),
        };
        *self = Scan {
            at,
            shown_version: shown,
            ..Scan::default()
        };
        if range.is_empty() {
            return Ok(());
        }
        if let (Bound::Included(a), Bound::Included(b)) = (range.low, range.high) {
            if a == b {
                let value = match at {
                    Some(v) => st.tree.get_at(a, v)?,
                    None => st.tree.get(a)?,
                };
                self.rows.extend(value.map(|v| (a, v)));
                t.shared
                    .rows_fetched
                    .fetch_add(self.rows.len() as u64, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.next_low = Some(range.low);
        self.high = Some(range.high);
        self.fetch(t, &mut st)
    }

    /// Loads the next page (called when the buffered rows are used up).
    fn fetch(&mut self, t: &Table, st: &mut TreeState) -> Result<(), VtabError> {
        self.rows.clear();
        self.pos = 0;
        let (Some(low), Some(high)) = (self.next_low.take(), self.high) else {
            return Ok(());
        };
        if (KeyRange { low, high }).is_empty() {
            return Ok(());
        }
        self.rows = st.tree.range(low, high, self.at, PAGE_ROWS)?;
        t.shared
            .rows_fetched
            .fetch_add(self.rows.len() as u64, Ordering::Relaxed);
        if self.rows.len() >= PAGE_ROWS {
            self.next_low = self.rows.last().map(|(k, _)| Bound::Excluded(*k));
        }
        Ok(())
    }
}

unsafe extern "C" fn x_next(c: *mut sqlite3_vtab_cursor) -> c_int {
    // SAFETY: `c` is this module's cursor.
    unsafe {
        with_cursor(c, |scan, t| {
            scan.pos += 1;
            if scan.pos >= scan.rows.len() && scan.next_low.is_some() {
                let mut st = t.shared.lock()?;
                scan.fetch(t, &mut st)?;
            }
            Ok(SQLITE_OK)
        })
    }
}

unsafe extern "C" fn x_eof(c: *mut sqlite3_vtab_cursor) -> c_int {
    guard(1, || {
        // SAFETY: `c` is this module's cursor.
        let scan = unsafe { &(*c.cast::<Cursor>()).scan };
        c_int::from(scan.pos >= scan.rows.len())
    })
}

unsafe extern "C" fn x_column(
    c: *mut sqlite3_vtab_cursor,
    ctx: *mut sqlite3_context,
    column: c_int,
) -> c_int {
    // SAFETY: `c` is this module's cursor, positioned on a row (SQLite checked
    // xEof); `ctx` is the result context of this call.
    unsafe {
        with_cursor(c, |scan, t| {
            let Some((key, bytes)) = scan.rows.get(scan.pos) else {
                return Err(VtabError::internal("mvbt: column read past the last row"));
            };
            let v = match column {
                COL_KEY => SqlValue::Int(*key),
                COL_VALUE => decode(bytes),
                COL_AS_OF => SqlValue::Int(i64::try_from(scan.shown_version).unwrap_or(i64::MAX)),
                _ => SqlValue::Null,
            };
            Ok(set_result(&t.vt, ctx, &v))
        })
    }
}

unsafe extern "C" fn x_rowid(c: *mut sqlite3_vtab_cursor, out: *mut sqlite3_int64) -> c_int {
    // SAFETY: `c` is this module's cursor on a row; `out` is SQLite's out-pointer.
    unsafe {
        with_cursor(c, |scan, _| {
            let (key, _) = scan
                .rows
                .get(scan.pos)
                .ok_or_else(|| VtabError::internal("mvbt: rowid read past the last row"))?;
            *out = *key;
            Ok(SQLITE_OK)
        })
    }
}

// ---------------------------------------------------------------- writes

impl Table {
    /// Whether this table instance has the tree's write transaction open (and
    /// not yet made durable), so that reads see its own writes.
    /// (Once `xSync` committed, the tree is out of its transaction until `xCommit` forgets the
    /// writer.)
    fn writes_now(&self, st: &TreeState) -> bool {
        st.tree.in_transaction() && st.writer.as_ref().is_some_and(|w| w.owner == self.id)
    }

    fn my_writer<'a>(&self, st: &'a mut TreeState) -> Option<(&'a mut Tree, &'a mut Writer)> {
        match st.writer.as_mut() {
            Some(w) if w.owner == self.id && st.tree.in_transaction() => Some((&mut st.tree, w)),
            _ => None,
        }
    }

    /// INSERT (`args[0]` NULL), UPDATE or DELETE (one argument); the new
    /// key of an INSERT.
    fn update(&self, args: &[SqlValue<'_>], on_conflict: c_int) -> Result<Option<Key>, VtabError> {
        let mut st = self.shared.lock()?;
        let Some((tree, writer)) = self.my_writer(&mut st) else {
            return Err(VtabError::error(format!(
                "mvbt: {}: write outside a transaction",
                self.name
            )));
        };
        let replace = on_conflict == SQLITE_REPLACE;
        let old_key = key_of(&args[0])?;
        if args.len() == 1 {
            if let Some(old) = old_key {
                tree.delete(old)?;
                writer.deleted(old);
            }
            return Ok(None);
        }
        let [_, rowid, key, value, ..] = args else {
            return Err(VtabError::error("mvbt: SQLite passed too few columns"));
        };
        let (rowid, key) = (key_of(rowid)?, key_of(key)?);
        let stored = encode(value);
        let Some(old) = old_key else {
            let new = match (key, rowid) {
                (Some(k), Some(r)) if k != r => {
                    return Err(VtabError::error(format!("mvbt: key {k} and rowid {r} differ")))
                }
                (Some(k), _) | (None, Some(k)) => k,
                (None, None) => next_key(tree, writer)?,
            };
            if !replace && tree.get(new)?.is_some() {
                return Err(VtabError::duplicate_key(&self.name, new));
            }
            tree.put(new, &stored)?;
            writer.put(new);
            return Ok(Some(new));
        };
        // An UPDATE may change the key through the key column or the rowid.
        let new = match (key, rowid) {
            (Some(k), _) if k != old => k,
            (_, Some(r)) if r != old => r,
            (Some(k), _) => k,
            (None, _) => {
                return Err(VtabError::mismatch(
                    "datatype mismatch: an mvbt key cannot be NULL",
                ))
            }
        };
        if new != old {
            if !replace && tree.get(new)?.is_some() {
                return Err(VtabError::duplicate_key(&self.name, new));
            }
            tree.delete(old)?;
            writer.deleted(old);
        }
        tree.put(new, &stored)?;
        writer.put(new);
        Ok(None)
    }
}

/// The key an INSERT without one gets: one above the largest (as SQLite's
/// rowid tables do), 1 in an empty table.
fn next_key(tree: &mut Tree, writer: &mut Writer) -> Result<Key, VtabError> {
    let largest = match writer.largest_key {
        Some(known) => known,
        None => largest_key(tree)?,
    };
    writer.largest_key = Some(largest);
    largest.map_or(Ok(1), |k| {
        k.checked_add(1).ok_or_else(|| {
            VtabError::new(
                SQLITE_FULL,
                "mvbt: the largest key is 9223372036854775807; give the key explicitly",
            )
        })
    })
}

/// The largest key in the tree now (own writes included).
fn largest_key(tree: &mut Tree) -> Result<Option<Key>, VtabError> {
    let first = tree.range(Bound::Unbounded, Bound::Unbounded, None, 1)?;
    let Some(&(mut low, _)) = first.first() else {
        return Ok(None);
    };
    // Binary search for the largest key with probes "first key >= mid";
    // invariant: a key >= low exists, none > high.
    let mut high = Key::MAX;
    while low < high {
        let mid = (low as i128 + (high as i128 - low as i128 + 1) / 2) as Key;
        match tree
            .range(Bound::Included(mid), Bound::Unbounded, None, 1)?
            .first()
        {
            Some(&(k, _)) => low = k,
            None => high = mid - 1,
        }
    }
    Ok(Some(low))
}

unsafe extern "C" fn x_update(
    p: *mut sqlite3_vtab,
    argc: c_int,
    argv: *mut *mut sqlite3_value,
    rowid_out: *mut sqlite3_int64,
) -> c_int {
    // SAFETY: `p` is this module's table; argv holds `argc` values valid during
    // this call; `rowid_out` is SQLite's out-pointer.
    unsafe {
        with_table(p, |t| {
            let n = usize::try_from(argc).unwrap_or(0);
            let args: Vec<SqlValue<'_>> = (0..n).map(|i| read_value(&t.vt, *argv.add(i))).collect();
            if args.is_empty() {
                return Err(VtabError::error("mvbt: xUpdate without arguments"));
            }
            let on_conflict = t.vt.vtab_on_conflict.map_or(0, |f| f(t.db));
            if let Some(key) = t.update(&args, on_conflict)? {
                *rowid_out = key;
            }
            Ok(SQLITE_OK)
        })
    }
}

// ---------------------------------------------------------------- transactions

unsafe extern "C" fn x_begin(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe {
        with_table(p, |t| {
            let mut st = t.shared.lock()?;
            match &st.writer {
                Some(w) if w.owner == t.id => return Ok(SQLITE_OK),
                Some(_) => {
                    return Err(VtabError::busy(format!(
                        "mvbt: {} ({}) is being written by another connection; \
                         retry once its transaction ends",
                        t.name,
                        t.shared.path.display()
                    )))
                }
                None => {}
            }
            st.tree.begin()?;
            st.writer = Some(Writer::new(t.id));
            Ok(SQLITE_OK)
        })
    }
}

unsafe extern "C" fn x_sync(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe {
        with_table(p, |t| {
            let mut st = t.shared.lock()?;
            // The durable commit happens here, so that a failure is reported
            // (and the transaction rolled back) before SQLite commits.
            if let Some((tree, _)) = t.my_writer(&mut st) {
                tree.commit()?;
            }
            Ok(SQLITE_OK)
        })
    }
}

unsafe extern "C" fn x_commit(p: *mut sqlite3_vtab) -> c_int {
    // Normally xSync committed; commit now if SQLite skipped it.
    // SAFETY: `p` is this module's table.
    unsafe { end_transaction(p, Tree::commit) }
}

unsafe extern "C" fn x_rollback(p: *mut sqlite3_vtab) -> c_int {
    // After xSync the tree has committed: nothing left to undo (the README says so: an mvbt
    // table and ordinary tables are not one atomic unit).
    // SAFETY: `p` is this module's table.
    unsafe { end_transaction(p, |tree| tree.rollback()) }
}

/// Forgets this table's write transaction, finishing it with `finish` if the tree is still in
/// it.
///
/// # Safety
/// `p` is this module's table.
pub(crate) unsafe fn end_transaction<T>(
    p: *mut sqlite3_vtab,
    finish: impl FnOnce(&mut Tree) -> onesync_mvbt::Result<T>,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        with_table(p, |t| {
            let mut st = t.shared.lock()?;
            if st.writer.as_ref().is_none_or(|w| w.owner != t.id) {
                return Ok(SQLITE_OK);
            }
            st.writer = None;
            if st.tree.in_transaction() {
                finish(&mut st.tree)?;
            }
            Ok(SQLITE_OK)
        })
    }
}

/// SQLite's savepoint `n` (0-based, counting the statement savepoints but
/// not a `SAVEPOINT` that opened the transaction) is engine depth `n + 1`;
/// `n = -1` means the start of the transaction, engine depth 0.
fn engine_depth(n: c_int) -> usize {
    usize::try_from(n.saturating_add(1)).unwrap_or(0)
}

/// Forgets engine savepoints `target` (≥ 1) and deeper, if open, keeping their changes.
fn release_from(tree: &mut Tree, w: &mut Writer, target: usize) -> Result<(), VtabError> {
    if w.depth >= target {
        tree.release(target)?;
        w.depth = target - 1;
    }
    Ok(())
}

unsafe extern "C" fn x_savepoint(p: *mut sqlite3_vtab, n: c_int) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe {
        with_table(p, |t| {
            let mut st = t.shared.lock()?;
            let Some((tree, w)) = t.my_writer(&mut st) else {
                return Ok(SQLITE_OK);
            };
            let target = engine_depth(n);
            if target == 0 {
                return Ok(SQLITE_OK);
            }
            release_from(tree, w, target)?;
            // A table that joins a transaction late is told only the current
            // level: the levels below it (no changes of ours yet) are made too.
            while w.depth < target {
                w.depth = tree.savepoint()?;
            }
            Ok(SQLITE_OK)
        })
    }
}

unsafe extern "C" fn x_release(p: *mut sqlite3_vtab, n: c_int) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe {
        with_table(p, |t| {
            let mut st = t.shared.lock()?;
            let Some((tree, w)) = t.my_writer(&mut st) else {
                return Ok(SQLITE_OK);
            };
            release_from(tree, w, engine_depth(n).max(1))?;
            Ok(SQLITE_OK)
        })
    }
}

unsafe extern "C" fn x_rollback_to(p: *mut sqlite3_vtab, n: c_int) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe {
        with_table(p, |t| {
            let mut st = t.shared.lock()?;
            let Some((tree, w)) = t.my_writer(&mut st) else {
                return Ok(SQLITE_OK);
            };
            let target = engine_depth(n);
            if target == 0 {
                // ROLLBACK TO the SAVEPOINT that began the transaction: undo
                // all of it, and go on in a fresh one (same version number).
                tree.rollback()?;
                tree.begin()?;
                w.depth = 0;
                w.largest_key = None;
            } else if w.depth >= target {
                // The engine drops the deeper levels and keeps `target` open.
                tree.rollback_to(target)?;
                w.depth = target;
                w.largest_key = None;
            }
            Ok(SQLITE_OK)
        })
    }
}
