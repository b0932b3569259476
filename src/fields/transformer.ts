/**
 * The byte-level JSON transformer (DESIGN §6).
 *
 * One pass over the bytes with a resumable state machine: it validates the document,
 * tracks depth, walks the compiled field paths, and hands each matched value's exact
 * bytes to a `ValueHandler`. Everything outside matched values is emitted as slices of
 * the input chunks, so key order, whitespace, number spelling and escapes never change.
 * It is fed chunk by chunk and holds at most the value being replaced (plus a key that
 * straddles two chunks), never the document.
 *
 * Output pieces are subarrays of the input chunks or handler replacements; callers must
 * not reuse an input buffer after pushing it.
 */
import { isUtf8 } from 'node:buffer';
import { DepthExceededError, InvalidJsonError, ValueTooLargeError } from '../errors.ts';
import { escapeSegment, type FieldMatcher, type PathState } from './paths.ts';
import { hasTokenShape, UNLIMITED, type CaptureLimits, type ChunkTransformer, type FieldValue, type PlainType, type ValueHandler, type ValueKind } from './value.ts';

export type { FieldValue, ValueHandler, ValueKind } from './value.ts';

export const MAX_DEPTH = 32;
/** Levels a transformer starts with; deeper documents grow its stacks, up to MAX_DEPTH. */
const INITIAL_STACK = 8;

// Lexer modes.
const M_VALUE = 0; // a value is required (root, after `:` or `,` in an array)
const M_VALUE_OR_CLOSE = 1; // just after `[`
const M_KEY_OR_CLOSE = 2; // just after `{`
const M_KEY = 3; // after `,` in an object
const M_COLON = 4;
const M_AFTER = 5; // after a value inside a container: `,` or the closer
const M_STRING = 6;
const M_NUMBER = 7;
const M_LITERAL = 8;
const M_DONE = 9; // the root value is complete: only whitespace may follow

// Number sub-states (RFC 8259 §6).
const N_MINUS = 0;
const N_ZERO = 1;
const N_INT = 2;
const N_DOT = 3;
const N_FRAC = 4;
const N_EXP = 5;
const N_EXP_SIGN = 6;
const N_EXP_DIGITS = 7;

const OBJ = 0;
const ARR = 1;

const LITERALS = { t: Buffer.from('true'), f: Buffer.from('false'), n: Buffer.from('null') };

function isWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || ((c | 0x20) >= 0x61 && (c | 0x20) <= 0x66);
}

export class JsonTransformer implements FieldValue, ChunkTransformer {
  private readonly handler: ValueHandler;
  private readonly rootState: PathState;
  private readonly maxDepth: number;
  private readonly limits: CaptureLimits;

  private mode = M_VALUE;
  private depth = 0;
  // Per-level stacks, grown on demand up to maxDepth + 1: most documents are shallow, and
  // a transformer is built per request.
  private stackType: Uint8Array;
  private stackState: (PathState | null)[];
  private stackIndex: Int32Array;
  /** Object keys per level: decoded only when escaped, else kept as bytes until a path is needed. */
  private stackKey: (string | null)[];
  private stackKeyBuf: Buffer[];
  private stackKeyStart: Int32Array;
  private stackKeyEnd: Int32Array;
  /** The state of the value that follows the current object key. */
  private pending: PathState | null = null;
  /** Bytes consumed before the current chunk, for error offsets. */
  private offset = 0;
  private started = false;

  // String scanning.
  private strIsKey = false;
  private strNeedKey = false;
  private strEscaped = false;
  /** 0: plain, 1: after `\`, 2..5: inside `\u` with 4..1 hex digits left. */
  private esc = 0;
  private keyParts: Buffer[] = [];
  private keyBytes = 0;

  private numState = N_MINUS;
  private literal: Buffer = LITERALS.t;
  private literalPos = 0;

