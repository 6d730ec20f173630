pub use crate::mvbt_vtab::register_mvbt_module;
