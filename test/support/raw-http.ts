/**
 * Test support: an HTTP/1.1 exchange written byte for byte on a raw socket — any method
 * and target spelling, duplicate and odd headers, a body in chosen pieces (each written
 * after a pause, so the service reads them as separate chunks) — and the answer read back
 * with its body de-chunked.
 */
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface RawRequest {
  readonly method?: string;
  readonly target?: string;
  /** In order, duplicates allowed; `host` and `connection: close` are added unless given. */
  readonly headers?: ReadonlyArray<readonly [string, string]>;
  readonly body?: Buffer | string;
  /**
   * How the body is framed: `length` (one `content-length`, the body in one write), or
   * `chunked` with the body cut at `cuts` (offsets), each chunk its own write.
   */
  readonly framing?: { readonly kind: 'length' } | { readonly kind: 'chunked'; readonly cuts: readonly number[] };
}

export interface RawAnswer {
  readonly status: number;
  readonly headers: Map<string, string>;
  readonly body: Buffer;
  /** The whole answer as it came, head and framing included. */
  readonly raw: Buffer;
}

/** Pause between the pieces of a body, so they arrive as separate reads. */
const GAP_MS = 3;

export async function exchange(port: number, request: RawRequest): Promise<RawAnswer> {
  const body = typeof request.body === 'string' ? Buffer.from(request.body, 'utf8') : (request.body ?? null);
  const headers = [...(request.headers ?? [])];
  const names = new Set(headers.map(([name]) => name.toLowerCase()));
  if (!names.has('host')) headers.unshift(['host', 'svc.test']);
  if (!names.has('connection')) headers.push(['connection', 'close']);
  const framing = request.framing ?? { kind: 'length' };
  const pieces: Buffer[] = [];
  if (body !== null && framing.kind === 'length') {
    headers.push(['content-length', String(body.length)]);
    pieces.push(body);
  } else if (body !== null && framing.kind === 'chunked') {
    if (!names.has('transfer-encoding')) headers.push(['transfer-encoding', 'chunked']);
    const cuts = [0, ...framing.cuts.filter((c) => c > 0 && c < body.length), body.length];
    for (let i = 1; i < cuts.length; i++) {
      const part = body.subarray(cuts[i - 1], cuts[i]);
      pieces.push(Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')]));
    }
    pieces.push(Buffer.from('0\r\n\r\n'));
  }
  const head = Buffer.from(`${request.method ?? 'POST'} ${request.target ?? '/'} HTTP/1.1\r\n${headers.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`, 'latin1');
  const raw = await new Promise<Buffer>((resolve, reject) => {
    const got: Buffer[] = [];
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => got.push(d));
    socket.on('end', () => resolve(Buffer.concat(got)));
    socket.on('close', () => resolve(Buffer.concat(got)));
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? resolve(Buffer.concat(got)) : reject(err)));
    socket.once('connect', async () => {
      try {
        if (pieces.length <= 1) {
          socket.write(Buffer.concat([head, ...pieces]));
          return;
        }
        socket.write(head);
        for (const piece of pieces) {
          await sleep(GAP_MS);
          if (socket.destroyed) return;
          socket.write(piece);
        }
      } catch {
        // the service closed the connection early: its answer is what counts
      }
    });
  });
  return parseAnswer(raw);
}

/** Status, headers (names lower-cased, duplicates joined) and the de-chunked body. */
export function parseAnswer(raw: Buffer): RawAnswer {
  // Interim answers (100 Continue) come first: the final one is what counts.
  while (/^HTTP\/1\.[01] 1\d\d /.test(raw.subarray(0, 16).toString('latin1'))) {
    const interim = raw.indexOf('\r\n\r\n');
    if (interim === -1) break;
    raw = raw.subarray(interim + 4);
  }
  const end = raw.indexOf('\r\n\r\n');
  if (end === -1) return { status: 0, headers: new Map(), body: Buffer.alloc(0), raw };
  const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers.set(name, headers.has(name) ? `${headers.get(name)}, ${value}` : value);
  }
  let body = raw.subarray(end + 4);
  if (headers.get('transfer-encoding')?.toLowerCase().includes('chunked')) body = dechunk(body);
  return { status, headers, body, raw };
}

function dechunk(framed: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  while (at < framed.length) {
    const eol = framed.indexOf('\r\n', at);
    if (eol === -1) break;
    const size = Number.parseInt(framed.subarray(at, eol).toString('latin1').split(';')[0]!, 16);
    if (!Number.isFinite(size) || size === 0) break;
    parts.push(framed.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}
