/**
 * fast-check arbitraries for the fuzz of the listeners other than the main API
 * (listeners-fuzz.test.ts): the admin listener, the relay in front of an application with
 * its guard, and the egress routes of the main listener. Headers, bodies, path mangling and
 * raw byte streams come from fuzz-arbitraries.ts; what is new here is what these listeners
 * are for: paths in every spelling a router reads alike, protected keys in every spelling
 * the guard must catch, and bodies and `{rest}` paths for the egress routes.
 *
 * Three kinds of value are planted so the test can follow them (each starts with a marker
 * unique to the run):
 * - `relay`: plaintext under a protected key (`ssn`, `dob`) in a body sent to the relay. The
 *   guard stands in front of every body, so it must never reach the application.
 * - `enc`: plaintext under `ssn` in a well-formed JSON body to the `enc` egress route, which
 *   encrypts `ssn`: it must never reach the vendor.
 * - `dec`: the plaintext inside tokens sent to the decrypting egress routes. It reaches the
 *   vendor by design, and must never come back to the application, even when the vendor
 *   echoes it.
 */
import fc from 'fast-check';
import { rng, spell, type Json } from '../support/json-gen.ts';
import {
  ALL_METHODS,
  binaryText,
  bodyArb,
  byteOps,
  charsFrom,
  headersArb,
  HOSTILE,
  httpCase,
  manglingArb,
  methodArb,
  mutateBytes,
  pathText,
  queryArb,
  rawArb,
  serialize,
  sometimes,
  text,
  tokenArb,
  weighted,
  withQuery,
  type Body,
  type HeaderDraft,
  type HttpCase,
  type RawCase,
  type World,
} from './fuzz-arbitraries.ts';

export type ListenerName = 'admin' | 'relay' | 'egress';

export interface ListenersWorld {
  /** Keys, tokens and the main listener's port, for the shared header and body arbitraries. */
  readonly base: World;
  readonly markers: { readonly relay: string; readonly enc: string; readonly dec: string };
  /** Tokens of the `payments` configuration whose plaintexts start with `markers.dec`. */
  readonly decTokens: readonly string[];
}

export type Aimed<C> = C & { readonly listener: ListenerName };
export type ListenerCase = Aimed<HttpCase> | Aimed<RawCase>;

const aim =
  <C>(listener: ListenerName) =>
  (c: C): Aimed<C> => ({ ...c, listener });

/** Egress routes of the test's config: `dec` and `dec-all` decrypt, `enc` encrypts, `pass` transforms nothing. */
export const EGRESS_NAMES = ['dec', 'dec-all', 'enc', 'pass'] as const;

// ---------------------------------------------------------------------------------------
// Admin

