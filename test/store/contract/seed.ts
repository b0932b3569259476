import assert from 'node:assert/strict';
import { createCipheriv, createDecipheriv, createHash, randomBytes, randomInt, scryptSync, timingSafeEqual } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import type { Store } from '../../../src/store/db.ts';
import { applySeed, SeedError, type SeedDeps, type SeedInput } from '../../../src/store/seed.ts';
import type { StoreTarget } from './target.ts';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Small real implementations, with call counters to prove what a re-run does not redo. */
function makeDeps() {
  const masterKey = randomBytes(32);
  const calls = { hashPassword: 0, verifyPassword: 0, wrapKey: 0, generateDataKey: 0, generateApiKey: 0 };
  const aad = (configurationId: string, version: number): Buffer => Buffer.from(`${configurationId}:${version}`);
  const deps: SeedDeps = {
    hashPassword(password) {
      calls.hashPassword++;
      const salt = randomBytes(16);
      return `scrypt$${salt.toString('base64')}$${scryptSync(password, salt, 32).toString('base64')}`;
    },
    verifyPassword(password, stored) {
      calls.verifyPassword++;
      const [, salt = '', hash = ''] = stored.split('$');
      return timingSafeEqual(scryptSync(password, Buffer.from(salt, 'base64'), 32), Buffer.from(hash, 'base64'));
    },
    wrapKey(configurationId, version, key) {
      calls.wrapKey++;
      const nonce = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', masterKey, nonce).setAAD(aad(configurationId, version));
      return Buffer.concat([nonce, cipher.update(key), cipher.final(), cipher.getAuthTag()]);
    },
    generateDataKey() {
      calls.generateDataKey++;
      return randomBytes(32);
    },
    generateKeyringId: () => randomBytes(16),
    hashApiKey: (key) => createHash('sha256').update(key).digest(),
    generateApiKey() {
      calls.generateApiKey++;
      return `svc_${Array.from({ length: 40 }, () => BASE62[randomInt(62)]).join('')}`;
    },
  };
  const unwrap = (configurationId: string, version: number, wrapped: Buffer): Buffer => {
    const decipher = createDecipheriv('aes-256-gcm', masterKey, wrapped.subarray(0, 12)).setAAD(aad(configurationId, version));
    decipher.setAuthTag(wrapped.subarray(-16));
    return Buffer.concat([decipher.update(wrapped.subarray(12, -16)), decipher.final()]);
  };
  return { deps, calls, unwrap };
}

const LITERAL_KEY = `svc_${'A1b2C3d4E5'.repeat(4)}`;

function baseSeed(): SeedInput {
  return {
    users: [
      { name: 'Ada Admin', email: 'ada@example.com', password: 'correct horse', roles: ['owner'] },
      { name: 'Dev', email: 'dev@example.com', roles: ['developer', 'viewer'] },
    ],
    configurations: [
      {
        name: 'payments',
        type: 'encryption',
        proxy_slug: 'payments',
        fields: ['card.number'],
        destinations: ['http://127.0.0.1:9999/'],
        deterministic: false,
      },
      { name: 'Customer Records', type: 'encryption', fields: [], destinations: [], deterministic: true },
      {
        name: 'google',
        type: 'provider',
        provider: 'google',
        fields: [],
        destinations: [],
        deterministic: false,
        groups: [{ id: 'g1', name: 'Doctors', email: 'docs@example.com', members: ['dev@example.com'] }],
      },
    ],
    api_keys: [
      { name: 'ci', user: 'ada@example.com', key: LITERAL_KEY, permissions: [], configurations: [] },
      { name: 'generated', user: 'dev@example.com', permissions: ['data.encrypt'], configurations: ['payments', 'customer-records'] },
    ],
    classifications: [
      {
        name: 'PHI',
        bg_color: '#aa0000',
        fg_color: '#ffffff',
        emoji: '🩺',
        users: ['ada@example.com'],
        roles: ['developer'],
        providers: [{ configuration: 'google', gws_groups: [{ id: 'g1', name: 'Doctors' }] }],
      },
      { name: 'Hello, World!', bg_color: '#000000', fg_color: '#ffffff', users: [], roles: [] },
    ],
  };
}

