"""onesync for Python: the failure-atomic SQLite VFS, bundled as ``libonesync.so``.

    import onesync
    conn = onesync.connect("app.onesync")   # a sqlite3.Connection on a onesync store

How the VFS gets into Python's SQLite
-------------------------------------
``libonesync.so`` is a SQLite loadable extension: its entry points register the
``onesync`` VFS with the SQLite that calls them. There are two ways to be called:

* ``sqlite3_load_extension`` -- ``Connection.enable_load_extension`` and
  ``load_extension``. Many Pythons cannot: a CPython built without
  ``--enable-loadable-sqlite-extensions`` (pyenv's default, python.org's macOS
  builds) has no ``enable_load_extension`` at all.
* ``sqlite3_auto_extension`` -- needs no permission from the connection. We reach
  it through ``ctypes``: ``ctypes.CDLL(_sqlite3.__file__)`` opens the stdlib's own
  C module, and looking a symbol up in that handle also searches its dependencies,
  so ``sqlite3_auto_extension`` resolves to the very SQLite (usually the system's
  ``libsqlite3.so.0``) that ``sqlite3.connect`` uses. We hand it the bundled
  library's ``sqlite3_onesync_auto_init``. SQLite runs automatic extensions only
  after a connection's main database is open, so we then open and close one
  ``:memory:`` connection: that run registers the VFS, and from then on
  ``file:...?vfs=onesync`` opens a store.

``connect`` and ``register`` take the second way (it works with or without
``load_extension``); ``load`` takes the first where the connection allows it.
Registration is process-wide and permanent, as SQLite extensions are.
"""

import ctypes
import os
import sqlite3
import threading
import urllib.parse

__all__ = ["loadable_path", "register", "load", "store_uri", "connect", "STORE_MAGIC", "SQLITE_MAGIC"]

#: The first 16 bytes of a onesync store file.
STORE_MAGIC = b"onesync store\0\r\n"
#: The first 16 bytes of a plain SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\0"

_HERE = os.path.dirname(os.path.abspath(__file__))

# The CDLL handles and the registered entry points stay referenced here for the life of
# the process: SQLite keeps calling into the library, which must stay mapped.
_lock = threading.Lock()
_extension = None  # ctypes.CDLL of the bundled libonesync.so
_sqlite = None  # ctypes.CDLL of the stdlib's _sqlite3 module (and so of its SQLite)
_registered = set()  # entry point names handed to sqlite3_auto_extension


def loadable_path():
    """The path of the bundled ``libonesync.so``, for ``load_extension`` and the like.

    SQLite also accepts it without the ``.so`` suffix (it appends one if needed);
    ``.load`` in the sqlite3 CLI does too.
    """
    return os.path.join(_HERE, "libonesync.so")


def _entry_point(default, auto):
    """The entry point's name: see crates/vfs/src/sys/entry.rs."""
    name = "sqlite3_onesync_default" if default else "sqlite3_onesync"
    return name + ("_auto_init" if auto else "_init")


def register(default=False):
    """Registers the ``onesync`` VFS with the stdlib's SQLite for this process through
    ``sqlite3_auto_extension`` (see the module's docstring), once; from then on
    ``sqlite3.connect(store_uri(path), uri=True)`` opens a store. ``default=True`` also
    makes it the default VFS (see :func:`load`)."""
    global _extension, _sqlite
    entry = _entry_point(default, auto=True)
    with _lock:
        if entry in _registered:
            return
        if _extension is None:
            _extension = ctypes.CDLL(loadable_path())
        if _sqlite is None:
            import _sqlite3  # the C module behind sqlite3; its __file__ is a shared object

            _sqlite = ctypes.CDLL(_sqlite3.__file__)
        try:
            auto_extension = _sqlite.sqlite3_auto_extension
            cancel = _sqlite.sqlite3_cancel_auto_extension
        except AttributeError as e:
            raise RuntimeError(
                "onesync: this Python's sqlite3 module does not export SQLite's C API "
                "(SQLite linked into it statically?); use a Python whose sqlite3 can "
                "load extensions and onesync.load(conn)"
            ) from e
        auto_extension.argtypes = cancel.argtypes = [ctypes.c_void_p]
        auto_extension.restype = cancel.restype = ctypes.c_int
        init = ctypes.cast(getattr(_extension, entry), ctypes.c_void_p)
        rc = auto_extension(init)
        if rc != 0:
            raise RuntimeError(f"onesync: sqlite3_auto_extension failed ({rc})")
        try:
            # The automatic extension runs once this connection's database is open.
            sqlite3.connect(":memory:").close()
        except sqlite3.Error:
            # A SQLite without extension support fails every open from now on: undo.
            cancel(init)
            raise
        _registered.add(entry)


