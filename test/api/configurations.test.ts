import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { App } from '../../src/app.ts';
import { call, KEYS, startApp } from '../support/app.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const TOKEN = /^svc:[1-9][0-9]*:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;
const LIST = '/api/v3/configurations';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function json(body: unknown): string {
  return JSON.stringify(body);
}

function valuesOf(configuration: { values: Array<{ key: string; value: string }> }): Record<string, string> {
  return Object.fromEntries(configuration.values.map((kv) => [kv.key, kv.value]));
}

function activityOf(app: App, requestId: string | null) {
  app.services.logs.flush();
  return syncRepositories(app.services.store).logs.listActivity({ requestId: requestId ?? '', limit: 10, offset: 0 });
}

test('GET /configurations returns the page envelope of every configuration', async (t) => {
  const { url } = await startApp(t);
  const res = await call(url, LIST, { method: 'GET' });
  assert.equal(res.status, 200);
  assert.equal(res.json.total, 4);
  assert.equal(res.json.per_page, 10);
  assert.equal(res.json.current_page, 1);
  assert.equal(res.json.last_page, 1);
  assert.equal(res.json.from, 1);
  assert.equal(res.json.to, 4);
  assert.equal(res.json.path, `${url}${LIST}`);
  assert.equal(res.json.first_page_url, `${url}${LIST}?page=1`);
  assert.equal(res.json.next_page_url, null);
  assert.equal(res.json.prev_page_url, null);
  assert.deepEqual(
    res.json.data.map((c: { name: string }) => c.name),
    ['payments', 'other', 'lookup', 'workspace'],
  );
  const payments = res.json.data[0];
  assert.deepEqual(Object.keys(payments), ['id', 'name', 'type', 'provider', 'values', 'created_at', 'updated_at']);
  assert.match(payments.id, UUID);
  assert.match(payments.created_at, ISO);
  assert.equal(payments.type, 'encryption');
  assert.equal(payments.provider, null);
  assert.deepEqual(valuesOf(payments), {
    proxy_slug: 'payments',
    key_version: '1',
    min_decryption_version: '1',
    deterministic: 'false',
    destinations: '',
    fields: 'card.number',
  });
  const workspace = res.json.data[3];
  assert.equal(workspace.type, 'provider');
  assert.equal(workspace.provider, 'google');
  assert.deepEqual(workspace.values, [{ key: 'provider', value: 'google' }]);
});

test('GET /configurations pages at several sizes', async (t) => {
  const { url } = await startApp(t);
  for (let i = 0; i < 7; i++) {
    const res = await call(url, LIST, { body: json({ name: `extra-${i}` }) });
    assert.equal(res.status, 201);
  }
  // 11 configurations in all.
  const first = await call(url, `${LIST}?per_page=3`, { method: 'GET' });
  assert.equal(first.json.total, 11);
  assert.equal(first.json.last_page, 4);
  assert.equal(first.json.data.length, 3);
  assert.equal(first.json.next_page_url, `${url}${LIST}?per_page=3&page=2`);
  assert.equal(first.json.last_page_url, `${url}${LIST}?per_page=3&page=4`);
  const last = await call(url, `${LIST}?per_page=3&page=4`, { method: 'GET' });
  assert.deepEqual(last.json.data.map((c: { name: string }) => c.name), ['extra-5', 'extra-6']);
  assert.equal(last.json.from, 10);
  assert.equal(last.json.to, 11);
  assert.equal(last.json.next_page_url, null);
  assert.equal(last.json.prev_page_url, `${url}${LIST}?per_page=3&page=3`);
  const labels = last.json.links.map((l: { label: string }) => l.label);
  assert.deepEqual(labels, ['&laquo; Previous', '1', '2', '3', '4', 'Next &raquo;']);
  assert.equal(last.json.links.find((l: { active: boolean }) => l.active).page, 4);

  const byDefault = await call(url, LIST, { method: 'GET' });
  assert.equal(byDefault.json.data.length, 10);
  assert.equal(byDefault.json.last_page, 2);
  const second = await call(url, `${LIST}?page=2`, { method: 'GET' });
  assert.deepEqual(second.json.data.map((c: { name: string }) => c.name), ['extra-6']);
  const beyond = await call(url, `${LIST}?page=3`, { method: 'GET' });
  assert.deepEqual(beyond.json.data, []);
  assert.equal(beyond.json.from, null);
  assert.equal(beyond.json.to, null);
  const all = await call(url, `${LIST}?per_page=100`, { method: 'GET' });
  assert.equal(all.json.data.length, 11);
  assert.equal(new Set(all.json.data.map((c: { id: string }) => c.id)).size, 11, 'no configuration twice across pages');
});

