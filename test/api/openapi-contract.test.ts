/**
 * The OpenAPI contract: every operation of the document is called against the real service
 * with requests built from the document, and every answer is checked against it (status,
 * headers, body: test/support/openapi-validator.ts).
 *
 * For each operation: a valid request with only what is required and one with everything
 * the document offers (bodies generated from their schemas, test/support/openapi-requests.ts);
 * each body mutation (a field removed, a field of the wrong type, an unknown field); each
 * query parameter with a valid and with invalid values; each path id wrong; the request
 * without credentials and with wrong ones. What the document calls valid must succeed with
 * its success status, what it refuses must be refused with the status it names for that:
 * 422 for a body or a query, 404 for an id, 401 for credentials. Besides: a viewer's key
 * (403 unless `x-roles` gives the viewer the operation's `x-permission`), bodies that are
 * not JSON, malformed or over the limit (415, 400, 413), oversized headers (the parser's
 * 431), a method the path does not list (405, `Allow` naming exactly the documented
 * methods), a destination that refuses connections (502), an egress route whose
 * configuration is gone (503), and the login lockout (429). Every difference is collected
 * and reported at once.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { LOGS_BODY_LIMIT } from '../../src/api/sync-logs.ts';
import { KEYS, startApp } from '../support/app.ts';
import { closedPort, startEcho, type Echo } from '../support/destinations.ts';
import { generate, mutations, OMIT, type Hint, type Mutation } from '../support/openapi-requests.ts';
import { DOCUMENT, follow, isObject, operations, parametersOf, pointer, schemaAccepts, validateResponse, type Obj, type Operation } from '../support/openapi-validator.ts';

const SEED = `
seed:
  users:
    - { name: Ada Admin, email: ada@example.com, password: "correct horse", roles: [owner] }
    - { name: Vi Ewer, email: viewer@example.com, roles: [viewer] }
  api_keys:
    - { name: owner, user: ada@example.com, key: ${KEYS.owner} }
    - { name: viewer, user: viewer@example.com, key: ${KEYS.viewer} }
  configurations:
    - { name: payments, proxy_slug: payments, fields: [card.number], destinations: ["ECHO/", "CLOSED/"] }
    - { name: doomed, proxy_slug: doomed }
    - name: workspace
      type: provider
      provider: google
      groups: [{ id: g-nurses, name: Nurses, members: [ada@example.com] }]
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com] }
`;

const WRONG_KEY = `svc_${'Z'.repeat(40)}`;
const NO_UUID = '00000000-0000-4000-8000-000000000000';

// ---------------------------------------------------------------------------------------
// Sending

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  readonly json: any;
}

interface Sent {
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
}

/** Through node:http, which sends a body with any method (fetch refuses one on GET and HEAD). */
function send(base: string, req: Sent): Promise<Answer> {
  const body = req.body === undefined ? undefined : Buffer.from(req.body);
  const headers = { ...req.headers, ...(body === undefined ? {} : { 'content-length': String(body.length) }) };
  return new Promise((resolve, reject) => {
    const r = request(base + req.path, { method: req.method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const out = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          for (const v of Array.isArray(value) ? value : [value ?? '']) out.append(name, v);
        }
        let json: unknown;
        try {
          json = text === '' ? undefined : JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode!, headers: out, text, json });
      });
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(body);
  });
}

// ---------------------------------------------------------------------------------------
// The world the requests are made in

interface World {
  readonly url: string;
  readonly admin: string;
  readonly echo: Echo;
  /** An allowlisted origin that refuses connections. */
  readonly closed: string;
  readonly userId: number;
  readonly roleId: number;
  readonly classificationId: number;
  readonly payments: string;
  readonly workspace: string;
  readonly apiKeyId: string;
  /** A token of `payments` carrying the PHI classification (open to the owner). */
  readonly token: string;
  readonly problems: string[];
  requests: number;
  readonly operationsCalled: Set<string>;
}

