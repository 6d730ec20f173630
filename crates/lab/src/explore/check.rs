//! The contract checked after each crash point, clause by clause.

use std::collections::BTreeSet;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde::Serialize;

use super::scenario::Backend;
use crate::bank;

/// Which promise was broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clause {
    /// The database does not open after the crash.
    Open,
    /// `PRAGMA integrity_check` is not ok.
    Integrity,
    /// Money not conserved, or a balance disagreeing with the ledger (half a transfer).
    Money,
    /// A transfer acknowledged (COMMIT returned) is missing.
    Acknowledged,
    /// A transaction that ended in ROLLBACK left a trace.
    RolledBack,
    /// A reader printed a row that the power cut then removed.
    VisibleNotDurable,
    /// The two databases of one store disagree on which transfers happened.
    AttachAtomicity,
    /// A read transaction saw money not conserved.
    ReadSnapshot,
    /// A process that was not stopped failed a step (or died by itself).
    ProcessError,
    /// A step did not finish in time.
    Hang,
}

impl Clause {
    pub fn name(self) -> &'static str {
        match self {
            Clause::Open => "open",
            Clause::Integrity => "integrity",
            Clause::Money => "money",
            Clause::Acknowledged => "acknowledged",
            Clause::RolledBack => "rolled-back",
            Clause::VisibleNotDurable => "visible-not-durable",
            Clause::AttachAtomicity => "attach-atomicity",
            Clause::ReadSnapshot => "read-snapshot",
            Clause::ProcessError => "process-error",
            Clause::Hang => "hang",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub clause: Clause,
    pub detail: String,
}

fn violation(clause: Clause, detail: impl std::fmt::Display) -> Violation {
    Violation {
        clause,
        detail: detail.to_string(),
    }
}

/// What must be in the database.
pub struct Expect<'a> {
    /// Transfers acknowledged (and, after a power cut, promised durable).
    pub acks: &'a [String],
    /// Ledger rows a reader printed before the crash.
    pub saws: &'a [String],
    pub attach: bool,
}

/// Opens the database at `path` as the scenario's processes do and checks the contract.
pub fn check(path: &Path, backend: Backend, expect: &Expect<'_>) -> Option<Violation> {
    let main = match open(path, backend, false) {
        Ok(c) => c,
        Err(e) => return Some(violation(Clause::Open, format!("{e:#}"))),
    };
    let ledger = match check_bank(&main, expect) {
        Ok(l) => l,
        Err(v) => return Some(v),
    };
    for id in expect.saws {
        if !ledger.contains(id) {
            return Some(violation(
                Clause::VisibleNotDurable,
                format!("a reader printed transfer {id}, which is not in the ledger after the crash"),
            ));
        }
    }
    if expect.attach {
        let aux = match open(path, backend, true) {
            Ok(c) => c,
            Err(e) => return Some(violation(Clause::Open, format!("aux: {e:#}"))),
        };
        let aux_ledger = match check_bank(&aux, expect) {
            Ok(l) => l,
            Err(mut v) => {
                v.detail = format!("aux: {}", v.detail);
                return Some(v);
            }
        };
        if let Some(id) = ledger.symmetric_difference(&aux_ledger).next() {
            let (has, lacks) = if ledger.contains(id) {
                ("main", "aux")
            } else {
                ("aux", "main")
            };
            return Some(violation(
                Clause::AttachAtomicity,
                format!("transfer {id} is in {has} but not in {lacks}"),
            ));
        }
    }
    None
}

fn open(path: &Path, backend: Backend, aux: bool) -> anyhow::Result<Connection> {
    match backend {
        Backend::Onesync if aux => {
            super::register_explore_vfs()?;
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
            Ok(Connection::open_with_flags(super::aux_uri(path), flags)?)
        }
        Backend::Onesync => super::open_store(path, false),
        Backend::StockJournalOff => crate::sqlite::open_plain(path, OpenFlags::SQLITE_OPEN_READ_WRITE),
    }
}

/// Integrity, money and every acknowledged transfer; the ledger's ids.
fn check_bank(conn: &Connection, expect: &Expect<'_>) -> Result<BTreeSet<String>, Violation> {
    crate::sqlite::check_integrity(conn).map_err(|e| violation(Clause::Integrity, format!("{e:#}")))?;
    bank::audit(conn, true, &[]).map_err(|e| violation(Clause::Money, format!("{e:#}")))?;
    let ledger =
        ledger_ids(conn).map_err(|e| violation(Clause::Integrity, format!("reading the ledger: {e}")))?;
    if let Some(id) = expect.acks.iter().find(|id| !ledger.contains(*id)) {
        return Err(violation(
            Clause::Acknowledged,
            format!("transfer {id} was acknowledged but is not in the ledger"),
        ));
    }
    if let Some(id) = ledger.iter().find(|id| id.contains(super::ROLLED_BACK_MARK)) {
        return Err(violation(
            Clause::RolledBack,
            format!("transfer {id} was rolled back but is in the ledger"),
        ));
    }
    check_filler(conn)?;
    Ok(ledger)
}

/// Every spilling transaction's filler is wholly there (with its transfer) or wholly absent.
fn check_filler(conn: &Connection) -> Result<(), Violation> {
    let torn = |e: rusqlite::Error| violation(Clause::Integrity, format!("reading the filler: {e}"));
    let exists: bool = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'filler'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(torn)?
        > 0;
    if !exists {
        return match ledger_has_spill(conn, "1").map_err(torn)? {
            Some(id) => Err(half_there(&id, 0, 1)),
            None => Ok(()),
        };
    }
    if let Some(id) =
        ledger_has_spill(conn, "transfer_id NOT IN (SELECT transfer_id FROM filler)").map_err(torn)?
    {
        return Err(half_there(&id, 0, 1));
    }
    let mut stmt = conn
        .prepare(
            "SELECT f.transfer_id, count(*), (SELECT count(*) FROM ledger l WHERE l.transfer_id = f.transfer_id)
             FROM filler f GROUP BY f.transfer_id",
        )
        .map_err(torn)?;
    let groups = stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })
        .map_err(torn)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(torn)?;
    for (id, rows, in_ledger) in groups {
        if rows != super::SPILL_ROWS || in_ledger != 1 {
            return Err(half_there(&id, rows, in_ledger));
        }
    }
    Ok(())
}

/// A spilling transaction's transfer in the ledger for which `condition` holds.
fn ledger_has_spill(conn: &Connection, condition: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        &format!(
            "SELECT transfer_id FROM ledger WHERE instr(transfer_id, '{}') > 0 AND {condition} LIMIT 1",
            super::SPILL_MARK
        ),
        [],
        |r| r.get(0),
    )
    .optional()
}

fn half_there(id: &str, rows: i64, in_ledger: i64) -> Violation {
    violation(
        Clause::Money,
        format!(
            "spilled transaction {id} is half there: {rows} of {} filler rows, {in_ledger} ledger row(s)",
            super::SPILL_ROWS
        ),
    )
}

fn ledger_ids(conn: &Connection) -> rusqlite::Result<BTreeSet<String>> {
    let mut stmt = conn.prepare("SELECT transfer_id FROM ledger")?;
    let ids = stmt.query_map([], |r| r.get(0))?.collect();
    ids
}
