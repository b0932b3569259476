/**
 * The relay's end user (DESIGN §14 "End users behind the relay"), from real JWTs signed in
 * the test with jose: HS256 through a secret file, RS256 and ES256 through a JWKS file, and
 * a JWKS served over real HTTPS. Everything that is not a valid token of the configured
 * issuer and audience makes the reader anonymous (null); no token reaches the log.
 */
import assert from 'node:assert/strict';
import { createPublicKey, randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { SignJWT } from 'jose';
import { EndUserIdentity, type EndUser } from '../../src/auth/end-user.ts';
import { loadConfig } from '../../src/config/load.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { asymmetric, AUDIENCE, hs256, ISSUER, jwks, sign, startJwksServer, TEST_CA_FILE, tempDir, unsigned, writeFile, type SigningKey } from '../support/jwt.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

interface Subject {
  readonly identity: EndUserIdentity;
  readonly store: Store;
  /** The end user of a request with these headers. */
  readonly as: (headers: Record<string, string>) => Promise<EndUser | null>;
  /** The end user of `authorization: Bearer <token>`. */
  readonly bearer: (token: string) => Promise<EndUser | null>;
  readonly logs: () => string;
}

/** `relay.identity.jwt` as YAML lines (indented under `jwt:`), loaded through the real config. */
function identityOf(t: TestContext, jwtYaml: string): Subject {
  const config = loadConfig({
    text: `relay:\n  listen: 127.0.0.1:0\n  upstream: http://127.0.0.1:3000\n  identity:\n    jwt:\n${jwtYaml.replace(/^/gm, '      ')}\n`,
    env: {},
  });
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const identity = EndUserIdentity.fromConfig(config.relay!.identity!.jwt, createLogger('debug', sink));
  const store = openStore(':memory:');
  t.after(async () => {
    await identity.close();
    store.close();
  });
  const role = (name: string) => (syncRepositories(store).roles.findByName(name))!.id;
  syncRepositories(store).users.create({ name: 'Kate', email: 'kate@example.com', roleIds: [role('developer')] });
  syncRepositories(store).users.create({ name: 'Vic', email: 'vic@example.com', roleIds: [role('viewer')], disabled: true });
  const as = (headers: Record<string, string>) => identity.resolve(headers, store);
  return { identity, store, as, bearer: (token) => as({ authorization: `Bearer ${token}` }), logs: () => chunks.join('') };
}

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const CHECKS = `issuer: ${ISSUER}\naudience: ${AUDIENCE}\nroles_claim: roles\ngroups_claim: groups`;

function hs256Identity(t: TestContext, extra = CHECKS): Subject & { signer: ReturnType<typeof hs256> } {
  const signer = hs256();
  const file = writeFile(tempDir(t), 'jwt.secret', `${signer.text}\n`);
  return { ...identityOf(t, `secret_file: ${file}\n${extra}`), signer };
}

async function jwksFileIdentity(t: TestContext, ...keys: SigningKey[]): Promise<Subject> {
  const file = writeFile(tempDir(t), 'jwks.json', JSON.stringify(jwks(...keys)));
  return identityOf(t, `jwks_file: ${file}\n${CHECKS}`);
}

/** Asserts that no token (nor secret) is in what the identity logged. */
function assertNotLogged(subject: Subject, secrets: readonly string[]): void {
  const logged = subject.logs();
  for (const secret of secrets) assert.ok(!logged.includes(secret), `a token or secret (${secret.slice(0, 12)}…) is in the log`);
}

test('HS256 through secret_file: a valid token identifies the svc user its email names, with that user\'s roles; the file\'s final newline is not part of the secret', async (t) => {
  const subject = hs256Identity(t);
  const token = await sign(subject.signer, { sub: 'auth0|kate', email: 'Kate@Example.COM' });
  const user = await subject.bearer(token);
  const kate = (await subject.store.users.findByEmail('kate@example.com'))!;
  assert.deepEqual(user, { subject: 'auth0|kate', userId: kate.id, roleIds: [(await subject.store.roles.findByName('developer'))!.id], email: 'kate@example.com', groups: [] });
  // The same token again: the same answer (from the cache of verified tokens).
  assert.deepEqual(await subject.bearer(token), user);
  // A secret file written with CRLF reads the same.
  const crlf = writeFile(tempDir(t), 'crlf.secret', `${subject.signer.text}\r\n`);
  const other = identityOf(t, `secret_file: ${crlf}\n${CHECKS}`);
  assert.equal((await other.bearer(token))?.subject, 'auth0|kate');
  assertNotLogged(subject, [token, subject.signer.text]);
});

test('every token that is not valid for the configured key, issuer and audience makes the reader anonymous', async (t) => {
  const subject = hs256Identity(t);
  const claims = { sub: 'kate', email: 'kate@example.com' };
  const stranger = hs256();
  const es = await asymmetric('ES256');
  const valid = await sign(subject.signer, claims);
  const [header, payload, signature] = valid.split('.') as [string, string, string];
  const flipped = `${header}.${payload}.${signature.slice(0, -2)}${signature.at(-2) === 'A' ? 'B' : 'A'}${signature.at(-1)}`;
  const cases: Array<[string, string]> = [
    ['expired beyond the 30s tolerance', await sign(subject.signer, claims, { expiresIn: -31 })],
    ['not yet valid beyond the tolerance', await sign(subject.signer, claims, { notBefore: 60 })],
    ['wrong issuer', await sign(subject.signer, claims, { issuer: 'https://login.example.com/realms/other' })],
    ['issuer differing by a trailing slash', await sign(subject.signer, claims, { issuer: `${ISSUER}/` })],
    ['wrong audience', await sign(subject.signer, claims, { audience: 'billing-app' })],
    ['signed with another secret', await sign(stranger, claims)],
    ['signature altered', flipped],
    ['payload altered, signature kept', `${header}.${Buffer.from(JSON.stringify({ ...claims, sub: 'ada', iss: ISSUER, aud: AUDIENCE, exp: 9_999_999_999 })).toString('base64url')}.${signature}`],
    ['alg none', unsigned(claims)],
    ['alg none with the valid signature appended', `${unsigned(claims)}${signature}`],
    ['ES256 where the secret allows HS256 only', await sign(es, claims)],
    ['no exp', await sign(subject.signer, claims, { expiresIn: null })],
    ['no sub and no user claim', await sign(subject.signer, {})],
    ['two parts', `${header}.${payload}`],
    ['four parts', `${valid}.${signature}`],
    ['padding in a part', `${header}=.${payload}.${signature}`],
    // 32 bytes are 43 characters with 2 bits to spare: a lenient decoder reads the same signature.
    ['unused bits of the signature set', `${header}.${payload}.${signature.slice(0, -1)}${ALPHABET[ALPHABET.indexOf(signature.at(-1)!) ^ 1]}`],
    ['whitespace inside', `${header}.${payload}.${signature.slice(0, 10)} ${signature.slice(10)}`],
    ['+ and / instead of - and _', valid.replace(/-/g, '+').replace(/_/g, '/').replace(/^[^+/]*$/, `${header}+.${payload}.${signature}`)],
    ['a JWE (five parts)', `${header}.a.b.c.d`],
    ['not base64url at all', 'not.a.jwt'],
    ['header that is no JSON', `${Buffer.from('{alg').toString('base64url')}.${payload}.${signature}`],
    ['too long', `${header}.${'A'.repeat(9000)}.${signature}`],
  ];
  for (const [name, token] of cases) assert.equal(await subject.bearer(token), null, name);
  assert.equal(await subject.as({}), null, 'no header');
  // The positive controls of the near misses: within the tolerance, the token counts.
  assert.equal((await subject.bearer(await sign(subject.signer, claims, { expiresIn: -20 })))?.subject, 'kate', 'expired 20s ago, within 30s');
  assert.equal((await subject.bearer(await sign(subject.signer, claims, { notBefore: 20 })))?.subject, 'kate', 'valid in 20s, within 30s');
  assert.equal((await subject.bearer(await sign(subject.signer, claims, { audience: ['other-app', AUDIENCE] })))?.subject, 'kate', 'one of several audiences');
  assertNotLogged(subject, [valid, flipped, subject.signer.text]);
  assert.match(subject.logs(), /ERR_JWT_EXPIRED/, 'which check failed is logged at debug');
});

test('algorithm confusion: a token signed HS256 with the key set\'s public key as the secret is refused', async (t) => {
  const rs = await asymmetric('RS256');
  const subject = await jwksFileIdentity(t, rs);
  const claims = { sub: 'kate', email: 'kate@example.com' };
  assert.equal((await subject.bearer(await sign(rs, claims)))?.subject, 'kate', 'the real RS256 token counts');
  const publicKey = createPublicKey(rs.key);
  const secrets = [
    publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    publicKey.export({ type: 'pkcs1', format: 'pem' }).toString(),
    JSON.stringify(rs.jwk),
    rs.jwk!.n!,
  ];
  for (const secret of secrets) {
    const forged = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', kid: rs.kid! })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setExpirationTime('10m')
      .sign(new TextEncoder().encode(secret));
    assert.equal(await subject.bearer(forged), null, secret.slice(0, 30));
  }
  assert.equal(await subject.bearer(unsigned(claims)), null, 'alg none against a key set');
});

test('the header: Bearer with extra spaces or in lower case is read; no space, another scheme, a second word or a bare JWT in authorization are not; another header also takes the bare JWT', async (t) => {
  const subject = hs256Identity(t);
  const token = await sign(subject.signer, { sub: 'kate' });
  const read: Array<[string, string]> = [
    ['Bearer and one space', `Bearer ${token}`],
    ['extra spaces', `Bearer    ${token}`],
    ['a tab', `Bearer\t${token}`],
    ['trailing spaces', `Bearer ${token}   `],
    ['lower case scheme', `bearer ${token}`],
    ['upper case scheme', `BEARER ${token}`],
  ];
  for (const [name, value] of read) assert.equal((await subject.as({ authorization: value }))?.subject, 'kate', name);
  const unread: Array<[string, string]> = [
    ['no space', `Bearer${token}`],
    ['bare JWT', token],
    ['Basic', `Basic ${token}`],
    ['Token scheme', `Token ${token}`],
    ['a second word', `Bearer ${token} extra`],
    ['two tokens', `Bearer ${token}, Bearer ${token}`],
    ['scheme only', 'Bearer'],
    ['empty', ''],
  ];
  for (const [name, value] of unread) assert.equal(await subject.as({ authorization: value }), null, name);
  assert.equal(await subject.as({ 'x-id-token': token }), null, 'another header than the configured one');

  const custom = identityOf(t, `secret_file: ${writeFile(tempDir(t), 's', subject.signer.text)}\nheader: X-Id-Token`);
  assert.equal((await custom.as({ 'x-id-token': token }))?.subject, 'kate', 'a bare JWT in a configured header');
  assert.equal((await custom.as({ 'x-id-token': `Bearer  ${token}` }))?.subject, 'kate', 'Bearer in a configured header');
  assert.equal(await custom.as({ authorization: `Bearer ${token}` }), null, 'authorization is not read when another header is configured');
  assert.equal(await custom.as({ 'x-id-token': `${token}, ${token}` }), null, 'a repeated header (joined by Node) is no token');
});

test('a verified token whose email names no svc user identifies an end user without a user id; its roles and groups claims count all the same', async (t) => {
  const subject = hs256Identity(t);
  const token = await sign(subject.signer, { sub: 'u-77', email: 'nobody@example.com', roles: ['developer', 'no-such-role', 'Developer', 7], groups: ['g-nurses', 'g-nurses', ''] });
  assert.deepEqual(await subject.bearer(token), {
    subject: 'u-77',
    userId: null,
    roleIds: [(await subject.store.roles.findByName('developer'))!.id],
    email: 'nobody@example.com',
    groups: ['g-nurses'],
  });
  // Kate's own roles and the claimed ones together.
  const kate = await subject.bearer(await sign(subject.signer, { sub: 'k', email: 'kate@example.com', roles: 'owner' }));
  assert.deepEqual(kate?.roleIds, [(await subject.store.roles.findByName('owner'))!.id, (await subject.store.roles.findByName('developer'))!.id].sort((a, b) => a - b));
  // Claims of the wrong type grant nothing; they do not make the reader anonymous.
  const odd = await subject.bearer(await sign(subject.signer, { sub: 'u-78', email: 42, roles: { developer: true }, groups: Array.from({ length: 257 }, (_, i) => `g-${i}`) }));
  assert.deepEqual(odd, { subject: 'u-78', userId: null, roleIds: [], email: '', groups: [] });
});

test('an email the provider has not verified (email_verified anything but true or "true") names no svc user; a disabled svc user makes the reader anonymous; the subject falls back to the user claim; an unshowable subject is anonymous', async (t) => {
  const subject = hs256Identity(t);
  const sign_ = (claims: Record<string, unknown>) => sign(subject.signer, claims);
  for (const flag of [false, 'false', 'FALSE', 'False', 0, 1, null, 'no', '', 'TRUE', {}]) {
    const user = await subject.bearer(await sign_({ sub: 'x', email: 'kate@example.com', email_verified: flag, roles: ['viewer'] }));
    assert.equal(user?.userId, null, `email_verified: ${JSON.stringify(flag)}`);
    assert.equal(user?.email, '');
    assert.deepEqual(user?.roleIds, [(await subject.store.roles.findByName('viewer'))!.id], 'the roles claim still counts');
  }
  for (const flag of [true, 'true']) {
    assert.notEqual((await subject.bearer(await sign_({ sub: 'x', email: 'kate@example.com', email_verified: flag })))?.userId, null, `email_verified: ${JSON.stringify(flag)}`);
  }
  assert.notEqual((await subject.bearer(await sign_({ sub: 'x', email: 'kate@example.com' })))?.userId, null, 'no email_verified claim');
  assert.equal(await subject.bearer(await sign_({ sub: 'v', email: 'vic@example.com', roles: ['owner'] })), null, 'disabled user');
  assert.equal(await subject.bearer(await sign_({ sub: 'v', email: 'VIC@example.com.' })), null, 'disabled user, another spelling');
  const kelvin = await subject.bearer(await sign_({ email: '\u212Aate@example.com' }));
  assert.equal(kelvin?.subject, '\u212Aate@example.com', 'no sub: the user claim as sent');
  assert.equal(kelvin?.userId, (await subject.store.users.findByEmail('kate@example.com'))!.id, 'compared normalised');
  for (const sub of ['kate\nforged line', 'admin\u202Egnp', 'x'.repeat(257)]) {
    assert.equal(await subject.bearer(await sign_({ sub, email: 'kate@example.com' })), null, JSON.stringify(sub.slice(0, 20)));
  }
  assert.equal((await subject.bearer(await sign_({ sub: 'x'.repeat(256) })))?.subject.length, 256);
});

test('claims by dotted name read nested claims (realm_access.roles); a top-level claim of the whole name wins (namespaced claims)', async (t) => {
  const subject = hs256Identity(t, `roles_claim: realm_access.roles\ngroups_claim: https://example.com/groups\nuser_claim: preferred_email`);
  const developer = (await subject.store.roles.findByName('developer'))!.id;
  const viewer = (await subject.store.roles.findByName('viewer'))!.id;
  const user = await subject.bearer(await sign(subject.signer, { sub: 's', preferred_email: 'kate@example.com', realm_access: { roles: ['viewer'] }, 'https://example.com/groups': ['g-1'] }));
  assert.deepEqual(user?.roleIds, [developer, viewer]);
  assert.deepEqual(user?.groups, ['g-1']);
  assert.equal(user?.email, 'kate@example.com');
  const both = await subject.bearer(await sign(subject.signer, { sub: 's', 'realm_access.roles': ['owner'], realm_access: { roles: ['viewer'] } }));
  assert.deepEqual(both?.roleIds, [(await subject.store.roles.findByName('owner'))!.id], 'the top-level claim named realm_access.roles');
  const inherited = await subject.bearer(await sign(subject.signer, { sub: 's', realm_access: { roles: { length: 1, 0: 'owner' } } }));
  assert.deepEqual(inherited?.roleIds, [], 'an object that looks like a list is none');
  const proto = await subject.bearer(await sign(subject.signer, JSON.parse('{"sub":"s","realm_access":{"__proto__":{"roles":["owner"]}}}')));
  assert.deepEqual(proto?.roleIds, [], 'nothing is read through __proto__');
});

test('RS256 and ES256 through jwks_file; a key outside the set is refused; without a kid each key of the set is tried', async (t) => {
  const rs = await asymmetric('RS256');
  const es = await asymmetric('ES256');
  const subject = await jwksFileIdentity(t, rs, es);
  assert.equal((await subject.bearer(await sign(rs, { sub: 'r' })))?.subject, 'r');
  assert.equal((await subject.bearer(await sign(es, { sub: 'e', email: 'kate@example.com' })))?.userId, (await subject.store.users.findByEmail('kate@example.com'))!.id);
  const outsider = await asymmetric('ES256', es.kid);
  assert.equal(await subject.bearer(await sign(outsider, { sub: 'o' })), null, 'another key under a kid of the set');
  assert.equal(await subject.bearer(await sign(await asymmetric('ES256', 'unknown-kid'), { sub: 'o' })), null, 'a kid the set does not have');
  assert.equal(await subject.bearer(await sign(await asymmetric('ES256', null), { sub: 'o' })), null, 'no kid, a key outside the set');

  const first = await asymmetric('ES256', null);
  const second = await asymmetric('ES256', null);
  const kidless = await jwksFileIdentity(t, first, second);
  assert.equal((await kidless.bearer(await sign(second, { sub: 'second' })))?.subject, 'second', 'the second of two kid-less keys');
  assert.equal((await kidless.bearer(await sign(first, { sub: 'first' })))?.subject, 'first');
});

test('a JWKS URL over https: fetched once and cached, trusted through jwks_ca_file; without that CA the reader is anonymous', async (t) => {
  const es = await asymmetric('ES256');
  const server = await startJwksServer(t, jwks(es));
  const subject = identityOf(t, `jwks_url: ${server.url}\njwks_ca_file: ${TEST_CA_FILE}\n${CHECKS}`);
  for (let i = 0; i < 3; i++) assert.equal((await subject.bearer(await sign(es, { sub: `s${i}` })))?.subject, `s${i}`);
  assert.equal(server.fetches(), 1, 'the key set is fetched once');

  const untrusted = identityOf(t, `jwks_url: ${server.url}\n${CHECKS}`);
  const token = await sign(es, { sub: 'u' });
  assert.equal(await untrusted.bearer(token), null, 'a certificate the system CAs do not vouch for');
  assert.match(untrusted.logs(), /the JWKS could not be fetched/);
  assertNotLogged(untrusted, [token]);
});

test('a JWKS URL that fails makes readers anonymous, never an error: one warning without the token, and no new fetch for every request', async (t) => {
  const es = await asymmetric('ES256');
  const server = await startJwksServer(t, jwks(es));
  server.answer = { status: 500 };
  const subject = identityOf(t, `jwks_url: ${server.url}\njwks_ca_file: ${TEST_CA_FILE}\n${CHECKS}`);
  const token = await sign(es, { sub: 'kate' });
  for (let i = 0; i < 3; i++) assert.equal(await subject.bearer(token), null);
  assert.equal(server.fetches(), 1, 'within the retry window, no request waits on another fetch');
  const warnings = subject.logs().split('\n').filter((line) => line.includes('"level":40'));
  assert.equal(warnings.length, 1, subject.logs());
  assert.match(warnings[0]!, /answered 500/);
  assert.ok(!warnings[0]!.includes(token.split('.')[2]!));

  // Down altogether: the same.
  await server.close();
  const down = identityOf(t, `jwks_url: ${server.url}\njwks_ca_file: ${TEST_CA_FILE}\n${CHECKS}`);
  assert.equal(await down.bearer(token), null);
  assert.match(down.logs(), /the JWKS could not be fetched/);
  assertNotLogged(down, [token]);
});

test('a JWKS URL that hangs costs one request the fetch timeout; the readers after it are anonymous at once', async (t) => {
  const es = await asymmetric('ES256');
  const server = await startJwksServer(t, jwks(es));
  server.answer = 'hang';
  const subject = identityOf(t, `jwks_url: ${server.url}\njwks_ca_file: ${TEST_CA_FILE}\n${CHECKS}`);
  const token = await sign(es, { sub: 'kate' });
  let started = performance.now();
  assert.equal(await subject.bearer(token), null);
  const first = performance.now() - started;
  assert.ok(first >= 4000 && first < 15_000, `the first waited ${first} ms (timeout 5 s)`);
  started = performance.now();
  assert.equal(await subject.bearer(token), null);
  assert.ok(performance.now() - started < 1000, 'the next one does not wait again');
});

test('a remembered verification still ends at exp, and a change of the svc user applies at once', async (t) => {
  const subject = hs256Identity(t, `${CHECKS}\nclock_tolerance: 0s`);
  const token = await sign(subject.signer, { sub: 'kate', email: 'kate@example.com' }, { expiresIn: 2 });
  assert.notEqual((await subject.bearer(token))?.userId, null);
  const kate = (await subject.store.users.findByEmail('kate@example.com'))!;
  await subject.store.users.update(kate.id, { disabled: true });
  assert.equal(await subject.bearer(token), null, 'disabled: anonymous on the next request');
  await subject.store.users.update(kate.id, { disabled: false });
  assert.notEqual(await subject.bearer(token), null);
  await new Promise((resolve) => setTimeout(resolve, 2100));
  assert.equal(await subject.bearer(token), null, 'expired: anonymous, though verified before');
});

test('a secret file or JWKS file changed into something unusable after the config check stops the start with the path named', async (t) => {
  const dir = tempDir(t);
  const file = writeFile(dir, 'jwt.secret', randomBytes(48).toString('hex'));
  const config = loadConfig({ text: `relay:\n  listen: 127.0.0.1:0\n  upstream: http://127.0.0.1:3000\n  identity:\n    jwt:\n      secret_file: ${file}\n`, env: {} });
  writeFile(dir, 'jwt.secret', '');
  assert.throws(() => EndUserIdentity.fromConfig(config.relay!.identity!.jwt, createLogger('silent')), (error: Error) => error.message.includes(`relay.identity.jwt.secret_file: "${file}" is empty`));
});
