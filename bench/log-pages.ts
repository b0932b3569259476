/**
 * The cost of a deep page of the log lists, by page number against by cursor (DESIGN §13,
 * "Bounded queries").
 *
 *   node bench/log-pages.ts [--rows 200000] [--rounds 7] [--quick]
 *
 * The service runs in this process on a temp-file store (WAL, as in production) holding
 * `--rows` log rows: half api, three tenths usage, a fifth activity, one a second going
 * back in time. For pages at several depths of `GET /api/v3/logs/unified` and of
 * `GET /api/v3/logs/api` (per_page 10) it times the page asked for by `page=N` and the
 * same page asked for by the `cursor` that leads to it (minted the way the previous page
 * would have returned it), and `page=1000000000`, past the end; for that one also the
 * store's offset query alone, which is what answering it cost before it was answered
 * without reading rows. Each figure is the median
 * of `--rounds` requests after one warm-up, one request at a time, interleaving the two
 * ways. It prints a table and writes bench/results/log-pages.json (log-pages-quick.json for
 * a --quick run).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { logCursors, type CursorScope } from '../src/api/log-cursor.ts';
import { createApp } from '../src/app.ts';
import { loadConfig } from '../src/config/load.ts';
import { LOG_KINDS, type LogKind, type NewActivityLog, type NewApiLog, type NewUsageLog } from '../src/store/logs.ts';
import { createLogger } from '../src/telemetry/logger.ts';
import { machineInfo } from './lib/report.ts';
import { syncRepositories } from '../src/store/sqlite/connection.ts';

const KEY = `svc_${'Bench'.padEnd(40, '0')}`;
const PER_PAGE = 10;

const { values: args } = parseArgs({
  options: { rows: { type: 'string' }, rounds: { type: 'string' }, quick: { type: 'boolean' } },
});
const quick = args.quick === true;
const ROWS = Number(args.rows ?? (quick ? 20_000 : 200_000));
const ROUNDS = Number(args.rounds ?? (quick ? 3 : 7));

const dir = mkdtempSync(join(tmpdir(), 'svc-bench-logs-'));
const config = loadConfig({
  text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${JSON.stringify(join(dir, 'svc.db'))} }
logging: { level: warn }
logs: { flush_interval: 1h, retention: 3650d }
seed:
  users: [{ name: Bench, email: bench@example.com, roles: [owner] }]
  api_keys: [{ name: bench, user: bench@example.com, key: ${KEY} }]
  configurations: [{ name: payments, proxy_slug: payments }]
`,
  env: {},
});
const app = await createApp(config, { logger: createLogger('warn'), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });

function populate(): void {
  // Bulk rows straight into the SQLite file: the bench measures reading them.
  const { logs, configurations } = syncRepositories(app.services.store);
  const configurationId = configurations.findByName('payments')!.id;
  const start = Date.now() - ROWS * 1000;
  const batch = { activity: [] as NewActivityLog[], api: [] as NewApiLog[], usage: [] as NewUsageLog[] };
  const flush = () => {
    logs.insertBatch(batch);
    batch.activity = [];
    batch.api = [];
    batch.usage = [];
  };
  for (let i = 0; i < ROWS; i++) {
    const createdAt = new Date(start + i * 1000).toISOString();
    const slot = i % 10;
    const requestId = `r-${i}`;
    if (slot < 5) batch.api.push({ requestId, method: 'POST', path: '/api/v3/encryption/payments/encrypt', statusCode: 200, durationMs: 1, ip: '10.0.0.1', createdAt });
    else if (slot < 8) batch.usage.push({ requestId, configurationId, mode: 'encrypt', fieldCount: 3, bytes: 120, createdAt });
    else batch.activity.push({ action: 'classification.created', description: `Created classification "C${i}".`, ip: '10.0.0.2', createdAt });
    if ((i + 1) % 20_000 === 0) flush();
  }
  flush();
}

interface ListCase {
  readonly name: string;
  readonly path: string;
  readonly kinds: readonly LogKind[];
  readonly total: number;
}

/** The cursor the page before `page` returns: the position of that page's last row. */
function cursorFor(list: ListCase, page: number): string {
  const { logs } = syncRepositories(app.services.store);
  const offset = (page - 1) * PER_PAGE - 1;
  const [row] = list.name === 'unified' ? logs.listUnified(list.kinds, { limit: 1, offset }).map((e) => ({ ...e.log, kind: e.kind })) : logs.listApi({ limit: 1, offset }).map((r) => ({ ...r, kind: 'api' as const }));
  if (row === undefined) throw new Error(`${list.name}: no row at offset ${offset}`);
  const scope: CursorScope = { list: list.name, kinds: list.kinds, userId: undefined, requestId: undefined, perPage: PER_PAGE };
  const cursor = logCursors(app.services.master).encode(scope, page, { createdAt: row.createdAt, id: row.id, kind: row.kind });
  if (cursor === null) throw new Error('no cursor');
  return cursor;
}

