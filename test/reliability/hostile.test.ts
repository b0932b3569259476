/**
 * Issue 7, part 4: hostile clients against the real service, over raw sockets. Slow
 * headers and slow bodies are cut by the server timeouts; thousands of idle connections
 * do not stop other clients from being served; oversized headers get 431; control and
 * non-ASCII bytes in header values never reach a destination.
 *
 * Short form inside `npm test`; the full form (`SVC_STRESS=1`) holds 5,000 idle
 * connections and prints its figures as `RELIABILITY {...}` lines.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request as httpRequest, type Server as HttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Writable } from 'node:stream';
import { createApp, type App } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { KEYS, SEED } from '../support/app.ts';
import { scaled } from './scale.ts';
import { assertNoSecrets } from './no-secrets.ts';

// ---------------------------------------------------------------------------------------
// Support: the service with its own `server:` block, a destination that records raw bytes,
// raw clients.

interface Service {
  readonly app: App;
  readonly port: number;
  readonly relayPort: number;
  readonly url: string;
  readonly logs: () => string;
}

function seedWith(destinations: readonly string[]): string {
  const plain = '{ name: payments, proxy_slug: payments, fields: [card.number] }';
  assert.ok(SEED.includes(plain), 'the shared seed still declares payments as expected');
  return SEED.replace(plain, `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: [${destinations.map((d) => JSON.stringify(d)).join(', ')}] }`);
}

/** The real service in-process; `server` is the inside of the `server:` mapping. */
async function startService(t: TestContext, server: string, upstream: string, destinations: readonly string[]): Promise<Service> {
  const text = `
server: { listen: 127.0.0.1:0, admin_listen: "off", drain_timeout: 1s, ${server} }
store: { path: ":memory:" }
relay:
  listen: 127.0.0.1:0
  upstream: ${upstream}
  routes:
    - { name: enc, match: { path: /enc/* }, configuration: payments, request: { encrypt: [a] } }
egress:
  - { name: vendor, destination: "${upstream}/e", configuration: payments, request: { encrypt: [a] } }
${seedWith(destinations)}`;
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const app = await createApp(loadConfig({ text, env: {} }), { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') }, logger: createLogger('info', sink) });
  const { main, relay } = await app.listen();
  t.after(() => app.close());
  return { app, port: main.port, relayPort: relay!.port, url: `http://127.0.0.1:${main.port}`, logs: () => chunks.join('') };
}

interface Recorder {
  readonly port: number;
  readonly url: string;
  /** The bytes of each connection, in arrival order. */
  readonly connections: Buffer[][];
  reset(): void;
  requests(): Buffer[];
}

/** True once `buf` holds a whole request (content-length or chunked framing). */
function requestComplete(buf: Buffer): boolean {
  const end = buf.indexOf('\r\n\r\n');
  if (end === -1) return false;
  const head = buf.subarray(0, end).toString('latin1').toLowerCase();
  const body = buf.subarray(end + 4);
  if (/\r\ntransfer-encoding:[ \t]*chunked/.test(head)) return body.subarray(-5).toString('latin1') === '0\r\n\r\n';
  const length = /\r\ncontent-length:[ \t]*(\d+)/.exec(head);
  return body.length >= (length === null ? 0 : Number(length[1]));
}

/**
 * A raw `net` destination: keeps every byte it receives exactly, answers each complete
 * request `200 {"ok":true}` and closes, so each request has a connection of its own.
 */
async function startRecorder(t: TestContext): Promise<Recorder> {
  const connections: Buffer[][] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const chunks: Buffer[] = [];
    connections.push(chunks);
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      if (requestComplete(Buffer.concat(chunks))) {
        socket.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{"ok":true}');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => {
    for (const s of sockets) s.destroy();
    server.close(() => r());
  }));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    connections,
    reset: () => void (connections.length = 0),
    requests: () => connections.map((c) => Buffer.concat(c)).filter((b) => b.length > 0),
  };
}

function statusOf(answer: string): number | null {
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(answer);
  return m === null ? null : Number(m[1]);
}

/** Sends `bytes` as given and reads until the server ends the connection (or `limitMs`). */
function rawExchange(port: number, bytes: Buffer | string, limitMs = 5000): Promise<{ answer: string; status: number | null; ended: boolean }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    let answer = '';
    let ended = false;
    const timer = setTimeout(() => socket.destroy(), limitMs);
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    socket.on('end', () => (ended = true));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ answer, status: statusOf(answer), ended });
    });
  });
}

