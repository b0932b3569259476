import type { Store } from './db.ts';

/**
 * Rows read on every request (a configuration by slug), kept while the store's change
 * stamp holds. Any write anywhere empties the cache, so it can never serve a row that
 * changed; in return it is only worth it for data that changes rarely.
 */
export class StampedCache<V> {
  private readonly store: Store;
  private readonly max: number;
  private readonly entries = new Map<string, V>();
  private stamp = -1;

  constructor(store: Store, max = 1024) {
    this.store = store;
    this.max = max;
  }

  get(key: string, load: () => V): V {
    const stamp = this.store.changeStamp();
    if (stamp !== this.stamp) {
      this.entries.clear();
      this.stamp = stamp;
    }
    if (this.entries.has(key)) return this.entries.get(key) as V;
    const value = load();
    if (this.entries.size >= this.max) this.entries.clear();
    this.entries.set(key, value);
    return value;
  }
}

/**
 * One StampedCache per store, made on first use: for lookups on the request path that live
 * beside the store rather than in a service object. Keyed by the store, so every service
 * instance (and every test) has its own.
 */
export function perStore<V>(max?: number): (store: Store) => StampedCache<V> {
  const caches = new WeakMap<Store, StampedCache<V>>();
  return (store) => {
    let cache = caches.get(store);
    if (cache === undefined) {
      cache = new StampedCache<V>(store, max);
      caches.set(store, cache);
    }
    return cache;
  };
}

/** The id of the classification named by id or slug, read from the store only after a write. */
const classificationIds = perStore<number | undefined>();

export function classificationIdOf(store: Store, idOrSlug: string): number | undefined {
  return classificationIds(store).get(idOrSlug, () => store.classifications.findByIdOrSlug(idOrSlug)?.id);
}
