//! Unit tests of the drive: GC counters and WAF, erase counts, the clock, recovery cost and
//! what it reads, X-FTL semantics, GC and active transactions, atomic multi-page commits
//! under a cut at every NAND operation, and host misuse.

mod support;

use onesync_flash::{FlashError, Geometry, Recovery, Sabotage, Ssd, SsdConfig, Timing};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use support::{page, tag_of};

fn small() -> SsdConfig {
    SsdConfig::small(256, 16, 16)
}

fn write(ssd: &mut Ssd, lpn: u64, tag: u64) {
    let p = page(ssd.page_size(), lpn, tag);
    ssd.write(lpn, &p).unwrap();
}

fn write_tx(ssd: &mut Ssd, tx: u64, lpn: u64, tag: u64) -> Result<(), FlashError> {
    let p = page(ssd.page_size(), lpn, tag);
    ssd.write_tx(tx, lpn, &p)
}

fn read(ssd: &mut Ssd, lpn: u64) -> Result<u64, String> {
    let mut b = vec![0u8; ssd.page_size()];
    ssd.read(lpn, &mut b).map_err(|e| e.to_string())?;
    tag_of(&b, lpn)
}

fn read_tx(ssd: &mut Ssd, tx: u64, lpn: u64) -> Result<u64, String> {
    let mut b = vec![0u8; ssd.page_size()];
    ssd.read_tx(tx, lpn, &mut b).map_err(|e| e.to_string())?;
    tag_of(&b, lpn)
}

fn restart(ssd: Ssd) -> (Ssd, Recovery) {
    let (ssd, rec) = ssd.restart().expect("restart");
    assert!(ssd.is_powered());
    (ssd, rec)
}

fn fill(ssd: &mut Ssd) {
    for l in 0..ssd.logical_pages() {
        write(ssd, l, 1000 + l);
    }
    ssd.flush().unwrap();
}

#[test]
fn gc_counters_and_erase_counts_add_up() {
    let mut ssd = Ssd::new(small()).unwrap();
    fill(&mut ssd);
    let before = ssd.counters();
    let mut rng = SmallRng::seed_from_u64(1);
    let n = ssd.logical_pages();
    for i in 0..5000u64 {
        write(&mut ssd, rng.random_range(0..n), 10_000 + i);
        if i % 50 == 0 {
            ssd.flush().unwrap();
        }
    }
    let c = ssd.counters();
    let d = c.since(&before);
    assert!(d.gc_runs > 200, "{d:?}");
    assert_eq!(d.host_writes, 5000);
    // Every victim's valid pages were copied, and its ratio counted.
    assert_eq!((d.gc_valid_ratio_sum * 16.0).round() as u64, d.gc_pages_copied);
    let mean = d.gc_mean_valid_ratio();
    assert!(mean > 0.05 && mean < 0.95, "mean valid ratio {mean}");
    // Programs are host data, GC copies and metadata; nothing else.
    assert_eq!(
        c.nand_programs,
        c.host_writes + c.gc_pages_copied + c.nand_meta_programs
    );
    assert!((d.waf() - d.nand_programs as f64 / 5000.0).abs() < 1e-12);
    assert!(
        d.waf() > 1.0 + mean,
        "WAF {} with mean valid ratio {mean}",
        d.waf()
    );
    // A fresh drive's data blocks start erased: every data erase is a GC victim.
    assert_eq!(c.nand_erases, c.gc_runs + c.nand_meta_erases);
    let per_block = ssd.block_erase_counts();
    assert_eq!(per_block.iter().map(|&e| e as u64).sum::<u64>(), c.nand_erases);
    assert!(
        per_block[4..].iter().all(|&e| e > 0),
        "every data block was reused: {per_block:?}"
    );
    ssd.check_consistency().unwrap();
}

