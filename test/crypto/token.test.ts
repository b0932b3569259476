import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { Keyring, type KeyVersionInput } from '../../src/crypto/keyring.ts';
import { TokenCodec, TokenError, type TokenErrorReason, type TokenType } from '../../src/crypto/token.ts';
import { XaesKey, xaesOpen, xaesSeal } from '../../src/crypto/xaes.ts';

const ID_A = Buffer.alloc(16, 0xa1);
const ID_B = Buffer.alloc(16, 0xb2);
const KEY1 = Buffer.alloc(32, 0x01);
const KEY2 = Buffer.alloc(32, 0x02);
const TYPES: TokenType[] = ['s', 'n', 'b', 'j'];
const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

function ring(id = ID_A, versions: KeyVersionInput[] = [{ version: 1, key: KEY1 }], min?: number): Keyring {
  return new Keyring(id, versions, min === undefined ? {} : { minDecryptionVersion: min });
}

function reasonOf(fn: () => unknown): TokenErrorReason {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof TokenError, `expected TokenError, got ${String(err)}`);
    return err.reason;
  }
  assert.fail('expected a TokenError, but the call returned');
}

function parts(token: string): { kv: string; meta: Buffer; ct: Buffer } {
  const [svc, kv, meta, ct, end] = token.split(':');
  assert.equal(svc, 'svc');
  assert.equal(end, '$');
  return { kv: kv!, meta: Buffer.from(meta!, 'base64url'), ct: Buffer.from(ct!, 'base64url') };
}

function craft(meta: Buffer, ct: Buffer = Buffer.alloc(16), kv = '1'): string {
  return `svc:${kv}:${meta.toString('base64url')}:${ct.toString('base64url')}:$`;
}

/** A well-formed meta: 01 | type | LEB128 bytes as given | flags | 24-byte nonce. */
function meta(type: number, leb: number[], flags = 0): Buffer {
  return Buffer.concat([Buffer.of(0x01, type, ...leb, flags), Buffer.alloc(24, 0x42)]);
}

for (const deterministic of [false, true]) {
  const mode = deterministic ? 'deterministic' : 'randomized';

  test(`${mode}: round trip for every type, random plaintexts and classification ids`, () => {
    const codec = new TokenCodec(ring(), { deterministic });
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 300 }),
        fc.constantFrom(...TYPES),
        fc.oneof(fc.constantFrom(0, 1, 127, 128, 16383, 16384, Number.MAX_SAFE_INTEGER), fc.maxSafeNat()),
        (bytes, type, classificationId) => {
          const plaintext = Buffer.from(bytes);
          const token = codec.encryptor(classificationId).encrypt(plaintext, type);
          assert.ok(TokenCodec.looksLikeToken(token));
          assert.match(token, /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/);
          const out = codec.decrypt(token);
          assert.deepEqual(out.plaintext, plaintext);
          assert.equal(out.type, type);
          assert.equal(out.classificationId, classificationId);
          assert.equal(out.deterministic, deterministic);
          assert.equal(out.version, 1);
          assert.deepEqual(TokenCodec.peek(token), { version: 1, type, classificationId, deterministic });
        },
      ),
      { numRuns: 500 },
    );
  });

  test(`${mode}: one encryptor, many fields of mixed types`, () => {
    const codec = new TokenCodec(ring(), { deterministic });
    const enc = codec.encryptor(9);
    const inputs = Array.from({ length: 50 }, (_, i) => [Buffer.from(`value-${i}`), TYPES[i % 4]!] as const);
    const tokens = inputs.map(([pt, type]) => enc.encrypt(pt, type));
    tokens.forEach((token, i) => {
      const out = codec.decrypt(token);
      assert.deepEqual(out.plaintext, inputs[i]![0]);
      assert.equal(out.type, inputs[i]![1]);
    });
  });

  test(`${mode}: changing any one character of meta or ct never yields a plaintext`, () => {
    const codec = new TokenCodec(ring(), { deterministic });
    const token = codec.encryptor(300).encrypt(Buffer.from('4111 1111 1111 1111'), 's');
    const metaStart = 'svc:1:'.length;
    const ctEnd = token.length - 2;
    const seen = new Set<TokenErrorReason>();
    let checked = 0;
    for (let i = metaStart; i < ctEnd; i++) {
      if (token[i] === ':') continue;
      for (const c of B64URL) {
        if (c === token[i]) continue;
        const edited = token.slice(0, i) + c + token.slice(i + 1);
        const reason = reasonOf(() => codec.decrypt(edited));
        assert.ok(reason === 'authentication' || reason === 'malformed', `${reason} at ${i}`);
        seen.add(reason);
        checked++;
      }
    }
    assert.ok(checked > 60 * 63);
    assert.ok(seen.has('authentication'));
    assert.equal(codec.decrypt(token).plaintext.toString(), '4111 1111 1111 1111');
  });

  test(`${mode}: a token of one configuration does not open in another`, () => {
    const a = new TokenCodec(ring(ID_A), { deterministic });
    const token = a.encryptor(0).encrypt(Buffer.from('secret'), 's');
    // Same key material, different keyring id.
    assert.equal(reasonOf(() => new TokenCodec(ring(ID_B), { deterministic }).decrypt(token)), 'authentication');
    // Same id, different key.
    const otherKey = ring(ID_A, [{ version: 1, key: KEY2 }]);
    assert.equal(reasonOf(() => new TokenCodec(otherKey, { deterministic }).decrypt(token)), 'authentication');
  });
}

