/**
 * The echo guard of egress (DESIGN §13, §15): after a request whose tokens were decrypted
 * for a vendor, the vendor's answer may repeat a plaintext anywhere — an error message, a
 * redirect's `Location`, a cookie, an HTML page. The values at the paths the request
 * decrypted are encrypted again (EchoHandler); this module finds every other place the
 * answer still holds one, so that the answer is refused (502) rather than handing the
 * plaintext to the application.
 *
 * How it searches: the answer is not searched once per spelling a value could take. Each
 * header name and value and the body are NORMALISED once — every escape an answer writes
 * text in is decoded wherever it occurs: percent escapes (`%40`, `%2a`, any hex case; an
 * escaped byte that is no part of UTF-8 as the windows-1252 character it stands for, and
 * `%uXXXX` as JavaScript's escape() writes a UTF-16 unit), JSON
 * and JavaScript string escapes (`\/`, `\"`, `\uXXXX` of any character, surrogate pairs,
 * `\xHH`, `\u{H…}`, and the octal `\0`–`\377` of JavaScript, C and PHP),
 * HTML character references (`&#64;`, `&#x40;`, `&amp;`, `&lt;`, `&apos;` and the other
 * named references of ASCII punctuation; `&uuml;`, `&Scaron;` and the other names of Latin
 * letters with a diacritic, of Latin-1 symbols and of Greek letters). Decoding repeats, up
 * to MAX_LAYERS times, while it changes something, so an escape of an escape (`%2540`,
 * `&amp;#64;`, JSON inside HTML) is undone too. Then ASCII letters are lower-cased and `+`
 * reads as a space (form encoding), and the fullwidth forms of ASCII (`４２４２`) are read
 * as ASCII. The remembered values go through the same
 * normalisation, so an encoder's choice — which characters it escapes, `+` or `%20`,
 * `\u003c` or `<` — does not change what is compared.
 * All the values are then looked for in one pass over the normalised bytes: a rolling hash
 * of MIN_LENGTH bytes indexes them, and a hit is compared byte for byte. The cost is linear
 * in the size of the answer, whatever the number of values.
 *
 * What is looked for: each plaintext of at least MIN_LENGTH characters (once normalised;
 * a token of an object or array is remembered whole and by each string and number in it),
 * its first PREFIX_CHARS characters (an echo of the whole value holds its beginning); for a
 * number or code (`4242 4242 4242 4242`, `+1 (415) 555-0100`, an IBAN) its letters and
 * digits, looked for in the answer with the separators between letters and digits taken
 * out (separatorLength: ASCII punctuation numbers are grouped with, and typesetting's
 * spaces and dashes), so that no grouping hides it; for a value with letters beyond ASCII its windows-1252 bytes too (an
 * answer that names no charset is read so by many clients); and its base64 and base64url
 * at each of the three offsets it can have among the bytes encoded. A body with zero bytes
 * is searched again as UTF-16 and UTF-32 text, as JSON readers read one by where its zero
 * bytes fall, and a body that is a gzip or zlib file decompressed. Shorter values (a CVC,
 * an expiry month) are not searched: three or four digits occur by chance in timestamps and
 * ids, and a search for them would refuse good answers.
 *
 * What it cannot see: a value the vendor transforms other than by escaping it — an
 * encoding of its bytes other than base64 (hex, base32), base64 broken across lines, a
 * file compressed otherwise than gzip or zlib (zip, brotli) or twice, a hash, a changed
 * case of a non-ASCII letter, a named reference of another script (`&Acy;`) or without its
 * `;`, a number with digits left out, a part of it shorter than PREFIX_CHARS that is not
 * its beginning — and escapes nested deeper than MAX_LAYERS.
 *
 * Limits, each failing closed: at most MAX_VALUES values per request are remembered, and
 * an answer to a request that decrypted more is refused; a header value or body longer
 * than MAX_SCANNED bytes, or a compressed body that decompresses to more, is refused
 * rather than searched in part.
 */
import { constants as zlibConstants, gunzipSync, inflateSync } from 'node:zlib';
import { UpstreamResponseError } from '../errors.ts';
import { decryptsOutbound, type TransformRoute } from './transform-routes.ts';
import type { PlainType } from '../fields/value.ts';

/** Values shorter than this (in characters, once normalised) are not searched for. */
export const MIN_LENGTH = 8;
/** How much of each value is searched for. */
const PREFIX_CHARS = 64;
/** Distinct values a request may decrypt and still have its answer searched; more is a 502. */
export const MAX_VALUES = 1_000;
/** Bytes of one header value or body that are searched; a longer one is a 502. */
export const MAX_SCANNED = 64 * 1024 * 1024;
/** Rounds of decoding: an escape nested deeper than this is not undone. */
export const MAX_LAYERS = 4;
/**
 * A number or code as people write one (once normalised: lower case, `+` a space): digits,
 * or letters and digits, grouped by separators, with a phone's `+` and brackets.
 */
