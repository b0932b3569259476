import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import type { Store } from '../../../src/store/db.ts';
import { isUniqueViolation, constraintViolated } from '../../../src/store/sql.ts';
import type { StoreTarget } from './target.ts';

async function encryption(store: Store, name: string, proxySlug: string) {
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

export function configurationsContract(target: StoreTarget): void {
  const setup = (t: TestContext): Promise<Store> => target.open(t);

  test('an encryption configuration is created with key version 1 in the same transaction', async (t) => {
    const store = await setup(t);
    const id = randomUUID();
    const keyringId = randomBytes(16);
    const wrapped = randomBytes(60);
    const created = await store.configurations.create({
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

    const keys = await store.configurations.keys(id);
    assert.equal(keys.length, 1);
    assert.equal(keys[0]?.version, 1);
    assert.ok(Buffer.isBuffer(keys[0]?.wrapped));
    assert.ok(keys[0]?.wrapped.equals(wrapped));
    assert.equal(keys[0]?.destroyedAt, null);
  });

  test('a provider configuration has no keyring; a mismatch is refused', async (t) => {
    const store = await setup(t);
    const provider = await store.configurations.create({ name: 'google', type: 'provider', provider: 'google', extra: { groups: [] } });
    assert.match(provider.id, /^[0-9a-f-]{36}$/);
    assert.equal(provider.keyringId, null);
    assert.equal(provider.keyVersion, null);
    assert.equal(provider.proxySlug, null);
    assert.deepEqual(await store.configurations.keys(provider.id), []);

    await assert.rejects(async () => store.configurations.create({ name: 'bad', type: 'encryption' }), TypeError);
    await assert.rejects(async () => store.configurations.create({ name: 'bad', type: 'provider', keyringId: randomBytes(16) }), TypeError);
    await assert.rejects(
      async () => store.configurations.create({ name: 'short', type: 'encryption', keyringId: randomBytes(8), firstWrappedKey: randomBytes(60) }),
      (e) => constraintViolated(e) === 'check',
    );
    assert.equal(await store.configurations.findByName('short'), undefined);
  });

  test('find by id, name and slug; list; unique name and slug', async (t) => {
    const store = await setup(t);
    const a = await encryption(store, 'a', 'slug-a');
    const b = await encryption(store, 'b', 'slug-b');
    assert.deepEqual(await store.configurations.findById(a.id), a);
    assert.deepEqual(await store.configurations.findByName('b'), b);
    assert.deepEqual(await store.configurations.findBySlug('slug-a'), a);
    assert.equal(await store.configurations.findBySlug('nope'), undefined);
    assert.deepEqual(
      (await store.configurations.list()).map((c) => c.name),
      ['a', 'b'],
    );
    await assert.rejects(async () => encryption(store, 'a', 'other'), (error) => isUniqueViolation(error));
    await assert.rejects(async () => encryption(store, 'c', 'slug-a'), (error) => isUniqueViolation(error));
  });

  test('update changes the given values and keeps the keyring', async (t) => {
    const store = await setup(t);
    const a = await encryption(store, 'a', 'slug-a');
    const updated = await store.configurations.update(a.id, {
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
    assert.equal(await store.configurations.update(randomUUID(), { name: 'x' }), undefined);
  });

  test('addKey adds versions; keyVersion follows; delete cascades to keys', async (t) => {
    const store = await setup(t);
    const a = await encryption(store, 'a', 'slug-a');
    const v2 = randomBytes(60);
    await store.configurations.addKey(a.id, 2, v2);
    assert.equal((await store.configurations.findById(a.id))?.keyVersion, 2);
    assert.deepEqual(
      (await store.configurations.keys(a.id)).map((k) => k.version),
      [1, 2],
    );
    assert.ok((await store.configurations.keys(a.id))[1]?.wrapped.equals(v2));
    await assert.rejects(async () => store.configurations.addKey(a.id, 2, v2), (error) => isUniqueViolation(error));
    await assert.rejects(async () => store.configurations.addKey(randomUUID(), 1, v2), (e) => constraintViolated(e) === 'foreign-key');

    assert.equal(await store.configurations.delete(a.id), true);
    assert.equal(await store.configurations.delete(a.id), false);
    assert.equal(await store.configurations.findById(a.id), undefined);
    assert.deepEqual(await store.configurations.keys(a.id), []);
  });

  test('a rotation records when the older versions stopped being current; destroyKey refuses one superseded after its bound', async (t) => {
    const store = await setup(t);
    const a = await encryption(store, 'a', 'slug-a');
    const { configurations } = store;
    assert.equal((await configurations.keys(a.id))[0]?.supersededAt, null, 'the current version is not superseded');
    await configurations.addKey(a.id, 2, randomBytes(60));
    const [v1, v2] = await configurations.keys(a.id);
    assert.equal(v1?.supersededAt, v2?.createdAt, 'version 1 stopped being current when version 2 was added');
    assert.equal(v2?.supersededAt, null);
    await configurations.addKey(a.id, 3, randomBytes(60));
    assert.equal((await configurations.keys(a.id))[0]?.supersededAt, v1?.supersededAt, 'a later rotation does not move an earlier supersession');
    assert.equal((await configurations.keys(a.id))[1]?.supersededAt, (await configurations.keys(a.id))[2]?.createdAt);

    const supersededAt = v1!.supersededAt!;
    // The bound is exclusive: superseded at or after it is too recent.
    assert.equal(await configurations.destroyKey(a.id, 1, supersededAt), 'too-recent');
    assert.equal(await configurations.destroyKey(a.id, 1, '2000-01-01T00:00:00.000Z'), 'too-recent');
    assert.equal((await configurations.keys(a.id))[0]?.destroyedAt, null, 'a refusal changes nothing');
    assert.equal(await configurations.destroyKey(a.id, 3, '2999-01-01T00:00:00.000Z'), 'current', 'the current version is refused first');
    assert.equal(await configurations.destroyKey(a.id, 1, new Date(Date.parse(supersededAt) + 1).toISOString()), 'destroyed');
    // A version superseded at an unknown time (a row written without it) counts as too recent.
    await target.sql.run(store, 'UPDATE data_keys SET superseded_at = NULL WHERE configuration_id = ? AND version = 2', a.id);
    assert.equal(await configurations.destroyKey(a.id, 2, '2999-01-01T00:00:00.000Z'), 'too-recent');
    assert.equal(await configurations.destroyKey(a.id, 2, null), 'destroyed', 'without a bound (forced) it goes');
  });

  test('keyAlive reads the store itself: false once the version is destroyed or the configuration deleted', async (t) => {
    const store = await setup(t);
    const a = await encryption(store, 'a', 'slug-a');
    await store.configurations.addKey(a.id, 2, randomBytes(60));
    assert.equal(await store.configurations.keyAlive(a.id, 1), true);
    assert.equal(await store.configurations.keyAlive(a.id, 3), false, 'a version that never existed');
    assert.equal(await store.configurations.destroyKey(a.id, 1), 'destroyed');
    assert.equal(await store.configurations.keyAlive(a.id, 1), false);
    assert.equal(await store.configurations.keyAlive(a.id, 2), true);
    await store.configurations.delete(a.id);
    assert.equal(await store.configurations.keyAlive(a.id, 2), false);
  });
}
