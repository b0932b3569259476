/**
 * The store contract (test/store/contract/) against a real PostgreSQL server: one
 * throwaway cluster for this file (test/support/postgres.ts), a new database per test.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import { UnawaitedCallError, type Store } from '../../src/store/db.ts';
import { types } from '../../src/store/postgres/executor.ts';
import { openPostgresStore } from '../../src/store/postgres/open.ts';
import { prepareState, stateOf } from '../../src/store/state-view.ts';
import { postgresPerFile } from '../support/postgres.ts';
import { runStoreContract, type StoreTarget } from './contract/index.ts';
import type { Row } from './contract/target.ts';

const postgres = postgresPerFile();
const skip = postgres.skip;
const urls = new WeakMap<Store, string>();


/** Runs `fn` on a connection of its own to the store's database. */
async function connected<T>(store: Store, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: urls.get(store)!, types });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** `?` placeholders as PostgreSQL numbers them. */
const numbered = (text: string): string => {
  let n = 0;
  return text.replace(/\?/g, () => `$${++n}`);
};

const sql: StoreTarget['sql'] = {
  all: (store, text, ...params) => connected(store, async (client) => (await client.query(numbered(text), params)).rows as Row[]),
  run: (store, text, ...params) =>
    connected(store, async (client) => {
      await client.query(numbered(text), params);
    }),
  // Not the migrations' bookkeeping (svc_schema) nor the state version (svc_state): like
  // SQLite's own tables and its data_version, they describe the store, not what it holds.
  // A partitioned log table is one table; its day partitions are where its rows are kept.
  tables: (store) =>
    connected(store, async (client) => {
      const { rows } = await client.query(
        `SELECT c.relname AS tablename FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname NOT IN ('svc_schema', 'svc_state')
          ORDER BY c.relname`,
      );
      return rows.map((row: { tablename: string }) => row.tablename);
    }),
  // A transaction left open holds a connection "idle in transaction".
  inTransaction: (store) =>
    connected(store, async (client) => {
      const { rows } = await client.query(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
      );
      return Number((rows[0] as { n: string }).n) > 0;
    }),
};

runStoreContract({
  name: 'PostgreSQL',
  skip: skip === false ? undefined : skip,
  async open(t) {
    const { url } = await postgres.database('svc_contract');
    const store = await openPostgresStore(url, { max: 4 });
    urls.set(store, url);
    t.after(() => store.close());
    return store;
  },
  async reopen(t, store) {
    const url = urls.get(store)!;
    await store.close();
    const again = await openPostgresStore(url, { max: 4 });
    urls.set(again, url);
    t.after(() => again.close());
    return again;
  },
  sql,
});

/** PostgreSQL's own: what the contract cannot say for both databases. */
test('a NUL in text a request set (a log row) is stored as U+FFFD, not a batch refused forever', { skip }, async (t) => {
  const { url } = await postgres.database('svc_nul');
  const store = await openPostgresStore(url, { max: 2 });
  urls.set(store, url);
  t.after(() => store.close());
  const createdAt = new Date().toISOString();
  await store.logs.insertBatch(
    { activity: [], api: [{ requestId: 'nul-1', method: 'GET', path: '/a\u0000b', statusCode: 200, endUser: 'eve\u0000', durationMs: 1, ip: '127.0.0.1', createdAt }], usage: [] },
    { wait: true },
  );
  const rows = await sql.all(store, 'SELECT path, end_user FROM api_logs');
  assert.deepEqual(rows, [{ path: '/a\uFFFDb', end_user: 'eve\uFFFD' }]);
});

for (const notifications of [true, false]) {
  test(`two stores on one database: a write through one reaches the other's state view${notifications ? '' : ', by the poll alone'}; a write's own view is current when it resolves`, { skip }, async (t) => {
    const { url } = await postgres.database('svc_views');
    const one = await openPostgresStore(url, { max: 2 });
    const other = await openPostgresStore(url, { max: 2, notifications });
    t.after(async () => {
      await one.close();
      await other.close();
    });
    await prepareState(one);
    await prepareState(other);
    const stamp = other.changeStamp();

    const user = await one.users.create({ name: 'Seen', email: 'seen@example.com', roleIds: [1] });
    // The writer's view includes the write as soon as the write resolves.
    assert.equal(prepareState(one), undefined, 'nothing left to wait for');
    assert.equal(stateOf(one).user(user.id)?.email, 'seen@example.com');
    assert.deepEqual(stateOf(one).rolesOf(user.id).map((role) => role.name), ['owner']);

    // The other store's stamp moves (its notification, or its next poll), and the view it
    // then prepares has the row.
    while (other.changeStamp() === stamp) await new Promise((resolve) => setTimeout(resolve, 10));
    await prepareState(other);
    assert.equal(stateOf(other).user(user.id)?.email, 'seen@example.com');

    // A write to no state table (a log row) moves neither stamp.
    const before = [one.changeStamp(), other.changeStamp()];
    await one.logs.insertBatch({ activity: [{ action: 'a', description: 'b', ip: '::1', createdAt: new Date().toISOString() }], api: [], usage: [] }, { wait: true });
    await new Promise((resolve) => setTimeout(resolve, 700));
    assert.deepEqual([one.changeStamp(), other.changeStamp()], before);
  });
}

test('a database that cannot be reached at start is named in the error, without its password', async () => {
  // Nothing listens on port 1 of loopback.
  await assert.rejects(openPostgresStore('postgres://svc:hunter2@127.0.0.1:1/svc', { max: 1 }), (error: Error) => {
    assert.equal(error.message, "cannot reach the store's database at postgres://svc:***@127.0.0.1:1/svc: connect ECONNREFUSED 127.0.0.1:1");
    return true;
  });
});

test('a transaction whose callback returns before a call on its handle is answered is rolled back, never committed around it', { skip }, async (t) => {
  const { url } = await postgres.database('svc_unawaited');
  const store = await openPostgresStore(url, { max: 2 });
  t.after(() => store.close());
  await assert.rejects(
    store.transaction(async (tx) => {
      await tx.users.create({ name: 'Awaited', email: 'awaited@example.com', roleIds: [] });
      // Not awaited: it would run on after the commit, on a client the pool hands on.
      void tx.users.create({ name: 'Forgotten', email: 'forgotten@example.com', roleIds: [] });
    }),
    UnawaitedCallError,
  );
  assert.equal(await store.users.findByEmail('awaited@example.com'), undefined);
  assert.equal(await store.users.findByEmail('forgotten@example.com'), undefined);
});
