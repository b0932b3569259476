/**
 * Forms on the encryption endpoints, rewrap and `/proxy` (DESIGN §15): a form body is
 * transformed parameter by parameter and answered as a form; a path names a parameter in
 * either spelling (`card[number]` or `card.number`).
 */
import { test } from 'node:test';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import assert from 'node:assert/strict';
import { call, KEYS, SEED, startApp } from '../support/app.ts';
import { startEcho } from '../support/destinations.ts';

const FORM = 'application/x-www-form-urlencoded';
const TOKEN = /^svc:[1-9][0-9]*:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;
const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';

/** The token with one character of its ciphertext changed. */
function tamper(token: string): string {
  const i = token.length - 4;
  return `${token.slice(0, i)}${token[i] === 'A' ? 'B' : 'A'}${token.slice(i + 1)}`;
}

test('a form is encrypted parameter by parameter and answered as a form; decrypting it gives the bytes back', async (t) => {
  const { url } = await startApp(t);
  const body = 'amount=1000&card%5Bnumber%5D=4242+4242+4242+4242&card[cvc]=123&note=a%26b%3Dc&ssn=123-45-6789&flag&&empty=';
  const enc = await call(url, ENC, { body, contentType: FORM, headers: { 'x-svc-fields': 'card[number], card.cvc, ssn' } });
  assert.equal(enc.status, 200);
  assert.equal(enc.headers.get('content-type'), FORM);
  assert.equal(enc.headers.get('x-svc-fields-transformed'), '3');
  const params = new URLSearchParams(enc.text);
  for (const name of ['card[number]', 'card[cvc]', 'ssn']) assert.match(params.get(name)!, TOKEN, name);
  assert.equal(params.get('amount'), '1000');
  assert.equal(params.get('note'), 'a&b=c');
  assert.ok(!enc.text.includes('4242') && !enc.text.includes('123-45'), 'no plaintext left');
  // Names and untouched parameters keep their bytes, escapes included.
  assert.match(enc.text, /^amount=1000&card%5Bnumber%5D=svc:[^&]+&card\[cvc\]=svc:[^&]+&note=a%26b%3Dc&ssn=svc:[^&]+&flag&&empty=$/);
  const dec = await call(url, DEC, { body: enc.text, contentType: FORM });
  assert.equal(dec.status, 200);
  assert.equal(dec.headers.get('content-type'), FORM);
  assert.equal(dec.text, body);
});

test("without x-svc-fields a form is encrypted at the configuration's fields, written as JSON paths", async (t) => {
  const { url } = await startApp(t);
  // payments lists card.number: both spellings of the name, and the name repeated.
  const enc = await call(url, ENC, { body: 'card[number]=1&card%5Bnumber%5D=2&card.number=3&card[numbers]=4&xcard[number]=5', contentType: FORM });
  assert.equal(enc.status, 200);
  const parts = enc.text.split('&').map((p) => p.split('='));
  assert.deepEqual(parts.map(([name]) => name), ['card[number]', 'card%5Bnumber%5D', 'card.number', 'card[numbers]', 'xcard[number]']);
  assert.match(parts[0]![1]!, TOKEN);
  assert.match(parts[1]![1]!, TOKEN);
  assert.match(parts[2]![1]!, TOKEN, 'a dotted name is read as a dotted binder reads it');
  assert.equal(parts[3]![1], '4');
  assert.equal(parts[4]![1], '5');
});

