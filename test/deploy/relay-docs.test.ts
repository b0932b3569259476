/**
 * docs/relay.md's configuration examples are configurations the service starts with: the
 * guard, the routes and the names they refer to.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';

const DOC = readFileSync(new URL('../../docs/relay.md', import.meta.url), 'utf8');

test('every configuration example of docs/relay.md loads and starts', async () => {
  const blocks = [...DOC.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '').filter((block) => /^relay:/m.test(block));
  assert.ok(blocks.length >= 1);
  for (const block of blocks) {
    const text = block
      .replace(/^store: .*$/m, 'store: { path: ":memory:" }')
      .replace(/listen: [^\s#]+/g, 'listen: 127.0.0.1:0')
      .replace(/admin_listen: [^\s#]+/, 'admin_listen: "off"');
    const config = loadConfig({ text, env: {} });
    assert.ok(config.relay?.protect !== undefined, 'the example shows the guard');
    const app = await createApp(config, { env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') }, logger: createLogger('silent') });
    await app.listen();
    await app.close();
  }
});
