/**
 * The permission matrix (issue 3): each built-in role × each endpoint gives the documented
 * result. The expected tables are written out here from DESIGN §9 and §10, not read from
 * the code under test; the code, the OpenAPI document and docs/permissions.md are each
 * compared with them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { apiRoutes } from '../../src/api/route-table.ts';
import { openApiDocument } from '../../src/api/openapi.ts';
import { apiKeyPrefix, generateApiKey, hashApiKey } from '../../src/auth/api-keys.ts';
import type { App } from '../../src/app.ts';
import { PERMISSIONS_FILE, renderPermissions } from '../../scripts/write-openapi.ts';
import { call, startApp } from '../support/app.ts';
import type { TestContext } from 'node:test';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const ROLES = ['owner', 'administrator', 'developer', 'viewer'] as const;
type Role = (typeof ROLES)[number];

// ---------------------------------------------------------------------------------------
// The expected tables

const VIEW = ['classifications.view', 'configurations.view', 'logs.view', 'api-keys.view', 'users.view', 'roles.view'];
/** DESIGN §9, plus `sync.*` for replication (docs/replication.md: owner and administrator only). */
const EVERY = [
  'classifications.view', 'classifications.create', 'classifications.update', 'classifications.delete',
  'configurations.view', 'configurations.create', 'configurations.update', 'configurations.delete', 'configurations.rotate',
  'data.encrypt', 'data.decrypt',
  'logs.view',
  'api-keys.view', 'api-keys.create', 'api-keys.revoke', 'api-keys.rotate',
  'users.view', 'users.manage',
  'roles.view',
  'sync.read', 'sync.write',
];
const ROLE_PERMISSIONS: Record<Role, readonly string[]> = {
  owner: EVERY,
  administrator: EVERY,
  developer: ['data.encrypt', 'data.decrypt', ...VIEW, 'api-keys.create'],
  viewer: VIEW,
};

/** DESIGN §10 with each route's permission; null: any valid API key. */
const MANAGEMENT: ReadonlyArray<readonly [method: string, path: string, permission: string | null]> = [
  ['GET', '/api/v3/classifications', 'classifications.view'],
  ['POST', '/api/v3/classifications', 'classifications.create'],
  ['GET', '/api/v3/classifications/{id}', 'classifications.view'],
  ['PATCH', '/api/v3/classifications/{id}', 'classifications.update'],
  ['DELETE', '/api/v3/classifications/{id}', 'classifications.delete'],
  ['GET', '/api/v3/configurations', 'configurations.view'],
  ['POST', '/api/v3/configurations', 'configurations.create'],
  ['GET', '/api/v3/configurations/{id}', 'configurations.view'],
  ['PUT', '/api/v3/configurations/{id}', 'configurations.update'],
  ['DELETE', '/api/v3/configurations/{id}', 'configurations.delete'],
  ['POST', '/api/v3/configurations/{id}/rotate', 'configurations.rotate'],
  ['GET', '/api/v3/configurations/{id}/keys', 'configurations.view'],
  ['POST', '/api/v3/configurations/{id}/keys/{version}/destroy', 'configurations.rotate'],
  ['GET', '/api/v3/api-keys', 'api-keys.view'],
  ['POST', '/api/v3/api-keys', 'api-keys.create'],
  ['GET', '/api/v3/api-keys/{id}', 'api-keys.view'],
  ['POST', '/api/v3/api-keys/{id}/revoke', 'api-keys.revoke'],
  ['POST', '/api/v3/api-keys/{id}/rotate', 'api-keys.rotate'],
  ['GET', '/api/v3/users', 'users.view'],
  ['POST', '/api/v3/users', 'users.manage'],
  ['GET', '/api/v3/roles', 'roles.view'],
  ['GET', '/api/v3/logs/unified', 'logs.view'],
  ['GET', '/api/v3/logs/activity', 'logs.view'],
  ['GET', '/api/v3/logs/api', 'logs.view'],
  ['GET', '/api/v3/logs/usage', 'logs.view'],
  ['POST', '/api/v2/auth/login', null],
  ['POST', '/api/v2/auth/logout', null],
  ['GET', '/api/v2/auth/userdetails', null],
  ['GET', '/api/v3/sync/snapshot', 'sync.read'],
  ['POST', '/api/v3/sync/logs', 'sync.write'],
];

