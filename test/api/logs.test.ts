import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { Pool } from 'undici';
import { relativeTime } from '../../src/api/logs.ts';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { openStore } from '../../src/store/db.ts';
import type { NewActivityLog, NewApiLog, NewUsageLog } from '../../src/store/logs.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call, KEYS, SEED, startApp, type Running } from '../support/app.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const ENDPOINTS = ['/api/v3/logs/unified', '/api/v3/logs/activity', '/api/v3/logs/api', '/api/v3/logs/usage'];
const ENC = '/api/v3/encryption/payments/encrypt';
/** Nothing reaches the store unless a test flushes: each test decides what the logs hold. */
const MANUAL_FLUSH = 'logs: { flush_interval: 1h, batch_size: 100000 }';
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const get = (running: Running, path: string, key: string | null = KEYS.owner) => call(running.url, path, { method: 'GET', key });
const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000).toISOString();

function userId(running: Running, email: string): number {
  const user = syncRepositories(running.app.services.store).users.findByEmail(email);
  assert.ok(user, email);
  return user.id;
}

const activity = (createdAt: string, extra: Partial<NewActivityLog> = {}): NewActivityLog => ({
  action: 'classification.created',
  description: 'Created classification "PHI".',
  ip: '10.1.2.3',
  createdAt,
  ...extra,
});
const apiRow = (createdAt: string, extra: Partial<NewApiLog> = {}): NewApiLog => ({
  requestId: 'r-api',
  method: 'GET',
  path: '/api/v3/classifications',
  statusCode: 200,
  durationMs: 2,
  ip: '10.1.2.4',
  createdAt,
  ...extra,
});
const usageRow = (running: Running, createdAt: string, extra: Partial<NewUsageLog> = {}): NewUsageLog => ({
  requestId: 'r-usage',
  configurationId: (syncRepositories(running.app.services.store).configurations.findBySlug('payments'))!.id,
  mode: 'decrypt',
  fieldCount: 1,
  bytes: 1,
  createdAt,
  ...extra,
});

test('relative times read like Laravel\'s diffForHumans', () => {
  const now = Date.UTC(2025, 0, 31, 12);
  const at = (ms: number) => new Date(now - ms).toISOString();
  assert.equal(relativeTime(at(0), now), 'just now');
  assert.equal(relativeTime(at(1_000), now), '1 second ago');
  assert.equal(relativeTime(at(59_999), now), '59 seconds ago');
  assert.equal(relativeTime(at(5 * 60_000), now), '5 minutes ago');
  assert.equal(relativeTime(at(60 * 60_000), now), '1 hour ago');
  assert.equal(relativeTime(at(47 * 3_600_000), now), '1 day ago');
  assert.equal(relativeTime(at(13 * 86_400_000), now), '1 week ago');
  assert.equal(relativeTime(at(45 * 86_400_000), now), '1 month ago');
  assert.equal(relativeTime(at(800 * 86_400_000), now), '2 years ago');
  assert.equal(relativeTime(at(-3 * 60_000), now), '3 minutes from now');
});

test('every log endpoint: 401 without a valid key, 403 without logs.view, 200 for viewer and developer', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  for (const path of ENDPOINTS) {
    const none = await get(running, path, null);
    assert.equal(none.status, 401, path);
    assert.deepEqual(none.json, { message: 'Unauthorized.' });
    const unknown = await get(running, path, `svc_${'x'.repeat(40)}`);
    assert.equal(unknown.status, 401, path);
    // This key is scoped to data.encrypt only.
    const scoped = await get(running, path, KEYS.encryptOnly);
    assert.equal(scoped.status, 403, path);
    assert.deepEqual(scoped.json, { message: 'User does not have the right permissions.' });
    for (const key of [KEYS.viewer, KEYS.dev, KEYS.owner]) {
      const ok = await get(running, path, key);
      assert.equal(ok.status, 200, `${path} with ${key.slice(0, 12)}`);
      assert.equal(ok.json.current_page, 1);
    }
  }
});

test('a key limited to some configurations gets 403 on every log list, which spans every configuration; the same user\'s unlimited key reads them', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const configurations = await call(running.url, '/api/v3/configurations', { method: 'GET' });
  const payments = configurations.json.data[0].id as string;
  const made = await call(running.url, '/api/v3/api-keys', { body: JSON.stringify({ name: 'team', permissions: ['logs.view'], configurations: [payments] }) });
  assert.equal(made.status, 201, made.text);
  const wide = await call(running.url, '/api/v3/api-keys', { body: JSON.stringify({ name: 'auditor', permissions: ['logs.view'] }) });
  assert.equal(wide.status, 201, wide.text);
  for (const path of ENDPOINTS) {
    const limited = await get(running, path, made.json.key as string);
    assert.equal(limited.status, 403, path);
    assert.deepEqual(limited.json, { message: 'User does not have the right permissions.' });
    assert.equal((await get(running, `${path}?user_id=1&per_page=100`, made.json.key as string)).status, 403, `${path} with a filter`);
    assert.equal((await get(running, path, wide.json.key as string)).status, 200, path);
  }
});

