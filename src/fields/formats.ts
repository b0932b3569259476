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
import { FormTransformer } from './form.ts';
import { NdjsonTransformer } from './ndjson.ts';
import type { FieldMatcher } from './paths.ts';
import { JsonTransformer } from './transformer.ts';
import type { CaptureLimits, ChunkTransformer, ValueHandler } from './value.ts';

export interface BodyFormat {
  readonly name: 'json' | 'ndjson' | 'form';
  /** The content type of an answer written in this format. */
  readonly contentType: string;
  /** Whether a media type (lower case, no parameters) is written in this format. */
  matches(mediaType: string): boolean;
  create(matcher: FieldMatcher, handler: ValueHandler, limits: CaptureLimits): ChunkTransformer;
}

export const JSON_FORMAT: BodyFormat = {
  name: 'json',
  contentType: 'application/json; charset=utf-8',
  matches: (type) => type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json')),
  create: (matcher, handler, limits) => new JsonTransformer(matcher, handler, limits),
};

export const NDJSON_FORMAT: BodyFormat = {
  name: 'ndjson',
  contentType: 'application/x-ndjson',
  matches: (type) => type === 'application/x-ndjson' || type === 'application/jsonl' || type === 'application/x-jsonlines',
  create: (matcher, handler, limits) => new NdjsonTransformer(matcher, handler, limits),
};

export const FORM_FORMAT: BodyFormat = {
  name: 'form',
  contentType: 'application/x-www-form-urlencoded',
  matches: (type) => type === 'application/x-www-form-urlencoded',
  create: (matcher, handler, limits) => new FormTransformer(matcher, handler, limits),
};

/** Every format, in the order they are tried. */
export const ALL_FORMATS: readonly BodyFormat[] = [JSON_FORMAT, NDJSON_FORMAT, FORM_FORMAT];

/** What a body's headers say about it. */
export type Detected = BodyFormat | 'other' | 'unreadable';

/**
 * The format of a body from its `content-type` and `content-encoding`, among `formats`.
 * `other`: no content type, or one that is none of them. `unreadable`: one of them, but
 * compressed or in another charset.
 */
export function detectFormat(type: string | string[] | undefined, encoding: string | string[] | undefined, formats: readonly BodyFormat[] = ALL_FORMATS): Detected {
  const value = Array.isArray(type) ? type[0] : type;
  if (value === undefined) return 'other';
  const semi = value.indexOf(';');
  const media = (semi === -1 ? value : value.slice(0, semi)).trim().toLowerCase();
  const format = formats.find((f) => f.matches(media));
  if (format === undefined) return 'other';
  if (!isIdentity(encoding)) return 'unreadable';
  if (semi !== -1) {
    const charset = /charset\s*=\s*"?([^";\s]+)/i.exec(value.slice(semi))?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') return 'unreadable';
  }
  return format;
}

/** No `content-encoding`, or only `identity`. */
export function isIdentity(encoding: string | string[] | undefined): boolean {
  const coding = (Array.isArray(encoding) ? encoding.join(',') : encoding)?.trim().toLowerCase();
  return coding === undefined || coding === '' || coding === 'identity';
}

const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * A transformer that decides its format from the body itself: a body whose first byte
 * other than whitespace is `{` or `[` is JSON whatever its declared type (an application
 * may well parse it as JSON), else it is the declared format, if any. Leading whitespace
 * streams through while it waits. `onDecided` learns the choice (null: no format, the
 * bytes pass unchanged), and may throw to refuse the body.
 */
export class SniffingTransformer implements ChunkTransformer {
  private readonly declared: BodyFormat | null;
  private readonly build: (format: BodyFormat) => ChunkTransformer;
  private readonly onDecided: (format: BodyFormat | null) => void;
  private inner: ChunkTransformer | null = null;
  private decided = false;

  constructor(declared: BodyFormat | null, build: (format: BodyFormat) => ChunkTransformer, onDecided: (format: BodyFormat | null) => void = () => {}) {
    this.declared = declared;
    this.build = build;
    this.onDecided = onDecided;
  }

  push(chunk: Buffer, out: Buffer[]): void {
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
      const format = (first === 0x7b || first === 0x5b) && this.declared?.name !== 'ndjson' ? JSON_FORMAT : this.declared;
      this.decided = true;
      this.onDecided(format);
      this.inner = format === null ? null : this.build(format);
    }
    if (this.inner === null) out.push(chunk);
    else this.inner.push(chunk, out);
  }

  /** A body of nothing but whitespace is no document: it stays as it is. */
  end(out: Buffer[]): void {
    this.inner?.end(out);
  }
}
