/**
 * Types for prom-client's default-metric files, which src/telemetry/default-metrics.ts
 * imports one by one: prom-client publishes types for its index only. Each file's
 * `module.exports` registers its metrics on a registry, with the options
 * `collectDefaultMetrics` passes it.
 */
declare module 'prom-client/lib/metrics/*' {
  import type { Registry } from 'prom-client';
  const register: (registry: Registry, options: { readonly prefix: string; readonly eventLoopMonitoringPrecision: number }) => void;
  export = register;
}
