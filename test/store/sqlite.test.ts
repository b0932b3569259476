/**
 * The store contract (test/store/contract/) against SQLite, opened both ways the program
 * opens it: a file in a temporary directory (WAL, a worker's connection beside it) and
 * `:memory:`. What is about SQLite itself is in the sqlite-*.test.ts files.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore, type Store } from '../../src/store/db.ts';
import { sqliteConnection } from '../../src/store/sqlite/connection.ts';
import { runStoreContract, type StoreTarget } from './contract/index.ts';
import type { Row } from './contract/target.ts';

const sql: StoreTarget['sql'] = {
  async all(store, text, ...params) {
    return sqliteConnection(store).prepare(text).all(...params) as Row[];
  },
  async run(store, text, ...params) {
    sqliteConnection(store).prepare(text).run(...params);
  },
  async tables(store) {
    const rows = sqliteConnection(store).prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all();
    return rows.map((row) => String(row['name']));
  },
  async inTransaction(store) {
    return sqliteConnection(store).isTransaction;
  },
};

runStoreContract({
  name: 'SQLite :memory:',
  async open(t) {
    const store = openStore(':memory:');
    t.after(() => store.close());
    return store;
  },
  sql,
});

/** Every store opened on one file, so that all are closed before the directory goes. */
const opened = new WeakMap<Store, Store[]>();

runStoreContract({
  name: 'SQLite file',
  async open(t) {
    const dir = mkdtempSync(join(tmpdir(), 'svc-contract-'));
    const store = openStore(join(dir, 'svc.db'));
    const stores = [store];
    opened.set(store, stores);
    t.after(() => {
      for (const each of stores) each.close();
      rmSync(dir, { recursive: true, force: true });
    });
    return store;
  },
  async reopen(_t, store) {
    store.close();
    const again = openStore(store.path);
    const stores = opened.get(store)!;
    stores.push(again);
    opened.set(again, stores);
    return again;
  },
  sql,
});
