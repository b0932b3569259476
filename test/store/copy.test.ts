/**
 * `svc-sidecar store copy`: a SQLite store with real data, made through the repositories,
 * copied by the command line into a real PostgreSQL database (test/support/postgres.ts),
 * then read back through the PostgreSQL store's repositories and row by row.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { runCli as cli, type CliRun } from '../support/cli.ts';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import pg from 'pg';
import { COPY_TABLES, CopyRefusedError, copyStore } from '../../src/store/copy.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import type { NewApiLog } from '../../src/store/logs.ts';
import { types } from '../../src/store/postgres/executor.ts';
import { openPostgresStore } from '../../src/store/postgres/open.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { sqliteCopySource } from '../../src/store/sqlite/copy-source.ts';
import { postgresPerFile } from '../support/postgres.ts';

/** Trust authentication ignores it; the command must never print it. */
const PASSWORD = 'Pw-never-shown-7f3a';

const postgres = postgresPerFile();
const skip = postgres.skip;


const runCli = (args: readonly string[]): Promise<CliRun> => cli(args, { env: { PGPASSWORD: undefined }, timeout: 120_000, cwd: '/' });

/** A new database; its URL with the password the command must keep to itself. */
async function database(): Promise<{ name: string; url: string; plain: string }> {
  const { name, url: plain } = await postgres.database('svc_copy');
  return { name, plain, url: plain.replace('postgres://svc@', `postgres://svc:${PASSWORD}@`) };
}

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-copy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const at = (minute: number): string => new Date(Date.UTC(2026, 0, 1, 0, minute)).toISOString();
const LOG_ROWS = 2_500;

