import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { App } from '../../src/app.ts';
import { call, KEYS, startApp } from '../support/app.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const LIST = '/api/v3/api-keys';
const KEY = /^svc_[A-Za-z0-9]{40}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const VIEW_KEYS = ['id', 'name', 'prefix', 'status', 'created_at', 'updated_at', 'revoked_at', 'user', 'configurations', 'permissions'];

function json(body: unknown): string {
  return JSON.stringify(body);
}

function userId(app: App, email: string): number {
  return (syncRepositories(app.services.store).users.findByEmail(email))!.id;
}

function activityOf(app: App, requestId: string | null) {
  app.services.logs.flush();
  return syncRepositories(app.services.store).logs.listActivity({ requestId: requestId ?? '', limit: 10, offset: 0 });
}

/** Any working endpoint: roles.view is held by every seeded role. */
async function works(url: string, key: string): Promise<number> {
  return (await call(url, '/api/v3/roles', { method: 'GET', key })).status;
}

test('GET /api-keys is a plain array of keys without secrets', async (t) => {
  const { url, app } = await startApp(t);
  const res = await call(url, LIST, { method: 'GET' });
  assert.equal(res.status, 200);
  assert.ok(Array.isArray(res.json), 'not a page envelope');
  assert.deepEqual(res.json.map((k: { name: string }) => k.name), ['owner', 'dev', 'viewer', 'outsider', 'scoped', 'encrypt-only', 'grace']);
  const owner = res.json[0];
  assert.deepEqual(Object.keys(owner), VIEW_KEYS);
  assert.match(owner.id, UUID);
  assert.equal(owner.prefix, KEYS.owner.slice(0, 12));
  assert.equal(owner.status, 'active');
  assert.equal(owner.revoked_at, null);
  assert.equal(owner.user.email, 'ada@example.com');
  assert.deepEqual(owner.user.roles.map((r: { name: string }) => r.name), ['owner']);
  assert.deepEqual(owner.permissions, []);
  assert.deepEqual(owner.configurations, []);
  const scoped = res.json[4];
  assert.deepEqual(scoped.configurations.map((c: { name: string }) => c.name), ['other']);
  assert.deepEqual(res.json[5].permissions, [{ name: 'data.encrypt' }]);
  for (const [name, key] of Object.entries(KEYS)) {
    assert.ok(!res.text.includes(key), `the ${name} key is not shown`);
    const hash = (await app.services.store.apiKeys.findByName(name === 'encryptOnly' ? 'encrypt-only' : name))!.keyHash;
    assert.ok(!res.text.includes(hash.toString('hex')) && !res.text.includes(hash.toString('base64')), `the ${name} hash is not shown`);
  }
  assert.ok(!/key_hash|keyHash|password/.test(res.text));
  // Developers and viewers hold api-keys.view.
  assert.equal((await call(url, LIST, { method: 'GET', key: KEYS.viewer })).status, 200);
});

