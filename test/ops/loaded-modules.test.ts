/**
 * The modules a running data plane loads (bench/README.md, Footprint): what it never uses
 * must not be loaded at all, because every module stays resident for the life of the
 * process in every pod.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LOADED_BASE, loadedModules } from '../support/loaded-modules.ts';

test('a service that has proxied a request has loaded neither Node\'s bundled undici nor undici\'s index', async () => {
  const loaded = await loadedModules(LOADED_BASE);
  assert.equal(loaded.nodeUndici, false, 'an ES import of node:http loads Node\'s undici (src/http/node-http.ts)');
  assert.equal(loaded.undiciIndex, false, 'undici\'s index loads fetch, WebSocket, mocks (src/http/undici.ts)');
});
