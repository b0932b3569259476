import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { openStore, type Store } from '../../src/store/db.ts';

function setup(t: TestContext): { store: Store; roleId: (name: string) => number } {
  const store = openStore(':memory:');
  t.after(() => store.close());
  const roleId = (name: string): number => {
    const role = store.roles.findByName(name);
    assert.ok(role, name);
    return role.id;
  };
  return { store, roleId };
}

test('create returns the stored user with defaults', (t) => {
  const { store, roleId } = setup(t);
  const user = store.users.create({ name: 'Ada', email: 'Ada@Example.com', passwordHash: 'h1', roleIds: [roleId('viewer')], source: 'seed' });
  assert.equal(typeof user.id, 'number');
  assert.equal(user.name, 'Ada');
  assert.equal(user.email, 'ada@example.com', 'stored normalised');
  assert.equal(user.passwordHash, 'h1');
  assert.equal(user.disabled, false);
  assert.equal(user.twoFactorEnabled, false);
  assert.equal(user.source, 'seed');
  assert.match(user.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(user.updatedAt, user.createdAt);
  assert.deepEqual(store.users.findById(user.id), user);

  const plain = store.users.create({ name: 'Bob', email: 'bob@example.com', roleIds: [] });
  assert.equal(plain.passwordHash, null);
  assert.equal(plain.source, 'api');
});

test('emails are unique and looked up without regard to case', (t) => {
  const { store } = setup(t);
  const user = store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
  assert.equal(store.users.findByEmail('ADA@EXAMPLE.COM')?.id, user.id);
  assert.equal(store.users.findByEmail('nobody@example.com'), undefined);
  assert.throws(() => store.users.create({ name: 'Other', email: 'Ada@example.COM', roleIds: [] }), /UNIQUE/);
});

test('update changes only the given fields and can clear the password', (t) => {
  const { store } = setup(t);
  const user = store.users.create({ name: 'Ada', email: 'ada@example.com', passwordHash: 'h', roleIds: [] });
  const updated = store.users.update(user.id, { name: 'Ada L.', disabled: true, twoFactorEnabled: true, email: undefined });
  assert.ok(updated);
  assert.equal(updated.name, 'Ada L.');
  assert.equal(updated.email, 'ada@example.com');
  assert.equal(updated.passwordHash, 'h');
  assert.equal(updated.disabled, true);
  assert.equal(updated.twoFactorEnabled, true);
  assert.ok(updated.updatedAt >= user.updatedAt);
  assert.equal(store.users.update(user.id, { passwordHash: null })?.passwordHash, null);
  assert.equal(store.users.update(4242, { name: 'ghost' }), undefined);
});

test('list, setRoles, rolesOf and permissionsOf', (t) => {
  const { store, roleId } = setup(t);
  const a = store.users.create({ name: 'A', email: 'a@example.com', roleIds: [roleId('viewer'), roleId('viewer')] });
  const b = store.users.create({ name: 'B', email: 'b@example.com', roleIds: [] });
  assert.deepEqual(
    store.users.list().map((user) => user.id),
    [a.id, b.id],
  );

  assert.deepEqual(
    store.users.rolesOf(a.id).map((role) => role.name),
    ['viewer'],
  );
  assert.ok(store.users.permissionsOf(a.id).has('logs.view'));
  assert.ok(!store.users.permissionsOf(a.id).has('data.decrypt'));
  assert.equal(store.users.permissionsOf(b.id).size, 0);

  store.users.setRoles(a.id, [roleId('developer'), roleId('viewer')]);
  const roles = store.users.rolesOf(a.id);
  assert.deepEqual(
    roles.map((role) => role.name),
    ['developer', 'viewer'],
  );
  assert.ok(roles[0]?.permissions.includes('data.decrypt'));
  assert.ok(store.users.permissionsOf(a.id).has('data.decrypt'));

  store.users.setRoles(a.id, []);
  assert.deepEqual(store.users.rolesOf(a.id), []);
  assert.equal(store.users.permissionsOf(a.id).size, 0);
});
