/**
 * The process's one event-loop delay monitor, read in windows: each scrape sees what the
 * loop did since the previous one. Two metric families report it: the service's own
 * `svc_event_loop_delay_seconds` (metrics.ts) and prom-client's `nodejs_eventloop_lag_*`
 * set (default-metrics.ts). Each used to run its own monitor, a timer every 10 ms apiece:
 * about 200 wake-ups a second and most of what an idle service spent on CPU.
 *
 * Both families are read in the same synchronous pass over the registry, so the first
 * read of a scrape closes the window (takes its figures and resets the monitor) and every
 * later read in that pass gets the same figures; the next pass opens a new one.
 */
import { monitorEventLoopDelay, type ELDHistogram } from 'node:perf_hooks';

/** How often the monitor's timer fires (milliseconds): a stall is measured whatever its length. */
export const LOOP_RESOLUTION_MS = 10;

/**
 * What the monitor recorded in one window, in nanoseconds, as Node's histogram reports it:
 * each sample is the time between two runs of the timer (the resolution itself when the
 * loop is never late). An empty window keeps the histogram's own empty values.
 */
export interface LoopDelayWindow {
  readonly count: number;
  readonly min: number;
  readonly max: number;
  readonly mean: number;
  readonly stddev: number;
  /** The percentile `p` (0–100] of the samples: one of WINDOW_PERCENTILES. */
  percentile(p: WindowPercentile): number;
}

/** The percentiles a window keeps (the metric families ask for no others). */
export const WINDOW_PERCENTILES = [50, 90, 99, 99.9] as const;
export type WindowPercentile = (typeof WINDOW_PERCENTILES)[number];

function windowOf(histogram: ELDHistogram): LoopDelayWindow {
  const percentiles = new Map<number, number>(WINDOW_PERCENTILES.map((p) => [p, histogram.percentile(p)]));
  return {
    count: histogram.count,
    min: histogram.min,
    max: histogram.max,
    mean: histogram.mean,
    stddev: histogram.stddev,
    percentile: (p) => percentiles.get(p)!,
  };
}

export class LoopDelayMonitor {
  readonly #histogram = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  /** The window the current pass over the registry took, until that pass has ended. */
  #taken: LoopDelayWindow | null = null;

  constructor() {
    this.#histogram.enable();
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

  /** Stops the monitor's timer. */
  close(): void {
    this.#histogram.disable();
  }
}
