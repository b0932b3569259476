import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { App } from '../../src/app.ts';
import { call, KEYS, reseed, SEED, startApp } from '../support/app.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const LIST = '/api/v3/classifications';
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const SEED_WITHOUT_CLASSIFICATIONS = SEED.slice(0, SEED.indexOf('  classifications:'));
const COLORS = { bg_color: '#aa0000', fg_color: '#FFFFFF' };

interface Named {
  name: string;
}

const names = (res: { json: { data: Named[] } }) => res.json.data.map((c) => c.name);
const get = (url: string, path: string, key?: string) => call(url, path, { method: 'GET', key });
const post = (url: string, body: unknown, key?: string) => call(url, LIST, { body: JSON.stringify(body), key });
const patch = (url: string, id: number | string, body: unknown, key?: string) =>
  call(url, `${LIST}/${id}`, { method: 'PATCH', body: JSON.stringify(body), key });

function ids(app: App) {
  const { store } = app.services;
  const must = <T>(value: T | undefined, what: string): T => {
    assert.ok(value !== undefined, `seed has ${what}`);
    return value;
  };
  return {
    ada: must(syncRepositories(store).users.findByEmail('ada@example.com'), 'ada').id,
    dev: must(syncRepositories(store).users.findByEmail('dev@example.com'), 'dev').id,
    owner: must(syncRepositories(store).roles.findByName('owner'), 'owner').id,
    developer: must(syncRepositories(store).roles.findByName('developer'), 'developer').id,
    viewer: must(syncRepositories(store).roles.findByName('viewer'), 'viewer').id,
    workspace: must(syncRepositories(store).configurations.findByName('workspace'), 'workspace').id,
    payments: must(syncRepositories(store).configurations.findByName('payments'), 'payments').id,
    phi: (syncRepositories(store).classifications.findBySlug('phi'))?.id ?? 0,
    ward: (syncRepositories(store).classifications.findBySlug('ward'))?.id ?? 0,
  };
}

function activityOf(app: App, requestId: string | null) {
  app.services.logs.flush();
  return syncRepositories(app.services.store).logs.listActivity({ requestId: requestId ?? '', limit: 10, offset: 0 });
}

/** Inserts `count` classifications straight into the store, in one transaction. */
async function insertMany(app: App, count: number, name = (i: number) => `Item ${String(i).padStart(4, '0')}`): Promise<void> {
  const { store } = app.services;
  await store.transaction(async (tx) => {
    for (let i = 1; i <= count; i++) await tx.classifications.create({ name: name(i), bgColor: '#000000', fgColor: '#ffffff' });
  });
}

/** A GET with a Host header of our choosing (fetch does not let one set it). */
function getWithHost(url: string, path: string, host: string): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { headers: { host, 'x-svc-authorization': KEYS.owner } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString()) }));
    });
    req.on('error', reject);
    req.end();
  });
}

// ---------------------------------------------------------------------------------------
// Shapes

test('GET /classifications lists the seed, sorted by name, in the page envelope', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  const res = await get(url, LIST);
  assert.equal(res.status, 200);
  assert.deepEqual(names(res), ['Nobody', 'PCI', 'PHI', 'Ward']);
  assert.deepEqual(
    { ...res.json, data: undefined, links: undefined },
    {
      current_page: 1,
      data: undefined,
      first_page_url: `${url}${LIST}?page=1`,
      from: 1,
      last_page: 1,
      last_page_url: `${url}${LIST}?page=1`,
      links: undefined,
      next_page_url: null,
      path: `${url}${LIST}`,
      per_page: 10,
      prev_page_url: null,
      to: 4,
      total: 4,
    },
  );
  const phi = res.json.data[2];
  assert.deepEqual(Object.keys(phi), [
    'id', 'name', 'slug', 'description', 'bg_color', 'fg_color', 'emoji', 'provider_container_id', 'providers', 'users', 'roles', 'reveal', 'default', 'default_mask', 'created_at', 'updated_at',
  ]);
  assert.equal(phi.id, id.phi);
  assert.equal(phi.slug, 'phi');
  assert.equal(phi.bg_color, '#aa0000');
  assert.equal(phi.description, null);
  assert.equal(phi.emoji, null);
  assert.match(phi.created_at, ISO);
  assert.deepEqual(phi.users.map((u: { email: string }) => u.email), ['ada@example.com']);
  assert.deepEqual(phi.users[0].roles.map((r: Named) => r.name), ['owner']);
  assert.deepEqual(res.json.data[1].roles.map((r: Named) => r.name), ['owner'], 'PCI lists the owner role');
  assert.ok(res.json.data[1].roles[0].permissions.some((p: Named) => p.name === 'classifications.view'));
  const ward = res.json.data[3];
  assert.deepEqual(ward.providers, [{ uuid: id.workspace, name: 'workspace', gws_groups: [{ id: 'g-nurses' }] }]);
});

