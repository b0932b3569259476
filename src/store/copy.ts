/**
 * `svc-sidecar store copy`: moves a SQLite store into an empty PostgreSQL database, every
 * row with its id as it is (tokens bind classification ids and keyring ids, access tokens
 * carry user ids, API keys name configurations by id), in one PostgreSQL transaction.
 *
 * This file holds what is not any database's own: the tables and the order they are
 * copied in, and the opening of both stores. Reading the SQLite rows is in
 * sqlite/copy-source.ts, writing them into PostgreSQL in postgres/copy.ts.
 */
import { existsSync, statSync } from 'node:fs';
import { openStore } from './db.ts';
import { sqliteCopySource, storeVersionOf } from './sqlite/copy-source.ts';

export interface CopyTable {
  readonly name: string;
  /** The columns the source is read in order of: for `configurations` and `api_keys` their insertion order, which `seq` keeps on PostgreSQL. */
  readonly order: readonly string[];
  /** Rows the PostgreSQL migration inserts itself (the built-in roles and permissions): replaced by the source's, ids and all. */
  readonly builtIn?: true;
}

/** Every table of the store, parents before the tables whose foreign keys name them. */
export const COPY_TABLES: readonly CopyTable[] = Object.freeze([
  { name: 'permissions', order: ['id'], builtIn: true },
  { name: 'roles', order: ['id'], builtIn: true },
  { name: 'role_permissions', order: ['role_id', 'permission_id'], builtIn: true },
  { name: 'users', order: ['id'] },
  { name: 'user_roles', order: ['user_id', 'role_id'] },
  { name: 'configurations', order: ['rowid'] },
  { name: 'data_keys', order: ['configuration_id', 'version'] },
  { name: 'api_keys', order: ['rowid'] },
  { name: 'classifications', order: ['id'] },
  { name: 'classification_users', order: ['classification_id', 'user_id'] },
  { name: 'classification_roles', order: ['classification_id', 'role_id'] },
  { name: 'classification_providers', order: ['classification_id', 'configuration_id'] },
  { name: 'activity_logs', order: ['id'] },
  { name: 'api_logs', order: ['id'] },
  { name: 'usage_logs', order: ['id'] },
  { name: 'token_revocations', order: ['jti'] },
  { name: 'sync_state', order: ['name'] },
  { name: 'sync_log_cursors', order: ['kind'] },
  { name: 'store_meta', order: ['name'] },
  { name: 'sync_instance', order: ['id'] },
  { name: 'login_failures', order: ['email', 'failed_at'] },
] satisfies CopyTable[]);

/** A column value as the source answers it: BLOBs as Uint8Array. */
export type CopyValue = string | number | bigint | Uint8Array | null;

/** The rows of a store being copied, read on one consistent state of it. */
export interface CopySource {
  /** The tables the store has (not the database's own bookkeeping). */
  tables(): string[];
  /** The columns of `table`. */
  columns(table: string): string[];
  /** The rows of `table`, `columns` in that order, sorted by `order`, at most `size` at a time. */
  batches(table: string, columns: readonly string[], order: readonly string[], size: number): Iterable<CopyValue[][]>;
  /**
   * The highest id `table` has handed out, deleted rows included where the store remembers
   * them (SQLite's AUTOINCREMENT counter): the target's next id must be above it. 0 for none.
   */
  highestId(table: string): number;
  /** The days (`YYYY-MM-DD`, ascending) on which rows of `table`, a log table, were created; a `created_at` of another form names none. */
  days(table: string): string[];
  /** Runs `fn` on one state of the store: nothing committed meanwhile is read. */
  consistently<T>(fn: () => Promise<T>): Promise<T>;
}

export interface CopiedTable {
  readonly table: string;
  readonly rows: number;
}

/** The copy was refused: nothing was written to the target. */
export class CopyRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CopyRefusedError';
  }
}

export interface CopyOptions {
  /** Rows per INSERT statement (fewer for tables with many columns, to stay under the parameter limit). */
  readonly batchRows?: number;
  /** How long to wait for another connection's write to the target to end before refusing (default 10 s). */
  readonly lockTimeoutMs?: number;
}

/**
 * Copies the SQLite store at `from` into the PostgreSQL database at `to`. Both are migrated
 * to the newest schema first. Refused, with nothing written, when `from` is not a store
 * file, or when the target holds any row beyond the built-in roles and permissions.
 */
export async function copyStore(from: string, to: string, options: CopyOptions = {}): Promise<CopiedTable[]> {
  // openStore would create a missing file and give an empty store: copying that is never what was meant.
  if (!existsSync(from)) throw new CopyRefusedError(`${from} does not exist`);
  const stat = statSync(from);
  if (!stat.isFile()) throw new CopyRefusedError(`${from} is not a file`);
  if (stat.size === 0) throw new CopyRefusedError(`${from} is empty: it holds no store`);
  // Opening migrates: a file that holds no store of ours (another program's database) must
  // be refused before, not given our tables.
  let version: number;
  try {
    version = storeVersionOf(from);
  } catch (error) {
    throw new CopyRefusedError(`${from} is not a SQLite store (${error instanceof Error ? error.message : String(error)})`);
  }
  if (version === 0) throw new CopyRefusedError(`${from} holds no svc-sidecar store`);

  const source = openStore(from);
  try {
    const { openPostgresStore } = await import('./postgres/open.ts');
    const { copyIntoPostgres } = await import('./postgres/copy.ts');
    // Opening migrates the target (once, under its advisory lock); the copy itself runs on
    // a connection of its own, in one transaction.
    const target = await openPostgresStore(to, { max: 1 });
    await target.close();
    const reader = sqliteCopySource(source);
    return await reader.consistently(() => copyIntoPostgres(to, reader, options));
  } finally {
    source.close();
  }
}
