import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ConfigError, DEFAULT_CONFIG_PATH, loadConfig } from '../../src/config/load.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DEFAULT_FILE = join(ROOT, DEFAULT_CONFIG_PATH);
const KEY = `svc_${'a1B2'.repeat(10)}`;

function problemsOf(text: string, env: NodeJS.ProcessEnv = {}): readonly string[] {
  try {
    loadConfig({ text, env });
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    return error.problems;
  }
  assert.fail('expected the config to be rejected');
}

function assertProblem(text: string, expected: string | RegExp): void {
  const problems = problemsOf(text);
  const found = problems.some((problem) => (typeof expected === 'string' ? problem === expected : expected.test(problem)));
  assert.ok(found, `no problem matching ${String(expected)} in:\n  ${problems.join('\n  ')}`);
}

describe('the embedded default config/svc.yaml', () => {
  it('is the default path and loads without any environment', () => {
    assert.ok(existsSync(DEFAULT_FILE));
    const config = loadConfig({ path: DEFAULT_FILE, env: {} });
    assert.equal(config.server.listen, '127.0.0.1:8080');
    assert.equal(config.server.admin_listen, '127.0.0.1:9090');
    assert.equal(config.server.public_url, 'http://localhost:8080');
    assert.equal(config.store.path, './data/svc.db');
    assert.equal(config.keys.master_key_file, './data/master.key');
    assert.equal(config.state.source, 'local');

    const [ada] = config.seed.users;
    assert.equal(ada?.email, 'ada@example.com');
    assert.deepEqual(ada?.roles, ['owner']);
    assert.equal(ada?.password, 'change-me-now');

    const [key] = config.seed.api_keys;
    assert.equal(key?.name, 'local');
    assert.equal(key?.user, 'ada@example.com');
    assert.match(key?.key ?? '', /^svc_dev[A-Za-z0-9]{37}$/);

    const [payments] = config.seed.configurations;
    assert.equal(payments?.type, 'encryption');
    assert.equal(payments?.proxy_slug, 'payments');
    assert.deepEqual(payments?.fields, ['card.number', 'card.cvc']);
    assert.deepEqual(payments?.destinations, ['http://127.0.0.1:9999/']);

    assert.deepEqual(config.seed.classifications.map((c) => c.name), ['PHI', 'PCI']);
    const phi = config.seed.classifications[0];
    assert.equal(phi?.bg_color, '#aa0000');
    assert.equal(phi?.fg_color, '#ffffff');
    assert.equal(phi?.emoji, '🩺');
    assert.deepEqual(phi?.users, ['ada@example.com']);
  });

  it('takes the password and API key from the environment when set', () => {
    const config = loadConfig({ path: DEFAULT_FILE, env: { ADA_PASSWORD: 'from-env-123', SVC_API_KEY: KEY } });
    assert.equal(config.seed.users[0]?.password, 'from-env-123');
    assert.equal(config.seed.api_keys[0]?.key, KEY);
  });
});

