/**
 * Per-field encrypt and decrypt (ops/s = fields per second) against a bare loop doing
 * the same cryptographic work.
 *
 * Requests are modelled as 5 fields of 16-byte plaintexts.
 *
 * Encrypt candidate: `codec.encryptor(0).encrypt(plaintext, 's')`, a fresh encryptor
 * every 5 fields; the token string is the output.
 * Encrypt baseline: XAES-256-GCM with the key schedule built once (the keyring's own
 * XaesKey), one subkey per request (5 fields) over a random 12-byte prefix, derived 64 at
 * a time in one AES-ECB call (the codec gives each request a prefix of its own, from a
 * pool derived the same way), then per
 * field a random 12-byte suffix from `crypto.randomFillSync` into a preallocated nonce
 * buffer and one seal with an AAD as long as the codec's. No token formatting.
 *
 * Decrypt candidate: `codec.decrypt(token)` over tokens of 4,096 five-field requests,
 * each encrypted by its own codec (one prefix per request), cycled in order. The codec caches subkeys by nonce prefix (two generations of 512);
 * 4,096 distinct prefixes visited cyclically always miss that cache on a request's first
 * token and hit it on the other four: one derivation per 5 fields, as for live traffic.
 * Decrypt baseline: the same ciphertexts pre-split into nonce, sealed bytes and AAD
 * buffers; one derivation per 5 fields, then 5 opens. No token parsing or decoding.
 *
 * Extra row (no target): the encrypt baseline drawing its nonces from one pooled
 * randomFillSync per 4 KiB instead of one call per field, which is what the codec does.
 */
import { randomFillSync, type KeyObject } from 'node:crypto';
import { Keyring } from '../../src/crypto/keyring.ts';
import { TokenCodec, type FieldEncryptor } from '../../src/crypto/token.ts';
import { XAES_NONCE_PREFIX_SIZE, XAES_NONCE_SIZE, XaesKey, xaesOpenWithSubkey, xaesSealWithSubkey } from '../../src/crypto/xaes.ts';
import { compare, sampleGroup, sink, type Comparison, type SampleOptions, type Variant } from '../lib/measure.ts';
import type { SuiteResult } from '../lib/report.ts';
import type { MicroOptions } from './transformer.ts';

const FIELDS_PER_REQUEST = 5;
const PLAINTEXT_SIZE = 16;
/** Fields per timed call: amortises the clock reads of the sampler. */
const BATCH_FIELDS = 500;
const DECRYPT_REQUESTS = 4096;
const PLAINTEXTS = 1024;
/** "svc:" + 16-byte keyring id + "1:" + 28-byte meta: the AAD length the codec uses for id 0. */
const AAD_SIZE = 4 + 16 + 2 + 28;
const NONCE_SIZE = XAES_NONCE_SIZE;
const PREFIX = XAES_NONCE_PREFIX_SIZE;
const POOL = 4096;
/** Fields per random nonce prefix in randomized mode (src/crypto/token.ts). */
/** Prefixes derived together, as the codec's pool does. */
const PREFIX_BATCH = 64;

const targets = { encrypt: 0.7, decrypt: 0.7 } as const;

interface OpenInput {
  nonce: Buffer;
  sealed: Buffer;
  aad: Buffer;
}

/** Rebuilds the nonce, sealed bytes and AAD of a token the way the codec reads them (DESIGN §5). */
function splitForBaseline(token: string, keyringId: Buffer): OpenInput {
  const [magic, kv, metaText, ctText, end] = token.split(':');
  if (magic !== 'svc' || kv === undefined || metaText === undefined || ctText === undefined || end !== '$') throw new Error('not a token');
  const meta = Buffer.from(metaText, 'base64url');
  const aad = Buffer.concat([Buffer.from('svc:', 'latin1'), keyringId, Buffer.from(`${kv}:`, 'latin1'), meta]);
  return { nonce: meta.subarray(meta.length - NONCE_SIZE), sealed: Buffer.from(ctText, 'base64url'), aad };
}

