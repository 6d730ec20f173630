#!/usr/bin/env python3
"""Loads libonesync.so into apsw's own bundled SQLite (a SQLite the extension
was not compiled against) and checks the `onesync` VFS works there.

Usage: python3 crates/vfs/scripts/apsw_check.py [path/to/libonesync.so]
Needs: pip install apsw
"""
import os
import sys
import tempfile

import apsw

lib = sys.argv[1] if len(sys.argv) > 1 else "target/release/libonesync.so"
lib = os.path.abspath(lib)
print("apsw", apsw.apswversion(), "bundled SQLite", apsw.sqlite_lib_version())

loader = apsw.Connection(":memory:")
loader.enable_load_extension(True)
loader.load_extension(lib)
# SQLITE_OK_LOAD_PERMANENTLY: the VFS must outlive the loading connection.
loader.close()
assert "onesync" in apsw.vfs_names(), apsw.vfs_names()
print("vfs names:", apsw.vfs_names())

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "x.db")
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
    db = apsw.Connection(f"file:{path}?vfs=onesync", flags=flags)
    cur = db.cursor()
    cur.execute("CREATE TABLE t(a)")
    cur.execute("BEGIN")
    cur.execute("INSERT INTO t VALUES(1),(2),(3)")
    during = sorted(os.listdir(d))
    cur.execute("ROLLBACK")
    after_rollback = cur.execute("SELECT count(*) FROM t").fetchone()[0]
    cur.execute("CREATE TABLE u(id INTEGER PRIMARY KEY, b)")
    cur.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<500) "
                "INSERT INTO u SELECT i, randomblob(1000) FROM n")
    cur.execute("BEGIN")
    cur.execute("INSERT INTO t VALUES(7)")
    before = cur.execute("SELECT sum(length(b)), max(hex(b)) FROM u").fetchone()
    # Rewrites ~500 KB of existing pages, then hits a PRIMARY KEY conflict at
    # the last row: the statement journal (kept by the VFS, in memory, once it
    # spills past 64 KiB) must undo just this statement.
    try:
        cur.execute("UPDATE u SET b = randomblob(1000), id = CASE WHEN id = 500 THEN 1 ELSE id END")
        raise AssertionError("expected a constraint error")
    except apsw.ConstraintError:
        pass
    after = cur.execute("SELECT sum(length(b)), max(hex(b)) FROM u").fetchone()
    assert before == after, "statement rollback failed"
    cur.execute("COMMIT")
    rows = cur.execute("SELECT count(*) FROM t").fetchone()[0]
    check = cur.execute("PRAGMA integrity_check").fetchone()[0]
    db.close()
    print("files during txn:", during)
    print("rows after rollback:", after_rollback, "rows after commit:", rows, "integrity:", check)
    assert not any(f.endswith("-journal") for f in during), during
    assert after_rollback == 0
    assert rows == 1, rows
    assert check == "ok"
print("apsw: OK")
