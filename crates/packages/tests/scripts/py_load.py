"""Run by tests/python.rs in a fresh venv of a Python whose sqlite3 can load extensions
(Debian's): onesync.load(conn) on a stdlib connection, then a store through its URI, then
onesync.connect in the same process, then load(default=True): new files become stores,
plain files stay plain. Argument: a scratch directory."""

import os
import sqlite3
import sys

import onesync
from default_vfs_check import check_default_vfs

scratch = sys.argv[1]
print("python", sys.version.split()[0], "sqlite", sqlite3.sqlite_version)
conn = sqlite3.connect(":memory:")
assert hasattr(conn, "enable_load_extension"), "this test wants a Python that loads extensions"
onesync.load(conn)
# The package is the store and the VFS: no virtual table (that is libonesync_mvbt_vtab).
try:
    conn.execute(f"CREATE VIRTUAL TABLE kv USING mvbt(file='{scratch}/kv.mvbt')")
    raise AssertionError("the package's library has the mvbt module")
except sqlite3.OperationalError as e:
    assert "no such module: mvbt" in str(e), e
conn.close()

path = os.path.join(scratch, "loaded #2.onesync")
db = sqlite3.connect(onesync.store_uri(path), uri=True)
with db:
    db.execute("CREATE TABLE t(v)")
    db.execute("INSERT INTO t VALUES ('loaded')")
db.close()
with open(path, "rb") as f:
    assert f.read(16) == onesync.STORE_MAGIC

# connect() registers through sqlite3_auto_extension as well: both ways in one process.
db = onesync.connect(path)
assert db.execute("SELECT v FROM t").fetchall() == [("loaded",)]
db.close()

plain = os.path.join(scratch, "plain.db")
p = sqlite3.connect(plain)
p.execute("CREATE TABLE x(y)")
p.commit()
p.close()

check_default_vfs(scratch, plain)
print("load: ok")
