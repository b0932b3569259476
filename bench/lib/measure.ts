/**
 * Interleaved sampling for micro-benchmarks.
 *
 * The machine is small and shared, so absolute numbers drift while a suite runs. Every
 * round therefore samples each variant of a group once, back to back (baseline,
 * candidate, baseline, candidate...), and ratios are taken per round between samples
 * measured seconds apart: drift moves both sides of a ratio together. Odd rounds run
 * the variants in reverse order so no variant always inherits its neighbour's garbage,
 * and a minor GC (scavenge) before each sample empties the young generation. Not a full
 * GC: a forced major GC throws away V8's optimised code for the transformer's `push`
 * ("embedded weak objects cleared"; natural major GCs did not in a test loop), so every
 * sample would start on unoptimised code, penalising the candidate, not the baseline.
 *
 * Rates are work per wall-clock second (the headline, and what the verdicts use) and,
 * as a cross-check, work per CPU-second of the process: when other jobs take the cores,
 * wall-clock samples lose the time spent descheduled while CPU-time samples do not.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';

export type Role = 'baseline' | 'candidate' | 'extra';
export type Unit = 'MB/s' | 'ops/s';

export interface Variant {
  /** Unique within the suite, e.g. `100 KB / encrypt chunked`. */
  readonly id: string;
  readonly group: string;
  readonly label: string;
  readonly role: Role;
  readonly unit: Unit;
  /** Work done by one call of `op`: megabytes for MB/s, operations for ops/s. */
  readonly workPerOp: number;
  readonly op: () => void;
}

export interface Comparison {
  readonly candidate: string;
  readonly baseline: string;
  /** Minimum candidate ÷ baseline; null for informational rows. */
  readonly target: number | null;
}

export interface SampleOptions {
  readonly rounds: number;
  /** Minimum wall time of one sample. */
  readonly sampleMs: number;
  /** Minimum calls of `op` in one sample (for slow ops such as a 10 MB document). */
  readonly minOps: number;
  /** CPU time each variant runs before timing starts (in two interleaved passes). */
  readonly warmupMs: number;
}

export interface VariantResult {
  readonly id: string;
  readonly group: string;
  readonly label: string;
  readonly role: Role;
  readonly unit: Unit;
  /** Work per wall-clock second, one per round. */
  readonly samples: number[];
  /** Work per CPU-second of the process (all its threads), one per round. */
  readonly cpuSamples: number[];
  readonly median: number;
  readonly cpuMedian: number;
  readonly min: number;
  readonly max: number;
  readonly opsPerSample: number[];
}

export interface ComparisonResult {
  readonly candidate: string;
  readonly baseline: string;
  readonly target: number | null;
  /** candidate ÷ baseline of each round (samples taken back to back). */
  readonly roundRatios: number[];
  /** Median of the per-round ratios: the headline number. */
  readonly ratio: number;
  readonly ratioMin: number;
  readonly ratioMax: number;
  /** median(candidate) ÷ median(baseline), for reference. */
  readonly ratioOfMedians: number;
  /** Median per-round ratio of the CPU-time rates: insensitive to time spent descheduled. */
  readonly cpuRatio: number;
  readonly verdict: 'pass' | 'miss' | 'info';
}

type GcFunction = (options?: { type?: 'major' | 'minor'; execution?: 'sync' | 'async' }) => void;

function exposeGc(): GcFunction {
  // Benchmarks run as `node bench/run.ts` (no flags); the flag can still be set at runtime.
  v8.setFlagsFromString('--expose-gc');
  const gc: unknown = vm.runInNewContext('gc');
  return typeof gc === 'function' ? (gc as GcFunction) : () => {};
}

const gc = exposeGc();

