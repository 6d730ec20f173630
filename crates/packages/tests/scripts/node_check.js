'use strict';
// Run by tests/node.rs in a fresh project with better-sqlite3 and the onesync tarball
// installed: `node node_check.js open|load DIR`. Each way commits to a store, reopens it
// and reads back, with no SQLITE_USE_URI in the environment; a plain SQLite file made
// before onesync was loaded still opens as plain in the same process; open() refuses it,
// a directory, a missing directory, another file and a URI with the URI form's code and
// reason, and makes an empty file a store.

const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const Database = require('better-sqlite3');
const onesync = require('onesync');

const [mode, dir] = process.argv.slice(2);
assert.strictEqual(process.env.SQLITE_USE_URI, undefined, 'SQLITE_USE_URI must not be set');
const magic = (file) => fs.readFileSync(file).subarray(0, 16).toString('latin1');
const STORE = 'onesync store\0\r\n';
const SQLITE = 'SQLite format 3\0';

// A plain database made before onesync is anywhere in the process.
const plain = path.join(dir, `${mode}-plain.db`);
{
  const p = new Database(plain);
  p.exec('CREATE TABLE p(x); INSERT INTO p VALUES (42)');
  p.close();
}

// How this mode opens a store: open(), or load(db, {default: true}) + new Database().
let openStore;
if (mode === 'open') {
  openStore = (file) => onesync.open(file);
} else {
  onesync.load(new Database(plain), { default: true });
  openStore = (file) => new Database(file);
}

const file = path.join(dir, `${mode} #1?.onesync`);
let db = openStore(file);
db.exec('CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)');
const insert = db.prepare('INSERT INTO t(v) VALUES (?)');
db.transaction(() => {
  for (let i = 0; i < 100; i++) insert.run(`row ${i}`);
})();
const stats = () => JSON.parse(db.pragma('onesync_stats', { simple: true }));
const first = stats().last_seq;
assert.ok(first >= 2, `last_seq ${first}`);
db.close();
assert.strictEqual(magic(file), STORE);

db = openStore(file);
assert.deepStrictEqual(db.prepare('SELECT count(*) AS n, max(v) AS v FROM t').get(), { n: 100, v: 'row 99' });
db.prepare("INSERT INTO t(v) VALUES ('after reopening')").run();
assert.ok(stats().last_seq > first);
assert.strictEqual(db.pragma('integrity_check', { simple: true }), 'ok');
db.close();

// The plain file still opens as plain in this process, and stays plain when written.
const p = new Database(plain);
assert.strictEqual(p.prepare('SELECT x FROM p').pluck().get(), 42);
p.exec('INSERT INTO p VALUES (43)');
p.close();
assert.strictEqual(magic(plain), SQLITE);
if (mode === 'open') {
  // What the URI form file:PATH?vfs=onesync refuses, open() refuses with the same code and
  // the VFS's reason (crates/vfs/README.md, "When an open is refused"), creating nothing.
  const refused = (file, code, reason) =>
    assert.throws(
      () => onesync.open(file),
      (e) => e instanceof Database.SqliteError && e.code === code && e.message.includes(reason),
    );
  refused(plain, 'SQLITE_NOTADB', 'is not a onesync store (it is a plain SQLite database)');
  refused(dir, 'SQLITE_CANTOPEN', `onesync: ${path.resolve(dir)} is a directory`);
  const nodir = path.join(dir, 'nodir');
  refused(
    path.join(nodir, 'x.onesync'),
    'SQLITE_CANTOPEN',
    `cannot create ${path.resolve(nodir, 'x.onesync')}: the directory ${path.resolve(nodir)} does not exist`,
  );
  assert.ok(!fs.existsSync(nodir));
  const other = path.join(dir, 'other.txt');
  fs.writeFileSync(other, 'not a database at all');
  refused(other, 'SQLITE_NOTADB', 'it is neither a store nor a SQLite database');
  assert.strictEqual(fs.readFileSync(other, 'latin1'), 'not a database at all');
  // A URI is a file name to better-sqlite3: refused, not created.
  const before = fs.readdirSync(process.cwd()).length;
  refused('file:uri.onesync?vfs=onesync', 'SQLITE_CANTOPEN', 'looks like a URI');
  assert.strictEqual(fs.readdirSync(process.cwd()).length, before);
  // An existing empty file is refused (onesync as the default VFS keeps it the empty plain
  // database SQLite takes it for), and left as it was.
  const empty = path.join(dir, 'empty.db');
  fs.writeFileSync(empty, '');
  refused(empty, 'SQLITE_CANTOPEN', 'is an empty file');
  assert.strictEqual(fs.statSync(empty).size, 0);
}
console.log(`node ${mode}: ok (last_seq ${first})`);
