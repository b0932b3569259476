/**
 * Does the service settle in the same garbage-collection state at every start? Starts it
 * `--starts` times under case D's load (proxy.ts: `/proxy` encrypting five fields, 50
 * connections), each start with `--trace-gc`: a 2 s warm-up, then `--samples` samples of
 * `--seconds`. Per sample it counts the full collections (Mark-Compact) and scavenges V8
 * reports, and the requests served per second.
 *
 *   node bench/http/gc-states.ts [--starts 8] [--samples 4] [--seconds 3]
 *                                [--svc-node-args="--flag ..."] [--label name]
 *
 * Found with it (bench/README.md, "Two states of one process"): without
 * `--no-allocation-site-pretenuring`, some starts ran 10–24 full collections per 3 s for
 * their whole life instead of 1–2. A start counts as `usual` when its median sample has
 * at most 3 full collections per 3 s (scaled to `--seconds`), `other` from 9, `between`
 * otherwise. `--svc-node-args` come after the service's own flags, so
 * `--svc-node-args=--allocation-site-pretenuring` turns pretenuring back on. Writes
 * bench/results/gc-states[-label].json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { median } from '../lib/measure.ts';
import { machineInfo, positiveOption, resultLabel } from '../lib/report.ts';
import { customerRecord, FIELDS } from './body.ts';
import { cannon, type Target } from './load.ts';
import { BENCH_KEY, BENCH_SLUG, SERVICE_NODE_FLAGS, startHelper, startService } from './processes.ts';

const { values } = parseArgs({
  options: {
    starts: { type: 'string', default: '8' },
    samples: { type: 'string', default: '4' },
    seconds: { type: 'string', default: '3' },
    'svc-node-args': { type: 'string', default: '' },
    label: { type: 'string' },
  },
  strict: true,
});
const starts = positiveOption('starts', values.starts);
const samples = positiveOption('samples', values.samples);
const seconds = positiveOption('seconds', values.seconds);
const extraNodeArgs = values['svc-node-args'].split(' ').filter((a) => a !== '');
const label = values.label === undefined ? null : resultLabel(values.label);
const log = (m: string) => process.stderr.write(`${m}\n`);

interface Sample {
  readonly rps: number;
  readonly fullCollections: number;
  readonly scavenges: number;
}
type State = 'usual' | 'between' | 'other';

/** `--trace-gc` lines of one kind: `[pid:isolate]  1234 ms: Mark-Compact 34.1 (44.0) -> ...`. */
const count = (trace: string, kind: string): number => trace.split('\n').filter((line) => line.includes(`ms: ${kind} `)).length;

function stateOf(fullCollectionsPerSample: number): State {
  const per3s = (fullCollectionsPerSample * 3) / seconds;
  return per3s <= 3 ? 'usual' : per3s >= 9 ? 'other' : 'between';
}

async function main(): Promise<void> {
  const machine = machineInfo();
  log(`node ${machine.node}, load ${machine.loadAverageAtStart.join(' ')}; ${starts} starts × ${samples} samples × ${seconds} s`);
  const echo = await startHelper('echo');
  const runs: { samples: Sample[]; state: State }[] = [];
  try {
    for (let i = 0; i < starts; i++) {
      const svc = await startService({ destinations: [echo.url], nodeArgs: ['--trace-gc', ...extraNodeArgs], server: 'idle_memory_release: 0' });
      try {
        const target: Target = {
          url: `${svc.url}/proxy/${BENCH_SLUG}`,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-svc-authorization': BENCH_KEY, 'x-svc-destination': `${echo.url}/`, 'x-svc-fields': FIELDS.join(',') },
          body: customerRecord(),
        };
        await cannon(target, { connections: 50, seconds: 2 });
        const taken: Sample[] = [];
        for (let s = 0; s < samples; s++) {
          const from = svc.output().length;
          const r = await cannon(target, { connections: 50, seconds });
          if (r.non2xx + r.errors > 0) throw new Error(`${r.non2xx} non-2xx responses and ${r.errors} errors`);
          const trace = svc.output().slice(from);
          taken.push({ rps: r.rps, fullCollections: count(trace, 'Mark-Compact'), scavenges: count(trace, 'Scavenge') });
        }
        const state = stateOf(median(taken.map((t) => t.fullCollections)));
        runs.push({ samples: taken, state });
        log(`start ${i}: ${state.padEnd(7)} ${taken.map((t) => `${t.rps} req/s, ${t.fullCollections} full, ${t.scavenges} scavenges`).join(' | ')}`);
      } finally {
        await svc.stop();
      }
    }
  } finally {
    await echo.stop();
  }
  const tally = (state: State) => runs.filter((r) => r.state === state).length;
  log(`${tally('usual')} usual, ${tally('between')} between, ${tally('other')} other of ${starts} starts`);
  const dir = new URL('../results/', import.meta.url).pathname;
  mkdirSync(dir, { recursive: true });
  const result = {
    benchmark: 'http-gc-states',
    command: `node bench/http/gc-states.ts ${process.argv.slice(2).join(' ')}`,
    machine: { ...machine, loadAverageAtEnd: machineInfo().loadAverageAtStart },
    nodeFlags: [...SERVICE_NODE_FLAGS, '--trace-gc', ...extraNodeArgs],
    starts: runs,
    tally: { usual: tally('usual'), between: tally('between'), other: tally('other') },
  };
  writeFileSync(join(dir, `gc-states${label === null ? '' : `-${label}`}.json`), `${JSON.stringify(result, null, 2)}\n`);
}

await main();