test('deterministic: equal plaintext and classification give equal tokens; anything else differs', () => {
  const codec = new TokenCodec(ring(), { deterministic: true });
  const t1 = codec.encryptor(5).encrypt(Buffer.from('alice@example.com'), 's');
  const t2 = codec.encryptor(5).encrypt(Buffer.from('alice@example.com'), 's');
  // A different codec instance over the same keyring material agrees too.
  const t3 = new TokenCodec(ring(), { deterministic: true }).encryptor(5).encrypt(Buffer.from('alice@example.com'), 's');
  assert.equal(t1, t2);
  assert.equal(t1, t3);
  const others = [
    codec.encryptor(5).encrypt(Buffer.from('bob@example.com'), 's'),
    codec.encryptor(6).encrypt(Buffer.from('alice@example.com'), 's'),
    codec.encryptor(0).encrypt(Buffer.from('alice@example.com'), 's'),
    codec.encryptor(5).encrypt(Buffer.from('alice@example.com'), 'j'),
    new TokenCodec(ring(ID_B), { deterministic: true }).encryptor(5).encrypt(Buffer.from('alice@example.com'), 's'),
  ];
  assert.equal(new Set([t1, ...others]).size, others.length + 1);
});

test('deterministic: the nonce is HMAC-SHA256(nonce key, AAD without nonce || plaintext)[0..24]', () => {
  const keyring = ring();
  const codec = new TokenCodec(keyring, { deterministic: true });
  const plaintext = Buffer.from('12345678901234567890');
  const token = codec.encryptor(200).encrypt(plaintext, 'n');
  const { meta: m } = parts(token);
  const aadWithoutNonce = Buffer.concat([Buffer.from('svc:'), ID_A, Buffer.from('1:'), m.subarray(0, m.length - 24)]);
  const mac = createHmac('sha256', keyring.forEncrypt().nonceKey).update(aadWithoutNonce).update(plaintext).digest();
  assert.deepEqual(m.subarray(m.length - 24), mac.subarray(0, 24));
});

test('randomized: the same plaintext encrypts differently each time', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  const enc = codec.encryptor(1);
  const tokens = new Set<string>();
  for (let i = 0; i < 100; i++) tokens.add(enc.encrypt(Buffer.from('same'), 's'));
  tokens.add(codec.encryptor(1).encrypt(Buffer.from('same'), 's'));
  assert.equal(tokens.size, 101);
});

