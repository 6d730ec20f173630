"""Run by tests/python.rs in a fresh venv with the wheel installed: onesync.connect on a
path that needs percent-encoding commits, reopens and reads back; the store's counters
show the commits; a plain SQLite file is refused and left as it was; load(default=True)
where sqlite3 cannot load extensions (through sqlite3_auto_extension) makes new files
stores and leaves plain ones plain. Argument: a scratch directory."""

import json
import os
import sqlite3
import sys

import onesync
from default_vfs_check import check_default_vfs

scratch = sys.argv[1]
print("python", sys.version.split()[0], "sqlite", sqlite3.sqlite_version,
      "load_extension:", hasattr(sqlite3.Connection, "enable_load_extension"))


def last_seq(conn):
    return json.loads(conn.execute("PRAGMA onesync_stats").fetchone()[0])["last_seq"]


# '#' and '?' would end the path part of a URI, a space is not allowed in one.
path = os.path.join(scratch, "odd #1? name.onesync")
conn = onesync.connect(path)
with conn:
    conn.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t(v) VALUES (?)", [(f"row {i}",) for i in range(100)])
first = last_seq(conn)
assert first >= 2, first  # the CREATE TABLE and the inserts: two commits at least
conn.close()
with open(path, "rb") as f:  # the store is the file of that very name
    assert f.read(16) == onesync.STORE_MAGIC

conn = onesync.connect(path)
assert conn.execute("SELECT count(*), max(k), min(v) FROM t").fetchone() == (100, 100, "row 0")
with conn:
    conn.execute("INSERT INTO t(v) VALUES ('after reopening')")
assert last_seq(conn) > first, (last_seq(conn), first)
assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
conn.close()

plain = os.path.join(scratch, "plain.db")
p = sqlite3.connect(plain)
p.execute("CREATE TABLE x(y)")
p.commit()
p.close()
before = open(plain, "rb").read()
try:
    onesync.connect(plain)
except sqlite3.DatabaseError as e:
    assert "plain SQLite database" in str(e), e
    print("refused as expected:", e)
else:
    sys.exit("onesync.connect opened a plain SQLite database")
assert open(plain, "rb").read() == before, "the refused plain file was changed"

check_default_vfs(scratch, plain)
print("connect: ok")