def load(conn, default=False):
    """Loads onesync into the SQLite behind ``conn`` and registers the ``onesync`` VFS.

    ``conn`` is a stdlib ``sqlite3.Connection`` or an ``apsw.Connection``. With
    ``default=True``, ``onesync`` also becomes SQLite's default VFS: new databases
    are then created as stores and stores open as stores without ``vfs=onesync``,
    while existing plain SQLite files still open as plain files.

    A stdlib connection that cannot load extensions (no ``enable_load_extension``)
    gets the VFS through ``sqlite3_auto_extension`` (see the module's docstring): the
    VFS is registered for the whole process, the check that reports why a store open
    was refused only on connections opened afterwards. Returns ``conn``.
    """
    entry = _entry_point(default, auto=False)
    if isinstance(conn, sqlite3.Connection):
        if not hasattr(conn, "enable_load_extension"):
            register(default)
            return conn
        conn.enable_load_extension(True)
        try:
            # The SQL function takes an entry point on every Python version
            # (Connection.load_extension gained its entrypoint argument only in 3.12).
            conn.execute("SELECT load_extension(?, ?)", (loadable_path(), entry))
        finally:
            conn.enable_load_extension(False)
        return conn
    if type(conn).__module__.split(".")[0] == "apsw":
        # apsw links its own SQLite: load the extension into that one.
        conn.enable_load_extension(True)
        conn.load_extension(loadable_path(), entry)
        return conn
    raise TypeError(f"onesync.load: expected a sqlite3 or apsw Connection, not {type(conn)!r}")


def store_uri(path, **params):
    """The URI that opens the store at ``path``: ``file:PATH?vfs=onesync`` with PATH
    percent-encoded (``%``, ``?``, ``#`` and spaces would otherwise end or change it),
    and ``params`` (e.g. ``mode="ro"``, ``onesync_sync_interval_ms=5``) appended."""
    path = os.path.abspath(os.fspath(path))
    # Two leading slashes would read as "file://authority/": keep one.
    quoted = urllib.parse.quote("/" + path.lstrip("/"), safe="/")
    query = urllib.parse.urlencode({"vfs": "onesync", **params})
    return f"file:{quoted}?{query}"


def _uri_naming_onesync(uri, params):
    """A URI given to :func:`connect`: with ``vfs=onesync`` added if it names no VFS and
    ``params`` appended; refused if it names another VFS."""
    body, hash_, fragment = uri.partition("#")
    query = body.partition("?")[2]
    named = [v for k, _, v in (p.partition("=") for p in query.split("&") if p) if k == "vfs"]
    if named and named[0] != "onesync":
        error = sqlite3.OperationalError(
            f"onesync: {uri} names the VFS {named[0]!r}: onesync.connect opens onesync "
            "stores (vfs=onesync); open other databases with sqlite3.connect"
        )
        # As SQLite's own errors carry them (Python 3.11+ reads them there).
        error.sqlite_errorcode, error.sqlite_errorname = 14, "SQLITE_CANTOPEN"
        raise error
    extra = {} if named else {"vfs": "onesync"}
    extra.update(params)
    if extra:
        body += ("&" if "?" in body else "?") + urllib.parse.urlencode(extra)
    return body + hash_ + fragment


def connect(path, *, uri_params=None, **kwargs):
    """A ``sqlite3.Connection`` to the onesync store at ``path`` (created if missing).

    Works whether or not this Python's sqlite3 can load extensions. ``path`` is opened as
    the URI ``file:PATH?vfs=onesync`` (see :func:`store_uri`), so every refusal carries
    the reason SQLite gives that URI (a directory, a missing directory, a plain SQLite
    database: ``sqlite3.DatabaseError`` saying so), and an existing empty file becomes a
    store as it does there (SQLite treats an empty file as a new database). A ``path``
    that begins with ``file:`` is a URI, as SQLite reads it with ``uri=True``: opened as
    given, with ``vfs=onesync`` added if it names no VFS; one naming another VFS raises
    ``sqlite3.OperationalError`` (name a file beginning with ``file:`` as ``./file:...``).
    ``uri_params`` are added to the URI (see :func:`store_uri`); ``kwargs`` go to
    ``sqlite3.connect`` (``uri`` is always on).
    """
    register()
    kwargs["uri"] = True
    params = uri_params or {}
    name = os.fsdecode(os.fspath(path))
    if name.startswith("file:"):
        return sqlite3.connect(_uri_naming_onesync(name, params), **kwargs)
    return sqlite3.connect(store_uri(path, **params), **kwargs)
