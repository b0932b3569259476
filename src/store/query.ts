/**
 * The one query layer of the store: repositories are written once, as generator methods
 * that yield the statements they need and receive the rows, and a driver runs them on a
 * database. The SQLite driver answers each statement at once, so a SQLite store's
 * repositories stay synchronous where the request path needs them to be (the state view,
 * KeyInUse); the PostgreSQL driver awaits each one. The logic between the statements, the
 * mapping of rows and the transactions are the same code for both.
 *
 * SQL is written with `?` placeholders in the subset both databases read alike (`INSERT …
 * ON CONFLICT … DO UPDATE`, `RETURNING`, `count(*)`, `EXISTS`); where they differ, a
 * statement is a function of the `Dialect` and the difference is named there once.
 */

/** SQL text with `?` placeholders, or a function giving it for a dialect. */
export type Sql = string | ((dialect: Dialect) => string);

/** What differs between the databases, spelled once for each. */
export interface Dialect {
  readonly name: 'sqlite' | 'postgres';
  /** A subquery of one column `value`: the integers of the JSON array text in the placeholder `param`. */
  jsonIntegers(param: string): string;
  /** A subquery of one column `value`: the strings of the JSON array text in the placeholder `param`. */
  jsonStrings(param: string): string;
  /**
   * An ISO-8601 timestamp expression: `now` (a placeholder holding `nowIso()`), or 1 ms
   * past `column` when that is not earlier, so a row's stamp always moves forward.
   */
  laterThan(column: string, now: string): string;
  /** The column that orders a table's rows as they were inserted (ties of `created_at`). */
  readonly insertionOrder: string;
  /** Appended to a SELECT: lock the rows of `alias` it reads until the transaction ends (nothing where writers are serialised). */
  lockRows(alias: string): string;
  /** `expression` for ordering and comparing with ASCII letters folded (SQLite's NOCASE). */
  nocase(expression: string): string;
  /** `expression LIKE pattern` with ASCII letters folded and `\\` as the escape character. */
  likeNocase(expression: string, pattern: string): string;
  /** A text expression of the character U+0001: no API accepts it, so no real value holds it. */
  readonly controlOne: string;
  /** An expression of 32 random bytes. */
  readonly randomBytes32: string;
  /** A JSON array (as text) of `expression` over the group's rows in `order`; `[]` for none. */
  jsonArrayOf(expression: string, order: string): string;
  /**
   * `select`, as a branch of a UNION ALL whose rows the statement orders by `order` (which
   * an index of the branch's table gives) and of which it keeps at most `limit`: written
   * so that the database merges the branches' index orders, reading about `limit` rows
   * of each, instead of sorting all their rows. `alias` names it where a name is needed.
   */
  pagedBranch(select: string, order: string, limit: string, alias: string): string;
}

/** A statement and its parameters, or a transaction boundary. */
export type Command =
  | { readonly op: 'all' | 'get' | 'run'; readonly sql: Sql; readonly params: readonly unknown[] }
  | { readonly op: 'run-each'; readonly sql: Sql; readonly rows: readonly (readonly unknown[])[] }
  | { readonly op: 'begin'; readonly read?: true }
  | { readonly op: 'defer-foreign-keys' }
  | { readonly op: 'state-version' }
  | { readonly op: 'lock'; readonly key: string }
  | { readonly op: 'shred-start' }
  | { readonly op: 'shred-end'; readonly previous: unknown; readonly flush: boolean }
  | { readonly op: 'no-wait-start' }
  | { readonly op: 'no-wait-end'; readonly previous: unknown }
  | { readonly op: 'prepare-log-partitions'; readonly at: string }
  | { readonly op: 'drop-log-partitions'; readonly table: string; readonly before: string }
  | { readonly op: 'commit' | 'rollback'; readonly nested: unknown };

/** What a repository method is: it yields commands and receives their answers. */
export type Step<T> = Generator<Command, T, unknown>;

