/**
 * How `npm start` runs the service, read from package.json's `start` script, so tests and
 * benches start it the same way without a copy of its flags to keep in step.
 * test/deploy/dockerfile.test.ts holds the image's command to the same flags.
 */
import { readFileSync } from 'node:fs';

const PACKAGE = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: { start: string } };

function parseStart(start: string): { env: Record<string, string>; flags: string[] } {
  // `NAME=value ... node --flag ... src/main.ts serve ...`
  const m = /^((?:[A-Z_]+=\S+\s+)*)node\s+((?:--\S+\s+)*)src\/main\.ts\s+serve\b/.exec(start);
  if (m === null) throw new Error(`package.json's start script is not \`[NAME=value ...] node [--flag ...] src/main.ts serve ...\`: ${start}`);
  const env = Object.fromEntries(m[1]!.split(/\s+/).filter((a) => a !== '').map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]));
  return { env, flags: m[2]!.split(/\s+/).filter((a) => a !== '') };
}

const START = parseStart(PACKAGE.scripts.start);

/** The node flags `npm start` (and the container image) run the service with. */
export const SERVICE_NODE_FLAGS: readonly string[] = START.flags;

/** The environment `npm start` adds, less its compile cache, which each caller places itself. */
export const SERVICE_ENV: Readonly<Record<string, string>> = Object.fromEntries(Object.entries(START.env).filter(([name]) => name !== 'NODE_COMPILE_CACHE'));