test('an encrypt request appears as an api entry and a usage entry, in every view, with its request id', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const body = '{"card":{"number":"4111 1111 1111 1111"},"ssn":"123"}';
  const enc = await call(running.url, ENC, { body, headers: { 'x-svc-fields': 'card.number', 'x-svc-request-id': 'trace-1' } });
  assert.equal(enc.status, 200);
  // Usage counts the request body's bytes.
  const bytes = Buffer.byteLength(body);
  running.app.services.logs.flush();

  const ada = (await running.app.services.store.users.findByEmail('ada@example.com'))!;
  const payments = (await running.app.services.store.configurations.findBySlug('payments'))!;
  const unified = await get(running, '/api/v3/logs/unified?request_id=trace-1');
  assert.equal(unified.status, 200);
  assert.equal(unified.json.total, 2);
  assert.ok(!unified.text.includes(KEYS.owner), 'the full key is never shown');
  const usage = unified.json.data.find((e: any) => e.log_type === 'usage');
  const api = unified.json.data.find((e: any) => e.log_type === 'api');

  assert.equal(usage.action, 'data.encrypt');
  assert.equal(usage.description, `Encrypted 1 field (${bytes} bytes) with configuration "payments".`);
  assert.deepEqual(JSON.parse(usage.details), { mode: 'encrypt', field_count: 1, bytes, reveal: null });
  assert.equal(usage.causer_email, 'ada@example.com');
  assert.equal(usage.status_code, 200);
  assert.equal(usage.request_id, 'trace-1');
  assert.match(usage.timestamp, ISO);
  assert.equal(usage.configuration.id, payments.id);
  assert.equal(usage.configuration.name, 'payments');
  assert.ok(usage.configuration.values.some((v: any) => v.key === 'proxy_slug' && v.value === 'payments'));
  assert.equal(usage.user.id, ada.id);
  assert.equal(usage.user.email, 'ada@example.com');
  assert.ok(Array.isArray(usage.user.roles));
  assert.deepEqual(Object.keys(usage.full_log).sort(), ['action', 'description', 'ip', 'timestamp', 'user', 'when']);
  assert.equal(usage.full_log.action, 'data.encrypt');
  assert.equal(usage.full_log.description, usage.description);
  assert.equal(usage.full_log.ip, '127.0.0.1', 'taken from the api entry of the same request');
  assert.match(usage.full_log.when, /^(just now|\d+ seconds? ago)$/);
  assert.equal(usage.full_log.timestamp, usage.timestamp);
  assert.equal(usage.full_log.user.email, 'ada@example.com');

  assert.equal(api.action, 'api.request');
  assert.equal(api.description, 'POST /api/v3/encryption/payments/encrypt → 200');
  assert.equal(api.status_code, 200);
  assert.equal(api.request_id, 'trace-1');
  assert.equal(api.causer_email, 'ada@example.com');
  assert.equal(api.configuration.name, 'payments');
  const details = JSON.parse(api.details);
  assert.equal(details.method, 'POST');
  assert.equal(details.status_code, 200);
  assert.equal(details.api_key, KEYS.owner.slice(0, 12));
  assert.equal(typeof details.duration_ms, 'number');
  assert.equal(api.full_log.ip, '127.0.0.1');

  const apiList = await get(running, '/api/v3/logs/api?request_id=trace-1');
  assert.equal(apiList.json.total, 1);
  const a = apiList.json.data[0];
  assert.equal(a.method, 'POST');
  assert.equal(a.path, ENC);
  assert.equal(a.status_code, 200);
  assert.equal(a.request_id, 'trace-1');
  assert.deepEqual(a.api_key, { id: (await running.app.services.store.apiKeys.findByName('owner'))!.id, prefix: KEYS.owner.slice(0, 12) });
  assert.equal(a.configuration.id, payments.id);
  assert.equal(a.destination, null);
  assert.ok(a.duration_ms >= 0);
  assert.equal(a.ip, '127.0.0.1');
  assert.match(a.timestamp, ISO);
  assert.equal(a.user.email, 'ada@example.com');

  const usageList = await get(running, '/api/v3/logs/usage?request_id=trace-1');
  assert.equal(usageList.json.total, 1);
  const u = usageList.json.data[0];
  assert.equal(u.request_id, 'trace-1');
  assert.equal(u.configuration.name, 'payments');
  assert.equal(u.mode, 'encrypt');
  assert.equal(u.field_count, 1);
  assert.equal(u.bytes, bytes);
  assert.match(u.timestamp, ISO);
  assert.equal(u.user.email, 'ada@example.com');
});

