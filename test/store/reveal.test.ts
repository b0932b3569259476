/**
 * Reveal rules in the store (DESIGN §14): migration 9 brings a store of version 8 there
 * (existing classifications reveal nothing new, existing usage rows record no levels),
 * the repository keeps grants and defaults, and a column that does not hold what the store
 * writes fails closed.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { migrate, migrations, schemaVersion } from '../../src/store/sqlite/migrations.ts';
import { parseDefault, parseGrants } from '../../src/store/reveal-rules.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const REVEAL = 9;
const NOW = '2024-05-01T10:00:00.000Z';

function tempPath(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-reveal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'svc.db');
}

test('migration 10: a store of version 9 keeps its classifications, which reveal nothing beyond their members, and its usage rows, which record no levels', (t) => {
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
  const phi = store.classifications.findBySlug('phi')!;
  assert.deepEqual(phi.reveal, []);
  assert.deepEqual(phi.revealDefault, { level: 'deny', mask: null });
  const [row] = store.logs.listUsage({ limit: 1, offset: 0 });
  assert.equal(row!.reveal, null);
  // The new columns take what the repository writes, and refuse what it never would.
  const updated = store.classifications.update(phi.id, {
    reveal: [{ to: { users: [], roles: [1], groups: ['g'] }, level: 'mask', mask: { keep_first: 0, keep_last: 4, char: '*' } }],
    revealDefault: { level: 'mask', mask: 'ssn' },
  })!;
  assert.deepEqual(updated.reveal, [{ to: { users: [], roles: [1], groups: ['g'] }, level: 'mask', mask: { keep_first: 0, keep_last: 4, char: '*' } }]);
  assert.deepEqual(store.classifications.findById(phi.id)!.revealDefault, { level: 'mask', mask: 'ssn' });
  assert.throws(() => sqliteConnection(store).prepare("UPDATE classifications SET reveal_default = 'plain' WHERE id = ?").run(phi.id), /CHECK/);
  assert.throws(() => sqliteConnection(store).prepare("UPDATE classifications SET reveal = '{' WHERE id = ?").run(phi.id), /CHECK/);
  assert.throws(() => sqliteConnection(store).prepare("UPDATE classifications SET reveal = '{}' WHERE id = ?").run(phi.id), /CHECK/);
});

test('stored rules that are not what the store writes fail closed: no grants, a deny default', () => {
  const good = '[{"level":"mask","mask":"last4","to":{"groups":[],"roles":[2],"users":[]}}]';
  assert.equal(parseGrants(good).length, 1);
  for (const bad of [
    '[{"level":"mask","mask":null,"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"plain","mask":"last4","to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"peek","mask":null,"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"mask","mask":{"keep_first":99,"keep_last":0,"char":"*"},"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"mask","mask":{"keep_first":0,"keep_last":0,"char":"**"},"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"token","mask":null,"to":{"groups":[],"roles":["2"],"users":[]}}]',
    `[${good.slice(1, -1)},{"level":"plain"}]`,
    'not json',
    '{}',
  ]) {
    assert.deepEqual(parseGrants(bad), [], bad);
  }
  assert.deepEqual(parseDefault('token', null), { level: 'token', mask: null });
  assert.deepEqual(parseDefault('mask', '"email"'), { level: 'mask', mask: 'email' });
  for (const [level, mask] of [['plain', null], ['mask', null], ['mask', '"nope"'], ['token', '"last4"']] as const) {
    assert.deepEqual(parseDefault(level, mask), { level: 'deny', mask: null }, `${level} ${mask}`);
  }
});
