/**
 * `/proxy` encrypt-and-forward against plain proxies, side by side in one run (issue 4,
 * "Must show"):
 *
 *   node bench/http/proxy.ts [--quick] [--rounds N] [--seconds S] [--connections N]
 *                            [--nginx-workers N] [--install-nginx] [--no-paced] [--profile]
 *                            [--svc-node-args "--flag ..."]
 *
 * Cases, each POSTing the same ~1 KB JSON customer record (body.ts):
 *   A direct        autocannon → echo backend (servers.ts, its own process)
 *   B http-proxy-3  autocannon → http-proxy-3 pass-through (own process) → echo
 *   C nginx         autocannon → nginx on loopback, keep-alive upstream → echo
 *   E naive         autocannon → a hand-written Node encrypt-and-forward (servers.ts
 *                   `naive-encrypt`: JSON.parse, AES-256-GCM on the same 5 fields,
 *                   JSON.stringify, undici) → echo: what the fields' crypto and a JSON
 *                   round trip cost on this machine with nothing else around them
 *   D svc /proxy    autocannon → the service (`node --max-semi-space-size=2 src/main.ts
 *                   serve`) encrypting 5 fields and forwarding to the echo backend
 *
 * Each round measures A, B, C, D at full load (fixed connections, 1 s warm-up each), then
 * the latency at half load: D and A at half of D's maximum of that round, B and A at half
 * of B's, once with autocannon's `overallRate` and once with the evenly paced generator
 * (load.ts explains why both). Ratios are taken within each round, and medians of the
 * per-round values are the headline. The server processes' CPU time is read from /proc
 * for every run: requests per CPU-second is a cross-check that the other jobs on this
 * shared machine cannot move much.
 *
 * Writes bench/results/http-proxy.json (--quick: http-proxy-quick.json; with
 * --svc-node-args: http-proxy-experiment.json). `--profile`
 * instead runs D alone with `--cpu-prof` and prints the top self-time functions.
 */
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadAverage, machineInfo } from '../lib/report.ts';
import { customerRecord, FIELDS } from './body.ts';
import { cannon, paced, round3, type LoadResult, type Target } from './load.ts';
import { BENCH_KEY, BENCH_SLUG, cpuSeconds, installNginx, nginxAvailable, SERVICE_NODE_FLAGS, startHelper, startNginx, startService, type Running } from './processes.ts';
import { formatProfile, summarizeProfile } from './profile.ts';

type CaseId = 'direct' | 'http-proxy-3' | 'nginx' | 'naive' | 'svc-proxy';
const LABELS: Record<CaseId, string> = {
  direct: 'A direct (echo)',
  'http-proxy-3': 'B http-proxy-3 pass-through',
  nginx: 'C nginx reverse proxy',
  naive: 'E naive Node encrypt 5 fields + forward',
  'svc-proxy': 'D svc /proxy encrypt 5 fields + forward',
};
const TARGETS = { svcVsHttpProxy3: 0.8, svcVsNginx: 0.4, addedP99Ms: 2 } as const;

interface Options {
  quick: boolean;
  rounds: number;
  seconds: number;
  warmupSeconds: number;
  connections: number;
  nginxWorkers: number;
  installNginx: boolean;
  paced: boolean;
  profile: boolean;
  /** Extra node flags for the service, after the `npm start` ones (experiments only). */
  svcNodeArgs: string[];
}

function parse(): Options {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      seconds: { type: 'string' },
      connections: { type: 'string', default: '50' },
      'nginx-workers': { type: 'string', default: '1' },
      'install-nginx': { type: 'boolean', default: false },
      'no-paced': { type: 'boolean', default: false },
      profile: { type: 'boolean', default: false },
      'svc-node-args': { type: 'string', default: '' },
    },
    strict: true,
  });
  const int = (name: string, value: string | undefined, fallback: number) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
    return n;
  };
  const quick = values.quick;
  return {
    quick,
    rounds: int('rounds', values.rounds, quick ? 1 : 5),
    seconds: int('seconds', values.seconds, quick ? 3 : 10),
    warmupSeconds: quick ? 1 : 5,
    connections: int('connections', values.connections, 50),
    nginxWorkers: int('nginx-workers', values['nginx-workers'], 1),
    installNginx: values['install-nginx'],
    paced: !values['no-paced'],
    profile: values.profile,
    svcNodeArgs: values['svc-node-args'].split(' ').filter((a) => a !== ''),
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
}

