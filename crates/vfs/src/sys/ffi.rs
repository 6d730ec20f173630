//! Hand-declared C layouts and constants from `sqlite3.h` / `sqlite3ext.h`.
//!
//! This crate deliberately does not depend on `libsqlite3-sys`: every type
//! SQLite and this VFS exchange is declared here, and every SQLite function
//! is reached through a pointer handed over at registration time (see
//! [`crate::ApiTable`]). The layouts are checked against the system headers
//! by `tests/layout.rs` (field offsets, struct sizes and constant values).
//!
//! Names follow the C spelling so that a field here can be compared 1:1 with
//! `offsetof(struct ..., field)` in C.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// `sqlite3_int64`.
pub type sqlite3_int64 = i64;

/// `sqlite3_syscall_ptr`: `void (*)(void)`.
pub type sqlite3_syscall_ptr = Option<unsafe extern "C" fn()>;

/// `struct sqlite3_file`: the base "class" every VFS file subclasses.
#[repr(C)]
pub struct sqlite3_file {
    pub pMethods: *const sqlite3_io_methods,
}

/// `struct sqlite3_io_methods`, version 3 (all fields through `xUnfetch`).
#[repr(C)]
pub struct sqlite3_io_methods {
    pub iVersion: c_int,
    pub xClose: Option<unsafe extern "C" fn(*mut sqlite3_file) -> c_int>,
    pub xRead: Option<unsafe extern "C" fn(*mut sqlite3_file, *mut c_void, c_int, sqlite3_int64) -> c_int>,
    pub xWrite: Option<unsafe extern "C" fn(*mut sqlite3_file, *const c_void, c_int, sqlite3_int64) -> c_int>,
    pub xTruncate: Option<unsafe extern "C" fn(*mut sqlite3_file, sqlite3_int64) -> c_int>,
    pub xSync: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xFileSize: Option<unsafe extern "C" fn(*mut sqlite3_file, *mut sqlite3_int64) -> c_int>,
    pub xLock: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xUnlock: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xCheckReservedLock: Option<unsafe extern "C" fn(*mut sqlite3_file, *mut c_int) -> c_int>,
    pub xFileControl: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int, *mut c_void) -> c_int>,
    pub xSectorSize: Option<unsafe extern "C" fn(*mut sqlite3_file) -> c_int>,
    pub xDeviceCharacteristics: Option<unsafe extern "C" fn(*mut sqlite3_file) -> c_int>,
    // version 2
    pub xShmMap:
        Option<unsafe extern "C" fn(*mut sqlite3_file, c_int, c_int, c_int, *mut *mut c_void) -> c_int>,
    pub xShmLock: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int, c_int, c_int) -> c_int>,
    pub xShmBarrier: Option<unsafe extern "C" fn(*mut sqlite3_file)>,
    pub xShmUnmap: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    // version 3
    pub xFetch:
        Option<unsafe extern "C" fn(*mut sqlite3_file, sqlite3_int64, c_int, *mut *mut c_void) -> c_int>,
    pub xUnfetch: Option<unsafe extern "C" fn(*mut sqlite3_file, sqlite3_int64, *mut c_void) -> c_int>,
}

/// `xDlSym`'s return type: `void (*)(void)`.
pub type DlSymResult = Option<unsafe extern "C" fn()>;

/// `struct sqlite3_vfs`, version 3 (all fields through `xNextSystemCall`).
#[repr(C)]
pub struct sqlite3_vfs {
    pub iVersion: c_int,
    pub szOsFile: c_int,
    pub mxPathname: c_int,
    pub pNext: *mut sqlite3_vfs,
    pub zName: *const c_char,
    pub pAppData: *mut c_void,
    pub xOpen: Option<
        unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, *mut sqlite3_file, c_int, *mut c_int) -> c_int,
    >,
    pub xDelete: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, c_int) -> c_int>,
    pub xAccess: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, c_int, *mut c_int) -> c_int>,
    pub xFullPathname:
        Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, c_int, *mut c_char) -> c_int>,
    pub xDlOpen: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char) -> *mut c_void>,
    pub xDlError: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int, *mut c_char)>,
    pub xDlSym: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut c_void, *const c_char) -> DlSymResult>,
    pub xDlClose: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut c_void)>,
    pub xRandomness: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int, *mut c_char) -> c_int>,
    pub xSleep: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int) -> c_int>,
    pub xCurrentTime: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut f64) -> c_int>,
    pub xGetLastError: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int, *mut c_char) -> c_int>,
    // version 2
    pub xCurrentTimeInt64: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut sqlite3_int64) -> c_int>,
    // version 3
    pub xSetSystemCall:
        Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, sqlite3_syscall_ptr) -> c_int>,
    pub xGetSystemCall: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char) -> sqlite3_syscall_ptr>,
    pub xNextSystemCall: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char) -> *const c_char>,
}