test('POST /api-keys creates a key shown once, stored only as a hash, working at once', async (t) => {
  const { url, app, logs } = await startApp(t);
  const list = await call(url, '/api/v3/configurations', { method: 'GET' });
  const payments = list.json.data[0].id as string;
  const res = await call(url, LIST, { body: json({ name: 'ci', permissions: ['data.encrypt', 'data.decrypt'], configurations: [payments] }) });
  assert.equal(res.status, 201);
  assert.deepEqual(Object.keys(res.json), [...VIEW_KEYS, 'key']);
  const key = res.json.key as string;
  assert.match(key, KEY);
  assert.equal(res.json.prefix, key.slice(0, 12));
  assert.equal(res.json.name, 'ci');
  assert.equal(res.json.status, 'active');
  assert.equal(res.json.user.email, 'ada@example.com');
  assert.deepEqual(res.json.permissions, [{ name: 'data.encrypt' }, { name: 'data.decrypt' }]);
  assert.deepEqual(res.json.configurations.map((c: { id: string }) => c.id), [payments]);

  const stored = (await app.services.store.apiKeys.findById(res.json.id))!;
  assert.ok(!stored.keyHash.equals(Buffer.from(key)), 'not stored in clear');
  assert.equal(stored.keyHash.length, 32);

  // Shown once: neither the list nor the record show it again.
  const shown = await call(url, `${LIST}/${res.json.id}`, { method: 'GET' });
  assert.equal(shown.status, 200);
  assert.deepEqual(Object.keys(shown.json), VIEW_KEYS);
  const { key: _omit, ...view } = res.json;
  assert.deepEqual(shown.json, view);
  const again = await call(url, LIST, { method: 'GET' });
  for (const text of [shown.text, again.text]) {
    assert.ok(!text.includes(key));
    assert.ok(!text.includes(stored.keyHash.toString('hex')) && !text.includes(stored.keyHash.toString('base64')));
  }

  // It works, within its scope.
  const enc = await call(url, '/api/v3/encryption/payments/encrypt', { key, body: '{"card":{"number":"4111"}}' });
  assert.equal(enc.status, 200);
  assert.equal((await call(url, '/api/v3/encryption/other-config/encrypt', { key, body: '{"a":"1"}', headers: { 'x-svc-fields': 'a' } })).status, 403);
  assert.equal(await works(url, key), 403, 'roles.view is outside its permissions');

  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'api-key.created');
  assert.equal(entry?.description, 'Created API key "ci" for ada@example.com.');
  assert.ok(!logs().includes(key), 'the key is never logged');
  assert.ok(!JSON.stringify(activityOf(app, null)).includes(key));
});

test('POST /api-keys for another user needs users.manage; a developer can make keys for itself', async (t) => {
  const { url, app } = await startApp(t);
  const dev = userId(app, 'dev@example.com');
  const ada = userId(app, 'ada@example.com');

  const forOther = await call(url, LIST, { key: KEYS.dev, body: json({ name: 'sneaky', user_id: ada }) });
  assert.equal(forOther.status, 403);
  assert.deepEqual(forOther.json, { message: 'User does not have the right permissions.' });
  // Whether the other user exists or not: the answer tells nothing about users.
  const forNobody = await call(url, LIST, { key: KEYS.dev, body: json({ name: 'sneaky', user_id: 9999 }) });
  assert.equal(forNobody.status, 403);

  const own = await call(url, LIST, { key: KEYS.dev, body: json({ name: 'dev-2', user_id: dev }) });
  assert.equal(own.status, 201);
  assert.equal(own.json.user.email, 'dev@example.com');
  const implicit = await call(url, LIST, { key: KEYS.dev, body: json({ name: 'dev-3' }) });
  assert.equal(implicit.status, 201);
  assert.equal(implicit.json.user.email, 'dev@example.com');
  assert.equal(await works(url, implicit.json.key), 200);

  const byOwner = await call(url, LIST, { body: json({ name: 'for-dev', user_id: dev, permissions: ['data.encrypt'] }) });
  assert.equal(byOwner.status, 201);
  assert.equal(byOwner.json.user.email, 'dev@example.com');
  assert.equal((await app.services.store.apiKeys.findById(byOwner.json.id))?.userId, dev);

  for (const key of [KEYS.viewer, KEYS.encryptOnly]) {
    const res = await call(url, LIST, { key, body: json({ name: 'nope' }) });
    assert.equal(res.status, 403);
  }
  assert.equal(await app.services.store.apiKeys.findByName('nope'), undefined);
  assert.equal(await app.services.store.apiKeys.findByName('sneaky'), undefined);
});