function adminArb(w: World): fc.Arbitrary<HttpCase> {
  const path = weighted<string>(
    [10, fc.constantFrom('/healthz', '/readyz', '/metrics')],
    [3, fc.constantFrom('/healthz?x=1', '/metrics?name[]=svc_http_requests_total', '/HEALTHZ', '/healthz/', '/readyz/x', '/metrics/', '/./metrics', '/x/../healthz', '//healthz', '/%68ealthz', '/healthz%00', '/healthz;x', '/healthz#f', '/')],
    // The main listener's routes: the admin listener serves none of them.
    [3, fc.constantFrom('/api/v3/classifications', '/api/openapi.json', '/api/v3/encryption/payments/encrypt', '/proxy/payments', '/egress/dec/x', '/egress/pass/', '/api/v2/auth/login', '/api/v3/users')],
    [1, fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`))],
    [1, fc.constantFrom(...HOSTILE).map((h) => `/${pathText(h)}`)],
  );
  return fc
    .record({ method: methodArb(['GET', 'GET', 'HEAD']), path, headers: headersArb(w, {}), body: sometimes(bodyArb(w), 1, 6, null), mangling: manglingArb })
    .map((r) => httpCase(w, 'admin', r.method, r.path, r.mangling, r.headers, r.body));
}

// ---------------------------------------------------------------------------------------
// Relay

/**
 * Keys the guard must read as `ssn` or `dob` (docs/relay.md, "Which keys"): case,
 * compatibility forms (long s, fullwidth), combining marks and invisible characters
 * dropped, and dotted or bracketed keys whose last part is protected.
 */
const PROTECTED_KEYS = ['ssn', 'ssn', 'dob', 'SSN', 'Ssn', 'DOB', 'ſsn', 'ｓｓｎ', 'ｄｏｂ', 's\u0301sn', 's\u200bsn', 'patient.ssn', 'patient[ssn]', 'a.b.dob', 'x[y][dob]'];
const OTHER_KEYS = ['name', 'note', 'contacts', 'id', 'ssn_hint', 'snn', 'visits', 'a', '__proto__', 'constructor'];

/** A protected value: the secret alone or inside an object or array. */
function secretValueArb(secret: fc.Arbitrary<string>): fc.Arbitrary<Json> {
  return weighted<Json>([6, secret], [1, secret.map((s) => ({ value: s, kind: 'x' }))], [1, fc.tuple(secret, secret).map(([a, b]) => [a, 1, { b }])]);
}

/** A JSON document holding secrets under protected keys, at the top, nested, in arrays, under `__proto__`. */
function protectedDocArb(secret: fc.Arbitrary<string>): fc.Arbitrary<Json> {
  const leaf = fc.oneof(fc.string({ maxLength: 10 }), fc.integer(), fc.constant(null), fc.boolean()) as fc.Arbitrary<Json>;
  const entry = weighted<[string, Json]>([3, fc.tuple(fc.constantFrom(...PROTECTED_KEYS), secretValueArb(secret))], [2, fc.tuple(fc.constantFrom(...OTHER_KEYS), leaf)]);
  const flat = fc.array(entry, { minLength: 1, maxLength: 5 }).map((entries): Json => Object.fromEntries(entries));
  const wrapper = fc.constantFrom('patient', 'items', '__proto__', 'constructor', 'data', 'contacts');
  return fc
    .tuple(flat, fc.array(fc.tuple(wrapper, fc.boolean()), { maxLength: 8 }), fc.boolean())
    .map(([doc, wrappers, asArray]) => {
      let out: Json = doc;
      for (const [key, inArray] of wrappers) out = Object.fromEntries([[key, inArray ? [out, 1] : out]]);
      return asArray ? [out, { ok: true }] : out;
    });
}

/** A form parameter holding a secret, its name spelled as the guard must read it, its value partly escaped. */
function formArb(secret: fc.Arbitrary<string>): fc.Arbitrary<string> {
  const name = fc.constantFrom('ssn', 'SSN', 'dob', 'patient[ssn]', 'patient.ssn', 'patient%5Bssn%5D', 's%73n', '%53SN', 'a[b][dob]', 'ssn[]', 'ssn[0]');
  const escape = (s: string, every: number) => [...s].map((c, i) => (i % every === 0 ? `%${c.charCodeAt(0).toString(16).toUpperCase()}` : c)).join('');
  const value = fc.tuple(secret, fc.integer({ min: 0, max: 4 })).map(([s, every]) => (every === 0 ? s : escape(s, every + 1)));
  const pair = weighted<string>([3, fc.tuple(name, value).map(([n, v]) => `${n}=${v}`)], [1, fc.constantFrom('a=1', 'note=x+y', 'name=%C3%A9', 'empty=', 'flag')]);
  return fc.array(pair, { minLength: 1, maxLength: 5 }).map((pairs) => pairs.join('&'));
}

interface Draft {
  readonly body: Body;
  /** The content-type to send, or null for none. */
  readonly type: string | null;
}

/** A body with secrets under protected keys, in a format the guard reads: JSON (by type or first byte), NDJSON, a form. */
function protectedBodyArb(secret: fc.Arbitrary<string>): fc.Arbitrary<Draft> {
  const jsonType = fc.constantFrom<string | null>('application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'text/plain', 'text/json', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json, text/plain', 'application/octet-stream', null);
  const json = fc
    .tuple(protectedDocArb(secret), fc.nat(), fc.constantFrom('', '', ' ', '\r\n', '\t \n'), jsonType)
    .map(([doc, seed, lead, type]): Draft => ({ body: { kind: 'json', bytes: Buffer.from(`${lead}${spell(doc, rng(seed))}`) }, type }));
  const ndjson = fc
    .tuple(fc.array(protectedDocArb(secret), { minLength: 1, maxLength: 4 }), fc.nat(), fc.constantFrom('\n', '\r\n'), fc.constantFrom('application/x-ndjson', 'application/jsonl', 'application/x-jsonlines'))
    .map(([docs, seed, nl, type]): Draft => ({ body: { kind: 'ndjson', bytes: Buffer.from(docs.map((d) => spell(d as Json, rng(seed))).join(nl) + nl) }, type }));
  const form = fc
    .tuple(formArb(secret), fc.constantFrom('application/x-www-form-urlencoded', 'application/x-www-form-urlencoded; charset=utf-8', 'Application/X-WWW-Form-Urlencoded'))
    .map(([f, type]): Draft => ({ body: { kind: 'other', bytes: Buffer.from(f) }, type }));
  return weighted<Draft>([6, json], [2, ndjson], [2, form]);
}

/** Paths of the relay routes and others, in spellings routers read alike (docs/relay.md, "Relay routes"). */
function relayPathArb(): fc.Arbitrary<string> {
  const plain = fc.constantFrom('/patients', '/patients/7', '/patients/7/visits', '/patients.json', '/inbound/batch', '/reports/2026', '/notes', '/', '/api/items', '/x');
  const spelled = fc.constantFrom(
    '/PATIENTS/%37/', '/patients;jsessionid=1/7', '/patients%2F7', '/patients/a%2Fb', '/patients/./7', '/patients/../patients', '//patients', '/patients//7',
    '/%70atients', '/patients/7#x', '/patients/%2e%2e/notes', '/notes/../patients', '/patients\\7', '/patients/%3B', '/patients/%zz', '/patients/%00', '/patients/%20',
    'http://127.0.0.1/patients/7', 'http://app.example/notes', '/reports/%2e/x', '/inbound/../inbound/x', '/patients/7.xml',
  );
  return weighted<string>([8, plain], [4, spelled], [1, fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`))], [1, text(12).map((s) => `/${pathText(s)}`)]);
}