export async function runCryptoBench(opts: MicroOptions): Promise<SuiteResult> {
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const keyring = new Keyring(Keyring.generateId(), [{ version: 1, key: Keyring.generateKey() }]);
  const codec = new TokenCodec(keyring, { deterministic: false });
  // The baseline uses the same key schedule object: KeyObjects built once, as the codec's are.
  const xaes: XaesKey = keyring.forEncrypt().xaes;

  const plaintexts: Buffer[] = [];
  for (let i = 0; i < PLAINTEXTS; i++) plaintexts.push(randomFillSync(Buffer.alloc(PLAINTEXT_SIZE)));

  // Tokens of DECRYPT_REQUESTS five-field requests, and the same ciphertexts for the baseline.
  const tokens: string[] = [];
  const expected: Buffer[] = [];
  for (let r = 0; r < DECRYPT_REQUESTS; r++) {
    // A codec per request: stored tokens come from many processes and key versions, so each
    // request's five share a prefix with each other and with no other request (one live
    // codec would give one prefix per 4,096 fields and make every decrypt a cache hit).
    const enc = new TokenCodec(keyring, { deterministic: false }).encryptor(0);
    for (let f = 0; f < FIELDS_PER_REQUEST; f++) {
      const pt = plaintexts[(r * FIELDS_PER_REQUEST + f) % PLAINTEXTS]!;
      tokens.push(enc.encrypt(pt, 's'));
      expected.push(pt);
    }
  }
  const opens = tokens.map((t) => splitForBaseline(t, keyring.id));
  for (let r = 0; r < DECRYPT_REQUESTS; r++) {
    const first = opens[r * FIELDS_PER_REQUEST]!.nonce.subarray(0, PREFIX);
    for (let f = 1; f < FIELDS_PER_REQUEST; f++) {
      if (!opens[r * FIELDS_PER_REQUEST + f]!.nonce.subarray(0, PREFIX).equals(first)) throw new Error('a request’s tokens do not share a nonce prefix');
    }
  }
  // Both decrypt paths must return the plaintexts (a wrong key or AAD would throw or differ).
  for (let i = 0; i < tokens.length; i += 97) {
    const viaCodec = codec.decrypt(tokens[i]!);
    const o = opens[i]!;
    const viaBare = xaesOpenWithSubkey(xaes.deriveSubkey(o.nonce), o.nonce, o.sealed, o.aad);
    if (!viaCodec.plaintext.equals(expected[i]!) || !viaBare.equals(expected[i]!) || viaCodec.type !== 's') throw new Error('decrypt check failed');
  }

  // Encrypt candidate.
  let encCursor = 0;
  let encryptor: FieldEncryptor = codec.encryptor(0);
  const encryptCandidate = (): void => {
    let n = 0;
    for (let i = 0; i < BATCH_FIELDS; i++) {
      if (i % FIELDS_PER_REQUEST === 0) encryptor = codec.encryptor(0);
      n += encryptor.encrypt(plaintexts[encCursor]!, 's').length;
      encCursor = (encCursor + 1) % PLAINTEXTS;
    }
    sink.value += n;
  };

  // Encrypt baseline: randomFillSync per nonce part into one preallocated buffer.
  const nonce = Buffer.alloc(NONCE_SIZE);
  const aad = randomFillSync(Buffer.alloc(AAD_SIZE));
  let bareCursor = 0;
  // A prefix and subkey per request, from batches derived in one call each, as the codec does.
  const batchPrefixes = Buffer.alloc(PREFIX_BATCH * PREFIX);
  let batchSubkeys: KeyObject[] = [];
  let batchNext = PREFIX_BATCH;
  const nextPrefix = (fill: (buf: Buffer) => void): KeyObject => {
    if (batchNext === PREFIX_BATCH) {
      fill(batchPrefixes);
      batchSubkeys = xaes.deriveSubkeys(batchPrefixes, PREFIX_BATCH);
      batchNext = 0;
    }
    batchPrefixes.copy(nonce, 0, batchNext * PREFIX, (batchNext + 1) * PREFIX);
    return batchSubkeys[batchNext++]!;
  };
  let bareSubkey = nextPrefix((buf) => randomFillSync(buf));
  let bareUses = 0;
  const encryptBaseline = (): void => {
    let n = 0;
    for (let i = 0; i < BATCH_FIELDS; i++) {
      if (bareUses++ === FIELDS_PER_REQUEST) {
        bareSubkey = nextPrefix((buf) => randomFillSync(buf));
        bareUses = 1;
      }
      const subkey = bareSubkey;
      randomFillSync(nonce, PREFIX, NONCE_SIZE - PREFIX);
      n += xaesSealWithSubkey(subkey, nonce, plaintexts[bareCursor]!, aad).length;
      bareCursor = (bareCursor + 1) % PLAINTEXTS;
    }
    sink.value += n;
  };

  // Extra: the same bare loop with nonces copied out of a pooled buffer refilled every 4 KiB.
  const pool = Buffer.alloc(POOL);
  let poolOffset = POOL;
  const pooled = (offset: number, length: number): void => {
    if (poolOffset + length > POOL) {
      randomFillSync(pool);
      poolOffset = 0;
    }
    pool.copy(nonce, offset, poolOffset, poolOffset + length);
    poolOffset += length;
  };
  let pooledCursor = 0;
  let pooledSubkey: KeyObject | null = null;
  let pooledUses = 0;
  const encryptBaselinePooled = (): void => {
    let n = 0;
    for (let i = 0; i < BATCH_FIELDS; i++) {
      if (pooledSubkey === null || pooledUses++ === FIELDS_PER_REQUEST) {
        pooledSubkey = nextPrefix((buf) => {
          for (let at = 0; at < buf.length; at += PREFIX) {
            pooled(0, PREFIX);
            nonce.copy(buf, at, 0, PREFIX);
          }
        });
        pooledUses = 1;
      }
      const subkey = pooledSubkey;
      pooled(PREFIX, NONCE_SIZE - PREFIX);
      n += xaesSealWithSubkey(subkey, nonce, plaintexts[pooledCursor]!, aad).length;
      pooledCursor = (pooledCursor + 1) % PLAINTEXTS;
    }
    sink.value += n;
  };

  // Decrypt candidate: BATCH_FIELDS is a multiple of 5, so every batch starts at a request boundary.
  let decCursor = 0;
  const decryptCandidate = (): void => {
    let n = 0;
    for (let i = 0; i < BATCH_FIELDS; i++) {
      n += codec.decrypt(tokens[decCursor]!).plaintext.length;
      decCursor = (decCursor + 1) % tokens.length;
    }
    sink.value += n;
  };

  let openCursor = 0;
  const decryptBaseline = (): void => {
    let n = 0;
    for (let r = 0; r < BATCH_FIELDS / FIELDS_PER_REQUEST; r++) {
      const subkey = xaes.deriveSubkey(opens[openCursor]!.nonce);
      for (let f = 0; f < FIELDS_PER_REQUEST; f++) {
        const o = opens[openCursor + f]!;
        n += xaesOpenWithSubkey(subkey, o.nonce, o.sealed, o.aad).length;
      }
      openCursor = (openCursor + FIELDS_PER_REQUEST) % opens.length;
    }
    sink.value += n;
  };

  const variant = (id: string, group: string, label: string, role: Variant['role'], op: () => void): Variant => ({
    id,
    group,
    label,
    role,
    unit: 'ops/s',
    workPerOp: BATCH_FIELDS,
    op,
  });
  const encryptVariants: Variant[] = [
    variant('encrypt baseline', 'encrypt', 'bare XAES loop, randomFillSync per nonce', 'baseline', encryptBaseline),
    variant('encrypt candidate', 'encrypt', 'codec.encryptor(0).encrypt(pt, "s")', 'candidate', encryptCandidate),
    variant('encrypt baseline pooled', 'encrypt', 'bare XAES loop, pooled random (stricter)', 'extra', encryptBaselinePooled),
  ];
  const decryptVariants: Variant[] = [
    variant('decrypt baseline', 'decrypt', 'bare XAES open, 1 derivation / 5 fields', 'baseline', decryptBaseline),
    variant('decrypt candidate', 'decrypt', 'codec.decrypt(token)', 'candidate', decryptCandidate),
  ];
  const comparisons: Comparison[] = [
    { candidate: 'encrypt candidate', baseline: 'encrypt baseline', target: targets.encrypt },
    { candidate: 'decrypt candidate', baseline: 'decrypt baseline', target: targets.decrypt },
  ];
  // For the record: the candidate against a baseline that also pools its random bytes.
  const strict: Comparison = { candidate: 'encrypt candidate', baseline: 'encrypt baseline pooled', target: null };

  const rounds = opts.rounds ?? (opts.quick ? 3 : 15);
  const o: SampleOptions = opts.quick ? { rounds, sampleMs: 100, minOps: 1, warmupMs: 200 } : { rounds, sampleMs: 300, minOps: 1, warmupMs: 600 };
  opts.log(`crypto: ${PLAINTEXT_SIZE}-byte plaintexts, ${FIELDS_PER_REQUEST} fields per request, ${DECRYPT_REQUESTS * FIELDS_PER_REQUEST} tokens to decrypt`);
  const encrypt = await sampleGroup(encryptVariants, o, (m) => opts.log(`  encrypt ${m}`));
  const decrypt = await sampleGroup(decryptVariants, o, (m) => opts.log(`  decrypt ${m}`));
  const variants = [...encrypt, ...decrypt];

  // After timing, so the instrumentation cannot disturb the JIT: the decrypt candidate
  // really derives once per request (the cache does not hold all 4,096 prefixes).
  const derivations = countDerivations(() => {
    for (let i = 0; i < tokens.length; i++) codec.decrypt(tokens[(decCursor + i) % tokens.length]!);
  });
  if (derivations !== DECRYPT_REQUESTS) throw new Error(`decrypt candidate derived ${derivations} subkeys for ${DECRYPT_REQUESTS} requests`);

  const compared = compare(variants, [...comparisons, strict]);
  return {
    suite: 'crypto',
    description: `per-field ops/s, ${PLAINTEXT_SIZE}-byte plaintexts, ${FIELDS_PER_REQUEST} fields per request`,
    startedAt,
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    options: { encrypt: o, decrypt: o },
    inputs: {
      plaintextBytes: PLAINTEXT_SIZE,
      fieldsPerRequest: FIELDS_PER_REQUEST,
      fieldsPerTimedCall: BATCH_FIELDS,
      decryptTokens: tokens.length,
      tokenLength: tokens[0]!.length,
      aadBytes: AAD_SIZE,
      decryptDerivationsPerPass: derivations,
    },
    variants,
    comparisons: compared,
  };
}

function countDerivations(run: () => void): number {
  const proto = XaesKey.prototype;
  const original = proto.deriveSubkey;
  let calls = 0;
  proto.deriveSubkey = function (this: XaesKey, prefix: Buffer) {
    calls++;
    return original.call(this, prefix);
  };
  try {
    run();
  } finally {
    proto.deriveSubkey = original;
  }
  return calls;
}

if (import.meta.main) {
  const { formatSuite } = await import('../lib/report.ts');
  const result = await runCryptoBench({ quick: process.argv.includes('--quick'), log: (m) => console.error(m) });
  console.log(formatSuite(result));
}
