import { cachedDestination } from '../../src/dataplane/destination.ts';
import { DestinationNotAllowedError } from '../../src/errors.ts';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LookupAddress } from 'node:dns';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { call, KEYS, SEED, startApp, type Running } from '../support/app.ts';
import { closedPort, startEcho, startRaw } from '../support/destinations.ts';

const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;

function seedWith(destinations: string[]): string {
  const list = destinations.map((d) => JSON.stringify(d)).join(', ');
  return SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: [${list}] }`);
}

async function startWith(t: Parameters<typeof startApp>[0], destinations: string[], extraYaml = '', resolve?: (h: string, cb: (e: NodeJS.ErrnoException | null, a: LookupAddress[]) => void) => void): Promise<Running> {
  return startApp(t, extraYaml, seedWith(destinations), resolve === undefined ? {} : { resolve });
}

test('/proxy without a destination returns the transformed JSON; x-svc-mode picks the operation', async (t) => {
  const { url } = await startApp(t);
  const enc = await call(url, '/proxy/payments', { body: '{"ssn":"1","n":2}', headers: { 'x-svc-fields': 'ssn' } });
  assert.equal(enc.status, 200);
  assert.match(enc.json.ssn, TOKEN);
  const dec = await call(url, '/proxy/payments', { method: 'PUT', body: enc.text, headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(dec.text, '{"ssn":"1","n":2}');
  const bad = await call(url, '/proxy/payments', { body: '{}', headers: { 'x-svc-mode': 'shred' } });
  assert.equal(bad.status, 400);
  assert.match(bad.json.message, /x-svc-mode/);
  assert.equal((await call(url, '/proxy/payments', { body: '{}', key: null })).status, 401);
  assert.equal((await call(url, '/proxy/nope', { body: '{}' })).status, 404);
});

/** A request through node:http, which (unlike fetch) sends a body with GET and HEAD too. */
function raw(url: string, method: string, headers: Record<string, string>, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('a request without a body has nothing to transform: 400 on every method without a destination, forwarded as it is with one', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/`]);
  const empty = { message: 'The request body is not valid JSON: the body is empty.' };
  // No content type either: the answer names what is missing, not a media type.
  for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const res = await call(url, '/proxy/payments', { method });
    assert.equal(res.status, 400, method);
    if (method !== 'HEAD') assert.deepEqual(res.json, empty, method);
  }
  for (const path of ['/api/v3/encryption/payments/encrypt', '/api/v3/encryption/payments/decrypt', '/api/v3/encryption/payments/rewrap']) {
    assert.deepEqual((await call(url, path, { method: 'POST' })).json, empty, path);
  }
  assert.equal(echo.received.length, 0);

  const forwarded = await call(url, '/proxy/payments', { method: 'GET', headers: { 'x-svc-destination': `${echo.url}/status` } });
  assert.equal(forwarded.status, 201);
  assert.equal(echo.received.length, 1);
  assert.equal(echo.received[0]!.method, 'GET');
  assert.equal(echo.received[0]!.body.length, 0);

  // A GET or HEAD that does carry a JSON body is transformed like any other.
  const headers = { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'x-svc-fields': 'ssn' };
  const get = await raw(`${url}/proxy/payments`, 'GET', headers, '{"ssn":"1"}');
  assert.equal(get.status, 200);
  assert.match(JSON.parse(get.text).ssn, TOKEN);
  const head = await raw(`${url}/proxy/payments`, 'HEAD', headers, '{"ssn":"1"}');
  assert.deepEqual(head, { status: 200, text: '' });
});

