//! The composition root: the tables registered on a connection. `sys` calls
//! [`register_modules`] (as `crate::register_modules`, re-exported by the crate root) instead
//! of naming a table itself.

use crate::schema::MVBT_MODULE_NAME;
use crate::sys::vtab::ModuleTarget;
use crate::table::MvbtTable;

/// The composition root's half of registering: the tables registered on a connection (by
/// the entry points and [`register_mvbt_module`](crate::register_mvbt_module)). `sys` calls this instead of naming the
/// table itself.
pub(crate) fn register_modules(target: &ModuleTarget<'_>) -> Result<(), onesync_vfs::RegisterError> {
    target.register::<MvbtTable>(MVBT_MODULE_NAME)
}