describe('defaults', () => {
  it('an empty file gives every default', () => {
    const config = loadConfig({ text: '', env: {} });
    assert.deepEqual(config.server, {
      listen: '0.0.0.0:8080',
      admin_listen: '127.0.0.1:9090',
      body_limit: 10 * 1024 * 1024,
      headers_timeout: 10_000,
      request_timeout: 60_000,
      keep_alive_timeout: 5_000,
      drain_timeout: 10_000,
      max_header_size: 16 * 1024,
      idle_memory_release: 5_000,
    });
    assert.equal(config.server.public_url, undefined);
    assert.deepEqual(config.store, { path: './data/svc.db' });
    assert.deepEqual(config.keys, { master_key_file: './data/master.key', destroy_after: 86_400_000 });
    assert.deepEqual(config.state, { source: 'local' });
    assert.deepEqual(config.auth, { access_token_ttl: 3_600_000, login_max_attempts: 5, login_window: 900_000 });
    assert.deepEqual(config.forwarding, { connect_timeout: 5_000, headers_timeout: 30_000, body_timeout: 30_000, max_body: 4 * 1024 ** 3 });
    assert.deepEqual(config.logs, { enabled: true, retention: 30 * 86_400_000, flush_interval: 50, batch_size: 500, queue_limit: 100_000, writer: 'inline' });
    assert.deepEqual(config.logging, { level: 'info' });
    assert.deepEqual(config.seed, { users: [], api_keys: [], configurations: [], classifications: [] });
    assert.equal(config.relay, undefined);
    assert.deepEqual(config.egress, []);
  });

  it('fills in the rest of a partly written section and list items', () => {
    const config = loadConfig({
      text: [
        'server: { body_limit: 1mb, public_url: "https://svc.example.com/" }',
        'logs: { retention: 7d }',
        'seed:',
        '  users: [{ name: Bo, email: bo@example.com }]',
        '  api_keys: [{ name: ci, user: bo@example.com }]',
        '  configurations:',
        '    - { name: enc }',
        '    - { name: google, provider: google, groups: [{ id: g1 }] }',
        '  classifications: [{ name: PII, bg_color: "#000000", fg_color: "#FFFFFF" }]',
      ].join('\n'),
      env: {},
    });
    assert.equal(config.server.body_limit, 1024 * 1024);
    assert.equal(config.server.listen, '0.0.0.0:8080');
    assert.equal(config.server.public_url, 'https://svc.example.com', 'trailing slash removed');
    assert.equal(config.logs.retention, 7 * 86_400_000);
    assert.equal(config.logs.batch_size, 500);
    assert.deepEqual(config.seed.users[0], { name: 'Bo', email: 'bo@example.com', roles: [] });
    assert.deepEqual(config.seed.api_keys[0], { name: 'ci', user: 'bo@example.com', permissions: [], configurations: [] });
    assert.deepEqual(config.seed.configurations[0], { name: 'enc', type: 'encryption', fields: [], destinations: [], deterministic: false });
    assert.equal(config.seed.configurations[1]?.type, 'provider', 'type defaults to provider when provider is given');
    assert.deepEqual(config.seed.configurations[1]?.groups, [{ id: 'g1', members: [] }]);
    assert.deepEqual(config.seed.classifications[0]?.providers, []);
  });

  it('parses relay and egress, with methods upper-cased', () => {
    const config = loadConfig({
      text: [
        'relay:',
        '  listen: "[::1]:8081"',
        '  upstream: http://127.0.0.1:3000',
        '  routes:',
        '    - match: { method: post, path: /patients/* }',
        '      configuration: payments',
        '      request: { encrypt: [ssn, dob], classification: phi }',
        '      response: { decrypt: [ssn] }',
        'egress:',
        '  - { name: stripe, destination: https://api.stripe.com, configuration: payments, request: { decrypt: [card.number] } }',
        'seed:',
        '  configurations: [{ name: payments }]',
        '  classifications: [{ name: PHI, bg_color: "#aa0000", fg_color: "#ffffff" }]',
      ].join('\n'),
      env: {},
    });
    assert.equal(config.relay?.listen, '[::1]:8081');
    assert.equal(config.relay?.routes[0]?.match.method, 'POST');
    assert.deepEqual(config.relay?.routes[0]?.request, { encrypt: ['ssn', 'dob'], classification: 'phi' });
    assert.equal(config.egress[0]?.name, 'stripe');
  });

  it('field paths may be dotted or bracketed; malformed brackets are refused at their index', () => {
    const config = loadConfig({
      text: [
        'egress:',
        '  - { name: stripe, destination: https://api.stripe.com, configuration: payments, request: { decrypt: ["card[number]", "items[0][sku]", card.cvc] } }',
        'seed:',
        '  configurations: [{ name: payments, fields: ["card[number]", "metadata[*]"] }]',
      ].join('\n'),
      env: {},
    });
    assert.deepEqual(config.egress[0]?.request?.decrypt, ['card[number]', 'items[0][sku]', 'card.cvc']);
    assert.deepEqual(config.seed.configurations[0]?.fields, ['card[number]', 'metadata[*]']);
    const problems = problemsOf(
      [
        'egress: [{ name: e, destination: "http://b", configuration: c, request: { decrypt: [ok, "card[number"] } }]',
        'seed: { configurations: [{ name: c, fields: ["card]number", "[card]", "card[a]b"] }] }',
      ].join('\n'),
    );
    assert.deepEqual(problems, [
      'seed.configurations.0.fields.0: the path "card]number" has a "]" without its "["; write "\\]" for a literal bracket',
      'seed.configurations.0.fields.1: the path "[card]" has a "[" that follows no name; write "\\[" for a literal bracket',
      'seed.configurations.0.fields.2: the path "card[a]b" has "b" after a "]": a "]" is followed by "[", "." or the end; write "\\]" for a literal bracket',
      'egress.0.request.decrypt.1: the path "card[number" has a "[" without its "]"',
    ]);
  });

  it('"off" disables the admin listener', () => {
    assert.equal(loadConfig({ text: 'server: { admin_listen: "off" }', env: {} }).server.admin_listen, 'off');
  });
});

