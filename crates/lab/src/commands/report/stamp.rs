//! What every results file is stamped with, so that a figure can be traced and reproduced:
//! the command line, the commit it was built from, when it ran (UTC) and on what machine.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Stamp {
    /// The command line as run (the program by its file name).
    pub command: String,
    /// `git rev-parse HEAD` of the working directory, "-dirty" appended when tracked files
    /// differ from it; "unknown" outside a git checkout.
    pub commit: String,
    /// When the run started, "YYYY-MM-DDTHH:MM:SSZ" (sorts as it reads).
    pub utc: String,
    pub machine: Machine,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    /// The filesystem of the directory measured: its type, device and mount point.
    pub filesystem: String,
    pub sqlite: String,
}

impl Stamp {
    /// The stamp of a run starting now that measures in `dir`.
    pub fn now(dir: &Path) -> Stamp {
        Stamp {
            command: command_line(),
            commit: commit(),
            utc: utc_now(),
            machine: Machine {
                cpu: cpu_model(),
                cores: std::thread::available_parallelism().map_or(0, usize::from),
                memory_gib: memory_gib(),
                kernel: read_trimmed("/proc/sys/kernel/osrelease"),
                filesystem: filesystem_of(dir),
                sqlite: rusqlite::version().to_owned(),
            },
        }
    }

    /// "YYYY-MM-DD", the date part of the stamp (the results files' names).
    pub fn date(&self) -> &str {
        self.utc.get(..10).unwrap_or(&self.utc)
    }

    /// One line: "CPU, N cores, M GiB, Linux K, FS, SQLite V".
    pub fn machine_line(&self) -> String {
        let m = &self.machine;
        format!(
            "{}, {} cores, {:.0} GiB, Linux {}, {}, SQLite {}",
            m.cpu, m.cores, m.memory_gib, m.kernel, m.filesystem, m.sqlite
        )
    }
}

/// The command line, each argument quoted for a POSIX shell where it needs it.
fn command_line() -> String {
    let mut args = std::env::args();
    let program = args
        .next()
        .map(|p| {
            Path::new(&p)
                .file_name()
                .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    std::iter::once(program)
        .chain(args.map(|a| shell_quoted(&a)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quoted(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The output of `git ARGS` in the working directory, if git ran and succeeded.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn commit() -> String {
    let Some(head) = git(&["rev-parse", "HEAD"]) else {
        return "unknown".to_owned();
    };
    // Tracked files only: an untracked file (a results file being written) is not a change
    // to what was built.
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned())
}

fn cpu_model() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn memory_gib() -> f64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|line| {
            let kib = line.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
            kib.trim().parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0))
}

/// "ext4 (/dev/vda on /)": the mount in /proc/mounts with the longest mount point that
/// holds `dir`.
fn filesystem_of(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            let point = point.replace("\\040", " ");
            dir.starts_with(&point)
                .then(|| (point, device.to_owned(), kind.to_owned()))
        })
        // The last of equally long mount points is the one on top.
        .fold(None::<(String, String, String)>, |best, m| match best {
            Some(b) if b.0.len() > m.0.len() => Some(b),
            _ => Some(m),
        })
        .map_or_else(
            || "unknown filesystem".to_owned(),
            |(point, device, kind)| format!("{kind} ({device} on {point})"),
        )
}

/// Now in UTC, "YYYY-MM-DDTHH:MM:SSZ".
fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_text(seconds)
}

/// Seconds since 1970 in UTC, as "YYYY-MM-DDTHH:MM:SSZ" (the civil calendar from days,
/// Howard Hinnant's algorithm).
fn utc_text(seconds: u64) -> String {
    let (days, rest) = ((seconds / 86_400) as i64, seconds % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_text_reads_the_civil_date() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century year divisible by 400), 12:34:56.
        assert_eq!(utc_text(951_827_696), "2000-02-29T12:34:56Z");
        assert_eq!(utc_text(1_798_761_599), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn arguments_are_quoted_only_when_a_shell_needs_it() {
        assert_eq!(shell_quoted("--rounds"), "--rounds");
        assert_eq!(shell_quoted("docs/results"), "docs/results");
        assert_eq!(shell_quoted("a b"), "'a b'");
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
        assert_eq!(shell_quoted(""), "''");
    }
}
