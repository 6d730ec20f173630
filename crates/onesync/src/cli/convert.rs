//! `onesync import`, `export` and `salvage`: each writes a new file (never over one),
//! checks it, and removes it if anything fails.
//!
//! import writes the store with `VACUUM INTO 'file:DST?vfs=onesync'`: a compacted copy in
//! rollback-journal mode (the page images of a WAL-mode database would tell SQLite to use a
//! WAL, which a store has no use for). export copies the store's pages with SQLite's backup
//! API: the same database, byte for byte but the change counter.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use onesync_store::{Error as StoreError, Options, Store};
use rusqlite::backup::{Backup, StepResult};

use super::files::{
    open_plain, open_store, refuse_existing, register, require, sibling, store_uri, write_checked, Kind,
    RemoveUnlessKept,
};
use super::output::say;

pub fn import(src: &Path, dst: &Path) -> Result<()> {
    require(src, Kind::Plain, "import")?;
    for suffix in ["-journal", "-wal"] {
        let journal = sibling(src, suffix);
        if std::fs::symlink_metadata(&journal).is_ok() {
            bail!(
                "{} exists: SQLite has not finished with {} (it is open, or needs recovery); \
                 close it everywhere and open it once with sqlite3",
                journal.display(),
                src.display()
            );
        }
    }
    register()?; // for the vfs=onesync in VACUUM INTO's URI
    let reader = open_plain(src, true)?;
    let uri = store_uri(dst)?;
    write_checked(
        dst,
        "import",
        || {
            reader
                .execute("VACUUM INTO ?1", [&uri])
                .with_context(|| format!("copying {} into {}", src.display(), dst.display()))?;
            Ok(())
        },
        || open_store(dst, false),
    )?;
    say!(
        "imported {} into the store {}: integrity_check ok",
        src.display(),
        dst.display()
    )
}

pub fn export(src: &Path, dst: &Path) -> Result<()> {
    require(src, Kind::Store, "export")?;
    let store = open_store(src, true)?;
    write_checked(
        dst,
        "export",
        || {
            let mut plain = open_plain(dst, false)?;
            let backup = Backup::new(&store, &mut plain)?;
            match backup
                .step(-1)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?
            {
                StepResult::Done => Ok(()),
                other => Err(anyhow!(
                    "copying {} to {}: SQLite's backup stopped ({other:?}); is the store being written?",
                    src.display(),
                    dst.display()
                )),
            }
        },
        || open_plain(dst, true),
    )?;
    say!(
        "exported the store {} to {}: integrity_check ok",
        src.display(),
        dst.display()
    )
}

/// Opens the store read-only, following its chain of commits only up to the first read
/// error, and copies every logical file of that state into a new store.
pub fn salvage(store: &Path, new: &Path) -> Result<()> {
    require(store, Kind::Store, "salvage")?;
    refuse_existing(new, "salvage")?;
    let old = Store::open(
        store,
        &Options {
            read_only: true,
            salvage: true,
            ..Options::default()
        },
    )
    .map_err(|e| describe_store_error(store, e))?;
    let snapshot = old.snapshot();
    let page_size = old.page_size();
    let copy = Store::create(
        new,
        &Options {
            page_size: page_size as u32,
            ..Options::default()
        },
    )
    .with_context(|| format!("creating {}", new.display()))?;
    let written = RemoveUnlessKept::new(new);
    let mut txn = copy.begin();
    let mut page = vec![0u8; page_size];
    let files = snapshot.files();
    for (id, name) in &files {
        let size = snapshot.file_size(*id)?;
        let to = txn.create_file(name)?;
        for index in 0..size.div_ceil(page_size as u64) {
            snapshot
                .read_page(*id, index, &mut page)
                .with_context(|| format!("reading page {index} of {name:?}"))?;
            // A page never written reads as zeros: leave it a hole in the copy too.
            if page.iter().any(|b| *b != 0) {
                txn.write_page(to, index, &page)?;
            }
        }
        txn.set_file_size(to, size)?;
    }
    txn.commit()
        .with_context(|| format!("committing to {}", new.display()))?;
    copy.close()?;
    written.keep();
    say!(
        "salvaged {} logical file(s) as of commit {} into {}",
        files.len(),
        snapshot.seq(),
        new.display()
    )?;
    match old.salvage_stopped_by() {
        Some(why) => say!("the chain of commits ended early: {why}"),
        None => say!("the whole chain was readable: nothing was lost"),
    }
}

/// The store's refusal to open, said for a user.
fn describe_store_error(path: &Path, error: StoreError) -> anyhow::Error {
    match error {
        StoreError::NotFound(_) => anyhow!("{} does not exist", path.display()),
        StoreError::NotAStore(why) => anyhow!("{} is not a onesync store ({why})", path.display()),
        StoreError::Locked(_) => anyhow!(
            "{} is open in another process; close it there first (a store has one process at a time)",
            path.display()
        ),
        other => anyhow::Error::new(other).context(format!("opening the store {}", path.display())),
    }
}
