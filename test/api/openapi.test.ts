/**
 * The OpenAPI document: served at GET /api/openapi.json, equal to docs/openapi.json,
 * well-formed, every schema compiling under a strict JSON Schema 2020-12 validator, and
 * covering exactly the routes the main and admin listeners serve. Every response the test
 * suite receives through `call()` is checked against it (test/support/app.ts); the last
 * tests here show that check catches what it should. test/api/openapi-contract.test.ts
 * calls every operation with requests built from it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { openApiDocument } from '../../src/api/openapi.ts';
import { buildAdminRouter, buildRouter } from '../../src/app.ts';
import { PERMISSIONS } from '../../src/config/schema.ts';
import { OPENAPI_FILE, renderOpenApi } from '../../scripts/write-openapi.ts';
import { call, startApp } from '../support/app.ts';
import {
  at,
  compiled,
  createAjv,
  findPathTemplate,
  follow,
  isObject,
  operations,
  parametersOf,
  pointer,
  refPointer,
  schemaErrors,
  validateResponse,
  type Obj,
} from '../support/openapi-validator.ts';

const doc = openApiDocument as Obj;
const paths = doc['paths'] as Record<string, Obj>;
const components = doc['components'] as Record<string, Record<string, Obj>>;

/** Every value in the document, with its JSON pointer. */
function* walk(value: unknown, ptr: string): Generator<[unknown, string]> {
  yield [value, ptr];
  if (Array.isArray(value)) for (const [i, v] of value.entries()) yield* walk(v, `${ptr}${pointer(i)}`);
  else if (isObject(value)) for (const [k, v] of Object.entries(value)) yield* walk(v, `${ptr}${pointer(k)}`);
}

/** Router patterns in the document's spelling: `:id` and `*rest` become `{id}` and `{rest}`. */
const toTemplate = (pattern: string) => pattern.replace(/[:*](\w+)/g, '{$1}');

// ---------------------------------------------------------------------------------------
// Served and in sync

test('GET /api/openapi.json serves the document without credentials, equal to docs/openapi.json', async (t) => {
  const { url } = await startApp(t);
  const res = await call(url, '/api/openapi.json', { method: 'GET', key: null });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  assert.ok(res.headers.get('x-svc-request-id'));
  assert.deepEqual(res.json, openApiDocument);
  const file = readFileSync(OPENAPI_FILE, 'utf8');
  assert.equal(file, renderOpenApi(), 'docs/openapi.json is stale: run node scripts/write-openapi.ts');
  assert.deepEqual(JSON.parse(file), res.json);
  // A key is not needed, and a wrong one changes nothing: the document is public.
  assert.equal((await call(url, '/api/openapi.json', { method: 'GET', key: 'svc_wrong' })).status, 200);
});

test('health, readiness and metrics answer as documented, on both listeners', async (t) => {
  const running = await startApp(t, '', undefined, { admin: true });
  const admin = running.adminUrl!;
  // call() checks each answer against the document; the statuses say which answer it was.
  for (const base of [running.url, admin]) {
    assert.deepEqual((await call(base, '/healthz', { method: 'GET', key: null })).json, { status: 'ok' });
    assert.deepEqual((await call(base, '/readyz', { method: 'GET', key: null })).json, { status: 'ready' });
  }
  const metrics = await call(admin, '/metrics', { method: 'GET', key: null });
  assert.equal(metrics.status, 200);
  assert.match(metrics.text, /svc_http_requests_total/);
  running.app.services.health.ready = false;
  assert.equal((await call(running.url, '/readyz', { method: 'GET', key: null })).status, 503);
});

// ---------------------------------------------------------------------------------------
// Well-formed

