import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { App } from '../../src/app.ts';
import { TokenCodec } from '../../src/crypto/token.ts';
import { call, KEYS, startApp, type Running } from '../support/app.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const LIST = '/api/v3/configurations';
const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';
const REWRAP = '/api/v3/encryption/payments/rewrap';
const FORBIDDEN = { message: 'User does not have the right permissions.' };

/** Plaintexts that must never show up in a rewrap response. */
const CARD = '4111 1111 1111 1111';
const AMOUNT = '12.50';
const PROFILE = '{"tier":"gold","since":[2019,"q3"]}';
const DOC = `{"card":{"number":"${CARD}","exp":"12/28"},"amount":${AMOUNT},"vip":true,"profile":${PROFILE},"items":[{"ssn":"123-45-6789"},{"ssn":"987-65-4321"}],"nil":null}`;
const FIELDS = 'card.number, amount, vip, profile, items.*.ssn';

function activityOf(app: App, requestId: string | null) {
  app.services.logs.flush();
  return syncRepositories(app.services.store).logs.listActivity({ requestId: requestId ?? '', limit: 10, offset: 0 });
}

async function configurationId(url: string, name: string): Promise<string> {
  const list = await call(url, LIST, { method: 'GET' });
  return list.json.data.find((c: { name: string }) => c.name === name).id;
}

/** Every token in a parsed document, by path. */
function tokens(value: unknown, path = ''): Map<string, string> {
  const out = new Map<string, string>();
  if (typeof value === 'string' && TokenCodec.looksLikeToken(value)) out.set(path, value);
  else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) for (const [p, t] of tokens(v, path === '' ? k : `${path}.${k}`)) out.set(p, t);
  }
  return out;
}

async function encryptedV1(running: Running): Promise<string> {
  const enc = await call(running.url, ENC, { body: DOC, headers: { 'x-svc-fields': FIELDS } });
  assert.equal(enc.status, 200);
  for (const token of tokens(enc.json).values()) assert.match(token, /^svc:1:/);
  return enc.text;
}

test('rewrap turns version-1 tokens into version-2 tokens with the same plaintext, and never returns plaintext', async (t) => {
  const running = await startApp(t);
  const { url, app } = running;
  const v1 = await encryptedV1(running);
  // A classified token keeps its classification across the rewrap.
  const pci = await call(url, ENC, { body: '{"pan":"5500 0000 0000 0004"}', headers: { 'x-svc-fields': 'pan', 'x-svc-classification': 'pci' } });
  assert.equal(pci.status, 200);
  assert.notEqual(TokenCodec.peek(pci.json.pan)?.classificationId, 0);
  const withPci = v1.replace(/}$/, `,"pan":"${pci.json.pan}"}`);
  const rotated = await call(url, `${LIST}/${await configurationId(url, 'payments')}/rotate`);
  assert.equal(rotated.status, 200);

  const res = await call(url, REWRAP, { body: withPci });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
  assert.equal(res.headers.get('x-svc-key-version'), '2');
  for (const plaintext of [CARD, '4111', AMOUNT, '"tier"', 'gold', '123-45-6789', '987-65-4321', '5500 0000 0000 0004']) {
    assert.ok(!res.text.includes(plaintext), `the response contains the plaintext ${plaintext}`);
  }
  const before = tokens(JSON.parse(withPci));
  const after = tokens(res.json);
  assert.deepEqual([...after.keys()], [...before.keys()], 'the same values are tokens');
  for (const [path, token] of after) {
    assert.match(token, /^svc:2:/, path);
    const old = TokenCodec.peek(before.get(path)!)!;
    const now = TokenCodec.peek(token)!;
    assert.deepEqual({ type: now.type, classificationId: now.classificationId, deterministic: now.deterministic }, { type: old.type, classificationId: old.classificationId, deterministic: false }, path);
  }
  assert.equal(res.json.card.exp, '12/28', 'values that are not tokens are left alone');
  assert.equal(res.json.nil, null);

  // Decrypting both gives the same bytes.
  const fromV1 = await call(url, DEC, { body: withPci });
  const fromV2 = await call(url, DEC, { body: res.text });
  assert.equal(fromV1.status, 200);
  assert.equal(fromV2.status, 200);
  assert.equal(fromV2.text, fromV1.text);
  assert.equal(fromV2.text, DOC.replace(/}$/, ',"pan":"5500 0000 0000 0004"}'));

  // Logged as an encrypt of 6 fields (card, amount, vip, profile, 2 ssns) plus the pan.
  app.services.logs.flush();
  const [usage] = await app.services.store.logs.listUsage({ requestId: res.headers.get('x-svc-request-id')!, limit: 10, offset: 0 });
  assert.equal(usage?.mode, 'encrypt');
  assert.equal(usage?.fieldCount, 7);
});

