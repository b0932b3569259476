/**
 * Replicas hold no login (DESIGN §13): a replica answers password login with 409, accepts
 * the bearer tokens its control plane issued (the signing secret is derived from the
 * master key both hold), and the replicas' API key (`sync.*` only) reaches nothing but
 * the sync endpoints, anywhere.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { apiRoutes } from '../../src/api/route-table.ts';
import { call, KEYS } from '../support/app.ts';
import { FLEET_KEY, get, json, LOGS, SNAPSHOT, startControlPlane, startReplica, tempDir, waitFor, waitReady, type Node } from './nodes.ts';

const LOGIN = '/api/v2/auth/login';
const ADA = json({ email: 'ada@example.com', password: 'correct horse' });

test('a replica refuses password login with 409; tokens from a login on the control plane work on it until the user is disabled', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r.db'), cp.url, 'r');
  await waitReady(replica);

  const refused = await call(replica.url, LOGIN, { body: ADA });
  assert.equal(refused.status, 409);
  assert.deepEqual(refused.json, { message: 'Managed by the control plane.' });
  assert.equal((await call(replica.url, LOGIN, { body: json({ email: 'ada@example.com', password: 'wrong' }) })).status, 409, 'whatever the password');
  assert.equal((await call(replica.url, LOGIN, { body: ADA, key: 'svc_' + 'x'.repeat(40) })).status, 401, 'an unknown key is still 401');

  const login = await call(cp.url, LOGIN, { body: ADA });
  assert.equal(login.status, 200);
  const bearer = { authorization: `Bearer ${login.json.access_token}` };
  // The developer's key, acting as Ada through her token: on the replica as on the control plane.
  for (const node of [cp, replica]) {
    const me = await call(node.url, '/api/v2/auth/userdetails', { method: 'GET', key: KEYS.dev, headers: bearer });
    assert.equal(me.status, 200, node.url);
    assert.equal(me.json.email, 'ada@example.com');
  }
  const forged = `${login.json.access_token.slice(0, -4)}AAAA`;
  assert.equal((await call(replica.url, '/api/v2/auth/userdetails', { method: 'GET', key: KEYS.dev, headers: { authorization: `Bearer ${forged}` } })).status, 401);

  // Disabling Ada on the control plane (there is no API for it: the store, as the seed does)
  // ends her token on the replica with the next snapshot.
  const users = cp.app.services.store.users;
  await users.update((await users.findByEmail('ada@example.com'))!.id, { disabled: true });
  await waitFor('the disable on the replica', async () => {
    const me = await call(replica.url, '/api/v2/auth/userdetails', { method: 'GET', key: KEYS.dev, headers: bearer });
    return me.status === 401 ? true : undefined;
  });
});

/** A concrete path for a route pattern: parameters get a value no route will find. */
const concrete = (path: string) => path.replace(/:[a-z_]+/g, '1').replace(/\*[a-z_]+/g, 'x');

async function everyManagementRoute(node: Node, key: string, headers: Record<string, string> = {}): Promise<Map<string, number>> {
  const statuses = new Map<string, number>();
  for (const route of apiRoutes) {
    if (route.permission?.startsWith('sync.') === true) continue;
    const res = await call(node.url, concrete(route.path), {
      method: route.method,
      key,
      headers,
      body: route.method === 'GET' || route.method === 'DELETE' ? undefined : ADA,
    });
    statuses.set(`${route.method} ${route.path}`, res.status);
  }
  return statuses;
}

test('the replicas\' key (sync.* only) cannot log in or reach any management operation, on the control plane or a replica', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r.db'), cp.url, 'r');
  await waitReady(replica);
  const token = (await call(cp.url, LOGIN, { body: ADA })).json.access_token as string;

  for (const node of [cp, replica]) {
    const variants: Array<Record<string, string>> = [{}, { authorization: `Bearer ${token}` }];
    for (const headers of variants) {
      const statuses = await everyManagementRoute(node, FLEET_KEY, headers);
      assert.ok(statuses.size >= 20, 'every management route was tried');
      for (const [route, status] of statuses) assert.equal(status, 403, `${node === cp ? 'control plane' : 'replica'}: ${route}${'authorization' in headers ? ' with a bearer token' : ''}`);
    }
    const login = await call(node.url, LOGIN, { body: ADA, key: FLEET_KEY });
    assert.deepEqual([login.status, login.json], [403, { message: 'This action is unauthorized.' }]);
    // Nor the data plane: it holds no data permission.
    assert.equal((await call(node.url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"4111"}}', key: FLEET_KEY })).status, 403);
  }
  // What it is for still works.
  assert.equal((await get(cp, SNAPSHOT, FLEET_KEY)).status, 200);
  assert.equal((await call(cp.url, LOGS, { body: json({ replica: 'r9', instance: 'cd'.repeat(16), api: [], usage: [] }), key: FLEET_KEY })).status, 200);
  // The owner's key, for comparison, reaches the same routes (it is the key, not the user, that is refused).
  const owner = await everyManagementRoute(cp, KEYS.owner);
  assert.equal([...owner.values()].filter((status) => status === 403).length, 0, 'the owner key is not refused');
});