/// `sqlite3_vfs_find`.
pub type VfsFindFn = unsafe extern "C" fn(*const c_char) -> *mut sqlite3_vfs;
/// `sqlite3_vfs_register`.
pub type VfsRegisterFn = unsafe extern "C" fn(*mut sqlite3_vfs, c_int) -> c_int;
/// `sqlite3_libversion_number`.
pub type LibversionNumberFn = unsafe extern "C" fn() -> c_int;
/// `sqlite3_log`: a printf-style format and its arguments.
pub type LogFn = unsafe extern "C" fn(c_int, *const c_char, ...);
/// `sqlite3_uri_parameter`.
pub type UriParameterFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *const c_char;
/// `sqlite3_malloc`.
pub type MallocFn = unsafe extern "C" fn(c_int) -> *mut c_void;

/// `sqlite3_free`.
pub type FreeFn = unsafe extern "C" fn(*mut c_void);

/// `sqlite3_value`, opaque.
#[repr(C)]
pub struct sqlite3_value {
    _opaque: [u8; 0],
}
/// `sqlite3_context`, opaque.
#[repr(C)]
pub struct sqlite3_context {
    _opaque: [u8; 0],
}

/// A destructor argument of `sqlite3_result_blob`/`_text`. Declared as a
/// pointer-sized integer (same ABI as the C function pointer) because the only
/// value this crate passes is the sentinel [`SQLITE_TRANSIENT`] (-1).
pub type Destructor = isize;
/// "Copy the bytes before returning."
pub const SQLITE_TRANSIENT: Destructor = -1;

/// `sqlite3_create_module_v2` (the `sqlite3*` is `*mut c_void` throughout this crate).
pub type CreateModuleV2Fn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *const sqlite3_module,
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void)>,
) -> c_int;
/// `sqlite3_declare_vtab`.
pub type DeclareVtabFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;
/// `sqlite3_vtab_config` (variadic in C).
pub type VtabConfigFn = unsafe extern "C" fn(*mut c_void, c_int, ...) -> c_int;
/// `sqlite3_vtab_on_conflict`.
pub type VtabOnConflictFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `sqlite3_db_filename`.
pub type DbFilenameFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *const c_char;
/// `sqlite3_file_control`.
pub type FileControlFn = unsafe extern "C" fn(*mut c_void, *const c_char, c_int, *mut c_void) -> c_int;
/// `sqlite3_auto_extension`; its argument is a `void(*)(void)` in C, taken
/// here as an untyped pointer (an entry point cast to it).
pub type AutoExtensionFn = unsafe extern "C" fn(*const c_void) -> c_int;
/// An extension's entry point, as SQLite calls it: (connection, error message out-pointer,
/// routine table).
pub type ConnectionInitFn =
    unsafe extern "C" fn(*mut c_void, *mut *mut c_char, *const sqlite3_api_routines) -> c_int;
