/**
 * Login lockout (DESIGN §9): after `maxAttempts` failed logins for one email within
 * `windowMs`, further attempts for that email are refused with 429 until the oldest
 * failure leaves the window (a sliding window, not a fixed block).
 *
 * State is in memory, per process. The map is bounded: an attacker trying many emails
 * cannot grow it past `maxTracked`. When it is full, expired entries go first, then the
 * emails whose last failure is oldest. Evicting a live entry forgets at most
 * `maxAttempts` failures of an email nobody has failed on recently, and getting there
 * takes `maxTracked` failed logins, each paying a full password hash.
 */
import { TooManyRequestsError } from '../errors.ts';

export interface LoginThrottleOptions {
  readonly maxAttempts: number;
  readonly windowMs: number;
  /** Emails tracked at once; default 10,000. */
  readonly maxTracked?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
}

export class LoginThrottle {
  private readonly maxAttempts: number;
  private readonly windowMs: number;
  private readonly maxTracked: number;
  private readonly now: () => number;
  /**
   * Lowercased email → times of its recent failures, oldest first, at most `maxAttempts`
   * of them. Insertion order is recency of the last failure: `fail` re-inserts.
   */
  private readonly failures = new Map<string, number[]>();

  constructor(options: LoginThrottleOptions) {
    this.maxAttempts = options.maxAttempts;
    this.windowMs = options.windowMs;
    this.maxTracked = options.maxTracked ?? 10_000;
    this.now = options.now ?? Date.now;
  }

  /** Emails currently tracked. */
  get size(): number {
    return this.failures.size;
  }

  /**
   * Throws 429 with Retry-After when `email` has used up its attempts; otherwise records
   * this attempt as a failure, to be forgotten by `succeed`. Counting up front means
   * attempts running in parallel cannot all pass the check before any of them fails.
   */
  attempt(email: string): void {
    const key = email.toLowerCase();
    const now = this.now();
    const times = this.recent(key, now) ?? [];
    if (times.length >= this.maxAttempts) {
      throw new TooManyRequestsError((times[0]! + this.windowMs - now) / 1000);
    }
    times.push(now);
    this.failures.delete(key);
    this.failures.set(key, times);
    if (this.failures.size > this.maxTracked) this.evict();
  }

  /** A successful login forgets the email's failures. */
  succeed(email: string): void {
    this.failures.delete(email.toLowerCase());
  }

  /** The failures of `key` still inside the window, or undefined when none are. */
  private recent(key: string, now: number): number[] | undefined {
    const times = this.failures.get(key);
    if (times === undefined) return undefined;
    const cutoff = now - this.windowMs;
    let expired = 0;
    while (expired < times.length && times[expired]! <= cutoff) expired++;
    if (expired === times.length) {
      this.failures.delete(key);
      return undefined;
    }
    if (expired > 0) times.splice(0, expired);
    return times;
  }

  /**
   * Map order is the order of last failures, so the front holds expired entries first,
   * then the live ones that have been quiet longest.
   */
  private evict(): void {
    for (const key of this.failures.keys()) {
      if (this.failures.size <= this.maxTracked) return;
      this.failures.delete(key);
    }
  }
}
