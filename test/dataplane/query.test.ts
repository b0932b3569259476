/**
 * Query-string rules (DESIGN §15 `query:`) on egress and relay routes, and the relay guard
 * over query strings: named parameters are encrypted or decrypted before anything is
 * forwarded, the rest of the query is copied byte for byte, and a bad token or a query
 * that does not decode stops the request with nothing sent.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { FieldMatcher, compileFieldPaths } from '../../src/fields/paths.ts';
import { splitTarget, transformQuery } from '../../src/fields/query.ts';
import type { ValueHandler } from '../../src/fields/value.ts';
import { InvalidQueryError } from '../../src/errors.ts';
import { call, startApp } from '../support/app.ts';
import { startEcho } from '../support/destinations.ts';
import { rawRequest, startUpstream } from '../support/upstream.ts';

const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;
const SSN = '123-45-6789';

async function tokenOf(url: string, value: string, classification?: string): Promise<string> {
  const headers: Record<string, string> = { 'x-svc-fields': 'v' };
  if (classification !== undefined) headers['x-svc-classification'] = classification;
  const res = await call(url, '/proxy/payments', { body: JSON.stringify({ v: value }), headers });
  assert.equal(res.status, 200, res.text);
  return res.json.v as string;
}

function tamper(token: string): string {
  const i = token.length - 4;
  return `${token.slice(0, i)}${token[i] === 'A' ? 'B' : 'A'}${token.slice(i + 1)}`;
}

/** Decrypts a token (for checking what an application received). */
async function plain(url: string, token: string): Promise<string> {
  const res = await call(url, '/proxy/payments', { body: JSON.stringify({ v: token }), headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(res.status, 200, res.text);
  return res.json.v as string;
}

test('unit: transformQuery replaces matched parameters only and copies every other byte', () => {
  const label: ValueHandler = { replace: (v) => v.encodePlain(Buffer.from(`<${v.path()}=${v.plaintext()!.toString()}>`), 's') };
  const query = 'a=1&card%5Bnumber%5D=4242+42%2042&x=%7e~&card.number=9&b=a;card[number]=7&&flag';
  assert.equal(
    transformQuery(query, compileFieldPaths('card[number]')!, label),
    'a=1&card%5Bnumber%5D=%3Ccard.number%3D4242%2042%2042%3E&x=%7e~&card.number=%3Ccard.number%3D9%3E&b=a;card[number]=7&&flag',
  );
  // A handler that protects has it split at ; too: the parameter after it is found.
  assert.match(transformQuery(query, compileFieldPaths('card[number]')!, { ...label, protects: true }), /;card\[number\]=%3Ccard\.number%3D7%3E&&flag$/);
  assert.equal(transformQuery('', compileFieldPaths('a')!, label), '');
  assert.throws(() => transformQuery('%zz=1', compileFieldPaths('a')!, label), InvalidQueryError);
  assert.throws(() => transformQuery('a=%E2%82', compileFieldPaths('a')!, label), InvalidQueryError);
  assert.equal(transformQuery('b=%zz&a=1', compileFieldPaths('a')!, label), 'b=%zz&a=%3Ca%3D1%3E', 'a value nobody names is not read');
  const tokens: string[] = [];
  assert.equal(transformQuery('t=svc:1:AQ:Zg:$&u=2', FieldMatcher.anyToken(), { replace: (v) => (tokens.push(String(v.token())), null) }), 't=svc:1:AQ:Zg:$&u=2');
  assert.deepEqual(tokens, ['svc:1:AQ:Zg:$', 'null']);
  assert.deepEqual(splitTarget('/a/b?x=1?y'), { path: '/a/b', query: 'x=1?y' });
  assert.deepEqual(splitTarget('/a'), { path: '/a', query: null });
});

function egressYaml(destination: string): string {
  return `
egress:
  - name: vendor
    destination: ${destination}
    configuration: payments
    query: { decrypt: ["card[number]", ssn] }
  - name: phi
    destination: ${destination}
    configuration: payments
    query: { decrypt: [ssn], classification: phi }
  - name: upload
    destination: ${destination}
    configuration: payments
    query: { encrypt: [email] }
  - name: passthrough
    destination: ${destination}
    configuration: payments
    query: { decrypt: [ssn] }
    response: passthrough`;
}

test('egress: named query parameters are decrypted before the vendor gets them; the rest of the query is copied byte for byte', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(t, egressYaml(`${echo.url}/v1`));
  const card = await tokenOf(url, '4242 4242');
  const ssn = await tokenOf(url, SSN);
  const query = `amount=1000&card%5Bnumber%5D=${card}&expand[]=x&q=a+b%2Fc&ssn=${ssn}&ssn=${ssn}&other=${card}`;
  const res = await fetch(`${url}/egress/vendor/charges?${query}`);
  assert.equal(res.status, 201, `${await res.text()} ${JSON.stringify(echo.received.map((r) => r.url))}`);
  assert.equal(res.headers.get('x-svc-fields-transformed'), '3');
  assert.equal(echo.received.length, 1);
  assert.equal(echo.received[0]!.url, `/v1/charges?amount=1000&card%5Bnumber%5D=4242%204242&expand[]=x&q=a+b%2Fc&ssn=${SSN}&ssn=${SSN}&other=${card}`);
  // With a body: both transformed, and counted together.
  const body = await fetch(`${url}/egress/vendor/charges?ssn=${ssn}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
  assert.equal(body.status, 201);
  assert.equal(body.headers.get('x-svc-fields-transformed'), '1');
  assert.equal(echo.received[1]!.url, `/v1/charges?ssn=${SSN}`);
  // Without a query, or a query with nothing named: as before.
  assert.equal((await fetch(`${url}/egress/vendor/charges`)).status, 201);
  assert.equal(echo.received[2]!.url, '/v1/charges');
  assert.equal((await fetch(`${url}/egress/vendor/charges?a=%zz;b`)).status, 201);
  assert.equal(echo.received[3]!.url, '/v1/charges?a=%zz;b');
});

test('egress: a tampered token, a wrongly classified one, or a name that does not decode stops the request with nothing sent', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(t, egressYaml(`${echo.url}/v1`));
  const ssn = await tokenOf(url, SSN);
  const tampered = await fetch(`${url}/egress/vendor/charges?ssn=${tamper(ssn)}`);
  assert.equal(tampered.status, 422);
  const answer = (await tampered.json()) as { errors: Record<string, string[]> };
  assert.deepEqual(Object.keys(answer.errors), ['ssn']);
  const wrong = await fetch(`${url}/egress/phi/charges?ssn=${ssn}`);
  assert.equal(wrong.status, 403);
  for (const query of [`%zz=1&ssn=${ssn}`, `ssn=${ssn}&ss%E2%82=1`, `card[number]=%`]) {
    const bad = await fetch(`${url}/egress/vendor/charges?${query}`);
    assert.equal(bad.status, 400, query);
    const json = (await bad.json()) as { message: string };
    assert.match(json.message, /^The query string is not valid: /);
  }
  assert.equal(echo.received.length, 0, 'nothing reached the vendor');
});

test('egress: hostile spellings — an escaped name, a dotted name and repeats are decrypted; a token after ";" stays a token', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(t, egressYaml(`${echo.url}/v1`));
  const card = await tokenOf(url, '4242');
  const encoded = card.replace(/:/g, '%3A').replace('$', '%24');
  const res = await fetch(`${url}/egress/vendor/x?card%5Bnumber%5D=${encoded}&card.number=${card}&card[number]=${card}&a=1;card[number]=${card}`);
  assert.equal(res.status, 201);
  assert.equal(echo.received[0]!.url, `/v1/x?card%5Bnumber%5D=4242&card.number=4242&card[number]=4242&a=1;card[number]=${card}`);
});

test('egress: query encryption, and a vendor echoing a decrypted query value gets it encrypted again in the answer', async (t) => {
  // The vendor answers JSON that echoes the ssn parameter it received.
  const vendor = createServer((req, res) => {
    const ssn = new URL(req.url!, 'http://v').searchParams.get('ssn');
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ssn, ok: true }));
  });
  await new Promise<void>((r) => vendor.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => { vendor.closeAllConnections(); vendor.close(() => r()); }));
  const destination = `http://127.0.0.1:${(vendor.address() as AddressInfo).port}`;
  const { url } = await startApp(t, egressYaml(destination));
  const ssn = await tokenOf(url, SSN);
  const echoed = (await (await fetch(`${url}/egress/vendor/lookup?ssn=${ssn}`)).json()) as { ssn: string };
  assert.match(echoed.ssn, TOKEN, 'the application never gets the plaintext back');
  assert.equal(await plain(url, echoed.ssn), SSN);
  const opted = (await (await fetch(`${url}/egress/passthrough/lookup?ssn=${ssn}`)).json()) as { ssn: string };
  assert.equal(opted.ssn, SSN, 'response: passthrough relays the answer as it is');

  const echo = await startEcho(t);
  const running = await startApp(t, egressYaml(`${echo.url}/v1`));
  const up = await fetch(`${running.url}/egress/upload/x?email=ada%40example.com&n=1`);
  assert.equal(up.status, 201);
  const sent = new URL(echo.received[0]!.url, 'http://v');
  assert.match(sent.searchParams.get('email')!, TOKEN);
  assert.equal(sent.searchParams.get('n'), '1');
  assert.equal(await plain(running.url, sent.searchParams.get('email')!), 'ada@example.com');
});

function relayYaml(upstream: string, protect: string | null, routes: string): string {
  return `
relay:
  listen: 127.0.0.1:0
  upstream: ${upstream}
${protect === null ? '' : `  protect: ${protect}\n`}  routes: ${routes}`;
}

async function startRelay(t: TestContext, protect: string | null, routes = '[]') {
  const app = await startUpstream(t);
  const running = await startApp(t, relayYaml(app.url, protect, routes), undefined, { admin: true });
  const port = (running.app.relay!.server.address() as AddressInfo).port;
  return { ...running, app, relay: `http://127.0.0.1:${port}`, port };
}

const ROUTES = `
    - { name: search, match: { method: GET, path: /search }, configuration: payments, query: { decrypt: [ssn] } }
    - { name: pay, match: { path: /pay }, configuration: payments, query: { encrypt: ["card[number]"] } }`;

test('relay: a route decrypts or encrypts named query parameters on the way to the application', async (t) => {
  const svc = await startRelay(t, null, ROUTES);
  const ssn = await tokenOf(svc.url, SSN);
  const got = await fetch(`${svc.relay}/search?ssn=${ssn}&page=2`);
  assert.equal(got.status, 200);
  assert.equal(svc.app.seen.at(-1)!.url, `/search?ssn=${SSN}&page=2`);
  const bad = await fetch(`${svc.relay}/search?ssn=${tamper(ssn)}&page=2`);
  assert.equal(bad.status, 422);
  assert.equal(svc.app.seen.length, 1, 'nothing reached the application');
  const pay = await fetch(`${svc.relay}/pay?card%5Bnumber%5D=4242+4242&a=1;card[number]=1111&x=%7E`, { method: 'POST' });
  assert.equal(pay.status, 200);
  const target = svc.app.seen.at(-1)!.url;
  const [first, second] = [...target.matchAll(/card(?:%5B|\[)number(?:%5D|\])=([^&;]+)/g)].map((m) => m[1]!);
  assert.match(first!, TOKEN);
  assert.match(second!, TOKEN, 'encryption splits at ";" as well');
  assert.equal(await plain(svc.url, first!), '4242 4242');
  assert.ok(target.startsWith('/pay?card%5Bnumber%5D=svc:') && target.endsWith('&x=%7E'), target);
});

const PROTECT = '{ keys: [ssn, card_number], configuration: payments, classification: phi }';

test('relay guard: a protected key in the query string never reaches the application in plaintext, whatever the route or method', async (t) => {
  const svc = await startRelay(t, PROTECT, ROUTES);
  for (const [method, path, tokens] of [
    ['GET', `/anything?ssn=${SSN}&keep=1`, 1],
    ['GET', `/anything?SSN=${SSN}&keep=1`, 1],
    ['GET', `/anything?patient%5Bssn%5D=${SSN}&keep=1`, 1],
    ['GET', `/anything?patient.ſsn=${encodeURIComponent(SSN)}&keep=1`, 1],
    ['GET', `/anything?a=1;ssn=${SSN}&keep=1`, 1],
    ['GET', `/anything?ssn=${SSN}&ssn=${SSN}&keep=1`, 2],
    ['DELETE', `/anything?card_number=4242+4242&keep=1`, 1],
    ['POST', `/anything?ssn=${SSN}&keep=1`, 1],
    ['GET', `/pay?ssn=${SSN}&keep=1`, 1],
  ] as const) {
    const init: RequestInit = method === 'POST' ? { method, headers: { 'content-type': 'application/json' }, body: '{"a":1}' } : { method };
    const res = await fetch(`${svc.relay}${path}`, init);
    assert.equal(res.status, 200, `${method} ${path}: ${await res.text()}`);
    const seen = svc.app.seen.at(-1)!.url;
    assert.ok(!seen.includes(SSN) && !seen.includes('4242'), `${method} ${path} reached the application as ${seen}`);
    assert.ok(seen.endsWith('&keep=1'), seen);
    assert.equal((seen.match(/svc:1:/g) ?? []).length, tokens, seen);
  }
  // A route's decrypted parameter under a protected key is protected again: the guard has the last word.
  const ssn = await tokenOf(svc.url, SSN, 'phi');
  assert.equal((await fetch(`${svc.relay}/search?ssn=${ssn}`)).status, 200);
  const seen = svc.app.seen.at(-1)!.url;
  assert.match(seen, /^\/search\?ssn=svc:1:/);
  assert.ok(!seen.includes(SSN));
  // A token of the guard's configuration and classification is kept byte for byte.
  assert.equal((await fetch(`${svc.relay}/anything?ssn=${ssn}`)).status, 200);
  assert.equal(svc.app.seen.at(-1)!.url, `/anything?ssn=${ssn}`);
  // A query without a protected key passes as it is, however it is spelled.
  assert.equal((await fetch(`${svc.relay}/anything?a=%7e+b&c`)).status, 200);
  assert.equal(svc.app.seen.at(-1)!.url, '/anything?a=%7e+b&c');
});

test('relay guard: on_plaintext refuse answers 422; a query the guard cannot read is a 400, even with uninspectable: pass; WebSocket upgrades are refused', async (t) => {
  const refuse = await startRelay(t, '{ keys: [ssn], configuration: payments, on_plaintext: refuse }');
  const res = await fetch(`${refuse.relay}/anything?ssn=${SSN}`);
  assert.equal(res.status, 422);
  assert.equal(((await res.json()) as { message: string }).message, 'The request carries a protected field in plaintext: ssn.');
  const bad = await fetch(`${refuse.relay}/anything?%zz=1&ssn=${SSN}`);
  assert.equal(bad.status, 400);
  assert.match(((await bad.json()) as { message: string }).message, /^The query string is not valid: /);
  assert.equal(refuse.app.seen.length, 0, 'nothing reached the application');

  const encrypting = await startRelay(t, PROTECT);
  const upgrade = await rawRequest(
    encrypting.port,
    `GET /ws?ssn=${SSN} HTTP/1.1\r\nhost: app\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n`,
  );
  assert.match(upgrade, /^HTTP\/1\.1 422 /);
  assert.equal(encrypting.app.seen.length, 0);

  // An application reads its query whatever the guard makes of it, and many decode a bad
  // escape leniently (`ssn=123-45-6789%` is the SSN to them): `pass` never applies here.
  const passing = await startRelay(t, '{ keys: [ssn], configuration: payments, uninspectable: pass }');
  for (const query of ['%zz=1', `ssn=${SSN}%`, `ssn=${SSN}%FF`, 'ssn=%u0031%u0032%u0033']) {
    const res = await fetch(`${passing.relay}/anything?${query}`);
    assert.equal(res.status, 400, query);
    await res.arrayBuffer();
  }
  assert.equal(passing.app.seen.length, 0, 'nothing reached the application');
});

test('relay guard: names a server reads as a protected key — cut at a raw ";", quoted map keys — are protected in bodies and queries', async (t) => {
  const relay = await startRelay(t, PROTECT);
  for (const name of ['ssn;x', "p['ssn']", 'p["ssn"]', 'a;b;ssn']) {
    const form = `${encodeURIComponent(name).replace(/%3B/g, ';')}=${SSN}`;
    const inQuery = await fetch(`${relay.relay}/anything?${form}`);
    assert.equal(inQuery.status, 200, name);
    await inQuery.arrayBuffer();
    const inBody = await fetch(`${relay.relay}/anything`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form });
    assert.equal(inBody.status, 200, name);
    await inBody.arrayBuffer();
  }
  for (const seen of relay.app.seen) {
    const text = `${seen.url} ${seen.body.toString()}`;
    assert.ok(!text.includes(SSN) && !text.includes(encodeURIComponent(SSN)), `plaintext reached the application: ${text}`);
  }
});

test('relay: bracket paths on a route transform form bodies and form answers, and name the same fields in JSON', async (t) => {
  // The application answers with what it got, in the format it got it.
  const app = await startUpstream(t, (req, body, res) => {
    res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'text/plain' });
    res.end(body);
  });
  const running = await startApp(t, relayYaml(app.url, null, `
    - { name: in, match: { method: POST, path: /in }, configuration: payments, request: { encrypt: ["patient[ssn]", "items[*][card]"] } }
    - { name: out, match: { method: POST, path: /out }, configuration: payments, response: { decrypt: ["patient[ssn]"] } }`));
  const relay = `http://127.0.0.1:${(running.app.relay!.server.address() as AddressInfo).port}`;
  const form = await fetch(`${relay}/in`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `patient%5Bssn%5D=${SSN}&items[0][card]=4242&items[1][card]=5555&n=1` });
  assert.equal(form.status, 200);
  const sent = app.seen.at(-1)!.body.toString();
  assert.match(sent, /^patient%5Bssn%5D=svc:1:[^&]+&items\[0\]\[card\]=svc:1:[^&]+&items\[1\]\[card\]=svc:1:[^&]+&n=1$/);
  const json = await fetch(`${relay}/in`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ patient: { ssn: SSN }, items: [{ card: '4242' }] }) });
  assert.equal(json.status, 200);
  const got = JSON.parse(app.seen.at(-1)!.body.toString());
  assert.match(got.patient.ssn, TOKEN);
  assert.match(got.items[0].card, TOKEN);
  // The answer side: the application answers a form holding a token; the client gets the plaintext.
  const token = new URLSearchParams(sent).get('patient[ssn]')!;
  const out = await fetch(`${relay}/out`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `patient[ssn]=${token}&k=1` });
  assert.equal(out.status, 200);
  assert.equal(await out.text(), `patient[ssn]=${SSN}&k=1`);
});
