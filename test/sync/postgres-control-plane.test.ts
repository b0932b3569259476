/**
 * A control plane of two instances on one PostgreSQL database (DESIGN §16), each a real
 * process, with two replicas following both: writes on either instance are seen by the
 * other and by every replica, an instance killed with SIGKILL loses no acknowledged write,
 * and the replicas go on with the survivor.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { startChild, type Child } from '../support/child.ts';
import { call } from '../support/app.ts';
import { postgresPerFile } from '../support/postgres.ts';
import { FLEET_KEY, MASTER_KEY, SNAPSHOT, startReplica, SYNC_SEED, tempDir, waitFor, type Node } from './nodes.ts';

const postgres = postgresPerFile();
const skip = postgres.skip;


const CLASSIFICATIONS = '/api/v3/classifications';
const COLORS = { bg_color: '#123456', fg_color: '#ffffff' };

/** A control-plane instance as its own process on the database at `url`. */
function startInstance(t: TestContext, url: string): Promise<Child> {
  return startChild(t, `keys: { master_key_file: /nonexistent/never-used.key }\n${SYNC_SEED}`, { SVC_MASTER_KEY: MASTER_KEY }, [], {
    store: `{ url: ${JSON.stringify(url)} }`,
  });
}

async function createClassification(instance: Child, name: string): Promise<number> {
  const res = await call(instance.url, CLASSIFICATIONS, { body: JSON.stringify({ name, ...COLORS }) });
  assert.equal(res.status, 201, res.text);
  return res.json.id as number;
}

async function classificationNames(instance: Child): Promise<string[]> {
  const res = await call(instance.url, `${CLASSIFICATIONS}?per_page=100`, { method: 'GET' });
  assert.equal(res.status, 200, res.text);
  return (res.json.data as Array<{ name: string }>).map((c) => c.name);
}

/** Resolves once `replica`'s own store holds a classification named `name`. */
function replicated(replica: Node, name: string): Promise<true> {
  return waitFor(`${name} on ${replica.url}`, async () => ((await replica.app.services.store.classifications.findByName(name)) === undefined ? undefined : true));
}

async function kill(child: Child): Promise<void> {
  const exited = once(child.process, 'exit');
  child.process.kill('SIGKILL');
  await exited;
}

test('two control-plane instances on one PostgreSQL database and two replicas: every write is seen everywhere, and a SIGKILL loses none', { skip, timeout: 120_000 }, async (t) => {
  const { name, url } = await postgres.database('svc_cp');
  // Started together on the empty database: the migrations and the seed run once.
  const [a, b] = await Promise.all([startInstance(t, url), startInstance(t, url)]);
  assert.equal(await postgres.server.psql(name, "SELECT count(*) FROM users WHERE email = 'ada@example.com'"), '1\n');
  assert.equal(await postgres.server.psql(name, 'SELECT count(*) FROM data_keys'), '3\n', 'one key per seeded encryption configuration, not one per instance');

  // A data request is not theirs to serve, and says so.
  const data = await call(a.url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"4111"}}' });
  assert.equal(data.status, 421);
  assert.equal(data.json.message, 'This control plane serves no data requests: send them to a sidecar.');

  const dir = tempDir(t);
  const replicas = [
    await startReplica(t, join(dir, 'one.db'), [a.url, b.url], 'one', { pollMs: 100 }),
    await startReplica(t, join(dir, 'two.db'), [b.url, a.url], 'two', { pollMs: 100 }),
  ];

  // A write on either instance: the other serves it once the state version's notice has
  // reached it (at once, or with the next poll), the replicas get it.
  await createClassification(a, 'Written on A');
  assert.ok((await classificationNames(a)).includes('Written on A'), 'A serves its own write on the very next request');
  await waitFor('B to see what A wrote', async () => ((await classificationNames(b)).includes('Written on A') ? true : undefined));
  await createClassification(b, 'Written on B');
  await waitFor('A to see what B wrote', async () => ((await classificationNames(a)).includes('Written on B') ? true : undefined));
  for (const replica of replicas) {
    await replicated(replica, 'Written on A');
    await replicated(replica, 'Written on B');
  }

  // Either instance serves the same snapshot for the same state: one version, one digest.
  const snapshotOf = async (instance: Child) => {
    const res = await call(instance.url, SNAPSHOT, { method: 'GET', key: FLEET_KEY });
    assert.equal(res.status, 200, res.text);
    return { version: res.json.version as number, digest: res.json.digest as string };
  };
  const fromA = await snapshotOf(a);
  await waitFor('B to serve the snapshot A serves', async () => {
    const fromB = await snapshotOf(b);
    return fromB.digest === fromA.digest ? fromB : undefined;
  }).then((fromB) => assert.deepEqual(fromB, fromA));

  // An API key revoked on one instance: refused there on the very next request, and by the
  // other once the notice reaches it.
  const key = await call(b.url, '/api/v3/api-keys', { body: JSON.stringify({ name: 'short-lived' }) });
  assert.equal(key.status, 201, key.text);
  const status = async (instance: Child) => (await call(instance.url, CLASSIFICATIONS, { method: 'GET', key: key.json.key })).status;
  await waitFor('A to know the new key', async () => ((await status(a)) === 200 ? true : undefined));
  assert.equal((await call(b.url, `/api/v3/api-keys/${key.json.id}/revoke`, { method: 'POST' })).status, 204);
  assert.equal(await status(b), 401);
  await waitFor('A to refuse the revoked key', async () => ((await status(a)) === 401 ? true : undefined));

  // An access token from a login on A, logged out on A, is refused by B at once: the
  // revocation is a row every instance reads on every check.
  const session = await call(a.url, '/api/v2/auth/login', { body: JSON.stringify({ email: 'ada@example.com', password: 'correct horse' }) });
  assert.equal(session.status, 200, session.text);
  const bearer = { authorization: `Bearer ${session.json.access_token}` };
  assert.equal((await call(b.url, '/api/v2/auth/userdetails', { method: 'GET', headers: bearer })).status, 200);
  assert.equal((await call(a.url, '/api/v2/auth/logout', { headers: bearer, body: '{}' })).status, 204);
  assert.equal((await call(b.url, '/api/v2/auth/userdetails', { method: 'GET', headers: bearer })).status, 401);

  // Failed logins count on the database, whichever instance takes them: five spread over
  // both, and the sixth is refused by either.
  const login = (instance: Child) => call(instance.url, '/api/v2/auth/login', { body: JSON.stringify({ email: 'ada@example.com', password: 'wrong' }) });
  for (const instance of [a, b, a, b, a]) assert.equal((await login(instance)).status, 401);
  assert.equal((await login(b)).status, 429);
  assert.equal((await login(a)).status, 429);

  // Writes acknowledged by A, then A killed at once: every one of them is in the database.
  const acknowledged: string[] = [];
  for (let i = 0; i < 20; i++) {
    const name = `Before the kill ${i}`;
    await createClassification(a, name);
    acknowledged.push(name);
  }
  await kill(a);
  const survivors = await classificationNames(b);
  for (const name of acknowledged) assert.ok(survivors.includes(name), `${name} was acknowledged and is kept`);

  // The replicas poll the survivor: a write on it reaches both.
  await createClassification(b, 'After the kill');
  for (const replica of replicas) await replicated(replica, 'After the kill');
  assert.equal((await call(b.url, '/readyz', { method: 'GET', key: null })).status, 200);
});
