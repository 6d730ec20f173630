//! MobiBench update: one UPDATE of a random row's 100-byte string per transaction (an
//! autocommit statement), on an `item` table of as many rows as transactions.

use anyhow::Result;
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};

use super::insert::create_items;
use super::{payload, Transactions};

pub struct Update;

impl Transactions for Update {
    fn set_up(&self, conn: &Connection, txns: u64, rng: &mut SmallRng) -> Result<()> {
        create_items(conn, txns, rng)
    }

    fn run(&self, conn: &Connection, _n: u64, rng: &mut SmallRng) -> Result<()> {
        let rows = conn.query_row("SELECT max(id) FROM item", [], |r| r.get::<_, i64>(0))?;
        let id = rng.random_range(1..=rows.max(1));
        conn.prepare_cached("UPDATE item SET v = ?1 WHERE id = ?2")?
            .execute(params![payload(rng), id])?;
        Ok(())
    }
}
