/**
 * The process's one event-loop delay monitor, read in windows: each scrape sees what the
 * loop did since the previous one. Two metric families report it: the service's own
 * `svc_event_loop_delay_seconds` (metrics.ts) and prom-client's `nodejs_eventloop_lag_*`
 * set (default-metrics.ts). Each used to run its own monitor, a timer every 10 ms apiece
 * (the two fired together).
 *
 * Both families are read in the same synchronous pass over the registry, so the first
 * read of a scrape closes the window (takes its figures and resets the monitor) and every
 * later read in that pass gets the same figures; the next pass opens a new one.
 *
 * The monitor runs while the service has requests to serve. When a check (every second)
 * finds that no request started since the previous one and none is in flight, it stops,
 * one to two seconds after the last request ended; the next request starts it again: the
 * loop's delay matters to the requests that wait on it, and a monitor timer every 10 ms
 * was nearly all an idle service did (100 wake-ups a second, about 0.6% of a core,
 * against one a second and under 0.05% without it). A window with no samples reads as no
 * delay (all zeros). Health checks and scrapes are not requests here (app.ts).
 */
import { monitorEventLoopDelay, type ELDHistogram } from 'node:perf_hooks';

/** How often the monitor's timer fires (milliseconds): a stall is measured whatever its length. */
export const LOOP_RESOLUTION_MS = 10;
/** How often the monitor checks whether it still has requests to watch (milliseconds). */
export const PAUSE_CHECK_MS = 1_000;

/**
 * What the monitor recorded in one window, in nanoseconds, as Node's histogram reports it:
 * each sample is the time between two runs of the timer (the resolution itself when the
 * loop is never late). A window without samples (the monitor was paused) is all zeros,
 * where the histogram would give its own empty values (a minimum of 2^63, a NaN mean).
 */
export interface LoopDelayWindow {
  readonly count: number;
  readonly min: number;
  readonly max: number;
  readonly mean: number;
  readonly stddev: number;
  /** The percentiles the metric families export, by percentile (0–100]. */
  readonly percentiles: Readonly<Record<WindowPercentile, number>>;
}

/** The percentiles a window keeps (the metric families ask for no others). */
export type WindowPercentile = 50 | 90 | 99 | 99.9;

const EMPTY_WINDOW: LoopDelayWindow = Object.freeze({ count: 0, min: 0, max: 0, mean: 0, stddev: 0, percentiles: Object.freeze({ 50: 0, 90: 0, 99: 0, 99.9: 0 }) });

function windowOf(histogram: ELDHistogram): LoopDelayWindow {
  if (histogram.count === 0) return EMPTY_WINDOW;
  return {
    count: histogram.count,
    min: histogram.min,
    max: histogram.max,
    mean: histogram.mean,
    stddev: histogram.stddev,
    percentiles: { 50: histogram.percentile(50), 90: histogram.percentile(90), 99: histogram.percentile(99), 99.9: histogram.percentile(99.9) },
  };
}

export class LoopDelayMonitor {
  readonly #histogram = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  /** The window the current pass over the registry took, until that pass has ended. */
  #taken: LoopDelayWindow | null = null;
  /** Requests started and not yet ended. */
  #inFlight = 0;
  /** A request started since the last check. */
  #started = false;
  #running = false;
  #check: NodeJS.Timeout | null;

  constructor() {
    this.#start();
    this.#check = setInterval(() => {
      if (this.#running && !this.#started && this.#inFlight === 0) {
        this.#histogram.disable();
        this.#running = false;
      }
      this.#started = false;
    }, PAUSE_CHECK_MS);
    // Never what keeps the process alive.
    this.#check.unref();
  }

  /** Whether the monitor's timer is running now (it pauses while there are no requests). */
  get running(): boolean {
    return this.#running;
  }

  /** A request has started: the monitor runs until one to two seconds after the last one ends. */
  requestStarted(): void {
    this.#inFlight++;
    this.#started = true;
    if (!this.#running && this.#check !== null) this.#start();
  }

  /** A request that `requestStarted` counted has ended. */
  requestEnded(): void {
    if (this.#inFlight > 0) this.#inFlight--;
  }

  #start(): void {
    this.#histogram.enable();
    this.#running = true;
  }

  /**
   * The window since the previous pass: the first call of a synchronous pass takes it and
   * starts the next; the calls after it in the same pass get the same one.
   */
  window(): LoopDelayWindow {
    if (this.#taken !== null) return this.#taken;
    const taken = windowOf(this.#histogram);
    this.#histogram.reset();
    this.#taken = taken;
    queueMicrotask(() => {
      this.#taken = null;
    });
    return taken;
  }

  /** Stops the monitor's timer for good. */
  close(): void {
    if (this.#check !== null) clearInterval(this.#check);
    this.#check = null;
    this.#histogram.disable();
    this.#running = false;
  }
}