const GROUPED = /^[ (]?[0-9a-z][0-9a-z .\-/()]*[0-9a-z]$/;

/** The rolling hash over a window of MIN_LENGTH bytes. */
const WINDOW = MIN_LENGTH;
const BASE = 257;
const TOP = (() => {
  let p = 1;
  for (let i = 1; i < WINDOW; i++) p = Math.imul(p, BASE);
  return p;
})();
/** Bits of the hash kept in the pre-filter (a hit there is then looked up). */
const FILTER_MASK = 0xffff;

/**
 * Where a request's tokens were decrypted (path → classification), and the plaintexts
 * an answer must not repeat.
 */
export class DecryptedPaths extends Map<string, number> {
  /** The normalised values, searched for in the normalised answer. */
  private readonly text = new Needles();
  /**
   * Numbers and codes without their separators (`4242424242424242`, `de89370400440532013000`),
   * searched for in the normalised answer with the separators between letters and digits
   * taken out: `4242 4242 4242 4242`, `4242-4242-4242-4242` and `4242424242424242` are one
   * number however it is grouped, an IBAN one code with its spaces or without.
   */
  private readonly grouped = new Needles();
  private remembered = 0;
  /** More values were decrypted than can be searched for: the answer is refused. */
  private overflowed = false;

  /**
   * Remembers a value shown in plain (its text; the caller zeroes its own buffer). A token
   * of an object or array (`type` `j`) shows the JSON text of it: each string and number in
   * it is remembered too, since a vendor repeats a card's number, not the card.
   */
  remember(plaintext: Buffer, type: PlainType = 's'): void {
    if (type === 'j') for (const leaf of jsonLeaves(plaintext)) this.rememberOne(leaf);
    this.rememberOne(plaintext);
  }

  private rememberOne(plaintext: Buffer): void {
    // Its UTF-8 length is at least its number of characters: short values leave here unsplit.
    if (plaintext.length < MIN_LENGTH) return;
    const canonical = normalise(plaintext);
    const prefix = charPrefix(canonical, PREFIX_CHARS);
    if (prefix.chars < MIN_LENGTH) return;
    if (this.remembered >= MAX_VALUES) {
      this.overflowed = true;
      return;
    }
    this.remembered++;
    // Base64 of the value as the vendor got it, wherever it sits in what was encoded.
    for (const needle of base64Needles(charPrefix(plaintext, PREFIX_CHARS).bytes)) this.text.add(needle);
    // A number or a code with digits in it, with separators or without, is looked for as
    // its letters and digits, however grouped. (Words are not: `jo ann` is not `joann`.)
    if (canonical.length <= PREFIX_CHARS * 4) {
      const text = canonical.toString('latin1');
      if (GROUPED.test(text) && /[0-9]/.test(text)) {
        const joined = text.replace(/[^0-9a-z]/g, '');
        if (joined.length >= MIN_LENGTH) {
          this.grouped.add(Buffer.from(joined.slice(0, PREFIX_CHARS), 'latin1'));
          return;
        }
      }
    }
    this.text.add(prefix.bytes);
    // Letters beyond ASCII are looked for in the single-byte charset legacy servers write too.
    const legacy = singleByte(prefix.bytes);
    if (legacy !== null) {
      this.text.add(legacy.bytes);
      // Percent-escaped, those bytes decode (below) to the characters they stand for: as
      // far as windows-1252 could write the value, since a legacy encoder writes `?` beyond.
      this.text.add(Buffer.from(legacy.text, 'utf8'));
    }
  }

  /** Takes in the values `other` remembered (a query's and a body's, for one answer). */
  absorb(other: DecryptedPaths): void {
    for (const [path, classification] of other) this.set(path, classification);
    this.text.absorb(other.text);
    this.grouped.absorb(other.grouped);
    this.remembered += other.remembered;
    if (other.overflowed || this.remembered > MAX_VALUES) this.overflowed = true;
  }

  /** Whether an answer must be read whole and checked. */
  get searching(): boolean {
    return this.text.size > 0 || this.grouped.size > 0 || this.overflowed;
  }

  /**
   * Throws a 502 if a header name or value or the body (as it would be sent) repeats a remembered
   * plaintext, or if it cannot be searched in full. Names neither the value nor the vendor.
   */
  check(headers: Readonly<Record<string, string | string[] | undefined>>, body: Buffer | null): void {
    if (this.overflowed) throw new UpstreamResponseError(new Error(`the request decrypted more than ${MAX_VALUES} values, too many to search its answer for`));
    if (!this.searching) return;
    for (const name in headers) {
      const value = headers[name];
      if (value === undefined) continue;
      // A name is relayed to the application as its value is: `x-card-4242…` repeats a value too.
      if (this.holds(normalise(Buffer.from(name, 'latin1')))) throw refused('the name of one of its headers');
      for (const text of Array.isArray(value) ? value : [value]) {
        if (text.length > MAX_SCANNED) throw tooLarge(`its ${name} header`);
        // Header values arrive as latin1 text: their bytes, as the vendor sent them.
        if (this.holds(normalise(Buffer.from(text, 'latin1')))) throw refused(`its ${name} header`);
      }
    }
    if (body === null || body.length === 0) return;
    if (body.length > MAX_SCANNED) throw tooLarge('its body');
    this.checkBody(body, 'its body');
    // A gzip or zlib file (an export, `application/gzip`) is what its reader decompresses.
    const inflated = decompressed(body);
    if (inflated !== null) this.checkBody(inflated, 'its body, decompressed');
  }

  private checkBody(body: Buffer, where: string): void {
    if (this.holds(normalise(body))) throw refused(where);
    // UTF-8 text holds no zero byte; text in UTF-16 or UTF-32 does, in every ASCII character.
    if (body.includes(0)) {
      for (const text of wideReadings(body)) if (this.holds(normalise(text))) throw refused(`${where}, read as UTF-16 or UTF-32`);
    }
  }

  /** Whether a normalised `haystack` holds a value: as written, or a number or code however grouped. */
  private holds(haystack: Buffer): boolean {
    return this.text.holds(haystack) || (this.grouped.size > 0 && this.grouped.holds(withoutSeparators(haystack)));
  }
}

/** Byte strings looked for all at once: a rolling hash of their first WINDOW bytes indexes them. */
class Needles {
  /** By their bytes (latin1 key). */
  private readonly needles = new Map<string, Buffer>();
  /** Needles by the hash of their first WINDOW bytes. */
  private readonly byHash = new Map<number, Buffer[]>();
  private readonly filter = new Uint8Array(FILTER_MASK + 1);

  get size(): number {
    return this.needles.size;
  }

  add(needle: Buffer): void {
    const key = needle.toString('latin1');
    if (this.needles.has(key)) return;
    this.needles.set(key, needle);
    const hash = windowHash(needle, 0);
    const list = this.byHash.get(hash);
    if (list === undefined) this.byHash.set(hash, [needle]);
    else list.push(needle);
    this.filter[hash & FILTER_MASK] = 1;
  }

  absorb(other: Needles): void {
    for (const needle of other.needles.values()) this.add(needle);
  }

  /** Whether a normalised `haystack` holds a needle: one pass, a rolling hash per position. */
  holds(haystack: Buffer): boolean {
    const n = haystack.length;
    if (n < WINDOW) return false;
    let hash = windowHash(haystack, 0);
    for (let i = 0; ; i++) {
      if (this.filter[hash & FILTER_MASK] === 1) {
        const list = this.byHash.get(hash);
        if (list !== undefined) {
          for (const needle of list) {
            const end = i + needle.length;
            if (end <= n && haystack.compare(needle, 0, needle.length, i, end) === 0) return true;
          }
        }
      }
      if (i + WINDOW >= n) return false;
      hash = (Math.imul((hash - Math.imul(haystack[i]!, TOP)) | 0, BASE) + haystack[i + WINDOW]!) | 0;
    }
  }
}

/**
 * What may stand between the groups of a number or code, as ASCII: `4242 4242`, `4242-4242`,
 * `12.34`, `12/34`, `(415) 555` (`+` is a space once normalised), and the tab, `_`, `,`,
 * `:`, `'`, `|` and `*` of other formats and of masks.
 */
const ASCII_SEPARATORS = (() => {
  const table = new Uint8Array(0x80);
  for (const b of [0x20, 0x09, 0x2d, 0x2e, 0x2f, 0x28, 0x29, 0x5f, 0x2c, 0x3a, 0x27, 0x7c, 0x2a]) table[b] = 1;
  return table;
})();

/**
 * The length in bytes of a separator at `buf[i]` (UTF-8), 0 when there is none: the ASCII
 * ones, and the spaces, dashes and dots typesetting groups digits with — no-break space
 * (`&nbsp;`, U+00A0), middle dot (U+00B7), the spaces U+2000–U+200B (figure and thin space
 * among them), the hyphens and dashes U+2010–U+2015, narrow no-break space (U+202F, French
 * grouping), word joiner (U+2060), minus sign (U+2212), ideographic space (U+3000) and the
 * zero-width no-break space (U+FEFF).
 */
function separatorLength(buf: Buffer, i: number): number {
  const b = buf[i]!;
  if (b < 0x80) return ASCII_SEPARATORS[b]!;
  const b1 = buf[i + 1];
  const b2 = buf[i + 2];
  if (b === 0xc2) return b1 === 0xa0 || b1 === 0xb7 ? 2 : 0;
  if (b === 0xe2 && b1 === 0x80 && b2 !== undefined) return b2 <= 0x8b || (b2 >= 0x90 && b2 <= 0x95) || b2 === 0xaf ? 3 : 0;
  if (b === 0xe2 && b1 === 0x81) return b2 === 0xa0 ? 3 : 0;
  if (b === 0xe2 && b1 === 0x88) return b2 === 0x92 ? 3 : 0;
  if (b === 0xe3 && b1 === 0x80) return b2 === 0x80 ? 3 : 0;
  if (b === 0xef && b1 === 0xbb) return b2 === 0xbf ? 3 : 0;
  return 0;
}

/**
 * `haystack` (normalised: lower case) with every run of separators that stands between two
 * letters or digits taken out, so that a number or code reads the same however it is
 * grouped; the same buffer when there is none.
 */
function withoutSeparators(haystack: Buffer): Buffer {
  let out: Buffer | null = null;
  let o = 0;
  for (let i = 0; i < haystack.length; i++) {
    const b = haystack[i]!;
    if (i > 0 && isAlphanumeric(haystack[i - 1]!) && separatorLength(haystack, i) > 0) {
      let j = i;
      while (j < haystack.length) {
        const length = separatorLength(haystack, j);
        if (length === 0) break;
        j += length;
      }
      if (j < haystack.length && isAlphanumeric(haystack[j]!)) {
        if (out === null) {
          out = Buffer.allocUnsafe(haystack.length);
          haystack.copy(out, 0, 0, i);
          o = i;
        }
        i = j - 1;
        continue;
      }
    }
    if (out !== null) out[o++] = b;
  }
  return out === null ? haystack : out.subarray(0, o);
}

/**
 * A body that starts as gzip (`1f 8b`) or zlib (a deflate header whose check bits hold)
 * does, decompressed: as much as decompresses, so that a cut or damaged stream still shows
 * what a streaming reader would get. Null for anything else, or what does not decompress.
 * More than MAX_SCANNED bytes of it is refused rather than searched in part.
 */
function decompressed(body: Buffer): Buffer | null {
  if (body.length < 2) return null;
  const gzip = body[0] === 0x1f && body[1] === 0x8b;
  const zlib = (body[0]! & 0x0f) === 8 && (body[0]! >> 4) <= 7 && ((body[0]! << 8) | body[1]!) % 31 === 0;
  if (!gzip && !zlib) return null;
  const options = { maxOutputLength: MAX_SCANNED, finishFlush: zlibConstants.Z_SYNC_FLUSH };
  try {
    return gzip ? gunzipSync(body, options) : inflateSync(body, options);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge('its body, decompressed');
    return null;
  }
}

/**
 * `body` read as UTF-16 and UTF-32, as UTF-8: what a client that goes by the byte-order
 * mark or by where the zero bytes fall (JSON readers do, RFC 4627 §3, whatever the content
 * type says) reads in an answer that names no charset. UTF-16 at both byte alignments, for
 * text that starts at an odd offset inside a binary answer; UTF-32 from its start.
 */
function* wideReadings(body: Buffer): Generator<Buffer> {
  // One at a time: a reading may be as large as the body.
  for (const start of [0, 1]) {
    const units = body.subarray(start, start + ((body.length - start) & ~1));
    yield Buffer.from(units.toString('utf16le'), 'utf8');
    yield Buffer.from(Buffer.from(units).swap16().toString('utf16le'), 'utf8');
  }
  yield utf32(body, true);
  yield utf32(body, false);
}

/** UTF-32 (little- or big-endian) as UTF-8; a unit that is no character becomes U+FFFD. */
function utf32(body: Buffer, little: boolean): Buffer {
  const out = Buffer.allocUnsafe(body.length);
  let o = 0;
  for (let i = 0; i + 4 <= body.length; i += 4) {
    const unit = little ? body.readUInt32LE(i) : body.readUInt32BE(i);
    o = putCodePoint(out, o, unit > 0x10ffff || (unit >= 0xd800 && unit <= 0xdfff) ? 0xfffd : unit);
  }
  return out.subarray(0, o);
}

/**
 * The strings and numbers of a JSON document, at any depth (not its keys): each string's
 * text, each number as it is written (`4242424242424242424` would lose digits as a double).
 * None when it is not JSON.
 */
function jsonLeaves(json: Buffer): Buffer[] {
  const leaves: Buffer[] = [];
  try {
    JSON.parse(json.toString('utf8'), (_key, value: unknown, context?: { source?: string }) => {
      if (typeof value === 'string') leaves.push(Buffer.from(value, 'utf8'));
      else if (typeof value === 'number') leaves.push(Buffer.from(context?.source ?? String(value), 'latin1'));
      return value;
    });
  } catch {
    return [];
  }
  return leaves;
}

function windowHash(bytes: Buffer, start: number): number {
  let hash = 0;
  for (let k = 0; k < WINDOW; k++) hash = (Math.imul(hash, BASE) + bytes[start + k]!) | 0;
  return hash;
}

function refused(where: string): UpstreamResponseError {
  return new UpstreamResponseError(new Error(`the answer repeats a value decrypted for this request in ${where}, where it cannot be encrypted again`));
}

function tooLarge(where: string): UpstreamResponseError {
  return new UpstreamResponseError(new Error(`the answer is too large to search for values decrypted for this request in ${where}`));
}

/**
 * What base64 (and base64url) text holds `value` wherever it sits in the bytes encoded:
 * one spelling per offset of its first byte in a group of three, each without the
 * characters its neighbours also shape; normalised as an answer is (lower case, `+` a
 * space). None shorter than MIN_LENGTH.
 */
function base64Needles(value: Buffer): Buffer[] {
  const needles: Buffer[] = [];
  for (let offset = 0; offset < 3; offset++) {
    const padded = Buffer.concat([Buffer.alloc(offset), value]);
    const whole = Math.floor(padded.length / 3) * 4;
    const standard = padded.toString('base64').slice(offset === 0 ? 0 : 4, whole);
    if (standard.length < MIN_LENGTH) continue;
    needles.push(normalise(Buffer.from(standard, 'latin1')));
    needles.push(normalise(Buffer.from(standard.replaceAll('+', '-').replaceAll('/', '_'), 'latin1')));
  }
  return needles;
}

/**
 * Windows-1252 for U+0080 to U+009F's place: the letters and marks it puts there, by code
 * point. The rest of it is ISO-8859-1 (U+00A0 to U+00FF as one byte each).
 */
const WINDOWS_1252: ReadonlyMap<number, number> = new Map([
  [0x20ac, 0x80], [0x201a, 0x82], [0x192, 0x83], [0x201e, 0x84], [0x2026, 0x85], [0x2020, 0x86], [0x2021, 0x87],
  [0x2c6, 0x88], [0x2030, 0x89], [0x160, 0x8a], [0x2039, 0x8b], [0x152, 0x8c], [0x17d, 0x8e], [0x2018, 0x91],
  [0x2019, 0x92], [0x201c, 0x93], [0x201d, 0x94], [0x2022, 0x95], [0x2013, 0x96], [0x2014, 0x97], [0x2dc, 0x98],
  [0x2122, 0x99], [0x161, 0x9a], [0x203a, 0x9b], [0x153, 0x9c], [0x17e, 0x9e], [0x178, 0x9f],
]);

/**
 * A normalised UTF-8 value with letters beyond ASCII as an answer that names no charset may
 * hold it: in windows-1252 (ISO-8859-1 where they agree), which clients read such text as
 * (Python's requests reads `text/*` as ISO-8859-1, browsers as windows-1252). As far as the
 * charset can write it, when that is at least MIN_LENGTH characters; null for an ASCII
 * value (the same bytes already) or one that starts with too few writable characters.
 */
function singleByte(utf8: Buffer): { bytes: Buffer; text: string } | null {
  if (utf8.every((b) => b < 0x80)) return null;
  const out: number[] = [];
  let text = '';
  for (const c of utf8.toString('utf8')) {
    const code = c.codePointAt(0)!;
    const byte = code < 0x80 || (code >= 0xa0 && code <= 0xff) ? code : WINDOWS_1252.get(code);
    if (byte === undefined) break;
    out.push(byte);
    text += c;
  }
  return out.length >= MIN_LENGTH ? { bytes: Buffer.from(out), text } : null;
}

/** The character windows-1252 writes as `byte` (0x80 or more); ISO-8859-1's where it has none. */
const FROM_WINDOWS_1252: ReadonlyMap<number, number> = new Map([...WINDOWS_1252].map(([codePoint, byte]) => [byte, codePoint]));

/** The first `max` characters of UTF-8 `bytes` (cut at a character's start), and how many there are. */
function charPrefix(bytes: Buffer, max: number): { bytes: Buffer; chars: number } {
  let chars = 0;
  for (let i = 0; i < bytes.length; i++) {
    if ((bytes[i]! & 0xc0) === 0x80) continue;
    if (chars === max) return { bytes: bytes.subarray(0, i), chars };
    chars++;
  }
  return { bytes, chars };
}

/**
 * `bytes` with every escape decoded (repeatedly, up to MAX_LAYERS rounds, while a round
 * decodes something), then A–Z as a–z and `+` as a space. Other bytes, UTF-8 included,
 * are kept.
 */
export function normalise(bytes: Buffer): Buffer {
  let out = bytes;
  for (let round = 0; round < MAX_LAYERS; round++) {
    const next = decodeOnce(out);
    out = next.bytes;
    if (!next.decoded) break;
  }
  // `out` is decodeOnce's own buffer, never `bytes`: it is lower-cased in place.
  let wide = false;
  for (let i = 0; i < out.length; i++) {
    const b = out[i]!;
    if (b >= 0x41 && b <= 0x5a) out[i] = b + 0x20;
    else if (b === 0x2b) out[i] = 0x20;
    else if (b === 0xef) wide = true;
  }
  return wide ? foldFullwidth(out) : out;
}

/**
 * `text` (lower-cased already) with the fullwidth forms of ASCII (U+FF01–U+FF5E: `４２４２`,
 * as CJK text writes digits and letters) folded to ASCII, in place: three bytes to one, so
 * the buffer only shrinks.
 */
function foldFullwidth(text: Buffer): Buffer {
  let o = 0;
  for (let i = 0; i < text.length; i++) {
    let b = text[i]!;
    const b1 = text[i + 1];
    const b2 = text[i + 2];
    if (b === 0xef && (b1 === 0xbc || b1 === 0xbd) && b2 !== undefined && b2 >= 0x80 && b2 <= 0xbf) {
      const codePoint = 0xf000 | ((b1 & 0x3f) << 6) | (b2 & 0x3f);
      if (codePoint >= 0xff01 && codePoint <= 0xff5e) {
        b = codePoint - 0xfee0;
        if (b >= 0x41 && b <= 0x5a) b += 0x20;
        else if (b === 0x2b) b = 0x20;
        i += 2;
      }
    }
    text[o++] = b;
  }
  return text.subarray(0, o);
}

/** What one round of decoding wrote, and whether it found anything to decode. */
interface Decoded {
  readonly bytes: Buffer;
  readonly decoded: boolean;
}

/**
 * One round of decoding: percent escapes, JSON/JavaScript string escapes, HTML character
 * references. `bytes` is always a new buffer. `decoded` is told, not inferred from the
 * length: one escape is as long as what it stands for (`%80` is `€`, three bytes in UTF-8).
 */
function decodeOnce(src: Buffer): Decoded {
  let decoded = false;
  const n = src.length;
  const out = Buffer.allocUnsafe(n);
  let o = 0;
  let i = 0;
  while (i < n) {
    const b = src[i]!;
    if (b === 0x25 /* % */) {
      const byte = hexValue(src, i + 1, 2);
      if (byte >= 0x80) {
        // Escaped UTF-8 is kept as its bytes; an escaped byte that starts no UTF-8 sequence
        // there is a windows-1252 (Latin-1) character, as escape() writes `ü` (`%FC`) beside
        // `%u0165`, and a legacy form encoder `Š` (`%8A`).
        const length = escapedUtf8Length(src, i, byte);
        decoded = true;
        if (length === 0) {
          o = putCodePoint(out, o, FROM_WINDOWS_1252.get(byte) ?? byte);
          i += 3;
          continue;
        }
        for (let k = 0; k < length; k++) out[o++] = hexValue(src, i + 3 * k + 1, 2);
        i += 3 * length;
        continue;
      }
      if (byte >= 0) {
        decoded = true;
        out[o++] = byte;
        i += 3;
        continue;
      }
      // JavaScript's escape() (and servers that read it): `%u0160` for a UTF-16 unit.
      if (src[i + 1] === 0x75 || src[i + 1] === 0x55) {
        const codePoint = utf16Escape(src, i, b);
        if (codePoint >= 0) {
          decoded = true;
          o = putCodePoint(out, o, codePoint);
          i += utf16EscapeLength(codePoint);
          continue;
        }
      }
    } else if (b === 0x5c /* \ */ && i + 1 < n) {
      const c = src[i + 1]!;
      if (c === 0x75 /* u */ && src[i + 2] === 0x7b /* { */) {
        // JavaScript's `\u{1F600}`: one to six hex digits of a code point.
        const escape = braceEscape(src, i + 3);
        if (escape.value >= 0) {
          decoded = true;
          o = putCodePoint(out, o, escape.value);
          i += escape.length;
          continue;
        }
      } else if (c === 0x75 /* u */) {
        const codePoint = utf16Escape(src, i, b);
        if (codePoint >= 0) {
          decoded = true;
          o = putCodePoint(out, o, codePoint);
          i += utf16EscapeLength(codePoint);
          continue;
        }
        // A lone surrogate stays as it is written.
      } else if (c === 0x78 /* x */ || (c >= 0x30 && c <= 0x37) /* 0-7 */) {
        // JavaScript's `\xHH` and the octal `\0`–`\377` of JavaScript, C and PHP strings.
        const escape = c === 0x78 ? { value: hexValue(src, i + 2, 2), length: 4 } : octalEscape(src, i + 1);
        if (escape.value >= 0) {
          decoded = true;
          o = putCodePoint(out, o, escape.value);
          i += escape.length;
          continue;
        }
      } else {
        const simple = SIMPLE_ESCAPES[c];
        if (simple !== undefined) {
          decoded = true;
          out[o++] = simple;
          i += 2;
          continue;
        }
      }
    } else if (b === 0x26 /* & */) {
      const entity = htmlReference(src, i);
      if (entity !== null) {
        decoded = true;
        o = putCodePoint(out, o, entity.codePoint);
        i += entity.length;
        continue;
      }
    }
    out[o++] = b;
    i++;
  }
  return { bytes: out.subarray(0, o), decoded };
}

/**
 * How many `%XX` escapes from `src[at]` (whose first byte is `lead`, 0x80 or more) spell
 * one UTF-8 character; 0 when they spell none (a lone continuation byte, a lead byte not
 * followed by escaped continuation bytes, an overlong or out-of-range form).
 */
function escapedUtf8Length(src: Buffer, at: number, lead: number): number {
  const length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
  if (length === 0) return 0;
  for (let k = 1; k < length; k++) {
    if (src[at + 3 * k] !== 0x25) return 0;
    const next = hexValue(src, at + 3 * k + 1, 2);
    // The second byte's range after E0, ED, F0 and F4 excludes overlong forms, surrogates
    // and code points past U+10FFFF (RFC 3629 §4); every other continuation is 80-BF.
    const low = k > 1 ? 0x80 : lead === 0xe0 ? 0xa0 : lead === 0xf0 ? 0x90 : 0x80;
    const high = k > 1 ? 0xbf : lead === 0xed ? 0x9f : lead === 0xf4 ? 0x8f : 0xbf;
    if (next < low || next > high) return 0;
  }
  return length;
}

/**
 * The code point of the UTF-16 escape at `src[at]` — `\uXXXX` or `%uXXXX` (`lead` is `\`
 * or `%`), or a surrogate pair of two written the same way; -1 when there is none there
 * (a lone surrogate is no character).
 */
function utf16Escape(src: Buffer, at: number, lead: number): number {
  const unit = hexValue(src, at + 2, 4);
  if (unit < 0) return -1;
  if (unit < 0xd800 || unit > 0xdfff) return unit;
  if (unit <= 0xdbff && src[at + 6] === lead && (src[at + 7] === 0x75 || (lead === 0x25 && src[at + 7] === 0x55))) {
    const low = hexValue(src, at + 8, 4);
    if (low >= 0xdc00 && low <= 0xdfff) return 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
  }
  return -1;
}

/**
 * The octal escape whose digits start at `src[at]` (after the backslash): one to three
 * digits, at most `\377`; its value and the escape's length with the backslash, or -1.
 */
function octalEscape(src: Buffer, at: number): { value: number; length: number } {
  let value = 0;
  let k = 0;
  while (k < 3 && at + k < src.length && src[at + k]! >= 0x30 && src[at + k]! <= 0x37 && value * 8 + (src[at + k]! - 0x30) <= 0xff) {
    value = value * 8 + (src[at + k]! - 0x30);
    k++;
  }
  return k === 0 ? { value: -1, length: 0 } : { value, length: k + 1 };
}

/**
 * The `\u{...}` escape whose hex digits start at `src[at]` (after `\u{`): one to six
 * digits and `}`, a code point that is no surrogate; its value and the escape's whole
 * length, or -1.
 */
function braceEscape(src: Buffer, at: number): { value: number; length: number } {
  let value = 0;
  let k = 0;
  while (k < 6 && at + k < src.length && hexDigit(src[at + k]!) >= 0) {
    value = value * 16 + hexDigit(src[at + k]!);
    k++;
  }
  if (k === 0 || src[at + k] !== 0x7d || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) return { value: -1, length: 0 };
  return { value, length: k + 4 };
}

/** How long the escape utf16Escape read was: one unit below U+10000, a surrogate pair above. */
function utf16EscapeLength(codePoint: number): number {
  return codePoint > 0xffff ? 12 : 6;
}

/** `\x` escapes of JSON and JavaScript strings, by the byte after the backslash. */
const SIMPLE_ESCAPES: Readonly<Record<number, number>> = {
  0x22: 0x22, // \"
  0x27: 0x27, // \'
  0x2f: 0x2f, // \/
  0x5c: 0x5c, // \\
  0x62: 0x08, // \b
  0x66: 0x0c, // \f
  0x6e: 0x0a, // \n
  0x72: 0x0d, // \r
  0x74: 0x09, // \t
};

/** HTML's named references for ASCII characters (and the no-break space), lower case. */
const NAMED: ReadonlyMap<string, number> = new Map([
  ['amp', 0x26], ['quot', 0x22], ['apos', 0x27], ['lt', 0x3c], ['gt', 0x3e], ['nbsp', 0xa0],
  ['excl', 0x21], ['num', 0x23], ['dollar', 0x24], ['percnt', 0x25], ['lpar', 0x28], ['rpar', 0x29],
  ['ast', 0x2a], ['midast', 0x2a], ['plus', 0x2b], ['comma', 0x2c], ['period', 0x2e], ['sol', 0x2f],
  ['colon', 0x3a], ['semi', 0x3b], ['equals', 0x3d], ['quest', 0x3f], ['commat', 0x40], ['lsqb', 0x5b],
  ['lbrack', 0x5b], ['bsol', 0x5c], ['rsqb', 0x5d], ['rbrack', 0x5d], ['hat', 0x5e], ['lowbar', 0x5f],
  ['underbar', 0x5f], ['grave', 0x60], ['diacriticalgrave', 0x60], ['lcub', 0x7b], ['lbrace', 0x7b],
  ['verbar', 0x7c], ['vert', 0x7c], ['verticalline', 0x7c], ['rcub', 0x7d], ['rbrace', 0x7d],
  ['tab', 0x09], ['newline', 0x0a],
]);
const LONGEST_NAME = 16;

/**
 * Named references of letters and symbols beyond ASCII, as HTML writes them (PHP's
 * `htmlentities`, template engines that escape every character with a name): compared case
 * by case, since `&Uuml;` is Ü and `&uuml;` is ü. Latin letters with a diacritic are named
 * after the letter and the mark (`uuml`, `Scaron`, `tcaron`, `aogon`): each such name is the
 * letter and the mark composed (NFC), so the table is built rather than written out.
 */
const NAMED_EXACT: ReadonlyMap<string, number> = (() => {
  const named = new Map<string, number>();
  const marks: ReadonlyArray<[string, number]> = [
    ['grave', 0x300], ['acute', 0x301], ['circ', 0x302], ['tilde', 0x303], ['macr', 0x304], ['breve', 0x306],
    ['dot', 0x307], ['uml', 0x308], ['ring', 0x30a], ['dblac', 0x30b], ['caron', 0x30c], ['cedil', 0x327], ['ogon', 0x328],
  ];
  for (let letter = 0x41; letter <= 0x7a; letter++) {
    if (letter > 0x5a && letter < 0x61) continue;
    for (const [name, mark] of marks) {
      const composed = String.fromCodePoint(letter, mark).normalize('NFC');
      if (composed.length === 1) named.set(`${String.fromCharCode(letter)}${name}`, composed.codePointAt(0)!);
    }
  }
  const others: ReadonlyArray<[string, number]> = [
    ['AElig', 0xc6], ['aelig', 0xe6], ['ETH', 0xd0], ['eth', 0xf0], ['Oslash', 0xd8], ['oslash', 0xf8], ['THORN', 0xde],
    ['thorn', 0xfe], ['szlig', 0xdf], ['times', 0xd7], ['divide', 0xf7], ['OElig', 0x152], ['oelig', 0x153],
    ['Dstrok', 0x110], ['dstrok', 0x111], ['Hstrok', 0x126], ['hstrok', 0x127], ['Lstrok', 0x141], ['lstrok', 0x142],
    ['Tstrok', 0x166], ['tstrok', 0x167], ['Lmidot', 0x13f], ['lmidot', 0x140], ['ENG', 0x14a], ['eng', 0x14b],
    ['IJlig', 0x132], ['ijlig', 0x133], ['inodot', 0x131], ['imath', 0x131], ['kgreen', 0x138], ['napos', 0x149],
    ['ndash', 0x2013], ['mdash', 0x2014], ['hyphen', 0x2010], ['lsquo', 0x2018], ['rsquo', 0x2019], ['sbquo', 0x201a],
    ['ldquo', 0x201c], ['rdquo', 0x201d], ['bdquo', 0x201e], ['hellip', 0x2026], ['euro', 0x20ac],
  ];
  for (const [name, codePoint] of others) named.set(name, codePoint);
  // Latin-1's symbols, U+00A1 to U+00BF in order.
  const latin1 = 'iexcl cent pound curren yen brvbar sect uml copy ordf laquo not shy reg macr deg plusmn sup2 sup3 acute micro para middot cedil sup1 ordm raquo frac14 frac12 frac34 iquest';
  latin1.split(' ').forEach((name, i) => named.set(name, 0xa1 + i));
  // Greek letters: U+0391 Alpha to U+03A9 Omega (no letter at U+03A2), U+03B1 alpha to U+03C9 omega.
  const greek = 'Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa Lambda Mu Nu Xi Omicron Pi Rho Sigma Tau Upsilon Phi Chi Psi Omega'.split(' ');
  greek.forEach((name, i) => {
    named.set(name, 0x391 + i + (i >= 17 ? 1 : 0));
    named.set(name.toLowerCase(), 0x3b1 + i + (i >= 17 ? 1 : 0));
  });
  named.set('sigmaf', 0x3c2);
  return named;
})();

/** The HTML character reference at `src[at]` (`&`): `&#64;`, `&#x40;` (`;` optional), `&commat;`, `&uuml;`. */
function htmlReference(src: Buffer, at: number): { codePoint: number; length: number } | null {
  let i = at + 1;
  if (src[i] === 0x23 /* # */) {
    i++;
    const hex = src[i] === 0x78 || src[i] === 0x58;
    if (hex) i++;
    const start = i;
    let value = 0;
    while (i < src.length && i - start < 10) {
      const d = hex ? hexDigit(src[i]!) : decDigit(src[i]!);
      if (d < 0) break;
      value = value * (hex ? 16 : 10) + d;
      i++;
    }
    if (i === start || value === 0 || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) return null;
    if (src[i] === 0x3b) i++;
    return { codePoint: value, length: i - at };
  }
  const start = i;
  while (i < src.length && i - start <= LONGEST_NAME && isAlphanumeric(src[i]!)) i++;
  if (src[i] !== 0x3b || i === start) return null;
  const name = src.toString('latin1', start, i);
  const codePoint = NAMED_EXACT.get(name) ?? NAMED.get(name.toLowerCase());
  return codePoint === undefined ? null : { codePoint, length: i + 1 - at };
}

function isAlphanumeric(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a);
}

