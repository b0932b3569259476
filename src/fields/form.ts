/**
 * `application/x-www-form-urlencoded` bodies (WHATWG URL §5): `name=value&name=value`,
 * transformed in one streaming pass like JSON. A parameter name is decoded and read as a
 * field path, brackets as segments (`card[number]` is `card.number`, `items[0][sku]` is
 * `items.0.sku`, `tags[]` is `tags.` + an empty segment that a `*` matches); a parameter
 * is matched when its path, or any leading part of it, is matched — so `ssn` also names
 * `ssn[]` and `ssn[0]`. Matched values are decoded, handed to the handler and written
 * back with the form's encoding; everything else is copied byte for byte.
 *
 * Only the name being read and the value being replaced are held, each within the
 * capture limit.
 */
import { isUtf8 } from 'node:buffer';
import { InvalidFormError, ValueTooLargeError } from '../errors.ts';
import { escapeSegment, type FieldMatcher, type PathState } from './paths.ts';
import { hasTokenShape, UNLIMITED, type CaptureLimits, type ChunkTransformer, type FieldValue, type PlainType, type ValueHandler } from './value.ts';

const AMP = 0x26;
const EQ = 0x3d;

const IN_NAME = 0;
const IN_VALUE = 1;
const IN_MATCHED_VALUE = 2;

export interface FormOptions {
  /**
   * Also read a `;` inside a value as the start of another parameter, as some servers split
   * forms (older Python and Go). A value found that way ends at the next `;` or `&`; one
   * after a `&` still ends only at `&`, so none is ever cut short.
   */
  readonly semicolons?: boolean;
  /** Write a space in a replaced value as `+` (forms), else as `%20` (query strings). */
  readonly plusForSpace?: boolean;
  /**
   * Also read a name as servers that end it at a NUL (PHP: `ssn%00x` is `ssn`) or drop a
   * leading byte-order mark (a UTF-8 text reader: `\uFEFFssn` is `ssn`) see it. Defaults
   * to `semicolons`: both are for handlers that protect, where matching more only protects more.
   */
  readonly lenientNames?: boolean;
}

export class FormTransformer implements ChunkTransformer, FieldValue {
  private readonly matcher: FieldMatcher;
  private readonly handler: ValueHandler;
  private readonly limits: CaptureLimits;
  private readonly semicolons: boolean;
  private readonly plusForSpace: boolean;
  private readonly lenientNames: boolean;
  private mode = IN_NAME;
  private parts: Buffer[] = [];
  private held = 0;
  private name = '';
  /** The reading of `name` a path matched. */
  private segments: string[] = [];
  /** The current name began after a `;` inside another value (`semicolons`). */
  private afterSemicolon = false;
  /**
   * Names that a `;` ended before any `=` (`semicolons`): `ssn;x=1` is `ssn` and `x=1` to a
   * server that splits at `;`, and one name `ssn;x` to one that does not, so the value is
   * matched against both readings.
   */
  private cut: string | null = null;

  // FieldValue of the value being replaced: a form value is always a string.
  readonly kind = 's' as const;
  raw: Buffer = EMPTY;
  escaped = false;

  constructor(matcher: FieldMatcher, handler: ValueHandler, limits: CaptureLimits = UNLIMITED, { semicolons = false, plusForSpace = true, lenientNames = semicolons }: FormOptions = {}) {
    this.matcher = matcher;
    this.handler = handler;
    this.limits = limits;
    this.semicolons = semicolons;
    this.plusForSpace = plusForSpace;
    this.lenientNames = lenientNames;
  }

