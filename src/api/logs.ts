/**
 * The log endpoints (DESIGN §10; spec 2.9, 2.10, 4.8, 4.9): activity, api and usage logs,
 * each on its own and all three interleaved by time in the unified view. Newest first,
 * in the page envelope.
 *
 * Filters (all lists; they combine):
 * - `user` or `user_id`: the acting user's id;
 * - `request_id`: one request's entries, as named by its `x-svc-request-id`;
 * - unified only: `log_type` or `type`, one of `activity`, `api`, `usage`.
 *
 * Paging: `page` and `per_page` as every list; and `cursor`, the `next_cursor` of the
 * previous page (log-cursor.ts), which starts the page right after that page's last row
 * instead of walking `offset` rows to it. A page past the end is answered empty without
 * reading any row.
 *
 * A key limited to some configurations lists no logs (403, `everyConfiguration` in
 * route-table.ts): every list spans every configuration, in its rows and in the
 * configuration records it shows, and the direct routes refuse such a key any
 * configuration outside its scope.
 */
import type { Services } from '../services.ts';
import type { RequestContext } from '../http/context.ts';
import { sendJson } from '../http/respond.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import type { RevealCounts } from '../fields/reveal.ts';
import { LOG_KINDS, type ActivityLog, type ApiLog, type LogFilter, type LogKind, type LogPage, type LogQuery, type UnifiedLog, type UsageLog } from '../store/logs.ts';
import { logCursors, MAX_CURSOR_LENGTH, type CursorScope } from './log-cursor.ts';
import { cursorEnvelope, pageRequest, pastTheEnd, type PageRequest } from './pagination.ts';
import { configurationView, userView, type ConfigurationView, type UserView } from './presenters.ts';
import type { Handlers } from './routes.ts';
import { Validator } from './validation.ts';

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { listUnified, listActivity, listApi, listUsage } satisfies Handlers;

/** Request ids are at most this long (src/telemetry/request-id.ts). */
const REQUEST_ID_MAX = 128;

async function listUnified(ctx: RequestContext, services: Services): Promise<void> {
  const v = Validator.forQuery(ctx.query());
  const kinds = readKinds(v);
  const { query, page, scope } = readListQuery(services, v, 'unified', kinds);
  const { logs } = services.store;
  const total = await logs.countUnified(kinds, query);
  const show = new LogPresenter(services.store);
  const result = await read(page, total, () => logs.unifiedPage(kinds, query));
  await show.load(result.rows.map((entry) => entry.log), result.rows.flatMap((entry) => (entry.kind === 'usage' ? [entry.log.requestId] : [])));
  respond(ctx, services, page, scope, total, result, (row) => show.unified(row));
}

async function listActivity(ctx: RequestContext, services: Services): Promise<void> {
  const { query, page, scope } = readListQuery(services, Validator.forQuery(ctx.query()), 'activity', ['activity']);
  const { logs } = services.store;
  const total = await logs.count('activity', query);
  const show = new LogPresenter(services.store);
  const result = await read(page, total, () => logs.activityPage(query));
  await show.load(result.rows, []);
  respond(ctx, services, page, scope, total, result, (row) => show.activity(row));
}

async function listApi(ctx: RequestContext, services: Services): Promise<void> {
  const { query, page, scope } = readListQuery(services, Validator.forQuery(ctx.query()), 'api', ['api']);
  const { logs } = services.store;
  const total = await logs.count('api', query);
  const show = new LogPresenter(services.store);
  const result = await read(page, total, () => logs.apiPage(query));
  await show.load(result.rows, []);
  respond(ctx, services, page, scope, total, result, (row) => show.api(row));
}

async function listUsage(ctx: RequestContext, services: Services): Promise<void> {
  const { query, page, scope } = readListQuery(services, Validator.forQuery(ctx.query()), 'usage', ['usage']);
  const { logs } = services.store;
  const total = await logs.count('usage', query);
  const show = new LogPresenter(services.store);
  const result = await read(page, total, () => logs.usagePage(query));
  await show.load(result.rows, []);
  respond(ctx, services, page, scope, total, result, (row) => show.usage(row));
}

/**
 * The page's rows. A numbered page at or past the end is empty without a query: an
 * offset is walked row by row, so `page=1000000000` would otherwise read the whole table
 * to find nothing. A cursor page always reads, from its position on.
 */
async function read<T>(page: LogPageRequest, total: number, query: () => Promise<LogPage<T>>): Promise<LogPage<T>> {
  if (page.after === undefined && pastTheEnd(page, total)) return { rows: [], next: null };
  return query();
}

