/**
 * The echo guard's search (src/dataplane/echo-guard.ts) on its own: what every encoder's
 * spelling of a value normalises to, the limits that refuse rather than pass, and the
 * type that makes "no guard" an explicit null. The guard in a running service is tested
 * in egress.test.ts and egress-proxy.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { UpstreamResponseError } from '../../src/errors.ts';
import { DecryptedPaths, joinDecrypted, MAX_SCANNED, MAX_VALUES, MIN_LENGTH } from '../../src/dataplane/echo-guard.ts';

function guarding(...values: string[]): DecryptedPaths {
  const paths = new DecryptedPaths();
  values.forEach((value, i) => {
    paths.set(`v${i}`, 0);
    paths.remember(Buffer.from(value, 'utf8'));
  });
  return paths;
}

function refuses(paths: DecryptedPaths, body: string | Buffer, headers: Record<string, string> = {}): boolean {
  try {
    paths.check(headers, typeof body === 'string' ? Buffer.from(body, 'utf8') : body);
    return false;
  } catch (err) {
    assert.ok(err instanceof UpstreamResponseError);
    return true;
  }
}

/** Spellings of `value` as encoders write it: each must be found. */
const ENCODERS: Array<[string, (value: string) => string]> = [
  ['JSON', (v) => JSON.stringify(v)],
  ['JSON, every unit as \\u', (v) => Array.from({ length: v.length }, (_, k) => `\\u${v.charCodeAt(k).toString(16).padStart(4, '0')}`).join('')],
  ['JSON, `/` as `\\/`', (v) => JSON.stringify(v).replaceAll('/', '\\/')],
  ['encodeURIComponent', (v) => encodeURIComponent(v)],
  ['form', (v) => new URLSearchParams({ v }).toString()],
  ['RFC 3986 strict', (v) => encodeURIComponent(v).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16)}`)],
  ['every byte as %hh', (v) => [...Buffer.from(v, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('')],
  ['HTML', (v) => v.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)],
  ['HTML, every character as &#x;', (v) => [...v].map((c) => `&#x${c.codePointAt(0)!.toString(16)};`).join('')],
  ['form in HTML', (v) => new URLSearchParams({ v }).toString().replaceAll('&', '&amp;')],
  // Latin-1 as `%XX` (a character, not a UTF-8 byte) beside `%uXXXX`: regression.
  ['JavaScript escape()', (v) => escape(v)],
  // JavaScript's other escapes, and C's and PHP's octal ones: regression.
  ['JavaScript, ASCII as \\xHH', (v) => [...v].map((c) => (c.codePointAt(0)! < 0x80 ? `\\x${c.codePointAt(0)!.toString(16).padStart(2, '0')}` : c)).join('')],
  ['JavaScript, every character as \\u{}', (v) => [...v].map((c) => `\\u{${c.codePointAt(0)!.toString(16)}}`).join('')],
  ['octal, ASCII as \\NNN', (v) => [...v].map((c) => (c.codePointAt(0)! < 0x80 ? `\\${c.codePointAt(0)!.toString(8).padStart(3, '0')}` : c)).join('')],
];

test('every encoder\'s spelling of any value is found, in a body and in a header', () => {
  // Values of at least MIN_LENGTH characters that no escape could shorten below it.
  const value = fc.string({ unit: 'grapheme', minLength: MIN_LENGTH, maxLength: 40 }).filter((v) => !/[%\\&]/.test(v) && [...v].length >= MIN_LENGTH);
  fc.assert(
    fc.property(value, fc.constantFrom(...ENCODERS), (v, [, encode]) => {
      const paths = guarding(v);
      assert.ok(paths.searching);
      const spelled = encode(v);
      return refuses(paths, `{"before":1} ${spelled} after`) && refuses(paths, '', { location: `/x?a=${Buffer.from(spelled, 'utf8').toString('latin1')}` });
    }),
    { numRuns: 300 },
  );
});