  // Capture of a matched value.
  private capturing = false;
  private capDepth = 0;
  private capKind: ValueKind = 's';
  private capParts: Buffer[] = [];
  /** Bytes held in capParts. */
  private capBytes = 0;
  /** Captured only as a token candidate (decrypt without paths): given up, not refused, when too long. */
  private capOptional = false;

  // MatchedValue fields, reused for every handler call.
  raw: Buffer = EMPTY;
  kind: ValueKind = 's';
  escaped = false;

  private utf8Carry: Buffer | null = null;

  constructor(matcher: FieldMatcher, handler: ValueHandler, limits: CaptureLimits = UNLIMITED, maxDepth = MAX_DEPTH) {
    this.handler = handler;
    this.rootState = matcher.root;
    this.maxDepth = maxDepth;
    this.limits = limits;
    const size = Math.min(INITIAL_STACK, maxDepth + 1);
    this.stackType = new Uint8Array(size);
    this.stackState = new Array<PathState | null>(size).fill(null);
    this.stackIndex = new Int32Array(size);
    this.stackKey = new Array<string | null>(size).fill(null);
    this.stackKeyBuf = new Array<Buffer>(size).fill(EMPTY_KEY);
    this.stackKeyStart = new Int32Array(size);
    this.stackKeyEnd = new Int32Array(size);
  }

  private growStacks(): void {
    const size = Math.min(this.stackType.length * 2, this.maxDepth + 1);
    const grown = <T extends Uint8Array | Int32Array>(from: T, to: T): T => {
      to.set(from);
      return to;
    };
    this.stackType = grown(this.stackType, new Uint8Array(size));
    this.stackIndex = grown(this.stackIndex, new Int32Array(size));
    this.stackKeyStart = grown(this.stackKeyStart, new Int32Array(size));
    this.stackKeyEnd = grown(this.stackKeyEnd, new Int32Array(size));
    while (this.stackState.length < size) {
      this.stackState.push(null);
      this.stackKey.push(null);
      this.stackKeyBuf.push(EMPTY_KEY);
    }
  }

  /** Valid during a handler call: the levels above the captured value are still on the stack. */
  path(): string {
    return this.currentPath();
  }

  plaintext(): Buffer | null {
    const raw = this.raw;
    if (this.kind !== 's') return raw;
    if (!this.escaped) return raw.subarray(1, raw.length - 1);
    const text = JSON.parse(raw.toString('utf8')) as string;
    // UTF-8 cannot carry an unpaired surrogate; encrypting it would change the value.
    return text.isWellFormed() ? Buffer.from(text, 'utf8') : null;
  }

  /** Tokens are plain ASCII: a string written with escapes is never taken for one. */
  token(): string | null {
    const raw = this.raw;
    if (this.kind !== 's' || this.escaped || !hasTokenShape(raw, 1, raw.length - 1)) return null;
    return raw.toString('latin1', 1, raw.length - 1);
  }

  encodeToken(token: string): Buffer {
    return Buffer.from(`"${token}"`, 'latin1');
  }

  encodePlain(plaintext: Buffer, type: PlainType): Buffer {
    return type === 's' ? jsonString(plaintext) : plaintext;
  }

  encodeNull(): Buffer {
    return JSON_NULL;
  }

