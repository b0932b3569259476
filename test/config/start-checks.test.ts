/**
 * Operator mistakes that stop the start, each reported with its path among every other
 * problem of the file (one ConfigError), never as a stack trace from whatever opens the
 * value later.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { createApp } from '../../src/app.ts';
import { ConfigError, loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;
const MASTER = randomBytes(32).toString('base64');

function problemsOf(text: string): readonly string[] {
  try {
    loadConfig({ text, env: {} });
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    return error.problems;
  }
  assert.fail('expected the config to be rejected');
}

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-start-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function start(text: string) {
  const sink = new Writable({ write: (_chunk, _enc, done) => done() });
  return await createApp(loadConfig({ text, env: {} }), { env: { SVC_MASTER_KEY: MASTER }, logger: createLogger('silent', sink) });
}

test('a listen address given as a bare port, a number or a string, says host:port with that port', () => {
  const cases: Array<[string, string]> = [
    ['server: { listen: 8080 }', 'server.listen: expected host:port such as 127.0.0.1:8080, got a port alone (0.0.0.0:8080 listens on every interface)'],
    ['server: { listen: "8080" }', 'server.listen: expected host:port such as 127.0.0.1:8080, got a port alone (0.0.0.0:8080 listens on every interface)'],
    ['server: { listen: ":8080" }', 'server.listen: expected host:port such as 127.0.0.1:8080, got a port alone (0.0.0.0:8080 listens on every interface)'],
    [
      'server: { admin_listen: 9090 }',
      'server.admin_listen: expected host:port such as 127.0.0.1:9090, got a port alone (0.0.0.0:9090 listens on every interface); or "off" to disable the admin listener',
    ],
    ['relay: { listen: 8081, upstream: "http://127.0.0.1:3000" }', 'relay.listen: expected host:port such as 127.0.0.1:8081, got a port alone (0.0.0.0:8081 listens on every interface)'],
    ['server: { listen: true }', 'server.listen: expected host:port such as 127.0.0.1:8080, got true'],
  ];
  for (const [text, expected] of cases) assert.deepEqual(problemsOf(text), [expected], text);
  // Near misses that are fine stay fine.
  for (const listen of ['127.0.0.1:8080', 'localhost:0', '"[::1]:8080"']) {
    assert.doesNotThrow(() => loadConfig({ text: `server: { listen: ${listen} }`, env: {} }), listen);
  }
});

test('an unknown key names the nearest known key at its own level, within two edits and one per three characters', () => {
  const problems = problemsOf(
    [
      'servr: {}',
      'server: { listn: "0.0.0.0:1", bodylimit: 1mb, users: [] }',
      'state: { control_plane: { pol_interval: 1s } }',
      'seed:',
      '  listen: x',
      '  users: [{ name: A, email: a@example.com, role: [owner] }]',
      '  configurations: [{ name: c, feilds: [a], nope: 1 }]',
      'relay: { listen: "0.0.0.0:1", upstream: "http://a", routes: [{ match: { path: /, mehtod: GET }, configuration: c, reqest: {} }] }',
      'egress: [{ name: e, destination: "http://b", configuration: c, request: { decrpyt: [a] } }]',
      'bogus: 1',
    ].join('\n'),
  );
  assert.deepEqual([...problems].sort(), [
    'bogus: unknown key',
    'egress.0.request.decrpyt: unknown key "decrpyt" (did you mean "decrypt"?)',
    'relay.routes.0.match.mehtod: unknown key "mehtod" (did you mean "method"?)',
    'relay.routes.0.reqest: unknown key "reqest" (did you mean "request"?)',
    'seed.configurations.0.feilds: unknown key "feilds" (did you mean "fields"?)',
    // "nope" is two edits from "name", but four letters allow one.
    'seed.configurations.0.nope: unknown key',
    // `listen` is a key of server, not of seed: suggestions come from the same level only.
    'seed.listen: unknown key',
    'seed.users.0.role: unknown key "role" (did you mean "roles"?)',
    'server.bodylimit: unknown key "bodylimit" (did you mean "body_limit"?)',
    'server.listn: unknown key "listn" (did you mean "listen"?)',
    'server.users: unknown key',
    'servr: unknown key "servr" (did you mean "server"?)',
    'state.control_plane.pol_interval: unknown key "pol_interval" (did you mean "poll_interval"?)',
  ]);
});

test('bad field paths of routes and seeded configurations, and transforms that give both or neither direction, are reported with the other problems', () => {
  const problems = problemsOf(
    [
      'server: { listen: 8080 }',
      'store: { path: ":memory:" }',
      'seed:',
      '  configurations: [{ name: c, fields: ["a..b", ok, "card.*x"] }]',
      '  classifications: [{ name: PHI, bg_color: "#aa0000", fg_color: "#ffffff" }]',
      'relay:',
      '  listen: "127.0.0.1:0"',
      '  upstream: "http://127.0.0.1:3000"',
      '  routes:',
      '    - { match: { path: /a }, configuration: c, request: { encrypt: [ssn, "x\\\\q"] } }',
      '    - { match: { path: /b }, configuration: c, request: { encrypt: [a], decrypt: [b] }, response: { classification: phi } }',
      'egress:',
      '  - { name: e, destination: "http://b.example", configuration: c, request: { decrypt: ["card."] } }',
      `  - { name: f, destination: "http://b.example", configuration: c, response: { encrypt: ["${Array.from({ length: 129 }, (_, i) => `p${i}`).join(',')}"] } }`,
    ].join('\n'),
  );
  assert.deepEqual([...problems].sort(), [
    'egress.0.request.decrypt.0: the path "card." has an empty segment',
    'egress.1.response.encrypt.0: it lists more than 128 paths',
    'relay.routes.0.request.encrypt.1: the path "x\\q" has an unknown escape "\\q"',
    'relay.routes.1.request: give encrypt or decrypt, not both',
    'relay.routes.1.response.classification: applies only with encrypt or decrypt',
    'seed.configurations.0.fields.0: the path "a..b" has an empty segment',
    'seed.configurations.0.fields.2: the path "card.*x" uses "*" inside a segment; write "\\*" for a literal asterisk',
    'server.listen: expected host:port such as 127.0.0.1:8080, got a port alone (0.0.0.0:8080 listens on every interface)',
  ]);
});

const ROUTES_YAML = `
relay:
  listen: "127.0.0.1:0"
  upstream: "http://127.0.0.1:3000"
  routes:
    - { match: { path: /a }, configuration: paymnets, request: { encrypt: [ssn], classification: phl } }
    - { match: { path: /b }, configuration: workspace }
    - { match: { path: /c }, configuration: payments, response: { decrypt: [ssn], classification: "12" } }
    - { match: { path: /d }, configuration: payments, response: { decrypt: [ssn], classification: pci-2 } }
egress:
  - { name: vendor, destination: "https://vendor.example", configuration: api-made, request: { decrypt: [ssn], classification: phi } }
`;

const SEED_YAML = `
seed:
  configurations:
    - { name: payments }
    - { name: workspace, provider: google }
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff" }
    - { name: PCI, slug: pci, bg_color: "#aa0000", fg_color: "#ffffff" }
`;

test('with a new store, a route naming a configuration or classification the seed does not declare is reported with the other problems', () => {
  const problems = problemsOf(`server: { listen: "8080" }\nstore: { path: ":memory:" }\n${ROUTES_YAML}${SEED_YAML}`);
  assert.deepEqual([...problems].sort(), [
    'egress.0.configuration: no configuration is named "api-made": the store is new and the seed declares none',
    'relay.routes.0.configuration: no configuration is named "paymnets" (did you mean "payments"?): the store is new and the seed declares none',
    'relay.routes.0.request.classification: no classification has the id or slug "phl": the store is new and the seed declares none',
    'relay.routes.1.configuration: "workspace" is a provider configuration; routes need an encryption configuration',
    'server.listen: expected host:port such as 127.0.0.1:8080, got a port alone (0.0.0.0:8080 listens on every interface)',
  ]);
});

test('with an existing store, createApp checks the routes against the store after seeding and lists every dangling name in one ConfigError', async (t) => {
  const dir = tempDir(t);
  const files = `store: { path: "${join(dir, 'svc.db')}" }\nlogging: { level: silent }\n`;
  // A first start leaves names in the store that the next file's seed does not declare
  // (as the management API would).
  const first = await start(`${files}
seed:
  configurations: [{ name: payments }, { name: api-made }]
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff" }
    - { name: Cards, slug: pci-2, bg_color: "#aa0000", fg_color: "#ffffff" }
`);
  await first.close();

  const routes = ROUTES_YAML.replace(/ {4}- \{ match: \{ path: \/b \}.*\n/, '');
  const text = `${files}${routes}
seed:
  configurations: [{ name: payments }]
  classifications: [{ name: PHI, bg_color: "#aa0000", fg_color: "#ffffff" }]
`;
  // The schema pass cannot know what the store holds, so it lets these through...
  assert.equal(loadConfig({ text, env: {} }).egress[0]?.configuration, 'api-made');
  // ...and the start refuses the names the store does not hold, all of them at once.
  await assert.rejects(
    start(text),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, String(err));
      assert.deepEqual([...err.problems].sort(), [
        'relay.routes.0.configuration: no configuration is named "paymnets" (did you mean "payments"?): the store holds none, after seeding',
        'relay.routes.0.request.classification: no classification has the id or slug "phl": the store holds none, after seeding',
        'relay.routes.1.response.classification: no classification has the id or slug "12": the store holds none, after seeding',
      ]);
      return true;
    },
  );
});

test('a replica that has never received a snapshot starts with routes it cannot check yet (they answer 503 until the names exist)', async () => {
  const text = `
store: { path: ":memory:" }
logging: { level: silent }
state: { source: control-plane, control_plane: { url: "http://127.0.0.1:1", api_key: "svc_${'a'.repeat(40)}" } }
${ROUTES_YAML.replace(/ {4}- \{ match: \{ path: \/b \}.*\n/, '')}`;
  const app = await start(text);
  await app.close();
});

test('a store path or master key file that is a directory, or that lies under a file, is a problem naming the path', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'a-file');
  writeFileSync(file, 'x');
  mkdirSync(join(dir, 'keys'));
  const problems = problemsOf(`server: { listen: 1 }\nstore: { path: "${dir}/" }\nkeys: { master_key_file: "${join(dir, 'keys')}" }\n`);
  assert.deepEqual(problems, [
    'server.listen: expected host:port such as 127.0.0.1:1, got a port alone (0.0.0.0:1 listens on every interface)',
    `store.path: "${dir}/" is a directory; give the path of a file in it, such as ${dir}/svc.db`,
    `keys.master_key_file: "${join(dir, 'keys')}" is a directory; give the path of a file in it, such as ${join(dir, 'keys')}/master.key`,
  ]);
  assert.deepEqual(problemsOf(`keys: { master_key_file: "${join(file, 'master.key')}" }`), [
    `keys.master_key_file: "${join(file, 'master.key')}" cannot be a file: a part of the path before its name is a file, not a directory`,
  ]);
});

test('a --config path that is a directory says so', (t) => {
  const dir = tempDir(t);
  assert.throws(
    () => loadConfig({ path: dir, env: {} }),
    (err: unknown) => err instanceof ConfigError && err.problems.length === 1 && err.problems[0] === `${dir}: is a directory, not a configuration file`,
  );
});

function serve(config: string): Promise<{ code: number | null; stderr: string }> {
  const env = { ...process.env, SVC_MASTER_KEY: MASTER };
  return new Promise((resolve) => {
    // The timeout fails a start that would listen instead of exiting.
    execFile(process.execPath, [MAIN, 'serve', '--config', config], { env, timeout: 60_000 }, (error, _stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stderr });
    });
  });
}

test('serve with a route naming what an existing store does not hold exits 1 listing it like any other config problem', async (t) => {
  const dir = tempDir(t);
  const files = `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nstore: { path: "${join(dir, 'svc.db')}" }\nlogging: { level: silent }\n`;
  await (await start(`${files}seed: { configurations: [{ name: payments }] }\n`)).close();
  const config = join(dir, 'svc.yaml');
  writeFileSync(config, `${files}egress: [{ name: vendor, destination: "https://vendor.example", configuration: paymnets }]\n`);
  const run = await serve(config);
  assert.equal(run.code, 1, run.stderr);
  assert.equal(
    run.stderr,
    `svc-sidecar: ${config} is invalid:\n  - egress.0.configuration: no configuration is named "paymnets" (did you mean "payments"?): the store holds none, after seeding\n`,
  );
});

test('serve with a master key file that is a directory exits 1 naming the key and the path, without a stack trace', async (t) => {
  const dir = tempDir(t);
  mkdirSync(join(dir, 'master.key'));
  const config = join(dir, 'svc.yaml');
  writeFileSync(config, `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nstore: { path: "${join(dir, 'svc.db')}" }\nkeys: { master_key_file: "${join(dir, 'master.key')}" }\n`);
  const run = await serve(config);
  assert.equal(run.code, 1, run.stderr);
  assert.ok(run.stderr.includes(`keys.master_key_file: "${join(dir, 'master.key')}" is a directory`), run.stderr);
  assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
});
