/**
 * Load generation for the HTTP benchmarks: autocannon, closed-loop at a fixed connection
 * count or at an `overallRate`, and a small open-loop generator paced evenly in time.
 *
 * Latency percentiles are computed here from every response's own time (autocannon's
 * `response` event gives it as a float in ms). autocannon's summary histogram keeps
 * whole milliseconds, too coarse for a 2 ms budget, and with `overallRate` it adds
 * coordinated-omission fill-ins against a 1 ms expected interval; both of its figures are
 * still kept in the results for reference.
 *
 * Why a paced generator as well: autocannon's `overallRate` gives each connection a quota
 * per second and lets it send that quota back to back as soon as the second starts, all
 * connections together. At half of the maximum rate the server is therefore saturated
 * for about half of every second and idle for the rest, and the p99 is close to the
 * p99 at full load. The paced generator sends one request every 1/rate s (in 1 ms
 * ticks) over a pool of keep-alive connections and times each from its scheduled send,
 * which is what "latency at half load" means for a service receiving independent callers.
 */
import { createRequire } from 'node:module';
import { Pool } from 'undici';

export interface Target {
  readonly url: string;
  readonly method: 'POST';
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
}

export interface Latency {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
  readonly mean: number;
}

export interface LoadResult {
  readonly kind: 'max' | 'rate' | 'paced';
  readonly connections: number;
  /** Requested rate for `rate` and `paced` runs. */
  readonly rate: number | null;
  readonly seconds: number;
  readonly responses: number;
  /** 2xx responses per second of the run. */
  readonly rps: number;
  /** Exact percentiles of 2xx responses, ms. */
  readonly latencyMs: Latency;
  /** autocannon's own figures (whole ms; with a rate, corrected for coordinated omission). */
  readonly autocannon: { rpsAverage: number; p50: number; p99: number } | null;
  readonly non2xx: number;
  readonly errors: number;
}

// autocannon ships no types; this is the part of its API used here.
interface AutocannonResult {
  duration: number;
  latency: { p50: number; p99: number };
  requests: { average: number; total: number };
  non2xx: number;
  errors: number;
  timeouts: number;
}
interface AutocannonInstance extends PromiseLike<AutocannonResult> {
  on(event: 'response', listener: (client: unknown, statusCode: number, bytes: number, responseTime: number) => void): void;
}
type Autocannon = (options: Record<string, unknown>) => AutocannonInstance;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

/** Growable list of float samples without boxing. */
class Samples {
  private data = new Float64Array(1 << 16);
  length = 0;

  push(value: number): void {
    if (this.length === this.data.length) {
      const next = new Float64Array(this.data.length * 2);
      next.set(this.data);
      this.data = next;
    }
    this.data[this.length++] = value;
  }

  summary(): Latency {
    const sorted = this.data.slice(0, this.length).sort();
    const at = (q: number) => round3(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN);
    let sum = 0;
    for (const v of sorted) sum += v;
    return { p50: at(0.5), p90: at(0.9), p99: at(0.99), p999: at(0.999), max: at(1), mean: round3(sum / sorted.length) };
  }
}

export function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}

/**
 * autocannon for `seconds`: as fast as `connections` allow, or at `overallRate` requests
 * per second (autocannon's per-second quotas, see the module comment).
 */
export async function cannon(target: Target, options: { connections: number; seconds: number; overallRate?: number }): Promise<LoadResult> {
  const latencies = new Samples();
  let ok = 0;
  const instance = autocannon({
    url: target.url,
    method: target.method,
    headers: target.headers,
    body: target.body,
    connections: options.connections,
    duration: options.seconds,
    ...(options.overallRate === undefined ? {} : { overallRate: options.overallRate }),
  });
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    if (statusCode >= 200 && statusCode < 300) {
      ok++;
      latencies.push(responseTime);
    }
  });
  const r = await instance;
  return {
    kind: options.overallRate === undefined ? 'max' : 'rate',
    connections: options.connections,
    rate: options.overallRate ?? null,
    seconds: round3(r.duration),
    responses: ok,
    rps: Math.round(ok / r.duration),
    latencyMs: latencies.summary(),
    autocannon: { rpsAverage: Math.round(r.requests.average), p50: r.latency.p50, p99: r.latency.p99 },
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
  };
}

/**
 * Open loop: calls `fire` once every 1/rate s (in 1 ms ticks), `total` times, with the time
 * each call was due, and resolves with the start time once every returned promise settled.
 */
export async function openLoop(total: number, rate: number, fire: (scheduled: number) => Promise<unknown>): Promise<number> {
  const interval = 1000 / rate;
  let sent = 0;
  let done = 0;
  const start = performance.now();
  await new Promise<void>((resolve) => {
    const settle = () => {
      if (++done === total) resolve();
    };
    const tick = () => {
      const now = performance.now();
      while (sent < total && start + sent * interval <= now) {
        const scheduled = start + sent++ * interval;
        fire(scheduled).then(settle, settle);
      }
      if (sent < total) setTimeout(tick, 1);
    };
    tick();
  });
  return start;
}

/**
 * Open-loop load at `rate` requests per second, evenly spaced, for `seconds`. `ready`,
 * if given, runs after the pool's connections are open and before the first paced request (e.g. to start a measurement window on the server).
 */
export async function paced(target: Target, options: { connections: number; seconds: number; rate: number; ready?: () => Promise<void> }): Promise<LoadResult> {
  const url = new URL(target.url);
  const pool = new Pool(url.origin, { connections: options.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const path = `${url.pathname}${url.search}`;
  const headers = { ...target.headers, 'content-type': target.headers['content-type'] ?? 'application/json' };
  const latencies = new Samples();
  const total = Math.round(options.rate * options.seconds);
  let ok = 0;
  let non2xx = 0;
  let errors = 0;

  // Open the connections first so the first second is not spent on handshakes.
  await Promise.all(Array.from({ length: options.connections }, () => pool.request({ origin: url.origin, path, method: target.method, headers, body: target.body }).then((r) => r.body.dump())));
  await options.ready?.();

  const start = await openLoop(total, options.rate, (scheduled) =>
    pool.request({ path, method: target.method, headers, body: target.body }).then(
      async (res) => {
        await res.body.dump();
        // From the scheduled time, not the actual send: a late send is latency too.
        if (res.statusCode >= 200 && res.statusCode < 300) {
          ok++;
          latencies.push(performance.now() - scheduled);
        } else {
          non2xx++;
        }
      },
      () => errors++,
    ),
  );
  const seconds = (performance.now() - start) / 1000;
  await pool.close();
  return {
    kind: 'paced',
    connections: options.connections,
    rate: options.rate,
    seconds: round3(seconds),
    responses: ok,
    rps: Math.round(ok / seconds),
    latencyMs: latencies.summary(),
    autocannon: null,
    non2xx,
    errors,
  };
}
