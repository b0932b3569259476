/**
 * Token codecs per configuration, built once (keys unwrapped, KeyObjects made) and
 * rebuilt only when the configuration's row changes (rotation, min version, destroy).
 * A rebuild reuses the material of every version whose wrapped key is unchanged: a
 * rotation unwraps one key, not every version the configuration ever had.
 */
import { unwrapDataKey } from '../crypto/data-keys.ts';
import { Keyring, type KeyVersionInput } from '../crypto/keyring.ts';
import type { MasterKey } from '../crypto/master-key.ts';
import { TokenCodec } from '../crypto/token.ts';
import { InternalError } from '../errors.ts';
import type { Configuration } from '../store/configurations.ts';
import type { Store } from '../store/db.ts';
import { syncRepositories } from '../store/sqlite/connection.ts';
import { stateOf } from '../store/state-view.ts';

interface Entry {
  stamp: string;
  codec: TokenCodec;
  /** The wrapped key each version's material was built from. */
  wrapped: Map<number, Buffer>;
}

export class CodecCache {
  private readonly store: Store;
  private readonly master: MasterKey;
  private readonly entries = new Map<string, Entry>();

  constructor(store: Store, master: MasterKey) {
    this.store = store;
    this.master = master;
  }

  /** The configuration a relay, egress or egress proxy route names. */
  configurationNamed(name: string): Configuration | undefined {
    return stateOf(this.store).configurationByName(name);
  }

  /** The configuration behind a proxy slug. */
  configuration(slug: string): Configuration | undefined {
    return stateOf(this.store).configurationBySlug(slug);
  }

  get(configuration: Configuration): TokenCodec {
    const stamp = `${configuration.updatedAt}|${configuration.keyVersion}|${configuration.minDecryptionVersion}`;
    const cached = this.entries.get(configuration.id);
    if (cached !== undefined && cached.stamp === stamp) return cached.codec;
    const entry: Entry = { stamp, ...this.build(configuration, cached) };
    this.entries.set(configuration.id, entry);
    return entry.codec;
  }

  /**
   * Rebuilds the codec of `configuration` now if one is held (a key version destroyed: its
   * key schedule goes at once rather than on the next request); nothing when none is.
   */
  refresh(configuration: Configuration): void {
    if (this.entries.has(configuration.id)) this.get(configuration);
  }

  /** Drops a configuration's codec (deleted configurations). */
  forget(configurationId: string): void {
    this.entries.delete(configurationId);
  }

  private build(configuration: Configuration, previous: Entry | undefined): Omit<Entry, 'stamp'> {
    if (configuration.keyringId === null) throw new InternalError(new Error(`configuration ${configuration.id} has no keyring`));
    // The same keyring id, or nothing carries over (a configuration re-created under the same id).
    const reusable = previous !== undefined && previous.codec.keyring.id.equals(configuration.keyringId) ? previous : undefined;
    const wrapped = new Map<number, Buffer>();
    const versions: KeyVersionInput[] = [];
    const unwrapped: Buffer[] = [];
    try {
      for (const k of syncRepositories(this.store).configurations.keys(configuration.id)) {
        if (k.destroyedAt !== null) {
          versions.push({ version: k.version, destroyed: true });
          continue;
        }
        wrapped.set(k.version, k.wrapped);
        const material = reusable?.wrapped.get(k.version)?.equals(k.wrapped) === true ? reusable.codec.keyring.materialOf(k.version) : undefined;
        if (material !== undefined) {
          versions.push({ version: k.version, material });
          continue;
        }
        const key = unwrapDataKey(this.master, configuration.id, k.version, k.wrapped);
        unwrapped.push(key);
        versions.push({ version: k.version, key });
      }
      const keyring = new Keyring(configuration.keyringId, versions, { minDecryptionVersion: configuration.minDecryptionVersion });
      return { codec: new TokenCodec(keyring, { deterministic: configuration.deterministic }), wrapped };
    } finally {
      // Unwrapped keys live only until the keyring has derived its material from them.
      for (const key of unwrapped) key.fill(0);
    }
  }
}