test('GET /configurations rejects a per_page over 100 and shows a scoped key only its configurations', async (t) => {
  const { url } = await startApp(t);
  const big = await call(url, `${LIST}?per_page=101`, { method: 'GET' });
  assert.equal(big.status, 422);
  assert.deepEqual(big.json, { message: 'The per page field must not be greater than 100.', errors: { per_page: ['The per page field must not be greater than 100.'] } });
  const scoped = await call(url, LIST, { method: 'GET', key: KEYS.scoped });
  assert.equal(scoped.status, 200);
  assert.equal(scoped.json.total, 1);
  assert.deepEqual(scoped.json.data.map((c: { name: string }) => c.name), ['other']);
});

test('configuration endpoints answer 401 without a valid key and 403 without the permission', async (t) => {
  const { url } = await startApp(t);
  const list = await call(url, LIST, { method: 'GET' });
  const id = list.json.data[0].id as string;
  const endpoints: Array<[string, string, string?]> = [
    ['GET', LIST],
    ['POST', LIST, json({ name: 'x' })],
    ['GET', `${LIST}/${id}`],
    ['PUT', `${LIST}/${id}`, json({ name: 'y' })],
    ['DELETE', `${LIST}/${id}`],
    ['POST', `${LIST}/${id}/rotate`],
  ];
  for (const [method, path, body] of endpoints) {
    for (const key of [null, 'svc_' + 'x'.repeat(40), 'not-a-key']) {
      const res = await call(url, path, { method, key, body });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.deepEqual(res.json, { message: 'Unauthorized.' });
    }
    const encryptOnly = await call(url, path, { method, key: KEYS.encryptOnly, body });
    assert.equal(encryptOnly.status, 403, `${method} ${path} with a data.encrypt key`);
    assert.deepEqual(encryptOnly.json, { message: 'User does not have the right permissions.' });
  }
  // Viewers and developers read, but do not write.
  for (const key of [KEYS.viewer, KEYS.dev]) {
    assert.equal((await call(url, LIST, { method: 'GET', key })).status, 200);
    assert.equal((await call(url, `${LIST}/${id}`, { method: 'GET', key })).status, 200);
    for (const [method, path, body] of endpoints.filter(([m]) => m !== 'GET')) {
      const res = await call(url, path, { method, key, body });
      assert.equal(res.status, 403, `${method} ${path}`);
      assert.deepEqual(res.json, { message: 'User does not have the right permissions.' });
    }
  }
  // The configuration is untouched.
  const after = await call(url, `${LIST}/${id}`, { method: 'GET' });
  assert.equal(after.json.name, 'payments');
  assert.equal(valuesOf(after.json).key_version, '1');
});

test('a key limited to some configurations gets 403 on the others, whether they exist or not', async (t) => {
  const { url } = await startApp(t);
  const list = await call(url, LIST, { method: 'GET' });
  const payments = list.json.data[0].id as string;
  const other = list.json.data[1].id as string;
  assert.equal((await call(url, `${LIST}/${other}`, { method: 'GET', key: KEYS.scoped })).status, 200);
  for (const id of [payments, '00000000-0000-4000-8000-000000000000']) {
    for (const [method, path] of [['GET', `${LIST}/${id}`], ['PUT', `${LIST}/${id}`], ['DELETE', `${LIST}/${id}`], ['POST', `${LIST}/${id}/rotate`]] as const) {
      const res = await call(url, path, { method, key: KEYS.scoped, body: method === 'PUT' ? '{}' : undefined });
      assert.equal(res.status, 403, `${method} ${path}`);
    }
  }
});

