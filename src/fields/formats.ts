/**
 * The body formats fields can be named in, behind one registry: choosing a format from a
 * request's headers happens here and nowhere else, and a new format is one entry.
 *
 * - JSON: `application/json` and `application/<anything>+json` (RFC 6839 §3.1).
 * - NDJSON: `application/x-ndjson` (also `application/jsonl`, `application/x-jsonlines`).
 * - Forms: `application/x-www-form-urlencoded`.
 *
 * A body in one of them that is compressed, or declared in another charset than UTF-8, is
 * `unreadable`, never `other`: passing it on untransformed would let plaintext by.
 */
import { InvalidFormError } from '../errors.ts';
import { FormTransformer } from './form.ts';
import { NdjsonTransformer } from './ndjson.ts';
import type { FieldMatcher } from './paths.ts';
import { JsonTransformer } from './transformer.ts';
import type { CaptureLimits, ChunkTransformer, ValueHandler } from './value.ts';

export interface BodyFormat {
  readonly name: 'json' | 'ndjson' | 'form';
  /** The content type of an answer written in this format. */
  readonly contentType: string;
  /** The plain media types of the format, for reading a content type by its prefix (`declaredFormat`). */
  readonly mediaTypes: readonly string[];
  /** Whether a media type (lower case, no parameters) is written in this format. */
  matches(mediaType: string): boolean;
  create(matcher: FieldMatcher, handler: ValueHandler, limits: CaptureLimits): ChunkTransformer;
}

export const JSON_FORMAT: BodyFormat = {
  name: 'json',
  contentType: 'application/json; charset=utf-8',
  mediaTypes: ['application/json'],
  matches: (type) => type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json')),
  create: (matcher, handler, limits) => new JsonTransformer(matcher, handler, limits),
};

export const NDJSON_FORMAT: BodyFormat = {
  name: 'ndjson',
  contentType: 'application/x-ndjson',
  mediaTypes: ['application/x-ndjson', 'application/jsonl', 'application/x-jsonlines'],
  matches(type) {
    return this.mediaTypes.includes(type);
  },
  create: (matcher, handler, limits) => new NdjsonTransformer(matcher, handler, limits),
};

export const FORM_FORMAT: BodyFormat = {
  name: 'form',
  contentType: 'application/x-www-form-urlencoded',
  mediaTypes: ['application/x-www-form-urlencoded'],
  matches(type) {
    return this.mediaTypes.includes(type);
  },
  create: (matcher, handler, limits) => new NotJson(new FormTransformer(matcher, handler, limits, { semicolons: handler.protects === true })),
};

/**
 * A "form" whose first byte other than whitespace (or a byte-order mark) is `{` or `[` is
 * refused (400): read as a form it names nothing, so its fields would go on untransformed,
 * while a reader that sniffs, or a framework that ignores the declared type, reads JSON.
 */
class NotJson implements ChunkTransformer {
  private readonly inner: ChunkTransformer;
  private decided = false;

  constructor(inner: ChunkTransformer) {
    this.inner = inner;
  }

  push(chunk: Buffer, out: Buffer[]): void {
    if (!this.decided) {
      let i = 0;
      while (i < chunk.length && LEADING.has(chunk[i]!)) i++;
      if (i < chunk.length) {
        this.decided = true;
        if (chunk[i] === 0x7b || chunk[i] === 0x5b) throw new InvalidFormError('it reads as JSON; send JSON as application/json');
      }
    }
    this.inner.push(chunk, out);
  }

  end(out: Buffer[]): void {
    this.inner.end(out);
  }
}

/** Whitespace, and the bytes of a UTF-8 byte-order mark, that a JSON reader may skip. */
const LEADING = new Set([0x20, 0x09, 0x0a, 0x0d, 0xef, 0xbb, 0xbf]);

/** Every format, in the order they are tried. */
export const ALL_FORMATS: readonly BodyFormat[] = [JSON_FORMAT, NDJSON_FORMAT, FORM_FORMAT];