function scavenge(): void {
  gc({ type: 'minor' });
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function runFor(variant: Variant, ms: number, minOps: number): { rate: number; cpuRate: number; ops: number } {
  const op = variant.op;
  let ops = 0;
  const cpuStart = process.cpuUsage();
  const start = performance.now();
  const deadline = start + ms;
  let now = start;
  do {
    op();
    ops++;
    now = performance.now();
  } while (now < deadline || ops < minOps);
  const cpu = process.cpuUsage(cpuStart);
  const work = ops * variant.workPerOp;
  return { rate: work / ((now - start) / 1000), cpuRate: work / ((cpu.user + cpu.system) / 1e6), ops };
}

/**
 * Runs the op until this process has spent `ms` of CPU time on it, or four times that in
 * wall time. Counted in CPU time because on a loaded machine a wall-clock warm-up can end
 * before V8 has optimised the hot loops; capped so a very loaded machine cannot stretch
 * the run without bound.
 */
function warmUp(variant: Variant, ms: number): void {
  const op = variant.op;
  const start = process.cpuUsage();
  const budget = ms * 1000;
  const wallDeadline = performance.now() + 4 * ms;
  let used = 0;
  while (used < budget && performance.now() < wallDeadline) {
    // Several calls between reads: process.cpuUsage() is a system call.
    for (let i = 0; i < 8; i++) op();
    const cpu = process.cpuUsage(start);
    used = cpu.user + cpu.system;
  }
}

/** Samples the variants of one group in interleaved rounds. */
export async function sampleGroup(
  variants: readonly Variant[],
  opts: SampleOptions,
  onProgress?: (message: string) => void,
): Promise<VariantResult[]> {
  const samples = variants.map(() => [] as number[]);
  const cpuSamples = variants.map(() => [] as number[]);
  const opsPerSample = variants.map(() => [] as number[]);
  // Warm-up, interleaved as well, so the JIT has seen every variant before timing starts.
  for (let pass = 0; pass < 2; pass++) {
    for (const v of variants) warmUp(v, opts.warmupMs / 2);
  }
  for (let round = 0; round < opts.rounds; round++) {
    const order = variants.map((_, i) => i);
    if (round % 2 === 1) order.reverse();
    for (const i of order) {
      scavenge();
      await yieldToLoop();
      const { rate, cpuRate, ops } = runFor(variants[i]!, opts.sampleMs, opts.minOps);
      samples[i]!.push(rate);
      cpuSamples[i]!.push(cpuRate);
      opsPerSample[i]!.push(ops);
    }
    onProgress?.(`round ${round + 1}/${opts.rounds}`);
  }
  return variants.map((v, i) => {
    const s = samples[i]!;
    return {
      id: v.id,
      group: v.group,
      label: v.label,
      role: v.role,
      unit: v.unit,
      samples: s,
      cpuSamples: cpuSamples[i]!,
      median: median(s),
      cpuMedian: median(cpuSamples[i]!),
      min: Math.min(...s),
      max: Math.max(...s),
      opsPerSample: opsPerSample[i]!,
    };
  });
}

export function compare(results: readonly VariantResult[], comparisons: readonly Comparison[]): ComparisonResult[] {
  const byId = new Map(results.map((r) => [r.id, r]));
  return comparisons.map((c) => {
    const cand = byId.get(c.candidate);
    const base = byId.get(c.baseline);
    if (cand === undefined || base === undefined) throw new Error(`comparison refers to an unknown case: ${c.candidate} / ${c.baseline}`);
    const roundRatios = cand.samples.map((s, i) => s / base.samples[i]!);
    const ratio = median(roundRatios);
    return {
      candidate: c.candidate,
      baseline: c.baseline,
      target: c.target,
      roundRatios,
      ratio,
      ratioMin: Math.min(...roundRatios),
      ratioMax: Math.max(...roundRatios),
      ratioOfMedians: cand.median / base.median,
      cpuRatio: median(cand.cpuSamples.map((s, i) => s / base.cpuSamples[i]!)),
      verdict: c.target === null ? 'info' : ratio >= c.target ? 'pass' : 'miss',
    };
  });
}

/** Keeps results of benchmarked calls observable so the JIT cannot drop the work. */
export const sink = { value: 0 };
