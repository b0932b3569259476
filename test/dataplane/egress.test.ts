import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { Router } from '../../src/http/router.ts';
import { isOwnHeader } from '../../src/http/svc-headers.ts';
import { call, KEYS, startApp, type Running } from '../support/app.ts';
import { closedPort, startEcho, type Echo } from '../support/destinations.ts';

const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;

function egressYaml(destination: string, extra = ''): string {
  return `
egress:
  - name: vendor
    destination: ${destination}
    configuration: payments
    request: { decrypt: [card.number] }
  - name: inbox
    destination: ${destination}
    configuration: payments
    request: { encrypt: [email], classification: phi }
    response: { decrypt: [] }
${extra}`;
}

async function start(t: TestContext, echo: Echo): Promise<Running> {
  return startApp(t, egressYaml(`${echo.url}/v1`));
}

async function cardToken(url: string, number: string): Promise<string> {
  const res = await call(url, '/proxy/payments', { body: JSON.stringify({ card: { number } }) });
  assert.equal(res.status, 200);
  return JSON.parse(res.text).card.number as string;
}

/** A vendor that hands each request's `card.number` and its response to `answer`, set by the test. */
async function startCardVendor(t: TestContext): Promise<{ port: number; answer: (number: string, res: ServerResponse) => void }> {
  const vendor = {
    port: 0,
    answer: (_number: string, _res: ServerResponse): void => {},
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => vendor.answer((JSON.parse(Buffer.concat(chunks).toString()) as { card: { number: string } }).card.number, res));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  vendor.port = (server.address() as AddressInfo).port;
  return vendor;
}

test('an egress route decrypts on the way out: the vendor gets plaintext and the application’s authorization', async (t) => {
  const echo = await startEcho(t);
  const { url } = await start(t, echo);
  const token = await cardToken(url, '4111 1111 1111 1111');
  assert.match(token, TOKEN);
  const body = `{"amount": 1000, "card": {"number": "${token}", "exp": "12/28"}}`;
  const res = await fetch(`${url}/egress/vendor/charges/new?expand=card&x=1`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk_vendor_123', 'idempotency-key': 'k1', 'x-svc-fields': 'amount', 'x-svc-request-id': 'eg-1' },
    body,
  });
  const text = await res.text();
  assert.equal(res.status, 201);
  assert.equal(res.headers.get('x-echo'), 'yes');
  assert.equal(res.headers.get('x-svc-request-id'), 'eg-1');
  // Egress decrypts for the pod: every value plain, and the application is told so.
  assert.equal(res.headers.get('x-svc-reveal'), 'plain=1, mask=0, redact=0, token=0');
  assert.equal(echo.received.length, 1);
  const got = echo.received[0]!;
  assert.equal(got.method, 'PUT');
  assert.equal(got.url, '/v1/charges/new?expand=card&x=1');
  assert.equal(got.headers['authorization'], 'Bearer sk_vendor_123');
  assert.equal(got.headers['idempotency-key'], 'k1');
  assert.equal(got.headers['host'], `127.0.0.1:${echo.port}`, 'the vendor sees its own host');
  for (const name of Object.keys(got.headers)) assert.ok(!name.startsWith('x-svc-'), `${name} was forwarded`);
  assert.equal(got.body.toString(), '{"amount": 1000, "card": {"number": "4111 1111 1111 1111", "exp": "12/28"}}');
  // The vendor echoes the card number: the application gets it back encrypted, the rest as sent.
  const answered = JSON.parse(text);
  assert.match(answered.card.number, TOKEN);
  assert.equal(text, got.body.toString().replace('4111 1111 1111 1111', answered.card.number), 'the vendor’s answer is relayed, the echoed field re-encrypted');
  const back = await call(url, '/proxy/payments', { body: text, headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(back.json.card.number, '4111 1111 1111 1111');
});

test('an echoed value keeps its token\'s classification; response: passthrough opts out; a form request decrypts by the same path', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(
    t,
    egressYaml(
      `${echo.url}/v1`,
      `  - { name: raw, destination: "${echo.url}/v1", configuration: payments, request: { decrypt: [card.number] }, response: passthrough }
  - { name: form, destination: "${echo.url}/v1", configuration: payments, request: { decrypt: [card.number] } }`,
    ),
  );
  const phi = await call(url, '/proxy/payments', { body: '{"card":{"number":"4111"}}', headers: { 'x-svc-classification': 'phi' } });
  const token = phi.json.card.number as string;
  const echoed = await fetch(`${url}/egress/vendor/x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
  const again = JSON.parse(await echoed.text()).card.number as string;
  assert.match(again, TOKEN);
  // Decrypting it needs PHI, as the original did: the outsider key may not.
  assert.equal((await call(url, '/proxy/payments', { key: KEYS.outsider, body: JSON.stringify({ v: again }), headers: { 'x-svc-mode': 'decrypt' } })).status, 403);
  assert.equal((await call(url, '/proxy/payments', { body: JSON.stringify({ v: again }), headers: { 'x-svc-mode': 'decrypt', 'x-svc-classification': 'phi' } })).json.v, '4111');

  const raw = await fetch(`${url}/egress/raw/x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
  assert.equal(JSON.parse(await raw.text()).card.number, '4111', 'passthrough relays the answer as it is');

  const plain = await call(url, '/proxy/payments', { body: '{"card":{"number":"4242 4242"}}' });
  const form = await fetch(`${url}/egress/form/x`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `card[number]=${plain.json.card.number}&amount=5` });
  const sent = new URLSearchParams(echo.received.at(-1)!.body.toString());
  assert.equal(sent.get('card[number]'), '4242 4242', 'the vendor gets the plaintext');
  // The echo server answers with the form's bytes but calls them JSON: they cannot be read
  // as what they claim, so nothing of them reaches the application.
  assert.equal(form.status, 502);
  assert.ok(!(await form.text()).includes('4242'));
});

