import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { ApiKeysRepository } from '../api-keys.ts';
import { ClassificationsRepository } from '../classifications.ts';
import { ConfigurationsRepository } from '../configurations.ts';
import type { Async, Repositories, Store, Transaction } from '../db.ts';
import { methodNames } from '../query.ts';
import { LoginFailuresRepository } from '../login-failures.ts';
import { LogsRepository } from '../logs.ts';
import { MetaRepository } from '../meta.ts';
import { ReplicationRepository } from '../replication.ts';
import { RolesRepository } from '../roles.ts';
import { ShippedLogsRepository } from '../shipped-logs.ts';
import { StateRowsRepository } from '../state-rows.ts';
import { TokenRevocationsRepository } from '../token-revocations.ts';
import { UsersRepository } from '../users.ts';
import { CommitWatch } from './commit-watch.ts';
import { rememberConnection } from './connection.ts';
import { SqliteExecutor } from './executor.ts';
import { ConnectionGate } from './gate.ts';
import { KeyAliveCache } from './key-alive.ts';
import { migrate } from './migrations.ts';
import { onRollback, runInTransactionAsync } from './transaction.ts';

const MEMORY = ':memory:';

/** How stale the view of other connections' commits may be (changeStamp). */
export const OTHERS_CHECK_MS = 25;
/** Rows no cache holds (the logs, the log shipper's cursors, failed logins): writing them leaves the change stamp alone. */
const UNCACHED_TABLES = new Set(['activity_logs', 'api_logs', 'usage_logs', 'sync_log_cursors', 'login_failures']);

/**
 * Calls `onChange` for every row this connection inserts, updates or deletes outside the
 * log tables: TEMP triggers live only on this connection, so other connections (which do
 * not have the function) never run them.
 */
function noteOwnChanges(db: DatabaseSync, onChange: () => void): void {
  db.function('svc_note_change', { deterministic: false }, () => {
    onChange();
    return null;
  });
  const tables = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as Array<{ name: string }>;
  for (const { name } of tables) {
    if (UNCACHED_TABLES.has(name)) continue;
    for (const event of ['INSERT', 'UPDATE', 'DELETE']) {
      db.exec(`CREATE TEMP TRIGGER "svc_note_${name}_${event.toLowerCase()}" AFTER ${event} ON main."${name}" BEGIN SELECT svc_note_change(); END`);
    }
  }
}

const BUSY_TIMEOUT_MS = 5000;

/**
 * `PRAGMA journal_mode = WAL`, tried again while another connection holds the lock it
 * needs. Two processes opening a new file at once can find the other one switching it
 * (the second instance of a deployment, the CLI): SQLite then answers "database is locked"
 * at once, without waiting on busy_timeout, so the wait is done here, up to the same
 * timeout. The sleep blocks the thread: this runs only while the store opens.
 */
function switchToWal(db: DatabaseSync): void {
  const deadline = performance.now() + BUSY_TIMEOUT_MS;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      db.exec('PRAGMA journal_mode = WAL');
      return;
    } catch (error) {
      if (!isBusy(error) || performance.now() >= deadline) throw error;
      Atomics.wait(pause, 0, 0, 10);
    }
  }
}

/** SQLITE_BUSY and its extended codes (the low byte is 5). */
function isBusy(error: unknown): boolean {
  return error instanceof Error && 'errcode' in error && typeof error.errcode === 'number' && (error.errcode & 0xff) === 5;
}

/**
 * Opens (creating if needed) the store at `path` and migrates it to the newest schema.
 * Throws if the file was written by a newer build.
 */
