/**
 * fast-check arbitraries for the fuzz suite (fuzz.test.ts): whole requests over every
 * endpoint of the main listener, and raw byte streams for its HTTP parser.
 *
 * Requests are built from a `World`: the ids, keys, tokens and destinations of one running
 * service, so that a good share of the requests get past authentication and validation and
 * reach the deeper code. Everything a request may destroy (delete, revoke, rotate, destroy
 * a key version, log out) is aimed at sacrificial resources made for the purpose, so the
 * fuzz never takes away the keys and configurations the rest of it relies on.
 *
 * Every HTTP case is something undici will send as is: header values in latin1 without
 * CR, LF or NUL, paths in `\x21-\xff`. What undici refuses to send is the raw cases' job.
 */
import fc from 'fast-check';
import { spell, rng, type Json } from '../support/json-gen.ts';

export interface World {
  /** The echo destination, e.g. `http://127.0.0.1:4711` (allowlisted as `${echo}/` for `payments`, `${echo}/api/` for `lookup`). */
  readonly echo: string;
  /** The port of the main listener, for absolute-form request targets. */
  readonly port: number;
  readonly keys: {
    readonly owner: string;
    /** Valid keys of other users and scopes. */
    readonly others: readonly string[];
    readonly revoked: string;
  };
  readonly bearer: {
    readonly valid: string;
    readonly loggedOut: string;
    /** HS256 with the right shape but signed with another secret. */
    readonly forged: string;
    /** Fresh tokens only the logout route may use (and so end). */
    readonly forLogout: readonly string[];
  };
  readonly configurations: { readonly all: readonly string[]; readonly sacrificial: readonly string[] };
  readonly classifications: {
    readonly all: readonly number[];
    /** Of the seeded classifications, which no request deletes. */
    readonly slugs: readonly string[];
    readonly sacrificial: readonly number[];
  };
  readonly apiKeys: { readonly all: readonly string[]; readonly sacrificial: readonly string[] };
  readonly emails: readonly string[];
  /** Real tokens from the data-plane configurations, with and without classifications. */
  readonly tokens: readonly string[];
  /** docs/openapi.json. */
  readonly openapi: OpenApi;
}

export interface OpenApi {
  paths: Record<string, Record<string, unknown>>;
  components: { schemas: Record<string, Schema>; parameters: Record<string, Schema> };
}

type Schema = Record<string, unknown>;

export interface HttpCase {
  readonly kind: 'http';
  readonly family: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: Buffer | null;
}

export interface RawCase {
  readonly kind: 'raw';
  readonly family: string;
  readonly bytes: Buffer;
  /** Written in this many pieces, so the parser also sees requests split mid-token. */
  readonly pieces: number;
}

export type FuzzCase = HttpCase | RawCase;

/** Slugs the data plane may use; sacrificial configurations are `fz-…` and never targeted. */
const DATA_SLUGS = ['payments', 'lookup', 'other-config'] as const;

/** Over the default 10 MiB `server.body_limit`: shared, so a sample holds no copies. */
const HUGE_BODY = Buffer.from(`{"a":"${'x'.repeat(10 * 1024 * 1024 + 16)}"}`);

// ---------------------------------------------------------------------------------------
// Small helpers

/** UTF-8 bytes as latin1 characters (how undici and Node carry header bytes), minus what no header may hold. */
export function headerText(s: string): string {
  return Buffer.from(s, 'utf8').toString('latin1').replace(/[^\t\x20-\x7e\x80-\xff]/g, '');
}

