//! The crash contract across processes (issue 14): one regression test per defect an
//! adversarial review found in the store, each written to fail on the code before its fix.
//! Each `Store::open` of a path is its own open file description, with its own locks and
//! its own copy of the mapping, exactly as another process has; where a process's death
//! matters, the test leaves on disk what that death leaves.

#[path = "support/sabotage.rs"]
mod sabotage;
use sabotage::with_sabotage;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use onesync_store::{layout, Error, Options, Sabotage, Store};

const PS: usize = 512;

fn opts() -> Options {
    Options {
        page_size: PS as u32,
        initial_capacity: 256 << 10,
        growth_step: 256 << 10,
        window_bytes: 8 << 10,
        ..Options::default()
    }
}

fn new_store(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let path = dir.path().join(name);
    Store::create(&path, &opts()).unwrap().close().unwrap();
    path
}

/// Commit page `page` of file "data" filled with `fill`.
fn put(store: &Store, page: u64, fill: u8) -> Result<u64, Error> {
    let mut t = store.begin();
    let id = match t.file("data") {
        Some(id) => id,
        None => t.create_file("data")?,
    };
    t.write_page(id, page, &[fill; PS])?;
    Ok(t.commit()?)
}

/// Page `page` of "data" as the latest snapshot sees it (0 if missing).
fn get(store: &Store, page: u64) -> u8 {
    let snap = store.snapshot();
    let Some(id) = snap.file("data") else {
        return 0;
    };
    let mut buf = [0u8; PS];
    snap.read_page(id, page, &mut buf).unwrap();
    buf[0]
}

fn reopen_alone(path: &Path) -> Store {
    Store::open(path, &opts()).unwrap()
}

/// Defect 1: process A checkpoints and dies after writing the new header but before
/// publishing its generation in the side file; B then commits. B's commit must survive.
fn checkpoint_death_then_commit(sabotage: Option<Sabotage>) -> u8 {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    let with = with_sabotage(opts(), sabotage);
    let a = Store::open(&path, &with).unwrap();
    let b = Store::open(&path, &with).unwrap();
    put(&a, 0, 1).unwrap();
    assert_eq!(get(&b, 0), 1, "B follows A's commit");
    let side = layout::side_file(&path).unwrap();
    let shm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&side)
        .unwrap();
    let mut before = [0u8; 16];
    shm.read_exact_at(&mut before, layout::SIDE_FILE_PROGRESS)
        .unwrap();
    a.checkpoint().unwrap();
    // What A's death between its header write and its publication leaves: the new header
    // on disk, the old generation in the side file.
    shm.write_all_at(&before, layout::SIDE_FILE_PROGRESS).unwrap();
    drop(a);
    put(&b, 1, 2).unwrap();
    drop(b); // killed: no close, no checkpoint
    get(&reopen_alone(&path), 1)
}

#[test]
fn a_commit_after_another_process_died_mid_checkpoint_survives() {
    assert_eq!(
        checkpoint_death_then_commit(None),
        2,
        "B's acknowledged commit was lost"
    );
}

/// The negative control: with the old publication order back, the same steps lose B's
/// commit, so the test above can fail.
#[cfg(feature = "test-hooks")] // a negative control: needs `Options::sabotage`
#[test]
fn negative_control_trusting_the_side_file_loses_the_commit() {
    assert_eq!(
        checkpoint_death_then_commit(Some(Sabotage::CheckpointPublication)),
        0
    );
}

/// Defect 2: two names of one store (a hard link) must meet the same side file: a reader
/// through one name sees commits through the other, and a snapshot held through one name
/// keeps reading while writers through the other checkpoint and reuse slots.
#[test]
fn hard_links_share_one_side_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    let link = dir.path().join("link.onesync");
    std::fs::hard_link(&path, &link).unwrap();
    let a = Store::open(&path, &opts()).unwrap();
    let b = Store::open(&link, &opts()).unwrap();
    put(&a, 0, 1).unwrap();
    assert_eq!(get(&b, 0), 1, "a reader through the link missed a commit");
    let held = a.snapshot();
    for fill in 2..40u8 {
        put(&b, 0, fill).unwrap();
        b.checkpoint().unwrap();
    }
    let id = held.file("data").unwrap();
    let mut buf = [0u8; PS];
    held.read_page(id, 0, &mut buf)
        .expect("a held snapshot's page was reused by a process using the other name");
    assert_eq!(buf[0], 1);
    put(&a, 1, 7).unwrap();
    drop(held);
    drop((a, b));
    let store = reopen_alone(&link);
    assert_eq!((get(&store, 0), get(&store, 1)), (39, 7));
}

