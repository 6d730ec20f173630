//! strace: recording the calls of the chosen process, and stopping it at one of them.
//!
//! How k is counted. strace's `-e inject=SYSCALL:...:when=N` acts on the N-th call of that
//! one syscall by one thread (each syscall and each thread has its own counter; calls of
//! other syscalls do not count), and a fault it injects at entry means the call never runs.
//! So a recording run traces the chosen (single-threaded) worker with every call of
//! interest and numbers each call per syscall; the crash points are the calls that act on
//! the database (its store file under any name, the side file, SQLite's files, its
//! replication position and its replica's directory `replica/`): writes,
//! flushes, lock calls (`fcntl` F_SETLK/F_SETLKW/F_OFD_SETLK/F_OFD_SETLKW, `flock`),
//! truncation, rename, link and unlink. Crash point k is the k-th of these; it is
//! reached in a crash run as call N of its syscall, with
//! `inject=SYSCALL:signal=STOP:error=EINTR:when=N`: the call is skipped and the process
//! stops (SIGSTOP) before it ever returns to user space, to be killed later. Stopping
//! rather than killing lets readers go on reading at that instant before the power cut.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The calls a recording run traces: everything that writes, flushes, locks or names a file
/// (plus `write`, which the worker uses for its output and notes: numbered, never a point).
pub const RECORD_SET: &str = "pwrite64,pwritev,pwritev2,write,writev,fdatasync,fsync,fcntl,flock,\
                              ftruncate,rename,renameat,renameat2,link,linkat,unlink,unlinkat";

/// One call of the chosen process that acts on the database.
#[derive(Clone, Debug)]
pub struct Call {
    pub syscall: String,
    /// Which call of this syscall it is in the process (1-based): strace's `when=`.
    pub nth: u32,
    /// What it did, with the run's directory taken out (comparable across runs).
    pub what: String,
}

/// The strace version line, or why strace cannot be used.
pub fn available() -> Result<String> {
    let out = Command::new("strace")
        .arg("-V")
        .output()
        .context("running strace -V (is strace installed? apt-get install strace)")?;
    if !out.status.success() {
        bail!(
            "strace -V failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("strace")
        .trim()
        .to_owned())
}

/// `strace` around `program`: recording every call of [`RECORD_SET`] when `inject` is
/// `None`, else tracing only `inject`'s syscall and stopping the process at its N-th call.
pub fn command(log: &Path, inject: Option<(&str, u32)>) -> Command {
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-s", "0", "-y", "-e", "signal=none", "-o"]);
    c.arg(log);
    match inject {
        None => {
            c.args(["-e", &format!("trace={RECORD_SET}")]);
        }
        Some((syscall, nth)) => {
            c.args(["-e", &format!("trace={syscall}")]);
            c.args([
                "-e",
                &format!("inject={syscall}:signal=STOP:error=EINTR:when={nth}"),
            ]);
        }
    }
    c.arg("--");
    c
}

/// The database calls of a recording (strace's output), in order.
pub fn recorded_calls(text: &str, dir: &Path) -> Vec<Call> {
    let mut counts: std::collections::HashMap<String, u32> = Default::default();
    let mut calls = Vec::new();
    for line in text.lines() {
        let Some((syscall, args)) = split_line(line) else {
            continue;
        };
        let nth = counts.entry(syscall.to_owned()).or_default();
        *nth += 1;
        if let Some(what) = describe(syscall, &args, dir) {
            calls.push(Call {
                syscall: syscall.to_owned(),
                nth: *nth,
                what,
            });
        }
    }
    calls
}

/// The call strace stopped the process at, if it did (the line marked `(INJECTED)`).
pub fn injected_call(text: &str, dir: &Path) -> Option<String> {
    let line = text.lines().find(|l| l.ends_with("(INJECTED)"))?;
    let (syscall, args) = split_line(line)?;
    Some(describe(syscall, &args, dir).unwrap_or_else(|| format!("{syscall} (not on the database)")))
}

/// `PID name(args) = result` → (name, args); `None` for anything else (a resumed call).
fn split_line(line: &str) -> Option<(&str, Vec<&str>)> {
    let line = line.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start();
    let open = line.find('(')?;
    let name = &line[..open];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let close = line.rfind(") = ").or_else(|| line.rfind(" <unfinished"))?;
    Some((name, split_args(line.get(open + 1..close)?)))
}

/// Top-level comma-separated arguments.
fn split_args(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0usize);
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => quoted = !quoted,
            b'{' | b'[' | b'(' if !quoted => depth += 1,
            b'}' | b']' | b')' if !quoted => depth -= 1,
            b',' if !quoted && depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out
}

