import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { StoreTarget } from './target.ts';

// Store.transaction takes a synchronous callback today (node:sqlite commits before an await
// would resume), so the calls inside one are not awaited; everything outside is.

export function transactionsContract(target: StoreTarget): void {
  test('transaction commits, and rolls back everything when the callback throws', async (t) => {
    const store = await target.open(t);
    const id = await store.transaction(() => store.users.create({ name: 'A', email: 'a@example.com', roleIds: [] }).id);
    assert.ok(await store.users.findById(id));

    await assert.rejects(
      async () =>
        store.transaction(() => {
          store.users.create({ name: 'B', email: 'b@example.com', roleIds: [1] });
          store.users.update(id, { name: 'changed' });
          throw new Error('boom');
        }),
      /boom/,
    );
    assert.equal(await store.users.findByEmail('b@example.com'), undefined);
    assert.equal((await store.users.findById(id))?.name, 'A');
    assert.equal(await target.sql.inTransaction(store), false);
  });

  test('a nested transaction that throws rolls back only its own writes', async (t) => {
    const store = await target.open(t);
    await store.transaction(() => {
      store.users.create({ name: 'Outer', email: 'outer@example.com', roleIds: [] });
      assert.throws(() =>
        store.transaction(() => {
          store.users.create({ name: 'Inner', email: 'inner@example.com', roleIds: [] });
          throw new Error('inner');
        }),
      );
      store.transaction(() => store.users.create({ name: 'Inner2', email: 'inner2@example.com', roleIds: [] }));
    });
    assert.deepEqual(
      (await store.users.list()).map((user) => user.name),
      ['Outer', 'Inner2'],
    );
  });

  test('a repository write that fails half-way inside is atomic', async (t) => {
    const store = await target.open(t);
    // The user row goes in first, then role 999 violates the foreign key.
    await assert.rejects(async () => store.users.create({ name: 'X', email: 'x@example.com', roleIds: [1, 999] }), /FOREIGN KEY/);
    assert.equal((await store.users.list()).length, 0);
  });
}
