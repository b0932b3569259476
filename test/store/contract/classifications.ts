import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import type { Store } from '../../../src/store/db.ts';
import { constraintViolated } from '../../../src/store/sql.ts';
import type { StoreTarget } from './target.ts';

const colors = { bgColor: '#aa0000', fgColor: '#ffffff' };

export function classificationsContract(target: StoreTarget): void {
  const setup = (t: TestContext): Promise<Store> => target.open(t);

  test('create picks unique slugs: -2, -3 on collision, "classification" when empty', async (t) => {
    const store = await setup(t);
    assert.equal((await store.classifications.create({ name: 'PHI', ...colors })).slug, 'phi');
    assert.equal((await store.classifications.create({ name: 'phi', ...colors })).slug, 'phi-2');
    assert.equal((await store.classifications.create({ name: 'Phi!', ...colors })).slug, 'phi-3');
    assert.equal((await store.classifications.create({ name: 'Hello, World!', ...colors })).slug, 'hello-world');
    assert.equal((await store.classifications.create({ name: '🩺', ...colors })).slug, 'classification');
    assert.equal((await store.classifications.create({ name: '???', ...colors })).slug, 'classification-2');
    assert.equal(await store.classifications.uniqueSlug('PHI'), 'phi-4');
    const phi = await store.classifications.findBySlug('phi');
    assert.ok(phi);
    assert.equal(await store.classifications.uniqueSlug('PHI', phi.id), 'phi');
    await assert.rejects(async () => store.classifications.create({ name: 'x', slug: 'phi', ...colors }), (e) => constraintViolated(e) === 'unique');
  });

  test('create stores fields and members; finders agree', async (t) => {
    const store = await setup(t);
    const user = await store.users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [] });
    const role = await store.roles.findByName('developer');
    assert.ok(role);
    const google = await store.configurations.create({ name: 'google', type: 'provider', provider: 'google' });
    const created = await store.classifications.create({
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

    assert.deepEqual(await store.classifications.findById(created.id), created);
    assert.deepEqual(await store.classifications.findBySlug('phi'), created);
    assert.deepEqual(await store.classifications.findByName('PHI'), created);
    assert.deepEqual(await store.classifications.findByIdOrSlug(String(created.id)), created);
    assert.deepEqual(await store.classifications.findByIdOrSlug('phi'), created);
    assert.equal(await store.classifications.findByIdOrSlug('999'), undefined);
    assert.equal(await store.classifications.findByIdOrSlug('99999999999999999999999'), undefined);
    assert.equal(await store.classifications.findByIdOrSlug('nope'), undefined);

    const members = {
      userIds: [user.id],
      roleIds: [role.id],
      providers: [{ configurationId: google.id, gwsGroups: [{ id: 'g1', name: 'Doctors', email: 'docs@example.com' }] }],
    };
    assert.deepEqual(await store.classifications.members(created.id), members);
    assert.deepEqual(await store.classifications.allMembers(), new Map([[created.id, members]]));
    assert.deepEqual(await store.classifications.members(424242), { userIds: [], roleIds: [], providers: [] });
  });

  test('a full page counts the total, with no filter and with one', async (t) => {
    const store = await setup(t);
    for (let i = 1; i <= 5; i++) await store.classifications.create({ name: `Item ${i}`, ...colors });
    // A full page cannot tell the total from its rows: the count runs, here with no parameter at all.
    const unfiltered = await store.classifications.page({ sort: 'name', direction: 'asc', limit: 2, offset: 0 });
    assert.deepEqual(unfiltered.items.map((c) => c.name), ['Item 1', 'Item 2']);
    assert.equal(unfiltered.total, 5);
    const searched = await store.classifications.page({ search: 'item', sort: 'name', direction: 'asc', limit: 2, offset: 2 });
    assert.deepEqual(searched.items.map((c) => c.name), ['Item 3', 'Item 4']);
    assert.equal(searched.total, 5);
    assert.equal((await store.classifications.page({ sort: 'name', direction: 'asc', limit: 2, offset: 10 })).total, 5, 'a page past the end counts too');
  });

  test('an id made of digits is an id, never a slug', async (t) => {
    const store = await setup(t);
    const first = await store.classifications.create({ name: 'first', ...colors });
    const numeric = await store.classifications.create({ name: '2024', ...colors });
    assert.equal(numeric.slug, '2024');
    assert.equal((await store.classifications.findByIdOrSlug(String(first.id)))?.id, first.id);
    assert.equal(await store.classifications.findByIdOrSlug('2024'), undefined);
  });

  test('update keeps the slug on rename, replaces only the member lists given', async (t) => {
    const store = await setup(t);
    const a = await store.users.create({ name: 'A', email: 'a@example.com', roleIds: [] });
    const b = await store.users.create({ name: 'B', email: 'b@example.com', roleIds: [] });
    const viewer = await store.roles.findByName('viewer');
    assert.ok(viewer);
    const c = await store.classifications.create({ name: 'PHI', ...colors, userIds: [a.id], roleIds: [viewer.id] });

    const renamed = await store.classifications.update(c.id, { name: 'Protected', emoji: null, description: 'd', userIds: [b.id] });
    assert.equal(renamed?.name, 'Protected');
    assert.equal(renamed?.slug, 'phi');
    assert.equal(renamed?.description, 'd');
    assert.equal(renamed?.bgColor, '#aa0000');
    assert.deepEqual((await store.classifications.members(c.id)).userIds, [b.id]);
    assert.deepEqual((await store.classifications.members(c.id)).roleIds, [viewer.id]);

    assert.equal((await store.classifications.update(c.id, { slug: 'protected', roleIds: [] }))?.slug, 'protected');
    assert.deepEqual((await store.classifications.members(c.id)).roleIds, []);
    assert.equal(await store.classifications.update(999, { name: 'x' }), undefined);
  });

  test('delete removes the classification and its links; deleting a member unlinks it', async (t) => {
    const store = await setup(t);
    const user = await store.users.create({ name: 'A', email: 'a@example.com', roleIds: [] });
    const config = await store.configurations.create({
      name: 'enc',
      type: 'encryption',
      proxySlug: 'enc',
      keyringId: randomBytes(16),
      firstWrappedKey: randomBytes(60),
    });
    const c = await store.classifications.create({ name: 'PHI', ...colors, userIds: [user.id], providers: [{ configurationId: config.id, gwsGroups: [] }] });
    const other = await store.classifications.create({ name: 'PII', ...colors, providers: [{ configurationId: config.id, gwsGroups: [] }] });

    assert.equal(await store.configurations.delete(config.id), true);
    assert.deepEqual((await store.classifications.members(other.id)).providers, []);

    assert.equal(await store.classifications.delete(c.id), true);
    assert.equal(await store.classifications.delete(c.id), false);
    assert.equal(await store.classifications.findById(c.id), undefined);
    const [links] = await target.sql.all(store, 'SELECT count(*) AS n FROM classification_users');
    assert.equal(links?.['n'], 0);
    assert.deepEqual(
      (await store.classifications.list()).map((x) => x.name),
      ['PII'],
    );
  });
}
