/**
 * A throwaway PostgreSQL server for tests: Debian's `postgresql` binaries (`.ci/run`
 * installs the package when they are absent), a cluster in a temporary directory, run as a
 * non-root user (the `postgres` system user, through setpriv, when the tests run as root), listening on
 * loopback only with trust authentication, durability off for speed. One cluster per test
 * file; each test takes its own database.
 *
 * Without the binaries the PostgreSQL tests are skipped with the reason, except where
 * they are required (CI, or SVC_REQUIRE_POSTGRES=1): there a missing server fails.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);
const READY_TIMEOUT_MS = 30_000;

export interface Postgres {
  /** `postgres://` URL of the `postgres` database, as the cluster's superuser `svc`. */
  readonly url: string;
  readonly port: number;
  /** Creates database `name` and answers its URL. */
  createDatabase(name: string): Promise<string>;
  /** Runs `sql` in database `database` with psql; answers its rows as tab-separated text. */
  psql(database: string, sql: string): Promise<string>;
  /** The server's process id, while it runs. */
  readonly pid: number;
  readonly dir: string;
  /** Stops the server at once and removes its directory. */
  stop(): Promise<void>;
}

/** The newest installed server's binary directory, or null. */
export function postgresBinDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((name) => /^\d+$/.test(name) && existsSync(join(root, name, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length === 0 ? null : join(root, versions[0]!, 'bin');
}

/** Why the PostgreSQL tests cannot run here, or null when they can; throws where they are required. */
export function postgresUnavailable(): string | null {
  if (postgresBinDir() !== null) return null;
  const reason = 'PostgreSQL server binaries are not installed (Debian package postgresql; .ci/run installs it)';
  if (process.env['CI'] !== undefined || process.env['SVC_REQUIRE_POSTGRES'] === '1') throw new Error(reason);
  return reason;
}

/** Runs a command as the cluster's owner: the `postgres` user when this process is root, else as itself. */
function asOwner(command: string, args: readonly string[]): [string, string[]] {
  // setpriv executes the command in its own place (runuser would stay in between as its
  // parent, and the signal that stops the server would reach runuser instead).
  return userInfo().uid === 0 ? ['setpriv', ['--reuid=postgres', '--regid=postgres', '--init-groups', command, ...args]] : [command, [...args]];
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

const started = new Set<ChildProcess>();
// A test process that ends without stopping its clusters takes them along.
process.on('exit', () => {
  for (const child of started) child.kill('SIGKILL');
});

export async function startPostgres(): Promise<Postgres> {
  const bin = postgresBinDir();
  if (bin === null) throw new Error('PostgreSQL server binaries are not installed');
  const dir = mkdtempSync(join(tmpdir(), 'svc-pg-'));
  if (userInfo().uid === 0) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const data = join(dir, 'data');
  const [initdb, initArgs] = asOwner(join(bin, 'initdb'), ['-D', data, '-U', 'svc', '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C']);
  await run(initdb, initArgs);

  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const [postgres, args] = asOwner(join(bin, 'postgres'), [
      '-D', data, '-k', dir, '-h', '127.0.0.1', '-p', String(port),
      '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'logging_collector=off',
    ]);
    const child = spawn(postgres, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    started.add(child);
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      if (stderr.length < 20_000) stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const ready = await waitReady(bin, port, exited);
    if (!ready) {
      started.delete(child);
      // Another process took the port between the probe and the bind: try another.
      if (attempt < 3 && /could not bind|already in use/i.test(stderr)) continue;
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`PostgreSQL did not start:\n${stderr}`);
    }
    const psql = async (database: string, sql: string): Promise<string> => {
      const { stdout } = await run(join(bin, 'psql'), ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-At', '-h', '127.0.0.1', '-p', String(port), '-U', 'svc', '-d', database, '-c', sql]);
      return stdout;
    };
    const url = (database: string) => `postgres://svc@127.0.0.1:${port}/${database}`;
    return {
      url: url('postgres'),
      port,
      pid: child.pid!,
      dir,
      psql,
      async createDatabase(name) {
        if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`not a database name: ${name}`);
        await psql('postgres', `CREATE DATABASE ${name}`);
        return url(name);
      },
      async stop() {
        if (child.exitCode === null && child.signalCode === null) {
          // SIGQUIT: the immediate shutdown; nothing here needs to outlive the test.
          child.kill('SIGQUIT');
          await exited;
        }
        started.delete(child);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
}

async function waitReady(bin: string, port: number, exited: Promise<number | null>): Promise<boolean> {
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline && !gone) {
    try {
      await run(join(bin, 'pg_isready'), ['-q', '-h', '127.0.0.1', '-p', String(port), '-U', 'svc']);
      return true;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  return false;
}

/** One server for a test file, started before its first test and stopped after its last. */
export interface FileServer {
  /** False when the server can run here, else why not: pass it as a test's `skip`. */
  readonly skip: string | false;
  /** The running server (only inside a test that was not skipped). */
  readonly server: Postgres;
  /** A new database of its own: its name (for psql) and URL. */
  database(prefix: string): Promise<{ readonly name: string; readonly url: string }>;
}

/** Registers the file's before/after hooks: call once at the top level of a test file. */
export function postgresPerFile(): FileServer {
  const skip = postgresUnavailable() ?? false;
  let running: Postgres | null = null;
  let databases = 0;
  if (skip === false) {
    before(async () => {
      running = await startPostgres();
    });
    after(async () => {
      await running?.stop();
    });
  }
  const server = (): Postgres => {
    if (running === null) throw new Error('the PostgreSQL server of this file is not running (skipped, or used outside a test)');
    return running;
  };
  return {
    skip,
    get server() {
      return server();
    },
    async database(prefix) {
      const name = `${prefix}_${++databases}`;
      return { name, url: await server().createDatabase(name) };
    },
  };
}
