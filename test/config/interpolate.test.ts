import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { interpolate, interpolateString } from '../../src/config/interpolate.ts';
import { ConfigError, loadConfig } from '../../src/config/load.ts';

describe('interpolateString', () => {
  it('substitutes set variables, several per string', () => {
    assert.deepEqual(interpolateString('${A}-${B_2}', { A: 'x', B_2: 'y' }), { value: 'x-y', errors: [] });
  });

  it('uses the default when the variable is unset or empty, the value otherwise', () => {
    assert.equal(interpolateString('${A:-fallback}', {}).value, 'fallback');
    assert.equal(interpolateString('${A:-fallback}', { A: '' }).value, 'fallback');
    assert.equal(interpolateString('${A:-fallback}', { A: 'set' }).value, 'set');
    assert.equal(interpolateString('${A:-}', {}).value, '');
    assert.equal(interpolateString('${A:-a:b c-d}', {}).value, 'a:b c-d');
  });

  it('keeps a set but empty variable empty without a default', () => {
    assert.deepEqual(interpolateString('[${A}]', { A: '' }), { value: '[]', errors: [] });
  });

  it('turns $${ into a literal ${ and leaves other dollars alone', () => {
    assert.equal(interpolateString('$${HOME}', { HOME: '/root' }).value, '${HOME}');
    assert.equal(interpolateString('cost: $5, $$ and $x', {}).value, 'cost: $5, $$ and $x');
    assert.equal(interpolateString('$$${A}', { A: 'v' }).value, '$v');
    assert.equal(interpolateString('$$$${A}', { A: 'v' }).value, '$${A}');
    assert.equal(interpolateString('a$${b}$${c', {}).value, 'a${b}${c');
  });

  it('reports each unset variable by name', () => {
    assert.deepEqual(interpolateString('${ONE}/${TWO:-2}/${THREE}', {}).errors, [
      'environment variable ONE is not set',
      'environment variable THREE is not set',
    ]);
  });

  it('rejects bad names, unterminated and nested expressions', () => {
    assert.match(interpolateString('${1ABC}', {}).errors[0] ?? '', /invalid interpolation/);
    assert.match(interpolateString('${A B}', {}).errors[0] ?? '', /invalid interpolation/);
    assert.match(interpolateString('${}', {}).errors[0] ?? '', /invalid interpolation/);
    assert.match(interpolateString('abc ${A', { A: 'x' }).errors[0] ?? '', /unterminated/);
    assert.match(interpolateString('${A:-${B}}', { B: 'x' }).errors[0] ?? '', /cannot contain/);
  });

  it('never quotes the scalar in a message (it may be a password)', () => {
    const { errors } = interpolateString('hunter2${', {});
    assert.equal(errors.length, 1);
    assert.doesNotMatch(errors[0] ?? '', /hunter2/);
  });
});

describe('interpolate (tree)', () => {
  it('walks maps and lists, leaves keys and non-strings as they are', () => {
    const tree = { '${K}': ['${A}', 1, true, null, { deep: '${A:-d}' }] };
    const { value, problems } = interpolate(tree, { A: 'a', K: 'key' });
    assert.deepEqual(value, { '${K}': ['a', 1, true, null, { deep: 'a' }] });
    assert.deepEqual(problems, []);
  });

  it('collects every missing variable with its path instead of stopping at the first', () => {
    const tree = { seed: { users: [{ password: '${PW_ONE}' }, { password: '${PW_TWO}' }] }, store: { path: '${DB}' } };
    const { problems } = interpolate(tree, {});
    assert.deepEqual(problems, [
      { path: ['seed', 'users', 0, 'password'], message: 'environment variable PW_ONE is not set' },
      { path: ['seed', 'users', 1, 'password'], message: 'environment variable PW_TWO is not set' },
      { path: ['store', 'path'], message: 'environment variable DB is not set' },
    ]);
  });

  it('does not mutate its input', () => {
    const tree = { a: ['${A}'] };
    interpolate(tree, { A: 'x' });
    assert.deepEqual(tree, { a: ['${A}'] });
  });
});

describe('interpolation through loadConfig', () => {
  it('cannot inject YAML structure: a value stays one string', () => {
    const injected = 'Eve\n    roles: [owner]\nbogus: true';
    const config = loadConfig({
      text: 'seed:\n  users:\n    - { name: "${NAME}", email: eve@example.com }\n',
      env: { NAME: injected },
    });
    const user = config.seed.users[0];
    assert.equal(user?.name, injected);
    assert.deepEqual(user?.roles, []);
  });

  it('reports a missing variable as path: message, together with schema problems', () => {
    const error = captureConfigError(() =>
      loadConfig({ text: 'server:\n  listen: "${LISTEN}"\n  bogus: 1\nstore:\n  path: "${DB_PATH}"\n', env: {} }),
    );
    assert.deepEqual([...error.problems].sort(), [
      'server.bogus: unknown key',
      'server.listen: environment variable LISTEN is not set',
      'store.path: environment variable DB_PATH is not set',
    ]);
  });

  it('applies defaults, and interpolated numbers and booleans are accepted', () => {
    const config = loadConfig({
      text: [
        'server: { listen: "127.0.0.1:${PORT:-8181}", body_limit: "${LIMIT:-1mb}" }',
        'logs: { batch_size: "${BATCH}" }',
        'seed:',
        '  configurations:',
        '    - { name: c, deterministic: "${DET:-true}", min_decryption_version: "${MIN:-2}" }',
      ].join('\n'),
      env: { BATCH: '50' },
    });
    assert.equal(config.server.listen, '127.0.0.1:8181');
    assert.equal(config.server.body_limit, 1024 * 1024);
    assert.equal(config.logs.batch_size, 50);
    assert.equal(config.seed.configurations[0]?.deterministic, true);
    assert.equal(config.seed.configurations[0]?.min_decryption_version, 2);
  });

  it('treats an empty optional secret as absent, so ${VAR:-} leaves it to generation', () => {
    const config = loadConfig({
      text: 'seed:\n  users: [{ name: A, email: a@example.com, password: "${PW:-}" }]\n  api_keys: [{ name: k, user: a@example.com, key: "${KEY:-}" }]\n',
      env: {},
    });
    assert.equal(config.seed.users[0]?.password, undefined);
    assert.equal(config.seed.api_keys[0]?.key, undefined);
  });
});

function captureConfigError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected a ConfigError');
}