test('egress {rest} that could leave the destination path once decoded is refused with 403, without naming the vendor', async (t) => {
  const echo = await startEcho(t);
  const { url, port } = await start(t, echo);
  for (const rest of ['a%2Fb', 'a%2fb', '..%2F..%2Fadmin', 'a%5Cb', 'a\\b', '%2e%2e/admin', '.%2E/admin', '%2E/x', 'x/..;/admin', 'x/./y', '%2e%2e%3b/x', '%252e%252e/x', '%c0%ae%c0%ae/x', '..%00/x', 'a/..%09/x', 'a%3bb']) {
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => socket.write(`GET /egress/vendor/${rest} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`));
      let got = '';
      socket.on('data', (d: Buffer) => (got += d.toString()));
      socket.on('end', () => resolve(got));
      socket.on('error', reject);
    });
    assert.match(answer, /^HTTP\/1\.1 (403|400) /, rest);
    assert.ok(!answer.includes('127.0.0.1'), `${rest}: ${answer}`);
  }
  assert.equal(echo.received.length, 0);
  assert.equal((await fetch(`${url}/egress/vendor/a.b/c..d/%41`)).status, 201, 'dots inside names are fine');
});

test('a token that fails stops the egress request before anything leaves (422)', async (t) => {
  const echo = await startEcho(t);
  const { url } = await start(t, echo);
  const token = await cardToken(url, '4111');
  const res = await call(url, '/egress/vendor/charges', { key: null, body: `{"card":{"number":"${token.slice(0, -6)}AAAA:$"}}` });
  assert.equal(res.status, 422);
  assert.ok(res.json.errors['card.number']);
  assert.equal(echo.received.length, 0);
});