test('tokens already at the newest version are kept byte for byte: rewrapping twice changes nothing', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const v1 = await encryptedV1(running);
  await call(url, `${LIST}/${await configurationId(url, 'payments')}/rotate`);
  const once = await call(url, REWRAP, { body: v1 });
  const twice = await call(url, REWRAP, { body: once.text });
  assert.equal(twice.status, 200);
  assert.equal(twice.text, once.text);
  const fresh = await call(url, ENC, { body: '{"card":{"number":"1"}}' });
  const mixed = `{"old":${v1},"new":${fresh.text}}`;
  const res = await call(url, REWRAP, { body: mixed });
  assert.equal(res.json.new.card.number, fresh.json.card.number);
  assert.match(res.json.old.card.number, /^svc:2:/);
});

test('a deterministic configuration rewraps into exactly the token encrypt writes under the new version', async (t) => {
  const { url } = await startApp(t);
  const enc = (body: string) => call(url, '/api/v3/encryption/lookup/encrypt', { body, headers: { 'x-svc-fields': 'email' } });
  const v1 = await enc('{"email":"ada@example.com"}');
  await call(url, `${LIST}/${await configurationId(url, 'lookup')}/rotate`);
  const v2 = await enc('{"email":"ada@example.com"}');
  const res = await call(url, '/api/v3/encryption/lookup/rewrap', { body: v1.text });
  assert.equal(res.status, 200);
  assert.notEqual(v1.json.email, v2.json.email);
  assert.equal(res.json.email, v2.json.email);
  assert.equal(TokenCodec.peek(res.json.email)?.deterministic, true);
});

test('x-svc-fields limits the rewrap to those paths; NDJSON works line by line', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const v1 = await encryptedV1(running);
  await call(url, `${LIST}/${await configurationId(url, 'payments')}/rotate`);
  const res = await call(url, REWRAP, { body: v1, headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(res.status, 200);
  assert.match(res.json.card.number, /^svc:2:/);
  assert.match(res.json.amount, /^svc:1:/);
  assert.equal(res.json.amount, JSON.parse(v1).amount);

  const ndjson = `${v1}\n${v1}\n`;
  const lines = await call(url, REWRAP, { body: ndjson, contentType: 'application/x-ndjson' });
  assert.equal(lines.status, 200);
  assert.equal(lines.headers.get('content-type'), 'application/x-ndjson');
  const [a, b] = lines.text.trimEnd().split('\n').map((line) => JSON.parse(line));
  assert.match(a.card.number, /^svc:2:/);
  assert.match(b.items[1].ssn, /^svc:2:/);
});

test('rewrap needs configurations.rotate and the configuration in scope', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const v1 = await encryptedV1(running);
  // dev holds data.encrypt and data.decrypt, but not configurations.rotate.
  for (const key of [KEYS.dev, KEYS.viewer, KEYS.encryptOnly, KEYS.scoped]) {
    const res = await call(url, REWRAP, { body: v1, key });
    assert.equal(res.status, 403);
    assert.deepEqual(res.json, FORBIDDEN);
    assert.ok(!res.text.includes('svc:'), 'nothing of the body comes back');
  }
  const anonymous = await call(url, REWRAP, { body: v1, key: null });
  assert.equal(anonymous.status, 401);
  assert.deepEqual(anonymous.json, { message: 'Unauthorized.' });
  assert.equal((await call(url, '/api/v3/encryption/nope/rewrap', { body: v1 })).status, 404);
});

