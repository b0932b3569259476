/**
 * DESIGN §13 in the store: ids are never reused, emails are stored normalised, a user's
 * stamp moves with every change of its credentials; and migration 8, which brings a store
 * of version 4 there, keeping every row, index and foreign key.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { normalizeEmail } from '../../src/store/identity-text.ts';
import { migrate, migrations, schemaVersion } from '../../src/store/sqlite/migrations.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const colors = { bgColor: '#aa0000', fgColor: '#ffffff' };

function memoryStore(t: TestContext) {
  const store = openStore(':memory:');
  t.after(() => store.close());
  return store;
}

test('regression: the ids of deleted users, classifications, configurations and API keys are never given again', (t) => {
  const store = memoryStore(t);
  const keep = store.users.create({ name: 'Keep', email: 'keep@example.com', roleIds: [] });
  const gone = store.users.create({ name: 'Gone', email: 'gone@example.com', roleIds: [] });
  sqliteConnection(store).prepare('DELETE FROM users WHERE id = ?').run(gone.id);
  const next = store.users.create({ name: 'Next', email: 'next@example.com', roleIds: [] });
  assert.ok(next.id > gone.id, `a new user gets ${next.id}, not the deleted ${gone.id}`);

  const phi = store.classifications.create({ name: 'PHI', ...colors, userIds: [keep.id] });
  assert.ok(store.classifications.delete(phi.id));
  const other = store.classifications.create({ name: 'PHI', ...colors, userIds: [keep.id] });
  assert.ok(other.id > phi.id, `a new classification gets ${other.id}, not the deleted ${phi.id}`);

  // Configurations and API keys are named by random UUIDs: a new one never takes an old one's.
  const provider = store.configurations.create({ name: 'dir', type: 'provider', provider: 'google' });
  assert.ok(store.configurations.delete(provider.id));
  assert.notEqual(store.configurations.create({ name: 'dir', type: 'provider', provider: 'google' }).id, provider.id);
  const key = store.apiKeys.create({ name: 'k', prefix: 'svc_abc', keyHash: randomBytes(32), userId: keep.id });
  sqliteConnection(store).prepare('DELETE FROM api_keys WHERE id = ?').run(key.id);
  assert.notEqual(store.apiKeys.create({ name: 'k', prefix: 'svc_abc', keyHash: randomBytes(32), userId: keep.id }).id, key.id);
});

test('emails are stored and found normalised: NFKC and case folding', (t) => {
  const store = memoryStore(t);
  const kate = store.users.create({ name: 'Kate', email: 'Kate@Example.com', roleIds: [] });
  assert.equal(kate.email, 'kate@example.com');
  for (const spelling of ['\u212Aate@example.com', 'ｋａｔｅ@example.com', 'KATE@EXAMPLE.COM', 'kate@ｅxample.com']) {
    assert.equal(store.users.findByEmail(spelling)?.id, kate.id, spelling);
    assert.throws(() => store.users.create({ name: 'Twin', email: spelling, roleIds: [] }), /UNIQUE/, spelling);
  }
  assert.equal(normalizeEmail('STRAẞE@example.com'), 'strasse@example.com');
  assert.equal(normalizeEmail('ſam@example.com'), 'sam@example.com');
  assert.equal(store.users.findByEmail('kate@example.org'), undefined);
});

test('a user’s stamp moves forward with every change, roles included, even within a millisecond', (t) => {
  const store = memoryStore(t);
  const [owner, viewer] = [store.roles.findByName('owner')!.id, store.roles.findByName('viewer')!.id];
  const user = store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [viewer] });
  const stamps = [user.updatedAt];
  const changes = [
    () => store.users.update(user.id, { passwordHash: 'h2' }),
    () => store.users.update(user.id, { disabled: true }),
    () => store.users.update(user.id, { disabled: false }),
    () => store.users.setRoles(user.id, [owner]),
    () => store.users.setRoles(user.id, [viewer]),
  ];
  for (const change of changes) {
    change();
    stamps.push(store.users.findById(user.id)!.updatedAt);
  }
  for (let i = 1; i < stamps.length; i++) assert.ok(stamps[i]! > stamps[i - 1]!, `change ${i}: ${stamps[i]} after ${stamps[i - 1]}`);
  // Setting the roles a user already has changes nothing.
  store.users.setRoles(user.id, [viewer]);
  assert.equal(store.users.findById(user.id)!.updatedAt, stamps.at(-1));
});

// ---------------------------------------------------------------------------------------
// Migration 5 on a store of version 4

function tempPath(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-identity-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'svc.db');
}

const NOW = '2024-05-01T10:00:00.000Z';

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

test('migration 8: tables rebuilt with AUTOINCREMENT keep every row, column, index and foreign key', (t) => {
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
  assert.deepEqual(db.prepare("SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'index' ORDER BY name").all(), before.indexes, 'every index is back');
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
  assert.ok(store.classifications.delete(1));
  assert.equal(sqliteConnection(store).prepare('SELECT count(*) AS n FROM classification_users').get()!['n'], 0, 'deleting a classification cascades to its members');
  // New ids start above every id the store still knew of, rows and logs.
  assert.equal(store.users.create({ name: 'New', email: 'new@example.com', roleIds: [] }).id, 10, 'above user 9, named by an API log');
  assert.equal(store.classifications.create({ name: 'New', ...colors }).id, 8, 'above classification 7, named by the activity log (not the 999999 its name spells)');
});

test('migration 8 normalises emails; of two that normalise alike, one keeps the email and the other is disabled and logged', (t) => {
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
  assert.equal(store.users.findByEmail('\u212Aate@example.com')?.id, 2, 'the lookalike finds the one identity');
  assert.equal(store.users.findByEmail('ＢＯＢ@example.com')?.id, 6);
});
