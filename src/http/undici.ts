/**
 * The parts of undici the service uses, loaded file by file. undici's index loads every part
 * it has (fetch, WebSocket, EventSource, the mock agents, the cache stores, …): about 16 MiB
 * of resident memory, where the Agent, its request API and the error classes cost about 4.
 * Every value from undici comes through here; `import type` from 'undici' loads nothing.
 * test/ops/loaded-modules.test.ts holds the service to it, and the forwarder, replica and
 * JWKS tests exercise these paths, so an undici release that moves a file fails the tests.
 * The files are imported statically (their types: undici-files.d.ts), so a bundler sees
 * them (bench/lib/bundle.ts, the footprint bench's experiment).
 */
import type * as Undici from 'undici';
import AgentClass from 'undici/lib/dispatcher/agent.js';
import undiciErrors from 'undici/lib/core/errors.js';
import Dispatcher from 'undici/lib/dispatcher/dispatcher.js';
import requestApi from 'undici/lib/api/index.js';

export const Agent = AgentClass;
export type Agent = Undici.Agent;
export const errors = undiciErrors;

// What undici's index does before anything else: the request API on every dispatcher.
Object.assign(Dispatcher.prototype, requestApi);

/** `dispatcher.request` takes an origin and a path where undici's `request` took a URL. */
export function target(url: string): { origin: string; path: string } {
  const parsed = new URL(url);
  return { origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
}