test('POST /classifications creates a classification with members and records the activity', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  const res = await post(url, {
    name: 'Patient Data!',
    ...COLORS,
    description: 'Health records',
    emoji: '🩺',
    provider_container_id: id.workspace,
    gws_groups: [{ id: 'g-doctors', name: 'Doctors', email: 'doctors@example.com' }],
    users: [id.dev, id.dev],
    roles: [id.developer],
  });
  assert.equal(res.status, 201);
  const created = res.json;
  assert.equal(typeof created.id, 'number');
  assert.equal(created.name, 'Patient Data!');
  assert.equal(created.slug, 'patient-data');
  assert.equal(created.description, 'Health records');
  assert.equal(created.bg_color, '#aa0000');
  assert.equal(created.fg_color, '#FFFFFF');
  assert.equal(created.emoji, '🩺');
  assert.equal(created.provider_container_id, id.workspace);
  assert.deepEqual(created.providers, [{ uuid: id.workspace, name: 'workspace', gws_groups: [{ id: 'g-doctors', name: 'Doctors', email: 'doctors@example.com' }] }]);
  assert.deepEqual(created.users.map((u: { id: number }) => u.id), [id.dev]);
  assert.deepEqual(created.roles.map((r: Named) => r.name), ['developer']);

  const again = await get(url, `${LIST}/${created.id}`);
  assert.equal(again.status, 200);
  assert.deepEqual(again.json, created);

  const [entry, ...rest] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(rest.length, 0);
  assert.equal(entry?.action, 'classification.created');
  assert.equal(entry?.userId, id.ada);
  assert.equal(entry?.causerEmail, 'ada@example.com');
  assert.match(entry?.description ?? '', /"Patient Data!"/);
});

test('POST /classifications gives -2, -3 slugs to repeated names and takes minimal bodies', async (t) => {
  const { url } = await startApp(t);
  const a = await post(url, { name: 'phi', ...COLORS });
  const b = await post(url, { name: 'PHI!', ...COLORS, description: null, emoji: null, users: [], roles: [] });
  assert.equal(a.status, 201);
  assert.equal(b.status, 201);
  assert.equal(a.json.slug, 'phi-2');
  assert.equal(b.json.slug, 'phi-3');
  assert.deepEqual([b.json.users, b.json.roles, b.json.providers, b.json.provider_container_id], [[], [], [], null]);
});

test('GET /classifications/{id} answers 404 for unknown ids, slugs and non-digits', async (t) => {
  const { url, app } = await startApp(t);
  const ok = await get(url, `${LIST}/${ids(app).phi}`);
  assert.equal(ok.status, 200);
  assert.equal(ok.json.name, 'PHI');
  for (const bad of ['999999', 'phi', '1x', '-1', '1.0', '99999999999999999999']) {
    const res = await get(url, `${LIST}/${bad}`);
    assert.equal(res.status, 404, bad);
    assert.deepEqual(res.json, { message: 'Not found.' });
  }
  for (const method of ['PATCH', 'DELETE']) {
    const res = await call(url, `${LIST}/999999`, { method, body: method === 'PATCH' ? '{}' : undefined });
    assert.equal(res.status, 404, method);
    assert.deepEqual(res.json, { message: 'Not found.' });
  }
});

