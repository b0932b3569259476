/**
 * `/proxy` encrypt-and-forward and decrypt-and-forward against plain proxies and
 * hand-written references, side by side in one run:
 *
 *   node bench/http/proxy.ts [--quick] [--rounds N] [--seconds S] [--connections N]
 *                            [--tail-rate R] [--tail-seconds S] [--no-tail]
 *                            [--nginx-workers N] [--install-nginx]
 *                            [--profile] [--profile-case encrypt|decrypt]
 *                            [--svc-node-args "--flag ..."] [--reference-node-args "--flag ..."]
 *                            [--svc-yaml "..."]
 *
 * Cases, each POSTing the same ~1 KB JSON customer record (body.ts), or that record with
 * its five fields already encrypted for the decrypt cases:
 *   A direct        autocannon → echo backend (servers.ts, its own process)
 *   B http-proxy-3  autocannon → http-proxy-3 pass-through (own process) → echo
 *   C nginx         autocannon → nginx on loopback, keep-alive upstream → echo
 *   F undici        autocannon → servers.ts `undici-pass`: node:http, each request
 *                   dispatched on an undici Pool, status, headers and body copied back
 *   E naive         autocannon → a hand-written Node encrypt-and-forward (servers.ts
 *                   `naive-encrypt`: JSON.parse, AES-256-GCM on the same 5 fields,
 *                   JSON.stringify, undici) → echo
 *   D svc /proxy    autocannon → the service (`node --max-semi-space-size=4 --heap-growing-percent=50 --no-allocation-site-pretenuring src/main.ts
 *                   serve`) encrypting 5 fields and forwarding to the echo backend
 *   G naive decrypt autocannon → servers.ts `naive-decrypt`: the 5 fields, sealed by the
 *                   bench beforehand with the key that process holds, opened → echo
 *   D-decrypt       autocannon → the same service, `x-svc-mode: decrypt`, opening 5 tokens
 *                   it made itself (its encrypt endpoint, before timing) → echo
 *   D-nolog         autocannon → a second service, as D but with `logs: { enabled: false }`
 *                   (no api or usage entries: what the audit log costs D; E writes none)
 *   D-decrypt-nolog autocannon → that second service, as D-decrypt, opening 5 tokens it
 *                   made itself (what the audit log costs D-decrypt; G writes none)
 *
 * Each round measures every case at full load (fixed connections, 1 s warm-up each),
 * then the tail run: A and then D at a fixed paced rate (load.ts `paced`, default
 * 1,000 req/s for 60 s), with the service's event-loop delay read from its /metrics over
 * exactly D's paced window. Ratios are taken within each round, and medians of the
 * per-round values are the headline. The server processes' CPU time and RSS are read
 * from /proc for every run.
 *
 * Writes bench/results/http-proxy.json (--quick: http-proxy-quick.json; with
 * --svc-node-args, --reference-node-args or --svc-yaml: http-proxy-experiment.json; the second gives
 * the hand-written references E and G node flags, e.g. the service's heap sizes, where
 * they otherwise run on Node's defaults). `--profile` instead runs D (or, with
 * `--profile-case decrypt`, D-decrypt) alone with `--cpu-prof` and prints the top
 * self-time functions, and the busy time per request served. `--svc-yaml` adds top-level
 * YAML to the service's configuration (e.g. `logs: { enabled: false }`, to see what a
 * part of the product costs).
 */
import { createSecretKey, randomBytes, type KeyObject } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { loadAverage, machineInfo } from '../lib/report.ts';
import { customerRecord, FIELDS } from './body.ts';
import { cannon, paced, round3, type LoadResult, type Target } from './load.ts';
import { NAIVE_KEY_ENV, replaceAt, seal } from './naive-fields.ts';
import { BENCH_KEY, BENCH_SLUG, cpuSeconds, installNginx, memoryOf, nginxAvailable, SERVICE_NODE_FLAGS, startHelper, startNginx, startService, type Running } from './processes.ts';
import { formatProfile, summarizeProfile } from './profile.ts';

type CaseId = 'direct' | 'http-proxy-3' | 'nginx' | 'undici' | 'naive' | 'svc-proxy' | 'svc-nolog' | 'naive-decrypt' | 'svc-decrypt' | 'svc-decrypt-nolog';
const ORDER: readonly CaseId[] = ['direct', 'http-proxy-3', 'nginx', 'undici', 'naive', 'svc-proxy', 'svc-nolog', 'naive-decrypt', 'svc-decrypt', 'svc-decrypt-nolog'];
const LABELS: Record<CaseId, string> = {
  direct: 'A direct (echo)',
  'http-proxy-3': 'B http-proxy-3 pass-through',
  nginx: 'C nginx reverse proxy',
  undici: 'F undici pass-through',
  naive: 'E naive Node encrypt 5 fields + forward',
  'svc-proxy': 'D svc /proxy encrypt 5 fields + forward',
  'svc-nolog': 'D-nolog the same, api and usage logs off',
  'naive-decrypt': 'G naive Node decrypt 5 fields + forward',
  'svc-decrypt': 'D-decrypt svc /proxy decrypt 5 fields + forward',
  'svc-decrypt-nolog': 'D-decrypt-nolog the same, api and usage logs off',
};
const TARGETS = {
  /** 1: D ≥ 1.0× E, in req/s and in req/s per server CPU-second. */
  encryptVsNaive: 1.0,
  /** 2: D ≥ 0.8× B in req/s per server CPU-second. */
  cpuEncryptVsHttpProxy3: 0.8,
  /** 3: at the paced tail rate, D − A. */
  addedP50Ms: 0.3,
  addedP99Ms: 2,
  /** 4: the service's event-loop delay over D's paced run. */
  loopDelayP99Ms: 2,
  loopDelayMaxMs: 20,
  /** 5: D-decrypt ≥ 1.0× G in req/s. */
  decryptVsNaive: 1.0,
} as const;
const MIB = 1024 * 1024;

