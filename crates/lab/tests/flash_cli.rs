//! Smoke tests of `onesync-lab flash`: short runs of each experiment and of the X-FTL power-cut
//! torture, checking the JSON shape and the few relations that must hold in any run (the
//! times split into host CPU, link, flush and other waits on both clock models).

use serde_json::Value;

mod common;

use common::{json, onesync, results, said};

#[test]
fn partsupp_xftl_writes_fewer_nand_pages_than_wal_and_rbj() {
    let out = onesync(&[
        "flash", "partsupp", "--txns", "150", "--pages", "20", "--json", "-",
    ]);
    let rows = results(&out);
    let get = |mode: &str| rows.iter().find(|r| r["mode"] == mode).expect("mode row").clone();
    for r in &rows {
        for key in [
            "sim_ms",
            "host_writes",
            "nand_programs",
            "nand_erases",
            "gc_runs",
            "waf",
            "param",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
    }
    let (rbj, wal, xftl) = (get("rbj"), get("wal"), get("xftl"));
    let programs = |r: &Value| r["nand_programs"].as_f64().unwrap();
    let time = |r: &Value| r["sim_ms"].as_f64().unwrap();
    assert!(
        programs(&xftl) < programs(&wal) && programs(&wal) < programs(&rbj),
        "{}",
        said(&out)
    );
    assert!(
        time(&xftl) < time(&wal) && time(&wal) < time(&rbj),
        "{}",
        said(&out)
    );
}

#[test]
fn fio_and_restart_run() {
    let out = onesync(&[
        "flash",
        "fio",
        "--pages-per-fsync",
        "1",
        "--writes",
        "200",
        "--file-mib",
        "4",
        "--json",
        "-",
    ]);
    let rows = results(&out);
    let iops = |mode: &str| {
        rows.iter().find(|r| r["mode"] == mode).unwrap()["per_sec"]
            .as_f64()
            .unwrap()
    };
    assert!(
        iops("xftl") > iops("ordered") && iops("ordered") > iops("data"),
        "{}",
        said(&out)
    );

    let out = onesync(&["flash", "restart", "--txns", "40", "--json", "-"]);
    let rows = results(&out);
    let sqlite_ms = |mode: &str| {
        rows.iter().find(|r| r["mode"] == mode).unwrap()["restart"]["sqlite_ms"]
            .as_f64()
            .unwrap()
    };
    assert!(
        sqlite_ms("xftl") < sqlite_ms("rbj") && sqlite_ms("xftl") < sqlite_ms("wal"),
        "{}",
        said(&out)
    );
}

#[test]
fn xftl_survives_power_cuts() {
    let out = onesync(&[
        "flash",
        "torture",
        "--power-cuts",
        "150",
        "--seed",
        "5",
        "--json",
        "-",
    ]);
    let v: Value = json(&out);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(v["failures"], 0, "{}", said(&out));
    assert_eq!(v["power_cuts"], 150, "{}", said(&out));
    assert!(
        v["transfers_acknowledged"].as_u64().unwrap() > 0,
        "{}",
        said(&out)
    );
}

#[test]
fn partsupp_times_split_into_their_parts_on_both_clocks() {
    for clock in ["whole", "nand"] {
        let out = onesync(&[
            "flash", "partsupp", "--txns", "40", "--pages", "5", "--mode", "wal,xftl", "--clock", clock,
            "--json", "-",
        ]);
        for r in results(&out) {
            let ms = |key: &str| r[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {r}"));
            assert_eq!(r["clock"], clock, "{}", said(&out));
            let parts = ms("host_cpu_ms") + ms("link_ms") + ms("flush_wait_ms") + ms("io_wait_ms");
            assert!((parts - ms("sim_ms")).abs() < 1e-3, "{r}");
            if clock == "nand" {
                assert_eq!(ms("host_cpu_ms"), 0.0, "{r}");
                assert!(
                    (ms("nand_busy_ms") + ms("link_ms") - ms("sim_ms")).abs() < 1e-3,
                    "{r}"
                );
            }
        }
    }
}
