/**
 * The build `npm start` and the image run (scripts/build.ts): built into a temporary
 * directory with nothing else beside it, it must start, do the data plane's work through
 * every part that loads separately (the log writer's thread, the OpenAPI document), and
 * hold none of the modules the service must never load.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { buildService } from '../../scripts/build.ts';
import { startChild } from '../support/child.ts';
import { startEcho } from '../support/destinations.ts';

const KEY = `svc_${'BuildTest'.padEnd(40, '0')}`;
const PACKAGE = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> };

describe('the build', () => {
  let out = '';
  let inputs: string[] = [];

  before(async () => {
    out = mkdtempSync(join(tmpdir(), 'svc-build-'));
    inputs = await buildService(out);
  });
  after(() => rmSync(out, { recursive: true, force: true }));

  it('bundles the program and its dependencies, without undici\'s index', () => {
    assert.ok(inputs.includes('src/main.ts'));
    assert.ok(inputs.some((f) => f.startsWith('node_modules/undici/lib/dispatcher/')), 'undici\'s agent is bundled');
    assert.ok(inputs.some((f) => f.startsWith('node_modules/zod/')));
    assert.ok(!inputs.includes('node_modules/undici/index.js'), 'undici\'s index loads fetch, WebSocket, mocks (src/http/undici.ts)');
  });

  it('never imports node:http as an ES module (that loads Node\'s bundled undici, src/http/node-http.ts)', () => {
    const files = readdirSync(out).filter((f) => f.endsWith('.mjs'));
    assert.ok(files.length > 3);
    for (const file of files) assert.doesNotMatch(readFileSync(join(out, file), 'utf8'), /from\s*["'](node:)?http["']/, file);
  });

  it('is what npm start runs, after building it', () => {
    assert.match(PACKAGE.scripts['prestart'] ?? '', /^node scripts\/build\.ts$/);
    assert.match(PACKAGE.scripts['start'] ?? '', /\bnode --max-semi-space-size=4 --heap-growing-percent=50 dist\/main\.mjs serve --config config\/svc\.yaml$/);
  });

  it('runs the command line', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [join(out, 'main.mjs'), '--help']);
    assert.match(stdout, /serve/);
  });

  it('serves: /proxy encrypts and forwards, the API decrypts, the log thread writes, the OpenAPI document and metrics answer', async (t) => {
    const echo = await startEcho(t);
    const seed = `logs: { writer: thread, flush_interval: 100ms }
seed:
  users: [{ name: Ada, email: ada@example.com, roles: [owner] }]
  api_keys: [{ name: build, user: ada@example.com, key: ${KEY} }]
  configurations: [{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${echo.url}/"] }]
`;
    const child = await startChild(t, seed, {}, [], { main: join(out, 'main.mjs'), server: '{ listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0 }' });
    const auth = { 'x-svc-authorization': KEY, 'content-type': 'application/json' };

    const proxied = await fetch(`${child.url}/proxy/payments`, { method: 'POST', headers: { ...auth, 'x-svc-destination': `${echo.url}/charges` }, body: '{"card":{"number":"4242424242424242"},"amount":5}' });
    assert.equal(proxied.status, 201);
    const forwarded = JSON.parse(echo.received[0]!.body.toString()) as { card: { number: string }; amount: number };
    assert.match(forwarded.card.number, /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/);
    assert.equal(forwarded.amount, 5);

    const decrypted = await fetch(`${child.url}/api/v3/encryption/payments/decrypt`, { method: 'POST', headers: auth, body: JSON.stringify(forwarded) });
    assert.equal(decrypted.status, 200);
    assert.deepEqual(await decrypted.json(), { card: { number: '4242424242424242' }, amount: 5 });

    const openapi = await fetch(`${child.url}/api/openapi.json`);
    assert.equal(openapi.status, 200);
    assert.equal(((await openapi.json()) as { openapi: string }).openapi.slice(0, 2), '3.');

    // The log thread has written the proxied request's api log row.
    let rows = 0;
    for (let i = 0; i < 50 && rows === 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const logs = await fetch(`${child.url}/api/v3/logs/api?limit=10`, { headers: auth });
      assert.equal(logs.status, 200);
      rows = ((await logs.json()) as { data: unknown[] }).data.length;
    }
    assert.ok(rows > 0, 'the api log has rows');

    const admin = /"admin":"([^"]+)"/.exec(child.output())?.[1];
    const metrics = await (await fetch(`http://${admin}/metrics`)).text();
    assert.match(metrics, /^svc_http_requests_total\{route="\/proxy\/:slug",method="POST",status="201"\} 1$/m);
  });
});
