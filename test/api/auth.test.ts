import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeJwt, SignJWT } from 'jose';
import { ACCESS_TOKEN_ISSUER, ACCESS_TOKEN_SECRET_LABEL } from '../../src/auth/access-tokens.ts';
import { LoginThrottle } from '../../src/auth/login-throttle.ts';
import { TooManyRequestsError } from '../../src/errors.ts';
import { call, KEYS, reseed, SEED, startApp, type Running } from '../support/app.ts';
import { sqliteConnection, syncRepositories } from '../../src/store/sqlite/connection.ts';
import { openStore } from '../../src/store/db.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const LOGIN = '/api/v2/auth/login';
const LOGOUT = '/api/v2/auth/logout';
const ME = '/api/v2/auth/userdetails';
const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';

const apiKey = (name: string) => `svc_${name.padEnd(40, '0')}`;
const DATA_KEY = apiKey('DataPlane');
const MIXED_KEY = apiKey('MixedScope');
const PASSWORDS = { ada: 'correct horse', dev: 'dev battery', viewer: 'viewer staple', off: 'off switch' };

// The shared seed plus passwords for dev and viewer, a disabled user and two scoped keys.
const AUTH_SEED = SEED.replace(
  '- { name: Dev Eloper, email: dev@example.com, roles: [developer] }',
  `- { name: Dev Eloper, email: dev@example.com, password: "${PASSWORDS.dev}", roles: [developer] }`,
)
  .replace(
    '- { name: Vi Ewer, email: viewer@example.com, roles: [viewer] }',
    `- { name: Vi Ewer, email: viewer@example.com, password: "${PASSWORDS.viewer}", roles: [viewer] }
    - { name: Off Line, email: off@example.com, password: "${PASSWORDS.off}", roles: [owner], disabled: true }`,
  )
  .replace(
    '  configurations:\n',
    `    - { name: data-plane, user: dev@example.com, key: ${DATA_KEY}, permissions: [data.encrypt, data.decrypt] }
    - { name: mixed, user: viewer@example.com, key: ${MIXED_KEY}, permissions: [data.encrypt, logs.view] }
  configurations:\n`,
  );

async function start(t: Parameters<typeof startApp>[0], extraYaml = ''): Promise<Running> {
  return startApp(t, extraYaml, AUTH_SEED);
}

function login(url: string, email: string, password: string, key: string = KEYS.owner) {
  return call(url, LOGIN, { key, body: JSON.stringify({ email, password }) });
}