const OWNER = { 'x-svc-authorization': KEYS.owner };
const JSON_TYPE = { 'content-type': 'application/json' };

/** Sends, checks the answer against the document, and records any difference; returns the answer. */
async function exchange(w: World, base: string, req: Sent, expect: (status: number) => boolean, what: string, label: string): Promise<Answer> {
  const res = await send(base, req);
  w.requests++;
  const { operation, errors } = validateResponse(req.method, req.path, res.status, res.headers.get('content-type'), res.json, res.headers);
  if (operation !== null) w.operationsCalled.add(operation);
  const name = `${req.method} ${req.path} [${label}]`;
  if (errors.length > 0) w.problems.push(`${name} → ${res.status}: not as documented: ${errors.slice(0, 3).join('; ')}`);
  if (!expect(res.status)) w.problems.push(`${name} → ${res.status}, expected ${what}: ${res.text.slice(0, 200)}`);
  return res;
}

/** A management request whose success the rest depends on: it must succeed. */
async function must(w: World, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await exchange(w, w.url, { method, path, headers: { ...OWNER, ...JSON_TYPE, ...headers }, body: body === undefined ? undefined : JSON.stringify(body) }, (s) => s < 300, '2xx', 'setup');
  assert.ok(res.status < 300, `setup ${method} ${path} → ${res.status} ${res.text}`);
  return res;
}

async function buildWorld(t: TestContext): Promise<World> {
  const echo = await startEcho(t);
  const closed = `http://127.0.0.1:${await closedPort()}`;
  const egress = [
    `  - { name: vendor, destination: "${echo.url}", configuration: payments, request: { decrypt: [card.number] } }`,
    `  - { name: down, destination: "${closed}", configuration: payments }`,
    `  - { name: gone, destination: "${echo.url}", configuration: doomed }`,
  ];
  // No destroy grace: a version rotated a moment ago may be destroyed, with or without force.
  const running = await startApp(t, `egress:\n${egress.join('\n')}`, SEED.replace('ECHO', echo.url).replace('CLOSED', closed), { admin: true, keys: 'destroy_after: 0s' });
  const partial = { url: running.url, problems: [] as string[], requests: 0, operationsCalled: new Set<string>() } as unknown as World;
  const users = await must(partial, 'GET', '/api/v3/users');
  const roles = await must(partial, 'GET', '/api/v3/roles');
  // The `gone` egress route's configuration is deleted while the service runs: its 503.
  const doomed = (await running.app.services.store.configurations.findByName('doomed'))!;
  await must(partial, 'DELETE', `/api/v3/configurations/${doomed.id}`);
  const configurations = await must(partial, 'GET', '/api/v3/configurations');
  const classifications = await must(partial, 'GET', '/api/v3/classifications');
  const keys = await must(partial, 'GET', '/api/v3/api-keys');
  const byName = (list: Array<{ name: string }>, name: string) => list.find((x) => x.name === name) as any;
  const encrypted = await must(partial, 'POST', '/api/v3/encryption/payments/encrypt', { card: { number: '4111111111111111' } }, { 'x-svc-classification': 'phi' });
  return {
    ...partial,
    admin: running.adminUrl!,
    echo,
    closed,
    userId: byName(users.json.data, 'Ada Admin').id,
    roleId: byName(roles.json, 'owner').id,
    classificationId: byName(classifications.json.data, 'PHI').id,
    payments: byName(configurations.json.data, 'payments').id,
    workspace: byName(configurations.json.data, 'workspace').id,
    apiKeyId: byName(keys.json, 'owner').id,
    token: encrypted.json.card.number,
    requests: partial.requests,
    problems: partial.problems,
    operationsCalled: partial.operationsCalled,
  };
}

// ---------------------------------------------------------------------------------------
// What the document cannot know: ids that exist, values that fit together

