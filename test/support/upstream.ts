/**
 * Test support: the application behind the relay, a real HTTP server on port 0 that
 * records every request and answers with an echo (or a given answer), and a raw client
 * for request targets fetch would normalize.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import type { TestContext } from 'node:test';

export interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: Buffer;
}

export type Answer = (req: IncomingMessage, body: Buffer, res: ServerResponse) => void;

/** The application behind the relay: records each request; answers with `answer` (default: echo as JSON). */
export async function startUpstream(t: TestContext, answer?: Answer): Promise<{ url: string; seen: Seen[]; sockets: Set<Socket> }> {
  const seen: Seen[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders, body });
      if (answer !== undefined) return answer(req, body, res);
      res.writeHead(200, { 'content-type': 'application/json', 'x-app': 'yes' });
      res.end(body);
    });
  });
  // A WebSocket endpoint that is not one: it accepts any upgrade and echoes raw bytes.
  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    sockets.add(socket);
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.alloc(0) });
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n');
    if (head.length > 0) socket.write(head);
    socket.on('data', (d: Buffer) => socket.write(d));
    socket.on('error', () => {});
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(
    () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, sockets };
}

/** Sends bytes exactly as given (fetch would normalize the path and headers). */
export function rawRequest(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // Written, not ended: a half-closed client counts as gone.
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let got = '';
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
  });
}

