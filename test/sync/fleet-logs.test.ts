/**
 * Fleet logs cannot be suppressed or dated ahead (DESIGN §13): rows are kept once per
 * (instance id, row id), the instance id is the replica's own secret, rows are validated
 * as strictly as the log lists show them, batches are bounded by `sync.max_batch`, and the
 * shipper copes with what the control plane refuses for good reasons.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { openStore, type Store } from '../../src/store/db.ts';
import { migrate, migrations, schemaVersion } from '../../src/store/sqlite/migrations.ts';
import { LogShipper } from '../../src/sync/log-shipper.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call } from '../support/app.ts';
import { FLEET_KEY, get, json, LOGS, SCOPED_FLEET_KEY, SNAPSHOT, startControlPlane, startReplica, tempDir, waitFor, waitReady, type Node } from './nodes.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import type { ShippedApiLog } from '../../src/store/shipped-logs.ts';

const ENC = '/api/v3/encryption/payments/encrypt';
const BODY = '{"card":{"number":"4111 1111 1111 1111"}}';

const apiRow = (overrides: Record<string, unknown> = {}) => ({
  id: 1,
  request_id: `row-${randomBytes(4).toString('hex')}`,
  method: 'POST',
  path: '/api/v3/encryption/payments/encrypt',
  status_code: 200,
  api_key_id: null,
  user_id: null,
  configuration_id: null,
  destination: null,
  duration_ms: 3,
  ip: '127.0.0.1',
  created_at: new Date().toISOString(),
  ...overrides,
});

const batch = (api: unknown[], usage: unknown[] = [], instance = randomBytes(16).toString('hex')) => ({ replica: 'r-test', instance, api, usage });

/** Rows of each kind on the control plane for one request id. */
async function onControlPlane(cp: Node, requestId: string): Promise<{ api: Array<Record<string, any>>; usage: Array<Record<string, any>> }> {
  const api = await get(cp, `/api/v3/logs/api?request_id=${requestId}`);
  const usage = await get(cp, `/api/v3/logs/usage?request_id=${requestId}`);
  return { api: api.json.data, usage: usage.json.data };
}

test('rows sent in advance under a replica\'s name, row ids and request ids do not make its real rows vanish', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1');
  await waitReady(replica);

  // The attack: another holder of the fleet key knows the replica's name (every log list
  // shows it), guesses its next row ids and picks the request ids it will itself send.
  const victims = Array.from({ length: 5 }, (_, i) => `victim-${i}-${randomBytes(3).toString('hex')}`);
  const forged = victims.flatMap((requestId) =>
    Array.from({ length: 10 }, (_, i) => apiRow({ id: i + 1, request_id: requestId, path: '/forged', status_code: 204 })),
  );
  const payments = (await cp.app.services.store.configurations.findByName('payments'))!;
  const forgedUsage = victims.flatMap((requestId) =>
    Array.from({ length: 10 }, (_, i) => ({ id: i + 1, request_id: requestId, configuration_id: payments.id, api_key_id: null, user_id: null, mode: 'decrypt', field_count: 0, bytes: 0, created_at: new Date().toISOString() })),
  );
  const sent = await call(cp.url, LOGS, { body: json({ replica: 'r1', instance: randomBytes(16).toString('hex'), api: forged, usage: forgedUsage }), key: FLEET_KEY });
  assert.equal(sent.status, 200);

  for (const requestId of victims) assert.equal((await call(replica.url, ENC, { body: BODY, headers: { 'x-svc-request-id': requestId } })).status, 200);
  for (const requestId of victims) {
    const rows = await waitFor(`the real rows of ${requestId}`, async () => {
      const found = await onControlPlane(cp, requestId);
      return found.api.some((r) => r['path'] === ENC) && found.usage.some((r) => r['mode'] === 'encrypt') ? found : undefined;
    });
    const real = rows.api.find((r) => r['path'] === ENC)!;
    assert.equal(real['status_code'], 200);
    assert.equal(rows.api.filter((r) => r['path'] === ENC).length, 1, 'stored once');
  }
});

