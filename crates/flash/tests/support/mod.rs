//! Shared by the property tests: page contents that name their write, random operation
//! sequences, a reference model, and runners that check the drive against it (with and
//! without power cuts).

#![allow(dead_code)]

use std::collections::BTreeMap;

use onesync_flash::{FlashError, Ssd, SsdConfig};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Number of cases: `ONESYNC_FLASH_CASES` if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("ONESYNC_FLASH_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Page content for write `tag` of `lpn` (tag 0: zeros, what a never-written or trimmed page
/// reads as).
pub fn page(ps: usize, lpn: u64, tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; ps];
    if tag == 0 {
        return b;
    }
    b[..8].copy_from_slice(&tag.to_le_bytes());
    b[8..16].copy_from_slice(&lpn.to_le_bytes());
    for (i, x) in b[16..].iter_mut().enumerate() {
        *x = (tag.wrapping_mul(31).wrapping_add(lpn * 7 + i as u64) % 251) as u8;
    }
    b
}

/// Which write a page holds: `Ok(tag)`, or `Err` if it is not a page [`page`] made for `lpn`.
pub fn tag_of(b: &[u8], lpn: u64) -> Result<u64, String> {
    if b.iter().all(|&x| x == 0) {
        return Ok(0);
    }
    let tag = u64::from_le_bytes(b[..8].try_into().unwrap());
    if b == page(b.len(), lpn, tag).as_slice() {
        Ok(tag)
    } else {
        let other = u64::from_le_bytes(b[8..16].try_into().unwrap());
        Err(format!(
            "lpn {lpn} reads garbage (claims tag {tag} of lpn {other})"
        ))
    }
}

#[derive(Clone, Debug)]
pub enum Op {
    Write(u16),
    Trim(u16),
    Flush,
    Read(u16),
    WriteTx(u8, u16),
    ReadTx(u8, u16),
    Commit(u8),
    Abort(u8),
    /// Arm a power cut that strikes during the n-th NAND operation from now.
    Cut(u16),
}

fn lpn() -> impl Strategy<Value = u16> {
    // A hot set, so GC victims hold few valid pages, and the whole drive.
    prop_oneof![2 => 0..12u16, 1 => any::<u16>()]
}

pub fn op(with_cuts: bool) -> impl Strategy<Value = Op> {
    let cut_weight = if with_cuts { 3 } else { 0 };
    prop_oneof![
        30 => lpn().prop_map(Op::Write),
        3 => lpn().prop_map(Op::Trim),
        5 => Just(Op::Flush),
        8 => lpn().prop_map(Op::Read),
        25 => (1..=4u8, lpn()).prop_map(|(t, l)| Op::WriteTx(t, l)),
        5 => (1..=4u8, lpn()).prop_map(|(t, l)| Op::ReadTx(t, l)),
        6 => (1..=4u8).prop_map(Op::Commit),
        3 => (1..=4u8).prop_map(Op::Abort),
        cut_weight => (1..80u16).prop_map(Op::Cut),
    ]
}

/// One test case: a drive shape, whether to fill the drive first, a seed for power-cut
/// details, and the operations.
#[derive(Clone, Debug)]
pub struct Case {
    /// Pages per block and blocks.
    pub shape: (u32, u32),
    pub page_size: usize,
    pub checkpoint_every: u32,
    pub prefill: bool,
    pub seed: u64,
    pub ops: Vec<Op>,
}

pub fn case(with_cuts: bool, max_ops: usize) -> impl Strategy<Value = Case> {
    (
        prop_oneof![3 => Just((16u32, 16u32)), 1 => Just((8, 24)), 1 => Just((4, 48))],
        prop_oneof![Just(128usize), Just(256usize)],
        prop_oneof![Just(1u32), Just(4u32), Just(32u32)],
        prop::bool::weighted(0.7),
        any::<u64>(),
        prop::collection::vec(op(with_cuts), 1..max_ops),
    )
        .prop_map(|(shape, page_size, checkpoint_every, prefill, seed, ops)| Case {
            shape,
            page_size,
            checkpoint_every,
            prefill,
            seed,
            ops,
        })
}

/// Mostly 16 blocks of 16 pages: garbage collection runs all the time.
pub fn config(c: &Case) -> SsdConfig {
    let mut cfg = SsdConfig::small(c.page_size, c.shape.0, c.shape.1);
    cfg.checkpoint_every = c.checkpoint_every;
    cfg
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub ops: u64,
    pub cuts: u64,
    pub recovery_cuts: u64,
    pub fell_back: u64,
    pub no_space: u64,
    pub commits: u64,
    pub gc_runs: u64,
    pub checkpoints: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.cuts += o.cuts;
        self.recovery_cuts += o.recovery_cuts;
        self.fell_back += o.fell_back;
        self.no_space += o.no_space;
        self.commits += o.commits;
        self.gc_runs += o.gc_runs;
        self.checkpoints += o.checkpoints;
    }
}

