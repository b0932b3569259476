/**
 * Small helpers shared by the repositories: timestamps, BLOB and JSON column
 * conversion, and recognising constraint violations.
 */

/**
 * Every timestamp column holds `Date#toISOString()` output. One fixed format is what
 * makes `created_at < ?` comparisons on TEXT columns correct.
 */
export function nowIso(): string {
  // Every logged request asks: one Date and one string per millisecond, not per call.
  const ms = Date.now();
  if (ms !== lastIsoMs) {
    lastIsoMs = ms;
    lastIso = new Date(ms).toISOString();
  }
  return lastIso;
}
let lastIsoMs = Number.NaN;
let lastIso = '';

/** node:sqlite returns BLOBs as Uint8Array; callers want Buffers (for `equals`, `toString`). */
export function toBuffer(value: Uint8Array): Buffer {
  return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

export function toBufferOrNull(value: Uint8Array | null): Buffer | null {
  return value === null ? null : toBuffer(value);
}

export function parseJsonArray<T>(text: string): T[] {
  const value: unknown = JSON.parse(text);
  return Array.isArray(value) ? (value as T[]) : [];
}

export function parseJsonObject(text: string): Record<string, unknown> {
  const value: unknown = JSON.parse(text);
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** A constraint of the schema that a write broke. */
export type ConstraintKind = 'unique' | 'check' | 'foreign-key' | 'not-null';

/** SQLite's extended result codes (https://www.sqlite.org/rescode.html) for each kind. */
const SQLITE_CONSTRAINTS: ReadonlyMap<number, ConstraintKind> = new Map([
  [1555, 'unique'], // SQLITE_CONSTRAINT_PRIMARYKEY
  [2067, 'unique'], // SQLITE_CONSTRAINT_UNIQUE
  [275, 'check'], // SQLITE_CONSTRAINT_CHECK
  [787, 'foreign-key'], // SQLITE_CONSTRAINT_FOREIGNKEY
  [1299, 'not-null'], // SQLITE_CONSTRAINT_NOTNULL
]);

/** PostgreSQL's SQLSTATE codes (class 23, integrity constraint violation) for each kind. */
const POSTGRES_CONSTRAINTS: ReadonlyMap<string, ConstraintKind> = new Map([
  ['23505', 'unique'],
  ['23514', 'check'],
  ['23503', 'foreign-key'],
  ['23502', 'not-null'],
]);

/** Which constraint `error` reports broken, whichever database raised it; null for any other error. */
export function constraintViolated(error: unknown): ConstraintKind | null {
  if (!(error instanceof Error)) return null;
  if ('errcode' in error && typeof error.errcode === 'number') return SQLITE_CONSTRAINTS.get(error.errcode) ?? null;
  if ('code' in error && typeof error.code === 'string') return POSTGRES_CONSTRAINTS.get(error.code) ?? null;
  return null;
}

/**
 * True when `error` is a UNIQUE or PRIMARY KEY violation, so callers (the API) can turn
 * a race between "check name is free" and "insert" into a validation error.
 */
export function isUniqueViolation(error: unknown): boolean {
  return constraintViolated(error) === 'unique';
}

/** Copy only the keys whose value is not `undefined`, so `{ name: undefined }` leaves `name` alone. */
export function definedOnly<T extends object>(patch: T): Partial<T> {
  const out: Partial<T> = {};
  for (const key of Object.keys(patch) as Array<keyof T>) {
    if (patch[key] !== undefined) out[key] = patch[key];
  }
  return out;
}

/**
 * Who wrote a row: the management API, the seed in the config file, or a control-plane
 * snapshot. Reconciliation only ever removes rows that carry its own source.
 */
export type RowSource = 'api' | 'seed' | 'control-plane';
