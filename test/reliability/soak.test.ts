/**
 * Issue 7, item 2 — soak: mixed traffic (encrypt, decrypt, /proxy with forwarding,
 * management reads and writes) at 80% of the measured maximum against the real service
 * in its own process (file store, `logging.level: info`, defaults otherwise).
 *
 * Structure, both forms: measure the maximum of the same mix flat out, then run the mix at
 * 80% of it with autocannon's `overallRate`, sampling the child's RSS every second and
 * every response's latency into fixed windows. The full form (SVC_STRESS=1) runs 10
 * minutes with a 1-minute warm-up and 1-minute windows; the short form 12 s with the first
 * third as warm-up and 4 s windows.
 *
 * Asserts: every response has the status (and body) its request kind expects and there
 * are no socket errors or timeouts; RSS growth after warm-up under 10%; the p99 of the
 * last window within a bound of the p99 of the first window after warm-up.
 *
 * At `info` the service writes no line per request; what grows with traffic is the
 * stored api, usage and activity logs (batched into the SQLite file by the log thread),
 * which the management reads of the mix page through all along.
 *
 * autocannon's `overallRate` gives each connection a quota per second, sent back to back
 * from the start of each second (bench/http/load.ts), so the latencies here are those of
 * bursts of up to 16 concurrent requests: higher than evenly paced load would give, and
 * the same in every window, which is what a first-versus-last comparison needs.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { createRequire } from 'node:module';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { KEYS } from '../support/app.ts';
import { startChild, type Child } from '../support/child.ts';
import { FULL, scaled } from './scale.ts';
import { assertNoSecrets } from './no-secrets.ts';

const SOAK_SECONDS = scaled(12, 600);
const WARMUP_SECONDS = scaled(4, 60);
const WINDOW_SECONDS = scaled(4, 60);
const MAX_SECONDS = scaled(2, 10);
const CONNECTIONS = 16;
const LOAD_SHARE = 0.8;
/** p99 stability: last window ≤ P99_FACTOR × first + P99_SLACK_MS (see the assertion). */
const P99_FACTOR = scaled(3, 2);
const P99_SLACK_MS = scaled(50, 5);
/** Share of the target rate the run must reach (the short form shares the machine with other test files). */
const MIN_ACHIEVED = scaled(0.25, 0.5);
/** Encrypted bodies decrypted during the run, made before it starts. */
const POOL_SIZE = 32;

const KEY = KEYS.owner;
const FIELDS = 'name,email,phone,card.number,ssn';

// autocannon ships no types; this is the part of its API used here.
interface AutocannonRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  setupRequest?: (req: AutocannonRequest, context: Context) => AutocannonRequest | null;
  onResponse?: (status: number, body: string, context: Context) => void;
}
interface AutocannonResult {
  duration: number;
  errors: number;
  timeouts: number;
  mismatches: number;
  resets: number;
  non2xx: number;
}
interface AutocannonInstance extends PromiseLike<AutocannonResult> {
  on(event: 'response', listener: (client: unknown, statusCode: number, bytes: number, responseTime: number) => void): void;
  on(event: 'reqError', listener: (error: Error) => void): void;
}
type Autocannon = (options: Record<string, unknown>) => AutocannonInstance;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

/** Per-connection state autocannon keeps for one pass through the request cycle. */
interface Context {
  classificationId?: number;
  apiKeyId?: string;
  expected?: string;
}

function customer(n: number): string {
  return JSON.stringify({
    id: `cus_${1_000_000 + n}`,
    name: `Zoë Okafor ${n}`,
    email: `zoe.${n}@example.com`,
    phone: `+44 20 7946 ${String(n).padStart(4, '0')}`,
    ssn: `078-05-${String(1000 + n)}`,
    card: { brand: 'visa', number: `41111111${String(n).padStart(8, '0')}`, exp_month: 9, exp_year: 2029 },
    address: { line1: '221B Baker Street', city: 'London', postal_code: 'NW1 6XE', country: 'GB' },
    balance: 1284.5,
    tags: ['vip', 'paperless'],
    notes: 'Prefers "paperless" billing; escalated twice in Q3, see ticket #4412.',
  });
}

