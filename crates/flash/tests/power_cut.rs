//! Power cuts at random NAND operations (during host writes, garbage collection, flushes,
//! commits, checkpoints, and recovery itself), several per case: after every restart the
//! drive must hold the durable state plus a prefix of the later changes — every page its
//! last durable value or a later written one, committed transactions all or nothing and
//! present if their commit returned, uncommitted transactions absent. And the negative
//! control: with `Sabotage::GcErasesActiveOldCopies` the same property must fail.
//! `ONESYNC_FLASH_CASES` sets the number of cases (default 3000; the negative control runs
//! at most that many, at least 500, and stops at the first violation).

mod support;

use onesync_flash::Sabotage;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};
use support::{case, cases, config, run, Stats};

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(3000), ..ProptestConfig::default() })]

    #[test]
    fn recovery_keeps_a_durable_prefix(c in case(true, 1200)) {
        run(config(&c), &c, false).map_err(TestCaseError::fail)?;
    }
}

/// The cases above do exercise what they claim: cuts, cuts during recovery, torn
/// checkpoints, garbage collection, commits, checkpoints (thresholds per case, about a third
/// of what a case averages).
#[test]
fn power_cut_cases_cover_the_interesting_paths() {
    let n = cases(300).min(300);
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    });
    let total = std::cell::RefCell::new(Stats::default());
    runner
        .run(&case(true, 1200), |c| {
            let st = run(config(&c), &c, true).map_err(TestCaseError::fail)?;
            total.borrow_mut().add(&st);
            Ok(())
        })
        .unwrap();
    let t = total.into_inner();
    let n = n as u64;
    eprintln!("{n} cases: {t:?}");
    assert!(t.cuts >= 3 * n, "{t:?}");
    assert!(t.recovery_cuts >= n / 2, "{t:?}");
    assert!(t.fell_back >= n / 5, "{t:?}");
    assert!(t.gc_runs >= 10 * n, "{t:?}");
    assert!(t.commits >= 10 * n, "{t:?}");
    assert!(t.checkpoints >= 10 * n, "{t:?}");
}

/// Negative control: if GC may erase the old copy of a page an active transaction wrote,
/// the same property fails.
#[test]
fn sabotaged_gc_is_caught() {
    let n = cases(3000).max(500);
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        max_shrink_iters: 0,
        ..Config::default()
    });
    let tried = std::cell::Cell::new(0u32);
    let result = runner.run(&case(true, 1200), |c| {
        tried.set(tried.get() + 1);
        let mut cfg = config(&c);
        cfg.sabotage = Some(Sabotage::GcErasesActiveOldCopies);
        run(cfg, &c, false).map(|_| ()).map_err(TestCaseError::fail)
    });
    match result {
        Err(TestError::Fail(why, c)) => eprintln!(
            "caught in case {}, as it should be: {why} ({} ops)",
            tried.get(),
            c.ops.len()
        ),
        other => panic!("the sabotaged FTL passed {n} cases: {other:?}"),
    }
}