test('the document is well-formed: references resolve, operations are complete, operationIds unique', () => {
  assert.equal(doc['openapi'], '3.1.0');
  const info = doc['info'] as Obj;
  assert.equal(typeof info['title'], 'string');
  assert.equal(info['version'], '3.0.0');

  for (const [value, ptr] of walk(doc, '')) {
    if (isObject(value) && typeof value['$ref'] === 'string') assert.doesNotThrow(() => at(refPointer(value['$ref'] as string)), `${ptr}: ${value['$ref']}`);
    // OpenAPI 3.0's `nullable` means nothing in 3.1 (ajv would even honour it): `type: [..., 'null']` says it.
    if (isObject(value)) assert.ok(!Object.hasOwn(value, 'nullable'), `${ptr} uses nullable`);
  }
  assert.equal(follow(pointer('x-svc-other-methods')).ptr, '/components/responses/MethodNotAllowed');

  const schemes = Object.keys(components['securitySchemes'] ?? {});
  assert.deepEqual(schemes.sort(), ['apiKey', 'bearer']);
  const tags = new Set((doc['tags'] as Array<{ name: string }>).map((tag) => tag.name));
  const ids = new Set<string>();
  const permissions = new Set<string>(PERMISSIONS);
  for (const operation of operations()) {
    const { method, path, op } = operation;
    const name = `${method.toUpperCase()} ${path}`;
    assert.equal(typeof op['operationId'], 'string', `${name} has an operationId`);
    assert.ok(!ids.has(op['operationId'] as string), `operationId ${op['operationId']} is unique`);
    ids.add(op['operationId'] as string);
    assert.ok(typeof op['summary'] === 'string' && op['summary'] !== '', `${name} has a summary`);
    for (const tag of op['tags'] as string[]) assert.ok(tags.has(tag), `${name}: tag ${tag} is declared`);

    const responses = op['responses'] as Obj;
    assert.ok(Object.keys(responses).some((s) => /^2(\d\d|XX)$/.test(s)), `${name} has a success response`);
    // Every listener's HTTP parser may answer these before any route runs.
    assert.ok(Object.hasOwn(responses, '408') && Object.hasOwn(responses, '431'), `${name} documents 408 and 431`);
    for (const status of Object.keys(responses)) {
      assert.match(status, /^([1-5](\d\d|XX)|default)$/, `${name}: status ${status}`);
      const response = follow(`${operation.ptr}${pointer('responses', status)}`).value;
      assert.equal(typeof response['description'], 'string', `${name} ${status} has a description`);
      // The parser's 408 and 431 come before it knows the method: those are sent whole.
      if (method === 'head' && status !== '408' && status !== '431') assert.equal(response['content'], undefined, `${name} ${status}: a HEAD answer has no body`);
    }

    assert.ok(Object.hasOwn(op, 'x-permission'), `${name} names its permission`);
    const permission = op['x-permission'];
    if (typeof permission === 'string') assert.ok(permissions.has(permission), `${name}: ${permission} is a permission`);
    else if (permission !== null) assert.deepEqual(permission, { encrypt: 'data.encrypt', decrypt: 'data.decrypt' }, `${name}: a mode-dependent permission`);

    const security = op['security'] as Array<Obj> | undefined;
    for (const requirement of security ?? (doc['security'] as Array<Obj>)) for (const scheme of Object.keys(requirement)) assert.ok(schemes.includes(scheme), `${name}: scheme ${scheme}`);

    // Path parameters: exactly the template's, each required; no parameter twice.
    const parameters = parametersOf(operation).map((p) => p.value);
    const keys = parameters.map((p) => `${p['in']}:${p['name']}`);
    assert.equal(new Set(keys).size, keys.length, `${name}: no parameter twice`);
    const inPath = parameters.filter((p) => p['in'] === 'path');
    assert.deepEqual(inPath.map((p) => p['name']).sort(), [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort(), `${name}: path parameters`);
    for (const p of inPath) assert.equal(p['required'], true, `${name}: path parameter ${p['name']} is required`);
    for (const p of parameters) assert.ok(['path', 'query', 'header'].includes(p['in'] as string), `${name}: parameter ${p['name']} in ${p['in']}`);
  }
  assert.ok(ids.size >= 40, `${ids.size} operations`);
});

test('every GET has its HEAD: same permission, parameters, statuses and headers, no body', () => {
  for (const [path, item] of Object.entries(paths)) {
    if (!isObject(item['get'])) continue;
    const get = item['get'];
    const head = item['head'];
    assert.ok(isObject(head), `HEAD ${path} is documented`);
    assert.deepEqual(head['x-permission'], get['x-permission'], `HEAD ${path}: permission`);
    assert.deepEqual(head['security'], get['security'], `HEAD ${path}: security`);
    assert.deepEqual(head['parameters'], get['parameters'], `HEAD ${path}: parameters`);
    assert.deepEqual(Object.keys(head['responses'] as Obj), Object.keys(get['responses'] as Obj), `HEAD ${path}: statuses`);
    for (const status of Object.keys(get['responses'] as Obj)) {
      const fromGet = follow(pointer('paths', path, 'get', 'responses', status)).value;
      const fromHead = follow(pointer('paths', path, 'head', 'responses', status)).value;
      assert.deepEqual(fromHead['headers'], fromGet['headers'], `HEAD ${path} ${status}: headers`);
    }
  }
});

test('every schema compiles under strict JSON Schema 2020-12, and every named component is used', () => {
  let count = 0;
  for (const name of Object.keys(components['schemas'] ?? {})) {
    assert.doesNotThrow(() => compiled(pointer('components', 'schemas', name)), `#/components/schemas/${name}`);
    count++;
  }
  // Schemas of parameters, headers and media types.
  for (const [value, ptr] of walk(doc, '')) {
    if (!isObject(value) || !isObject(value['schema']) || ptr.startsWith('/components/schemas')) continue;
    assert.doesNotThrow(() => compiled(`${ptr}/schema`), `${ptr}/schema`);
    count++;
  }
  assert.ok(count > 100, `${count} schemas compiled`);

  const text = JSON.stringify(doc);
  for (const kind of ['schemas', 'responses', 'parameters', 'headers']) {
    for (const name of Object.keys(components[kind] ?? {})) assert.ok(text.includes(`"#/components/${kind}/${name}"`), `#/components/${kind}/${name} is referenced`);
  }
});

test('emails: the document takes exactly what the API takes', () => {
  const email = pointer('components', 'schemas', 'UserCreate', 'properties', 'email');
  // The API's rule is loose on purpose (src/api/validation.ts); the document says the same.
  for (const good of ['ada@example.com', 'kate@localhost.localdomain', 'ünï@exämple.org', "o'neil+tag@mail.example.co.uk"]) assert.deepEqual(schemaErrors(email, good), [], good);
  for (const bad of ['ada', 'ada@example', '@example.com', 'ada@@example.com', 'a da@example.com', 'ada@example.com ', '']) assert.notDeepEqual(schemaErrors(email, bad), [], bad);
});

// ---------------------------------------------------------------------------------------
// Routes

/** What a router serves, as `METHOD {template}`: its routes, and HEAD wherever it has GET. */
function served(routes: ReadonlyArray<{ method: string; template: string }>): Set<string> {
  const out = new Set(routes.map((r) => `${r.method} ${toTemplate(r.template)}`));
  for (const r of routes) if (r.method === 'GET') out.add(`HEAD ${toTemplate(r.template)}`);
  return out;
}

test('every route of the main and admin listeners is in the document, and every operation is a route', () => {
  const router = buildRouter();
  const main = served(router.routes());
  const admin = served(buildAdminRouter().routes());
  const documented = operations().map(({ method, path }) => `${method.toUpperCase()} ${path}`);
  assert.deepEqual([...documented].sort(), [...new Set([...main, ...admin])].sort());

  // An operation whose path names its own servers (the admin listener) is served there only.
  for (const { method, path, item } of operations()) {
    const name = `${method.toUpperCase()} ${path}`;
    const adminOnly = Array.isArray(item['servers']) && (item['servers'] as Obj[]).every((s) => s['url'] === '{admin}');
    if (adminOnly) {
      assert.ok(admin.has(name) && !main.has(name), `${name} is served by the admin listener only`);
    } else {
      assert.ok(main.has(name), `${name} is served by the main listener`);
    }
  }

  for (const route of router.routes()) {
    // A concrete path for the pattern: the router and the validator must pick the same template.
    const sample = route.template.replace(/:(\w+)/g, 'x1').replace(/\*(\w+)/, 'a/b');
    assert.equal(router.find(route.method, sample).template, route.template, sample);
    assert.equal(findPathTemplate(doc, sample)?.path, toTemplate(route.template), sample);
    if (route.method === 'GET') assert.equal(router.find('HEAD', sample).template, route.template, `HEAD ${sample}`);
  }
  // Static segments beat parameters, and a trailing rest may be empty, as in the router.
  assert.equal(findPathTemplate(doc, '/api/v3/configurations/abc/keys')?.path, '/api/v3/configurations/{id}/keys');
  assert.equal(findPathTemplate(doc, '/egress/vendor')?.path, '/egress/{name}/{rest}');
  assert.equal(findPathTemplate(doc, '/api/v3/classifications/')?.path, undefined, 'an empty segment is no id');
});

test('the management routes carry the same permission in apiRoutes and in the document', async () => {
  const { apiRoutes } = await import('../../src/api/route-table.ts');
  for (const route of apiRoutes) {
    const op = paths[toTemplate(route.path)]?.[route.method.toLowerCase()];
    assert.ok(isObject(op), `${route.method} ${route.path} is documented`);
    assert.equal(op['x-permission'], route.permission, `${route.method} ${route.path}`);
    const responses = Object.keys(op['responses'] as Obj);
    assert.ok(responses.includes('401') && responses.includes('403'), `${route.method} ${route.path} documents 401 and 403`);
    if (route.write) assert.ok(responses.includes('409'), `${route.method} ${route.path} is a write: documents 409`);
  }
});

test('docs/api.md mentions every path of the management API', () => {
  const guide = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');
  for (const path of Object.keys(paths)) {
    if (path.startsWith('/api/')) assert.ok(guide.includes(path.replace(/^\/api/, '')), `docs/api.md names ${path}`);
  }
});

// ---------------------------------------------------------------------------------------
// The validator catches what it should

const USER = {
  id: 1,
  name: 'Ada',
  email: 'ada@example.com',
  two_factor_enabled: false,
  created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z',
  roles: [{ id: 1, name: 'owner', description: null, permissions: [{ name: 'logs.view' }] }],
};
const HEADERS = new Headers({ 'x-svc-request-id': 'abc-1', 'content-type': 'application/json' });
const check = (path: string, status: number, body: unknown, method = 'GET', headers: Headers | undefined = HEADERS) =>
  validateResponse(method, path, status, body === undefined ? null : 'application/json; charset=utf-8', body, headers).errors;

test('validateResponse: a correct body passes; a changed field, a missing one or an extra one fails', () => {
  assert.deepEqual(check('/api/v2/auth/userdetails', 200, USER), []);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, email: 'not-an-email' })[0]!, /^\$\.email: "not-an-email" must match pattern/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, created_at: '2026-01-01 00:00' })[0]!, /^\$\.created_at: .* must match format "date-time"/);
  const { id: _, ...withoutId } = USER;
  assert.match(check('/api/v2/auth/userdetails', 200, withoutId)[0]!, /missing required property "id"/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, password_hash: 'x' })[0]!, /unexpected property "password_hash"/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, roles: [{ ...USER.roles[0], name: 'superuser' }] })[0]!, /^\$\.roles\[0\]\.name: must be one of/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, id: 1.5 })[0]!, /^\$\.id: must be integer, got 1\.5/);
});

