/**
 * The service's memory footprint and start time, as `npm start` runs it:
 *
 *   node bench/footprint.ts [--starts N] [--requests N] [--loads N] [--connections C] [--quick] [--bundle] [--svc-env K=V,...] [--svc-node-args="--flag ..."] [--label name]
 *   node bench/footprint.ts --modules [--quick]
 *   node bench/footprint.ts --against <checkout> [--rounds 12] [--label name]
 *
 * Service mode. For each log writer (`logs.writer: thread` and `inline`) the service runs
 * on a temporary copy of config/svc.yaml (the default configuration: SQLite and the master
 * key file under ./data of a temporary directory, both listeners, `logging.level: info`),
 * with only the ports (0), the payments destination (the echo server) and `logs.writer`
 * changed. What runs is `src/main.ts`, or with `--bundle` the experiment of
 * bench/lib/bundle.ts (the program bundled, into a temp dir first). It is started with the node flags and
 * environment of `npm start` (bench/http/processes.ts: --max-semi-space-size=4
 * --heap-growing-percent=50 --no-allocation-site-pretenuring, MALLOC_ARENA_MAX=1,
 * MALLOC_MMAP_THRESHOLD_=32768, the compile cache, warm). One start
 * creates the store and is not measured; then `--starts` starts each give
 * - the time from spawn to the first 200 from GET /readyz (polled every 5 ms once the
 *   service logs its port),
 * - VmRSS and VmHWM 2 s after that, idle, with its anonymous and file-backed parts and,
 *   of the anonymous part, malloc's main heap;
 * - VmRSS at rest: once the service has released memory after its start
 *   (`server.idle_memory_release`, 5 s idle by default; /metrics is read every 500 ms
 *   until `svc_idle_memory_releases_total` counts it);
 * and, on the last start, the CPU the service uses at rest over IDLE_CPU_SECONDS (all its
 * threads), from IDLE_CPU_SETTLE_SECONDS after that reading (V8 runs a collection of its
 * own some seconds after the release), and how often its main thread wakes (voluntary
 * context switches);
 * and the last `--loads` of them (1 by default) each serve `--requests` POST
 * /proxy/payments (a 1 KB record, five fields encrypted, forwarded to the echo server;
 * autocannon, `--connections`), after which the same figures are read again 2 s later,
 * and once more at rest, after the release that follows the load: medians over the loads,
 * and each load's figures. The figures after load spread by several MiB between identical
 * runs, so a verdict wants more than one (`--loads 5`). Each load adds its log rows to the
 * one store of the writer's starts. A bare Node http server started the same way is the
 * floor. Writes bench/results/footprint.json (footprint-quick.json with --quick);
 * `--svc-env` (environment over npm start's) or `--svc-node-args` (flags after npm start's)
 * make it an experiment, written to footprint-experiment.json; `--label x` writes
 * footprint-x.json instead.
 *
 * Side-by-side mode (`--against`). Starts of this checkout's `src/main.ts` and another's,
 * alternated (the order reversed every other round), each on its own copy of
 * config/svc.yaml (inline writer) and its own store, created by an unmeasured start that
 * also fills the compile cache: per start the time to the first 200 from /readyz and VmRSS
 * 2 s after it; medians, and the median of the per-round ratios. The service is stopped
 * with SIGTERM, as a platform stops it. Writes bench/results/footprint-starts[-<label>].json.
 *
 * Module mode. What importing each dependency and each of our top-level modules costs:
 * VmRSS of `node -e "await import(X)"` (same flags, warm compile cache) after the import
 * and two full collections 500 ms apart, less that of a Node that imports nothing ("over bare"), and what X adds on top of
 * the modules the data plane cannot start without (CORE, "over core": what loading X
 * lazily could save at most; modules share much, so "over bare" overstates it); the lowest
 * of three processes (identical ones land about 6 MiB apart now and then). Writes
 * bench/results/footprint-modules.json (footprint-modules-quick.json with --quick).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { median } from './lib/measure.ts';
import { envOption, loadAverage, machineInfo, positiveOption, resultLabel } from './lib/report.ts';
import { customerRecord, FIELDS } from './http/body.ts';
import { cpuSeconds, memory, SERVICE_ENV, SERVICE_NODE_FLAGS, serviceMain, startHelper } from './http/processes.ts';

const MIB = 1024 * 1024;
const ROOT = fileURLToPath(new URL('../', import.meta.url));
/** What runs: `src/main.ts`, as `npm start` runs it, or with `--bundle` a bundle of it (set in main). */
let MAIN = '';
const DEFAULT_CONFIG = join(ROOT, 'config/svc.yaml');
/** Where `npm start` keeps its compile cache (package.json). */
const COMPILE_CACHE = join(ROOT, 'node_modules/.cache/node');
/** The fallback API key of config/svc.yaml (SVC_API_KEY unset). */
const DEV_KEY = 'svc_devLocalKeyDoNotUseInProduction000000000';
const WRITERS = ['thread', 'inline'] as const;
type Writer = (typeof WRITERS)[number];

