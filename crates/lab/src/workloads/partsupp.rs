//! TPC-H partsupp (scale factor 0.075: 60,000 rows of about 220 bytes); each transaction
//! updates `pages` rows chosen at random, so about that many pages (60,000 rows span about
//! 1,700 to 3,400 pages). `bench partsupp` and the X-FTL experiments of `flash` run it.

use anyhow::Result;
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};

use super::{payload, Transactions};
use crate::sqlite::in_transaction;

/// Rows in the table.
const ROWS: i64 = 60_000;

pub struct Partsupp {
    /// Rows each transaction updates.
    pub pages: u64,
}

impl Transactions for Partsupp {
    fn set_up(&self, conn: &Connection, _txns: u64, rng: &mut SmallRng) -> Result<()> {
        conn.execute_batch(
            "CREATE TABLE partsupp(ps_partkey INTEGER NOT NULL, ps_suppkey INTEGER NOT NULL,
            ps_availqty INTEGER NOT NULL, ps_supplycost REAL NOT NULL, ps_comment TEXT NOT NULL,
            PRIMARY KEY (ps_partkey, ps_suppkey)) WITHOUT ROWID",
        )?;
        let mut insert = conn.prepare("INSERT INTO partsupp VALUES (?1, ?2, ?3, ?4, ?5)")?;
        // 15,000 parts with 4 suppliers each; the comment brings a row to about 220 bytes.
        for part in 0..ROWS / 4 {
            for supp in 0..4 {
                insert.execute(params![
                    part,
                    supp,
                    rng.random_range(1..10_000i64),
                    rng.random_range(1.0..1000.0f64),
                    payload(rng) + &payload(rng)[..95],
                ])?;
            }
        }
        Ok(())
    }

    fn run(&self, conn: &Connection, _n: u64, rng: &mut SmallRng) -> Result<()> {
        in_transaction(conn, || -> Result<()> {
            let mut update = conn.prepare_cached(
                "UPDATE partsupp SET ps_availqty = ?1, ps_supplycost = ?2 \
                 WHERE ps_partkey = ?3 AND ps_suppkey = ?4",
            )?;
            for _ in 0..self.pages {
                let row = rng.random_range(0..ROWS);
                update.execute(params![
                    rng.random_range(1..10_000i64),
                    rng.random_range(1.0..1000.0f64),
                    row / 4,
                    row % 4
                ])?;
            }
            Ok(())
        })
    }
}
