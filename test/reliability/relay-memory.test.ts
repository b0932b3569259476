/**
 * Bounded values under stress (DESIGN §13): the service as its own process, the relay in
 * front of an application with `relay.protect` on `ssn`. One huge value is streamed from
 * the client — never built whole in this process — under the protected key (413, nothing
 * reaches the application) and under a key nobody protects (it streams through to the
 * application, every byte). Either way the service's resident memory rises by less than
 * 50 MB over its level before the request.
 *
 * Full form (`SVC_STRESS=1`): a 100 MB value. Short form (`npm test`): 20 MB.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { startChild, type Child } from '../support/child.ts';
import { FULL, scaled } from './scale.ts';

const MB = 1024 * 1024;
const VALUE_BYTES = scaled(20, 100) * MB;
const MAX_GROWTH = 50 * MB;
/**
 * Values a route encrypts in one body, each then read by the guard. A body of many small
 * values keeps the heap busy: the garbage collector lets it level off near 110 MB above
 * the idle size whatever their number (600,000 or 2,000,000), where keeping each value's
 * token for the whole body took it to 350 MB at 600,000 and past 1 GB at 4,000,000.
 */
const MANY_VALUES = scaled(600_000, 2_000_000);
const MAX_GROWTH_MANY_VALUES = 160 * MB;
const SAMPLE_MS = 10;

/** The application: counts the body bytes of each request, holds none of them. */
async function startCountingApp(t: TestContext): Promise<{ url: string; requests: number[] }> {
  const requests: number[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => (bytes += chunk.length));
    req.on('end', () => {
      requests.push(bytes);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ bytes }));
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => {
    for (const s of sockets) s.destroy();
    server.close(() => r());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

interface Sent {
  readonly status: number;
  readonly answer: string;
  /** Body bytes written before the answer came or the body ended. */
  readonly written: number;
  readonly ms: number;
}

/**
 * POSTs `{"<key>":"1111…"}` with a value of `size` bytes, written from one reused 64 KiB
 * buffer with backpressure; stops writing as soon as an answer arrives.
 */
function sendHugeValue(port: number, key: string, size: number): Promise<Sent> {
  const head = Buffer.from(`{"${key}":"`);
  const tail = Buffer.from('"}');
  const piece = Buffer.alloc(64 * 1024, 0x31);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let written = 0;
    let answered = false;
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/patients', headers: { 'content-type': 'application/json', 'content-length': head.length + size + tail.length } }, (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, answer: Buffer.concat(chunks).toString(), written, ms: performance.now() - started }));
      res.on('error', reject);
    });
    // The service closes the connection after an early answer: the unsent rest is expected.
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (!answered && err.code !== 'EPIPE' && err.code !== 'ECONNRESET') reject(err);
    });
    const write = (chunk: Buffer): Promise<void> => {
      written += chunk.length;
      return req.write(chunk) ? Promise.resolve() : new Promise((r) => req.once('drain', r));
    };
    void (async () => {
      await write(head);
      for (let left = size; left > 0 && !answered && !req.destroyed; left -= piece.length) {
        await write(left >= piece.length ? piece : piece.subarray(0, left));
      }
      if (!answered && !req.destroyed) {
        written += tail.length;
        req.end(tail);
      }
    })().catch(() => {});
  });
}

/**
 * POSTs `{"contacts":[{"phone":"1"},…]}` with `count` values for the route to encrypt, each
 * then read by the guard: what is kept for the guard must stay one chunk's worth.
 */
function sendManyValues(port: number, count: number): Promise<Sent> {
  const head = Buffer.from('{"contacts":[');
  const one = '{"phone":"1"},';
  const perPiece = 4096;
  const piece = Buffer.from(one.repeat(perPiece));
  const last = Buffer.from('{"phone":"1"}]}');
  const length = head.length + (count - 1) * one.length + last.length;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let written = 0;
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/patients', headers: { 'content-type': 'application/json', 'content-length': length } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, answer: Buffer.concat(chunks).toString().slice(0, 200), written, ms: performance.now() - started }));
      res.on('error', reject);
    });
    req.on('error', reject);
    const write = (chunk: Buffer): Promise<void> => {
      written += chunk.length;
      return req.write(chunk) ? Promise.resolve() : new Promise((r) => req.once('drain', r));
    };
    void (async () => {
      await write(head);
      let left = count - 1;
      for (; left >= perPiece; left -= perPiece) await write(piece);
      if (left > 0) await write(Buffer.from(one.repeat(left)));
      written += last.length;
      req.end(last);
    })().catch(reject);
  });
}