function respond<R, T>(ctx: RequestContext, services: Services, page: LogPageRequest, scope: CursorScope, total: number, result: LogPage<R>, show: (row: R) => T): void {
  const next = result.next === null ? null : logCursors(services.master).encode(scope, page.page + 1, result.next);
  sendJson(ctx, 200, cursorEnvelope(ctx, services.config.server.public_url, page, total, result.rows.map(show), next));
}

// ---------------------------------------------------------------------------------------
// Query steps

interface LogPageRequest extends PageRequest {
  /** Set by a `cursor`: the page starts after this row rather than at `offset`. */
  readonly after: LogQuery['after'];
}

/**
 * The filters and the page, `page` or `cursor`. A cursor must have been issued for this
 * very list (endpoint, kinds, filters, per_page): anything else is refused (422), so a
 * cursor never selects rows the request's own filters would not. `page` beside a cursor
 * must be the page the cursor leads to.
 */
function readListQuery(services: Services, v: Validator, list: string, kinds: readonly LogKind[]): { query: LogQuery; page: LogPageRequest; scope: CursorScope } {
  const filter = readFilter(v);
  const numbered = pageRequest(v);
  const cursorText = v.string('cursor', { max: MAX_CURSOR_LENGTH }) ?? undefined;
  const scope: CursorScope = { list, kinds, userId: filter.userId, requestId: filter.requestId, perPage: numbered.perPage };
  let page: LogPageRequest = { ...numbered, after: undefined };
  if (cursorText !== undefined && !v.failed('per_page') && !v.failed('user') && !v.failed('user_id') && !v.failed('request_id')) {
    const cursor = logCursors(services.master).decode(scope, cursorText);
    if (cursor === null) v.fail('cursor', 'The cursor is invalid for this list: it is altered, or was issued for other filters or another per_page.');
    else if (v.has('page') && !v.failed('page') && numbered.page !== cursor.page) v.fail('page', `The page field must be ${cursor.page}, the page the cursor leads to, or left out.`);
    else page = { page: cursor.page, perPage: numbered.perPage, offset: (cursor.page - 1) * numbered.perPage, after: cursor.after };
  }
  v.check();
  const query: LogQuery = { ...filter, limit: page.perPage, offset: page.offset };
  if (page.after !== undefined) query.after = page.after;
  return { query, page, scope };
}

/** `log_type` or `type` (both accepted; given together they must agree); none means every kind. */
function readKinds(v: Validator): readonly LogKind[] {
  const logType = v.oneOf('log_type', LOG_KINDS);
  const type = v.oneOf('type', LOG_KINDS);
  if (logType !== undefined && type !== undefined && logType !== type) v.fail('log_type', 'The log type field must match type.');
  const kind = logType ?? type;
  return kind === undefined ? LOG_KINDS : [kind];
}

/** `user` or `user_id` (given together they must agree), and `request_id`. */
function readFilter(v: Validator): LogFilter {
  const user = v.integer('user', { min: 1 }) ?? undefined;
  const userId = v.integer('user_id', { min: 1 }) ?? undefined;
  if (user !== undefined && userId !== undefined && user !== userId) v.fail('user_id', 'The user id field must match user.');
  const requestId = v.string('request_id', { max: REQUEST_ID_MAX }) ?? undefined;
  const filter: LogFilter = {};
  const id = userId ?? user;
  if (id !== undefined) filter.userId = id;
  if (requestId !== undefined) filter.requestId = requestId;
  return filter;
}

// ---------------------------------------------------------------------------------------
// Shapes

export interface ActivityLogView {
  id: number;
  action: string;
  description: string;
  ip: string;
  when: string;
  timestamp: string;
  user: UserView | null;
  causer_email: string | null;
  request_id: string | null;
}

export interface ApiLogView {
  id: number;
  request_id: string;
  method: string;
  path: string;
  status_code: number;
  api_key: { id: string; prefix: string } | null;
  configuration: ConfigurationView | null;
  destination: string | null;
  duration_ms: number;
  ip: string;
  timestamp: string;
  user: UserView | null;
  /** The relay's end user (the JWT's subject); only on relay rows that identified one. */
  end_user?: string;
}

export interface UsageLogView {
  id: number;
  request_id: string;
  configuration: ConfigurationView | null;
  mode: 'encrypt' | 'decrypt';
  field_count: number;
  bytes: number;
  /** A decrypt's values per reveal level (DESIGN §14); null for an encrypt, and for entries from before reveal levels. */
  reveal: RevealCounts | null;
  timestamp: string;
  user: UserView | null;
  api_key: { id: string; prefix: string } | null;
}

