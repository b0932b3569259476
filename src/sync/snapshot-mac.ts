/**
 * The MAC that makes a snapshot authentic (DESIGN §13, docs/replication.md "The snapshot
 * format"): HMAC-SHA256 under a key derived from the master key, which the control plane
 * and every replica hold and nothing else on the network does. A snapshot's digest only
 * says the body is whole; the MAC says a holder of the master key made it, so a man in
 * the middle can neither edit a snapshot nor make one up (a version far in the future,
 * say, that would make the replica refuse every real one after it).
 */
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import type { MasterKey } from '../crypto/master-key.ts';

/** HKDF info for the MAC key; changing it makes every replica refuse every snapshot until both sides agree. */
export const SNAPSHOT_MAC_LABEL = 'svc snapshot v1';

const MAC_PATTERN = /^[0-9a-f]{64}$/;

export class SnapshotMac {
  readonly #key: KeyObject;

  constructor(master: MasterKey) {
    const secret = master.deriveSecret(SNAPSHOT_MAC_LABEL);
    this.#key = createSecretKey(secret);
    secret.fill(0);
  }

  /** The MAC of `text` (the canonical body without `mac`), lowercase hex. */
  sign(text: string): string {
    return createHmac('sha256', this.#key).update(text, 'utf8').digest('hex');
  }

  /** Whether `mac` is the MAC of `text`, compared in constant time. */
  verify(text: string, mac: string): boolean {
    if (!MAC_PATTERN.test(mac)) return false;
    const expected = createHmac('sha256', this.#key).update(text, 'utf8').digest();
    return timingSafeEqual(expected, Buffer.from(mac, 'hex'));
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return 'SnapshotMac <redacted>';
  }
}
