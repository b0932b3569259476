/**
 * The egress proxy (DESIGN §15) against a blind CONNECT tunnel through the same proxy to
 * the same vendor, keep-alive on both (issue 15):
 *
 * - `decrypt`: a form POST to a listed host, `card[number]` and `card[cvc]` tokens that
 *   the proxy decrypts (TLS terminated, body read whole, tokens checked, TLS again to the
 *   vendor, answer re-encrypted where the request decrypted — here nothing is echoed);
 * - `tunnel`: the same request with the plaintext an application would send without the
 *   sidecar, through `unknown_hosts: tunnel` (bytes only, TLS end to end);
 * - `terminate` (for the breakdown): the plaintext request to a listed host with no rules,
 *   so TLS is terminated and the request relayed, but no body is transformed. The vendor
 *   answers it on a second address of the same process (127.0.0.1, its own certificate).
 *
 *   node bench/http/egress-proxy.ts [--rounds 5] [--seconds 5] [--rate 200] [--connections 8] [--quick] [--profile <dir>]
 *
 * A blind tunnel goes to public addresses only, so the run re-executes itself in a network
 * namespace of its own (`unshare --net`, root) where a public address (8.8.4.4) sits on
 * the loopback interface: nothing leaves the machine. The vendor (HTTPS, a CA of the
 * run's own, given to the proxy as trust_file) and the service run in child processes;
 * the load comes from this process through undici ProxyAgents, one per case, each
 * keeping its CONNECT tunnels open across requests.
 *
 * Per round and case: latency at a fixed rate (`--rate`, paced evenly, timed from the
 * scheduled send) and throughput as fast as `--connections` in-flight requests go. Rounds
 * alternate the order; the headline figures are the medians of per-round differences
 * (added p50) and ratios (req/s).
 *
 * Writes bench/results/egress-proxy.json (egress-proxy-quick.json with --quick).
 */
import { spawnSync, fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ProxyAgent, request, type Dispatcher } from 'undici';
import { loadAverage, machineInfo } from '../lib/report.ts';
import { median } from '../lib/measure.ts';
import { openLoop } from './load.ts';

const PUBLIC = '8.8.4.4';
const TUNNEL_NAME = 'tunnel.bench';
const KEY = `svc_${'Bench'.padEnd(40, '0')}`;
const SELF = fileURLToPath(import.meta.url);

type Case = 'decrypt' | 'terminate' | 'tunnel';
const CASES: readonly Case[] = ['tunnel', 'terminate', 'decrypt'];

// ---------------------------------------------------------------------------------------
// Children

/** The vendor: HTTPS on PUBLIC, a small JSON answer like a payment API's. */
async function vendor(leaves: { public: { cert: string; key: string }; loopback: { cert: string; key: string } }): Promise<void> {
  const answer = Buffer.from(JSON.stringify({ id: 'pm_1', object: 'payment_method', type: 'card', card: { brand: 'visa', last4: '4242', exp_month: 12, exp_year: 2030 } }));
  const handle = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => (bytes += chunk.length));
    req.on('end', () => {
      res.writeHead(bytes > 0 ? 200 : 400, { 'content-type': 'application/json', 'content-length': answer.length });
      res.end(answer);
    });
  };
  const listen = (leaf: { cert: string; key: string }, host: string) =>
    new Promise<number>((resolve) => {
      const server = createServer({ ...leaf, keepAliveTimeout: 60_000 }, handle);
      server.listen(0, host, () => resolve((server.address() as { port: number }).port));
    });
  process.send!({ port: await listen(leaves.public, PUBLIC), loopbackPort: await listen(leaves.loopback, '127.0.0.1') });
}

