import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runCli as cli, type CliRun } from '../support/cli.ts';
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCertificateAuthority, readCertificateAuthority } from '../../src/crypto/certificates.ts';
import { CA_COMMON_NAME } from '../../src/dataplane/egress-ca.ts';


const runCli = (args: string[]): Promise<CliRun> => cli(args, { timeout: 30_000 });

test('svc-sidecar egress-ca creates the CA once (0700 directory, 0600 key), prints it, and --rotate replaces it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-egress-ca-cli-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const certFile = join(dir, 'ca', 'egress-ca.pem');
  const keyFile = join(dir, 'ca', 'egress-ca.key');
  const config = join(dir, 'svc.yaml');
  writeFileSync(
    config,
    `store: { path: ${join(dir, 'svc.db')} }\nkeys: { master_key_file: ${join(dir, 'master.key')} }\n` +
      `egress_proxy:\n  listen: 127.0.0.1:0\n  ca: { cert_file: ${certFile}, key_file: ${keyFile} }\n`,
  );

  const first = await runCli(['egress-ca', '--config', config]);
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stdout, /^-----BEGIN CERTIFICATE-----\n[\s\S]+-----END CERTIFICATE-----\n$/);
  assert.match(first.stderr, /Created the egress proxy CA/);
  assert.equal(first.stdout, readFileSync(certFile, 'utf8'));
  assert.equal(statSync(join(dir, 'ca')).mode & 0o777, 0o700);
  assert.equal(statSync(keyFile).mode & 0o777, 0o600);
  assert.ok(new X509Certificate(first.stdout).ca);

  const again = await runCli(['egress-ca', '--config', config]);
  assert.equal(again.code, 0);
  assert.equal(again.stdout, first.stdout, 'the CA is kept');
  assert.equal(again.stderr, '');

  const rotated = await runCli(['egress-ca', '--config', config, '--rotate']);
  assert.equal(rotated.code, 0, rotated.stderr);
  assert.notEqual(rotated.stdout, first.stdout);
  assert.equal(rotated.stdout, readFileSync(certFile, 'utf8'));
  assert.equal(statSync(keyFile).mode & 0o777, 0o600);
  assert.doesNotThrow(() => readCertificateAuthority(readFileSync(certFile, 'utf8'), readFileSync(keyFile, 'utf8')), 'the new key belongs to the new certificate');
  assert.match(rotated.stderr, /restart the service/);
});

test('svc-sidecar egress-ca refuses a configuration without egress_proxy, and one CA file without the other', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-egress-ca-cli-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const none = join(dir, 'none.yaml');
  writeFileSync(none, `store: { path: ${join(dir, 'svc.db')} }\n`);
  const refused = await runCli(['egress-ca', '--config', none]);
  assert.equal(refused.code, 1);
  assert.equal(refused.stdout, '');
  assert.match(refused.stderr, /no egress_proxy section/);

  const half = join(dir, 'half.yaml');
  writeFileSync(join(dir, 'ca.pem'), 'not used');
  writeFileSync(half, `store: { path: ${join(dir, 'svc.db')} }\negress_proxy:\n  listen: 127.0.0.1:0\n  ca: { cert_file: ${join(dir, 'ca.pem')}, key_file: ${join(dir, 'ca.key')} }\n`);
  const missing = await runCli(['egress-ca', '--config', half]);
  assert.equal(missing.code, 1);
  assert.equal(missing.stdout, '');
  assert.match(missing.stderr, /The egress proxy CA \(.*\) cannot be used: .*ca\.key is missing while the other file exists/);
  assert.equal(readFileSync(join(dir, 'ca.pem'), 'utf8'), 'not used', 'nothing is overwritten');
});

