/**
 * The latency of a filtered, sorted classification page over 10,000 classifications
 * (issue 3, "Must show").
 *
 *   node bench/classifications-page.ts [--quick]
 *
 * The service runs in a child process with a temp-file store (WAL, as in production), so
 * autocannon does not share its event loop. The child inserts 10,000 classifications with
 * users, roles and some provider groups, times the store query and the view building
 * in-process, then listens. The parent measures, after a warm-up each:
 *   - item:     GET /api/v3/classifications/{id}, one classification (the baseline: same
 *               authentication and presenter, no list query),
 *   - default:  GET /api/v3/classifications, the first page sorted by name,
 *   - filtered: the target query below, with 10 connections and with 1.
 * It prints a table and writes bench/results/classifications-page.json (a --quick run
 * writes classifications-page-quick.json, so a smoke run never replaces real results).
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createApp } from '../src/app.ts';
import { classificationView, MemberViews } from '../src/api/presenters.ts';
import { loadConfig } from '../src/config/load.ts';
import type { ClassificationQuery } from '../src/store/classifications.ts';
import type { Store } from '../src/store/db.ts';
import { createLogger } from '../src/telemetry/logger.ts';
import { prng } from './lib/records.ts';
import { machineInfo } from './lib/report.ts';
import { syncRepositories } from '../src/store/sqlite/connection.ts';

const CLASSIFICATIONS = 10_000;
const USERS = 200;
const KEY = `svc_${'Bench'.padEnd(40, '0')}`;
const TARGET = '/api/v3/classifications?search=patient&sort=created_at&direction=desc&roles=1&per_page=50&page=3';
const TARGET_QUERY: ClassificationQuery = { search: 'patient', roleIds: [1], sort: 'created_at', direction: 'desc', limit: 50, offset: 100 };
const WORDS = ['Patient', 'Payment', 'Secret', 'Internal', 'Personal', 'Finance', 'Legal', 'Research'];

// autocannon ships no types; this is the part of its API used here.
interface AutocannonResult {
  latency: { p50: number; p90: number; p99: number; average: number; max: number };
  requests: { average: number; total: number };
  non2xx: number;
  errors: number;
  timeouts: number;
}
type Autocannon = (options: { url: string; connections: number; duration: number; headers: Record<string, string> }) => Promise<AutocannonResult>;

// ---------------------------------------------------------------------------------------
// Child: the service

async function populate(store: Store): Promise<{ itemId: number }> {
  // The same seed every run, so every run measures the same data.
  const random = prng(42);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  const roleIds = (await store.roles.list()).map((r) => r.id);
  const workspace = await store.configurations.findByName('workspace');
  if (workspace === undefined) throw new Error('the bench seed has no workspace configuration');
  let itemId = 0;
  await store.transaction(async (tx) => {
    const userIds: number[] = [];
    for (let i = 0; i < USERS; i++) {
      userIds.push((await tx.users.create({ name: `User ${i}`, email: `user${i}@bench.example`, roleIds: [pick(roleIds)] })).id);
    }
    for (let i = 0; i < CLASSIFICATIONS; i++) {
      const word = pick(WORDS);
      const created = await tx.classifications.create({
        name: `${word} ${i}`,
        description: i % 3 === 0 ? null : `${pick(WORDS)} records of team ${i % 97}`,
        bgColor: '#aa0000',
        fgColor: '#ffffff',
        emoji: i % 5 === 0 ? '🔒' : null,
        userIds: Array.from({ length: 1 + Math.floor(random() * 3) }, () => pick(userIds)),
        roleIds: Array.from({ length: 1 + Math.floor(random() * 2) }, () => pick(roleIds)),
        providers: i % 10 === 0 ? [{ configurationId: workspace.id, gwsGroups: [{ id: `g-${i % 7}`, name: `Group ${i % 7}` }] }] : [],
      });
      if (i === CLASSIFICATIONS / 2) itemId = created.id;
    }
  });
  return { itemId };
}

/** Median and p99 of `fn`'s wall time over `runs` calls, in milliseconds. */
function timeIt(fn: () => unknown, runs: number): { p50: number; p99: number } {
  for (let i = 0; i < 20; i++) fn();
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    fn();
    samples.push(performance.now() - start);
  }
  samples.sort((a, b) => a - b);
  const at = (q: number) => Math.round((samples[Math.min(samples.length - 1, Math.floor(q * samples.length))] ?? 0) * 1000) / 1000;
  return { p50: at(0.5), p99: at(0.99) };
}