/** UTF-8 bytes as latin1 characters, percent-encoding what cannot appear raw in a request target. */
export function pathText(s: string): string {
  return Buffer.from(s, 'utf8')
    .toString('latin1')
    .replace(/[^\x21-\xff]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}

export function weighted<T>(...entries: Array<[number, fc.Arbitrary<T>]>): fc.Arbitrary<T> {
  return fc.oneof(...entries.map(([weight, arbitrary]) => ({ weight, arbitrary })));
}

/** `arb` with weight `present`, else `nil` with weight `absent`. */
export function sometimes<T, N>(arb: fc.Arbitrary<T>, present: number, absent: number, nil: N): fc.Arbitrary<T | N> {
  return fc.oneof({ weight: present, arbitrary: arb as fc.Arbitrary<T | N> }, { weight: absent, arbitrary: fc.constant(nil) as fc.Arbitrary<T | N> });
}

export const text = (max: number) => fc.string({ maxLength: max, unit: 'grapheme' });
/** Any bytes as latin1 characters (fc's 'binary' unit would build a map of every code point first). */
export const binaryText = (max: number) => fc.uint8Array({ maxLength: max }).map((b) => Buffer.from(b).toString('latin1'));

export const TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~";
const BASE62 = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

export function charsFrom(alphabet: string, min: number, max: number): fc.Arbitrary<string> {
  return fc.array(fc.constantFrom(...alphabet.split('')), { minLength: min, maxLength: max }).map((a) => a.join(''));
}

/** Values a field, id or slug must survive: numbers out of range, injection, traversal, prototype names. */
export const HOSTILE = [
  '0', '-1', '1.5', '1e3', '0x10', '+1', ' 1', '1 ', '01', '9007199254740993', '99999999999999999999999999',
  'NaN', 'Infinity', '-Infinity', 'null', 'undefined', 'true', '[]', '{}', '__proto__', 'constructor', 'prototype',
  'toString', 'hasOwnProperty', "' OR '1'='1", '1; DROP TABLE users; --', '1 OR 1=1', '"', "'", '\\', '%', '%%',
  '%00', '%zz', '%C0%AF', '%2e%2e', '%2F', 'a%2Fb', '..', '.', '%2e', '%252e', '<script>', '${jndi:x}', '{{7*7}}',
  'é', 'ü%C3%BC', '\u{1F600}', '\u202E', 'x'.repeat(300), '00000000-0000-0000-0000-000000000000',
  'ffffffff-ffff-ffff-ffff-ffffffffffff', 'zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz',
];

// ---------------------------------------------------------------------------------------
// Headers

function apiKeyArb(w: World): fc.Arbitrary<string> {
  const owner = w.keys.owner;
  return weighted<string>(
    [45, fc.constant(owner)],
    [20, fc.constantFrom(...w.keys.others)],
    [2, fc.constant(w.keys.revoked)],
    [2, charsFrom(BASE62, 40, 40).map((s) => `svc_${s}`)],
    [1, binaryText(60)],
    [1, fc.constantFrom(owner.toUpperCase(), ` ${owner}\t`, owner.slice(0, 20), `${owner}x`, `Bearer ${owner}`, `${owner},${owner}`, '', 'svc_', 'null')],
  ).map(headerText);
}

function bearerArb(w: World): fc.Arbitrary<string> {
  return weighted<string>(
    [6, fc.constant(`Bearer ${w.bearer.valid}`)],
    [2, fc.constant(`Bearer ${w.bearer.loggedOut}`)],
    [2, fc.constant(`Bearer ${w.bearer.forged}`)],
    [2, fc.constantFrom('Bearer', 'Bearer ', `bearer\t${w.bearer.valid}`, `BEARER ${w.bearer.valid} `, `Bearer ${w.bearer.valid} x`, 'Basic dXNlcjpwYXNz', `Bearer ${w.bearer.valid.slice(0, -3)}`, 'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.', `Bearer ${w.keys.owner}`)],
    [2, fc.tuple(fc.base64String({ maxLength: 40 }), fc.base64String({ maxLength: 80 }), fc.base64String({ maxLength: 40 })).map(([a, b, c]) => `Bearer ${a}.${b}.${c}`)],
    [1, binaryText(80)],
  ).map(headerText);
}

/** `x-svc-fields`: valid paths over the generated documents' keys, escapes good and bad, brackets, wildcards, limits. */
function fieldsArb(): fc.Arbitrary<string> {
  const segment = weighted<string>(
    [10, fc.constantFrom('card', 'number', 'items', 'email', 'tags', 'ssn', 'a', 'b', 'n', '0', '1', '*', 'é', 'a\\.b', '\\*')],
    [3, charsFrom('abcxyz0129_-', 1, 8)],
    [3, charsFrom('ab.*\\[]$"\' ,\t:é', 1, 10)],
    [2, fc.constantFrom('', ' ', '\\', '\\x', '\\\\', '\\.', 'a\\', '[0]', '[*]', 'items[0]', '$', '$.a', '..', '*x', 'x*', '**', '\\u0041', '%2e', '\u{1F600}')],
    [1, fc.integer({ min: 100, max: 9000 }).map((n) => 'x'.repeat(n))],
    [2, text(6)],
  );
  const path = weighted<string>(
    [20, fc.array(segment, { minLength: 1, maxLength: 6 }).map((s) => s.join('.'))],
    [1, fc.integer({ min: 60, max: 70 }).map((n) => Array.from({ length: n }, (_, i) => `s${i}`).join('.'))],
  );
  const separator = fc.constantFrom(',', ', ', ' , ', ',,', ',\t');
  const sane = fc.constantFrom('card.number', 'items.*.email', 'items.0.email', 'tags', 'tags.*', 'ssn', 'a', 'b', 'n', '*', 'a\\.b', '\\*', 'é', 'card', 'items', 'number', 'email', 'a.b', '*.number', 'items.*');
  return weighted<string>(
    [30, fc.tuple(fc.array(sane, { minLength: 1, maxLength: 4 }), separator).map(([paths, sep]) => paths.join(sep))],
    [20, fc.tuple(fc.array(path, { minLength: 0, maxLength: 6 }), separator).map(([paths, sep]) => paths.join(sep))],
    [1, fc.integer({ min: 120, max: 140 }).map((n) => Array.from({ length: n }, (_, i) => `f${i}`).join(','))],
    [1, fc.constantFrom('*', '*.*', '*.*.*.*.*.*.*.*', ',', '', ' ', 'card.number,card.number', 'card.number, ,items.*.email')],
  ).map(headerText);
}

function classificationArb(w: World): fc.Arbitrary<string> {
  return weighted<string>(
    [8, fc.constantFrom(...w.classifications.slugs, ...w.classifications.all.map(String))],
    [2, fc.constantFrom('PHI', ' phi ', 'nope', '0', '-1', '999999', '1e0', '01', 'x'.repeat(129), 'phi,pci', '%70hi')],
    [2, fc.constantFrom(...HOSTILE)],
    [1, text(20)],
  ).map(headerText);
}

function modeArb(): fc.Arbitrary<string> {
  return weighted<string>(
    [10, fc.constantFrom('encrypt', 'decrypt')],
    [2, fc.constantFrom('ENCRYPT', ' Decrypt ', '', 'rewrap', 'encrypt,decrypt', 'decrypt\t', 'de crypt')],
    [1, text(12)],
  ).map(headerText);
}

/**
 * `x-svc-destination`. Allowlisted ones all lead to the live echo server (so a 5xx there
 * is a defect); the rest are refused before any connection: other hosts and ports, other
 * schemes, private addresses the allowlist does not name, and URLs that do not parse.
 */
function destinationArb(w: World): fc.Arbitrary<string> {
  const echo = new URL(w.echo);
  const port = echo.port;
  const tail = weighted<string>(
    [6, fc.webPath().map((p) => `/api${p.startsWith('/') ? p : `/${p}`}`)],
    [4, fc.webPath()],
    [2, fc.tuple(fc.webPath(), fc.webQueryParameters()).map(([p, q]) => `${p}?${q}`)],
    [2, fc.constantFrom('', '/', '/api/', '/api/x', '/api', '/apix', '/api/../x', '/%2e%2e/x', '/a b', '/ü', '/#frag', '/?a=1&a=2', '//x', '/..', '/api/%2F..%2F')],
    [1, text(30).map((s) => `/${s}`)],
  );
  const userinfo = fc.constantFrom('u:p@', 'u@', ':p@', '%zz:x@', 'a:%zz@', '%C0%AF:x@', '%E2%82:y@', 'us%40er:p%3Aw@', '%00:%00@', 'ü:ö@');
  const allowlisted = weighted<string>(
    [10, tail.map((t) => `${w.echo}${t.startsWith('/') ? t : `/${t}`}`)],
    [3, fc.tuple(userinfo, tail).map(([u, t]) => `http://${u}127.0.0.1:${port}${t.startsWith('/') ? t : `/${t}`}`)],
    [2, fc.constantFrom(`HTTP://127.0.0.1:${port}/`, `http://127.0.0.1:0${port}/`, `http://2130706433:${port}/`, `http://127.1:${port}/api/`, `http://0x7f.0.0.1:${port}/`, `http://127.0.0.1.:${port}/`, `  ${w.echo}/  `, `${w.echo}`, `${w.echo}/api`)],
  );
  const refused = weighted<string>(
    [4, fc.webUrl({ withQueryParameters: true, withFragments: true })],
    [3, fc.constantFrom(`http://localhost:${port}/`, `http://[::1]:${port}/`, `http://[::ffff:127.0.0.1]:${port}/`, `http://127.0.0.2:${port}/`, `http://0.0.0.0:${port}/`, `https://127.0.0.1:${port}/`, `http://127.0.0.1:${Number(port) + 1}/`, `http://127.0.0.1/`, 'http://10.0.0.1/', 'http://169.254.169.254/latest/meta-data/', 'http://example.com/', 'https://api.vendor.example/v1/')],
    [3, fc.constantFrom('ftp://127.0.0.1/', 'file:///etc/passwd', 'javascript:alert(1)', 'data:,x', '/relative', '127.0.0.1', 'http://', 'http://[', 'http://:80/', 'http://a b/', 'http://%zz/', `http://127.0.0.1:${port}:${port}/`, `http://127.0.0.1:99999/`, 'x'.repeat(9000), 'http://ü.example/', 'http://xn--/', '\\\\127.0.0.1\\x', 'mailto:a@b')],
    [2, text(40)],
  );
  return weighted<string>([6, allowlisted], [4, refused]).map(headerText);
}

function contentTypeArb(kind: BodyKind): fc.Arbitrary<string> {
  const json = weighted<string>(
    [20, fc.constant('application/json')],
    [3, fc.constantFrom('application/json; charset=utf-8', 'APPLICATION/JSON', 'application/json;charset="UTF-8"', 'application/vnd.api+json', 'application/json ; charset=UTF8', 'application/json; foo=bar')],
  );
  const other = weighted<string>(
    [3, fc.constantFrom('application/json; charset=latin1', 'application/json; charset=utf-16', 'text/plain', 'multipart/form-data; boundary=x', 'application/x-www-form-urlencoded', '', 'json', 'application/', ';', 'application/json+', 'application/+json', 'application/x-ndjson; charset=iso-8859-1', '*/*')],
    [1, text(30)],
  );
  const ndjson = fc.constantFrom('application/x-ndjson', 'application/x-ndjson; charset=utf-8', 'APPLICATION/X-NDJSON');
  if (kind === 'ndjson') return weighted<string>([8, ndjson], [1, json], [1, other]).map(headerText);
  return weighted<string>([8, json], [1, ndjson], [1, other]).map(headerText);
}

/** Headers a client might add anyway, including ours under odd spellings and hop-by-hop ones. */
function extraHeadersArb(w: World): fc.Arbitrary<Record<string, string>> {
  const name = weighted<string>(
    [4, fc.constantFrom('X-Svc-Fields', 'X-SVC-DESTINATION', 'x-svc-unknown', 'x-svc-', 'cookie', 'accept', 'accept-encoding', 'content-encoding', 'x-forwarded-for', 'forwarded', 'via', 'te', 'trailer', 'proxy-authorization', 'proxy-connection', 'origin', 'referer', 'user-agent', 'x-http-method-override', 'range', 'if-none-match', 'x-vendor-key', 'authorization', 'host')],
    [2, charsFrom(TOKEN_CHARS, 1, 30)],
  );
  const value = weighted<string>(
    [6, text(40)],
    [2, binaryText(40)],
    [1, fc.constantFrom('gzip', 'identity', 'deflate, br', 'trailers', 'chunked', '127.0.0.1', 'evil.example', `127.0.0.1:${w.port}`, 'a'.repeat(300), '"', 'for=1.2.3.4')],
    [1, fc.integer({ min: 1000, max: 20000 }).map((n) => 'v'.repeat(n))],
  );
  // Header names compare case-insensitively, and undici refuses to send these itself.
  const unsendable = /^(transfer-encoding|keep-alive|upgrade|connection|content-length|expect)$/i;
  // undici asserts (and then wedges the connection) on a host that opens an IPv6 bracket it does not close.
  return fc.dictionary(name.filter((n) => !unsendable.test(n)), value.map(headerText), { maxKeys: 3 }).map((headers) => {
    for (const k of Object.keys(headers)) if (k.toLowerCase() === 'host' && headers[k]!.startsWith('[')) headers[k] = `x${headers[k]}`;
    return headers;
  });
}

interface HeaderPlan {
  key?: boolean;
  bearer?: boolean;
  fields?: boolean;
  classification?: boolean;
  mode?: boolean;
  destination?: boolean;
}

/** Headers before the body is known: the content type is settled by `finishHeaders`. */
export interface HeaderDraft {
  readonly headers: Record<string, string>;
  readonly types: { readonly json: string; readonly ndjson: string };
  /** Below 1 a bodiless request still sends a content type; below 12 (of 13) a body does. */
  readonly typeRoll: number;
}

/** A header set: each header present with its own probability, values from the arbitraries above. */
export function headersArb(w: World, plan: HeaderPlan, bearerOverride?: fc.Arbitrary<string>): fc.Arbitrary<HeaderDraft> {
  const bearer = bearerOverride ?? bearerArb(w);
  const record = fc.record({
    key: sometimes(apiKeyArb(w), plan.key === false ? 1 : 24, 1, undefined),
    bearer: sometimes(bearer, 1, plan.bearer === true ? 5 : 15, undefined),
    fields: plan.fields === true ? sometimes(fieldsArb(), 3, 1, undefined) : fc.constant(undefined),
    classification: plan.classification === true ? sometimes(classificationArb(w), 1, 2, undefined) : fc.constant(undefined),
    mode: plan.mode === true ? sometimes(modeArb(), 1, 1, undefined) : fc.constant(undefined),
    destination: plan.destination === true ? sometimes(destinationArb(w), 1, 1, undefined) : fc.constant(undefined),
    types: fc.record({ json: contentTypeArb('json'), ndjson: contentTypeArb('ndjson') }),
    typeRoll: fc.integer({ min: 0, max: 12 }),
    requestId: sometimes(weighted<string>([3, charsFrom('abcXYZ019._:-', 1, 20)], [1, fc.constantFrom('x'.repeat(129), 'a b', '', 'é', '../../etc')]).map(headerText), 1, 3, undefined),
    extra: sometimes(extraHeadersArb(w), 1, 4, undefined),
  });
  return record.map((r) => {
    const headers: Record<string, string> = {};
    if (r.extra !== undefined) Object.assign(headers, r.extra);
    if (r.key !== undefined) headers['x-svc-authorization'] = r.key;
    if (r.bearer !== undefined) headers['authorization'] = r.bearer;
    if (r.fields !== undefined) headers['x-svc-fields'] = r.fields;
    if (r.classification !== undefined) headers['x-svc-classification'] = r.classification;
    if (r.mode !== undefined) headers['x-svc-mode'] = r.mode;
    if (r.destination !== undefined) headers['x-svc-destination'] = r.destination;
    if (r.requestId !== undefined) headers['x-svc-request-id'] = r.requestId;
    return { headers, types: r.types, typeRoll: r.typeRoll };
  });
}

/**
 * Headers a well-behaved client sends: a key that may use the data plane, sane field
 * paths, a real classification or none, an allowlisted destination or none. Half the
 * data-plane requests use these, so that the bodies, not the headers, decide what happens.
 */
function saneHeadersArb(w: World, withMode: boolean): fc.Arbitrary<HeaderDraft> {
  const echo = new URL(w.echo);
  const sane = fc.constantFrom('card.number', 'items.*.email', 'tags.*', 'ssn', 'a', 'b', 'n', '*', 'a\\.b', 'card', 'items', 'tags');
  return fc
    .record({
      key: weighted<string>([6, fc.constant(w.keys.owner)], [1, fc.constantFrom(...w.keys.others)]),
      fields: sometimes(fc.array(sane, { minLength: 1, maxLength: 4 }).map((f) => f.join(',')), 4, 1, undefined),
      classification: sometimes(fc.constantFrom(...w.classifications.slugs), 1, 3, undefined),
      mode: withMode ? sometimes(fc.constantFrom('encrypt', 'decrypt'), 1, 1, undefined) : fc.constant(undefined),
      destination: sometimes(fc.tuple(fc.constantFrom('/', '/api/', '/api/v1/charges', '/x?y=1'), fc.webSegment()).map(([p, seg]) => `${echo.origin}${p}${encodeURIComponent(seg)}`), 1, 1, undefined),
      types: fc.record({ json: fc.constant('application/json'), ndjson: fc.constant('application/x-ndjson') }),
    })
    .map((r) => {
      const headers: Record<string, string> = { 'x-svc-authorization': r.key };
      if (r.fields !== undefined) headers['x-svc-fields'] = r.fields;
      if (r.classification !== undefined) headers['x-svc-classification'] = r.classification;
      if (r.mode !== undefined) headers['x-svc-mode'] = r.mode;
      if (r.destination !== undefined) headers['x-svc-destination'] = r.destination;
      return { headers, types: r.types, typeRoll: 0 };
    });
}

export function finishHeaders(draft: HeaderDraft, kind: BodyKind | null): Record<string, string> {
  if (draft.typeRoll >= (kind === null ? 1 : 12)) return draft.headers;
  return { ...draft.headers, 'content-type': kind === 'ndjson' ? draft.types.ndjson : draft.types.json };
}

// ---------------------------------------------------------------------------------------
// Bodies

export type BodyKind = 'json' | 'ndjson' | 'other';

export interface Body {
  readonly kind: BodyKind;
  readonly bytes: Buffer;
}

export function tokenArb(w: World): fc.Arbitrary<string> {
  const real = fc.constantFrom(...w.tokens);
  const mutated = fc.tuple(real, fc.nat(), fc.integer({ min: 0, max: 8 }), fc.constantFrom(...'A_-0z$:.=+/ '.split(''))).map(([t, at, op, ch]) => {
    const i = at % t.length;
    const parts = t.split(':');
    switch (op) {
      case 0: return t.slice(0, i) + ch + t.slice(i + 1);
      case 1: return t.slice(0, i);
      case 2: return ['svc', '999', ...parts.slice(2)].join(':');
      case 3: return ['svc', '0', ...parts.slice(2)].join(':');
      case 4: return ['svc', parts[1], parts[3], parts[2], '$'].join(':');
      case 5: return ['svc', parts[1], `${parts[2]}AA`, parts[3], '$'].join(':');
      case 6: return ['svc', parts[1], parts[2], '', '$'].join(':');
      case 7: return t.toUpperCase();
      default: return `${t}${t}`;
    }
  });
  return weighted<string>([6, real], [3, mutated], [1, fc.constantFrom('svc:1:::$', 'svc:', 'svc:1:AQ:AA:$', 'svc:-1:x:y:$', 'svc:1e3:x:y:$', 'svc:01:x:y:$', `svc:1:${'A'.repeat(5000)}:x:$`)]);
}

export function leafArb(w: World): fc.Arbitrary<Json> {
  return weighted<Json>(
    [4, fc.oneof(fc.string({ maxLength: 12 }), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null)) as fc.Arbitrary<Json>],
    [5, tokenArb(w)],
    [1, fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>],
    [1, text(12)],
    [1, fc.constantFrom<Json>(null, true, false, 0, -0, 1.1, 1e308, -1e-308, 12345678901234567000, '', 'é\u0000\u001f"\\', '\ud800', '\u{1F600}', [], {}, [1, 'x'], { number: 'x' })],
  );
}