test('a path in bracket form names the same field in a JSON body, and a dotted path the same parameter in a form', async (t) => {
  const { url } = await startApp(t);
  const json = await call(url, ENC, { body: '{"card":{"number":"4242"},"items":[{"sku":"a"},{"sku":"b"}],"card[number]":"literal"}', headers: { 'x-svc-fields': 'card[number], items[*][sku]' } });
  assert.equal(json.status, 200);
  assert.match(json.json.card.number, TOKEN);
  assert.match(json.json.items[0].sku, TOKEN);
  assert.match(json.json.items[1].sku, TOKEN);
  assert.equal(json.json['card[number]'], 'literal', 'a key with brackets in it is another field');
  const escaped = await call(url, ENC, { body: '{"card[number]":"literal"}', headers: { 'x-svc-fields': 'card\\[number\\]' } });
  assert.match(escaped.json['card[number]'], TOKEN, 'escaped brackets name the key as written');
  const form = await call(url, ENC, { body: 'items[0][sku]=a&items[1][sku]=b&items[1][qty]=2&tags[]=x&tags[]=y', contentType: FORM, headers: { 'x-svc-fields': 'items.*.sku, tags[]' } });
  const params = new URLSearchParams(form.text);
  assert.match(params.get('items[0][sku]')!, TOKEN);
  assert.match(params.get('items[1][sku]')!, TOKEN);
  assert.equal(params.get('items[1][qty]'), '2');
  for (const tag of params.getAll('tags[]')) assert.match(tag, TOKEN);
  // A token decrypted from a form names its field as a JSON path: one path language.
  const token = params.get('items[1][sku]')!;
  const bad = await call(url, DEC, { body: `items[1][sku]=${tamper(token)}`, contentType: FORM, headers: { 'x-svc-fields': 'items[1][sku]' } });
  assert.equal(bad.status, 422);
  assert.deepEqual(Object.keys(bad.json.errors), ['items.1.sku']);
});

test('malformed brackets in x-svc-fields are a 400 that says what is wrong', async (t) => {
  const { url } = await startApp(t);
  for (const [fields, says] of [
    ['card[number', 'without its "]"'],
    ['card]number', 'without its "["'],
    ['[card]', 'follows no name'],
    ['card[number]x', 'after a "]"'],
    ['card[a[b]]', 'inside brackets'],
    ['card[num*]', 'inside a segment'],
  ] as const) {
    const res = await call(url, ENC, { body: 'card[number]=1', contentType: FORM, headers: { 'x-svc-fields': fields } });
    assert.equal(res.status, 400, fields);
    assert.ok(res.json.message.includes(says), `${fields}: ${res.json.message}`);
  }
});

test('hostile forms: + is a space, duplicates are each transformed, a field after ; is encrypted too, bad escapes and non-UTF-8 are 400', async (t) => {
  const { url } = await startApp(t);
  const dup = await call(url, ENC, { body: 'ssn=1&ssn=2&ssn[]=3&SSN=4', contentType: FORM, headers: { 'x-svc-fields': 'ssn' } });
  assert.equal(dup.headers.get('x-svc-fields-transformed'), '3');
  const dupParams = new URLSearchParams(dup.text);
  for (const v of dupParams.getAll('ssn')) assert.match(v, TOKEN);
  assert.equal(dupParams.get('SSN'), '4', 'names are compared exactly');
  // A form serialiser (WHATWG URL) splits at & only, so ;ssn= is part of a's value to it;
  // older Python and Go split at ; too and would read ssn=2. Encrypting protects both.
  const semi = await call(url, ENC, { body: 'a=1;ssn=2&b=3', contentType: FORM, headers: { 'x-svc-fields': 'ssn' } });
  assert.match(semi.text, /^a=1;ssn=svc:[^&;]+&b=3$/);
  const spaces = await call(url, ENC, { body: 'ssn=1+2%202', contentType: FORM, headers: { 'x-svc-fields': 'ssn' } });
  const back = await call(url, DEC, { body: spaces.text, contentType: FORM });
  assert.equal(back.text, 'ssn=1+2+2', 'decrypted values are written with the form rules: a space is +');
  for (const body of ['ssn=%zz', 'ssn=1%', 'ss%5=1', 'ssn=%E2%82', 'ssn=%C0%AE']) {
    const res = await call(url, ENC, { body, contentType: FORM, headers: { 'x-svc-fields': 'ssn' } });
    assert.equal(res.status, 400, body);
    assert.match(res.json.message, /^The request body is not a valid form: /);
    assert.equal(res.json.code ?? 'SVC_ERR_INVALID_FORM', 'SVC_ERR_INVALID_FORM');
  }
  for (const contentType of [`${FORM}; charset=iso-8859-1`, 'text/plain', 'multipart/form-data; boundary=x']) {
    assert.equal((await call(url, ENC, { body: 'ssn=1', contentType, headers: { 'x-svc-fields': 'ssn' } })).status, 415, contentType);
  }
  const gz = await call(url, ENC, { body: 'ssn=1', contentType: FORM, headers: { 'x-svc-fields': 'ssn', 'content-encoding': 'gzip' } });
  assert.equal(gz.status, 415);
  assert.equal((await call(url, ENC, { body: 'ssn=1', contentType: `${FORM}; charset=UTF-8`, headers: { 'x-svc-fields': 'ssn' } })).status, 200);
});

