/**
 * Password hashing with scrypt (N=2^14, r=8, p=1, 32-byte output, 16-byte salt).
 * Stored as `scrypt$N$r$p$salt$hash` (base64url parts) so parameters can change later.
 */
import { randomBytes, scrypt, scryptSync, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { promisify } from 'node:util';

const N = 16384;
const R = 8;
const P = 1;
const LENGTH = 32;

/** Longer passwords are refused before hashing: scrypt's cost must not be the client's to choose. */
export const PASSWORD_MAX = 1024;

export function hashPassword(password: string): string {
  const salt = randomBytes(16);
  const hash = scryptSync(password, salt, LENGTH, { N, r: R, p: P });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

export function verifyPassword(password: string, stored: string): boolean {
  const parsed = parseHash(stored);
  if (parsed === null) return false;
  const actual = scryptSync(password, parsed.salt, LENGTH, parsed.options);
  return timingSafeEqual(actual, parsed.expected);
}

interface ParsedHash {
  salt: Buffer;
  expected: Buffer;
  options: ScryptOptions;
}

function parseHash(stored: string): ParsedHash | null {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return null;
  const [n, r, p] = [Number(parts[1]), Number(parts[2]), Number(parts[3])];
  if (![n, r, p].every((x) => Number.isSafeInteger(x) && x > 0) || n > 2 ** 20) return null;
  const expected = Buffer.from(parts[5]!, 'base64url');
  if (expected.length !== LENGTH) return null;
  return { salt: Buffer.from(parts[4]!, 'base64url'), expected, options: { N: n, r, p, maxmem: 256 * n * r + 1024 * 1024 } };
}

const scryptAsync = promisify(scrypt) as (password: string, salt: Buffer, length: number, options: ScryptOptions) => Promise<Buffer>;

/**
 * verifyPassword off the event loop (libuv's thread pool): one scrypt takes tens of
 * milliseconds, which on the main thread would stall every other request for a login.
 */
export async function verifyPasswordAsync(password: string, stored: string): Promise<boolean> {
  const parsed = parseHash(stored);
  if (parsed === null) return false;
  const actual = await scryptAsync(password, parsed.salt, LENGTH, parsed.options);
  return timingSafeEqual(actual, parsed.expected);
}

/**
 * A well-formed hash with the current parameters that no password matches, to verify
 * against when there is no user: an unknown email then costs what a wrong password costs.
 */
export function unusablePasswordHash(): string {
  return `scrypt$${N}$${R}$${P}$${randomBytes(16).toString('base64url')}$${randomBytes(LENGTH).toString('base64url')}`;
}

/** hashPassword off the event loop, for the same reason (a seed reload while serving). */
export async function hashPasswordAsync(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scryptAsync(password, salt, LENGTH, { N, r: R, p: P });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}
