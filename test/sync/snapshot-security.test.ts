/**
 * What a snapshot may carry and who may make one (DESIGN §13 "Replication secrets",
 * "Authentic snapshots"): a key's configuration scope, no password hashes, a MAC under a
 * key derived from the master key, versions bounded by the replica's clock, and a refused
 * snapshot that leaves nothing behind to stop the next good one.
 */
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { MasterKey } from '../../src/crypto/master-key.ts';
import { openStore } from '../../src/store/db.ts';
import { SnapshotMac } from '../../src/sync/snapshot-mac.ts';
import { SnapshotPublisher, VERSION_LEAD_SECONDS } from '../../src/sync/snapshot-publisher.ts';
import { canonicalJson, MAX_VERSION_LEAD_SECONDS, snapshotDigest } from '../../src/sync/snapshot.ts';
import { call, KEYS } from '../support/app.ts';
import {
  FLEET_KEY,
  gauge,
  get,
  json,
  MAC,
  onClose,
  ready,
  refused,
  SCOPED_FLEET_KEY,
  SNAPSHOT,
  startControlPlane,
  startNode,
  startReplica,
  tempDir,
  waitFor,
  waitReady,
  type Node,
} from './nodes.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const ENC = (slug: string) => `/api/v3/encryption/${slug}/encrypt`;
const DEC = '/api/v3/encryption/payments/decrypt';

interface Wire {
  version: number;
  digest: string;
  mac: string;
  sections: Record<string, string>;
  state: Record<string, Array<Record<string, unknown>>>;
}

/** The body without its `mac`: what the MAC covers, in canonical form. */
function unsigned(snapshot: Wire): Omit<Wire, 'mac'> {
  const { mac: _, ...rest } = snapshot;
  return rest;
}

const byName = (rows: Array<Record<string, unknown>>, name: string) => rows.find((r) => r['name'] === name);

/** The digest a control plane would give `snapshot` (its sections as they are). */
function digestOf(snapshot: Wire): string {
  const s = snapshot.sections;
  return snapshotDigest(snapshot.version, { roles: s['roles']!, users: s['users']!, configurations: s['configurations']!, classifications: s['classifications']!, apiKeys: s['api_keys']! });
}

test('a key limited to configurations receives only those, their keys, and nothing that names another', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const whole = (await get(cp, SNAPSHOT, FLEET_KEY)).json as Wire;
  const ids = Object.fromEntries(whole.state['configurations']!.map((c) => [c['name'], c['id']])) as Record<string, string>;
  assert.deepEqual(Object.keys(ids).sort(), ['lookup', 'other', 'payments', 'workspace'], 'an unlimited key sees every configuration');

  // The scoped fleet key: payments and the workspace groups.
  const scoped = (await get(cp, SNAPSHOT, SCOPED_FLEET_KEY)).json as Wire;
  assert.deepEqual(scoped.state['configurations']!.map((c) => c['name']).sort(), ['payments', 'workspace']);
  assert.equal(scoped.version, whole.version, 'one state, one version');
  assert.notEqual(scoped.digest, whole.digest);
  assert.equal(scoped.mac, MAC.sign(canonicalJson(unsigned(scoped))), 'signed like any snapshot');
  // The seeded `scoped` key is limited to `other`: it can reach nothing here, so it is not sent.
  assert.equal(byName(scoped.state['api_keys']!, 'scoped'), undefined);
  assert.ok(byName(scoped.state['api_keys']!, 'owner'), 'unlimited keys are sent (they reach what the replica holds)');
  assert.deepEqual(byName(scoped.state['api_keys']!, 'scoped-fleet')!['configurations'], [ids['payments'], ids['workspace']]);
  assert.equal(JSON.stringify(scoped).includes(ids['other']!), false, 'no id of a configuration outside the scope');
  assert.equal(JSON.stringify(scoped).includes(ids['lookup']!), false);
  const ward = byName(scoped.state['classifications']!, 'Ward')!;
  assert.deepEqual((ward['providers'] as Array<{ configuration_id: string }>).map((p) => p.configuration_id), [ids['workspace']]);

  // A key limited to payments alone: Ward's members come through workspace, outside it.
  const created = await call(cp.url, '/api/v3/api-keys', {
    body: json({ name: 'payments-fleet', permissions: ['sync.read', 'sync.write'], configurations: [ids['payments']] }),
  });
  assert.equal(created.status, 201);
  const narrow = (await get(cp, SNAPSHOT, created.json.key)).json as Wire;
  assert.deepEqual(narrow.state['configurations']!.map((c) => c['name']), ['payments']);
  assert.deepEqual(byName(narrow.state['classifications']!, 'Ward')!['providers'], [], 'group members through another configuration are dropped');
  assert.equal(narrow.state['classifications']!.length, whole.state['classifications']!.length, 'every classification is sent (tokens name them)');

  // A replica on that key: payments works, the rest does not exist there, Ward admits nobody.
  const replica = await startReplica(t, join(dir, 'r.db'), cp.url, 'r', { key: created.json.key });
  await waitReady(replica);
  const doc = '{"card":{"number":"4111 1111 1111 1111"}}';
  const token = await call(cp.url, ENC('payments'), { body: doc });
  assert.equal((await call(replica.url, DEC, { body: token.text })).text, doc);
  assert.equal((await call(cp.url, ENC('other-config'), { body: '{"a":"b"}', headers: { 'x-svc-fields': 'a' } })).status, 200);
  assert.equal((await call(replica.url, ENC('other-config'), { body: '{"a":"b"}', headers: { 'x-svc-fields': 'a' } })).status, 404, 'no configuration outside the scope');
  const store = replica.app.services.store;
  assert.deepEqual((await store.configurations.list()).map((c) => c.name), ['payments']);
  assert.deepEqual((await store.classifications.members((await store.classifications.findBySlug('ward'))!.id)).providers, []);
  assert.equal(await store.apiKeys.findByName('scoped'), undefined);
});

