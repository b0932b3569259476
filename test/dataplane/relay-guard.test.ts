/**
 * The relay guard (DESIGN §13): whatever the route, method, path spelling or content type,
 * a protected key never reaches the application in plaintext. The wider table of hostile
 * variants is test/reliability/bypass.test.ts; this file pins each rule once.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { gzipSync } from 'node:zlib';
import { call, startApp } from '../support/app.ts';
import { rawRequest, startUpstream, type Seen } from '../support/upstream.ts';

const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;
const SSN = '123-45-6789';

function guardYaml(upstream: string, protect: string, routes = '[]'): string {
  return `
relay:
  listen: 127.0.0.1:0
  upstream: ${upstream}
  protect: ${protect}
  routes: ${routes}`;
}

const PROTECT = '{ keys: [ssn, dob, card_number], configuration: payments, classification: phi }';

async function start(t: TestContext, protect = PROTECT, routes = '[]') {
  const app = await startUpstream(t);
  const running = await startApp(t, guardYaml(app.url, protect, routes), undefined, { admin: true });
  const port = (running.app.relay!.server.address() as AddressInfo).port;
  return { ...running, service: running.app, app, relay: `http://127.0.0.1:${port}`, port };
}

/** What the application received, as text. */
function received(seen: Seen[]): string {
  return seen.at(-1)!.body.toString();
}

async function send(relay: string, path: string, body: string | Buffer, contentType: string | null, method = 'POST'): Promise<Response> {
  const headers: Record<string, string> = {};
  if (contentType !== null) headers['content-type'] = contentType;
  return fetch(`${relay}${path}`, { method, headers, body });
}

async function metric(adminUrl: string, name: string): Promise<string> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(name))
    .join('\n');
}

test('a REST create no route matches: the protected value reaches the application as a token of the guard configuration and classification', async (t) => {
  const svc = await start(t);
  const res = await send(svc.relay, '/patients', `{"name":"Ada","ssn":"${SSN}","n":1.10}`, 'application/json');
  assert.equal(res.status, 200);
  const got = JSON.parse(received(svc.app.seen));
  assert.match(got.ssn, TOKEN);
  assert.equal(got.name, 'Ada');
  assert.ok(received(svc.app.seen).includes('"n":1.10'), 'other bytes unchanged');
  // The token is the guard configuration's, bound to its classification.
  const back = await call(svc.url, '/proxy/payments', { body: JSON.stringify({ ssn: got.ssn }), headers: { 'x-svc-mode': 'decrypt', 'x-svc-classification': 'phi' } });
  assert.equal(back.status, 200, back.text);
  assert.equal(back.json.ssn, SSN);
  assert.match(await metric(svc.adminUrl!, 'svc_relay_guard_total{outcome="encrypted"}'), / 1$/);
  assert.match(await metric(svc.adminUrl!, 'svc_relay_passthrough_total'), / 1$/);
});

test('keys match in any case or compatibility spelling, at any depth, under __proto__ and constructor, and escaped', async (t) => {
  const svc = await start(t);
  const body = JSON.stringify({
    SSN: SSN,
    a: { b: [{ Ssn: SSN }, { 'ſsn': SSN }] },
    'ｓｓｎ': SSN,
    ['\u212Asn'.replace('\u212A', 'S')]: SSN,
    __proto__x: 1,
    constructor: { ssn: SSN },
    'patient.ssn': SSN,
    'patient[DOB]': '1990-01-01',
  }).replace('"__proto__x":1', `"__proto__":{"ssn":"${SSN}"}`);
  const escaped = body.replace('"SSN"', '"\\u0053SN"');
  const res = await send(svc.relay, '/anything/at/all', escaped, 'application/json');
  assert.equal(res.status, 200);
  const text = received(svc.app.seen);
  assert.ok(!text.includes(SSN), text);
  assert.ok(!text.includes('1990-01-01'), text);
  assert.equal(text.match(/svc:1:/g)?.length, 9);
});

