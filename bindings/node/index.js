'use strict';
// onesync for Node: puts the onesync SQLite VFS (lib/libonesync.so) into better-sqlite3.
//
// better-sqlite3 bundles its own SQLite, built without URI filenames (SQLITE_USE_URI=0;
// only SQLITE_USE_URI=1 in the environment when it loads turns them on) and with no option
// to name a VFS, so `file:x?vfs=onesync` is normally just a file name there.
// What does work is making onesync SQLite's *default* VFS (the extension's entry point
// sqlite3_onesync_default_init): then a new database file becomes a store, a store opens
// as a store, and an existing plain SQLite file still opens as a plain file.

const fs = require('node:fs');
const path = require('node:path');

const STORE_MAGIC = Buffer.from('onesync store\0\r\n', 'latin1');
const SQLITE_MAGIC = Buffer.from('SQLite format 3\0', 'latin1');

/** The path of the bundled libonesync.so, for db.loadExtension(). */
function loadablePath() {
  return path.join(__dirname, 'lib', 'libonesync.so');
}

/**
 * Loads onesync into the SQLite behind better-sqlite3 `db`: registers the `onesync` VFS
 * for the whole process. With `{default: true}` onesync
 * also becomes the default VFS, so `new Database('x.onesync')` opens (or creates) a store.
 * Returns `db`.
 */
function load(db, options = {}) {
  const entryPoint = options.default ? 'sqlite3_onesync_default_init' : 'sqlite3_onesync_init';
  db.loadExtension(loadablePath(), entryPoint);
  return db;
}

/**
 * 'missing', 'directory', 'empty', 'store', 'plain' or 'other': what `file` is (a
 * file's kind from its first 16 bytes).
 */
function fileKind(file) {
  let fd;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    if (e.code === 'ENOENT') return 'missing';
    throw e;
  }
  try {
    if (fs.fstatSync(fd).isDirectory()) return 'directory';
    const head = Buffer.alloc(16);
    const n = fs.readSync(fd, head, 0, 16, 0);
    if (n === 0) return 'empty';
    if (head.equals(STORE_MAGIC)) return 'store';
    if (head.equals(SQLITE_MAGIC)) return 'plain';
    return 'other';
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The error SQLite gives the URI form `file:PATH?vfs=onesync` for `file` (its code and
 * the VFS's reason, crates/vfs/README.md "When an open is refused"), or null where that
 * form opens it. better-sqlite3 reads no URIs, so the VFS cannot tell that this open
 * names it: the reasons are given here.
 */
function refusal(file, kind) {
  const full = path.resolve(file);
  const notAStore = (what) =>
    `onesync: ${full} is not a onesync store (${what}); nothing was written to it. ` +
    `Open a plain SQLite database with new Database(), or copy it into a store: ` +
    `onesync import ${full} NEW.onesync, or VACUUM INTO 'file:NEW.onesync?vfs=onesync' ` +
    `from a connection that can use URIs`;
  switch (kind) {
    case 'directory':
      return [`onesync: ${full} is a directory`, 'SQLITE_CANTOPEN'];
    case 'missing': {
      // better-sqlite3's SQLite reads no URIs (unless SQLITE_USE_URI=1 was in the
      // environment when it loaded): a URI would be a file of that name. Refused as the
      // VFS refuses one it is given so, rather than create it.
      if (/^file:/.test(file)) {
        return [
          `onesync: ${file} looks like a URI, but better-sqlite3's SQLite reads no URIs, so ` +
            `it would be a file of that name: give open() the store's path (URI parameters ` +
            `have pragmas: PRAGMA onesync_sync_interval_ms = N)`,
          'SQLITE_CANTOPEN',
        ];
      }
      const dir = path.dirname(full);
      const isDir = fs.existsSync(dir) && fs.statSync(dir).isDirectory();
      return isDir
        ? null
        : [`onesync: cannot create ${full}: the directory ${dir} does not exist`, 'SQLITE_CANTOPEN'];
    }
    case 'empty':
      // With onesync only the default VFS (all better-sqlite3 allows), SQLite keeps an
      // existing empty file the empty plain database it is: another connection, of this
      // process or another, may have it open, and turning it into a store under that
      // connection would lose what it writes. So no store is made of it here.
      return [
        `onesync: ${full} is an empty file, which SQLite opens as an empty plain database ` +
          `(another connection may have it open): give open() a new path for a store, or ` +
          `remove the file first`,
        'SQLITE_CANTOPEN',
      ];
    case 'plain':
      return [notAStore('it is a plain SQLite database'), 'SQLITE_NOTADB'];
    case 'other':
      return [notAStore('it is neither a store nor a SQLite database'), 'SQLITE_NOTADB'];
    default:
      return null;
  }
}

let madeDefault = false;

/**
 * A better-sqlite3 Database on the onesync store at `file` (created if missing);
 * `options` are better-sqlite3's. Makes onesync the default VFS of better-sqlite3's
 * SQLite (as load(db, {default: true}) does), loading it through a private in-memory
 * connection that is closed at once. Refuses what the URI form `file:PATH?vfs=onesync`
 * refuses, with SQLite's code and the VFS's reason (a better-sqlite3 SqliteError): a
 * directory, a missing directory, a plain SQLite file (which would otherwise open as
 * plain: `onesync import` or `VACUUM INTO` makes a store of it) or any other file that is
 * no store. An existing empty file is refused too (`SQLITE_CANTOPEN`): with onesync only
 * the default VFS, SQLite keeps it the empty plain database it is, which another
 * connection may have open.
 */
function open(file, options) {
  if (typeof file !== 'string' || file === '' || file === ':memory:') {
    throw new TypeError('onesync.open: a store is a file; give its path');
  }
  const Database = require('better-sqlite3'); // the peer dependency, resolved from the app
  if (!madeDefault) {
    const loader = new Database(':memory:');
    try {
      load(loader, { default: true });
    } finally {
      loader.close();
    }
    madeDefault = true;
  }
  const refused = refusal(file, fileKind(file));
  if (refused) {
    throw new Database.SqliteError(...refused);
  }
  const db = new Database(file, options);
  // Another VFS made the default after ours would have opened a plain file: say so.
  if (fileKind(file) !== 'store') {
    db.close();
    throw new Error(`onesync: ${file} did not open as a onesync store (is onesync still the default VFS?)`);
  }
  return db;
}

module.exports = { loadablePath, load, open };
