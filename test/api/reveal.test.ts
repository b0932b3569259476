/**
 * Reveal rules through the management API (DESIGN §14): `reveal`, `default` and
 * `default_mask` on create, show and PATCH (which replaces `reveal` whole), each bad entry a
 * 422 under its own key, and the minting rule (DESIGN §13): changing what a
 * classification reveals needs a caller admitted to it, and no credential may be minted
 * that reads more of a classification, through a reveal grant, than its caller does.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { call, startApp, type Running } from '../support/app.ts';

const key = (name: string) => `svc_${name.padEnd(40, '0')}`;
const K = { ada: key('Ada'), bill: key('Bill'), dev: key('Dev') } as const;
const LIST = '/api/v3/classifications';
const COLORS = { bg_color: '#aa0000', fg_color: '#ffffff' };

const SEED = `
seed:
  users:
    - { name: Ada Admin, email: ada@example.com, roles: [owner] }
    - { name: Bill Ing, email: bill@example.com, roles: [administrator] }
    - { name: Dev Eloper, email: dev@example.com, roles: [developer] }
  api_keys:
    - { name: ada, user: ada@example.com, key: ${K.ada} }
    - { name: bill, user: bill@example.com, key: ${K.bill} }
    - { name: dev, user: dev@example.com, key: ${K.dev} }
  configurations:
    - { name: payments, proxy_slug: payments }
  classifications:
    - { name: PCI, bg_color: "#0000aa", fg_color: "#ffffff", users: [ada@example.com] }
`;

async function start(t: TestContext): Promise<Running & { ids: { ada: number; bill: number; dev: number; developer: number; administrator: number; pci: number } }> {
  const running = await startApp(t, '', SEED);
  const store = running.app.services.store;
  const ids = {
    ada: (await store.users.findByEmail('ada@example.com'))!.id,
    bill: (await store.users.findByEmail('bill@example.com'))!.id,
    dev: (await store.users.findByEmail('dev@example.com'))!.id,
    developer: (await store.roles.findByName('developer'))!.id,
    administrator: (await store.roles.findByName('administrator'))!.id,
    pci: (await store.classifications.findBySlug('pci'))!.id,
  };
  return Object.assign(running, { ids });
}

const post = (url: string, body: unknown, k = K.ada) => call(url, LIST, { body: JSON.stringify(body), key: k });
const patch = (url: string, id: number, body: unknown, k = K.ada) => call(url, `${LIST}/${id}`, { method: 'PATCH', body: JSON.stringify(body), key: k });
const show = (url: string, id: number) => call(url, `${LIST}/${id}`, { method: 'GET', key: K.ada });

test('create and show: reveal grants with to.users and to.roles shown as the members are, groups as ids; default and default_mask', async (t) => {
  const { url, ids } = await start(t);
  const created = await post(url, {
    name: 'Cards',
    ...COLORS,
    users: [ids.ada],
    reveal: [
      { to: { roles: [ids.developer] }, level: 'mask', mask: 'last4' },
      { to: { users: [ids.bill, ids.bill], groups: ['g-support'] }, level: 'redact', mask: null },
      { to: { users: [ids.dev] }, level: 'mask', mask: { keep_last: 2 } },
    ],
    default: 'mask',
    default_mask: { keep_first: 1, keep_last: 1, char: '*' },
  });
  assert.equal(created.status, 201, created.text);
  const view = (await show(url, created.json.id)).json;
  assert.deepEqual(view, created.json);
  assert.equal(view.reveal.length, 3);
  assert.deepEqual(view.reveal[0].to.roles.map((r: { name: string }) => r.name), ['developer']);
  assert.deepEqual(view.reveal[0].to.users, []);
  assert.equal(view.reveal[0].level, 'mask');
  assert.equal(view.reveal[0].mask, 'last4');
  assert.deepEqual(view.reveal[1].to.users.map((u: { email: string }) => u.email), ['bill@example.com'], 'listed once');
  assert.deepEqual(view.reveal[1].to.groups, ['g-support']);
  assert.equal(view.reveal[1].mask, null);
  assert.deepEqual(view.reveal[2].mask, { keep_first: 0, keep_last: 2, char: '•' }, 'a custom mask with its defaults filled in');
  assert.equal(view.default, 'mask');
  assert.deepEqual(view.default_mask, { keep_first: 1, keep_last: 1, char: '*' });
  // A classification created without them reveals nothing beyond its members.
  const plain = await post(url, { name: 'Plain', ...COLORS });
  assert.deepEqual([plain.json.reveal, plain.json.default, plain.json.default_mask], [[], 'deny', null]);
});

test('PATCH replaces reveal whole, leaves it alone when not sent, and clears it with []; default and default_mask go together', async (t) => {
  const { url, ids } = await start(t);
  const grants = [
    { to: { roles: [ids.developer] }, level: 'mask', mask: 'last4' },
    { to: { groups: ['g1'] }, level: 'token' },
  ];
  assert.equal((await patch(url, ids.pci, { reveal: grants, default: 'token' })).status, 200);
  assert.deepEqual((await show(url, ids.pci)).json.reveal.map((g: { level: string }) => g.level), ['mask', 'token']);
  const replaced = await patch(url, ids.pci, { reveal: [{ to: { users: [ids.dev] }, level: 'plain' }] });
  assert.equal(replaced.status, 200);
  assert.equal(replaced.json.reveal.length, 1, 'the list sent replaces the stored one, not merged into it');
  assert.equal(replaced.json.reveal[0].to.users[0].id, ids.dev);
  assert.equal(replaced.json.default, 'token', 'default untouched by a PATCH that does not send it');
  const renamed = await patch(url, ids.pci, { name: 'PCI DSS' });
  assert.equal(renamed.json.reveal.length, 1, 'a PATCH without reveal leaves it alone');
  assert.equal(renamed.json.default, 'token');
  const masked = await patch(url, ids.pci, { default: 'mask', default_mask: 'ssn' });
  assert.deepEqual([masked.json.default, masked.json.default_mask], ['mask', 'ssn']);
  const back = await patch(url, ids.pci, { default: 'deny' });
  assert.deepEqual([back.json.default, back.json.default_mask], ['deny', null], 'a default other than mask has no mask');
  const cleared = await patch(url, ids.pci, { reveal: [] });
  assert.deepEqual(cleared.json.reveal, []);
  const nulls = await patch(url, ids.pci, { reveal: null, default: null, default_mask: null });
  assert.equal(nulls.status, 200, 'null is not sent');
});

async function expect422(res: { status: number; json: any }, errors: Record<string, string[]>): Promise<void> {
  assert.equal(res.status, 422, JSON.stringify(res.json));
  assert.deepEqual(res.json.errors, errors);
}

test('each bad entry is a 422 under its own key, with Laravel wording', async (t) => {
  const { url, ids } = await start(t);
  const body = (reveal: unknown, extra: Record<string, unknown> = {}) => ({ name: 'X', ...COLORS, reveal, ...extra });
  const to = { users: [ids.dev] };
  // Levels.
  await expect422(await post(url, body([{ to, level: 'peek' }])), { 'reveal.0.level': ['The selected reveal.0.level is invalid.'] });
  await expect422(await post(url, body([{ to }])), { 'reveal.0.level': ['The reveal.0.level field is required.'] });
  await expect422(await post(url, body([{ to, level: 'mask' }])), { 'reveal.0.mask': ['The reveal.0.mask field is required when reveal.0.level is mask.'] });
  await expect422(await post(url, body([{ to, level: 'plain', mask: 'last4' }])), { 'reveal.0.mask': ['The reveal.0.mask field is prohibited unless reveal.0.level is mask.'] });
  // Presets and mask parameters.
  await expect422(await post(url, body([{ to, level: 'mask', mask: 'last3' }])), { 'reveal.0.mask': ['The selected reveal.0.mask is invalid.'] });
  await expect422(await post(url, body([{ to, level: 'mask', mask: 4 }])), { 'reveal.0.mask': ['The selected reveal.0.mask is invalid.'] });
  await expect422(await post(url, body([{ to, level: 'mask', mask: { keep_first: -1, keep_last: 33, char: 'ab' } }])), {
    'reveal.0.mask.keep_first': ['The reveal.0.mask.keep first field must be at least 0.'],
    'reveal.0.mask.keep_last': ['The reveal.0.mask.keep last field must not be greater than 32.'],
    'reveal.0.mask.char': ['The reveal.0.mask.char field must be 1 characters.'],
  });
  await expect422(await post(url, body([{ to, level: 'mask', mask: { keep_first: 1.5, char: '\u200b' } }])), {
    'reveal.0.mask.keep_first': ['The reveal.0.mask.keep first field must be an integer.'],
    'reveal.0.mask.char': ['The reveal.0.mask.char field must be a visible character.'],
  });
  await expect422(await post(url, body([{ to, level: 'mask', mask: { keep_lst: 4 } }])), { 'reveal.0.mask.keep_lst': ['The reveal.0.mask.keep lst field is prohibited.'] });
  assert.equal((await post(url, body([{ to, level: 'mask', mask: { keep_first: 0, keep_last: 32, char: '🔒' } }]))).status, 201, 'the bounds themselves');
  // Audiences, in the forms of the classification's own users and roles.
  await expect422(await post(url, body([{ level: 'token' }])), { 'reveal.0.to': ['The reveal.0.to field is required.'] });
  await expect422(await post(url, body([{ to: {}, level: 'token' }])), { 'reveal.0.to': ['The reveal.0.to field must name at least one user, role or group.'] });
  await expect422(await post(url, body([{ to: { users: [], roles: [], groups: [] }, level: 'token' }])), { 'reveal.0.to': ['The reveal.0.to field must name at least one user, role or group.'] });
  await expect422(await post(url, body([{ to: 'everyone', level: 'token' }])), { 'reveal.0.to': ['The reveal.0.to field must be an array.'] });
  await expect422(await post(url, body([{ to: { users: 'dev@example.com' }, level: 'token' }])), { 'reveal.0.to.users': ['The reveal.0.to.users field must be an array.'] });
  await expect422(await post(url, body([{ to: { users: ['dev@example.com', 999999] }, level: 'token' }])), {
    'reveal.0.to.users.0': ['The reveal.0.to.users.0 field must be an integer.'],
    'reveal.0.to.users.1': ['The selected reveal.0.to.users.1 is invalid.'],
  });
  await expect422(await post(url, body([{ to: { roles: [ids.developer, 999] }, level: 'token' }])), { 'reveal.0.to.roles.1': ['The selected reveal.0.to.roles.1 is invalid.'] });
  await expect422(await post(url, body([{ to: { groups: [7, '', 'g\u202e'] }, level: 'token' }])), {
    'reveal.0.to.groups.0': ['The reveal.0.to.groups.0 field must be a string.'],
    'reveal.0.to.groups.1': ['The reveal.0.to.groups.1 field must be a string.'],
    'reveal.0.to.groups.2': ['The reveal.0.to.groups.2 field must not contain control characters or bidirectional formatting characters.'],
  });
  await expect422(await post(url, body([{ to: { users: [ids.dev], everyone: true }, level: 'token' }])), { 'reveal.0.to.everyone': ['The reveal.0.to.everyone field is prohibited.'] });
  // The grant and the list.
  await expect422(await post(url, body([{ to, level: 'token', levle: 'plain' }])), { 'reveal.0.levle': ['The reveal.0.levle field is prohibited.'] });
  await expect422(await post(url, body(['plain'])), { 'reveal.0': ['The reveal.0 field must be an array.'] });
  await expect422(await post(url, body({ to, level: 'plain' })), { reveal: ['The reveal field must be an array.'] });
  await expect422(await post(url, body(Array.from({ length: 101 }, () => ({ to, level: 'token' })))), { reveal: ['The reveal field must not have more than 100 items.'] });
  await expect422(await post(url, body([{ to, level: 'token' }, { to, level: 'bogus' }])), { 'reveal.1.level': ['The selected reveal.1.level is invalid.'] });
  // The default.
  await expect422(await post(url, body([], { default: 'plain' })), { default: ['The selected default is invalid.'] });
  await expect422(await post(url, body([], { default: 'mask' })), { default_mask: ['The default mask field is required when default is mask.'] });
  await expect422(await post(url, body([], { default: 'token', default_mask: 'last4' })), { default_mask: ['The default mask field is prohibited unless default is mask.'] });
  await expect422(await post(url, body([], { default_mask: 'last4' })), { default_mask: ['The default mask field is prohibited unless default is mask.'] });
  await expect422(await post(url, body([], { default: 'mask', default_mask: { keep_first: 40 } })), { 'default_mask.keep_first': ['The default mask.keep first field must not be greater than 32.'] });
  // PATCH checks what it is sent the same way, and a bad entry changes nothing.
  await expect422(await patch(url, ids.pci, { reveal: [{ to, level: 'peek' }], name: 'Changed' }), { 'reveal.0.level': ['The selected reveal.0.level is invalid.'] });
  assert.equal((await show(url, ids.pci)).json.name, 'PCI');
});

test('changing reveal rules needs a caller admitted to the classification; sending back what it has changes nothing; owners are exempt and logged', async (t) => {
  const running = await start(t);
  const { url, ids } = running;
  const grant = { to: { users: [ids.bill] }, level: 'plain' };
  // Bill (administrator) may update classifications but is not admitted to PCI.
  const refused = await patch(url, ids.pci, { reveal: [grant] }, K.bill);
  assert.equal(refused.status, 403);
  assert.deepEqual(refused.json, { message: 'This action is unauthorized.' });
  assert.equal((await patch(url, ids.pci, { default: 'token' }, K.bill)).status, 403, 'the default is a reveal rule too');
  assert.equal((await patch(url, ids.pci, { default: 'mask', default_mask: 'last4' }, K.bill)).status, 403);
  assert.deepEqual((await show(url, ids.pci)).json.reveal, [], 'nothing changed');
  // What it has already, sent back, is no change: allowed, as for members.
  assert.equal((await patch(url, ids.pci, { reveal: [], default: 'deny', color: 'x' }, K.bill)).status, 200);
  // Nor may Bill create one that reveals anything without admitting himself.
  assert.equal((await post(url, { name: 'Mine', ...COLORS, reveal: [{ to: { roles: [ids.developer] }, level: 'mask', mask: 'last4' }] }, K.bill)).status, 403);
  assert.equal((await post(url, { name: 'Open', ...COLORS, default: 'token' }, K.bill)).status, 403);
  const own = await post(url, { name: 'Own', ...COLORS, reveal: [{ to: { users: [ids.bill] }, level: 'plain' }, { to: { roles: [ids.developer] }, level: 'token' }] }, K.bill);
  assert.equal(own.status, 201, 'a plain grant to himself admits him');
  // Admitted through a plain grant, he may change its rules.
  assert.equal((await patch(url, own.json.id, { reveal: [{ to: { users: [ids.bill] }, level: 'plain' }] }, K.bill)).status, 200);
  // The owner, admitted or not, is exempt, and the activity log says so.
  const other = await post(url, { name: 'Other', ...COLORS, users: [ids.bill] }, K.bill);
  const exempt = await call(url, `${LIST}/${other.json.id}`, { method: 'PATCH', key: K.ada, body: JSON.stringify({ reveal: [grant] }), headers: { 'x-svc-request-id': 'exempt-1' } });
  assert.equal(exempt.status, 200);
  running.app.services.logs.flush();
  const [entry] = await running.app.services.store.logs.listActivity({ requestId: 'exempt-1', limit: 1, offset: 0 });
  assert.match(entry!.description, /Exempt as owner \(break-glass\): the caller is not admitted to classification "Other"\.$/);
});

test('no credential is minted that reads more of a classification through a reveal grant than its caller does', async (t) => {
  const { url, ids } = await start(t);
  // PCI shows developers its plaintext through a role grant; Bill (administrator) sees a mask.
  assert.equal(
    (await patch(url, ids.pci, { reveal: [{ to: { roles: [ids.developer] }, level: 'plain' }, { to: { users: [ids.bill] }, level: 'mask', mask: 'last4' }] })).status,
    200,
  );
  const newDeveloper = { name: 'New Dev', email: 'newdev@example.com', roles: [ids.developer] };
  const user = await call(url, '/api/v3/users', { body: JSON.stringify(newDeveloper), key: K.bill });
  assert.equal(user.status, 403, 'a developer would read PCI plain; Bill only masked');
  const apiKey = await call(url, '/api/v3/api-keys', { body: JSON.stringify({ name: 'dev-key', user_id: ids.dev }), key: K.bill });
  assert.equal(apiKey.status, 403, 'a key of a developer, the same');
  // A mask the caller has too is no escalation; another mask is.
  assert.equal((await patch(url, ids.pci, { reveal: [{ to: { roles: [ids.developer] }, level: 'mask', mask: 'last4' }, { to: { users: [ids.bill] }, level: 'mask', mask: 'last4' }] })).status, 200);
  assert.equal((await call(url, '/api/v3/api-keys', { body: JSON.stringify({ name: 'dev-key', user_id: ids.dev }), key: K.bill })).status, 201);
  assert.equal((await patch(url, ids.pci, { reveal: [{ to: { roles: [ids.developer] }, level: 'mask', mask: 'first6last4' }, { to: { users: [ids.bill] }, level: 'mask', mask: 'last4' }] })).status, 200);
  assert.equal((await call(url, '/api/v3/api-keys', { body: JSON.stringify({ name: 'dev-key-2', user_id: ids.dev }), key: K.bill })).status, 403);
  // Token and redact show nothing of a value: no escalation.
  assert.equal((await patch(url, ids.pci, { reveal: [{ to: { roles: [ids.developer] }, level: 'token' }] })).status, 200);
  assert.equal((await call(url, '/api/v3/users', { body: JSON.stringify(newDeveloper), key: K.bill })).status, 201);
});
