//! The contract checked after each crash point, clause by clause.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use super::scenario::Backend;
use crate::workloads::bank;

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
    /// Concurrent writers' overlapping transactions never conflicted in a run without a
    /// stop (each scenario's pairs always do: the scenario would test nothing).
    NoConflict,
    /// The replica does not restore: a gap or an overlap of TXIDs, a snapshot not from TXID
    /// 1, a file whose bytes changed (a TXID written twice), a file that does not read
    /// (`replica.rs`).
    ReplicaRestore,
    /// The replica's database fails the bank's checks or is not a prefix of the store's.
    ReplicaState,
    /// A transfer acknowledged in synchronous replication is not in the replica.
    ReplicaAcknowledged,
    /// Shipping resumed by a fresh connection does not leave the replica equal to the store.
    ReplicaResume,
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
            Clause::NoConflict => "no-conflict",
            Clause::ReplicaRestore => "replica-restore",
            Clause::ReplicaState => "replica-state",
            Clause::ReplicaAcknowledged => "replica-acknowledged",
            Clause::ReplicaResume => "replica-resume",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub clause: Clause,
    pub detail: String,
}

pub fn violation(clause: Clause, detail: impl std::fmt::Display) -> Violation {
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
    /// The attached database is a plain SQLite file (checked first, by SQLite without
    /// onesync: its crash recovery must agree with the store's).
    pub plain_aux: bool,
}

/// Opens the database at `path` as the scenario's processes do and checks the contract.
pub fn check(path: &Path, backend: Backend, expect: &Expect<'_>) -> Option<Violation> {
    // A plain file's recovery first: stock SQLite's, which must not give up the
    // super-journal while the store's journal still names it.
    let plain_aux_ledger = match expect.plain_aux {
        true => match aux_ledger(path, backend, expect) {
            Ok(l) => Some(l),
            Err(v) => return Some(v),
        },
        false => None,
    };
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
        let aux_ledger = match plain_aux_ledger.map_or_else(|| aux_ledger(path, backend, expect), Ok) {
            Ok(l) => l,
            Err(v) => return Some(v),
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

/// The attached database `aux` (the store's second database, or the plain file beside it)
/// checked as `check_bank` does; its ledger's ids.
fn aux_ledger(path: &Path, backend: Backend, expect: &Expect<'_>) -> Result<BTreeSet<String>, Violation> {
    let aux = match expect.plain_aux {
        true => crate::sqlite::open_plain(&super::plain_aux_path(path), OpenFlags::SQLITE_OPEN_READ_WRITE),
        false => open(path, backend, true),
    }
    .map_err(|e| violation(Clause::Open, format!("aux: {e:#}")))?;
    check_bank(&aux, expect).map_err(|mut v| {
        v.detail = format!("aux: {}", v.detail);
        v
    })
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
    check_filler(conn, &ledger)?;
    Ok(ledger)
}

/// Every spilling transaction is wholly there (its ledger row and all its filler rows) or
/// wholly absent.
fn check_filler(conn: &Connection, ledger: &BTreeSet<String>) -> Result<(), Violation> {
    let unreadable = |e: rusqlite::Error| violation(Clause::Integrity, format!("reading the filler: {e}"));
    let exists = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'filler'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(unreadable)?
        > 0;
    let mut filler: BTreeMap<String, i64> = BTreeMap::new();
    if exists {
        let mut stmt = conn
            .prepare("SELECT transfer_id, count(*) FROM filler GROUP BY transfer_id")
            .map_err(unreadable)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(unreadable)?;
        for row in rows {
            let (id, n) = row.map_err(unreadable)?;
            filler.insert(id, n);
        }
    }
    let half_there = |id: &str, rows: i64, in_ledger: bool| {
        violation(
            Clause::Money,
            format!(
                "spilled transaction {id} is half there: {rows} of {} filler rows, {} ledger row",
                super::SPILL_ROWS,
                if in_ledger { "its" } else { "no" }
            ),
        )
    };
    for id in ledger.iter().filter(|id| id.contains(super::SPILL_MARK)) {
        let rows = filler.get(id).copied().unwrap_or(0);
        if rows != super::SPILL_ROWS {
            return Err(half_there(id, rows, true));
        }
    }
    match filler.into_iter().find(|(id, _)| !ledger.contains(id)) {
        Some((id, rows)) => Err(half_there(&id, rows, false)),
        None => Ok(()),
    }
}

fn ledger_ids(conn: &Connection) -> rusqlite::Result<BTreeSet<String>> {
    let mut stmt = conn.prepare("SELECT transfer_id FROM ledger")?;
    let ids = stmt.query_map([], |r| r.get(0))?.collect();
    ids
}