#[test]
fn sequential_overwrites_copy_nothing() {
    let mut ssd = Ssd::new(small()).unwrap();
    let n = ssd.logical_pages();
    for round in 0..10 {
        for l in 0..n {
            write(&mut ssd, l, round * 1000 + l + 1);
        }
    }
    let c = ssd.counters();
    assert!(c.gc_runs > 30);
    assert_eq!(c.gc_pages_copied, 0);
    assert_eq!(c.gc_valid_ratio_sum, 0.0);
    assert_eq!(c.nand_programs, c.host_writes + c.nand_meta_programs);
}

#[test]
fn more_over_provisioning_means_less_write_amplification() {
    let waf = |op: f64| {
        let mut cfg = small();
        cfg.geometry = Geometry {
            blocks: 64,
            over_provisioning: op,
            ..cfg.geometry
        };
        cfg.geometry.meta_blocks = cfg.geometry.required_meta_blocks().unwrap();
        let mut ssd = Ssd::new(cfg).unwrap();
        fill(&mut ssd);
        let before = ssd.counters();
        let mut rng = SmallRng::seed_from_u64(7);
        let n = ssd.logical_pages();
        for i in 0..20_000 {
            write(&mut ssd, rng.random_range(0..n), i + 1);
        }
        ssd.counters().since(&before)
    };
    let (lo, hi) = (waf(0.15), waf(0.4));
    assert!(lo.waf() > hi.waf() + 0.3, "OP 15%: {lo:?}\nOP 40%: {hi:?}");
    assert!(lo.gc_mean_valid_ratio() > hi.gc_mean_valid_ratio());
}

#[test]
fn clock_follows_the_datasheet() {
    // The NAND-only clock: every operation serial, no cache, no host cost (`tests/clock.rs`
    // checks the whole clock).
    let cfg = SsdConfig {
        timing: Timing::nand_only(),
        ..SsdConfig::default()
    };
    let t = cfg.timing.clone();
    let xfer = (8192.0 + 436.0) / 40.0;
    let host = 8192.0 / 300.0;
    let prog = xfer + t.program_us;
    let rd = t.read_us + xfer;
    let mut ssd = Ssd::new(cfg).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    write(&mut ssd, 0, 1);
    assert!(close(ssd.now_us(), host + prog), "{}", ssd.now_us());
    let mut now = ssd.now_us();
    read(&mut ssd, 0).unwrap();
    assert!(close(ssd.now_us() - now, rd + host));
    now = ssd.now_us();
    assert_eq!(read(&mut ssd, 1).unwrap(), 0);
    assert!(
        close(ssd.now_us() - now, host),
        "an unmapped read touches no NAND"
    );
    now = ssd.now_us();
    ssd.trim(5).unwrap(); // unmapped already: nothing changes
    assert_eq!(ssd.now_us(), now);
    // The first flush (here an empty commit) writes the first checkpoint (its region is
    // factory-erased).
    let c0 = ssd.counters();
    ssd.commit(3).unwrap();
    let d = ssd.counters().since(&c0);
    assert_eq!(d.checkpoints, 1);
    assert_eq!(d.nand_erases, 0);
    let pages = ((ssd.logical_pages() as f64) / ((8192.0 - 72.0) / 4.0)).ceil() as u64;
    assert_eq!(d.nand_meta_programs, pages);
    assert!(close(ssd.now_us() - now, pages as f64 * prog));
    // A write and a flush: one data page, one log page.
    now = ssd.now_us();
    write(&mut ssd, 1, 2);
    ssd.flush().unwrap();
    assert!(close(ssd.now_us() - now, host + 2.0 * prog));
    // A two-page transaction commits with one log page.
    now = ssd.now_us();
    write_tx(&mut ssd, 9, 2, 3).unwrap();
    write_tx(&mut ssd, 9, 3, 4).unwrap();
    ssd.commit(9).unwrap();
    assert!(close(ssd.now_us() - now, 2.0 * (host + prog) + prog));
}