async function tokenFor(url: string, email: string, password: string): Promise<string> {
  const res = await login(url, email, password);
  assert.equal(res.status, 200, res.text);
  return res.json.access_token;
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

function activity(running: Running): Array<{ action: string; description: string; user_id: number | null; causer_email: string | null }> {
  running.app.services.logs.flush();
  const rows = sqliteConnection(running.app.services.store).prepare('SELECT action, description, user_id, causer_email FROM activity_logs ORDER BY id').all();
  return rows.map((row) => ({ ...row })) as any;
}

/** `cst` defaults to the current credentials stamp of the user `sub` names; null leaves it out. */
async function signed(running: Running, claims: { sub?: string; iss?: string; exp: number; iat?: number; jti?: string; cst?: string | null }, secret?: Uint8Array): Promise<string> {
  const key = secret ?? running.app.services.master.deriveSecret(ACCESS_TOKEN_SECRET_LABEL);
  const stamp = claims.cst === undefined ? ((await running.app.services.store.users.findById(Number(claims.sub)))?.updatedAt ?? 'no user') : claims.cst;
  const jwt = new SignJWT(stamp === null ? {} : { cst: stamp }).setProtectedHeader({ alg: 'HS256' }).setJti(claims.jti ?? 'test-jti').setIssuedAt(claims.iat ?? Math.floor(Date.now() / 1000) - 10).setExpirationTime(claims.exp);
  if (claims.sub !== undefined) jwt.setSubject(claims.sub);
  jwt.setIssuer(claims.iss ?? ACCESS_TOKEN_ISSUER);
  return jwt.sign(key);
}

test('login returns a bearer token valid for access_token_ttl, signed for its user', async (t) => {
  const running = await start(t);
  const res = await login(running.url, 'ada@example.com', PASSWORDS.ada);
  assert.equal(res.status, 200);
  assert.deepEqual(Object.keys(res.json).sort(), ['access_token', 'expires_in', 'token_type']);
  assert.equal(res.json.token_type, 'bearer');
  assert.equal(res.json.expires_in, 3600);
  const claims = decodeJwt(res.json.access_token);
  const ada = (await running.app.services.store.users.findByEmail('ada@example.com'))!;
  assert.equal(claims.sub, String(ada.id));
  assert.equal(claims.iss, 'svc-sidecar');
  assert.equal(claims.exp! - claims.iat!, 3600);
  assert.match(claims.jti!, /^[A-Za-z0-9_-]{22}$/);
  const second = await login(running.url, 'ADA@example.com', PASSWORDS.ada);
  assert.equal(second.status, 200, 'emails are case-insensitive');
  assert.notEqual(decodeJwt(second.json.access_token).jti, claims.jti);

  const logged = activity(running).filter((e) => e.action === 'auth.login');
  assert.equal(logged.length, 2);
  assert.deepEqual(logged[0], { action: 'auth.login', description: 'Ada Admin (ada@example.com) logged in', user_id: ada.id, causer_email: 'ada@example.com' });
});

test('expires_in follows auth.access_token_ttl', async (t) => {
  const { url } = await start(t, 'auth: { access_token_ttl: 90s }');
  const res = await login(url, 'ada@example.com', PASSWORDS.ada);
  assert.equal(res.json.expires_in, 90);
  const claims = decodeJwt(res.json.access_token);
  assert.equal(claims.exp! - claims.iat!, 90);
});

test('wrong password and unknown email are the same 401, at a similar cost, and logged without the password', async (t) => {
  const running = await start(t);
  const wrong = await login(running.url, 'ada@example.com', 'not it at all');
  assert.equal(wrong.status, 401);
  assert.deepEqual(wrong.json, { message: 'Unauthenticated.' });
  const unknown = await login(running.url, 'nobody@example.com', 'whatever');
  assert.equal(unknown.status, 401);
  assert.equal(unknown.text, wrong.text);
  // A user without a password (dev in the shared seed has one here; grace has none).
  const noPassword = await login(running.url, 'grace@example.com', '');
  assert.equal(noPassword.status, 422, 'an empty password is a validation error');
  const graceNone = await login(running.url, 'grace@example.com', 'guess');
  assert.deepEqual([graceNone.status, graceNone.json], [401, { message: 'Unauthenticated.' }]);

  // Timing: an unknown email still pays for a full password hash.
  const time = async (email: string) => {
    const started = performance.now();
    const res = await login(running.url, email, 'nope');
    assert.equal(res.status, 401);
    return performance.now() - started;
  };
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const known: number[] = [];
  const missing: number[] = [];
  for (let i = 0; i < 4; i++) {
    known.push(await time('viewer@example.com'));
    missing.push(await time(`ghost${i}@example.com`));
  }
  const ratio = median(missing) / median(known);
  // Without the decoy hash the ratio would be about 0.03; the bounds leave room for a busy machine.
  assert.ok(ratio > 0.3 && ratio < 3, `unknown/known login time ratio ${ratio.toFixed(2)} (${median(missing).toFixed(1)} ms vs ${median(known).toFixed(1)} ms)`);

  const failures = activity(running).filter((e) => e.action === 'auth.login_failed');
  assert.ok(failures.length >= 3);
  assert.equal(failures[0]!.description, 'Failed login for ada@example.com: wrong password');
  assert.equal(failures[1]!.description, 'Failed login for nobody@example.com: unknown email');
  // Recorded against the key's user (ada's owner key made the attempts).
  assert.equal(failures[0]!.causer_email, 'ada@example.com');
  const all = JSON.stringify(activity(running));
  assert.ok(!all.includes('not it at all') && !all.includes('whatever'), 'no password in the activity log');
  assert.ok(!running.logs().includes('not it at all'), 'no password in the service log');
});

test('login body validation is a Laravel-style 422', async (t) => {
  const { url } = await start(t);
  const empty = await call(url, LOGIN, { body: '{}' });
  assert.equal(empty.status, 422);
  assert.deepEqual(empty.json, {
    message: 'The email field is required. (and 1 more error)',
    errors: { email: ['The email field is required.'], password: ['The password field is required.'] },
  });
  const bad = await call(url, LOGIN, { body: JSON.stringify({ email: 'not-an-email', password: 5 }) });
  assert.equal(bad.status, 422);
  assert.deepEqual(bad.json.errors, { email: ['The email field must be a valid email address.'], password: ['The password field must be a string.'] });
  const noKey = await call(url, LOGIN, { key: null, body: JSON.stringify({ email: 'ada@example.com', password: PASSWORDS.ada }) });
  assert.deepEqual([noKey.status, noKey.json], [401, { message: 'Unauthorized.' }]);
});

test('a disabled user gets 403 with the right password and 401 with a wrong one', async (t) => {
  const running = await start(t);
  const right = await login(running.url, 'off@example.com', PASSWORDS.off);
  assert.equal(right.status, 403);
  assert.deepEqual(right.json, { message: 'This action is unauthorized.' });
  const wrong = await login(running.url, 'off@example.com', 'guess');
  assert.deepEqual([wrong.status, wrong.json], [401, { message: 'Unauthenticated.' }]);
  assert.ok(activity(running).some((e) => e.description === 'Failed login for off@example.com: the user is disabled'));
});

test('a data-plane key may not log users in nor carry their tokens', async (t) => {
  const { url } = await start(t);
  const res = await login(url, 'ada@example.com', PASSWORDS.ada, DATA_KEY);
  assert.equal(res.status, 403);
  assert.deepEqual(res.json, { message: 'This action is unauthorized.' });
  // Refused before validation and before the lockout counts anything.
  assert.equal((await call(url, LOGIN, { key: DATA_KEY, body: '{}' })).status, 403);
  const token = await tokenFor(url, 'ada@example.com', PASSWORDS.ada);
  const acting = await call(url, ENC, { key: DATA_KEY, body: '{"a":"x"}', headers: { 'x-svc-fields': 'a', ...bearer(token) } });
  assert.deepEqual([acting.status, acting.json], [403, { message: 'This action is unauthorized.' }]);
  // The same key still works on its own, and a key scoped to more than data.* may log in.
  assert.equal((await call(url, ENC, { key: DATA_KEY, body: '{"a":"x"}', headers: { 'x-svc-fields': 'a' } })).status, 200);
  assert.equal((await login(url, 'ada@example.com', PASSWORDS.ada, MIXED_KEY)).status, 200);
});

test('the bearer token makes its user the acting user, within the key scope', async (t) => {
  const { url } = await start(t);
  const ada = await tokenFor(url, 'ada@example.com', PASSWORDS.ada);
  const dev = await tokenFor(url, 'dev@example.com', PASSWORDS.dev);

  // Encrypt under PHI, which lists only ada.
  const body = '{"dx":"flu"}';
  const phi = await call(url, ENC, { body, headers: { 'x-svc-fields': 'dx', 'x-svc-classification': 'phi' } });
  assert.equal(phi.status, 200);
  // dev's key alone may not read PHI; with ada's token ada is the acting user and may.
  assert.equal((await call(url, DEC, { key: KEYS.dev, body: phi.text })).status, 403);
  const asAda = await call(url, DEC, { key: KEYS.dev, body: phi.text, headers: bearer(ada) });
  assert.equal(asAda.status, 200);
  assert.equal(asAda.text, body);
  // ada's key with dev's token: dev acts, and dev is not in PHI.
  const asDev = await call(url, DEC, { key: KEYS.owner, body: phi.text, headers: bearer(dev) });
  assert.deepEqual([asDev.status, asDev.json], [403, { message: 'User does not have the right permissions.' }]);

  // Permissions follow the token's user: the viewer's key cannot decrypt, dev acting through it can.
  const open = await call(url, ENC, { body, headers: { 'x-svc-fields': 'dx' } });
  assert.equal((await call(url, DEC, { key: KEYS.viewer, body: open.text })).status, 403);
  assert.equal((await call(url, DEC, { key: KEYS.viewer, body: open.text, headers: bearer(dev) })).status, 200);
  // ... narrowed by the key's scope: the mixed key allows data.encrypt but not data.decrypt, whoever acts.
  assert.equal((await call(url, ENC, { key: MIXED_KEY, body, headers: { 'x-svc-fields': 'dx', ...bearer(ada) } })).status, 200);
  assert.equal((await call(url, DEC, { key: MIXED_KEY, body: open.text, headers: bearer(ada) })).status, 403);
  // ... and by the key's configuration scope: `scoped` only reaches `other`.
  assert.equal((await call(url, ENC, { key: KEYS.scoped, body, headers: { 'x-svc-fields': 'dx', ...bearer(dev) } })).status, 403);
});

test('userdetails shows the key user, or the token user when a bearer is sent', async (t) => {
  const { url } = await start(t);
  const own = await call(url, ME, { method: 'GET', key: KEYS.dev });
  assert.equal(own.status, 200);
  assert.equal(own.json.email, 'dev@example.com');
  assert.deepEqual(Object.keys(own.json).sort(), ['created_at', 'email', 'id', 'name', 'roles', 'two_factor_enabled', 'updated_at']);
  assert.deepEqual(own.json.roles.map((r: { name: string }) => r.name), ['developer']);
  assert.ok(!own.text.includes('scrypt'), 'no password hash');

  const token = await tokenFor(url, 'ada@example.com', PASSWORDS.ada);
  const acting = await call(url, ME, { method: 'GET', key: KEYS.dev, headers: bearer(token) });
  assert.equal(acting.status, 200);
  assert.equal(acting.json.email, 'ada@example.com');
  assert.equal(acting.json.name, 'Ada Admin');
  assert.deepEqual(acting.json.roles.map((r: { name: string }) => r.name), ['owner']);
  // The scheme is case-insensitive; other schemes (meant for a destination) are left alone.
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.dev, headers: { authorization: `bEaReR ${token}` } })).json.email, 'ada@example.com');
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.dev, headers: { authorization: 'Basic dXNlcjpwYXNz' } })).json.email, 'dev@example.com');
  // A bearer never replaces the API key.
  assert.equal((await call(url, ME, { method: 'GET', key: null, headers: bearer(token) })).status, 401);
});

