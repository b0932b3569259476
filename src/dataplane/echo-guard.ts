/**
 * The echo guard of egress (DESIGN §13, §15): after a request whose tokens were decrypted
 * for a vendor, the vendor's answer may repeat a plaintext anywhere — an error message, a
 * redirect's `Location`, a cookie, an HTML page. The values at the paths the request
 * decrypted are encrypted again (EchoHandler); this module finds every other place the
 * answer still holds one, so that the answer is refused (502) rather than handing the
 * plaintext to the application.
 *
 * What is searched: each plaintext of at least MIN_LENGTH characters, its first
 * PREFIX_CHARS characters (an echo of the whole value holds its beginning), in the
 * spellings an answer writes text in: as it is, JSON-escaped, percent-encoded (`%40`, and
 * `+` for a space), and for a number written with separators (`4242 4242 4242 4242`) its
 * digits alone. Matching ignores ASCII case. Shorter values (a CVC, an expiry month) are
 * not searched: three or four digits occur by chance in timestamps and ids, and a search
 * for them would refuse good answers.
 */
import { UpstreamResponseError } from '../errors.ts';

/** Values shorter than this are not searched for (see above). */
export const MIN_LENGTH = 8;
/** How much of each value is searched for. */
const PREFIX_CHARS = 64;
/** Distinct values kept per request: a request that decrypts more is searched for these. */
const MAX_VALUES = 1_000;
const DIGITS_AND_SEPARATORS = /^[0-9][0-9 .\-/]*[0-9]$/;

/**
 * Where a request's tokens were decrypted (path → classification), and the plaintexts
 * an answer must not repeat.
 */
export class DecryptedPaths extends Map<string, number> {
  /** The spellings searched for, lower case, as bytes. */
  private readonly needles = new Map<string, Buffer>();
  private remembered = 0;

  /** Remembers a value shown in plain (its text; the caller zeroes its own buffer). */
  remember(plaintext: Buffer): void {
    if (this.remembered >= MAX_VALUES) return;
    // Its UTF-8 length is at least its number of characters: short values leave here unsplit.
    if (plaintext.length < MIN_LENGTH) return;
    const chars = [...plaintext.toString('utf8', 0, Math.min(plaintext.length, PREFIX_CHARS * 4))];
    if (chars.length < MIN_LENGTH) return;
    this.remembered++;
    const prefix = chars.slice(0, PREFIX_CHARS).join('');
    for (const spelling of spellings(prefix)) {
      const needle = asciiLower(Buffer.from(spelling, 'utf8'));
      const key = needle.toString('latin1');
      if (!this.needles.has(key)) this.needles.set(key, needle);
    }
  }

  /** Takes in the values `other` remembered (a query's and a body's, for one answer). */
  absorb(other: ReadonlyMap<string, number>): void {
    for (const [path, classification] of other) this.set(path, classification);
    if (other instanceof DecryptedPaths) for (const [key, needle] of other.needles) this.needles.set(key, needle);
  }

  get searching(): boolean {
    return this.needles.size > 0;
  }

  /**
   * Throws a 502 if a header value or the body (as it would be sent) repeats a remembered
   * plaintext. Names neither the value nor the vendor.
   */
  check(headers: Readonly<Record<string, string | string[] | undefined>>, body: Buffer | null): void {
    if (this.needles.size === 0) return;
    for (const name in headers) {
      const value = headers[name];
      if (value === undefined) continue;
      for (const text of Array.isArray(value) ? value : [value]) {
        // Header values arrive as latin1 text: their bytes, as the vendor sent them.
        if (this.holds(asciiLower(Buffer.from(text, 'latin1')))) throw refused(`its ${name} header`);
      }
    }
    if (body !== null && body.length > 0 && this.holds(asciiLower(body))) throw refused('its body');
  }

  private holds(haystack: Buffer): boolean {
    for (const needle of this.needles.values()) if (haystack.includes(needle)) return true;
    return false;
  }
}

function refused(where: string): UpstreamResponseError {
  return new UpstreamResponseError(new Error(`the answer repeats a value decrypted for this request in ${where}, where it cannot be encrypted again`));
}

function spellings(value: string): string[] {
  const out = new Set([value, JSON.stringify(value).slice(1, -1), encodeURIComponent(value), encodeURIComponent(value).replaceAll('%20', '+')]);
  if (DIGITS_AND_SEPARATORS.test(value)) {
    const digits = value.replace(/[^0-9]/g, '');
    if (digits.length >= MIN_LENGTH) out.add(digits);
  }
  return [...out];
}

/** A copy of `bytes` with A–Z as a–z; other bytes, UTF-8 included, unchanged. */
function asciiLower(bytes: Buffer): Buffer {
  const out = Buffer.allocUnsafe(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    out[i] = b >= 0x41 && b <= 0x5a ? b + 0x20 : b;
  }
  return out;
}

/**
 * Where the query's and the body's tokens were decrypted, and their values, for an answer
 * that must not echo them; null when the route does not guard its answers.
 */
export function joinDecrypted(query: ReadonlyMap<string, number> | null, body: ReadonlyMap<string, number> | null, echoes: boolean): ReadonlyMap<string, number> | null {
  if (!echoes) return null;
  if (query === null || query.size === 0) return body;
  if (body === null || body.size === 0) return query;
  const joined = new DecryptedPaths();
  joined.absorb(query);
  joined.absorb(body);
  return joined;
}