test('a tampered token in a form is a 422 naming its path; a value past max_value is a 413', async (t) => {
  const { url } = await startApp(t, 'limits: { max_value: 1kb }');
  const enc = await call(url, ENC, { body: 'card[number]=4242', contentType: FORM });
  const tampered = `card[number]=${tamper(new URLSearchParams(enc.text).get('card[number]')!)}`;
  const dec = await call(url, DEC, { body: tampered, contentType: FORM, headers: { 'x-svc-fields': 'card[number]' } });
  assert.equal(dec.status, 422);
  assert.deepEqual(Object.keys(dec.json.errors), ['card.number']);
  const big = await call(url, ENC, { body: `other=${'y'.repeat(50_000)}&card[number]=${'x'.repeat(1100)}`, contentType: FORM });
  assert.equal(big.status, 413);
  assert.equal(big.json.message, 'A field value exceeds the limit of 1024 bytes.');
  const bigName = await call(url, ENC, { body: `${'n'.repeat(1100)}=1`, contentType: FORM });
  assert.equal(bigName.status, 413);
});

test('rewrap takes a form and answers a form', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const enc = await call(url, ENC, { body: 'card[number]=4242&keep=1', contentType: FORM });
  const configurations = await call(url, '/api/v3/configurations', { method: 'GET' });
  const id = configurations.json.data.find((c: { name: string }) => c.name === 'payments').id;
  assert.equal((await call(url, `/api/v3/configurations/${id}/rotate`)).status, 200);
  const rewrap = await call(url, '/api/v3/encryption/payments/rewrap', { body: enc.text, contentType: FORM, headers: { 'x-svc-fields': 'card[number]' } });
  assert.equal(rewrap.status, 200);
  assert.equal(rewrap.headers.get('content-type'), FORM);
  const token = new URLSearchParams(rewrap.text).get('card[number]')!;
  assert.match(token, /^svc:2:/);
  assert.ok(rewrap.text.endsWith('&keep=1'));
  const dec = await call(url, DEC, { body: rewrap.text, contentType: FORM });
  assert.equal(dec.text, 'card[number]=4242&keep=1');
});

test('/proxy forwards a form encrypted, and decrypts one to the destination only', async (t) => {
  const echo = await startEcho(t);
  const seed = SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/"] }`);
  const { url } = await startApp(t, '', seed);
  const enc = await call(url, '/proxy/payments', { body: 'card[number]=4242+4242&amount=5', contentType: FORM, headers: { 'x-svc-destination': `${echo.url}/v1/charges?x=1` } });
  assert.equal(enc.status, 201);
  const sent = echo.received[0]!;
  assert.equal(sent.url, '/v1/charges?x=1');
  assert.equal(sent.headers['content-type'], FORM);
  const forwarded = sent.body.toString();
  assert.match(new URLSearchParams(forwarded).get('card[number]')!, TOKEN);
  assert.ok(forwarded.endsWith('&amount=5'));
  const dec = await call(url, '/proxy/payments', { body: forwarded, contentType: FORM, headers: { 'x-svc-mode': 'decrypt', 'x-svc-destination': `${echo.url}/out` } });
  assert.equal(dec.status, 201);
  assert.equal(echo.received[1]!.body.toString(), 'card[number]=4242+4242&amount=5');
  // Without a destination, /proxy answers the form itself.
  const own = await call(url, '/proxy/payments', { method: 'PUT', body: forwarded, contentType: FORM, headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(own.status, 200);
  assert.equal(own.headers.get('content-type'), FORM);
  assert.equal(own.text, 'card[number]=4242+4242&amount=5');
  // A viewer may not decrypt: the permission is checked whatever the format.
  const viewer = await call(url, DEC, { key: KEYS.viewer, body: forwarded, contentType: FORM });
  assert.equal(viewer.status, 403);
});

test('a body declared a form that reads as JSON is refused on /proxy and on routes, and a vendor answer of that kind is a 502', async (t) => {
  const echo = await startEcho(t);
  const seed = SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/"] }`);
  const json = '{"card":{"number":"4242"}}';
  // The vendor answers JSON labelled as a form, echoing the card number in plaintext.
  const vendor = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': FORM });
      res.end(json);
    });
  });
  await new Promise<void>((r) => vendor.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => { vendor.closeAllConnections(); vendor.close(() => r()); }));
  const { url } = await startApp(t, `
egress:
  - { name: vendor, destination: "http://127.0.0.1:${(vendor.address() as AddressInfo).port}", configuration: payments, request: { decrypt: [card.number] } }
  - { name: upload, destination: "${echo.url}", configuration: payments, request: { encrypt: [card.number] } }`, seed);
  for (const body of [json, ` \r\n${json}`, '[{"card":{"number":"4242"}}]']) {
    const proxied = await call(url, '/proxy/payments', { body, contentType: FORM, headers: { 'x-svc-destination': `${echo.url}/in` } });
    assert.equal(proxied.status, 400, body);
    assert.match(proxied.json.message, /^The request body is not a valid form: it reads as JSON/);
    const upload = await fetch(`${url}/egress/upload/x`, { method: 'POST', headers: { 'content-type': FORM }, body });
    assert.equal(upload.status, 400, body);
  }
  assert.equal(echo.received.length, 0, 'nothing was forwarded');
  const token = (await call(url, ENC, { body: 'card[number]=4242', contentType: FORM })).text;
  const answer = await fetch(`${url}/egress/vendor/x`, { method: 'POST', headers: { 'content-type': FORM }, body: token });
  assert.equal(answer.status, 502);
  assert.ok(!(await answer.text()).includes('4242'));
});