test('POST /configurations creates an encryption configuration with a keyring and a generated slug', async (t) => {
  const { url, app, logs } = await startApp(t);
  const res = await call(url, LIST, {
    body: json({ name: 'billing', values: [{ key: 'fields', value: 'ssn, card.number' }, { key: 'destinations', value: 'https://api.vendor.com/v1/,http://127.0.0.1:9999/' }] }),
  });
  assert.equal(res.status, 201);
  assert.match(res.json.id, UUID);
  assert.equal(res.json.name, 'billing');
  assert.equal(res.json.type, 'encryption');
  assert.equal(res.json.provider, null);
  const values = valuesOf(res.json);
  assert.match(values.proxy_slug!, /^[a-z0-9]{16}$/);
  assert.deepEqual({ ...values, proxy_slug: '-' }, {
    proxy_slug: '-',
    key_version: '1',
    min_decryption_version: '1',
    deterministic: 'false',
    destinations: 'https://api.vendor.com/v1/,http://127.0.0.1:9999/',
    fields: 'ssn,card.number',
  });
  assert.equal(res.json.created_at, res.json.updated_at);

  // The stored keyring: one wrapped key, bound to this configuration's id.
  const stored = (await app.services.store.configurations.findById(res.json.id))!;
  assert.equal(stored.keyringId?.length, 16);
  const keys = await app.services.store.configurations.keys(res.json.id);
  assert.equal(keys.length, 1);
  for (const secret of [stored.keyringId!.toString('hex'), stored.keyringId!.toString('base64'), keys[0]!.wrapped.toString('base64'), keys[0]!.wrapped.toString('hex')]) {
    assert.ok(!res.text.includes(secret), 'no key material in the response');
    assert.ok(!logs().includes(secret), 'no key material in the logs');
  }

  // It works at once, under its generated slug, with its default fields.
  const enc = await call(url, `/api/v3/encryption/${values.proxy_slug}/encrypt`, { body: '{"ssn":"123-45-6789","card":{"number":"4111"},"x":1}' });
  assert.equal(enc.status, 200);
  assert.match(enc.json.ssn, TOKEN);
  assert.match(enc.json.card.number, /^svc:1:/);
  const dec = await call(url, `/api/v3/encryption/${values.proxy_slug}/decrypt`, { body: enc.text });
  assert.equal(dec.text, '{"ssn":"123-45-6789","card":{"number":"4111"},"x":1}');

  const shown = await call(url, `${LIST}/${res.json.id}`, { method: 'GET' });
  assert.equal(shown.status, 200);
  assert.deepEqual(shown.json, res.json);

  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'configuration.created');
  assert.equal(entry?.description, 'Created encryption configuration "billing".');
  assert.equal(entry?.causerEmail, 'ada@example.com');
  assert.equal(entry?.ip, '127.0.0.1');
});

test('POST /configurations takes values as an object, a chosen slug and a deterministic flag', async (t) => {
  const { url } = await startApp(t);
  const res = await call(url, LIST, {
    body: json({ name: 'ids', type: 'encryption', values: { proxy_slug: 'ids-v1', deterministic: 'true', fields: ['id', 'items.*.id'], min_decryption_version: 1 } }),
  });
  assert.equal(res.status, 201);
  const values = valuesOf(res.json);
  assert.equal(values.proxy_slug, 'ids-v1');
  assert.equal(values.deterministic, 'true');
  assert.equal(values.fields, 'id,items.*.id');
  // Deterministic: equal plaintexts give equal tokens.
  const enc = await call(url, '/api/v3/encryption/ids-v1/encrypt', { body: '{"id":"a","items":[{"id":"a"}]}' });
  assert.equal(enc.status, 200);
  assert.equal(enc.json.id, enc.json.items[0].id);
});

test('POST /configurations with a provider creates a provider configuration', async (t) => {
  const { url, app } = await startApp(t);
  const res = await call(url, LIST, { body: json({ name: 'gws', provider: 'google' }) });
  assert.equal(res.status, 201);
  assert.equal(res.json.type, 'provider');
  assert.equal(res.json.provider, 'google');
  assert.deepEqual(res.json.values, [{ key: 'provider', value: 'google' }]);
  assert.equal((await app.services.store.configurations.keys(res.json.id)).length, 0, 'a provider configuration has no keys');
  const explicit = await call(url, LIST, { body: json({ name: 'gws2', type: 'provider', provider: 'google' }) });
  assert.equal(explicit.status, 201);
  assert.equal(explicit.json.type, 'provider');
});

