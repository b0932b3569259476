import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { base64urlDecodedLength, decodeBase64url, decodeBase64urlInto, isCanonicalBase64url } from '../../src/crypto/base64url.ts';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** The definition: a text is canonical when encoding what it decodes to gives it back. */
function canonical(text: string): boolean {
  return Buffer.from(text, 'base64url').toString('base64url') === text;
}

test('every byte string round-trips, and its text is the only one accepted for it', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
      const text = Buffer.from(bytes).toString('base64url');
      assert.deepEqual(decodeBase64url(text), Buffer.from(bytes));
      assert.equal(base64urlDecodedLength(text), bytes.length);
      assert.ok(isCanonicalBase64url(text));
    }),
    { numRuns: 2000 },
  );
});

test('property: a text decodes exactly when it is canonical, whatever its characters', () => {
  // Mostly alphabet characters, with the near misses Buffer.from accepts mixed in.
  const char = fc.oneof(
    { weight: 20, arbitrary: fc.constantFrom(...ALPHABET) },
    { weight: 1, arbitrary: fc.constantFrom('=', '+', '/', ' ', '\n', '.', ':', '\u0000', 'Ａ', 'é', '\u{1F600}') },
  );
  fc.assert(
    fc.property(fc.array(char, { maxLength: 40 }).map((chars) => chars.join('')), (text) => {
      const decoded = decodeBase64url(text);
      assert.equal(decoded !== null, canonical(text), JSON.stringify(text));
      assert.equal(isCanonicalBase64url(text), canonical(text), JSON.stringify(text));
      if (decoded !== null) assert.deepEqual(decoded, Buffer.from(text, 'base64url'));
    }),
    { numRuns: 5000 },
  );
});

test('near misses that Node decodes leniently are refused', () => {
  const bytes = Buffer.from([0xfb, 0xff, 0xbf, 0x01]);
  const good = bytes.toString('base64url');
  assert.equal(good, '-_-_AQ');
  const nearMisses: Array<[string, string]> = [
    ['padding', `${good}==`],
    ['one pad', `${good}=`],
    ['standard alphabet', bytes.toString('base64').replace(/=+$/, '')],
    ['space inside', `-_-_ AQ`],
    ['newline at the end', `${good}\n`],
    ['non-zero unused bits in the last character', '-_-_AR'],
    ['length 4n+1', `${good}AAA`.slice(0, 9)],
    ['a full-width letter', '-_-_ＡQ'],
    ['a dot', '-_-_A.'],
  ];
  for (const [what, text] of nearMisses) {
    assert.equal(canonical(text), false, `${what}: the table holds only non-canonical texts`);
    assert.equal(decodeBase64url(text), null, what);
    assert.equal(isCanonicalBase64url(text), false, what);
  }
  assert.deepEqual(decodeBase64url(good), bytes);
  assert.deepEqual(decodeBase64url(''), Buffer.alloc(0));
});

test('decoding into a buffer needs room for the whole result and writes nothing past it', () => {
  const text = Buffer.from('hello world').toString('base64url');
  const target = Buffer.alloc(14, 0xee);
  assert.equal(decodeBase64urlInto(text, 0, text.length, target, 3), 11);
  assert.equal(target.subarray(3).toString(), 'hello world');
  assert.deepEqual([...target.subarray(0, 3)], [0xee, 0xee, 0xee]);
  assert.equal(decodeBase64urlInto(text, 0, text.length, Buffer.alloc(10), 0), -1);
  // A range inside a longer text, as the token codec reads its parts.
  const framed = `x:${text}:y`;
  assert.equal(decodeBase64urlInto(framed, 2, 2 + text.length, target, 0), 11);
});
