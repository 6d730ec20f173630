//! The crash contract of commits a onesync store shows before they are durable
//! (`synchronous=NORMAL` and `OFF`), shared by the simulated and the kernel torture.
//!
//! A COMMIT at these levels returns once its commit is written and sequenced, so a power cut
//! may take back the last ones. After a cut, the acknowledged transfers that survive must be
//! a prefix of them in commit (store sequence) order, never one without every one before it,
//! and that prefix must hold every transfer whose sequence number is at or below a
//! `durable_seq` the store reported before the cut. (A kill takes back nothing: that contract
//! is the FULL one.) How far back a cut reaches is measured as the loss window: the time from
//! the acknowledgement of the oldest transfer it took back to the cut.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rusqlite::Connection;
use serde::Serialize;

use crate::workloads::bank;

/// A transfer whose COMMIT returned.
#[derive(Debug, Clone)]
pub struct Ack {
    pub id: String,
    /// Its commit's store sequence number (unknown if the cut came before it was asked).
    pub seq: Option<u64>,
    /// When the COMMIT returned (or, from another process, when its line arrived).
    pub at: Instant,
}

/// What one cut took back, once [`check`] found the contract kept.
#[derive(Debug, Clone, Default)]
pub struct CutLoss {
    /// The acknowledged transfers that survived (the prefix).
    pub survivors: Vec<String>,
    /// Acknowledged transfers taken back (all after the surviving prefix).
    pub lost: u64,
    /// Acknowledged transfers the store had reported durable before the cut (all survived).
    pub durable: u64,
    /// How long before the cut the oldest one taken back was acknowledged.
    pub window: Option<Duration>,
}

/// Checks the contract on `conn` after a cut at `cut_at`: of `acks` (this run's, in any
/// order), those present in the ledger are a prefix in sequence order, holding every one at
/// or below `durable_seen`. `in_flight`, a transfer whose COMMIT failed (a single connection's,
/// so after every ack), may be present only if every ack is.
pub fn check(
    conn: &Connection,
    acks: &[Ack],
    in_flight: Option<&str>,
    durable_seen: u64,
    cut_at: Instant,
) -> Result<CutLoss> {
    let mut ordered: Vec<&Ack> = acks.iter().collect();
    // Stable: acks of one connection whose seq is unknown stay after the known ones.
    ordered.sort_by_key(|ack| ack.seq.unwrap_or(u64::MAX));
    let mut ids: Vec<String> = ordered.iter().map(|ack| ack.id.clone()).collect();
    ids.extend(in_flight.map(str::to_owned));
    let present = bank::present(conn, &ids)?;
    let mut loss = CutLoss::default();
    for (ack, &there) in ordered.iter().zip(&present) {
        let durable = ack.seq.is_some_and(|seq| seq <= durable_seen);
        loss.durable += u64::from(durable);
        if durable && !there {
            bail!(
                "transfer {} (seq {}) was reported durable before the cut (durable_seq {durable_seen}) \
                 but is not in the ledger",
                ack.id,
                ack.seq.unwrap_or_default()
            );
        }
    }
    // The first one missing; every one from there on must be missing too.
    let gap = present.iter().position(|&there| !there).unwrap_or(present.len());
    if let Some(later) = present[gap..].iter().position(|&there| there) {
        let name = |k: usize| match ordered.get(k) {
            Some(ack) => format!("{} (seq {})", ack.id, seq_text(ack.seq)),
            None => format!("{} (not acknowledged)", ids[k]),
        };
        bail!(
            "not a prefix: transfer {} survived the cut but {}, committed before it, did not",
            name(gap + later),
            name(gap)
        );
    }
    let kept = gap.min(ordered.len());
    loss.survivors = ordered[..kept].iter().map(|ack| ack.id.clone()).collect();
    if let Some(oldest) = ordered.get(gap) {
        loss.lost = (ordered.len() - gap) as u64;
        loss.window = Some(cut_at.saturating_duration_since(oldest.at));
    }
    Ok(loss)
}

fn seq_text(seq: Option<u64>) -> String {
    seq.map_or("unknown".to_owned(), |seq| seq.to_string())
}

/// Loss windows over a run of cuts, and the bound they are held to (NORMAL: the flush
/// interval plus a slack for one flush; OFF has no bound).
#[derive(Debug, Default)]
pub struct LossWindows {
    /// Of the cuts that took back something, in milliseconds.
    windows_ms: Vec<f64>,
    transfers_lost: u64,
    transfers_durable: u64,
    bound: Option<Duration>,
}

/// The summary of [`LossWindows`], as printed and in the JSON.
#[derive(Serialize, Debug, Default, Clone)]
pub struct LossWindowSummary {
    /// Cuts that took back at least one acknowledged transfer.
    pub cuts_with_loss: u64,
    /// Acknowledged transfers taken back by the cuts (none of them reported durable).
    pub transfers_lost: u64,
    /// Acknowledged transfers the store reported durable before their cut (all survived).
    pub transfers_durable: u64,
    /// Largest and median age, at the cut, of the oldest transfer a cut took back (over the
    /// cuts that took back something).
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The store's `deferred_flush_interval`.
    pub flush_interval_ms: f64,
    /// NORMAL: the largest loss window allowed (the interval plus a slack for one flush and
    /// the flusher's wake-up); none at OFF, which has no timer, and through the kernel, whose
    /// flushes take a device's time.
    pub bound_ms: Option<f64>,
    pub cuts_over_bound: u64,
}

