/**
 * `svc-sidecar keys rotate` and `keys destroy` against a control plane's store on
 * PostgreSQL (`store.url`), through the real command line: the operator's tools work on
 * either store.
 */
import assert from 'node:assert/strict';
import { runCli as cli, type CliRun } from '../support/cli.ts';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openPostgresStore } from '../../src/store/postgres/open.ts';
import { postgresPerFile } from '../support/postgres.ts';

const postgres = postgresPerFile();
const MASTER_KEY = randomBytes(32).toString('base64');

const runCli = (args: string[]): Promise<CliRun> => cli(args, { env: { SVC_MASTER_KEY: MASTER_KEY } });

test('keys rotate and keys destroy work on a store on PostgreSQL', { skip: postgres.skip }, async (t) => {
  const { url } = await postgres.database('svc_keys');
  const dir = mkdtempSync(join(tmpdir(), 'svc-keys-pg-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'svc.yaml');
  writeFileSync(
    path,
    `store: { url: ${JSON.stringify(url)} }
keys: { master_key_file: /nonexistent/never-used.key, destroy_after: 0s }
logging: { level: warn }
seed:
  users: [{ name: Ada, email: ada@example.com, roles: [owner] }]
  configurations:
    - { name: payments, proxy_slug: pay-slug, fields: [card.number] }
`,
  );
  const rotated = await runCli(['keys', 'rotate', '--configuration', 'payments', '--config', path]);
  assert.equal(rotated.code, 0, rotated.stderr);
  assert.equal(rotated.stdout, '2\n');
  const destroyed = await runCli(['keys', 'destroy', '--configuration', 'payments', '--version', '1', '--confirm', 'payments/v1', '--config', path]);
  assert.equal(destroyed.code, 0, destroyed.stderr);
  assert.equal(destroyed.stdout, 'destroyed key version 1 of "payments"\n');

  const store = await openPostgresStore(url, { max: 1 });
  t.after(() => store.close());
  const payments = (await store.configurations.findByName('payments'))!;
  const keys = await store.configurations.keys(payments.id);
  assert.deepEqual(
    keys.map((k) => ({ version: k.version, destroyed: k.destroyedAt !== null, bytes: k.wrapped.length })),
    [
      { version: 1, destroyed: true, bytes: 0 },
      { version: 2, destroyed: false, bytes: keys[1]!.wrapped.length },
    ],
  );
  assert.ok(keys[1]!.wrapped.length > 0);
  assert.equal(payments.keyVersion, 2);
});
