/**
 * One identity per person (DESIGN §13): emails compare after NFKC normalisation and case
 * folding everywhere they are used, names refuse characters that disguise them, and a
 * deleted user's id is never another user's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, KEYS, reseed, SEED, startApp } from '../support/app.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const USERS = '/api/v3/users';
const LOGIN = '/api/v2/auth/login';
const ME = '/api/v2/auth/userdetails';
const PASSWORD = 'kate has a long password';

const json = (body: unknown) => JSON.stringify(body);
const login = (url: string, email: string, password = PASSWORD) => call(url, LOGIN, { body: json({ email, password }) });

/** Spellings of kate@example.com that differ only in compatibility forms and case. */
const LOOKALIKES = ['\u212Aate@example.com', 'ｋａｔｅ@example.com', 'KATE@EXAMPLE.COM', 'kate@ｅｘａｍｐｌｅ.com', 'Kate@Example.Com'];

test('regression: one identity per person — an email that normalises to a taken one is 422; logins and lockouts find the one identity', async (t) => {
  const { url, app } = await startApp(t, 'auth: { login_max_attempts: 3 }');
  const created = await call(url, USERS, { body: json({ name: 'Kate', email: 'Kate@Example.com', password: PASSWORD, roles: ['viewer'] }) });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.json.email, 'kate@example.com', 'stored normalised');

  for (const email of LOOKALIKES) {
    const twin = await call(url, USERS, { body: json({ name: 'Twin', email, password: PASSWORD }) });
    assert.equal(twin.status, 422, email);
    assert.deepEqual(twin.json.errors, { email: ['The email has already been taken.'] }, email);
  }
  assert.equal((await app.services.store.users.list()).filter((u) => u.name === 'Twin').length, 0);

  // Each spelling logs in as the one kate.
  for (const email of LOOKALIKES) {
    const res = await login(url, email);
    assert.equal(res.status, 200, email);
    const me = await call(url, ME, { method: 'GET', headers: { authorization: `Bearer ${res.json.access_token}` } });
    assert.equal(me.json.email, 'kate@example.com', email);
  }
  // ... and they share one lockout: three failures under three spellings lock the fourth.
  for (const email of LOOKALIKES.slice(0, 3)) assert.equal((await login(url, email, 'wrong password')).status, 401, email);
  const locked = await login(url, 'kate@example.com');
  assert.equal(locked.status, 429, 'the canonical spelling is locked out by its lookalikes');

  // A seed that names the user in another case adopts the same row (the config file takes
  // ASCII emails only, so its lookalikes are case variants).
  await reseed({ app, url, port: 0, logs: () => '', adminUrl: null }, SEED.replace('  api_keys:', '    - { name: Kate K, email: KATE@Example.com, roles: [viewer] }\n  api_keys:'));
  const kates = (await app.services.store.users.list()).filter((u) => u.email.startsWith('kate'));
  assert.deepEqual(kates.map((u) => [u.email, u.name]), [['kate@example.com', 'Kate K']]);
});

/** Characters a name may not hold, each named for the failure message. */
const UNSAFE: Record<string, string> = {
  'RIGHT-TO-LEFT OVERRIDE': '\u202E',
  'LEFT-TO-RIGHT EMBEDDING': '\u202A',
  'FIRST STRONG ISOLATE': '\u2068',
  'POP DIRECTIONAL ISOLATE': '\u2069',
  'RIGHT-TO-LEFT MARK': '\u200F',
  'LEFT-TO-RIGHT MARK': '\u200E',
  'ARABIC LETTER MARK': '\u061C',
  NUL: '\u0000',
  'LINE FEED': '\n',
  BELL: '\u0007',
  DELETE: '\u007F',
  'NEXT LINE (C1)': '\u0085',
};
const message = (attribute: string) => `The ${attribute} field must not contain control characters or bidirectional formatting characters.`;

