import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { driven, runSync, textOf, type Command, type Dialect, type Step, type Sync } from '../query.ts';
import { begin, commit, rollback } from './transaction.ts';

/** SQLite's spelling of what differs between the databases (query.ts). */
export const SQLITE: Dialect = {
  name: 'sqlite',
  jsonIntegers: (param) => `SELECT value FROM json_each(${param})`,
  jsonStrings: (param) => `SELECT value FROM json_each(${param})`,
  laterThan: (column, now) => `max(${now}, strftime('%Y-%m-%dT%H:%M:%fZ', ${column}, '+0.001 seconds'))`,
  insertionOrder: 'rowid',
  controlOne: 'char(1)',
  randomBytes32: 'randomblob(32)',
  lockRows: () => '',
  nocase: (expression) => `${expression} COLLATE NOCASE`,
  // SQLite's LIKE folds ASCII letters already.
  likeNocase: (expression, pattern) => `${expression} LIKE ${pattern} ESCAPE '\\'`,
  jsonArrayOf: (expression, order) => `json_group_array(${expression} ORDER BY ${order})`,
  // SQLite merges bare branches by their indexes (MERGE (UNION ALL)); a branch ordered and
  // limited on its own would be sorted in a temporary B-tree, an order of magnitude slower
  // for a deep page (offset 20,000 to 100,000).
  pagedBranch: (select) => select,
};

/** What `begin` answers for a snapshot read: one of its own, or inside a transaction already open. */
const READ = Symbol('read');
const INSIDE = Symbol('inside');

/**
 * Answers a repository's commands on one SQLite connection, at once. Each statement is
 * prepared on first use and kept: the statements are the repositories' constants (and a
 * bounded number of shapes built from them), so the cache is as small as the program.
 */
export class SqliteExecutor {
  readonly #db: DatabaseSync;
  readonly #byText = new Map<string, StatementSync>();
  /** Keyed weakly: a statement written as a closure inside a method is dropped with it. */
  readonly #byFunction = new WeakMap<(dialect: Dialect) => string, StatementSync>();

  readonly #inMemory: boolean;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#inMemory = (db.prepare('PRAGMA database_list').get() as { file: string }).file === '';
  }

  /** `repository` with every method answering at once on this connection. */
  drive<R extends object>(repository: R): Sync<R> {
    return driven<R, Sync<R>>(repository, (step) => this.run(step));
  }

  run<T>(step: Step<T>): T {
    return runSync(step, (command) => this.execute(command));
  }

  execute(command: Command): unknown {
    switch (command.op) {
      case 'all':
        return this.#statement(command.sql).all(...(command.params as never[]));
      case 'get':
        return this.#statement(command.sql).get(...(command.params as never[]));
      case 'run':
        return { changes: Number(this.#statement(command.sql).run(...(command.params as never[])).changes) };
      case 'run-each': {
        const statement = this.#statement(command.sql);
        let changes = 0;
        for (const params of command.rows) changes += Number(statement.run(...(params as never[])).changes);
        return { changes };
      }
      case 'lock':
        // BEGIN IMMEDIATE already holds the one write lock.
        return undefined;
      case 'shred-start': {
        // secure_delete makes SQLite zero the freed bytes of an overwritten row instead of
        // leaving them in the page.
        const previous = (this.#statement('PRAGMA secure_delete').get() as { secure_delete: number }).secure_delete;
        this.#db.exec('PRAGMA secure_delete = ON');
        return previous;
      }
      case 'shred-end':
        this.#db.exec(`PRAGMA secure_delete = ${Number(command.previous)}`);
        // The TRUNCATE checkpoint moves the pages into the database file and empties the
        // WAL, where older images of them may still sit. Best effort: a reader holding an
        // old snapshot defers it to a later checkpoint.
        if (command.flush && !this.#inMemory && !this.#db.isTransaction) this.#statement('PRAGMA wal_checkpoint(TRUNCATE)').get();
        return undefined;
      case 'no-wait-start': {
        // Inside a transaction BEGIN IMMEDIATE already holds the write lock, and the
        // timeout is left as it is; null says so to no-wait-end.
        if (this.#db.isTransaction) return null;
        const { timeout } = this.#statement('PRAGMA busy_timeout').get() as { timeout: number };
        this.#db.exec('PRAGMA busy_timeout = 0');
        return timeout;
      }
      case 'no-wait-end':
        if (command.previous !== null) this.#db.exec(`PRAGMA busy_timeout = ${Math.trunc(Number(command.previous))}`);
        return undefined;
      case 'begin':
        if (command.read === true) {
          // A deferred transaction: in WAL mode it reads one snapshot of the file without
          // taking the write lock the log writer needs.
          if (this.#db.isTransaction) return INSIDE;
          this.#db.exec('BEGIN DEFERRED');
          return READ;
        }
        return begin(this.#db);
      case 'commit':
        if (command.nested === INSIDE) return undefined;
        if (command.nested === READ) this.#db.exec('COMMIT');
        else commit(this.#db, command.nested as boolean);
        return undefined;
      case 'rollback':
        if (command.nested === INSIDE) return undefined;
        if (command.nested === READ) {
          if (this.#db.isTransaction) this.#db.exec('ROLLBACK');
        } else rollback(this.#db, command.nested as boolean);
        return undefined;
      case 'state-version':
        return null;
      case 'defer-foreign-keys':
        this.#db.exec('PRAGMA defer_foreign_keys = ON');
        return undefined;
      case 'prepare-log-partitions':
        // The log tables are plain tables here: retention deletes row by row.
        return undefined;
      case 'drop-log-partitions':
        return 0;
    }
  }

  #statement(sql: string | ((dialect: Dialect) => string)): StatementSync {
    if (typeof sql === 'string') {
      let statement = this.#byText.get(sql);
      if (statement === undefined) {
        statement = this.#db.prepare(sql);
        this.#byText.set(sql, statement);
      }
      return statement;
    }
    let statement = this.#byFunction.get(sql);
    if (statement === undefined) {
      statement = this.#db.prepare(textOf(sql, SQLITE));
      this.#byFunction.set(sql, statement);
    }
    return statement;
  }
}
