import pg, { type Pool, type PoolClient, type QueryResult } from 'pg';
import { driven, runAsync, textOf, type Command, type Dialect, type Sql, type Step } from '../query.ts';
import { dropLogPartitions, prepareLogPartitions } from './partitions.ts';
import { StoreUnavailableError } from '../../errors.ts';
import { STATE_TABLES } from './schema.ts';

const INT8 = 20;

/**
 * 64-bit integers (counts, log ids) as JavaScript numbers, as SQLite answers them: every
 * value the store holds is far below 2^53; one that is not is refused rather than rounded.
 */
export const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8 && format !== 'binary') {
      return (text: string): number => {
        const value = Number(text);
        if (!Number.isSafeInteger(value)) throw new RangeError(`64-bit value ${text} is beyond what the store reads exactly`);
        return value;
      };
    }
    return pg.types.getTypeParser(oid, format as 'text');
  },
} as pg.CustomTypesConfig;
const ASCII_UPPER
 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const ASCII_LOWER = 'abcdefghijklmnopqrstuvwxyz';
const fold = (expression: string): string => `translate(${expression}, '${ASCII_UPPER}', '${ASCII_LOWER}')`;

/**
 * PostgreSQL's spelling of what differs between the databases (query.ts). Timestamps are
 * ISO-8601 text in both, so comparisons and `nowIso()` values mean the same everywhere.
 */
export const POSTGRES: Dialect = {
  name: 'postgres',
  jsonIntegers: (param) => `SELECT CAST(value AS BIGINT) AS value FROM jsonb_array_elements_text(CAST(${param} AS jsonb)) AS value`,
  jsonStrings: (param) => `SELECT value FROM jsonb_array_elements_text(CAST(${param} AS jsonb)) AS value`,
  laterThan: (column, now) =>
    `greatest(CAST(${now} AS TEXT), to_char((CAST(${column} AS timestamptz) + interval '1 millisecond') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))`,
  insertionOrder: 'seq',
  controlOne: 'chr(1)',
  randomBytes32: "sha256(convert_to(CAST(gen_random_uuid() AS TEXT), 'UTF8'))",
  lockRows: (alias) => ` FOR UPDATE OF ${alias}`,
  // SQLite's NOCASE folds ASCII letters only; so does translate(), where lower() would fold more.
  nocase: (expression) => `${fold(expression)} COLLATE "C"`,
  likeNocase: (expression, pattern) => `${fold(expression)} LIKE ${fold(pattern)} ESCAPE '\\'`,
  jsonArrayOf: (expression, order) => `CAST(coalesce(json_agg(${expression} ORDER BY ${order}), CAST('[]' AS json)) AS TEXT)`,
  // A bare branch with WHERE terms over a partitioned table is appended and sorted whole;
  // ordered and limited on its own, each is a Merge Append of its partitions' index scans
  // under a Limit, and the branches are merged in turn (docs/replication.md).
  pagedBranch: (select, order, limit, alias) => `SELECT * FROM (${select} ORDER BY ${order} LIMIT ${limit}) AS ${alias}`,
};

/** A statement as PostgreSQL takes it: `$n` placeholders, and how to order the arguments. */
interface Prepared {
  readonly text: string;
  /**
   * For named parameters: the name behind each `$n`; null for positional `?`. Empty for a
   * statement without placeholders, which then takes no values whatever it is handed: a
   * repository may pass it an empty set of named parameters, as SQLite accepts (the
   * unfiltered count of a list, presentOnly in classifications.ts).
   */
  readonly names: readonly string[] | null;
  /** True for a write to a table the state version follows (STATE_TABLES). */
  readonly touchesState: boolean;
}

const WRITTEN_TABLE = /^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?([a-z_]+)/i;
const FOLLOWED: ReadonlySet<string> = new Set(STATE_TABLES);

/**
 * Rewrites `?` (positional) or `$name` (named) placeholders as `$1`, `$2`, …, leaving quoted
 * literals and identifiers alone. A statement uses one kind or the other.
 */
