import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { gzipSync } from 'node:zlib';
import { createApp } from '../../src/app.ts';
import { ConfigError, loadConfig } from '../../src/config/load.ts';
import { compileGlob, normalizePath } from '../../src/dataplane/route-match.ts';
import { openStore } from '../../src/store/db.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call, SEED, startApp, type Running } from '../support/app.ts';
import { closedPort } from '../support/destinations.ts';
import { rawRequest, startUpstream } from '../support/upstream.ts';

const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;

function relayYaml(upstream: string, routes = ROUTES): string {
  return `
relay:
  listen: 127.0.0.1:0
  upstream: ${upstream}
  routes:
${routes}`;
}

const ROUTES = `
    - name: patients
      match: { method: POST, path: /patients/* }
      configuration: payments
      request: { encrypt: [ssn, dob], classification: phi }
    - name: records
      match: { method: GET, path: /records/** }
      configuration: payments
      response: { decrypt: [ssn, items.*.ssn] }
    - name: strict
      match: { path: /strict/* }
      configuration: payments
      response: { decrypt: [ssn], classification: phi }
    - name: export
      match: { path: /export }
      configuration: payments
      response: { encrypt: [email] }
    - name: inbound-tokens
      match: { method: PUT, path: /inbound/* }
      configuration: payments
      request: { decrypt: [card.number], classification: pci }
`;

