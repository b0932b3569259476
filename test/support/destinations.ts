/**
 * Test support: destination servers on port 0 — a recording echo server and raw `net`
 * servers that misbehave on purpose.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';

export interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The client went away before the body was complete. */
  aborted: boolean;
}

export interface Echo {
  readonly url: string;
  readonly port: number;
  readonly received: Received[];
}

export interface EchoOptions {
  readonly status?: number;
  /** Answer `{"bytes": n}` instead of the body, and keep none of it. */
  readonly discardBody?: boolean;
  /** The answer's `content-type` from the request's (absent: none), instead of `application/json`. */
  readonly answerType?: (requestType: string | undefined) => string | undefined;
}

/**
 * Records each request (a body cut short by the client too, as far as it came) and answers
 * 201 with the body it got and a custom header.
 */
export async function startEcho(t: TestContext, options: EchoOptions = {}): Promise<Echo> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const record: Received = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.alloc(0), aborted: false };
    received.push(record);
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (!options.discardBody) chunks.push(c);
    });
    req.on('error', () => (record.aborted = true));
    req.on('close', () => {
      if (req.complete) return;
      record.aborted = true;
      if (!options.discardBody) record.body = Buffer.concat(chunks);
    });
    req.on('end', () => {
      record.body = options.discardBody ? Buffer.from(JSON.stringify({ bytes: size })) : Buffer.concat(chunks);
      const type = options.answerType === undefined ? 'application/json' : options.answerType(req.headers['content-type']);
      res.writeHead(options.status ?? 201, { ...(type === undefined ? {} : { 'content-type': type }), 'x-echo': 'yes', 'set-cookie': ['a=1', 'b=2'] });
      res.end(record.body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}`, port, received };
}

/** A raw TCP server whose behaviour per connection is `onSocket`. */
export async function startRaw(t: TestContext, onSocket: (socket: Socket) => void): Promise<{ port: number; server: NetServer; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    onSocket(socket);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }));
  return { port: (server.address() as AddressInfo).port, server, sockets };
}

/** A port that refuses connections: bound, then closed. */
export async function closedPort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}
