//! Read replicas (issue 43, item 5): a onesync store that follows a Litestream replica.
//! The latest state is restored into a new store, then each new LTX file of the replica is
//! applied as **one store transaction** on the logical file `main`, together with where
//! following stands (the logical file `onesync-follow`). A process that opens the store
//! read-only (`file:OUT?vfs=onesync&mode=ro`) therefore sees, at every read transaction, the
//! source database as of one TXID: a consistent prefix of its history.
//!
//! - `state`: where following stands, kept in the store itself (so a killed follower
//!   resumes exactly where its last commit left it).
//! - `apply`: one LTX file's SQLite pages written into a store transaction (store pages and
//!   SQLite pages need not be the same size).
//! - `follower`: [`Follower`]: which file comes next (level 0, else the higher levels that
//!   cover the TXIDs needed, else the newest snapshot), and the loop's steps.

mod apply;
mod error;
pub mod follower;
pub mod state;

pub use error::Error;
pub use follower::{Applied, Follower, Poll};
pub use state::{read_state, FollowState, DATABASE_FILE, STATE_FILE};
