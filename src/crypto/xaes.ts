/**
 * XAES-256-GCM (C2SP, https://c2sp.org/XAES-256-GCM): AES-256-GCM under a key derived
 * from the data key and the first 12 bytes of a 24-byte nonce. The derivation is one
 * step of NIST SP 800-108 counter-mode KDF with CMAC-AES-256 as the PRF; because the
 * KDF input is exactly one block, CMAC reduces to AES_K(M xor K1) and can be done with
 * plain AES-256-ECB over both blocks in a single call.
 *
 * Split into "derive a subkey" and "seal/open with a subkey" so callers can reuse one
 * derived key for many messages that share a nonce prefix (DESIGN §5: the derivation
 * costs about as much as encrypting a field).
 */

import { createCipheriv, createDecipheriv, createSecretKey, type KeyObject } from 'node:crypto';

export const XAES_KEY_SIZE = 32;
export const XAES_NONCE_SIZE = 24;
export const XAES_NONCE_PREFIX_SIZE = 12;
export const XAES_TAG_SIZE = 16;

const ZERO_BLOCK = Buffer.alloc(16);

function aesEcb(key: KeyObject, input: Buffer): Buffer {
  const cipher = createCipheriv('aes-256-ecb', key, null);
  cipher.setAutoPadding(false);
  // Whole blocks without padding: update() returns every output byte; final() adds none.
  return cipher.update(input);
}

/** CMAC subkey K1 (SP 800-38B §6.1): L << 1, xor 0x87 into the last byte if L's top bit was set. */
function cmacSubkey(l: Buffer): Buffer {
  const k1 = Buffer.allocUnsafe(16);
  for (let i = 0; i < 15; i++) k1[i] = ((l[i]! << 1) | (l[i + 1]! >>> 7)) & 0xff;
  k1[15] = (l[15]! << 1) & 0xff;
  if (l[0]! & 0x80) k1[15] = k1[15]! ^ 0x87;
  return k1;
}

/**
 * The two KDF blocks with K1 already xored in: M1 = 00 01 'X' 00 || N[0..12] and
 * M2 = 00 02 'X' 00 || N[0..12]. Only the nonce part changes per derivation, so it is
 * xored into a copy of this template.
 */
function kdfTemplate(k1: Buffer): Buffer {
  const t = Buffer.alloc(32);
  t[1] = 0x01;
  t[2] = 0x58;
  t[17] = 0x02;
  t[18] = 0x58;
  for (let i = 0; i < 16; i++) {
    t[i] = t[i]! ^ k1[i]!;
    t[16 + i] = t[16 + i]! ^ k1[i]!;
  }
  return t;
}

export class XaesKey {
  readonly #ecb: KeyObject;
  readonly #template: Buffer;

