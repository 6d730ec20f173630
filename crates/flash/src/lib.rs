//! A simulated NAND flash SSD (page-mapping FTL, X-FTL) and the host filesystem above it.
//!
//! [`Ssd`] is a NAND flash drive simulator: a page-mapping FTL with greedy garbage
//! collection, a persistent mapping (checkpoints plus a mapping log) rebuilt after a power
//! cut, and X-FTL — the transactional remapping of Kang, Lee, Moon, Oh and Min, "X-FTL:
//! Transactional FTL for SQLite Databases" (SIGMOD 2013): `read_tx`/`write_tx`/`commit`/
//! `abort` commands that make a set of page writes atomic with no journal. Time is simulated
//! on two clocks: the NAND array's (every operation) and the host's ([`Ssd::now_us`]: host
//! software, link transfers, and waits for the drive, whose write cache lets programs run
//! behind the host until a flush or commit). [`hostfs`] is the filesystem above it.
//!
//! # Durability and atomicity (what callers may rely on)
//! * **Plain writes** go out of place and are page-atomic. Each host write is programmed to
//!   NAND before it returns (there is no volatile data cache); only the *mapping* is volatile
//!   until persisted. After a power cut, each logical page holds either its last durable
//!   content or content written after it — never garbage, never another page's data.
//! * **`flush`** makes every earlier write and trim durable. So does a successful `commit`.
//! * Stronger, and tested: recovery restores the drive to the state after some *prefix* of
//!   its history of writes, trims and commits, and that prefix contains everything
//!   acknowledged by a `flush` or `commit` that returned `Ok`. (The mapping is persisted as a
//!   whole, by flushes, commits and garbage collection, so it is always some earlier in-DRAM
//!   mapping.)
//! * **Transactions** (X-FTL): `write_tx(t, ..)` programs the new copy out of place and
//!   records it in the X-L2P table (tx, lpn, new ppn; every entry in the table is active);
//!   L2P, and so `read`, still see the committed copy, which garbage collection keeps.
//!   `read_tx(t, ..)` sees `t`'s own writes. `commit(t)` writes one commit record — `t`'s
//!   X-L2P entries, plus any pending plain mapping changes, CRC-protected, one program for up
//!   to a page of entries, several pages for more with the last page as the atomic final
//!   marker — and then remaps the entries into L2P. On return the transaction is durable and
//!   atomic; after a cut during `commit` it is all or nothing. `abort(t)` drops the entries
//!   (the new copies become invalid). A power cut drops every transaction not committed. Transaction ids are
//!   chosen by the host; 0 is reserved. A transaction starts with its first `write_tx`;
//!   committing an unknown or empty transaction is a plain flush, aborting one is a no-op.
//!   Writes to the same page by two transactions, or by a transaction and a plain write, are
//!   not conflicts: each commit installs its own copies when it commits.
//! * Every call after a power cut returns [`FlashError::PowerLost`] until [`Ssd::restart`].
//!   Host misuse (page out of range, wrong buffer length, tx id 0) is an error, never a panic.
//!
//! # Design
//! * **NAND model** ([`Geometry`], [`Timing`]): pages programmed in order within a block,
//!   blocks erased whole; the model refuses anything else (an internal error). Page data is
//!   allocated per block on its first program and freed by its erase. Each page's spare area
//!   holds (kind, lpn, sequence number, tx id, CRC-32C of data and those fields), checked on
//!   every read. A power cut during a program tears the page (uncorrectable); during an erase
//!   it leaves each page of the block as it was, torn or erased, and the block unprogrammable
//!   until erased again.
//! * **Layout**: blocks `[0, K)` and `[K, 2K)` are two checkpoint regions, the next
//!   `meta_blocks - 2K` blocks the mapping log, the rest data. Data blocks are written by two
//!   streams (host writes, GC copies), each into its own open block.
//! * **Mapping persistence**: the in-DRAM L2P is persisted as a log of CRC-protected records
//!   (each the changed (lpn, ppn) pairs, a commit record also naming its transaction; pages
//!   carry consecutive sequence numbers) plus full checkpoints of L2P. A checkpoint goes to the
//!   checkpoint region not holding the latest complete one (erased first), and names where the
//!   log after it starts; it is written when `checkpoint_every` log pages have accumulated,
//!   when the changes would take as many pages as a checkpoint, when the log would otherwise
//!   wrap onto itself, and at the first persist after a restart. Flush, commit, and GC write a
//!   record only when the mapping changed. GC persists the mapping before erasing a victim, so
//!   no persistent mapping ever points into an erased block.
//! * **Recovery** ([`Ssd::restart`]) reads only the metadata area: the first page of both
//!   checkpoint regions, the newest complete checkpoint (falling back to the other region if
//!   the cut tore it), then the log after it while sequence numbers continue, applying each
//!   record whose final page is present. Cost: `2 + checkpoint pages + log pages since
//!   that checkpoint` page reads, reported in [`Recovery`]. Data blocks holding no mapped page
//!   are erased before reuse (their state is unknown); blocks holding mapped pages are
//!   closed. The clock and counters continue.
//! * **Garbage collection** is greedy: when a host write needs a new block and fewer than two
//!   free blocks remain, the closed data block with the fewest valid pages is reclaimed (open
//!   and metadata blocks excluded). Valid pages are committed copies (including the old copy
//!   of every page an active transaction wrote) and active transactions' new copies (X-L2P is
//!   updated when they move).
//! * **Timing**, one channel and one way (all NAND operations serial): NAND read = `read_us` +
//!   bus transfer of page + spare area; program = bus transfer + `program_us`; erase =
//!   `erase_us`; plus a host-interface transfer of the page per host read or write, and
//!   `command_us` of host CPU per command. A host write completes when its page is in the
//!   drive's write cache (`write_cache_bytes`); its program starts when the array is free and
//!   the host waits only for a full cache, a read, or a `flush`/`commit` (which drains the
//!   cache, then persists the mapping). The cache is a timing model only: the program's effect
//!   on flash happens at the write call, so what a power cut keeps is as described above.
//!   [`Timing::nand_only`] is the write-through clock without host costs. Defaults:
//!   geometry of the Samsung K9LCG08U1M MLC NAND on the OpenSSD Jasmine board used by the
//!   X-FTL paper (8 KiB pages, 436-byte spare area, 128 pages per block); timing from the
//!   Samsung K9GAG08U0M datasheet (tR 60 µs max, tPROG 800 µs typ, tBERS 1.5 ms typ, 25 ns bus
//!   cycle = 40 MB/s) and a SATA2 host link (300 MB/s).
#![forbid(unsafe_code)]

pub mod config;
pub mod counters;
pub mod error;
pub mod fuzz;
pub mod hostfs;
mod ids;
mod meta;
mod nand;
mod ssd;

pub use config::{Geometry, Sabotage, SsdConfig, Timing};
pub use counters::{Counters, Recovery};
pub use error::FlashError;
pub use ids::{Lpn, TxId};
pub use ssd::Ssd;
