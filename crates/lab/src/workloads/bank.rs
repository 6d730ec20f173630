//! The bank workload of every crash test (`torture`, `vfs-kill-torture` and its child,
//! `flash torture`, `explore`): accounts whose balances only ever move between each other
//! (money is conserved) and a ledger naming every transfer by a unique id, and the checks
//! run on a database after a power cut or a kill.

use std::collections::HashMap;

use anyhow::{bail, Result};
use rand::Rng;
use rusqlite::{params, Connection, OptionalExtension};

use crate::sqlite::{in_transaction, retry_while_busy, BUSY_RETRY_PAUSE};

pub const ACCOUNTS: i64 = 100;
pub const INITIAL_BALANCE: i64 = 1_000;
pub const TOTAL_MONEY: i64 = ACCOUNTS * INITIAL_BALANCE;

const DEBIT: &str = "UPDATE account SET balance = balance - ?1 WHERE id = ?2";
const CREDIT: &str = "UPDATE account SET balance = balance + ?1 WHERE id = ?2";
const RECORD: &str =
    "INSERT INTO ledger(transfer_id, from_account, to_account, amount) VALUES (?1, ?2, ?3, ?4)";

/// Creates the tables and funds the accounts, in one transaction, if not done yet.
pub fn set_up(conn: &Connection) -> rusqlite::Result<()> {
    in_transaction(conn, || {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS account(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS ledger(
                 transfer_id TEXT PRIMARY KEY,
                 from_account INTEGER NOT NULL,
                 to_account INTEGER NOT NULL,
                 amount INTEGER NOT NULL);",
        )?;
        let accounts: i64 = conn.query_row("SELECT count(*) FROM account", [], |r| r.get(0))?;
        if accounts == 0 {
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO account(id, balance) SELECT i, ?2 FROM n",
                params![ACCOUNTS, INITIAL_BALANCE],
            )?;
        }
        Ok(())
    })
}

/// A random transfer: `(from, to, amount)`, two different accounts and 1 to 100 (drawn in
/// that order, so that a seed replays the same transfers wherever it is used).
pub fn random_transfer(rng: &mut impl Rng) -> (i64, i64, i64) {
    let from = rng.random_range(1..=ACCOUNTS);
    let to = (from + rng.random_range(1..ACCOUNTS) - 1) % ACCOUNTS + 1;
    (from, to, rng.random_range(1..=100))
}

/// One transfer as one transaction: both balance updates and the ledger row, or none.
pub fn transfer_atomically(
    conn: &Connection,
    id: &str,
    from: i64,
    to: i64,
    amount: i64,
) -> rusqlite::Result<()> {
    in_transaction(conn, || move_money(conn, id, from, to, amount))
}

/// What [`transfer_retrying`] went through before its transfer committed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retries {
    /// Attempts refused with SQLITE_BUSY_SNAPSHOT (a concurrent writer's conflict).
    pub busy_snapshot: u32,
    /// Attempts that failed with another SQLITE_BUSY or SQLITE_LOCKED.
    pub busy: u32,
}

impl Retries {
    pub fn total(self) -> u32 {
        self.busy_snapshot + self.busy
    }
}