export function seedContract(target: StoreTarget): void {
  const setup = (t: TestContext): Promise<Store> => target.open(t);

  /** Every row of every table of ours, to compare whole stores. */
  async function dump(store: Store): Promise<Record<string, unknown[]>> {
    const out: Record<string, unknown[]> = {};
    for (const name of await target.sql.tables(store)) out[name] = await target.sql.all(store, `SELECT * FROM "${name}" ORDER BY 1, 2`);
    return out;
  }

  test('the first run creates everything, marked as seed', async (t) => {
    const store = await setup(t);
    const { deps, unwrap } = makeDeps();
    const result = await applySeed(store, baseSeed(), deps);

    const ada = await store.users.findByEmail('ada@example.com');
    assert.ok(ada?.passwordHash);
    assert.equal(ada.source, 'seed');
    assert.ok(deps.verifyPassword('correct horse', ada.passwordHash));
    assert.deepEqual(
      (await store.users.rolesOf(ada.id)).map((role) => role.name),
      ['owner'],
    );
    const dev = await store.users.findByEmail('dev@example.com');
    assert.ok(dev);
    assert.equal(dev.passwordHash, null);
    assert.deepEqual(
      (await store.users.rolesOf(dev.id)).map((role) => role.name),
      ['developer', 'viewer'],
    );

    const payments = await store.configurations.findByName('payments');
    assert.ok(payments?.keyringId);
    assert.equal(payments.source, 'seed');
    assert.equal(payments.proxySlug, 'payments');
    assert.equal(payments.keyVersion, 1);
    assert.equal(payments.deterministic, false);
    assert.deepEqual(payments.fields, ['card.number']);
    const [key] = await store.configurations.keys(payments.id);
    assert.ok(key);
    assert.equal(unwrap(payments.id, 1, key.wrapped).length, 32);

    const records = await store.configurations.findByName('Customer Records');
    assert.equal(records?.proxySlug, 'customer-records');
    assert.equal(records.deterministic, true);
    const google = await store.configurations.findByName('google');
    assert.ok(google);
    assert.equal(google.keyringId, null);
    assert.equal(google.proxySlug, null);
    assert.deepEqual(google.extra, { groups: [{ id: 'g1', name: 'Doctors', email: 'docs@example.com', members: ['dev@example.com'] }] });

    const ci = await store.apiKeys.findByName('ci');
    assert.ok(ci);
    assert.equal(ci.prefix, LITERAL_KEY.slice(0, 12));
    assert.equal((await store.apiKeys.findByHash(deps.hashApiKey(LITERAL_KEY)))?.id, ci.id);
    assert.equal(ci.userId, ada.id);
    assert.equal(ci.source, 'seed');

    assert.equal(result.createdApiKeys.length, 1);
    const created = result.createdApiKeys[0];
    assert.ok(created);
    assert.equal(created.name, 'generated');
    assert.match(created.key, /^svc_[0-9A-Za-z]{40}$/);
    const generated = await store.apiKeys.findByHash(deps.hashApiKey(created.key));
    assert.equal(generated?.name, 'generated');
    assert.equal(generated.prefix, created.key.slice(0, 12));
    assert.deepEqual(generated.permissions, ['data.encrypt']);
    assert.deepEqual(generated.configurations, [payments.id, records.id]);

    const phi = await store.classifications.findByName('PHI');
    assert.ok(phi);
    assert.equal(phi.slug, 'phi');
    assert.equal(phi.source, 'seed');
    assert.equal(phi.emoji, '🩺');
    assert.deepEqual(await store.classifications.members(phi.id), {
      userIds: [ada.id],
      roleIds: [(await store.roles.findByName('developer'))?.id],
      providers: [{ configurationId: google.id, gwsGroups: [{ id: 'g1', name: 'Doctors' }] }],
    });
    assert.equal((await store.classifications.findByName('Hello, World!'))?.slug, 'hello-world');
  });

  test('a second run changes nothing: same rows, ids, keys and wrapped keys', async (t) => {
    const store = await setup(t);
    const { deps, calls } = makeDeps();
    await applySeed(store, baseSeed(), deps);
    const before = await dump(store);
    const counts = { ...calls };

    const again = await applySeed(store, baseSeed(), deps);
    assert.deepEqual(again.createdApiKeys, []);
    assert.deepEqual(await dump(store), before);
    assert.equal(calls.hashPassword, counts.hashPassword, 'an unchanged password is not re-hashed');
    assert.equal(calls.generateDataKey, counts.generateDataKey, 'no key is generated for an existing configuration');
    assert.equal(calls.wrapKey, counts.wrapKey);
    assert.equal(calls.generateApiKey, counts.generateApiKey);
  });

  test('a key limited to deleted configurations alone (as older versions left them) is revoked by the next seed; one that still reaches another stays', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    await applySeed(store, baseSeed(), deps);
    const ada = (await store.users.findByEmail('ada@example.com'))!;
    const records = (await store.configurations.findByName('Customer Records'))!;
    const payments = (await store.configurations.findByName('payments'))!;
    const only = await store.apiKeys.create({ name: 'records-only', prefix: 'svc_records0', keyHash: Buffer.alloc(32, 1), userId: ada.id, configurations: [records.id] });
    const both = await store.apiKeys.create({ name: 'records-and-payments', prefix: 'svc_records1', keyHash: Buffer.alloc(32, 2), userId: ada.id, configurations: [records.id, payments.id] });
    // Deleted without the revocation that a DELETE through the API now makes.
    assert.equal(await store.configurations.delete(records.id), true);
    assert.equal((await store.apiKeys.findById(only.id))?.status, 'active');

    const result = await applySeed(store, baseSeed(), deps);
    assert.equal((await store.apiKeys.findById(only.id))?.status, 'revoked');
    assert.equal((await store.apiKeys.findById(both.id))?.status, 'active');
    assert.ok(result.changes.includes('revoked API key "records-only": every configuration it was limited to is deleted'), result.changes.join('; '));
    const again = await applySeed(store, baseSeed(), deps);
    assert.ok(!again.changes.some((c) => c.startsWith('revoked')), 'nothing more to revoke');
  });

  test('changes in the seed update rows in place and never touch existing keys', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    await applySeed(store, baseSeed(), deps);
    const payments = await store.configurations.findByName('payments');
    assert.ok(payments);
    const keysBefore = await store.configurations.keys(payments.id);
    const adaBefore = await store.users.findByEmail('ada@example.com');
    const generatedBefore = await store.apiKeys.findByName('generated');

    const seed = baseSeed();
    const newKey = `svc_${'Z9y8X7w6V5'.repeat(4)}`;
    seed.users = [
      { name: 'Ada Lovelace', email: 'ADA@example.com', password: 'new password', roles: ['viewer'], disabled: true },
      { name: 'Dev', email: 'dev@example.com', roles: ['developer', 'viewer'] },
    ];
    seed.configurations = seed.configurations?.map((c) =>
      c.name === 'payments' ? { ...c, proxy_slug: 'pay', fields: ['ssn'], destinations: [] } : c,
    );
    seed.api_keys = [
      { name: 'ci', user: 'dev@example.com', key: newKey, permissions: ['logs.view'], configurations: ['pay'] },
      { name: 'generated', user: 'dev@example.com', permissions: [], configurations: [] },
    ];
    seed.classifications = [
      { name: 'PHI', slug: 'health', description: 'Health', bg_color: '#00aa00', fg_color: '#ffffff', users: [], roles: ['viewer'] },
    ];
    const result = await applySeed(store, seed, deps);
    assert.deepEqual(result.createdApiKeys, []);

    const ada = await store.users.findByEmail('ada@example.com');
    assert.ok(ada?.passwordHash);
    assert.equal(ada.id, adaBefore?.id);
    assert.equal(ada.name, 'Ada Lovelace');
    assert.equal(ada.email, 'ada@example.com', 'stored normalised');
    assert.equal(ada.disabled, true);
    assert.ok(deps.verifyPassword('new password', ada.passwordHash));
    assert.deepEqual(
      (await store.users.rolesOf(ada.id)).map((role) => role.name),
      ['viewer'],
    );

    const updated = await store.configurations.findByName('payments');
    assert.equal(updated?.id, payments.id);
    assert.equal(updated.proxySlug, 'pay');
    assert.deepEqual(updated.fields, ['ssn']);
    assert.ok(updated.keyringId?.equals(payments.keyringId ?? Buffer.alloc(0)));
    assert.deepEqual(await store.configurations.keys(payments.id), keysBefore);

    assert.equal(await store.apiKeys.findByHash(deps.hashApiKey(LITERAL_KEY)), undefined, 'the old literal key stops working');
    const ci = await store.apiKeys.findByHash(deps.hashApiKey(newKey));
    assert.equal(ci?.name, 'ci');
    assert.equal(ci.prefix, newKey.slice(0, 12));
    assert.equal(ci.userId, (await store.users.findByEmail('dev@example.com'))?.id);
    assert.deepEqual(ci.permissions, ['logs.view']);
    assert.deepEqual(ci.configurations, [payments.id]);
    const generated = await store.apiKeys.findByName('generated');
    assert.ok(generated);
    assert.ok(generated.keyHash.equals(generatedBefore?.keyHash ?? Buffer.alloc(0)), 'a generated key is kept');
    assert.deepEqual(generated.configurations, []);

    const phi = await store.classifications.findByName('PHI');
    assert.ok(phi);
    assert.equal(phi.slug, 'health');
    assert.equal(phi.description, 'Health');
    assert.equal(phi.bgColor, '#00aa00');
    assert.equal(phi.emoji, '🩺', 'an omitted emoji is left alone');
    assert.deepEqual(await store.classifications.members(phi.id), {
      userIds: [],
      roleIds: [(await store.roles.findByName('viewer'))?.id],
      providers: [],
    });
    // Nothing is deleted: the classification left out of the seed is still there.
    assert.ok(await store.classifications.findByName('Hello, World!'));
  });

  test('rows that exist already are adopted, keeping their source', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    const existing = await store.users.create({ name: 'Ada', email: 'Ada@Example.com', passwordHash: deps.hashPassword('correct horse'), roleIds: [] });
    await applySeed(store, { users: [{ name: 'Ada', email: 'Ada@Example.com', password: 'correct horse', roles: ['owner'] }] }, deps);
    const ada = await store.users.findById(existing.id);
    assert.equal(ada?.source, 'api');
    assert.equal(ada.passwordHash, existing.passwordHash);
    assert.deepEqual(
      (await store.users.rolesOf(existing.id)).map((role) => role.name),
      ['owner'],
    );
    assert.equal((await store.users.list()).length, 1);
  });

  test('every problem is reported at once and nothing is written', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    const seed: SeedInput = {
      users: [
        { name: 'Ada', email: 'ada@example.com', roles: ['owner', 'root'] },
        { name: 'Ada again', email: 'ADA@example.com', roles: [] },
      ],
      configurations: [
        { name: 'db', type: 'encryption', fields: [], destinations: [], deterministic: false },
        { name: 'google', type: 'provider', proxy_slug: 'google', fields: [], destinations: [], deterministic: false },
        { name: 'late', type: 'encryption', fields: [], destinations: [], deterministic: false, min_decryption_version: 2 },
      ],
      api_keys: [
        { name: 'ci', user: 'nobody@example.com', permissions: ['data.encrypt', 'data.steal'], configurations: ['missing'] },
        { name: 'ci2', user: 'ada@example.com', key: LITERAL_KEY, permissions: [], configurations: ['late'] },
        { name: 'ci3', user: 'ada@example.com', key: LITERAL_KEY, permissions: [], configurations: [] },
      ],
      classifications: [
        {
          name: 'PHI',
          bg_color: '#aa0000',
          fg_color: '#ffffff',
          users: ['ghost@example.com'],
          roles: ['superuser'],
          providers: [{ configuration: 'nowhere', gws_groups: [] }],
        },
      ],
    };
    await assert.rejects(
      async () => applySeed(store, seed, deps),
      (error: unknown) => {
        assert.ok(error instanceof SeedError);
        assert.deepEqual(error.problems, [
          'seed.users[0].roles[1]: unknown role "root"',
          'seed.users[1].email: "ADA@example.com" is listed twice (emails compare after normalisation)',
          'seed.configurations[0].proxy_slug: "db" (derived from the name; set proxy_slug) must match ^[a-z0-9][a-z0-9-]{2,63}$',
          'seed.configurations[1].proxy_slug: only encryption configurations have a proxy slug',
          'seed.configurations[2].min_decryption_version: must be an integer from 1 to the current key version (1)',
          'seed.api_keys[0].user: unknown user "nobody@example.com"',
          'seed.api_keys[0].permissions[1]: unknown permission "data.steal"',
          'seed.api_keys[0].configurations[0]: unknown configuration "missing"',
          'seed.api_keys[2].key: the same key is given to another API key of the seed',
          'seed.classifications[0].users[0]: unknown user "ghost@example.com"',
          'seed.classifications[0].roles[0]: unknown role "superuser"',
          'seed.classifications[0].providers[0].configuration: unknown configuration "nowhere"',
        ]);
        assert.match(error.message, /^The seed has 12 problems:\n {2}- seed\.users\[0\]/);
        assert.ok(!error.message.includes(LITERAL_KEY), 'keys are never echoed');
        return true;
      },
    );
    assert.deepEqual(await store.users.list(), []);
    assert.deepEqual(await store.configurations.list(), []);
    assert.deepEqual(await store.apiKeys.list(), []);
    assert.deepEqual(await store.classifications.list(), []);
  });

  test('conflicts with stored rows are reported', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    await applySeed(store, baseSeed(), deps);
    await store.classifications.create({ name: 'Other', slug: 'taken', bgColor: '#000000', fgColor: '#ffffff' });
    await store.apiKeys.create({ name: 'api-made', prefix: 'x', keyHash: deps.hashApiKey(`svc_${'Q'.repeat(40)}`), userId: 1 });

    const seed = baseSeed();
    seed.configurations = [
      { name: 'payments', type: 'provider', fields: [], destinations: [], deterministic: false },
      { name: 'Customer Records', type: 'encryption', proxy_slug: 'payments', fields: [], destinations: [], deterministic: false },
    ];
    seed.api_keys = [{ name: 'ci', user: 'ada@example.com', key: `svc_${'Q'.repeat(40)}`, permissions: [], configurations: [] }];
    seed.classifications = [{ name: 'PHI', slug: 'taken', bg_color: '#aa0000', fg_color: '#ffffff', users: [], roles: [] }];
    await assert.rejects(
      async () => applySeed(store, seed, deps),
      (error: unknown) => {
        assert.ok(error instanceof SeedError);
        assert.deepEqual(error.problems, [
          'seed.configurations[0].type: configuration "payments" exists as "encryption" and its type cannot change',
          'seed.configurations[1].proxy_slug: "payments" is already used by configuration "payments"',
          'seed.configurations[1].deterministic: cannot change after the configuration "Customer Records" was created',
          'seed.api_keys[0].key: the key is already used by API key "api-made"',
          'seed.classifications[0].slug: "taken" is already used by classification "Other"',
        ]);
        return true;
      },
    );
  });

  test('regression: one person under two spellings of an email is refused, and a lookalike adopts the stored row', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    await applySeed(store, baseSeed(), deps);
    const twice = baseSeed();
    twice.users = [...twice.users!, { name: 'Kelvin Ada', email: 'ＡＤＡ@example.com', roles: ['owner'] }];
    await assert.rejects(async () => applySeed(store, twice, deps), (err: SeedError) => {
      assert.ok(err.problems.includes('seed.users[2].email: "ＡＤＡ@example.com" is listed twice (emails compare after normalisation)'), err.message);
      return true;
    });
    // The seed's one entry for ada, spelled another way, is still ada: no second user.
    const respelled = baseSeed();
    respelled.users = respelled.users!.map((u) => (u.email === 'ada@example.com' ? { ...u, email: 'ａｄａ@EXAMPLE.com' } : u));
    const result = await applySeed(store, respelled, deps);
    assert.deepEqual(result.changes, []);
    assert.deepEqual((await store.users.list()).map((u) => u.email), ['ada@example.com', 'dev@example.com']);
  });

  test('reveal grants and defaults: users by email and roles by name become ids, groups stay ids; a rerun changes nothing; a file that drops them resets to none and deny', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    const seed = baseSeed();
    const phi = seed.classifications![0]!;
    const withReveal: SeedInput = {
      ...seed,
      classifications: [
        {
          ...phi,
          reveal: [
            { to: { users: ['DEV@example.com'], roles: ['viewer'] }, level: 'mask', mask: 'last4' },
            { to: { groups: ['g-support'] }, level: 'token' },
          ],
          default: 'mask',
          default_mask: { keep_first: 0, keep_last: 2, char: '*' },
        },
        seed.classifications![1]!,
      ],
    };
    await applySeed(store, withReveal, deps);
    const dev = (await store.users.findByEmail('dev@example.com'))!;
    const viewer = (await store.roles.findByName('viewer'))!;
    const stored = (await store.classifications.findByName('PHI'))!;
    assert.deepEqual(stored.reveal, [
      { to: { users: [dev.id], roles: [viewer.id], groups: [] }, level: 'mask', mask: 'last4' },
      { to: { users: [], roles: [], groups: ['g-support'] }, level: 'token', mask: null },
    ]);
    assert.deepEqual(stored.revealDefault, { level: 'mask', mask: { keep_first: 0, keep_last: 2, char: '*' } });
    assert.deepEqual((await applySeed(store, withReveal, deps)).changes, [], 'a second run changes nothing');

    // Rules set through the API on a seeded classification are put back by the next run, as its members are.
    await store.classifications.update(stored.id, { reveal: [], revealDefault: { level: 'token', mask: null } });
    assert.deepEqual((await applySeed(store, withReveal, deps)).changes, ['updated classification "PHI"']);
    assert.equal((await store.classifications.findByName('PHI'))!.reveal.length, 2);

    assert.deepEqual((await applySeed(store, seed, deps)).changes, ['updated classification "PHI"']);
    const reset = (await store.classifications.findByName('PHI'))!;
    assert.deepEqual(reset.reveal, []);
    assert.deepEqual(reset.revealDefault, { level: 'deny', mask: null }, 'a file without default means deny');
  });

  test('reveal grants naming unknown users or roles, or unsafe group ids, are reported with the other problems', async (t) => {
    const store = await setup(t);
    const { deps } = makeDeps();
    const seed = baseSeed();
    seed.classifications = [
      {
        name: 'PCI',
        bg_color: '#aa0000',
        fg_color: '#ffffff',
        reveal: [{ to: { users: ['ghost@example.com'], roles: ['superuser'], groups: ['g\u202eevil'] }, level: 'plain' }],
      },
    ];
    await assert.rejects(
      async () => applySeed(store, seed, deps),
      (error: unknown) => {
        assert.ok(error instanceof SeedError);
        assert.deepEqual(error.problems, [
          'seed.classifications[0].reveal[0].to.users[0]: unknown user "ghost@example.com"',
          'seed.classifications[0].reveal[0].to.roles[0]: unknown role "superuser"',
          'seed.classifications[0].reveal[0].to.groups[0]: must not contain control characters or bidirectional formatting characters',
        ]);
        return true;
      },
    );
    assert.deepEqual(await store.classifications.list(), []);
  });

  // Only where a store outlives its connection.
  const reopen = target.reopen;
  if (reopen !== undefined) {
    test('idempotent across a restart of a file store', async (t) => {
      const { deps } = makeDeps();
      const first = await target.open(t);
      const { createdApiKeys } = await applySeed(first, baseSeed(), deps);
      const before = await dump(first);

      const second = await reopen(t, first);
      assert.deepEqual((await applySeed(second, baseSeed(), deps)).createdApiKeys, []);
      assert.deepEqual(await dump(second), before);
      assert.equal((await second.apiKeys.findByHash(deps.hashApiKey(createdApiKeys[0]?.key ?? '')))?.name, 'generated');
    });
  }
}
