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
import { errors as undiciErrors, type Pool } from 'undici';
import type { Child } from '../support/child.ts';
import { FULL } from './scale.ts';

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

// ---------------------------------------------------------------------------------------
// Memory bounds

/**
 * Heap growth allowed between the warm-up and the end, after a full GC. Legitimate
 * growth is bounded state the warm-up may not have filled yet: the compiled
 * `x-svc-fields` cache (512 entries, each header at most 8 KiB), the caller cache (1,024),
 * and the login lockout table (at most 10,000 emails). A leak of 100 bytes per request is
 * 10 MiB over a 100,000-request run, so 8 MiB catches it there; in the short forms the
 * same bound only catches gross leaks (5 KiB per request).
 */
const HEAP_BOUND = 8 * 1024 * 1024;
/**
 * The same for memory outside the JS heap (Buffers). The cached compiled field paths keep
 * their keys as small Buffers, each a slice of an 8 KiB pool slab that it keeps alive: a
 * few MiB across the cache's 512 entries, reached only as entries are replaced over time.
 */
const EXTERNAL_BOUND = 8 * 1024 * 1024;
/**
 * Growth allowed over the second half of the measured run, after the first half has
 * filled every bounded cache: a steady leak shows here (4 MiB over 50,000 requests is 84
 * bytes each).
 */
const HALF_BOUND = 4 * 1024 * 1024;

/** Memory back to the warm-up level within the bounds above, and flat over the second half. */
export function assertMemoryBounded(baseline: Memory, middle: Memory, after: Memory): void {
  for (const [name, field, bound] of [['heap', 'heapUsed', HEAP_BOUND], ['external memory', 'external', EXTERNAL_BOUND]] as const) {
    assert.ok(after[field] - baseline[field] <= bound, `${name} grew from ${baseline[field]} bytes after the warm-up to ${after[field]} at the end`);
    assert.ok(after[field] - middle[field] <= HALF_BOUND, `${name} grew from ${middle[field]} bytes halfway to ${after[field]} at the end`);
  }
}

// ---------------------------------------------------------------------------------------
// HTTP requests

/** Answers Node's parser sends itself before any route runs (src/http/listener.ts): no request id there. */
const PARSER_MESSAGES = new Set(['Bad request.', 'Request header fields too large.', 'Request timeout.']);
const PARSER_STATUSES = new Set([400, 408, 431]);

export interface Sendable {
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: Buffer | null;
}

export interface Answered {
  readonly kind: 'answered';
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
  /** The first value of a response header. */
  header(name: string): string | undefined;
}

export type HttpOutcome = Answered | { readonly kind: 'failed'; readonly failure: string; readonly detail: string } | { readonly kind: 'refused mid-upload' };

/**
 * Sends `c` through the pool and reads the whole answer. A close while the body was still
 * being sent counts as answered when the service refuses the request from its head alone
 * (`refusedEarly`); with `parserOnly`, only when Node's parser does.
 */