interface Options {
  quick: boolean;
  rounds: number;
  seconds: number;
  warmupSeconds: number;
  connections: number;
  tail: boolean;
  tailRate: number;
  tailSeconds: number;
  nginxWorkers: number;
  installNginx: boolean;
  profile: boolean;
  profileCase: 'encrypt' | 'decrypt';
  /** Extra node flags for the service, after the `npm start` ones (experiments only). */
  svcNodeArgs: string[];
  /** Top-level YAML added to the service's configuration (experiments only). */
  svcYaml: string;
  /** Node flags for the references E and G (experiments only; none by default). */
  referenceNodeArgs: string[];
}

function parse(): Options {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      seconds: { type: 'string' },
      connections: { type: 'string', default: '50' },
      'tail-rate': { type: 'string' },
      'tail-seconds': { type: 'string' },
      'no-tail': { type: 'boolean', default: false },
      'nginx-workers': { type: 'string', default: '1' },
      'install-nginx': { type: 'boolean', default: false },
      profile: { type: 'boolean', default: false },
      'profile-case': { type: 'string', default: 'encrypt' },
      'svc-node-args': { type: 'string', default: '' },
      'reference-node-args': { type: 'string', default: '' },
      'svc-yaml': { type: 'string', default: '' },
    },
    strict: true,
  });
  const int = (name: string, value: string | undefined, fallback: number) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
    return n;
  };
  const profileCase = values['profile-case'];
  if (profileCase !== 'encrypt' && profileCase !== 'decrypt') throw new Error('--profile-case must be encrypt or decrypt');
  const quick = values.quick;
  return {
    quick,
    rounds: int('rounds', values.rounds, quick ? 1 : 5),
    seconds: int('seconds', values.seconds, quick ? 3 : 10),
    warmupSeconds: quick ? 1 : 5,
    connections: int('connections', values.connections, 50),
    tail: !values['no-tail'],
    tailRate: int('tail-rate', values['tail-rate'], 1000),
    tailSeconds: int('tail-seconds', values['tail-seconds'], quick ? 10 : 60),
    nginxWorkers: int('nginx-workers', values['nginx-workers'], 1),
    installNginx: values['install-nginx'],
    profile: values.profile,
    profileCase,
    svcNodeArgs: values['svc-node-args'].split(' ').filter((a) => a !== ''),
    referenceNodeArgs: values['reference-node-args'].split(' ').filter((a) => a !== ''),
    svcYaml: values['svc-yaml'],
  };
}

const log = (m: string) => process.stderr.write(`${m}\n`);

function median(values: readonly number[]): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

interface Measured extends LoadResult {
  /** CPU seconds of the server processes under test (the proxy; the echo backend for A). */
  readonly serverCpuSeconds: number;
  readonly echoCpuSeconds: number;
  /** The load generator's own CPU seconds: near `seconds` means it was the bottleneck. */
  readonly generatorCpuSeconds: number;
  /** Responses per CPU-second of the process under test. */
  readonly requestsPerServerCpuSecond: number;
  /** VmRSS and VmHWM of the process under test at the end of the run (/proc). */
  readonly rssMiB: number;
  readonly hwmMiB: number;
}

/** Runs `run` while reading the CPU time of the processes involved, and their RSS after. */
async function measured(serverPids: readonly number[], echoPids: readonly number[], run: () => Promise<LoadResult>): Promise<Measured> {
  const server0 = cpuSeconds(serverPids);
  const echo0 = cpuSeconds(echoPids);
  const gen0 = process.cpuUsage();
  const result = await run();
  const gen = process.cpuUsage(gen0);
  const serverCpu = cpuSeconds(serverPids) - server0;
  const mem = memoryOf(serverPids);
  if (result.non2xx + result.errors > 0) throw new Error(`${result.non2xx} non-2xx responses and ${result.errors} errors: the numbers would be meaningless`);
  return {
    ...result,
    serverCpuSeconds: round3(serverCpu),
    echoCpuSeconds: round3(cpuSeconds(echoPids) - echo0),
    generatorCpuSeconds: round3((gen.user + gen.system) / 1e6),
    requestsPerServerCpuSecond: serverCpu > 0 ? Math.round(result.responses / serverCpu) : Number.NaN,
    rssMiB: round3(mem.rss / MIB),
    hwmMiB: round3(mem.hwm / MIB),
  };
}

type Doc = Record<string, unknown> & { card: Record<string, unknown> };
const fieldValues = (doc: Doc) => [doc['name'], doc['email'], doc['phone'], doc.card['number'], doc['ssn']];

