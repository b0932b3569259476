import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { DatabaseSync } from 'node:sqlite';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Worker } from 'node:worker_threads';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import type { NewActivityLog, NewApiLog, NewUsageLog } from '../../src/store/logs.ts';
import { LogWriter, type LogWriterOptions } from '../../src/telemetry/log-writer.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { KEYS, SEED } from '../support/app.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const activity = (i: number): NewActivityLog => ({ action: 'user.created', description: `event ${i}`, ip: '10.0.0.1', createdAt: new Date(i).toISOString() });
const api = (i: number): NewApiLog => ({
  requestId: `req-${i}`,
  method: 'POST',
  path: '/api/v3/encryption/payments/encrypt',
  statusCode: 200,
  durationMs: 1,
  ip: '10.0.0.2',
  createdAt: new Date(i).toISOString(),
});
const usage = (i: number): NewUsageLog => ({ requestId: `req-${i}`, configurationId: 'cfg', mode: 'encrypt', fieldCount: 2, bytes: 64, createdAt: new Date(i).toISOString() });

/** Polls until `check` holds; timing on a loaded machine varies, the outcome must not. */
async function waitFor(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/**
 * A real store-side failure: inserts into `table` abort until the returned function is
 * called.
 */
function refuseInserts(store: Store, table: 'api_logs' | 'usage_logs'): () => void {
  sqliteConnection(store).exec(`
    CREATE TABLE refuse_${table} (on_ INTEGER);
    INSERT INTO refuse_${table} VALUES (1);
    CREATE TRIGGER refuse_${table} BEFORE INSERT ON ${table} WHEN (SELECT count(*) FROM refuse_${table}) > 0
    BEGIN SELECT RAISE(ABORT, 'disk says no'); END;`);
  return () => sqliteConnection(store).exec(`DELETE FROM refuse_${table}`);
}

interface Setup {
  store: Store;
  writer: LogWriter;
  /** What the writer logged, one JSON line per entry. */
  logged: () => Array<{ level: number; msg: string }>;
  path: string;
}

/** A file store (WAL, as in production) in a temp dir and a writer over it. */
function setup(t: TestContext, options: Partial<LogWriterOptions> = {}): Setup {
  const dir = mkdtempSync(join(tmpdir(), 'svc-log-writer-'));
  const path = join(dir, 'svc.db');
  const store = openStore(path);
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  // Written on the main thread unless a test asks for the writer thread.
  const writer = new LogWriter(store, createLogger('info', sink), { flushInterval: 3_600_000, batchSize: 500, queueLimit: 100_000, thread: false, ...options });
  t.after(async () => {
    await writer.close();
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { store, writer, path, logged: () => lines.join('').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)) };
}

test('recording never touches the store: entries are written on a later turn of the event loop', async (t) => {
  const { store, writer } = setup(t, { batchSize: 100 });
  for (let i = 0; i < 100; i++) writer.usage(usage(i));
  assert.equal(await store.logs.count('usage'), 0, 'nothing written inside the caller');
  assert.equal(writer.depth, 100);
  await nextTurn();
  assert.equal(await store.logs.count('usage'), 100, 'a full batch goes out on the next turn');
  assert.equal(writer.depth, 0);
  assert.equal(writer.written, 100);
});

test('a backlog is written one batch per turn, so the event loop is never held for all of it', async (t) => {
  const { store, writer } = setup(t, { batchSize: 500 });
  for (let i = 0; i < 1_250; i++) writer.api(api(i));
  const seen: number[] = [];
  for (let turn = 0; turn < 3; turn++) {
    await nextTurn();
    seen.push(await store.logs.count('api'));
  }
  assert.deepEqual(seen, [500, 1_000, 1_000], 'two full batches on two turns; the partial one waits for the interval');
  writer.flush();
  assert.equal(await store.logs.count('api'), 1_250);
  assert.deepEqual(
    (await store.logs.listApi({ limit: 3, offset: 0 })).map((r) => r.requestId),
    ['req-1249', 'req-1248', 'req-1247'],
  );
});

test('a partial batch is not written before flushInterval', async (t) => {
  const { store, writer } = setup(t, { batchSize: 500, flushInterval: 300 });
  const started = performance.now();
  writer.activity(activity(1));
  await sleep(20);
  assert.equal(await store.logs.count('activity'), 0);
  await waitFor(async () => await store.logs.count('activity') === 1, 'the interval write');
  assert.ok(performance.now() - started >= 295, 'not before the interval');
});

test('one batch of all three kinds is one transaction: a row the store refuses stores none of them', async (t) => {
  const { store, writer, logged } = setup(t, { batchSize: 10, flushInterval: 40 });
  // A real store-side failure, switched by a flag row, on the last kind the batch writes.
  const accept = refuseInserts(store, 'usage_logs');
  for (let i = 0; i < 3; i++) {
    writer.activity(activity(i));
    writer.api(api(i));
    writer.usage(usage(i));
  }
  writer.flush();
  assert.equal(await store.logs.count('activity'), 0, 'activity rolled back with the usage rows');
  assert.equal(await store.logs.count('api'), 0, 'api rolled back with the usage rows');
  assert.equal(await store.logs.count('usage'), 0);
  assert.equal(writer.depth, 9, 'the batch is back in the queue');
  assert.equal(writer.failedBatches, 1);
  assert.equal(sqliteConnection(store).isTransaction, false);

  // Still failing: retried on the timer, logged once for the whole streak.
  await waitFor(() => writer.failedBatches >= 3, 'retries');
  assert.equal(logged().filter((l) => l.msg === 'writing logs failed; will retry').length, 1);

  accept();
  await waitFor(() => writer.depth === 0, 'the retry to succeed');
  for (const kind of ['activity', 'api', 'usage'] as const) assert.equal(await store.logs.count(kind), 3, `${kind}: each entry exactly once after the retry`);
  assert.deepEqual(
    (await store.logs.listUsage({ limit: 10, offset: 0 })).map((r) => r.requestId),
    ['req-2', 'req-1', 'req-0'],
    'order kept',
  );
  assert.equal(writer.written, 9);
  assert.equal(writer.dropped, 0);
  assert.ok(logged().some((l) => l.msg === 'writing logs works again'));
});

test('a store that keeps refusing is retried less and less often, not every flushInterval, and the rows arrive once it takes them', async (t) => {
  const { store, writer } = setup(t, { batchSize: 10, flushInterval: 20 });
  const accept = refuseInserts(store, 'api_logs');
  writer.api(api(0));
  writer.flush();
  assert.equal(writer.failedBatches, 1);
  // New entries while failing do not bring the retry forward.
  for (let i = 1; i < 40; i++) {
    writer.api(api(i));
    await sleep(15);
  }
  // About 600 ms: every 20 ms would be some 30 attempts; doubling from 20 ms allows at most 6.
  assert.ok(writer.failedBatches >= 2 && writer.failedBatches <= 7, `${writer.failedBatches} attempts`);
  accept();
  await waitFor(() => writer.depth === 0, 'the retry to succeed');
  assert.equal(await store.logs.count('api'), 40);
});

test('a database locked by another connection: the write fails at once instead of stalling the event loop, and is retried', async (t) => {
  const { store, writer, path } = setup(t, { batchSize: 5, flushInterval: 30 });
  const other = new DatabaseSync(path);
  t.after(() => other.close());
  other.exec('BEGIN IMMEDIATE');
  for (let i = 0; i < 5; i++) writer.api(api(i));
  const started = performance.now();
  await nextTurn();
  const stalled = performance.now() - started;
  assert.equal(writer.failedBatches, 1);
  assert.equal(writer.depth, 5);
  assert.ok(stalled < 1_000, `the store's 5 s busy timeout was not waited out (${stalled.toFixed(0)} ms)`);
  const { timeout } = sqliteConnection(store).prepare('PRAGMA busy_timeout').get() as { timeout: number };
  assert.equal(timeout, 5_000, 'the busy timeout of other writes is restored');
  other.exec('COMMIT');
  await waitFor(() => writer.depth === 0, 'the retry');
  assert.equal(await store.logs.count('api'), 5);
});

test('close waits for a lock held by another connection rather than lose the entries', async (t) => {
  const { store, writer, path } = setup(t, { batchSize: 1_000 });
  // close() is synchronous, so the lock is held, and let go, by another thread.
  const holder = new Worker(
    `const { DatabaseSync } = require('node:sqlite');
     const { parentPort, workerData } = require('node:worker_threads');
     const db = new DatabaseSync(workerData);
     db.exec('BEGIN IMMEDIATE');
     parentPort.postMessage('locked');
     setTimeout(() => { db.exec('COMMIT'); db.close(); }, 200);`,
    { eval: true, workerData: path },
  );
  t.after(() => holder.terminate());
  await once(holder, 'message');
  writer.api(api(1));
  const started = performance.now();
  await writer.close();
  assert.ok(performance.now() - started >= 100, 'close waited for the lock');
  assert.equal(await store.logs.count('api'), 1);
  assert.equal(writer.dropped, 0);
});

test('a full queue drops new entries and counts them', async (t) => {
  const { store, writer } = setup(t, { queueLimit: 10, batchSize: 1_000 });
  for (let i = 0; i < 6; i++) writer.api(api(i));
  for (let i = 0; i < 6; i++) writer.usage(usage(i));
  writer.activity(activity(0));
  assert.equal(writer.depth, 10);
  assert.equal(writer.dropped, 3);
  writer.flush();
  assert.equal(await store.logs.count('api') + await store.logs.count('usage') + await store.logs.count('activity'), 10);
  // Room again once written.
  writer.activity(activity(1));
  assert.equal(writer.depth, 1);
  assert.equal(writer.dropped, 3);
});

test('close writes everything still queued; entries recorded after close are counted as dropped', async (t) => {
  const { store, writer } = setup(t, { batchSize: 100 });
  // 250 of each kind: two full batches and a partial one that only close can write, the
  // interval being an hour.
  for (let i = 0; i < 250; i++) {
    writer.activity(activity(i));
    writer.api(api(i));
    writer.usage(usage(i));
  }
  assert.equal(await store.logs.count('api'), 0);
  await writer.close();
  for (const kind of ['activity', 'api', 'usage'] as const) assert.equal(await store.logs.count(kind), 250, kind);
  assert.equal(writer.depth, 0);
  assert.equal(writer.written, 750);
  writer.api(api(999));
  assert.equal(writer.depth, 0);
  assert.equal(writer.dropped, 1);
  await writer.close();
  assert.equal(await store.logs.count('api'), 250);
});

test('close with a store that still refuses counts what it could not write', async (t) => {
  const { store, writer, logged } = setup(t);
  sqliteConnection(store).exec(`CREATE TRIGGER refuse_api BEFORE INSERT ON api_logs BEGIN SELECT RAISE(ABORT, 'no'); END;`);
  writer.api(api(1));
  writer.api(api(2));
  await writer.close();
  assert.equal(await store.logs.count('api'), 0);
  assert.equal(writer.dropped, 2);
  assert.ok(logged().some((l) => l.msg === 'log entries could not be written before closing'));
});

test('enabled: false keeps activity logs and skips api and usage logs', async (t) => {
  const { store, writer } = setup(t, { enabled: false });
  writer.api(api(1));
  writer.usage(usage(1));
  writer.activity(activity(1));
  writer.flush();
  assert.equal(await store.logs.count('api'), 0);
  assert.equal(await store.logs.count('usage'), 0);
  assert.equal(await store.logs.count('activity'), 1);
  assert.equal(writer.dropped, 0, 'switched off is not dropped');
});

// ---------------------------------------------------------------------------------------
// The writer thread (file stores)

/** Runs an ES module script as its own process (the thread inherits its flags, so no -e). */
function runScript(dir: string, script: string): Promise<{ stdout: string }> {
  const file = join(dir, 'script.mjs');
  writeFileSync(file, script);
  return promisify(execFile)(process.execPath, ['--no-warnings', file], { timeout: 30_000 });
}

test('a file store is written from the writer thread, in batches, and nothing is lost on close', async (t) => {
  const { store, writer } = setup(t, { thread: true, batchSize: 100 });
  assert.equal(writer.threaded, true);
  // 250 of each: full batches go to the thread as they fill; the rest waits for close.
  for (let i = 0; i < 250; i++) {
    writer.activity(activity(i));
    writer.api(api(i));
    writer.usage(usage(i));
  }
  await waitFor(async () => await store.logs.count('usage') >= 200, 'the full batches');
  assert.ok(await store.logs.count('api') < 250, 'the partial batch waits for the interval');
  await writer.close();
  for (const kind of ['activity', 'api', 'usage'] as const) assert.equal(await store.logs.count(kind), 250, kind);
  assert.equal(writer.written, 750);
  assert.equal(writer.dropped, 0);
  assert.equal(writer.threaded, false, 'the thread is stopped');
  // Batches of 100 and a rest of 50, each in statements of 32 rows and fewer: every row, once, in order.
  assert.deepEqual(
    (await store.logs.listApi({ limit: 251, offset: 0 })).map((r) => r.requestId),
    Array.from({ length: 250 }, (_, i) => `req-${249 - i}`),
  );
});

test('writer thread: waiting for another connection\'s lock does not hold up the event loop', async (t) => {
  const { store, writer, path } = setup(t, { thread: true, batchSize: 10 });
  const other = new DatabaseSync(path);
  t.after(() => other.close());
  other.exec('BEGIN IMMEDIATE');
  for (let i = 0; i < 10; i++) writer.api(api(i));
  // The thread now waits on the lock (its busy timeout is 5 s); this thread keeps turning.
  let turns = 0;
  const started = performance.now();
  while (performance.now() - started < 300) {
    await nextTurn();
    turns++;
  }
  assert.ok(turns > 100, `the event loop kept turning (${turns} turns in 300 ms)`);
  assert.equal(await store.logs.count('api'), 0);
  other.exec('COMMIT');
  await waitFor(async () => await store.logs.count('api') === 10, 'the thread to finish its batch');
  assert.equal(writer.failedBatches, 0, 'it waited rather than failed');
});

test('writer thread: a refused batch comes back and is retried until the store takes it, exactly once', async (t) => {
  const { store, writer, logged } = setup(t, { thread: true, batchSize: 5, flushInterval: 30 });
  const accept = refuseInserts(store, 'api_logs');
  for (let i = 0; i < 5; i++) {
    writer.api(api(i));
    writer.usage(usage(i));
  }
  await waitFor(() => writer.failedBatches >= 2, 'a failure and a retry');
  assert.equal(await store.logs.count('usage'), 0, 'the usage rows went back with the refused api rows');
  assert.equal(writer.written, 0);
  accept();
  // The rows are visible before the thread's report of them arrives: wait for both.
  await waitFor(async () => writer.depth === 0 && await store.logs.count('api') === 5 && writer.written === 10, 'the retry to succeed');
  assert.equal(await store.logs.count('usage'), 5);
  assert.equal(writer.written, 10, 'each entry written exactly once');
  assert.equal(logged().filter((l) => l.msg === 'writing logs failed; will retry').length, 1);
});

test('writer thread: close completes in a process that has nothing else keeping it alive', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-log-writer-exit-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.db');
  openStore(path).close();
  const src = (file: string) => JSON.stringify(new URL(`../../src/${file}`, import.meta.url).href);
  // A batch is in flight on the (unreferenced) thread when close() is called.
  const script = `
    import { openStore } from ${src('store/db.ts')};
    import { LogWriter } from ${src('telemetry/log-writer.ts')};
    import { createLogger } from ${src('telemetry/logger.ts')};
    const store = openStore(${JSON.stringify(path)});
    const writer = new LogWriter(store, createLogger('silent'), { flushInterval: 3_600_000, batchSize: 100, queueLimit: 100_000 });
    for (let i = 0; i < 250; i++) writer.api({ requestId: 'r' + i, method: 'GET', path: '/api/v3/logs/api', statusCode: 200, durationMs: 1, ip: '::1', createdAt: new Date().toISOString() });
    await new Promise((resolve) => setImmediate(resolve));
    const threaded = writer.threaded;
    await writer.close();
    store.close();
    console.log('closed', threaded, writer.written);`;
  const { stdout } = await runScript(dir, script);
  assert.equal(stdout.trim(), 'closed true 250', 'written through the thread, which close() then stopped');
  const store = openStore(path);
  t.after(() => store.close());
  assert.equal(await store.logs.count('api'), 250);
});

