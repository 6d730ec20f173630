//! The guest's initramfs (a "newc" cpio archive, written with the `cpio` crate): busybox and
//! its /init, the kernel modules, the given programs and files, cached per content; and the
//! tiny per-boot archive appended to it that carries the command's argv (Linux unpacks
//! concatenated archives), so that no argument passes through the kernel command line.

use std::collections::HashSet;
use std::fs::{self, File};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use cpio::newc::{Builder, ModeFileType};

use crate::elf::read_elf_info;
use crate::kernel::{guest_modules, module_dir};
use crate::types::GuestFiles;

/// The guest's /init; `@MODULES@` becomes the module files to insmod, in order, and `@ARGS@`
/// the name of the per-boot file.
const INIT_SCRIPT: &str = include_str!("guest/init.sh");
/// Bumped whenever the initramfs layout changes, so that cached ones are rebuilt.
const INITRAMFS_FORMAT: u32 = 3;
/// The generated file in the per-boot archive that sets the command's argv.
pub(crate) const ARGS_FILE: &str = "onesync-args.sh";
/// Directories every initramfs has.
const BASE_DIRS: [&str; 8] = ["bin", "dev", "proc", "sys", "mnt", "tmp", "lib", "lib/modules"];

/// A statically linked busybox (busybox-static installs one as /bin/busybox).
pub(crate) fn static_busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| read_elf_info(path).is_ok_and(|info| !info.has_interp))
}

/// The initramfs for this kernel and these files, from `cache_dir` if it is current there.
pub(crate) fn cached_initramfs(
    kernel_version: &str,
    files: &GuestFiles,
    cache_dir: &Path,
) -> Result<PathBuf> {
    let busybox = static_busybox()
        .ok_or_else(|| anyhow!("no static busybox in /bin: apt-get install busybox-static"))?;
    let modules = guest_modules(kernel_version)?;
    let module_files: Vec<&str> = modules.iter().map(|module| module.guest_name.as_str()).collect();
    let init = INIT_SCRIPT
        .replace("@MODULES@", &module_files.join(" "))
        .replace("@ARGS@", ARGS_FILE);

    let mut key = DefaultHasher::new();
    INITRAMFS_FORMAT.hash(&mut key);
    init.hash(&mut key);
    kernel_version.hash(&mut key);
    let modules_dep = module_dir(kernel_version).join("modules.dep");
    let contents = files.programs.iter().chain(&files.dynamic);
    for path in [busybox.as_path(), &modules_dep]
        .into_iter()
        .chain(contents.clone().map(|(_, host)| host.as_path()))
    {
        let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        (path, meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino()).hash(&mut key);
    }
    for (guest, _) in contents {
        guest.hash(&mut key);
    }
    fs::create_dir_all(cache_dir).with_context(|| format!("making {}", cache_dir.display()))?;
    let name = format!("initramfs-{:016x}.cpio", key.finish());
    let cached = cache_dir.join(&name);
    if cached.is_file() {
        return Ok(cached);
    }

    // Written beside its final name and renamed, so a concurrent boot never sees half of it.
    let partial = tempfile::Builder::new()
        .prefix(".initramfs-")
        .tempfile_in(cache_dir)
        .with_context(|| format!("making a file in {}", cache_dir.display()))?;
    let writing = || -> Result<()> {
        let mut cpio = Archive::new(BufWriter::new(partial.as_file()));
        for dir in BASE_DIRS {
            cpio.dir(dir)?;
        }
        // The kernel opens /dev/console for /init's stdio before anything is mounted.
        cpio.char_device("dev/console", 0o600, 5, 1)?;
        cpio.symlink("bin/sh", "busybox")?;
        cpio.add_file("bin/busybox", 0o755, &busybox)?;
        for (name, host) in &files.programs {
            cpio.add_file(&format!("bin/{name}"), 0o755, host)?;
        }
        for module in &modules {
            cpio.add_file(
                &format!("lib/modules/{}", module.guest_name),
                0o644,
                &module.host_file,
            )?;
        }
        let mut dirs: HashSet<String> = BASE_DIRS.into_iter().map(str::to_owned).collect();
        for (guest, host) in &files.dynamic {
            let mut parent = String::new();
            for part in Path::new(guest).parent().into_iter().flat_map(Path::iter) {
                if !parent.is_empty() {
                    parent.push('/');
                }
                parent.push_str(&part.to_string_lossy());
                if dirs.insert(parent.clone()) {
                    cpio.dir(&parent)?;
                }
            }
            cpio.add_file(guest, 0o755, host)?;
        }
        cpio.file("init", 0o755, init.as_bytes())?;
        cpio.finish()?.into_inner().map_err(|error| error.into_error())?;
        Ok(())
    };
    writing().with_context(|| format!("writing the initramfs in {}", cache_dir.display()))?;
    // tempfile makes it private; it is no secret.
    fs::set_permissions(partial.path(), fs::Permissions::from_mode(0o644))
        .with_context(|| format!("chmod {}", partial.path().display()))?;
    partial
        .persist(&cached)
        .with_context(|| format!("saving {}", cached.display()))?;
    remove_stale_initramfs(cache_dir, &name);
    Ok(cached)
}

