/**
 * Transformer throughput (MB/s of request body) against the naive approach.
 *
 * Candidate: what the encrypt endpoint does with a body, minus HTTP — a JsonTransformer
 * with the real EncryptHandler over a real TokenCodec, fed 64 KiB chunks the way a socket
 * delivers them, then the pieces joined into one response buffer (transformBody). Also
 * fed the whole body at once (transformBuffer).
 *
 * Baseline: `JSON.parse(buf.toString())`, the same 5 values replaced by fixed strings of
 * the real tokens' lengths, `Buffer.from(JSON.stringify(obj))`. It does no cryptography,
 * so the ratio charges the candidate for its five encryptions too.
 *
 * Extra rows (no target): the transformer alone with a no-op handler, parse + stringify
 * alone, and the decrypt direction against its own naive baseline.
 */
import { FOR_THE_POD } from '../../src/auth/classification-access.ts';
import { DecryptHandler, EncryptHandler, KeyInUse } from '../../src/dataplane/field-handlers.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { Keyring } from '../../src/crypto/keyring.ts';
import { TokenCodec } from '../../src/crypto/token.ts';
import { compileFieldPaths, type FieldMatcher } from '../../src/fields/paths.ts';
import { JsonTransformer, transformBuffer, type FieldValue, type ValueHandler } from '../../src/fields/transformer.ts';
import { compare, sampleGroup, sink, type Comparison, type SampleOptions, type Variant, type VariantResult } from '../lib/measure.ts';
import { chunk, generateDocument } from '../lib/records.ts';
import type { SuiteResult } from '../lib/report.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

export const FIELD_PATHS = 'customer.ssn, customer.card.number, customer.card.cvc, customer.email, customer.address';
const FIELD_COUNT = 5;
const CHUNK_SIZE = 64 * 1024;

const SIZES: readonly { label: string; bytes: number; target: number | null }[] = [
  { label: '1 KB', bytes: 1024, target: null },
  { label: '100 KB', bytes: 100 * 1024, target: 1.0 },
  { label: '10 MB', bytes: 10 * 1024 * 1024, target: 1.0 },
];

export interface MicroOptions {
  readonly quick: boolean;
  readonly rounds?: number;
  readonly log: (message: string) => void;
}

/** The five values the paths name, as the naive code reaches them. */
interface Doc {
  customer: { ssn: unknown; email: unknown; address: unknown; card: { number: unknown; cvc: unknown } };
}

function getFive(doc: Doc): unknown[] {
  const c = doc.customer;
  return [c.ssn, c.card.number, c.card.cvc, c.email, c.address];
}

function setFive(doc: Doc, values: readonly unknown[]): void {
  const c = doc.customer;
  c.ssn = values[0];
  c.card.number = values[1];
  c.card.cvc = values[2];
  c.email = values[3];
  c.address = values[4];
}

class NoopHandler implements ValueHandler {
  count = 0;

  replace(_value: FieldValue): Buffer | null {
    this.count++;
    return null;
  }
}

function expectCount(what: string, count: number): void {
  if (count !== FIELD_COUNT) throw new Error(`${what}: the field paths matched ${count} values, expected exactly ${FIELD_COUNT}`);
}

function join(out: Buffer[]): Buffer {
  return out.length === 1 ? out[0]! : Buffer.concat(out);
}

/**
 * The endpoint's check that the key version still exists when the body is done
 * (KeyInUse), against a real in-memory store holding version 1 of a configuration.
 */
let keyStore: { store: Store; configurationId: string } | undefined;

function keyInUse(codec: TokenCodec): KeyInUse {
  if (keyStore === undefined) {
    const store = openStore(':memory:');
    const configuration = syncRepositories(store).configurations.create({ name: 'bench', type: 'encryption', keyringId: codec.keyring.id, firstWrappedKey: Buffer.alloc(60) });
    keyStore = { store, configurationId: configuration.id };
  }
  return new KeyInUse(keyStore.store, keyStore.configurationId, codec);
}

// The candidates, written as the endpoint writes them (encryption-routes.ts transformBody).

function encryptChunked(chunks: readonly Buffer[], matcher: FieldMatcher, codec: TokenCodec): Buffer {
  const handler = new EncryptHandler(codec.encryptor(0), keyInUse(codec));
  const transformer = new JsonTransformer(matcher, handler);
  const out: Buffer[] = [];
  for (const c of chunks) transformer.push(c, out);
  transformer.end(out);
  if (handler.failure() !== null) throw handler.failure();
  expectCount('encrypt', handler.count);
  return join(out);
}

