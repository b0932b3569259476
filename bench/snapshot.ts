/**
 * Control-plane snapshots at scale (issue 5, "Must show"): 10,000 classifications and
 * 1,000 encryption configurations, plus 200 users and 200 API keys.
 *
 *   node bench/snapshot.ts [--quick]
 *
 * Everything runs in this process on temp-file stores (WAL, as in production), so the
 * figures are the store and CPU work alone, without HTTP. Each step runs `rounds` times
 * (after one warm-up) and reports the median:
 *   - build:   the control plane reads the state, digests it, serialises and gzips it
 *              (what the first poll after a change costs it);
 *   - poll after a log write: a row written to api_logs through the same connection
 *              (a shipped batch): no state table changed, the last snapshot is served;
 *   - re-read after a foreign commit: another connection committed (the log writer's
 *              thread, a CLI), so the state is read and digested again (at most every
 *              2 s in the service; every time here): same content, no new version or gzip;
 *   - verify:  a replica parses the body, checks its shape, its MAC and its digests;
 *   - apply:   full (a new replica, every section), one classification renamed
 *              (the classifications section), one API key revoked (api keys only);
 *   - restart: a replica's start from its persisted copy (gunzip, verify, full apply).
 * Prints a table and writes bench/results/snapshot.json (snapshot-quick.json for --quick).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { wrapDataKey } from '../src/crypto/data-keys.ts';
import { Keyring } from '../src/crypto/keyring.ts';
import { MasterKey } from '../src/crypto/master-key.ts';
import { openStore, type Store } from '../src/store/db.ts';
import { applySnapshot, verifySnapshot } from '../src/sync/snapshot.ts';
import { SnapshotMac } from '../src/sync/snapshot-mac.ts';
import { SnapshotPublisher } from '../src/sync/snapshot-publisher.ts';
import { machineInfo } from './lib/report.ts';

const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } } });
const quick = values.quick === true;
const CLASSIFICATIONS = quick ? 1_000 : 10_000;
const CONFIGURATIONS = quick ? 100 : 1_000;
const USERS = 200;
const API_KEYS = 200;
const ROUNDS = quick ? 3 : 7;

const dir = mkdtempSync(join(tmpdir(), 'svc-bench-snapshot-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
const master = new MasterKey(randomBytes(32));
const mac = new SnapshotMac(master);

async function populate(store: Store): Promise<void> {
  await store.transaction(async (tx) => {
    const roleIds = (await store.roles.list()).map((r) => r.id);
    const userIds: number[] = [];
    for (let i = 0; i < USERS; i++) {
      userIds.push((await tx.users.create({ name: `User ${i}`, email: `user${i}@example.com`, passwordHash: 'scrypt$16384$8$1$' + 'a'.repeat(86), roleIds: [roleIds[i % roleIds.length]!] })).id);
    }
    for (let i = 0; i < CONFIGURATIONS; i++) {
      const id = randomUUID();
      const key = Keyring.generateKey();
      await tx.configurations.create({
        id,
        name: `configuration ${i}`,
        type: 'encryption',
        proxySlug: `config-${i}`,
        keyringId: Keyring.generateId(),
        firstWrappedKey: wrapDataKey(master, id, 1, key),
        fields: ['card.number', 'ssn'],
        destinations: ['https://api.vendor.example/v1/'],
      });
    }
    for (let i = 0; i < CLASSIFICATIONS; i++) {
      await tx.classifications.create({
        name: `Classification ${i}`,
        description: `Data of kind ${i}, kept apart`,
        bgColor: '#aa0000',
        fgColor: '#ffffff',
        userIds: [userIds[i % USERS]!, userIds[(i * 7) % USERS]!],
        roleIds: [roleIds[i % roleIds.length]!],
      });
    }
    for (let i = 0; i < API_KEYS; i++) {
      const secret = randomBytes(32);
      await tx.apiKeys.create({ name: `key ${i}`, prefix: `svc_${i}`.padEnd(12, 'x'), keyHash: secret, userId: userIds[i % USERS]! });
    }
  });
}

function median(samples: readonly number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[sorted.length >> 1]!;
}

async function time(rounds: number, run: (round: number) => Promise<void> | void, before?: (round: number) => Promise<unknown> | void): Promise<number[]> {
  const samples: number[] = [];
  for (let round = -1; round < rounds; round++) {
    await before?.(round);
    const started = performance.now();
    await run(round);
    if (round >= 0) samples.push(performance.now() - started);
  }
  return samples;
}

const cp = openStore(join(dir, 'cp.db'));
const populateStarted = performance.now();
await populate(cp);
const populateMs = performance.now() - populateStarted;
const publisher = new SnapshotPublisher(cp, mac, { foreignRecheckMs: 0 });
const logRow = () => [{ requestId: randomBytes(8).toString('hex'), method: 'GET', path: '/x', statusCode: 200, durationMs: 1, ip: '', createdAt: new Date().toISOString() }];
const logWrite = () => cp.logs.insertApi(logRow());
// Another connection to the same file, as the log writer's thread has.
const other = openStore(cp.path);
const foreignWrite = () => other.logs.insertApi(logRow());

const results: Record<string, number[]> = {};
// Each round renames one classification first, so every build is of a new state.
let renamed = 0;
const renameOne = (store: Store) => store.classifications.update(1, { name: `Renamed ${++renamed}` });
results['build'] = await time(ROUNDS, () => publisher.current().then(() => undefined), () => renameOne(cp));
results['poll after a log write'] = await time(ROUNDS, () => publisher.current().then(() => undefined), () => logWrite());
results['re-read after a foreign commit'] = await time(ROUNDS, () => publisher.current().then(() => undefined), () => foreignWrite());
other.close();
const published = await publisher.current();

results['verify'] = await time(ROUNDS, () => {
  verifySnapshot(published.body, mac);
});
const snapshot = verifySnapshot(published.body, mac);

// A fresh replica store per round: the full apply of a first snapshot.
let replica: Store | null = null;
results['apply full'] = await time(
  ROUNDS,
  async () => {
    await applySnapshot(replica!, snapshot, published.gzipped);
  },
  (round) => {
    replica?.close();
    replica = openStore(join(dir, `replica-${round + 1}.db`));
  },
);
const target = replica as Store | null;
if (target === null) throw new Error('no replica store');

/** Changes the control plane, publishes, and applies the new snapshot to the replica, timing the apply only. */
async function applyAfter(change: (round: number) => Promise<unknown> | void): Promise<number[]> {
  const samples: number[] = [];
  for (let round = -1; round < ROUNDS; round++) {
    await change(round);
    const next = await publisher.current();
    const verified = verifySnapshot(next.body, mac);
    const started = performance.now();
    const outcome = await applySnapshot(target!, verified, next.gzipped);
    const elapsed = performance.now() - started;
    if (outcome.kind !== 'applied') throw new Error('the change was not applied');
    if (round >= 0) samples.push(elapsed);
  }
  return samples;
}

