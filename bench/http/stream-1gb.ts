/**
 * A 1 GB JSON array streamed through `/proxy` encrypt-and-forward (issue 4, "Must show"):
 *
 *   node bench/http/stream-1gb.ts [--mb N] [--profile] [--svc-node-args="--flag ..."] [--svc-env K=V,...]
 *
 * The service runs as a child process exactly as `npm start` runs it; a client in this
 * process writes a JSON array of records generated on the fly, honouring backpressure,
 * to POST /proxy/bench, which encrypts five fields of every record and forwards the body
 * to a destination (servers.ts `discard`, its own process) that counts and drops the
 * bytes. The service's VmRSS is sampled from /proc every 100 ms and its VmHWM read at the
 * end. Prints throughput and peak RSS and writes bench/results/http-stream-1gb.json
 * (`--mb` other than 1024 writes http-stream-1gb-quick.json, `--svc-node-args` or `--svc-env`
 * http-stream-1gb-experiment.json instead). `--profile` runs the
 * service with `--cpu-prof` and prints its top self-time functions (results not written).
 */
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { envOption, loadAverage, machineInfo } from '../lib/report.ts';
import { FIELDS, streamRecord } from './body.ts';
import { round3 } from './load.ts';
import { formatProfile, summarizeProfile } from './profile.ts';
import { BENCH_KEY, BENCH_SLUG, cpuSeconds, memory, SERVICE_ENV, SERVICE_NODE_FLAGS, startHelper, startService, type Running } from './processes.ts';

const MIB = 1024 * 1024;
/** The cost-and-footprint target: a peak of 120 MB (10^6 bytes), in MiB. */
const TARGET_PEAK_RSS_MIB = round3(120e6 / MIB);
/** Records per write: about 64 KB, a socket-sized piece. */
const RECORDS_PER_WRITE = 160;

const log = (m: string) => process.stderr.write(`${m}\n`);

/** Writes `[record,record,...]` of at least `total` bytes, waiting for 'drain' when told to. */
async function writeArray(req: ReturnType<typeof request>, total: number): Promise<{ bytes: number; records: number }> {
  let bytes = 0;
  let n = 0;
  const write = async (s: string) => {
    bytes += Buffer.byteLength(s);
    if (!req.write(s)) await once(req, 'drain');
  };
  await write('[');
  while (bytes < total) {
    let batch = '';
    for (let k = 0; k < RECORDS_PER_WRITE; k++) batch += (n === 0 ? '' : ',') + streamRecord(n++);
    await write(batch);
  }
  await write(']');
  req.end();
  return { bytes, records: n };
}

