/**
 * Test support: runs the real service as a child process (`node src/main.ts serve`) with a
 * config written to a temp dir, for tests that measure the process itself (memory,
 * signals, exit codes).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { SERVICE_ENV, SERVICE_NODE_FLAGS } from './service-command.ts';

export interface Child {
  readonly process: ChildProcess;
  readonly url: string;
  readonly dir: string;
  output(): string;
  /** Peak resident set size so far, from /proc (Linux). */
  peakRss(): number;
  /** Current resident set size, from /proc (Linux). */
  rss(): number;
}

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;

export { SERVICE_ENV, SERVICE_NODE_FLAGS };
/**
 * As in the image: a compile cache, filled by a throwaway start of the whole service before
 * the first child with each set of node flags (Node keeps one cache per set of V8 flags,
 * and `--help` would load only the command line), so no measured child carries Node's
 * type stripper.
 */
const COMPILE_CACHE = join(tmpdir(), 'svc-sidecar-test-compile-cache');
/** The warm-up of each set of node flags, once started: children started meanwhile wait for it. */
const warmed = new Map<string, Promise<void>>();

function procStatus(pid: number | undefined, field: string): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status);
  return kb === null ? 0 : Number(kb[1]) * 1024;
}

export interface ChildOptions {
  /**
   * Run in this directory (its svc.db and svc.yaml) instead of a fresh temp dir, so a test
   * can restart the service on the store a previous child left behind. The caller owns
   * the directory: it is not removed when the test ends.
   */
  readonly dir?: string;
  /** The `server:` block, in place of `{ listen: 127.0.0.1:0, admin_listen: "off" }`. */
  readonly server?: string;
  /** The `store:` block, in place of the SQLite file in the directory (e.g. `{ url: ... }`). */
  readonly store?: string;
}

export async function startChild(t: TestContext, yaml: string, env: Record<string, string> = {}, nodeArgs: string[] = [], options: ChildOptions = {}): Promise<Child> {
  const flags = nodeArgs.join(' ');
  let warmUp = warmed.get(flags);
  if (warmUp === undefined) {
    warmUp = spawnChild(t, '', {}, nodeArgs, {}).then(async (child) => {
      const exited = new Promise((resolve) => child.process.once('exit', resolve));
      // SIGTERM: the service exits normally, and Node writes the cache at exit.
      child.process.kill('SIGTERM');
      await exited;
    });
    warmed.set(flags, warmUp);
  }
  await warmUp;
  return spawnChild(t, yaml, env, nodeArgs, options);
}

async function spawnChild(t: TestContext, yaml: string, env: Record<string, string>, nodeArgs: string[], options: ChildOptions): Promise<Child> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'svc-child-'));
  const configPath = join(dir, 'svc.yaml');
  writeFileSync(configPath, `server: ${options.server ?? '{ listen: 127.0.0.1:0, admin_listen: "off" }'}\nstore: ${options.store ?? `{ path: ${JSON.stringify(join(dir, 'svc.db'))} }`}\nlogging: { level: info }\n${yaml}`);
  const child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, ...nodeArgs, MAIN, 'serve', '--config', configPath], {
    env: { PATH: process.env['PATH'] ?? '', SVC_MASTER_KEY: randomBytes(32).toString('base64'), NODE_COMPILE_CACHE: COMPILE_CACHE, ...SERVICE_ENV, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
    if (options.dir === undefined) rmSync(dir, { recursive: true, force: true });
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the service did not start:\n${output}`)), 15_000);
    const check = () => {
      const match = /"listen":"([^"]+)"/.exec(output);
      if (match !== null) {
        clearTimeout(timer);
        child.stdout!.off('data', check);
        resolve(`http://${match[1]}`);
      }
    };
    child.stdout!.on('data', check);
    child.once('exit', (code) => reject(new Error(`the service exited with ${code}:\n${output}`)));
  });
  return {
    process: child,
    url,
    dir,
    output: () => output,
    peakRss: () => procStatus(child.pid, 'VmHWM'),
    rss: () => procStatus(child.pid, 'VmRSS'),
  };
}
