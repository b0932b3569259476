/**
 * What the fuzz tests share (fuzz.test.ts, listeners-fuzz.test.ts): the child's memory
 * after a forced full GC, read through the inspector protocol; the DESIGN §7 error shape;
 * and raw byte streams written to a listener's socket, half-closed, and the statuses of
 * whatever came back.
 *
 * The heap is read through the inspector (`--inspect` on port 0): `HeapProfiler.
 * collectGarbage` then `process.memoryUsage()`. Without a forced GC the figure would be
 * whatever the collector last left behind, and only a very large leak would show. RSS is
 * reported, not asserted: the allocator keeps freed pages, so it says little about leaks.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestContext } from 'node:test';
import type { Child } from '../support/child.ts';

class Inspector {
  readonly #ws: WebSocket;
  #next = 1;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.addEventListener('message', (event) => {
      const msg = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } };
      if (msg.id === undefined) return;
      const waiter = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      if (msg.error !== undefined) waiter?.reject(new Error(msg.error.message));
      else waiter?.resolve(msg.result);
    });
  }

  static async open(url: string): Promise<Inspector> {
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve(), { once: true });
      ws.addEventListener('error', () => reject(new Error(`cannot reach the inspector at ${url}`)), { once: true });
    });
    return new Inspector(ws);
  }

  send(method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  close(): void {
    this.#ws.close();
  }
}

export interface Memory {
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  rss: number;
}

/** Reads a child started with `--inspect=127.0.0.1:0` (see `INSPECT`). */
export interface MemoryReader {
  /** Memory after two full collections (the second frees what the first's finalizers released), `settleMs` after the call. */
  settled(settleMs: number): Promise<Memory>;
}

/** The node flag that lets `openMemoryReader` reach the child. */
export const INSPECT = '--inspect=127.0.0.1:0';

export async function openMemoryReader(t: TestContext, child: Child): Promise<MemoryReader> {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(child.output())?.[1];
  assert.ok(url !== undefined, child.output());
  const inspector = await Inspector.open(url);
  t.after(() => inspector.close());
  return {
    async settled(settleMs) {
      await sleep(settleMs);
      await inspector.send('HeapProfiler.collectGarbage');
      await sleep(200);
      await inspector.send('HeapProfiler.collectGarbage');
      const out = (await inspector.send('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true })) as { result: { value: string } };
      const usage = JSON.parse(out.result.value) as Memory;
      return { heapUsed: usage.heapUsed, external: usage.external, arrayBuffers: usage.arrayBuffers, rss: child.rss() };
    },
  };
}

export function count(map: Record<string, number>, key: string): void {
  map[key] = (map[key] ?? 0) + 1;
}

/** The DESIGN §7 error shape: `{"message": string}`, plus `errors` on 422. Null when it holds. */
export function errorShapeProblem(status: number, contentType: string | undefined, text: string): string | null {
  if (!/^application\/json/.test(contentType ?? '')) return `content-type ${contentType}`;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return 'body is not JSON';
  }
  if (json === null || typeof json !== 'object' || typeof (json as { message?: unknown }).message !== 'string') return 'no string "message"';
  if (status === 422 && typeof (json as { errors?: unknown }).errors !== 'object') return '422 without "errors"';
  return null;
}

export interface RawReply {
  /** Everything the server wrote, as latin1. */
  readonly reply: string;
  /** The status of each answer in it, in order. */
  readonly statuses: readonly number[];
  /** Still open `timeoutMs` after the bytes were sent: destroyed by us. */
  readonly hung: boolean;
}

/**
 * Writes `bytes` in `pieces` writes, half-closes, and waits for the server to close (a
 * reset is one way of closing): a server must answer or close, never hang. With `halfClose`
 * false the connection stays open for writing, as a client waiting for its answers keeps
 * it (a server may take a half-close for a client gone, and drop its request).
 */
export function sendRaw(port: number, bytes: Buffer, pieces: number, timeoutMs: number, halfClose = true): Promise<RawReply> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let hung = false;
    const socket = connect(port, '127.0.0.1');
    const timer = setTimeout(() => {
      hung = true;
      socket.destroy();
    }, timeoutMs);
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      const reply = Buffer.concat(chunks).toString('latin1');
      // JSON bodies cannot hold a raw line break inside a string, so a line that starts
      // with a status line is one (bodies here are the service's own JSON or an echo of a
      // request this side wrote).
      const statuses = [...reply.matchAll(/(?:^|\r\n)HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
      resolve({ reply, statuses, hung });
    });
    socket.on('connect', () => {
      const size = Math.ceil(bytes.length / pieces);
      for (let i = 0; i < bytes.length; i += size) socket.write(bytes.subarray(i, i + size));
      if (halfClose) socket.end();
    });
  });
}

/** Lines the child logged at `error` or `fatal`. */
export function errorLogLines(output: string): string[] {
  return output.split('\n').filter((line) => /"level":(50|60)/.test(line));
}

/** Failures grouped by kind, the first few of each, so one noisy kind cannot hide the others. */
export function describeFailures<F extends { kind: string; detail: string }>(failures: readonly F[], describe: (f: F) => string, perKind = 5): { kinds: Record<string, number>; shown: string } {
  const kinds: Record<string, number> = {};
  const shown: string[] = [];
  for (const f of failures) {
    count(kinds, f.kind);
    if (kinds[f.kind]! <= perKind) shown.push(`#${shown.length + 1} [${f.kind}] ${describe(f)}\n    got: ${f.detail}`);
  }
  return { kinds, shown: shown.join('\n') };
}
