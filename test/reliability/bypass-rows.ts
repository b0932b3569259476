/**
 * The rows of the hostile-variation corpus (bypass.test.ts): one table per surface, each
 * row a request that almost matches a rule and the outcome it must have. Grow them with
 * every near miss: a row is a few characters, a bypass is a headline.
 */
import assert from 'node:assert/strict';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { KEYS } from '../support/app.ts';
import type { RawAnswer, RawRequest } from '../support/raw-http.ts';

export type Outcome = 'protected' | 'refused' | 'withheld';

/** How the vendor answers a row (egress): by default it echoes the body as JSON. */
export type VendorAnswer = (body: Buffer) => { status?: number; headers: Record<string, string | string[]>; body: Buffer[] };

export interface Row {
  readonly name: string;
  readonly expect: Outcome;
  readonly request: RawRequest;
  /** The plaintexts that must not get through. */
  readonly secrets: readonly string[];
  /** More to check: `sent` is what the upstream or destination got (or the answer's body). */
  readonly check?: (sent: Buffer, answer: RawAnswer) => void;
  readonly vendor?: VendorAnswer;
  /** The status a protected answer has (egress: the vendor's); any 2xx when absent. */
  readonly status?: number;
}

/** Values the rows need from the running service. */
export interface Fixtures {
  /** A token of the guard's configuration (patients, PHI). */
  readonly guardToken: string;
  /** A token of another configuration, of `123-45-6789`. */
  readonly foreignToken: string;
  /** A token of the relay routes' configuration (records). */
  readonly routeToken: string;
  /** Tokens of the egress configuration, of CARD and CARD2. */
  readonly cardToken: string;
  readonly cardToken2: string;
  /** A destination the /proxy configuration allows. */
  readonly vendorPath: string;
}

export const SSN = '123-45-6789';
const NOTE = 'note-7f3a-secret';
export const CARD = '4111 1111 1111 1111';
export const CARD2 = '5500 0000 0000 0004';

type Headers = ReadonlyArray<readonly [string, string]>;

interface Options {
  readonly method?: string;
  readonly target?: string;
  readonly headers?: Headers;
  readonly cuts?: readonly number[] | 'every byte';
  readonly secrets?: readonly string[];
  readonly check?: Row['check'];
  readonly vendor?: VendorAnswer;
  readonly status?: number;
}

/** Every offset of a body: one chunk per byte. */
function everyByte(body: Buffer | string): number[] {
  const length = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  return Array.from({ length: length - 1 }, (_, i) => i + 1);
}

function row(name: string, expect: Outcome, body: Buffer | string | null, contentType: string | null, base: Headers, options: Options = {}): Row {
  const headers: Array<readonly [string, string]> = [...base];
  if (contentType !== null) headers.push(['content-type', contentType]);
  headers.push(...(options.headers ?? []));
  const cuts = options.cuts === 'every byte' ? everyByte(body ?? '') : options.cuts;
  return {
    name,
    expect,
    request: {
      method: options.method ?? 'POST',
      target: options.target ?? '/',
      headers,
      ...(body === null ? {} : { body }),
      ...(cuts === undefined ? {} : { framing: { kind: 'chunked', cuts } }),
    },
    secrets: options.secrets ?? [SSN],
    ...(options.check === undefined ? {} : { check: options.check }),
    ...(options.vendor === undefined ? {} : { vendor: options.vendor }),
    ...(options.status === undefined ? {} : { status: options.status }),
  };
}

const j = (value: unknown) => JSON.stringify(value);
/** A body whose one protected key is spelled `key`, as JSON text (escapes written as given). */
const withKey = (key: string, value = j(SSN)) => `{"name":"Ada",${key}:${value},"n":1.10}`;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
const utf16le = (text: string, bom: boolean) => Buffer.concat([bom ? Buffer.from([0xff, 0xfe]) : Buffer.alloc(0), Buffer.from(text, 'utf16le')]);

/** A JSON string that is a real token is kept byte for byte. */
const keeps = (token: string) => (sent: Buffer) => assert.ok(sent.includes(token), `the token was kept: ${sent.toString()}`);
/** A string that merely looks like a token, or is another configuration's, is not kept. */
const replaces = (value: string) => (sent: Buffer) => assert.ok(!sent.includes(value), `replaced: ${sent.toString()}`);
/** The number of tokens in what was sent on. */
const tokens = (n: number) => (sent: Buffer) => assert.equal(sent.toString('latin1').match(/svc:\d+:/g)?.length ?? 0, n, sent.toString());
/** The number of tokens in the answer. */
const answerTokens = (n: number) => (_sent: Buffer, answer: RawAnswer) => tokens(n)(answer.body);

// ---------------------------------------------------------------------------------------
// The relay, under `relay.protect: { keys: [ssn, dob, card_number, kyc] }`, with routes
// `POST /patients/*` (encrypt notes) and `/records/**` (encrypt notes, items.*.notes).
// ---------------------------------------------------------------------------------------

