import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { Store } from '../../../src/store/db.ts';
import { constraintViolated } from '../../../src/store/sql.ts';
import type { StoreTarget } from './target.ts';

export function usersContract(target: StoreTarget): void {
  async function setup(t: TestContext): Promise<{ store: Store; roleId: (name: string) => Promise<number> }> {
    const store = await target.open(t);
    const roleId = async (name: string): Promise<number> => {
      const role = await store.roles.findByName(name);
      assert.ok(role, name);
      return role.id;
    };
    return { store, roleId };
  }

  test('create returns the stored user with defaults', async (t) => {
    const { store, roleId } = await setup(t);
    const user = await store.users.create({ name: 'Ada', email: 'Ada@Example.com', passwordHash: 'h1', roleIds: [await roleId('viewer')], source: 'seed' });
    assert.equal(typeof user.id, 'number');
    assert.equal(user.name, 'Ada');
    assert.equal(user.email, 'ada@example.com', 'stored normalised');
    assert.equal(user.passwordHash, 'h1');
    assert.equal(user.disabled, false);
    assert.equal(user.twoFactorEnabled, false);
    assert.equal(user.source, 'seed');
    assert.match(user.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(user.updatedAt, user.createdAt);
    assert.deepEqual(await store.users.findById(user.id), user);

    const plain = await store.users.create({ name: 'Bob', email: 'bob@example.com', roleIds: [] });
    assert.equal(plain.passwordHash, null);
    assert.equal(plain.source, 'api');
  });

  test('emails are unique and looked up without regard to case', async (t) => {
    const { store } = await setup(t);
    const user = await store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
    assert.equal((await store.users.findByEmail('ADA@EXAMPLE.COM'))?.id, user.id);
    assert.equal(await store.users.findByEmail('nobody@example.com'), undefined);
    await assert.rejects(async () => store.users.create({ name: 'Other', email: 'Ada@example.COM', roleIds: [] }), (e) => constraintViolated(e) === 'unique');
  });

  test('update changes only the given fields and can clear the password', async (t) => {
    const { store } = await setup(t);
    const user = await store.users.create({ name: 'Ada', email: 'ada@example.com', passwordHash: 'h', roleIds: [] });
    const updated = await store.users.update(user.id, { name: 'Ada L.', disabled: true, twoFactorEnabled: true, email: undefined });
    assert.ok(updated);
    assert.equal(updated.name, 'Ada L.');
    assert.equal(updated.email, 'ada@example.com');
    assert.equal(updated.passwordHash, 'h');
    assert.equal(updated.disabled, true);
    assert.equal(updated.twoFactorEnabled, true);
    assert.ok(updated.updatedAt >= user.updatedAt);
    assert.equal((await store.users.update(user.id, { passwordHash: null }))?.passwordHash, null);
    assert.equal(await store.users.update(4242, { name: 'ghost' }), undefined);
  });

  test('list, setRoles, rolesOf and permissionsOf', async (t) => {
    const { store, roleId } = await setup(t);
    const a = await store.users.create({ name: 'A', email: 'a@example.com', roleIds: [await roleId('viewer'), await roleId('viewer')] });
    const b = await store.users.create({ name: 'B', email: 'b@example.com', roleIds: [] });
    assert.deepEqual(
      (await store.users.list()).map((user) => user.id),
      [a.id, b.id],
    );

    assert.deepEqual(
      (await store.users.rolesOf(a.id)).map((role) => role.name),
      ['viewer'],
    );
    assert.ok((await store.users.permissionsOf(a.id)).has('logs.view'));
    assert.ok(!(await store.users.permissionsOf(a.id)).has('data.decrypt'));
    assert.equal((await store.users.permissionsOf(b.id)).size, 0);

    await store.users.setRoles(a.id, [await roleId('developer'), await roleId('viewer')]);
    const roles = await store.users.rolesOf(a.id);
    assert.deepEqual(
      roles.map((role) => role.name),
      ['developer', 'viewer'],
    );
    assert.ok(roles[0]?.permissions.includes('data.decrypt'));
    assert.ok((await store.users.permissionsOf(a.id)).has('data.decrypt'));

    await store.users.setRoles(a.id, []);
    assert.deepEqual(await store.users.rolesOf(a.id), []);
    assert.equal((await store.users.permissionsOf(a.id)).size, 0);
  });
}
