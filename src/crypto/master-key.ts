/**
 * The master key wraps every configuration's data keys (DESIGN §5). It comes from
 * `SVC_MASTER_KEY` or a key file; when neither exists a development key file is created.
 * Key bytes live only inside a KeyObject: no error message, log line, inspect() or
 * JSON.stringify() output of this module contains them.
 */

import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  createSecretKey,
  hkdfSync,
  randomBytes,
  randomFillSync,
  type KeyObject,
} from 'node:crypto';
import { closeSync, fstatSync, fsyncSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { MasterKeyMissingError } from '../errors.ts';

const MASTER_KEY_SIZE = 32;
const WRAP_VERSION = 0x01;
const WRAP_NONCE_SIZE = 12;
const WRAP_TAG_SIZE = 16;
const WRAP_OVERHEAD = 1 + WRAP_NONCE_SIZE + WRAP_TAG_SIZE;
const FINGERPRINT_LABEL = 'svc-sidecar fingerprint';
const REDACTED = 'MasterKey <redacted>';
const CHECK_LABEL = 'svc master key check v1';
const CHECK_CONSTANT = 'svc-sidecar master key check';

export type MasterKeySource = 'env' | 'file' | 'generated' | 'memory';

export type MasterKeyOrigin = {
  source: MasterKeySource;
  /** The key file, when the key came from one. */
  path?: string | undefined;
  /** The key file is readable or writable by group or others. */
  insecurePermissions?: boolean | undefined;
};

export class MasterKey {
  readonly source: MasterKeySource;
  readonly path: string | undefined;
  readonly insecurePermissions: boolean;
  readonly #key: KeyObject;
  #fingerprint: string | undefined;

  constructor(key: Buffer, origin: MasterKeyOrigin = { source: 'memory' }) {
    if (!Buffer.isBuffer(key) || key.length !== MASTER_KEY_SIZE) throw new RangeError('master key must be 32 bytes');
    this.#key = createSecretKey(key);
    this.source = origin.source;
    this.path = origin.path;
    this.insecurePermissions = origin.insecurePermissions ?? false;
  }

  /**
   * AES-256-GCM-wraps a data key: 0x01 | 12-byte random nonce | ciphertext | 16-byte tag.
   * `aad` binds the wrapped key to its place (configuration id, key version): a wrapped
   * key copied to another row fails to unwrap.
   */
  wrap(dataKey: Buffer, aad: string): Buffer {
    const out = Buffer.allocUnsafe(WRAP_OVERHEAD + dataKey.length);
    out[0] = WRAP_VERSION;
    const nonce = out.subarray(1, 1 + WRAP_NONCE_SIZE);
    randomFillSync(nonce);
    const cipher = createCipheriv('aes-256-gcm', this.#key, nonce, { authTagLength: WRAP_TAG_SIZE });
    cipher.setAAD(Buffer.from(aad, 'utf8'));
    const ct = cipher.update(dataKey);
    cipher.final();
    ct.copy(out, 1 + WRAP_NONCE_SIZE);
    ct.fill(0);
    cipher.getAuthTag().copy(out, 1 + WRAP_NONCE_SIZE + dataKey.length);
    return out;
  }

  /** Inverse of wrap(). Any problem — format, key, aad, tampering — is the same Error('unwrap failed'). */
  unwrap(wrapped: Buffer, aad: string): Buffer {
    if (!Buffer.isBuffer(wrapped) || wrapped.length < WRAP_OVERHEAD || wrapped[0] !== WRAP_VERSION) {
      throw new Error('unwrap failed');
    }
    const ctEnd = wrapped.length - WRAP_TAG_SIZE;
    let plaintext: Buffer | undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, wrapped.subarray(1, 1 + WRAP_NONCE_SIZE), {
        authTagLength: WRAP_TAG_SIZE,
      });
      decipher.setAuthTag(wrapped.subarray(ctEnd));
      decipher.setAAD(Buffer.from(aad, 'utf8'));
      plaintext = decipher.update(wrapped.subarray(1 + WRAP_NONCE_SIZE, ctEnd));
      decipher.final();
      return plaintext;
    } catch {
      plaintext?.fill(0);
      throw new Error('unwrap failed');
    }
  }

  /** Identifies the key without revealing it (safe to log and compare across instances). */
  fingerprint(): string {
    this.#fingerprint ??= createHmac('sha256', this.#key).update(FINGERPRINT_LABEL).digest().subarray(0, 8).toString('hex');
    return this.#fingerprint;
  }

  /**
   * A value that identifies this key to a store that keeps it (DESIGN §13): an HMAC of a
   * constant under a key of its own, so it says nothing about the key or anything it wraps.
   */
  checkValue(): string {
    return createHmac('sha256', this.deriveSecret(CHECK_LABEL)).update(CHECK_CONSTANT).digest('hex');
  }

  /** An independent secret for one purpose (e.g. the JWT signing key), HKDF-SHA256 with info = label. */
  deriveSecret(label: string, length = 32): Buffer {
    if (!Number.isSafeInteger(length) || length < 1 || length > 255 * 32) {
      throw new RangeError('deriveSecret: length must be from 1 to 8160');
    }
    return Buffer.from(hkdfSync('sha256', this.#key, Buffer.alloc(0), label, length));
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return REDACTED;
  }

  toJSON(): string {
    return REDACTED;
  }

  toString(): string {
    return REDACTED;
  }
}

/**
 * Decodes base64 (or base64url) of exactly 32 bytes; null otherwise. Strict, so a typo
 * or a truncated paste is an error rather than a different key.
 */
function decodeKey(text: string): Buffer | null {
  if (!/^[A-Za-z0-9+/_-]{43}=?$/.test(text)) return null;
  const standard = text.replace(/-/g, '+').replace(/_/g, '/');
  const key = Buffer.from(standard, 'base64');
  // Re-encoding rejects non-zero trailing bits: exactly one text per key.
  if (key.length !== MASTER_KEY_SIZE || key.toString('base64').slice(0, 43) !== standard.slice(0, 43)) {
    key.fill(0);
    return null;
  }
  return key;
}

function isNotFound(err: unknown): boolean {
  return (err as NodeJS.ErrnoException | null)?.code === 'ENOENT';
}

function readKeyFile(file: string): MasterKey {
  const fd = openSync(file, 'r');
  let mode: number;
  let text: string;
  try {
    // Same descriptor for stat and read: the permissions reported are the file's we read.
    mode = fstatSync(fd).mode;
    text = readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
  const key = decodeKey(text.trimEnd());
  if (key === null) {
    throw new Error(`The master key file ${file} must hold the base64 encoding of exactly 32 bytes.`);
  }
  const insecurePermissions = process.platform !== 'win32' && (mode & 0o077) !== 0;
  try {
    return new MasterKey(key, { source: 'file', path: file, insecurePermissions });
  } finally {
    key.fill(0);
  }
}

/**
 * Creates the key file, never replacing one: with 'wx', a process racing us to create it
 * makes our open fail with EEXIST and we load theirs instead. Returns null in that case.
 */
function generateKeyFile(file: string): MasterKey | null {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return null;
    throw err;
  }
  const key = randomBytes(MASTER_KEY_SIZE);
  try {
    try {
      writeSync(fd, `${key.toString('base64')}\n`);
      // Losing this file loses every configuration's keys: make it durable before use.
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    return new MasterKey(key, { source: 'generated', path: file, insecurePermissions: false });
  } finally {
    key.fill(0);
  }
}

/**
 * `generate: false` (a store that already holds wrapped keys): a missing key file is an
 * error, never a fresh development key that could not open them.
 */
export function loadMasterKey(opts: { env: NodeJS.ProcessEnv; file: string; onGenerated?: (path: string) => void; generate?: boolean }): MasterKey {
  const fromEnv = opts.env['SVC_MASTER_KEY'];
  if (fromEnv !== undefined) {
    // Set-but-empty is refused, not ignored: silently falling back to a key file would
    // encrypt production data under a development key.
    if (fromEnv.trim() === '') throw new Error('SVC_MASTER_KEY is set but empty.');
    const key = decodeKey(fromEnv.trim());
    if (key === null) {
      throw new Error('SVC_MASTER_KEY must be the base64 encoding of exactly 32 bytes (for example: openssl rand -base64 32).');
    }
    try {
      return new MasterKey(key, { source: 'env' });
    } finally {
      key.fill(0);
    }
  }

  try {
    return readKeyFile(opts.file);
  } catch (err) {
    if (!isNotFound(err)) throw err;
    if (opts.generate === false) throw new MasterKeyMissingError(opts.file);
  }
  const generated = generateKeyFile(opts.file);
  if (generated === null) return readKeyFile(opts.file);
  opts.onGenerated?.(opts.file);
  return generated;
}