test('PATCH /classifications/{id} changes only what is sent and keeps the slug', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  const renamed = await patch(url, id.phi, { name: 'Protected Health', description: 'PHI data', roles: [id.viewer] });
  assert.equal(renamed.status, 200);
  assert.equal(renamed.json.name, 'Protected Health');
  assert.equal(renamed.json.slug, 'phi', 'headers and relay routes name classifications by slug');
  assert.equal(renamed.json.description, 'PHI data');
  assert.equal(renamed.json.bg_color, '#aa0000');
  assert.deepEqual(renamed.json.users.map((u: { id: number }) => u.id), [id.ada], 'users were not sent');
  assert.deepEqual(renamed.json.roles.map((r: Named) => r.name), ['viewer']);
  const [entry] = activityOf(app, renamed.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'classification.updated');
  assert.match(entry?.description ?? '', /"Protected Health"/);

  const cleared = await patch(url, id.phi, { description: '', emoji: null, users: [] });
  assert.equal(cleared.status, 200);
  assert.equal(cleared.json.description, null);
  assert.deepEqual(cleared.json.users, []);
  assert.deepEqual(cleared.json.roles.map((r: Named) => r.name), ['viewer']);

  const grouped = await patch(url, id.phi, { provider_container_id: id.workspace, gws_groups: [{ id: 'g-a' }] });
  assert.equal(grouped.status, 200);
  assert.equal(grouped.json.provider_container_id, id.workspace);
  assert.deepEqual(grouped.json.providers, [{ uuid: id.workspace, name: 'workspace', gws_groups: [{ id: 'g-a' }] }]);
  const sameContainer = await patch(url, id.phi, { provider_container_id: id.workspace });
  assert.deepEqual(sameContainer.json.providers, grouped.json.providers, 'naming the same container again keeps its groups');
  const groupsReplaced = await patch(url, id.phi, { gws_groups: [] });
  assert.deepEqual(groupsReplaced.json.providers, [{ uuid: id.workspace, name: 'workspace', gws_groups: [] }]);
  const unlinked = await patch(url, id.phi, { provider_container_id: null });
  assert.equal(unlinked.json.provider_container_id, null);
  assert.deepEqual(unlinked.json.providers, []);

  const unchanged = await patch(url, id.phi, {});
  assert.equal(unchanged.status, 200);
  assert.equal(unchanged.json.name, 'Protected Health');
});

test('DELETE /classifications/{id} answers 204, then 404', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  const res = await call(url, `${LIST}/${id.phi}`, { method: 'DELETE' });
  assert.equal(res.status, 204);
  assert.equal(res.text, '');
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'classification.deleted');
  assert.match(entry?.description ?? '', /"PHI"/);
  assert.equal((await get(url, `${LIST}/${id.phi}`)).status, 404);
  assert.equal((await call(url, `${LIST}/${id.phi}`, { method: 'DELETE' })).status, 404);
  assert.deepEqual(names(await get(url, LIST)), ['Nobody', 'PCI', 'Ward']);
});

// ---------------------------------------------------------------------------------------
// Authentication and permissions

test('every classification endpoint answers 401 without a valid, active key', async (t) => {
  const { url, app } = await startApp(t);
  const { store } = app.services;
  const dev = await store.apiKeys.findByName('dev');
  assert.ok(dev);
  assert.equal((await get(url, LIST, KEYS.dev)).status, 200, 'the key works before it is revoked');
  await store.apiKeys.revoke(dev.id);
  const requests: Array<[string, string, string | undefined]> = [
    ['GET', LIST, undefined],
    ['POST', LIST, JSON.stringify({ name: 'x', ...COLORS })],
    ['GET', `${LIST}/1`, undefined],
    ['PATCH', `${LIST}/1`, '{}'],
    ['DELETE', `${LIST}/1`, undefined],
  ];
  for (const [method, path, body] of requests) {
    for (const key of [null, 'svc_notakey', `svc_${'x'.repeat(40)}`, KEYS.dev]) {
      const res = await call(url, path, { method, body, key });
      assert.equal(res.status, 401, `${method} ${path} with ${key}`);
      assert.deepEqual(res.json, { message: 'Unauthorized.' });
    }
  }
  assert.equal((await store.classifications.list()).length, 4, 'nothing was created or deleted');
});

test('viewers may read but not write; a key scoped to other permissions may not read', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  assert.equal((await get(url, LIST, KEYS.viewer)).status, 200);
  assert.equal((await get(url, `${LIST}/${id.phi}`, KEYS.viewer)).status, 200);
  const writes = [
    await post(url, { name: 'Nope', ...COLORS }, KEYS.viewer),
    await patch(url, id.phi, { name: 'Nope' }, KEYS.viewer),
    await call(url, `${LIST}/${id.phi}`, { method: 'DELETE', key: KEYS.viewer }),
    await post(url, { name: 'Nope', ...COLORS }, KEYS.dev),
  ];
  for (const res of writes) {
    assert.equal(res.status, 403);
    assert.deepEqual(res.json, { message: 'User does not have the right permissions.' });
  }
  const scoped = await get(url, LIST, KEYS.encryptOnly);
  assert.equal(scoped.status, 403);
  assert.deepEqual(names(await get(url, LIST)), ['Nobody', 'PCI', 'PHI', 'Ward'], 'nothing was written');
});

// ---------------------------------------------------------------------------------------
// Validation

async function expect422(res: Awaited<ReturnType<typeof call>>, message: string, errors: Record<string, string[]>): Promise<void> {
  assert.equal(res.status, 422, res.text);
  assert.deepEqual(res.json, { message, errors });
}

