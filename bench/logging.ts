/**
 * What api and usage logging costs on the encrypt path (issue 3): the same encrypt
 * request (a 1 KB body, 5 fields) against a service with `logs.enabled: true` and one
 * with `logs.enabled: false`, measured with autocannon in the same run.
 *
 *   node bench/logging.ts [--rounds N] [--duration S] [--rate R] [--connections C] [--quick]
 *
 * Each service runs in its own child process with a file store (WAL, as in production),
 * so the load generator never shares an event loop with the server it measures.
 *
 * Two measurements per variant and round:
 * - latency: a fixed rate (`--rate`, well under capacity) over 16 connections, so p99
 *   shows what logging adds to a request (stalls of the event loop) rather than queueing
 *   at saturation, where p99 mostly measures the machine;
 * - throughput: as fast as `--connections` connections go.
 *
 * Rounds are short and many, alternate the order (on, off / off, on), and the headline is
 * the median of the per-round ratios: on a shared machine, load from elsewhere moves both
 * sides of a ratio measured seconds apart together. Latencies are kept at full precision
 * from autocannon's per-response callback (its histogram rounds to whole milliseconds).
 * The server's CPU time per request (all threads, and its main thread alone) is a
 * cross-check that does not depend on wall-clock time.
 *
 * Writes bench/results/logging.json (a --quick run writes logging-quick.json).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { generateDocument } from './lib/records.ts';
import { loadAverage, machineInfo } from './lib/report.ts';
import { median } from './lib/measure.ts';

const KEY = `svc_${'Bench'.padEnd(40, '0')}`;
const PATH = '/api/v3/encryption/payments/encrypt';
const FIELDS = 'customer.name, customer.email, customer.card.number, customer.ssn, records.0.card.number';

type Variant = 'on' | 'off';

/** The part of autocannon used here (it ships no types, and @types/autocannon is not a dependency). */
interface AutocannonResult {
  requests: { total: number };
  latency: { p99: number };
  duration: number;
  non2xx: number;
  errors: number;
}
interface AutocannonInstance extends PromiseLike<AutocannonResult> {
  on(event: 'response', listener: (client: unknown, status: number, bytes: number, ms: number) => void): void;
}
const autocannon = createRequire(import.meta.url)('autocannon') as (options: Record<string, unknown>) => AutocannonInstance;

// ---------------------------------------------------------------------------------------
// Child: one service

/** Microseconds of CPU: the whole process (the log writer thread included), and its main thread. */
interface CpuSnapshot {
  process: number;
  main: number;
}

interface ServerStats {
  written: number;
  dropped: number;
  failedBatches: number;
  apiRows: number;
  usageRows: number;
}

