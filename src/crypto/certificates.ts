/**
 * X.509 certificates for the egress proxy (DESIGN §15): an installation CA and the
 * per-host leaf certificates it signs, all ECDSA P-256 with SHA-256.
 *
 * They are written with `@peculiar/x509` and signed through WebCrypto. The library is
 * loaded on first use only (a dynamic import): a process without `egress_proxy` never
 * loads it, so the data plane's memory does not carry it. Reading certificates back
 * (subject, validity, key match) stays node:crypto's `X509Certificate`, which is OpenSSL.
 */
import { createPrivateKey, createPublicKey, webcrypto, X509Certificate, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';

type X509Module = typeof import('@peculiar/x509');
type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

export interface IssuedCertificate {
  /** The certificate, PEM. */
  readonly cert: string;
  /** Its private key, PKCS#8 PEM. */
  readonly key: string;
}

export interface CertificateAuthority {
  readonly cert: X509Certificate;
  readonly certPem: string;
  readonly key: KeyObject;
}

const DAY_MS = 86_400_000;
/** The installation CA lives ten years; rotation (`svc-sidecar egress-ca --rotate`) replaces it sooner. */
export const CA_VALIDITY_DAYS = 3650;
/** Leaves are short-lived and made again on demand (well under the 398 days browsers accept). */
export const LEAF_VALIDITY_DAYS = 30;
/** A certificate is valid from a little before it is made, for clients whose clocks run behind. */
const BACKDATE_MS = 60 * 60 * 1000;

const P256 = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING = { ...P256, hash: 'SHA-256' } as const;
const ORGANIZATION = 'svc-sidecar';

let loading: Promise<X509Module> | undefined;

/** The library, imported once; it signs with Node's own WebCrypto. */
function x509(): Promise<X509Module> {
  loading ??= import('@peculiar/x509').then((module) => {
    module.cryptoProvider.set(webcrypto as unknown as Parameters<X509Module['cryptoProvider']['set']>[1]);
    return module;
  });
  return loading;
}

/** A new CA: a fresh P-256 key and a self-signed certificate that may sign leaves only (pathLen 0). */
export async function createCertificateAuthority(commonName: string, now = new Date()): Promise<IssuedCertificate> {
  const lib = await x509();
  const keys = await newKeyPair();
  const cert = await lib.X509CertificateGenerator.createSelfSigned({
    name: distinguishedName(commonName),
    notBefore: new Date(now.getTime() - BACKDATE_MS),
    notAfter: new Date(now.getTime() + CA_VALIDITY_DAYS * DAY_MS),
    signingAlgorithm: SIGNING,
    keys,
    extensions: [
      new lib.BasicConstraintsExtension(true, 0, true),
      new lib.KeyUsagesExtension(lib.KeyUsageFlags.keyCertSign | lib.KeyUsageFlags.cRLSign, true),
      await lib.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert: certificatePem(cert.rawData), key: await privateKeyPem(keys.privateKey) };
}

/** A leaf for `hosts` (DNS names or IP literals, IPv6 without brackets; the first is the CN), signed by `ca`, for TLS servers. */
export async function issueLeafCertificate(ca: CertificateAuthority, hosts: string | readonly string[], now = new Date()): Promise<IssuedCertificate> {
  const names = typeof hosts === 'string' ? [hosts] : hosts;
  const host = names[0]!;
  const lib = await x509();
  const keys = await newKeyPair();
  const issuer = new lib.X509Certificate(ca.cert.raw);
  const notAfter = Math.min(now.getTime() + LEAF_VALIDITY_DAYS * DAY_MS, new Date(ca.cert.validTo).getTime());
  const cert = await lib.X509CertificateGenerator.create({
    issuer: issuer.subjectName,
    // A CN holds at most 64 characters (RFC 5280 ub-common-name); the SAN holds the name.
    subject: distinguishedName(host.slice(0, 64)),
    notBefore: new Date(now.getTime() - BACKDATE_MS),
    notAfter: new Date(notAfter),
    signingAlgorithm: SIGNING,
    publicKey: keys.publicKey,
    signingKey: await signingKey(ca.key),
    extensions: [
      new lib.BasicConstraintsExtension(false, undefined, true),
      new lib.KeyUsagesExtension(lib.KeyUsageFlags.digitalSignature, true),
      new lib.ExtendedKeyUsageExtension([lib.ExtendedKeyUsage.serverAuth]),
      new lib.SubjectAlternativeNameExtension(names.map(generalName)),
      await lib.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await lib.AuthorityKeyIdentifierExtension.create(issuer.publicKey),
    ],
  });
  return { cert: certificatePem(cert.rawData), key: await privateKeyPem(keys.privateKey) };
}

/**
 * Reads a CA from its PEM files; throws when they do not hold one certificate that may
 * sign others and the P-256 key that goes with it.
 */
export function readCertificateAuthority(certPem: string, keyPem: string): CertificateAuthority {
  const cert = new X509Certificate(certPem);
  const key = createPrivateKey(keyPem);
  if (!cert.ca) throw new Error('the certificate is not a CA certificate (basicConstraints cA is not set)');
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') throw new Error('the key is not an ECDSA P-256 key');
  const fromKey = createPublicKey(key).export({ type: 'spki', format: 'der' });
  const fromCert = cert.publicKey.export({ type: 'spki', format: 'der' });
  if (!fromKey.equals(fromCert)) throw new Error('the key does not belong to the certificate');
  return { cert, certPem, key };
}

function newKeyPair(): Promise<CryptoKeyPair> {
  // Extractable: the private key is written out as PKCS#8.
  return webcrypto.subtle.generateKey(P256, true, ['sign', 'verify']) as Promise<CryptoKeyPair>;
}

const signingKeys = new WeakMap<KeyObject, CryptoKey>();

/** The CA key as a WebCrypto key, made once per key (not extractable: it only signs). */
async function signingKey(key: KeyObject): Promise<CryptoKey> {
  let cryptoKey = signingKeys.get(key);
  if (cryptoKey === undefined) {
    cryptoKey = (await key.toCryptoKey(P256, false, ['sign'])) as CryptoKey;
    signingKeys.set(key, cryptoKey);
  }
  return cryptoKey;
}

async function privateKeyPem(key: CryptoKey): Promise<string> {
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', key);
  return createPrivateKey({ key: Buffer.from(pkcs8), format: 'der', type: 'pkcs8' }).export({ type: 'pkcs8', format: 'pem' }) as string;
}

/** O=svc-sidecar, CN=<name>; built from values, never parsed from a string, so no name needs escaping. */
function distinguishedName(commonName: string): Array<Record<string, string[]>> {
  return [{ O: [ORGANIZATION] }, { CN: [commonName] }];
}

/** A SAN entry: iPAddress for IP literals (IPv6 without brackets), dNSName otherwise. */
function generalName(host: string): { type: 'ip' | 'dns'; value: string } {
  const family = isIP(host);
  if (family === 4) return { type: 'ip', value: host };
  // The URL parser writes IPv6 in hex groups only: the library does not read a dotted tail.
  if (family === 6) return { type: 'ip', value: new URL(`http://[${host}]/`).hostname.slice(1, -1) };
  return { type: 'dns', value: host };
}

/** PEM as node:crypto and OpenSSL write it: 64-column lines, ending with a newline. */
function certificatePem(der: ArrayBuffer): string {
  return new X509Certificate(Buffer.from(der)).toString();
}
