/**
 * The secrets every reliability test's service knows from the shared seed: whatever a
 * test did to it, none may appear in what the service wrote. secrets.test.ts goes further
 * (tokens, master and data keys, plaintexts) over a workload built for it.
 */
import assert from 'node:assert/strict';
import { KEYS } from '../support/app.ts';

/** The seed's API keys and its one password (test/support/app.ts). */
export const SEED_SECRETS: readonly string[] = [...Object.values(KEYS), 'correct horse'];

export function assertNoSecrets(label: string, text: string, extra: readonly string[] = []): void {
  assert.ok(text.length > 0, `${label}: nothing was captured to search`);
  for (const secret of [...SEED_SECRETS, ...extra]) {
    assert.ok(!text.includes(secret), `${label}: a secret (${secret.slice(0, 6)}…) is in the service's output`);
  }
}
