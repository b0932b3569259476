/**
 * `node src/main.ts` on a Node older than 24 says, in one line, which Node is needed and
 * how to get it, and exits 1, before importing anything that needs Node 24.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { delimiter, dirname, join, resolve } from 'node:path';

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;
const ROOT = resolve(dirname(MAIN), '..');
const MESSAGE = /^svc-sidecar needs Node\.js 24 or later, and this is Node\.js v(\d+)\.\d+\.\d+: run "npm ci" in the project \(it installs Node 24 into node_modules\), then "npm start" or "npx svc-sidecar serve --config <file>"\.\n$/;

function run(node: string, args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(node, [...args], { timeout: 60_000, cwd: ROOT }, (error, stdout, stderr) => {
      done({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stdout, stderr });
    });
  });
}

function versionOf(node: string): [number, number] | null {
  try {
    const match = /^v(\d+)\.(\d+)\./.exec(execFileSync(node, ['--version'], { encoding: 'utf8', timeout: 10_000 }));
    return match === null ? null : [Number(match[1]), Number(match[2])];
  } catch {
    return null;
  }
}

/**
 * Nodes older than 24 on this machine: `SVC_TEST_OLD_NODE`, then `node` and `nodejs` along
 * PATH (skipping the project's own Node 24), then the usual system places.
 */
function olderNodes(): Array<{ path: string; version: [number, number] }> {
  const candidates = [process.env['SVC_TEST_OLD_NODE'] ?? ''];
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) candidates.push(join(dir, 'node'), join(dir, 'nodejs'));
  candidates.push('/usr/bin/node', '/usr/local/bin/node', '/usr/bin/nodejs');
  const found = new Map<string, [number, number]>();
  for (const candidate of candidates) {
    if (candidate === '' || !existsSync(candidate)) continue;
    const path = realpathSync(candidate);
    if (found.has(path)) continue;
    const version = versionOf(path);
    if (version !== null && version[0] < 24) found.set(path, version);
  }
  return [...found].map(([path, version]) => ({ path, version }));
}

/** Node runs `.ts` files by itself from 22.18 (and 23.6); before that it refuses them unread. */
function stripsTypes([major, minor]: [number, number]): boolean {
  return (major === 22 && minor >= 18) || (major === 23 && minor >= 6);
}

const older = olderNodes();
const runnable = older.find((node) => stripsTypes(node.version));
const skip =
  runnable !== undefined
    ? false
    : older.length === 0
      ? 'no Node older than 24 was found (SVC_TEST_OLD_NODE, PATH, /usr/bin/node)'
      : `the older Node here (${older.map((node) => `${node.path} v${node.version.join('.')}`).join(', ')}) refuses .ts files before running any ` +
        'of them (Node runs TypeScript from 22.18): set SVC_TEST_OLD_NODE to a Node 22.18+ or 23.x binary to run this test';

test('node src/main.ts on an older Node prints one line naming Node 24 and how to get it, and exits 1', { skip }, async () => {
  const node = runnable!;
  // --help: without the check it would print the help and exit 0, starting nothing.
  const result = await run(node.path, [MAIN, '--help']);
  assert.equal(result.code, 1, result.stderr);
  assert.equal(result.stdout, '');
  assert.match(result.stderr, MESSAGE);
  assert.equal(MESSAGE.exec(result.stderr)?.[1], String(node.version[0]));
});

test('the version check runs before anything else is imported', async () => {
  // src/main.ts has no static import: those would load (and fail on old syntax) before any check.
  const code = readFileSync(MAIN, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
  assert.doesNotMatch(code, /^\s*import\s/m);
  // This Node, told it is 22.18: the check answers, and --help (which would exit 0) never runs.
  const pretend = 'data:text/javascript,Object.defineProperty(process.versions,"node",{value:"22.18.0"})';
  const result = await run(process.execPath, ['--import', pretend, MAIN, '--help']);
  assert.equal(result.code, 1, result.stderr);
  assert.equal(result.stdout, '');
  assert.match(result.stderr, MESSAGE);
  // And on Node 24 itself the command runs.
  const real = await run(process.execPath, [MAIN, '--help']);
  assert.equal(real.code, 0, real.stderr);
  assert.match(real.stdout, /^usage: svc-sidecar/);
});
