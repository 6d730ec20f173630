//! Checks the hand-declared C layouts in `src/sys/ffi.rs` against the system's
//! `sqlite3.h` / `sqlite3ext.h` (Debian: libsqlite3-dev): a C probe prints
//! `offsetof`/`sizeof`/constant values, and each must equal the Rust side.
//!
//! For `sqlite3_api_routines` the field names are read from `src/sys/ffi.rs` in
//! declaration order, so a field declared in the wrong slot, or a slot
//! missing, fails here by name.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use onesync_vfs::ffi::*;

const HEADER: &str = "/usr/include/sqlite3ext.h";

macro_rules! rust_offsets {
    ($map:ident, $ty:ident: $($field:ident),+ $(,)?) => {
        $( $map.insert(format!("{}.{}", stringify!($ty), stringify!($field)), offset_of!($ty, $field) as i64); )+
        $map.insert(format!("sizeof.{}", stringify!($ty)), size_of::<$ty>() as i64);
    };
}

macro_rules! rust_consts {
    ($map:ident: $($name:ident),+ $(,)?) => {
        $( $map.insert(stringify!($name).to_owned(), $name as i64); )+
    };
}

/// `pub NAME:` fields of `pub struct $name {` in src/sys/ffi.rs, in order.
fn declared_fields(src: &str, name: &str) -> Vec<String> {
    let start = src
        .find(&format!("pub struct {name} {{"))
        .expect("struct declared");
    let body = &src[start..];
    let body = &body[..body.find("\n}").expect("struct end")];
    body.lines()
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("/*")
                .map_or(l, |r| r.split("*/").nth(1).unwrap_or("").trim());
            l.strip_prefix("pub ")?.split(':').next().map(str::to_owned)
        })
        .collect()
}

