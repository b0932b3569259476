/**
 * Login lockout (DESIGN §9): after `maxAttempts` failed logins for one email within
 * `windowMs`, further attempts for that email are refused with 429 until the oldest
 * failure leaves the window (a sliding window, not a fixed block).
 *
 * The failures are kept in the store (store/login-failures.ts), so every process on it
 * counts the same attempts and a restart forgets none. The store holds at most
 * `maxAttempts` failures per email and only those of the last window: old ones are
 * deleted as attempts come in, and all expired ones at most once a window.
 */
import { TooManyRequestsError } from '../errors.ts';
import type { Store } from '../store/db.ts';

export interface LoginThrottleOptions {
  readonly maxAttempts: number;
  readonly windowMs: number;
  /** Clock, for tests. */
  readonly now?: () => number;
}

export class LoginThrottle {
  private readonly store: Store;
  private readonly maxAttempts: number;
  private readonly windowMs: number;
  private readonly now: () => number;
  private lastExpiry = Number.NEGATIVE_INFINITY;

  constructor(store: Store, options: LoginThrottleOptions) {
    this.store = store;
    this.maxAttempts = options.maxAttempts;
    this.windowMs = options.windowMs;
    this.now = options.now ?? Date.now;
  }

  /**
   * Throws 429 with Retry-After when `email` has used up its attempts; otherwise records
   * this attempt as a failure, to be forgotten by `succeed`. Counting up front, in one
   * transaction with the check, means attempts running in parallel (in this process or
   * another) cannot all pass the check before any of them fails.
   */
  async attempt(email: string): Promise<void> {
    const key = email.toLowerCase();
    const now = this.now();
    if (now - this.lastExpiry >= this.windowMs) {
      this.lastExpiry = now;
      await this.store.loginFailures.expire(now - this.windowMs);
    }
    const refusedUntil = await this.store.loginFailures.attempt(key, now, this.windowMs, this.maxAttempts);
    if (refusedUntil !== null) throw new TooManyRequestsError((refusedUntil - now) / 1000);
  }

  /** A successful login forgets the email's failures. */
  async succeed(email: string): Promise<void> {
    await this.store.loginFailures.forget(email.toLowerCase());
  }
}
