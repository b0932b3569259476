/**
 * Gives memory back to the operating system once the service has gone idle
 * (`server.idle_memory_release`, docs/operations.md, "Memory and throughput settings").
 *
 * V8 keeps what a burst of work made it commit: its young generation stays at the size the
 * burst grew it to (8 MiB with the shipped `--max-semi-space-size=4`) and its old
 * generation keeps pages it no longer uses. Node runs no collection while the process
 * sleeps, so a sidecar at rest holds its busiest moment's heap for as long as it stays at
 * rest. After the event loop has been idle for the configured time, and only if there was
 * work since the last release, this runs one full collection of the kind V8 keeps for
 * memory pressure: it compacts the heap and shrinks the young generation, and V8 returns
 * the freed pages: 8 MiB at rest after start, 20 MiB after 100,000 requests (bench/README.md,
 * "Footprint").
 *
 * Work is requests served, health checks and metric scrapes aside: those come every few
 * seconds to a pod at rest, and a release after each would cost a collection each time
 * for nothing. A release also waits for MIN_WORK requests since the last one: a control
 * plane that a replica polls every few seconds, or a service with a request now and then,
 * holds little garbage per request and would otherwise pay a collection per pause. The
 * loop's own activity is not work either: V8's collections, its own included, keep the
 * loop busy for tens of milliseconds, and counting them would have one release follow
 * another.
 *
 * The collection stops the event loop for tens of milliseconds, which is why it waits
 * for idleness: no request served, and the loop busy less than IDLE_UTILIZATION of each
 * second, for the whole window. A request that arrives during it waits that long, once.
 *
 * It keeps the compiled code. Such a collection is several full collections in a row, and
 * V8 drops the bytecode of every function that has not run for six of them: all of the
 * program, since nothing runs while it collects. The next requests would then run
 * recompiled, unoptimised code for seconds (side by side, 0.75–0.90× the requests per
 * CPU-second in the rounds after each release). Code flushing is off while it runs; the
 * memory it gives back is the same without the flush (bench/README.md, "Footprint").
 */
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Logger } from 'pino';

/** A second with the loop busy less than this share of it is an idle second. */
export const IDLE_UTILIZATION = 0.01;
/** How often the loop's utilization is sampled (milliseconds). */
export const SAMPLE_MS = 1_000;
/** Requests served since the last release before another is worth its collection. */
export const MIN_WORK = 100;

/**
 * When to release, from one sample per SAMPLE_MS (the loop's utilization, and the requests
 * served in it): after `idleSamples` consecutive idle samples, once MIN_WORK requests have
 * been served since the last release. A process that stays idle is left alone; the start
 * counts as that much work, so a fresh process releases once it settles.
 */
export class IdleWatch {
  readonly #idleSamples: number;
  #idle = 0;
  #workSinceRelease = MIN_WORK;

  constructor(idleSamples: number) {
    if (!Number.isSafeInteger(idleSamples) || idleSamples < 1) throw new RangeError('idleSamples must be a positive integer');
    this.#idleSamples = idleSamples;
  }

  /**
   * Takes the share of the last sample's time the loop was busy and the requests served in
   * it; true when memory should be released now.
   */
  sample(utilization: number, served: number): boolean {
    this.#workSinceRelease += served;
    if (served > 0 || !(utilization < IDLE_UTILIZATION)) {
      this.#idle = 0;
      return false;
    }
    this.#idle++;
    if (this.#workSinceRelease < MIN_WORK || this.#idle < this.#idleSamples) return false;
    this.#workSinceRelease = 0;
    return true;
  }
}

type Collect = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

/** Whether the process was started with V8's bytecode flushing turned off (then it stays off). */
function flushingOff(): boolean {
  const flags = [...process.execArgv, ...(process.env['NODE_OPTIONS'] ?? '').split(/\s+/)].map((flag) => flag.replaceAll('_', '-'));
  return flags.some((flag) => flag === '--no-flush-bytecode' || flag === '--noflush-bytecode');
}

/** One memory-reducing collection that leaves every function's code in place. */
function releaser(collect: Collect): () => void {
  const restore = flushingOff() ? null : '--flush-bytecode';
  return () => {
    setFlagsFromString('--no-flush-bytecode');
    try {
      collect({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    } finally {
      if (restore !== null) setFlagsFromString(restore);
    }
  };
}

/**
 * V8's collection function, without exposing it to the program's global scope: the flag is
 * on only while one throwaway context is made, and that context's `gc` is kept. Null if
 * this Node does not provide it.
 */
function collector(): Collect | null {
  if (found === undefined) found = findCollector();
  return found;
}

/** V8's collection function is one per process: found once. */
let found: Collect | null | undefined;

function findCollector(): Collect | null {
  const exposed = (globalThis as { gc?: unknown }).gc;
  if (typeof exposed === 'function') return exposed as Collect;
  setFlagsFromString('--expose-gc');
  try {
    const gc: unknown = runInNewContext('typeof gc === "function" ? gc : null');
    return typeof gc === 'function' ? (gc as Collect) : null;
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
}

export interface IdleReleaseOptions {
  /** How long the loop must stay idle (milliseconds); 0 disables the release. */
  readonly idleAfter: number;
  /** How many requests have been served so far (health checks and scrapes left out). */
  readonly served: () => number;
  readonly logger: Logger;
  /** Counts each release. */
  readonly onRelease?: () => void;
}

export class IdleMemoryRelease {
  readonly #options: IdleReleaseOptions;
  #timer: NodeJS.Timeout | null = null;

  constructor(options: IdleReleaseOptions) {
    this.#options = options;
  }

  start(): void {
    const { idleAfter, logger } = this.#options;
    if (idleAfter <= 0 || this.#timer !== null) return;
    const collect = collector();
    if (collect === null) {
      logger.warn('server.idle_memory_release: this Node does not provide a full collection; memory is not released when idle');
      return;
    }
    const release = releaser(collect);
    const watch = new IdleWatch(Math.max(1, Math.ceil(idleAfter / SAMPLE_MS)));
    let last: EventLoopUtilization = performance.eventLoopUtilization();
    let lastServed = this.#options.served();
    this.#timer = setInterval(() => {
      const now = performance.eventLoopUtilization();
      const { utilization } = performance.eventLoopUtilization(now, last);
      last = now;
      const served = this.#options.served();
      const servedNow = served - lastServed;
      lastServed = served;
      if (!watch.sample(utilization, servedNow)) return;
      const started = performance.now();
      release();
      // The collection's own time must not count as work: sample from after it.
      last = performance.eventLoopUtilization();
      this.#options.onRelease?.();
      logger.debug({ ms: Math.round((performance.now() - started) * 10) / 10, rss_mib: Math.round(process.memoryUsage.rss() / 104857.6) / 10 }, 'idle: released memory');
    }, SAMPLE_MS);
    // Never what keeps the process alive.
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }
}
