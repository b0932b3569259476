/**
 * Requests built from the OpenAPI document, for the contract test
 * (test/api/openapi-contract.test.ts): a valid instance of a request schema, and the
 * mutations of it that the document says are invalid (or, for an open object, valid).
 *
 * Generation is deterministic: the first `examples` entry, `const`, the first `enum`
 * value or `default` when the schema gives one; else the smallest value its bounds allow,
 * with every plain string unique (`sample-<n>`), so names never collide. What a schema
 * cannot know (an id that exists, a group of a provider) comes from a hint.
 */
import { follow, isObject, refPointer, schemaAccepts, type Obj } from './openapi-validator.ts';

/** Returned by a hint: leave the property out. */
export const OMIT: unique symbol = Symbol('omit');

/** A value for the property at `path` (its names from the body's root), or undefined to generate one. */
export type Hint = (path: readonly string[], schema: Obj) => unknown;

export interface GenerateOptions {
  /** Every property of every object, not only the required ones; arrays get one item. */
  readonly full: boolean;
  readonly hint?: Hint;
}

let counter = 0;

/** A unique plain string within the bounds of `schema`. */
function sampleString(schema: Obj): string {
  counter += 1;
  const min = typeof schema['minLength'] === 'number' ? schema['minLength'] : 1;
  const max = typeof schema['maxLength'] === 'number' ? schema['maxLength'] : 64;
  const base = `sample-${counter}`;
  return (base.length < min ? base.padEnd(min, 'x') : base).slice(0, max);
}

/** The schema at `ptr`, with `$ref`s followed, as a pointer and object. */
function resolved(schema: Obj): Obj {
  let at = schema;
  for (let hops = 0; typeof at['$ref'] === 'string' && hops < 16; hops++) at = follow(refPointer(at['$ref'])).value;
  return at;
}

/** A valid instance of the schema at `ptr` (a pointer into the document). */
export function generate(ptr: string, options: GenerateOptions): unknown {
  return generateFrom(follow(ptr).value, [], options);
}

function generateFrom(raw: Obj, path: readonly string[], options: GenerateOptions): unknown {
  const schema = resolved(raw);
  const hinted = options.hint?.(path, schema);
  if (hinted !== undefined) return hinted;
  if (Array.isArray(schema['examples']) && schema['examples'].length > 0) return structuredClone(schema['examples'][0]);
  if (Object.hasOwn(schema, 'const')) return schema['const'];
  if (Array.isArray(schema['enum'])) return schema['enum'][0];
  if (Object.hasOwn(schema, 'default')) return schema['default'];
  for (const keyword of ['anyOf', 'oneOf', 'allOf']) {
    if (Array.isArray(schema[keyword])) return generateFrom(schema[keyword][0] as Obj, path, options);
  }
  const types = Array.isArray(schema['type']) ? (schema['type'] as string[]) : [schema['type'] as string];
  const type = types.find((t) => t !== 'null') ?? types[0];
  switch (type) {
    case 'string':
      switch (schema['format']) {
        case 'date-time':
          return new Date().toISOString();
        case 'uri':
          return 'https://example.com/';
        case undefined:
          if (typeof schema['pattern'] === 'string') throw new Error(`${path.join('.') || '$'}: a patterned string needs examples or a hint`);
          return sampleString(schema);
        default:
          throw new Error(`${path.join('.') || '$'}: a ${String(schema['format'])} needs a hint`);
      }
    case 'integer':
    case 'number':
      return typeof schema['minimum'] === 'number' ? schema['minimum'] : type === 'integer' ? 1 : 0;
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'array': {
      const min = typeof schema['minItems'] === 'number' ? schema['minItems'] : 0;
      const length = Math.max(min, options.full ? 1 : 0);
      return Array.from({ length }, (_, i) => generateFrom((schema['items'] as Obj | undefined) ?? {}, [...path, String(i)], options));
    }
    case 'object':
    case undefined: {
      const properties = isObject(schema['properties']) ? (schema['properties'] as Record<string, Obj>) : {};
      const required = new Set((schema['required'] as string[] | undefined) ?? []);
      const out: Obj = {};
      for (const [name, sub] of Object.entries(properties)) {
        if (!options.full && !required.has(name)) continue;
        const value = generateFrom(sub, [...path, name], options);
        if (value !== OMIT) out[name] = value;
      }
      return out;
    }
    default:
      throw new Error(`${path.join('.') || '$'}: cannot generate a ${String(type)}`);
  }
}