  push(chunk: Buffer, out: Buffer[]): void {
    const n = chunk.length;
    let start = 0;
    while (start < n) {
      if (this.mode === IN_VALUE) {
        // A value nobody asked for streams through untouched, up to and with its `&`.
        const amp = this.semicolons ? delimiterAt(chunk, start, true) : chunk.indexOf(AMP, start);
        const stop = amp === -1 ? n : amp + 1;
        out.push(chunk.subarray(start, stop));
        if (amp !== -1) {
          this.mode = IN_NAME;
          this.afterSemicolon = chunk[amp] === SEMI;
        }
        start = stop;
        continue;
      }
      const stop =
        this.mode === IN_NAME ? nameEnd(chunk, start, this.semicolons) : this.afterSemicolon ? delimiterAt(chunk, start, true) : chunk.indexOf(AMP, start);
      if (stop === -1) {
        this.hold(chunk.subarray(start, n), out);
        return;
      }
      this.finishPart(chunk.subarray(start, stop), out);
      const delimiter = chunk[stop]!;
      out.push(delimiter === AMP ? AMP_BYTE : delimiter === EQ ? EQ_BYTE : SEMI_BYTE);
      if (this.mode === IN_NAME && delimiter === EQ) {
        this.mode = this.nameMatched() ? IN_MATCHED_VALUE : IN_VALUE;
        this.cut = null;
      } else {
        if (this.mode === IN_NAME) this.cut = delimiter === SEMI ? this.joinCut() : null;
        this.mode = IN_NAME;
        this.afterSemicolon = delimiter === SEMI;
      }
      start = stop + 1;
    }
  }

  /** The names a `;` has ended so far, this one added; held like one name, within the capture limit. */
  private joinCut(): string {
    const cut = this.cut === null ? this.name : `${this.cut};${this.name}`;
    if (cut.length > this.limits.capture) throw new ValueTooLargeError(this.limits.value);
    return cut;
  }

  end(out: Buffer[]): void {
    if (this.mode !== IN_VALUE) this.finishPart(EMPTY, out);
    this.mode = IN_NAME;
  }

  /**
   * Keeps the part of a name or matched value that runs past the chunk, within the limit.
   * Decrypting without paths, a value longer than any token can be is no token: it streams
   * on as it is, as in JSON.
   */
  private hold(part: Buffer, out: Buffer[]): void {
    if (part.length === 0) return;
    this.parts.push(part);
    this.held += part.length;
    if (this.held <= this.limits.capture) return;
    if (this.mode !== IN_MATCHED_VALUE || !this.matcher.root.anyToken) throw new ValueTooLargeError(this.limits.value);
    for (const held of this.parts) out.push(held);
    this.parts = [];
    this.held = 0;
    this.mode = IN_VALUE;
  }

