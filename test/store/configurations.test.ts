import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { openStore, type Store } from '../../src/store/db.ts';
import { isUniqueViolation } from '../../src/store/sql.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

function setup(t: TestContext): Store {
  const store = openStore(':memory:');
  t.after(() => store.close());
  return store;
}

function encryption(store: Store, name: string, proxySlug: string) {
  return store.configurations.create({
    name,
    type: 'encryption',
    proxySlug,
    keyringId: randomBytes(16),
    firstWrappedKey: randomBytes(60),
    fields: ['ssn', 'card.number'],
    destinations: ['https://api.vendor.com/v1/'],
  });
}

test('an encryption configuration is created with key version 1 in the same transaction', (t) => {
  const store = setup(t);
  const id = randomUUID();
  const keyringId = randomBytes(16);
  const wrapped = randomBytes(60);
  const created = store.configurations.create({
    id,
    name: 'payments',
    type: 'encryption',
    proxySlug: 'payments',
    keyringId,
    firstWrappedKey: wrapped,
    deterministic: true,
    fields: ['card.number'],
    destinations: ['http://127.0.0.1:9999/'],
    extra: { note: 'x' },
    source: 'seed',
  });
  assert.equal(created.id, id);
  assert.equal(created.type, 'encryption');
  assert.ok(created.keyringId?.equals(keyringId));
  assert.equal(created.deterministic, true);
  assert.equal(created.minDecryptionVersion, 1);
  assert.equal(created.keyVersion, 1);
  assert.deepEqual(created.fields, ['card.number']);
  assert.deepEqual(created.destinations, ['http://127.0.0.1:9999/']);
  assert.deepEqual(created.extra, { note: 'x' });
  assert.equal(created.source, 'seed');

  const keys = store.configurations.keys(id);
  assert.equal(keys.length, 1);
  assert.equal(keys[0]?.version, 1);
  assert.ok(Buffer.isBuffer(keys[0]?.wrapped));
  assert.ok(keys[0]?.wrapped.equals(wrapped));
  assert.equal(keys[0]?.destroyedAt, null);
});

test('a provider configuration has no keyring; a mismatch is refused', (t) => {
  const store = setup(t);
  const provider = store.configurations.create({ name: 'google', type: 'provider', provider: 'google', extra: { groups: [] } });
  assert.match(provider.id, /^[0-9a-f-]{36}$/);
  assert.equal(provider.keyringId, null);
  assert.equal(provider.keyVersion, null);
  assert.equal(provider.proxySlug, null);
  assert.deepEqual(store.configurations.keys(provider.id), []);

  assert.throws(() => store.configurations.create({ name: 'bad', type: 'encryption' }), TypeError);
  assert.throws(() => store.configurations.create({ name: 'bad', type: 'provider', keyringId: randomBytes(16) }), TypeError);
  assert.throws(
    () => store.configurations.create({ name: 'short', type: 'encryption', keyringId: randomBytes(8), firstWrappedKey: randomBytes(60) }),
    /CHECK/,
  );
  assert.equal(store.configurations.findByName('short'), undefined);
});

test('find by id, name and slug; list; unique name and slug', (t) => {
  const store = setup(t);
  const a = encryption(store, 'a', 'slug-a');
  const b = encryption(store, 'b', 'slug-b');
  assert.deepEqual(store.configurations.findById(a.id), a);
  assert.deepEqual(store.configurations.findByName('b'), b);
  assert.deepEqual(store.configurations.findBySlug('slug-a'), a);
  assert.equal(store.configurations.findBySlug('nope'), undefined);
  assert.deepEqual(
    store.configurations.list().map((c) => c.name),
    ['a', 'b'],
  );
  assert.throws(() => encryption(store, 'a', 'other'), (error) => isUniqueViolation(error));
  assert.throws(() => encryption(store, 'c', 'slug-a'), (error) => isUniqueViolation(error));
});

test('update changes the given values and keeps the keyring', (t) => {
  const store = setup(t);
  const a = encryption(store, 'a', 'slug-a');
  const updated = store.configurations.update(a.id, {
    name: 'a2',
    proxySlug: 'slug-a2',
    fields: ['x'],
    destinations: [],
    minDecryptionVersion: 1,
    extra: { groups: [{ id: 'g', members: ['m@example.com'] }] },
  });
  assert.ok(updated);
  assert.equal(updated.name, 'a2');
  assert.equal(updated.proxySlug, 'slug-a2');
  assert.deepEqual(updated.fields, ['x']);
  assert.deepEqual(updated.destinations, []);
  assert.deepEqual(updated.extra, { groups: [{ id: 'g', members: ['m@example.com'] }] });
  assert.ok(updated.keyringId?.equals(a.keyringId ?? Buffer.alloc(0)));
  assert.equal(updated.deterministic, a.deterministic);
  assert.equal(store.configurations.update(randomUUID(), { name: 'x' }), undefined);
});

