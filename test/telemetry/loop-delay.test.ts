/**
 * The process's one event-loop delay monitor (src/telemetry/loop-delay.ts): one window per
 * pass over the registry, and a timer that runs only while there are requests.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { LOOP_RESOLUTION_MS, LoopDelayMonitor, PAUSE_CHECK_MS } from '../../src/telemetry/loop-delay.ts';

function stall(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

test('one window per synchronous pass: later reads in the pass get the same figures, the next pass a new window', async (t) => {
  const monitor = new LoopDelayMonitor();
  t.after(() => monitor.close());
  monitor.requestStarted();
  await sleep(50);
  stall(60);
  await sleep(30);
  const first = monitor.window();
  assert.ok(first.max >= 60e6, `the window holds the stall: max ${first.max / 1e6} ms`);
  assert.equal(monitor.window(), first, 'the same window within one pass');
  await Promise.resolve();
  await sleep(50);
  const next = monitor.window();
  assert.notEqual(next, first);
  assert.ok(next.max < 40e6, `a new window, without the stall: max ${next.max / 1e6} ms`);
});

test('the monitor pauses after a second without requests, and the next request starts it again', async (t) => {
  const monitor = new LoopDelayMonitor();
  t.after(() => monitor.close());
  assert.equal(monitor.running, true, 'it runs from the start');
  await sleep(2 * PAUSE_CHECK_MS + 200);
  assert.equal(monitor.running, false, 'no request for two checks: paused');
  monitor.window();
  await Promise.resolve();
  await sleep(3 * LOOP_RESOLUTION_MS);
  assert.equal(monitor.window().count, 0, 'a paused monitor records nothing');

  monitor.requestStarted();
  assert.equal(monitor.running, true, 'a request starts it');
  await sleep(100);
  await Promise.resolve();
  const resumed = monitor.window();
  assert.ok(resumed.count > 0, 'it records again');
  assert.ok(resumed.max < 50e6, `the paused time is not taken for a delay: max ${resumed.max / 1e6} ms`);
});

test('a request in flight keeps the monitor running, however long it takes', async (t) => {
  const monitor = new LoopDelayMonitor();
  t.after(() => monitor.close());
  monitor.requestStarted();
  await sleep(2 * PAUSE_CHECK_MS + 200);
  assert.equal(monitor.running, true, 'one long request, no other: still running');
  monitor.requestEnded();
  await sleep(2 * PAUSE_CHECK_MS + 200);
  assert.equal(monitor.running, false, 'ended, then two checks without requests: paused');
});

test('close stops it for good: a request after close does not start it', async () => {
  const monitor = new LoopDelayMonitor();
  monitor.close();
  monitor.requestStarted();
  assert.equal(monitor.running, false);
});