// ---------------------------------------------------------------------------------------
// Mutations

export interface Mutation {
  /** e.g. `without name`, `wrong type at api.0.status_code`, `above maximum at per_page`. */
  readonly label: string;
  readonly body: unknown;
  /** What the document says of the mutated body: valid or not. */
  readonly valid: boolean;
}

/**
 * The pointer of the schema that governs `value` at `ptr`: `$ref`s followed, and of an
 * `anyOf` or `oneOf` the branch `value` satisfies (the first, when none does).
 */
function governing(ptr: string, value: unknown): string {
  let current = follow(ptr).ptr;
  for (let depth = 0; depth < 16; depth++) {
    const schema = follow(current).value;
    const keyword = Array.isArray(schema['anyOf']) ? 'anyOf' : Array.isArray(schema['oneOf']) ? 'oneOf' : null;
    if (keyword === null) return current;
    const branches = (schema[keyword] as unknown[]).map((_, i) => `${current}/${keyword}/${i}`);
    current = follow(branches.find((b) => schemaAccepts(b, value)) ?? branches[0]!).ptr;
  }
  return current;
}

/** The schema of `key` inside the object or array governed by `ptr`, if the schema names one. */
function childSchema(ptr: string, key: string | number): string | undefined {
  const schema = follow(ptr).value;
  if (typeof key === 'number') return schema['items'] === undefined ? undefined : `${ptr}/items`;
  if (isObject(schema['properties']) && Object.hasOwn(schema['properties'], key)) return `${ptr}/properties/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`;
  return isObject(schema['additionalProperties']) ? `${ptr}/additionalProperties` : undefined;
}

/** Every object and array in `value` with its path and governing schema (when known). */
function* nodesIn(value: unknown, ptr: string | undefined, path: readonly (string | number)[] = []): Generator<[unknown, readonly (string | number)[], string | undefined]> {
  const schema = ptr === undefined ? undefined : governing(ptr, value);
  yield [value, path, schema];
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) yield* nodesIn(item, schema === undefined ? undefined : childSchema(schema, i), [...path, i]);
  } else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) yield* nodesIn(v, schema === undefined ? undefined : childSchema(schema, k), [...path, k]);
  }
}

/** A copy of `root` with `change` applied to the object at `path`. */
function changed(root: unknown, path: readonly (string | number)[], change: (target: Obj) => void): unknown {
  const copy = structuredClone(root);
  let at: unknown = copy;
  for (const key of path) at = (at as Record<string | number, unknown>)[key];
  change(at as Obj);
  return copy;
}

/** Values of every JSON type, for "wrong type": the first one the document refuses is used. */
const WRONG = [12345, 'text', true, { nested: 1 }, [1, 2], 1.5];

/** A unique string of exactly `length` characters (names must not collide). */
function uniqueOfLength(length: number): string {
  counter += 1;
  return `u${counter}-`.padEnd(length, 'x').slice(0, length);
}

/**
 * Values at the bounds a schema sets, which it takes, and just outside them, which it
 * refuses; each with what it is. Both sides matter: a bound the service draws tighter or
 * looser than the document shows on one of them.
 */