test('POST /classifications validates every field with Laravel messages', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  await expect422(await post(url, {}), 'The name field is required. (and 2 more errors)', {
    name: ['The name field is required.'],
    bg_color: ['The bg color field is required.'],
    fg_color: ['The fg color field is required.'],
  });
  await expect422(await post(url, { name: 'x'.repeat(33), ...COLORS }), 'The name field must not be greater than 32 characters.', {
    name: ['The name field must not be greater than 32 characters.'],
  });
  assert.equal((await post(url, { name: '🩺'.repeat(32), ...COLORS })).status, 201, '32 characters, not bytes');
  await expect422(await post(url, { name: 5, bg_color: 'red', fg_color: '#12345g' }), 'The name field must be a string. (and 2 more errors)', {
    name: ['The name field must be a string.'],
    bg_color: ['The bg color field format is invalid.'],
    fg_color: ['The fg color field format is invalid.'],
  });
  await expect422(await post(url, { name: 'x', ...COLORS, bg_color: '#aa00001' }), 'The bg color field format is invalid.', {
    bg_color: ['The bg color field format is invalid.'],
  });
  await expect422(
    await post(url, { name: 'x', ...COLORS, description: 'd'.repeat(256), emoji: 'e'.repeat(33) }),
    'The description field must not be greater than 255 characters. (and 1 more error)',
    {
      description: ['The description field must not be greater than 255 characters.'],
      emoji: ['The emoji field must not be greater than 32 characters.'],
    },
  );
  await expect422(await post(url, { name: 'x', ...COLORS, gws_groups: [{ id: 'g1' }] }), 'The provider container id field is required when gws groups is present.', {
    provider_container_id: ['The provider container id field is required when gws groups is present.'],
  });
  await expect422(
    await post(url, { name: 'x', ...COLORS, provider_container_id: id.workspace, gws_groups: [{}, { id: 5, email: 'nope' }, 'g3'] }),
    'The gws groups.0.id field is required. (and 3 more errors)',
    {
      'gws_groups.0.id': ['The gws groups.0.id field is required.'],
      'gws_groups.1.id': ['The gws groups.1.id field must be a string.'],
      'gws_groups.1.email': ['The gws groups.1.email field must be a valid email address.'],
      'gws_groups.2': ['The gws groups.2 field must be an array.'],
    },
  );
  for (const container of [id.payments, '00000000-0000-4000-8000-000000000000', 'workspace']) {
    await expect422(await post(url, { name: 'x', ...COLORS, provider_container_id: container }), 'The selected provider container id is invalid.', {
      provider_container_id: ['The selected provider container id is invalid.'],
    });
  }
  await expect422(await post(url, { name: 'x', ...COLORS, provider_container_id: 7 }), 'The provider container id field must be a string.', {
    provider_container_id: ['The provider container id field must be a string.'],
  });
  await expect422(await post(url, { name: 'x', ...COLORS, users: [id.ada, 999999, 'x'], roles: [999] }), 'The selected users.1 is invalid. (and 2 more errors)', {
    'users.1': ['The selected users.1 is invalid.'],
    'users.2': ['The users.2 field must be an integer.'],
    'roles.0': ['The selected roles.0 is invalid.'],
  });
  await expect422(await post(url, { name: 'x', ...COLORS, users: 'all' }), 'The users field must be an array.', {
    users: ['The users field must be an array.'],
  });
  await expect422(await post(url, { name: 'x', ...COLORS, users: [999999] }), 'The selected users.0 is invalid.', {
    'users.0': ['The selected users.0 is invalid.'],
  });
  assert.equal((await app.services.store.classifications.list()).length, 5, 'only the valid 32-character name was created');
  assert.equal((await call(url, LIST, { body: '[1]' })).status, 400);
  assert.equal((await call(url, LIST, { body: '{"name":', })).status, 400);
  assert.equal((await call(url, LIST, { body: '{}', contentType: 'text/plain' })).status, 415);
});

test('PATCH /classifications/{id} applies the create rules to the fields it sends', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  await expect422(await patch(url, id.phi, { name: '', bg_color: null }), 'The name field is required. (and 1 more error)', {
    name: ['The name field is required.'],
    bg_color: ['The bg color field is required.'],
  });
  await expect422(await patch(url, id.phi, { fg_color: '#fff' }), 'The fg color field format is invalid.', {
    fg_color: ['The fg color field format is invalid.'],
  });
  await expect422(await patch(url, id.phi, { gws_groups: [{ id: 'g' }] }), 'The provider container id field is required when gws groups is present.', {
    provider_container_id: ['The provider container id field is required when gws groups is present.'],
  });
  await expect422(await patch(url, id.phi, { roles: [id.owner, 12345] }), 'The selected roles.1 is invalid.', {
    'roles.1': ['The selected roles.1 is invalid.'],
  });
  const phi = await app.services.store.classifications.findById(id.phi);
  assert.equal(phi?.name, 'PHI');
  assert.equal(phi?.fgColor, '#ffffff');
});

