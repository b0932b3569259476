/**
 * docs/egress.md's configuration example is one the service starts with, the CA created
 * where it says.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';

const DOC = readFileSync(new URL('../../docs/egress.md', import.meta.url), 'utf8');

test('the configuration example of docs/egress.md loads and starts', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-egress-doc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const blocks = [...DOC.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '').filter((block) => /^egress_proxy:/m.test(block));
  assert.equal(blocks.length, 1);
  const text = `server: { listen: 127.0.0.1:0, admin_listen: "off" }\nstore: { path: ":memory:" }\nseed: { configurations: [{ name: payments }] }\n${blocks[0]!
    .replace(/listen: [^\s#]+/g, 'listen: 127.0.0.1:0')
    .replace(/\.\/data\//g, `${dir}/data/`)}`;
  const config = loadConfig({ text, env: {} });
  assert.equal(config.egress_proxy!.hosts.length, 2);
  const app = await createApp(config, { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') }, logger: createLogger('silent') });
  await app.listen();
  await app.close();
  assert.ok(existsSync(join(dir, 'data', 'egress-ca.pem')) && existsSync(join(dir, 'data', 'egress-ca.key')));
});
