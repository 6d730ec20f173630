//! `report --seeds`: the five seed papers' headline claims, each beside what the lab measures
//! with the paper's workload here, in one stamped report: `DIR/seeds.md` (for people) and
//! `DIR/seeds.json` (every figure).
//!
//! Every row names the `onesync-lab` command that measured it. The report runs those commands
//! by parsing them with the lab's own command line and calling the same functions, so a row's
//! command is exactly what ran and can be rerun alone. A command that fails leaves its rows
//! "not run" with the error, and the others still run.
//!
//! Each row has a bar that decides whether the claim holds here: the target where it
//! set one (X-FTL, LS-MVBT), otherwise at least half the paper's gain (a ratio `r` over 1
//! needs `1 + (r − 1) / 2`), or, for bytes written, within a third of the paper's figure.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};

use super::results::{stamp_lines, write_files};
use super::stamp::Stamp;
use crate::commands::bench::{self, writers::WritersResult, BenchCommand, ModeResult};
use crate::commands::flash::{self, FlashResult};
use crate::commands::mvbt::{self, MvbtResult};
use crate::vm::{VmArgs, VmCommand};

/// The seed papers, in the order of `../shared/seeds/`.
#[derive(clap::ValueEnum, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Paper {
    /// 000: MAW, multi-block atomic writes on F2FS (in the VM: needs qemu and Debian's kernel)
    Maw,
    /// 001: X-FTL, a transactional FTL (the simulated SSD)
    Xftl,
    /// 002: the thesis on byte-range locks and a WAL sequencer (concurrent writers)
    Thesis,
    /// 003: SQLean, O_ATOMIC files under SQLite (TPC-B)
    Sqlean,
    /// 004: LS-MVBT, the lazy-split multi-version B-tree
    LsMvbt,
}

impl Paper {
    pub const ALL: [Paper; 5] = [
        Paper::Maw,
        Paper::Xftl,
        Paper::Thesis,
        Paper::Sqlean,
        Paper::LsMvbt,
    ];

    fn seed(self) -> &'static str {
        match self {
            Paper::Maw => "000",
            Paper::Xftl => "001",
            Paper::Thesis => "002",
            Paper::Sqlean => "003",
            Paper::LsMvbt => "004",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Paper::Maw => "MAW: multi-block atomic write on F2FS (Cheon, Won)",
            Paper::Xftl => {
                "X-FTL: transactional FTL for SQLite databases (Kang, Lee, Moon, Oh, Min; SIGMOD 2013)"
            }
            Paper::Thesis => {
                "Enhancements to the SQLite library to improve performance on mobile platforms: \
                 byte-range locks and a WAL sequencer (Ramachandran)"
            }
            Paper::Sqlean => "SQLean: failure-atomic file update with O_ATOMIC and syncv (HP Labs)",
            Paper::LsMvbt => "LS-MVBT: the lazy-split multi-version B-tree (Kim, Nam, Park, Won; FAST 2014)",
        }
    }

    /// The paper's platform against ours, and what that means for the comparison.
    fn platform(self) -> &'static str {
        match self {
            Paper::Maw => {
                "The paper measures a phone-class F2FS and ext4 on real devices. Here Debian's \
                 kernel runs in qemu on a fresh F2FS or ext4 image, and the guest's block device \
                 counts what each transaction writes. The emulation (TCG) has no real clock, so \
                 the paper's transaction rates (MAW +389 % over ext4 PERSIST) are not compared; \
                 the bytes are."
            }
            Paper::Xftl => {
                "The paper runs SQLite on ext4 on an OpenSSD Jasmine board (MLC NAND, 8 KiB \
                 pages, SATA2). Here SQLite runs on a simulated drive with that NAND's geometry \
                 and datasheet timing, under an ext4-like filesystem; time is the simulated \
                 clock (`crates/flash`'s README gives the model)."
            }
            Paper::Thesis => {
                "The thesis changes SQLite's locking (byte-range locks on pages instead of one \
                 database lock) and measures DB Bench with 2 threads on an Android board. Here \
                 the same comparison is the onesync store with page-level locking \
                 (`onesync-concurrent`, URI `concurrent=1`) against the same store with one \
                 write lock (`onesync`), on this machine's disk."
            }
            Paper::Sqlean => {
                "The paper compares SQLite's rollback journal with SQLite on an O_ATOMIC file \
                 (journal off) on HP's AdvFS, a 12-core server with a battery-backed RAID \
                 cache. Here `onesync` (one failure-atomic store, no journal) stands for SQLean \
                 against stock SQLite in DELETE mode, both at synchronous=FULL on a fresh ext4 \
                 on this machine's disk, whose flush is cheap as a battery-backed cache's is."
            }
            Paper::LsMvbt => {
                "The paper runs on a Galaxy S4 (eMMC, ext4, Android 4.3). Here the `mvbt` \
                 virtual table over `crates/mvbt` runs against stock WAL (checkpoint intervals \
                 63..1000 pages) and TRUNCATE on ext4 on an emulated device with the `emmc` \
                 preset's flush latency (and the `nvme` preset's); recovery is timed with a warm \
                 page cache, from opening the crash image to the first query's answer."
            }
        }
    }
}

