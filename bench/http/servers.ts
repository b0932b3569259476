/**
 * The helper servers of the HTTP benchmarks, each run as its own process so the load
 * generator and the server under test never share an event loop:
 *
 *   node bench/http/servers.ts echo                 answers 200 with the request body
 *   node bench/http/servers.ts discard              counts the body's bytes, answers {"bytes":n}
 *   node bench/http/servers.ts http-proxy-3 <url>   plain pass-through proxy to <url>
 *   node bench/http/servers.ts naive-encrypt <url>  the hand-written reference: JSON.parse,
 *                                                  AES-256-GCM on body.ts's five fields,
 *                                                  JSON.stringify, forward with undici
 *
 * Started with `fork` (see processes.ts): each listens on 127.0.0.1:0, sends
 * `{ port }` over IPC, and closes when the parent sends 'stop' or goes away.
 */
import { createCipheriv, createSecretKey, randomBytes } from 'node:crypto';
import { Agent, createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createProxyServer } from 'http-proxy-3';
import { Agent as UndiciAgent, request } from 'undici';
import { FIELDS } from './body.ts';

export type Role = 'echo' | 'discard' | 'http-proxy-3' | 'naive-encrypt';
const ROLES: readonly Role[] = ['echo', 'discard', 'http-proxy-3', 'naive-encrypt'];

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
 * What an application would write by hand to encrypt five fields and forward: the whole
 * body parsed, each field sealed with AES-256-GCM under one key and a random 96-bit nonce
 * (no key derivation, no associated data, no key versions), the document serialised again
 * and sent with undici; the answer is read whole and relayed. No authentication, logs or
 * metrics. It is the floor the service's /proxy is compared with, not a model to follow.
 */
function naiveEncrypt(target: string): (req: IncomingMessage, res: ServerResponse) => void {
  const key = createSecretKey(randomBytes(32));
  const agent = new UndiciAgent({ connections: 64, keepAliveTimeout: KEEP_ALIVE_TIMEOUT });
  const paths = FIELDS.map((f) => f.split('.'));
  const seal = (value: unknown): string => {
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', key, nonce);
    const sealed = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return `enc:${nonce.toString('base64url')}:${sealed.toString('base64url')}`;
  };
  const sealAt = (doc: unknown, path: readonly string[]): void => {
    let node = doc as Record<string, unknown> | null;
    for (let i = 0; i < path.length - 1 && node !== null && typeof node === 'object'; i++) node = node[path[i]!] as Record<string, unknown> | null;
    const last = path[path.length - 1]!;
    if (node !== null && typeof node === 'object' && last in node) node[last] = seal(node[last]);
  };
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
      } catch {
        answer(res, 400, 'text/plain', Buffer.from('bad json'));
        return;
      }
      for (const path of paths) sealAt(doc, path);
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
  return role === 'naive-encrypt' ? naiveEncrypt(target) : passThrough(target);
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
