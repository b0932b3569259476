/**
 * The echo guard (src/dataplane/echo-guard.ts): how fast an egress answer is searched for
 * the values its request decrypted, and whether that depends on how many values there are.
 *
 * Body: 1 MiB of JSON text with escapes of every kind the guard decodes (`\u00e9`, `\/`,
 * `%40`, `&amp;`), holding none of the values, so each op searches it all. Baseline: one
 * `Buffer.includes` of one needle over the raw body — the cost of a single scan, of which
 * the guard used to run one per spelling per value. Candidates: the guard with 1 value and
 * with 1,000 values (the most it searches for). The 1,000-value row against the 1-value
 * row is the figure that matters: near 1× means the cost does not grow with the values.
 * No targets: informational rows.
 */
import { DecryptedPaths, MAX_VALUES } from '../../src/dataplane/echo-guard.ts';
import { compare, sampleGroup, sink, type Comparison, type SampleOptions, type Variant, type VariantResult } from '../lib/measure.ts';
import type { SuiteResult } from '../lib/report.ts';
import type { MicroOptions } from './transformer.ts';

const BODY_BYTES = 1024 * 1024;

function body(): Buffer {
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < BODY_BYTES; i++) {
    const part = `{"id":${i},"note":"Caf\\u00e9 \\/ r\\u00e9sum\\u00e9 ${(i * 2654435761 >>> 0).toString(36)}","url":"https:\\/\\/example.com\\/q?a=%40b&amp;c=${i}"},`;
    parts.push(part);
    size += part.length;
  }
  return Buffer.from(`[${parts.join('').slice(0, BODY_BYTES - 2)}]`, 'utf8');
}

function guard(count: number): DecryptedPaths {
  const paths = new DecryptedPaths();
  for (let i = 0; i < count; i++) {
    paths.set(`v${i}`, 0);
    paths.remember(Buffer.from(`secret-${String(i).padStart(4, '0')}-${(i * 7919).toString(36)}@example.com`, 'utf8'));
  }
  return paths;
}

export async function runEchoGuardBench(opts: MicroOptions): Promise<SuiteResult> {
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const haystack = body();
  const one = guard(1);
  const many = guard(MAX_VALUES);
  const needle = Buffer.from('secret-0000-0@example.com', 'utf8');
  // Neither guard may refuse the body: then each op searches it all.
  one.check({}, haystack);
  many.check({}, haystack);
  if (haystack.includes(needle)) throw new Error('the body holds the needle');
  const mb = haystack.length / 1e6;
  const group = '1 MiB JSON, no value present';
  const id = (label: string) => `${group} / ${label}`;
  const variants: Variant[] = [
    { id: id('one scan'), group, label: 'Buffer.includes, one needle, raw body', role: 'baseline', unit: 'MB/s', workPerOp: mb, op: () => void (sink.value += haystack.includes(needle) ? 1 : 0) },
    { id: id('guard, 1 value'), group, label: 'echo guard check, 1 value', role: 'candidate', unit: 'MB/s', workPerOp: mb, op: () => one.check({}, haystack) },
    { id: id(`guard, ${MAX_VALUES} values`), group, label: `echo guard check, ${MAX_VALUES} values`, role: 'candidate', unit: 'MB/s', workPerOp: mb, op: () => many.check({}, haystack) },
  ];
  const comparisons: Comparison[] = [
    { candidate: id('guard, 1 value'), baseline: id('one scan'), target: null },
    { candidate: id(`guard, ${MAX_VALUES} values`), baseline: id('guard, 1 value'), target: null },
  ];
  const options: SampleOptions = opts.quick
    ? { rounds: opts.rounds ?? 3, sampleMs: 200, minOps: 1, warmupMs: 300 }
    : { rounds: opts.rounds ?? 11, sampleMs: 500, minOps: 2, warmupMs: 800 };
  opts.log(`echo-guard: ${haystack.length} bytes, 1 and ${MAX_VALUES} values`);
  const results: VariantResult[] = await sampleGroup(variants, options, (m) => opts.log(`  echo-guard ${m}`));
  return {
    suite: 'echo-guard',
    description: `echo guard search throughput (1 MiB JSON body with escapes, no value present), 1 and ${MAX_VALUES} values, against one Buffer.includes; MB = 10^6 bytes of body`,
    startedAt,
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    options: { [group]: options },
    inputs: { bodyBytes: haystack.length, values: [1, MAX_VALUES] },
    variants: results,
    comparisons: compare(results, comparisons),
  };
}

if (import.meta.main) {
  const { formatSuite } = await import('../lib/report.ts');
  const result = await runEchoGuardBench({ quick: process.argv.includes('--quick'), log: (m) => console.error(m) });
  console.log(formatSuite(result));
}
