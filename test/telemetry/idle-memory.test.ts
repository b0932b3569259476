/**
 * server.idle_memory_release: one full collection once the event loop has gone idle after
 * work (requests served, health checks and scrapes aside), and never while it is busy or
 * stays idle. The rule is checked on its own; the real
 * service is checked for the release, what it gives back, and its metric.
 */
import { describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { IDLE_UTILIZATION, IdleWatch, MIN_WORK } from '../../src/telemetry/idle-memory.ts';
import { startChild, type Child } from '../support/child.ts';

describe('IdleWatch', () => {
  /** A second with no request served and a quiet loop. */
  const idle = [0, 0] as const;
  /** Enough requests served for a release. */
  const work = [0.5, MIN_WORK] as const;
  /** The loop busy with no request served: a collection, a timer. */
  const busy = [0.5, 0] as const;
  const run = (watch: IdleWatch, samples: ReadonlyArray<readonly [number, number]>) => samples.flatMap(([u, served], i) => (watch.sample(u, served) ? [i] : []));

  it('releases once the loop has been idle for the whole window after work, then not again while it stays idle', () => {
    assert.deepEqual(run(new IdleWatch(3), [work, idle, idle, idle, idle, idle, idle, idle]), [3]);
  });

  it('counts the start as work: a fresh process releases after its first idle window', () => {
    assert.deepEqual(run(new IdleWatch(2), [idle, idle, idle, idle]), [1]);
  });

  it('starts the window again at any busy sample or request, and releases again only after the next work', () => {
    const samples = [idle, idle, work, idle, idle, busy, idle, idle, idle, idle, work, idle, idle, idle];
    assert.deepEqual(run(new IdleWatch(3), samples), [8, 13]);
  });

  it('never releases for a busy loop alone: the collections after a release cannot cause the next one', () => {
    assert.deepEqual(run(new IdleWatch(2), [idle, idle, busy, idle, idle, busy, idle, idle, busy, idle, idle]), [1]);
  });

  it('adds up requests until there are enough: a poll every few seconds releases once per MIN_WORK of them, not after each', () => {
    const watch = new IdleWatch(2);
    const poll = [0, 1] as const;
    const samples = [idle, idle, ...Array.from({ length: MIN_WORK }, () => [poll, idle, idle, idle] as const).flat()];
    // The start, then one release when the MIN_WORK-th poll has been served and two idle seconds followed.
    const lastPoll = 2 + (MIN_WORK - 1) * 4;
    assert.deepEqual(run(watch, samples), [1, lastPoll + 2]);
  });

  it('takes a request served in a quiet second as work, and a loop at the threshold, or not a number, as busy', () => {
    const watch = new IdleWatch(1);
    assert.equal(watch.sample(0, 0), true);
    assert.equal(watch.sample(0, MIN_WORK), false);
    assert.equal(watch.sample(IDLE_UTILIZATION, 0), false);
    assert.equal(watch.sample(Number.NaN, 0), false);
    assert.equal(watch.sample(IDLE_UTILIZATION - 0.001, 0), true);
    assert.equal(watch.sample(0, 0), false);
  });

  it('refuses a window that is not a positive whole number of samples', () => {
    for (const n of [0, -1, 1.5, Number.NaN]) assert.throws(() => new IdleWatch(n), RangeError);
  });
});

const SEED = `seed:
  configurations: [{ name: payments, proxy_slug: payments }]`;

function adminUrl(child: Child): string {
  const match = /"admin":"([^"]+)"/.exec(child.output());
  assert.ok(match !== null, 'the service logs its admin address');
  return `http://${match[1]}`;
}

async function releases(child: Child): Promise<number> {
  const text = await (await fetch(`${adminUrl(child)}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('svc_idle_memory_releases_total '));
  assert.ok(line !== undefined, 'the metric is exported');
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** Waits for the counter to reach `n`, scraping once a second (a scrape is a few milliseconds of work: below the idle threshold). */
async function until(child: Child, n: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const seen = await releases(child);
    if (seen >= n) {
      assert.equal(seen, n);
      return;
    }
    if (Date.now() > deadline) assert.fail(`the service released ${seen} times in 30 s, expected ${n}\n${child.output()}`);
    await sleep(1_000);
  }
}

test('the service releases memory once idle after start, not again while idle, and again after work', async (t) => {
  const child = await startChild(t, SEED, {}, [], { server: '{ listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0, idle_memory_release: 1s }' });
  // The start's garbage and its young generation (grown to 2 × 4 MiB by loading modules).
  await sleep(300);
  const before = child.rss();
  await until(child, 1);
  const after = child.rss();
  assert.ok(after < before - 2 * 1024 * 1024, `resident memory went from ${(before / 1048576).toFixed(1)} to ${(after / 1048576).toFixed(1)} MiB`);

  // Idle, but scraped and probed: neither is work, and neither is the collection itself
  // nor V8's own collections after it (its memory reducer runs one about 8 s later).
  for (let i = 0; i < 12; i++) {
    await fetch(`${child.url}/healthz`).then((r) => r.arrayBuffer());
    assert.equal(await releases(child), 1);
    await sleep(750);
  }

  // Work (requests that are not health checks), then idle again: fewer than MIN_WORK are
  // not enough, MIN_WORK are.
  const unauthenticated = async (n: number) => {
    for (let i = 0; i < n; i++) assert.equal((await fetch(`${child.url}/api/v3/configurations`)).status, 401);
  };
  await unauthenticated(MIN_WORK - 1);
  await sleep(2_500);
  assert.equal(await releases(child), 1);
  await unauthenticated(1);
  await until(child, 2);
});

test('idle_memory_release: 0 never releases', async (t) => {
  const child = await startChild(t, SEED, {}, [], { server: '{ listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0, idle_memory_release: 0 }' });
  await sleep(3_000);
  assert.equal(await releases(child), 0);
});
