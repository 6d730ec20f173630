//! Virtual tables: the `sqlite3_module` shims over the safe [`VirtualTable`] trait.
//!
//! SQLite sees a `sqlite3_vtab` / `sqlite3_vtab_cursor` header at the start of
//! [`TableBox`] / [`CursorBox`]; the table behind it is plain Rust. Arguments are read into
//! [`SqlValue`]s and an [`IndexPlan`], results written back through the [`VtabRoutines`] of
//! the [`ApiTable`] the module was registered with, and errors become a result code plus
//! the table's `zErrMsg`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use onesync_vfs::ffi::{
    sqlite3_context, sqlite3_index_info, sqlite3_int64, sqlite3_module, sqlite3_value, sqlite3_vtab,
    sqlite3_vtab_cursor, SQLITE_BLOB, SQLITE_ERROR, SQLITE_FLOAT, SQLITE_FULL, SQLITE_INDEX_SCAN_UNIQUE,
    SQLITE_INTEGER, SQLITE_INTERNAL, SQLITE_NOMEM, SQLITE_OK, SQLITE_TEXT, SQLITE_TRANSIENT,
    SQLITE_VTAB_CONSTRAINT_SUPPORT,
};
use onesync_vfs::{ApiTable, RegisterError, VtabConfigRoutine, VtabRoutines};

use super::guard;

/// A virtual table's error: an SQLite result code and the message that goes to `zErrMsg`.
#[derive(Debug)]
pub(crate) struct VtabError {
    pub code: c_int,
    pub message: String,
}

impl VtabError {
    pub fn new(code: c_int, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    pub fn error(message: impl Into<String>) -> Self {
        Self::new(SQLITE_ERROR, message)
    }
}

/// One SQL value, borrowing SQLite's or the table's bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SqlValue<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

/// One constraint of a WHERE clause, as `xBestIndex` is offered it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IndexConstraint {
    /// The column (-1: the rowid).
    pub column: c_int,
    /// `SQLITE_INDEX_CONSTRAINT_*`.
    pub op: u8,
    pub usable: bool,
}

/// One ORDER BY term.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IndexOrderBy {
    pub column: c_int,
    pub desc: bool,
}

/// What the plan does with a constraint: its argument's position in `xFilter` (1-based, 0:
/// not passed) and whether SQLite may skip checking it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConstraintUsage {
    pub argv_index: c_int,
    pub omit: bool,
}

/// `sqlite3_index_info`, read and written safely: the question (constraints, order) and the
/// answer (usage per constraint, the plan's number and string, its cost).
#[derive(Debug)]
pub(crate) struct IndexPlan {
    pub constraints: Vec<IndexConstraint>,
    pub order_by: Vec<IndexOrderBy>,
    /// One per constraint.
    pub usage: Vec<ConstraintUsage>,
    pub idx_num: c_int,
    /// Handed to `xFilter` as its `idxStr`.
    pub idx_str: Option<String>,
    pub estimated_cost: f64,
    pub estimated_rows: i64,
    /// The plan visits at most one row (`SQLITE_INDEX_SCAN_UNIQUE`).
    pub unique: bool,
    pub order_by_consumed: bool,
}

/// The connection a table is being created or connected on, during `xCreate`/`xConnect`.
pub(crate) struct VtabConnection<'a> {
    vt: &'a VtabRoutines,
    db: *mut c_void,
}

