//! `onesync export` and `onesync import`: convert between a onesync store (which is not a
//! plain SQLite file) and a plain SQLite database file.
//!
//! Both directions copy bytes, never rows: the database inside the store is the plain file's
//! exact byte image, so a round trip plain → store → plain is byte-identical. Each checks the
//! result with `PRAGMA integrity_check` (export through SQLite's default VFS, import through
//! the onesync VFS) and removes what it created if anything fails.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use onesync_store::{Error as StoreError, Options, Store};
use rusqlite::OpenFlags;

use crate::sqlite::{check_integrity, open_onesync, open_plain};

/// The first 16 bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// Bytes 18 and 19 of the header: file format write/read versions, 1 = rollback journal,
/// 2 = WAL.
const FORMAT_VERSIONS: std::ops::Range<usize> = 18..20;
const SQLITE_HEADER_LEN: usize = 100;
/// Store pages copied per read of the input (the transaction itself holds all of them).
const PAGES_PER_CHUNK: usize = 256;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The onesync store to read (not changed; it must not be open in another process)
    pub db: PathBuf,
    /// The plain SQLite file to write; must not exist
    pub out: PathBuf,
    /// Logical database inside the store (`db=` in a `vfs=onesync` URI)
    #[arg(long, value_name = "NAME", default_value = onesync_vfs::DEFAULT_LOGICAL_DB)]
    pub logical: String,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The plain SQLite database file to read (not changed)
    pub input: PathBuf,
    /// The onesync store to create; must not exist. The database becomes its logical file
    /// `main`, opened as file:DB?vfs=onesync
    pub db: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct SalvageArgs {
    /// The damaged onesync store (opened read-only, not changed)
    pub store: PathBuf,
    /// The store to create with what can be read; must not exist
    pub out: PathBuf,
}

/// Deletes a file this command created unless the command finished successfully.
struct RemoveUnlessKept<'a> {
    path: &'a Path,
    keep: bool,
}

impl<'a> RemoveUnlessKept<'a> {
    fn new(path: &'a Path) -> Self {
        Self { path, keep: false }
    }
}

impl Drop for RemoveUnlessKept<'_> {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_file(self.path);
        }
    }
}

fn refuse_existing(path: &Path, command: &str) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(_) => bail!(
            "{} already exists; onesync {command} never overwrites a file: choose a new name or remove it first",
            path.display()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("checking whether {} exists", path.display())),
    }
}

fn describe_store_error(db: &Path, error: StoreError) -> anyhow::Error {
    match error {
        StoreError::NotFound(_) => anyhow::anyhow!("{} does not exist", db.display()),
        StoreError::NotAStore(why) => {
            let plain = File::open(db)
                .and_then(|mut f| {
                    let mut magic = [0u8; 16];
                    f.read_exact(&mut magic).map(|()| &magic == SQLITE_MAGIC)
                })
                .unwrap_or(false);
            if plain {
                anyhow::anyhow!(
                    "{} is a plain SQLite database already, not a onesync store; nothing to export",
                    db.display()
                )
            } else {
                anyhow::anyhow!("{} is not a onesync store ({why})", db.display())
            }
        }
        StoreError::Locked(_) => anyhow::anyhow!(
            "{} is open in another process; close it there first (a store has one process at a time)",
            db.display()
        ),
        other => anyhow::Error::new(other).context(format!("opening store {}", db.display())),
    }
}