/// The path in an `-y` file descriptor argument: `5</dir/bank.onesync>`.
fn fd_path(arg: &str) -> Option<&str> {
    let open = arg.find('<')?;
    arg.get(open + 1..arg.len().checked_sub(1)?)
}

/// The file's name for reports, if the call is on a file of the database.
fn ours(path: &str, dir: &Path) -> Option<String> {
    let path = path.trim_matches('"');
    let name = path.rsplit('/').next().unwrap_or(path);
    if name.starts_with("onesync-") && name.ends_with(".shm") {
        return Some("side-file".to_owned());
    }
    let within = path.strip_prefix(dir.to_str()?)?.trim_start_matches('/');
    // The store's files (its replication position `bank.onesync-replica-main` among them)
    // and its replica's.
    let replica = within
        .strip_prefix(super::REPLICA_DIR)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if !within.starts_with("bank") && !replica {
        return None;
    }
    // SQLite names super-journals `DB-mjXXXXXXXXX` at random: the same call in every run.
    Some(match within.split_once("-mj") {
        Some((db, random)) if random.bytes().all(|b| b.is_ascii_hexdigit()) => format!("{db}-mj*"),
        _ => within.to_owned(),
    })
}

/// A short description of a database call, or `None` if the call is not one.
fn describe(syscall: &str, args: &[&str], dir: &Path) -> Option<String> {
    let first = args.first().copied().unwrap_or("");
    match syscall {
        "pwrite64" | "pwritev" | "pwritev2" => {
            let file = ours(fd_path(first)?, dir)?;
            let len = args.get(2).copied().unwrap_or("?");
            let at = args.get(3).copied().unwrap_or("?");
            let unit = if syscall == "pwrite64" { " B" } else { " iov" };
            Some(format!("{syscall} {file} {len}{unit} at {at}"))
        }
        // A replication position's text names the run's directory and the store's inode:
        // its length differs from run to run, so it is left out.
        "write" | "writev" => match ours(fd_path(first)?, dir)? {
            file if file.contains("-replica-") => Some(format!("{syscall} {file}")),
            file => Some(format!(
                "{syscall} {file} {}",
                args.get(2).copied().unwrap_or("?")
            )),
        },
        "fdatasync" | "fsync" => Some(format!("{syscall} {}", ours(fd_path(first)?, dir)?)),
        "ftruncate" | "flock" => Some(format!(
            "{syscall} {} {}",
            ours(fd_path(first)?, dir)?,
            args.get(1).copied().unwrap_or("?")
        )),
        "fcntl" => {
            let file = ours(fd_path(first)?, dir)?;
            let cmd = args.get(1).copied().unwrap_or("");
            if !matches!(
                cmd,
                "F_SETLK" | "F_SETLKW" | "F_OFD_SETLK" | "F_OFD_SETLKW" | "F_SETLK64" | "F_SETLKW64"
            ) {
                return None;
            }
            let lock = args.get(2).copied().unwrap_or("");
            let field = |key: &str| {
                lock.split([',', '{', '}'])
                    .map(str::trim)
                    .find_map(|f| f.strip_prefix(key))
                    .unwrap_or("?")
                    .to_owned()
            };
            Some(format!(
                "fcntl {file} {cmd} {} at {}",
                field("l_type="),
                lock_offset(&field("l_start="))
            ))
        }
        "rename" | "renameat" | "renameat2" | "link" | "linkat" | "unlink" | "unlinkat" => {
            let paths: Vec<String> = args
                .iter()
                .filter(|a| a.starts_with('"'))
                .filter_map(|a| ours(a, dir))
                .collect();
            (!paths.is_empty()).then(|| format!("{syscall} {}", paths.join(" ")))
        }
        _ => None,
    }
}

