/**
 * Reveal rules replicate (DESIGN §14): a replica applies the grants and defaults of the
 * control plane's snapshot and decides with them; a snapshot of a control plane of an
 * earlier build, which carries none, means none; one whose rules do not hold together is
 * refused, keeping the last good state.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { openStore } from '../../src/store/db.ts';
import { applySnapshot, canonicalJson, snapshotDigest, verifySnapshot } from '../../src/sync/snapshot.ts';
import { call, KEYS } from '../support/app.ts';
import { FLEET_KEY, get, json, MAC, SNAPSHOT, startControlPlane, startReplica, tempDir, waitFor, waitReady } from './nodes.ts';

const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';

test('a replica applies reveal grants and defaults, and decrypts by them', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1');
  await waitReady(replica);
  const store = cp.app.services.store;
  const pci = (await store.classifications.findBySlug('pci'))!;
  const developer = (await store.roles.findByName('developer'))!;
  const grace = (await store.users.findByEmail('grace@example.com'))!;
  const enc = await call(cp.url, ENC, { body: '{"card":"4111 1111 1111 1234"}', headers: { 'x-svc-fields': 'card', 'x-svc-classification': 'pci' } });
  assert.equal((await call(replica.url, DEC, { body: enc.text, key: KEYS.dev })).status, 403, 'before: developers are denied');

  const changed = await call(cp.url, `/api/v3/classifications/${pci.id}`, {
    method: 'PATCH',
    body: json({
      reveal: [
        { to: { roles: [developer.id] }, level: 'mask', mask: { keep_first: 0, keep_last: 4, char: '*' } },
        { to: { users: [grace.id] }, level: 'redact' },
      ],
      default: 'token',
    }),
  });
  assert.equal(changed.status, 200, changed.text);
  const shown = await waitFor('the grants on the replica', async () => {
    const res = await get(replica, `/api/v3/classifications/${pci.id}`);
    return res.json.reveal.length === 2 ? res.json : undefined;
  });
  assert.deepEqual(shown, changed.json, 'the replica shows the control plane\'s rules');

  const dev = await call(replica.url, DEC, { body: enc.text, key: KEYS.dev, headers: { 'x-svc-request-id': 'replica-reveal-1' } });
  assert.equal(dev.text, '{"card":"**** **** **** 1234"}');
  assert.equal(dev.headers.get('x-svc-reveal'), 'plain=0, mask=1, redact=0, token=0');
  // Grace: her role's mask beats her own redact.
  assert.equal((await call(replica.url, DEC, { body: enc.text, key: KEYS.grace })).text, '{"card":"**** **** **** 1234"}');
  assert.equal((await call(replica.url, DEC, { body: enc.text, key: KEYS.owner })).text, '{"card":"4111 1111 1111 1234"}', 'owners are PCI members');
  // The replica's usage entry reaches the control plane with its counts per level.
  const shipped = await waitFor('the shipped usage entry', async () => {
    const res = await get(cp, '/api/v3/logs/usage?request_id=replica-reveal-1');
    return res.json.data?.[0];
  });
  assert.deepEqual(shipped.reveal, { plain: 0, mask: 1, redact: 0, token: 0 });
  const snapshot = (await get(cp, SNAPSHOT, FLEET_KEY)).json;
  const row = snapshot.state.classifications.find((c: { id: number }) => c.id === pci.id);
  assert.deepEqual(row.reveal_default, 'token');
  assert.equal(row.reveal_default_mask, null);
  assert.deepEqual(row.reveal[0], { level: 'mask', mask: { char: '*', keep_first: 0, keep_last: 4 }, to: { groups: [], roles: [developer.id], users: [] } });
});

/** `body` with its section digests, digest and MAC made again, as a control plane would. */
function rebuilt(body: any): Buffer {
  const wire = { roles: 'roles', users: 'users', configurations: 'configurations', classifications: 'classifications', apiKeys: 'api_keys' } as const;
  const sections = {} as Record<keyof typeof wire, string>;
  for (const [name, wireName] of Object.entries(wire)) {
    const digest = createHash('sha256').update(canonicalJson(body.state[wireName])).digest('hex');
    sections[name as keyof typeof wire] = digest;
    body.sections[wireName] = digest;
  }
  body.digest = snapshotDigest(body.version, sections);
  const { mac: _, ...rest } = body;
  body.mac = MAC.sign(canonicalJson(rest));
  return Buffer.from(JSON.stringify(body));
}

test('a snapshot without reveal rules (an earlier control plane) means none; rules that do not hold together are refused', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const store = cp.app.services.store;
  const pci = (await store.classifications.findBySlug('pci'))!;
  await store.classifications.update(pci.id, { reveal: [{ to: { users: [], roles: [], groups: ['g1'] }, level: 'token', mask: null }], revealDefault: { level: 'redact', mask: null } });
  const good = (await get(cp, SNAPSHOT, FLEET_KEY)).json;

  const older = structuredClone(good);
  for (const c of older.state.classifications) {
    delete c.reveal;
    delete c.reveal_default;
    delete c.reveal_default_mask;
  }
  const replicaStore = openStore(join(dir, 'replica.db'));
  t.after(() => replicaStore.close());
  const body = rebuilt(older);
  await applySnapshot(replicaStore, verifySnapshot(body, MAC), gzipSync(body));
  const applied = (await replicaStore.classifications.findById(pci.id))!;
  assert.deepEqual(applied.reveal, []);
  assert.deepEqual(applied.revealDefault, { level: 'deny', mask: null });

  const withRules = Buffer.from(JSON.stringify(good));
  await applySnapshot(replicaStore, verifySnapshot(withRules, MAC, {}), gzipSync(withRules), { force: true });
  assert.deepEqual((await replicaStore.classifications.findById(pci.id))!.revealDefault, { level: 'redact', mask: null });

  const broken = (edit: (row: any) => void) => {
    const copy = structuredClone(good);
    edit(copy.state.classifications.find((c: { id: number }) => c.id === pci.id));
    return rebuilt(copy);
  };
  for (const [what, edit] of [
    ['a mask grant without a mask', (c: any) => (c.reveal = [{ level: 'mask', mask: null, to: { groups: ['g'], roles: [], users: [] } }])],
    ['a token grant with a mask', (c: any) => (c.reveal = [{ level: 'token', mask: 'last4', to: { groups: ['g'], roles: [], users: [] } }])],
    ['an unknown level', (c: any) => (c.reveal = [{ level: 'peek', mask: null, to: { groups: ['g'], roles: [], users: [] } }])],
    ['a mask out of range', (c: any) => (c.reveal = [{ level: 'mask', mask: { char: '*', keep_first: 99, keep_last: 0 }, to: { groups: [], roles: [1], users: [] } }])],
    ['a plain default', (c: any) => (c.reveal_default = 'plain')],
    ['a mask default without its mask', (c: any) => (c.reveal_default = 'mask')],
  ] as const) {
    assert.throws(() => verifySnapshot(broken(edit), MAC), /unexpected shape/, what);
  }
});