test('a token that does not open fails the rewrap with 422 keyed by its path; unusable headers are refused', async (t) => {
  const running = await startApp(t);
  const { url } = running;
  const v1 = JSON.parse(await encryptedV1(running));
  const foreign = await call(url, '/api/v3/encryption/other-config/encrypt', { body: '{"a":"x"}', headers: { 'x-svc-fields': 'a' } });
  const token: string = v1.card.number;
  // A character inside the ciphertext, never the last one: changing that one can leave
  // non-zero unused bits, which is a malformed token rather than an altered one.
  const at = token.lastIndexOf(':', token.length - 3) + 5;
  const altered = token.slice(0, at) + (token[at] === 'A' ? 'B' : 'A') + token.slice(at + 1);
  const res = await call(url, REWRAP, { body: JSON.stringify({ ok: v1.amount, bad: [altered], other: foreign.json.a }) });
  assert.equal(res.status, 422);
  const authentication = 'The token failed authentication: it was altered or belongs to another configuration.';
  assert.deepEqual(res.json, { message: `${authentication} (and 1 more error)`, errors: { 'bad.0': [authentication], other: [authentication] } });

  const forward = await call(url, REWRAP, { body: '{}', headers: { 'x-svc-destination': 'https://example.com/' } });
  assert.equal(forward.status, 400);
  assert.match(forward.json.message, /does not forward/);
  const classified = await call(url, REWRAP, { body: '{}', headers: { 'x-svc-classification': 'pci' } });
  assert.equal(classified.status, 400);
  assert.equal((await call(url, REWRAP, { body: '{}', contentType: 'text/plain' })).status, 415);
});

test('destroying a key version: confirmation, current version refused, tokens of it 422 for good, wrapped bytes erased', async (t) => {
  const running = await startApp(t);
  const { url, app } = running;
  const id = await configurationId(url, 'payments');
  const keysPath = `${LIST}/${id}/keys`;
  const destroy = (version: string, body: unknown, key?: string) => call(url, `${keysPath}/${version}/destroy`, { body: JSON.stringify(body), key });
  const v1 = await encryptedV1(running);

  // Before any rotation version 1 is the current one.
  const current = await destroy('1', { confirm: 'payments/v1' });
  assert.equal(current.status, 422);
  const currentMessage = 'Key version 1 is the current version and cannot be destroyed: rotate first.';
  assert.deepEqual(current.json, { message: currentMessage, errors: { version: [currentMessage] } });

  await call(url, `${LIST}/${id}/rotate`);
  const v2 = await call(url, ENC, { body: '{"card":{"number":"5500"}}' });
  assert.match(v2.json.card.number, /^svc:2:/);

  for (const wrong of [{ confirm: 'payments/v2' }, { confirm: 'payments' }, { confirm: 'Payments/v1' }, {}, { confirm: ['payments/v1'] }]) {
    const res = await destroy('1', wrong);
    assert.equal(res.status, 422, JSON.stringify(wrong));
    assert.deepEqual(res.json, { message: 'The confirm field must be "payments/v1".', errors: { confirm: ['The confirm field must be "payments/v1".'] } });
  }
  const both = await destroy('2', { confirm: 'nope' });
  assert.deepEqual(both.json.errors, { version: ['Key version 2 is the current version and cannot be destroyed: rotate first.'], confirm: ['The confirm field must be "payments/v2".'] });
  for (const version of ['3', '0', 'x', '99999999999']) assert.equal((await destroy(version, { confirm: `payments/v${version}` })).status, 404, version);
  const noPermission = await destroy('1', { confirm: 'payments/v1' }, KEYS.dev);
  assert.equal(noPermission.status, 403);
  assert.deepEqual(noPermission.json, FORBIDDEN);
  assert.equal((await call(url, DEC, { body: v1 })).status, 200, 'nothing was destroyed yet');

  const wrappedBefore = (await app.services.store.configurations.keys(id))[0]!.wrapped;
  assert.ok(wrappedBefore.length > 32);
  // Rotated a moment ago: only with force (the grace period has its own test).
  const res = await destroy('1', { confirm: 'payments/v1', force: true });
  assert.equal(res.status, 200);
  assert.equal(res.json.version, 1);
  assert.equal(res.json.status, 'destroyed');
  assert.match(res.json.destroyed_at, /^\d{4}-\d\d-\d\dT/);
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'configuration.key_destroyed');
  assert.equal(entry?.description, 'Destroyed key version 1 of configuration "payments" (forced, within keys.destroy_after).');
  assert.equal(entry?.causerEmail, 'ada@example.com');

  // The wrapped key is gone from the row, not just flagged.
  const row = sqliteConnection(app.services.store).prepare('SELECT wrapped, destroyed_at FROM data_keys WHERE configuration_id = ? AND version = 1').get(id) as { wrapped: Uint8Array; destroyed_at: string };
  assert.equal(row.wrapped.length, 0);
  assert.equal(row.destroyed_at, res.json.destroyed_at);

  const dead = await call(url, DEC, { body: v1 });
  assert.equal(dead.status, 422);
  const destroyedMessage = 'The token was encrypted with a key version that has been destroyed.';
  assert.deepEqual(dead.json.errors['card.number'], [destroyedMessage]);
  assert.deepEqual(Object.keys(dead.json.errors).sort(), ['amount', 'card.number', 'items.0.ssn', 'items.1.ssn', 'profile', 'vip']);
  const live = await call(url, DEC, { body: v2.text });
  assert.equal(live.status, 200);
  assert.equal(live.text, '{"card":{"number":"5500"}}');
  assert.equal((await call(url, REWRAP, { body: v1 })).status, 422, 'a destroyed version cannot be rewrapped either');

  const again = await destroy('1', { confirm: 'payments/v1', force: true });
  assert.equal(again.status, 422);
  assert.deepEqual(again.json.errors, { version: ['Key version 1 is already destroyed.'] });

  // Version numbers are never reused, and the list shows what happened.
  const third = await call(url, `${LIST}/${id}/rotate`);
  assert.equal(third.json.values.find((v: { key: string }) => v.key === 'key_version').value, '3');
  const list = await call(url, keysPath, { method: 'GET', key: KEYS.viewer });
  assert.equal(list.status, 200);
  assert.deepEqual(
    list.json.map((k: { version: number; status: string }) => [k.version, k.status]),
    [
      [1, 'destroyed'],
      [2, 'active'],
      [3, 'current'],
    ],
  );
});

