/**
 * Random bytes for nonces, drawn from a pooled buffer.
 *
 * One `randomFillSync` call per field costs a syscall-sized overhead that dominates when
 * a request encrypts thousands of small fields; filling a 4 KiB pool amortises it over
 * hundreds of nonces. The pool is for public values (nonces) only: secret keys come from
 * `crypto.randomBytes` directly so they never sit in a shared, long-lived buffer.
 */

import { randomFillSync } from 'node:crypto';

const POOL_SIZE = 4096;

// allocUnsafeSlow: the pool must not itself be a slice of Node's shared allocation
// pool, and it is filled before any byte of it is read.
const pool = Buffer.allocUnsafeSlow(POOL_SIZE);
let poolOffset = POOL_SIZE;

/**
 * Copies `length` random bytes into `target` at `offset`, without allocating.
 * This is the hot-path form: callers write nonces straight into their own buffers.
 */
export function fillRandomPooled(target: Buffer, offset: number, length: number): void {
  if (length > POOL_SIZE) {
    randomFillSync(target, offset, length);
    return;
  }
  if (poolOffset + length > POOL_SIZE) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  pool.copy(target, offset, poolOffset, poolOffset + length);
  poolOffset += length;
}

/**
 * Returns `n` random bytes as a FRESH copy: the result never aliases the pool, so callers
 * may keep it, mutate it or hand it on; the pool's next refill cannot change it.
 */
export function randomBytesPooled(n: number): Buffer {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError('randomBytesPooled: n must be a non-negative integer');
  const out = Buffer.allocUnsafe(n);
  fillRandomPooled(out, 0, n);
  return out;
}