  /** Feeds one chunk; appends the output pieces to `out`. */
  push(chunk: Buffer, out: Buffer[]): void {
    if (chunk.length === 0) return;
    this.checkUtf8(chunk);
    this.started = true;
    const n = chunk.length;
    let i = 0;
    let passStart = 0;
    let capStart = 0;
    let keyStart = this.mode === M_STRING ? 0 : -1;

    while (i < n) {
      const mode = this.mode;
      if (mode === M_STRING) {
        if (this.esc === 0) {
          let c = 0;
          while (i < n) {
            c = chunk[i]!;
            if (c === 0x22 || c === 0x5c || c < 0x20) break;
            i++;
          }
          if (i === n) break;
          if (c === 0x22) {
            i++;
            if (this.strIsKey) {
              this.endKey(chunk, keyStart, i - 1);
              keyStart = -1;
              this.mode = M_COLON;
            } else {
              this.afterScalar();
              if (this.capturing && this.capDepth === this.depth) {
                this.finishCapture(chunk, capStart, i, out);
                passStart = i;
              }
            }
          } else if (c === 0x5c) {
            this.esc = 1;
            this.strEscaped = true;
            i++;
          } else {
            throw this.fail('a control character inside a string', i);
          }
        } else if (this.esc === 1) {
          const c = chunk[i]!;
          if (c === 0x75) this.esc = 2;
          else if (c === 0x22 || c === 0x5c || c === 0x2f || c === 0x62 || c === 0x66 || c === 0x6e || c === 0x72 || c === 0x74) this.esc = 0;
          else throw this.fail('an invalid escape sequence', i);
          i++;
        } else {
          if (!isHex(chunk[i]!)) throw this.fail('an invalid \\u escape', i);
          this.esc = this.esc === 5 ? 0 : this.esc + 1;
          i++;
        }
        continue;
      }

      const c = chunk[i]!;
      if (isWhitespace(c) && mode !== M_NUMBER && mode !== M_LITERAL) {
        i++;
        continue;
      }

      switch (mode) {
        case M_VALUE:
        case M_VALUE_OR_CLOSE: {
          if (c === 0x5d && mode === M_VALUE_OR_CLOSE) {
            i = this.close(chunk, i, capStart, out);
            if (this.justFinished) passStart = i;
            break;
          }
          // Start of a value: decide whether it is matched.
          let state: PathState | null = null;
          if (!this.capturing) {
            if (this.depth === 0) {
              if (c !== 0x7b && c !== 0x5b) throw this.fail('the top-level value must be an object or an array', i);
              state = this.rootState;
            } else if (this.stackType[this.depth - 1] === ARR) {
              const parent = this.stackState[this.depth - 1]!;
              const index = ++this.stackIndex[this.depth - 1]!;
              state = parent === null ? null : parent.index(index);
            } else {
              state = this.pending;
            }
            if (state !== null && (state.terminal || (state.anyToken && c === 0x22))) {
              if (i > passStart) out.push(chunk.subarray(passStart, i));
              this.beginCapture(c, !state.terminal);
              capStart = i;
            }
          }
          if (c === 0x22) {
            this.beginString(false, false);
            i++;
          } else if (c === 0x7b || c === 0x5b) {
            this.open(c === 0x7b ? OBJ : ARR, this.capturing || state === null || state.dead ? null : state);
            i++;
          } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
            this.mode = M_NUMBER;
            this.numState = c === 0x2d ? N_MINUS : c === 0x30 ? N_ZERO : N_INT;
            i++;
          } else if (c === 0x74 || c === 0x66 || c === 0x6e) {
            this.mode = M_LITERAL;
            this.literal = c === 0x74 ? LITERALS.t : c === 0x66 ? LITERALS.f : LITERALS.n;
            this.literalPos = 1;
            i++;
          } else {
            throw this.fail('an unexpected character where a value was expected', i);
          }
          break;
        }
        case M_KEY_OR_CLOSE:
        case M_KEY: {
          if (c === 0x22) {
            const needKey = !this.capturing && this.stackState[this.depth - 1] !== null;
            this.beginString(true, needKey);
            i++;
            keyStart = i;
          } else if (c === 0x7d && mode === M_KEY_OR_CLOSE) {
            i = this.close(chunk, i, capStart, out);
            if (this.justFinished) passStart = i;
          } else {
            throw this.fail('an unexpected character where an object key was expected', i);
          }
          break;
        }
        case M_COLON: {
          if (c !== 0x3a) throw this.fail('a missing ":" after an object key', i);
          this.mode = M_VALUE;
          i++;
          break;
        }
        case M_AFTER: {
          const type = this.stackType[this.depth - 1];
          if (c === 0x2c) {
            this.mode = type === OBJ ? M_KEY : M_VALUE;
            i++;
          } else if ((c === 0x7d && type === OBJ) || (c === 0x5d && type === ARR)) {
            i = this.close(chunk, i, capStart, out);
            if (this.justFinished) passStart = i;
          } else {
            throw this.fail(type === OBJ ? 'a missing "," or "}" in an object' : 'a missing "," or "]" in an array', i);
          }
          break;
        }
        case M_NUMBER: {
          const step = this.stepNumber(c);
          if (step === 1) {
            i++;
          } else if (step === -1) {
            throw this.fail('an invalid number', i);
          } else {
            // The number ended just before this byte; the byte is read again as what follows.
            this.afterScalar();
            if (this.capturing && this.capDepth === this.depth) {
              this.finishCapture(chunk, capStart, i, out);
              passStart = i;
            }
          }
          break;
        }
        case M_LITERAL: {
          if (c !== this.literal[this.literalPos]) throw this.fail('an invalid literal', i);
          i++;
          if (++this.literalPos === this.literal.length) {
            this.afterScalar();
            if (this.capturing && this.capDepth === this.depth) {
              this.finishCapture(chunk, capStart, i, out);
              passStart = i;
            }
          }
          break;
        }
        case M_DONE:
          throw this.fail('unexpected data after the top-level value', i);
      }
    }

