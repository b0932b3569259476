/**
 * The process metrics every service exports (`svc_process_*`, `svc_nodejs_*`): prom-client's
 * default set, with its garbage-collection histogram replaced by one that counts every
 * collection.
 *
 * prom-client's `nodejs_gc_duration_seconds` records only the first entry of each
 * PerformanceObserver callback, and Node hands an observer every entry queued since its
 * last call: collections that come close together, as scavenges under load do, are
 * mostly not counted (39 collections in one callback in a test, 1 counted). Its observer
 * is also never disconnected. `collectDefaultMetrics` has no option to leave one metric
 * out, so the others are registered one by one from prom-client's files (each takes the
 * registry and the options `collectDefaultMetrics` passes it; their types:
 * prom-client-files.d.ts), imported statically as src/http/undici.ts imports undici's.
 * The CPU counters are written here too: prom-client's file for them loads all of
 * `@opentelemetry/api` (51 modules) at every start, for exemplars the service never records.
 * So is the event-loop lag set: prom-client's runs a delay monitor of its own beside the
 * service's (loop-delay.ts), where one monitor serves both.
 * test/telemetry/default-metrics.test.ts checks that the names are prom-client's own set,
 * so a release that moves or adds a file fails it.
 */
import { PerformanceObserver, constants } from 'node:perf_hooks';
import type * as PromClient from 'prom-client';
import heapSizeAndUsed from 'prom-client/lib/metrics/heapSizeAndUsed.js';
import heapSpacesSizeAndUsed from 'prom-client/lib/metrics/heapSpacesSizeAndUsed.js';
import osMemoryHeap from 'prom-client/lib/metrics/osMemoryHeap.js';
import processHandles from 'prom-client/lib/metrics/processHandles.js';
import processMaxFileDescriptors from 'prom-client/lib/metrics/processMaxFileDescriptors.js';
import processOpenFileDescriptors from 'prom-client/lib/metrics/processOpenFileDescriptors.js';
import processRequests from 'prom-client/lib/metrics/processRequests.js';
import processResources from 'prom-client/lib/metrics/processResources.js';
import processStartTime from 'prom-client/lib/metrics/processStartTime.js';
import version from 'prom-client/lib/metrics/version.js';
import type { LoopDelayMonitor } from './loop-delay.ts';
import { Counter, Gauge, Histogram, type Registry } from './prom-client.ts';

/** prom-client's default metrics (lib/defaultMetrics.js, in its order), all but `processCpuTotal`, `eventLoopLag` and `gc`. */
const PROM_CLIENT_METRICS = [
  processStartTime,
  osMemoryHeap,
  processOpenFileDescriptors,
  processMaxFileDescriptors,
  processResources,
  processHandles,
  processRequests,
  heapSizeAndUsed,
  heapSpacesSizeAndUsed,
  version,
];

const GC_KINDS: Readonly<Record<number, string>> = {
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
/** prom-client's buckets for the same histogram, so dashboards built on it read the same. */
const GC_BUCKETS = [0.001, 0.01, 0.1, 1, 2, 5];

/**
 * Registers the process metrics on `registry`, the event-loop lag set read from `loop`;
 * the returned function stops the collection observer.
 */
export function registerProcessMetrics(registry: Registry, prefix: string, loop: LoopDelayMonitor): () => void {
  const options = { prefix, eventLoopMonitoringPrecision: 10 };
  registerCpuCounters(registry, prefix);
  for (const register of PROM_CLIENT_METRICS) register(registry, options);
  registerEventLoopLag(registry, prefix, loop);
  const gc = new Histogram({
    name: `${prefix}nodejs_gc_duration_seconds`,
    help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
    labelNames: ['kind'],
    buckets: GC_BUCKETS,
    registers: [registry],
  });
  const children = new Map<number, PromClient.Histogram.Internal<'kind'>>();
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as { detail?: { kind?: number } | null }).detail?.kind ?? -1;
      let child = children.get(kind);
      if (child === undefined) {
        child = gc.labels({ kind: GC_KINDS[kind] ?? 'unknown' });
        children.set(kind, child);
      }
      child.observe(entry.duration / 1000);
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return () => observer.disconnect();
}

