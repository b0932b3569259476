import { AsyncLocalStorage } from 'node:async_hooks';
import { ConcurrentSavepointError, TransactionEndedError } from '../db.ts';

/**
 * Who may use a SQLite store's one connection while a transaction holds it. The statements
 * of the transaction go through its handle and run at once; everything else waits until it
 * commits or rolls back, so nothing reads rows the transaction may still roll back, and
 * nothing writes into it. A use of the store itself (not the handle) from inside the
 * transaction could only wait for itself: that is refused at once instead.
 */
export class ConnectionGate {
  readonly #inside = new AsyncLocalStorage<symbol>();
  /** The savepoints open inside the transaction, innermost last, each run in its own context. */
  readonly #savepoint = new AsyncLocalStorage<symbol>();
  readonly #savepoints: symbol[] = [];
  #holder: symbol | null = null;
  #released: Promise<void> = Promise.resolve();
  #release: () => void = () => {};

  /** True while a transaction holds the connection. */
  get held(): boolean {
    return this.#holder !== null;
  }

  /**
   * Undefined when the connection is free (the caller goes ahead at once), else what to
   * wait for before asking again. Throws StoreBusyError when asked from inside the
   * transaction that holds it.
   */
  wait(): Promise<void> | undefined {
    if (this.#holder === null) return undefined;
    if (this.#inside.getStore() === this.#holder) throw new StoreBusyError();
    return this.#released;
  }

  /**
   * `run()` at once for the transaction that holds the connection; refused for a handle
   * used after its transaction ended (kept past its callback, or from a timer it set), whose
   * statements would otherwise run outside any transaction.
   */
  within<T>(run: () => T): Promise<Awaited<T>> {
    if (this.#holder === null || this.#inside.getStore() !== this.#holder) return Promise.reject(new TransactionEndedError());
    return settle(run);
  }

  /**
   * Runs `fn` as a savepoint of the transaction. Savepoints are a stack: one opened beside
   * another that is still open (two nested transactions awaited together) would be rolled
   * back with it, or roll it back, so it is refused; one opened inside it is a level deeper.
   */
  async savepoint<T>(fn: () => Promise<T>): Promise<T> {
    const innermost = this.#savepoints.at(-1);
    if (innermost !== undefined && this.#savepoint.getStore() !== innermost) throw new ConcurrentSavepointError();
    const mine = Symbol('savepoint');
    this.#savepoints.push(mine);
    try {
      return await this.#savepoint.run(mine, fn);
    } finally {
      this.#savepoints.splice(this.#savepoints.indexOf(mine), 1);
    }
  }

  /** Runs `fn` holding the connection, once every transaction before it has ended. */
  async hold<T>(fn: () => Promise<T>): Promise<T> {
    for (let waiting = this.wait(); waiting !== undefined; waiting = this.wait()) await waiting;
    const holder = Symbol('transaction');
    this.#holder = holder;
    this.#released = new Promise((resolve) => {
      this.#release = resolve;
    });
    try {
      return await this.#inside.run(holder, fn);
    } finally {
      this.#holder = null;
      this.#release();
    }
  }

  /** `run()` at once when the connection is free, else after the transaction holding it. */
  through<T>(run: () => T): Promise<Awaited<T>> {
    let waiting: Promise<void> | undefined;
    try {
      waiting = this.wait();
    } catch (error) {
      return Promise.reject(error);
    }
    // Free: the statement runs now, so a call not awaited has done its work when it returns.
    if (waiting === undefined) return settle(run);
    return (async (): Promise<Awaited<T>> => {
      for (; waiting !== undefined; waiting = this.wait()) await waiting;
      return await run();
    })();
  }
}

/** `run()` now, its result or its throw as a promise. */
function settle<T>(run: () => T): Promise<Awaited<T>> {
  try {
    return Promise.resolve(run());
  } catch (error) {
    return Promise.reject(error);
  }
}

/** The store itself used from inside one of its transactions, which must use its handle. */
export class StoreBusyError extends Error {
  constructor() {
    super('The store was used directly inside one of its transactions: use the transaction handle (tx) there.');
    this.name = 'StoreBusyError';
  }
}
