/**
 * Log shipping in the store (docs/replication.md): the rows a replica has not shipped yet,
 * its position per kind and its instance id, and the rows a control plane receives from
 * its replicas, stored once each.
 */
import { randomBytes } from 'node:crypto';
import type { RevealCounts } from '../fields/reveal.ts';
import { parseRevealCounts, revealCountsText, type ApiLogRecord, type UsageLogRecord } from './logs.ts';
import { all, atomically, get, run, type Dialect, type Sql, type Step } from './query.ts';
import { nowIso } from './sql.ts';

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

interface KindSql {
  readonly after: string;
  readonly requestIdAt: string;
  readonly maxId: string;
}

function kindSql(table: string, columns: string): KindSql {
  return {
    // `replica IS NULL`: a replica ships only what happened on it.
    after: `SELECT ${columns} FROM ${table} WHERE id > ? AND replica IS NULL ORDER BY id LIMIT ?`,
    requestIdAt: `SELECT request_id FROM ${table} WHERE id = ?`,
    maxId: `SELECT coalesce(max(id), 0) AS id FROM ${table}`,
  };
}

const KINDS: Readonly<Record<ShippedKind, KindSql>> = { api: kindSql('api_logs', API_COLUMNS), usage: kindSql('usage_logs', USAGE_COLUMNS) };

const GET_CURSOR = 'SELECT last_id, last_request_id, id_base FROM sync_log_cursors WHERE kind = ?';
const PUT_CURSOR = `
  INSERT INTO sync_log_cursors (kind, last_id, last_request_id, id_base, updated_at) VALUES (?, ?, ?, ?, ?)
  ON CONFLICT (kind) DO UPDATE SET last_id = excluded.last_id, last_request_id = excluded.last_request_id, id_base = excluded.id_base,
    updated_at = excluded.updated_at`;
/**
 * Rows per INSERT at most. A batch goes in as multi-row INSERTs of 512, 256, …, 1 rows, so
 * a batch of any size is a few statements of ten shapes per kind, each prepared once
 * (512 rows of 15 parameters are well below either database's limit).
 */
export const RECEIVE_CHUNK = 512;

/**
 * The INSERT of `rows` rows into `table`. No conflict target: the only unique index these
 * rows can hit is the (instance, row) one, so a row already received is skipped (a
 * retried batch, or the same row twice in one).
 */
function receiveSql(table: string, columns: readonly string[], rows: number): string {
  const tuple = `(${columns.map(() => '?').join(', ')})`;
  return `INSERT INTO ${table} (${columns.join(', ')}) VALUES ${Array.from({ length: rows }, () => tuple).join(', ')} ON CONFLICT DO NOTHING`;
}

/** By rows: the statement for 2^k rows at index k. */
function receiveStatements(table: string, columns: readonly string[]): readonly string[] {
  const out: string[] = [];
  for (let rows = 1; rows <= RECEIVE_CHUNK; rows *= 2) out.push(receiveSql(table, columns, rows));
  return out;
}

const RECEIVE_API = receiveStatements('api_logs', [
  'request_id', 'method', 'path', 'status_code', 'api_key_id', 'user_id', 'configuration_id', 'destination', 'duration_ms', 'ip',
  'created_at', 'replica', 'replica_instance', 'replica_log_id', 'end_user',
]);
const RECEIVE_USAGE = receiveStatements('usage_logs', [
  'request_id', 'configuration_id', 'api_key_id', 'user_id', 'mode', 'field_count', 'bytes', 'reveal', 'created_at', 'replica',
  'replica_instance', 'replica_log_id',
]);
const GET_INSTANCE = 'SELECT instance_id FROM sync_instance WHERE id = 1';
const PUT_INSTANCE = 'INSERT INTO sync_instance (id, instance_id, created_at) VALUES (1, ?, ?) ON CONFLICT (id) DO NOTHING';
// The list of ids is one parameter, a JSON array, read as rows the way each database does.
const EXISTING_API_KEYS = (d: Dialect): string => `SELECT id FROM api_keys WHERE id IN (${d.jsonStrings('?')})`;
const EXISTING_USERS = (d: Dialect): string => `SELECT id FROM users WHERE id IN (${d.jsonIntegers('?')})`;
const EXISTING_CONFIGURATIONS = (d: Dialect): string => `SELECT id FROM configurations WHERE id IN (${d.jsonStrings('?')})`;

