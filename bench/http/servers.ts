/**
 * The helper servers of the HTTP benchmarks, each run as its own process so the load
 * generator and the server under test never share an event loop:
 *
 *   node bench/http/servers.ts echo                 answers 200 with the request body
 *   node bench/http/servers.ts discard              counts the body's bytes, answers {"bytes":n}
 *   node bench/http/servers.ts http-proxy-3 <url>   plain pass-through proxy to <url>
 *
 * Started with `fork` (see processes.ts): each listens on 127.0.0.1:0, sends
 * `{ port }` over IPC, and closes when the parent sends 'stop' or goes away.
 */
import { Agent, createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createProxyServer } from 'http-proxy-3';

export type Role = 'echo' | 'discard' | 'http-proxy-3';

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

function handlerFor(role: Role, target: string | undefined): (req: IncomingMessage, res: ServerResponse) => void {
  if (role === 'echo') return echo;
  if (role === 'discard') return discard;
  if (target === undefined) throw new Error('http-proxy-3 needs a target URL');
  return passThrough(target);
}

async function main(): Promise<void> {
  const [role, target] = process.argv.slice(2);
  if (role !== 'echo' && role !== 'discard' && role !== 'http-proxy-3') {
    throw new Error('usage: node bench/http/servers.ts echo|discard|http-proxy-3 [target]');
  }
  const server: Server = createServer({ keepAliveTimeout: KEEP_ALIVE_TIMEOUT, requestTimeout: 0 }, handlerFor(role, target));
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