export function toPostgres(sql: string): Prepared {
  let out = '';
  let position = 0;
  const names: string[] = [];
  let named = false;
  for (let i = 0; i < sql.length; i++) {
    const ch = sql[i]!;
    if (ch === "'" || ch === '"') {
      const end = sql.indexOf(ch, i + 1);
      if (end === -1) throw new Error('unterminated quote in SQL');
      out += sql.slice(i, end + 1);
      i = end;
    } else if (ch === '?') {
      out += `$${++position}`;
    } else if (ch === '$' && /[a-z_]/i.test(sql[i + 1] ?? '')) {
      const name = /^[a-z_][a-z0-9_]*/i.exec(sql.slice(i + 1))![0];
      named = true;
      let index = names.indexOf(name);
      if (index === -1) index = names.push(name) - 1;
      out += `$${index + 1}`;
      i += name.length;
    } else {
      out += ch;
    }
  }
  if (named && position > 0) throw new Error('a statement takes either ? or $name placeholders, not both');
  const table = WRITTEN_TABLE.exec(sql)?.[1]?.toLowerCase();
  return { text: out, names: named || position === 0 ? names : null, touchesState: table !== undefined && FOLLOWED.has(table) };
}

interface PreparedCache {
  readonly byText: Map<string, Prepared>;
  readonly byFunction: WeakMap<(dialect: Dialect) => string, Prepared>;
}

/** Whatever runs queries: the pool, or one client of it (inside a transaction). */
type Queryable = Pick<Pool, 'query'> | PoolClient;

/**
 * Answers a repository's commands on PostgreSQL. A store-level call runs its statements on
 * the pool; when it opens a transaction, it takes one client for it until it ends. A
 * transaction handle's calls run on that transaction's client, nested ones as savepoints.
 */
export class PostgresExecutor {
  readonly #pool: Pool;
  /** Set for a transaction handle: its client, held by `store.transaction`. */
  readonly #client: PoolClient | null;
  /** Shared by every executor of one store; a closure's entry goes with it, as on SQLite. */
  readonly #prepared: PreparedCache;
  readonly #stateWritten: () => void;

  /**
   * `stateWritten` is called once a write to the state tables is done: on the pool, when it
   * has committed; bound to a transaction's client, at once (the transaction's owner then
   * knows to announce it when it commits).
   */
  constructor(pool: Pool, client: PoolClient | null, stateWritten: () => void, prepared: PreparedCache = { byText: new Map(), byFunction: new WeakMap() }) {
    this.#pool = pool;
    this.#client = client;
    this.#stateWritten = stateWritten;
    this.#prepared = prepared;
  }

  /** This executor bound to `client`, a transaction's, telling `stateWritten` of its state writes. */
  within(client: PoolClient, stateWritten: () => void): PostgresExecutor {
    return new PostgresExecutor(this.#pool, client, stateWritten, this.#prepared);
  }

  /** `repository` with every method answering with a promise. */
  drive<R extends object>(repository: R): unknown {
    return driven<R, unknown>(
      repository,
      (step) => this.run(step),
      (value) => Promise.resolve(value),
    );
  }

  /**
   * Called after a step (on the pool) that wrote to the state tables has committed, and
   * awaited before the step's caller goes on: the store rebuilds its state view there.
   */
  afterStateWrite: (() => Promise<void> | undefined) | null = null;

  /** Runs `step`; a transaction it opens holds one client of the pool until it ends. */
  async run<T>(step: Step<T>): Promise<T> {
    let wroteAny = false;
    const value = await this.#run(step, () => {
      wroteAny = true;
    }).catch((error: unknown) => {
      throw storeError(error);
    });
    if (wroteAny && this.#client === null) await this.afterStateWrite?.();
    return value;
  }