/** What a body's headers say about it. */
export type Detected = BodyFormat | 'other' | 'unreadable';

/**
 * The format of a body from its `content-type` and `content-encoding`, among `formats`.
 * `other`: no content type, or one that is none of them. `unreadable`: one of them, but
 * compressed or in another charset than UTF-8.
 */
export function detectFormat(type: string | string[] | undefined, encoding: string | string[] | undefined, formats: readonly BodyFormat[] = ALL_FORMATS): Detected {
  return detectParsed(parseContentType(type), encoding, formats);
}

function detectParsed(parsed: ContentType | null, encoding: string | string[] | undefined, formats: readonly BodyFormat[]): Detected {
  if (parsed === null) return 'other';
  const format = formats.find((f) => f.matches(parsed.media));
  if (format === undefined) return 'other';
  return !isIdentity(encoding) || parsed.charset === 'other' ? 'unreadable' : format;
}

/**
 * As `detectFormat`, for a request body that may be read as JSON by its first byte
 * whatever its type: compressed, or declared in another charset than UTF-8, it is
 * `unreadable` whatever its type, since its bytes are not what a reader would see.
 */
export function detectRequestFormat(type: string | string[] | undefined, encoding: string | string[] | undefined, formats: readonly BodyFormat[] = ALL_FORMATS): Detected {
  const parsed = parseContentType(type);
  if (!isIdentity(encoding) || parsed?.charset === 'other') return 'unreadable';
  return detectParsed(parsed, undefined, formats);
}

/**
 * The format a request's `content-type` declares, read as the most lenient servers read
 * it: as `detectFormat` does, else by the type it starts with. PHP cuts the media type at
 * the first `,`, `;` or space, and Symfony tests a prefix, so to them
 * `application/x-www-form-urlencoded, text/plain`, `… x` and `…X` are forms: a body the
 * application parses as a form must be read as one here too. Charset and encoding are the
 * caller's to check; null: no format.
 */
export function declaredFormat(type: string | string[] | undefined, formats: readonly BodyFormat[] = ALL_FORMATS): BodyFormat | null {
  const parsed = parseContentType(type);
  if (parsed === null) return null;
  const strict = formats.find((f) => f.matches(parsed.media));
  if (strict !== undefined) return strict;
  const value = (Array.isArray(type) ? type[0]! : type!).trim().toLowerCase();
  return formats.find((f) => f.mediaTypes.some((media) => value.startsWith(media))) ?? null;
}

/** No `content-encoding`, or only `identity`. */
export function isIdentity(encoding: string | string[] | undefined): boolean {
  const coding = (Array.isArray(encoding) ? encoding.join(',') : encoding)?.trim().toLowerCase();
  return coding === undefined || coding === '' || coding === 'identity';
}

export interface ContentType {
  readonly media: string;
  readonly charset: 'absent' | 'utf-8' | 'other';
}

/** Content types already parsed, by their exact text: a request's is read up to three times. */
const parsedTypes = new Map<string, ContentType>();
const MAX_PARSED_TYPES = 64;
/** Longer texts are parsed every time rather than kept. */
const MAX_REMEMBERED_TYPE = 200;

/**
 * A `content-type`'s media type (lower case) and what its `charset` says: absent, UTF-8,
 * or `other` — another charset, or more than one `charset` parameter, since readers
 * disagree on which counts (RFC 9110 §5.6.6 parameters: `;`-separated, values may be quoted).
 */
export function parseContentType(type: string | string[] | undefined): ContentType | null {
  const value = Array.isArray(type) ? type[0] : type;
  if (value === undefined) return null;
  if (value.length > MAX_REMEMBERED_TYPE) return parseValue(value);
  let parsed = parsedTypes.get(value);
  if (parsed === undefined) {
    parsed = Object.freeze(parseValue(value));
    // A service sees a handful of spellings; whoever sends thousands only empties the memory.
    if (parsedTypes.size >= MAX_PARSED_TYPES) parsedTypes.clear();
    parsedTypes.set(value, parsed);
  }
  return parsed;
}