test('the instance id is made at the first start, kept, differs between replicas, and is shown by no API', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const r1 = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1');
  const r2 = await startReplica(t, join(dir, 'r2.db'), cp.url, 'r1');
  await Promise.all([waitReady(r1), waitReady(r2)]);
  const id1 = await r1.app.services.store.shippedLogs.instanceId();
  const id2 = await r2.app.services.store.shippedLogs.instanceId();
  assert.match(id1, /^[0-9a-f]{32}$/);
  assert.notEqual(id1, id2, 'two replicas with one name are still two instances');

  const requestId = `seen-${randomBytes(4).toString('hex')}`;
  for (const replica of [r1, r2]) assert.equal((await call(replica.url, ENC, { body: BODY, headers: { 'x-svc-request-id': requestId } })).status, 200);
  await waitFor('both rows on the control plane', async () => ((await onControlPlane(cp, requestId)).api.length === 2 ? true : undefined));

  const texts = await Promise.all(
    ['/api/v3/logs/api?per_page=100', '/api/v3/logs/usage?per_page=100', '/api/v3/logs/unified?per_page=100', '/api/v3/logs/activity?per_page=100'].map(async (path) => (await get(cp, path)).text),
  );
  texts.push((await get(cp, SNAPSHOT, FLEET_KEY)).text, (await get(r1, SNAPSHOT, FLEET_KEY)).text, (await get(r1, '/api/v3/logs/unified?per_page=100')).text);
  for (const text of texts) {
    assert.equal(text.includes(id1), false);
    assert.equal(text.includes(id2), false);
  }

  await r1.close();
  const again = await startReplica(t, r1.storePath, cp.url, 'r1');
  assert.equal(await again.app.services.store.shippedLogs.instanceId(), id1, 'kept in the store');
});

