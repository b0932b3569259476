/** Result shapes, machine description and the printed table shared by the micro-benchmarks. */
import os from 'node:os';
import type { ComparisonResult, SampleOptions, VariantResult } from './measure.ts';

export interface SuiteResult {
  readonly suite: string;
  readonly description: string;
  readonly startedAt: string;
  readonly seconds: number;
  /** Sampling options per group (groups with slow ops sample longer). */
  readonly options: Record<string, SampleOptions>;
  /** Inputs of the suite, e.g. document sizes. */
  readonly inputs: Record<string, unknown>;
  readonly variants: VariantResult[];
  readonly comparisons: ComparisonResult[];
}

export interface MachineInfo {
  readonly node: string;
  readonly v8: string;
  readonly platform: string;
  readonly arch: string;
  readonly cpuModel: string;
  readonly cores: number;
  readonly availableParallelism: number;
  readonly totalMemoryMiB: number;
  readonly loadAverageAtStart: number[];
  /** Set when the run ends: load from other jobs makes wall-clock numbers noisier. */
  loadAverageAtEnd?: number[];
  readonly date: string;
}

/** A `--label` as it goes into a results file's name; throws for anything else. */
export function resultLabel(label: string): string {
  if (!/^[\w.-]+$/.test(label)) throw new Error('--label takes letters, digits, ".", "_" and "-"');
  return label;
}

/** The value of `--<name>` as a positive integer; throws for anything else. */
export function positiveOption(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
}

/** The value of `--<name>`, `K=V,K=V`, as environment variables; throws for an entry without a name. */
export function envOption(name: string, value: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const entry of value.split(',')) {
    if (entry === '') continue;
    const eq = entry.indexOf('=');
    if (eq < 1) throw new Error(`--${name} takes K=V entries separated by commas: ${entry}`);
    env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return env;
}

export function loadAverage(): number[] {
  return os.loadavg().map((l) => Math.round(l * 100) / 100);
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    node: process.version,
    v8: process.versions.v8,
    platform: `${os.type()} ${os.release()}`,
    arch: process.arch,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    availableParallelism: os.availableParallelism(),
    totalMemoryMiB: Math.round(os.totalmem() / 2 ** 20),
    loadAverageAtStart: loadAverage(),
    date: new Date().toISOString(),
  };
}

function formatRate(value: number, unit: string): string {
  if (unit === 'ops/s') return Math.round(value).toLocaleString('en-US');
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

function formatRatio(r: ComparisonResult): string {
  return `${r.ratio.toFixed(2)}× (${r.ratioMin.toFixed(2)}–${r.ratioMax.toFixed(2)})`;
}

function verdictText(r: ComparisonResult): string {
  if (r.verdict === 'info' || r.target === null) return 'info';
  // Said out loud when the CPU-time cross-check disagrees: then the run was too noisy to trust.
  const cpuPass = r.cpuRatio >= r.target;
  if (r.verdict === 'pass') return cpuPass ? 'PASS' : 'PASS (cpu ratio misses)';
  const miss = `MISS by ${((1 - r.ratio / r.target) * 100).toFixed(1)}%`;
  return cpuPass ? `${miss} (cpu ratio passes)` : miss;
}

function pad(cells: readonly string[], widths: readonly number[], right: ReadonlySet<number>): string {
  return cells.map((c, i) => (right.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ');
}

const HEADER = ['group', 'case', 'role', 'median', 'min–max', 'unit', 'ratio (range)', 'cpu ratio', 'target', 'verdict'];

/**
 * One row of cells per case, and the comparisons that do not fit a row: a case's first
 * comparison goes in its row, any further ones are listed under the table.
 */
function suiteRows(result: SuiteResult): { rows: string[][]; more: ComparisonResult[] } {
  const ratios = new Map<string, ComparisonResult>();
  const more: ComparisonResult[] = [];
  for (const c of result.comparisons) {
    if (ratios.has(c.candidate)) more.push(c);
    else ratios.set(c.candidate, c);
  }
  const rows = result.variants.map((v) => {
    const r = ratios.get(v.id);
    return [
      v.group,
      v.label,
      v.role,
      formatRate(v.median, v.unit),
      `${formatRate(v.min, v.unit)}–${formatRate(v.max, v.unit)}`,
      v.unit,
      r === undefined ? '' : formatRatio(r),
      r === undefined ? '' : `${r.cpuRatio.toFixed(2)}×`,
      r === undefined || r.target === null ? '' : `≥ ${r.target.toFixed(1)}×`,
      r === undefined ? '' : verdictText(r),
    ];
  });
  return { rows, more };
}

/** A plain-text table: one row per case; rows with a baseline carry the ratio. */
export function formatSuite(result: SuiteResult): string {
  const { rows: body, more } = suiteRows(result);
  const rows = [HEADER, ...body];
  const widths = HEADER.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  const right = new Set([3, 4]);
  const lines = [`== ${result.suite}: ${result.description}`, ...rows.map((row) => pad(row, widths, right))];
  for (const c of more) lines.push(`   also: ${c.candidate} ÷ ${c.baseline} = ${formatRatio(c)}, cpu ${c.cpuRatio.toFixed(2)}× (${verdictText(c)})`);
  return lines.join('\n');
}

/** The same table as Markdown, for bench/README.md. */
export function formatSuiteMarkdown(result: SuiteResult): string {
  const { rows, more } = suiteRows(result);
  const lines = [`| ${HEADER.join(' | ')} |`, '|---|---|---|--:|--:|---|---|---|---|---|'];
  for (const cells of rows) lines.push(`| ${cells.map((c) => c.replaceAll('|', '\\|')).join(' | ')} |`);
  for (const c of more) lines.push('', `Also: ${c.candidate} ÷ ${c.baseline} = ${formatRatio(c)}, cpu ratio ${c.cpuRatio.toFixed(2)}× (${verdictText(c)}).`);
  return lines.join('\n');
}
