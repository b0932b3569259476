/**
 * The OpenAPI document (issue 3, item 7): served at GET /api/openapi.json, equal to
 * docs/openapi.json, well-formed, covering exactly the routes the router has. Every
 * response the test suite receives through `call()` is checked against it
 * (test/support/app.ts); the last tests here show that check catches what it should.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { openApiDocument } from '../../src/api/openapi.ts';
import { buildRouter } from '../../src/app.ts';
import { PERMISSIONS } from '../../src/config/schema.ts';
import { OPENAPI_FILE, renderOpenApi } from '../../scripts/write-openapi.ts';
import { call, startApp } from '../support/app.ts';
import { findPathTemplate, HTTP_METHODS, isObject, SchemaValidator, validateResponse } from '../support/openapi-validator.ts';

type Obj = Record<string, unknown>;

const doc = openApiDocument as Obj;
const validator = new SchemaValidator(doc);
const paths = doc['paths'] as Record<string, Obj>;
const components = doc['components'] as Record<string, Record<string, Obj>>;

function deref(value: unknown): Obj {
  let at = value;
  while (isObject(at) && typeof at['$ref'] === 'string') at = validator.resolve(at['$ref']);
  assert.ok(isObject(at), 'a reference leads to an object');
  return at;
}

function operations(): Array<{ method: string; path: string; op: Obj; item: Obj }> {
  const out: Array<{ method: string; path: string; op: Obj; item: Obj }> = [];
  for (const [path, item] of Object.entries(paths)) {
    for (const method of HTTP_METHODS) if (isObject(item[method])) out.push({ method, path, op: item[method], item });
  }
  return out;
}

/** Every value in the document, with where it is. */
function* walk(value: unknown, at: string): Generator<[unknown, string]> {
  yield [value, at];
  if (Array.isArray(value)) for (const [i, v] of value.entries()) yield* walk(v, `${at}[${i}]`);
  else if (isObject(value)) for (const [k, v] of Object.entries(value)) yield* walk(v, `${at}.${k}`);
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

  for (const [value, at] of walk(doc, '#')) {
    if (isObject(value) && typeof value['$ref'] === 'string') assert.doesNotThrow(() => validator.resolve(value['$ref'] as string), `${at}: ${value['$ref']}`);
  }

  const schemes = Object.keys(components['securitySchemes'] ?? {});
  assert.deepEqual(schemes.sort(), ['apiKey', 'bearer']);
  const tags = new Set((doc['tags'] as Array<{ name: string }>).map((tag) => tag.name));
  const ids = new Set<string>();
  const permissions = new Set<string>(PERMISSIONS);
  for (const { method, path, op, item } of operations()) {
    const name = `${method.toUpperCase()} ${path}`;
    assert.equal(typeof op['operationId'], 'string', `${name} has an operationId`);
    assert.ok(!ids.has(op['operationId'] as string), `operationId ${op['operationId']} is unique`);
    ids.add(op['operationId'] as string);
    assert.ok(typeof op['summary'] === 'string' && op['summary'] !== '', `${name} has a summary`);
    for (const tag of op['tags'] as string[]) assert.ok(tags.has(tag), `${name}: tag ${tag} is declared`);

    const responses = op['responses'] as Obj;
    assert.ok(Object.keys(responses).length > 0, `${name} has responses`);
    // Egress routes answer whatever the destination answers: `default` is their success.
    assert.ok(Object.keys(responses).some((s) => /^2\d\d$|^default$/.test(s)), `${name} has a success response`);
    for (const [status, response] of Object.entries(responses)) {
      assert.match(status, /^([1-5]\d\d|default)$/, `${name}: status ${status}`);
      assert.equal(typeof deref(response)['description'], 'string', `${name} ${status} has a description`);
    }

    assert.ok(Object.hasOwn(op, 'x-permission'), `${name} names its permission`);
    const permission = op['x-permission'];
    if (typeof permission === 'string') assert.ok(permissions.has(permission), `${name}: ${permission} is a permission`);
    else if (permission !== null) assert.deepEqual(permission, { encrypt: 'data.encrypt', decrypt: 'data.decrypt' }, `${name}: a mode-dependent permission`);

    const security = op['security'] as Array<Obj> | undefined;
    for (const requirement of security ?? (doc['security'] as Array<Obj>)) for (const scheme of Object.keys(requirement)) assert.ok(schemes.includes(scheme), `${name}: scheme ${scheme}`);

    // Path parameters: exactly the template's, each required; no parameter twice.
    const parameters = [...((item['parameters'] as unknown[]) ?? []), ...((op['parameters'] as unknown[]) ?? [])].map(deref);
    const keys = parameters.map((p) => `${p['in']}:${p['name']}`);
    assert.equal(new Set(keys).size, keys.length, `${name}: no parameter twice`);
    const inPath = parameters.filter((p) => p['in'] === 'path');
    assert.deepEqual(inPath.map((p) => p['name']).sort(), [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort(), `${name}: path parameters`);
    for (const p of inPath) assert.equal(p['required'], true, `${name}: path parameter ${p['name']} is required`);
    for (const p of parameters) assert.ok(['path', 'query', 'header'].includes(p['in'] as string), `${name}: parameter ${p['name']} in ${p['in']}`);
  }
  assert.ok(ids.size >= 40, `${ids.size} operations`);
});