describe('the result is deeply frozen', () => {
  it('rejects writes at every depth', () => {
    const config = loadConfig({ path: DEFAULT_FILE, env: {} });
    assert.ok(Object.isFrozen(config));
    assert.ok(Object.isFrozen(config.server));
    assert.ok(Object.isFrozen(config.seed.users));
    assert.ok(Object.isFrozen(config.seed.users[0]?.roles));
    assert.throws(() => {
      (config.server as { listen: string }).listen = '0.0.0.0:1';
    }, TypeError);
    assert.throws(() => {
      (config.seed.configurations[0]?.fields as string[]).push('ssn');
    }, TypeError);
  });
});

describe('problems are all reported at once, with paths', () => {
  it('reports unknown keys at every depth in one error', () => {
    const problems = problemsOf(
      [
        'bogus: 1',
        'server: { listen: "0.0.0.0:1", lisen: x }',
        'state: { source: local, control_plane: { url: "https://cp:1", timeout: 5s } }',
        'seed:',
        '  users: [{ name: A, email: a@example.com, admin: true }]',
        '  roles: [{ name: x }]',
        '  configurations: [{ name: c }]',
        '  classifications:',
        '    - name: PHI',
        '      bg_color: "#000000"',
        '      fg_color: "#000000"',
        '      providers: [{ configuration: g, gws_groups: [{ id: x, nope: 1 }] }]',
        'relay: { listen: "0.0.0.0:1", upstream: "http://a", routes: [{ match: { path: /, query: a }, configuration: c }] }',
        'egress: [{ name: e, destination: "http://b", configuration: c, request: { redact: [a] } }]',
      ].join('\n'),
    );
    assert.deepEqual([...problems].sort(), [
      'bogus: unknown key',
      'egress.0.request.redact: unknown key',
      'relay.routes.0.match.query: unknown key',
      'seed.classifications.0.providers.0.gws_groups.0.nope: unknown key',
      'seed.roles: unknown key',
      'seed.users.0.admin: unknown key',
      'server.lisen: unknown key "lisen" (did you mean "listen"?)',
      'state.control_plane.timeout: unknown key',
    ]);
  });

  it('the message names the source and lists every problem', () => {
    try {
      loadConfig({ text: 'server: { listen: x, body_limit: lots }', path: 'custom.yaml', env: {} });
      assert.fail('expected a ConfigError');
    } catch (error) {
      assert.ok(error instanceof ConfigError);
      assert.equal(error.problems.length, 2);
      assert.match(error.message, /^Invalid configuration in custom\.yaml \(2 problems\):/);
      for (const problem of error.problems) assert.ok(error.message.includes(problem));
    }
  });

  it('rejects a bad listen and admin_listen', () => {
    assertProblem('server: { listen: "8080" }', /^server\.listen: expected host:port/);
    assertProblem('server: { listen: "::1:8080" }', /^server\.listen: expected host:port/);
    assertProblem('server: { listen: "localhost:99999" }', /^server\.listen: port 99999 is out of range/);
    assertProblem('server: { admin_listen: "nope" }', /^server\.admin_listen: expected host:port.*"off"/);
    assertProblem('relay: { listen: 8081, upstream: "http://a" }', /^relay\.listen: expected host:port such as 127\.0\.0\.1:8081/);
  });

  it('rejects bad sizes, durations and numbers', () => {
    assertProblem('server: { body_limit: 10zb }', /^server\.body_limit: expected a size such as/);
    assertProblem('server: { max_header_size: 0 }', 'server.max_header_size: must be greater than 0');
    assertProblem('server: { drain_timeout: soon }', /^server\.drain_timeout: expected a duration such as/);
    assertProblem('logs: { flush_interval: 0s }', 'logs.flush_interval: must be greater than 0');
    assertProblem('logs: { batch_size: 0 }', /^logs\.batch_size: Too small/);
    assertProblem('auth: { login_max_attempts: "five" }', /^auth\.login_max_attempts: Invalid input: expected number/);
  });

  it('rejects bad colours, slugs, keys, emails, roles, permissions and URLs', () => {
    const text = [
      'server: { public_url: "ftp://example.com" }',
      'seed:',
      '  users: [{ name: A, email: not-an-email, roles: [root] }]',
      '  api_keys: [{ name: k, user: a@example.com, key: svc_tooshort, permissions: [data.everything] }]',
      '  configurations: [{ name: c, proxy_slug: "-bad", destinations: ["not a url"] }]',
      '  classifications: [{ name: "A name that is far too long to be allowed", bg_color: red, fg_color: "#12345g", slug: "Bad Slug" }]',
      'egress: [{ name: Stripe, destination: "https://api.stripe.com", configuration: c }]',
    ].join('\n');
    const problems = problemsOf(text);
    const paths = problems.map((problem) => problem.slice(0, problem.indexOf(':')));
    assert.deepEqual(paths.sort(), [
      'egress.0.name',
      'seed.api_keys.0.key',
      'seed.api_keys.0.permissions.0',
      'seed.classifications.0.bg_color',
      'seed.classifications.0.fg_color',
      'seed.classifications.0.name',
      'seed.classifications.0.slug',
      'seed.configurations.0.destinations.0',
      'seed.configurations.0.proxy_slug',
      'seed.users.0.email',
      'seed.users.0.roles.0',
      'server.public_url',
    ]);
    assert.ok(problems.includes('seed.classifications.0.bg_color: expected a colour like #aa0000'));
    assert.ok(problems.includes('seed.api_keys.0.key: expected svc_ followed by 40 letters or digits'));
    assert.ok(problems.includes('seed.users.0.email: expected an email address'));
  });

  it('says "required" for a missing required key', () => {
    assertProblem('seed: { users: [{ name: A }] }', 'seed.users.0.email: required');
    assertProblem('seed: { classifications: [{ name: A, fg_color: "#000000" }] }', 'seed.classifications.0.bg_color: required');
  });

  it('rejects a document that is not a mapping', () => {
    assertProblem('- server\n- store\n', /^\(root\): expected a mapping/);
  });
});

