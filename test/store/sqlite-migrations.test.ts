/**
 * SQLite migrations: the runner (order, gaps, failure, a newer file refused) and the
 * upgrade of stores written by earlier versions, each built at its old schema and filled
 * with rows as that version wrote them.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { migrate, migrations, schemaVersion, type Migration } from '../../src/store/sqlite/migrations.ts';

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-store-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const tempPath = (t: TestContext): string => join(tempDir(t), 'svc.db');

const latest = migrations.at(-1)?.version ?? 0;
const colors = { bgColor: '#aa0000', fgColor: '#ffffff' };
const NOW = '2024-05-01T10:00:00.000Z';

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

test('migrating a version-8 store adds the end-user column to api_logs: old rows keep every field with no end user, new rows hold one', async (t) => {
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
  const [old] = await store.logs.listApi({ limit: 10, offset: 0 });
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
  await store.logs.insertApi([{ requestId: 'new-1', method: 'GET', path: '/x', statusCode: 200, endUser: 'auth0|kate', durationMs: 1, ip: '', createdAt: at }]);
  assert.deepEqual(
    (await store.logs.listApi({ limit: 10, offset: 0 })).map((row) => [row.requestId, row.endUser]),
    [
      ['new-1', 'auth0|kate'],
      ['old-1', null],
    ],
  );
});

// ---------------------------------------------------------------------------------------
// Migration 8 (DESIGN §13: ids never reused, emails normalised) on a store of version 7

/** A store as version 4 left it: plain INTEGER PRIMARY KEYs, emails as typed, deleted rows behind. */
/** The migration that rebuilds users and classifications and normalises emails. */
const IDENTITIES = 8;

/** A store at the version just before it. */
function storeBeforeIdentities(path: string): DatabaseSync {
  const db = new DatabaseSync(path);
  db.exec('PRAGMA foreign_keys = ON');
  migrate(db, migrations.slice(0, IDENTITIES - 1));
  assert.equal(schemaVersion(db), IDENTITIES - 1);
  // A column another migration may have added before this one: it must survive the rebuild.
  db.exec('ALTER TABLE users ADD COLUMN note TEXT');
  const user = db.prepare(`INSERT INTO users (id, name, email, password_hash, disabled, source, created_at, updated_at, note) VALUES (?, ?, ?, 'h', 0, 'api', ?, ?, ?)`);
  user.run(1, 'Ada', 'ada@example.com', NOW, NOW, 'first');
  user.run(2, 'Kate', 'Kate@Example.com', NOW, NOW, null);
  user.run(3, 'Kelvin Kate', '\u212Aate@example.com', NOW, NOW, null);
  user.run(4, 'Wide Bob', 'Ｂob@example.com', NOW, NOW, null);
  user.run(6, 'Bob', 'bob@example.com', NOW, NOW, null);
  user.run(8, 'Gone', 'gone@example.com', NOW, NOW, null);
  db.prepare("INSERT INTO user_roles (user_id, role_id) SELECT ?, id FROM roles WHERE name = 'owner'").run(1);
  db.prepare("INSERT INTO user_roles (user_id, role_id) SELECT ?, id FROM roles WHERE name = 'viewer'").run(2);
  db.prepare(`INSERT INTO api_keys (id, name, prefix, key_hash, user_id, created_at, updated_at) VALUES (?, 'kate', 'svc_kate', ?, 2, ?, ?)`).run(randomUUID(), randomBytes(32), NOW, NOW);
  const classification = db.prepare(`INSERT INTO classifications (id, name, slug, bg_color, fg_color, created_at, updated_at) VALUES (?, ?, ?, '#000000', '#ffffff', ?, ?)`);
  classification.run(1, 'PHI', 'phi', NOW, NOW);
  classification.run(2, 'PCI', 'pci', NOW, NOW);
  classification.run(3, 'Gone', 'gone', NOW, NOW);
  db.prepare('INSERT INTO classification_users (classification_id, user_id) VALUES (1, 1), (1, 2)').run();
  db.prepare("INSERT INTO classification_roles (classification_id, role_id) SELECT 2, id FROM roles WHERE name = 'owner'").run();
  // Deleted before the upgrade: user 9 (named by an API log) and classification 7 (named by
  // the activity entry of its deletion), then the highest rows themselves.
  db.prepare(`INSERT INTO api_logs (request_id, method, path, status_code, user_id, duration_ms, ip, created_at) VALUES ('r1', 'GET', '/api/v3/roles', 200, 9, 1, '', ?)`).run(NOW);
  db.prepare(`INSERT INTO activity_logs (action, description, ip, user_id, created_at) VALUES ('classification.deleted', ?, '', 1, ?)`)
    .run('Deleted classification "Old (id 999999, slug x)." (id 7, slug old).', NOW);
  db.exec('DELETE FROM users WHERE id = 8; DELETE FROM classifications WHERE id = 3;');
  return db;
}

