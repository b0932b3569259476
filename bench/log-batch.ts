/**
 * What the log writer's batches cost the process that writes them: `logs.insertBatch` of
 * one api row and one usage row per request, as the `inline` writer sends them, on a
 * SQLite file store (timed on this thread, the writer's cost per request) and on
 * PostgreSQL (the time until the batch is stored, from a throwaway server of the tests'
 * harness; skipped when the binaries are absent).
 *
 *   node bench/log-batch.ts [--base <checkout>] [--batches 200] [--rounds 3] [--label name]
 *
 * With `--base`, the same batches go through another checkout's store code too (a
 * directory holding `src/store/db.ts`), interleaved round by round, so the two compare
 * on one state of the machine. Each (checkout, store, batch size) gets a fresh database.
 * Batch sizes are 500 requests (`logs.batch_size`, what a full load sends) and 50 (what
 * arrives in one `logs.flush_interval` of 50 ms at 1,000 requests a second). Writes
 * bench/results/log-batch[-<label>].json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Store } from '../src/store/db.ts';
import type { LogBatch } from '../src/store/logs.ts';
import { postgresUnavailable, startPostgres, type Postgres } from '../test/support/postgres.ts';
import { median } from './lib/measure.ts';
import { machineInfo, positiveOption, resultLabel } from './lib/report.ts';

const { values } = parseArgs({
  options: {
    base: { type: 'string' },
    batches: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '3' },
    label: { type: 'string' },
  },
  strict: true,
});
const batches = positiveOption('batches', values.batches);
const rounds = positiveOption('rounds', values.rounds);
if (values.label !== undefined) resultLabel(values.label);

const HERE = new URL('..', import.meta.url).pathname;
const checkouts = [{ name: 'this', root: resolve(HERE) }, ...(values.base === undefined ? [] : [{ name: 'base', root: resolve(values.base) }])];
const SIZES = [500, 50] as const;
const log = (m: string): void => void process.stderr.write(`${m}\n`);

/** `size` requests' rows, numbered on from `first`, stamped now. */
function batchOf(size: number, first: number): LogBatch {
  const createdAt = new Date().toISOString();
  const api = [];
  const usage = [];
  for (let i = first; i < first + size; i++) {
    const requestId = `01JBENCH${i.toString(36).padStart(18, '0')}`;
    const common = { requestId, apiKeyId: 'key_0123456789abcdef', userId: 1, configurationId: 'cfg_0123456789ab', createdAt };
    api.push({ ...common, method: 'POST', path: '/proxy/bench', statusCode: 200, destination: 'http://127.0.0.1:4000/', durationMs: 1.234, ip: '127.0.0.1' });
    usage.push({ ...common, mode: 'encrypt' as const, fieldCount: 5, bytes: 220 });
  }
  return { activity: [], api, usage };
}

interface Sample {
  /** Mean over the batches: what the writer spends in all, checkpoints included. */
  meanMicrosPerRequest: number;
  medianMicrosPerRequest: number;
}

/**
 * `batches` batches of `size` into `store`, each timed on its own; `wait` as the writer
 * asks (the inline writer on SQLite does not wait for a lock, the remote one does).
 */
async function sample(store: Store, size: number, wait: boolean): Promise<Sample> {
  const perRequest: number[] = [];
  for (let b = 0; b < batches; b++) {
    const batch = batchOf(size, b * size);
    const started = process.hrtime.bigint();
    await store.logs.insertBatch(batch, { wait });
    perRequest.push(Number(process.hrtime.bigint() - started) / 1000 / size);
  }
  const mean = perRequest.reduce((a, b) => a + b, 0) / perRequest.length;
  return { meanMicrosPerRequest: Number(mean.toFixed(3)), medianMicrosPerRequest: Number(median(perRequest).toFixed(3)) };
}

type Opener = (root: string, name: string) => Promise<{ store: Store; done: () => Promise<void> }>;

const sqlite: Opener = async (root) => {
  const { openStore } = (await import(join(root, 'src/store/db.ts'))) as typeof import('../src/store/db.ts');
  const dir = mkdtempSync(join(tmpdir(), 'svc-log-batch-'));
  const store = openStore(join(dir, 'svc.db'));
  return {
    store,
    done: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
};

function postgres(server: Postgres): Opener {
  let n = 0;
  return async (root, name) => {
    const { openPostgresStore } = (await import(join(root, 'src/store/postgres/open.ts'))) as typeof import('../src/store/postgres/open.ts');
    const url = await server.createDatabase(`log_batch_${name}_${n++}`);
    const store = await openPostgresStore(url, { max: 2 });
    return { store, done: async () => store.close() };
  };
}

async function main(): Promise<void> {
  const machine = machineInfo();
  log(`node ${machine.node}, load ${machine.loadAverageAtStart.join(' ')}`);
  const unavailable = postgresUnavailable();
  const server = unavailable === null ? await startPostgres() : null;
  if (server === null) log(`PostgreSQL skipped: ${unavailable}`);
  try {
    const stores: [string, Opener][] = [['sqlite-file', sqlite], ...(server === null ? [] : [['postgres', postgres(server)] as [string, Opener]])];
    const samples = new Map<string, Sample[]>();
    for (let round = 0; round < rounds; round++) {
      // Alternate which checkout goes first, so drift hits both alike.
      const order = round % 2 === 0 ? checkouts : [...checkouts].reverse();
      for (const [storeName, open] of stores) {
        for (const size of SIZES) {
          for (const checkout of order) {
            const { store, done } = await open(checkout.root, checkout.name);
            try {
              const s = await sample(store, size, storeName === 'postgres');
              const key = `${checkout.name} ${storeName} ${size}`;
              samples.set(key, [...(samples.get(key) ?? []), s]);
              log(`round ${round}: ${key}: mean ${s.meanMicrosPerRequest} µs per request, median ${s.medianMicrosPerRequest}`);
            } finally {
              await done();
            }
          }
        }
      }
    }
    const results = [...samples].map(([key, list]) => {
      const [checkout, store, size] = key.split(' ') as [string, string, string];
      return {
        checkout,
        root: checkouts.find((c) => c.name === checkout)!.root,
        store,
        requestsPerBatch: Number(size),
        meanMicrosPerRequest: median(list.map((s) => s.meanMicrosPerRequest)),
        medianMicrosPerRequest: median(list.map((s) => s.medianMicrosPerRequest)),
        rounds: list,
      };
    });
    const dir = new URL('results/', import.meta.url).pathname;
    mkdirSync(dir, { recursive: true });
    const file = join(dir, values.label === undefined ? 'log-batch.json' : `log-batch-${values.label}.json`);
    const report = { benchmark: 'log-batch', command: `node bench/log-batch.ts ${process.argv.slice(2).join(' ')}`.trim(), batches, machine: { ...machine, loadAverageAtEnd: machineInfo().loadAverageAtStart }, results };
    writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
    log('\nmedians of rounds, µs per request (mean over batches / median batch):');
    for (const r of results) log(`  ${r.checkout.padEnd(4)} ${r.store.padEnd(11)} ${String(r.requestsPerBatch).padStart(3)} a batch: ${r.meanMicrosPerRequest} / ${r.medianMicrosPerRequest}`);
    log(`written to ${file}`);
  } finally {
    await server?.stop();
  }
}

await main();
