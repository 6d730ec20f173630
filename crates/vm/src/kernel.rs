//! The guest's kernel: the newest Debian kernel in /boot, and the modules the guest loads
//! (with their modules.dep closure, in load order, built-ins skipped).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

/// Modules the guest loads (with their dependencies from modules.dep, skipping built-ins):
/// the virtio disk, both filesystems, and the CRC drivers that F2FS ("Cannot load crc32
/// driver") and ext4/jbd2 (crc32c) look up by name at mount, which modules.dep cannot know.
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "crc32_generic",
    "crc32c_generic",
    "f2fs",
    "ext4",
];

/// One module for the guest: its file under the kernel's module directory on the host, and
/// the plain file name the guest's /init loads it by.
pub(crate) struct GuestModule {
    pub host_file: PathBuf,
    pub guest_name: String,
}

/// The newest /boot/vmlinuz-VERSION that has /lib/modules/VERSION/modules.dep.
pub(crate) fn newest_kernel() -> Result<(PathBuf, String)> {
    let entries = fs::read_dir("/boot").context("listing /boot")?;
    let mut versions: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            Some(name.strip_prefix("vmlinuz-")?.to_owned())
        })
        .filter(|version| module_dir(version).join("modules.dep").is_file())
        .collect();
    versions.sort_by(|a, b| compare_versions(a, b));
    let version = versions.pop().ok_or_else(|| {
        anyhow!("no /boot/vmlinuz-* with modules in /lib/modules: apt-get install linux-image-amd64")
    })?;
    Ok((PathBuf::from(format!("/boot/vmlinuz-{version}")), version))
}

pub(crate) fn module_dir(version: &str) -> PathBuf {
    Path::new("/lib/modules").join(version)
}

/// Orders version strings by their runs of digits as numbers, the rest as text:
/// 6.1.0-9 < 6.1.0-56 < 6.10.0-1.
fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(version: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = version.as_bytes();
        for index in 1..=bytes.len() {
            let boundary =
                index == bytes.len() || bytes[index].is_ascii_digit() != bytes[index - 1].is_ascii_digit();
            if boundary {
                out.push((bytes[start].is_ascii_digit(), &version[start..index]));
                start = index;
            }
        }
        out
    }
    let key = |chunk: &(bool, &str)| -> (u8, u128, String) {
        match chunk {
            (true, digits) => (1, digits.parse().unwrap_or(u128::MAX), String::new()),
            (false, text) => (0, 0, (*text).to_owned()),
        }
    };
    let (a, b) = (chunks(a), chunks(b));
    a.iter().map(key).cmp(b.iter().map(key))
}

/// The guest's modules of kernel `version`, in load order.
pub(crate) fn guest_modules(version: &str) -> Result<Vec<GuestModule>> {
    let modules_dir = module_dir(version);
    let read = |name: &str| {
        let path = modules_dir.join(name);
        fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let modules = resolve_modules(
        &read("modules.dep")?,
        &read("modules.builtin").unwrap_or_default(),
        GUEST_MODULES,
    )
    .with_context(|| format!("resolving the guest's modules in {}", modules_dir.display()))?;
    if let Some(compressed) = modules.iter().find(|module| !module.ends_with(".ko")) {
        bail!("compressed kernel modules ({compressed}) are not supported: busybox insmod loads plain .ko files");
    }
    Ok(modules
        .iter()
        .map(|module| GuestModule {
            host_file: modules_dir.join(module),
            guest_name: module_name(module) + ".ko",
        })
        .collect())
}

/// One line of modules.dep: a module's file and the files it needs loaded first.
struct DepEntry {
    path: String,
    deps: Vec<String>,
}

/// A module's name from its file: the base name without ".ko", '-' as '_'.
fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split(".ko").next().unwrap_or(base);
    stem.replace('-', "_")
}

