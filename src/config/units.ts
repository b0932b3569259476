/**
 * Human-friendly durations and sizes in the config file. Both parse to plain integers
 * (milliseconds, bytes) so the rest of the code never sees a unit.
 *
 * A bare number is already in the base unit, whether YAML gave us a number or a string
 * (a value that came through `${VAR}` interpolation is always a string).
 */

const DURATION_UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

// Binary multiples: a "10mb" body limit is what operators mean when they compare it
// with file sizes shown by ls/du, and it matches how Node documents maxHeaderSize (16 KiB).
const SIZE_UNITS: Readonly<Record<string, number>> = {
  b: 1,
  kb: 1024,
  mb: 1024 ** 2,
  gb: 1024 ** 3,
};

const DURATION_PATTERN = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/i;
const SIZE_PATTERN = /^(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?$/i;

const DURATION_HINT = 'expected a duration such as 500ms, 5s, 15m, 2h, 30d, or a whole number of milliseconds';
const SIZE_HINT = 'expected a size such as 100b, 512kb, 10mb, 1gb, or a whole number of bytes';

/** Parses `500ms`, `5s`, `15m`, `2h`, `30d` or a bare integer (milliseconds) into milliseconds. */
export function parseDuration(input: unknown): number {
  return parseWithUnits(input, DURATION_PATTERN, DURATION_UNITS, DURATION_HINT, 'milliseconds');
}

/** Parses `100b`, `512kb`, `10mb`, `1gb` or a bare integer (bytes) into bytes. Case-insensitive. */
export function parseSize(input: unknown): number {
  return parseWithUnits(input, SIZE_PATTERN, SIZE_UNITS, SIZE_HINT, 'bytes');
}

function parseWithUnits(
  input: unknown,
  pattern: RegExp,
  units: Readonly<Record<string, number>>,
  hint: string,
  baseUnit: string,
): number {
  if (typeof input === 'number') {
    if (Number.isSafeInteger(input) && input >= 0) return input;
    throw new RangeError(`${hint}, got ${input}`);
  }
  if (typeof input !== 'string') {
    throw new TypeError(`${hint}, got ${describe(input)}`);
  }
  const match = pattern.exec(input.trim());
  if (match === null) {
    throw new RangeError(`${hint}, got ${JSON.stringify(input)}`);
  }
  const [, amount = '', unit] = match;
  // A fraction needs a unit: "1.5" alone would be a fraction of the base unit.
  if (unit === undefined && amount.includes('.')) {
    throw new RangeError(`${hint}, got ${JSON.stringify(input)}`);
  }
  const multiplier = unit === undefined ? 1 : (units[unit.toLowerCase()] ?? Number.NaN);
  // Whole and fractional parts separately: 1.1 * 1000 is 1100.0000000000002 in floating
  // point, while 1 * 1000 + (1 * 1000) / 10 is exactly 1100.
  const [whole = '', fraction = ''] = amount.split('.');
  const value = Number(whole) * multiplier + (Number(fraction || '0') * multiplier) / 10 ** fraction.length;
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`${JSON.stringify(input)} is not a whole number of ${baseUnit} or is too large`);
  }
  return value;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return `a ${typeof value}`;
}
