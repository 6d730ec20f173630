//! The per-connection entry point that tells refusals, once registered: kept here, below
//! both the entry points that register it (`entry.rs`) and the store backend that re-arms
//! it while an open is refused, so neither names the other.

use super::api::ApiTable;
use super::ffi::ConnectionInitFn;

/// The per-connection entry point that tells refusals, and the SQLite it was registered with.
static REFUSAL_HOOK: std::sync::Mutex<Option<(ApiTable, ConnectionInitFn)>> = std::sync::Mutex::new(None);

/// Keeps `hook`, registered with `api`, for [`rearm`].
pub(crate) fn remember(api: ApiTable, hook: ConnectionInitFn) {
    *REFUSAL_HOOK.lock().unwrap_or_else(|e| e.into_inner()) = Some((api, hook));
}

/// Makes sure the per-connection entry point runs for the connection being opened, which
/// has a refusal to tell at open: `sqlite3_shutdown()` forgets automatic extensions, and an
/// application that initializes SQLite again does not know to register onesync's anew
/// (registering it again is a no-op while it is registered). Called while SQLite opens the
/// connection, before it runs the automatic extensions.
pub(crate) fn rearm() {
    let hook = *REFUSAL_HOOK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((api, hook)) = hook {
        let _ = api.run_on_new_connections(hook);
    }
}