test('unauthenticated traffic writes nothing: 401s, 404s and unmatched paths leave no api entry, and are counted instead', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH, undefined, { admin: true });
  const before = sqliteConnection(running.app.services.store).prepare('SELECT count(*) AS n FROM api_logs').get() as { n: number };
  for (let i = 0; i < 50; i++) {
    assert.equal((await call(running.url, ENC, { key: null, body: '{}', headers: { 'x-svc-request-id': `nokey-${i}` } })).status, 401);
    assert.equal((await call(running.url, ENC, { key: 'svc_Wrong000000000000000000000000000000000', body: '{}' })).status, 401);
    assert.equal((await call(running.url, `/api/v3/nothing/${'x'.repeat(900)}`, { key: null, method: 'GET' })).status, 404);
    assert.equal((await call(running.url, `/proxy/${'y'.repeat(900)}/z`, { key: null, method: 'GET' })).status, 404);
  }
  running.app.services.logs.flush();
  const after = sqliteConnection(running.app.services.store).prepare('SELECT count(*) AS n FROM api_logs').get() as { n: number };
  assert.equal(after.n, before.n, 'not one row');
  const metrics = await (await fetch(`${running.adminUrl}/metrics`)).text();
  assert.match(metrics, /svc_http_requests_total\{route="\/api\/v3\/encryption\/:slug\/encrypt",method="POST",status="401"\} 100/);
  assert.match(metrics, /svc_http_requests_total\{route="unmatched",method="GET",status="404"\} 100/);
  // Sampled in the process log: one line per kind per interval, not one per request.
  const lines = running.logs().split('\n').filter((line) => line.includes('requests refused before authentication or routing'));
  assert.ok(lines.length >= 1 && lines.length <= 4, `${lines.length} lines`);
  // An authenticated request is still logged, 4xx or not.
  assert.equal((await call(running.url, ENC, { body: 'nope', headers: { 'x-svc-request-id': 'authed' } })).status, 400);
  running.app.services.logs.flush();
  const res = await get(running, '/api/v3/logs/api?request_id=authed');
  assert.equal(res.json.total, 1);
  assert.equal(res.json.data[0].status_code, 400);
  const usage = await get(running, '/api/v3/logs/usage?request_id=authed');
  assert.equal(usage.json.total, 0, 'no usage for a refused request');
});

test('activity entries: shape, newest first, relative times, user filter as user or user_id', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const ada = userId(running, 'ada@example.com');
  const dev = userId(running, 'dev@example.com');
  await running.app.services.store.logs.insertActivity([
    activity(minutesAgo(3 * 24 * 60), { action: 'api-key.created', description: 'Created API key "ci".', userId: dev, causerEmail: 'dev@example.com' }),
    activity(minutesAgo(5), { userId: ada, causerEmail: 'ada@example.com', requestId: 'r-5' }),
    activity(minutesAgo(120), { action: 'auth.login', description: 'ada@example.com logged in.', userId: ada, causerEmail: 'ada@example.com' }),
  ]);
  const all = await get(running, '/api/v3/logs/activity');
  assert.equal(all.status, 200);
  assert.equal(all.json.total, 3);
  assert.deepEqual(
    all.json.data.map((e: any) => e.when),
    ['5 minutes ago', '2 hours ago', '3 days ago'],
  );
  const [first] = all.json.data;
  assert.equal(first.action, 'classification.created');
  assert.equal(first.description, 'Created classification "PHI".');
  assert.equal(first.ip, '10.1.2.3');
  assert.match(first.timestamp, ISO);
  assert.equal(first.user.id, ada);
  assert.equal(first.user.email, 'ada@example.com');
  assert.equal(first.user.roles[0].name, 'owner');
  assert.equal(first.causer_email, 'ada@example.com');
  assert.equal(first.request_id, 'r-5');

  for (const q of [`user=${dev}`, `user_id=${dev}`, `user=${dev}&user_id=${dev}`]) {
    const res = await get(running, `/api/v3/logs/activity?${q}`);
    assert.equal(res.status, 200, q);
    assert.deepEqual(
      res.json.data.map((e: any) => e.action),
      ['api-key.created'],
      q,
    );
    assert.equal(res.json.total, 1);
    assert.match(res.json.first_page_url, new RegExp(`[?&]${q.split('&')[0]}`), 'the filter is kept in the page links');
  }
  const nobody = await get(running, '/api/v3/logs/activity?user=99999');
  assert.equal(nobody.status, 200);
  assert.equal(nobody.json.total, 0);
  assert.deepEqual(nobody.json.data, []);
});

