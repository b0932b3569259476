import type { DatabaseSync } from 'node:sqlite';

const rollbackListeners = new WeakMap<DatabaseSync, () => void>();

/**
 * Calls `listener` whenever a transaction on `db` rolls back (a savepoint included). What
 * was read inside the transaction may have been rows that are now gone, so the change
 * stamp must move: a cache filled from them is emptied, as after any write.
 */
export function onRollback(db: DatabaseSync, listener: () => void): void {
  rollbackListeners.set(db, listener);
}

/**
 * Runs `fn` in a transaction: BEGIN IMMEDIATE at the outermost level, a SAVEPOINT when
 * already inside one, so repositories can wrap their own multi-statement writes and still
 * compose inside a caller's larger transaction (the seed runs everything in one).
 *
 * IMMEDIATE takes the write lock up front: a deferred transaction that reads and then
 * writes can fail with SQLITE_BUSY at the write without busy_timeout being honoured,
 * while an IMMEDIATE one waits at BEGIN.
 *
 * The nesting level comes from `db.isTransaction` rather than a counter, so it stays right
 * however many repositories share the connection. A fixed savepoint name is enough because
 * SQLite resolves RELEASE / ROLLBACK TO against the innermost savepoint of that name.
 */
export function runInTransaction<T>(db: DatabaseSync, fn: () => T): T {
  const nested = begin(db);
  let result: T;
  try {
    result = fn();
    // node:sqlite is synchronous: an async callback would commit before its awaits ran.
    if (result instanceof Promise) {
      result.catch(() => {});
      throw new TypeError('A store transaction callback must be synchronous.');
    }
  } catch (error) {
    rollback(db, nested);
    throw error;
  }
  commit(db, nested);
  return result;
}

/**
 * runInTransaction for a callback that answers with a promise: the same BEGIN IMMEDIATE or
 * savepoint, committed once the promise settles. The connection is shared by the whole
 * process, so the caller keeps everything but `fn`'s own statements off it meanwhile
 * (sqlite/gate.ts).
 */
export async function runInTransactionAsync<T>(db: DatabaseSync, fn: () => Promise<T>): Promise<T> {
  const nested = begin(db);
  let result: T;
  try {
    result = await fn();
  } catch (error) {
    rollback(db, nested);
    throw error;
  }
  commit(db, nested);
  return result;
}

/** Opens the transaction, or a savepoint inside one; true for a savepoint. */
export function begin(db: DatabaseSync): boolean {
  const nested = db.isTransaction;
  db.exec(nested ? 'SAVEPOINT svc_nested' : 'BEGIN IMMEDIATE');
  return nested;
}

/** Commits what begin opened (`nested` is what it answered), rolling back if the commit fails. */
export function commit(db: DatabaseSync, nested: boolean): void {
  try {
    db.exec(nested ? 'RELEASE svc_nested' : 'COMMIT');
  } catch (error) {
    rollback(db, nested);
    throw error;
  }
}

/** Rolls back what begin opened (`nested` is what it answered). */
export function rollback(db: DatabaseSync, nested: boolean): void {
  rollbackListeners.get(db)?.();
  // Some errors (SQLITE_FULL, SQLITE_IOERR, ...) make SQLite roll back the whole
  // transaction itself; issuing ROLLBACK then would throw and hide the original error.
  if (!db.isTransaction) return;
  if (nested) {
    db.exec('ROLLBACK TO svc_nested');
    db.exec('RELEASE svc_nested');
  } else {
    db.exec('ROLLBACK');
  }
}