#[test]
fn recovery_reads_only_the_metadata_area_and_costs_what_it_reads() {
    let cost = |every: u32| {
        let cfg = SsdConfig {
            checkpoint_every: every,
            ..SsdConfig::default()
        };
        let mut ssd = Ssd::new(cfg).unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        for i in 0..3000 {
            write(&mut ssd, rng.random_range(0..4000), i + 1);
            if i % 7 == 0 {
                ssd.flush().unwrap();
            }
        }
        ssd.flush().unwrap();
        let before = ssd.counters();
        ssd.power_cut_now();
        let (mut ssd, rec) = restart(ssd);
        let d = ssd.counters().since(&before);
        assert_eq!(rec.data_pages_read, 0, "{rec:?}");
        assert_eq!(rec.pages_read, rec.meta_pages_read);
        assert_eq!(d.nand_reads, rec.pages_read);
        assert_eq!(d.nand_meta_reads, rec.pages_read);
        assert_eq!(d.nand_programs + d.nand_erases, 0, "recovery only reads");
        let rd = 60.0 + (8192.0 + 436.0) / 40.0;
        assert!((rec.sim_us - rec.pages_read as f64 * rd).abs() < 1e-6);
        // Two region heads, the rest of one checkpoint, the log since it, one page past its end.
        let ckpt = ((ssd.logical_pages() as f64) / ((8192.0 - 72.0) / 4.0)).ceil() as u64;
        assert_eq!(rec.pages_read, 2 + (ckpt - 1) + rec.log_pages + 1, "{rec:?}");
        assert!(rec.log_pages <= every as u64, "{rec:?}");
        assert!(rec.mapped_pages > 2000);
        assert!(rec.checkpoint_generation > 1);
        ssd.check_consistency().unwrap();
        let _ = read(&mut ssd, 0).unwrap();
        rec
    };
    let (a, b) = (cost(4), cost(64));
    assert!(a.pages_read < b.pages_read, "{a:?}\n{b:?}");
    assert!(b.sim_us < 30_000.0, "restart takes {} ms", b.sim_us / 1000.0);
    // A factory-fresh drive: the two region heads only.
    let (_, rec) = restart(Ssd::new(SsdConfig::default()).unwrap());
    assert_eq!(rec.pages_read, 2);
    assert_eq!(rec.checkpoint_generation, 0);
}

#[test]
fn transactions_follow_x_ftl() {
    let mut ssd = Ssd::new(small()).unwrap();
    write(&mut ssd, 1, 10);
    ssd.flush().unwrap();
    write_tx(&mut ssd, 7, 1, 11).unwrap();
    assert_eq!(
        read(&mut ssd, 1).unwrap(),
        10,
        "L2P still maps the committed copy"
    );
    assert_eq!(read_tx(&mut ssd, 7, 1).unwrap(), 11, "the tx sees its own write");
    assert_eq!(
        read_tx(&mut ssd, 8, 1).unwrap(),
        10,
        "another tx sees the committed copy"
    );
    write_tx(&mut ssd, 7, 2, 12).unwrap();
    write_tx(&mut ssd, 7, 2, 13).unwrap();
    assert_eq!(ssd.active_txs(), 1);
    ssd.commit(7).unwrap();
    assert_eq!(ssd.active_txs(), 0);
    assert_eq!((read(&mut ssd, 1).unwrap(), read(&mut ssd, 2).unwrap()), (11, 13));
    write_tx(&mut ssd, 9, 1, 14).unwrap();
    ssd.abort(9).unwrap();
    assert_eq!(read(&mut ssd, 1).unwrap(), 11);
    assert_eq!(read_tx(&mut ssd, 9, 1).unwrap(), 11);
    // Unknown transactions: commit is a flush, abort a no-op.
    ssd.commit(1234).unwrap();
    ssd.abort(1234).unwrap();
    // Committed survives a cut, uncommitted does not.
    write_tx(&mut ssd, 20, 3, 15).unwrap();
    write_tx(&mut ssd, 21, 4, 16).unwrap();
    ssd.commit(21).unwrap();
    ssd.power_cut_now();
    let (mut ssd, rec) = restart(ssd);
    assert_eq!(rec.commits_applied, 2);
    assert_eq!(ssd.active_txs(), 0);
    assert_eq!(read(&mut ssd, 3).unwrap(), 0);
    assert_eq!(read(&mut ssd, 4).unwrap(), 16);
    assert_eq!((read(&mut ssd, 1).unwrap(), read(&mut ssd, 2).unwrap()), (11, 13));
    let c = ssd.counters();
    assert_eq!((c.tx_commits, c.tx_aborts), (3, 1));
    ssd.check_consistency().unwrap();
}

