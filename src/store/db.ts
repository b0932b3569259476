import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { ApiKeysRepository } from './api-keys.ts';
import { ClassificationsRepository } from './classifications.ts';
import { ConfigurationsRepository } from './configurations.ts';
import { LogsRepository } from './logs.ts';
import { migrate } from './migrations.ts';
import { ReplicationRepository } from './replication.ts';
import { ShippedLogsRepository } from './shipped-logs.ts';
import { RolesRepository } from './roles.ts';
import { TokenRevocationsRepository } from './token-revocations.ts';
import { runInTransaction } from './transaction.ts';
import { UsersRepository } from './users.ts';

export interface Store {
  /** The file path, or `:memory:`. */
  readonly path: string;
  /** The connection itself, for store internals and tests; other modules use the repositories. */
  readonly db: DatabaseSync;
  readonly roles: RolesRepository;
  readonly users: UsersRepository;
  readonly configurations: ConfigurationsRepository;
  readonly apiKeys: ApiKeysRepository;
  readonly classifications: ClassificationsRepository;
  readonly logs: LogsRepository;
  readonly tokenRevocations: TokenRevocationsRepository;
  /** State snapshots (docs/replication.md). */
  readonly replication: ReplicationRepository;
  /** Logs a replica ships and a control plane receives (docs/replication.md). */
  readonly shippedLogs: ShippedLogsRepository;
  /** Runs `fn` atomically; nests (as a savepoint) inside another transaction. `fn` must be synchronous. */
  transaction<T>(fn: () => T): T;
  /**
   * Changes whenever anything is written to the store, by this connection or another
   * (a log-writer thread, a CLI process). Caches of rows key on it: a stamp that still
   * matches means no row can have changed, so a revoked key is seen on the next request.
   */
  changeStamp(): string;
  close(): void;
}

const MEMORY = ':memory:';

/**
 * Opens (creating if needed) the store at `path` and migrates it to the newest schema.
 * Throws if the file was written by a newer build.
 */
export function openStore(path: string): Store {
  const inMemory = path === MEMORY;
  if (!inMemory) mkdirSync(dirname(path), { recursive: true });
  const db = new DatabaseSync(path);
  try {
    // busy_timeout first: switching to WAL needs a lock another process may hold.
    db.exec('PRAGMA busy_timeout = 5000');
    // WAL lets the log writer and request reads proceed without blocking each other; an
    // in-memory database has no journal file to put in WAL mode.
    if (!inMemory) db.exec('PRAGMA journal_mode = WAL');
    // NORMAL is durable across process crashes in WAL mode; only an OS crash or power loss can
    // drop the last commits, which is the usual trade for not fsyncing on every commit.
    db.exec('PRAGMA synchronous = NORMAL');
    db.exec('PRAGMA foreign_keys = ON');
    migrate(db);
  } catch (error) {
    db.close();
    throw error;
  }

  const totalChanges = db.prepare('SELECT total_changes() AS n');
  const dataVersion = db.prepare('PRAGMA data_version');
  let othersMemo = -1;
  const forgetOthers = () => {
    othersMemo = -1;
  };
  return {
    path,
    db,
    roles: new RolesRepository(db),
    users: new UsersRepository(db),
    configurations: new ConfigurationsRepository(db),
    apiKeys: new ApiKeysRepository(db),
    classifications: new ClassificationsRepository(db),
    logs: new LogsRepository(db),
    tokenRevocations: new TokenRevocationsRepository(db),
    replication: new ReplicationRepository(db),
    shippedLogs: new ShippedLogsRepository(db),
    transaction: (fn) => runInTransaction(db, fn),
    changeStamp() {
      const own = (totalChanges.get() as { n: number }).n;
      // Other connections' commits cannot be ordered against this synchronous run anyway,
      // so their counter is read once per run (it costs more than the rest of the stamp);
      // this connection's own writes are seen at once through total_changes.
      if (othersMemo < 0) {
        othersMemo = (dataVersion.get() as { data_version: number }).data_version;
        queueMicrotask(forgetOthers);
      }
      return `${own}:${othersMemo}`;
    },
    close() {
      if (!db.isOpen) return;
      // Recommended by SQLite before closing a long-lived connection: refreshes planner
      // statistics only for tables where that is worth it.
      db.exec('PRAGMA optimize');
      db.close();
    },
  };
}