test('shipped rows are held to the log lists\' schemas and may not be dated ahead: a table of near misses', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const store = cp.app.services.store;
  const payments = (await store.configurations.findByName('payments'))!.id;
  const other = (await store.configurations.findByName('other'))!.id;
  const ada = (await store.users.findByEmail('ada@example.com'))!.id;
  const ownerKey = (await store.apiKeys.findByName('owner'))!.id;
  const minutes = (n: number) => new Date(Date.now() + n * 60_000).toISOString();
  const usageRow = (overrides: Record<string, unknown> = {}) => ({
    id: 1,
    request_id: `usage-${randomBytes(4).toString('hex')}`,
    configuration_id: payments,
    api_key_id: ownerKey,
    user_id: ada,
    mode: 'encrypt',
    field_count: 1,
    bytes: 10,
    created_at: new Date().toISOString(),
    ...overrides,
  });

  // Accepted: real ids, late rows (a replica cut off for a day), the edge of the clock.
  const good = [
    apiRow({ api_key_id: ownerKey, user_id: ada, configuration_id: payments }),
    apiRow({ id: 2, created_at: new Date(Date.now() - 86_400_000).toISOString() }),
    apiRow({ id: 3, created_at: minutes(9), method: 'PROPFIND', ip: '::ffff:10.1.2.3', duration_ms: 0.25 }),
    apiRow({ id: 4, path: 'x'.repeat(1024), status_code: 599, ip: '' }),
  ];
  const accepted = await call(cp.url, LOGS, { body: json(batch(good, [usageRow()])), key: FLEET_KEY });
  assert.deepEqual(accepted.json, { stored: 5, duplicates: 0 });
  const received = () =>
    (sqliteConnection(store).prepare('SELECT (SELECT count(*) FROM api_logs WHERE replica IS NOT NULL) + (SELECT count(*) FROM usage_logs WHERE replica IS NOT NULL) AS n').get() as { n: number }).n;

  const apiCases: Array<[string, Record<string, unknown>, string]> = [
    ['status 99', { status_code: 99 }, 'status_code'],
    ['status 600', { status_code: 600 }, 'status_code'],
    ['status 200.5', { status_code: 200.5 }, 'status_code'],
    ['unknown method', { method: 'FETCH' }, 'method'],
    ['a control character in the path', { path: '/api/v3/x\n2026-01-01 forged line' }, 'path'],
    ['a bidi override in the destination', { destination: 'https://\u202Eevil.example' }, 'destination'],
    ['lowercase method', { method: 'post' }, 'method'],
    ['user that does not exist', { user_id: 999_999 }, 'user_id'],
    ['user id as text', { user_id: String(ada) }, 'user_id'],
    ['API key that does not exist', { api_key_id: 'no-such-key' }, 'api_key_id'],
    ['configuration that does not exist', { configuration_id: 'no-such-configuration' }, 'configuration_id'],
    ['path too long', { path: 'x'.repeat(1025) }, 'path'],
    ['empty path', { path: '' }, 'path'],
    ['request id with a space', { request_id: 'a b' }, 'request_id'],
    ['request id too long', { request_id: 'a'.repeat(129) }, 'request_id'],
    ['not an address', { ip: 'attacker' }, 'ip'],
    ['duration below zero', { duration_ms: -1 }, 'duration_ms'],
    ['destination too long', { destination: 'h'.repeat(2049) }, 'destination'],
    ['11 minutes ahead', { created_at: minutes(11) }, 'created_at'],
    ['a year ahead', { created_at: minutes(525_600) }, 'created_at'],
    ['date only', { created_at: '2030-01-01' }, 'created_at'],
    ['offset instead of Z', { created_at: '2024-01-01T00:00:00.000+00:00' }, 'created_at'],
    ['no such day', { created_at: '2024-02-30T00:00:00.000Z' }, 'created_at'],
    ['row id 0', { id: 0 }, 'id'],
    ['an extra field', { replica_instance: 'x' }, ''],
  ];
  for (const [name, overrides, field] of apiCases) {
    const row = apiRow(overrides);
    const res = await call(cp.url, LOGS, { body: json(batch([apiRow({ id: 7 }), row])), key: FLEET_KEY });
    assert.equal(res.status, 422, name);
    assert.ok(Object.keys(res.json.errors).some((key) => key === `api.1.${field}` || (field === '' && key.startsWith('api.1'))), `${name}: ${JSON.stringify(res.json.errors)}`);
    assert.equal(received(), 5, `${name}: nothing of the batch is stored`);
  }
  const usageCases: Array<[string, Record<string, unknown>, string]> = [
    ['unknown mode', { mode: 'rewrap' }, 'mode'],
    ['no configuration', { configuration_id: null }, 'configuration_id'],
    ['configuration that does not exist', { configuration_id: 'gone' }, 'configuration_id'],
    ['negative count', { field_count: -1 }, 'field_count'],
    ['fractional bytes', { bytes: 1.5 }, 'bytes'],
    ['11 minutes ahead', { created_at: minutes(11) }, 'created_at'],
  ];
  for (const [name, overrides, field] of usageCases) {
    const res = await call(cp.url, LOGS, { body: json(batch([], [usageRow(overrides)])), key: FLEET_KEY });
    assert.equal(res.status, 422, name);
    assert.ok(res.json.errors[`usage.0.${field}`], `${name}: ${JSON.stringify(res.json.errors)}`);
    assert.equal(received(), 5, `${name}: nothing stored`);
  }
  const batchCases: Array<[string, Record<string, unknown>, string]> = [
    ['no instance', { instance: undefined }, 'instance'],
    ['short instance', { instance: 'ab'.repeat(8) }, 'instance'],
    ['uppercase instance', { instance: 'AB'.repeat(16) }, 'instance'],
    ['replica name with a control character', { replica: 'r\u0000' }, 'replica'],
    ['replica name with a bidi override', { replica: 'r\u202E1' }, 'replica'],
    ['replica name too long', { replica: 'r'.repeat(129) }, 'replica'],
  ];
  for (const [name, overrides, field] of batchCases) {
    const res = await call(cp.url, LOGS, { body: json({ ...batch([apiRow()]), ...overrides }), key: FLEET_KEY });
    assert.equal(res.status, 422, name);
    assert.ok(res.json.errors[field], `${name}: ${JSON.stringify(res.json.errors)}`);
  }

  // A key limited to configurations ships rows of those only: it never served another.
  const scoped = await call(cp.url, LOGS, { body: json(batch([], [usageRow({ configuration_id: other })])), key: SCOPED_FLEET_KEY });
  assert.equal(scoped.status, 422);
  assert.ok(scoped.json.errors['usage.0.configuration_id']);
  assert.equal((await call(cp.url, LOGS, { body: json(batch([], [usageRow()])), key: SCOPED_FLEET_KEY })).status, 200);
});

