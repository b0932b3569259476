/**
 * The helper servers of the HTTP benchmarks, each run as its own process so the load
 * generator and the server under test never share an event loop:
 *
 *   node bench/http/servers.ts echo                 answers 200 with the request body
 *   node bench/http/servers.ts discard              counts the body's bytes, answers {"bytes":n}
 *   node bench/http/servers.ts http-proxy-3 <url>   plain pass-through proxy to <url>
 *   node bench/http/servers.ts undici-pass <url>    the lean pass-through: each request
 *                                                  dispatched to <url> on an undici Pool,
 *                                                  status, headers and body copied back
 *   node bench/http/servers.ts naive-encrypt <url>  the hand-written reference: JSON.parse,
 *                                                  AES-256-GCM on body.ts's five fields,
 *                                                  JSON.stringify, forward with undici
 *   node bench/http/servers.ts naive-decrypt <url>  the same the other way: the five fields
 *                                                  opened (key in BENCH_NAIVE_KEY, base64)
 *
 * Started with `fork` (see processes.ts): each listens on 127.0.0.1:0, sends
 * `{ port }` over IPC, and closes when the parent sends 'stop' or goes away.
 */
import { createSecretKey, randomBytes, type KeyObject } from 'node:crypto';
import { Agent, createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createProxyServer } from 'http-proxy-3';
import { Agent as UndiciAgent, Pool, request, type Dispatcher } from 'undici';
import { FIELDS } from './body.ts';
import { NAIVE_KEY_ENV, open, replaceAt, seal } from './naive-fields.ts';

export type Role = 'echo' | 'discard' | 'http-proxy-3' | 'undici-pass' | 'naive-encrypt' | 'naive-decrypt';
const ROLES: readonly Role[] = ['echo', 'discard', 'http-proxy-3', 'undici-pass', 'naive-encrypt', 'naive-decrypt'];

/** Keep-alive, as a real backend; idle connections outlive the pauses between runs. */
const KEEP_ALIVE_TIMEOUT = 60_000;

function echo(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (chunk: Buffer) => {
    chunks.push(chunk);
    size += chunk.length;
  });
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
    res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/octet-stream', 'content-length': body.length });
    res.end(body);
  });
}

function discard(req: IncomingMessage, res: ServerResponse): void {
  let size = 0;
  req.on('data', (chunk: Buffer) => {
    size += chunk.length;
  });
  req.on('end', () => {
    const body = JSON.stringify({ bytes: size });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
}

function passThrough(target: string): (req: IncomingMessage, res: ServerResponse) => void {
  // As many pooled sockets as the load generator opens connections, so the proxy never
  // queues for a socket; nginx gets `keepalive 64` for the same reason.
  const agent = new Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 64 });
  const proxy = createProxyServer({ target, agent });
  proxy.on('error', (_err, _req, res) => {
    if (!('writeHead' in res)) return res.destroy();
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
    res.end('bad gateway');
  });
  return (req, res) => proxy.web(req, res);
}

/**
 * The lean pass-through: no proxy library, only undici's dispatcher interface. The
 * request's headers (less the hop-by-hop ones) and body stream go to the target on a
 * keep-alive Pool; the answer's status, headers and chunks are written straight to the
 * client, with backpressure both ways. What a Node proxy costs with nothing but the
 * forwarding in it.
 */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host', 'expect']);

function withoutHopByHop(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  }
  return out;
}