/** Runs `run` while reading the CPU time of the processes involved. */
async function measured(serverPids: readonly number[], echoPids: readonly number[], run: () => Promise<LoadResult>): Promise<Measured> {
  const server0 = cpuSeconds(serverPids);
  const echo0 = cpuSeconds(echoPids);
  const gen0 = process.cpuUsage();
  const result = await run();
  const gen = process.cpuUsage(gen0);
  const serverCpu = cpuSeconds(serverPids) - server0;
  if (result.non2xx + result.errors > 0) throw new Error(`${result.non2xx} non-2xx responses and ${result.errors} errors: the numbers would be meaningless`);
  return {
    ...result,
    serverCpuSeconds: round3(serverCpu),
    echoCpuSeconds: round3(cpuSeconds(echoPids) - echo0),
    generatorCpuSeconds: round3((gen.user + gen.system) / 1e6),
    requestsPerServerCpuSecond: serverCpu > 0 ? Math.round(result.responses / serverCpu) : Number.NaN,
  };
}

/** One request per case before measuring: every case must answer what it should. */
async function check(id: CaseId, target: Target): Promise<void> {
  const res = await fetch(target.url, { method: target.method, headers: target.headers, body: new Uint8Array(target.body) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${id}: status ${res.status}: ${text.slice(0, 300)}`);
  if (id !== 'svc-proxy' && id !== 'naive') {
    if (text !== target.body.toString()) throw new Error(`${id}: the echo did not return the body`);
    return;
  }
  const doc = JSON.parse(text) as Record<string, unknown> & { card: Record<string, unknown> };
  const sent = JSON.parse(target.body.toString()) as Record<string, unknown> & { card: Record<string, unknown> };
  const values = [doc['name'], doc['email'], doc['phone'], doc.card['number'], doc['ssn']];
  const isToken = id === 'svc-proxy' ? (v: unknown) => typeof v === 'string' && v.startsWith('svc:') && v.endsWith(':$') : (v: unknown) => typeof v === 'string' && v.startsWith('enc:');
  if (!values.every(isToken)) throw new Error(`${id}: the 5 fields were not encrypted: ${text.slice(0, 400)}`);
  if (doc['notes'] !== sent['notes'] || doc['id'] !== sent['id']) throw new Error(`${id}: other fields changed`);
}

interface Round {
  readonly round: number;
  readonly max: Partial<Record<CaseId, Measured>>;
  readonly halfLoad: {
    /** Half of D's and of B's maximum in this round. */
    readonly svcRate: number;
    readonly httpProxy3Rate: number;
    readonly autocannon: Record<string, Measured>;
    readonly paced: Record<string, Measured> | null;
  };
  readonly ratios: {
    svcVsHttpProxy3: number;
    svcVsNginx: number | null;
    svcVsNaive: number;
    cpuSvcVsHttpProxy3: number;
    cpuSvcVsNginx: number | null;
    cpuSvcVsNaive: number;
  };
  /** p99 of D minus p99 of A at the same rate (ms), and the same for B. */
  readonly addedP99Ms: { svcAutocannon: number; httpProxy3Autocannon: number; svcPaced: number | null; httpProxy3Paced: number | null };
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
  process.once('SIGINT', () => void stopAll().then(() => process.exit(130)));
  try {
    const echo = await startHelper('echo');
    started.push(echo);
    if (options.profile) {
      await profile(options, echo);
      return;
    }
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
    const naive = await startHelper('naive-encrypt', `${echo.url}/`);
    started.push(naive);
    const svc = await startService({ destinations: [echo.url], nodeArgs: options.svcNodeArgs });
    started.push(svc);

    const body = customerRecord();
    const plainHeaders = { 'content-type': 'application/json' };
    const svcHeaders = {
      ...plainHeaders,
      'x-svc-authorization': BENCH_KEY,
      'x-svc-destination': `${echo.url}/`,
      'x-svc-fields': FIELDS.join(','),
    };
    const targets: Partial<Record<CaseId, { target: Target; pids: readonly number[] }>> = {
      direct: { target: { url: `${echo.url}/`, method: 'POST', headers: plainHeaders, body }, pids: echo.pids },
      'http-proxy-3': { target: { url: `${httpProxy3.url}/`, method: 'POST', headers: plainHeaders, body }, pids: httpProxy3.pids },
      naive: { target: { url: `${naive.url}/`, method: 'POST', headers: plainHeaders, body }, pids: naive.pids },
      'svc-proxy': { target: { url: `${svc.url}/proxy/${BENCH_SLUG}`, method: 'POST', headers: svcHeaders, body }, pids: svc.pids },
    };
    if (nginx !== null) targets.nginx = { target: { url: `${nginx.url}/`, method: 'POST', headers: plainHeaders, body }, pids: nginx.pids };
    const order = (['direct', 'http-proxy-3', 'nginx', 'naive', 'svc-proxy'] as const).filter((id) => targets[id] !== undefined);
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
        log(`round ${round}/${options.rounds} max   ${id.padEnd(13)} ${String(max[id]!.rps).padStart(6)} rps  p50 ${max[id]!.latencyMs.p50} ms  p99 ${max[id]!.latencyMs.p99} ms`);
      }
      const svcRate = Math.max(1, Math.round(max['svc-proxy']!.rps / 2));
      const httpProxy3Rate = Math.max(1, Math.round(max['http-proxy-3']!.rps / 2));
      const halfRuns: Array<[string, CaseId, number]> = [
        ['direct@svc', 'direct', svcRate],
        ['svc-proxy', 'svc-proxy', svcRate],
        ['direct@http-proxy-3', 'direct', httpProxy3Rate],
        ['http-proxy-3', 'http-proxy-3', httpProxy3Rate],
      ];
      const viaCannon: Record<string, Measured> = {};
      for (const [name, id, rate] of halfRuns) {
        const { target, pids } = targets[id]!;
        viaCannon[name] = await measured(pids, echo.pids, () => cannon(target, { connections, seconds, overallRate: rate }));
        log(`round ${round}/${options.rounds} half  ${name.padEnd(20)} @${rate}/s (autocannon)  p50 ${viaCannon[name]!.latencyMs.p50} ms  p99 ${viaCannon[name]!.latencyMs.p99} ms`);
      }
      let viaPaced: Record<string, Measured> | null = null;
      if (options.paced) {
        viaPaced = {};
        for (const [name, id, rate] of halfRuns) {
          const { target, pids } = targets[id]!;
          viaPaced[name] = await measured(pids, echo.pids, () => paced(target, { connections, seconds, rate }));
          log(`round ${round}/${options.rounds} half  ${name.padEnd(20)} @${rate}/s (paced)       p50 ${viaPaced[name]!.latencyMs.p50} ms  p99 ${viaPaced[name]!.latencyMs.p99} ms`);
        }
      }
      const d = max['svc-proxy']!;
      const b = max['http-proxy-3']!;
      const c = max.nginx;
      const e = max.naive!;
      const added = (runs: Record<string, Measured> | null, a: string, x: string) =>
        runs === null ? null : round3(runs[x]!.latencyMs.p99 - runs[a]!.latencyMs.p99);
      rounds.push({
        round,
        max,
        halfLoad: { svcRate, httpProxy3Rate, autocannon: viaCannon, paced: viaPaced },
        ratios: {
          svcVsHttpProxy3: round3(d.rps / b.rps),
          svcVsNginx: c === undefined ? null : round3(d.rps / c.rps),
          svcVsNaive: round3(d.rps / e.rps),
          cpuSvcVsHttpProxy3: round3(d.requestsPerServerCpuSecond / b.requestsPerServerCpuSecond),
          cpuSvcVsNginx: c === undefined ? null : round3(d.requestsPerServerCpuSecond / c.requestsPerServerCpuSecond),
          cpuSvcVsNaive: round3(d.requestsPerServerCpuSecond / e.requestsPerServerCpuSecond),
        },
        addedP99Ms: {
          svcAutocannon: added(viaCannon, 'direct@svc', 'svc-proxy')!,
          httpProxy3Autocannon: added(viaCannon, 'direct@http-proxy-3', 'http-proxy-3')!,
          svcPaced: added(viaPaced, 'direct@svc', 'svc-proxy'),
          httpProxy3Paced: added(viaPaced, 'direct@http-proxy-3', 'http-proxy-3'),
        },
      });
    }
    machine.loadAverageAtEnd = loadAverage();
    const summary = summarize(rounds, order);
    console.log(`\n${formatTable(summary, options)}`);

    const dir = new URL('../results/', import.meta.url);
    mkdirSync(dir, { recursive: true });
    // Smoke runs and flag experiments never replace the real results.
    const name = options.quick ? 'http-proxy-quick.json' : options.svcNodeArgs.length > 0 ? 'http-proxy-experiment.json' : 'http-proxy.json';
    const path = new URL(name, dir);
    const file = {
      command: `node bench/http/proxy.ts ${process.argv.slice(2).join(' ')}`.trim(),
      updated: machine.date,
      machine,
      options,
      setup: {
        bodyBytes: body.length,
        fields: FIELDS,
        serviceNodeFlags: [...SERVICE_NODE_FLAGS, ...options.svcNodeArgs],
        serviceConfig: 'file store in a temp dir (logs written on the log thread), logging.level warn, defaults otherwise',
        httpProxy3: 'createProxyServer({ target, agent: http.Agent({ keepAlive: true, maxSockets: 64 }) })',
        naive: 'servers.ts naive-encrypt: whole body, JSON.parse, AES-256-GCM (random 96-bit nonce, no AAD) on the 5 fields, JSON.stringify, undici request (64 connections)',
        nginx: nginx === null ? nginxNote : `worker_processes ${options.nginxWorkers}; upstream keepalive 64; proxy_http_version 1.1; proxy_set_header Connection ""`,
        loadGenerator: `autocannon ${connections} connections in the parent process; latencies are exact per-response times`,
      },
      targets: TARGETS,
      summary,
      rounds,
    };
    writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`);
    log(`\nwrote ${path.pathname}`);
  } finally {
    await stopAll();
  }
}