describe('cross-field rules', () => {
  it('requires control_plane url and api_key for source: control-plane', () => {
    assertProblem('state: { source: control-plane }', /^state\.control_plane: required when state\.source is control-plane/);
    assertProblem('state: { source: control-plane, control_plane: { url: "https://cp:8080" } }', 'state.control_plane.api_key: required when state.source is control-plane');
    const config = loadConfig({
      text: 'state: { source: control-plane, control_plane: { url: "https://cp:8080", api_key: "${CP_KEY}" } }',
      env: { CP_KEY: KEY },
    });
    assert.deepEqual(config.state.control_plane, { url: ['https://cp:8080'], api_key: KEY, poll_interval: 5_000, ship_interval: 5_000 });
    // Without control-plane, the block may stay incomplete.
    assert.equal(loadConfig({ text: 'state: { control_plane: { url: "https://cp:8080" } }', env: {} }).state.source, 'local');
  });

  it('state.control_plane.url takes one URL or a list, and is a list once loaded', () => {
    const urlsOf = (url: string) => loadConfig({ text: `state: { source: control-plane, control_plane: { url: ${url}, api_key: "${KEY}" } }`, env: {} }).state.control_plane?.url;
    assert.deepEqual(urlsOf('"https://cp:8080"'), ['https://cp:8080']);
    assert.deepEqual(urlsOf('["https://cp-a:8080", "https://cp-b:8080/svc/"]'), ['https://cp-a:8080', 'https://cp-b:8080/svc/']);
    const block = loadConfig({
      text: `state:\n  source: control-plane\n  control_plane:\n    url:\n      - https://cp-a:8080\n      - http://10.0.0.2:8080\n    api_key: "${KEY}"\n`,
      env: {},
    });
    assert.deepEqual(block.state.control_plane?.url, ['https://cp-a:8080', 'http://10.0.0.2:8080']);
    // Each item goes through ${VAR} like any other string.
    const fromEnv = loadConfig({ text: `state: { source: control-plane, control_plane: { url: ["\${CP_A}", "\${CP_B}"], api_key: "${KEY}" } }`, env: { CP_A: 'http://a:1', CP_B: 'http://b:1' } });
    assert.deepEqual(fromEnv.state.control_plane?.url, ['http://a:1', 'http://b:1']);
    // Sixteen is the most a list may hold.
    const sixteen = Array.from({ length: 16 }, (_, i) => `"http://cp-${i}:8080"`).join(', ');
    assert.equal(urlsOf(`[${sixteen}]`)?.length, 16);
  });

  it('a single control-plane URL is refused with the messages it always had', () => {
    const cp = (url: string) => `state: { source: control-plane, control_plane: { url: ${url}, api_key: "${KEY}" } }`;
    for (const [url, problem] of [
      ['"ftp://cp:8080"', 'state.control_plane.url: expected an absolute http(s) URL'],
      ['"http://"', 'state.control_plane.url: expected an absolute http(s) URL'],
      ['"cp:8080"', 'state.control_plane.url: expected an absolute http(s) URL'],
      ['5', 'state.control_plane.url: Invalid input: expected string, received number'],
      ['{ a: 1 }', 'state.control_plane.url: Invalid input: expected string, received object'],
      ['""', 'state.control_plane.url: required when state.source is control-plane'],
    ] as const) {
      assert.deepEqual(problemsOf(cp(url)), [problem], url);
    }
  });

  it('a list of control-plane URLs: each item checked as a single URL, no duplicates, between 1 and 16', () => {
    const cp = (url: string) => `state: { source: control-plane, control_plane: { url: ${url}, api_key: "${KEY}" } }`;
    for (const [url, problems] of [
      ['[]', ['state.control_plane.url: list at least one URL']],
      ['["http://a:1", "ftp://b:1"]', ['state.control_plane.url.1: expected an absolute http(s) URL']],
      ['["http://a:1", 5, ""]', ['state.control_plane.url.1: Invalid input: expected string, received number', 'state.control_plane.url.2: expected an absolute http(s) URL']],
      ['[[ "http://a:1" ]]', ['state.control_plane.url.0: Invalid input: expected string, received array']],
      // One endpoint written twice: same text, another case of host, a final slash, a default port.
      ['["http://a:1", "http://a:1"]', ['state.control_plane.url.1: duplicate URL (also at state.control_plane.url.0)']],
      ['["http://cp.example:1/svc", "http://b:1", "HTTP://CP.EXAMPLE:1/svc/"]', ['state.control_plane.url.2: duplicate URL (also at state.control_plane.url.0)']],
      ['["https://a", "https://a:443/"]', ['state.control_plane.url.1: duplicate URL (also at state.control_plane.url.0)']],
      [`[${Array.from({ length: 17 }, (_, i) => `"http://cp-${i}:8080"`).join(', ')}]`, ['state.control_plane.url: list at most 16 URLs']],
    ] as const) {
      assert.deepEqual(problemsOf(cp(url)), problems, url);
    }
    // Near misses that are not duplicates: another path, port or scheme is another endpoint.
    for (const url of ['["http://a:1/x", "http://a:1/y"]', '["http://a:1", "http://a:2"]', '["http://a", "https://a"]']) {
      assert.equal(loadConfig({ text: cp(url), env: {} }).state.control_plane?.url?.length, 2, url);
    }
  });

  it('a duplicate control-plane URL is not echoed (it may hold credentials)', () => {
    const problems = problemsOf(`state: { source: control-plane, control_plane: { url: ["http://u:s3cret@a:1", "http://u:s3cret@a:1"], api_key: "${KEY}" } }`);
    assert.deepEqual(problems, ['state.control_plane.url.1: duplicate URL (also at state.control_plane.url.0)']);
  });

  it('runs even when other fields fail, and reports alongside them', () => {
    const problems = problemsOf('server: { listen: x }\nstate: { source: control-plane }');
    assert.equal(problems.length, 2);
  });

  it('rejects duplicate names and proxy slugs, without echoing key material', () => {
    const problems = problemsOf(
      [
        'seed:',
        '  users: [{ name: A, email: a@example.com }, { name: B, email: A@Example.com }]',
        `  api_keys: [{ name: k, user: a@example.com, key: ${KEY} }, { name: k, user: a@example.com, key: ${KEY} }]`,
        '  configurations: [{ name: c, proxy_slug: same }, { name: d, proxy_slug: same }]',
        '  classifications: [{ name: P, bg_color: "#000000", fg_color: "#000000" }, { name: P, bg_color: "#000000", fg_color: "#000000" }]',
      ].join('\n'),
    );
    assert.deepEqual([...problems].sort(), [
      'seed.api_keys.1.key: duplicate key (also at seed.api_keys.0)',
      'seed.api_keys.1.name: duplicate name "k" (also at seed.api_keys.0)',
      'seed.classifications.1.name: duplicate name "P" (also at seed.classifications.0)',
      'seed.configurations.1.proxy_slug: duplicate proxy_slug "same" (also at seed.configurations.0)',
      'seed.users.1.email: duplicate email "A@Example.com" (also at seed.users.0)',
    ]);
  });

  it('checks that provider and encryption settings are not mixed', () => {
    assertProblem('seed: { configurations: [{ name: g, type: provider }] }', /^seed\.configurations\.0\.provider: required for a provider configuration/);
    assertProblem('seed: { configurations: [{ name: g, provider: google, proxy_slug: abc }] }', 'seed.configurations.0.proxy_slug: only encryption configurations have a proxy_slug');
    assertProblem('seed: { configurations: [{ name: e, groups: [] }] }', 'seed.configurations.0.groups: only provider configurations have groups');
    assertProblem(
      'seed:\n  configurations: [{ name: e }]\n  classifications: [{ name: P, bg_color: "#000000", fg_color: "#000000", providers: [{ configuration: e }] }]',
      /^seed\.classifications\.0\.providers\.0\.configuration: "e" is an encryption configuration/,
    );
    assertProblem(
      'seed:\n  configurations: [{ name: g, provider: google }]\negress: [{ name: x, destination: "https://x.example", configuration: g }]',
      /^egress\.0\.configuration: "g" is a provider configuration/,
    );
  });

  it('rejects a headers_timeout longer than request_timeout (Node would throw at listen)', () => {
    assertProblem('server: { headers_timeout: 2m, request_timeout: 1m }', 'server.headers_timeout: must not be longer than server.request_timeout');
    assert.equal(loadConfig({ text: 'server: { headers_timeout: 2m, request_timeout: 0 }', env: {} }).server.request_timeout, 0);
  });
});