/** The service with its own store path, closed by the test itself (to read the store afterwards). */
async function startOwn(t: TestContext, yaml: string, storePath = ':memory:') {
  const text = `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${JSON.stringify(storePath)} }
${yaml}
${SEED}`;
  const service = await createApp(loadConfig({ text, env: {} }), { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') }, logger: createLogger('silent') });
  let closed: Promise<void> | null = null;
  const close = () => (closed ??= service.close());
  t.after(close);
  const { main, relay } = await service.listen();
  return { service, close, main: `http://127.0.0.1:${main.port}`, relay: `http://127.0.0.1:${relay!.port}` };
}

async function startRelay(t: TestContext, upstream: string, routes = ROUTES): Promise<Running & { relay: string }> {
  const running = await startApp(t, relayYaml(upstream, routes));
  const address = running.app.relay!.server.address() as AddressInfo;
  return { ...running, relay: `http://127.0.0.1:${address.port}` };
}

/** A token of the `payments` configuration, made through /proxy. */
async function token(url: string, value: unknown, classification?: string): Promise<string> {
  const headers: Record<string, string> = { 'x-svc-fields': 'v' };
  if (classification !== undefined) headers['x-svc-classification'] = classification;
  const res = await call(url, '/proxy/payments', { body: JSON.stringify({ v: value }), headers });
  assert.equal(res.status, 200, res.text);
  return res.json.v as string;
}

test('a relay route encrypts the request fields before the application sees them; other bytes and headers pass unchanged', async (t) => {
  const app = await startUpstream(t);
  const { url, relay } = await startRelay(t, app.url);
  const body = '{ "name" : "Ada",\n  "ssn":"123-45-6789", "dob": "1990-01-01", "n": 1.10, "nested": {"ssn": "kept"} }';
  const res = await fetch(`${relay}/patients/7?expand=1&x=%20`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer app-session', 'x-trace': 't1', 'x-svc-mode': 'decrypt', 'x-svc-request-id': 'rid-1' },
    body,
  });
  const answered = await res.text();
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-app'), 'yes');
  assert.equal(res.headers.get('x-svc-request-id'), 'rid-1');
  assert.equal(app.seen.length, 1);
  const got = app.seen[0]!;
  assert.equal(got.method, 'POST');
  assert.equal(got.url, '/patients/7?expand=1&x=%20');
  assert.equal(got.headers['authorization'], 'Bearer app-session', 'the application keeps its own authorization header');
  assert.equal(got.headers['x-trace'], 't1');
  assert.equal(got.headers['host'], new URL(relay).host, 'the client’s Host is kept, as on pass-through');
  for (const name of Object.keys(got.headers)) assert.ok(!name.startsWith('x-svc-'), `${name} reached the application`);
  const sent = got.body.toString();
  const parsed = JSON.parse(sent);
  assert.match(parsed.ssn, TOKEN);
  assert.match(parsed.dob, TOKEN);
  assert.equal(parsed.nested.ssn, 'kept');
  assert.equal(sent.replace(/"svc:[^"]+"/g, '"T"'), body.replace('"123-45-6789"', '"T"').replace('"1990-01-01"', '"T"'));
  assert.equal(answered, sent, 'no response transform on this route: the answer is relayed as-is');
  // The tokens are bound to PHI: decrypting them as PCI is refused, as PHI they open.
  assert.equal((await call(url, '/proxy/payments', { body: sent, headers: { 'x-svc-mode': 'decrypt', 'x-svc-classification': 'pci' } })).status, 403);
  const back = await call(url, '/proxy/payments', { body: sent, headers: { 'x-svc-mode': 'decrypt', 'x-svc-classification': 'phi' } });
  assert.equal(back.text, body);
});

test('a matched route with nothing to transform (no body, a request-only route read by GET) still strips x-svc- headers and answers with the request id', async (t) => {
  const app = await startUpstream(t);
  const { relay } = await startRelay(t, app.url);
  const cases: Array<[string, RequestInit]> = [
    ['/patients/7', { method: 'POST', headers: { 'x-svc-fields': 'ssn', 'x-svc-authorization': 'svc_leak', 'x-svc-request-id': 'rid-empty' } }],
    ['/inbound/3', { method: 'PUT', headers: { 'content-type': 'application/json', 'x-svc-mode': 'decrypt', 'x-svc-request-id': 'rid-empty' }, body: '{}' }],
    ['/export', { method: 'GET', headers: { 'x-svc-classification': 'phi', 'x-svc-request-id': 'rid-empty' } }],
  ];
  for (const [path, init] of cases) {
    const res = await fetch(`${relay}${path}`, init);
    await res.arrayBuffer();
    assert.equal(res.status, 200, path);
    assert.equal(res.headers.get('x-svc-request-id'), 'rid-empty', `${path}: the answer carries the request id`);
    const got = app.seen.at(-1)!;
    assert.equal(got.url, path);
    for (const name of Object.keys(got.headers)) assert.ok(!name.startsWith('x-svc-'), `${path}: ${name} reached the application`);
  }
  const bare = await fetch(`${relay}/export`);
  await bare.arrayBuffer();
  assert.match(bare.headers.get('x-svc-request-id') ?? '', /^[0-9a-f-]{36}$/, 'without one sent, the relay makes one');
});

test('a route matches however the path is spelled: case, percent-encoding, dot segments and a trailing slash', async (t) => {
  const app = await startUpstream(t);
  const { relay } = await startRelay(t, app.url);
  const port = Number(new URL(relay).port);
  for (const path of ['/PATIENTS/7', '/pat%69ents/7/', '//patients/x/../7', '/other/../patients/7']) {
    const body = '{"ssn":"1"}';
    const answer = await rawRequest(port, `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
    assert.match(answer, /^HTTP\/1\.1 200 /, path);
    const got = app.seen.at(-1)!;
    assert.equal(got.url, path, 'the path is sent as the client wrote it');
    assert.match(JSON.parse(got.body.toString()).ssn, TOKEN, path);
  }
});

test('a relay route decrypts the response fields: the application returns tokens, the client gets plaintext', async (t) => {
  let reply = '';
  const app = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(reply), etag: '"v1"', 'x-app': 'yes' });
    res.end(reply);
  });
  const { url, relay } = await startRelay(t, app.url);
  const ssn = await token(url, '123-45-6789');
  const other = await token(url, 'not listed');
  reply = `{"ssn":"${ssn}", "items":[{"ssn":"${ssn}"}], "note":"${other}"}`;
  const res = await fetch(`${relay}/records/7/history`, { headers: { authorization: 'Bearer s', 'accept-encoding': 'gzip' } });
  const text = await res.text();
  assert.equal(res.status, 200);
  assert.equal(text, `{"ssn":"123-45-6789", "items":[{"ssn":"123-45-6789"}], "note":"${other}"}`);
  assert.equal(res.headers.get('content-length'), String(Buffer.byteLength(text)));
  assert.equal(res.headers.get('x-app'), 'yes');
  assert.match(res.headers.get('x-svc-request-id') ?? '', /./);
  const got = app.seen[0]!;
  assert.equal(got.headers['accept-encoding'], 'identity', 'a route that transforms answers asks for them uncompressed');
  assert.equal(got.headers['authorization'], 'Bearer s');

  // A token that fails: 502, and nothing of the answer (no partial plaintext).
  reply = `{"ssn":"${ssn}", "items":[{"ssn":"${ssn.slice(0, -6)}AAAA:$"}]}`;
  const bad = await fetch(`${relay}/records/8`);
  const badText = await bad.text();
  assert.equal(bad.status, 502);
  assert.deepEqual(JSON.parse(badText), { message: 'The upstream response could not be transformed.' });
  assert.ok(!badText.includes('123-45-6789'));

  // Not JSON: relayed untouched, tokens and all.
  reply = `ssn=${ssn}`;
  const other2 = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(reply);
  });
  const { relay: relay2 } = await startRelay(t, other2.url);
  const plain = await fetch(`${relay2}/records/9`);
  assert.equal(await plain.text(), `ssn=${ssn}`);
});

test('a response decrypt with a classification needs every token to carry it, else 502', async (t) => {
  let reply = '';
  const app = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(reply);
  });
  const { url, relay } = await startRelay(t, app.url);
  reply = `{"ssn":"${await token(url, 'phi value', 'phi')}"}`;
  const ok = await fetch(`${relay}/strict/1`);
  assert.equal(await ok.text(), '{"ssn":"phi value"}');
  reply = `{"ssn":"${await token(url, 'unclassified')}"}`;
  const refused = await fetch(`${relay}/strict/2`);
  const text = await refused.text();
  assert.equal(refused.status, 502);
  assert.ok(!text.includes('unclassified'));
});

test('a request decrypt with a classification refuses tokens without it (403) before anything reaches the application', async (t) => {
  const app = await startUpstream(t);
  const { url, relay } = await startRelay(t, app.url);
  const pci = await token(url, '4111', 'pci');
  const ok = await fetch(`${relay}/inbound/1`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: `{"card":{"number":"${pci}"}}` });
  assert.equal(ok.status, 200);
  assert.equal(app.seen[0]!.body.toString(), '{"card":{"number":"4111"}}');
  const phi = await token(url, '4111', 'phi');
  const refused = await fetch(`${relay}/inbound/2`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: `{"card":{"number":"${phi}"}}` });
  assert.equal(refused.status, 403);
  assert.equal(app.seen.length, 1);
});

test('a response encrypt streams tokens to the client in place of the application’s plaintext', async (t) => {
  const app = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': 36 });
    res.end('{"email":"ada@example.com","id":42}\n');
  });
  const { url, relay } = await startRelay(t, app.url);
  const res = await fetch(`${relay}/export`);
  const text = await res.text();
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-length'), null, 'the upstream length no longer applies');
  const parsed = JSON.parse(text);
  assert.match(parsed.email, TOKEN);
  assert.equal(parsed.id, 42);
  assert.ok(!text.includes('ada@example.com'));
  const back = await call(url, '/proxy/payments', { body: text, headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(back.text, '{"email":"ada@example.com","id":42}\n');
});

test('a path no route matches passes through byte for byte, both ways', async (t) => {
  const reply = Buffer.from('{"ssn" : "123",  "raw":"\\u00e9"}\r\n');
  const app = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(207, 'Odd', { 'content-type': 'application/json', 'x-app': 'yes', 'set-cookie': ['a=1', 'b=2'] });
    res.end(reply);
  });
  const { relay } = await startRelay(t, app.url);
  const body = Buffer.from('{"ssn":"123-45-6789",   "n":1.10}');
  const res = await fetch(`${relay}/accounts/7?q=1`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer a', 'x-svc-fields': 'ssn' },
    body,
  });
  assert.equal(res.status, 207);
  assert.deepEqual(Buffer.from(await res.arrayBuffer()), reply);
  assert.deepEqual(res.headers.getSetCookie(), ['a=1', 'b=2']);
  assert.match(res.headers.get('x-svc-request-id') ?? '', /./, 'the request id is the one header added');
  const got = app.seen[0]!;
  assert.deepEqual(got.body, body);
  assert.equal(got.url, '/accounts/7?q=1');
  assert.equal(got.headers['x-svc-fields'], undefined, "svc-sidecar's own headers never reach the application");
  assert.equal(got.headers['authorization'], 'Bearer a');
  // The route matches by method too: GET /patients/7 is not the POST route.
  await fetch(`${relay}/patients/7`);
  assert.equal(app.seen[1]!.method, 'GET');
});

test('a form body on a matching route is transformed like JSON; a text body passes untouched; compressed JSON is refused, never passed', async (t) => {
  const app = await startUpstream(t, (_req, body, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(body);
  });
  const { relay } = await startRelay(t, app.url);
  const form = 'name=Ada+L&ssn=123-45-6789&dob=1990-01-01&note=a%26b';
  const res = await fetch(`${relay}/patients/7`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form });
  assert.equal(res.status, 200);
  const sent = new URLSearchParams(app.seen[0]!.body.toString());
  assert.equal(sent.get('name'), 'Ada L');
  assert.equal(sent.get('note'), 'a&b');
  assert.match(sent.get('ssn')!, TOKEN);
  assert.match(sent.get('dob')!, TOKEN);
  assert.ok(!app.seen[0]!.body.toString().includes('123-45-6789'));
  assert.match(app.seen[0]!.body.toString(), /^name=Ada\+L&ssn=svc:1:[^&]+&dob=svc:1:[^&]+&note=a%26b$/, 'only the values change');

  const text = 'ssn is not a field here';
  const plain = await fetch(`${relay}/patients/7`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: text });
  assert.equal(plain.status, 200);
  assert.equal(app.seen[1]!.body.toString(), text);

  const gz = await fetch(`${relay}/patients/7`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    body: gzipSync('{"ssn":"123"}'),
  });
  assert.equal(gz.status, 415);
  assert.equal(app.seen.length, 2, 'nothing reached the application');
});

test('WebSocket upgrades pass through, on any path', async (t) => {
  const app = await startUpstream(t);
  const { relay } = await startRelay(t, app.url);
  const port = Number(new URL(relay).port);
  for (const path of ['/socket', '/patients/7']) {
    const socket = connect(port, '127.0.0.1');
    t.after(() => socket.destroy());
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write(
      `GET ${path} HTTP/1.1\r\nhost: app\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nauthorization: Bearer ws\r\n\r\n`,
    );
    let got = Buffer.alloc(0);
    const read = (until: (b: Buffer) => boolean) =>
      new Promise<void>((resolve, reject) => {
        const onData = (d: Buffer) => {
          got = Buffer.concat([got, d]);
          if (until(got)) {
            socket.off('data', onData);
            resolve();
          }
        };
        socket.on('data', onData);
        socket.once('close', () => reject(new Error(`closed after ${JSON.stringify(got.toString('latin1'))}`)));
      });
    await read((b) => b.includes('\r\n\r\n'));
    assert.match(got.toString('latin1'), /^HTTP\/1\.1 101 /);
    got = got.subarray(got.indexOf('\r\n\r\n') + 4);
    const frame = Buffer.from([0x81, 0x85, 1, 2, 3, 4, 0x69, 0x67, 0x6f, 0x68, 0x6e]);
    socket.write(frame);
    await read((b) => b.length >= frame.length);
    assert.deepEqual(got, frame, 'bytes come back untouched');
    const upgrade = app.seen.at(-1)!;
    assert.equal(upgrade.url, path);
    assert.equal(upgrade.headers['authorization'], 'Bearer ws');
    socket.destroy();
  }
});

test('an upstream that is down: 502 on pass-through, on routes and on WebSocket upgrades', async (t) => {
  const port = await closedPort();
  const { relay, logs } = await startRelay(t, `http://127.0.0.1:${port}`);
  const passed = await fetch(`${relay}/anything`);
  assert.equal(passed.status, 502);
  assert.deepEqual(await passed.json(), { message: 'The destination could not be reached.' });
  const routed = await fetch(`${relay}/patients/1`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"ssn":"1"}' });
  assert.equal(routed.status, 502);
  assert.deepEqual(await routed.json(), { message: 'The destination could not be reached.' });
  const ws = await rawRequest(Number(new URL(relay).port), 'GET /ws?token=app-secret-7f3 HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n');
  assert.match(ws, /^HTTP\/1\.1 502 /);
  assert.match(logs(), /WebSocket upgrade failed/);
  assert.ok(!logs().includes('app-secret-7f3'), 'the failed upgrade is logged by path, without the application’s query string');
});

test('unit: globs and path normalization', () => {
  const one = compileGlob('/patients/*');
  assert.ok(one.test('/patients/7'));
  assert.ok(!one.test('/patients/7/x'));
  assert.ok(!one.test('/patients'));
  const any = compileGlob('/records/**');
  for (const p of ['/records', '/records/1', '/records/1/2/3']) assert.ok(any.test(p), p);
  assert.ok(!any.test('/recordsx'));
  const mid = compileGlob('/a/**/b/*.json');
  assert.ok(mid.test('/a/b/x.json'));
  assert.ok(mid.test('/a/1/2/b/x.json'));
  assert.ok(!mid.test('/a/b/x.txt'));
  assert.ok(compileGlob('/v1.0/(x)').test('/v1.0/(x)'), 'regex characters are literal');
  assert.ok(!compileGlob('/v1.0').test('/v1x0'));
  assert.ok(compileGlob('/**').test(''));
  assert.equal(normalizePath('/a//b/./c/../d/?x=1'), '/a/b/d');
  assert.equal(normalizePath('/%61%2Fb'), '/a/b');
  assert.equal(normalizePath('/patients;jsessionid=1/7;v=2'), '/patients/7');
  assert.equal(normalizePath('/patients/..;/admin'), '/admin');
  for (const refused of ['/%zz', '/a%', '/a%3Bb', '/a%3bb', '/a%00b', '/a%0Ab', '/a b', '/a\tb', '/a\x7fb']) assert.equal(normalizePath(refused), null, refused);
  assert.equal(normalizePath('/'), '');
  assert.equal(normalizePath('http://host/p/q?x'), '/p/q');
  assert.equal(normalizePath('*'), null);
});

test('a route that names a bad field path is a config problem reported with the others, before anything starts', () => {
  const text = `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ":memory:" }
${relayYaml('http://127.0.0.1:1', `
    - match: { path: /x }
      configuration: payments
      request: { encrypt: ["a..b"] }
`)}`;
  assert.throws(
    () => loadConfig({ text, env: {} }),
    (err: unknown) => err instanceof ConfigError && err.problems.includes('relay.routes.0.request.encrypt.0: the path "a..b" has an empty segment'),
  );
});

test('relay and egress routes leave api log entries named after the route (read from the store after close)', async (t) => {
  const app = await startUpstream(t);
  const dir = mkdtempSync(join(tmpdir(), 'svc-relay-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.db');
  const yaml = `${relayYaml(app.url)}
egress:
  - { name: vendor, destination: "${app.url}/v1", configuration: payments, request: { decrypt: [card.number] } }`;
  const { service, close, main: mainUrl, relay: relayUrl } = await startOwn(t, yaml, path);
  const routed = await fetch(`${relayUrl}/patients/7?secret=q`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-svc-request-id': 'relay-req-1' }, body: '{"ssn":"1"}' });
  assert.equal(routed.status, 200);
  await (await fetch(`${relayUrl}/unrouted`)).text();
  const egress = await fetch(`${mainUrl}/egress/vendor/charges`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"card":{"number":"x"}}' });
  assert.equal(egress.status, 200);
  await egress.text();
  const payments = (await service.services.store.configurations.findByName('payments'))!;
  await close();

  const store = openStore(path);
  t.after(() => store.close());
  const api = await store.logs.listApi({ limit: 100, offset: 0 });
  const relayEntry = api.find((e) => e.path === 'relay:patients POST /patients/7');
  assert.ok(relayEntry, JSON.stringify(api.map((e) => e.path)));
  assert.equal(relayEntry.requestId, 'relay-req-1');
  assert.equal(relayEntry.statusCode, 200);
  assert.equal(relayEntry.method, 'POST');
  assert.equal(relayEntry.configurationId, payments.id);
  assert.equal(relayEntry.destination, app.url);
  const egressEntry = api.find((e) => e.path === 'egress:vendor POST /charges');
  assert.ok(egressEntry, JSON.stringify(api.map((e) => e.path)));
  assert.equal(egressEntry.configurationId, payments.id);
  assert.ok(!api.some((e) => e.path.includes('unrouted')), 'pass-through is not logged');
  const usage = await store.logs.listUsage({ limit: 100, offset: 0 });
  assert.ok(usage.some((u) => u.mode === 'encrypt' && u.fieldCount === 1 && u.configurationId === payments.id));
});

test('the relay is closed with the app, WebSockets included', async (t) => {
  const app = await startUpstream(t);
  const { service, close, relay } = await startOwn(t, relayYaml(app.url));
  const socket = connect(Number(new URL(relay).port), '127.0.0.1');
  socket.on('error', () => {});
  socket.write('GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n');
  await new Promise<void>((r) => socket.once('data', () => r()));
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  await close();
  await closed;
  assert.equal(service.relay!.server.listening, false);
  await assert.rejects(fetch(relay));
});

test('HEAD and 204 on a response route are relayed without a body', async (t) => {
  const app = await startUpstream(t, (req, _body, res) => {
    res.writeHead(req.method === 'HEAD' ? 200 : 204, { 'content-type': 'application/json' });
    res.end();
  });
  const { relay } = await startRelay(t, app.url);
  const head = await fetch(`${relay}/strict/1`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  const none = await fetch(`${relay}/strict/1`, { method: 'DELETE' });
  assert.equal(none.status, 204);
  assert.equal(await none.text(), '');
});

test('a range request on a response route gets the whole transformed answer: range is not passed on, accept-ranges not advertised', async (t) => {
  let reply = '';
  // An application that honours ranges, as a static file server would.
  const app = await startUpstream(t, (req, _body, res) => {
    const whole = Buffer.from(reply);
    const range = /^bytes=(\d+)-(\d+)$/.exec(String(req.headers['range'] ?? ''));
    if (range !== null) {
      const part = whole.subarray(Number(range[1]), Number(range[2]) + 1);
      res.writeHead(206, { 'content-type': 'application/json', 'content-range': `bytes ${range[1]}-${range[2]}/${whole.length}`, 'accept-ranges': 'bytes', 'content-length': part.length });
      res.end(part);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'accept-ranges': 'bytes', 'content-length': whole.length });
    res.end(whole);
  });
  const { url, relay } = await startRelay(t, app.url);
  const ssn = await token(url, '123-45-6789');
  reply = `{"ssn":"${ssn}","id":7}`;

  const decrypted = await fetch(`${relay}/records/7`, { headers: { range: 'bytes=0-9', 'if-range': '"v1"' } });
  assert.equal(decrypted.status, 200);
  assert.equal(await decrypted.text(), '{"ssn":"123-45-6789","id":7}');
  assert.equal(decrypted.headers.get('accept-ranges'), null);
  assert.equal(decrypted.headers.get('content-range'), null);
  assert.equal(app.seen.at(-1)!.headers['range'], undefined, 'the application never saw the range');
  assert.equal(app.seen.at(-1)!.headers['if-range'], undefined);

  reply = '{"email":"ada@example.com","id":42}';
  const encrypted = await fetch(`${relay}/export`, { headers: { range: 'bytes=5-20' } });
  const text = await encrypted.text();
  assert.equal(encrypted.status, 200);
  assert.equal(encrypted.headers.get('accept-ranges'), null);
  assert.match(JSON.parse(text).email, TOKEN);
  assert.equal(app.seen.at(-1)!.headers['range'], undefined);

  // A path no route matches keeps its ranges: pass-through is byte for byte.
  reply = '0123456789abcdef';
  const passed = await fetch(`${relay}/static/file`, { headers: { range: 'bytes=2-5' } });
  assert.equal(passed.status, 206);
  assert.equal(await passed.text(), '2345');
  assert.equal(passed.headers.get('accept-ranges'), 'bytes');
});

test('pass-through refuses a target it could not pass on unchanged (400), and the service keeps running', async (t) => {
  const app = await startUpstream(t);
  const { url, relay } = await startRelay(t, app.url);
  const port = Number(new URL(relay).port);
  // Targets the URL parser would rewrite or reject: each once crashed the process or
  // reached the application as another path (`/x/..\patients/7` as `/patients/7`, a
  // request-encrypt route's path, with the body untransformed).
  for (const target of ['/\\', '/\\?x', '/\\@', 'http://[/x', 'http://:1/x', '/x/..\\patients/7', '/patients/7#/../../x', '/a/%2e%2e/b', '//x/y']) {
    const answer = await rawRequest(port, `POST ${target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 21\r\nconnection: close\r\n\r\n{"ssn":"123-45-6789"}`);
    assert.match(answer, /^HTTP\/1\.1 400 /, `${target}: ${answer.slice(0, 80)}`);
    assert.ok(/"message":"The request (target cannot be passed on unchanged|path cannot be read the same way by every router)/.test(answer), target);
    const upgrade = await rawRequest(port, `GET ${target} HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n`);
    assert.match(upgrade, /^HTTP\/1\.1 400 /, `upgrade ${target}`);
  }
  assert.equal(app.seen.length, 0, 'nothing reached the application');
  // Plain targets still pass through, and the service still answers.
  const plain = await fetch(`${relay}/static/a.b/c?q=1&r=%2F`);
  assert.equal(plain.status, 200);
  assert.equal(app.seen.at(-1)!.url, '/static/a.b/c?q=1&r=%2F');
  assert.equal((await fetch(`${url}/healthz`)).status, 200);
});

test('an application answer a response route cannot read gets 502, and the service keeps running', async (t) => {
  let headers: Record<string, string> = {};
  let answer = '{"ssn":"x"}';
  const app = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(200, headers);
    res.end(answer);
  });
  const { url, relay } = await startRelay(t, app.url);
  const unreadable: Array<Record<string, string>> = [{ 'content-type': 'application/json', 'content-encoding': 'gzip' }, { 'content-type': 'application/json; charset=iso-8859-1' }];
  for (const h of unreadable) {
    headers = h;
    const res = await fetch(`${relay}/records/1`);
    assert.equal(res.status, 502);
    assert.deepEqual(await res.json(), { message: 'The upstream response could not be transformed.' });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
  }
  // A streamed (encrypting) answer that fails on its first bytes: the 502 carries none of
  // the application's headers, which were set for an answer that never went out.
  headers = { 'content-type': 'application/json', 'set-cookie': 'session=app', 'x-app': 'yes', etag: '"v1"' };
  answer = 'not JSON at all';
  const streamed = await fetch(`${relay}/export`);
  assert.equal(streamed.status, 502);
  for (const name of ['set-cookie', 'x-app', 'etag']) assert.equal(streamed.headers.get(name), null, name);
  assert.match(streamed.headers.get('x-svc-request-id') ?? '', /./);
  assert.equal(streamed.headers.get('content-type'), 'application/json; charset=utf-8');
});

test('a client that leaves while a response route waits for the application is not an upstream error', async (t) => {
  const app = await startUpstream(t, (_req, _body, res) => {
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ssn":"x"}');
    }, 400);
  });
  const running = await startRelay(t, app.url);
  const controller = new AbortController();
  const pending = fetch(`${running.relay}/records/1`, { signal: controller.signal }).catch(() => null);
  await new Promise((r) => setTimeout(r, 100));
  controller.abort();
  await pending;
  await new Promise((r) => setTimeout(r, 600));
  assert.equal(app.seen.length, 1, 'the request reached the application');
  assert.ok(!running.logs().includes('"level":50'), 'nothing logged at error');
  assert.ok(!running.logs().includes('SVC_ERR_UPSTREAM'), running.logs().slice(-500));
});

test('regression: a WebSocket client that resets after the 101, or leaves before the application answers, does not end the process', async (t) => {
  const app = await startUpstream(t);
  const running = await startRelay(t, app.url);
  const port = Number(new URL(running.relay).port);
  const upgrade = 'GET /socket HTTP/1.1\r\nhost: app\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n';
  for (let i = 0; i < 3; i++) {
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write(upgrade);
    await new Promise<void>((r) => socket.once('data', () => r()));
    socket.resetAndDestroy();
  }
  // An application that does not do WebSockets, and answers late: the client is gone by then.
  const slow = await startUpstream(t, (_req, _body, res) => setTimeout(() => res.end('{"late":true}'), 150));
  const second = await startRelay(t, slow.url);
  const slowPort = Number(new URL(second.relay).port);
  for (let i = 0; i < 3; i++) {
    const socket = connect(slowPort, '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write(upgrade.replace('/socket', '/plain'));
    await new Promise((r) => setTimeout(r, 30));
    socket.resetAndDestroy();
  }
  await new Promise((r) => setTimeout(r, 400));
  assert.equal((await fetch(`${running.url}/healthz`)).status, 200, 'still serving');
  assert.equal((await fetch(`${second.relay}/x`)).status, 200);
});

test('regression: HEAD is routed as GET, and a method override that would reach another route is refused with nothing sent', async (t) => {
  const app = await startUpstream(t);
  const note = 'a private note';
  const { relay } = await startRelay(t, app.url, `
    - { name: search, match: { method: GET, path: /search }, configuration: payments, query: { encrypt: [q] } }
    - { name: update, match: { method: PUT, path: /notes/* }, configuration: payments, request: { encrypt: [notes] } }
    - { name: any, match: { path: /any/* }, configuration: payments, request: { encrypt: [notes] } }`);
  // Routers answer HEAD with the GET handler: the GET route's query rule applies.
  const head = await fetch(`${relay}/search?q=${encodeURIComponent(note)}&page=2`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  const seenHead = app.seen.at(-1)!;
  assert.equal(seenHead.method, 'HEAD');
  const q = new URLSearchParams(seenHead.url.split('?')[1]).get('q')!;
  assert.match(q, TOKEN, seenHead.url);
  // POST read as PUT by method-override middleware would reach the PUT handler without the
  // PUT route's transform: refused, whichever way the override is spelt.
  const body = JSON.stringify({ notes: note });
  const json = { 'content-type': 'application/json' };
  const before = app.seen.length;
  for (const [target, headers] of [
    ['/notes/7', { ...json, 'x-http-method-override': 'PUT' }],
    ['/notes/7', { ...json, 'x-http-method': 'put' }],
    ['/notes/7', { ...json, 'x-method-override': 'GET, PUT' }],
    ['/notes/7?_method=PUT', json],
    ['/notes/7?a=1&_METHOD=%70ut', json],
    ['/notes/7?a=1;_method=put', json],
  ] as const) {
    const res = await fetch(`${relay}${target}`, { method: 'POST', headers, body });
    assert.equal(res.status, 400, `${target} ${JSON.stringify(headers)}`);
    assert.match(((await res.json()) as { message: string }).message, /overrides its method with (x-http-method-override|x-http-method|x-method-override|_method), and the two methods match different relay routes/);
  }
  assert.equal(app.seen.length, before, 'nothing reached the application');
  // PUT refused the other way round too: the override (POST) reaches no route.
  assert.equal((await fetch(`${relay}/notes/7`, { method: 'PUT', headers: { ...json, 'x-http-method-override': 'POST' }, body })).status, 400);
  // An override to the same route, or a value that names no method, changes nothing.
  const same = await fetch(`${relay}/any/7`, { method: 'POST', headers: { ...json, 'x-http-method-override': 'DELETE' }, body });
  assert.equal(same.status, 200);
  assert.match(JSON.parse(app.seen.at(-1)!.body.toString()).notes, TOKEN);
  const unknown = await fetch(`${relay}/notes/7?_method=xyz`, { method: 'PUT', headers: { ...json, 'x-http-method-override': 'PUT' }, body });
  assert.equal(unknown.status, 200);
  assert.match(JSON.parse(app.seen.at(-1)!.body.toString()).notes, TOKEN);
});

test('regression: a route reads a form declared with a content type lenient servers read as a form', async (t) => {
  const app = await startUpstream(t);
  const { relay } = await startRelay(t, app.url);
  const res = await fetch(`${relay}/patients/7`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded, text/plain' }, body: 'ssn=123-45-6789&name=Ada' });
  assert.equal(res.status, 200);
  const params = new URLSearchParams(app.seen.at(-1)!.body.toString());
  assert.match(params.get('ssn')!, TOKEN);
  assert.equal(params.get('name'), 'Ada');
});
