//! The concurrent-writer workloads of `bench writers`, after sqlite-multiwriter's three: each
//! writer is one connection running `BEGIN` … `COMMIT` transactions, and what differs between
//! the workloads is how much the writers' transactions overlap.
//!
//! - own-rows: no overlap in rows or pages. Each writer inserts [`ROWS_PER_TXN`] rows per
//!   transaction into its own table `t_<writer>`. Own tables, because in one table keyed by
//!   an integer rowid every writer would append to the same rightmost leaf page.
//! - shared-pages: rows apart, pages shared. One table `shared` of small rows, one per
//!   writer, made up front (so several writers' rows lie on one page); each transaction
//!   updates the writer's own row.
//! - hot-rows: the same rows. Every writer increments one of the same [`HOT_ROWS`] rows of
//!   `hot` (`UPDATE hot SET n = n + 1 WHERE id = ?`) per transaction.
//!
//! After the run an oracle checks the database against what the writers counted: own-rows,
//! every table holds [`ROWS_PER_TXN`] rows per commit of its writer; shared-pages, every
//! row's counter is its writer's commits; hot-rows, the counters add up to the committed
//! transactions and each counter is the number committed on its row (a lost update or a
//! commit applied twice shows here).
//!
//! A transaction's choices (its rows' payloads, its hot row) are made once, before its first
//! try ([`Writers::plan`]), so that a retry reruns the same transaction.

use anyhow::{bail, Result};
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use super::payload;

/// Rows each own-rows transaction inserts.
pub const ROWS_PER_TXN: u64 = 100;

/// Rows the hot-rows writers share.
pub const HOT_ROWS: usize = 4;

/// A workload of `bench writers` (the command-line value).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Writers {
    /// Each writer inserts 100 rows of 100 bytes per transaction into its own table
    /// (t_<writer>): no rows or pages in common
    OwnRows,
    /// One table of small rows, one per writer, made up front (several on a page): each
    /// transaction updates the writer's own row
    SharedPages,
    /// Every writer increments one of the same 4 rows per transaction; an oracle checks the
    /// counters against the commits afterwards
    HotRows,
}

/// What one transaction will do, chosen before its first try.
pub enum Plan {
    /// own-rows: these payloads, one row each.
    Insert(Vec<String>),
    /// shared-pages: this new value for the writer's row.
    Update(String),
    /// hot-rows: increment this row (0-based; its id is one more).
    Increment(usize),
}

impl Plan {
    /// The hot row it increments, if any.
    pub fn hot_row(&self) -> Option<usize> {
        match self {
            Plan::Increment(row) => Some(*row),
            Plan::Insert(_) | Plan::Update(_) => None,
        }
    }
}

/// What the writers counted: the oracle's expectation.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Committed transactions per writer (indexed by writer number).
    pub per_writer: Vec<u64>,
    /// hot-rows: committed transactions per hot row.
    pub per_hot_row: [u64; HOT_ROWS],
}

impl Tally {
    pub fn committed(&self) -> u64 {
        self.per_writer.iter().sum()
    }

    /// Adds `other`'s counts (another process's writers) to these.
    pub fn add(&mut self, other: &Tally) {
        if self.per_writer.len() < other.per_writer.len() {
            self.per_writer.resize(other.per_writer.len(), 0);
        }
        for (mine, theirs) in self.per_writer.iter_mut().zip(&other.per_writer) {
            *mine += theirs;
        }
        for (mine, theirs) in self.per_hot_row.iter_mut().zip(&other.per_hot_row) {
            *mine += theirs;
        }
    }
}

fn own_table(writer: u64) -> String {
    format!("t_{writer}")
}

