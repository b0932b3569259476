/**
 * Log shipping in the store (docs/replication.md): the rows a replica has not shipped yet,
 * its position per kind and its instance id, and the rows a control plane receives from
 * its replicas, stored once each.
 */
import { randomBytes } from 'node:crypto';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { RevealCounts } from '../fields/reveal.ts';
import { parseRevealCounts, revealCountsText, type ApiLogRecord, type UsageLogRecord } from './logs.ts';
import { nowIso } from './sql.ts';
import { runInTransaction } from './sqlite/transaction.ts';

/** Field names are the wire format's (snake_case). */
export type ShippedKind = 'api' | 'usage';
export const SHIPPED_KINDS: readonly ShippedKind[] = Object.freeze(['api', 'usage']);

/**
 * Shipped rows are the log tables' own rows, snake_case as stored. `end_user` is sent only
 * when set, so a control plane from before it still takes every row of a fleet that does
 * not identify end users. A usage row's reveal counts travel as an object (absent from a
 * replica of an earlier build, which records none).
 */
export type ShippedApiLog = Omit<ApiLogRecord, 'end_user'> & { end_user?: string | null };
export type ShippedUsageLog = Omit<UsageLogRecord, 'reveal'> & { reveal?: RevealCounts | null };

export interface ShippedLogs {
  api: ShippedApiLog[];
  usage: ShippedUsageLog[];
}

/**
 * The shipping position of one kind. Shipped row ids are `idBase + id`: when retention
 * has emptied a table and SQLite numbers its rows from 1 again, the base moves past every
 * id shipped before, so a shipped id never names two rows.
 */
export interface LogCursor {
  lastId: number;
  lastRequestId: string;
  idBase: number;
}

/** A replica's instance id: 128 random bits, lowercase hex. */
export const INSTANCE_ID_PATTERN = /^[0-9a-f]{32}$/;

const API_COLUMNS = 'id, request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination, duration_ms, ip, created_at, end_user';
const USAGE_COLUMNS = 'id, request_id, configuration_id, api_key_id, user_id, mode, field_count, bytes, reveal, created_at';

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
  readonly #getInstance: StatementSync;
  readonly #putInstance: StatementSync;
  readonly #existingApiKeys: StatementSync;
  readonly #existingUsers: StatementSync;
  readonly #existingConfigurations: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    // `replica IS NULL`: a replica ships only what happened on it.
    const kind = (table: string, columns: string): KindStatements => ({
      after: db.prepare(`SELECT ${columns} FROM ${table} WHERE id > ? AND replica IS NULL ORDER BY id LIMIT ?`),
      requestIdAt: db.prepare(`SELECT request_id FROM ${table} WHERE id = ?`),
      maxId: db.prepare(`SELECT coalesce(max(id), 0) AS id FROM ${table}`),
    });
    this.#kinds = { api: kind('api_logs', API_COLUMNS), usage: kind('usage_logs', USAGE_COLUMNS) };
    this.#getCursor = db.prepare('SELECT last_id, last_request_id, id_base FROM sync_log_cursors WHERE kind = ?');
    this.#putCursor = db.prepare(`
      INSERT INTO sync_log_cursors (kind, last_id, last_request_id, id_base, updated_at) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (kind) DO UPDATE SET last_id = excluded.last_id, last_request_id = excluded.last_request_id, id_base = excluded.id_base,
        updated_at = excluded.updated_at`);
    // No conflict target: the only unique index these rows can hit is the (instance, row) one.
    this.#receiveApi = db.prepare(`
      INSERT INTO api_logs (request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination, duration_ms, ip,
        created_at, replica, replica_instance, replica_log_id, end_user)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`);
    this.#receiveUsage = db.prepare(`
      INSERT INTO usage_logs (request_id, configuration_id, api_key_id, user_id, mode, field_count, bytes, reveal, created_at, replica,
        replica_instance, replica_log_id)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`);
    this.#getInstance = db.prepare('SELECT instance_id FROM sync_instance WHERE id = 1');
    this.#putInstance = db.prepare('INSERT INTO sync_instance (id, instance_id, created_at) VALUES (1, ?, ?) ON CONFLICT (id) DO NOTHING');
    const existing = (table: string) => db.prepare(`SELECT id FROM ${table} WHERE id IN (SELECT value FROM json_each(?))`);
    this.#existingApiKeys = existing('api_keys');
    this.#existingUsers = existing('users');
    this.#existingConfigurations = existing('configurations');
  }

  /**
   * This store's instance id, made on first use (a replica's first start) and kept: it
   * tells the control plane which rows are this replica's, whatever its name. Never shown
   * by any API: knowing it is what shipping rows as this replica takes.
   */
  instanceId(): string {
    const existing = this.#getInstance.get() as { instance_id: string } | undefined;
    if (existing !== undefined) return existing.instance_id;
    // ON CONFLICT DO NOTHING, then read: two processes starting on one file agree on one id.
    this.#putInstance.run(randomBytes(16).toString('hex'), nowIso());
    return (this.#getInstance.get() as { instance_id: string }).instance_id;
  }

  // Replica side

  getCursor(kind: ShippedKind): LogCursor {
    const r = this.#getCursor.get(kind) as { last_id: number; last_request_id: string; id_base: number } | undefined;
    return r === undefined ? { lastId: 0, lastRequestId: '', idBase: 0 } : { lastId: r.last_id, lastRequestId: r.last_request_id, idBase: r.id_base };
  }

  putCursor(kind: ShippedKind, cursor: LogCursor): void {
    this.#putCursor.run(kind, cursor.lastId, cursor.lastRequestId, cursor.idBase, nowIso());
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
  rowsAfter(kind: ShippedKind, afterId: number, limit: number): ShippedApiLog[] | ShippedUsageLog[] {
    const rows = this.#kinds[kind].after.all(afterId, limit);
    if (kind === 'api') {
      for (const row of rows) if (row['end_user'] === null) delete row['end_user'];
      return rows as unknown as ShippedApiLog[];
    }
    return (rows as unknown as UsageLogRecord[]).map((r) => ({ ...r, reveal: parseRevealCounts(r.reveal) }));
  }

  // Control-plane side

  /** Which of these ids exist in the store. */
  existingReferences(ids: { apiKeys: string[]; users: number[]; configurations: string[] }): { apiKeys: Set<string>; users: Set<number>; configurations: Set<string> } {
    const find = <T>(statement: StatementSync, values: T[]): Set<T> =>
      values.length === 0 ? new Set() : new Set((statement.all(JSON.stringify([...new Set(values)])) as Array<{ id: T }>).map((r) => r.id));
    return {
      apiKeys: find(this.#existingApiKeys, ids.apiKeys),
      users: find(this.#existingUsers, ids.users),
      configurations: find(this.#existingConfigurations, ids.configurations),
    };
  }

  /**
   * Stores a replica's batch in one transaction; rows it already holds (the same instance
   * and row id: a retried batch) are skipped by the unique index. Returns how many rows
   * were new.
   */
  receive(replica: string, instance: string, logs: ShippedLogs): { stored: number; duplicates: number } {
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
            instance,
            r.id,
            r.end_user ?? null,
          ).changes,
        );
      }
      for (const r of logs.usage) {
        stored += Number(
          this.#receiveUsage.run(
            r.request_id,
            r.configuration_id,
            r.api_key_id,
            r.user_id,
            r.mode,
            r.field_count,
            r.bytes,
            revealCountsText(r.reveal),
            r.created_at,
            replica,
            instance,
            r.id,
          ).changes,
        );
      }
    });
    return { stored, duplicates: logs.api.length + logs.usage.length - stored };
  }
}
