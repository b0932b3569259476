import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { slugify } from '../../src/store/classifications.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

function setup(t: TestContext): Store {
  const store = openStore(':memory:');
  t.after(() => store.close());
  return store;
}

const colors = { bgColor: '#aa0000', fgColor: '#ffffff' };

test('slugify follows DESIGN §10', () => {
  assert.equal(slugify('PHI'), 'phi');
  assert.equal(slugify('Hello, World!'), 'hello-world');
  assert.equal(slugify('  --a__b  c-- '), 'a-b-c');
  assert.equal(slugify('Café 42'), 'caf-42');
  assert.equal(slugify('!!!'), '');
});

test('create picks unique slugs: -2, -3 on collision, "classification" when empty', (t) => {
  const store = setup(t);
  assert.equal(store.classifications.create({ name: 'PHI', ...colors }).slug, 'phi');
  assert.equal(store.classifications.create({ name: 'phi', ...colors }).slug, 'phi-2');
  assert.equal(store.classifications.create({ name: 'Phi!', ...colors }).slug, 'phi-3');
  assert.equal(store.classifications.create({ name: 'Hello, World!', ...colors }).slug, 'hello-world');
  assert.equal(store.classifications.create({ name: '🩺', ...colors }).slug, 'classification');
  assert.equal(store.classifications.create({ name: '???', ...colors }).slug, 'classification-2');
  assert.equal(store.classifications.uniqueSlug('PHI'), 'phi-4');
  const phi = store.classifications.findBySlug('phi');
  assert.ok(phi);
  assert.equal(store.classifications.uniqueSlug('PHI', phi.id), 'phi');
  assert.throws(() => store.classifications.create({ name: 'x', slug: 'phi', ...colors }), /UNIQUE/);
});

test('create stores fields and members; finders agree', (t) => {
  const store = setup(t);
  const user = store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
  const role = store.roles.findByName('developer');
  assert.ok(role);
  const google = store.configurations.create({ name: 'google', type: 'provider', provider: 'google' });
  const created = store.classifications.create({
    name: 'PHI',
    description: 'Health data',
    emoji: '🩺',
    providerContainerId: 'container-1',
    source: 'seed',
    ...colors,
    userIds: [user.id, user.id],
    roleIds: [role.id],
    providers: [{ configurationId: google.id, gwsGroups: [{ id: 'g1', name: 'Doctors', email: 'docs@example.com' }] }],
  });
  assert.equal(created.name, 'PHI');
  assert.equal(created.description, 'Health data');
  assert.equal(created.emoji, '🩺');
  assert.equal(created.bgColor, '#aa0000');
  assert.equal(created.fgColor, '#ffffff');
  assert.equal(created.providerContainerId, 'container-1');
  assert.equal(created.source, 'seed');

  assert.deepEqual(store.classifications.findById(created.id), created);
  assert.deepEqual(store.classifications.findBySlug('phi'), created);
  assert.deepEqual(store.classifications.findByName('PHI'), created);
  assert.deepEqual(store.classifications.findByIdOrSlug(String(created.id)), created);
  assert.deepEqual(store.classifications.findByIdOrSlug('phi'), created);
  assert.equal(store.classifications.findByIdOrSlug('999'), undefined);
  assert.equal(store.classifications.findByIdOrSlug('99999999999999999999999'), undefined);
  assert.equal(store.classifications.findByIdOrSlug('nope'), undefined);

  const members = {
    userIds: [user.id],
    roleIds: [role.id],
    providers: [{ configurationId: google.id, gwsGroups: [{ id: 'g1', name: 'Doctors', email: 'docs@example.com' }] }],
  };
  assert.deepEqual(store.classifications.members(created.id), members);
  assert.deepEqual(store.classifications.allMembers(), new Map([[created.id, members]]));
  assert.deepEqual(store.classifications.members(424242), { userIds: [], roleIds: [], providers: [] });
});

test('an id made of digits is an id, never a slug', (t) => {
  const store = setup(t);
  const first = store.classifications.create({ name: 'first', ...colors });
  const numeric = store.classifications.create({ name: '2024', ...colors });
  assert.equal(numeric.slug, '2024');
  assert.equal(store.classifications.findByIdOrSlug(String(first.id))?.id, first.id);
  assert.equal(store.classifications.findByIdOrSlug('2024'), undefined);
});

test('update keeps the slug on rename, replaces only the member lists given', (t) => {
  const store = setup(t);
  const a = store.users.create({ name: 'A', email: 'a@example.com', roleIds: [] });
  const b = store.users.create({ name: 'B', email: 'b@example.com', roleIds: [] });
  const viewer = store.roles.findByName('viewer');
  assert.ok(viewer);
  const c = store.classifications.create({ name: 'PHI', ...colors, userIds: [a.id], roleIds: [viewer.id] });

  const renamed = store.classifications.update(c.id, { name: 'Protected', emoji: null, description: 'd', userIds: [b.id] });
  assert.equal(renamed?.name, 'Protected');
  assert.equal(renamed?.slug, 'phi');
  assert.equal(renamed?.description, 'd');
  assert.equal(renamed?.bgColor, '#aa0000');
  assert.deepEqual(store.classifications.members(c.id).userIds, [b.id]);
  assert.deepEqual(store.classifications.members(c.id).roleIds, [viewer.id]);

  assert.equal(store.classifications.update(c.id, { slug: 'protected', roleIds: [] })?.slug, 'protected');
  assert.deepEqual(store.classifications.members(c.id).roleIds, []);
  assert.equal(store.classifications.update(999, { name: 'x' }), undefined);
});

test('delete removes the classification and its links; deleting a member unlinks it', (t) => {
  const store = setup(t);
  const user = store.users.create({ name: 'A', email: 'a@example.com', roleIds: [] });
  const config = store.configurations.create({
    name: 'enc',
    type: 'encryption',
    proxySlug: 'enc',
    keyringId: randomBytes(16),
    firstWrappedKey: randomBytes(60),
  });
  const c = store.classifications.create({ name: 'PHI', ...colors, userIds: [user.id], providers: [{ configurationId: config.id, gwsGroups: [] }] });
  const other = store.classifications.create({ name: 'PII', ...colors, providers: [{ configurationId: config.id, gwsGroups: [] }] });

  assert.equal(store.configurations.delete(config.id), true);
  assert.deepEqual(store.classifications.members(other.id).providers, []);

  assert.equal(store.classifications.delete(c.id), true);
  assert.equal(store.classifications.delete(c.id), false);
  assert.equal(store.classifications.findById(c.id), undefined);
  const links = sqliteConnection(store).prepare('SELECT count(*) AS n FROM classification_users').get();
  assert.equal(links?.['n'], 0);
  assert.deepEqual(
    store.classifications.list().map((x) => x.name),
    ['PII'],
  );
});
