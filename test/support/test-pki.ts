/**
 * A throwaway PKI for tests that need real TLS (a JWKS over HTTPS, a vendor behind the
 * egress proxy): a CA and a certificate it issues for `localhost` and `127.0.0.1`, made
 * when a test process first imports this module and written to a temporary directory
 * removed when the process exits. Nothing but the tests that are handed the CA file trusts
 * it, and no key is ever kept in the repository.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCertificateAuthority, issueLeafCertificate, readCertificateAuthority } from '../../src/crypto/certificates.ts';

const dir = mkdtempSync(join(tmpdir(), 'svc-test-pki-'));
process.once('exit', () => rmSync(dir, { recursive: true, force: true }));

const ca = await createCertificateAuthority('svc-sidecar test CA');
const server = await issueLeafCertificate(readCertificateAuthority(ca.cert, ca.key), ['localhost', '127.0.0.1']);

/** The test CA's certificate (PEM), as a file to give as `jwks_ca_file` or `trust_file`. */
export const TEST_CA_FILE = join(dir, 'ca.pem');
/** A certificate for `localhost` and `127.0.0.1`, signed by the test CA, and its key (PEM). */
export const SERVER_CERT = server.cert;
export const SERVER_KEY = server.key;

writeFileSync(TEST_CA_FILE, ca.cert);
