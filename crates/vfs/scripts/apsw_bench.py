#!/usr/bin/env python3
"""Single-insert transactions through the onesync VFS from Python, with apsw's
own bundled SQLite (one the extension was not compiled against).

Loads libonesync.so, opens a onesync database (creating it and its table
first), runs N transactions of one 100-byte insert each with
synchronous=FULL, then checks PRAGMA integrity_check and the row count, and
prints one JSON line of figures. The measured part is framed by two lines
written straight to stdout (os.write), ONESYNC_MEASURE_BEGIN and
ONESYNC_MEASURE_END, so that a tracer (strace -f) can count the syscalls of
just the transactions.

Usage: python3 crates/vfs/scripts/apsw_bench.py [-n N] [--db PATH] [path/to/libonesync.so]
Needs: pip install apsw. Exits non-zero (with a message) if a check fails.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import apsw


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lib", nargs="?", default="target/release/libonesync.so")
    ap.add_argument("-n", type=int, default=1000, help="transactions (default 1000)")
    ap.add_argument("--db", help="database path (default: a new temporary directory)")
    args = ap.parse_args()

    loader = apsw.Connection(":memory:")
    loader.enable_load_extension(True)
    loader.load_extension(os.path.abspath(args.lib))
    loader.close()
    if "onesync" not in apsw.vfs_names():
        sys.exit(f"apsw_bench: onesync VFS not registered: {apsw.vfs_names()}")

    tmp = None
    path = args.db
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "bench.db")
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI

    # Setup: the database and its table.
    db = apsw.Connection(f"file:{path}?vfs=onesync", flags=flags)
    db.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    before = db.execute("SELECT count(*) FROM t").fetchone()[0]
    db.execute("PRAGMA synchronous = FULL")
    sync = db.execute("PRAGMA synchronous").fetchone()[0]
    if sync != 2:
        sys.exit(f"apsw_bench: synchronous is {sync}, wanted 2 (FULL)")

    # The store's growth steps (zeros written and flushed ahead of the commits, once in
    # the store's life) are counted apart from the transactions' own writes.
    before_stats = json.loads(db.execute("PRAGMA onesync_stats").fetchone()[0])
    os.write(1, b"ONESYNC_MEASURE_BEGIN\n")
    start = time.perf_counter()
    for _ in range(args.n):
        # Autocommit: each statement is one transaction, durable on return.
        db.execute("INSERT INTO t(v) VALUES (randomblob(100))")
    seconds = time.perf_counter() - start
    os.write(1, b"ONESYNC_MEASURE_END\n")
    after_stats = json.loads(db.execute("PRAGMA onesync_stats").fetchone()[0])

    check = db.execute("PRAGMA integrity_check").fetchone()[0]
    rows = db.execute("SELECT count(*) FROM t").fetchone()[0]
    stats = json.loads(db.execute("PRAGMA onesync_stats").fetchone()[0])
    db.close()
    # Reopen: the rows are there.
    db = apsw.Connection(f"file:{path}?vfs=onesync", flags=flags)
    reopened = db.execute("SELECT count(*) FROM t").fetchone()[0]
    db.close()
    result = {
        "apsw": apsw.apswversion(),
        "sqlite": apsw.sqlite_lib_version(),
        "transactions": args.n,
        "seconds": round(seconds, 3),
        "txn_per_s": round(args.n / seconds, 1) if seconds > 0 else None,
        "integrity_check": check,
        "rows": rows,
        "rows_after_reopen": reopened,
        "onesync_stats": stats,
        "growth_in_window": {
            key: after_stats[key] - before_stats[key] for key in ("growths", "bytes_preallocated")
        },
    }
    print(json.dumps(result), flush=True)
    if check != "ok":
        sys.exit(f"apsw_bench: integrity_check says {check!r}")
    if rows != before + args.n or reopened != rows:
        sys.exit(f"apsw_bench: {rows} rows ({reopened} after reopen), wanted {before + args.n}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
