/**
 * `npm run bench`: the micro-benchmarks of the transformer, the token codec and decrypting
 * with reveal rules.
 *
 *   node bench/run.ts [--only transformer|crypto|reveal|echo-guard|key-check] [--quick] [--rounds N] [--markdown]
 *
 * Prints one table per suite and writes bench/results/micro.json (a --quick run writes
 * micro-quick.json instead, so a smoke run never replaces real results). A run of one
 * suite replaces that suite in the file and keeps the other.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { runCryptoBench } from './micro/crypto.ts';
import { runEchoGuardBench } from './micro/echo-guard.ts';
import { runKeyCheckBench } from './micro/key-check.ts';
import { runRevealBench } from './micro/reveal.ts';
import { runTransformerBench, type MicroOptions } from './micro/transformer.ts';
import { formatSuite, formatSuiteMarkdown, loadAverage, machineInfo, type MachineInfo, type SuiteResult } from './lib/report.ts';

const SUITES = {
  transformer: runTransformerBench,
  crypto: runCryptoBench,
  reveal: runRevealBench,
  'echo-guard': runEchoGuardBench,
  'key-check': runKeyCheckBench,
} as const;
type SuiteName = keyof typeof SUITES;

interface ResultsFile {
  readonly command: string;
  readonly updated: string;
  readonly suites: Partial<Record<SuiteName, SuiteResult & { machine: MachineInfo }>>;
}

function parse(): { only: SuiteName[]; quick: boolean; rounds: number | undefined; markdown: boolean } {
  const { values } = parseArgs({
    options: {
      only: { type: 'string', multiple: true },
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      markdown: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const names = Object.keys(SUITES) as SuiteName[];
  const only = (values.only ?? names).map((n) => {
    if (!(names as string[]).includes(n)) throw new Error(`--only must be one of: ${names.join(', ')}`);
    return n as SuiteName;
  });
  let rounds: number | undefined;
  if (values.rounds !== undefined) {
    rounds = Number(values.rounds);
    if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds must be a positive integer');
  }
  return { only, quick: values.quick, rounds, markdown: values.markdown };
}

function readExisting(path: URL): ResultsFile | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as ResultsFile;
  } catch {
    return null;
  }
}

async function main(): Promise<void> {
  let args: ReturnType<typeof parse>;
  try {
    args = parse();
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\nusage: node bench/run.ts [--only transformer|crypto|reveal|echo-guard|key-check] [--quick] [--rounds N] [--markdown]\n`);
    process.exitCode = 2;
    return;
  }
  const machine = machineInfo();
  const log = (m: string) => process.stderr.write(`${m}\n`);
  log(`node ${machine.node} on ${machine.cpuModel} × ${machine.cores}, load ${machine.loadAverageAtStart.join(' ')}${args.quick ? ' (quick)' : ''}`);
  if (machine.loadAverageAtStart[0]! > machine.cores * 0.5) {
    log(`warning: load average ${machine.loadAverageAtStart[0]} on ${machine.cores} cores: other jobs share the CPU, wall-clock rates will be noisy`);
  }
  const opts: MicroOptions = args.rounds === undefined ? { quick: args.quick, log } : { quick: args.quick, rounds: args.rounds, log };

  const results: SuiteResult[] = [];
  for (const name of args.only) results.push(await SUITES[name](opts));
  machine.loadAverageAtEnd = loadAverage();
  log(`load average at end: ${machine.loadAverageAtEnd.join(' ')}`);

  for (const r of results) console.log(`\n${formatSuite(r)}\n   (${r.seconds} s)`);
  if (args.markdown) for (const r of results) console.log(`\n${formatSuiteMarkdown(r)}`);

  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const path = new URL(args.quick ? 'micro-quick.json' : 'micro.json', dir);
  const suites = { ...(readExisting(path)?.suites ?? {}) };
  for (const r of results) suites[r.suite as SuiteName] = { ...r, machine };
  const file: ResultsFile = { command: `node bench/run.ts ${process.argv.slice(2).join(' ')}`.trim(), updated: machine.date, suites };
  writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`);
  log(`\nwrote ${path.pathname}`);
}

await main();