test('every value type is protected whole; null stays null; a real token of ours is kept byte for byte', async (t) => {
  const svc = await start(t);
  const mine = (await call(svc.url, '/proxy/payments', { body: `{"ssn":"${SSN}"}`, headers: { 'x-svc-fields': 'ssn', 'x-svc-classification': 'phi' } })).json.ssn as string;
  const body = `{"ssn":${JSON.stringify(mine)},"dob":{"y":1990},"card_number":4111111111111111,"x":{"ssn":true},"y":{"ssn":null}}`;
  assert.equal((await send(svc.relay, '/p', body, 'application/json')).status, 200);
  const got = JSON.parse(received(svc.app.seen));
  assert.equal(got.ssn, mine, 'a token that opens is not encrypted again');
  for (const value of [got.dob, got.card_number, got.x.ssn]) assert.match(value, TOKEN);
  assert.equal(got.y.ssn, null);
  const back = await call(svc.url, '/proxy/payments', { body: received(svc.app.seen), headers: { 'x-svc-mode': 'decrypt' } });
  assert.deepEqual(JSON.parse(back.text), JSON.parse(body.replace(JSON.stringify(mine), JSON.stringify(SSN))));
});

test('a string shaped like a token that does not open is plaintext, and is encrypted', async (t) => {
  const svc = await start(t);
  const fake = `svc:1:${SSN}:x:$`;
  const forged = (await call(svc.url, '/proxy/other-config', { body: `{"ssn":"${SSN}"}`, headers: { 'x-svc-fields': 'ssn' } })).json.ssn as string;
  await send(svc.relay, '/p', JSON.stringify({ ssn: fake, dob: forged }), 'application/json');
  const got = JSON.parse(received(svc.app.seen));
  assert.notEqual(got.ssn, fake);
  assert.match(got.ssn, TOKEN);
  assert.notEqual(got.dob, forged, "another configuration's token is not ours to vouch for");
  assert.ok(!received(svc.app.seen).includes(SSN));
  // A token of the guard's configuration but not its classification (phi) is another
  // field's value placed under a protected key: encrypted again, not vouched for.
  const unclassified = (await call(svc.url, '/proxy/payments', { body: `{"v":"1990-01-01"}`, headers: { 'x-svc-fields': 'v' } })).json.v as string;
  await send(svc.relay, '/p', JSON.stringify({ ssn: unclassified }), 'application/json');
  const wrapped = JSON.parse(received(svc.app.seen)).ssn as string;
  assert.notEqual(wrapped, unclassified);
  const opened = await call(svc.url, '/proxy/payments', { body: JSON.stringify({ ssn: wrapped }), headers: { 'x-svc-mode': 'decrypt', 'x-svc-classification': 'phi' } });
  assert.equal(opened.json.ssn, unclassified, 'the guard wrapped it, under phi');
});

test('JSON is recognised by content type or by its first byte: other types, no type and lists of types are inspected', async (t) => {
  const svc = await start(t);
  const types = [null, 'text/json', 'application/x-json', 'text/plain', 'application/json, text/plain', 'application/vnd.api+json', 'application/json; charset=UTF-8', 'application/json; charset="utf-8"', 'application/octet-stream'];
  for (const type of types) {
    const res = await send(svc.relay, '/p', `  \n{"ssn":"${SSN}"}`, type);
    assert.equal(res.status, 200, `${type}: ${res.status}`);
    assert.ok(!received(svc.app.seen).includes(SSN), `${type}: ${received(svc.app.seen)}`);
  }
  assert.equal((await send(svc.relay, '/p', `[{"ssn":"${SSN}"}]`, 'text/plain')).status, 200);
  assert.ok(!received(svc.app.seen).includes(SSN));
  // A UTF-8 byte-order mark first: parsers skip it, so does the guard.
  const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(`{"ssn":"${SSN}"}`)]);
  for (const type of ['application/json', null]) {
    assert.equal((await send(svc.relay, '/p', bom, type)).status, 200, `BOM, ${type}`);
    assert.deepEqual(svc.app.seen.at(-1)!.body.subarray(0, 3), bom.subarray(0, 3));
    assert.ok(!received(svc.app.seen).includes(SSN), `BOM, ${type}`);
  }
});

