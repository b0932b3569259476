/**
 * What a body format hands to a value handler, and what it takes back. A format (JSON,
 * NDJSON, form) finds the values its field paths name; a handler (encrypt, decrypt,
 * rewrap, the relay guard) decides what each becomes. The handler never sees the
 * format's escaping: it reads a value's text and returns a replacement that the value
 * itself encodes, so one handler serves every format.
 */

/** `s` string, `n` number, `b` boolean, `j` object or array, `z` null (DESIGN §5 types). */
export type ValueKind = 's' | 'n' | 'b' | 'j' | 'z';

/** The type byte of a token: what its plaintext was. */
export type PlainType = 's' | 'n' | 'b' | 'j';

export interface FieldValue {
  readonly kind: ValueKind;
  /** The value's exact bytes as written in the body (a JSON string keeps its quotes). */
  readonly raw: Buffer;
  /** Whether the bytes are not the text: a JSON escape, a form's `%XX` or `+`. */
  readonly escaped: boolean;
  /** The concrete path of the value, e.g. `items.0.email` (built on demand). */
  path(): string;
  /**
   * The text a token of this value holds: a string's UTF-8, or the exact JSON text of a
   * number, boolean, object or array. Null for a string with no UTF-8 form (an unpaired
   * surrogate), which cannot be encrypted without changing it.
   */
  plaintext(): Buffer | null;
  /** The value when it is spelled as a token (a string of token characters), else null. */
  token(): string | null;
  /** The bytes that write `token` in place of the value. */
  encodeToken(token: string): Buffer;
  /** The bytes that write a decrypted plaintext of type `type` in place of the value. */
  encodePlain(plaintext: Buffer, type: PlainType): Buffer;
  /** The bytes that write no value in its place (a redacted one): JSON `null`, an empty form value. */
  encodeNull(): Buffer;
}

export interface ValueHandler {
  /** Returns the bytes to emit in place of the value, or null to keep it unchanged. */
  replace(value: FieldValue): Buffer | null;
  /**
   * The handler writes tokens in place of plaintext: a form read for it is split at `;` as
   * well as `&`, so a server that splits there finds no plaintext either.
   */
  readonly protects?: boolean;
}

/** A format's streaming transformer: fed chunk by chunk, output appended to `out`. */
export interface ChunkTransformer {
  push(chunk: Buffer, out: Buffer[]): void;
  /** Signals the end of the body; throws if the document is incomplete. */
  end(out: Buffer[]): void;
}

/**
 * How much of a body a transformer may hold at once: one captured value or one object key
 * (the rest streams). `capture` is in bytes as written; `value` is the limit the 413 names.
 */
export interface CaptureLimits {
  readonly value: number;
  readonly capture: number;
}

/** No limit beyond the body's own (tools and tests that transform documents in memory). */
export const UNLIMITED: CaptureLimits = { value: Number.MAX_SAFE_INTEGER, capture: Number.MAX_SAFE_INTEGER };

/** `svc:` at the start and `:$` at the end of `text[start..end)`: cheap enough for every string. */
export function hasTokenShape(bytes: Buffer, start: number, end: number): boolean {
  return (
    end - start > 8 &&
    bytes[start] === 0x73 &&
    bytes[start + 1] === 0x76 &&
    bytes[start + 2] === 0x63 &&
    bytes[start + 3] === 0x3a &&
    bytes[end - 2] === 0x3a &&
    bytes[end - 1] === 0x24
  );
}
