/**
 * The connection under a SQLite store, for the SQLite-only tests that read or write the file
 * directly (PRAGMAs, triggers, rows a repository would never write). Nothing outside
 * src/store/sqlite/ and the tests uses it: the rest of the program goes through the
 * repositories and the `Store` methods.
 */
import type { DatabaseSync } from 'node:sqlite';
import type { Repositories, Store } from '../db.ts';
import type { ConnectionGate } from './gate.ts';
import type { KeyAliveCache, KeyAliveEntry } from './key-alive.ts';

interface Opened {
  readonly db: DatabaseSync;
  readonly repositories: Repositories;
  readonly gate: ConnectionGate;
  readonly keys: KeyAliveCache;
}

const connections = new WeakMap<Store, Opened>();

/** Called once by the opener of a SQLite store. */
export function rememberConnection(store: Store, opened: Opened): void {
  connections.set(store, opened);
}

/** The connection of a store opened on SQLite; throws for any other store. */
export function sqliteConnection(store: Store): DatabaseSync {
  return opened(store).db;
}

/**
 * The repositories of a SQLite store, answering at once: for the state view, the checks
 * that run inside a request's value handlers (KeyInUse, the codec cache's keys) and the
 * inline log writer, which cannot wait. Throws for any other store (a store on PostgreSQL
 * serves no data plane, and its log writer awaits).
 */
export function syncRepositories(store: Store): Repositories {
  return opened(store).repositories;
}

/**
 * Whether key version `version` of the configuration exists and is not destroyed, as the
 * store says at each `alive()` (KeyInUse, DESIGN §13); a read only when something may have
 * changed.
 */
export function keyAliveEntry(store: Store, configurationId: string, version: number): KeyAliveEntry {
  return opened(store).keys.entry(configurationId, version);
}

/** The cache behind `keyAliveEntry`, for the tests that count its reads. */
export function keyAliveCache(store: Store): KeyAliveCache {
  return opened(store).keys;
}

/** True while a transaction holds the store's connection: what is read now may still roll back. */
export function inTransaction(store: Store): boolean {
  return opened(store).gate.held;
}

function opened(store: Store): Opened {
  const found = connections.get(store);
  if (found === undefined) throw new TypeError('not a SQLite store');
  return found;
}