/// The reference model. `current` is the committed state (what `read` returns);
/// `durable` the state at the last acknowledged flush or commit, and `history` the changes
/// to the committed state since then, one entry per write, trim or commit (a commit's entry
/// holds all its pages).
pub struct Model {
    pub durable: Vec<u64>,
    pub history: Vec<Vec<(usize, u64)>>,
    pub current: Vec<u64>,
    pub txs: BTreeMap<u8, BTreeMap<usize, u64>>,
    pub next_tag: u64,
}

impl Model {
    pub fn new(pages: usize) -> Model {
        Model {
            durable: vec![0; pages],
            history: Vec::new(),
            current: vec![0; pages],
            txs: BTreeMap::new(),
            next_tag: 1,
        }
    }

    pub fn change(&mut self, ev: Vec<(usize, u64)>) {
        for &(l, v) in &ev {
            self.current[l] = v;
        }
        self.history.push(ev);
    }

    pub fn sync(&mut self) {
        self.durable.clone_from(&self.current);
        self.history.clear();
    }

    /// Is `got` the durable state plus some prefix of the history?
    pub fn check_prefix(&self, got: &[u64]) -> Result<(), String> {
        let mut st = self.durable.clone();
        let mut diff = st.iter().zip(got).filter(|(a, b)| a != b).count();
        if diff == 0 {
            return Ok(());
        }
        for ev in &self.history {
            for &(l, v) in ev {
                if st[l] != got[l] {
                    diff -= 1;
                }
                st[l] = v;
                if st[l] != got[l] {
                    diff += 1;
                }
            }
            if diff == 0 {
                return Ok(());
            }
        }
        let bad: Vec<String> = (0..got.len())
            .filter(|&l| {
                got[l] != self.durable[l]
                    && !self.history.iter().flatten().any(|&(x, v)| x == l && v == got[l])
            })
            .take(5)
            .map(|l| format!("lpn {l} = {} (durable {})", got[l], self.durable[l]))
            .collect();
        Err(format!(
            "recovered state is not the durable state plus a prefix of the {} later changes; \
             values never allowed: {bad:?}",
            self.history.len()
        ))
    }
}

fn read_tag(ssd: &mut Ssd, tx: Option<u64>, lpn: u64) -> Result<Result<u64, String>, FlashError> {
    let mut buf = vec![0u8; ssd.page_size()];
    match tx {
        Some(t) => ssd.read_tx(t, lpn, &mut buf)?,
        None => ssd.read(lpn, &mut buf)?,
    }
    Ok(tag_of(&buf, lpn))
}

/// Runs a case against the model. Without cuts every read is checked exactly; with cuts,
/// after every restart the whole drive must equal the durable state plus a prefix of the
/// later changes (so: committed transactions all or nothing and present if acknowledged,
/// uncommitted ones absent, every page either its durable value or a later one).
/// `consistency` also checks the FTL's DRAM invariants after every operation.
pub fn run(cfg: SsdConfig, c: &Case, consistency: bool) -> Result<Stats, String> {
    let mut ssd = Ssd::new(cfg).map_err(|e| format!("new: {e}"))?;
    let ps = ssd.page_size();
    let pages = ssd.logical_pages() as usize;
    let mut m = Model::new(pages);
    let mut rng = SmallRng::seed_from_u64(c.seed);
    let mut st = Stats::default();
    if c.prefill {
        for l in 0..pages {
            let tag = m.next_tag;
            m.next_tag += 1;
            ssd.write(l as u64, &page(ps, l as u64, tag))
                .map_err(|e| format!("prefill: {e}"))?;
            m.change(vec![(l, tag)]);
        }
        ssd.flush().map_err(|e| format!("prefill flush: {e}"))?;
        m.sync();
    }
    for (i, op) in c.ops.iter().enumerate() {
        st.ops += 1;
        let at = |e: String| format!("op {i} {op:?}: {e}");
        step(&mut ssd, &mut m, op, &mut rng, &mut st).map_err(at)?;
        if consistency && ssd.is_powered() {
            ssd.check_consistency()
                .map_err(|e| at(format!("inconsistent FTL: {e}")))?;
        }
        if !ssd.is_powered() {
            ssd = recover(ssd, &mut m, &mut rng, &mut st).map_err(at)?;
            if consistency {
                ssd.check_consistency()
                    .map_err(|e| at(format!("inconsistent FTL after restart: {e}")))?;
            }
        }
    }
    // Everything still matches; then a final cut.
    ssd.cancel_power_cut();
    for l in 0..pages {
        let got = read_tag(&mut ssd, None, l as u64).map_err(|e| format!("final read: {e}"))??;
        if got != m.current[l] {
            return Err(format!("final: lpn {l} reads {got}, model {}", m.current[l]));
        }
    }
    for (&t, e) in &m.txs {
        for (&l, &v) in e {
            let got =
                read_tag(&mut ssd, Some(t as u64), l as u64).map_err(|e| format!("final read_tx: {e}"))??;
            if got != v {
                return Err(format!("final: tx {t} lpn {l} reads {got}, model {v}"));
            }
        }
    }
    if ssd.active_txs() != m.txs.len() {
        return Err(format!(
            "drive has {} active txs, model {}",
            ssd.active_txs(),
            m.txs.len()
        ));
    }
    let counters = ssd.counters();
    st.gc_runs = counters.gc_runs;
    st.checkpoints = counters.checkpoints;
    ssd.power_cut_now();
    recover(ssd, &mut m, &mut rng, &mut st)?;
    Ok(st)
}

