/**
 * X.509 certificates for the egress proxy (DESIGN §15): an installation CA and the
 * per-host leaf certificates it signs, all ECDSA P-256 with SHA-256.
 *
 * Only two fixed certificate shapes are ever written, so they are encoded here in DER
 * directly (RFC 5280 §4.1) and signed with node:crypto, synchronously: no ASN.1 library,
 * no WebCrypto promise per leaf. Nothing here parses certificates; reading them back
 * (subject, validity, key match) is node:crypto's `X509Certificate`, which is OpenSSL.
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, X509Certificate, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';

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
/** A leaf is valid from a little before it is made, for clients whose clocks run behind. */
const BACKDATE_MS = 60 * 60 * 1000;

/** A new CA: a fresh P-256 key and a self-signed certificate that may sign leaves only (pathLen 0). */
export function createCertificateAuthority(commonName: string, now = new Date()): IssuedCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  const name = distinguishedName(commonName);
  const keyId = subjectKeyId(spki);
  const tbs = tbsCertificate({
    serial: serialNumber(),
    issuer: name,
    subject: name,
    notBefore: new Date(now.getTime() - BACKDATE_MS),
    notAfter: new Date(now.getTime() + CA_VALIDITY_DAYS * DAY_MS),
    spki,
    extensions: [
      extension(OID.basicConstraints, true, seq(bool(true), int(Buffer.from([0])))),
      extension(OID.keyUsage, true, keyUsage(KEY_CERT_SIGN | CRL_SIGN)),
      extension(OID.subjectKeyIdentifier, false, octets(keyId)),
    ],
  });
  return { cert: toPem(signed(tbs, privateKey), 'CERTIFICATE'), key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string };
}

/** A leaf for `host` (a DNS name or an IP literal), signed by `ca`, for TLS servers. */
export function issueLeafCertificate(ca: CertificateAuthority, host: string, now = new Date()): IssuedCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  const caSpki = ca.cert.publicKey.export({ type: 'spki', format: 'der' });
  const notAfter = Math.min(now.getTime() + LEAF_VALIDITY_DAYS * DAY_MS, new Date(ca.cert.validTo).getTime());
  const tbs = tbsCertificate({
    serial: serialNumber(),
    issuer: Buffer.from(ca.cert.raw.subarray(...subjectRange(ca.cert.raw))),
    subject: distinguishedName(host.length <= 64 ? host : host.slice(0, 64)),
    notBefore: new Date(now.getTime() - BACKDATE_MS),
    notAfter: new Date(notAfter),
    spki,
    extensions: [
      extension(OID.basicConstraints, true, seq()),
      extension(OID.keyUsage, true, keyUsage(DIGITAL_SIGNATURE)),
      extension(OID.extKeyUsage, false, seq(oid(OID.serverAuth))),
      extension(OID.subjectAltName, false, seq(generalName(host))),
      extension(OID.subjectKeyIdentifier, false, octets(subjectKeyId(spki))),
      extension(OID.authorityKeyIdentifier, false, seq(tagged(0x80, subjectKeyId(caSpki)))),
    ],
  });
  return { cert: toPem(signed(tbs, ca.key), 'CERTIFICATE'), key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string };
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

// ---------------------------------------------------------------------------------------
// The certificate structure (RFC 5280 §4.1)

interface TbsFields {
  readonly serial: Buffer;
  readonly issuer: Buffer;
  readonly subject: Buffer;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly spki: Buffer;
  readonly extensions: readonly Buffer[];
}

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  organization: '2.5.4.10',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectAltName: '2.5.29.17',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
  serverAuth: '1.3.6.1.5.5.7.3.1',
} as const;

/** KeyUsage bits, numbered from the most significant bit of the first byte (RFC 5280 §4.2.1.3). */
const DIGITAL_SIGNATURE = 1 << 0;
const KEY_CERT_SIGN = 1 << 5;
const CRL_SIGN = 1 << 6;

const SIGNATURE_ALGORITHM = seq(oid(OID.ecdsaWithSha256));

function tbsCertificate(f: TbsFields): Buffer {
  return seq(
    tagged(0xa0, int(Buffer.from([2]))), // version v3
    int(f.serial),
    SIGNATURE_ALGORITHM,
    f.issuer,
    seq(time(f.notBefore), time(f.notAfter)),
    f.subject,
    f.spki,
    tagged(0xa3, seq(...f.extensions)),
  );
}

/** Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }; ECDSA signatures are DER already. */
function signed(tbs: Buffer, key: KeyObject): Buffer {
  return seq(tbs, SIGNATURE_ALGORITHM, bitString(sign('sha256', tbs, key)));
}

function distinguishedName(commonName: string): Buffer {
  return seq(set(seq(oid(OID.organization), utf8('svc-sidecar'))), set(seq(oid(OID.commonName), utf8(commonName))));
}

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return critical ? seq(oid(id), bool(true), octets(value)) : seq(oid(id), octets(value));
}

function keyUsage(bits: number): Buffer {
  // Bit n of the usage is bit (7 - n) of the byte; trailing zero bits are not encoded (DER).
  let byte = 0;
  for (let n = 0; n < 8; n++) if ((bits & (1 << n)) !== 0) byte |= 0x80 >> n;
  let unused = 0;
  while (unused < 7 && (byte & (1 << unused)) === 0) unused++;
  return tlv(0x03, Buffer.from([unused, byte]));
}