function undiciPass(target: string): (req: IncomingMessage, res: ServerResponse) => void {
  const url = new URL(target);
  const pool = new Pool(url.origin, { connections: 64, keepAliveTimeout: KEEP_ALIVE_TIMEOUT });
  const bad = (res: ServerResponse) => {
    if (res.headersSent) return res.destroy();
    res.writeHead(502, { 'content-type': 'text/plain' });
    res.end('bad gateway');
  };
  return (req, res) => {
    let controller: Dispatcher.DispatchController | null = null;
    res.on('drain', () => controller?.resume());
    pool.dispatch(
      { origin: url.origin, path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers: withoutHopByHop(req.headers), body: req },
      {
        onRequestStart(c) {
          controller = c;
        },
        onResponseStart(_c, statusCode, headers) {
          if (statusCode >= 200) res.writeHead(statusCode, withoutHopByHop(headers));
        },
        onResponseData(c, chunk) {
          if (!res.write(chunk)) c.pause();
        },
        onResponseEnd() {
          res.end();
        },
        onResponseError() {
          bad(res);
        },
      },
    );
  };
}

/** The references' key: from the bench (BENCH_NAIVE_KEY), or a fresh one. */
function naiveKey(required: boolean): KeyObject {
  const given = process.env[NAIVE_KEY_ENV];
  if (given === undefined || given === '') {
    if (required) throw new Error(`${NAIVE_KEY_ENV} must hold the base64 AES-256 key`);
    return createSecretKey(randomBytes(32));
  }
  const key = Buffer.from(given, 'base64');
  if (key.length !== 32) throw new Error(`${NAIVE_KEY_ENV} must hold 32 bytes`);
  return createSecretKey(key);
}

/**
 * What an application would write by hand to encrypt (or decrypt) five fields and
 * forward: the whole body parsed, each field sealed with AES-256-GCM under one key and a
 * random 96-bit nonce, or opened (no key derivation, no associated data, no key
 * versions; naive-fields.ts), the document serialised again and sent with undici; the
 * answer is read whole and relayed. No authentication, logs or metrics. It is the floor
 * the service's /proxy is compared with, not a model to follow.
 */
function naive(target: string, change: (value: unknown) => unknown): (req: IncomingMessage, res: ServerResponse) => void {
  const agent = new UndiciAgent({ connections: 64, keepAliveTimeout: KEEP_ALIVE_TIMEOUT });
  const paths = FIELDS.map((f) => f.split('.'));
  const answer = (res: ServerResponse, status: number, type: string, body: Buffer) => {
    res.writeHead(status, { 'content-type': type, 'content-length': body.length });
    res.end(body);
  };
  return (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      let doc: unknown;
      try {
        doc = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        for (const path of paths) replaceAt(doc, path, change);
      } catch {
        answer(res, 400, 'text/plain', Buffer.from('bad json or bad field'));
        return;
      }
      request(target, { dispatcher: agent, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(doc) }).then(
        async (upstream) => answer(res, upstream.statusCode, String(upstream.headers['content-type'] ?? 'application/json'), Buffer.from(await upstream.body.arrayBuffer())),
        () => answer(res, 502, 'text/plain', Buffer.from('bad gateway')),
      );
    });
  };
}

function handlerFor(role: Role, target: string | undefined): (req: IncomingMessage, res: ServerResponse) => void {
  if (role === 'echo') return echo;
  if (role === 'discard') return discard;
  if (target === undefined) throw new Error(`${role} needs a target URL`);
  if (role === 'undici-pass') return undiciPass(target);
  if (role === 'naive-encrypt') {
    const key = naiveKey(false);
    return naive(target, (value) => seal(key, value));
  }
  if (role === 'naive-decrypt') {
    const key = naiveKey(true);
    return naive(target, (value) => open(key, value));
  }
  return passThrough(target);
}

async function main(): Promise<void> {
  const [role, target] = process.argv.slice(2);
  if (!ROLES.includes(role as Role)) throw new Error(`usage: node bench/http/servers.ts ${ROLES.join('|')} [target]`);
  const server: Server = createServer({ keepAliveTimeout: KEEP_ALIVE_TIMEOUT, requestTimeout: 0 }, handlerFor(role as Role, target));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const stop = () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  };
  process.on('message', (m) => m === 'stop' && stop());
  process.on('disconnect', stop);
  process.send?.({ port: (server.address() as AddressInfo).port });
}

await main();
