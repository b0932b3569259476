import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { DELETE_CHUNK, type NewActivityLog, type NewApiLog, type NewUsageLog } from '../../src/store/logs.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { RetentionJob } from '../../src/telemetry/retention.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const DAY = 86_400_000;
const NOW = Date.UTC(2025, 5, 1, 12);
const ago = (ms: number) => new Date(NOW - ms).toISOString();

const activity = (createdAt: string): NewActivityLog => ({ action: 'user.created', description: 'x', ip: '10.0.0.1', createdAt });
const api = (createdAt: string): NewApiLog => ({ requestId: 'r', method: 'GET', path: '/api/v3/logs/api', statusCode: 200, durationMs: 1, ip: '10.0.0.1', createdAt });
const usage = (createdAt: string): NewUsageLog => ({ requestId: 'r', configurationId: 'c', mode: 'decrypt', fieldCount: 1, bytes: 10, createdAt });

function setup(t: TestContext): Store {
  const store = openStore(':memory:');
  t.after(() => store.close());
  return store;
}

const silent = createLogger('silent');

test('deletes rows older than the retention period, of every kind, and keeps the rest', async (t) => {
  const store = setup(t);
  await store.logs.insertActivity([activity(ago(31 * DAY)), activity(ago(29 * DAY))]);
  await store.logs.insertApi([api(ago(30 * DAY + 1000)), api(ago(30 * DAY - 1000)), api(ago(0))]);
  await store.logs.insertUsage([usage(ago(365 * DAY)), usage(ago(DAY))]);
  const job = new RetentionJob(store, silent, { retention: 30 * DAY, now: () => NOW });
  assert.deepEqual(await job.run(), { activity: 1, api: 1, usage: 1 });
  assert.equal(await store.logs.count('activity'), 1);
  assert.equal(await store.logs.count('api'), 2);
  assert.equal(await store.logs.count('usage'), 1);
  assert.deepEqual(await job.run(), { activity: 0, api: 0, usage: 0 });
});

/** Runs `work` while counting event-loop turns: a count near zero means it held the loop. */
async function countingTurns<T>(work: () => Promise<T>): Promise<{ result: T; turns: number }> {
  let turns = 0;
  let ticking = true;
  const tick = () => {
    turns++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  try {
    return { result: await work(), turns };
  } finally {
    ticking = false;
  }
}

test('a large delete yields to the event loop between chunks', async (t) => {
  const store = setup(t);
  const old = ago(40 * DAY);
  await store.logs.insertApi(Array.from({ length: DELETE_CHUNK * 3 + 10 }, () => api(old)));
  await store.logs.insertApi([api(ago(0))]);
  const job = new RetentionJob(store, silent, { retention: 30 * DAY, now: () => NOW });
  const { result: deleted, turns } = await countingTurns(() => job.run());
  assert.equal(deleted.api, DELETE_CHUNK * 3 + 10);
  assert.equal(await store.logs.count('api'), 1);
  assert.ok(turns >= 3, `other work ran between chunks (${turns} turns)`);
});

test('stop() ends a run in progress after its current chunk', async (t) => {
  const store = setup(t);
  const old = ago(40 * DAY);
  await store.logs.insertUsage(Array.from({ length: DELETE_CHUNK * 4 }, () => usage(old)));
  const job = new RetentionJob(store, silent, { retention: 30 * DAY, now: () => NOW });
  const run = job.run();
  // Stopped once the first chunk is gone: the run is in progress.
  while ((await store.logs.count('usage')) === DELETE_CHUNK * 4) await nextTurn();
  await job.stop();
  const deleted = await run;
  assert.ok(deleted.usage >= DELETE_CHUNK && deleted.usage < DELETE_CHUNK * 4, `stopped part way (${deleted.usage})`);
  assert.equal(await store.logs.count('usage'), DELETE_CHUNK * 4 - deleted.usage);
  // Stopped for good: the store may close now.
  assert.deepEqual(await job.run(), { activity: 0, api: 0, usage: 0 });
});

test('concurrent runs are joined, not doubled', async (t) => {
  const store = setup(t);
  await store.logs.insertActivity([activity(ago(40 * DAY))]);
  const job = new RetentionJob(store, silent, { retention: 30 * DAY, now: () => NOW });
  const [a, b] = [job.run(), job.run()];
  assert.equal(a, b);
  assert.deepEqual(await a, { activity: 1, api: 0, usage: 0 });
});

test('start() runs once at once and then on its interval', async (t) => {
  const store = setup(t);
  let now = NOW;
  const job = new RetentionJob(store, silent, { retention: DAY, interval: 20, now: () => now });
  t.after(() => job.stop());
  await store.logs.insertActivity([activity(ago(2 * DAY)), activity(ago(0))]);
  job.start();
  await nextTurn();
  assert.equal(await store.logs.count('activity'), 1, 'the first run happens at start');
  now += 2 * DAY;
  const deadline = Date.now() + 5_000;
  while (await store.logs.count('activity') > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.equal(await store.logs.count('activity'), 0, 'a later run deleted the row that aged out');
});

test('the service applies logs.retention at start and stops the job on close', async () => {
  const config = loadConfig({
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ":memory:" }
logs: { retention: 1h }
logging: { level: silent }`,
    env: {},
  });
  const app = await createApp(config, { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  const { store } = app.services;
  await store.logs.insertApi([api(new Date(Date.now() - 2 * 3_600_000).toISOString()), api(new Date().toISOString())]);
  await app.listen();
  await nextTurn();
  assert.equal(await store.logs.count('api'), 1);
  await app.close();
  assert.equal(sqliteConnection(store).isOpen, false);
});

function fileStore(t: TestContext): Store {
  const dir = mkdtempSync(join(tmpdir(), 'svc-retention-'));
  const store = openStore(join(dir, 'svc.db'));
  t.after(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return store;
}

test('a file store is swept on a worker thread while the event loop keeps turning', async (t) => {
  const store = fileStore(t);
  const old = ago(40 * DAY);
  await store.logs.insertApi(Array.from({ length: DELETE_CHUNK * 4 + 7 }, () => api(old)));
  await store.logs.insertUsage([usage(old), usage(ago(0))]);
  const job = new RetentionJob(store, silent, { retention: 30 * DAY, now: () => NOW });
  const { result: deleted, turns } = await countingTurns(() => job.run());
  assert.deepEqual(deleted, { activity: 0, api: DELETE_CHUNK * 4 + 7, usage: 1 });
  assert.equal(await store.logs.count('api'), 0);
  assert.equal(await store.logs.count('usage'), 1);
  assert.ok(turns > 10, `the event loop kept turning (${turns} turns)`);
});

test('stop() on a thread run returns once the thread is done with the store', async (t) => {
  const store = fileStore(t);
  const old = ago(40 * DAY);
  const total = DELETE_CHUNK * 6;
  await store.logs.insertUsage(Array.from({ length: total }, () => usage(old)));
  const job = new RetentionJob(store, silent, { retention: 30 * DAY, now: () => NOW });
  const run = job.run();
  // Stopped once the first chunk is gone: the run is in progress.
  while ((await store.logs.count('usage')) === DELETE_CHUNK * 4) await nextTurn();
  await job.stop();
  const deleted = await run;
  assert.ok(deleted.usage <= total);
  assert.equal(await store.logs.count('usage'), total - deleted.usage, 'every deleted row reported, nothing half done');
  assert.deepEqual(await job.run(), { activity: 0, api: 0, usage: 0 }, 'a stopped job does nothing');
});