export interface Summary {
  readonly cases: Array<{ id: CaseId; label: string; rps: number; p50: number; p99: number; rpsSamples: number[]; requestsPerServerCpuSecond: number; generatorCpuShare: number }>;
  readonly halfLoad: Record<string, { autocannonP99: number; pacedP99: number | null; rate: number }>;
  readonly ratios: {
    svcVsHttpProxy3: { median: number; samples: number[]; cpuMedian: number; target: number; verdict: string };
    svcVsNginx: { median: number; samples: number[]; cpuMedian: number; target: number; verdict: string } | null;
    /** No target: how the service compares with the hand-written reference. */
    svcVsNaive: { median: number; samples: number[]; cpuMedian: number };
    addedP99Autocannon: { median: number; samples: number[]; target: number; verdict: string };
    addedP99Paced: { median: number; samples: number[]; target: number; verdict: string } | null;
    httpProxy3AddedP99Autocannon: number;
    httpProxy3AddedP99Paced: number | null;
  };
}

function atLeast(value: number, target: number): string {
  return value >= target ? 'PASS' : `MISS by ${Math.round((1 - value / target) * 100)}%`;
}

function atMost(value: number, target: number): string {
  return value <= target ? 'PASS' : `MISS by ${round3(value - target)} ms`;
}

