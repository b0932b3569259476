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
