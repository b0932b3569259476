/**
 * Two versions of the service side by side, interleaved, on case D of proxy.ts (`/proxy`
 * encrypting five fields and forwarding to an echo backend): is a change worth keeping?
 *
 *   node bench/http/ab.ts --base <checkout> [--candidate <checkout>] [--label name]
 *                         [--rounds 6] [--seconds 5] [--connections 50] [--rate R]
 *                         [--base-node-args "..."] [--candidate-node-args "..."]
 *                         [--base-yaml "..."] [--candidate-yaml "..."]
 *                         [--base-server "..."] [--candidate-server "..."]
 *                         [--base-env K=V,...] [--candidate-env K=V,...]
 *                         [--base-bundle] [--candidate-bundle] [--restart]
 *
 * `--base` and `--candidate` are checkout roots (directories holding `src/main.ts` and
 * their own `node_modules`); the candidate defaults to this checkout. Each runs as `npm
 * start` runs it, from its sources; `--base-bundle` / `--candidate-bundle` run it bundled
 * instead (the experiment of bench/lib/bundle.ts). Flag experiments pass
 * the same checkout twice with different node arguments, configuration experiments with
 * different top-level YAML (e.g. `logs: { writer: inline }`) or `server:` settings (e.g.
 * `idle_memory_release: 0`), environment experiments with variables over `npm start`'s
 * (e.g. `MALLOC_MMAP_THRESHOLD_=32768`). Both services run for the whole
 * run; one is loaded at a time, in alternating order (base first in even rounds), each
 * sample preceded by a 1 s warm-up, so drift on the shared machine hits both alike.
 *
 * With `--restart`, every round starts both services afresh (each warmed up for 3 s, as
 * at the start) and stops them after its samples. A process can settle in one of several
 * states for its whole life (V8's allocation-site pretenuring, Footprint in
 * bench/README.md): a run of one process per side samples one state of each, a run with
 * restarts samples as many as it has rounds.
 *
 * The verdict is the median of per-round ratios candidate ÷ base, of req/s and of
 * requests per CPU-second of the service (all its threads). Writes
 * bench/results/ab-<label>.json.
 *
 * With `--rate R`, each sample is instead a paced run at R requests a second for
 * `--seconds` (load.ts `paced`, latency from each request's scheduled time, after a 1 s
 * paced warm-up), and the verdict is the median of per-round differences candidate − base
 * of p50, p99 and p99.9: a change to the tail, side by side.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { median } from '../lib/measure.ts';
import { envOption, machineInfo, positiveOption, resultLabel } from '../lib/report.ts';
import { customerRecord, FIELDS } from './body.ts';
import { cannon, paced, round3, type Target } from './load.ts';
import { BENCH_KEY, BENCH_SLUG, cpuSeconds, memory, serviceMain, startHelper, startService, type Running } from './processes.ts';

const { values } = parseArgs({
  options: {
    base: { type: 'string' },
    candidate: { type: 'string', default: new URL('../..', import.meta.url).pathname },
    label: { type: 'string', default: 'experiment' },
    rounds: { type: 'string', default: '6' },
    seconds: { type: 'string', default: '5' },
    connections: { type: 'string', default: '50' },
    rate: { type: 'string' },
    'base-node-args': { type: 'string', default: '' },
    'candidate-node-args': { type: 'string', default: '' },
    'base-yaml': { type: 'string', default: '' },
    'candidate-yaml': { type: 'string', default: '' },
    'base-server': { type: 'string' },
    'candidate-server': { type: 'string' },
    'base-env': { type: 'string', default: '' },
    'candidate-env': { type: 'string', default: '' },
    'base-bundle': { type: 'boolean', default: false },
    'candidate-bundle': { type: 'boolean', default: false },
    restart: { type: 'boolean', default: false },
  },
  strict: true,
});
if (values.base === undefined) throw new Error('--base <checkout> is required');
resultLabel(values.label);
const rounds = positiveOption('rounds', values.rounds);
const seconds = positiveOption('seconds', values.seconds);
const connections = positiveOption('connections', values.connections);
const rate = values.rate === undefined ? null : positiveOption('rate', values.rate);
const split = (args: string) => args.split(' ').filter((a) => a !== '');

const log = (m: string) => process.stderr.write(`${m}\n`);

interface Sample {
  rps: number;
  perCpuSecond: number;
  p50: number;
  p99: number;
  p999: number;
}

async function sample(svc: Running, target: Target): Promise<Sample> {
  if (rate !== null) {
    await paced(target, { connections, seconds: 1, rate });
    const cpu0 = cpuSeconds(svc.pids);
    const r = await paced(target, { connections, seconds, rate });
    const cpu = cpuSeconds(svc.pids) - cpu0;
    if (r.non2xx + r.errors > 0) throw new Error(`${svc.name}: ${r.non2xx} non-2xx responses and ${r.errors} errors`);
    return { rps: r.rps, perCpuSecond: Math.round(r.responses / cpu), p50: r.latencyMs.p50, p99: r.latencyMs.p99, p999: r.latencyMs.p999 };
  }
  await cannon(target, { connections, seconds: 1 });
  const cpu0 = cpuSeconds(svc.pids);
  const r = await cannon(target, { connections, seconds });
  const cpu = cpuSeconds(svc.pids) - cpu0;
  if (r.non2xx + r.errors > 0) throw new Error(`${svc.name}: ${r.non2xx} non-2xx responses and ${r.errors} errors`);
  return { rps: r.rps, perCpuSecond: Math.round(r.responses / cpu), p50: r.latencyMs.p50, p99: r.latencyMs.p99, p999: r.latencyMs.p999 };
}

async function main(): Promise<void> {
  const machine = machineInfo();
  log(`node ${machine.node}, load ${machine.loadAverageAtStart.join(' ')}`);
  const started: Running[] = [];
  try {
    const echo = await startHelper('echo');
    started.push(echo);
    const sides = [
      { name: 'base', root: resolve(values.base!), bundle: values['base-bundle'], nodeArgs: split(values['base-node-args']), yaml: values['base-yaml'], server: values['base-server'], env: envOption('base-env', values['base-env']) },
      { name: 'candidate', root: resolve(values.candidate), bundle: values['candidate-bundle'], nodeArgs: split(values['candidate-node-args']), yaml: values['candidate-yaml'], server: values['candidate-server'], env: envOption('candidate-env', values['candidate-env']) },
    ] as const;
    const body = customerRecord();
    /** Both sides started, answering, and warmed up: the services and their targets. */
    const startBoth = async (): Promise<{ services: Running[]; targets: Target[] }> => {
      const services: Running[] = [];
      for (const side of sides) {
        const svc = await startService({ destinations: [echo.url], main: serviceMain(side.root, side.bundle), nodeArgs: side.nodeArgs, yaml: side.yaml, env: side.env, ...(side.server === undefined ? {} : { server: side.server }) });
        started.push(svc);
        services.push({ ...svc, name: side.name });
      }
      const targets = services.map((svc): Target => ({
        url: `${svc.url}/proxy/${BENCH_SLUG}`,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-svc-authorization': BENCH_KEY, 'x-svc-destination': `${echo.url}/`, 'x-svc-fields': FIELDS.join(',') },
        body,
      }));
      for (const [i, target] of targets.entries()) {
        const res = await fetch(target.url, { method: 'POST', headers: target.headers, body: new Uint8Array(body) });
        const text = await res.text();
        if (res.status !== 200 || !text.includes('"svc:')) throw new Error(`${sides[i]!.name}: ${res.status} ${text.slice(0, 300)}`);
        await cannon(target, { connections, seconds: 3 });
      }
      return { services, targets };
    };
    const stopBoth = async (services: readonly Running[]): Promise<void> => {
      for (const svc of services) {
        const i = started.findIndex((r) => r.pids[0] === svc.pids[0]);
        if (i !== -1) await started.splice(i, 1)[0]!.stop();
      }
    };
    let { services, targets } = await startBoth();
    const samples: Sample[][] = [[], []];
    for (let round = 0; round < rounds; round++) {
      if (values.restart && round > 0) {
        await stopBoth(services);
        ({ services, targets } = await startBoth());
      }
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) samples[i]!.push(await sample(services[i]!, targets[i]!));
      const [b, c] = [samples[0]!.at(-1)!, samples[1]!.at(-1)!];
      if (rate !== null) log(`round ${round}: base p50 ${b.p50} p99 ${b.p99} p99.9 ${b.p999} ms, candidate p50 ${c.p50} p99 ${c.p99} p99.9 ${c.p999} ms`);
      else log(`round ${round}: base ${b.rps} req/s (${b.perCpuSecond}/CPU-s), candidate ${c.rps} req/s (${c.perCpuSecond}/CPU-s): ${(c.rps / b.rps).toFixed(3)}×, ${(c.perCpuSecond / b.perCpuSecond).toFixed(3)}× per CPU-s`);
    }
    const ratio = (key: keyof Sample) => samples[1]!.map((c, i) => c[key] / samples[0]![i]![key]);
    const difference = (key: keyof Sample) => samples[1]!.map((c, i) => round3(c[key] - samples[0]![i]![key]));
    const rss = services.map((svc) => memory(svc.pids[0]!));
    const result = {
      benchmark: 'http-ab',
      command: `node bench/http/ab.ts ${process.argv.slice(2).join(' ')}`,
      restart: values.restart,
      machine: { ...machine, loadAverageAtEnd: machineInfo().loadAverageAtStart },
      sides: sides.map((s, i) => ({ ...s, samples: samples[i], medianRps: median(samples[i]!.map((x) => x.rps)), rssAtEndBytes: rss[i]!.rss, hwmBytes: rss[i]!.hwm })),
      ratios: {
        rps: ratio('rps').map(round3),
        perCpuSecond: ratio('perCpuSecond').map(round3),
        medianRps: round3(median(ratio('rps'))),
        medianPerCpuSecond: round3(median(ratio('perCpuSecond'))),
      },
      ...(rate === null
        ? {}
        : {
            rate,
            latencyDifferenceMs: {
              p50: difference('p50'),
              p99: difference('p99'),
              p999: difference('p999'),
              medianP50: round3(median(difference('p50'))),
              medianP99: round3(median(difference('p99'))),
              medianP999: round3(median(difference('p999'))),
            },
          }),
    };
    const dir = new URL('../results/', import.meta.url).pathname;
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `ab-${values.label}.json`), `${JSON.stringify(result, null, 2)}\n`);
    if (result.latencyDifferenceMs !== undefined) {
      const d = result.latencyDifferenceMs;
      log(`candidate − base at ${rate} req/s, medians of rounds: p50 ${d.medianP50} ms, p99 ${d.medianP99} ms, p99.9 ${d.medianP999} ms; per CPU-second ${result.ratios.medianPerCpuSecond}×`);
    } else log(`candidate ÷ base: ${result.ratios.medianRps}× req/s (${Math.min(...result.ratios.rps)}–${Math.max(...result.ratios.rps)}), ${result.ratios.medianPerCpuSecond}× per CPU-second; RSS at end ${rss.map((m) => `${(m.rss / 2 ** 20).toFixed(1)} MiB`).join(' / ')}`);
  } finally {
    for (const r of started.reverse()) await r.stop().catch((err: unknown) => log(`stopping ${r.name}: ${String(err)}`));
  }
}

await main();
