//! Helpers for programs that run inside the guest (as root, on the mounted image): reporting
//! a list of test cases the way the host reads it, and reading from the disk rather than
//! from the page cache.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

/// One named check, given a fresh directory of its own.
pub type Case = fn(&Path) -> Result<()>;

/// Runs each case in `dir/NAME` (made empty first), printing "ok NAME" or "FAILED NAME:
/// reason" as each ends and then "SUITE: P passed, F failed"; succeeds only if all passed.
pub fn run_cases(suite: &str, dir: &Path, cases: &[(&str, Case)]) -> Result<ExitCode> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (mut passed, mut failed) = (0, 0);
    for &(name, case) in cases {
        let case_dir = dir.join(name);
        fs::create_dir_all(&case_dir)?;
        match case(&case_dir) {
            Ok(()) => {
                passed += 1;
                println!("ok {name}");
            }
            Err(e) => {
                failed += 1;
                println!("FAILED {name}: {e:#}");
            }
        }
        std::io::stdout().flush()?;
    }
    println!("{suite}: {passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Drops the page cache, so what is read next comes from the disk (needs root; the guest is).
pub fn drop_caches() -> Result<()> {
    fs::write("/proc/sys/vm/drop_caches", "3").context("writing /proc/sys/vm/drop_caches")
}