/** A store with something in every table, made the way the program makes it. */
async function fillStore(path: string): Promise<void> {
  const store = openStore(path);
  try {
    const owner = (await store.roles.findByName('owner'))!;
    const developer = (await store.roles.findByName('developer'))!;
    const viewer = (await store.roles.findByName('viewer'))!;
    const ada = await store.users.create({ name: 'Ada', email: 'ada@example.com', passwordHash: 'scrypt$hash-of-ada', roleIds: [owner.id] });
    const bob = await store.users.create({ name: 'Bob', email: 'bob@example.com', roleIds: [developer.id, viewer.id], twoFactorEnabled: true });
    const carol = await store.users.create({ name: 'Carol', email: 'carol@example.com', roleIds: [viewer.id], source: 'seed' });
    await store.users.update(carol.id, { disabled: true });

    const payments = await store.configurations.create({
      name: 'payments',
      type: 'encryption',
      proxySlug: 'pay',
      keyringId: randomBytes(16),
      firstWrappedKey: randomBytes(60),
      fields: ['card.number', 'ssn'],
      destinations: ['https://api.example.com'],
    });
    await store.configurations.addKey(payments.id, 2, randomBytes(60));
    assert.equal(await store.configurations.destroyKey(payments.id, 1), 'destroyed');
    const workspace = await store.configurations.create({
      name: 'workspace',
      type: 'provider',
      provider: 'google',
      extra: { groups: [{ id: 'g-1', name: 'Finance', members: ['bob@example.com'] }] },
    });
    // Inserted last, while its random id may sort anywhere: the lists keep insertion order.
    await store.configurations.create({ name: 'archive', type: 'encryption', deterministic: true, keyringId: randomBytes(16), firstWrappedKey: randomBytes(60) });

    await store.apiKeys.create({ name: 'ops', prefix: 'svc_opsopsop', keyHash: randomBytes(32), userId: ada.id });
    const old = await store.apiKeys.create({ name: 'old', prefix: 'svc_oldoldol', keyHash: randomBytes(32), userId: bob.id, permissions: ['data.encrypt'], configurations: [payments.id] });
    await store.apiKeys.revoke(old.id);
    await store.apiKeys.create({ name: 'bob', prefix: 'svc_bobbobbo', keyHash: randomBytes(32), userId: bob.id });

    await store.classifications.create({
      name: 'PHI',
      description: 'health data',
      bgColor: '#ff0000',
      fgColor: '#ffffff',
      emoji: '🩺',
      userIds: [ada.id],
      roleIds: [developer.id],
      providers: [{ configurationId: workspace.id, gwsGroups: [{ id: 'g-1', name: 'Finance' }] }],
      reveal: [
        { to: { users: [bob.id], roles: [], groups: [] }, level: 'mask', mask: 'last4' },
        { to: { users: [], roles: [viewer.id], groups: ['g-1'] }, level: 'redact', mask: null },
      ],
      revealDefault: { level: 'mask', mask: { char: '#', keep_first: 1, keep_last: 2 } },
    });
    await store.classifications.create({ name: 'PCI', bgColor: '#00ff00', fgColor: '#000000', revealDefault: { level: 'token', mask: null } });
    // The highest id so far, deleted: it is never handed out again, on either database.
    const gone = await store.classifications.create({ name: 'Gone', bgColor: '#000000', fgColor: '#ffffff' });
    assert.ok(await store.classifications.delete(gone.id));

    await store.logs.insertActivity([
      { action: 'user.created', description: 'Ada created', ip: '10.0.0.1', userId: ada.id, causerEmail: ada.email, requestId: 'r-1', createdAt: at(1) },
      { action: 'login', description: 'Bob logged in', ip: '10.0.0.2', userId: bob.id, createdAt: at(2) },
    ]);
    const api = (i: number): NewApiLog => ({
      requestId: `req-${i}`,
      method: i % 2 === 0 ? 'POST' : 'GET',
      path: `/proxy/pay/${i}`,
      statusCode: i % 7 === 0 ? 502 : 200,
      apiKeyId: i % 3 === 0 ? old.id : null,
      userId: i % 5 === 0 ? bob.id : null,
      configurationId: payments.id,
      destination: i % 2 === 0 ? 'https://api.example.com' : null,
      endUser: i % 11 === 0 ? `user-${i}` : null,
      durationMs: i + 0.125,
      ip: '10.0.0.3',
      createdAt: at(10 + (i % 600)),
    });
    await store.logs.insertApi(Array.from({ length: LOG_ROWS }, (_, i) => api(i)));
    await store.logs.insertUsage([
      { requestId: 'req-1', configurationId: payments.id, apiKeyId: old.id, userId: bob.id, mode: 'encrypt', fieldCount: 2, bytes: 80, createdAt: at(3) },
      { requestId: 'req-2', configurationId: payments.id, mode: 'decrypt', fieldCount: 3, bytes: 99, reveal: { plain: 1, mask: 1, redact: 1, token: 0 }, createdAt: at(4) },
    ]);
    // Rows a replica shipped: their replica columns come along.
    await store.shippedLogs.receive('replica-a', 'a'.repeat(32), {
      api: [{ id: 9, request_id: 'shipped-1', method: 'POST', path: '/x', status_code: 200, api_key_id: null, user_id: null, configuration_id: null, destination: null, duration_ms: 2.5, ip: '10.1.0.1', created_at: at(5) }],
      usage: [],
    });

    await store.tokenRevocations.revoke('jti-logged-out', '2099-01-01T00:00:00.000Z');
    await store.replication.putSync('published', { version: 7, digest: 'd'.repeat(64), sections: '{"roles":"x"}', body: null, updatedAt: at(6) });
    await store.replication.putSync('applied', { version: 3, digest: 'e'.repeat(64), sections: '{}', body: randomBytes(40), updatedAt: at(7) });
    await store.shippedLogs.putCursor('api', { lastId: 12, lastRequestId: 'req-12', idBase: 1000 });
    await store.shippedLogs.instanceId();
    await store.meta.set('master_key_check', 'check-value');
    await store.loginFailures.attempt('eve@example.com', Date.UTC(2026, 0, 1), 60_000, 5);
  } finally {
    store.close();
  }
}

