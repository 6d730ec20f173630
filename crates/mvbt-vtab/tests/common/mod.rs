//! Shared by the tests that run programs: the `libonesync_mvbt_vtab.so` built for this test
//! run; program probes and the system `sqlite3` CLI come from the VFS's tests' helpers.

use std::path::PathBuf;

#[path = "../../../vfs/tests/common/mod.rs"]
mod vfs_common;
pub use vfs_common::{have, sqlite3_script};

/// target/<profile>/libonesync_mvbt_vtab.so: cargo builds this crate's cdylib alongside the
/// rlib this test links, one directory above the test binary.
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let lib = dir.join("libonesync_mvbt_vtab.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}
