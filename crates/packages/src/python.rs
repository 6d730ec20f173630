//! The Python wheel: `onesync-VERSION-py3-none-manylinux_X_Y_x86_64.whl`.
//!
//! A wheel is a zip (PEP 427): the package `onesync/` (the Python sources from
//! `bindings/python/onesync/` and the stripped `libonesync.so`), the stripped `onesync`
//! command as `onesync-VERSION.data/scripts/onesync` (pip installs it on PATH, the venv's
//! `bin/`), and `onesync-VERSION.dist-info/` with METADATA, WHEEL and RECORD (every file's
//! sha256 and size). The tag is `py3-none` (pure Python calling the library through
//! `sqlite3`/`ctypes`: any CPython 3) on the manylinux platform that the library's and the
//! command's glibc symbol versions allow. Entries carry a fixed date, so the same inputs give the same wheel.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use crate::workspace::{manylinux_tag, Workspace};

/// Where the package's Python files live, relative to the workspace root.
const SOURCES: &str = "bindings/python";
const SUMMARY: &str = "onesync: a failure-atomic SQLite VFS (page store) for Python's sqlite3 and apsw";

/// Builds the wheel into `out`; returns its path.
pub fn build(ws: &Workspace, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let version = ws.version();
    let extension = ws.stripped_extension(out)?;
    let command = ws.stripped_command(out)?;
    let tag = format!("py3-none-{}", manylinux_tag(extension.glibc.max(command.glibc)));

    // (path in the wheel, contents, executable)
    let mut files: Vec<(String, Vec<u8>, bool)> = Vec::new();
    for rel in ws.files_under(&format!("{SOURCES}/onesync"))? {
        let src = ws.root.join(SOURCES).join("onesync").join(&rel);
        let name = rel.to_str().context("non-UTF-8 file name")?;
        if name.ends_with(".so") {
            continue; // a library left over from trying the sources by hand; we ship ours
        }
        let bytes = std::fs::read(&src).with_context(|| format!("reading {}", src.display()))?;
        files.push((format!("onesync/{name}"), bytes, false));
    }
    files.push(("onesync/libonesync.so".into(), extension.bytes, true));
    // A script that is not Python (no `#!python` line): pip copies it as it is.
    files.push((
        format!("onesync-{version}.data/scripts/onesync"),
        command.bytes,
        true,
    ));

    let readme = std::fs::read_to_string(ws.root.join(SOURCES).join("README.md"))
        .context("reading bindings/python/README.md")?;
    let dist_info = format!("onesync-{version}.dist-info");
    files.push((
        format!("{dist_info}/METADATA"),
        metadata(version, &readme).into_bytes(),
        false,
    ));
    let wheel = format!(
        "Wheel-Version: 1.0\nGenerator: onesync-package {version}\nRoot-Is-Purelib: false\nTag: {tag}\n"
    );
    files.push((format!("{dist_info}/WHEEL"), wheel.into_bytes(), false));
    let record_name = format!("{dist_info}/RECORD");
    let record = record(&files, &record_name);
    files.push((record_name, record.into_bytes(), false));

    let path = out.join(format!("onesync-{version}-{tag}.whl"));
    write_zip(&path, &files).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Core metadata 2.1, the README as the long description.
fn metadata(version: &str, readme: &str) -> String {
    format!(
        "Metadata-Version: 2.1\n\
         Name: onesync\n\
         Version: {version}\n\
         Summary: {SUMMARY}\n\
         License: MIT OR Apache-2.0\n\
         Requires-Python: >=3.8\n\
         Classifier: Operating System :: POSIX :: Linux\n\
         Classifier: Programming Language :: Python :: 3\n\
         Classifier: Topic :: Database\n\
         Description-Content-Type: text/markdown\n\
         \n\
         {readme}"
    )
}

/// RECORD: `path,sha256=<urlsafe base64, no padding>,size` per file, and itself unhashed.
fn record(files: &[(String, Vec<u8>, bool)], own_name: &str) -> String {
    let mut out = String::new();
    for (name, bytes, _) in files {
        let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(bytes));
        out.push_str(&format!("{name},sha256={digest},{}\n", bytes.len()));
    }
    out.push_str(&format!("{own_name},,\n"));
    out
}

fn write_zip(path: &Path, files: &[(String, Vec<u8>, bool)]) -> Result<()> {
    let mut zip = ZipWriter::new(std::fs::File::create(path)?);
    for (name, bytes, executable) in files {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .last_modified_time(DateTime::default()) // 1980-01-01: reproducible
            .unix_permissions(if *executable { 0o755 } else { 0o644 });
        zip.start_file(name.as_str(), options)?;
        zip.write_all(bytes)?;
    }
    zip.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_lines() {
        let files = vec![("a/b.py".to_string(), b"hello".to_vec(), false)];
        assert_eq!(
            record(&files, "x.dist-info/RECORD"),
            "a/b.py,sha256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ,5\nx.dist-info/RECORD,,\n"
        );
    }
}