test('an egress route may encrypt on the way out and decrypt the answer', async (t) => {
  const echo = await startEcho(t);
  const { url } = await start(t, echo);
  const res = await call(url, '/egress/inbox/messages', { key: null, body: '{"email":"ada@example.com","subject":"hi"}' });
  assert.equal(res.status, 201);
  const sent = JSON.parse(echo.received[0]!.body.toString());
  assert.match(sent.email, TOKEN, 'the vendor gets a token');
  assert.equal(sent.subject, 'hi');
  assert.equal(res.text, '{"email":"ada@example.com","subject":"hi"}', 'its echo comes back decrypted');
  assert.equal(res.headers.get('content-length'), String(res.text.length));
});

test('egress: unknown route 404; no API key needed; paths cannot climb out of the destination', async (t) => {
  const echo = await startEcho(t);
  const { url, port } = await start(t, echo);
  const unknown = await call(url, '/egress/nope/x', { key: null, body: '{}' });
  assert.equal(unknown.status, 404);
  assert.deepEqual(unknown.json, { message: 'Not found.' });
  // Empty rest and a bare name both reach the destination's own path.
  assert.equal((await call(url, '/egress/vendor', { key: null, method: 'GET' })).status, 201);
  assert.equal(echo.received.at(-1)!.url, '/v1/');
  // fetch would resolve the dots itself: send them raw.
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write('GET /egress/vendor/../../admin HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'));
    let got = '';
    socket.on('data', (d: Buffer) => (got += d.toString()));
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
  });
  assert.match(answer, /^HTTP\/1\.1 403 /);
  assert.equal(echo.received.length, 1, 'nothing else reached the vendor');
});

test('egress: a destination that is down answers 502', async (t) => {
  const port = await closedPort();
  const { url } = await startApp(t, egressYaml(`http://127.0.0.1:${port}`));
  const res = await call(url, '/egress/vendor/x', { key: null, body: '{"card":{"number":"n"}}' });
  assert.equal(res.status, 502);
  assert.deepEqual(res.json, { message: 'The destination could not be reached.' });
});

test('router: a trailing *rest takes what nothing more specific matches, undecoded', () => {
  const router = new Router<string>().add('GET', '/egress/:name/*rest', 'egress').add('GET', '/egress/special/fixed', 'fixed').add('GET', '/proxy/:slug', 'proxy');
  assert.deepEqual(router.find('GET', '/egress/a/b/c%2Fd').params, { name: 'a', rest: 'b/c%2Fd' });
  assert.equal(router.find('GET', '/egress/special/fixed').handler, 'fixed');
  assert.deepEqual(router.find('GET', '/egress/a').params, { name: 'a', rest: '' });
  assert.deepEqual(router.find('GET', '/egress/a/').params, { name: 'a', rest: '' });
  assert.throws(() => router.find('GET', '/egress'), /Not found/);
  assert.throws(() => router.find('POST', '/egress/a/b'), /Method not allowed/);
  assert.throws(() => router.find('GET', '/proxy/a/b'), /Not found/);
  assert.throws(() => new Router<string>().add('GET', '/a/*rest/b', 'x'), /last segment/);
});

test('a route whose classification or configuration was deleted answers 503 and sends nothing, until it exists again', async (t) => {
  const echo = await startEcho(t);
  const { url } = await start(t, echo);
  const classifications = await call(url, '/api/v3/classifications?per_page=100', { method: 'GET' });
  const phi = (classifications.json.data as Array<{ id: number; name: string }>).find((c) => c.name === 'PHI')!;
  assert.equal((await call(url, `/api/v3/classifications/${phi.id}`, { method: 'DELETE' })).status, 204);
  const refused = await call(url, '/egress/inbox/messages', { key: null, body: '{"email":"ada@example.com"}' });
  assert.equal(refused.status, 503);
  assert.deepEqual(refused.json, { message: 'The route is not available.' });
  assert.equal(echo.received.length, 0, 'nothing reached the vendor');
  const created = await call(url, '/api/v3/classifications', { body: JSON.stringify({ name: 'PHI', bg_color: '#aa0000', fg_color: '#ffffff' }) });
  assert.equal(created.status, 201);
  assert.equal((await call(url, '/egress/inbox/messages', { key: null, body: '{"email":"ada@example.com"}' })).status, 201, 'served again once it exists');

  const configurations = await call(url, '/api/v3/configurations?per_page=100', { method: 'GET' });
  const payments = (configurations.json.data as Array<{ id: string; name: string }>).find((c) => c.name === 'payments')!;
  assert.equal((await call(url, `/api/v3/configurations/${payments.id}`, { method: 'DELETE' })).status, 204);
  const gone = await call(url, '/egress/vendor/charges', { key: null, body: '{"card":{"number":"x"}}' });
  assert.equal(gone.status, 503);
  assert.equal(echo.received.length, 1, 'still only the one request that was served');
});

