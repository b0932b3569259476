/**
 * Fuzzing the listeners beside the main API: the admin listener (`/healthz`, `/readyz`,
 * `/metrics`), the relay with its guard (`relay.protect`) in front of a live application,
 * and the egress routes of the main listener (`/egress/{name}/...`, decrypting, encrypting
 * and passing through) to a live vendor. Generated requests and raw byte streams
 * (listeners-arbitraries.ts) against the real service in a child process.
 *
 * Proved: no 5xx anywhere (the application and the vendor are live echo servers that
 * answer with what they got, in its own content type, so a gateway error would be a defect
 * too: see `echoedType`); every request answered in time, every raw stream answered below 500 or closed;
 * the process never exits and the admin `/healthz` stays 200 after every batch; nothing
 * logged at error; the admin listener serves nothing but its three routes; no `x-svc-*`
 * header and no API key (outside the client's own `authorization`) reaches the
 * application or the vendor; no plaintext the test put under a protected key ever reaches
 * the application, however the key, the body, the path or the framing was spelled; no
 * plaintext under `ssn` reaches the vendor through the encrypting egress route; no
 * plaintext a decrypting egress route sent the vendor comes back to the application; every
 * error the service answers is `{"message"}` (DESIGN §7); and memory after a forced full
 * GC returns to its level after the warm-up and stays flat over the second half.
 *
 * Seeded: `SVC_FUZZ_SEED` replays a run, `SVC_FUZZ_PROGRESS=1` reports each batch as it
 * ends; each failure is printed with its listener, method, path, headers and body prefix
 * (raw cases: their bytes; what reached the application or the vendor: that request).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import fc from 'fast-check';
import { Pool } from 'undici';
import { KEYS, SEED } from '../support/app.ts';
import { startChild } from '../support/child.ts';
import { startEcho, type Echo } from '../support/destinations.ts';
import type { HttpCase, OpenApi, RawCase, World } from './fuzz-arbitraries.ts';
import { answerProblems, concludeRun, count, errorLogLines, INSPECT, openMemoryReader, runConcurrently, runInPhases, sendHttp, sendRaw } from './fuzz-harness.ts';
import { listenerCaseArb, SMUGGLE, type Aimed, type ListenerCase, type ListenerName, type ListenersWorld } from './listeners-arbitraries.ts';
import { assertNoSecrets } from './no-secrets.ts';
import { scaled } from './scale.ts';

const SEED_VALUE = Number(process.env['SVC_FUZZ_SEED'] || 20_261_128);
assert.ok(Number.isSafeInteger(SEED_VALUE), `SVC_FUZZ_SEED must be an integer, not ${process.env['SVC_FUZZ_SEED']}`);
const BATCH = 250;
const WARMUP = scaled(500, 5_000);
const REQUESTS = scaled(5_500, 60_000);
/** Before each memory reading: lets the log writer drain its queue and idle sockets time out. */
const SETTLE_MS = scaled(200, 3_000);
const CONCURRENCY = scaled(16, 24);
/** Far beyond any answer of a healthy service on a loaded 2-core machine: only a hang gets here. */
const REQUEST_TIMEOUT_MS = 20_000;
/** Past `server.headers_timeout` (10 s): a server that only lets go when its own timeout fires still lets go. */
const RAW_TIMEOUT_MS = 15_000;
/** How long a smuggling case's connection (left open for writing) is given before the client gives up on it. */
const KEEP_OPEN_MS = 2_000;
const ADMIN_ROUTES = new Set(['/healthz', '/readyz', '/metrics']);

/** Markers of the planted plaintexts (listeners-arbitraries.ts): letters and digits only, so no token or encoding can spell one by chance. */
const MARKERS = { relay: `PLAINrelay${SEED_VALUE.toString(36)}Z`, enc: `PLAINenc${SEED_VALUE.toString(36)}Z`, dec: `PLAINdec${SEED_VALUE.toString(36)}Z` };

interface Failure {
  readonly kind: string;
  readonly fuzzCase: ListenerCase | null;
  readonly detail: string;
}

