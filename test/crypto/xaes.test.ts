import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  XaesKey,
  xaesIntermediates,
  xaesOpen,
  xaesOpenWithSubkey,
  xaesSeal,
  xaesSealWithSubkey,
} from '../../src/crypto/xaes.ts';

type Vector = {
  key_hex: string;
  nonce_ascii: string;
  L_hex: string;
  K1_hex: string;
  derived_key_hex: string;
  derived_nonce_hex: string;
  plaintext_ascii: string;
  aad_ascii: string;
  ciphertext_and_tag_hex: string;
};

type Vectors = { vectors: Vector[]; accumulated: { iterations_10000_hex: string } };

const vectors = JSON.parse(
  readFileSync(new URL('../../../shared/testdata/xaes-256-gcm.json', import.meta.url), 'utf8'),
) as Vectors;

test('the vector file holds the two published vectors', () => {
  assert.equal(vectors.vectors.length, 2);
});

for (const [i, v] of vectors.vectors.entries()) {
  test(`C2SP vector ${i + 1}: L, K1, derived key and nonce`, () => {
    const key = Buffer.from(v.key_hex, 'hex');
    const nonce = Buffer.from(v.nonce_ascii, 'ascii');
    const { l, k1, derivedKey } = xaesIntermediates(key, nonce);
    assert.equal(l.toString('hex'), v.L_hex);
    assert.equal(k1.toString('hex'), v.K1_hex);
    assert.equal(derivedKey.toString('hex'), v.derived_key_hex);
    assert.equal(nonce.subarray(12).toString('hex'), v.derived_nonce_hex);
  });

  test(`C2SP vector ${i + 1}: seal and open`, () => {
    const key = new XaesKey(Buffer.from(v.key_hex, 'hex'));
    const nonce = Buffer.from(v.nonce_ascii, 'ascii');
    const plaintext = Buffer.from(v.plaintext_ascii, 'ascii');
    const aad = Buffer.from(v.aad_ascii, 'ascii');
    const sealed = xaesSeal(key, nonce, plaintext, aad);
    assert.equal(sealed.toString('hex'), v.ciphertext_and_tag_hex);
    assert.deepEqual(xaesOpen(key, nonce, sealed, aad), plaintext);

    const subkey = key.deriveSubkey(nonce);
    assert.equal(xaesSealWithSubkey(subkey, nonce, plaintext, aad).toString('hex'), v.ciphertext_and_tag_hex);
    assert.deepEqual(xaesOpenWithSubkey(subkey, nonce, sealed, aad), plaintext);
  });

  test(`C2SP vector ${i + 1}: any flipped byte of ciphertext, tag, nonce or aad fails to open`, () => {
    const key = new XaesKey(Buffer.from(v.key_hex, 'hex'));
    const nonce = Buffer.from(v.nonce_ascii, 'ascii');
    const aad = Buffer.from(v.aad_ascii, 'ascii');
    const sealed = Buffer.from(v.ciphertext_and_tag_hex, 'hex');
    for (const target of [sealed, nonce, aad]) {
      for (let j = 0; j < target.length; j++) {
        target[j] = target[j]! ^ 0x01;
        assert.throws(() => xaesOpen(key, nonce, sealed, aad), /authentication failed/);
        target[j] = target[j]! ^ 0x01;
      }
    }
    assert.throws(() => xaesOpen(key, nonce, sealed.subarray(0, sealed.length - 1), aad), /authentication failed/);
    assert.throws(() => xaesOpen(key, nonce, Buffer.concat([sealed, Buffer.of(0)]), aad), /authentication failed/);
    assert.throws(() => xaesOpen(key, nonce, sealed.subarray(0, 15), aad), /authentication failed/);
    assert.throws(() => xaesOpen(key, nonce, sealed, Buffer.from('x')), /authentication failed/);
    // The untouched inputs still open.
    assert.equal(xaesOpen(key, nonce, sealed, aad).toString('ascii'), v.plaintext_ascii);
  });
}

