/**
 * Starting and stopping the processes the HTTP benchmarks measure, and reading their CPU
 * time and memory from /proc (Linux): the helper servers of servers.ts, nginx, and the
 * service itself exactly as `npm start` runs it.
 */
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SERVICE_ENV, SERVICE_NODE_FLAGS } from '../../test/support/service-command.ts';
import type { Role } from './servers.ts';

export interface Running {
  readonly name: string;
  readonly url: string;
  readonly port: number;
  /** Every process that does the work (nginx: the master and its workers). */
  readonly pids: readonly number[];
  stop(): Promise<void>;
}

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;
const ROOT = new URL('../../', import.meta.url).pathname;
const BUNDLE = new URL('../lib/bundle.ts', import.meta.url).pathname;
const builds = new Map<string, string>();

/**
 * What to run for the checkout at `root`: its `src/main.ts`, as `npm start` runs it, or,
 * with `bundle`, the experiment of bench/lib/bundle.ts (the checkout bundled into a temp
 * dir, once per checkout and bench process).
 */
export function serviceMain(root: string = ROOT, bundle = false): string {
  if (!bundle) return join(root, 'src/main.ts');
  let main = builds.get(root);
  if (main === undefined) {
    const out = mkdtempSync(join(tmpdir(), 'svc-bench-bundle-'));
    const built = spawnSync(process.execPath, [BUNDLE, '--outdir', out, '--root', root], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
    if (built.status !== 0) throw new Error(`bundling ${root} failed`);
    process.once('exit', () => rmSync(out, { recursive: true, force: true }));
    main = built.stdout.trim();
    builds.set(root, main);
  }
  return main;
}
/** Where `npm start` keeps its compile cache (package.json). */
const COMPILE_CACHE = new URL('../../node_modules/.cache/node', import.meta.url).pathname;
/** The warm-up of each entry point and set of flags, once started: starts meanwhile wait for it. */
const compileCacheWarm = new Map<string, Promise<void>>();

// The flags and environment of `npm start`, read from package.json.
export { SERVICE_ENV, SERVICE_NODE_FLAGS };
/** The seeded API key (`svc_` and 40 letters or digits). */
export const BENCH_KEY = `svc_${'HttpBench'.padEnd(40, '0')}`;
export const BENCH_SLUG = 'bench';

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Asks politely, then kills after `graceMs`. */
async function terminate(child: ChildProcess, ask: () => void, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  ask();
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited(child);
  clearTimeout(timer);
}

/**
 * A helper of servers.ts; `env` is added to the parent's environment (e.g. a reference's
 * key), `nodeArgs` are its node flags (none by default: Node's own heap sizes).
 */
export async function startHelper(role: Role, target?: string, env?: Readonly<Record<string, string>>, nodeArgs: readonly string[] = []): Promise<Running> {
  const child = fork(SERVERS, target === undefined ? [role] : [role, target], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: [...nodeArgs],
    ...(env === undefined ? {} : { env: { ...process.env, ...env } }),
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { port: number }).port));
    child.once('exit', (code) => reject(new Error(`${role} exited with code ${code} before listening`)));
  });
  return {
    name: role,
    url: `http://127.0.0.1:${port}`,
    port,
    pids: [child.pid!],
    stop: () => terminate(child, () => child.send('stop')),
  };
}

export interface ServiceOptions {
  /** Origins (`http://127.0.0.1:port`) the bench configuration may forward to. */
  readonly destinations: readonly string[];
  /** Extra top-level YAML (e.g. `forwarding:`). */
  readonly yaml?: string;
  /** Extra node flags, e.g. `--cpu-prof`. */
  readonly nodeArgs?: readonly string[];
  /** Extra `server:` settings, e.g. `request_timeout: 10m`. */
  readonly server?: string;
  /** Environment over SERVICE_ENV (experiments, e.g. another MALLOC_ARENA_MAX). */
  readonly env?: Readonly<Record<string, string>>;
  /** The entry point (`serviceMain()`: another checkout's, or a bundle); default: this checkout's `src/main.ts`. */
  readonly main?: string;
  /**
   * Serve the admin listener (`/metrics`) on a free loopback port instead of turning it
   * off; its URL is then `adminUrl`.
   */
  readonly admin?: boolean;
  /** The `store:` block (e.g. `{ url: postgres://... }`) in place of the SQLite file in the temp dir. */
  readonly store?: string;
  /** The whole `seed:` block in place of the owner, its key and the `bench` configuration. */
  readonly seed?: string;
}