    // Carry what straddles the chunk boundary, within the limits: a value or key that
    // would be held whole is refused (413) once it passes them.
    if (this.capturing) {
      if (capStart < n) {
        this.capParts.push(chunk.subarray(capStart, n));
        this.capBytes += n - capStart;
        if (this.capBytes > this.limits.capture) this.captureTooLarge(out);
      }
    } else if (passStart < n) {
      out.push(chunk.subarray(passStart, n));
    }
    if (this.mode === M_STRING && this.strIsKey && this.strNeedKey && keyStart >= 0 && keyStart < n) {
      this.keyParts.push(chunk.subarray(keyStart, n));
      this.keyBytes += n - keyStart;
      if (this.keyBytes > this.limits.capture) throw new ValueTooLargeError(this.limits.value);
    }
    this.offset += n;
  }

  /**
   * A token candidate this long cannot be a token: it is let through as it is. A value a
   * path names must be transformed whole, so holding on would grow without bound: 413.
   */
  private captureTooLarge(out: Buffer[]): void {
    if (!this.capOptional) throw new ValueTooLargeError(this.limits.value);
    for (const part of this.capParts) out.push(part);
    this.capParts = [];
    this.capBytes = 0;
    this.capturing = false;
  }

  /** Signals the end of the body; throws if the document is incomplete. */
  end(_out: Buffer[]): void {
    if (this.utf8Carry !== null) throw new InvalidJsonError(`invalid UTF-8 at byte ${this.offset}`);
    if (!this.started) throw new InvalidJsonError('the body is empty');
    if (this.mode !== M_DONE) throw new InvalidJsonError(`unexpected end of input at byte ${this.offset}`);
  }

  // Set by close() when the closed container was a captured value that is now replaced.
  private justFinished = false;

  private open(type: number, state: PathState | null): void {
    if (this.depth >= this.maxDepth) throw new DepthExceededError(this.maxDepth);
    if (this.depth + 1 >= this.stackType.length) this.growStacks();
    const d = this.depth++;
    this.stackType[d] = type;
    this.stackState[d] = state;
    this.stackIndex[d] = -1;
    this.mode = type === OBJ ? M_KEY_OR_CLOSE : M_VALUE_OR_CLOSE;
  }

  private close(chunk: Buffer, i: number, capStart: number, out: Buffer[]): number {
    this.depth--;
    this.stackState[this.depth] = null;
    i++;
    this.justFinished = false;
    if (this.depth === 0) this.mode = M_DONE;
    else this.mode = M_AFTER;
    if (this.capturing && this.capDepth === this.depth) {
      this.finishCapture(chunk, capStart, i, out);
      this.justFinished = true;
    }
    return i;
  }

  private afterScalar(): void {
    this.mode = this.depth === 0 ? M_DONE : M_AFTER;
  }

  private beginString(isKey: boolean, needKey: boolean): void {
    this.mode = M_STRING;
    this.strIsKey = isKey;
    this.strNeedKey = needKey;
    this.strEscaped = false;
    this.esc = 0;
  }

  private endKey(chunk: Buffer, start: number, end: number): void {
    if (!this.strNeedKey) {
      this.pending = null;
      return;
    }
    let buf = chunk;
    if (this.keyParts.length > 0) {
      if (start < end) this.keyParts.push(chunk.subarray(start < 0 ? 0 : start, end));
      buf = Buffer.concat(this.keyParts);
      this.keyParts = [];
      this.keyBytes = 0;
      start = 0;
      end = buf.length;
      if (end > this.limits.capture) throw new ValueTooLargeError(this.limits.value);
    }
    const d = this.depth - 1;
    if (this.strEscaped) {
      const key = decodeEscaped(buf.subarray(start, end));
      this.stackKey[d] = key;
      this.pending = this.stackState[d]!.next(key);
    } else {
      this.stackKey[d] = null;
      this.stackKeyBuf[d] = buf;
      this.stackKeyStart[d] = start;
      this.stackKeyEnd[d] = end;
      this.pending = this.stackState[d]!.nextBytes(buf, start, end);
    }
  }

  /** 1: the byte belongs to the number; 0: the number ended before it; -1: invalid. */
  private stepNumber(c: number): number {
    const isDigit = c >= 0x30 && c <= 0x39;
    const isExp = c === 0x65 || c === 0x45;
    switch (this.numState) {
      case N_MINUS:
        if (!isDigit) return -1;
        this.numState = c === 0x30 ? N_ZERO : N_INT;
        return 1;
      case N_ZERO:
      case N_INT:
        if (isDigit) return this.numState === N_ZERO ? -1 : 1;
        if (c === 0x2e) this.numState = N_DOT;
        else if (isExp) this.numState = N_EXP;
        else return 0;
        return 1;
      case N_DOT:
        if (!isDigit) return -1;
        this.numState = N_FRAC;
        return 1;
      case N_FRAC:
        if (isDigit) return 1;
        if (!isExp) return 0;
        this.numState = N_EXP;
        return 1;
      case N_EXP:
        if (c === 0x2b || c === 0x2d) this.numState = N_EXP_SIGN;
        else if (isDigit) this.numState = N_EXP_DIGITS;
        else return -1;
        return 1;
      case N_EXP_SIGN:
        if (!isDigit) return -1;
        this.numState = N_EXP_DIGITS;
        return 1;
      default:
        return isDigit ? 1 : 0;
    }
  }

  private beginCapture(c: number, optional: boolean): void {
    this.capturing = true;
    this.capOptional = optional;
    this.capDepth = this.depth;
    this.capKind = c === 0x22 ? 's' : c === 0x7b || c === 0x5b ? 'j' : c === 0x74 || c === 0x66 ? 'b' : c === 0x6e ? 'z' : 'n';
  }

  private finishCapture(chunk: Buffer, capStart: number, end: number, out: Buffer[]): void {
    let raw: Buffer;
    if (this.capParts.length === 0) {
      raw = chunk.subarray(capStart, end);
    } else {
      if (end > 0) this.capParts.push(chunk.subarray(0, end));
      raw = Buffer.concat(this.capParts);
      this.capParts = [];
      this.capBytes = 0;
    }
    this.capturing = false;
    if (raw.length > this.limits.capture && !this.capOptional) throw new ValueTooLargeError(this.limits.value);
    this.raw = raw;
    this.kind = this.capKind;
    this.escaped = this.capKind === 's' && this.strEscaped;
    const replacement = this.handler.replace(this);
    out.push(replacement ?? raw);
    this.raw = EMPTY;
  }

  private currentPath(): string {
    let path = '';
    for (let d = 0; d < this.depth; d++) {
      const key = this.stackKey[d] ?? this.stackKeyBuf[d]!.toString('utf8', this.stackKeyStart[d], this.stackKeyEnd[d]);
      const part = this.stackType[d] === ARR ? String(this.stackIndex[d]) : escapeSegment(key);
      path = d === 0 ? part : `${path}.${part}`;
    }
    return path;
  }

  private fail(what: string, i: number): InvalidJsonError {
    return new InvalidJsonError(`${what} at byte ${this.offset + i}`);
  }

  /**
   * RFC 8259 §8.1 requires UTF-8. Chunks may split a character, so up to three trailing
   * bytes of an incomplete sequence are carried into the next chunk.
   */
  private checkUtf8(chunk: Buffer): void {
    let start = 0;
    if (this.utf8Carry !== null) {
      const carry = this.utf8Carry;
      const need = sequenceLength(carry[0]!) - carry.length;
      const take = Math.min(need, chunk.length);
      const joined = Buffer.concat([carry, chunk.subarray(0, take)]);
      if (take < need) {
        this.utf8Carry = joined;
        return;
      }
      if (!isUtf8(joined)) throw new InvalidJsonError(`invalid UTF-8 at byte ${this.offset}`);
      this.utf8Carry = null;
      start = take;
    }
    let end = chunk.length;
    // Find an incomplete multi-byte sequence at the very end.
    for (let k = 1; k <= 3 && end - k >= start; k++) {
      const b = chunk[end - k]!;
      if (b < 0x80) break;
      if (b >= 0xc0) {
        if (sequenceLength(b) > k) {
          this.utf8Carry = Buffer.from(chunk.subarray(end - k));
          end -= k;
        }
        break;
      }
    }
    if (end > start && !isUtf8(chunk.subarray(start, end))) {
      throw new InvalidJsonError(`invalid UTF-8 near byte ${this.offset + start}`);
    }
  }
}