impl LossWindows {
    pub fn new(bound: Option<Duration>) -> LossWindows {
        LossWindows {
            bound,
            ..LossWindows::default()
        }
    }

    pub fn add(&mut self, loss: &CutLoss) {
        self.transfers_lost += loss.lost;
        self.transfers_durable += loss.durable;
        if let Some(window) = loss.window {
            self.windows_ms.push(window.as_secs_f64() * 1e3);
        }
    }

    pub fn max_ms(&self) -> f64 {
        self.windows_ms.iter().copied().fold(0.0, f64::max)
    }

    pub fn summary(&self, interval: Duration) -> LossWindowSummary {
        let mut sorted = self.windows_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let bound_ms = self.bound.map(|bound| bound.as_secs_f64() * 1e3);
        LossWindowSummary {
            cuts_with_loss: sorted.len() as u64,
            transfers_lost: self.transfers_lost,
            transfers_durable: self.transfers_durable,
            max_ms: sorted.last().copied().unwrap_or(0.0),
            p50_ms: percentile(&sorted, 0.50),
            p99_ms: percentile(&sorted, 0.99),
            flush_interval_ms: interval.as_secs_f64() * 1e3,
            bound_ms,
            cuts_over_bound: bound_ms.map_or(0, |b| sorted.iter().filter(|&&w| w > b).count() as u64),
        }
    }
}

/// The value at fraction `q` of `sorted` (nearest rank), 0 if empty.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl LossWindowSummary {
    /// One phrase for the summary line; `unbounded` says why there is no bound, if none.
    pub fn text(&self, unbounded: &str) -> String {
        let bound = match self.bound_ms {
            Some(bound) => format!(
                " (bound {bound:.1} ms = flush interval {:.1} ms + slack {:.1} ms; {} cut(s) over it)",
                self.flush_interval_ms,
                bound - self.flush_interval_ms,
                self.cuts_over_bound
            ),
            None => format!(" (no bound: {unbounded})"),
        };
        format!(
            "loss window max {:.2} ms, p50 {:.2} ms, p99 {:.2} ms over {} cut(s) that took back \
             acknowledged transfers ({} taken back; {} acknowledged durable before their cut, \
             all kept){bound}",
            self.max_ms,
            self.p50_ms,
            self.p99_ms,
            self.cuts_with_loss,
            self.transfers_lost,
            self.transfers_durable
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bank holding transfers `present`, and acks for `acked` with seq 1, 2, ... and one
    /// acknowledged every millisecond before `cut_at`.
    fn bank_with(present: &[&str], acked: &[&str]) -> (Connection, Vec<Ack>, Instant) {
        let conn = Connection::open_in_memory().unwrap();
        bank::set_up(&conn).unwrap();
        for id in present {
            bank::transfer_atomically(&conn, id, 1, 2, 1).unwrap();
        }
        let cut_at = Instant::now();
        let acks = (1..)
            .zip(acked)
            .map(|(seq, id)| Ack {
                id: (*id).to_owned(),
                seq: Some(seq),
                at: cut_at - Duration::from_millis(10 - seq),
            })
            .collect();
        (conn, acks, cut_at)
    }

    #[test]
    fn a_prefix_holding_the_durable_ones_passes_and_says_what_was_lost() {
        let (conn, mut acks, cut_at) = bank_with(&["a", "b"], &["a", "b", "c", "d"]);
        // Given in any order, checked in seq order.
        acks.reverse();
        let loss = check(&conn, &acks, Some("e"), 2, cut_at).unwrap();
        assert_eq!((loss.lost, loss.durable), (2, 2));
        assert_eq!(loss.survivors, ["a", "b"]);
        assert_eq!(loss.window, Some(Duration::from_millis(7)));
    }

    #[test]
    fn a_lost_durable_transfer_fails() {
        let (conn, acks, cut_at) = bank_with(&["a"], &["a", "b", "c"]);
        let error = check(&conn, &acks, None, 2, cut_at).unwrap_err().to_string();
        assert!(
            error.contains("transfer b (seq 2) was reported durable"),
            "{error}"
        );
    }

    #[test]
    fn a_gap_fails_even_for_the_transfer_in_flight() {
        let (conn, acks, cut_at) = bank_with(&["a", "c"], &["a", "b", "c"]);
        let error = check(&conn, &acks, None, 1, cut_at).unwrap_err().to_string();
        assert!(
            error.contains("transfer c (seq 3) survived the cut but b (seq 2)"),
            "{error}"
        );
        let (conn, acks, cut_at) = bank_with(&["a", "d"], &["a", "b"]);
        let error = check(&conn, &acks, Some("d"), 1, cut_at).unwrap_err().to_string();
        assert!(error.contains("d (not acknowledged) survived"), "{error}");
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&sorted, 0.5), 2.0);
        assert_eq!(percentile(&sorted, 0.99), 4.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
