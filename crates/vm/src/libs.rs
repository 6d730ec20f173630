//! The shared libraries a dynamically linked host program loads, so that the guest can run
//! it too: `ldd` (the host's own loader) names them, which also covers its search paths.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

/// Every shared library that `programs` load, each once, as (path in the guest, path on the
/// host); the guest path is the host path.
pub(crate) fn shared_libraries(programs: &[&Path]) -> Result<Vec<(String, PathBuf)>> {
    let mut libraries = Vec::new();
    let mut seen = HashSet::new();
    for program in programs {
        let out = Command::new("ldd")
            .arg(program)
            .output()
            .with_context(|| format!("running ldd {}", program.display()))?;
        for library in parse_ldd(&String::from_utf8_lossy(&out.stdout)) {
            if seen.insert(library.clone()) {
                libraries.push((
                    library.trim_start_matches('/').to_owned(),
                    PathBuf::from(&library),
                ));
            }
        }
    }
    Ok(libraries)
}

/// The absolute paths in `ldd` output ("libz.so.1 => /lib/.../libz.so.1 (0x...)" and
/// "/lib64/ld-linux-x86-64.so.2 (0x...)").
fn parse_ldd(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| path.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_absolute_paths() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibsqlite3.so.0 => /lib/x86_64-linux-gnu/libsqlite3.so.0 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibmissing.so => not found\n";
        assert_eq!(
            parse_ldd(out),
            [
                "/lib/x86_64-linux-gnu/libsqlite3.so.0",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }
}