const DATA_PLANE: ReadonlyArray<readonly [method: string, path: string, permission: string]> = [
  ['POST', '/api/v3/encryption/{slug}/encrypt', 'data.encrypt'],
  ['POST', '/api/v3/encryption/{slug}/decrypt', 'data.decrypt'],
  ['POST', '/api/v3/encryption/{slug}/rewrap', 'configurations.rotate'],
];
const PROXY_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
const PROXY_MODES = { encrypt: 'data.encrypt', decrypt: 'data.decrypt' } as const;

const allowed = (role: Role, permission: string | null) => permission === null || ROLE_PERMISSIONS[role].includes(permission);

// ---------------------------------------------------------------------------------------
// The service

const key = (name: string) => `svc_${name.padEnd(40, '0')}`;
const KEY: Record<Role, string> = { owner: key('MatrixOwner'), administrator: key('MatrixAdmin'), developer: key('MatrixDev'), viewer: key('MatrixViewer') };
const EMAIL: Record<Role, string> = { owner: 'owner@example.com', administrator: 'admin@example.com', developer: 'developer@example.com', viewer: 'viewer@example.com' };
const PASSWORD = (role: Role) => `${role} password 1234`;

const SEED = `
seed:
  users:
${ROLES.map((r) => `    - { name: ${r} user, email: ${EMAIL[r]}, password: "${PASSWORD(r)}", roles: [${r}] }`).join('\n')}
  api_keys:
${ROLES.map((r) => `    - { name: ${r}, user: ${EMAIL[r]}, key: ${KEY[r]} }`).join('\n')}
  configurations:
    - { name: payments, proxy_slug: payments, fields: [a] }
    - { name: workspace, type: provider, provider: google }
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff" }
`;

interface Request {
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/** Fresh things for one call to act on, so every allowed call can succeed. */
class Fixture {
  private readonly app: App;
  private readonly url: string;
  private n = 0;

  constructor(app: App, url: string) {
    this.app = app;
    this.url = url;
  }

  private unique(prefix: string): string {
    this.n += 1;
    return `${prefix}${this.n}`;
  }

  get store() {
    return this.app.services.store;
  }

  classification(): number {
    return (syncRepositories(this.store).classifications.create({ name: this.unique('Doomed '), bgColor: '#000000', fgColor: '#ffffff' })).id;
  }

  providerConfiguration(): string {
    return (syncRepositories(this.store).configurations.create({ id: randomUUID(), name: this.unique('provider-'), type: 'provider', provider: 'google' })).id;
  }

  paymentsId(): string {
    return (syncRepositories(this.store).configurations.findByName('payments'))!.id;
  }

  /** A key of the viewer's: handing it to anyone gives no more than every role holds. */
  apiKey(): string {
    const secret = generateApiKey();
    const viewer = (syncRepositories(this.store).users.findByEmail(EMAIL.viewer))!;
    return (syncRepositories(this.store).apiKeys.create({ name: this.unique('victim-'), prefix: apiKeyPrefix(secret), keyHash: hashApiKey(secret), userId: viewer.id, permissions: [], configurations: [] })).id;
  }

  /** An encryption configuration at key version 2, whose version 1 may be destroyed. */
  async rotatedConfiguration(): Promise<{ id: string; name: string }> {
    const name = this.unique('shred-');
    const created = await call(this.url, '/api/v3/configurations', { key: KEY.owner, body: JSON.stringify({ name }) });
    assert.equal(created.status, 201);
    assert.equal((await call(this.url, `/api/v3/configurations/${created.json.id}/rotate`, { key: KEY.owner })).status, 200);
    return { id: created.json.id, name };
  }

  async accessToken(role: Role): Promise<string> {
    const res = await call(this.url, '/api/v2/auth/login', { key: KEY[role], body: JSON.stringify({ email: EMAIL[role], password: PASSWORD(role) }) });
    assert.equal(res.status, 200);
    return res.json.access_token;
  }

