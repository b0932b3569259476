/**
 * Prometheus metrics (prom-client) served on the admin listener's /metrics. Every label
 * is bounded: route templates (never raw paths), status codes, configuration names,
 * key versions, allowlist entries (never requested hosts), fixed error kinds.
 */
import type * as PromClient from 'prom-client';
import { ANSWER_LEVELS, type RevealCounts } from '../fields/reveal.ts';
import { registerProcessMetrics } from './default-metrics.ts';
import { LOOP_RESOLUTION_MS, LoopDelayMonitor } from './loop-delay.ts';
import { Counter, Gauge, Histogram, Registry } from './prom-client.ts';

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
/** Quantiles of the event-loop delay exported at each scrape; 1 is the largest delay seen. */
const LOOP_QUANTILES = [0.5, 0.9, 0.99, 0.999, 1] as const;
/** Each quantile but the largest as the window's percentile. */
const QUANTILE_PERCENTILES = { 0.5: 50, 0.9: 90, 0.99: 99, 0.999: 99.9 } as const;

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export interface QueueSource {
  readonly depth: number;
  readonly dropped: number;
  readonly written: number;
  readonly inlineBatches: number;
  readonly inlineWriteSeconds: number;
}

export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'route' | 'method' | 'status'>;
  private readonly latency: Histogram<'route' | 'method' | 'status'>;
  private readonly fields: Counter<'configuration' | 'mode' | 'level'>;
  private readonly keyVersions: Counter<'configuration' | 'version'>;
  private readonly forwardLatency: Histogram<'destination' | 'status'>;
  private readonly forwardErrors: Counter<'destination' | 'kind'>;
  readonly stateVersion: Gauge;
  readonly reloadFailures: Counter;
  readonly memoryReleases: Counter;
  readonly controlPlaneUrl: Gauge;
  private readonly relayGuard: Counter<'outcome'>;
  private readonly relayPassthrough: Counter;
  private readonly egressProxy: Counter<'host_rule' | 'status'>;
  private readonly snapshotsRefused: Counter<'reason'>;
  /** Event-loop delay since the previous scrape (perf_hooks, recorded in nanoseconds). */
  private readonly loopDelay = new LoopDelayMonitor();
  /** Disconnects the process metrics' collection observer. */
  private readonly stopProcessMetrics: () => void;
  /** Children by label key, so a request does not re-hash its labels. */
  private readonly requestChildren = new Map<string, { count: PromClient.Counter.Internal; latency: PromClient.Histogram.Internal<'route' | 'method' | 'status'> }>();

  constructor(queue: () => QueueSource | null) {
    const registers = [this.registry];
    this.stopProcessMetrics = registerProcessMetrics(this.registry, 'svc_', this.loopDelay);
    this.requests = new Counter({ name: 'svc_http_requests_total', help: 'HTTP requests by route template, method and status.', labelNames: ['route', 'method', 'status'], registers });
    this.latency = new Histogram({ name: 'svc_http_request_duration_seconds', help: 'HTTP request latency by route template, method and status.', labelNames: ['route', 'method', 'status'], buckets: LATENCY_BUCKETS, registers });
    this.fields = new Counter({
      name: 'svc_fields_total',
      help: 'Field values encrypted or decrypted, by configuration, mode and reveal level (plain, mask, redact, token; empty for encrypt).',
      labelNames: ['configuration', 'mode', 'level'],
      registers,
    });
    this.keyVersions = new Counter({
      name: 'svc_decrypt_key_version_total',
      help: 'Tokens decrypted per key version: when an old version stops appearing it can be retired.',
      labelNames: ['configuration', 'version'],
      registers,
    });
    this.forwardLatency = new Histogram({ name: 'svc_forward_duration_seconds', help: 'Time to the destination\'s response headers, by allowlist entry and status.', labelNames: ['destination', 'status'], buckets: LATENCY_BUCKETS, registers });
    this.forwardErrors = new Counter({ name: 'svc_forward_errors_total', help: 'Forwards that failed, by allowlist entry and kind.', labelNames: ['destination', 'kind'], registers });
    this.relayGuard = new Counter({ name: 'svc_relay_guard_total', help: 'Request bodies the relay guard inspected, and query strings it changed or refused, by outcome: encrypted (it encrypted protected fields), refused (400, 415 or 422), passed.', labelNames: ['outcome'], registers });
    this.relayPassthrough = new Counter({ name: 'svc_relay_passthrough_total', help: 'Relay requests that matched no route.', registers });
    this.egressProxy = new Counter({
      name: 'svc_egress_proxy_requests_total',
      help: 'Egress proxy requests by host rule (the match as configured, or unlisted) and status; a denied or tunnelled CONNECT counts once.',
      labelNames: ['host_rule', 'status'],
      registers,
    });
    this.stateVersion = new Gauge({ name: 'svc_state_version', help: 'Version of the applied state (seed or control-plane snapshot).', registers });
    this.reloadFailures = new Counter({ name: 'svc_state_reload_failures_total', help: 'State reloads that failed and kept the last good state.', registers });
    this.memoryReleases = new Counter({ name: 'svc_idle_memory_releases_total', help: 'Full collections run after the event loop was idle for server.idle_memory_release, returning unused heap to the operating system.', registers });
    this.controlPlaneUrl = new Gauge({
      name: 'svc_sync_control_plane_url',
      help: 'On a replica, the position (from 0) in state.control_plane.url of the instance that answered the last good poll; -1 before one, and elsewhere.',
      registers,
    });
    this.controlPlaneUrl.set(-1);
    this.snapshotsRefused = new Counter({
      name: 'svc_sync_snapshots_refused_total',
      help: 'Control-plane snapshots a replica refused, by reason (invalid, mac, digest, version, older, store).',
      labelNames: ['reason'],
      registers,
    });
    const loopDelay = this.loopDelay;
    new Gauge({
      name: 'svc_event_loop_delay_seconds',
      help: 'How late the event loop ran timers, by quantile (1 is the largest), since the previous scrape: every request waits this long on top of its own work.',
      labelNames: ['quantile'],
      registers,
      collect() {
        const window = loopDelay.window();
        // The monitor records the time between two runs of its timer, which is the
        // resolution itself when the loop is never late: the delay is what exceeds it (an
        // empty window is all zeros, no delay).
        for (const q of LOOP_QUANTILES) {
          const interval = q === 1 ? window.max : window.percentiles[QUANTILE_PERCENTILES[q]];
          this.set({ quantile: String(q) }, Math.max(0, interval / 1e6 - LOOP_RESOLUTION_MS) / 1e3);
        }
      },
    });
    new Gauge({
      name: 'svc_log_queue_depth',
      help: 'Log entries waiting to be written to the store.',
      registers,
      collect() {
        this.set(queue()?.depth ?? 0);
      },
    });
    new Gauge({
      name: 'svc_log_entries_dropped',
      help: 'Log entries dropped because the queue was full, since start.',
      registers,
      collect() {
        this.set(queue()?.dropped ?? 0);
      },
    });
    new Gauge({
      name: 'svc_log_entries_written',
      help: 'Log entries written to the store, since start.',
      registers,
      collect() {
        this.set(queue()?.written ?? 0);
      },
    });
    new Gauge({
      name: 'svc_log_inline_batches',
      help: 'Log batch writes made on the event loop (logs.writer: inline), refused ones included, since start.',
      registers,
      collect() {
        this.set(queue()?.inlineBatches ?? 0);
      },
    });
    new Gauge({
      name: 'svc_log_inline_write_seconds',
      help: 'Seconds the event loop spent writing log batches (logs.writer: inline), since start; requests in flight wait for each batch.',
      registers,
      collect() {
        this.set(queue()?.inlineWriteSeconds ?? 0);
      },
    });
  }

  observeRequest(route: string, method: string, status: number, seconds: number): void {
    const m = METHODS.has(method) ? method : 'OTHER';
    const key = `${route}|${m}|${status}`;
    let child = this.requestChildren.get(key);
    if (child === undefined) {
      const labels = { route, method: m, status: String(status) };
      child = { count: this.requests.labels(labels), latency: this.latency.labels(labels) };
      this.requestChildren.set(key, child);
    }
    child.count.inc();
    child.latency.observe(seconds);
  }

  /**
   * Encrypted values, or values a decrypt handled without reveal counts. `level` is empty:
   * an encrypt shows nothing to anyone (DESIGN §14 counts what decrypts show).
   */
  countFields(configuration: string, mode: string, count: number): void {
    if (count > 0) this.fields.inc({ configuration, mode, level: '' }, count);
  }

  /** A decrypt's values by the level they were answered at (`token`: left as they were). */
  countRevealed(configuration: string, counts: RevealCounts): void {
    for (const level of ANSWER_LEVELS) {
      const n = counts[level];
      if (n > 0) this.fields.inc({ configuration, mode: 'decrypt', level }, n);
    }
  }

  countKeyVersions(configuration: string, versions: ReadonlyMap<number, number>): void {
    for (const [version, count] of versions) this.keyVersions.inc({ configuration, version: String(version) }, count);
  }

  observeForward(destination: string, status: number, seconds: number): void {
    this.forwardLatency.observe({ destination, status: String(status) }, seconds);
  }

  countGuard(outcome: 'encrypted' | 'refused' | 'passed'): void {
    this.relayGuard.inc({ outcome });
  }

  countPassthrough(): void {
    this.relayPassthrough.inc();
  }

  /** `hostRule`: a configured `match` (bounded by the file) or `unlisted`. */
  countEgressProxy(hostRule: string, status: number): void {
    this.egressProxy.inc({ host_rule: hostRule, status: String(status) });
  }

  countForwardError(destination: string, kind: 'unreachable' | 'timeout' | 'refused'): void {
    this.forwardErrors.inc({ destination, kind });
  }

  countSnapshotRefused(reason: 'invalid' | 'mac' | 'digest' | 'version' | 'older' | 'store'): void {
    this.snapshotsRefused.inc({ reason });
  }

  /** A request (not a health check or a scrape) has started: the delay monitor runs while there are any. */
  requestStarted(): void {
    this.loopDelay.requestStarted();
  }

  /** A request `requestStarted` counted has ended. */
  requestEnded(): void {
    this.loopDelay.requestEnded();
  }

  /** Stops the event-loop delay monitor's timer. */
  close(): void {
    this.loopDelay.close();
    this.stopProcessMetrics();
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