const log = (m: string) => process.stderr.write(`${m}\n`);

interface RssParts {
  /** RssAnon: the process's own memory. */
  readonly anonMiB: number;
  /** RssFile: mapped files (the node binary, shared with every process that maps it). */
  readonly fileMiB: number;
  /** Of the anonymous memory, the resident part of malloc's main heap (`[heap]` in smaps; with MALLOC_ARENA_MAX=1, every thread's). */
  readonly mallocHeapMiB: number;
}

function rssParts(pid: number): RssParts {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0);
  const smaps = readFileSync(`/proc/${pid}/smaps`, 'utf8');
  const heap = smaps.indexOf(' [heap]\n');
  const heapKib = heap === -1 ? 0 : Number(/\nRss:\s+(\d+) kB/.exec(smaps.slice(heap))?.[1] ?? 0);
  const round = (k: number) => Math.round(k / 102.4) / 10;
  return { anonMiB: round(kib('RssAnon')), fileMiB: round(kib('RssFile')), mallocHeapMiB: round(heapKib) };
}
const mib = (bytes: number) => Math.round((bytes / MIB) * 10) / 10;

/** Experiments: environment over SERVICE_ENV and node flags after SERVICE_NODE_FLAGS. */
let extraEnv: Record<string, string> = {};
let extraNodeArgs: string[] = [];

function serviceEnv(): NodeJS.ProcessEnv {
  return { PATH: process.env['PATH'] ?? '', NODE_COMPILE_CACHE: COMPILE_CACHE, ...SERVICE_ENV, ...extraEnv };
}

/** config/svc.yaml with free ports, the echo server as the payments destination, and `writer`. */
function benchConfig(echo: string, writer: Writer): string {
  let text = readFileSync(DEFAULT_CONFIG, 'utf8');
  const replace = (from: string, to: string) => {
    if (!text.includes(from)) throw new Error(`config/svc.yaml no longer contains ${JSON.stringify(from)}: update bench/footprint.ts`);
    text = text.replace(from, to);
  };
  replace('listen: 127.0.0.1:8080', 'listen: 127.0.0.1:0');
  replace('admin_listen: 127.0.0.1:9090', 'admin_listen: 127.0.0.1:0');
  replace('destinations: ["http://127.0.0.1:9999/"]', `destinations: [${JSON.stringify(`${echo}/`)}]`);
  if (/^logs:/m.test(text)) throw new Error('config/svc.yaml now has a logs: section: update bench/footprint.ts');
  return `${text}\nlogs:\n  writer: ${writer}\n`;
}

interface Started {
  readonly child: ChildProcess;
  readonly url: string;
  readonly adminUrl: string;
  readonly readyMs: number;
}

function exited(child: ChildProcess): Promise<unknown> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : once(child, 'exit');
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited(child);
  clearTimeout(timer);
}

/** Spawns `node <flags> src/main.ts serve --config <config>` (or the bundle) in `dir`; resolves at the first 200 from /readyz. */
async function startOnce(dir: string, config: string, main: string = MAIN): Promise<Started> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, ...extraNodeArgs, main, 'serve', '--config', config], { cwd: dir, env: serviceEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  let port: number | null = null;
  let admin: number | null = null;
  child.stdout!.on('data', (d: Buffer) => {
    output += d.toString();
    port ??= Number(/"listen":"[^"]*:(\d+)"/.exec(output)?.[1] ?? 0) || null;
    admin ??= Number(/"admin":"[^"]*:(\d+)"/.exec(output)?.[1] ?? 0) || null;
  });
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const deadline = t0 + 30_000;
  while (performance.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`the service exited with ${child.exitCode}:\n${output}`);
    if (port !== null) {
      const ok = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        async (r) => (await r.arrayBuffer(), r.status === 200),
        () => false,
      );
      if (ok) return { child, url: `http://127.0.0.1:${port}`, adminUrl: `http://127.0.0.1:${admin}`, readyMs: Math.round((performance.now() - t0) * 10) / 10 };
    }
    await sleep(5);
  }
  child.kill('SIGKILL');
  throw new Error(`the service was not ready within 30 s:\n${output}`);
}