async function serve(variant: Variant): Promise<void> {
  const { createApp } = await import('../src/app.ts');
  const { loadConfig } = await import('../src/config/load.ts');
  const dir = mkdtempSync(join(tmpdir(), `svc-bench-logging-${variant}-`));
  const config = loadConfig({
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${JSON.stringify(join(dir, 'svc.db'))} }
logs: { enabled: ${variant === 'on'} }
logging: { level: warn }
seed:
  users: [{ name: Bench, email: bench@example.com, roles: [owner] }]
  api_keys: [{ name: bench, user: bench@example.com, key: ${KEY} }]
  configurations: [{ name: payments, proxy_slug: payments }]`,
    env: {},
  });
  const app = await createApp(config, { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  const { main } = await app.listen();
  process.send!({ port: main.port });
  process.on('message', async (message: string) => {
    if (message === 'cpu') {
      const all = process.cpuUsage();
      const main = process.threadCpuUsage();
      process.send!({ cpu: { process: all.user + all.system, main: main.user + main.system } satisfies CpuSnapshot });
      return;
    }
    if (message !== 'stop') return;
    const writer = app.services.logs;
    await app.close();
    const { openStore } = await import('../src/store/db.ts');
    const store = openStore(config.store.path);
    const stats: ServerStats = {
      written: writer.written,
      dropped: writer.dropped,
      failedBatches: writer.failedBatches,
      apiRows: await store.logs.count('api'),
      usageRows: await store.logs.count('usage'),
    };
    store.close();
    rmSync(dir, { recursive: true, force: true });
    process.send!({ stats }, () => process.exit(0));
  });
}

// ---------------------------------------------------------------------------------------
// Parent: the load

interface Sample {
  variant: Variant;
  round: number;
  /** `latency`: fixed rate; `throughput`: as fast as the connections go. */
  phase: 'latency' | 'throughput';
  requests: number;
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  /** autocannon's own p99, whole milliseconds. */
  autocannonP99: number;
  non2xx: number;
  errors: number;
  /** The server's CPU per request, microseconds: all threads, and the main thread alone. */
  cpuPerRequestUs: number;
  mainCpuPerRequestUs: number;
}

type Load = Omit<Sample, 'variant' | 'round' | 'phase' | 'cpuPerRequestUs' | 'mainCpuPerRequestUs'>;

interface LoadOptions {
  seconds: number;
  connections: number;
  /** Requests per second over all connections; absent: as fast as they go. */
  rate?: number;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

const round1 = (n: number) => Math.round(n * 10) / 10;
const round2 = (n: number) => Math.round(n * 100) / 100;
const round3 = (n: number) => Math.round(n * 1000) / 1000;

async function load(port: number, body: Buffer, options: LoadOptions): Promise<Load> {
  const latencies: number[] = [];
  const instance = autocannon({
    url: `http://127.0.0.1:${port}${PATH}`,
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-authorization': KEY, 'x-svc-fields': FIELDS },
    body,
    connections: options.connections,
    duration: options.seconds,
    ...(options.rate === undefined ? {} : { overallRate: options.rate }),
  });
  instance.on('response', (_client, status, _bytes, ms) => {
    if (status === 200) latencies.push(ms);
  });
  const result = await instance;
  const sorted = Float64Array.from(latencies).sort();
  return {
    requests: result.requests.total,
    rps: Math.round(result.requests.total / result.duration),
    p50: round3(percentile(sorted, 50)),
    p90: round3(percentile(sorted, 90)),
    p99: round3(percentile(sorted, 99)),
    max: round3(sorted[sorted.length - 1] ?? Number.NaN),
    autocannonP99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

async function cpuOf(child: ChildProcess): Promise<CpuSnapshot> {
  child.send('cpu');
  const [message] = (await once(child, 'message')) as [{ cpu: CpuSnapshot }];
  return message.cpu;
}

interface Server {
  child: ChildProcess;
  port: number;
}

async function measure(server: Server, body: Buffer, options: LoadOptions): Promise<Omit<Sample, 'variant' | 'round' | 'phase'>> {
  const before = await cpuOf(server.child);
  const result = await load(server.port, body, options);
  const after = await cpuOf(server.child);
  return {
    ...result,
    cpuPerRequestUs: round1((after.process - before.process) / result.requests),
    mainCpuPerRequestUs: round1((after.main - before.main) / result.requests),
  };
}

async function startChild(variant: Variant): Promise<Server> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', variant], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  return { child, port: message.port };
}

async function stopChild(child: ChildProcess): Promise<ServerStats> {
  child.send('stop');
  const [message] = (await once(child, 'message')) as [{ stats: ServerStats }];
  await once(child, 'exit');
  return message.stats;
}

/**
 * The main thread's share of logging, in isolation from the HTTP stack and from other load
 * on the machine: the CPU the event-loop thread spends per request recording one api and
 * one usage entry and handing the batches on, with the writer thread (the default for a
 * file store) and with writes on the main thread. Entries are recorded in bursts with a
 * turn of the event loop between them, as requests would.
 */
async function mainThreadCost(thread: boolean, requests: number): Promise<{ mainCpuPerRequestUs: number; longestTurnMs: number; p99TurnMs: number }> {
  const { openStore } = await import('../src/store/db.ts');
  const { LogWriter } = await import('../src/telemetry/log-writer.ts');
  const { createLogger } = await import('../src/telemetry/logger.ts');
  const { timeOrderedId } = await import('../src/telemetry/request-id.ts');
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-logging-cost-'));
  const store = openStore(join(dir, 'svc.db'));
  const writer = new LogWriter(store, createLogger('silent'), { flushInterval: 1000, batchSize: 500, queueLimit: 100_000, thread });
  const record = (n: number) => {
    for (let i = 0; i < n; i++) {
      const requestId = timeOrderedId();
      const createdAt = new Date().toISOString();
      writer.api({ requestId, method: 'POST', path: PATH, statusCode: 200, apiKeyId: 'key', userId: 1, configurationId: 'cfg', destination: null, durationMs: 1, ip: '127.0.0.1', createdAt });
      writer.usage({ requestId, configurationId: 'cfg', apiKeyId: 'key', userId: 1, mode: 'encrypt', fieldCount: 5, bytes: 1099, createdAt });
    }
  };
  const burst = 50;
  // How long each turn of the event loop took: a batch written on this thread shows up
  // as a long turn, which is what a request arriving meanwhile would wait.
  const turns: number[] = [];
  const run = async (n: number) => {
    let last = performance.now();
    for (let done = 0; done < n; done += burst) {
      record(burst);
      await new Promise((resolve) => setImmediate(resolve));
      const now = performance.now();
      turns.push(now - last);
      last = now;
    }
  };
  await run(20_000);
  turns.length = 0;
  const before = process.threadCpuUsage();
  await run(requests);
  const cpu = process.threadCpuUsage(before);
  await writer.close();
  store.close();
  rmSync(dir, { recursive: true, force: true });
  const sorted = Float64Array.from(turns).sort();
  return {
    mainCpuPerRequestUs: round2((cpu.user + cpu.system) / requests),
    longestTurnMs: round2(sorted[sorted.length - 1] ?? 0),
    p99TurnMs: round2(percentile(sorted, 99)),
  };
}

