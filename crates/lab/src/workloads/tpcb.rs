//! TPC-B-like transfers: per transaction one account, a teller and a branch move by the same
//! delta and a history row records it; money must be conserved. `bench tpcb` runs it, and
//! the VM's power-cut workload through the free functions.

use anyhow::{bail, Result};
use rand::rngs::SmallRng;
use rand::Rng;
use rusqlite::{params, Connection};

use super::Transactions;
use crate::sqlite::in_transaction;

/// Accounts of `bench tpcb` (pgbench's scale 1 has 100,000 accounts; a tenth keeps setup
/// short while transfers still spread over many pages).
pub const ACCOUNTS: i64 = 10_000;
const TELLERS: i64 = 10;
const BRANCHES: i64 = 1;

pub struct Tpcb {
    pub accounts: i64,
}

impl Transactions for Tpcb {
    fn set_up(&self, conn: &Connection, _txns: u64, _rng: &mut SmallRng) -> Result<()> {
        set_up(conn, self.accounts)
    }

    fn run(&self, conn: &Connection, n: u64, rng: &mut SmallRng) -> Result<()> {
        transaction(conn, self.accounts, n as i64, rng)
    }

    fn check(&self, conn: &Connection) -> Result<()> {
        money_conserved(conn)
    }
}

/// The TPC-B tables with `accounts` accounts (and the tellers and branches), every balance
/// 0; inside the caller's transaction.
pub fn set_up(conn: &Connection, accounts: i64) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE branches(bid INTEGER PRIMARY KEY, bbalance INTEGER NOT NULL, filler TEXT);
         CREATE TABLE tellers(tid INTEGER PRIMARY KEY, bid INTEGER, tbalance INTEGER NOT NULL, filler TEXT);
         CREATE TABLE accounts(aid INTEGER PRIMARY KEY, bid INTEGER, abalance INTEGER NOT NULL, filler TEXT);
         CREATE TABLE history(tid INTEGER, bid INTEGER, aid INTEGER, delta INTEGER NOT NULL, mtime INTEGER, filler TEXT);",
    )?;
    let filler = "x".repeat(84);
    for bid in 1..=BRANCHES {
        conn.execute("INSERT INTO branches VALUES (?1, 0, ?2)", params![bid, filler])?;
    }
    for tid in 1..=TELLERS {
        conn.execute("INSERT INTO tellers VALUES (?1, 1, 0, ?2)", params![tid, filler])?;
    }
    let mut insert = conn.prepare("INSERT INTO accounts VALUES (?1, 1, 0, ?2)")?;
    for aid in 1..=accounts {
        insert.execute(params![aid, filler])?;
    }
    Ok(())
}

/// One TPC-B transaction (one of `accounts` accounts, a teller and a branch move by the same
/// delta, and a history row records it with `mtime = seq`), committed on return.
pub fn transaction(conn: &Connection, accounts: i64, seq: i64, rng: &mut SmallRng) -> Result<()> {
    let aid = rng.random_range(1..=accounts);
    let tid = rng.random_range(1..=TELLERS);
    let bid = rng.random_range(1..=BRANCHES);
    let delta = rng.random_range(-5000..=5000i64);
    in_transaction(conn, || -> Result<()> {
        conn.prepare_cached("UPDATE accounts SET abalance = abalance + ?1 WHERE aid = ?2")?
            .execute(params![delta, aid])?;
        conn.prepare_cached("SELECT abalance FROM accounts WHERE aid = ?1")?
            .query_row([aid], |r| r.get::<_, i64>(0))?;
        conn.prepare_cached("UPDATE tellers SET tbalance = tbalance + ?1 WHERE tid = ?2")?
            .execute(params![delta, tid])?;
        conn.prepare_cached("UPDATE branches SET bbalance = bbalance + ?1 WHERE bid = ?2")?
            .execute(params![delta, bid])?;
        conn.prepare_cached(
            "INSERT INTO history(tid, bid, aid, delta, mtime, filler) VALUES (?1, ?2, ?3, ?4, ?5, 'tpcb')",
        )?
        .execute(params![tid, bid, aid, delta, seq])?;
        Ok(())
    })
}

/// TPC-B's invariant: the accounts, the tellers and the branches each hold in total what the
/// history says moved.
pub fn money_conserved(conn: &Connection) -> Result<()> {
    let sums: (i64, i64, i64, i64) = conn.query_row(
        "SELECT (SELECT total(abalance) FROM accounts), (SELECT total(tbalance) FROM tellers),
                (SELECT total(bbalance) FROM branches), (SELECT total(delta) FROM history)",
        [],
        |r| {
            Ok((
                r.get::<_, f64>(0)? as i64,
                r.get::<_, f64>(1)? as i64,
                r.get::<_, f64>(2)? as i64,
                r.get::<_, f64>(3)? as i64,
            ))
        },
    )?;
    if !(sums.0 == sums.3 && sums.1 == sums.3 && sums.2 == sums.3) {
        bail!(
            "tpcb: money not conserved: accounts {}, tellers {}, branches {}, history {}",
            sums.0,
            sums.1,
            sums.2,
            sums.3
        );
    }
    Ok(())
}
