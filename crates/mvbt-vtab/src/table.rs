//! One connection's instance of one `mvbt` table: opening it, its writes (`xUpdate`), and
//! its transactions and savepoints, which map onto the tree's.

use std::ffi::c_int;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use onesync_mvbt::{Key, Tree, Version};

use super::error::VtabError;
use super::registry::{self, SharedTree, TreeState, Writer};
use super::schema::SCHEMA;
use super::value::{key_of, MvbtValue};
use super::{args, plan};
use crate::sys::vtab::{IndexPlan, SqlValue, VirtualTable, VtabConnection};
use onesync_vfs::ffi::{SQLITE_FULL, SQLITE_IOERR_DELETE, SQLITE_OK, SQLITE_REPLACE};

/// Ids of table instances (one per connection and table), the owner tag of
/// a tree's write transaction.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// One connection's instance of one `mvbt` table.
pub(crate) struct MvbtTable {
    id: u64,
    pub(super) name: String,
    pub(super) shared: Arc<SharedTree>,
    /// The file name is derived from the table name (no `file=`).
    file_named_after_table: bool,
}

/// What a cursor is reading (`cursor.rs` runs it): a buffered page of rows and where the
/// next page starts.
#[derive(Default)]
pub(crate) struct Scan {
    pub(super) rows: Vec<(Key, Vec<u8>)>,
    pub(super) pos: usize,
    /// Lower bound of the next page; None once the range is exhausted.
    pub(super) next_low: Option<Bound<Key>>,
    pub(super) high: Option<Bound<Key>>,
    /// The version read (None: the open transaction, own writes included).
    pub(super) at: Option<Version>,
    /// The `as_of` column's value.
    pub(super) shown_version: Version,
}

impl MvbtTable {
    /// Opens (`create`: or creates) the tree the table's options name.
    fn open(conn: &VtabConnection<'_>, args: &[String], create: bool) -> Result<Self, VtabError> {
        let [_module, schema, name, options @ ..] = args else {
            return Err(VtabError::error("mvbt: SQLite passed too few arguments"));
        };
        let parsed = args::parse(options).map_err(VtabError::error)?;
        let db_file = conn.db_filename(schema);
        let path = args::table_path(parsed.file.as_deref(), db_file.as_deref(), schema, name)
            .map_err(VtabError::error)?;
        let shared = registry::acquire(&path, &parsed.config, create)?;
        let rc = conn.declare_vtab(SCHEMA);
        if rc != SQLITE_OK {
            registry::release(shared);
            return Err(VtabError::new(rc, "mvbt: sqlite3_declare_vtab failed"));
        }
        // Our xUpdate reports constraint violations before changing anything, so
        // SQLite may implement OR IGNORE / OR FAIL / OR ROLLBACK around it.
        conn.declare_constraint_support();
        Ok(MvbtTable {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            name: name.clone(),
            shared,
            file_named_after_table: parsed.file.is_none(),
        })
    }

    /// Rolls back this table's open transaction (SQLite does that before closing a
    /// connection anyway), as the table goes away.
    fn abandon_transaction(&self) {
        if let Ok(mut st) = self.shared.lock() {
            if st.writer.as_ref().is_some_and(|w| w.owner == self.id) {
                if st.tree.in_transaction() {
                    let _ = st.tree.rollback();
                }
                st.writer = None;
            }
        }
    }

    /// Forgets this table's write transaction, finishing it with `finish` if the tree is
    /// still in it.
    fn end_transaction<T>(
        &self,
        finish: impl FnOnce(&mut Tree) -> onesync_mvbt::Result<T>,
    ) -> Result<(), VtabError> {
        let mut st = self.shared.lock()?;
        if st.writer.as_ref().is_none_or(|w| w.owner != self.id) {
            return Ok(());
        }
        st.writer = None;
        if st.tree.in_transaction() {
            finish(&mut st.tree)?;
        }
        Ok(())
    }
}

impl VirtualTable for MvbtTable {
    type Cursor = Scan;

    fn connect(conn: &VtabConnection<'_>, args: &[String], create: bool) -> Result<Self, VtabError> {
        Self::open(conn, args, create)
    }

    fn disconnect(self) {
        self.abandon_transaction();
        registry::release(self.shared);
    }

    fn delete_storage(&self) -> Result<(), VtabError> {
        // Deleting first (an open file can be unlinked): if that fails, the table
        // stays and DROP TABLE reports why.
        match std::fs::remove_file(self.shared.file()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(VtabError::new(
                SQLITE_IOERR_DELETE,
                format!("mvbt: cannot delete {}: {e}", self.shared.file().display()),
            )),
            _ => Ok(()),
        }
    }

    fn destroyed(self) {
        self.abandon_transaction();
        registry::forget(self.shared);
    }