/** What a write reports. */
export interface RunResult {
  readonly changes: number;
}

/** Every row the statement answers. */
export function* all<T>(sql: Sql, ...params: unknown[]): Step<T[]> {
  return (yield { op: 'all', sql, params }) as T[];
}

/** The first row the statement answers, or undefined. */
export function* get<T>(sql: Sql, ...params: unknown[]): Step<T | undefined> {
  return (yield { op: 'get', sql, params }) as T | undefined;
}

/** Runs a statement that answers no rows. */
export function* run(sql: Sql, ...params: unknown[]): Step<RunResult> {
  return (yield { op: 'run', sql, params }) as RunResult;
}

/**
 * Runs a statement once for each row of parameters, in order, and answers what they
 * changed together: a batch of inserts as one command rather than one per row.
 */
export function* runEach(sql: Sql, rows: readonly (readonly unknown[])[]): Step<RunResult> {
  return (yield { op: 'run-each', sql, rows }) as RunResult;
}

/**
 * Inside a transaction, waits until no other transaction holds `key`, and holds it until
 * this one ends: for a read-then-write that must not interleave with another instance's
 * (SQLite's writers are serialised already, so there it costs nothing).
 */
export function* lock(key: string): Step<void> {
  yield { op: 'lock', key };
}

/**
 * Runs `body`, which overwrites secrets (a destroyed key), so that the database keeps no
 * readable copy of what it overwrote as far as it can: SQLite zeroes freed bytes while
 * `body` runs and, when `flushed(value)` says something was overwritten, moves the pages
 * out of its write-ahead log. PostgreSQL keeps old row versions until VACUUM, whatever
 * is done here (docs/operations.md).
 */
export function* shredding<T>(body: () => Step<T>, flushed: (value: T) => boolean): Step<T> {
  const previous: unknown = yield { op: 'shred-start' };
  let flush = false;
  try {
    const value = yield* body();
    flush = flushed(value);
    return value;
  } finally {
    yield { op: 'shred-end', previous, flush };
  }
}

/**
 * Runs `body` so that a lock another connection holds fails it at once instead of being
 * waited for: for a write that may be retried later and must not hold up the caller. On
 * SQLite, whose waits block the thread, the busy timeout is 0 while `body` runs (unless a
 * transaction is already open: it holds the write lock, so there is nothing left to wait
 * for). A driver whose waits do not block the thread may leave this out.
 */
export function* withoutWaiting<T>(body: () => Step<T>): Step<T> {
  const previous: unknown = yield { op: 'no-wait-start' };
  try {
    return yield* body();
  } finally {
    yield { op: 'no-wait-end', previous };
  }
}

/**
 * Where the log tables are partitioned by day (PostgreSQL), makes sure the partitions of
 * the day of `at` (an ISO timestamp) and of the next few days exist, once however many
 * instances do it together. Nothing where they are not (SQLite). A schema step rather
 * than a statement: it is DDL whose names and bounds depend on the day, and only the
 * driver of a partitioned schema knows its partitions.
 */
export function* prepareLogPartitions(at: string): Step<void> {
  yield { op: 'prepare-log-partitions', at };
}

/**
 * Where `table` is partitioned by day, removes its partitions whose every row was created
 * before `before` (an ISO timestamp) at once, rather than row by row, and answers how many
 * rows they held; 0 where it is not. Rows of the day that holds `before`, and those of
 * the default partition, are left for a row-by-row delete.
 */
export function* dropLogPartitions(table: string, before: string): Step<number> {
  return (yield { op: 'drop-log-partitions', table, before }) as number;
}

/**
 * Runs `body` atomically: a transaction at the outermost level, a savepoint inside one, so a
 * repository's multi-statement write also composes into a caller's larger transaction.
 */
export function* atomically<T>(body: () => Step<T>): Step<T> {
  return yield* enclosed({ op: 'begin' }, body);
}