export interface UnifiedLogView {
  id: number;
  log_type: LogKind;
  action: string;
  description: string;
  /** The kind's own fields as JSON text. */
  details: string;
  causer_email: string | null;
  status_code: number | null;
  request_id: string | null;
  timestamp: string;
  configuration: ConfigurationView | null;
  user: UserView | null;
  full_log: { action: string; description: string; ip: string; when: string; timestamp: string; user: UserView | null };
  /** As in the api list. */
  end_user?: string;
}

interface EntryParts {
  kind: LogKind;
  action: string;
  description: string;
  details: Record<string, unknown>;
  causerEmail: string | null;
  statusCode: number | null;
  configuration: ConfigurationView | null;
  user: UserView | null;
  ip: string;
  endUser?: string | null;
}

/**
 * Made on first use: building a number format loads the locale data of ICU, about 6 MB that
 * a service whose logs nobody lists would carry for nothing.
 */
let numberFormat: Intl.NumberFormat | undefined;
function formatNumber(n: number): string {
  numberFormat ??= new Intl.NumberFormat('en-US');
  return numberFormat.format(n);
}

/**
 * Builds the views of one page. Users, configurations and keys repeat across the rows of
 * a page (one key makes most requests), so each is looked up once per page: users and
 * configurations from the state view, keys and the addresses of usage rows read from the
 * store by `load` before the rows are shown.
 */
class LogPresenter {
  private readonly store: Store;
  private readonly now: number;
  private readonly users = new Map<number, UserView | null>();
  private readonly configurations = new Map<string, ConfigurationView | null>();
  private readonly keys = new Map<string, { id: string; prefix: string } | null>();
  private readonly ips = new Map<string, string>();

  constructor(store: Store) {
    this.store = store;
    this.now = Date.now();
  }

  /** Reads the API keys `rows` name and the addresses of the requests `usageRequests`. */
  async load(rows: readonly object[], usageRequests: ReadonlyArray<string | null>): Promise<void> {
    for (const row of rows) {
      const id = 'apiKeyId' in row ? (row as { apiKeyId: string | null }).apiKeyId : null;
      if (id === null || this.keys.has(id)) continue;
      const key = await this.store.apiKeys.findById(id);
      this.keys.set(id, key === undefined ? null : { id: key.id, prefix: key.prefix });
    }
    for (const requestId of usageRequests) {
      if (requestId === null || this.ips.has(requestId)) continue;
      this.ips.set(requestId, (await this.store.logs.ipOfRequest(requestId)) ?? '');
    }
  }

  activity(row: ActivityLog): ActivityLogView {
    return {
      id: row.id,
      action: row.action,
      description: row.description,
      ip: row.ip,
      when: relativeTime(row.createdAt, this.now),
      timestamp: row.createdAt,
      user: this.user(row.userId),
      causer_email: row.causerEmail,
      request_id: row.requestId,
    };
  }

  api(row: ApiLog): ApiLogView {
    const view: ApiLogView = {
      id: row.id,
      request_id: row.requestId,
      method: row.method,
      path: row.path,
      status_code: row.statusCode,
      api_key: this.apiKey(row.apiKeyId),
      configuration: this.configuration(row.configurationId),
      destination: row.destination,
      duration_ms: row.durationMs,
      ip: row.ip,
      timestamp: row.createdAt,
      user: this.user(row.userId),
    };
    if (row.endUser !== null) view.end_user = row.endUser;
    return view;
  }

  usage(row: UsageLog): UsageLogView {
    return {
      id: row.id,
      request_id: row.requestId,
      configuration: this.configuration(row.configurationId),
      mode: row.mode,
      field_count: row.fieldCount,
      bytes: row.bytes,
      reveal: row.reveal,
      timestamp: row.createdAt,
      user: this.user(row.userId),
      api_key: this.apiKey(row.apiKeyId),
    };
  }