test('forwarding keeps method, path, query and headers, strips x-svc-* and hop-by-hop, transforms the body, relays the answer', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/v1/`]);
  const res = await fetch(`${url}/proxy/payments`, {
    method: 'PATCH',
    headers: {
      'x-svc-authorization': KEYS.owner,
      'x-svc-destination': `${echo.url}/v1/charges?expand=card&x=1`,
      'x-svc-fields': 'card.number',
      'x-svc-request-id': 'req-42',
      'content-type': 'application/json',
      'x-vendor-key': 'vk_123',
      'accept-language': 'de',
    },
    body: '{"card":{"number":"4111","exp":"12/28"}}',
  });
  const text = await res.text();
  assert.equal(res.status, 201);
  assert.equal(res.headers.get('x-echo'), 'yes');
  assert.equal(res.headers.get('x-svc-request-id'), 'req-42');
  assert.deepEqual(res.headers.getSetCookie(), ['a=1', 'b=2']);
  assert.equal(echo.received.length, 1);
  const got = echo.received[0]!;
  assert.equal(got.method, 'PATCH');
  assert.equal(got.url, '/v1/charges?expand=card&x=1');
  assert.equal(got.headers['x-vendor-key'], 'vk_123');
  assert.equal(got.headers['accept-language'], 'de');
  assert.equal(got.headers['content-type'], 'application/json');
  for (const name of Object.keys(got.headers)) assert.ok(!name.startsWith('x-svc-'), `${name} was forwarded`);
  const sent = JSON.parse(got.body.toString());
  assert.match(sent.card.number, TOKEN);
  assert.equal(sent.card.exp, '12/28');
  assert.equal(text, got.body.toString(), 'the destination answer is relayed as-is');
});

test('the encrypt endpoint forwards too; decrypt-and-forward sends plaintext only to the destination', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/`]);
  const enc = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"a":"secret"}', headers: { 'x-svc-fields': 'a', 'x-svc-destination': `${echo.url}/in` } });
  assert.equal(enc.status, 201);
  const forwarded = echo.received[0]!.body.toString();
  assert.match(JSON.parse(forwarded).a, TOKEN);
  const dec = await call(url, '/proxy/payments', { body: forwarded, headers: { 'x-svc-mode': 'decrypt', 'x-svc-destination': `${echo.url}/out` } });
  assert.equal(dec.status, 201);
  assert.equal(echo.received[1]!.body.toString(), '{"a":"secret"}');
});

test('authorization: basic auth from the destination URL; the client\'s own non-bearer credentials pass; our bearer never does', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/`]);
  const vendor = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/v`, authorization: 'Token vendor-secret' } });
  assert.equal(vendor.status, 201);
  assert.equal(echo.received[0]!.headers['authorization'], 'Token vendor-secret');
  const login = await call(url, '/api/v2/auth/login', { body: JSON.stringify({ email: 'ada@example.com', password: 'correct horse' }) });
  assert.equal(login.status, 200);
  const bearer = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/v`, authorization: `Bearer ${login.json.access_token}` } });
  assert.equal(bearer.status, 201);
  assert.equal(echo.received[1]!.headers['authorization'], undefined);
  echo.received.length = 0;
  const dest = `http://us%40er:p%3Ass@127.0.0.1:${echo.port}/x`;
  const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': dest } });
  assert.equal(res.status, 201);
  assert.equal(echo.received[0]!.headers['authorization'], `Basic ${Buffer.from('us@er:p:ss').toString('base64')}`);
});

test('destinations outside the allowlist are refused with 403 and nothing reaches them', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/v1/`, 'https://*.vendor.example/']);
  const refused = [
    `${echo.url}/v2/x`, // other path
    `${echo.url}/v1x`, // prefix without the slash boundary
    `http://localhost:${echo.port}/v1/`, // same address, other name
    `http://127.1:${echo.port}/v2/`,
    'http://2130706433/v1/',
    'http://[::1]/v1/',
    'http://[::ffff:127.0.0.1]/v1/',
    'http://0.0.0.0/v1/',
    `https://127.0.0.1:${echo.port}/v1/`, // other scheme
  ];
  for (const dest of refused) {
    const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': dest } });
    assert.equal(res.status, 403, dest);
    assert.match(res.json.message, /^The destination host .+ is not allowed for this configuration\.$/);
  }
  assert.equal(echo.received.length, 0);
  // 127.1 is 127.0.0.1 once parsed, which the allowlist names: allowed.
  assert.equal((await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `http://127.1:${echo.port}/v1/ok` } })).status, 201);
  for (const bad of ['ftp://x/', 'not a url', '/relative']) {
    assert.equal((await call(url, '/proxy/payments', { body: '{}', headers: { 'x-svc-destination': bad } })).status, 400, bad);
  }
});

