import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite';
import { ANSWER_LEVELS, type RevealCounts } from '../fields/reveal.ts';
import { runInTransaction } from './sqlite/transaction.ts';

export type LogKind = 'activity' | 'api' | 'usage';
export const LOG_KINDS: readonly LogKind[] = Object.freeze(['activity', 'api', 'usage']);

/**
 * `createdAt` is required: rows reach the store in batches, after the fact, and must carry
 * the time the event happened rather than the time of the flush.
 */
export interface NewActivityLog {
  action: string;
  description: string;
  ip: string;
  userId?: number | null;
  causerEmail?: string | null;
  requestId?: string | null;
  createdAt: string;
}

export interface ActivityLog {
  id: number;
  action: string;
  description: string;
  ip: string;
  userId: number | null;
  causerEmail: string | null;
  requestId: string | null;
  createdAt: string;
}

export interface NewApiLog {
  requestId: string;
  method: string;
  path: string;
  statusCode: number;
  apiKeyId?: string | null;
  userId?: number | null;
  configurationId?: string | null;
  destination?: string | null;
  /** The relay's end user (its subject, never its token); null elsewhere. */
  endUser?: string | null;
  durationMs: number;
  ip: string;
  createdAt: string;
}

export interface ApiLog {
  id: number;
  requestId: string;
  method: string;
  path: string;
  statusCode: number;
  apiKeyId: string | null;
  userId: number | null;
  configurationId: string | null;
  destination: string | null;
  endUser: string | null;
  durationMs: number;
  ip: string;
  createdAt: string;
}

export type UsageMode = 'encrypt' | 'decrypt';

export interface NewUsageLog {
  requestId: string;
  configurationId: string;
  apiKeyId?: string | null;
  userId?: number | null;
  mode: UsageMode;
  fieldCount: number;
  bytes: number;
  /** A decrypt's values per reveal level (DESIGN §14); absent or null for an encrypt. */
  reveal?: RevealCounts | null;
  createdAt: string;
}

export interface UsageLog {
  id: number;
  requestId: string;
  configurationId: string;
  apiKeyId: string | null;
  userId: number | null;
  mode: UsageMode;
  fieldCount: number;
  bytes: number;
  reveal: RevealCounts | null;
  createdAt: string;
}

export interface LogBatch {
  activity: readonly NewActivityLog[];
  api: readonly NewApiLog[];
  usage: readonly NewUsageLog[];
}

export type UnifiedLog =
  | { kind: 'activity'; log: ActivityLog }
  | { kind: 'api'; log: ApiLog }
  | { kind: 'usage'; log: UsageLog };

/** Narrows a list; filters combine with AND. */
export interface LogFilter {
  /** Only rows of this user. */
  userId?: number;
  /** Only rows of this request (the `x-svc-request-id` of its response). */
  requestId?: string;
}

/**
 * Where a page of a log list ends, in the lists' order (newest first: `created_at`, then
 * `id`, then the kind, all descending): the next page starts right after it. The kind
 * only matters in the unified list, where rows of different tables can tie on the rest.
 */
export interface LogPosition {
  readonly createdAt: string;
  readonly id: number;
  readonly kind: LogKind;
}

export interface LogQuery extends LogFilter {
  limit: number;
  offset: number;
  /**
   * Keyset pagination: the rows after this position, instead of `offset` rows in. Its cost
   * does not grow with how deep the page is, where an offset is walked row by row.
   */
  after?: LogPosition;
}

/** One page of a list, and where the next one starts (null: this is the last). */
export interface LogPage<T> {
  rows: T[];
  next: LogPosition | null;
}

interface ActivityLogRecord {
  id: number;
  action: string;
  description: string;
  ip: string;
  user_id: number | null;
  causer_email: string | null;
  request_id: string | null;
  created_at: string;
}

/** An api_logs row as SQLite returns it (also the wire format of shipped logs). */
export interface ApiLogRecord {
  id: number;
  request_id: string;
  method: string;
  path: string;
  status_code: number;
  api_key_id: string | null;
  user_id: number | null;
  configuration_id: string | null;
  destination: string | null;
  end_user: string | null;
  duration_ms: number;
  ip: string;
  created_at: string;
}

