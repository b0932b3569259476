/**
 * The SQLite store itself: the file and its directory, WAL and the PRAGMAs, reopening, the
 * synchronous transaction rule, and the change stamps read from SQLite (TEMP triggers and
 * data_version). The behaviour every backend shares is the contract (sqlite.test.ts).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { openStore } from '../../src/store/db.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { migrate, migrations, schemaVersion } from '../../src/store/sqlite/migrations.ts';
import { OTHERS_CHECK_MS } from '../../src/store/sqlite/open.ts';
import { runInTransaction } from '../../src/store/sqlite/transaction.ts';

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-store-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function pragma(db: DatabaseSync, name: string): unknown {
  const row = db.prepare(`PRAGMA ${name}`).get();
  return row === undefined ? undefined : Object.values(row)[0];
}

const latest = migrations.at(-1)?.version ?? 0;

test('a file store creates its parent directory, uses WAL and the pragmas', (t) => {
  const path = join(tempDir(t), 'nested', 'deeper', 'svc.db');
  const store = openStore(path);
  t.after(() => store.close());
  assert.ok(existsSync(path));
  assert.equal(pragma(sqliteConnection(store), 'journal_mode'), 'wal');
  assert.equal(pragma(sqliteConnection(store), 'synchronous'), 1); // NORMAL
  assert.equal(pragma(sqliteConnection(store), 'foreign_keys'), 1);
  assert.equal(pragma(sqliteConnection(store), 'busy_timeout'), 5000);
  assert.equal(schemaVersion(sqliteConnection(store)), latest);
});

test('an in-memory store is migrated and has foreign keys on', (t) => {
  const store = openStore(':memory:');
  t.after(() => store.close());
  assert.equal(store.path, ':memory:');
  assert.equal(schemaVersion(sqliteConnection(store)), latest);
  assert.equal(pragma(sqliteConnection(store), 'foreign_keys'), 1);
  assert.throws(() => sqliteConnection(store).prepare('INSERT INTO user_roles (user_id, role_id) VALUES (999, 999)').run(), /FOREIGN KEY/);
});

test('reopening runs no migration again and keeps the data', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const first = openStore(path);
  await first.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
  first.close();
  first.close(); // closing twice is harmless

  const second = openStore(path);
  t.after(() => second.close());
  assert.equal(schemaVersion(sqliteConnection(second)), latest);
  assert.equal((await second.users.list()).length, 1);
  // Migration 1 inserts the built-in roles; a second run would have failed on UNIQUE or doubled them.
  assert.equal((await second.roles.list()).length, 4);
  assert.deepEqual(migrate(sqliteConnection(second)), { from: latest, to: latest });
});

test('an async transaction callback is refused and rolled back', async (t) => {
  const store = openStore(':memory:');
  t.after(() => store.close());
  assert.throws(
    () =>
      runInTransaction(sqliteConnection(store), async () => {
        await store.users.create({ name: 'Async', email: 'async@example.com', roleIds: [] });
      }),
    /must be synchronous/,
  );
  assert.equal((await store.users.list()).length, 0);
  assert.equal(sqliteConnection(store).isTransaction, false);
});

test('the change stamp moves at once on this connection’s writes, within OTHERS_CHECK_MS on another’s, and not for log entries', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = openStore(path);
  t.after(() => store.close());
  const other = new DatabaseSync(path);
  t.after(() => other.close());
  // Another connection can write the same tables: the notes are TEMP triggers of the store's
  // own connection, so the function they call need not exist anywhere else.
  other.exec("INSERT INTO roles (name, description) VALUES ('stamp-before', '')");
  await sleep(OTHERS_CHECK_MS + 1);
  const first = store.changeStamp();
  assert.equal(store.changeStamp(), first, 'nothing written: the stamp holds');
  // An own write is visible within the same synchronous run (a revoked key is never served
  // from a cache by the request right behind the revocation).
  sqliteConnection(store).exec("INSERT INTO roles (name, description) VALUES ('stamp-own', '')");
  const afterOwn = store.changeStamp();
  assert.notEqual(afterOwn, first);
  sqliteConnection(store).exec("UPDATE roles SET description = 'x' WHERE name = 'stamp-own'");
  const afterUpdate = store.changeStamp();
  assert.notEqual(afterUpdate, afterOwn);
  sqliteConnection(store).exec("DELETE FROM roles WHERE name = 'stamp-own'");
  const afterDelete = store.changeStamp();
  assert.notEqual(afterDelete, afterUpdate);
  // Log entries are not rows any cache holds.
  await store.logs.insertActivity([{ action: 'x.y', description: 'z', ip: '', createdAt: new Date().toISOString() }]);
  assert.equal(store.changeStamp(), afterDelete, 'an activity entry leaves the stamp alone');
  other.exec("INSERT INTO roles (name, description) VALUES ('stamp-other', '')");
  await sleep(OTHERS_CHECK_MS + 1);
  assert.notEqual(store.changeStamp(), afterDelete, 'another connection’s commit is seen once OTHERS_CHECK_MS has passed');
});

test('othersCommitStamp moves with every commit of another connection and never with this one’s', async (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = openStore(path);
  t.after(() => store.close());
  const other = new DatabaseSync(path);
  t.after(() => other.close());
  const start = store.othersCommitStamp();
  await store.users.create({ name: 'Own', email: 'own@example.com', roleIds: [] });
  await store.logs.insertActivity([{ action: 'x.y', description: 'z', ip: '', createdAt: new Date().toISOString() }]);
  assert.equal(store.othersCommitStamp(), start, 'own commits leave it alone');
  other.exec("INSERT INTO roles (name, description) VALUES ('by-other', '')");
  const afterOther = store.othersCommitStamp();
  assert.notEqual(afterOther, start, 'read afresh: no wait for OTHERS_CHECK_MS');
  other.exec("INSERT INTO activity_logs (action, description, ip, created_at) VALUES ('x.y', 'z', '', '2026-01-01T00:00:00.000Z')");
  assert.notEqual(store.othersCommitStamp(), afterOther, 'a log row written elsewhere counts too');
});

test('ping answers while the store is open and throws once it is closed', () => {
  const store = openStore(':memory:');
  store.ping();
  store.close();
  assert.throws(() => store.ping());
});

test('a log batch written without waiting inside a transaction goes or stays with it, and leaves the busy timeout as it was', async (t) => {
  const store = openStore(join(tempDir(t), 'svc.db'));
  t.after(() => store.close());
  const entry = { action: 'x.y', description: 'z', ip: '', createdAt: '2026-01-01T00:00:00.000Z' };
  const batch = { activity: [entry], api: [], usage: [] };
  await assert.rejects(
    store.transaction(async (tx) => {
      await tx.logs.insertBatch(batch, { wait: false });
      throw new Error('rolled back');
    }),
    /rolled back/,
  );
  assert.equal(await store.logs.count('activity'), 0, 'the batch went back with the transaction');
  assert.equal(pragma(sqliteConnection(store), 'busy_timeout'), 5000);
  await store.transaction(async (tx) => {
    await tx.logs.insertBatch(batch, { wait: false });
    assert.equal(pragma(sqliteConnection(store), 'busy_timeout'), 5000, 'as it was, inside the transaction');
  });
  assert.equal(await store.logs.count('activity'), 1);
  assert.equal(pragma(sqliteConnection(store), 'busy_timeout'), 5000);
  await store.logs.insertBatch(batch, { wait: false });
  assert.equal(await store.logs.count('activity'), 2);
  assert.equal(pragma(sqliteConnection(store), 'busy_timeout'), 5000, 'restored after a batch of its own');
});