/// What "the claim holds here" means for one row.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Bar {
    /// Ours is at least this.
    AtLeast { value: f64 },
    /// Ours is at most this.
    AtMost { value: f64 },
    /// Ours is within this fraction of the paper's figure, either way.
    Within { fraction: f64 },
}

impl Bar {
    /// At least half the paper's gain `paper` (a ratio over 1).
    fn half_gain(paper: f64) -> Bar {
        Bar::AtLeast {
            value: 1.0 + (paper - 1.0) / 2.0,
        }
    }

    fn holds(self, paper: f64, ours: f64) -> bool {
        match self {
            Bar::AtLeast { value } => ours >= value,
            Bar::AtMost { value } => ours <= value,
            Bar::Within { fraction } => (ours - paper).abs() <= fraction * paper,
        }
    }

    fn text(self, paper: f64, unit: &str) -> String {
        match self {
            Bar::AtLeast { value } => format!("≥ {}", figure(value, unit)),
            Bar::AtMost { value } => format!("≤ {}", figure(value, unit)),
            Bar::Within { fraction } => format!(
                "{}–{}",
                figure(paper * (1.0 - fraction), unit),
                figure(paper * (1.0 + fraction), unit)
            ),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Holds,
    Misses,
    NotRun,
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Misses => "**misses**",
            Verdict::NotRun => "not run",
        }
    }
}

/// One claim of a paper beside our figure.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Row {
    pub claim: String,
    /// The paper's figure, in `unit`.
    pub paper: f64,
    /// Ours, measured by `command`; `None` when it did not run (`note` says why).
    pub ours: Option<f64>,
    /// "x" (a ratio), "KB", "ms" or "pages".
    pub unit: String,
    pub bar: Bar,
    pub verdict: Verdict,
    /// The `onesync-lab` command that measured `ours`.
    pub command: String,
    /// One sentence on the difference between the paper's figure and ours.
    pub note: String,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct PaperResults {
    pub paper: Paper,
    pub seed: String,
    pub title: String,
    pub platform: String,
    pub rows: Vec<Row>,
}

/// The contents of `seeds.json`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct SeedsReport {
    pub stamp: Stamp,
    pub papers: Vec<PaperResults>,
}

/// A row before it is measured.
struct Claim {
    claim: &'static str,
    paper: f64,
    unit: &'static str,
    bar: Bar,
    note: &'static str,
}

/// One command and the claims its results answer, one figure per claim (`None`: the
/// results lack it, say a mode that did not run).
struct Experiment {
    paper: Paper,
    command: String,
    claims: Vec<Claim>,
    measure: fn(&str) -> Result<Vec<Option<f64>>>,
}

/// How many transactions the experiments run: the papers' counts, or fewer (`--quick`, for
/// the tests: the same code, noisier figures).
#[derive(Clone, Copy)]
pub struct Scale {
    pub quick: bool,
}

