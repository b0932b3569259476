/**
 * The connection under a SQLite store, for the SQLite-only tests that read or write the file
 * directly (PRAGMAs, triggers, rows a repository would never write). Nothing outside
 * src/store/sqlite/ and the tests uses it: the rest of the program goes through the
 * repositories and the `Store` methods.
 */
import type { DatabaseSync } from 'node:sqlite';
import type { Store } from '../db.ts';

const connections = new WeakMap<Store, DatabaseSync>();

/** Called once by the opener of a SQLite store. */
export function rememberConnection(store: Store, db: DatabaseSync): void {
  connections.set(store, db);
}

/** The connection of a store opened on SQLite; throws for any other store. */
export function sqliteConnection(store: Store): DatabaseSync {
  const db = connections.get(store);
  if (db === undefined) throw new TypeError('not a SQLite store');
  return db;
}
