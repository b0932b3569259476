import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import fc from 'fast-check';
import { call, KEYS, startApp } from '../support/app.ts';
import { rng, spell, type Json } from '../support/json-gen.ts';

const TOKEN = /^svc:[1-9][0-9]*:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;
const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';

test('encrypts the listed fields into tokens and decrypts them back byte for byte', async (t) => {
  const { url } = await startApp(t);
  const doc = '{ "card": {"number":"4111 1111 1111 1111", "exp":"12/28"},\n "ssn":"123-45-6789", "amount": 1.10, "big": 12345678901234567890, "ok": true, "nil": null, "tags":["a","b"] }';
  const enc = await call(url, ENC, { body: doc, headers: { 'x-svc-fields': 'card.number, ssn, amount, big, ok, nil, tags' } });
  assert.equal(enc.status, 200);
  assert.equal(enc.headers.get('content-type'), 'application/json; charset=utf-8');
  for (const field of [enc.json.card.number, enc.json.ssn, enc.json.amount, enc.json.big, enc.json.ok, enc.json.tags]) assert.match(field, TOKEN);
  assert.equal(enc.json.nil, null, 'null is never encrypted');
  assert.equal(enc.json.card.exp, '12/28');
  assert.ok(!enc.text.includes('4111'), 'no plaintext left');
  const dec = await call(url, DEC, { body: enc.text, headers: { 'x-svc-fields': 'card.number, ssn, amount, big, ok, tags' } });
  assert.equal(dec.status, 200);
  assert.equal(dec.text, doc);
});

test('decrypt without x-svc-fields finds every token, at any depth', async (t) => {
  const { url } = await startApp(t);
  const doc = '[{"a":"x","b":{"c":[1,"y",{"d":"z"}]}},"keep"]';
  const enc = await call(url, ENC, { body: doc, headers: { 'x-svc-fields': '0.a, 0.b.c.1, 0.b.c.2.d' } });
  assert.equal(enc.status, 200);
  assert.equal(enc.json[0].b.c[0], 1);
  const dec = await call(url, DEC, { body: enc.text });
  assert.equal(dec.text, doc);
});

test('encrypt without x-svc-fields uses the configuration default, else 400', async (t) => {
  const { url } = await startApp(t);
  const enc = await call(url, ENC, { body: '{"card":{"number":"4111"},"ssn":"1"}' });
  assert.equal(enc.status, 200);
  assert.match(enc.json.card.number, TOKEN);
  assert.equal(enc.json.ssn, '1');
  const none = await call(url, '/api/v3/encryption/other-config/encrypt', { body: '{"a":1}' });
  assert.equal(none.status, 400);
  assert.match(none.json.message, /x-svc-fields/);
});

test('property: decrypt(encrypt(doc)) is byte-identical for random documents and path sets', async (t) => {
  const { url } = await startApp(t);
  const doc = fc.dictionary(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 5 }).filter((k) => !/[,\s.*\\[\]]/.test(k)), fc.jsonValue({ stringUnit: 'grapheme', maxDepth: 4 }), { minKeys: 1, maxKeys: 6 });
  await fc.assert(
    fc.asyncProperty(doc, fc.integer(), async (value, seed) => {
      const r = rng(seed);
      // Strings come back in JSON.stringify's spelling, so encrypted strings are written that way.
      const text = spell(value as Json, r, true);
      const keys = Object.keys(value);
      const fields = keys.filter(() => r() < 0.6).join(',') || keys[0]!;
      // Header bytes are UTF-8; fetch wants them as one character per byte.
      const header = Buffer.from(fields, 'utf8').toString('latin1');
      const enc = await call(url, ENC, { body: text, headers: { 'x-svc-fields': header } });
      assert.equal(enc.status, 200, enc.text);
      const dec = await call(url, DEC, { body: enc.text, headers: { 'x-svc-fields': header } });
      assert.equal(dec.status, 200, dec.text);
      assert.equal(dec.text, text);
    }),
    { numRuns: 60 },
  );
});