async function timeGet(base: string, path: string): Promise<{ ms: number; rows: number; page: number }> {
  const started = performance.now();
  const res = await fetch(base + path, { headers: { 'x-svc-authorization': KEY } });
  const body = (await res.json()) as { data: unknown[]; current_page: number };
  const ms = performance.now() - started;
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(body)}`);
  return { ms, rows: body.data.length, page: body.current_page };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

async function main(): Promise<void> {
  const t0 = performance.now();
  populate();
  const populateSeconds = Math.round((performance.now() - t0) / 100) / 10;
  const { main: address } = await app.listen();
  const base = `http://127.0.0.1:${address.port}`;
  const lists: ListCase[] = [
    { name: 'unified', path: '/api/v3/logs/unified', kinds: LOG_KINDS, total: ROWS },
    { name: 'api', path: '/api/v3/logs/api', kinds: ['api'], total: Math.ceil(ROWS / 2) },
  ];
  const rows: Array<Record<string, number | string>> = [];
  for (const list of lists) {
    const last = Math.ceil(list.total / PER_PAGE);
    const depths = [...new Set([2, 100, Math.floor(last / 10), Math.floor(last / 2), last])].filter((p) => p >= 2 && p <= last);
    for (const page of depths) {
      const byPage = `${list.path}?page=${page}`;
      const byCursor = `${list.path}?cursor=${cursorFor(list, page)}`;
      await timeGet(base, byPage);
      await timeGet(base, byCursor);
      const pageMs: number[] = [];
      const cursorMs: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const a = await timeGet(base, byPage);
        const b = await timeGet(base, byCursor);
        if (a.rows !== b.rows || b.page !== page) throw new Error(`${list.name} page ${page}: the cursor page differs (${a.rows} vs ${b.rows} rows, page ${b.page})`);
        pageMs.push(a.ms);
        cursorMs.push(b.ms);
      }
      rows.push({ list: list.name, page, offset: (page - 1) * PER_PAGE, page_ms: round(median(pageMs)), cursor_ms: round(median(cursorMs)) });
    }
    const past = `${list.path}?page=1000000000`;
    await timeGet(base, past);
    const pastMs: number[] = [];
    const walkMs: number[] = [];
    const { logs } = syncRepositories(app.services.store);
    const query = { limit: PER_PAGE, offset: (1_000_000_000 - 1) * PER_PAGE };
    for (let r = 0; r < ROUNDS; r++) {
      pastMs.push((await timeGet(base, past)).ms);
      const started = performance.now();
      const found = list.name === 'unified' ? logs.unifiedPage(list.kinds, query).rows.length : logs.apiPage(query).rows.length;
      walkMs.push(performance.now() - started);
      if (found !== 0) throw new Error('rows past the end');
    }
    rows.push({ list: list.name, page: 1_000_000_000, offset: -1, page_ms: round(median(pastMs)), cursor_ms: '', offset_query_ms: round(median(walkMs)) });
  }
  await app.close();
  rmSync(dir, { recursive: true, force: true });

  process.stdout.write(`\n${ROWS} log rows (populated in ${populateSeconds} s), per_page ${PER_PAGE}, median of ${ROUNDS} requests\n\n`);
  process.stdout.write('| list | page | by page (ms) | by cursor (ms) |\n|---|---:|---:|---:|\n');
  for (const r of rows) {
    const past = r['page'] === 1_000_000_000;
    process.stdout.write(`| ${r['list']} | ${past ? '1000000000 (past the end)' : r['page']} | ${r['page_ms']}${past ? ` (the offset query alone: ${r['offset_query_ms']})` : ''} | ${r['cursor_ms']} |\n`);
  }
  const out = join(import.meta.dirname, 'results', quick ? 'log-pages-quick.json' : 'log-pages.json');
  mkdirSync(join(import.meta.dirname, 'results'), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ bench: 'log-pages', rows: ROWS, perPage: PER_PAGE, rounds: ROUNDS, machine: machineInfo(), loadavg: loadavg(), results: rows }, null, 2)}\n`);
  process.stdout.write(`\nwrote ${out}\n`);
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

await main();