/** Mangling may turn an absolute-form target into one undici will not send (`http:%2F%2F…`): a leading `/` makes it an origin-form path again. */
function sendable(c: HttpCase): HttpCase {
  return c.path.startsWith('/') || /^https?:\/\//.test(c.path) ? c : { ...c, path: `/${c.path}` };
}

/** A request to the relay with secrets in its body (the property's main subject). */
function relayProtectedArb(w: World, secret: fc.Arbitrary<string>): fc.Arbitrary<HttpCase> {
  return fc
    .record({
      method: weighted<string>([12, fc.constantFrom('POST', 'PUT', 'PATCH', 'GET')], [3, fc.constantFrom(...ALL_METHODS.filter((m) => m !== 'HEAD'))], [1, fc.constantFrom('PROPFIND', 'QUERY', 'REPORT', 'SEARCH')]),
      path: relayPathArb(),
      query: sometimes(queryArb(['ssn', 'page']), 1, 6, undefined),
      draft: protectedBodyArb(secret),
      headers: weighted<HeaderDraft>([1, headersArb(w, { fields: true, destination: true, mode: true })], [3, fc.constant({ headers: {}, types: { json: '', ndjson: '' }, typeRoll: 12 })]),
      mangling: manglingArb,
    })
    .map((r) => {
      const c = httpCase(w, 'relay:protected', r.method, withQuery(r.path, r.query), r.mangling, r.headers, r.draft.body);
      const headers = { ...c.headers };
      for (const k of Object.keys(headers)) if (k.toLowerCase() === 'content-type') delete headers[k];
      if (r.draft.type !== null) headers['content-type'] = r.draft.type;
      return sendable({ ...c, headers });
    });
}

