//! Where the workspace is, and building what the packages carry.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use object::read::elf::{ElfFile64, FileHeader};
use object::{elf, Endianness};

pub struct Workspace {
    /// The workspace root (the directory of the top-level Cargo.toml).
    pub root: PathBuf,
}

/// A stripped ELF file a package ships (`libonesync.so`, the `onesync` command), and what it
/// needs of the system.
pub struct Stripped {
    /// Its bytes (no symbol table, no debug info; the dynamic symbols stay).
    pub bytes: Vec<u8>,
    /// The newest glibc symbol version it links against, e.g. (2, 34).
    pub glibc: (u32, u32),
}

/// The manylinux platform tag (PEP 600) of files that need `glibc`.
pub fn manylinux_tag(glibc: (u32, u32)) -> String {
    format!("manylinux_{}_{}_x86_64", glibc.0, glibc.1)
}

impl Workspace {
    /// The workspace this binary was built from.
    pub fn find() -> Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .context("crates/packages has no workspace above it")?
            .to_path_buf();
        if !root.join("Cargo.toml").is_file() {
            bail!("no workspace at {}", root.display());
        }
        Ok(Self { root })
    }

    /// The workspace's version, which every package carries.
    pub fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }

    /// The workspace's release build directory (`target/release`), with `libonesync.so`
    /// and the `onesync` command built if needed.
    ///
    /// Built as `cargo build --release --workspace --lib --bin onesync`, not `-p ...`:
    /// cargo unifies features over the packages it is asked for, so `-p` alone compiles
    /// the VFS and its dependencies with other features than the workspace build (`cargo
    /// build --release`), rebuilding them (tens of seconds) and replacing
    /// target/release/libonesync.so under the other tests; after a workspace build this is a
    /// no-op. Cargo does not hold its build lock while `cargo test` runs the tests, so the
    /// package tests can call this.
    pub fn release_build(&self) -> Result<PathBuf> {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--release", "--workspace", "--lib", "--bin", "onesync"])
            .current_dir(&self.root)
            .status()
            .context("running cargo build")?;
        if !status.success() {
            bail!("cargo build --release --workspace --lib --bin onesync failed");
        }
        // Cargo reads a relative CARGO_TARGET_DIR from the directory it runs in: the root.
        let target = self
            .root
            .join(std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into()));
        Ok(target.join("release"))
    }

    /// The release `libonesync.so` stripped of its symbol table and debug info, as the
    /// packages ship it; `scratch` is a directory for the copy.
    pub fn stripped_extension(&self, scratch: &Path) -> Result<Stripped> {
        let built = self.release_build()?.join("libonesync.so");
        // `strip --strip-all` keeps .dynsym, so the entry points SQLite looks up remain.
        let bytes = stripped(&built, scratch)?;
        let glibc = glibc_needed(&bytes).context("reading libonesync.so's glibc symbol versions")?;
        Ok(Stripped { bytes, glibc })
    }

    /// The release `onesync` command (crate onesync's binary), stripped as the library is:
    /// every package ships it.
    pub fn stripped_command(&self, scratch: &Path) -> Result<Stripped> {
        let built = self.release_build()?.join("onesync");
        let bytes = stripped(&built, scratch)?;
        let glibc = glibc_needed(&bytes).context("reading onesync's glibc symbol versions")?;
        Ok(Stripped { bytes, glibc })
    }

    /// The files under `dir` (relative to the workspace root), relative to it, sorted, for
    /// packaging; Python's caches are left out.
    pub fn files_under(&self, dir: &str) -> Result<Vec<PathBuf>> {
        let base = self.root.join(dir);
        let mut found = Vec::new();
        let mut todo = vec![base.clone()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
                let path = entry?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if name == "__pycache__" || name == "node_modules" || name.ends_with(".pyc") {
                    continue;
                }
                if path.is_dir() {
                    todo.push(path);
                } else {
                    found.push(path.strip_prefix(&base)?.to_path_buf());
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

/// The bytes of `built` after `strip --strip-all` (binutils), through a copy in `scratch`.
fn stripped(built: &Path, scratch: &Path) -> Result<Vec<u8>> {
    if !built.is_file() {
        bail!("cargo build left no {}", built.display());
    }
    let name = built.file_name().context("a file name")?.to_string_lossy();
    let copy = scratch.join(format!("{name}.stripped"));
    let status = Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&copy)
        .arg(built)
        .status()
        .with_context(|| format!("running strip (binutils) on {name}"))?;
    if !status.success() {
        bail!("strip --strip-all {} failed", built.display());
    }
    let bytes = std::fs::read(&copy).with_context(|| format!("reading {}", copy.display()))?;
    std::fs::remove_file(&copy).with_context(|| format!("removing {}", copy.display()))?;
    Ok(bytes)
}

/// The newest `GLIBC_x.y` version an x86-64 ELF file needs (its
/// `.gnu.version_r` entries for libc and friends): what decides the oldest glibc it runs on.
pub fn glibc_needed(data: &[u8]) -> Result<(u32, u32)> {
    let file = ElfFile64::<Endianness>::parse(data).context("not a 64-bit ELF file")?;
    let endian = file.endian();
    if file.elf_header().e_machine(endian) != elf::EM_X86_64 {
        bail!("not an x86-64 library");
    }
    let sections = file.elf_section_table();
    let Some((mut needs, link)) = sections.gnu_verneed(endian, data)? else {
        bail!("no version needs (.gnu.version_r): not linked against glibc?");
    };
    let strings = sections.strings(endian, data, link)?;
    let mut newest = None;
    while let Some((_, mut auxes)) = needs.next()? {
        while let Some(aux) = auxes.next()? {
            let name = std::str::from_utf8(aux.name(endian, strings)?)?;
            if let Some(version) = name.strip_prefix("GLIBC_").and_then(parse_version) {
                newest = newest.max(Some(version));
            }
        }
    }
    newest.context("no GLIBC_ symbol versions needed")
}

/// `"2.34"` → (2, 34); `"PRIVATE"` and the like → None.
fn parse_version(s: &str) -> Option<(u32, u32)> {
    let mut parts = s.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("2.34"), Some((2, 34)));
        assert_eq!(parse_version("2.2.5"), Some((2, 2)));
        assert_eq!(parse_version("PRIVATE"), None);
    }

    #[test]
    fn glibc_of_this_test_binary() {
        // Any binary linked against glibc on x86-64 needs at least GLIBC_2.2.5.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let (major, minor) = glibc_needed(&me).unwrap();
        assert!(major == 2 && minor >= 2, "{major}.{minor}");
    }
}