test('snapshots carry no password hashes, and a replica keeps none (not even from a bootstrap seed)', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const snapshot = await get(cp, SNAPSHOT, FLEET_KEY);
  assert.ok((await cp.app.services.store.users.findByEmail('ada@example.com'))?.passwordHash?.startsWith('scrypt'), 'the control plane holds one');
  for (const user of snapshot.json.state.users) assert.deepEqual(Object.keys(user).filter((k) => k.includes('password')), [], user.email);
  assert.equal(snapshot.text.includes('scrypt'), false);

  // A replica bootstrapped from a seed with a password: the seed applies before its first snapshot.
  const seeded = await startNode(t, {
    storePath: join(dir, 'r2.db'),
    yaml: `
seed:
  users: [{ name: Local, email: local@example.com, password: "a local password", roles: [owner] }]
state:
  source: control-plane
  control_plane: { url: "${cp.url}", api_key: "${FLEET_KEY}", poll_interval: 200ms, ship_interval: 100ms, replica_name: r2 }
`,
  });
  await waitReady(seeded);
  const hashes = (node: Node) => (sqliteConnection(node.app.services.store).prepare('SELECT count(*) AS n FROM users WHERE password_hash IS NOT NULL').get() as { n: number }).n;
  assert.equal(hashes(seeded), 0, 'no password hash left on the replica');

  // A store that still holds a hash for a replicated user (as an older snapshot format put
  // there) loses it with the next apply, even one that finds the user unchanged.
  sqliteConnection(seeded.app.services.store).prepare("UPDATE users SET password_hash = 'scrypt$left-over' WHERE email = 'ada@example.com'").run();
  await seeded.close();
  const restarted = await startReplica(t, join(dir, 'r2.db'), cp.url, 'r2');
  assert.equal(await ready(restarted), true, 'ready from its persisted snapshot');
  assert.equal(hashes(restarted), 0);
});

/**
 * A man in the middle between a replica and its control plane: passes everything through,
 * except that once `forge` is set it answers the next snapshot poll with the forged body.
 */
