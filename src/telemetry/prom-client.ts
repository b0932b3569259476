/**
 * The parts of prom-client the service uses, loaded file by file. Its index also loads the
 * summary (with tdigest and bintrees), the push-gateway client, the cluster aggregator and
 * every default metric, among them
 * the CPU counters, which load all of `@opentelemetry/api` (51 modules) for exemplars the
 * service never records: about 90 modules in all, read and compiled at every start.
 * Every value from prom-client comes through here; `import type` from 'prom-client' loads
 * nothing. test/ops/loaded-modules.test.ts holds the service to it, and the metrics tests
 * exercise these classes, so a release that moves a file fails the tests. Their types:
 * prom-client-files.d.ts.
 */
import type * as PromClient from 'prom-client';
import CounterClass from 'prom-client/lib/counter.js';
import GaugeClass from 'prom-client/lib/gauge.js';
import HistogramClass from 'prom-client/lib/histogram.js';
import RegistryClass from 'prom-client/lib/registry.js';

export const Registry = RegistryClass;
export type Registry = PromClient.Registry;
export const Counter = CounterClass;
export type Counter<T extends string = string> = PromClient.Counter<T>;
export const Gauge = GaugeClass;
export type Gauge<T extends string = string> = PromClient.Gauge<T>;
export const Histogram = HistogramClass;
export type Histogram<T extends string = string> = PromClient.Histogram<T>;
