import { LRUCache } from 'lru-cache';
import { compileFieldPaths, type FieldMatcher } from '../fields/paths.ts';

/**
 * Compiled `x-svc-fields` values. Clients send the same few headers over and over, so
 * each distinct value is compiled once; the bound keeps hostile variety from growing it.
 */
export class FieldPathCache {
  private readonly cache = new LRUCache<string, FieldMatcher | typeof NONE>({ max: 512 });

  /** Null when the value lists no path. Throws 400 for an invalid value (not cached). */
  get(header: string): FieldMatcher | null {
    const hit = this.cache.get(header);
    if (hit !== undefined) return hit === NONE ? null : hit;
    const matcher = compileFieldPaths(header);
    this.cache.set(header, matcher ?? NONE);
    return matcher;
  }
}

const NONE = Symbol('no paths');
