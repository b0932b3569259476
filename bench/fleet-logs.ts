/**
 * Fleet logs into the control plane: simulated replicas ship api and usage log rows
 * (`POST /api/v3/sync/logs`, the request the log shipper sends) as fast as the control
 * plane takes them, against
 *
 *   - sqlite:   one control-plane process on a SQLite file, and
 *   - postgres: two control-plane processes on one PostgreSQL database (DESIGN §16),
 *
 * while a management probe (`GET /api/v3/classifications` ten times a second, a
 * `POST /api/v3/classifications` once a second, with an owner's key) measures what an
 * administrator waits meanwhile.
 *
 *   node bench/fleet-logs.ts [--seconds 20] [--warmup 3] [--replicas 20] [--batch 500] [--rounds 3] [--only sqlite|postgres] [--quick]
 *
 * Every control-plane instance runs as `npm start` runs the service (its own process,
 * `node --max-semi-space-size=4 --heap-growing-percent=50 --no-allocation-site-pretenuring src/main.ts serve --config ...`, bench/http/processes.ts),
 * all with one master key. PostgreSQL is started by the script (test/support/postgres.ts:
 * Debian's binaries, a throwaway cluster, durability off as in the tests).
 *
 * Each replica is a loop in this process with one request in flight, its own connection,
 * its own name and instance id, and row ids counting up per kind as a replica's store
 * numbers them. A batch of `--batch` rows is half api rows, half usage rows (one encrypt
 * request logs one of each). Replica i ships to instance i mod instances. Rows are counted
 * when the control plane acknowledges them (2xx); a refused batch is sent again as it was.
 * After the run the rows received from replicas are counted in the database and must equal
 * the rows acknowledged.
 *
 * The cases run in rounds (3 by default; odd rounds in reverse order), each on a fresh
 * store; the summary gives medians over the rounds, and the postgres ÷ sqlite ratio of rows
 * per second is taken per round, between runs seconds apart, as the machine is shared.
 *
 * Writes bench/results/fleet-logs-<date>.json (fleet-logs-quick.json with --quick).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { timeOrderedId } from '../src/telemetry/request-id.ts';
import { postgresUnavailable, startPostgres, type Postgres } from '../test/support/postgres.ts';
import { cpuSeconds, startService } from './http/processes.ts';
import { loadAverage, machineInfo } from './lib/report.ts';

const LOGS = '/api/v3/sync/logs';
const CLASSIFICATIONS = '/api/v3/classifications';
const OWNER_KEY = `svc_${'FleetBenchOwner'.padEnd(40, '0')}`;
/** The replicas' key: sync.read and sync.write only, as docs/replication.md says to give them. */
const FLEET_KEY = `svc_${'FleetBenchReplicas'.padEnd(40, '0')}`;
/** The key the simulated applications encrypt with, named by the shipped rows. */
const APP_KEY = `svc_${'FleetBenchApp'.padEnd(40, '0')}`;

const SEED = `seed:
  users:
    - { name: Bench Owner, email: owner@bench.example, roles: [owner] }
    - { name: Replicas, email: replicas@bench.example, roles: [administrator] }
    - { name: Payments App, email: app@bench.example, roles: [developer] }
  api_keys:
    - { name: owner, user: owner@bench.example, key: ${OWNER_KEY} }
    - { name: fleet, user: replicas@bench.example, key: ${FLEET_KEY}, permissions: [sync.read, sync.write] }
    - { name: payments-app, user: app@bench.example, key: ${APP_KEY}, permissions: [data.encrypt] }
  configurations:
    - { name: payments, proxy_slug: payments, fields: [card.number, customer.email] }
  classifications:
    - { name: PCI, bg_color: "#0000aa", fg_color: "#ffffff", roles: [owner] }
`;

type CaseName = 'sqlite' | 'postgres';

interface Args {
  seconds: number;
  warmup: number;
  replicas: number;
  batch: number;
  only: CaseName[];
  rounds: number;
  quick: boolean;
}