describe('YAML errors', () => {
  it('reports a syntax error with its line and column', () => {
    const problems = problemsOf('server:\n  listen: 127.0.0.1:8080\n  admin_listen: [1, 2\nstore:\n  path: x\n');
    assert.ok(problems.length >= 1);
    assert.match(problems[0] ?? '', /^yaml: line \d+, column \d+: /);
  });

  it('points at the line of a duplicate key', () => {
    assert.deepEqual(problemsOf('store:\n  path: a\n  path: b\n'), ['yaml: line 3, column 3: Map keys must be unique']);
  });

  it('treats an unresolved tag as an error', () => {
    assertProblem('store:\n  path: !secret x\n', /^yaml: line 2, column 9: .*!secret/);
  });

  it('resolves anchors and merge keys', () => {
    const config = loadConfig({
      text: [
        'seed:',
        '  classifications:',
        '    - &red { name: A, bg_color: "#aa0000", fg_color: "#ffffff" }',
        '    - { <<: *red, name: B }',
      ].join('\n'),
      env: {},
    });
    assert.deepEqual(config.seed.classifications.map((c) => [c.name, c.bg_color]), [['A', '#aa0000'], ['B', '#aa0000']]);
  });

  it('reports an undefined alias', () => {
    assertProblem('store: { path: *nowhere }', /^yaml: /);
  });
});