interface Cut {
  readonly answer: string;
  readonly status: number | null;
  /** Since connecting: when the first answer byte arrived, null if none did. */
  readonly answeredMs: number | null;
  /** Since connecting: when the connection was gone (the server cut it, or we gave up). */
  readonly closedMs: number;
}

/**
 * A hostile client: sends `head`, then `drip` every 100 ms, for ever. It never closes
 * its side (allowHalfOpen) and keeps sending after the server's answer and FIN (a silent
 * one starts sending then), so the connection is gone only once the server has let go of
 * it entirely; after `giveUpMs` it gives up, which the caller's assertions catch.
 */
function hostileClient(port: number, head: string, drip: string, giveUpMs: number): Promise<Cut> {
  return new Promise((resolve) => {
    const started = performance.now();
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let answer = '';
    let answeredMs: number | null = null;
    let ended = false;
    socket.on('end', () => (ended = true));
    const dripper = setInterval(() => {
      const bytes = drip !== '' ? drip : ended ? 'x' : '';
      if (bytes !== '' && socket.writable) socket.write(bytes);
    }, 100);
    const giveUp = setTimeout(() => socket.destroy(), giveUpMs);
    socket.on('connect', () => {
      if (head !== '') socket.write(head);
    });
    socket.on('data', (d: Buffer) => {
      answer += d.toString('latin1');
      answeredMs ??= performance.now() - started;
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(dripper);
      clearTimeout(giveUp);
      resolve({ answer, status: statusOf(answer), answeredMs, closedMs: performance.now() - started });
    });
  });
}

function connections(server: HttpServer): Promise<number> {
  return new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
}

async function eventually(check: () => Promise<boolean>, limitMs = 2000): Promise<boolean> {
  const deadline = performance.now() + limitMs;
  while (!(await check())) {
    if (performance.now() > deadline) return false;
    await sleep(20);
  }
  return true;
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0;
}

const round = (ms: number) => Math.round(ms);

// ---------------------------------------------------------------------------------------