/** Values by property name, for bodies anywhere in the API. */
function hints(w: World): Hint {
  return (path, schema) => {
    const name = path.at(-1);
    const parent = path.at(-2);
    if (name === undefined) return undefined;
    if (name === 'provider_container_id') return w.workspace;
    if (name === 'gws_groups') return [{ id: 'g-nurses' }];
    if (parent === 'users' || name === 'user_id') return w.userId;
    if (parent === 'roles' && schema['type'] === 'integer') return w.roleId;
    if (parent === 'configurations' || name === 'configuration_id') return w.payments;
    if (name === 'api_key_id') return w.apiKeyId;
    if (name === 'request_id') return 'contract-1';
    return undefined;
  };
}

/** Hints of particular bodies, over the general ones. */
function bodyHints(w: World, operation: Operation, context: Context): Hint {
  const general = hints(w);
  const id = String(operation.op['operationId']);
  return (path, schema) => {
    const key = path.join('.');
    if (id === 'createConfiguration' || id === 'updateConfiguration') {
      if (key === 'type') return 'encryption';
      if (key === 'provider') return OMIT;
      if (key === 'values') return [{ key: 'fields', value: 'card.number' }];
    }
    if (id === 'createUser' && key === 'email') return `${unique('contract')}@example.com`;
    if (id === 'login' && key === 'email') return 'ada@example.com';
    if (id === 'login' && key === 'password') return 'correct horse';
    if (id === 'destroyConfigurationKey' && key === 'confirm') return context.confirm;
    if (path.length === 0 && (id.startsWith('egress') || (schema['type'] as unknown[] | undefined)?.includes('array'))) {
      // A data-plane body: tokens to decrypt or rewrap, plaintext to encrypt.
      return { card: { number: /decrypt|rewrap|egress/i.test(id) ? w.token : '4111111111111111' } };
    }
    return general(path, schema);
  };
}

interface Context {
  /** Path parameters, by name. */
  readonly params: Record<string, string>;
  /** `confirm` of a key destruction. */
  readonly confirm?: string;
  /** Extra headers (a bearer token to log out with). */
  readonly headers?: Record<string, string>;
}

let names = 0;
const unique = (prefix: string) => `${prefix}-${++names}`;

/**
 * Path parameters for one request. Reads use the seeded resources; writes get a resource of
 * their own, made for the purpose, so no request takes away what another one needs.
 */
async function contextFor(w: World, operation: Operation): Promise<Context> {
  const writes = operation.method !== 'get' && operation.method !== 'head';
  const path = operation.path;
  if (path.startsWith('/api/v3/classifications/')) {
    if (!writes) return { params: { id: String(w.classificationId) } };
    const made = await must(w, 'POST', '/api/v3/classifications', { name: unique('class'), bg_color: '#000000', fg_color: '#ffffff' });
    return { params: { id: String(made.json.id) } };
  }
  if (path.startsWith('/api/v3/configurations/')) {
    if (!writes) return { params: { id: w.payments } };
    const name = unique('config');
    const made = await must(w, 'POST', '/api/v3/configurations', { name });
    if (!path.endsWith('/destroy')) return { params: { id: made.json.id } };
    await must(w, 'POST', `/api/v3/configurations/${made.json.id}/rotate`);
    return { params: { id: made.json.id, version: '1' }, confirm: `${name}/v1` };
  }
  if (path.startsWith('/api/v3/api-keys/')) {
    if (!writes) return { params: { id: w.apiKeyId } };
    const made = await must(w, 'POST', '/api/v3/api-keys', { name: unique('key') });
    return { params: { id: made.json.id } };
  }
  if (path === '/api/v2/auth/logout') {
    const login = await must(w, 'POST', '/api/v2/auth/login', { email: 'ada@example.com', password: 'correct horse' });
    return { params: {}, headers: { authorization: `Bearer ${login.json.access_token}` } };
  }
  if (path.includes('{slug}')) return { params: { slug: 'payments' } };
  if (path.startsWith('/egress/')) return { params: { name: 'vendor', rest: 'v1/charges' } };
  return { params: {} };
}