export class ShippedLogsRepository {
  /**
   * This store's instance id, made on first use (a replica's first start) and kept: it
   * tells the control plane which rows are this replica's, whatever its name. Never shown
   * by any API: knowing it is what shipping rows as this replica takes.
   */
  *instanceId(): Step<string> {
    const existing = yield* get<{ instance_id: string }>(GET_INSTANCE);
    if (existing !== undefined) return existing.instance_id;
    // ON CONFLICT DO NOTHING, then read: two processes starting on one file agree on one id.
    yield* run(PUT_INSTANCE, randomBytes(16).toString('hex'), nowIso());
    return (yield* get<{ instance_id: string }>(GET_INSTANCE))!.instance_id;
  }

  // Replica side

  *getCursor(kind: ShippedKind): Step<LogCursor> {
    const r = yield* get<{ last_id: number; last_request_id: string; id_base: number }>(GET_CURSOR, kind);
    return r === undefined ? { lastId: 0, lastRequestId: '', idBase: 0 } : { lastId: r.last_id, lastRequestId: r.last_request_id, idBase: r.id_base };
  }

  *putCursor(kind: ShippedKind, cursor: LogCursor): Step<void> {
    yield* run(PUT_CURSOR, kind, cursor.lastId, cursor.lastRequestId, cursor.idBase, nowIso());
  }

  /**
   * Whether the cursor still points into this table's id sequence. Row ids are
   * max(id) + 1, so once retention has emptied a table its ids start again from 1: the
   * cursor is then past the end, or its id names a different row (another request id).
   */
  *cursorValid(kind: ShippedKind, cursor: LogCursor): Step<boolean> {
    if (cursor.lastId === 0) return true;
    const statements = KINDS[kind];
    const at = yield* get<{ request_id: string }>(statements.requestIdAt, cursor.lastId);
    if (at !== undefined) return at.request_id === cursor.lastRequestId;
    return (yield* get<{ id: number }>(statements.maxId))!.id > cursor.lastId;
  }

  /** This store's own rows of `kind` after `afterId`, oldest first. */
  *rowsAfter(kind: ShippedKind, afterId: number, limit: number): Step<ShippedApiLog[] | ShippedUsageLog[]> {
    const rows = yield* all<Record<string, unknown>>(KINDS[kind].after, afterId, limit);
    if (kind === 'api') {
      for (const row of rows) if (row['end_user'] === null) delete row['end_user'];
      return rows as unknown as ShippedApiLog[];
    }
    return (rows as unknown as UsageLogRecord[]).map((r) => ({ ...r, reveal: parseRevealCounts(r.reveal) }));
  }

  // Control-plane side

  /** Which of these ids exist in the store. */
  *existingReferences(ids: { apiKeys: string[]; users: number[]; configurations: string[] }): Step<{ apiKeys: Set<string>; users: Set<number>; configurations: Set<string> }> {
    return {
      apiKeys: yield* existing(EXISTING_API_KEYS, ids.apiKeys),
      users: yield* existing(EXISTING_USERS, ids.users),
      configurations: yield* existing(EXISTING_CONFIGURATIONS, ids.configurations),
    };
  }

  /**
   * Stores a replica's batch in one transaction; rows it already holds (the same instance
   * and row id: a retried batch) are skipped by the unique index. Returns how many rows
   * were new.
   */
  *receive(replica: string, instance: string, logs: ShippedLogs): Step<{ stored: number; duplicates: number }> {
    const stored = yield* atomically(function* () {
      const apiRows = logs.api.map((r) => [
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
      ]);
      const usageRows = logs.usage.map((r) => [
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
      ]);
      return (yield* insertChunked(RECEIVE_API, apiRows)) + (yield* insertChunked(RECEIVE_USAGE, usageRows));
    });
    return { stored, duplicates: logs.api.length + logs.usage.length - stored };
  }
}

/**
 * Inserts `rows` (each a statement's parameters for one row) with `statements` (by rows,
 * 2^k at index k), the largest chunk that fits first; answers the rows inserted.
 */
function* insertChunked(statements: readonly string[], rows: readonly unknown[][]): Step<number> {
  let inserted = 0;
  for (let at = 0; at < rows.length; ) {
    const k = Math.min(statements.length - 1, 31 - Math.clz32(rows.length - at));
    const size = 2 ** k;
    inserted += (yield* run(statements[k]!, ...rows.slice(at, at + size).flat())).changes;
    at += size;
  }
  return inserted;
}

/** Which of `values` are ids of rows `sql` finds; no statement for none. */
function* existing<T>(sql: Sql, values: readonly T[]): Step<Set<T>> {
  if (values.length === 0) return new Set();
  return new Set((yield* all<{ id: T }>(sql, JSON.stringify([...new Set(values)]))).map((r) => r.id));
}
