//! Replication (`onesync_replicate`, crate `onesync-replica`): a shipper per replicated
//! database per process, started by the URI parameter or the PRAGMA and kept with the open
//! store, so it lives while any connection of this process has the store open. Of the
//! processes replicating one database, the one holding its lease ships (the others' status
//! reads the shared position); COMMIT never waits for it.

use std::path::Path;
use std::time::Duration;

use onesync_replica::{Config, Shipper, Status};

use crate::ffi::SQLITE_WARNING;
use crate::sys::api::ApiTable;

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
        let log = std::sync::Arc::new(move |msg: &str| api.log(SQLITE_WARNING, msg));
        let shipper = Shipper::start(self.store.clone(), path, logical, config, log)
            .map_err(|e| format!("onesync: cannot replicate {logical} to {url}: {e}"))?;
        replicas.insert(logical.to_owned(), shipper);
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
        lock(&self.replicas).get(logical).map(Shipper::status)
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