describe('reading files', () => {
  it('reports a missing file as a ConfigError naming it', () => {
    assert.throws(
      () => loadConfig({ path: join(ROOT, 'does-not-exist.yaml'), env: {} }),
      (error: unknown) => error instanceof ConfigError && /does-not-exist\.yaml: cannot read the file \(ENOENT\)/.test(error.problems[0] ?? ''),
    );
  });
});

describe('seed.classifications[].reveal and default', () => {
  const classification = (extra: string) => `
seed:
  classifications:
    - name: PCI
      bg_color: "#000000"
      fg_color: "#ffffff"
${extra}`;

  it('takes grants with presets and custom masks, and fills in a custom mask and the default', () => {
    const config = loadConfig({
      text: classification(`      reveal:
        - { to: { roles: [developer] }, level: mask, mask: last4 }
        - { to: { users: [vic@example.com], groups: [g1] }, level: mask, mask: { keep_last: "2" } }
        - { to: { groups: [g2] }, level: redact }`),
      env: {},
    });
    const pci = config.seed.classifications[0]!;
    assert.deepEqual(pci.reveal[1]!.mask, { keep_first: 0, keep_last: 2, char: '•' });
    assert.equal(pci.default, 'deny');
    assert.equal(pci.default_mask, undefined);
  });

  it('refuses a mask without level mask, level mask without a mask, a grant to nobody, out-of-range masks, a plain default, and a mask default without its mask', () => {
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: token, mask: last4 }]'), 'seed.classifications.0.reveal.0.mask: applies only with level: mask');
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: mask }]'), 'seed.classifications.0.reveal.0.mask: required with level: mask');
    assertProblem(classification('      reveal: [{ to: {}, level: token }]'), 'seed.classifications.0.reveal.0.to: must name at least one user, role or group');
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: peek }]'), /^seed\.classifications\.0\.reveal\.0\.level: /);
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: mask, mask: last3 }]'), /^seed\.classifications\.0\.reveal\.0\.mask: /);
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: mask, mask: { keep_first: 33 } }]'), /^seed\.classifications\.0\.reveal\.0\.mask/);
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: mask, mask: { char: "ab" } }]'), /^seed\.classifications\.0\.reveal\.0\.mask/);
    assertProblem(classification('      reveal: [{ to: { roles: [developer] }, level: mask, mask: { keep_lst: 4 } }]'), /^seed\.classifications\.0\.reveal\.0\.mask/);
    assertProblem(classification('      default: plain'), /^seed\.classifications\.0\.default: /);
    assertProblem(classification('      default: mask'), 'seed.classifications.0.default_mask: required with default: mask');
    assertProblem(classification('      default: token\n      default_mask: ssn'), 'seed.classifications.0.default_mask: applies only with default: mask');
  });
});

