/**
 * Test support: runs the command line (`node src/main.ts <args>`) as a child process and
 * answers its exit code and output.
 */
import { execFile } from 'node:child_process';

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;

export interface CliRun {
  /** The exit code; null when the process was killed (a timeout, a signal). */
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  /** Over this process's environment; `undefined` removes a variable. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Kills a command that would start listening instead of exiting. Default 60 s. */
  readonly timeout?: number;
  readonly cwd?: string;
  /** Written to the command's standard input, which is then closed. */
  readonly stdin?: string;
}

export function runCli(args: readonly string[], { env = {}, timeout = 60_000, cwd, stdin = '' }: CliOptions = {}): Promise<CliRun> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[name];
    else childEnv[name] = value;
  }
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [MAIN, ...args], { env: childEnv, timeout, ...(cwd === undefined ? {} : { cwd }) }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stdout, stderr });
    });
    child.stdin!.end(stdin);
  });
}