test('invalid, tampered, expired, foreign and orphaned tokens are 401 Unauthorized.', async (t) => {
  const running = await start(t);
  const { url } = running;
  const good = await tokenFor(url, 'dev@example.com', PASSWORDS.dev);
  const ada = (await running.app.services.store.users.findByEmail('ada@example.com'))!;
  const now = Math.floor(Date.now() / 1000);
  const [header, payload, signature] = good.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  const escalated = Buffer.from(JSON.stringify({ ...claims, sub: String(ada.id) })).toString('base64url');
  const flipped = signature.slice(0, -2) + (signature.at(-2) === 'A' ? 'B' : 'A') + signature.at(-1);
  const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${payload}.`;

  const cases: Record<string, string> = {
    'not a JWT': 'Bearer abc',
    'no token': 'Bearer',
    'payload swapped to another user': `Bearer ${header}.${escalated}.${signature}`,
    'signature altered': `Bearer ${header}.${payload}.${flipped}`,
    'alg none': `Bearer ${none}`,
    expired: `Bearer ${await signed(running, { sub: String(ada.id), exp: now - 5, iat: now - 100 })}`,
    'another issuer': `Bearer ${await signed(running, { sub: String(ada.id), iss: 'someone-else', exp: now + 600 })}`,
    'another secret': `Bearer ${await signed(running, { sub: String(ada.id), exp: now + 600 }, new Uint8Array(32).fill(7))}`,
    'no subject': `Bearer ${await signed(running, { exp: now + 600 })}`,
    'unknown user': `Bearer ${await signed(running, { sub: '99999', exp: now + 600 })}`,
    'no credentials stamp': `Bearer ${await signed(running, { sub: String(ada.id), exp: now + 600, cst: null })}`,
    'a credentials stamp the user no longer has': `Bearer ${await signed(running, { sub: String(ada.id), exp: now + 600, cst: '2020-01-01T00:00:00.000Z' })}`,
  };
  for (const [name, authorization] of Object.entries(cases)) {
    const res = await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: { authorization } });
    assert.deepEqual([res.status, res.json], [401, { message: 'Unauthorized.' }], name);
  }
  // The same secret and claims are accepted: the cases above fail for the reason named.
  const forged = await signed(running, { sub: String(ada.id), exp: now + 600 });
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: bearer(forged) })).json.email, 'ada@example.com');

  // A user disabled after login loses their tokens at once.
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: bearer(good) })).status, 200);
  await running.app.services.store.users.update((await running.app.services.store.users.findByEmail('dev@example.com'))!.id, { disabled: true });
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: bearer(good) })).status, 401);
});

test('regression: sessions end with their credentials — tokens from before a password change, a disable or a role change are refused (401)', async (t) => {
  const running = await start(t);
  const { url } = running;
  const store = running.app.services.store;
  const dev = () => (syncRepositories(store).users.findByEmail('dev@example.com'))!;
  const acts = async (token: string) => {
    const res = await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: bearer(token) });
    return res.status === 200 ? res.json.email : [res.status, res.json];
  };
  const ended = [401, { message: 'Unauthorized.' }];

  // A password change (a reload of the seed with a new password) ends the tokens issued before it.
  const first = await tokenFor(url, 'dev@example.com', PASSWORDS.dev);
  const other = await tokenFor(url, 'ada@example.com', PASSWORDS.ada);
  assert.equal(await acts(first), 'dev@example.com');
  const newPassword = 'a brand new dev password';
  await reseed(running, AUTH_SEED.replace(`password: "${PASSWORDS.dev}"`, `password: "${newPassword}"`));
  assert.deepEqual(await acts(first), ended, 'after a password change');
  assert.equal(await acts(other), 'ada@example.com', "another user's token is untouched");
  const second = await tokenFor(url, 'dev@example.com', newPassword);
  assert.equal(await acts(second), 'dev@example.com', 'a token issued after the change works');

  // A disable ends them, and enabling the user again does not bring them back.
  await store.users.update(dev().id, { disabled: true });
  assert.deepEqual(await acts(second), ended, 'while disabled');
  await store.users.update(dev().id, { disabled: false });
  assert.deepEqual(await acts(second), ended, 'after being enabled again');
  const third = await tokenFor(url, 'dev@example.com', newPassword);
  assert.equal(await acts(third), 'dev@example.com');

  // A role change ends them too.
  await store.users.setRoles(dev().id, [(await store.roles.findByName('viewer'))!.id]);
  assert.deepEqual(await acts(third), ended, 'after a role change');
  const fourth = await tokenFor(url, 'dev@example.com', newPassword);
  assert.equal(await acts(fourth), 'dev@example.com');
  // Setting the same roles again is no change.
  await store.users.setRoles(dev().id, [(await store.roles.findByName('viewer'))!.id]);
  assert.equal(await acts(fourth), 'dev@example.com');
});

test('logout revokes the token it was sent with, and only that one', async (t) => {
  const running = await start(t);
  const { url } = running;
  const store = running.app.services.store;
  // A revocation of a long-expired token: the first logout purges it.
  await store.tokenRevocations.revoke('stale-jti', '2000-01-01T00:00:00.000Z');
  const first = await tokenFor(url, 'ada@example.com', PASSWORDS.ada);
  const second = await tokenFor(url, 'ada@example.com', PASSWORDS.ada);

  const noBearer = await call(url, LOGOUT, { key: KEYS.owner });
  assert.deepEqual([noBearer.status, noBearer.json], [401, { message: 'Unauthorized.' }]);

  const out = await call(url, LOGOUT, { key: KEYS.viewer, headers: bearer(first) });
  assert.equal(out.status, 204);
  assert.equal(out.text, '');
  const after = await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: bearer(first) });
  assert.deepEqual([after.status, after.json], [401, { message: 'Unauthorized.' }]);
  assert.equal((await call(url, LOGOUT, { key: KEYS.viewer, headers: bearer(first) })).status, 401, 'a revoked token cannot log out again');
  assert.equal((await call(url, ME, { method: 'GET', key: KEYS.viewer, headers: bearer(second) })).json.email, 'ada@example.com');

  const jti = decodeJwt(first).jti!;
  assert.equal(await store.tokenRevocations.isRevoked(jti), true);
  assert.equal(await store.tokenRevocations.isRevoked('stale-jti'), false, 'expired revocations are purged');
  const row = sqliteConnection(store).prepare('SELECT expires_at FROM token_revocations WHERE jti = ?').get(jti) as { expires_at: string };
  assert.equal(row.expires_at, new Date(decodeJwt(first).exp! * 1000).toISOString());
  const logouts = activity(running).filter((e) => e.action === 'auth.logout');
  assert.deepEqual(logouts.map((e) => [e.description, e.causer_email]), [['Ada Admin (ada@example.com) logged out', 'ada@example.com']]);
});

test('5 failed logins per email lock it for the window with Retry-After; success resets the count', async (t) => {
  const { url } = await start(t);
  for (let i = 0; i < 4; i++) assert.equal((await login(url, 'viewer@example.com', `wrong ${i}`)).status, 401);
  assert.equal((await login(url, 'viewer@example.com', PASSWORDS.viewer)).status, 200, 'the 5th attempt succeeds and clears the failures');
  for (let i = 0; i < 5; i++) assert.equal((await login(url, 'Viewer@Example.com', `wrong ${i}`)).status, 401, `failure ${i + 1} after the reset`);
  const locked = await login(url, 'VIEWER@example.com', PASSWORDS.viewer);
  assert.equal(locked.status, 429);
  assert.deepEqual(locked.json, { message: 'Too many requests.' });
  const retryAfter = Number(locked.headers.get('retry-after'));
  assert.ok(retryAfter > 890 && retryAfter <= 900, `Retry-After ${retryAfter}`);
  // Other emails are not affected.
  assert.equal((await login(url, 'ada@example.com', PASSWORDS.ada)).status, 200);
});

test('parallel guesses cannot get past the limit, and the lock lifts when the window slides', async (t) => {
  const { url } = await start(t, 'auth: { login_window: 1500ms }');
  const statuses = (await Promise.all(Array.from({ length: 12 }, (_, i) => login(url, 'dev@example.com', `guess ${i}`)))).map((r) => r.status);
  assert.equal(statuses.filter((s) => s === 401).length, 5, statuses.join(','));
  assert.equal(statuses.filter((s) => s === 429).length, 7, statuses.join(','));
  const locked = await login(url, 'dev@example.com', PASSWORDS.dev);
  assert.equal(locked.status, 429);
  assert.ok(['1', '2'].includes(locked.headers.get('retry-after')!), 'Retry-After rounds the 1.5 s window up');
  await new Promise((resolve) => setTimeout(resolve, 1600));
  assert.equal((await login(url, 'dev@example.com', PASSWORDS.dev)).status, 200);
});

test('the lockout slides with its clock, and the store keeps only one window of failures, at most max_attempts per email', async (t) => {
  let now = 1_000_000;
  const store = openStore(':memory:');
  t.after(() => store.close());
  const throttle = new LoginThrottle(store, { maxAttempts: 3, windowMs: 60_000, now: () => now });
  for (let i = 0; i < 3; i++) await throttle.attempt('target@example.com');
  await assert.rejects(throttle.attempt('TARGET@example.com'), (err: TooManyRequestsError) => err.headers?.['retry-after'] === '60');
  now += 20_000;
  await assert.rejects(throttle.attempt('target@example.com'), (err: TooManyRequestsError) => err.headers?.['retry-after'] === '40');
  now += 40_000;
  await throttle.attempt('target@example.com'); // the oldest attempts left the window

  const rows = () => (sqliteConnection(store).prepare('SELECT count(*) AS n FROM login_failures').get() as { n: number }).n;
  for (let i = 0; i < 500; i++) {
    const attempt = throttle.attempt(`spray${i % 100}@example.com`);
    // Each email's fourth and fifth attempts are refused, and recorded nowhere.
    if (i >= 300) await assert.rejects(attempt, TooManyRequestsError);
    else await attempt;
  }
  // 100 emails with three failures each, plus target's one.
  assert.equal(rows(), 100 * 3 + 1);
  now += 60_001;
  await throttle.attempt('spray0@example.com');
  assert.equal(rows(), 1, 'a window later, the expired failures are gone');
  await throttle.attempt('spray0@example.com');
  await throttle.succeed('SPRAY0@example.com');
  assert.equal(rows(), 0);
});

test('every process on the store counts the same failures, and a restart forgets none', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-throttle-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.db');
  const a = openStore(path);
  const b = openStore(path);
  const options = { maxAttempts: 3, windowMs: 60_000 };
  for (let i = 0; i < 3; i++) await new LoginThrottle(a, options).attempt('kate@example.com');
  await assert.rejects(new LoginThrottle(b, options).attempt('kate@example.com'), TooManyRequestsError);
  a.close();
  b.close();
  const again = openStore(path);
  t.after(() => again.close());
  await assert.rejects(new LoginThrottle(again, options).attempt('kate@example.com'), TooManyRequestsError);
});