test('slow headers, silent connections and slow bodies are answered 408 and cut by the server timeouts, on both listeners; others are served meanwhile', async (t) => {
  const HEADERS_MS = 1000;
  const REQUEST_MS = 2000;
  // The machine is shared and can be loaded: the cut may be late, never early.
  const MARGIN_MS = 4000;
  const LINGER_MS = 1000; // the service's pause between its answer and the close
  const recorder = await startRecorder(t);
  const svc = await startService(t, `headers_timeout: ${HEADERS_MS}ms, request_timeout: ${REQUEST_MS}ms`, recorder.url, [`${recorder.url}/`]);
  const giveUp = REQUEST_MS + LINGER_MS + MARGIN_MS + 2000;
  const slowHead = 'GET /healthz HTTP/1.1\r\nhost: x\r\n';
  const slowBody = (path: string, extra = '') => `POST ${path} HTTP/1.1\r\nhost: x\r\n${extra}content-type: application/json\r\ncontent-length: 100000\r\n\r\n[`;
  const clients = {
    headersMain: hostileClient(svc.port, slowHead, 'x-a: b\r\n', giveUp),
    headersRelay: hostileClient(svc.relayPort, slowHead, 'x-a: b\r\n', giveUp),
    silentMain: hostileClient(svc.port, '', '', giveUp),
    silentRelay: hostileClient(svc.relayPort, '', '', giveUp),
    bodyProxy: hostileClient(svc.port, slowBody('/proxy/payments', `x-svc-authorization: ${KEYS.owner}\r\nx-svc-destination: ${recorder.url}/slow\r\n`), '1,', giveUp),
    bodyRelayPassThrough: hostileClient(svc.relayPort, slowBody('/other'), '1,', giveUp),
    bodyRelayRoute: hostileClient(svc.relayPort, slowBody('/enc/1'), '1,', giveUp),
  };
  let done = false;
  const all = Promise.all(Object.values(clients)).finally(() => (done = true));

  // Meanwhile other clients are served: a steady probe on each listener.
  const probes: number[] = [];
  let failedProbes = 0;
  while (!done) {
    const started = performance.now();
    const [main, relay] = await Promise.all([fetch(`${svc.url}/healthz`), rawExchange(svc.relayPort, 'GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n')]);
    await main.text();
    probes.push(performance.now() - started);
    if (main.status !== 200 || relay.status !== 200) failedProbes++;
    await sleep(50);
  }
  await all;
  const cut: Record<string, Cut> = {};
  for (const [name, p] of Object.entries(clients)) cut[name] = await p;

  for (const [name, c] of Object.entries(cut)) {
    const timeout = name.startsWith('body') ? REQUEST_MS : HEADERS_MS;
    assert.ok(c.closedMs < timeout + LINGER_MS + MARGIN_MS, `${name}: the connection was cut after ${round(c.closedMs)} ms`);
    if (name.startsWith('silent')) continue; // never sent a byte: a close is all it is owed
    assert.equal(c.status, 408, `${name}: ${JSON.stringify(c.answer)}`);
    assert.ok(c.answer.endsWith('\r\n\r\n{"message":"Request timeout."}'), `${name}: ${JSON.stringify(c.answer)}`);
    assert.ok(c.answeredMs !== null && c.answeredMs >= timeout - 100, `${name}: answered after ${c.answeredMs} ms, before its ${timeout} ms timeout`);
    assert.ok(c.answeredMs < timeout + MARGIN_MS, `${name}: answered after ${round(c.answeredMs)} ms`);
  }
  assert.equal(failedProbes, 0, 'every probe was served while the slow clients were held');
  assert.ok(probes.length >= 5, `only ${probes.length} probes ran`);
  // The server let go of every hostile socket (a half-closed one would still count).
  // A socket's close reaches the server a moment after the client's.
  assert.ok(await eventually(async () => (await connections(svc.app.server)) <= 1), 'no hostile connection is left on the main listener');
  assert.ok(await eventually(async () => (await connections(svc.app.relay!.server)) === 0), 'no hostile connection is left on the relay listener');
  // The cut uploads never completed, so no complete POST reached the destination.
  const posts = recorder.requests().filter((b) => b.subarray(0, 5).toString() === 'POST ');
  assert.ok(posts.length >= 2, 'the slow uploads had started upstream');
  for (const bytes of posts) assert.ok(!requestComplete(bytes), 'a cut upload was never completed upstream');
  assert.doesNotMatch(svc.logs(), /"level":50/, 'no request failed with a server error');
  assertNoSecrets('hostile', svc.logs());

  const figures: Record<string, number | null> = {};
  for (const [name, c] of Object.entries(cut)) figures[name] = c.answeredMs === null ? round(c.closedMs) : round(c.answeredMs);
  const sorted = [...probes].sort((a, b) => a - b);
  console.log(`RELIABILITY ${JSON.stringify({ part: 'hostile-slow', headersTimeoutMs: HEADERS_MS, requestTimeoutMs: REQUEST_MS, cutAfterMs: figures, probes: probes.length, probeP50Ms: round(percentile(sorted, 50)), probeMaxMs: round(sorted.at(-1) ?? 0) })}`);
});

test('a request timeout after the destination has started answering cuts the connection; no second status line is written into the answer', async (t) => {
  // The destination answers as soon as the request head arrives and keeps its body open,
  // while the client is still uploading: the relayed answer is under way when the
  // request timeout fires.
  const early = createServer((socket) => {
    socket.on('error', () => {});
    socket.once('data', () => socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n'));
  });
  await new Promise<void>((r) => early.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => early.close(() => r())));
  const url = `http://127.0.0.1:${(early.address() as AddressInfo).port}`;
  const svc = await startService(t, 'headers_timeout: 1s, request_timeout: 2s', url, [`${url}/`]);
  const head = `POST /proxy/payments HTTP/1.1\r\nhost: x\r\nx-svc-authorization: ${KEYS.owner}\r\nx-svc-destination: ${url}/up\r\ncontent-type: application/json\r\ncontent-length: 200000\r\n\r\n[`;
  const cut = await hostileClient(svc.port, head + '1,'.repeat(40_000), '1,', 12_000);
  assert.match(cut.answer, /^HTTP\/1\.1 200 /, 'the destination’s answer was relayed');
  assert.ok(cut.answer.includes('hello'), 'its first chunk arrived');
  assert.doesNotMatch(cut.answer, /HTTP\/1\.1 408/, 'no 408 status line inside the relayed answer');
  assert.ok(cut.closedMs < 10_000, `the connection was cut after ${round(cut.closedMs)} ms`);
});

