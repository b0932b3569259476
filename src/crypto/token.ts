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
import { base64urlDecodedLength, decodeBase64urlInto, isCanonicalBase64url } from './base64url.ts';
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
 * Randomized mode shares one nonce prefix (one XAES subkey) across the fields of one
 * request (DESIGN §5), never across requests: tokens of different requests, callers or
 * end users cannot be linked by their prefix. The remaining 96 random bits per field make
 * GCM nonce reuse under that subkey negligible well beyond this many messages, and a
 * fresh prefix after them keeps it so however long a request (a streamed body) runs.
 */
const PREFIX_REUSE_LIMIT = 4096;
/** Subkeys cached per key version, across two generations (see SubkeyCache). */
const SUBKEY_CACHE_GENERATION = 512;

/** `svc:` + at most 10 digits: where the colon after `kv` must be by. */
const KV_END_MAX = 4 + 10;
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

/** Where a token's parts are in its text, and the sizes its meta and ct decode to. */
type TokenParts = { version: number; kvEnd: number; metaEnd: number; metaLength: number; ctLength: number };

/**
 * Splits `svc:<kv>:<meta>:<ct>:$` by position. The meta and ct sizes are those of canonical
 * base64url (src/crypto/base64url.ts); their characters are checked as they are decoded.
 */
