import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { StoreTarget } from './target.ts';

// DESIGN §9 (plus sync.* for replication, docs/replication.md), written out by hand so that a
// change to the migration cannot also change the expectation.
const ALL = [
  'classifications.view',
  'classifications.create',
  'classifications.update',
  'classifications.delete',
  'configurations.view',
  'configurations.create',
  'configurations.update',
  'configurations.delete',
  'configurations.rotate',
  'data.encrypt',
  'data.decrypt',
  'logs.view',
  'api-keys.view',
  'api-keys.create',
  'api-keys.revoke',
  'api-keys.rotate',
  'users.view',
  'users.manage',
  'roles.view',
  'sync.read',
  'sync.write',
];
const VIEWS = ['classifications.view', 'configurations.view', 'logs.view', 'api-keys.view', 'users.view', 'roles.view'];
const DEVELOPER = ['data.encrypt', 'data.decrypt', ...VIEWS, 'api-keys.create'];

const sorted = (values: Iterable<string>): string[] => [...values].sort();

export function rolesContract(target: StoreTarget): void {
  test('built-in permissions and role grants are exactly DESIGN §9', async (t) => {
    const store = await target.open(t);
    assert.deepEqual(await store.roles.permissionNames(), ALL);

    const roles = await store.roles.list();
    assert.deepEqual(
      roles.map((role) => role.name),
      ['owner', 'administrator', 'developer', 'viewer'],
    );
    const byName = new Map(roles.map((role) => [role.name, role]));
    assert.deepEqual(byName.get('owner')?.permissions, ALL);
    assert.deepEqual(byName.get('administrator')?.permissions, ALL);
    assert.deepEqual(sorted(byName.get('developer')?.permissions ?? []), sorted(DEVELOPER));
    assert.deepEqual(sorted(byName.get('viewer')?.permissions ?? []), sorted(VIEWS));
    for (const role of roles) {
      assert.ok(role.description !== null && role.description.length > 0 && role.description.length < 80, role.name);
    }
  });

  test('roles are found by id and name; permissionsForRoles unions', async (t) => {
    const store = await target.open(t);
    const viewer = await store.roles.findByName('viewer');
    assert.ok(viewer);
    assert.deepEqual(await store.roles.findById(viewer.id), viewer);
    assert.equal(await store.roles.findByName('root'), undefined);
    assert.equal(await store.roles.findById(12345), undefined);

    const developer = await store.roles.findByName('developer');
    assert.ok(developer);
    assert.deepEqual(sorted(await store.roles.permissionsForRoles([viewer.id, developer.id])), sorted(DEVELOPER));
    assert.deepEqual(sorted(await store.roles.permissionsForRoles([viewer.id])), sorted(VIEWS));
    assert.equal((await store.roles.permissionsForRoles([])).size, 0);
    assert.equal((await store.roles.permissionsForRoles([999])).size, 0);
  });
}
