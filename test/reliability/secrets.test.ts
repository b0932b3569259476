/**
 * Issue 7, item 6 — secrets:
 *
 * 1. A broad workload (logins, API key creation, rotation and revocation, access tokens,
 *    encrypt/decrypt/proxy with forwarding, key rotation, errors of every kind) against
 *    the service in-process at `debug` and as a child process at `info`; then the process
 *    logs, the stored logs read through the API, every table of the store and the store's
 *    files on disk are searched for every secret that passed through: API keys, passwords,
 *    access tokens (and their signatures), the master key, the access-token signing secret,
 *    the data keys (and their wrapped form outside the keys table), credentials meant for
 *    destinations, and the plaintext of every encrypted field.
 * 2. Constant time: every comparison that decides on a secret goes through a constant-time
 *    primitive (node's `timingSafeEqual`, WebCrypto's HMAC verify), shown by spying on
 *    those primitives while the real service authenticates; and a source scan finds no
 *    `===`/`!==`/`.equals()`-style comparison on secret-bearing values in src/auth and
 *    src/crypto beyond the reviewed exceptions below.
 * 3. Master-key isolation: tokens (randomized and deterministic) and access tokens of one
 *    deployment are refused by another with the same seed and names.
 */
import assert from 'node:assert/strict';
import crypto, { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { stripTypeScriptTypes, syncBuiltinESMExports } from 'node:module';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ACCESS_TOKEN_SECRET_LABEL } from '../../src/auth/access-tokens.ts';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { unwrapDataKey } from '../../src/crypto/data-keys.ts';
import { MasterKey } from '../../src/crypto/master-key.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { KEYS, SEED, startApp } from '../support/app.ts';
import { startChild } from '../support/child.ts';
import { closedPort, startEcho, type Echo } from '../support/destinations.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

// ---------------------------------------------------------------------------------------
// Secrets and where to look for them

/**
 * Every secret the workload used, in each form it could be written in: as text, and for
 * key material hex, base64, base64url, a Buffer's JSON `data` array and util.inspect's
 * hex bytes. `logsOnly` forms (a data key's wrapped bytes) belong in the keys table and
 * nowhere else.
 */
class Secrets {
  readonly #forms = new Map<string, string>();
  readonly #logsOnly = new Map<string, string>();
  readonly #raw = new Map<string, Buffer>();

  text(label: string, value: string): void {
    assert.ok(value.length >= 8, `${label} is too short to search for without false alarms`);
    this.#forms.set(value, label);
  }

  bytes(label: string, value: Buffer, options: { logsOnly?: boolean } = {}): void {
    const forms = this.#bytesForms(value);
    for (const [form, how] of forms) (options.logsOnly === true ? this.#logsOnly : this.#forms).set(form, `${label} (${how})`);
    if (options.logsOnly !== true) this.#raw.set(label, value);
  }

  #bytesForms(value: Buffer): Array<[string, string]> {
    return [
      [value.toString('hex'), 'hex'],
      [value.toString('base64'), 'base64'],
      [value.toString('base64url'), 'base64url'],
      [`[${[...value].join(',')}]`, 'JSON data array'],
      [[...value.subarray(0, 16)].map((b) => b.toString(16).padStart(2, '0')).join(' '), 'inspect bytes'],
    ];
  }

  get count(): number {
    return this.#forms.size + this.#logsOnly.size;
  }

  /** Labels of the secrets found in `text`; `withLogsOnly` adds the forms that belong only in the keys table. */
  findIn(text: string, withLogsOnly = true): string[] {
    const found: string[] = [];
    for (const [form, label] of this.#forms) if (text.includes(form)) found.push(label);
    if (withLogsOnly) for (const [form, label] of this.#logsOnly) if (text.includes(form)) found.push(label);
    return found;
  }

  /** Raw key bytes (and every text form, as UTF-8) in a binary file. */
  findInBytes(data: Buffer): string[] {
    const found: string[] = [];
    for (const [label, raw] of this.#raw) if (data.includes(raw)) found.push(`${label} (raw bytes)`);
    for (const [form, label] of this.#forms) if (data.includes(Buffer.from(form))) found.push(label);
    return found;
  }
}

/** A distinctive plaintext: searching for it cannot match anything else by chance. */
const marker = (what: string) => `zqx-${what}-${randomBytes(6).toString('hex')}`;

/**
 * Every row of every table, as text: strings as they are, blobs as hex and base64. The
 * `data_keys` table holds the wrapped keys by design and is returned apart.
 */
function dumpTables(db: DatabaseSync): { logs: string; other: string; keys: string } {
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name);
  const parts = { logs: [] as string[], other: [] as string[], keys: [] as string[] };
  for (const table of tables) {
    const rows = db.prepare(`SELECT * FROM "${table}"`).all() as Array<Record<string, unknown>>;
    const text = rows
      .map((row) => Object.values(row).map((v) => (v instanceof Uint8Array ? `${Buffer.from(v).toString('hex')} ${Buffer.from(v).toString('base64')}` : String(v))).join('\t'))
      .join('\n');
    (table === 'data_keys' ? parts.keys : /log/.test(table) ? parts.logs : parts.other).push(`${table}:\n${text}`);
  }
  assert.ok(tables.includes('data_keys') && tables.some((t) => /api_log/.test(t)), `unexpected schema: ${tables.join(', ')}`);
  return { logs: parts.logs.join('\n'), other: parts.other.join('\n'), keys: parts.keys.join('\n') };
}

/** The data keys of every configuration, unwrapped with the deployment's master key. */
function addDataKeys(db: DatabaseSync, master: MasterKey, secrets: Secrets): number {
  const rows = db.prepare('SELECT configuration_id, version, wrapped FROM data_keys').all() as Array<{ configuration_id: string; version: number; wrapped: Uint8Array }>;
  for (const row of rows) {
    const wrapped = Buffer.from(row.wrapped);
    if (wrapped.length === 0) continue;
    secrets.bytes(`data key ${row.configuration_id} v${row.version}`, unwrapDataKey(master, row.configuration_id, row.version, wrapped));
    secrets.bytes(`wrapped data key ${row.configuration_id} v${row.version}`, wrapped, { logsOnly: true });
  }
  return rows.length;
}

// ---------------------------------------------------------------------------------------
// The workload

interface Answer {
  status: number;
  text: string;
  json: any;
}

interface Client {
  (path: string, options?: { method?: string; key?: string | null; bearer?: string; headers?: Record<string, string>; body?: string | Buffer; contentType?: string | null }): Promise<Answer>;
  /** Bodies of every answer that was not 2xx: error messages must not echo secrets either. */
  readonly errors: string[];
}

function client(base: string): Client {
  const errors: string[] = [];
  const send = (async (path, options = {}) => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.key !== null) headers['x-svc-authorization'] = options.key ?? KEYS.owner;
    if (options.bearer !== undefined) headers['authorization'] = `Bearer ${options.bearer}`;
    if (options.body !== undefined && options.contentType !== null) headers['content-type'] ??= options.contentType ?? 'application/json';
    const res = await fetch(base + path, { method: options.method ?? (options.body === undefined ? 'GET' : 'POST'), headers, body: options.body });
    const text = await res.text();
    if (res.status >= 300) errors.push(`${res.status} ${path}: ${text}`);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, text, json };
  }) as Client;
  return Object.assign(send, { errors });
}