const CREATE_ERRORS: Array<[string, unknown, Record<string, string[]>]> = [
  ['no name', {}, { name: ['The name field is required.'] }],
  ['a long name', { name: 'n'.repeat(65) }, { name: ['The name field must not be greater than 64 characters.'] }],
  ['a taken name', { name: 'payments' }, { name: ['The name has already been taken.'] }],
  ['a name that is not a string', { name: 7 }, { name: ['The name field must be a string.'] }],
  ['an unknown type', { name: 'a', type: 'vault' }, { type: ['The selected type is invalid.'] }],
  ['an unknown provider', { name: 'a', provider: 'azure' }, { provider: ['The selected provider is invalid.'] }],
  ['a provider type without provider', { name: 'a', type: 'provider' }, { provider: ['The provider field is required when type is provider.'] }],
  ['a provider on an encryption type', { name: 'a', type: 'encryption', provider: 'google' }, { provider: ['The provider field is prohibited when type is encryption.'] }],
  ['values of another type', { name: 'a', values: 'fields=a' }, { values: ['The values field must be an array.'] }],
  ['an unknown value key', { name: 'a', values: { colour: 'red' } }, { 'values.colour': ['The values.colour field is prohibited.'] }],
  ['key_version on create', { name: 'a', values: { key_version: '3' } }, { 'values.key_version': ['The values.key version field is prohibited.'] }],
  ['a value that is not a string', { name: 'a', values: { fields: { a: 1 } } }, { 'values.fields': ['The values.fields field must be a string.'] }],
  ['a repeated key', { name: 'a', values: [{ key: 'fields', value: 'a' }, { key: 'fields', value: 'b' }] }, { 'values.fields': ['The values.fields field has a duplicate value.'] }],
  ['an item that is not an object', { name: 'a', values: ['fields'] }, { 'values.0': ['The values.0 field must be an object with a key and a value.'] }],
  ['an item without key', { name: 'a', values: [{ value: 'x' }] }, { 'values.0.key': ['The values.0.key field is required.'] }],
  ['an item with a numeric key', { name: 'a', values: [{ key: 1, value: 'x' }] }, { 'values.0.key': ['The values.0.key field must be a string.'] }],
  ['a relative destination', { name: 'a', values: { destinations: 'https://ok.example/,/relative' } }, { 'values.destinations': ['The values.destinations field must contain only absolute http or https URLs.'] }],
  ['an ftp destination', { name: 'a', values: { destinations: 'ftp://files.example/' } }, { 'values.destinations': ['The values.destinations field must contain only absolute http or https URLs.'] }],
  ['a destination with credentials', { name: 'a', values: { destinations: 'https://u:p@api.example/' } }, { 'values.destinations': ['The values.destinations field must not contain user names or passwords.'] }],
  ['an empty field segment', { name: 'a', values: { fields: 'card..number' } }, { 'values.fields': ['The values.fields field is invalid: the path "card..number" has an empty segment.'] }],
  ['a glob in a field', { name: 'a', values: { fields: 'ca*' } }, { 'values.fields': ['The values.fields field is invalid: the path "ca*" uses "*" inside a segment; write "\\*" for a literal asterisk.'] }],
  ['too many fields', { name: 'a', values: { fields: Array.from({ length: 129 }, (_, i) => `f${i}`).join(',') } }, { 'values.fields': ['The values.fields field is invalid: it lists more than 128 paths.'] }],
  ['deterministic not a boolean', { name: 'a', values: { deterministic: 'yes' } }, { 'values.deterministic': ['The values.deterministic field must be true or false.'] }],
  ['min version above the key version', { name: 'a', values: { min_decryption_version: '2' } }, { 'values.min_decryption_version': ['The values.min decryption version field must not be greater than 1.'] }],
  ['min version zero', { name: 'a', values: { min_decryption_version: 0 } }, { 'values.min_decryption_version': ['The values.min decryption version field must be at least 1.'] }],
  ['min version not an integer', { name: 'a', values: { min_decryption_version: '1.5' } }, { 'values.min_decryption_version': ['The values.min decryption version field must be an integer.'] }],
  ['a malformed slug', { name: 'a', values: { proxy_slug: 'Pay_ments' } }, { 'values.proxy_slug': ['The values.proxy slug field format is invalid.'] }],
  ['a short slug', { name: 'a', values: { proxy_slug: 'ab' } }, { 'values.proxy_slug': ['The values.proxy slug field format is invalid.'] }],
  ['a taken slug', { name: 'a', values: { proxy_slug: 'payments' } }, { 'values.proxy_slug': ['The values.proxy slug has already been taken.'] }],
  ['encryption values on a provider', { name: 'a', provider: 'google', values: { fields: 'a' } }, { 'values.fields': ['The values.fields field is prohibited when type is provider.'] }],
];

