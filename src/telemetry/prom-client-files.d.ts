/**
 * Types for the prom-client files the service imports one by one (src/telemetry/prom-client.ts,
 * src/telemetry/default-metrics.ts): prom-client publishes types for its index only. Each
 * class file's `module.exports` is the class its index exports under the same name; each
 * default-metric file's registers its metrics on a registry, with the options
 * `collectDefaultMetrics` passes it.
 */
declare module 'prom-client/lib/registry.js' {
  import type { Registry } from 'prom-client';
  const RegistryClass: typeof Registry;
  export = RegistryClass;
}

declare module 'prom-client/lib/counter.js' {
  import type { Counter } from 'prom-client';
  const CounterClass: typeof Counter;
  export = CounterClass;
}

declare module 'prom-client/lib/gauge.js' {
  import type { Gauge } from 'prom-client';
  const GaugeClass: typeof Gauge;
  export = GaugeClass;
}

declare module 'prom-client/lib/histogram.js' {
  import type { Histogram } from 'prom-client';
  const HistogramClass: typeof Histogram;
  export = HistogramClass;
}

declare module 'prom-client/lib/metrics/*' {
  import type { Registry } from 'prom-client';
  const register: (registry: Registry, options: { readonly prefix: string; readonly eventLoopMonitoringPrecision: number }) => void;
  export = register;
}