impl VtabConnection<'_> {
    /// `sqlite3_db_filename(db, schema)`, if SQLite has it and the database has a file.
    pub fn db_filename(&self, schema: &str) -> Option<String> {
        let db_filename = self.vt.db_filename?;
        let schema = CString::new(schema).ok()?;
        // SAFETY: `db` is the connection creating the table; the schema name is
        // NUL-terminated; the result is null or a string owned by SQLite.
        let p = unsafe { db_filename(self.db, schema.as_ptr()) };
        // SAFETY: see above.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// `sqlite3_declare_vtab`: a result code.
    pub fn declare_vtab(&self, schema: &CStr) -> c_int {
        // SAFETY: called from within xCreate/xConnect of `db`, as SQLite requires.
        unsafe { (self.vt.declare_vtab)(self.db, schema.as_ptr()) }
    }

    /// Declares that `xUpdate` reports constraint violations before changing anything
    /// (`SQLITE_VTAB_CONSTRAINT_SUPPORT`), so SQLite may implement OR IGNORE / OR FAIL /
    /// OR ROLLBACK around it.
    pub fn declare_constraint_support(&self) {
        match self.vt.vtab_config {
            // SAFETY: within xCreate/xConnect of `db`; this option takes one int.
            Some(VtabConfigRoutine::Variadic(f)) => unsafe {
                f(self.db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1 as c_int)
            },
            // SAFETY: as above.
            Some(VtabConfigRoutine::OneInt(f)) => unsafe { f(self.db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1) },
            None => SQLITE_OK,
        };
    }
}

