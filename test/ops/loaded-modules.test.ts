/**
 * The modules a running data plane loads (bench/README.md, Footprint): what it never uses
 * must not be loaded at all, because every module stays resident for the life of the
 * process in every pod.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LOADED_BASE, loadedModules } from '../support/loaded-modules.ts';

test('a service that has proxied a request has loaded neither Node\'s bundled undici, nor the indexes of undici and prom-client, nor jose, nor the relay\'s modules without a relay, nor the management API\'s handlers', async () => {
  const loaded = await loadedModules(LOADED_BASE);
  assert.equal(loaded.nodeUndici, false, 'an ES import of node:http loads Node\'s undici (src/http/node-http.ts)');
  assert.equal(loaded.undiciIndex, false, 'undici\'s index loads fetch, WebSocket, mocks (src/http/undici.ts)');
  assert.equal(loaded.promClientIndex, false, 'prom-client\'s index loads the summary, the push gateway, the cluster aggregator (src/telemetry/prom-client.ts)');
  assert.equal(loaded.openTelemetry, false, 'prom-client\'s CPU counters load @opentelemetry/api (src/telemetry/default-metrics.ts)');
  assert.equal(loaded.jose, false, 'jose waits for the first login or token (src/auth/jose.ts)');
  assert.equal(loaded.relay, false, 'the relay\'s modules (http-proxy-3) are loaded only where relay: is configured (src/app.ts)');
  assert.equal(loaded.managementApi, false, 'the management API\'s handlers wait for the first request to one of their routes (src/api/routes.ts)');
});

test('no module of the program takes a value from node:http, undici or prom-client (imported, or undici required whole) except through src/http/node-http.ts, src/http/undici.ts and src/telemetry/prom-client.ts', async () => {
  // The runtime test above sees only what starting and one request load; a module loaded
  // later (a management route on first use, the relay) would slip past it. This reads every
  // source file: an import of either that is not type-only loads what those two avoid.
  const { readdirSync, readFileSync } = await import('node:fs');
  const { join, relative } = await import('node:path');
  const root = new URL('../../src/', import.meta.url).pathname;
  const allowed = new Set(['http/node-http.ts', 'http/undici.ts', 'telemetry/prom-client.ts']);
  const valueImport = /^\s*(?:import\s+(?!type\b)[^;]*?from\s*|export\s+(?!type\b)[^;]*?from\s*|[^\n]*\bimport\s*\()\s*['"](?:(?:node:)?http|undici|prom-client)['"]/gm;
  // `require` reads only what it is asked for from node:http, but undici's index loads
  // everything however it is called for (`require`, a `createRequire` of its own).
  const indexRequire = /^[^\n]*\(\s*['"]undici['"]\s*\)/gm;
  const offenders: string[] = [];
  for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue;
    const path = join(entry.parentPath, entry.name);
    const name = relative(root, path);
    if (allowed.has(name)) continue;
    const text = readFileSync(path, 'utf8');
    for (const match of [...text.matchAll(valueImport), ...text.matchAll(indexRequire)]) offenders.push(`${name}: ${match[0].trim()}`);
  }
  assert.deepEqual(offenders, []);
});

test('a service with a relay loads the relay\'s modules', async () => {
  const loaded = await loadedModules(`${LOADED_BASE}relay:
  listen: 127.0.0.1:0
  upstream: http://127.0.0.1:9/
  routes:
    - match: { method: POST, path: /patients/* }
      configuration: payments
      request: { encrypt: [ssn] }
`);
  assert.equal(loaded.relay, true);
});