test('deterministic configurations give equal tokens for equal values; randomized ones do not', async (t) => {
  const { url } = await startApp(t);
  const body = '{"a":"same","b":"same","c":"other"}';
  const det = await call(url, '/api/v3/encryption/lookup/encrypt', { body, headers: { 'x-svc-fields': 'a,b,c' } });
  assert.equal(det.json.a, det.json.b);
  assert.notEqual(det.json.a, det.json.c);
  const again = await call(url, '/api/v3/encryption/lookup/encrypt', { body, headers: { 'x-svc-fields': 'a' } });
  assert.equal(again.json.a, det.json.a);
  const rand = await call(url, ENC, { body, headers: { 'x-svc-fields': 'a,b' } });
  assert.notEqual(rand.json.a, rand.json.b);
});

test('depth 32 is accepted and 33 is refused with the contract message', async (t) => {
  const { url } = await startApp(t);
  const nest = (d: number) => '{"a":'.repeat(d - 1) + '{"x":1}' + '}'.repeat(d - 1);
  const ok = await call(url, ENC, { body: nest(32), headers: { 'x-svc-fields': 'x' } });
  assert.equal(ok.status, 200);
  const deep = await call(url, ENC, { body: nest(33), headers: { 'x-svc-fields': 'x' } });
  assert.equal(deep.status, 400);
  assert.deepEqual(deep.json, { message: 'The request body exceeds the maximum depth of 32.' });
});

test('changing any single character of a token\'s meta or ct gives 422, never a wrong plaintext', async (t) => {
  const { url } = await startApp(t);
  const enc = await call(url, ENC, { body: '{"s":"secret value"}', headers: { 'x-svc-fields': 's' } });
  const token: string = enc.json.s;
  const [, , meta, ct] = token.split(':');
  const start = token.indexOf(meta!);
  const end = start + meta!.length + 1 + ct!.length;
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  let checked = 0;
  for (let i = start; i < end; i++) {
    if (token[i] === ':') continue;
    const replacement = alphabet[(alphabet.indexOf(token[i]!) + 1 + (i % 7)) % 64]!;
    const tampered = token.slice(0, i) + replacement + token.slice(i + 1);
    const dec = await call(url, DEC, { body: JSON.stringify({ s: tampered }), headers: { 'x-svc-fields': 's' } });
    if (dec.status === 403) {
      // The edit landed on the classification id: refused before any decryption.
      assert.equal(dec.json.message, 'User does not have the right permissions.');
    } else {
      assert.equal(dec.status, 422, `position ${i}: ${dec.text}`);
      assert.ok(Array.isArray(dec.json.errors.s), dec.text);
    }
    assert.ok(!dec.text.includes('secret value'));
    checked++;
  }
  assert.ok(checked > 40);
});

test('a token of one configuration fails on another', async (t) => {
  const { url } = await startApp(t);
  const enc = await call(url, ENC, { body: '{"s":"x"}', headers: { 'x-svc-fields': 's' } });
  const dec = await call(url, '/api/v3/encryption/other-config/decrypt', { body: enc.text, headers: { 'x-svc-fields': 's' } });
  assert.equal(dec.status, 422);
  assert.deepEqual(Object.keys(dec.json.errors), ['s']);
  assert.match(dec.json.message, /authentication/);
});

