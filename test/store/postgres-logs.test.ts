/**
 * The log tables on PostgreSQL, partitioned by day (src/store/postgres/partitions.ts): where
 * rows land, what retention drops and deletes, shipped batches landing once, and the plans
 * of the unified list's pages. One throwaway cluster for this file, a database per test.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pg from 'pg';
import { copyStore } from '../../src/store/copy.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { unifiedPageStatement, type LogKind, type NewActivityLog, type NewApiLog, type NewUsageLog } from '../../src/store/logs.ts';
import { POSTGRES, toPostgres, types } from '../../src/store/postgres/executor.ts';
import { textOf } from '../../src/store/query.ts';
import { openPostgresStore } from '../../src/store/postgres/open.ts';
import { PARTITION_DAYS_AHEAD } from '../../src/store/postgres/partitions.ts';
import type { ShippedApiLog, ShippedUsageLog } from '../../src/store/shipped-logs.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { RetentionJob } from '../../src/telemetry/retention.ts';
import { activityRow, apiRow, shippedApiRow, shippedUsageRow, usageRow } from '../support/log-rows.ts';
import { postgresPerFile } from '../support/postgres.ts';

const postgres = postgresPerFile();

const DAY_MS = 24 * 60 * 60 * 1000;
/** `YYYY-MM-DD` of the UTC day `days` from today. */
const day = (days: number): string => new Date(Math.floor(Date.now() / DAY_MS) * DAY_MS + days * DAY_MS).toISOString().slice(0, 10);
const compact = (text: string): string => text.replaceAll('-', '');

const activity = (createdAt: string, i = 0): NewActivityLog => activityRow(i, createdAt);
const api = (createdAt: string, i = 0, userId: number | null = null): NewApiLog => apiRow(i, createdAt, userId);
const usage = (createdAt: string, i = 0, userId: number | null = null): NewUsageLog => usageRow(i, createdAt, userId);
const shippedApi = (id: number, createdAt: string): ShippedApiLog => shippedApiRow(id, createdAt);
const shippedUsage = (id: number, createdAt: string): ShippedUsageLog => shippedUsageRow(id, createdAt);
const INSTANCE = 'a'.repeat(32);

async function newDatabase(): Promise<string> {
  return (await postgres.database('svc_logs')).url;
}

async function open(t: TestContext, url?: string): Promise<{ store: Store; db: pg.Client; url: string }> {
  const at = url ?? (await newDatabase());
  const store = await openPostgresStore(at, { max: 4 });
  const db = new pg.Client({ connectionString: at, types });
  await db.connect();
  t.after(async () => {
    await db.end();
    await store.close();
  });
  return { store, db, url: at };
}

/** The partitions of `table`, by name, with their bounds as the catalog writes them. */
async function partitions(db: pg.Client, table: string): Promise<Record<string, string>> {
  const { rows } = await db.query<{ name: string; bound: string }>(
    `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = CAST(to_regclass($1) AS oid) ORDER BY c.relname`,
    [table],
  );
  return Object.fromEntries(rows.map((row) => [row.name, row.bound]));
}

/** Each row's partition, keyed by a column of the row. */
async function placed(db: pg.Client, table: string, key: string): Promise<Record<string, string>> {
  const { rows } = await db.query<{ key: string; part: string }>(`SELECT ${key} AS key, CAST(CAST(tableoid AS regclass) AS TEXT) AS part FROM ${table} ORDER BY ${key}`);
  return Object.fromEntries(rows.map((row) => [row.key, row.part]));
}

/** Every node type of an EXPLAIN (FORMAT JSON) plan, with the index it scans if any, depth first. */
function nodes(plan: Record<string, unknown>): string[] {
  const own = `${plan['Node Type'] as string}${plan['Index Name'] === undefined ? '' : ` ${plan['Index Name'] as string}`}`;
  const children = (plan['Plans'] as Array<Record<string, unknown>> | undefined) ?? [];
  return [own, ...children.flatMap(nodes)];
}