/// A virtual table module's behaviour, each method one of SQLite's `x...` calls (its
/// contract applies); `Err` becomes the result code and the table's error message.
pub(crate) trait VirtualTable: Sized + 'static {
    /// What one cursor holds.
    type Cursor: Default;

    /// `xCreate` (`create`: the table is new) or `xConnect`; `args` are SQLite's
    /// (module name, schema, table name, then the options).
    fn connect(conn: &VtabConnection<'_>, args: &[String], create: bool) -> Result<Self, VtabError>;
    /// `xDisconnect`: the table is dropped from this connection.
    fn disconnect(self);
    /// `xDestroy`, first half: delete what the table stores (if this fails, the table stays).
    fn delete_storage(&self) -> Result<(), VtabError>;
    /// `xDestroy`, second half: the table is gone.
    fn destroyed(self);
    /// `xBestIndex`: `SQLITE_OK`, or `SQLITE_CONSTRAINT` for a plan that cannot be used.
    fn best_index(&self, plan: &mut IndexPlan) -> Result<c_int, VtabError>;
    /// `xFilter`: starts `cursor` on the rows the plan selects.
    fn filter(
        &self,
        cursor: &mut Self::Cursor,
        idx_num: c_int,
        idx_str: &[u8],
        args: &[SqlValue<'_>],
    ) -> Result<(), VtabError>;
    /// `xNext`.
    fn next(&self, cursor: &mut Self::Cursor) -> Result<(), VtabError>;
    /// `xEof`.
    fn eof(cursor: &Self::Cursor) -> bool;
    /// `xColumn` of the current row.
    fn column<'c>(&self, cursor: &'c Self::Cursor, column: c_int) -> Result<SqlValue<'c>, VtabError>;
    /// `xRowid` of the current row.
    fn rowid(cursor: &Self::Cursor) -> Result<i64, VtabError>;
    /// `xUpdate` (`on_conflict`: `sqlite3_vtab_on_conflict`); the new rowid of an INSERT.
    fn update(&self, args: &[SqlValue<'_>], on_conflict: c_int) -> Result<Option<i64>, VtabError>;
    fn begin(&self) -> Result<(), VtabError>;
    fn sync(&self) -> Result<(), VtabError>;
    fn commit(&self) -> Result<(), VtabError>;
    fn rollback(&self) -> Result<(), VtabError>;
    fn savepoint(&self, n: c_int) -> Result<(), VtabError>;
    fn release(&self, n: c_int) -> Result<(), VtabError>;
    fn rollback_to(&self, n: c_int) -> Result<(), VtabError>;
    /// `xRename`: whether the table may be renamed.
    fn rename(&self) -> Result<(), VtabError>;
}

/// A table instance as SQLite holds it: `base` first, so a `sqlite3_vtab*` is one.
#[repr(C)]
struct TableBox<T> {
    base: sqlite3_vtab,
    api: ApiTable,
    vt: VtabRoutines,
    db: *mut c_void,
    table: T,
}

/// A cursor as SQLite holds it: `base` first, so a `sqlite3_vtab_cursor*` is one.
#[repr(C)]
struct CursorBox<C> {
    base: sqlite3_vtab_cursor,
    cursor: C,
}

/// The module table of `T`.
struct Module<T>(std::marker::PhantomData<T>);

impl<T: VirtualTable> Module<T> {
    const MODULE: sqlite3_module = sqlite3_module {
        iVersion: 2,
        xCreate: Some(x_create::<T>),
        xConnect: Some(x_connect::<T>),
        xBestIndex: Some(x_best_index::<T>),
        xDisconnect: Some(x_disconnect::<T>),
        xDestroy: Some(x_destroy::<T>),
        xOpen: Some(x_open::<T>),
        xClose: Some(x_close::<T>),
        xFilter: Some(x_filter::<T>),
        xNext: Some(x_next::<T>),
        xEof: Some(x_eof::<T>),
        xColumn: Some(x_column::<T>),
        xRowid: Some(x_rowid::<T>),
        xUpdate: Some(x_update::<T>),
        xBegin: Some(x_begin::<T>),
        xSync: Some(x_sync::<T>),
        xCommit: Some(x_commit::<T>),
        xRollback: Some(x_rollback::<T>),
        xFindFunction: None,
        xRename: Some(x_rename::<T>),
        xSavepoint: Some(x_savepoint::<T>),
        xRelease: Some(x_release::<T>),
        xRollbackTo: Some(x_rollback_to::<T>),
        xShadowName: None,
    };
}

/// A connection to register virtual table modules on: what the crate root's
/// [`crate::register_modules`] is handed, so that it names the tables and `sys` does not.
pub(crate) struct ModuleTarget<'a> {
    db: *mut c_void,
    api: &'a ApiTable,
}

impl<'a> ModuleTarget<'a> {
    /// # Safety
    /// As for [`register_mvbt_module`](super::entry::register_mvbt_module), for as long as the
    /// target is used.
    pub(crate) unsafe fn new(db: *mut c_void, api: &'a ApiTable) -> Self {
        Self { db, api }
    }

    /// Registers the module of `T` as `name` on the connection.
    pub(crate) fn register<T: VirtualTable>(&self, name: &str) -> Result<(), RegisterError> {
        // SAFETY: `db` and `api` met `register_module`'s contract when `self` was made
        // (`ModuleTarget::new`), and `self` borrows no longer than that.
        unsafe { register_module::<T>(self.db, self.api, name) }
    }
}

/// Registers the module of `T` as `name` on connection `db`.
///
/// # Safety
/// As for [`register_mvbt_module`](super::entry::register_mvbt_module).
unsafe fn register_module<T: VirtualTable>(
    db: *mut c_void,
    api: &ApiTable,
    name: &str,
) -> Result<(), RegisterError> {
    let Some(vt) = api.vtab() else {
        return Err(RegisterError {
            code: SQLITE_ERROR,
            message: format!(
                "the SQLite routine table lacks the virtual table routines the {name} module needs"
            ),
        });
    };
    let c_name = CString::new(name).map_err(|_| RegisterError {
        code: SQLITE_ERROR,
        message: "module name contains NUL".into(),
    })?;
    let module: &'static sqlite3_module = &Module::<T>::MODULE;
    let aux = Box::into_raw(Box::new(*api));
    // SAFETY: `db` is a live connection of this SQLite (the contract); the name is
    // NUL-terminated (SQLite copies it); the module is 'static; SQLite owns `aux` from here
    // and frees it through `drop_module_aux` (also when registration fails).
    let rc = unsafe { (vt.create_module_v2)(db, c_name.as_ptr(), module, aux.cast(), Some(drop_module_aux)) };
    if rc == SQLITE_OK {
        Ok(())
    } else {
        Err(RegisterError {
            code: rc,
            message: format!("sqlite3_create_module_v2(\"{name}\") failed"),
        })
    }
}

unsafe extern "C" fn drop_module_aux(aux: *mut c_void) {
    guard((), || {
        // SAFETY: `aux` is the Box<ApiTable> leaked by `register_module`, handed back once
        // by SQLite when the module goes away.
        drop(unsafe { Box::from_raw(aux.cast::<ApiTable>()) });
    });
}

// ---------------------------------------------------------------- helpers

/// Replaces the table's error message (SQLite copies and frees it after the call).
///
/// # Safety
/// `p` is a live `TableBox<T>` and no reference to it is held.
unsafe fn set_error<T>(p: *mut sqlite3_vtab, message: &str) {
    let table = p.cast::<TableBox<T>>();
    // SAFETY: per the contract; only raw-pointer field accesses.
    unsafe {
        let old = (*table).base.zErrMsg;
        if !old.is_null() {
            ((*table).vt.free)(old.cast());
        }
        (*table).base.zErrMsg = (*table).api.sqlite_string(message);
    }
}

/// Runs `f` on the table behind `p` (guarded), turning an error into its code and
/// `zErrMsg`.
///
/// # Safety
/// `p` is a live `TableBox<T>` (SQLite passes back what `xCreate`/`xConnect` made).
unsafe fn with_table<T>(
    p: *mut sqlite3_vtab,
    f: impl FnOnce(&TableBox<T>) -> Result<c_int, VtabError>,
) -> c_int {
    guard(SQLITE_INTERNAL, || {
        let result = {
            // SAFETY: per the contract; `base` is the first field of the repr(C) box.
            let table = unsafe { &*p.cast::<TableBox<T>>() };
            f(table)
        };
        match result {
            Ok(rc) => rc,
            Err(e) => {
                // SAFETY: per the contract; the shared borrow above has ended.
                unsafe { set_error::<T>(p, &e.message) };
                e.code
            }
        }
    })
}

/// [`with_table`] for a call that answers `SQLITE_OK` or an error.
///
/// # Safety
/// As for [`with_table`].
unsafe fn table_call<T>(p: *mut sqlite3_vtab, f: impl FnOnce(&T) -> Result<(), VtabError>) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with_table::<T>(p, |t| f(&t.table).map(|()| SQLITE_OK)) }
}

