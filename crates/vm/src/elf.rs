//! Reading ELF program headers (with the `object` crate): which machine a program is for and
//! whether it needs a dynamic loader, since the guest has no libc for the programs it runs.

use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use object::elf::{FileHeader32, FileHeader64, EM_X86_64, PT_INTERP};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, FileKind, ReadCache, ReadRef};

/// What the harness needs to know of an ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ElfInfo {
    pub machine: u16,
    /// A PT_INTERP program header: the program needs a dynamic loader.
    pub has_interp: bool,
}

/// Fails unless `path` is a statically linked x86-64 program, which the guest can run.
pub fn check_static_x86_64(path: &Path) -> Result<()> {
    let info = read_elf_info(path)?;
    if info.machine != EM_X86_64.0 {
        bail!("not an x86-64 program (ELF machine {})", info.machine);
    }
    if info.has_interp {
        bail!("dynamically linked (it has a PT_INTERP program header); the guest has no libc");
    }
    Ok(())
}

/// Reads only the headers of `path`, not the whole (possibly large) program.
pub(crate) fn read_elf_info(path: &Path) -> Result<ElfInfo> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let cache = ReadCache::new(file);
    elf_info(&cache).with_context(|| format!("{} is not a usable ELF file", path.display()))
}

fn elf_info<'data, R: ReadRef<'data>>(data: R) -> Result<ElfInfo> {
    match FileKind::parse(data).map_err(|error| anyhow!("{error}"))? {
        FileKind::Elf32 => header_info::<FileHeader32<Endianness>, R>(data),
        FileKind::Elf64 => header_info::<FileHeader64<Endianness>, R>(data),
        other => bail!("not an ELF file but {other:?}"),
    }
}

fn header_info<'data, Elf, R>(data: R) -> Result<ElfInfo>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = Elf::parse(data).map_err(|error| anyhow!("{error}"))?;
    let endian = header.endian().map_err(|error| anyhow!("{error}"))?;
    let program_headers = header
        .program_headers(endian, data)
        .map_err(|error| anyhow!("{error}"))?;
    Ok(ElfInfo {
        machine: header.e_machine(endian).0,
        has_interp: program_headers
            .iter()
            .any(|program_header| program_header.p_type(endian) == PT_INTERP),
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const X86_64: u16 = EM_X86_64.0;
    const INTERP: u32 = PT_INTERP.0;

    /// A minimal ELF header with program headers of the given types.
    fn elf(is64: bool, little: bool, machine: u16, types: &[u32]) -> Vec<u8> {
        let (header_len, entry_len) = if is64 { (64usize, 56usize) } else { (52, 32) };
        let mut bytes = vec![0u8; header_len + entry_len * types.len()];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[4] = if is64 { 2 } else { 1 };
        bytes[5] = if little { 1 } else { 2 };
        bytes[6] = 1; // EI_VERSION: EV_CURRENT, as every real ELF file has
        let mut put = |offset: usize, width: usize, value: u64| {
            for index in 0..width {
                let byte = (value >> (8 * index)) as u8;
                let at = if little {
                    offset + index
                } else {
                    offset + width - 1 - index
                };
                bytes[at] = byte;
            }
        };
        put(0x12, 2, u64::from(machine));
        if is64 {
            put(0x20, 8, header_len as u64);
            put(0x36, 2, entry_len as u64);
            put(0x38, 2, types.len() as u64);
        } else {
            put(0x1c, 4, header_len as u64);
            put(0x2a, 2, entry_len as u64);
            put(0x2c, 2, types.len() as u64);
        }
        for (index, &kind) in types.iter().enumerate() {
            put(header_len + index * entry_len, 4, u64::from(kind));
        }
        bytes
    }

    #[test]
    fn elf_pt_interp_detection() {
        const PT_LOAD: u32 = 1;
        const PT_PHDR: u32 = 6;
        let dynamic = elf(true, true, X86_64, &[PT_PHDR, INTERP, PT_LOAD]);
        assert_eq!(
            elf_info(&dynamic[..]).unwrap(),
            ElfInfo {
                machine: X86_64,
                has_interp: true
            }
        );
        let static_pie = elf(true, true, X86_64, &[PT_PHDR, PT_LOAD, PT_LOAD]);
        assert!(!elf_info(&static_pie[..]).unwrap().has_interp);
        assert!(elf_info(&elf(false, true, 3, &[INTERP])[..]).unwrap().has_interp);
        assert!(elf_info(&elf(true, false, 21, &[INTERP])[..]).unwrap().has_interp);
        assert_eq!(
            elf_info(&elf(true, false, 21, &[PT_LOAD])[..]).unwrap().machine,
            21
        );

        assert!(elf_info(&b"#!/bin/sh\necho not an ELF file\n"[..]).is_err());
        assert!(elf_info(&dynamic[..100]).is_err(), "program headers cut off");
        let mut bogus = dynamic.clone();
        bogus[4] = 7;
        assert!(elf_info(&bogus[..]).is_err());
    }

    #[test]
    fn elf_files_are_read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prog");
        fs::write(&path, elf(true, true, X86_64, &[1, 1])).unwrap();
        assert!(check_static_x86_64(&path).is_ok());
        fs::write(&path, elf(true, true, X86_64, &[1, INTERP])).unwrap();
        let error = check_static_x86_64(&path).unwrap_err();
        assert!(error.to_string().contains("dynamically linked"), "{error:#}");
        fs::write(&path, elf(true, true, 183, &[1])).unwrap();
        assert!(
            check_static_x86_64(&path).is_err(),
            "aarch64 is not a guest binary"
        );
    }

    #[test]
    fn a_real_dynamic_program_is_read_from_its_headers() {
        // This test binary: a dynamically linked x86-64 program, read through the cache.
        let info = read_elf_info(Path::new("/proc/self/exe")).unwrap();
        assert_eq!(
            info,
            ElfInfo {
                machine: X86_64,
                has_interp: true
            }
        );
        let error = check_static_x86_64(Path::new("/proc/self/exe")).unwrap_err();
        assert!(error.to_string().contains("dynamically linked"), "{error:#}");
    }
}
