/**
 * Mistakes answer loudly (DESIGN §13): an `x-svc-` header svc-sidecar does not know is a 400
 * with the nearest known name, never a silent fallback; every transform's answer says how
 * many fields it transformed.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, startApp } from '../support/app.ts';
import { startEcho } from '../support/destinations.ts';
import { editDistance, nearestName } from '../../src/util/nearest.ts';

test('a misspelt x-svc- header is refused with the name it most likely meant, on /proxy, the data endpoints and the management API', async (t) => {
  const { url } = await startApp(t);
  const body = JSON.stringify({ card: { number: '4111' }, ssn: '123-45-6789' });
  const cases: Array<[string, string, string]> = [
    ['/proxy/payments', 'x-svc-field', 'Unknown header x-svc-field. Did you mean x-svc-fields?'],
    ['/proxy/payments', 'x-svc-classificaton', 'Unknown header x-svc-classificaton. Did you mean x-svc-classification?'],
    ['/api/v3/encryption/payments/encrypt', 'X-SVC-FEILDS', 'Unknown header x-svc-feilds. Did you mean x-svc-fields?'],
    ['/api/v3/encryption/payments/decrypt', 'x-svc-destinaton', 'Unknown header x-svc-destinaton. Did you mean x-svc-destination?'],
    ['/api/v3/encryption/payments/encrypt', 'x-svc-something-else', 'Unknown header x-svc-something-else.'],
    ['/api/v3/classifications', 'x-svc-requestid', 'Unknown header x-svc-requestid. Did you mean x-svc-request-id?'],
  ];
  for (const [path, header, message] of cases) {
    const res = await call(url, path, { body, headers: { [header]: 'ssn' } });
    assert.equal(res.status, 400, `${path} ${header}`);
    assert.equal(res.json.message, message);
  }
  // The same request with the right name does what it says.
  const right = await call(url, '/proxy/payments', { body, headers: { 'x-svc-fields': 'ssn' } });
  assert.equal(right.status, 200);
  assert.ok(!right.text.includes('123-45-6789'));
  // Health and other paths do not care about x-svc- headers.
  assert.equal((await fetch(`${url}/healthz`, { headers: { 'x-svc-field': 'x' } })).status, 200);
});

test('every transform answer carries x-svc-fields-transformed: encrypt, decrypt, rewrap, /proxy forwarding both ways, egress', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(t, `
egress:
  - { name: vendor, destination: "${echo.url}", configuration: payments, request: { decrypt: [] } }`);
  const body = JSON.stringify({ a: 'x', b: 'y', c: null, items: [{ e: 'p' }, { e: 'q' }] });
  const enc = await call(url, '/api/v3/encryption/payments/encrypt', { body, headers: { 'x-svc-fields': 'a, b, c, items.*.e' } });
  assert.equal(enc.status, 200);
  assert.equal(enc.headers.get('x-svc-fields-transformed'), '4', 'null is not encrypted');
  const dec = await call(url, '/api/v3/encryption/payments/decrypt', { body: enc.text });
  assert.equal(dec.headers.get('x-svc-fields-transformed'), '4');
  const none = await call(url, '/api/v3/encryption/payments/encrypt', { body, headers: { 'x-svc-fields': 'missing' } });
  assert.equal(none.headers.get('x-svc-fields-transformed'), '0', 'nothing matched: zero, said out loud');
  const rewrap = await call(url, '/api/v3/encryption/payments/rewrap', { body: enc.text });
  assert.equal(rewrap.headers.get('x-svc-fields-transformed'), '0', 'every token already at the newest version');
  const proxied = await call(url, '/proxy/payments', { body, headers: { 'x-svc-fields': 'a' } });
  assert.equal(proxied.headers.get('x-svc-fields-transformed'), '1');
  const egress = await fetch(`${url}/egress/vendor/x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: enc.text });
  assert.equal(egress.status, 201);
  assert.equal(egress.headers.get('x-svc-fields-transformed'), '4');
  assert.equal(JSON.parse(echo.received[0]!.body.toString()).a, 'x');
});

test('nearest: within two edits (fewer for short names), the closest wins; a swap is one edit', () => {
  assert.equal(editDistance('kitten', 'sitting', 10), 3);
  assert.equal(editDistance('abc', 'abc', 10), 0);
  assert.equal(editDistance('abcdef', 'x', 3), 3);
  assert.equal(editDistance('x-svc-feilds', 'x-svc-fields', 10), 1);
  assert.equal(nearestName('listn', ['listen', 'admin_listen']), 'listen');
  assert.equal(nearestName('lis', ['listen']), undefined);
  assert.equal(nearestName('x-svc-mod', ['x-svc-mode', 'x-svc-fields']), 'x-svc-mode');
});