/// Defect 6: processes that only read must not grow the store, whoever closes last.
#[test]
fn readers_do_not_grow_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    let len = || std::fs::metadata(&path).unwrap().len();
    let writer = Store::open(&path, &opts()).unwrap();
    put(&writer, 0, 1).unwrap();
    let size = len();
    for _ in 0..5 {
        let reader = Store::open(&path, &opts()).unwrap();
        assert_eq!(get(&reader, 0), 1);
        put(&writer, 1, 2).unwrap();
        assert_eq!(get(&reader, 1), 2);
        reader.close().unwrap();
    }
    assert_eq!(len(), size, "closing readers grew the store");
    // The writer leaves first; the last reader then checkpoints from slots it did not own.
    let reader = Store::open(&path, &opts()).unwrap();
    put(&writer, 2, 3).unwrap();
    writer.close().unwrap();
    assert_eq!(get(&reader, 2), 3);
    reader.close().unwrap();
    assert_eq!(len(), size, "the last closer grew the store");
    let store = reopen_alone(&path);
    assert_eq!(store.stats().records_replayed, 0, "the last close checkpointed");
    assert_eq!((get(&store, 0), get(&store, 1), get(&store, 2)), (1, 2, 3));
}

/// Defect 7: a read-only open works while read-write processes have the store open, its
/// snapshots stay readable while they checkpoint, and it sees their new commits.
#[test]
fn read_only_opens_share_with_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    let writer = Store::open(&path, &opts()).unwrap();
    put(&writer, 0, 1).unwrap();
    let ro = Options {
        read_only: true,
        ..opts()
    };
    let reader = Store::open(&path, &ro).expect("read-only open beside a writer");
    let held = reader.snapshot();
    for fill in 2..40u8 {
        put(&writer, 0, fill).unwrap();
        writer.checkpoint().unwrap();
    }
    let mut buf = [0u8; PS];
    held.read_page(held.file("data").unwrap(), 0, &mut buf)
        .expect("a read-only snapshot's page was reused");
    assert_eq!(buf[0], 1);
    drop(held);
    assert_eq!(get(&reader, 0), 39, "the read-only open follows checkpoints");
    put(&writer, 1, 9).unwrap();
    assert_eq!(get(&reader, 1), 9, "the read-only open follows commits");
    assert!(matches!(put(&reader, 1, 1), Err(Error::ReadOnly)));
    // A read-only file (permissions) opens read-only too.
    drop((reader, writer));
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    perms.set_mode(0o444);
    std::fs::set_permissions(&path, perms).unwrap();
    let reader = Store::open(&path, &ro).unwrap();
    assert_eq!(get(&reader, 0), 39);
}

/// Defect 7: the side file carries the store file's permissions, not the opener's umask,
/// so another user who may write the store can open it while the first has it open.
#[test]
fn the_side_file_has_the_store_files_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let store = Store::open(&path, &opts());
    nix::sys::stat::umask(old);
    let _store = store.unwrap();
    let side = layout::side_file(&path).unwrap();
    let mode = std::fs::metadata(&side).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "side file {} has mode {mode:o}", side.display());
}

/// Defect 8: two processes each creating a different file must both commit.
#[test]
fn two_processes_create_different_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    let a = Store::open(&path, &opts()).unwrap();
    let b = Store::open(&path, &opts()).unwrap();
    let mut ta = a.begin();
    let mut tb = b.begin();
    let fa = ta.create_file("from-a").unwrap();
    let fb = tb.create_file("from-b").unwrap();
    ta.write_page(fa, 0, &[0xa; PS]).unwrap();
    tb.write_page(fb, 0, &[0xb; PS]).unwrap();
    ta.commit().unwrap();
    tb.commit()
        .expect("the second process's new file collided with the first's");
    drop((a, b));
    let store = reopen_alone(&path);
    let snap = store.snapshot();
    let mut buf = [0u8; PS];
    for (name, fill) in [("from-a", 0xa), ("from-b", 0xb)] {
        snap.read_page(snap.file(name).unwrap(), 0, &mut buf).unwrap();
        assert_eq!(buf[0], fill, "{name}");
    }
}

