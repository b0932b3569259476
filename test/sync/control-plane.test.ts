/**
 * Replication with a real control plane and real replicas, in-process (createApp on port 0)
 * with their own SQLite files and one shared master key: snapshot serving, propagation,
 * outages and restarts, corrupted snapshots, and log shipping.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { gunzipSync, gzipSync } from 'node:zlib';
import { openStore } from '../../src/store/db.ts';
import { Backoff } from '../../src/sync/backoff.ts';
import { FOREIGN_RECHECK_MS } from '../../src/sync/snapshot-publisher.ts';
import { canonicalJson, snapshotDigest, verifySnapshot } from '../../src/sync/snapshot.ts';
import { call, KEYS } from '../support/app.ts';
import {
  counter,
  FLEET_KEY,
  refused,
  gauge,
  get,
  json,
  LOGS,
  MAC,
  ready,
  SNAPSHOT,
  startControlPlane,
  startReplica,
  tempDir,
  waitFor,
  waitReady,
  type Node,
} from './nodes.ts';

const POLL_MS = 200;
const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

// ---------------------------------------------------------------------------------------

test('the snapshot endpoint: sync.read only, ETag and If-None-Match, gzip, versions that move forward', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));

  assert.equal((await get(cp, SNAPSHOT, KEYS.dev)).status, 403, 'developers do not hold sync.read');
  const first = await get(cp, SNAPSHOT, FLEET_KEY);
  assert.equal(first.status, 200);
  const etag = first.headers.get('etag');
  assert.equal(etag, `"${first.json.digest}"`);
  assert.equal(first.json.format, 2);
  assert.ok(first.json.version >= 1);
  assert.deepEqual(Object.keys(first.json), ['digest', 'format', 'mac', 'sections', 'state', 'version'], 'the body is canonical: keys sorted');
  assert.deepEqual(Object.keys(first.json.state), ['api_keys', 'classifications', 'configurations', 'roles', 'users']);
  assert.equal(first.json.state.classifications.length, 4);
  const payments = first.json.state.configurations.find((c: { name: string }) => c.name === 'payments');
  assert.equal(payments.keys.length, 1);
  assert.equal(Buffer.from(payments.keys[0].wrapped, 'base64').length > 32, true, 'the data key travels wrapped, never raw');
  const owner = first.json.state.roles.find((r: { name: string }) => r.name === 'owner');
  assert.ok(owner.permissions.includes('sync.read') && owner.permissions.includes('sync.write'));
  assert.ok(!first.text.includes(KEYS.owner), 'API keys travel as hashes only');

  const again = await call(cp.url, SNAPSHOT, { method: 'GET', key: FLEET_KEY, headers: { 'if-none-match': etag! } });
  assert.equal(again.status, 304);
  assert.equal(again.text, '');

  const gz = await fetch(cp.url + SNAPSHOT, { headers: { 'x-svc-authorization': FLEET_KEY, 'accept-encoding': 'gzip' } });
  assert.equal(gz.headers.get('content-encoding'), 'gzip');
  // fetch decodes gzip itself: the body must be the same document.
  assert.equal(await gz.text(), first.text);
  const identity = await call(cp.url, SNAPSHOT, { method: 'GET', key: FLEET_KEY, headers: { 'accept-encoding': 'gzip;q=0, identity' } });
  assert.equal(identity.headers.get('content-encoding'), null);

  const created = await call(cp.url, '/api/v3/classifications', { body: json({ name: 'New', bg_color: '#111111', fg_color: '#eeeeee' }) });
  assert.equal(created.status, 201);
  const after = await get(cp, SNAPSHOT, FLEET_KEY);
  assert.ok(after.json.version > first.json.version);
  assert.notEqual(after.headers.get('etag'), etag);
  assert.equal((await call(cp.url, SNAPSHOT, { method: 'GET', key: FLEET_KEY, headers: { 'if-none-match': etag! } })).status, 200, 'an old ETag no longer matches');

  // The version of an unchanged state survives a restart of the control plane.
  await cp.close();
  const restarted = await startControlPlane(t, join(dir, 'cp.db'));
  const same = await get(restarted, SNAPSHOT, FLEET_KEY);
  assert.equal(same.json.version, after.json.version);
  assert.equal(same.json.digest, after.json.digest);
});

test('replicas serve the control plane\'s state: same ids, shared keys, and writes refused', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const r1 = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1');
  const r2 = await startReplica(t, join(dir, 'r2.db'), cp.url, 'r2');
  await Promise.all([waitReady(r1), waitReady(r2)]);

  const onCp = await get(cp, '/api/v3/classifications?per_page=100&sort=id');
  for (const replica of [r1, r2]) {
    const list = await get(replica, '/api/v3/classifications?per_page=100&sort=id', KEYS.dev);
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.data, onCp.json.data, 'classifications, ids included, are the control plane\'s');
    assert.deepEqual((await get(replica, '/api/v3/configurations?per_page=100')).json.data, (await get(cp, '/api/v3/configurations?per_page=100')).json.data);
  }

  // A token made on the control plane, bound to classification PHI (open to ada, the owner key's user), decrypts on both replicas.
  const doc = '{"ssn":"123-45-6789"}';
  const enc = await call(cp.url, ENC, { body: doc, headers: { 'x-svc-fields': 'ssn', 'x-svc-classification': 'phi' } });
  assert.equal(enc.status, 200);
  for (const replica of [r1, r2]) {
    const dec = await call(replica.url, DEC, { body: enc.text });
    assert.equal(dec.status, 200);
    assert.equal(dec.text, doc);
    assert.equal((await call(replica.url, DEC, { body: enc.text, key: KEYS.dev })).status, 403, 'classification access holds on the replica');
  }
  // And the other way round.
  const encOnReplica = await call(r1.url, ENC, { body: doc, headers: { 'x-svc-fields': 'ssn' } });
  assert.equal((await call(cp.url, DEC, { body: encOnReplica.text })).text, doc);

  const write = await call(r1.url, '/api/v3/classifications', { body: json({ name: 'Local', bg_color: '#111111', fg_color: '#eeeeee' }) });
  assert.equal(write.status, 409);
  assert.deepEqual(write.json, { message: 'Managed by the control plane.' });
  assert.equal((await call(r1.url, '/api/v3/api-keys/x/revoke', {})).status, 409);

  const version = (await get(cp, SNAPSHOT, FLEET_KEY)).json.version;
  assert.equal(await gauge(r1), version, 'svc_state_version is the applied snapshot version');
  assert.equal((await r1.app.services.store.replication.getSync('applied'))?.version, version);
});

test('create, update and revoke on the control plane reach both replicas within one poll interval (20 changes measured)', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replicas = [await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1'), await startReplica(t, join(dir, 'r2.db'), cp.url, 'r2')];
  await Promise.all(replicas.map(waitReady));

  const delays: number[] = [];
  let classificationId = 0;
  let apiKey = { id: '', key: '' };
  for (let i = 0; i < 20; i++) {
    let seen: (replica: Node) => Promise<boolean>;
    const step = i % 4;
    const started = performance.now();
    if (step === 0) {
      const res = await call(cp.url, '/api/v3/classifications', { body: json({ name: `C${i}`, bg_color: '#111111', fg_color: '#eeeeee' }) });
      assert.equal(res.status, 201);
      classificationId = res.json.id;
      const id = classificationId;
      seen = async (r) => (await get(r, `/api/v3/classifications/${id}`)).status === 200;
    } else if (step === 1) {
      const name = `Renamed ${i}`;
      const res = await call(cp.url, `/api/v3/classifications/${classificationId}`, { method: 'PATCH', body: json({ name }) });
      assert.equal(res.status, 200);
      const id = classificationId;
      seen = async (r) => (await get(r, `/api/v3/classifications/${id}`)).json?.name === name;
    } else if (step === 2) {
      const res = await call(cp.url, '/api/v3/api-keys', { body: json({ name: `key ${i}` }) });
      assert.equal(res.status, 201);
      apiKey = { id: res.json.id, key: res.json.key };
      const key = apiKey.key;
      seen = async (r) => (await get(r, '/api/v3/classifications', key)).status === 200;
    } else {
      const res = await call(cp.url, `/api/v3/api-keys/${apiKey.id}/revoke`, {});
      assert.equal(res.status, 204);
      const key = apiKey.key;
      seen = async (r) => (await get(r, '/api/v3/classifications', key)).status === 401;
    }
    // The change committed before the answer came back: the next poll each replica begins
    // must carry it. Waiting on the poll counter (not on HTTP probes) times it to the ms.
    const arrivals = await Promise.all(
      replicas.map(async (r) => {
        const replica = r.app.replication!.replica;
        const next = replica.pollsStarted + 1;
        const elapsed = await waitFor(`poll ${next} of ${r.url}`, () => (replica.pollsFinished >= next ? performance.now() - started : undefined), 5_000, 1);
        assert.equal(await seen(r), true, `change ${i} (${['create', 'update', 'create key', 'revoke'][step]}) is served once the next poll is done`);
        return elapsed;
      }),
    );
    delays.push(Math.max(...arrivals));
  }
  const med = median(delays);
  const max = Math.max(...delays);
  console.log(`propagation to both replicas over ${delays.length} changes (poll_interval ${POLL_MS} ms): median ${med.toFixed(0)} ms, max ${max.toFixed(0)} ms`);
  // The exact check is the one above: the next poll carries each change. Polling never fell
  // behind through a backoff, which only a failed poll starts (the delays above are
  // printed, not asserted: on a loaded machine a poll's fetch and apply take a while).
  for (const replica of replicas) assert.equal(await counter(replica, 'reloadFailures'), 0, `${replica.url}: no poll failed, so none backed off`);
});

test('key rotation and destruction reach the replicas: new tokens decrypt there, shredded ones no longer do', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r.db'), cp.url, 'r');
  await waitReady(replica);
  const doc = '{"card":{"number":"4111 1111 1111 1111"}}';
  const v1 = await call(cp.url, ENC, { body: doc });
  assert.equal((await call(replica.url, DEC, { body: v1.text })).text, doc);
  const payments = (await get(cp, '/api/v3/configurations?per_page=100')).json.data.find((c: { name: string }) => c.name === 'payments');

  const rotated = await call(cp.url, `/api/v3/configurations/${payments.id}/rotate`, {});
  assert.equal(rotated.status, 200);
  const v2 = await call(cp.url, ENC, { body: doc });
  assert.match(JSON.parse(v2.text).card.number, /^svc:2:/);
  await waitFor('version 2 on the replica', async () => ((await call(replica.url, DEC, { body: v2.text })).status === 200 ? true : undefined));
  assert.match(JSON.parse((await call(replica.url, ENC, { body: doc })).text).card.number, /^svc:2:/, 'the replica encrypts with the new version');

  const destroyed = await call(cp.url, `/api/v3/configurations/${payments.id}/keys/1/destroy`, { body: json({ confirm: 'payments/v1', force: true }) });
  assert.equal(destroyed.status, 200);
  await waitFor('version 1 shredded on the replica', async () => ((await call(replica.url, DEC, { body: v1.text })).status === 422 ? true : undefined));
  const [key1] = await replica.app.services.store.configurations.keys(payments.id);
  assert.equal(key1?.wrapped.length, 0, 'the replica holds no wrapped key for a destroyed version');
  assert.notEqual(key1?.destroyedAt, null);
  assert.equal((await call(replica.url, DEC, { body: v2.text })).text, doc);
});

test('values that move between rows in one snapshot (swapped slugs and emails) apply cleanly', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r.db'), cp.url, 'r');
  await waitReady(replica);
  const store = cp.app.services.store;
  const phi = (await store.classifications.findBySlug('phi'))!;
  const pci = (await store.classifications.findBySlug('pci'))!;
  const dev = (await store.users.findByEmail('dev@example.com'))!;
  const viewer = (await store.users.findByEmail('viewer@example.com'))!;
  await store.transaction(async (tx) => {
    await tx.classifications.update(phi.id, { slug: 'swap' });
    await tx.classifications.update(pci.id, { slug: 'phi' });
    await tx.classifications.update(phi.id, { slug: 'pci' });
    await tx.users.update(dev.id, { email: 'swap@example.com' });
    await tx.users.update(viewer.id, { email: 'dev@example.com' });
    await tx.users.update(dev.id, { email: 'viewer@example.com' });
  });
  // One transaction on the control plane, so both swaps arrive in the same snapshot.
  const replicated = replica.app.services.store;
  await waitFor('the swap on the replica', async () => ((await replicated.classifications.findBySlug('phi'))?.id === pci.id ? true : undefined));
  assert.equal(await counter(replica, 'reloadFailures'), 0);
  assert.equal((await replicated.classifications.findBySlug('phi'))?.id, pci.id);
  assert.equal((await replicated.classifications.findBySlug('pci'))?.id, phi.id);
  assert.equal((await replicated.users.findByEmail('dev@example.com'))?.id, viewer.id);
  assert.equal((await get(replica, '/api/v3/classifications', KEYS.dev)).status, 200, 'keys still belong to their users');
});

test('a change made by another process on the control plane\'s store (the CLI) reaches the replicas too', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r.db'), cp.url, 'r');
  await waitReady(replica);
  assert.equal((await get(replica, '/api/v3/classifications', KEYS.viewer)).status, 200);
  // A second connection to the control plane's file, as `svc-sidecar keys ...` or `init` opens.
  const other = openStore(cp.storePath);
  t.after(() => other.close());
  const viewerKey = (await other.apiKeys.findByName('viewer'))!;
  const started = performance.now();
  await other.apiKeys.revoke(viewerKey.id);
  await waitFor('the revocation on the replica', async () => ((await get(replica, '/api/v3/classifications', KEYS.viewer)).status === 401 ? true : undefined), FOREIGN_RECHECK_MS + POLL_MS * 3 + 2_000);
  const elapsed = performance.now() - started;
  assert.ok(elapsed < FOREIGN_RECHECK_MS + POLL_MS * 3 + 2_000, `${elapsed.toFixed(0)} ms`);
});

test('control plane down: replicas keep serving, a restarted replica serves its persisted snapshot, recovery resumes polling', async (t) => {
  const dir = tempDir(t);
  const cpStore = join(dir, 'cp.db');
  const cp = await startControlPlane(t, cpStore);
  const cpPort = cp.port;
  const r1 = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1');
  const r2 = await startReplica(t, join(dir, 'r2.db'), cp.url, 'r2');
  await Promise.all([waitReady(r1), waitReady(r2)]);
  const doc = '{"card":{"number":"4111 1111 1111 1111"}}';
  const token = await call(cp.url, ENC, { body: doc });
  const before = await get(r1, '/api/v3/classifications?per_page=100');

  await cp.close();
  await waitFor('failed polls to be counted', async () => ((await counter(r1, 'reloadFailures')) >= 2 ? true : undefined));
  for (const replica of [r1, r2]) {
    assert.equal(await ready(replica), true, 'a replica with a state stays ready while the control plane is away');
    assert.equal((await call(replica.url, DEC, { body: token.text })).text, doc);
    assert.deepEqual((await get(replica, '/api/v3/classifications?per_page=100')).json.data, before.json.data);
  }
  // Traffic during the outage: its logs wait on the replica.
  const outageIds = Array.from({ length: 5 }, (_, i) => `outage-${i}-${randomBytes(4).toString('hex')}`);
  for (const id of outageIds) assert.equal((await call(r2.url, ENC, { body: doc, headers: { 'x-svc-request-id': id } })).status, 200);

  // A replica restarted while the control plane is down starts from its persisted snapshot.
  await r1.close();
  const r1b = await startReplica(t, r1.storePath, `http://127.0.0.1:${cpPort}`, 'r1');
  assert.equal(await ready(r1b), true, 'ready at once, from the persisted snapshot');
  assert.equal((await call(r1b.url, DEC, { body: token.text })).text, doc);
  assert.deepEqual((await get(r1b, '/api/v3/classifications?per_page=100')).json.data, before.json.data);
  assert.equal((await get(r1b, '/api/v3/classifications', KEYS.outsider)).status, 200, 'API keys came back with it');

  // The control plane returns on the same port and store; a change made there reaches both.
  const cp2 = await startControlPlane(t, cpStore, cpPort);
  const created = await call(cp2.url, '/api/v3/classifications', { body: json({ name: 'After outage', bg_color: '#111111', fg_color: '#eeeeee' }) });
  assert.equal(created.status, 201);
  // Backoff is capped at 10 intervals: polling resumes within that.
  for (const replica of [r1b, r2]) {
    await waitFor(`the change on ${replica.url}`, async () => ((await get(replica, `/api/v3/classifications/${created.json.id}`)).status === 200 ? true : undefined), POLL_MS * 10 + 3_000);
  }
  // And the logs kept during the outage arrive, once each.
  for (const id of outageIds) {
    const res = await waitFor(`log ${id} on the control plane`, async () => {
      const logs = await get(cp2, `/api/v3/logs/api?request_id=${id}`);
      return logs.json.total === 1 ? logs : undefined;
    });
    assert.equal(res.json.data[0].request_id, id);
  }
});

test('a truncated, tampered, older or corrupt-gzip snapshot is rejected and the last good state kept', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const good = await get(cp, SNAPSHOT);
  assert.equal(good.status, 200);
  const goodBody = Buffer.from(good.text);

  // A fake control plane whose answer the test chooses.
  let answer: { body: Buffer; headers?: Record<string, string> } = { body: goodBody };
  const fake: Server = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.body.length, ...answer.headers });
    res.end(answer.body);
  });
  await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => fake.close(() => resolve())));
  const fakeUrl = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;

  const replica = await startReplica(t, join(dir, 'r.db'), fakeUrl, 'r');
  await waitReady(replica);
  const version = good.json.version as number;
  assert.equal((await replica.app.services.store.replication.getSync('applied'))?.version, version);
  const classifications = (await get(replica, '/api/v3/classifications?per_page=100')).json.data;

  const tampered = JSON.parse(good.text);
  tampered.state.classifications[0].name = 'Tampered';
  const older = structuredClone(good.json);
  older.version = version - 1;
  older.digest = recomputeDigest(older);
  const bumped = JSON.parse(good.text);
  bumped.version = version + 1;
  bumped.state.api_keys[0].status = 'revoked';
  const gz = gzipSync(goodBody);
  const body = (value: unknown) => ({ body: Buffer.from(JSON.stringify(value)) });
  const cases: Array<[string, { body: Buffer; headers?: Record<string, string> }, string]> = [
    ['truncated', { body: goodBody.subarray(0, goodBody.length >> 1) }, 'invalid'],
    ['tampered', body(tampered), 'mac'],
    ['version bumped', body(bumped), 'mac'],
    ['version bumped and signed, without a new digest', body(resign(bumped)), 'digest'],
    ['older (signed, with its digest)', body(resign(older)), 'older'],
    ['truncated gzip', { body: gz.subarray(0, gz.length - 20), headers: { 'content-encoding': 'gzip' } }, 'invalid'],
    ['not JSON', { body: Buffer.from('<html>502 Bad Gateway</html>') }, 'invalid'],
  ];
  for (const [name, bad, reason] of cases) {
    const failures = await counter(replica, 'reloadFailures');
    const refusals = await refused(replica, reason);
    answer = bad;
    await waitFor(`the ${name} snapshot to be rejected`, async () => ((await counter(replica, 'reloadFailures')) > failures ? true : undefined));
    assert.ok((await refused(replica, reason)) > refusals, `${name}: counted as refused for ${reason}`);
    assert.equal((await replica.app.services.store.replication.getSync('applied'))?.version, version, `${name}: the applied version stays`);
    assert.deepEqual((await get(replica, '/api/v3/classifications?per_page=100')).json.data, classifications, `${name}: the state stays`);
    assert.equal(await ready(replica), true);
    assert.equal(await gauge(replica), version);
  }
  // The persisted copy is still the good one.
  const persisted = (await replica.app.services.store.replication.getSync('applied'))!;
  assert.equal(JSON.parse(gunzipSync(persisted.body!).toString()).digest, good.json.digest);

  // A good, newer snapshot is taken again.
  const created = await call(cp.url, '/api/v3/classifications', { body: json({ name: 'Fresh', bg_color: '#111111', fg_color: '#eeeeee' }) });
  const newer = await get(cp, SNAPSHOT, FLEET_KEY);
  answer = { body: Buffer.from(newer.text) };
  await waitFor('the newer snapshot', async () => ((await get(replica, `/api/v3/classifications/${created.json.id}`)).status === 200 ? true : undefined));
  assert.equal(await gauge(replica), newer.json.version);
});

/** The digest a correct control plane would put on `snapshot` with its sections (for the "older" case). */
function recomputeDigest(snapshot: { version: number; sections: Record<string, string> }): string {
  const s = snapshot.sections;
  return snapshotDigest(snapshot.version, { roles: s['roles']!, users: s['users']!, configurations: s['configurations']!, classifications: s['classifications']!, apiKeys: s['api_keys']! });
}

