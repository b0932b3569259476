/**
 * state.source: file — the seed follows the config file while the service runs: real files
 * in a temp dir, real fs.watch events, a real server (createApp with configPath).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { createApp, type App } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call } from '../support/app.ts';

const key = (name: string) => `svc_${name.padEnd(40, '0')}`;
const OWNER = key('FileOwner');
const ADDED = key('FileAdded');
const DEV = key('FileDev');
const PASSWORD = 'reload-secret-password';
const ENC = '/api/v3/encryption/payments/encrypt';

interface Seed {
  users?: string[];
  apiKeys?: string[];
  configurations?: string[];
  classifications?: string[];
}

const BASE: Required<Seed> = {
  users: [`{ name: Ada Admin, email: ada@example.com, password: "\${ADA_PASSWORD}", roles: [owner] }`],
  apiKeys: ['{ name: owner, user: ada@example.com, key: "${OWNER_KEY}" }'],
  configurations: ['{ name: payments, proxy_slug: payments, fields: [card.number] }'],
  classifications: ['{ name: PHI, slug: phi, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com] }'],
};

function list(items: string[]): string {
  return items.length === 0 ? ' []' : `\n${items.map((item) => `    - ${item}`).join('\n')}`;
}

/** A whole config file; `seed` entries are added to the base ones, `replace` swaps them out. */
function fileText(dir: string, seed: Seed = {}, { replace = false, server = '', store = ':memory:' }: { replace?: boolean; server?: string; store?: string } = {}): string {
  const pick = (k: keyof Seed) => (replace ? (seed[k] ?? []) : [...BASE[k], ...(seed[k] ?? [])]);
  return `# written by file-source.test.ts in ${dir}
server: { listen: 127.0.0.1:0, admin_listen: "127.0.0.1:0", body_limit: 1mb${server} }
store: { path: "${store}" }
keys: { master_key_file: /nonexistent/never-used.key }
state: { source: file }
logging: { level: debug }
seed:
  users:${list(pick('users'))}
  api_keys:${list(pick('apiKeys'))}
  configurations:${list(pick('configurations'))}
  classifications:${list(pick('classifications'))}
`;
}

interface Running {
  readonly app: App;
  readonly url: string;
  readonly admin: string;
  readonly path: string;
  readonly logs: () => string;
  /** Rewrites the config file; `atomic` writes a temp file and renames it over, as editors do. */
  write(text: string, atomic?: boolean): void;
}

const ENV = { ADA_PASSWORD: PASSWORD, OWNER_KEY: OWNER, SVC_MASTER_KEY: randomBytes(32).toString('base64') };

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-file-source-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function start(t: TestContext, dir: string, text = fileText(dir), { closeAfter = true } = {}): Promise<Running> {
  const path = join(dir, 'svc.yaml');
  writeFileSync(path, text);
  const config = loadConfig({ path, env: ENV });
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const app = await createApp(config, { logger: createLogger('debug', sink), env: ENV, configPath: path });
  const { main, admin } = await app.listen();
  if (closeAfter) t.after(() => app.close());
  assert.ok(admin);
  let writes = 0;
  return {
    app,
    url: `http://127.0.0.1:${main.port}`,
    admin: `http://127.0.0.1:${admin.port}`,
    path,
    logs: () => chunks.join(''),
    write(next, atomic = false) {
      if (!atomic) return writeFileSync(path, next);
      const temp = join(dir, `.svc.yaml.${++writes}.tmp`);
      writeFileSync(temp, next);
      renameSync(temp, path);
    },
  };
}

async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

