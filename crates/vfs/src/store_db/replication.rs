//! Replication (`onesync_replicate`, crate `onesync-replica`): a shipper per replicated
//! database per process, started by the URI parameter or the PRAGMA and kept with the open
//! store, so it lives while any connection of this process has the store open. Of the
//! processes replicating one database, the one holding its lease ships (the others' status
//! reads the shared position); COMMIT never waits for it.

use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onesync_replica::{Config, Shipper, Status};

use crate::ffi::{SQLITE_IOERR, SQLITE_WARNING};
use crate::sys::api::ApiTable;

use super::handle::StoreDb;
use super::registry::{lock, OpenStore};

/// `onesync_replicate_interval_ms`: from 10 ms to an hour.
const INTERVAL_MS: std::ops::RangeInclusive<u64> = 10..=3_600_000;

/// Parses `onesync_replicate_interval_ms`.
pub(super) fn parse_replicate_interval(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<u64>() {
        Ok(ms) if INTERVAL_MS.contains(&ms) => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "onesync: onesync_replicate_interval_ms is a whole number of milliseconds from {} to {}, \
             not {value:?}",
            INTERVAL_MS.start(),
            INTERVAL_MS.end()
        )),
    }
}

/// Whether `value` turns replication off (`PRAGMA onesync_replicate = off`).
pub(super) fn is_off(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "off" | "0" | "none" | ""
    )
}

impl OpenStore {
    /// Replicates `logical` to `url`: starts its shipper, or checks the one running ships
    /// there (one replica per database: another URL is refused).
    pub(super) fn replicate(
        &self,
        api: ApiTable,
        path: &Path,
        logical: &str,
        url: &str,
        interval: Option<Duration>,
        configure: &dyn Fn(&mut Config),
    ) -> Result<(), String> {
        let mut replicas = lock(&self.replicas);
        if let Some(running) = replicas.get(logical) {
            if running.config().url == url {
                return Ok(());
            }
            return Err(format!(
                "onesync: database {logical} is already replicated to {} in this process; \
                 PRAGMA onesync_replicate=off first",
                running.status().url
            ));
        }
        let mut config = Config::new(url);
        if let Some(interval) = interval {
            config.interval = interval;
        }
        configure(&mut config);
        let log = std::sync::Arc::new(move |msg: &str| api.log(SQLITE_WARNING, msg));
        let shipper = Shipper::start(self.store.clone(), path, logical, config, log)
            .map_err(|e| format!("onesync: cannot replicate {logical} to {url}: {e}"))?;
        replicas.insert(logical.to_owned(), Arc::new(shipper));
        Ok(())
    }

    /// Stops replicating `logical` (after shipping what is durable, if the replica is up).
    pub(super) fn stop_replicating(&self, logical: &str) {
        let shipper = lock(&self.replicas).remove(logical);
        drop(shipper);
    }

    /// Stops every shipper: before the store closes.
    pub(super) fn stop_all_replication(&self) {
        let shippers = std::mem::take(&mut *lock(&self.replicas));
        drop(shippers);
    }

    pub(super) fn replication_status(&self, logical: &str) -> Option<Status> {
        lock(&self.replicas).get(logical).map(|s| s.status())
    }

    pub(super) fn shipper(&self, logical: &str) -> Option<Arc<Shipper>> {
        lock(&self.replicas).get(logical).cloned()
    }
}

/// Parses `onesync_replicate_sync_timeout_ms`: 0 (the default) waits as long as it takes.
pub(super) fn parse_sync_timeout(value: &str) -> Result<Option<Duration>, String> {
    match value.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(ms) if ms <= 86_400_000 => Ok(Some(Duration::from_millis(ms))),
        _ => Err(format!(
            "onesync: onesync_replicate_sync_timeout_ms is a whole number of milliseconds up to \
             86400000 (0: no bound), not {value:?}"
        )),
    }
}

impl StoreDb {
    /// Synchronous replication (`onesync_replicate_sync=1`): once commit `seq` of this
    /// database is durable, wait until the replica holds it, before COMMIT returns (at
    /// SQLITE_FCNTL_COMMIT_PHASETWO, which SQLite calls after its commit and whose result
    /// it ignores: a COMMIT cannot fail there). Past `onesync_replicate_sync_timeout_ms`
    /// COMMIT returns with the commit durable and kept locally but not known replicated:
    /// `sqlite3_log` says so, and the connection's next COMMIT is refused at its xSync
    /// (nothing written) until the replica holds this one (`refuse_while_unreplicated`).
    pub(super) fn wait_replicated(&mut self, seq: u64) {
        if !self.replicate_sync {
            return;
        }
        let Some(shipper) = self.store.shipper(&self.logical) else {
            return;
        };
        let deadline = self.replicate_sync_timeout.map(|t| Instant::now() + t);
        if let Err(e) = shipper.wait_shipped(seq, deadline) {
            self.api.log(
                SQLITE_WARNING,
                &format!(
                    "onesync: commit {seq} of {} is durable here but not acknowledged by the replica \
                     {}: {e}; this connection's next COMMIT waits for it",
                    self.logical,
                    shipper.status().url
                ),
            );
            self.unreplicated = Some(seq);
        }
    }

    /// At xSync, before anything is written: a connection in synchronous replication whose
    /// last commit is not in the replica yet waits for it once more (up to its timeout),
    /// and refuses the new commit if it is still missing.
    pub(super) fn refuse_while_unreplicated(&mut self) -> Result<(), c_int> {
        let Some(seq) = self.unreplicated else {
            return Ok(());
        };
        let Some(shipper) = self.store.shipper(&self.logical) else {
            self.unreplicated = None;
            return Ok(());
        };
        let deadline = self.replicate_sync_timeout.map(|t| Instant::now() + t);
        match shipper.wait_shipped(seq, deadline) {
            Ok(()) => {
                self.unreplicated = None;
                Ok(())
            }
            Err(e) => {
                self.api.log_and_print(
                    SQLITE_IOERR,
                    &format!(
                        "onesync: COMMIT refused: synchronous replication of {} is behind (commit \
                         {seq} is not acknowledged by {}: {e}); nothing was written",
                        self.logical,
                        shipper.status().url
                    ),
                );
                Err(SQLITE_IOERR)
            }
        }
    }
}

/// `PRAGMA onesync_replicate`'s answer.
pub(super) fn status_json(status: Option<Status>) -> String {
    let Some(s) = status else {
        return serde_json::json!({ "url": null }).to_string();
    };
    serde_json::json!({
        "url": s.url,
        "shipping": s.shipping,
        "txid": s.txid,
        "shipped_seq": s.shipped_seq,
        "lag_commits": s.lag_commits,
        "lag_ms": s.lag_ms,
        "last_error": s.last_error,
        "files": s.files,
        "bytes": s.bytes,
        "snapshots": s.snapshots,
        "compacted": s.compacted,
        "deleted": s.deleted,
    })
    .to_string()
}
