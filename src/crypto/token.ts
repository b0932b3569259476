/**
 * The token codec (DESIGN §5, Contract):
 *
 *   svc:<kv>:<meta>:<ct>:$
 *   meta = 0x01 | type | LEB128 classification id | flags | 24-byte nonce   (base64url)
 *   ct   = XAES-256-GCM ciphertext || 16-byte tag                          (base64url)
 *   AAD  = "svc:" || keyring id (16 raw bytes) || kv (ASCII) || ":" || raw meta
 *
 * Everything the token claims about itself (configuration, version, type,
 * classification, mode, nonce) is authenticated through the AAD, so an edited or moved
 * token fails to open instead of decrypting into something else.
 *
 * Encryption is the hot path. An encryptor lives for one request and keeps one buffer
 * holding the AAD with the meta at its tail: per field only the type byte and the nonce
 * change in place, and the meta text is base64url of that tail.
 */

import { createHmac, type KeyObject } from 'node:crypto';
import { MAX_KEY_VERSION, type Keyring, type KeyMaterial } from './keyring.ts';
import { fillRandomPooled } from './random.ts';
import {
  XAES_NONCE_PREFIX_SIZE,
  XAES_NONCE_SIZE,
  XAES_TAG_SIZE,
  xaesOpenWithSubkey,
  xaesSealWithSubkey,
  type XaesKey,
} from './xaes.ts';

export type TokenType = 's' | 'n' | 'b' | 'j';

/**
 * The longest token a plaintext of `bytes` bytes can become: `svc:`, the longest key
 * version, the longest meta (a classification id of 2^53 - 1), the ciphertext and tag.
 */
export function maxTokenLength(bytes: number): number {
  const b64 = (n: number) => Math.ceil((n * 4) / 3);
  return 'svc:'.length + String(MAX_KEY_VERSION).length + 1 + b64(1 + 1 + MAX_LEB128_BYTES + 1 + XAES_NONCE_SIZE) + 1 + b64(bytes + XAES_TAG_SIZE) + ':$'.length;
}

export type TokenHeader = {
  version: number;
  type: TokenType;
  classificationId: number;
  deterministic: boolean;
};

export type DecryptedToken = TokenHeader & { plaintext: Buffer };

export type TokenErrorReason = 'malformed' | 'unknown-version' | 'retired-version' | 'destroyed-version' | 'authentication';

const MESSAGES: Record<TokenErrorReason, string> = {
  malformed: 'The token is malformed.',
  'unknown-version': 'The token was encrypted with an unknown key version.',
  'retired-version': 'The token was encrypted with a key version that is no longer accepted.',
  // Said apart from retired: raising min_decryption_version can be undone, destroying cannot.
  'destroyed-version': 'The token was encrypted with a key version that has been destroyed.',
  authentication: 'The token failed authentication: it was altered or belongs to another configuration.',
};

/** Messages are fixed per reason: they never carry token, plaintext or key bytes. */
export class TokenError extends Error {
  readonly reason: TokenErrorReason;

  constructor(reason: TokenErrorReason) {
    super(MESSAGES[reason]);
    this.name = 'TokenError';
    this.reason = reason;
  }
}

export interface FieldEncryptor {
  encrypt(plaintext: Buffer, type: TokenType): string;
}

const FORMAT_V1 = 0x01;
const FLAG_DETERMINISTIC = 0x01;
const MAX_CLASSIFICATION_ID = Number.MAX_SAFE_INTEGER;
/** ceil(53 / 7): the longest LEB128 encoding of an id up to 2^53 - 1. */
const MAX_LEB128_BYTES = 8;
const META_MIN = 1 + 1 + 1 + 1 + XAES_NONCE_SIZE;
const META_MAX = 1 + 1 + MAX_LEB128_BYTES + 1 + XAES_NONCE_SIZE;
/**
 * Randomized mode shares one nonce prefix (one XAES subkey) across consecutive fields, of
 * one request or of many; the remaining 96 random bits per field make GCM nonce reuse
 * under that subkey negligible well beyond this many messages, and a fresh prefix after
 * them keeps it so however long the process runs.
 */
const PREFIX_REUSE_LIMIT = 4096;
/** Subkeys cached per key version, across two generations (see SubkeyCache). */
const SUBKEY_CACHE_GENERATION = 512;

const TOKEN_SHAPE = /^svc:([1-9][0-9]{0,9}):([A-Za-z0-9_-]+):([A-Za-z0-9_-]+):\$$/;
const AAD_MAGIC = Buffer.from('svc:', 'latin1');
const COLON = 0x3a;
const EMPTY = Buffer.alloc(0);