const EMPTY = Buffer.alloc(0);
const EMPTY_KEY = Buffer.alloc(0);
/** A redacted value (shared: output pieces are copied, never written to). */
const JSON_NULL = Buffer.from('null');

function sequenceLength(lead: number): number {
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  if (lead >= 0xc0) return 2;
  return 1;
}

function decodeEscaped(inner: Buffer): string {
  return JSON.parse(`"${inner.toString('utf8')}"`) as string;
}

/** JSON text of a UTF-8 string, spelled exactly as JSON.stringify spells it. */
export function jsonString(utf8: Buffer): Buffer {
  for (let i = 0; i < utf8.length; i++) {
    const c = utf8[i]!;
    if (c === 0x22 || c === 0x5c || c < 0x20) return Buffer.from(JSON.stringify(utf8.toString('utf8')), 'utf8');
  }
  const out = Buffer.allocUnsafe(utf8.length + 2);
  out[0] = 0x22;
  utf8.copy(out, 1);
  out[out.length - 1] = 0x22;
  return out;
}

/** Joins the output pieces collected so far into one buffer and empties the list. */
export function joinPieces(out: Buffer[]): Buffer {
  const joined = out.length === 1 ? out[0]! : Buffer.concat(out);
  out.length = 0;
  return joined;
}

/** Transforms a whole document held in memory (the buffered endpoints and tests). */
export function transformBuffer(body: Buffer | readonly Buffer[], matcher: FieldMatcher, handler: ValueHandler): Buffer {
  const out: Buffer[] = [];
  const t = new JsonTransformer(matcher, handler);
  if (Buffer.isBuffer(body)) t.push(body, out);
  else for (const chunk of body) t.push(chunk, out);
  t.end(out);
  return joinPieces(out);
}
