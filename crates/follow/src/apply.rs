//! One LTX file's SQLite pages written into a store transaction on the database's logical
//! file. A SQLite page lands in the store pages that hold its bytes: several store pages
//! for a SQLite page larger than a store page, part of one (read, changed, written back)
//! for a smaller one. The file's size becomes the header's commit × page size.

use std::collections::btree_map::{BTreeMap, Entry};

use onesync_ltx::{lock_pgno, LtxFile};
use onesync_store::{FileId, Transaction};

use crate::error::Error;

/// The database as the store holds it before a file applies: its SQLite page size and
/// size in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Database {
    pub page_size: u32,
    pub pages: u64,
}

/// Whether `file` holds the whole database (every page up to its commit but the lock
/// page, which no LTX file holds): then it replaces what the store has, whatever that is.
pub(crate) fn is_whole(file: &LtxFile) -> bool {
    let h = &file.header;
    let lock_inside = u64::from(lock_pgno(h.page_size) <= h.commit);
    // Decoding checked the pages ascending, distinct, within the commit and not the lock
    // page, so their number says whether every one is there.
    h.is_snapshot() || file.pages.len() as u64 == u64::from(h.commit) - lock_inside
}

/// Writes `file` into `txn` over `current` (`None`: no database yet). Refuses, changing
/// nothing that commits, a file that cannot continue `current`: not whole while there is
/// no database or the page size changes, or growing the database without its new pages.
pub(crate) fn apply(
    txn: &mut Transaction,
    main: FileId,
    store_page_size: u64,
    current: Option<Database>,
    file: &LtxFile,
    name: &str,
) -> Result<(), Error> {
    let h = &file.header;
    let ps = u64::from(h.page_size);
    let whole = is_whole(file);
    match current {
        _ if whole => {}
        None => {
            return Err(Error::Diverged(format!(
                "{name} is not a whole database and the store holds none to apply it to"
            )))
        }
        Some(db) if db.page_size != h.page_size => {
            return Err(Error::Diverged(format!(
                "{name} changes the page size from {} to {} without holding every page",
                db.page_size, h.page_size
            )))
        }
        Some(db) => {
            let lock = u64::from(lock_pgno(h.page_size));
            let mut have = file.pages.iter().map(|p| u64::from(p.pgno)).peekable();
            for n in db.pages + 1..=u64::from(h.commit) {
                while have.next_if(|&p| p < n).is_some() {}
                if n != lock && have.peek() != Some(&n) {
                    return Err(Error::Diverged(format!(
                        "{name} grows the database from {} to {} pages without page {n}",
                        db.pages, h.commit
                    )));
                }
            }
        }
    }
    if whole {
        // What the store held goes: the lock page reads as zeros, as in a restore.
        txn.set_file_size(main, 0)?;
    }
    let sps = store_page_size;
    let mut staged: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for p in &file.pages {
        let start = (u64::from(p.pgno) - 1) * ps;
        let end = start + ps;
        let mut sp = start / sps;
        while sp * sps < end {
            let (sp_start, sp_end) = (sp * sps, (sp + 1) * sps);
            let (from, to) = (start.max(sp_start), end.min(sp_end));
            let buf = match staged.entry(sp) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let mut buf = vec![0u8; sps as usize];
                    if (from, to) != (sp_start, sp_end) {
                        // Only part of this store page is the SQLite page: keep the rest.
                        txn.read_page(main, sp, &mut buf)?;
                    }
                    e.insert(buf)
                }
            };
            buf[(from - sp_start) as usize..(to - sp_start) as usize]
                .copy_from_slice(&p.data[(from - start) as usize..(to - start) as usize]);
            sp += 1;
        }
    }
    for (sp, data) in staged {
        txn.write_page(main, sp, &data)?;
    }
    txn.set_file_size(main, u64::from(h.commit) * ps)?;
    Ok(())
}
