import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { runCli as cli, type CliRun } from '../support/cli.ts';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Writable } from 'node:stream';
import { createApp, type App } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call } from '../support/app.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { keyAliveCache, keyAliveEntry, syncRepositories } from '../../src/store/sqlite/connection.ts';

/** What KeyInUse asks: whether the version is alive now. */
const keyAlive = (store: Store, configurationId: string, version: number): boolean => keyAliveEntry(store, configurationId, version).alive();

const KEY = `svc_${'Cli'.padEnd(40, '0')}`;
const DOC = '{"card":{"number":"4111 1111 1111 1111","exp":"12/28"},"ssn":"123-45-6789","n":1.10}';

// The master key comes from the key file in the temp dir, as for the in-process service.
const runCli = (args: string[], stdin = ''): Promise<CliRun> => cli(args, { env: { SVC_MASTER_KEY: undefined }, timeout: 20_000, stdin });

interface Fixture {
  dir: string;
  path: string;
  url: string;
  app: App;
  keys: (...args: string[]) => string[];
}

/** A file store with a running in-process service on it: the CLI works beside it. `keys` adds to the file's `keys` section. */
async function fixture(t: TestContext, keys = ''): Promise<Fixture> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-keys-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.yaml');
  writeFileSync(
    path,
    `server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${join(dir, 'data', 'svc.db')} }
keys: { master_key_file: ${join(dir, 'data', 'master.key')}${keys === '' ? '' : `, ${keys}`} }
logging: { level: warn }
seed:
  users: [{ name: Ada, email: ada@example.com, roles: [owner] }]
  api_keys: [{ name: ops, user: ada@example.com, key: ${KEY} }]
  configurations:
    - { name: payments, proxy_slug: pay-slug, fields: [card.number, ssn, n] }
    - { name: workspace, type: provider, provider: google }
`,
  );
  const sink = new Writable({ write: (_chunk, _enc, done) => done() });
  const app = await createApp(loadConfig({ path, env: {} }), { logger: createLogger('warn', sink), env: {} });
  const { main } = await app.listen();
  t.after(() => app.close());
  return { dir, path, url: `http://127.0.0.1:${main.port}`, app, keys: (...args) => ['keys', ...args, '--config', path] };
}

const encrypt = (f: Fixture, body: string) => call(f.url, '/api/v3/encryption/pay-slug/encrypt', { body, key: KEY });
const decrypt = (f: Fixture, body: string) => call(f.url, '/api/v3/encryption/pay-slug/decrypt', { body, key: KEY });

function activity(f: Fixture, action: string): string[] {
  f.app.services.logs.flush();
  const rows = sqliteConnection(f.app.services.store).prepare('SELECT description FROM activity_logs WHERE action = ? ORDER BY id').all(action) as Array<{ description: string }>;
  return rows.map((r) => r.description);
}

/** Every file of the data dir (database, WAL, master key), as latin1 text for byte searches. */
function dataFiles(f: Fixture): Map<string, string> {
  const dir = join(f.dir, 'data');
  return new Map(readdirSync(dir).map((name) => [name, readFileSync(join(dir, name)).toString('latin1')]));
}

test('keys rotate prints the new version, and the running service writes it at once', async (t) => {
  const f = await fixture(t);
  const v1 = await encrypt(f, DOC);
  assert.match(v1.json.card.number, /^svc:1:/);
  const rotated = await runCli(f.keys('rotate', '--configuration', 'payments'));
  assert.equal(rotated.code, 0, rotated.stderr);
  assert.equal(rotated.stdout, '2\n');
  const bySlug = await runCli(f.keys('rotate', '--configuration', 'pay-slug'));
  assert.equal(bySlug.stdout, '3\n');
  const v3 = await encrypt(f, DOC);
  assert.match(v3.json.card.number, /^svc:3:/);
  assert.equal((await decrypt(f, v1.text)).text, DOC);
  assert.deepEqual((await f.app.services.store.configurations.keys((await f.app.services.store.configurations.findByName('payments'))!.id)).map((k) => k.version), [1, 2, 3]);
  const [entry] = activity(f, 'configuration.rotated');
  assert.match(entry!, /^Rotated the key of configuration "payments" to version 2, by svc-sidecar keys rotate as OS user "[^"]+"\.$/);
});

