//! Mixed: 1,000 records; each transaction is a point search or an update of one record,
//! `searches_per_write` searches for each update on average.

use anyhow::Result;
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};

use super::{payload, Transactions};

/// Records in the table.
const RECORDS: i64 = 1_000;

pub struct Mixed {
    pub searches_per_write: f64,
}

impl Transactions for Mixed {
    fn set_up(&self, conn: &Connection, _txns: u64, rng: &mut SmallRng) -> Result<()> {
        conn.execute_batch("CREATE TABLE record(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")?;
        let mut insert = conn.prepare("INSERT INTO record(id, v) VALUES (?1, ?2)")?;
        for id in 0..RECORDS {
            insert.execute(params![id, payload(rng)])?;
        }
        Ok(())
    }

    fn run(&self, conn: &Connection, _n: u64, rng: &mut SmallRng) -> Result<()> {
        let id = rng.random_range(0..RECORDS);
        let ratio = self.searches_per_write.max(0.0);
        if rng.random_bool(ratio / (ratio + 1.0)) {
            conn.prepare_cached("SELECT v FROM record WHERE id = ?1")?
                .query_row([id], |r| r.get::<_, String>(0))?;
        } else {
            conn.prepare_cached("UPDATE record SET v = ?1 WHERE id = ?2")?
                .execute(params![payload(rng), id])?;
        }
        Ok(())
    }
}