/// `sqlite3_value_type`.
pub type ValueTypeFn = unsafe extern "C" fn(*mut sqlite3_value) -> c_int;
/// `sqlite3_value_int64`.
pub type ValueInt64Fn = unsafe extern "C" fn(*mut sqlite3_value) -> sqlite3_int64;
/// `sqlite3_value_double`.
pub type ValueDoubleFn = unsafe extern "C" fn(*mut sqlite3_value) -> f64;
/// `sqlite3_value_blob`.
pub type ValueBlobFn = unsafe extern "C" fn(*mut sqlite3_value) -> *const c_void;
/// `sqlite3_value_bytes`.
pub type ValueBytesFn = unsafe extern "C" fn(*mut sqlite3_value) -> c_int;
/// `sqlite3_value_text`.
pub type ValueTextFn = unsafe extern "C" fn(*mut sqlite3_value) -> *const u8;
/// `sqlite3_result_null`.
pub type ResultNullFn = unsafe extern "C" fn(*mut sqlite3_context);
/// `sqlite3_result_int64`.
pub type ResultInt64Fn = unsafe extern "C" fn(*mut sqlite3_context, sqlite3_int64);
/// `sqlite3_result_double`.
pub type ResultDoubleFn = unsafe extern "C" fn(*mut sqlite3_context, f64);
/// `sqlite3_result_blob`.
pub type ResultBlobFn = unsafe extern "C" fn(*mut sqlite3_context, *const c_void, c_int, Destructor);
/// `sqlite3_result_text`.
pub type ResultTextFn = unsafe extern "C" fn(*mut sqlite3_context, *const c_char, c_int, Destructor);

/// A slot of `sqlite3_api_routines` this crate never calls. Every slot is one
/// function pointer wide; only the position matters.
pub type Slot = Option<unsafe extern "C" fn()>;

