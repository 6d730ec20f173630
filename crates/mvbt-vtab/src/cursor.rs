//! Cursors: a scan of a key range of one version, fetched from the tree a page at a time.

use std::ffi::c_int;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use onesync_mvbt::Version;

use super::error::VtabError;
use super::registry::TreeState;
use super::schema::{COL_AS_OF, COL_KEY, COL_VALUE};
use super::table::{MvbtTable, Scan};
use super::value::{key_range, version_of, KeyOp, KeyRange, MvbtValue};
use crate::sys::vtab::SqlValue;

/// Rows a cursor fetches from the tree at a time.
const PAGE_ROWS: usize = 256;

impl Scan {
    /// `xFilter`: the plan's letters (see [`crate::IDX_KEY_EQ`]), one argument each.
    pub(super) fn filter(
        &mut self,
        t: &MvbtTable,
        idx_num: c_int,
        letters: &[u8],
        values: &[SqlValue<'_>],
    ) -> Result<(), VtabError> {
        t.shared.filters.fetch_add(1, Ordering::Relaxed);
        t.shared.last_idx_num.store(i64::from(idx_num), Ordering::Relaxed);
        let mut range = KeyRange::ALL;
        let mut as_of = None;
        for (letter, v) in letters.iter().zip(values) {
            let op = match letter {
                b'e' => KeyOp::Eq,
                b'g' => KeyOp::Gt,
                b'G' => KeyOp::Ge,
                b'l' => KeyOp::Lt,
                b'L' => KeyOp::Le,
                _ => {
                    as_of = Some(version_of(v)?);
                    continue;
                }
            };
            range = range.intersect(key_range(op, v));
        }
        if as_of == Some(None) {
            range = KeyRange::EMPTY; // as_of = NULL
        }
        self.start(t, range, as_of.flatten())
    }

    pub(super) fn start(
        &mut self,
        t: &MvbtTable,
        range: KeyRange,
        as_of: Option<Version>,
    ) -> Result<(), VtabError> {
        let mut st = t.shared.lock()?;
        let latest = st.tree.latest_version();
        let (at, shown) = match as_of {
            Some(v) if v > latest => {
                return Err(VtabError::error(format!(
                    "mvbt: version {v} of {} is not committed (latest committed version: {latest})",
                    t.name
                )))
            }
            Some(v) => (Some(v), v),
            None if t.writes_now(&st) => (None, latest + 1),
            // Pinned, so that paging stays within one version while other
            // connections commit.
            None => (Some(latest), latest),
        };
        *self = Scan {
            at,
            shown_version: shown,
            ..Scan::default()
        };
        if range.is_empty() {
            return Ok(());
        }
        if let (Bound::Included(a), Bound::Included(b)) = (range.low, range.high) {
            if a == b {
                let value = match at {
                    Some(v) => st.tree.get_at(a, v)?,
                    None => st.tree.get(a)?,
                };
                self.rows.extend(value.map(|v| (a, v)));
                t.shared
                    .rows_fetched
                    .fetch_add(self.rows.len() as u64, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.next_low = Some(range.low);
        self.high = Some(range.high);
        self.fetch(t, &mut st)
    }

    /// Loads the next page (called when the buffered rows are used up).
    fn fetch(&mut self, t: &MvbtTable, st: &mut TreeState) -> Result<(), VtabError> {
        self.rows.clear();
        self.pos = 0;
        let (Some(low), Some(high)) = (self.next_low.take(), self.high) else {
            return Ok(());
        };
        if (KeyRange { low, high }).is_empty() {
            return Ok(());
        }
        self.rows = st.tree.range(low, high, self.at, PAGE_ROWS)?;
        t.shared
            .rows_fetched
            .fetch_add(self.rows.len() as u64, Ordering::Relaxed);
        if self.rows.len() >= PAGE_ROWS {
            self.next_low = self.rows.last().map(|(k, _)| Bound::Excluded(*k));
        }
        Ok(())
    }

    /// `xNext`.
    pub(super) fn next(&mut self, t: &MvbtTable) -> Result<(), VtabError> {
        self.pos += 1;
        if self.pos >= self.rows.len() && self.next_low.is_some() {
            let mut st = t.shared.lock()?;
            self.fetch(t, &mut st)?;
        }
        Ok(())
    }

    /// `xEof`.
    pub(super) fn eof(&self) -> bool {
        self.pos >= self.rows.len()
    }

    /// `xColumn` of the current row.
    pub(super) fn column(&self, column: c_int) -> Result<SqlValue<'_>, VtabError> {
        let Some((key, bytes)) = self.rows.get(self.pos) else {
            return Err(VtabError::internal("mvbt: column read past the last row"));
        };
        Ok(match column {
            COL_KEY => SqlValue::Int(*key),
            COL_VALUE => MvbtValue::parse(bytes),
            COL_AS_OF => SqlValue::Int(i64::try_from(self.shown_version).unwrap_or(i64::MAX)),
            _ => SqlValue::Null,
        })
    }

    /// `xRowid` of the current row.
    pub(super) fn rowid(&self) -> Result<i64, VtabError> {
        let (key, _) = self
            .rows
            .get(self.pos)
            .ok_or_else(|| VtabError::internal("mvbt: rowid read past the last row"))?;
        Ok(*key)
    }
}