async function metric(running: Running, name: string): Promise<number> {
  const res = await fetch(`${running.admin}/metrics`);
  const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

async function classification(running: Running, slug: string): Promise<any> {
  const { json } = await call(running.url, `/api/v3/classifications?per_page=100`, { method: 'GET', key: OWNER });
  return (json.data as any[]).find((c) => c.slug === slug);
}

test('a classification and an API key added to the file appear; removed, they are gone and the key answers 401', async (t) => {
  const dir = tempDir(t);
  const running = await start(t, dir);
  assert.equal(await metric(running, 'svc_state_version'), 1);
  assert.equal((await call(running.url, '/api/v3/classifications', { method: 'GET', key: ADDED })).status, 401);

  running.write(
    fileText(dir, {
      apiKeys: [`{ name: added, user: ada@example.com, key: ${ADDED}, permissions: [classifications.view] }`],
      classifications: ['{ name: Reloaded, slug: reloaded, bg_color: "#112233", fg_color: "#ffffff" }'],
    }),
    true,
  );
  await until('the added classification', async () => (await classification(running, 'reloaded')) !== undefined);
  const added = await classification(running, 'reloaded');
  assert.equal(added.name, 'Reloaded');
  assert.equal(added.bg_color, '#112233');
  const withKey = await call(running.url, '/api/v3/classifications', { method: 'GET', key: ADDED });
  assert.equal(withKey.status, 200, 'the added key authenticates');
  assert.equal(await metric(running, 'svc_state_version'), 2);

  running.write(fileText(dir));
  await until('the classification removed', async () => (await classification(running, 'reloaded')) === undefined);
  const revoked = await call(running.url, '/api/v3/classifications', { method: 'GET', key: ADDED });
  assert.equal(revoked.status, 401);
  assert.deepEqual(revoked.json, { message: 'Unauthorized.' });
  assert.equal((await running.app.services.store.apiKeys.findByName('added'))?.status, 'revoked', 'revoked, not deleted');
  assert.equal(await metric(running, 'svc_state_version'), 3);
  assert.equal(await metric(running, 'svc_state_reload_failures_total'), 0);

  // Each reload that changed something is in the activity log.
  await until('the activity entries', async () => {
    const { json } = await call(running.url, '/api/v3/logs/activity?per_page=100', { method: 'GET', key: OWNER });
    return (json?.data as any[] | undefined)?.filter((entry) => entry.action === 'state.reloaded').length === 2;
  });
  assert.ok(!running.logs().includes(PASSWORD), 'the password is never logged');
  assert.ok(!running.logs().includes(ADDED), 'keys are never logged');
});

test('a colour change updates the classification in place; API-created ones survive reloads', async (t) => {
  const dir = tempDir(t);
  const running = await start(t, dir);
  const before = await classification(running, 'phi');
  const manual = await call(running.url, '/api/v3/classifications', { key: OWNER, body: JSON.stringify({ name: 'Manual', bg_color: '#010203', fg_color: '#ffffff' }) });
  assert.equal(manual.status, 201);

  running.write(fileText(dir, { classifications: [] }, { replace: false }).replace('bg_color: "#aa0000"', 'bg_color: "#00aa00"'));
  await until('the new colour', async () => (await classification(running, 'phi'))?.bg_color === '#00aa00');
  const after = await classification(running, 'phi');
  assert.equal(after.id, before.id, 'updated in place: tokens classified with it keep working');
  assert.equal(after.fg_color, '#ffffff');
  assert.ok(await classification(running, 'manual'), 'the API-created classification survives');

  // A file that declares no classification at all: only what the file created goes.
  running.write(fileText(dir, { ...BASE, classifications: [] }, { replace: true }));
  await until('PHI removed', async () => (await classification(running, 'phi')) === undefined);
  assert.equal((await classification(running, 'manual'))?.bg_color, '#010203', 'untouched');
});

test('a broken file keeps the last good state and counts the failure; a fix applies', async (t) => {
  const dir = tempDir(t);
  const running = await start(t, dir);
  const good = fileText(dir, { classifications: ['{ name: Kept, slug: kept, bg_color: "#123456", fg_color: "#ffffff" }'] });
  running.write(good);
  await until('the good file', async () => (await classification(running, 'kept')) !== undefined);
  const version = await metric(running, 'svc_state_version');

  // A YAML error (an unclosed flow mapping), in a file that also drops Kept.
  running.write(`${fileText(dir)}  broken: { [unclosed\n`);
  await until('one failure', async () => (await metric(running, 'svc_state_reload_failures_total')) === 1);
  assert.ok(await classification(running, 'kept'), 'state unchanged');
  assert.equal(await metric(running, 'svc_state_version'), version);
  assert.match(running.logs(), /"problems":\["yaml: line \d+, column \d+: [^"]+/);

  // A schema error: a colour that is not one, plus a key that does not exist.
  running.write(
    fileText(dir, { classifications: ['{ name: Bad, bg_color: red, fg_color: "#ffffff" }'] }).replace(
      'api_keys:',
      'api_keys:\n    - { name: typo, user: ada@example.com, keyy: x }',
    ),
  );
  await until('two failures', async () => (await metric(running, 'svc_state_reload_failures_total')) === 2);
  assert.ok(await classification(running, 'kept'), 'state unchanged');
  assert.equal(await classification(running, 'bad'), undefined);
  const logged = running.logs();
  assert.match(logged, /seed\.classifications\.1\.bg_color: expected a colour like #aa0000/);
  assert.match(logged, /seed\.api_keys\.0\.keyy: unknown key/, 'every problem is logged');

  // Seed problems (found against the store) fail the same way.
  running.write(fileText(dir, { classifications: ['{ name: Ward, bg_color: "#123456", fg_color: "#ffffff", users: [ghost@example.com] }'] }));
  await until('three failures', async () => (await metric(running, 'svc_state_reload_failures_total')) === 3);
  assert.match(running.logs(), /seed\.classifications\[1\]\.users\[0\]: unknown user \\"ghost@example\.com\\"/);
  assert.ok(await classification(running, 'kept'));

  // An emptied file (a writer that truncates first, or a mistake) would be a valid, empty
  // seed; it is refused rather than allowed to revoke every seeded key.
  running.write('');
  await until('four failures', async () => (await metric(running, 'svc_state_reload_failures_total')) === 4);
  assert.match(running.logs(), /seed: missing, which would remove everything the seed created/);
  assert.equal((await running.app.services.store.apiKeys.findByName('owner'))?.status, 'active');

  running.write(fileText(dir, { classifications: ['{ name: Fixed, slug: fixed, bg_color: "#654321", fg_color: "#ffffff" }'] }));
  await until('the fix', async () => (await classification(running, 'fixed')) !== undefined);
  assert.equal(await classification(running, 'kept'), undefined, 'the fixed file is followed: Kept is gone');
  assert.equal(await metric(running, 'svc_state_version'), version + 1);
  assert.equal(await metric(running, 'svc_state_reload_failures_total'), 4);
  assert.ok(!running.logs().includes(PASSWORD));
  assert.ok(!running.logs().includes(OWNER));
});

test('removals: encryption configurations are kept, provider configurations deleted, users disabled', async (t) => {
  const dir = tempDir(t);
  const seed: Seed = {
    users: ['{ name: Dev, email: dev@example.com, roles: [developer] }'],
    apiKeys: [`{ name: dev, user: dev@example.com, key: ${DEV} }`],
    configurations: ['{ name: vault, proxy_slug: vault }', '{ name: workspace, provider: google, groups: [{ id: g1, members: [dev@example.com] }] }'],
  };
  const running = await start(t, dir, fileText(dir, seed));
  const { store } = running.app.services;
  const token = await call(running.url, '/api/v3/encryption/vault/encrypt', { key: DEV, body: '{"a":"secret"}', headers: { 'x-svc-fields': 'a' } });
  assert.equal(token.status, 200);
  // A key made through the API, limited to the provider configuration alone.
  const workspace = (await store.configurations.findByName('workspace'))!;
  const limited = await call(running.url, '/api/v3/api-keys', { key: OWNER, body: JSON.stringify({ name: 'workspace-only', permissions: ['configurations.view'], configurations: [workspace.id] }) });
  assert.equal(limited.status, 201, limited.text);

  // The file drops the user, their key and both configurations.
  running.write(fileText(dir));
  await until('the user disabled', async () => (await store.users.findByEmail('dev@example.com'))?.disabled === true);
  assert.equal(await store.configurations.findByName('workspace'), undefined, 'the provider configuration is deleted');
  assert.ok(await store.configurations.findByName('vault'), 'the encryption configuration is kept, with its keys');
  assert.equal((await store.apiKeys.findByName('dev'))?.status, 'revoked');
  assert.equal((await store.apiKeys.findByName('workspace-only'))?.status, 'revoked', 'a key limited to the deleted configuration alone reaches nothing: revoked');
  assert.match(running.logs(), /revoked API key \\"workspace-only\\": every configuration it was limited to is deleted/);
  assert.equal((await call(running.url, '/api/v3/classifications', { method: 'GET', key: DEV })).status, 401);
  assert.match(running.logs(), /configuration \\"vault\\" is no longer in the seed: kept with its keys/);
  // The kept configuration still decrypts what it encrypted.
  const plain = await call(running.url, '/api/v3/encryption/vault/decrypt', { key: OWNER, body: token.text });
  assert.equal(plain.status, 200);
  assert.deepEqual(plain.json, { a: 'secret' });

  // Referring to the removed user is a problem, not a silent re-enable.
  const failures = await metric(running, 'svc_state_reload_failures_total');
  running.write(fileText(dir, { classifications: ['{ name: Dev only, bg_color: "#123456", fg_color: "#ffffff", users: [dev@example.com] }'] }));
  await until('the failure', async () => (await metric(running, 'svc_state_reload_failures_total')) === failures + 1);
  assert.match(running.logs(), /users\[0\]: user \\"dev@example\.com\\" is no longer in seed\.users/);

  // Declared again (with disabled: false), the user is back; its revoked key stays revoked.
  running.write(fileText(dir, { users: ['{ name: Dev, email: dev@example.com, roles: [developer], disabled: false }'], apiKeys: [`{ name: dev, user: dev@example.com, key: ${DEV} }`] }));
  await until('the user enabled', async () => (await store.users.findByEmail('dev@example.com'))?.disabled === false);
  assert.equal((await store.apiKeys.findByName('dev'))?.status, 'revoked');
  assert.match(running.logs(), /API key \\"dev\\" is revoked and stays revoked/);
});

test('a password changed in the file applies; unchanged passwords keep their hash', async (t) => {
  const dir = tempDir(t);
  const pat = (password: string) => `{ name: Pat, email: pat@example.com, password: "${password}", roles: [viewer] }`;
  const running = await start(t, dir, fileText(dir, { users: [pat('first-password')] }));
  const { store } = running.app.services;
  const login = (password: string) => call(running.url, '/api/v2/auth/login', { key: OWNER, body: JSON.stringify({ email: 'pat@example.com', password }) });
  assert.equal((await login('first-password')).status, 200);
  const adaHash = (await store.users.findByEmail('ada@example.com'))?.passwordHash;

  const firstHash = (await store.users.findByEmail('pat@example.com'))?.passwordHash;
  running.write(fileText(dir, { users: [pat('second-password')] }));
  // Waiting on the stored hash, not by trying to log in: failed attempts while the reload
  // is pending would trip the login throttle on a slow machine.
  await until('the new password', async () => (await store.users.findByEmail('pat@example.com'))?.passwordHash !== firstHash);
  assert.equal((await login('second-password')).status, 200);
  assert.equal((await login('first-password')).status, 401);
  const patHash = (await store.users.findByEmail('pat@example.com'))?.passwordHash;

  // An unrelated change: no password is hashed again (hashes are salted, so a re-hash would show).
  running.write(fileText(dir, { users: [pat('second-password')], classifications: ['{ name: Other, slug: other, bg_color: "#123456", fg_color: "#ffffff" }'] }));
  await until('the unrelated change', async () => (await classification(running, 'other')) !== undefined);
  assert.equal((await store.users.findByEmail('pat@example.com'))?.passwordHash, patHash);
  assert.equal((await store.users.findByEmail('ada@example.com'))?.passwordHash, adaHash);
  assert.ok(!running.logs().includes('second-password'));
});

test('a classification renamed in the file keeps its id when its slug stays', async (t) => {
  const dir = tempDir(t);
  const running = await start(t, dir);
  const phi = await classification(running, 'phi');
  const token = await call(running.url, ENC, { key: OWNER, body: '{"card":{"number":"4111"}}', headers: { 'x-svc-classification': 'phi' } });
  assert.equal(token.status, 200);

  running.write(fileText(dir, { ...BASE, classifications: ['{ name: Health, slug: phi, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com] }'] }, { replace: true }));
  await until('the new name', async () => (await classification(running, 'phi'))?.name === 'Health');
  assert.equal((await classification(running, 'phi')).id, phi.id);
  const plain = await call(running.url, '/api/v3/encryption/payments/decrypt', { key: OWNER, body: token.text });
  assert.equal(plain.status, 200, 'tokens classified before the rename still decrypt');
});

test('changes outside seed are logged as needing a restart and ignored; the seed part still applies', async (t) => {
  const dir = tempDir(t);
  const running = await start(t, dir);
  running.write(fileText(dir, { classifications: ['{ name: Also, slug: also, bg_color: "#123456", fg_color: "#ffffff" }'] }, { server: ', max_header_size: 32kb' }));
  await until('the seed part', async () => (await classification(running, 'also')) !== undefined);
  assert.match(running.logs(), /"sections":\["server"\].*requires a restart/);
  assert.equal(running.app.services.config.server.max_header_size, 16 * 1024, 'the running configuration is unchanged');
});

test('the start reconciles a file edited while the service was down', async (t) => {
  const dir = tempDir(t);
  const store = join(dir, 'svc.db');
  const first = await start(t, dir, fileText(dir, { classifications: ['{ name: Gone, slug: gone, bg_color: "#123456", fg_color: "#ffffff" }'] }, { store }), { closeAfter: false });
  assert.ok(await classification(first, 'gone'));
  await first.app.close();

  const second = await start(t, dir, fileText(dir, {}, { store }));
  assert.equal(await classification(second, 'gone'), undefined);
  assert.ok(await classification(second, 'phi'));
});

test('reloads under continuous load fail no request', async (t) => {
  const dir = tempDir(t);
  const running = await start(t, dir);
  const statuses = new Map<number, number>();
  const latencies: number[] = [];
  let stop = false;
  const client = async () => {
    while (!stop) {
      const sent = performance.now();
      const res = await call(running.url, ENC, { key: OWNER, body: '{"card":{"number":"4111111111111111"}}', headers: { 'x-svc-classification': 'phi' } });
      latencies.push(performance.now() - sent);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
  };
  const clients = Array.from({ length: 4 }, client);
  const started = performance.now();
  for (let i = 1; i <= 10; i++) {
    const colour = `#0000${i.toString(16).padStart(2, '0')}`;
    const extra = Array.from({ length: i }, (_, j) => `{ name: Load ${j}, slug: load-${j}, bg_color: "${colour}", fg_color: "#ffffff" }`);
    running.write(fileText(dir, { classifications: extra }).replace('bg_color: "#aa0000"', `bg_color: "${colour}"`), i % 2 === 0);
    await until(`reload ${i}`, async () => (await metric(running, 'svc_state_version')) === 1 + i);
  }
  // Keep the load on a little past the last reload.
  while (performance.now() - started < 3000) await new Promise((resolve) => setTimeout(resolve, 50));
  stop = true;
  await Promise.all(clients);

  const total = [...statuses.values()].reduce((a, b) => a + b, 0);
  assert.deepEqual([...statuses.keys()], [200], `statuses: ${JSON.stringify([...statuses])}`);
  assert.ok(total > 100, `${total} requests`);
  assert.equal((await classification(running, 'phi')).bg_color, '#00000a');
  assert.equal(await metric(running, 'svc_state_reload_failures_total'), 0);
  latencies.sort((a, b) => a - b);
  const p50 = latencies[Math.floor(latencies.length / 2)] ?? 0;
  const max = latencies.at(-1) ?? 0;
  const applyMs = [...running.logs().matchAll(/"applyMs":([\d.]+)/g)].map((m) => Number(m[1]));
  assert.equal(applyMs.length, 10);
  t.diagnostic(`reload transaction: ${applyMs.join(", ")} ms`);
  t.diagnostic(`${total} encrypt requests in ${Math.round(performance.now() - started)} ms across 10 reloads, all 200; latency p50 ${p50.toFixed(1)} ms, max ${max.toFixed(1)} ms`);
});

test('reveal rules changed in the file apply to the next decrypt: a reader named by a new mask grant sees the mask, and loses it when the grant goes', async (t) => {
  const dir = tempDir(t);
  const users = [...BASE.users, '{ name: Dev Eloper, email: dev@example.com, roles: [developer] }'];
  const apiKeys = [...BASE.apiKeys, `{ name: dev, user: dev@example.com, key: ${DEV} }`];
  const base = { users, apiKeys, configurations: BASE.configurations, classifications: BASE.classifications };
  const running = await start(t, dir, fileText(dir, base, { replace: true }));
  const enc = await call(running.url, ENC, { key: OWNER, body: '{"card":"4111 1111 1111 1234"}', headers: { 'x-svc-fields': 'card', 'x-svc-classification': 'phi' } });
  const decrypt = () => call(running.url, '/api/v3/encryption/payments/decrypt', { key: DEV, body: enc.text });
  assert.equal((await decrypt()).status, 403, 'Dev is not a member of PHI');

  const phi = '{ name: PHI, slug: phi, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com], reveal: [{ to: { users: [dev@example.com] }, level: mask, mask: last4 }], default: token }';
  running.write(fileText(dir, { ...base, classifications: [phi] }, { replace: true }), true);
  await until('the mask grant', async () => (await decrypt()).status === 200);
  const masked = await decrypt();
  assert.equal(masked.text, '{"card":"•••• •••• •••• 1234"}');
  assert.equal(masked.headers.get('x-svc-reveal'), 'plain=0, mask=1, redact=0, token=0');
  assert.deepEqual((await classification(running, 'phi')).default, 'token');

  running.write(fileText(dir, base, { replace: true }), true);
  await until('the grant and the default gone', async () => (await decrypt()).status === 403);
  assert.deepEqual((await classification(running, 'phi')).reveal, []);
});