/** `body` between `begin` and its commit, or its rollback when it throws. */
function* enclosed<T>(begin: Command & { op: 'begin' }, body: () => Step<T>): Step<T> {
  const nested: unknown = yield begin;
  let value: T;
  try {
    value = yield* body();
  } catch (error) {
    yield { op: 'rollback', nested };
    throw error;
  }
  yield { op: 'commit', nested };
  return value;
}

/**
 * Runs `body`, which only reads, on one consistent state of the database: what another
 * connection commits meanwhile is not seen, and no write lock is taken. Inside a
 * transaction it simply runs there.
 */
export function* snapshot<T>(body: () => Step<T>): Step<T> {
  return yield* enclosed({ op: 'begin', read: true }, body);
}

/** Inside a transaction: foreign keys are checked at its commit, not per statement, where the database allows. */
export function* deferForeignKeys(): Step<void> {
  yield { op: 'defer-foreign-keys' };
}

/**
 * The state version, where the database keeps one (PostgreSQL: moved by every write to the
 * state tables, in the same transaction); null where it does not (SQLite, whose one writer
 * process knows its own changes).
 */
export function* stateVersion(): Step<number | null> {
  return (yield { op: 'state-version' }) as number | null;
}

/** A repository as its callers see it on a driver that answers at once. */
export type Sync<R> = {
  readonly [K in keyof R]: R[K] extends (...args: infer A) => Step<infer T> ? (...args: A) => T : R[K];
};

/** Runs `step` to its end, each command answered at once by `execute`. */
export function runSync<T>(step: Step<T>, execute: (command: Command) => unknown): T {
  let next = step.next();
  while (next.done !== true) {
    let answer: unknown;
    try {
      answer = execute(next.value);
    } catch (error) {
      next = step.throw(error);
      continue;
    }
    next = step.next(answer);
  }
  return next.value;
}

/** Runs `step` to its end, each command answered by the promise `execute` gives. */
export async function runAsync<T>(step: Step<T>, execute: (command: Command) => Promise<unknown>): Promise<T> {
  let next = step.next();
  while (next.done !== true) {
    let answer: unknown;
    try {
      answer = await execute(next.value);
    } catch (error) {
      next = step.throw(error);
      continue;
    }
    next = step.next(answer);
  }
  return next.value;
}

/**
 * An object with `repository`'s methods, each running its steps through `drive`. Methods
 * that are not generators (pure helpers) are called as they are, through `plain`.
 */
export function driven<R extends object, Out>(
  repository: R,
  drive: (step: Step<unknown>) => unknown,
  plain: (value: unknown) => unknown = (value) => value,
): Out {
  const out: Record<string, (...args: unknown[]) => unknown> = {};
  for (const key of methodNames(repository)) {
    const method = (repository as Record<string, (...args: unknown[]) => unknown>)[key]!;
    // Decided once per method, not per call: a generator method's calls are steps to drive.
    out[key] =
      method instanceof GeneratorFunction
        ? (...args) => drive(method.apply(repository, args) as Step<unknown>)
        : (...args) => plain(method.apply(repository, args));
  }
  return Object.freeze(out) as Out;
}

/** The names of `object`'s methods: its own function properties and its classes' methods. */
export function methodNames(object: object): string[] {
  const names: string[] = [];
  for (let at: object | null = object; at !== null && at !== Object.prototype; at = Object.getPrototypeOf(at) as object | null) {
    for (const key of Object.getOwnPropertyNames(at)) {
      if (key !== 'constructor' && typeof (object as Record<string, unknown>)[key] === 'function' && !names.includes(key)) names.push(key);
    }
  }
  return names;
}

/** The constructor of every `function*`, generator methods included. */
const GeneratorFunction = Object.getPrototypeOf(function* () {}).constructor as new (...args: never[]) => unknown;

/** The text of `sql` for `dialect`. */
export function textOf(sql: Sql, dialect: Dialect): string {
  return typeof sql === 'string' ? sql : sql(dialect);
}