/// The leading part of `struct sqlite3_api_routines` from `sqlite3ext.h`,
/// through `auto_extension` (slot 192), the last routine this crate uses.
///
/// SQLite only ever appends to this struct, so a prefix is valid for every
/// SQLite that can load extensions. The order was generated from the header
/// and is re-checked field by field against `offsetof()` in `tests/layout.rs`.
/// This type is only ever read through a pointer SQLite hands us; never
/// construct or copy it.
#[repr(C)]
pub struct sqlite3_api_routines {
    /*   0 */ pub aggregate_context: Slot,
    /*   1 */ pub aggregate_count: Slot,
    /*   2 */ pub bind_blob: Slot,
    /*   3 */ pub bind_double: Slot,
    /*   4 */ pub bind_int: Slot,
    /*   5 */ pub bind_int64: Slot,
    /*   6 */ pub bind_null: Slot,
    /*   7 */ pub bind_parameter_count: Slot,
    /*   8 */ pub bind_parameter_index: Slot,
    /*   9 */ pub bind_parameter_name: Slot,
    /*  10 */ pub bind_text: Slot,
    /*  11 */ pub bind_text16: Slot,
    /*  12 */ pub bind_value: Slot,
    /*  13 */ pub busy_handler: Slot,
    /*  14 */ pub busy_timeout: Slot,
    /*  15 */ pub changes: Slot,
    /*  16 */ pub close: Slot,
    /*  17 */ pub collation_needed: Slot,
    /*  18 */ pub collation_needed16: Slot,
    /*  19 */ pub column_blob: Slot,
    /*  20 */ pub column_bytes: Slot,
    /*  21 */ pub column_bytes16: Slot,
    /*  22 */ pub column_count: Slot,
    /*  23 */ pub column_database_name: Slot,
    /*  24 */ pub column_database_name16: Slot,
    /*  25 */ pub column_decltype: Slot,
    /*  26 */ pub column_decltype16: Slot,
    /*  27 */ pub column_double: Slot,
    /*  28 */ pub column_int: Slot,
    /*  29 */ pub column_int64: Slot,
    /*  30 */ pub column_name: Slot,
    /*  31 */ pub column_name16: Slot,
    /*  32 */ pub column_origin_name: Slot,
    /*  33 */ pub column_origin_name16: Slot,
    /*  34 */ pub column_table_name: Slot,
    /*  35 */ pub column_table_name16: Slot,
    /*  36 */ pub column_text: Slot,
    /*  37 */ pub column_text16: Slot,
    /*  38 */ pub column_type: Slot,
    /*  39 */ pub column_value: Slot,
    /*  40 */ pub commit_hook: Slot,
    /*  41 */ pub complete: Slot,
    /*  42 */ pub complete16: Slot,
    /*  43 */ pub create_collation: Slot,
    /*  44 */ pub create_collation16: Slot,
    /*  45 */ pub create_function: Slot,
    /*  46 */ pub create_function16: Slot,
    /*  47 */ pub create_module: Slot,
    /*  48 */ pub data_count: Slot,
    /*  49 */ pub db_handle: Slot,
    /*  50 */ pub declare_vtab: Option<DeclareVtabFn>,
    /*  51 */ pub enable_shared_cache: Slot,
    /*  52 */ pub errcode: Slot,
    /*  53 */ pub errmsg: Slot,
    /*  54 */ pub errmsg16: Slot,
    /*  55 */ pub exec: Slot,
    /*  56 */ pub expired: Slot,
    /*  57 */ pub finalize: Slot,
    /*  58 */ pub free: Option<FreeFn>,
    /*  59 */ pub free_table: Slot,
    /*  60 */ pub get_autocommit: Slot,
    /*  61 */ pub get_auxdata: Slot,
    /*  62 */ pub get_table: Slot,
    /*  63 */ pub global_recover: Slot,
    /*  64 */ pub interruptx: Slot,
    /*  65 */ pub last_insert_rowid: Slot,
    /*  66 */ pub libversion: Slot,
    /*  67 */ pub libversion_number: Option<LibversionNumberFn>,
    /*  68 */ pub malloc: Option<MallocFn>,
    /*  69 */ pub mprintf: Slot,
    /*  70 */ pub open: Slot,
    /*  71 */ pub open16: Slot,
    /*  72 */ pub prepare: Slot,
    /*  73 */ pub prepare16: Slot,
    /*  74 */ pub profile: Slot,
    /*  75 */ pub progress_handler: Slot,
    /*  76 */ pub realloc: Slot,
    /*  77 */ pub reset: Slot,
    /*  78 */ pub result_blob: Option<ResultBlobFn>,
    /*  79 */ pub result_double: Option<ResultDoubleFn>,
    /*  80 */ pub result_error: Slot,
    /*  81 */ pub result_error16: Slot,
    /*  82 */ pub result_int: Slot,
    /*  83 */ pub result_int64: Option<ResultInt64Fn>,
    /*  84 */ pub result_null: Option<ResultNullFn>,
    /*  85 */ pub result_text: Option<ResultTextFn>,
    /*  86 */ pub result_text16: Slot,
    /*  87 */ pub result_text16be: Slot,
    /*  88 */ pub result_text16le: Slot,
    /*  89 */ pub result_value: Slot,
    /*  90 */ pub rollback_hook: Slot,
    /*  91 */ pub set_authorizer: Slot,
    /*  92 */ pub set_auxdata: Slot,
    /*  93 */ pub xsnprintf: Slot,
    /*  94 */ pub step: Slot,
    /*  95 */ pub table_column_metadata: Slot,
    /*  96 */ pub thread_cleanup: Slot,
    /*  97 */ pub total_changes: Slot,
    /*  98 */ pub trace: Slot,
    /*  99 */ pub transfer_bindings: Slot,
    /* 100 */ pub update_hook: Slot,
    /* 101 */ pub user_data: Slot,
    /* 102 */ pub value_blob: Option<ValueBlobFn>,
    /* 103 */ pub value_bytes: Option<ValueBytesFn>,
    /* 104 */ pub value_bytes16: Slot,
    /* 105 */ pub value_double: Option<ValueDoubleFn>,
    /* 106 */ pub value_int: Slot,
    /* 107 */ pub value_int64: Option<ValueInt64Fn>,
    /* 108 */ pub value_numeric_type: Slot,
    /* 109 */ pub value_text: Option<ValueTextFn>,
    /* 110 */ pub value_text16: Slot,
    /* 111 */ pub value_text16be: Slot,
    /* 112 */ pub value_text16le: Slot,
    /* 113 */ pub value_type: Option<ValueTypeFn>,
    /* 114 */ pub vmprintf: Slot,
    /* 115 */ pub overload_function: Slot,
    /* 116 */ pub prepare_v2: Slot,
    /* 117 */ pub prepare16_v2: Slot,
    /* 118 */ pub clear_bindings: Slot,
    /* 119 */ pub create_module_v2: Option<CreateModuleV2Fn>,
    /* 120 */ pub bind_zeroblob: Slot,
    /* 121 */ pub blob_bytes: Slot,
    /* 122 */ pub blob_close: Slot,
    /* 123 */ pub blob_open: Slot,
    /* 124 */ pub blob_read: Slot,
    /* 125 */ pub blob_write: Slot,
    /* 126 */ pub create_collation_v2: Slot,
    /* 127 */ pub file_control: Option<FileControlFn>,
    /* 128 */ pub memory_highwater: Slot,
    /* 129 */ pub memory_used: Slot,
    /* 130 */ pub mutex_alloc: Slot,
    /* 131 */ pub mutex_enter: Slot,
    /* 132 */ pub mutex_free: Slot,
    /* 133 */ pub mutex_leave: Slot,
    /* 134 */ pub mutex_try: Slot,
    /* 135 */ pub open_v2: Slot,
    /* 136 */ pub release_memory: Slot,
    /* 137 */ pub result_error_nomem: Slot,
    /* 138 */ pub result_error_toobig: Slot,
    /* 139 */ pub sleep: Slot,
    /* 140 */ pub soft_heap_limit: Slot,
    /* 141 */ pub vfs_find: Option<VfsFindFn>,
    /* 142 */ pub vfs_register: Option<VfsRegisterFn>,
    /* 143 */ pub vfs_unregister: Slot,
    /* 144 */ pub xthreadsafe: Slot,
    /* 145 */ pub result_zeroblob: Slot,
    /* 146 */ pub result_error_code: Slot,
    /* 147 */ pub test_control: Slot,
    /* 148 */ pub randomness: Slot,
    /* 149 */ pub context_db_handle: Slot,
    /* 150 */ pub extended_result_codes: Slot,
    /* 151 */ pub limit: Slot,
    /* 152 */ pub next_stmt: Slot,
    /* 153 */ pub sql: Slot,
    /* 154 */ pub status: Slot,
    /* 155 */ pub backup_finish: Slot,
    /* 156 */ pub backup_init: Slot,
    /* 157 */ pub backup_pagecount: Slot,
    /* 158 */ pub backup_remaining: Slot,
    /* 159 */ pub backup_step: Slot,
    /* 160 */ pub compileoption_get: Slot,
    /* 161 */ pub compileoption_used: Slot,
    /* 162 */ pub create_function_v2: Slot,
    /* 163 */ pub db_config: Slot,
    /* 164 */ pub db_mutex: Slot,
    /* 165 */ pub db_status: Slot,
    /* 166 */ pub extended_errcode: Slot,
    /* 167 */ pub log: Option<LogFn>,
    /* 168 */ pub soft_heap_limit64: Slot,
    /* 169 */ pub sourceid: Slot,
    /* 170 */ pub stmt_status: Slot,
    /* 171 */ pub strnicmp: Slot,
    /* 172 */ pub unlock_notify: Slot,
    /* 173 */ pub wal_autocheckpoint: Slot,
    /* 174 */ pub wal_checkpoint: Slot,
    /* 175 */ pub wal_hook: Slot,
    /* 176 */ pub blob_reopen: Slot,
    /* 177 */ pub vtab_config: Option<VtabConfigFn>,
    /* 178 */ pub vtab_on_conflict: Option<VtabOnConflictFn>,
    /* 179 */ pub close_v2: Slot,
    /* 180 */ pub db_filename: Option<DbFilenameFn>,
    /* 181 */ pub db_readonly: Slot,
    /* 182 */ pub db_release_memory: Slot,
    /* 183 */ pub errstr: Slot,
    /* 184 */ pub stmt_busy: Slot,
    /* 185 */ pub stmt_readonly: Slot,
    /* 186 */ pub stricmp: Slot,
    /* 187 */ pub uri_boolean: Slot,
    /* 188 */ pub uri_int64: Slot,
    /* 189 */ pub uri_parameter: Option<UriParameterFn>,
    /* 190 */ pub xvsnprintf: Slot,
    /* 191 */ pub wal_checkpoint_v2: Slot,
    /* 192 */ pub auto_extension: Option<AutoExtensionFn>,
}