/** Wrong values for a path parameter, by its definition: each must answer 404. */
const BAD_IDS: Record<string, readonly string[]> = {
  ClassificationId: ['abc', '0', '999999'],
  ConfigurationId: ['not-a-uuid', NO_UUID],
  ApiKeyId: ['not-a-uuid', NO_UUID],
  KeyVersion: ['abc', '0', '999'],
  ProxySlug: ['no-such-slug', 'UPPER'],
  EgressName: ['no-such-route'],
};

// ---------------------------------------------------------------------------------------
// One operation

interface Shape {
  readonly base: string;
  /** Needs no credentials at all. */
  readonly open: boolean;
  /** Needs a bearer token besides the API key. */
  readonly bearer: boolean;
  /** The success statuses. */
  readonly success: (status: number) => boolean;
  readonly bodyPtr: string | null;
  readonly bodyMedia: string | null;
}

function shapeOf(w: World, operation: Operation): Shape {
  const security = (operation.op['security'] ?? DOCUMENT['security']) as Obj[];
  const responses = Object.keys(operation.op['responses'] as Obj);
  const codes = responses.filter((s) => /^2\d\d$/.test(s)).map(Number);
  const success = responses.includes('2XX') ? (s: number) => s >= 200 && s < 300 : (s: number) => codes.includes(s);
  let bodyPtr: string | null = null;
  let bodyMedia: string | null = null;
  if (operation.op['requestBody'] !== undefined) {
    const requestBody = follow(`${operation.ptr}/requestBody`);
    const content = requestBody.value['content'] as Obj;
    bodyMedia = Object.hasOwn(content, 'application/json') ? 'application/json' : Object.keys(content)[0]!;
    bodyPtr = `${requestBody.ptr}${pointer('content', bodyMedia, 'schema')}`;
  }
  const adminOnly = Array.isArray(operation.item['servers']);
  return {
    base: adminOnly ? w.admin : w.url,
    open: security.length === 0,
    bearer: security.length > 0 && security.every((s) => Object.hasOwn(s, 'bearer')),
    success,
    bodyPtr,
    bodyMedia,
  };
}

function fill(template: string, params: Record<string, string>): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => params[name] ?? `{${name}}`);
}

/** Values of the header parameters, for the request that uses everything the document offers. */
function headerValues(w: World, operation: Operation): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { ptr, value } of parametersOf(operation)) {
    if (value['in'] !== 'header') continue;
    const name = String(value['name']);
    const known: Record<string, string> = {
      'x-svc-request-id': 'contract-full-1',
      'x-svc-fields': 'card.number',
      'x-svc-classification': 'phi',
      'x-svc-destination': `${w.echo.url}/v1/charges`,
      'x-svc-mode': 'encrypt',
      'if-none-match': '"0000000000000000000000000000000000000000000000000000000000000000"',
    };
    out[name] = known[name] ?? String(generate(`${ptr}/schema`, { full: false }));
  }
  return out;
}

