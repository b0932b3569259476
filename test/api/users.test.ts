import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { App } from '../../src/app.ts';
import { verifyPassword } from '../../src/auth/passwords.ts';
import { call, KEYS, startApp } from '../support/app.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const USERS = '/api/v3/users';
const ROLES = '/api/v3/roles';
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const SEEDED = ['ada@example.com', 'dev@example.com', 'viewer@example.com', 'out@example.com', 'grace@example.com'];

function json(body: unknown): string {
  return JSON.stringify(body);
}

function activityOf(app: App, requestId: string | null) {
  app.services.logs.flush();
  return syncRepositories(app.services.store).logs.listActivity({ requestId: requestId ?? '', limit: 10, offset: 0 });
}

test('GET /users returns the page envelope of users with their roles', async (t) => {
  const { url } = await startApp(t);
  const res = await call(url, USERS, { method: 'GET' });
  assert.equal(res.status, 200);
  assert.equal(res.json.total, 5);
  assert.equal(res.json.per_page, 10);
  assert.equal(res.json.last_page, 1);
  assert.equal(res.json.from, 1);
  assert.equal(res.json.to, 5);
  assert.equal(res.json.path, `${url}${USERS}`);
  assert.deepEqual(res.json.data.map((u: { email: string }) => u.email), SEEDED);
  const ada = res.json.data[0];
  assert.deepEqual(Object.keys(ada), ['id', 'name', 'email', 'two_factor_enabled', 'created_at', 'updated_at', 'roles']);
  assert.equal(ada.name, 'Ada Admin');
  assert.equal(ada.two_factor_enabled, false);
  assert.match(ada.created_at, ISO);
  assert.equal(ada.roles.length, 1);
  assert.equal(ada.roles[0].name, 'owner');
  assert.equal(ada.roles[0].permissions.length, 21);
  assert.ok(!/password|scrypt/.test(res.text), 'no password hash is shown');
  for (const key of [KEYS.dev, KEYS.viewer]) assert.equal((await call(url, USERS, { method: 'GET', key })).status, 200);
});