#[test]
fn layouts_and_constants_match_the_sqlite_headers() {
    if !Path::new(HEADER).exists() {
        eprintln!("SKIPPED: {HEADER} not installed (apt-get install libsqlite3-dev)");
        return;
    }
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/sys/ffi.rs")).unwrap();
    let api_fields = declared_fields(&src, "sqlite3_api_routines");
    assert_eq!(
        api_fields.len(),
        API_SLOTS_DECLARED,
        "slots through auto_extension"
    );
    let vfs_fields = declared_fields(&src, "sqlite3_vfs");
    let io_fields = declared_fields(&src, "sqlite3_io_methods");
    let file_fields = declared_fields(&src, "sqlite3_file");
    let vtab_structs: Vec<(&str, Vec<String>)> = [
        "sqlite3_module",
        "sqlite3_vtab",
        "sqlite3_vtab_cursor",
        "sqlite3_index_info",
        "sqlite3_index_constraint",
        "sqlite3_index_orderby",
        "sqlite3_index_constraint_usage",
    ]
    .into_iter()
    .map(|name| (name, declared_fields(&src, name)))
    .collect();

    let mut rust = BTreeMap::new();
    // Every api slot is one pointer wide, so slot i sits at i * pointer size.
    let ptr = size_of::<usize>() as i64;
    for (i, f) in api_fields.iter().enumerate() {
        rust.insert(format!("sqlite3_api_routines.{f}"), i as i64 * ptr);
    }
    // The routines actually called, checked by real offset_of! too.
    let used = [
        (
            "libversion_number",
            offset_of!(sqlite3_api_routines, libversion_number),
            API_SLOT_LIBVERSION_NUMBER,
        ),
        (
            "malloc",
            offset_of!(sqlite3_api_routines, malloc),
            API_SLOT_MALLOC,
        ),
        (
            "vfs_find",
            offset_of!(sqlite3_api_routines, vfs_find),
            API_SLOT_VFS_FIND,
        ),
        (
            "vfs_register",
            offset_of!(sqlite3_api_routines, vfs_register),
            API_SLOT_VFS_REGISTER,
        ),
        ("log", offset_of!(sqlite3_api_routines, log), API_SLOT_LOG),
        (
            "uri_parameter",
            offset_of!(sqlite3_api_routines, uri_parameter),
            API_SLOT_URI_PARAMETER,
        ),
        (
            "create_module_v2",
            offset_of!(sqlite3_api_routines, create_module_v2),
            API_SLOT_CREATE_MODULE_V2,
        ),
        (
            "vtab_config",
            offset_of!(sqlite3_api_routines, vtab_config),
            API_SLOT_VTAB_CONFIG,
        ),
        (
            "db_filename",
            offset_of!(sqlite3_api_routines, db_filename),
            API_SLOT_DB_FILENAME,
        ),
        (
            "auto_extension",
            offset_of!(sqlite3_api_routines, auto_extension),
            API_SLOT_AUTO_EXTENSION,
        ),
    ];
    for (name, off, slot) in used {
        assert_eq!(off as i64, slot as i64 * ptr, "{name}");
        assert_eq!(
            rust[&format!("sqlite3_api_routines.{name}")],
            off as i64,
            "{name}"
        );
    }
    assert_eq!(
        size_of::<sqlite3_api_routines>() as i64,
        API_SLOTS_DECLARED as i64 * ptr
    );

    rust_offsets!(rust, sqlite3_file: pMethods);
    rust_offsets!(rust, sqlite3_io_methods:
        iVersion, xClose, xRead, xWrite, xTruncate, xSync, xFileSize, xLock, xUnlock,
        xCheckReservedLock, xFileControl, xSectorSize, xDeviceCharacteristics,
        xShmMap, xShmLock, xShmBarrier, xShmUnmap, xFetch, xUnfetch);
    rust_offsets!(rust, sqlite3_vfs:
        iVersion, szOsFile, mxPathname, pNext, zName, pAppData, xOpen, xDelete, xAccess,
        xFullPathname, xDlOpen, xDlError, xDlSym, xDlClose, xRandomness, xSleep,
        xCurrentTime, xGetLastError, xCurrentTimeInt64, xSetSystemCall, xGetSystemCall,
        xNextSystemCall);
    rust_offsets!(rust, sqlite3_module:
        iVersion, xCreate, xConnect, xBestIndex, xDisconnect, xDestroy, xOpen, xClose, xFilter,
        xNext, xEof, xColumn, xRowid, xUpdate, xBegin, xSync, xCommit, xRollback, xFindFunction,
        xRename, xSavepoint, xRelease, xRollbackTo, xShadowName);
    rust_offsets!(rust, sqlite3_vtab: pModule, nRef, zErrMsg);
    rust_offsets!(rust, sqlite3_vtab_cursor: pVtab);
    rust_offsets!(rust, sqlite3_index_info:
        nConstraint, aConstraint, nOrderBy, aOrderBy, aConstraintUsage, idxNum, idxStr,
        needToFreeIdxStr, orderByConsumed, estimatedCost, estimatedRows, idxFlags, colUsed);
    rust_offsets!(rust, sqlite3_index_constraint: iColumn, op, usable, iTermOffset);
    rust_offsets!(rust, sqlite3_index_orderby: iColumn, desc);
    rust_offsets!(rust, sqlite3_index_constraint_usage: argvIndex, omit);
    rust_consts!(rust:
        SQLITE_CONSTRAINT, SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CORRUPT, SQLITE_MISMATCH,
        SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL,
        SQLITE_INDEX_CONSTRAINT_EQ, SQLITE_INDEX_CONSTRAINT_GT, SQLITE_INDEX_CONSTRAINT_LE,
        SQLITE_INDEX_CONSTRAINT_LT, SQLITE_INDEX_CONSTRAINT_GE, SQLITE_INDEX_SCAN_UNIQUE,
        SQLITE_VTAB_CONSTRAINT_SUPPORT, SQLITE_ROLLBACK, SQLITE_IGNORE, SQLITE_FAIL, SQLITE_ABORT,
        SQLITE_REPLACE);
    rust_consts!(rust:
        SQLITE_OK, SQLITE_ERROR, SQLITE_INTERNAL, SQLITE_FULL, SQLITE_BUSY, SQLITE_READONLY, SQLITE_NOTADB, SQLITE_NOTICE, SQLITE_IOERR_FSYNC, SQLITE_NOMEM, SQLITE_IOERR, SQLITE_NOTFOUND,
        SQLITE_CANTOPEN, SQLITE_MISUSE, SQLITE_IOERR_READ, SQLITE_IOERR_SHORT_READ,
        SQLITE_IOERR_WRITE, SQLITE_IOERR_TRUNCATE, SQLITE_IOERR_DELETE, SQLITE_IOERR_NOMEM, SQLITE_IOERR_LOCK,
        SQLITE_IOERR_SHMMAP, SQLITE_IOERR_DELETE_NOENT, SQLITE_OK_LOAD_PERMANENTLY,
        SQLITE_OPEN_READONLY, SQLITE_OPEN_READWRITE, SQLITE_OPEN_CREATE,
        SQLITE_OPEN_DELETEONCLOSE, SQLITE_OPEN_EXCLUSIVE, SQLITE_OPEN_MAIN_DB,
        SQLITE_OPEN_TEMP_DB, SQLITE_OPEN_TRANSIENT_DB, SQLITE_OPEN_MAIN_JOURNAL,
        SQLITE_OPEN_TEMP_JOURNAL, SQLITE_OPEN_SUBJOURNAL, SQLITE_OPEN_SUPER_JOURNAL,
        SQLITE_OPEN_WAL, SQLITE_LOCK_NONE, SQLITE_LOCK_SHARED, SQLITE_LOCK_RESERVED,
        SQLITE_LOCK_PENDING, SQLITE_LOCK_EXCLUSIVE, SQLITE_ACCESS_EXISTS,
        SQLITE_ACCESS_READWRITE, SQLITE_ACCESS_READ, SQLITE_IOCAP_ATOMIC,
        SQLITE_IOCAP_SAFE_APPEND, SQLITE_IOCAP_SEQUENTIAL, SQLITE_IOCAP_POWERSAFE_OVERWRITE,
        SQLITE_IOCAP_BATCH_ATOMIC, SQLITE_FCNTL_VFSNAME, SQLITE_FCNTL_PRAGMA, SQLITE_FCNTL_SYNC, SQLITE_FCNTL_COMMIT_PHASETWO, SQLITE_FCNTL_PDB, SQLITE_FCNTL_HAS_MOVED, SQLITE_FCNTL_LOCKSTATE, SQLITE_FCNTL_LAST_ERRNO, SQLITE_FCNTL_TEMPFILENAME, SQLITE_FCNTL_BEGIN_ATOMIC_WRITE,
        SQLITE_FCNTL_COMMIT_ATOMIC_WRITE, SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE);

    // The same keys, computed by the C compiler from the headers.
    let mut c =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include <sqlite3ext.h>\nint main(void){\n");
    let mut all_structs = vec![
        ("sqlite3_api_routines", &api_fields),
        ("sqlite3_vfs", &vfs_fields),
        ("sqlite3_io_methods", &io_fields),
        ("sqlite3_file", &file_fields),
    ];
    all_structs.extend(vtab_structs.iter().map(|(n, f)| (*n, f)));
    for (ty, fields) in all_structs {
        for f in fields {
            c += &format!("printf(\"{ty}.{f} %ld\\n\", (long)offsetof(struct {ty}, {f}));\n");
        }
        if ty != "sqlite3_api_routines" {
            c += &format!("printf(\"sizeof.{ty} %ld\\n\", (long)sizeof(struct {ty}));\n");
        }
    }
    for key in rust.keys().filter(|k| k.starts_with("SQLITE_")) {
        c += &format!("printf(\"{key} %ld\\n\", (long)({key}));\n");
    }
    c += "return 0;}\n";

    let dir = tempfile::tempdir().unwrap();
    let probe_c = dir.path().join("probe.c");
    let probe = dir.path().join("probe");
    std::fs::write(&probe_c, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .arg(&probe_c)
        .arg("-o")
        .arg(&probe)
        .status()
        .expect("run cc");
    assert!(
        status.success(),
        "probe failed to compile: a field name is not in the header?"
    );
    let out = Command::new(&probe).output().unwrap();
    let c_values: BTreeMap<String, i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();

    let mut mismatches = Vec::new();
    for (k, v) in &rust {
        match c_values.get(k) {
            Some(cv) if cv == v => {}
            other => mismatches.push(format!("{k}: rust {v}, C {other:?}")),
        }
    }
    assert!(
        mismatches.is_empty(),
        "layout mismatches:\n{}",
        mismatches.join("\n")
    );
    println!("{} offsets, sizes and constants match {HEADER}", rust.len());
}