test('thousands of idle connections held open do not stop other clients from being served', async (t) => {
  const IDLE = scaled(500, 5000);
  const REQUESTS = scaled(200, 2000);
  const CONCURRENCY = 10;
  // Long enough that every idle connection is still held during the check.
  const svc = await startService(t, 'headers_timeout: 120s, request_timeout: 240s, keep_alive_timeout: 120s', 'http://127.0.0.1:9', []);
  const idle: Socket[] = [];
  let closedEarly = 0;
  t.after(() => {
    for (const s of idle) s.destroy();
  });
  const openStarted = performance.now();
  for (let i = 0; i < IDLE; i += 250) {
    await Promise.all(Array.from({ length: Math.min(250, IDLE - i) }, (_, j) => new Promise<void>((resolve, reject) => {
      const socket = connect(svc.port, '127.0.0.1');
      socket.once('error', reject);
      socket.once('connect', () => {
        idle.push(socket);
        socket.once('close', () => closedEarly++);
        // Every tenth is a keep-alive client that made one request and went quiet; the
        // rest connected and never said a word.
        if ((i + j) % 10 !== 0) return resolve();
        socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
        socket.once('data', () => resolve());
      });
    })));
  }
  const openMs = performance.now() - openStarted;
  assert.equal(idle.length, IDLE);
  // A client's connect completes in the kernel before the server has accepted it.
  let serverHeld = 0;
  for (let i = 0; i < 100 && serverHeld < IDLE; i++, await sleep(50)) serverHeld = await connections(svc.app.server);
  assert.ok(serverHeld >= IDLE, `the server holds ${serverHeld} connections`);

  // Normal clients, each on a connection of its own, doing real work.
  const latencies: number[] = [];
  let ok = 0;
  const body = '{"card":{"number":"4111 1111 1111 1111"},"n":1}';
  const one = () => new Promise<void>((resolve, reject) => {
    const started = performance.now();
    const req = httpRequest(`${svc.url}/proxy/payments`, { method: 'POST', agent: false, headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        latencies.push(performance.now() - started);
        if (res.statusCode === 200 && /^\{"card":\{"number":"svc:1:/.test(text)) ok++;
        resolve();
      });
    });
    req.on('error', reject);
    req.end(body);
  });
  let next = 0;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < REQUESTS) {
      next++;
      await one();
    }
  }));
  const stillOpen = idle.filter((s) => !s.destroyed && s.readyState === 'open').length;
  assert.equal(ok, REQUESTS, 'every normal request was served');
  assert.equal(closedEarly, 0, 'no idle connection was dropped to make room');
  assert.equal(stillOpen, IDLE, 'the idle connections were all still held during the check');
  const sorted = [...latencies].sort((a, b) => a - b);
  console.log(`RELIABILITY ${JSON.stringify({ part: 'hostile-idle', idleConnections: IDLE, heldDuringCheck: stillOpen, serverConnections: serverHeld, openMs: round(openMs), requests: REQUESTS, ok, concurrency: CONCURRENCY, p50Ms: round(percentile(sorted, 50)), p99Ms: round(percentile(sorted, 99)), maxMs: round(sorted.at(-1) ?? 0) })}`);
  for (const s of idle) s.destroy();
});

test('oversized headers get 431 on the main listener and on the relay listener; nothing reaches the application', async (t) => {
  const recorder = await startRecorder(t);
  const svc = await startService(t, 'max_header_size: 16kb', recorder.url, []);
  const huge = `x-huge: ${'a'.repeat(20 * 1024)}\r\n`;
  const many = Array.from({ length: 1000 }, (_, i) => `x-h${String(i).padStart(4, '0')}: 0123456789\r\n`).join('');
  const fits = Array.from({ length: 400 }, (_, i) => `x-h${String(i).padStart(4, '0')}: 0123456789\r\n`).join(''); // ~10 KB
  for (const [listener, port, path] of [['main', svc.port, '/healthz'], ['relay', svc.relayPort, '/app']] as const) {
    for (const [name, headers] of [['one huge header', huge], ['many headers', many]] as const) {
      recorder.reset();
      const res = await rawExchange(port, `GET ${path} HTTP/1.1\r\nhost: x\r\n${headers}\r\n`);
      assert.equal(res.status, 431, `${listener}, ${name}: ${JSON.stringify(res.answer.slice(0, 200))}`);
      assert.ok(res.answer.endsWith('\r\n\r\n{"message":"Request header fields too large."}'), `${listener}, ${name}`);
      assert.match(res.answer, /\r\nconnection: close\r\n/i);
      assert.ok(res.ended, `${listener}, ${name}: the connection is closed after the answer`);
      assert.equal(recorder.requests().length, 0, `${listener}, ${name}: nothing reached the application`);
    }
    // Control: a large header block within the limit is served.
    recorder.reset();
    const res = await rawExchange(port, `GET ${path} HTTP/1.1\r\nhost: x\r\n${fits}connection: close\r\n\r\n`);
    assert.equal(res.status, 200, `${listener}: ${res.answer.slice(0, 200)}`);
  }
  assert.equal(recorder.requests().length, 1, 'the control request on the relay reached the application');
});