/// Like [`with_table`] for a cursor (errors go to its table's `zErrMsg`).
///
/// # Safety
/// `c` is a live `CursorBox<T::Cursor>` of a table of `T`.
unsafe fn with_cursor<T: VirtualTable>(
    c: *mut sqlite3_vtab_cursor,
    f: impl FnOnce(&mut T::Cursor, &TableBox<T>) -> Result<c_int, VtabError>,
) -> c_int {
    guard(SQLITE_INTERNAL, || {
        // SAFETY: per the contract; `pVtab` is the cursor's table, set by SQLite.
        let p = unsafe { (*c).pVtab };
        let result = {
            // SAFETY: per the contract: distinct allocations, no other borrows.
            let (cursor, table) =
                unsafe { (&mut *c.cast::<CursorBox<T::Cursor>>(), &*p.cast::<TableBox<T>>()) };
            f(&mut cursor.cursor, table)
        };
        match result {
            Ok(rc) => rc,
            Err(e) => {
                // SAFETY: the table is live; the borrows above have ended.
                unsafe { set_error::<T>(p, &e.message) };
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
unsafe fn read_value<'a>(vt: &VtabRoutines, v: *mut sqlite3_value) -> SqlValue<'a> {
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

/// Reads `argc` values of `argv`.
///
/// # Safety
/// `argv` holds `argc` values SQLite passed to the current call (as for [`read_value`]).
unsafe fn read_values<'a>(
    vt: &VtabRoutines,
    argc: usize,
    argv: *mut *mut sqlite3_value,
) -> Vec<SqlValue<'a>> {
    // SAFETY: per the contract.
    (0..argc)
        .map(|i| unsafe { read_value(vt, *argv.add(i)) })
        .collect()
}

/// Sets a function result.
///
/// # Safety
/// `ctx` is the context SQLite passed to the current `xColumn`.
unsafe fn set_result(vt: &VtabRoutines, ctx: *mut sqlite3_context, v: &SqlValue<'_>) -> c_int {
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
                Err(_) => return SQLITE_FULL,
            },
            SqlValue::Blob(b) => match len(b) {
                Ok(n) => (vt.result_blob)(ctx, b.as_ptr().cast(), n, SQLITE_TRANSIENT),
                Err(_) => return SQLITE_FULL,
            },
        }
    }
    SQLITE_OK
}

// ---------------------------------------------------------------- create / connect

unsafe extern "C" fn x_create<T: VirtualTable>(
    db: *mut c_void,
    aux: *mut c_void,
    argc: c_int,
    argv: *const *const c_char,
    vtab: *mut *mut sqlite3_vtab,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: SQLite's xCreate arguments, forwarded.
    guard(SQLITE_INTERNAL, || unsafe {
        construct::<T>(db, aux, argc, argv, vtab, err, true)
    })
}

unsafe extern "C" fn x_connect<T: VirtualTable>(
    db: *mut c_void,
    aux: *mut c_void,
    argc: c_int,
    argv: *const *const c_char,
    vtab: *mut *mut sqlite3_vtab,
    err: *mut *mut c_char,
) -> c_int {
    // SAFETY: SQLite's xConnect arguments, forwarded.
    guard(SQLITE_INTERNAL, || unsafe {
        construct::<T>(db, aux, argc, argv, vtab, err, false)
    })
}

/// `xCreate` (`create`) and `xConnect`.
///
/// # Safety
/// The arguments of an `xCreate`/`xConnect` call of the module of `T`.
unsafe fn construct<T: VirtualTable>(
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
    let built = api
        .vtab()
        .copied()
        .ok_or_else(|| VtabError::error("mvbt: virtual table routines missing"))
        .and_then(|vt| {
            let table = T::connect(&VtabConnection { vt: &vt, db }, &args, create)?;
            Ok(Box::new(TableBox {
                base: sqlite3_vtab {
                    pModule: std::ptr::null(),
                    nRef: 0,
                    zErrMsg: std::ptr::null_mut(),
                },
                api,
                vt,
                db,
                table,
            }))
        });
    match built {
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

/// Takes a table back from SQLite and frees its `zErrMsg`.
///
/// # Safety
/// `p` is a live `TableBox<T>`, not used again.
unsafe fn take_table<T>(p: *mut sqlite3_vtab) -> T {
    // SAFETY: per the contract; the Box was leaked by `construct`.
    let table = unsafe { Box::from_raw(p.cast::<TableBox<T>>()) };
    if !table.base.zErrMsg.is_null() {
        // SAFETY: the message came from sqlite3_malloc (api.sqlite_string).
        unsafe { (table.vt.free)(table.base.zErrMsg.cast()) };
    }
    table.table
}

unsafe extern "C" fn x_disconnect<T: VirtualTable>(p: *mut sqlite3_vtab) -> c_int {
    guard(SQLITE_INTERNAL, || {
        // SAFETY: SQLite hands back the table once, to be freed.
        unsafe { take_table::<T>(p) }.disconnect();
        SQLITE_OK
    })
}

unsafe extern "C" fn x_destroy<T: VirtualTable>(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    let rc = unsafe { table_call::<T>(p, T::delete_storage) };
    if rc != SQLITE_OK {
        return rc;
    }
    guard(SQLITE_INTERNAL, || {
        // SAFETY: SQLite hands back the table once, to be freed.
        unsafe { take_table::<T>(p) }.destroyed();
        SQLITE_OK
    })
}

unsafe extern "C" fn x_rename<T: VirtualTable>(p: *mut sqlite3_vtab, _new_name: *const c_char) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, T::rename) }
}