/// Index (in pointer-sized slots) of each routine this crate reads from
/// `sqlite3_api_routines`, as counted in `sqlite3ext.h`.
pub const API_SLOT_LIBVERSION_NUMBER: usize = 67;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_MALLOC: usize = 68;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_VFS_FIND: usize = 141;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_VFS_REGISTER: usize = 142;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_LOG: usize = 167;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_URI_PARAMETER: usize = 189;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_CREATE_MODULE_V2: usize = 119;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_VTAB_CONFIG: usize = 177;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_DB_FILENAME: usize = 180;
/// See [`API_SLOT_LIBVERSION_NUMBER`].
pub const API_SLOT_AUTO_EXTENSION: usize = 192;
/// Number of slots declared.
pub const API_SLOTS_DECLARED: usize = 193;

// Result codes.
pub const SQLITE_OK: c_int = 0;
pub const SQLITE_ERROR: c_int = 1;
pub const SQLITE_INTERNAL: c_int = 2;
pub const SQLITE_BUSY: c_int = 5;
pub const SQLITE_READONLY: c_int = 8;
pub const SQLITE_NOMEM: c_int = 7;
pub const SQLITE_IOERR: c_int = 10;
pub const SQLITE_NOTFOUND: c_int = 12;
pub const SQLITE_CANTOPEN: c_int = 14;
pub const SQLITE_MISUSE: c_int = 21;
pub const SQLITE_NOTADB: c_int = 26;
pub const SQLITE_NOTICE: c_int = 27;
pub const SQLITE_WARNING: c_int = 28;
pub const SQLITE_FULL: c_int = 13;
pub const SQLITE_IOERR_FSYNC: c_int = SQLITE_IOERR | (4 << 8);
pub const SQLITE_IOERR_READ: c_int = SQLITE_IOERR | (1 << 8);
pub const SQLITE_IOERR_SHORT_READ: c_int = SQLITE_IOERR | (2 << 8);
pub const SQLITE_IOERR_WRITE: c_int = SQLITE_IOERR | (3 << 8);
pub const SQLITE_IOERR_TRUNCATE: c_int = SQLITE_IOERR | (6 << 8);
pub const SQLITE_IOERR_LOCK: c_int = SQLITE_IOERR | (15 << 8);
pub const SQLITE_IOERR_DELETE: c_int = SQLITE_IOERR | (10 << 8);
pub const SQLITE_IOERR_NOMEM: c_int = SQLITE_IOERR | (12 << 8);
pub const SQLITE_IOERR_SHMMAP: c_int = SQLITE_IOERR | (21 << 8);
pub const SQLITE_IOERR_DELETE_NOENT: c_int = SQLITE_IOERR | (23 << 8);
pub const SQLITE_OK_LOAD_PERMANENTLY: c_int = SQLITE_OK | (1 << 8);