test('regression: a body declared a form that reads as JSON, and charsets given twice or hidden in another parameter, are refused', async (t) => {
  const svc = await start(t, '{ keys: [ssn], configuration: payments, uninspectable: pass }');
  const cases: Array<[string, string, string]> = [
    ['a form that is JSON', 'application/x-www-form-urlencoded', `{"a":"&ssn=${SSN}&"}`],
    ['a form that is a JSON array', 'application/x-www-form-urlencoded', `[1]&ssn=${SSN}`],
    ['charset twice', 'application/json; charset=utf-8; charset=utf-7', `{"+AHMAcwBu-":"${SSN}"}`],
    ['charset inside another parameter', 'application/json; xcharset=utf-8; charset=utf-7', `{"+AHMAcwBu-":"${SSN}"}`],
    ['compressed JSON', 'application/json', 'x'],
    ['a form that does not parse', 'application/x-www-form-urlencoded', `%zz=1&ssn=${SSN}`],
    ['JSON that does not parse', 'application/json', `{"ssn":"${SSN}"`],
  ];
  for (const [what, type, body] of cases) {
    const headers: Record<string, string> = { 'content-type': type };
    if (what === 'compressed JSON') headers['content-encoding'] = 'gzip';
    const res = await fetch(`${svc.relay}/p`, { method: 'POST', headers, body: what === 'compressed JSON' ? gzipSync(`{"ssn":"${SSN}"}`) : body });
    assert.equal(res.status, 415, what);
  }
  assert.equal(svc.app.seen.length, 0, 'declared JSON or a form: refused even with uninspectable: pass');
  // In the default mode, a body that reads as JSON in another charset is refused too.
  const strict = await start(t);
  assert.equal((await send(strict.relay, '/p', `{"+AHMAcwBu-":"${SSN}"}`, 'text/plain; charset=utf-7')).status, 415);
  assert.equal(strict.app.seen.length, 0);
});

test('NDJSON and forms are inspected line by line and parameter by parameter', async (t) => {
  const svc = await start(t);
  assert.equal((await send(svc.relay, '/p', `{"ssn":"${SSN}"}\n\n{"a":{"SSN":"${SSN}"}}\n`, 'application/x-ndjson')).status, 200);
  assert.ok(!received(svc.app.seen).includes(SSN));
  assert.equal(received(svc.app.seen).split('\n').length, 4, 'lines kept');
  const form = `name=Ada&patient%5BSSN%5D=${SSN}&ssn[]=${SSN}&card_number=4111+1111&other=${SSN}`;
  assert.equal((await send(svc.relay, '/p', form, 'application/x-www-form-urlencoded')).status, 200);
  const params = new URLSearchParams(received(svc.app.seen));
  assert.match(params.get('patient[SSN]')!, TOKEN);
  assert.match(params.get('ssn[]')!, TOKEN);
  assert.match(params.get('card_number')!, TOKEN);
  assert.equal(params.get('other'), SSN, 'only protected keys are encrypted');
  assert.equal(params.get('name'), 'Ada');
});