impl Scale {
    fn txns(self, full: u64, quick: u64) -> u64 {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// Runs the experiments of `papers` and writes `dir/seeds.md` and `dir/seeds.json`; returns
/// their paths.
pub fn write(dir: &Path, papers: &[Paper], scale: Scale) -> Result<Vec<PathBuf>> {
    if papers.is_empty() {
        bail!("--papers names no paper");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = Stamp::now(&std::env::temp_dir());
    let experiments: Vec<Experiment> = experiments(scale)
        .into_iter()
        .filter(|e| papers.contains(&e.paper))
        .collect();
    let mut report = SeedsReport {
        stamp,
        papers: Vec::new(),
    };
    for (i, experiment) in experiments.into_iter().enumerate() {
        eprintln!(
            "report --seeds: [{}] {} ({})",
            i + 1,
            experiment.command,
            experiment.paper.seed()
        );
        let rows = run(&experiment);
        let section = match report.papers.iter_mut().find(|p| p.paper == experiment.paper) {
            Some(section) => section,
            None => {
                let paper = experiment.paper;
                report.papers.push(PaperResults {
                    paper,
                    seed: paper.seed().to_owned(),
                    title: paper.title().to_owned(),
                    platform: paper.platform().to_owned(),
                    rows: Vec::new(),
                });
                report.papers.last_mut().expect("just pushed")
            }
        };
        section.rows.extend(rows);
    }
    let files = [
        (
            "seeds.json".to_owned(),
            serde_json::to_string_pretty(&report)? + "\n",
        ),
        ("seeds.md".to_owned(), markdown(&report)),
    ];
    write_files(dir, files)
}

/// Runs one experiment; its rows, "not run" with the error if it failed.
fn run(experiment: &Experiment) -> Vec<Row> {
    let figures = (experiment.measure)(&experiment.command);
    let (figures, error) = match figures {
        Ok(figures) => (figures, None),
        Err(e) => {
            let error = format!("{e:#}");
            eprintln!("report --seeds: {} failed: {error}", experiment.command);
            (Vec::new(), Some(error))
        }
    };
    experiment
        .claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ours = figures.get(i).copied().flatten().filter(|v| v.is_finite());
            let verdict = match ours {
                Some(v) if c.bar.holds(c.paper, v) => Verdict::Holds,
                Some(_) => Verdict::Misses,
                None => Verdict::NotRun,
            };
            let note = match (&error, ours) {
                (Some(error), _) => format!("Did not run: {error}"),
                (None, None) => format!("The results lack this figure. {}", c.note),
                (None, Some(_)) => c.note.to_owned(),
            };
            Row {
                claim: c.claim.to_owned(),
                paper: c.paper,
                ours,
                unit: c.unit.to_owned(),
                bar: c.bar,
                verdict,
                command: experiment.command.clone(),
                note,
            }
        })
        .collect()
}

/// `command` ("onesync-lab SUBCOMMAND ARGS...") parsed as `onesync-lab SUBCOMMAND` parses
/// its arguments, `A` being that subcommand's arguments (the lab's own parser delegates to
/// the same type).
fn parse<A: clap::Args>(command: &str, subcommand: &str) -> Result<A> {
    #[derive(clap::Parser)]
    #[command(name = "onesync-lab")]
    struct Subcommand<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    let ["onesync-lab", first, rest @ ..] = words.as_slice() else {
        bail!("{command}: not an onesync-lab command");
    };
    if *first != subcommand {
        bail!("{command}: not `onesync-lab {subcommand}`");
    }
    let argv = std::iter::once(*first).chain(rest.iter().copied());
    Subcommand::<A>::try_parse_from(argv)
        .map(|parsed| parsed.args)
        .map_err(|e| anyhow!("{command}: {}", e.render()))
}

fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

fn experiments(scale: Scale) -> Vec<Experiment> {
    vec![
        Experiment {
            paper: Paper::Maw,
            command: format!(
                "onesync-lab vm bench insert --mode persist,wal,maw --txns {}",
                scale.txns(1000, 100)
            ),
            claims: maw_claims(),
            measure: measure_maw,
        },
        Experiment {
            paper: Paper::Xftl,
            command: format!(
                "onesync-lab flash partsupp --pages 20 --txns {}",
                scale.txns(1000, 100)
            ),
            claims: vec![
                Claim {
                    claim: "partsupp, 20 pages per transaction: X-FTL's speed over WAL's (elapsed time)",
                    paper: 3.0,
                    unit: "x",
                    bar: Bar::AtLeast { value: 2.5 },
                    note: "The simulated drive is one NAND channel behind a write cache, and host costs are microseconds, so elapsed time follows the NAND work (X-FTL's programs are 0.6x WAL's); the paper's elapsed times hold a large cost per flush this drive lacks (the what-if below).",
                },
                Claim {
                    claim: "the same, over the rollback journal (DELETE)",
                    paper: 11.7,
                    unit: "x",
                    bar: Bar::AtLeast { value: 8.0 },
                    note: "The rollback journal pays the filesystem's journal commits for the journal file's creation and deletion at every transaction.",
                },
                Claim {
                    claim: "X-FTL's NAND programs over WAL's",
                    paper: 0.5,
                    unit: "x",
                    bar: Bar::AtMost { value: 0.6 },
                    note: "WAL writes each page twice (log, then checkpoint); X-FTL writes it once, out of place.",
                },
            ],
            measure: measure_partsupp,
        },
        Experiment {
            paper: Paper::Xftl,
            command: format!(
                "onesync-lab flash partsupp --pages 20 --flush-checkpoints --capacity-mib 512 --txns {}",
                scale.txns(1000, 100)
            ),
            claims: vec![
                Claim {
                    claim: "what-if, the cause named: as above, with the OpenSSD Greedy FTL's FLUSH CACHE (the whole page map written at each flush; a 512 MiB drive's 30-page map): X-FTL over WAL",
                    paper: 3.0,
                    unit: "x",
                    bar: Bar::AtLeast { value: 2.5 },
                    note: "Not the default model: the paper's firmware is not public, and this what-if assumes it kept Greedy's flush, which X-FTL's commits skip.",
                },
                Claim {
                    claim: "what-if: X-FTL over the rollback journal",
                    paper: 11.7,
                    unit: "x",
                    bar: Bar::AtLeast { value: 8.0 },
                    note: "Each of the rollback journal's flushes pays the whole map too.",
                },
            ],
            measure: measure_partsupp_time,
        },
        Experiment {
            paper: Paper::Xftl,
            command: "onesync-lab flash restart".to_owned(),
            claims: vec![
                Claim {
                    claim: "restart after a sudden power-off: WAL's time over X-FTL's (paper 153.0 ms and 3.5 ms)",
                    paper: 153.0 / 3.5,
                    unit: "x",
                    bar: Bar::half_gain(153.0 / 3.5),
                    note: "WAL's restart reads and replays its log; X-FTL's drive replays its mapping log and SQLite finds nothing to recover.",
                },
                Claim {
                    claim: "the rollback journal's time over X-FTL's (paper 20.1 ms and 3.5 ms)",
                    paper: 20.1 / 3.5,
                    unit: "x",
                    bar: Bar::half_gain(20.1 / 3.5),
                    note: "The rollback journal's restart rolls the hot journal back into the database.",
                },
            ],
            measure: measure_restart,
        },
        Experiment {
            paper: Paper::Thesis,
            command: format!(
                "onesync-lab bench dbbench --threads 2 --mode onesync,onesync-concurrent --txns {}",
                scale.txns(4000, 400)
            ),
            claims: vec![Claim {
                claim: "DB Bench, 2 threads on their own tables: page-level locks over one database lock",
                paper: 1.10,
                unit: "x",
                bar: Bar::half_gain(1.10),
                note: "onesync's one write lock is held only for a commit's CPU part and let go before the flush, which waiting commits share (group commit), so the overlap the thesis gained from finer locks is already in this baseline (on an emulated eMMC the two are level too). The thesis reports +10 % for inserts and +20 % for deletes; our dbbench mixes inserts, updates, deletes and searches.",
            }],
            measure: measure_dbbench,
        },
        Experiment {
            paper: Paper::Thesis,
            command: format!(
                "onesync-lab bench writers --workload own-rows --threads 2 --mode onesync,onesync-concurrent --rounds 3 --txns {}",
                scale.txns(2000, 200)
            ),
            claims: vec![Claim {
                claim: "non-overlapping writes, 2 threads: page-level locks over one database lock",
                paper: 1.30,
                unit: "x",
                bar: Bar::half_gain(1.30),
                note: "As above: with the flush outside the write lock, finer locks only let two commits' CPU parts overlap, on 2 cores. The thesis updates rows of separate tables; own-rows inserts 100 rows per transaction into each writer's own table.",
            }],
            measure: measure_writers_gain,
        },
        Experiment {
            paper: Paper::Thesis,
            command: format!(
                "onesync-lab bench writers --workload shared-pages --threads 2 --mode onesync,onesync-concurrent --rounds 3 --txns {}",
                scale.txns(2000, 200)
            ),
            claims: vec![Claim {
                claim: "overlapping updates, 2 threads: page-level locks over one database lock",
                paper: 1.22,
                unit: "x",
                bar: Bar::half_gain(1.22),
                note: "Writers updating rows on the same pages conflict under page-level locks too: one of them is refused at COMMIT and retries.",
            }],
            measure: measure_writers_gain,
        },
        Experiment {
            paper: Paper::Sqlean,
            command: format!(
                "onesync-lab bench tpcb --mode delete,onesync --fs ext4 --txns {}",
                scale.txns(5000, 500)
            ),
            claims: vec![
                Claim {
                    claim: "TPC-B, light load: mean commit latency, SQLite's over SQLean's (paper 3.63 ms and 1.28 ms)",
                    paper: 3.63 / 1.28,
                    unit: "x",
                    bar: Bar::half_gain(3.63 / 1.28),
                    note: "The paper's disk is a 7,200 RPM drive behind a battery-backed cache; here the flush is a fast SSD's, so DELETE's three flushes weigh less and the CPU path more.",
                },
                Claim {
                    claim: "99th percentile latency, SQLite's over SQLean's (paper 3.33 ms and 1.52 ms)",
                    paper: 3.33 / 1.52,
                    unit: "x",
                    bar: Bar::half_gain(3.33 / 1.52),
                    note: "As above.",
                },
                Claim {
                    claim: "maximum latency, SQLite's over SQLean's (paper 4.65 ms and 1.80 ms)",
                    paper: 4.65 / 1.80,
                    unit: "x",
                    bar: Bar::half_gain(4.65 / 1.80),
                    note: "A maximum is one commit's, set by whatever stalled the machine or the loop device then: from run to run here it falls on either side of 1x.",
                },
                Claim {
                    claim: "write() calls per transaction, SQLite's over SQLean's",
                    paper: 2.57,
                    unit: "x",
                    bar: Bar::half_gain(2.57),
                    note: "onesync writes a commit with one vectored write; DELETE makes a call for the journal's header and each of its page records, then for each database page.",
                },
                Claim {
                    claim: "fsync() calls per transaction, SQLite's over SQLean's",
                    paper: 3.0,
                    unit: "x",
                    bar: Bar::half_gain(3.0),
                    note: "DELETE syncs the journal, its header and the database; onesync syncs once.",
                },
            ],
            measure: measure_tpcb,
        },
        Experiment {
            paper: Paper::Sqlean,
            command: format!(
                "onesync-lab bench writers --workload own-rows --threads 4 --mode delete,onesync-concurrent --rounds 3 --txns {}",
                scale.txns(2000, 200)
            ),
            claims: vec![Claim {
                claim: "peak throughput under heavy load, SQLean's over SQLite's",
                paper: 2.8,
                unit: "x",
                bar: Bar::half_gain(2.8),
                note: "The paper's heavy load is TPC-B from many clients on 12 cores; here 4 writers on 2 cores, each inserting 100 rows per transaction into its own table.",
            }],
            measure: measure_writers_gain,
        },
        Experiment {
            paper: Paper::LsMvbt,
            command: format!(
                "onesync-lab mvbt insert --fs ext4 --emulate emmc --txns {}",
                scale.txns(1000, 100)
            ),
            claims: vec![
                Claim {
                    claim: "insert transactions per second, LS-MVBT over the best WAL checkpoint interval (paper 704 and 416)",
                    paper: 704.0 / 416.0,
                    unit: "x",
                    bar: Bar::AtLeast { value: 1.5 },
                    note: "Both commit with one flush; the gain is in the pages written per commit, which an eMMC pays for.",
                },
                Claim {
                    claim: "the same over TRUNCATE (paper 704 and 55–60)",
                    paper: 704.0 / 57.5,
                    unit: "x",
                    bar: Bar::half_gain(704.0 / 57.5),
                    note: "TRUNCATE flushes the journal and the database: two or more flushes per commit.",
                },
                Claim {
                    claim: "LS-MVBT's dirty pages per transaction",
                    paper: 1.0,
                    unit: "pages",
                    bar: Bar::Within { fraction: 0.33 },
                    note: "Lazy split and metadata embedding leave about one dirty node per insert.",
                },
            ],
            measure: measure_mvbt_insert,
        },
        Experiment {
            paper: Paper::LsMvbt,
            command: format!(
                "onesync-lab mvbt insert --fs ext4 --emulate nvme --txns {}",
                scale.txns(1000, 100)
            ),
            claims: vec![Claim {
                claim: "the same on an NVMe drive's flush (the nvme preset), over the best WAL",
                paper: 704.0 / 416.0,
                unit: "x",
                bar: Bar::half_gain(704.0 / 416.0),
                note: "A cheaper flush leaves less to save: WAL's second flush per commit (at checkpoints) and its larger writes weigh less.",
            }],
            measure: measure_mvbt_insert_first,
        },
        Experiment {
            paper: Paper::LsMvbt,
            command: "onesync-lab mvbt recovery --aborted-inserts 10,2560".to_owned(),
            claims: vec![
                Claim {
                    claim: "recovery with a 10-insert aborted transaction: WAL's time over LS-MVBT's",
                    paper: 4.5,
                    unit: "x",
                    bar: Bar::half_gain(4.5),
                    note: "WAL's recovery here reads its WAL and writes nothing; LS-MVBT's open reads the header of every slot of a file twice the tree's size (two slots per node) to find the newest version, since no header names it (metadata embedding). The paper reads 4–5x from its Figure 10.",
                },
                Claim {
                    claim: "the same with 2,560 aborted inserts",
                    paper: 4.5 * 1.20 / 1.28,
                    unit: "x",
                    bar: Bar::AtLeast { value: 3.0 },
                    note: "Open reverts the aborted version in memory; the revert's writes and flush fall to the first write transaction after it (not timed here, `mvbt recovery` reports it). The paper's figure: 4.5x at 10 inserts, WAL's time up 20 % and LS-MVBT's up 28 % at 2,560.",
                },
                Claim {
                    claim: "TRUNCATE's recovery over LS-MVBT's, 10 aborted inserts",
                    paper: 3.9,
                    unit: "x",
                    bar: Bar::half_gain(3.9),
                    note: "TRUNCATE rolls the small hot journal back into the database and syncs, and a flush is cheap here.",
                },
            ],
            measure: measure_mvbt_recovery,
        },
    ]
}

fn maw_claims() -> Vec<Claim> {
    const NOTE: &str = "Bytes the guest's block device saw per transaction (SQLite's files, the filesystem's metadata and journal).";
    let table_3 = |claim, paper| Claim {
        claim,
        paper,
        unit: "KB",
        bar: Bar::Within { fraction: 1.0 / 3.0 },
        note: NOTE,
    };
    vec![
        Claim {
            note: "Each of PERSIST's four fsyncs here also commits ext4's journal (a descriptor, the changed metadata block, a commit block): most of the bytes are the filesystem's, beside SQLite's own.",
            ..table_3("Table 3, KB written per 100-byte insert: ext4, PERSIST", 48.0)
        },
        table_3("ext4, WAL", 36.0),
        table_3("F2FS, PERSIST", 52.0),
        table_3("F2FS, WAL", 16.0),
        table_3("F2FS, MAW", 16.0),
        Claim {
            claim: "MAW's bytes written over ext4 PERSIST's (the paper's −67 %)",
            paper: 16.0 / 48.0,
            unit: "x",
            bar: Bar::AtMost { value: 0.40 },
            note: "MAW commits a transaction's pages as one atomic write, with no journal file.",
        },
    ]
}

/// Table 3's cells, in `maw_claims`' order.
const MAW_CELLS: [(&str, &str); 5] = [
    ("ext4", "persist"),
    ("ext4", "wal"),
    ("f2fs", "persist"),
    ("f2fs", "wal"),
    ("f2fs", "maw"),
];

fn measure_maw(command: &str) -> Result<Vec<Option<f64>>> {
    let VmArgs {
        command: VmCommand::Bench(args),
    } = parse(command, "vm")?
    else {
        bail!("not a vm bench command");
    };
    let rows = crate::vm::experiments::measure(&args)?;
    let dev_kb = |fs: &str, mode: &str| -> Option<f64> {
        rows.iter()
            .find(|r| r["fs"] == fs && r["mode"] == mode)
            .and_then(|r| r["per_txn"]["dev_kb"].as_f64())
    };
    // The paper's KB are 1,000 bytes of 4 KiB blocks; the device reports KiB.
    let kb = |fs: &str, mode: &str| dev_kb(fs, mode).map(|kib| kib * 1.024);
    let mut figures: Vec<Option<f64>> = MAW_CELLS.iter().map(|(fs, mode)| kb(fs, mode)).collect();
    figures.push(ratio(dev_kb("f2fs", "maw"), dev_kb("ext4", "persist")));
    Ok(figures)
}

fn flash_mode<'a>(results: &'a [FlashResult], mode: &str) -> Option<&'a FlashResult> {
    results.iter().find(|r| r.mode == mode)
}