test('svc-sidecar egress-ca after a rotation that stopped part way: finishes it, or keeps the old CA, or refuses a key that belongs to neither', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-egress-ca-cli-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const certFile = join(dir, 'ca', 'egress-ca.pem');
  const keyFile = join(dir, 'ca', 'egress-ca.key');
  const config = join(dir, 'svc.yaml');
  writeFileSync(config, `store: { path: ${join(dir, 'svc.db')} }\nkeys: { master_key_file: ${join(dir, 'master.key')} }\negress_proxy:\n  listen: 127.0.0.1:0\n  ca: { cert_file: ${certFile}, key_file: ${keyFile} }\n`);
  const created = await runCli(['egress-ca', '--config', config]);
  assert.equal(created.code, 0, created.stderr);
  const old = { cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
  const onDisk = () => ({ cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') });
  const leftovers = () => [`${certFile}.new`, `${keyFile}.new`].filter((file) => existsSync(file));
  const put = (files: { cert: string; key: string; certNew?: string; keyNew?: string }) => {
    writeFileSync(certFile, files.cert);
    writeFileSync(keyFile, files.key, { mode: 0o600 });
    for (const [file, text] of [[`${certFile}.new`, files.certNew], [`${keyFile}.new`, files.keyNew]] as const) {
      rmSync(file, { force: true });
      if (text !== undefined) writeFileSync(file, text, { mode: 0o600 });
    }
  };

  // Stopped after the certificate was renamed into place, before the key: finished.
  const next = await createCertificateAuthority(CA_COMMON_NAME);
  put({ cert: next.cert, key: old.key, keyNew: next.key });
  const finished = await runCli(['egress-ca', '--config', config]);
  assert.equal(finished.code, 0, finished.stderr);
  assert.match(finished.stderr, /An interrupted rotation of the egress proxy CA is finished/);
  assert.equal(finished.stdout, next.cert);
  assert.deepEqual(onDisk(), { cert: next.cert, key: next.key });
  assert.deepEqual(leftovers(), []);
  assert.equal(statSync(keyFile).mode & 0o777, 0o600);

  // Stopped after the key was renamed, before the certificate (the order of earlier versions): finished too.
  const other = await createCertificateAuthority(CA_COMMON_NAME);
  put({ cert: next.cert, key: other.key, certNew: other.cert });
  const reverse = await runCli(['egress-ca', '--config', config]);
  assert.equal(reverse.code, 0, reverse.stderr);
  assert.equal(reverse.stdout, other.cert);
  assert.deepEqual(onDisk(), { cert: other.cert, key: other.key });
  assert.deepEqual(leftovers(), []);

  // Stopped before either rename: the CA in place is kept and the rotation's files removed.
  const unused = await createCertificateAuthority(CA_COMMON_NAME);
  put({ cert: old.cert, key: old.key, certNew: unused.cert, keyNew: unused.key });
  const kept = await runCli(['egress-ca', '--config', config]);
  assert.equal(kept.code, 0, kept.stderr);
  assert.match(kept.stderr, /had replaced nothing: the CA in .* is kept/);
  assert.equal(kept.stdout, old.cert);
  assert.deepEqual(onDisk(), old);
  assert.deepEqual(leftovers(), []);

  // A key that belongs to neither certificate: refused, and nothing is changed.
  put({ cert: old.cert, key: next.key, keyNew: unused.key });
  const refused = await runCli(['egress-ca', '--config', config]);
  assert.equal(refused.code, 1);
  assert.equal(refused.stdout, '');
  assert.match(refused.stderr, /cannot be used: the key does not belong to the certificate \(and .*egress-ca\.key\.new, left by an interrupted rotation, pair with neither file\); restore the pair, or run svc-sidecar egress-ca --rotate/);
  assert.deepEqual(onDisk(), { cert: old.cert, key: next.key });
  assert.deepEqual(leftovers(), [`${keyFile}.new`]);

  // A rotation from there replaces the pair whole.
  const rotated = await runCli(['egress-ca', '--config', config, '--rotate']);
  assert.equal(rotated.code, 0, rotated.stderr);
  assert.doesNotThrow(() => readCertificateAuthority(onDisk().cert, onDisk().key));
  assert.deepEqual(leftovers(), []);
});