test('keys rewrap pipes a document from stdin to stdout with every token at the newest version', async (t) => {
  const f = await fixture(t);
  const v1 = await encrypt(f, DOC);
  assert.equal((await runCli(f.keys('rotate', '--configuration', 'payments'))).code, 0);

  const res = await runCli(f.keys('rewrap', '--configuration', 'payments'), v1.text);
  assert.equal(res.code, 0, res.stderr);
  for (const plaintext of ['4111', '123-45-6789', '1.10']) {
    assert.ok(!res.stdout.includes(plaintext) && !res.stderr.includes(plaintext), `${plaintext} was printed`);
  }
  const out = JSON.parse(res.stdout);
  for (const token of [out.card.number, out.ssn, out.n]) assert.match(token, /^svc:2:/);
  assert.equal(out.card.exp, '12/28');
  assert.match(res.stderr, /3 tokens rewrapped to key version 2, 0 already at it/);
  const back = await decrypt(f, res.stdout);
  assert.equal(back.status, 200);
  assert.equal(back.text, DOC);

  // --fields narrows it; --ndjson takes one document per line.
  const some = await runCli(f.keys('rewrap', '--configuration', 'payments', '--fields', 'ssn'), v1.text);
  assert.match(JSON.parse(some.stdout).ssn, /^svc:2:/);
  assert.match(JSON.parse(some.stdout).card.number, /^svc:1:/);
  const lines = await runCli(f.keys('rewrap', '--configuration', 'payments', '--ndjson'), `${v1.text}\n${res.stdout}\n`);
  assert.equal(lines.code, 0, lines.stderr);
  const [a, b] = lines.stdout.trimEnd().split('\n');
  assert.equal(b, res.stdout, 'tokens already at the newest version are kept as they are');
  assert.match(JSON.parse(a!).ssn, /^svc:2:/);
  assert.match(lines.stderr, /3 tokens rewrapped to key version 2, 3 already at it/);
});

test('keys rewrap fails with exit 1 and prints nothing on stdout when a token does not open', async (t) => {
  const f = await fixture(t);
  const v1 = await encrypt(f, DOC);
  const token: string = v1.json.ssn;
  // Inside the ciphertext, not its last character (whose unused bits make it malformed instead).
  const at = token.lastIndexOf(':', token.length - 3) + 5;
  const altered = v1.text.replace(token, token.slice(0, at) + (token[at] === 'A' ? 'B' : 'A') + token.slice(at + 1));
  const res = await runCli(f.keys('rewrap', '--configuration', 'payments'), altered);
  assert.equal(res.code, 1);
  assert.equal(res.stdout, '');
  assert.match(res.stderr, /\n {2}ssn: The token failed authentication/);
  const broken = await runCli(f.keys('rewrap', '--configuration', 'payments'), '{"a":');
  assert.equal(broken.code, 1);
  assert.equal(broken.stdout, '');
  assert.match(broken.stderr, /not valid JSON/);
  const badFields = await runCli(f.keys('rewrap', '--configuration', 'payments', '--fields', 'a..b'));
  assert.equal(badFields.code, 2);
  assert.match(badFields.stderr, /--fields is invalid: the path "a\.\.b" has an empty segment/);
});

