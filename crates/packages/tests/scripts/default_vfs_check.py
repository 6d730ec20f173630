"""Shared by py_connect.py and py_load.py: after onesync.load(conn, default=True), a new
file opened with no URI becomes a store, and an existing plain SQLite file still opens,
reads and commits as a plain file."""

import os
import sqlite3

import onesync


def check_default_vfs(scratch, plain):
    """`plain` is an existing plain SQLite database with an empty table x(y)."""
    onesync.load(sqlite3.connect(":memory:"), default=True)
    fresh = os.path.join(scratch, "by-default.onesync")
    db = sqlite3.connect(fresh)  # no URI: onesync is the default VFS now
    with db:
        db.execute("CREATE TABLE t(v)")
    db.close()
    with open(fresh, "rb") as f:
        assert f.read(16) == onesync.STORE_MAGIC, "a new file did not become a store"
    before = open(plain, "rb").read()
    p = sqlite3.connect(plain)  # an existing plain file still opens as one
    assert p.execute("SELECT count(*) FROM x").fetchone() == (0,)
    assert open(plain, "rb").read() == before, "reading the plain file changed it"
    with p:
        p.execute("INSERT INTO x VALUES (1)")
    p.close()
    with open(plain, "rb") as f:
        assert f.read(16) == onesync.SQLITE_MAGIC, "the plain file is no longer plain"