/** Query parameters: one valid value each, and values the document refuses. */
function queryCases(operation: Operation, w: World): Array<{ label: string; query: string; valid: boolean }> {
  const out: Array<{ label: string; query: string; valid: boolean }> = [];
  for (const { ptr, value } of parametersOf(operation)) {
    if (value['in'] !== 'query') continue;
    const name = String(value['name']);
    const schema = follow(`${ptr}/schema`).value;
    const enc = (v: unknown) => `${encodeURIComponent(name)}=${encodeURIComponent(String(v))}`;
    if (schema['type'] === 'array') {
      const item = schema['items'] as Obj;
      const good = item['format'] === 'uuid' ? w.workspace : 1;
      out.push({ label: `${name} valid`, query: enc(good), valid: true });
      out.push({ label: `${name} not ${String(item['type'])}`, query: enc('abc'), valid: false });
      continue;
    }
    if (name === 'cursor') {
      // Opaque: a valid one only ever comes from a page's next_cursor (test/api/logs.test.ts walks them).
      out.push({ label: 'cursor made up', query: enc('c29tZXRoaW5n'), valid: false });
      continue;
    }
    const sample = name === 'providers' ? w.workspace : generate(`${ptr}/schema`, { full: false, hint: hints(w) });
    out.push({ label: `${name} valid`, query: enc(sample), valid: true });
    if (schema['type'] === 'integer') {
      out.push({ label: `${name} not an integer`, query: enc('abc'), valid: false });
      if (typeof schema['minimum'] === 'number') out.push({ label: `${name} below minimum`, query: enc(schema['minimum'] - 1), valid: false });
      if (typeof schema['maximum'] === 'number') {
        out.push({ label: `${name} at maximum`, query: enc(schema['maximum']), valid: true });
        out.push({ label: `${name} above maximum`, query: enc(schema['maximum'] + 1), valid: false });
      }
    }
    if (Array.isArray(schema['enum'])) out.push({ label: `${name} not in enum`, query: enc('not-a-choice'), valid: false });
    if (typeof schema['maxLength'] === 'number' && schema['pattern'] === undefined) {
      out.push({ label: `${name} as long as maxLength`, query: enc('x'.repeat(schema['maxLength'])), valid: true });
      out.push({ label: `${name} too long`, query: enc('x'.repeat(schema['maxLength'] + 1)), valid: false });
    }
    if (typeof schema['pattern'] === 'string') out.push({ label: `${name} not matching its pattern`, query: enc('!!'), valid: false });
  }
  return out;
}

const status = (...codes: number[]) => (s: number) => codes.includes(s);

