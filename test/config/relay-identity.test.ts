/**
 * `relay.identity.jwt` in the config file: every bad setting is reported at start with
 * its key, all at once, and no message shows what a key file holds.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config/load.ts';
import { asymmetric, jwks, TEST_CA_FILE, tempDir, writeFile } from '../support/jwt.ts';

const RELAY = 'relay:\n  listen: 127.0.0.1:0\n  upstream: http://127.0.0.1:3000\n  identity:\n';

function jwtYaml(lines: string): string {
  return `${RELAY}    jwt:\n${lines.replace(/^/gm, '      ')}\n`;
}

function problemsOf(text: string): readonly string[] {
  try {
    loadConfig({ text, env: {} });
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    return error.problems;
  }
  assert.fail('expected the config to be rejected');
}

const URL_SOURCE = 'jwks_url: https://login.example.com/realms/app/protocol/openid-connect/certs';

describe('relay.identity.jwt', () => {
  it('takes the defaults: authorization header, 30s tolerance, the email claim; no roles or groups claims', () => {
    const config = loadConfig({ text: jwtYaml(URL_SOURCE), env: {} });
    assert.deepEqual(config.relay?.identity?.jwt, {
      header: 'authorization',
      jwks_url: 'https://login.example.com/realms/app/protocol/openid-connect/certs',
      clock_tolerance: 30_000,
      user_claim: 'email',
    });
  });

  it('reads every setting, the header name in lower case', (t) => {
    const dir = tempDir(t);
    const secret = writeFile(dir, 's', 'x'.repeat(32));
    const config = loadConfig({
      text: jwtYaml(`header: X-Id-Token\nsecret_file: ${secret}\nissuer: https://login.example.com/\naudience: [a, b]\nclock_tolerance: 5s\nuser_claim: upn\nroles_claim: realm_access.roles\ngroups_claim: groups`),
      env: {},
    });
    assert.deepEqual(config.relay?.identity?.jwt, {
      header: 'x-id-token',
      secret_file: secret,
      issuer: 'https://login.example.com/',
      audience: ['a', 'b'],
      clock_tolerance: 5000,
      user_claim: 'upn',
      roles_claim: 'realm_access.roles',
      groups_claim: 'groups',
    });
  });

  it('needs exactly one key source', (t) => {
    assert.ok(problemsOf(jwtYaml('issuer: x')).includes('relay.identity.jwt: give one key source: secret_file (HS256), jwks_file or jwks_url (RS256, ES256)'));
    assert.ok(problemsOf(`${RELAY}    {}\n`).includes('relay.identity.jwt: required'));
    const secret = writeFile(tempDir(t), 's', 'x'.repeat(32));
    assert.ok(problemsOf(jwtYaml(`secret_file: ${secret}\n${URL_SOURCE}`)).includes('relay.identity.jwt.jwks_url: give one key source only: secret_file and jwks_url are both set'));
    assert.ok(problemsOf(jwtYaml(`secret_file: ${secret}\njwks_file: ${secret}\n${URL_SOURCE}`)).some((p) => p.startsWith('relay.identity.jwt.jwks_file: give one key source only: secret_file and jwks_file and jwks_url')));
  });

  it('refuses a secret file that is missing, a directory, empty, too short or too large, naming the path and never its content', (t) => {
    const dir = tempDir(t);
    const short = 'short-secret-of-31-bytes-xxxxxx';
    const cases: Array<[string, string, string]> = [
      ['missing', join(dir, 'nope.secret'), `"${join(dir, 'nope.secret')}" does not exist; give the path of the file holding the shared secret`],
      ['a directory', dir, `"${dir}" is a directory; give the path of the file holding the shared secret`],
      ['under a file', join(writeFile(dir, 'plain', 'x'), 'secret'), `cannot be a file: a part of the path before its name is a file, not a directory`],
      ['empty', writeFile(dir, 'empty', ''), 'is empty'],
      ['only a line break', writeFile(dir, 'newline', '\r\n'), 'is empty'],
      ['31 bytes', writeFile(dir, 'short', `${short}\n`), 'holds 31 bytes; an HS256 secret needs at least 32 (RFC 7518 §3.2)'],
      ['larger than 4096 bytes', writeFile(dir, 'large', 'x'.repeat(4097)), 'holds more than 4096 bytes: too large for a shared secret'],
    ];
    for (const [name, path, message] of cases) {
      const problems = problemsOf(jwtYaml(`secret_file: ${path}`));
      assert.equal(problems.length, 1, `${name}: ${problems.join('; ')}`);
      assert.ok(problems[0]!.startsWith('relay.identity.jwt.secret_file: '), name);
      assert.ok(problems[0]!.includes(message), `${name}: ${problems[0]}`);
      assert.ok(!problems[0]!.includes(short), `${name}: the content is not shown`);
    }
    assert.doesNotThrow(() => loadConfig({ text: jwtYaml(`secret_file: ${writeFile(dir, 'ok', `${'y'.repeat(32)}\n`)}`), env: {} }), '32 bytes and a line break');
  });

  it('refuses a JWKS file that is not a set of RS256 or ES256 public keys', async (t) => {
    const dir = tempDir(t);
    const es = await asymmetric('ES256');
    const weak = await asymmetric('RS256', 'weak', 1024);
    const p384 = { kty: 'EC', crv: 'P-384', x: 'a', y: 'b' };
    const cases: Array<[string, string, string]> = [
      ['not JSON', 'not json', 'is not valid JSON'],
      ['a key, not a set', JSON.stringify(es.jwk), 'is not a JWKS: expected {"keys": [...]}'],
      ['an empty set', '{"keys":[]}', 'holds no RS256 or ES256 public key'],
      ['a symmetric key', JSON.stringify({ keys: [es.jwk, { kty: 'oct', k: 'c2VjcmV0' }] }), 'key 1 is a symmetric key (kty "oct")'],
      ['a private key', JSON.stringify({ keys: [{ ...es.jwk, d: 'private-part' }] }), 'key 0 holds private key material'],
      ['only encryption keys', JSON.stringify({ keys: [{ ...es.jwk, use: 'enc' }] }), 'holds no RS256 or ES256 public key'],
      ['only another algorithm', JSON.stringify({ keys: [{ ...es.jwk, alg: 'ES384' }, p384] }), 'holds no RS256 or ES256 public key'],
      ['a 1024-bit RSA key', JSON.stringify(jwks(weak)), 'key 0 is an RSA key of 1024 bits; RS256 needs 2048 or more'],
      ['a broken EC key', JSON.stringify({ keys: [{ ...es.jwk, x: 'AAAA' }] }), 'key 0 is not a valid EC public key'],
      ['a key that is no object', '{"keys":["x"]}', 'key 0 is not a JSON object'],
    ];
    for (const [name, content, message] of cases) {
      const path = writeFile(dir, `${name.replace(/\W/g, '-')}.json`, content);
      const problems = problemsOf(jwtYaml(`jwks_file: ${path}`));
      assert.ok(problems.some((p) => p.startsWith(`relay.identity.jwt.jwks_file: "${path}" `) && p.includes(message)), `${name}: ${problems.join('; ')}`);
      assert.ok(!problems.join('\n').includes('private-part'), `${name}: key material is not shown`);
    }
    // Keys for other uses beside a signing key are fine (providers publish both).
    const mixed = writeFile(dir, 'mixed.json', JSON.stringify({ keys: [{ ...es.jwk, use: 'enc', kid: 'enc' }, es.jwk, p384] }));
    assert.doesNotThrow(() => loadConfig({ text: jwtYaml(`jwks_file: ${mixed}`), env: {} }));
    const directory = join(dir, 'keys.d');
    mkdirSync(directory);
    assert.ok(problemsOf(jwtYaml(`jwks_file: ${directory}`)).includes(`relay.identity.jwt.jwks_file: "${directory}" is a directory; give the path of the JWKS file`));
  });

  it('refuses a JWKS URL that is not https, carries credentials or is no URL; a CA file only with it, and only of PEM certificates', (t) => {
    const dir = tempDir(t);
    const https = 'expected an absolute https URL without user:password@ (the keys that vouch for end users must not travel in the clear)';
    for (const url of ['http://login.example.com/certs', 'https://user:pass@login.example.com/certs', 'login.example.com/certs', 'ftp://login.example.com/certs', 'https://']) {
      assert.ok(problemsOf(jwtYaml(`jwks_url: "${url}"`)).includes(`relay.identity.jwt.jwks_url: ${https}`), url);
    }
    const secret = writeFile(dir, 's', 'x'.repeat(32));
    assert.ok(problemsOf(jwtYaml(`secret_file: ${secret}\njwks_ca_file: ${TEST_CA_FILE}`)).includes('relay.identity.jwt.jwks_ca_file: applies only with jwks_url'));
    const notPem = writeFile(dir, 'ca.txt', 'not a certificate');
    assert.ok(problemsOf(jwtYaml(`${URL_SOURCE}\njwks_ca_file: ${notPem}`)).includes(`relay.identity.jwt.jwks_ca_file: "${notPem}" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`));
    assert.doesNotThrow(() => loadConfig({ text: jwtYaml(`${URL_SOURCE}\njwks_ca_file: ${TEST_CA_FILE}`), env: {} }));
  });

  it('refuses a bad header, tolerance, audience or claim name, and unknown keys, all in one error', (t) => {
    const problems = problemsOf(
      jwtYaml(`${URL_SOURCE}\nheader: "x id"\nclock_tolerance: 6m\naudience: []\nuser_claim: ""\nroles_claim: ${'r'.repeat(257)}\ngroups_claim: 7\nisuer: x`),
    );
    for (const expected of [
      'relay.identity.jwt.header: expected an HTTP header name such as authorization',
      'relay.identity.jwt.clock_tolerance: must be at most 5m',
      'relay.identity.jwt.audience: list at least one audience',
      'relay.identity.jwt.user_claim: must not be empty',
      'relay.identity.jwt.roles_claim: must be at most 256 characters',
      'relay.identity.jwt.isuer: unknown key "isuer" (did you mean "issuer"?)',
    ]) {
      assert.ok(problems.includes(expected), `${expected} not in:\n  ${problems.join('\n  ')}`);
    }
    assert.ok(problems.some((p) => p.startsWith('relay.identity.jwt.groups_claim: ')), problems.join('\n'));
    assert.ok(problemsOf(jwtYaml(`${URL_SOURCE}\nheader: X-Svc-User`)).includes("relay.identity.jwt.header: x-svc- headers are svc-sidecar's own: the relay removes them before anything reads them"));
    assert.ok(problemsOf(jwtYaml(`${URL_SOURCE}\nclock_tolerance: soon`)).some((p) => p.startsWith('relay.identity.jwt.clock_tolerance: ')));
    assert.ok(problemsOf(`${RELAY}    jwt: { ${URL_SOURCE} }\n    oidc: {}\n`).some((p) => p.startsWith('relay.identity.oidc: unknown key')));
    // The largest tolerance, exactly.
    assert.equal(loadConfig({ text: jwtYaml(`${URL_SOURCE}\nclock_tolerance: 5m`), env: {} }).relay?.identity?.jwt.clock_tolerance, 300_000);
    // A file given by a symlink is read through it.
    const dir = tempDir(t);
    const target = writeFile(dir, 'real.secret', 'z'.repeat(40));
    symlinkSync(target, join(dir, 'link.secret'));
    assert.doesNotThrow(() => loadConfig({ text: jwtYaml(`secret_file: ${join(dir, 'link.secret')}`), env: {} }));
  });

  it('leaves an empty ${VAR:-} setting unset, so a file can leave the key source to the environment', (t) => {
    const secret = writeFile(tempDir(t), 's', 'q'.repeat(32));
    const text = jwtYaml('secret_file: "${JWT_SECRET_FILE:-}"\njwks_url: "${JWKS_URL:-}"');
    assert.equal(loadConfig({ text, env: { JWT_SECRET_FILE: secret } }).relay?.identity?.jwt.secret_file, secret);
    assert.equal(loadConfig({ text, env: { JWKS_URL: 'https://login.example.com/certs' } }).relay?.identity?.jwt.jwks_url, 'https://login.example.com/certs');
  });
});

describe('docs/reveal.md, "End users behind the relay"', () => {
  it('has examples that load (a secret file put where the example says)', (t) => {
    const doc = readFileSync(new URL('../../docs/reveal.md', import.meta.url), 'utf8');
    const start = doc.indexOf('## End users behind the relay');
    assert.notEqual(start, -1);
    const next = doc.indexOf('\n## ', start + 1);
    const section = doc.slice(start, next === -1 ? undefined : next);
    const blocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
    assert.ok(blocks.length >= 4, `${blocks.length} examples`);
    const secret = writeFile(tempDir(t), 'jwt.secret', 's'.repeat(40));
    for (const block of blocks) {
      // The configuration a route names exists in the store the example runs against.
      const config = loadConfig({ text: `${block.replace('/etc/svc/jwt.secret', secret)}\nseed: { configurations: [{ name: patients }] }\n`, env: {} });
      assert.ok(config.relay?.identity?.jwt !== undefined, block);
    }
  });
});
