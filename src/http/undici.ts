/**
 * The parts of undici the service uses, loaded file by file. undici's index loads every part
 * it has (fetch, WebSocket, EventSource, the mock agents, the cache stores, …): about 16 MiB
 * of resident memory, where the Agent, its request API and the error classes cost about 4.
 * Every value from undici comes through here; `import type` from 'undici' loads nothing.
 * test/ops/loaded-modules.test.ts holds the service to it, and the forwarder, replica and
 * JWKS tests exercise these paths, so an undici release that moves a file fails the tests.
 */
import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const require = createRequire(import.meta.url);

export const Agent = require('undici/lib/dispatcher/agent.js') as typeof Undici.Agent;
export type Agent = Undici.Agent;
export const errors = require('undici/lib/core/errors.js') as typeof Undici.errors;

// What undici's index does before anything else: the request API on every dispatcher.
const Dispatcher = require('undici/lib/dispatcher/dispatcher.js') as typeof Undici.Dispatcher;
Object.assign(Dispatcher.prototype, require('undici/lib/api/index.js') as object);

/** `dispatcher.request` takes an origin and a path where undici's `request` took a URL. */
export function target(url: string): { origin: string; path: string } {
  const parsed = new URL(url);
  return { origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
}