// ---------------------------------------------------------------- planning

unsafe extern "C" fn x_best_index<T: VirtualTable>(
    p: *mut sqlite3_vtab,
    info: *mut sqlite3_index_info,
) -> c_int {
    // SAFETY: `p` is this module's table; `info` is SQLite's planning record, whose arrays
    // hold nConstraint / nOrderBy entries.
    unsafe {
        with_table::<T>(p, |t| {
            let info = &mut *info;
            let n = usize::try_from(info.nConstraint).unwrap_or(0);
            let m = usize::try_from(info.nOrderBy).unwrap_or(0);
            let mut plan = IndexPlan {
                constraints: (0..n)
                    .map(|i| {
                        let c = &*info.aConstraint.add(i);
                        IndexConstraint {
                            column: c.iColumn,
                            op: c.op,
                            usable: c.usable != 0,
                        }
                    })
                    .collect(),
                order_by: (0..m)
                    .map(|i| {
                        let o = &*info.aOrderBy.add(i);
                        IndexOrderBy {
                            column: o.iColumn,
                            desc: o.desc != 0,
                        }
                    })
                    .collect(),
                usage: (0..n)
                    .map(|i| {
                        let u = &*info.aConstraintUsage.add(i);
                        ConstraintUsage {
                            argv_index: u.argvIndex,
                            omit: u.omit != 0,
                        }
                    })
                    .collect(),
                idx_num: info.idxNum,
                idx_str: None,
                estimated_cost: info.estimatedCost,
                estimated_rows: info.estimatedRows,
                unique: false,
                order_by_consumed: info.orderByConsumed != 0,
            };
            let rc = t.table.best_index(&mut plan)?;
            for (i, u) in plan.usage.iter().enumerate().take(n) {
                let out = &mut *info.aConstraintUsage.add(i);
                out.argvIndex = u.argv_index;
                out.omit = u8::from(u.omit);
            }
            if rc != SQLITE_OK {
                return Ok(rc);
            }
            if plan.unique {
                info.idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
            }
            info.estimatedCost = plan.estimated_cost;
            info.estimatedRows = plan.estimated_rows;
            info.idxNum = plan.idx_num;
            info.orderByConsumed = c_int::from(plan.order_by_consumed);
            if let Some(idx_str) = plan.idx_str {
                let s = t.api.sqlite_string(&idx_str);
                if s.is_null() {
                    return Err(VtabError::new(SQLITE_NOMEM, "mvbt: out of memory"));
                }
                info.idxStr = s;
                info.needToFreeIdxStr = 1;
            }
            Ok(SQLITE_OK)
        })
    }
}

