import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createPrivateKey, X509Certificate as NodeCertificate } from 'node:crypto';
import { promisify } from 'node:util';
import * as x509 from '@peculiar/x509';
import { CA_VALIDITY_DAYS, createCertificateAuthority, issueLeafCertificate, LEAF_VALIDITY_DAYS, readCertificateAuthority } from '../../src/crypto/certificates.ts';
import { LeafCertificates } from '../../src/dataplane/egress-ca.ts';
import { LOADED_BASE, loadedModules } from '../support/loaded-modules.ts';

const run = promisify(execFile);
const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;

function extension<T extends x509.Extension>(cert: x509.X509Certificate, type: new (raw: ArrayBuffer) => T): T {
  const found = cert.getExtension(type);
  assert.ok(found !== null, `the certificate has ${type.name}`);
  return found;
}

test('the CA: self-signed P-256, CA with pathLen 0 (critical), keyCertSign and cRLSign only (critical), a subject key id, ten years from an hour ago', async () => {
  const now = new Date('2026-03-01T12:00:00Z');
  const issued = await createCertificateAuthority('test CA', now);
  assert.match(issued.cert, /^-----BEGIN CERTIFICATE-----\n([A-Za-z0-9+/=]{64}\n)*[A-Za-z0-9+/=]{1,64}\n-----END CERTIFICATE-----\n$/);
  assert.match(issued.key, /^-----BEGIN PRIVATE KEY-----\n[\s\S]+-----END PRIVATE KEY-----\n$/, 'PKCS#8 PEM');
  const ca = readCertificateAuthority(issued.cert, issued.key);
  assert.equal(ca.key.asymmetricKeyDetails?.namedCurve, 'prime256v1');
  assert.ok(ca.cert.checkIssued(ca.cert) && ca.cert.verify(ca.cert.publicKey), 'self-signed');
  assert.equal(ca.cert.subject, 'O=svc-sidecar\nCN=test CA');
  assert.equal(new Date(ca.cert.validFrom).getTime(), now.getTime() - HOUR_MS);
  assert.equal(new Date(ca.cert.validTo).getTime(), now.getTime() + CA_VALIDITY_DAYS * DAY_MS);

  const parsed = new x509.X509Certificate(issued.cert);
  assert.deepEqual(parsed.signatureAlgorithm, { name: 'ECDSA', hash: { name: 'SHA-256' } });
  const basic = extension(parsed, x509.BasicConstraintsExtension);
  assert.deepEqual([basic.critical, basic.ca, basic.pathLength], [true, true, 0]);
  const usage = extension(parsed, x509.KeyUsagesExtension);
  assert.deepEqual([usage.critical, usage.usages], [true, x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign]);
  assert.match(extension(parsed, x509.SubjectKeyIdentifierExtension).keyId, /^[0-9a-f]{40}$/);
  assert.equal(parsed.getExtension(x509.ExtendedKeyUsageExtension), null);
});

