//! Where shipping stands, kept beside the store (`<store>-replica-<logical>`): the replica's
//! URL, the store file's identity, the last TXID shipped and a commit of the store at or
//! before the state that TXID gave the replica.
//!
//! **Why a lower bound is enough.** The next file ships every page whose version is newer
//! than the saved commit `S`, read at the newest commit `H`. A page not among them was last
//! changed at or before `S`, so it holds the same bytes at `S`, at the replica's state (some
//! commit between `S` and `H`) and at `H`. So the file is saved only after its upload
//! succeeded, with no flush of its own: a crash before the save, or a power cut that loses
//! it, leaves an older save, whose commit is still a lower bound — the next file then ships
//! a few pages again, under a new TXID. Never a gap, never a TXID twice. The TXID itself
//! always comes from the replica's listing, never from this file.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The store file, as the position knows it: a restored or replaced file at the same path
/// is another file, whose history the replica does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreIdentity {
    pub dev: u64,
    pub ino: u64,
}

impl StoreIdentity {
    pub fn of(path: &Path) -> Result<StoreIdentity, Error> {
        let meta = fs::metadata(path).map_err(|e| Error::Local(format!("{}: {e}", path.display())))?;
        Ok(StoreIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// A saved position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub url: String,
    pub store: StoreIdentity,
    /// The database's page size the replica holds.
    pub page_size: u32,
    pub txid: u64,
    /// A commit of the store at or before the replica's state after `txid`.
    pub seq: u64,
}

const MAGIC: &str = "onesync-replica-position 1";

/// The position file of `logical` in the store at `store_path`.
pub fn path_for(store_path: &Path, logical: &str) -> PathBuf {
    let mut name = store_path.as_os_str().to_owned();
    name.push(format!("-replica-{logical}"));
    PathBuf::from(name)
}

/// How long ago the position at `path` was last saved.
pub fn saved_age(path: &Path) -> Option<std::time::Duration> {
    fs::metadata(path).ok()?.modified().ok()?.elapsed().ok()
}

impl Position {
    fn encode(&self) -> String {
        format!(
            "{MAGIC}\nurl {}\nstore {} {}\npage_size {}\ntxid {}\nseq {}\nend\n",
            self.url, self.store.dev, self.store.ino, self.page_size, self.txid, self.seq
        )
    }

    fn decode(text: &str) -> Option<Position> {
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut field = |name: &str| {
            lines
                .next()?
                .strip_prefix(name)?
                .strip_prefix(' ')
                .map(str::to_owned)
        };
        let url = field("url")?;
        let store = field("store")?;
        let (dev, ino) = store.split_once(' ')?;
        let page_size = field("page_size")?.parse().ok()?;
        let txid = field("txid")?.parse().ok()?;
        let seq = field("seq")?.parse().ok()?;
        if lines.next()? != "end" {
            return None;
        }
        Some(Position {
            url,
            store: StoreIdentity {
                dev: dev.parse().ok()?,
                ino: ino.parse().ok()?,
            },
            page_size,
            txid,
            seq,
        })
    }

    /// The saved position, or `None` if there is none or it does not read whole (a
    /// position is only ever an optimisation: without one the shipper starts a new
    /// snapshot).
    pub fn load(path: &Path) -> Option<Position> {
        Position::decode(&fs::read_to_string(path).ok()?)
    }

    /// Saves it: a new file renamed over the old, so a reader sees one or the other whole.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        // `<store>-replica-<logical>.tmp`: each logical file's own (`with_extension` would
        // replace `.onesync-replica-<logical>`, one name for every logical file's).
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        fs::write(&tmp, self.encode())
            .and_then(|()| fs::rename(&tmp, path))
            .map_err(|e| Error::Local(format!("saving the replication position {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back_and_damage_reads_as_none() {
        let p = Position {
            url: "s3://b/p?endpoint=http://x".into(),
            store: StoreIdentity { dev: 3, ino: 99 },
            page_size: 4096,
            txid: 17,
            seq: 1234,
        };
        let text = p.encode();
        assert_eq!(Position::decode(&text), Some(p));
        for cut in 0..text.len() - 1 {
            assert_eq!(Position::decode(&text[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Position::decode(&text.replace("txid 17", "txid x")), None);
    }
}
