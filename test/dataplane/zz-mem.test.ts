import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { once } from 'node:events';
import { KEYS, SEED } from '../support/app.ts';
import { startChild } from '../support/child.ts';
import { startEcho } from '../support/destinations.ts';

const TOTAL = 256 * 1024 * 1024;

/** Writes a JSON array of records of about `total` bytes, respecting backpressure. */
async function writeRecords(req: ReturnType<typeof request>, total: number): Promise<number> {
  const record = (i: number) => `{"id":${i},"name":"Customer ${i}","card":{"number":"4111 1111 1111 ${String(i % 10000).padStart(4, '0')}","exp":"12/28"},"note":"${'x'.repeat(80)}"}`;
  let written = 0;
  let i = 0;
  const write = async (s: string) => {
    written += Buffer.byteLength(s);
    if (!req.write(s)) await once(req, 'drain');
  };
  await write('[');
  while (written < total) {
    let batch = '';
    for (let k = 0; k < 300; k++) batch += (i === 0 ? '' : ',') + record(i++);
    await write(batch);
  }
  await write(']');
  req.end();
  return i;
}

test('a 256 MB body is encrypted and forwarded as a stream with the service under 150 MB RSS', async (t) => {
  const echo = await startEcho(t, { discardBody: true });
  const seed = SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/"] }`);
  // The service runs as its own process so its memory is measured alone.
  const child = await startChild(t, `forwarding: { body_timeout: 120s }
${seed}`, JSON.parse(process.env['CHILDENV'] ?? '{}'));
  const url = child.url;

  const req = request(`${url}/proxy/payments`, {
    method: 'POST',
    headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'x-svc-fields': '*.card.number', 'x-svc-destination': `${echo.url}/bulk` },
  });
  const response = once(req, 'response');
  const records = await writeRecords(req, TOTAL);
  const [res] = (await response) as [import('node:http').IncomingMessage];
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);

  assert.equal(res.statusCode, 201);
  const { bytes } = JSON.parse(Buffer.concat(chunks).toString()) as { bytes: number };
  // Each card number (19 bytes) became a token of about 100 bytes.
  assert.ok(bytes > TOTAL + records * 60, `destination received ${bytes} bytes for ${records} records`);
  const peak = child.peakRss();
  assert.ok(peak > 0);
  assert.ok(peak < 150 * 1024 * 1024, `the service's peak RSS was ${Math.round(peak / 1048576)} MB`);
});
