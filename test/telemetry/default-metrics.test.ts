/**
 * The process metrics (src/telemetry/default-metrics.ts): prom-client's default set under
 * the same names, and a garbage-collection histogram that counts every collection, also
 * those Node hands the observer in one batch.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PerformanceObserver } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { registerProcessMetrics } from '../../src/telemetry/default-metrics.ts';
import { LoopDelayMonitor } from '../../src/telemetry/loop-delay.ts';

/** The process metrics on `registry` with a delay monitor of their own; both stop when `stop` is called. */
function processMetrics(registry: Registry): () => void {
  const loop = new LoopDelayMonitor();
  const stop = registerProcessMetrics(registry, 'svc_', loop);
  return () => {
    stop();
    loop.close();
  };
}

test('the process metrics are prom-client\'s default set, name for name', async (t) => {
  const ours = new Registry();
  t.after(processMetrics(ours));
  const theirs = new Registry();
  collectDefaultMetrics({ register: theirs, prefix: 'svc_' });
  const names = async (registry: Registry) => (await registry.getMetricsAsJSON()).map((m) => `${m.name} ${m.type}`).sort();
  assert.deepEqual(await names(ours), await names(theirs));
  assert.ok((await names(ours)).includes('svc_nodejs_gc_duration_seconds histogram'));
  // The event-loop lag set is written here, read from the service's one delay monitor:
  // prom-client's help and aggregation, word for word.
  const lagSet = async (registry: Registry) =>
    (await registry.getMetricsAsJSON()).filter((m) => m.name.startsWith('svc_nodejs_eventloop_lag')).map((m) => `${m.name} ${m.type} ${m.aggregator} ${m.help}`).sort();
  assert.equal((await lagSet(ours)).length, 8);
  assert.deepEqual(await lagSet(ours), await lagSet(theirs));
});

async function collections(registry: Registry): Promise<number> {
  const gc = (await registry.getMetricsAsJSON()).find((m) => m.name === 'svc_nodejs_gc_duration_seconds');
  assert.ok(gc !== undefined);
  return (gc.values as Array<{ metricName?: string; value: number }>).filter((v) => v.metricName === 'svc_nodejs_gc_duration_seconds_count').reduce((sum, v) => sum + v.value, 0);
}

test('every collection is counted, also many that arrive in one observer callback', async (t) => {
  const registry = new Registry();
  t.after(processMetrics(registry));
  let seen = 0;
  let largestBatch = 0;
  const observer = new PerformanceObserver((list) => {
    const n = list.getEntries().length;
    seen += n;
    largestBatch = Math.max(largestBatch, n);
  });
  observer.observe({ entryTypes: ['gc'] });
  t.after(() => observer.disconnect());
  await sleep(50);
  const before = await collections(registry);
  seen = 0;

  // One synchronous stretch of short-lived allocation: many scavenges, delivered together.
  let keep = 0;
  for (let i = 0; i < 300_000; i++) keep += new Array(64).fill(i).length;
  assert.ok(keep > 0);
  await sleep(100);

  assert.ok(largestBatch > 1, `the allocation made ${seen} collections, delivered ${largestBatch} at most in one callback`);
  assert.equal((await collections(registry)) - before, seen);
});

test('the observer stops with the metrics', async () => {
  const registry = new Registry();
  const stop = processMetrics(registry);
  stop();
  const before = await collections(registry);
  let keep = 0;
  for (let i = 0; i < 100_000; i++) keep += new Array(64).fill(i).length;
  assert.ok(keep > 0);
  await sleep(50);
  assert.equal(await collections(registry), before);
});

test('the CPU counters count the process\'s CPU time since registration, all three brought up to date by one scrape', async () => {
  const registry = new Registry();
  const stop = processMetrics(registry);
  try {
    const read = async () => {
      const values = new Map<string, number>();
      for (const metric of await registry.getMetricsAsJSON()) {
        if (metric.name.startsWith('svc_process_cpu_')) values.set(metric.name, (metric.values[0] as { value: number }).value);
      }
      return values;
    };
    const before = await read();
    const spent = process.cpuUsage();
    const until = performance.now() + 60;
    while (performance.now() < until); // CPU time to count
    const used = process.cpuUsage(spent);
    const after = await read();
    const grew = (name: string) => after.get(name)! - before.get(name)!;
    assert.deepEqual([...after.keys()].sort(), ['svc_process_cpu_seconds_total', 'svc_process_cpu_system_seconds_total', 'svc_process_cpu_user_seconds_total']);
    assert.ok(grew('svc_process_cpu_user_seconds_total') >= used.user / 1e6 - 0.005, `user grew ${grew('svc_process_cpu_user_seconds_total')} s over a loop that used ${used.user / 1e6} s`);
    assert.ok(Math.abs(after.get('svc_process_cpu_seconds_total')! - after.get('svc_process_cpu_user_seconds_total')! - after.get('svc_process_cpu_system_seconds_total')!) < 1e-9);
  } finally {
    stop();
  }
});