test('classifications: bound on encrypt, required on decrypt, access by user, role or provider group', async (t) => {
  const { url } = await startApp(t);
  const body = '{"dx":"flu"}';
  const phi = await call(url, ENC, { body, headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'phi' } });
  assert.equal(phi.status, 200);
  // Ada is listed on PHI; Dev is not.
  assert.equal((await call(url, DEC, { body: phi.text })).text, body);
  const denied = await call(url, DEC, { body: phi.text, key: KEYS.dev });
  assert.equal(denied.status, 403);
  assert.deepEqual(denied.json, { message: 'User does not have the right permissions.' });
  // x-svc-classification on decrypt: every token must carry it.
  const mismatch = await call(url, DEC, { body: phi.text, headers: { 'x-svc-classification': 'pci' } });
  assert.equal(mismatch.status, 403);
  const byId = await call(url, DEC, { body: phi.text, headers: { 'x-svc-classification': 'phi' } });
  assert.equal(byId.text, body);
  // PCI is open to the owner role.
  const pci = await call(url, ENC, { body, key: KEYS.dev, headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'pci' } });
  assert.equal((await call(url, DEC, { body: pci.text, key: KEYS.dev })).status, 403);
  assert.equal((await call(url, DEC, { body: pci.text })).text, body);
  // A classification that lists nobody admits nobody, the owner included (DESIGN §13).
  const nobody = await call(url, ENC, { body, headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'nobody' } });
  assert.equal(nobody.status, 200);
  for (const key of [KEYS.owner, KEYS.dev, KEYS.grace]) assert.equal((await call(url, DEC, { body: nobody.text, key })).status, 403);
  // Ward is granted through the provider group g-nurses, whose member is grace.
  const ward = await call(url, ENC, { body, headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'ward' } });
  assert.equal((await call(url, DEC, { body: ward.text, key: KEYS.dev })).status, 403);
  assert.equal((await call(url, DEC, { body: ward.text, key: KEYS.grace })).text, body);
  assert.equal((await call(url, DEC, { body: phi.text, key: KEYS.grace })).status, 403);
});

test('a change to a classification’s members applies to the very next decrypt', async (t) => {
  const { url } = await startApp(t);
  const body = '{"dx":"flu"}';
  const phi = await call(url, ENC, { body, headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'phi' } });
  assert.equal((await call(url, DEC, { body: phi.text, key: KEYS.dev })).status, 403);
  assert.equal((await call(url, DEC, { body: phi.text })).text, body, 'Ada is listed');
  const list = await call(url, '/api/v3/classifications?per_page=100', { method: 'GET' });
  const id = (list.json.data as Array<{ id: number; slug: string }>).find((c) => c.slug === 'phi')!.id;
  const dev = (await call(url, '/api/v3/users?per_page=100', { method: 'GET' })).json.data.find((u: { email: string }) => u.email === 'dev@example.com').id as number;
  const changed = await call(url, `/api/v3/classifications/${id}`, { method: 'PATCH', body: JSON.stringify({ users: [dev] }) });
  assert.equal(changed.status, 200, changed.text);
  assert.equal((await call(url, DEC, { body: phi.text, key: KEYS.dev })).text, body, 'Dev now listed');
  assert.equal((await call(url, DEC, { body: phi.text })).status, 403, 'Ada no longer listed');
});

test('a denied token anywhere in the body denies the whole request and decrypts nothing', async (t) => {
  const { url } = await startApp(t);
  const open = await call(url, ENC, { body: '{"a":"visible"}', headers: { 'x-svc-fields': 'a' } });
  const phi = await call(url, ENC, { body: '{"b":"hidden"}', headers: { 'x-svc-fields': 'b', 'x-svc-classification': 'phi' } });
  assert.equal((await call(url, DEC, { body: open.text, key: KEYS.dev })).status, 200, 'the unclassified token alone decrypts');
  const mixed = JSON.stringify({ a: open.json.a, b: phi.json.b });
  const res = await call(url, DEC, { body: mixed, key: KEYS.dev });
  assert.equal(res.status, 403);
  assert.ok(!res.text.includes('visible') && !res.text.includes('hidden'));
});

test('x-svc-classification naming no classification is a 422 on that header', async (t) => {
  const { url } = await startApp(t);
  const res = await call(url, ENC, { body: '{"a":1}', headers: { 'x-svc-fields': 'a', 'x-svc-classification': 'nope' } });
  assert.equal(res.status, 422);
  assert.deepEqual(res.json, { message: 'The selected classification is invalid.', errors: { 'x-svc-classification': ['The selected classification is invalid.'] } });
});

