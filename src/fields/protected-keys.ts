/**
 * Object keys matched at any depth, however they are spelled (the relay guard, DESIGN
 * §13): `SSN`, `Ssn`, `ſsn` (long s), `ｓｓｎ` (fullwidth) and `\u212Asn`-style compatibility
 * forms all name `ssn`, because some application's case-insensitive binder may read them
 * so. Matching too much only protects more; matching too little lets plaintext by.
 *
 * A key also matches when one of its parts does: `patient.ssn` and `patient[ssn]` as a
 * single key name `ssn`, as dotted and bracketed binders read them.
 */
import { FieldMatcher, type PathState } from './paths.ts';

/**
 * Compatibility decomposition, marks and invisible characters dropped, then a case fold
 * (upper then lower, so `ß` is `ss` and `ſ` is `s`), recomposed.
 */
export function foldKey(key: string): string {
  return key
    .normalize('NFKD')
    .replace(/[\p{M}\p{Default_Ignorable_Code_Point}]/gu, '')
    .toUpperCase()
    .toLowerCase()
    .normalize('NFKC');
}

/** Where a key may be cut into parts a binder reads on their own (`patient.ssn`, `a;ssn`, `ssn\0x`). */
const SEPARATORS = /[.[\];\0]/;

/**
 * Characters around a name that some binders drop: spaces (PHP trims leading ones),
 * `!` and `_` (Spring's default and marker fields, `!ssn`, `_ssn`).
 */
const DROPPED = /^[\s!_]+|\s+$/g;

/** A matcher whose terminal states are the values of `keys`, at any depth. */
export function protectedKeysMatcher(keys: readonly string[]): FieldMatcher {
  return FieldMatcher.fromRoot(keys, new Anywhere(keys));
}

/** The configured key a body's key stands for, or undefined. */
export function protectedKeyOf(keys: readonly string[], key: string): string | undefined {
  const folded = new Map(keys.map((k) => [foldKey(k), k]));
  for (const candidate of readings(key)) {
    const found = folded.get(candidate);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** Every folded reading of a key: whole, and each part, each also without what binders drop. */
function readings(key: string): string[] {
  const out: string[] = [];
  for (const part of SEPARATORS.test(key) ? [key, ...key.split(SEPARATORS)] : [key]) {
    out.push(foldKey(part));
    const bare = part.replace(DROPPED, '');
    if (bare !== part && bare !== '') out.push(foldKey(bare));
  }
  return out;
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
  private readonly folded: ReadonlySet<string>;
  /** Folded keys that are ASCII, as bytes: most body keys are compared without a string. */
  private readonly ascii: readonly Buffer[];
  private readonly hit: Hit;

  constructor(keys: readonly string[]) {
    const folded = new Set(keys.map(foldKey));
    this.folded = folded;
    this.ascii = [...folded].filter((k) => /^[\x00-\x7f]*$/.test(k)).map((k) => Buffer.from(k, 'latin1'));
    this.hit = new Hit(this);
  }

  next(key: string): PathState {
    return this.matches(key) ? this.hit : this;
  }

  nextBytes(buf: Buffer, start: number, end: number): PathState {
    // Plain ASCII without separators folds to its lower case: compare bytes, no string.
    // (and nothing a binder drops at either end, nothing it cuts at).
    let plain = end > start && !DROPPED_ASCII.has(buf[start]!) && !DROPPED_ASCII.has(buf[end - 1]!);
    for (let i = start; plain && i < end; i++) {
      const c = buf[i]!;
      if (c >= 0x80 || c === 0x2e || c === 0x5b || c === 0x5d || c === 0x3b || c < 0x20) plain = false;
    }
    if (!plain) return this.next(buf.toString('utf8', start, end));
    const length = end - start;
    for (const key of this.ascii) {
      if (key.length === length && sameIgnoringAsciiCase(key, buf, start)) return this.hit;
    }
    return this;
  }

  index(): PathState {
    return this;
  }

  private matches(key: string): boolean {
    for (const candidate of readings(key)) if (candidate !== '' && this.folded.has(candidate)) return true;
    return false;
  }
}

/** Space, `!`, `_`, tab: a plain key that starts or ends with one is read the slow way. */
const DROPPED_ASCII = new Set([0x20, 0x21, 0x5f, 0x09]);

/** `lower` (already lower case) equals `buf[start..]` up to ASCII case. */
function sameIgnoringAsciiCase(lower: Buffer, buf: Buffer, start: number): boolean {
  for (let i = 0; i < lower.length; i++) {
    let c = buf[start + i]!;
    if (c >= 0x41 && c <= 0x5a) c |= 0x20;
    if (c !== lower[i]) return false;
  }
  return true;
}