/// Risk "visible before durable": a commit whose flush has not ended is not shown to
/// readers of this process or another; it is to a transaction that builds on it.
#[test]
fn readers_see_only_durable_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_store(&dir, "s.onesync");
    let a = Store::open(&path, &opts()).unwrap();
    let b = Store::open(&path, &opts()).unwrap();
    put(&a, 0, 1).unwrap();
    let mut t = a.begin();
    let id = t.file("data").unwrap();
    t.write_page(id, 0, &[2; PS]).unwrap();
    let pending = t.commit_without_waiting().unwrap();
    assert_eq!(
        get(&a, 0),
        1,
        "a reader of the committing process saw a commit not yet durable"
    );
    assert_eq!(
        get(&b, 0),
        1,
        "a reader of another process saw a commit not yet durable"
    );
    let next = a.begin();
    let mut buf = [0u8; PS];
    next.read_page(id, 0, &mut buf).unwrap();
    assert_eq!(buf[0], 2, "a writer builds on the written commit");
    drop(next);
    pending.wait().unwrap();
    assert_eq!(get(&a, 0), 2);
    assert_eq!(get(&b, 0), 2);
}

/// A disk whose reads at one offset fail (a bad sector), recording where writes went.
struct BadSector {
    disk: onesync_store::sim::SimDisk,
    writes: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    bad: std::sync::Arc<std::sync::Mutex<Option<u64>>>,
}

impl BadSector {
    fn check(&self, offset: u64, len: usize) -> std::io::Result<()> {
        match *self.bad.lock().unwrap() {
            Some(bad) if offset <= bad && bad < offset + len as u64 => {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            }
            _ => Ok(()),
        }
    }
}

impl onesync_store::io::StorageIo for BadSector {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.check(offset, buf.len())?;
        self.disk.read_at(buf, offset)
    }
    fn read_durable_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.check(offset, buf.len())?;
        self.disk.read_durable_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        self.writes.lock().unwrap().push(offset);
        self.disk.write_at(data, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.disk.sync_data()
    }
    fn size(&self) -> std::io::Result<u64> {
        self.disk.size()
    }
}

/// Risk "a read error in the chain's tail": the open fails safe, naming the offset and the
/// command that salvages; a salvaging open shows every commit before the damage.
#[test]
fn a_read_error_in_the_chain_fails_safe_and_can_be_salvaged() {
    use onesync_store::io::StorageIo;
    let disk = onesync_store::sim::SimDisk::new();
    let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let bad = std::sync::Arc::new(std::sync::Mutex::new(None));
    let io = || -> Box<dyn StorageIo> {
        Box::new(BadSector {
            disk: disk.clone(),
            writes: writes.clone(),
            bad: bad.clone(),
        })
    };
    let store = Store::create_with_io(io(), &opts()).unwrap();
    for page in 0..3 {
        put(&store, page, page as u8 + 1).unwrap();
    }
    let before = writes.lock().unwrap().len();
    put(&store, 3, 4).unwrap();
    let fourth = writes.lock().unwrap()[before];
    put(&store, 4, 5).unwrap();
    drop(store);
    *bad.lock().unwrap() = Some(fourth);
    let message = match Store::open_with_io(io(), &opts()) {
        Err(e @ Error::ReadFailed { .. }) => e.to_string(),
        other => panic!("expected ReadFailed, got {:?}", other.err()),
    };
    assert!(message.contains(&format!("at byte {fourth}")), "{message}");
    assert!(message.contains("onesync salvage"), "{message}");
    let salvaging = Options {
        read_only: true,
        salvage: true,
        ..opts()
    };
    let store = Store::open_with_io(io(), &salvaging).unwrap();
    assert!(store
        .salvage_stopped_by()
        .is_some_and(|why| why.contains("at byte")));
    let got: Vec<u8> = (0..5).map(|page| get(&store, page)).collect();
    assert_eq!(got, vec![1, 2, 3, 0, 0], "the prefix before the bad sector");
}