test('the key list shows retired versions; provider configurations have no keys; writes are refused on a replica', async (t) => {
  const { url } = await startApp(t);
  const id = await configurationId(url, 'payments');
  await call(url, `${LIST}/${id}/rotate`);
  await call(url, `${LIST}/${id}`, { method: 'PUT', body: JSON.stringify({ values: { min_decryption_version: '2' } }) });
  const list = await call(url, `${LIST}/${id}/keys`, { method: 'GET' });
  assert.deepEqual(Object.keys(list.json[0]), ['version', 'status', 'created_at', 'destroyed_at']);
  assert.deepEqual(list.json.map((k: { status: string }) => k.status), ['retired', 'current']);
  const provider = await call(url, `${LIST}/${await configurationId(url, 'workspace')}/keys`, { method: 'GET' });
  assert.equal(provider.status, 422);
  assert.deepEqual(provider.json.errors, { type: ['Only encryption configurations have key versions.'] });
  const scoped = await call(url, `${LIST}/${id}/keys`, { method: 'GET', key: KEYS.scoped });
  assert.equal(scoped.status, 403);

  const replica = await startApp(t, 'state: { source: control-plane, control_plane: { url: "http://127.0.0.1:1", api_key: "svc_' + 'C'.repeat(40) + '" } }');
  const replicaId = await configurationId(replica.url, 'payments');
  const refused = await call(replica.url, `${LIST}/${replicaId}/keys/1/destroy`, { body: '{"confirm":"payments/v1"}' });
  assert.equal(refused.status, 409);
});

