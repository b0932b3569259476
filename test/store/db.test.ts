import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { OTHERS_CHECK_MS } from '../../src/store/sqlite/open.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { migrate, migrations, schemaVersion, type Migration } from '../../src/store/sqlite/migrations.ts';
import { runInTransaction } from '../../src/store/sqlite/transaction.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

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

test('reopening runs no migration again and keeps the data', (t) => {
  const path = join(tempDir(t), 'svc.db');
  const first = openStore(path);
  first.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
  first.close();
  first.close(); // closing twice is harmless

  const second = openStore(path);
  t.after(() => second.close());
  assert.equal(schemaVersion(sqliteConnection(second)), latest);
  assert.equal(second.users.list().length, 1);
  // Migration 1 inserts the built-in roles; a second run would have failed on UNIQUE or doubled them.
  assert.equal(second.roles.list().length, 4);
  assert.deepEqual(migrate(sqliteConnection(second)), { from: latest, to: latest });
});

test('a later migration is applied on reopen, in order, once', (t) => {
  const path = join(tempDir(t), 'svc.db');
  openStore(path).close();
  const db = new DatabaseSync(path);
  t.after(() => db.close());
  const next: Migration[] = [
    ...migrations,
    { version: latest + 1, sql: 'CREATE TABLE extra_a (id INTEGER PRIMARY KEY) STRICT;' },
    { version: latest + 2, sql: 'INSERT INTO extra_a (id) VALUES (7);' },
  ];
  assert.deepEqual(migrate(db, next), { from: latest, to: latest + 2 });
  assert.equal(schemaVersion(db), latest + 2);
  assert.deepEqual(migrate(db, next), { from: latest + 2, to: latest + 2 });
  assert.deepEqual(db.prepare('SELECT id FROM extra_a').all().map((row) => row['id']), [7]);
});

test('a failing migration leaves the database at its old version', (t) => {
  const db = new DatabaseSync(':memory:');
  t.after(() => db.close());
  const broken: Migration[] = [...migrations, { version: latest + 1, sql: 'CREATE TABLE half (id INTEGER); SELECT * FROM missing_table;' }];
  assert.throws(() => migrate(db, broken), /no such table: missing_table/);
  assert.equal(schemaVersion(db), 0);
  assert.equal(db.prepare("SELECT count(*) AS n FROM sqlite_schema WHERE name IN ('roles', 'half')").get()?.['n'], 0);
});

test('a database newer than the code is refused with a clear error', (t) => {
  const path = join(tempDir(t), 'svc.db');
  openStore(path).close();
  const raw = new DatabaseSync(path);
  raw.exec(`PRAGMA user_version = ${latest + 5}`);
  raw.close();
  assert.throws(() => openStore(path), (error: Error) => {
    assert.match(error.message, new RegExp(`schema is version ${latest + 5}.*only knows versions up to ${latest}`));
    return true;
  });
  // Refusing must not have touched the file.
  const check = new DatabaseSync(path);
  t.after(() => check.close());
  assert.equal(schemaVersion(check), latest + 5);
});

test('migration lists with gaps are rejected', () => {
  const db = new DatabaseSync(':memory:');
  try {
    assert.throws(() => migrate(db, [{ version: 2, sql: '' }]), /without gaps/);
  } finally {
    db.close();
  }
});

test('transaction commits, and rolls back everything when the callback throws', (t) => {
  const store = openStore(':memory:');
  t.after(() => store.close());
  const id = store.transaction(() => store.users.create({ name: 'A', email: 'a@example.com', roleIds: [] }).id);
  assert.ok(store.users.findById(id));

  assert.throws(
    () =>
      store.transaction(() => {
        store.users.create({ name: 'B', email: 'b@example.com', roleIds: [1] });
        store.users.update(id, { name: 'changed' });
        throw new Error('boom');
      }),
    /boom/,
  );
  assert.equal(store.users.findByEmail('b@example.com'), undefined);
  assert.equal(store.users.findById(id)?.name, 'A');
  assert.equal(sqliteConnection(store).isTransaction, false);
});

test('a nested transaction that throws rolls back only its own writes', (t) => {
  const store = openStore(':memory:');
  t.after(() => store.close());
  store.transaction(() => {
    store.users.create({ name: 'Outer', email: 'outer@example.com', roleIds: [] });
    assert.throws(() =>
      store.transaction(() => {
        store.users.create({ name: 'Inner', email: 'inner@example.com', roleIds: [] });
        throw new Error('inner');
      }),
    );
    store.transaction(() => store.users.create({ name: 'Inner2', email: 'inner2@example.com', roleIds: [] }));
  });
  assert.deepEqual(
    store.users.list().map((user) => user.name),
    ['Outer', 'Inner2'],
  );
});

test('a repository write that fails half-way inside is atomic', (t) => {
  const store = openStore(':memory:');
  t.after(() => store.close());
  // The user row goes in first, then role 999 violates the foreign key.
  assert.throws(() => store.users.create({ name: 'X', email: 'x@example.com', roleIds: [1, 999] }), /FOREIGN KEY/);
  assert.equal(store.users.list().length, 0);
});