test('validateResponse: status, content type, headers and methods must be documented', () => {
  assert.match(check('/api/v2/auth/userdetails', 418, { message: 'x' })[0]!, /status 418 is not documented/);
  assert.match(check('/api/v3/classifications/7', 404, { message: 'Missing.' })[0]!, /must be one of \["Not found\."\]/);
  assert.match(check('/api/v3/classifications/7', 401, { message: 'Unauthorized.', errors: {} })[0]!, /unexpected property "errors"/);
  assert.match(validateResponse('GET', '/api/v2/auth/userdetails', 200, 'text/html', '<p>', HEADERS).errors[0]!, /content-type text\/html is not documented/);
  assert.match(check('/api/v2/auth/userdetails', 200, USER, 'GET', new Headers())[0]!, /missing response header x-svc-request-id/);
  assert.match(check('/api/v2/auth/userdetails', 200, USER, 'GET', new Headers({ 'x-svc-request-id': 'a b' }))[0]!, /^header x-svc-request-id: "a b" must match pattern/);
  assert.match(check('/api/v2/auth/userdetails', 200, USER, 'GET', new Headers({ 'x-svc-request-id': 'a', 'x-svc-debug': '1' }))[0]!, /undocumented response header x-svc-debug/);
  assert.match(check('/api/v3/classifications/7', 204, { message: 'x' }, 'DELETE')[0]!, /documents no body/);
  assert.deepEqual(validateResponse('DELETE', '/api/v3/classifications/7', 204, null, undefined, HEADERS).errors, []);
  // HEAD: GET's statuses and headers, never a body.
  assert.deepEqual(validateResponse('HEAD', '/api/v2/auth/userdetails', 200, 'application/json', undefined, HEADERS).errors, []);
  assert.match(validateResponse('HEAD', '/api/v2/auth/userdetails', 200, 'application/json', USER, HEADERS).errors[0]!, /a HEAD answer with a body/);
  assert.match(validateResponse('HEAD', '/api/v2/auth/userdetails', 418, null, undefined, HEADERS).errors[0]!, /status 418 is not documented/);
  // A method the path does not have: only the router's 405 with Allow is acceptable.
  const allow = new Headers({ allow: 'GET', 'x-svc-request-id': 'a' });
  assert.deepEqual(check('/api/v3/roles', 405, { message: 'Method not allowed.' }, 'PUT', allow), []);
  assert.match(check('/api/v3/roles', 405, { message: 'Method not allowed.' }, 'PUT')[0]!, /missing response header allow/);
  assert.match(check('/api/v3/roles', 405, { message: 'Nope.' }, 'PUT', allow)[0]!, /must be one of \["Method not allowed\."\]/);
  assert.match(check('/api/v3/roles', 200, [], 'PUT')[0]!, /PUT \/api\/v3\/roles is not documented/);
  // The parser's 431 carries no request id; the document says so.
  assert.deepEqual(validateResponse('GET', '/api/v3/roles', 431, 'application/json', { message: 'Request header fields too large.' }, new Headers()).errors, []);
  // Paths outside the document are not checked at all.
  assert.deepEqual(validateResponse('GET', '/nothing/here', 404, null, undefined), { operation: null, errors: [] });
  // A page envelope is checked through allOf down to its items.
  const page = { current_page: 1, data: [{ id: 'x' }], first_page_url: 'http://h/a?page=1', from: 1, last_page: 1, last_page_url: 'http://h/a?page=1', links: [], next_page_url: null, path: 'http://h/a', per_page: 10, prev_page_url: null, to: 1, total: 1 };
  const errors = check('/api/v3/users', 200, page);
  assert.ok(errors.some((e) => /^\$\.links: must NOT have fewer than 3 items/.test(e)), errors.join('\n'));
  assert.ok(errors.some((e) => /^\$\.data\[0\]: missing required property "email"/.test(e)), errors.join('\n'));
});

