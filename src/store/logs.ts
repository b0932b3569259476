import { ANSWER_LEVELS, type RevealCounts } from '../fields/reveal.ts';
import { all, atomically, dropLogPartitions, get, prepareLogPartitions, run, runEach, withoutWaiting, type Dialect, type Sql, type Step } from './query.ts';
import { nowIso } from './sql.ts';

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

/**
 * One chunk of retention; both parameters are the cutoff. The outer bound repeats the inner
 * one so that PostgreSQL scans only the partitions before the cutoff for the ids, rather
 * than every day's partition.
 */
function deleteChunkSql(table: string): string {
  return `DELETE FROM ${table} WHERE created_at < ? AND id IN (SELECT id FROM ${table} WHERE created_at < ? LIMIT ${DELETE_CHUNK})`;
}

/** Retention's DELETE, run by the repository and by the thread that sweeps on its own connection. */
export const LOG_SQL = Object.freeze({
  /** One chunk of retention; both parameters are the cutoff, as `toISOString()` writes it. */
  deleteChunk: Object.freeze({ activity: deleteChunkSql(TABLES.activity), api: deleteChunkSql(TABLES.api), usage: deleteChunkSql(TABLES.usage) }),
});

/** The columns each kind's INSERT writes, in the order `activityParams` & co. give them. */
const INSERT_COLUMNS: Readonly<Record<LogKind, readonly string[]>> = Object.freeze({
  activity: ['action', 'description', 'ip', 'user_id', 'causer_email', 'request_id', 'created_at'],
  api: ['request_id', 'method', 'path', 'status_code', 'api_key_id', 'user_id', 'configuration_id', 'destination', 'duration_ms', 'ip', 'created_at', 'end_user'],
  usage: ['request_id', 'configuration_id', 'api_key_id', 'user_id', 'mode', 'field_count', 'bytes', 'reveal', 'created_at'],
});

/** A parameter of the write statements. */
export type LogParam = string | number | null;

/**
 * Rows per INSERT statement. One statement of many VALUES tuples binds and steps once
 * where a statement per row crosses into SQLite once a row (on PostgreSQL, a round trip a
 * row). Rows past the last full statement go in halving sizes (16, 8, … 1).
 */
const ROWS_PER_INSERT = 32;
const INSERT_SIZES: readonly number[] = Object.freeze(Array.from({ length: Math.log2(ROWS_PER_INSERT) + 1 }, (_, i) => ROWS_PER_INSERT >> i));

/** The INSERT of `n` rows of `kind`: one `(?, …)` tuple per row, as many marks as columns. */
function insertSql(kind: LogKind, n: number): string {
  const columns = INSERT_COLUMNS[kind];
  const tuple = `(${columns.map(() => '?').join(', ')})`;
  return `INSERT INTO ${TABLES[kind]} (${columns.join(', ')}) VALUES ${Array<string>(n).fill(tuple).join(', ')}`;
}

/**
 * Every log INSERT, by name `<kind>*<rows>`: the statements of the repository and of the
 * thread that writes logs on its own connection (sql-thread.ts), which prepares them all.
 */
export const LOG_INSERTS: Readonly<Record<string, string>> = Object.freeze(
  Object.fromEntries(LOG_KINDS.flatMap((kind) => INSERT_SIZES.map((n) => [`${kind}*${n}`, insertSql(kind, n)]))),
);

/** INSERTs of one statement name: the parameters of each statement, its rows' in order. */
export type LogInsertRun = [name: string, statements: LogParam[][]];

/** `rows` of `kind`, in order, as runs of LOG_INSERTS: full statements first, then the rest. */
function insertRuns<T>(kind: LogKind, rows: readonly T[], params: (row: T) => LogParam[]): LogInsertRun[] {
  const runs: LogInsertRun[] = [];
  let at = 0;
  for (const n of INSERT_SIZES) {
    const statements: LogParam[][] = [];
    while (rows.length - at >= n) {
      const flat: LogParam[] = [];
      for (const end = at + n; at < end; at++) flat.push(...params(rows[at]!));
      statements.push(flat);
    }
    if (statements.length > 0) runs.push([`${kind}*${n}`, statements]);
  }
  return runs;
}