// ---------------------------------------------------------------------------------------
// List filters

test('search matches name, slug and description, case-insensitively, with % and _ literal', async (t) => {
  const { url, app } = await startApp(t);
  const { store } = app.services;
  await store.classifications.create({ name: 'Foo Bar', bgColor: '#000000', fgColor: '#ffffff' });
  await store.classifications.create({ name: 'Card data', description: 'Primary Account Numbers', bgColor: '#000000', fgColor: '#ffffff' });
  await store.classifications.create({ name: '100% safe', bgColor: '#000000', fgColor: '#ffffff' });
  await store.classifications.create({ name: '100 safe', bgColor: '#000000', fgColor: '#ffffff' });
  await store.classifications.create({ name: 'a_b', bgColor: '#000000', fgColor: '#ffffff' });
  await store.classifications.create({ name: 'axb', bgColor: '#000000', fgColor: '#ffffff' });
  const search = async (q: string) => names(await get(url, `${LIST}?search=${encodeURIComponent(q)}`));
  assert.deepEqual(await search('phi'), ['PHI']);
  assert.deepEqual(await search('WaR'), ['Ward']);
  assert.deepEqual(await search('foo-bar'), ['Foo Bar'], 'slug');
  assert.deepEqual(await search('account num'), ['Card data'], 'description');
  assert.deepEqual(await search('100%'), ['100% safe']);
  assert.deepEqual(await search('a_b'), ['a_b']);
  assert.deepEqual(await search('nothing like it'), []);
  assert.equal((await get(url, `${LIST}?search=`)).json.total, 10, 'an empty search matches everything');
  await expect422(await get(url, `${LIST}?search=${'s'.repeat(256)}`), 'The search field must not be greater than 255 characters.', {
    search: ['The search field must not be greater than 255 characters.'],
  });
});

test('sort and direction order the list, ties broken by id; unknown values are 422', async (t) => {
  const { url, app } = await startApp(t);
  const { store } = app.services;
  const same = [1, 2, 3].map(() => (syncRepositories(store).classifications.create({ name: 'Same', bgColor: '#000000', fgColor: '#ffffff' })).id);
  await store.classifications.create({ name: 'alpha', bgColor: '#000000', fgColor: '#ffffff' });
  const list = async (q: string) => (await get(url, `${LIST}?${q}`)).json.data as Array<{ id: number; name: string }>;
  assert.deepEqual((await list('')).map((c) => c.name), ['alpha', 'Nobody', 'PCI', 'PHI', 'Same', 'Same', 'Same', 'Ward'], 'names sort case-insensitively');
  assert.deepEqual((await list('sort=name&direction=desc')).map((c) => c.name), ['Ward', 'Same', 'Same', 'Same', 'PHI', 'PCI', 'Nobody', 'alpha']);
  assert.deepEqual((await list('search=same')).map((c) => c.id), same);
  assert.deepEqual((await list('search=same&direction=desc')).map((c) => c.id), same.toReversed());
  const byId = (await list('sort=id')).map((c) => c.id);
  assert.deepEqual(byId, byId.toSorted((a, b) => a - b));
  assert.deepEqual((await list('sort=id&direction=desc')).map((c) => c.id), byId.toReversed());
  // Created in one burst, most rows share a millisecond: id decides.
  assert.deepEqual((await list('sort=created_at')).map((c) => c.id), byId);
  assert.deepEqual((await list('sort=created_at&direction=desc')).map((c) => c.id), byId.toReversed());

  await expect422(await get(url, `${LIST}?sort=slug`), 'The selected sort is invalid.', { sort: ['The selected sort is invalid.'] });
  await expect422(await get(url, `${LIST}?direction=DESC`), 'The selected direction is invalid.', { direction: ['The selected direction is invalid.'] });
  await expect422(await get(url, `${LIST}?sort=name;drop&direction=up&per_page=500`), 'The selected sort is invalid. (and 2 more errors)', {
    sort: ['The selected sort is invalid.'],
    direction: ['The selected direction is invalid.'],
    per_page: ['The per page field must not be greater than 100.'],
  });
});