test('names and descriptions refuse control characters and bidirectional formatting characters (422)', async (t) => {
  const { url, app } = await startApp(t);
  const store = app.services.store;
  const phi = (await store.classifications.findBySlug('phi'))!.id;
  const provider = (await store.configurations.findByName('workspace'))!.id;
  const other = (await store.configurations.findByName('other'))!.id;
  const cases: Array<{ what: string; method: string; path: string; body: (bad: string) => unknown; field: string; attribute: string }> = [
    { what: 'user name', method: 'POST', path: USERS, body: (bad) => ({ name: `Ada${bad}min`, email: 'named@example.com' }), field: 'name', attribute: 'name' },
    { what: 'user email', method: 'POST', path: USERS, body: (bad) => ({ name: 'New', email: `new${bad}@example.com` }), field: 'email', attribute: 'email' },
    { what: 'API key name', method: 'POST', path: '/api/v3/api-keys', body: (bad) => ({ name: `ci${bad}key` }), field: 'name', attribute: 'name' },
    { what: 'configuration name', method: 'POST', path: '/api/v3/configurations', body: (bad) => ({ name: `pay${bad}ments2` }), field: 'name', attribute: 'name' },
    { what: 'configuration rename', method: 'PUT', path: `/api/v3/configurations/${other}`, body: (bad) => ({ name: `other${bad}` }), field: 'name', attribute: 'name' },
    { what: 'classification name', method: 'POST', path: '/api/v3/classifications', body: (bad) => ({ name: `P${bad}HI`, bg_color: '#000000', fg_color: '#ffffff' }), field: 'name', attribute: 'name' },
    { what: 'classification rename', method: 'PATCH', path: `/api/v3/classifications/${phi}`, body: (bad) => ({ name: `PHI${bad}` }), field: 'name', attribute: 'name' },
    { what: 'classification description', method: 'PATCH', path: `/api/v3/classifications/${phi}`, body: (bad) => ({ description: `health${bad}data` }), field: 'description', attribute: 'description' },
    {
      what: 'provider group name',
      method: 'PATCH',
      path: `/api/v3/classifications/${phi}`,
      body: (bad) => ({ provider_container_id: provider, gws_groups: [{ id: 'g-nurses', name: `Nur${bad}ses` }] }),
      field: 'gws_groups.0.name',
      attribute: 'gws groups.0.name',
    },
  ];
  for (const c of cases) {
    for (const [name, bad] of Object.entries(UNSAFE)) {
      const res = await call(url, c.path, { method: c.method, body: json(c.body(bad)) });
      assert.equal(res.status, 422, `${c.what} with ${name}`);
      assert.deepEqual(res.json.errors[c.field], [message(c.attribute)], `${c.what} with ${name}`);
    }
    // The same request without the character is accepted: the refusal is for the character.
    const clean = await call(url, c.path, { method: c.method, body: json(c.body('')) });
    assert.ok(clean.status === 200 || clean.status === 201, `${c.what} without it: ${clean.status} ${clean.text}`);
  }
  // Characters that are fine in names stay fine: letters of any script, emoji sequences with ZWJ, spaces.
  const fine = await call(url, '/api/v3/classifications', { body: json({ name: 'Santé 👩‍⚕️ מידע', description: 'Zero\u200Dwidth joiner', bg_color: '#000000', fg_color: '#ffffff' }) });
  assert.equal(fine.status, 201, fine.text);
});

test('the seed refuses names with control or bidirectional formatting characters', async (t) => {
  const { url, app } = await startApp(t);
  const running = { app, url, port: 0, logs: () => '', adminUrl: null };
  await assert.rejects(
    reseed(running, SEED.replace('{ name: PHI,', '{ name: "PHI\u202Etxt.exe",').replace('{ name: Vi Ewer,', '{ name: "Vi\\u0007Ewer",')),
    (err: Error) => {
      assert.match(err.message, /seed\.users\[2\]\.name: must not contain control characters or bidirectional formatting characters/);
      assert.match(err.message, /seed\.classifications\[0\]\.name: must not contain control characters or bidirectional formatting characters/);
      assert.ok(!err.message.includes('\u202E'), 'the value itself is not repeated');
      return true;
    },
  );
});

test('regression: a deleted user\'s id is never given again; its access token acts as nobody', async (t) => {
  const { url, app } = await startApp(t);
  const store = app.services.store;
  const first = await call(url, USERS, { body: json({ name: 'Temp', email: 'temp@example.com', password: PASSWORD, roles: ['developer'] }) });
  assert.equal(first.status, 201);
  const token = (await login(url, 'temp@example.com')).json.access_token as string;
  const asTemp = { authorization: `Bearer ${token}` };
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: asTemp })).json.email, 'temp@example.com');

  // Users leave the store when a control plane's snapshot drops them; here, directly.
  sqliteConnection(store).prepare('DELETE FROM users WHERE id = ?').run(first.json.id);
  const second = await call(url, USERS, { body: json({ name: 'Next', email: 'next@example.com', password: PASSWORD, roles: ['owner'] }) });
  assert.equal(second.status, 201);
  assert.ok(second.json.id > first.json.id, `the new user got ${second.json.id}, the deleted one had ${first.json.id}`);
  const res = await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: asTemp });
  assert.deepEqual([res.status, res.json], [401, { message: 'Unauthorized.' }]);
});

test('regression: invisible characters, a trailing dot and other spellings of a domain are no second identity', async (t) => {
  const { url } = await startApp(t);
  assert.equal((await call(url, USERS, { body: json({ name: 'Adam', email: 'adam@bücher.example', password: PASSWORD }) })).status, 201);
  // Invisible characters, and a domain whose dots are not ASCII ones: not an email here.
  const invalid = ['ad\u200Bam@bücher.example', 'adam\u00AD@bücher.example', 'a\u2060dam@bücher.example', 'adam@bü\u200Dcher.example', 'adam@bücher。example'];
  for (const email of invalid) {
    const res = await call(url, USERS, { body: json({ name: 'Twin', email, password: PASSWORD }) });
    assert.equal(res.status, 422, JSON.stringify(email));
    assert.deepEqual(res.json.errors, { email: ['The email field must be a valid email address.'] });
  }
  for (const email of ['adam@bücher.example.', 'adam@xn--bcher-kva.example', 'adam@BÜCHER.example', 'adam@bücher.ｅxample']) {
    const res = await call(url, USERS, { body: json({ name: 'Twin', email, password: PASSWORD }) });
    assert.equal(res.status, 422, email);
    assert.deepEqual(res.json.errors, { email: ['The email has already been taken.'] }, email);
  }
});
