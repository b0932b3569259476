/**
 * The relay's end user on its api log (DESIGN §14 "End users behind the relay"): a relay
 * route's row names the end user by the subject of a valid JWT, never the token; anything
 * else leaves the reader anonymous and the answer unchanged. The token appears nowhere the
 * service writes: process log, stored log rows, log lists.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { call, KEYS, startApp, type Running } from '../support/app.ts';
import { closedPort } from '../support/destinations.ts';
import { asymmetric, AUDIENCE, hs256, ISSUER, jwks, sign, tempDir, unsigned, writeFile } from '../support/jwt.ts';
import { startUpstream } from '../support/upstream.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const ROUTES = `
    - name: records
      match: { method: GET, path: /records/** }
      configuration: payments
      response: { decrypt: [ssn] }
    - name: patients
      match: { method: POST, path: /patients/* }
      configuration: payments
      request: { encrypt: [ssn] }`;

async function startRelay(t: TestContext, identityYaml: string): Promise<Running & { relay: string; upstream: Awaited<ReturnType<typeof startUpstream>> }> {
  const upstream = await startUpstream(t, (_req, body, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body.length > 0 ? body : '{"ssn":"not a token"}');
  });
  const running = await startApp(
    t,
    `logs: { flush_interval: 1h, batch_size: 100000 }
relay:
  listen: 127.0.0.1:0
  upstream: ${upstream.url}
  identity:
    jwt:
${identityYaml.replace(/^/gm, '      ')}
  routes:${ROUTES}`,
  );
  const { port } = running.app.relay!.server.address() as AddressInfo;
  return { ...running, relay: `http://127.0.0.1:${port}`, upstream };
}

/** The api rows of these request ids, once they are written (the row is written when the exchange closes). */
async function apiRows(running: Running, ids: readonly string[]): Promise<Map<string, Record<string, unknown>>> {
  const store = running.app.services.store;
  const deadline = Date.now() + 5000;
  for (;;) {
    running.app.services.logs.flush();
    const rows = sqliteConnection(store).prepare(`SELECT * FROM api_logs WHERE request_id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(ids)) as Array<Record<string, unknown>>;
    if (rows.length >= ids.length || Date.now() > deadline) return new Map(rows.map((row) => [String(row['request_id']), { ...row }]));
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Every row of every log table, as text. */
function storedLogs(running: Running): string {
  const db = sqliteConnection(running.app.services.store);
  return ['api_logs', 'usage_logs', 'activity_logs'].map((table) => JSON.stringify(db.prepare(`SELECT * FROM ${table}`).all())).join('\n');
}

test('a relay route\'s api row names the end user by its subject, never the token; an anonymous reader leaves none; the application gets its header unchanged', async (t) => {
  const signer = hs256();
  const secretFile = writeFile(tempDir(t), 'jwt.secret', `${signer.text}\n`);
  const running = await startRelay(t, `secret_file: ${secretFile}\nissuer: ${ISSUER}\naudience: ${AUDIENCE}\nroles_claim: roles`);
  const valid = await sign(signer, { sub: 'auth0|kate', email: 'dev@example.com', roles: ['viewer'] });
  const expired = await sign(signer, { sub: 'auth0|late' }, { expiresIn: -3600 });
  const foreign = await sign(signer, { sub: 'auth0|foreign' }, { audience: 'billing-app' });
  const noSub = await sign(signer, { email: 'Grace@Example.com' });

  const send = async (id: string, path: string, authorization: string | null, method = 'GET') => {
    const headers: Record<string, string> = { 'x-svc-request-id': id };
    if (authorization !== null) headers['authorization'] = authorization;
    const res = await fetch(`${running.relay}${path}`, { method, headers: { ...headers, ...(method === 'POST' ? { 'content-type': 'application/json' } : {}) }, ...(method === 'POST' ? { body: '{"ssn":"123-45-6789"}' } : {}) });
    await res.arrayBuffer();
    return res.status;
  };
  assert.equal(await send('eu-valid', '/records/7', `Bearer ${valid}`), 200);
  assert.equal(running.upstream.seen.at(-1)?.headers['authorization'], `Bearer ${valid}`, 'the application receives its own header as sent');
  assert.equal(await send('eu-spaces', '/records/8', `bearer   ${valid}`), 200);
  assert.equal(await send('eu-expired', '/records/7', `Bearer ${expired}`), 200, 'an expired token: anonymous, never an error');
  assert.equal(await send('eu-foreign', '/records/7', `Bearer ${foreign}`), 200);
  assert.equal(await send('eu-garbage', '/records/7', 'Bearer not.a.jwt'), 200);
  assert.equal(await send('eu-none', '/records/7', null), 200);
  assert.equal(await send('eu-request-route', '/patients/1', `Bearer ${valid}`, 'POST'), 200);
  assert.equal(await send('eu-user-claim', '/records/9', `Bearer ${noSub}`), 200);
  assert.equal(await send('eu-passthrough', '/elsewhere', `Bearer ${valid}`), 200);

  const rows = await apiRows(running, ['eu-valid', 'eu-spaces', 'eu-expired', 'eu-foreign', 'eu-garbage', 'eu-none', 'eu-request-route', 'eu-user-claim']);
  assert.equal(rows.get('eu-valid')?.['end_user'], 'auth0|kate');
  assert.equal(rows.get('eu-spaces')?.['end_user'], 'auth0|kate');
  assert.equal(rows.get('eu-request-route')?.['end_user'], 'auth0|kate', 'request routes log the end user too');
  assert.equal(rows.get('eu-user-claim')?.['end_user'], 'Grace@Example.com', 'no sub: the user claim, as sent');
  for (const id of ['eu-expired', 'eu-foreign', 'eu-garbage', 'eu-none']) assert.equal(rows.get(id)?.['end_user'], null, id);
  assert.equal((await apiRows(running, ['eu-passthrough'])).size, 0, 'pass-through requests write no api row');

  // In the log lists: `end_user` where there is one, absent elsewhere.
  const list = await call(running.url, '/api/v3/logs/api?per_page=100', { method: 'GET', key: KEYS.owner });
  assert.equal(list.status, 200);
  const byId = new Map<string, Record<string, unknown>>(list.json.data.map((row: Record<string, unknown>) => [row['request_id'], row]));
  assert.equal(byId.get('eu-valid')?.['end_user'], 'auth0|kate');
  assert.ok(!('end_user' in byId.get('eu-none')!), 'absent for an anonymous reader');
  const unified = await call(running.url, '/api/v3/logs/unified?request_id=eu-valid', { method: 'GET', key: KEYS.owner });
  const entry = unified.json.data.find((e: Record<string, unknown>) => e['log_type'] === 'api');
  assert.equal(entry?.end_user, 'auth0|kate');
  assert.equal(JSON.parse(entry?.details).end_user, 'auth0|kate');
  const anonymous = await call(running.url, '/api/v3/logs/unified?request_id=eu-none', { method: 'GET', key: KEYS.owner });
  const none = anonymous.json.data.find((e: Record<string, unknown>) => e['log_type'] === 'api');
  assert.ok(!('end_user' in none) && !('end_user' in JSON.parse(none.details)));

  // The tokens are nowhere the service wrote: not the whole token, nor its signature.
  const everything = [running.logs(), storedLogs(running), list.text, unified.text].join('\n');
  for (const token of [valid, expired, foreign, noSub]) {
    for (const part of [token, token.split('.')[2]!]) assert.ok(!everything.includes(part), `a token (${part.slice(0, 12)}…) was written`);
  }
  assert.ok(!everything.includes(signer.text), 'nor the secret');
  assert.ok(running.logs().includes('ERR_JWT_EXPIRED'), 'the debug log says which check failed');
});

test('with the JWKS URL unreachable, relay routes still answer: the reader is anonymous, one warning, no token in it', async (t) => {
  const port = await closedPort();
  const running = await startRelay(t, `jwks_url: https://127.0.0.1:${port}/certs`);
  const signer = hs256();
  // HS256 is refused before any key is looked for; an ES256 token needs the key set.
  const token = await sign(signer, { sub: 'someone' });
  const es = await asymmetric('ES256');
  const esToken = await sign(es, { sub: 'someone' });
  for (const [id, value] of [['down-1', esToken], ['down-2', esToken], ['down-3', token]] as const) {
    const res = await fetch(`${running.relay}/records/1`, { headers: { authorization: `Bearer ${value}`, 'x-svc-request-id': id } });
    assert.equal(res.status, 200, id);
    assert.deepEqual(await res.json(), { ssn: 'not a token' });
  }
  const rows = await apiRows(running, ['down-1', 'down-2', 'down-3']);
  for (const id of ['down-1', 'down-2', 'down-3']) assert.equal(rows.get(id)?.['end_user'], null, id);
  const warnings = running.logs().split('\n').filter((line) => line.includes('the JWKS could not be fetched'));
  assert.equal(warnings.length, 1, 'one warning, then no new attempt within the retry window');
  assert.ok(warnings[0]!.includes(`https://127.0.0.1:${port}/certs`));
  for (const value of [token, esToken]) assert.ok(!running.logs().includes(value.split('.')[2]!));
});

test('relay response routes decrypt as the end user: members plain, a role grant masked, the anonymous the default, and a deny redacted, never a failed answer', async (t) => {
  const signer = hs256();
  const secretFile = writeFile(tempDir(t), 'jwt.secret', `${signer.text}\n`);
  const seed = SEED_WITH_REVEAL;
  const { running, relay, upstream } = await startReadingRelay(t, `secret_file: ${secretFile}`, () => answer);
  const token = async (value: string, classification: string) =>
    (await call(running.url, '/proxy/payments', { body: JSON.stringify({ v: value }), headers: { 'x-svc-fields': 'v', 'x-svc-classification': classification } })).json.v as string;
  const card = await token('4111 1111 1111 1111', 'pci');
  const secret = await token('diagnosis', 'phi');
  let answer = JSON.stringify({ card, secret });
  const read = async (authorization: string | null) => {
    const res = await fetch(`${relay}/records/1`, { headers: authorization === null ? {} : { authorization } });
    assert.equal(res.status, 200, 'the application answers, whoever reads');
    return (await res.json()) as { card: unknown; secret: unknown };
  };
  const ada = await sign(signer, { sub: 'ada', email: 'ada@example.com' });
  const developer = await sign(signer, { sub: 'dev-1', email: 'someone@example.com', roles: ['developer'] });
  const expired = await sign(signer, { sub: 'ada', email: 'ada@example.com' }, { expiresIn: -3600 });

  assert.deepEqual(await read(`Bearer ${ada}`), { card: '4111 1111 1111 1111', secret: 'diagnosis' }, 'a member of both: plain');
  assert.deepEqual(await read(`Bearer ${developer}`), { card: '•••• •••• •••• 1111', secret: null }, 'a role grant masks; PHI denies, which the relay redacts');
  for (const anonymous of [null, `Bearer ${expired}`, 'Bearer not-a-jwt']) {
    assert.deepEqual(await read(anonymous), { card, secret: null }, `${anonymous}: PCI's default is token, PHI's deny is redacted`);
  }
  // Without relay.identity the relay decrypts for the pod, as before reveal levels.
  const pod = await startApp(
    t,
    `relay:
  listen: 127.0.0.1:0
  upstream: ${upstream.url}
  routes:
    - { name: read, match: { method: GET, path: /records/** }, configuration: payments, response: { decrypt: [] } }`,
    seed,
  );
  const podRelay = `http://127.0.0.1:${(pod.app.relay!.server.address() as AddressInfo).port}`;
  answer = JSON.stringify({
    card: (await call(pod.url, '/proxy/payments', { body: '{"v":"4111"}', headers: { 'x-svc-fields': 'v', 'x-svc-classification': 'pci' } })).json.v,
  });
  assert.deepEqual(await (await fetch(`${podRelay}/records/1`)).json(), { card: '4111' });
});

test('an ES256 key set from a JWKS file on the relay: a valid token decrypts as its user; expired, wrongly issued, for another audience, forged or unsigned ones read as the anonymous', async (t) => {
  const es = await asymmetric('ES256');
  const forger = await asymmetric('ES256', es.kid);
  const jwksFile = writeFile(tempDir(t), 'jwks.json', JSON.stringify(jwks(es)));
  const { running, relay } = await startReadingRelay(t, `jwks_file: ${jwksFile}`, () => answer);
  const card = (await call(running.url, '/proxy/payments', { body: '{"v":"4111 1111 1111 1111"}', headers: { 'x-svc-fields': 'v', 'x-svc-classification': 'pci' } })).json.v as string;
  const answer = JSON.stringify({ card });
  const read = async (jwt: string) => {
    const res = await fetch(`${relay}/records/1`, { headers: { authorization: `Bearer ${jwt}` } });
    assert.equal(res.status, 200);
    return ((await res.json()) as { card: unknown }).card;
  };
  const claims = { sub: 'ada', email: 'ada@example.com' };
  assert.equal(await read(await sign(es, claims)), '4111 1111 1111 1111', 'a valid ES256 token: the member sees plain');
  assert.equal(await read(await sign(es, { sub: 'dev', email: 'x@example.com', roles: ['developer'] })), '•••• •••• •••• 1111', 'its roles claim grants the mask');
  const anonymous: Array<[string, string]> = [
    ['expired', await sign(es, claims, { expiresIn: -3600 })],
    ['not yet valid', await sign(es, claims, { notBefore: 3600 })],
    ['wrong issuer', await sign(es, claims, { issuer: 'https://elsewhere.example.com' })],
    ['wrong audience', await sign(es, claims, { audience: 'billing-app' })],
    ['signed by another key under the same kid', await sign(forger, claims)],
    ['alg none', unsigned(claims)],
    ['HS256 with the public key as secret', await sign(hs256(JSON.stringify(es.jwk)), claims, { header: { kid: es.kid } })],
  ];
  for (const [why, jwt] of anonymous) assert.equal(await read(jwt), card, `${why}: PCI's default (token) for the anonymous`);
});

/**
 * The service with a relay whose one route decrypts every token of `/records/**` answers
 * as the end user of the JWT (`key`: the identity's key setting); the application answers
 * `answer()`.
 */
async function startReadingRelay(t: TestContext, key: string, answer: () => string) {
  const upstream = await startUpstream(t, (_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(answer());
  });
  const running = await startApp(
    t,
    `relay:
  listen: 127.0.0.1:0
  upstream: ${upstream.url}
  identity:
    jwt: { ${key}, issuer: ${ISSUER}, audience: ${AUDIENCE}, roles_claim: roles }
  routes:
    - { name: read, match: { method: GET, path: /records/** }, configuration: payments, response: { decrypt: [] } }`,
    SEED_WITH_REVEAL,
  );
  return { running, upstream, relay: `http://127.0.0.1:${(running.app.relay!.server.address() as AddressInfo).port}` };
}

const SEED_WITH_REVEAL = `
seed:
  users:
    - { name: Ada Admin, email: ada@example.com, password: "correct horse", roles: [owner] }
  api_keys:
    - { name: owner, user: ada@example.com, key: ${KEYS.owner} }
  configurations:
    - { name: payments, proxy_slug: payments }
  classifications:
    - name: PCI
      bg_color: "#0000aa"
      fg_color: "#ffffff"
      users: [ada@example.com]
      reveal:
        - { to: { roles: [developer] }, level: mask, mask: last4 }
      default: token
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com] }
`;