/// An active transaction's pages and the old copies it shadows survive heavy GC, and an abort
/// or a cut then brings back the old copies. Returns the first discrepancy.
fn gc_with_active_transaction(sabotage: Option<Sabotage>) -> Result<u64, String> {
    let mut cfg = small();
    cfg.sabotage = sabotage;
    let mut ssd = Ssd::new(cfg).unwrap();
    fill(&mut ssd);
    let n = ssd.logical_pages();
    let mut rng = SmallRng::seed_from_u64(5);
    let churn = |ssd: &mut Ssd, rng: &mut SmallRng| {
        for i in 0..1500 {
            write(ssd, rng.random_range(16..n), 50_000 + i);
        }
    };
    for l in 0..8 {
        write_tx(&mut ssd, 1, l, 2000 + l).map_err(|e| e.to_string())?;
    }
    churn(&mut ssd, &mut rng);
    for l in 0..8 {
        let (old, new) = (read(&mut ssd, l)?, read_tx(&mut ssd, 1, l)?);
        if (old, new) != (1000 + l, 2000 + l) {
            return Err(format!("during the tx lpn {l} reads {old}, tx reads {new}"));
        }
    }
    ssd.abort(1).unwrap();
    for l in 0..8 {
        if read(&mut ssd, l)? != 1000 + l {
            return Err(format!("after abort lpn {l} lost its old copy"));
        }
    }
    for l in 0..8 {
        write_tx(&mut ssd, 2, l, 3000 + l).map_err(|e| e.to_string())?;
    }
    churn(&mut ssd, &mut rng);
    ssd.flush().unwrap();
    ssd.power_cut_now();
    let (mut ssd, _) = restart(ssd);
    for l in 0..8 {
        if read(&mut ssd, l)? != 1000 + l {
            return Err(format!("after a cut lpn {l} lost its old copy"));
        }
    }
    Ok(ssd.counters().gc_runs)
}

#[test]
fn gc_keeps_what_active_transactions_need() {
    let gc_runs = gc_with_active_transaction(None).unwrap();
    assert!(gc_runs > 100, "{gc_runs} GC runs");
    // Negative control.
    let bad = gc_with_active_transaction(Some(Sabotage::GcErasesActiveOldCopies));
    assert!(bad.is_err(), "sabotaged GC went unnoticed");
}

/// Cuts a 40-page commit (6 log pages of 7 entries) at each of its NAND operations in turn;
/// returns the cut points after which the transaction was partly there.
fn torn_commits(sabotage: Option<Sabotage>) -> (usize, Vec<u64>) {
    let mut cfg = SsdConfig::small(128, 16, 16);
    cfg.sabotage = sabotage;
    cfg.checkpoint_every = 1000;
    let setup = |cfg: &SsdConfig| {
        let mut ssd = Ssd::new(cfg.clone()).unwrap();
        fill(&mut ssd);
        write(&mut ssd, 50, 7); // pending plain change, rides in the commit record
        for l in 0..40 {
            write_tx(&mut ssd, 3, l, 5000 + l).unwrap();
        }
        ssd
    };
    let mut dry = setup(&cfg);
    let before = dry.counters();
    dry.commit(3).unwrap();
    let d = dry.counters().since(&before);
    let ops = d.nand_programs + d.nand_erases + d.nand_reads;
    assert!(d.nand_meta_programs >= 6, "{d:?}");
    let mut partial = Vec::new();
    for k in 1..=ops + 1 {
        let mut ssd = setup(&cfg);
        ssd.schedule_power_cut(k, k);
        let r = ssd.commit(3);
        assert!(r.is_ok() == (k > ops), "cut at {k} of {ops}: {r:?}");
        ssd.power_cut_now();
        let (mut ssd, _) = restart(ssd);
        let new = (0..40)
            .filter(|&l| read(&mut ssd, l).unwrap() == 5000 + l)
            .count();
        let old = (0..40)
            .filter(|&l| read(&mut ssd, l).unwrap() == 1000 + l)
            .count();
        assert_eq!(new + old, 40);
        if r.is_ok() {
            assert_eq!(new, 40, "acknowledged commit lost");
            assert_eq!(read(&mut ssd, 50).unwrap(), 7);
        }
        if new != 0 && new != 40 {
            partial.push(k);
        }
    }
    (ops as usize, partial)
}