/// A shared-pages row's value: small, so that many fit on a page.
fn small_value(rng: &mut SmallRng) -> String {
    (0..16)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

impl Writers {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Writers::OwnRows => "own-rows",
            Writers::SharedPages => "shared-pages",
            Writers::HotRows => "hot-rows",
        }
    }

    /// The tables (and for shared-pages and hot-rows, their rows) for `writers` writers;
    /// inside the caller's transaction.
    pub fn set_up(self, conn: &Connection, writers: u64) -> Result<()> {
        match self {
            Writers::OwnRows => {
                for w in 0..writers {
                    conn.execute_batch(&format!(
                        "CREATE TABLE {}(id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
                        own_table(w)
                    ))?;
                }
            }
            Writers::SharedPages => {
                conn.execute_batch(
                    "CREATE TABLE shared(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, v TEXT NOT NULL)",
                )?;
                let mut insert = conn.prepare("INSERT INTO shared(id, n, v) VALUES (?1, 0, ?2)")?;
                for w in 0..writers {
                    insert.execute(params![w as i64, "-".repeat(16)])?;
                }
            }
            Writers::HotRows => {
                conn.execute_batch("CREATE TABLE hot(id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")?;
                let mut insert = conn.prepare("INSERT INTO hot(id, n) VALUES (?1, 0)")?;
                for row in 0..HOT_ROWS {
                    insert.execute([row as i64 + 1])?;
                }
            }
        }
        Ok(())
    }

    /// The next transaction of a writer.
    pub fn plan(self, rng: &mut SmallRng) -> Plan {
        match self {
            Writers::OwnRows => Plan::Insert((0..ROWS_PER_TXN).map(|_| payload(rng)).collect()),
            Writers::SharedPages => Plan::Update(small_value(rng)),
            Writers::HotRows => Plan::Increment(rng.random_range(0..HOT_ROWS)),
        }
    }

    /// The statements of `plan` by writer `writer`, between the caller's BEGIN and COMMIT.
    pub fn apply(self, conn: &Connection, writer: u64, plan: &Plan) -> rusqlite::Result<()> {
        match plan {
            Plan::Insert(rows) => {
                let mut insert =
                    conn.prepare_cached(&format!("INSERT INTO {}(v) VALUES (?1)", own_table(writer)))?;
                for v in rows {
                    insert.execute([v])?;
                }
            }
            Plan::Update(v) => {
                conn.prepare_cached("UPDATE shared SET n = n + 1, v = ?1 WHERE id = ?2")?
                    .execute(params![v, writer as i64])?;
            }
            Plan::Increment(row) => {
                conn.prepare_cached("UPDATE hot SET n = n + 1 WHERE id = ?")?
                    .execute([*row as i64 + 1])?;
            }
        }
        Ok(())
    }

    /// The oracle: the database agrees with what the writers counted.
    pub fn check(self, conn: &Connection, tally: &Tally) -> Result<()> {
        match self {
            Writers::OwnRows => {
                for (w, &commits) in tally.per_writer.iter().enumerate() {
                    let rows: i64 = conn.query_row(
                        &format!("SELECT count(*) FROM {}", own_table(w as u64)),
                        [],
                        |r| r.get(0),
                    )?;
                    if rows as u64 != commits * ROWS_PER_TXN {
                        bail!(
                            "own-rows: table {} has {rows} rows, but its writer committed {commits} \
                             transactions of {ROWS_PER_TXN}",
                            own_table(w as u64)
                        );
                    }
                }
            }
            Writers::SharedPages => {
                for (w, &commits) in tally.per_writer.iter().enumerate() {
                    let n: i64 =
                        conn.query_row("SELECT n FROM shared WHERE id = ?1", [w as i64], |r| r.get(0))?;
                    if n as u64 != commits {
                        bail!("shared-pages: writer {w}'s row was updated {n} times, but it committed {commits}");
                    }
                }
            }
            Writers::HotRows => {
                let mut counters = [0i64; HOT_ROWS];
                for (row, counter) in counters.iter_mut().enumerate() {
                    *counter =
                        conn.query_row("SELECT n FROM hot WHERE id = ?1", [row as i64 + 1], |r| r.get(0))?;
                }
                check_hot_counters(&counters, tally)?;
            }
        }
        Ok(())
    }
}

