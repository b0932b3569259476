/**
 * The field cryptography of the hand-written references (servers.ts `naive-encrypt` and
 * `naive-decrypt`): each value as JSON text, sealed with AES-256-GCM under one key and a
 * random 96-bit nonce, no key derivation and no associated data, written as
 * `enc:<nonce>:<ciphertext and tag>` in base64url. The bench uses the same functions to
 * prepare the bodies the decrypt reference opens, with the key it hands that process.
 */
import { createCipheriv, createDecipheriv, randomBytes, type KeyObject } from 'node:crypto';

const TAG_BYTES = 16;
/** The environment variable that hands the references their AES-256 key (base64). */
export const NAIVE_KEY_ENV = 'BENCH_NAIVE_KEY';

export function seal(key: KeyObject, value: unknown): string {
  const nonce = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  const sealed = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final(), cipher.getAuthTag()]);
  return `enc:${nonce.toString('base64url')}:${sealed.toString('base64url')}`;
}

/** The value `seal` sealed; throws on anything else (wrong shape, key or tag). */
export function open(key: KeyObject, token: unknown): unknown {
  if (typeof token !== 'string' || !token.startsWith('enc:')) throw new Error('not a sealed value');
  const colon = token.indexOf(':', 4);
  if (colon < 0) throw new Error('not a sealed value');
  const nonce = Buffer.from(token.slice(4, colon), 'base64url');
  const sealed = Buffer.from(token.slice(colon + 1), 'base64url');
  if (nonce.length !== 12 || sealed.length < TAG_BYTES) throw new Error('not a sealed value');
  const decipher = createDecipheriv('aes-256-gcm', key, nonce);
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  const plain = Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - TAG_BYTES)), decipher.final()]);
  return JSON.parse(plain.toString('utf8'));
}

/** Replaces the value at `path` (split at dots) with `change(value)`, if it is there. */
export function replaceAt(doc: unknown, path: readonly string[], change: (value: unknown) => unknown): void {
  let node = doc as Record<string, unknown> | null;
  for (let i = 0; i < path.length - 1 && node !== null && typeof node === 'object'; i++) node = node[path[i]!] as Record<string, unknown> | null;
  const last = path[path.length - 1]!;
  if (node !== null && typeof node === 'object' && last in node) node[last] = change(node[last]);
}