type Service = Running & { dir: string; adminUrl: string | null; output(): string };

/**
 * `node --max-semi-space-size=4 --heap-growing-percent=50 --no-allocation-site-pretenuring src/main.ts serve --config <temp yaml>` with a temp-dir
 * store (WAL file, logs written by the default writer, as in production), `logging.level:
 * warn` and the master key from SVC_MASTER_KEY.
 *
 * The first start of each entry point and set of node flags is preceded by a throwaway
 * one on a SQLite store, which fills the compile cache: no measured process pays for type
 * stripping (Node's stripper stays loaded for the life of a process that used it, 15–17
 * MiB). Node keeps one cache per set of V8 flags, and `--help` loads only the command
 * line: a warm-up without the flags, or with `--help`, leaves the first measured start
 * after any change cold. Profiling flags (`--cpu-prof…`, `--heap-prof…`) are left off the
 * warm-up.
 */
export async function startService(options: ServiceOptions): Promise<Service> {
  const main = options.main ?? serviceMain();
  // Profiling flags are Node's, not V8's: they do not change the cache, and the warm-up
  // must not write a profile beside the measured one.
  const warmArgs = (options.nodeArgs ?? []).filter((a) => !/^--(cpu|heap)-prof/.test(a));
  const key = [main, ...warmArgs].join(' ');
  let warmUp = compileCacheWarm.get(key);
  if (warmUp === undefined) {
    warmUp = spawnService({ destinations: options.destinations, main, nodeArgs: warmArgs }).then((svc) => svc.stop());
    compileCacheWarm.set(key, warmUp);
  }
  await warmUp;
  return spawnService({ ...options, main });
}

async function spawnService(options: ServiceOptions & { main: string }): Promise<Service> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-http-bench-'));
  const config = join(dir, 'svc.yaml');
  // The admin listener cannot share port 0 with the main one: the main port is found in
  // /proc as the LISTEN socket that is not the admin's, so the admin's is chosen here.
  const adminPort = options.admin === true ? await freePort() : null;
  writeFileSync(
    config,
    `server: { listen: 127.0.0.1:0, admin_listen: ${adminPort === null ? '"off"' : `127.0.0.1:${adminPort}`}${options.server === undefined ? '' : `, ${options.server}`} }
store: ${options.store ?? `{ path: ${JSON.stringify(join(dir, 'svc.db'))} }`}
keys: { master_key_file: ${JSON.stringify(join(dir, 'unused-master.key'))} }
logging: { level: warn }
${options.yaml ?? ''}
${options.seed ?? `seed:
  users:
    - { name: Bench Owner, email: owner@bench.example, roles: [owner] }
  api_keys:
    - { name: bench, user: owner@bench.example, key: ${BENCH_KEY} }
  configurations:
    - name: bench
      type: encryption
      proxy_slug: ${BENCH_SLUG}
      destinations: [${options.destinations.map((d) => JSON.stringify(`${d}/`)).join(', ')}]`}
`,
  );
  const child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, ...(options.nodeArgs ?? []), options.main, 'serve', '--config', config], {
    // As `npm start` and the image run it: the compile cache (warm, so the type stripper is
    // never loaded) and two malloc arenas.
    env: { PATH: process.env['PATH'] ?? '', SVC_MASTER_KEY: randomBytes(32).toString('base64'), NODE_COMPILE_CACHE: COMPILE_CACHE, ...SERVICE_ENV, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: dir,
  });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  let port: number;
  try {
    port = await listeningPort(child, 20_000, () => output, adminPort);
  } catch (err) {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    name: 'svc',
    url: `http://127.0.0.1:${port}`,
    port,
    pids: [child.pid!],
    dir,
    adminUrl: adminPort === null ? null : `http://127.0.0.1:${adminPort}`,
    output: () => output,
    // SIGTERM lets the service drain and exit normally, which also writes --cpu-prof output.
    stop: async () => {
      await terminate(child, () => child.kill('SIGTERM'), 15_000);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * At `warn` the service logs nothing when it starts listening, so the port it picked is
 * read from /proc: the LISTEN socket among the inodes of its open file descriptors.
 */
async function listeningPort(child: ChildProcess, timeoutMs: number, output: () => string, adminPort: number | null): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`the service exited with ${child.exitCode}:\n${output()}`);
    const ports = listenPortsOf(child.pid!);
    // With an admin listener, wait until both listen: the main one is the other.
    const port = adminPort === null ? ports[0] : ports.includes(adminPort) ? ports.find((p) => p !== adminPort) : undefined;
    if (port !== undefined) return port;
    await sleep(50);
  }
  throw new Error(`the service did not listen within ${timeoutMs} ms:\n${output()}`);
}

