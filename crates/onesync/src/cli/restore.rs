//! `onesync restore URL OUT`: a database rebuilt from a replica (a onesync store's, or stock
//! Litestream's: the same layout), latest or at a TXID or a time, as a plain SQLite file or,
//! with `--store`, a new store. Written beside OUT, integrity-checked, then kept.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use onesync_ltx::restore::{restore_to_file, Target};

use super::convert::import;
use super::files::{open_plain, refuse_existing, sibling, write_checked, RemoveUnlessKept};
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
