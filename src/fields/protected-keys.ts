/**
 * Object keys matched at any depth, however they are spelled (the relay guard, DESIGN
 * §13): `SSN`, `Ssn`, `ſsn` (long s), `ｓｓｎ` (fullwidth) and `\u212Asn`-style compatibility
 * forms all name `ssn`, because some application's case-insensitive binder may read them
 * so. Matching too much only protects more; matching too little lets plaintext by.
 *
 * A key also matches when one of its parts does: `patient.ssn` and `patient[ssn]` as a
 * single key name `ssn`, as dotted and bracketed binders read them.
 *
 * Spaces, `.`, `_`, `-`, `!`, `[` and `]` are not compared at all: PHP hands a form's
 * `card.number`, `card number` and `card[number` to the application as `card_number`, and
 * drops leading spaces (` ssn` is `ssn`); Spring binds `!ssn` and `_ssn` as defaults and
 * markers of `ssn`, and strips the quotes of a map key (`p['ssn']`, `p["ssn"]`). So a
 * protected `card_number` must match them all. A key is also cut at
 * `;` and NUL, where some servers end a name (`a;ssn`, `ssn\0x`).
 */
import { FieldMatcher, type PathState } from './paths.ts';

/**
 * Compatibility decomposition, marks, invisible characters and unpaired surrogates (which
 * a reader may drop or replace when it re-encodes the key) dropped, then a case fold
 * (upper then lower, so `ß` is `ss` and `ſ` is `s`), recomposed.
 */
export function foldKey(key: string): string {
  return key
    .normalize('NFKD')
    .replace(/[\p{M}\p{Default_Ignorable_Code_Point}\p{Cs}]/gu, '')
    .toUpperCase()
    .toLowerCase()
    .normalize('NFKC');
}

const SEPARATORS = /[.[\];\0]/;
/** What a key is compared without (see the top of the file). */
const IGNORED = /[\s._\-![\]'"]/gu;

/**
 * A key as it is compared: folded, without the characters binders treat as interchangeable
 * (unless that leaves nothing: a key `_` is compared as it is).
 */
export function compareKey(key: string): string {
  const folded = foldKey(key);
  const kept = folded.replace(IGNORED, '');
  return kept === '' ? folded : kept;
}

/** A matcher whose terminal states are the values of `keys`, at any depth. */
export function protectedKeysMatcher(keys: readonly string[]): FieldMatcher {
  return FieldMatcher.fromRoot(keys, new Anywhere(keys));
}

/** The configured key a body's key stands for, or undefined. */
export function protectedKeyOf(keys: readonly string[], key: string): string | undefined {
  const compared = new Map(keys.map((k) => [compareKey(k), k]));
  const whole = compared.get(compareKey(key));
  if (whole !== undefined || !SEPARATORS.test(key)) return whole;
  for (const part of key.split(SEPARATORS)) {
    const found = part === '' ? undefined : compared.get(compareKey(part));
    if (found !== undefined) return found;
  }
  return undefined;
}

/** A matched value: taken whole, never descended into. */
class Hit implements PathState {
  readonly terminal = true;
  readonly dead = false;
  readonly anyToken = false;
  private readonly back: PathState;

  constructor(back: PathState) {
    this.back = back;
  }

  next(): PathState {
    return this.back;
  }

  nextBytes(): PathState {
    return this.back;
  }

  index(): PathState {
    return this.back;
  }
}

/** Any position of the document: every key is checked, every container descended into. */
class Anywhere implements PathState {
  readonly terminal = false;
  readonly dead = false;
  readonly anyToken = false;
  private readonly compared: ReadonlySet<string>;
  /** Compared keys that are ASCII, as bytes: most body keys are compared without a string. */
  private readonly ascii: readonly Buffer[];
  /** Whether the byte comparison is exact: no compared key keeps an ignored character. */
  private readonly bytewise: boolean;
  private readonly hit: Hit;

  constructor(keys: readonly string[]) {
    const compared = new Set(keys.map(compareKey));
    this.compared = compared;
    this.ascii = [...compared].filter((k) => /^[\x00-\x7f]*$/.test(k)).map((k) => Buffer.from(k, 'latin1'));
    this.bytewise = this.ascii.every((k) => !k.some((c) => IGNORED_BYTE[c] === 1));
    this.hit = new Hit(this);
  }

  next(key: string): PathState {
    return this.matches(key) ? this.hit : this;
  }

  nextBytes(buf: Buffer, start: number, end: number): PathState {
    // ASCII without parts to split folds to its lower case: compare bytes, no string.
    if (!this.bytewise) return this.next(buf.toString('utf8', start, end));
    for (let i = start; i < end; i++) {
      const c = buf[i]!;
      if (c >= 0x80 || c === 0x2e || c === 0x5b || c === 0x5d || c === 0x3b || c === 0x00) return this.next(buf.toString('utf8', start, end));
    }
    for (const key of this.ascii) {
      if (sameAsciiKey(key, buf, start, end)) return this.hit;
    }
    return this;
  }

  index(): PathState {
    return this;
  }

  private matches(key: string): boolean {
    if (this.compared.has(compareKey(key))) return true;
    if (!SEPARATORS.test(key)) return false;
    for (const part of key.split(SEPARATORS)) if (part !== '' && this.compared.has(compareKey(part))) return true;
    return false;
  }
}

/** `key` (compared form, ASCII) equals `buf[start..end)` up to ASCII case, ignoring what `compareKey` ignores. */
function sameAsciiKey(key: Buffer, buf: Buffer, start: number, end: number): boolean {
  let k = 0;
  for (let i = start; i < end; i++) {
    let c = buf[i]!;
    if (IGNORED_BYTE[c] === 1) continue;
    if (c >= 0x41 && c <= 0x5a) c |= 0x20;
    if (k === key.length || c !== key[k]) return false;
    k++;
  }
  return k === key.length;
}

/** The ASCII bytes `IGNORED` matches: whitespace, `.`, `_`, `-`, `!`, `[`, `]`. */
const IGNORED_BYTE = new Uint8Array(128);
for (const c of [0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x2e, 0x5f, 0x2d, 0x21, 0x5b, 0x5d]) IGNORED_BYTE[c] = 1;