test('POST /configurations answers 422 with exact messages', async (t) => {
  const { url, app } = await startApp(t);
  for (const [what, body, errors] of CREATE_ERRORS) {
    const res = await call(url, LIST, { body: json(body) });
    assert.equal(res.status, 422, what);
    const first = Object.values(errors)[0]![0];
    assert.deepEqual(res.json, { message: first, errors }, what);
  }
  const many = await call(url, LIST, { body: json({ name: '', type: 'x', values: { a: '1', b: '2' } }) });
  assert.equal(many.status, 422);
  assert.equal(many.json.message, 'The name field is required. (and 3 more errors)');
  assert.equal((await app.services.store.configurations.list()).length, 4, 'nothing was created');
  const notObject = await call(url, LIST, { body: '[1]' });
  assert.equal(notObject.status, 400);
  const notJson = await call(url, LIST, { body: '{"name":', contentType: 'application/json' });
  assert.equal(notJson.status, 400);
});

test('GET, PUT, DELETE and rotate of an unknown configuration are 404', async (t) => {
  const { url } = await startApp(t);
  for (const id of ['00000000-0000-4000-8000-000000000000', 'nope']) {
    for (const [method, path] of [['GET', `${LIST}/${id}`], ['PUT', `${LIST}/${id}`], ['DELETE', `${LIST}/${id}`], ['POST', `${LIST}/${id}/rotate`]] as const) {
      const res = await call(url, path, { method, body: method === 'PUT' ? json({ name: 'z' }) : undefined });
      assert.equal(res.status, 404, `${method} ${path}`);
      assert.deepEqual(res.json, { message: 'Not found.' });
    }
  }
});