export function relayRows(f: Fixtures): Row[] {
  const rows: Row[] = [];
  const at = (target: string) => ({ target });
  const add = (name: string, expect: Outcome, body: Buffer | string | null, contentType: string | null, options: Options = {}) =>
    rows.push(row(name, expect, body, contentType, [], { target: '/p', ...options }));
  const body = j({ name: 'Ada', ssn: SSN });

  // Content types: JSON is JSON whatever it is called, or however the type is spelled.
  for (const type of [
    null,
    '',
    'application/json',
    'text/json',
    'application/x-json',
    'text/plain',
    'text/html',
    'application/xml',
    '*/*',
    'application/json, text/plain',
    'text/plain, application/json',
    'application/vnd.api+json',
    'application/problem+json',
    'application/json; charset=UTF-8',
    'application/json;charset="utf-8"',
    'APPLICATION/JSON; CHARSET=UTF8',
    'Application/Json ; Charset = "Utf-8"',
    'application/json; boundary=x; charset=utf-8',
    'application/octet-stream',
    'multipart/form-data; boundary=b',
    'application/x-ndjson',
    'application/jsonl',
    'application/x-jsonlines',
  ]) {
    add(`content type ${type === null ? '(none)' : JSON.stringify(type)}`, 'protected', body, type);
  }
  // Declared a form, read as JSON by the first byte: the application may take it as either.
  add('content type "application/x-www-form-urlencoded" on a JSON body', 'refused', body, 'application/x-www-form-urlencoded');
  add('content type "text/plain; charset=utf-16" on a JSON body', 'refused', body, 'text/plain; charset=utf-16');
  for (const type of ['application/json; charset=utf-8, text/plain', 'application/json; charset=iso-8859-1', 'application/json; charset="latin1"', 'application/json; charset=utf-16', 'application/json; CHARSET=UTF-16LE', 'application/json; charset=us-ascii', 'application/json; charset=utf-7']) {
    add(`JSON declared in another charset: ${type}`, 'refused', body, type);
  }
  add('UTF-16LE JSON with a BOM, as application/json', 'refused', utf16le(body, true), 'application/json');
  add('UTF-16LE JSON without a BOM, as application/json', 'refused', utf16le(body, false), 'application/json');
  add('UTF-16LE JSON without a BOM, no type', 'refused', utf16le(body, false), null);
  add('UTF-16BE JSON, as text/plain', 'refused', Buffer.from(utf16le(body, false)).swap16(), 'text/plain');
  add('multipart body naming ssn', 'refused', `--b\r\ncontent-disposition: form-data; name="ssn"\r\n\r\n${SSN}\r\n--b--\r\n`, 'multipart/form-data; boundary=b');
  add('multipart body of a JSON part', 'refused', `--b\r\ncontent-type: application/json\r\n\r\n${body}\r\n--b--\r\n`, 'multipart/mixed; boundary=b');
  add('binary body holding the plaintext', 'refused', Buffer.concat([Buffer.from([0, 1, 2]), Buffer.from(`ssn=${SSN}`)]), 'application/octet-stream');
  add('a form body as text/plain', 'refused', `ssn=${SSN}`, 'text/plain');
  add('a form body without a type', 'refused', `ssn=${SSN}`, null);
  add('a form body as application/json', 'refused', `ssn=${SSN}`, 'application/json');
  add('a form body as application/x-ndjson', 'refused', `ssn=${SSN}`, 'application/x-ndjson');
  add('a form in another charset', 'refused', `ssn=${SSN}`, 'application/x-www-form-urlencoded; charset=iso-8859-1');
  add('XML naming ssn', 'refused', `<p><ssn>${SSN}</ssn></p>`, 'application/xml');
  add('a JSON string as the whole body', 'refused', j(SSN), 'application/json');

  // JSON found by its first byte: whitespace before it is fine; anything else is no JSON
  // the guard can vouch for.
  add('JSON after spaces, tabs and line ends, as text/plain', 'protected', ` \t\r\n ${body}`, 'text/plain');
  add('a JSON array as text/plain', 'protected', j([{ ssn: SSN }]), 'text/plain');
  add('JSON after whitespace sent as its own chunks', 'protected', `   \n\n${body}`, null, { cuts: [1, 2, 3, 4, 5] });
  // Parsers skip a byte-order mark (body-parser strips it): so does the guard.
  add('a UTF-8 BOM before { as application/json', 'protected', Buffer.concat([BOM, Buffer.from(body)]), 'application/json');
  add('a UTF-8 BOM before { as text/plain', 'protected', Buffer.concat([BOM, Buffer.from(body)]), 'text/plain');
  add('a UTF-8 BOM before {, no type', 'protected', Buffer.concat([BOM, Buffer.from(body)]), null);
  add('a UTF-8 BOM before {, the BOM cut across chunks', 'protected', Buffer.concat([BOM, Buffer.from(body)]), 'application/json', { cuts: [1, 2, 3] });
  add('a form feed before {', 'refused', `\f${body}`, 'text/plain');
  add('a vertical tab before {', 'refused', `\v${body}`, 'application/json');
  add('a no-break space before {', 'refused', `\u00a0${body}`, 'application/json');
  add('a NUL before {', 'refused', `\0${body}`, null);
  add('JSON with a comment', 'refused', `{/* x */"ssn":"${SSN}"}`, 'application/json');
  add('JSON with single quotes', 'refused', `{'ssn':'${SSN}'}`, 'text/plain');
  add('JSON with an unquoted key', 'refused', `{ssn:"${SSN}"}`, 'application/json');
  add('JSON with a trailing comma', 'refused', `{"ssn":"${SSN}",}`, 'application/json');
  add('two JSON documents as application/json', 'refused', `{"a":1}{"ssn":"${SSN}"}`, 'application/json');
  add('JSON then garbage', 'refused', `{"a":1} ssn=${SSN}`, 'application/json');
  add('NDJSON as text/plain', 'refused', `{"a":1}\n{"ssn":"${SSN}"}\n`, 'text/plain');

  // Key spellings: a binder that folds case or compatibility forms reads them all as ssn.
  for (const [name, key] of [
    ['SSN', '"SSN"'],
    ['Ssn', '"Ssn"'],
    ['sSn', '"sSn"'],
    ['long s ſsn', '"ſsn"'],
    ['two long s ſſn', '"ſſn"'],
    ['fullwidth ｓｓｎ', '"ｓｓｎ"'],
    ['fullwidth upper ＳＳＮ', '"ＳＳＮ"'],
    ['a combining acute s\u0301sn', '"s\u0301sn"'],
    ['precomposed śsn', '"\u015bsn"'],
    ['a zero-width joiner s\u200dsn', '"s\u200dsn"'],
    ['a zero-width space ssn\u200b', '"ssn\u200b"'],
    ['a soft hyphen s\u00adsn', '"s\u00adsn"'],
    ['a leading BOM \ufeffssn', '"\ufeffssn"'],
    ['a variation selector ssn\ufe0f', '"ssn\ufe0f"'],
    ['escaped \\u0073sn', '"\\u0073sn"'],
    ['escaped \\u0053\\u0053\\u004E', '"\\u0053\\u0053\\u004E"'],
    ['mixed ss\\u006e', '"ss\\u006e"'],
    ['escaped fullwidth \\uff53sn', '"\\uff53sn"'],
    ['escaped long s \\u017fsn', '"\\u017fsn"'],
    ['escaped zero-width joiner s\\u200dsn', '"s\\u200dsn"'],
    ['dotted patient.ssn', '"patient.ssn"'],
    ['bracketed patient[ssn]', '"patient[ssn]"'],
    ['bracketed patient[SSN]', '"patient[SSN]"'],
    ['ssn[]', '"ssn[]"'],
    ['ssn[0]', '"ssn[0]"'],
    ['[ssn]', '"[ssn]"'],
    ['a.b.c.ssn', '"a.b.c.ssn"'],
    ['unbalanced patient[ssn', '"patient[ssn"'],
    ['ssn.', '"ssn."'],
    ['.ssn', '".ssn"'],
    ['DOB', '"DOB"'],
    ['Kelvin sign \u212Ayc', '"\u212Ayc"'],
    ['escaped Kelvin sign \\u212Ayc', '"\\u212Ayc"'],
    ['fullwidth ＫＹＣ', '"ＫＹＣ"'],
    ['CARD_NUMBER', '"CARD_NUMBER"'],
    ['fullwidth low line card\uff3fnumber', '"card\uff3fnumber"'],
    ['fullwidth ｃａｒｄ＿ｎｕｍｂｅｒ', '"ｃａｒｄ＿ｎｕｍｂｅｒ"'],
    ['a trailing space "ssn "', '"ssn "'],
    ['a leading space " SSN"', '" SSN"'],
    ['a trailing no-break space', '"ssn\u00a0"'],
    ['a trailing tab escape', '"ssn\\t"'],
    ['card-number', '"card-number"'],
    ['card number', '"card number"'],
    ['cardNumber', '"cardNumber"'],
    ['CardNumber', '"CardNumber"'],
    ['card__number', '"card__number"'],
    ['escaped card\u005fnumber', '"card\\u005fnumber"'],
  ] as const) {
    add(`key ${name}`, 'protected', withKey(key), 'application/json');
  }

  // Nesting: at any depth, in any container, under the keys a JS binder treats specially.
  const deep = (levels: number) => `${'{"a":'.repeat(levels - 1)}{"ssn":"${SSN}"}${'}'.repeat(levels - 1)}`;
  add('depth 32 (the deepest allowed)', 'protected', deep(32), 'application/json');
  add('depth 33', 'refused', deep(33), 'application/json');
  add('arrays of arrays', 'protected', `[[[[{"ssn":"${SSN}"}]],[]]]`, 'application/json');
  add('in an array of objects of arrays', 'protected', j({ a: [{ x: [{ y: 1 }, { ssn: SSN }] }] }), 'application/json');
  add('under __proto__', 'protected', `{"__proto__":{"ssn":"${SSN}"}}`, 'application/json');
  add('under __proto__ twice', 'protected', `{"__proto__":{"__proto__":{"ssn":"${SSN}"}}}`, 'application/json');
  add('under constructor.prototype', 'protected', `{"constructor":{"prototype":{"ssn":"${SSN}"}}}`, 'application/json');
  add('under prototype', 'protected', `{"prototype":{"ssn":"${SSN}"}}`, 'application/json');
  add('under an escaped __proto__', 'protected', `{"\\u005f_proto__":{"ssn":"${SSN}"}}`, 'application/json');
  add('duplicate keys, the plaintext second', 'protected', `{"ssn":"x","ssn":"${SSN}"}`, 'application/json', { check: tokens(2) });
  add('duplicate keys, the plaintext first', 'protected', `{"ssn":"${SSN}","ssn":"x"}`, 'application/json', { check: tokens(2) });
  add('duplicate keys, a real token then the plaintext', 'protected', `{"ssn":${j(f.guardToken)},"ssn":"${SSN}"}`, 'application/json', { check: tokens(2) });
  add('duplicate keys in two spellings', 'protected', `{"ssn":"x","SSN":"${SSN}"}`, 'application/json', { check: tokens(2) });
  add('a protected key inside a protected value', 'protected', j({ dob: { ssn: SSN } }), 'application/json', { check: tokens(1) });
  add('after 200 KB of other values', 'protected', j({ filler: 'x'.repeat(200_000), ssn: SSN }), 'application/json');
  add('after a 200 KB key', 'protected', `{"${'k'.repeat(200_000)}":1,"ssn":"${SSN}"}`, 'application/json');
  add('a thousand times', 'protected', j(Array.from({ length: 1000 }, () => ({ ssn: SSN }))), 'application/json', { check: tokens(1000) });
  // The guard holds a value as long as a token of a max_value value may be (1 MiB → ~1.33 MiB).
  add('a key longer than a token of limits.max_value', 'refused', `{"${'k'.repeat(1_500_000)}":1,"ssn":"${SSN}"}`, 'application/json');
  add('a protected value longer than a token of limits.max_value', 'refused', j({ ssn: `${SSN}${'9'.repeat(1_500_000)}` }), 'application/json');

  // Value types: each is encrypted whole.
  for (const [name, value, secret] of [
    ['a number', '123456789', '123456789'],
    ['a negative number', '-987654321', '987654321'],
    ['a decimal', '1234.5678', '1234.5678'],
    ['an exponent', '1.23456789e8', '1.23456789e8'],
    ['true', 'true', 'true'],
    ['false', 'false', 'false'],
    ['an object', j({ value: SSN }), SSN],
    ['an array', j([SSN]), SSN],
    ['an array of arrays', j([[SSN], []]), SSN],
    ['an escaped string', '"123\\u002d45\\u002d6789"', SSN],
    ['a string with \\/ escapes', '"123\\/45\\/6789"', '123/45/6789'],
    ['a string with a line feed escape', '"123-45\\n6789"', '123-45\n6789'],
  ] as const) {
    add(`value ${name}`, 'protected', `{"ssn":${value}}`, 'application/json', { secrets: [secret] });
  }

  // Paths: a route's field is encrypted however the path is spelled, and the guard's keys
  // on every path. A target routers read differently is refused.
  const both = { secrets: [SSN, NOTE] };
  const routed = j({ notes: NOTE, ssn: SSN });
  for (const target of [
    '/patients/7',
    '/patients;x=1/7',
    '/patients/7;jsessionid=1',
    '/patients/7;',
    '/Patients/7',
    '/PATIENTS/7',
    '/patients/7/',
    '//patients/7',
    '/patients//7',
    '/./patients/7',
    '/x/../patients/7',
    '/patients/./7',
    '/patients/%37',
    '/%70atients/7',
    '/%50ATIENTS/7',
    '/patients%2F7',
    '/patients/7%2F',
    '/patients/%2F7',
    '/patients/a%2Fb',
    '/patients/7%2Fedit',
    '/PATIENTS%2F7',
    '/patients/7?x=1',
    '/patients/7?',
    '/patients/7?ssn=1#',
    'http://app.example/patients/7',
    'http://app.example:80/patients/7?x=1',
    'HTTP://APP.EXAMPLE/patients/7',
  ]) {
    add(`path ${target}`, 'protected', routed, 'application/json', { ...at(target), ...both });
  }
  for (const target of ['/records', '/records/1/2/3', '/RECORDS/%31', '/records;a=b/1']) {
    add(`path ${target} (a ** route)`, 'protected', j({ notes: NOTE, items: [{ notes: NOTE }], ssn: SSN }), 'application/json', { ...at(target), ...both, check: tokens(3) });
  }
  for (const target of ['/patients/7%3B', '/patients/7%3bx', '/patients/%zz', '/patients/7%', '/patients/7%00', '/patients/7%0A', '/patients/%7f']) {
    add(`path ${target}`, 'refused', routed, 'application/json', { ...at(target), ...both });
  }
  // The route names POST: other methods, and paths that are not the route's, are left to the guard.
  for (const target of ['/patients', '/patients/7/notes', '/patients/7/..', '/patient/7', '*']) {
    // A dot segment in a target no route matched: a router could read it as a route's path.
    add(`path ${target} (no route: the guard)`, target === '*' || target.includes('..') ? 'refused' : 'protected', routed, 'application/json', at(target));
  }

  // Methods: every method with a body is inspected; the parser refuses what it cannot read.
  for (const method of ['PUT', 'PATCH', 'DELETE', 'GET', 'HEAD', 'OPTIONS', 'PROPFIND', 'REPORT', 'MKCOL', 'SEARCH', 'LOCK', 'PURGE']) {
    add(`method ${method} with a body`, 'protected', body, 'application/json', { method });
  }
  add('method POST followed by two spaces', 'protected', body, 'application/json', { method: 'POST ' });
  for (const method of ['post', 'Post', 'FOO', 'P\tOST', 'PO ST']) {
    add(`method ${JSON.stringify(method)}`, 'refused', body, 'application/json', { method });
  }
  add('HTTP/1.0 with a body', 'protected', body, 'application/json', { target: '/p HTTP/1.0\r\nx-pad: 1' });
  add('expect: 100-continue', 'protected', body, 'application/json', { headers: [['expect', '100-continue']] });
  add('content-length and transfer-encoding both', 'refused', body, 'application/json', { headers: [['content-length', String(body.length)]], cuts: [5] });
  add('two content-types, text/plain first', 'protected', body, 'text/plain', { headers: [['content-type', 'application/json']] });
  add('two content-types, a form body and text/plain first', 'refused', `ssn=${SSN}`, 'text/plain', { headers: [['content-type', 'application/x-www-form-urlencoded']] });

  // Encodings: the guard reads identity bodies only.
  const gz = gzipSync(body);
  add('gzip, as application/json', 'refused', gz, 'application/json', { headers: [['content-encoding', 'gzip']] });
  add('gzip, no type', 'refused', gz, null, { headers: [['content-encoding', 'gzip']] });
  add('gzip, as text/plain', 'refused', gz, 'text/plain', { headers: [['content-encoding', 'gzip']] });
  add('gzip without content-encoding, as application/json', 'refused', gz, 'application/json');
  add('gzip without content-encoding, as application/octet-stream', 'refused', gz, 'application/octet-stream');
  add('x-gzip', 'refused', gz, 'application/json', { headers: [['content-encoding', 'x-gzip']] });
  add('deflate', 'refused', deflateSync(body), 'application/json', { headers: [['content-encoding', 'deflate']] });
  add('br', 'refused', brotliCompressSync(body), 'application/json', { headers: [['content-encoding', 'br']] });
  add('br, no type', 'refused', brotliCompressSync(body), null, { headers: [['content-encoding', 'br']] });
  add('content-encoding: identity, gzip', 'refused', gz, 'application/json', { headers: [['content-encoding', 'identity, gzip']] });
  add('content-encoding: gzip, identity', 'refused', gz, 'application/json', { headers: [['content-encoding', 'gzip, identity']] });
  add('two content-encoding headers, identity then gzip', 'refused', gz, 'application/json', { headers: [['content-encoding', 'identity'], ['content-encoding', 'gzip']] });
  add('content-encoding: identity', 'protected', body, 'application/json', { headers: [['content-encoding', 'identity']] });
  add('content-encoding: IDENTITY', 'protected', body, 'application/json', { headers: [['content-encoding', 'IDENTITY']] });
  add('content-encoding: empty', 'protected', body, 'application/json', { headers: [['content-encoding', '']] });
  add('content-encoding: identity on a plain body of a compressed name', 'refused', body, 'application/json', { headers: [['content-encoding', 'compress']] });
  add('transfer-encoding: gzip, chunked', 'refused', gz, 'application/json', { headers: [['transfer-encoding', 'gzip, chunked']], cuts: [] });

  // Chunked bodies cut at every byte: a key, a value or an escape split across reads.
  const cutJson = `{"a":1,"ssn":"${SSN}","b":[1]}`;
  for (const cut of everyByte(cutJson)) add(`JSON cut at byte ${cut}`, 'protected', cutJson, 'application/json', { cuts: [cut] });
  add('JSON in one-byte chunks', 'protected', cutJson, 'application/json', { cuts: 'every byte' });
  add('an escaped key in one-byte chunks', 'protected', `{"\\u0053sn":"${SSN}"}`, 'application/json', { cuts: 'every byte' });
  add('a fullwidth key in one-byte chunks (characters split)', 'protected', `{"ｓｓｎ":"${SSN}"}`, 'text/plain', { cuts: 'every byte' });
  const cutForm = `x=1&ssn=${SSN}&y=2`;
  for (const cut of everyByte(cutForm)) add(`form cut at byte ${cut}`, 'protected', cutForm, 'application/x-www-form-urlencoded', { cuts: [cut] });
  const cutLines = `{"a":1}\r\n{"ssn":"${SSN}"}\n`;
  for (const cut of everyByte(cutLines)) add(`NDJSON cut at byte ${cut}`, 'protected', cutLines, 'application/x-ndjson', { cuts: [cut] });

  // NDJSON: each line is a document.
  const nd = 'application/x-ndjson';
  add('NDJSON with \\r\\n line ends', 'protected', `{"a":1}\r\n{"ssn":"${SSN}"}\r\n`, nd);
  add('NDJSON with blank lines', 'protected', `\n\n{"a":1}\n\n   \n{"SSN":"${SSN}"}\n\n`, nd);
  add('NDJSON without a final line end', 'protected', `{"a":1}\n{"ssn":"${SSN}"}`, nd);
  add('NDJSON of arrays', 'protected', `[1]\n[{"ssn":"${SSN}"}]\n`, nd);
  add('NDJSON with a line that is a scalar', 'refused', `{"a":1}\n42\n{"ssn":"${SSN}"}\n`, nd);
  add('NDJSON with a line that is a string', 'refused', `{"a":1}\n"${SSN}"\n`, nd);
  add('NDJSON with a document across two lines', 'refused', `{"a":1,\n"ssn":"${SSN}"}\n`, nd);
  add('NDJSON with \\r only', 'refused', `{"a":1}\r{"ssn":"${SSN}"}`, nd);
  add('NDJSON with a BOM', 'protected', Buffer.concat([BOM, Buffer.from(`{"ssn":"${SSN}"}\n`)]), nd);

  // Forms: names as a form decoder reads them.
  const form = 'application/x-www-form-urlencoded';
  for (const [name, text, secret] of [
    ['ssn=', `ssn=${SSN}`, SSN],
    ['SSN=', `SSN=${SSN}`, SSN],
    ['%53%53%4E= (an encoded name)', `%53%53%4E=${SSN}`, SSN],
    ['%C5%BFsn= (an encoded long s)', `%C5%BFsn=${SSN}`, SSN],
    ['an encoded fullwidth name', `%EF%BD%93%EF%BD%93%EF%BD%8E=${SSN}`, SSN],
    ['patient[ssn]=', `patient[ssn]=${SSN}`, SSN],
    ['patient%5Bssn%5D=', `patient%5Bssn%5D=${SSN}`, SSN],
    ['patient%5bSSN%5d=', `patient%5bSSN%5d=${SSN}`, SSN],
    ['patient.ssn=', `patient.ssn=${SSN}`, SSN],
    ['ssn[]=', `ssn[]=${SSN}`, SSN],
    ['ssn[0]=', `ssn[0]=${SSN}`, SSN],
    ['ssn[a][b]=', `ssn[a][b]=${SSN}`, SSN],
    ['a[b][ssn]=', `a[b][ssn]=${SSN}`, SSN],
    ['ssn[=', `ssn[=${SSN}`, SSN],
    ['a value with + for spaces', `ssn=123+45+6789`, '123 45 6789'],
    ['a value with %20 for spaces', `ssn=123%2045%206789`, '123 45 6789'],
    ['an encoded value', `ssn=%31%32%33%2D%34%35%2D%36%37%38%39`, SSN],
    ['a value starting with =', `ssn==${SSN}`, SSN],
    ['a ; separator', `x=1;ssn=${SSN}`, SSN],
    ['a ; separator after a protected value', `ssn=1;dob=${SSN}`, SSN],
    ['repeated names', `ssn=${SSN}&ssn=${SSN}&SSN=${SSN}`, SSN],
    ['empty parameters around it', `&&ssn=${SSN}&&`, SSN],
    ['a name without a value before it', `flag&ssn=${SSN}`, SSN],
    ['a leading space in the name', `+ssn=${SSN}`, SSN],
    ['a leading encoded space in the name', `%20ssn=${SSN}`, SSN],
    ['a dotted name for card_number', `card.number=${SSN}`, SSN],
    ['a spaced name for card_number', `card+number=${SSN}`, SSN],
    ['an unbalanced bracket for card_number', `card[number=${SSN}`, SSN],
  ] as const) {
    add(`form ${name}`, 'protected', text, form, { secrets: [secret] });
  }
  // Query strings (DESIGN §15): the guard reads them as forms, split at & and ;, on any
  // method, a route matched or not, with or without a body.
  for (const [name, query, secret] of [
    ['ssn=', `ssn=${SSN}`, SSN],
    ['SSN=', `SSN=${SSN}`, SSN],
    ['%73sn=', `%73sn=${SSN}`, SSN],
    ['%C5%BFsn= (long s)', `%C5%BFsn=${SSN}`, SSN],
    ['patient%5Bssn%5D=', `patient%5Bssn%5D=${SSN}`, SSN],
    ['patient.ssn=', `patient.ssn=${SSN}`, SSN],
    ['ssn[]=', `ssn[]=${SSN}`, SSN],
    ['a ; separator', `x=1;ssn=${SSN}`, SSN],
    ['a value with + for spaces', 'ssn=123+45+6789', '123 45 6789'],
    ['an encoded value', 'ssn=%31%32%33%2D%34%35%2D%36%37%38%39', SSN],
    ['repeated names', `ssn=${SSN}&ssn=${SSN}&DOB=${SSN}`, SSN],
    ['empty parameters around it', `&&ssn=${SSN}&&`, SSN],
    ['a dotted name for card_number', `card.number=${SSN}`, SSN],
  ] as const) {
    add(`query ${name}, GET without a body`, 'protected', null, null, { method: 'GET', target: `/p?${query}`, secrets: [secret] });
  }
  add('query ssn=, DELETE', 'protected', null, null, { method: 'DELETE', target: `/p/7?ssn=${SSN}` });
  add('query ssn=, with a JSON body', 'protected', j({ a: 1 }), 'application/json', { target: `/p?ssn=${SSN}` });
  add('query ssn=, on a route', 'protected', j({ notes: NOTE }), 'application/json', { target: `/patients/7?ssn=${SSN}`, secrets: [SSN, NOTE] });
  add('query with a broken escape in a name', 'refused', null, null, { method: 'GET', target: `/p?ss%zzn=${SSN}` });
  add('query with a broken escape in a protected value', 'refused', null, null, { method: 'GET', target: `/p?ssn=${SSN}%zz` });
  add('query with a protected value that is not UTF-8', 'refused', null, null, { method: 'GET', target: `/p?ssn=${SSN}%FF` });
  add('form with a broken escape in a name', 'refused', `ss%zzn=${SSN}`, form);
  add('form with a broken escape in a protected value', 'refused', `ssn=${SSN}%zz`, form);
  add('form with a value that is not UTF-8 after it', 'protected', Buffer.concat([Buffer.from(`ssn=${SSN}&n=`), Buffer.from([0xff])]), form);

  // Tokens: a real one of ours is kept; anything else is plaintext to the guard.
  add('a real token of the guard configuration', 'protected', j({ ssn: f.guardToken }), 'application/json', { secrets: [SSN], check: keeps(f.guardToken) });
  add('a real token in a form, as sent', 'protected', `ssn=${f.guardToken}`, form, { check: keeps(f.guardToken) });
  add('a real token in a form, percent-encoded', 'protected', `ssn=${encodeURIComponent(f.guardToken)}`, form, { check: keeps(encodeURIComponent(f.guardToken)) });
  add('a fake token holding the plaintext', 'protected', j({ ssn: `svc:1:${SSN}:x:$` }), 'application/json');
  add('a fake token holding the plaintext, in a form', 'protected', `ssn=svc:1:${SSN}:x:$`, form);
  add('a token of another configuration', 'protected', j({ ssn: f.foreignToken }), 'application/json', { check: replaces(f.foreignToken) });
  add('a real token with the plaintext after it', 'protected', j({ ssn: `${f.guardToken}${SSN}` }), 'application/json');
  add('a real token written with an escape', 'protected', `{"ssn":"${f.guardToken.replace('$', '\\u0024')}"}`, 'application/json', { check: replaces(f.guardToken) });
  add('a real token in an array', 'protected', j({ ssn: [f.guardToken, SSN] }), 'application/json');
  add("a token of a route's configuration, off the route", 'protected', j({ ssn: f.routeToken }), 'application/json', { check: replaces(f.routeToken) });
  // Not one the route wrote, nor of the guard's classification: another field's token, wrapped.
  add("a token of the route's configuration, on the route", 'protected', j({ notes: NOTE, ssn: f.routeToken }), 'application/json', { target: '/patients/7', secrets: [SSN, NOTE], check: replaces(f.routeToken) });
  return rows;
}