function summarize(rounds: readonly Round[], order: readonly CaseId[]): Summary {
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
    };
  });
  const halfLoad: Summary['halfLoad'] = {};
  for (const name of ['direct@svc', 'svc-proxy', 'direct@http-proxy-3', 'http-proxy-3']) {
    const pacedRuns = rounds.map((r) => r.halfLoad.paced?.[name]).filter((m) => m !== undefined);
    halfLoad[name] = {
      rate: Math.round(median(rounds.map((r) => r.halfLoad.autocannon[name]!.rate!))),
      autocannonP99: round3(median(rounds.map((r) => r.halfLoad.autocannon[name]!.latencyMs.p99))),
      pacedP99: pacedRuns.length === 0 ? null : round3(median(pacedRuns.map((m) => m.latencyMs.p99))),
    };
  }
  const ratio = (pick: (r: Round) => number | null, cpu: (r: Round) => number | null, target: number) => {
    const samples = rounds.map(pick).filter((v) => v !== null);
    if (samples.length === 0) return null;
    const m = round3(median(samples));
    return { median: m, samples, cpuMedian: round3(median(rounds.map(cpu).filter((v) => v !== null))), target, verdict: atLeast(m, target) };
  };
  const added = (pick: (r: Round) => number | null) => {
    const samples = rounds.map(pick).filter((v) => v !== null);
    if (samples.length === 0) return null;
    const m = round3(median(samples));
    return { median: m, samples, target: TARGETS.addedP99Ms, verdict: atMost(m, TARGETS.addedP99Ms) };
  };
  const hp3Paced = rounds.map((r) => r.addedP99Ms.httpProxy3Paced).filter((v) => v !== null);
  return {
    cases,
    halfLoad,
    ratios: {
      svcVsHttpProxy3: ratio((r) => r.ratios.svcVsHttpProxy3, (r) => r.ratios.cpuSvcVsHttpProxy3, TARGETS.svcVsHttpProxy3)!,
      svcVsNginx: ratio((r) => r.ratios.svcVsNginx, (r) => r.ratios.cpuSvcVsNginx, TARGETS.svcVsNginx),
      svcVsNaive: {
        median: round3(median(rounds.map((r) => r.ratios.svcVsNaive))),
        samples: rounds.map((r) => r.ratios.svcVsNaive),
        cpuMedian: round3(median(rounds.map((r) => r.ratios.cpuSvcVsNaive))),
      },
      addedP99Autocannon: added((r) => r.addedP99Ms.svcAutocannon)!,
      addedP99Paced: added((r) => r.addedP99Ms.svcPaced),
      httpProxy3AddedP99Autocannon: round3(median(rounds.map((r) => r.addedP99Ms.httpProxy3Autocannon))),
      httpProxy3AddedP99Paced: hp3Paced.length === 0 ? null : round3(median(hp3Paced)),
    },
  };
}

