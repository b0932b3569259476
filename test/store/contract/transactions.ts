import assert from 'node:assert/strict';
import { test } from 'node:test';
import { constraintViolated } from '../../../src/store/sql.ts';
import type { StoreTarget } from './target.ts';

export function transactionsContract(target: StoreTarget): void {
  test('transaction commits, and rolls back everything when the callback rejects', async (t) => {
    const store = await target.open(t);
    const id = await store.transaction(async (tx) => (await tx.users.create({ name: 'A', email: 'a@example.com', roleIds: [] })).id);
    assert.ok(await store.users.findById(id));

    await assert.rejects(
      store.transaction(async (tx) => {
        await tx.users.create({ name: 'B', email: 'b@example.com', roleIds: [1] });
        await tx.users.update(id, { name: 'changed' });
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(await store.users.findByEmail('b@example.com'), undefined);
    assert.equal((await store.users.findById(id))?.name, 'A');
    assert.equal(await target.sql.inTransaction(store), false);
  });

  test('a transaction whose statement fails rolls back the statements before it', async (t) => {
    const store = await target.open(t);
    await assert.rejects(
      store.transaction(async (tx) => {
        await tx.users.create({ name: 'C', email: 'c@example.com', roleIds: [] });
        // The same email again: a unique violation.
        await tx.users.create({ name: 'C again', email: 'c@example.com', roleIds: [] });
      }),
      (e) => constraintViolated(e) === 'unique',
    );
    assert.equal(await store.users.findByEmail('c@example.com'), undefined);
    assert.equal(await target.sql.inTransaction(store), false);
  });

  test('a nested transaction that rejects rolls back only its own writes', async (t) => {
    const store = await target.open(t);
    await store.transaction(async (tx) => {
      await tx.users.create({ name: 'Outer', email: 'outer@example.com', roleIds: [] });
      await assert.rejects(
        tx.transaction(async (inner) => {
          await inner.users.create({ name: 'Inner', email: 'inner@example.com', roleIds: [] });
          throw new Error('inner');
        }),
        /inner/,
      );
      await tx.transaction(async (inner) => inner.users.create({ name: 'Inner2', email: 'inner2@example.com', roleIds: [] }));
    });
    assert.deepEqual(
      (await store.users.list()).map((user) => user.name),
      ['Outer', 'Inner2'],
    );
  });

  test('an outer transaction that rejects also rolls back the nested transactions that completed in it', async (t) => {
    const store = await target.open(t);
    const reason = new Error('outer');
    await assert.rejects(
      store.transaction(async (tx) => {
        await tx.users.create({ name: 'Outer', email: 'outer@example.com', roleIds: [] });
        await tx.transaction(async (inner) => {
          await inner.users.create({ name: 'Inner', email: 'inner@example.com', roleIds: [] });
          await inner.transaction(async (innermost) => innermost.users.create({ name: 'Innermost', email: 'innermost@example.com', roleIds: [] }));
        });
        throw reason;
      }),
      (error) => error === reason,
    );
    assert.deepEqual(await store.users.list(), []);
    assert.equal(await target.sql.inTransaction(store), false);
  });

  test('a transaction reads its own writes through its handle before it commits', async (t) => {
    const store = await target.open(t);
    await store.transaction(async (tx) => {
      const user = await tx.users.create({ name: 'Seen', email: 'seen@example.com', roleIds: [] });
      assert.equal((await tx.users.findByEmail('seen@example.com'))?.id, user.id);
      await tx.transaction(async (inner) => {
        await inner.users.update(user.id, { name: 'Seen twice' });
        assert.equal((await inner.users.findById(user.id))?.name, 'Seen twice');
      });
      assert.equal((await tx.users.findById(user.id))?.name, 'Seen twice', 'a released savepoint is seen by the transaction around it');
    });
    assert.equal((await store.users.findByEmail('seen@example.com'))?.name, 'Seen twice');
  });

  test('a repository write that fails half-way inside a transaction leaves none of its rows, and the transaction commits the rest', async (t) => {
    const store = await target.open(t);
    await store.transaction(async (tx) => {
      await tx.users.create({ name: 'Kept', email: 'kept@example.com', roleIds: [] });
      // The user row goes in first, then role 999 violates the foreign key.
      await assert.rejects(tx.users.create({ name: 'X', email: 'x@example.com', roleIds: [1, 999] }), (e) => constraintViolated(e) === 'foreign-key');
      await tx.users.create({ name: 'After', email: 'after@example.com', roleIds: [] });
    });
    assert.deepEqual(
      (await store.users.list()).map((user) => user.name),
      ['Kept', 'After'],
    );
    assert.equal(await target.sql.inTransaction(store), false);
  });

  test('a repository write that fails half-way inside is atomic', async (t) => {
    const store = await target.open(t);
    // The user row goes in first, then role 999 violates the foreign key.
    await assert.rejects(async () => store.users.create({ name: 'X', email: 'x@example.com', roleIds: [1, 999] }), (e) => constraintViolated(e) === 'foreign-key');
    assert.equal((await store.users.list()).length, 0);
  });
}