/** One request per case before measuring: every case must answer what it should. */
async function check(id: CaseId, target: Target): Promise<void> {
  const res = await fetch(target.url, { method: target.method, headers: target.headers, body: new Uint8Array(target.body) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${id}: status ${res.status}: ${text.slice(0, 300)}`);
  if (id === 'direct' || id === 'http-proxy-3' || id === 'nginx' || id === 'undici') {
    if (text !== target.body.toString()) throw new Error(`${id}: the echo did not return the body`);
    return;
  }
  const doc = JSON.parse(text) as Doc;
  if (id === 'naive-decrypt' || id === 'svc-decrypt' || id === 'svc-decrypt-nolog') {
    // The destination must receive the original record, every field in plain text.
    if (!isDeepStrictEqual(doc, JSON.parse(customerRecord().toString()))) throw new Error(`${id}: the 5 fields were not decrypted to the original record: ${text.slice(0, 400)}`);
    return;
  }
  const sent = JSON.parse(target.body.toString()) as Doc;
  const isToken = id === 'svc-proxy' || id === 'svc-nolog' ? (v: unknown) => typeof v === 'string' && v.startsWith('svc:') && v.endsWith(':$') : (v: unknown) => typeof v === 'string' && v.startsWith('enc:');
  if (!fieldValues(doc).every(isToken)) throw new Error(`${id}: the 5 fields were not encrypted: ${text.slice(0, 400)}`);
  if (doc['notes'] !== sent['notes'] || doc['id'] !== sent['id']) throw new Error(`${id}: other fields changed`);
}

/** The record with its five fields sealed as the decrypt reference opens them. */
function naiveSealedRecord(key: KeyObject): Buffer {
  const doc = JSON.parse(customerRecord().toString()) as unknown;
  for (const field of FIELDS) replaceAt(doc, field.split('.'), (value) => seal(key, value));
  return Buffer.from(JSON.stringify(doc));
}

/** The record with its five fields as the service's own tokens (its encrypt endpoint). */
async function svcTokenRecord(svcUrl: string): Promise<Buffer> {
  const res = await fetch(`${svcUrl}/api/v3/encryption/${BENCH_SLUG}/encrypt`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-authorization': BENCH_KEY, 'x-svc-fields': FIELDS.join(',') },
    body: new Uint8Array(customerRecord()),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`the service's encrypt endpoint answered ${res.status}: ${text.slice(0, 300)}`);
  if (!fieldValues(JSON.parse(text) as Doc).every((v) => typeof v === 'string' && v.startsWith('svc:'))) throw new Error(`the encrypt endpoint did not return 5 tokens: ${text.slice(0, 400)}`);
  return Buffer.from(text);
}

function svcHeaders(echoUrl: string, mode: 'encrypt' | 'decrypt'): Record<string, string> {
  return {
    'content-type': 'application/json',
    'x-svc-authorization': BENCH_KEY,
    'x-svc-destination': `${echoUrl}/`,
    'x-svc-fields': FIELDS.join(','),
    ...(mode === 'decrypt' ? { 'x-svc-mode': 'decrypt' } : {}),
  };
}

/** Event-loop delay in ms over one window: how late the loop ran a timer. */
interface LoopDelay {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

/**
 * The interval of the service's delay monitor (LOOP_RESOLUTION_MS in
 * src/telemetry/metrics.ts). Node's `monitorEventLoopDelay` records the whole time
 * between two runs of its timer, interval included, so an idle service reports about
 * 10.1 ms at every quantile: the lateness is the reading less this interval.
 */
const LOOP_MONITOR_INTERVAL_MS = 10;

/**
 * Scrapes the admin listener's /metrics and returns svc_event_loop_delay_seconds in ms,
 * as exported. The gauge covers the time since the previous scrape and every scrape
 * starts a new window (src/telemetry/metrics.ts), so one scrape just before a run and one
 * just after give the readings over that run alone. Nothing else scrapes the bench's
 * service.
 */
async function scrapeLoopDelay(adminUrl: string): Promise<LoopDelay> {
  const res = await fetch(`${adminUrl}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  const at = (q: string) => {
    const m = new RegExp(`^svc_event_loop_delay_seconds\\{quantile="${q.replace('.', '\\.')}"\\} (\\S+)$`, 'm').exec(text);
    if (m === null) throw new Error(`/metrics has no svc_event_loop_delay_seconds{quantile="${q}"}`);
    return round3(Number(m[1]) * 1000);
  };
  return { p50: at('0.5'), p90: at('0.9'), p99: at('0.99'), p999: at('0.999'), max: at('1') };
}

/**
 * Lateness from the exported readings: the monitor's interval is taken off when the
 * idle window shows it is included (an idle loop's median is then near 10 ms, where a
 * pure lateness would be near 0), so the bench stays right if the metric changes.
 */
function lateness(reading: LoopDelay, idle: LoopDelay): LoopDelay {
  const off = idle.p50 >= LOOP_MONITOR_INTERVAL_MS / 2 ? LOOP_MONITOR_INTERVAL_MS : 0;
  const less = (v: number) => round3(Math.max(0, v - off));
  return { p50: less(reading.p50), p90: less(reading.p90), p99: less(reading.p99), p999: less(reading.p999), max: less(reading.max) };
}

interface Tail {
  readonly rate: number;
  readonly direct: Measured;
  readonly svc: Measured;
  /** D − A at the same paced rate, ms. */
  readonly addedP50Ms: number;
  readonly addedP99Ms: number;
  /** The service's event-loop delay over D's paced run, after the pool's connections opened (lateness). */
  readonly loopDelayMs: LoopDelay;
  /** The same as /metrics exported it (the monitor's interval included). */
  readonly loopDelayReadingMs: LoopDelay;
}

interface Ratio {
  readonly rps: number;
  readonly cpu: number;
}

interface Round {
  readonly round: number;
  readonly max: Partial<Record<CaseId, Measured>>;
  readonly ratios: {
    readonly encryptVsNaive: Ratio;
    readonly encryptVsHttpProxy3: Ratio;
    readonly encryptVsUndici: Ratio;
    readonly encryptVsNginx: Ratio | null;
    readonly decryptVsNaive: Ratio;
    /** D-nolog ÷ E: null when the case was left out. */
    readonly encryptNoLogsVsNaive: Ratio | null;
    /** D-decrypt-nolog ÷ G: null when the case was left out. */
    readonly decryptNoLogsVsNaive: Ratio | null;
  };
  readonly tail: Tail | null;
}

async function main(): Promise<void> {
  const options = parse();
  const machine = machineInfo();
  log(`node ${machine.node} on ${machine.cpuModel} × ${machine.cores}, load ${machine.loadAverageAtStart.join(' ')}${options.quick ? ' (quick)' : ''}`);
  if (machine.loadAverageAtStart[0]! > machine.cores * 0.5) log(`warning: load average ${machine.loadAverageAtStart[0]} on ${machine.cores} cores: other jobs share the CPU`);

  const started: Running[] = [];
  const stopAll = async () => {
    for (const r of started.reverse()) await r.stop().catch((err: unknown) => log(`stopping ${r.name}: ${String(err)}`));
  };
  // Interrupted or killed: nginx and the services are not children that die with us.
  process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
  process.once('SIGTERM', () => void stopAll().then(() => process.exit(143)));
  try {
    const echo = await startHelper('echo');
    started.push(echo);
    if (options.profile) {
      await profile(options, echo);
      return;
    }
    const naiveKeyBytes = randomBytes(32);
    const naiveEnv = { [NAIVE_KEY_ENV]: naiveKeyBytes.toString('base64') };
    const httpProxy3 = await startHelper('http-proxy-3', echo.url);
    started.push(httpProxy3);
    let nginx: Running | null = null;
    let nginxNote: string | null = null;
    if (!nginxAvailable() && options.installNginx) installNginx(log);
    if (nginxAvailable()) {
      nginx = await startNginx(echo.port, options.nginxWorkers);
      started.push(nginx);
    } else {
      nginxNote = 'nginx is not installed: case C skipped (run with --install-nginx, or apt-get install -y nginx)';
      log(nginxNote);
    }
    const undici = await startHelper('undici-pass', echo.url);
    started.push(undici);
    const naive = await startHelper('naive-encrypt', `${echo.url}/`, naiveEnv, options.referenceNodeArgs);
    started.push(naive);
    const naiveDecrypt = await startHelper('naive-decrypt', `${echo.url}/`, naiveEnv, options.referenceNodeArgs);
    started.push(naiveDecrypt);
    const svc = await startService({ destinations: [echo.url], nodeArgs: options.svcNodeArgs, yaml: options.svcYaml, admin: true });
    started.push(svc);
    // D-nolog: the same service without api and usage logs. An experiment's YAML that sets
    // `logs:` itself would clash with it, so the case is left out then.
    let svcNoLog: Running | null = null;
    if (/^logs:/m.test(options.svcYaml)) log('--svc-yaml sets logs: case D-nolog skipped');
    else {
      svcNoLog = await startService({ destinations: [echo.url], nodeArgs: options.svcNodeArgs, yaml: `${options.svcYaml}\nlogs: { enabled: false }` });
      started.push(svcNoLog);
    }

    // Footprint before any traffic: every server 2 s after the service listens. The
    // service's delay monitor is read over the same idle 2 s (the first scrape closes the
    // window of its start-up).
    await scrapeLoopDelay(svc.adminUrl!);
    await sleep(2000);
    const idleLoopDelayMs = await scrapeLoopDelay(svc.adminUrl!);
    const idle = {
      direct: memoryOf(echo.pids),
      'http-proxy-3': memoryOf(httpProxy3.pids),
      ...(nginx === null ? {} : { nginx: memoryOf(nginx.pids) }),
      undici: memoryOf(undici.pids),
      naive: memoryOf(naive.pids),
      'naive-decrypt': memoryOf(naiveDecrypt.pids),
      svc: memoryOf(svc.pids),
      ...(svcNoLog === null ? {} : { 'svc-nolog': memoryOf(svcNoLog.pids) }),
    };
    const idleRssMiB = Object.fromEntries(Object.entries(idle).map(([k, m]) => [k, round3(m.rss / MIB)]));
    log(`idle RSS (MiB, before any traffic): ${Object.entries(idleRssMiB).map(([k, v]) => `${k} ${v}`).join(', ')}`);

    const body = customerRecord();
    const naiveSealed = naiveSealedRecord(createSecretKey(naiveKeyBytes));
    const svcTokens = await svcTokenRecord(svc.url);
    const plainHeaders = { 'content-type': 'application/json' };
    const targets: Partial<Record<CaseId, { target: Target; pids: readonly number[] }>> = {
      direct: { target: { url: `${echo.url}/`, method: 'POST', headers: plainHeaders, body }, pids: echo.pids },
      'http-proxy-3': { target: { url: `${httpProxy3.url}/`, method: 'POST', headers: plainHeaders, body }, pids: httpProxy3.pids },
      undici: { target: { url: `${undici.url}/`, method: 'POST', headers: plainHeaders, body }, pids: undici.pids },
      naive: { target: { url: `${naive.url}/`, method: 'POST', headers: plainHeaders, body }, pids: naive.pids },
      'svc-proxy': { target: { url: `${svc.url}/proxy/${BENCH_SLUG}`, method: 'POST', headers: svcHeaders(echo.url, 'encrypt'), body }, pids: svc.pids },
      'naive-decrypt': { target: { url: `${naiveDecrypt.url}/`, method: 'POST', headers: plainHeaders, body: naiveSealed }, pids: naiveDecrypt.pids },
      'svc-decrypt': { target: { url: `${svc.url}/proxy/${BENCH_SLUG}`, method: 'POST', headers: svcHeaders(echo.url, 'decrypt'), body: svcTokens }, pids: svc.pids },
    };
    if (svcNoLog !== null) {
      targets['svc-nolog'] = { target: { url: `${svcNoLog.url}/proxy/${BENCH_SLUG}`, method: 'POST', headers: svcHeaders(echo.url, 'encrypt'), body }, pids: svcNoLog.pids };
      // Its own tokens: the second service has a store and keys of its own.
      const noLogTokens = await svcTokenRecord(svcNoLog.url);
      targets['svc-decrypt-nolog'] = { target: { url: `${svcNoLog.url}/proxy/${BENCH_SLUG}`, method: 'POST', headers: svcHeaders(echo.url, 'decrypt'), body: noLogTokens }, pids: svcNoLog.pids };
    }
    if (nginx !== null) targets.nginx = { target: { url: `${nginx.url}/`, method: 'POST', headers: plainHeaders, body }, pids: nginx.pids };
    const order = ORDER.filter((id) => targets[id] !== undefined);
    for (const id of order) await check(id, targets[id]!.target);

    const { connections, seconds } = options;
    log(`warm-up: ${options.warmupSeconds} s per case, ${connections} connections`);
    for (const id of order) await cannon(targets[id]!.target, { connections, seconds: options.warmupSeconds });

    const rounds: Round[] = [];
    for (let round = 1; round <= options.rounds; round++) {
      const max: Partial<Record<CaseId, Measured>> = {};
      for (const id of order) {
        const { target, pids } = targets[id]!;
        await cannon(target, { connections, seconds: 1 });
        max[id] = await measured(pids, echo.pids, () => cannon(target, { connections, seconds }));
        const m = max[id]!;
        log(`round ${round}/${options.rounds} max   ${id.padEnd(13)} ${String(m.rps).padStart(6)} rps  p50 ${m.latencyMs.p50} ms  p99 ${m.latencyMs.p99} ms  ${m.requestsPerServerCpuSecond} req/CPU-s  RSS ${m.rssMiB} MiB`);
      }
      let tail: Tail | null = null;
      if (options.tail) {
        const rate = options.tailRate;
        const run = { connections, seconds: options.tailSeconds, rate };
        const direct = await measured(echo.pids, echo.pids, () => paced(targets.direct!.target, run));
        log(`round ${round}/${options.rounds} tail  direct        @${rate}/s paced ${options.tailSeconds} s  p50 ${direct.latencyMs.p50} ms  p99 ${direct.latencyMs.p99} ms  max ${direct.latencyMs.max} ms`);
        const adminUrl = svc.adminUrl!;
        const svcRun = await measured(svc.pids, echo.pids, () => paced(targets['svc-proxy']!.target, { ...run, ready: async () => void (await scrapeLoopDelay(adminUrl)) }));
        const loopDelayReadingMs = await scrapeLoopDelay(adminUrl);
        const loopDelayMs = lateness(loopDelayReadingMs, idleLoopDelayMs);
        tail = {
          rate,
          direct,
          svc: svcRun,
          addedP50Ms: round3(svcRun.latencyMs.p50 - direct.latencyMs.p50),
          addedP99Ms: round3(svcRun.latencyMs.p99 - direct.latencyMs.p99),
          loopDelayMs,
          loopDelayReadingMs,
        };
        log(`round ${round}/${options.rounds} tail  svc-proxy     @${rate}/s paced ${options.tailSeconds} s  p50 ${svcRun.latencyMs.p50} ms  p99 ${svcRun.latencyMs.p99} ms  max ${svcRun.latencyMs.max} ms; event-loop delay p99 ${loopDelayMs.p99} ms, max ${loopDelayMs.max} ms`);
      }
      const ratio = (x: Measured | undefined, y: Measured | undefined): Ratio | null =>
        x === undefined || y === undefined ? null : { rps: round3(x.rps / y.rps), cpu: round3(x.requestsPerServerCpuSecond / y.requestsPerServerCpuSecond) };
      const d = max['svc-proxy'];
      rounds.push({
        round,
        max,
        ratios: {
          encryptVsNaive: ratio(d, max.naive)!,
          encryptVsHttpProxy3: ratio(d, max['http-proxy-3'])!,
          encryptVsUndici: ratio(d, max.undici)!,
          encryptVsNginx: ratio(d, max.nginx),
          decryptVsNaive: ratio(max['svc-decrypt'], max['naive-decrypt'])!,
          encryptNoLogsVsNaive: ratio(max['svc-nolog'], max.naive),
          decryptNoLogsVsNaive: ratio(max['svc-decrypt-nolog'], max['naive-decrypt']),
        },
        tail,
      });
    }
    machine.loadAverageAtEnd = loadAverage();
    const summary = summarize(rounds, order, idleRssMiB, options);
    console.log(`\n${formatTable(summary, options)}`);

    const dir = new URL('../results/', import.meta.url);
    mkdirSync(dir, { recursive: true });
    // Smoke runs and flag experiments never replace the real results.
    const name = options.quick ? 'http-proxy-quick.json' : options.svcNodeArgs.length > 0 || options.referenceNodeArgs.length > 0 || options.svcYaml !== '' ? 'http-proxy-experiment.json' : 'http-proxy.json';
    const path = new URL(name, dir);
    const file = {
      command: `node bench/http/proxy.ts ${process.argv.slice(2).join(' ')}`.trim(),
      updated: machine.date,
      machine,
      options,
      setup: {
        bodyBytes: body.length,
        decryptBodyBytes: { svc: svcTokens.length, naive: naiveSealed.length },
        fields: FIELDS,
        serviceNodeFlags: [...SERVICE_NODE_FLAGS, ...options.svcNodeArgs],
        referenceNodeFlags: options.referenceNodeArgs,
        serviceConfig: 'file store in a temp dir (logs written by the default logs.writer), logging.level warn, admin listener on a loopback port for /metrics, defaults otherwise',
        httpProxy3: 'createProxyServer({ target, agent: http.Agent({ keepAlive: true, maxSockets: 64 }) })',
        undici: 'servers.ts undici-pass: node:http server, Pool(echo, { connections: 64 }).dispatch with the request stream as body, hop-by-hop headers dropped both ways, status, headers and chunks written to the client',
        naive: 'servers.ts naive-encrypt: whole body, JSON.parse, AES-256-GCM (random 96-bit nonce, no AAD) on the 5 fields, JSON.stringify, undici request (64 connections)',
        naiveDecrypt: 'servers.ts naive-decrypt: the same, opening the 5 fields the bench sealed beforehand with the key it passed in BENCH_NAIVE_KEY',
        svcDecrypt: 'POST /proxy/bench with x-svc-mode: decrypt and the same 5 fields; the body is the record as the service\'s own encrypt endpoint returned it before timing',
        svcNoLog: 'D-nolog and D-decrypt-nolog: a second service, the same but with logs: { enabled: false } (no api or usage entries); D-decrypt-nolog opens tokens from its own encrypt endpoint',
        nginx: nginx === null ? nginxNote : `worker_processes ${options.nginxWorkers}; upstream keepalive 64; proxy_http_version 1.1; proxy_set_header Connection ""`,
        loadGenerator: `autocannon ${connections} connections in the parent process; latencies are exact per-response times`,
        tail: options.tail
          ? `paced generator (load.ts) at ${options.tailRate} req/s for ${options.tailSeconds} s over a ${connections}-connection undici Pool, A then D each round; svc_event_loop_delay_seconds scraped once after the pool's connections opened (starting a new window) and once after the run; lateness = the reading, less the monitor's ${LOOP_MONITOR_INTERVAL_MS} ms interval only when an idle 2 s window after start shows the reading includes it (builds before the gauge was corrected; this one read p50 ${idleLoopDelayMs.p50} ms idle), clamped at 0`
          : 'not run (--no-tail)',
        footprint: 'VmRSS/VmHWM from /proc/<pid>/status of the process under test after its run; idle: every server 2 s after the service listened (helpers started before it), before any request',
      },
      targets: TARGETS,
      idleLoopDelayReadingMs: idleLoopDelayMs,
      summary,
      rounds,
    };
    writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`);
    log(`\nwrote ${path.pathname}`);
  } finally {
    await stopAll();
  }
}

interface RatioSummary {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly samples: number[];
  readonly cpuMedian: number;
  readonly cpuMin: number;
  readonly cpuMax: number;
  readonly cpuSamples: number[];
}

interface Verdict {
  readonly target: string;
  /** The measured value as shown (median of per-round values, range). */
  readonly value: string;
  readonly verdict: string;
}

export interface Summary {
  readonly cases: Array<{
    id: CaseId;
    label: string;
    rps: number;
    p50: number;
    p99: number;
    rpsSamples: number[];
    requestsPerServerCpuSecond: number;
    generatorCpuShare: number;
    /** Median over rounds of the process's RSS at the end of its full-load run, and its largest peak. */
    rssMiB: number;
    hwmMiB: number;
  }>;
  /** RSS before any traffic, 2 s after each server listened (svc: the service). */
  readonly idleRssMiB: Record<string, number>;
  readonly ratios: {
    readonly encryptVsNaive: RatioSummary;
    readonly encryptVsHttpProxy3: RatioSummary;
    readonly encryptVsUndici: RatioSummary;
    readonly encryptVsNginx: RatioSummary | null;
    readonly decryptVsNaive: RatioSummary;
    readonly encryptNoLogsVsNaive: RatioSummary | null;
    readonly decryptNoLogsVsNaive: RatioSummary | null;
  };
  readonly tail: {
    readonly rate: number;
    readonly seconds: number;
    readonly directP50: number;
    readonly directP99: number;
    readonly svcP50: number;
    readonly svcP99: number;
    readonly addedP50Ms: { median: number; samples: number[] };
    readonly addedP99Ms: { median: number; samples: number[] };
    /** Medians over rounds, except `max`: the largest of any round. */
    readonly loopDelayMs: LoopDelay & { p99Samples: number[]; maxSamples: number[] };
  } | null;
  /** The five targets, each check PASS or MISS (a target passes when all its checks do). */
  readonly verdicts: Verdict[];
}

function atLeast(value: number, target: number): string {
  return value >= target ? 'PASS' : `MISS by ${Math.round((1 - value / target) * 100)}%`;
}

function atMost(value: number, target: number): string {
  return value <= target ? 'PASS' : `MISS by ${round3(value - target)} ms`;
}

function summarize(rounds: readonly Round[], order: readonly CaseId[], idleRssMiB: Record<string, number>, options: Options): Summary {
  const cases = order.map((id) => {
    const runs = rounds.map((r) => r.max[id]!);
    return {
      id,
      label: LABELS[id],
      rps: Math.round(median(runs.map((r) => r.rps))),
      p50: round3(median(runs.map((r) => r.latencyMs.p50))),
      p99: round3(median(runs.map((r) => r.latencyMs.p99))),
      rpsSamples: runs.map((r) => r.rps),
      requestsPerServerCpuSecond: Math.round(median(runs.map((r) => r.requestsPerServerCpuSecond))),
      generatorCpuShare: round3(median(runs.map((r) => r.generatorCpuSeconds / r.seconds))),
      rssMiB: round3(median(runs.map((r) => r.rssMiB))),
      hwmMiB: round3(Math.max(...runs.map((r) => r.hwmMiB))),
    };
  });
  const ratio = (pick: (r: Round) => Ratio | null): RatioSummary | null => {
    const picked = rounds.map(pick).filter((v) => v !== null);
    if (picked.length === 0) return null;
    const samples = picked.map((p) => p.rps);
    const cpuSamples = picked.map((p) => p.cpu);
    return {
      median: round3(median(samples)),
      min: Math.min(...samples),
      max: Math.max(...samples),
      samples,
      cpuMedian: round3(median(cpuSamples)),
      cpuMin: Math.min(...cpuSamples),
      cpuMax: Math.max(...cpuSamples),
      cpuSamples,
    };
  };
  const ratios = {
    encryptVsNaive: ratio((r) => r.ratios.encryptVsNaive)!,
    encryptVsHttpProxy3: ratio((r) => r.ratios.encryptVsHttpProxy3)!,
    encryptVsUndici: ratio((r) => r.ratios.encryptVsUndici)!,
    encryptVsNginx: ratio((r) => r.ratios.encryptVsNginx),
    decryptVsNaive: ratio((r) => r.ratios.decryptVsNaive)!,
    encryptNoLogsVsNaive: ratio((r) => r.ratios.encryptNoLogsVsNaive),
    decryptNoLogsVsNaive: ratio((r) => r.ratios.decryptNoLogsVsNaive),
  };
  const tails = rounds.map((r) => r.tail).filter((t) => t !== null);
  const tail: Summary['tail'] =
    tails.length === 0
      ? null
      : {
          rate: options.tailRate,
          seconds: options.tailSeconds,
          directP50: round3(median(tails.map((t) => t.direct.latencyMs.p50))),
          directP99: round3(median(tails.map((t) => t.direct.latencyMs.p99))),
          svcP50: round3(median(tails.map((t) => t.svc.latencyMs.p50))),
          svcP99: round3(median(tails.map((t) => t.svc.latencyMs.p99))),
          addedP50Ms: { median: round3(median(tails.map((t) => t.addedP50Ms))), samples: tails.map((t) => t.addedP50Ms) },
          addedP99Ms: { median: round3(median(tails.map((t) => t.addedP99Ms))), samples: tails.map((t) => t.addedP99Ms) },
          loopDelayMs: {
            p50: round3(median(tails.map((t) => t.loopDelayMs.p50))),
            p90: round3(median(tails.map((t) => t.loopDelayMs.p90))),
            p99: round3(median(tails.map((t) => t.loopDelayMs.p99))),
            p999: round3(median(tails.map((t) => t.loopDelayMs.p999))),
            max: Math.max(...tails.map((t) => t.loopDelayMs.max)),
            p99Samples: tails.map((t) => t.loopDelayMs.p99),
            maxSamples: tails.map((t) => t.loopDelayMs.max),
          },
        };
  return { cases, idleRssMiB, ratios, tail, verdicts: verdicts(ratios, tail) };
}

const times = (x: number) => `${x.toFixed(2)}×`;
const range = (r: RatioSummary, cpu = false) =>
  r.samples.length === 1 ? '' : cpu ? ` (rounds ${times(r.cpuMin)}–${times(r.cpuMax)})` : ` (rounds ${times(r.min)}–${times(r.max)})`;
const msRange = (samples: readonly number[]) => (samples.length === 1 ? '' : ` (rounds ${Math.min(...samples).toFixed(2)}–${Math.max(...samples).toFixed(2)})`);

function verdicts(ratios: Summary['ratios'], tail: Summary['tail']): Verdict[] {
  const out: Verdict[] = [];
  const e = ratios.encryptVsNaive;
  out.push({ target: `1. D ≥ ${TARGETS.encryptVsNaive.toFixed(1)}× E, req/s`, value: `${times(e.median)}${range(e)}`, verdict: atLeast(e.median, TARGETS.encryptVsNaive) });
  out.push({ target: `1. D ≥ ${TARGETS.encryptVsNaive.toFixed(1)}× E, req/s per server CPU-s`, value: `${times(e.cpuMedian)}${range(e, true)}`, verdict: atLeast(e.cpuMedian, TARGETS.encryptVsNaive) });
  const b = ratios.encryptVsHttpProxy3;
  out.push({ target: `2. D ≥ ${TARGETS.cpuEncryptVsHttpProxy3}× B, req/s per server CPU-s`, value: `${times(b.cpuMedian)}${range(b, true)}`, verdict: atLeast(b.cpuMedian, TARGETS.cpuEncryptVsHttpProxy3) });
  if (tail === null) {
    for (const target of [`3. D − A p50 ≤ ${TARGETS.addedP50Ms} ms (paced)`, `3. D − A p99 ≤ ${TARGETS.addedP99Ms} ms (paced)`, `4. svc event-loop delay p99 ≤ ${TARGETS.loopDelayP99Ms} ms`, `4. svc event-loop delay max ≤ ${TARGETS.loopDelayMaxMs} ms`]) {
      out.push({ target, value: '—', verdict: 'NOT RUN (--no-tail)' });
    }
  } else {
    const at = `at ${tail.rate}/s × ${tail.seconds} s`;
    out.push({ target: `3. D − A p50 ≤ ${TARGETS.addedP50Ms} ms ${at}`, value: `${tail.addedP50Ms.median.toFixed(2)} ms${msRange(tail.addedP50Ms.samples)}`, verdict: atMost(tail.addedP50Ms.median, TARGETS.addedP50Ms) });
    out.push({ target: `3. D − A p99 ≤ ${TARGETS.addedP99Ms} ms ${at}`, value: `${tail.addedP99Ms.median.toFixed(2)} ms${msRange(tail.addedP99Ms.samples)}`, verdict: atMost(tail.addedP99Ms.median, TARGETS.addedP99Ms) });
    const loop = tail.loopDelayMs;
    out.push({ target: `4. svc event-loop delay p99 ≤ ${TARGETS.loopDelayP99Ms} ms (D's paced run)`, value: `${loop.p99.toFixed(2)} ms${msRange(loop.p99Samples)}`, verdict: atMost(loop.p99, TARGETS.loopDelayP99Ms) });
    out.push({ target: `4. svc event-loop delay max ≤ ${TARGETS.loopDelayMaxMs} ms (worst round)`, value: `${loop.max.toFixed(2)} ms${msRange(loop.maxSamples)}`, verdict: atMost(loop.max, TARGETS.loopDelayMaxMs) });
  }
  const g = ratios.decryptVsNaive;
  out.push({ target: `5. D-decrypt ≥ ${TARGETS.decryptVsNaive.toFixed(1)}× G, req/s`, value: `${times(g.median)}${range(g)}`, verdict: atLeast(g.median, TARGETS.decryptVsNaive) });
  return out;
}

function formatTable(s: Summary, options: Options): string {
  const rows: string[][] = [['case', 'req/s', 'p50 ms', 'p99 ms', 'req/s per server CPU-s', 'RSS MiB end', 'peak', 'idle', 'rounds (req/s)']];
  const idleKey = (id: CaseId) => (id === 'svc-proxy' || id === 'svc-decrypt' ? 'svc' : id === 'svc-decrypt-nolog' ? 'svc-nolog' : id);
  for (const c of s.cases) {
    const idle = s.idleRssMiB[idleKey(c.id)];
    rows.push([c.label, String(c.rps), c.p50.toFixed(2), c.p99.toFixed(2), String(c.requestsPerServerCpuSecond), c.rssMiB.toFixed(1), c.hwmMiB.toFixed(1), idle === undefined ? '—' : idle.toFixed(1), c.rpsSamples.join(' ')]);
  }
  const last = rows[0]!.length - 1;
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const lines = [`== /proxy vs proxies and references: ${options.rounds} round(s) × ${options.seconds} s, ${options.connections} connections, medians`];
  for (const r of rows) lines.push(r.map((cell, i) => (i === 0 || i === last ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '));
  lines.push(`RSS: the process under test (A: the echo; C: master + workers) after its full-load run; peak is VmHWM; idle is before any request, 2 s after svc listened (svc idle: ${s.idleRssMiB['svc']} MiB).`);

  const r = s.ratios;
  const record = (name: string, x: RatioSummary) => `${name}: ${times(x.median)} req/s${range(x)}, ${times(x.cpuMedian)} per server CPU-s${range(x, true)}`;
  lines.push('');
  lines.push('ratios, medians of per-round values (no target):');
  lines.push(`  ${record('D ÷ E', r.encryptVsNaive)}`);
  lines.push(`  ${record('D ÷ B', r.encryptVsHttpProxy3)}`);
  lines.push(`  ${record('D ÷ F', r.encryptVsUndici)}`);
  if (r.encryptVsNginx !== null) lines.push(`  ${record('D ÷ C', r.encryptVsNginx)}`);
  lines.push(`  ${record('D-decrypt ÷ G', r.decryptVsNaive)}`);
  if (r.encryptNoLogsVsNaive !== null) lines.push(`  ${record('D-nolog ÷ E', r.encryptNoLogsVsNaive)}`);
  if (r.decryptNoLogsVsNaive !== null) lines.push(`  ${record('D-decrypt-nolog ÷ G', r.decryptNoLogsVsNaive)}`);

  if (s.tail !== null) {
    const t = s.tail;
    const l = t.loopDelayMs;
    lines.push('');
    lines.push(`tail: paced ${t.rate} req/s × ${t.seconds} s, medians: A p50 ${t.directP50.toFixed(2)} ms p99 ${t.directP99.toFixed(2)} ms; D p50 ${t.svcP50.toFixed(2)} ms p99 ${t.svcP99.toFixed(2)} ms`);
    lines.push(`  svc event-loop lateness over D's run (ms; svc_event_loop_delay_seconds over that run): p50 ${l.p50.toFixed(2)}  p90 ${l.p90.toFixed(2)}  p99 ${l.p99.toFixed(2)}  p99.9 ${l.p999.toFixed(2)}  max ${l.max.toFixed(2)}`);
  }

  lines.push('');
  const vw = Math.max(...s.verdicts.map((v) => v.target.length));
  const valw = Math.max(...s.verdicts.map((v) => v.value.length));
  lines.push(`${'target'.padEnd(vw)}  ${'measured'.padEnd(valw)}  verdict`);
  for (const v of s.verdicts) lines.push(`${v.target.padEnd(vw)}  ${v.value.padEnd(valw)}  ${v.verdict}`);
  return lines.join('\n');
}

/** D (or D-decrypt) alone under full load with `--cpu-prof`; prints where the service spends its CPU. */
async function profile(options: Options, echo: Running): Promise<void> {
  const profDir = mkdtempSync(join(tmpdir(), 'svc-bench-prof-'));
  const svc = await startService({ destinations: [echo.url], nodeArgs: [...options.svcNodeArgs, '--cpu-prof', `--cpu-prof-dir=${profDir}`], yaml: options.svcYaml });
  /** Requests the profiled process served: the check, the warm-up and the measured run. */
  let served = 1;
  try {
    const decrypt = options.profileCase === 'decrypt';
    const target: Target = {
      url: `${svc.url}/proxy/${BENCH_SLUG}`,
      method: 'POST',
      headers: svcHeaders(echo.url, options.profileCase),
      body: decrypt ? await svcTokenRecord(svc.url) : customerRecord(),
    };
    await check(decrypt ? 'svc-decrypt' : 'svc-proxy', target);
    served += (await cannon(target, { connections: options.connections, seconds: options.warmupSeconds })).responses;
    const r = await cannon(target, { connections: options.connections, seconds: options.seconds * 2 });
    served += r.responses;
    log(`profiled run (${options.profileCase}): ${r.rps} rps, p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms`);
  } finally {
    await svc.stop();
  }
  // One file per thread: CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is the main one.
  const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'));
  const main = files.find((f) => f.split('.')[4] === '0');
  if (main === undefined) throw new Error(`no main-thread .cpuprofile was written to ${profDir}`);
  const summary = summarizeProfile(join(profDir, main));
  console.log(formatProfile(summary, 30));
  // Start-up is in the profile too: a few hundred ms against tens of seconds of load.
  console.log(`\nmain thread busy per request served: ${(((summary.totalMs - summary.idleMs) * 1000) / served).toFixed(1)} µs (${served} requests)`);
  for (const other of files.filter((f) => f !== main)) {
    const s = summarizeProfile(join(profDir, other));
    console.log(`\nworker thread ${other.split('.')[4]}: ${s.totalMs - s.idleMs} ms busy of ${s.totalMs} ms; top: ${s.self.slice(0, 3).map((e) => `${e.name} ${e.ms} ms`).join(', ')}`);
  }
  log(`profiles kept in ${profDir}`);
}

await main();