fn measure_partsupp(command: &str) -> Result<Vec<Option<f64>>> {
    let flash::Experiment::Partsupp(args) = parse::<flash::FlashArgs>(command, "flash")?.experiment else {
        bail!("not a flash partsupp command");
    };
    let results = flash::partsupp(&args)?;
    let time = |mode| flash_mode(&results, mode).map(|r| r.sim_ms);
    let programs = |mode| flash_mode(&results, mode).map(|r| r.nand_programs as f64);
    Ok(vec![
        ratio(time("wal"), time("xftl")),
        ratio(time("rbj"), time("xftl")),
        ratio(programs("xftl"), programs("wal")),
    ])
}

/// `measure_partsupp`'s two elapsed-time ratios alone (the what-if's NAND programs include
/// the map's, which the paper's counts do not).
fn measure_partsupp_time(command: &str) -> Result<Vec<Option<f64>>> {
    let mut figures = measure_partsupp(command)?;
    figures.truncate(2);
    Ok(figures)
}

fn measure_restart(command: &str) -> Result<Vec<Option<f64>>> {
    let flash::Experiment::Restart(args) = parse::<flash::FlashArgs>(command, "flash")?.experiment else {
        bail!("not a flash restart command");
    };
    let results = flash::restart(&args)?;
    let time = |mode| {
        flash_mode(&results, mode)
            .and_then(|r| r.restart)
            .map(|p| p.drive_ms + p.mount_ms + p.sqlite_ms)
    };
    Ok(vec![
        ratio(time("wal"), time("xftl")),
        ratio(time("rbj"), time("xftl")),
    ])
}