    fn best_index(&self, plan: &mut IndexPlan) -> Result<c_int, VtabError> {
        Ok(plan::best_index(plan))
    }

    fn filter(
        &self,
        cursor: &mut Scan,
        idx_num: c_int,
        idx_str: &[u8],
        args: &[SqlValue<'_>],
    ) -> Result<(), VtabError> {
        cursor.filter(self, idx_num, idx_str, args)
    }

    fn next(&self, cursor: &mut Scan) -> Result<(), VtabError> {
        cursor.next(self)
    }

    fn eof(cursor: &Scan) -> bool {
        cursor.eof()
    }

    fn column<'c>(&self, cursor: &'c Scan, column: c_int) -> Result<SqlValue<'c>, VtabError> {
        cursor.column(column)
    }

    fn rowid(cursor: &Scan) -> Result<i64, VtabError> {
        cursor.rowid()
    }

    fn update(&self, args: &[SqlValue<'_>], on_conflict: c_int) -> Result<Option<i64>, VtabError> {
        MvbtTable::update(self, args, on_conflict)
    }

    fn begin(&self) -> Result<(), VtabError> {
        let mut st = self.shared.lock()?;
        match &st.writer {
            Some(w) if w.owner == self.id => return Ok(()),
            Some(_) => {
                return Err(VtabError::busy(format!(
                    "mvbt: {} ({}) is being written by another connection; \
                     retry once its transaction ends",
                    self.name,
                    self.shared.path.display()
                )))
            }
            None => {}
        }
        st.tree.begin()?;
        st.writer = Some(Writer::new(self.id));
        Ok(())
    }

    fn sync(&self) -> Result<(), VtabError> {
        let mut st = self.shared.lock()?;
        // The durable commit happens here, so that a failure is reported
        // (and the transaction rolled back) before SQLite commits.
        if let Some((tree, _)) = self.my_writer(&mut st) {
            tree.commit()?;
        }
        Ok(())
    }

    fn commit(&self) -> Result<(), VtabError> {
        // Normally xSync committed; commit now if SQLite skipped it.
        self.end_transaction(Tree::commit)
    }

    fn rollback(&self) -> Result<(), VtabError> {
        // After xSync the tree has committed: nothing left to undo (the README says so: an
        // mvbt table and ordinary tables are not one atomic unit).
        self.end_transaction(|tree| tree.rollback())
    }

    fn savepoint(&self, n: c_int) -> Result<(), VtabError> {
        let mut st = self.shared.lock()?;
        let Some((tree, w)) = self.my_writer(&mut st) else {
            return Ok(());
        };
        let target = engine_depth(n);
        if target == 0 {
            return Ok(());
        }
        release_from(tree, w, target)?;
        // A table that joins a transaction late is told only the current
        // level: the levels below it (no changes of ours yet) are made too.
        while w.depth < target {
            w.depth = tree.savepoint()?;
        }
        Ok(())
    }

    fn release(&self, n: c_int) -> Result<(), VtabError> {
        let mut st = self.shared.lock()?;
        let Some((tree, w)) = self.my_writer(&mut st) else {
            return Ok(());
        };
        release_from(tree, w, engine_depth(n).max(1))
    }

    fn rollback_to(&self, n: c_int) -> Result<(), VtabError> {
        let mut st = self.shared.lock()?;
        let Some((tree, w)) = self.my_writer(&mut st) else {
            return Ok(());
        };
        let target = engine_depth(n);
        if target == 0 {
            // ROLLBACK TO the SAVEPOINT that began the transaction: undo
            // all of it, and go on in a fresh one (same version number).
            tree.rollback()?;
            tree.begin()?;
            w.depth = 0;
            w.largest_key = None;
        } else if w.depth >= target {
            // The engine drops the deeper levels and keeps `target` open.
            tree.rollback_to(target)?;
            w.depth = target;
            w.largest_key = None;
        }
        Ok(())
    }

    fn rename(&self) -> Result<(), VtabError> {
        if self.file_named_after_table {
            Err(VtabError::error(format!(
                "mvbt: cannot rename {}: its file {} is named after the table; \
                 create the table with file='...' to be able to rename it",
                self.name,
                self.shared.path.display()
            )))
        } else {
            Ok(())
        }
    }
}

// ---------------------------------------------------------------- writes

impl MvbtTable {
    /// Whether this table instance has the tree's write transaction open (and
    /// not yet made durable), so that reads see its own writes.
    /// (Once `xSync` committed, the tree is out of its transaction until `xCommit` forgets the
    /// writer.)
    pub(super) fn writes_now(&self, st: &TreeState) -> bool {
        st.tree.in_transaction() && st.writer.as_ref().is_some_and(|w| w.owner == self.id)
    }

