import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fillRandomPooled, randomBytesPooled } from '../../src/crypto/random.ts';

test('randomBytesPooled returns the requested length, distinct values', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const b = randomBytesPooled(12);
    assert.equal(b.length, 12);
    seen.add(b.toString('hex'));
  }
  // 2000 × 12 bytes spans several pool refills; a repeat would mean reused pool bytes.
  assert.equal(seen.size, 2000);
  assert.equal(randomBytesPooled(0).length, 0);
  assert.throws(() => randomBytesPooled(-1), RangeError);
  assert.throws(() => randomBytesPooled(1.5), RangeError);
});

test('results are fresh copies: kept values survive later draws and refills', () => {
  const kept = randomBytesPooled(32);
  const snapshot = Buffer.from(kept);
  for (let i = 0; i < 1000; i++) randomBytesPooled(24);
  assert.deepEqual(kept, snapshot);
});

test('requests larger than the pool and fills at an offset work', () => {
  const big = randomBytesPooled(10_000);
  assert.equal(big.length, 10_000);
  assert.ok(big.subarray(9_000).some((b) => b !== 0));

  const target = Buffer.alloc(40);
  fillRandomPooled(target, 8, 24);
  assert.ok(target.subarray(0, 8).every((b) => b === 0));
  assert.ok(target.subarray(32).every((b) => b === 0));
  assert.ok(target.subarray(8, 32).some((b) => b !== 0));
});