/**
 * prom-client's `nodejs_eventloop_lag_*` set, under its names, help and values: the lag
 * of one `setImmediate` started at a scrape (reported at the next), and the minimum,
 * maximum, mean, standard deviation and 50th, 90th and 99th percentiles of the monitor's
 * samples since the previous scrape, as Node's histogram gives them (each sample is the
 * time between two runs of its timer); all 0 for a window without samples (the monitor
 * pauses while there are no requests, loop-delay.ts).
 */
function registerEventLoopLag(registry: Registry, prefix: string, loop: LoopDelayMonitor): void {
  const registers = [registry];
  const gauge = (name: string, help: string, aggregator: PromClient.Aggregator) => new Gauge({ name: `${prefix}${name}`, help, registers, aggregator });
  const lag = new Gauge({
    name: `${prefix}nodejs_eventloop_lag_seconds`,
    help: 'Lag of event loop in seconds.',
    registers,
    aggregator: 'average',
    // This one metric's collect sets the whole set, as prom-client's does.
    collect() {
      const start = process.hrtime.bigint();
      setImmediate(() => lag.set(Number(process.hrtime.bigint() - start) / 1e9));
      const window = loop.window();
      min.set(window.min / 1e9);
      max.set(window.max / 1e9);
      mean.set(window.mean / 1e9);
      stddev.set(window.stddev / 1e9);
      p50.set(window.percentiles[50] / 1e9);
      p90.set(window.percentiles[90] / 1e9);
      p99.set(window.percentiles[99] / 1e9);
    },
  });
  const min = gauge('nodejs_eventloop_lag_min_seconds', 'The minimum recorded event loop delay.', 'min');
  const max = gauge('nodejs_eventloop_lag_max_seconds', 'The maximum recorded event loop delay.', 'max');
  const mean = gauge('nodejs_eventloop_lag_mean_seconds', 'The mean of the recorded event loop delays.', 'average');
  const stddev = gauge('nodejs_eventloop_lag_stddev_seconds', 'The standard deviation of the recorded event loop delays.', 'average');
  const p50 = gauge('nodejs_eventloop_lag_p50_seconds', 'The 50th percentile of the recorded event loop delays.', 'average');
  const p90 = gauge('nodejs_eventloop_lag_p90_seconds', 'The 90th percentile of the recorded event loop delays.', 'average');
  const p99 = gauge('nodejs_eventloop_lag_p99_seconds', 'The 99th percentile of the recorded event loop delays.', 'average');
}

/**
 * `process_cpu_user_seconds_total`, `process_cpu_system_seconds_total` and
 * `process_cpu_seconds_total`, as prom-client's processCpuTotal.js counts them: the CPU
 * time since registration, all threads, brought up to date at each scrape.
 */
function registerCpuCounters(registry: Registry, prefix: string): void {
  const registers = [registry];
  let last = process.cpuUsage();
  // Registered first, as prom-client registers it: a scrape reads the metrics in order, and
  // this one's collect brings all three up to date before the other two are read.
  const user = new Counter({
    name: `${prefix}process_cpu_user_seconds_total`,
    help: 'Total user CPU time spent in seconds.',
    registers,
    collect() {
      const now = process.cpuUsage();
      const userSeconds = (now.user - last.user) / 1e6;
      const systemSeconds = (now.system - last.system) / 1e6;
      last = now;
      user.inc(userSeconds);
      system.inc(systemSeconds);
      total.inc(userSeconds + systemSeconds);
    },
  });
  const system = new Counter({ name: `${prefix}process_cpu_system_seconds_total`, help: 'Total system CPU time spent in seconds.', registers });
  const total = new Counter({ name: `${prefix}process_cpu_seconds_total`, help: 'Total user and system CPU time spent in seconds.', registers });
}
