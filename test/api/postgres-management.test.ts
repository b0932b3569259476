/**
 * The management API of a control plane whose store is PostgreSQL (`store.url`): every
 * resource listed, filtered, paged, created, changed and removed through the real service,
 * so each statement the API reaches runs on the second dialect. Every answer is also held
 * to the OpenAPI document by `call`.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call, KEYS, SEED } from '../support/app.ts';
import { postgresPerFile } from '../support/postgres.ts';

const postgres = postgresPerFile();
const skip = postgres.skip;


async function start(t: TestContext): Promise<string> {
  const { url } = await postgres.database('svc_api');
  const config = loadConfig({
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { url: ${JSON.stringify(url)} }
keys: { master_key_file: /nonexistent/never-used.key, destroy_after: 0s }
logs: { flush_interval: 20ms }
logging: { level: silent }
${SEED}`,
    env: {},
  });
  const app = await createApp(config, { logger: createLogger((process.env['SVC_TEST_LOG'] ?? 'silent') as 'silent'), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  const { main } = await app.listen();
  t.after(() => app.close());
  return `http://127.0.0.1:${main.port}`;
}

const body = (value: unknown) => JSON.stringify(value);

async function ok(base: string, path: string, options: Parameters<typeof call>[2], status = 200) {
  const res = await call(base, path, options);
  assert.equal(res.status, status, `${options?.method ?? 'POST'} ${path}: ${res.text}`);
  return res.json;
}

test('classifications: list with every filter and sort, create with members, change, delete', { skip }, async (t) => {
  const base = await start(t);
  const get = (query: string) => ok(base, `/api/v3/classifications${query}`, { method: 'GET' });
  assert.equal((await get('')).total, 4);
  assert.deepEqual((await get('?search=ph')).data.map((c: { name: string }) => c.name), ['PHI']);
  assert.deepEqual((await get('?search=PH')).data.map((c: { name: string }) => c.name), ['PHI'], 'search folds ASCII case');
  assert.deepEqual((await get('?search=50%25')).data, [], 'a % in a search is literal');
  const roles = await ok(base, '/api/v3/roles', { method: 'GET' });
  const owner = roles.find((r: { name: string }) => r.name === 'owner');
  assert.deepEqual((await get(`?roles=${owner.id}`)).data.map((c: { name: string }) => c.name), ['PCI']);
  const users = await ok(base, '/api/v3/users?per_page=100', { method: 'GET' });
  const ada = users.data.find((u: { email: string }) => u.email === 'ada@example.com');
  assert.deepEqual((await get(`?user=${ada.id}`)).data.map((c: { name: string }) => c.name), ['PHI']);
  const names = async (query: string) => (await get(query)).data.map((c: { name: string }) => c.name);
  assert.deepEqual(await names('?sort=name&direction=asc'), ['Nobody', 'PCI', 'PHI', 'Ward']);
  assert.deepEqual(await names('?sort=name&direction=desc'), ['Ward', 'PHI', 'PCI', 'Nobody']);
  assert.deepEqual(await names('?sort=id&direction=asc&per_page=2&page=2'), ['Nobody', 'Ward']);

  const created = await ok(base, '/api/v3/classifications', { body: body({ name: 'Secrets', bg_color: '#111111', fg_color: '#eeeeee', users: [ada.id], roles: [owner.id] }) }, 201);
  assert.deepEqual(created.users.map((u: { id: number }) => u.id), [ada.id], 'the answer shows the members just written');
  const again = await ok(base, '/api/v3/classifications', { body: body({ name: 'Secrets', bg_color: '#111111', fg_color: '#eeeeee' }) }, 201);
  assert.equal(again.slug, 'secrets-2');
  const changed = await ok(base, `/api/v3/classifications/${created.id}`, { method: 'PATCH', body: body({ name: 'Top secrets', users: [] }) });
  assert.equal(changed.name, 'Top secrets');
  assert.deepEqual(changed.users, []);
  await ok(base, `/api/v3/classifications/${created.id}`, { method: 'DELETE' }, 204);
  await ok(base, `/api/v3/classifications/${created.id}`, { method: 'GET' }, 404);
});

test('configurations: create, change, rotate, list keys, destroy a version; users and API keys through their whole life', { skip }, async (t) => {
  const base = await start(t);
  const configuration = await ok(base, '/api/v3/configurations', { body: body({ name: 'billing', values: { fields: 'ssn', proxy_slug: 'billing' } }) }, 201);
  const path = `/api/v3/configurations/${configuration.id}`;
  await ok(base, path, { method: 'PUT', body: body({ name: 'billing-eu' }) });
  await ok(base, `${path}/rotate`, { body: '{}' }, 200);
  const keys = await ok(base, `${path}/keys`, { method: 'GET' });
  assert.deepEqual(keys.map((k: { version: number }) => k.version).sort(), [1, 2]);
  await ok(base, `${path}/keys/1/destroy`, { body: body({ confirm: 'billing-eu/v1' }) });
  const after = await ok(base, `${path}/keys`, { method: 'GET' });
  assert.ok(after.find((k: { version: number; destroyed_at: string | null }) => k.version === 1).destroyed_at !== null);
  const list = await ok(base, '/api/v3/configurations?per_page=2', { method: 'GET' });
  assert.equal(list.total, 5);
  assert.equal((await ok(base, '/api/v3/configurations', { method: 'GET', key: KEYS.scoped })).total, 1, 'a scoped key sees its configurations only');
  await ok(base, path, { method: 'DELETE' }, 204);

  const user = await ok(base, '/api/v3/users', { body: body({ name: 'New Person', email: 'new@example.com', password: 'a long enough password', roles: ['developer'] }) }, 201);
  await ok(base, '/api/v3/users', { body: body({ name: 'Twin', email: 'NEW@example.com', roles: [] }) }, 422);
  const login = await ok(base, '/api/v2/auth/login', { body: body({ email: 'new@example.com', password: 'a long enough password' }) });
  const bearer = { authorization: `Bearer ${login.access_token}` };
  assert.equal((await ok(base, '/api/v2/auth/userdetails', { method: 'GET', headers: bearer })).email, 'new@example.com');
  await ok(base, '/api/v2/auth/logout', { headers: bearer, body: '{}' }, 204);
  await ok(base, '/api/v2/auth/userdetails', { method: 'GET', headers: bearer }, 401);

  const key = await ok(base, '/api/v3/api-keys', { body: body({ name: 'for-new', user: user.id }) }, 201);
  const rotated = await ok(base, `/api/v3/api-keys/${key.id}/rotate`, { body: '{}' });
  await ok(base, '/api/v3/roles', { method: 'GET', key: key.key }, 401);
  await ok(base, '/api/v3/roles', { method: 'GET', key: rotated.key });
  await ok(base, `/api/v3/api-keys/${key.id}/revoke`, { body: '{}' }, 204);
  await ok(base, '/api/v3/roles', { method: 'GET', key: rotated.key }, 401);
  assert.ok((await ok(base, '/api/v3/api-keys', { method: 'GET' })).some((k: { id: string; status: string }) => k.id === key.id && k.status === 'revoked'));
});

test('logs: what the API wrote is listed by kind and unified, filtered by user and request, paged by cursor', { skip }, async (t) => {
  const base = await start(t);
  for (let i = 0; i < 3; i++) await ok(base, '/api/v3/classifications', { body: body({ name: `Logged ${i}`, bg_color: '#111111', fg_color: '#eeeeee' }) }, 201);
  // Written by the log writer a moment after each answer.
  const arrived = async (path: string, least: number) => {
    for (let i = 0; i < 250; i++) {
      const page = await ok(base, path, { method: 'GET' });
      if (page.total >= least) return page;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`${path} never held ${least} rows`);
  };
  const activity = await arrived('/api/v3/logs/activity', 3);
  assert.ok(activity.data.every((row: { causer_email: string | null }) => row.causer_email === 'ada@example.com'));
  const api = await arrived('/api/v3/logs/api?per_page=2', 3);
  assert.equal(api.data.length, 2);
  const requestId = api.data[0].request_id as string;
  assert.equal((await ok(base, `/api/v3/logs/api?request_id=${requestId}`, { method: 'GET' })).data.length, 1);
  const unified = await ok(base, '/api/v3/logs/unified?per_page=2', { method: 'GET' });
  assert.equal(unified.data.length, 2);
  // The next page by cursor starts right after the first page's last row.
  // (Newer rows may land on top meanwhile: every request here is logged too.)
  const next = await ok(base, `/api/v3/logs/api?per_page=2&cursor=${encodeURIComponent(api.next_cursor)}`, { method: 'GET' });
  const all = (await ok(base, '/api/v3/logs/api?per_page=100', { method: 'GET' })).data.map((row: { id: number }) => row.id);
  const after = all.indexOf(api.data[1].id);
  assert.ok(after >= 1 && next.data.length > 0);
  assert.deepEqual(next.data.map((row: { id: number }) => row.id), all.slice(after + 1, after + 1 + next.data.length));
  assert.ok((await ok(base, '/api/v3/logs/usage', { method: 'GET' })).total >= 0);
});