const DOC_KEYS = ['card', 'items', 'tags', 'ssn', 'a', 'b', 'n', 'a.b', '*', 'é', 'email', 'number'] as const;

/** Documents shaped like the field paths above, so encryption and decryption actually happen. */
export function fieldedDocArb(w: World): fc.Arbitrary<Json> {
  const leaf = leafArb(w);
  const inner = fc.array(fc.tuple(fc.constantFrom('number', 'cvc', 'email', 'id'), leaf), { maxLength: 3 }).map((pairs): Json => Object.fromEntries(pairs));
  const value = weighted<Json>([4, leaf], [2, inner], [1, fc.array(weighted<Json>([1, leaf], [1, inner]), { maxLength: 4 })]);
  const doc = fc.array(fc.tuple(fc.constantFrom(...DOC_KEYS), value), { minLength: 0, maxLength: 5 }).map((pairs): Json => Object.fromEntries(pairs));
  return weighted<Json>([8, doc], [1, fc.array(doc, { maxLength: 3 })], [1, fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>]);
}

/** The document written with varied spelling (whitespace, escapes, number forms). */
export function spelled(doc: fc.Arbitrary<Json>): fc.Arbitrary<string> {
  return fc.tuple(doc, fc.nat()).map(([d, seed]) => spell(d, rng(seed)));
}