interface Stats {
  http: Record<ListenerName, number>;
  raw: Record<ListenerName, number>;
  statuses: Record<string, number>;
  /** Statuses by listener and family: how deep each kind of request got. */
  families: Record<string, Record<string, number>>;
  rawAnswered: number;
  rawClosedSilently: number;
  /** Smuggling cases still waiting, connection open, for a body their framing announced when the client gave up. */
  rawWaiting: number;
  /** Requests with planted relay secrets the application accepted (so the guard let them through, encrypted). */
  guardedDelivered: number;
  toApplication: number;
  toVendor: number;
  closedMidUpload: number;
  failures: Failure[];
}

// ---------------------------------------------------------------------------------------
// Setting up

async function owner(pool: Pool, path: string, body: unknown, headers: Record<string, string>): Promise<any> {
  const res = await pool.request({ method: 'POST', path, headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.body.text();
  assert.equal(res.statusCode, 200, `${path}: ${text}`);
  return JSON.parse(text);
}

function forgedJwt(n: number): string {
  const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: String(n), exp: 4_102_444_800 })}.${Buffer.alloc(32, n).toString('base64url')}`;
}

async function buildWorld(main: Pool, vendor: Echo, port: number): Promise<ListenersWorld> {
  const decTokens: string[] = [];
  const tokens: string[] = [];
  for (const classification of [undefined, 'phi', 'pci', 'nobody']) {
    const headers = { 'x-svc-fields': 'card.number,items.*.email', ...(classification === undefined ? {} : { 'x-svc-classification': classification }) };
    for (let i = 0; i < 3; i++) {
      const doc = { card: { number: `${MARKERS.dec}${classification ?? 'none'}${i}` }, items: [{ email: `${MARKERS.dec}mail${i}@example.com` }] };
      const enc = await owner(main, '/api/v3/encryption/payments/encrypt', doc, headers);
      decTokens.push(enc.card.number, enc.items[0].email);
    }
  }
  // Tokens the routes do not decrypt as theirs: other configurations, other values.
  for (const slug of ['patients', 'lookup', 'other-config']) {
    const enc = await owner(main, `/api/v3/encryption/${slug}/encrypt`, { a: 'plain', b: 12.5, c: true, d: { x: [1, 'y'] } }, { 'x-svc-fields': 'a,b,c,d' });
    for (const v of Object.values(enc as Record<string, unknown>)) if (typeof v === 'string') tokens.push(v);
  }
  const base: World = {
    echo: vendor.url,
    port,
    keys: { owner: KEYS.owner, others: [KEYS.dev, KEYS.viewer, KEYS.outsider, KEYS.scoped, KEYS.encryptOnly], revoked: `svc_${'R'.repeat(40)}` },
    bearer: { valid: forgedJwt(1), loggedOut: forgedJwt(2), forged: forgedJwt(3), forLogout: [forgedJwt(4)] },
    configurations: { all: [], sacrificial: [] },
    classifications: { all: [1, 2, 3, 4], slugs: ['phi', 'pci', 'nobody', 'ward'], sacrificial: [] },
    apiKeys: { all: [], sacrificial: [] },
    emails: ['ada@example.com'],
    tokens: [...decTokens, ...tokens],
    openapi: { paths: {}, components: { schemas: {}, parameters: {} } } as OpenApi,
  };
  return { base, markers: MARKERS, decTokens };
}

/**
 * The echo servers answer in the request's own content type, except one that declares a
 * charset other than UTF-8: an answer in a JSON format and such a charset cannot be
 * transformed, and is a documented 502 (docs/relay.md) rather than a defect.
 */
function echoedType(type: string | undefined): string | undefined {
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(type ?? '')?.[1];
  return charset === undefined || /^utf-?8$/i.test(charset) ? type : 'application/octet-stream';
}

// ---------------------------------------------------------------------------------------
// Checks

/** The text and what it reads as once JSON escapes and percent-escapes are undone: a plaintext hides in none of them. */
function plainViews(text: string): string[] {
  const unescaped = text.replace(/\\u([0-9a-fA-F]{4})/g, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16))).replace(/\\\//g, '/');
  const decoded = text.replace(/\+/g, ' ').replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
  return [text, unescaped, decoded];
}

function holds(text: string, marker: string): boolean {
  return plainViews(text).some((view) => view.includes(marker));
}

function describeCase(c: ListenerCase | null): string {
  if (c === null) return '(after the batch)';
  if (c.kind === 'raw') return `${c.listener} ${c.family}: ${c.bytes.length} bytes in ${c.pieces} piece(s): ${JSON.stringify(c.bytes.subarray(0, 600).toString('latin1'))}`;
  const body = c.body === null ? 'none' : `${c.body.length} bytes: ${JSON.stringify(c.body.subarray(0, 300).toString('latin1'))}`;
  const clip = (_k: string, v: unknown) => (typeof v === 'string' && v.length > 300 ? `${v.slice(0, 300)}… (${v.length} chars)` : v);
  return `${c.listener} ${c.family}: ${c.method} ${c.path.length > 300 ? `${c.path.slice(0, 300)}… (${c.path.length} chars)` : c.path}\n    headers: ${JSON.stringify(c.headers, clip)}\n    body: ${body}`;
}

/**
 * What reached the application or the vendor: none of svc-sidecar's own headers, no API
 * key outside the client's own `authorization`, and no planted plaintext it must not see.
 */
function checkReceived(echo: Echo, who: string, marker: string, stats: Stats): void {
  for (const got of echo.received) {
    const own = Object.keys(got.headers).filter((h) => h.startsWith('x-svc-'));
    const key = Object.entries(got.headers).some(([h, v]) => h !== 'authorization' && Object.values(KEYS).some((k) => String(v).includes(k)));
    const plain = [got.url, JSON.stringify(got.headers satisfies IncomingHttpHeaders), got.body.toString('utf8'), got.body.toString('latin1')].some((text) => holds(text, marker));
    if (own.length > 0 || key || plain) {
      const what = [own.length > 0 ? `x-svc headers ${own.join(', ')}` : '', key ? 'an API key' : '', plain ? 'planted plaintext' : ''].filter((s) => s !== '').join(' and ');
      stats.failures.push({ kind: `${what} reached the ${who}`, fuzzCase: null, detail: `${got.method} ${got.url.slice(0, 300)} with ${JSON.stringify(got.headers).slice(0, 600)}; body ${JSON.stringify(got.body.subarray(0, 600).toString('utf8'))}` });
    }
  }
  echo.received.length = 0;
}

// ---------------------------------------------------------------------------------------
// Running cases

interface Listeners {
  readonly ports: Record<ListenerName, number>;
  readonly pools: Record<ListenerName, Pool>;
}

async function runHttp(l: Listeners, c: Aimed<HttpCase>, stats: Stats): Promise<void> {
  stats.http[c.listener]++;
  const fail = (kind: string, detail: string) => stats.failures.push({ kind: `${c.listener}: ${kind}`, fuzzCase: c, detail });
  // The relay and egress refuse some heads (a target, a header) before reading the body.
  const out = await sendHttp(l.pools[c.listener], c, REQUEST_TIMEOUT_MS, false);
  if (out.kind === 'refused mid-upload') stats.closedMidUpload++;
  if (out.kind === 'failed') fail(out.failure, out.detail);
  if (out.kind !== 'answered') return;
  const { status, text } = out;
  count(stats.statuses, `${c.listener} ${status}`);
  count((stats.families[`${c.listener} ${c.family}`] ??= {}), `${Math.floor(status / 100)}xx`);
  const relayed = out.header('x-echo') === 'yes';
  if (c.family === 'relay:protected' && relayed) stats.guardedDelivered++;
  for (const p of answerProblems(c, out, relayed)) fail(p.kind, p.detail);
  if (c.listener === 'admin' && status < 300) {
    const path = URL.parse(c.path, 'http://admin.invalid')?.pathname ?? c.path;
    if (!ADMIN_ROUTES.has(path)) fail('served a path that is not its own', `status ${status}: ${text.slice(0, 200)}`);
  }
  // A decrypting egress route never hands back what it decrypted, whatever the vendor echoes.
  if (c.listener === 'egress' && (holds(text, MARKERS.dec) || holds(JSON.stringify(out.headers), MARKERS.dec))) fail('decrypted plaintext came back', `status ${status}: ${text.slice(0, 400)}`);
}

async function runRaw(l: Listeners, c: Aimed<RawCase>, stats: Stats): Promise<void> {
  stats.raw[c.listener]++;
  const keepOpen = c.family === SMUGGLE;
  const { reply, statuses, hung } = await sendRaw(l.ports[c.listener], c.bytes, c.pieces, keepOpen ? KEEP_OPEN_MS : RAW_TIMEOUT_MS, !keepOpen);
  // A connection left open may rightly wait for the rest of a body its framing announced.
  if (hung && keepOpen) stats.rawWaiting++;
  else if (hung) stats.failures.push({ kind: `${c.listener}: raw hang`, fuzzCase: c, detail: `still open ${RAW_TIMEOUT_MS} ms after the request was sent; got ${JSON.stringify(reply.slice(0, 200))}` });
  if (statuses.length === 0) stats.rawClosedSilently++;
  else stats.rawAnswered++;
  count((stats.families[`${c.listener} ${c.family}`] ??= {}), statuses.length === 0 ? 'closed' : `${Math.floor(statuses[0]! / 100)}xx`);
  for (const s of statuses) {
    count(stats.statuses, `${c.listener} raw ${s}`);
    if (s >= 500) stats.failures.push({ kind: `${c.listener}: raw ${s}`, fuzzCase: c, detail: reply.slice(0, 300) });
  }
  if (c.listener === 'egress' && holds(reply, MARKERS.dec)) stats.failures.push({ kind: 'egress: decrypted plaintext came back (raw)', fuzzCase: c, detail: reply.slice(0, 400) });
}

// ---------------------------------------------------------------------------------------

test(`listeners fuzz: ${REQUESTS} generated requests and raw byte streams to the admin listener, the relay and its guard, and egress → no 5xx, no crash, no hang, no plaintext past the guard, heap back to baseline`, async (t) => {
  const started = performance.now();
  console.log(`listeners fuzz seed ${SEED_VALUE} (replay with SVC_FUZZ_SEED=${SEED_VALUE})`);
  const application = await startEcho(t, { answerType: echoedType });
  const vendor = await startEcho(t, { answerType: echoedType });
  const seed = SEED.replace('    - { name: other, proxy_slug: other-config }\n', '    - { name: other, proxy_slug: other-config }\n    - { name: patients, proxy_slug: patients }\n');
  assert.ok(seed.includes('name: patients'), 'the seed has the relay configuration');
  const yaml = `egress:
  - { name: dec, destination: "${vendor.url}/eg", configuration: payments, request: { decrypt: [card.number] } }
  - { name: dec-all, destination: "${vendor.url}/all/", configuration: payments, request: { decrypt: [] } }
  - { name: enc, destination: "${vendor.url}/", configuration: lookup, request: { encrypt: [ssn, items.*.email], classification: nobody } }
  - { name: pass, destination: "${vendor.url}/p/", configuration: payments }
