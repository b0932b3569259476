import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { runInTransaction } from './sqlite/transaction.ts';

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
  readonly #db: DatabaseSync;
  readonly #expireEmail: StatementSync;
  readonly #expireAll: StatementSync;
  readonly #recent: StatementSync;
  readonly #insert: StatementSync;
  readonly #forget: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#expireEmail = db.prepare('DELETE FROM login_failures WHERE email = ? AND failed_at <= ?');
    this.#expireAll = db.prepare('DELETE FROM login_failures WHERE failed_at <= ?');
    this.#recent = db.prepare('SELECT count(*) AS n, min(failed_at) AS oldest FROM login_failures WHERE email = ?');
    this.#insert = db.prepare('INSERT INTO login_failures (email, failed_at) VALUES (?, ?)');
    this.#forget = db.prepare('DELETE FROM login_failures WHERE email = ?');
  }

  /**
   * Counts an attempt for `email` at `now` (milliseconds) as a failure, in one transaction
   * with the check: when `maxAttempts` failures are already inside the window, nothing is
   * recorded and the answer is when the oldest of them leaves it; else null.
   */
  attempt(email: string, now: number, windowMs: number, maxAttempts: number): number | null {
    return runInTransaction(this.#db, () => {
      this.#expireEmail.run(email, now - windowMs);
      const { n, oldest } = this.#recent.get(email) as { n: number; oldest: number | null };
      if (n >= maxAttempts && oldest !== null) return oldest + windowMs;
      this.#insert.run(email, now);
      return null;
    });
  }

  /** Forgets the failures of `email` (a successful login). */
  forget(email: string): void {
    this.#forget.run(email);
  }

  /** Deletes every failure at or before `cutoff` (milliseconds); returns how many. */
  expire(cutoff: number): number {
    return Number(this.#expireAll.run(cutoff).changes);
  }
}