function encryptWhole(body: Buffer, matcher: FieldMatcher, codec: TokenCodec): Buffer {
  const handler = new EncryptHandler(codec.encryptor(0), keyInUse(codec));
  const result = transformBuffer(body, matcher, handler);
  if (handler.failure() !== null) throw handler.failure();
  expectCount('encrypt', handler.count);
  return result;
}

function transformOnly(chunks: readonly Buffer[], matcher: FieldMatcher): Buffer {
  const handler = new NoopHandler();
  const transformer = new JsonTransformer(matcher, handler);
  const out: Buffer[] = [];
  for (const c of chunks) transformer.push(c, out);
  transformer.end(out);
  expectCount('no-op', handler.count);
  return join(out);
}

function decryptChunked(chunks: readonly Buffer[], matcher: FieldMatcher, codec: TokenCodec): Buffer {
  const handler = new DecryptHandler(codec, FOR_THE_POD, null);
  const transformer = new JsonTransformer(matcher, handler);
  const out: Buffer[] = [];
  for (const c of chunks) transformer.push(c, out);
  transformer.end(out);
  if (handler.failure() !== null) throw handler.failure();
  expectCount('decrypt', handler.count);
  return join(out);
}

// The naive baselines.

function naiveReplace(body: Buffer, values: readonly unknown[]): Buffer {
  const doc = JSON.parse(body.toString()) as Doc;
  setFive(doc, values);
  return Buffer.from(JSON.stringify(doc));
}

function parseStringify(body: Buffer): Buffer {
  return Buffer.from(JSON.stringify(JSON.parse(body.toString())));
}

/**
 * Builds one size's cases and checks, before anything is timed, that every case does
 * the work it claims: the candidate replaces exactly the five values, the baseline's
 * output is byte-for-byte the candidate's (tokens aside), and decryption restores the
 * original body exactly.
 */
function buildGroup(size: (typeof SIZES)[number], matcher: FieldMatcher, codec: TokenCodec) {
  const doc = generateDocument(size.bytes);
  const body = doc.bytes;
  const chunks = chunk(body, CHUNK_SIZE);
  const original = getFive(JSON.parse(body.toString()) as Doc);

  const encrypted = encryptChunked(chunks, matcher, codec);
  const tokens = getFive(JSON.parse(encrypted.toString()) as Doc);
  for (const t of tokens) {
    if (typeof t !== 'string' || !t.startsWith('svc:1:') || !t.endsWith(':$')) throw new Error(`encrypt did not produce a token: ${String(t)}`);
  }
  // The baseline writes the candidate's own tokens: same output bytes, no crypto.
  if (!naiveReplace(body, tokens).equals(encrypted)) throw new Error(`${size.label}: naive output differs from the transformer's`);
  const whole = encryptWhole(body, matcher, codec);
  if (whole.length !== encrypted.length) throw new Error(`${size.label}: whole-buffer output has a different length`);
  if (!transformOnly(chunks, matcher).equals(body)) throw new Error(`${size.label}: no-op transform changed the body`);

  const encryptedChunks = chunk(encrypted, CHUNK_SIZE);
  if (!decryptChunked(encryptedChunks, matcher, codec).equals(body)) throw new Error(`${size.label}: decrypt did not restore the body`);
  if (!decryptChunked(chunk(whole, CHUNK_SIZE), matcher, codec).equals(body)) throw new Error(`${size.label}: decrypt of the whole-buffer output did not restore the body`);
  if (!naiveReplace(encrypted, original).equals(body)) throw new Error(`${size.label}: naive decrypt output differs from the body`);

  const mb = body.length / 1e6;
  const encMb = encrypted.length / 1e6;
  const g = size.label;
  const id = (label: string) => `${g} / ${label}`;
  const variants: Variant[] = [
    {
      id: id('naive encrypt'),
      group: g,
      label: 'naive: parse → set 5 → stringify',
      role: 'baseline',
      unit: 'MB/s',
      workPerOp: mb,
      op: () => {
        sink.value += naiveReplace(body, tokens).length;
      },
    },
    {
      id: id('encrypt chunked'),
      group: g,
      label: 'transformer + EncryptHandler, 64 KiB chunks',
      role: 'candidate',
      unit: 'MB/s',
      workPerOp: mb,
      op: () => {
        sink.value += encryptChunked(chunks, matcher, codec).length;
      },
    },
    {
      id: id('encrypt whole'),
      group: g,
      label: 'transformer + EncryptHandler, whole buffer',
      role: 'candidate',
      unit: 'MB/s',
      workPerOp: mb,
      op: () => {
        sink.value += encryptWhole(body, matcher, codec).length;
      },
    },
    {
      id: id('transform only'),
      group: g,
      label: 'transformer alone (no-op handler), 64 KiB chunks',
      role: 'extra',
      unit: 'MB/s',
      workPerOp: mb,
      op: () => {
        sink.value += transformOnly(chunks, matcher).length;
      },
    },
    {
      id: id('parse+stringify'),
      group: g,
      label: 'JSON.parse + JSON.stringify alone',
      role: 'extra',
      unit: 'MB/s',
      workPerOp: mb,
      op: () => {
        sink.value += parseStringify(body).length;
      },
    },
    {
      id: id('naive decrypt'),
      group: g,
      label: 'naive: parse tokens doc → set 5 → stringify',
      role: 'baseline',
      unit: 'MB/s',
      workPerOp: encMb,
      op: () => {
        sink.value += naiveReplace(encrypted, original).length;
      },
    },
    {
      id: id('decrypt chunked'),
      group: g,
      label: 'transformer + DecryptHandler, 64 KiB chunks',
      role: 'extra',
      unit: 'MB/s',
      workPerOp: encMb,
      op: () => {
        sink.value += decryptChunked(encryptedChunks, matcher, codec).length;
      },
    },
  ];
  const comparisons: Comparison[] = [
    { candidate: id('encrypt chunked'), baseline: id('naive encrypt'), target: size.target },
    { candidate: id('encrypt whole'), baseline: id('naive encrypt'), target: size.target },
    { candidate: id('transform only'), baseline: id('parse+stringify'), target: null },
    { candidate: id('decrypt chunked'), baseline: id('naive decrypt'), target: null },
  ];
  const input = { bytes: body.length, encryptedBytes: encrypted.length, records: doc.records, chunks: chunks.length, chunkSize: CHUNK_SIZE };
  return { variants, comparisons, input };
}

