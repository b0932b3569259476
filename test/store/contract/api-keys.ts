import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import type { Store } from '../../../src/store/db.ts';
import { isUniqueViolation, constraintViolated } from '../../../src/store/sql.ts';
import type { StoreTarget } from './target.ts';

const sha256 = (key: string): Buffer => createHash('sha256').update(key).digest();
const newKey = (): string => `svc_${randomBytes(30).toString('base64url').replace(/[-_]/g, 'x').slice(0, 40)}`;

export function apiKeysContract(target: StoreTarget): void {
  async function setup(t: TestContext): Promise<{ store: Store; userId: number }> {
    const store = await target.open(t);
    const userId = (await store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] })).id;
    return { store, userId };
  }

  test('create stores the hash and scopes; findByHash and findById return it', async (t) => {
    const { store, userId } = await setup(t);
    const key = newKey();
    const created = await store.apiKeys.create({
      name: 'ci',
      prefix: key.slice(0, 12),
      keyHash: sha256(key),
      userId,
      permissions: ['data.encrypt'],
      configurations: ['c1'],
    });
    assert.match(created.id, /^[0-9a-f-]{36}$/);
    assert.equal(created.prefix, key.slice(0, 12));
    assert.equal(created.status, 'active');
    assert.equal(created.revokedAt, null);
    assert.equal(created.source, 'api');
    assert.deepEqual(created.permissions, ['data.encrypt']);
    assert.deepEqual(created.configurations, ['c1']);
    assert.ok(created.keyHash.equals(sha256(key)));

    assert.deepEqual(await store.apiKeys.findByHash(sha256(key)), created);
    assert.deepEqual(await store.apiKeys.findById(created.id), created);
    assert.deepEqual(await store.apiKeys.findByName('ci'), created);
    assert.equal(await store.apiKeys.findByHash(sha256(newKey())), undefined);
    assert.deepEqual(
      (await store.apiKeys.list()).map((k) => k.id),
      [created.id],
    );
  });

  test('hashes and names are unique, the owner must exist, the hash must be SHA-256 sized', async (t) => {
    const { store, userId } = await setup(t);
    const hash = sha256('k');
    await store.apiKeys.create({ name: 'one', prefix: 'p', keyHash: hash, userId });
    await assert.rejects(async () => store.apiKeys.create({ name: 'two', prefix: 'p', keyHash: hash, userId }), (e) => isUniqueViolation(e));
    await assert.rejects(async () => store.apiKeys.create({ name: 'one', prefix: 'p', keyHash: sha256('j'), userId }), (e) => isUniqueViolation(e));
    await assert.rejects(async () => store.apiKeys.create({ name: 'three', prefix: 'p', keyHash: sha256('x'), userId: 999 }), (e) => constraintViolated(e) === 'foreign-key');
    await assert.rejects(async () => store.apiKeys.create({ name: 'four', prefix: 'p', keyHash: Buffer.alloc(5), userId }), (e) => constraintViolated(e) === 'check');
  });

  test('revoke marks the key once; a second revoke keeps the first time', async (t) => {
    const { store, userId } = await setup(t);
    const key = await store.apiKeys.create({ name: 'ci', prefix: 'p', keyHash: sha256('k'), userId });
    const revoked = await store.apiKeys.revoke(key.id);
    assert.equal(revoked?.status, 'revoked');
    assert.ok(revoked?.revokedAt);
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal((await store.apiKeys.revoke(key.id))?.revokedAt, revoked.revokedAt);
    // Revoked keys are still found by hash: the caller answers 401.
    assert.equal((await store.apiKeys.findByHash(sha256('k')))?.status, 'revoked');
    assert.equal(await store.apiKeys.revoke('missing'), undefined);
  });

  test('replaceHash rotates: the old hash stops matching at once', async (t) => {
    const { store, userId } = await setup(t);
    const key = await store.apiKeys.create({ name: 'ci', prefix: 'svc_old00000', keyHash: sha256('old'), userId });
    const rotated = await store.apiKeys.replaceHash(key.id, 'svc_new00000', sha256('new'));
    assert.equal(rotated?.prefix, 'svc_new00000');
    assert.equal(await store.apiKeys.findByHash(sha256('old')), undefined);
    assert.equal((await store.apiKeys.findByHash(sha256('new')))?.id, key.id);
    assert.equal(await store.apiKeys.replaceHash('missing', 'p', sha256('z')), undefined);
  });

  test('update changes name, owner and scopes', async (t) => {
    const { store, userId } = await setup(t);
    const other = (await store.users.create({ name: 'Bob', email: 'bob@example.com', roleIds: [] })).id;
    const key = await store.apiKeys.create({ name: 'ci', prefix: 'p', keyHash: sha256('k'), userId });
    const updated = await store.apiKeys.update(key.id, { userId: other, permissions: ['logs.view'], configurations: ['x', 'y'] });
    assert.equal(updated?.userId, other);
    assert.equal(updated?.name, 'ci');
    assert.deepEqual(updated?.permissions, ['logs.view']);
    assert.deepEqual(updated?.configurations, ['x', 'y']);
    assert.ok(updated?.keyHash.equals(sha256('k')));
    assert.equal(await store.apiKeys.update('missing', { name: 'x' }), undefined);
  });
}