/** Every row of every table, in the copy's order, BLOBs as hex: what the two databases must agree on. */
function sqliteRows(store: Store): Record<string, unknown[]> {
  const db = sqliteConnection(store);
  const out: Record<string, unknown[]> = {};
  for (const table of COPY_TABLES) {
    const rows = db.prepare(`SELECT * FROM ${table.name} ORDER BY ${table.order.join(', ')}`).all() as Array<Record<string, unknown>>;
    out[table.name] = rows.map(normalised);
  }
  return out;
}

async function postgresRows(url: string): Promise<Record<string, unknown[]>> {
  const client = new pg.Client({ connectionString: url, types });
  await client.connect();
  try {
    const out: Record<string, unknown[]> = {};
    for (const table of COPY_TABLES) {
      // `seq` stands where SQLite's rowid does.
      const order = table.order.map((column) => (column === 'rowid' ? 'seq' : column)).join(', ');
      const { rows } = await client.query(`SELECT * FROM ${table.name} ORDER BY ${order}`);
      out[table.name] = (rows as Array<Record<string, unknown>>).map(({ seq: _seq, ...row }) => normalised(row));
    }
    return out;
  } finally {
    await client.end();
  }
}

function normalised(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(row)) out[key] = value instanceof Uint8Array ? `hex:${Buffer.from(value).toString('hex')}` : value;
  return out;
}

/** Everything a second copy must leave alone: every row, and the state version. */
async function targetState(url: string): Promise<unknown> {
  const client = new pg.Client({ connectionString: url, types });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT version FROM svc_state');
    return { rows: await postgresRows(url), state: rows };
  } finally {
    await client.end();
  }
}

const copy = (from: string, to: string) => runCli(['store', 'copy', '--from', from, '--to', to]);

