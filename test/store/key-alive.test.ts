/**
 * Whether a key version exists, as KeyInUse asks it for every request that wrote tokens
 * (DESIGN §13): exact at every question, whoever destroyed the version (this connection,
 * another one in this process, another process), with the row read only after something
 * was committed.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { openStore, type Store } from '../../src/store/db.ts';
import { keyAliveCache, keyAliveEntry, syncRepositories } from '../../src/store/sqlite/connection.ts';

/** What KeyInUse asks: whether the version is alive now. */
const keyAlive = (store: Store, configurationId: string, version: number): boolean => keyAliveEntry(store, configurationId, version).alive();

const syncAlive = (store: Store, configurationId: string, version: number): boolean => syncRepositories(store).configurations.keyAlive(configurationId, version);

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-key-alive-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function open(t: TestContext, path: string): Store {
  const store = openStore(path);
  t.after(() => store.close());
  return store;
}

/** A configuration with versions 1 and 2 (version 1 superseded, so it may be destroyed). */
async function twoVersions(store: Store): Promise<string> {
  const configuration = await store.configurations.create({
    name: 'payments',
    type: 'encryption',
    proxySlug: 'payments',
    keyringId: randomBytes(16),
    firstWrappedKey: randomBytes(60),
    fields: ['card'],
    destinations: ['https://vendor.example/'],
  });
  await store.configurations.addKey(configuration.id, 2, randomBytes(60));
  return configuration.id;
}

/** Destroys the version from another process, through its own SQLite connection, and returns once it has committed. */
function destroyElsewhere(path: string, configurationId: string, version: number): void {
  const script = `
    const { DatabaseSync } = require('node:sqlite');
    const db = new DatabaseSync(process.argv[1]);
    db.exec('PRAGMA busy_timeout = 5000');
    const done = db.prepare("UPDATE data_keys SET destroyed_at = '2026-01-01T00:00:00.000Z', wrapped = x'' WHERE configuration_id = ? AND version = ?").run(process.argv[2], Number(process.argv[3]));
    if (done.changes !== 1) throw new Error('no such key version');
    db.close();`;
  execFileSync(process.execPath, ['-e', script, path, configurationId, String(version)]);
}

test('a file store answers repeated questions from the WAL-index header, and reads the row again after any commit', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = open(t, path);
  const other = open(t, path);
  const id = await twoVersions(store);
  const cache = keyAliveCache(store);

  assert.equal(keyAlive(store, id, 1), true);
  const first = cache.reads;
  for (let i = 0; i < 1000; i++) assert.equal(keyAlive(store, id, 1), true);
  assert.equal(cache.reads, first, 'nothing was committed: the row is not read again');

  // A commit that has nothing to do with keys still makes the next question read.
  await other.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(cache.reads, first + 1);
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(cache.reads, first + 1);
});

test('a version destroyed by another process fails the very next question, without waiting for any stamp', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = open(t, path);
  const id = await twoVersions(store);
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(keyAlive(store, id, 1), true);

  destroyElsewhere(path, id, 1);
  assert.equal(keyAlive(store, id, 1), false);
  // "Gone" is never remembered as an answer: every question reads.
  const reads = keyAliveCache(store).reads;
  assert.equal(keyAlive(store, id, 1), false);
  assert.equal(keyAliveCache(store).reads, reads + 1);
  assert.equal(keyAlive(store, id, 2), true, 'the other version is untouched');
});

test('a version destroyed by another connection of this process fails the next question', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = open(t, path);
  const other = open(t, path);
  const id = await twoVersions(store);
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(await other.configurations.destroyKey(id, 1), 'destroyed');
  assert.equal(keyAlive(store, id, 1), false);
});

test('inside a transaction this process holds, its own uncommitted destroy is seen, and a rollback brings the version back', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = open(t, path);
  const id = await twoVersions(store);
  assert.equal(keyAlive(store, id, 1), true);
  await assert.rejects(
    store.transaction(async (tx) => {
      assert.equal(await tx.configurations.destroyKey(id, 1), 'destroyed');
      // Nothing is committed yet, so the WAL-index header has not moved: the own change count has.
      assert.equal(keyAlive(store, id, 1), false);
      throw new Error('roll back');
    }),
    /roll back/,
  );
  assert.equal(keyAlive(store, id, 1), true);
});

test('a store opened through a symbolic link watches the WAL-index SQLite really uses', async (t) => {
  const dir = tempDir(t);
  mkdirSync(join(dir, 'real'));
  symlinkSync(join(dir, 'real'), join(dir, 'link'));
  const store = open(t, join(dir, 'link', 'svc.db'));
  const id = await twoVersions(store);
  assert.equal(keyAlive(store, id, 1), true);
  const reads = keyAliveCache(store).reads;
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(keyAliveCache(store).reads, reads, 'the header was found and read');

  destroyElsewhere(join(dir, 'real', 'svc.db'), id, 1);
  assert.equal(keyAlive(store, id, 1), false);
});

test('an in-memory store (no other connection can reach it) answers from its own change count', async (t) => {
  const store = open(t, ':memory:');
  const id = await twoVersions(store);
  const cache = keyAliveCache(store);
  assert.equal(keyAlive(store, id, 1), true);
  const reads = cache.reads;
  for (let i = 0; i < 100; i++) assert.equal(keyAlive(store, id, 1), true);
  assert.equal(cache.reads, reads);
  assert.equal(await store.configurations.destroyKey(id, 1), 'destroyed');
  assert.equal(keyAlive(store, id, 1), false);
});

test('an unknown configuration or version is not alive', async (t) => {
  const store = open(t, join(tempDir(t), 'svc.db'));
  const id = await twoVersions(store);
  assert.equal(keyAlive(store, id, 3), false);
  assert.equal(keyAlive(store, 'no-such-configuration', 1), false);
});

test('while the store is open, no other process can write around the WAL-index: leaving WAL mode and exclusive locking are refused', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = open(t, path);
  const id = await twoVersions(store);
  assert.equal(keyAlive(store, id, 1), true);
  for (const pragma of ['PRAGMA journal_mode = DELETE', 'PRAGMA locking_mode = EXCLUSIVE']) {
    const script = `
      const { DatabaseSync } = require('node:sqlite');
      const db = new DatabaseSync(process.argv[1]);
      db.exec('PRAGMA busy_timeout = 200');
      try {
        db.prepare(process.argv[2]).get();
        db.exec("UPDATE data_keys SET destroyed_at = '2026-01-01T00:00:00.000Z'");
        console.log('wrote');
      } catch (error) {
        console.log(error.message);
      }
      db.close();`;
    const said = execFileSync(process.execPath, ['-e', script, path, pragma]).toString().trim();
    assert.equal(said, 'database is locked', pragma);
  }
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(syncAlive(store, id, 1), true, 'nothing was written behind the header');
});