test('a key cannot mint a key that can do more than itself', async (t) => {
  const { url, app } = await startApp(t);
  const list = await call(url, '/api/v3/configurations', { method: 'GET' });
  const [payments, other] = [list.json.data[0].id as string, list.json.data[1].id as string];
  // A key of the owner limited to api-keys.create and data.encrypt.
  const limited = await call(url, LIST, { body: json({ name: 'limited', permissions: ['api-keys.create', 'data.encrypt'] }) });
  const key = limited.json.key as string;
  assert.equal((await call(url, LIST, { key, body: json({ name: 'wider' }) })).status, 403, 'an unscoped key would hold all of the owner\'s permissions');
  assert.equal((await call(url, LIST, { key, body: json({ name: 'wider', permissions: ['data.decrypt'] }) })).status, 403);
  const narrower = await call(url, LIST, { key, body: json({ name: 'narrower', permissions: ['data.encrypt'] }) });
  assert.equal(narrower.status, 201);

  // A key limited to one configuration only makes keys limited to it.
  const one = await call(url, LIST, { body: json({ name: 'one', permissions: ['api-keys.create', 'data.encrypt'], configurations: [other] }) });
  const oneKey = one.json.key as string;
  assert.equal((await call(url, LIST, { key: oneKey, body: json({ name: 'any', permissions: ['data.encrypt'] }) })).status, 403);
  assert.equal((await call(url, LIST, { key: oneKey, body: json({ name: 'any', permissions: ['data.encrypt'], configurations: [payments] }) })).status, 403);
  const same = await call(url, LIST, { key: oneKey, body: json({ name: 'same', permissions: ['data.encrypt'], configurations: [other] }) });
  assert.equal(same.status, 201);
  assert.equal(await app.services.store.apiKeys.findByName('wider'), undefined);
  assert.equal(await app.services.store.apiKeys.findByName('any'), undefined);
});

test('a key limited to some configurations lists, shows and revokes only keys limited within its scope: a key\'s listing shows its configurations whole', async (t) => {
  const { url } = await startApp(t);
  const list = await call(url, '/api/v3/configurations', { method: 'GET' });
  const [payments, other] = [list.json.data[0].id as string, list.json.data[1].id as string];
  const make = async (name: string, configurations: string[], permissions = ['api-keys.view', 'api-keys.revoke']) => {
    const res = await call(url, LIST, { body: json({ name, permissions, configurations }) });
    assert.equal(res.status, 201, res.text);
    return res.json as { id: string; key: string };
  };
  const team = await make('team', [payments]);
  const sibling = await make('sibling', [payments]);
  const elsewhere = await make('elsewhere', [other]);
  const straddling = await make('straddling', [payments, other]);
  const unlimited = await make('unlimited', []);

  const seen = await call(url, LIST, { method: 'GET', key: team.key });
  assert.equal(seen.status, 200, seen.text);
  assert.deepEqual(seen.json.map((k: { name: string }) => k.name).sort(), ['sibling', 'team']);
  for (const k of seen.json) assert.deepEqual(k.configurations.map((c: { id: string }) => c.id), [payments]);
  assert.equal((await call(url, `${LIST}/${sibling.id}`, { method: 'GET', key: team.key })).status, 200);
  for (const hidden of [elsewhere, straddling, unlimited]) {
    const res = await call(url, `${LIST}/${hidden.id}`, { method: 'GET', key: team.key });
    assert.equal(res.status, 403, res.text);
    assert.deepEqual(res.json, { message: 'User does not have the right permissions.' });
    assert.equal((await call(url, `${LIST}/${hidden.id}/revoke`, { key: team.key })).status, 403);
  }
  // The owner's own unlimited key still sees every key.
  const all = await call(url, LIST, { method: 'GET' });
  for (const name of ['team', 'sibling', 'elsewhere', 'straddling', 'unlimited']) assert.ok(all.json.some((k: { name: string }) => k.name === name), name);
  assert.equal((await call(url, `${LIST}/${unlimited.id}`, { method: 'GET', key: unlimited.key })).status, 200);
});