test('store copy moves a SQLite store into PostgreSQL: every row and id, the same snapshot, new ids above the copied ones', { skip }, async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'svc.db');
  await fillStore(path);
  const { url, plain } = await database();

  const run = await copy(path, url);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stderr, '');
  assert.ok(!run.stdout.includes(PASSWORD), run.stdout);
  assert.match(run.stdout, /^Copied .*svc\.db into postgres:\/\/svc:\*\*\*@127\.0\.0\.1:\d+\/svc_copy_\d+:\n/);
  assert.match(run.stdout, /\n {2}api_logs +2501\n/);
  assert.match(run.stdout, /\n {2}users +3\n/);
  assert.match(run.stdout, /\n {2}data_keys +3\n/);
  for (const table of COPY_TABLES) assert.match(run.stdout, new RegExp(`\\n  ${table.name} +\\d+\\n`), `${table.name} missing from the summary`);

  const source = openStore(path);
  t.after(() => source.close());
  const target = await openPostgresStore(plain, { max: 4 });
  t.after(() => target.close());
  assert.equal(target.created, false);

  // Row by row, every table.
  const expected = sqliteRows(source);
  assert.deepEqual(await postgresRows(plain), expected);
  assert.equal(expected['api_logs']!.length, LOG_ROWS + 1);

  // The same state, as replication reads it: replicas see no change of digest.
  assert.deepEqual(await target.replication.readState(), await source.replication.readState());

  // Through the repositories.
  assert.deepEqual(await target.users.list(), await source.users.list());
  for (const user of await source.users.list()) {
    assert.deepEqual(await target.users.rolesOf(user.id), await source.users.rolesOf(user.id));
    assert.deepEqual(await target.users.permissionsOf(user.id), await source.users.permissionsOf(user.id));
  }
  assert.equal((await target.users.findByEmail('ADA@example.com'))?.passwordHash, 'scrypt$hash-of-ada');
  assert.deepEqual(await target.roles.list(), await source.roles.list());
  const configurations = await source.configurations.list();
  // (Listed by creation time, then name: made in one millisecond, they may tie.)
  assert.deepEqual(configurations.map((c) => c.name).sort(), ['archive', 'payments', 'workspace']);
  assert.deepEqual(await target.configurations.list(), configurations);
  for (const configuration of configurations) {
    assert.deepEqual(await target.configurations.keys(configuration.id), await source.configurations.keys(configuration.id));
  }
  const payments = (await target.configurations.findBySlug('pay'))!;
  assert.equal(payments.keyVersion, 2);
  const keys = await target.configurations.keys(payments.id);
  assert.deepEqual(keys.map((k) => [k.version, k.destroyedAt !== null, k.wrapped.length]), [[1, true, 0], [2, false, 60]]);
  assert.equal(await target.configurations.keyAlive(payments.id, 1), false);
  assert.deepEqual((await target.apiKeys.list()).map((k) => k.name), ['ops', 'old', 'bob']);
  assert.deepEqual(await target.apiKeys.list(), await source.apiKeys.list());
  const old = (await target.apiKeys.findByName('old'))!;
  assert.equal(old.status, 'revoked');
  assert.deepEqual(await target.apiKeys.findByHash(old.keyHash), old);
  assert.deepEqual(await target.classifications.list(), await source.classifications.list());
  assert.deepEqual(await target.classifications.allMembers(), await source.classifications.allMembers());
  const phi = (await target.classifications.findBySlug('phi'))!;
  assert.equal(phi.revealDefault.level, 'mask');
  assert.equal(phi.reveal.length, 2);
  assert.equal((await target.classifications.members(phi.id)).providers[0]!.configurationId, (await target.configurations.findByName('workspace'))!.id);
  for (const kind of ['activity', 'api', 'usage'] as const) assert.equal(await target.logs.count(kind), await source.logs.count(kind));
  assert.deepEqual(await target.logs.apiPage({ limit: 50, offset: 0 }), await source.logs.apiPage({ limit: 50, offset: 0 }));
  const second = (await source.logs.apiPage({ limit: 50, offset: 0 })).next!;
  assert.deepEqual(await target.logs.apiPage({ limit: 50, offset: 0, after: second }), await source.logs.apiPage({ limit: 50, offset: 0, after: second }));
  assert.deepEqual(await target.logs.unifiedPage(['activity', 'api', 'usage'], { limit: 20, offset: 0 }), await source.logs.unifiedPage(['activity', 'api', 'usage'], { limit: 20, offset: 0 }));
  assert.deepEqual(await target.logs.usagePage({ limit: 10, offset: 0 }), await source.logs.usagePage({ limit: 10, offset: 0 }));
  assert.equal(await target.tokenRevocations.isRevoked('jti-logged-out'), true);
  assert.deepEqual(await target.replication.getSync('published'), await source.replication.getSync('published'));
  assert.deepEqual(await target.replication.getSync('applied'), await source.replication.getSync('applied'));
  assert.deepEqual(await target.shippedLogs.getCursor('api'), await source.shippedLogs.getCursor('api'));
  assert.equal(await target.shippedLogs.instanceId(), await source.shippedLogs.instanceId());
  assert.equal(await target.meta.get('master_key_check'), 'check-value');

  // New rows get new ids: above every copied id, and above ids SQLite handed out and deleted.
  const users = await source.users.list();
  const dana = await target.users.create({ name: 'Dana', email: 'dana@example.com', roleIds: [] });
  assert.ok(dana.id > Math.max(...users.map((u) => u.id)), `new user id ${dana.id}`);
  const highestClassification = (sqliteConnection(source).prepare("SELECT seq FROM sqlite_sequence WHERE name = 'classifications'").get() as { seq: number }).seq;
  assert.ok(highestClassification > Math.max(...(await source.classifications.list()).map((c) => c.id)), 'the deleted classification had the highest id');
  const fresh = await target.classifications.create({ name: 'Fresh', bgColor: '#111111', fgColor: '#eeeeee' });
  assert.ok(fresh.id > highestClassification, `new classification id ${fresh.id} reuses a deleted one's`);
  await target.logs.insertApi([{ requestId: 'after-copy', method: 'GET', path: '/', statusCode: 200, durationMs: 1, ip: '::1', createdAt: at(900) }]);
  const newest = (await target.logs.apiPage({ limit: 1, offset: 0 })).rows[0]!;
  assert.equal(newest.requestId, 'after-copy');
  assert.ok(newest.id > LOG_ROWS + 1);
  // And a configuration created now lists after the copied ones (`seq` past theirs).
  await target.configurations.create({ name: 'later', type: 'provider', provider: 'google' });
  assert.deepEqual((await target.configurations.list()).map((c) => c.name), [...configurations.map((c) => c.name), 'later']);

  // A second copy into the database, which now holds rows, is refused and changes nothing.
  const before = await targetState(plain);
  const again = await copy(path, url);
  assert.equal(again.code, 1, again.stdout);
  assert.equal(again.stdout, '');
  assert.match(again.stderr, /^svc-sidecar store copy: refused: the target database already holds rows \(in users, .*configurations.*api_keys.*classifications.*api_logs.*\): copy only into a new, empty database; nothing was written\.\n$/);
  assert.ok(!again.stderr.includes(PASSWORD));
  assert.deepEqual(await targetState(plain), before);
});