/** A SAN entry: iPAddress [7] for IP literals, dNSName [2] otherwise. */
function generalName(host: string): Buffer {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const family = isIP(bare);
  if (family === 4) return tlv(0x87, Buffer.from(bare.split('.').map(Number)));
  if (family === 6) return tlv(0x87, ipv6Bytes(bare));
  return tlv(0x82, Buffer.from(bare, 'ascii'));
}

function ipv6Bytes(address: string): Buffer {
  // Node's URL parser writes the canonical compressed form; expand it to eight groups.
  const canonical = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  const [head, tail] = canonical.includes('::') ? canonical.split('::') : [canonical, undefined];
  const left = head === '' || head === undefined ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const out = Buffer.alloc(16);
  groups.forEach((group, i) => out.writeUInt16BE(parseInt(group, 16), i * 2));
  return out;
}

/** RFC 5280 §4.2.1.2 method 1: the SHA-1 of the subjectPublicKey bits. */
function subjectKeyId(spki: Buffer): Buffer {
  const key = createPublicKey({ key: spki, format: 'der', type: 'spki' }).export({ format: 'jwk' });
  const point = Buffer.concat([Buffer.from([4]), Buffer.from(key.x!, 'base64url'), Buffer.from(key.y!, 'base64url')]);
  return sha1(point);
}

/** Only an identifier, never a security decision (RFC 5280 §4.2.1.2). */
function sha1(data: Buffer): Buffer {
  return createHash('sha1').update(data).digest();
}

/** 16 random bytes, positive (RFC 5280 §4.1.2.2: at most 20 octets, non-negative). */
function serialNumber(): Buffer {
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f;
  if (bytes[0] === 0) bytes[0] = 1;
  return bytes;
}

/** The byte range of the subject Name inside a certificate's DER (the issuer of what it signs). */
function subjectRange(der: Buffer): [number, number] {
  // Certificate SEQUENCE → tbsCertificate SEQUENCE → [0] version, serial, signature, issuer, validity, subject.
  let offset = headerLength(der, 0);
  offset += headerLength(der, offset); // into tbsCertificate
  for (let field = 0; field < 5; field++) offset = next(der, offset);
  return [offset, next(der, offset)];
}

function headerLength(der: Buffer, offset: number): number {
  const first = der[offset + 1]!;
  return first < 0x80 ? 2 : 2 + (first & 0x7f);
}

function next(der: Buffer, offset: number): number {
  const first = der[offset + 1]!;
  if (first < 0x80) return offset + 2 + first;
  const count = first & 0x7f;
  let length = 0;
  for (let i = 0; i < count; i++) length = length * 256 + der[offset + 2 + i]!;
  return offset + 2 + count + length;
}

function toPem(der: Buffer, label: string): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

// ---------------------------------------------------------------------------------------
// DER (X.690): the few types a certificate needs

function tlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  let header: Buffer;
  if (n < 0x80) header = Buffer.from([tag, n]);
  else if (n < 0x100) header = Buffer.from([tag, 0x81, n]);
  else if (n < 0x10000) header = Buffer.from([tag, 0x82, n >> 8, n & 0xff]);
  else header = Buffer.from([tag, 0x83, n >> 16, (n >> 8) & 0xff, n & 0xff]);
  return Buffer.concat([header, content]);
}

function seq(...items: Buffer[]): Buffer {
  return tlv(0x30, Buffer.concat(items));
}

function set(...items: Buffer[]): Buffer {
  return tlv(0x31, Buffer.concat(items));
}

function tagged(tag: number, content: Buffer): Buffer {
  return tlv(tag, content);
}

function bool(value: boolean): Buffer {
  return tlv(0x01, Buffer.from([value ? 0xff : 0]));
}

/** A non-negative INTEGER from big-endian bytes, minimal, with a 0 byte where the top bit is set. */
function int(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0 && (bytes[start + 1]! & 0x80) === 0) start++;
  const body = bytes.subarray(start);
  return tlv(0x02, (body[0]! & 0x80) !== 0 ? Buffer.concat([Buffer.from([0]), body]) : body);
}

function octets(content: Buffer): Buffer {
  return tlv(0x04, content);
}

function bitString(content: Buffer): Buffer {
  return tlv(0x03, Buffer.concat([Buffer.from([0]), content]));
}

function utf8(text: string): Buffer {
  return tlv(0x0c, Buffer.from(text, 'utf8'));
}

function oid(dotted: string): Buffer {
  const parts = dotted.split('.').map(Number);
  const bytes: number[] = [parts[0]! * 40 + parts[1]!];
  for (const part of parts.slice(2)) {
    const chunk: number[] = [part & 0x7f];
    for (let rest = Math.floor(part / 128); rest > 0; rest = Math.floor(rest / 128)) chunk.unshift((rest & 0x7f) | 0x80);
    bytes.push(...chunk);
  }
  return tlv(0x06, Buffer.from(bytes));
}

/** UTCTime through 2049, GeneralizedTime after (RFC 5280 §4.1.2.5). */
function time(date: Date): Buffer {
  const iso = date.toISOString();
  const digits = `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}${iso.slice(11, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}Z`;
  return date.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(digits.slice(2), 'ascii')) : tlv(0x18, Buffer.from(digits, 'ascii'));
}