test('an answer without the value passes, even when full of escapes', () => {
  const paths = guarding('ada@example.com', '4242 4242 4242 4242', "O'Brien <x>");
  for (const body of ['{"note":"a \\u0026 b, %41%42, &amp;&lt;&#64;"}', 'ada@example.org', '4242 4242 4242 4243', 'o&#39;brien <y>', '%4']) assert.ok(!refuses(paths, body), body);
  for (const body of ['ADA%40EXAMPLE.COM', '4242424242424242', 'o\\u0027brien \\u003cx\\u003e', 'O&apos;Brien+&lt;x&gt;']) assert.ok(refuses(paths, body), body);
});

test('many values are all looked for in the one pass, each found wherever it sits', () => {
  const values = Array.from({ length: MAX_VALUES }, (_, i) => `value-${String(i).padStart(4, '0')}-${(i * 7919).toString(36)}`);
  const paths = guarding(...values);
  const filler = 'x'.repeat(10_000);
  assert.ok(!refuses(paths, `${filler}value-9999-${filler}`));
  for (const i of [0, 1, 499, MAX_VALUES - 1]) assert.ok(refuses(paths, `${filler}${encodeURIComponent(values[i]!)}${filler}`), values[i]);
});

test('regression: a request that decrypted more values than can be searched for has its answer refused, not passed unsearched', () => {
  const values = Array.from({ length: MAX_VALUES + 1 }, (_, i) => `value-${String(i).padStart(5, '0')}`);
  const full = guarding(...values.slice(0, MAX_VALUES));
  assert.ok(!refuses(full, 'a harmless answer'), 'at the limit the answer is searched');
  const over = guarding(...values);
  assert.ok(over.searching);
  assert.ok(refuses(over, 'a harmless answer'), 'past it the answer is refused');
  assert.ok(refuses(over, Buffer.alloc(0)), 'even an empty one');
  // The same when a query's and a body's values together pass the limit.
  const query = guarding(...values.slice(0, 600));
  const body = guarding(...values.slice(600));
  const joined = joinDecrypted(query, body, true)!;
  assert.ok(refuses(joined, 'a harmless answer'));
});

test('regression: a body larger than the guard searches is refused, not searched in part', () => {
  const paths = guarding('ada@example.com');
  const big = Buffer.alloc(MAX_SCANNED + 1, 0x20);
  assert.ok(refuses(paths, big));
  assert.ok(!refuses(paths, big.subarray(0, 1024)));
});

test('regression: "no guard" is an explicit null; a map of another type does not compile', () => {
  assert.equal(joinDecrypted(guarding('ada@example.com'), null, false), null);
  const query = guarding('ada@example.com');
  const body = guarding('grace@example.com');
  const joined = joinDecrypted(query, body, true)!;
  assert.ok(refuses(joined, 'to ada%40example.com') && refuses(joined, 'to grace&#64;example.com'), 'both halves are searched');
  // A plain Map carries no values to search for: passing one is a type error, not a guard that never refuses.
  // @ts-expect-error -- a Map is not DecryptedPaths
  joinDecrypted(new Map([['card.number', 0]]), null, true);
});

test('regression: the JSON text of an object or array token is searched for each of its strings and numbers, numbers as written', () => {
  const paths = new DecryptedPaths();
  paths.set('card', 0);
  paths.remember(Buffer.from('{"number":"4242 4242 4242 4242","account":123456789012345678901,"tags":["premium customer"],"exp":[12,2034]}'), 'j');
  assert.ok(refuses(paths, 'declined: 4242424242424242'), 'a string, its digits alone');
  assert.ok(refuses(paths, 'account 123456789012345678901'), 'a number of more digits than a double holds');
  assert.ok(refuses(paths, '{"segment":"Premium Customer"}'), 'a string in an array');
  assert.ok(!refuses(paths, '{"number":"x","account":1,"tags":[],"exp":[12,2034]}'), 'keys and short values are not searched');
});

test('regression: a number is found however the answer groups its digits, and not when digits are missing', () => {
  const group = fc.array(fc.constantFrom(' ', '-', '.', '/', ' - ', '', '', ''), { minLength: 16, maxLength: 16 });
  fc.assert(
    fc.property(fc.stringMatching(/^[0-9]{8,19}$/), group, fc.boolean(), (digits, seps, sentGrouped) => {
      const spelled = [...digits].map((d, i) => d + (i < digits.length - 1 ? (seps[i] ?? '') : '')).join('');
      const paths = guarding(sentGrouped ? spelled : digits);
      return refuses(paths, `{"receipt":"card ${sentGrouped ? digits : spelled} ok"}`) && !refuses(paths, `card ${digits.slice(1)} ok, at 2026-11-28`);
    }),
  );
});