function parse(): Args {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string' },
      warmup: { type: 'string' },
      replicas: { type: 'string', default: '20' },
      batch: { type: 'string', default: '500' },
      only: { type: 'string', multiple: true },
      rounds: { type: 'string' },
      quick: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const whole = (name: string, text: string, min: number, max: number): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be a whole number from ${min} to ${max}`);
    return n;
  };
  const only = (values.only ?? ['sqlite', 'postgres']).map((name) => {
    if (name !== 'sqlite' && name !== 'postgres') throw new Error('--only must be sqlite or postgres');
    return name as CaseName;
  });
  return {
    seconds: whole('seconds', values.seconds ?? (values.quick ? '5' : '20'), 1, 3600),
    warmup: whole('warmup', values.warmup ?? (values.quick ? '1' : '3'), 0, 600),
    replicas: whole('replicas', values.replicas, 1, 500),
    // The control plane's default sync.max_batch is 5,000 rows per request.
    batch: whole('batch', values.batch, 2, 5000),
    only,
    rounds: whole('rounds', values.rounds ?? (values.quick ? '1' : '3'), 1, 50),
    quick: values.quick,
  };
}

// ---------------------------------------------------------------------------------------
// Statistics

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const round1 = (n: number) => Math.round(n * 10) / 10;
const round2 = (n: number) => Math.round(n * 100) / 100;

interface LatencySummary {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

function summarize(latencies: readonly number[]): LatencySummary {
  const sorted = [...latencies].sort((a, b) => a - b);
  return {
    count: sorted.length,
    p50: round2(percentile(sorted, 50)),
    p90: round2(percentile(sorted, 90)),
    p99: round2(percentile(sorted, 99)),
    max: round2(sorted.at(-1) ?? Number.NaN),
  };
}

// ---------------------------------------------------------------------------------------
// The measured window, shared by the replicas and the probe

class Window {
  start = Number.POSITIVE_INFINITY;
  end = Number.POSITIVE_INFINITY;
  stopping = false;

  /** Whether a response that arrived at `at` (performance.now()) counts. */
  holds(at: number): boolean {
    return at >= this.start && at <= this.end;
  }
}

// ---------------------------------------------------------------------------------------
// Simulated replicas

interface References {
  apiKey: string;
  user: number;
  configuration: string;
}

interface ReplicaResult {
  name: string;
  instanceIndex: number;
  /** Rows acknowledged over the whole run (warm-up and the drain after the window included). */
  acknowledged: number;
  /** Rows acknowledged by responses that arrived within the window. */
  inWindow: number;
  duplicates: number;
  requests: number;
  refused: number;
  errors: number;
  /** Milliseconds per shipping request within the window. */
  latencies: number[];
  /** Rows acknowledged in each whole second of the window. */
  perSecond: number[];
  firstError: string | null;
}

const METHODS = ['POST', 'POST', 'POST', 'POST', 'GET'] as const;

/** One batch as the log shipper sends it: `{ replica, instance, api, usage }`, rows as rowsAfter reads them. */
function batchBody(name: string, instance: string, nextId: { api: number; usage: number }, rows: number, refs: References): string {
  const apiRows = rows >> 1;
  const usageRows = rows - apiRows;
  const now = Date.now();
  const api = [];
  const usage = [];
  for (let i = 0; i < apiRows; i++) {
    const decrypt = (nextId.api + i) % 4 === 0;
    const created = new Date(now - (apiRows - i)).toISOString();
    // rowsAfter leaves end_user out when it is null, as most rows have it.
    api.push({
      id: nextId.api + i,
      request_id: timeOrderedId(now - (apiRows - i)),
      method: METHODS[i % METHODS.length],
      path: `/api/v3/encryption/payments/${decrypt ? 'decrypt' : 'encrypt'}`,
      status_code: i % 97 === 0 ? 422 : 200,
      api_key_id: refs.apiKey,
      user_id: refs.user,
      configuration_id: refs.configuration,
      destination: null,
      duration_ms: round2(0.4 + ((i * 37) % 100) / 25),
      ip: `10.0.${(i >> 8) & 255}.${i & 255}`,
      created_at: created,
    });
  }
  for (let i = 0; i < usageRows; i++) {
    const decrypt = (nextId.usage + i) % 4 === 0;
    usage.push({
      id: nextId.usage + i,
      request_id: timeOrderedId(now - (usageRows - i)),
      configuration_id: refs.configuration,
      api_key_id: refs.apiKey,
      user_id: refs.user,
      mode: decrypt ? 'decrypt' : 'encrypt',
      field_count: 1 + (i % 5),
      bytes: 600 + ((i * 131) % 1500),
      reveal: decrypt ? { plain: 1 + (i % 5), mask: 0, redact: 0, token: 0 } : null,
      created_at: new Date(now - (usageRows - i)).toISOString(),
    });
  }
  nextId.api += apiRows;
  nextId.usage += usageRows;
  return JSON.stringify({ replica: name, instance, api, usage });
}

async function runReplica(index: number, urls: readonly string[], args: Args, refs: References, window: Window): Promise<ReplicaResult> {
  const name = `replica-${String(index + 1).padStart(2, '0')}`;
  const instance = randomBytes(16).toString('hex');
  const instanceIndex = index % urls.length;
  const url = `${urls[instanceIndex]}${LOGS}`;
  const agent = new Agent({ connections: 1, keepAliveTimeout: 60_000 });
  const nextId = { api: 1, usage: 1 };
  const result: ReplicaResult = {
    name,
    instanceIndex,
    acknowledged: 0,
    inWindow: 0,
    duplicates: 0,
    requests: 0,
    refused: 0,
    errors: 0,
    latencies: [],
    perSecond: Array.from({ length: args.seconds }, () => 0),
    firstError: null,
  };
  let body: string | null = null;
  try {
    while (!window.stopping) {
      // A batch is kept until it is acknowledged, as the shipper keeps its position.
      body ??= batchBody(name, instance, nextId, args.batch, refs);
      const sent = performance.now();
      result.requests++;
      try {
        const response = await request(url, {
          method: 'POST',
          headers: { 'x-svc-authorization': FLEET_KEY, 'content-type': 'application/json' },
          body,
          dispatcher: agent,
        });
        const text = await response.body.text();
        const at = performance.now();
        if (response.statusCode !== 200) {
          result.refused++;
          result.firstError ??= `${response.statusCode}: ${text.slice(0, 300)}`;
          await sleep(100);
          continue;
        }
        const answer = JSON.parse(text) as { stored: number; duplicates: number };
        result.acknowledged += answer.stored;
        result.duplicates += answer.duplicates;
        if (window.holds(at)) {
          result.inWindow += answer.stored;
          result.latencies.push(at - sent);
          const second = Math.floor((at - window.start) / 1000);
          if (second < result.perSecond.length) result.perSecond[second]! += answer.stored;
        }
        body = null;
      } catch (err) {
        result.errors++;
        result.firstError ??= (err as Error).message;
        await sleep(100);
      }
    }
  } finally {
    await agent.close();
  }
  return result;
}

// ---------------------------------------------------------------------------------------
// The management probe

interface ProbeResult {
  list: number[];
  create: number[];
  failures: number;
  firstFailure: string | null;
}

/** GET every 100 ms and a POST every tenth tick, each instance in turn, not waiting for the previous answer. */
async function runProbe(urls: readonly string[], window: Window, label: string): Promise<ProbeResult> {
  const agent = new Agent({ connections: 8, keepAliveTimeout: 60_000 });
  const result: ProbeResult = { list: [], create: [], failures: 0, firstFailure: null };
  const inFlight = new Set<Promise<void>>();
  const once = async (kind: 'list' | 'create', url: string, tick: number): Promise<void> => {
    const sent = performance.now();
    try {
      const response = await request(
        `${url}${CLASSIFICATIONS}`,
        kind === 'list'
          ? { method: 'GET', headers: { 'x-svc-authorization': OWNER_KEY }, dispatcher: agent }
          : {
              method: 'POST',
              headers: { 'x-svc-authorization': OWNER_KEY, 'content-type': 'application/json' },
              body: JSON.stringify({ name: `Probe ${label} ${tick}`, bg_color: '#123456', fg_color: '#ffffff' }),
              dispatcher: agent,
            },
      );
      const text = await response.body.text();
      const at = performance.now();
      const expected = kind === 'list' ? 200 : 201;
      if (response.statusCode !== expected) {
        result.failures++;
        result.firstFailure ??= `${kind} ${response.statusCode}: ${text.slice(0, 300)}`;
        return;
      }
      if (window.holds(at)) result[kind].push(at - sent);
    } catch (err) {
      result.failures++;
      result.firstFailure ??= `${kind}: ${(err as Error).message}`;
    }
  };
  const started = performance.now();
  for (let tick = 0; !window.stopping; tick++) {
    const url = urls[tick % urls.length]!;
    const fire = (kind: 'list' | 'create') => {
      const p = once(kind, url, tick).finally(() => inFlight.delete(p));
      inFlight.add(p);
    };
    fire('list');
    if (tick % 10 === 5) fire('create');
    // On a schedule, so a slow answer does not lower the rate of asking.
    const next = started + (tick + 1) * 100;
    await sleep(Math.max(0, next - performance.now()));
  }
  await Promise.all(inFlight);
  await agent.close();
  return result;
}

// ---------------------------------------------------------------------------------------
// CPU of the PostgreSQL server: the postmaster, its children alive now (a backend per
// connection, the background workers), and those that have ended (the postmaster waits for
// them, so /proc counts them in its cutime and cstime): a backend that exits in the window,
// such as a pool connection closed when idle, takes no CPU time out of the sum.

const TICKS_PER_SECOND = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** Fields 14 to 17 of /proc/<pid>/stat: utime, stime, cutime, cstime (ticks); null once it is gone. */
function statTimes(pid: number): { ppid: number; own: number; children: number } | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // After the parenthesised command name (which may hold spaces): field 3 is at index 0.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
  return { ppid: fields[1]!, own: fields[11]! + fields[12]!, children: fields[13]! + fields[14]! };
}

function postgresCpu(postmaster: number): number {
  const main = statTimes(postmaster);
  if (main === null) return Number.NaN;
  let ticks = main.own + main.children;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const times = statTimes(Number(entry));
    if (times !== null && times.ppid === postmaster) ticks += times.own;
  }
  return ticks / TICKS_PER_SECOND;
}

// ---------------------------------------------------------------------------------------
// One case

interface CaseResult {
  case: CaseName;
  round: number;
  instances: number;
  replicas: number;
  batch: number;
  seconds: number;
  warmupSeconds: number;
  /** Rows acknowledged within the window ÷ its length. */
  rowsPerSecond: number;
  /** Median of the per-second counts of the window. */
  medianRowsPerSecondOfSeconds: number;
  perSecond: number[];
  shipRequest: LatencySummary;
  probe: { all: LatencySummary; list: LatencySummary; create: LatencySummary; failures: number; firstFailure: string | null };
  acknowledged: number;
  storedInDatabase: number;
  lost: number;
  duplicates: number;
  refusedRequests: number;
  failedRequests: number;
  firstError: string | null;
  /** CPU seconds within the window, and per 10,000 rows. */
  cpu: { controlPlane: number; postgres: number | null; bench: number; controlPlanePer10kRows: number; postgresPer10kRows: number | null };
  perInstanceRows: number[];
}

async function list(url: string): Promise<any[]> {
  const response = await request(url, { headers: { 'x-svc-authorization': OWNER_KEY } });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`GET ${url} answered ${response.statusCode}: ${text.slice(0, 300)}`);
  const value = JSON.parse(text);
  // Some lists answer an array, others the page envelope.
  return Array.isArray(value) ? value : value.data;
}

async function references(url: string): Promise<References> {
  const keys = (await list(`${url}/api/v3/api-keys?per_page=100`)) as Array<{ id: string; name: string }>;
  const users = (await list(`${url}/api/v3/users?per_page=100`)) as Array<{ id: number; email: string }>;
  const configurations = (await list(`${url}/api/v3/configurations?per_page=100`)) as Array<{ id: string; name: string }>;
  const apiKey = keys.find((k) => k.name === 'payments-app')?.id;
  const user = users.find((u) => u.email === 'app@bench.example')?.id;
  const configuration = configurations.find((c) => c.name === 'payments')?.id;
  if (apiKey === undefined || user === undefined || configuration === undefined) throw new Error('the seeded key, user or configuration is missing');
  return { apiKey, user, configuration };
}

const COUNT_RECEIVED = 'SELECT (SELECT count(*) FROM api_logs WHERE replica IS NOT NULL) + (SELECT count(*) FROM usage_logs WHERE replica IS NOT NULL) AS n';

async function runCase(name: CaseName, round: number, args: Args, log: (m: string) => void): Promise<CaseResult> {
  const masterKey = randomBytes(32).toString('base64');
  const env = { SVC_MASTER_KEY: masterKey };
  let postgres: Postgres | null = null;
  const services: Array<Awaited<ReturnType<typeof startService>>> = [];
  try {
    let count: () => Promise<number>;
    if (name === 'sqlite') {
      const service = await startService({ destinations: [], seed: SEED, env });
      services.push(service);
      const path = join(service.dir, 'svc.db');
      count = async () => {
        const db = new DatabaseSync(path, { readOnly: true });
        try {
          return Number((db.prepare(COUNT_RECEIVED).get() as { n: number }).n);
        } finally {
          db.close();
        }
      };
    } else {
      postgres = await startPostgres();
      const url = await postgres.createDatabase('svc_fleet');
      // Started together on the empty database, as the tests do: the schema and seed are made once.
      services.push(...(await Promise.all([0, 1].map(() => startService({ destinations: [], seed: SEED, env, store: `{ url: ${JSON.stringify(url)} }` })))));
      const pg = postgres;
      count = async () => Number((await pg.psql('svc_fleet', COUNT_RECEIVED)).trim());
    }
    const urls = services.map((s) => s.url);
    log(`round ${round + 1}, ${name}: ${urls.length} instance(s) at ${urls.join(', ')}${postgres === null ? '' : ` on PostgreSQL pid ${postgres.pid}`}`);
    const refs = await references(urls[0]!);

    const window = new Window();
    const replicas = Array.from({ length: args.replicas }, (_, i) => runReplica(i, urls, args, refs, window));
    const probe = runProbe(urls, window, name);
    await sleep(args.warmup * 1000);

    const pids = services.flatMap((s) => s.pids);
    const cpuStart = { cp: cpuSeconds(pids), pg: postgres === null ? null : postgresCpu(postgres.pid), bench: process.cpuUsage() };
    window.start = performance.now();
    await sleep(args.seconds * 1000);
    window.end = performance.now();
    const cpuEnd = { cp: cpuSeconds(pids), pg: postgres === null ? null : postgresCpu(postgres.pid), bench: process.cpuUsage(cpuStart.bench) };
    window.stopping = true;
    const replicaResults = await Promise.all(replicas);
    const probeResult = await probe;
    const seconds = (window.end - window.start) / 1000;

    const acknowledged = replicaResults.reduce((n, r) => n + r.acknowledged, 0);
    const storedInDatabase = await count();
    const inWindow = replicaResults.reduce((n, r) => n + r.inWindow, 0);
    const perSecond = Array.from({ length: args.seconds }, (_, s) => replicaResults.reduce((n, r) => n + r.perSecond[s]!, 0));
    const perInstanceRows = urls.map((_, i) => replicaResults.filter((r) => r.instanceIndex === i).reduce((n, r) => n + r.inWindow, 0));
    const controlPlaneCpu = cpuEnd.cp - cpuStart.cp;
    const postgresCpuUsed = cpuEnd.pg === null || cpuStart.pg === null ? null : cpuEnd.pg - cpuStart.pg;
    const per10k = (cpu: number) => round2((cpu / inWindow) * 10_000);
    const result: CaseResult = {
      case: name,
      round,
      instances: urls.length,
      replicas: args.replicas,
      batch: args.batch,
      seconds: round2(seconds),
      warmupSeconds: args.warmup,
      rowsPerSecond: Math.round(inWindow / seconds),
      medianRowsPerSecondOfSeconds: Math.round(percentile([...perSecond].sort((a, b) => a - b), 50)),
      perSecond,
      shipRequest: summarize(replicaResults.flatMap((r) => r.latencies)),
      probe: {
        all: summarize([...probeResult.list, ...probeResult.create]),
        list: summarize(probeResult.list),
        create: summarize(probeResult.create),
        failures: probeResult.failures,
        firstFailure: probeResult.firstFailure,
      },
      acknowledged,
      storedInDatabase,
      lost: acknowledged - storedInDatabase,
      duplicates: replicaResults.reduce((n, r) => n + r.duplicates, 0),
      refusedRequests: replicaResults.reduce((n, r) => n + r.refused, 0),
      failedRequests: replicaResults.reduce((n, r) => n + r.errors, 0),
      firstError: replicaResults.find((r) => r.firstError !== null)?.firstError ?? null,
      cpu: {
        controlPlane: round2(controlPlaneCpu),
        postgres: postgresCpuUsed === null ? null : round2(postgresCpuUsed),
        bench: round2((cpuEnd.bench.user + cpuEnd.bench.system) / 1e6),
        controlPlanePer10kRows: per10k(controlPlaneCpu),
        postgresPer10kRows: postgresCpuUsed === null ? null : per10k(postgresCpuUsed),
      },
      perInstanceRows,
    };
    if (result.probe.failures > 0 || result.refusedRequests > 0 || result.failedRequests > 0) {
      // What the service said about it (it logs at warn and above).
      for (const [i, service] of services.entries()) {
        const said = service.output().trim();
        if (said !== '') log(`${name} instance ${i} logged:\n${said.slice(0, 4000)}`);
      }
    }
    log(
      `round ${round + 1}, ${name}: ${result.rowsPerSecond} rows/s (median second ${result.medianRowsPerSecondOfSeconds}), probe p50 ${result.probe.all.p50} ms p99 ${result.probe.all.p99} ms max ${result.probe.all.max} ms, ` +
        `acknowledged ${acknowledged}, in the database ${storedInDatabase}, control-plane CPU ${result.cpu.controlPlane} s${result.cpu.postgres === null ? '' : `, PostgreSQL CPU ${result.cpu.postgres} s`}`,
    );
    return result;
  } finally {
    for (const service of services) await service.stop();
    await postgres?.stop();
  }
}

// ---------------------------------------------------------------------------------------

interface CaseSummary {
  case: CaseName;
  instances: number;
  rounds: number;
  /** Medians over the rounds. */
  rowsPerSecond: number;
  rowsPerSecondRange: [number, number];
  shipRequestP50: number;
  probeP50: number;
  probeP99: number;
  probeMax: number;
  probeGetP99: number;
  probePostP99: number;
  controlPlanePer10kRows: number;
  postgresPer10kRows: number | null;
  controlPlaneCpuPerSecond: number;
  postgresCpuPerSecond: number | null;
  acknowledged: number;
  storedInDatabase: number;
  probeFailures: number;
}

function med(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function summaries(results: readonly CaseResult[]): CaseSummary[] {
  const names = [...new Set(results.map((r) => r.case))];
  return names.map((name) => {
    const rs = results.filter((r) => r.case === name);
    const pg = rs.map((r) => r.cpu.postgres);
    return {
      case: name,
      instances: rs[0]!.instances,
      rounds: rs.length,
      rowsPerSecond: Math.round(med(rs.map((r) => r.rowsPerSecond))),
      rowsPerSecondRange: [Math.min(...rs.map((r) => r.rowsPerSecond)), Math.max(...rs.map((r) => r.rowsPerSecond))],
      shipRequestP50: round1(med(rs.map((r) => r.shipRequest.p50))),
      probeP50: round1(med(rs.map((r) => r.probe.all.p50))),
      probeP99: round1(med(rs.map((r) => r.probe.all.p99))),
      probeMax: round1(med(rs.map((r) => r.probe.all.max))),
      probeGetP99: round1(med(rs.map((r) => r.probe.list.p99))),
      probePostP99: round1(med(rs.map((r) => r.probe.create.p99))),
      controlPlanePer10kRows: round2(med(rs.map((r) => r.cpu.controlPlanePer10kRows))),
      postgresPer10kRows: pg.every((c) => c !== null) ? round2(med(rs.map((r) => r.cpu.postgresPer10kRows!))) : null,
      controlPlaneCpuPerSecond: round2(med(rs.map((r) => r.cpu.controlPlane / r.seconds))),
      postgresCpuPerSecond: pg.every((c) => c !== null) ? round2(med(rs.map((r) => r.cpu.postgres! / r.seconds))) : null,
      acknowledged: rs.reduce((n, r) => n + r.acknowledged, 0),
      storedInDatabase: rs.reduce((n, r) => n + r.storedInDatabase, 0),
      probeFailures: rs.reduce((n, r) => n + r.probe.failures, 0),
    };
  });
}

/** postgres ÷ sqlite rows/s of each round (the two cases ran back to back), and their median. */
function pairedRatios(results: readonly CaseResult[]): { perRound: number[]; median: number } | null {
  const perRound: number[] = [];
  for (const r of results.filter((x) => x.case === 'postgres')) {
    const base = results.find((x) => x.case === 'sqlite' && x.round === r.round);
    if (base !== undefined) perRound.push(round2(r.rowsPerSecond / base.rowsPerSecond));
  }
  return perRound.length === 0 ? null : { perRound, median: round2(med(perRound)) };
}

function table(rows: readonly CaseSummary[]): string {
  const n = (x: number) => x.toLocaleString('en-US');
  const lines = [
    '| Case | Instances | Rows/s (range) | Ship request p50 ms | Probe p50 / p99 / max ms | Probe GET p99 / POST p99 ms | CPU cores: control plane / PostgreSQL | CPU s per 10,000 rows: control plane / PostgreSQL | Acknowledged = stored |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.case} | ${r.instances} | ${n(r.rowsPerSecond)} (${n(r.rowsPerSecondRange[0])}–${n(r.rowsPerSecondRange[1])}) | ${r.shipRequestP50} | ${r.probeP50} / ${r.probeP99} / ${r.probeMax} | ${r.probeGetP99} / ${r.probePostP99} | ` +
        `${r.controlPlaneCpuPerSecond} / ${r.postgresCpuPerSecond ?? '–'} | ${r.controlPlanePer10kRows} / ${r.postgresPer10kRows ?? '–'} | ${n(r.acknowledged)} ${r.acknowledged === r.storedInDatabase ? '=' : '≠'} ${n(r.storedInDatabase)} |`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  let args: Args;
  try {
    args = parse();
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\nusage: node bench/fleet-logs.ts [--seconds 20] [--warmup 3] [--replicas 20] [--batch 500] [--rounds 3] [--only sqlite|postgres] [--quick]\n`);
    process.exitCode = 2;
    return;
  }
  const log = (m: string) => process.stderr.write(`${m}\n`);
  if (args.only.includes('postgres')) {
    const why = postgresUnavailable();
    if (why !== null) {
      log(`${why}: running the sqlite case only`);
      args.only = args.only.filter((c) => c !== 'postgres');
    }
  }
  const machine = machineInfo();
  log(`node ${machine.node} on ${machine.cpuModel} × ${machine.cores}, load ${machine.loadAverageAtStart.join(' ')}; ${args.replicas} replicas, ${args.batch} rows a batch, ${args.warmup} s warm-up + ${args.seconds} s per case, ${args.rounds} round(s)`);
  const results: CaseResult[] = [];
  for (let round = 0; round < args.rounds; round++) {
    // Odd rounds run the cases in reverse order, so neither always follows the other.
    const order = round % 2 === 0 ? args.only : [...args.only].reverse();
    for (const name of order) results.push(await runCase(name, round, args, log));
  }
  const lost = results.filter((r) => r.lost !== 0);
  const summary = summaries(results);
  const ratio = pairedRatios(results);

  process.stdout.write(`${table(summary)}\n`);
  if (ratio !== null) process.stdout.write(`postgres ÷ sqlite rows/s, per round: ${ratio.perRound.join(', ')}; median ${ratio.median}\n`);
  const date = new Date().toISOString().slice(0, 10);
  const out = new URL(`./results/fleet-logs-${args.quick ? 'quick' : date}.json`, import.meta.url);
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  const command = `node bench/fleet-logs.ts ${process.argv.slice(2).join(' ')}`.trim();
  writeFileSync(out, `${JSON.stringify({ bench: 'fleet-logs', command, date: new Date().toISOString(), options: args, machine: { ...machine, loadAverageAtEnd: loadAverage() }, summary, postgresOverSqlite: ratio, results }, null, 2)}\n`);
  log(`wrote ${out.pathname}`);
  if (lost.length > 0) {
    log(`rows acknowledged but not in the database: ${lost.map((r) => `${r.case} ${r.lost}`).join(', ')}`);
    process.exitCode = 1;
  }
}

await main();