results['apply: 1 classification renamed'] = await applyAfter(() => renameOne(cp));
const keyIds = (await cp.apiKeys.list()).map((k) => k.id);
results['apply: 1 API key revoked'] = await applyAfter(async (round) => {
  await cp.apiKeys.revoke(keyIds[round + 1]!);
});

results['restart from the persisted copy'] = await time(ROUNDS, async () => {
  const row = (await target.replication.getSync('applied'))!;
  await applySnapshot(target, verifySnapshot(gunzipSync(row.body!), mac), row.body!, { force: true });
});

// The replica now matches the control plane.
if ((await target.classifications.findById(1))?.name !== (await cp.classifications.findById(1))?.name) throw new Error('replica and control plane differ');

const final = await publisher.current();
const figures = {
  classifications: CLASSIFICATIONS,
  configurations: CONFIGURATIONS,
  users: USERS,
  apiKeys: API_KEYS,
  snapshotBytes: final.body.length,
  gzipBytes: final.gzipped.length,
  populateMs: Math.round(populateMs),
  medianMs: Object.fromEntries(Object.entries(results).map(([name, samples]) => [name, Math.round(median(samples) * 10) / 10])),
};

console.log(`snapshot of ${CLASSIFICATIONS.toLocaleString('en-US')} classifications, ${CONFIGURATIONS.toLocaleString('en-US')} configurations, ${USERS} users, ${API_KEYS} API keys`);
console.log(`  body ${(figures.snapshotBytes / 2 ** 20).toFixed(2)} MiB (${figures.snapshotBytes.toLocaleString('en-US')} bytes), gzip ${(figures.gzipBytes / 2 ** 20).toFixed(2)} MiB (${figures.gzipBytes.toLocaleString('en-US')} bytes)`);
console.log(`  median of ${ROUNDS} rounds:`);
for (const [name, samples] of Object.entries(results)) {
  console.log(`    ${name.padEnd(36)} ${median(samples).toFixed(1).padStart(8)} ms   (min ${Math.min(...samples).toFixed(1)}, max ${Math.max(...samples).toFixed(1)})`);
}

mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
const out = new URL(`./results/${quick ? 'snapshot-quick' : 'snapshot'}.json`, import.meta.url);
writeFileSync(out, JSON.stringify({ machine: machineInfo(), rounds: ROUNDS, figures, samplesMs: results }, null, 2) + '\n');
console.log(`wrote ${out.pathname}`);
target.close();
cp.close();
