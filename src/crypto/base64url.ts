/**
 * Strict base64url (RFC 4648 §5) for tokens and JWTs: only the canonical text of each byte
 * string is accepted — no padding, no `+` or `/`, no whitespace, no length of the form
 * 4n+1, and the unused low bits of the last character zero (RFC 4648 §3.5). Node's
 * `Buffer.from(text, 'base64url')` accepts all of those and silently drops what it does not
 * understand, so several texts would decode to one byte string: a token or a signature
 * would then not be the one text its MAC vouches for.
 *
 * Decoding is on the hot path (every token a request decrypts), so it is one pass over
 * the text with a lookup table that checks and decodes together, writing into a buffer the
 * caller provides.
 */

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** Six-bit value of each ASCII code; -1 for everything outside the alphabet. */
const VALUES = new Int8Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) VALUES[ALPHABET.charCodeAt(i)] = i;

function valueOf(text: string, i: number): number {
  const code = text.charCodeAt(i);
  return code < 128 ? VALUES[code]! : -1;
}

/**
 * Bytes that `text[start..end)` decodes to if it is canonical; -1 when its length can be
 * no canonical text's (4n+1) or its last character carries non-zero unused bits. The
 * alphabet is checked by the decoder.
 */
export function base64urlDecodedLength(text: string, start = 0, end = text.length): number {
  const length = end - start;
  const rest = length & 3;
  if (rest === 1) return -1;
  if (rest !== 0) {
    const last = valueOf(text, end - 1);
    if (last < 0 || (last & (rest === 2 ? 0x0f : 0x03)) !== 0) return -1;
  }
  return ((length - rest) / 4) * 3 + (rest === 0 ? 0 : rest - 1);
}

/**
 * Decodes canonical `text[start..end)` into `target` at `offset`; returns the bytes written,
 * or -1 if the text is not canonical base64url (`target` may then hold part of it). The
 * caller makes room for `base64urlDecodedLength` bytes.
 */
export function decodeBase64urlInto(text: string, start: number, end: number, target: Uint8Array, offset: number): number {
  const size = base64urlDecodedLength(text, start, end);
  if (size < 0 || target.length - offset < size) return -1;
  const rest = (end - start) & 3;
  const whole = end - rest;
  let o = offset;
  let i = start;
  for (; i < whole; i += 4) {
    const a = valueOf(text, i);
    const b = valueOf(text, i + 1);
    const c = valueOf(text, i + 2);
    const d = valueOf(text, i + 3);
    if ((a | b | c | d) < 0) return -1;
    target[o] = (a << 2) | (b >> 4);
    target[o + 1] = ((b & 0x0f) << 4) | (c >> 2);
    target[o + 2] = ((c & 0x03) << 6) | d;
    o += 3;
  }
  if (rest !== 0) {
    const a = valueOf(text, i);
    const b = valueOf(text, i + 1);
    if ((a | b) < 0) return -1;
    target[o++] = (a << 2) | (b >> 4);
    if (rest === 3) {
      const c = valueOf(text, i + 2);
      if (c < 0) return -1;
      target[o++] = ((b & 0x0f) << 4) | (c >> 2);
    }
  }
  return o - offset;
}

/** The bytes of canonical base64url `text`, or null. */
export function decodeBase64url(text: string): Buffer | null {
  const size = base64urlDecodedLength(text);
  if (size < 0) return null;
  const out = Buffer.allocUnsafe(size);
  return decodeBase64urlInto(text, 0, text.length, out, 0) === size ? out : null;
}

/** True when `text[start..end)` is canonical base64url (checked, not decoded). */
export function isCanonicalBase64url(text: string, start = 0, end = text.length): boolean {
  if (base64urlDecodedLength(text, start, end) < 0) return false;
  for (let i = start; i < end; i++) if (valueOf(text, i) < 0) return false;
  return true;
}