test('randomized: one encryptor (one request) keeps a nonce prefix for its fields, fresh after 4,096; another encryptor never shares it', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  const prefixOf = (token: string) => {
    const m = parts(token).meta;
    return { prefix: m.subarray(m.length - 24, m.length - 12).toString('hex'), suffix: m.subarray(m.length - 12).toString('hex') };
  };
  // One request's fields: one prefix, a random suffix each, a fresh prefix after 4,096.
  const request = codec.encryptor(0);
  const prefixes: string[] = [];
  const suffixes = new Set<string>();
  for (let i = 0; i < 4097; i++) {
    const { prefix, suffix } = prefixOf(request.encrypt(Buffer.from('x'), 'b'));
    prefixes.push(prefix);
    suffixes.add(suffix);
  }
  assert.equal(new Set(prefixes.slice(0, 4096)).size, 1);
  assert.notEqual(prefixes[4096], prefixes[0]);
  assert.equal(suffixes.size, 4097);
  // Requests (encryptors) of one codec and classification never share a prefix, so their
  // tokens cannot be linked by it; neither do those of another codec.
  const seen = new Set(prefixes);
  for (let i = 0; i < 200; i++) {
    const { prefix } = prefixOf(codec.encryptor(i % 3).encrypt(Buffer.from('x'), 'b'));
    assert.ok(!seen.has(prefix), `request ${i} reused a prefix`);
    seen.add(prefix);
  }
  const other = new TokenCodec(ring(), { deterministic: false });
  assert.ok(!seen.has(prefixOf(other.encryptor(0).encrypt(Buffer.from('x'), 'b')).prefix));
  // Every token still opens: each subkey is the one its prefix derives.
  const token = codec.encryptor(2).encrypt(Buffer.from('still opens'), 's');
  assert.equal(codec.decrypt(token).plaintext.toString(), 'still opens');
  assert.equal(codec.decrypt(request.encrypt(Buffer.from('also'), 's')).plaintext.toString(), 'also');
});

test('the token layout and AAD are exactly those of DESIGN §5 (independent construction)', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  const plaintext = Buffer.from('{"a":[1,2]}');
  const token = codec.encryptor(130).encrypt(plaintext, 'j');
  const { kv, meta: m, ct } = parts(token);
  assert.equal(kv, '1');
  assert.equal(m.length, 1 + 1 + 2 + 1 + 24);
  assert.deepEqual([...m.subarray(0, 5)], [0x01, 0x6a, 0x82, 0x01, 0x00]); // 130 = LEB128 82 01
  assert.equal(ct.length, plaintext.length + 16);
  const nonce = m.subarray(5);
  const aad = Buffer.concat([Buffer.from('svc:'), ID_A, Buffer.from('1:'), m]);
  assert.deepEqual(xaesOpen(new XaesKey(KEY1), nonce, ct, aad), plaintext);

  // And the other way: a token assembled by hand from the specification decrypts.
  const m2 = Buffer.concat([Buffer.of(0x01, 0x73, 0x00, 0x00), Buffer.alloc(24, 0x33)]);
  const aad2 = Buffer.concat([Buffer.from('svc:'), ID_A, Buffer.from('1:'), m2]);
  const sealed = xaesSeal(new XaesKey(KEY1), m2.subarray(4), Buffer.from('hand made'), aad2);
  const out = codec.decrypt(craft(m2, sealed));
  assert.equal(out.plaintext.toString(), 'hand made');
  assert.equal(out.type, 's');
  assert.equal(out.classificationId, 0);
});

