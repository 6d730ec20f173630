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

/** 'missing', 'empty', 'store', 'plain' or 'other', from a file's first 16 bytes. */
function fileKind(file) {
  let fd;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    if (e.code === 'ENOENT') return 'missing';
    throw e;
  }
  try {
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

let madeDefault = false;

/**
 * A better-sqlite3 Database on the onesync store at `file` (created if missing);
 * `options` are better-sqlite3's. Makes onesync the default VFS of better-sqlite3's
 * SQLite (as load(db, {default: true}) does), loading it through a private in-memory
 * connection that is closed at once. Refuses a plain SQLite file, which would otherwise
 * open as plain: `onesync import` (the Python package's CLI) or
 * `VACUUM INTO` makes a store of it.
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
  if (fileKind(file) === 'plain') {
    throw new Error(
      `onesync: ${file} is not a onesync store (it is a plain SQLite database); ` +
        `open it with new Database(), or copy it into a store: ` +
        `VACUUM INTO 'file:NEW.onesync?vfs=onesync' from a connection that can use URIs`,
    );
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
