/**
 * What stops a start (DESIGN §13): a master key that is not the store's, a missing key next
 * to a store that holds wrapped keys, and a listener that cannot bind. Each is a clear
 * message and exit status 1, never a process that says ready and answers 500, or one that
 * keeps running half-started.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp } from '../../src/app.ts';
import { createCertificateAuthority } from '../../src/crypto/certificates.ts';
import { loadConfig } from '../../src/config/load.ts';
import { MasterKeyMismatchError, MasterKeyMissingError } from '../../src/errors.ts';
import { openStore } from '../../src/store/db.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';

const MAIN = new URL('../../src/main.ts', import.meta.url).pathname;
const SEED = `seed:
  configurations: [{ name: payments, proxy_slug: payments }]`;

function tempDir(t: import('node:test').TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-start-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function config(dir: string, extra = '') {
  return loadConfig({
    text: `server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ${JSON.stringify(join(dir, 'svc.db'))} }
keys: { master_key_file: ${JSON.stringify(join(dir, 'master.key'))} }
${extra}
${SEED}`,
    env: {},
  });
}

async function startAndStop(dir: string, env: NodeJS.ProcessEnv): Promise<void> {
  const app = await createApp(config(dir), { env, logger: createLogger('silent') });
  await app.close();
}

test('a store refuses a master key other than the one its keys are wrapped under, naming the store', async (t) => {
  const dir = tempDir(t);
  const a = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };
  await startAndStop(dir, a);
  await startAndStop(dir, a);
  const b = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };
  await assert.rejects(
    createApp(config(dir), { env: b, logger: createLogger('silent') }),
    (err: unknown) => err instanceof MasterKeyMismatchError && err.message === `The master key does not match the one this store was created with (store: ${join(dir, 'svc.db')}).`,
  );
});

test('a store from before check values is checked against a key it holds, then remembers the check', async (t) => {
  const dir = tempDir(t);
  const a = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };
  await startAndStop(dir, a);
  const store = openStore(join(dir, 'svc.db'));
  sqliteConnection(store).exec("DELETE FROM store_meta WHERE name = 'master_key_check'");
  store.close();
  await assert.rejects(createApp(config(dir), { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') }, logger: createLogger('silent') }), MasterKeyMismatchError);
  await startAndStop(dir, a);
  const again = openStore(join(dir, 'svc.db'));
  assert.match((await again.meta.get('master_key_check')) ?? '', /^[0-9a-f]{64}$/);
  again.close();
});

test('no development key is generated next to a store that holds wrapped keys', async (t) => {
  const dir = tempDir(t);
  await startAndStop(dir, {});
  assert.ok(existsSync(join(dir, 'master.key')), 'the first start generated a development key');
  rmSync(join(dir, 'master.key'));
  await assert.rejects(createApp(config(dir), { env: {}, logger: createLogger('silent') }), MasterKeyMissingError);
  assert.equal(existsSync(join(dir, 'master.key')), false, 'no new key was written');
});

/** Runs `svc-sidecar serve` to its end; resolves with its exit code and output. */
function serve(configPath: string, env: NodeJS.ProcessEnv, timeoutMs = 20_000): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, 'serve', '--config', configPath], { env: { PATH: process.env['PATH'] ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`still running after ${timeoutMs} ms:\n${output}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

test('the process exits 1 naming the listener and the address when one listener cannot bind; none stays bound', async (t) => {
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  t.after(() => taken.close());
  const port = (taken.address() as AddressInfo).port;
  const dir = tempDir(t);
  const path = join(dir, 'svc.yaml');
  for (const [listener, yaml] of [
    ['admin', `server: { listen: 127.0.0.1:0, admin_listen: 127.0.0.1:${port} }`],
    ['relay', `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nrelay: { listen: 127.0.0.1:${port}, upstream: "http://127.0.0.1:9" }`],
    ['main', `server: { listen: 127.0.0.1:${port}, admin_listen: 127.0.0.1:0 }`],
    ['egress-proxy', `server: { listen: 127.0.0.1:0, admin_listen: "off" }\negress_proxy: { listen: 127.0.0.1:${port}, ca: { cert_file: ${JSON.stringify(join(dir, 'ca', 'ca.pem'))}, key_file: ${JSON.stringify(join(dir, 'ca', 'ca.key'))} } }`],
  ] as const) {
    writeFileSync(path, `${yaml}\nstore: { path: ${JSON.stringify(join(dir, 'svc.db'))} }\nkeys: { master_key_file: ${JSON.stringify(join(dir, 'master.key'))} }\n`);
    const { code, output } = await serve(path, {});
    assert.equal(code, 1, `${listener}: ${output}`);
    assert.ok(output.includes(`The ${listener} listener cannot listen on 127.0.0.1:${port} (EADDRINUSE).`), `${listener}: ${output}`);
  }
});

test('the process exits 1 when the egress proxy CA key does not belong to its certificate, and overwrites neither', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'svc.yaml');
  const first = await createCertificateAuthority('one');
  const second = await createCertificateAuthority('two');
  writeFileSync(join(dir, 'ca.pem'), first.cert);
  writeFileSync(join(dir, 'ca.key'), second.key, { mode: 0o600 });
  writeFileSync(
    path,
    `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nstore: { path: ${JSON.stringify(join(dir, 'svc.db'))} }\nkeys: { master_key_file: ${JSON.stringify(join(dir, 'master.key'))} }\n` +
      `egress_proxy: { listen: 127.0.0.1:0, ca: { cert_file: ${JSON.stringify(join(dir, 'ca.pem'))}, key_file: ${JSON.stringify(join(dir, 'ca.key'))} } }\n`,
  );
  const { code, output } = await serve(path, {});
  assert.equal(code, 1, output);
  assert.ok(output.includes(`The egress proxy CA (${join(dir, 'ca.pem')}, ${join(dir, 'ca.key')}) cannot be used: the key does not belong to the certificate; restore the pair, or run svc-sidecar egress-ca --rotate for a new one.`), output);
  assert.equal(readFileSync(join(dir, 'ca.pem'), 'utf8'), first.cert);
  assert.equal(readFileSync(join(dir, 'ca.key'), 'utf8'), second.key);
});

test('the process exits 1 with the message when the master key is not the store\'s', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'svc.yaml');
  writeFileSync(path, `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nstore: { path: ${JSON.stringify(join(dir, 'svc.db'))} }\n${SEED}\n`);
  await startAndStop(dir, { SVC_MASTER_KEY: randomBytes(32).toString('base64') });
  const { code, output } = await serve(path, { SVC_MASTER_KEY: randomBytes(32).toString('base64') });
  assert.equal(code, 1, output);
  assert.ok(output.includes(`The master key does not match the one this store was created with (store: ${join(dir, 'svc.db')}).`), output);
});
