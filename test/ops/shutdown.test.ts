import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Agent, request } from 'undici';
import { KEYS, SEED } from '../support/app.ts';
import { startChild } from '../support/child.ts';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

test('SIGTERM during 200 in-flight slow requests: every one completes and the process exits 0', async (t) => {
  // A destination that takes a second to answer, so requests are in flight at the signal.
  let arrived = 0;
  const slow = createServer((req, res) => {
    arrived++;
    req.resume();
    req.on('end', () => setTimeout(() => res.end('{"ok":true}'), 1000));
  });
  slow.listen(0, '127.0.0.1');
  await once(slow, 'listening');
  t.after(() => slow.close());
  const dest = `http://127.0.0.1:${(slow.address() as AddressInfo).port}`;
  const seed = SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${dest}/"] }`);
  const child = await startChild(t, `server: { drain_timeout: 20s }\n${seed}`.replace('server: { drain_timeout: 20s }\n', ''), {});
  const agent = new Agent({ connections: 200, pipelining: 0 });
  t.after(() => agent.close());
  const inflight = Array.from({ length: 200 }, async () => {
    const res = await request(`${child.url}/proxy/payments`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'x-svc-destination': `${dest}/` },
      body: '{"card":{"number":"4111"}}',
    });
    return { status: res.statusCode, body: await res.body.text() };
  });
  while (arrived < 200) await new Promise((r) => setTimeout(r, 10));
  const exited = once(child.process, 'exit');
  child.process.kill('SIGTERM');
  const results = await Promise.all(inflight);
  const [code] = (await exited) as [number | null];
  assert.equal(results.filter((r) => r.status === 200 && r.body === '{"ok":true}').length, 200);
  assert.equal(code, 0, child.output());
  assert.match(child.output(), /"msg":"stopped"/);
});
