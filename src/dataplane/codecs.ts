/**
 * Token codecs per configuration, built once (keys unwrapped, KeyObjects made) and
 * rebuilt only when the configuration's row changes (rotation, min version, destroy).
 */
import { unwrapDataKey } from '../crypto/data-keys.ts';
import { Keyring } from '../crypto/keyring.ts';
import type { MasterKey } from '../crypto/master-key.ts';
import { TokenCodec } from '../crypto/token.ts';
import { InternalError } from '../errors.ts';
import type { Configuration } from '../store/configurations.ts';
import type { Store } from '../store/db.ts';
import { StampedCache } from '../store/stamped-cache.ts';

interface Entry {
  stamp: string;
  codec: TokenCodec;
}

export class CodecCache {
  private readonly store: Store;
  private readonly master: MasterKey;
  private readonly entries = new Map<string, Entry>();
  private readonly bySlug: StampedCache<Configuration | undefined>;

  constructor(store: Store, master: MasterKey) {
    this.store = store;
    this.master = master;
    this.bySlug = new StampedCache(store);
  }

  /** The configuration behind a proxy slug, read from the store only after a write. */
  configuration(slug: string): Configuration | undefined {
    return this.bySlug.get(slug, () => this.store.configurations.findBySlug(slug));
  }

  get(configuration: Configuration): TokenCodec {
    const stamp = `${configuration.updatedAt}|${configuration.keyVersion}|${configuration.minDecryptionVersion}`;
    const cached = this.entries.get(configuration.id);
    if (cached !== undefined && cached.stamp === stamp) return cached.codec;
    const codec = this.build(configuration);
    this.entries.set(configuration.id, { stamp, codec });
    return codec;
  }

  /** Drops a configuration's codec (deleted configurations). */
  forget(configurationId: string): void {
    this.entries.delete(configurationId);
  }

  private build(configuration: Configuration): TokenCodec {
    if (configuration.keyringId === null) throw new InternalError(new Error(`configuration ${configuration.id} has no keyring`));
    const versions = this.store.configurations.keys(configuration.id).map((k) => ({
      version: k.version,
      key: k.destroyedAt === null ? unwrapDataKey(this.master, configuration.id, k.version, k.wrapped) : Buffer.alloc(32),
      destroyed: k.destroyedAt !== null,
    }));
    const keyring = new Keyring(configuration.keyringId, versions, { minDecryptionVersion: configuration.minDecryptionVersion });
    for (const v of versions) v.key.fill(0);
    return new TokenCodec(keyring, { deterministic: configuration.deterministic });
  }
}