test('editing the type, classification or mode bit fails authentication', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  const token = codec.encryptor(7).encrypt(Buffer.from('x'), 's');
  const { meta: m, ct } = parts(token);
  const edits: Array<(b: Buffer) => void> = [
    (b) => (b[1] = 0x6e), // s -> n
    (b) => (b[1] = 0x6a), // s -> j
    (b) => (b[2] = 8), // classification 7 -> 8
    (b) => (b[2] = 0), // classification 7 -> none
    (b) => (b[3] = 1), // randomized -> deterministic
  ];
  for (const edit of edits) {
    const copy = Buffer.from(m);
    edit(copy);
    assert.equal(reasonOf(() => codec.decrypt(craft(copy, ct))), 'authentication');
  }
  assert.equal(codec.decrypt(craft(m, ct)).plaintext.toString(), 'x');
});

test('key versions: a new version encrypts, old tokens still open, kv edits fail', () => {
  const v1 = new TokenCodec(ring(), { deterministic: false });
  const old = v1.encryptor(0).encrypt(Buffer.from('old'), 's');
  const both = ring(ID_A, [
    { version: 1, key: KEY1 },
    { version: 2, key: KEY2 },
  ]);
  const v2 = new TokenCodec(both, { deterministic: false });
  const fresh = v2.encryptor(0).encrypt(Buffer.from('new'), 's');
  assert.ok(fresh.startsWith('svc:2:'));
  assert.equal(v2.decrypt(old).plaintext.toString(), 'old');
  assert.equal(v2.decrypt(old).version, 1);
  assert.equal(v2.decrypt(fresh).plaintext.toString(), 'new');
  assert.equal(v2.decrypt(fresh).version, 2);
  assert.equal(reasonOf(() => v2.decrypt(old.replace('svc:1:', 'svc:2:'))), 'authentication');
  assert.equal(reasonOf(() => v2.decrypt(fresh.replace('svc:2:', 'svc:1:'))), 'authentication');
  assert.equal(reasonOf(() => v1.decrypt(fresh)), 'unknown-version');
  assert.equal(reasonOf(() => v2.decrypt(old.replace('svc:1:', 'svc:3:'))), 'unknown-version');
});

test('minDecryptionVersion and destroyed versions retire tokens', () => {
  const v1 = new TokenCodec(ring(), { deterministic: false });
  const old = v1.encryptor(0).encrypt(Buffer.from('old'), 's');
  const retired = ring(
    ID_A,
    [
      { version: 1, key: KEY1 },
      { version: 2, key: KEY2 },
    ],
    2,
  );
  assert.equal(reasonOf(() => new TokenCodec(retired, { deterministic: false }).decrypt(old)), 'retired-version');
  const destroyed = ring(ID_A, [
    { version: 1, key: Buffer.alloc(0), destroyed: true },
    { version: 2, key: KEY2 },
  ]);
  assert.equal(reasonOf(() => new TokenCodec(destroyed, { deterministic: false }).decrypt(old)), 'destroyed-version');
});

test('peek reads the header without keys; null when malformed', () => {
  const codec = new TokenCodec(ring(), { deterministic: true });
  const token = codec.encryptor(2 ** 40).encrypt(Buffer.from('true'), 'b');
  assert.deepEqual(TokenCodec.peek(token), { version: 1, type: 'b', classificationId: 2 ** 40, deterministic: true });
  assert.equal(TokenCodec.peek('svc:1:AAAA:AAAA:$'), null);
  assert.equal(TokenCodec.peek(`${token}x`), null);
  assert.equal(TokenCodec.peek(''), null);
});

test('looksLikeToken is a prefix/suffix check', () => {
  assert.equal(TokenCodec.looksLikeToken('svc:1:abc:def:$'), true);
  assert.equal(TokenCodec.looksLikeToken('svc:anything:$'), true);
  for (const s of ['', 'svc:', 'svc:$', ':$', 'svc:1:abc:def:', 'xsvc:1:a:b:$', 'SVC:1:a:b:$', 'svc:1:a:b:$ ']) {
    assert.equal(TokenCodec.looksLikeToken(s), false, s);
  }
});