/// Deletes earlier initramfs builds (other files or another kernel); best effort.
fn remove_stale_initramfs(cache_dir: &Path, current: &str) {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.filter_map(|entry| entry.ok()) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("initramfs-") && name.ends_with(".cpio") && name != current {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The per-boot archive: the shell file that sets the command's argv.
pub(crate) fn args_archive(argv: &[String]) -> Result<Vec<u8>> {
    if let Some(arg) = argv.iter().find(|arg| arg.contains('\0')) {
        bail!("a guest argument contains a NUL byte: {arg:?}");
    }
    let words = shlex::try_join(argv.iter().map(String::as_str))?;
    let script = format!("set -- {words}\n");
    let mut cpio = Archive::new(Vec::new());
    cpio.file(ARGS_FILE, 0o644, script.as_bytes())?;
    Ok(cpio.finish()?)
}

/// The cached initramfs followed by this boot's argv archive.
pub(crate) fn write_boot_initrd(initramfs: &Path, argv: &[String], out: &Path) -> Result<()> {
    let args = args_archive(argv)?;
    fs::copy(initramfs, out)
        .with_context(|| format!("copying {} to {}", initramfs.display(), out.display()))?;
    fs::OpenOptions::new()
        .append(true)
        .open(out)
        .and_then(|mut file| file.write_all(&args))
        .with_context(|| format!("appending the command to {}", out.display()))
}

/// A newc archive being written: numbers the inodes, and pads the end to 512 bytes so that
/// another archive can follow it.
struct Archive<W: Write> {
    out: CountingWriter<W>,
    next_ino: u32,
}

impl<W: Write> Archive<W> {
    fn new(out: W) -> Self {
        Archive {
            out: CountingWriter {
                inner: out,
                written: 0,
            },
            next_ino: 1,
        }
    }

    fn entry(&mut self, name: &str, file_type: ModeFileType, permissions: u32) -> Builder {
        let ino = self.next_ino;
        self.next_ino += 1;
        Builder::new(name)
            .ino(ino)
            .mode(permissions)
            .set_mode_file_type(file_type)
    }

    fn dir(&mut self, name: &str) -> io::Result<()> {
        let builder = self.entry(name, ModeFileType::Directory, 0o755).nlink(2);
        builder.write(&mut self.out, 0).finish()?;
        Ok(())
    }

    fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.file_from(name, mode, data.len() as u64, &mut &data[..])
    }

    /// A regular file of exactly `len` bytes from `reader`.
    fn file_from(&mut self, name: &str, mode: u32, len: u64, reader: &mut dyn Read) -> io::Result<()> {
        let size =
            u32::try_from(len).map_err(|_| io::Error::other(format!("{name}: too large for a newc cpio")))?;
        let builder = self.entry(name, ModeFileType::Regular, mode);
        let mut writer = builder.write(&mut self.out, size);
        let copied = io::copy(&mut reader.take(len), &mut writer)?;
        if copied != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name}: expected {len} bytes, got {copied}"),
            ));
        }
        writer.finish()?;
        Ok(())
    }

    fn add_file(&mut self, name: &str, mode: u32, source: &Path) -> Result<()> {
        let mut file = File::open(source).with_context(|| format!("opening {}", source.display()))?;
        let len = file.metadata()?.len();
        self.file_from(name, mode, len, &mut file)
            .with_context(|| format!("adding {} as {name}", source.display()))
    }

    fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        let size = u32::try_from(target.len()).map_err(io::Error::other)?;
        let builder = self.entry(name, ModeFileType::Symlink, 0o777);
        let mut writer = builder.write(&mut self.out, size);
        writer.write_all(target.as_bytes())?;
        writer.finish()?;
        Ok(())
    }

    fn char_device(&mut self, name: &str, mode: u32, major: u32, minor: u32) -> io::Result<()> {
        let builder = self
            .entry(name, ModeFileType::Char, mode)
            .rdev_major(major)
            .rdev_minor(minor);
        builder.write(&mut self.out, 0).finish()?;
        Ok(())
    }

    /// Writes the trailer and the padding; returns the output.
    fn finish(mut self) -> io::Result<W> {
        cpio::newc::trailer(&mut self.out)?;
        let padding = (512 - self.out.written % 512) % 512;
        self.out.write_all(&vec![0; padding as usize])?;
        self.out.flush()?;
        Ok(self.out.inner)
    }
}