async function exercise(w: World, operation: Operation): Promise<void> {
  const shape = shapeOf(w, operation);
  const method = operation.method.toUpperCase();
  const id = String(operation.op['operationId']);
  const name = `${method} ${operation.path}`;
  const body = (context: Context, full: boolean): string | undefined => {
    if (shape.bodyPtr === null || method === 'HEAD' && shape.bodyMedia !== 'application/json') return undefined;
    return JSON.stringify(generate(shape.bodyPtr, { full, hint: bodyHints(w, operation, context) }));
  };
  const credentials = (context: Context) => (shape.open ? {} : { ...OWNER, ...context.headers });
  const contentType = shape.bodyPtr === null ? {} : JSON_TYPE;
  const call = async (label: string, build: (context: Context) => Sent, expect: (s: number) => boolean, what: string) => {
    const context = await contextFor(w, operation);
    return exchange(w, shape.base, build(context), expect, what, label);
  };
  const success = `its success status (${Object.keys(operation.op['responses'] as Obj).filter((s) => s.startsWith('2')).join(', ')})`;

  // Valid: what is required, then everything the document offers.
  await call('required only', (c) => ({ method, path: fill(operation.path, c.params), headers: { ...credentials(c), ...contentType }, body: body(c, false) }), shape.success, success);
  const full = (c: Context, extra: Record<string, string> = {}): Sent => ({
    method,
    path: fill(operation.path, c.params),
    headers: { ...credentials(c), ...contentType, ...headerValues(w, operation), ...extra },
    body: body(c, true),
  });
  const forwards = Object.hasOwn(full({ params: {} }).headers, 'x-svc-destination');
  // Forwarded, the destination's answer comes back: the echo server answers 201.
  await call('everything', (c) => full(c), forwards ? status(201) : shape.success, forwards ? "the destination's 201" : success);

  // Body mutations, each judged by the document.
  if (shape.bodyPtr !== null && shape.bodyMedia === 'application/json') {
    const base = generate(shape.bodyPtr, { full: true, hint: bodyHints(w, operation, await contextFor(w, operation)) });
    for (const mutation of mutations(shape.bodyPtr, base)) {
      // Login takes any well-formed email and password; other ones than Ada's are wrong credentials (401).
      const changedCredential = id === 'login' && mutation.valid && /(email|password)$/.test(mutation.label);
      await call(
        `body ${mutation.label}`,
        (c) => ({
          method,
          path: fill(operation.path, c.params),
          headers: { ...credentials(c), ...JSON_TYPE },
          // Regenerated for this request's own resources (a key destruction's confirm), then mutated the same way.
          body: JSON.stringify(remake(shape.bodyPtr!, mutation, generate(shape.bodyPtr!, { full: true, hint: bodyHints(w, operation, c) }), base)),
        }),
        changedCredential ? status(401) : mutation.valid ? shape.success : status(422),
        changedCredential ? '401: well-formed but wrong credentials' : mutation.valid ? `${success}: the document takes this body` : '422: the document refuses this body',
      );
    }
  }

  // Query parameters.
  for (const q of queryCases(operation, w)) {
    await call(
      `query ${q.label}`,
      (c) => ({ method, path: `${fill(operation.path, c.params)}?${q.query}`, headers: credentials(c) }),
      q.valid ? shape.success : status(422),
      q.valid ? success : '422',
    );
  }

  // Wrong path ids.
  for (const { ptr, value } of parametersOf(operation)) {
    if (value['in'] !== 'path') continue;
    for (const bad of BAD_IDS[ptr.split('/').pop()!] ?? []) {
      await call(
        `${String(value['name'])} = ${bad}`,
        (c) => ({ method, path: fill(operation.path, { ...c.params, [String(value['name'])]: bad }), headers: { ...credentials(c), ...contentType }, body: body(c, false) }),
        status(404),
        '404',
      );
    }
  }

  // Credentials.
  const path = (c: Context) => fill(operation.path, c.params);
  if (shape.open) {
    await call('a wrong key changes nothing', (c) => ({ method, path: path(c), headers: { 'x-svc-authorization': WRONG_KEY, ...contentType }, body: body(c, false) }), shape.success, success);
  } else {
    await call('no API key', (c) => ({ method, path: path(c), headers: { ...c.headers, ...contentType }, body: body(c, false) }), status(401), '401');
    await call('a wrong API key', (c) => ({ method, path: path(c), headers: { ...c.headers, 'x-svc-authorization': WRONG_KEY, ...contentType }, body: body(c, false) }), status(401), '401');
    await call('a forged bearer token', (c) => ({ method, path: path(c), headers: { ...OWNER, authorization: 'Bearer a.b.c', ...contentType }, body: body(c, false) }), status(401), '401');
    if (shape.bearer) await call('no bearer token', (c) => ({ method, path: path(c), headers: { ...OWNER, ...contentType }, body: body(c, false) }), status(401), '401');
  }

  // The data plane's own headers and bodies.
  if (operation.path === '/proxy/{slug}' || /\/(encrypt|decrypt)$/.test(operation.path)) {
    const bare = (c: Context, extra: Record<string, string>): Sent => ({ method, path: path(c), headers: { ...OWNER, ...extra } });
    await call('no body', (c) => bare(c, {}), status(400), '400: nothing to transform');
    await call('no body, forwarded', (c) => bare(c, { 'x-svc-destination': `${w.echo.url}/status` }), status(201), "the destination's 201");
    await call('a destination that is not a URL', (c) => full(c, { 'x-svc-destination': 'not a url' }), status(400), '400');
    await call('a destination outside the allowlist', (c) => full(c, { 'x-svc-destination': 'https://elsewhere.example/' }), status(403), '403');
    await call('a classification that does not exist', (c) => full(c, { 'x-svc-classification': 'no-such-class', 'x-svc-destination': '' }), status(422), '422');
  }
  if (operation.path === '/proxy/{slug}') {
    await call('x-svc-mode bogus', (c) => full(c, { 'x-svc-mode': 'bogus' }), status(400), '400');
    const decrypting = (c: Context): Sent => ({ method, path: path(c), headers: { ...OWNER, ...JSON_TYPE, 'x-svc-mode': 'Decrypt' }, body: JSON.stringify({ card: { number: w.token } }) });
    const decrypted = await call('x-svc-mode decrypt', decrypting, status(200), '200');
    if (method !== 'HEAD' && decrypted.json?.card?.number !== '4111111111111111') w.problems.push(`${name} [x-svc-mode decrypt]: the token was not decrypted: ${decrypted.text}`);
    await call('x-svc-mode decrypt with a viewer', (c) => ({ ...decrypting(c), headers: { ...decrypting(c).headers, 'x-svc-authorization': KEYS.viewer } }), status(403), '403');
  }
  // A viewer's key: the document's role table and the operation's permission say what it gets.
  const permission = operation.op['x-permission'];
  if (!shape.open && permission !== null && !shape.bearer) {
    const viewer = new Set(((DOCUMENT['x-roles'] as Record<string, string[]>)['viewer']) ?? []);
    const allowed = typeof permission === 'string' && viewer.has(permission);
    await call(
      'a viewer',
      (c) => ({ method, path: path(c), headers: { 'x-svc-authorization': KEYS.viewer, ...contentType }, body: body(c, false) }),
      allowed ? shape.success : status(403),
      allowed ? success : '403: the viewer lacks the permission',
    );
  }

  // The permission comes before the slug: a caller without it learns nothing about which slugs exist.
  if (operation.path.includes('{slug}')) {
    await call(
      'a viewer and an unknown slug',
      (c) => ({ method, path: fill(operation.path, { ...c.params, slug: 'no-such-slug' }), headers: { 'x-svc-authorization': KEYS.viewer, ...contentType }, body: body(c, false) }),
      status(403),
      '403 before the slug is looked up',
    );
  }

  // Bodies that cannot be read.
  if (shape.bodyMedia === 'application/json') {
    const declared = Object.keys(operation.op['responses'] as Obj);
    const readable = (c: Context, b: string, type = 'application/json'): Sent => ({ method, path: path(c), headers: { ...credentials(c), 'content-type': type }, body: b });
    // The data plane reads forms too: a type it does not read is plain text there.
    const content = follow(`${operation.ptr}/requestBody`).value['content'] as Obj;
    const unread = Object.hasOwn(content, 'application/x-www-form-urlencoded') ? 'text/plain' : 'application/x-www-form-urlencoded';
    await call('a body in a format it does not read', (c) => readable(c, 'a=1', unread), status(415), '415');
    await call('malformed JSON', (c) => readable(c, '{"a":'), status(400), '400');
    if (!(shape.bodyPtr !== null && follow(shape.bodyPtr).value['type'] !== 'object')) await call('a JSON array', (c) => readable(c, '[1]'), status(400), '400: not an object');
    if (declared.includes('413')) {
      const limit = operation.path === '/api/v3/sync/logs' ? LOGS_BODY_LIMIT : 1024 * 1024;
      await call('a body over the limit', (c) => readable(c, `{"a":"${'x'.repeat(limit)}"}`), status(413), '413');
    }
  }

  // Oversized headers: the parser answers before any route runs. Not for HEAD: the parser
  // does not know the method yet and sends its body anyway, which an HTTP client reading a
  // HEAD answer takes as a protocol error (the document says the answer is sent whole).
  if (method !== 'HEAD') await call('oversized headers', (c) => ({ method, path: path(c), headers: { ...credentials(c), 'x-padding': 'p'.repeat(20 * 1024) } }), status(431), '431');

  // Forwarding that fails.
  if (operation.path === '/proxy/{slug}' || /\/(encrypt|decrypt)$/.test(operation.path)) {
    await call('a destination that refuses connections', (c) => full(c, { 'x-svc-destination': `${w.closed}/x` }), status(502), '502');
  }
  if (operation.path.startsWith('/egress/')) {
    await call('an egress destination that refuses connections', (c) => ({ method, path: fill(operation.path, { ...c.params, name: 'down' }), headers: {} }), status(502), '502');
    await call('an egress route whose configuration is gone', (c) => ({ method, path: fill(operation.path, { ...c.params, name: 'gone' }), headers: {} }), status(503), '503');
  }

  if (id === 'login') {
    // Five wrong passwords for one email, then the lockout.
    const email = `${unique('locked')}@example.com`;
    for (let i = 0; i < 5; i++) {
      await call('a wrong password', (c) => ({ method, path: path(c), headers: { ...credentials(c), ...JSON_TYPE }, body: JSON.stringify({ email, password: 'wrong password' }) }), status(401), '401');
    }
    await call('locked out', (c) => ({ method, path: path(c), headers: { ...credentials(c), ...JSON_TYPE }, body: JSON.stringify({ email, password: 'wrong password' }) }), status(429), '429');
  }

  if (id === 'getSyncSnapshot') {
    const first = await call('snapshot', (c) => ({ method, path: path(c), headers: credentials(c) }), status(200), '200');
    const etag = first.headers.get('etag') ?? '';
    await call('if-none-match the current snapshot', (c) => ({ method, path: path(c), headers: { ...credentials(c), 'if-none-match': etag } }), status(304), '304');
  }
  if (!w.operationsCalled.has(name)) w.problems.push(`${name}: no request reached it`);
}

