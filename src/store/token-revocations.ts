import type { DatabaseSync, StatementSync } from 'node:sqlite';

/**
 * Access tokens ended by logout, by their `jti` (DESIGN §9). A signed token stays valid
 * until its `exp`, so a revocation is kept exactly that long and then purged.
 */
export class TokenRevocationsRepository {
  readonly #insert: StatementSync;
  readonly #exists: StatementSync;
  readonly #purge: StatementSync;

  constructor(db: DatabaseSync) {
    // Logging out twice with the same token is not an error: the first expiry stands.
    this.#insert = db.prepare('INSERT OR IGNORE INTO token_revocations (jti, expires_at) VALUES (?, ?)');
    this.#exists = db.prepare('SELECT 1 AS revoked FROM token_revocations WHERE jti = ?');
    this.#purge = db.prepare('DELETE FROM token_revocations WHERE expires_at <= ?');
  }

  /** `expiresAt` is the token's expiry, ISO 8601. */
  revoke(jti: string, expiresAt: string): void {
    this.#insert.run(jti, expiresAt);
  }

  isRevoked(jti: string): boolean {
    return this.#exists.get(jti) !== undefined;
  }

  /** Removes revocations of tokens that have expired by `now` (ISO 8601); returns how many. */
  purgeExpired(now: string): number {
    return Number(this.#purge.run(now).changes);
  }
}
