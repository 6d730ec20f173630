//! One [`Tree`] per file per process, shared by every connection (and every
//! table name) that opens it, plus which table instance owns its write
//! transaction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use onesync_mvbt::{Config, Counters, Key, RecoveryReport, Tree, Version};

use super::error::VtabError;

/// The open write transaction of a tree.
pub(crate) struct Writer {
    /// The table instance (`sqlite3_vtab`, i.e. one connection's table) that began it.
    pub owner: u64,
    /// Engine savepoint depth; SQLite's savepoint N is engine depth N + 1.
    pub depth: usize,
    /// The largest key now, once looked up (`Some(None)`: the tree is
    /// empty), kept up to date so that keyless INSERTs don't search each time.
    pub largest_key: Option<Option<Key>>,
}

impl Writer {
    pub fn new(owner: u64) -> Self {
        Self {
            owner,
            depth: 0,
            largest_key: None,
        }
    }

    pub fn put(&mut self, key: Key) {
        if let Some(largest) = &mut self.largest_key {
            *largest = Some(largest.map_or(key, |l| l.max(key)));
        }
    }

    pub fn deleted(&mut self, key: Key) {
        if self.largest_key == Some(Some(key)) {
            self.largest_key = None;
        }
    }
}

pub(crate) struct TreeState {
    pub tree: Tree,
    pub writer: Option<Writer>,
}

/// Counters of the cursors over one tree (for tests and the lab).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MvbtScanStats {
    /// `xFilter` calls.
    pub filters: u64,
    /// Rows the cursors fetched from the tree.
    pub rows_fetched: u64,
    /// The plan (`idxNum` bits, see the README) of the last `xFilter`.
    pub last_idx_num: i64,
}

pub(crate) struct SharedTree {
    pub path: PathBuf,
    key: PathBuf,
    state: Mutex<TreeState>,
    pub filters: AtomicU64,
    pub rows_fetched: AtomicU64,
    pub last_idx_num: AtomicI64,
}

impl SharedTree {
    pub fn lock(&self) -> Result<MutexGuard<'_, TreeState>, VtabError> {
        self.state.lock().map_err(|_| {
            VtabError::internal(format!(
                "mvbt: {} is unusable after an internal panic; reopen the database",
                self.path.display()
            ))
        })
    }

    pub fn scan_stats(&self) -> MvbtScanStats {
        MvbtScanStats {
            filters: self.filters.load(Ordering::Relaxed),
            rows_fetched: self.rows_fetched.load(Ordering::Relaxed),
            last_idx_num: self.last_idx_num.load(Ordering::Relaxed),
        }
    }
}

type Registry = BTreeMap<PathBuf, Arc<SharedTree>>;
static REGISTRY: Mutex<Registry> = Mutex::new(BTreeMap::new());

fn registry() -> MutexGuard<'static, Registry> {
    // The map is never left half-updated (insert/remove are single calls), so
    // a poisoned lock is still consistent.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registry key of `path`: absolute, with the directory's symlinks resolved
/// (the file itself may not exist yet).
pub(crate) fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map_or_else(|_| absolute.clone(), |d| d.join(name)),
        _ => absolute,
    }
}

/// The shared tree of `path`, opening it (creating it when `create`) if this
/// process doesn't have it open yet.
pub(crate) fn acquire(path: &Path, config: &Config, create: bool) -> Result<Arc<SharedTree>, VtabError> {
    let key = canonical(path);
    let mut map = registry();
    if let Some(shared) = map.get(&key) {
        return Ok(Arc::clone(shared));
    }
    let opened = if create {
        Tree::open_or_create(&key, config.clone())
    } else {
        Tree::open(&key, config.clone())
    };
    let tree =
        opened.map_err(|e| VtabError::from_engine(e).context(&format!("cannot open {}", path.display())))?;
    let shared = Arc::new(SharedTree {
        path: path.to_owned(),
        key: key.clone(),
        state: Mutex::new(TreeState { tree, writer: None }),
        filters: AtomicU64::new(0),
        rows_fetched: AtomicU64::new(0),
        last_idx_num: AtomicI64::new(0),
    });
    map.insert(key, Arc::clone(&shared));
    Ok(shared)
}

/// Drops one user; the last one closes the tree (under the registry lock, so
/// that a concurrent `acquire` never opens the file while it is still held).
pub(crate) fn release(shared: Arc<SharedTree>) {
    let mut map = registry();
    let key = shared.key.clone();
    let ptr = Arc::as_ptr(&shared);
    drop(shared);
    if map
        .get(&key)
        .is_some_and(|s| Arc::as_ptr(s) == ptr && Arc::strong_count(s) == 1)
    {
        map.remove(&key);
    }
}

/// `DROP TABLE` (after the file is deleted): forgets the tree, which closes
/// once no other connection holds it.
pub(crate) fn forget(shared: Arc<SharedTree>) {
    let mut map = registry();
    if map.get(&shared.key).is_some_and(|s| Arc::ptr_eq(s, &shared)) {
        map.remove(&shared.key);
    }
    drop(shared);
}

impl SharedTree {
    /// The file, as the registry knows it (absolute).
    pub fn file(&self) -> &Path {
        &self.key
    }
}

fn with_tree<T>(path: &Path, f: impl FnOnce(&SharedTree, &TreeState) -> T) -> Option<T> {
    let map = registry();
    let shared = map.get(&canonical(path))?;
    let state = shared.lock().ok()?;
    Some(f(shared, &state))
}

/// The engine counters of the tree in file `path`, if a table of this process
/// has it open.
pub fn mvbt_counters(path: &Path) -> Option<Counters> {
    with_tree(path, |_, s| s.tree.counters())
}

/// What the open of the tree in file `path` recovered, if a table of this
/// process has it open.
pub fn mvbt_recovery(path: &Path) -> Option<RecoveryReport> {
    with_tree(path, |_, s| s.tree.recovery().clone())
}

/// The latest committed version of the tree in file `path`, if a table of
/// this process has it open.
pub fn mvbt_latest_version(path: &Path) -> Option<Version> {
    with_tree(path, |_, s| s.tree.latest_version())
}

/// The cursor counters of the tree in file `path`, if a table of this process
/// has it open.
pub fn mvbt_scan_stats(path: &Path) -> Option<MvbtScanStats> {
    with_tree(path, |shared, _| shared.scan_stats())
}