async function serve(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const config = loadConfig({
    env: {},
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: "${join(dir, 'svc.db')}" }
keys: { master_key_file: "${join(dir, 'master.key')}" }
logging: { level: warn }
seed:
  users:
    - { name: Bench Owner, email: owner@bench.example, roles: [owner] }
  api_keys:
    - { name: bench, user: owner@bench.example, key: ${KEY} }
  configurations:
    - { name: workspace, type: provider, provider: google }
`,
  });
  const app = await createApp(config, { logger: createLogger('warn'), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  const store = app.services.store;
  const startedAt = performance.now();
  const { itemId } = await populate(store);
  const populateSeconds = Math.round(performance.now() - startedAt) / 1000;

  const page = await store.classifications.page(TARGET_QUERY);
  const inProcess = {
    query: timeIt(() => syncRepositories(store).classifications.page(TARGET_QUERY), 300),
    views: timeIt(() => {
      const members = syncRepositories(store).classifications.membersOf(page.items.map((c) => c.id));
      const views = new MemberViews(store);
      return page.items.map((c) => classificationView(store, c, members.get(c.id), views));
    }, 300),
  };

  const { main } = await app.listen();
  const send = (message: unknown) => process.send?.(message);
  send({ port: main.port, itemId, matching: page.total, populateSeconds, inProcess });
  process.on('message', async () => {
    await app.close();
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

// ---------------------------------------------------------------------------------------
// Parent: the measurement

interface Ready {
  port: number;
  itemId: number;
  matching: number;
  populateSeconds: number;
  inProcess: Record<string, { p50: number; p99: number }>;
}

async function measure(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } }, strict: true });
  const quick = values.quick;
  const warmup = quick ? 1 : 3;
  const duration = quick ? 3 : 10;
  const connections = 10;
  const machine = machineInfo();
  const log = (m: string) => process.stderr.write(`${m}\n`);
  log(`node ${machine.node} on ${machine.cpuModel} × ${machine.cores}, load ${machine.loadAverageAtStart.join(' ')}${quick ? ' (quick)' : ''}`);

  const child = fork(import.meta.filename, ['--serve'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ready = await new Promise<Ready>((resolve, reject) => {
    child.once('message', (m) => resolve(m as Ready));
    child.once('exit', (code) => reject(new Error(`the service exited with code ${code}`)));
  });
  log(`inserted ${CLASSIFICATIONS} classifications in ${ready.populateSeconds} s; ${ready.matching} match the target query`);
  const base = `http://127.0.0.1:${ready.port}`;
  const headers = { 'x-svc-authorization': KEY };

  // The numbers mean nothing if the query answers something else than a full page 3.
  const check = await fetch(base + TARGET, { headers });
  const body = (await check.json()) as { total: number; data: unknown[]; current_page: number };
  if (check.status !== 200 || body.data.length !== 50 || body.current_page !== 3 || body.total !== ready.matching) {
    throw new Error(`unexpected answer to the target query: ${check.status} ${JSON.stringify(body).slice(0, 300)}`);
  }

  const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;
  const targets = [
    { name: 'item', path: `/api/v3/classifications/${ready.itemId}`, connections },
    { name: 'default', path: '/api/v3/classifications', connections },
    { name: 'filtered', path: TARGET, connections },
    // One connection: the latency of the query itself, without queueing behind others.
    { name: 'filtered-1', path: TARGET, connections: 1 },
  ];
  const runs = [];
  for (const target of targets) {
    const url = base + target.path;
    log(`${target.name}: ${warmup} s warm-up, ${duration} s measured, ${target.connections} connection(s)`);
    await autocannon({ url, connections: target.connections, duration: warmup, headers });
    const r = await autocannon({ url, connections: target.connections, duration, headers });
    if (r.non2xx > 0 || r.errors > 0) throw new Error(`${target.name}: ${r.non2xx} non-2xx responses, ${r.errors} errors`);
    runs.push({
      name: target.name,
      path: target.path,
      connections: target.connections,
      requests: r.requests.total,
      rps: Math.round(r.requests.average),
      latencyMs: { p50: r.latency.p50, p90: r.latency.p90, p99: r.latency.p99, average: r.latency.average, max: r.latency.max },
    });
  }
  child.send('stop');
  await new Promise((resolve) => child.once('exit', resolve));

  const item = runs.find((r) => r.name === 'item');
  const filtered = runs.find((r) => r.name === 'filtered');
  const ratioOf = (q: 'p50' | 'p99') =>
    item !== undefined && filtered !== undefined ? Math.round((filtered.latencyMs[q] / Math.max(1, item.latencyMs[q])) * 100) / 100 : null;
  const ratio = { p50: ratioOf('p50'), p99: ratioOf('p99') };
  console.log(`\n${'run'.padEnd(12)}${'conns'.padStart(6)}${'p50 ms'.padStart(9)}${'p90 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'req/s'.padStart(9)}   path`);
  for (const r of runs) {
    console.log(`${r.name.padEnd(12)}${String(r.connections).padStart(6)}${String(r.latencyMs.p50).padStart(9)}${String(r.latencyMs.p90).padStart(9)}${String(r.latencyMs.p99).padStart(9)}${String(r.rps).padStart(9)}   ${r.path}`);
  }
  console.log(`\nfiltered ÷ item: p50 ${ratio.p50}×, p99 ${ratio.p99}×`);
  console.log(`in-process, target query: SQL p50 ${ready.inProcess['query']?.p50} ms / p99 ${ready.inProcess['query']?.p99} ms; 50 views p50 ${ready.inProcess['views']?.p50} ms / p99 ${ready.inProcess['views']?.p99} ms`);

  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const path = new URL(quick ? 'classifications-page-quick.json' : 'classifications-page.json', dir);
  const file = {
    command: `node bench/classifications-page.ts ${process.argv.slice(2).join(' ')}`.trim(),
    updated: machine.date,
    machine,
    dataset: { classifications: CLASSIFICATIONS, users: USERS, matchingTarget: ready.matching, populateSeconds: ready.populateSeconds },
    options: { warmupSeconds: warmup, durationSeconds: duration },
    runs,
    comparison: { candidate: 'filtered', baseline: 'item', p50Ratio: ratio.p50, p99Ratio: ratio.p99 },
    loadAverageAtEnd: loadavg().map((l) => Math.round(l * 100) / 100),
    inProcessMs: ready.inProcess,
  };
  writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`);
  log(`\nwrote ${path.pathname}`);
}

if (process.argv.includes('--serve')) await serve();
else await measure();