test('authentication and permissions', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const body = '{"a":"1"}';
  const headers = { 'x-svc-fields': 'a' };
  for (const key of [null, '', 'svc_nope', 'svc_' + 'x'.repeat(40)]) {
    const res = await call(url, ENC, { body, headers, key });
    assert.equal(res.status, 401, String(key));
    assert.deepEqual(res.json, { message: 'Unauthorized.' });
  }
  // Viewer may not encrypt; an encrypt-only scoped key may not decrypt.
  assert.equal((await call(url, ENC, { body, headers, key: KEYS.viewer })).status, 403);
  const enc = await call(url, ENC, { body, headers, key: KEYS.encryptOnly });
  assert.equal(enc.status, 200);
  assert.equal((await call(url, DEC, { body: enc.text, key: KEYS.encryptOnly })).status, 403);
  // A key limited to another configuration.
  assert.equal((await call(url, ENC, { body, headers, key: KEYS.scoped })).status, 403);
  assert.equal((await call(url, '/api/v3/encryption/other-config/encrypt', { body, headers, key: KEYS.scoped })).status, 200);
  // Revoked → 401 on the very next request.
  const store = running.app.services.store;
  const dev = (await store.apiKeys.findByName('dev'))!;
  assert.equal((await call(url, ENC, { body, headers, key: KEYS.dev })).status, 200);
  await store.apiKeys.revoke(dev.id);
  assert.equal((await call(url, ENC, { body, headers, key: KEYS.dev })).status, 401);
});

test('unknown slug 404, wrong method 405, unknown path 404', async (t) => {
  const { url } = await startApp(t);
  const missing = await call(url, '/api/v3/encryption/nope/encrypt', { body: '{}' });
  assert.equal(missing.status, 404);
  assert.deepEqual(missing.json, { message: 'Not found.' });
  const provider = await call(url, '/api/v3/encryption/workspace/encrypt', { body: '{}' });
  assert.equal(provider.status, 404);
  const method = await call(url, ENC, { method: 'GET' });
  assert.equal(method.status, 405);
  assert.equal(method.headers.get('allow'), 'POST');
  assert.equal((await call(url, '/nothing/here', { method: 'GET' })).status, 404);
});

test('bad bodies: malformed JSON 400, a format it does not read 415, empty 400, lone surrogate 422', async (t) => {
  const { url } = await startApp(t);
  const headers = { 'x-svc-fields': 'a' };
  const malformed = await call(url, ENC, { body: '{"a":', headers });
  assert.equal(malformed.status, 400);
  assert.match(malformed.json.message, /^The request body is not valid JSON: /);
  const text = await call(url, ENC, { body: 'a=1', headers, contentType: 'text/plain' });
  assert.equal(text.status, 415);
  const none = await call(url, ENC, { body: '{"a":1}', headers, contentType: null });
  assert.equal(none.status, 415);
  assert.equal((await call(url, ENC, { body: '{"a":1}', headers, contentType: 'application/vnd.api+json; charset=utf-8' })).status, 200);
  assert.equal((await call(url, ENC, { body: '', headers })).status, 400);
  const surrogate = await call(url, ENC, { body: '{"a":"\\ud800"}', headers });
  assert.equal(surrogate.status, 422);
  assert.deepEqual(Object.keys(surrogate.json.errors), ['a']);
  const badPaths = await call(url, ENC, { body: '{"a":1}', headers: { 'x-svc-fields': 'a..b' } });
  assert.equal(badPaths.status, 400);
  const tooMany = await call(url, ENC, { body: '{"a":1}', headers: { 'x-svc-fields': Array.from({ length: 129 }, (_, i) => `f${i}`).join(',') } });
  assert.equal(tooMany.status, 400);
});

