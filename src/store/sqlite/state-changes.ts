import type { DatabaseSync, Session } from 'node:sqlite';
import type { Store } from '../db.ts';
import { sqliteConnection } from './connection.ts';

/** The tables a snapshot is read from. */
const SNAPSHOT_TABLES = [
  'roles',
  'permissions',
  'role_permissions',
  'users',
  'user_roles',
  'configurations',
  'data_keys',
  'api_keys',
  'classifications',
  'classification_users',
  'classification_roles',
  'classification_providers',
] as const;

/**
 * Tells whether the state tables changed through this connection since `restart`, using
 * SQLite sessions (which record the rows a connection changes, per table). Writes to
 * other tables (logs, sync_state, token revocations) do not count, so a control plane
 * busy writing logs does not re-read its whole state for every poll. Changes made by
 * other connections are not seen here: see `PRAGMA data_version`.
 */
export class StateChangeTracker {
  readonly #db: DatabaseSync;
  #sessions: Session[] = [];

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.restart();
  }

  get changed(): boolean {
    return this.#sessions.some((session) => session.patchset().length > 0);
  }

  restart(): void {
    for (const session of this.#sessions) session.close();
    this.#sessions = SNAPSHOT_TABLES.map((table) => this.#db.createSession({ table }));
  }
}


/** A new tracker of changes to the state tables made through `store`'s connection (SQLite only). */
export function trackStateChanges(store: Store): StateChangeTracker {
  return new StateChangeTracker(sqliteConnection(store));
}
