//! The module's name and the schema every table declares: its columns' numbers, and the
//! `idxNum` bits a plan hands to `xFilter`.

use std::ffi::{c_int, CStr};

/// The name to use in `CREATE VIRTUAL TABLE ... USING mvbt(...)`.
pub const MVBT_MODULE_NAME: &str = "mvbt";

/// The schema every `mvbt` table declares. `key` is an ordinary column to
/// SQLite (a virtual table's INTEGER PRIMARY KEY is not a rowid alias), so the
/// rowid is reported equal to it.
pub(crate) const SCHEMA: &CStr = c"CREATE TABLE x(key INTEGER PRIMARY KEY, value BLOB, as_of HIDDEN)";
pub(crate) const COL_ROWID: c_int = -1;
pub(crate) const COL_KEY: c_int = 0;
pub(crate) const COL_VALUE: c_int = 1;
pub(crate) const COL_AS_OF: c_int = 2;

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