test('malformed tokens are rejected as malformed', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  const good = codec.encryptor(0).encrypt(Buffer.from('hello'), 's');
  const [, , metaText, ctText] = good.split(':') as [string, string, string, string, string];
  const goodMeta = parts(good).meta;
  const bad = [
    '',
    'svc:',
    'svc:$',
    'svc::$',
    `svc:1:${metaText}:$`,
    `svc:1:${metaText}:${ctText}`,
    `svc:1:${metaText}:${ctText}:$:$`,
    `svc:1:${metaText}:${ctText}:x:$`,
    `svc:1:${metaText}:${ctText}:`,
    `SVC:1:${metaText}:${ctText}:$`,
    ` svc:1:${metaText}:${ctText}:$`,
    `svc:1:${metaText}:${ctText}:$\n`,
    `svc:01:${metaText}:${ctText}:$`,
    `svc:0:${metaText}:${ctText}:$`,
    `svc:-1:${metaText}:${ctText}:$`,
    `svc:+1:${metaText}:${ctText}:$`,
    `svc:1.0:${metaText}:${ctText}:$`,
    `svc:2147483648:${metaText}:${ctText}:$`,
    `svc:99999999999999999999:${metaText}:${ctText}:$`,
    `svc::${metaText}:${ctText}:$`,
    `svc:1::${ctText}:$`,
    `svc:1:${metaText}::$`,
    `svc:1:${metaText}=:${ctText}:$`,
    `svc:1:${metaText}:${ctText}==:$`,
    `svc:1:+${metaText.slice(1)}:${ctText}:$`,
    `svc:1:${metaText.slice(0, 10)}/${metaText.slice(11)}:${ctText}:$`,
    `svc:1:${metaText.slice(0, 10)} ${metaText.slice(11)}:${ctText}:$`,
    `svc:1:${metaText}A:${ctText}:$`, // length % 4 == 1
    `svc:1:${metaText.slice(0, -1)}:${ctText}:$`, // meta one byte short
    `svc:1:${metaText}:${ctText.slice(0, 20)}:$`, // ct shorter than a tag
  ];
  for (const token of bad) assert.equal(reasonOf(() => codec.decrypt(token)), 'malformed', JSON.stringify(token));

  const crafted: Array<[string, Buffer]> = [
    ['format byte 0x02', Buffer.concat([Buffer.of(0x02), goodMeta.subarray(1)])],
    ['format byte 0x00', Buffer.concat([Buffer.of(0x00), goodMeta.subarray(1)])],
    ['unknown type x', meta(0x78, [0])],
    ['upper-case type S', meta(0x53, [0])],
    ['non-minimal LEB128 80 00', meta(0x73, [0x80, 0x00])],
    ['non-minimal LEB128 81 80 00', meta(0x73, [0x81, 0x80, 0x00])],
    ['LEB128 longer than 8 bytes', meta(0x73, [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01])],
    ['LEB128 above 2^53 - 1', meta(0x73, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x10])],
    ['flags bit 1', meta(0x73, [0], 0x02)],
    ['flags bit 7', meta(0x73, [0], 0x80)],
    ['nonce 23 bytes', meta(0x73, [0]).subarray(0, 27)],
    ['nonce 25 bytes', Buffer.concat([meta(0x73, [0]), Buffer.of(0)])],
    ['unterminated LEB128', Buffer.concat([Buffer.of(0x01, 0x73), Buffer.alloc(26, 0x80)])],
  ];
  for (const [what, m] of crafted) assert.equal(reasonOf(() => codec.decrypt(craft(m))), 'malformed', what);

  // Well-formed but unauthenticated headers reach the authentication step.
  assert.equal(reasonOf(() => codec.decrypt(craft(meta(0x73, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f])))), 'authentication');
  assert.equal(reasonOf(() => codec.decrypt(craft(meta(0x73, [0x00], 0x01)))), 'authentication');
});