test('POST /api-keys answers 422 with exact messages', async (t) => {
  const { url, app } = await startApp(t);
  const dev = userId(app, 'dev@example.com');
  const cases: Array<[string, unknown, Record<string, string[]>]> = [
    ['no name', {}, { name: ['The name field is required.'] }],
    ['a long name', { name: 'k'.repeat(65) }, { name: ['The name field must not be greater than 64 characters.'] }],
    ['a taken name', { name: 'owner' }, { name: ['The name has already been taken.'] }],
    ['an unknown user', { name: 'k', user_id: 9999 }, { user_id: ['The selected user id is invalid.'] }],
    ['a user id that is not an integer', { name: 'k', user_id: 'ada' }, { user_id: ['The user id field must be an integer.'] }],
    ['permissions not an array', { name: 'k', permissions: 'data.encrypt' }, { permissions: ['The permissions field must be an array.'] }],
    ['an unknown permission', { name: 'k', permissions: ['data.encrypt', 'data.steal'] }, { 'permissions.1': ['The selected permissions.1 is invalid.'] }],
    ['a permission that is not a string', { name: 'k', permissions: [1] }, { 'permissions.0': ['The permissions.0 field must be a string.'] }],
    ['a permission the user lacks', { name: 'k', user_id: dev, permissions: ['users.manage'] }, { 'permissions.0': ["The permissions.0 field names a permission the key's user does not have."] }],
    ['configurations not an array', { name: 'k', configurations: 'payments' }, { configurations: ['The configurations field must be an array.'] }],
    ['an unknown configuration', { name: 'k', configurations: ['00000000-0000-4000-8000-000000000000'] }, { 'configurations.0': ['The selected configurations.0 is invalid.'] }],
    ['a configuration by name', { name: 'k', configurations: ['payments'] }, { 'configurations.0': ['The selected configurations.0 is invalid.'] }],
    ['a configuration that is not a string', { name: 'k', configurations: [7] }, { 'configurations.0': ['The configurations.0 field must be a string.'] }],
  ];
  for (const [what, body, errors] of cases) {
    const res = await call(url, LIST, { body: json(body) });
    assert.equal(res.status, 422, what);
    assert.deepEqual(res.json, { message: Object.values(errors)[0]![0], errors }, what);
  }
  const first = await call(url, LIST, { body: json({ permissions: ['x'] }) });
  assert.equal(first.json.message, 'The name field is required. (and 1 more error)');
  assert.equal((await app.services.store.apiKeys.list()).length, 7, 'nothing was created');
});

test('revoke: 204, and the key is refused on the very next request', async (t) => {
  const { url, app } = await startApp(t);
  const created = await call(url, LIST, { body: json({ name: 'temp' }) });
  const key = created.json.key as string;
  assert.equal(await works(url, key), 200);

  const res = await call(url, `${LIST}/${created.json.id}/revoke`);
  assert.equal(res.status, 204);
  assert.equal(res.text, '');
  const next = await call(url, '/api/v3/roles', { method: 'GET', key });
  assert.equal(next.status, 401);
  assert.deepEqual(next.json, { message: 'Unauthorized.' });

  const shown = await call(url, `${LIST}/${created.json.id}`, { method: 'GET' });
  assert.equal(shown.json.status, 'revoked');
  assert.match(shown.json.revoked_at, /^\d{4}-\d\d-\d\dT/);
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'api-key.revoked');
  assert.equal(entry?.description, 'Revoked API key "temp".');

  // Again: still 204, revoked_at unchanged, nothing more logged.
  const twice = await call(url, `${LIST}/${created.json.id}/revoke`);
  assert.equal(twice.status, 204);
  assert.equal((await call(url, `${LIST}/${created.json.id}`, { method: 'GET' })).json.revoked_at, shown.json.revoked_at);
  assert.deepEqual(activityOf(app, twice.headers.get('x-svc-request-id')), []);

  const rotate = await call(url, `${LIST}/${created.json.id}/rotate`);
  assert.equal(rotate.status, 422);
  assert.deepEqual(rotate.json, { message: 'A revoked API key cannot be rotated.', errors: { status: ['A revoked API key cannot be rotated.'] } });
  assert.equal(await works(url, key), 401);

  // A key can revoke itself; its next request fails.
  const self = (await app.services.store.apiKeys.findByName('owner'))!;
  assert.equal((await call(url, `${LIST}/${self.id}/revoke`)).status, 204);
  assert.equal(await works(url, KEYS.owner), 401);
});

test('rotate: a new secret replaces the old one at once', async (t) => {
  const { url, app, logs } = await startApp(t);
  const created = await call(url, LIST, { body: json({ name: 'rotating', permissions: ['roles.view'] }) });
  const old = created.json.key as string;
  const res = await call(url, `${LIST}/${created.json.id}/rotate`);
  assert.equal(res.status, 200);
  assert.deepEqual(Object.keys(res.json), ['key']);
  const fresh = res.json.key as string;
  assert.match(fresh, KEY);
  assert.notEqual(fresh, old);
  assert.equal(await works(url, old), 401);
  assert.equal(await works(url, fresh), 200);

  const shown = await call(url, `${LIST}/${created.json.id}`, { method: 'GET' });
  assert.equal(shown.json.prefix, fresh.slice(0, 12));
  assert.equal(shown.json.status, 'active');
  assert.deepEqual(shown.json.permissions, [{ name: 'roles.view' }], 'the scope is kept');
  assert.equal(shown.json.created_at, created.json.created_at);
  assert.ok(!shown.text.includes(fresh));
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'api-key.rotated');
  assert.equal(entry?.description, 'Rotated API key "rotating".');
  assert.ok(!logs().includes(fresh) && !logs().includes(old));
});