/** `uninspectable: pass` lets what the guard cannot read through; what it can read is still protected. */
export function passModeRows(_f: Fixtures): Row[] {
  const rows: Row[] = [];
  const add = (name: string, body: string, contentType: string | null, options: Options = {}) => rows.push(row(name, 'protected', body, contentType, [], { target: '/p', ...options }));
  add('JSON as text/plain', j({ SSN }), 'text/plain');
  add('JSON with no type', j({ a: [{ ssn: SSN }] }), null);
  add('JSON as application/octet-stream', j({ ssn: SSN }), 'application/octet-stream');
  add('NDJSON', `{"a":1}\n{"ssn":"${SSN}"}\n`, 'application/x-ndjson');
  add('a form', `patient%5Bssn%5D=${SSN}`, 'application/x-www-form-urlencoded');
  add('JSON after a 200 KB value', j({ filler: 'x'.repeat(200_000), ssn: SSN }), 'application/json');
  add('JSON cut at every byte', `{"\\u0073sn":"${SSN}"}`, 'application/json', { cuts: 'every byte' });
  return rows;
}

// ---------------------------------------------------------------------------------------
// /proxy/vault (encrypt) and the encrypt API, x-svc-fields: ssn. The configuration's own
// field list is card.number, so a header that fell back to it would leave ssn in plaintext.
// ---------------------------------------------------------------------------------------

