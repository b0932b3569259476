/**
 * Decrypting with reveal rules (DESIGN §14) against decrypting without them: what the
 * decrypt endpoint does with a 1 KB body of five tokens, minus HTTP — a fresh
 * ClassificationAccess for the reader (as each request makes one), a DecryptHandler and a
 * JsonTransformer over a real in-memory store, the body pushed whole, the count checked.
 *
 * Baseline: a member reads a classification without reveal rules (plain, as before reveal
 * levels). Candidates: a reader named by a mask grant reads a classification with reveal
 * rules (four values masked with last4, the address object redacted), and a member reads
 * that classification (plain, through a rule that has grants). Target: ≥ 0.9× for both.
 */
import { ClassificationAccess, type Identity } from '../../src/auth/classification-access.ts';
import { Keyring } from '../../src/crypto/keyring.ts';
import { TokenCodec } from '../../src/crypto/token.ts';
import { DecryptHandler, EncryptHandler, KeyInUse } from '../../src/dataplane/field-handlers.ts';
import { compileFieldPaths, FieldMatcher } from '../../src/fields/paths.ts';
import { JsonTransformer, transformBuffer } from '../../src/fields/transformer.ts';
import { openStore, type Store } from '../../src/store/db.ts';
import { compare, sampleGroup, sink, type Comparison, type SampleOptions, type Variant, type VariantResult } from '../lib/measure.ts';
import { generateDocument } from '../lib/records.ts';
import type { SuiteResult } from '../lib/report.ts';
import { FIELD_PATHS, type MicroOptions } from './transformer.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const FIELD_COUNT = 5;
const BODY_BYTES = 1024;

interface World {
  readonly store: Store;
  readonly codec: TokenCodec;
  readonly member: Identity;
  readonly masked: Identity;
  /** The body encrypted under the classification without rules, and under the one with rules. */
  readonly plainBody: Buffer;
  readonly ruledBody: Buffer;
}

function setUp(): World {
  const store = openStore(':memory:');
  const codec = new TokenCodec(new Keyring(Keyring.generateId(), [{ version: 1, key: Keyring.generateKey() }]), { deterministic: false });
  const configuration = syncRepositories(store).configurations.create({ name: 'bench', type: 'encryption', keyringId: codec.keyring.id, firstWrappedKey: Buffer.alloc(60) });
  const developer = (syncRepositories(store).roles.findByName('developer'))!;
  const administrator = (syncRepositories(store).roles.findByName('administrator'))!;
  const ada = syncRepositories(store).users.create({ name: 'Ada', email: 'ada@example.com', roleIds: [(syncRepositories(store).roles.findByName('owner'))!.id] });
  const sue = syncRepositories(store).users.create({ name: 'Sue', email: 'sue@example.com', roleIds: [developer.id] });
  const vic = syncRepositories(store).users.create({ name: 'Vic', email: 'vic@example.com', roleIds: [developer.id] });
  const colors = { bgColor: '#000000', fgColor: '#ffffff' };
  const without = syncRepositories(store).classifications.create({ name: 'Without', ...colors, userIds: [ada.id] });
  const ruled = syncRepositories(store).classifications.create({
    name: 'Ruled',
    ...colors,
    userIds: [ada.id],
    reveal: [
      { to: { users: [vic.id], roles: [], groups: [] }, level: 'redact', mask: null },
      { to: { users: [], roles: [administrator.id], groups: ['g-billing'] }, level: 'plain', mask: null },
      { to: { users: [], roles: [developer.id], groups: [] }, level: 'mask', mask: 'last4' },
    ],
    revealDefault: { level: 'token', mask: null },
  });
  const matcher = compileFieldPaths(FIELD_PATHS)!;
  const body = generateDocument(BODY_BYTES).bytes;
  const encrypt = (classificationId: number) => {
    const handler = new EncryptHandler(codec.encryptor(classificationId), new KeyInUse(store, configuration.id, codec));
    const out = transformBuffer(body, matcher, handler);
    if (handler.count !== FIELD_COUNT) throw new Error(`encrypt matched ${handler.count} values`);
    return out;
  };
  return {
    store,
    codec,
    member: { userId: ada.id, roleIds: [(syncRepositories(store).roles.findByName('owner'))!.id], email: ada.email },
    masked: { userId: sue.id, roleIds: [developer.id], email: sue.email },
    plainBody: encrypt(without.id),
    ruledBody: encrypt(ruled.id),
  };
}