function typeByteOf(type: TokenType): number {
  switch (type) {
    case 's':
      return 0x73;
    case 'n':
      return 0x6e;
    case 'b':
      return 0x62;
    case 'j':
      return 0x6a;
    default:
      return 0;
  }
}

function typeOfByte(byte: number): TokenType | null {
  switch (byte) {
    case 0x73:
      return 's';
    case 0x6e:
      return 'n';
    case 0x62:
      return 'b';
    case 0x6a:
      return 'j';
    default:
      return null;
  }
}

// Arithmetic rather than bit operators: ids go up to 2^53 - 1, beyond int32.
function leb128Length(value: number): number {
  let n = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 0x80);
    n++;
  }
  return n;
}

function writeLeb128(value: number, buf: Buffer, offset: number): number {
  while (value >= 0x80) {
    buf[offset++] = (value % 0x80) | 0x80;
    value = Math.floor(value / 0x80);
  }
  buf[offset++] = value;
  return offset;
}

function base64urlValue(code: number): number {
  if (code >= 0x41 && code <= 0x5a) return code - 0x41;
  if (code >= 0x61 && code <= 0x7a) return code - 0x61 + 26;
  if (code >= 0x30 && code <= 0x39) return code - 0x30 + 52;
  return code === 0x2d ? 62 : 63;
}

/**
 * Decoded byte length of canonical unpadded base64url text, or -1. Canonical means the
 * bits below the last whole byte are zero: otherwise several spellings would decode to
 * one token, and a token's text would not be the one thing the AAD vouches for. The
 * caller has already checked the alphabet.
 */
function canonicalDecodedLength(text: string): number {
  const rest = text.length % 4;
  const whole = (text.length - rest) / 4;
  if (rest === 0) return whole * 3;
  if (rest === 1) return -1;
  const last = base64urlValue(text.charCodeAt(text.length - 1));
  if (rest === 2) return (last & 0x0f) === 0 ? whole * 3 + 1 : -1;
  return (last & 0x03) === 0 ? whole * 3 + 2 : -1;
}

/**
 * Parses the meta at buf[start..end) into the header fields; returns false if it breaks
 * any rule. `out.version` is left to the caller.
 */
function parseMeta(buf: Buffer, start: number, end: number, out: TokenHeader): boolean {
  if (end - start < META_MIN || buf[start] !== FORMAT_V1) return false;
  const type = typeOfByte(buf[start + 1]!);
  if (type === null) return false;
  let pos = start + 2;
  let id = 0;
  let scale = 1;
  for (let i = 0; ; i++) {
    if (i === MAX_LEB128_BYTES || pos >= end) return false;
    const byte = buf[pos++]!;
    id += (byte & 0x7f) * scale;
    scale *= 0x80;
    if ((byte & 0x80) === 0) {
      // Minimal encoding: a zero final byte is only valid as the whole encoding (id 0).
      if (byte === 0 && i > 0) return false;
      break;
    }
  }
  if (id > MAX_CLASSIFICATION_ID) return false;
  if (pos >= end) return false;
  const flags = buf[pos++]!;
  if ((flags & ~FLAG_DETERMINISTIC) !== 0) return false;
  if (end - pos !== XAES_NONCE_SIZE) return false;
  out.type = type;
  out.classificationId = id;
  out.deterministic = flags === FLAG_DETERMINISTIC;
  return true;
}

type TokenParts = { version: number; kvText: string; metaText: string; metaLength: number; ctText: string; ctLength: number };

function splitToken(token: string): TokenParts | null {
  const m = TOKEN_SHAPE.exec(token);
  if (m === null) return null;
  const kvText = m[1]!;
  const metaText = m[2]!;
  const ctText = m[3]!;
  const version = Number(kvText);
  if (version > MAX_KEY_VERSION) return null;
  const metaLength = canonicalDecodedLength(metaText);
  if (metaLength < META_MIN || metaLength > META_MAX) return null;
  const ctLength = canonicalDecodedLength(ctText);
  if (ctLength < XAES_TAG_SIZE) return null;
  return { version, kvText, metaText, metaLength, ctText, ctLength };
}

/**
 * Derived XAES subkeys of one key version, by 12-byte nonce prefix. Two generations of
 * Maps approximate LRU at Map speed: when the young one fills it becomes the old one and
 * the previous old one is dropped; a hit in the old generation is promoted.
 */
class SubkeyCache {
  readonly #xaes: XaesKey;
  #young = new Map<string, KeyObject>();
  #old = new Map<string, KeyObject>();
  /** The last prefix asked for: a request's tokens share one, so most lookups end here. */
  readonly #lastPrefix = Buffer.alloc(XAES_NONCE_PREFIX_SIZE);
  #lastSubkey: KeyObject | null = null;

  constructor(xaes: XaesKey) {
    this.#xaes = xaes;
  }

