/**
 * A configuration's keyring: its 16-byte id (bound into every token's AAD) and its
 * numbered 32-byte data keys. Everything expensive about a key version — the XAES key
 * schedule and the deterministic-nonce HMAC key — is built once here, when the
 * configuration loads, never per request (STYLE 5).
 */

import { createSecretKey, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';
import { XaesKey } from './xaes.ts';

export const KEYRING_ID_SIZE = 16;
export const DATA_KEY_SIZE = 32;
/** Versions are written in decimal into every token; the bound keeps parsing cheap and exact. */
export const MAX_KEY_VERSION = 2 ** 31 - 1;

const NONCE_KEY_INFO = 'svc-sidecar deterministic nonce v1';

/**
 * One version: its 32-byte key; or `material` a previous keyring built from the same key
 * (a rebuild after a rotation reuses it instead of deriving everything again); or a
 * destroyed version, whose key is ignored. A `key` given beside `material` is ignored too.
 */
export type KeyVersionInput =
  | { version: number; key: Buffer; destroyed?: false }
  | { version: number; material: KeyMaterial; key?: Buffer; destroyed?: false }
  | { version: number; destroyed: true; key?: Buffer };

export type KeyMaterial = {
  readonly version: number;
  readonly xaes: XaesKey;
  /** HMAC-SHA256 key deriving deterministic nonces (DESIGN §5). */
  readonly nonceKey: KeyObject;
};

export type KeyUnavailableReason = 'unknown-version' | 'destroyed' | 'below-minimum';

function buildMaterial(version: number, key: Buffer): KeyMaterial {
  const nonceKeyBytes = Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), NONCE_KEY_INFO, 32));
  const nonceKey = createSecretKey(nonceKeyBytes);
  nonceKeyBytes.fill(0);
  return Object.freeze({ version, xaes: new XaesKey(key), nonceKey });
}

export class Keyring {
  readonly id: Buffer;
  /** Highest non-destroyed version: the one new tokens are written with. */
  readonly current: number;
  readonly minDecryptionVersion: number;
  readonly #material = new Map<number, KeyMaterial>();
  readonly #destroyed = new Set<number>();

  /**
   * `key` of a destroyed version is ignored (it may be empty): a destroyed version only
   * records that its tokens can no longer be opened.
   */
  constructor(id: Buffer, versions: readonly KeyVersionInput[], opts: { minDecryptionVersion?: number } = {}) {
    if (!Buffer.isBuffer(id) || id.length !== KEYRING_ID_SIZE) throw new RangeError('keyring id must be 16 bytes');
    if (versions.length === 0) throw new RangeError('keyring needs at least one key version');

    let current = 0;
    let highest = 0;
    const seen = new Set<number>();
    for (const v of versions) {
      if (!Number.isSafeInteger(v.version) || v.version < 1 || v.version > MAX_KEY_VERSION) {
        throw new RangeError(`key version must be an integer from 1 to ${MAX_KEY_VERSION}`);
      }
      if (seen.has(v.version)) throw new RangeError(`key version ${v.version} appears twice`);
      seen.add(v.version);
      if (v.version > highest) highest = v.version;
      if (v.destroyed === true) {
        this.#destroyed.add(v.version);
        continue;
      }
      if ('material' in v) {
        if (v.material.version !== v.version) throw new RangeError(`key material of version ${v.material.version} given for version ${v.version}`);
        this.#material.set(v.version, v.material);
      } else if (!Buffer.isBuffer(v.key) || v.key.length !== DATA_KEY_SIZE) {
        throw new RangeError(`data key of version ${v.version} must be 32 bytes`);
      } else {
        this.#material.set(v.version, buildMaterial(v.version, v.key));
      }
      if (v.version > current) current = v.version;
    }
    if (current === 0) throw new RangeError('every key version of the keyring is destroyed');

    const min = opts.minDecryptionVersion ?? 0;
    if (!Number.isSafeInteger(min) || min < 0) throw new RangeError('minDecryptionVersion must be a non-negative integer');
    // Otherwise new tokens would be born unreadable.
    if (min > current) throw new RangeError('minDecryptionVersion is above the current key version');

    this.id = Buffer.from(id);
    this.current = current;
    this.minDecryptionVersion = min;
  }

  forEncrypt(): KeyMaterial {
    // The constructor guarantees the current version has material.
    return this.#material.get(this.current)!;
  }

  /** The version's material, or why tokens of that version cannot be opened. Allocation-free. */
  forDecrypt(version: number): KeyMaterial | KeyUnavailableReason {
    const material = this.#material.get(version);
    if (material === undefined) return this.#destroyed.has(version) ? 'destroyed' : 'unknown-version';
    if (version < this.minDecryptionVersion) return 'below-minimum';
    return material;
  }

  /** A version's material whatever the minimum decryption version, for reuse by the next keyring. */
  materialOf(version: number): KeyMaterial | undefined {
    return this.#material.get(version);
  }

  /** Version numbers, destroyed ones included, ascending. */
  versions(): number[] {
    return [...this.#material.keys(), ...this.#destroyed].sort((a, b) => a - b);
  }

  static generateKey(): Buffer {
    return randomBytes(DATA_KEY_SIZE);
  }

  static generateId(): Buffer {
    return randomBytes(KEYRING_ID_SIZE);
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `Keyring <${this.id.toString('hex')} current=${this.current} keys redacted>`;
  }

  toJSON(): string {
    return `Keyring <${this.id.toString('hex')} current=${this.current} keys redacted>`;
  }
}
