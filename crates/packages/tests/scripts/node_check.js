'use strict';
// Run by tests/node.rs in a fresh project with better-sqlite3 and the onesync tarball
// installed: `node node_check.js open|load DIR`. Each way commits to a store, reopens it
// and reads back, with no SQLITE_USE_URI in the environment; a plain SQLite file made
// before onesync was loaded still opens as plain in the same process; open() refuses it.

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
  assert.throws(() => onesync.open(plain), /plain SQLite database/);
}
console.log(`node ${mode}: ok (last_seq ${first})`);