fn bench_mode<'a>(results: &'a [ModeResult], mode: &str) -> Option<&'a ModeResult> {
    results.iter().find(|r| r.mode == mode)
}

fn measure_dbbench(command: &str) -> Result<Vec<Option<f64>>> {
    let BenchCommand::Workload(args) = parse(command, "bench")? else {
        bail!("not a bench WORKLOAD command");
    };
    let results = bench::measure(&args)?;
    let tps = |mode| bench_mode(&results, mode).map(|r| r.tps);
    Ok(vec![ratio(tps("onesync-concurrent"), tps("onesync"))])
}

/// The last mode's txn/s over the first's (the median of the rounds' ratios).
fn measure_writers_gain(command: &str) -> Result<Vec<Option<f64>>> {
    let BenchCommand::Writers(args) = parse(command, "bench")? else {
        bail!("not a bench writers command");
    };
    let results: Vec<WritersResult> = bench::writers::measure(&args)?;
    if let Some(failed) = results.iter().find(|r| r.oracle != "ok") {
        bail!("{}: the writers' oracle failed: {}", failed.mode, failed.oracle);
    }
    Ok(vec![results.last().map(|r| r.ratio)])
}

fn measure_tpcb(command: &str) -> Result<Vec<Option<f64>>> {
    let BenchCommand::Workload(args) = parse(command, "bench")? else {
        bail!("not a bench WORKLOAD command");
    };
    let results = bench::measure(&args)?;
    let sqlite = bench_mode(&results, "delete");
    let sqlean = bench_mode(&results, "onesync");
    let of = |f: fn(&ModeResult) -> f64| ratio(sqlite.map(f), sqlean.map(f));
    Ok(vec![
        of(|r| r.latency_us.mean),
        of(|r| r.latency_us.p99),
        of(|r| r.latency_us.max),
        of(|r| r.per_txn.write_calls),
        of(|r| r.per_txn.fsyncs),
    ])
}