test('sync.max_batch bounds a batch (413 beyond it), and a replica halves its batches until they fit', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'), undefined, 'sync: { max_batch: 100 }');
  const rows = (n: number) => Array.from({ length: n }, (_, i) => apiRow({ id: i + 1 }));
  const over = await call(cp.url, LOGS, { body: json(batch(rows(101))), key: FLEET_KEY });
  assert.equal(over.status, 413);
  assert.deepEqual(over.json, { message: 'The log batch holds more than 100 rows.' });
  assert.equal((await call(cp.url, LOGS, { body: json(batch(rows(100))), key: FLEET_KEY })).status, 200);

  // A replica's store with 300 api rows, shipped with the default batch (1,000 of each kind).
  const local = replicaStore(t, join(dir, 'sqliteConnection(local)'));
  await local.logs.insertApi(Array.from({ length: 300 }, (_, i) => newApiRow(`halve-${i}`)));
  const shipper = await shipperFor(local, cp);
  assert.equal(await shipper.shipOnce(), 300);
  assert.equal(await storedFor(cp, local), 300, 'every row arrived, in batches of at most 100');
  await shipper.stop();
});

test('rows naming a configuration, key or user deleted while they waited are shipped without those ids, not held up', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const payments = (await cp.app.services.store.configurations.findByName('payments'))!.id;
  const local = replicaStore(t, join(dir, 'sqliteConnection(local)'));
  await local.logs.insertApi([
    { ...newApiRow('gone-1'), configurationId: 'deleted-configuration', userId: 424242, apiKeyId: 'deleted-key' },
    newApiRow('kept-1'),
  ]);
  await local.logs.insertUsage([
    { requestId: 'gone-1', configurationId: 'deleted-configuration', mode: 'decrypt', fieldCount: 1, bytes: 5, createdAt: new Date().toISOString() },
    { requestId: 'kept-1', configurationId: payments, userId: 424242, mode: 'encrypt', fieldCount: 1, bytes: 5, createdAt: new Date().toISOString() },
  ]);
  const shipper = await shipperFor(local, cp);
  assert.equal(await shipper.shipOnce(), 4);
  const gone = await onControlPlane(cp, 'gone-1');
  assert.equal(gone.api.length, 1, 'the api row arrives');
  assert.equal(gone.api[0]!['configuration'], null);
  assert.equal(gone.api[0]!['user'], null);
  assert.equal(gone.api[0]!['api_key'], null);
  const stored = sqliteConnection(cp.app.services.store).prepare("SELECT configuration_id, user_id, api_key_id FROM api_logs WHERE request_id = 'gone-1'").get();
  assert.deepEqual({ ...stored }, { configuration_id: null, user_id: null, api_key_id: null }, 'stored without the ids');
  assert.equal(gone.usage.length, 0, 'a usage row needs its configuration: left out (the replica keeps it)');
  const kept = await onControlPlane(cp, 'kept-1');
  assert.equal(kept.api.length, 1);
  assert.equal(kept.usage.length, 1);
  assert.equal(kept.usage[0]!['user'], null);
  assert.equal(await local.logs.count('usage', {}), 2, 'the replica\'s own log is untouched');
  assert.equal((await local.shippedLogs.getCursor('usage')).lastId, 2, 'and shipping moved on');
  await shipper.stop();
});