// ---------------------------------------------------------------- cursors

unsafe extern "C" fn x_open<T: VirtualTable>(
    _p: *mut sqlite3_vtab,
    out: *mut *mut sqlite3_vtab_cursor,
) -> c_int {
    guard(SQLITE_INTERNAL, || {
        let cursor = Box::new(CursorBox {
            base: sqlite3_vtab_cursor {
                pVtab: std::ptr::null_mut(),
            },
            cursor: T::Cursor::default(),
        });
        // SAFETY: `out` is SQLite's out-pointer; SQLite sets `pVtab`.
        unsafe { *out = Box::into_raw(cursor).cast() };
        SQLITE_OK
    })
}

unsafe extern "C" fn x_close<T: VirtualTable>(c: *mut sqlite3_vtab_cursor) -> c_int {
    guard(SQLITE_INTERNAL, || {
        // SAFETY: the cursor `x_open` leaked, handed back once.
        drop(unsafe { Box::from_raw(c.cast::<CursorBox<T::Cursor>>()) });
        SQLITE_OK
    })
}

unsafe extern "C" fn x_filter<T: VirtualTable>(
    c: *mut sqlite3_vtab_cursor,
    idx_num: c_int,
    idx_str: *const c_char,
    argc: c_int,
    argv: *mut *mut sqlite3_value,
) -> c_int {
    // SAFETY: `c` is this module's cursor; `idx_str` is null or the string x_best_index
    // made; argv holds `argc` values valid during this call.
    unsafe {
        with_cursor::<T>(c, |cursor, t| {
            let letters = if idx_str.is_null() {
                &[][..]
            } else {
                CStr::from_ptr(idx_str).to_bytes()
            };
            let n = usize::try_from(argc).unwrap_or(0);
            let values = read_values(&t.vt, n.min(letters.len()), argv);
            t.table.filter(cursor, idx_num, letters, &values)?;
            Ok(SQLITE_OK)
        })
    }
}