fn mvbt_rows(command: &str) -> Result<Vec<MvbtResult>> {
    let mvbt::MvbtArgs { experiment } = parse(command, "mvbt")?;
    match experiment {
        mvbt::Experiment::Insert(args) => mvbt::insert(&args),
        mvbt::Experiment::Recovery(args) => mvbt::recovery(&args),
        _ => bail!("not an mvbt insert or recovery command"),
    }
}

fn measure_mvbt_insert(command: &str) -> Result<Vec<Option<f64>>> {
    let results = mvbt_rows(command)?;
    let ls_mvbt = results.iter().find(|r| r.mode == "ls-mvbt");
    let best_wal = results
        .iter()
        .filter(|r| r.mode == "wal")
        .map(|r| r.tps)
        .max_by(f64::total_cmp);
    let truncate = results.iter().find(|r| r.mode == "truncate").map(|r| r.tps);
    Ok(vec![
        ratio(ls_mvbt.map(|r| r.tps), best_wal),
        ratio(ls_mvbt.map(|r| r.tps), truncate),
        ls_mvbt.map(|r| r.dirty_pages_per_txn),
    ])
}

/// `measure_mvbt_insert`'s first figure alone (LS-MVBT over the best WAL).
fn measure_mvbt_insert_first(command: &str) -> Result<Vec<Option<f64>>> {
    let mut figures = measure_mvbt_insert(command)?;
    figures.truncate(1);
    Ok(figures)
}

