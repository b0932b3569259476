import { get, run, type Step } from './query.ts';

// Logging out twice with the same token is not an error: the first expiry stands.
const INSERT = 'INSERT INTO token_revocations (jti, expires_at) VALUES (?, ?) ON CONFLICT (jti) DO NOTHING';
const EXISTS = 'SELECT 1 AS revoked FROM token_revocations WHERE jti = ?';
const PURGE = 'DELETE FROM token_revocations WHERE expires_at <= ?';

/**
 * Access tokens ended by logout, by their `jti` (DESIGN §9). A signed token stays valid
 * until its `exp`, so a revocation is kept exactly that long and then purged.
 */
export class TokenRevocationsRepository {
  /** `expiresAt` is the token's expiry, ISO 8601. */
  *revoke(jti: string, expiresAt: string): Step<void> {
    yield* run(INSERT, jti, expiresAt);
  }

  *isRevoked(jti: string): Step<boolean> {
    return (yield* get(EXISTS, jti)) !== undefined;
  }

  /** Removes revocations of tokens that have expired by `now` (ISO 8601); returns how many. */
  *purgeExpired(now: string): Step<number> {
    return (yield* run(PURGE, now)).changes;
  }
}
