/**
 * Test support: where a plaintext shows up in bytes that left the service, in any of the
 * spellings a reader could turn back into it. A check that searched the raw bytes only
 * would call `123\u002d45…` or `MTIzLTQ1…` protected; this one looks through
 *
 * - the bytes as they are: the plaintext raw, JSON-escaped (short and `\uXXXX` forms, either
 *   hex case), percent-encoded (URI and form spellings, either hex case) and in base64 or
 *   base64url at each of the three alignments it can take inside a longer text;
 * - the bytes decompressed (gzip, deflate, raw deflate, brotli), if they are;
 * - the bytes read as JSON, as NDJSON lines and as a form, written back in one canonical
 *   spelling, so escapes of any kind are undone.
 */
import { brotliDecompressSync, gunzipSync, inflateRawSync, inflateSync } from 'node:zlib';

/** The spellings of `secret` searched for, by name. */
export function spellings(secret: string): Map<string, string> {
  const bytes = Buffer.from(secret, 'utf8');
  const found = new Map<string, string>();
  const add = (name: string, text: string) => {
    if (text.length > 0 && ![...found.values()].includes(text)) found.set(name, text);
  };
  add('raw', secret);
  add('JSON-escaped', JSON.stringify(secret).slice(1, -1));
  const u = [...secret].map((c) => [...c].map((_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join('')).join('');
  add('JSON \\u-escaped', u);
  add('JSON \\u-escaped (upper hex)', u.replace(/\\u([0-9a-f]{4})/g, (_, h: string) => `\\u${h.toUpperCase()}`));
  add('percent-encoded', encodeURIComponent(secret));
  add('form-encoded', new URLSearchParams({ x: secret }).toString().slice(2));
  const every = [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
  add('percent-encoded (every byte)', every.toUpperCase());
  add('percent-encoded (every byte, lower hex)', every);
  for (let align = 0; align < 3; align++) {
    const core = base64Core(bytes, align);
    if (core === null) continue;
    add(`base64 (offset ${align})`, core);
    add(`base64url (offset ${align})`, core.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return found;
}

/**
 * The base64 characters of `bytes` that do not depend on what surrounds them when they
 * start `align` bytes into a 3-byte group: the first and last partial groups are dropped.
 */
function base64Core(bytes: Buffer, align: number): string | null {
  const text = Buffer.concat([Buffer.alloc(align), bytes]).toString('base64').replace(/=+$/, '');
  const start = align === 0 ? 0 : 4;
  const whole = Math.floor((align + bytes.length) / 3) * 4;
  const core = text.slice(start, whole);
  return core.length >= 4 ? core : null;
}

/** Other readings of `bytes`: decompressed, and re-serialised as JSON, NDJSON or a form. */
function readings(bytes: Buffer): Array<[string, Buffer]> {
  const out: Array<[string, Buffer]> = [['as sent', bytes]];
  for (const [name, inflate] of [
    ['gunzip', gunzipSync],
    ['inflate', inflateSync],
    ['inflate-raw', inflateRawSync],
    ['brotli', brotliDecompressSync],
  ] as const) {
    try {
      const plain = inflate(bytes);
      if (plain.length > 0) out.push([name, plain]);
    } catch {
      // not compressed this way
    }
  }
  for (const [how, body] of [...out]) {
    const text = body.toString('utf8').replace(/^\uFEFF/, '');
    const json = parseJson(text);
    if (json !== undefined) out.push([`${how}, read as JSON`, Buffer.from(JSON.stringify(json))]);
    const lines = text.split(/\r?\n/).map(parseJson).filter((v) => v !== undefined);
    if (lines.length > 1) out.push([`${how}, read as NDJSON`, Buffer.from(JSON.stringify(lines))]);
    if (text.includes('=')) {
      const form = [...new URLSearchParams(text.replace(/;/g, '&'))].flat().join('\n');
      out.push([`${how}, read as a form`, Buffer.from(form)]);
    }
  }
  return out;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * Where `secret` appears in `bytes` ("raw in as sent", "base64 (offset 1) in gunzip"...), or
 * null. Case matters for the raw text, not for hex digits (both cases are searched).
 */
export function findPlaintext(bytes: Buffer, secret: string): string | null {
  const wanted = spellings(secret);
  for (const [how, body] of readings(bytes)) {
    const text = body.toString('latin1');
    const utf8 = body.toString('utf8');
    for (const [name, spelling] of wanted) {
      if (utf8.includes(spelling) || text.includes(Buffer.from(spelling, 'utf8').toString('latin1'))) return `${name} in ${how}`;
    }
  }
  return null;
}

/** Every secret of `secrets` found in `bytes`, each with where: empty when none is. */
export function plaintextsIn(bytes: Buffer, secrets: readonly string[]): string[] {
  const found: string[] = [];
  for (const secret of secrets) {
    const where = findPlaintext(bytes, secret);
    if (where !== null) found.push(`${JSON.stringify(secret)} (${where})`);
  }
  return found;
}