test('api-key endpoints: 401, 403 and 404', async (t) => {
  const { url, app } = await startApp(t);
  const id = (await app.services.store.apiKeys.findByName('dev'))!.id;
  const endpoints: Array<[string, string, string?]> = [
    ['GET', LIST],
    ['POST', LIST, json({ name: 'x' })],
    ['GET', `${LIST}/${id}`],
    ['POST', `${LIST}/${id}/revoke`],
    ['POST', `${LIST}/${id}/rotate`],
  ];
  for (const [method, path, body] of endpoints) {
    for (const key of [null, `svc_${'z'.repeat(40)}`]) {
      const res = await call(url, path, { method, key, body });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.deepEqual(res.json, { message: 'Unauthorized.' });
    }
    const res = await call(url, path, { method, key: KEYS.encryptOnly, body });
    assert.equal(res.status, 403, `${method} ${path}`);
    assert.deepEqual(res.json, { message: 'User does not have the right permissions.' });
  }
  // Developers create keys but neither revoke nor rotate them; viewers only look.
  for (const key of [KEYS.dev, KEYS.viewer]) {
    for (const action of ['revoke', 'rotate']) {
      assert.equal((await call(url, `${LIST}/${id}/${action}`, { key })).status, 403, action);
    }
    assert.equal((await call(url, `${LIST}/${id}`, { method: 'GET', key })).status, 200);
  }
  assert.equal(await works(url, KEYS.dev), 200, 'the dev key was neither revoked nor rotated');
  for (const missing of ['00000000-0000-4000-8000-000000000000', 'x']) {
    for (const [method, path] of [['GET', `${LIST}/${missing}`], ['POST', `${LIST}/${missing}/revoke`], ['POST', `${LIST}/${missing}/rotate`]] as const) {
      const res = await call(url, path, { method });
      assert.equal(res.status, 404, `${method} ${path}`);
      assert.deepEqual(res.json, { message: 'Not found.' });
    }
  }
});

test('regression: a narrowed key cannot rotate a stronger key to take its secret, nor touch other users\' keys', async (t) => {
  const { url, app } = await startApp(t);
  const store = app.services.store;
  // The owner's key limited to rotating keys: it may rotate only keys no stronger than itself.
  const limited = await call(url, LIST, { body: json({ name: 'rotator', permissions: ['api-keys.rotate', 'api-keys.revoke', 'roles.view'] }) });
  const key = limited.json.key as string;
  const owner = (await store.apiKeys.findByName('owner'))!;
  const rotated = await call(url, `${LIST}/${owner.id}/rotate`, { key });
  assert.equal(rotated.status, 403);
  assert.equal(rotated.json.key, undefined);
  assert.equal(await works(url, KEYS.owner), 200, 'the owner key still works');
  // A key no stronger than the caller can be rotated.
  const weak = await call(url, LIST, { body: json({ name: 'weak', permissions: ['roles.view'] }) });
  assert.equal((await call(url, `${LIST}/${weak.json.id}/rotate`, { key })).status, 200);
  // Without users.manage, another user's keys are off limits even with api-keys.revoke.
  const devs = await call(url, LIST, { body: json({ name: 'devs', user_id: userId(app, 'dev@example.com'), permissions: ['roles.view'] }) });
  assert.equal(devs.status, 201);
  assert.equal((await call(url, `${LIST}/${devs.json.id}/revoke`, { key })).status, 403);
  assert.equal((await call(url, `${LIST}/${devs.json.id}/rotate`, { key })).status, 403);
  assert.equal((await store.apiKeys.findById(devs.json.id))!.status, 'active');
  // The owner's unrestricted key (users.manage) may.
  assert.equal((await call(url, `${LIST}/${devs.json.id}/revoke`)).status, 204);
});
