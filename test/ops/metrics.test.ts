import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, SEED, startApp } from '../support/app.ts';
import { closedPort, startEcho } from '../support/destinations.ts';

function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const ok = Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`));
    if (ok) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

test('metrics after traffic: requests by route template, fields, key versions, forwards, log queue', async (t) => {
  const echo = await startEcho(t);
  const dead = await closedPort();
  const seed = SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/", "http://127.0.0.1:${dead}/"] }`);
  const running = await startApp(t, '', seed, { admin: true });
  const { url } = running;
  const enc = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"a":"1","b":"2"}', headers: { 'x-svc-fields': 'a,b' } });
  await call(url, '/api/v3/encryption/payments/decrypt', { body: enc.text });
  await call(url, '/api/v3/encryption/nope/encrypt', { body: '{}' });
  await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/x/123` } });
  await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `http://127.0.0.1:${dead}/` } });
  await call(url, '/some/random/path/zqx4711zqx', { method: 'GET' });

  const res = await fetch(`${running.adminUrl}/metrics`, { headers: { 'x-svc-request-id': 'scrape-1' } });
  assert.equal(res.headers.get('x-svc-request-id'), 'scrape-1', 'the admin listener answers with the request id too');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type')!, /^text\/plain/);
  const text = await res.text();
  assert.equal(sample(text, 'svc_http_requests_total', { route: '/api/v3/encryption/:slug/encrypt', method: 'POST', status: '200' }), 1);
  assert.equal(sample(text, 'svc_http_requests_total', { route: '/api/v3/encryption/:slug/encrypt', status: '404' }), 1);
  assert.equal(sample(text, 'svc_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }), 1);
  assert.ok((sample(text, 'svc_http_request_duration_seconds_count', { route: '/proxy/:slug', status: '201' }) ?? 0) >= 1);
  assert.equal(sample(text, 'svc_fields_total', { configuration: 'payments', mode: 'encrypt' }), 3);
  assert.equal(sample(text, 'svc_fields_total', { configuration: 'payments', mode: 'decrypt' }), 2);
  assert.equal(sample(text, 'svc_decrypt_key_version_total', { configuration: 'payments', version: '1' }), 2);
  assert.equal(sample(text, 'svc_forward_duration_seconds_count', { destination: `${echo.url}/`, status: '201' }), 1);
  assert.equal(sample(text, 'svc_forward_errors_total', { destination: `http://127.0.0.1:${dead}/`, kind: 'unreachable' }), 1);
  assert.notEqual(sample(text, 'svc_log_queue_depth', {}), undefined);
  assert.equal(sample(text, 'svc_log_entries_dropped', {}), 0);
  assert.equal(sample(text, 'svc_state_version', {}), 1);
  assert.equal(sample(text, 'svc_state_reload_failures_total', {}), 0);
  assert.ok(text.includes('svc_process_resident_memory_bytes'), 'default process metrics');
  // Bounded labels: no raw path, id or key ever becomes a label value.
  assert.ok(!text.includes('zqx4711zqx') && !text.includes('/x/123') && !text.includes('svc_Owner'));
});

test('a stall of the event loop shows at the next scrape, in svc_event_loop_delay_seconds and the nodejs_eventloop_lag set alike, and not at the one after', async (t) => {
  const running = await startApp(t, '', SEED, { admin: true });
  const scrape = async (): Promise<string> => (await fetch(`${running.adminUrl}/metrics`)).text();
  // A request keeps the monitor running (it pauses after a second without one).
  await call(running.url, '/some/random/path', { method: 'GET' });
  await scrape();
  await new Promise((resolve) => setTimeout(resolve, 50));
  // The service runs in this process: a synchronous 80 ms stall here is a stall of its loop.
  const until = performance.now() + 80;
  while (performance.now() < until);
  await new Promise((resolve) => setTimeout(resolve, 30));
  const text = await scrape();
  for (const q of ['0.5', '0.9', '0.99', '0.999', '1']) assert.ok(Number.isFinite(sample(text, 'svc_event_loop_delay_seconds', { quantile: q })), `quantile ${q} is exported`);
  assert.ok(sample(text, 'svc_event_loop_delay_seconds', { quantile: '1' })! >= 0.05, 'the largest delay since the previous scrape includes the stall');
  assert.ok(sample(text, 'svc_event_loop_delay_seconds', { quantile: '0.5' })! <= sample(text, 'svc_event_loop_delay_seconds', { quantile: '1' })!);
  // One monitor serves both families: the scrape's first read of it must not empty the
  // window for the second.
  assert.ok(sample(text, 'svc_nodejs_eventloop_lag_max_seconds', {})! >= 0.05, 'the lag set shows the same stall');
  await new Promise((resolve) => setTimeout(resolve, 100));
  const next = await scrape();
  assert.ok(sample(next, 'svc_event_loop_delay_seconds', { quantile: '1' })! < 0.04, 'a new window starts with each scrape');
  assert.ok(sample(next, 'svc_nodejs_eventloop_lag_max_seconds', {})! < 0.05, 'for the lag set too');
});