export function mutateBytes(buf: Buffer, ops: ReadonlyArray<readonly [number, number, number]>): Buffer {
  let out = buf;
  for (const [at, op, byte] of ops) {
    const i = out.length === 0 ? 0 : at % out.length;
    switch (op) {
      case 0: out = Buffer.concat([out.subarray(0, i), Buffer.from([(out[i] ?? 0) ^ (1 << (byte % 8))]), out.subarray(i + 1)]); break;
      case 1: out = Buffer.concat([out.subarray(0, i), out.subarray(i + 1)]); break;
      case 2: out = Buffer.concat([out.subarray(0, i), Buffer.from([byte]), out.subarray(i)]); break;
      case 3: out = Buffer.concat([out.subarray(0, i), Buffer.from('{}[]":,\\\n'.charAt(byte % 9)), out.subarray(i)]); break;
      case 4: out = out.subarray(0, i); break;
      default: out = Buffer.concat([out.subarray(0, i), out.subarray(i, i + 1 + (byte % 16)), out.subarray(i)]);
    }
  }
  return out;
}

export const byteOps = fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 });

function nested(depth: number, object: boolean): string {
  return object ? `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}` : `${'['.repeat(depth)}${']'.repeat(depth)}`;
}

export function bodyArb(w: World): fc.Arbitrary<Body> {
  const json = (s: fc.Arbitrary<string | Buffer>): fc.Arbitrary<Body> => s.map((b) => ({ kind: 'json', bytes: Buffer.from(b) }));
  const huge = weighted<string>(
    [3, fc.integer({ min: 1, max: 5000 }).map((n) => '9'.repeat(n))],
    [2, fc.constantFrom('1e99999', '-1E-99999', '1.0000000000000000000001', '-0', '-0.0e-0', '0.1e1', '123456789012345678901234567890', '1E+400', `0.${'0'.repeat(400)}1`, '01', '1.', '.5', '+1', 'NaN', '-Infinity', '0x10')],
  ).map((n) => `{"card":{"number":${n}},"a":${n},"n":[${n},${n}]}`);
  const ndjsonLine = weighted<string>([6, spelled(fieldedDocArb(w))], [1, fc.constantFrom('', ' ', '{', 'null', '1', '"x"', '[]', '{}\r')], [1, binaryText(20)]);
  return weighted<Body>(
    [700, json(spelled(fieldedDocArb(w)))],
    [160, json(fc.tuple(spelled(fieldedDocArb(w)), byteOps).map(([s, ops]) => mutateBytes(Buffer.from(s), ops)))],
    [60, json(huge)],
    [40, fc.tuple(fc.constantFrom(31, 32, 33, 33, 64, 1000, 1000, 100_000), fc.boolean()).map(([d, o]) => ({ kind: 'json' as const, bytes: Buffer.from(nested(d, o)) }))],
    [100, fc.tuple(fc.array(ndjsonLine, { maxLength: 6 }), fc.constantFrom('\n', '\r\n'), fc.boolean()).map(([lines, nl, end]) => ({ kind: 'ndjson' as const, bytes: Buffer.from(lines.join(nl) + (end ? nl : '')) }))],
    [60, fc.uint8Array({ maxLength: 2048 }).map((b) => ({ kind: 'other' as const, bytes: Buffer.from(b) }))],
    [60, json(fc.constantFrom(
      Buffer.from('{"a":"\xff\xfe"}', 'latin1'), Buffer.from('{"a":"\xc0\xaf"}', 'latin1'), Buffer.from('{"a":"\xed\xa0\x80"}', 'latin1'),
      '{"a":"\\ud800"}', '{"\\ud800":1}', '{"a":"\\uDC00\\uD800"}', '{"a":"\\u0000"}', '{"a":"x\\"}', '{"a":"\\q"}', '\ufeff{"a":1}',
      '{"a":1,"a":"x"}', '{"card":{"number":"1"},"card":{"number":"2"}}', '', ' ', 'null', '"x"', '1', 'true', '{}', '[]', '{"a":1}x', '{"a":1}{"a":2}',
      '[1,]', '{"a":1,}', "{'a':1}", '{"a":01}', '{"a":.1}', '{"a":"\t"}', '{"a":"\n"}', '\x00{}', '{"__proto__":{"x":1},"constructor":{"prototype":{}}}',
      Buffer.from('{"a":1}', 'utf16le'),
    ))],
    [30, fc.tuple(fc.constantFrom(...w.tokens), fc.integer({ min: 1, max: 400 })).map(([t, n]) => ({ kind: 'json' as const, bytes: Buffer.from(JSON.stringify({ items: Array.from({ length: n }, () => ({ email: t })) })) }))],
    [10, fc.integer({ min: 1, max: 3000 }).map((n) => ({ kind: 'json' as const, bytes: Buffer.from(JSON.stringify({ tags: Array.from({ length: n }, (_, i) => `v${i}`), card: { number: 'x'.repeat(n * 10) } })) }))],
    // About one body in 1,200: each is 10 MiB on the wire.
    [1, fc.constant({ kind: 'json' as const, bytes: HUGE_BODY })],
  );
}

