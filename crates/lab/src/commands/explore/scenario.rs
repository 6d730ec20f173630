//! The scenario matrix: who runs what, in which order, with which SQLite settings.
//!
//! Steps run one at a time (the explorer waits for each step's reply before sending the
//! next), so the chosen process makes the same calls in every run and its k-th call in the
//! recording is its k-th call in a crash run.

use std::fmt;

use serde::Serialize;

/// How a process opens the database.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The onesync store through the explorer's VFS (small checkpoints and growth steps)
    Onesync,
    /// Stock SQLite on its default VFS with journal_mode=OFF (a negative control)
    StockJournalOff,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Locking {
    Normal,
    Exclusive,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sync {
    Full,
    Normal,
    Off,
}

impl Locking {
    pub fn pragma(self) -> &'static str {
        match self {
            Locking::Normal => "NORMAL",
            Locking::Exclusive => "EXCLUSIVE",
        }
    }
}

impl Sync {
    pub fn pragma(self) -> &'static str {
        match self {
            Sync::Full => "FULL",
            Sync::Normal => "NORMAL",
            Sync::Off => "OFF",
        }
    }
}

/// Whether a process replicates the database to the run's `replica/` (`store.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replica {
    Off,
    /// Its commits ship when a process holding the lease ticks (a synchronous COMMIT, a close).
    Async,
    /// `onesync_replicate_sync=1`: each COMMIT returns once the replica holds it.
    Sync,
}

/// Which name of the store a process opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    Main,
    /// A second name of the same file, by hard link.
    HardLink,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Writer,
    /// Only reads; its reads also run while the chosen process is stopped.
    Reader,
}

#[derive(Clone, Debug)]
pub struct Proc {
    /// One letter; transfer ids start with it.
    pub name: char,
    pub backend: Backend,
    pub path: Name,
    pub attach: bool,
    /// With `attach`: the attached database is a plain SQLite file beside the store
    /// (`bank-aux.db`, its journal on disk), not the store's second database.
    pub plain_aux: bool,
    pub locking: Locking,
    pub sync: Sync,
    pub role: Role,
    /// Its write transactions run concurrently with other writers' (`PRAGMA
    /// onesync_concurrent = 1` after each open; the onesync backend only): a conflict fails
    /// COMMIT with SQLITE_BUSY_SNAPSHOT and the worker reruns the transfer.
    pub concurrent: bool,
    pub replica: Replica,
}

/// One step of a script, as sent to the worker (one line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    Open,
    /// This many transfers, each one transaction, each acknowledged when COMMIT returned.
    Xfer(u32),
    /// A read transaction printing every ledger row not printed yet.
    Read,
    /// BEGIN and a read: a snapshot held across the next steps ...
    Hold,
    /// ... until COMMIT.
    Release,
    /// Close and open again (the last process to close checkpoints).
    Reopen,
    Close,
    /// A checkpoint now, by a second handle on the store in this process (as another
    /// process's checkpoint would come; SQLite has no way to ask for one).
    Checkpoint,
    /// One transaction larger than SQLite's page cache (`cache_size` 2), so that SQLite
    /// spills pages to the database file before it ends: a transfer and
    /// [`SPILL_ROWS`](super::SPILL_ROWS) filler rows, then COMMIT (acknowledged as a
    /// transfer) or ROLLBACK (its transfer id marks it as rolled back: it must never be
    /// found).
    Spill {
        commit: bool,
    },
    /// BEGIN and a transfer's statements, without COMMIT: a write transaction held open
    /// across the next steps (of other processes: concurrent writers) ...
    Begin,
    /// ... until COMMIT (acknowledged as a transfer). A COMMIT refused with
    /// SQLITE_BUSY_SNAPSHOT (or SQLITE_BUSY) is rolled back and the same transfer (same id,
    /// accounts, amount) runs again as a whole transaction until it commits (a few tries).
    Commit,
    /// BEGIN and two overflowing rows appended to this process's own table (`grow_A`, made
    /// by the first), held open: two concurrent writers doing this at once both grow the
    /// file, and the later COMMIT moves its new pages past the other's (the VFS's
    /// relocation) ...
    BeginGrow,
    /// ... until COMMIT, which must go through (no conflict: the tables are apart). Only
    /// `integrity_check` sees these rows; they are not acknowledged transfers.
    CommitGrow,
    /// About 900 KiB of rows added to this process's `grow_` table in one transaction, then
    /// DELETE of every row of it and VACUUM: a commit that supersedes most of the store, after which a process alone with the store
    /// moves what is left down and cuts the file's free end off (the store's
    /// `give_back_space`).
    Shrink,
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cmd::Open => write!(f, "open"),
            Cmd::Xfer(n) => write!(f, "xfer {n}"),
            Cmd::Read => write!(f, "read"),
            Cmd::Hold => write!(f, "hold"),
            Cmd::Release => write!(f, "release"),
            Cmd::Reopen => write!(f, "reopen"),
            Cmd::Close => write!(f, "close"),
            Cmd::Checkpoint => write!(f, "checkpoint"),
            Cmd::Spill { commit: true } => write!(f, "spill commit"),
            Cmd::Spill { commit: false } => write!(f, "spill rollback"),
            Cmd::Begin => write!(f, "begin"),
            Cmd::Commit => write!(f, "commit"),
            Cmd::BeginGrow => write!(f, "begin-grow"),
            Cmd::CommitGrow => write!(f, "commit-grow"),
            Cmd::Shrink => write!(f, "shrink"),
        }
    }
}

