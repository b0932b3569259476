import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { startChild } from '../support/child.ts';

const KEY = `svc_${'s'.repeat(40)}`;
const SEED = `
seed:
  users:
    - { name: Ada, email: ada@example.com, roles: [owner] }
    - { name: Bob, email: bob@example.com, roles: [viewer] }
  api_keys:
    - { name: ada, user: ada@example.com, key: "${KEY}" }
    - { name: bob generated, user: bob@example.com }
  configurations:
    - { name: payments, type: encryption, proxy_slug: payments, fields: [ssn], destinations: ["https://vendor.example/"] }
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff", roles: [owner] }
`;

// Regression: one of the two used to exit with "database is locked" now and then (about one
// start in five here): SQLite refuses the switch to WAL at once, without waiting on
// busy_timeout, when the other connection is switching the new file at the same moment.
test('two instances starting together on one empty store both start, and the seed is applied once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-together-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };
  const [a, b] = await Promise.all([startChild(t, SEED, env, [], { dir }), startChild(t, SEED, env, [], { dir })]);

  for (const child of [a, b]) {
    const res = await fetch(`${child.url}/api/v3/encryption/payments/encrypt`, {
      method: 'POST',
      headers: { 'x-svc-authorization': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({ ssn: '123-45-6789' }),
    });
    assert.equal(res.status, 200, await res.text());
  }

  const store = openStore(join(dir, 'svc.db'));
  t.after(() => store.close());
  assert.deepEqual((await store.users.list()).map((user) => user.email), ['ada@example.com', 'bob@example.com']);
  assert.deepEqual((await store.apiKeys.list()).map((key) => key.name).sort(), ['ada', 'bob generated']);
  const configurations = await store.configurations.list();
  assert.deepEqual(configurations.map((c) => c.name), ['payments']);
  assert.deepEqual((await store.configurations.keys(configurations[0]!.id)).map((k) => k.version), [1], 'one key, made once');
  assert.deepEqual((await store.classifications.list()).map((c) => c.name), ['PHI']);
  // Whichever created the generated key showed it; the other found it and did not make another.
  const shown = [a, b].filter((child) => child.output().includes('created API key "bob generated"'));
  assert.equal(shown.length, 1, `${a.output()}\n---\n${b.output()}`);
});