/**
 * `snapshot` with the MAC a holder of the master key would put on it: HMAC over the
 * canonical JSON of the body without `mac` (docs/replication.md, "The snapshot format").
 */
function resign<T extends { mac?: string }>(snapshot: T): T {
  const { mac: _, ...rest } = snapshot;
  return { ...snapshot, mac: MAC.sign(canonicalJson(rest)) };
}

test('verification accepts the same content laid out differently, and nothing else', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const good = await get(cp, SNAPSHOT, FLEET_KEY);
  assert.equal(resign(good.json).mac, good.json.mac, 'the MAC is over the canonical body without mac');
  const state = good.json.state as Record<string, unknown[]>;
  // The control plane writes canonical text: plain JSON.stringify is the canonical form.
  for (const [name, section] of Object.entries(state)) assert.equal(JSON.stringify(section), canonicalJson(section), name);
  assert.ok(JSON.stringify(state['configurations']).includes('"groups"'), 'provider groups (a JSON column) are covered');

  const reversed = (value: unknown): unknown =>
    Array.isArray(value) ? value.map(reversed) : value !== null && typeof value === 'object' ? Object.fromEntries(Object.entries(value).reverse().map(([k, v]) => [k, reversed(v)])) : value;
  const relaid = { ...good.json, state: reversed(good.json.state) };
  const verified = verifySnapshot(Buffer.from(JSON.stringify(relaid, null, 2)), MAC);
  assert.equal(verified.digest, good.json.digest);

  const verify = (value: unknown) => verifySnapshot(Buffer.from(JSON.stringify(value)), MAC);
  const edited = structuredClone(good.json);
  edited.state.users[0].name = 'Forged';
  assert.throws(() => verify(edited), /MAC does not verify/, 'an edit without the master key');
  assert.throws(() => verify(resign(edited)), /users section does not match its digest/, 'signed, but the digest still says otherwise');
  const extra = structuredClone(good.json);
  extra.state.api_keys.push({ ...extra.state.api_keys[0], id: 'injected' });
  assert.throws(() => verify(extra), /MAC does not verify/);
  assert.throws(() => verify(resign(extra)), /api_keys section does not match/);
  const renamed = structuredClone(good.json);
  renamed.sections.roles = 'f'.repeat(64);
  assert.throws(() => verify(resign(renamed)), /digest does not match the sections/);
  assert.throws(() => verify({ ...good.json, mac: 'f'.repeat(64) }), /MAC does not verify/);
  assert.throws(() => verifySnapshot(Buffer.from(good.text.slice(0, -1)), MAC), /not valid JSON/);
  assert.throws(() => verify(resign({ ...good.json, format: 1 })), /unexpected shape at format/);
  const { mac: _, ...unsigned } = good.json;
  assert.throws(() => verify(unsigned), /unexpected shape at mac/);

  // Keys JavaScript cannot keep in canonical order ("10" sorts before "9"; an object lists "9" first).
  const store = cp.app.services.store;
  const workspace = (await store.configurations.findByName('workspace'))!;
  await store.configurations.update(workspace.id, { extra: { ...workspace.extra, '10': 'ten', '9': 'nine' } });
  const odd = await get(cp, SNAPSHOT, FLEET_KEY);
  const configurations = odd.json.state.configurations;
  assert.equal(odd.json.sections.configurations, createHash('sha256').update(canonicalJson(configurations)).digest('hex'));
  assert.equal(verifySnapshot(Buffer.from(odd.text), MAC).digest, odd.json.digest);
});