describe('store.url: the control plane on PostgreSQL', () => {
  it('takes a postgres:// URL, with the password from the environment, and leaves the file path unused', () => {
    const config = loadConfig({ text: 'store:\n  url: postgres://svc:${DB_PASSWORD}@db.internal:5432/svc\n', env: { DB_PASSWORD: 's3cret' } });
    assert.deepEqual(config.store, { path: './data/svc.db', url: 'postgres://svc:s3cret@db.internal:5432/svc' });
    assert.equal(loadConfig({ text: 'store:\n  url: postgresql://db/svc\n', env: {} }).store.url, 'postgresql://db/svc');
  });

  it('refuses store.url beside store.path, and a URL that is not postgres://, without quoting it', () => {
    assertProblem('store:\n  path: ./data/svc.db\n  url: postgres://db/svc\n', 'store.url: store.url and store.path are mutually exclusive: a store is a SQLite file or a PostgreSQL database');
    for (const url of ['mysql://u:hunter2@db/svc', 'postgres:///svc', 'not a url hunter2']) {
      const problems = problemsOf(`store:\n  url: "${url}"\n`);
      assert.deepEqual(problems, ['store.url: must be a postgres:// URL with a host (postgres://user:password@host:5432/database)'], url);
      assert.ok(!problems.join('').includes('hunter2'));
    }
  });
});

describe('store.url: what a control plane on PostgreSQL does not take', () => {
  it('refuses a relay, an egress proxy and being a replica, each with its reason', () => {
    const text = [
      'store:',
      '  url: postgres://db/svc',
      'state:',
      '  source: control-plane',
      '  control_plane: { url: "https://cp.internal", api_key: "svc_0123456789012345678901234567890123456789" }',
      'relay:',
      '  listen: 127.0.0.1:0',
      '  upstream: http://127.0.0.1:1',
      '  routes: []',
      'egress_proxy:',
      '  listen: 127.0.0.1:0',
      '',
    ].join('\n');
    const problems = problemsOf(text);
    const why = 'a control plane on PostgreSQL (store.url) serves no data requests: run it in the sidecars';
    assert.ok(problems.includes(`relay: ${why}`), problems.join('\n'));
    assert.ok(problems.includes(`egress_proxy: ${why}`), problems.join('\n'));
    assert.ok(problems.includes('state.source: a replica keeps its copy of the state in SQLite: control-plane takes store.path, not store.url'), problems.join('\n'));
  });
});