/// What the processes still alive do after the last step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// SIGKILL: their commits must be found by recovery, not by their own close.
    Kill,
    /// Close (the last one checkpoints) and exit.
    Close,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub procs: Vec<Proc>,
    /// (index into `procs`, step)
    pub script: Vec<(usize, Cmd)>,
    /// The processes stopped in turn (indexes into `procs`).
    pub victims: Vec<usize>,
    pub end: End,
    /// `ONESYNC_SABOTAGE` for every worker (`ONESYNC_REPLICA_SABOTAGE` for a name of
    /// onesync-replica's).
    pub sabotage: Option<&'static str>,
    /// Commits between the store's own checkpoints.
    pub checkpoint_interval: u64,
    /// The store's `max_growth_step` in bytes where not the VFS's: from this size on a
    /// process checkpoints before it grows where that pays, and grows ahead by large steps.
    pub max_growth_step: Option<u64>,
}

impl Scenario {
    pub fn backend(&self) -> Backend {
        self.procs[0].backend
    }

    pub fn uses_link(&self) -> bool {
        self.procs.iter().any(|p| p.path == Name::HardLink)
    }

    pub fn uses_attach(&self) -> bool {
        self.procs.iter().any(|p| p.attach)
    }

    /// Whether the attached database is a plain SQLite file (a transaction over a store and
    /// a plain file: SQLite's super-journal, the store's journal on disk).
    pub fn uses_plain_aux(&self) -> bool {
        self.procs.iter().any(|p| p.attach && p.plain_aux)
    }

    /// Whether concurrent writers' transactions overlap in the script (a `begin` of a
    /// concurrent writer): then a run without a stop must see a COMMIT conflict.
    pub fn overlaps(&self) -> bool {
        self.script
            .iter()
            .any(|&(i, cmd)| cmd == Cmd::Begin && self.procs[i].concurrent)
            && self.procs.iter().filter(|p| p.concurrent).count() > 1
    }

    /// Whether its processes replicate (the replica's checks run: `replica.rs`).
    pub fn replicated(&self) -> bool {
        self.procs.iter().any(|p| p.replica != Replica::Off)
    }

    pub fn proc_named(&self, name: char) -> Option<&Proc> {
        self.procs.iter().find(|p| p.name == name)
    }
}

fn writer(name: char) -> Proc {
    Proc {
        name,
        backend: Backend::Onesync,
        path: Name::Main,
        attach: false,
        plain_aux: false,
        locking: Locking::Normal,
        sync: Sync::Full,
        role: Role::Writer,
        concurrent: false,
        replica: Replica::Off,
    }
}

fn concurrent_writer(name: char, sync: Sync) -> Proc {
    Proc {
        concurrent: true,
        sync,
        ..writer(name)
    }
}

fn reader(name: char) -> Proc {
    Proc {
        role: Role::Reader,
        ..writer(name)
    }
}