/**
 * The destination, in its own process: startEcho would record every request (hundreds of
 * MB over the full form) and share the load generator's event loop.
 */
async function startEchoProcess(t: TestContext): Promise<string> {
  const code = `
    const http = require('node:http');
    const server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
        res.end(body);
      });
    });
    // Longer than the service's pooled keep-alive: the destination never closes a socket the pool is about to reuse.
    server.keepAliveTimeout = 65000;
    server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ port: server.address().port }) + '\\n'));`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /"port":(\d+)/.exec(out);
      if (m !== null) resolve(Number(m[1]));
    });
    child.once('exit', (c) => reject(new Error(`the echo process exited with ${c}`)));
  });
  return `http://127.0.0.1:${port}`;
}

interface Pair {
  readonly plaintext: string;
  readonly encrypted: string;
}

async function makePool(url: string): Promise<Pair[]> {
  const pool: Pair[] = [];
  for (let n = 0; n < POOL_SIZE; n++) {
    const plaintext = customer(n);
    const res = await fetch(`${url}/api/v3/encryption/soak/encrypt`, {
      method: 'POST',
      headers: { 'x-svc-authorization': KEY, 'content-type': 'application/json', 'x-svc-fields': FIELDS },
      body: plaintext,
    });
    const encrypted = await res.text();
    assert.equal(res.status, 200, encrypted);
    assert.equal(encrypted.match(/"svc:1:/g)?.length, 5, encrypted);
    pool.push({ plaintext, encrypted });
  }
  return pool;
}

/** Counts per request kind: what was sent back and what was wrong with it. */
class Tally {
  readonly responses = new Map<string, number>();
  readonly wrong = new Map<string, number>();
  readonly samples: string[] = [];
  /**
   * The kind of the response being handled: autocannon calls a request's onResponse and
   * then, synchronously, emits its `response` event with the latency.
   */
  last = '';

  ok(kind: string): void {
    this.last = kind;
    this.responses.set(kind, (this.responses.get(kind) ?? 0) + 1);
  }

  fail(kind: string, status: number, body: string): void {
    this.ok(kind);
    this.wrong.set(kind, (this.wrong.get(kind) ?? 0) + 1);
    if (this.samples.length < 5) this.samples.push(`${kind}: ${status} ${body.slice(0, 200)}`);
  }

  get wrongTotal(): number {
    let n = 0;
    for (const v of this.wrong.values()) n += v;
    return n;
  }
}

/** Names of created classifications and keys, unique across the runs of one service. */
let names = 0;

/**
 * One connection's cycle of 100 requests: 88 data plane (encrypt 30, decrypt 28,
 * encrypt-and-forward 20, decrypt-and-forward 10), 7 management reads and 5 management
 * writes — a classification created, renamed and deleted, an API key created and revoked
 * (each chain in order, so a connection's context carries the id it created).
 */
function requestCycle(echoUrl: string, pool: readonly Pair[], tally: Tally): AutocannonRequest[] {
  const auth = { 'x-svc-authorization': KEY };
  const json = { ...auth, 'content-type': 'application/json' };
  let poolNext = 0;
  const check = (kind: string, expected: number, body?: (text: string, context: Context) => boolean) =>
    (status: number, text: string, context: Context) => {
      if (status === expected && (body === undefined || body(text, context))) tally.ok(kind);
      else tally.fail(kind, status, text);
    };
  const isEncrypted = (text: string) => text.split('"svc:1:').length === 6;
  const decryptSetup = (req: AutocannonRequest, context: Context): AutocannonRequest => {
    const pair = pool[poolNext++ % pool.length]!;
    context.expected = pair.plaintext;
    return { ...req, body: pair.encrypted };
  };
  const samePlaintext = (text: string, context: Context) => text === context.expected;

  const encrypt: AutocannonRequest = {
    method: 'POST',
    path: '/api/v3/encryption/soak/encrypt',
    headers: { ...json, 'x-svc-fields': FIELDS },
    body: pool[0]!.plaintext,
    onResponse: check('encrypt', 200, isEncrypted),
  };
  const decrypt: AutocannonRequest = {
    method: 'POST',
    path: '/api/v3/encryption/soak/decrypt',
    headers: json,
    setupRequest: decryptSetup,
    onResponse: check('decrypt', 200, samePlaintext),
  };
  const encryptForward: AutocannonRequest = {
    method: 'POST',
    path: '/proxy/soak',
    headers: { ...json, 'x-svc-fields': FIELDS, 'x-svc-destination': `${echoUrl}/v1/customers` },
    body: pool[1]!.plaintext,
    onResponse: check('proxy-encrypt-forward', 200, isEncrypted),
  };
  const decryptForward: AutocannonRequest = {
    method: 'POST',
    path: '/proxy/soak',
    headers: { ...json, 'x-svc-mode': 'decrypt', 'x-svc-destination': `${echoUrl}/v1/vendor` },
    setupRequest: decryptSetup,
    onResponse: check('proxy-decrypt-forward', 200, samePlaintext),
  };
  const isPage = (text: string) => text.startsWith('{"current_page":1,');
  const read = (kind: string, path: string): AutocannonRequest => ({ method: 'GET', path, headers: auth, onResponse: check(kind, 200, isPage) });
  const createClassification: AutocannonRequest = {
    method: 'POST',
    path: '/api/v3/classifications',
    headers: json,
    setupRequest: (req) => ({ ...req, body: JSON.stringify({ name: `soak ${names++}`, bg_color: '#aa0000', fg_color: '#ffffff' }) }),
    onResponse: (status, text, context) => {
      if (status === 201) context.classificationId = (JSON.parse(text) as { id: number }).id;
      check('create-classification', 201, () => context.classificationId !== undefined)(status, text, context);
    },
  };
  const updateClassification: AutocannonRequest = {
    method: 'PATCH',
    path: '/api/v3/classifications/0',
    headers: json,
    setupRequest: (req, context) => ({ ...req, path: `/api/v3/classifications/${context.classificationId}`, body: JSON.stringify({ description: `renamed ${names++}`, fg_color: '#000000' }) }),
    onResponse: check('update-classification', 200, (text) => text.includes('"fg_color":"#000000"')),
  };
  const deleteClassification: AutocannonRequest = {
    method: 'DELETE',
    path: '/api/v3/classifications/0',
    headers: auth,
    setupRequest: (req, context) => ({ ...req, path: `/api/v3/classifications/${context.classificationId}` }),
    onResponse: check('delete-classification', 204),
  };
  const createKey: AutocannonRequest = {
    method: 'POST',
    path: '/api/v3/api-keys',
    headers: json,
    setupRequest: (req) => ({ ...req, body: JSON.stringify({ name: `soak-key-${names++}`, permissions: ['data.encrypt'] }) }),
    onResponse: (status, text, context) => {
      if (status === 201) context.apiKeyId = (JSON.parse(text) as { id: string }).id;
      check('create-api-key', 201, (body) => /"key":"svc_[A-Za-z0-9]{40}"/.test(body))(status, text, context);
    },
  };
  const revokeKey: AutocannonRequest = {
    method: 'POST',
    path: '/api/v3/api-keys/0/revoke',
    headers: auth,
    setupRequest: (req, context) => ({ ...req, path: `/api/v3/api-keys/${context.apiKeyId}/revoke` }),
    onResponse: check('revoke-api-key', 204),
  };

  const management = new Map<number, AutocannonRequest>([
    [4, createClassification],
    [12, read('list-classifications', '/api/v3/classifications?per_page=20')],
    [20, createKey],
    [27, read('list-configurations', '/api/v3/configurations')],
    [34, updateClassification],
    [41, read('logs-api', '/api/v3/logs/api?per_page=20')],
    [48, read('list-classifications', '/api/v3/classifications?search=soak&sort=created_at&direction=desc')],
    [55, read('logs-usage', '/api/v3/logs/usage')],
    [66, deleteClassification],
    [73, read('logs-unified', '/api/v3/logs/unified')],
    [80, revokeKey],
    [90, read('logs-activity', '/api/v3/logs/activity')],
  ]);
  // Data plane kinds spread evenly over the remaining slots (largest remainder first).
  const weights: Array<[AutocannonRequest, number]> = [[encrypt, 30], [decrypt, 28], [encryptForward, 20], [decryptForward, 10]];
  const sent = weights.map(() => 0);
  const cycle: AutocannonRequest[] = [];
  let slot = 0;
  for (let i = 0; i < 100; i++) {
    const m = management.get(i);
    if (m !== undefined) {
      cycle.push(m);
      continue;
    }
    slot++;
    // The kind furthest behind its share of the data slots so far goes next.
    const behind = (k: number) => (weights[k]![1] * slot) / 88 - sent[k]!;
    let best = 0;
    for (let k = 1; k < weights.length; k++) if (behind(k) > behind(best)) best = k;
    sent[best]!++;
    cycle.push(weights[best]![0]);
  }
  assert.deepEqual(sent, [30, 28, 20, 10]);
  return cycle;
}

/** Latencies in fixed windows of the run, in ms, overall and per request kind. */
class Windows {
  readonly #start: number;
  readonly #windowMs: number;
  readonly #windows: Array<Map<string, number[]>> = [];

  constructor(start: number, windowSeconds: number) {
    this.#start = start;
    this.#windowMs = windowSeconds * 1000;
  }

  add(at: number, kind: string, ms: number): void {
    const window = (this.#windows[Math.floor((at - this.#start) / this.#windowMs)] ??= new Map());
    let list = window.get(kind);
    if (list === undefined) window.set(kind, (list = []));
    list.push(ms);
  }

  percentiles(i: number, kind?: string): { p50: number; p99: number; count: number } {
    const window = this.#windows[i] ?? new Map<string, number[]>();
    const values = kind === undefined ? [...window.values()].flat() : (window.get(kind) ?? []);
    const sorted = Float64Array.from(values).sort();
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN;
    return { p50: round(at(0.5)), p99: round(at(0.99)), count: sorted.length };
  }

  kinds(i: number): string[] {
    return [...(this.#windows[i]?.keys() ?? [])].sort();
  }
}

/**
 * CPU time in ms (Linux: utime + stime): of a whole process from /proc/<pid>/stat, or of
 * one thread from /proc/<pid>/task/<tid>/stat (the main thread's tid is the pid).
 */
function cpuMs(path: string): number {
  const stat = readFileSync(path, 'utf8');
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;
const mb = (bytes: number) => round(bytes / 1024 / 1024, 1);

interface Run {
  readonly result: AutocannonResult;
  readonly responses: number;
  readonly errors: string[];
}

async function drive(url: string, cycle: AutocannonRequest[], seconds: number, onResponse: (ms: number) => void, overallRate?: number): Promise<Run> {
  const errors: string[] = [];
  let responses = 0;
  const instance = autocannon({
    url,
    connections: CONNECTIONS,
    duration: seconds,
    requests: cycle,
    // A request that takes this long counts as an error (a timeout), not a slow response.
    timeout: 10,
    ...(overallRate === undefined ? {} : { overallRate }),
  });
  instance.on('response', (_client, _status, _bytes, responseTime) => {
    responses++;
    onResponse(responseTime);
  });
  instance.on('reqError', (error) => {
    if (errors.length < 5) errors.push(String(error));
  });
  const result = await instance;
  return { result, responses, errors };
}

function socketErrors(run: Run): number {
  // `resets`: a setupRequest that found no id (its create failed), so the cycle restarted.
  return run.result.errors + run.result.timeouts + run.result.mismatches + run.result.resets;
}

test(`soak: ${SOAK_SECONDS} s of mixed traffic at 80% of the measured maximum — no errors, flat RSS, stable p99`, { timeout: (SOAK_SECONDS + 120) * 1000 }, async (t) => {
  const echoUrl = await startEchoProcess(t);
  const child: Child = await startChild(t, `seed:
  users:
    - { name: Soak Owner, email: soak@example.com, roles: [owner] }
  api_keys:
    - { name: soak, user: soak@example.com, key: ${KEY} }
  configurations:
    - { name: soak, proxy_slug: soak, destinations: ["${echoUrl}/v1/"] }
  classifications:
    - { name: Seeded, bg_color: "#aa0000", fg_color: "#ffffff" }
`);
  const pool = await makePool(child.url);

  // 1. The maximum of this mix on this machine now (it also warms the process up).
  const maxTally = new Tally();
  const max = await drive(child.url, requestCycle(echoUrl, pool, maxTally), MAX_SECONDS, () => {});
  const maxRps = Math.round(max.responses / max.result.duration);
  assert.equal(maxTally.wrongTotal, 0, `flat out: ${maxTally.samples.join('\n')}`);
  assert.equal(socketErrors(max), 0, `flat out: ${JSON.stringify(max.result)} ${max.errors.join('; ')}`);
  const targetRps = Math.max(1, Math.round(maxRps * LOAD_SHARE));

  // 2. The soak at 80% of it.
  const tally = new Tally();
  const start = performance.now();
  const windows = new Windows(start, WINDOW_SECONDS);
  const samples: Array<{ at: number; rss: number; cpuMs: number; mainCpuMs: number; load: number }> = [];
  let sampling = true;
  const pid = child.process.pid!;
  const sampler = (async () => {
    while (sampling) {
      samples.push({ at: performance.now() - start, rss: child.rss(), cpuMs: cpuMs(`/proc/${pid}/stat`), mainCpuMs: cpuMs(`/proc/${pid}/task/${pid}/stat`), load: loadavg()[0]! });
      await sleep(1000);
    }
  })();
  let run: Run;
  try {
    run = await drive(child.url, requestCycle(echoUrl, pool, tally), SOAK_SECONDS, (ms) => windows.add(performance.now(), tally.last, ms), targetRps);
  } finally {
    sampling = false;
    await sampler;
  }
  const achievedRps = Math.round(run.responses / run.result.duration);
  assert.ok(child.process.exitCode === null, `the service exited:\n${child.output().slice(-2000)}`);
  assertNoSecrets('soak', child.output());

  // Zero errors: every response had the status and body its kind expects, and no socket
  // error, timeout or broken chain happened.
  assert.equal(tally.wrongTotal, 0, tally.samples.join('\n'));
  assert.equal(socketErrors(run), 0, `${JSON.stringify(run.result)} ${run.errors.join('; ')}`);
  assert.equal([...tally.responses.values()].reduce((a, b) => a + b, 0), run.responses, 'every response was checked by its kind');
  for (const kind of ['encrypt', 'decrypt', 'proxy-encrypt-forward', 'proxy-decrypt-forward', 'create-classification', 'update-classification', 'delete-classification', 'create-api-key', 'revoke-api-key', 'logs-api', 'list-configurations']) {
    assert.ok((tally.responses.get(kind) ?? 0) > 0, `no ${kind} request was made`);
  }
  // The generator really loaded the service: a run far below its target would prove little.
  assert.ok(achievedRps >= targetRps * MIN_ACHIEVED, `achieved ${achievedRps} rps of a ${targetRps} rps target`);

  // RSS: the median of the per-second samples of a window, so one sample caught at a
  // garbage-collection peak or just after a major GC moves neither figure; what remains is
  // the level the process holds, and growth of that level between the first window after
  // warm-up and the last is what a leak looks like.
  const firstWindow = WARMUP_SECONDS / WINDOW_SECONDS;
  const lastWindow = SOAK_SECONDS / WINDOW_SECONDS - 1;
  const inWindow = (i: number) => samples.filter((s) => Math.floor(s.at / (WINDOW_SECONDS * 1000)) === i);
  const rssFirst = median(inWindow(firstWindow).map((s) => s.rss));
  const rssLast = median(inWindow(lastWindow).map((s) => s.rss));
  const growth = (rssLast - rssFirst) / rssFirst;

  // Per window, for reading a failure: throughput, latency, the service's CPU time per
  // response (grows if the service does more work per request; flat if only neighbours on
  // the machine slowed it down) and the machine's load average.
  const perWindow = Array.from({ length: lastWindow + 1 }, (_, i) => {
    const w = inWindow(i);
    const { p50, p99, count } = windows.percentiles(i);
    // The CPU samples span (w.length - 1) seconds of the window: scale the responses to that span.
    const cpu = w.length > 1 ? w.at(-1)!.cpuMs - w[0]!.cpuMs : Number.NaN;
    const mainCpu = w.length > 1 ? w.at(-1)!.mainCpuMs - w[0]!.mainCpuMs : Number.NaN;
    const responses = (count * (w.length - 1)) / WINDOW_SECONDS;
    return {
      window: i,
      rps: Math.round(count / WINDOW_SECONDS),
      p50,
      p99,
      cpuMsPerResponse: round(cpu / responses, 3),
      mainThreadCpuMsPerResponse: round(mainCpu / responses, 3),
      load: round(median(w.map((s) => s.load)), 1),
      rssMb: mb(median(w.map((s) => s.rss))),
    };
  });
  const byKindP99 = (i: number) => Object.fromEntries(windows.kinds(i).map((k) => [k, windows.percentiles(i, k).p99]));
  const report = () => process.stderr.write(`soak windows:\n${perWindow.map((w) => JSON.stringify(w)).join('\n')}\np99 by kind, first: ${JSON.stringify(byKindP99(firstWindow))}\np99 by kind, last: ${JSON.stringify(byKindP99(lastWindow))}\n`);

  const first = windows.percentiles(firstWindow);
  const last = windows.percentiles(lastWindow);
  const figures = {
    part: 'soak',
    form: FULL ? 'full' : 'short',
    seconds: SOAK_SECONDS,
    warmupSeconds: WARMUP_SECONDS,
    windowSeconds: WINDOW_SECONDS,
    connections: CONNECTIONS,
    maxRps,
    targetRps,
    achievedRps,
    responses: run.responses,
    errors: tally.wrongTotal + socketErrors(run),
    byKind: Object.fromEntries(tally.responses),
    rssMb: { warmedUp: mb(rssFirst), end: mb(rssLast), peak: mb(child.peakRss()), growthPercent: round(growth * 100, 1) },
    latencyMs: { first: { window: firstWindow, ...first }, last: { window: lastWindow, ...last } },
    cpuMsPerResponse: { first: perWindow[firstWindow]!.cpuMsPerResponse, last: perWindow[lastWindow]!.cpuMsPerResponse },
    mainThreadCpuMsPerResponse: { first: perWindow[firstWindow]!.mainThreadCpuMsPerResponse, last: perWindow[lastWindow]!.mainThreadCpuMsPerResponse },
    loadAverage: { first: perWindow[firstWindow]!.load, last: perWindow[lastWindow]!.load },
  };
  console.log(`RELIABILITY ${JSON.stringify(figures)}`);
  if (FULL || growth >= 0.1 || last.p99 > P99_FACTOR * first.p99 + P99_SLACK_MS) report();

  assert.ok(inWindow(firstWindow).length >= 3 && inWindow(lastWindow).length >= 3, `too few RSS samples: ${samples.length}`);
  assert.ok(growth < 0.1, `RSS grew ${round(growth * 100, 1)}% after warm-up: ${mb(rssFirst)} MB → ${mb(rssLast)} MB`);
  // p99 stability. The p99 at a fixed rate depends on how the service keeps up and on
  // what else this shared 2-core machine runs in that minute; a degradation in the
  // service (a growing table scanned per request, a leak making GC work harder) shows as
  // a multiple, while neighbours add noise of a few ms. So: last ≤ 2 × first + 5 ms.
  // The short form compares 4 s windows while `npm test` runs other files beside it, so it
  // only catches a gross regression; the full form holds the bound above.
  assert.ok(first.count > 0 && last.count > 0, 'no latency samples in a compared window');
  assert.ok(last.p99 <= P99_FACTOR * first.p99 + P99_SLACK_MS, `p99 went from ${first.p99} ms to ${last.p99} ms`);
  // Regression (log lists counted their whole table on every page, on the event loop:
  // src/store/logs.ts): the work the main thread does per response must not grow with the
  // stored logs. CPU time is less sensitive to neighbours than latency, yet contention
  // still moves it by ±15% between minutes here; before the fix the process's CPU per
  // response grew 45–67% in 10 minutes. Only the full form grows the tables past where
  // counting shows.
  if (FULL) {
    const [a, b] = [perWindow[firstWindow]!.mainThreadCpuMsPerResponse, perWindow[lastWindow]!.mainThreadCpuMsPerResponse];
    assert.ok(b <= 1.4 * a, `main-thread CPU per response went from ${a} ms to ${b} ms`);
  }
});