test('validateResponse: a configuration is checked against the schema its type names', () => {
  const base = { id: '0b7e9b3c-59a4-4c1e-8f65-8f1c1f1c1f1c', name: 'w', created_at: USER.created_at, updated_at: USER.updated_at };
  const provider = { ...base, type: 'provider', provider: 'google', values: [{ key: 'provider', value: 'google' }] };
  assert.deepEqual(check(`/api/v3/configurations/${base.id}`, 200, provider), []);
  // The discriminator picks the provider schema, so the error is about `provider`, not a list of both branches.
  const errors = check(`/api/v3/configurations/${base.id}`, 200, { ...provider, provider: null });
  assert.equal(errors[0], '$.provider: must be string, got null');
  assert.ok(errors.every((e) => e.startsWith('$.provider:')), errors.join('\n'));
  assert.ok(check(`/api/v3/configurations/${base.id}`, 200, { ...provider, type: 'vault' }).length > 0);
});

test('sync log rows: the twelve api fields and nine usage fields, bounded as the log lists are', () => {
  const batch = pointer('components', 'schemas', 'SyncLogBatch');
  const api = {
    id: 1, request_id: 'r-1', method: 'POST', path: '/api/v3/encryption/payments/encrypt', status_code: 200, api_key_id: null, user_id: 1,
    configuration_id: '0b7e9b3c-59a4-4c1e-8f65-8f1c1f1c1f1c', destination: null, duration_ms: 1.5, ip: '127.0.0.1', created_at: '2026-01-01T00:00:00.000Z',
  };
  const usage = { id: 1, request_id: 'r-1', configuration_id: api.configuration_id, api_key_id: null, user_id: null, mode: 'encrypt', field_count: 1, bytes: 10, created_at: api.created_at };
  const instance = '5f0c6f1e9b2d4a7c8e3f1a2b3c4d5e6f';
  assert.deepEqual(schemaErrors(batch, { replica: 'r', instance, api: [api], usage: [usage] }), []);
  assert.equal(Object.keys(api).length, 12);
  assert.equal(Object.keys(usage).length, 9);
  const refused: Array<[string, unknown]> = [
    ['status 99', { ...api, status_code: 99 }],
    ['status 600', { ...api, status_code: 600 }],
    ['an unknown method', { ...api, method: 'FETCH' }],
    ['a lower-case method', { ...api, method: 'post' }],
    ['a user id 0', { ...api, user_id: 0 }],
    ['a key id that is no UUID', { ...api, api_key_id: 'key-1' }],
    ['a date that is no ISO time', { ...api, created_at: 'yesterday' }],
    ['an extra field', { ...api, extra: 1 }],
  ];
  for (const [what, row] of refused) assert.notDeepEqual(schemaErrors(batch, { replica: 'r', instance, api: [row] }), [], what);
  for (const field of Object.keys(api)) {
    const { [field]: _, ...without } = api as Record<string, unknown>;
    assert.notDeepEqual(schemaErrors(batch, { replica: 'r', instance, api: [without] }), [], `api row without ${field}`);
  }
  assert.notDeepEqual(schemaErrors(batch, { replica: 'r', api: [api] }), [], 'a batch without its instance');
});

test('the schema validator is strict: unknown keywords, formats and references are errors', () => {
  const ajv = createAjv();
  assert.equal(ajv.compile({ type: ['string', 'null'], maxLength: 2 })(null), true);
  assert.equal(ajv.compile({ type: 'string', format: 'uuid' })('0b7e9b3c-59a4-4c1e-8f65-8f1c1f1c1f1'), false);
  assert.equal(ajv.compile({ type: 'string', format: 'uri' })('not a uri'), false);
  assert.throws(() => ajv.compile({ type: 'integer', minimun: 1 }), /unknown keyword: "minimun"/);
  assert.throws(() => ajv.compile({ type: 'string', format: 'email' }), /unknown format "email"/);
  assert.throws(() => ajv.compile({ $ref: '#/components/schemas/Nope' }), /can't resolve reference/);
});