test('logs from both replicas reach the control plane exactly once, retries included', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const r1 = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1');
  const r2 = await startReplica(t, join(dir, 'r2.db'), cp.url, 'r2');
  await Promise.all([waitReady(r1), waitReady(r2)]);

  const ids: string[] = [];
  for (const [name, replica] of [['r1', r1], ['r2', r2]] as const) {
    for (let i = 0; i < 15; i++) {
      const id = `${name}-${i}-${randomBytes(4).toString('hex')}`;
      ids.push(id);
      const res = await call(replica.url, ENC, { body: '{"card":{"number":"4111"}}', headers: { 'x-svc-request-id': id } });
      assert.equal(res.status, 200);
    }
  }
  const countOnCp = async (id: string) => {
    const api = await get(cp, `/api/v3/logs/api?request_id=${id}`);
    const usage = await get(cp, `/api/v3/logs/usage?request_id=${id}`);
    return { api: api.json.total as number, usage: usage.json.total as number };
  };
  for (const id of ids) {
    await waitFor(`${id} on the control plane`, async () => {
      const n = await countOnCp(id);
      return n.api === 1 && n.usage === 1 ? true : undefined;
    });
  }

  // A lost acknowledgement looks like this to the replica: it sends everything again.
  for (const replica of [r1, r2]) {
    const shippedLogs = replica.app.services.store.shippedLogs;
    await shippedLogs.putCursor('api', { lastId: 0, lastRequestId: '', idBase: 0 });
    await shippedLogs.putCursor('usage', { lastId: 0, lastRequestId: '', idBase: 0 });
  }
  await waitFor('both replicas to re-ship', async () => {
    const cursors = await Promise.all([r1, r2].map(async (r) => (await r.app.services.store.shippedLogs.getCursor('api')).lastId));
    return cursors.every((id) => id > 0) ? true : undefined;
  });
  for (const id of ids) assert.deepEqual(await countOnCp(id), { api: 1, usage: 1 }, `${id} is stored once`);

  // The same batch posted twice by hand: stored once, the retry counted as duplicates.
  const batch = {
    replica: 'manual',
    instance: 'ab'.repeat(16),
    api: [{ id: 1, request_id: 'manual-1', method: 'POST', path: '/proxy/x', status_code: 200, api_key_id: null, user_id: null, configuration_id: null, destination: null, duration_ms: 1.5, ip: '10.0.0.1', created_at: new Date().toISOString() }],
    usage: [],
  };
  assert.deepEqual((await call(cp.url, LOGS, { body: json(batch), key: FLEET_KEY })).json, { stored: 1, duplicates: 0 });
  assert.deepEqual((await call(cp.url, LOGS, { body: json(batch), key: FLEET_KEY })).json, { stored: 0, duplicates: 1 });
  assert.equal((await call(cp.url, LOGS, { body: json(batch), key: KEYS.dev })).status, 403, 'shipping needs sync.write');
  const invalid = await call(cp.url, LOGS, { body: json({ ...batch, api: [{ id: 'x' }] }), key: FLEET_KEY });
  assert.equal(invalid.status, 422);
  assert.ok(invalid.json.errors['api.0.id']);
  assert.equal((await call(r1.url, LOGS, { body: json(batch), key: FLEET_KEY })).status, 409, 'a replica collects no fleet logs');
});