test("regression: svc_event_loop_delay_seconds is how late the loop ran, not the monitor's own 10 ms interval", async (t) => {
  const running = await startApp(t, '', SEED, { admin: true });
  const scrape = async (): Promise<string> => (await fetch(`${running.adminUrl}/metrics`)).text();
  await call(running.url, '/some/random/path', { method: 'GET' });
  await scrape();
  // A quiet loop: the monitor's timer runs every 10 ms, on time or nearly.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const text = await scrape();
  const median = sample(text, 'svc_event_loop_delay_seconds', { quantile: '0.5' })!;
  assert.ok(median >= 0 && median < 0.009, `a quiet loop's median delay is ${median} s`);
  assert.ok(sample(text, 'svc_nodejs_eventloop_lag_min_seconds', {})! >= 0.009, 'the monitor ran: the lag set counts its 10 ms interval, as prom-client\'s does');
});

test('the delay monitor pauses while the service has no requests (health checks and scrapes are not requests), and a request starts it again', async (t) => {
  const running = await startApp(t, '', SEED, { admin: true });
  const scrape = async (): Promise<string> => (await fetch(`${running.adminUrl}/metrics`)).text();
  for (let i = 0; i < 4; i++) {
    await fetch(`${running.url}/healthz`);
    await new Promise((resolve) => setTimeout(resolve, 600));
  }
  await scrape();
  await new Promise((resolve) => setTimeout(resolve, 200));
  let text = await scrape();
  assert.equal(sample(text, 'svc_nodejs_eventloop_lag_min_seconds', {}), 0, 'paused: an empty window reads 0');
  assert.equal(sample(text, 'svc_event_loop_delay_seconds', { quantile: '1' }), 0);
  await call(running.url, '/some/random/path', { method: 'GET' });
  await new Promise((resolve) => setTimeout(resolve, 200));
  text = await scrape();
  assert.ok(sample(text, 'svc_nodejs_eventloop_lag_min_seconds', {})! >= 0.009, 'running again after a request');
});

test('/healthz is liveness; /readyz turns 503 as soon as shutdown starts', async (t) => {
  const running = await startApp(t, '', SEED, { admin: true });
  assert.equal((await fetch(`${running.adminUrl}/healthz`)).status, 200);
  assert.equal((await fetch(`${running.url}/readyz`)).status, 200);
  assert.deepEqual(await (await fetch(`${running.adminUrl}/readyz`)).json(), { status: 'ready' });
  running.app.services.health.ready = false;
  const notReady = await fetch(`${running.adminUrl}/readyz`);
  assert.equal(notReady.status, 503);
  assert.deepEqual(await notReady.json(), { message: 'The service is not ready.' });
  assert.equal((await fetch(`${running.adminUrl}/healthz`)).status, 200);
});

test('a not-ready /readyz answers 503 without logging an error or a stack: the probe is doing its job', async (t) => {
  const running = await startApp(t, '', SEED, { admin: true });
  running.app.services.health.ready = false;
  for (const base of [running.url, running.adminUrl!]) assert.equal((await fetch(`${base}/readyz`)).status, 503);
  const entries = running.logs().trim().split('\n').map((line) => JSON.parse(line) as { level: number; code?: string; err?: unknown });
  const notReady = entries.filter((entry) => entry.code === 'SVC_ERR_NOT_READY');
  assert.equal(notReady.length, 2, 'each refusal is still visible at debug level');
  for (const entry of notReady) {
    assert.ok(entry.level < 40, `logged at level ${entry.level}`);
    assert.equal(entry.err, undefined, 'no error object, so no stack');
  }
});

test('svc_log_inline_batches and svc_log_inline_write_seconds count what the event loop spent writing log batches', async (t) => {
  const running = await startApp(t, '', SEED, { admin: true });
  const scrape = async (): Promise<string> => (await fetch(`${running.adminUrl}/metrics`)).text();
  const before = await scrape();
  for (let i = 0; i < 3; i++) {
    await call(running.url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"4242"}}' });
    await running.app.services.logs.flush();
  }
  const after = await scrape();
  const grew = (name: string) => sample(after, name, {})! - sample(before, name, {})!;
  const logs = running.app.services.logs;
  // An in-memory store is always written on the event loop.
  assert.ok(grew('svc_log_inline_batches') >= 3, `batches grew by ${grew('svc_log_inline_batches')}`);
  assert.ok(grew('svc_log_inline_write_seconds') > 0);
  assert.equal(sample(after, 'svc_log_inline_batches', {}), logs.inlineBatches);
  assert.ok(Math.abs(sample(after, 'svc_log_inline_write_seconds', {})! - logs.inlineWriteSeconds) < 1e-9);
});