test('store copy refuses a database that holds any row beyond the built-in roles, even one log entry', { skip }, async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'svc.db');
  const source = openStore(path);
  await source.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
  source.close();

  const { url, plain } = await database();
  const target = await openPostgresStore(plain, { max: 2 });
  await target.logs.insertActivity([{ action: 'login', description: 'someone', ip: '::1', createdAt: at(1) }]);
  await target.close();
  const before = await targetState(plain);

  const run = await copy(path, url);
  assert.equal(run.code, 1);
  assert.equal(run.stderr, 'svc-sidecar store copy: refused: the target database already holds rows (in activity_logs): copy only into a new, empty database; nothing was written.\n');
  assert.deepEqual(await targetState(plain), before);
});

test('store copy refuses a --from that does not exist (creating no file), is empty, or holds no store of ours, and touches no database', { skip }, async (t) => {
  const dir = tempDir(t);
  const { name, url, plain } = await database();
  const missing = join(dir, 'data', 'svc.db');
  const run = await copy(missing, url);
  assert.equal(run.code, 1);
  assert.equal(run.stdout, '');
  assert.equal(run.stderr, `svc-sidecar store copy: refused: ${missing} does not exist; nothing was written.\n`);
  assert.equal(existsSync(missing), false);
  assert.equal(existsSync(join(dir, 'data')), false);

  const empty = join(dir, 'empty.db');
  writeFileSync(empty, '');
  const emptyRun = await copy(empty, url);
  assert.equal(emptyRun.code, 1);
  assert.equal(emptyRun.stderr, `svc-sidecar store copy: refused: ${empty} is empty: it holds no store; nothing was written.\n`);

  // Another program's database is not given our tables; a file that is no database is named as such.
  const foreign = join(dir, 'other.db');
  const other = new DatabaseSync(foreign);
  other.exec('CREATE TABLE notes (body TEXT)');
  other.close();
  const foreignRun = await copy(foreign, url);
  assert.equal(foreignRun.code, 1);
  assert.equal(foreignRun.stderr, `svc-sidecar store copy: refused: ${foreign} holds no svc-sidecar store; nothing was written.\n`);
  const reopened = new DatabaseSync(foreign, { readOnly: true });
  assert.deepEqual(reopened.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'").all().map((row) => row['name']), ['notes']);
  reopened.close();
  const text = join(dir, 'notes.txt');
  writeFileSync(text, 'not a database at all, just some text that is long enough to hold a header\n'.repeat(10));
  const textRun = await copy(text, url);
  assert.equal(textRun.code, 1);
  assert.equal(textRun.stderr, `svc-sidecar store copy: refused: ${text} is not a SQLite store (file is not a database); nothing was written.\n`);

  // Not even migrated: the database holds no table.
  assert.equal(await postgres.server.psql(name, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"), '0\n');
});

test('a write in progress on the database makes the copy refuse; once it is gone, batches of any size copy every row', { skip }, async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'svc.db');
  await fillStore(path);
  const { name, plain } = await database();
  await (await openPostgresStore(plain, { max: 1 })).close();

  // Another connection's transaction writes a log row and stays open.
  const writer = new pg.Client({ connectionString: plain, types });
  await writer.connect();
  t.after(() => writer.end());
  await writer.query('BEGIN');
  await writer.query("INSERT INTO activity_logs (action, description, ip, created_at) VALUES ('login', 'in flight', '::1', '2026-01-01T00:00:00.000Z')");
  await assert.rejects(copyStore(path, plain, { lockTimeoutMs: 200 }), (error) => {
    assert.ok(error instanceof CopyRefusedError);
    assert.match(error.message, /^another connection is using the target database \(is a control plane running on it\?\): stop it and copy again$/);
    return true;
  });
  await writer.query('ROLLBACK');
  assert.equal(await postgres.server.psql(name, 'SELECT count(*) FROM users'), '0\n');

  // 7 rows a statement: many full batches and a short last one.
  const copied = await copyStore(path, plain, { batchRows: 7, lockTimeoutMs: 200 });
  const source = openStore(path);
  t.after(() => source.close());
  const expected = sqliteRows(source);
  assert.deepEqual(copied, COPY_TABLES.map((table) => ({ table: table.name, rows: expected[table.name]!.length })));
  assert.deepEqual(await postgresRows(plain), expected);
});

test('store copy takes only a postgres:// URL, never quoting it', async () => {
  const run = await copy('/nonexistent/svc.db', `mysql://svc:${PASSWORD}@127.0.0.1/db`);
  assert.equal(run.code, 2);
  assert.equal(run.stdout, '');
  assert.equal(run.stderr, 'svc-sidecar store copy: --to must be a postgres:// URL with a host (postgres://user@host:5432/database). See "svc-sidecar store copy --help".\n');
});

test('store copy takes a log row with a NUL in its text, written as U+FFFD as the PostgreSQL store writes it', { skip }, async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'svc.db');
  const source = openStore(path);
  await source.logs.insertApi([{ requestId: 'nul', method: 'GET', path: '/a\0b', statusCode: 200, durationMs: 1, ip: '::1', createdAt: at(1) }]);
  source.close();
  const { plain } = await database();

  await copyStore(path, plain);
  const target = await openPostgresStore(plain, { max: 1 });
  t.after(() => target.close());
  assert.deepEqual((await target.logs.apiPage({ limit: 5, offset: 0 })).rows.map((row) => row.path), ['/a\uFFFDb']);
});