/** Runs `work` while sampling the child's resident size; the growth is the peak over the level before. */
async function measured(child: Child, work: () => Promise<Sent>): Promise<Sent & { rssBefore: number; peak: number; growth: number }> {
  const rssBefore = child.rss();
  const hwmBefore = child.peakRss();
  let peak = rssBefore;
  const timer = setInterval(() => (peak = Math.max(peak, child.rss())), SAMPLE_MS);
  try {
    const sent = await work();
    peak = Math.max(peak, child.rss());
    // The kernel's high-water mark catches a peak between samples, once it passes the old one.
    const hwmAfter = child.peakRss();
    if (hwmAfter > hwmBefore) peak = Math.max(peak, hwmAfter);
    return { ...sent, rssBefore, peak, growth: peak - rssBefore };
  } finally {
    clearInterval(timer);
  }
}

const mb = (bytes: number) => Math.round((bytes / MB) * 10) / 10;

/** A fresh service in front of `app`, warmed up with a small protected and unprotected body; returns its relay port. */
async function startService(t: TestContext, app: { url: string; requests: number[] }): Promise<{ child: Child; port: number }> {
  const child = await startChild(
    t,
    `relay:
  listen: 127.0.0.1:0
  upstream: ${app.url}
  protect: { keys: [ssn], configuration: patients }
  routes:
    - { name: write, match: { method: POST, path: /patients }, configuration: patients, request: { encrypt: [contacts.*.phone] } }
seed:
  configurations:
    - { name: patients, proxy_slug: patients }
`,
  );
  const relay = /"relay":"([^"]+)"/.exec(child.output());
  assert.ok(relay !== null, child.output());
  const port = Number(relay[1]!.split(':').at(-1));
  // So that the figures are of the value alone, not of the first request's setup.
  for (const key of ['ssn', 'note']) assert.equal((await sendHugeValue(port, key, 64 * 1024)).status, 200);
  return { child, port };
}

test(`a ${VALUE_BYTES / MB} MB value into the relay: 413 under a protected key, streamed through under another, the service's RSS rising by less than 50 MB; and memory does not follow the number of values a route encrypts before the guard`, async (t) => {
  const app = await startCountingApp(t);

  // Each case on its own process, so that neither inherits the other's peak.
  const first = await startService(t, app);
  const warm = app.requests.length;
  const refused = await measured(first.child, () => sendHugeValue(first.port, 'ssn', VALUE_BYTES));
  assert.equal(refused.status, 413, refused.answer);
  assert.deepEqual(JSON.parse(refused.answer), { message: 'A field value exceeds the limit of 1048576 bytes.' });
  assert.equal(app.requests.length, warm, 'nothing of it reached the application');

  const second = await startService(t, app);
  const passed = await measured(second.child, () => sendHugeValue(second.port, 'note', VALUE_BYTES));
  assert.equal(passed.status, 200, passed.answer);
  assert.equal(app.requests.at(-1), VALUE_BYTES + '{"note":""}'.length, 'the application got every byte');

  // A route that encrypts many values, the guard after it: memory does not follow their number.
  const third = await startService(t, app);
  const many = await measured(third.child, () => sendManyValues(third.port, MANY_VALUES));
  assert.equal(many.status, 200, many.answer);

  const figures = {
    part: 'relay-memory',
    full: FULL,
    valueMb: VALUE_BYTES / MB,
    protected: { status: refused.status, clientWroteMb: mb(refused.written), ms: Math.round(refused.ms), rssBeforeMb: mb(refused.rssBefore), peakMb: mb(refused.peak), growthMb: mb(refused.growth) },
    routeValues: { count: MANY_VALUES, status: many.status, clientWroteMb: mb(many.written), ms: Math.round(many.ms), rssBeforeMb: mb(many.rssBefore), peakMb: mb(many.peak), growthMb: mb(many.growth) },
    unprotected: { status: passed.status, appReceivedMb: mb(app.requests.at(-1)!), ms: Math.round(passed.ms), rssBeforeMb: mb(passed.rssBefore), peakMb: mb(passed.peak), growthMb: mb(passed.growth) },
  };
  console.log(`RELIABILITY ${JSON.stringify(figures)}`);
  assert.ok(refused.growth < MAX_GROWTH, `RSS rose ${mb(refused.growth)} MB while refusing the protected value`);
  assert.ok(passed.growth < MAX_GROWTH, `RSS rose ${mb(passed.growth)} MB while streaming the unprotected value`);
  assert.ok(many.growth < MAX_GROWTH_MANY_VALUES, `RSS rose ${mb(many.growth)} MB for ${MANY_VALUES} values a route encrypted before the guard`);
});