export async function sendHttp(pool: Pool, c: Sendable, timeoutMs: number, parserOnly: boolean): Promise<HttpOutcome> {
  let res: Awaited<ReturnType<Pool['request']>>;
  try {
    res = await pool.request({ path: c.path, method: c.method as 'GET', headers: c.headers, body: c.body ?? undefined, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  } catch (err) {
    const e = err as Error & { code?: string };
    if (e instanceof undiciErrors.HeadersTimeoutError) return { kind: 'failed', failure: 'hang', detail: `no answer in ${timeoutMs} ms` };
    if (e instanceof undiciErrors.InvalidArgumentError || e.code === 'ERR_ASSERTION') return { kind: 'failed', failure: 'unsendable (harness)', detail: `undici refused it: ${e.message}` };
    if (['EPIPE', 'ECONNRESET', 'UND_ERR_SOCKET'].includes(e.code ?? '') && c.body !== null && (await refusedEarly(pool, c, timeoutMs, parserOnly))) return { kind: 'refused mid-upload' };
    return { kind: 'failed', failure: 'no response', detail: `${e.code ?? e.name}: ${e.message}` };
  }
  try {
    const text = await res.body.text();
    const headers = res.headers;
    return { kind: 'answered', status: res.statusCode, headers, text, header: (name) => (Array.isArray(headers[name]) ? headers[name][0] : (headers[name] as string | undefined)) };
  } catch (err) {
    return { kind: 'failed', failure: 'response cut', detail: `status ${res.statusCode}, then ${(err as Error).message}` };
  }
}

/**
 * Whether the service refuses `c` from its head alone (sent again without a body): such a
 * request is answered 4xx and the connection closed at once, so a client still uploading
 * a large body may see the close (EPIPE, reset) before the answer. The server answered or
 * closed, which is all that is asked of it.
 */
async function refusedEarly(pool: Pool, c: Sendable, timeoutMs: number, parserOnly: boolean): Promise<boolean> {
  try {
    const res = await pool.request({ path: c.path, method: c.method as 'GET', headers: c.headers, body: Buffer.alloc(0), headersTimeout: timeoutMs });
    const text = await res.body.text();
    if (res.headers['connection'] !== 'close') return false;
    if (!parserOnly) return res.statusCode >= 400 && res.statusCode < 500;
    return PARSER_STATUSES.has(res.statusCode) && PARSER_MESSAGES.has((JSON.parse(text) as { message?: string }).message ?? '');
  } catch {
    return false;
  }
}

/**
 * What is wrong with an answer to `c` by DESIGN §7: a 5xx; no `x-svc-request-id` (but for
 * what Node's parser answers before any route runs); an error of the service's own
 * (`relayed` false) that is not `{"message"}`. Empty when nothing is.
 */
export function answerProblems(c: Sendable, a: Answered, relayed: boolean): Array<{ kind: string; detail: string }> {
  if (a.status >= 500) return [{ kind: `${a.status}`, detail: a.text.slice(0, 300) }];
  const problems: Array<{ kind: string; detail: string }> = [];
  let message: string | undefined;
  try {
    message = (JSON.parse(a.text) as { message?: string }).message;
  } catch {
    message = undefined;
  }
  // HEAD gets no body to say so, but it gets `connection: close`.
  const fromParser = PARSER_STATUSES.has(a.status) && a.header('connection') === 'close' && (c.method === 'HEAD' || (message !== undefined && PARSER_MESSAGES.has(message)));
  if (a.header('x-svc-request-id') === undefined && !fromParser) problems.push({ kind: 'no x-svc-request-id', detail: `status ${a.status}` });
  if (a.status >= 400 && !relayed && c.method !== 'HEAD') {
    const problem = errorShapeProblem(a.status, a.header('content-type'), a.text);
    if (problem !== null) problems.push({ kind: 'error body', detail: `status ${a.status}: ${problem}: ${a.text.slice(0, 200)}` });
  }
  return problems;
}

/** Runs every case, `concurrency` at a time, each in `inFlight` while it runs (to name them if the service dies). */
export async function runConcurrently<C>(cases: readonly C[], concurrency: number, inFlight: Set<C>, run: (c: C) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      inFlight.add(c);
      await run(c);
      inFlight.delete(c);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

export interface PhasedRun {
  /** Memory after the warm-up, halfway through the measured requests, and at the end (the baseline again if the child died). */
  readonly baseline: Memory;
  readonly middle: Memory;
  readonly after: Memory;
  /** Seconds the measured requests took, memory readings left out. */
  readonly seconds: number;
  readonly peakRss: number;
}

/**
 * A warm-up of `warmup` cases, a memory reading, the measured `requests` in two halves
 * with a reading after each. `run(firstBatch, total)` sends `total` cases in batches
 * numbered from `firstBatch` (each batch's number seeds its sample); `alive` says whether
 * the child still runs.
 */
export async function runInPhases(o: { warmup: number; requests: number; batch: number; settleMs: number; memory: MemoryReader; child: Child; alive: () => boolean; run: (firstBatch: number, total: number) => Promise<void> }): Promise<PhasedRun> {
  await o.run(0, o.warmup);
  const baseline = await o.memory.settled(o.settleMs);
  const measuredFrom = performance.now();
  const firstBatch = Math.ceil(o.warmup / o.batch);
  const half = Math.floor(o.requests / 2);
  await o.run(firstBatch, half);
  const measuredSeconds = (performance.now() - measuredFrom) / 1000;
  const middle = o.alive() ? await o.memory.settled(o.settleMs) : baseline;
  const resumedAt = performance.now();
  await o.run(firstBatch + Math.ceil(half / o.batch), o.requests - half);
  const seconds = measuredSeconds + (performance.now() - resumedAt) / 1000;
  const peakRss = o.alive() ? o.child.peakRss() : 0;
  const after = o.alive() ? await o.memory.settled(o.settleMs) : baseline;
  return { baseline, middle, after, seconds, peakRss };
}

/** The `RELIABILITY` figures of a phased run's memory, in MiB. */
function memoryFigures(p: PhasedRun): Record<string, Record<string, number>> {
  const mib = (bytes: number) => +(bytes / 2 ** 20).toFixed(2);
  return {
    heap_used_mib: { after_warmup: mib(p.baseline.heapUsed), halfway: mib(p.middle.heapUsed), end: mib(p.after.heapUsed) },
    external_mib: { after_warmup: mib(p.baseline.external), halfway: mib(p.middle.external), end: mib(p.after.external) },
    rss_mib: { after_warmup: mib(p.baseline.rss), halfway: mib(p.middle.rss), end: mib(p.after.rss), peak: mib(p.peakRss) },
  };
}

/** Counts of statuses keyed `… 503`: the 5xx among them, and all of them sorted. */
function statusFigures(statuses: Record<string, number>): { status_5xx: number; statuses: Record<string, number> } {
  return {
    status_5xx: Object.entries(statuses).filter(([s]) => /(^|\s)5\d\d$/.test(s)).reduce((n, [, v]) => n + v, 0),
    statuses: Object.fromEntries(Object.entries(statuses).sort()),
  };
}

export interface RunSummary<F> {
  readonly part: string;
  readonly seed: number;
  readonly warmup: number;
  readonly requests: number;
  readonly concurrency: number;
  /** `performance.now()` when the test began. */
  readonly started: number;
  /** The figures of this fuzz alone, between the common ones. */
  readonly counts: Record<string, unknown>;
  readonly statuses: Record<string, number>;
  readonly families: Record<string, Record<string, number>>;
  readonly failures: readonly F[];
  readonly describe: (f: F) => string;
  readonly errorLogs: readonly string[];
  readonly phased: PhasedRun;
}

/**
 * The end of a fuzz run: its figures printed (a `RELIABILITY` line in the full form, a
 * diagnostic in the short), then no failure, no error logged, and memory within bounds.
 */
export function concludeRun<F extends { kind: string; detail: string }>(t: TestContext, o: RunSummary<F>): void {
  const figures = {
    part: o.part,
    form: FULL ? 'full' : 'short',
    seed: o.seed,
    requests: o.warmup + o.requests,
    measured_requests: o.requests,
    warmup_requests: o.warmup,
    ...o.counts,
    concurrency: o.concurrency,
    requests_per_second: Math.round(o.requests / o.phased.seconds),
    ...statusFigures(o.statuses),
    by_family: o.families,
    failures: o.failures.length,
    error_log_lines: o.errorLogs.length,
    crashed: false,
    ...memoryFigures(o.phased),
    wall_seconds: Math.round((performance.now() - o.started) / 1000),
  };
  if (FULL) console.log(`RELIABILITY ${JSON.stringify(figures)}`);
  else t.diagnostic(JSON.stringify(figures));
  const { kinds, shown } = describeFailures(o.failures, o.describe);
  assert.equal(o.failures.length, 0, `${o.failures.length} failures (seed ${o.seed}) by kind ${JSON.stringify(kinds)}:\n${shown}`);
  assert.equal(o.errorLogs.length, 0, `the service logged errors:\n${o.errorLogs.slice(0, 10).join('\n')}`);
  assertMemoryBounded(o.phased.baseline, o.phased.middle, o.phased.after);
}