test('a large form streams to the destination on encrypt-and-forward, its named values encrypted wherever they fall', async (t) => {
  const echo = await startEcho(t);
  const seed = SEED.replace('{ name: payments, proxy_slug: payments, fields: [card.number] }', `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/"] }`);
  const { url } = await startApp(t, '', seed);
  const filler = 'x'.repeat(300_000);
  const body = `a=${filler}&card[number]=4242+4242&b=${filler}&card%5Bnumber%5D=5555`;
  // Sent in pieces without a length: the body streams through the transformer.
  const chunks = [body.slice(0, 100_001), body.slice(100_001, 300_007), body.slice(300_007)];
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) controller.enqueue(new TextEncoder().encode(c));
      controller.close();
    },
  });
  const res = await fetch(`${url}/proxy/payments`, {
    method: 'POST',
    headers: { 'x-svc-authorization': KEYS.owner, 'content-type': FORM, 'x-svc-destination': `${echo.url}/in` },
    body: stream,
    duplex: 'half',
  } as RequestInit);
  assert.equal(res.status, 201);
  const sent = echo.received[0]!.body.toString();
  const params = new URLSearchParams(sent);
  assert.match(params.get('card[number]')!, TOKEN);
  assert.equal(params.get('a'), filler);
  assert.equal(params.get('b'), filler);
  assert.ok(!sent.includes('4242') && !sent.includes('5555'));
  assert.ok(sent.includes('&card%5Bnumber%5D=svc:1:'));
});