/// One process: open, transfers with a reopen (a checkpoint at close) in the middle.
/// One process, each transfer one transaction over the store and an ATTACHed plain SQLite
/// file (`sabotage`: the negative control's).
fn attach_plain(sabotage: Option<&'static str>, sync: Sync) -> Scenario {
    let (name, about) = match (sabotage, sync) {
        (Some("multi-file-commit-deferred"), _) => (
            "attach-plain-commit-deferred",
            "attach-plain-normal with the store's part left to the deferred flush (must fail)",
        ),
        (Some(_), _) => (
            "attach-plain-store-journal-in-memory",
            "attach-plain with the store's journal kept in memory (must fail)",
        ),
        (None, Sync::Full) => (
            "attach-plain",
            "one process, ATTACH of a plain SQLite file; every transfer in both, by the super-journal",
        ),
        (None, _) => (
            "attach-plain-normal",
            "attach-plain at synchronous=NORMAL (the store's commit is durable before the super-journal goes)",
        ),
    };
    Scenario {
        end: End::Close,
        sabotage,
        // Three transfers cross a checkpoint (every CHECKPOINT_INTERVAL commits) and a
        // reopen.
        script: vec![
            (0, Cmd::Open),
            (0, Cmd::Xfer(2)),
            (0, Cmd::Reopen),
            (0, Cmd::Xfer(1)),
        ],
        ..single(
            name,
            about,
            Proc {
                attach: true,
                plain_aux: true,
                sync,
                ..writer('A')
            },
        )
    }
}

fn single(name: &'static str, about: &'static str, a: Proc) -> Scenario {
    Scenario {
        name,
        about,
        procs: vec![a],
        script: vec![
            (0, Cmd::Open),
            (0, Cmd::Xfer(4)),
            (0, Cmd::Reopen),
            (0, Cmd::Xfer(3)),
        ],
        victims: vec![0],
        end: End::Kill,
        sabotage: None,
        checkpoint_interval: super::CHECKPOINT_INTERVAL,
        max_growth_step: None,
    }
}

/// Two writers taking turns, one transfer each, for `rounds` rounds; with checkpoints every
/// few commits (the explorer's VFS), some fall in each process.
fn two_writers(rounds: usize) -> Vec<(usize, Cmd)> {
    let mut script = vec![(0, Cmd::Open), (1, Cmd::Open)];
    for _ in 0..rounds {
        script.push((0, Cmd::Xfer(1)));
        script.push((1, Cmd::Xfer(1)));
    }
    script
}

/// Two concurrent writers, A and B: their transactions overlap, and as every transfer
/// writes the accounts' page and the ledger's last page, the second COMMIT of an overlapping
/// pair always conflicts (SQLITE_BUSY_SNAPSHOT) and its transfer runs again. Rounds of
/// A first, of B first, and of one committing a whole transfer while the other holds its
/// transaction open; with a checkpoint every few commits, some fall in each process.
fn concurrent_rounds() -> Vec<(usize, Cmd)> {
    let (a, b) = (0, 1);
    let mut script = vec![(a, Cmd::Open), (b, Cmd::Open)];
    let overlap = |first: usize, second: usize| {
        [
            (first, Cmd::Begin),
            (second, Cmd::Begin),
            (first, Cmd::Commit),
            // Refused (the first's commit changed what it read), then run again.
            (second, Cmd::Commit),
        ]
    };
    for _ in 0..2 {
        script.extend(overlap(a, b));
    }
    for _ in 0..2 {
        script.extend(overlap(b, a));
    }
    // One commits whole transfers while the other holds its transaction; the holder's
    // COMMIT then conflicts.
    script.extend([
        (a, Cmd::Begin),
        (b, Cmd::Xfer(1)),
        (a, Cmd::Commit),
        (b, Cmd::Begin),
        (a, Cmd::Xfer(1)),
        (b, Cmd::Commit),
    ]);
    // A last pair of plain transfers (nothing overlaps).
    script.extend([(a, Cmd::Xfer(1)), (b, Cmd::Xfer(1))]);
    script
}

