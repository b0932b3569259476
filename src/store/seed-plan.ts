/**
 * The seed's password decisions (DESIGN §9: a seeded password is stored as a salted scrypt
 * hash, and whether it changed can only be answered by verifying it) made on libuv's thread
 * pool: on each reload of a seed file (src/sync/file-source.ts), and at start while the rest
 * of the program is still being loaded (src/cli/run.ts, `serve`), so that the scrypt work
 * of a start runs beside the main thread instead of holding it up.
 */
import { hashPasswordAsync, verifyPasswordAsync } from '../auth/passwords.ts';
import type { Config } from '../config/load.ts';
import type { Store } from './db.ts';
import { passwordChecks, type PasswordCheck, type PasswordPlan, type SeedInput } from './seed.ts';

/**
 * Per seeded user with a password: keep the stored hash when the password still matches it,
 * else a new hash. `known` answers without scrypt for a password already verified against
 * the same stored hash.
 */
export async function planPasswordsAsync(store: Store, seed: SeedInput, known?: (check: PasswordCheck) => boolean): Promise<PasswordPlan> {
  return decidePasswords(await passwordChecks(store, seed), known);
}

/**
 * The decisions for `checks` (`passwordChecks`). Every scrypt they need has been handed to
 * the thread pool when this returns, so the caller may go on with synchronous work (a
 * start loading modules) while they run.
 */
export function decidePasswords(checks: readonly PasswordCheck[], known: (check: PasswordCheck) => boolean = () => false): Promise<PasswordPlan> {
  return Promise.all(
    checks.map(async (check) => {
      const unchanged = check.storedHash !== null && (known(check) || (await verifyPasswordAsync(check.password, check.storedHash)));
      const newHash = unchanged ? null : await hashPasswordAsync(check.password);
      return [check.email, { storedHash: check.storedHash, newHash }] as const;
    }),
  ).then((decisions) => new Map(decisions));
}

/**
 * Whether a start applies the seed to `store`. `new-store` (CLI commands other than
 * `serve`): only to a store this start created. A replica's state is the control plane's
 * snapshot: its seed only bootstraps one that has never received a snapshot.
 */
export async function seedsAtStart(config: Config, store: Store, mode: 'always' | 'new-store'): Promise<boolean> {
  if (mode === 'new-store' && !store.created) return false;
  return config.state.source !== 'control-plane' || (await store.replication.getSync('applied')) === undefined;
}
