import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { openStore, type Store, type Transaction } from '../../src/store/db.ts';
import { ConcurrentSavepointError, TransactionEndedError } from '../../src/store/db.ts';
import { StoreBusyError } from '../../src/store/sqlite/gate.ts';
import { stateOf } from '../../src/store/state-view.ts';

function fileStore(t: TestContext): Store {
  const dir = mkdtempSync(join(tmpdir(), 'svc-gate-'));
  const store = openStore(join(dir, 'svc.db'));
  t.after(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return store;
}

/** Resolves once `trigger` is called: lets a test hold a transaction open across turns of the event loop. */
function latch(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}

/**
 * A transaction that runs `write`, then stays open across turns of the event loop until
 * `abandon()`, and rolls back: `opened` resolves once `write` is done.
 */
function heldOpen(store: Store, write: (tx: Transaction) => Promise<unknown>): { opened: Promise<void>; abandon: () => Promise<void> } {
  const entered = latch();
  const release = latch();
  const transaction = store.transaction(async (tx) => {
    await write(tx);
    entered.open();
    await release.wait;
    throw new Error('abandoned');
  });
  return {
    opened: entered.wait,
    abandon: async () => {
      release.open();
      await assert.rejects(transaction, /abandoned/);
    },
  };
}

test('a use of the store while a transaction holds the connection waits for it, and never reads its uncommitted rows', async (t) => {
  const store = fileStore(t);
  const held = heldOpen(store, (tx) => tx.meta.set('color', 'blue'));
  await held.opened;
  // Another flow asks while the transaction is open on another turn of the loop.
  const read = store.meta.get('color');
  let answered = false;
  void read.then(() => {
    answered = true;
  });
  await sleep(20);
  assert.equal(answered, false, 'the read waits for the transaction');
  await held.abandon();
  assert.equal(await read, undefined, 'the rolled-back value was never seen');
});

test('a write from another flow during a transaction lands after it: a rollback does not take it along', async (t) => {
  const store = fileStore(t);
  const held = heldOpen(store, (tx) => tx.meta.set('inside', 'x'));
  await held.opened;
  const outside = store.meta.set('outside', 'kept');
  await held.abandon();
  await outside;
  assert.equal(await store.meta.get('outside'), 'kept');
  assert.equal(await store.meta.get('inside'), undefined);
});

test('the store used directly inside its own transaction is refused with StoreBusyError, and the transaction rolls back', async (t) => {
  const store = fileStore(t);
  await assert.rejects(
    store.transaction(async (tx) => {
      await tx.meta.set('inside', 'x');
      await store.meta.get('inside');
    }),
    StoreBusyError,
  );
  await assert.rejects(
    store.transaction(async () => {
      await store.transaction(async () => undefined);
    }),
    StoreBusyError,
    'a nested transaction goes through tx.transaction',
  );
  assert.equal(await store.meta.get('inside'), undefined);
});

test('transactions from two flows run one after the other, each whole', async (t) => {
  const store = fileStore(t);
  const order: string[] = [];
  const run = (name: string) =>
    store.transaction(async (tx) => {
      order.push(`${name} begins`);
      await tx.meta.set(name, '1');
      await sleep(5);
      order.push(`${name} ends`);
    });
  await Promise.all([run('a'), run('b')]);
  assert.deepEqual(order, ['a begins', 'a ends', 'b begins', 'b ends']);
  assert.equal(await store.meta.get('a'), '1');
  assert.equal(await store.meta.get('b'), '1');
});

test('while a transaction is open the state view stays the one read before it', async (t) => {
  const store = fileStore(t);
  const before = stateOf(store);
  assert.equal(before.configurationByName('refunds'), undefined);
  const held = heldOpen(store, (tx) => tx.configurations.create({ name: 'refunds', type: 'provider', provider: 'google', extra: { groups: [] } }));
  await held.opened;
  assert.equal(stateOf(store), before);
  assert.equal(stateOf(store).configurationByName('refunds'), undefined);
  await held.abandon();
  assert.equal(stateOf(store).configurationByName('refunds'), undefined);
});

test('a transaction handle used after its transaction ended is refused, never run outside a transaction', async (t) => {
  const store = fileStore(t);
  let kept: Transaction | null = null;
  let late: Promise<void> | null = null;
  await store.transaction(async (tx) => {
    kept = tx;
    await tx.meta.set('inside', '1');
    // A timer set inside runs after the commit, with the transaction's context.
    late = new Promise((resolve, reject) => setTimeout(() => tx.meta.set('late', '1').then(resolve, reject), 10));
  });
  await assert.rejects(kept!.meta.set('after', '1'), TransactionEndedError);
  await assert.rejects(kept!.transaction(async () => undefined), TransactionEndedError);
  await assert.rejects(late!, TransactionEndedError);
  assert.equal(await store.meta.get('inside'), '1');
  assert.equal(await store.meta.get('after'), undefined);
  assert.equal(await store.meta.get('late'), undefined);
});

test('regression: two nested transactions awaited together are refused, so one cannot roll back the other', async (t) => {
  // Savepoints are a stack: when the first of two open side by side rolled back, it took
  // the second's finished write with it and kept its own.
  const store = fileStore(t);
  await store.transaction(async (tx) => {
    const a = tx.transaction(async (inner) => {
      await inner.meta.set('a', '1');
      await new Promise((resolve) => setImmediate(resolve));
      throw new Error('a fails');
    });
    const b = tx.transaction(async (inner) => {
      await inner.meta.set('b', '1');
    });
    const [first, second] = await Promise.allSettled([a, b]);
    assert.equal(first.status, 'rejected');
    assert.match(String((first as PromiseRejectedResult).reason), /a fails/);
    assert.equal(second.status, 'rejected');
    assert.ok((second as PromiseRejectedResult).reason instanceof ConcurrentSavepointError);
    // One inside another is a level deeper, and fine.
    await tx.transaction(async (inner) => inner.transaction(async (deeper) => deeper.meta.set('deep', '1')));
  });
  assert.equal(await store.meta.get('a'), undefined);
  assert.equal(await store.meta.get('b'), undefined);
  assert.equal(await store.meta.get('deep'), '1');
});