function decDigit(b: number): number {
  return b >= 0x30 && b <= 0x39 ? b - 0x30 : -1;
}

function hexDigit(b: number): number {
  if (b >= 0x30 && b <= 0x39) return b - 0x30;
  if (b >= 0x61 && b <= 0x66) return b - 0x57;
  if (b >= 0x41 && b <= 0x46) return b - 0x37;
  return -1;
}

/** The value of `count` hex digits at `src[at]`, or -1. */
function hexValue(src: Buffer, at: number, count: number): number {
  if (at + count > src.length) return -1;
  let value = 0;
  for (let k = 0; k < count; k++) {
    const d = hexDigit(src[at + k]!);
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

/** Writes `cp` as UTF-8 at `out[o]`; returns the next offset. */
function putCodePoint(out: Buffer, o: number, cp: number): number {
  if (cp < 0x80) {
    out[o++] = cp;
  } else if (cp < 0x800) {
    out[o++] = 0xc0 | (cp >> 6);
    out[o++] = 0x80 | (cp & 0x3f);
  } else if (cp < 0x10000) {
    out[o++] = 0xe0 | (cp >> 12);
    out[o++] = 0x80 | ((cp >> 6) & 0x3f);
    out[o++] = 0x80 | (cp & 0x3f);
  } else {
    out[o++] = 0xf0 | (cp >> 18);
    out[o++] = 0x80 | ((cp >> 12) & 0x3f);
    out[o++] = 0x80 | ((cp >> 6) & 0x3f);
    out[o++] = 0x80 | (cp & 0x3f);
  }
  return o;
}

/**
 * Whether a route's answers are guarded (DESIGN §13): its request or query decrypts, and its
 * answer is neither relayed as it is (`response: passthrough`, the one opt-out) nor
 * decrypted for the application. With no `response` the values are encrypted again where
 * they were decrypted; with a `response` that encrypts fields of its own the answer is
 * still searched, since naming more to encrypt is no reason to hand back what was decrypted.
 */
export function guardsAnswers(route: TransformRoute, passthrough: boolean): boolean {
  return decryptsOutbound(route) && !passthrough && route.response?.mode !== 'decrypt';
}

/**
 * Where the query's and the body's tokens were decrypted, and their values, for an answer
 * that must not echo them; null when the route does not guard its answers.
 */
export function joinDecrypted(query: DecryptedPaths | null, body: DecryptedPaths | null, echoes: boolean): DecryptedPaths | null {
  if (!echoes) return null;
  if (query === null || query.size === 0) return body;
  if (body === null || body.size === 0) return query;
  const joined = new DecryptedPaths();
  joined.absorb(query);
  joined.absorb(body);
  return joined;
}