// xOpen flags.
pub const SQLITE_OPEN_READONLY: c_int = 0x0000_0001;
pub const SQLITE_OPEN_READWRITE: c_int = 0x0000_0002;
pub const SQLITE_OPEN_CREATE: c_int = 0x0000_0004;
pub const SQLITE_OPEN_DELETEONCLOSE: c_int = 0x0000_0008;
pub const SQLITE_OPEN_EXCLUSIVE: c_int = 0x0000_0010;
pub const SQLITE_OPEN_MAIN_DB: c_int = 0x0000_0100;
pub const SQLITE_OPEN_TEMP_DB: c_int = 0x0000_0200;
pub const SQLITE_OPEN_TRANSIENT_DB: c_int = 0x0000_0400;
pub const SQLITE_OPEN_MAIN_JOURNAL: c_int = 0x0000_0800;
pub const SQLITE_OPEN_TEMP_JOURNAL: c_int = 0x0000_1000;
pub const SQLITE_OPEN_SUBJOURNAL: c_int = 0x0000_2000;
pub const SQLITE_OPEN_SUPER_JOURNAL: c_int = 0x0000_4000;
pub const SQLITE_OPEN_WAL: c_int = 0x0008_0000;

// Lock levels.
pub const SQLITE_LOCK_NONE: c_int = 0;
pub const SQLITE_LOCK_SHARED: c_int = 1;
pub const SQLITE_LOCK_RESERVED: c_int = 2;
pub const SQLITE_LOCK_PENDING: c_int = 3;
pub const SQLITE_LOCK_EXCLUSIVE: c_int = 4;

// xAccess flags.
pub const SQLITE_ACCESS_EXISTS: c_int = 0;
pub const SQLITE_ACCESS_READWRITE: c_int = 1;
pub const SQLITE_ACCESS_READ: c_int = 2;