pub fn export(args: &ExportArgs) -> Result<()> {
    refuse_existing(&args.out, "export")?;
    let store = Store::open(
        &args.db,
        &Options {
            read_only: true,
            ..Options::default()
        },
    )
    .map_err(|e| describe_store_error(&args.db, e))?;
    let snapshot = store.snapshot();
    let Some(file) = snapshot.file(&args.logical) else {
        let names: Vec<String> = snapshot.files().into_iter().map(|(_, name)| name).collect();
        bail!(
            "store {} has no logical database {:?} (it has: {})",
            args.db.display(),
            args.logical,
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        );
    };
    let size = snapshot.file_size(file)?;
    let page_size = store.page_size() as u64;

    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut cleanup = RemoveUnlessKept::new(&args.out);
    let mut page = vec![0u8; page_size as usize];
    for index in 0..size.div_ceil(page_size) {
        snapshot
            .read_page(file, index, &mut page)
            .with_context(|| format!("reading page {index} of {:?}", args.logical))?;
        let len = (size - index * page_size).min(page_size) as usize;
        out.write_all(&page[..len])
            .with_context(|| format!("writing {}", args.out.display()))?;
    }
    out.sync_all()
        .with_context(|| format!("flushing {}", args.out.display()))?;
    drop(out);
    drop(snapshot);
    drop(store);

    if size > 0 {
        let conn = open_plain(&args.out, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        check_integrity(&conn).with_context(|| {
            format!(
                "the exported copy of {}'s {:?} failed its check and was removed",
                args.db.display(),
                args.logical
            )
        })?;
    }
    cleanup.keep = true;
    println!(
        "exported {:?} of {} ({size} bytes) to {}: integrity_check ok",
        args.logical,
        args.db.display(),
        args.out.display()
    );
    Ok(())
}

/// Why `input` cannot be imported as it is, if a journal next to it is one SQLite has not
/// finished with.
fn refuse_journal(input: &Path) -> Result<()> {
    for suffix in ["-journal", "-wal"] {
        let mut name = input.as_os_str().to_owned();
        name.push(suffix);
        let journal = PathBuf::from(name);
        if fs::symlink_metadata(&journal).is_ok() {
            bail!(
                "{} exists next to {}: SQLite has not finished with that database (a hot rollback \
                 journal or a WAL not yet checkpointed, or it is open right now). Close every \
                 program using it, then open it once with sqlite3 so SQLite recovers it, e.g. \
                 `sqlite3 {} 'PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;'`, \
                 and import again",
                journal.display(),
                input.display(),
                input.display()
            );
        }
    }
    Ok(())
}

pub fn import(args: &ImportArgs) -> Result<()> {
    refuse_existing(&args.db, "import")?;
    let mut input = File::open(&args.input).with_context(|| format!("opening {}", args.input.display()))?;
    let meta = input.metadata()?;
    if !meta.is_file() {
        bail!("{} is not a regular file", args.input.display());
    }
    let len = meta.len();
    let mut header = [0u8; SQLITE_HEADER_LEN];
    let got = read_up_to(&mut input, &mut header)?;
    if got < SQLITE_MAGIC.len() || &header[..SQLITE_MAGIC.len()] != SQLITE_MAGIC {
        if got >= 16 && header[..16] == onesync_store::layout::MAGIC {
            bail!(
                "{} is a onesync store already, not a plain SQLite file",
                args.input.display()
            );
        }
        bail!(
            "{} is not a plain SQLite database: it does not begin with the 16 bytes \"SQLite format 3\\0\"",
            args.input.display()
        );
    }
    if got < SQLITE_HEADER_LEN {
        bail!(
            "{} is truncated: {got} bytes, shorter than SQLite's 100-byte header",
            args.input.display()
        );
    }
    refuse_journal(&args.input)?;
    let was_wal = header[FORMAT_VERSIONS].contains(&2);

    // A read transaction on the input keeps other processes from writing it during the copy
    // (a WAL-mode file is not opened: without its -wal file no connection can have it open).
    let reader = if was_wal {
        None
    } else {
        let conn = open_plain(&args.input, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.execute_batch("BEGIN; SELECT count(*) FROM sqlite_schema;")
            .with_context(|| format!("reading {} with SQLite", args.input.display()))?;
        Some(conn)
    };

    let store = Store::create(
        &args.db,
        &Options {
            page_size: onesync_vfs::STORE_PAGE_SIZE,
            ..Options::default()
        },
    )
    .with_context(|| format!("creating store {}", args.db.display()))?;
    let mut cleanup = RemoveUnlessKept::new(&args.db);
    let page_size = store.page_size();
    let mut txn = store.begin();
    let file = txn.create_file(onesync_vfs::DEFAULT_LOGICAL_DB)?;
    let mut input = File::open(&args.input)?;
    let mut chunk = vec![0u8; page_size * PAGES_PER_CHUNK];
    let mut copied = 0u64;
    let mut next_page = 0u64;
    loop {
        let n = read_up_to(&mut input, &mut chunk)?;
        if n == 0 {
            break;
        }
        if copied == 0 && was_wal {
            // Rollback-journal mode: the onesync VFS keeps its journal in memory and has no WAL.
            chunk[FORMAT_VERSIONS].fill(1);
        }
        chunk[n..n.next_multiple_of(page_size)].fill(0);
        for page in chunk[..n.next_multiple_of(page_size)].chunks(page_size) {
            txn.write_page(file, next_page, page)?;
            next_page += 1;
        }
        copied += n as u64;
    }
    if copied != len {
        bail!(
            "{} changed size during the import ({len} bytes, then {copied}); nothing was imported",
            args.input.display()
        );
    }
    txn.set_file_size(file, copied)?;
    txn.commit()
        .with_context(|| format!("committing to store {}", args.db.display()))?;
    store.close()?;
    drop(reader);

    let conn = open_onesync(&args.db, false)?;
    check_integrity(&conn).with_context(|| {
        format!(
            "{} failed its check through the onesync VFS and was removed",
            args.db.display()
        )
    })?;
    drop(conn);
    cleanup.keep = true;
    let note = if was_wal {
        " (it was in WAL mode; the store copy is in rollback-journal mode)"
    } else {
        ""
    };
    println!(
        "imported {} ({copied} bytes) into store {}{note}: integrity_check ok through the onesync VFS; \
         open it as file:{}?vfs=onesync",
        args.input.display(),
        args.db.display(),
        args.db.display()
    );
    Ok(())
}

/// Reads until `buf` is full or the end of the file; returns the bytes read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the input file"),
        }
    }
    Ok(done)
}