/// Two concurrent writers appending to tables of their own in overlapping transactions, so
/// that the later COMMIT of each pair moves its new pages (each first makes its table
/// alone); transfers around them.
fn concurrent_growth(name: &'static str, about: &'static str) -> Scenario {
    let (a, b) = (0, 1);
    let mut script = vec![(a, Cmd::Open), (b, Cmd::Open)];
    for p in [a, b] {
        script.extend([(p, Cmd::BeginGrow), (p, Cmd::CommitGrow)]);
    }
    for (first, second) in [(a, b), (b, a), (a, b)] {
        script.extend([
            (first, Cmd::BeginGrow),
            (second, Cmd::BeginGrow),
            (first, Cmd::CommitGrow),
            (second, Cmd::CommitGrow),
        ]);
    }
    script.extend([(a, Cmd::Xfer(1)), (b, Cmd::Xfer(1))]);
    Scenario {
        script,
        ..concurrent(name, about, Sync::Full, Sync::Full)
    }
}

fn concurrent(name: &'static str, about: &'static str, a: Sync, b: Sync) -> Scenario {
    Scenario {
        name,
        about,
        procs: vec![concurrent_writer('A', a), concurrent_writer('B', b)],
        script: concurrent_rounds(),
        victims: vec![0, 1],
        end: End::Kill,
        sabotage: None,
        checkpoint_interval: super::CHECKPOINT_INTERVAL,
        max_growth_step: None,
    }
}

/// A process alone with the store (its per-transaction locks in memory: the store's lease)
/// holds a write transaction open while a second process opens the store; its COMMIT ends
/// the lease (every lock it holds taken for real: a serial writer's exclusive lock, or a
/// concurrent writer's shared one while the second writes beside it), and both write.
fn join_mid_transaction(concurrent: bool) -> Scenario {
    let (a, b) = (0, 1);
    let (name, about, procs, script) = if concurrent {
        (
            "join-mid-concurrent",
            "a concurrent writer alone with the store (the lease) holds a transaction while a \
             second concurrent writer opens and begins one; the first COMMIT ends the lease",
            vec![
                concurrent_writer('A', Sync::Normal),
                concurrent_writer('B', Sync::Full),
            ],
            vec![
                (a, Cmd::Open),
                (a, Cmd::Xfer(1)),
                (a, Cmd::Begin),
                (b, Cmd::Open),
                (b, Cmd::Begin),
                (a, Cmd::Commit),
                (b, Cmd::Commit),
                (a, Cmd::Xfer(1)),
            ],
        )
    } else {
        (
            "join-mid-transaction",
            "a process alone with the store (the lease) holds a write transaction while a \
             second process opens; its COMMIT ends the lease, then both write",
            vec![
                Proc {
                    sync: Sync::Normal,
                    ..writer('A')
                },
                writer('B'),
            ],
            vec![
                (a, Cmd::Open),
                (a, Cmd::Xfer(2)),
                (a, Cmd::Begin),
                (b, Cmd::Open),
                (a, Cmd::Commit),
                (b, Cmd::Xfer(2)),
                (a, Cmd::Xfer(2)),
                (b, Cmd::Xfer(1)),
            ],
        )
    };
    Scenario {
        name,
        about,
        procs,
        script,
        victims: vec![a, b],
        end: End::Kill,
        sabotage: None,
        checkpoint_interval: super::CHECKPOINT_INTERVAL,
        max_growth_step: None,
    }
}