test('keys destroy: confirmation required, the current version refused, then the version is shredded', async (t) => {
  const f = await fixture(t);
  const v1 = await encrypt(f, DOC);
  const current = await runCli(f.keys('destroy', '--configuration', 'payments', '--version', '1', '--confirm', 'payments/v1'));
  assert.equal(current.code, 1);
  assert.match(current.stderr, /version: Key version 1 is the current version and cannot be destroyed: rotate first\./);
  assert.equal((await runCli(f.keys('rotate', '--configuration', 'payments'))).code, 0);
  const v2 = await encrypt(f, DOC);

  // Superseded a moment ago: only with --force.
  const early = await runCli(f.keys('destroy', '--configuration', 'payments', '--version', '1', '--confirm', 'payments/v1'));
  assert.equal(early.code, 1);
  assert.match(early.stderr, /Key version 1 was current less than keys\.destroy_after ago and may still be in use: it can be destroyed from \S+, or now with force: true\./);
  assert.equal((await decrypt(f, v1.text)).status, 200, 'not destroyed');

  const unconfirmed = await runCli(f.keys('destroy', '--configuration', 'payments', '--version', '1'));
  assert.equal(unconfirmed.code, 2);
  assert.match(unconfirmed.stderr, /--confirm <configuration name>\/v1 is required/);
  const wrong = await runCli(f.keys('destroy', '--configuration', 'pay-slug', '--version', '1', '--confirm', 'pay-slug/v1'));
  assert.equal(wrong.code, 1);
  assert.match(wrong.stderr, /confirm: The confirm field must be "payments\/v1"\./);
  assert.equal((await decrypt(f, v1.text)).status, 200, 'still there');

  const id = (await f.app.services.store.configurations.findByName('payments'))!.id;
  const wrapped = (await f.app.services.store.configurations.keys(id))[0]!.wrapped;
  const wrappedText = wrapped.toString('latin1');
  // Fold the WAL into svc.db first, as time would: the page holding the key then sits in
  // the database file, where only the destroy's own checkpoint replaces it.
  const folder = new DatabaseSync(join(f.dir, 'data', 'svc.db'));
  folder.exec('PRAGMA wal_checkpoint(TRUNCATE)');
  folder.close();
  assert.ok(dataFiles(f).get('svc.db')!.includes(wrappedText), 'the search below can find the wrapped key');

  // What the running service's requests that wrote version 1 tokens ask (KeyInUse): alive,
  // and remembered as alive until something is committed.
  const store = f.app.services.store;
  assert.equal(keyAlive(store, id, 1), true);
  const reads = keyAliveCache(store).reads;
  assert.equal(keyAlive(store, id, 1), true);
  assert.equal(keyAliveCache(store).reads, reads);

  const done = await runCli(f.keys('destroy', '--configuration', 'payments', '--version', '1', '--confirm', 'payments/v1', '--force'));
  assert.equal(done.code, 0, done.stderr);
  assert.equal(done.stdout, 'destroyed key version 1 of "payments"\n');
  assert.equal(keyAlive(store, id, 1), false, 'the next check after the CLI committed, with no wait');

  // Gone from the row, and from every byte of the database and its WAL.
  const db = new DatabaseSync(join(f.dir, 'data', 'svc.db'), { readOnly: true });
  const row = db.prepare('SELECT length(wrapped) AS n, destroyed_at FROM data_keys WHERE configuration_id = ? AND version = 1').get(id) as { n: number; destroyed_at: string | null };
  db.close();
  assert.equal(row.n, 0);
  assert.notEqual(row.destroyed_at, null);
  for (const [name, bytes] of dataFiles(f)) assert.ok(!bytes.includes(wrappedText), `${name} still holds the wrapped key`);

  // The running service sees it at its next request.
  const dead = await decrypt(f, v1.text);
  assert.equal(dead.status, 422);
  assert.deepEqual(dead.json.errors.ssn, ['The token was encrypted with a key version that has been destroyed.']);
  assert.equal((await decrypt(f, v2.text)).text, DOC);
  const rewrap = await runCli(f.keys('rewrap', '--configuration', 'payments'), v1.text);
  assert.equal(rewrap.code, 1, 'a destroyed version cannot be rewrapped');
  const again = await runCli(f.keys('destroy', '--configuration', 'payments', '--version', '1', '--confirm', 'payments/v1'));
  assert.equal(again.code, 1);
  assert.match(again.stderr, /Key version 1 is already destroyed\./);
  assert.match(
    activity(f, 'configuration.key_destroyed')[0]!,
    /^Destroyed key version 1 of configuration "payments" \(forced, within keys\.destroy_after\), by svc-sidecar keys destroy as OS user/,
  );
});

