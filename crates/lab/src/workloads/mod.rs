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
pub mod update;
pub mod writers;

use anyhow::Result;
use rand::rngs::SmallRng;
use rand::RngCore;
use rusqlite::Connection;
use serde::Serialize;

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

/// What a workload does to a database.
pub trait Transactions: Send + Sync {
    /// Tables, and the rows the `txns` measured transactions update or delete; inside the
    /// caller's transaction.
    fn set_up(&self, conn: &Connection, txns: u64, rng: &mut SmallRng) -> Result<()>;

    /// The `n`-th measured transaction, committed when it returns.
    fn run(&self, conn: &Connection, n: u64, rng: &mut SmallRng) -> Result<()>;

    /// The workload's own invariant, after the run (integrity is checked by the caller).
    fn check(&self, _conn: &Connection) -> Result<()> {
        Ok(())
    }
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

/// MobiBench's record: a 100-byte string.
const PAYLOAD_BYTES: usize = 100;

/// A random record of [`PAYLOAD_BYTES`] lowercase letters.
///
/// Each letter is 32 random bits scaled to 0..26 (a bias below 1e-8), two letters per
/// draw: the generator sits in every writer's loop, and drawing each letter through
/// `random_range` into a `String` of `char`s cost about 18 µs of CPU per 100-row
/// transaction (a `perf` profile of `bench writers --processes 16`), which a CPU-bound
/// scheme paid and a flush-bound one did not.
pub fn payload(rng: &mut SmallRng) -> String {
    let letter = |bits: u64| b'a' + (((bits & 0xffff_ffff) * 26) >> 32) as u8;
    let mut bytes = [0u8; PAYLOAD_BYTES];
    for pair in bytes.chunks_mut(2) {
        let draw = rng.next_u64();
        for (i, byte) in pair.iter_mut().enumerate() {
            *byte = letter(draw >> (32 * i));
        }
    }
    // Always valid: every byte is an ASCII letter.
    String::from_utf8(bytes.to_vec()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn payload_is_lowercase_letters_each_about_as_often() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = [0u32; 26];
        for _ in 0..2_000 {
            let p = payload(&mut rng);
            assert_eq!(p.len(), PAYLOAD_BYTES);
            for b in p.bytes() {
                assert!(b.is_ascii_lowercase(), "{p}");
                counts[(b - b'a') as usize] += 1;
            }
        }
        // 200,000 letters: 7,692 expected each, a standard deviation of about 86.
        for (letter, &n) in counts.iter().enumerate() {
            assert!((7_250..8_150).contains(&n), "letter {letter} drawn {n} times");
        }
    }
}