/// The matrix. Every scenario's store starts as a funded bank (100 accounts).
pub fn all() -> Vec<Scenario> {
    vec![
        single(
            "single-full",
            "one process, synchronous=FULL, locking_mode=NORMAL",
            writer('A'),
        ),
        single(
            "single-normal",
            "one process, synchronous=NORMAL",
            Proc {
                sync: Sync::Normal,
                ..writer('A')
            },
        ),
        single(
            "single-off",
            "one process, synchronous=OFF",
            Proc {
                sync: Sync::Off,
                ..writer('A')
            },
        ),
        single(
            "exclusive-full",
            "one process, locking_mode=EXCLUSIVE, synchronous=FULL",
            Proc {
                locking: Locking::Exclusive,
                ..writer('A')
            },
        ),
        single(
            "exclusive-normal",
            "one process, locking_mode=EXCLUSIVE, synchronous=NORMAL",
            Proc {
                locking: Locking::Exclusive,
                sync: Sync::Normal,
                ..writer('A')
            },
        ),
        Scenario {
            name: "exclusive-off",
            about: "locking_mode=EXCLUSIVE with synchronous=OFF, then a second process opens and writes",
            procs: vec![
                Proc {
                    locking: Locking::Exclusive,
                    sync: Sync::Off,
                    ..writer('A')
                },
                writer('B'),
            ],
            script: vec![
                (0, Cmd::Open),
                (0, Cmd::Xfer(5)),
                (0, Cmd::Close),
                (1, Cmd::Open),
                (1, Cmd::Xfer(1)),
            ],
            victims: vec![0],
            end: End::Close,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        Scenario {
            end: End::Close,
            ..single(
                "attach",
                "one process, ATTACH of a second database of the same store; every transfer in both",
                Proc {
                    attach: true,
                    ..writer('A')
                },
            )
        },
        attach_plain(None, Sync::Full),
        attach_plain(None, Sync::Normal),
        Scenario {
            name: "two-writers",
            about: "two processes taking turns, checkpoints falling in either",
            procs: vec![writer('A'), writer('B')],
            script: two_writers(5),
            victims: vec![0, 1],
            end: End::Kill,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        join_mid_transaction(false),
        join_mid_transaction(true),
        Scenario {
            name: "mixed-sync",
            about: "two processes taking turns, one with synchronous=NORMAL, one with OFF",
            procs: vec![
                Proc {
                    sync: Sync::Normal,
                    ..writer('A')
                },
                Proc {
                    sync: Sync::Off,
                    ..writer('B')
                },
            ],
            script: two_writers(4),
            victims: vec![0, 1],
            end: End::Kill,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        Scenario {
            name: "reader",
            about: "a writer and a reader process (one snapshot held across commits); the \
                    reader also reads while the writer is stopped",
            procs: vec![writer('A'), reader('R')],
            script: {
                let mut s = vec![(0, Cmd::Open), (1, Cmd::Open), (1, Cmd::Hold)];
                for round in 0..5 {
                    s.push((0, Cmd::Xfer(1)));
                    s.push((1, Cmd::Read));
                    if round == 2 {
                        s.push((1, Cmd::Release));
                    }
                }
                s
            },
            victims: vec![0, 1],
            end: End::Kill,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        Scenario {
            name: "hard-link",
            about: "two processes on two names (hard links) of one store",
            procs: vec![
                writer('A'),
                Proc {
                    path: Name::HardLink,
                    ..writer('B')
                },
            ],
            script: two_writers(4),
            victims: vec![0, 1],
            end: End::Kill,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        Scenario {
            name: "three",
            about: "two writers with ATTACH and a reader; each stopped in turn",
            procs: vec![
                Proc {
                    attach: true,
                    ..writer('A')
                },
                Proc {
                    attach: true,
                    ..writer('B')
                },
                reader('R'),
            ],
            script: {
                let mut s = vec![(0, Cmd::Open), (1, Cmd::Open), (2, Cmd::Open)];
                for _ in 0..3 {
                    s.push((0, Cmd::Xfer(1)));
                    s.push((2, Cmd::Read));
                    s.push((1, Cmd::Xfer(1)));
                    s.push((2, Cmd::Read));
                }
                s.push((1, Cmd::Close));
                s.push((0, Cmd::Xfer(1)));
                s
            },
            victims: vec![0, 1, 2],
            end: End::Kill,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        checkpoint_handoff(None),
        Scenario {
            name: "spill",
            about: "transactions larger than the page cache (cache_size 2: SQLite writes pages \
                    before COMMIT), committed and rolled back, beside ordinary transfers",
            procs: vec![writer('A')],
            script: vec![
                (0, Cmd::Open),
                (0, Cmd::Xfer(1)),
                (0, Cmd::Spill { commit: true }),
                (0, Cmd::Spill { commit: false }),
                (0, Cmd::Xfer(1)),
                (0, Cmd::Spill { commit: false }),
                (0, Cmd::Spill { commit: true }),
            ],
            victims: vec![0],
            end: End::Kill,
            sabotage: None,
            checkpoint_interval: super::CHECKPOINT_INTERVAL,
            max_growth_step: None,
        },
        Scenario {
            name: "last-closer-joined",
            about: "A opens first, B joins; A closes, so B's close is the last: it takes every \
                    free slot as recovery would, then checkpoints (issue 14, defect 6)",
            procs: vec![writer('A'), writer('B')],
            script: vec![
                (0, Cmd::Open),
                (1, Cmd::Open),
                (0, Cmd::Xfer(1)),
                (1, Cmd::Xfer(1)),
                (0, Cmd::Close),
                (1, Cmd::Xfer(1)),
            ],
            victims: vec![0, 1],
            end: End::Close,
            sabotage: None,
            checkpoint_interval: 1000,
            max_growth_step: None,
        },
        growth(None),
        growth_large(None),
        shrink(),
        concurrent(
            "concurrent-writers",
            "two concurrent writers (onesync_concurrent), synchronous=FULL: overlapping \
             transactions, the second COMMIT of each pair conflicts and reruns",
            Sync::Full,
            Sync::Full,
        ),
        concurrent(
            "concurrent-normal",
            "as concurrent-writers, one process with synchronous=NORMAL, one with OFF",
            Sync::Normal,
            Sync::Off,
        ),
        concurrent_growth(
            "concurrent-growth",
            "two concurrent writers growing the file at once (synchronous=FULL): the later COMMIT \
             of each pair moves its new pages past the other's",
        ),
        replica_sync(None),
        replica_three(None),
    ]
}

/// One process in synchronous replication (FULL), crossing checkpoints; a compaction at each
/// ship (`sabotage`: the negative control's).
fn replica_sync(sabotage: Option<&'static str>) -> Scenario {
    Scenario {
        sabotage,
        ..single(
            named(sabotage, "replica-sync", "sync-ack-before-upload"),
            "one process, synchronous=FULL, each COMMIT returning once the replica holds it",
            Proc {
                replica: Replica::Sync,
                ..writer('A')
            },
        )
    }
}

/// A and B in synchronous replication, C at NORMAL, each stopped in turn. C flushes after each
/// second transfer: A's close ships C3 and C4, not C5 (`sabotage`: the negative control's).
fn replica_three(sabotage: Option<&'static str>) -> Scenario {
    let (a, b, c) = (0, 1, 2);
    let sync = |name| Proc {
        replica: Replica::Sync,
        ..writer(name)
    };
    Scenario {
        name: named(sabotage, "replica-handover", "txid-from-position"),
        about: "A and B in synchronous replication, C at NORMAL: A ships (C's flushed commits \
                too) and closes, B takes the lease at a COMMIT and closes, C at its close",
        procs: vec![
            sync('A'),
            sync('B'),
            Proc {
                sync: Sync::Normal,
                replica: Replica::Async,
                ..writer('C')
            },
        ],
        script: vec![
            (a, Cmd::Open),
            (b, Cmd::Open),
            (c, Cmd::Open),
            (a, Cmd::Xfer(1)),
            (c, Cmd::Xfer(2)),
            (a, Cmd::Xfer(1)),
            (c, Cmd::Xfer(3)),
            (a, Cmd::Close),
            (b, Cmd::Xfer(2)),
            (b, Cmd::Close),
            (c, Cmd::Xfer(1)),
        ],
        victims: vec![a, b, c],
        end: End::Close,
        sabotage,
        checkpoint_interval: super::CHECKPOINT_INTERVAL,
        max_growth_step: None,
    }
}

/// Defect 1 of issue 14: A checkpoints right after B's commit (B, fully caught up, has
/// nothing to learn from the side file), A is stopped anywhere in it, B commits once more,
/// both die. The store's own checkpoints are rare here: B's next commit must not checkpoint
/// itself (its new header would hide a stale chain).
fn checkpoint_handoff(sabotage: Option<&'static str>) -> Scenario {
    Scenario {
        name: named(sabotage, "checkpoint-handoff", "checkpoint-publication"),
        about: "A checkpoints after B's commit and is stopped in it; B commits again, both die",
        procs: vec![writer('A'), writer('B')],
        script: vec![
            (0, Cmd::Open),
            (1, Cmd::Open),
            (0, Cmd::Xfer(1)),
            (1, Cmd::Xfer(1)),
            (0, Cmd::Checkpoint),
            (1, Cmd::Xfer(1)),
            (0, Cmd::Xfer(1)),
            (1, Cmd::Xfer(1)),
        ],
        victims: vec![0],
        end: End::Kill,
        sabotage,
        checkpoint_interval: 1000,
        max_growth_step: None,
    }
}

/// Growth steps in two processes: A creates the store and owns its free slots, B joins
/// owning none, so B's first commit needs a step (grown before it queues for the commit's
/// locks), transactions larger than the page cache take slots for their spilled pages as
/// they go (growing the file under the write lock when none is left), and later commits of
/// both grow it ahead of need, after their commit and outside its locks (each step: its
/// last slot written under the write lock, the rest of its zeros, a flush, then its slots
/// handed out).
fn growth(sabotage: Option<&'static str>) -> Scenario {
    let (a, b) = (0, 1);
    Scenario {
        name: named(sabotage, "growth", "lazy-growth"),
        about: "two processes growing the file: a joining process's first commit, spills \
                under the write lock, later commits ahead of need",
        procs: vec![writer('A'), writer('B')],
        script: vec![
            (a, Cmd::Open),
            (b, Cmd::Open),
            (b, Cmd::Xfer(1)),
            (a, Cmd::Spill { commit: true }),
            (b, Cmd::Spill { commit: true }),
            (a, Cmd::Xfer(1)),
            (b, Cmd::Spill { commit: true }),
            (a, Cmd::Spill { commit: true }),
            (b, Cmd::Xfer(1)),
        ],
        victims: vec![a, b],
        end: End::Kill,
        sabotage,
        checkpoint_interval: super::CHECKPOINT_INTERVAL,
        max_growth_step: None,
    }
}

/// [`growth`] on a file that is large from the start (`max_growth_step` of 64 KiB, below
/// its first 256 KiB): steps of the largest size, grown ahead once a quarter of one is left
/// in the longest run (over one round's 121 runs a logging build counted 506 steps grown
/// ahead on the large file, 107 by B while its own slots were few, none inside a commit's
/// locks). A
/// checkpoint before a step, where it pays, is `checkpoint_locked` inside the commit, the
/// checkpoint every scenario here stops in (`checkpoint_interval` 3).
fn growth_large(sabotage: Option<&'static str>) -> Scenario {
    Scenario {
        name: named(sabotage, "growth-large", "lazy-growth-large"),
        about: "growth on a file past max_growth_step: large steps ahead of need",
        max_growth_step: Some(64 << 10),
        ..growth(sabotage)
    }
}

/// Space given back: A and B grow the store with rows of their own, B closes, A adds and
/// deletes about 900 KiB of rows and VACUUMs alone, then closes and opens again (a
/// checkpoint moves the window and the pages left to the lowest slots, flushes them, and
/// truncates the file), B opens again and both commit transfers into the shortened file;
/// then they die.
fn shrink() -> Scenario {
    let (a, b) = (0, 1);
    let mut script = vec![(a, Cmd::Open), (b, Cmd::Open)];
    for _ in 0..3 {
        script.extend([(a, Cmd::BeginGrow), (a, Cmd::CommitGrow)]);
        script.extend([(b, Cmd::Xfer(1))]);
    }
    script.extend([
        (b, Cmd::Close),
        (a, Cmd::Shrink),
        // Closing alone, A checkpoints and gives the space back (if the VACUUM's commit
        // did not already).
        (a, Cmd::Reopen),
        (b, Cmd::Open),
        (b, Cmd::Xfer(1)),
        (a, Cmd::Xfer(1)),
    ]);
    Scenario {
        name: "shrink",
        about: "two processes; one deletes most of the store and VACUUMs alone, which moves \
                what is left down and truncates the file; both commit after it",
        procs: vec![
            concurrent_writer('A', Sync::Full),
            concurrent_writer('B', Sync::Full),
        ],
        script,
        victims: vec![a, b],
        end: End::Kill,
        sabotage: None,
        checkpoint_interval: 1000,
        max_growth_step: None,
    }
}

/// A scenario's name: `plain`, or `control` where it runs as a negative control (with a
/// sabotage).
fn named(sabotage: Option<&str>, plain: &'static str, control: &'static str) -> &'static str {
    if sabotage.is_some() {
        control
    } else {
        plain
    }
}

/// The negative controls: scenarios that must fail.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NegativeControl {
    /// Stock SQLite (default VFS) with journal_mode=OFF: a stopped commit is half applied
    JournalOff,
    /// The store with ONESYNC_SABOTAGE=checkpoint-publication (a writer trusts the side
    /// file alone: defect 1 of issue 14)
    CheckpointPublication,
    /// concurrent-writers with ONESYNC_SABOTAGE=unvalidated-snapshot (a concurrent COMMIT is
    /// not checked against the commits made since its snapshot)
    UnvalidatedSnapshot,
    /// growth with ONESYNC_SABOTAGE=lazy-growth (a step's slots handed out before its zeros
    /// are written and flushed: a record's window reaches past the file's durable end)
    LazyGrowth,
    /// growth-large with ONESYNC_SABOTAGE=lazy-growth
    LazyGrowthLarge,
    /// concurrent-growth with ONESYNC_SABOTAGE=relocated-pointer-missed (a COMMIT whose new
    /// pages move past another's leaves one pointer to them unrewritten)
    RelocatedPointerMissed,
    /// concurrent-growth with ONESYNC_SABOTAGE=stalled-retry-unflushed (a retry refused on
    /// the same snapshot again does not make the commits it lost to durable)
    StalledRetryUnflushed,
    /// attach-plain with ONESYNC_SABOTAGE=store-journal-in-memory (the store's journal stays
    /// in memory in a transaction with a plain file: a crash before the super-journal is
    /// deleted leaves the store committed and the plain file rolled back)
    StoreJournalInMemory,
    /// attach-plain-normal with ONESYNC_SABOTAGE=multi-file-commit-deferred (the store's
    /// part left to the deferred flush at NORMAL: a power cut after the super-journal is
    /// deleted takes it back)
    MultiFileCommitDeferred,
    /// replica-sync with ONESYNC_REPLICA_SABOTAGE=sync-ack-before-upload (a synchronous
    /// COMMIT returns before the replica holds it)
    SyncAckBeforeUpload,
    /// replica-handover with ONESYNC_REPLICA_SABOTAGE=txid-from-position (a process taking
    /// the lease writes again a TXID that landed after the position was saved)
    TxidFromPosition,
}

pub fn negative_control(control: NegativeControl) -> Scenario {
    match control {
        NegativeControl::JournalOff => {
            let a = Proc {
                backend: Backend::StockJournalOff,
                ..writer('A')
            };
            Scenario {
                name: "journal-off",
                about: "stock SQLite, journal_mode=OFF (must fail)",
                ..single("journal-off", "", a)
            }
        }
        NegativeControl::CheckpointPublication => checkpoint_handoff(Some("checkpoint-publication")),
        NegativeControl::LazyGrowth => growth(Some("lazy-growth")),
        NegativeControl::StoreJournalInMemory => attach_plain(Some("store-journal-in-memory"), Sync::Full),
        NegativeControl::MultiFileCommitDeferred => {
            attach_plain(Some("multi-file-commit-deferred"), Sync::Normal)
        }
        NegativeControl::LazyGrowthLarge => growth_large(Some("lazy-growth")),
        NegativeControl::SyncAckBeforeUpload => replica_sync(Some("sync-ack-before-upload")),
        NegativeControl::TxidFromPosition => replica_three(Some("txid-from-position")),
        NegativeControl::StalledRetryUnflushed => Scenario {
            sabotage: Some("stalled-retry-unflushed"),
            ..concurrent_growth(
                "stalled-retry-unflushed",
                "concurrent-growth where a stalled retry waits for nothing (must fail)",
            )
        },
        NegativeControl::RelocatedPointerMissed => Scenario {
            sabotage: Some("relocated-pointer-missed"),
            ..concurrent_growth(
                "relocated-pointer-missed",
                "concurrent-growth with a pointer to moved pages left unrewritten (must fail)",
            )
        },
        NegativeControl::UnvalidatedSnapshot => Scenario {
            sabotage: Some("unvalidated-snapshot"),
            ..concurrent(
                "unvalidated-snapshot",
                "concurrent-writers without the COMMIT's check against its snapshot (must fail)",
                Sync::Full,
                Sync::Full,
            )
        },
    }
}