test('regression: a number grouped by a no-break or narrow space, a dash, a mask character or other punctuation is found; without one of its digits it is not', () => {
  const separators = ['&nbsp;', '\\u00a0', '\u00a0', '\u202f', '&#8239;', '\u2009', '\u2007', '\u2013', '\u2212', '\u00b7', '\u3000', '_', '\t', ',', ':', "'", '|', '*', ' \u00a0 '];
  for (const sep of separators) {
    const paths = guarding('4242424242424242', '123-45-6789');
    const card = ['4242', '4242', '4242', '4242'].join(sep);
    assert.ok(refuses(paths, `<p>Card ${card}</p>`), JSON.stringify(sep));
    assert.ok(refuses(paths, `{"ssn":"${['123', '45', '6789'].join(sep)}"}`), `ssn ${JSON.stringify(sep)}`);
    assert.ok(!refuses(paths, `<p>Card ${['4242', '4242', '4242', '424'].join(sep)}</p> at 2026-11-28`), `short ${JSON.stringify(sep)}`);
  }
});

test('regression: a value written in fullwidth forms (as CJK text writes digits and letters) is found; another value in them is not', () => {
  const fullwidth = (v: string) => [...v].map((c) => (c >= '!' && c <= '~' ? String.fromCodePoint(c.codePointAt(0)! + 0xfee0) : c)).join('');
  const paths = guarding('4242424242424242', 'alice.secret@example.com');
  assert.ok(refuses(paths, `<p>カード番号 ${fullwidth('4242 4242 4242 4242')}</p>`));
  assert.ok(refuses(paths, `{"email":"${fullwidth('Alice.Secret@Example.com')}"}`));
  assert.ok(refuses(paths, `{"email":"${fullwidth('alice.secret')}\\uff20example.com"}`));
  assert.ok(!refuses(paths, `<p>カード番号 ${fullwidth('4242 4242 4242 4243')}、${fullwidth('bob@example.com')}</p>`));
});

test('regression: a value is found in base64 or base64url of any bytes around it, and not in base64 of other bytes', () => {
  fc.assert(
    // Values no escape could shorten below MIN_LENGTH, as above: a shorter one is not searched.
    fc.property(fc.string({ minLength: MIN_LENGTH, maxLength: 40 }).filter((v) => !/[%\\&]/.test(v) && v.trim().length >= MIN_LENGTH), fc.uint8Array({ maxLength: 7 }), fc.uint8Array({ maxLength: 7 }), fc.boolean(), (value, before, after, url) => {
      const paths = guarding(value);
      const encoded = Buffer.concat([Buffer.from(before), Buffer.from(value, 'utf8'), Buffer.from(after)]).toString(url ? 'base64url' : 'base64');
      // The same bytes but one in the middle (the characters at the very edges of an
      // encoded value depend on its neighbours as well, and are not looked for).
      const changed = Buffer.from(value, 'utf8');
      changed[changed.length >> 1] = changed[changed.length >> 1]! ^ 0x01;
      const other = Buffer.concat([Buffer.from(before), changed, Buffer.from(after)]).toString(url ? 'base64url' : 'base64');
      return refuses(paths, `{"blob":"${encoded}"}`) && !refuses(paths, `{"blob":"${other}"}`);
    }),
  );
});

test('regression: an escape that decodes to as many bytes as it has (%96, an en dash in windows-1252) is still decoded', () => {
  const paths = guarding('Jean–Pierre Dupont');
  assert.ok(refuses(paths, 'name=Jean%96Pierre+Dupont'));
  assert.ok(refuses(paths, 'name=Jean%2596Pierre+Dupont'), 'and escaped once more');
  assert.ok(!refuses(paths, 'name=Jean%97Pierre+Dupont'), 'an em dash is another value');
});