test('a configuration without destinations refuses every forward', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(t);
  const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/` } });
  assert.equal(res.status, 403);
  assert.equal(echo.received.length, 0);
});

test('a wildcard entry never reaches a non-public address: the check is on the address connected to', async (t) => {
  const echo = await startEcho(t);
  const names: Record<string, string> = { 'internal.vendor.test': '127.0.0.1', 'mixed.vendor.test': '127.0.0.1' };
  const resolve = (host: string, cb: (e: NodeJS.ErrnoException | null, a: LookupAddress[]) => void) => {
    const address = names[host];
    if (address === undefined) cb(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }), []);
    else cb(null, [{ address, family: 4 }]);
  };
  const { url } = await startWith(t, [`http://*.vendor.test:${echo.port}/`], '', resolve);
  const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `http://internal.vendor.test:${echo.port}/` } });
  assert.equal(res.status, 403);
  assert.equal(echo.received.length, 0);
  const unknown = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `http://nowhere.vendor.test:${echo.port}/` } });
  assert.equal(unknown.status, 502);
  assert.deepEqual(unknown.json, { message: 'The destination could not be reached.' });
});

test('a redirect from the destination is relayed, never followed', async (t) => {
  const raw = await startRaw(t, (socket) => {
    socket.once('data', () => socket.end('HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest\r\ncontent-length: 0\r\n\r\n'));
  });
  const { url } = await startWith(t, [`http://127.0.0.1:${raw.port}/`]);
  const res = await fetch(`${url}/proxy/payments`, { method: 'POST', redirect: 'manual', headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'x-svc-destination': `http://127.0.0.1:${raw.port}/` }, body: '{"card":{"number":"1"}}' });
  assert.equal(res.status, 302);
  assert.equal(res.headers.get('location'), 'http://169.254.169.254/latest');
});

test('failures: refused and DNS failure → 502, header timeout → 504, with generic bodies', async (t) => {
  const port = await closedPort();
  const hang = await startRaw(t, () => {});
  const { url } = await startWith(t, [`http://127.0.0.1:${port}/`, `http://127.0.0.1:${hang.port}/`, 'http://no-such-host.invalid/'], 'forwarding: { headers_timeout: 300ms }');
  const body = '{"card":{"number":"1"}}';
  const refused = await call(url, '/proxy/payments', { body, headers: { 'x-svc-destination': `http://127.0.0.1:${port}/` } });
  assert.equal(refused.status, 502);
  assert.deepEqual(refused.json, { message: 'The destination could not be reached.' });
  const dns = await call(url, '/proxy/payments', { body, headers: { 'x-svc-destination': 'http://no-such-host.invalid/' } });
  assert.equal(dns.status, 502);
  const slow = await call(url, '/proxy/payments', { body, headers: { 'x-svc-destination': `http://127.0.0.1:${hang.port}/` } });
  assert.equal(slow.status, 504);
  assert.deepEqual(slow.json, { message: 'The destination did not answer in time.' });
  assert.ok(!refused.text.includes('ECONNREFUSED') && !dns.text.includes('ENOTFOUND'));
});