test('the days of a log table come ascending, each once, whatever the rows per day', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-copy-days-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const store = openStore(join(dir, 'svc.db'));
  t.after(() => store.close());
  const source = sqliteCopySource(store);
  assert.deepEqual(source.days('api_logs'), []);
  const row = (i: number, createdAt: string): NewApiLog => ({ requestId: `r-${i}`, method: 'GET', path: '/', statusCode: 200, durationMs: 1, ip: '10.0.0.1', createdAt });
  const times = [
    '2026-05-03T23:59:59.999Z',
    '2026-05-01T00:00:00.000Z',
    ...Array.from({ length: 500 }, (_, i) => new Date(Date.UTC(2026, 4, 2) + i * 1000).toISOString()),
    '2026-05-03T00:00:00.000Z',
    '2026-06-30T12:00:00.000Z',
  ];
  await store.logs.insertApi(times.map((createdAt, i) => row(i, createdAt)));
  assert.deepEqual(source.days('api_logs'), ['2026-05-01', '2026-05-02', '2026-05-03', '2026-06-30']);
  assert.deepEqual(source.days('usage_logs'), []);
  // Texts no build writes: one that sorts after every ordinary time of its day (which a
  // step past "the day and U+FFFF" would find again and again), and ones with no day.
  await store.logs.insertApi(['2026-05-01\u{10FFFF}late', 'not a time', 'not a time', '', '2026-5-1'].map((createdAt, i) => row(1000 + i, createdAt)));
  assert.deepEqual(source.days('api_logs'), ['2026-05-01', '2026-05-02', '2026-05-03', '2026-06-30']);
});