  unified(entry: UnifiedLog): UnifiedLogView {
    if (entry.kind === 'activity') {
      const row = entry.log;
      const user = this.user(row.userId);
      return this.entry(row, {
        kind: 'activity',
        action: row.action,
        description: row.description,
        details: { ip: row.ip },
        causerEmail: row.causerEmail ?? user?.email ?? null,
        statusCode: null,
        configuration: null,
        user,
        ip: row.ip,
      });
    }
    if (entry.kind === 'api') {
      const row = entry.log;
      const user = this.user(row.userId);
      return this.entry(row, {
        kind: 'api',
        action: 'api.request',
        description: `${row.method} ${row.path} → ${row.statusCode}`,
        details: {
          method: row.method,
          path: row.path,
          status_code: row.statusCode,
          duration_ms: row.durationMs,
          api_key: this.apiKey(row.apiKeyId)?.prefix ?? null,
          destination: row.destination,
          ...(row.endUser === null ? {} : { end_user: row.endUser }),
        },
        causerEmail: user?.email ?? null,
        statusCode: row.statusCode,
        configuration: this.configuration(row.configurationId),
        user,
        ip: row.ip,
        endUser: row.endUser,
      });
    }
    const row = entry.log;
    const user = this.user(row.userId);
    const configuration = this.configuration(row.configurationId);
    return this.entry(row, {
      kind: 'usage',
      action: `data.${row.mode}`,
      description: usageDescription(row, configuration),
      details: { mode: row.mode, field_count: row.fieldCount, bytes: row.bytes, reveal: row.reveal },
      causerEmail: user?.email ?? null,
      // Usage is recorded only once the 200 response is out.
      statusCode: 200,
      configuration,
      user,
      // Usage rows keep no address: the request's api entry has it.
      ip: row.requestId === null ? '' : (this.ips.get(row.requestId) ?? ''),
    });
  }

  private entry(row: { id: number; requestId: string | null; createdAt: string }, parts: EntryParts): UnifiedLogView {
    const when = relativeTime(row.createdAt, this.now);
    const view: UnifiedLogView = {
      id: row.id,
      log_type: parts.kind,
      action: parts.action,
      description: parts.description,
      details: JSON.stringify(parts.details),
      causer_email: parts.causerEmail,
      status_code: parts.statusCode,
      request_id: row.requestId,
      timestamp: row.createdAt,
      configuration: parts.configuration,
      user: parts.user,
      full_log: { action: parts.action, description: parts.description, ip: parts.ip, when, timestamp: row.createdAt, user: parts.user },
    };
    if (parts.endUser !== undefined && parts.endUser !== null) view.end_user = parts.endUser;
    return view;
  }

  private user(id: number | null): UserView | null {
    if (id === null) return null;
    let view = this.users.get(id);
    if (view === undefined) {
      const user = stateOf(this.store).user(id);
      view = user === undefined ? null : userView(this.store, user);
      this.users.set(id, view);
    }
    return view;
  }

  private configuration(id: string | null): ConfigurationView | null {
    if (id === null) return null;
    let view = this.configurations.get(id);
    if (view === undefined) {
      const configuration = stateOf(this.store).configuration(id);
      view = configuration === undefined ? null : configurationView(configuration);
      this.configurations.set(id, view);
    }
    return view;
  }

  private apiKey(id: string | null): { id: string; prefix: string } | null {
    return id === null ? null : (this.keys.get(id) ?? null);
  }

}

function usageDescription(row: UsageLog, configuration: ConfigurationView | null): string {
  const verb = row.mode === 'encrypt' ? 'Encrypted' : 'Decrypted';
  const fields = `${formatNumber(row.fieldCount)} ${row.fieldCount === 1 ? 'field' : 'fields'}`;
  const bytes = `${formatNumber(row.bytes)} ${row.bytes === 1 ? 'byte' : 'bytes'}`;
  const name = configuration === null ? 'a deleted configuration' : `configuration "${configuration.name}"`;
  return `${verb} ${fields} (${bytes}) with ${name}.`;
}

const UNITS: ReadonlyArray<readonly [name: string, seconds: number]> = [
  ['year', 365 * 86_400],
  ['month', 30 * 86_400],
  ['week', 7 * 86_400],
  ['day', 86_400],
  ['hour', 3_600],
  ['minute', 60],
  ['second', 1],
];

/**
 * "5 minutes ago", in the largest whole unit, as Laravel's `diffForHumans` words it.
 * A timestamp ahead of `now` (another machine's clock) reads "… from now".
 */
export function relativeTime(iso: string, now: number): string {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return '';
  const seconds = Math.floor(Math.abs(now - then) / 1000);
  if (seconds === 0) return 'just now';
  for (const [unit, size] of UNITS) {
    const n = Math.floor(seconds / size);
    if (n >= 1) return `${n} ${unit}${n === 1 ? '' : 's'} ${now >= then ? 'ago' : 'from now'}`;
  }
  return 'just now';
}