  /** A name or matched value is complete: a name is decoded (and kept), a value replaced. */
  private finishPart(last: Buffer, out: Buffer[]): void {
    let raw = last;
    if (this.parts.length > 0) {
      if (last.length > 0) this.parts.push(last);
      raw = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts);
      this.parts = [];
      this.held = 0;
    }
    if (raw.length > this.limits.capture) {
      if (this.mode !== IN_MATCHED_VALUE || !this.matcher.root.anyToken) throw new ValueTooLargeError(this.limits.value);
      out.push(raw);
      return;
    }
    if (this.mode === IN_NAME) {
      this.name = decodeFormBytes(raw).toString('utf8');
      // The name's bytes go out as they came; only values change.
      if (raw.length > 0) out.push(raw);
      return;
    }
    this.raw = raw;
    this.escaped = raw.includes(0x25) || raw.includes(0x2b);
    const replacement = this.handler.replace(this);
    out.push(replacement ?? raw);
    this.raw = EMPTY;
  }

  /**
   * Whether the name just read, or a leading part of it, is one the paths name. A name
   * with a `.` before its brackets is read both ways, as bracket binders (`a.b` one
   * segment) and dotted ones (`card.number` as `card[number]`) would: a rule applies
   * when either reading names it.
   */
  private nameMatched(): boolean {
    // Decrypting without paths: every value is a candidate, and only tokens are replaced.
    if (this.matcher.root.anyToken) {
      this.segments = nameSegments(this.name);
      return true;
    }
    if (this.readingMatched(this.name)) return true;
    if (this.cut !== null && this.readingMatched(`${this.cut};${this.name}`)) return true;
    if (!this.lenientNames) return false;
    const lenient = lenientName(this.name);
    return lenient !== this.name && lenient !== '' && this.readingMatched(lenient);
  }

  /**
   * Whether a reading of `name` is named: bracketed, dotted before its brackets, or with
   * stray brackets as lenient parsers take them. Each reading is made only if the one
   * before did not match.
   */
  private readingMatched(name: string): boolean {
    const root = this.matcher.root;
    const strict = nameSegments(name);
    this.segments = strict;
    if (segmentsMatched(root, strict)) return true;
    const dotted = dottedSegments(name, strict);
    if (dotted !== null && segmentsMatched(root, dotted)) {
      this.segments = dotted;
      return true;
    }
    const loose = looseSegments(name, strict);
    if (loose !== null && segmentsMatched(root, loose)) {
      this.segments = loose;
      return true;
    }
    return false;
  }

  /** The parameter as a field path: `card[number]` is `card.number` (DESIGN §15's one path language). */
  path(): string {
    return this.segments.map(escapeSegment).join('.');
  }

  plaintext(): Buffer {
    return decodeFormBytes(this.raw);
  }

  /** Tokens are URL-safe, but a form encoder may still percent-encode their `:` and `$`. */
  token(): string | null {
    const raw = this.raw;
    if (!this.escaped) return hasTokenShape(raw, 0, raw.length) ? raw.toString('latin1') : null;
    const text = decodeFormBytes(raw);
    return hasTokenShape(text, 0, text.length) && /^[\x21-\x7e]+$/.test(text.toString('latin1')) ? text.toString('latin1') : null;
  }

  encodeToken(token: string): Buffer {
    return Buffer.from(token, 'latin1');
  }

  encodePlain(plaintext: Buffer, _type: PlainType): Buffer {
    return encodeFormBytes(plaintext, this.plusForSpace);
  }

  /** A form has no null: a redacted parameter keeps its name and loses its value (`ssn=`). */
  encodeNull(): Buffer {
    return EMPTY;
  }
}

const EMPTY = Buffer.alloc(0);
const AMP_BYTE = Buffer.from('&');
const EQ_BYTE = Buffer.from('=');
const SEMI = 0x3b;
const SEMI_BYTE = Buffer.from(';');

/** A name without a leading byte-order mark, and cut at its first NUL (`FormOptions.lenientNames`). */
function lenientName(name: string): string {
  const unmarked = name.startsWith('\uFEFF') ? name.slice(1) : name;
  const nul = unmarked.indexOf('\0');
  return nul === -1 ? unmarked : unmarked.slice(0, nul);
}

/**
 * `card[number]` → card, number; `items[0][sku]` → items, 0, sku; `tags[]` → tags, ''.
 * A name that does not follow the bracket form is one segment, as it is.
 */
export function nameSegments(name: string): string[] {
  const open = name.indexOf('[');
  if (open <= 0 || !name.endsWith(']')) return [name];
  const segments = [name.slice(0, open)];
  let at = open;
  while (at < name.length) {
    if (name[at] !== '[') return [name];
    const close = name.indexOf(']', at);
    if (close === -1) return [name];
    segments.push(name.slice(at + 1, close));
    at = close + 1;
  }
  return segments;
}

/**
 * A name with brackets that do not follow the bracket form (`card[number]x`, `[card][number]`,
 * `card]number`, `card[number`), read as lenient parsers read it: every run between
 * brackets a segment. PHP, qs (Express) and Rack bind such names to `card.number`, so a
 * rule for `card.number` must match them too. Null for a name without stray brackets.
 */
