/**
 * Query values that hold JSON (`filter={"ssn":"…"}`, as LoopBack-style and many hand-made
 * APIs read them): the application parses the value and binds what is inside, so the relay
 * guard looks inside too. A value is read as JSON when, trimmed, it starts with `{` or `[`
 * and parses; then every scalar at or below a protected key (matched as the guard matches
 * keys, protected-keys.ts) is a protected value. A string inside that itself holds JSON is
 * read the same way, to a bounded depth. Such values cannot be encrypted in place (the
 * application's parser owns the text), so a plaintext one is refused.
 */
import { protectedKeyOf } from './protected-keys.ts';

/** Depth of arrays, objects and JSON-in-strings walked; deeper counts as protected. */
const MAX_DEPTH = 64;

/**
 * The first protected key in `text` read as JSON whose value `isToken` does not accept, or
 * undefined when there is none (or `text` is not JSON). Past MAX_DEPTH, the first
 * configured key is answered: what cannot be looked at is not vouched for.
 */
export function plaintextInEmbeddedJson(text: string, keys: readonly string[], isToken: (value: string) => boolean): string | undefined {
  const parsed = parseJson(text);
  return parsed === NOT_JSON ? undefined : walk(parsed, keys, isToken, null, 0);
}

const NOT_JSON = Symbol('not JSON');

function parseJson(text: string): unknown {
  const trimmed = text.trimStart();
  if (!trimmed.startsWith('{') && !trimmed.startsWith('[')) return NOT_JSON;
  try {
    return JSON.parse(trimmed);
  } catch {
    return NOT_JSON;
  }
}

function walk(value: unknown, keys: readonly string[], isToken: (value: string) => boolean, under: string | null, depth: number): string | undefined {
  if (depth > MAX_DEPTH) return keys[0];
  if (value === null) return undefined;
  if (Array.isArray(value)) {
    for (const item of value) {
      const found = walk(item, keys, isToken, under, depth + 1);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (typeof value === 'object') {
    for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
      const found = walk(item, keys, isToken, protectedKeyOf(keys, key) ?? under, depth + 1);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (typeof value === 'string') {
    const inner = parseJson(value);
    if (inner !== NOT_JSON) {
      const found = walk(inner, keys, isToken, under, depth + 1);
      if (found !== undefined || under === null) return found;
    }
    return under !== null && !isToken(value) ? under : undefined;
  }
  // Numbers and booleans under a protected key are plaintext.
  return under ?? undefined;
}