// Header values that try to smuggle a line or carry bytes a destination must never see.
// On the wire a CRLF ends a field line, so "CRLF in a value" means a bare CR, a bare LF,
// an obs-fold continuation, a NUL, or a second request hidden after an empty line.
const INJECTIONS: ReadonlyArray<readonly [string, Buffer]> = [
  ['bare LF', Buffer.from('x-a: b\nx-evil: 1\r\n')],
  ['bare CR', Buffer.from('x-a: b\rx-evil: 1\r\n')],
  ['NUL', Buffer.from('x-a: b\0x-evil: 1\r\n')],
  ['obs-fold', Buffer.from('x-a: b\r\n x-evil: 1\r\n')],
  ['obs-fold with tab', Buffer.from('x-a: b\r\n\tx-evil: 1\r\n')],
  ['control byte', Buffer.from('x-a: b\x01c\r\n')],
  ['DEL', Buffer.from('x-a: b\x7f\r\n')],
  ['UTF-8', Buffer.from('x-a: caf\u00e9 \u2603\r\n', 'utf8')],
  ['latin1', Buffer.from('x-a: caf\u00e9\r\n', 'latin1')],
  ['UTF-8 in host', Buffer.from('host: caf\u00e9.example\r\n', 'utf8')],
];

/** `x-svc-destination` values (after the `http://127.0.0.1:PORT` prefix). */
const DESTINATION_INJECTIONS: ReadonlyArray<readonly [string, (origin: string) => Buffer]> = [
  ['destination: bare LF', (o) => Buffer.from(`x-svc-destination: ${o}/a\nx-evil: 1\r\n`)],
  ['destination: bare CR', (o) => Buffer.from(`x-svc-destination: ${o}/a\rx-evil: 1\r\n`)],
  ['destination: obs-fold', (o) => Buffer.from(`x-svc-destination: ${o}/a\r\n x-evil: 1\r\n`)],
  ['destination: NUL', (o) => Buffer.from(`x-svc-destination: ${o}/a\0b\r\n`)],
  ['destination: encoded CRLF', (o) => Buffer.from(`x-svc-destination: ${o}/a%0d%0ax-evil:%201?q=%0D%0Ax-evil:1\r\n`)],
  ['destination: tab', (o) => Buffer.from(`x-svc-destination: ${o}/a\tb\r\n`)],
  ['destination: UTF-8 path', (o) => Buffer.from(`x-svc-destination: ${o}/caf\u00e9?q=\u2603\r\n`, 'utf8')],
  ['destination: latin1 path', (o) => Buffer.from(`x-svc-destination: ${o}/caf\u00e9\r\n`, 'latin1')],
  ['destination: latin1 host', (o) => Buffer.from(`x-svc-destination: ${o.replace('127.0.0.1', '127.0.0.1\u00e9')}/\r\n`, 'latin1')],
  ['destination: userinfo with CRLF', (o) => Buffer.from(`x-svc-destination: ${o.replace('//', '//u%0d%0ax-evil:p@')}/\r\n`)],
];

/** Header block bytes a destination may receive: printable ASCII, tab, CRLF line ends. */
function assertCleanRequest(bytes: Buffer, label: string): void {
  const end = bytes.indexOf('\r\n\r\n');
  assert.ok(end > 0, `${label}: a whole header block arrived`);
  const head = bytes.subarray(0, end);
  for (const byte of head) {
    assert.ok(byte === 0x09 || byte === 0x0d || byte === 0x0a || (byte >= 0x20 && byte <= 0x7e), `${label}: byte 0x${byte.toString(16)} reached the destination`);
  }
  const lines = head.toString('latin1').split('\r\n');
  assert.match(lines[0]!, /^[A-Z]+ \S+ HTTP\/1\.1$/, `${label}: request line`);
  for (const line of lines) {
    assert.ok(!/[\r\n\0]/.test(line), `${label}: a lone CR, LF or NUL in ${JSON.stringify(line)}`);
    assert.ok(!/^x-evil/i.test(line), `${label}: an injected header line reached the destination`);
  }
  assert.ok(!bytes.includes('/smuggled'), `${label}: a smuggled request reached the destination`);
}

