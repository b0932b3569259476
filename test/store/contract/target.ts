/**
 * What the store contract is run against: a way to open a new, empty store of one backend,
 * and plain SQL for the few assertions no repository method can make (a row left behind, a
 * row written as no repository would). Every store call in the contract is awaited, so the
 * same tests hold for a store whose methods return promises.
 */
import type { TestContext } from 'node:test';
import type { Store } from '../../../src/store/db.ts';

export type Row = Record<string, unknown>;

export interface StoreTarget {
  /** Names the suite: the backend and how it is opened. */
  readonly name: string;
  /** Why the backend cannot run here (its server is not installed); absent when it can. */
  readonly skip?: string;
  /** A new, migrated, empty store, closed (and its files removed) when `t` ends. */
  open(t: TestContext): Promise<Store>;
  /**
   * Closes `store` and opens the same store again, as a restart would; absent where a store
   * does not outlive its connection (`:memory:`), and the tests that need it are left out.
   */
  readonly reopen?: (t: TestContext, store: Store) => Promise<Store>;
  /** Statements in the SQL both dialects share, with `?` placeholders. */
  readonly sql: {
    all(store: Store, sql: string, ...params: Array<string | number | null>): Promise<Row[]>;
    run(store: Store, sql: string, ...params: Array<string | number | null>): Promise<void>;
    /** Every table of the schema, by name (not the engine's own). */
    tables(store: Store): Promise<string[]>;
    /** True while the store's connection is inside a transaction (none may be left open). */
    inTransaction(store: Store): Promise<boolean>;
  };
}