test('a different key fails to open', () => {
  const nonce = Buffer.alloc(24, 7);
  const sealed = xaesSeal(new XaesKey(Buffer.alloc(32, 1)), nonce, Buffer.from('hello'), Buffer.alloc(0));
  assert.throws(() => xaesOpen(new XaesKey(Buffer.alloc(32, 2)), nonce, sealed, Buffer.alloc(0)), /authentication failed/);
});

test('the subkey depends on the first 12 nonce bytes only', () => {
  const key = new XaesKey(Buffer.alloc(32, 9));
  const a = Buffer.from('AAAAAAAAAAAA000000000000');
  const b = Buffer.from('AAAAAAAAAAAA111111111111');
  const c = Buffer.from('AAAAAAAAAAAB000000000000');
  assert.deepEqual(key.deriveSubkey(a).export(), key.deriveSubkey(b).export());
  assert.notDeepEqual(key.deriveSubkey(a).export(), key.deriveSubkey(c).export());
});

test('keys and nonces of the wrong size are rejected', () => {
  assert.throws(() => new XaesKey(Buffer.alloc(31)), RangeError);
  assert.throws(() => new XaesKey(Buffer.alloc(33)), RangeError);
  const key = new XaesKey(Buffer.alloc(32));
  assert.throws(() => key.deriveSubkey(Buffer.alloc(11)), RangeError);
  assert.throws(() => xaesSeal(key, Buffer.alloc(23), Buffer.alloc(1), Buffer.alloc(0)), RangeError);
  assert.throws(() => xaesOpen(key, Buffer.alloc(25), Buffer.alloc(17), Buffer.alloc(0)), RangeError);
});

test('an XaesKey does not show key material when inspected or serialised', async () => {
  const { inspect } = await import('node:util');
  const raw = Buffer.alloc(32, 0xab);
  const key = new XaesKey(raw);
  assert.ok(!inspect(key, { showHidden: true, depth: 10 }).includes('abababab'));
  assert.equal(JSON.stringify({ key }), '{"key":"XaesKey <redacted>"}');
});

// C2SP accumulated test: one SHAKE-128 stream feeds every input, a second absorbs every output.
test('C2SP accumulated test, 10,000 iterations', () => {
  const iterations = 10_000;
  const maxNeed = iterations * (32 + 24 + 1 + 255 + 1 + 255);
  // SHAKE output is prefix-stable, so one long squeeze is the same stream read in pieces.
  const stream = createHash('shake128', { outputLength: maxNeed }).digest();
  let pos = 0;
  const read = (n: number): Buffer => {
    const out = stream.subarray(pos, pos + n);
    pos += n;
    return out;
  };
  assert.equal(stream.subarray(0, 16).toString('hex'), '7f9c2ba4e88f827d616045507605853e');

  const acc = createHash('shake128', { outputLength: 32 });
  for (let i = 0; i < iterations; i++) {
    const key = new XaesKey(read(32));
    const nonce = read(24);
    const plaintext = read(read(1)[0]!);
    const aad = read(read(1)[0]!);
    const sealed = xaesSeal(key, nonce, plaintext, aad);
    acc.update(sealed);
    assert.deepEqual(xaesOpen(key, nonce, sealed, aad), plaintext);
  }
  assert.equal(acc.digest('hex'), vectors.accumulated.iterations_10000_hex);
});

test('deriveSubkeys gives, in one call, the subkey deriveSubkey gives for each prefix', () => {
  const key = new XaesKey(Buffer.alloc(32, 7));
  const prefixes = Buffer.from(Array.from({ length: 12 * 5 }, (_, i) => (i * 37 + 11) & 0xff));
  const batch = key.deriveSubkeys(prefixes, 5);
  assert.equal(batch.length, 5);
  for (let k = 0; k < 5; k++) {
    const one = key.deriveSubkey(prefixes.subarray(12 * k, 12 * k + 12));
    assert.deepEqual(batch[k]!.export(), one.export(), `prefix ${k}`);
  }
  assert.notDeepEqual(batch[0]!.export(), batch[1]!.export());
  assert.throws(() => key.deriveSubkeys(prefixes, 6), RangeError);
  assert.throws(() => key.deriveSubkeys(prefixes, 0), RangeError);
});
