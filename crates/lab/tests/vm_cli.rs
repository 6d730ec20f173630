//! The F2FS backend (`onesync-f2fs`, mode `maw`): its functional tests on a real F2FS kernel
//! in the VM (`onesync-lab vm test`), and its refusals on the host, which has no F2FS.

mod common;

use common::{onesync, said};

/// Boots Debian's kernel in qemu on a fresh F2FS image and runs the functional tests of the
/// backend there (commit, rollback, savepoints, a failing multi-row insert, ATTACH, a process
/// dying mid-transaction, Debian's sqlite3 CLI loading libonesync.so, ...). Installs qemu and the kernel with apt if they are missing, so
/// it needs root; CI runs as root.
#[test]
fn the_f2fs_backend_passes_its_functional_tests_in_the_vm() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: needs root (apt-get install qemu-system-x86 linux-image-amd64 ...)");
        return;
    }
    let output = onesync(&["vm", "test"]);
    let text = said(&output);
    assert!(output.status.success(), "vm test failed:\n{text}");
    for case in [
        "commit-is-one-atomic-write",
        "rollback-after-spill",
        "savepoints",
        "failing-multi-row-insert",
        "attach",
        "process-dies-mid-transaction",
        "debian-sqlite3-cli-loads-libonesync",
    ] {
        assert!(
            text.contains(&format!("ok {case}\n")),
            "no 'ok {case}' in:\n{text}"
        );
    }
    assert!(text.contains(" 0 failed"), "{text}");
}

/// Off F2FS the lab's maw mode stops with the backend's clear reason.
#[test]
fn maw_is_refused_off_f2fs_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = onesync(&[
        "bench",
        "insert",
        "--mode",
        "maw",
        "--txns",
        "1",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let text = said(&output);
    assert!(!output.status.success(), "maw ran off F2FS:\n{text}");
    assert!(text.contains("not on F2FS"), "no clear reason:\n{text}");
}

/// The guest's functional tests fail off F2FS (they can fail: the negative control).
#[test]
fn the_functional_tests_fail_off_f2fs() {
    let dir = tempfile::tempdir().unwrap();
    let output = onesync(&["__vm-selftest", "--dir", dir.path().to_str().unwrap()]);
    let text = said(&output);
    assert!(!output.status.success(), "the selftest passed off F2FS:\n{text}");
    assert!(text.contains("FAILED f2fs-atomic-write-feature"), "{text}");
    assert!(text.contains("FAILED commit-is-one-atomic-write"), "{text}");
}
