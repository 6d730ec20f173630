//! Where following stands, kept in the store beside the database: the logical file
//! `onesync-follow` holds one JSON object, rewritten in the same transaction as every LTX
//! file's pages. A commit carries both or neither, so after a crash or kill the store says
//! exactly which TXID its `main` holds: the follower resumes after it, never applying a
//! file twice nor skipping one.

use std::path::Path;

use onesync_store::{FileId, Options, Snapshot, Store, Transaction};
use serde_json::{json, Value};

use crate::error::Error;

/// The logical file holding the database (the one the VFS opens as `main`).
pub const DATABASE_FILE: &str = "main";
/// The logical file holding the [`FollowState`].
pub const STATE_FILE: &str = "onesync-follow";

/// What the store holds of the replica, as of its last commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowState {
    /// The replica followed, as its client names it (never credentials).
    pub url: String,
    /// The last TXID applied: `main` is the source database as of it.
    pub txid: u64,
    /// The database's SQLite page size.
    pub page_size: u32,
    /// The last file applied: its level and first TXID (its last is `txid`).
    pub level: u32,
    pub min_txid: u64,
    /// Its header's timestamp (ms since the epoch: when the source's shipper wrote it).
    pub file_timestamp_ms: i64,
    /// When it was applied, and how far behind its timestamp that was.
    pub applied_at_ms: i64,
    pub lag_ms: i64,
    /// Files applied since the store was made (the first restore counts as one), and of
    /// them whole images (snapshots, a restore, a new generation).
    pub files_applied: u64,
    pub images_applied: u64,
}

impl FollowState {
    pub fn to_json(&self) -> Value {
        json!({
            "url": self.url,
            "txid": format!("{:016x}", self.txid),
            "page_size": self.page_size,
            "level": self.level,
            "min_txid": format!("{:016x}", self.min_txid),
            "file_timestamp_ms": self.file_timestamp_ms,
            "applied_at_ms": self.applied_at_ms,
            "lag_ms": self.lag_ms,
            "files_applied": self.files_applied,
            "images_applied": self.images_applied,
        })
    }

    pub fn from_json(v: &Value) -> Option<FollowState> {
        let hex = |k: &str| u64::from_str_radix(v[k].as_str()?, 16).ok();
        Some(FollowState {
            url: v["url"].as_str()?.to_owned(),
            txid: hex("txid")?,
            page_size: u32::try_from(v["page_size"].as_u64()?).ok()?,
            level: u32::try_from(v["level"].as_u64()?).ok()?,
            min_txid: hex("min_txid")?,
            file_timestamp_ms: v["file_timestamp_ms"].as_i64()?,
            applied_at_ms: v["applied_at_ms"].as_i64()?,
            lag_ms: v["lag_ms"].as_i64()?,
            files_applied: v["files_applied"].as_u64()?,
            images_applied: v["images_applied"].as_u64()?,
        })
    }

    /// Reads the state of a snapshot; `None` if it has no state file.
    pub fn read(snap: &Snapshot) -> Result<Option<FollowState>, Error> {
        let Some(file) = snap.file(STATE_FILE) else {
            return Ok(None);
        };
        let bytes = read_file(snap, file)?;
        let bad = || Error::Usage(format!("the store's {STATE_FILE} file is not a follower's state"));
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        FollowState::from_json(&value).map(Some).ok_or_else(bad)
    }

    /// Writes the state into `txn` (creating the file on the first commit); `ps` is the
    /// store's page size.
    pub(crate) fn write(&self, txn: &mut Transaction, ps: usize) -> Result<(), Error> {
        let file = match txn.file(STATE_FILE) {
            Some(f) => f,
            None => txn.create_file(STATE_FILE)?,
        };
        let bytes = self.to_json().to_string().into_bytes();
        for (i, chunk) in bytes.chunks(ps).enumerate() {
            let mut page = vec![0u8; ps];
            page[..chunk.len()].copy_from_slice(chunk);
            txn.write_page(file, i as u64, &page)?;
        }
        txn.set_file_size(file, bytes.len() as u64)?;
        Ok(())
    }
}

/// A logical file's bytes.
fn read_file(snap: &Snapshot, file: FileId) -> Result<Vec<u8>, Error> {
    let size = snap.file_size(file)?;
    let ps = snap.page_size();
    let mut out = Vec::with_capacity(size as usize);
    let mut page = vec![0u8; ps as usize];
    for i in 0..size.div_ceil(ps) {
        snap.read_page(file, i, &mut page)?;
        out.extend_from_slice(&page);
    }
    out.truncate(size as usize);
    Ok(out)
}

/// The follow state of the store at `path`, opened read-only (`None`: not a follower's).
pub fn read_state(path: &Path) -> Result<Option<FollowState>, Error> {
    let store = Store::open(
        path,
        &Options {
            read_only: true,
            ..Options::default()
        },
    )?;
    let state = FollowState::read(&store.try_latest_snapshot()?);
    store.close()?;
    state
}