test('activity user filter: a non-integer is a 422 with Laravel\'s wording', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const cases: Array<[string, string, Record<string, string[]>]> = [
    ['user=abc', 'The user field must be an integer.', { user: ['The user field must be an integer.'] }],
    ['user_id=1.5', 'The user id field must be an integer.', { user_id: ['The user id field must be an integer.'] }],
    ['user=1&user_id=2', 'The user id field must match user.', { user_id: ['The user id field must match user.'] }],
    [
      'user=x&user_id=y',
      'The user field must be an integer. (and 1 more error)',
      { user: ['The user field must be an integer.'], user_id: ['The user id field must be an integer.'] },
    ],
  ];
  for (const [q, message, errors] of cases) {
    const res = await get(running, `/api/v3/logs/activity?${q}`);
    assert.equal(res.status, 422, q);
    assert.deepEqual(res.json, { message, errors }, q);
  }
});

test('unified: the three kinds interleaved newest first, filtered by log_type or type', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const { logs } = running.app.services.store;
  logs.insertActivity([activity(minutesAgo(50)), activity(minutesAgo(20), { action: 'user.created', description: 'Created user x.' })]);
  logs.insertApi([apiRow(minutesAgo(40)), apiRow(minutesAgo(10), { statusCode: 404, path: '/api/v3/classifications/9' })]);
  logs.insertUsage([usageRow(running, minutesAgo(30), { fieldCount: 3, bytes: 2048 })]);

  const all = await get(running, '/api/v3/logs/unified');
  assert.equal(all.status, 200);
  assert.equal(all.json.total, 5);
  assert.deepEqual(
    all.json.data.map((e: any) => `${e.log_type}:${e.action}`),
    ['api:api.request', 'activity:user.created', 'usage:data.decrypt', 'api:api.request', 'activity:classification.created'],
  );
  const [latest, , usage, , oldest] = all.json.data;
  assert.equal(latest.description, 'GET /api/v3/classifications/9 → 404');
  assert.equal(latest.status_code, 404);
  assert.equal(latest.full_log.when, '10 minutes ago');
  assert.equal(usage.description, 'Decrypted 3 fields (2,048 bytes) with configuration "payments".');
  assert.equal(usage.causer_email, null, 'no acting user recorded');
  assert.equal(oldest.status_code, null, 'activity has no status');
  assert.equal(oldest.configuration, null);
  assert.equal(oldest.full_log.ip, '10.1.2.3');
  assert.equal(oldest.full_log.when, '50 minutes ago');

  const expected: Record<string, number> = { activity: 2, api: 2, usage: 1 };
  for (const param of ['log_type', 'type']) {
    for (const kind of ['activity', 'api', 'usage']) {
      const res = await get(running, `/api/v3/logs/unified?${param}=${kind}`);
      assert.equal(res.status, 200);
      assert.equal(res.json.total, expected[kind], `${param}=${kind}`);
      assert.ok(res.json.data.every((e: any) => e.log_type === kind));
    }
  }
  const agree = await get(running, '/api/v3/logs/unified?log_type=api&type=api');
  assert.equal(agree.json.total, 2);
});

test('unified: an unknown log type is a 422 naming the parameter used', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const cases: Array<[string, string, Record<string, string[]>]> = [
    ['log_type=audit', 'The selected log type is invalid.', { log_type: ['The selected log type is invalid.'] }],
    ['type=ACTIVITY', 'The selected type is invalid.', { type: ['The selected type is invalid.'] }],
    ['log_type=api&type=usage', 'The log type field must match type.', { log_type: ['The log type field must match type.'] }],
    ['log_type=x&per_page=0', 'The selected log type is invalid. (and 1 more error)', { log_type: ['The selected log type is invalid.'], per_page: ['The per page field must be at least 1.'] }],
  ];
  for (const [q, message, errors] of cases) {
    const res = await get(running, `/api/v3/logs/unified?${q}`);
    assert.equal(res.status, 422, q);
    assert.deepEqual(res.json, { message, errors }, q);
  }
});

