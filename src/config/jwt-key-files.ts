/**
 * The key material files `relay.identity.jwt` names (docs/reveal.md "End users behind the
 * relay"): the HS256 shared secret, a JWKS of public keys, and the CA bundle trusted for
 * the JWKS URL. Read here, once for the checks that run with the rest of the file (so a
 * missing, empty or wrong file is reported at start, naming its path) and once more where
 * the keys are built. No message ever holds what a file contains.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { createPublicKey, type JsonWebKey } from 'node:crypto';

/** RFC 7518 §3.2: an HS256 key of at least the hash's size. */
export const MIN_SECRET_BYTES = 32;
/** A shared secret is a line of text; a file much larger than that is the wrong file. */
export const MAX_SECRET_BYTES = 4096;
/** Larger than any provider's published key set; the bound on what is read from a file or from the JWKS URL. */
export const MAX_JWKS_BYTES = 1024 * 1024;
const MAX_CA_BYTES = 1024 * 1024;
/** What jose (and RFC 7518 §3.3's advice) accepts for RS256. */
const MIN_RSA_BITS = 2048;

export type Read<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly problem: string };

/** The algorithms a JWKS may vouch for: the asymmetric ones, so no public key can serve as an HMAC secret. */
export const JWKS_ALGORITHMS = ['RS256', 'ES256'] as const;

/** A key set as read from a JSON file: `{ keys: [...] }` with at least one RS256 or ES256 public key. */
export interface JwksDocument {
  readonly keys: readonly JsonWebKey[];
}

/**
 * The shared secret: the file's bytes without trailing line breaks (a secret written with
 * `echo` or an editor ends with one; the application signs with the text before it).
 */
export function readSecretFile(path: string): Read<Buffer> {
  const read = readBounded(path, MAX_SECRET_BYTES, 'the file holding the shared secret', 'a shared secret');
  if (!read.ok) return read;
  let end = read.value.length;
  while (end > 0 && (read.value[end - 1] === 0x0a || read.value[end - 1] === 0x0d)) end--;
  if (end === 0) return fail(`"${path}" is empty`);
  if (end < MIN_SECRET_BYTES) return fail(`"${path}" holds ${end} bytes; an HS256 secret needs at least ${MIN_SECRET_BYTES} (RFC 7518 §3.2)`);
  return { ok: true, value: read.value.subarray(0, end) };
}

/** A JWKS file: JSON, public keys only, at least one of them usable for RS256 or ES256. */
export function readJwksFile(path: string): Read<JwksDocument> {
  const read = readBounded(path, MAX_JWKS_BYTES, 'the JWKS file', 'a JWKS');
  if (!read.ok) return read;
  let json: unknown;
  try {
    json = JSON.parse(read.value.toString('utf8'));
  } catch {
    return fail(`"${path}" is not valid JSON`);
  }
  const problem = jwksProblem(json);
  return problem === undefined ? { ok: true, value: json as JwksDocument } : fail(`"${path}" ${problem}`);
}

/** A PEM bundle of the CAs the JWKS URL's certificate must chain to. */
export function readCaFile(path: string): Read<string> {
  const read = readBounded(path, MAX_CA_BYTES, 'the PEM file of CA certificates', 'a CA bundle');
  if (!read.ok) return read;
  const text = read.value.toString('utf8');
  if (!text.includes('-----BEGIN CERTIFICATE-----')) return fail(`"${path}" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  return { ok: true, value: text };
}

/**
 * What is wrong with a key set, as the end of a sentence about its file; undefined when
 * it is usable. Refused outright: symmetric keys (`oct`: an HMAC key in a set of public
 * keys is how algorithm confusion starts) and private keys (`d`: the relay only verifies,
 * and a private key has no business on it). Keys for other uses or algorithms (`use: enc`,
 * `RS384`, P-384) are left alone: providers publish them beside their signing keys, and
 * they never verify anything here.
 */
export function jwksProblem(json: unknown): string | undefined {
  if (typeof json !== 'object' || json === null || !Array.isArray((json as { keys?: unknown }).keys)) return 'is not a JWKS: expected {"keys": [...]}';
  const keys = (json as { keys: unknown[] }).keys;
  let usable = 0;
  for (const [index, key] of keys.entries()) {
    if (typeof key !== 'object' || key === null || Array.isArray(key)) return `key ${index} is not a JSON object`;
    const jwk = key as Record<string, unknown>;
    if (jwk['kty'] === 'oct') return `key ${index} is a symmetric key (kty "oct"): a JWKS for the relay holds public keys only (RS256, ES256)`;
    if ('d' in jwk || 'p' in jwk || 'k' in jwk) return `key ${index} holds private key material; give the public keys only`;
    if (!signsWith(jwk)) continue;
    const problem = publicKeyProblem(jwk);
    if (problem !== undefined) return `key ${index} ${problem}`;
    usable++;
  }
  return usable === 0 ? `holds no RS256 or ES256 public key (RSA of ${MIN_RSA_BITS} bits or more, or EC P-256) for signatures` : undefined;
}

/** Whether jose would pick this key to verify an RS256 or ES256 signature. */
function signsWith(jwk: Record<string, unknown>): boolean {
  if (jwk['use'] !== undefined && jwk['use'] !== 'sig') return false;
  const ops = jwk['key_ops'];
  if (ops !== undefined && !(Array.isArray(ops) && ops.includes('verify'))) return false;
  const alg = jwk['alg'];
  if (jwk['kty'] === 'RSA') return alg === undefined || alg === 'RS256';
  if (jwk['kty'] === 'EC') return jwk['crv'] === 'P-256' && (alg === undefined || alg === 'ES256');
  return false;
}

function publicKeyProblem(jwk: Record<string, unknown>): string | undefined {
  let key;
  try {
    key = createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' });
  } catch {
    return `is not a valid ${String(jwk['kty'])} public key`;
  }
  const bits = key.asymmetricKeyDetails?.modulusLength;
  if (key.asymmetricKeyType === 'rsa' && (bits === undefined || bits < MIN_RSA_BITS)) return `is an RSA key of ${bits ?? '?'} bits; RS256 needs ${MIN_RSA_BITS} or more`;
  return undefined;
}

/**
 * The whole file, refused when it is missing, not a regular file, or larger than `max`
 * (checked on the open file, so what is read is what was checked).
 */
function readBounded(path: string, max: number, what: string, kind: string): Read<Buffer> {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return fail(`"${path}" does not exist; give the path of ${what}`);
    if (code === 'ENOTDIR') return fail(`"${path}" cannot be a file: a part of the path before its name is a file, not a directory`);
    return fail(`"${path}" cannot be read (${code ?? 'error'})`);
  }
  try {
    const stat = fstatSync(fd);
    if (stat.isDirectory()) return fail(`"${path}" is a directory; give the path of ${what}`);
    if (!stat.isFile()) return fail(`"${path}" is not a regular file; give the path of ${what}`);
    if (stat.size > max) return fail(`"${path}" holds more than ${max} bytes: too large for ${kind}`);
    const buffer = Buffer.alloc(stat.size);
    let filled = 0;
    while (filled < buffer.length) {
      const n = readSync(fd, buffer, filled, buffer.length - filled, filled);
      if (n === 0) break;
      filled += n;
    }
    return { ok: true, value: buffer.subarray(0, filled) };
  } catch (error) {
    return fail(`"${path}" cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  } finally {
    closeSync(fd);
  }
}

function fail(problem: string): { ok: false; problem: string } {
  return { ok: false, problem };
}