test('a rebuilt keyring derives only what changed: other versions keep their material, a destroyed one loses it', async (t) => {
  const running = await startApp(t);
  const { url, app } = running;
  const v1Doc = await encryptedV1(running);
  const id = await configurationId(url, 'payments');
  const keyring = () => app.services.codecs.get(app.services.codecs.configuration('payments')!).keyring;
  const v1 = keyring().materialOf(1);
  assert.notEqual(v1, undefined);
  for (let version = 2; version <= 4; version++) {
    assert.equal((await call(url, `${LIST}/${id}/rotate`)).status, 200);
    const enc = await call(url, ENC, { body: DOC, headers: { 'x-svc-fields': FIELDS } });
    assert.equal(enc.status, 200);
    for (const token of tokens(enc.json).values()) assert.match(token, new RegExp(`^svc:${version}:`));
    assert.equal(keyring().current, version);
    assert.equal(keyring().materialOf(1), v1, `version 1's material carried over to the keyring of version ${version}`);
  }
  const v3 = keyring().materialOf(3);
  assert.notEqual(v3, undefined);
  assert.notEqual(v3, v1);
  // Carried-over material opens the old tokens.
  const opened = await call(url, DEC, { body: v1Doc });
  assert.equal(opened.status, 200);
  assert.equal(opened.text, DOC);

  const destroyed = await call(url, `${LIST}/${id}/keys/2/destroy`, { body: JSON.stringify({ confirm: 'payments/v2', force: true }) });
  assert.equal(destroyed.status, 200);
  assert.equal(keyring().forDecrypt(2), 'destroyed');
  assert.equal(keyring().materialOf(2), undefined);
  assert.equal(keyring().materialOf(1), v1);
  assert.equal(keyring().materialOf(3), v3);
});

test('a version that was current less than keys.destroy_after (24h) ago is not destroyed without force: true (409); its tokens keep decrypting', async (t) => {
  const running = await startApp(t);
  const { url, app } = running;
  const id = await configurationId(url, 'payments');
  const destroy = (body: unknown) => call(url, `${LIST}/${id}/keys/1/destroy`, { body: JSON.stringify(body) });
  const v1 = await encryptedV1(running);
  assert.equal((await call(url, `${LIST}/${id}/rotate`)).status, 200);
  const supersededAt = (await app.services.store.configurations.keys(id))[0]!.supersededAt!;
  const until = new Date(Date.parse(supersededAt) + 24 * 3600 * 1000).toISOString();
  const message = `Key version 1 was current less than keys.destroy_after ago and may still be in use: it can be destroyed from ${until}, or now with force: true.`;

  for (const body of [{ confirm: 'payments/v1' }, { confirm: 'payments/v1', force: false }]) {
    const refused = await destroy(body);
    assert.equal(refused.status, 409, JSON.stringify(body));
    assert.deepEqual(refused.json, { message });
  }
  // Near misses of `true` are not taken for it.
  for (const force of ['true', 1, 'yes', null, [true], { on: true }]) {
    const res = await destroy({ confirm: 'payments/v1', force });
    assert.equal(res.status, 422, JSON.stringify(force));
    assert.deepEqual(res.json.errors, { force: ['The force field must be true or false.'] });
  }
  // A wrong confirmation is still a 422 first: force does not skip it.
  assert.equal((await destroy({ confirm: 'payments/v2', force: true })).status, 422);
  assert.equal((await call(url, DEC, { body: v1 })).text, DOC, 'nothing was destroyed');
  assert.equal((await app.services.store.configurations.keys(id))[0]!.destroyedAt, null);

  // A minute short of the grace period: still refused. Past it: destroyed without force.
  const supersede = (msAgo: number) =>
    sqliteConnection(app.services.store).prepare('UPDATE data_keys SET superseded_at = ? WHERE configuration_id = ? AND version = 1').run(new Date(Date.now() - msAgo).toISOString(), id);
  supersede(24 * 3600 * 1000 - 60_000);
  assert.equal((await destroy({ confirm: 'payments/v1' })).status, 409);
  supersede(24 * 3600 * 1000 + 1000);
  const done = await destroy({ confirm: 'payments/v1' });
  assert.equal(done.status, 200);
  assert.equal(done.json.status, 'destroyed');
  assert.equal((await call(url, DEC, { body: v1 })).status, 422);
});

test('force: true destroys a version superseded a moment ago, and the activity log says so', async (t) => {
  const running = await startApp(t);
  const { url, app } = running;
  const id = await configurationId(url, 'payments');
  await call(url, `${LIST}/${id}/rotate`);
  const res = await call(url, `${LIST}/${id}/keys/1/destroy`, { body: JSON.stringify({ confirm: 'payments/v1', force: true }) });
  assert.equal(res.status, 200);
  assert.equal(res.json.status, 'destroyed');
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.description, 'Destroyed key version 1 of configuration "payments" (forced, within keys.destroy_after).');
});