test('pagination: envelope fields and links at 0, 1, 10, 11 and 25 entries', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const { logs } = running.app.services.store;
  const base = `${running.url}/api/v3/logs/activity`;
  let inserted = 0;
  const fill = (n: number) => {
    logs.insertActivity(Array.from({ length: n - inserted }, (_, i) => activity(minutesAgo(1000 - inserted - i), { description: `#${inserted + i + 1}` })));
    inserted = n;
  };

  const empty = await get(running, '/api/v3/logs/activity');
  assert.deepEqual({ ...empty.json, links: undefined }, {
    current_page: 1,
    data: [],
    first_page_url: `${base}?page=1`,
    from: null,
    last_page: 1,
    last_page_url: `${base}?page=1`,
    links: undefined,
    next_page_url: null,
    path: base,
    per_page: 10,
    prev_page_url: null,
    to: null,
    total: 0,
    next_cursor: null,
    next_cursor_url: null,
  });

  for (const [n, lastPage] of [[1, 1], [10, 1], [11, 2]] as const) {
    fill(n);
    const res = await get(running, '/api/v3/logs/activity');
    assert.equal(res.json.total, n);
    assert.equal(res.json.last_page, lastPage);
    assert.equal(res.json.from, 1);
    assert.equal(res.json.to, Math.min(n, 10));
    assert.equal(res.json.data[0].description, `#${n}`, 'newest first');
    assert.equal(res.json.next_page_url, lastPage > 1 ? `${base}?page=2` : null);
  }

  fill(25);
  const page3 = await get(running, '/api/v3/logs/activity?per_page=10&page=3');
  assert.equal(page3.status, 200);
  assert.equal(page3.json.current_page, 3);
  assert.equal(page3.json.data.length, 5);
  assert.equal(page3.json.from, 21);
  assert.equal(page3.json.to, 25);
  assert.equal(page3.json.total, 25);
  assert.equal(page3.json.last_page, 3);
  assert.equal(page3.json.per_page, 10);
  assert.equal(page3.json.next_page_url, null);
  assert.equal(page3.json.prev_page_url, `${base}?per_page=10&page=2`);
  assert.equal(page3.json.last_page_url, `${base}?per_page=10&page=3`);
  assert.deepEqual(
    page3.json.links.map((l: any) => [l.label, l.page, l.active]),
    [['&laquo; Previous', 2, false], ['1', 1, false], ['2', 2, false], ['3', 3, true], ['Next &raquo;', null, false]],
  );
  assert.deepEqual(
    page3.json.data.map((e: any) => e.description),
    ['#5', '#4', '#3', '#2', '#1'],
  );
  const past = await get(running, '/api/v3/logs/activity?page=9');
  assert.deepEqual([past.json.data, past.json.from, past.json.to, past.json.total], [[], null, null, 25]);
  const big = await get(running, '/api/v3/logs/activity?per_page=101');
  assert.equal(big.status, 422);
  assert.deepEqual(big.json, { message: 'The per page field must not be greater than 100.', errors: { per_page: ['The per page field must not be greater than 100.'] } });

  // The unified view pages across kinds the same way.
  logs.insertApi(Array.from({ length: 5 }, (_, i) => apiRow(minutesAgo(2000 + i))));
  const unified = await get(running, '/api/v3/logs/unified?per_page=20&page=2');
  assert.equal(unified.json.total, 30);
  assert.equal(unified.json.from, 21);
  assert.equal(unified.json.to, 30);
  assert.deepEqual(
    unified.json.data.map((e: any) => e.log_type),
    [...Array(5).fill('activity'), ...Array(5).fill('api')],
  );
});

/**
 * The must-show of issue 3: nothing is lost between the request path and the store, even
 * across a graceful stop. A file store, since the rows are counted after the service has
 * closed it; the log settings are the defaults, with each writer.
 */
