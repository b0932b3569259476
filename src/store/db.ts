import type { ApiKeysRepository } from './api-keys.ts';
import type { ClassificationsRepository } from './classifications.ts';
import type { ConfigurationsRepository } from './configurations.ts';
import type { LoginFailuresRepository } from './login-failures.ts';
import type { LogsRepository } from './logs.ts';
import type { MetaRepository } from './meta.ts';
import type { ReplicationRepository } from './replication.ts';
import type { ShippedLogsRepository } from './shipped-logs.ts';
import type { StateRowsRepository } from './state-rows.ts';
import type { RolesRepository } from './roles.ts';
import type { Sync } from './query.ts';
import { openSqliteStore } from './sqlite/open.ts';
import type { TokenRevocationsRepository } from './token-revocations.ts';
import type { UsersRepository } from './users.ts';

/**
 * The repositories of one connection, each method answering at once. A SQLite store is
 * made of these; the state view and the few checks that run inside a request's value
 * handlers reach them through `syncRepositories` (sqlite/connection.ts).
 */
export interface Repositories {
  readonly roles: Sync<RolesRepository>;
  readonly users: Sync<UsersRepository>;
  readonly configurations: Sync<ConfigurationsRepository>;
  readonly apiKeys: Sync<ApiKeysRepository>;
  readonly classifications: Sync<ClassificationsRepository>;
  readonly logs: Sync<LogsRepository>;
  readonly tokenRevocations: Sync<TokenRevocationsRepository>;
  /** Failed logins, for the lockout. */
  readonly loginFailures: Sync<LoginFailuresRepository>;
  /** State snapshots (docs/replication.md). */
  readonly replication: Sync<ReplicationRepository>;
  /** Logs a replica ships and a control plane receives (docs/replication.md). */
  readonly shippedLogs: Sync<ShippedLogsRepository>;
  /** The state as a whole, for the state view. */
  readonly stateRows: Sync<StateRowsRepository>;
  /** Facts about this store itself (the master key's check value). */
  readonly meta: Sync<MetaRepository>;
}

/** Every method of `R`, answering with a promise of what it returns. */
export type Async<R> = {
  readonly [K in keyof R]: R[K] extends (...args: infer A) => infer T ? (...args: A) => Promise<Awaited<T>> : never;
};

/**
 * What may be done inside a transaction: every repository, and transactions nested in it
 * (savepoints). Every method answers with a promise, whatever the backend.
 */
export type Transaction = { readonly [K in keyof Repositories]: Async<Repositories[K]> } & {
  /** Runs `fn` inside this transaction, as a savepoint: its writes go or stay together. */
  transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T>;
  /**
   * Waits until no other transaction on the database holds `key`, and holds it until this
   * one ends: for work that instances sharing one database must do one at a time (the
   * seed). On SQLite, whose writers are one at a time already, it waits for nothing.
   */
  lock(key: string): Promise<void>;
};

/**
 * A transaction's callback returned while a call on its handle was still running (not
 * awaited): the transaction is rolled back rather than let that call land after the commit.
 */
export class UnawaitedCallError extends Error {
  constructor() {
    super('A transaction callback returned while a call on its handle was still running: await every call on tx.');
    this.name = 'UnawaitedCallError';
  }
}

/** A nested transaction started while another one beside it is still open. */
export class ConcurrentSavepointError extends Error {
  constructor() {
    super('Nested transactions of one transaction run one after the other: await one before starting the next.');
    this.name = 'ConcurrentSavepointError';
  }
}

/** A transaction handle used after its transaction ended. */
export class TransactionEndedError extends Error {
  constructor() {
    super('A transaction handle was used after its transaction ended: use the store, or a new transaction.');
    this.name = 'TransactionEndedError';
  }
}

/**
 * The store as the rest of the program sees it: the repositories and a few facts about the
 * store itself. What the store is made of lives under sqlite/ (a file: opening, PRAGMAs,
 * the change stamp's triggers, migrations, transactions, worker connections) and
 * postgres/ (a database server: the pool, the schema and its migrations, the state
 * version); the repositories beside this file hold the queries, once for both (query.ts).
 */
export interface Store extends Omit<Transaction, 'transaction' | 'lock'> {
  /** Which database holds it: a SQLite file (every replica, one instance) or PostgreSQL (DESIGN §16). */
  readonly kind: 'sqlite' | 'postgres';
  /** The file path, or `:memory:`; for PostgreSQL, the URL without its password. */
  readonly path: string;
  /** True when this open created the store (it had no schema yet): nothing can have been written to it before. */
  readonly created: boolean;
  /**
   * Runs `fn` atomically with the handle it is given: every read and write of the
   * transaction goes through `tx`. On SQLite the transaction holds the one connection, so
   * `fn` must wait on nothing but `tx` (no timers, no network, no password hashing):
   * while it is open, any use of the store other than through `tx` fails.
   */
  transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T>;
  /**
   * Caches of rows key on it: a stamp that still matches means no row they hold can have
   * changed, so a key revoked through the API is refused on the very next request. On
   * SQLite it changes whenever a row other than a log entry is written through this
   * connection (at once) or a transaction on it rolls back, and within OTHERS_CHECK_MS of a
   * commit by another connection (a CLI process, a log-writer thread). On PostgreSQL it
   * follows the database's state version: a write of this instance's moves it before the
   * write resolves, another instance's within a second (its notice, or the poll).
   */
  changeStamp(): number;
  /**
   * On SQLite, changes whenever another connection (another process, a log-writer thread)
   * has committed to the store; this connection's own commits leave it as it is. Read
   * afresh on every call, unlike changeStamp. On PostgreSQL, the state version last seen.
   */
  othersCommitStamp(): number;
  /** Fails when the store cannot answer a query (closed, the file gone bad, the database away): readiness. */
  ping(): void | Promise<void>;
  /** Ends the store's connections; on a network database the promise settles once they are closed. */
  close(): void | Promise<void>;
}

/**
 * Opens (creating if needed) the store at `path` (a file, or `:memory:`) and migrates it to
 * the newest schema. Throws if the file was written by a newer build.
 */
export function openStore(path: string): Store {
  return openSqliteStore(path);
}

/**
 * Opens the configured store: the SQLite file at `path`, or the PostgreSQL database at
 * `url` when there is one (the driver is loaded only then).
 */
export async function openConfiguredStore(location: { readonly path: string; readonly url?: string }): Promise<Store> {
  if (location.url === undefined) return openSqliteStore(location.path);
  const { openPostgresStore } = await import('./postgres/open.ts');
  return openPostgresStore(location.url);
}
