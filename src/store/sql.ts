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

/** Extended result codes from https://www.sqlite.org/rescode.html. */
const SQLITE_CONSTRAINT_PRIMARYKEY = 1555;
const SQLITE_CONSTRAINT_UNIQUE = 2067;

/**
 * True when `error` is a UNIQUE or PRIMARY KEY violation, so callers (the API) can turn
 * a race between "check name is free" and "insert" into a validation error.
 */
export function isUniqueViolation(error: unknown): boolean {
  if (!(error instanceof Error) || !('errcode' in error)) return false;
  return error.errcode === SQLITE_CONSTRAINT_UNIQUE || error.errcode === SQLITE_CONSTRAINT_PRIMARYKEY;
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