    fn my_writer<'a>(&self, st: &'a mut TreeState) -> Option<(&'a mut Tree, &'a mut Writer)> {
        match st.writer.as_mut() {
            Some(w) if w.owner == self.id && st.tree.in_transaction() => Some((&mut st.tree, w)),
            _ => None,
        }
    }

    /// INSERT (`args[0]` NULL), UPDATE or DELETE (one argument); the new
    /// key of an INSERT.
    fn update(&self, args: &[SqlValue<'_>], on_conflict: c_int) -> Result<Option<Key>, VtabError> {
        let mut st = self.shared.lock()?;
        let Some((tree, writer)) = self.my_writer(&mut st) else {
            return Err(VtabError::error(format!(
                "mvbt: {}: write outside a transaction",
                self.name
            )));
        };
        let replace = on_conflict == SQLITE_REPLACE;
        let old_key = key_of(&args[0])?;
        if args.len() == 1 {
            if let Some(old) = old_key {
                tree.delete(old)?;
                writer.deleted(old);
            }
            return Ok(None);
        }
        let [_, rowid, key, value, ..] = args else {
            return Err(VtabError::error("mvbt: SQLite passed too few columns"));
        };
        let (rowid, key) = (key_of(rowid)?, key_of(key)?);
        let stored = MvbtValue::encode_sql(value);
        let Some(old) = old_key else {
            let new = match (key, rowid) {
                (Some(k), Some(r)) if k != r => {
                    return Err(VtabError::error(format!("mvbt: key {k} and rowid {r} differ")))
                }
                (Some(k), _) | (None, Some(k)) => k,
                (None, None) => next_key(tree, writer)?,
            };
            if !replace && tree.get(new)?.is_some() {
                return Err(VtabError::duplicate_key(&self.name, new));
            }
            tree.put(new, &stored)?;
            writer.put(new);
            return Ok(Some(new));
        };
        // An UPDATE may change the key through the key column or the rowid.
        let new = match (key, rowid) {
            (Some(k), _) if k != old => k,
            (_, Some(r)) if r != old => r,
            (Some(k), _) => k,
            (None, _) => {
                return Err(VtabError::mismatch(
                    "datatype mismatch: an mvbt key cannot be NULL",
                ))
            }
        };
        if new != old {
            if !replace && tree.get(new)?.is_some() {
                return Err(VtabError::duplicate_key(&self.name, new));
            }
            tree.delete(old)?;
            writer.deleted(old);
        }
        tree.put(new, &stored)?;
        writer.put(new);
        Ok(None)
    }
}

/// The key an INSERT without one gets: one above the largest (as SQLite's
/// rowid tables do), 1 in an empty table.
fn next_key(tree: &mut Tree, writer: &mut Writer) -> Result<Key, VtabError> {
    let largest = match writer.largest_key {
        Some(known) => known,
        None => largest_key(tree)?,
    };
    writer.largest_key = Some(largest);
    largest.map_or(Ok(1), |k| {
        k.checked_add(1).ok_or_else(|| {
            VtabError::new(
                SQLITE_FULL,
                "mvbt: the largest key is 9223372036854775807; give the key explicitly",
            )
        })
    })
}

/// The largest key in the tree now (own writes included).
fn largest_key(tree: &mut Tree) -> Result<Option<Key>, VtabError> {
    let first = tree.range(Bound::Unbounded, Bound::Unbounded, None, 1)?;
    let Some(&(mut low, _)) = first.first() else {
        return Ok(None);
    };
    // Binary search for the largest key with probes "first key >= mid";
    // invariant: a key >= low exists, none > high.
    let mut high = Key::MAX;
    while low < high {
        let mid = (low as i128 + (high as i128 - low as i128 + 1) / 2) as Key;
        match tree
            .range(Bound::Included(mid), Bound::Unbounded, None, 1)?
            .first()
        {
            Some(&(k, _)) => low = k,
            None => high = mid - 1,
        }
    }
    Ok(Some(low))
}

// ---------------------------------------------------------------- savepoints

/// SQLite's savepoint `n` (0-based, counting the statement savepoints but
/// not a `SAVEPOINT` that opened the transaction) is engine depth `n + 1`;
/// `n = -1` means the start of the transaction, engine depth 0.
fn engine_depth(n: c_int) -> usize {
    usize::try_from(n.saturating_add(1)).unwrap_or(0)
}

/// Forgets engine savepoints `target` (≥ 1) and deeper, if open, keeping their changes.
fn release_from(tree: &mut Tree, w: &mut Writer, target: usize) -> Result<(), VtabError> {
    if w.depth >= target {
        tree.release(target)?;
        w.depth = target - 1;
    }
    Ok(())
}