/** A batch's rows as runs of LOG_INSERTS: activity, then api, then usage. */
export function batchRuns(batch: LogBatch): LogInsertRun[] {
  return [...insertRuns('activity', batch.activity, activityParams), ...insertRuns('api', batch.api, apiParams), ...insertRuns('usage', batch.usage, usageParams)];
}

function activityParams(r: NewActivityLog): LogParam[] {
  return [r.action, r.description, r.ip, r.userId ?? null, r.causerEmail ?? null, r.requestId ?? null, r.createdAt];
}

function apiParams(r: NewApiLog): LogParam[] {
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

function usageParams(r: NewUsageLog): LogParam[] {
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
 * with `(? IS NULL OR user_id = ?)` would be planned without knowing which filters are
 * set and could not use the (user_id, created_at) and request_id indexes. Index into
 * these arrays with `shapeOf(filter)`; `filterParams(filter)` gives the filters' values
 * in the order their terms appear.
 */
const FILTER_SHAPES = [0, 1, 2, 3] as const;
const BY_USER = 1;
const BY_REQUEST = 2;

function shapeOf(filter: LogFilter): number {
  return (filter.userId === undefined ? 0 : BY_USER) | (filter.requestId === undefined ? 0 : BY_REQUEST);
}

function whereOf(shape: number): string[] {
  const terms: string[] = [];
  if (shape & BY_USER) terms.push('user_id = ?');
  if (shape & BY_REQUEST) terms.push('request_id = ?');
  return terms;
}

function filterParams(filter: LogFilter): Array<number | string> {
  const params: Array<number | string> = [];
  if (filter.userId !== undefined) params.push(filter.userId);
  if (filter.requestId !== undefined) params.push(filter.requestId);
  return params;
}

function whereClause(terms: readonly string[]): string {
  return terms.length === 0 ? '' : ` WHERE ${terms.join(' AND ')}`;
}

interface KindSql {
  /** By filter shape; parameters: the filters. */
  readonly count: readonly string[];
  /** By filter shape; parameters: the filters, limit, offset. */
  readonly page: readonly string[];
  /** By filter shape: the rows after a position; parameters: the filters, its created_at and id, limit. */
  readonly after: readonly string[];
  /** By id and created_at: a row the unified list found, read where it is (on PostgreSQL, in its day's partition only). */
  readonly byRef: string;
  readonly anyOlder: string;
  readonly deleteChunk: string;
}

function kindSql(table: string): KindSql {
  return {
    count: FILTER_SHAPES.map((shape) => `SELECT count(*) AS n FROM ${table}${whereClause(whereOf(shape))}`),
    page: FILTER_SHAPES.map((shape) => `SELECT * FROM ${table}${whereClause(whereOf(shape))} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`),
    // The row value is a range on the (created_at) and (user_id, created_at) indexes,
    // whose entries end with the rowid: the page starts at the position, however deep.
    after: FILTER_SHAPES.map(
      (shape) => `SELECT * FROM ${table}${whereClause([...whereOf(shape), '(created_at, id) < (?, ?)'])} ORDER BY created_at DESC, id DESC LIMIT ?`,
    ),
    byRef: `SELECT * FROM ${table} WHERE id = ? AND created_at = ?`,
    // One index probe: the first row older than the cutoff, if any. A row or none reads
    // alike in both databases, where EXISTS answers 1 in one and true in the other.
    anyOlder: `SELECT 1 AS found FROM ${table} WHERE created_at < ? LIMIT 1`,
    deleteChunk: deleteChunkSql(table),
  };
}

const KINDS: Readonly<Record<LogKind, KindSql>> = { activity: kindSql(TABLES.activity), api: kindSql(TABLES.api), usage: kindSql(TABLES.usage) };

/**
 * Each branch is ordered by its created_at index (whose entries end with the rowid, or
 * with id on PostgreSQL), which lets the database merge them instead of sorting every log
 * row for each page (how each database is asked to: Dialect.pagedBranch). A kind that is
 * not asked for has a constant false WHERE term (`$api = 1` with 0), which the database
 * tests once before touching the table. The kind breaks ties between tables, so the
 * order is total and a position names one place in it.
 *
 * After a position (created_at, id, kind), a branch of a kind ordered before it (a
 * smaller name, as the order is descending) may also hold the row with the same
 * created_at and id: its bound is id + 1, bound by the caller (unifiedParams).
 *
 * Named parameters: for each kind, whether it is asked for (`$activity` & co., 1 or 0)
 * and after a position the kind's id bound (`$activity_id` & co.); the filters (`$user`,
 * `$request`); after a position its created_at (`$after`); `$limit`, and without a
 * position `$offset`.
 */
function unifiedSql(shape: number, after: boolean): (dialect: Dialect) => string {
  const order = 'created_at DESC, id DESC';
  const limit = after ? '$limit' : 'CAST($limit AS BIGINT) + CAST($offset AS BIGINT)';
  const terms: string[] = [];
  if (shape & BY_USER) terms.push('user_id = $user');
  if (shape & BY_REQUEST) terms.push('request_id = $request');
  const branch = (dialect: Dialect, kind: LogKind): string => {
    const where = [`$${kind} = 1`, ...terms, ...(after ? [`(created_at, id) < ($after, $${kind}_id)`] : [])].join(' AND ');
    return dialect.pagedBranch(`SELECT '${kind}' AS kind, id, created_at FROM ${TABLES[kind]} WHERE ${where}`, order, limit, `${kind}_page`);
  };
  return (dialect) => `
    ${LOG_KINDS.map((kind) => branch(dialect, kind)).join('\n    UNION ALL ')}
    ORDER BY ${order}, kind DESC LIMIT $limit${after ? '' : ' OFFSET $offset'}`;
}

/** By filter shape. */
const UNIFIED = FILTER_SHAPES.map((shape) => unifiedSql(shape, false));
const UNIFIED_AFTER = FILTER_SHAPES.map((shape) => unifiedSql(shape, true));

/**
 * The statement that finds a page of the unified list, and its parameters: what
 * unifiedPage runs first (then it reads each row it names). Also what an EXPLAIN of that
 * page is made of.
 */
export function unifiedPageStatement(kinds: readonly LogKind[], query: LogQuery): { sql: Sql; params: Record<string, number | string> } {
  const shape = shapeOf(query);
  return { sql: query.after === undefined ? UNIFIED[shape]! : UNIFIED_AFTER[shape]!, params: unifiedParams(kinds, query) };
}

/** A statement takes only the named parameters it has. */
function unifiedParams(kinds: readonly LogKind[], query: LogQuery): Record<string, number | string> {
  const after = query.after;
  const params: Record<string, number | string> = {};
  for (const kind of LOG_KINDS) {
    params[kind] = kinds.includes(kind) ? 1 : 0;
    if (after !== undefined) params[`${kind}_id`] = kind < after.kind ? after.id + 1 : after.id;
  }
  if (query.userId !== undefined) params['user'] = query.userId;
  if (query.requestId !== undefined) params['request'] = query.requestId;
  if (after !== undefined) params['after'] = after.createdAt;
  // One more than asked for tells whether there is a next page.
  params['limit'] = query.limit + 1;
  if (after === undefined) params['offset'] = query.offset;
  return params;
}

const IP_OF_REQUEST = 'SELECT ip FROM api_logs WHERE request_id = ? ORDER BY id LIMIT 1';

export class LogsRepository {
  /** Unfiltered counts of big tables, and until when (performance.now()) they may be reused. */
  readonly #totals = new Map<LogKind, { n: number; until: number }>();

  /** Writes the batch in one transaction: all rows or none. */
  *insertActivity(rows: readonly NewActivityLog[]): Step<void> {
    yield* insertRows('activity', rows, activityParams);
  }

  *insertApi(rows: readonly NewApiLog[]): Step<void> {
    yield* insertRows('api', rows, apiParams);
  }

  *insertUsage(rows: readonly NewUsageLog[]): Step<void> {
    yield* insertRows('usage', rows, usageParams);
  }

  /**
   * Writes a batch of every kind in one transaction: all rows or none. With `wait: false`
   * a write lock held by another connection fails the batch at once (on SQLite,
   * SQLITE_BUSY) instead of waiting out the busy timeout: node:sqlite waits
   * synchronously, and a log writer that waited would hold up every request on the event
   * loop for that long.
   */
  *insertBatch(batch: LogBatch, options: { wait: boolean } = { wait: true }): Step<void> {
    const write = () =>
      // The kinds' rows directly, not through insertActivity & co.: each of those opens a
      // savepoint inside this transaction, and SQLite then copies every page the inserts
      // change into its statement journal (a temp file past 64 KiB) for a rollback to that
      // savepoint that never comes; on PostgreSQL each savepoint is a round trip.
      atomically(() => runInserts(batchRuns(batch)));
    if (options.wait) yield* write();
    else yield* withoutWaiting(write);
  }

  *count(kind: LogKind, filter: LogFilter = {}): Step<number> {
    const shape = shapeOf(filter);
    const started = performance.now();
    if (shape === 0) {
      const reused = this.#totals.get(kind);
      if (reused !== undefined && started < reused.until) return reused.n;
    }
    const { n } = (yield* get<{ n: number }>(KINDS[kind].count[shape]!, ...filterParams(filter)))!;
    if (shape === 0) {
      if (n >= COUNT_REUSE_ROWS) this.#totals.set(kind, { n, until: started + Math.min(COUNT_REUSE_MAX_MS, (performance.now() - started) * COUNT_REUSE_FACTOR) });
      else this.#totals.delete(kind);
    }
    return n;
  }

  /** Newest first. */
  *listActivity(query: LogQuery): Step<ActivityLog[]> {
    return (yield* page<ActivityLogRecord>('activity', query)).map(toActivityLog);
  }

  *listApi(query: LogQuery): Step<ApiLog[]> {
    return (yield* page<ApiLogRecord>('api', query)).map(toApiLog);
  }

  *listUsage(query: LogQuery): Step<UsageLog[]> {
    return (yield* page<UsageLogRecord>('usage', query)).map(toUsageLog);
  }

  /** A page of the activity log, newest first, with where the next page starts. */
  *activityPage(query: LogQuery): Step<LogPage<ActivityLog>> {
    return yield* pageOf<ActivityLogRecord, ActivityLog>('activity', query, toActivityLog);
  }

  *apiPage(query: LogQuery): Step<LogPage<ApiLog>> {
    return yield* pageOf<ApiLogRecord, ApiLog>('api', query, toApiLog);
  }

  *usagePage(query: LogQuery): Step<LogPage<UsageLog>> {
    return yield* pageOf<UsageLogRecord, UsageLog>('usage', query, toUsageLog);
  }

  /** Rows of the given kinds, newest first, interleaved by time. */
  *listUnified(kinds: readonly LogKind[], query: LogQuery): Step<UnifiedLog[]> {
    return (yield* this.unifiedPage(kinds, query)).rows;
  }

  /**
   * As listUnified, with where the next page starts. That is the position of the page's
   * last entry even when its row was deleted by retention between the two reads, so the
   * next page does not repeat or skip anything.
   */
  *unifiedPage(kinds: readonly LogKind[], query: LogQuery): Step<LogPage<UnifiedLog>> {
    const { sql, params } = unifiedPageStatement(kinds, query);
    const refs = yield* all<{ kind: LogKind; id: number; created_at: string }>(sql, params);
    const more = refs.length > query.limit;
    if (more) refs.length = query.limit;
    const tail = refs.at(-1);
    const out: UnifiedLog[] = [];
    for (const ref of refs) {
      const record = yield* get(KINDS[ref.kind].byRef, ref.id, ref.created_at);
      // A retention delete may have run between the two statements.
      if (record === undefined) continue;
      if (ref.kind === 'activity') out.push({ kind: 'activity', log: toActivityLog(record as ActivityLogRecord) });
      else if (ref.kind === 'api') out.push({ kind: 'api', log: toApiLog(record as ApiLogRecord) });
      else out.push({ kind: 'usage', log: toUsageLog(record as UsageLogRecord) });
    }
    return { rows: out, next: more && tail !== undefined ? { createdAt: tail.created_at, id: tail.id, kind: tail.kind } : null };
  }

  *countUnified(kinds: readonly LogKind[], filter: LogFilter = {}): Step<number> {
    let total = 0;
    for (const kind of new Set(kinds)) total += yield* this.count(kind, filter);
    return total;
  }

  /**
   * The client address of a request, from its api log entry. Usage entries do not keep
   * one of their own: the api entry of the same request already does.
   */
  *ipOfRequest(requestId: string): Step<string | undefined> {
    const row = yield* get<{ ip: string }>(IP_OF_REQUEST, requestId);
    return row?.ip;
  }

  /**
   * Retention: deletes rows created before `isoTimestamp` (whole days' partitions where the
   * tables are partitioned, then the rest in chunks that each commit on their own), and
   * returns how many rows of each kind went.
   */
  *deleteOlderThan(isoTimestamp: string): Step<Record<LogKind, number>> {
    const bound = normaliseCutoff(isoTimestamp);
    const deleted = yield* this.dropPartitionsOlderThan(bound);
    for (const kind of LOG_KINDS) {
      for (;;) {
        const changes = yield* this.deleteChunkOlderThan(kind, bound);
        deleted[kind] += changes;
        if (changes < DELETE_CHUNK) break;
      }
    }
    return deleted;
  }

  /**
   * Where the log tables are partitioned by day (PostgreSQL), makes the partitions of the
   * day of `isoTimestamp` (default: now) and of the next few days, if they are missing.
   * Runs when the store opens and with every retention run; nothing on SQLite.
   */
  *preparePartitions(isoTimestamp: string = nowIso()): Step<void> {
    yield* prepareLogPartitions(normaliseCutoff(isoTimestamp));
  }

  /**
   * The first part of retention where the log tables are partitioned by day: drops every
   * partition whose rows were all created before `isoTimestamp`, and returns how many rows
   * of each kind went. The rest (the day the cutoff falls in, the DEFAULT partition, and
   * every row on SQLite) is for deleteChunkOlderThan.
   */
  *dropPartitionsOlderThan(isoTimestamp: string): Step<Record<LogKind, number>> {
    const bound = normaliseCutoff(isoTimestamp);
    const dropped: Record<LogKind, number> = { activity: 0, api: 0, usage: 0 };
    for (const kind of LOG_KINDS) {
      dropped[kind] = yield* dropLogPartitions(TABLES[kind], bound);
      if (dropped[kind] > 0) this.#totals.delete(kind);
    }
    return dropped;
  }

  /** Whether any row of any kind was created before `isoTimestamp` (one index probe per kind). */
  *anyOlderThan(isoTimestamp: string): Step<boolean> {
    const bound = normaliseCutoff(isoTimestamp);
    for (const kind of LOG_KINDS) {
      if ((yield* get(KINDS[kind].anyOlder, bound)) !== undefined) return true;
    }
    return false;
  }

  /**
   * One chunk of `deleteOlderThan` for one kind, in its own transaction, so a caller can
   * yield to the event loop between chunks. Returns the rows deleted; fewer than
   * `DELETE_CHUNK` means none older are left.
   */
  *deleteChunkOlderThan(kind: LogKind, isoTimestamp: string): Step<number> {
    this.#totals.delete(kind);
    const bound = normaliseCutoff(isoTimestamp);
    const statement = KINDS[kind].deleteChunk;
    return (yield* atomically(() => run(statement, bound, bound))).changes;
  }
}

/** Inserts `rows` of one kind in one transaction (a savepoint inside a caller's); nothing for none. */
function* insertRows<T>(kind: LogKind, rows: readonly T[], params: (row: T) => LogParam[]): Step<void> {
  if (rows.length === 0) return;
  yield* atomically(() => runInserts(insertRuns(kind, rows, params)));
}

/** Runs `runs` (insertRuns, batchRuns) in whatever transaction is open. */
function* runInserts(runs: readonly LogInsertRun[]): Step<void> {
  for (const [name, statements] of runs) yield* runEach(LOG_INSERTS[name]!, statements);
}

function* pageOf<R extends { id: number; created_at: string }, T>(kind: LogKind, query: LogQuery, convert: (record: R) => T): Step<LogPage<T>> {
  // One more than asked for tells whether there is a next page.
  const records = yield* page<R>(kind, { ...query, limit: query.limit + 1 });
  const more = records.length > query.limit;
  if (more) records.length = query.limit;
  const tail = records.at(-1);
  return { rows: records.map(convert), next: more && tail !== undefined ? { createdAt: tail.created_at, id: tail.id, kind } : null };
}

function* page<R>(kind: LogKind, query: LogQuery): Step<R[]> {
  const statements = KINDS[kind];
  const after = query.after;
  if (after === undefined) return yield* all<R>(statements.page[shapeOf(query)]!, ...filterParams(query), query.limit, query.offset);
  return yield* all<R>(statements.after[shapeOf(query)]!, ...filterParams(query), after.createdAt, after.id, query.limit);
}