/** A method the path does not list: 405, with `Allow` naming exactly the methods the document lists. */
async function otherMethod(w: World, path: string, item: Obj): Promise<void> {
  const listed = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options'].filter((m) => isObject(item[m]));
  const other = ['put', 'patch', 'delete', 'post', 'get'].find((m) => !listed.includes(m));
  if (other === undefined) return;
  const operation = operations().find((o) => o.path === path)!;
  const context = await contextFor(w, operation);
  const base = Array.isArray(item['servers']) ? w.admin : w.url;
  const res = await exchange(w, base, { method: other.toUpperCase(), path: fill(path, context.params), headers: OWNER }, status(405), '405', 'a method the path does not list');
  const allow = (res.headers.get('allow') ?? '').split(',').map((m) => m.trim().toLowerCase()).sort();
  if (JSON.stringify(allow) !== JSON.stringify([...listed].sort())) w.problems.push(`${other.toUpperCase()} ${path}: Allow says ${allow.join(', ')}, the document lists ${listed.join(', ')}`);
}

/** `mutation` was made from `base`; the same change applied to `fresh` (same shape, this request's own values). */
function remake(ptr: string, mutation: Mutation, fresh: unknown, base: unknown): unknown {
  // Values that differ between `base` and `fresh` are this request's own (a confirm, a unique name):
  // wherever the mutation kept `base`'s value, the fresh one is used.
  const swap = (m: unknown, b: unknown, f: unknown): unknown => {
    if (JSON.stringify(m) === JSON.stringify(b)) return f;
    if (isObject(m) && isObject(b) && isObject(f)) return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, Object.hasOwn(b, k) ? swap(v, b[k], f[k]) : v]));
    if (Array.isArray(m) && Array.isArray(b) && Array.isArray(f)) return m.map((v, i) => (i < b.length ? swap(v, b[i], f[i]) : v));
    return m;
  };
  const out = swap(mutation.body, base, fresh);
  // The swap never changes the document's verdict: only values of the same schema are exchanged.
  assert.equal(schemaAccepts(ptr, out), mutation.valid, `remade body keeps its verdict: ${mutation.label}`);
  return out;
}

// ---------------------------------------------------------------------------------------

test('every operation of the OpenAPI document, called with valid and invalid requests built from it, answers as the document says', async (t) => {
  const w = await buildWorld(t);
  const all = operations();
  for (const operation of all) await exercise(w, operation);
  for (const [path, item] of Object.entries(DOCUMENT['paths'] as Record<string, Obj>)) await otherMethod(w, path, item);
  t.diagnostic(`OPENAPI-CONTRACT ${JSON.stringify({ operations: all.length, requests: w.requests, problems: w.problems.length })}`);
  assert.deepEqual(w.problems, [], `${w.problems.length} differences between the service and its OpenAPI document:\n${w.problems.join('\n')}`);
  const uncalled = all.map((o) => `${o.method.toUpperCase()} ${o.path}`).filter((name) => !w.operationsCalled.has(name));
  assert.deepEqual(uncalled, [], 'every operation was called');
});