unsafe extern "C" fn x_next<T: VirtualTable>(c: *mut sqlite3_vtab_cursor) -> c_int {
    // SAFETY: `c` is this module's cursor.
    unsafe { with_cursor::<T>(c, |cursor, t| t.table.next(cursor).map(|()| SQLITE_OK)) }
}

unsafe extern "C" fn x_eof<T: VirtualTable>(c: *mut sqlite3_vtab_cursor) -> c_int {
    guard(1, || {
        // SAFETY: `c` is this module's cursor.
        let cursor = unsafe { &(*c.cast::<CursorBox<T::Cursor>>()).cursor };
        c_int::from(T::eof(cursor))
    })
}

unsafe extern "C" fn x_column<T: VirtualTable>(
    c: *mut sqlite3_vtab_cursor,
    ctx: *mut sqlite3_context,
    column: c_int,
) -> c_int {
    // SAFETY: `c` is this module's cursor, positioned on a row (SQLite checked xEof);
    // `ctx` is the result context of this call.
    unsafe {
        with_cursor::<T>(c, |cursor, t| {
            let v = t.table.column(cursor, column)?;
            Ok(set_result(&t.vt, ctx, &v))
        })
    }
}

unsafe extern "C" fn x_rowid<T: VirtualTable>(c: *mut sqlite3_vtab_cursor, out: *mut sqlite3_int64) -> c_int {
    // SAFETY: `c` is this module's cursor on a row; `out` is SQLite's out-pointer.
    unsafe {
        with_cursor::<T>(c, |cursor, _| {
            *out = T::rowid(cursor)?;
            Ok(SQLITE_OK)
        })
    }
}

// ---------------------------------------------------------------- writes

unsafe extern "C" fn x_update<T: VirtualTable>(
    p: *mut sqlite3_vtab,
    argc: c_int,
    argv: *mut *mut sqlite3_value,
    rowid_out: *mut sqlite3_int64,
) -> c_int {
    // SAFETY: `p` is this module's table; argv holds `argc` values valid during this call;
    // `rowid_out` is SQLite's out-pointer.
    unsafe {
        with_table::<T>(p, |t| {
            let args = read_values(&t.vt, usize::try_from(argc).unwrap_or(0), argv);
            if args.is_empty() {
                return Err(VtabError::error("mvbt: xUpdate without arguments"));
            }
            let on_conflict = t.vt.vtab_on_conflict.map_or(0, |f| f(t.db));
            if let Some(key) = t.table.update(&args, on_conflict)? {
                *rowid_out = key;
            }
            Ok(SQLITE_OK)
        })
    }
}

// ---------------------------------------------------------------- transactions

unsafe extern "C" fn x_begin<T: VirtualTable>(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, T::begin) }
}

unsafe extern "C" fn x_sync<T: VirtualTable>(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, T::sync) }
}

unsafe extern "C" fn x_commit<T: VirtualTable>(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, T::commit) }
}

unsafe extern "C" fn x_rollback<T: VirtualTable>(p: *mut sqlite3_vtab) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, T::rollback) }
}

unsafe extern "C" fn x_savepoint<T: VirtualTable>(p: *mut sqlite3_vtab, n: c_int) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, |t| t.savepoint(n)) }
}

unsafe extern "C" fn x_release<T: VirtualTable>(p: *mut sqlite3_vtab, n: c_int) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, |t| t.release(n)) }
}

unsafe extern "C" fn x_rollback_to<T: VirtualTable>(p: *mut sqlite3_vtab, n: c_int) -> c_int {
    // SAFETY: `p` is this module's table.
    unsafe { table_call::<T>(p, |t| t.rollback_to(n)) }
}