  async #run<T>(step: Step<T>, noteStateWrite: () => void): Promise<T> {
    let client = this.#client;
    let owned: PoolClient | null = null;
    let depth = this.#client === null ? 0 : 1;
    // A write inside a transaction this step opened is announced once that commits.
    let wroteState = false;
    /** One statement, on the transaction's client if one is open; a state write is noted. */
    const query = async (sql: Sql, params: readonly unknown[]): Promise<QueryResult> => {
      const { result, touchesState } = await this.#query(client ?? this.#pool, sql, params);
      if (touchesState) {
        noteStateWrite();
        if (owned !== null) wroteState = true;
        else this.#stateWritten();
      }
      return result;
    };
    try {
      return await runAsync(step, async (command) => {
        switch (command.op) {
          case 'all':
          case 'get':
          case 'run': {
            const result = await query(command.sql, command.params);
            if (command.op === 'all') return result.rows;
            if (command.op === 'get') return result.rows[0];
            return { changes: result.rowCount ?? 0 };
          }
          case 'run-each': {
            let changes = 0;
            for (const params of command.rows) changes += (await query(command.sql, params)).rowCount ?? 0;
            return { changes };
          }
          case 'begin':
            if (client === null) {
              owned = await this.#pool.connect();
              client = owned;
            }
            depth++;
            // A snapshot read sees one state of the database for all its statements: the
            // lists of a state snapshot agree with each other on every instance.
            await client.query(depth > 1 ? `SAVEPOINT svc_nested_${depth}` : command.read === true ? 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' : 'BEGIN');
            return depth;
          case 'commit': {
            const level = command.nested as number;
            await client!.query(level === 1 ? 'COMMIT' : `RELEASE SAVEPOINT svc_nested_${level}`);
            depth--;
            this.#release(level, owned);
            if (level === 1) {
              owned = null;
              client = this.#client;
              if (wroteState) this.#stateWritten();
              wroteState = false;
            }
            return undefined;
          }
          case 'rollback': {
            const level = command.nested as number;
            await client!.query(level === 1 ? 'ROLLBACK' : `ROLLBACK TO SAVEPOINT svc_nested_${level}`);
            if (level > 1) await client!.query(`RELEASE SAVEPOINT svc_nested_${level}`);
            depth--;
            this.#release(level, owned);
            if (level === 1) {
              owned = null;
              client = this.#client;
              wroteState = false;
            }
            return undefined;
          }
          case 'lock':
            await (client ?? this.#pool).query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [command.key]);
            return undefined;
          case 'state-version': {
            const { rows } = await (client ?? this.#pool).query<{ version: number }>('SELECT version FROM svc_state WHERE id = 1');
            return rows[0]?.version ?? null;
          }
          case 'defer-foreign-keys':
            // The schema's foreign keys are not deferrable: the statements come in an order
            // that keeps them (children removed first, parents upserted first).
            return undefined;
          case 'no-wait-start':
          case 'no-wait-end':
            // A wait for a lock here is awaited, not a blocked thread: nothing to avoid.
            return undefined;
          case 'shred-start':
          case 'shred-end':
            // Old row versions stay in the table's pages until VACUUM reclaims them; nothing
            // a statement can do here changes that (docs/operations.md).
            return undefined;
          case 'prepare-log-partitions':
            await this.#transacted(client, (on) => prepareLogPartitions(on, command.at));
            return undefined;
          case 'drop-log-partitions':
            return this.#transacted(client, (on) => dropLogPartitions(on, command.table, command.before));
        }
      });
    } finally {
      // A step that ended (or failed) inside its own transaction leaves nothing open.
      const left = owned as PoolClient | null;
      if (left !== null) {
        // A connection that cannot even roll back is closed rather than handed out again.
        const rolledBack = await left.query('ROLLBACK').then(
          () => true,
          () => false,
        );
        left.release(!rolledBack);
      }
    }
  }

  /**
   * Runs `work` inside the transaction open on `client`, or else in one of its own: the
   * partition steps take a transaction-scoped lock and must go or stay whole.
   */
  #transacted<T>(client: PoolClient | null, work: (on: PoolClient) => Promise<T>): Promise<T> {
    return client !== null ? work(client) : inTransaction(this.#pool, work);
  }

  #release(level: number, owned: PoolClient | null): void {
    if (level === 1 && owned !== null) owned.release();
  }

  /** `sql` as PostgreSQL takes it, made once per statement: by its text, or by the function that writes it. */
  #prepare(sql: string | ((dialect: Dialect) => string)): Prepared {
    const cache = typeof sql === 'string' ? this.#prepared.byText : this.#prepared.byFunction;
    let prepared = cache.get(sql as never);
    if (prepared === undefined) {
      prepared = toPostgres(textOf(sql, POSTGRES));
      cache.set(sql as never, prepared);
    }
    return prepared;
  }