test('a destination that resets mid-response cuts the client connection cleanly, without a hang', async (t) => {
  const raw = await startRaw(t, (socket) => {
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"partial":');
      setTimeout(() => socket.resetAndDestroy(), 50);
    });
  });
  const { url } = await startWith(t, [`http://127.0.0.1:${raw.port}/`]);
  const started = Date.now();
  const outcome = await new Promise<string>((resolve) => {
    const req = request(`${url}/proxy/payments`, { method: 'POST', headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'x-svc-destination': `http://127.0.0.1:${raw.port}/` } }, (res) => {
      res.on('data', () => {});
      res.on('error', () => resolve('cut'));
      res.on('aborted', () => resolve('cut'));
      res.on('end', () => resolve(res.complete ? 'complete' : 'cut'));
    });
    req.on('error', () => resolve('cut'));
    req.end('{"card":{"number":"1"}}');
  });
  assert.equal(outcome, 'cut');
  assert.ok(Date.now() - started < 5000);
});

test('a client that disconnects mid-upload aborts the upstream request', async (t) => {
  const echo = await startEcho(t);
  const { port } = await startWith(t, [`${echo.url}/`]);
  const socket = connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  socket.write(`POST /proxy/payments HTTP/1.1\r\nhost: x\r\nx-svc-authorization: ${KEYS.owner}\r\ncontent-type: application/json\r\nx-svc-destination: ${echo.url}/up\r\ntransfer-encoding: chunked\r\n\r\n`);
  socket.write('10\r\n[{"card":{"n":1}}\r\n');
  for (let i = 0; i < 50 && echo.received.length === 0; i++) await sleep(20);
  assert.equal(echo.received.length, 1, 'the upstream request started while the upload was in progress');
  socket.destroy();
  for (let i = 0; i < 100 && !echo.received[0]!.aborted; i++) await sleep(20);
  assert.equal(echo.received[0]!.aborted, true);
});

test('bad JSON in a streamed body aborts the upstream request and answers 400', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/`]);
  const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}, oops}', headers: { 'x-svc-destination': `${echo.url}/` } });
  assert.equal(res.status, 400);
  for (let i = 0; i < 50 && echo.received.length > 0 && !echo.received[0]!.aborted; i++) await sleep(20);
  assert.ok(echo.received.length === 0 || echo.received[0]!.aborted, 'the destination never got a complete body');
});

test('application/x-ndjson bodies are transformed line by line', async (t) => {
  const { url } = await startApp(t);
  const body = '{"card":{"number":"1"}}\n\n{"card":{"number":"2"},"x":1}\r\n[1]\n';
  const enc = await call(url, '/proxy/payments', { body, contentType: 'application/x-ndjson' });
  assert.equal(enc.status, 200);
  assert.equal(enc.headers.get('content-type'), 'application/x-ndjson');
  const lines = enc.text.split('\n');
  assert.equal(lines.length, 5);
  assert.match(JSON.parse(lines[0]!).card.number, TOKEN);
  assert.equal(lines[1], '');
  assert.ok(lines[2]!.endsWith('\r'));
  const dec = await call(url, '/proxy/payments', { body: enc.text, contentType: 'application/x-ndjson', headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(dec.text, body);
  const bad = await call(url, '/proxy/payments', { body: '{"a":1}\n{"a":\n', contentType: 'application/x-ndjson' });
  assert.equal(bad.status, 400);
});

test('header values with control or non-ASCII bytes never reach a destination', async (t) => {
  const echo = await startEcho(t);
  const { port } = await startWith(t, [`${echo.url}/`]);
  const socket = connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  let answer = '';
  socket.on('data', (d) => (answer += d.toString('latin1')));
  const body = '{"card":{"number":"1"}}';
  socket.write(Buffer.concat([
    Buffer.from(`POST /proxy/payments HTTP/1.1\r\nhost: x\r\nx-svc-authorization: ${KEYS.owner}\r\ncontent-type: application/json\r\nx-svc-destination: ${echo.url}/\r\nx-odd: caf`),
    Buffer.from([0xe9]),
    Buffer.from(`\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`),
  ]));
  await new Promise((r) => socket.once('close', r));
  assert.match(answer, /^HTTP\/1.1 400 /);
  assert.equal(echo.received.length, 0);
});

test('after 1,000 failed forwards no socket or memory is left behind', async (t) => {
  const port = await closedPort();
  const { url } = await startWith(t, [`http://127.0.0.1:${port}/`]);
  setFlagsFromString('--expose_gc');
  const gc = runInNewContext('gc') as () => void;
  const sockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
  const run = async (n: number) => {
    for (let i = 0; i < n; i += 20) {
      await Promise.all(Array.from({ length: 20 }, () => call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `http://127.0.0.1:${port}/` } }).then((r) => assert.equal(r.status, 502))));
    }
  };
  await run(100);
  gc();
  const before = { sockets: sockets(), heap: process.memoryUsage().heapUsed };
  await run(1000);
  await sleep(100);
  gc();
  const after = { sockets: sockets(), heap: process.memoryUsage().heapUsed };
  assert.ok(after.sockets <= before.sockets + 2, `sockets ${before.sockets} → ${after.sockets}`);
  assert.ok(after.heap < before.heap + 10 * 1024 * 1024, `heap ${before.heap} → ${after.heap}`);
});

