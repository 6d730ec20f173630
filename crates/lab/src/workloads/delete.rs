//! MobiBench delete: one DELETE of a row per transaction, in key order (an autocommit
//! statement), on an `item` table of as many rows as transactions.

use anyhow::Result;
use rand::rngs::SmallRng;
use rusqlite::Connection;

use super::insert::create_items;
use super::Transactions;

pub struct Delete;

impl Transactions for Delete {
    fn set_up(&self, conn: &Connection, txns: u64, rng: &mut SmallRng) -> Result<()> {
        create_items(conn, txns, rng)
    }

    fn run(&self, conn: &Connection, n: u64, _rng: &mut SmallRng) -> Result<()> {
        conn.prepare_cached("DELETE FROM item WHERE id = ?1")?
            .execute([n as i64 + 1])?;
        Ok(())
    }
}