/// [`transfer_atomically`], run again as a whole transaction (same id, accounts and amount)
/// after `pause` whenever an attempt fails with SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT or
/// SQLITE_LOCKED (every failed attempt has been rolled back), `attempts` times at most.
/// What a concurrent writer (onesync's `concurrent=1`) must do when its COMMIT conflicts.
pub fn transfer_retrying(
    conn: &Connection,
    id: &str,
    (from, to, amount): (i64, i64, i64),
    attempts: u32,
    pause: std::time::Duration,
) -> rusqlite::Result<Retries> {
    let mut retries = Retries::default();
    loop {
        match transfer_atomically(conn, id, from, to, amount) {
            Ok(()) => return Ok(retries),
            Err(e) if crate::sqlite::is_busy(&e) && retries.total() + 1 < attempts => {
                if crate::sqlite::is_busy_snapshot(&e) {
                    retries.busy_snapshot += 1;
                } else {
                    retries.busy += 1;
                }
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// One transfer made in each of `schemas` (e.g. `main` and an ATTACHed `aux`, each holding
/// a bank of its own) as one transaction: all of them or none.
pub fn transfer_in_schemas(
    conn: &Connection,
    schemas: &[&str],
    id: &str,
    from: i64,
    to: i64,
    amount: i64,
) -> rusqlite::Result<()> {
    in_transaction(conn, || {
        for schema in schemas {
            for (sql, args) in [(DEBIT, params![amount, from]), (CREDIT, params![amount, to])] {
                conn.execute(&qualified(sql, schema), args)?;
            }
            conn.execute(&qualified(RECORD, schema), params![id, from, to, amount])?;
        }
        Ok(())
    })
}

/// `sql` with its table names in `schema`.
fn qualified(sql: &str, schema: &str) -> String {
    sql.replace("UPDATE account", &format!("UPDATE {schema}.account"))
        .replace("INSERT INTO ledger", &format!("INSERT INTO {schema}.ledger"))
}

/// The negative control's transfer: debit, credit and ledger row as three separate autocommit
/// transactions, so a kill between them loses (or, never, creates) money.
pub fn transfer_in_three_commits(
    conn: &Connection,
    id: &str,
    from: i64,
    to: i64,
    amount: i64,
) -> rusqlite::Result<()> {
    retry_while_busy(BUSY_RETRY_PAUSE, || conn.execute(DEBIT, params![amount, from]))?;
    retry_while_busy(BUSY_RETRY_PAUSE, || conn.execute(CREDIT, params![amount, to]))?;
    retry_while_busy(BUSY_RETRY_PAUSE, || {
        conn.execute(RECORD, params![id, from, to, amount])
    })?;
    Ok(())
}

/// A transfer made and then undone with ROLLBACK: it must leave no trace.
pub fn transfer_rolled_back(
    conn: &Connection,
    id: &str,
    from: i64,
    to: i64,
    amount: i64,
) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN")?;
    let moved = move_money(conn, id, from, to, amount);
    let undone = conn.execute_batch("ROLLBACK");
    moved.and(undone)
}

/// Fails if any of `ids` (transfers rolled back) is in the ledger.
pub fn check_absent(conn: &Connection, ids: &[String]) -> Result<()> {
    let mut lookup = conn.prepare(LEDGER_LOOKUP)?;
    for id in ids {
        if in_ledger(&mut lookup, id)? {
            bail!("transfer {id} was rolled back but is in the ledger");
        }
    }
    Ok(())
}

/// Which of `ids` are in the ledger, in their order.
pub fn present(conn: &Connection, ids: &[String]) -> Result<Vec<bool>> {
    let mut lookup = conn.prepare(LEDGER_LOOKUP)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(in_ledger(&mut lookup, id)?);
    }
    Ok(out)
}

const LEDGER_LOOKUP: &str = "SELECT 1 FROM ledger WHERE transfer_id = ?1";

/// Whether transfer `id` is in the ledger (`lookup` prepared from [`LEDGER_LOOKUP`]).
fn in_ledger(lookup: &mut rusqlite::Statement<'_>, id: &str) -> rusqlite::Result<bool> {
    Ok(lookup
        .query_row([id], |r| r.get::<_, i64>(0))
        .optional()?
        .is_some())
}

/// Debit, credit and ledger row: the statements of one transfer, in the caller's transaction.
pub fn move_money(conn: &Connection, id: &str, from: i64, to: i64, amount: i64) -> rusqlite::Result<()> {
    conn.execute(DEBIT, params![amount, from])?;
    conn.execute(CREDIT, params![amount, to])?;
    conn.execute(RECORD, params![id, from, to, amount])?;
    Ok(())
}

/// What a database held when checked.
#[derive(Debug, Default, Clone, Copy)]
pub struct Audit {
    pub ledger_rows: u64,
}

/// Checks a database after a kill: `PRAGMA integrity_check` is ok; if the setup transaction
/// was reported committed the tables exist; money is conserved; every account's balance is
/// its initial balance plus what the ledger says it received minus what it sent (so no
/// transfer is half there); and every transfer id in `reported` is in the ledger.
pub fn audit(conn: &Connection, setup_reported: bool, reported: &[String]) -> Result<Audit> {
    crate::sqlite::check_integrity(conn)?;
    let has_accounts: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'account'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if has_accounts.is_none() {
        if setup_reported || !reported.is_empty() {
            bail!("the tables are missing although the child reported the setup transaction committed");
        }
        return Ok(Audit::default());
    }
    let (accounts, total): (i64, Option<i64>) =
        conn.query_row("SELECT count(*), sum(balance) FROM account", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    if accounts != ACCOUNTS || total != Some(TOTAL_MONEY) {
        bail!(
            "money not conserved: {accounts} accounts holding {} in total, expected {ACCOUNTS} holding {TOTAL_MONEY}",
            total.map_or("nothing".to_owned(), |t| t.to_string())
        );
    }
    let mut expected: HashMap<i64, i64> = (1..=ACCOUNTS).map(|id| (id, INITIAL_BALANCE)).collect();
    let mut ledger_rows = 0u64;
    {
        let mut stmt = conn.prepare("SELECT from_account, to_account, amount FROM ledger")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let (from, to, amount): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
            *expected.entry(from).or_default() -= amount;
            *expected.entry(to).or_default() += amount;
            ledger_rows += 1;
        }
    }
    let mut stmt = conn.prepare("SELECT id, balance FROM account ORDER BY id")?;
    let balances: Vec<(i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, balance) in balances {
        let want = expected.get(&id).copied().unwrap_or(0);
        if balance != want {
            bail!("account {id} holds {balance} but the ledger says {want}: a transfer is half applied");
        }
    }
    let mut lookup = conn.prepare(LEDGER_LOOKUP)?;
    for id in reported {
        if !in_ledger(&mut lookup, id)? {
            bail!("transfer {id} was reported committed but is not in the ledger");
        }
    }
    Ok(Audit { ledger_rows })
}