/** Config of both deployments: a low login limit, and payments may forward to the echo server and to a closed port. */
function yamlFor(echo: Echo, closed: number): string {
  return 'auth: { login_max_attempts: 3 }\n' + SEED.replace(
    '{ name: payments, proxy_slug: payments, fields: [card.number] }',
    `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/", "http://127.0.0.1:${closed}/"] }`,
  );
}

const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';
const AUTH_FAILED = 'The token failed authentication: it was altered or belongs to another configuration.';

/**
 * Everything a deployment sees in a busy day, each step checked so the workload does what
 * it says. Adds each secret it uses or receives to `secrets`; returns the request id of a
 * probe request, which the stored logs must contain (proof the logs searched are the
 * workload's).
 */
async function workload(call: Client, echo: Echo, closed: number, secrets: Secrets, bodyLimit: number): Promise<string> {
  for (const [name, key] of Object.entries(KEYS)) {
    secrets.text(`seeded API key ${name}`, key);
    secrets.text(`seeded API key ${name} after its prefix`, key.slice(12));
  }
  secrets.text('seed password of ada', 'correct horse');

  // Logins: right, wrong, unknown, disabled-by-throttle, and a user created with a password.
  const login = (email: string, password: string, key?: string) => call('/api/v2/auth/login', { key, body: JSON.stringify({ email, password }) });
  const ada = await login('ada@example.com', 'correct horse');
  assert.equal(ada.status, 200, ada.text);
  const adaToken: string = ada.json.access_token;
  secrets.text('access token of ada', adaToken);
  secrets.text('access token signature of ada', adaToken.split('.')[2]!);
  assert.equal((await call('/api/v2/auth/userdetails', { bearer: adaToken })).status, 200);
  for (const wrong of ['correct horse battery staple', 'Correct Horse']) {
    secrets.text('a wrong password', wrong);
    assert.equal((await login('ada@example.com', wrong)).status, 401);
  }
  const nobody = `pw-for-nobody-${randomBytes(4).toString('hex')}`;
  secrets.text('password tried for an unknown email', nobody);
  assert.equal((await login('nobody@example.com', nobody)).status, 401);
  // auth.login_max_attempts is 3 in both deployments: the fourth guess is refused.
  const guesses = Array.from({ length: 4 }, (_, i) => `guess-${i}-${randomBytes(4).toString('hex')}`);
  const throttled: number[] = [];
  for (const guess of guesses) {
    secrets.text('a guessed password', guess);
    throttled.push((await login('viewer@example.com', guess)).status);
  }
  assert.deepEqual(throttled, [401, 401, 401, 429]);

  const carolPassword = `carol-pass-${randomBytes(6).toString('hex')}`;
  secrets.text('password of a created user', carolPassword);
  const carol = await call('/api/v3/users', { body: JSON.stringify({ name: 'Carol', email: 'carol@example.com', password: carolPassword, roles: ['developer'] }) });
  assert.equal(carol.status, 201, carol.text);
  const shortPassword = `sh-${randomBytes(3).toString('hex')}`;
  secrets.text('a password too short to accept', shortPassword);
  assert.equal((await call('/api/v3/users', { body: JSON.stringify({ name: 'Dan', email: 'dan@example.com', password: shortPassword }) })).status, 422);
  const carolLogin = await login('carol@example.com', carolPassword);
  assert.equal(carolLogin.status, 200, carolLogin.text);
  const carolToken: string = carolLogin.json.access_token;
  secrets.text('access token of carol', carolToken);
  secrets.text('access token signature of carol', carolToken.split('.')[2]!);
  assert.equal((await call('/api/v2/auth/logout', { method: 'POST', bearer: carolToken })).status, 204);
  assert.equal((await call('/api/v2/auth/userdetails', { bearer: carolToken })).status, 401, 'a logged-out token');

  // API keys: created (secret shown once), used, rotated, scoped, revoked.
  const created = await call('/api/v3/api-keys', { body: JSON.stringify({ name: 'secrets-a' }) });
  assert.equal(created.status, 201, created.text);
  const firstSecret: string = created.json.key;
  secrets.text('created API key', firstSecret);
  secrets.text('created API key after its prefix', firstSecret.slice(12));
  assert.equal((await call('/api/v3/classifications', { key: firstSecret })).status, 200);
  const rotated = await call(`/api/v3/api-keys/${created.json.id}/rotate`, { method: 'POST' });
  assert.equal(rotated.status, 200, rotated.text);
  const secondSecret: string = rotated.json.key;
  secrets.text('rotated API key', secondSecret);
  secrets.text('rotated API key after its prefix', secondSecret.slice(12));
  assert.equal((await call('/api/v3/classifications', { key: firstSecret })).status, 401, 'the replaced secret');
  assert.equal((await call('/api/v3/classifications', { key: secondSecret })).status, 200);
  const scoped = await call('/api/v3/api-keys', { body: JSON.stringify({ name: 'secrets-encrypt-only', permissions: ['data.encrypt'] }) });
  assert.equal(scoped.status, 201, scoped.text);
  secrets.text('scoped API key', scoped.json.key);
  assert.equal((await login('ada@example.com', 'correct horse', scoped.json.key)).status, 403, 'a data-plane key may not log in');
  assert.equal((await call('/api/v3/classifications', { key: scoped.json.key })).status, 403);
  assert.equal((await call(`/api/v3/api-keys/${created.json.id}/revoke`, { method: 'POST' })).status, 204);
  assert.equal((await call('/api/v3/classifications', { key: secondSecret })).status, 401, 'a revoked key');

  // Bad keys and bad tokens.
  const unknownKey = `svc_${randomBytes(30).toString('base64').replace(/[^A-Za-z0-9]/g, '').padEnd(40, 'Q').slice(0, 40)}`;
  secrets.text('an unknown API key', unknownKey);
  const malformedKey = `svc_malformed_${randomBytes(6).toString('hex')}`;
  secrets.text('a malformed API key', malformedKey);
  assert.equal((await call('/api/v3/classifications', { key: null })).status, 401);
  assert.equal((await call('/api/v3/classifications', { key: unknownKey })).status, 401);
  assert.equal((await call('/api/v3/classifications', { key: malformedKey })).status, 401);
  const [h, p, s] = adaToken.split('.') as [string, string, string];
  const forged = `${h}.${p}.${s.slice(0, -2)}${s.endsWith('AA') ? 'BB' : 'AA'}`;
  secrets.text('a forged access token', forged);
  const garbage = `not.a-${randomBytes(8).toString('hex')}.jwt`;
  secrets.text('a garbage bearer token', garbage);
  assert.equal((await call('/api/v2/auth/userdetails', { bearer: forged })).status, 401);
  assert.equal((await call('/api/v2/auth/userdetails', { bearer: garbage })).status, 401);

  // The data plane, with a distinctive plaintext in every encrypted value.
  const m = { ssn: marker('ssn'), card: marker('card'), note: marker('note'), phi: marker('phi'), lookup: marker('lookup'), fwd: marker('fwd'), nd1: marker('nd1'), nd2: marker('nd2') };
  for (const [name, value] of Object.entries(m)) secrets.text(`plaintext ${name}`, value);
  const amount = `31415926535${randomBytes(3).readUIntBE(0, 3)}`;
  secrets.text('plaintext number', amount);
  const doc = `{"ssn":"${m.ssn}","card":{"number":"${m.card}","exp":"12/28"},"notes":{"text":"${m.note}"},"amount":${amount},"id":7}`;
  const enc = await call(ENC, { body: doc, headers: { 'x-svc-fields': 'ssn,card.number,notes,amount' } });
  assert.equal(enc.status, 200, enc.text);
  assert.equal(enc.text.match(/"svc:1:/g)?.length, 4);
  assert.equal((await call(DEC, { body: enc.text })).text, doc);
  assert.equal((await call(DEC, { body: enc.text, bearer: adaToken })).text, doc, 'decrypt as the acting user of a token');
  assert.equal((await call(DEC, { body: enc.text, key: KEYS.viewer })).status, 403);

  const phi = await call(ENC, { body: JSON.stringify({ dx: m.phi }), headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'phi' } });
  assert.equal(phi.status, 200);
  assert.equal((await call(DEC, { body: phi.text, key: KEYS.dev })).status, 403, 'classification access denied');
  assert.equal((await call(DEC, { body: phi.text })).status, 200);
  const lookup = await call('/api/v3/encryption/lookup/encrypt', { body: JSON.stringify({ email: m.lookup }), headers: { 'x-svc-fields': 'email' } });
  assert.equal(lookup.status, 200);
  const nd = await call(ENC, { body: `{"a":"${m.nd1}"}\n{"a":"${m.nd2}"}\n`, contentType: 'application/x-ndjson', headers: { 'x-svc-fields': 'a' } });
  assert.equal(nd.status, 200, nd.text);

  // Forwarding, with credentials meant for the destination in headers and in the URL.
  const vendorKey = `vk_live_${randomBytes(12).toString('hex')}`;
  const vendorBasic = `Basic ${Buffer.from(`vendor:${randomBytes(9).toString('hex')}`).toString('base64')}`;
  const urlPassword = `urlpw${randomBytes(8).toString('hex')}`;
  secrets.text('vendor API key header', vendorKey);
  secrets.text('vendor basic credentials', vendorBasic.slice(6));
  secrets.text('password in the destination URL', urlPassword);
  secrets.text('basic auth made from the destination URL', Buffer.from(`vendoruser:${urlPassword}`).toString('base64'));
  const before = echo.received.length;
  const fwd = await call('/proxy/payments', {
    body: JSON.stringify({ card: { number: m.fwd } }),
    headers: { 'x-svc-destination': `${echo.url}/v1/charges`, 'x-vendor-key': vendorKey, authorization: vendorBasic },
  });
  assert.equal(fwd.status, 201, fwd.text);
  const back = await call('/proxy/payments', { method: 'PUT', body: fwd.text, headers: { 'x-svc-mode': 'decrypt', 'x-svc-destination': `http://vendoruser:${urlPassword}@${new URL(echo.url).host}/v1/vendor` } });
  assert.equal(back.status, 201, back.text);
  assert.equal(echo.received.length, before + 2);
  assert.equal(echo.received.at(-2)!.headers['x-vendor-key'], vendorKey, 'the vendor credentials did reach the destination');
  assert.equal(echo.received.at(-1)!.headers['authorization'], `Basic ${Buffer.from(`vendoruser:${urlPassword}`).toString('base64')}`);
  assert.equal(JSON.parse(echo.received.at(-1)!.body.toString()).card.number, m.fwd);
  const refused = await call('/proxy/payments', { body: JSON.stringify({ card: { number: m.fwd } }), headers: { 'x-svc-destination': 'https://evil.example/collect', 'x-vendor-key': vendorKey } });
  assert.equal(refused.status, 403);
  const unreachable = await call('/proxy/payments', { body: JSON.stringify({ card: { number: m.fwd } }), headers: { 'x-svc-destination': `http://127.0.0.1:${closed}/`, 'x-vendor-key': vendorKey } });
  assert.equal(unreachable.status, 502, unreachable.text);

  // Errors of every kind, each carrying a plaintext.
  const e = { json: marker('badjson'), type: marker('badtype'), deep: marker('deep'), big: marker('big'), tamper: marker('tamper') };
  for (const [name, value] of Object.entries(e)) secrets.text(`plaintext in a refused request (${name})`, value);
  assert.equal((await call(ENC, { body: `{"ssn":"${e.json}"`, headers: { 'x-svc-fields': 'ssn' } })).status, 400);
  assert.equal((await call(ENC, { body: `ssn=${e.type}`, contentType: 'text/plain', headers: { 'x-svc-fields': 'ssn' } })).status, 415);
  assert.equal((await call(ENC, { body: `${'['.repeat(40)}"${e.deep}"${']'.repeat(40)}`, headers: { 'x-svc-fields': 'x' } })).status, 400);
  const big = `{"ssn":"${e.big}","pad":"${'x'.repeat(bodyLimit)}"}`;
  assert.equal((await call(ENC, { body: big, headers: { 'x-svc-fields': 'ssn' } })).status, 413);
  const tamperEnc = await call(ENC, { body: JSON.stringify({ s: e.tamper }), headers: { 'x-svc-fields': 's' } });
  const tamperToken: string = tamperEnc.json.s;
  const tampered = tamperToken.replace(/:([A-Za-z0-9_-])([A-Za-z0-9_-]*):\$$/, (_all, c: string, rest: string) => `:${c === 'A' ? 'B' : 'A'}${rest}:$`);
  assert.equal((await call(DEC, { body: JSON.stringify({ s: tampered }) })).status, 422);
  assert.equal((await call('/api/v3/encryption/other-config/decrypt', { body: tamperEnc.text })).status, 422, 'a token of another configuration');
  assert.equal((await call('/proxy/payments', { body: doc, headers: { 'x-svc-mode': 'shred' } })).status, 400);
  assert.equal((await call(ENC, { body: doc, headers: { 'x-svc-fields': 'ssn', 'x-svc-classification': 'no-such-class' } })).status, 422);
  assert.equal((await call('/api/v3/encryption/nope/encrypt', { body: doc })).status, 404);
  assert.equal((await call('/api/v3/encryption/other-config/encrypt', { body: doc })).status, 400, 'no fields to encrypt');
  assert.equal((await call(ENC, { body: doc, key: KEYS.viewer })).status, 403);

  // Key rotation: new tokens under v2, old ones still open and can be rewrapped.
  const configurations = await call('/api/v3/configurations?per_page=100');
  const payments = (configurations.json.data as Array<{ id: string; name: string }>).find((c) => c.name === 'payments')!;
  assert.equal((await call(`/api/v3/configurations/${payments.id}/rotate`, { method: 'POST' })).status, 200);
  const v2 = await call(ENC, { body: doc, headers: { 'x-svc-fields': 'ssn' } });
  assert.match(v2.json.ssn, /^svc:2:/);
  assert.equal((await call(DEC, { body: enc.text })).text, doc, 'v1 tokens open after rotation');
  const rewrapped = await call('/api/v3/encryption/payments/rewrap', { body: enc.text });
  assert.equal(rewrapped.status, 200, rewrapped.text);
  assert.equal(rewrapped.text.match(/"svc:2:/g)?.length, 4);

  // A request whose id the stored logs must show.
  const probe = `secrets-probe-${randomBytes(4).toString('hex')}`;
  assert.equal((await call('/api/v3/classifications', { headers: { 'x-svc-request-id': probe } })).status, 200);
  return probe;
}

/** Every page of every stored log, as the API returns them. */
async function readStoredLogs(call: Client, probe: string): Promise<string> {
  const texts: string[] = [];
  for (const kind of ['unified', 'activity', 'api', 'usage']) {
    for (let page = 1; ; page++) {
      const res = await call(`/api/v3/logs/${kind}?per_page=100&page=${page}`);
      assert.equal(res.status, 200, res.text);
      texts.push(res.text);
      if (page >= res.json.last_page) break;
    }
  }
  const all = texts.join('\n');
  assert.ok(all.includes(probe), 'the stored logs hold the workload');
  assert.ok(all.includes('auth.login_failed') && all.includes('"mode":"decrypt"'), 'activity and usage logs were read');
  return all;
}

function assertClean(secrets: Secrets, where: string, text: string, withLogsOnly = true): void {
  const found = secrets.findIn(text, withLogsOnly);
  assert.deepEqual(found, [], `${where} contains: ${found.join(', ')}`);
}

test('after a broad workload, no secret or plaintext is in the logs, the stored logs or the store (in-process, debug)', async (t) => {
  const echo = await startEcho(t);
  const closed = await closedPort();
  const masterKey = randomBytes(32);
  const master = new MasterKey(masterKey);
  const config = loadConfig({
    text: `server: { listen: 127.0.0.1:0, admin_listen: "off", body_limit: 256kb }
store: { path: ":memory:" }
keys: { master_key_file: /nonexistent/never-used.key }
logging: { level: debug }
${yamlFor(echo, closed)}`,
    env: {},
  });
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const app = await createApp(config, { logger: createLogger('debug', sink), env: { SVC_MASTER_KEY: masterKey.toString('base64') } });
  const { main } = await app.listen();
  t.after(() => app.close());
  const call = client(`http://127.0.0.1:${main.port}`);

  const secrets = new Secrets();
  secrets.bytes('master key', masterKey);
  secrets.bytes('access token signing secret', master.deriveSecret(ACCESS_TOKEN_SECRET_LABEL));
  const probe = await workload(call, echo, closed, secrets, 256 * 1024);
  app.services.logs.flush();
  const db = sqliteConnection(app.services.store);
  assert.ok(addDataKeys(db, master, secrets) >= 4, 'every configuration\'s data keys are searched for');

  const logs = chunks.join('');
  assert.ok(logs.includes('"msg":"request refused"') && logs.includes('"level":20'), 'debug logging was on and the refusals were logged');
  assertClean(secrets, 'the process log (debug)', logs);
  assertClean(secrets, 'the stored logs (API)', await readStoredLogs(call, probe));
  const tables = dumpTables(db);
  assertClean(secrets, 'the log tables', tables.logs);
  assertClean(secrets, 'the other tables', tables.other);
  assertClean(secrets, 'the keys table', tables.keys, false);
  assertClean(secrets, 'the error responses', call.errors.join('\n'));
  // The search itself can fail: a secret written into the text is found.
  assert.ok(secrets.findIn(`${logs}${KEYS.owner}`).length > 0 && secrets.findIn(masterKey.toString('hex')).length > 0);
  assert.ok(secrets.count > 60, `only ${secrets.count} secret forms were searched for`);
});

test('after the same workload, no secret is in the output, stored logs, tables or files of a child process (info)', async (t) => {
  const echo = await startEcho(t);
  const closed = await closedPort();
  const masterKey = randomBytes(32);
  const master = new MasterKey(masterKey);
  const child = await startChild(t, yamlFor(echo, closed), { SVC_MASTER_KEY: masterKey.toString('base64') });
  const call = client(child.url);
  const secrets = new Secrets();
  secrets.bytes('master key', masterKey);
  secrets.bytes('access token signing secret', master.deriveSecret(ACCESS_TOKEN_SECRET_LABEL));
  // The default body limit (10 MiB) applies to the child.
  const probe = await workload(call, echo, closed, secrets, 10 * 1024 * 1024);
  // Stored logs are written in batches every second; wait for the probe's to land.
  const deadline = Date.now() + 10_000;
  while ((await call(`/api/v3/logs/api?request_id=${probe}`)).json.total === 0 && Date.now() < deadline) await sleep(100);
  const stored = await readStoredLogs(call, probe);

  const exited = once(child.process, 'exit');
  child.process.kill('SIGTERM');
  assert.equal((await exited)[0], 0, child.output());
  const dbPath = join(child.dir, 'svc.db');
  const db = new DatabaseSync(dbPath, { readOnly: true });
  try {
    assert.ok(addDataKeys(db, master, secrets) >= 4);
    const tables = dumpTables(db);
    assertClean(secrets, 'the log tables', tables.logs);
    assertClean(secrets, 'the other tables', tables.other);
    assertClean(secrets, 'the keys table', tables.keys, false);
  } finally {
    db.close();
  }
  const output = child.output();
  assert.match(output, /"msg":"master key loaded"/);
  assertClean(secrets, 'the process output (info)', output);
  assertClean(secrets, 'the stored logs (API)', stored);
  assertClean(secrets, 'the error responses', call.errors.join('\n'));
  // The store's files as bytes: the database, and the WAL and its index if still there.
  // This also catches values in pages SQLite has freed but not overwritten.
  const files = readdirSync(child.dir).filter((f) => f.startsWith('svc.db'));
  assert.ok(files.includes('svc.db'));
  for (const file of files) {
    const found = secrets.findInBytes(readFileSync(join(child.dir, file)));
    assert.deepEqual(found, [], `${file} contains: ${found.join(', ')}`);
  }
  assert.ok(secrets.findInBytes(Buffer.concat([readFileSync(dbPath), masterKey])).length > 0, 'the byte search can fail');
});

// ---------------------------------------------------------------------------------------
// Constant-time comparisons: behaviour

test('every secret check of the running service goes through a constant-time primitive', async (t) => {
  const running = await startApp(t);
  const sha = (s: string) => createHash('sha256').update(s).digest();

  // node's timingSafeEqual, spied on (the real one still runs). The service imports it by
  // name, so the module's named export is re-synced to the spy and back.
  const spy = t.mock.method(crypto, 'timingSafeEqual');
  syncBuiltinESMExports();
  t.after(() => {
    spy.mock.restore();
    syncBuiltinESMExports();
  });
  const calls = () => spy.mock.calls.map((c) => ({ a: Buffer.from(c.arguments[0] as Uint8Array), b: Buffer.from(c.arguments[1] as Uint8Array), result: c.result }));
  const during = async (action: () => Promise<number>, expectedStatus: number) => {
    const from = spy.mock.callCount();
    assert.equal(await action(), expectedStatus);
    return calls().slice(from);
  };
  const get = (key: string) => fetch(`${running.url}/api/v3/roles`, { headers: { 'x-svc-authorization': key } }).then(async (r) => (await r.arrayBuffer(), r.status));
  const login = (email: string, password: string) =>
    fetch(`${running.url}/api/v2/auth/login`, { method: 'POST', headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) }).then(async (r) => (await r.arrayBuffer(), r.status));

  // An API key: its SHA-256 finds the row, and the stored hash is compared in constant time.
  const keyCheck = await during(() => get(KEYS.viewer), 200);
  assert.equal(keyCheck.length, 1, 'one constant-time comparison per API key lookup');
  assert.deepEqual(keyCheck[0]!.a, sha(KEYS.viewer));
  assert.deepEqual(keyCheck[0]!.b, sha(KEYS.viewer));
  assert.equal(keyCheck[0]!.result, true);
  // An unknown key finds no row: nothing to compare, the index lookup on the SHA-256
  // decided (an attacker steering that lookup would need SHA-256 preimages).
  assert.deepEqual(await during(() => get(`svc_${'Unknown'.padEnd(40, '1')}`), 401), []);

  // Passwords: a right one, a wrong one and an unknown email each cost one scrypt and
  // one 32-byte constant-time comparison, so neither the outcome nor whether the email
  // exists shows in the comparison's timing.
  for (const [email, password, status, result] of [
    ['ada@example.com', 'correct horse', 200, true],
    ['ada@example.com', 'correct horsf', 401, false],
    ['nobody@example.com', 'correct horse', 401, false],
    ['dev@example.com', 'correct horse', 401, false],
  ] as const) {
    // The request's own API key may be compared too (when its cached caller was dropped).
    const ownerHash = sha(KEYS.owner);
    const compared = (await during(() => login(email, password), status)).filter((c) => !c.a.equals(ownerHash));
    assert.ok(compared.every((c) => c.a.length === 32 && c.b.length === 32), 'scrypt outputs, 32 bytes each');
    assert.equal(compared.length, 1, `${email}: ${compared.length} comparisons`);
    assert.equal(compared[0]!.result, result, email);
  }

  // Access tokens: the HS256 signature is checked by WebCrypto's verify (a constant-time
  // HMAC comparison inside node), not by comparing signature strings.
  const verify = t.mock.method(globalThis.crypto.subtle, 'verify');
  const token = ((await (await fetch(`${running.url}/api/v2/auth/login`, { method: 'POST', headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json' }, body: '{"email":"ada@example.com","password":"correct horse"}' })).json()) as { access_token: string }).access_token;
  const withBearer = (bearer: string) => fetch(`${running.url}/api/v2/auth/userdetails`, { headers: { 'x-svc-authorization': KEYS.owner, authorization: `Bearer ${bearer}` } }).then(async (r) => (await r.arrayBuffer(), r.status));
  assert.equal(await withBearer(token), 200);
  const [h, p, s] = token.split('.') as [string, string, string];
  assert.equal(await withBearer(`${h}.${p}.${s.startsWith('A') ? 'B' : 'A'}${s.slice(1)}`), 401);
  const verdicts = await Promise.all(verify.mock.calls.map((c) => c.result));
  assert.equal(verify.mock.callCount(), 2);
  assert.deepEqual(verdicts, [true, false]);
  for (const c of verify.mock.calls) {
    const algorithm = c.arguments[0] as string | { name: string };
    assert.equal(typeof algorithm === 'string' ? algorithm : algorithm.name, 'HMAC');
  }
});

// ---------------------------------------------------------------------------------------
// Constant-time comparisons: source scan

/**
 * A source scan, precise where it can be: the TypeScript is stripped to JavaScript with
 * node's own type stripper (positions kept), tokenized (comments, strings, template
 * literals, regular expressions), and for each `===`, `!==`, `==`, `!=` its two operands
 * are delimited by operator precedence (stopping at `&&`, `||`, `??`, `?`, `:`, `,`, `;`,
 * assignments, bitwise operators and unbalanced brackets). A comparison is reported when
 * one operand mentions a secret-bearing name and neither is public: a literal, `typeof x`,
 * a `.length`/`.size`/`.byteLength`, or a constant declared in the file as a literal.
 * `.equals()`, `.compare()`, `.startsWith()`, `.endsWith()`, `.includes()` and
 * `.indexOf()` calls are reported the same way when the receiver or an argument mentions a
 * secret and the arguments are not all literals.
 *
 * Limits: names decide what is secret, so a secret in a variable called `x` goes unseen,
 * and a public value called `key` is reported (then reviewed into the exceptions below);
 * it does not follow values across functions or files, and it does not see `switch`
 * cases, Map/Set lookups keyed by a secret, or comparisons done inside dependencies.
 */
const SECRET_WORDS = new Set([
  'key', 'keys', 'secret', 'secrets', 'password', 'passwd', 'hash', 'hashes', 'token', 'tokens', 'tag', 'mac', 'hmac', 'digest',
  'signature', 'sig', 'plaintext', 'presented', 'expected', 'actual', 'credential', 'credentials', 'authorization', 'bearer',
  'subkey', 'material', 'master',
]);

/** Reviewed comparisons on secret-named values, by file and the exact source line. */
const REVIEWED: ReadonlyArray<{ file: string; line: string; why: string }> = [
  {
    file: 'src/crypto/certificates.ts',
    line: "if (!fromKey.equals(fromCert)) throw new Error('the key does not belong to the certificate');",
    why: 'compares two public keys (SPKI DER: the one derived from the egress proxy CA key file, and the one in its certificate) when the files are read at start-up; no request reaches it',
  },
  {
    file: 'src/crypto/master-key.ts',
    line: "if (key.length !== MASTER_KEY_SIZE || key.toString('base64').slice(0, 43) !== standard.slice(0, 43)) {",
    why: 'canonical-encoding check of the operator\'s own master key at start-up: no request reaches it, so its timing is no oracle',
  },
  {
    file: 'src/crypto/keyring.ts',
    line: 'if (v.material.version !== v.version) throw new RangeError(`key material of version ${v.material.version} given for version ${v.version}`);',
    why: 'compares two key version numbers, which are public (every token carries its version), not key material',
  },
  {
    file: 'src/auth/access-tokens.ts',
    line: "const second = token.indexOf('.', first + 1);",
    why: 'the positions of the `.` separators of a presented JWT: its shape, public on the wire; the signature is checked by jose (HMAC verify)',
  },
  {
    file: 'src/auth/access-tokens.ts',
    line: "if (first <= 0 || second <= first + 1 || second === token.length - 1 || token.indexOf('.', second + 1) !== -1) return false;",
    why: 'the positions of the `.` separators of a presented JWT: its shape, public on the wire; the signature is checked by jose (HMAC verify)',
  },
  {
    file: 'src/crypto/token.ts',
    line: "const metaEnd = token.indexOf(':', kvEnd + 1);",
    why: "the positions of a token's separators and the sizes its parts decode to: its shape and length, which are public on the wire; its bytes are judged only by the AEAD tag check",
  },
  {
    file: 'src/crypto/token.ts',
    line: "if (metaEnd === -1 || metaEnd >= ctEnd || token.indexOf(':', metaEnd + 1) !== ctEnd) return null;",
    why: "the positions of a token's separators and the sizes its parts decode to: its shape and length, which are public on the wire; its bytes are judged only by the AEAD tag check",
  },
  {
    file: 'src/crypto/token.ts',
    line: "if (decodeBase64urlInto(token, kvEnd + 1, metaEnd, aad, metaOffset) !== metaLength) throw new TokenError('malformed');",
    why: "the positions of a token's separators and the sizes its parts decode to: its shape and length, which are public on the wire; its bytes are judged only by the AEAD tag check",
  },
  {
    file: 'src/crypto/token.ts',
    line: "if (decodeBase64urlInto(token, metaEnd + 1, token.length - 2, sealed, 0) !== parts.ctLength) throw new TokenError('malformed');",
    why: "the positions of a token's separators and the sizes its parts decode to: its shape and length, which are public on the wire; its bytes are judged only by the AEAD tag check",
  },
  {
    file: 'src/crypto/token.ts',
    line: 'if (decodeBase64urlInto(token, parts.kvEnd + 1, parts.metaEnd, meta, 0) !== parts.metaLength) return null;',
    why: "the positions of a token's separators and the sizes its parts decode to: its shape and length, which are public on the wire; its bytes are judged only by the AEAD tag check",
  },
  {
    file: 'src/auth/caller.ts',
    line: 'if (user === undefined || user.disabled || user.updatedAt !== claims.credentialsStamp) throw new UnauthorizedError();',
    why: "compares the user's updated_at with the one a verified (signed) access token carries: a timestamp the token's holder can read, not a secret",
  },
];

interface Token {
  kind: 'id' | 'num' | 'str' | 'regex' | 'punct';
  value: string;
  line: number;
}

const PUNCTUATORS = [
  '>>>=', '...', '===', '!==', '**=', '<<=', '>>=', '>>>', '&&=', '||=', '??=',
  '=>', '==', '!=', '<=', '>=', '&&', '||', '??', '?.', '++', '--', '+=', '-=', '*=', '/=', '%=', '&=', '|=', '^=', '**', '<<', '>>',
  '{', '}', '(', ')', '[', ']', ';', ',', '<', '>', '+', '-', '*', '/', '%', '&', '|', '^', '!', '~', '?', ':', '=', '.', '@',
];
const REGEX_AFTER = new Set(['(', ',', '=', ':', '[', '!', '&', '|', '?', '{', '}', ';', '&&', '||', '??', '=>', '==', '===', '!=', '!==', '+', '-', '*', '%', '<', '>', '~', '^', 'return', 'typeof', 'case', 'throw', 'in', 'of', 'void', 'delete', 'new']);

function tokenize(js: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let line = 1;
  // Template literal nesting: for each open `${`, the brace depth inside it.
  const templates: number[] = [];
  const push = (kind: Token['kind'], value: string) => tokens.push({ kind, value, line });
  const scanTemplate = () => {
    // From just after a backtick or a `}` closing `${`: text until the next `${` or backtick.
    let text = '';
    while (i < js.length) {
      const c = js[i]!;
      if (c === '\\') {
        text += js.slice(i, i + 2);
        i += 2;
        continue;
      }
      if (c === '\n') line++;
      if (c === '`') {
        i++;
        push('str', text);
        push('punct', ')');
        return;
      }
      if (c === '$' && js[i + 1] === '{') {
        i += 2;
        push('str', text);
        push('punct', '+');
        push('punct', '(');
        templates.push(0);
        return;
      }
      text += c;
      i++;
    }
  };
  while (i < js.length) {
    const c = js[i]!;
    if (c === '\n') {
      line++;
      i++;
      continue;
    }
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (js.startsWith('//', i)) {
      while (i < js.length && js[i] !== '\n') i++;
      continue;
    }
    if (js.startsWith('/*', i)) {
      const end = js.indexOf('*/', i + 2);
      line += (js.slice(i, end).match(/\n/g) ?? []).length;
      i = end + 2;
      continue;
    }
    if (c === '"' || c === "'") {
      let j = i + 1;
      while (js[j] !== c) j += js[j] === '\\' ? 2 : 1;
      push('str', js.slice(i + 1, j));
      i = j + 1;
      continue;
    }
    if (c === '`') {
      // A template reads as `( "text" + ( expr ) + "text" )`: its expressions stay code.
      i++;
      push('punct', '(');
      scanTemplate();
      continue;
    }
    if (templates.length > 0 && (c === '{' || c === '}')) {
      if (c === '{') templates[templates.length - 1]!++;
      else if (templates[templates.length - 1] === 0) {
        templates.pop();
        i++;
        push('punct', ')');
        push('punct', '+');
        scanTemplate();
        continue;
      } else templates[templates.length - 1]!--;
    }
    const prev = tokens.at(-1);
    if (c === '/' && (prev === undefined || REGEX_AFTER.has(prev.value) && (prev.kind === 'punct' || prev.kind === 'id'))) {
      let j = i + 1;
      let inClass = false;
      while (j < js.length && (inClass || js[j] !== '/')) {
        if (js[j] === '\\') j++;
        else if (js[j] === '[') inClass = true;
        else if (js[j] === ']') inClass = false;
        j++;
      }
      j++;
      while (/[a-z]/.test(js[j] ?? '')) j++;
      push('regex', js.slice(i, j));
      i = j;
      continue;
    }
    const word = /^[A-Za-z_$#][\w$]*/.exec(js.slice(i, i + 200));
    if (word !== null) {
      push('id', word[0]);
      i += word[0].length;
      continue;
    }
    const num = /^(?:0[xXbBoO][\da-fA-F_]+|\d[\d_]*(?:\.[\d_]*)?(?:[eE][+-]?\d+)?|\.\d[\d_]*)n?/.exec(js.slice(i, i + 100));
    if (num !== null) {
      push('num', num[0]);
      i += num[0].length;
      continue;
    }
    const punct = PUNCTUATORS.find((p) => js.startsWith(p, i));
    assert.ok(punct !== undefined, `cannot tokenize ${JSON.stringify(js.slice(i, i + 20))} at line ${line}`);
    push('punct', punct);
    i += punct.length;
  }
  return tokens;
}

const COMPARISONS = new Set(['===', '!==', '==', '!=']);
const BOUNDARIES = new Set([
  '&&', '||', '??', '?', ':', ',', ';', '=', '+=', '-=', '*=', '/=', '%=', '&=', '|=', '^=', '**=', '<<=', '>>=', '>>>=', '&&=', '||=', '??=',
  '=>', '&', '|', '^', '...', ...COMPARISONS,
]);
const STATEMENT_WORDS = new Set(['return', 'throw', 'case', 'if', 'while', 'else', 'do', 'const', 'let', 'var', 'yield']);
const OPEN: Record<string, string> = { ')': '(', ']': '[', '}': '{' };
const CLOSE: Record<string, string> = { '(': ')', '[': ']', '{': '}' };

const isBoundary = (t: Token) => (t.kind === 'punct' && BOUNDARIES.has(t.value)) || (t.kind === 'id' && STATEMENT_WORDS.has(t.value));

function operandLeft(tokens: Token[], from: number): Token[] {
  let j = from;
  while (j >= 0) {
    const t = tokens[j]!;
    if (t.kind === 'punct' && t.value in OPEN) {
      let depth = 0;
      for (; j >= 0; j--) {
        const u = tokens[j]!;
        if (u.kind === 'punct' && u.value in OPEN) depth++;
        else if (u.kind === 'punct' && u.value in CLOSE && --depth === 0) break;
      }
      j--;
      continue;
    }
    if ((t.kind === 'punct' && t.value in CLOSE) || isBoundary(t)) break;
    j--;
  }
  return tokens.slice(j + 1, from + 1);
}

function operandRight(tokens: Token[], from: number): Token[] {
  let j = from;
  while (j < tokens.length) {
    const t = tokens[j]!;
    if (t.kind === 'punct' && t.value in CLOSE) {
      let depth = 0;
      for (; j < tokens.length; j++) {
        const u = tokens[j]!;
        if (u.kind === 'punct' && u.value in CLOSE) depth++;
        else if (u.kind === 'punct' && u.value in OPEN && --depth === 0) break;
      }
      j++;
      continue;
    }
    if ((t.kind === 'punct' && t.value in OPEN) || isBoundary(t)) break;
    j++;
  }
  return tokens.slice(from, j);
}

function words(identifier: string): string[] {
  return identifier
    .replace(/^#/, '')
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[\s_$]+/)
    .filter((w) => w !== '')
    .map((w) => w.toLowerCase());
}

const mentionsSecret = (operand: Token[]) => operand.some((t) => t.kind === 'id' && words(t.value).some((w) => SECRET_WORDS.has(w)));

function isPublic(operand: Token[], constants: ReadonlySet<string>): boolean {
  const meaningful = operand.filter((t) => !(t.kind === 'punct' && ['(', ')', '!', '-', '+'].includes(t.value)));
  if (meaningful.length === 0) return true;
  if (meaningful[0]!.kind === 'id' && meaningful[0]!.value === 'typeof') return true;
  const last = operand.at(-1)!;
  const beforeLast = operand.at(-2);
  if (last.kind === 'id' && ['length', 'size', 'byteLength'].includes(last.value) && beforeLast !== undefined && (beforeLast.value === '.' || beforeLast.value === '?.')) return true;
  return meaningful.every((t) =>
    t.kind === 'num' || t.kind === 'str' || t.kind === 'regex' ||
    (t.kind === 'id' && (['null', 'undefined', 'true', 'false', 'void'].includes(t.value) || constants.has(t.value))));
}

const CALLS = new Set(['equals', 'compare', 'startsWith', 'endsWith', 'includes', 'indexOf']);

/** Comparisons on secret-bearing values in one file's source: `line: source line`. */
function findSecretComparisons(source: string): Array<{ line: number; text: string }> {
  const js = stripTypeScriptTypes(source, { mode: 'strip' });
  const tokens = tokenize(js);
  // Constants declared as a literal: `const FORMAT_V1 = 0x01;`.
  const constants = new Set<string>();
  for (let k = 0; k + 4 < tokens.length; k++) {
    if (tokens[k]!.value === 'const' && /^[A-Z][A-Z0-9_]*$/.test(tokens[k + 1]!.value) && tokens[k + 2]!.value === '=' && ['num', 'str'].includes(tokens[k + 3]!.kind) && tokens[k + 4]!.value === ';') constants.add(tokens[k + 1]!.value);
  }
  const lines = source.split('\n');
  const hits = new Map<number, string>();
  tokens.forEach((t, k) => {
    if (t.kind === 'punct' && COMPARISONS.has(t.value)) {
      const left = operandLeft(tokens, k - 1);
      const right = operandRight(tokens, k + 1);
      if ((mentionsSecret(left) || mentionsSecret(right)) && !isPublic(left, constants) && !isPublic(right, constants)) hits.set(t.line, lines[t.line - 1]!.trim());
    }
    if (t.kind === 'id' && CALLS.has(t.value) && tokens[k - 1]?.value === '.' && tokens[k + 1]?.value === '(') {
      const receiver = operandLeft(tokens, k - 2);
      const args = operandRight(tokens, k + 1).slice(1, -1);
      const argList: Token[][] = [[]];
      let depth = 0;
      for (const a of args) {
        if (a.kind === 'punct' && a.value in CLOSE) depth++;
        if (a.kind === 'punct' && a.value in OPEN) depth--;
        if (depth === 0 && a.value === ',') argList.push([]);
        else argList.at(-1)!.push(a);
      }
      const allLiteral = argList.every((a) => isPublic(a, constants));
      if ((mentionsSecret(receiver) || mentionsSecret(args)) && !allLiteral) hits.set(t.line, lines[t.line - 1]!.trim());
    }
  });
  return [...hits].map(([line, text]) => ({ line, text }));
}

test('the comparison scan finds secret comparisons and only those (its own fixtures)', () => {
  const flagged = (src: string) => findSecretComparisons(src).map((h) => h.line);
  const source = [
    /* 1 */ 'export function check(presented: string, stored: string): boolean {',
    /* 2 */ '  if (presented === stored) return true;',
    /* 3 */ '  if (hash.equals(other)) return true;',
    /* 4 */ '  if (Buffer.compare(expectedMac, mac) === 0) return true;',
    /* 5 */ '  if (key === undefined || token !== null || typeof secret === "string") return false;',
    /* 6 */ '  if (secret.length !== 32 || user.passwordHash === null) return false;',
    /* 7 */ '  // if (password === guess) — a comment',
    /* 8 */ '  const s = "password === guess";',
    /* 9 */ '  const t = `${a}${apiKey === header ? 1 : 2}`;',
    /* 10 */ '  if ((flags & FLAG) === 0 && count !== limit) return false;',
    /* 11 */ '  return token.startsWith(prefix) || token.startsWith("svc:") || /===/.test(password);',
    /* 12 */ '}',
    /* 13 */ 'const FLAG = 0x01;',
    /* 14 */ 'if (this.#key !== other.#key) throw new Error();',
  ].join('\n');
  assert.deepEqual(flagged(source), [2, 3, 4, 9, 11, 14]);
});

test('no comparison in src/auth and src/crypto applies ===, !== or .equals() to a secret, beyond the reviewed ones', () => {
  const root = new URL('../../', import.meta.url).pathname;
  const found: Array<{ file: string; line: string }> = [];
  let files = 0;
  for (const dir of ['src/auth', 'src/crypto']) {
    for (const name of readdirSync(join(root, dir)).filter((f) => f.endsWith('.ts'))) {
      files++;
      const file = `${dir}/${name}`;
      for (const hit of findSecretComparisons(readFileSync(join(root, file), 'utf8'))) found.push({ file, line: hit.text });
    }
  }
  assert.ok(files >= 10, `only ${files} files scanned`);
  const unreviewed = found.filter((f) => !REVIEWED.some((r) => r.file === f.file && r.line === f.line));
  assert.deepEqual(unreviewed, [], 'a comparison on a secret-named value: use timingSafeEqual, or review it into REVIEWED with the reason');
  // A reviewed line that no longer exists is a stale exception: remove it.
  const stale = REVIEWED.filter((r) => !found.some((f) => f.file === r.file && f.line === r.line));
  assert.deepEqual(stale, []);
});

// ---------------------------------------------------------------------------------------
// Master-key isolation

test('two deployments with the same seed and names: tokens and access tokens of one are refused by the other, never decrypted', async (t) => {
  const a = await startApp(t);
  const b = await startApp(t);
  const callA = client(a.url);
  const callB = client(b.url);
  for (const slug of ['payments', 'lookup']) {
    const plaintext = marker(slug);
    const body = JSON.stringify({ s: plaintext, nested: { n: 12345678901234567890 } });
    const enc = await callA(`/api/v3/encryption/${slug}/encrypt`, { body, headers: { 'x-svc-fields': 's,nested' } });
    assert.equal(enc.status, 200, enc.text);
    assert.equal((await callA(`/api/v3/encryption/${slug}/decrypt`, { body: enc.text })).text, body, 'its own deployment opens it');
    const otherEnc = await callB(`/api/v3/encryption/${slug}/encrypt`, { body, headers: { 'x-svc-fields': 's,nested' } });
    if (slug === 'lookup') {
      assert.notEqual(JSON.parse(otherEnc.text).s, JSON.parse(enc.text).s, 'equal plaintexts give different deterministic tokens under another master key');
    }
    for (const [path, headers] of [
      [`/api/v3/encryption/${slug}/decrypt`, {}],
      [`/api/v3/encryption/${slug}/decrypt`, { 'x-svc-fields': 's' }],
      [`/proxy/${slug}`, { 'x-svc-mode': 'decrypt' }],
    ] as const) {
      const refused = await callB(path, { body: enc.text, headers });
      assert.equal(refused.status, 422, `${slug} ${path}: ${refused.text}`);
      const expectedErrors: Record<string, string[]> = { s: [AUTH_FAILED] };
      if (!('x-svc-fields' in headers)) expectedErrors['nested'] = [AUTH_FAILED];
      assert.deepEqual(refused.json, {
        message: Object.keys(expectedErrors).length === 1 ? AUTH_FAILED : `${AUTH_FAILED} (and 1 more error)`,
        errors: expectedErrors,
      });
      assert.ok(!refused.text.includes(plaintext));
    }
  }
  // Access tokens are signed with a secret derived from the master key.
  const login = await callA('/api/v2/auth/login', { body: '{"email":"ada@example.com","password":"correct horse"}' });
  assert.equal(login.status, 200);
  assert.equal((await callA('/api/v2/auth/userdetails', { bearer: login.json.access_token })).status, 200);
  const other = await callB('/api/v2/auth/userdetails', { bearer: login.json.access_token });
  assert.equal(other.status, 401);
  assert.deepEqual(other.json, { message: 'Unauthorized.' });
});