export function looseSegments(name: string, strict: readonly string[] = nameSegments(name)): string[] | null {
  if (strict.length > 1 || (!name.includes('[') && !name.includes(']'))) return null;
  const segments = name.split(/[[\]]+/).filter((segment) => segment !== '');
  return segments.length === 0 ? null : segments;
}

/** The segments of a name read with `.` as a separator too, before its brackets; null without one. */
export function dottedSegments(name: string, bracketed: readonly string[] = nameSegments(name)): string[] | null {
  const open = name.indexOf('[');
  const head = open === -1 ? name : name.slice(0, open);
  if (!head.includes('.')) return null;
  // A name that does not follow the bracket form is one segment: split it whole.
  if (bracketed.length === 1) return name.split('.');
  return [...head.split('.'), ...bracketed.slice(1)];
}

function segmentsMatched(root: PathState, segments: readonly string[]): boolean {
  let state = root;
  for (const segment of segments) {
    state = state.next(segment);
    if (state.terminal) return true;
    if (state.dead) return false;
  }
  return state.terminal;
}

/** The index of the `=` or `&` (or `;`) that ends the name starting at `from`, or -1. */
function nameEnd(chunk: Buffer, from: number, semicolons: boolean): number {
  for (let i = from; i < chunk.length; i++) {
    const c = chunk[i]!;
    if (c === EQ || c === AMP || (semicolons && c === SEMI)) return i;
  }
  return -1;
}

/** The index of the next `&` (or `;`) from `from`, or -1. */
function delimiterAt(chunk: Buffer, from: number, semicolons: boolean): number {
  for (let i = from; i < chunk.length; i++) {
    const c = chunk[i]!;
    if (c === AMP || (semicolons && c === SEMI)) return i;
  }
  return -1;
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}

/** Percent-decoding with `+` as a space (the form serialiser's rules); 400 when malformed or not UTF-8. */
export function decodeFormBytes(raw: Buffer): Buffer {
  if (!raw.includes(0x25) && !raw.includes(0x2b)) {
    if (!isUtf8(raw)) throw new InvalidFormError('a name or value is not UTF-8');
    return raw;
  }
  const out = Buffer.allocUnsafe(raw.length);
  let o = 0;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]!;
    if (c === 0x2b) {
      out[o++] = 0x20;
    } else if (c === 0x25) {
      const hi = i + 2 < raw.length ? hexValue(raw[i + 1]!) : -1;
      const lo = hi === -1 ? -1 : hexValue(raw[i + 2]!);
      if (lo === -1) throw new InvalidFormError('a "%" is not followed by two hexadecimal digits');
      out[o++] = (hi << 4) | lo;
      i += 2;
    } else {
      out[o++] = c;
    }
  }
  const decoded = out.subarray(0, o);
  if (!isUtf8(decoded)) throw new InvalidFormError('a name or value is not UTF-8');
  return decoded;
}

/**
 * The form serialiser's encoding: `*-._` and alphanumerics kept, space as `+` (or `%20`
 * with `plusForSpace` false, which every query reader takes as a space), the rest `%XX`.
 */
export function encodeFormBytes(bytes: Buffer, plusForSpace = true): Buffer {
  let plain = true;
  for (const c of bytes) {
    if (!isFormSafe(c)) {
      plain = false;
      break;
    }
  }
  if (plain) return bytes;
  const out = Buffer.allocUnsafe(bytes.length * 3);
  let o = 0;
  for (const c of bytes) {
    if (isFormSafe(c)) out[o++] = c;
    else if (c === 0x20 && plusForSpace) out[o++] = 0x2b;
    else {
      out[o++] = 0x25;
      out[o++] = HEX[c >> 4]!;
      out[o++] = HEX[c & 15]!;
    }
  }
  return out.subarray(0, o);
}

const HEX = Buffer.from('0123456789ABCDEF');

function isFormSafe(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x2a || c === 0x2d || c === 0x2e || c === 0x5f;
}