test('leaves: SAN dNSName or iPAddress, CA:false and digitalSignature (critical), serverAuth, the CA key id, thirty days from an hour ago, random serials', async () => {
  const now = new Date('2026-03-01T12:00:00Z');
  const issued = await createCertificateAuthority('test CA', now);
  const ca = readCertificateAuthority(issued.cert, issued.key);
  const caKeyId = extension(new x509.X509Certificate(issued.cert), x509.SubjectKeyIdentifierExtension).keyId;
  const serials = new Set<string>();
  for (const [host, san] of [
    ['api.stripe.com', 'DNS:api.stripe.com'],
    ['127.0.0.1', 'IP Address:127.0.0.1'],
    ['2001:db8::1', 'IP Address:2001:DB8:0:0:0:0:0:1'],
    ['2001:db8:0:0::2', 'IP Address:2001:DB8:0:0:0:0:0:2'],
    ['::ffff:10.1.2.3', 'IP Address:0:0:0:0:0:FFFF:A01:203'],
  ] as const) {
    const leaf = await issueLeafCertificate(ca, host, now);
    const cert = new NodeCertificate(leaf.cert);
    assert.equal(cert.subjectAltName, san, host);
    assert.ok(cert.checkIssued(ca.cert) && cert.verify(ca.cert.publicKey), `${host}: signed by the CA`);
    assert.equal(cert.issuer, ca.cert.subject);
    assert.ok(!cert.ca);
    assert.equal(cert.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1');
    assert.equal(createPrivateKey(leaf.key).asymmetricKeyDetails?.namedCurve, 'prime256v1');
    assert.equal(new Date(cert.validFrom).getTime(), now.getTime() - HOUR_MS);
    assert.equal(new Date(cert.validTo).getTime(), now.getTime() + LEAF_VALIDITY_DAYS * DAY_MS);
    assert.match(cert.serialNumber, /^[0-9A-F]{30,34}$/);
    serials.add(cert.serialNumber);

    const parsed = new x509.X509Certificate(leaf.cert);
    const basic = extension(parsed, x509.BasicConstraintsExtension);
    assert.deepEqual([basic.critical, basic.ca], [true, false]);
    const usage = extension(parsed, x509.KeyUsagesExtension);
    assert.deepEqual([usage.critical, usage.usages], [true, x509.KeyUsageFlags.digitalSignature]);
    assert.deepEqual([...extension(parsed, x509.ExtendedKeyUsageExtension).usages], [x509.ExtendedKeyUsage.serverAuth]);
    assert.equal(extension(parsed, x509.AuthorityKeyIdentifierExtension).keyId, caKeyId);
    assert.match(extension(parsed, x509.SubjectKeyIdentifierExtension).keyId, /^[0-9a-f]{40}$/);
  }
  assert.equal(serials.size, 5, 'every leaf has its own serial');
});

test('a leaf never outlives its CA', async () => {
  const made = new Date('2026-03-01T12:00:00Z');
  const issued = await createCertificateAuthority('old CA', made);
  const ca = readCertificateAuthority(issued.cert, issued.key);
  const late = new Date(made.getTime() + (CA_VALIDITY_DAYS - 3) * DAY_MS);
  const leaf = new NodeCertificate((await issueLeafCertificate(ca, 'api.example.com', late)).cert);
  assert.equal(leaf.validTo, ca.cert.validTo);
});

test('OpenSSL verifies a leaf against the CA for TLS server use', async (t) => {
  const issued = await createCertificateAuthority('test CA');
  const leaf = await issueLeafCertificate(readCertificateAuthority(issued.cert, issued.key), 'api.stripe.com');
  const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'svc-certs-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'ca.pem'), issued.cert);
  writeFileSync(join(dir, 'leaf.pem'), leaf.cert);
  let result;
  try {
    result = await run('openssl', ['verify', '-x509_strict', '-purpose', 'sslserver', '-verify_hostname', 'api.stripe.com', '-CAfile', join(dir, 'ca.pem'), join(dir, 'leaf.pem')]);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      t.skip('openssl is not installed');
      return;
    }
    throw err;
  }
  assert.match(result.stdout, /leaf\.pem: OK/);
});

test('readCertificateAuthority refuses a key of another CA, and a leaf in place of a CA', async () => {
  const one = await createCertificateAuthority('one');
  const two = await createCertificateAuthority('two');
  assert.throws(() => readCertificateAuthority(one.cert, two.key), /the key does not belong to the certificate/);
  const leaf = await issueLeafCertificate(readCertificateAuthority(one.cert, one.key), 'api.example.com');
  assert.throws(() => readCertificateAuthority(leaf.cert, leaf.key), /not a CA certificate/);
});

test('concurrent requests for one host share one leaf in the making; another host gets its own', async () => {
  const issued = await createCertificateAuthority('test CA');
  const leaves = new LeafCertificates(readCertificateAuthority(issued.cert, issued.key));
  const same = await Promise.all(Array.from({ length: 8 }, () => leaves.context('api.stripe.com')));
  assert.equal(new Set(same).size, 1, 'one TLS context for all eight');
  assert.equal(await leaves.context('api.stripe.com'), same[0], 'and it is kept');
  assert.notEqual(await leaves.context('api.example.com'), same[0]);
});

test('@peculiar/x509 is loaded only by a service with an egress proxy', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'svc-certs-lazy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const withProxy = `${LOADED_BASE}egress_proxy: { listen: 127.0.0.1:0, ca: { cert_file: ${JSON.stringify(join(dir, 'ca.pem'))}, key_file: ${JSON.stringify(join(dir, 'ca.key'))} } }\n`;
  const without = await loadedModules(LOADED_BASE);
  const withIt = await loadedModules(withProxy);
  assert.equal(without.x509, false, 'no egress_proxy: not loaded');
  assert.equal(withIt.x509, true, 'egress_proxy: loaded to make the CA');
});
