//! MobiBench insert: one INSERT of a 100-byte string (autoincrement key) per transaction,
//! an autocommit statement as MobiBench runs it. Also the `item` table update and delete use.

use anyhow::Result;
use rand::rngs::SmallRng;
use rusqlite::Connection;

use super::{payload, Transactions};

pub struct Insert;

/// The `item` table with `rows` random records.
pub fn create_items(conn: &Connection, rows: u64, rng: &mut SmallRng) -> Result<()> {
    conn.execute_batch("CREATE TABLE item(id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT NOT NULL)")?;
    let mut insert = conn.prepare("INSERT INTO item(v) VALUES (?1)")?;
    for _ in 0..rows {
        insert.execute([payload(rng)])?;
    }
    Ok(())
}

impl Transactions for Insert {
    fn set_up(&self, conn: &Connection, _txns: u64, rng: &mut SmallRng) -> Result<()> {
        create_items(conn, 0, rng)
    }

    fn run(&self, conn: &Connection, _n: u64, rng: &mut SmallRng) -> Result<()> {
        conn.prepare_cached("INSERT INTO item(v) VALUES (?1)")?
            .execute([payload(rng)])?;
        Ok(())
    }
}