test('every method is inspected, with or without a route', async (t) => {
  const svc = await start(t, PROTECT, `
    - { name: create, match: { method: POST, path: /patients }, configuration: payments, request: { encrypt: [name] } }`);
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const res = await send(svc.relay, '/patients', `{"ssn":"${SSN}","name":"Ada"}`, 'application/json', method);
    assert.equal(res.status, 200, method);
    assert.ok(!received(svc.app.seen).includes(SSN), method);
  }
  const body = `{"ssn":"${SSN}"}`;
  for (const method of ['GET', 'PROPFIND', 'REPORT']) {
    const answer = await rawRequest(svc.port, `${method} /patients HTTP/1.1\r\nhost: x\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
    assert.match(answer, /^HTTP\/1\.1 200 /, method);
    assert.equal(svc.app.seen.at(-1)!.method, method);
    assert.ok(!received(svc.app.seen).includes(SSN), method);
  }
  // The route encrypted `name` on POST only; its token is not encrypted again by the guard.
  const post = JSON.parse(svc.app.seen[0]!.body.toString());
  assert.match(post.name, TOKEN);
  const back = await call(svc.url, '/proxy/payments', { body: svc.app.seen[0]!.body.toString(), headers: { 'x-svc-mode': 'decrypt' } });
  assert.deepEqual(back.json, { ssn: SSN, name: 'Ada' });
});

test('on_plaintext: refuse answers 422 naming the key and sends nothing on; a body of tokens passes', async (t) => {
  const svc = await start(t, '{ keys: [ssn], configuration: payments, on_plaintext: refuse }');
  const res = await send(svc.relay, '/p', `{"a":{"SSN":"${SSN}"}}`, 'application/json');
  assert.equal(res.status, 422);
  const body = (await res.json()) as { message: string; errors: Record<string, string[]> };
  assert.equal(body.message, 'The request carries a protected field in plaintext: ssn.');
  assert.deepEqual(body.errors, { 'a.SSN': ['The request carries a protected field in plaintext: ssn.'] });
  assert.equal(svc.app.seen.length, 0);
  const mine = (await call(svc.url, '/proxy/payments', { body: `{"ssn":"${SSN}"}`, headers: { 'x-svc-fields': 'ssn' } })).json.ssn as string;
  assert.equal((await send(svc.relay, '/p', JSON.stringify({ ssn: mine }), 'application/json')).status, 200);
  assert.equal(received(svc.app.seen), JSON.stringify({ ssn: mine }));
  assert.match(await metric(svc.adminUrl!, 'svc_relay_guard_total{outcome="refused"}'), / 1$/);
  assert.match(await metric(svc.adminUrl!, 'svc_relay_guard_total{outcome="passed"}'), / 1$/);
});

test('a body the guard cannot read is refused with 415; nothing reaches the application', async (t) => {
  const svc = await start(t);
  const cases: Array<[string, Buffer | string, string | null, Record<string, string>?]> = [
    ['compressed JSON', gzipSync(`{"ssn":"${SSN}"}`), 'application/json', { 'content-encoding': 'gzip' }],
    ['compressed, no type', gzipSync(`{"ssn":"${SSN}"}`), null, { 'content-encoding': 'gzip' }],
    ['multipart', `--b\r\ncontent-disposition: form-data; name="ssn"\r\n\r\n${SSN}\r\n--b--\r\n`, 'multipart/form-data; boundary=b'],
    ['binary', Buffer.from([0x00, 0x01, 0x02]), 'application/octet-stream'],
    ['invalid JSON', `{"ssn": "${SSN}"`, 'application/json'],
    ['latin-1 JSON', `{"ssn":"${SSN}"}`, 'application/json; charset=iso-8859-1'],
    ['JSON deeper than 32', `${'['.repeat(40)}${']'.repeat(40)}`, 'application/json'],
    ['bad form', `ss%zzn=${SSN}`, 'application/x-www-form-urlencoded'],
  ];
  for (const [what, body, type, extra] of cases) {
    const headers: Record<string, string> = { ...extra };
    if (type !== null) headers['content-type'] = type;
    const res = await fetch(`${svc.relay}/upload`, { method: 'POST', headers, body });
    assert.equal(res.status, 415, what);
    assert.match(((await res.json()) as { message: string }).message, /^The request body cannot be inspected for protected fields: /, what);
  }
  assert.equal(svc.app.seen.length, 0);
});

test('uninspectable: pass lets what the guard cannot read through untouched, still encrypting what it can', async (t) => {
  const svc = await start(t, '{ keys: [ssn], configuration: payments, uninspectable: pass }');
  const binary = Buffer.from([0x00, 0xff, 0x10]);
  assert.equal((await send(svc.relay, '/upload', binary, 'application/octet-stream')).status, 200);
  assert.deepEqual(svc.app.seen.at(-1)!.body, binary);
  // Invalid JSON (sniffed: its type is none the guard reads) found right after a long key
  // was held: the whole body still goes on as it came.
  const invalid = `{"a":"${'x'.repeat(100_000)}","${'k'.repeat(200_000)}":1,}`;
  assert.equal((await send(svc.relay, '/p', invalid, 'text/plain')).status, 200);
  assert.equal(received(svc.app.seen), invalid);
  assert.equal((await send(svc.relay, '/p', `{"ssn":"${SSN}"}`, 'application/json')).status, 200);
  assert.match(JSON.parse(received(svc.app.seen)).ssn, TOKEN);
});

test('paths with an escaped ";", control bytes or a stray "%" are refused; ";parameters" do not dodge a route', async (t) => {
  const svc = await start(t, PROTECT, `
    - { name: read, match: { method: GET, path: /records/* }, configuration: payments, response: { decrypt: [] } }`);
  for (const target of ['/records/1%3B', '/records/%zz', '/a%00b', '/a%']) {
    const answer = await rawRequest(svc.port, `GET ${target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
    assert.match(answer, /^HTTP\/1\.1 400 /, target);
  }
  assert.equal(svc.app.seen.length, 0);
  await fetch(`${svc.relay}/records;v=1/7;jsessionid=2`);
  assert.equal(svc.app.seen.at(-1)!.url, '/records;v=1/7;jsessionid=2', 'the application gets the target as sent');
});

test('a bodiless request that matches no route goes straight through; the relay strips x-svc-* on every path', async (t) => {
  const svc = await start(t);
  const res = await fetch(`${svc.relay}/static/a.css?v=1`, { headers: { 'x-svc-mode': 'decrypt', 'x-svc-authorization': 'svc_secret' } });
  assert.equal(res.status, 200);
  const seen = svc.app.seen.at(-1)!;
  assert.equal(seen.url, '/static/a.css?v=1');
  assert.equal(seen.headers['x-svc-mode'], undefined);
  assert.equal(seen.headers['x-svc-authorization'], undefined);
});

test('a guard naming a configuration that is not in the store stops the start; one deleted while running answers 503 and sends nothing on', async (t) => {
  const app = await startUpstream(t);
  await assert.rejects(
    startApp(t, guardYaml(app.url, '{ keys: [ssn], configuration: missing, classification: nope }')),
    (err: Error) => /relay\.protect\.configuration: no configuration is named "missing"/.test(err.message) && /relay\.protect\.classification: no classification/.test(err.message),
  );
  const svc = await start(t, '{ keys: [ssn], configuration: other }');
  const other = (await svc.service.services.store.configurations.findByName('other'))!;
  assert.equal((await call(svc.url, `/api/v3/configurations/${other.id}`, { method: 'DELETE' })).status, 204);
  const res = await send(svc.relay, '/p', `{"ssn":"${SSN}"}`, 'application/json');
  assert.equal(res.status, 503);
  assert.equal(svc.app.seen.length, 0);
});

test('regression: many failing values under a long key answer a bounded 422, not one many times the request', async (t) => {
  const svc = await start(t);
  const key = 'k'.repeat(60_000);
  const body = `{"${key}":[${Array.from({ length: 4000 }, () => '{"ssn":"\\ud800"}').join(',')}]}`;
  const res = await send(svc.relay, '/p', body, 'application/json');
  assert.equal(res.status, 422);
  const text = await res.text();
  assert.ok(text.length < 64 * 1024, `${text.length} bytes`);
  const errors = (JSON.parse(text) as { errors: Record<string, string[]> }).errors;
  assert.ok(Object.keys(errors).length <= 100);
  for (const path of Object.keys(errors)) assert.ok(path.length <= 257, `${path.length}`);
  assert.equal(svc.app.seen.length, 0);
});

test('regression: an unmatched target a router reads as a route\'s path is refused with a body too; /patients.json is /patients', async (t) => {
  const svc = await start(t, PROTECT, `
    - { name: write, match: { method: POST, path: /patients/** }, configuration: payments, request: { encrypt: [contacts.*.phone] } }`);
  for (const target of ['/patients#frag', '/x/%2e%2e/patients', '/x/../patients']) {
    const body = '{"contacts":[{"phone":"555-0100"}]}';
    const answer = await rawRequest(svc.port, `POST ${target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
    assert.match(answer, /^HTTP\/1\.1 (400|200) /, target);
    if (answer.startsWith('HTTP/1.1 200')) assert.ok(!received(svc.app.seen).includes('555-0100'), `${target} went through a route`);
  }
  assert.ok(svc.app.seen.every((seen) => !seen.body.toString().includes('555-0100')));
  const json = await send(svc.relay, '/patients.json', '{"contacts":[{"phone":"555-0100"}]}', 'application/json');
  assert.equal(json.status, 200);
  assert.match(JSON.parse(received(svc.app.seen)).contacts[0].phone, TOKEN);
});

test('regression: names binders read as the protected key — leading spaces, ! and _, a NUL cut, a ; separator — are protected', async (t) => {
  const svc = await start(t);
  const forms = [`%20ssn=${SSN}`, `+ssn=${SSN}`, `ssn%00x=${SSN}`, `!ssn=${SSN}`, `_ssn=${SSN}`, `a=1;ssn=${SSN}`, `a=1;b=2;ssn=${SSN}&c=3`, `x=${SSN.replaceAll('-', ';')}&ssn=12;3`];
  for (const form of forms) {
    assert.equal((await send(svc.relay, '/p', form, 'application/x-www-form-urlencoded')).status, 200, form);
    const sent = received(svc.app.seen);
    assert.ok(!sent.includes(SSN), `${form} → ${sent}`);
    if (form.endsWith('ssn=12;3')) assert.ok(!/ssn=12/.test(sent) && !/;3(&|$)/.test(sent), `a value after & is encrypted whole: ${sent}`);
  }
  const json = JSON.stringify({ ' ssn': SSN, a: { _ssn: SSN, '!ssn': SSN, 'ssn\u0000x': SSN, 'a;ssn': SSN } });
  assert.equal((await send(svc.relay, '/p', json, 'application/json')).status, 200);
  assert.ok(!received(svc.app.seen).includes(SSN), received(svc.app.seen));
});

test('regression: a content type that lenient servers read as a form (cut at a comma or space, or by its prefix) is read as a form', async (t) => {
  const types = ['application/x-www-form-urlencoded, text/plain', 'application/x-www-form-urlencoded x', 'application/x-www-form-urlencoded,', 'Application/X-WWW-Form-Urlencodedx'];
  // PHP reads these as forms: `ssn` is a parameter there, and the JSON reading names none.
  const strict = await start(t, '{ keys: [ssn], configuration: payments }');
  for (const type of types) {
    const res = await send(strict.relay, '/p', `{"a":"&ssn=${SSN}&"}`, type);
    assert.equal(res.status, 415, type);
    assert.match(((await res.json()) as { message: string }).message, /declared a form but reads as JSON/, type);
  }
  assert.equal(strict.app.seen.length, 0, 'nothing reached the application');
  // Declared so, a form is inspected even with uninspectable: pass.
  const lenient = await start(t, '{ keys: [ssn], configuration: payments, uninspectable: pass }');
  for (const type of types) {
    assert.equal((await send(lenient.relay, '/p', `a=1&ssn=${SSN}`, type)).status, 200, type);
    const params = new URLSearchParams(received(lenient.app.seen));
    assert.match(params.get('ssn')!, TOKEN, type);
    assert.equal(params.get('a'), '1');
  }
  assert.equal((await send(lenient.relay, '/p', `{"a":1}\n{"ssn":"${SSN}"}\n`, 'application/x-ndjson, text/plain')).status, 200);
  assert.ok(!received(lenient.app.seen).includes(SSN), received(lenient.app.seen));
});

test('regression: a key with an unpaired surrogate escape inside (which a reader may drop when it re-encodes) matches', async (t) => {
  const svc = await start(t);
  for (const key of ['ss\\ud800n', '\\udc00ssn', 'ssn\\udbff', 'S\\uDFFFSN']) {
    const res = await send(svc.relay, '/p', `{"${key}":"${SSN}","a":1}`, 'application/json');
    assert.equal(res.status, 200, key);
    const text = received(svc.app.seen);
    assert.ok(!text.includes(SSN), `${key}: ${text}`);
    assert.ok(text.startsWith(`{"${key}":"svc:1:`), text);
  }
});

test('regression: a protected key in a path segment\'s ;-parameters (JAX-RS and Spring matrix variables) is refused, on any route or none', async (t) => {
  const svc = await start(t, PROTECT, `
    - { name: create, match: { method: POST, path: /patients/* }, configuration: payments, request: { encrypt: [name] } }`);
  const mine = (await call(svc.url, '/proxy/payments', { body: `{"ssn":"${SSN}"}`, headers: { 'x-svc-fields': 'ssn', 'x-svc-classification': 'phi' } })).json.ssn as string;
  for (const [method, target] of [
    ['GET', `/patients;ssn=${SSN}/7`],
    ['GET', `/p;x=1;SSN=${SSN}`],
    ['GET', `/a/b;%73sn=${SSN}?page=1`],
    ['POST', `/patients/7;dob=1990-01-01`],
    ['DELETE', `/p;card_number=4111`],
  ] as const) {
    const res = await fetch(`${svc.relay}${target}`, { method, ...(method === 'POST' ? { body: '{}', headers: { 'content-type': 'application/json' } } : {}) });
    assert.equal(res.status, 422, target);
    assert.match(((await res.json()) as { message: string }).message, /^The request carries a protected field in plaintext: (ssn|dob|card_number)\.$/, target);
  }
  assert.equal(svc.app.seen.length, 0, 'nothing reached the application');
  assert.equal((await fetch(`${svc.relay}/p;ssn=%zz`)).status, 400);
  // Other parameters, and a token of ours, pass as they are.
  for (const target of ['/p;jsessionid=abc/7', `/p;ssn=${mine}`, '/p;']) {
    const res = await fetch(`${svc.relay}${target}`);
    assert.equal(res.status, 200, target);
    assert.equal(svc.app.seen.at(-1)!.url, target);
  }
});

test('regression: a query value that holds JSON with a protected key in plaintext is refused; JSON without one, or with a token of ours, passes', async (t) => {
  // LoopBack-style `filter=` and hand-made APIs parse a parameter's JSON and bind what is
  // inside: `filter={"where":{"ssn":…}}` reached the application in plaintext.
  const svc = await start(t);
  const mine = (await call(svc.url, '/proxy/payments', { body: `{"ssn":"${SSN}"}`, headers: { 'x-svc-fields': 'ssn', 'x-svc-classification': 'phi' } })).json.ssn as string;
  const q = (value: unknown) => encodeURIComponent(typeof value === 'string' ? value : JSON.stringify(value));
  for (const [method, target] of [
    ['GET', `/patients?filter=${q({ where: { ssn: SSN } })}`],
    ['GET', `/p?f=${q([{ a: [{ SSN: SSN }] }])}`],
    ['GET', `/p?f=${q({ where: { ssn: { inq: [SSN] } } })}`],
    ['GET', `/p?f=${q({ dob: 19900101 })}`],
    ['GET', `/p?f=${q({ x: JSON.stringify({ card_number: '4111111111111111' }) })}`],
    ['GET', `/p?f=+++${q({ ssn: SSN })}`],
    ['POST', `/p?f=${q({ ssn: SSN })}`],
    ['GET', `/p;m=${q({ ssn: SSN })}`],
  ] as const) {
    const res = await fetch(`${svc.relay}${target}`, { method, ...(method === 'POST' ? { body: '{}', headers: { 'content-type': 'application/json' } } : {}) });
    assert.equal(res.status, 422, target);
    assert.match(((await res.json()) as { message: string }).message, /^The request carries a protected field in plaintext: (ssn|dob|card_number)\.$/, target);
  }
  assert.equal(svc.app.seen.length, 0, 'nothing reached the application');
  for (const target of [`/p?filter=${q({ where: { name: 'Ada' } })}`, `/p?f=${q({ ssn: mine })}`, `/p?f=${q({ ssn: null })}`, `/p?f=${q('{not json')}`, `/p?f=${q('[1,2]')}`]) {
    const res = await fetch(`${svc.relay}${target}`);
    assert.equal(res.status, 200, target);
    assert.equal(svc.app.seen.at(-1)!.url, target);
  }
});

test('regression: JSON in a query value is read whole when it holds a raw ";", and when it holds bytes that are not UTF-8', async (t) => {
  // Servers that split a query only at `&` hand `{"a":"x;","ssn":…}` over whole, and lenient
  // decoders turn `%FF` into U+FFFD or a Latin-1 character: both still parse as JSON there.
  const svc = await start(t);
  const q = (value: unknown) => encodeURIComponent(JSON.stringify(value));
  for (const target of [
    `/p?f={"a":"x;","ssn":"${SSN}"}`,
    `/p?f=${q({ ssn: SSN }).slice(0, -6)}%FF%22%7D`,
  ]) {
    const res = await fetch(`${svc.relay}${target}`);
    assert.equal(res.status, 422, target);
    assert.match(((await res.json()) as { message: string }).message, /^The request carries a protected field in plaintext: ssn\.$/, target);
  }
  assert.equal(svc.app.seen.length, 0, 'nothing reached the application');
});