test('user, roles and providers filter by membership, in both list syntaxes, and combine', async (t) => {
  const { url, app } = await startApp(t);
  const id = ids(app);
  const created = await post(url, { name: 'Dev Stuff', ...COLORS, users: [id.ada, id.dev], roles: [id.developer] });
  assert.equal(created.status, 201);
  const list = async (q: string) => names(await get(url, `${LIST}?${q}`));
  assert.deepEqual(await list(`user=${id.ada}`), ['Dev Stuff', 'PHI']);
  assert.deepEqual(await list(`user=${id.dev}`), ['Dev Stuff']);
  assert.deepEqual(await list('user=999999'), []);
  assert.deepEqual(await list(`roles=${id.owner}`), ['PCI']);
  assert.deepEqual(await list(`roles=${id.owner},${id.developer}`), ['Dev Stuff', 'PCI']);
  assert.deepEqual(await list(`roles[]=${id.owner}&roles[]=${id.developer}`), ['Dev Stuff', 'PCI']);
  assert.deepEqual(await list(`roles%5B%5D=${id.developer}`), ['Dev Stuff'], 'brackets may be percent-encoded');
  assert.deepEqual(await list(`providers=${id.workspace}`), ['Ward']);
  assert.deepEqual(await list(`providers[]=${id.workspace.toUpperCase()}`), ['Ward']);
  assert.deepEqual(await list('providers=00000000-0000-4000-8000-000000000000'), []);
  assert.deepEqual(await list(`user=${id.ada}&roles=${id.developer}`), ['Dev Stuff'], 'filters combine with AND');
  assert.deepEqual(await list(`user=${id.ada}&search=ph`), ['PHI']);


  // Full pages and pages past the end take their total from a count query for the filters' shape.
  const total = async (q: string) => (await get(url, `${LIST}?${q}`)).json.total;
  const counted: Array<[string, number]> = [
    [`user=${id.ada}`, 2],
    [`roles=${id.owner},${id.developer}`, 2],
    [`providers=${id.workspace}`, 1],
    [`user=${id.ada}&roles=${id.developer}`, 1],
    [`user=${id.ada}&search=ph`, 1],
    [`roles=${id.owner}&providers=${id.workspace}`, 0],
    [`user=${id.dev}&roles=${id.developer}&providers=${id.workspace}&search=x`, 0],
    ['search=p', 2],
    ['', 5],
  ];
  for (const [q, expected] of counted) {
    assert.equal(await total(`${q}&per_page=1`), expected, `${q}, full first page`);
    assert.equal(await total(`${q}&per_page=1&page=9`), expected, `${q}, past the end`);
  }

  await expect422(await get(url, `${LIST}?user=ada`), 'The user field must be an integer.', { user: ['The user field must be an integer.'] });
  await expect422(await get(url, `${LIST}?roles=1,x`), 'The roles field must be an array of integers.', { roles: ['The roles field must be an array of integers.'] });
  await expect422(await get(url, `${LIST}?providers=1`), 'The providers field must be an array of UUIDs.', {
    providers: ['The providers field must be an array of UUIDs.'],
  });
});

// ---------------------------------------------------------------------------------------
// Pagination

function expectedLinks(base: string, current: number, pages: Array<number | null>, last: number) {
  const url = (p: number) => `${base}?page=${p}`;
  return [
    { url: current > 1 ? url(current - 1) : null, label: '&laquo; Previous', page: current > 1 ? current - 1 : null, active: false },
    ...pages.map((p) => (p === null ? { url: null, label: '...', page: null, active: false } : { url: url(p), label: String(p), page: p, active: p === current })),
    { url: current < last ? url(current + 1) : null, label: 'Next &raquo;', page: current < last ? current + 1 : null, active: false },
  ];
}