test('non-canonical base64url (non-zero trailing bits) is malformed, not authenticated', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  // Pick plaintext lengths giving both partial-group remainders in ct.
  for (const len of [1, 2, 3, 4, 5]) {
    const token = codec.encryptor(0).encrypt(Buffer.alloc(len, 0x61), 's');
    const ctText = token.split(':')[3]!;
    if (ctText.length % 4 === 0) continue;
    const last = B64URL.indexOf(ctText[ctText.length - 1]!);
    const bumped = B64URL[last | 1]!;
    if (bumped === ctText[ctText.length - 1]) continue;
    const edited = token.slice(0, token.length - 3) + bumped + ':$';
    assert.deepEqual(Buffer.from(edited.split(':')[3]!, 'base64url'), Buffer.from(ctText, 'base64url'));
    assert.equal(reasonOf(() => codec.decrypt(edited)), 'malformed');
  }
});

test('meta and ct accept only their canonical base64url: unused bits, padding, other alphabets and lookalikes are malformed', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  // Classification ids 0, 300 and 40,000 give metas of 28, 29 and 30 bytes (both partial
  // remainders and none); plaintexts of 1 to 3 bytes do the same for ct.
  for (const classification of [0, 300, 40_000]) {
    for (const length of [1, 2, 3]) {
      const token = codec.encryptor(classification).encrypt(Buffer.alloc(length, 0x61), 's');
      assert.equal(codec.decrypt(token).plaintext.length, length);
      const [, kv, meta, ct] = token.split(':') as [string, string, string, string];
      const variants: string[] = [];
      for (const [part, edit] of [
        [meta, (m: string) => `svc:${kv}:${m}:${ct}:$`],
        [ct, (c: string) => `svc:${kv}:${meta}:${c}:$`],
      ] as const) {
        const last = B64URL.indexOf(part.at(-1)!);
        if (part.length % 4 !== 0) variants.push(edit(part.slice(0, -1) + B64URL[last | 1]));
        variants.push(edit(`${part}${'='.repeat((4 - (part.length % 4)) % 4 || 4)}`));
        variants.push(edit(`Ａ${part.slice(1)}`));
        variants.push(edit(`${part.slice(0, 4)}\u00c0${part.slice(5)}`));
      }
      for (const variant of variants) {
        assert.equal(reasonOf(() => codec.decrypt(variant)), 'malformed', variant);
        assert.equal(TokenCodec.peek(variant), null, variant);
      }
    }
  }
});

test('TokenError messages are generic', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  const token = codec.encryptor(0).encrypt(Buffer.from('top-secret-value'), 's');
  const edited = token.slice(0, -3) + (token.at(-3) === 'A' ? 'B' : 'A') + ':$';
  try {
    new TokenCodec(ring(ID_B), { deterministic: false }).decrypt(token);
    assert.fail('decrypted');
  } catch (err) {
    assert.ok(err instanceof TokenError);
    assert.ok(!err.message.includes(token) && !err.message.includes('top-secret'));
  }
  for (const t of [edited, 'svc:1:junk:$']) {
    try {
      codec.decrypt(t);
    } catch (err) {
      assert.ok(err instanceof TokenError && !err.message.includes(t));
    }
  }
});

test('encryptor rejects invalid classification ids and types', () => {
  const codec = new TokenCodec(ring(), { deterministic: false });
  for (const id of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1, Number.NaN]) assert.throws(() => codec.encryptor(id), RangeError);
  assert.throws(() => codec.encryptor(0).encrypt(Buffer.from('x'), 'x' as TokenType), TypeError);
});

test('deterministic subkey cache stays correct past its capacity', () => {
  const codec = new TokenCodec(ring(), { deterministic: true });
  const enc = codec.encryptor(0);
  const tokens = Array.from({ length: 1500 }, (_, i) => enc.encrypt(Buffer.from(String(i)), 'n'));
  tokens.forEach((t, i) => assert.equal(codec.decrypt(t).plaintext.toString(), String(i)));
  assert.equal(enc.encrypt(Buffer.from('0'), 'n'), tokens[0]);
});