function dataPlaneRows(f: Fixtures, base: Headers, target: string, forwards: boolean): Row[] {
  const rows: Row[] = [];
  const fields = (value: string): Headers => [['x-svc-fields', value]];
  const add = (name: string, expect: Outcome, body: Buffer | string | null, contentType: string | null, options: Options = {}) => {
    const headers = options.headers ?? fields('ssn');
    rows.push(row(name, expect, body, contentType, base, { target, ...options, headers }));
  };
  const body = j({ name: 'Ada', ssn: SSN, card: { number: '4111' } });

  for (const type of ['application/json', 'application/json; charset=UTF-8', 'APPLICATION/JSON', 'application/json;charset="utf-8"', 'Application/Json ; Charset = Utf8', 'application/vnd.api+json', 'application/x-ndjson']) {
    add(`content type ${JSON.stringify(type)}`, 'protected', body, type);
  }
  for (const type of [null, '', 'text/json', 'application/x-json', 'text/plain', 'application/json, text/plain', 'application/octet-stream', 'multipart/form-data; boundary=b', 'application/x-www-form-urlencoded', 'application/json; charset=iso-8859-1', 'application/json; charset=utf-16']) {
    add(`content type ${type === null ? '(none)' : JSON.stringify(type)}`, 'refused', body, type);
  }
  // Forms are read too (DESIGN §15): a parameter is named by its path, in any spelling.
  add('a form body', 'protected', `ssn=${SSN}`, 'application/x-www-form-urlencoded');
  add('a form body, the name escaped', 'protected', `%73sn=${encodeURIComponent(SSN)}&a=1`, 'application/x-www-form-urlencoded');
  add('a form body, the value with + for spaces', 'protected', `a=1&ssn=${SSN.replace(/-/g, '+')}`, 'application/x-www-form-urlencoded', { secrets: [SSN.replace(/-/g, ' ')] });
  add('a form body, the name repeated', 'protected', `ssn=${SSN}&ssn=${SSN}&ssn[]=${SSN}`, 'application/x-www-form-urlencoded', { check: tokens(3) });
  add('a form body with a nested name, a bracket path', 'protected', `patient%5Bssn%5D=${SSN}`, 'application/x-www-form-urlencoded', { headers: fields('patient[ssn]') });
  add('a form body with a nested name, a dotted path', 'protected', `patient[ssn]=${SSN}`, 'application/x-www-form-urlencoded', { headers: fields('patient.ssn') });
  add('a form body with a dotted name', 'protected', `patient.ssn=${SSN}`, 'application/x-www-form-urlencoded', { headers: fields('patient[ssn]') });
  add('a form body in UTF-8 by charset', 'protected', `ssn=${SSN}`, 'application/x-www-form-urlencoded; charset=utf-8');
  add('a form body in another charset', 'refused', `ssn=${SSN}`, 'application/x-www-form-urlencoded; charset=iso-8859-1');
  add('a form body that reads as JSON after whitespace', 'refused', ` \r\n${body}`, 'application/x-www-form-urlencoded');
  add('a form body that is a JSON array', 'refused', j([{ ssn: SSN }]), 'application/x-www-form-urlencoded');
  add('a form body with a bad escape', 'refused', `ssn=${SSN}%zz`, 'application/x-www-form-urlencoded');
  add('a form body, gzip', 'refused', gzipSync(`ssn=${SSN}`), 'application/x-www-form-urlencoded', { headers: [...fields('ssn'), ['content-encoding', 'gzip']] });
  add('content type with spaces around it', 'protected', body, ' application/json ');
  add('JSON after whitespace', 'protected', `\r\n\t ${body}`, 'application/json');
  add('a UTF-8 BOM before {', 'refused', Buffer.concat([BOM, Buffer.from(body)]), 'application/json');
  add('UTF-16LE JSON', 'refused', utf16le(body, true), 'application/json');
  add('two documents', 'refused', `{"a":1}{"ssn":"${SSN}"}`, 'application/json');

  // Keys as JSON spells them: an escaped name is the same name.
  add('key escaped \\u0073sn', 'protected', `{"\\u0073sn":"${SSN}"}`, 'application/json');
  add('key escaped ss\\u006E', 'protected', `{"ss\\u006E":"${SSN}"}`, 'application/json');
  add('duplicate keys, the plaintext second', 'protected', `{"ssn":"x","ssn":"${SSN}"}`, 'application/json', { check: tokens(2) });
  add('duplicate keys, the plaintext first', 'protected', `{"ssn":"${SSN}","ssn":"x"}`, 'application/json', { check: tokens(2) });
  add('duplicate keys, one escaped', 'protected', `{"ssn":"x","\\u0073sn":"${SSN}"}`, 'application/json', { check: tokens(2) });
  add('a root array with a wildcard path', 'protected', j([{ ssn: SSN }, { ssn: SSN }]), 'application/json', { headers: fields('*.ssn'), check: tokens(2) });
  add('nested with a wildcard path', 'protected', j({ a: { b: { ssn: SSN } }, c: [{ d: { ssn: SSN } }] }), 'application/json', { headers: fields('*.*.ssn, c.*.d.ssn'), check: tokens(2) });
  add('under __proto__', 'protected', `{"__proto__":{"ssn":"${SSN}"}}`, 'application/json', { headers: fields('__proto__.ssn') });
  add('every top-level value', 'protected', body, 'application/json', { headers: fields('*') });

  // The header itself: spacing and case are fine, a misspelling is a 400, never a fallback.
  add('x-svc-fields with spaces and empty entries', 'protected', body, 'application/json', { headers: fields(' , ssn ,, ') });
  add('X-SVC-FIELDS in upper case', 'protected', body, 'application/json', { headers: [['X-SVC-FIELDS', 'ssn']] });
  add('x-svc-fields twice', 'protected', body, 'application/json', { headers: [['x-svc-fields', 'card.number'], ['x-svc-fields', 'ssn']] });
  for (const name of ['x-svc-field', 'X-Svc-Field', 'x-svc-fileds', 'x-svc-fieldss', 'x-svc-fields-x', 'x-svc-flds']) {
    add(`misspelt header ${name}`, 'refused', body, 'application/json', {
      headers: [[name, 'ssn']],
      check: (_sent, answer) => assert.match(answer.body.toString(), /^\{"message":"Unknown header /),
    });
  }
  for (const name of ['x_svc_fields', 'x-svc_fields', 'x_svc-fields', 'xsvc-fields', 'x-svcfields', 'svc-fields']) {
    add(`misspelt header ${name}`, 'refused', body, 'application/json', { headers: [[name, 'ssn']] });
  }
  add('x-svc-fields next to a misspelt one', 'refused', body, 'application/json', { headers: [...fields('ssn'), ['x-svc-field', 'dob']] });

  // Value types.
  for (const [name, value, secret] of [
    ['a number', '123456789', '123456789'],
    ['true', 'true', 'true'],
    ['an object', j({ v: SSN }), SSN],
    ['an array', j([SSN, [SSN]]), SSN],
    ['an escaped string', '"123\\u002d45\\u002d6789"', SSN],
  ] as const) {
    add(`value ${name}`, 'protected', `{"ssn":${value}}`, 'application/json', { secrets: [secret] });
  }

  // Encodings.
  add('gzip', 'refused', gzipSync(body), 'application/json', { headers: [...fields('ssn'), ['content-encoding', 'gzip']] });
  add('content-encoding: identity, gzip', 'refused', gzipSync(body), 'application/json', { headers: [...fields('ssn'), ['content-encoding', 'identity, gzip']] });
  add('br', 'refused', brotliCompressSync(body), 'application/json', { headers: [...fields('ssn'), ['content-encoding', 'br']] });
  add('content-encoding: identity', 'protected', body, 'application/json', { headers: [...fields('ssn'), ['content-encoding', 'identity']] });

  // Chunked bodies cut at every byte.
  const cutJson = `{"a":1,"ssn":"${SSN}"}`;
  for (const cut of everyByte(cutJson)) add(`cut at byte ${cut}`, 'protected', cutJson, 'application/json', { cuts: [cut] });
  add('an escaped key in one-byte chunks', 'protected', `{"\\u0073sn":"${SSN}"}`, 'application/json', { cuts: 'every byte' });
  add('streamed: 100 KB before the field, chunked', 'protected', j({ filler: 'x'.repeat(100_000), ssn: SSN }), 'application/json', { cuts: [30_000, 60_000, 90_000] });

  // NDJSON.
  const nd = 'application/x-ndjson';
  add('NDJSON with \\r\\n line ends', 'protected', `{"a":1}\r\n{"ssn":"${SSN}"}\r\n`, nd);
  add('NDJSON with blank lines', 'protected', `\n{"a":1}\n\n \n{"ssn":"${SSN}"}\n\n`, nd);
  add('NDJSON with a line that is a scalar', 'refused', `{"a":1}\n7\n{"ssn":"${SSN}"}\n`, nd);

  // Limits.
  add('depth 33', 'refused', `${'['.repeat(32)}{"ssn":"${SSN}"}${']'.repeat(32)}`, 'application/json', { headers: fields('*.ssn') });
  add('a value longer than limits.max_value', 'refused', j({ ssn: `${SSN}${'9'.repeat(1_100_000)}` }), 'application/json');

  // Tokens: encrypt encrypts what it is given, token-shaped or not.
  add('a fake token holding the plaintext', 'protected', j({ ssn: `svc:1:${SSN}:x:$` }), 'application/json');
  add('a token of another configuration', 'protected', j({ ssn: f.foreignToken }), 'application/json');

  if (forwards) {
    // x-svc-mode (/proxy): encrypt however written; anything else is a 400.
    for (const mode of ['ENCRYPT', ' encrypt ', 'Encrypt']) add(`x-svc-mode ${JSON.stringify(mode)}`, 'protected', body, 'application/json', { headers: [...fields('ssn'), ['x-svc-mode', mode]] });
    for (const mode of ['encrypted', 'encrypt, decrypt', 'enc']) add(`x-svc-mode ${JSON.stringify(mode)}`, 'refused', body, 'application/json', { headers: [...fields('ssn'), ['x-svc-mode', mode]] });
    // Methods: /proxy forwards the methods it routes, with their body.
    for (const method of ['PUT', 'PATCH', 'DELETE', 'GET', 'OPTIONS']) add(`method ${method} with a body`, 'protected', body, 'application/json', { method });
    for (const method of ['PROPFIND', 'post', 'Post']) add(`method ${method}`, 'refused', body, 'application/json', { method });
  }
  return rows;
}

export function proxyRows(f: Fixtures): Row[] {
  const base: Headers = [['x-svc-authorization', KEYS.owner], ['x-svc-destination', f.vendorPath]];
  const rows = dataPlaneRows(f, base, '/proxy/vault', true);
  const body = j({ ssn: SSN });
  const add = (name: string, expect: Outcome, target: string, headers: Headers = base) => rows.push(row(name, expect, body, 'application/json', headers, { target, headers: [['x-svc-fields', 'ssn']] }));
  add('slug in upper case', 'refused', '/proxy/VAULT');
  add('slug percent-encoded', 'protected', '/proxy/%76ault');
  add('a trailing slash', 'refused', '/proxy/vault/');
  add('a ;parameter', 'refused', '/proxy/vault;x=1');
  add('a query', 'protected', '/proxy/vault?ssn=1');
  add('a double slash', 'refused', '//proxy/vault');
  add('an absolute-form target', 'refused', 'http://svc.test/proxy/vault');
  add('a destination the configuration does not allow', 'refused', '/proxy/vault', [['x-svc-authorization', KEYS.owner], ['x-svc-destination', 'http://127.0.0.1:1/in/x']]);
  add('two destinations, the allowed one first', 'refused', '/proxy/vault', [['x-svc-authorization', KEYS.owner], ['x-svc-destination', f.vendorPath], ['x-svc-destination', 'http://127.0.0.1:1/in/x']]);
  add('a destination spelled with another case', 'protected', '/proxy/vault', [['x-svc-authorization', KEYS.owner], ['x-svc-destination', f.vendorPath.replace('http://', 'HTTP://')]]);
  return rows;
}

export function encryptRows(f: Fixtures): Row[] {
  const base: Headers = [['x-svc-authorization', KEYS.owner]];
  const rows = dataPlaneRows(f, base, '/api/v3/encryption/vault/encrypt', false);
  const body = j({ ssn: SSN });
  const add = (name: string, expect: Outcome, target: string, method = 'POST') => rows.push(row(name, expect, body, 'application/json', base, { target, method, headers: [['x-svc-fields', 'ssn']] }));
  add('slug in upper case', 'refused', '/api/v3/encryption/VAULT/encrypt');
  add('ENCRYPT in upper case', 'refused', '/api/v3/encryption/vault/ENCRYPT');
  add('a trailing slash', 'refused', '/api/v3/encryption/vault/encrypt/');
  add('a ;parameter', 'refused', '/api/v3/encryption/vault/encrypt;x=1');
  add('a query', 'protected', '/api/v3/encryption/vault/encrypt?x=1');
  add('PUT', 'refused', '/api/v3/encryption/vault/encrypt', 'PUT');
  return rows;
}

// ---------------------------------------------------------------------------------------
// Egress routes `vendor` (decrypt card.number) and `forms` (decrypt card[number]): the
// vendor gets the plaintext, echoes it in many ways, and the application must get tokens.
// ---------------------------------------------------------------------------------------

const echo =
  (headers: Record<string, string | string[]>, transform: (body: Buffer) => Buffer = (b) => b, status = 200, pieces = 1): VendorAnswer =>
  (body) => {
    const out = transform(body);
    const size = Math.ceil(out.length / pieces);
    const parts = pieces === 1 ? [out] : Array.from({ length: Math.ceil(out.length / size) }, (_, i) => out.subarray(i * size, (i + 1) * size));
    return { status, headers, body: parts };
  };

export function egressRows(f: Fixtures): Row[] {
  const rows: Row[] = [];
  const secrets = [CARD, CARD2];
  const request = j({ amount: 5, card: { number: f.cardToken } });
  const add = (name: string, expect: Outcome, vendor: VendorAnswer, options: Options & { body?: string | Buffer; type?: string | null } = {}) =>
    rows.push(row(name, expect, options.body ?? request, options.type === undefined ? 'application/json' : options.type, [], { target: '/egress/vendor/charges', secrets, vendor, ...options }));
  const json = { 'content-type': 'application/json' };

  // The vendor's answer: JSON under any name, or found by its first byte, or else withheld.
  for (const type of ['application/json', 'application/json; charset=UTF-8', 'APPLICATION/JSON', 'application/vnd.vendor+json', 'application/problem+json']) {
    add(`echoed as ${type}`, 'protected', echo({ 'content-type': type }));
  }
  for (const type of [null, '', 'text/plain', 'text/json', 'application/x-json', 'application/json, text/plain', 'text/html', 'application/octet-stream']) {
    add(`echoed as ${type === null ? '(no type)' : JSON.stringify(type)}`, 'protected', echo(type === null ? {} : { 'content-type': type }));
  }
  add('echoed with 400', 'protected', echo(json, undefined, 400), { status: 400 });
  add('echoed with 500', 'protected', echo(json, undefined, 500), { status: 500 });
  add('echoed with 201 and no type', 'protected', echo({}, undefined, 201), { status: 201 });
  add('echoed in one-byte pieces', 'protected', echo(json, undefined, 200, 1_000));
  add('echoed in pieces, no type', 'protected', echo({}, undefined, 200, 12));
  add('echoed with whitespace first, as text/plain', 'protected', echo({ 'content-type': 'text/plain' }, (b) => Buffer.concat([Buffer.from('\n  '), b])));
  add('echoed with content-encoding: identity', 'protected', echo({ ...json, 'content-encoding': 'identity' }));
  add('echoed with the number escaped', 'protected', echo(json, (b) => Buffer.from(b.toString().replace(CARD, CARD.replaceAll(' ', '\\u0020')))));
  add('echoed with the key escaped', 'protected', echo(json, (b) => Buffer.from(b.toString().replace('"number"', '"\\u006eumber"'))));
  add('echoed twice under the same key', 'protected', echo(json, () => Buffer.from(`{"card":{"number":"x","number":"${CARD}"}}`)), { check: answerTokens(2) });
  add('echoed as a number', 'protected', echo(json, () => Buffer.from(`{"card":{"number":${CARD.replaceAll(' ', '')}}}`)), { secrets: [...secrets, CARD.replaceAll(' ', '')] });
  add('echoed as NDJSON', 'protected', echo({ 'content-type': 'application/x-ndjson' }, (b) => Buffer.from(`${b}\n${b}\n`)), { check: answerTokens(2) });
  add('echoed as NDJSON with no type', 'withheld', echo({}, (b) => Buffer.from(`${b}\n${b}\n`)));
  add('echoed gzipped although asked for identity', 'withheld', echo({ ...json, 'content-encoding': 'gzip' }, (b) => gzipSync(b)));
  add('echoed gzipped as text/plain', 'withheld', echo({ 'content-type': 'text/plain', 'content-encoding': 'gzip' }, (b) => gzipSync(b)));
  add('echoed gzipped with no type', 'withheld', echo({ 'content-encoding': 'gzip' }, (b) => gzipSync(b)));
  add('echoed brotli-compressed as text/plain', 'withheld', echo({ 'content-type': 'text/plain', 'content-encoding': 'br' }, (b) => brotliCompressSync(b)));
  add('echoed gzipped, content-encoding: identity, gzip', 'withheld', echo({ ...json, 'content-encoding': 'identity, gzip' }, (b) => gzipSync(b)));
  add('echoed in another charset', 'withheld', echo({ 'content-type': 'application/json; charset=iso-8859-1' }));
  add('echoed after a BOM', 'protected', echo(json, (b) => Buffer.concat([BOM, b])));
  add('echoed as invalid JSON', 'withheld', echo(json, (b) => Buffer.concat([b, Buffer.from('}')])));
  add('echoed as invalid JSON, as text/plain', 'withheld', echo({ 'content-type': 'text/plain' }, (b) => Buffer.concat([b, Buffer.from('}')])));

  // The application's request.
  add('two tokens under duplicate keys', 'protected', echo(json), { body: `{"card":{"number":${j(f.cardToken)},"number":${j(f.cardToken2)}}}`, check: answerTokens(2) });
  add('a request key escaped', 'protected', echo(json), { body: `{"card":{"\\u006eumber":${j(f.cardToken)}}}` });
  add('an NDJSON request', 'protected', echo({ 'content-type': 'application/x-ndjson' }), { body: `{"card":{"number":${j(f.cardToken)}}}\n{"card":{"number":${j(f.cardToken2)}}}\n`, type: 'application/x-ndjson', check: answerTokens(2) });
  add('a request cut at every byte', 'protected', echo(json), { cuts: 'every byte' });
  const form = 'application/x-www-form-urlencoded';
  add('a form request echoed as a form', 'protected', echo({ 'content-type': form }), { target: '/egress/forms/charges', body: `card[number]=${f.cardToken}&amount=5`, type: form });
  add('an encoded form name echoed as a form', 'protected', echo({ 'content-type': form }), { target: '/egress/forms/charges', body: `card%5Bnumber%5D=${f.cardToken}`, type: form });
  add('a form request echoed as JSON', 'protected', echo(json, (b) => Buffer.from(j({ card: { number: new URLSearchParams(b.toString()).get('card[number]') } }))), { target: '/egress/forms/charges', body: `card[number]=${f.cardToken}`, type: form });
  add('a form request echoed as JSON with no type', 'protected', echo({}, (b) => Buffer.from(j({ card: { number: new URLSearchParams(b.toString()).get('card[number]') } }))), { target: '/egress/forms/charges', body: `card[number]=${f.cardToken}`, type: form });
  add('a route name in another case', 'refused', echo({}), { target: '/egress/VENDOR/charges' });
  add('a dot segment after the route', 'refused', echo({}), { target: '/egress/vendor/%2e%2e/admin' });
  add('an escaped slash after the route', 'refused', echo({}), { target: '/egress/vendor/a%2Fb' });
  add('a gzipped request', 'refused', echo({}), { body: gzipSync(request), headers: [['content-encoding', 'gzip']] });
  return rows;
}