/** A usage_logs row as SQLite returns it (also the wire format of shipped logs). */
export interface UsageLogRecord {
  id: number;
  request_id: string;
  configuration_id: string;
  api_key_id: string | null;
  user_id: number | null;
  mode: UsageMode;
  field_count: number;
  bytes: number;
  /** `{"plain":n,"mask":n,"redact":n,"token":n}`, or null. */
  reveal: string | null;
  created_at: string;
}

/** The counts of a `reveal` column; null for none, or for text that does not hold four counts. */
export function parseRevealCounts(text: string | null): RevealCounts | null {
  if (text === null) return null;
  try {
    const value = JSON.parse(text) as Record<string, unknown>;
    const counts: RevealCounts = { plain: 0, mask: 0, redact: 0, token: 0 };
    for (const level of ANSWER_LEVELS) {
      const n = value[level];
      if (!Number.isSafeInteger(n) || (n as number) < 0) return null;
      counts[level] = n as number;
    }
    return counts;
  } catch {
    return null;
  }
}

/** The text of a `reveal` column: keys in `x-svc-reveal` order. */
export function revealCountsText(counts: RevealCounts | null | undefined): string | null {
  if (counts == null) return null;
  return `{"plain":${counts.plain},"mask":${counts.mask},"redact":${counts.redact},"token":${counts.token}}`;
}

function toActivityLog(r: ActivityLogRecord): ActivityLog {
  return {
    id: r.id,
    action: r.action,
    description: r.description,
    ip: r.ip,
    userId: r.user_id,
    causerEmail: r.causer_email,
    requestId: r.request_id,
    createdAt: r.created_at,
  };
}

function toApiLog(r: ApiLogRecord): ApiLog {
  return {
    id: r.id,
    requestId: r.request_id,
    method: r.method,
    path: r.path,
    statusCode: r.status_code,
    apiKeyId: r.api_key_id,
    userId: r.user_id,
    configurationId: r.configuration_id,
    destination: r.destination,
    endUser: r.end_user,
    durationMs: r.duration_ms,
    ip: r.ip,
    createdAt: r.created_at,
  };
}

function toUsageLog(r: UsageLogRecord): UsageLog {
  return {
    id: r.id,
    requestId: r.request_id,
    configurationId: r.configuration_id,
    apiKeyId: r.api_key_id,
    userId: r.user_id,
    mode: r.mode,
    fieldCount: r.field_count,
    bytes: r.bytes,
    reveal: parseRevealCounts(r.reveal),
    createdAt: r.created_at,
  };
}

const TABLES: Readonly<Record<LogKind, string>> = { activity: 'activity_logs', api: 'api_logs', usage: 'usage_logs' };

/** Rows per DELETE during retention, so log writers get the lock between chunks. */
export const DELETE_CHUNK = 5_000;

function deleteChunkSql(table: string): string {
  return `DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table} WHERE created_at < ? LIMIT ${DELETE_CHUNK})`;
}

/**
 * The write statements, with `activityParams` & co. giving their parameters: shared by the
 * repository and by the threads that write logs on their own connection (sql-thread.ts).
 */