/// The module files (relative to the module directory) to insmod for `wanted`, each after the
/// modules it depends on, each once; modules built into the kernel are skipped.
fn resolve_modules(modules_dep: &str, modules_builtin: &str, wanted: &[&str]) -> Result<Vec<String>> {
    let mut by_path: HashMap<&str, DepEntry> = HashMap::new();
    let mut by_name: HashMap<String, String> = HashMap::new();
    for line in modules_dep.lines().filter(|line| !line.trim().is_empty()) {
        let (path, deps) = line
            .split_once(':')
            .ok_or_else(|| anyhow!("modules.dep line without ':': {line:?}"))?;
        let path = path.trim();
        by_name.insert(module_name(path), path.to_owned());
        by_path.insert(
            path,
            DepEntry {
                path: path.to_owned(),
                deps: deps.split_whitespace().map(str::to_owned).collect(),
            },
        );
    }
    let builtin: HashSet<String> = modules_builtin
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| module_name(line.trim()))
        .collect();

    fn visit(
        path: &str,
        by_path: &HashMap<&str, DepEntry>,
        visiting: &mut HashSet<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if order.iter().any(|done| done == path) {
            return Ok(());
        }
        if !visiting.insert(path.to_owned()) {
            bail!("modules.dep has a dependency cycle through {path}");
        }
        let entry = by_path
            .get(path)
            .ok_or_else(|| anyhow!("modules.dep names {path} as a dependency but has no line for it"))?;
        for dep in &entry.deps {
            visit(dep, by_path, visiting, order)?;
        }
        order.push(entry.path.clone());
        Ok(())
    }

    let mut order = Vec::new();
    let mut visiting = HashSet::new();
    for name in wanted {
        let name = name.replace('-', "_");
        match by_name.get(&name) {
            Some(path) => visit(path, &by_path, &mut visiting, &mut order)?,
            None if builtin.contains(&name) => {}
            None => bail!("kernel module {name} is neither in modules.dep nor built in"),
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_load_after_their_dependencies_each_once_builtins_skipped() {
        // As depmod writes it: each line lists the whole closure, in no useful order.
        let dep = "\
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko

kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/crypto/crc32-generic.ko:
";
        let builtin = "kernel/lib/crc32.ko\nkernel/crypto/crc32c_generic.ko\n";
        let order = resolve_modules(
            dep,
            builtin,
            &[
                "virtio_pci",
                "virtio_blk",
                "crc32_generic",
                "crc32c_generic",
                "ext4",
            ],
        )
        .unwrap();
        assert_eq!(
            order,
            [
                "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
                "kernel/drivers/virtio/virtio_ring.ko",
                "kernel/drivers/virtio/virtio.ko",
                "kernel/drivers/virtio/virtio_pci.ko",
                "kernel/drivers/block/virtio_blk.ko",
                "kernel/crypto/crc32-generic.ko",
                "kernel/lib/crc16.ko",
                "kernel/fs/mbcache.ko",
                "kernel/fs/jbd2/jbd2.ko",
                "kernel/fs/ext4/ext4.ko",
            ]
        );
    }

    #[test]
    fn unknown_module_missing_dependency_and_cycle_are_errors() {
        let error = resolve_modules("kernel/a.ko:\n", "", &["f2fs"]).unwrap_err();
        assert!(error.to_string().contains("f2fs is neither"), "{error:#}");
        let error = resolve_modules("kernel/a.ko: kernel/b.ko\n", "", &["a"]).unwrap_err();
        assert!(error.to_string().contains("no line for it"), "{error:#}");
        let error =
            resolve_modules("kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n", "", &["a"]).unwrap_err();
        assert!(error.to_string().contains("cycle"), "{error:#}");
        assert!(resolve_modules("no colon here\n", "", &["a"]).is_err());
    }

    #[test]
    fn module_names_from_files() {
        assert_eq!(module_name("kernel/crypto/crc32-generic.ko"), "crc32_generic");
        assert_eq!(module_name("kernel/fs/f2fs/f2fs.ko.xz"), "f2fs");
        assert_eq!(module_name("ext4.ko"), "ext4");
    }

    #[test]
    fn kernel_versions_compare_by_number() {
        let mut versions = vec![
            "6.10.0-1-amd64",
            "6.1.0-56-amd64",
            "6.1.0-9-amd64",
            "5.10.0-30-amd64",
        ];
        versions.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            versions,
            [
                "5.10.0-30-amd64",
                "6.1.0-9-amd64",
                "6.1.0-56-amd64",
                "6.10.0-1-amd64"
            ]
        );
    }
}