function positive(name: string, value: string | undefined, fallback: number): number {
  const n = Number(value ?? fallback);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      serve: { type: 'string' },
      rounds: { type: 'string' },
      duration: { type: 'string' },
      rate: { type: 'string' },
      connections: { type: 'string' },
      quick: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.serve === 'on' || values.serve === 'off') return serve(values.serve);

  const quick = values.quick;
  const rounds = positive('rounds', values.rounds, quick ? 2 : 12);
  const seconds = positive('duration', values.duration, quick ? 2 : 4);
  const rate = positive('rate', values.rate, 400);
  const connections = positive('connections', values.connections, 16);
  const latencyLoad: LoadOptions = { seconds, connections: 16, rate };
  const throughputLoad: LoadOptions = { seconds, connections };

  const body = generateDocument(600).bytes;
  const machine = machineInfo();
  const log = (m: string) => process.stderr.write(`${m}\n`);
  log(`node ${machine.node} on ${machine.cpuModel} × ${machine.cores}, load ${machine.loadAverageAtStart.join(' ')}`);
  log(`encrypt, ${body.length} B body, 5 fields; ${rounds} rounds of: ${rate} req/s for ${seconds} s, then ${connections} connections flat out for ${seconds} s`);

  const costRequests = quick ? 20_000 : 100_000;
  const cost = { writerThread: await mainThreadCost(true, costRequests), mainThread: await mainThreadCost(false, costRequests) };
  log(
    `logging alone, ${costRequests} requests: main-thread CPU ${cost.writerThread.mainCpuPerRequestUs} µs/request and longest turn ` +
      `${cost.writerThread.longestTurnMs} ms with the writer thread; ${cost.mainThread.mainCpuPerRequestUs} µs/request and ` +
      `${cost.mainThread.longestTurnMs} ms writing on the main thread`,
  );

  const servers: Record<Variant, Server> = { on: await startChild('on'), off: await startChild('off') };
  // Warm-up: the JIT, the codec caches and SQLite's page cache of both services.
  for (const variant of ['on', 'off'] as const) await load(servers[variant].port, body, { seconds: quick ? 1 : 3, connections });

  const samples: Sample[] = [];
  for (let round = 0; round < rounds; round++) {
    const order: Variant[] = round % 2 === 0 ? ['on', 'off'] : ['off', 'on'];
    for (const [phase, options] of [['latency', latencyLoad], ['throughput', throughputLoad]] as const) {
      for (const variant of order) {
        const sample: Sample = { variant, round, phase, ...(await measure(servers[variant], body, options)) };
        samples.push(sample);
        log(
          `round ${round + 1}/${rounds} ${phase.padEnd(10)} ${variant.padEnd(3)}: ${sample.rps} req/s, p50 ${sample.p50} ms, p99 ${sample.p99} ms, ` +
            `cpu/request ${sample.cpuPerRequestUs} µs (main thread ${sample.mainCpuPerRequestUs} µs)`,
        );
      }
    }
  }
  const writer = { on: await stopChild(servers.on.child), off: await stopChild(servers.off.child) };

  const pick = (round: number, phase: Sample['phase'], variant: Variant) => samples.find((s) => s.round === round && s.phase === phase && s.variant === variant)!;
  const ratios = (phase: Sample['phase'], of: (s: Sample) => number) =>
    Array.from({ length: rounds }, (_, round) => of(pick(round, phase, 'on')) / of(pick(round, phase, 'off')));
  const headline = (values: number[]) => ({ median: round2(median(values)), min: round2(Math.min(...values)), max: round2(Math.max(...values)) });
  const summary = (phase: Sample['phase'], variant: Variant) => {
    const of = samples.filter((s) => s.phase === phase && s.variant === variant);
    return {
      rps: Math.round(median(of.map((s) => s.rps))),
      p50: round3(median(of.map((s) => s.p50))),
      p99: round3(median(of.map((s) => s.p99))),
      cpuPerRequestUs: round1(median(of.map((s) => s.cpuPerRequestUs))),
      mainCpuPerRequestUs: round1(median(of.map((s) => s.mainCpuPerRequestUs))),
      requests: of.reduce((n, s) => n + s.requests, 0),
      non2xx: of.reduce((n, s) => n + s.non2xx, 0),
      errors: of.reduce((n, s) => n + s.errors, 0),
    };
  };
  const result = {
    bench: 'logging',
    description: 'encrypt with api+usage logging on vs off (logs.enabled): p99 at a fixed rate, req/s flat out; same run, interleaved rounds',
    command: `node bench/logging.ts ${process.argv.slice(2).join(' ')}`.trim(),
    machine: { ...machine, loadAverageAtEnd: loadAverage() },
    inputs: { bodyBytes: body.length, fields: FIELDS.split(', '), rounds, secondsPerSample: seconds, latencyLoad, throughputLoad, store: 'file (WAL)' },
    latency: { on: summary('latency', 'on'), off: summary('latency', 'off') },
    throughput: { on: summary('throughput', 'on'), off: summary('throughput', 'off') },
    ratio: {
      /** Median over rounds of p99(on) / p99(off) at the fixed rate: the headline. */
      p99AtFixedRate: headline(ratios('latency', (s) => s.p99)),
      p99FlatOut: headline(ratios('throughput', (s) => s.p99)),
      rps: headline(ratios('throughput', (s) => s.rps)),
      /** CPU per request, on/off, at the fixed rate: independent of wall-clock noise. */
      cpuPerRequest: headline(ratios('latency', (s) => s.cpuPerRequestUs)),
      mainThreadCpuPerRequest: headline(ratios('latency', (s) => s.mainCpuPerRequestUs)),
    },
    writer,
    /** The logging work on the event-loop thread alone, per request (no HTTP), µs. */
    mainThreadCostPerRequest: { requests: costRequests, ...cost },
    samples,
  };

  const row = (s: ReturnType<typeof summary>) =>
    `${String(s.rps).padStart(6)}  ${s.p50.toFixed(3).padStart(8)} ${s.p99.toFixed(3).padStart(8)}   ${s.cpuPerRequestUs.toFixed(0).padStart(5)} (${s.mainCpuPerRequestUs.toFixed(0)})`;
  const ratio = (h: { median: number; min: number; max: number }) => `${h.median}× (rounds ${h.min}–${h.max})`;
  console.log(`
encrypt, ${body.length} B, 5 fields; ${rounds} rounds × ${seconds} s per sample
                             req/s    p50 ms   p99 ms   cpu µs/req (main thread)
${rate} req/s, logging on   ${row(result.latency.on)}
${rate} req/s, logging off  ${row(result.latency.off)}
flat out, logging on    ${row(result.throughput.on)}
flat out, logging off   ${row(result.throughput.off)}
p99 on/off at ${rate} req/s: ${ratio(result.ratio.p99AtFixedRate)}
p99 on/off flat out:   ${ratio(result.ratio.p99FlatOut)}
req/s on/off flat out: ${ratio(result.ratio.rps)}
cpu/request on/off:    ${ratio(result.ratio.cpuPerRequest)}; main thread ${ratio(result.ratio.mainThreadCpuPerRequest)}
logging alone (no HTTP), per request on the main thread: ${cost.writerThread.mainCpuPerRequestUs} µs CPU, longest event-loop turn ${cost.writerThread.longestTurnMs} ms (p99 ${cost.writerThread.p99TurnMs} ms)
  writing on the main thread instead: ${cost.mainThread.mainCpuPerRequestUs} µs CPU, longest turn ${cost.mainThread.longestTurnMs} ms (p99 ${cost.mainThread.p99TurnMs} ms)
rows written with logging on: ${writer.on.apiRows} api, ${writer.on.usageRows} usage (dropped ${writer.on.dropped}); off: ${writer.off.apiRows} api, ${writer.off.usageRows} usage`);

  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const path = new URL(quick ? 'logging-quick.json' : 'logging.json', dir);
  writeFileSync(path, `${JSON.stringify(result, null, 2)}\n`);
  log(`\nwrote ${fileURLToPath(path)}`);
}

await main();