/** One request's decrypt, as the endpoint runs it: a reader's access, the handler, the transformer. */
function decrypt(world: World, who: Identity, body: Buffer): DecryptHandler {
  const handler = new DecryptHandler(world.codec, new ClassificationAccess(world.store, who), null);
  const transformer = new JsonTransformer(FieldMatcher.anyToken(), handler);
  const out: Buffer[] = [];
  transformer.push(body, out);
  transformer.end(out);
  const failure = handler.failure();
  if (failure !== null) throw failure;
  sink.value += out.length;
  return handler;
}

function check(world: World): void {
  const plain = decrypt(world, world.member, world.plainBody);
  if (plain.reveal.plain !== FIELD_COUNT) throw new Error(`the baseline showed ${JSON.stringify(plain.reveal)}`);
  const masked = decrypt(world, world.masked, world.ruledBody);
  if (masked.reveal.mask !== 4 || masked.reveal.redact !== 1) throw new Error(`the masked reader saw ${JSON.stringify(masked.reveal)}`);
  const member = decrypt(world, world.member, world.ruledBody);
  if (member.reveal.plain !== FIELD_COUNT) throw new Error(`the member of the ruled classification saw ${JSON.stringify(member.reveal)}`);
}

export async function runRevealBench(opts: MicroOptions): Promise<SuiteResult> {
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const world = setUp();
  check(world);
  const group = '1 KB, 5 tokens';
  const id = (label: string) => `${group} / ${label}`;
  const variants: Variant[] = [
    {
      id: id('without rules'),
      group,
      label: 'member, classification without reveal rules (plain)',
      role: 'baseline',
      unit: 'ops/s',
      workPerOp: 1,
      op: () => void decrypt(world, world.member, world.plainBody),
    },
    {
      id: id('masked'),
      group,
      label: 'reader named by a mask grant (4 masked, 1 redacted)',
      role: 'candidate',
      unit: 'ops/s',
      workPerOp: 1,
      op: () => void decrypt(world, world.masked, world.ruledBody),
    },
    {
      id: id('member with rules'),
      group,
      label: 'member, classification with reveal rules (plain)',
      role: 'candidate',
      unit: 'ops/s',
      workPerOp: 1,
      op: () => void decrypt(world, world.member, world.ruledBody),
    },
  ];
  const comparisons: Comparison[] = [
    { candidate: id('masked'), baseline: id('without rules'), target: 0.9 },
    { candidate: id('member with rules'), baseline: id('without rules'), target: 0.9 },
  ];
  const options: SampleOptions = opts.quick
    ? { rounds: opts.rounds ?? 3, sampleMs: 80, minOps: 1, warmupMs: 300 }
    : { rounds: opts.rounds ?? 15, sampleMs: 300, minOps: 1, warmupMs: 600 };
  opts.log(`reveal: ${world.plainBody.length} and ${world.ruledBody.length} bytes of tokens, ${FIELD_COUNT} fields`);
  const results: VariantResult[] = await sampleGroup(variants, options, (m) => opts.log(`  reveal ${m}`));
  return {
    suite: 'reveal',
    description: `decrypt requests per second (1 KB body, ${FIELD_COUNT} tokens: ${FIELD_PATHS}), with reveal rules against without`,
    startedAt,
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    options: { [group]: options },
    inputs: { bodyBytes: world.plainBody.length, fields: FIELD_PATHS },
    variants: results,
    comparisons: compare(results, comparisons),
  };
}

if (import.meta.main) {
  const { formatSuite } = await import('../lib/report.ts');
  const result = await runRevealBench({ quick: process.argv.includes('--quick'), log: (m) => console.error(m) });
  console.log(formatSuite(result));
}