function splitToken(token: string): TokenParts | null {
  if (!token.startsWith('svc:') || !token.endsWith(':$')) return null;
  const kvEnd = token.indexOf(':', 4);
  if (kvEnd < 5 || kvEnd > KV_END_MAX || token.charCodeAt(4) === 0x30) return null;
  let version = 0;
  for (let i = 4; i < kvEnd; i++) {
    const digit = token.charCodeAt(i) - 0x30;
    if (digit < 0 || digit > 9) return null;
    version = version * 10 + digit;
  }
  if (version > MAX_KEY_VERSION) return null;
  const metaEnd = token.indexOf(':', kvEnd + 1);
  const ctEnd = token.length - 2;
  // Exactly one colon between meta and the end: `:` is outside the alphabet anyway, but a
  // token with a fifth field must not parse as one with a shorter ct.
  if (metaEnd === -1 || metaEnd >= ctEnd || token.indexOf(':', metaEnd + 1) !== ctEnd) return null;
  const metaLength = base64urlDecodedLength(token, kvEnd + 1, metaEnd);
  if (metaLength < META_MIN || metaLength > META_MAX) return null;
  const ctLength = base64urlDecodedLength(token, metaEnd + 1, ctEnd);
  if (ctLength < XAES_TAG_SIZE) return null;
  return { version, kvEnd, metaEnd, metaLength, ctLength };
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

/** Prefixes drawn and derived together (one AES-ECB call for the lot). */
const PREFIX_BATCH = 64;

/**
 * Fresh random nonce prefixes of one key version with their subkeys, derived a batch at a
 * time; each is handed out once, to one request.
 */
class PrefixPool {
  readonly #xaes: XaesKey;
  readonly #prefixes = Buffer.allocUnsafe(PREFIX_BATCH * XAES_NONCE_PREFIX_SIZE);
  #subkeys: Array<KeyObject | undefined> = [];
  #next = PREFIX_BATCH;

  constructor(xaes: XaesKey) {
    this.#xaes = xaes;
  }

  /** Copies a prefix no one else gets into `into` and returns its subkey. */
  take(into: Buffer): KeyObject {
    if (this.#next === PREFIX_BATCH) {
      fillRandomPooled(this.#prefixes, 0, this.#prefixes.length);
      this.#subkeys = this.#xaes.deriveSubkeys(this.#prefixes, PREFIX_BATCH);
      this.#next = 0;
    }
    const i = this.#next++;
    this.#prefixes.copy(into, 0, i * XAES_NONCE_PREFIX_SIZE, (i + 1) * XAES_NONCE_PREFIX_SIZE);
    const subkey = this.#subkeys[i]!;
    // Handed out: the pool keeps no reference to it.
    this.#subkeys[i] = undefined;
    return subkey;
  }
}

/**
 * One request's nonce prefix and its subkey, taken from the pool at the request's first
 * field (a request that encrypts nothing takes none), then again every PREFIX_REUSE_LIMIT
 * fields. The prefix is written where the request's nonces are built, once per take.
 */
class RandomPrefix {
  readonly #pool: PrefixPool;
  /** The first 12 bytes of the nonce in the encryptor's AAD, which only this request writes. */
  readonly #prefix: Buffer;
  #subkey: KeyObject | null = null;
  #uses = 0;

  constructor(pool: PrefixPool, prefix: Buffer) {
    this.#pool = pool;
    this.#prefix = prefix;
  }

  /** The subkey for the next field, its prefix in place. */
  next(): KeyObject {
    if (this.#subkey === null || this.#uses >= PREFIX_REUSE_LIMIT) {
      this.#subkey = this.#pool.take(this.#prefix);
      this.#uses = 0;
    }
    this.#uses++;
    return this.#subkey;
  }
}

/** Encryptors a codec keeps, one per classification. */
const MAX_ENCRYPTORS = 256;

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

  /** Deterministic with `subkeys`, randomized with `prefixes` (one of the two). */
  constructor(material: KeyMaterial, aadHead: Buffer, head: string, classificationId: number, subkeys: SubkeyCache | null, prefixes: PrefixPool | null) {
    this.#material = material;
    this.#subkeys = subkeys;
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
    this.#prefix = prefixes === null ? null : new RandomPrefix(prefixes, aad.subarray(pos, pos + XAES_NONCE_PREFIX_SIZE));
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
  /** Randomized mode: the current version's prefixes, one per request. */
  readonly #prefixes: PrefixPool | null;
  /** Deterministic mode: the encryptor of each classification asked for. */
  readonly #encryptors = new Map<number, Encryptor>();

  constructor(keyring: Keyring, opts: { deterministic: boolean }) {
    this.keyring = keyring;
    this.deterministic = opts.deterministic;
    this.#id = keyring.id;
    const kv = String(keyring.current);
    this.#encryptAadHead = Buffer.concat([AAD_MAGIC, keyring.id, Buffer.from(kv + ':', 'latin1')]);
    this.#encryptHead = `svc:${kv}:`;
    this.#prefixes = opts.deterministic ? null : new PrefixPool(keyring.forEncrypt().xaes);
  }

  /**
   * The encryptor writing tokens with the current key version and this classification
   * (0 = none), for one request: take one per request and classification. In randomized
   * mode each has a nonce prefix of its own (DESIGN §5).
   */
  encryptor(classificationId: number): FieldEncryptor {
    if (!Number.isSafeInteger(classificationId) || classificationId < 0) {
      throw new RangeError('classification id must be an integer from 0 to 2^53 - 1');
    }
    const material = this.keyring.forEncrypt();
    if (this.#prefixes !== null) return new Encryptor(material, this.#encryptAadHead, this.#encryptHead, classificationId, null, this.#prefixes);
    // A deterministic encryptor holds nothing of a request (its AAD buffer is rewritten
    // whole by each synchronous encrypt), so one per classification serves every request.
    let encryptor = this.#encryptors.get(classificationId);
    if (encryptor === undefined) {
      encryptor = new Encryptor(material, this.#encryptAadHead, this.#encryptHead, classificationId, this.#cacheFor(material), null);
      if (this.#encryptors.size >= MAX_ENCRYPTORS) this.#encryptors.clear();
      this.#encryptors.set(classificationId, encryptor);
    }
    return encryptor;
  }

  /**
   * Decrypts a token. `check`, if given, sees the authenticated-to-be header after parsing
   * and before any decryption, and may throw to refuse the token (classification access),
   * or return false to stop there: nothing is decrypted, and the result's plaintext is
   * empty (a reader shown only the token, or nothing of the value, DESIGN §14).
   */
  decrypt(token: string, check?: (header: TokenHeader) => boolean | void): DecryptedToken {
    const parts = splitToken(token);
    if (parts === null) throw new TokenError('malformed');
    const { kvEnd, metaEnd, metaLength } = parts;

    // The meta is decoded straight into its place at the tail of the AAD.
    const kvLength = kvEnd - 4;
    const metaOffset = AAD_MAGIC.length + this.#id.length + kvLength + 1;
    const aad = Buffer.allocUnsafe(metaOffset + metaLength);
    AAD_MAGIC.copy(aad, 0);
    this.#id.copy(aad, AAD_MAGIC.length);
    for (let i = 0; i < kvLength; i++) aad[AAD_MAGIC.length + this.#id.length + i] = token.charCodeAt(4 + i);
    aad[metaOffset - 1] = COLON;
    if (decodeBase64urlInto(token, kvEnd + 1, metaEnd, aad, metaOffset) !== metaLength) throw new TokenError('malformed');
    // Decoded before anything is looked up, so a malformed token is malformed whatever its version.
    const sealed = Buffer.allocUnsafe(parts.ctLength);
    if (decodeBase64urlInto(token, metaEnd + 1, token.length - 2, sealed, 0) !== parts.ctLength) throw new TokenError('malformed');

    const result: DecryptedToken = { type: 's', classificationId: 0, deterministic: false, version: parts.version, plaintext: EMPTY };
    if (!parseMeta(aad, metaOffset, aad.length, result)) throw new TokenError('malformed');
    if (check !== undefined && check(result) === false) return result;

    const material = this.keyring.forDecrypt(parts.version);
    if (typeof material === 'string') {
      throw new TokenError(material === 'below-minimum' ? 'retired-version' : material === 'destroyed' ? 'destroyed-version' : 'unknown-version');
    }
    const nonceOffset = aad.length - XAES_NONCE_SIZE;
    const subkey = this.#cacheFor(material).get(aad, nonceOffset);
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
    const meta = Buffer.allocUnsafe(parts.metaLength);
    if (decodeBase64urlInto(token, parts.kvEnd + 1, parts.metaEnd, meta, 0) !== parts.metaLength) return null;
    if (!isCanonicalBase64url(token, parts.metaEnd + 1, token.length - 2)) return null;
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