test('a log table emptied by retention and numbered from 1 again still ships its new rows', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const local = replicaStore(t, join(dir, 'sqliteConnection(local)'));
  await local.logs.insertApi([newApiRow('before-1'), newApiRow('before-2'), newApiRow('before-3')]);
  const shipper = await shipperFor(local, cp);
  assert.equal(await shipper.shipOnce(), 3);
  // Retention deletes every row; SQLite then numbers new rows from 1 again.
  sqliteConnection(local).exec('DELETE FROM api_logs');
  await local.logs.insertApi([newApiRow('after-1'), newApiRow('after-2')]);
  assert.equal((sqliteConnection(local).prepare('SELECT min(id) AS id FROM api_logs').get() as { id: number }).id, 1);
  assert.equal(await shipper.shipOnce(), 2);
  assert.equal(await storedFor(cp, local), 5, 'the new rows are not taken for the old ones');
  for (const id of ['after-1', 'after-2']) assert.equal((await onControlPlane(cp, id)).api.length, 1, id);
  await shipper.stop();
});

test('a store of schema version 4 migrates: received rows kept, dedupe by (instance, row id), cursors and instance table added', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'v4.db');
  const db = new DatabaseSync(path);
  migrate(db, migrations.slice(0, 4));
  assert.equal(schemaVersion(db), 4);
  const now = new Date().toISOString();
  db.prepare(`INSERT INTO api_logs (request_id, method, path, status_code, duration_ms, ip, created_at, replica, replica_log_id)
    VALUES ('old-1', 'POST', '/x', 200, 1, '', ?, 'r1', 1)`).run(now);
  db.prepare("INSERT INTO sync_log_cursors (kind, last_id, last_request_id, updated_at) VALUES ('api', 17, 'req-17', ?)").run(now);
  db.close();

  const store = openStore(path);
  t.after(() => store.close());
  assert.equal(schemaVersion(sqliteConnection(store)), migrations.length);
  assert.deepEqual(await store.shippedLogs.getCursor('api'), { lastId: 17, lastRequestId: 'req-17', idBase: 0 });
  const old = sqliteConnection(store).prepare("SELECT replica, replica_instance, replica_log_id FROM api_logs WHERE request_id = 'old-1'").get();
  assert.deepEqual({ ...old }, { replica: 'r1', replica_instance: null, replica_log_id: 1 });
  const index = sqliteConnection(store).prepare("SELECT sql FROM sqlite_master WHERE name = 'api_logs_replica_row'").get() as { sql: string };
  assert.match(index.sql, /\(replica_instance, replica_log_id\) WHERE replica_instance IS NOT NULL/);
  assert.equal((sqliteConnection(store).prepare('SELECT count(*) AS n FROM sync_instance').get() as { n: number }).n, 0, 'made at a replica\'s first start, not by the migration');

  // The same row id from the same instance lands once; from another instance, again.
  const row = { id: 1, request_id: 'new-1', method: 'GET', path: '/x', status_code: 200, api_key_id: null, user_id: null, configuration_id: null, destination: null, duration_ms: 1, ip: '', created_at: now };
  const a = 'a'.repeat(32);
  assert.deepEqual(await store.shippedLogs.receive('r1', a, { api: [row], usage: [] }), { stored: 1, duplicates: 0 });
  assert.deepEqual(await store.shippedLogs.receive('r1', a, { api: [{ ...row, request_id: 'new-2' }], usage: [] }), { stored: 0, duplicates: 1 });
  assert.deepEqual(await store.shippedLogs.receive('r1', 'b'.repeat(32), { api: [row], usage: [] }), { stored: 1, duplicates: 0 });
  assert.deepEqual(await store.shippedLogs.receive('r1', 'c'.repeat(32), { api: [{ ...row, request_id: 'old-1' }], usage: [] }), { stored: 1, duplicates: 0 }, 'rows from before the migration claim nothing');
});

