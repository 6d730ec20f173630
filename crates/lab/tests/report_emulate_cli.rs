//! `onesync-lab report --emulate PRESET`: the comparison across emulated devices, run as a user
//! would on a tiny workload (needs root and /dev/fuse for the emulated device, and mkfs.ext4).

use std::time::Instant;

mod common;

use common::{onesync, said};

#[test]
fn report_on_an_emulated_nvme_writes_the_preset_section_and_sweep_charts() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: report --emulate needs root (loop devices, a FUSE mount)");
        return;
    }
    if let Some(reason) = onesync_device::unavailable_reason() {
        eprintln!("SKIPPED: no emulated device here: {reason}");
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = onesync(&[
        "report",
        "--out",
        out_dir.path().to_str().unwrap(),
        "--emulate",
        "nvme",
        "--txns",
        "5",
    ]);
    let text = said(&output);
    assert!(output.status.success(), "report --emulate nvme failed:\n{text}");
    eprintln!("report --emulate nvme --txns 5 took {:?}", started.elapsed());

    let md = std::fs::read_to_string(out_dir.path().join("report.md")).unwrap();
    assert!(md.contains("## nvme\n"), "no nvme section:\n{md}");
    assert!(md.contains("emulated nvme device (flush 1000 µs"), "{md}");
    for mode in [
        "delete",
        "persist",
        "wal",
        "onesync",
        "wal-normal",
        "onesync-normal",
        "onesync-off",
    ] {
        assert!(md.contains(&format!("| {mode} |")), "{mode} missing:\n{md}");
    }
    // NORMAL and OFF in their own tables (insert and dbbench), against wal-normal.
    let normal = "#### atomic, durable shortly after COMMIT (synchronous=NORMAL and OFF)";
    assert_eq!(md.matches(normal).count(), 2, "{md}");
    let dbbench = &md[md.find("### dbbench").unwrap()..];
    assert!(dbbench.contains("| onesync-normal |"), "{md}");
    assert!(
        !dbbench.contains("| onesync-off |"),
        "onesync-off ran dbbench:\n{md}"
    );
    assert!(md.contains("| 1.00 (wal-normal) |"), "{md}");
    for line in md
        .lines()
        .filter(|l| l.starts_with("| onesync-normal |") || l.starts_with("| onesync-off |"))
    {
        assert!(line.contains(" (wal-normal) |"), "not against wal-normal: {line}");
    }
    // Not crash-safe: not part of the comparison across devices.
    assert!(!md.contains("| memory |") && !md.contains("| off |"), "{md}");
    assert!(md.contains("### dbbench, 4 threads"), "{md}");

    let html = std::fs::read_to_string(out_dir.path().join("report.html")).unwrap();
    // TPS and p99.9 against flush latency, for insert and for dbbench.
    assert_eq!(
        html.matches("<svg").count(),
        4,
        "{}",
        &html[..html.len().min(2000)]
    );
    assert!(html.contains("against flush latency"));
    assert!(html.contains("<td>onesync</td>"));
}

/// --emulate and --no-fs contradict each other: a clear error, not a silent choice.
#[test]
fn report_refuses_emulate_with_no_fs() {
    let out_dir = tempfile::tempdir().unwrap();
    let output = onesync(&[
        "report",
        "--out",
        out_dir.path().to_str().unwrap(),
        "--emulate",
        "nvme",
        "--no-fs",
    ]);
    let text = said(&output);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("cannot be used with"), "{text}");
}