test('the page envelope at 0, 1, 10 and 11 items', async (t) => {
  const { url, app } = await startApp(t, '', SEED_WITHOUT_CLASSIFICATIONS);
  const base = `${url}${LIST}`;
  const page = async (q = '') => (await get(url, `${LIST}${q}`)).json;

  const empty = await page();
  assert.deepEqual(empty, {
    current_page: 1,
    data: [],
    first_page_url: `${base}?page=1`,
    from: null,
    last_page: 1,
    last_page_url: `${base}?page=1`,
    links: expectedLinks(base, 1, [1], 1),
    next_page_url: null,
    path: base,
    per_page: 10,
    prev_page_url: null,
    to: null,
    total: 0,
  });

  insertMany(app, 1);
  const one = await page();
  assert.deepEqual([one.total, one.from, one.to, one.last_page, one.data.length, one.next_page_url], [1, 1, 1, 1, 1, null]);
  assert.deepEqual(one.links, expectedLinks(base, 1, [1], 1));

  insertMany(app, 9, (i) => `More ${i}`);
  const ten = await page();
  assert.deepEqual([ten.total, ten.from, ten.to, ten.last_page, ten.data.length, ten.next_page_url, ten.last_page_url], [10, 1, 10, 1, 10, null, `${base}?page=1`]);

  insertMany(app, 1, () => 'Zulu');
  const first = await page();
  assert.deepEqual([first.total, first.from, first.to, first.last_page, first.data.length], [11, 1, 10, 2, 10]);
  assert.equal(first.next_page_url, `${base}?page=2`);
  assert.equal(first.prev_page_url, null);
  assert.equal(first.last_page_url, `${base}?page=2`);
  assert.deepEqual(first.links, expectedLinks(base, 1, [1, 2], 2));
  const second = await page('?page=2');
  assert.deepEqual([second.current_page, second.total, second.from, second.to, second.last_page], [2, 11, 11, 11, 2]);
  assert.deepEqual(names({ json: second }), ['Zulu']);
  assert.equal(second.next_page_url, null);
  assert.equal(second.prev_page_url, `${base}?page=1`);
  assert.deepEqual(second.links, expectedLinks(base, 2, [1, 2], 2));
  const past = await page('?page=3');
  assert.deepEqual([past.current_page, past.total, past.from, past.to, past.data.length, past.next_page_url], [3, 11, null, null, 0, null]);
  assert.equal(past.prev_page_url, `${base}?page=2`);
});

test('the page envelope at 1,000 items: windows, per_page, and other parameters kept in the URLs', async (t) => {
  const { url, app } = await startApp(t, '', SEED_WITHOUT_CLASSIFICATIONS);
  insertMany(app, 1000);
  const base = `${url}${LIST}`;
  const page = async (q: string) => (await get(url, `${LIST}?${q}`)).json;

  const first = await page('');
  assert.deepEqual([first.total, first.last_page, first.from, first.to], [1000, 100, 1, 10]);
  assert.equal(first.data[0].name, 'Item 0001');
  assert.deepEqual(first.links, expectedLinks(base, 1, [1, 2, 3, 4, 5, 6, 7, 8, null, 99, 100], 100));

  const middle = await page('page=50');
  assert.deepEqual([middle.current_page, middle.from, middle.to], [50, 491, 500]);
  assert.deepEqual(names({ json: middle }), Array.from({ length: 10 }, (_, i) => `Item ${String(491 + i).padStart(4, '0')}`));
  assert.deepEqual(middle.links, expectedLinks(base, 50, [1, 2, null, 47, 48, 49, 50, 51, 52, 53, null, 99, 100], 100));

  const end = await page('page=100');
  assert.deepEqual([end.from, end.to, end.next_page_url], [991, 1000, null]);
  assert.deepEqual(end.links, expectedLinks(base, 100, [1, 2, null, 93, 94, 95, 96, 97, 98, 99, 100], 100));

  const big = await page('per_page=100&page=10&sort=id&direction=desc');
  assert.deepEqual([big.per_page, big.last_page, big.from, big.to, big.data.length], [100, 10, 901, 1000, 100]);
  assert.equal(big.data[0].name, 'Item 0100', 'page 10 of ids descending starts at the 100th id');
  assert.equal(big.first_page_url, `${base}?per_page=100&sort=id&direction=desc&page=1`);
  assert.equal(big.prev_page_url, `${base}?per_page=100&sort=id&direction=desc&page=9`);
  assert.equal(big.next_page_url, null);

  const filtered = await page('search=item%2000&per_page=25');
  assert.deepEqual([filtered.total, filtered.last_page, filtered.to], [99, 4, 25], 'Item 0001 … Item 0099');
  assert.equal(filtered.next_page_url, `${base}?search=item+00&per_page=25&page=2`);

  await expect422(await get(url, `${LIST}?per_page=101`), 'The per page field must not be greater than 100.', {
    per_page: ['The per page field must not be greater than 100.'],
  });
  await expect422(await get(url, `${LIST}?per_page=0&page=x`), 'The per page field must be at least 1. (and 1 more error)', {
    per_page: ['The per page field must be at least 1.'],
    page: ['The page field must be an integer.'],
  });
});

