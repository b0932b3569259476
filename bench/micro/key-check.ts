/**
 * The destroy check a request that wrote tokens makes (KeyInUse, DESIGN §13) on a file
 * store in WAL mode, nothing else running: ops/s = checks per second.
 *
 * Baseline: the key's row read, as every check did before (a read transaction: a lock
 * taken and dropped on the `-shm` file).
 * Candidate: the check as it is (`keyAliveEntry(...).alive()`: the WAL-index header read
 * and compared with the one the row was last read alive at).
 * Informational: `PRAGMA data_version` (which opens a read transaction too) and the bare
 * 96-byte `pread` of the header.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/db.ts';
import { keyAliveCache, keyAliveEntry, sqliteConnection, syncRepositories } from '../../src/store/sqlite/connection.ts';
import { compare, sampleGroup, sink, type Comparison, type SampleOptions, type Variant } from '../lib/measure.ts';
import type { SuiteResult } from '../lib/report.ts';
import type { MicroOptions } from './transformer.ts';

export async function runKeyCheckBench(opts: MicroOptions): Promise<SuiteResult> {
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-key-check-'));
  const path = join(dir, 'svc.db');
  const store = openStore(path);
  const shm = openSync(`${path}-shm`, 'r');
  try {
    const configuration = await store.configurations.create({ name: 'payments', type: 'encryption', keyringId: randomBytes(16), firstWrappedKey: randomBytes(60) });
    const configurations = syncRepositories(store).configurations;
    const entry = keyAliveEntry(store, configuration.id, 1);
    const dataVersion = sqliteConnection(store).prepare('PRAGMA data_version');
    const header = Buffer.alloc(96);
    if (!entry.alive() || !configurations.keyAlive(configuration.id, 1)) throw new Error('the key version is not alive');

    const group = 'one key version, file store in WAL mode';
    const id = (label: string) => `${group} / ${label}`;
    const variants: Variant[] = [
      { id: id('row read'), group, label: 'the row read (a read transaction)', role: 'baseline', unit: 'ops/s', workPerOp: 1, op: () => void (sink.value += configurations.keyAlive(configuration.id, 1) ? 1 : 0) },
      { id: id('check'), group, label: 'the check (WAL-index header compared)', role: 'candidate', unit: 'ops/s', workPerOp: 1, op: () => void (sink.value += entry.alive() ? 1 : 0) },
      { id: id('data_version'), group, label: 'PRAGMA data_version', role: 'candidate', unit: 'ops/s', workPerOp: 1, op: () => void (sink.value += dataVersion.get() === undefined ? 0 : 1) },
      { id: id('pread'), group, label: '96-byte pread of -shm', role: 'candidate', unit: 'ops/s', workPerOp: 1, op: () => void (sink.value += readSync(shm, header, 0, 96, 0)) },
    ];
    const comparisons: Comparison[] = [
      { candidate: id('check'), baseline: id('row read'), target: null },
      { candidate: id('data_version'), baseline: id('row read'), target: null },
      { candidate: id('pread'), baseline: id('row read'), target: null },
    ];
    const options: SampleOptions = opts.quick
      ? { rounds: opts.rounds ?? 3, sampleMs: 200, minOps: 1, warmupMs: 300 }
      : { rounds: opts.rounds ?? 11, sampleMs: 500, minOps: 2, warmupMs: 800 };
    opts.log('key-check: row read, the check, data_version, pread');
    const results = await sampleGroup(variants, options, (m) => opts.log(`  key-check ${m}`));
    return {
      suite: 'key-check',
      description: 'the destroy check of a request that wrote tokens (KeyInUse), against the row read every check did before; ops/s = checks per second',
      startedAt,
      seconds: Math.round((performance.now() - t0) / 100) / 10,
      options: { [group]: options },
      inputs: { store: 'file, WAL', rowsReadByTheChecks: keyAliveCache(store).reads },
      variants: results,
      comparisons: compare(results, comparisons),
    };
  } finally {
    closeSync(shm);
    store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const { formatSuite } = await import('../lib/report.ts');
  const result = await runKeyCheckBench({ quick: process.argv.includes('--quick'), log: (m) => console.error(m) });
  console.log(formatSuite(result));
}