  async #query(on: Queryable, sql: string | ((dialect: Dialect) => string), params: readonly unknown[]): Promise<{ result: QueryResult; touchesState: boolean }> {
    const prepared = this.#prepare(sql);
    const values = prepared.names !== null ? namedValues(prepared.names, params[0]) : params;
    const result = await on.query({ text: prepared.text, values: values.map(toParameter) });
    return { result, touchesState: prepared.touchesState };
  }
}

function namedValues(names: readonly string[], values: unknown): unknown[] {
  const record = (values ?? {}) as Record<string, unknown>;
  return names.map((name) => record[name] ?? null);
}

/**
 * Uint8Arrays go as bytea (pg sends Buffers so). A NUL in text, which PostgreSQL cannot
 * store, is written as U+FFFD: the fields that may hold one are those a request sets (a
 * path, an end user's name in a log row), and a log batch refused for it would be retried
 * forever. Everything else goes as it is.
 */
export function toParameter(value: unknown): unknown {
  if (typeof value === 'string') return value.includes('\0') ? value.replaceAll('\0', '\uFFFD') : value;
  if (value instanceof Uint8Array && !Buffer.isBuffer(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  return value;
}

/** Node's socket errors that mean the server is not there (or went away). */
const SOCKET_ERRORS: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
/** SQLSTATEs of a server that is going away or cannot take the connection, beside class 08. */
const SERVER_GONE: ReadonlySet<string> = new Set(['57P01', '57P02', '57P03', '53300']);

/**
 * Whether `error` says the database cannot be reached, rather than that a statement
 * failed: a socket error, a connection exception (SQLSTATE class 08), the server shutting
 * down or full, or the driver's own word that the connection ended.
 */
export function unreachable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') return SOCKET_ERRORS.has(code) || SERVER_GONE.has(code) || /^08[0-9A-Z]{3}$/.test(code);
  return /^Connection terminated|not queryable|timeout exceeded when trying to connect/i.test(error.message);
}

/**
 * Runs `work` in a transaction on a client of its own, committed when it resolves and
 * rolled back when it throws. A client whose BEGIN, COMMIT or ROLLBACK failed (a lost
 * connection) is closed, never handed to the next caller; a database that cannot be
 * reached is a StoreUnavailableError; `work`'s own error is what the caller gets, whether
 * or not the rollback worked.
 */
export async function inTransaction<T>(pool: Pool, work: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect().catch((error: unknown) => {
    throw storeError(error);
  });
  let healthy = false;
  try {
    await client.query('BEGIN');
    let value: T;
    try {
      value = await work(client);
    } catch (error) {
      healthy = await client.query('ROLLBACK').then(
        () => true,
        () => false,
      );
      throw error;
    }
    await client.query('COMMIT');
    healthy = true;
    return value;
  } catch (error) {
    throw storeError(error);
  } finally {
    client.release(!healthy);
  }
}

/** `error` as the store reports it: StoreUnavailableError when the database cannot be reached. */
export function storeError(error: unknown): unknown {
  return unreachable(error) && !(error instanceof StoreUnavailableError) ? new StoreUnavailableError(error) : error;
}