// autocannon ships no types; this is the part of its API used here.
type Autocannon = (opts: Record<string, unknown>) => { on(event: 'done', cb: (r: { non2xx: number; errors: number; timeouts: number; '2xx': number }) => void): void };
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

async function proxyLoad(url: string, echo: string, requests: number, connections: number): Promise<number> {
  const done = await new Promise<{ non2xx: number; errors: number; timeouts: number; '2xx': number }>((resolve) => {
    autocannon({
      url: `${url}/proxy/payments`,
      method: 'POST',
      connections,
      amount: requests,
      headers: { 'content-type': 'application/json', 'x-svc-authorization': DEV_KEY, 'x-svc-destination': `${echo}/`, 'x-svc-fields': FIELDS.join(',') },
      body: customerRecord(),
    }).on('done', resolve);
  });
  if (done.non2xx + done.errors + done.timeouts > 0) throw new Error(`load: ${done.non2xx} non-2xx, ${done.errors} errors, ${done.timeouts} timeouts`);
  return done['2xx'];
}

/** The service's count of idle memory releases (`server.idle_memory_release`), from /metrics. */
async function releases(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return Number(/^svc_idle_memory_releases_total (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
}

/**
 * Waits until the service has released memory `count` times, scraping every 500 ms (a
 * scrape's few milliseconds leave the loop idle); the milliseconds waited, or null if it
 * did not within 30 s.
 */
async function settled(adminUrl: string, count: number): Promise<number | null> {
  const t0 = performance.now();
  while (performance.now() - t0 < 30_000) {
    if ((await releases(adminUrl)) >= count) return Math.round(performance.now() - t0);
    await sleep(500);
  }
  return null;
}

interface AtRest {
  /** How long after the first reading the release came (ms); null if none came. */
  readonly waitedMs: number | null;
  readonly rssMiB: number;
}

interface WriterResult {
  readonly writer: Writer;
  readonly readyMs: { median: number; min: number; max: number; all: number[] };
  /** 2 s after ready. */
  readonly idle: { rssMiB: number; hwmMiB: number; rssAllMiB: number[]; last: RssParts };
  /** Once the service has released memory after its start (`server.idle_memory_release`). */
  readonly atRest: { rssMiB: number; rssAllMiB: number[]; waitedMs: Array<number | null>; last: RssParts };
  /** At rest on the last start, before any load: CPU (share of one core) and the main thread's wake-ups per second. */
  readonly idleCpu: { seconds: number; coreShare: number; wakeupsPerSecond: number };
  /**
   * 2 s after the last answer, and once released after the load: medians over the loads
   * (the parts are the last load's), and each load's figures in order.
   */
  readonly afterLoad: { requests: number; loads: number; rssMiB: number; hwmMiB: number; rssAllMiB: number[]; atRest: AtRest & RssParts & { rssAllMiB: number[] } } & RssParts;
}

async function measureWriter(writer: Writer, echo: string, starts: number, requests: number, connections: number, loads: number): Promise<WriterResult> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-footprint-'));
  try {
    const config = join(dir, 'svc.yaml');
    writeFileSync(config, benchConfig(echo, writer));
    // The first start creates ./data (store, master key) and fills the compile cache.
    await stop((await startOnce(dir, config)).child);
    const ready: number[] = [];
    const idleRss: number[] = [];
    const idleHwm: number[] = [];
    const restRss: number[] = [];
    const restWaited: Array<number | null> = [];
    const none: RssParts = { anonMiB: 0, fileMiB: 0, mallocHeapMiB: 0 };
    const loadRss: number[] = [];
    const loadHwm: number[] = [];
    const loadRestRss: number[] = [];
    let loadParts: RssParts = none;
    let loadRest: AtRest & RssParts = { waitedMs: null, rssMiB: 0, ...none };
    let served = 0;
    let idleCpu: WriterResult['idleCpu'] = { seconds: 0, coreShare: 0, wakeupsPerSecond: 0 };
    let idleParts: RssParts = none;
    let restParts: RssParts = none;
    for (let i = 0; i < starts; i++) {
      const started = await startOnce(dir, config);
      try {
        ready.push(started.readyMs);
        await sleep(2000);
        const idle = memory(started.child.pid!);
        idleParts = rssParts(started.child.pid!);
        idleRss.push(mib(idle.rss));
        idleHwm.push(mib(idle.hwm));
        log(`  ${writer} start ${i + 1}/${starts}: ready ${started.readyMs} ms, idle RSS ${mib(idle.rss)} MiB (HWM ${mib(idle.hwm)}; anonymous ${idleParts.anonMiB}, of it malloc heap ${idleParts.mallocHeapMiB}; files ${idleParts.fileMiB})`);
        const waited = await settled(started.adminUrl, 1);
        restWaited.push(waited);
        restRss.push(mib(memory(started.child.pid!).rss));
        restParts = rssParts(started.child.pid!);
        log(`  ${writer} at rest (${waited === null ? 'no release' : `released ${waited} ms later`}): RSS ${restRss.at(-1)} MiB (anonymous ${restParts.anonMiB}, of it malloc heap ${restParts.mallocHeapMiB}; files ${restParts.fileMiB})`);
        if (i === starts - 1) {
          idleCpu = await idleCpuOf(started.child.pid!);
          log(`  ${writer} at rest for ${idleCpu.seconds} s: CPU ${(idleCpu.coreShare * 100).toFixed(2)}% of a core, main thread woken ${idleCpu.wakeupsPerSecond} times a second`);
        }
        if (i >= starts - loads && requests > 0) {
          served = await proxyLoad(started.url, echo, requests, connections);
          await sleep(2000);
          const after = memory(started.child.pid!);
          loadParts = rssParts(started.child.pid!);
          loadRss.push(mib(after.rss));
          loadHwm.push(mib(after.hwm));
          const loadWaited = await settled(started.adminUrl, 2);
          loadRest = { waitedMs: loadWaited, rssMiB: mib(memory(started.child.pid!).rss), ...rssParts(started.child.pid!) };
          loadRestRss.push(loadRest.rssMiB);
          log(`  ${writer} after ${served} requests: RSS ${loadRss.at(-1)} MiB (HWM ${loadHwm.at(-1)}; anonymous ${loadParts.anonMiB}, of it malloc heap ${loadParts.mallocHeapMiB}; files ${loadParts.fileMiB})`);
          log(`  ${writer} at rest after the load (${loadWaited === null ? 'no release' : `released ${loadWaited} ms later`}): RSS ${loadRest.rssMiB} MiB (anonymous ${loadRest.anonMiB}, of it malloc heap ${loadRest.mallocHeapMiB}; files ${loadRest.fileMiB})`);
        }
      } finally {
        await stop(started.child);
      }
    }
    return {
      writer,
      readyMs: { median: Math.round(median(ready) * 10) / 10, min: Math.min(...ready), max: Math.max(...ready), all: ready },
      idle: { rssMiB: Math.round(median(idleRss) * 10) / 10, hwmMiB: Math.round(median(idleHwm) * 10) / 10, rssAllMiB: idleRss, last: idleParts },
      atRest: { rssMiB: Math.round(median(restRss) * 10) / 10, rssAllMiB: restRss, waitedMs: restWaited, last: restParts },
      idleCpu,
      afterLoad: {
        requests: served,
        loads: loadRss.length,
        rssMiB: medianOrZero(loadRss),
        hwmMiB: medianOrZero(loadHwm),
        rssAllMiB: loadRss,
        ...loadParts,
        atRest: { ...loadRest, rssMiB: medianOrZero(loadRestRss), rssAllMiB: loadRestRss },
      },
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Seconds over which the CPU of a service at rest is read. */
const IDLE_CPU_SECONDS = 20;
/** Seconds between the reading at rest and the CPU reading: V8's memory reducer collects about 8 s after a full collection. */
const IDLE_CPU_SETTLE_SECONDS = 12;

/** The CPU a service at rest uses (all threads; clock ticks, so a coarse figure) and how often its main thread wakes. */
async function idleCpuOf(pid: number): Promise<{ seconds: number; coreShare: number; wakeupsPerSecond: number }> {
  await sleep(IDLE_CPU_SETTLE_SECONDS * 1000);
  const switches = () => Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  const cpu0 = cpuSeconds([pid]);
  const woken0 = switches();
  await sleep(IDLE_CPU_SECONDS * 1000);
  const coreShare = (cpuSeconds([pid]) - cpu0) / IDLE_CPU_SECONDS;
  return { seconds: IDLE_CPU_SECONDS, coreShare: Math.round(coreShare * 1e5) / 1e5, wakeupsPerSecond: Math.round((switches() - woken0) / IDLE_CPU_SECONDS) };
}

/** The median to a tenth, or 0 for no figures (no load was run). */
function medianOrZero(values: readonly number[]): number {
  return values.length === 0 ? 0 : Math.round(median(values) * 10) / 10;
}

/** A Node http server that does nothing, started with the same flags and environment: the floor. */
async function bareServer(): Promise<{ rssMiB: number }> {
  const child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, '--input-type=module', '-e', "import { createServer } from 'node:http'; createServer((q, s) => s.end()).listen(0, '127.0.0.1', () => console.log('up'));"], {
    env: serviceEnv(),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await once(child.stdout!, 'data');
  await sleep(2000);
  const rss = mib(memory(child.pid!).rss);
  await stop(child);
  return { rssMiB: rss };
}

/** The dependencies, then our modules from the leaves of the data plane up to the command line. */
const MODULES = [
  'node:http',
  'node:sqlite',
  'zod',
  'yaml',
  'undici',
  'prom-client',
  'pino',
  'jose',
  '@peculiar/x509',
  'http-proxy-3',
  'lru-cache',
  'src/config/load.ts',
  'src/store/db.ts',
  'src/telemetry/logger.ts',
  'src/telemetry/metrics.ts',
  'src/telemetry/log-writer.ts',
  'src/auth/caller.ts',
  'src/auth/passwords.ts',
  'src/auth/access-tokens.ts',
  'src/crypto/certificates.ts',
  'src/dataplane/forwarder.ts',
  'src/dataplane/encryption-routes.ts',
  'src/dataplane/relay.ts',
  'src/dataplane/egress.ts',
  'src/dataplane/egress-proxy.ts',
  'src/sync/replica.ts',
  'src/api/routes.ts',
  'src/api/route-table.ts',
  'src/api/configurations.ts',
  'src/api/openapi.ts',
  'src/app.ts',
  'src/cli/run.ts',
];

/**
 * What the data plane cannot start without: the configuration (yaml, zod), the store, the
 * process log, metrics, forwarding (undici) and the encrypt/decrypt routes. The cost of a
 * module on top of these is what loading it lazily could save at most.
 */
const CORE = ['src/config/load.ts', 'src/store/db.ts', 'src/telemetry/logger.ts', 'src/telemetry/metrics.ts', 'src/dataplane/forwarder.ts', 'src/dataplane/encryption-routes.ts'];

function importRss(specs: readonly string[]): number {
  const imports = specs.map((spec) => `await import(${JSON.stringify(spec.startsWith('src/') ? pathToFileURL(join(ROOT, spec)).href : spec)});`).join('\n');
  // Two full collections around the wait: what compiling left behind is not counted, and
  // the figure does not depend on when V8 happened to collect.
  const script = `${imports}
globalThis.gc();
await new Promise((r) => setTimeout(r, 500));
globalThis.gc();
const { readFileSync } = await import('node:fs');
console.log(/VmRSS:\\s+(\\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]);`;
  const result = spawnSync(process.execPath, [...SERVICE_NODE_FLAGS, '--expose-gc', '--input-type=module', '-e', script], { cwd: ROOT, env: serviceEnv(), encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`importing ${specs.join(', ')}: ${result.stderr}`);
  return Number(result.stdout.trim()) * 1024;
}

async function modules(quick: boolean): Promise<void> {
  const runs = quick ? 1 : 3;
  // The lowest of the runs: identical processes land about 6 MiB apart now and then
  // (bimodal, not spread), and the median of three takes the upper mode at random.
  const measure = (specs: readonly string[]) => {
    importRss(specs); // fills the compile cache
    return mib(Math.min(...Array.from({ length: runs }, () => importRss(specs))));
  };
  const round = (n: number) => Math.round(n * 10) / 10;
  const machine = machineInfo();
  const bare = measure([]);
  const core = measure(CORE);
  log(`node importing nothing: ${bare} MiB; the data-plane core (${CORE.join(', ')}): ${core} MiB`);
  log(`${'module'.padEnd(36)} ${'alone'.padStart(7)} ${'over bare'.padStart(10)} ${'over core'.padStart(10)}`);
  const rows = MODULES.map((spec) => {
    const rss = measure([spec]);
    const withCore = CORE.includes(spec) ? core : measure([...CORE, spec]);
    const row = { module: spec, rssMiB: rss, overBareMiB: round(rss - bare), overCoreMiB: round(withCore - core) };
    const signed = (n: number) => (n < 0 ? `${n}` : `+${n}`);
    log(`${spec.padEnd(36)} ${String(rss).padStart(7)} ${signed(row.overBareMiB).padStart(10)} ${signed(row.overCoreMiB).padStart(10)}`);
    return row;
  });
  machine.loadAverageAtEnd = loadAverage();
  write(quick ? 'footprint-modules-quick.json' : 'footprint-modules.json', {
    suite: 'footprint-modules',
    description: 'VmRSS of a node process that imports one module (same flags as npm start, warm compile cache) after the import and two full collections 500 ms apart, alone and on top of the data-plane core; the lowest of the runs',
    command: `node bench/footprint.ts --modules${quick ? ' --quick' : ''}`,
    runs,
    machine,
    bareNodeMiB: bare,
    core: { modules: CORE, rssMiB: core },
    modules: rows,
  });
}

function write(name: string, result: unknown): void {
  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const path = new URL(name, dir);
  writeFileSync(path, `${JSON.stringify(result, null, 2)}\n`);
  log(`wrote ${fileURLToPath(path)}`);
}

interface SideStarts {
  readonly checkout: string;
  readonly readyMs: number[];
  readonly rssMiB: number[];
}

/** `--against`: this checkout's starts and `other`'s, alternated (module comment). */
async function startsAgainst(other: string, rounds: number, label: string | undefined): Promise<void> {
  const machine = machineInfo();
  const sides: SideStarts[] = [ROOT, other].map((checkout) => ({ checkout, readyMs: [], rssMiB: [] }));
  const dirs = sides.map(() => mkdtempSync(join(tmpdir(), 'svc-footprint-starts-')));
  try {
    const configs = dirs.map((dir) => {
      const path = join(dir, 'svc.yaml');
      // No request is proxied: the destination only has to be a valid one.
      writeFileSync(path, benchConfig('http://127.0.0.1:9', 'inline'));
      return path;
    });
    const mains = sides.map((side) => serviceMain(side.checkout));
    // The store of each, and its modules in the compile cache.
    for (let i = 0; i < sides.length; i++) await stop((await startOnce(dirs[i]!, configs[i]!, mains[i])).child);
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) {
        const started = await startOnce(dirs[i]!, configs[i]!, mains[i]);
        await sleep(2000);
        sides[i]!.readyMs.push(started.readyMs);
        sides[i]!.rssMiB.push(mib(memory(started.child.pid!).rss));
        await stop(started.child);
      }
      log(`round ${round + 1}/${rounds}: ready ${sides[0]!.readyMs.at(-1)} against ${sides[1]!.readyMs.at(-1)} ms`);
    }
  } finally {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
  machine.loadAverageAtEnd = loadAverage();
  const ratios = sides[0]!.readyMs.map((ms, i) => Math.round((ms / sides[1]!.readyMs[i]!) * 1000) / 1000);
  const tenth = (n: number) => Math.round(n * 10) / 10;
  const summary = sides.map((side) => ({ checkout: side.checkout, readyMsMedian: tenth(median(side.readyMs)), rssMiBMedian: tenth(median(side.rssMiB)) }));
  for (const side of summary) console.log(`${side.checkout}: ready ${side.readyMsMedian} ms (median of ${rounds}), VmRSS 2 s after ${side.rssMiBMedian} MiB`);
  console.log(`ready, this checkout ÷ the other: ${median(ratios)} (median of the rounds' ratios; ${Math.min(...ratios)}–${Math.max(...ratios)})`);
  write(`footprint-starts${label === undefined ? '' : `-${label}`}.json`, {
    suite: 'footprint-starts',
    description: 'starts of two checkouts alternated: time from spawn to the first 200 from /readyz, VmRSS 2 s after; config/svc.yaml, inline writer, as npm start runs it',
    command: `node bench/footprint.ts ${process.argv.slice(2).join(' ')}`,
    machine,
    inputs: { rounds, nodeFlags: [...SERVICE_NODE_FLAGS, ...extraNodeArgs], env: { ...SERVICE_ENV, ...extraEnv } },
    sides,
    summary,
    readyRatio: { median: median(ratios), perRound: ratios },
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      against: { type: 'string' },
      rounds: { type: 'string', default: '12' },
      modules: { type: 'boolean', default: false },
      starts: { type: 'string' },
      requests: { type: 'string' },
      connections: { type: 'string', default: '16' },
      loads: { type: 'string', default: '1' },
      'svc-env': { type: 'string', default: '' },
      'svc-node-args': { type: 'string', default: '' },
      label: { type: 'string' },
      bundle: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const quick = values.quick;
  MAIN = serviceMain(ROOT, values.bundle);
  // Checked before the run, not after minutes of it.
  const label = values.label === undefined ? undefined : resultLabel(values.label);
  extraNodeArgs = values['svc-node-args'].split(' ').filter((a) => a !== '');
  extraEnv = envOption('svc-env', values['svc-env']);
  const experiment = extraNodeArgs.length > 0 || Object.keys(extraEnv).length > 0 || values.bundle;
  if (values.modules) return modules(quick);
  if (values.against !== undefined) return startsAgainst(values.against, positiveOption('rounds', values.rounds), label);
  const int = (v: string | undefined, fallback: number, name: string) => {
    const n = v === undefined ? fallback : Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
    return n;
  };
  const starts = Math.max(1, int(values.starts, quick ? 3 : 7, 'starts'));
  const requests = int(values.requests, quick ? 10_000 : 100_000, 'requests');
  const connections = Math.max(1, int(values.connections, 16, 'connections'));
  const loads = int(values.loads, 1, 'loads');
  if (loads > starts) throw new Error(`--loads (${loads}) cannot exceed --starts (${starts})`);
  const machine = machineInfo();
  const echo = await startHelper('echo');
  const results: WriterResult[] = [];
  let bare;
  try {
    bare = await bareServer();
    log(`bare node http server: idle RSS ${bare.rssMiB} MiB`);
    for (const writer of WRITERS) results.push(await measureWriter(writer, echo.url, starts, requests, connections, loads));
  } finally {
    await echo.stop();
  }
  machine.loadAverageAtEnd = loadAverage();
  console.log(`\nfootprint: config/svc.yaml as npm start runs it; ${starts} starts per writer, ${requests} proxied requests on the last ${loads === 1 ? '' : `${loads} (medians)`}`.trimEnd());
  console.log('writer   ready ms (median, min–max)   idle RSS MiB (HWM)   at rest   CPU at rest   after load RSS MiB (HWM)   at rest after load');
  for (const r of results) {
    console.log(
      `${r.writer.padEnd(8)} ${`${r.readyMs.median} (${r.readyMs.min}–${r.readyMs.max})`.padEnd(28)} ${`${r.idle.rssMiB} (${r.idle.hwmMiB})`.padEnd(20)} ${String(r.atRest.rssMiB).padEnd(9)} ${`${(r.idleCpu.coreShare * 100).toFixed(2)}%`.padEnd(13)} ${`${r.afterLoad.rssMiB} (${r.afterLoad.hwmMiB})`.padEnd(26)} ${r.afterLoad.atRest.rssMiB}`,
    );
  }
  console.log(`bare node http server: ${bare.rssMiB} MiB`);
  write(label !== undefined ? `footprint-${label}.json` : experiment ? 'footprint-experiment.json' : quick ? 'footprint-quick.json' : 'footprint.json', {
    suite: 'footprint',
    description: 'start to /readyz 200 and VmRSS of the service on config/svc.yaml as npm start runs it, idle and after proxied requests, per log writer',
    command: `node bench/footprint.ts${process.argv.slice(2).length > 0 ? ` ${process.argv.slice(2).join(' ')}` : ''}`,
    machine,
    inputs: { main: values.bundle ? 'a bundle (bench/lib/bundle.ts)' : 'src/main.ts', starts, requests, loads, connections, nodeFlags: [...SERVICE_NODE_FLAGS, ...extraNodeArgs], env: { ...SERVICE_ENV, ...extraEnv }, body: 'bench/http/body.ts customerRecord, x-svc-fields name,email,phone,card.number,ssn' },
    bareNodeHttpServer: bare,
    writers: results,
  });
}

await main();