test('unit: a parsed destination is reused for the same allowlist and value; refusals and other allowlists are checked afresh', () => {
  const allow = ['http://vendor.example/v1/'];
  const first = cachedDestination('http://u:p@vendor.example/v1/charges?x=1', allow);
  assert.equal(first.path, '/v1/charges?x=1');
  assert.equal(first.authorization, `Basic ${Buffer.from('u:p').toString('base64')}`);
  assert.equal(cachedDestination('http://u:p@vendor.example/v1/charges?x=1', allow), first, 'the same object');
  // An edited configuration is a new array: the old parse does not carry over.
  const edited = ['http://other.example/'];
  assert.throws(() => cachedDestination('http://u:p@vendor.example/v1/charges?x=1', edited), DestinationNotAllowedError);
  assert.throws(() => cachedDestination('http://vendor.example/v2/', allow), DestinationNotAllowedError);
  assert.throws(() => cachedDestination('http://vendor.example/v2/', allow), DestinationNotAllowedError, 'a refusal is not remembered as a success');
});

test('regression: a destination path that a server could read as leaving the allowlisted path (..;, escaped / \\ ; %, escaped dots) is refused', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/v1/`, `${echo.url.replace('127.0.0.1', 'localhost')}/`]);
  for (const rest of ['..;/admin', 'x/..;jsessionid=1/..;/admin', '.;/x', '..%2Fadmin', '..%2fadmin', '..%5Cadmin', 'x%3B/y', '%252e%252e/admin', '.%2E;x/admin']) {
    const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/v1/${rest}` } });
    assert.equal(res.status, 403, rest);
    assert.match(res.json.message, /^The destination path is not allowed/, rest);
  }
  assert.equal(echo.received.length, 0);
  // Ordinary paths under the prefix, and anything under an entry for the whole host, go.
  for (const dest of [`${echo.url}/v1/items;v=2/x`, `${echo.url}/v1/a.b/..c`, `${echo.url.replace('127.0.0.1', 'localhost')}/v1/..;/x`]) {
    assert.equal((await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': dest } })).status, 201, dest);
  }
});

test('regression: a destination path under an allowlisted path with escapes that are not UTF-8 (overlong %C0%AE for ".", %C0%AF for "/") is refused', async (t) => {
  // Lenient decoders read overlong sequences as the character they spell: `/v1/%C0%AE%C0%AE/admin` leaves `/v1/`.
  const echo = await startEcho(t);
  const { url } = await startWith(t, [`${echo.url}/v1/`]);
  for (const rest of ['%C0%AE%C0%AE/admin', '..%c0%afadmin', 'x%FF/y']) {
    const res = await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/v1/${rest}` } });
    assert.equal(res.status, 403, rest);
    assert.match(res.json.message, /^The destination path is not allowed/, rest);
  }
  assert.equal(echo.received.length, 0);
  assert.equal((await call(url, '/proxy/payments', { body: '{"card":{"number":"1"}}', headers: { 'x-svc-destination': `${echo.url}/v1/caf%C3%A9` } })).status, 201);
});