relay:
  listen: 127.0.0.1:0
  upstream: ${application.url}
  protect: { keys: [ssn, dob], configuration: patients, classification: phi }
  routes:
    - { name: patient-read, match: { method: GET, path: /patients/** }, configuration: patients, response: { decrypt: [ssn] } }
    - { name: patient-write, match: { path: /patients/** }, configuration: patients, request: { encrypt: [ssn, dob, contacts.*.phone], classification: phi } }
    - { name: inbound, match: { method: POST, path: /inbound/* }, configuration: patients, request: { decrypt: [] } }
    - { name: reports, match: { path: /reports/** }, configuration: patients, response: { encrypt: [name, ssn] } }
${seed}`;
  const child = await startChild(t, yaml, {}, [INSPECT], { server: '{ listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0 }' });
  const portOf = (name: string) => {
    const match = new RegExp(`"${name}":"[^"]*:(\\d+)"`).exec(child.output());
    assert.ok(match !== null, `no ${name} address in:\n${child.output()}`);
    return Number(match[1]);
  };
  const ports: Record<ListenerName, number> = { admin: portOf('admin'), relay: portOf('relay'), egress: Number(new URL(child.url).port) };
  const pool = (port: number) => new Pool(`http://127.0.0.1:${port}`, { connections: CONCURRENCY, pipelining: 1, keepAliveTimeout: 2_000 });
  const pools: Record<ListenerName, Pool> = { admin: pool(ports.admin), relay: pool(ports.relay), egress: pool(ports.egress) };
  t.after(() => Promise.all(Object.values(pools).map((p) => p.destroy())));
  const listeners: Listeners = { ports, pools };
  const memory = await openMemoryReader(t, child);

  let exit: { code: number | null; signal: string | null; inFlight: ListenerCase[] } | null = null;
  const inFlight = new Set<ListenerCase>();
  child.process.once('exit', (code, signal) => (exit = { code, signal, inFlight: [...inFlight] }));

  const world = await buildWorld(pools.egress, vendor, ports.egress);
  if (process.env['SVC_FUZZ_PROGRESS'] === '1') console.error('world built');
  const arb = listenerCaseArb(world);
  const stats: Stats = { http: { admin: 0, relay: 0, egress: 0 }, raw: { admin: 0, relay: 0, egress: 0 }, statuses: {}, families: {}, rawAnswered: 0, rawClosedSilently: 0, rawWaiting: 0, guardedDelivered: 0, toApplication: 0, toVendor: 0, closedMidUpload: 0, failures: [] };

  const healthy = async (): Promise<void> => {
    const res = await pools.admin.request({ path: '/healthz', method: 'GET', headersTimeout: REQUEST_TIMEOUT_MS });
    const body = await res.body.text();
    if (res.statusCode !== 200) stats.failures.push({ kind: 'admin /healthz not 200', fuzzCase: null, detail: `${res.statusCode}: ${body}` });
  };
  const run = async (from: number, total: number) => {
    for (let done = 0, batch = from; done < total && exit === null; done += BATCH, batch++) {
      const cases = fc.sample(arb, { seed: SEED_VALUE + batch, numRuns: Math.min(BATCH, total - done) });
      if (process.env['SVC_FUZZ_PROGRESS'] === '1') console.error(`${new Date().toISOString()} batch ${batch}: ${stats.failures.length} failures so far`, stats.failures.slice(-5).map((f) => `[${f.kind}] ${describeCase(f.fuzzCase)}\n  got: ${f.detail}`).join('\n'));
      await runConcurrently(cases, CONCURRENCY, inFlight, (c) => (c.kind === 'raw' ? runRaw(listeners, c, stats) : runHttp(listeners, c, stats)));
      stats.toApplication += application.received.length;
      stats.toVendor += vendor.received.length;
      checkReceived(application, 'application', MARKERS.relay, stats);
      checkReceived(vendor, 'vendor', MARKERS.enc, stats);
      if (exit === null) await healthy();
    }
  };

  const phased = await runInPhases({ warmup: WARMUP, requests: REQUESTS, batch: BATCH, settleMs: SETTLE_MS, memory, child, alive: () => exit === null, run });

  const crash = exit as { code: number | null; signal: string | null; inFlight: ListenerCase[] } | null;
  assert.equal(crash, null, crash === null ? '' : `the service exited (${crash.code ?? crash.signal}) with in flight:\n${crash.inFlight.map(describeCase).join('\n')}\n${child.output().slice(-3000)}`);
  for (const name of ['admin', 'egress'] as const) {
    const health = await pools[name].request({ path: '/healthz', method: 'GET' });
    assert.equal(health.statusCode, 200, `${name} /healthz`);
    assert.deepEqual(await health.body.json(), { status: 'ok' });
  }
  // Every case was generated, sent and answered, and each listener's deep paths were reached.
  const sent = (['admin', 'relay', 'egress'] as const).reduce((n, l) => n + stats.http[l] + stats.raw[l], 0);
  assert.equal(sent, WARMUP + REQUESTS);
  assert.ok(stats.guardedDelivered > 0 && stats.toApplication > 0 && stats.toVendor > 0 && stats.rawAnswered > 0, JSON.stringify({ statuses: stats.statuses, guardedDelivered: stats.guardedDelivered, toVendor: stats.toVendor }));
  for (const status of ['admin 200', 'relay 201', 'egress 201']) assert.ok((stats.statuses[status] ?? 0) > 0, `no ${status} among ${JSON.stringify(stats.statuses)}`);

  const errorLogs = errorLogLines(child.output());
  assertNoSecrets('listeners fuzz', child.output());
  const counts = { http_requests: stats.http, raw_connections: stats.raw, raw_answered: stats.rawAnswered, raw_closed_without_answer: stats.rawClosedSilently, raw_left_waiting_for_a_body: stats.rawWaiting, received_by_application: stats.toApplication, received_by_vendor: stats.toVendor, planted_secrets_delivered_encrypted: stats.guardedDelivered, refused_mid_upload: stats.closedMidUpload };
  const summary = { part: 'listeners-fuzz', seed: SEED_VALUE, warmup: WARMUP, requests: REQUESTS, concurrency: CONCURRENCY, started, phased };
  concludeRun(t, { ...summary, counts, statuses: stats.statuses, families: stats.families, failures: stats.failures, describe: (f) => describeCase(f.fuzzCase), errorLogs });
});