test('GET /users pages at several sizes', async (t) => {
  const { url } = await startApp(t);
  const two = await call(url, `${USERS}?per_page=2`, { method: 'GET' });
  assert.equal(two.json.last_page, 3);
  assert.equal(two.json.next_page_url, `${url}${USERS}?per_page=2&page=2`);
  const last = await call(url, `${USERS}?per_page=2&page=3`, { method: 'GET' });
  assert.deepEqual(last.json.data.map((u: { email: string }) => u.email), ['grace@example.com']);
  assert.equal(last.json.from, 5);
  assert.equal(last.json.to, 5);
  assert.equal(last.json.next_page_url, null);
  assert.equal(last.json.prev_page_url, `${url}${USERS}?per_page=2&page=2`);

  for (let i = 0; i < 6; i++) {
    const res = await call(url, USERS, { body: json({ name: `User ${i}`, email: `u${i}@example.com` }) });
    assert.equal(res.status, 201);
  }
  const first = await call(url, USERS, { method: 'GET' });
  assert.equal(first.json.total, 11);
  assert.equal(first.json.data.length, 10);
  assert.equal(first.json.last_page, 2);
  const second = await call(url, `${USERS}?page=2`, { method: 'GET' });
  assert.deepEqual(second.json.data.map((u: { email: string }) => u.email), ['u5@example.com']);
  assert.equal(second.json.from, 11);
  const one = await call(url, `${USERS}?per_page=1&page=11`, { method: 'GET' });
  assert.equal(one.json.last_page, 11);
  assert.deepEqual(one.json.links.map((l: { label: string }) => l.label), ['&laquo; Previous', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', 'Next &raquo;']);

  for (const [query, message, field] of [
    ['per_page=101', 'The per page field must not be greater than 100.', 'per_page'],
    ['per_page=0', 'The per page field must be at least 1.', 'per_page'],
    ['page=x', 'The page field must be an integer.', 'page'],
  ] as const) {
    const bad = await call(url, `${USERS}?${query}`, { method: 'GET' });
    assert.equal(bad.status, 422);
    assert.deepEqual(bad.json, { message, errors: { [field]: [message] } });
  }
});

test('POST /users creates a user with a hashed password and roles by name or id', async (t) => {
  const { url, app, logs } = await startApp(t);
  const password = 'a long enough secret';
  const viewerRole = (await app.services.store.roles.findByName('viewer'))!;
  const res = await call(url, USERS, { body: json({ name: 'Lin Lee', email: 'lin@example.com', password, roles: ['developer', viewerRole.id, 'developer'] }) });
  assert.equal(res.status, 201);
  assert.equal(res.json.name, 'Lin Lee');
  assert.equal(res.json.email, 'lin@example.com');
  assert.equal(res.json.two_factor_enabled, false);
  assert.equal(typeof res.json.id, 'number');
  assert.deepEqual(res.json.roles.map((r: { name: string }) => r.name), ['developer', 'viewer']);
  assert.ok(!res.text.includes(password));
  assert.ok(!/password|scrypt/.test(res.text));

  const stored = (await app.services.store.users.findById(res.json.id))!;
  assert.match(stored.passwordHash!, /^scrypt\$/);
  assert.ok(verifyPassword(password, stored.passwordHash!));
  assert.deepEqual([...(await app.services.store.users.permissionsOf(stored.id))].sort().slice(0, 3), ['api-keys.create', 'api-keys.view', 'classifications.view']);

  const listed = await call(url, `${USERS}?per_page=100`, { method: 'GET' });
  assert.deepEqual(listed.json.data.at(-1), res.json);
  assert.ok(!listed.text.includes(password));

  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'user.created');
  assert.equal(entry?.description, 'Created user lin@example.com with roles developer, viewer.');
  assert.equal(entry?.causerEmail, 'ada@example.com');
  assert.ok(!logs().includes(password), 'the password is never logged');
  assert.ok(!JSON.stringify(activityOf(app, null)).includes(password));

  // Without a password or roles.
  const bare = await call(url, USERS, { body: json({ name: 'No Login', email: 'nologin@example.com' }) });
  assert.equal(bare.status, 201);
  assert.deepEqual(bare.json.roles, []);
  assert.equal((await app.services.store.users.findById(bare.json.id))?.passwordHash, null);
  assert.equal(activityOf(app, bare.headers.get('x-svc-request-id'))[0]?.description, 'Created user nologin@example.com.');
});

test('POST /users answers 422 with exact messages', async (t) => {
  const { url, app } = await startApp(t);
  const cases: Array<[string, unknown, Record<string, string[]>]> = [
    ['nothing', {}, { name: ['The name field is required.'], email: ['The email field is required.'] }],
    ['a long name', { name: 'n'.repeat(256), email: 'a@example.com' }, { name: ['The name field must not be greater than 255 characters.'] }],
    ['a bad email', { name: 'A', email: 'not-an-email' }, { email: ['The email field must be a valid email address.'] }],
    ['a taken email', { name: 'A', email: 'ada@example.com' }, { email: ['The email has already been taken.'] }],
    ['a taken email in other case', { name: 'A', email: 'ADA@Example.com' }, { email: ['The email has already been taken.'] }],
    ['a short password', { name: 'A', email: 'a@example.com', password: 'short' }, { password: ['The password field must be at least 12 characters.'] }],
    ['a password that is not a string', { name: 'A', email: 'a@example.com', password: 123456789012345 }, { password: ['The password field must be a string.'] }],
    ['a huge password', { name: 'A', email: 'a@example.com', password: 'p'.repeat(1025) }, { password: ['The password field must not be greater than 1024 characters.'] }],
    ['roles not an array', { name: 'A', email: 'a@example.com', roles: 'owner' }, { roles: ['The roles field must be an array.'] }],
    ['an unknown role', { name: 'A', email: 'a@example.com', roles: ['viewer', 'god'] }, { 'roles.1': ['The selected roles.1 is invalid.'] }],
    ['an unknown role id', { name: 'A', email: 'a@example.com', roles: [99] }, { 'roles.0': ['The selected roles.0 is invalid.'] }],
  ];
  for (const [what, body, errors] of cases) {
    const res = await call(url, USERS, { body: json(body) });
    assert.equal(res.status, 422, what);
    const messages = Object.values(errors).flat();
    const message = messages.length === 1 ? messages[0] : `${messages[0]} (and ${messages.length - 1} more error)`;
    assert.deepEqual(res.json, { message, errors }, what);
  }
  assert.equal((await app.services.store.users.list()).length, 5, 'nothing was created');
});

test('user and role endpoints: 401 and 403', async (t) => {
  const { url, app } = await startApp(t);
  const body = json({ name: 'X', email: 'x@example.com' });
  for (const [method, path] of [['GET', USERS], ['POST', USERS], ['GET', ROLES]] as const) {
    for (const key of [null, `svc_${'q'.repeat(40)}`, 'Bearer nonsense']) {
      const res = await call(url, path, { method, key, body: method === 'POST' ? body : undefined });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.deepEqual(res.json, { message: 'Unauthorized.' });
    }
    const res = await call(url, path, { method, key: KEYS.encryptOnly, body: method === 'POST' ? body : undefined });
    assert.equal(res.status, 403, `${method} ${path}`);
    assert.deepEqual(res.json, { message: 'User does not have the right permissions.' });
  }
  for (const key of [KEYS.dev, KEYS.viewer]) {
    const res = await call(url, USERS, { key, body });
    assert.equal(res.status, 403);
    assert.deepEqual(res.json, { message: 'User does not have the right permissions.' });
  }
  assert.equal(await app.services.store.users.findByEmail('x@example.com'), undefined);
});

test('a key cannot create a user with more permissions than it has', async (t) => {
  const { url } = await startApp(t);
  const limited = await call(url, '/api/v3/api-keys', { body: json({ name: 'hr', permissions: ['users.manage', 'users.view', 'roles.view', 'data.encrypt'] }) });
  const key = limited.json.key as string;
  const owner = await call(url, USERS, { key, body: json({ name: 'Boss', email: 'boss@example.com', roles: ['owner'] }) });
  assert.equal(owner.status, 403);
  const plain = await call(url, USERS, { key, body: json({ name: 'Plain', email: 'plain@example.com' }) });
  assert.equal(plain.status, 201);
});

test('GET /roles is a plain array of the built-in roles with their permissions', async (t) => {
  const { url } = await startApp(t);
  const res = await call(url, ROLES, { method: 'GET', key: KEYS.viewer });
  assert.equal(res.status, 200);
  assert.ok(Array.isArray(res.json));
  assert.deepEqual(res.json.map((r: { name: string }) => r.name), ['owner', 'administrator', 'developer', 'viewer']);
  const [owner, , developer, viewer] = res.json;
  assert.deepEqual(Object.keys(owner), ['id', 'name', 'description', 'permissions']);
  assert.equal(owner.permissions.length, 21);
  assert.deepEqual(owner.permissions[0], { name: 'classifications.view' });
  const names = (r: { permissions: Array<{ name: string }> }) => r.permissions.map((p) => p.name);
  assert.ok(names(viewer).every((p: string) => p.endsWith('.view')));
  assert.ok(names(developer).includes('data.decrypt'));
  assert.ok(names(developer).includes('api-keys.create'));
  assert.ok(!names(developer).includes('users.manage'));
});