test('CRLF, control and non-ASCII bytes in header values never reach a destination: /proxy, egress, relay routes and relay pass-through', async (t) => {
  const recorder = await startRecorder(t);
  const svc = await startService(t, '', recorder.url, [`${recorder.url}/`]);
  const body = '{"a":"1","card":{"number":"4111"}}';
  const tail = Buffer.from(`content-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
  const ways = [
    { way: '/proxy', port: svc.port, head: `POST /proxy/payments HTTP/1.1\r\nx-svc-authorization: ${KEYS.owner}\r\nx-svc-destination: ${recorder.url}/p\r\n` },
    { way: 'egress', port: svc.port, head: 'POST /egress/vendor/x HTTP/1.1\r\n' },
    { way: 'relay route', port: svc.relayPort, head: 'POST /enc/1 HTTP/1.1\r\n' },
    { way: 'relay pass-through', port: svc.relayPort, head: 'POST /other HTTP/1.1\r\n' },
    { way: 'relay WebSocket upgrade', port: svc.relayPort, head: 'GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n' },
  ];
  const cases: Array<{ label: string; request: Buffer; port: number }> = [];
  for (const { way, port, head } of ways) {
    for (const [name, bytes] of INJECTIONS) {
      const hasHost = name.includes('host');
      cases.push({ label: `${way}, ${name}`, port, request: Buffer.concat([Buffer.from(hasHost ? head : `${head}host: x\r\n`), bytes, tail]) });
    }
  }
  // A second request hidden behind an empty line is the client's own pipelined request:
  // on the main listener it is ours to answer and never goes to the destination. (Through
  // the relay it is a legitimate second request to the application, so it is not a case.)
  for (const { way, port, head } of ways.slice(0, 2)) {
    cases.push({ label: `${way}, smuggled request`, port, request: Buffer.concat([Buffer.from(`${head}host: x\r\nx-a: b\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n`), tail]) });
  }
  const proxyHead = `POST /proxy/payments HTTP/1.1\r\nhost: x\r\nx-svc-authorization: ${KEYS.owner}\r\n`;
  for (const [name, make] of DESTINATION_INJECTIONS) {
    cases.push({ label: `/proxy, ${name}`, port: svc.port, request: Buffer.concat([Buffer.from(proxyHead), make(recorder.url), tail]) });
  }

  const outcomes = { refused: 0, forwardedClean: 0 };
  for (const { label, request, port } of cases) {
    recorder.reset();
    const res = await rawExchange(port, request);
    const received = recorder.requests();
    assert.ok(res.status !== null, `${label}: no answer at all: ${JSON.stringify(res.answer)}`);
    if (res.status >= 400 && res.status < 500) {
      assert.equal(received.length, 0, `${label}: refused with ${res.status}, yet the destination got ${JSON.stringify(received.map((b) => b.toString('latin1')))}`);
      outcomes.refused++;
    } else {
      assert.equal(res.status, 200, `${label}: ${JSON.stringify(res.answer.slice(0, 300))}`);
      assert.equal(received.length, 1, `${label}: one request reached the destination`);
      assertCleanRequest(received[0]!, label);
      outcomes.forwardedClean++;
    }
  }
  // Control: the recorder sees what a leak would look like, so a clean result means something.
  assert.throws(() => assertCleanRequest(Buffer.from('POST / HTTP/1.1\r\nx-a: caf\u00e9\r\n\r\n', 'latin1'), 'control'));
  assert.throws(() => assertCleanRequest(Buffer.from('POST / HTTP/1.1\r\nx-a: b\r\nx-evil: 1\r\n\r\n'), 'control'));
  assert.ok(outcomes.refused > 0 && outcomes.forwardedClean > 0);
  assert.doesNotMatch(svc.logs(), /"level":50/, 'no request failed with a server error');
  assertNoSecrets('hostile', svc.logs());
  console.log(`RELIABILITY ${JSON.stringify({ part: 'hostile-header-bytes', cases: cases.length, ...outcomes })}`);
});