test('PUT /configurations/{id} changes name, destinations and fields; fixed values cannot change', async (t) => {
  const { url, app } = await startApp(t);
  const list = await call(url, LIST, { method: 'GET' });
  const payments = list.json.data[0];
  const path = `${LIST}/${payments.id}`;

  const res = await call(url, path, { method: 'PUT', body: json({ name: 'payments-eu', values: { fields: 'ssn', destinations: 'https://eu.vendor.example/' } }) });
  assert.equal(res.status, 200);
  assert.equal(res.json.name, 'payments-eu');
  assert.equal(res.json.id, payments.id);
  assert.equal(res.json.created_at, payments.created_at);
  assert.ok(res.json.updated_at >= payments.updated_at);
  assert.deepEqual(valuesOf(res.json), { ...valuesOf(payments), fields: 'ssn', destinations: 'https://eu.vendor.example/' });
  const enc = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"ssn":"1","card":{"number":"2"}}' });
  assert.match(enc.json.ssn, TOKEN);
  assert.equal(enc.json.card.number, '2', 'the new default fields apply');
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'configuration.updated');
  assert.equal(entry?.description, 'Updated configuration "payments-eu".');

  // What GET shows can be sent back unchanged.
  const roundTrip = await call(url, path, { method: 'PUT', body: json({ name: res.json.name, type: 'encryption', values: res.json.values }) });
  assert.equal(roundTrip.status, 200);
  assert.deepEqual(roundTrip.json.values, res.json.values);

  // Clearing lists.
  const cleared = await call(url, path, { method: 'PUT', body: json({ values: { destinations: '' } }) });
  assert.equal(valuesOf(cleared.json).destinations, '');

  const errors: Array<[unknown, Record<string, string[]>]> = [
    [{ type: 'provider' }, { type: ['The type field cannot be changed.'] }],
    [{ provider: 'google' }, { provider: ['The provider field cannot be changed.'] }],
    [{ values: { deterministic: 'true' } }, { 'values.deterministic': ['The values.deterministic field cannot be changed.'] }],
    [{ values: { proxy_slug: 'payments-2' } }, { 'values.proxy_slug': ['The values.proxy slug field cannot be changed.'] }],
    [{ values: { key_version: '2' } }, { 'values.key_version': ['The values.key version field cannot be changed.'] }],
    [{ name: 'other' }, { name: ['The name has already been taken.'] }],
    [{ name: 'x'.repeat(65) }, { name: ['The name field must not be greater than 64 characters.'] }],
    [{ values: { min_decryption_version: 2 } }, { 'values.min_decryption_version': ['The values.min decryption version field must not be greater than 1.'] }],
    [{ values: { fields: 'a\\' } }, { 'values.fields': ['The values.fields field is invalid: the path "a\\" ends with a lone "\\".'] }],
    [{ values: { destinations: 'nope' } }, { 'values.destinations': ['The values.destinations field must contain only absolute http or https URLs.'] }],
    [{ values: { colour: 'red' } }, { 'values.colour': ['The values.colour field is prohibited.'] }],
  ];
  for (const [body, expected] of errors) {
    const bad = await call(url, path, { method: 'PUT', body: json(body) });
    assert.equal(bad.status, 422, JSON.stringify(body));
    assert.deepEqual(bad.json, { message: Object.values(expected)[0]![0], errors: expected });
  }
  const same = await call(url, path, { method: 'GET' });
  assert.equal(same.json.name, 'payments-eu', 'failed updates change nothing');

  const workspace = list.json.data[3];
  const provider = await call(url, `${LIST}/${workspace.id}`, { method: 'PUT', body: json({ values: { fields: 'a' } }) });
  assert.equal(provider.status, 422);
  assert.deepEqual(provider.json.errors, { 'values.fields': ['The values.fields field is prohibited when type is provider.'] });
  const renamed = await call(url, `${LIST}/${workspace.id}`, { method: 'PUT', body: json({ name: 'gws', values: workspace.values }) });
  assert.equal(renamed.status, 200);
  assert.equal(renamed.json.name, 'gws');
  assert.equal((await app.services.store.configurations.findById(workspace.id))?.extra['groups'] !== undefined, true, 'provider groups survive an update');
});

test('PUT /configurations/{id} with an empty or null name is refused with 422, never read as "unchanged"', async (t) => {
  const { url } = await startApp(t);
  const payments = (await call(url, LIST, { method: 'GET' })).json.data[0];
  for (const name of ['', null]) {
    const res = await call(url, `${LIST}/${payments.id}`, { method: 'PUT', body: json({ name, values: { fields: 'ssn' } }) });
    assert.equal(res.status, 422, JSON.stringify(name));
    assert.deepEqual(res.json, { message: 'The name field is required.', errors: { name: ['The name field is required.'] } });
  }
  const after = (await call(url, `${LIST}/${payments.id}`, { method: 'GET' })).json;
  assert.equal(after.name, payments.name);
  assert.deepEqual(valuesOf(after), valuesOf(payments), 'a refused update changes nothing');
});