for (const writerKind of ['inline', 'thread'] as const) test(`10,000 encrypt requests leave exactly 10,000 usage rows and 10,000 api rows after a graceful stop (logs.writer: ${writerKind})`, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-logs-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.db');
  const config = loadConfig({
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${JSON.stringify(path)} }
logging: { level: warn }
logs: { writer: ${writerKind} }
${SEED}`,
    env: {},
  });
  const output: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      output.push(chunk.toString());
      done();
    },
  });
  const app = await createApp(config, { logger: createLogger('warn', sink), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  const { main } = await app.listen();
  let closed = false;
  t.after(async () => {
    if (!closed) await app.close();
  });

  const total = 10_000;
  const concurrency = 50;
  const pool = new Pool(`http://127.0.0.1:${main.port}`, { connections: concurrency, pipelining: 1 });
  let next = 0;
  let failures = 0;
  const worker = async () => {
    while (next < total) {
      const i = next++;
      const res = await pool.request({
        method: 'POST',
        path: '/api/v3/encryption/payments/encrypt',
        headers: {
          'content-type': 'application/json',
          'x-svc-authorization': KEYS.owner,
          'x-svc-fields': 'card.number',
          'x-svc-request-id': `bulk-${i}`,
        },
        body: `{"card":{"number":"4111 1111 1111 ${String(i).padStart(4, '0')}"},"i":${i}}`,
      });
      await res.body.text();
      if (res.statusCode !== 200 || res.headers['x-svc-request-id'] !== `bulk-${i}`) failures++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  await pool.close();
  assert.equal(failures, 0);

  const writer = app.services.logs;
  assert.equal(writer.threaded, writerKind === 'thread', `a file store is written ${writerKind === 'thread' ? 'from the writer thread' : 'on the main thread'}`);
  const queuedAtStop = writer.depth;
  await app.close();
  closed = true;
  t.diagnostic(`${total} requests in ${seconds.toFixed(1)} s (${Math.round(total / seconds)} req/s); ${queuedAtStop} entries still queued at stop`);
  assert.equal(writer.dropped, 0);
  assert.equal(writer.failedBatches, 0);
  assert.equal(writer.depth, 0);

  const store = openStore(path);
  t.after(() => store.close());
  for (const table of ['usage_logs', 'api_logs']) {
    const rows = sqliteConnection(store).prepare(`SELECT request_id FROM ${table} WHERE request_id LIKE 'bulk-%'`).all() as Array<{ request_id: string }>;
    assert.equal(rows.length, total, `${table}: one row per request`);
    const ids = new Set(rows.map((r) => r.request_id));
    assert.equal(ids.size, total, `${table}: no request twice`);
    for (let i = 0; i < total; i++) if (!ids.has(`bulk-${i}`)) assert.fail(`${table}: bulk-${i} is missing`);
  }
  const usage = sqliteConnection(store).prepare(`SELECT DISTINCT mode, field_count FROM usage_logs WHERE request_id LIKE 'bulk-%'`).all();
  assert.deepEqual(usage.map((r) => ({ ...r })), [{ mode: 'encrypt', field_count: 1 }]);
  const statuses = sqliteConnection(store).prepare(`SELECT DISTINCT status_code, path FROM api_logs WHERE request_id LIKE 'bulk-%'`).all();
  assert.deepEqual(statuses.map((r) => ({ ...r })), [{ status_code: 200, path: '/api/v3/encryption/payments/encrypt' }]);
  assert.ok(!output.join('').includes('"level":50'), 'nothing logged at error level');
});

// ---------------------------------------------------------------------------------------
// Cursor pagination and bounded pages (DESIGN §13, "Bounded queries")

/** The path and query of an absolute URL the API returned, to call it on the test server. */
const local = (url: string) => {
  const u = new URL(url);
  return u.pathname + u.search;
};

/** Every entry of a list, page by page: by `page` numbers, or by following `next_cursor_url`. */
async function walk(running: Running, path: string, by: 'page' | 'cursor'): Promise<string[]> {
  const seen: string[] = [];
  const sep = path.includes('?') ? '&' : '?';
  let next: string | null = `${path}${sep}per_page=4`;
  for (let page = 1; next !== null; page++) {
    const res = await get(running, next);
    assert.equal(res.status, 200, `${next}: ${res.text}`);
    assert.equal(res.json.current_page, page, next);
    assert.equal(res.json.from, res.json.data.length === 0 ? null : (page - 1) * 4 + 1, next);
    for (const entry of res.json.data) seen.push(`${entry.log_type ?? ''}${entry.id}:${entry.timestamp}`);
    if (res.json.next_cursor === null) assert.equal(res.json.next_cursor_url, null);
    else assert.equal(local(res.json.next_cursor_url), `${path.split('?')[0]}?${new URLSearchParams([...new URLSearchParams(path.split('?')[1] ?? ''), ['per_page', '4'], ['cursor', res.json.next_cursor]]).toString()}`);
    assert.equal(res.json.next_cursor === null, page >= res.json.last_page, `${next}: a next cursor exactly when there is a next page`);
    next = by === 'page' ? (page < res.json.last_page ? `${path}${sep}per_page=4&page=${page + 1}` : null) : res.json.next_cursor_url === null ? null : local(res.json.next_cursor_url);
  }
  return seen;
}

test('cursor pages walk each log list exactly as numbered pages do, ties across kinds and within a kind included', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const { logs } = running.app.services.store;
  const ada = userId(running, 'ada@example.com');
  // Three rows share each timestamp, and the tables' ids run in step: activity 5 and api 5
  // have the same created_at, so only the kind orders them.
  const at = (i: number) => minutesAgo(100 - Math.floor(i / 3));
  logs.insertActivity(Array.from({ length: 13 }, (_, i) => activity(at(i), { description: `a${i}`, userId: i % 2 === 0 ? ada : null })));
  logs.insertApi(Array.from({ length: 11 }, (_, i) => apiRow(at(i), { userId: i % 3 === 0 ? ada : null })));
  logs.insertUsage(Array.from({ length: 6 }, (_, i) => usageRow(running, at(i * 2))));

  for (const path of [
    '/api/v3/logs/unified',
    '/api/v3/logs/unified?type=api',
    `/api/v3/logs/unified?user=${ada}`,
    '/api/v3/logs/activity',
    `/api/v3/logs/activity?user_id=${ada}`,
    '/api/v3/logs/api',
    '/api/v3/logs/usage',
    '/api/v3/logs/api?request_id=r-api',
  ]) {
    const numbered = await walk(running, path, 'page');
    const cursored = await walk(running, path, 'cursor');
    assert.ok(numbered.length > 4, path);
    assert.deepEqual(cursored, numbered, path);
    assert.equal(new Set(cursored).size, cursored.length, `${path}: an entry came twice`);
  }
  assert.equal((await walk(running, '/api/v3/logs/unified', 'cursor')).length, 30);

  // A cursor keeps its place while newer entries arrive, where numbered pages shift.
  const first = await get(running, '/api/v3/logs/activity?per_page=4');
  logs.insertActivity([activity(minutesAgo(0), { description: 'newest' })]);
  const second = await get(running, local(first.json.next_cursor_url));
  assert.deepEqual(
    second.json.data.map((e: any) => e.description),
    ['a8', 'a7', 'a6', 'a5'],
  );
  assert.equal(second.json.current_page, 2);
  // `page` beside the cursor is accepted when it names the same page.
  assert.equal((await get(running, `${local(first.json.next_cursor_url)}&page=2`)).status, 200);
});

test('a cursor is refused (422) when altered, malformed, or used with another list, other filters or another per_page', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const { logs } = running.app.services.store;
  const ada = userId(running, 'ada@example.com');
  logs.insertActivity(Array.from({ length: 8 }, (_, i) => activity(minutesAgo(50 - i), { userId: ada })));
  logs.insertApi(Array.from({ length: 8 }, (_, i) => apiRow(minutesAgo(50 - i), { userId: ada })));
  const cursorOf = async (path: string) => {
    const res = await get(running, path);
    assert.equal(res.status, 200, res.text);
    assert.equal(typeof res.json.next_cursor, 'string', path);
    return res.json.next_cursor as string;
  };
  const cursor = await cursorOf(`/api/v3/logs/activity?per_page=3&user=${ada}`);
  assert.equal((await get(running, `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${cursor}`)).status, 200);

  const message = 'The cursor is invalid for this list: it is altered, or was issued for other filters or another per_page.';
  const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
  const refused: Array<[string, string]> = [
    ['altered at the start', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${flip(cursor, 2)}`],
    ['altered in the middle', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${flip(cursor, 12)}`],
    ['altered at the end', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${flip(cursor, cursor.length - 2)}`],
    ['truncated', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${cursor.slice(0, -1)}`],
    ['extended', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${cursor}AA`],
    ['padded', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${cursor}%3D`],
    ['another alphabet', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${cursor.replaceAll('-', '+').replaceAll('_', '/')}x`],
    ['SQL', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${encodeURIComponent("' OR 1=1 --")}`],
    ['JSON', `/api/v3/logs/activity?per_page=3&user=${ada}&cursor=${encodeURIComponent('{"page":2,"id":1}')}`],
    ['another list', `/api/v3/logs/api?per_page=3&user=${ada}&cursor=${cursor}`],
    ['the unified list', `/api/v3/logs/unified?per_page=3&user=${ada}&cursor=${cursor}`],
    ['no user filter', `/api/v3/logs/activity?per_page=3&cursor=${cursor}`],
    ['another user', `/api/v3/logs/activity?per_page=3&user=${ada + 1}&cursor=${cursor}`],
    ['an added request filter', `/api/v3/logs/activity?per_page=3&user=${ada}&request_id=x&cursor=${cursor}`],
    ['another per_page', `/api/v3/logs/activity?per_page=4&user=${ada}&cursor=${cursor}`],
  ];
  for (const [what, path] of refused) {
    const res = await get(running, path);
    assert.equal(res.status, 422, `${what}: ${res.text}`);
    assert.deepEqual(res.json, { message, errors: { cursor: [message] } }, what);
  }
  const long = await get(running, `/api/v3/logs/activity?cursor=${'A'.repeat(1000)}`);
  assert.equal(long.status, 422);
  assert.deepEqual(Object.keys(long.json.errors), ['cursor']);

  // The unified list binds its kinds: a cursor of type=api is not one of type=activity.
  const unifiedApi = await cursorOf(`/api/v3/logs/unified?type=api&per_page=3`);
  assert.equal((await get(running, `/api/v3/logs/unified?log_type=api&per_page=3&cursor=${unifiedApi}`)).status, 200, 'log_type and type are the same filter');
  assert.equal((await get(running, `/api/v3/logs/unified?type=activity&per_page=3&cursor=${unifiedApi}`)).status, 422);
  assert.equal((await get(running, `/api/v3/logs/unified?per_page=3&cursor=${unifiedApi}`)).status, 422);

  // `page` beside a cursor must be the page it leads to.
  const wrongPage = await get(running, `/api/v3/logs/activity?per_page=3&user=${ada}&page=5&cursor=${cursor}`);
  assert.equal(wrongPage.status, 422);
  assert.deepEqual(wrongPage.json.errors, { page: ['The page field must be 2, the page the cursor leads to, or left out.'] });

  // Another deployment (another master key) does not accept this one's cursors.
  const other = await startApp(t, MANUAL_FLUSH);
  await other.app.services.store.logs.insertActivity(Array.from({ length: 8 }, (_, i) => activity(minutesAgo(50 - i), { userId: userId(other, 'ada@example.com') })));
  assert.equal((await get(other, `/api/v3/logs/activity?per_page=3&user=${userId(other, 'ada@example.com')}&cursor=${cursor}`)).status, 422);
});