/// The store's lock bytes sit at 2^62 and up: say so instead of a 19-digit number.
fn lock_offset(start: &str) -> String {
    const BASE: u64 = 1 << 62;
    match start.parse::<u64>() {
        Ok(n) if n >= BASE => format!("2^62+{}", n - BASE),
        _ => start.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_are_numbered_per_syscall_and_filtered_to_the_database() {
        let dir = Path::new("/w/run");
        let text = "\
12 write(1<pipe:[5]>, \"\"..., 7) = 7
12 pwrite64(5</w/run/bank.onesync>, \"\"..., 4096, 8192) = 4096
12 fcntl(5</w/run/bank.onesync>, F_OFD_GETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=4611686018427387904, l_len=1}) = 0
12 fcntl(5</w/run/bank.onesync>, F_OFD_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=4611686018427387906, l_len=1}) = 0
12 pwrite64(7</dev/shm/onesync-fd01-1a-00ff.shm>, \"\"..., 16, 8) = 16
12 write(9</w/run/io.log>, \"\"..., 48) = 48
12 fdatasync(5</w/run/bank.onesync>) = 0
12 unlink(\"/dev/shm/onesync-fd01-1a-00ff.shm\") = 0
12 unlinkat(AT_FDCWD, \"/w/run/bank.onesync-mj01AB23CD4\", 0) = 0
12 write(8</w/run/replica/ltx/0/0000000000000002-0000000000000002.ltx.tmp>, \"\"..., 4242) = 4242
12 rename(\"/w/run/bank.onesync-replica-main.tmp\", \"/w/run/bank.onesync-replica-main\") = 0
12 write(9</w/run/bank.onesync-replica-main.tmp>, \"\"..., 120) = 120
12 unlink(\"/w/run/replicas/x\") = 0
";
        let calls = recorded_calls(text, dir);
        let got: Vec<(String, u32, String)> = calls.into_iter().map(|c| (c.syscall, c.nth, c.what)).collect();
        let want = [
            ("pwrite64", 1, "pwrite64 bank.onesync 4096 B at 8192"),
            ("fcntl", 2, "fcntl bank.onesync F_OFD_SETLK F_WRLCK at 2^62+2"),
            ("pwrite64", 2, "pwrite64 side-file 16 B at 8"),
            ("fdatasync", 1, "fdatasync bank.onesync"),
            ("unlink", 1, "unlink side-file"),
            ("unlinkat", 1, "unlinkat bank.onesync-mj*"),
            (
                "write",
                3,
                "write replica/ltx/0/0000000000000002-0000000000000002.ltx.tmp 4242",
            ),
            (
                "rename",
                1,
                "rename bank.onesync-replica-main.tmp bank.onesync-replica-main",
            ),
            ("write", 4, "write bank.onesync-replica-main.tmp"),
        ];
        let want: Vec<(String, u32, String)> = want
            .iter()
            .map(|(s, n, w)| (s.to_string(), *n, w.to_string()))
            .collect();
        assert_eq!(got, want);
        let stopped =
            "12 fdatasync(5</w/run/bank.onesync>) = -1 EINTR (Interrupted system call) (INJECTED)\n";
        assert_eq!(
            injected_call(stopped, dir).as_deref(),
            Some("fdatasync bank.onesync")
        );
    }
}