async function settle(url: string, destination: string): Promise<void> {
  const res = await fetch(`${url}/proxy/${BENCH_SLUG}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-authorization': BENCH_KEY, 'x-svc-destination': `${destination}/`, 'x-svc-fields': FIELDS.map((f) => `*.${f}`).join(',') },
    body: `[${streamRecord(0)}]`,
  });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`the first request answered ${res.status}`);
  await sleep(2000);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { mb: { type: 'string', default: '1024' }, profile: { type: 'boolean', default: false }, 'svc-node-args': { type: 'string', default: '' },
      'svc-env': { type: 'string', default: '' },
    },
    strict: true,
  });
  const extraNodeArgs = values['svc-node-args'].split(' ').filter((a) => a !== '');
  const extraEnv = envOption('svc-env', values['svc-env']);
  const experiment = extraNodeArgs.length > 0 || Object.keys(extraEnv).length > 0;
  const mb = Number(values.mb);
  if (!Number.isInteger(mb) || mb < 1) throw new Error('--mb must be a positive integer');
  const total = mb * MIB;
  const machine = machineInfo();
  log(`node ${machine.node} on ${machine.cpuModel} × ${machine.cores}, load ${machine.loadAverageAtStart.join(' ')}`);

  const started: Running[] = [];
  try {
    const sink = await startHelper('discard');
    started.push(sink);
    // A 1 GB upload outlasts the default 60 s request timeout on a busy 2-core machine,
    // and the destination answers only once it has the whole body.
    const profDir = values.profile ? mkdtempSync(join(tmpdir(), 'svc-bench-prof-')) : null;
    const svc = await startService({
      destinations: [sink.url],
      env: extraEnv,
      nodeArgs: [...extraNodeArgs, ...(profDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${profDir}`])],
      server: 'request_timeout: 30m',
      yaml: 'forwarding: { headers_timeout: 30m, body_timeout: 120s }',
    });
    started.push(svc);
    const pid = svc.pids[0]!;
    // The baseline: after one small request (codec, connection pool, log writer all
    // started) and a pause, so the peak below is what the upload itself adds.
    await settle(svc.url, sink.url);
    const idle = memory(pid);
    log(`service pid ${pid}: VmRSS ${(idle.rss / MIB).toFixed(1)} MiB settled before the upload; streaming ${mb} MiB`);

    const samples: Array<{ ms: number; rssMiB: number }> = [];
    const startedAt = performance.now();
    const sampler = setInterval(() => {
      samples.push({ ms: Math.round(performance.now() - startedAt), rssMiB: round3(memory(pid).rss / MIB) });
    }, 100);
    const cpu0 = cpuSeconds(svc.pids);
    const client0 = process.cpuUsage();

    const req = request(`${svc.url}/proxy/${BENCH_SLUG}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-svc-authorization': BENCH_KEY,
        'x-svc-destination': `${sink.url}/`,
        'x-svc-fields': FIELDS.map((f) => `*.${f}`).join(','),
      },
    });
    const response = once(req, 'response') as Promise<[IncomingMessage]>;
    const sent = await writeArray(req, total);
    const [res] = await response;
    let text = '';
    for await (const chunk of res) text += (chunk as Buffer).toString();
    const seconds = (performance.now() - startedAt) / 1000;
    clearInterval(sampler);
    const svcCpu = cpuSeconds(svc.pids) - cpu0;
    const client = process.cpuUsage(client0);
    const end = memory(pid);
    machine.loadAverageAtEnd = loadAverage();

    if (res.statusCode !== 200) throw new Error(`the service answered ${res.statusCode}: ${text.slice(0, 300)}\n${svc.output().slice(-2000)}`);
    const forwarded = (JSON.parse(text) as { bytes: number }).bytes;
    // Five fields per record became tokens of ~60-100 bytes each: the body must have grown.
    if (forwarded < sent.bytes + sent.records * 5 * 40) {
      throw new Error(`the destination received ${forwarded} bytes for ${sent.bytes} sent: the fields were not encrypted`);
    }

    const peakSampledMiB = Math.max(...samples.map((s) => s.rssMiB), end.rss / MIB);
    const hwmMiB = end.hwm / MIB;
    const result = {
      command: `node bench/http/stream-1gb.ts ${process.argv.slice(2).join(' ')}`.trim(),
      updated: machine.date,
      machine,
      setup: {
        serviceNodeFlags: [...SERVICE_NODE_FLAGS, ...extraNodeArgs],
        serviceEnv: { ...SERVICE_ENV, ...extraEnv },
        fields: FIELDS.map((f) => `*.${f}`),
        recordBytesAbout: Buffer.byteLength(streamRecord(123456)),
        destination: 'servers.ts discard: counts and drops the body, answers {"bytes": n}',
      },
      input: { bytes: sent.bytes, records: sent.records },
      forwardedBytes: forwarded,
      seconds: round3(seconds),
      throughput: {
        inputMBps: round3(sent.bytes / 1e6 / seconds),
        inputMiBps: round3(sent.bytes / MIB / seconds),
        forwardedMBps: round3(forwarded / 1e6 / seconds),
        recordsPerSecond: Math.round(sent.records / seconds),
      },
      cpu: { serviceSeconds: round3(svcCpu), clientSeconds: round3((client.user + client.system) / 1e6) },
      memory: {
        settledRssMiB: round3(idle.rss / MIB),
        peakSampledRssMiB: round3(peakSampledMiB),
        vmHwmMiB: round3(hwmMiB),
        addedByUploadMiB: round3(peakSampledMiB - idle.rss / MIB),
        targetMiB: TARGET_PEAK_RSS_MIB,
        verdict: hwmMiB < TARGET_PEAK_RSS_MIB ? 'PASS' : `MISS by ${round3(hwmMiB - TARGET_PEAK_RSS_MIB)} MiB`,
      },
      rssSamples: samples,
    };

    console.log(`\n== ${mb} MiB JSON array through /proxy encrypt (5 fields per record) + forward`);
    console.log(`sent        ${(sent.bytes / MIB).toFixed(0)} MiB, ${sent.records} records in ${seconds.toFixed(1)} s`);
    console.log(`throughput  ${result.throughput.inputMBps.toFixed(1)} MB/s in (${result.throughput.inputMiBps.toFixed(1)} MiB/s), ${result.throughput.forwardedMBps.toFixed(1)} MB/s forwarded, ${result.throughput.recordsPerSecond} records/s`);
    console.log(`service CPU ${svcCpu.toFixed(1)} s (${((svcCpu / seconds) * 100).toFixed(0)}% of a core); client CPU ${result.cpu.clientSeconds.toFixed(1)} s`);
    console.log(`service RSS settled ${result.memory.settledRssMiB.toFixed(1)} MiB, peak sampled ${result.memory.peakSampledRssMiB.toFixed(1)} MiB, VmHWM ${hwmMiB.toFixed(1)} MiB (target < ${TARGET_PEAK_RSS_MIB} MiB: ${result.memory.verdict})`);

    if (profDir !== null) {
      await svc.stop();
      const main = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile') && f.split('.')[4] === '0');
      if (main === undefined) throw new Error(`no main-thread profile in ${profDir}`);
      console.log(`\n${formatProfile(summarizeProfile(join(profDir, main)), 30)}`);
      log(`profiles kept in ${profDir}; results not written for a profiled run`);
      return;
    }
    const dir = new URL('../results/', import.meta.url);
    mkdirSync(dir, { recursive: true });
    const name = experiment ? 'http-stream-1gb-experiment.json' : mb === 1024 ? 'http-stream-1gb.json' : 'http-stream-1gb-quick.json';
    const path = new URL(name, dir);
    writeFileSync(path, `${JSON.stringify(result, null, 2)}\n`);
    log(`\nwrote ${path.pathname}`);
  } finally {
    for (const r of started.reverse()) await r.stop().catch((err: unknown) => log(`stopping ${r.name}: ${String(err)}`));
  }
}

await main();
