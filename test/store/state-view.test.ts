import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { openStore, type Store } from '../../src/store/db.ts';
import { OTHERS_CHECK_MS } from '../../src/store/sqlite/open.ts';
import { Memo, stateOf } from '../../src/store/state-view.ts';

const colors = { bgColor: '#000000', fgColor: '#ffffff' };
const sha256 = (text: string): Buffer => createHash('sha256').update(text).digest();

function fileStore(t: TestContext): { store: Store; path: string } {
  const dir = mkdtempSync(join(tmpdir(), 'svc-state-view-'));
  const path = join(dir, 'svc.db');
  const store = openStore(path);
  t.after(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { store, path };
}

/** A small state with one of everything the view holds, some of it related. */
async function populate(store: Store): Promise<{ hash: Buffer; userId: number; classificationId: number; configurationId: string }> {
  const admin = (await store.roles.findByName('administrator'))!;
  const viewer = (await store.roles.findByName('viewer'))!;
  const user = await store.users.create({ name: 'Kate', email: 'Kate@Example.com', roleIds: [viewer.id, admin.id] });
  await store.users.create({ name: 'Nobody', email: 'nobody@example.com', roleIds: [] });
  const hash = sha256('svc_key');
  await store.apiKeys.create({ name: 'ci', prefix: 'svc_key', keyHash: hash, userId: user.id, permissions: ['data.encrypt'], configurations: [] });
  const configuration = await store.configurations.create({
    name: 'payments',
    type: 'encryption',
    proxySlug: 'pay',
    keyringId: randomBytes(16),
    firstWrappedKey: randomBytes(60),
    fields: ['ssn'],
    destinations: ['https://api.vendor.example/'],
  });
  await store.configurations.create({ name: 'google', type: 'provider', provider: 'google', extra: { groups: [{ id: 'g-nurses', members: ['kate@example.com'] }] } });
  const classification = await store.classifications.create({
    name: 'PHI',
    ...colors,
    userIds: [user.id],
    roleIds: [viewer.id],
    reveal: [{ to: { users: [], roles: [admin.id], groups: ['g-nurses'] }, level: 'mask', mask: { keep_first: 0, keep_last: 4, char: '*' } }],
  });
  await store.classifications.create({ name: 'Empty', ...colors });
  return { hash, userId: user.id, classificationId: classification.id, configurationId: configuration.id };
}

test('every lookup of the view answers what the repositories answer', async (t) => {
  const { store } = fileStore(t);
  const { hash } = await populate(store);
  const state = stateOf(store);

  for (const user of await store.users.list()) {
    assert.deepEqual(state.user(user.id), user);
    assert.deepEqual(state.userByEmail(user.email), await store.users.findByEmail(user.email));
    assert.deepEqual(state.rolesOf(user.id), await store.users.rolesOf(user.id));
  }
  // Normalised as findByEmail normalises: the Kelvin sign and upper case find kate.
  assert.deepEqual(state.userByEmail('\u212Aate@EXAMPLE.com.'), await store.users.findByEmail('\u212Aate@EXAMPLE.com.'));
  assert.ok(state.userByEmail('\u212Aate@EXAMPLE.com.') !== undefined);
  assert.equal(state.userByEmail('someone@example.com'), undefined);
  assert.deepEqual(state.rolesOf(999), []);

  for (const role of await store.roles.list()) {
    assert.deepEqual(state.role(role.id), role);
    assert.deepEqual(state.roleByName(role.name), role);
  }
  assert.equal(state.roleByName('Admin'), undefined, 'role names are exact, as in the table');

  assert.deepEqual(state.apiKeyByHash(hash), await store.apiKeys.findByHash(hash));
  assert.equal(state.apiKeyByHash(sha256('other')), undefined);

  assert.deepEqual(state.configurations, await store.configurations.list());
  for (const configuration of await store.configurations.list()) {
    assert.deepEqual(state.configuration(configuration.id), configuration);
    assert.deepEqual(state.configurationByName(configuration.name), configuration);
    if (configuration.proxySlug !== null) assert.deepEqual(state.configurationBySlug(configuration.proxySlug), configuration);
  }
  assert.equal(state.configurationByName('Payments'), undefined);
  assert.equal(state.configurationBySlug('payments'), undefined, 'the slug is pay, not the name');

  assert.deepEqual(state.classifications, await store.classifications.list());
  for (const classification of await store.classifications.list()) {
    assert.deepEqual(state.classification(classification.id), classification);
    for (const value of [String(classification.id), classification.slug, `0${classification.id}`, `${classification.slug}x`]) {
      assert.deepEqual(state.classificationByIdOrSlug(value), await store.classifications.findByIdOrSlug(value), value);
    }
    assert.deepEqual(state.members(classification.id), await store.classifications.members(classification.id));
  }
  assert.equal(state.classificationByIdOrSlug('99999999999999999999'), undefined);
  assert.deepEqual(state.members(12345), { userIds: [], roleIds: [], providers: [] });
});

test('one view while nothing changes; a write through this connection replaces it at once', async (t) => {
  const { store } = fileStore(t);
  const { userId } = await populate(store);
  const before = stateOf(store);
  assert.equal(stateOf(store), before, 'no write, same view');
  assert.equal(before.user(userId)?.disabled, false);

  await store.users.update(userId, { disabled: true });
  const after = stateOf(store);
  assert.notEqual(after, before);
  assert.equal(after.user(userId)?.disabled, true);
  assert.equal(before.user(userId)?.disabled, false, 'what a view has read, it keeps');
});

test('a commit by another connection (the CLI, another process) is seen within OTHERS_CHECK_MS', async (t) => {
  const { store, path } = fileStore(t);
  await populate(store);
  assert.equal(stateOf(store).configurationByName('refunds'), undefined);

  const other = openStore(path);
  t.after(() => other.close());
  await other.configurations.create({ name: 'refunds', type: 'encryption', keyringId: randomBytes(16), firstWrappedKey: randomBytes(60), fields: ['ssn'], destinations: [] });

  await sleep(OTHERS_CHECK_MS + 5);
  assert.equal(stateOf(store).configurationByName('refunds')?.name, 'refunds');
});

test('regression: a view built inside a transaction that rolls back is not served after it', async (t) => {
  // A cache filled from rows that a rollback then removed outlived them: the change stamp
  // moved with the writes, not with the rollback, so the key below kept authenticating.
  const { store } = fileStore(t);
  const { userId } = await populate(store);
  const hash = sha256('svc_rolled_back');
  await assert.rejects(
    store.transaction(async (tx) => {
      await tx.apiKeys.create({ name: 'temporary', prefix: 'svc_rolled', keyHash: hash, userId, permissions: [], configurations: [] });
      assert.equal(stateOf(store).apiKeyByHash(hash)?.name, 'temporary');
      throw new Error('abandoned');
    }),
    /abandoned/,
  );
  assert.equal(await store.apiKeys.findByHash(hash), undefined);
  assert.equal(stateOf(store).apiKeyByHash(hash), undefined);
});

test('everything the view hands out is frozen: no request can change a row for the others', async (t) => {
  const { store } = fileStore(t);
  const { hash, userId, classificationId, configurationId } = await populate(store);
  const state = stateOf(store);
  assert.throws(() => {
    (state.user(userId) as { disabled: boolean }).disabled = true;
  }, TypeError);
  assert.throws(() => {
    (state.rolesOf(userId) as unknown as number[]).push(1);
  }, TypeError);
  assert.throws(() => {
    (state.rolesOf(userId)[0]!.permissions as string[]).push('keys.manage');
  }, TypeError);
  assert.throws(() => {
    (state.apiKeyByHash(hash)!.permissions as string[]).push('keys.manage');
  }, TypeError);
  assert.throws(() => {
    (state.configuration(configurationId)!.fields as string[]).push('x');
  }, TypeError);
  assert.throws(() => {
    (state.members(classificationId).userIds as number[]).push(999);
  }, TypeError);
  assert.throws(() => {
    (state.classification(classificationId)!.reveal as unknown[]).length = 0;
  }, TypeError);
  assert.equal(stateOf(store).user(userId)?.disabled, false);
});

test('memos live as long as their view and hold at most memo.max values', async (t) => {
  const { store } = fileStore(t);
  const { userId } = await populate(store);
  const memo = new Memo<number>('test', 2);
  let builds = 0;
  const build = (): number => ++builds;

  const state = stateOf(store);
  assert.equal(state.memo(memo, 'a', build), 1);
  assert.equal(state.memo(memo, 'a', build), 1, 'built once per view');
  assert.equal(state.memo(memo, 'b', build), 2);
  assert.equal(state.memo(memo, 'c', build), 3, 'a third key starts the kind over');
  assert.equal(state.memo(memo, 'a', build), 4);

  await store.users.update(userId, { name: 'Kate B.' });
  assert.equal(stateOf(store).memo(memo, 'a', build), 5, 'a new view, new memos');
});