function optionsFor(size: (typeof SIZES)[number], opts: MicroOptions): SampleOptions {
  const big = size.bytes >= 1024 * 1024;
  const rounds = opts.rounds ?? (opts.quick ? 3 : big ? 7 : 9);
  if (opts.quick) return { rounds, sampleMs: big ? 150 : 80, minOps: 1, warmupMs: big ? 300 : 300 };
  return { rounds, sampleMs: big ? 700 : 300, minOps: big ? 3 : 1, warmupMs: big ? 1400 : 600 };
}

export async function runTransformerBench(opts: MicroOptions): Promise<SuiteResult> {
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const matcher = compileFieldPaths(FIELD_PATHS);
  if (matcher === null) throw new Error('no field paths');
  const codec = new TokenCodec(new Keyring(Keyring.generateId(), [{ version: 1, key: Keyring.generateKey() }]), { deterministic: false });

  const variants: VariantResult[] = [];
  const comparisons: Comparison[] = [];
  const options: Record<string, SampleOptions> = {};
  const inputs: Record<string, unknown> = { fieldPaths: FIELD_PATHS };
  for (const size of SIZES) {
    const group = buildGroup(size, matcher, codec);
    const o = optionsFor(size, opts);
    options[size.label] = o;
    inputs[size.label] = group.input;
    opts.log(`transformer ${size.label}: ${group.input.bytes} bytes, ${group.input.records} records, ${group.input.chunks} chunks`);
    variants.push(...(await sampleGroup(group.variants, o, (m) => opts.log(`  ${size.label} ${m}`))));
    comparisons.push(...group.comparisons);
  }
  return {
    suite: 'transformer',
    description: `body throughput, ${FIELD_COUNT} fields replaced (${FIELD_PATHS}); MB = 10^6 bytes of request body`,
    startedAt,
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    options,
    inputs,
    variants,
    comparisons: compare(variants, comparisons),
  };
}

if (import.meta.main) {
  const { formatSuite } = await import('../lib/report.ts');
  const result = await runTransformerBench({ quick: process.argv.includes('--quick'), log: (m) => console.error(m) });
  console.log(formatSuite(result));
}
