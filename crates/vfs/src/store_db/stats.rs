//! `PRAGMA onesync_stats`: the store's counters and this process's concurrent commits, as
//! JSON.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use crate::names::StoreKey;

use super::registry::{canonical, inode_key, lock, OpenStore, REGISTRY};

pub(super) fn stats_json(open: &OpenStore) -> String {
    let s = open.store.stats();
    let concurrent = &open.concurrent_commits;
    serde_json::json!({
        "page_size": s.page_size,
        "commit_records": s.commit_records,
        "pages_written": s.pages_written,
        "pages_embedded": s.pages_embedded,
        "jumps": s.jumps,
        "bytes_written": s.bytes_written,
        "write_calls": s.write_calls,
        "bytes_preallocated": s.bytes_preallocated,
        "growths": s.growths,
        "bytes_returned": s.bytes_returned,
        "growths_holding_locks": s.growths_holding_locks,
        "flushes": s.flushes,
        "flush_micros": s.flush_micros,
        "group_commit_flushes": s.group_commit_flushes,
        "flushes_by_others": s.flushes_by_others,
        "announced_flush_waits": s.announced_flush_waits,
        "write_lock_waited_micros": s.write_lock_waited_micros,
        "write_lock_held_micros": s.write_lock_held_micros,
        "early_conflicts": s.early_conflicts,
        "catch_ups": s.catch_ups,
        "records_followed": s.records_followed,
        "checkpoints": s.checkpoints,
        "checkpoint_bytes": s.checkpoint_bytes,
        "checkpoint_micros": s.checkpoint_micros,
        "mapping_cache_hits": s.mapping_cache_hits,
        "mapping_cache_misses": s.mapping_cache_misses,
        "mapping_cache_bytes": s.mapping_cache_bytes,
        "recoveries": s.recoveries,
        "records_replayed": s.records_replayed,
        "conflicts": s.conflicts,
        "last_seq": s.last_seq,
        "durable_seq": s.durable_seq,
        "slots_total": s.slots_total,
        "slots_free": s.slots_free,
        "concurrent_rebased": concurrent.rebased.load(Relaxed),
        "concurrent_relocated": concurrent.relocated.load(Relaxed),
        "holds_lease": open.store.holds_lease(),
    })
    .to_string()
}

/// `PRAGMA onesync_stats` of the store at `path`, if this process has it open.
pub fn store_stats_json(path: &Path) -> Option<String> {
    let key = match std::fs::metadata(path) {
        Ok(meta) => inode_key(&meta),
        Err(_) => StoreKey::Path(canonical(path)),
    };
    let registry = lock(&REGISTRY);
    [false, true]
        .iter()
        .find_map(|&ro| registry.get(&(key.clone(), ro)))
        .map(|(s, _)| stats_json(s))
}
