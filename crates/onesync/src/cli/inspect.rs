//! `onesync check` and `onesync info`: read-only looks at a store or any file.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use rusqlite::Connection;

use super::files::{integrity, kind, open_plain, open_store, require, Kind};
use super::output::say;

/// `PRAGMA onesync_stats` (a JSON object) of a store's connection.
fn stats(conn: &Connection) -> Result<serde_json::Value> {
    let json: String = conn
        .query_row("PRAGMA onesync_stats", [], |r| r.get(0))
        .context("reading PRAGMA onesync_stats")?;
    serde_json::from_str(&json).context("PRAGMA onesync_stats gave no JSON object")
}

pub fn check(store: &Path) -> Result<()> {
    require(store, Kind::Store, "check")?;
    let conn = open_store(store, true)?;
    let verdict = integrity(&conn)?;
    // serde_json's maps are sorted by key.
    let stats = serde_json::to_string_pretty(&stats(&conn)?)?;
    drop(conn);
    say!("integrity_check: {verdict}")?;
    say!("onesync_stats: {stats}")?;
    if verdict != "ok" {
        bail!("{} failed its integrity check", store.display());
    }
    Ok(())
}

pub fn info(file: &Path) -> Result<()> {
    let found = kind(file)?;
    let meta = std::fs::metadata(file).with_context(|| format!("reading {}", file.display()))?;
    say!("file: {}", file.display())?;
    say!(
        "size: {} bytes ({} allocated on disk)",
        meta.len(),
        meta.blocks() * 512
    )?;
    let conn = match found {
        Kind::Empty => return say!("kind: empty file"),
        Kind::Other => return say!("kind: not a SQLite database nor a onesync store"),
        Kind::Store => {
            say!("kind: onesync store (open it as file:PATH?vfs=onesync)")?;
            let conn = open_store(file, true)?;
            let page_size = stats(&conn)?["page_size"].clone();
            say!("store page size: {page_size} bytes")?;
            conn
        }
        Kind::Plain => {
            say!("kind: plain SQLite database (onesync import it to make a store)")?;
            open_plain(file, true)?
        }
    };
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    say!("SQLite page size: {page_size} bytes")?;
    let tables = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    say!("tables: {}", tables.len())?;
    for name in tables {
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        let rows: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {quoted}"), [], |r| r.get(0))
            .with_context(|| format!("counting the rows of {name}"))?;
        say!("  {name}: {rows} rows")?;
    }
    Ok(())
}