test('an async transaction callback is refused and rolled back', async (t) => {
  const store = openStore(':memory:');
  t.after(() => store.close());
  assert.throws(
    () =>
      runInTransaction(sqliteConnection(store), async () => {
        store.users.create({ name: 'Async', email: 'async@example.com', roleIds: [] });
      }),
    /must be synchronous/,
  );
  assert.equal(store.users.list().length, 0);
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
  store.logs.insertActivity([{ action: 'x.y', description: 'z', ip: '', createdAt: new Date().toISOString() }]);
  assert.equal(store.changeStamp(), afterDelete, 'an activity entry leaves the stamp alone');
  other.exec("INSERT INTO roles (name, description) VALUES ('stamp-other', '')");
  await sleep(OTHERS_CHECK_MS + 1);
  assert.notEqual(store.changeStamp(), afterDelete, 'another connection’s commit is seen once OTHERS_CHECK_MS has passed');
});

test('migrating a version-4 store gives each superseded key version the creation time of the next one, and the current one none', (t) => {
  const db = new DatabaseSync(':memory:');
  t.after(() => db.close());
  db.exec('PRAGMA foreign_keys = ON');
  const v4 = migrations.filter((m) => m.version <= 4);
  assert.deepEqual(migrate(db, v4), { from: 0, to: 4 });
  const insertConfiguration = db.prepare(`INSERT INTO configurations (id, name, type, keyring_id, created_at, updated_at) VALUES (?, ?, 'encryption', randomblob(16), ?, ?)`);
  const insertKey = db.prepare('INSERT INTO data_keys (configuration_id, version, wrapped, created_at, destroyed_at) VALUES (?, ?, randomblob(60), ?, ?)');
  const at = (day: number) => `2024-01-${String(day).padStart(2, '0')}T10:00:00.000Z`;
  insertConfiguration.run('a', 'a', at(1), at(1));
  insertKey.run('a', 1, at(1), at(9)); // destroyed later
  insertKey.run('a', 2, at(3), null);
  insertKey.run('a', 3, at(7), null);
  insertConfiguration.run('b', 'b', at(2), at(2));
  insertKey.run('b', 1, at(2), null);

  assert.deepEqual(migrate(db), { from: 4, to: latest });
  const rows = db.prepare('SELECT configuration_id AS c, version AS v, superseded_at AS s FROM data_keys ORDER BY c, v').all();
  assert.deepEqual(
    rows.map((r) => ({ ...r })),
    [
      { c: 'a', v: 1, s: at(3) },
      { c: 'a', v: 2, s: at(7) },
      { c: 'a', v: 3, s: null },
      { c: 'b', v: 1, s: null },
    ],
  );
});

test('migrating a version-8 store adds the end-user column to api_logs: old rows keep every field with no end user, new rows hold one', (t) => {
  const path = join(tempDir(t), 'v8.db');
  const db = new DatabaseSync(path);
  assert.deepEqual(migrate(db, migrations.filter((m) => m.version <= 8)), { from: 0, to: 8 });
  const at = '2026-01-01T00:00:00.000Z';
  db.prepare(`INSERT INTO api_logs (request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination, duration_ms, ip, created_at)
    VALUES ('old-1', 'GET', 'relay:records /records/7', 200, NULL, NULL, 'cfg', 'http://127.0.0.1:3000', 3, '10.0.0.1', ?)`).run(at);
  db.close();

  const store = openStore(path);
  t.after(() => store.close());
  assert.equal(schemaVersion(sqliteConnection(store)), latest);
  const [old] = store.logs.listApi({ limit: 10, offset: 0 });
  assert.deepEqual({ ...old, id: 0 }, {
    id: 0,
    requestId: 'old-1',
    method: 'GET',
    path: 'relay:records /records/7',
    statusCode: 200,
    apiKeyId: null,
    userId: null,
    configurationId: 'cfg',
    destination: 'http://127.0.0.1:3000',
    endUser: null,
    durationMs: 3,
    ip: '10.0.0.1',
    createdAt: at,
  });
  store.logs.insertApi([{ requestId: 'new-1', method: 'GET', path: '/x', statusCode: 200, endUser: 'auth0|kate', durationMs: 1, ip: '', createdAt: at }]);
  assert.deepEqual(
    store.logs.listApi({ limit: 10, offset: 0 }).map((row) => [row.requestId, row.endUser]),
    [
      ['new-1', 'auth0|kate'],
      ['old-1', null],
    ],
  );
});

test('othersCommitStamp moves with every commit of another connection and never with this one’s', (t) => {
  const path = join(tempDir(t), 'svc.db');
  const store = openStore(path);
  t.after(() => store.close());
  const other = new DatabaseSync(path);
  t.after(() => other.close());
  const start = store.othersCommitStamp();
  store.users.create({ name: 'Own', email: 'own@example.com', roleIds: [] });
  store.logs.insertActivity([{ action: 'x.y', description: 'z', ip: '', createdAt: new Date().toISOString() }]);
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