function parseValue(value: string): ContentType {
  const parts = splitParameters(value);
  const media = parts[0]!.trim().toLowerCase();
  let charset: 'absent' | 'utf-8' | 'other' = 'absent';
  for (const part of parts.slice(1)) {
    const eq = part.indexOf('=');
    if (eq === -1 || part.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    let raw = part.slice(eq + 1).trim();
    if (raw.startsWith('"')) raw = raw.slice(1, raw.endsWith('"') ? -1 : undefined).replace(/\\(.)/g, '$1');
    const lower = raw.toLowerCase();
    charset = charset === 'absent' && (lower === 'utf-8' || lower === 'utf8') ? 'utf-8' : 'other';
  }
  return { media, charset };
}

/** Splits at `;` outside double quotes. */
function splitParameters(value: string): string[] {
  const parts: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (quoted && c === '\\' && i + 1 < value.length) {
      current += c + value[++i];
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === ';' && !quoted) {
      parts.push(current);
      current = '';
    } else {
      current += c;
    }
  }
  parts.push(current);
  return parts;
}

const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * A transformer that decides its format from the body itself: a body declared in one of
 * the formats is read as declared; one declared in none is JSON when its first byte other
 * than whitespace is `{` or `[` (an application may well parse it as JSON), else it passes
 * unchanged. A UTF-8 byte-order mark at the start, and leading whitespace, stream through
 * while it waits (parsers skip both). `onDecided` learns the choice (null: no format) and
 * the first byte, and may throw to refuse the body.
 */
export class SniffingTransformer implements ChunkTransformer {
  private readonly declared: BodyFormat | null;
  private readonly build: (format: BodyFormat) => ChunkTransformer;
  private readonly onDecided: (format: BodyFormat | null, first: number) => void;
  private inner: ChunkTransformer | null = null;
  private decided = false;
  /** The first bytes while they may still be the start of a byte-order mark. */
  private head: Buffer | null = Buffer.alloc(0);

  constructor(declared: BodyFormat | null, build: (format: BodyFormat) => ChunkTransformer, onDecided: (format: BodyFormat | null, first: number) => void = () => {}) {
    this.declared = declared;
    this.build = build;
    this.onDecided = onDecided;
  }

  push(chunk: Buffer, out: Buffer[]): void {
    if (this.head !== null) {
      const joined = this.head.length === 0 ? chunk : Buffer.concat([this.head, chunk]);
      if (joined.length < BOM.length && BOM.subarray(0, joined.length).equals(joined)) {
        this.head = joined;
        return;
      }
      this.head = null;
      chunk = joined;
      if (chunk.subarray(0, BOM.length).equals(BOM)) {
        out.push(chunk.subarray(0, BOM.length));
        chunk = chunk.subarray(BOM.length);
      }
    }
    if (!this.decided) {
      let i = 0;
      while (i < chunk.length && WHITESPACE.has(chunk[i]!)) i++;
      if (i === chunk.length) {
        if (chunk.length > 0) out.push(chunk);
        return;
      }
      if (i > 0) out.push(chunk.subarray(0, i));
      chunk = chunk.subarray(i);
      const first = chunk[0]!;
      const format = this.declared ?? (first === 0x7b || first === 0x5b ? JSON_FORMAT : null);
      this.decided = true;
      this.onDecided(format, first);
      this.inner = format === null ? null : this.build(format);
    }
    if (this.inner === null) out.push(chunk);
    else this.inner.push(chunk, out);
  }

  /** A body of nothing but whitespace (or a lone mark) is no document: it stays as it is. */
  end(out: Buffer[]): void {
    if (this.head !== null && this.head.length > 0) out.push(this.head);
    this.head = null;
    this.inner?.end(out);
  }
}