test('regression: a vendor echo declared as text, or with no type, is read as JSON by its first byte and re-encrypted', async (t) => {
  let type: string | null = 'text/plain';
  const vendor = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (type !== null) res.setHeader('content-type', type);
      res.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => vendor.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => vendor.close(() => r())));
  const { url } = await startApp(t, egressYaml(`http://127.0.0.1:${(vendor.address() as AddressInfo).port}/v1`));
  const token = await cardToken(url, '4111111111111111');
  for (const declared of ['text/plain', 'text/json', 'application/x-json', 'text/html', null]) {
    type = declared;
    const res = await fetch(`${url}/egress/vendor/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
    const text = await res.text();
    assert.ok(!text.includes('4111111111111111'), `${declared}: ${text}`);
    assert.match(JSON.parse(text).card.number, TOKEN, String(declared));
  }
});

test('regression: a header named just x-svc- (or x_svc_) is ours too, and never reaches the vendor', async (t) => {
  for (const name of ['x-svc-', 'x_svc_', 'x-svc-a']) assert.ok(isOwnHeader(name), name);
  for (const name of ['x-svc', 'x-svcx', 'x-sv-', 'svc-']) assert.ok(!isOwnHeader(name), name);
  const echo = await startEcho(t);
  const { url } = await start(t, echo);
  const res = await fetch(`${url}/egress/vendor/charges`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-svc-': 'a', x_svc_: 'b', 'x-other': 'c' }, body: '{"amount":1}' });
  assert.equal(res.status, 201, await res.text());
  const got = echo.received[0]!;
  assert.equal(got.headers['x-other'], 'c');
  assert.deepEqual(Object.keys(got.headers).filter((h) => /^x[-_]svc/.test(h)), []);
});

test('the echo guard on egress routes: a vendor answer that repeats a decrypted value outside its path is a 502, and nothing of it is relayed', async (t) => {
  const vendor = await startCardVendor(t);
  const { url } = await startApp(t, egressYaml(`http://127.0.0.1:${vendor.port}/v1`));
  const token = await cardToken(url, '4111111111111111');
  const send = () => fetch(`${url}/egress/vendor/charge`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
  const leaks: Array<[string, (n: string, res: import('node:http').ServerResponse) => void]> = [
    ['another key', (n, res) => res.writeHead(402, { 'content-type': 'application/json' }).end(JSON.stringify({ error: `card ${n} declined` }))],
    ['a text answer', (n, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${n}`)],
    ['a header', (n, res) => res.writeHead(302, { location: `/v1/cards/${n}` }).end()],
  ];
  for (const [name, leak] of leaks) {
    vendor.answer = leak;
    const res = await send();
    const text = await res.text();
    assert.equal(res.status, 502, name);
    assert.ok(!text.includes('4111111111111111') && res.headers.get('location') === null, name);
  }
  vendor.answer = (n, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ card: { number: n }, status: 'ok' }));
  const ok = await send();
  assert.equal(ok.status, 200);
  assert.match(((await ok.json()) as { card: { number: string } }).card.number, TOKEN, 'at its own path the value is encrypted again');
});

/** Each character as `%HH` of its UTF-8 bytes, in the given hex case. */
function percentAll(value: string, upper: boolean): string {
  const hex = [...Buffer.from(value, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
  return upper ? hex.toUpperCase() : hex;
}

/** RFC 3986 strict: encodeURIComponent, and `!'()*` escaped too. */
function strictUri(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** Every UTF-16 unit as `\uXXXX`, in the given hex case. */
function jsonUnicodeAll(value: string, upper: boolean): string {
  let out = '';
  for (let i = 0; i < value.length; i++) {
    const hex = value.charCodeAt(i).toString(16).padStart(4, '0');
    out += `\\u${upper ? hex.toUpperCase() : hex}`;
  }
  return out;
}

/** A JSON string as an encoder that escapes HTML's characters and non-ASCII writes it (Go's, for one). */
function jsonHtmlSafe(value: string): string {
  return JSON.stringify(value)
    .slice(1, -1)
    .replace(/[<>&'\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function htmlEscape(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

test('regression: the echo guard refuses a repeated value in every spelling an encoder writes it in, and passes answers that do not hold it', async (t) => {
  // A value with the characters encoders disagree on: space, !'()*, HTML's, `/`, `+`, non-ASCII, an astral character.
  const value = "O'Brien (x) *!/<a&b> \"José\" 1+1 ✓ 😀";
  let answer: (res: import('node:http').ServerResponse) => void = () => {};
  const vendor = createServer((req, res) => {
    req.resume();
    req.on('end', () => answer(res));
  });
  await new Promise<void>((r) => vendor.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => vendor.close(() => r())));
  const { url } = await startApp(t, egressYaml(`http://127.0.0.1:${(vendor.address() as AddressInfo).port}/v1`));
  const token = await cardToken(url, value);
  const send = () => fetch(`${url}/egress/vendor/charge`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
  const form = new URLSearchParams({ echoed: value }).toString();
  const body = (type: string, text: string) => (res: import('node:http').ServerResponse) => res.writeHead(200, { 'content-type': type }).end(text);
  const header = (name: string, text: string) => (res: import('node:http').ServerResponse) => res.writeHead(302, { [name]: text }).end();
  const echoes: Array<[string, (res: import('node:http').ServerResponse) => void]> = [
    ['as it is, in text', body('text/plain; charset=utf-8', `you sent ${value}`)],
    ['in ASCII upper case', body('text/plain; charset=utf-8', `you sent ${value.replace(/[a-z]/g, (c) => c.toUpperCase())}`)],
    ['JSON, under another key', body('application/json', JSON.stringify({ error: value }))],
    ['JSON with `\\/`', body('application/json', `{"error":"${JSON.stringify(value).slice(1, -1).replaceAll('/', '\\/')}"}`)],
    ['JSON, HTML characters and non-ASCII as \\u', body('application/json', `{"error":"${jsonHtmlSafe(value)}"}`)],
    ['JSON, every character as \\u, lower-case hex', body('application/json', `{"error":"${jsonUnicodeAll(value, false)}"}`)],
    ['JSON, every character as \\u, upper-case hex', body('application/json', `{"error":"${jsonUnicodeAll(value, true)}"}`)],
    ['encodeURIComponent, in Location', header('location', `/v1/cards?n=${encodeURIComponent(value)}`)],
    ['URLSearchParams form (`+` for a space, `*` as it is)', body('application/x-www-form-urlencoded', form)],
    ['a form labelled text', body('text/plain', form)],
    ['RFC 3986 strict (`!\'()*` escaped, `%20`)', header('location', `/v1/cards/${strictUri(value)}`)],
    ['every byte percent-encoded, lower-case hex', body('text/plain', percentAll(value, false))],
    ['every byte percent-encoded, upper-case hex', header('set-cookie', `last=${percentAll(value, true)}; Path=/`)],
    ['percent-encoded twice', header('location', `/v1/next?to=${encodeURIComponent(`/cards?n=${encodeURIComponent(value)}`)}`)],
    ['HTML-escaped (&amp; &lt; &gt; &quot; &#39;)', body('text/html', `<p>${htmlEscape(value)}</p>`)],
    ['HTML with &apos;', body('text/html', `<p>${htmlEscape(value).replaceAll('&#39;', '&apos;')}</p>`)],
    ['HTML, every character as &#NN;', body('text/html', `<p>${[...value].map((c) => `&#${c.codePointAt(0)};`).join('')}</p>`)],
    ['HTML, every character as &#xHH;', body('text/html', `<p>${[...value].map((c) => `&#x${c.codePointAt(0)!.toString(16).toUpperCase()};`).join('')}</p>`)],
    ['a JSON string in an HTML attribute', body('text/html', `<div data-error="${htmlEscape(JSON.stringify({ e: jsonHtmlSafe(value) }))}"></div>`)],
  ];
  for (const [name, echo] of echoes) {
    answer = echo;
    const res = await send();
    const text = await res.text();
    assert.equal(res.status, 502, name);
    assert.equal(res.headers.get('location'), null, name);
    assert.equal(res.headers.get('set-cookie'), null, name);
    assert.ok(!text.includes('José'), name);
  }
  // Answers that do not hold it pass: the value at its own path (encrypted again), and text
  // full of escapes that decode to something else, or to a part of the value that is not its beginning.
  answer = (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ card: { number: value }, note: 'a &amp; b \\u0041 %41 <x>' }));
  const ok = await send();
  assert.equal(ok.status, 200);
  assert.match(((await ok.json()) as { card: { number: string } }).card.number, TOKEN);
  for (const text of ['&lt;a&amp;b&gt; &quot;Jos&#233;&quot; 1+1', `${encodeURIComponent(value.slice(1))}`, 'O%27Brien (y)']) {
    answer = body('text/html', text);
    const res = await send();
    assert.equal(res.status, 200, text);
    assert.equal(await res.text(), text);
  }
});

test('regression: an egress route with its own response encrypt list still refuses an answer that repeats a decrypted value; passthrough still opts out', async (t) => {
  const vendor = await startCardVendor(t);
  const destination = `http://127.0.0.1:${vendor.port}/v1`;
  const { url } = await startApp(t, `
egress:
  - { name: listed, destination: ${destination}, configuration: payments, request: { decrypt: [card.number] }, response: { encrypt: [card.number, customer.email] } }
  - { name: other, destination: ${destination}, configuration: payments, request: { decrypt: [card.number] }, response: { encrypt: [customer.email] } }
  - { name: open, destination: ${destination}, configuration: payments, request: { decrypt: [card.number] }, response: passthrough }
`);
  const token = await cardToken(url, '4111111111111111');
  const send = (route: string) => fetch(`${url}/egress/${route}/charge`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: token } }) });
  vendor.answer = (n, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ card: { number: n }, customer: { email: 'jenny@example.com' } }));
  const listed = await send('listed');
  const body = (await listed.json()) as { card: { number: string }; customer: { email: string } };
  assert.equal(listed.status, 200);
  assert.match(body.card.number, TOKEN, 'the value at a path the response encrypts is a token');
  assert.match(body.customer.email, TOKEN);
  const other = await send('other');
  assert.equal(other.status, 502, 'the value at a path the response does not encrypt is refused, not relayed');
  assert.ok(!(await other.text()).includes('4111111111111111'));
  vendor.answer = (n, res) => res.writeHead(402, { 'content-type': 'application/json' }).end(JSON.stringify({ error: `card ${n} declined` }));
  const declined = await send('listed');
  assert.equal(declined.status, 502, 'an echo in an error message is refused');
  assert.ok(!(await declined.text()).includes('4111111111111111'));
  const open = await send('open');
  assert.equal(open.status, 402, 'response: passthrough relays the answer as it is');
  assert.match(await open.text(), /4111111111111111/);
});
