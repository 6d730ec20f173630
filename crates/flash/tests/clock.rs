//! The whole clock: host commands complete at link speed into the drive's write cache while
//! NAND programs run behind them, flushes and commits wait for the cache to drain, host
//! software time overlaps queued programs, a full cache makes writes wait, the host's time
//! adds up to its parts, a power cut drops the backlog from the clock, and no NAND count
//! depends on the clock model.

mod small_fs;
mod support;

use onesync_flash::hostfs::{FlashFs, FsConfig, HostCosts, Journaling};
use onesync_flash::{Counters, Ssd, SsdConfig, Timing};
use support::page;

const PS: f64 = 8192.0;

/// Per-page times of the default drive: (link transfer, NAND program incl. bus transfer).
fn page_times(t: &Timing) -> (f64, f64) {
    let link = PS / t.host_mb_per_s;
    let program = (PS + 436.0) / t.bus_mb_per_s + t.program_us;
    (link, program)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn write(ssd: &mut Ssd, lpn: u64) {
    let p = page(ssd.page_size(), lpn, lpn + 1);
    ssd.write(lpn, &p).unwrap();
}

/// A drive whose first checkpoint is already written, so a flush writes one log page.
fn warm_drive(timing: Timing) -> Ssd {
    let cfg = SsdConfig {
        timing,
        ..SsdConfig::default()
    };
    let mut ssd = Ssd::new(cfg).unwrap();
    write(&mut ssd, 0);
    ssd.flush().unwrap();
    ssd
}

#[test]
fn a_write_into_an_empty_cache_completes_at_link_speed() {
    let t = Timing::default();
    let (link, program) = page_times(&t);
    let mut ssd = warm_drive(t.clone());
    assert!(
        close(ssd.now_us(), ssd.nand_now_us()),
        "the flush drained the cache"
    );
    let start = ssd.now_us();
    write(&mut ssd, 1);
    assert!(
        close(ssd.now_us() - start, t.command_us + link),
        "{}",
        ssd.now_us() - start
    );
    assert!(
        close(ssd.nand_now_us() - ssd.now_us(), program),
        "the program runs behind it"
    );
}

#[test]
fn a_flush_waits_for_queued_programs() {
    let t = Timing::default();
    let (link, program) = page_times(&t);
    let mut ssd = warm_drive(t.clone());
    let before = ssd.counters();
    let start = ssd.now_us();
    for lpn in 1..=10 {
        write(&mut ssd, lpn);
    }
    // The host handed over ten pages at link speed; the array is far behind.
    assert!(close(ssd.now_us() - start, 10.0 * (t.command_us + link)));
    ssd.flush().unwrap();
    // Programs are serial and start when their page arrives: the first at command + link,
    // the rest back to back; then the flush's log page.
    let drained = start + t.command_us + link + 10.0 * program;
    let flushed = drained + program;
    assert!(close(ssd.now_us(), flushed), "{} vs {flushed}", ssd.now_us());
    assert!(close(ssd.now_us(), ssd.nand_now_us()));
    let d = ssd.counters().since(&before);
    let flush_started = start + 10.0 * (t.command_us + link) + t.command_us;
    assert!(close(d.flush_wait_us, flushed - flush_started), "{d:?}");
    assert_eq!(d.nand_programs, 11);
    assert!(close(d.nand_busy_us, 11.0 * program));
}

#[test]
fn host_software_overlaps_queued_programs() {
    let t = Timing::default();
    let (_, program) = page_times(&t);
    let mut ssd = warm_drive(t.clone());
    write(&mut ssd, 1);
    // The host computes for longer than the program takes: the flush waits for its own log
    // page only.
    ssd.host_compute(2.0 * program);
    let before = ssd.counters();
    ssd.flush().unwrap();
    let d = ssd.counters().since(&before);
    assert!(close(d.flush_wait_us, program), "{d:?}");
}

#[test]
fn a_full_cache_makes_writes_wait() {
    let t = Timing {
        write_cache_bytes: 2 * 8192,
        ..Timing::default()
    };
    let (link, program) = page_times(&t);
    let mut ssd = warm_drive(t.clone());
    let before = ssd.counters();
    let start = ssd.now_us();
    for lpn in 1..=6 {
        write(&mut ssd, lpn);
    }
    let d = ssd.counters().since(&before);
    assert!(d.io_wait_us > 0.0, "{d:?}");
    // Two pages in the cache: the sixth write waits until the fourth program has finished.
    let fourth_done = start + t.command_us + link + 4.0 * program;
    assert!(
        close(ssd.now_us(), fourth_done),
        "{} vs {fourth_done}",
        ssd.now_us()
    );
}

#[test]
fn write_through_waits_for_every_program() {
    let t = Timing {
        write_cache_bytes: 0,
        ..Timing::default()
    };
    let (link, program) = page_times(&t);
    let mut ssd = warm_drive(t.clone());
    let start = ssd.now_us();
    write(&mut ssd, 1);
    assert!(close(ssd.now_us() - start, t.command_us + link + program));
}

/// A workload touching every command, reads, GC (a small drive) and a restart.
fn workload(timing: Timing) -> (Counters, f64) {
    let mut cfg = SsdConfig::small(8192, 16, 24);
    cfg.timing = timing;
    let mut ssd = Ssd::new(cfg).unwrap();
    let n = ssd.logical_pages();
    let mut buf = vec![0u8; 8192];
    for i in 0..3000u64 {
        let lpn = (i * 7) % n;
        match i % 9 {
            0 => ssd.flush().unwrap(),
            1 => ssd.read(lpn, &mut buf).unwrap(),
            2 => ssd.trim(lpn).unwrap(),
            3 | 4 => {
                let p = page(8192, lpn, i);
                ssd.write_tx(1 + i / 9, lpn, &p).unwrap();
            }
            5 => ssd.commit(1 + i / 9).unwrap(),
            6 => ssd.host_compute(300.0),
            _ => write(&mut ssd, lpn),
        }
        if i == 1500 {
            ssd = ssd.restart().unwrap().0;
        }
    }
    (ssd.counters(), ssd.now_us())
}

#[test]
fn the_hosts_time_adds_up_to_its_parts() {
    for timing in [Timing::default(), Timing::nand_only()] {
        let (c, now) = workload(timing);
        assert!(
            close(c.host_elapsed_us(), now),
            "{} vs {now}",
            c.host_elapsed_us()
        );
        assert!(c.gc_runs > 0 && c.host_reads > 0);
    }
}

#[test]
fn nand_counts_do_not_depend_on_the_clock() {
    let (whole, whole_now) = workload(Timing::default());
    let (nand, nand_now) = workload(Timing::nand_only());
    let strip = |c: &Counters| Counters {
        host_cpu_us: 0.0,
        link_us: 0.0,
        flush_wait_us: 0.0,
        io_wait_us: 0.0,
        nand_busy_us: 0.0,
        ..c.clone()
    };
    assert_eq!(strip(&whole), strip(&nand));
    assert!(close(whole.nand_busy_us, nand.nand_busy_us));
    assert!(whole_now != nand_now);
    // On the NAND-only clock the host never overlaps the array: its time is its own
    // software (here only `host_compute`), link transfers and NAND work.
    assert!(
        close(nand_now, nand.host_cpu_us + nand.link_us + nand.nand_busy_us),
        "{nand:?}"
    );
}

#[test]
fn greedy_style_flushes_write_the_whole_mapping() {
    let cfg = SsdConfig {
        flush_checkpoints: true,
        ..SsdConfig::default()
    };
    let mut ssd = Ssd::new(cfg).unwrap();
    for lpn in 0..5 {
        write(&mut ssd, lpn);
        ssd.flush().unwrap();
    }
    ssd.flush().unwrap();
    let c = ssd.counters();
    assert_eq!(c.checkpoints, 6, "one per flush, changes or not");
    assert_eq!(c.log_records, 0);
    let (mut ssd, _) = ssd.restart().unwrap();
    let mut buf = vec![0u8; 8192];
    for lpn in 0..5 {
        ssd.read(lpn, &mut buf).unwrap();
        assert_eq!(buf, page(8192, lpn, lpn + 1));
    }
}

#[test]
fn the_filesystem_charges_its_system_calls_and_journal_handoffs() {
    let host = HostCosts {
        syscall_us: 5.0,
        journal_handoff_us: 7.0,
    };
    for (mode, handoffs) in [(Journaling::Ordered, 1.0), (Journaling::XFtl, 0.0)] {
        let cfg = FsConfig {
            host,
            ..small_fs::config(mode)
        };
        let mut fs = FlashFs::format(small_fs::small_drive(), cfg).unwrap();
        let id = fs.open("a", true).unwrap();
        let before = fs.ssd().counters();
        fs.write(id, 0, &[1u8; 100]).unwrap();
        let d = fs.ssd().counters().since(&before);
        assert!(
            close(d.host_cpu_us, 5.0),
            "a cached write is one system call: {d:?}"
        );
        let before = fs.ssd().counters();
        fs.fsync(id).unwrap();
        let d = fs.ssd().counters().since(&before);
        let commands = (d.host_writes + d.host_reads + d.host_trims + d.host_flushes + d.tx_commits) as f64;
        let want = 5.0 + 7.0 * handoffs + commands * Timing::default().command_us;
        assert!(close(d.host_cpu_us, want), "{mode:?}: {d:?}, want {want}");
    }
}

#[test]
fn a_power_cut_drops_the_caches_backlog_from_the_clock() {
    let mut ssd = warm_drive(Timing::default());
    for lpn in 1..=10 {
        write(&mut ssd, lpn);
    }
    let lost_at = ssd.now_us();
    assert!(ssd.nand_now_us() > lost_at + 9_000.0, "ten programs queued");
    ssd.power_cut_now();
    let (ssd, rec) = ssd.restart().unwrap();
    // The restart starts when the host lost the drive, not when the backlog would have ended.
    assert!(
        close(ssd.now_us(), lost_at + rec.sim_us),
        "{} vs {lost_at} + {}",
        ssd.now_us(),
        rec.sim_us
    );
    assert!(close(ssd.now_us(), ssd.nand_now_us()));
}