async function middleman(t: import('node:test').TestContext, target: string): Promise<{ url: string; forge: (body: Buffer) => void; forgedServed: () => number }> {
  let forged: Buffer | null = null;
  let served = 0;
  const server: Server = createServer((req, res) => {
    if (forged !== null && req.method === 'GET' && req.url?.startsWith(SNAPSHOT) === true) {
      const body = forged;
      forged = null;
      served++;
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
      return;
    }
    const upstream = httpRequest(target + req.url, { method: req.method, headers: req.headers }, (answer: IncomingMessage) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onClose(t, () => new Promise<void>((resolve) => server.close(() => resolve())));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    forge: (body) => {
      forged = body;
    },
    forgedServed: () => served,
  };
}

test('a forged snapshot (version 2^53-1) from a man in the middle is refused, and the next real one, revoking a key, applies within 10 s', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const mitm = await middleman(t, cp.url);
  const replica = await startReplica(t, join(dir, 'r.db'), mitm.url, 'r', { pollMs: 500, captureLogs: true });
  await waitReady(replica);
  const applied = await gauge(replica);
  assert.equal((await get(replica, '/api/v3/classifications', KEYS.viewer)).status, 200);

  // The forgery: the real state, the highest version JSON can hold, a digest that matches
  // it (anyone can compute one) and a MAC made without the master key.
  const forged = (await get(cp, SNAPSHOT, FLEET_KEY)).json as Wire;
  forged.version = Number.MAX_SAFE_INTEGER;
  forged.digest = digestOf(forged);
  forged.mac = new SnapshotMac(new MasterKey(Buffer.alloc(32, 7))).sign(canonicalJson(unsigned(forged)));
  mitm.forge(Buffer.from(JSON.stringify(forged)));
  await waitFor('the forged snapshot to be served', () => (mitm.forgedServed() === 1 ? true : undefined));
  await waitFor('the forged snapshot to be refused', async () => ((await refused(replica, 'mac')) === 1 ? true : undefined));
  assert.equal(await gauge(replica), applied, 'the forged version was not taken');
  // Logged with its reason, and nothing of the body: not its MAC, not a key hash.
  const refusal = replica.logs().split('\n').find((line) => line.includes('rejected a control-plane snapshot'));
  assert.ok(refusal !== undefined && refusal.includes('"kind":"mac"'), refusal);
  assert.equal(replica.logs().includes(forged.mac), false);
  for (const key of forged.state['api_keys']!) assert.equal(replica.logs().includes(String(key['key_hash'])), false);
  assert.equal((await replica.app.services.store.replication.getSync('applied'))?.version, applied);

  // The control plane revokes a key; the replica, still behind the middleman, must follow.
  const viewer = (await cp.app.services.store.apiKeys.findByName('viewer'))!;
  const started = performance.now();
  assert.equal((await call(cp.url, `/api/v3/api-keys/${viewer.id}/revoke`, {})).status, 204);
  await waitFor('the revocation on the replica', async () => ((await get(replica, '/api/v3/classifications', KEYS.viewer)).status === 401 ? true : undefined), 10_000, 50);
  const elapsed = performance.now() - started;
  console.log(`after a refused forged snapshot, a revocation reached the replica (poll_interval 500 ms) in ${elapsed.toFixed(0)} ms`);
  assert.ok(elapsed < 10_000, `${elapsed.toFixed(0)} ms`);
  assert.ok((await gauge(replica)) > applied, 'a real version above the one held');
  assert.ok((await gauge(replica)) < Number.MAX_SAFE_INTEGER);
  assert.equal(await ready(replica), true);
});

test('a signed snapshot whose version is more than an hour ahead of the replica\'s clock is refused, and later real ones apply', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const mitm = await middleman(t, cp.url);
  const replica = await startReplica(t, join(dir, 'r.db'), mitm.url, 'r', { pollMs: 200 });
  await waitReady(replica);
  const applied = await gauge(replica);

  // Made with the master key (as a compromised holder could): only the bound stops it.
  const ahead = (await get(cp, SNAPSHOT, FLEET_KEY)).json as Wire;
  ahead.version = Math.floor(Date.now() / 1000) + MAX_VERSION_LEAD_SECONDS + 120;
  ahead.digest = digestOf(ahead);
  ahead.mac = MAC.sign(canonicalJson(unsigned(ahead)));
  mitm.forge(Buffer.from(JSON.stringify(ahead)));
  await waitFor('the snapshot from the future to be refused', async () => ((await refused(replica, 'version')) === 1 ? true : undefined));
  assert.equal(await gauge(replica), applied);

  const created = await call(cp.url, '/api/v3/classifications', { body: json({ name: 'After', bg_color: '#111111', fg_color: '#eeeeee' }) });
  await waitFor('the next real snapshot', async () => ((await get(replica, `/api/v3/classifications/${created.json.id}`)).status === 200 ? true : undefined));
  assert.equal(await refused(replica, 'mac'), 0);
});

test('the control plane keeps versions near its clock: bursts run at most the lead ahead, then one new version a second', async () => {
  const store = openStore(':memory:');
  try {
    let wall = 1_800_000_000_000;
    let monotonic = 0;
    const lead = 5;
    const publisher = new SnapshotPublisher(store, MAC, { versionLeadSeconds: lead, clock: { wallMs: () => wall, monotonicMs: () => monotonic } });
    const versions: number[] = [];
    const role = (await store.roles.list())[0]!;
    let n = 0;
    const change = () => store.users.create({ name: `U${++n}`, email: `u${n}@example.com`, roleIds: [role.id] });
    // A burst: 20 changes, each followed by a poll, within the same instant.
    for (let i = 0; i < 20; i++) {
      await change();
      versions.push((await publisher.current()).version);
    }
    const clock = Math.floor(wall / 1000);
    assert.equal(versions[0], clock, 'the first version is the clock');
    assert.ok(Math.max(...versions) <= clock + lead, `versions ${versions.join(',')} stay within ${lead} s of the clock`);
    const held = versions.at(-1)!;
    // The change waits for the pace, not for ever: a second later it is published.
    monotonic += 1000;
    wall += 1000;
    const next = await publisher.current();
    assert.equal(next.version, held + 1);
    assert.ok(JSON.parse(next.body.toString()).state.users.some((u: { name: string }) => u.name === `U${n}`), 'the last change is in it');

    // A control plane restored from a store whose counter ran far ahead (a clock that was
    // wrong): new versions come once a second, so the lead does not grow any further.
    const published = (await store.replication.getSync('published'))!;
    await store.replication.putSync('published', { ...published, version: clock + 10_000 });
    const restored = new SnapshotPublisher(store, MAC, { versionLeadSeconds: lead, clock: { wallMs: () => wall, monotonicMs: () => monotonic } });
    await change();
    const first = (await restored.current()).version;
    assert.equal(first, clock + 10_001, 'versions never go back');
    await change();
    assert.equal((await restored.current()).version, first, 'held for the pace');
    monotonic += 1000;
    wall += 1000;
    assert.equal((await restored.current()).version, first + 1);
  } finally {
    store.close();
  }

  // The default lead leaves room for clock skew under the replicas' bound.
  assert.ok(VERSION_LEAD_SECONDS <= MAX_VERSION_LEAD_SECONDS / 2);
});