test('writer thread: a writer never keeps a process alive, idle or after writing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-log-writer-idle-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.db');
  openStore(path).close();
  const src = (file: string) => JSON.stringify(new URL(`../../src/${file}`, import.meta.url).href);
  // Regression: the thread was unreferenced before its 'message' listener was added, which
  // referenced it again, so a process that never closed the writer never exited.
  const script = (entries: number) => `
    import { openStore } from ${src('store/db.ts')};
    import { LogWriter } from ${src('telemetry/log-writer.ts')};
    import { createLogger } from ${src('telemetry/logger.ts')};
    const writer = new LogWriter(openStore(${JSON.stringify(path)}), createLogger('silent'), { flushInterval: 3_600_000, batchSize: 1, queueLimit: 100 });
    for (let i = 0; i < ${entries}; i++) writer.api({ requestId: 'r', method: 'GET', path: '/', statusCode: 200, durationMs: 1, ip: '::1', createdAt: new Date().toISOString() });
    const deadline = Date.now() + 10_000;
    while (writer.written < ${entries} && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    console.log('done', writer.threaded, writer.written);`;
  assert.equal((await runScript(dir, script(0))).stdout.trim(), 'done true 0');
  assert.equal((await runScript(dir, script(1))).stdout.trim(), 'done true 1');
});

test('logs.writer chooses the writer thread or the main thread for a file store; both keep every entry', async (t) => {
  for (const writer of ['thread', 'inline'] as const) {
    const dir = mkdtempSync(join(tmpdir(), 'svc-writer-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const config = loadConfig({
      text: `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nstore: { path: ${JSON.stringify(join(dir, 'svc.db'))} }\nlogs: { writer: ${writer} }\n${SEED}`,
      env: {},
    });
    const app = await createApp(config, { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') }, logger: createLogger('silent') });
    const { main } = await app.listen();
    assert.equal(app.services.logs.threaded, writer === 'thread');
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`http://127.0.0.1:${main.port}/api/v3/encryption/payments/encrypt`, { method: 'POST', headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json' }, body: '{"card":{"number":"4111"}}' });
      assert.equal(res.status, 200);
    }
    await app.close();
    const db = new DatabaseSync(join(dir, 'svc.db'));
    const rows = db.prepare("SELECT count(*) AS n FROM usage_logs").get() as { n: number };
    db.close();
    assert.equal(rows.n, 3, `${writer}: every usage entry is written by close`);
  }
});