function formatTable(s: Summary, options: Options): string {
  const rows: string[][] = [['case', 'req/s', 'p50 ms', 'p99 ms', 'req/s per server CPU-s', 'rounds (req/s)']];
  for (const c of s.cases) {
    rows.push([c.label, String(c.rps), c.p50.toFixed(2), c.p99.toFixed(2), String(c.requestsPerServerCpuSecond), c.rpsSamples.join(' ')]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const lines = [`== /proxy vs pass-through proxies: ${options.rounds} round(s) × ${options.seconds} s, ${options.connections} connections, medians`];
  for (const r of rows) lines.push(r.map((cell, i) => (i === 0 || i === 5 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '));
  const r = s.ratios;
  lines.push('');
  lines.push(`D ÷ B req/s: ${r.svcVsHttpProxy3.median.toFixed(2)}× (rounds ${r.svcVsHttpProxy3.samples.join(', ')}; per CPU-s ${r.svcVsHttpProxy3.cpuMedian.toFixed(2)}×)  target ≥ ${TARGETS.svcVsHttpProxy3}×  ${r.svcVsHttpProxy3.verdict}`);
  if (r.svcVsNginx !== null) {
    lines.push(`D ÷ C req/s: ${r.svcVsNginx.median.toFixed(2)}× (rounds ${r.svcVsNginx.samples.join(', ')}; per CPU-s ${r.svcVsNginx.cpuMedian.toFixed(2)}×)  target ≥ ${TARGETS.svcVsNginx}×  ${r.svcVsNginx.verdict}`);
  }
  lines.push(`D ÷ E req/s: ${r.svcVsNaive.median.toFixed(2)}× (rounds ${r.svcVsNaive.samples.join(', ')}; per CPU-s ${r.svcVsNaive.cpuMedian.toFixed(2)}×)  no target: E is the hand-written reference`);
  const h = s.halfLoad;
  lines.push('');
  lines.push(`half load (p99 ms)                 rate/s   autocannon overallRate   paced`);
  for (const [name, label] of [
    ['direct@svc', 'A direct at half of D'],
    ['svc-proxy', 'D svc /proxy at half of D'],
    ['direct@http-proxy-3', 'A direct at half of B'],
    ['http-proxy-3', 'B http-proxy-3 at half of B'],
  ] as const) {
    const v = h[name]!;
    lines.push(`${label.padEnd(34)} ${String(v.rate).padStart(7)}   ${v.autocannonP99.toFixed(2).padStart(22)}   ${v.pacedP99 === null ? '—' : v.pacedP99.toFixed(2).padStart(5)}`);
  }
  lines.push(`D added p99 (D − A, same rate): autocannon ${r.addedP99Autocannon.median.toFixed(2)} ms (${r.addedP99Autocannon.verdict})` +
    (r.addedP99Paced === null ? '' : `, paced ${r.addedP99Paced.median.toFixed(2)} ms (${r.addedP99Paced.verdict})`) + `  target ≤ ${TARGETS.addedP99Ms} ms`);
  lines.push(`B added p99 (B − A, same rate): autocannon ${r.httpProxy3AddedP99Autocannon.toFixed(2)} ms` + (r.httpProxy3AddedP99Paced === null ? '' : `, paced ${r.httpProxy3AddedP99Paced.toFixed(2)} ms`));
  return lines.join('\n');
}

/** D alone under full load with `--cpu-prof`; prints where the service spends its CPU. */
async function profile(options: Options, echo: Running): Promise<void> {
  const profDir = mkdtempSync(join(tmpdir(), 'svc-bench-prof-'));
  const svc = await startService({ destinations: [echo.url], nodeArgs: [...options.svcNodeArgs, '--cpu-prof', `--cpu-prof-dir=${profDir}`] });
  try {
    const target: Target = {
      url: `${svc.url}/proxy/${BENCH_SLUG}`,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-svc-authorization': BENCH_KEY, 'x-svc-destination': `${echo.url}/`, 'x-svc-fields': FIELDS.join(',') },
      body: customerRecord(),
    };
    await check('svc-proxy', target);
    await cannon(target, { connections: options.connections, seconds: options.warmupSeconds });
    const r = await cannon(target, { connections: options.connections, seconds: options.seconds * 2 });
    log(`profiled run: ${r.rps} rps, p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms`);
  } finally {
    await svc.stop();
  }
  // One file per thread: CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is the main one.
  const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'));
  const main = files.find((f) => f.split('.')[4] === '0');
  if (main === undefined) throw new Error(`no main-thread .cpuprofile was written to ${profDir}`);
  console.log(formatProfile(summarizeProfile(join(profDir, main)), 30));
  for (const other of files.filter((f) => f !== main)) {
    const s = summarizeProfile(join(profDir, other));
    console.log(`\nworker thread ${other.split('.')[4]}: ${s.totalMs - s.idleMs} ms busy of ${s.totalMs} ms; top: ${s.self.slice(0, 3).map((e) => `${e.name} ${e.ms} ms`).join(', ')}`);
  }
  log(`profiles kept in ${profDir}`);
}

await main();