test('links use server.public_url when set, else the request Host', async (t) => {
  const viaPublic = await startApp(t, '', SEED, { publicUrl: 'https://svc.example.com/edge/' });
  const res = await get(viaPublic.url, `${LIST}?per_page=2&page=2`);
  assert.equal(res.status, 200);
  assert.equal(res.json.path, `https://svc.example.com/edge${LIST}`);
  assert.equal(res.json.prev_page_url, `https://svc.example.com/edge${LIST}?per_page=2&page=1`);
  assert.equal(res.json.links[1].url, `https://svc.example.com/edge${LIST}?per_page=2&page=1`);

  const viaHost = await startApp(t);
  const hosted = await getWithHost(viaHost.url, `${LIST}?per_page=3`, 'sidecar.internal:8443');
  assert.equal(hosted.status, 200);
  assert.equal(hosted.json.path, `http://sidecar.internal:8443${LIST}`);
  assert.equal(hosted.json.next_page_url, `http://sidecar.internal:8443${LIST}?per_page=3&page=2`);
});

// ---------------------------------------------------------------------------------------
// Fail closed (DESIGN §13)

const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';
const DENIED = [403, { message: 'User does not have the right permissions.' }];

async function encryptAs(url: string, classification: string): Promise<string> {
  const res = await call(url, ENC, { body: '{"dx":"flu"}', headers: { 'x-svc-fields': 'dx', 'x-svc-classification': classification } });
  assert.equal(res.status, 200, res.text);
  return res.text;
}

async function decryptAs(url: string, body: string, key: string): Promise<unknown> {
  const res = await call(url, DEC, { body, key });
  return res.status === 200 ? res.json.dx : [res.status, res.json];
}

test('regression: a deleted classification\'s id is never given again, and its tokens stay denied', async (t) => {
  const { url, app } = await startApp(t);
  const { ada } = ids(app);
  const first = await post(url, { name: 'Doomed', ...COLORS, users: [ada] });
  assert.equal(first.status, 201);
  const token = await encryptAs(url, first.json.slug);
  assert.equal(await decryptAs(url, token, KEYS.owner), 'flu');
  assert.equal((await call(url, `${LIST}/${first.json.id}`, { method: 'DELETE' })).status, 204);
  assert.deepEqual(await decryptAs(url, token, KEYS.owner), DENIED, 'no classification, no access');

  // The same name, the same members: still another classification, under a new id.
  const second = await post(url, { name: 'Doomed', ...COLORS, users: [ada] });
  assert.equal(second.status, 201);
  assert.ok(second.json.id > first.json.id, `the new one got ${second.json.id}, the deleted one had ${first.json.id}`);
  assert.deepEqual(await decryptAs(url, token, KEYS.owner), DENIED, 'the token of the deleted one is never matched to the new one');
  assert.equal(await decryptAs(url, await encryptAs(url, String(second.json.id)), KEYS.owner), 'flu');
});

test('regression: membership never empties into access — a deleted provider configuration, a removed last member, a seed that drops them', async (t) => {
  const running = await startApp(t);
  const { url, app } = running;
  const { phi, workspace, ward: wardId } = ids(app);
  const ward = await encryptAs(url, 'ward');
  const phiToken = await encryptAs(url, 'phi');
  const pci = await encryptAs(url, 'pci');
  assert.equal(await decryptAs(url, ward, KEYS.grace), 'flu', 'grace is in the provider group g-nurses');
  assert.equal(await decryptAs(url, phiToken, KEYS.owner), 'flu', 'ada is listed');
  assert.equal(await decryptAs(url, pci, KEYS.owner), 'flu', 'ada holds the owner role');

  // Deleting Ward's only provider configuration takes its membership with it (ON DELETE CASCADE).
  assert.equal((await call(url, `/api/v3/configurations/${workspace}`, { method: 'DELETE' })).status, 204);
  assert.deepEqual((await get(url, `${LIST}/${wardId}`)).json.providers, []);
  for (const key of [KEYS.grace, KEYS.owner, KEYS.dev]) assert.deepEqual(await decryptAs(url, ward, key), DENIED, 'Ward admits nobody now');

  // Removing PHI's last member.
  assert.equal((await patch(url, phi, { users: [] })).status, 200);
  for (const key of [KEYS.owner, KEYS.dev, KEYS.grace]) assert.deepEqual(await decryptAs(url, phiToken, key), DENIED, 'PHI admits nobody now');

  // A seed reload that no longer lists PCI's role.
  await reseed(running, SEED.replace('fg_color: "#ffffff", roles: [owner] }', 'fg_color: "#ffffff", roles: [] }'));
  assert.deepEqual((await app.services.store.classifications.members((await app.services.store.classifications.findBySlug('pci'))!.id)).roleIds, []);
  for (const key of [KEYS.owner, KEYS.dev]) assert.deepEqual(await decryptAs(url, pci, key), DENIED, 'PCI admits nobody now');
});