test('the relay\'s end user travels with shipped api rows: sent only when set, stored and listed on the control plane; one the lists could not show is refused', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const local = replicaStore(t, join(dir, 'sqliteConnection(local)'));
  await local.logs.insertApi([{ ...newApiRow('eu-1'), endUser: 'auth0|kate' }, newApiRow('eu-2')]);
  const rows = await local.shippedLogs.rowsAfter('api', 0, 10);
  assert.equal((rows[0] as ShippedApiLog).end_user, 'auth0|kate');
  assert.ok(!('end_user' in rows[1]!), 'a row without an end user is sent as before, so an older control plane still takes it');
  const shipper = await shipperFor(local, cp);
  assert.equal(await shipper.shipOnce(), 2);
  await shipper.stop();
  const [withUser] = (await onControlPlane(cp, 'eu-1')).api;
  assert.equal(withUser!['end_user'], 'auth0|kate');
  const [without] = (await onControlPlane(cp, 'eu-2')).api;
  assert.ok(!('end_user' in without!));

  const cases: Array<[string, unknown]> = [
    ['empty', ''],
    ['a line break', 'kate\n2026-01-01 forged line'],
    ['a bidi override', 'admin\u202Egnp'],
    ['257 characters', 'k'.repeat(257)],
    ['a number', 42],
    ['a list', ['kate']],
  ];
  for (const [name, endUser] of cases) {
    const res = await call(cp.url, LOGS, { body: json(batch([apiRow({ end_user: endUser })])), key: FLEET_KEY });
    assert.equal(res.status, 422, name);
    assert.ok(res.json.errors['api.0.end_user'], `${name}: ${JSON.stringify(res.json.errors)}`);
  }
  for (const endUser of [null, 'k'.repeat(256), 'Kate@Example.com']) {
    const res = await call(cp.url, LOGS, { body: json(batch([apiRow({ end_user: endUser })])), key: FLEET_KEY });
    assert.deepEqual(res.json, { stored: 1, duplicates: 0 }, String(endUser).slice(0, 20));
  }
});

// ---------------------------------------------------------------------------------------

/** A store as a replica has one, closed when the test ends. */
function replicaStore(t: TestContext, path: string): Store {
  const store = openStore(path);
  t.after(() => store.close());
  return store;
}

function newApiRow(requestId: string) {
  return { requestId, method: 'POST', path: ENC, statusCode: 200, durationMs: 2, ip: '127.0.0.1', createdAt: new Date().toISOString() };
}

async function shipperFor(store: Store, cp: Node): Promise<LogShipper> {
  return new LogShipper({ store, logger: createLogger('silent'), urls: [cp.url], apiKey: FLEET_KEY, replica: 'local', instance: await store.shippedLogs.instanceId(), interval: 60_000 });
}

/** Rows the control plane holds from `store`'s instance. */
async function storedFor(cp: Node, store: Store): Promise<number> {
  const instance = await store.shippedLogs.instanceId();
  const api = sqliteConnection(cp.app.services.store).prepare('SELECT count(*) AS n FROM api_logs WHERE replica_instance = ?').get(instance) as { n: number };
  const usage = sqliteConnection(cp.app.services.store).prepare('SELECT count(*) AS n FROM usage_logs WHERE replica_instance = ?').get(instance) as { n: number };
  return api.n + usage.n;
}