/** The median time of `n` GETs of `path`, in ms. */
async function medianMs(running: Running, path: string, n = 5): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    const res = await get(running, path);
    times.push(performance.now() - started);
    assert.equal(res.status, 200, res.text);
  }
  return times.sort((a, b) => a - b)[Math.floor(n / 2)]!;
}

test('bounded pages on 120,000 entries: the last page by cursor is the last page by number, and a page past the end is empty with the true total (costs: bench/log-pages.ts)', async (t) => {
  const running = await startApp(t, MANUAL_FLUSH);
  const { logs } = running.app.services.store;
  const rows = 120_000;
  const start = Date.now() - rows * 1000;
  for (let from = 0; from < rows; from += 20_000) {
    const at = (i: number) => new Date(start + (from + i) * 1000).toISOString();
    logs.insertBatch({
      activity: Array.from({ length: 4_000 }, (_, i) => activity(at(i * 5))),
      api: Array.from({ length: 10_000 }, (_, i) => apiRow(at(i * 2))),
      usage: Array.from({ length: 6_000 }, (_, i) => usageRow(running, at(i * 3 + 1))),
    });
  }
  const lastPage = rows / 10;
  // The cursor the page before the last returns.
  const [row] = await logs.listUnified(['activity', 'api', 'usage'], { limit: 1, offset: rows - 11 });
  const { logCursors } = await import('../../src/api/log-cursor.ts');
  const cursor = logCursors(running.app.services.master).encode(
    { list: 'unified', kinds: ['activity', 'api', 'usage'], userId: undefined, requestId: undefined, perPage: 10 },
    lastPage,
    { createdAt: row!.log.createdAt, id: row!.log.id, kind: row!.kind },
  );
  const byPage = await get(running, `/api/v3/logs/unified?page=${lastPage}`);
  const byCursor = await get(running, `/api/v3/logs/unified?cursor=${cursor}`);
  assert.deepEqual(byCursor.json.data, byPage.json.data, 'the same last page either way');
  assert.equal(byCursor.json.next_cursor, null);

  const first = await medianMs(running, '/api/v3/logs/unified');
  const deepByPage = await medianMs(running, `/api/v3/logs/unified?page=${lastPage}`);
  const deepByCursor = await medianMs(running, `/api/v3/logs/unified?cursor=${cursor}`);
  const pastTheEnd = await medianMs(running, '/api/v3/logs/unified?page=1000000000');
  t.diagnostic(`${rows} rows: first page ${first.toFixed(1)} ms, last page by number ${deepByPage.toFixed(1)} ms, by cursor ${deepByCursor.toFixed(1)} ms, page 1000000000 ${pastTheEnd.toFixed(1)} ms`);
  const past = await get(running, '/api/v3/logs/unified?page=1000000000');
  assert.deepEqual([past.json.data, past.json.from, past.json.total, past.json.next_cursor], [[], null, rows, null]);
  // The timings are reported, not asserted: on a shared machine a timing bound is either
  // loose enough to prove nothing or flaky. bench/log-pages.ts measures these costs side
  // by side (bench/README.md, "Log pages").
});