export const LOG_SQL = Object.freeze({
  insert: Object.freeze({
    activity: `INSERT INTO activity_logs (action, description, ip, user_id, causer_email, request_id, created_at)
      VALUES (?, ?, ?, ?, ?, ?, ?)`,
    api: `INSERT INTO api_logs (request_id, method, path, status_code, api_key_id, user_id, configuration_id, destination,
        duration_ms, ip, created_at, end_user)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    usage: `INSERT INTO usage_logs (request_id, configuration_id, api_key_id, user_id, mode, field_count, bytes, reveal, created_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  }),
  /** One chunk of retention; the parameter is the cutoff, as `toISOString()` writes it. */
  deleteChunk: Object.freeze({ activity: deleteChunkSql(TABLES.activity), api: deleteChunkSql(TABLES.api), usage: deleteChunkSql(TABLES.usage) }),
});

export function activityParams(r: NewActivityLog): SQLInputValue[] {
  return [r.action, r.description, r.ip, r.userId ?? null, r.causerEmail ?? null, r.requestId ?? null, r.createdAt];
}

export function apiParams(r: NewApiLog): SQLInputValue[] {
  return [
    r.requestId,
    r.method,
    r.path,
    r.statusCode,
    r.apiKeyId ?? null,
    r.userId ?? null,
    r.configurationId ?? null,
    r.destination ?? null,
    r.durationMs,
    r.ip,
    r.createdAt,
    r.endUser ?? null,
  ];
}

export function usageParams(r: NewUsageLog): SQLInputValue[] {
  return [r.requestId, r.configurationId, r.apiKeyId ?? null, r.userId ?? null, r.mode, r.fieldCount, r.bytes, revealCountsText(r.reveal), r.createdAt];
}

/** A cutoff in the `toISOString()` form the created_at columns hold, so text comparison orders by time. */
export function normaliseCutoff(isoTimestamp: string): string {
  const cutoff = new Date(isoTimestamp);
  if (Number.isNaN(cutoff.getTime())) throw new RangeError(`Not a timestamp: ${isoTimestamp}`);
  return cutoff.toISOString();
}

/**
 * `count(*)` walks a table's whole index: about 10 ms per million rows, on the event loop,
 * for every page of a log list (in the soak test, with log reads in the mix, CPU per
 * request grew 45% in 10 minutes as the tables grew). An unfiltered count of a table this
 * big is reused for up to `COUNT_REUSE_FACTOR` times what it cost (at most
 * `COUNT_REUSE_MAX_MS`), which keeps counting under 1% of the event loop; the `total` of a
 * big log list can then lag by that long, as entries already reach the store in batches,
 * after the fact. Smaller tables and filtered lists are counted every time, exactly.
 */
const COUNT_REUSE_ROWS = 100_000;
const COUNT_REUSE_FACTOR = 100;
const COUNT_REUSE_MAX_MS = 60_000;

/**
 * Every combination of filters gets its own statement, prepared once: a single statement
 * with `($user IS NULL OR user_id = $user)` would be planned without knowing which
 * filters are set and could not use the (user_id, created_at) and request_id indexes.
 * Index into these arrays with `shapeOf(filter)`.
 */
const FILTER_SHAPES = [0, 1, 2, 3] as const;
const BY_USER = 1;
const BY_REQUEST = 2;

function shapeOf(filter: LogFilter): number {
  return (filter.userId === undefined ? 0 : BY_USER) | (filter.requestId === undefined ? 0 : BY_REQUEST);
}

function whereOf(shape: number): string[] {
  const terms: string[] = [];
  if (shape & BY_USER) terms.push('user_id = $user');
  if (shape & BY_REQUEST) terms.push('request_id = $request');
  return terms;
}

function filterParams(filter: LogFilter): Record<string, number | string> {
  const params: Record<string, number | string> = {};
  if (filter.userId !== undefined) params['user'] = filter.userId;
  if (filter.requestId !== undefined) params['request'] = filter.requestId;
  return params;
}

interface KindStatements {
  /** By filter shape. */
  count: StatementSync[];
  page: StatementSync[];
  /** By filter shape: the rows after a position. */
  after: StatementSync[];
  byId: StatementSync;
  anyOlder: StatementSync;
  deleteChunk: StatementSync;
}

export class LogsRepository {
  readonly #db: DatabaseSync;
  readonly #insertActivity: StatementSync;
  readonly #insertApi: StatementSync;
  readonly #insertUsage: StatementSync;
  /** By filter shape. */
  readonly #unified: StatementSync[];
  readonly #unifiedAfter: StatementSync[];
  readonly #ipOfRequest: StatementSync;
  readonly #busyTimeout: StatementSync;
  readonly #kinds: Record<LogKind, KindStatements>;
  /** Unfiltered counts of big tables, and until when (performance.now()) they may be reused. */
  readonly #totals = new Map<LogKind, { n: number; until: number }>();

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#insertActivity = db.prepare(LOG_SQL.insert.activity);
    this.#insertApi = db.prepare(LOG_SQL.insert.api);
    this.#insertUsage = db.prepare(LOG_SQL.insert.usage);
    // Each branch is ordered by its created_at index (whose entries end with the rowid),
    // which lets SQLite merge them instead of sorting every log row for each page. A kind
    // that is not asked for has a constant false WHERE term, which SQLite tests once before
    // touching the table. The kind breaks ties between tables, so the order is total and a
    // position names one place in it.
    //
    // After a position (created_at, id, kind), a branch of a kind ordered before it (a
    // smaller name, as the order is descending) may also hold the row with the same
    // created_at and id: its bound is id + 1, bound by the caller ($after_<kind>).
    const unified = (shape: number, after: boolean) => {
      const branch = (kind: LogKind) => ['$' + kind, ...whereOf(shape), ...(after ? [`(created_at, id) < ($at, $after_${kind})`] : [])].join(' AND ');
      return db.prepare(`
        SELECT 'activity' AS kind, id, created_at FROM activity_logs WHERE ${branch('activity')}
        UNION ALL SELECT 'api', id, created_at FROM api_logs WHERE ${branch('api')}
        UNION ALL SELECT 'usage', id, created_at FROM usage_logs WHERE ${branch('usage')}
        ORDER BY created_at DESC, id DESC, kind DESC LIMIT $limit${after ? '' : ' OFFSET $offset'}`);
    };
    this.#unified = FILTER_SHAPES.map((shape) => unified(shape, false));
    this.#unifiedAfter = FILTER_SHAPES.map((shape) => unified(shape, true));
    this.#ipOfRequest = db.prepare('SELECT ip FROM api_logs WHERE request_id = ? ORDER BY id LIMIT 1');
    this.#busyTimeout = db.prepare('PRAGMA busy_timeout');
    const prepareKind = (table: string): KindStatements => ({
      count: FILTER_SHAPES.map((shape) => {
        const where = whereOf(shape);
        return db.prepare(`SELECT count(*) AS n FROM ${table}${where.length === 0 ? '' : ` WHERE ${where.join(' AND ')}`}`);
      }),
      page: FILTER_SHAPES.map((shape) => {
        const where = whereOf(shape);
        return db.prepare(
          `SELECT * FROM ${table}${where.length === 0 ? '' : ` WHERE ${where.join(' AND ')}`} ORDER BY created_at DESC, id DESC LIMIT $limit OFFSET $offset`,
        );
      }),
      // The row value is a range on the (created_at) and (user_id, created_at) indexes,
      // whose entries end with the rowid: the page starts at the position, however deep.
      after: FILTER_SHAPES.map((shape) => {
        const where = [...whereOf(shape), '(created_at, id) < ($at, $id)'];
        return db.prepare(`SELECT * FROM ${table} WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT $limit`);
      }),
      byId: db.prepare(`SELECT * FROM ${table} WHERE id = ?`),
      anyOlder: db.prepare(`SELECT EXISTS (SELECT 1 FROM ${table} WHERE created_at < ?) AS found`),
      deleteChunk: db.prepare(deleteChunkSql(table)),
    });
    this.#kinds = { activity: prepareKind(TABLES.activity), api: prepareKind(TABLES.api), usage: prepareKind(TABLES.usage) };
  }

  /** Writes the batch in one transaction: all rows or none. */
  insertActivity(rows: readonly NewActivityLog[]): void {
    this.#insert(this.#insertActivity, rows, activityParams);
  }

  insertApi(rows: readonly NewApiLog[]): void {
    this.#insert(this.#insertApi, rows, apiParams);
  }

  insertUsage(rows: readonly NewUsageLog[]): void {
    this.#insert(this.#insertUsage, rows, usageParams);
  }

  /**
   * Writes a batch of every kind in one transaction: all rows or none. With `wait: false`
   * a write lock held by another connection fails the batch at once (SQLITE_BUSY) instead
   * of waiting out the busy timeout: node:sqlite waits synchronously, and a log writer
   * that waited would hold up every request on the event loop for that long.
   */
  insertBatch(batch: LogBatch, options: { wait: boolean } = { wait: true }): void {
    const write = () =>
      runInTransaction(this.#db, () => {
        this.insertActivity(batch.activity);
        this.insertApi(batch.api);
        this.insertUsage(batch.usage);
      });
    if (options.wait || this.#db.isTransaction) {
      write();
      return;
    }
    const { timeout } = this.#busyTimeout.get() as { timeout: number };
    this.#db.exec('PRAGMA busy_timeout = 0');
    try {
      write();
    } finally {
      this.#db.exec(`PRAGMA busy_timeout = ${Math.trunc(timeout)}`);
    }
  }

  count(kind: LogKind, filter: LogFilter = {}): number {
    const shape = shapeOf(filter);
    const started = performance.now();
    if (shape === 0) {
      const reused = this.#totals.get(kind);
      if (reused !== undefined && started < reused.until) return reused.n;
    }
    const { n } = this.#kinds[kind].count[shape]!.get(filterParams(filter)) as { n: number };
    if (shape === 0) {
      if (n >= COUNT_REUSE_ROWS) this.#totals.set(kind, { n, until: started + Math.min(COUNT_REUSE_MAX_MS, (performance.now() - started) * COUNT_REUSE_FACTOR) });
      else this.#totals.delete(kind);
    }
    return n;
  }

  /** Newest first. */
  listActivity(query: LogQuery): ActivityLog[] {
    return (this.#page('activity', query) as unknown as ActivityLogRecord[]).map(toActivityLog);
  }

  listApi(query: LogQuery): ApiLog[] {
    return (this.#page('api', query) as unknown as ApiLogRecord[]).map(toApiLog);
  }

  listUsage(query: LogQuery): UsageLog[] {
    return (this.#page('usage', query) as unknown as UsageLogRecord[]).map(toUsageLog);
  }

  /** A page of the activity log, newest first, with where the next page starts. */
  activityPage(query: LogQuery): LogPage<ActivityLog> {
    return this.#pageOf<ActivityLogRecord, ActivityLog>('activity', query, toActivityLog);
  }

  apiPage(query: LogQuery): LogPage<ApiLog> {
    return this.#pageOf<ApiLogRecord, ApiLog>('api', query, toApiLog);
  }

  usagePage(query: LogQuery): LogPage<UsageLog> {
    return this.#pageOf<UsageLogRecord, UsageLog>('usage', query, toUsageLog);
  }

  /** Rows of the given kinds, newest first, interleaved by time. */
  listUnified(kinds: readonly LogKind[], query: LogQuery): UnifiedLog[] {
    return this.unifiedPage(kinds, query).rows;
  }

  /**
   * As listUnified, with where the next page starts. That is the position of the page's
   * last entry even when its row was deleted by retention between the two reads, so the
   * next page does not repeat or skip anything.
   */
  unifiedPage(kinds: readonly LogKind[], query: LogQuery): LogPage<UnifiedLog> {
    const shape = shapeOf(query);
    const params: Record<string, SQLInputValue> = {
      ...filterParams(query),
      activity: kinds.includes('activity') ? 1 : 0,
      api: kinds.includes('api') ? 1 : 0,
      usage: kinds.includes('usage') ? 1 : 0,
      // One more than asked for tells whether there is a next page.
      limit: query.limit + 1,
    };
    const after = query.after;
    if (after === undefined) params['offset'] = query.offset;
    else {
      params['at'] = after.createdAt;
      for (const kind of LOG_KINDS) params[`after_${kind}`] = kind < after.kind ? after.id + 1 : after.id;
    }
    const statement = after === undefined ? this.#unified[shape]! : this.#unifiedAfter[shape]!;
    const refs = statement.all(params) as unknown as Array<{ kind: LogKind; id: number; created_at: string }>;
    const more = refs.length > query.limit;
    if (more) refs.length = query.limit;
    const tail = refs.at(-1);
    const out: UnifiedLog[] = [];
    for (const ref of refs) {
      const record = this.#kinds[ref.kind].byId.get(ref.id);
      // A retention delete may have run between the two statements.
      if (record === undefined) continue;
      if (ref.kind === 'activity') out.push({ kind: 'activity', log: toActivityLog(record as unknown as ActivityLogRecord) });
      else if (ref.kind === 'api') out.push({ kind: 'api', log: toApiLog(record as unknown as ApiLogRecord) });
      else out.push({ kind: 'usage', log: toUsageLog(record as unknown as UsageLogRecord) });
    }
    return { rows: out, next: more && tail !== undefined ? { createdAt: tail.created_at, id: tail.id, kind: tail.kind } : null };
  }

  countUnified(kinds: readonly LogKind[], filter: LogFilter = {}): number {
    let total = 0;
    for (const kind of new Set(kinds)) total += this.count(kind, filter);
    return total;
  }

  /**
   * The client address of a request, from its api log entry. Usage entries do not keep
   * one of their own: the api entry of the same request already does.
   */
  ipOfRequest(requestId: string): string | undefined {
    const row = this.#ipOfRequest.get(requestId) as { ip: string } | undefined;
    return row?.ip;
  }

  /**
   * Retention: deletes rows created before `isoTimestamp`, in chunks that each commit on
   * their own, and returns how many rows of each kind went.
   */
  deleteOlderThan(isoTimestamp: string): Record<LogKind, number> {
    const bound = normaliseCutoff(isoTimestamp);
    const deleted: Record<LogKind, number> = { activity: 0, api: 0, usage: 0 };
    for (const kind of LOG_KINDS) {
      for (;;) {
        const changes = this.deleteChunkOlderThan(kind, bound);
        deleted[kind] += changes;
        if (changes < DELETE_CHUNK) break;
      }
    }
    return deleted;
  }

  /** Whether any row of any kind was created before `isoTimestamp` (one index probe per kind). */
  anyOlderThan(isoTimestamp: string): boolean {
    const bound = normaliseCutoff(isoTimestamp);
    return LOG_KINDS.some((kind) => (this.#kinds[kind].anyOlder.get(bound) as { found: number }).found === 1);
  }

  /**
   * One chunk of `deleteOlderThan` for one kind, in its own transaction, so a caller can
   * yield to the event loop between chunks. Returns the rows deleted; fewer than
   * `DELETE_CHUNK` means none older are left.
   */
  deleteChunkOlderThan(kind: LogKind, isoTimestamp: string): number {
    this.#totals.delete(kind);
    const bound = normaliseCutoff(isoTimestamp);
    const statement = this.#kinds[kind].deleteChunk;
    return Number(runInTransaction(this.#db, () => statement.run(bound)).changes);
  }

  #insert<T>(statement: StatementSync, rows: readonly T[], params: (row: T) => SQLInputValue[]): void {
    if (rows.length === 0) return;
    runInTransaction(this.#db, () => {
      for (const row of rows) statement.run(...params(row));
    });
  }

  #pageOf<R extends { id: number; created_at: string }, T>(kind: LogKind, query: LogQuery, convert: (record: R) => T): LogPage<T> {
    // One more than asked for tells whether there is a next page.
    const records = this.#page(kind, { ...query, limit: query.limit + 1 }) as unknown as R[];
    const more = records.length > query.limit;
    if (more) records.length = query.limit;
    const tail = records.at(-1);
    return { rows: records.map(convert), next: more && tail !== undefined ? { createdAt: tail.created_at, id: tail.id, kind } : null };
  }

  #page(kind: LogKind, query: LogQuery): ReturnType<StatementSync['all']> {
    const statements = this.#kinds[kind];
    const after = query.after;
    if (after === undefined) return statements.page[shapeOf(query)]!.all({ ...filterParams(query), limit: query.limit, offset: query.offset });
    return statements.after[shapeOf(query)]!.all({ ...filterParams(query), limit: query.limit, at: after.createdAt, id: after.id });
  }
}