test('a body over body_limit is refused with 413 without reading the rest', async (t) => {
  const { url, port } = await startApp(t);
  // Declared too large: refused before any byte of the body.
  const declared = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(`${url}${ENC}`, { method: 'POST', headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', 'content-length': String(50 * 1024 * 1024) } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.flushHeaders();
  });
  assert.equal(declared.status, 413);
  assert.match(JSON.parse(declared.body).message, /1048576 bytes/);

  // Chunked and endless: the answer arrives while the client is still sending, and the
  // connection is closed rather than drained.
  const socket = connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  socket.write(`POST ${ENC} HTTP/1.1\r\nhost: x\r\nx-svc-authorization: ${KEYS.owner}\r\ncontent-type: application/json\r\nx-svc-fields: a\r\ntransfer-encoding: chunked\r\n\r\n`);
  let answer = '';
  socket.on('data', (d) => (answer += d));
  const closed = new Promise((r) => socket.once('close', r));
  socket.on('error', () => {});
  const piece = Buffer.alloc(64 * 1024, 0x20);
  let sent = 0;
  socket.write(`1\r\n[\r\n`);
  while (!answer.includes('\r\n\r\n') && sent < 64 * 1024 * 1024 && !socket.destroyed) {
    socket.write(`${piece.length.toString(16)}\r\n`);
    socket.write(piece);
    socket.write('\r\n');
    sent += piece.length;
    await new Promise((r) => setImmediate(r));
  }
  await closed;
  assert.match(answer, /^HTTP\/1.1 413 /);
  assert.ok(sent < 16 * 1024 * 1024, `the server stopped the upload early (client sent ${sent} bytes)`);
});

test('the request id is echoed when sane and generated otherwise', async (t) => {
  const { url } = await startApp(t);
  const given = await call(url, ENC, { body: '{"a":1}', headers: { 'x-svc-fields': 'a', 'x-svc-request-id': 'abc-123' } });
  assert.equal(given.headers.get('x-svc-request-id'), 'abc-123');
  const odd = await call(url, ENC, { body: '{"a":1}', headers: { 'x-svc-fields': 'a', 'x-svc-request-id': 'bad id\u00e9'.replace('\u00e9', '') + '<>' } });
  assert.match(odd.headers.get('x-svc-request-id')!, /^[0-9a-f-]{36}$/);
  const err = await call(url, ENC, { body: '{', headers: { 'x-svc-fields': 'a' } });
  assert.ok(err.headers.get('x-svc-request-id'));
});

test('500 random garbage bodies and header values never produce a 5xx; the server stays healthy', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  // Any byte a client can put in a header value: printable ASCII, tab and obs-text.
  const headerValue = fc.string({ unit: 'binary', maxLength: 40 }).map((s) => Buffer.from(s, 'utf8').toString('latin1').replace(/[\x00-\x08\x0a-\x1f\x7f]/g, '').trim());
  const input = fc.record({
    body: fc.oneof(fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a)), fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v))), fc.string().map((s) => Buffer.from(s))),
    fields: headerValue,
    classification: headerValue,
    mode: fc.constantFrom(ENC, DEC, '/api/v3/encryption/lookup/encrypt', '/api/v3/encryption/%ff/decrypt'),
    contentType: fc.constantFrom('application/json', 'text/plain', 'application/json; charset=latin1'),
  });
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(input, async ({ body, fields, classification, mode, contentType }) => {
      const res = await fetch(url + mode, {
        method: 'POST',
        headers: { 'x-svc-authorization': KEYS.owner, 'content-type': contentType, 'x-svc-fields': fields, 'x-svc-classification': classification },
        body,
      });
      await res.arrayBuffer();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(res.status < 500, `status ${res.status}`);
    }),
    { numRuns: 500 },
  );
  assert.ok((statuses.get(400) ?? 0) > 0, 'garbage was refused as such');
  const health = await fetch(`${url}/healthz`);
  assert.equal(health.status, 200);
  const ok = await call(url, ENC, { body: '{"a":1}', headers: { 'x-svc-fields': 'a' } });
  assert.equal(ok.status, 200);
});

test('logs never contain keys, plaintext or tokens', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const enc = await call(url, ENC, { body: '{"a":"PLAINTEXT-CANARY"}', headers: { 'x-svc-fields': 'a' } });
  await call(url, DEC, { body: enc.text });
  await call(url, DEC, { body: '{"a":"svc:1:AAAA:BBBB:$"}' });
  await call(url, ENC, { body: '{"a":', headers: { 'x-svc-fields': 'a' }, key: KEYS.dev });
  const logs = running.logs();
  assert.ok(logs.length > 0);
  for (const secret of [...Object.values(KEYS), 'PLAINTEXT-CANARY', enc.json.a]) assert.ok(!logs.includes(secret), `logs leak ${secret.slice(0, 8)}`);
});