  /** The subkey for the nonce at buf[offset..offset+24). */
  get(buf: Buffer, offset: number): KeyObject {
    const end = offset + XAES_NONCE_PREFIX_SIZE;
    if (this.#lastSubkey !== null && this.#lastPrefix.compare(buf, offset, end) === 0) return this.#lastSubkey;
    const subkey = this.#lookup(buf, offset);
    buf.copy(this.#lastPrefix, 0, offset, end);
    this.#lastSubkey = subkey;
    return subkey;
  }

  #lookup(buf: Buffer, offset: number): KeyObject {
    // latin1 maps each byte to one char: an injective, cheap Map key.
    const id = buf.toString('latin1', offset, offset + XAES_NONCE_PREFIX_SIZE);
    let subkey = this.#young.get(id);
    if (subkey !== undefined) return subkey;
    subkey = this.#old.get(id) ?? this.#xaes.deriveSubkey(buf.subarray(offset, offset + XAES_NONCE_PREFIX_SIZE));
    if (this.#young.size >= SUBKEY_CACHE_GENERATION) {
      this.#old = this.#young;
      this.#young = new Map();
    }
    this.#young.set(id, subkey);
    return subkey;
  }
}

/**
 * The current random nonce prefix of one key version and its derived subkey, shared by
 * every encryptor of that version so the derivation is paid once per PREFIX_REUSE_LIMIT
 * fields rather than once per request.
 */
class RandomPrefix {
  readonly #xaes: XaesKey;
  readonly prefix = Buffer.allocUnsafe(XAES_NONCE_PREFIX_SIZE);
  #subkey: KeyObject | null = null;
  #uses = 0;

  constructor(xaes: XaesKey) {
    this.#xaes = xaes;
  }

  /** The subkey for the next field; `prefix` then holds the nonce prefix it belongs to. */
  next(): KeyObject {
    if (this.#subkey === null || this.#uses >= PREFIX_REUSE_LIMIT) {
      fillRandomPooled(this.prefix, 0, XAES_NONCE_PREFIX_SIZE);
      this.#subkey = this.#xaes.deriveSubkey(this.prefix);
      this.#uses = 0;
    }
    this.#uses++;
    return this.#subkey;
  }
}

class Encryptor implements FieldEncryptor {
  readonly #material: KeyMaterial;
  readonly #subkeys: SubkeyCache | null;
  /** "svc:" id kv ":" meta — the AAD, whose tail is the meta. */
  readonly #aad: Buffer;
  readonly #metaOffset: number;
  readonly #typeOffset: number;
  readonly #nonceOffset: number;
  readonly #nonce: Buffer;
  readonly #aadWithoutNonce: Buffer;
  readonly #head: string;
  readonly #prefix: RandomPrefix | null;

  constructor(material: KeyMaterial, aadHead: Buffer, head: string, classificationId: number, subkeys: SubkeyCache | null, prefix: RandomPrefix | null) {
    this.#material = material;
    this.#subkeys = subkeys;
    this.#prefix = prefix;
    this.#head = head;
    const metaOffset = aadHead.length;
    const aad = Buffer.allocUnsafe(metaOffset + 2 + leb128Length(classificationId) + 1 + XAES_NONCE_SIZE);
    aadHead.copy(aad, 0);
    aad[metaOffset] = FORMAT_V1;
    aad[metaOffset + 1] = 0;
    let pos = writeLeb128(classificationId, aad, metaOffset + 2);
    aad[pos++] = subkeys === null ? 0 : FLAG_DETERMINISTIC;
    this.#aad = aad;
    this.#metaOffset = metaOffset;
    this.#typeOffset = metaOffset + 1;
    this.#nonceOffset = pos;
    this.#nonce = aad.subarray(pos);
    this.#aadWithoutNonce = aad.subarray(0, pos);
  }