test('keys: bad usage exits 2, refusals exit 1, and no secret is printed', async (t) => {
  const f = await fixture(t);
  const cases: Array<[string[], number, RegExp]> = [
    [f.keys(), 2, /expected one of rotate, rewrap, destroy/],
    [f.keys('spin', '--configuration', 'payments'), 2, /expected one of rotate, rewrap, destroy/],
    [f.keys('rotate'), 2, /--configuration <name\|slug> is required\. See "svc-sidecar keys rotate --help"/],
    [f.keys('rotate', 'extra', '--configuration', 'payments'), 2, /unexpected argument "extra"/],
    [f.keys('rotate', '--configuration', 'payments', '--version', '1'), 2, /unknown option --version\. See "svc-sidecar keys rotate --help"/],
    [f.keys('rotate', '--configuration', 'payments', '--force'), 2, /unknown option --force\. See "svc-sidecar keys rotate --help"/],
    [f.keys('destroy', '--configuration', 'payments', '--version', 'one', '--confirm', 'x'), 2, /--version <N>/],
    [f.keys('rotate', '--configuration', 'nope'), 1, /no configuration is named "nope" or has that proxy slug/],
    [f.keys('rotate', '--configuration', 'workspace'), 1, /only encryption configurations have keys/],
    [f.keys('destroy', '--configuration', 'payments', '--version', '7', '--confirm', 'payments/v7'), 1, /Not found\./],
  ];
  const master = readFileSync(join(f.dir, 'data', 'master.key'), 'utf8').trim();
  for (const [args, code, message] of cases) {
    const res = await runCli(args);
    assert.equal(res.code, code, `${args.join(' ')}: ${res.stderr}`);
    assert.match(res.stderr, message, args.join(' '));
    assert.equal(res.stdout, '', args.join(' '));
    assert.ok(!res.stderr.includes(master) && !res.stderr.includes(KEY), 'a secret was printed');
  }
  const help = await runCli(['--help']);
  assert.match(help.stdout, /keys destroy --configuration <name\|slug> --version <N> --confirm <name>\/v<N>/);
});

test('destroyKey leaves no copy of the wrapped key in the database file or its WAL while another connection holds the store open', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-shred-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.db');
  const store = openStore(path);
  t.after(() => store.close());
  const wrapped = [randomBytes(60), randomBytes(60)];
  const configuration = syncRepositories(store).configurations.create({ name: 'c', type: 'encryption', keyringId: randomBytes(16), firstWrappedKey: wrapped[0]! });
  syncRepositories(store).configurations.addKey(configuration.id, 2, wrapped[1]!);
  // A running service's connection: it keeps the WAL file in place, and with it any page
  // image the destroying connection does not checkpoint away itself.
  const service = new DatabaseSync(path);
  t.after(() => service.close());
  service.exec('PRAGMA wal_checkpoint(TRUNCATE)');
  service.prepare('SELECT count(*) FROM data_keys').get();
  // Any 16-byte piece counts: the wrap is AES-GCM, so part of it still opens part of the key.
  const pieces = Array.from({ length: wrapped[0]!.length - 15 }, (_, i) => wrapped[0]!.subarray(i, i + 16));
  const holding = () => readdirSync(dir).filter((name) => pieces.some((piece) => readFileSync(join(dir, name)).includes(piece)));
  assert.deepEqual(holding(), ['svc.db']);

  assert.equal(syncRepositories(store).configurations.destroyKey(configuration.id, 1), 'destroyed');
  assert.deepEqual(holding(), []);
  assert.ok(readdirSync(dir).some((name) => readFileSync(join(dir, name)).includes(wrapped[1]!)), 'version 2 is untouched');
  assert.equal(syncRepositories(store).configurations.destroyKey(configuration.id, 1), 'already-destroyed');
  assert.equal(syncRepositories(store).configurations.destroyKey(configuration.id, 2), 'current');
  assert.equal(syncRepositories(store).configurations.destroyKey(configuration.id, 3), 'not-found');
  assert.equal((sqliteConnection(store).prepare('PRAGMA secure_delete').get() as { secure_delete: number }).secure_delete, 0, 'the connection setting is restored');
});

