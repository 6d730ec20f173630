//! Smoke tests of `onesync flash`: short runs of each experiment and of the X-FTL power-cut
//! torture, checking the JSON shape and the few relations that must hold in any run.

use std::process::Command;

use serde_json::Value;

fn onesync(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_onesync"))
        .args(args)
        .output()
        .expect("running onesync");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn results(json: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(json).expect("JSON on stdout");
    v["results"].as_array().expect("results array").clone()
}

#[test]
fn partsupp_xftl_writes_fewer_nand_pages_than_wal_and_rbj() {
    let (ok, out) = onesync(&[
        "flash", "partsupp", "--txns", "150", "--pages", "20", "--json", "-",
    ]);
    assert!(ok, "{out}");
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
        "{out}"
    );
    assert!(time(&xftl) < time(&wal) && time(&wal) < time(&rbj), "{out}");
}

#[test]
fn fio_and_restart_run() {
    let (ok, out) = onesync(&[
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
    assert!(ok, "{out}");
    let rows = results(&out);
    let iops = |mode: &str| {
        rows.iter().find(|r| r["mode"] == mode).unwrap()["per_sec"]
            .as_f64()
            .unwrap()
    };
    assert!(
        iops("xftl") > iops("ordered") && iops("ordered") > iops("data"),
        "{out}"
    );

    let (ok, out) = onesync(&["flash", "restart", "--txns", "40", "--json", "-"]);
    assert!(ok, "{out}");
    let rows = results(&out);
    let sqlite_ms = |mode: &str| {
        rows.iter().find(|r| r["mode"] == mode).unwrap()["restart"]["sqlite_ms"]
            .as_f64()
            .unwrap()
    };
    assert!(
        sqlite_ms("xftl") < sqlite_ms("rbj") && sqlite_ms("xftl") < sqlite_ms("wal"),
        "{out}"
    );
}

#[test]
fn xftl_survives_power_cuts() {
    let (ok, out) = onesync(&[
        "flash",
        "torture",
        "--power-cuts",
        "150",
        "--seed",
        "5",
        "--json",
        "-",
    ]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert!(ok, "{out}");
    assert_eq!(v["failures"], 0, "{out}");
    assert_eq!(v["power_cuts"], 150, "{out}");
    assert!(v["transfers_acknowledged"].as_u64().unwrap() > 0, "{out}");
}