test('every schema uses only keywords the validator implements, and every named schema is used', () => {
  const problems: string[] = [];
  for (const [name, schema] of Object.entries(components['schemas'] ?? {})) problems.push(...validator.check(schema, `#/components/schemas/${name}`));
  for (const [value, at] of walk(doc, '#')) {
    // Schemas of parameters, headers and media types.
    if (isObject(value) && isObject(value['schema']) && !at.startsWith('#.components.schemas')) problems.push(...validator.check(value['schema'], `${at}.schema`));
  }
  assert.deepEqual(problems, []);

  const text = JSON.stringify(doc);
  for (const name of Object.keys(components['schemas'] ?? {})) {
    assert.ok(text.includes(`"#/components/schemas/${name}"`), `#/components/schemas/${name} is referenced`);
  }
  for (const kind of ['responses', 'parameters', 'headers']) {
    for (const name of Object.keys(components[kind] ?? {})) assert.ok(text.includes(`"#/components/${kind}/${name}"`), `#/components/${kind}/${name} is referenced`);
  }
});

// ---------------------------------------------------------------------------------------
// Routes

test('every route of the router is in the document, and every operation is a route', () => {
  const router = buildRouter();
  const routed = router.routes().map((r) => `${r.method} ${toTemplate(r.template)}`);
  // The admin listener (server.admin_listen) has only /metrics besides /healthz and /readyz.
  const admin = ['GET /metrics'];
  const documented = operations().map(({ method, path }) => `${method.toUpperCase()} ${path}`);
  assert.deepEqual([...documented].sort(), [...routed, ...admin].sort());

  for (const route of router.routes()) {
    // A concrete path for the pattern: the router and the validator must pick the same template.
    const sample = route.template.replace(/:(\w+)/g, 'x1').replace(/\*(\w+)/, 'a/b');
    assert.equal(router.find(route.method, sample).template, route.template, sample);
    assert.equal(findPathTemplate(doc, sample)?.path, toTemplate(route.template), sample);
  }
  // Static segments beat parameters, and a trailing rest may be empty, as in the router.
  assert.equal(findPathTemplate(doc, '/api/v3/configurations/abc/keys')?.path, '/api/v3/configurations/{id}/keys');
  assert.equal(findPathTemplate(doc, '/egress/vendor')?.path, '/egress/{name}/{rest}');
  assert.equal(findPathTemplate(doc, '/api/v3/classifications/')?.path, undefined, 'an empty segment is no id');
});

test('the management routes carry the same permission in apiRoutes and in the document', async () => {
  const { apiRoutes } = await import('../../src/api/index.ts');
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
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, email: 'not-an-email' })[0]!, /\$\.email: "not-an-email" is not a valid email/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, created_at: '2026-01-01 00:00' })[0]!, /\$\.created_at: .* is not a valid date-time/);
  const { id: _, ...withoutId } = USER;
  assert.match(check('/api/v2/auth/userdetails', 200, withoutId)[0]!, /missing required property "id"/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, password_hash: 'x' })[0]!, /unexpected property "password_hash"/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, roles: [{ ...USER.roles[0], name: 'superuser' }] })[0]!, /\$\.roles\[0\]\.name: must be one of/);
  assert.match(check('/api/v2/auth/userdetails', 200, { ...USER, id: 1.5 })[0]!, /\$\.id: expected integer, got number/);
});