test('addKey adds versions; keyVersion follows; delete cascades to keys', (t) => {
  const store = setup(t);
  const a = encryption(store, 'a', 'slug-a');
  const v2 = randomBytes(60);
  store.configurations.addKey(a.id, 2, v2);
  assert.equal(store.configurations.findById(a.id)?.keyVersion, 2);
  assert.deepEqual(
    store.configurations.keys(a.id).map((k) => k.version),
    [1, 2],
  );
  assert.ok(store.configurations.keys(a.id)[1]?.wrapped.equals(v2));
  assert.throws(() => store.configurations.addKey(a.id, 2, v2), (error) => isUniqueViolation(error));
  assert.throws(() => store.configurations.addKey(randomUUID(), 1, v2), /FOREIGN KEY/);

  assert.equal(store.configurations.delete(a.id), true);
  assert.equal(store.configurations.delete(a.id), false);
  assert.equal(store.configurations.findById(a.id), undefined);
  assert.deepEqual(store.configurations.keys(a.id), []);
});

test('a rotation records when the older versions stopped being current; destroyKey refuses one superseded after its bound', (t) => {
  const store = setup(t);
  const a = encryption(store, 'a', 'slug-a');
  const { configurations } = store;
  assert.equal(configurations.keys(a.id)[0]?.supersededAt, null, 'the current version is not superseded');
  configurations.addKey(a.id, 2, randomBytes(60));
  const [v1, v2] = configurations.keys(a.id);
  assert.equal(v1?.supersededAt, v2?.createdAt, 'version 1 stopped being current when version 2 was added');
  assert.equal(v2?.supersededAt, null);
  configurations.addKey(a.id, 3, randomBytes(60));
  assert.equal(configurations.keys(a.id)[0]?.supersededAt, v1?.supersededAt, 'a later rotation does not move an earlier supersession');
  assert.equal(configurations.keys(a.id)[1]?.supersededAt, configurations.keys(a.id)[2]?.createdAt);

  const supersededAt = v1!.supersededAt!;
  // The bound is exclusive: superseded at or after it is too recent.
  assert.equal(configurations.destroyKey(a.id, 1, supersededAt), 'too-recent');
  assert.equal(configurations.destroyKey(a.id, 1, '2000-01-01T00:00:00.000Z'), 'too-recent');
  assert.equal(configurations.keys(a.id)[0]?.destroyedAt, null, 'a refusal changes nothing');
  assert.equal(configurations.destroyKey(a.id, 3, '2999-01-01T00:00:00.000Z'), 'current', 'the current version is refused first');
  assert.equal(configurations.destroyKey(a.id, 1, new Date(Date.parse(supersededAt) + 1).toISOString()), 'destroyed');
  // A version superseded at an unknown time (a row written without it) counts as too recent.
  sqliteConnection(store).prepare('UPDATE data_keys SET superseded_at = NULL WHERE configuration_id = ? AND version = 2').run(a.id);
  assert.equal(configurations.destroyKey(a.id, 2, '2999-01-01T00:00:00.000Z'), 'too-recent');
  assert.equal(configurations.destroyKey(a.id, 2, null), 'destroyed', 'without a bound (forced) it goes');
});

test('keyAlive reads the store itself: false once the version is destroyed or the configuration deleted', (t) => {
  const store = setup(t);
  const a = encryption(store, 'a', 'slug-a');
  store.configurations.addKey(a.id, 2, randomBytes(60));
  assert.equal(store.configurations.keyAlive(a.id, 1), true);
  assert.equal(store.configurations.keyAlive(a.id, 3), false, 'a version that never existed');
  assert.equal(store.configurations.destroyKey(a.id, 1), 'destroyed');
  assert.equal(store.configurations.keyAlive(a.id, 1), false);
  assert.equal(store.configurations.keyAlive(a.id, 2), true);
  store.configurations.delete(a.id);
  assert.equal(store.configurations.keyAlive(a.id, 2), false);
});