// Device characteristics and file controls a later main-db backend needs.
pub const SQLITE_IOCAP_ATOMIC: c_int = 0x0000_0001;
pub const SQLITE_IOCAP_SAFE_APPEND: c_int = 0x0000_0200;
pub const SQLITE_IOCAP_SEQUENTIAL: c_int = 0x0000_0400;
pub const SQLITE_IOCAP_POWERSAFE_OVERWRITE: c_int = 0x0000_1000;
pub const SQLITE_IOCAP_BATCH_ATOMIC: c_int = 0x0000_4000;
pub const SQLITE_FCNTL_VFSNAME: c_int = 12;
pub const SQLITE_FCNTL_PRAGMA: c_int = 14;
pub const SQLITE_FCNTL_SYNC: c_int = 21;
pub const SQLITE_FCNTL_COMMIT_PHASETWO: c_int = 22;
pub const SQLITE_FCNTL_PDB: c_int = 30;
/// `sqlite3_file_control` answers it with the `sqlite3_vfs` of the database's file.
pub const SQLITE_FCNTL_VFS_POINTER: c_int = 27;
/// Asks whether the database file was renamed or deleted since it was opened (an `int*`).
pub const SQLITE_FCNTL_HAS_MOVED: c_int = 20;
/// Asks for the file's lock level (an `int*`; SQLite's debug and test builds).
pub const SQLITE_FCNTL_LOCKSTATE: c_int = 1;
/// Asks for the errno of the file's last failed system call (an `int*`).
pub const SQLITE_FCNTL_LAST_ERRNO: c_int = 4;
/// Asks for a name for a temporary file (a `char**`, set to a `sqlite3_malloc`ed string).
pub const SQLITE_FCNTL_TEMPFILENAME: c_int = 16;
pub const SQLITE_FCNTL_BEGIN_ATOMIC_WRITE: c_int = 31;
pub const SQLITE_FCNTL_COMMIT_ATOMIC_WRITE: c_int = 32;
pub const SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE: c_int = 33;

// Virtual tables.
pub const SQLITE_CONSTRAINT: c_int = 19;
pub const SQLITE_CONSTRAINT_PRIMARYKEY: c_int = SQLITE_CONSTRAINT | (6 << 8);
pub const SQLITE_CORRUPT: c_int = 11;
pub const SQLITE_MISMATCH: c_int = 20;
pub const SQLITE_INTEGER: c_int = 1;
pub const SQLITE_FLOAT: c_int = 2;
pub const SQLITE_TEXT: c_int = 3;
pub const SQLITE_BLOB: c_int = 4;
pub const SQLITE_NULL: c_int = 5;
pub const SQLITE_INDEX_CONSTRAINT_EQ: u8 = 2;
pub const SQLITE_INDEX_CONSTRAINT_GT: u8 = 4;
pub const SQLITE_INDEX_CONSTRAINT_LE: u8 = 8;
pub const SQLITE_INDEX_CONSTRAINT_LT: u8 = 16;
pub const SQLITE_INDEX_CONSTRAINT_GE: u8 = 32;
pub const SQLITE_INDEX_SCAN_UNIQUE: c_int = 1;
pub const SQLITE_VTAB_CONSTRAINT_SUPPORT: c_int = 1;
pub const SQLITE_ROLLBACK: c_int = 1;
pub const SQLITE_IGNORE: c_int = 2;
pub const SQLITE_FAIL: c_int = 3;
pub const SQLITE_ABORT: c_int = 4;
pub const SQLITE_REPLACE: c_int = 5;

/// `struct sqlite3_vtab`: the base every virtual table instance subclasses.
#[repr(C)]
pub struct sqlite3_vtab {
    pub pModule: *const sqlite3_module,
    pub nRef: c_int,
    pub zErrMsg: *mut c_char,
}

/// `struct sqlite3_vtab_cursor`: the base every cursor subclasses.
#[repr(C)]
pub struct sqlite3_vtab_cursor {
    pub pVtab: *mut sqlite3_vtab,
}

/// `xCreate` / `xConnect`.
pub type VtabConstructor = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    c_int,
    *const *const c_char,
    *mut *mut sqlite3_vtab,
    *mut *mut c_char,
) -> c_int;

