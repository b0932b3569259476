/**
 * Log shipping in the store (docs/replication.md): the rows a replica has not shipped yet
 * and its position per kind, and the rows a control plane receives from its replicas,
 * stored once each.
 */
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { ApiLogRecord, UsageLogRecord } from './logs.ts';
import { nowIso } from './sql.ts';
import { runInTransaction } from './transaction.ts';

/** Field names are the wire format's (snake_case). */
export type ShippedKind = 'api' | 'usage';
export const SHIPPED_KINDS: readonly ShippedKind[] = Object.freeze(['api', 'usage']);

/** Shipped rows are the log tables' own rows, snake_case as stored. */
export type ShippedApiLog = ApiLogRecord;
export type ShippedUsageLog = UsageLogRecord;

export interface ShippedLogs {
  api: ShippedApiLog[];
  usage: ShippedUsageLog[];
}

export interface LogCursor {
  lastId: number;
  lastRequestId: string;
}

const API_COLUMNS = 'id, request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination, duration_ms, ip, created_at';
const USAGE_COLUMNS = 'id, request_id, configuration_id, api_key_id, user_id, mode, field_count, bytes, created_at';

interface KindStatements {
  after: StatementSync;
  requestIdAt: StatementSync;
  maxId: StatementSync;
}

export class ShippedLogsRepository {
  readonly #db: DatabaseSync;
  readonly #kinds: Record<ShippedKind, KindStatements>;
  readonly #getCursor: StatementSync;
  readonly #putCursor: StatementSync;
  readonly #receiveApi: StatementSync;
  readonly #receiveUsage: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    // `replica IS NULL`: a replica ships only what happened on it.
    const kind = (table: string, columns: string): KindStatements => ({
      after: db.prepare(`SELECT ${columns} FROM ${table} WHERE id > ? AND replica IS NULL ORDER BY id LIMIT ?`),
      requestIdAt: db.prepare(`SELECT request_id FROM ${table} WHERE id = ?`),
      maxId: db.prepare(`SELECT coalesce(max(id), 0) AS id FROM ${table}`),
    });
    this.#kinds = { api: kind('api_logs', API_COLUMNS), usage: kind('usage_logs', USAGE_COLUMNS) };
    this.#getCursor = db.prepare('SELECT last_id, last_request_id FROM sync_log_cursors WHERE kind = ?');
    this.#putCursor = db.prepare(`
      INSERT INTO sync_log_cursors (kind, last_id, last_request_id, updated_at) VALUES (?, ?, ?, ?)
      ON CONFLICT (kind) DO UPDATE SET last_id = excluded.last_id, last_request_id = excluded.last_request_id, updated_at = excluded.updated_at`);
    // No conflict target: the only unique index these rows can hit is the replica-row one.
    this.#receiveApi = db.prepare(`
      INSERT INTO api_logs (request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination, duration_ms, ip,
        created_at, replica, replica_log_id)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`);
    this.#receiveUsage = db.prepare(`
      INSERT INTO usage_logs (request_id, configuration_id, api_key_id, user_id, mode, field_count, bytes, created_at, replica, replica_log_id)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`);
  }

  // Replica side

  getCursor(kind: ShippedKind): LogCursor {
    const r = this.#getCursor.get(kind) as { last_id: number; last_request_id: string } | undefined;
    return r === undefined ? { lastId: 0, lastRequestId: '' } : { lastId: r.last_id, lastRequestId: r.last_request_id };
  }

  putCursor(kind: ShippedKind, cursor: LogCursor): void {
    this.#putCursor.run(kind, cursor.lastId, cursor.lastRequestId, nowIso());
  }

  /**
   * Whether the cursor still points into this table's id sequence. Row ids are
   * max(id) + 1, so once retention has emptied a table its ids start again from 1: the
   * cursor is then past the end, or its id names a different row (another request id).
   */
  cursorValid(kind: ShippedKind, cursor: LogCursor): boolean {
    if (cursor.lastId === 0) return true;
    const statements = this.#kinds[kind];
    const at = statements.requestIdAt.get(cursor.lastId) as { request_id: string } | undefined;
    if (at !== undefined) return at.request_id === cursor.lastRequestId;
    return (statements.maxId.get() as { id: number }).id > cursor.lastId;
  }

  /** This store's own rows of `kind` after `afterId`, oldest first. */
  rowsAfter(kind: 'api', afterId: number, limit: number): ShippedApiLog[];
  rowsAfter(kind: 'usage', afterId: number, limit: number): ShippedUsageLog[];
  rowsAfter(kind: ShippedKind, afterId: number, limit: number): ShippedApiLog[] | ShippedUsageLog[] {
    return this.#kinds[kind].after.all(afterId, limit) as unknown as ShippedApiLog[] | ShippedUsageLog[];
  }

  // Control-plane side

  /**
   * Stores a replica's batch in one transaction; rows it already holds (a retried batch)
   * are skipped by the unique index. Returns how many rows were new.
   */
  receive(replica: string, logs: ShippedLogs): { stored: number; duplicates: number } {
    let stored = 0;
    runInTransaction(this.#db, () => {
      for (const r of logs.api) {
        stored += Number(
          this.#receiveApi.run(
            r.request_id,
            r.method,
            r.path,
            r.status_code,
            r.api_key_id,
            r.user_id,
            r.configuration_id,
            r.destination,
            r.duration_ms,
            r.ip,
            r.created_at,
            replica,
            r.id,
          ).changes,
        );
      }
      for (const r of logs.usage) {
        stored += Number(
          this.#receiveUsage.run(r.request_id, r.configuration_id, r.api_key_id, r.user_id, r.mode, r.field_count, r.bytes, r.created_at, replica, r.id).changes,
        );
      }
    });
    return { stored, duplicates: logs.api.length + logs.usage.length - stored };
  }
}
