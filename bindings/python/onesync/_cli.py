"""The ``onesync`` command: convert between plain SQLite files and onesync stores, check
a store, and tell what a file is.

    onesync import SRC.db DST.onesync   copy a plain SQLite database into a new store
    onesync export SRC.onesync DST.db   copy a store's database into a new plain file
    onesync check DB.onesync            PRAGMA integrity_check and the store's counters
    onesync info FILE                   what FILE is: store, plain SQLite or other

import writes the store with ``VACUUM INTO 'file:DST?vfs=onesync'`` (a compacted copy in
rollback-journal mode: the page images of a WAL-mode database would tell SQLite to use a
WAL, which a store has no use for); export copies the store's pages with SQLite's backup
API (the same database, byte for byte but the change counter). Neither overwrites a file,
and each integrity-checks what it wrote, removing it if the check fails.
"""

import argparse
import json
import os
import sqlite3
import sys
import urllib.parse

import onesync


class Failure(Exception):
    """An error to report in one line and exit 1 with."""


def kind(path):
    """'store', 'plain', 'empty' or 'other' for an existing file; Failure if it is missing."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise Failure(f"{path} does not exist") from None
    except OSError as e:
        raise Failure(f"cannot read {path}: {e.strerror}") from None
    if head == onesync.STORE_MAGIC:
        return "store"
    if head == onesync.SQLITE_MAGIC:
        return "plain"
    return "empty" if not head else "other"


def require(path, wanted, command):
    found = kind(path)
    if found == wanted:
        return
    what = {
        "store": "a onesync store",
        "plain": "a plain SQLite database",
        "empty": "an empty file",
        "other": "neither a SQLite database nor a onesync store",
    }
    raise Failure(f"{path} is {what[found]}; onesync {command} needs {what[wanted]}")


def refuse_existing(path, command):
    # lexists: a dangling symlink is still something we would write through.
    if os.path.lexists(path):
        raise Failure(f"{path} already exists; onesync {command} never overwrites a file")


def open_plain(path, read_only):
    """A connection to a plain SQLite file on the default VFS (never a store: this process
    never makes onesync the default)."""
    quoted = urllib.parse.quote(os.path.abspath(path), safe="/")
    query = "mode=ro" if read_only else "mode=rwc"
    # A WAL-mode file opens read-only only where its -shm can be made; with no -wal next
    # to it there is nothing but the file to read, which `immutable` does without one.
    if read_only and not os.path.lexists(path + "-wal"):
        with open(path, "rb") as f:
            if f.read(20)[18:20] == b"\2\2":
                query += "&immutable=1"
    return sqlite3.connect(f"file:{quoted}?{query}", uri=True)


def integrity(conn):
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    return "ok" if rows == ["ok"] else "; ".join(rows)


def write_checked(dst_path, write, open_dst, command):
    """Runs `write` (which creates `dst_path`), then integrity-checks `dst_path` through a
    connection from `open_dst`; removes what was written if anything fails."""
    refuse_existing(dst_path, command)
    done = False
    try:
        write()
        dst = open_dst()
        try:
            verdict = integrity(dst)
        finally:
            dst.close()
        if verdict != "ok":
            raise Failure(f"the copy in {dst_path} failed its integrity check: {verdict}")
        done = True
    finally:
        if not done and os.path.lexists(dst_path):
            os.remove(dst_path)


def cmd_import(args):
    require(args.src, "plain", "import")
    for suffix in ("-journal", "-wal"):
        if os.path.lexists(args.src + suffix):
            raise Failure(
                f"{args.src + suffix} exists: SQLite has not finished with {args.src} (it is "
                "open, or needs recovery); close it everywhere and open it once with sqlite3"
            )
    onesync.register()  # for the vfs=onesync in VACUUM INTO's URI
    src = open_plain(args.src, read_only=True)

    def write():
        src.execute("VACUUM INTO ?", (onesync.store_uri(args.dst),))

    try:
        write_checked(args.dst, write, lambda: onesync.connect(args.dst), "import")
    finally:
        src.close()
    print(f"imported {args.src} into the store {args.dst}: integrity_check ok")


def cmd_export(args):
    require(args.src, "store", "export")
    src = onesync.connect(args.src, uri_params={"mode": "ro"})

    def write():
        dst = open_plain(args.dst, read_only=False)
        try:
            src.backup(dst)
        finally:
            dst.close()

    try:
        write_checked(args.dst, write, lambda: open_plain(args.dst, read_only=True), "export")
    finally:
        src.close()
    print(f"exported the store {args.src} to {args.dst}: integrity_check ok")


def cmd_check(args):
    require(args.db, "store", "check")
    conn = onesync.connect(args.db, uri_params={"mode": "ro"})
    try:
        verdict = integrity(conn)
        stats = json.loads(conn.execute("PRAGMA onesync_stats").fetchone()[0])
    finally:
        conn.close()
    print(f"integrity_check: {verdict}")
    print("onesync_stats: " + json.dumps(stats, indent=2, sort_keys=True))
    return 0 if verdict == "ok" else 1


def cmd_info(args):
    found = kind(args.db)
    st = os.stat(args.db)
    print(f"file: {args.db}")
    print(f"size: {st.st_size} bytes ({st.st_blocks * 512} allocated on disk)")
    if found in ("empty", "other"):
        print(f"kind: {'empty file' if found == 'empty' else 'not a SQLite database nor a onesync store'}")
        return 0
    if found == "store":
        print("kind: onesync store (open it with onesync.connect or file:PATH?vfs=onesync)")
        conn = onesync.connect(args.db, uri_params={"mode": "ro"})
    else:
        print("kind: plain SQLite database (onesync import it to make a store)")
        conn = open_plain(args.db, read_only=True)
    try:
        if found == "store":
            stats = json.loads(conn.execute("PRAGMA onesync_stats").fetchone()[0])
            print(f"store page size: {stats['page_size']} bytes")
        print(f"SQLite page size: {conn.execute('PRAGMA page_size').fetchone()[0]} bytes")
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
        )]
        print(f"tables: {len(tables)}")
        for name in tables:
            quoted = '"' + name.replace('"', '""') + '"'
            rows = conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0]
            print(f"  {name}: {rows} rows")
    finally:
        conn.close()
    return 0


def parser():
    p = argparse.ArgumentParser(prog="onesync", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("import", help="copy a plain SQLite database into a new store")
    c.add_argument("src", help="plain SQLite database to read (not changed)")
    c.add_argument("dst", help="store to create; must not exist")
    c.set_defaults(run=cmd_import)
    c = sub.add_parser("export", help="copy a store's database into a new plain SQLite file")
    c.add_argument("src", help="onesync store to read (not changed)")
    c.add_argument("dst", help="plain SQLite file to create; must not exist")
    c.set_defaults(run=cmd_export)
    c = sub.add_parser("check", help="integrity-check a store and show its counters")
    c.add_argument("db", help="onesync store")
    c.set_defaults(run=cmd_check)
    c = sub.add_parser("info", help="tell what a file is: store, plain SQLite or other")
    c.add_argument("db", help="any file")
    c.set_defaults(run=cmd_info)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except (Failure, sqlite3.Error, OSError) as e:
        print(f"onesync {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