test('one path language: a rule written for a form request re-encrypts that field in a JSON answer, and a JSON rule in a form answer', async (t) => {
  // The vendor answers in the other format, echoing the card number it received.
  const received: string[] = [];
  const vendor = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      received.push(body);
      if (req.headers['content-type'] === FORM) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ card: { number: new URLSearchParams(body).get('card[number]') }, ok: true }));
      } else {
        res.writeHead(200, { 'content-type': FORM });
        res.end(`ok=1&card%5Bnumber%5D=${encodeURIComponent(JSON.parse(body).card.number)}`);
      }
    });
  });
  await new Promise<void>((r) => vendor.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => { vendor.closeAllConnections(); vendor.close(() => r()); }));
  const destination = `http://127.0.0.1:${(vendor.address() as AddressInfo).port}`;
  const { url } = await startApp(t, `
egress:
  - { name: bracketed, destination: "${destination}", configuration: payments, request: { decrypt: ["card[number]"] } }
  - { name: dotted, destination: "${destination}", configuration: payments, request: { decrypt: [card.number] } }`);
  const token = new URLSearchParams((await call(url, ENC, { body: 'card[number]=4242+4242', contentType: FORM })).text).get('card[number]')!;
  const fromForm = await fetch(`${url}/egress/bracketed/x`, { method: 'POST', headers: { 'content-type': FORM }, body: `card[number]=${token}` });
  assert.equal(fromForm.status, 200);
  assert.equal(received[0], 'card[number]=4242+4242', 'the vendor got the plaintext');
  const json = (await fromForm.json()) as { card: { number: string }; ok: boolean };
  assert.match(json.card.number, TOKEN, 'the JSON answer holds a token, not the plaintext');
  const back = await call(url, DEC, { body: JSON.stringify({ v: json.card.number }) });
  assert.equal(back.json.v, '4242 4242');
  const fromJson = await fetch(`${url}/egress/dotted/x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
  assert.equal(fromJson.status, 200);
  assert.equal(received[1], '{"card":{"number":"4242 4242"}}');
  const form = await fromJson.text();
  assert.equal(fromJson.headers.get('content-type'), FORM);
  assert.match(new URLSearchParams(form).get('card[number]')!, TOKEN, 'the form answer holds a token');
  assert.ok(form.startsWith('ok=1&card%5Bnumber%5D=svc:1:'));
  assert.ok(!form.includes('4242'));
});

test('regression: names with stray brackets, which PHP, qs and Rack bind to card.number, are encrypted by a card.number rule', async (t) => {
  const { url } = await startApp(t);
  for (const name of ['card[number]x', 'card[number]]', 'card[number][', '[card][number]', 'card]number', 'card[number', 'card%5Bnumber%5Dx']) {
    // After another parameter: a body whose first byte is `[` reads as JSON and is refused (400).
    const enc = await call(url, ENC, { body: `other=1&${name}=4111111111111111`, contentType: FORM, headers: { 'x-svc-fields': 'card.number' } });
    assert.equal(enc.status, 200, name);
    assert.ok(!enc.text.includes('4111111111111111'), `${name}: ${enc.text}`);
    assert.equal(enc.headers.get('x-svc-fields-transformed'), '1', name);
    assert.ok(enc.text.startsWith(`other=1&${name}=svc:`), `${name}: the name keeps its bytes`);
  }
  // Names that only look alike stay untouched.
  const other = await call(url, ENC, { body: 'cardnumber=1&card[numbers]=2&x[card]=3', contentType: FORM, headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(other.text, 'cardnumber=1&card[numbers]=2&x[card]=3');
});

test('regression: encrypting a form also splits it at ";", as some servers do, so a field after a ";" is encrypted too', async (t) => {
  const { url } = await startApp(t);
  const enc = await call(url, ENC, { body: 'a=1;card[number]=4111111111111111&note=x;y', contentType: FORM, headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(enc.status, 200);
  assert.ok(!enc.text.includes('4111111111111111'), enc.text);
  assert.match(enc.text, /^a=1;card\[number\]=svc:[^&;]+&note=x;y$/, 'every other byte as it came, a value after a & kept whole');
});

test('regression: encrypting a form reads a name cut at a NUL (as PHP does) and without a leading byte-order mark', async (t) => {
  const { url } = await startApp(t);
  for (const body of ['ssn%00=123-45-6789', 'a=1&ssn%00x=123-45-6789', 'ssn%00[x]=123-45-6789', '\uFEFFssn=123-45-6789', '%EF%BB%BFssn=123-45-6789']) {
    const enc = await call(url, ENC, { body, contentType: FORM, headers: { 'x-svc-fields': 'ssn' } });
    assert.equal(enc.status, 200, body);
    assert.ok(!enc.text.includes('123-45-6789'), `${body}: ${enc.text}`);
    assert.equal(enc.headers.get('x-svc-fields-transformed'), '1', body);
  }
  // Decrypting reads names exactly: a token under such a name stays a token.
  const token = new URLSearchParams((await call(url, ENC, { body: 'ssn=4111', contentType: FORM, headers: { 'x-svc-fields': 'ssn' } })).text).get('ssn')!;
  const dec = await call(url, DEC, { body: `ssn%00=${token}`, contentType: FORM, headers: { 'x-svc-fields': 'ssn' } });
  assert.equal(dec.status, 200);
  assert.equal(dec.text, `ssn%00=${token}`);
  // A NUL or a mark alone names nothing new.
  assert.equal((await call(url, ENC, { body: '%00=1&%EF%BB%BF=2&x%00ssn=3', contentType: FORM, headers: { 'x-svc-fields': 'ssn' } })).text, '%00=1&%EF%BB%BF=2&x%00ssn=3');
});
