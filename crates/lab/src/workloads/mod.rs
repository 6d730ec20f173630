//! Workloads, each written once against a plain [`Connection`] (whatever scheme opened it)
//! and used by every command that runs it: `bench` runs them all, `flash` runs partsupp,
//! the VM's power-cut workload runs tpcb, `mvbt` runs kv, the tortures and the explorer
//! run bank, and `bench writers` runs the concurrent writers' workloads (writers.rs).

pub mod bank;
pub mod dbbench;
pub mod delete;
pub mod insert;
pub mod kv;
pub mod mixed;
pub mod partsupp;
pub mod tpcb;
pub mod transactions;
pub mod update;
pub mod writers;

use serde::Serialize;

pub use transactions::{payload, Transactions};

/// A workload for `bench` (the command-line value).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// One INSERT of a 100-byte string (autoincrement key) per transaction (MobiBench)
    Insert,
    /// One UPDATE of a random row's 100-byte string per transaction (MobiBench)
    Update,
    /// One DELETE of a row per transaction, in key order (MobiBench)
    Delete,
    /// TPC-B-like transfers: account, teller and branch balances and a history row per
    /// transaction; money must be conserved
    Tpcb,
    /// TPC-H partsupp: 60,000 rows of about 220 bytes; each transaction updates --pages rows
    /// chosen at random (so about that many pages)
    Partsupp,
    /// 1,000 records; each transaction is a point search or an update of one record,
    /// --searches-per-write searches for each update
    Mixed,
    /// Several threads (--threads), one connection each, each on its own table (or with
    /// --shared-table all on one): per transaction an insert (60 %), an update of a random
    /// row (20 %), a delete (10 %) or an index search (10 %)
    Dbbench,
}

/// The knobs some workloads take.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// partsupp: rows (pages) each transaction updates.
    pub pages: u64,
    /// mixed: point searches per update.
    pub searches_per_write: f64,
    /// dbbench: the table this connection works on.
    pub table: u64,
}

impl Workload {
    /// The workload with its knobs set.
    pub fn transactions(self, params: Params) -> Box<dyn Transactions> {
        match self {
            Workload::Insert => Box::new(insert::Insert),
            Workload::Update => Box::new(update::Update),
            Workload::Delete => Box::new(delete::Delete),
            Workload::Tpcb => Box::new(tpcb::Tpcb {
                accounts: tpcb::ACCOUNTS,
            }),
            Workload::Partsupp => Box::new(partsupp::Partsupp { pages: params.pages }),
            Workload::Mixed => Box::new(mixed::Mixed {
                searches_per_write: params.searches_per_write,
            }),
            Workload::Dbbench => Box::new(dbbench::Dbbench { table: params.table }),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}