#[test]
fn multi_page_commits_are_atomic_at_every_cut() {
    let (ops, partial) = torn_commits(None);
    assert!(ops >= 6);
    assert!(partial.is_empty(), "partial commits after cuts at {partial:?}");
    // Negative control: one record per page is not atomic.
    let (_, partial) = torn_commits(Some(Sabotage::CommitNotAtomic));
    assert!(!partial.is_empty(), "non-atomic commits went unnoticed");
}

#[test]
fn a_cut_during_recovery_leaves_the_drive_off_and_restartable() {
    let mut ssd = Ssd::new(small()).unwrap();
    fill(&mut ssd);
    for k in 1..6 {
        ssd.power_cut_now();
        ssd.schedule_power_cut(k, k);
        let (s, rec) = ssd.restart().unwrap();
        assert!(rec.interrupted && !s.is_powered(), "cut {k}: {rec:?}");
        let (s, rec) = restart(s);
        assert!(!rec.interrupted);
        ssd = s;
        for l in 0..ssd.logical_pages() {
            assert_eq!(read(&mut ssd, l).unwrap(), 1000 + l);
        }
        write(&mut ssd, 0, 1000); // same content, a new mapping to persist
        ssd.flush().unwrap();
    }
}

#[test]
fn the_mapping_log_wraps_and_checkpoints_alternate() {
    let mut cfg = small();
    cfg.checkpoint_every = 10_000; // only the log's size forces checkpoints
    let mut ssd = Ssd::new(cfg).unwrap();
    let n = ssd.logical_pages();
    let mut want = vec![0u64; n as usize];
    let mut rng = SmallRng::seed_from_u64(9);
    for i in 0..3000u64 {
        let l = rng.random_range(0..n);
        write(&mut ssd, l, i + 1);
        want[l as usize] = i + 1;
        ssd.flush().unwrap();
        if i % 500 == 499 {
            ssd.power_cut_now();
            let (s, rec) = restart(ssd);
            ssd = s;
            assert!(rec.pages_read <= 2 + 3 + 2 * 16 + 1, "{rec:?}");
            for (l, &w) in want.iter().enumerate() {
                assert_eq!(read(&mut ssd, l as u64).unwrap(), w);
            }
        }
    }
    let c = ssd.counters();
    assert!(c.checkpoints > 50 && c.nand_meta_erases > 100, "{c:?}");
    ssd.check_consistency().unwrap();
}