function boundaries(ptr: string, value: unknown): Array<[string, unknown]> {
  const s = follow(ptr).value;
  const out: Array<[string, unknown]> = [];
  if (typeof s['maxLength'] === 'number') out.push(['as long as maxLength', uniqueOfLength(s['maxLength'])], ['longer than maxLength', 'x'.repeat(s['maxLength'] + 1)]);
  if (typeof s['minLength'] === 'number' && s['minLength'] > 0) out.push(['shorter than minLength', 'x'.repeat(s['minLength'] - 1)]);
  if (typeof s['pattern'] === 'string') out.push(['not matching its pattern', '\u0000 !']);
  if (Array.isArray(s['enum'])) out.push(['not in its enum', 'not-a-choice']);
  if (Object.hasOwn(s, 'const')) out.push(['not its const', 'not-the-const']);
  if (typeof s['format'] === 'string') out.push([`not a ${String(s['format'])}`, 'not a valid value']);
  if (typeof s['minimum'] === 'number') out.push(['below minimum', s['minimum'] - 1]);
  if (typeof s['maximum'] === 'number') out.push(['at maximum', s['maximum']], ['above maximum', s['maximum'] + 1]);
  if (s['type'] === 'integer' || (Array.isArray(s['type']) && s['type'].includes('integer') && !s['type'].includes('number'))) out.push(['not an integer', 1.5]);
  if (Array.isArray(value)) {
    const item = value[0];
    if (typeof s['maxItems'] === 'number' && item !== undefined) {
      out.push(['as many as maxItems', Array.from({ length: s['maxItems'] }, () => structuredClone(item))]);
      out.push(['more than maxItems', Array.from({ length: s['maxItems'] + 1 }, () => structuredClone(item))]);
    }
    if (typeof s['minItems'] === 'number' && s['minItems'] > 0) out.push(['fewer than minItems', value.slice(0, s['minItems'] - 1)]);
  }
  return out;
}

/**
 * The mutations of a valid body: each property removed, each property of a wrong type, at
 * its bounds and just outside them, an unknown field in each object. `valid` is the document's
 * verdict on the result, checked by ajv; a change the document still takes (a removed
 * optional field, an unknown field of an open object) is a valid mutation.
 */
export function mutations(ptr: string, body: unknown): Mutation[] {
  const out: Mutation[] = [];
  const verdict = (candidate: unknown) => schemaAccepts(ptr, candidate);
  for (const [node, path, schema] of nodesIn(body, ptr)) {
    const where = (key: string | number) => [...path, key].join('.');
    if (Array.isArray(node)) {
      // The first item of a list of scalars stands for them all (objects are visited on their own).
      const first = node[0];
      const child = schema === undefined ? undefined : childSchema(schema, 0);
      if (first === undefined || isObject(first) || Array.isArray(first) || child === undefined) continue;
      const replaced = (value: unknown) => changed(body, path, (a) => ((a as unknown as unknown[])[0] = value));
      const wrong = WRONG.map(replaced).find((candidate) => !verdict(candidate));
      if (wrong !== undefined) out.push({ label: `wrong type at ${where(0)}`, body: wrong, valid: false });
      for (const [what, value] of boundaries(governing(child, first), first)) {
        const candidate = replaced(value);
        out.push({ label: `${what} at ${where(0)}`, body: candidate, valid: verdict(candidate) });
      }
      continue;
    }
    if (!isObject(node)) continue;
    for (const [key, value] of Object.entries(node)) {
      const without = changed(body, path, (o) => delete o[key]);
      out.push({ label: `without ${where(key)}`, body: without, valid: verdict(without) });
      const wrong = WRONG.map((w) => changed(body, path, (o) => (o[key] = w))).find((candidate) => !verdict(candidate));
      if (wrong !== undefined) out.push({ label: `wrong type at ${where(key)}`, body: wrong, valid: false });
      const child = schema === undefined ? undefined : childSchema(schema, key);
      if (child === undefined) continue;
      for (const [what, bound] of boundaries(governing(child, value), value)) {
        // The document's verdict decides, not the label: another branch of an anyOf may take a value.
        const candidate = changed(body, path, (o) => (o[key] = bound));
        out.push({ label: `${what} at ${where(key)}`, body: candidate, valid: verdict(candidate) });
      }
    }
    const extra = changed(body, path, (o) => (o['unknown_field'] = 'x'));
    out.push({ label: `unknown field ${where('unknown_field')}`, body: extra, valid: verdict(extra) });
  }
  return out;
}
