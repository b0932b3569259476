/**
 * `serve` opens the store and begins the seed's password decisions before it loads the rest
 * of the program (src/cli/run.ts): the decisions must come out as they did when the app
 * made them itself. A seeded password is hashed at the first start, kept (the same hash)
 * while it is unchanged, and replaced when the seed changes it, so the old one stops working.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { startChild } from '../support/child.ts';

const KEY = `svc_${'p'.repeat(40)}`;
const seed = (password: string) => `
seed:
  users:
    - { name: Ada, email: ada@example.com, password: "${password}", roles: [owner] }
  api_keys:
    - { name: ada, user: ada@example.com, key: "${KEY}" }
`;

async function login(url: string, password: string): Promise<number> {
  const res = await fetch(`${url}/api/v2/auth/login`, {
    method: 'POST',
    headers: { 'x-svc-authorization': KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'ada@example.com', password }),
  });
  await res.arrayBuffer();
  return res.status;
}

/** Starts `serve` on the directory's store, checks the logins, stops it; returns Ada's stored hash. */
async function startOnce(t: TestContext, dir: string, env: Record<string, string>, password: string, logins: Record<string, number>): Promise<string> {
  const child = await startChild(t, seed(password), env, [], { dir });
  for (const [tried, status] of Object.entries(logins)) assert.equal(await login(child.url, tried), status, `login with "${tried}" while the seed says "${password}"`);
  const exited = once(child.process, 'exit');
  child.process.kill('SIGTERM');
  const [code] = await exited;
  assert.equal(code, 0, child.output());
  assert.doesNotMatch(child.output(), /unhandled/i);
  const store = openStore(join(dir, 'svc.db'));
  try {
    const hash = (await store.users.findByEmail('ada@example.com'))?.passwordHash;
    assert.ok(typeof hash === 'string' && hash.startsWith('scrypt$'));
    return hash;
  } finally {
    await store.close();
  }
}

test('serve hashes a seeded password at the first start, keeps the hash while it is unchanged and replaces it when the seed changes it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-serve-start-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };

  const first = await startOnce(t, dir, env, 'first correct horse', { 'first correct horse': 200, 'second correct horse': 401 });
  const again = await startOnce(t, dir, env, 'first correct horse', { 'first correct horse': 200 });
  assert.equal(again, first, 'an unchanged password keeps its stored hash');
  const changed = await startOnce(t, dir, env, 'second correct horse', { 'first correct horse': 401, 'second correct horse': 200 });
  assert.notEqual(changed, first);
});
