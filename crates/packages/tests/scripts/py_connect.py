"""Run by tests/python.rs in a fresh venv with the wheel installed: onesync.connect on a
path that needs percent-encoding commits, reopens and reads back; the store's counters
show the commits; a plain SQLite file is refused and left as it was; load(default=True)
where sqlite3 cannot load extensions (through sqlite3_auto_extension) makes new files
stores and leaves plain ones plain. A directory, a missing directory and a plain file are
refused with the URI form's reason; an empty file becomes a store as through the URI form;
a URI is opened as a URI. Argument: a scratch directory."""

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



def error_of(open_it):
    try:
        open_it()
    except sqlite3.Error as e:
        return e
    sys.exit("opened where the URI form refuses")


def uri_form(p):
    return lambda: sqlite3.connect(f"file:{p}?vfs=onesync", uri=True)


# What the URI form refuses, connect refuses with the same reason and code.
for bad, reason in [
    (scratch, f"onesync: {scratch} is a directory"),
    (os.path.join(scratch, "nodir", "x.onesync"),
     f"cannot create {scratch}/nodir/x.onesync: the directory {scratch}/nodir does not exist"),
    (plain, "plain SQLite database"),
]:
    e, u = error_of(lambda: onesync.connect(bad)), error_of(uri_form(bad))
    assert reason in str(e), (e, reason)
    assert (type(e), str(e)) == (type(u), str(u)), (e, u)
    assert getattr(e, "sqlite_errorcode", None) == getattr(u, "sqlite_errorcode", None), (e, u)
assert not os.path.exists(os.path.join(scratch, "nodir"))

# An empty file becomes a store, through connect as through the URI form (SQLite treats an
# empty file as a new database).
for name, open_it in [("empty-connect.db", onesync.connect), ("empty-uri.db", lambda p: uri_form(p)())]:
    empty = os.path.join(scratch, name)
    open(empty, "wb").close()
    c = open_it(empty)
    with c:
        c.execute("CREATE TABLE t(x)")
    c.close()
    with open(empty, "rb") as f:
        assert f.read(16) == onesync.STORE_MAGIC, name

# A URI is a URI (as sqlite3.connect(..., uri=True) reads it), never a file of that name.
uris = os.path.join(scratch, "uris")
os.mkdir(uris)
target = os.path.join(uris, "a b.onesync")
for uri in [f"file:{uris}/a%20b.onesync?vfs=onesync", f"file:{uris}/a%20b.onesync"]:
    c = onesync.connect(uri)
    with c:
        c.execute("CREATE TABLE IF NOT EXISTS t(x)")
    c.close()
c = onesync.connect(f"file:{uris}/a%20b.onesync", uri_params={"onesync_sync_interval_ms": 5})
assert c.execute("PRAGMA onesync_sync_interval_ms").fetchone() == ("5",)
c.close()
assert os.listdir(uris) == ["a b.onesync"], os.listdir(uris)
with open(target, "rb") as f:
    assert f.read(16) == onesync.STORE_MAGIC
e = error_of(lambda: onesync.connect(f"file:{uris}/other.db?vfs=unix"))
assert isinstance(e, sqlite3.OperationalError) and "names the VFS 'unix'" in str(e), e
assert os.listdir(uris) == ["a b.onesync"], os.listdir(uris)
print("refusals and URIs as the URI form: ok")

check_default_vfs(scratch, plain)
print("connect: ok")