function listenPortsOf(pid: number): number[] {
  const inodes = new Set<string>();
  const ports: number[] = [];
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return ports;
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m !== null) inodes.add(m[1]!);
    } catch {
      // closed while listing
    }
  }
  for (const table of ['tcp', 'tcp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // local_address is cols[1] (ADDR:PORT in hex), st is cols[3] (0A = LISTEN), inode is cols[9].
      if (cols[3] === '0A' && cols[9] !== undefined && inodes.has(cols[9])) ports.push(parseInt(cols[1]!.split(':')[1]!, 16));
    }
  }
  return ports;
}

/**
 * nginx cannot listen on port 0, so a free port is found by binding one and closing it;
 * a race with another process is possible, and then nginx fails to start and is retried.
 */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export function nginxAvailable(): boolean {
  return spawnSync('nginx', ['-v'], { stdio: 'ignore' }).status === 0;
}

export function installNginx(log: (m: string) => void): boolean {
  log('installing nginx (apt-get install -y nginx)...');
  const result = spawnSync('sh', ['-c', 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx'], { stdio: 'inherit' });
  return result.status === 0 && nginxAvailable();
}

function nginxConfig(dir: string, port: number, upstream: number, workers: number): string {
  return `# Written by bench/http/processes.ts: a loopback reverse proxy to the echo backend.
daemon off;
master_process on;
worker_processes ${workers};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  upstream echo {
    server 127.0.0.1:${upstream};
    keepalive 64;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://echo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`;
}

export async function startNginx(upstreamPort: number, workers: number): Promise<Running> {
  for (let attempt = 1; ; attempt++) {
    const dir = mkdtempSync(join(tmpdir(), 'svc-bench-nginx-'));
    // Workers run as nobody when started by root: let them reach their temp directories.
    chmodSync(dir, 0o755);
    const port = await freePort();
    writeFileSync(join(dir, 'nginx.conf'), nginxConfig(dir, port, upstreamPort, workers));
    const child = spawn('nginx', ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'inherit', 'inherit'] });
    const up = await waitForPort(port, child, 10_000);
    if (!up) {
      const log = readText(join(dir, 'error.log'));
      child.kill('SIGKILL');
      await exited(child);
      rmSync(dir, { recursive: true, force: true });
      if (attempt < 3 && /Address already in use/.test(log)) continue;
      throw new Error(`nginx did not start:\n${log}`);
    }
    const workerPids = await childrenOf(child.pid!, workers);
    return {
      name: 'nginx',
      url: `http://127.0.0.1:${port}`,
      port,
      pids: [child.pid!, ...workerPids],
      stop: async () => {
        // SIGQUIT: graceful shutdown of the master and its workers.
        await terminate(child, () => child.kill('SIGQUIT'));
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

async function waitForPort(port: number, child: ChildProcess, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) return false;
    const ok = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{}' }).then(
      async (r) => (await r.arrayBuffer(), true),
      () => false,
    );
    if (ok) return true;
    await sleep(50);
  }
  return false;
}

async function childrenOf(pid: number, expected: number): Promise<number[]> {
  for (let i = 0; i < 50; i++) {
    const found: number[] = [];
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const stat = readText(`/proc/${entry}/stat`);
      // Field 4 (ppid) follows the parenthesised command name, which may hold spaces.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid) found.push(Number(entry));
    }
    if (found.length >= expected) return found;
    await sleep(50);
  }
  throw new Error(`nginx did not start ${expected} worker(s)`);
}

const TICKS_PER_SECOND = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** User + system CPU seconds used so far by `pids` (all their threads). */
export function cpuSeconds(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    const stat = readText(`/proc/${pid}/stat`);
    if (stat === '') continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of /proc/pid/stat, 12 and 13 after the name.
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks / TICKS_PER_SECOND;
}

/** VmRSS and VmHWM summed over `pids` (nginx: master and workers), in bytes. */
export function memoryOf(pids: readonly number[]): { rss: number; hwm: number } {
  let rss = 0;
  let hwm = 0;
  for (const pid of pids) {
    const m = memory(pid);
    rss += m.rss;
    hwm += m.hwm;
  }
  return { rss, hwm };
}

/** VmRSS and VmHWM of a process, in bytes (0 once it is gone). */
export function memory(pid: number): { rss: number; hwm: number } {
  const status = readText(`/proc/${pid}/status`);
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}
