import { atomically, get, lock, run, type Step } from './query.ts';

const EXPIRE_EMAIL = 'DELETE FROM login_failures WHERE email = ? AND failed_at <= ?';
const EXPIRE_ALL = 'DELETE FROM login_failures WHERE failed_at <= ?';
const RECENT = 'SELECT count(*) AS n, min(failed_at) AS oldest FROM login_failures WHERE email = ?';
const INSERT = 'INSERT INTO login_failures (email, failed_at) VALUES (?, ?)';
const FORGET = 'DELETE FROM login_failures WHERE email = ?';

/**
 * Failed logins by email (DESIGN §9 lockout), kept in the store so that every process on
 * it — and every control-plane instance on one database — counts the same attempts, and a
 * restart does not hand an attacker a fresh set. Never part of a snapshot.
 *
 * An email holds at most `maxAttempts` rows: the attempt that would add one more is
 * refused instead. Rows older than the window are deleted as attempts come in, so the
 * table holds at most the failures of one window.
 */
export class LoginFailuresRepository {
  /**
   * Counts an attempt for `email` at `now` (milliseconds) as a failure, in one transaction
   * with the check: when `maxAttempts` failures are already inside the window, nothing is
   * recorded and the answer is when the oldest of them leaves it; else null.
   */
  *attempt(email: string, now: number, windowMs: number, maxAttempts: number): Step<number | null> {
    return yield* atomically(function* () {
      yield* lock(`login:${email}`);
      yield* run(EXPIRE_EMAIL, email, now - windowMs);
      const { n, oldest } = (yield* get<{ n: number; oldest: number | null }>(RECENT, email))!;
      if (n >= maxAttempts && oldest !== null) return oldest + windowMs;
      yield* run(INSERT, email, now);
      return null;
    });
  }

  /** Forgets the failures of `email` (a successful login). */
  *forget(email: string): Step<void> {
    yield* run(FORGET, email);
  }

  /** Deletes every failure at or before `cutoff` (milliseconds); returns how many. */
  *expire(cutoff: number): Step<number> {
    return (yield* run(EXPIRE_ALL, cutoff)).changes;
  }
}