fn step(ssd: &mut Ssd, m: &mut Model, op: &Op, rng: &mut SmallRng, st: &mut Stats) -> Result<(), String> {
    let ps = ssd.page_size();
    let pages = m.current.len();
    let lp = |l: u16| l as usize % pages;
    let check_read = |got: Result<Result<u64, String>, FlashError>, want: u64| -> Result<(), String> {
        match got {
            Ok(Ok(tag)) if tag == want => Ok(()),
            Ok(Ok(tag)) => Err(format!("read {tag}, model {want}")),
            Ok(Err(garbage)) => Err(garbage),
            Err(FlashError::PowerLost) => Ok(()),
            Err(e) => Err(format!("read failed: {e}")),
        }
    };
    match *op {
        Op::Write(l) | Op::Trim(l) => {
            let l = lp(l);
            let tag = if matches!(op, Op::Write(_)) {
                m.next_tag += 1;
                m.next_tag - 1
            } else {
                0
            };
            let r = if tag == 0 {
                ssd.trim(l as u64)
            } else {
                ssd.write(l as u64, &page(ps, l as u64, tag))
            };
            match r {
                // A write cut short may still have reached flash: it counts as a later change.
                Ok(()) | Err(FlashError::PowerLost) => m.change(vec![(l, tag)]),
                Err(FlashError::NoSpace) => st.no_space += 1,
                Err(e) => return Err(format!("{e}")),
            }
        }
        Op::Flush => match ssd.flush() {
            Ok(()) => m.sync(),
            Err(FlashError::PowerLost) => {}
            Err(e) => return Err(format!("{e}")),
        },
        Op::Read(l) => {
            let l = lp(l);
            check_read(read_tag(ssd, None, l as u64), m.current[l])?;
        }
        Op::WriteTx(t, l) => {
            let l = lp(l);
            let tag = m.next_tag;
            m.next_tag += 1;
            match ssd.write_tx(t as u64, l as u64, &page(ps, l as u64, tag)) {
                Ok(()) => {
                    m.txs.entry(t).or_default().insert(l, tag);
                }
                Err(FlashError::PowerLost) => {}
                Err(FlashError::NoSpace) => st.no_space += 1,
                Err(e) => return Err(format!("{e}")),
            }
        }
        Op::ReadTx(t, l) => {
            let l = lp(l);
            let want = m
                .txs
                .get(&t)
                .and_then(|e| e.get(&l))
                .copied()
                .unwrap_or(m.current[l]);
            check_read(read_tag(ssd, Some(t as u64), l as u64), want)?;
        }
        Op::Commit(t) => {
            let ev: Vec<(usize, u64)> = m
                .txs
                .remove(&t)
                .map(|e| e.into_iter().collect())
                .unwrap_or_default();
            let r = ssd.commit(t as u64);
            if r.is_ok() || matches!(r, Err(FlashError::PowerLost)) {
                st.commits += 1;
                if !ev.is_empty() {
                    m.change(ev);
                }
            }
            match r {
                Ok(()) => m.sync(),
                Err(FlashError::PowerLost) => {}
                Err(e) => return Err(format!("{e}")),
            }
        }
        Op::Abort(t) => {
            match ssd.abort(t as u64) {
                Ok(()) => {}
                Err(FlashError::PowerLost) => {}
                Err(e) => return Err(format!("{e}")),
            }
            m.txs.remove(&t);
        }
        Op::Cut(n) => {
            ssd.schedule_power_cut(n as u64, rng.random());
        }
    }
    Ok(())
}

/// Restarts (sometimes with another cut during recovery), then checks the whole drive
/// against the model and continues from what survived.
fn recover(mut ssd: Ssd, m: &mut Model, rng: &mut SmallRng, st: &mut Stats) -> Result<Ssd, String> {
    st.cuts += 1;
    if rng.random_bool(0.3) {
        ssd.schedule_power_cut(rng.random_range(1..12), rng.random());
    }
    loop {
        let (s, rec) = ssd.restart().map_err(|e| format!("restart failed: {e}"))?;
        ssd = s;
        if rec.fell_back {
            st.fell_back += 1;
        }
        if rec.data_pages_read != 0 {
            return Err(format!("recovery read {} data pages", rec.data_pages_read));
        }
        if ssd.is_powered() {
            break;
        }
        st.recovery_cuts += 1;
    }
    ssd.cancel_power_cut();
    if ssd.active_txs() != 0 {
        return Err("transactions survived a restart".into());
    }
    let pages = m.current.len();
    let mut got = vec![0u64; pages];
    for (l, g) in got.iter_mut().enumerate() {
        *g = read_tag(&mut ssd, None, l as u64).map_err(|e| format!("after restart: {e}"))??;
    }
    m.check_prefix(&got)?;
    m.current.clone_from(&got);
    m.sync();
    m.txs.clear();
    Ok(ssd)
}