/// `onesync salvage`: open the store read-only, following its chain of commits only up to
/// the first read error, and copy every logical file of that state into a new store.
pub fn salvage(args: &SalvageArgs) -> Result<()> {
    refuse_existing(&args.out, "salvage")?;
    let old = Store::open(
        &args.store,
        &Options {
            read_only: true,
            salvage: true,
            ..Options::default()
        },
    )
    .map_err(|e| describe_store_error(&args.store, e))?;
    let snapshot = old.snapshot();
    let page_size = old.page_size();
    let new = Store::create(
        &args.out,
        &Options {
            page_size: page_size as u32,
            ..Options::default()
        },
    )
    .with_context(|| format!("creating {}", args.out.display()))?;
    let cleanup = RemoveUnlessKept::new(&args.out);
    let mut txn = new.begin();
    let mut page = vec![0u8; page_size];
    let files = snapshot.files();
    for (id, name) in &files {
        let size = snapshot.file_size(*id)?;
        let copy = txn.create_file(name)?;
        for index in 0..size.div_ceil(page_size as u64) {
            snapshot
                .read_page(*id, index, &mut page)
                .with_context(|| format!("reading page {index} of {name:?}"))?;
            if page.iter().any(|b| *b != 0) {
                txn.write_page(copy, index, &page)?;
            }
        }
        txn.set_file_size(copy, size)?;
    }
    txn.commit()?;
    new.close()?;
    let mut cleanup = cleanup;
    cleanup.keep = true;
    println!(
        "salvaged {} logical file(s) as of commit {} into {}",
        files.len(),
        snapshot.seq(),
        args.out.display()
    );
    match old.salvage_stopped_by() {
        Some(why) => println!("the chain of commits ended early: {why}"),
        None => println!("the whole chain was readable: nothing was lost"),
    }
    Ok(())
}
