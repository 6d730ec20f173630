//! `onesync restore URL OUT`: a database rebuilt from a replica (a onesync store's, or stock
//! Litestream's: the same layout), latest or at a TXID or a time, as a plain SQLite file or,
//! with `--store`, a new store. Written beside OUT, integrity-checked, then kept.
//! `--follow`: the store keeps following the replica (crate `onesync-follow`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use onesync_follow::{Applied, Follower};
use onesync_ltx::restore::{restore_to_file, Target};

use super::convert::import;
use super::files::{open_plain, refuse_existing, require, sibling, write_checked, Kind, RemoveUnlessKept};
use super::output::say;

/// Which state to rebuild: the latest, `--txid N` (hexadecimal, as Litestream names files
/// and takes `-txid`) or `--timestamp` (RFC 3339).
pub fn target(txid: Option<&str>, timestamp: Option<&str>) -> Result<Target> {
    match (txid, timestamp) {
        (Some(_), Some(_)) => bail!("give --txid or --timestamp, not both"),
        (Some(t), None) => u64::from_str_radix(t.trim_start_matches("0x"), 16)
            .map(Target::Txid)
            .map_err(|_| anyhow!("--txid {t:?} is not a TXID (hexadecimal, as Litestream names files)")),
        (None, Some(ts)) => onesync_ltx::client::s3::parse_rfc3339_ms(ts)
            .map(Target::Timestamp)
            .ok_or_else(|| anyhow!("--timestamp {ts:?} is not an RFC 3339 time (YYYY-MM-DDTHH:MM:SSZ)")),
        (None, None) => Ok(Target::Latest),
    }
}

pub fn restore(url: &str, out: &Path, target: Target, as_store: bool) -> Result<()> {
    let client = onesync_ltx::client::open(url).with_context(|| format!("opening the replica {url}"))?;
    refuse_existing(out, "restore")?;
    if as_store {
        let plain = sibling(out, ".restoring.db");
        refuse_existing(&plain, "restore")?;
        let _plain_removed = RemoveUnlessKept::new(&plain);
        let restored = restore_to_file(client.as_ref(), target, &plain)
            .with_context(|| format!("restoring from {url}"))?;
        say!("restored TXID {:016x} from {url}", restored.txid)?;
        return import(&plain, out);
    }
    let mut txid = 0;
    write_checked(
        out,
        "restore",
        || {
            txid = restore_to_file(client.as_ref(), target, out)
                .with_context(|| format!("restoring from {url}"))?
                .txid;
            Ok(())
        },
        || open_plain(out, true),
    )?;
    say!(
        "restored TXID {txid:016x} from {url} into {}: integrity_check ok",
        out.display()
    )
}

/// `--follow`: restores into the store `out` (or resumes the store a follower made), then
/// polls the replica every `interval_ms` and applies each new file as one transaction,
/// printing a line per step unless `quiet`. Returns only on an error that another poll
/// would not clear; a replica that cannot be reached (or lists a gap) is reported on
/// stderr once per change of reason, and polled again.
pub fn follow(url: &str, out: &Path, interval_ms: u64, quiet: bool) -> Result<()> {
    if !(10..=3_600_000).contains(&interval_ms) {
        bail!("--interval-ms {interval_ms}: give 10 to 3600000 milliseconds");
    }
    if std::fs::symlink_metadata(out).is_ok() {
        require(out, Kind::Store, "restore --follow")?;
    }
    let mut follower =
        Follower::open(out, url).with_context(|| format!("following {url} into {}", out.display()))?;
    if !quiet {
        match follower.state() {
            Some(s) => say!(
                "resuming at TXID {:016x}: following {} into {}",
                s.txid,
                follower.url(),
                out.display()
            )?,
            None => say!("following {} into {}", follower.url(), out.display())?,
        }
    }
    let interval = Duration::from_millis(interval_ms);
    let mut reported: Option<String> = None;
    loop {
        let started = Instant::now();
        let mut printed = Ok(());
        let polled = follower.poll(&mut |a| {
            if !quiet && printed.is_ok() {
                printed = say!("{}", step_line(a));
            }
        });
        printed?;
        let problem = match polled {
            Ok(poll) => poll.stalled,
            Err(e) if e.is_transient() => Some(format!("{e} (polling again)")),
            Err(e) => return Err(e).with_context(|| format!("following {url} into {}", out.display())),
        };
        if problem != reported {
            match &problem {
                Some(why) => eprintln!("onesync: following {url}: {why}"),
                None if reported.is_some() => eprintln!("onesync: following {url}: continuing"),
                None => {}
            }
            reported = problem;
        }
        std::thread::sleep(interval.saturating_sub(started.elapsed()));
    }
}

/// `applied TXID 000000000000002a (level 0 ...ltx, 3 pages), lag 120 ms`: the TXID the
/// store now holds, what brought it there, and how long after the file's timestamp.
fn step_line(a: &Applied) -> String {
    let what = if a.files > 1 {
        format!("restored from {} files, up to {}", a.files, a.file)
    } else {
        format!(
            "{}, {} pages{}",
            a.file,
            a.pages,
            if a.whole { ", whole database" } else { "" }
        )
    };
    format!(
        "applied TXID {:016x} ({what}), lag {} ms",
        a.state.txid, a.state.lag_ms
    )
}