  /** A valid request for `method path` made by `role`. */
  async request(method: string, path: string, role: Role): Promise<Request> {
    switch (`${method} ${path}`) {
      case 'POST /api/v3/classifications':
        return { path, body: { name: this.unique(`${role} `), bg_color: '#112233', fg_color: '#ffffff' } };
      case 'GET /api/v3/classifications/{id}':
      case 'PATCH /api/v3/classifications/{id}':
      case 'DELETE /api/v3/classifications/{id}':
        return { path: path.replace('{id}', String(this.classification())), body: method === 'PATCH' ? { description: 'changed' } : undefined };
      case 'POST /api/v3/configurations':
        return { path, body: { name: this.unique(`config-${role}-`) } };
      case 'GET /api/v3/configurations/{id}':
      case 'PUT /api/v3/configurations/{id}':
      case 'DELETE /api/v3/configurations/{id}':
        return { path: path.replace('{id}', this.providerConfiguration()), body: method === 'PUT' ? { name: this.unique('renamed-') } : undefined };
      case 'POST /api/v3/configurations/{id}/rotate':
      case 'GET /api/v3/configurations/{id}/keys':
        return { path: path.replace('{id}', this.paymentsId()) };
      case 'POST /api/v3/configurations/{id}/keys/{version}/destroy': {
        const { id, name } = await this.rotatedConfiguration();
        return { path: path.replace('{id}', id).replace('{version}', '1'), body: { confirm: `${name}/v1`, force: true } };
      }
      case 'POST /api/v3/api-keys':
        return { path, body: { name: this.unique(`key-${role}-`) } };
      case 'GET /api/v3/api-keys/{id}':
      case 'POST /api/v3/api-keys/{id}/revoke':
      case 'POST /api/v3/api-keys/{id}/rotate':
        return { path: path.replace('{id}', this.apiKey()) };
      case 'POST /api/v3/users':
        return { path, body: { name: 'New Person', email: `${this.unique('person')}@example.com` } };
      case 'POST /api/v2/auth/login':
        return { path, body: { email: EMAIL[role], password: PASSWORD(role) } };
      case 'POST /api/v2/auth/logout':
        return { path, headers: { authorization: `Bearer ${await this.accessToken(role)}` } };
      case 'POST /api/v3/sync/logs':
        return { path, body: { replica: `replica-${role}`, instance: '0'.repeat(32) } };
      case 'POST /api/v3/encryption/{slug}/encrypt':
        return { path: path.replace('{slug}', 'payments'), body: { a: 'secret' }, headers: { 'x-svc-fields': 'a' } };
      case 'POST /api/v3/encryption/{slug}/decrypt':
      case 'POST /api/v3/encryption/{slug}/rewrap':
        return { path: path.replace('{slug}', 'payments'), body: { a: 'not a token' } };
      default:
        return { path };
    }
  }
}

async function startMatrix(t: TestContext) {
  const running = await startApp(t, '', SEED);
  return { ...running, fixture: new Fixture(running.app, running.url) };
}

function expectOutcome(role: Role, permission: string | null, what: string, res: { status: number; json: any }, mustSucceed: boolean): void {
  if (allowed(role, permission)) {
    assert.ok(res.status !== 401 && res.status !== 403, `${role} may ${what}, got ${res.status} ${JSON.stringify(res.json)}`);
    if (mustSucceed) assert.ok(res.status >= 200 && res.status < 300, `${role}: ${what} succeeds, got ${res.status} ${JSON.stringify(res.json)}`);
  } else {
    assert.equal(res.status, 403, `${role} may not ${what}`);
    assert.deepEqual(res.json, { message: 'User does not have the right permissions.' }, `${role}: ${what}`);
  }
}

// ---------------------------------------------------------------------------------------
// Tests

test('the route table, the OpenAPI document and the stored roles agree with the expected tables', async (t) => {
  const toTemplate = (path: string) => path.replace(/:(\w+)/g, '{$1}');
  assert.deepEqual(
    apiRoutes.map((r) => [r.method, toTemplate(r.path), r.permission]).sort(),
    MANAGEMENT.map((row) => [...row]).sort(),
    'apiRoutes: every management endpoint with its permission',
  );
  const paths = openApiDocument['paths'] as Record<string, Record<string, { 'x-permission': unknown }>>;
  for (const [method, path, permission] of [...MANAGEMENT, ...DATA_PLANE]) {
    assert.equal(paths[path]?.[method.toLowerCase()]?.['x-permission'], permission, `x-permission of ${method} ${path}`);
  }
  for (const method of PROXY_METHODS) assert.deepEqual(paths['/proxy/{slug}']?.[method.toLowerCase()]?.['x-permission'], PROXY_MODES);
  const sorted = (table: Record<string, readonly string[]>) => Object.fromEntries(Object.entries(table).map(([role, list]) => [role, [...list].sort()]));
  assert.deepEqual(sorted(openApiDocument['x-roles'] as Record<string, string[]>), sorted(ROLE_PERMISSIONS), 'x-roles of the document');

  const { url } = await startMatrix(t);
  const roles = await call(url, '/api/v3/roles', { method: 'GET', key: KEY.owner });
  assert.equal(roles.status, 200);
  const stored = Object.fromEntries(roles.json.map((r: { name: string; permissions: Array<{ name: string }> }) => [r.name, r.permissions.map((p) => p.name).sort()]));
  assert.deepEqual(stored, sorted(ROLE_PERMISSIONS), 'GET /v3/roles');
});

test('docs/permissions.md is generated from the document and shows the expected matrix', () => {
  const text = readFileSync(PERMISSIONS_FILE, 'utf8');
  assert.equal(text, renderPermissions(), 'docs/permissions.md is stale: run node scripts/write-openapi.ts');

  const cells = (line: string) => line.split('|').slice(1, -1).map((c) => c.trim());
  const endpointRows = text
    .split('\n')
    .filter((line) => /^\| (GET|POST|PUT|PATCH|DELETE|ANY) \|/.test(line))
    .map(cells);
  const expected = [
    ...[...MANAGEMENT, ...DATA_PLANE].map(([method, path, permission]) => [method, `\`${path}\``, permission === null ? 'any valid API key' : `\`${permission}\``, ...ROLES.map((r) => (allowed(r, permission) ? '✓' : '403'))]),
    ...Object.entries(PROXY_MODES).map(([mode, permission]) => ['ANY', `\`/proxy/{slug}\` with \`x-svc-mode: ${mode}\``, `\`${permission}\``, ...ROLES.map((r) => (allowed(r, permission) ? '✓' : '403'))]),
  ];
  assert.deepEqual(endpointRows.sort(), expected.sort());

  const roleRows = text
    .split('\n')
    .filter((line) => /^\| `[a-z-]+\.[a-z]+` \| /.test(line))
    .map(cells);
  assert.deepEqual(roleRows, EVERY.map((p) => [`\`${p}\``, ...ROLES.map((r) => (ROLE_PERMISSIONS[r].includes(p) ? '✓' : ''))]));
});

test('each built-in role × each management endpoint: 403 exactly when the role lacks the permission', async (t) => {
  const { url, fixture } = await startMatrix(t);
  let denied = 0;
  let passed = 0;
  for (const [method, path, permission] of MANAGEMENT) {
    for (const role of ROLES) {
      const req = await fixture.request(method, path, role);
      const res = await call(url, req.path, {
        method,
        key: KEY[role],
        headers: req.headers,
        body: req.body === undefined ? undefined : JSON.stringify(req.body),
      });
      expectOutcome(role, permission, `${method} ${path}`, res, true);
      if (allowed(role, permission)) passed += 1;
      else denied += 1;
    }
  }
  // 30 endpoints × 4 roles: developer is denied 13, viewer 14, owner and administrator none.
  assert.equal(passed + denied, MANAGEMENT.length * ROLES.length);
  assert.equal(denied, 27);
});

test('each built-in role × the data plane (encrypt, decrypt, rewrap, every proxy method and mode)', async (t) => {
  const { url, fixture } = await startMatrix(t);
  for (const [method, path, permission] of DATA_PLANE) {
    for (const role of ROLES) {
      const req = await fixture.request(method, path, role);
      const res = await call(url, req.path, { method, key: KEY[role], headers: req.headers, body: JSON.stringify(req.body) });
      expectOutcome(role, permission, `${method} ${path}`, res, true);
    }
  }
  for (const [mode, permission] of Object.entries(PROXY_MODES)) {
    for (const method of PROXY_METHODS) {
      for (const role of ROLES) {
        const withBody = method !== 'GET' && method !== 'HEAD';
        const res = await call(url, '/proxy/payments', {
          method,
          key: KEY[role],
          headers: { 'x-svc-mode': mode, 'x-svc-fields': 'a' },
          body: withBody ? '{"a":"x"}' : undefined,
        });
        // HEAD answers carry no body to compare; the status alone tells.
        const json = method === 'HEAD' && res.status === 403 ? { message: 'User does not have the right permissions.' } : res.json;
        // Without a body there is nothing to transform: a 4xx that is not 401/403 is the answer.
        expectOutcome(role, permission, `${method} /proxy/{slug} in ${mode} mode`, { status: res.status, json }, withBody);
      }
    }
  }
});

// ---------------------------------------------------------------------------------------
// No escalation by minting (DESIGN §13): classification admission

const UNAUTHORIZED = { message: 'This action is unauthorized.' };
const ADMISSIONS = ['user', 'role', 'group'] as const;
type Admission = (typeof ADMISSIONS)[number];

const MINT = {
  boss: key('MintBoss'),
  admin: key('MintAdmin'),
  target: key('MintTarget'),
} as const;

/**
 * boss (owner), admin (administrator) and the target, who decrypts; `directory` is a
 * provider whose group g-staff lists the target and two emails nobody has yet.
 * The target is an administrator like admin, except in the role case, where it is a developer.
 */
function mintSeed(admission: Admission): string {
  return `
seed:
  users:
    - { name: Boss, email: boss@example.com, roles: [owner] }
    - { name: Admin, email: admin@example.com, roles: [administrator] }
    - { name: Target, email: target@example.com, roles: [${admission === 'role' ? 'developer' : 'administrator'}] }
    - { name: Other, email: other@example.com, roles: [viewer] }
  api_keys:
    - { name: boss, user: boss@example.com, key: ${MINT.boss} }
    - { name: admin, user: admin@example.com, key: ${MINT.admin} }
    - { name: target, user: target@example.com, key: ${MINT.target} }
  configurations:
    - { name: payments, proxy_slug: payments, fields: [a] }
    - name: directory
      type: provider
      provider: google
      groups:
        - { id: g-staff, members: [target@example.com, newcomer1@example.com, newcomer2@example.com] }
        - { id: g-new, members: [other@example.com] }
`;
}

/** The members of a classification that admit the target through `admission`, and, with `admin`, admin by the same way. */
function membersFor(store: App['services']['store'], admission: Admission, admin: boolean): { users?: number[]; roles?: number[]; provider_container_id?: string; gws_groups?: Array<{ id: string }> } {
  const id = (email: string) => (syncRepositories(store).users.findByEmail(email))!.id;
  const role = (name: string) => (syncRepositories(store).roles.findByName(name))!.id;
  if (admission === 'user') return { users: [id('target@example.com'), ...(admin ? [id('admin@example.com')] : [])] };
  if (admission === 'role') return { roles: [role('developer'), ...(admin ? [role('administrator')] : [])] };
  return { provider_container_id: (syncRepositories(store).configurations.findByName('directory'))!.id, gws_groups: [{ id: 'g-staff' }, ...(admin ? [{ id: 'g-admin' }] : [])] };
}

/** Makes admin a member of classification `id` by the way `admission` says. */
function admitAdmin(store: App['services']['store'], id: number, admission: Admission): void {
  if (admission === 'group') {
    const directory = (syncRepositories(store).configurations.findByName('directory'))!;
    const groups = [...(directory.extra['groups'] as unknown[]), { id: 'g-admin', members: ['admin@example.com'] }];
    syncRepositories(store).configurations.update(directory.id, { extra: { ...directory.extra, groups } });
  }
  const members = membersFor(store, admission, true);
  syncRepositories(store).classifications.update(id, {
    userIds: members.users,
    roleIds: members.roles,
    providers: members.gws_groups === undefined ? undefined : [{ configurationId: members.provider_container_id!, gwsGroups: members.gws_groups }],
  });
}

test('no minting path yields a credential that decrypts a classification its caller is not admitted to, by user, role or group', async (t) => {
  for (const admission of ADMISSIONS) {
    const { url, app } = await startApp(t, '', mintSeed(admission));
    const store = app.services.store;
    const secret = await store.classifications.create({ name: `Secret ${admission}`, bgColor: '#000000', fgColor: '#ffffff' });
    admitTarget(store, secret.id, admission);
    const token = await call(url, '/api/v3/encryption/payments/encrypt', { key: MINT.boss, body: '{"a":"x"}', headers: { 'x-svc-fields': 'a', 'x-svc-classification': String(secret.id) } });
    assert.equal(token.status, 200);
    const decrypts = async (apiKey: string) => (await call(url, '/api/v3/encryption/payments/decrypt', { key: apiKey, body: token.text })).status;
    assert.equal(await decrypts(MINT.target), 200, `${admission}: the target is admitted`);
    assert.equal(await decrypts(MINT.admin), 403, `${admission}: admin is not`);

    const target = (await store.users.findByEmail('target@example.com'))!.id;
    const targetKey = (await store.apiKeys.findByName('target'))!.id;
    let n = 0;
    let admitted = false;
    const paths: Array<{ what: string; run: () => Promise<{ status: number; json: any }>; exceeds: boolean }> = [
      { what: 'create an API key for the target', exceeds: true, run: () => call(url, '/api/v3/api-keys', { key: MINT.admin, body: JSON.stringify({ name: `k${++n}`, user_id: target, permissions: ['data.decrypt'] }) }) },
      { what: "rotate the target's API key", exceeds: true, run: () => call(url, `/api/v3/api-keys/${targetKey}/rotate`, { key: MINT.admin }) },
      {
        what: 'create a user admitted the same way',
        // A new user is never listed by id (ids are not reused): by user, it is admitted nowhere.
        exceeds: admission !== 'user',
        run: () =>
          call(url, '/api/v3/users', {
            key: MINT.admin,
            body: JSON.stringify({ name: 'New', email: admission === 'group' ? `newcomer${admitted ? 2 : 1}@example.com` : `new${++n}@example.com`, roles: [admission === 'role' ? 'developer' : 'administrator'] }),
          }),
      },
      {
        what: "change the classification's members",
        exceeds: true,
        run: () => {
          const members = membersFor(store, admission, admitted);
          const more =
            admission === 'user'
              ? { users: [...members.users!, (syncRepositories(store).users.findByEmail('other@example.com'))!.id] }
              : admission === 'role'
                ? { roles: [...members.roles!, (syncRepositories(store).roles.findByName('viewer'))!.id] }
                : { ...members, gws_groups: [...members.gws_groups!, { id: 'g-new' }] };
          return call(url, `/api/v3/classifications/${secret.id}`, { method: 'PATCH', key: MINT.admin, body: JSON.stringify(more) });
        },
      },
      {
        what: 'create a classification admitting the target (and admin only once admin is admitted)',
        exceeds: true,
        run: () => call(url, '/api/v3/classifications', { key: MINT.admin, body: JSON.stringify({ name: `c${++n}`, bg_color: '#000000', fg_color: '#ffffff', ...membersFor(store, admission, admitted) }) }),
      },
    ];
    for (const path of paths) {
      const res = await path.run();
      if (path.exceeds) assert.deepEqual([res.status, res.json], [403, UNAUTHORIZED], `${admission}: admin may not ${path.what}`);
      else assert.ok(res.status >= 200 && res.status < 300, `${admission}: admin may ${path.what} (${res.status} ${JSON.stringify(res.json)})`);
    }
    assert.equal(await decrypts(MINT.target), 200, `${admission}: the refused rotation left the target's key alone`);

    // Once admin is admitted the same way, nothing it mints exceeds it.
    admitAdmin(store, secret.id, admission);
    admitted = true;
    assert.equal(await decrypts(MINT.admin), 200, `${admission}: admin is admitted now`);
    for (const path of paths) {
      const res = await path.run();
      assert.ok(res.status >= 200 && res.status < 300, `${admission}: admitted, admin may ${path.what} (${res.status} ${JSON.stringify(res.json)})`);
    }
  }
});

/** Makes the target a member of classification `id` by the way `admission` says. */
function admitTarget(store: App['services']['store'], id: number, admission: Admission): void {
  const members = membersFor(store, admission, false);
  syncRepositories(store).classifications.update(id, {
    userIds: members.users,
    roleIds: members.roles,
    providers: members.gws_groups === undefined ? undefined : [{ configurationId: members.provider_container_id!, gwsGroups: members.gws_groups }],
  });
}

const ATTACK = {
  ada: key('AttackAda'),
  admin: key('AttackAdmin'),
  adminAll: key('AttackAdminAll'),
} as const;

const ATTACK_SEED = `
seed:
  users:
    - { name: Ada, email: ada@example.com, roles: [owner] }
    - { name: Admin, email: admin@example.com, roles: [administrator] }
  api_keys:
    - { name: ada, user: ada@example.com, key: ${ATTACK.ada} }
    - { name: admin, user: admin@example.com, key: ${ATTACK.admin}, permissions: [users.manage, api-keys.create, api-keys.rotate, data.decrypt] }
    - { name: admin-all, user: admin@example.com, key: ${ATTACK.adminAll} }
  configurations:
    - { name: payments, proxy_slug: payments, fields: [a] }
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com] }
    - { name: PCI, bg_color: "#0000aa", fg_color: "#ffffff", roles: [owner] }
`;

test('regression: an administrator not admitted to PHI cannot mint its way in — a key for ada, a user with the owner role, rotating ada\'s key', async (t) => {
  const { url, app } = await startApp(t, '', ATTACK_SEED);
  const store = app.services.store;
  const ada = (await store.users.findByEmail('ada@example.com'))!;
  const phi = await call(url, '/api/v3/encryption/payments/encrypt', { key: ATTACK.ada, body: '{"a":"diagnosis"}', headers: { 'x-svc-fields': 'a', 'x-svc-classification': 'phi' } });
  const pci = await call(url, '/api/v3/encryption/payments/encrypt', { key: ATTACK.ada, body: '{"a":"card"}', headers: { 'x-svc-fields': 'a', 'x-svc-classification': 'pci' } });
  const decrypt = (apiKey: string, body: string) => call(url, '/api/v3/encryption/payments/decrypt', { key: apiKey, body });
  assert.equal((await decrypt(ATTACK.admin, phi.text)).status, 403, 'admin is not admitted to PHI');

  const minted = await call(url, '/api/v3/api-keys', { key: ATTACK.admin, body: JSON.stringify({ name: 'for-ada', user_id: ada.id, permissions: ['data.decrypt'] }) });
  assert.deepEqual([minted.status, minted.json], [403, UNAUTHORIZED], 'a key for ada');
  assert.equal(await store.apiKeys.findByName('for-ada'), undefined);

  const asOwner = { name: 'Mallory', email: 'mallory@example.com', password: 'a long enough password', roles: ['owner'] };
  for (const apiKey of [ATTACK.admin, ATTACK.adminAll]) {
    const created = await call(url, '/api/v3/users', { key: apiKey, body: JSON.stringify(asOwner) });
    assert.deepEqual([created.status, created.json], [403, UNAUTHORIZED], 'a user with the owner role (PCI admits owners)');
  }
  assert.equal(await store.users.findByEmail('mallory@example.com'), undefined);

  const rotated = await call(url, `/api/v3/api-keys/${(await store.apiKeys.findByName('ada'))!.id}/rotate`, { key: ATTACK.admin });
  assert.deepEqual([rotated.status, rotated.json], [403, UNAUTHORIZED], "rotating ada's key");
  assert.equal((await decrypt(ATTACK.ada, phi.text)).status, 200, "ada's key still works");
  assert.equal((await decrypt(ATTACK.ada, pci.text)).status, 200);

  // An owner's credential is break-glass whatever it may decrypt today: not even a narrow
  // key for ada (users.manage only), nor a user made owner who is admitted to nothing.
  const narrow = await call(url, '/api/v3/api-keys', { key: ATTACK.admin, body: JSON.stringify({ name: 'ada-users', user_id: ada.id, permissions: ['users.manage'] }) });
  assert.deepEqual([narrow.status, narrow.json], [403, UNAUTHORIZED], 'a narrow key for an owner');
  // What admin could decrypt itself it may still hand out: a key for itself without data.decrypt.
  const admin = (await store.users.findByEmail('admin@example.com'))!;
  const harmless = await call(url, '/api/v3/api-keys', { key: ATTACK.admin, body: JSON.stringify({ name: 'admin-users', user_id: admin.id, permissions: ['users.manage'] }) });
  assert.equal(harmless.status, 201, harmless.text);
});

test('regression: an administrator cannot create an owner who then adds itself to a classification (owners are minted by owners only)', async (t) => {
  const { url, app } = await startApp(t, '', ATTACK_SEED.replace('"#ffffff", roles: [owner] }', '"#ffffff", roles: [developer] }'));
  const store = app.services.store;
  // PHI admits ada only; admin-all holds every permission an administrator has.
  const asOwner = { name: 'Mallory', email: 'mallory@example.com', password: 'a long enough password', roles: ['owner'] };
  const created = await call(url, '/api/v3/users', { key: ATTACK.adminAll, body: JSON.stringify(asOwner) });
  assert.deepEqual([created.status, created.json], [403, UNAUTHORIZED]);
  assert.equal(await store.users.findByEmail('mallory@example.com'), undefined);
});

test('owners are exempt (break-glass), and each exempt action says so in the activity log', async (t) => {
  const { url, app } = await startApp(t, '', ATTACK_SEED.replace('users: [ada@example.com] }', 'users: [admin@example.com] }'));
  const store = app.services.store;
  const admin = (await store.users.findByEmail('admin@example.com'))!;
  // ada (owner) is not admitted to PHI, which lists only admin.
  const forAdmin = await call(url, '/api/v3/api-keys', { key: ATTACK.ada, body: JSON.stringify({ name: 'break-glass', user_id: admin.id, permissions: ['data.decrypt'] }) });
  assert.equal(forAdmin.status, 201, forAdmin.text);
  const phiId = (await store.classifications.findBySlug('phi'))!.id;
  const patched = await call(url, `/api/v3/classifications/${phiId}`, { method: 'PATCH', key: ATTACK.ada, body: JSON.stringify({ users: [admin.id, (await store.users.findByEmail('ada@example.com'))!.id] }) });
  assert.equal(patched.status, 200, patched.text);
  // Within what ada may decrypt (PCI admits owners): no exemption needed, none recorded.
  const plain = await call(url, '/api/v3/api-keys', { key: ATTACK.ada, body: JSON.stringify({ name: 'plain', permissions: ['data.decrypt'] }) });
  assert.equal(plain.status, 201);

  app.services.logs.flush();
  const entries = (await store.logs.listActivity({ limit: 50, offset: 0 })).filter((e) => e.action === 'api-key.created' || e.action === 'classification.updated');
  const byAction = (action: string, name: string) => entries.find((e) => e.action === action && e.description.includes(name))!;
  assert.match(byAction('api-key.created', '"break-glass"').description, /Exempt as owner \(break-glass\): it can decrypt classification "PHI" \(id \d+\), which the caller is not admitted to\.$/);
  assert.match(byAction('classification.updated', '"PHI"').description, /Exempt as owner \(break-glass\): the caller is not admitted to classification "PHI"\.$/);
  assert.doesNotMatch(byAction('api-key.created', '"plain"').description, /Exempt/);
});
