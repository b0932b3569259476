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

test('the process metrics are prom-client\'s default set, name for name', async (t) => {
  const ours = new Registry();
  t.after(registerProcessMetrics(ours, 'svc_'));
  const theirs = new Registry();
  collectDefaultMetrics({ register: theirs, prefix: 'svc_' });
  const names = async (registry: Registry) => (await registry.getMetricsAsJSON()).map((m) => `${m.name} ${m.type}`).sort();
  assert.deepEqual(await names(ours), await names(theirs));
  assert.ok((await names(ours)).includes('svc_nodejs_gc_duration_seconds histogram'));
});

async function collections(registry: Registry): Promise<number> {
  const gc = (await registry.getMetricsAsJSON()).find((m) => m.name === 'svc_nodejs_gc_duration_seconds');
  assert.ok(gc !== undefined);
  return (gc.values as Array<{ metricName?: string; value: number }>).filter((v) => v.metricName === 'svc_nodejs_gc_duration_seconds_count').reduce((sum, v) => sum + v.value, 0);
}

test('every collection is counted, also many that arrive in one observer callback', async (t) => {
  const registry = new Registry();
  t.after(registerProcessMetrics(registry, 'svc_'));
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
  const stop = registerProcessMetrics(registry, 'svc_');
  stop();
  const before = await collections(registry);
  let keep = 0;
  for (let i = 0; i < 100_000; i++) keep += new Array(64).fill(i).length;
  assert.ok(keep > 0);
  await sleep(50);
  assert.equal(await collections(registry), before);
});