test('keys destroy follows keys.destroy_after from the configuration file: 0s lets a just-superseded version go without --force', async (t) => {
  const f = await fixture(t, 'destroy_after: 0s');
  const v1 = await encrypt(f, DOC);
  assert.equal((await runCli(f.keys('rotate', '--configuration', 'payments'))).code, 0);
  const done = await runCli(f.keys('destroy', '--configuration', 'payments', '--version', '1', '--confirm', 'payments/v1'));
  assert.equal(done.code, 0, done.stderr);
  assert.equal((await decrypt(f, v1.text)).status, 422);
  assert.match(activity(f, 'configuration.key_destroyed')[0]!, /^Destroyed key version 1 of configuration "payments", by svc-sidecar keys destroy/, 'not a forced destruction');
});

test('the CLI never re-applies the seed to a live store: an API key rotated through the API stays rotated', async (t) => {
  const f = await fixture(t);
  const ops = (await f.app.services.store.apiKeys.findByName('ops'))!;
  const rotated = await call(f.url, `/api/v3/api-keys/${ops.id}/rotate`, { key: KEY });
  assert.equal(rotated.status, 200);
  const newKey: string = rotated.json.key;
  const seededKeyRefused = async () => (await call(f.url, '/api/v3/roles', { method: 'GET', key: KEY })).status;
  assert.equal(await seededKeyRefused(), 401);

  // Every CLI command that opens the store: none may put the seed's key value back.
  for (const args of [
    f.keys('rotate', '--configuration', 'payments'),
    f.keys('rewrap', '--configuration', 'payments'),
    ['init', '--config', f.path, '--email', 'breakglass@example.com'],
  ]) {
    const res = await runCli(args, args[1] === 'rewrap' ? '{}' : '');
    assert.equal(res.code, 0, `${args.join(' ')}: ${res.stderr}`);
    assert.doesNotMatch(res.stderr + res.stdout, /seed created/, args.join(' '));
    assert.equal(await seededKeyRefused(), 401, `${args[0]} ${args[1]} brought the seeded key value back`);
    assert.equal((await call(f.url, '/api/v3/roles', { method: 'GET', key: newKey })).status, 200, `${args[0]} ${args[1]} undid the rotation`);
  }
});

test('the CLI still seeds a store it creates: keys rotate on a new store finds the seeded configuration', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-keys-new-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.yaml');
  writeFileSync(
    path,
    `store: { path: ${join(dir, 'data', 'svc.db')} }
keys: { master_key_file: ${join(dir, 'data', 'master.key')} }
logging: { level: warn }
seed:
  configurations: [{ name: payments }]
`,
  );
  const res = await runCli(['keys', 'rotate', '--configuration', 'payments', '--config', path]);
  assert.equal(res.code, 0, res.stderr);
  assert.equal(res.stdout, '2\n');
});

test('keys rewrap with a control plane on PostgreSQL is refused before anything is opened, with where to rewrap instead', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-keys-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.yaml');
  // Port 1 on loopback: nothing listens there, so a connection attempt would fail loudly.
  writeFileSync(path, 'store: { url: "postgres://svc:hunter2@127.0.0.1:1/svc" }\nlogging: { level: warn }\n');
  const run = await runCli(['keys', 'rewrap', '--config', path, '--configuration', 'payments'], DOC);
  assert.equal(run.code, 1, run.stderr);
  assert.equal(run.stdout, '');
  assert.match(run.stderr, /a control plane on PostgreSQL \(store\.url\) rewraps no tokens: send them to a sidecar's \/api\/v3\/encryption\/\{slug\}\/rewrap/);
  assert.doesNotMatch(run.stderr, /hunter2|ECONNREFUSED/);
});
