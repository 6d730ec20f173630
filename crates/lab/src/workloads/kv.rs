//! The LS-MVBT paper's key/value transactions on a table `kv(key, value)` (an mvbt virtual
//! table or a plain SQLite table, whichever scheme made it): random keys loaded, then
//! one-statement transactions inserting, updating, deleting or searching random keys.

use std::collections::HashSet;

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};

use crate::sqlite::in_transaction;

/// Bytes of every record's value (the paper's node-size experiment uses 128-byte records).
pub const VALUE_BYTES: usize = 128;
/// Keys are drawn from [0, records × KEY_SPACE_FACTOR).
pub const KEY_SPACE_FACTOR: i64 = 50;

/// The keys present in a table, with O(1) random choice and removal.
pub struct KeySet {
    keys: Vec<i64>,
    present: HashSet<i64>,
    space: i64,
}

impl KeySet {
    pub fn new(space: i64) -> KeySet {
        KeySet {
            keys: Vec::new(),
            present: HashSet::new(),
            space,
        }
    }

    pub fn absent(&self, rng: &mut SmallRng) -> i64 {
        loop {
            let key = rng.random_range(0..self.space);
            if !self.present.contains(&key) {
                return key;
            }
        }
    }

    pub fn add(&mut self, key: i64) {
        if self.present.insert(key) {
            self.keys.push(key);
        }
    }

    pub fn any(&self, rng: &mut SmallRng) -> Option<i64> {
        (!self.keys.is_empty()).then(|| self.keys[rng.random_range(0..self.keys.len())])
    }

    pub fn take_any(&mut self, rng: &mut SmallRng) -> Option<i64> {
        if self.keys.is_empty() {
            return None;
        }
        let key = self.keys.swap_remove(rng.random_range(0..self.keys.len()));
        self.present.remove(&key);
        Some(key)
    }
}

/// `len` random bytes.
pub fn value(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}

/// Loads `records` random keys in one transaction.
pub fn load(conn: &Connection, records: u64, rng: &mut SmallRng) -> Result<KeySet> {
    let mut keys = KeySet::new((records as i64).max(1) * KEY_SPACE_FACTOR);
    in_transaction(conn, || -> Result<()> {
        let mut insert = conn.prepare("INSERT INTO kv(key, value) VALUES (?1, ?2)")?;
        for _ in 0..records {
            let key = keys.absent(rng);
            insert.execute(params![key, value(rng, VALUE_BYTES)])?;
            keys.add(key);
        }
        Ok(())
    })?;
    Ok(keys)
}

/// One measured transaction kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// Insert a random absent key and delete a random present one, alternately.
    Alternate,
    Insert,
    Update,
    Delete,
    Search,
}

/// Runs one autocommit statement of kind `query` (for `Alternate`, `n` picks the half).
pub fn transaction(
    conn: &Connection,
    query: Query,
    n: u64,
    keys: &mut KeySet,
    rng: &mut SmallRng,
) -> Result<()> {
    let query = match query {
        Query::Alternate if n.is_multiple_of(2) => Query::Insert,
        Query::Alternate => Query::Delete,
        q => q,
    };
    match query {
        Query::Insert | Query::Alternate => {
            let key = keys.absent(rng);
            conn.prepare_cached("INSERT INTO kv(key, value) VALUES (?1, ?2)")?
                .execute(params![key, value(rng, VALUE_BYTES)])?;
            keys.add(key);
        }
        Query::Update => {
            let key = keys.any(rng).ok_or_else(|| anyhow!("no key left to update"))?;
            conn.prepare_cached("UPDATE kv SET value = ?2 WHERE key = ?1")?
                .execute(params![key, value(rng, VALUE_BYTES)])?;
        }
        Query::Delete => {
            let key = keys
                .take_any(rng)
                .ok_or_else(|| anyhow!("no key left to delete"))?;
            let deleted = conn
                .prepare_cached("DELETE FROM kv WHERE key = ?1")?
                .execute([key])?;
            if deleted != 1 {
                bail!("deleting key {key} deleted {deleted} rows");
            }
        }
        Query::Search => {
            let key = keys.any(rng).ok_or_else(|| anyhow!("no key to search"))?;
            let found: Vec<u8> = conn
                .prepare_cached("SELECT value FROM kv WHERE key = ?1")?
                .query_row([key], |r| r.get(0))
                .with_context(|| format!("searching key {key}"))?;
            if found.len() != VALUE_BYTES {
                bail!("key {key} has a {}-byte value", found.len());
            }
        }
    }
    Ok(())
}