#[test]
fn pinned_space_gives_no_space_not_a_panic() {
    let mut ssd = Ssd::new(small()).unwrap();
    fill(&mut ssd);
    let n = ssd.logical_pages();
    let mut failed = None;
    for l in 0..n {
        match write_tx(&mut ssd, 1, l, 9000 + l) {
            Ok(()) => {}
            Err(FlashError::NoSpace) => {
                failed = Some(l);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let failed = failed.expect("a transaction shadowing the whole drive cannot fit");
    ssd.check_consistency().unwrap();
    assert_eq!(read(&mut ssd, 0).unwrap(), 1000);
    ssd.abort(1).unwrap();
    // Space is back.
    for l in 0..n {
        write(&mut ssd, l, 20_000 + l);
    }
    ssd.check_consistency().unwrap();
    assert!(failed > n / 2);
}

#[test]
fn host_misuse_is_an_error() {
    let mut ssd = Ssd::new(small()).unwrap();
    let (ps, n) = (ssd.page_size(), ssd.logical_pages());
    let mut buf = vec![0u8; ps];
    assert!(matches!(
        ssd.read(n, &mut buf),
        Err(FlashError::OutOfRange { .. })
    ));
    assert!(matches!(
        ssd.write(u64::MAX, &buf),
        Err(FlashError::OutOfRange { .. })
    ));
    assert!(matches!(ssd.trim(n), Err(FlashError::OutOfRange { .. })));
    assert!(matches!(
        ssd.write_tx(1, n, &buf),
        Err(FlashError::OutOfRange { .. })
    ));
    assert!(matches!(
        ssd.read(0, &mut buf[..10]),
        Err(FlashError::BadLength { .. })
    ));
    assert!(matches!(
        ssd.write(0, &vec![0u8; ps + 1]),
        Err(FlashError::BadLength { .. })
    ));
    assert!(matches!(
        ssd.read_tx(1, 0, &mut []),
        Err(FlashError::BadLength { .. })
    ));
    assert!(matches!(ssd.write_tx(0, 0, &buf), Err(FlashError::UnknownTx(0))));
    assert!(matches!(ssd.commit(0), Err(FlashError::UnknownTx(0))));
    assert!(matches!(ssd.abort(0), Err(FlashError::UnknownTx(0))));
    assert_eq!(ssd.active_txs(), 0, "a refused write starts no transaction");
    ssd.power_cut_now();
    assert!(!ssd.is_powered());
    assert!(matches!(ssd.read(0, &mut buf), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.write(0, &buf), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.trim(0), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.flush(), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.read_tx(1, 0, &mut buf), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.write_tx(1, 0, &buf), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.commit(1), Err(FlashError::PowerLost)));
    assert!(matches!(ssd.abort(1), Err(FlashError::PowerLost)));
    let (mut ssd, _) = restart(ssd);
    ssd.write(0, &buf).unwrap();
    // Configurations that cannot work are refused.
    let mut cfg = small();
    cfg.geometry.over_provisioning = 0.01;
    assert!(matches!(Ssd::new(cfg), Err(FlashError::BadConfig(_))));
    let mut cfg = small();
    cfg.geometry.meta_blocks = 3;
    assert!(matches!(Ssd::new(cfg), Err(FlashError::BadConfig(_))));
    let mut cfg = small();
    cfg.timing.bus_mb_per_s = 0.0;
    assert!(matches!(Ssd::new(cfg), Err(FlashError::BadConfig(_))));
    let mut cfg = small();
    cfg.checkpoint_every = 0;
    assert!(matches!(Ssd::new(cfg), Err(FlashError::BadConfig(_))));
}

#[test]
fn paper_sized_drives_work() {
    for mib in [64u64, 256] {
        let cfg = SsdConfig::with_capacity_mib(mib);
        assert_eq!(cfg.geometry.blocks as u64, mib);
        assert_eq!(cfg.geometry.physical_bytes(), mib << 20);
        let mut ssd = Ssd::new(cfg).unwrap();
        let n = ssd.logical_pages();
        assert_eq!(n, ((mib - 4) as f64 * 128.0 * 0.93).floor() as u64);
        let mut rng = SmallRng::seed_from_u64(mib);
        for i in 0..3 * n {
            write(&mut ssd, rng.random_range(0..n), i + 1);
            if i % 10 == 0 {
                ssd.flush().unwrap();
            }
        }
        let c = ssd.counters();
        assert!(c.gc_runs > 0 && c.waf() > 1.0, "{c:?}");
        ssd.power_cut_now();
        let (ssd, rec) = restart(ssd);
        assert!(rec.pages_read < 60, "{rec:?}");
        ssd.check_consistency().unwrap();
    }
}