test('migration 8: tables rebuilt with AUTOINCREMENT keep every row, column, index and foreign key', async (t) => {
  const path = tempPath(t);
  const db = storeBeforeIdentities(path);
  const before = {
    classificationUsers: db.prepare('SELECT * FROM classification_users ORDER BY 1, 2').all(),
    userRoles: db.prepare('SELECT * FROM user_roles ORDER BY 1, 2').all(),
    apiKeys: db.prepare('SELECT id, user_id FROM api_keys').all(),
    indexes: db.prepare("SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'index' ORDER BY name").all(),
  };
  migrate(db);
  assert.equal(schemaVersion(db), migrations.at(-1)!.version);
  assert.equal((db.prepare('PRAGMA foreign_keys').get() as { foreign_keys: number }).foreign_keys, 1, 'foreign keys are on again');
  for (const table of ['users', 'classifications']) {
    const { sql } = db.prepare("SELECT sql FROM sqlite_schema WHERE name = ?").get(table) as { sql: string };
    assert.match(sql, /^CREATE TABLE "?users"?|^CREATE TABLE "?classifications"?/);
    assert.match(sql, /id INTEGER PRIMARY KEY AUTOINCREMENT/, table);
  }
  assert.deepEqual(db.prepare('SELECT * FROM classification_users ORDER BY 1, 2').all(), before.classificationUsers);
  assert.deepEqual(db.prepare('SELECT * FROM user_roles ORDER BY 1, 2').all(), before.userRoles);
  assert.deepEqual(db.prepare('SELECT id, user_id FROM api_keys').all(), before.apiKeys);
  // Tables that later migrations add bring indexes of their own.
  const tablesBefore = new Set((before.indexes as Array<{ tbl_name: string }>).map((index) => index.tbl_name));
  const indexesAfter = (db.prepare("SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'index' ORDER BY name").all() as Array<{ tbl_name: string }>).filter((index) => tablesBefore.has(index.tbl_name));
  assert.deepEqual(indexesAfter, before.indexes, 'every index is back');
  assert.deepEqual(db.prepare('SELECT id, note FROM users ORDER BY id').all().map((r) => ({ ...r })), [
    { id: 1, note: 'first' }, { id: 2, note: null }, { id: 3, note: null }, { id: 4, note: null }, { id: 6, note: null },
  ]);
  assert.deepEqual(db.prepare('PRAGMA foreign_key_check').all(), []);
  db.close();

  const store = openStore(path);
  t.after(() => store.close());
  // Foreign keys still bind the children to the rebuilt tables, cascades included.
  assert.throws(() => sqliteConnection(store).prepare('INSERT INTO classification_users (classification_id, user_id) VALUES (1, 999)').run(), /FOREIGN KEY/);
  assert.throws(() => sqliteConnection(store).prepare('DELETE FROM users WHERE id = 2').run(), /FOREIGN KEY/, 'an API key still holds user 2');
  assert.ok(await store.classifications.delete(1));
  assert.equal(sqliteConnection(store).prepare('SELECT count(*) AS n FROM classification_users').get()!['n'], 0, 'deleting a classification cascades to its members');
  // New ids start above every id the store still knew of, rows and logs.
  assert.equal((await store.users.create({ name: 'New', email: 'new@example.com', roleIds: [] })).id, 10, 'above user 9, named by an API log');
  assert.equal((await store.classifications.create({ name: 'New', ...colors })).id, 8, 'above classification 7, named by the activity log (not the 999999 its name spells)');
});