export function openSqliteStore(path: string): Store {
  const inMemory = path === MEMORY;
  if (!inMemory) mkdirSync(dirname(path), { recursive: true });
  const db = new DatabaseSync(path);
  let created: boolean;
  try {
    // busy_timeout first: switching to WAL needs a lock another process may hold.
    db.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    // WAL lets the log writer and request reads proceed without blocking each other; an
    // in-memory database has no journal file to put in WAL mode.
    if (!inMemory) switchToWal(db);
    // NORMAL is durable across process crashes in WAL mode; only an OS crash or power loss can
    // drop the last commits, which is the usual trade for not fsyncing on every commit.
    db.exec('PRAGMA synchronous = NORMAL');
    db.exec('PRAGMA foreign_keys = ON');
    created = migrate(db).from === 0;
  } catch (error) {
    db.close();
    throw error;
  }

  const dataVersion = db.prepare('PRAGMA data_version');
  let generation = 0;
  let others = -1;
  let othersCheckedAt = Number.NEGATIVE_INFINITY;
  noteOwnChanges(db, () => {
    generation++;
  });
  onRollback(db, () => {
    generation++;
  });
  const othersCommitStamp = (): number => (dataVersion.get() as { data_version: number }).data_version;
  const watch = CommitWatch.open(db, inMemory, () => generation);
  const sql = new SqliteExecutor(db);
  const repositories: Repositories = {
    roles: sql.drive(new RolesRepository()),
    users: sql.drive(new UsersRepository()),
    configurations: sql.drive(new ConfigurationsRepository()),
    apiKeys: sql.drive(new ApiKeysRepository()),
    classifications: sql.drive(new ClassificationsRepository()),
    logs: sql.drive(new LogsRepository()),
    tokenRevocations: sql.drive(new TokenRevocationsRepository()),
    loginFailures: sql.drive(new LoginFailuresRepository()),
    replication: sql.drive(new ReplicationRepository()),
    shippedLogs: sql.drive(new ShippedLogsRepository()),
    stateRows: sql.drive(new StateRowsRepository()),
    meta: sql.drive(new MetaRepository()),
  };
  // One connection serves the whole process: while a transaction holds it, only the
  // transaction's handle runs statements; the rest waits for it to end.
  const gate = new ConnectionGate();
  const tx: Transaction = {
    ...asyncRepositories(repositories, (run) => gate.within(run)),
    // A savepoint, for the transaction that holds the connection only.
    transaction: (fn) => gate.within(() => gate.savepoint(() => runInTransactionAsync(db, () => fn(tx)))),
    // BEGIN IMMEDIATE holds the one write lock already.
    lock: () => gate.within(() => undefined),
  };
  const store: Store = {
    kind: 'sqlite',
    path,
    created,
    ...asyncRepositories(repositories, (run) => gate.through(run)),
    transaction: (fn) => gate.hold(() => runInTransactionAsync(db, () => fn(tx))),
    changeStamp() {
      // Another connection's commit cannot be ordered against this process's requests
      // anyway; reading its counter for every request would cost more than the lookups the
      // caches save, so it is read at most every few milliseconds.
      const now = performance.now();
      if (now - othersCheckedAt >= OTHERS_CHECK_MS) {
        othersCheckedAt = now;
        const version = othersCommitStamp();
        if (version !== others) {
          others = version;
          generation++;
        }
      }
      return generation;
    },
    othersCommitStamp,
    ping() {
      db.prepare('SELECT 1').get();
    },
    close() {
      watch.close();
      if (!db.isOpen) return;
      // Recommended by SQLite before closing a long-lived connection: refreshes planner
      // statistics only for tables where that is worth it.
      db.exec('PRAGMA optimize');
      db.close();
    },
  };
  rememberConnection(store, { db, repositories, gate, keys: new KeyAliveCache(watch, repositories.configurations) });
  return store;
}

/**
 * `repositories` with every method answering with a promise, each call made through
 * `run`: at once, or after the transaction that holds the connection.
 */
function asyncRepositories(repositories: Repositories, through: <T>(run: () => T) => Promise<T>): { [K in keyof Repositories]: Async<Repositories[K]> } {
  const out: Record<string, unknown> = {};
  for (const [name, repository] of Object.entries(repositories) as Array<[string, object]>) {
    const methods: Record<string, (...args: unknown[]) => Promise<unknown>> = {};
    for (const key of methodNames(repository)) {
      const method = (repository as Record<string, (...args: unknown[]) => unknown>)[key]!;
      methods[key] = (...args) => through(() => method.apply(repository, args));
    }
    out[name] = Object.freeze(methods);
  }
  return out as { [K in keyof Repositories]: Async<Repositories[K]> };
}