  constructor(key: Buffer) {
    if (!Buffer.isBuffer(key) || key.length !== XAES_KEY_SIZE) throw new RangeError('XAES-256-GCM key must be 32 bytes');
    this.#ecb = createSecretKey(key);
    const l = aesEcb(this.#ecb, ZERO_BLOCK);
    const k1 = cmacSubkey(l);
    this.#template = kdfTemplate(k1);
    l.fill(0);
    k1.fill(0);
  }

  /** The AES-256-GCM key for every nonce whose first 12 bytes are `noncePrefix[0..12]`. */
  deriveSubkey(noncePrefix: Buffer): KeyObject {
    if (noncePrefix.length < XAES_NONCE_PREFIX_SIZE) throw new RangeError('XAES-256-GCM nonce prefix must be 12 bytes');
    return this.deriveSubkeys(noncePrefix, 1)[0]!;
  }

  /**
   * The subkeys of `count` nonce prefixes laid end to end in `prefixes` (12 bytes each), in
   * one AES-ECB call: a batch costs about what one derivation does, plus one KeyObject each.
   */
  deriveSubkeys(prefixes: Buffer, count: number): KeyObject[] {
    if (!Number.isSafeInteger(count) || count < 1 || prefixes.length < count * XAES_NONCE_PREFIX_SIZE) throw new RangeError('XAES-256-GCM nonce prefixes must be 12 bytes each');
    const blocks = Buffer.allocUnsafe(32 * count);
    for (let k = 0; k < count; k++) {
      const at = 32 * k;
      this.#template.copy(blocks, at);
      for (let i = 0; i < 12; i++) {
        const n = prefixes[k * XAES_NONCE_PREFIX_SIZE + i]!;
        blocks[at + 4 + i] = blocks[at + 4 + i]! ^ n;
        blocks[at + 20 + i] = blocks[at + 20 + i]! ^ n;
      }
    }
    const derived = aesEcb(this.#ecb, blocks);
    // createSecretKey copies the bytes into the KeyObject; the temporaries hold key material.
    const subkeys: KeyObject[] = [];
    for (let k = 0; k < count; k++) subkeys.push(createSecretKey(derived.subarray(32 * k, 32 * k + 32)));
    derived.fill(0);
    blocks.fill(0);
    return subkeys;
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return 'XaesKey <redacted>';
  }

  toJSON(): string {
    return 'XaesKey <redacted>';
  }
}

const GCM_OPTIONS = Object.freeze({ authTagLength: XAES_TAG_SIZE });

/** Returns ciphertext || 16-byte tag. `nonce` is the full 24-byte nonce; its last 12 bytes are the GCM IV. */
export function xaesSealWithSubkey(subkey: KeyObject, nonce: Buffer, plaintext: Buffer, aad: Buffer): Buffer {
  if (nonce.length !== XAES_NONCE_SIZE) throw new RangeError('XAES-256-GCM nonce must be 24 bytes');
  const cipher = createCipheriv('aes-256-gcm', subkey, nonce.subarray(XAES_NONCE_PREFIX_SIZE), GCM_OPTIONS);
  if (aad.length > 0) cipher.setAAD(aad);
  const out = Buffer.allocUnsafe(plaintext.length + XAES_TAG_SIZE);
  const ct = cipher.update(plaintext);
  ct.copy(out, 0);
  // GCM is a stream mode: final() never produces bytes, it only computes the tag.
  cipher.final();
  cipher.getAuthTag().copy(out, plaintext.length);
  return out;
}

/** Opens ciphertext || tag; throws if authentication fails (no plaintext is returned then). */
export function xaesOpenWithSubkey(subkey: KeyObject, nonce: Buffer, sealed: Buffer, aad: Buffer): Buffer {
  if (nonce.length !== XAES_NONCE_SIZE) throw new RangeError('XAES-256-GCM nonce must be 24 bytes');
  if (sealed.length < XAES_TAG_SIZE) throw new Error('XAES-256-GCM: message authentication failed');
  const ctLength = sealed.length - XAES_TAG_SIZE;
  const decipher = createDecipheriv('aes-256-gcm', subkey, nonce.subarray(XAES_NONCE_PREFIX_SIZE), GCM_OPTIONS);
  decipher.setAuthTag(sealed.subarray(ctLength));
  if (aad.length > 0) decipher.setAAD(aad);
  const plaintext = decipher.update(sealed.subarray(0, ctLength));
  try {
    decipher.final();
  } catch {
    plaintext.fill(0);
    throw new Error('XAES-256-GCM: message authentication failed');
  }
  return plaintext;
}

export function xaesSeal(key: XaesKey, nonce: Buffer, plaintext: Buffer, aad: Buffer): Buffer {
  if (nonce.length !== XAES_NONCE_SIZE) throw new RangeError('XAES-256-GCM nonce must be 24 bytes');
  return xaesSealWithSubkey(key.deriveSubkey(nonce), nonce, plaintext, aad);
}

export function xaesOpen(key: XaesKey, nonce: Buffer, sealed: Buffer, aad: Buffer): Buffer {
  if (nonce.length !== XAES_NONCE_SIZE) throw new RangeError('XAES-256-GCM nonce must be 24 bytes');
  return xaesOpenWithSubkey(key.deriveSubkey(nonce), nonce, sealed, aad);
}

/**
 * The intermediate values of the key derivation, for checking against the published
 * test vectors. Takes the raw key, so it reveals nothing the caller does not already hold.
 */
export function xaesIntermediates(key: Buffer, nonce: Buffer): { l: Buffer; k1: Buffer; derivedKey: Buffer } {
  const ecb = createSecretKey(key);
  const l = aesEcb(ecb, ZERO_BLOCK);
  const k1 = cmacSubkey(l);
  const derivedKey = new XaesKey(key).deriveSubkey(nonce).export();
  return { l, k1, derivedKey };
}