  encrypt(plaintext: Buffer, type: TokenType): string {
    const typeByte = typeByteOf(type);
    if (typeByte === 0) throw new TypeError('unknown token type');
    const aad = this.#aad;
    aad[this.#typeOffset] = typeByte;
    let subkey: KeyObject;
    if (this.#prefix === null) {
      // Deterministic: the nonce is a MAC of everything the token binds, plaintext included.
      const mac = createHmac('sha256', this.#material.nonceKey).update(this.#aadWithoutNonce).update(plaintext).digest();
      mac.copy(aad, this.#nonceOffset, 0, XAES_NONCE_SIZE);
      subkey = this.#subkeys!.get(aad, this.#nonceOffset);
    } else {
      subkey = this.#prefix.next();
      this.#prefix.prefix.copy(aad, this.#nonceOffset);
      fillRandomPooled(aad, this.#nonceOffset + XAES_NONCE_PREFIX_SIZE, XAES_NONCE_SIZE - XAES_NONCE_PREFIX_SIZE);
    }
    const sealed = xaesSealWithSubkey(subkey, this.#nonce, plaintext, aad);
    return this.#head + aad.toString('base64url', this.#metaOffset) + ':' + sealed.toString('base64url') + ':$';
  }
}

export class TokenCodec {
  readonly keyring: Keyring;
  readonly deterministic: boolean;
  readonly #id: Buffer;
  /** AAD up to and excluding the meta, for the current version. */
  readonly #encryptAadHead: Buffer;
  readonly #encryptHead: string;
  readonly #subkeys = new Map<number, SubkeyCache>();
  /** Randomized mode's shared prefix for the current version (the codec is per keyring). */
  readonly #prefix: RandomPrefix | null;

  constructor(keyring: Keyring, opts: { deterministic: boolean }) {
    this.keyring = keyring;
    this.deterministic = opts.deterministic;
    this.#id = keyring.id;
    const kv = String(keyring.current);
    this.#encryptAadHead = Buffer.concat([AAD_MAGIC, keyring.id, Buffer.from(kv + ':', 'latin1')]);
    this.#encryptHead = `svc:${kv}:`;
    this.#prefix = opts.deterministic ? null : new RandomPrefix(keyring.forEncrypt().xaes);
  }

  /** A per-request encryptor writing tokens with the current key version and this classification (0 = none). */
  encryptor(classificationId: number): FieldEncryptor {
    if (!Number.isSafeInteger(classificationId) || classificationId < 0) {
      throw new RangeError('classification id must be an integer from 0 to 2^53 - 1');
    }
    const material = this.keyring.forEncrypt();
    const subkeys = this.deterministic ? this.#cacheFor(material) : null;
    return new Encryptor(material, this.#encryptAadHead, this.#encryptHead, classificationId, subkeys, this.#prefix);
  }

  /**
   * Decrypts a token. `check`, if given, sees the authenticated-to-be header after parsing
   * and before any decryption, and may throw to refuse the token (classification access).
   */
  decrypt(token: string, check?: (header: TokenHeader) => void): DecryptedToken {
    const parts = splitToken(token);
    if (parts === null) throw new TokenError('malformed');
    const { kvText, metaLength } = parts;

    // The meta is decoded straight into its place at the tail of the AAD.
    const metaOffset = AAD_MAGIC.length + this.#id.length + kvText.length + 1;
    const aad = Buffer.allocUnsafe(metaOffset + metaLength);
    AAD_MAGIC.copy(aad, 0);
    this.#id.copy(aad, AAD_MAGIC.length);
    aad.write(kvText, AAD_MAGIC.length + this.#id.length, 'latin1');
    aad[metaOffset - 1] = COLON;
    aad.write(parts.metaText, metaOffset, 'base64url');

    const result: DecryptedToken = { type: 's', classificationId: 0, deterministic: false, version: parts.version, plaintext: EMPTY };
    if (!parseMeta(aad, metaOffset, aad.length, result)) throw new TokenError('malformed');
    if (check !== undefined) check(result);

    const material = this.keyring.forDecrypt(parts.version);
    if (typeof material === 'string') {
      throw new TokenError(material === 'below-minimum' ? 'retired-version' : material === 'destroyed' ? 'destroyed-version' : 'unknown-version');
    }
    const nonceOffset = aad.length - XAES_NONCE_SIZE;
    const subkey = this.#cacheFor(material).get(aad, nonceOffset);
    const sealed = Buffer.from(parts.ctText, 'base64url');
    try {
      result.plaintext = xaesOpenWithSubkey(subkey, aad.subarray(nonceOffset), sealed, aad);
    } catch {
      throw new TokenError('authentication');
    }
    return result;
  }

  /** The header of a token without decrypting it, or null if the token is malformed. */
  static peek(token: string): TokenHeader | null {
    const parts = splitToken(token);
    if (parts === null) return null;
    const meta = Buffer.from(parts.metaText, 'base64url');
    const header: TokenHeader = { version: parts.version, type: 's', classificationId: 0, deterministic: false };
    return parseMeta(meta, 0, meta.length, header) ? header : null;
  }

  /** A cheap pre-filter: true does not mean the token is well-formed. */
  static looksLikeToken(s: string): boolean {
    return s.length >= 6 && s.startsWith('svc:') && s.endsWith(':$');
  }

  #cacheFor(material: KeyMaterial): SubkeyCache {
    let cache = this.#subkeys.get(material.version);
    if (cache === undefined) {
      cache = new SubkeyCache(material.xaes);
      this.#subkeys.set(material.version, cache);
    }
    return cache;
  }
}