test('migration 8 normalises emails; of two that normalise alike, one keeps the email and the other is disabled and logged', async (t) => {
  const path = tempPath(t);
  const db = storeBeforeIdentities(path);
  migrate(db);
  const users = db.prepare('SELECT id, email, disabled FROM users ORDER BY id').all().map((r) => ({ ...r }));
  assert.deepEqual(users, [
    { id: 1, email: 'ada@example.com', disabled: 0 },
    // Neither was in normal form: the older keeps the identity.
    { id: 2, email: 'kate@example.com', disabled: 0 },
    { id: 3, email: 'kate+duplicate-3@example.com', disabled: 1 },
    // The one already in normal form keeps it, though it is the newer.
    { id: 4, email: 'bob+duplicate-4@example.com', disabled: 1 },
    { id: 6, email: 'bob@example.com', disabled: 0 },
  ]);
  const logged = db.prepare("SELECT user_id, description FROM activity_logs WHERE action = 'user.disabled' ORDER BY user_id").all().map((r) => ({ ...r }));
  assert.deepEqual(logged.map((r) => r['user_id']), [3, 4]);
  assert.match(String(logged[0]!['description']), /"\u212Aate@example\.com" \(id 3\).*normalises to kate@example\.com, the email of user 2/);
  db.close();

  const store = openStore(path);
  t.after(() => store.close());
  assert.equal((await store.users.findByEmail('\u212Aate@example.com'))?.id, 2, 'the lookalike finds the one identity');
  assert.equal((await store.users.findByEmail('ＢＯＢ@example.com'))?.id, 6);
});

// ---------------------------------------------------------------------------------------
// Migration 10 (DESIGN §14: reveal rules) on a store of version 9

const REVEAL = 9;

test('migration 10: a store of version 9 keeps its classifications, which reveal nothing beyond their members, and its usage rows, which record no levels', async (t) => {
  const path = tempPath(t);
  const db = new DatabaseSync(path);
  db.exec('PRAGMA foreign_keys = ON');
  migrate(db, migrations.slice(0, REVEAL - 1));
  assert.equal(schemaVersion(db), REVEAL - 1);
  db.prepare(`INSERT INTO classifications (name, slug, bg_color, fg_color, created_at, updated_at) VALUES ('PHI', 'phi', '#000000', '#ffffff', ?, ?)`).run(NOW, NOW);
  db.prepare(`INSERT INTO usage_logs (request_id, configuration_id, mode, field_count, bytes, created_at) VALUES ('r1', 'c', 'decrypt', 2, 10, ?)`).run(NOW);
  migrate(db);
  assert.equal(schemaVersion(db), migrations.at(-1)!.version);
  db.close();

  const store = openStore(path);
  t.after(() => store.close());
  const phi = (await store.classifications.findBySlug('phi'))!;
  assert.deepEqual(phi.reveal, []);
  assert.deepEqual(phi.revealDefault, { level: 'deny', mask: null });
  const [row] = await store.logs.listUsage({ limit: 1, offset: 0 });
  assert.equal(row!.reveal, null);
  // The new columns take what the repository writes, and refuse what it never would.
  const updated = (await store.classifications.update(phi.id, {
    reveal: [{ to: { users: [], roles: [1], groups: ['g'] }, level: 'mask', mask: { keep_first: 0, keep_last: 4, char: '*' } }],
    revealDefault: { level: 'mask', mask: 'ssn' },
  }))!;
  assert.deepEqual(updated.reveal, [{ to: { users: [], roles: [1], groups: ['g'] }, level: 'mask', mask: { keep_first: 0, keep_last: 4, char: '*' } }]);
  assert.deepEqual((await store.classifications.findById(phi.id))!.revealDefault, { level: 'mask', mask: 'ssn' });
  assert.throws(() => sqliteConnection(store).prepare("UPDATE classifications SET reveal_default = 'plain' WHERE id = ?").run(phi.id), /CHECK/);
  assert.throws(() => sqliteConnection(store).prepare("UPDATE classifications SET reveal = '{' WHERE id = ?").run(phi.id), /CHECK/);
  assert.throws(() => sqliteConnection(store).prepare("UPDATE classifications SET reveal = '{}' WHERE id = ?").run(phi.id), /CHECK/);
});
