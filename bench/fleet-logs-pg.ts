/**
 * Fleet logs on a PostgreSQL control plane (docs/replication.md, "Fleet logs on
 * PostgreSQL"): what receiving a replica's batch and retention cost, against the way each
 * was done before, measured in the same run.
 *
 *   node bench/fleet-logs-pg.ts [--batch 5000] [--rows 200000] [--rounds 7] [--quick]
 *
 * A throwaway PostgreSQL server (test/support/postgres.ts: Debian's binaries, fsync off)
 * and the store on it, in this process.
 * - receive: `shippedLogs.receive` of a batch of `--batch` api rows (multi-row INSERTs of
 *   up to 512 rows) against the same rows inserted one INSERT each in one transaction (as
 *   receive did before), interleaved, each round with a new instance id.
 * - retention: `logs.deleteOlderThan` of one day of `--rows` api rows kept in that day's
 *   partition (dropped whole, counted first) against the same number of rows in the DEFAULT
 *   partition (deleted 5,000 at a time, as every row was before).
 * Each figure is the median of `--rounds`. It prints the figures and writes
 * bench/results/fleet-logs-pg.json (fleet-logs-pg-quick.json for a --quick run).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { types } from '../src/store/postgres/executor.ts';
import { openPostgresStore } from '../src/store/postgres/open.ts';
import type { ShippedApiLog } from '../src/store/shipped-logs.ts';
import { startPostgres } from '../test/support/postgres.ts';
import { loadAverage, machineInfo } from './lib/report.ts';

const { values: args } = parseArgs({
  options: { batch: { type: 'string' }, rows: { type: 'string' }, rounds: { type: 'string' }, quick: { type: 'boolean' } },
});
const quick = args.quick === true;
const BATCH = Number(args.batch ?? 5_000);
const ROWS = Number(args.rows ?? (quick ? 20_000 : 200_000));
const ROUNDS = Number(args.rounds ?? (quick ? 3 : 7));

const ONE_ROW = `INSERT INTO api_logs (request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination, duration_ms, ip,
    created_at, replica, replica_instance, replica_log_id, end_user)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) ON CONFLICT DO NOTHING`;

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.floor(sorted.length / 2)]! * 100) / 100;
};

function batch(): ShippedApiLog[] {
  const now = Date.now();
  return Array.from({ length: BATCH }, (_, i) => ({
    id: i + 1,
    request_id: `req-${i}`,
    method: 'POST',
    path: '/proxy/payments',
    status_code: 200,
    api_key_id: null,
    user_id: null,
    configuration_id: null,
    destination: 'https://api.example.com/v1/charges',
    duration_ms: 12.5,
    ip: '10.0.0.7',
    created_at: new Date(now - (BATCH - i) * 10).toISOString(),
  }));
}

/** Inserts `rows` api rows dated within `day` (YYYY-MM-DD) straight into the table. */
async function fill(db: pg.Client, day: string, rows: number): Promise<void> {
  await db.query(
    `INSERT INTO api_logs (request_id, method, path, status_code, duration_ms, ip, created_at)
     SELECT 'r' || g, 'GET', '/x', 200, 1, '10.0.0.1',
            to_char(CAST($1 AS timestamp) + g * (interval '86399 seconds' / $2), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
       FROM generate_series(1, $2) AS g`,
    [day, rows],
  );
}

const server = await startPostgres();
try {
  const machine = machineInfo();
  const url = await server.createDatabase('bench_fleet_logs');
  const store = await openPostgresStore(url, { max: 4 });
  const db = new pg.Client({ connectionString: url, types });
  await db.connect();

  // Receiving a batch.
  const rows = batch();
  const received: number[] = [];
  const oneByOne: number[] = [];
  // One warm-up of each, then the rounds, interleaved.
  for (let round = 0; round <= ROUNDS; round++) {
    let started = performance.now();
    const result = await store.shippedLogs.receive('bench', randomBytes(16).toString('hex'), { api: rows, usage: [] });
    if (result.stored !== BATCH) throw new Error(`stored ${result.stored} of ${BATCH}`);
    if (round > 0) received.push(performance.now() - started);

    const instance = randomBytes(16).toString('hex');
    started = performance.now();
    await db.query('BEGIN');
    for (const r of rows) {
      await db.query(ONE_ROW, [r.request_id, r.method, r.path, r.status_code, r.api_key_id, r.user_id, r.configuration_id, r.destination, r.duration_ms, r.ip, r.created_at, 'bench', instance, r.id, null]);
    }
    await db.query('COMMIT');
    if (round > 0) oneByOne.push(performance.now() - started);
  }

  // Retention: a day in its own partition against the same rows in DEFAULT.
  const dropped: number[] = [];
  const deleted: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const day = new Date(Date.UTC(2020, 0, 1 + round * 7)).toISOString().slice(0, 10);
    const next = new Date(Date.parse(day) + 86_400_000).toISOString();
    await store.logs.preparePartitions(`${day}T00:00:00.000Z`);
    await fill(db, day, ROWS);
    // The partitions made ahead of `day` are after the cutoff: only `day` goes.
    await db.query('VACUUM ANALYZE api_logs');
    let started = performance.now();
    const whole = await store.logs.deleteOlderThan(next);
    dropped.push(performance.now() - started);
    if (whole.api !== ROWS) throw new Error(`dropped ${whole.api} of ${ROWS}`);

    // A year before any partition: DEFAULT.
    const old = new Date(Date.UTC(2010, 0, 1 + round * 7)).toISOString().slice(0, 10);
    await fill(db, old, ROWS);
    await db.query('VACUUM ANALYZE api_logs');
    started = performance.now();
    const byRow = await store.logs.deleteOlderThan(new Date(Date.parse(old) + 86_400_000).toISOString());
    deleted.push(performance.now() - started);
    if (byRow.api !== ROWS) throw new Error(`deleted ${byRow.api} of ${ROWS}`);
  }
  await db.end();
  await store.close();

  const results = {
    receive: {
      batch: BATCH,
      multi_row_ms: median(received),
      one_insert_per_row_ms: median(oneByOne),
      multi_row_rows_per_s: Math.round(BATCH / (median(received) / 1000)),
      one_insert_per_row_rows_per_s: Math.round(BATCH / (median(oneByOne) / 1000)),
      samples: { multi_row_ms: received, one_insert_per_row_ms: oneByOne },
    },
    retention: {
      rows: ROWS,
      partition_dropped_ms: median(dropped),
      rows_deleted_ms: median(deleted),
      samples: { partition_dropped_ms: dropped, rows_deleted_ms: deleted },
    },
  };
  const report = { bench: 'fleet-logs-pg', rounds: ROUNDS, machine, loadavgAtEnd: loadAverage(), results };
  console.log(`receive ${BATCH} api rows: multi-row INSERTs ${results.receive.multi_row_ms} ms, one INSERT a row ${results.receive.one_insert_per_row_ms} ms`);
  console.log(`retention of a day of ${ROWS} rows: partition dropped ${results.retention.partition_dropped_ms} ms, rows deleted ${results.retention.rows_deleted_ms} ms`);
  const dir = join(import.meta.dirname, 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, quick ? 'fleet-logs-pg-quick.json' : 'fleet-logs-pg.json'), `${JSON.stringify(report, null, 2)}\n`);
} finally {
  await server.stop();
}
