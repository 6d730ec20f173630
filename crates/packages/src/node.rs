//! The npm package: `onesync-VERSION.tgz`, laid out as `npm pack` does (every file under
//! `package/`): package.json (from `bindings/node/package.json`, its version set to the
//! workspace's), index.js, index.d.ts, README.md, the stripped `lib/libonesync.so` and the
//! stripped `onesync` command as `bin/onesync` (package.json's `bin`: npm links it as
//! `node_modules/.bin/onesync`, so `npx onesync` runs it).
//! Entries carry npm's fixed date, owner 0 and fixed modes, so the same inputs give the
//! same tarball.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::workspace::Workspace;

const SOURCES: &str = "bindings/node";
/// The version `bindings/node/package.json` carries in the repository; the build replaces it.
const VERSION_PLACEHOLDER: &str = "\"version\": \"0.0.0-workspace\"";
/// The date `npm pack` gives every entry (1985-10-26T08:15:00Z).
const NPM_MTIME: u64 = 499_162_500;

/// Builds the package into `out`; returns its path.
pub fn build(ws: &Workspace, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let version = ws.version();
    let extension = ws.stripped_extension(out)?;
    let command = ws.stripped_command(out)?;

    let read = |name: &str| {
        let path = ws.root.join(SOURCES).join(name);
        std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
    };
    let manifest = package_json(&String::from_utf8(read("package.json")?)?, version)?;
    let files: Vec<(&str, Vec<u8>, u32)> = vec![
        ("package/package.json", manifest.into_bytes(), 0o644),
        ("package/README.md", read("README.md")?, 0o644),
        ("package/index.js", read("index.js")?, 0o644),
        ("package/index.d.ts", read("index.d.ts")?, 0o644),
        ("package/lib/libonesync.so", extension.bytes, 0o755),
        ("package/bin/onesync", command.bytes, 0o755),
    ];

    let path = out.join(format!("onesync-{version}.tgz"));
    write_tgz(&path, &files).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The repository's package.json with the workspace's version, checked to be JSON.
fn package_json(template: &str, version: &str) -> Result<String> {
    if template.matches(VERSION_PLACEHOLDER).count() != 1 {
        bail!(
            "bindings/node/package.json must carry {VERSION_PLACEHOLDER} once (the build sets the version)"
        );
    }
    let manifest = template.replace(VERSION_PLACEHOLDER, &format!("\"version\": \"{version}\""));
    let parsed: serde_json::Value =
        serde_json::from_str(&manifest).context("bindings/node/package.json is not valid JSON")?;
    if parsed["version"] != version {
        bail!("package.json's version did not come out as {version}");
    }
    Ok(manifest)
}

fn write_tgz(path: &Path, files: &[(&str, Vec<u8>, u32)]) -> Result<()> {
    let gz = GzEncoder::new(std::fs::File::create(path)?, Compression::best());
    let mut tar = tar::Builder::new(gz);
    for (name, bytes, mode) in files {
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(NPM_MTIME);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, bytes.as_slice())?;
    }
    tar.into_inner()?.finish()?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_set() {
        let out = package_json(
            "{\n  \"name\": \"onesync\",\n  \"version\": \"0.0.0-workspace\"\n}",
            "1.2.3",
        )
        .unwrap();
        assert!(out.contains("\"version\": \"1.2.3\""), "{out}");
        assert!(package_json("{\"version\": \"1.0.0\"}", "1.2.3").is_err());
    }
}