/// hot-rows' oracle on the counters read back: their sum is the number of committed
/// transactions, and each is the number committed on its row.
pub fn check_hot_counters(counters: &[i64; HOT_ROWS], tally: &Tally) -> Result<()> {
    let sum: i64 = counters.iter().sum();
    let committed = tally.committed();
    let per_row_committed: u64 = tally.per_hot_row.iter().sum();
    if per_row_committed != committed {
        bail!("hot-rows: the writers counted {committed} commits, but {per_row_committed} on the rows");
    }
    if sum < 0 || sum as u64 != committed {
        bail!(
            "hot-rows oracle: the counters add up to {sum} (rows {counters:?}), but {committed} \
             transactions committed (per row {:?})",
            tally.per_hot_row
        );
    }
    for (row, (&found, &expected)) in counters.iter().zip(&tally.per_hot_row).enumerate() {
        if found < 0 || found as u64 != expected {
            bail!(
                "hot-rows oracle: row {} holds {found}, but {expected} transactions committed on it \
                 (rows {counters:?}, committed {:?})",
                row + 1,
                tally.per_hot_row
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(per_writer: &[u64], per_hot_row: [u64; HOT_ROWS]) -> Tally {
        Tally {
            per_writer: per_writer.to_vec(),
            per_hot_row,
        }
    }

    #[test]
    fn the_oracle_accepts_counters_that_match_the_commits() {
        let t = tally(&[6, 4], [3, 3, 2, 2]);
        assert!(check_hot_counters(&[3, 3, 2, 2], &t).is_ok());
    }

    #[test]
    fn the_oracle_fails_a_lost_update_a_double_commit_and_a_misplaced_one() {
        let t = tally(&[6, 4], [3, 3, 2, 2]);
        // One increment lost (two writers read the same n).
        let lost = check_hot_counters(&[3, 2, 2, 2], &t).unwrap_err().to_string();
        assert!(lost.contains("add up to 9"), "{lost}");
        // One applied twice (a retry of a transaction that had committed).
        assert!(check_hot_counters(&[4, 3, 2, 2], &t).is_err());
        // The right sum, on the wrong rows.
        let misplaced = check_hot_counters(&[4, 2, 2, 2], &t).unwrap_err().to_string();
        assert!(misplaced.contains("row 1 holds 4"), "{misplaced}");
    }

    #[test]
    fn the_oracle_checks_the_database() {
        let conn = Connection::open_in_memory().unwrap();
        Writers::HotRows.set_up(&conn, 2).unwrap();
        for row in [0, 1, 1, 3] {
            Writers::HotRows.apply(&conn, 0, &Plan::Increment(row)).unwrap();
        }
        assert!(Writers::HotRows.check(&conn, &tally(&[4], [1, 2, 0, 1])).is_ok());
        assert!(Writers::HotRows.check(&conn, &tally(&[4], [2, 1, 0, 1])).is_err());
        assert!(Writers::HotRows.check(&conn, &tally(&[5], [1, 2, 0, 2])).is_err());
    }

    #[test]
    fn own_rows_and_shared_pages_are_checked_too() {
        let conn = Connection::open_in_memory().unwrap();
        let mut rng = rand::SeedableRng::seed_from_u64(1);
        for w in [Writers::OwnRows, Writers::SharedPages] {
            w.set_up(&conn, 2).unwrap();
            for writer in [0, 1, 1] {
                w.apply(&conn, writer, &w.plan(&mut rng)).unwrap();
            }
            assert!(
                w.check(&conn, &tally(&[1, 2], [0; HOT_ROWS])).is_ok(),
                "{}",
                w.name()
            );
            assert!(
                w.check(&conn, &tally(&[2, 1], [0; HOT_ROWS])).is_err(),
                "{}",
                w.name()
            );
        }
    }

    #[test]
    fn tallies_of_processes_add_up() {
        let mut all = tally(&[1, 0, 0], [1, 0, 0, 0]);
        all.add(&tally(&[0, 2, 0, 5], [0, 4, 3, 0]));
        assert_eq!(all, tally(&[1, 2, 0, 5], [1, 4, 3, 0]));
        assert_eq!(all.committed(), 8);
    }
}