fn measure_mvbt_recovery(command: &str) -> Result<Vec<Option<f64>>> {
    let results = mvbt_rows(command)?;
    let time = |mode: &str, aborted: f64| {
        results
            .iter()
            .find(|r| r.mode == mode && r.param == Some(aborted))
            .and_then(|r| r.recovery_ms)
    };
    Ok(vec![
        ratio(time("wal", 10.0), time("ls-mvbt", 10.0)),
        ratio(time("wal", 2560.0), time("ls-mvbt", 2560.0)),
        ratio(time("truncate", 10.0), time("ls-mvbt", 10.0)),
    ])
}

/// A figure with its unit: ratios to two decimals, the rest to one.
fn figure(value: f64, unit: &str) -> String {
    match unit {
        "x" => format!("{value:.2}x"),
        "pages" => format!("{value:.2}"),
        _ => format!("{value:.1} {unit}"),
    }
}

/// The .md: the stamp, a summary line per paper, then each paper's table.
pub fn markdown(report: &SeedsReport) -> String {
    let mut md = format!(
        "# The five seed papers' headline claims, reproduced\n\n\
         Generated by `onesync-lab report --seeds`; do not edit (rerun it).\n\n{}\n\
         Each row: the paper's figure, ours, the bar that says the claim holds here (the \
         issue's target where it set one, else at least half the paper's gain, or within a \
         third of the paper's bytes), the command that measured ours (each can be rerun \
         alone) and one sentence on the difference.\n\n\
         | seed | paper | claims that hold |\n|---|---|---|\n",
        stamp_lines(&report.stamp)
    );
    for p in &report.papers {
        let holds = p.rows.iter().filter(|r| r.verdict == Verdict::Holds).count();
        let not_run = p.rows.iter().filter(|r| r.verdict == Verdict::NotRun).count();
        let _ = writeln!(
            md,
            "| {} | {} | {holds} of {}{} |",
            p.seed,
            p.title,
            p.rows.len(),
            if not_run > 0 {
                format!(" ({not_run} not run)")
            } else {
                String::new()
            }
        );
    }
    for p in &report.papers {
        let _ = write!(
            md,
            "\n## {}: {}\n\n{}\n\n\
             | claim | paper | ours | bar | verdict | command | note |\n|---|---|---|---|---|---|---|\n",
            p.seed, p.title, p.platform
        );
        for r in &p.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | `{}` | {} |",
                r.claim,
                figure(r.paper, &r.unit),
                r.ours.map_or("–".to_owned(), |v| figure(v, &r.unit)),
                r.bar.text(r.paper, &r.unit),
                r.verdict.text(),
                r.command,
                r.note.replace('|', "\\|").replace('\n', " ")
            );
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_parses_as_the_lab_would() {
        use crate::{Cli, Command};
        for quick in [false, true] {
            for e in experiments(Scale { quick }) {
                let command = Cli::try_parse_from(e.command.split_whitespace())
                    .unwrap_or_else(|err| panic!("{}: {err}", e.command))
                    .command;
                let matches = match e.paper {
                    Paper::Maw => matches!(command, Command::Vm(_)),
                    Paper::Xftl => matches!(command, Command::Flash(_)),
                    Paper::Thesis | Paper::Sqlean => matches!(command, Command::Bench(_)),
                    Paper::LsMvbt => matches!(command, Command::Mvbt(_)),
                };
                assert!(matches, "{} runs another command", e.command);
            }
        }
    }

    #[test]
    fn a_command_is_parsed_by_its_subcommand_s_own_arguments() {
        let args: flash::FlashArgs =
            parse("onesync-lab flash partsupp --pages 20 --txns 7", "flash").unwrap();
        let flash::Experiment::Partsupp(args) = args.experiment else {
            panic!("not partsupp");
        };
        assert_eq!((args.pages, args.txns), (vec![20], 7));
        let err = parse::<flash::FlashArgs>("onesync-lab mvbt insert", "flash").unwrap_err();
        assert!(err.to_string().contains("not `onesync-lab flash`"), "{err}");
        let err = parse::<flash::FlashArgs>("sqlite3 flash partsupp", "flash").unwrap_err();
        assert!(err.to_string().contains("not an onesync-lab command"), "{err}");
    }

    #[test]
    fn every_paper_has_claims() {
        let experiments = experiments(Scale { quick: false });
        for paper in Paper::ALL {
            assert!(
                experiments
                    .iter()
                    .any(|e| e.paper == paper && !e.claims.is_empty()),
                "{paper:?} has no claim"
            );
        }
    }

    #[test]
    fn bars_decide_as_they_read() {
        assert!(Bar::AtLeast { value: 2.5 }.holds(3.0, 2.5));
        assert!(!Bar::AtLeast { value: 2.5 }.holds(3.0, 2.49));
        assert!(Bar::AtMost { value: 0.6 }.holds(0.5, 0.59));
        assert!(!Bar::AtMost { value: 0.6 }.holds(0.5, 0.61));
        assert!(Bar::Within { fraction: 0.25 }.holds(16.0, 19.9));
        assert!(!Bar::Within { fraction: 0.25 }.holds(16.0, 20.1));
        assert_eq!(Bar::half_gain(3.0), Bar::AtLeast { value: 2.0 });
    }

    #[test]
    fn a_failed_command_leaves_its_rows_not_run_with_the_error() {
        let experiment = Experiment {
            paper: Paper::Xftl,
            command: "onesync-lab flash partsupp --no-such-option".to_owned(),
            claims: vec![Claim {
                claim: "c",
                paper: 2.0,
                unit: "x",
                bar: Bar::half_gain(2.0),
                note: "n",
            }],
            measure: measure_partsupp,
        };
        let rows = run(&experiment);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].verdict, Verdict::NotRun);
        assert!(rows[0].note.contains("--no-such-option"), "{}", rows[0].note);
    }
}