/// Counts what passes through, for the padding at the end of the archive.
struct CountingWriter<W: Write> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let count = self.inner.write(bytes)?;
        self.written += count as u64;
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// One entry read back with the `cpio` crate: (name, mode, rdev major, rdev minor, data).
    type Entry = (String, u32, u32, u32, Vec<u8>);

    /// Reads one archive up to its trailer; returns its entries and what follows it.
    fn read_archive(mut bytes: &[u8]) -> (Vec<Entry>, &[u8]) {
        let mut entries = Vec::new();
        loop {
            let mut reader = cpio::newc::Reader::new(bytes).unwrap();
            let entry = reader.entry();
            if entry.is_trailer() {
                return (entries, reader.finish().unwrap());
            }
            let (name, mode) = (entry.name().to_owned(), entry.mode());
            let (major, minor) = (entry.rdev_major(), entry.rdev_minor());
            let mut data = Vec::new();
            reader.read_to_end(&mut data).unwrap();
            entries.push((name, mode, major, minor, data));
            bytes = reader.finish().unwrap();
        }
    }

    const S_IFDIR: u32 = 0o040000;
    const S_IFREG: u32 = 0o100000;
    const S_IFLNK: u32 = 0o120000;
    const S_IFCHR: u32 = 0o020000;

    #[test]
    fn archives_read_back_with_the_cpio_crate() {
        let mut cpio = Archive::new(Vec::new());
        cpio.dir("bin").unwrap();
        cpio.file("bin/hello", 0o755, b"hello, world\n").unwrap();
        cpio.symlink("bin/sh", "busybox").unwrap();
        cpio.char_device("dev/console", 0o600, 5, 1).unwrap();
        cpio.file("empty", 0o644, b"").unwrap();
        let bytes = cpio.finish().unwrap();
        assert_eq!(bytes.len() % 512, 0);

        let (entries, rest) = read_archive(&bytes);
        assert!(
            rest.iter().all(|&byte| byte == 0),
            "only padding after the trailer"
        );
        let expect: Vec<Entry> = vec![
            ("bin".into(), S_IFDIR | 0o755, 0, 0, vec![]),
            (
                "bin/hello".into(),
                S_IFREG | 0o755,
                0,
                0,
                b"hello, world\n".to_vec(),
            ),
            ("bin/sh".into(), S_IFLNK | 0o777, 0, 0, b"busybox".to_vec()),
            ("dev/console".into(), S_IFCHR | 0o600, 5, 1, vec![]),
            ("empty".into(), S_IFREG | 0o644, 0, 0, vec![]),
        ];
        assert_eq!(entries, expect);
    }

    #[test]
    fn archives_concatenate() {
        let mut first = Archive::new(Vec::new());
        first.file("a", 0o644, b"x").unwrap();
        let mut bytes = first.finish().unwrap();
        bytes.extend(args_archive(&["echo".into(), "a b".into()]).unwrap());
        let (entries, rest) = read_archive(&bytes);
        assert_eq!(entries[0].0, "a");
        // The kernel skips the zeros between archives; the next starts 4-byte aligned.
        let padding = rest.iter().take_while(|&&byte| byte == 0).count();
        assert_eq!((bytes.len() - rest.len() + padding) % 512, 0);
        let (entries, _) = read_archive(&rest[padding..]);
        assert_eq!(entries[0].0, ARGS_FILE);
        assert_eq!(entries[0].4, b"set -- echo 'a b'\n");
    }

    #[test]
    fn a_file_from_a_short_reader_is_an_error() {
        let mut cpio = Archive::new(Vec::new());
        let error = cpio.file_from("f", 0o644, 10, &mut &b"short"[..]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn the_argv_file_survives_sh() {
        let argv: Vec<String> = [
            "plain",
            "a b  c",
            "it's",
            "\"dq\" $HOME `x` \\n",
            "",
            "line\nbreak",
            "*",
        ]
        .map(str::to_owned)
        .to_vec();
        let archive = args_archive(&argv).unwrap();
        let (entries, _) = read_archive(&archive);
        let script = String::from_utf8(entries[0].4.clone()).unwrap();
        let script = format!("{script}printf '%s\\0' \"$@\"");
        let output = Command::new("sh").arg("-c").arg(&script).output().unwrap();
        assert!(output.status.success());
        let back: Vec<String> = output
            .stdout
            .split(|&byte| byte == 0)
            .map(|word| String::from_utf8(word.to_vec()).unwrap())
            .collect();
        assert_eq!(&back[..argv.len()], &argv[..]);
        assert!(args_archive(&["a\0b".to_owned()]).is_err());
    }
}