/** The service: an egress proxy listing the vendor by address, tunnelling anything else. */
async function service(vendorPort: number, loopbackPort: number, vendorCaFile: string): Promise<void> {
  const { createApp } = await import('../../src/app.ts');
  const { loadConfig } = await import('../../src/config/load.ts');
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-egress-proxy-'));
  const config = loadConfig({
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${JSON.stringify(join(dir, 'svc.db'))} }
logging: { level: warn }
seed:
  users: [{ name: Bench, email: bench@example.com, roles: [owner] }]
  api_keys: [{ name: bench, user: bench@example.com, key: ${KEY} }]
  configurations: [{ name: payments, proxy_slug: payments }]
egress_proxy:
  listen: 127.0.0.1:0
  ca: { cert_file: ${JSON.stringify(join(dir, 'ca.pem'))}, key_file: ${JSON.stringify(join(dir, 'ca.key'))} }
  trust_file: ${JSON.stringify(vendorCaFile)}
  unknown_hosts: tunnel
  hosts:
    - match: ${PUBLIC}:${vendorPort}
      configuration: payments
      routes:
        - match: { method: POST, path: /v1/payment_methods }
          request: { decrypt: ["card[number]", "card[cvc]"] }
    - { match: "127.0.0.1:${loopbackPort}", configuration: payments }`,
    env: {},
  });
  const app = await createApp(config, {
    env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') },
    resolve: (host, callback) => (host === TUNNEL_NAME ? callback(null, [{ address: PUBLIC, family: 4 }]) : callback(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }), [])),
  });
  const { main, egressProxy } = await app.listen();
  const { readFileSync } = await import('node:fs');
  process.send!({ main: main.port, proxy: egressProxy!.port, ca: readFileSync(join(dir, 'ca.pem'), 'utf8') });
  process.on('message', async (message: string) => {
    if (message !== 'stop') return;
    await app.close();
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

// ---------------------------------------------------------------------------------------
// Load

interface Target {
  readonly dispatcher: Dispatcher;
  readonly origin: string;
  readonly body: string;
}

interface Latency {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

interface RunResult {
  readonly responses: number;
  readonly failures: number;
  readonly seconds: number;
  readonly rps: number;
  readonly latencyMs: Latency;
}

function summary(samples: number[]): Latency {
  const sorted = Float64Array.from(samples).sort();
  const at = (q: number) => Math.round((sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN) * 1000) / 1000;
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1) };
}

async function send(target: Target): Promise<boolean> {
  const res = await request(`${target.origin}/v1/payment_methods`, {
    method: 'POST',
    dispatcher: target.dispatcher,
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: 'Bearer sk_test_bench' },
    body: target.body,
  });
  await res.body.dump();
  return res.statusCode === 200;
}

/** Open loop: one request every 1/rate s, timed from when it was due. */
async function paced(target: Target, rate: number, seconds: number): Promise<RunResult> {
  const total = Math.round(rate * seconds);
  const samples: number[] = [];
  let failures = 0;
  const start = await openLoop(total, rate, (scheduled) =>
    send(target).then(
      (ok) => (ok ? samples.push(performance.now() - scheduled) : failures++),
      () => failures++,
    ),
  );
  const elapsed = (performance.now() - start) / 1000;
  return { responses: samples.length, failures, seconds: elapsed, rps: Math.round(samples.length / elapsed), latencyMs: summary(samples) };
}

/** Closed loop: `connections` requests in flight for `seconds`. */
async function flat(target: Target, connections: number, seconds: number): Promise<RunResult> {
  const samples: number[] = [];
  let failures = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        const t0 = performance.now();
        try {
          if (await send(target)) samples.push(performance.now() - t0);
          else failures++;
        } catch {
          failures++;
        }
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  return { responses: samples.length, failures, seconds: elapsed, rps: Math.round(samples.length / elapsed), latencyMs: summary(samples) };
}

// ---------------------------------------------------------------------------------------
// Parent

function child(args: string[], profileDir?: string): { process: ChildProcess; ready: Promise<any> } {
  const execArgv = profileDir === undefined ? process.execArgv : [...process.execArgv, '--cpu-prof', '--cpu-prof-dir', profileDir];
  const proc = fork(SELF, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv });
  return { process: proc, ready: once(proc, 'message').then(([message]) => message) };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '5' },
      seconds: { type: 'string', default: '5' },
      rate: { type: 'string', default: '200' },
      connections: { type: 'string', default: '8' },
      quick: { type: 'boolean', default: false },
      profile: { type: 'string' },
    },
  });
  const quick = values.quick === true;
  const rounds = quick ? 2 : Number(values.rounds);
  const seconds = quick ? 1 : Number(values.seconds);
  const rate = Number(values.rate);
  const connections = Number(values.connections);
  const machine = machineInfo();

  const { createCertificateAuthority, issueLeafCertificate, readCertificateAuthority } = await import('../../src/crypto/certificates.ts');
  const work = mkdtempSync(join(tmpdir(), 'svc-bench-vendor-'));
  const vendorCa = await createCertificateAuthority('bench vendor CA');
  const vendorAuthority = readCertificateAuthority(vendorCa.cert, vendorCa.key);
  const leaves = { public: await issueLeafCertificate(vendorAuthority, PUBLIC), loopback: await issueLeafCertificate(vendorAuthority, '127.0.0.1') };
  const vendorCaFile = join(work, 'vendor-ca.pem');
  writeFileSync(vendorCaFile, vendorCa.cert);

  const vendorChild = child(['--vendor', JSON.stringify(leaves)]);
  const { port: vendorPort, loopbackPort } = (await vendorChild.ready) as { port: number; loopbackPort: number };
  // --profile <dir>: a V8 CPU profile of the service (summarise with bench/http/profile.ts).
  const serviceChild = child(['--service', String(vendorPort), String(loopbackPort), vendorCaFile], values.profile);
  const svc = (await serviceChild.ready) as { main: number; proxy: number; ca: string };

  const tokenised = await (
    await fetch(`http://127.0.0.1:${svc.main}/proxy/payments`, {
      method: 'POST',
      headers: { 'x-svc-authorization': KEY, 'content-type': 'application/json', 'x-svc-fields': 'card.number,card.cvc' },
      body: JSON.stringify({ card: { number: '4242424242424242', cvc: '314' } }),
    })
  ).json() as { card: { number: string; cvc: string } };
  const form = (number: string, cvc: string) => `type=card&card[number]=${number}&card[cvc]=${cvc}&card[exp_month]=12&card[exp_year]=2030&billing_details[name]=Jenny%20Rosen`;
  const proxyUri = `http://127.0.0.1:${svc.proxy}`;
  const targets: Record<Case, Target> = {
    decrypt: {
      dispatcher: new ProxyAgent({ uri: proxyUri, connections, requestTls: { ca: svc.ca } }),
      origin: `https://${PUBLIC}:${vendorPort}`,
      body: form(tokenised.card.number, tokenised.card.cvc),
    },
    terminate: {
      dispatcher: new ProxyAgent({ uri: proxyUri, connections, requestTls: { ca: svc.ca } }),
      origin: `https://127.0.0.1:${loopbackPort}`,
      body: form('4242424242424242', '314'),
    },
    tunnel: {
      // The vendor's certificate names its address; the tunnel is opened by another name
      // (so no host rule lists it), and the client checks the chain only.
      dispatcher: new ProxyAgent({ uri: proxyUri, connections, requestTls: { ca: vendorCa.cert, checkServerIdentity: () => undefined } }),
      origin: `https://${TUNNEL_NAME}:${vendorPort}`,
      body: form('4242424242424242', '314'),
    },
  };

  // Checks before timing: both paths answer 200, and the decrypt path really decrypts.
  for (const name of CASES) if (!(await send(targets[name]))) throw new Error(`${name}: the check request failed`);
  // Warm-up.
  for (const name of CASES) await flat(targets[name], connections, quick ? 0.5 : 3);

  const perRound: Array<Record<Case, { paced: RunResult; flat: RunResult }>> = [];
  for (let round = 0; round < rounds; round++) {
    const order: Case[] = round % 2 === 0 ? [...CASES] : [...CASES].reverse();
    const result = {} as Record<Case, { paced: RunResult; flat: RunResult }>;
    for (const name of order) result[name] = { paced: await paced(targets[name], rate, seconds), flat: await flat(targets[name], connections, seconds) };
    perRound.push(result);
    const r = result;
    process.stdout.write(
      `round ${round + 1}/${rounds}: p50 at ${rate}/s decrypt ${r.decrypt.paced.latencyMs.p50} ms, terminate ${r.terminate.paced.latencyMs.p50} ms, tunnel ${r.tunnel.paced.latencyMs.p50} ms; ` +
        `req/s decrypt ${r.decrypt.flat.rps}, terminate ${r.terminate.flat.rps}, tunnel ${r.tunnel.flat.rps}\n`,
    );
  }

  const addedP50 = median(perRound.map((r) => r.decrypt.paced.latencyMs.p50 - r.tunnel.paced.latencyMs.p50));
  const addedP99 = median(perRound.map((r) => r.decrypt.paced.latencyMs.p99 - r.tunnel.paced.latencyMs.p99));
  const rpsRatio = median(perRound.map((r) => r.decrypt.flat.rps / r.tunnel.flat.rps));
  const terminateRatio = median(perRound.map((r) => r.terminate.flat.rps / r.tunnel.flat.rps));
  const decryptVsTerminate = median(perRound.map((r) => r.decrypt.flat.rps / r.terminate.flat.rps));
  const terminateAddedP50 = median(perRound.map((r) => r.terminate.paced.latencyMs.p50 - r.tunnel.paced.latencyMs.p50));
  const failures = perRound.reduce((n, r) => n + CASES.reduce((m, name) => m + r[name].paced.failures + r[name].flat.failures, 0), 0);
  const verdict = {
    addedP50Ms: Math.round(addedP50 * 1000) / 1000,
    addedP99Ms: Math.round(addedP99 * 1000) / 1000,
    rpsRatio: Math.round(rpsRatio * 1000) / 1000,
    targetAddedP50Ms: 1,
    targetRpsRatio: 0.5,
    meetsP50: addedP50 <= 1,
    meetsRps: rpsRatio >= 0.5,
    terminateAddedP50Ms: Math.round(terminateAddedP50 * 1000) / 1000,
    terminateRpsRatio: Math.round(terminateRatio * 1000) / 1000,
    decryptRpsOfTerminate: Math.round(decryptVsTerminate * 1000) / 1000,
    failures,
  };
  process.stdout.write(`\nadded p50 at ${rate} req/s: ${verdict.addedP50Ms} ms (target ≤ 1 ms); added p99: ${verdict.addedP99Ms} ms\n`);
  process.stdout.write(`req/s decrypt ÷ tunnel: ${verdict.rpsRatio}× (target ≥ 0.5×); failed requests: ${failures}\n`);
  process.stdout.write(`breakdown: terminate adds ${verdict.terminateAddedP50Ms} ms p50 and runs at ${verdict.terminateRpsRatio}× the tunnel's req/s; decrypt runs at ${verdict.decryptRpsOfTerminate}× terminate's\n`);

  for (const target of Object.values(targets)) await target.dispatcher.close();
  serviceChild.process.send('stop');
  await once(serviceChild.process, 'exit');
  vendorChild.process.kill();
  rmSync(work, { recursive: true, force: true });
  machine.loadAverageAtEnd = loadAverage();
  const out = join(fileURLToPath(new URL('../results/', import.meta.url)), quick ? 'egress-proxy-quick.json' : 'egress-proxy.json');
  mkdirSync(join(out, '..'), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ benchmark: 'egress-proxy', machine, options: { rounds, seconds, rate, connections, quick }, verdict, rounds: perRound }, null, 2)}\n`);
  process.stdout.write(`wrote ${out}\n`);
}

// ---------------------------------------------------------------------------------------

const [mode, ...rest] = process.argv.slice(2);
if (mode === '--vendor') {
  await vendor(JSON.parse(rest[0]!));
} else if (mode === '--service') {
  await service(Number(rest[0]), Number(rest[1]), rest[2]!);
} else if (process.env['SVC_BENCH_NETNS'] === '1') {
  await main();
} else {
  // Into a network namespace of our own, with PUBLIC on its loopback.
  const script = `ip link set lo up && ip addr add ${PUBLIC}/32 dev lo && exec "$0" "$@"`;
  const result = spawnSync('unshare', ['--net', 'sh', '-c', script, process.execPath, SELF, ...process.argv.slice(2)], { stdio: 'inherit', env: { ...process.env, SVC_BENCH_NETNS: '1' } });
  if (result.error !== undefined || result.status === null) {
    process.stderr.write(`egress-proxy bench: unshare --net failed (${result.error?.message ?? result.signal}); it needs root to give the vendor a public address that stays on this machine.\n`);
    process.exit(1);
  }
  process.exit(result.status);
}