test('DELETE /configurations/{id} removes it and its codec; its slug stops working', async (t) => {
  const { url, app } = await startApp(t);
  const enc = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"4111"}}' });
  assert.equal(enc.status, 200);
  const list = await call(url, LIST, { method: 'GET' });
  const id = list.json.data[0].id as string;
  // The codec cache is internal; peeking at it is the only way to see the entry go.
  const cached = () => (app.services.codecs as unknown as { entries: Map<string, unknown> }).entries.has(id);
  assert.equal(cached(), true);
  const res = await call(url, `${LIST}/${id}`, { method: 'DELETE' });
  assert.equal(cached(), false, 'the codec (with its unwrapped keys) is dropped');
  assert.equal(res.status, 204);
  assert.equal(res.text, '');
  assert.equal((await call(url, `${LIST}/${id}`, { method: 'GET' })).status, 404);
  assert.equal((await call(url, `${LIST}/${id}`, { method: 'DELETE' })).status, 404);
  assert.equal((await call(url, '/api/v3/encryption/payments/decrypt', { body: enc.text })).status, 404);
  assert.equal((await app.services.store.configurations.keys(id)).length, 0, 'its keys are gone');
  const after = await call(url, LIST, { method: 'GET' });
  assert.equal(after.json.total, 3);
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'configuration.deleted');
  assert.equal(entry?.description, 'Deleted configuration "payments".');

  // A new configuration may take the freed slug, with a fresh keyring: old tokens do not open.
  const again = await call(url, LIST, { body: json({ name: 'payments', values: { proxy_slug: 'payments' } }) });
  assert.equal(again.status, 201);
  const dec = await call(url, '/api/v3/encryption/payments/decrypt', { body: enc.text });
  assert.equal(dec.status, 422);
});

test('DELETE /configurations/{id} revokes the active keys limited to configurations that are now all gone; a key that still reaches another keeps it', async (t) => {
  const { url, app } = await startApp(t);
  const made = await call(url, LIST, { body: json({ name: 'short-lived' }) });
  assert.equal(made.status, 201, made.text);
  const gone = made.json.id as string;
  const payments = (await call(url, LIST, { method: 'GET' })).json.data[0].id as string;
  const key = async (name: string, configurations: string[]) => {
    const res = await call(url, '/api/v3/api-keys', { body: json({ name, permissions: ['data.encrypt'], configurations }) });
    assert.equal(res.status, 201, res.text);
    return res.json as { id: string; key: string };
  };
  const only = await key('only-short-lived', [gone]);
  const both = await key('short-lived-and-payments', [gone, payments]);
  const other = await key('payments-only', [payments]);
  const earlier = await key('revoked-before', [gone]);
  assert.equal((await call(url, `/api/v3/api-keys/${earlier.id}/revoke`, {})).status, 204);
  const res = await call(url, `${LIST}/${gone}`, { method: 'DELETE' });
  assert.equal(res.status, 204);
  const show = async (id: string) => (await call(url, `/api/v3/api-keys/${id}`, { method: 'GET' })).json;
  const revoked = await show(only.id);
  assert.equal(revoked.status, 'revoked', 'a key that reaches nothing is revoked, not listed as reaching every configuration');
  assert.deepEqual(revoked.configurations, []);
  assert.equal((await call(url, '/api/v3/encryption/payments/encrypt', { key: only.key, body: '{"card":{"number":"4111"}}' })).status, 401);
  const kept = await show(both.id);
  assert.equal(kept.status, 'active');
  assert.deepEqual(kept.configurations.map((c: { id: string }) => c.id), [payments]);
  assert.equal((await call(url, '/api/v3/encryption/payments/encrypt', { key: both.key, body: '{"card":{"number":"4111"}}' })).status, 200);
  assert.equal((await show(other.id)).status, 'active');
  assert.equal((await show(earlier.id)).status, 'revoked');
  assert.equal((await call(url, LIST, { method: 'GET' })).status, 200, 'the unlimited owner key still works');
  const entries = activityOf(app, res.headers.get('x-svc-request-id')).map((e) => [e.action, e.description]);
  assert.deepEqual(entries.sort(), [
    ['api-key.revoked', 'Revoked API key "only-short-lived": every configuration it was limited to is deleted.'],
    ['configuration.deleted', 'Deleted configuration "short-lived".'],
  ]);
});