/// `struct sqlite3_module` through `xShadowName` (version 3; this crate
/// registers version 2 and leaves `xShadowName` null).
#[repr(C)]
pub struct sqlite3_module {
    pub iVersion: c_int,
    pub xCreate: Option<VtabConstructor>,
    pub xConnect: Option<VtabConstructor>,
    pub xBestIndex: Option<unsafe extern "C" fn(*mut sqlite3_vtab, *mut sqlite3_index_info) -> c_int>,
    pub xDisconnect: Option<unsafe extern "C" fn(*mut sqlite3_vtab) -> c_int>,
    pub xDestroy: Option<unsafe extern "C" fn(*mut sqlite3_vtab) -> c_int>,
    pub xOpen: Option<unsafe extern "C" fn(*mut sqlite3_vtab, *mut *mut sqlite3_vtab_cursor) -> c_int>,
    pub xClose: Option<unsafe extern "C" fn(*mut sqlite3_vtab_cursor) -> c_int>,
    pub xFilter: Option<
        unsafe extern "C" fn(
            *mut sqlite3_vtab_cursor,
            c_int,
            *const c_char,
            c_int,
            *mut *mut sqlite3_value,
        ) -> c_int,
    >,
    pub xNext: Option<unsafe extern "C" fn(*mut sqlite3_vtab_cursor) -> c_int>,
    pub xEof: Option<unsafe extern "C" fn(*mut sqlite3_vtab_cursor) -> c_int>,
    pub xColumn: Option<unsafe extern "C" fn(*mut sqlite3_vtab_cursor, *mut sqlite3_context, c_int) -> c_int>,
    pub xRowid: Option<unsafe extern "C" fn(*mut sqlite3_vtab_cursor, *mut sqlite3_int64) -> c_int>,
    pub xUpdate: Option<
        unsafe extern "C" fn(*mut sqlite3_vtab, c_int, *mut *mut sqlite3_value, *mut sqlite3_int64) -> c_int,
    >,
    pub xBegin: Option<unsafe extern "C" fn(*mut sqlite3_vtab) -> c_int>,
    pub xSync: Option<unsafe extern "C" fn(*mut sqlite3_vtab) -> c_int>,
    pub xCommit: Option<unsafe extern "C" fn(*mut sqlite3_vtab) -> c_int>,
    pub xRollback: Option<unsafe extern "C" fn(*mut sqlite3_vtab) -> c_int>,
    pub xFindFunction: Slot,
    pub xRename: Option<unsafe extern "C" fn(*mut sqlite3_vtab, *const c_char) -> c_int>,
    // version 2
    pub xSavepoint: Option<unsafe extern "C" fn(*mut sqlite3_vtab, c_int) -> c_int>,
    pub xRelease: Option<unsafe extern "C" fn(*mut sqlite3_vtab, c_int) -> c_int>,
    pub xRollbackTo: Option<unsafe extern "C" fn(*mut sqlite3_vtab, c_int) -> c_int>,
    // version 3
    pub xShadowName: Option<unsafe extern "C" fn(*const c_char) -> c_int>,
}

/// `struct sqlite3_index_constraint` (inside `sqlite3_index_info`).
#[repr(C)]
pub struct sqlite3_index_constraint {
    pub iColumn: c_int,
    pub op: u8,
    pub usable: u8,
    pub iTermOffset: c_int,
}

/// `struct sqlite3_index_orderby`.
#[repr(C)]
pub struct sqlite3_index_orderby {
    pub iColumn: c_int,
    pub desc: u8,
}

/// `struct sqlite3_index_constraint_usage`.
#[repr(C)]
pub struct sqlite3_index_constraint_usage {
    pub argvIndex: c_int,
    pub omit: u8,
}

/// `struct sqlite3_index_info` (all fields through `colUsed`, SQLite 3.10+).
#[repr(C)]
pub struct sqlite3_index_info {
    pub nConstraint: c_int,
    pub aConstraint: *mut sqlite3_index_constraint,
    pub nOrderBy: c_int,
    pub aOrderBy: *mut sqlite3_index_orderby,
    pub aConstraintUsage: *mut sqlite3_index_constraint_usage,
    pub idxNum: c_int,
    pub idxStr: *mut c_char,
    pub needToFreeIdxStr: c_int,
    pub orderByConsumed: c_int,
    pub estimatedCost: f64,
    pub estimatedRows: sqlite3_int64,
    pub idxFlags: c_int,
    pub colUsed: u64,
}
