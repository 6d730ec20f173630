//! Query plans (`xBestIndex`): which key and `as_of` constraints the cursor applies itself,
//! and what a plan costs.

use std::ffi::c_int;

use super::schema::{COL_AS_OF, COL_KEY, COL_ROWID, IDX_AS_OF, IDX_KEY_EQ, IDX_KEY_HIGH, IDX_KEY_LOW};
use crate::sys::vtab::{IndexConstraint, IndexPlan};
use onesync_vfs::ffi::{
    SQLITE_CONSTRAINT, SQLITE_INDEX_CONSTRAINT_EQ, SQLITE_INDEX_CONSTRAINT_GE, SQLITE_INDEX_CONSTRAINT_GT,
    SQLITE_INDEX_CONSTRAINT_LE, SQLITE_INDEX_CONSTRAINT_LT, SQLITE_OK,
};

/// One usable constraint the plan hands to xFilter.
fn plan_letter(c: &IndexConstraint) -> Option<u8> {
    let on_key = c.column == COL_KEY || c.column == COL_ROWID;
    match (on_key, c.column == COL_AS_OF, c.op) {
        (true, _, SQLITE_INDEX_CONSTRAINT_EQ) => Some(b'e'),
        (true, _, SQLITE_INDEX_CONSTRAINT_GT) => Some(b'g'),
        (true, _, SQLITE_INDEX_CONSTRAINT_GE) => Some(b'G'),
        (true, _, SQLITE_INDEX_CONSTRAINT_LT) => Some(b'l'),
        (true, _, SQLITE_INDEX_CONSTRAINT_LE) => Some(b'L'),
        (_, true, SQLITE_INDEX_CONSTRAINT_EQ) => Some(b'v'),
        _ => None,
    }
}

/// Fills in `plan`: `SQLITE_OK`, or `SQLITE_CONSTRAINT` when an `as_of` constraint is
/// there but not usable (reading the latest version would be wrong).
pub(super) fn best_index(plan: &mut IndexPlan) -> c_int {
    let mut letters = Vec::new();
    let mut idx_num = 0;
    let mut as_of_unusable = false;
    for (c, u) in plan.constraints.iter().zip(plan.usage.iter_mut()) {
        let Some(letter) = plan_letter(c) else { continue };
        if !c.usable {
            as_of_unusable |= letter == b'v';
            continue;
        }
        // A second `as_of = ` is left for SQLite to check against the column.
        if letter == b'v' && idx_num & IDX_AS_OF != 0 {
            continue;
        }
        letters.push(letter);
        u.argv_index = c_int::try_from(letters.len()).unwrap_or(c_int::MAX);
        u.omit = true;
        idx_num |= match letter {
            b'e' => IDX_KEY_EQ,
            b'g' | b'G' => IDX_KEY_LOW,
            b'l' | b'L' => IDX_KEY_HIGH,
            _ => IDX_AS_OF,
        };
    }
    // Reading the latest version and filtering on the as_of column would be
    // wrong for any other version: such a plan is not an option.
    if as_of_unusable && idx_num & IDX_AS_OF == 0 {
        return SQLITE_CONSTRAINT;
    }
    let (cost, rows) = if idx_num & IDX_KEY_EQ != 0 {
        plan.unique = true;
        (10.0, 1)
    } else if idx_num & (IDX_KEY_LOW | IDX_KEY_HIGH) == IDX_KEY_LOW | IDX_KEY_HIGH {
        (2_000.0, 1_000)
    } else if idx_num & (IDX_KEY_LOW | IDX_KEY_HIGH) != 0 {
        (50_000.0, 25_000)
    } else {
        (100_000.0, 100_000)
    };
    plan.estimated_cost = cost;
    plan.estimated_rows = rows;
    plan.idx_num = idx_num;
    if let [only] = plan.order_by[..] {
        if (only.column == COL_KEY || only.column == COL_ROWID) && !only.desc {
            plan.order_by_consumed = true;
        }
    }
    if !letters.is_empty() {
        plan.idx_str = Some(String::from_utf8(letters).unwrap_or_default());
    }
    SQLITE_OK
}