describe('log tables on PostgreSQL, partitioned by day', { skip: postgres.skip }, () => {
  test('the store opens with the partitions of today and the next days, and rows of several days land in their own', async (t) => {
    const { store, db } = await open(t);
    for (const table of ['activity_logs', 'api_logs', 'usage_logs']) {
      const expected: Record<string, string> = { [`${table}_default`]: 'DEFAULT' };
      for (let i = 0; i <= PARTITION_DAYS_AHEAD; i++) expected[`${table}_p${compact(day(i))}`] = `FOR VALUES FROM ('${day(i)}') TO ('${day(i + 1)}')`;
      assert.deepEqual(await partitions(db, table), expected, table);
    }

    const stamps = [`${day(0)}T00:00:00.000Z`, `${day(0)}T23:59:59.999Z`, `${day(1)}T12:00:00.000Z`, `${day(2)}T00:00:00.000Z`];
    await store.logs.insertApi(stamps.map((stamp, i) => api(stamp, i)));
    await store.logs.insertUsage(stamps.map((stamp, i) => usage(stamp, i)));
    await store.logs.insertActivity(stamps.map((stamp, i) => activity(stamp, i)));
    const where = { 'req-0': day(0), 'req-1': day(0), 'req-2': day(1), 'req-3': day(2) };
    for (const table of ['api_logs', 'usage_logs']) {
      assert.deepEqual(await placed(db, table, 'request_id'), Object.fromEntries(Object.entries(where).map(([key, d]) => [key, `${table}_p${compact(d)}`])), table);
    }
    assert.deepEqual(Object.values(await placed(db, 'activity_logs', 'description')), [0, 0, 1, 2].map((i) => `activity_logs_p${compact(day(i))}`));

    // The lists read them back across partitions, newest first.
    assert.deepEqual(
      (await store.logs.listApi({ limit: 10, offset: 0 })).map((row) => row.createdAt),
      [...stamps].reverse(),
    );
    assert.equal(await store.logs.count('api'), 4);
  });

  test('a row far in the past or the future goes to the DEFAULT partition, and reads back like any other', async (t) => {
    const { store, db } = await open(t);
    await store.logs.insertApi([api('1999-12-31T23:59:59.999Z', 1), api('2999-01-01T00:00:00.000Z', 2), api(`${day(0)}T08:00:00.000Z`, 3)]);
    assert.deepEqual(await placed(db, 'api_logs', 'request_id'), {
      'req-1': 'api_logs_default',
      'req-2': 'api_logs_default',
      'req-3': `api_logs_p${compact(day(0))}`,
    });
    assert.deepEqual(
      (await store.logs.listUnified(['api'], { limit: 10, offset: 0 })).map((entry) => entry.log.createdAt),
      ['2999-01-01T00:00:00.000Z', `${day(0)}T08:00:00.000Z`, '1999-12-31T23:59:59.999Z'],
    );
  });

  test('ids stay unique across partitions: one identity for the whole table, in insertion order', async (t) => {
    const { store, db } = await open(t);
    const days = [2, 0, 1, 0, 2, 3, 1, 0];
    await store.logs.insertApi(days.map((d, i) => api(`${day(d)}T10:00:00.000Z`, i)));
    await store.logs.insertApi([api('1999-01-01T00:00:00.000Z', 100)]);
    const { rows } = await db.query<{ id: number; request_id: string }>('SELECT id, request_id FROM api_logs ORDER BY id');
    assert.deepEqual(
      rows.map((row) => row.request_id),
      [...days.map((_, i) => `req-${i}`), 'req-100'],
    );
    assert.equal(new Set(rows.map((row) => row.id)).size, rows.length);
    const { rows: parts } = await db.query<{ n: number }>('SELECT count(DISTINCT tableoid) AS n FROM api_logs');
    assert.equal(parts[0]?.n, 5, 'four day partitions and the DEFAULT one');
  });

  test('retention drops the partitions of days wholly before the cutoff, counting their rows, and deletes the cutoff day\'s and the DEFAULT partition\'s old rows one by one', async (t) => {
    const { store, db } = await open(t);
    // Days in the past whose partitions a store running then would have made.
    await store.logs.preparePartitions('2026-01-10T15:00:00.000Z');
    assert.ok('api_logs_p20260113' in (await partitions(db, 'api_logs')));
    const kinds: Record<LogKind, (createdAt: string, i: number) => unknown> = { activity, api, usage };
    const stamps = [
      '2025-06-01T00:00:00.000Z', // DEFAULT, old
      '2026-01-10T00:00:00.000Z',
      '2026-01-10T23:59:59.999Z',
      '2026-01-11T09:00:00.000Z',
      '2026-01-12T11:59:59.999Z', // the cutoff's day, before it
      '2026-01-12T12:00:00.000Z', // the cutoff's day, at it: kept
      '2026-01-13T01:00:00.000Z',
    ];
    for (const [kind, make] of Object.entries(kinds)) {
      const rows = stamps.map((stamp, i) => make(stamp, i));
      if (kind === 'activity') await store.logs.insertActivity(rows as NewActivityLog[]);
      if (kind === 'api') await store.logs.insertApi(rows as NewApiLog[]);
      if (kind === 'usage') await store.logs.insertUsage(rows as NewUsageLog[]);
    }
    // A row outside every partition but later than the cutoff stays in DEFAULT and stays.
    await store.logs.insertApi([api('2999-01-01T00:00:00.000Z', 99)]);

    const deleted = await store.logs.deleteOlderThan('2026-01-12T12:00:00.000Z');
    assert.deepEqual(deleted, { activity: 5, api: 5, usage: 5 });
    for (const table of ['activity_logs', 'api_logs', 'usage_logs']) {
      const names = Object.keys(await partitions(db, table));
      assert.ok(!names.includes(`${table}_p20260110`) && !names.includes(`${table}_p20260111`), `${table}: the past days are dropped`);
      assert.ok(names.includes(`${table}_p20260112`) && names.includes(`${table}_p20260113`) && names.includes(`${table}_default`), table);
      const { rows } = await db.query('SELECT 1 FROM pg_class WHERE relname = $1', [`${table}_p20260110`]);
      assert.equal(rows.length, 0, 'dropped, not only detached');
    }
    assert.deepEqual(await placed(db, 'api_logs', 'request_id'), {
      'req-5': 'api_logs_p20260112',
      'req-6': 'api_logs_p20260113',
      'req-99': 'api_logs_default',
    });
    assert.equal(await store.logs.count('usage'), 2);
    assert.deepEqual(await store.logs.deleteOlderThan('2026-01-12T12:00:00.000Z'), { activity: 0, api: 0, usage: 0 });
  });

  test('the retention job on PostgreSQL makes the coming days\' partitions and drops the past ones, empty or not, without a SQLite thread', async (t) => {
    const { store, db } = await open(t);
    await store.logs.preparePartitions('2026-01-28T00:00:00.000Z');
    await store.logs.preparePartitions('2026-02-01T00:00:00.000Z');
    await store.logs.insertApi([api('2026-02-02T13:00:00.000Z', 1)]);
    const lines: Array<{ level: number; msg: string }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as { level: number; msg: string });
        done();
      },
    });
    const logger = createLogger('info', sink);
    let now = Date.parse('2026-02-03T12:00:00.000Z');
    // A day is kept.
    const job = new RetentionJob(store, logger, { retention: DAY_MS, now: () => now });
    t.after(() => job.stop());

    // No row is past retention, but the days before the cutoff's have partitions.
    assert.deepEqual(await job.run(), { activity: 0, api: 0, usage: 0 });
    let names = Object.keys(await partitions(db, 'api_logs'));
    for (const gone of ['20260128', '20260131', '20260201']) assert.ok(!names.includes(`api_logs_p${gone}`), `${gone}: dropped though empty`);
    assert.ok(names.includes('api_logs_p20260202'), 'the cutoff\'s day stays');
    assert.ok(names.includes(`api_logs_p${compact(new Date(now + PARTITION_DAYS_AHEAD * DAY_MS).toISOString().slice(0, 10))}`), 'the coming days are made');

    // A day later: the whole of 02-02 goes as a partition, 03-03 before noon row by row.
    await store.logs.insertApi([api('2026-02-02T10:00:00.000Z', 2), api('2026-02-03T10:00:00.000Z', 3), api('2026-02-03T14:00:00.000Z', 4)]);
    now += DAY_MS;
    assert.deepEqual(await job.run(), { activity: 0, api: 3, usage: 0 });
    names = Object.keys(await partitions(db, 'api_logs'));
    assert.ok(!names.includes('api_logs_p20260202') && names.includes('api_logs_p20260203'));
    assert.deepEqual((await store.logs.listApi({ limit: 10, offset: 0 })).map((row) => row.requestId), ['req-4']);
    assert.deepEqual(lines.filter((line) => line.level >= 40), [], 'no warning: no thread tried, nothing failed');
  });

  test('a partition step stuck behind a long transaction on a log table gives up instead of holding up the logs, and goes through later', async (t) => {
    const { store, db } = await open(t);
    await store.logs.preparePartitions('2026-04-01T00:00:00.000Z');
    await store.logs.insertApi([api('2026-04-01T10:00:00.000Z', 1), api('2026-04-02T10:00:00.000Z', 2)]);
    // A reader holds the table's lock, which DETACH needs alone.
    await db.query('BEGIN');
    await db.query('SELECT count(*) FROM api_logs');
    await assert.rejects(store.logs.dropPartitionsOlderThan('2026-04-03T00:00:00.000Z'), (error: Error & { code?: string }) => error.code === '55P03');
    // Its lock request queued the logs' readers until it gave up; they read at once now.
    assert.equal(await store.logs.count('api'), 2);
    await db.query('COMMIT');
    assert.deepEqual(await store.logs.dropPartitionsOlderThan('2026-04-03T00:00:00.000Z'), { activity: 0, api: 2, usage: 0 });
    assert.equal(await store.logs.count('api'), 0);
  });

  test('a retried shipped batch lands once, in its days\' partitions; so does a row repeated inside one', async (t) => {
    const { store, db } = await open(t);
    const apiRows = [shippedApi(1, `${day(0)}T01:00:00.000Z`), shippedApi(2, `${day(1)}T01:00:00.000Z`), shippedApi(3, '2001-01-01T00:00:00.000Z')];
    const usageRows = [shippedUsage(1, `${day(0)}T02:00:00.000Z`), shippedUsage(2, `${day(2)}T02:00:00.000Z`)];
    assert.deepEqual(await store.shippedLogs.receive('r1', INSTANCE, { api: apiRows, usage: usageRows }), { stored: 5, duplicates: 0 });
    assert.deepEqual(await store.shippedLogs.receive('r1', INSTANCE, { api: apiRows, usage: usageRows }), { stored: 0, duplicates: 5 });
    assert.deepEqual(await store.shippedLogs.receive('r1', INSTANCE, { api: [apiRows[0]!, shippedApi(4, `${day(0)}T03:00:00.000Z`), shippedApi(4, `${day(0)}T03:00:00.000Z`)], usage: [] }), {
      stored: 1,
      duplicates: 2,
    });
    assert.deepEqual(await placed(db, 'api_logs', 'request_id'), {
      'shipped-1': `api_logs_p${compact(day(0))}`,
      'shipped-2': `api_logs_p${compact(day(1))}`,
      'shipped-3': 'api_logs_default',
      'shipped-4': `api_logs_p${compact(day(0))}`,
    });
    assert.deepEqual(await placed(db, 'usage_logs', 'request_id'), {
      'shipped-1': `usage_logs_p${compact(day(0))}`,
      'shipped-2': `usage_logs_p${compact(day(2))}`,
    });
    // The same row id from another replica instance is another row.
    assert.deepEqual(await store.shippedLogs.receive('r2', 'b'.repeat(32), { api: apiRows, usage: [] }), { stored: 3, duplicates: 0 });
  });

  test('a row the DEFAULT partition took before its day had a partition moves into it when the day\'s partition is made, and its retry still lands once', async (t) => {
    const { store, db } = await open(t);
    const early = shippedApi(7, '2026-03-05T10:00:00.000Z');
    assert.deepEqual(await store.shippedLogs.receive('r1', INSTANCE, { api: [early, shippedApi(8, '2026-03-09T10:00:00.000Z')], usage: [] }), { stored: 2, duplicates: 0 });
    assert.equal((await placed(db, 'api_logs', 'request_id'))['shipped-7'], 'api_logs_default');
    await store.logs.preparePartitions('2026-03-05T00:00:00.000Z');
    assert.deepEqual(await placed(db, 'api_logs', 'request_id'), { 'shipped-7': 'api_logs_p20260305', 'shipped-8': 'api_logs_default' });
    assert.deepEqual(await store.shippedLogs.receive('r1', INSTANCE, { api: [early], usage: [] }), { stored: 0, duplicates: 1 });
    const [row] = await store.logs.listApi({ limit: 10, offset: 1 });
    assert.equal(row?.requestId, 'shipped-7', 'the moved row keeps its fields');
  });

  test('a store copied from SQLite has each day\'s log rows in that day\'s partition, none left in DEFAULT, and keeps its ids', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-copy-logs-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'svc.db');
    const source = openStore(path);
    await source.logs.insertApi([api('2026-05-01T10:00:00.000Z', 1), api('2026-05-03T23:59:59.999Z', 2), api('2026-05-03T00:00:00.000Z', 3)]);
    await source.logs.insertUsage([usage('2026-05-02T12:00:00.000Z', 4)]);
    await source.logs.insertActivity([activity('2026-05-01T00:00:00.000Z', 5)]);
    const ids = (await source.logs.listApi({ limit: 10, offset: 0 })).map((row) => row.id);
    source.close();

    const url = await newDatabase();
    await copyStore(path, url);
    const { store, db } = await open(t, url);
    assert.deepEqual(await placed(db, 'api_logs', 'request_id'), { 'req-1': 'api_logs_p20260501', 'req-2': 'api_logs_p20260503', 'req-3': 'api_logs_p20260503' });
    assert.deepEqual(await placed(db, 'usage_logs', 'request_id'), { 'req-4': 'usage_logs_p20260502' });
    assert.deepEqual(Object.values(await placed(db, 'activity_logs', 'description')), ['activity_logs_p20260501']);
    assert.ok(!('api_logs_p20260502' in (await partitions(db, 'api_logs'))), 'a day without rows gets no partition');
    assert.deepEqual((await store.logs.listApi({ limit: 10, offset: 0 })).map((row) => row.id), ids);
    // New rows still get new ids.
    await store.logs.insertApi([api(`${day(0)}T00:00:00.000Z`, 6)]);
    assert.ok((await store.logs.listApi({ limit: 1, offset: 0 }))[0]!.id > Math.max(...ids));
  });

  test('instances making partitions together make each once', async (t) => {
    const url = await newDatabase();
    // Three instances start together on one empty database: each makes today's partitions at open.
    const opened = await Promise.all([1, 2, 3].map(() => openPostgresStore(url, { max: 2 })));
    t.after(() => Promise.all(opened.map((store) => store.close())));
    await Promise.all(opened.flatMap((store) => [store.logs.preparePartitions('2027-07-01T00:00:00.000Z'), store.logs.preparePartitions('2027-07-02T00:00:00.000Z')]));
    const { db } = await open(t, url);
    const names = Object.keys(await partitions(db, 'usage_logs'));
    for (const d of ['20270701', '20270702', '20270703', '20270704', '20270705']) assert.ok(names.includes(`usage_logs_p${d}`), d);
    assert.equal(names.length, 1 + (PARTITION_DAYS_AHEAD + 1) + (PARTITION_DAYS_AHEAD + 2));
  });

  test('a page of the unified list reads each partition\'s index in order and merges them, with no sort of the rows; so does a page filtered by user and one after a position', async (t) => {
    const { store, db } = await open(t);
    await store.logs.preparePartitions(`${day(-6)}T00:00:00.000Z`);
    await store.logs.preparePartitions(`${day(-2)}T00:00:00.000Z`);
    // 8 days of rows, 600 a day of each kind, 1 in 10 by user 7.
    for (let d = -6; d <= 1; d++) {
      const stamps = Array.from({ length: 600 }, (_, i) => new Date(Date.parse(`${day(d)}T00:00:00.000Z`) + i * 100_000).toISOString());
      await store.logs.insertActivity(stamps.map((stamp, i) => ({ ...activity(stamp, i), userId: i % 10 === 0 ? 7 : null })));
      await store.logs.insertApi(stamps.map((stamp, i) => api(stamp, i, i % 10 === 0 ? 7 : null)));
      await store.logs.insertUsage(stamps.map((stamp, i) => usage(stamp, i, i % 10 === 0 ? 7 : null)));
    }
    await db.query('ANALYZE activity_logs, api_logs, usage_logs');
    const partitionCount = Object.keys(await partitions(db, 'api_logs')).length;
    const all: LogKind[] = ['activity', 'api', 'usage'];
    const first = await store.logs.unifiedPage(all, { limit: 50, offset: 0 });
    const pages = {
      'the first page': unifiedPageStatement(all, { limit: 50, offset: 0 }),
      'a page by user': unifiedPageStatement(all, { limit: 50, offset: 0, userId: 7 }),
      'the page after a position': unifiedPageStatement(all, { limit: 50, offset: 0, after: first.next! }),
    };
    for (const [name, { sql, params }] of Object.entries(pages)) {
      const prepared = toPostgres(textOf(sql, POSTGRES));
      const values = prepared.names!.map((name) => params[name]);
      const { rows } = await db.query<{ 'QUERY PLAN': Array<{ Plan: Record<string, unknown> }> }>(`EXPLAIN (FORMAT JSON) ${prepared.text}`, values);
      const plan = nodes(rows[0]!['QUERY PLAN'][0]!.Plan);
      const shape = plan.join(' > ');
      assert.equal(plan[0], 'Limit', `${name}: ${shape}`);
      assert.ok(!plan.includes('Sort'), `${name} sorts no rows: ${shape}`);
      assert.ok(!plan.some((node) => node.startsWith('Seq Scan')), `${name} scans no partition whole: ${shape}`);
      assert.ok(plan.includes('Merge Append'), `${name} merges ordered scans: ${shape}`);
      // Each partition's copy of the (user_id, created_at, id) or the (created_at, id) index.
      const index = name === 'a page by user' ? /^[a-z]+_logs_(p\d{8}|default)_user_id_created_at_id_idx$/ : /^[a-z]+_logs_(p\d{8}|default)_created_at_id_idx$/;
      const scans = plan.filter((node) => node.startsWith('Index')).map((node) => node.split(' ').at(-1)!);
      assert.equal(scans.length, 3 * partitionCount, `${name}: every partition of the three tables is read through an index: ${shape}`);
      assert.ok(scans.every((scanned) => index.test(scanned)), `${name} reads the ${String(index)} indexes: ${shape}`);
    }
  });
});