// ---------------------------------------------------------------------------------------
// Paths

/** Drawn once per request; `mangle` applies it (most draws leave the path alone). */
export type Mangling = readonly [roll: number, op: number, at: number, junk: string];

export const manglingArb: fc.Arbitrary<Mangling> = fc.tuple(fc.integer({ min: 0, max: 99 }), fc.integer({ min: 0, max: 13 }), fc.nat(), text(8));

/** Percent-encoding, double slashes, dot segments, case, trailing bits, absolute form, length. */
export function mangle(w: World, path: string, [roll, op, at, junk]: Mangling): string {
  if (roll >= 8) return path;
  const i = path.length === 0 ? 0 : 1 + (at % Math.max(1, path.length - 1));
  switch (op) {
    case 0: return path.replace(/\//g, '//');
    case 1: return `${path}/`;
    case 2: return path.replace(/\/([^/]+)$/, '/./$1');
    case 3: return path.replace(/\/([^/]+)$/, '/x/../$1');
    case 4: return path.replace(/[a-z]/, (c) => `%${c.charCodeAt(0).toString(16)}`);
    case 5: return path.replace(/[a-z]+/g, (s) => s.toUpperCase()); // ASCII only: 'µ' would become 'Μ', beyond latin1
    case 6: return `${path};jsessionid=1`;
    case 7: return `${path}#${pathText(junk)}`;
    case 8: return path.slice(0, i) + pathText(junk) + path.slice(i);
    case 9: return `${path}/${'a/'.repeat(2000)}`;
    case 10: return `http://127.0.0.1:${w.port}${path}`;
    case 11: return `${path}%00`;
    case 12: return path.replace(/\//g, '%2F').replace(/^%2F/, '/');
    default: return `/${'x'.repeat(20_000)}${path}`;
  }
}

export function queryArb(names: readonly string[]): fc.Arbitrary<string> {
  const key = weighted<string>([6, fc.constantFrom(...names, 'page', 'per_page')], [1, charsFrom('abz_[]', 1, 8)], [1, fc.constantFrom('roles[]', 'providers[]', 'page[]', '__proto__', 'constructor', '')]);
  const value = weighted<string>(
    [4, fc.constantFrom('1', '2', '10', '100', 'name', 'id', 'created_at', 'asc', 'desc', 'api', 'usage', 'activity', '1,2', 'phi')],
    [3, fc.constantFrom(...HOSTILE)],
    [2, fc.constantFrom('101', '0', '-5', '1e2', '1.5', '99999999999999999999', ' 1', '', 'null', 'DESC', 'x'.repeat(200))],
    [1, text(10)],
  );
  return fc.array(fc.tuple(key, value), { maxLength: 5 }).map((pairs) => pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&'));
}

export function withQuery(path: string, query: string | undefined): string {
  return query === undefined ? path : `${path}${path.includes('?') ? '&' : '?'}${query}`;
}

export const ALL_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export function methodArb(usual: readonly string[]): fc.Arbitrary<string> {
  return weighted<string>([17, fc.constantFrom(...usual)], [3, fc.constantFrom(...ALL_METHODS)], [1, fc.constantFrom('TRACE', 'PROPFIND', 'PURGE', 'LINK', 'SEARCH', 'REPORT', 'MKCOL', 'get', 'QUERY')]);
}

/** Assembles a case; HEAD never carries a body (undici's rule). */
export function httpCase(w: World, family: string, method: string, path: string, m: Mangling, draft: HeaderDraft, body: Body | null): HttpCase {
  const sent = method === 'HEAD' ? null : body;
  return { kind: 'http', family, method, path: mangle(w, path, m), headers: finishHeaders(draft, sent?.kind ?? null), body: sent?.bytes ?? null };
}

// ---------------------------------------------------------------------------------------
// Families

function slugArb(): fc.Arbitrary<string> {
  return weighted<string>(
    [28, fc.constantFrom(...DATA_SLUGS)],
    [1, fc.constantFrom('workspace', 'PAYMENTS', '%70ayments', 'payments%00', 'payments%2F..', '..', '%2e%2e', '%', '%zz', 'x'.repeat(300), 'pay ments', 'paymentś', '-payments', 'pa')],
    [1, charsFrom('abcdefghijklmnopqrstuvwxyz0123456789-', 1, 70).map((s) => (s.startsWith('fz') ? `q${s}` : s))],
  ).map(pathText);
}

function dataPlaneArb(w: World): fc.Arbitrary<HttpCase> {
  return fc
    .record({
      route: fc.constantFrom('encrypt', 'encrypt', 'decrypt', 'decrypt', 'rewrap'),
      slug: slugArb(),
      body: bodyArb(w),
      method: weighted<string>([19, fc.constant('POST')], [1, fc.constantFrom(...ALL_METHODS)]),
      query: sometimes(queryArb(['x']), 1, 9, undefined),
      headers: weighted<HeaderDraft>([1, headersArb(w, { fields: true, classification: true, destination: true })], [1, saneHeadersArb(w, false)]),
      mangling: manglingArb,
    })
    .map((r) => httpCase(w, `data:${r.route}`, r.method, withQuery(`/api/v3/encryption/${r.slug}/${r.route}`, r.query), r.mangling, r.headers, r.body));
}

function proxyArb(w: World): fc.Arbitrary<HttpCase> {
  return fc
    .record({
      method: methodArb(ALL_METHODS),
      slug: slugArb(),
      body: sometimes(bodyArb(w), 3, 1, null),
      suffix: weighted<string>([14, fc.constant('')], [1, fc.constantFrom('/', '/x', '?a=1', '?x-svc-destination=http://example.com/')]),
      headers: weighted<HeaderDraft>([1, headersArb(w, { fields: true, classification: true, destination: true, mode: true })], [1, saneHeadersArb(w, true)]),
      mangling: manglingArb,
    })
    .map((r) => httpCase(w, 'proxy', r.method, `/proxy/${r.slug}${r.suffix}`, r.mangling, r.headers, r.body));
}

function egressArb(w: World): fc.Arbitrary<HttpCase> {
  const rest = weighted<string>(
    [5, fc.webPath().map((p) => p.replace(/^\//, ''))],
    [2, fc.constantFrom('', 'v1/charges', '..', '../x', '%2e%2e/x', '%2e%2e%2fx', '@evil.example/', '//evil.example/', ':99/x', 'a?b=1', 'x%00', '..%2F..%2F', 'ü', '%zz', 'x/'.repeat(500))],
    [1, text(20).map(pathText)],
  );
  return fc
    .record({
      method: methodArb(ALL_METHODS),
      name: fc.constantFrom('dec', 'dec', 'enc', 'enc', 'pass', 'pass', 'nope', 'DEC', 'dec%00', '', '-x'),
      rest,
      body: sometimes(bodyArb(w), 3, 1, null),
      headers: headersArb(w, { fields: true, destination: true }),
      mangling: manglingArb,
    })
    .map((r) => httpCase(w, 'egress', r.method, `/egress/${r.name}/${r.rest}`, r.mangling, r.headers, r.body));
}

function healthArb(w: World): fc.Arbitrary<HttpCase> {
  return fc
    .record({
      method: methodArb(['GET']),
      path: fc.constantFrom('/healthz', '/readyz', '/api/openapi.json', '/metrics', '/healthz?x=1', '/HEALTHZ', '/healthz/', '/readyz/x'),
      headers: headersArb(w, {}),
      mangling: manglingArb,
    })
    .map((r) => httpCase(w, 'health', r.method, r.path, r.mangling, r.headers, null));
}

function unknownPathArb(w: World): fc.Arbitrary<HttpCase> {
  const path = weighted<string>(
    [4, fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`))],
    [3, fc.constantFrom('/', '/api', '/api/', '/api/v3', '/api/v4/classifications', '/api/v3/encryption', '/api/v3/encryption/payments', '/api/v3/encryption/payments/encrypt/x', '/proxy', '/proxy/', '/egress', '/egress/', '/api/v3/logs', '/api/v2/auth', '/../../etc/passwd', '/%2e%2e/%2e%2e/etc/passwd', '/api/v3/classifications/1/2/3', '/*', '/.env', '/favicon.ico', '/api/v3/users/1')],
    [2, fc.array(text(8).map(pathText), { minLength: 1, maxLength: 8 }).map((s) => `/${s.join('/')}`)],
  );
  return fc
    .record({ method: methodArb(ALL_METHODS), path, headers: headersArb(w, {}), body: sometimes(bodyArb(w), 1, 2, null), mangling: manglingArb })
    .map((r) => httpCase(w, 'unknown', r.method, r.path, r.mangling, r.headers, r.body));
}

// --- management, from the OpenAPI document ----------------------------------------------

/** Paths with families of their own (login has one so its scrypt cost stays bounded). */
const MANAGEMENT_SKIP = /^\/(proxy|egress|healthz|readyz|metrics)|^\/api\/v3\/encryption\/|^\/api\/v2\/auth\/login$/;

interface Operation {
  readonly template: string;
  readonly method: string;
  readonly queryNames: readonly string[];
  readonly bodySchema: Schema | null;
}

function operations(doc: OpenApi): Operation[] {
  const out: Operation[] = [];
  for (const [template, item] of Object.entries(doc.paths)) {
    if (MANAGEMENT_SKIP.test(template)) continue;
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      const operation = op as { parameters?: Array<{ $ref?: string; name?: string; in?: string }>; requestBody?: { content?: Record<string, { schema?: Schema }> } };
      const params = [...((item['parameters'] as typeof operation.parameters) ?? []), ...(operation.parameters ?? [])].map((p) =>
        p.$ref === undefined ? p : (doc.components.parameters[p.$ref.split('/').pop()!] as { name?: string; in?: string }),
      );
      out.push({
        template,
        method: method.toUpperCase(),
        queryNames: params.filter((p) => p.in === 'query').map((p) => p.name!),
        bodySchema: operation.requestBody?.content?.['application/json']?.schema ?? null,
      });
    }
  }
  return out;
}

/**
 * Whether a request may change what it names. Decided by the method actually sent (a GET
 * path sent as DELETE deletes), so writes name only sacrificial resources; reads any.
 */
function destructive(template: string, method: string): boolean {
  return method === 'DELETE' || method === 'PUT' || method === 'PATCH' || /\/(rotate|revoke|destroy)$/.test(template);
}

function paramArb(w: World, op: Operation, name: string, writes: boolean): fc.Arbitrary<string> {
  let valid: fc.Arbitrary<string>;
  if (name === 'version') valid = fc.constantFrom('1', '2', '3');
  else if (op.template.startsWith('/api/v3/classifications')) valid = fc.constantFrom(...(writes ? w.classifications.sacrificial : w.classifications.all).map(String));
  else if (op.template.startsWith('/api/v3/configurations')) valid = fc.constantFrom(...(writes ? w.configurations.sacrificial : w.configurations.all));
  else valid = fc.constantFrom(...(writes ? w.apiKeys.sacrificial : w.apiKeys.all));
  const invalid = weighted<string>([3, fc.uuid().map(String)], [2, fc.integer({ min: -5, max: 100_000 }).map(String)], [1, charsFrom('abc-0129', 1, 40)]);
  const value = weighted<string>([10, valid], [3, invalid], [3, fc.constantFrom(...HOSTILE)], [1, text(12)]).map(pathText);
  if (!writes || !op.template.startsWith('/api/v3/classifications')) return value;
  // Classification ids are small integers: a "wrong" id such as `3` or `03` for a write may
  // well name a seeded classification, which egress routes need (their absence is a
  // documented 503). Anything that reads as one of those numbers stays out of writes.
  const keep = new Set(w.classifications.all.filter((id) => !w.classifications.sacrificial.includes(id)));
  return value.filter((v) => {
    let decoded = v;
    try {
      decoded = decodeURIComponent(v);
    } catch {
      // left as sent: the router answers 404
    }
    const n = Number(decoded.trim());
    return !(Number.isInteger(n) && keep.has(n));
  });
}

function fillTemplate(w: World, op: Operation, writes: boolean): fc.Arbitrary<string> {
  const names = [...op.template.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
  return fc.tuple(...names.map((n) => paramArb(w, op, n, writes))).map((values) => {
    let path = op.template;
    names.forEach((n, i) => (path = path.replace(`{${n}}`, values[i]!)));
    return path;
  });
}

/**
 * A value for a JSON Schema of the OpenAPI document: what the document allows, with ids
 * and emails from the world so references resolve. Depth-limited; unknown keywords ignored.
 */
function fromSchema(w: World, doc: OpenApi, schema: Schema, depth = 0): fc.Arbitrary<unknown> {
  if (depth > 5) return fc.constant(null);
  const ref = schema['$ref'];
  if (typeof ref === 'string') return fromSchema(w, doc, doc.components.schemas[ref.split('/').pop()!] ?? {}, depth + 1);
  const variants = (schema['anyOf'] ?? schema['oneOf']) as Schema[] | undefined;
  if (variants !== undefined) return fc.oneof(...variants.map((s) => fromSchema(w, doc, s, depth + 1)));
  if (Array.isArray(schema['allOf'])) return fromSchema(w, doc, (schema['allOf'] as Schema[])[0]!, depth + 1);
  if (Array.isArray(schema['enum'])) return fc.constantFrom(...(schema['enum'] as unknown[]));
  if ('const' in schema) return fc.constant(schema['const']);
  const type = schema['type'];
  if (Array.isArray(type)) return fc.oneof(...type.map((t) => fromSchema(w, doc, { ...schema, type: t }, depth + 1)));
  switch (type) {
    case 'string': {
      const format = schema['format'];
      if (format === 'uuid') return weighted<unknown>([3, fc.constantFrom(...w.configurations.all)], [1, fc.uuid()]);
      if (format === 'email') return weighted<unknown>([2, fc.constantFrom(...w.emails)], [2, fc.emailAddress()]);
      if (format === 'date-time') return fc.date({ noInvalidDate: true }).map((d) => d.toISOString());
      if (typeof schema['pattern'] === 'string') return fc.stringMatching(new RegExp(schema['pattern']));
      const min = typeof schema['minLength'] === 'number' ? schema['minLength'] : 0;
      const max = typeof schema['maxLength'] === 'number' ? Math.min(schema['maxLength'], 64) : 24;
      return fc.string({ minLength: min, maxLength: Math.max(min, max) });
    }
    case 'integer': {
      const min = typeof schema['minimum'] === 'number' ? schema['minimum'] : 0;
      const max = typeof schema['maximum'] === 'number' ? schema['maximum'] : min + 12;
      return fc.integer({ min, max });
    }
    case 'number':
      return fc.double({ noNaN: true, noDefaultInfinity: true });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array': {
      const items = (schema['items'] as Schema | undefined) ?? {};
      return fc.array(fromSchema(w, doc, items, depth + 1), { maxLength: Math.min(4, typeof schema['maxItems'] === 'number' ? schema['maxItems'] : 4) });
    }
    default: {
      const properties = (schema['properties'] as Record<string, Schema> | undefined) ?? {};
      const required = (schema['required'] as string[] | undefined) ?? [];
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [k, s] of Object.entries(properties)) model[k] = fromSchema(w, doc, s, depth + 1);
      const extra = schema['additionalProperties'];
      const record = fc.record(model, { requiredKeys: required.filter((k) => k in model) });
      if (extra === undefined || extra === false || extra === true || Object.keys(properties).length > 0) return record;
      // A map: the configuration `values` object, mostly with the keys it knows.
      const key = weighted<string>([4, fc.constantFrom('destinations', 'fields', 'deterministic', 'min_decryption_version', 'proxy_slug', 'key_version')], [1, fc.string({ maxLength: 10 })]);
      return fc.dictionary(key, fromSchema(w, doc, extra as Schema, depth + 1), { maxKeys: 4 });
    }
  }
}

/**
 * Keeps fuzz-made configurations out of the data plane's way: their slugs start with `fz`
 * (which no generated data-plane slug does), so no request can forward through an
 * allowlist the fuzz itself wrote.
 */
function fenceSlugs(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    for (const entry of value) {
      if (entry !== null && typeof entry === 'object' && (entry as { key?: unknown }).key === 'proxy_slug') (entry as { value: unknown }).value = `fz${String((entry as { value: unknown }).value)}`;
    }
    return value;
  }
  const values = (value as { values?: unknown }).values;
  if (values !== null && typeof values === 'object' && !Array.isArray(values) && 'proxy_slug' in values) {
    (values as Record<string, unknown>)['proxy_slug'] = `fz${String((values as Record<string, unknown>)['proxy_slug'])}`;
  } else if (Array.isArray(values)) fenceSlugs(values);
  return value;
}

function mutateJson(value: unknown, ops: ReadonlyArray<readonly [number, number]>, junk: Json): unknown {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return junk;
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  for (const [at, op] of ops) {
    const keys = Object.keys(out);
    const k = keys.length === 0 ? 'name' : keys[at % keys.length]!;
    switch (op) {
      case 0: delete out[k]; break;
      case 1: out[k] = junk; break;
      case 2: out[`x${at % 7}`] = junk; break;
      case 3: out[k] = 'x'.repeat(1000 + (at % 20_000)); break;
      case 4: out[k] = [1e308, -1, 2 ** 53 + 1, 1.5, 0, '1', null, true][at % 8]; break;
      default: out[k] = { nested: out[k] ?? null, deeper: [[[[out[k] ?? null]]]] };
    }
  }
  return out;
}

function managementBodyArb(w: World, op: Operation): fc.Arbitrary<Body | null> {
  if (op.bodySchema === null) return sometimes(bodyArb(w), 1, 6, null);
  const valid = fromSchema(w, w.openapi, op.bodySchema).map(fenceSlugs);
  const ops = fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 5 })), { minLength: 1, maxLength: 3 });
  const asJson = (v: fc.Arbitrary<unknown>) => fc.tuple(v, fc.nat(), fc.boolean()).map(([value, seed, plain]): Body => ({ kind: 'json', bytes: Buffer.from(plain ? JSON.stringify(value) : spell(value as Json, rng(seed))) }));
  return weighted<Body | null>(
    [10, asJson(valid)],
    [6, asJson(fc.tuple(valid, ops, fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>).map(([v, o, junk]) => mutateJson(v, o, junk)))],
    [3, bodyArb(w)],
    [1, fc.constant(null)],
  );
}

/** One arbitrary per documented operation, built once: the method mostly its own, ids good and bad. */
function operationArb(w: World, op: Operation): fc.Arbitrary<HttpCase> {
  const logout = op.template === '/api/v2/auth/logout';
  const bearer = logout ? weighted<string>([3, fc.constantFrom(...w.bearer.forLogout).map((b) => `Bearer ${b}`)], [1, bearerArb(w)]) : undefined;
  return fc
    .record({
      method: weighted<string>([17, fc.constant(op.method)], [3, fc.constantFrom(...ALL_METHODS)]),
      readPath: fillTemplate(w, op, false),
      writePath: fillTemplate(w, op, true),
      query: sometimes(queryArb(op.queryNames.length === 0 ? ['x'] : op.queryNames), 1, op.method === 'GET' ? 1 : 8, undefined),
      body: managementBodyArb(w, op),
      headers: headersArb(w, { bearer: logout }, bearer),
      mangling: manglingArb,
    })
    .map((r) => {
      const path = destructive(op.template, r.method) ? r.writePath : r.readPath;
      return httpCase(w, `api:${op.method} ${op.template}`, r.method, withQuery(path, r.query), r.mangling, r.headers, r.body);
    });
}

function managementArb(w: World): fc.Arbitrary<HttpCase> {
  return fc.oneof(...operations(w.openapi).map((op) => operationArb(w, op)));
}

function loginArb(w: World): fc.Arbitrary<HttpCase> {
  // Mostly known emails: after five failures each is locked out and costs no more hashing.
  const email = weighted<string>([20, fc.constantFrom(...w.emails, 'ADA@example.com', ' ada@example.com')], [1, fc.emailAddress()], [1, text(20)]);
  const password = weighted<string>([4, fc.constantFrom('correct horse', 'wrong horse', '', 'x'.repeat(1025), 'correct horse ')], [1, text(30)]);
  const body = weighted<Body>(
    [6, fc.record({ email, password }, { requiredKeys: [] }).map((v) => ({ kind: 'json' as const, bytes: Buffer.from(JSON.stringify(v)) }))],
    [2, bodyArb(w)],
  );
  return fc
    .record({ body, method: methodArb(['POST']), headers: headersArb(w, { bearer: true }), mangling: manglingArb })
    .map((r) => httpCase(w, 'login', r.method, '/api/v2/auth/login', r.mangling, r.headers, r.body));
}

// --- raw bytes ---------------------------------------------------------------------------

/** An HTTP case as the bytes a client would send, for mutation. */
export function serialize(c: HttpCase): Buffer {
  const head = [`${c.method} ${c.path} HTTP/1.1`, 'host: 127.0.0.1', ...Object.entries(c.headers).map(([k, v]) => `${k}: ${v}`)];
  if (c.body !== null) head.push(`content-length: ${c.body.length}`);
  return Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`, 'latin1'), c.body ?? Buffer.alloc(0)]);
}

/** Request targets for the main listener's raw cases: routes, `*`, absolute and authority form, odd bytes. */
const MAIN_RAW_TARGETS = ['/', '/healthz', '/proxy/payments', '/api/v3/encryption/payments/encrypt', '*', 'http://127.0.0.1/healthz', '127.0.0.1:80', '//', '/a b', '/\x00', '/\x7f', '/é', ''];

/**
 * Raw byte streams: random bytes, request lines and headers broken in every way the parser
 * must survive, mutated real requests from `requests`, and a good request pipelined with a
 * broken one. `targets` are the request targets of the generated request lines.
 */
export function rawArb(w: World, requests: fc.Arbitrary<HttpCase>, targets: readonly string[] = MAIN_RAW_TARGETS): fc.Arbitrary<RawCase> {
  const key = w.keys.owner;
  const requestLine = fc
    .record({
      method: weighted<string>([4, fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'CONNECT', 'TRACE', 'PRI', 'get', 'G ET', 'GETT', 'FOO', '')], [1, charsFrom(TOKEN_CHARS, 1, 300)], [1, binaryText(10)]),
      target: weighted<string>(
        [4, fc.constantFrom(...targets)],
        [1, fc.integer({ min: 8000, max: 70_000 }).map((n) => `/${'a'.repeat(n)}`)],
        [1, binaryText(40)],
      ),
      version: fc.constantFrom('HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0', 'HTTP/0.9', 'http/1.1', 'HTTP/1.1x', 'HTTP/1.', 'HTTP/11', 'HTTP/9.9', ''),
      eol: fc.constantFrom('\r\n', '\r\n', '\n', '\r', '\r\r\n'),
      headers: fc.array(
        weighted<string>(
          [4, fc.constantFrom('host: x', `x-svc-authorization: ${key}`, 'content-type: application/json', 'content-length: 2', 'transfer-encoding: chunked', 'connection: close', 'expect: 100-continue', 'upgrade: websocket')],
          [3, fc.constantFrom('content-length: -1', 'content-length: 1, 2', 'content-length: 99999999999999999999', 'content-length: 0x10', 'content-length:', 'transfer-encoding: gzip, chunked', 'transfer-encoding: chunked, identity', 'Transfer-Encoding : chunked', ' folded: yes', '\tobs-fold', 'no-colon', ': empty-name', 'bad name: x', 'x-a: \x00', 'x-a: \x7f', 'x-a: a\rb', 'é: x', `x-svc-fields: card.number`, `x-svc-destination: ${w.echo}/`, 'x-svc-mode: decrypt')],
          [1, fc.integer({ min: 10_000, max: 40_000 }).map((n) => `x-long: ${'v'.repeat(n)}`)],
          [1, binaryText(30)],
        ),
        { maxLength: 6 },
      ),
      body: weighted<string>([3, fc.constantFrom('', '{}', '{"card":{"number":"4111"}}', '0\r\n\r\n', '2\r\n{}\r\n0\r\n\r\n', 'zz\r\n{}\r\n0\r\n\r\n', 'ffffffffffffffff\r\n', '2;ext=1\r\n{}\r\n0\r\nx-trailer: 1\r\n\r\n', '2\r\n{}0\r\n\r\n', '-1\r\n')], [1, binaryText(60)]),
      terminate: fc.boolean(),
    })
    .map((r) => Buffer.from(`${r.method} ${r.target} ${r.version}${r.eol}${r.headers.map((h) => `${h}${r.eol}`).join('')}${r.terminate ? r.eol : ''}${r.body}`, 'latin1'));
  const bytes = weighted<Buffer>(
    [3, fc.uint8Array({ minLength: 1, maxLength: 4096 }).map((b) => Buffer.from(b))],
    [4, fc.tuple(requests, byteOps).map(([c, ops]) => mutateBytes(serialize(c), ops))],
    [5, requestLine],
    // Pipelined: a sane request, then something broken on the same connection.
    [2, fc.tuple(requests, requestLine).map(([c, tail]) => Buffer.concat([serialize(c), tail]))],
  );
  return fc.tuple(bytes, fc.integer({ min: 1, max: 3 })).map(([b, pieces]) => ({ kind: 'raw' as const, family: 'raw', bytes: b, pieces }));
}

// ---------------------------------------------------------------------------------------

/** One generated request over the whole surface, in the proportions below. */
export function fuzzCaseArb(w: World): fc.Arbitrary<FuzzCase> {
  const data = dataPlaneArb(w);
  const proxy = proxyArb(w);
  const management = managementArb(w);
  // Logins are few: each that gets to the password check costs a full scrypt.
  const http = weighted<HttpCase>([48, data], [40, proxy], [8, egressArb(w)], [66, management], [1, loginArb(w)], [6, healthArb(w)], [12, unknownPathArb(w)]);
  // Raw cases mutate bytes at random, so they never start from a write: a flipped digit
  // could turn a sacrificial id into a real one.
  const readOnly = weighted<HttpCase>([1, data], [1, proxy], [1, management]).filter((c) => !['DELETE', 'PUT', 'PATCH'].includes(c.method) && !/\/(rotate|revoke|destroy|logout)\b/.test(c.path));
  return weighted<FuzzCase>([90, http], [10, rawArb(w, readOnly)]);
}
