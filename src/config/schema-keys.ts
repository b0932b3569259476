/**
 * The keys a schema accepts at a path into the config tree, for the "did you mean" of an
 * unknown key. Read from the schema itself, so a suggestion can only name a key that exists.
 */
import type { z } from 'zod';
import type { ConfigPath } from './problems.ts';

type Schema = z.core.$ZodType;

interface Def {
  readonly type: string;
  readonly shape?: Record<string, Schema>;
  readonly element?: Schema;
  readonly innerType?: Schema;
  readonly in?: Schema;
  readonly out?: Schema;
}

export function knownKeysAt(schema: Schema, path: ConfigPath): string[] {
  let reached = unwrap(schema);
  for (const segment of path) {
    reached = reached.flatMap((def) => {
      const child = typeof segment === 'number' ? (def.type === 'array' ? def.element : undefined) : def.type === 'object' ? def.shape?.[segment] : undefined;
      return child === undefined ? [] : unwrap(child);
    });
  }
  return [...new Set(reached.flatMap((def) => (def.type === 'object' ? Object.keys(def.shape ?? {}) : [])))];
}

/** The objects and arrays under defaults, optionals, transforms and preprocessing. */
function unwrap(schema: Schema): Def[] {
  const def = schema._zod.def as unknown as Def;
  if (def.type === 'object' || def.type === 'array') return [def];
  if (def.type === 'pipe') return [...(def.in === undefined ? [] : unwrap(def.in)), ...(def.out === undefined ? [] : unwrap(def.out))];
  return def.innerType === undefined ? [] : unwrap(def.innerType);
}
