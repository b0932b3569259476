import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { constraintViolated } from '../../../src/store/sql.ts';
import { normalizeEmail } from '../../../src/store/identity-text.ts';
import type { StoreTarget } from './target.ts';

const colors = { bgColor: '#aa0000', fgColor: '#ffffff' };

export function identityContract(target: StoreTarget): void {
  test('regression: the ids of deleted users, classifications, configurations and API keys are never given again', async (t) => {
    const store = await target.open(t);
    const keep = await store.users.create({ name: 'Keep', email: 'keep@example.com', roleIds: [] });
    const gone = await store.users.create({ name: 'Gone', email: 'gone@example.com', roleIds: [] });
    await target.sql.run(store, 'DELETE FROM users WHERE id = ?', gone.id);
    const next = await store.users.create({ name: 'Next', email: 'next@example.com', roleIds: [] });
    assert.ok(next.id > gone.id, `a new user gets ${next.id}, not the deleted ${gone.id}`);

    const phi = await store.classifications.create({ name: 'PHI', ...colors, userIds: [keep.id] });
    assert.ok(await store.classifications.delete(phi.id));
    const other = await store.classifications.create({ name: 'PHI', ...colors, userIds: [keep.id] });
    assert.ok(other.id > phi.id, `a new classification gets ${other.id}, not the deleted ${phi.id}`);

    // Configurations and API keys are named by random UUIDs: a new one never takes an old one's.
    const provider = await store.configurations.create({ name: 'dir', type: 'provider', provider: 'google' });
    assert.ok(await store.configurations.delete(provider.id));
    assert.notEqual((await store.configurations.create({ name: 'dir', type: 'provider', provider: 'google' })).id, provider.id);
    const key = await store.apiKeys.create({ name: 'k', prefix: 'svc_abc', keyHash: randomBytes(32), userId: keep.id });
    await target.sql.run(store, 'DELETE FROM api_keys WHERE id = ?', key.id);
    assert.notEqual((await store.apiKeys.create({ name: 'k', prefix: 'svc_abc', keyHash: randomBytes(32), userId: keep.id })).id, key.id);
  });

  test('emails are stored and found normalised: NFKC and case folding', async (t) => {
    const store = await target.open(t);
    const kate = await store.users.create({ name: 'Kate', email: 'Kate@Example.com', roleIds: [] });
    assert.equal(kate.email, 'kate@example.com');
    for (const spelling of ['\u212Aate@example.com', 'ｋａｔｅ@example.com', 'KATE@EXAMPLE.COM', 'kate@ｅxample.com']) {
      assert.equal((await store.users.findByEmail(spelling))?.id, kate.id, spelling);
      await assert.rejects(async () => store.users.create({ name: 'Twin', email: spelling, roleIds: [] }), (e) => constraintViolated(e) === 'unique', spelling);
    }
    assert.equal(normalizeEmail('STRAẞE@example.com'), 'strasse@example.com');
    assert.equal(normalizeEmail('ſam@example.com'), 'sam@example.com');
    assert.equal(await store.users.findByEmail('kate@example.org'), undefined);
  });

  test('a user’s stamp moves forward with every change, roles included, even within a millisecond', async (t) => {
    const store = await target.open(t);
    const [owner, viewer] = [(await store.roles.findByName('owner'))!.id, (await store.roles.findByName('viewer'))!.id];
    const user = await store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [viewer] });
    const stamps = [user.updatedAt];
    const changes = [
      () => store.users.update(user.id, { passwordHash: 'h2' }),
      () => store.users.update(user.id, { disabled: true }),
      () => store.users.update(user.id, { disabled: false }),
      () => store.users.setRoles(user.id, [owner]),
      () => store.users.setRoles(user.id, [viewer]),
    ];
    for (const change of changes) {
      await change();
      stamps.push((await store.users.findById(user.id))!.updatedAt);
    }
    for (let i = 1; i < stamps.length; i++) assert.ok(stamps[i]! > stamps[i - 1]!, `change ${i}: ${stamps[i]} after ${stamps[i - 1]}`);
    // Setting the roles a user already has changes nothing.
    await store.users.setRoles(user.id, [viewer]);
    assert.equal((await store.users.findById(user.id))!.updatedAt, stamps.at(-1));
  });
}