test('validateResponse: status, content type, headers and methods must be documented', () => {
  assert.match(check('/api/v2/auth/userdetails', 418, { message: 'x' })[0]!, /status 418 is not documented/);
  assert.match(check('/api/v3/classifications/7', 404, { message: 'Missing.' })[0]!, /must be one of \["Not found\."\]/);
  assert.match(check('/api/v3/classifications/7', 401, { message: 'Unauthorized.', errors: {} })[0]!, /unexpected property "errors"/);
  assert.match(validateResponse('GET', '/api/v2/auth/userdetails', 200, 'text/html', '<p>', HEADERS).errors[0]!, /content-type text\/html is not documented/);
  assert.match(check('/api/v2/auth/userdetails', 200, USER, 'GET', new Headers())[0]!, /missing response header x-svc-request-id/);
  assert.match(check('/api/v3/classifications/7', 204, { message: 'x' }, 'DELETE')[0]!, /documents no body/);
  assert.deepEqual(validateResponse('DELETE', '/api/v3/classifications/7', 204, null, undefined, HEADERS).errors, []);
  // A method the path does not have: only the router's 405 is acceptable.
  assert.deepEqual(check('/api/v3/roles', 405, { message: 'Method not allowed.' }, 'PUT', new Headers({ allow: 'GET' })), []);
  assert.match(check('/api/v3/roles', 405, { message: 'Method not allowed.' }, 'PUT')[0]!, /a 405 without an Allow header/);
  assert.match(check('/api/v3/roles', 200, [], 'PUT')[0]!, /PUT \/api\/v3\/roles is not documented/);
  // Paths outside the document are not checked at all.
  assert.deepEqual(validateResponse('GET', '/nothing/here', 404, null, undefined), { operation: null, errors: [] });
  // A page envelope is checked through allOf down to its items.
  const page = { current_page: 1, data: [{ id: 'x' }], first_page_url: 'http://h/a?page=1', from: 1, last_page: 1, last_page_url: 'http://h/a?page=1', links: [], next_page_url: null, path: 'http://h/a', per_page: 10, prev_page_url: null, to: 1, total: 1 };
  const errors = check('/api/v3/users', 200, page);
  assert.ok(errors.some((e) => /\$\.links: must have at least 3 items/.test(e)), errors.join('\n'));
  assert.ok(errors.some((e) => /\$\.data\[0\]: missing required property "email"/.test(e)), errors.join('\n'));
});

test('validateResponse: a configuration is checked against the schema its type names', () => {
  const base = { id: '0b7e9b3c-59a4-4c1e-8f65-8f1c1f1c1f1c', name: 'w', created_at: USER.created_at, updated_at: USER.updated_at };
  const provider = { ...base, type: 'provider', provider: 'google', values: [{ key: 'provider', value: 'google' }] };
  assert.deepEqual(check(`/api/v3/configurations/${base.id}`, 200, provider), []);
  // The discriminator picks the provider schema, so the error is about `provider`, not a list of both branches.
  assert.match(check(`/api/v3/configurations/${base.id}`, 200, { ...provider, provider: null })[0]!, /\$\.provider: expected string, got null/);
  assert.match(check(`/api/v3/configurations/${base.id}`, 200, { ...provider, type: 'vault' })[0]!, /type "vault" names none of the oneOf schemas/);
});

test('the schema validator implements its keywords and refuses unknown ones', () => {
  const v = new SchemaValidator({});
  assert.deepEqual(v.validate({ type: ['string', 'null'], maxLength: 2 }, null), []);
  assert.equal(v.validate({ type: ['string', 'null'], maxLength: 2 }, 'abc').length, 1);
  assert.equal(v.validate({ const: 'bearer' }, 'Bearer').length, 1);
  assert.equal(v.validate({ type: 'string', pattern: '^#[0-9A-Fa-f]{6}$' }, '#12345g').length, 1);
  assert.equal(v.validate({ type: 'integer', minimum: 1, maximum: 3 }, 0).length, 1);
  assert.equal(v.validate({ type: 'integer', minimum: 1, maximum: 3 }, 4).length, 1);
  assert.equal(v.validate({ type: 'string', format: 'uuid' }, '0b7e9b3c-59a4-4c1e-8f65-8f1c1f1c1f1').length, 1);
  assert.equal(v.validate({ type: 'string', format: 'uri' }, 'not a uri').length, 1);
  assert.deepEqual(v.validate({ type: 'string', format: 'uri' }, 'http://localhost:8080/api/v3/users?page=2'), []);
  assert.equal(v.validate({ type: 'array', items: { type: 'integer' }, maxItems: 2 }, [1, 'a', 3]).length, 2);
  assert.deepEqual(v.validate({ anyOf: [{ type: 'string' }, { type: 'integer' }] }, 3), []);
  assert.ok(v.validate({ anyOf: [{ type: 'string' }, { type: 'integer' }] }, true).length > 0);
  assert.match(v.validate({ oneOf: [{ type: 'integer' }, { type: 'number' }] }, 3)[0]!, /matches 2 schemas of oneOf/);
  assert.deepEqual(v.validate({ type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } } }, { a: ['x'] }), []);
  assert.equal(v.validate({ type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } } }, { a: [1] }).length, 1);
  assert.throws(() => v.validate({ type: 'string', minProperties: 1 }, 'x'), /unsupported schema keyword "minProperties"/);
  assert.throws(() => v.validate({ type: 'string', format: 'ipv4' }, 'x'), /unsupported format "ipv4"/);
  assert.throws(() => v.validate({ $ref: '#/components/schemas/Nope' }, 'x'), /unresolvable reference/);
  assert.deepEqual(v.check({ type: 'object', required: ['a'], properties: {} }, '#'), ['#: required "a" is not a property']);
});