test('rotate adds key version 2: new tokens use it, version-1 tokens still decrypt until min_decryption_version passes them', async (t) => {
  const { url, app } = await startApp(t);
  const list = await call(url, LIST, { method: 'GET' });
  const payments = list.json.data[0];
  const v1 = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"4111"}}' });
  assert.match(v1.json.card.number, /^svc:1:/);

  const res = await call(url, `${LIST}/${payments.id}/rotate`);
  assert.equal(res.status, 200);
  assert.equal(res.json.id, payments.id);
  assert.equal(valuesOf(res.json).key_version, '2');
  assert.equal(valuesOf(res.json).min_decryption_version, '1');
  assert.ok(res.json.updated_at >= payments.updated_at);
  assert.deepEqual((await app.services.store.configurations.keys(payments.id)).map((k) => k.version), [1, 2]);
  const [entry] = activityOf(app, res.headers.get('x-svc-request-id'));
  assert.equal(entry?.action, 'configuration.rotated');
  assert.equal(entry?.description, 'Rotated the key of configuration "payments" to version 2.');

  const v2 = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"5500"}}' });
  assert.equal(v2.status, 200);
  assert.match(v2.json.card.number, /^svc:2:/);
  assert.match(v2.json.card.number, TOKEN);
  const old = await call(url, '/api/v3/encryption/payments/decrypt', { body: v1.text });
  assert.equal(old.status, 200);
  assert.equal(old.text, '{"card":{"number":"4111"}}');

  const raised = await call(url, `${LIST}/${payments.id}`, { method: 'PUT', body: json({ values: { min_decryption_version: '2' } }) });
  assert.equal(raised.status, 200);
  assert.equal(valuesOf(raised.json).min_decryption_version, '2');
  const refused = await call(url, '/api/v3/encryption/payments/decrypt', { body: v1.text });
  assert.equal(refused.status, 422);
  assert.deepEqual(Object.keys(refused.json.errors), ['card.number']);
  const fresh = await call(url, '/api/v3/encryption/payments/decrypt', { body: v2.text });
  assert.equal(fresh.status, 200);
  assert.equal(fresh.json.card.number, '5500');

  // Lowering it again reopens version 1.
  await call(url, `${LIST}/${payments.id}`, { method: 'PUT', body: json({ values: { min_decryption_version: 1 } }) });
  assert.equal((await call(url, '/api/v3/encryption/payments/decrypt', { body: v1.text })).status, 200);

  const third = await call(url, `${LIST}/${payments.id}/rotate`);
  assert.equal(valuesOf(third.json).key_version, '3');
  const v3 = await call(url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"1"}}' });
  assert.match(v3.json.card.number, /^svc:3:/);

  const provider = list.json.data[3];
  const bad = await call(url, `${LIST}/${provider.id}/rotate`);
  assert.equal(bad.status, 422);
  assert.deepEqual(bad.json, { message: 'Only encryption configurations have keys to rotate.', errors: { type: ['Only encryption configurations have keys to rotate.'] } });
});

test('a deterministic configuration stays deterministic across rotation, per version', async (t) => {
  const { url } = await startApp(t);
  const list = await call(url, LIST, { method: 'GET' });
  const lookup = list.json.data.find((c: { name: string }) => c.name === 'lookup');
  const before = await call(url, '/api/v3/encryption/lookup/encrypt', { body: '{"a":"x"}', headers: { 'x-svc-fields': 'a' } });
  await call(url, `${LIST}/${lookup.id}/rotate`);
  const after1 = await call(url, '/api/v3/encryption/lookup/encrypt', { body: '{"a":"x"}', headers: { 'x-svc-fields': 'a' } });
  const after2 = await call(url, '/api/v3/encryption/lookup/encrypt', { body: '{"a":"x"}', headers: { 'x-svc-fields': 'a' } });
  assert.notEqual(before.json.a, after1.json.a, 'a new key version gives a new token');
  assert.equal(after1.json.a, after2.json.a);
  assert.match(after1.json.a, /^svc:2:/);
});

test('writes are refused with 409 when state comes from a control plane', async (t) => {
  const { url } = await startApp(t, 'state: { source: control-plane, control_plane: { url: "http://127.0.0.1:1", api_key: "svc_' + 'C'.repeat(40) + '" } }');
  const list = await call(url, LIST, { method: 'GET' });
  assert.equal(list.status, 200);
  const res = await call(url, LIST, { body: json({ name: 'new' }) });
  assert.equal(res.status, 409);
  assert.deepEqual(res.json, { message: 'Managed by the control plane.' });
});
