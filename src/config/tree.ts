/**
 * Reading a config tree that may be partly invalid: the cross-field rules run even when
 * other parts of the file failed, so every access checks the shape it reads.
 */
import type { ConfigPath } from './problems.ts';

export type Item = { path: ConfigPath; value: Record<string, unknown> };

/** The mappings of a list, each with its path; anything else in the list is skipped. */
export function items(list: unknown, path: ConfigPath): Item[] {
  if (!Array.isArray(list)) return [];
  const out: Item[] = [];
  list.forEach((entry: unknown, index) => {
    const value = asRecord(entry);
    if (value !== undefined) out.push({ path: [...path, index], value });
  });
  return out;
}

export function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}