test('backoff: about one interval after a success; doubling with jitter, capped at 10 intervals, after failures', () => {
  const low = new Backoff(1000, { random: () => 0 });
  const high = new Backoff(1000, { random: () => 0.999999 });
  assert.equal(low.succeeded(), 800);
  assert.equal(high.succeeded(), 1000, 'never later than one interval: a change arrives within it');
  const lows = Array.from({ length: 8 }, () => low.failed());
  const highs = Array.from({ length: 8 }, () => high.failed());
  assert.deepEqual(lows, [1000, 2000, 4000, 5000, 5000, 5000, 5000, 5000], 'half the ceiling at least');
  assert.deepEqual(highs, [2000, 4000, 8000, 10000, 10000, 10000, 10000, 10000], 'the ceiling doubles up to 10 intervals');
  assert.equal(low.failures, 8);
  low.succeeded();
  assert.equal(low.failures, 0);
  assert.equal(low.failed(), 1000, 'a success starts the doubling over');
});

test('control-plane URLs keep the base path prefix', async () => {
  const { controlPlaneUrl } = await import('../../src/sync/control-plane-urls.ts');
  assert.equal(controlPlaneUrl('https://cp.example/svc', '/api/v3/sync/snapshot'), 'https://cp.example/svc/api/v3/sync/snapshot');
  assert.equal(controlPlaneUrl('https://cp.example/svc/', '/api/v3/sync/logs'), 'https://cp.example/svc/api/v3/sync/logs');
  assert.equal(controlPlaneUrl('http://127.0.0.1:8080', '/api/v3/sync/logs'), 'http://127.0.0.1:8080/api/v3/sync/logs');
});