/** Anything else to the relay: the shared bodies (no secrets), no body, odd methods. */
function relayOtherArb(w: World): fc.Arbitrary<HttpCase> {
  return fc
    .record({
      method: methodArb(ALL_METHODS),
      path: relayPathArb(),
      query: sometimes(queryArb(['x', 'page']), 1, 5, undefined),
      body: sometimes(bodyArb(w), 1, 1, null),
      headers: headersArb(w, { fields: true, destination: true, mode: true }),
      mangling: manglingArb,
    })
    .map((r) => sendable(httpCase(w, 'relay:other', r.method, withQuery(r.path, r.query), r.mangling, r.headers, r.body)));
}

/** Framing a relay request on a raw socket: good, and every conflict and malformation a smuggler tries. */
type Framing = readonly [kind: number, cut: number, junk: number];

function frame(body: Buffer, [kind, cut, junk]: Framing): { headers: string[]; bytes: Buffer } {
  const at = body.length === 0 ? 0 : 1 + (cut % body.length);
  const chunked = (parts: Buffer[], ext = '') => Buffer.concat([...parts.filter((p) => p.length > 0).map((p) => Buffer.concat([Buffer.from(`${p.length.toString(16)}${ext}\r\n`), p, Buffer.from('\r\n')])), Buffer.from('0\r\n\r\n')]);
  const good = chunked([body.subarray(0, at), body.subarray(at)]);
  switch (kind) {
    case 0: return { headers: [`content-length: ${body.length}`], bytes: body };
    case 1: return { headers: ['transfer-encoding: chunked'], bytes: good };
    case 2: return { headers: [`content-length: ${body.length}`, 'transfer-encoding: chunked'], bytes: good };
    case 3: return { headers: ['transfer-encoding: chunked', `content-length: ${good.length}`], bytes: good };
    case 4: return { headers: [`content-length: ${body.length}`, `content-length: ${at}`], bytes: body };
    case 5: return { headers: [`content-length: ${at}`], bytes: body };
    case 6: return { headers: ['transfer-encoding: identity, chunked'], bytes: good };
    case 7: return { headers: ['transfer-encoding: chunked, identity'], bytes: good };
    case 8: return { headers: ['Transfer-Encoding : chunked'], bytes: good };
    case 9: return { headers: ['transfer-encoding:\tchunked', 'transfer-encoding: chunked'], bytes: good };
    case 10: return { headers: ['x-a: 1', ' transfer-encoding: chunked'], bytes: good };
    case 11: return { headers: ['transfer-encoding: xchunked'], bytes: body };
    case 12: return { headers: ['transfer-encoding: chunked'], bytes: chunked([body], ';ext="1"') };
    case 13: return { headers: ['transfer-encoding: chunked'], bytes: Buffer.concat([Buffer.from(`${(body.length + (junk % 7) + 1).toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]) };
    case 14: return { headers: ['transfer-encoding: chunked'], bytes: Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n')]) };
    case 15: return { headers: [`content-length: +${body.length}`], bytes: body };
    case 16: return { headers: [`content-length: ${body.length}`, 'transfer-encoding: gzip, chunked'], bytes: good };
    default: return { headers: [`content-length: ${body.length}, ${body.length}`], bytes: body };
  }
}

/** The family of the smuggling cases: the connection is left open for writing (see relaySmuggleArb). */
export const SMUGGLE = 'raw:smuggle';
const CLOSING = Buffer.from('GET /notes HTTP/1.1\r\nhost: app.example\r\nconnection: close\r\n\r\n');

const framingArb: fc.Arbitrary<Framing> = fc.tuple(fc.integer({ min: 0, max: 17 }), fc.nat(), fc.nat());

/**
 * Raw requests to the relay whose bodies hold secrets, framed every way (content-length
 * and transfer-encoding together, duplicated, folded, wrong chunk sizes), then maybe a
 * second request pipelined behind, then a bodiless request that asks to close: however the
 * bytes are read, no body reaches the application without the guard. Sent without a
 * half-close (`SMUGGLE`), so that the relay serves them rather than take the client for gone.
 */
function relaySmuggleArb(secret: fc.Arbitrary<string>): fc.Arbitrary<RawCase> {
  const one = fc
    .record({ draft: protectedBodyArb(secret), framing: framingArb, method: fc.constantFrom('POST', 'PUT', 'GET', 'PATCH', 'DELETE'), path: relayPathArb() })
    .map((r) => {
      const { headers, bytes } = frame(r.draft.body.bytes, r.framing);
      const type = r.draft.type === null ? [] : [`content-type: ${r.draft.type}`];
      return Buffer.concat([Buffer.from(`${r.method} ${r.path} HTTP/1.1\r\nhost: app.example\r\n${[...type, ...headers].map((h) => `${h}\r\n`).join('')}\r\n`, 'latin1'), bytes]);
    });
  return fc
    .tuple(fc.array(one, { minLength: 1, maxLength: 3 }), fc.integer({ min: 1, max: 4 }))
    .map(([requests, pieces]) => ({ kind: 'raw' as const, family: SMUGGLE, bytes: Buffer.concat([...requests, CLOSING]), pieces }));
}

const RELAY_RAW_TARGETS = ['/patients/ 7', '/patients', '/patients/7', '/notes', '*', 'http://127.0.0.1/patients', 'app.example:443', '//patients', '/patients/%zz', '/a b', '/é', '/\x00', ''];

// ---------------------------------------------------------------------------------------
// Egress

/** `{rest}`: vendor paths, and every way out of the destination's path. */
function restArb(): fc.Arbitrary<string> {
  return weighted<string>(
    [6, fc.webPath().map((p) => p.replace(/^\//, ''))],
    [3, fc.constantFrom('', 'v1/charges', 'v1/charges?expand[]=x', '..', '../x', 'a/../../x', '%2e%2e/x', '.%2E/x', '%2e%2e%2fx', '..;/x', 'a/..;/b', '@evil.example/', '//evil.example/', ':99/x', 'a?b=1', 'x%00', '%0d%0aX-Injected:%201', '..%2F..%2F', '%5c..%5cx', 'a\\b', '%25%32%65', '%c0%ae%c0%ae/x', 'ü', '%zz', '%', 'x/'.repeat(500), 'x'.repeat(9000), './x', 'a/./b', '#frag', '%23x')],
    [1, text(20).map(pathText)],
    [1, binaryText(12).map(pathText)],
  );
}

/** Bodies with `dec` tokens where the decrypting routes look (`card.number`) and elsewhere, as JSON, NDJSON or a form. */
function decBodyArb(lw: ListenersWorld): fc.Arbitrary<Draft> {
  const token = fc.constantFrom(...lw.decTokens);
  const anyToken = weighted<string>([4, token], [1, tokenArb(lw.base)]);
  const doc = fc
    .record({ number: anyToken, other: sometimes(anyToken, 1, 1, undefined), items: fc.array(anyToken, { maxLength: 3 }), wrap: fc.boolean() })
    .map((r): Json => {
      const card: Record<string, Json> = { number: r.number };
      if (r.other !== undefined) card['cvc'] = r.other;
      const d: Json = { card, items: r.items.map((t) => ({ email: t })), amount: 1000 };
      return r.wrap ? [d, d] : d;
    });
  const json = fc.tuple(doc, fc.nat(), fc.constantFrom('application/json', 'application/json; charset=utf-8', 'text/plain', null)).map(([d, seed, type]): Draft => ({ body: { kind: 'json', bytes: Buffer.from(spell(d, rng(seed))) }, type }));
  const ndjson = fc.tuple(fc.array(doc, { minLength: 1, maxLength: 3 }), fc.nat()).map(([docs, seed]): Draft => ({ body: { kind: 'ndjson', bytes: Buffer.from(`${docs.map((d) => spell(d, rng(seed))).join('\n')}\n`) }, type: 'application/x-ndjson' }));
  const form = fc
    .tuple(token, sometimes(token, 1, 1, undefined))
    .map(([a, b]): Draft => ({ body: { kind: 'other', bytes: Buffer.from(`amount=1000&card[number]=${encodeURIComponent(a)}${b === undefined ? '' : `&card.cvc=${b}&note=${encodeURIComponent(b)}`}`) }, type: 'application/x-www-form-urlencoded' }));
  return weighted<Draft>([5, json], [2, ndjson], [2, form]);
}

function egressArb(lw: ListenersWorld): fc.Arbitrary<HttpCase> {
  const w = lw.base;
  const anyBody = weighted<Draft | null>(
    [4, decBodyArb(lw)],
    [4, bodyArb(w).map((body): Draft => ({ body, type: body.kind === 'ndjson' ? 'application/x-ndjson' : 'application/json' }))],
    [2, fc.constant(null)],
  );
  return fc
    .record({
      method: methodArb(ALL_METHODS),
      name: weighted<string>([12, fc.constantFrom(...EGRESS_NAMES)], [1, fc.constantFrom('nope', 'DEC', 'dec%00', '', '-x', 'dec-all%2F..', '%64ec', 'x'.repeat(300))]),
      rest: restArb(),
      draft: anyBody,
      headers: headersArb(w, { fields: true, destination: true, classification: true }),
      keepType: fc.integer({ min: 0, max: 9 }),
      mangling: manglingArb,
    })
    .map((r) => {
      const c = httpCase(w, 'egress', r.method, `/egress/${r.name}/${r.rest}`, r.mangling, r.headers, r.draft?.body ?? null);
      // Mostly the body's own type; sometimes whatever the shared headers drew.
      if (r.keepType === 0 || r.draft === null) return c;
      const headers = { ...c.headers };
      for (const k of Object.keys(headers)) if (k.toLowerCase() === 'content-type') delete headers[k];
      if (r.draft.type !== null) headers['content-type'] = r.draft.type;
      return { ...c, headers };
    });
}

/** Well-formed JSON to the `enc` route with `enc` secrets at `ssn`, which it encrypts: none may reach the vendor. */
function egressEncArb(lw: ListenersWorld, secret: fc.Arbitrary<string>): fc.Arbitrary<HttpCase> {
  return fc
    .record({
      method: fc.constantFrom('POST', 'PUT', 'PATCH'),
      rest: weighted<string>([4, fc.constantFrom('v1/people', 'v1/people/7', '', 'a/b/c')], [1, restArb()]),
      query: sometimes(queryArb(['page']), 1, 4, undefined),
      ssn: secret,
      items: fc.array(secret, { maxLength: 3 }),
      extra: fc.dictionary(fc.constantFrom('name', 'note', 'id'), fc.string({ maxLength: 8 }), { maxKeys: 2 }),
      seed: fc.nat(),
      authorization: sometimes(fc.constantFrom('Bearer vendor-key', 'Basic dXNlcjpwYXNz'), 1, 1, undefined),
      type: fc.constantFrom('application/json', 'application/json; charset=utf-8'),
    })
    .map((r) => {
      const body = spell({ ...r.extra, ssn: r.ssn, items: r.items.map((email) => ({ email })) }, rng(r.seed));
      const headers: Record<string, string> = { 'content-type': r.type };
      if (r.authorization !== undefined) headers['authorization'] = r.authorization;
      return { kind: 'http' as const, family: 'egress:enc', method: r.method, path: withQuery(`/egress/enc/${r.rest}`, r.query), headers, body: Buffer.from(body) };
    });
}

const EGRESS_RAW_TARGETS = ['/egress/dec/v1/charges', '/egress/pass/x', '/egress/enc/', '/egress/dec/../x', '/egress/dec/%2e%2e/x', 'http://127.0.0.1/egress/pass/x', '127.0.0.1:80', '*', '/egress/dec/a b', '/egress/pass/\x7f'];

// ---------------------------------------------------------------------------------------

/** A secret: the marker, then a number and letters, so that each is unique in the run. */
function secretArb(marker: string): fc.Arbitrary<string> {
  return fc.tuple(fc.nat(), charsFrom('abcdefghjkmnpqrstuvwxyz', 0, 6)).map(([n, s]) => `${marker}${n.toString(36)}${s}`);
}

/** Stand-in for a secret where bytes are mutated at random (a flipped key byte would rightly let it through). */
const decoy = fc.constant('123-45-6789');

/** `w` with API keys of the right shape that no user holds. */
function decoyWorld(w: World): World {
  const key = (c: string) => `svc_${c.repeat(40)}`;
  return { ...w, keys: { owner: key('D'), others: [key('E'), key('F')], revoked: key('G') } };
}

/** One generated request or raw byte stream, aimed at one of the three listeners. */
export function listenerCaseArb(lw: ListenersWorld): fc.Arbitrary<ListenerCase> {
  const w = lw.base;
  const relaySecret = secretArb(lw.markers.relay);
  const admin = adminArb(w);
  const relayOther = relayOtherArb(w);
  const egress = egressArb(lw);
  const relayHttp = weighted<HttpCase>([3, relayProtectedArb(w, relaySecret)], [2, relayOther]);
  const egressHttp = weighted<HttpCase>([4, egress], [1, egressEncArb(lw, secretArb(lw.markers.enc))]);
  // Bytes mutated at random may rename `x-svc-authorization` into a header of the client's
  // own, which is passed on: such streams carry keys that open nothing.
  const d = decoyWorld(w);
  const relayRaw = weighted<RawCase>(
    [3, relaySmuggleArb(relaySecret)],
    [2, rawArb(d, weighted<HttpCase>([1, relayProtectedArb(d, decoy)], [1, relayOtherArb(d)]), RELAY_RAW_TARGETS)],
  );
  const egressRaw = rawArb(d, egressArb({ ...lw, base: d }), EGRESS_RAW_TARGETS);
  const adminRaw = weighted<RawCase>(
    [3, rawArb(w, admin, ['/healthz', '/metrics', '/readyz', '/api/v3/classifications', '*', 'http://127.0.0.1/metrics', '127.0.0.1:9090', '/egress/dec/x'])],
    // Many requests pipelined on one connection.
    [1, fc.array(admin, { minLength: 2, maxLength: 12 }).map((cases) => ({ kind: 'raw' as const, family: 'raw:pipelined', bytes: Buffer.concat(cases.map(serialize)), pieces: 1 }))],
  );
  return weighted<ListenerCase>(
    [12, admin.map(aim('admin'))],
    [2, adminRaw.map(aim('admin'))],
    [40, relayHttp.map(aim('relay'))],
    [8, relayRaw.map(aim('relay'))],
    [32, egressHttp.map(aim('egress'))],
    [5, egressRaw.map(aim('egress'))],
    // A few raw streams of bytes mutated from anything above.
    [1, fc.tuple(relayOtherArb(d), byteOps).map(([c, ops]) => ({ kind: 'raw' as const, family: 'raw:mutated', bytes: mutateBytes(serialize(c), ops), pieces: 2, listener: 'relay' as const }))],
  );
}
