//! dbbench: per transaction an insert (60 %), an update of a random row (20 %), a delete
//! (10 %) or an index search (10 %) on one of [`TABLES`] tables; `bench` runs one connection
//! per thread, each on its own table (or all on one).

use crate::sqlite::{retry_while_busy, BUSY_RETRY_PAUSE};
use anyhow::Result;
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};

use super::{payload, Transactions};

/// Tables set up (threads beyond this share them round-robin).
pub const TABLES: u64 = 64;

/// dbbench on table number `table`.
pub struct Dbbench {
    pub table: u64,
}

fn table_name(n: u64) -> String {
    format!("bench_{n}")
}

impl Transactions for Dbbench {
    /// Every table, each with a tenth of the run's rows to update, delete and search.
    fn set_up(&self, conn: &Connection, txns: u64, rng: &mut SmallRng) -> Result<()> {
        let per_table = (txns / 10).max(10);
        for table in 0..TABLES {
            conn.execute_batch(&format!(
                "CREATE TABLE {t}(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT NOT NULL);
                 CREATE INDEX {t}_k ON {t}(k);",
                t = table_name(table)
            ))?;
            let mut insert = conn.prepare(&format!(
                "INSERT INTO {}(k, v) VALUES (?1, ?2)",
                table_name(table)
            ))?;
            for _ in 0..per_table {
                insert.execute(params![rng.random_range(0..1_000_000i64), payload(rng)])?;
            }
        }
        Ok(())
    }

    fn run(&self, conn: &Connection, _n: u64, rng: &mut SmallRng) -> Result<()> {
        let table = table_name(self.table);
        let roll = rng.random_range(0..100u32);
        let key = rng.random_range(0..1_000_000i64);
        let value = (roll < 80).then(|| payload(rng));
        // Each transaction is one statement (autocommit), so a statement refused with
        // SQLITE_BUSY after the busy timeout (WAL's busy handler can starve a writer for
        // seconds under many threads) is simply run again, its wait counted in its latency.
        retry_while_busy(BUSY_RETRY_PAUSE, || -> rusqlite::Result<()> {
            if roll < 60 {
                conn.prepare_cached(&format!("INSERT INTO {table}(k, v) VALUES (?1, ?2)"))?
                    .execute(params![key, value])?;
            } else if roll < 80 {
                conn.prepare_cached(&format!(
                    "UPDATE {table} SET v = ?1 WHERE id = (SELECT id FROM {table} WHERE k >= ?2 ORDER BY k LIMIT 1)"
                ))?
                .execute(params![value, key])?;
            } else if roll < 90 {
                conn.prepare_cached(&format!(
                    "DELETE FROM {table} WHERE id = (SELECT id FROM {table} WHERE k >= ?1 ORDER BY k LIMIT 1)"
                ))?
                .execute([key])?;
            } else {
                let mut search = conn.prepare_cached(&format!(
                    "SELECT id, v FROM {table} WHERE k >= ?1 ORDER BY k LIMIT 10"
                ))?;
                let mut rows = search.query([key])?;
                while rows.next()?.is_some() {}
            }
            Ok(())
        })?;
        Ok(())
    }
}
